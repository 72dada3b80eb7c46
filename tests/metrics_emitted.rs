//! Metrics reach an installed recorder with bounded labels.

mod common;

use polygateway::Message;
use polygateway_testkit::mock_llm::{Behaviour, MockUpstream};

#[tokio::test]
async fn governed_calls_emit_the_documented_metrics() {
    let handle = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .expect("the only recorder of this test binary");
    let broken = MockUpstream::start(Behaviour::ServerError(503)).await;
    let healthy = MockUpstream::start(Behaviour::healthy()).await;
    let gw = common::gateway(
        &[("broken", &broken), ("healthy", &healthy)],
        &[
            ("PGW_CACHE_BACKEND", "memory"),
            ("PGW_CACHE_NAMESPACE", "metrics"),
            ("PGW_CACHE_TTL_S", "60"),
        ],
    )
    .await;
    for i in 0..5 {
        gw.chat(vec![Message::user(format!("q{i}"))]).await.unwrap();
    }
    gw.chat(vec![Message::user("q0")]).await.unwrap(); // a cache hit
    gw.shutdown().await;

    let text = handle.render();
    let line = |prefix: &str| {
        text.lines()
            .find(|l| l.starts_with(prefix))
            .map(str::to_string)
    };
    assert_eq!(
        line(r#"pgw_calls_total{scope="LLM",outcome="ok"}"#).as_deref(),
        Some(r#"pgw_calls_total{scope="LLM",outcome="ok"} 5"#),
        "{text}"
    );
    assert!(
        line(r#"pgw_attempts_total{scope="LLM",source="healthy_1",result="success"} 5"#).is_some(),
        "{text}"
    );
    assert!(
        line(r#"pgw_attempts_total{scope="LLM",source="broken_1",result="failure"}"#).is_some()
    );
    assert!(line(r#"pgw_retries_total{scope="LLM"}"#).is_some());
    assert!(
        line(r#"pgw_cache_hits_total{scope="LLM"} 1"#).is_some(),
        "{text}"
    );
    assert!(
        line(r#"pgw_cache_misses_total{scope="LLM"} 5"#).is_some(),
        "{text}"
    );
    assert!(line("pgw_pacer_limit{").is_some());
    assert!(line("pgw_breaker_state{").is_some());
    assert!(line("pgw_admission_wait_seconds").is_some());
    assert!(line("pgw_call_duration_seconds").is_some());
    assert!(line("pgw_ttft_seconds").is_some());
    // Bounded labels: no value looks like a call id.
    for l in text.lines().filter(|l| l.starts_with("pgw_")) {
        assert!(
            !l.split('"')
                .any(|v| v.len() == 36 && v.matches('-').count() == 4),
            "unbounded label in {l}"
        );
    }
}
