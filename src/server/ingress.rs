//! Requests by ingress: which API dialect a request came in (`chat`, `messages`, `responses`,
//! `embeddings`, `ocr`), counted by the server itself — `pgw_server_requests_total{ingress}` on
//! `/metrics` and a line of the status page. Not the runtime's call metrics (`pgw_calls_total`),
//! which know nothing of HTTP.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use crate::metrics::SERVER_REQUESTS_TOTAL;

/// The ingresses, in the order the status page lists them.
pub(crate) const INGRESSES: [&str; 5] = ["chat", "messages", "responses", "embeddings", "ocr"];

/// The ingress of a request path (`None`: an operational or unknown path).
fn ingress_of(path: &str) -> Option<usize> {
    let name = match path {
        "/v1/chat/completions" => "chat",
        "/v1/messages" | "/v1/messages/count_tokens" => "messages",
        "/v1/responses" => "responses",
        "/v1/embeddings" => "embeddings",
        "/ocr/text" | "/parse" => "ocr",
        _ => return None,
    };
    INGRESSES.iter().position(|i| *i == name)
}

/// Requests per ingress since the server started, and each ingress's counter of
/// `pgw_server_requests_total`: looked up in the recorder at its first request (so a series
/// appears on `/metrics` once its ingress has been called, as before), not at every request.
#[derive(Default)]
pub(crate) struct IngressCounts {
    counts: [AtomicU64; 5],
    counters: [OnceLock<metrics::Counter>; 5],
}

impl IngressCounts {
    /// Count a request to `path` against its ingress (none for other paths).
    pub(crate) fn record(&self, path: &str) {
        if let Some(i) = ingress_of(path) {
            self.counts[i].fetch_add(1, Ordering::Relaxed);
            self.counters[i]
                .get_or_init(|| metrics::counter!(SERVER_REQUESTS_TOTAL, "ingress" => INGRESSES[i]))
                .increment(1);
        }
    }

    /// `(ingress, requests)` in [`INGRESSES`] order.
    pub(crate) fn snapshot(&self) -> Vec<(&'static str, u64)> {
        INGRESSES
            .iter()
            .zip(&self.counts)
            .map(|(name, n)| (*name, n.load(Ordering::Relaxed)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_map_to_their_ingress() {
        assert_eq!(
            ingress_of("/v1/messages").map(|i| INGRESSES[i]),
            Some("messages")
        );
        assert_eq!(
            ingress_of("/v1/responses").map(|i| INGRESSES[i]),
            Some("responses")
        );
        assert_eq!(ingress_of("/parse").map(|i| INGRESSES[i]), Some("ocr"));
        assert_eq!(ingress_of("/metrics"), None);
        let counts = IngressCounts::default();
        counts.counts[1].fetch_add(2, Ordering::Relaxed);
        assert_eq!(counts.snapshot()[1], ("messages", 2));
    }
}
