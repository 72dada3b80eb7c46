//! The `llm_calls` schema: column names, order and types for both backends (docs/behaviour.md §8.1, §8.4), and
//! every SQL text derived from them — the DDL the sinks execute, the INSERT they prepare, and the
//! script [`telemetry_schema_sql`] prints for migrations. One set of constants, so the printed
//! script and the executed DDL cannot drift.
//!
//! Not here: probing, deciding what to run, executing (the sinks do that).

use std::fmt::Write as _;
use std::str::FromStr;

/// The table name the library writes to.
///
/// ```
/// use polygateway::telemetry::{SqliteOptions, DEFAULT_TABLE};
/// assert_eq!(DEFAULT_TABLE, "llm_calls");
/// assert_eq!(SqliteOptions::new(None).table, DEFAULT_TABLE);
/// ```
pub const DEFAULT_TABLE: &str = "llm_calls";

/// A telemetry backend that has a schema.
///
/// Parsed from the backend names operators type (`FromStr`):
///
/// ```
/// use polygateway::telemetry::SchemaBackend;
/// assert_eq!("pg".parse::<SchemaBackend>(), Ok(SchemaBackend::Postgres));
/// assert_eq!("sqlite".parse::<SchemaBackend>(), Ok(SchemaBackend::Sqlite));
/// assert!("mysql".parse::<SchemaBackend>().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SchemaBackend {
    /// PostgreSQL.
    Postgres,
    /// SQLite.
    Sqlite,
}

impl FromStr for SchemaBackend {
    type Err = String;
    /// `postgres` (or `postgresql`, `pg`) / `sqlite`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "postgres" | "postgresql" | "pg" => Ok(Self::Postgres),
            "sqlite" => Ok(Self::Sqlite),
            other => Err(format!(
                "unknown telemetry backend {other:?}: expected postgres or sqlite"
            )),
        }
    }
}

/// One column of `llm_calls`.
///
/// ```
/// use polygateway::telemetry::COLUMNS;
/// let cache_hit = COLUMNS.iter().find(|c| c.name == "cache_hit").unwrap();
/// assert_eq!((cache_hit.pg, cache_hit.sqlite), ("BOOLEAN", "INTEGER"));
/// assert!(cache_hit.inserted && !cache_hit.primary_key);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Column {
    /// Column name.
    pub name: &'static str,
    /// PostgreSQL type with constraints/defaults (no `PRIMARY KEY`).
    pub pg: &'static str,
    /// SQLite type with constraints/defaults (no `PRIMARY KEY`).
    pub sqlite: &'static str,
    /// The cast on this column's INSERT placeholder in PostgreSQL (matches the Rust value bound;
    /// PostgreSQL's assignment casts then fit it to the table's actual type).
    pub pg_cast: &'static str,
    /// The primary key of a table the library creates.
    pub primary_key: bool,
    /// Written by the library (`created_at` is left to the database default).
    pub inserted: bool,
}

const fn col(
    name: &'static str,
    pg: &'static str,
    sqlite: &'static str,
    pg_cast: &'static str,
) -> Column {
    Column {
        name,
        pg,
        sqlite,
        pg_cast,
        primary_key: false,
        inserted: true,
    }
}

/// Every column in table order. New columns are only ever appended.
///
/// ```
/// use polygateway::telemetry::COLUMNS;
/// assert_eq!(COLUMNS[0].name, "call_id");
/// assert!(COLUMNS[0].primary_key);
/// assert_eq!(COLUMNS.iter().filter(|c| c.primary_key).count(), 1);
/// assert_eq!(COLUMNS.last().unwrap().name, "continued_from");
/// ```
pub const COLUMNS: [Column; 34] = [
    Column {
        primary_key: true,
        ..col("call_id", "TEXT", "TEXT", "text")
    },
    col("parent_call_id", "TEXT", "TEXT", "text"),
    col("session_id", "TEXT", "TEXT", "text"),
    col("model", "TEXT", "TEXT", "text"),
    col("provider", "TEXT", "TEXT", "text"),
    col("source_name", "TEXT", "TEXT", "text"),
    col("messages", "TEXT", "TEXT", "text"),
    col("response", "TEXT", "TEXT", "text"),
    col("thinking", "TEXT", "TEXT", "text"),
    col("prompt_tokens", "INTEGER", "INTEGER", "int8"),
    col("completion_tokens", "INTEGER", "INTEGER", "int8"),
    col("usage_source", "TEXT", "TEXT", "text"),
    col("latency_ms", "DOUBLE PRECISION", "REAL", "float8"),
    col("ttft_ms", "DOUBLE PRECISION", "REAL", "float8"),
    col("max_inter_token_ms", "DOUBLE PRECISION", "REAL", "float8"),
    col("cache_hit", "BOOLEAN", "INTEGER", "bool"),
    col("error", "TEXT", "TEXT", "text"),
    col("cost", "DOUBLE PRECISION", "REAL", "float8"),
    Column {
        inserted: false,
        ..col(
            "created_at",
            "TIMESTAMPTZ NOT NULL DEFAULT now()",
            "TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP",
            "timestamptz",
        )
    },
    col("cached_prompt_tokens", "INTEGER", "INTEGER", "int8"),
    col("model_reported", "TEXT", "TEXT", "text"),
    col("sampling", "TEXT", "TEXT", "text"),
    col("reasoning_tokens", "INTEGER", "INTEGER", "int8"),
    col(
        "tenant_id",
        "TEXT NOT NULL DEFAULT ''",
        "TEXT NOT NULL DEFAULT ''",
        "text",
    ),
    col(
        "meta",
        "JSONB NOT NULL DEFAULT '{}'",
        "TEXT NOT NULL DEFAULT '{}'",
        "text::jsonb",
    ),
    col("structured_mode", "TEXT", "TEXT", "text"),
    col("finish_reason", "TEXT", "TEXT", "text"),
    col("tool_call_count", "INTEGER", "INTEGER", "int8"),
    col("capacity_wait_ms", "DOUBLE PRECISION", "REAL", "float8"),
    col("call_group_id", "TEXT", "TEXT", "text"),
    col("cache_read_tokens", "INTEGER", "INTEGER", "int8"),
    col("cache_write_tokens", "INTEGER", "INTEGER", "int8"),
    col("cache_write_1h_tokens", "INTEGER", "INTEGER", "int8"),
    col("continued_from", "TEXT", "TEXT", "text"),
];

/// The columns the library INSERTs, in order (every column but `created_at`); the order of
/// `TelemetryRow`'s fields.
pub(crate) fn insert_columns() -> impl Iterator<Item = &'static Column> {
    COLUMNS.iter().filter(|c| c.inserted)
}

impl Column {
    /// The type clause for `backend`.
    pub(crate) fn sql_type(&self, backend: SchemaBackend) -> &'static str {
        match backend {
            SchemaBackend::Postgres => self.pg,
            SchemaBackend::Sqlite => self.sqlite,
        }
    }
}

/// Why a table name was refused.
///
/// ```
/// use polygateway::telemetry::schema::InvalidTableName;
/// let err = InvalidTableName("calls; DROP TABLE users".into());
/// assert!(err.to_string().starts_with("invalid telemetry table name"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid telemetry table name {0:?}: expected [schema.]name of [A-Za-z_][A-Za-z0-9_]*")]
pub struct InvalidTableName(pub String);

/// Check a table name (optionally schema-qualified) so it can be spliced into SQL unquoted.
pub(crate) fn validate_table(table: &str) -> Result<(), InvalidTableName> {
    let ident = |s: &str| {
        !s.is_empty()
            && s.len() <= 63
            && s.chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    let ok = match table.split_once('.') {
        Some((schema, name)) => ident(schema) && ident(name),
        None => ident(table),
    };
    if ok {
        Ok(())
    } else {
        Err(InvalidTableName(table.to_owned()))
    }
}

/// `CREATE TABLE IF NOT EXISTS` with every column, in order.
///
/// ```
/// use polygateway::telemetry::{create_table_sql, SchemaBackend};
/// let sql = create_table_sql(SchemaBackend::Sqlite, "llm_calls");
/// assert!(sql.starts_with("CREATE TABLE IF NOT EXISTS llm_calls (\n    call_id TEXT PRIMARY KEY,"));
/// assert!(sql.contains("created_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,"));
/// assert!(sql.contains("meta TEXT NOT NULL DEFAULT '{}',"));
/// assert!(sql.contains("structured_mode TEXT,\n    finish_reason TEXT,"));
/// assert!(sql.ends_with("call_group_id TEXT,\n    cache_read_tokens INTEGER,\n    cache_write_tokens INTEGER,\n    cache_write_1h_tokens INTEGER,\n    continued_from TEXT\n)"));
/// ```
pub fn create_table_sql(backend: SchemaBackend, table: &str) -> String {
    let mut sql = format!("CREATE TABLE IF NOT EXISTS {table} (\n");
    for (i, c) in COLUMNS.iter().enumerate() {
        let sep = if i + 1 == COLUMNS.len() { "" } else { "," };
        let pk = if c.primary_key { " PRIMARY KEY" } else { "" };
        let _ = writeln!(sql, "    {} {}{pk}{sep}", c.name, c.sql_type(backend));
    }
    sql.push(')');
    sql
}

/// `ALTER TABLE … ADD COLUMN …` for one column. `if_not_exists` is only for the printed
/// PostgreSQL script; the library probes first and never sends it.
pub(crate) fn add_column_sql(
    backend: SchemaBackend,
    table: &str,
    column: &Column,
    if_not_exists: bool,
) -> String {
    let guard = if if_not_exists && backend == SchemaBackend::Postgres {
        "IF NOT EXISTS "
    } else {
        ""
    };
    format!(
        "ALTER TABLE {table} ADD COLUMN {guard}{} {}",
        column.name,
        column.sql_type(backend)
    )
}

/// A script to create or upgrade the table by hand: a header, the full
/// `CREATE TABLE IF NOT EXISTS`, then one add-column statement per column that was appended after
/// the original set (PostgreSQL with `IF NOT EXISTS`, re-runnable; SQLite as comments to run only
/// when the column is missing).
///
/// ```
/// use polygateway::telemetry::{telemetry_schema_sql, SchemaBackend};
/// let sql = telemetry_schema_sql(SchemaBackend::Postgres);
/// assert!(sql.contains("CREATE TABLE IF NOT EXISTS llm_calls"));
/// assert!(sql.contains("ADD COLUMN IF NOT EXISTS meta JSONB NOT NULL DEFAULT '{}'"));
/// ```
pub fn telemetry_schema_sql(backend: SchemaBackend) -> String {
    let table = DEFAULT_TABLE;
    let name = match backend {
        SchemaBackend::Postgres => "PostgreSQL",
        SchemaBackend::Sqlite => "SQLite",
    };
    let mut out = String::new();
    let _ = writeln!(out, "-- polygateway telemetry table `{table}` ({name})");
    let _ = writeln!(
        out,
        "-- Generated from the constants the library executes. The library only probes the catalog,"
    );
    let _ = writeln!(
        out,
        "-- INSERTs with explicit columns, and creates the table when it is absent."
    );
    let _ = writeln!(out);
    let _ = writeln!(out, "{};", create_table_sql(backend, table));
    let _ = writeln!(out);
    let upgrades = COLUMNS
        .iter()
        .skip_while(|c| c.name != "created_at")
        .skip(1);
    match backend {
        SchemaBackend::Postgres => {
            let _ = writeln!(
                out,
                "-- Upgrade an older table (re-runnable; each statement takes an ACCESS EXCLUSIVE lock)."
            );
            for c in upgrades {
                let _ = writeln!(out, "{};", add_column_sql(backend, table, c, true));
            }
        }
        SchemaBackend::Sqlite => {
            let _ = writeln!(
                out,
                "-- Upgrade an older table: run each statement only if the column is missing"
            );
            let _ = writeln!(out, "-- (SQLite has no ADD COLUMN IF NOT EXISTS).");
            for c in upgrades {
                let _ = writeln!(out, "-- {};", add_column_sql(backend, table, c, false));
            }
        }
    }
    out
}

/// Multi-row INSERT for `rows` rows over the inserted columns selected by `cols` (indices into
/// [`insert_columns`]), with the backend's conflict clause.
pub(crate) fn insert_sql(
    backend: SchemaBackend,
    table: &str,
    cols: &[usize],
    rows: usize,
) -> String {
    let all: Vec<&Column> = insert_columns().collect();
    let names: Vec<&str> = cols.iter().map(|&i| all[i].name).collect();
    let verb = match backend {
        SchemaBackend::Postgres => "INSERT INTO",
        SchemaBackend::Sqlite => "INSERT OR IGNORE INTO",
    };
    let mut sql = format!("{verb} {table} ({}) VALUES ", names.join(", "));
    let mut n = 0usize;
    for r in 0..rows {
        if r > 0 {
            sql.push_str(", ");
        }
        sql.push('(');
        for (j, &i) in cols.iter().enumerate() {
            if j > 0 {
                sql.push_str(", ");
            }
            n += 1;
            match backend {
                SchemaBackend::Postgres => {
                    let _ = write!(sql, "${n}::{}", all[i].pg_cast);
                }
                SchemaBackend::Sqlite => {
                    let _ = write!(sql, "?{n}");
                }
            }
        }
        sql.push(')');
    }
    if backend == SchemaBackend::Postgres {
        // No conflict target: partitioned tables (PK (call_id, created_at)) must work too.
        sql.push_str(" ON CONFLICT DO NOTHING");
    }
    sql
}

/// The names of the inserted columns missing from `existing`, and the indices (into
/// [`insert_columns`]) of those present.
pub(crate) fn diff_columns(existing: &[String]) -> (Vec<&'static Column>, Vec<usize>) {
    let mut missing = Vec::new();
    let mut present = Vec::new();
    for c in COLUMNS.iter() {
        if !existing.iter().any(|e| e == c.name) {
            missing.push(c);
        }
    }
    for (i, c) in insert_columns().enumerate() {
        if existing.iter().any(|e| e == c.name) {
            present.push(i);
        }
    }
    (missing, present)
}

/// The one warning of manual mode: which columns are missing and the SQL to add them.
pub(crate) fn manual_mode_warning(
    backend: SchemaBackend,
    table: &str,
    missing: &[&Column],
) -> String {
    let names: Vec<&str> = missing.iter().map(|c| c.name).collect();
    let sql: Vec<String> = missing
        .iter()
        .map(|c| {
            format!(
                "{};",
                add_column_sql(backend, table, c, backend == SchemaBackend::Postgres)
            )
        })
        .collect();
    format!(
        "telemetry table {table} lacks columns [{}]; schema mode is manual, so rows are written \
         without them. To add them run: {}",
        names.join(", "),
        sql.join(" ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn column_order_is_the_original_one() {
        let names: Vec<&str> = COLUMNS.iter().map(|c| c.name).collect();
        assert_eq!(
            names,
            [
                "call_id",
                "parent_call_id",
                "session_id",
                "model",
                "provider",
                "source_name",
                "messages",
                "response",
                "thinking",
                "prompt_tokens",
                "completion_tokens",
                "usage_source",
                "latency_ms",
                "ttft_ms",
                "max_inter_token_ms",
                "cache_hit",
                "error",
                "cost",
                "created_at",
                "cached_prompt_tokens",
                "model_reported",
                "sampling",
                "reasoning_tokens",
                "tenant_id",
                "meta",
                "structured_mode",
                "finish_reason",
                "tool_call_count",
                "capacity_wait_ms",
                "call_group_id",
                "cache_read_tokens",
                "cache_write_tokens",
                "cache_write_1h_tokens",
                "continued_from"
            ]
        );
        assert_eq!(insert_columns().count(), 33);
    }

    #[test]
    fn schema_script_has_header_create_and_upgrades() {
        let pg = telemetry_schema_sql(SchemaBackend::Postgres);
        assert!(pg.starts_with("-- polygateway telemetry table"));
        assert!(pg.contains("call_id TEXT PRIMARY KEY,"));
        assert!(pg.contains("created_at TIMESTAMPTZ NOT NULL DEFAULT now()"));
        assert_eq!(pg.matches("ADD COLUMN IF NOT EXISTS").count(), 15);
        let lite = telemetry_schema_sql(SchemaBackend::Sqlite);
        assert!(lite
            .contains("-- ALTER TABLE llm_calls ADD COLUMN tenant_id TEXT NOT NULL DEFAULT '';"));
        assert!(!lite.contains("IF NOT EXISTS tenant_id"));
        assert!(lite.lines().filter(|l| l.starts_with("ALTER")).count() == 0);
    }

    #[test]
    fn insert_sql_lists_columns_and_numbers_placeholders() {
        let pg = insert_sql(SchemaBackend::Postgres, "t", &[0, 23], 2);
        assert_eq!(
            pg,
            "INSERT INTO t (call_id, meta) VALUES ($1::text, $2::text::jsonb), ($3::text, $4::text::jsonb) ON CONFLICT DO NOTHING"
        );
        let lite = insert_sql(SchemaBackend::Sqlite, "t", &[0, 1], 1);
        assert_eq!(
            lite,
            "INSERT OR IGNORE INTO t (call_id, parent_call_id) VALUES (?1, ?2)"
        );
    }

    #[test]
    fn table_names_are_validated() {
        assert!(validate_table("llm_calls").is_ok());
        assert!(validate_table("audit.llm_calls").is_ok());
        assert!(validate_table("x; DROP TABLE y").is_err());
        assert!(validate_table("1abc").is_err());
        assert!(validate_table("a.b.c").is_err());
        assert!("mysql".parse::<SchemaBackend>().is_err());
    }

    #[test]
    fn diff_reports_missing_and_present() {
        let existing: Vec<String> = COLUMNS[..19].iter().map(|c| c.name.to_string()).collect();
        let (missing, present) = diff_columns(&existing);
        let names: Vec<&str> = missing.iter().map(|c| c.name).collect();
        assert_eq!(
            names,
            [
                "cached_prompt_tokens",
                "model_reported",
                "sampling",
                "reasoning_tokens",
                "tenant_id",
                "meta",
                "structured_mode",
                "finish_reason",
                "tool_call_count",
                "capacity_wait_ms",
                "call_group_id",
                "cache_read_tokens",
                "cache_write_tokens",
                "cache_write_1h_tokens",
                "continued_from"
            ]
        );
        assert_eq!(present, (0..18).collect::<Vec<_>>());
    }
}

#[cfg(test)]
mod examples {
    //! Usage cases of crate-private items (they were doc examples while the items were public).

    #[test]
    fn insert_columns_example() {
        use crate::telemetry::{schema::insert_columns, COLUMNS};
        let names: Vec<&str> = insert_columns().map(|c| c.name).collect();
        assert_eq!(names.len(), COLUMNS.len() - 1);
        assert!(!names.contains(&"created_at")); // filled by the database
    }

    #[test]
    fn column_sql_type_example() {
        use crate::telemetry::{SchemaBackend, COLUMNS};
        let meta = COLUMNS.iter().find(|c| c.name == "meta").unwrap();
        assert_eq!(
            meta.sql_type(SchemaBackend::Postgres),
            "JSONB NOT NULL DEFAULT '{}'"
        );
        assert_eq!(
            meta.sql_type(SchemaBackend::Sqlite),
            "TEXT NOT NULL DEFAULT '{}'"
        );
    }

    #[test]
    fn validate_table_example() {
        use crate::telemetry::schema::{validate_table, InvalidTableName};
        assert!(validate_table("llm_calls").is_ok());
        assert!(validate_table("audit.llm_calls").is_ok());
        assert!(validate_table("1calls").is_err()); // starts with a digit
        assert!(validate_table("\"llm_calls\"").is_err()); // quoting is not supported
                                                           // The refusal names the table as given (this was `InvalidTableName`'s example).
        let err = validate_table("calls; DROP TABLE users").unwrap_err();
        assert_eq!(err, InvalidTableName("calls; DROP TABLE users".into()));
    }

    #[test]
    fn add_column_sql_example() {
        use crate::telemetry::schema::add_column_sql;
        use crate::telemetry::{SchemaBackend, COLUMNS};
        let tenant = COLUMNS.iter().find(|c| c.name == "tenant_id").unwrap();
        assert_eq!(
            add_column_sql(SchemaBackend::Postgres, "llm_calls", tenant, true),
            "ALTER TABLE llm_calls ADD COLUMN IF NOT EXISTS tenant_id TEXT NOT NULL DEFAULT ''"
        );
        // SQLite has no `IF NOT EXISTS` here: the flag is ignored.
        assert_eq!(
            add_column_sql(SchemaBackend::Sqlite, "llm_calls", tenant, true),
            "ALTER TABLE llm_calls ADD COLUMN tenant_id TEXT NOT NULL DEFAULT ''"
        );
    }
}
