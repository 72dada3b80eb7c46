//! Telemetry (docs/behaviour.md §8): the row written for every attempt, cache hit and terminal failure; what it
//! stores (digested messages, sampling, `ClassName: message` errors); its cost; the `llm_calls`
//! schema; the SQLite and PostgreSQL sinks with their degrade logic; the retention tool.
//!
//! The batching actor and its queue are generic and live in
//! [`polygateway_actors::telemetry`]; this module supplies the concrete row and sinks. Recording
//! never fails a call: sinks swallow and count their failures and report through
//! [`TelemetryStatus`].

// The sink plumbing shared by the database sinks (SQL parameters, INSERT statements, sink
// health) has no user when neither database feature is compiled in.
#![cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]

pub mod cost;
pub mod digest;
#[cfg(feature = "postgres")]
pub mod postgres;
pub(crate) mod record;
pub mod retention;
pub mod row;
pub mod schema;
#[cfg(feature = "sqlite")]
pub mod sqlite;
mod status;

use std::sync::Arc;

pub use cost::{ModelPrice, Pricing, PricingError};
pub use digest::messages_json;
pub use polygateway_actors::telemetry::{NullSink, TelemetryConfig, TelemetrySink};
#[cfg(feature = "postgres")]
pub use postgres::{PostgresOptions, PostgresSink};
pub use retention::{retention, RetentionError, RetentionReport, RetentionTarget};
pub use row::TelemetryRow;
pub use schema::{
    create_table_sql, telemetry_schema_sql, Column, SchemaBackend, COLUMNS, DEFAULT_TABLE,
};
#[cfg(feature = "sqlite")]
pub use sqlite::{SqliteOptions, SqliteSink};
pub use status::TelemetryStatus;

#[cfg(any(feature = "sqlite", feature = "postgres"))]
use crate::config::TelemetryBackendSettings;
use crate::config::{ConfigError, TelemetrySettings};

/// The sink configured by `settings`: [`NullSink`] for `none`, [`SqliteSink`] or
/// `PostgresSink` otherwise. It checks at once: the SQLite file is opened and the PostgreSQL
/// server probed (`PostgresSink::probe`, bounded by the write budget), so a bad path or an
/// unreachable database shows in the status — degraded, with one WARN line — from the start
/// rather than after the first flush. The one error is a backend whose cargo feature (`sqlite`,
/// `postgres`) this build lacks.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use polygateway::config::{Secret, TelemetryBackendSettings, TelemetrySettings};
/// use polygateway::telemetry::{sink_from_settings, TelemetryRow};
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("telemetry.db").to_string_lossy().into_owned();
/// let settings = TelemetrySettings {
///     backend: TelemetryBackendSettings::Sqlite { path },
///     schema_mode: None,
///     text_cap: None,
/// };
/// let sink = sink_from_settings(&settings).await.unwrap();
/// sink.write_batch(vec![TelemetryRow::new("call-1")]).await;
/// assert!(!sink.status().degraded);
/// sink.shutdown().await;
///
/// // A DSN that does not parse gives a sink that is fatal from the start, not an error.
/// let settings = TelemetrySettings {
///     backend: TelemetryBackendSettings::Postgres {
///         dsn: Secret::new("postgres://app:pw@db:notaport/x"),
///         pool_max: 4,
///         write_timeout: std::time::Duration::from_secs(5),
///     },
///     ..settings
/// };
/// assert!(sink_from_settings(&settings).await.unwrap().status().fatal);
///
/// // A server that does not answer: degraded before any row is written.
/// let settings = TelemetrySettings {
///     backend: TelemetryBackendSettings::Postgres {
///         dsn: Secret::new("host=127.0.0.1 port=9 user=app dbname=x"),
///         pool_max: 4,
///         write_timeout: std::time::Duration::from_secs(1),
///     },
///     ..settings
/// };
/// assert!(sink_from_settings(&settings).await.unwrap().status().degraded);
/// # }
/// ```
pub async fn sink_from_settings(
    settings: &TelemetrySettings,
) -> Result<Arc<dyn TelemetrySink<TelemetryRow>>, ConfigError> {
    crate::config::features::telemetry(&settings.backend)?;
    Ok(match &settings.backend {
        #[cfg(feature = "sqlite")]
        TelemetryBackendSettings::Sqlite { path } => Arc::new(SqliteSink::open(
            path.clone(),
            SqliteOptions::new(settings.schema_mode),
        )),
        #[cfg(feature = "postgres")]
        TelemetryBackendSettings::Postgres {
            dsn,
            pool_max,
            write_timeout,
        } => {
            let mut options = PostgresOptions::new(settings.schema_mode);
            options.pool_max = *pool_max;
            options.write_timeout = *write_timeout;
            let sink = PostgresSink::new(dsn, options);
            sink.probe().await;
            Arc::new(sink)
        }
        // `None`, and the backends refused above.
        _ => Arc::new(NullSink),
    })
}
