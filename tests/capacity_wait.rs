//! Time spent waiting for capacity is visible (docs/behaviour.md §8.1, issue #37): on the
//! answer (`capacity_wait_ms`), in its telemetry rows and in `pgw_capacity_wait_seconds`. Its own
//! test binary: one recorder per process.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use polygateway::Message;
use polygateway_testkit::mock_llm::{Behaviour, MockUpstream};

/// `count` of the `pgw_capacity_wait_seconds` series of `reason` in scope `LLM` (0 when absent).
fn waits_recorded(handle: &metrics_exporter_prometheus::PrometheusHandle, reason: &str) -> u64 {
    let series = format!(r#"pgw_capacity_wait_seconds_count{{scope="LLM",reason="{reason}"}}"#);
    handle
        .render()
        .lines()
        .find_map(|l| l.strip_prefix(series.as_str())?.trim().parse().ok())
        .unwrap_or(0)
}

/// The `capacity_wait_ms` of every row, summed per `call_group_id` (the call's own id).
fn row_waits(path: &std::path::Path) -> BTreeMap<String, f64> {
    let db = rusqlite::Connection::open(path).unwrap();
    let mut stmt = db
        .prepare("SELECT call_group_id, capacity_wait_ms FROM llm_calls")
        .unwrap();
    let mut sums = BTreeMap::new();
    for row in stmt
        .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, f64>(1)?)))
        .unwrap()
    {
        let (call, wait) = row.unwrap();
        *sums.entry(call).or_insert(0.0) += wait;
    }
    sums
}

#[tokio::test(start_paused = true)]
async fn calls_queued_for_pacer_slots_report_their_wait_and_an_idle_call_reports_none() {
    let handle = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .expect("the only recorder of this test binary");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.sqlite");
    let db_s = db.display().to_string();
    let mock = MockUpstream::start(Behaviour::Slow {
        delay: Duration::from_millis(50),
    })
    .await;
    // One pacer slot that never grows: a second call in flight has to queue for it.
    let gw = common::gateway(
        &[("only", &mock)],
        &[
            ("LLM__PACER__START", "1"),
            ("LLM__PACER__CEILING", "1"),
            ("PGW_TELEMETRY_BACKEND", "sqlite"),
            ("PGW_TELEMETRY_SQLITE_PATH", &db_s),
        ],
    )
    .await;

    // Alone on an idle gateway the slot is free: the call never enters a wait.
    let alone = gw.chat(vec![Message::user("alone")]).await.unwrap();
    assert_eq!(alone.capacity_wait_ms, 0.0);
    assert_eq!(waits_recorded(&handle, "pacer"), 0, "{}", handle.render());

    let calls = (0..4).map(|i| gw.chat(vec![Message::user(format!("queued {i}"))]));
    let answers: Vec<_> = futures::future::join_all(calls)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let waited = answers.iter().filter(|a| a.capacity_wait_ms > 0.0).count();
    assert!(
        waited >= 1,
        "four calls on one slot: all but the first queue"
    );
    assert_eq!(
        waits_recorded(&handle, "pacer"),
        waited as u64,
        "one observation per call that waited for a slot: {}",
        handle.render()
    );
    for reason in ["gate", "cooldown", "rate_limited"] {
        assert_eq!(waits_recorded(&handle, reason), 0, "{reason}");
    }
    gw.shutdown().await;

    // Each call's rows add up to its answer's wait.
    let rows = row_waits(&db);
    assert_eq!(rows.len(), 5, "{rows:?}");
    for answer in answers.iter().chain([&alone]) {
        let call = answer.call_group_id.as_deref().unwrap();
        assert_eq!(rows[call], answer.capacity_wait_ms, "{call}: {rows:?}");
    }
}
