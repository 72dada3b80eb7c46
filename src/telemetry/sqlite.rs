//! The SQLite telemetry sink.
//!
//! `rusqlite::Connection` is `Send` but not `Sync`, so one writer owns it behind a mutex, and each
//! batch is written on tokio's blocking pool (`spawn_blocking`), never on a runtime thread. The
//! blocking pool rather than a thread of the sink's own: while a blocking task runs, a paused tokio
//! clock does not skip ahead, so a test in virtual time sees a write take no time instead of its
//! shutdown's bound running out while the database works. [`SqliteSink::open`] opens the file at
//! once (WAL, `synchronous=NORMAL`, `busy_timeout`), so a bad path shows in the status from the
//! first moment; it probes with `PRAGMA table_info`, creates the table when absent, and in `auto`
//! mode adds missing columns one by one (plain `ALTER TABLE … ADD COLUMN`); in `manual` mode it
//! trims the INSERT to the existing columns and warns once with runnable SQL. Rows go out as
//! multi-row `INSERT OR IGNORE` with explicit columns, chunked under SQLite's variable limit.
//!
//! Failures never reach a caller: an unwritable path, a corrupt file or a lock timeout degrade the
//! sink for the cooldown (one WARN line; the writer retries after it); a row the database rejects
//! is dropped on its own.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use polygateway_actors::telemetry::TelemetrySink;
use rusqlite::{Connection, ErrorCode};

use super::row::TelemetryRow;
use super::schema::{self, SchemaBackend};
use super::status::{Admit, SinkHealth, TelemetryStatus, DEFAULT_COOLDOWN};
use crate::config::SchemaMode;

/// Rows per INSERT statement (also bounded by SQLite's variable limit).
const MAX_ROWS_PER_STATEMENT: usize = 256;
/// SQLite's default `SQLITE_MAX_VARIABLE_NUMBER` since 3.32 (the bundled build).
const MAX_VARIABLES: usize = 32_766;
/// Longest wait for the writer to close the database on shutdown.
const SHUTDOWN_BUDGET: Duration = Duration::from_secs(5);

/// Options of [`SqliteSink`].
///
/// ```
/// use std::time::Duration;
/// use polygateway::config::SchemaMode;
/// use polygateway::telemetry::SqliteOptions;
/// let options = SqliteOptions {
///     table: "gateway_calls".into(),
///     busy_timeout: Duration::from_secs(1),
///     ..SqliteOptions::new(Some(SchemaMode::Manual))
/// };
/// assert_eq!(options.schema_mode, SchemaMode::Manual);
/// assert_eq!(options.cooldown, Duration::from_secs(60));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct SqliteOptions {
    /// Table name (default `llm_calls`).
    pub table: String,
    /// Schema mode (SQLite default: auto).
    pub schema_mode: SchemaMode,
    /// How long to stay degraded before retrying (default 60 s).
    pub cooldown: Duration,
    /// `busy_timeout` of the connection (default 5 s).
    pub busy_timeout: Duration,
}

impl SqliteOptions {
    /// Defaults, with the configured schema mode (`None` → auto).
    ///
    /// ```
    /// use std::time::Duration;
    /// use polygateway::config::SchemaMode;
    /// use polygateway::telemetry::SqliteOptions;
    /// let options = SqliteOptions::new(None);
    /// assert_eq!(options.schema_mode, SchemaMode::Auto);
    /// assert_eq!(options.table, "llm_calls");
    /// assert_eq!(options.busy_timeout, Duration::from_secs(5));
    /// ```
    pub fn new(schema_mode: Option<SchemaMode>) -> Self {
        Self {
            table: schema::DEFAULT_TABLE.to_owned(),
            schema_mode: schema_mode.unwrap_or(SchemaMode::Auto),
            cooldown: DEFAULT_COOLDOWN,
            busy_timeout: Duration::from_secs(5),
        }
    }
}

/// Writes telemetry rows into a SQLite file, each batch on tokio's blocking pool.
///
/// The sink creates the file and the `llm_calls` table when it is opened; a file that cannot be
/// opened leaves it degraded from the start (and a WARN line logged), never failing a call:
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use polygateway::telemetry::{SqliteOptions, SqliteSink, TelemetryRow, TelemetrySink};
/// let dir = tempfile::tempdir().unwrap();
/// let sink = SqliteSink::open(dir.path().join("telemetry.db"), SqliteOptions::new(None));
/// let row = TelemetryRow { model: "qwen-max".into(), prompt_tokens: 7, ..TelemetryRow::new("call-1") };
/// sink.write_batch(vec![row]).await;
/// sink.shutdown().await;
/// assert_eq!(sink.status().dropped_rows, 0);
///
/// let db = rusqlite::Connection::open(sink.path()).unwrap();
/// let (model, tokens): (String, i64) = db
///     .query_row("SELECT model, prompt_tokens FROM llm_calls WHERE call_id = 'call-1'", [], |r| {
///         Ok((r.get(0)?, r.get(1)?))
///     })
///     .unwrap();
/// assert_eq!((model.as_str(), tokens), ("qwen-max", 7));
/// # }
/// ```
pub struct SqliteSink {
    /// `None` once shut down, or when the sink could not start.
    writer: Arc<Mutex<Option<Writer>>>,
    health: Arc<SinkHealth>,
    path: PathBuf,
}

impl std::fmt::Debug for SqliteSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteSink")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl SqliteSink {
    /// Open the database at `path`. Never fails: problems show up in the status.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use polygateway::telemetry::{SqliteOptions, SqliteSink, TelemetryRow, TelemetrySink};
    /// let dir = tempfile::tempdir().unwrap();
    /// // The directory does not exist: opening still succeeds (telemetry never stops a call), but
    /// // the sink is degraded from the first moment, naming the path.
    /// let sink = SqliteSink::open(dir.path().join("missing/telemetry.db"), SqliteOptions::new(None));
    /// let status = sink.status();
    /// assert!(status.degraded && !status.fatal);
    /// assert!(status.reason.unwrap().contains("missing/telemetry.db"));
    /// sink.write_batch(vec![TelemetryRow::new("call-1")]).await;
    /// assert_eq!(sink.status().dropped_rows, 1);
    /// sink.shutdown().await;
    /// # }
    /// ```
    pub fn open(path: impl Into<PathBuf>, options: SqliteOptions) -> Self {
        let path = path.into();
        let health = Arc::new(SinkHealth::new("sqlite", options.cooldown));
        if let Err(e) = schema::validate_table(&options.table) {
            health.set_fatal(e.to_string());
            return Self {
                writer: Arc::default(),
                health,
                path,
            };
        }
        let mut writer = Writer {
            path: path.clone(),
            options,
            health: Arc::clone(&health),
            conn: None,
            cols: Vec::new(),
            manual_warned: false,
        };
        // Opened here rather than on the first batch: a bad path must be visible in the status
        // (and the log) right after start, not after the first flush. Milliseconds, once.
        if let Err(reason) = writer.connect() {
            writer.health.degrade(reason, Instant::now());
        }
        Self {
            writer: Arc::new(Mutex::new(Some(writer))),
            health,
            path,
        }
    }

    /// The database path.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use polygateway::telemetry::{SqliteOptions, SqliteSink, TelemetrySink, TelemetryRow};
    /// let dir = tempfile::tempdir().unwrap();
    /// let path = dir.path().join("telemetry.db");
    /// let sink = SqliteSink::open(&path, SqliteOptions::new(None));
    /// assert_eq!(sink.path(), path);
    /// assert!(sink.path().exists()); // opened (and the table created) at once
    /// sink.write_batch(vec![TelemetryRow::new("call-1")]).await;
    /// sink.shutdown().await;
    /// let db = rusqlite::Connection::open(&path).unwrap();
    /// let rows: i64 = db.query_row("SELECT COUNT(*) FROM llm_calls", [], |r| r.get(0)).unwrap();
    /// assert_eq!(rows, 1);
    /// # }
    /// ```
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Run `work` on the writer, on tokio's blocking pool; `None` when the sink is shut down (or
    /// never started) or the work panicked.
    async fn on_writer<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut Option<Writer>) -> Option<T> + Send + 'static,
    ) -> Option<T> {
        let writer = Arc::clone(&self.writer);
        tokio::task::spawn_blocking(move || work(&mut lock(&writer)))
            .await
            .ok()
            .flatten()
    }
}

/// The writer, even if a write panicked while holding it: that batch is lost (its transaction
/// rolls back as the panic unwinds) and the next batch goes on with the same connection.
fn lock(writer: &Mutex<Option<Writer>>) -> MutexGuard<'_, Option<Writer>> {
    writer.lock().unwrap_or_else(|p| p.into_inner())
}

#[async_trait]
impl TelemetrySink<TelemetryRow> for SqliteSink {
    async fn write_batch(&self, rows: Vec<TelemetryRow>) {
        let n = rows.len() as u64;
        let written = self
            .on_writer(move |writer| writer.as_mut().map(|w| w.write(&rows)))
            .await;
        if written.is_none() {
            // Shut down, or the write panicked.
            self.health.drop_rows(n, Instant::now());
        }
    }

    fn status(&self) -> TelemetryStatus {
        self.health.status(Instant::now())
    }

    async fn shutdown(&self) {
        // Waits for a write in progress, then closes the connection (dropping the writer).
        let closed = self.on_writer(|writer| writer.take().map(drop));
        let _ = tokio::time::timeout(SHUTDOWN_BUDGET, closed).await;
    }
}

/// The writer's state: the connection and what it learned of the table.
struct Writer {
    path: PathBuf,
    options: SqliteOptions,
    health: Arc<SinkHealth>,
    conn: Option<Connection>,
    /// Indices (into the inserted columns) that the table has.
    cols: Vec<usize>,
    /// The manual-mode warning is logged once per sink, not once per reconnect.
    manual_warned: bool,
}

/// How a failure affects the sink.
enum Failure {
    /// The database is unusable right now: degrade.
    Environmental(String),
    /// This statement's data was rejected: isolate the bad row.
    RowLevel(String),
}

fn classify(e: &rusqlite::Error) -> Failure {
    let text = e.to_string();
    match e {
        rusqlite::Error::SqliteFailure(err, _) => match err.code {
            ErrorCode::ConstraintViolation | ErrorCode::TypeMismatch | ErrorCode::TooBig => {
                Failure::RowLevel(text)
            }
            // A table dropped under us: re-probe (and re-create) after the cooldown.
            ErrorCode::Unknown if text.contains("no such table") => Failure::Environmental(text),
            ErrorCode::Unknown => Failure::RowLevel(text),
            _ => Failure::Environmental(text),
        },
        _ => Failure::Environmental(text),
    }
}

impl Writer {
    fn write(&mut self, rows: &[TelemetryRow]) {
        if rows.is_empty() {
            return;
        }
        let now = Instant::now();
        if self.health.admit(now) == Admit::Skip {
            self.health.drop_rows(rows.len() as u64, now);
            return;
        }
        if self.conn.is_none() {
            if let Err(e) = self.connect() {
                self.fail_batch(e, rows.len(), now);
                return;
            }
        }
        match self.insert(rows) {
            Ok(()) => self.health.recover(now),
            Err(e) => match classify(&e) {
                Failure::Environmental(reason) => self.fail_batch(reason, rows.len(), now),
                Failure::RowLevel(_) => self.insert_one_by_one(rows, now),
            },
        }
    }

    fn fail_batch(&mut self, reason: String, rows: usize, now: Instant) {
        // Reconnect and re-probe on the next attempt: the file or table may have changed.
        self.conn = None;
        self.health.degrade(reason, now);
        self.health.drop_rows(rows as u64, now);
    }

    fn connect(&mut self) -> Result<(), String> {
        let conn = Connection::open(&self.path)
            .map_err(|e| format!("cannot open {}: {e}", self.path.display()))?;
        let cols = self
            .prepare(&conn)
            .map_err(|e| format!("{}: {e}", self.path.display()))?;
        self.cols = cols;
        self.conn = Some(conn);
        Ok(())
    }

    /// Connection settings, then the schema.
    fn prepare(&mut self, conn: &Connection) -> rusqlite::Result<Vec<usize>> {
        conn.busy_timeout(self.options.busy_timeout)?;
        let _mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
        conn.execute_batch("PRAGMA synchronous=NORMAL")?;
        self.ensure_schema(conn)
    }

    /// Probe, create or upgrade; returns the inserted-column indices to write.
    fn ensure_schema(&mut self, conn: &Connection) -> rusqlite::Result<Vec<usize>> {
        let table = &self.options.table;
        let existing = probe_columns(conn, table)?;
        let all: Vec<usize> = (0..schema::insert_columns().count()).collect();
        if existing.is_empty() {
            conn.execute_batch(&schema::create_table_sql(SchemaBackend::Sqlite, table))?;
            return Ok(all);
        }
        let (missing, present) = schema::diff_columns(&existing);
        if missing.is_empty() {
            return Ok(all);
        }
        match self.options.schema_mode {
            SchemaMode::Manual => {
                if !std::mem::replace(&mut self.manual_warned, true) {
                    tracing::warn!(
                        "{}",
                        schema::manual_mode_warning(SchemaBackend::Sqlite, table, &missing)
                    );
                }
                Ok(present)
            }
            SchemaMode::Auto => {
                for column in missing {
                    let sql = schema::add_column_sql(SchemaBackend::Sqlite, table, column, false);
                    if let Err(e) = conn.execute_batch(&sql) {
                        // Do not trim: the promise is to add the column; failures stay visible
                        // as row-level warnings.
                        tracing::warn!(column = column.name, error = %e, "telemetry: adding a column failed");
                    }
                }
                Ok(all)
            }
        }
    }

    fn insert(&mut self, rows: &[TelemetryRow]) -> rusqlite::Result<()> {
        let cols = self.cols.clone();
        let table = self.options.table.clone();
        let conn = self.conn.as_mut().expect("connected before insert");
        let per_statement = (MAX_VARIABLES / cols.len().max(1)).clamp(1, MAX_ROWS_PER_STATEMENT);
        let tx = conn.transaction()?;
        for chunk in rows.chunks(per_statement) {
            let sql = schema::insert_sql(SchemaBackend::Sqlite, &table, &cols, chunk.len());
            let mut stmt = tx.prepare_cached(&sql)?;
            let values: Vec<_> = chunk.iter().map(TelemetryRow::values).collect();
            let params: Vec<&dyn rusqlite::ToSql> = values
                .iter()
                .flat_map(|v| cols.iter().map(move |&i| &v[i] as &dyn rusqlite::ToSql))
                .collect();
            stmt.execute(params.as_slice())?;
        }
        tx.commit()
    }

    /// After a row-level batch failure: write row by row, dropping only the rows rejected.
    fn insert_one_by_one(&mut self, rows: &[TelemetryRow], now: Instant) {
        for (i, row) in rows.iter().enumerate() {
            match self.insert(std::slice::from_ref(row)) {
                Ok(()) => {}
                Err(e) => match classify(&e) {
                    Failure::RowLevel(detail) => self.health.row_rejected(&detail, now),
                    Failure::Environmental(reason) => {
                        self.fail_batch(reason, rows.len() - i, now);
                        return;
                    }
                },
            }
        }
        self.health.recover(now);
    }
}

fn probe_columns(conn: &Connection, table: &str) -> rusqlite::Result<Vec<String>> {
    let sql = match table.split_once('.') {
        Some((schema, name)) => format!("PRAGMA {schema}.table_info({name})"),
        None => format!("PRAGMA table_info({table})"),
    };
    let mut stmt = conn.prepare(&sql)?;
    let names = stmt.query_map([], |r| r.get::<_, String>(1))?;
    names.collect()
}
