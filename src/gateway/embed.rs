//! The embeddings handle: batching over the scope's call stack (`crate::call`: validate, then
//! per batch record and govern).
//!
//! Texts are split into `BATCH_SIZE` batches; each batch is its own governed call (a transient
//! failure retries only that batch, on any source), up to four batches in flight, and the vectors
//! are merged back in input order.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use polygateway_actors::runtime::Governed;

use super::handle::{Embeddings, ScopeHandle};
use crate::call::order::CallOrder;
use crate::call::EmbedStack;
use crate::error::{GatewayError, InvalidResult};
use crate::transport::embeddings::{check_dim, l2_normalize, EmbeddingBatch};
use crate::types::{CallOptions, EmbeddingResponse, UsageSource};

/// Batches in flight at once for one `embed` call.
const BATCH_CONCURRENCY: usize = 4;

/// Embedding calls of an [`EmbeddingHandle`](crate::EmbeddingHandle).
///
/// ```no_run
/// # async fn demo(gw: polygateway::Gateway) -> Result<(), polygateway::GatewayError> {
/// let embed = gw.embedding_scope("EMBED")?;
/// let out = embed.embed(vec!["a".into(), "b".into()], Default::default()).await?;
/// assert_eq!(out.vectors.len(), 2);
/// # Ok(()) }
/// ```
impl ScopeHandle<Embeddings> {
    /// Embed `texts`: vectors in input order, usage summed over batches.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway::GatewayError> {
    /// use polygateway_testkit::{Behaviour, MockUpstream};
    /// let mock = MockUpstream::start(Behaviour::healthy()).await;
    /// # let settings = polygateway_testkit::mock_settings(
    /// #     &[("EMBED", &mock.base_url())],
    /// #     &[("EMBED__OPENAI__1__MODEL", "embed-model"), ("EMBED__BATCH_SIZE", "16")],
    /// # );
    /// use polygateway::CallOptions;
    /// use polygateway_testkit::mock_embedding;
    /// let gw = polygateway::Gateway::from_settings(settings, "EMBED").await?;
    /// let embed = gw.embedding_scope("EMBED")?;
    /// let texts = vec!["alpha".to_string(), "beta".to_string(), "gamma".to_string()];
    /// let out = embed.embed(texts.clone(), CallOptions::new().tenant_id("acme")).await?;
    /// // Each vector is the one the mock computes for the text at the same position.
    /// for (text, vector) in texts.iter().zip(&out.vectors) {
    ///     assert_eq!(*vector, mock_embedding(text, 8));
    /// }
    /// gw.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub async fn embed(
        &self,
        texts: Vec<String>,
        options: CallOptions,
    ) -> Result<EmbeddingResponse, GatewayError> {
        EmbedStack::validate(&options)?;
        let scope = self.scope();
        // Tokio's clock, as the chat path reads it, so a paused-clock test sees what it scripted.
        let started = tokio::time::Instant::now();
        let batch_size = scope.settings.batch_size.max(1);
        let batches: Vec<Vec<String>> = texts.chunks(batch_size).map(<[String]>::to_vec).collect();
        // One id for every batch row of this call (`call_group_id`).
        let call_group = Some(polygateway_actors::runtime::new_id());
        let order = CallOrder::of(&options);
        let results: Vec<Governed<EmbeddingBatch>> = futures::stream::iter(batches)
            .map(|batch| {
                scope
                    .stack
                    .batch(batch, &options, &order, call_group.clone())
            })
            .buffered(BATCH_CONCURRENCY)
            .try_collect()
            .await?;

        let mut vectors = Vec::with_capacity(texts.len());
        let mut prompt_tokens = 0;
        let mut all_measured = !results.is_empty();
        let (mut call_id, mut source_name) = (String::new(), String::new());
        let mut capacity_wait = Duration::ZERO;
        for governed in results {
            let batch = governed.response;
            capacity_wait = capacity_wait.max(governed.capacity_wait);
            prompt_tokens += batch.prompt_tokens;
            all_measured &= batch.usage_source == UsageSource::Measured;
            vectors.extend(batch.vectors);
            call_id = governed.attempt_id;
            source_name = governed.source.to_string();
        }
        let dim = vectors.first().map_or(0, Vec::len);
        let expected = scope.settings.expected_dim.unwrap_or(dim);
        check_dim(&vectors, expected).map_err(|e| GatewayError::ResultInvalid {
            message: e.message.clone(),
            details: Box::new(InvalidResult::default()),
        })?;
        if scope.settings.normalize {
            vectors.iter_mut().for_each(|v| l2_normalize(v));
        }
        Ok(EmbeddingResponse {
            dim: expected,
            vectors,
            // The configured model of the scope's first source (sources of one embeddings scope
            // must agree on the model for the vectors to be comparable).
            model: scope
                .stack
                .layers
                .identities
                .first()
                .map(|i| i.model.clone())
                .unwrap_or_default(),
            provider: scope
                .stack
                .layers
                .identities
                .first()
                .map(|i| i.provider.clone())
                .unwrap_or_default(),
            prompt_tokens,
            usage_source: if all_measured {
                UsageSource::Measured
            } else {
                UsageSource::Unavailable
            },
            latency_ms: started.elapsed().as_secs_f64() * 1e3,
            capacity_wait_ms: capacity_wait.as_secs_f64() * 1e3,
            call_id,
            source_name,
        })
    }
}
