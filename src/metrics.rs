//! Metric names (the `metrics` facade): install any recorder — Prometheus, StatsD,
//! OpenTelemetry — and these appear. See the metrics table in docs/manual/observability.md; a test
//! keeps the two equal.
//!
//! The governance metrics (calls, attempts, retries, admission time, capacity wait, in-flight,
//! pacer limit, breaker state) are emitted by the runtime crate; the ones defined here by the
//! gateway layer.

pub use polygateway_actors::runtime::metrics::{
    ADMISSION_WAIT_SECONDS, ATTEMPTS_TOTAL, ATTEMPT_RESULTS, BREAKER_STATE,
    BREAKER_STATE_CHANGES_TOTAL, CALLS_TOTAL, CALL_DURATION_SECONDS, CALL_OUTCOMES,
    CAPACITY_WAIT_REASONS, CAPACITY_WAIT_SECONDS, CONTINUATIONS_TOTAL, CONTINUATION_OUTCOMES,
    HEDGES_TOTAL, HEDGE_OUTCOMES, IN_FLIGHT, PACER_LIMIT, RETRIES_TOTAL,
};
/// The dashboard's time series (what `Gateway::series` answers and the metrics' events feed).
pub use polygateway_actors::runtime::series;

/// Response-cache hits, by `scope`.
pub(crate) const CACHE_HITS_TOTAL: &str = "pgw_cache_hits_total";
/// Response-cache misses (including backend errors and corrupt entries), by `scope`.
pub(crate) const CACHE_MISSES_TOTAL: &str = "pgw_cache_misses_total";
/// Time to first token of successful streamed chat attempts, by `scope` (seconds).
pub(crate) const TTFT_SECONDS: &str = "pgw_ttft_seconds";
/// Telemetry rows dropped because the queue was full (no labels). Rows a degraded sink could
/// not write are counted in `Gateway::telemetry_status().dropped_rows`.
pub(crate) const TELEMETRY_DROPPED_ROWS_TOTAL: &str = "pgw_telemetry_dropped_rows_total";

/// Requests `polygateway serve` received, by ingress (`chat`, `messages`, `responses`,
/// `embeddings`, `ocr`): the server's own counter, not the runtime's.
pub(crate) const SERVER_REQUESTS_TOTAL: &str = "pgw_server_requests_total";

/// Client connections `polygateway serve` holds open (both listeners).
pub(crate) const SERVER_CONNECTIONS: &str = "pgw_server_connections";

/// Client connections the server closed to protect itself, by reason: `cap` (refused at the
/// connection cap), `header_timeout`, `body_too_slow` (docs/behaviour.md §12.9).
pub(crate) const SERVER_CONNECTIONS_SHED_TOTAL: &str = "pgw_server_connections_shed_total";

/// Every metric the library emits: `(name, kind, labels)`.
///
/// ```
/// assert!(polygateway::metrics::all().iter().any(|(name, _, _)| *name == "pgw_calls_total"));
/// ```
pub fn all() -> Vec<(&'static str, &'static str, &'static str)> {
    let mut all = polygateway_actors::runtime::metrics::METRICS.to_vec();
    all.extend([
        (CACHE_HITS_TOTAL, "counter", "scope"),
        (CACHE_MISSES_TOTAL, "counter", "scope"),
        (TTFT_SECONDS, "histogram", "scope"),
        (TELEMETRY_DROPPED_ROWS_TOTAL, "counter", ""),
        (crate::transport::resend::RESENDS_TOTAL, "counter", "source"),
        (SERVER_REQUESTS_TOTAL, "counter", "ingress"),
        (SERVER_CONNECTIONS, "gauge", ""),
        (SERVER_CONNECTIONS_SHED_TOTAL, "counter", "reason"),
    ]);
    all
}

/// Per-chat-scope handles, registered once.
#[derive(Debug, Clone)]
pub(crate) struct ChatMetrics {
    pub cache_hits: metrics::Counter,
    pub cache_misses: metrics::Counter,
    pub ttft: metrics::Histogram,
    /// The dashboard's series of the scope (time to first token, spend), fed with the metrics.
    pub series: std::sync::Arc<polygateway_actors::runtime::series::ScopeSeries>,
    /// The series of each of the scope's sources, by name: looked up once here, not per call
    /// (the book's lookup allocates its key).
    pub source_series: std::collections::BTreeMap<
        String,
        std::sync::Arc<polygateway_actors::runtime::series::SourceSeries>,
    >,
}

impl ChatMetrics {
    pub(crate) fn new<'a>(scope: &str, sources: impl IntoIterator<Item = &'a str>) -> Self {
        let book = polygateway_actors::runtime::series::Book::global();
        Self {
            cache_hits: metrics::counter!(CACHE_HITS_TOTAL, "scope" => scope.to_string()),
            cache_misses: metrics::counter!(CACHE_MISSES_TOTAL, "scope" => scope.to_string()),
            ttft: metrics::histogram!(TTFT_SECONDS, "scope" => scope.to_string()),
            series: book.scope(scope),
            source_series: sources
                .into_iter()
                .map(|source| (source.to_owned(), book.source(scope, source)))
                .collect(),
        }
    }
}

/// Unix seconds now, the `now` the dashboard's series are fed with.
pub(crate) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod examples {
    //! Usage cases of crate-private items (they were doc examples while the items were public).

    #[test]
    fn cache_hits_total_example() {
        use crate::metrics::{all, CACHE_HITS_TOTAL};
        assert_eq!(CACHE_HITS_TOTAL, "pgw_cache_hits_total");
        assert!(all().contains(&(CACHE_HITS_TOTAL, "counter", "scope")));
    }

    #[test]
    fn cache_misses_total_example() {
        use crate::metrics::{all, CACHE_HITS_TOTAL, CACHE_MISSES_TOTAL};
        let labels = |metric: &str| {
            all()
                .into_iter()
                .find(|(n, _, _)| *n == metric)
                .map(|(_, _, l)| l)
        };
        // Same labels as the hits, so a dashboard can divide the two into a hit ratio per scope.
        assert_eq!(labels(CACHE_MISSES_TOTAL), Some("scope"));
        assert_eq!(labels(CACHE_MISSES_TOTAL), labels(CACHE_HITS_TOTAL));
    }

    #[test]
    fn ttft_seconds_example() {
        use crate::metrics::{all, TTFT_SECONDS};
        // A histogram in seconds (not milliseconds, unlike `LlmResponse::ttft_ms`).
        assert!(TTFT_SECONDS.ends_with("_seconds"));
        assert!(all().contains(&(TTFT_SECONDS, "histogram", "scope")));
    }

    #[test]
    fn telemetry_dropped_rows_total_example() {
        use crate::metrics::{all, TELEMETRY_DROPPED_ROWS_TOTAL};
        // One process-wide series: no labels.
        assert!(all().contains(&(TELEMETRY_DROPPED_ROWS_TOTAL, "counter", "")));
    }
}
