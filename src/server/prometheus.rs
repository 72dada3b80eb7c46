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
            let handle = PrometheusBuilder::new().install_recorder().ok()?;
            spawn_upkeep(handle.clone());
            Some(handle)
        })
        .is_some()
}

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
