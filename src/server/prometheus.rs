//! The Prometheus recorder behind `GET /metrics`: the runtime's `pgw_*` metrics (emitted through
//! the `metrics` facade) rendered in the Prometheus text format. Not the metric definitions
//! (`crate::metrics`).

use std::sync::OnceLock;
use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Install the Prometheus recorder as the process's `metrics` recorder, once. Call it before
/// building the [`Gateway`](crate::Gateway): the runtime registers its metric handles when a
/// scope is built, with whatever recorder is installed then. Returns `false` when another
/// recorder was installed first (then `GET /metrics` answers 404 and says so).
///
/// ```
/// assert!(polygateway::server::install_metrics_recorder());
/// assert!(polygateway::server::install_metrics_recorder()); // idempotent
/// ```
pub fn install_metrics_recorder() -> bool {
    HANDLE
        .get_or_init(|| {
            let handle = PrometheusBuilder::new()
                .set_buckets(&BUCKETS_SECONDS)
                .expect("the buckets are not empty")
                .install_recorder()
                .ok()?;
            spawn_upkeep(handle.clone());
            Some(handle)
        })
        .is_some()
}

/// The upper bounds of every `pgw_*_seconds` histogram's buckets: from an admission's
/// in-memory round trip (100 µs) to a long call (5 min), about ×2.5 apart. Fixed buckets are a
/// few counters per series; without them the exporter renders summaries, each kept as a
/// quantile sketch (0.01 % relative error, up to 32,768 bins of 8 bytes) per series and per
/// window, which grows with the spread of the latencies it has seen and never gives it back
/// while the server is idle: 2.3 MB after a 1,024-caller sweep against 20 ms (heaptrack;
/// ARCHITECTURE.md, "What a request in flight holds"). Buckets also add up across servers,
/// quantiles do not.
const BUCKETS_SECONDS: [f64; 20] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 25.0, 60.0, 120.0, 300.0,
];

/// How often the recorder's histograms are drained when nobody scrapes `/metrics`.
const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

/// The recorder keeps every histogram sample until it is rendered or upkept: a server nobody
/// scrapes (or scrapes once a minute) would grow by every call's latency samples. A thread of
/// its own drains them every few seconds (the exporter's own `install` does the same on its
/// runtime; this recorder may be installed before any runtime exists).
fn spawn_upkeep(handle: PrometheusHandle) {
    let spawned = std::thread::Builder::new()
        .name("pgw-metrics".into())
        .spawn(move || loop {
            std::thread::sleep(UPKEEP_INTERVAL);
            handle.run_upkeep();
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "metrics upkeep thread not started: histogram samples are drained only when /metrics is scraped");
    }
}

/// The Prometheus text the server's `GET /metrics` answers, for a service that embeds the
/// gateway and serves its own `/metrics`: `None` until [`install_metrics_recorder`] installed
/// the recorder (or when another recorder was installed first).
///
/// ```
/// // Install first, then build the gateway, then serve this text on your own `/metrics`.
/// assert!(polygateway::server::install_metrics_recorder());
/// let text: Option<String> = polygateway::server::render_metrics();
/// assert!(text.is_some(), "the recorder is ours, so there is text to serve");
/// ```
pub fn render_metrics() -> Option<String> {
    HANDLE.get().and_then(Option::as_ref).map(|h| h.render())
}
