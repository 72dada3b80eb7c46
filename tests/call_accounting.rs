//! Which calls write telemetry rows and count in `pgw_calls_total` (docs/behaviour.md §8.1): a
//! call that entered governance does, even when refused before any attempt; a call rejected at
//! entry validation (`InvalidInput`) does neither. Its own test binary: one recorder per process.

mod common;

use polygateway::{CallOptions, GatewayError, Message, UnavailableReason};
use polygateway_testkit::mock_llm::{Behaviour, MockUpstream};

fn calls_total(handle: &metrics_exporter_prometheus::PrometheusHandle, outcome: &str) -> u64 {
    let series = format!(r#"pgw_calls_total{{scope="LLM",outcome="{outcome}"}}"#);
    handle
        .render()
        .lines()
        .find_map(|l| l.strip_prefix(series.as_str())?.trim().parse().ok())
        .unwrap_or(0)
}

/// `(source_name, error)` of every row, in insertion order.
fn rows(path: &std::path::Path) -> Vec<(String, Option<String>)> {
    let db = rusqlite::Connection::open(path).unwrap();
    let mut stmt = db
        .prepare("SELECT source_name, error FROM llm_calls ORDER BY rowid")
        .unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_refused_call_is_a_row_and_a_count_an_invalid_one_is_neither() {
    let handle = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .expect("the only recorder of this test binary");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.sqlite");
    let db_s = db.display().to_string();
    // A revoked key: the first call's attempt finds the source dead and opens its breaker.
    let mock = MockUpstream::start(Behaviour::Unauthorized).await;
    let gw = common::gateway(
        &[("only", &mock)],
        &[
            ("LLM__BREAKER__COOLDOWN_S", "30"),
            ("PGW_TELEMETRY_BACKEND", "sqlite"),
            ("PGW_TELEMETRY_SQLITE_PATH", &db_s),
        ],
    )
    .await;

    let invalid = gw
        .chat_with(
            vec![Message::user("hi")],
            CallOptions::new().tenant_id(" padded"),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(invalid, GatewayError::InvalidInput(_)),
        "{invalid}"
    );
    assert_eq!(mock.counts().chat, 0);

    let opened = gw.chat(vec![Message::user("first")]).await.unwrap_err();
    assert_eq!(
        opened.unavailable().map(|u| u.reason),
        Some(UnavailableReason::CircuitOpen),
        "{opened}"
    );
    assert_eq!(mock.counts().chat, 1);
    let refused = gw.chat(vec![Message::user("second")]).await.unwrap_err();
    assert_eq!(
        refused.unavailable().map(|u| u.reason),
        Some(UnavailableReason::CircuitOpen),
        "{refused}"
    );
    assert_eq!(mock.counts().chat, 1, "refused before any attempt");

    // Both governed calls counted; the invalid one in no outcome.
    let outcomes = polygateway::metrics::CALL_OUTCOMES;
    let total: u64 = outcomes.iter().map(|o| calls_total(&handle, o)).sum();
    assert_eq!(calls_total(&handle, "circuit_open"), 2);
    assert_eq!(total, 2, "{}", handle.render());
    gw.shutdown().await;

    // The first call: its attempt's row; the second: one row for the refusal, with no source.
    let rows = rows(&db);
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(rows[0].0, "only_1", "{rows:?}");
    assert_eq!(rows[1].0, "", "a refusal names no source: {rows:?}");
    assert!(
        rows[1]
            .1
            .as_deref()
            .is_some_and(|e| e.starts_with("CircuitOpenError")),
        "{rows:?}"
    );
    assert!(
        rows.iter()
            .all(|(_, e)| !e.as_deref().unwrap_or("").contains("padded")),
        "nothing of the invalid call was recorded: {rows:?}"
    );
}
