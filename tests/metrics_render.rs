//! An embedding service renders the same Prometheus text the server's `/metrics` answers
//! (`polygateway::server::render_metrics`, issue #37). Its own test binary: one recorder per
//! process.

mod common;

use polygateway::Message;
use polygateway_testkit::mock_llm::{Behaviour, MockUpstream};

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
    // Histograms with fixed buckets, not summaries: a summary keeps a quantile sketch per
    // series that grows with the latencies it has seen and stays grown while the server idles.
    assert!(
        text.lines()
            .any(|l| l == "# TYPE pgw_call_duration_seconds histogram"),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l == r#"pgw_call_duration_seconds_bucket{scope="LLM",le="+Inf"} 1"#),
        "{text}"
    );
    gw.shutdown().await;
}

/// The recorder keeps histogram samples until it is rendered or upkept: without a thread that
/// upkeeps it, a server nobody scrapes grows by every call's samples.
#[test]
fn the_recorder_is_upkept_when_nobody_scrapes() {
    assert!(polygateway::server::install_metrics_recorder());
    let threads = || -> Vec<String> {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
            .map(|name| name.trim().to_owned())
            .collect()
    };
    // A new thread names itself once it runs: look again for a while before concluding.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !threads().iter().any(|name| name == "pgw-metrics")
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let seen = threads();
    assert!(
        seen.iter().any(|name| name == "pgw-metrics"),
        "no upkeep thread among {seen:?}"
    );
}
