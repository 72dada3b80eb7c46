//! Embeddings: the deterministic vector of a text ([`mock_embedding`]) and the `/v1/embeddings`
//! handler.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use super::behaviour::Behaviour;
use super::server::{parse_body, pre_answer, shutting_down, status_failure};
use super::shared::{InFlight, Shared};
/// The deterministic vector the mock serves for `text` (components in `[-1, 1]`).
///
/// ```
/// use polygateway_testkit::mock_embedding;
/// assert_eq!(mock_embedding("a", 4), mock_embedding("a", 4));
/// assert_ne!(mock_embedding("a", 4), mock_embedding("b", 4));
/// ```
pub fn mock_embedding(text: &str, dim: usize) -> Vec<f32> {
    // FNV-1a of the text seeds a xorshift sequence.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    let mut x = h | 1;
    (0..dim)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 40) as f64 / (1u64 << 24) as f64 * 2.0 - 1.0) as f32
        })
        .collect()
}

pub(super) async fn embeddings(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    bytes: Bytes,
) -> Response {
    let body = parse_body(&bytes);
    let behaviour = shared.admit("/v1/embeddings", &body, &headers);
    let _guard = InFlight::new(&shared);
    if !pre_answer(&shared, &behaviour).await {
        return shutting_down();
    }
    if let Some(resp) = status_failure(&behaviour) {
        return resp;
    }
    let inputs: Vec<String> = match &body["input"] {
        Value::String(s) => vec![s.clone()],
        Value::Array(a) => a
            .iter()
            .map(|v| v.as_str().unwrap_or_default().to_string())
            .collect(),
        _ => {
            return (
                StatusCode::BAD_REQUEST,
                axum::Json(json!({"error": {"message": "'input' is required", "type": "invalid_request_error"}})),
            )
                .into_response()
        }
    };
    let dim = shared.embedding_dim.load(Ordering::Relaxed);
    let mut data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(i, t)| json!({"object": "embedding", "index": i, "embedding": mock_embedding(t, dim)}))
        .collect();
    // Answer in reverse order: clients must sort by `index`.
    data.reverse();
    if behaviour == Behaviour::EmbeddingCountMismatch {
        data.pop();
    }
    let tokens: u64 = inputs
        .iter()
        .map(|t| (t.chars().count() as u64 / 4).max(1))
        .sum();
    let mut answer = json!({
        "object": "list",
        "model": format!("{}-mock", body["model"].as_str().unwrap_or("unknown")),
        "data": data,
    });
    if behaviour != Behaviour::NoUsage {
        answer["usage"] = json!({"prompt_tokens": tokens, "total_tokens": tokens});
    }
    axum::Json(answer).into_response()
}
