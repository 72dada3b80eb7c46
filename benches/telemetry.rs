//! Telemetry write throughput: rows/s with 256-row multi-row INSERTs versus one INSERT per row,
//! for the SQLite sink (temp file) and the PostgreSQL sink (127.0.0.1:5432, skipped when
//! unreachable).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use polygateway::config::{SchemaMode, Secret};
use polygateway::telemetry::{
    messages_json, PostgresOptions, PostgresSink, SqliteOptions, SqliteSink, TelemetryRow,
    TelemetrySink,
};
use polygateway::Message;

const ROWS: usize = 256;
const PG_ADMIN: &str = "host=127.0.0.1 port=5432 user=postgres dbname=test";

static NEXT: AtomicU64 = AtomicU64::new(0);

fn rows(n: usize) -> Vec<TelemetryRow> {
    (0..n)
        .map(|_| {
            let i = NEXT.fetch_add(1, Ordering::Relaxed);
            let mut r = TelemetryRow::new(format!("bench-{i}"));
            r.model = "bench-model".into();
            r.provider = "openai".into();
            r.source_name = "openai_1".into();
            r.messages = messages_json(&[Message::user("summarise the attached report")], None);
            r.response = Some("a short answer of a few dozen characters".into());
            r.prompt_tokens = 120;
            r.completion_tokens = 40;
            r.usage_source = "measured".into();
            r.latency_ms = 812.0;
            r.ttft_ms = Some(95.0);
            r.cost = Some(0.00042);
            r.tenant_id = "acme".into();
            r.meta = r#"{"stage":"bench"}"#.into();
            r
        })
        .collect()
}

fn bench_sink(c: &mut Criterion, name: &str, sink: Arc<dyn TelemetrySink<TelemetryRow>>) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut group = c.benchmark_group(format!("telemetry/{name}"));
    group.throughput(Throughput::Elements(ROWS as u64));
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(4));
    group.bench_function("batched_256", |b| {
        b.to_async(&rt).iter_batched(
            || rows(ROWS),
            |batch| {
                let sink = sink.clone();
                async move { sink.write_batch(batch).await }
            },
            BatchSize::SmallInput,
        )
    });
    group.bench_function("one_insert_per_row", |b| {
        b.to_async(&rt).iter_batched(
            || rows(ROWS),
            |batch| {
                let sink = sink.clone();
                async move {
                    for row in batch {
                        sink.write_batch(vec![row]).await;
                    }
                }
            },
            BatchSize::SmallInput,
        )
    });
    group.finish();
    let status = sink.status();
    assert!(
        !status.degraded && status.dropped_rows == 0,
        "{name} sink lost rows during the bench: {status:?}"
    );
    rt.block_on(sink.shutdown());
}

fn sqlite(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let sink = Arc::new(SqliteSink::open(
        dir.path().join("bench.db"),
        SqliteOptions::new(Some(SchemaMode::Auto)),
    ));
    bench_sink(c, "sqlite", sink);
}

fn postgres(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let schema = format!("pgw_bench_{}", uuid::Uuid::new_v4().simple());
    let admin = rt.block_on(async {
        let (client, conn) = tokio_postgres::connect(PG_ADMIN, tokio_postgres::NoTls)
            .await
            .ok()?;
        tokio::spawn(conn);
        client
            .batch_execute(&format!("CREATE SCHEMA {schema}"))
            .await
            .ok()?;
        Some(client)
    });
    let Some(admin) = admin else {
        eprintln!(
            "!!!!! telemetry/postgres bench skipped: PostgreSQL unreachable at {PG_ADMIN} !!!!!"
        );
        return;
    };
    let mut options = PostgresOptions::new(Some(SchemaMode::Auto));
    options.table = format!("{schema}.llm_calls");
    let sink = Arc::new(PostgresSink::new(&Secret::new(PG_ADMIN), options));
    bench_sink(c, "postgres", sink);
    rt.block_on(admin.batch_execute(&format!("DROP SCHEMA {schema} CASCADE")))
        .unwrap();
}

criterion_group!(benches, sqlite, postgres);
criterion_main!(benches);
