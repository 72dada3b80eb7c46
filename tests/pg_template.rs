//! Executes every ```sql block of the production PostgreSQL template, in order, against a real
//! PostgreSQL in a fresh database, then writes through `PostgresSink` as `polygateway_app` and
//! checks that rows land in the partitioned table, that reads are tenant-scoped, and that rows
//! are immutable (docs/behaviour.md §8.7).
//!
//! The template's roles are cluster-wide, so this is the only test that creates them; it drops
//! its database and the roles at the end (and leftovers of an interrupted run at the start).

use std::time::Duration;

use polygateway::config::Secret;
use polygateway::telemetry::{
    telemetry_schema_sql, PostgresOptions, PostgresSink, SchemaBackend, TelemetryRow, TelemetrySink,
};
use tokio_postgres::{Client, NoTls};

/// The markdown holding the template: the manual's telemetry chapter.
const TEMPLATE_PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/manual/telemetry.md");
const ROLES: [&str; 3] = ["polygateway_owner", "polygateway_app", "polygateway_report"];
const DB_PREFIX: &str = "pgw_tpl_";

async fn connect(dsn: &str) -> Result<Client, tokio_postgres::Error> {
    let (client, conn) = tokio_postgres::connect(dsn, NoTls).await?;
    tokio::spawn(conn);
    Ok(client)
}

fn dsn(user: &str, db: &str) -> String {
    format!("host=127.0.0.1 port=5432 user={user} dbname={db}")
}

/// The ```sql fenced blocks of a markdown text, in order.
fn sql_blocks(markdown: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in markdown.lines() {
        match &mut current {
            None if line.trim_start().starts_with("```sql") => current = Some(String::new()),
            Some(block) if line.trim_start().starts_with("```") => {
                blocks.push(std::mem::take(block));
                current = None;
            }
            Some(block) => {
                block.push_str(line);
                block.push('\n');
            }
            None => {}
        }
    }
    assert!(current.is_none(), "unterminated ```sql block");
    blocks
}

async fn drop_everything(admin: &Client) {
    let leftovers = admin
        .query(
            "SELECT datname::text FROM pg_database WHERE datname LIKE $1",
            &[&format!("{DB_PREFIX}%")],
        )
        .await
        .unwrap();
    for db in leftovers {
        let name: String = db.get(0);
        admin
            .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .await
            .unwrap();
    }
    for role in ROLES {
        admin
            .batch_execute(&format!("DROP ROLE IF EXISTS {role}"))
            .await
            .unwrap();
    }
}

fn row(tenant: &str) -> TelemetryRow {
    let mut r = TelemetryRow::new(uuid::Uuid::new_v4().to_string());
    r.model = "m".into();
    r.provider = "p".into();
    r.source_name = "p_1".into();
    r.usage_source = "measured".into();
    r.tenant_id = tenant.into();
    r
}

async fn count_as(client: &mut Client, tenant: Option<&str>) -> i64 {
    let tx = client.transaction().await.unwrap();
    if let Some(t) = tenant {
        tx.execute("SELECT set_config('app.tenant_id', $1, true)", &[&t])
            .await
            .unwrap();
    }
    let n: i64 = tx
        .query_one("SELECT count(*) FROM llm_calls", &[])
        .await
        .unwrap()
        .get(0);
    tx.commit().await.unwrap();
    n
}

#[tokio::test]
async fn the_production_template_runs_and_the_library_writes_through_it() {
    let admin =
        match tokio::time::timeout(Duration::from_secs(3), connect(&dsn("postgres", "test"))).await
        {
            Ok(Ok(c)) => c,
            other => {
                let why = format!(
                    "{:?}",
                    other.err().map(|_| "timed out").or(Some("connect failed"))
                );
                if std::env::var("CI").as_deref() == Ok("true") {
                    panic!("PostgreSQL required under CI=true but unreachable: {why}");
                }
                eprintln!("\n!!!!! SKIPPED pg_template: PostgreSQL unreachable ({why}) !!!!!\n");
                return;
            }
        };
    drop_everything(&admin).await;
    let db = format!("{DB_PREFIX}{}", uuid::Uuid::new_v4().simple());
    admin
        .batch_execute(&format!("CREATE DATABASE {db}"))
        .await
        .unwrap();

    let markdown = std::fs::read_to_string(TEMPLATE_PATH).unwrap();
    let blocks = sql_blocks(&markdown);
    assert!(
        blocks.len() >= 7,
        "expected the 7 template blocks, found {}",
        blocks.len()
    );
    let dba = connect(&dsn("postgres", &db)).await.unwrap();
    // Step 0 of the template: the plain table from the library's own script.
    dba.batch_execute(&telemetry_schema_sql(SchemaBackend::Postgres))
        .await
        .unwrap();
    for (i, block) in blocks.iter().enumerate() {
        if let Err(e) = dba.batch_execute(block).await {
            panic!("template block {} failed: {e:?}\n{block}", i + 1);
        }
    }

    // The library, connected as the application role, with default (manual) schema mode.
    let mut options = PostgresOptions::new(None);
    options.write_timeout = Duration::from_secs(5);
    let app_dsn = format!("postgresql://polygateway_app:CHANGE_ME_APP@127.0.0.1:5432/{db}");
    let sink = PostgresSink::new(&Secret::new(app_dsn), options);
    let rows: Vec<TelemetryRow> = [("t1", 3), ("t2", 2), ("", 1)]
        .iter()
        .flat_map(|&(t, n)| (0..n).map(move |_| row(t)))
        .collect();
    sink.write_batch(rows).await;
    let status = TelemetrySink::<TelemetryRow>::status(&sink);
    assert!(!status.degraded && status.dropped_rows == 0, "{status:?}");
    TelemetrySink::<TelemetryRow>::shutdown(&sink).await;

    // Rows sit in a monthly partition, none in the parent itself.
    let placement = dba
        .query(
            "SELECT tableoid::regclass::text, count(*) FROM llm_calls GROUP BY 1",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(placement.len(), 1);
    let partition: String = placement[0].get(0);
    assert!(partition.starts_with("llm_calls_20"), "{partition}");
    assert_eq!(placement[0].get::<_, i64>(1), 6);
    let partitioned: bool = dba
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_partitioned_table WHERE partrelid = 'llm_calls'::regclass)",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(partitioned);

    // Readers see only their tenant; no tenant means no rows.
    let mut report = connect(&dsn("polygateway_report", &db)).await.unwrap();
    assert_eq!(count_as(&mut report, Some("t1")).await, 3);
    assert_eq!(count_as(&mut report, Some("t2")).await, 2);
    assert_eq!(count_as(&mut report, None).await, 0);
    assert_eq!(count_as(&mut report, Some("")).await, 0);
    let mut app = connect(&dsn("polygateway_app", &db)).await.unwrap();
    assert_eq!(count_as(&mut app, Some("t2")).await, 2);

    // Rows are immutable: the app lacks the privilege, and even a superuser hits the trigger.
    let denied = app
        .execute("UPDATE llm_calls SET model = 'x'", &[])
        .await
        .unwrap_err();
    assert_eq!(denied.code().map(|c| c.code()), Some("42501"));
    let denied = app.execute("DELETE FROM llm_calls", &[]).await.unwrap_err();
    assert_eq!(denied.code().map(|c| c.code()), Some("42501"));
    let trigger = dba.execute("DELETE FROM llm_calls", &[]).await.unwrap_err();
    assert!(
        trigger.to_string().contains("immutable") || format!("{trigger:?}").contains("immutable")
    );

    drop(report);
    drop(app);
    drop(dba);
    admin
        .batch_execute(&format!("DROP DATABASE {db} WITH (FORCE)"))
        .await
        .unwrap();
    drop_everything(&admin).await;
}
