//! The SQLite telemetry sink against real SQLite files: schema creation and discipline, batching,
//! row isolation, degrade/recover, the actor path, and retention.

use std::sync::Arc;
use std::time::Duration;

use polygateway::config::SchemaMode;
use polygateway::telemetry::{
    messages_json, retention, RetentionTarget, SqliteOptions, SqliteSink, TelemetryConfig,
    TelemetryRow, TelemetrySink, COLUMNS,
};
use polygateway::Message;
// The batching writer is the actors crate's (the gateway starts it under its runtime); this test
// drives it directly with the SQLite sink.
use polygateway_actors::runtime::{Runtime, RuntimeOptions};
use polygateway_actors::telemetry::TelemetryWriter;
use polygateway_actors::testkit::memory_governance;
use rusqlite::Connection;

fn row(i: usize) -> TelemetryRow {
    let mut r = TelemetryRow::new(format!("call-{i}"));
    r.model = "m".into();
    r.provider = "p".into();
    r.source_name = "p_1".into();
    r.messages = messages_json(&[Message::user(format!("q{i}"))], None);
    r.response = Some(format!("a{i}"));
    r.prompt_tokens = 10;
    r.completion_tokens = i as i64;
    r.usage_source = "measured".into();
    r.latency_ms = 12.5;
    r.cost = Some(0.001);
    r.tenant_id = "t1".into();
    r.meta = r#"{"k":"v"}"#.into();
    r
}

fn options(mode: SchemaMode) -> SqliteOptions {
    let mut o = SqliteOptions::new(Some(mode));
    o.cooldown = Duration::from_millis(200);
    o
}

fn columns(path: &std::path::Path) -> Vec<String> {
    let conn = Connection::open(path).unwrap();
    let mut stmt = conn.prepare("PRAGMA table_info(llm_calls)").unwrap();
    stmt.query_map([], |r| r.get::<_, String>(1))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

fn count(path: &std::path::Path) -> i64 {
    Connection::open(path)
        .unwrap()
        .query_row("SELECT count(*) FROM llm_calls", [], |r| r.get(0))
        .unwrap()
}

/// The original table before `cached_prompt_tokens` and later columns existed.
fn create_old_table(path: &std::path::Path, extra: &str) {
    let defs: Vec<String> = COLUMNS[..19]
        .iter()
        .map(|c| {
            let pk = if c.primary_key { " PRIMARY KEY" } else { "" };
            format!("{} {}{pk}", c.name, c.sqlite)
        })
        .collect();
    let sql = format!("CREATE TABLE llm_calls ({}{extra})", defs.join(", "));
    Connection::open(path).unwrap().execute_batch(&sql).unwrap();
}

#[tokio::test]
async fn creates_the_table_in_column_order_with_wal_and_writes_every_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.db");
    let sink = SqliteSink::open(&path, options(SchemaMode::Auto));
    let mut full = row(1);
    full.parent_call_id = Some("parent".into());
    full.ttft_ms = Some(3.0);
    full.cache_hit = true;
    full.error = Some("TransientError: boom".into());
    full.cached_prompt_tokens = Some(4);
    full.model_reported = Some("m-2026".into());
    full.sampling = Some(r#"{"temperature":0.2}"#.into());
    full.reasoning_tokens = Some(7);
    sink.write_batch(vec![full.clone(), row(2)]).await;
    sink.shutdown().await;

    let names: Vec<&str> = COLUMNS.iter().map(|c| c.name).collect();
    assert_eq!(columns(&path), names);
    let conn = Connection::open(&path).unwrap();
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    let got = conn
        .query_row(
            "SELECT parent_call_id, ttft_ms, cache_hit, error, cached_prompt_tokens, model_reported, \
             sampling, reasoning_tokens, tenant_id, meta, created_at IS NOT NULL, max_inter_token_ms \
             FROM llm_calls WHERE call_id = 'call-1'",
            [],
            |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, f64>(1)?,
                    r.get::<_, bool>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, i64>(4)?,
                    r.get::<_, String>(5)?,
                    r.get::<_, String>(6)?,
                    r.get::<_, i64>(7)?,
                    r.get::<_, String>(8)?,
                    r.get::<_, String>(9)?,
                    r.get::<_, bool>(10)?,
                    r.get::<_, Option<f64>>(11)?,
                ))
            },
        )
        .unwrap();
    assert_eq!(
        got,
        (
            "parent".into(),
            3.0,
            true,
            "TransientError: boom".into(),
            4,
            "m-2026".into(),
            r#"{"temperature":0.2}"#.into(),
            7,
            "t1".into(),
            r#"{"k":"v"}"#.into(),
            true,
            None
        )
    );
    assert_eq!(count(&path), 2);
    assert_eq!(sink.status().dropped_rows, 0);
}

#[tokio::test]
async fn a_large_batch_is_chunked_and_duplicates_are_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.db");
    let sink = SqliteSink::open(&path, options(SchemaMode::Auto));
    sink.write_batch((0..3000).map(row).collect()).await;
    sink.write_batch((0..10).map(row).collect()).await; // same call_ids: ignored, not errors
    assert_eq!(count(&path), 3000);
    let status = sink.status();
    assert_eq!(status.dropped_rows, 0);
    assert!(!status.degraded);
}

#[tokio::test]
async fn auto_mode_adds_missing_columns_to_an_old_table() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    create_old_table(&path, "");
    let sink = SqliteSink::open(&path, options(SchemaMode::Auto));
    sink.write_batch(vec![row(1)]).await;
    sink.shutdown().await;
    let upgraded = columns(&path);
    assert_eq!(upgraded.len(), polygateway::telemetry::COLUMNS.len());
    assert!(
        upgraded.iter().any(|c| c == "finish_reason"),
        "{upgraded:?}"
    );
    assert!(
        upgraded.iter().any(|c| c == "tool_call_count"),
        "{upgraded:?}"
    );
    assert!(
        upgraded.iter().any(|c| c == "structured_mode"),
        "{upgraded:?}"
    );
    assert!(
        upgraded.iter().any(|c| c == "call_group_id"),
        "{upgraded:?}"
    );
    assert!(
        upgraded.iter().any(|c| c == "cache_read_tokens"),
        "{upgraded:?}"
    );
    assert_eq!(upgraded.last().unwrap(), "continued_from");
    let tenant: String = Connection::open(&path)
        .unwrap()
        .query_row("SELECT tenant_id FROM llm_calls", [], |r| r.get(0))
        .unwrap();
    assert_eq!(tenant, "t1");
}

#[tokio::test]
async fn manual_mode_trims_the_insert_and_issues_no_ddl() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    create_old_table(&path, "");
    let sink = SqliteSink::open(&path, options(SchemaMode::Manual));
    sink.write_batch(vec![row(1), row(2)]).await;
    sink.shutdown().await;
    assert_eq!(columns(&path).len(), 19, "manual mode altered the table");
    assert_eq!(count(&path), 2);
    assert_eq!(sink.status().dropped_rows, 0);
}

#[tokio::test]
async fn a_rejected_row_is_dropped_alone_without_degrading() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("check.db");
    // A downstream rule the library knows nothing about. (A CHECK constraint would not do:
    // `INSERT OR IGNORE` silently skips CHECK violations too.)
    let conn = Connection::open(&path).unwrap();
    conn.execute_batch(&polygateway::telemetry::create_table_sql(
        polygateway::telemetry::SchemaBackend::Sqlite,
        "llm_calls",
    ))
    .unwrap();
    conn.execute_batch(
        "CREATE TRIGGER no_three BEFORE INSERT ON llm_calls WHEN NEW.completion_tokens = 3 \
         BEGIN SELECT RAISE(ABORT, 'three is rejected'); END",
    )
    .unwrap();
    drop(conn);
    let sink = SqliteSink::open(&path, options(SchemaMode::Auto));
    sink.write_batch((0..6).map(row).collect()).await;
    assert_eq!(count(&path), 5);
    let status = sink.status();
    assert_eq!(status.dropped_rows, 1);
    assert!(!status.degraded);
}

#[tokio::test]
async fn an_unwritable_path_degrades_then_recovers_once_fixed() {
    let dir = tempfile::tempdir().unwrap();
    let missing_dir = dir.path().join("later");
    let path = missing_dir.join("t.db");
    let sink = SqliteSink::open(&path, options(SchemaMode::Auto));
    sink.write_batch(vec![row(1), row(2)]).await;
    let status = sink.status();
    assert!(status.degraded, "{status:?}");
    assert_eq!(status.dropped_rows, 2);
    assert!(status.retry_after_s > 0.0);
    // Within the cooldown nothing is attempted, even though the path would now work.
    std::fs::create_dir(&missing_dir).unwrap();
    sink.write_batch(vec![row(3)]).await;
    assert!(!path.exists());
    assert_eq!(sink.status().dropped_rows, 3);
    tokio::time::sleep(Duration::from_millis(250)).await;
    sink.write_batch(vec![row(4)]).await;
    let status = sink.status();
    assert!(!status.degraded, "{status:?}");
    assert_eq!(status.dropped_rows, 3);
    assert_eq!(count(&path), 1);
}

/// Issue #21: a path in a directory that does not exist was reported healthy until the first
/// flush (`degraded=false dropped=0` after 200 calls). The file is opened when the sink is.
#[tokio::test]
async fn a_bad_path_is_degraded_before_the_first_row() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("not-created").join("t.db");
    let sink = SqliteSink::open(&path, options(SchemaMode::Auto));
    let status = sink.status();
    assert!(status.degraded && !status.fatal, "{status:?}");
    assert_eq!(status.dropped_rows, 0);
    assert!(status.reason.unwrap().contains("not-created"));
    sink.shutdown().await;
    // A good path is opened (file and table created) before any row arrives.
    let good = dir.path().join("good.db");
    let sink = SqliteSink::open(&good, options(SchemaMode::Auto));
    assert!(!sink.status().degraded);
    assert_eq!(count(&good), 0);
    sink.shutdown().await;
}

/// The same through `Gateway::from_settings`: `telemetry_status()` is degraded right after the
/// build, and calls still succeed.
#[tokio::test]
async fn a_gateway_with_a_bad_sqlite_path_reports_it_right_after_build() {
    use polygateway_testkit::{mock_settings, Behaviour, MockUpstream};
    let mock = MockUpstream::start(Behaviour::healthy()).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nowhere").join("t.db");
    let path = path.to_string_lossy();
    let settings = mock_settings(
        &[("LLM", &mock.base_url())],
        &[
            ("PGW_TELEMETRY_BACKEND", "sqlite"),
            ("PGW_TELEMETRY_SQLITE_PATH", &path),
        ],
    );
    let gw = polygateway::Gateway::from_settings(settings, "LLM")
        .await
        .unwrap();
    let status = gw.telemetry_status();
    assert!(status.degraded, "{status:?}");
    assert!(status.reason.unwrap().contains("nowhere"));
    gw.chat(vec![Message::user("hi")]).await.unwrap();
    gw.shutdown().await;
}

#[tokio::test]
async fn a_corrupt_file_degrades_without_failing_anyone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("corrupt.db");
    std::fs::write(&path, vec![0x5a; 8192]).unwrap();
    let sink = SqliteSink::open(&path, options(SchemaMode::Auto));
    sink.write_batch(vec![row(1)]).await;
    let status = sink.status();
    assert!(status.degraded, "{status:?}");
    assert!(!status.fatal);
    assert_eq!(status.dropped_rows, 1);
    assert!(status.reason.unwrap().contains("corrupt.db"));
    tokio::time::timeout(Duration::from_secs(5), sink.shutdown())
        .await
        .expect("shutdown not bounded");
}

#[tokio::test]
async fn after_shutdown_rows_are_counted_not_written() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.db");
    let sink = SqliteSink::open(&path, options(SchemaMode::Auto));
    sink.write_batch(vec![row(1)]).await;
    sink.shutdown().await;
    sink.shutdown().await; // idempotent
    sink.write_batch(vec![row(2)]).await;
    assert_eq!(count(&path), 1);
    assert_eq!(sink.status().dropped_rows, 1);
}

/// A write takes no virtual time: the sink writes on tokio's blocking pool, and a paused clock
/// does not skip ahead while a blocking task runs. (A thread of the sink's own, as before, let the
/// clock jump to the next timer while the database worked: a paused-clock test of a gateway with
/// SQLite telemetry saw shutdown's 5 s bound run out during a write of a few milliseconds.) The
/// write waits here on another connection's lock for its `busy_timeout`, so it takes 300 ms of
/// real time every run.
#[tokio::test(start_paused = true)]
async fn a_write_takes_no_virtual_time_however_long_the_database_takes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.db");
    let mut o = options(SchemaMode::Auto);
    o.busy_timeout = Duration::from_millis(300);
    let sink = SqliteSink::open(&path, o);
    let holder = Connection::open(&path).unwrap();
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    // A timer a paused clock could jump to while nothing else is ready.
    let timer = tokio::spawn(tokio::time::sleep(Duration::from_secs(60)));
    let (virtual_start, real_start) = (tokio::time::Instant::now(), std::time::Instant::now());
    sink.write_batch(vec![row(1)]).await;
    assert!(real_start.elapsed() >= Duration::from_millis(300));
    assert_eq!(virtual_start.elapsed(), Duration::ZERO);
    assert!(!timer.is_finished());
    // The locked database dropped the batch (degraded), as it would without the paused clock.
    assert_eq!(sink.status().dropped_rows, 1);
    holder.execute_batch("COMMIT").unwrap();
    sink.shutdown().await;
    assert_eq!(virtual_start.elapsed(), Duration::ZERO);
}

#[tokio::test]
async fn the_actor_batches_into_sqlite_and_flushes_everything() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("actor.db");
    let sink: Arc<dyn TelemetrySink<TelemetryRow>> =
        Arc::new(SqliteSink::open(&path, options(SchemaMode::Auto)));
    let runtime = Runtime::start(memory_governance(), RuntimeOptions::default())
        .await
        .unwrap();
    let writer = TelemetryWriter::start(&runtime, sink.clone(), TelemetryConfig::default(), 10_000)
        .await
        .unwrap();
    for i in 0..2_000 {
        assert!(writer.push(row(i)));
    }
    let report = writer.flush(Duration::from_secs(10)).await.unwrap();
    assert_eq!(report.remaining, 0);
    assert_eq!(count(&path), 2_000);
    assert_eq!(writer.status().dropped_rows, 0);
    runtime.shutdown(Duration::from_secs(1)).await;
    sink.shutdown().await;
}

#[tokio::test]
async fn retention_counts_then_deletes_old_rows_in_batches() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ret.db");
    let sink = SqliteSink::open(&path, options(SchemaMode::Auto));
    sink.write_batch((0..25).map(row).collect()).await;
    sink.shutdown().await;
    Connection::open(&path)
        .unwrap()
        .execute(
            "UPDATE llm_calls SET created_at = datetime('now', '-40 days') WHERE completion_tokens < 17",
            [],
        )
        .unwrap();
    let target = RetentionTarget::Sqlite(path.clone());
    let dry = retention(&target, "llm_calls", 30, false, 5).await.unwrap();
    assert_eq!((dry.matched, dry.deleted, dry.applied), (17, 0, false));
    assert_eq!(count(&path), 25);
    let applied = retention(&target, "llm_calls", 30, true, 5).await.unwrap();
    assert_eq!((applied.matched, applied.deleted), (17, 17));
    assert_eq!(count(&path), 8);
    let err = retention(&target, "nope", 30, false, 5).await.unwrap_err();
    assert_eq!(err.exit_code(), 1);
    assert!(retention(&target, "x;y", 30, false, 5).await.is_err());
}
