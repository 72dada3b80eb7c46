//! Building the runtime-wide settings (backends, library knobs, the server) from the global keys.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use super::read::{invalid, Keys};
use crate::config::defaults;
use crate::config::error::ConfigError;
use crate::config::keys::{global, KeyDef};
use crate::config::settings::*;
use crate::config::ServerSettings;

/// Placeholder shown instead of a secret value.
const HIDDEN: &str = "(value hidden: it may hold a secret)";

/// The `REDIS_URL` forms the Redis client accepts (docs/manual/redis.md, "Scaling out").
const REDIS_URL_FORMS: &str = "one server redis://[:password@]host:6379[/db], \
    a cluster redis-cluster://[:password@]host:7000[?node=host:7001&node=...], \
    or a sentinel-managed primary \
    redis-sentinel://[:password@]host:26379[/db]?sentinelServiceName=NAME[&node=host:26380...] \
    (valkey, valkey-cluster and valkey-sentinel are the same)";

pub(super) fn build_settings(
    globals: &Keys<'_>,
    scopes: BTreeMap<String, ScopeSettings>,
) -> Result<Settings, ConfigError> {
    let any_scope = !scopes.is_empty();
    Ok(Settings {
        limiter_backend: governance_backend(globals, &global::PGW_LIMITER_BACKEND, any_scope)?,
        breaker_backend: governance_backend(globals, &global::PGW_BREAKER_BACKEND, any_scope)?,
        redis_url: redis_url(globals)?,
        cache: cache(globals)?,
        telemetry: telemetry(globals)?,
        pricing_path: globals.text(&global::PGW_PRICING_PATH).map(str::to_string),
        structured_max_retries: globals
            .int(&global::PGW_STRUCTURED_MAX_RETRIES)?
            .unwrap_or(defaults::STRUCTURED_MAX_RETRIES),
        tenant_budgets: globals
            .get(&global::PGW_TENANT_BUDGETS)
            .map(|e| crate::config::budget::parse_tenant_budgets(e.key, e.value))
            .transpose()?
            .unwrap_or_default(),
        lease_ttl: globals
            .secs(&global::PGW_LEASE_TTL_S)?
            .unwrap_or(Duration::from_secs_f64(defaults::LEASE_TTL_S)),
        server: server(globals)?,
        scopes,
    })
}

/// The value of a text key that is required in the situation `reason` describes.
fn required<'a>(globals: &Keys<'a>, def: &KeyDef, reason: &str) -> Result<&'a str, ConfigError> {
    globals.text(def).ok_or_else(|| missing(def, reason))
}

fn missing(def: &KeyDef, reason: &str) -> ConfigError {
    ConfigError::Missing {
        key: def.name.to_string(),
        reason: reason.to_string(),
    }
}

fn governance_backend(
    globals: &Keys<'_>,
    def: &KeyDef,
    required: bool,
) -> Result<GovernanceBackendKind, ConfigError> {
    let values = [
        ("memory", GovernanceBackendKind::Memory),
        ("redis", GovernanceBackendKind::Redis),
    ];
    match globals.choice(def, &values)? {
        Some(kind) => Ok(kind),
        None if required => Err(ConfigError::Missing {
            key: def.name.to_string(),
            reason: "required when any scope is configured: memory | redis (no default; \
                     memory is per process, redis is shared across processes)"
                .to_string(),
        }),
        // No scope consumes it; memory is inert.
        None => Ok(GovernanceBackendKind::Memory),
    }
}

fn redis_url(globals: &Keys<'_>) -> Result<Option<Secret>, ConfigError> {
    let Some(entry) = globals.get(&global::REDIS_URL) else {
        return Ok(None);
    };
    check_redis_url(entry.value).map_err(|reason| ConfigError::InvalidValue {
        key: entry.key.to_string(),
        value: HIDDEN.to_string(),
        expected: format!("{REDIS_URL_FORMS}; {reason}"),
    })?;
    Ok(Some(Secret::new(entry.value)))
}

/// Parse `REDIS_URL` as the client will, so a bad URL fails at configuration, not at first use.
/// The reason never echoes the URL (it may hold a password). TLS (`rediss`) is not built in: it
/// would connect in plain text, so it is refused.
fn check_redis_url(value: &str) -> Result<(), String> {
    let url = url::Url::parse(value).map_err(|e| format!("not a URL ({e})"))?;
    let scheme = url.scheme();
    let base = scheme
        .strip_suffix("-cluster")
        .or_else(|| scheme.strip_suffix("-sentinel"))
        .unwrap_or(scheme);
    match base {
        "redis" | "valkey" => {}
        "rediss" | "valkeys" => {
            return Err(format!("scheme {scheme}: TLS to Redis is not built in"))
        }
        _ => return Err(format!("unknown scheme {scheme}")),
    }
    // Without the `redis` feature no client is built (a Redis backend is refused by name), so the
    // scheme check above is all there is to check.
    #[cfg(feature = "redis")]
    fred::prelude::Config::from_url(value)
        .map(drop)
        .map_err(|e| e.details().to_string())?;
    Ok(())
}

fn cache(globals: &Keys<'_>) -> Result<CacheSettings, ConfigError> {
    #[derive(Clone, Copy)]
    enum CacheKind {
        None,
        Memory,
        Redis,
    }
    let kinds = [
        ("none", CacheKind::None),
        ("memory", CacheKind::Memory),
        ("redis", CacheKind::Redis),
    ];
    let kind = globals.choice(&global::PGW_CACHE_BACKEND, &kinds)?;
    let why = "required when PGW_CACHE_BACKEND is memory or redis";
    let namespace_and_ttl = || -> Result<(String, Duration), ConfigError> {
        let namespace = required(globals, &global::PGW_CACHE_NAMESPACE, why)?.to_string();
        let ttl = globals
            .secs(&global::PGW_CACHE_TTL_S)?
            .ok_or_else(|| missing(&global::PGW_CACHE_TTL_S, why))?;
        Ok((namespace, ttl))
    };
    Ok(match kind.unwrap_or(CacheKind::None) {
        CacheKind::None => CacheSettings::None,
        CacheKind::Memory => {
            let (namespace, ttl) = namespace_and_ttl()?;
            CacheSettings::Memory { namespace, ttl }
        }
        CacheKind::Redis => {
            let (namespace, ttl) = namespace_and_ttl()?;
            CacheSettings::Redis { namespace, ttl }
        }
    })
}

fn telemetry(globals: &Keys<'_>) -> Result<TelemetrySettings, ConfigError> {
    let modes = [("auto", SchemaMode::Auto), ("manual", SchemaMode::Manual)];
    Ok(TelemetrySettings {
        backend: telemetry_backend(globals)?,
        schema_mode: globals.choice(&global::PGW_TELEMETRY_SCHEMA_MODE, &modes)?,
        text_cap: globals.positive(&global::PGW_TELEMETRY_TEXT_CAP)?,
    })
}

fn telemetry_backend(globals: &Keys<'_>) -> Result<TelemetryBackendSettings, ConfigError> {
    #[derive(Clone, Copy)]
    enum TelemetryKind {
        None,
        Sqlite,
        Postgres,
    }
    let kinds = [
        ("none", TelemetryKind::None),
        ("sqlite", TelemetryKind::Sqlite),
        ("postgres", TelemetryKind::Postgres),
    ];
    let kind = globals.choice(&global::PGW_TELEMETRY_BACKEND, &kinds)?;
    // Parsed whatever the backend, so a bad value never hides behind an unused one.
    let pool_max = globals
        .positive(&global::PGW_TELEMETRY_PG_POOL_MAX)?
        .unwrap_or(defaults::PG_POOL_MAX);
    let write_timeout = globals
        .secs(&global::PGW_TELEMETRY_PG_WRITE_TIMEOUT_S)?
        .unwrap_or(Duration::from_secs_f64(defaults::PG_WRITE_TIMEOUT_S));
    Ok(match kind.unwrap_or(TelemetryKind::None) {
        TelemetryKind::None => TelemetryBackendSettings::None,
        TelemetryKind::Sqlite => TelemetryBackendSettings::Sqlite {
            path: required(
                globals,
                &global::PGW_TELEMETRY_SQLITE_PATH,
                "required when PGW_TELEMETRY_BACKEND=sqlite",
            )?
            .to_string(),
        },
        TelemetryKind::Postgres => TelemetryBackendSettings::Postgres {
            dsn: Secret::new(required(
                globals,
                &global::PGW_TELEMETRY_PG_DSN,
                "required when PGW_TELEMETRY_BACKEND=postgres",
            )?),
            pool_max,
            write_timeout,
        },
    })
}

fn server(globals: &Keys<'_>) -> Result<ServerSettings, ConfigError> {
    let mut server = ServerSettings::default();
    if let Some(entry) = globals.get(&global::PGW_SERVER_BIND) {
        server.bind = entry.value.parse().map_err(|_| {
            invalid(
                entry,
                "an address and port such as 127.0.0.1:8080 or [::]:8080",
            )
        })?;
    }
    if let Some(limit) = globals.positive(&global::PGW_SERVER_BODY_LIMIT_BYTES)? {
        server.body_limit_bytes = limit;
    }
    if let Some(d) = globals.positive_secs(&global::PGW_SERVER_REQUEST_TIMEOUT_S)? {
        server.request_timeout = d;
    }
    if let Some(d) = globals.positive_secs(&global::PGW_SERVER_DRAIN_TIMEOUT_S)? {
        server.drain_timeout = d;
    }
    if let Some(d) = globals.positive_secs(&global::PGW_SERVER_HEADER_TIMEOUT_S)? {
        server.header_timeout = d;
    }
    if let Some(d) = globals.positive_secs(&global::PGW_SERVER_BODY_TIMEOUT_S)? {
        server.body_timeout = d;
    }
    if let Some(rate) = globals.positive(&global::PGW_SERVER_BODY_MIN_BYTES_PER_S)? {
        server.body_min_bytes_per_s = rate;
    }
    if let Some(d) = globals.positive_secs(&global::PGW_SERVER_IDLE_TIMEOUT_S)? {
        server.idle_timeout = d;
    }
    server.max_connections = globals.positive(&global::PGW_SERVER_MAX_CONNECTIONS)?;
    server.workers = globals.positive(&global::PGW_SERVER_WORKERS)?;
    if let Some(entry) = globals.get(&global::PGW_SERVER_ADMIN_BIND) {
        let admin: SocketAddr = entry.value.parse().map_err(|_| {
            invalid(
                entry,
                "an address and port such as 127.0.0.1:8081 or [::]:8081",
            )
        })?;
        if admin == server.bind {
            return Err(invalid(entry, "an address other than PGW_SERVER_BIND's"));
        }
        server.admin_bind = Some(admin);
    }
    server.keys_file = globals
        .text(&global::PGW_SERVER_KEYS_FILE)
        .map(str::to_string);
    if let Some(public) = globals.boolean(&global::PGW_SERVER_PUBLIC_STATUS)? {
        server.public_status = public;
    }
    server.metrics_token = globals
        .text(&global::PGW_SERVER_METRICS_TOKEN)
        .filter(|t| !t.trim().is_empty())
        .map(Secret::new);
    if let Some(entry) = globals.get(&global::PGW_SERVER_MODEL_ALIASES) {
        server.model_aliases =
            crate::config::server::parse_aliases(entry.value).map_err(|why| {
                invalid(
                    entry,
                    format!("alias=SCOPE pairs separated by commas: {why}"),
                )
            })?;
    }
    Ok(server)
}
