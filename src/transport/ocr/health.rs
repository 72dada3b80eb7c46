//! The health probe: `GET {base}/health` → `{"status": "healthy", "model_loaded": bool}`.
//!
//! A probe is not an attempt: it is not governed, classified or recorded; it answers one
//! question (is this source up?) for `check_health()` (docs/behaviour.md §7.4).

use std::time::Duration;

use reqwest::Client;
use serde_json::Value;

/// `true` iff the service answers 200 with `status == "healthy"` within `limit`.
pub(super) async fn probe(client: &Client, base_url: &str, limit: Duration) -> bool {
    let Ok(url) = super::endpoint(base_url, "health") else {
        return false;
    };
    let exchange = async {
        let response = client.get(url).send().await.ok()?;
        if response.status() != reqwest::StatusCode::OK {
            return None;
        }
        let body = response.bytes().await.ok()?;
        let answer: Value = serde_json::from_slice(&body).ok()?;
        Some(answer.get("status").and_then(Value::as_str) == Some("healthy"))
    };
    matches!(tokio::time::timeout(limit, exchange).await, Ok(Some(true)))
}
