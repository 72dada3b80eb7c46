//! Expose the runtime's metrics in the Prometheus text format.
//!
//! Installs a Prometheus recorder, runs a few governed calls against the built-in mock (one
//! healthy source, one failing), and prints the `pgw_*` metrics as a scrape would see them. In a
//! service, serve `handle.render()` on `/metrics` instead (see `examples/service.rs` for axum).
//!
//! ```text
//! cargo run --example prometheus
//! ```

use polygateway::config::Settings;
use polygateway::{Gateway, Message};
use polygateway_testkit::mock_llm::{Behaviour, MockUpstream};

#[tokio::main]
async fn main() {
    let handle = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .expect("install the Prometheus recorder");
    let healthy = MockUpstream::start(Behaviour::healthy()).await;
    let failing = MockUpstream::start(Behaviour::ServerError(503)).await;
    let mut env = polygateway_testkit::mock_env();
    env.insert("LLM__RETRY__BACKOFF_BASE_S".into(), "0.01".into());
    for (name, mock) in [("HEALTHY", &healthy), ("FAILING", &failing)] {
        env.insert(format!("LLM__{name}__1__BASE_URL"), mock.base_url());
        env.insert(format!("LLM__{name}__1__API_KEY"), "sk-demo".into());
        env.insert(format!("LLM__{name}__1__MODEL"), "demo-model".into());
    }
    let gw = Gateway::from_settings(Settings::from_map(&env).unwrap(), "LLM")
        .await
        .unwrap();
    for i in 0..20 {
        gw.chat(vec![Message::user(format!("question {i}"))])
            .await
            .unwrap();
    }
    gw.shutdown().await;
    for line in handle.render().lines() {
        if line.contains("pgw_") {
            println!("{line}");
        }
    }
}
