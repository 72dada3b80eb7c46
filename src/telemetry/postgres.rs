//! The PostgreSQL telemetry sink (docs/behaviour.md §8.3–§8.5).
//!
//! A lazy `deadpool-postgres` pool (no connection until the first write, at most `pool_max`);
//! every write — acquire, probe, prepare, execute — runs under one hard budget
//! (`PGW_TELEMETRY_PG_WRITE_TIMEOUT_S`). The table is probed with `to_regclass` + `pg_attribute`
//! and created only when absent; `manual` mode trims the INSERT and warns once with runnable SQL,
//! `auto` mode adds the missing columns after probing. Rows go out as a multi-row INSERT with
//! explicit columns and `ON CONFLICT DO NOTHING` without a conflict target (partitioned tables).
//!
//! Failure classes: an unparsable DSN is fatal (permanent no-op, one error log); environmental
//! failures (SQLSTATE classes 08, 53, 57, 28, 3D, codes 42501, 42P01, I/O, timeouts) degrade the
//! sink for the cooldown; any other SQLSTATE is row-level: the batch is retried row by row and
//! only the rejected rows are dropped. Pool saturation drops rows without degrading. The DSN
//! password never appears in a log line or a status reason.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use deadpool_postgres::{
    Manager, ManagerConfig, Pool, PoolError, RecyclingMethod, Runtime, TimeoutType,
};
use polygateway_actors::telemetry::TelemetrySink;
use tokio_postgres::NoTls;

use super::row::{SqlValue, TelemetryRow};
use super::schema::{self, SchemaBackend};
use super::status::{Admit, SinkHealth, TelemetryStatus, DEFAULT_COOLDOWN};
use crate::config::{SchemaMode, Secret};

/// PostgreSQL's bind-parameter limit per statement.
const MAX_PARAMS: usize = 65_535;
/// Rows per INSERT statement.
const MAX_ROWS_PER_STATEMENT: usize = 256;

/// Options of [`PostgresSink`].
///
/// ```
/// use std::time::Duration;
/// use polygateway::config::SchemaMode;
/// use polygateway::telemetry::PostgresOptions;
/// let options = PostgresOptions {
///     table: "telemetry.llm_calls".into(),
///     pool_max: 8,
///     write_timeout: Duration::from_secs(2),
///     ..PostgresOptions::new(Some(SchemaMode::Auto))
/// };
/// assert_eq!(options.schema_mode, SchemaMode::Auto);
/// assert_eq!(options.cooldown, Duration::from_secs(60));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct PostgresOptions {
    /// Table name, optionally schema-qualified (default `llm_calls`, resolved by `search_path`).
    pub table: String,
    /// Schema mode (PostgreSQL default: manual).
    pub schema_mode: SchemaMode,
    /// Pool size (`PGW_TELEMETRY_PG_POOL_MAX`, default 4).
    pub pool_max: usize,
    /// Hard budget per write (`PGW_TELEMETRY_PG_WRITE_TIMEOUT_S`, default 5 s).
    pub write_timeout: Duration,
    /// How long to stay degraded before retrying (default 60 s).
    pub cooldown: Duration,
}

impl PostgresOptions {
    /// Defaults, with the configured schema mode (`None` → manual).
    ///
    /// ```
    /// use std::time::Duration;
    /// use polygateway::config::SchemaMode;
    /// use polygateway::telemetry::PostgresOptions;
    /// let options = PostgresOptions::new(None);
    /// assert_eq!(options.schema_mode, SchemaMode::Manual); // no DDL on an existing table
    /// assert_eq!((options.pool_max, options.write_timeout), (4, Duration::from_secs(5)));
    /// assert_eq!(options.table, "llm_calls");
    /// ```
    pub fn new(schema_mode: Option<SchemaMode>) -> Self {
        Self {
            table: schema::DEFAULT_TABLE.to_owned(),
            schema_mode: schema_mode.unwrap_or(SchemaMode::Manual),
            pool_max: 4,
            write_timeout: Duration::from_secs(5),
            cooldown: DEFAULT_COOLDOWN,
        }
    }
}

/// Writes telemetry rows into PostgreSQL.
///
/// ```no_run
/// # async fn demo() {
/// use polygateway::config::Secret;
/// use polygateway::telemetry::{PostgresOptions, PostgresSink, TelemetryRow, TelemetrySink};
/// let dsn = Secret::new("postgres://app:secret@127.0.0.1:5432/telemetry");
/// let sink = PostgresSink::new(&dsn, PostgresOptions::new(None));
/// sink.write_batch(vec![TelemetryRow::new("call-1")]).await;
/// let status = sink.status();
/// assert!(!status.degraded, "{:?}", status.reason);
/// sink.shutdown().await;
/// # }
/// ```
pub struct PostgresSink {
    pool: Option<Pool>,
    options: PostgresOptions,
    health: SinkHealth,
    /// Inserted-column indices the table has; `None` until probed (and after an environmental
    /// failure, so the next write probes again).
    columns: tokio::sync::Mutex<Option<Vec<usize>>>,
    manual_warned: AtomicBool,
    password: Option<String>,
}

impl std::fmt::Debug for PostgresSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresSink")
            .field("table", &self.options.table)
            .field("pool_max", &self.options.pool_max)
            .finish_non_exhaustive()
    }
}

/// How a failure affects the sink.
#[derive(Debug)]
enum Failure {
    Environmental(String),
    RowLevel(String),
    Saturated,
}

impl PostgresSink {
    /// Build the sink. Never connects and never fails: an unparsable DSN makes it a permanent
    /// no-op with one error log.
    ///
    /// ```
    /// use polygateway::config::Secret;
    /// use polygateway::telemetry::{PostgresOptions, PostgresSink, TelemetryRow, TelemetrySink};
    /// // Building never connects, so no server is needed here.
    /// let sink = PostgresSink::new(
    ///     &Secret::new("host=127.0.0.1 user=app password=hunter2 dbname=telemetry"),
    ///     PostgresOptions::new(None),
    /// );
    /// assert!(!sink.status().fatal);
    /// // A DSN that does not parse: a permanent no-op, and the password stays out of the reason.
    /// let broken = PostgresSink::new(
    ///     &Secret::new("postgres://app:hunter2@db:notaport/x"),
    ///     PostgresOptions::new(None),
    /// );
    /// let status = broken.status();
    /// assert!(status.fatal);
    /// assert!(!status.reason.unwrap().contains("hunter2"));
    /// ```
    pub fn new(dsn: &Secret, options: PostgresOptions) -> Self {
        let health = SinkHealth::new("postgres", options.cooldown);
        let mut sink = Self {
            pool: None,
            health,
            columns: tokio::sync::Mutex::new(None),
            manual_warned: AtomicBool::new(false),
            password: guess_password(dsn.expose()),
            options,
        };
        match sink.build_pool(dsn) {
            Ok(pool) => sink.pool = Some(pool),
            Err(reason) => {
                let reason = sink.redact(&reason);
                sink.health.set_fatal(reason);
            }
        }
        sink
    }

    fn build_pool(&mut self, dsn: &Secret) -> Result<Pool, String> {
        schema::validate_table(&self.options.table).map_err(|e| e.to_string())?;
        let mut config: tokio_postgres::Config = dsn
            .expose()
            .parse()
            .map_err(|e| format!("unparsable PGW_TELEMETRY_PG_DSN: {e}"))?;
        if let Some(pw) = config.get_password() {
            self.password = Some(String::from_utf8_lossy(pw).into_owned());
        }
        config.connect_timeout(self.options.write_timeout);
        if config.get_application_name().is_none() {
            config.application_name("polygateway-telemetry");
        }
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let budget = self.options.write_timeout;
        Pool::builder(manager)
            .max_size(self.options.pool_max.max(1))
            .runtime(Runtime::Tokio1)
            // Waiting for a busy pool gets half the budget, so saturation is told apart from a
            // stalled server (which exhausts the whole budget).
            .wait_timeout(Some(budget / 2))
            .create_timeout(Some(budget))
            .recycle_timeout(Some(budget))
            .build()
            .map_err(|e| format!("cannot build the PostgreSQL pool: {e}"))
    }

    /// Connect and probe the table now, within the write budget, instead of on the first write:
    /// an unreachable server (or a missing privilege, or a table that cannot be created) makes
    /// the sink degraded from the start, with one WARN line; it recovers on a later successful
    /// write as usual. Never fails; a fatal (unparsable) DSN is left as it is. Leaves one idle
    /// connection in the pool when it succeeds. [`sink_from_settings`](super::sink_from_settings)
    /// calls it, so a gateway built from settings reports an unreachable database at once.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use std::time::Duration;
    /// use polygateway::config::Secret;
    /// use polygateway::telemetry::{PostgresOptions, PostgresSink, TelemetrySink};
    /// // Nothing listens on port 9.
    /// let dsn = Secret::new("host=127.0.0.1 port=9 user=app dbname=telemetry");
    /// let options = PostgresOptions { write_timeout: Duration::from_secs(1), ..PostgresOptions::new(None) };
    /// let sink = PostgresSink::new(&dsn, options);
    /// assert!(!sink.status().degraded); // nothing tried yet: the pool is lazy
    /// sink.probe().await;
    /// let status = sink.status();
    /// assert!(status.degraded && !status.fatal, "{status:?}");
    /// assert_eq!(status.dropped_rows, 0);
    /// # }
    /// ```
    pub async fn probe(&self) {
        let Some(pool) = &self.pool else {
            return;
        };
        let now = Instant::now();
        let budget = self.options.write_timeout;
        let probe = async {
            let client = pool.get().await.map_err(|e| self.classify_pool(e))?;
            let cols = self.ensure_schema(&client).await?;
            *self.columns.lock().await = Some(cols);
            Ok::<(), Failure>(())
        };
        match tokio::time::timeout(budget, probe).await {
            Ok(Ok(())) => {}
            Ok(Err(Failure::Environmental(reason))) => self.health.degrade(reason, now),
            // A busy pool or a row-level answer says nothing about reachability.
            Ok(Err(Failure::Saturated | Failure::RowLevel(_))) => {}
            Err(_) => self.health.degrade(
                format!(
                    "connecting and probing exceeded the {:.1} s budget",
                    budget.as_secs_f64()
                ),
                now,
            ),
        }
    }

    /// Connections currently open (idle or in use); 0 before the first write.
    ///
    /// ```no_run
    /// # async fn demo() {
    /// use polygateway::config::Secret;
    /// use polygateway::telemetry::{PostgresOptions, PostgresSink, TelemetryRow, TelemetrySink};
    /// let dsn = Secret::new("postgres://app:secret@127.0.0.1:5432/telemetry");
    /// let options = PostgresOptions { pool_max: 2, ..PostgresOptions::new(None) };
    /// let sink = PostgresSink::new(&dsn, options);
    /// assert_eq!(sink.open_connections(), 0); // the pool is lazy
    /// sink.write_batch(vec![TelemetryRow::new("call-1")]).await;
    /// assert!((1..=2).contains(&sink.open_connections()));
    /// sink.shutdown().await;
    /// # }
    /// ```
    pub fn open_connections(&self) -> usize {
        self.pool.as_ref().map_or(0, |p| p.status().size)
    }

    fn redact(&self, text: &str) -> String {
        match self.password.as_deref() {
            Some(pw) if !pw.is_empty() => text.replace(pw, "***"),
            _ => text.to_owned(),
        }
    }

    fn classify_pool(&self, e: PoolError) -> Failure {
        match e {
            PoolError::Timeout(TimeoutType::Wait) => Failure::Saturated,
            PoolError::Timeout(TimeoutType::Create) => {
                Failure::Environmental("connecting timed out".into())
            }
            PoolError::Timeout(TimeoutType::Recycle) => {
                Failure::Environmental("recycling a connection timed out".into())
            }
            PoolError::Backend(e) => self.classify(&e),
            other => Failure::Environmental(self.redact(&other.to_string())),
        }
    }

    fn classify(&self, e: &tokio_postgres::Error) -> Failure {
        let Some(db) = e.as_db_error() else {
            // I/O, closed connection, protocol: the server, not the row.
            let mut text = e.to_string();
            if let Some(source) = std::error::Error::source(e) {
                text = format!("{text}: {source}");
            }
            return Failure::Environmental(self.redact(&text));
        };
        let code = db.code().code();
        let text = self.redact(&format!("{code}: {}", db.message()));
        let environmental = ["08", "53", "57", "28", "3D"]
            .iter()
            .any(|class| code.starts_with(class))
            || code == "42501"
            || code == "42P01";
        if environmental {
            Failure::Environmental(text)
        } else {
            Failure::RowLevel(text)
        }
    }

    /// Probe the table; create it when absent; add or trim columns per the schema mode.
    async fn ensure_schema(
        &self,
        client: &deadpool_postgres::Client,
    ) -> Result<Vec<usize>, Failure> {
        let table = &self.options.table;
        let all: Vec<usize> = (0..schema::insert_columns().count()).collect();
        let oid: Option<u32> = client
            .query_one("SELECT to_regclass($1::text)::oid", &[table])
            .await
            .map_err(|e| self.classify(&e))?
            .get(0);
        let Some(oid) = oid else {
            client
                .batch_execute(&schema::create_table_sql(SchemaBackend::Postgres, table))
                .await
                .map_err(|e| self.classify(&e))?;
            return Ok(all);
        };
        let existing: Vec<String> = client
            .query(
                "SELECT attname::text FROM pg_attribute \
                 WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped",
                &[&oid],
            )
            .await
            .map_err(|e| self.classify(&e))?
            .iter()
            .map(|r| r.get(0))
            .collect();
        let (missing, present) = schema::diff_columns(&existing);
        if missing.is_empty() {
            return Ok(all);
        }
        match self.options.schema_mode {
            SchemaMode::Manual => {
                if !self.manual_warned.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        "{}",
                        schema::manual_mode_warning(SchemaBackend::Postgres, table, &missing)
                    );
                }
                Ok(present)
            }
            SchemaMode::Auto => {
                for column in missing {
                    let sql = schema::add_column_sql(SchemaBackend::Postgres, table, column, false);
                    if let Err(e) = client.batch_execute(&sql).await {
                        // Do not trim: failures stay visible as row-level warnings.
                        tracing::warn!(
                            column = column.name,
                            error = %self.redact(&e.to_string()),
                            "telemetry: adding a column failed"
                        );
                    }
                }
                Ok(all)
            }
        }
    }

    /// Write `rows` in statements of at most 256 rows. On failure, returns how many rows were
    /// already committed (earlier statements autocommit).
    async fn write_rows(&self, rows: &[TelemetryRow]) -> Result<(), (Failure, usize)> {
        let pool = self.pool.as_ref().expect("checked by the caller");
        let client = pool.get().await.map_err(|e| (self.classify_pool(e), 0))?;
        let mut columns = self.columns.lock().await;
        let cols = match columns.as_ref() {
            Some(cols) => cols.clone(),
            None => {
                let cols = self.ensure_schema(&client).await.map_err(|f| (f, 0))?;
                *columns = Some(cols.clone());
                cols
            }
        };
        drop(columns);
        let per_statement = (MAX_PARAMS / cols.len().max(1)).clamp(1, MAX_ROWS_PER_STATEMENT);
        let mut written = 0;
        for chunk in rows.chunks(per_statement) {
            let sql = schema::insert_sql(
                SchemaBackend::Postgres,
                &self.options.table,
                &cols,
                chunk.len(),
            );
            let stmt = client
                .prepare_cached(&sql)
                .await
                .map_err(|e| (self.classify(&e), written))?;
            let values: Vec<[SqlValue<'_>; 33]> = chunk.iter().map(TelemetryRow::values).collect();
            let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = values
                .iter()
                .flat_map(|v| {
                    cols.iter()
                        .map(move |&i| &v[i] as &(dyn tokio_postgres::types::ToSql + Sync))
                })
                .collect();
            client
                .execute(&stmt, &params)
                .await
                .map_err(|e| (self.classify(&e), written))?;
            written += chunk.len();
        }
        Ok(())
    }

    async fn fail_environmental(&self, reason: String, rows: usize, now: Instant) {
        *self.columns.lock().await = None;
        self.health.degrade(reason, now);
        self.health.drop_rows(rows as u64, now);
    }

    /// After a row-level failure: one row per statement, dropping only the rejected ones.
    async fn write_one_by_one(&self, rows: &[TelemetryRow], now: Instant) {
        for (i, row) in rows.iter().enumerate() {
            match self.write_rows(std::slice::from_ref(row)).await {
                Ok(()) => {}
                Err((Failure::RowLevel(detail), _)) => self.health.row_rejected(&detail, now),
                Err((Failure::Saturated, _)) => {
                    self.health.saturated((rows.len() - i) as u64, now);
                    return;
                }
                Err((Failure::Environmental(reason), _)) => {
                    self.fail_environmental(reason, rows.len() - i, now).await;
                    return;
                }
            }
        }
        self.health.recover(now);
    }

    async fn write_within_budget(&self, rows: &[TelemetryRow], now: Instant) {
        let budget = self.options.write_timeout;
        let outcome = tokio::time::timeout(budget, self.write_rows(rows)).await;
        let (failure, written) = match outcome {
            Ok(Ok(())) => {
                self.health.recover(now);
                return;
            }
            Ok(Err(failed)) => failed,
            Err(_) => (
                Failure::Environmental(format!(
                    "write exceeded its {:.1} s budget",
                    budget.as_secs_f64()
                )),
                0,
            ),
        };
        let rest = &rows[written..];
        match failure {
            Failure::Saturated => self.health.saturated(rest.len() as u64, now),
            Failure::Environmental(reason) => {
                self.fail_environmental(reason, rest.len(), now).await
            }
            Failure::RowLevel(_) => {
                let isolate = tokio::time::timeout(budget, self.write_one_by_one(rest, now)).await;
                if isolate.is_err() {
                    // Which rows made it is unknown; they are counted as lost, conservatively.
                    let reason = format!(
                        "row-by-row retry exceeded its {:.1} s budget",
                        budget.as_secs_f64()
                    );
                    self.fail_environmental(reason, rest.len(), now).await;
                }
            }
        }
    }
}

#[async_trait]
impl TelemetrySink<TelemetryRow> for PostgresSink {
    async fn write_batch(&self, rows: Vec<TelemetryRow>) {
        if rows.is_empty() {
            return;
        }
        let now = Instant::now();
        if self.pool.is_none() || self.health.admit(now) == Admit::Skip {
            self.health.drop_rows(rows.len() as u64, now);
            return;
        }
        self.write_within_budget(&rows, now).await;
    }

    fn status(&self) -> TelemetryStatus {
        self.health.status(Instant::now())
    }

    async fn shutdown(&self) {
        if let Some(pool) = &self.pool {
            pool.close();
        }
    }
}

/// The password of a DSN, found without a full parse (so it can be redacted even from the
/// error of a DSN that does not parse): `scheme://user:PASSWORD@host…` or `password=PASSWORD`.
fn guess_password(dsn: &str) -> Option<String> {
    if let Some((_, rest)) = dsn.split_once("://") {
        let authority = rest.split(['/', '?']).next().unwrap_or("");
        let userinfo = authority.rsplit_once('@')?.0;
        let pw = userinfo.split_once(':')?.1;
        return (!pw.is_empty()).then(|| pw.to_owned());
    }
    let start = dsn.find("password=")? + "password=".len();
    let rest = &dsn[start..];
    let pw = if let Some(quoted) = rest.strip_prefix('\'') {
        quoted.split('\'').next().unwrap_or("")
    } else {
        rest.split_whitespace().next().unwrap_or("")
    };
    (!pw.is_empty()).then(|| pw.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_found_in_both_dsn_forms() {
        assert_eq!(
            guess_password("postgresql://app:s3cr%t@db:5432/x?sslmode=disable").as_deref(),
            Some("s3cr%t")
        );
        assert_eq!(guess_password("postgres://app@db/x"), None);
        assert_eq!(
            guess_password("host=db user=app password='a b' dbname=x").as_deref(),
            Some("a b")
        );
        assert_eq!(
            guess_password("host=db password=hunter2 port=5").as_deref(),
            Some("hunter2")
        );
    }

    #[tokio::test]
    async fn an_unparsable_dsn_is_fatal_and_never_leaks_the_password() {
        let sink = PostgresSink::new(
            &Secret::new("postgresql://app:hunter2@db:notaport/x"),
            PostgresOptions::new(None),
        );
        let status = TelemetrySink::<TelemetryRow>::status(&sink);
        assert!(status.fatal);
        assert!(!status.reason.clone().unwrap().contains("hunter2"));
        sink.write_batch(vec![TelemetryRow::new("a")]).await;
        assert_eq!(TelemetrySink::<TelemetryRow>::status(&sink).dropped_rows, 1);
        assert_eq!(sink.open_connections(), 0);
    }
}
