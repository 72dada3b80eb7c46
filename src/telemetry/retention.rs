//! The retention tool behind the CLI subcommand (docs/behaviour.md §8.7): count — or, with `apply`, delete in
//! bounded batches — the rows of a plain telemetry table older than N days.
//!
//! This is an operator's tool, never called by the runtime (the library itself issues no
//! DELETE). A partitioned PostgreSQL table is refused with a distinct error (the CLI maps it to
//! exit code 3): drop or detach old partitions instead.

use std::path::PathBuf;

use super::schema::{validate_table, InvalidTableName};
use crate::config::Secret;

/// Where the table lives.
///
/// ```
/// use polygateway::config::Secret;
/// use polygateway::telemetry::RetentionTarget;
/// let targets = [
///     RetentionTarget::Sqlite("telemetry.db".into()),
///     RetentionTarget::Postgres(Secret::new("postgres://ops@db/telemetry")),
/// ];
/// // The DSN is a secret: it never shows in debug output.
/// assert!(!format!("{targets:?}").contains("ops@db"));
/// ```
#[derive(Debug, Clone)]
pub enum RetentionTarget {
    /// A PostgreSQL DSN.
    Postgres(Secret),
    /// A SQLite file.
    Sqlite(PathBuf),
}

/// What a retention run found and did.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use polygateway::telemetry::{create_table_sql, retention, RetentionReport, RetentionTarget, SchemaBackend};
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("telemetry.db");
/// let db = rusqlite::Connection::open(&path).unwrap();
/// db.execute_batch(&create_table_sql(SchemaBackend::Sqlite, "llm_calls")).unwrap();
/// let report = retention(&RetentionTarget::Sqlite(path), "llm_calls", 30, false, 1000)
///     .await
///     .unwrap();
/// assert_eq!(report, RetentionReport { matched: 0, deleted: 0, applied: false });
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionReport {
    /// Rows older than the cutoff when the run started.
    pub matched: u64,
    /// Rows deleted (0 on a dry run).
    pub deleted: u64,
    /// `false` for a dry run.
    pub applied: bool,
}

/// Why a retention run did not complete.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use polygateway::telemetry::{retention, RetentionError, RetentionTarget};
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("empty.db");
/// rusqlite::Connection::open(&path).unwrap(); // a database without the table
/// let target = RetentionTarget::Sqlite(path);
/// let err = retention(&target, "llm_calls", 30, false, 1000).await.unwrap_err();
/// assert!(matches!(err, RetentionError::NoTable(ref t) if t == "llm_calls"));
/// let err = retention(&target, "llm_calls; --", 30, false, 1000).await.unwrap_err();
/// assert!(matches!(err, RetentionError::InvalidTable(_)));
/// let err = retention(&target, "llm_calls", 30, false, 0).await.unwrap_err();
/// assert!(matches!(err, RetentionError::InvalidArgs(_)));
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
pub enum RetentionError {
    /// The table is partitioned: use `DROP`/`DETACH PARTITION` (exit code 3).
    #[error("table {0} is partitioned: drop or detach old partitions instead of deleting rows")]
    Partitioned(String),
    /// The table does not exist.
    #[error("table {0} does not exist")]
    NoTable(String),
    /// The table name cannot be used.
    #[error(transparent)]
    InvalidTable(#[from] InvalidTableName),
    /// Bad arguments (batch size 0, …).
    #[error("invalid retention arguments: {0}")]
    InvalidArgs(String),
    /// The database failed (message without secrets).
    #[error("database error: {0}")]
    Database(String),
}

impl RetentionError {
    /// The CLI exit code: 3 for a partitioned table, 1 otherwise.
    ///
    /// ```
    /// use polygateway::telemetry::RetentionError;
    /// assert_eq!(RetentionError::Partitioned("llm_calls".into()).exit_code(), 3);
    /// assert_eq!(RetentionError::NoTable("llm_calls".into()).exit_code(), 1);
    /// assert_eq!(RetentionError::Database("timeout".into()).exit_code(), 1);
    /// ```
    pub fn exit_code(&self) -> i32 {
        match self {
            RetentionError::Partitioned(_) => 3,
            _ => 1,
        }
    }
}

/// Count (dry run) or delete (`apply`) rows of `table` whose `created_at` is more than
/// `older_than_days` days old, deleting at most `batch` rows per statement.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use polygateway::telemetry::{create_table_sql, retention, RetentionTarget, SchemaBackend};
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("telemetry.db");
/// let db = rusqlite::Connection::open(&path)?;
/// db.execute_batch(&create_table_sql(SchemaBackend::Sqlite, "llm_calls"))?;
/// db.execute_batch(
///     "INSERT INTO llm_calls (call_id, created_at) VALUES ('old-1', '2020-01-01 00:00:00');
///      INSERT INTO llm_calls (call_id, created_at) VALUES ('old-2', '2020-01-02 00:00:00');
///      INSERT INTO llm_calls (call_id) VALUES ('new');",
/// )?;
/// let target = RetentionTarget::Sqlite(path);
/// // Dry run: count only.
/// let dry = retention(&target, "llm_calls", 90, false, 1).await?;
/// assert_eq!((dry.matched, dry.deleted, dry.applied), (2, 0, false));
/// // Apply: delete in batches of one row.
/// let applied = retention(&target, "llm_calls", 90, true, 1).await?;
/// assert_eq!((applied.matched, applied.deleted), (2, 2));
/// let left: i64 = db.query_row("SELECT count(*) FROM llm_calls", [], |r| r.get(0))?;
/// assert_eq!(left, 1);
/// # Ok(()) }
/// ```
// Without either database feature every target is refused before the arguments are used.
#[cfg_attr(
    not(any(feature = "postgres", feature = "sqlite")),
    allow(unused_variables)
)]
pub async fn retention(
    target: &RetentionTarget,
    table: &str,
    older_than_days: u32,
    apply: bool,
    batch: usize,
) -> Result<RetentionReport, RetentionError> {
    validate_table(table)?;
    if batch == 0 {
        return Err(RetentionError::InvalidArgs(
            "batch must be at least 1".into(),
        ));
    }
    let days = i32::try_from(older_than_days)
        .map_err(|_| RetentionError::InvalidArgs("older_than_days is too large".into()))?;
    match target {
        #[cfg(feature = "postgres")]
        RetentionTarget::Postgres(dsn) => postgres(dsn, table, days, apply, batch).await,
        #[cfg(feature = "sqlite")]
        RetentionTarget::Sqlite(path) => {
            let (path, table) = (path.clone(), table.to_owned());
            tokio::task::spawn_blocking(move || sqlite(&path, &table, days, apply, batch))
                .await
                .map_err(|e| RetentionError::Database(e.to_string()))?
        }
        #[cfg(not(feature = "postgres"))]
        RetentionTarget::Postgres(_) => Err(feature_disabled("a PostgreSQL table", "postgres")),
        #[cfg(not(feature = "sqlite"))]
        RetentionTarget::Sqlite(_) => Err(feature_disabled("a SQLite table", "sqlite")),
    }
}

#[cfg(not(all(feature = "postgres", feature = "sqlite")))]
fn feature_disabled(what: &str, feature: &str) -> RetentionError {
    RetentionError::InvalidArgs(format!(
        "retention on {what} needs polygateway's `{feature}` cargo feature, which this build \
         does not enable"
    ))
}

#[cfg(feature = "postgres")]
async fn postgres(
    dsn: &Secret,
    table: &str,
    days: i32,
    apply: bool,
    batch: usize,
) -> Result<RetentionReport, RetentionError> {
    let redact = |e: tokio_postgres::Error| {
        let mut text = e.to_string();
        if let Some(db) = e.as_db_error() {
            text = format!("{}: {}", db.code().code(), db.message());
        } else if let Some(source) = std::error::Error::source(&e) {
            text = format!("{text}: {source}");
        }
        if let Ok(cfg) = dsn.expose().parse::<tokio_postgres::Config>() {
            if let Some(pw) = cfg.get_password().filter(|p| !p.is_empty()) {
                text = text.replace(&*String::from_utf8_lossy(pw), "***");
            }
        }
        RetentionError::Database(text)
    };
    let (client, connection) = tokio_postgres::connect(dsn.expose(), tokio_postgres::NoTls)
        .await
        .map_err(redact)?;
    let conn_task = tokio::spawn(connection);
    let result = async {
        let row = client
            .query_one(
                "SELECT to_regclass($1::text)::oid, \
                 EXISTS (SELECT 1 FROM pg_partitioned_table WHERE partrelid = to_regclass($1::text))",
                &[&table],
            )
            .await
            .map_err(redact)?;
        let oid: Option<u32> = row.get(0);
        if oid.is_none() {
            return Err(RetentionError::NoTable(table.to_owned()));
        }
        if row.get::<_, bool>(1) {
            return Err(RetentionError::Partitioned(table.to_owned()));
        }
        // One cutoff for the whole run, so batches agree on what "old" means.
        let cutoff: String = client
            .query_one("SELECT (now() - make_interval(days => $1))::text", &[&days])
            .await
            .map_err(redact)?
            .get(0);
        let matched: i64 = client
            .query_one(
                &format!("SELECT count(*) FROM {table} WHERE created_at < $1::text::timestamptz"),
                &[&cutoff],
            )
            .await
            .map_err(redact)?
            .get(0);
        let mut deleted = 0u64;
        if apply {
            let sql = format!(
                "DELETE FROM {table} WHERE ctid = ANY(ARRAY(SELECT ctid FROM {table} \
                 WHERE created_at < $1::text::timestamptz LIMIT $2))"
            );
            let limit = batch as i64;
            loop {
                let n = client.execute(&sql, &[&cutoff, &limit]).await.map_err(redact)?;
                deleted += n;
                if n == 0 {
                    break;
                }
            }
        }
        Ok(RetentionReport {
            matched: matched as u64,
            deleted,
            applied: apply,
        })
    }
    .await;
    drop(client);
    let _ = conn_task.await;
    result
}

#[cfg(feature = "sqlite")]
fn sqlite(
    path: &std::path::Path,
    table: &str,
    days: i32,
    apply: bool,
    batch: usize,
) -> Result<RetentionReport, RetentionError> {
    let db = |e: rusqlite::Error| RetentionError::Database(e.to_string());
    if !path.exists() {
        return Err(RetentionError::Database(format!(
            "{} does not exist",
            path.display()
        )));
    }
    let conn = rusqlite::Connection::open(path).map_err(db)?;
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .map_err(db)?;
    let info = match table.split_once('.') {
        Some((schema, name)) => format!("PRAGMA {schema}.table_info({name})"),
        None => format!("PRAGMA table_info({table})"),
    };
    let columns: usize = conn
        .prepare(&info)
        .and_then(|mut s| s.query_map([], |_| Ok(()))?.count_ok())
        .map_err(db)?;
    if columns == 0 {
        return Err(RetentionError::NoTable(table.to_owned()));
    }
    let cutoff: String = conn
        .query_row(
            "SELECT datetime('now', ?1)",
            [format!("-{days} days")],
            |r| r.get(0),
        )
        .map_err(db)?;
    let matched: i64 = conn
        .query_row(
            &format!("SELECT count(*) FROM {table} WHERE created_at < ?1"),
            [&cutoff],
            |r| r.get(0),
        )
        .map_err(db)?;
    let mut deleted = 0u64;
    if apply {
        let sql = format!(
            "DELETE FROM {table} WHERE rowid IN (SELECT rowid FROM {table} WHERE created_at < ?1 LIMIT ?2)"
        );
        loop {
            let n = conn
                .execute(&sql, rusqlite::params![cutoff, batch as i64])
                .map_err(db)?;
            deleted += n as u64;
            if n == 0 {
                break;
            }
        }
    }
    Ok(RetentionReport {
        matched: matched as u64,
        deleted,
        applied: apply,
    })
}

/// Counting helper for rusqlite row iterators.
#[cfg(feature = "sqlite")]
trait CountOk {
    fn count_ok(self) -> rusqlite::Result<usize>;
}

#[cfg(feature = "sqlite")]
impl<I: Iterator<Item = rusqlite::Result<()>>> CountOk for I {
    fn count_ok(self) -> rusqlite::Result<usize> {
        let mut n = 0;
        for r in self {
            r?;
            n += 1;
        }
        Ok(n)
    }
}
