//! The breaker gauge follows the state calls act on: a full outage reads open (and counts the
//! change) while calls fail with `CircuitOpenError`, and closed again after recovery. Its own test
//! binary: a process has one recorder, and these series must not mix with another test's.

mod common;

use std::time::Duration;

use polygateway::{Message, UnavailableReason};
use polygateway_testkit::mock_llm::{Behaviour, MockUpstream};

/// The value of the series whose line starts with `series` (labels included), if rendered.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}

fn state(text: &str, source: &str) -> Option<f64> {
    value(
        text,
        &format!(r#"pgw_breaker_state{{scope="LLM",source="{source}"}}"#),
    )
}

fn changes(text: &str, source: &str, to: &str) -> f64 {
    value(
        text,
        &format!(r#"pgw_breaker_state_changes_total{{scope="LLM",source="{source}",to="{to}"}}"#),
    )
    .unwrap_or(0.0)
}

#[tokio::test(start_paused = true)]
async fn a_full_outage_reads_open_and_recovery_reads_closed() {
    let handle = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .expect("the only recorder of this test binary");
    let a = MockUpstream::start(Behaviour::healthy()).await;
    let b = MockUpstream::start(Behaviour::healthy()).await;
    let gw = common::gateway(
        &[("a", &a), ("b", &b)],
        &[
            ("LLM__BREAKER__FAIL_THRESHOLD", "2"),
            ("LLM__BREAKER__COOLDOWN_S", "1"),
            ("LLM__BACKPRESSURE__POLL_INTERVAL_S", "0.2"),
            // Round robin, so that after the outage each source gets the call that probes it: the
            // health-aware selector rightly keeps sending to the first source that recovered, and
            // the other's breaker would stay open for as long as the test cared to wait (a CI
            // run saw 50 recovery calls all go to a_1).
            ("LLM__SELECTOR", "round_robin"),
        ],
    )
    .await;
    // Both sources serve first, so each gauge has a closed reading to change from.
    for i in 0..20 {
        gw.chat(vec![Message::user(format!("warm {i}"))])
            .await
            .unwrap();
        let text = handle.render();
        if state(&text, "a_1") == Some(0.0) && state(&text, "b_1") == Some(0.0) {
            break;
        }
    }
    let text = handle.render();
    assert_eq!(state(&text, "a_1"), Some(0.0), "{text}");
    assert_eq!(state(&text, "b_1"), Some(0.0), "{text}");

    // Full outage: both answer 503 until every circuit is open.
    a.set_behaviour(Behaviour::ServerError(503));
    b.set_behaviour(Behaviour::ServerError(503));
    let mut refused = None;
    for i in 0..20 {
        let err = gw
            .chat(vec![Message::user(format!("outage {i}"))])
            .await
            .unwrap_err();
        let unavailable = err.unavailable().expect("a scope-level refusal").clone();
        if unavailable.reason == UnavailableReason::CircuitOpen {
            refused = Some(unavailable);
            break;
        }
    }
    let refused = refused.expect("the outage opened every circuit");
    let text = handle.render();
    for source in ["a_1", "b_1"] {
        assert_eq!(
            state(&text, source),
            Some(1.0),
            "{source} open while calls fail with CircuitOpenError ({refused:?}):\n{text}"
        );
        assert_eq!(changes(&text, source, "open"), 1.0, "{source}:\n{text}");
    }
    // A call refused before any attempt leaves the gauge as it is: still open, no new change.
    let again = gw.chat(vec![Message::user("refused")]).await.unwrap_err();
    assert_eq!(
        again.unavailable().map(|u| u.reason),
        Some(UnavailableReason::CircuitOpen)
    );
    let text = handle.render();
    assert_eq!(state(&text, "a_1"), Some(1.0), "{text}");
    assert_eq!(changes(&text, "a_1", "open"), 1.0, "{text}");

    // Recovery: after the cooldown each source's probe succeeds and closes its breaker.
    a.set_behaviour(Behaviour::healthy());
    b.set_behaviour(Behaviour::healthy());
    tokio::time::sleep(Duration::from_millis(1100)).await;
    for i in 0..50 {
        let _ = gw.chat(vec![Message::user(format!("recovery {i}"))]).await;
        let text = handle.render();
        if state(&text, "a_1") == Some(0.0) && state(&text, "b_1") == Some(0.0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let text = handle.render();
    for source in ["a_1", "b_1"] {
        assert_eq!(state(&text, source), Some(0.0), "{source} closed:\n{text}");
        assert_eq!(changes(&text, source, "closed"), 1.0, "{source}:\n{text}");
        assert!(
            changes(&text, source, "half_open") >= 1.0,
            "{source}:\n{text}"
        );
    }
    // The gauge agrees with the breaker backend itself.
    for snapshot in gw.sources("LLM").await.unwrap() {
        assert_eq!(
            snapshot.breaker.map(|s| s.as_str()),
            Some("closed"),
            "{snapshot:?}"
        );
    }
    gw.shutdown().await;
}
