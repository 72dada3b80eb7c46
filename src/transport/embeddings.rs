//! The OpenAI-compatible embeddings transport (docs/behaviour.md §7.3): one batch, `POST {base}/embeddings`
//! with `{model, input}`, vectors returned in input order.
//!
//! Batching, merging batches, `EXPECTED_DIM` and `NORMALIZE` are applied by the runtime (with
//! `check_dim` and `l2_normalize` from here); this file performs one attempt for one batch.

use std::sync::Arc;

use async_trait::async_trait;
use polygateway_actors::{EventSink, Transport};
use serde::{Deserialize, Serialize};

use super::dialect::gemini::{self, embed as gemini_embed};
use super::endpoint::JsonEndpoint;
use super::http::AnswerReader;
use super::pool::SourcePool;
use super::watchdog::{now, StallLimits, Watchdog};
use super::TransportConfig;
use crate::error::TransportError;
use crate::provider::{Dialect, ProviderProfile};
use crate::types::UsageSource;

/// One batch of texts to embed.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::sync::Arc;
/// use polygateway::ports::Transport;
/// use polygateway::transport::embeddings::{EmbeddingTransport, EmbeddingWireRequest};
/// use polygateway::transport::TransportConfig;
/// let request = EmbeddingWireRequest { inputs: Arc::new(vec!["first".into(), "second".into()]) };
/// // Attempts share the texts instead of copying them.
/// assert!(Arc::ptr_eq(&request.clone().inputs, &request.inputs));
/// // An empty batch is answered locally: nothing is sent (nothing listens on port 9).
/// let settings = polygateway_testkit::source_settings("http://127.0.0.1:9/v1");
/// let transport = EmbeddingTransport::new(TransportConfig::from(&settings));
/// let empty = EmbeddingWireRequest { inputs: Arc::new(Vec::new()) };
/// assert!(transport.send(&empty, None).await.unwrap().vectors.is_empty());
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbeddingWireRequest {
    /// The texts, shared between attempts without copying.
    pub inputs: Arc<Vec<String>>,
}

/// One batch's vectors, in input order.
///
/// ```
/// use polygateway::transport::embeddings::EmbeddingBatch;
/// use polygateway::UsageSource;
/// let batch = EmbeddingBatch {
///     vectors: vec![vec![3.0, 4.0], vec![0.0, 2.0]],
///     prompt_tokens: 7,
///     usage_source: UsageSource::Measured,
///     model_reported: Some("text-embedding-3-small".into()),
///     latency_ms: 12.5,
/// };
/// // One vector per input, in input order; the gateway then checks EXPECTED_DIM and applies
/// // NORMALIZE to them.
/// assert_eq!(batch.vectors.len(), 2);
/// assert_eq!(batch.prompt_tokens, 7);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct EmbeddingBatch {
    /// One vector per input.
    pub vectors: Vec<Vec<f32>>,
    /// `usage.prompt_tokens` (0 when unavailable).
    pub prompt_tokens: u64,
    /// `measured` when the upstream reported usage, else `unavailable`.
    pub usage_source: UsageSource,
    /// The `model` field of the answer.
    pub model_reported: Option<String>,
    /// Wall time of the attempt.
    pub latency_ms: f64,
}

/// The embeddings transport of one source.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::sync::Arc;
/// use polygateway::ports::Transport;
/// use polygateway_testkit::{mock_embedding, Behaviour, MockUpstream};
/// use polygateway::transport::embeddings::{EmbeddingTransport, EmbeddingWireRequest};
/// use polygateway::transport::TransportConfig;
/// use polygateway::UsageSource;
/// // The mock answers its items in reverse order; the transport restores input order.
/// let mock = MockUpstream::start(Behaviour::healthy()).await;
/// let settings = polygateway_testkit::source_settings(&mock.base_url());
/// let transport = EmbeddingTransport::new(TransportConfig::from(&settings));
/// let request = EmbeddingWireRequest { inputs: Arc::new(vec!["alpha".into(), "beta".into()]) };
/// let batch = transport.send(&request, None).await.unwrap();
/// assert_eq!(batch.vectors, vec![mock_embedding("alpha", 8), mock_embedding("beta", 8)]);
/// assert_eq!(batch.usage_source, UsageSource::Measured);
/// assert_eq!(EmbeddingTransport::tokens_used(&batch), Some(batch.prompt_tokens));
/// # }
/// ```
pub struct EmbeddingTransport {
    /// Shared with the endpoint's pool and re-sender, which rebuild clients from it.
    config: Arc<TransportConfig>,
    endpoint: JsonEndpoint,
    wire: Wire,
}

/// The API a source's embeddings speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wire {
    /// `POST {base}/embeddings` with `{model, input}` (OpenAI and every compatible server).
    OpenAi,
    /// `POST {base}/models/{model}:batchEmbedContents`; `dimensions` is the scope's
    /// `EXPECTED_DIM`, asked of the model as `outputDimensionality`.
    Gemini { dimensions: Option<usize> },
}

impl std::fmt::Debug for EmbeddingTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddingTransport")
            .field("source", &self.config.name)
            .field("url", &self.endpoint.url())
            .field("wire", &self.wire)
            .finish_non_exhaustive()
    }
}

#[derive(Serialize)]
struct WireBody<'a> {
    model: &'a str,
    input: &'a [String],
}

#[derive(Deserialize)]
struct WireAnswer {
    data: Vec<WireItem>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct WireItem {
    #[serde(default)]
    index: Option<usize>,
    embedding: Vec<f32>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
}

impl EmbeddingTransport {
    /// A transport with its own client, for the source `config` describes
    /// (`TransportConfig::from(&source_settings)` for a configured source), speaking
    /// `config.dialect` (OpenAI's API when unset).
    ///
    /// ```
    /// use polygateway::transport::embeddings::EmbeddingTransport;
    /// use polygateway::transport::TransportConfig;
    /// let settings = polygateway_testkit::source_settings("http://127.0.0.1:9/v1");
    /// // Builds the source's own client; nothing is contacted yet.
    /// let transport = EmbeddingTransport::new(TransportConfig::from(&settings));
    /// assert_eq!(transport.url(), "http://127.0.0.1:9/v1/embeddings");
    /// ```
    pub fn new(config: TransportConfig) -> Self {
        let config = Arc::new(config);
        let pool = SourcePool::built(&config);
        let dialect = config.dialect.unwrap_or_default();
        Self::with_pool(config, pool, dialect, None)
    }

    /// The transport of a configured source: its dialect from the source or its provider
    /// (`DIALECT`, [`ProviderProfile::dialect`]), and the scope's `EXPECTED_DIM`, which a Gemini
    /// source is asked for. An Anthropic source has no embeddings API: it is refused when the
    /// scope is built, before this.
    pub(crate) fn for_source(
        config: TransportConfig,
        profile: &ProviderProfile,
        expected_dim: Option<usize>,
    ) -> Self {
        let config = Arc::new(config);
        let pool = SourcePool::built(&config);
        let dialect = profile.dialect_for(config.dialect);
        Self::with_pool(config, pool, dialect, expected_dim)
    }

    /// A transport using a given client, used as it is (its idle timeout does not follow the
    /// upstream's `Keep-Alive`, unlike the transport's own).
    ///
    /// ```
    /// use polygateway_testkit::source_settings;
    /// use polygateway::transport::embeddings::EmbeddingTransport;
    /// use polygateway::transport::TransportConfig;
    /// let config = |url: &str| TransportConfig::from(&source_settings(url));
    /// // Two sources on one connection pool (e.g. in a benchmark).
    /// let client = reqwest::Client::builder().no_proxy().build().unwrap();
    /// let a = EmbeddingTransport::with_client(config("http://10.0.0.1/v1"), client.clone());
    /// let b = EmbeddingTransport::with_client(config("http://10.0.0.2/v1"), client);
    /// assert_ne!(a.url(), b.url());
    /// ```
    pub fn with_client(config: TransportConfig, client: reqwest::Client) -> Self {
        let dialect = config.dialect.unwrap_or_default();
        Self::with_pool(Arc::new(config), SourcePool::given(client), dialect, None)
    }

    fn with_pool(
        config: Arc<TransportConfig>,
        pool: SourcePool,
        dialect: Dialect,
        expected_dim: Option<usize>,
    ) -> Self {
        let (endpoint, wire) = match dialect {
            Dialect::Gemini => (
                JsonEndpoint::keyed(
                    &config,
                    pool,
                    &gemini_embed::path(gemini::model_id(&config)),
                    gemini::KEY_HEADER,
                ),
                Wire::Gemini {
                    dimensions: expected_dim,
                },
            ),
            _ => (JsonEndpoint::new(&config, pool, "embeddings"), Wire::OpenAi),
        };
        Self {
            config,
            endpoint,
            wire,
        }
    }

    /// The source's pool idle timeout now (`POOL_IDLE_TIMEOUT_S`, or lower after the upstream
    /// announced a shorter `Keep-Alive: timeout=`); `None` for a client given by the application.
    pub(crate) fn pool_idle_timeout(&self) -> Option<std::time::Duration> {
        self.endpoint.pool_idle_timeout()
    }

    /// The transport's configuration.
    ///
    /// ```
    /// use polygateway::transport::embeddings::EmbeddingTransport;
    /// use polygateway::transport::TransportConfig;
    /// let settings = polygateway_testkit::source_settings("http://127.0.0.1:9/v1");
    /// let transport = EmbeddingTransport::new(TransportConfig::from(&settings));
    /// // The model sent in every request body.
    /// assert_eq!(transport.config().model, "test-model");
    /// ```
    pub fn config(&self) -> &TransportConfig {
        &self.config
    }

    /// The endpoint URL.
    ///
    /// ```
    /// use polygateway::transport::embeddings::EmbeddingTransport;
    /// use polygateway::transport::TransportConfig;
    /// let settings = polygateway_testkit::source_settings("https://api.example.com/v1/");
    /// let transport = EmbeddingTransport::new(TransportConfig::from(&settings));
    /// assert_eq!(transport.url(), "https://api.example.com/v1/embeddings");
    /// ```
    pub fn url(&self) -> &str {
        self.endpoint.url()
    }
}

/// Order the answer's items by `index` and check there is exactly one per input.
fn into_vectors(items: Vec<WireItem>, expected: usize) -> Result<Vec<Vec<f32>>, TransportError> {
    if items.len() != expected {
        return Err(TransportError::invalid(format!(
            "embeddings: {} vectors for {} inputs",
            items.len(),
            expected
        )));
    }
    let mut slots: Vec<Option<Vec<f32>>> = vec![None; expected];
    for (pos, item) in items.into_iter().enumerate() {
        // Items without an index are taken in answer order.
        let i = item.index.unwrap_or(pos);
        match slots.get_mut(i) {
            Some(slot @ None) => *slot = Some(item.embedding),
            Some(Some(_)) => {
                return Err(TransportError::invalid(format!(
                    "embeddings: index {i} answered twice"
                )))
            }
            None => {
                return Err(TransportError::invalid(format!(
                    "embeddings: index {i} out of range for {expected} inputs"
                )))
            }
        }
    }
    let vectors: Vec<Vec<f32>> = slots.into_iter().flatten().collect();
    if let Some(first) = vectors.first() {
        if first.is_empty() {
            return Err(TransportError::invalid("embeddings: empty vector"));
        }
        check_dim(&vectors, first.len())?;
    }
    Ok(vectors)
}

/// Every vector has `expected` components, else ResultInvalid naming the first offender.
pub(crate) fn check_dim(vectors: &[Vec<f32>], expected: usize) -> Result<(), TransportError> {
    match vectors.iter().position(|v| v.len() != expected) {
        None => Ok(()),
        Some(i) => Err(TransportError::invalid(format!(
            "embeddings: vector {i} has dim {}, expected {expected}",
            vectors[i].len()
        ))),
    }
}

/// Scale `vector` to unit L2 norm in place; an all-zero vector is left as is.
pub(crate) fn l2_normalize(vector: &mut [f32]) {
    let norm = vector
        .iter()
        .map(|x| f64::from(*x) * f64::from(*x))
        .sum::<f64>()
        .sqrt();
    if norm > 0.0 && norm.is_finite() {
        for x in vector.iter_mut() {
            *x = (f64::from(*x) / norm) as f32;
        }
    }
}

#[async_trait]
impl Transport for EmbeddingTransport {
    type Request = EmbeddingWireRequest;
    type Response = EmbeddingBatch;
    type Event = ();
    type Error = TransportError;

    async fn send(
        &self,
        request: &EmbeddingWireRequest,
        _events: Option<&EventSink<()>>,
    ) -> Result<EmbeddingBatch, TransportError> {
        let wd = Watchdog::start(StallLimits::from_config(&self.config));
        if request.inputs.is_empty() {
            // Nothing to embed is a legitimate empty answer; nothing is sent.
            return Ok(EmbeddingBatch {
                vectors: Vec::new(),
                prompt_tokens: 0,
                usage_source: UsageSource::Unavailable,
                model_reported: None,
                latency_ms: 0.0,
            });
        }
        let (body, reader) = match self.wire {
            Wire::OpenAi => (
                serde_json::to_vec(&WireBody {
                    model: &self.config.model,
                    input: &request.inputs,
                }),
                AnswerReader::OPENAI,
            ),
            Wire::Gemini { dimensions } => (
                serde_json::to_vec(&gemini_embed::encode(
                    gemini::model_id(&self.config),
                    &request.inputs,
                    dimensions,
                )),
                gemini::READER,
            ),
        };
        let body = body
            .map_err(|e| TransportError::rejected(format!("request body not serialisable: {e}")))?;
        let (bytes, _rate_limit) = wd
            .whole_body(self.endpoint.send(self.endpoint.post_json(body)?), reader)
            .await?;
        let (items, prompt_tokens, model_reported) = match self.wire {
            Wire::OpenAi => {
                let answer: WireAnswer = serde_json::from_slice(&bytes)
                    .map_err(|e| TransportError::malformed_body("embeddings", &e, &bytes))?;
                let tokens = answer.usage.as_ref().and_then(|u| u.prompt_tokens);
                (answer.data, tokens, answer.model.filter(|m| !m.is_empty()))
            }
            Wire::Gemini { .. } => {
                let answer = gemini_embed::decode(&bytes)?;
                // Gemini answers in request order and names no model.
                let items = answer
                    .vectors
                    .into_iter()
                    .map(|embedding| WireItem {
                        index: None,
                        embedding,
                    })
                    .collect();
                (items, answer.prompt_tokens, None)
            }
        };
        let vectors = into_vectors(items, request.inputs.len())?;
        Ok(EmbeddingBatch {
            vectors,
            prompt_tokens: prompt_tokens.unwrap_or(0),
            usage_source: if prompt_tokens.is_some() {
                UsageSource::Measured
            } else {
                UsageSource::Unavailable
            },
            model_reported,
            latency_ms: now()
                .saturating_duration_since(wd.clock().start())
                .as_secs_f64()
                * 1000.0,
        })
    }

    fn tokens_used(response: &EmbeddingBatch) -> Option<u64> {
        (response.usage_source == UsageSource::Measured).then_some(response.prompt_tokens)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use polygateway_actors::{Classify, FailureClass};

    fn item(index: Option<usize>, v: &[f32]) -> WireItem {
        WireItem {
            index,
            embedding: v.to_vec(),
        }
    }

    #[test]
    fn sorted_by_index() {
        let v = into_vectors(
            vec![
                item(Some(2), &[2.0]),
                item(Some(0), &[0.0]),
                item(Some(1), &[1.0]),
            ],
            3,
        )
        .unwrap();
        assert_eq!(v, vec![vec![0.0], vec![1.0], vec![2.0]]);
    }

    #[test]
    fn count_mismatch_duplicates_and_ragged_dims_are_invalid() {
        for (items, n) in [
            (vec![item(Some(0), &[1.0])], 2),
            (vec![item(Some(0), &[1.0]), item(Some(0), &[1.0])], 2),
            (vec![item(Some(0), &[1.0]), item(Some(5), &[1.0])], 2),
            (vec![item(Some(0), &[1.0]), item(Some(1), &[1.0, 2.0])], 2),
            (vec![item(None, &[])], 1),
        ] {
            let e = into_vectors(items, n).unwrap_err();
            assert_eq!(e.class(), FailureClass::ResultInvalid);
            assert!(e.proves_alive());
        }
    }

    #[test]
    fn normalize_zero_and_unit() {
        let mut z = vec![0.0f32; 4];
        l2_normalize(&mut z);
        assert_eq!(z, vec![0.0; 4]);
        let mut v = vec![1.0f32, 1.0, 1.0, 1.0];
        l2_normalize(&mut v);
        let n: f32 = v.iter().map(|x| x * x).sum();
        assert!((n - 1.0).abs() < 1e-6);
    }

    #[test]
    fn check_dim_names_the_offender() {
        let e = check_dim(&[vec![0.0; 2], vec![0.0; 3]], 2).unwrap_err();
        assert_eq!(e.class(), FailureClass::ResultInvalid);
        assert!(e.message.contains("vector 1 has dim 3"));
    }
}

/// The served-vector checks against the mock upstream (`testkit`): the dimension check and
/// normalisation work on what a real batch returns.
#[cfg(test)]
mod served {
    use std::sync::Arc;

    use polygateway_actors::{Classify, FailureClass, Transport};

    use super::*;
    use polygateway_testkit::{Behaviour, MockUpstream};

    #[tokio::test]
    async fn dimension_check_and_normalisation_on_served_vectors() {
        let mock = MockUpstream::start(Behaviour::healthy()).await;
        mock.set_embedding_dim(12);
        let mut b = EmbeddingTransport::new(TransportConfig::for_tests(&mock.base_url()))
            .send(
                &EmbeddingWireRequest {
                    inputs: Arc::new(vec!["a".to_string(), "b".to_string()]),
                },
                None,
            )
            .await
            .unwrap();
        assert!(check_dim(&b.vectors, 12).is_ok());
        let e = check_dim(&b.vectors, 1024).unwrap_err();
        assert_eq!(e.class(), FailureClass::ResultInvalid);
        for v in &mut b.vectors {
            l2_normalize(v);
            let norm: f32 = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            assert!((norm - 1.0).abs() < 1e-5, "norm {norm}");
        }
    }
}

#[cfg(test)]
mod examples {
    //! Usage cases of crate-private items (they were doc examples while the items were public).

    #[test]
    fn check_dim_example() {
        use crate::transport::embeddings::check_dim;
        assert!(check_dim(&[vec![0.0; 3], vec![1.0; 3]], 3).is_ok());
        assert!(check_dim(&[vec![0.0; 3], vec![1.0; 4]], 3).is_err());
    }

    #[test]
    fn l2_normalize_example() {
        use crate::transport::embeddings::l2_normalize;
        let mut v = vec![3.0, 4.0];
        l2_normalize(&mut v);
        assert_eq!(v, vec![0.6, 0.8]);
    }
}
