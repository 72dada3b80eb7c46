//! What an embeddings call returns.

use serde::{Deserialize, Serialize};

use super::response::UsageSource;

/// Vectors for a list of texts, in input order, merged across batches (docs/behaviour.md §2.1).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::collections::BTreeMap;
/// use polygateway::config::Settings;
/// use polygateway_testkit::{Behaviour, MockUpstream};
/// use polygateway::{Gateway, UsageSource};
/// let mock = MockUpstream::start(Behaviour::healthy()).await;
/// let base_url = mock.base_url();
/// let map: BTreeMap<String, String> = [
///     ("PGW_LIMITER_BACKEND", "memory"),
///     ("PGW_BREAKER_BACKEND", "memory"),
///     ("PGW_TELEMETRY_BACKEND", "none"),
///     ("EMBED__OPENAI__1__BASE_URL", base_url.as_str()),
///     ("EMBED__OPENAI__1__API_KEY", "sk-test"),
///     ("EMBED__OPENAI__1__MODEL", "embed-model"),
///     ("EMBED__BATCH_SIZE", "2"),
/// ]
/// .into_iter()
/// .map(|(k, v)| (k.to_string(), v.to_string()))
/// .collect();
/// let gw = Gateway::from_settings(Settings::from_map(&map).unwrap(), "EMBED").await.unwrap();
/// let out = gw.embed(vec!["red".into(), "green".into(), "blue".into()]).await.unwrap();
/// // Two batches (2 + 1 texts), merged back into one vector per text, in input order.
/// assert_eq!(out.vectors.len(), 3);
/// assert!(out.vectors.iter().all(|v| v.len() == out.dim));
/// assert_eq!((out.model.as_str(), out.source_name.as_str()), ("embed-model", "openai_1"));
/// assert_eq!(out.usage_source, UsageSource::Measured);
/// gw.shutdown().await;
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct EmbeddingResponse {
    /// One vector per input text, same order.
    pub vectors: Vec<Vec<f32>>,
    /// Vector dimension.
    pub dim: usize,
    /// Configured model.
    pub model: String,
    /// Provider name.
    pub provider: String,
    /// Summed prompt tokens over batches.
    pub prompt_tokens: u64,
    /// `measured` only if every batch reported usage.
    pub usage_source: UsageSource,
    /// Wall time of the whole call.
    pub latency_ms: f64,
    /// Time the call waited for capacity (pacer slot, quota gate, cooldown, 429 pushback): the
    /// longest wait of any batch, since batches run concurrently and `latency_ms` includes it.
    #[serde(default)]
    pub capacity_wait_ms: f64,
    /// Call id of the last batch attempt.
    pub call_id: String,
    /// Source of the last batch (batches may land on different sources).
    pub source_name: String,
}
