//! An embedding service renders the same Prometheus text the server's `/metrics` answers
//! (`polygateway::server::render_metrics`, issue #37). Its own test binary: one recorder per
//! process.

mod common;

use polygateway::testkit::mock_llm::{Behaviour, MockUpstream};
use polygateway::Message;

#[tokio::test]
async fn the_installed_recorder_renders_the_gateways_metrics_after_a_call() {
    assert_eq!(
        polygateway::server::render_metrics(),
        None,
        "nothing to render before the recorder is installed"
    );
    // Installed before the gateway is built: the runtime registers its handles at build time.
    assert!(polygateway::server::install_metrics_recorder());
    let mock = MockUpstream::start(Behaviour::healthy()).await;
    let gw = common::gateway(&[("only", &mock)], &[]).await;
    gw.chat(vec![Message::user("hi")]).await.unwrap();
    let text = polygateway::server::render_metrics().expect("our recorder is installed");
    assert!(
        text.lines()
            .any(|l| l == r#"pgw_calls_total{scope="LLM",outcome="ok"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"pgw_attempts_total{scope="LLM",source="only_1",result="success"} 1"#),
        "{text}"
    );
    gw.shutdown().await;
}
