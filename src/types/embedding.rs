//! What an embeddings call returns.

use serde::{Deserialize, Serialize};

use super::response::UsageSource;

/// Vectors for a list of texts, in input order, merged across batches (SPEC §2.1).
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
    /// Call id of the last batch attempt.
    pub call_id: String,
    /// Source of the last batch (batches may land on different sources).
    pub source_name: String,
}
