//! Assembly guards (docs/behaviour.md §3): cross-key rules checked on resolved [`Settings`] before anything is
//! built. A refusal names the key, its value and the rule (with any other key involved).
//!
//! They run on every path that produces settings: [`Settings::from_map`] / `from_env` call
//! [`check`], and hand-built settings can be checked with [`Settings::validate`]. Per-key parse
//! errors (unknown keys, unparsable values, unknown enum values) are reported by the parser.
//! Secret values (API keys, `REDIS_URL`, the DSN) are never part of a message.

use std::collections::BTreeSet;
use std::time::Duration;

use polygateway_actors::policy::reserve::BatchReserve;

use super::error::ConfigError;
use super::keys::{global, scope, source, KeyDef};
use super::settings::*;
use crate::validate::{shorten, validate_overlay};

fn secs(d: Duration) -> String {
    format!("{}", d.as_secs_f64())
}

/// The env key a source field comes from: `{SCOPE}__{PROVIDER}__{N}__{FIELD}`.
fn source_key(scope: &str, source: &SourceSettings, field: &KeyDef) -> String {
    let prefix = format!("{}_", source.provider);
    let index = source.name.strip_prefix(&prefix).unwrap_or(&source.name);
    format!(
        "{scope}__{}__{}__{}",
        source.provider.to_ascii_uppercase(),
        index.to_ascii_uppercase(),
        field.name
    )
}

fn refuse(
    key: impl Into<String>,
    value: impl Into<String>,
    rule: impl Into<String>,
) -> ConfigError {
    ConfigError::Guard {
        key: key.into(),
        value: value.into(),
        rule: rule.into(),
    }
}

/// Check every assembly guard; the first violation is returned.
pub(crate) fn check(settings: &Settings) -> Result<(), ConfigError> {
    if settings.lease_ttl.is_zero() {
        return Err(refuse(
            global::PGW_LEASE_TTL_S.name,
            "0",
            "the lease TTL must be > 0",
        ));
    }
    for scope in settings.scopes.values() {
        check_scope(scope, settings.lease_ttl)?;
    }
    super::features::check(settings)?;
    check_backends(settings)
}

fn check_scope(scope: &ScopeSettings, lease_ttl: Duration) -> Result<(), ConfigError> {
    let name = scope.name.as_str();
    let mut seen = BTreeSet::new();
    for source in &scope.sources {
        if !seen.insert(source.name.as_str()) {
            return Err(refuse(
                format!("scope {name} source"),
                source.name.clone(),
                "source names must be unique within a scope",
            ));
        }
        check_source(name, source, lease_ttl)?;
    }
    let key = |def: &KeyDef| def.in_scope(name);
    check_retry(&scope.retry, &key)?;
    check_breaker(&scope.breaker, &key)?;
    check_backpressure(scope, &key)?;
    check_hedge(&scope.hedge, &key)?;
    check_embedding(scope, &key)
}

fn check_retry(retry: &RetrySettings, key: &dyn Fn(&KeyDef) -> String) -> Result<(), ConfigError> {
    if retry.max_attempts == 0 {
        return Err(refuse(
            key(&scope::RETRY_MAX_ATTEMPTS),
            "0",
            "at least 1 attempt (the first attempt counts; also settable via LLM_MAX_RETRIES)",
        ));
    }
    if retry.backoff_base > retry.backoff_max {
        return Err(refuse(
            key(&scope::RETRY_BACKOFF_BASE_S),
            secs(retry.backoff_base),
            format!(
                "must be <= {}={}",
                key(&scope::RETRY_BACKOFF_MAX_S),
                secs(retry.backoff_max)
            ),
        ));
    }
    Ok(())
}

fn check_breaker(b: &BreakerSettings, key: &dyn Fn(&KeyDef) -> String) -> Result<(), ConfigError> {
    if b.fail_threshold == 0 {
        return Err(refuse(
            key(&scope::BREAKER_FAIL_THRESHOLD),
            "0",
            "must be >= 1",
        ));
    }
    if b.cooldown.is_zero() {
        return Err(refuse(key(&scope::BREAKER_COOLDOWN_S), "0", "must be > 0"));
    }
    if b.min_calls == 0 {
        return Err(refuse(key(&scope::BREAKER_MIN_CALLS), "0", "must be >= 1"));
    }
    if !(b.fail_rate > 0.0 && b.fail_rate <= 1.0) {
        return Err(refuse(
            key(&scope::BREAKER_FAIL_RATE),
            format!("{}", b.fail_rate),
            "must be in (0, 1]",
        ));
    }
    if b.window.is_zero() {
        return Err(refuse(key(&scope::BREAKER_WINDOW_S), "0", "must be > 0"));
    }
    if b.probe_ttl.is_some_and(|t| t.is_zero()) {
        return Err(refuse(key(&scope::BREAKER_PROBE_TTL_S), "0", "must be > 0"));
    }
    if let Some(max) = b.max_cooldown {
        if max < b.cooldown {
            return Err(refuse(
                key(&scope::BREAKER_MAX_COOLDOWN_S),
                secs(max),
                format!(
                    "must be >= {}={}",
                    key(&scope::BREAKER_COOLDOWN_S),
                    secs(b.cooldown)
                ),
            ));
        }
    }

    Ok(())
}

fn check_hedge(hedge: &HedgeSettings, key: &dyn Fn(&KeyDef) -> String) -> Result<(), ConfigError> {
    if !(0.0..=1.0).contains(&hedge.budget) {
        return Err(refuse(
            key(&scope::HEDGE_BUDGET),
            format!("{}", hedge.budget),
            "must be a share from 0 to 1",
        ));
    }
    if hedge.floor > hedge.ceiling {
        return Err(refuse(
            key(&scope::HEDGE_FLOOR_S),
            format!("{}", hedge.floor.as_secs_f64()),
            "must not exceed HEDGE__CEILING_S",
        ));
    }
    Ok(())
}

fn check_backpressure(
    scope: &ScopeSettings,
    key: &dyn Fn(&KeyDef) -> String,
) -> Result<(), ConfigError> {
    let bp = &scope.backpressure;
    if bp.poll_interval.is_zero() {
        return Err(refuse(
            key(&scope::BACKPRESSURE_POLL_INTERVAL_S),
            "0",
            "must be > 0",
        ));
    }
    if let Some(share) = bp.batch_reserve {
        if BatchReserve::new(share).is_none() {
            return Err(refuse(
                key(&scope::BACKPRESSURE_BATCH_RESERVE),
                format!("{share}"),
                "must be a share from 0 to 0.9",
            ));
        }
    }
    if bp.stall_window.is_zero() {
        return Err(refuse(
            key(&scope::BACKPRESSURE_STALL_WINDOW_S),
            "0",
            "must be > 0",
        ));
    }
    // Sources without a watchdog of their own (deadlines at the total limit) have no TTFT to
    // wait out.
    let watched = scope.sources.iter().filter(|s| !s.watchdog_off());
    if let Some(slowest) = watched.max_by_key(|s| s.ttft_timeout) {
        if bp.stall_window < slowest.ttft_timeout {
            return Err(refuse(
                key(&scope::BACKPRESSURE_STALL_WINDOW_S),
                secs(bp.stall_window),
                format!(
                    "the stall window must be >= the slowest source TTFT ({}={})",
                    source_key(&scope.name, slowest, &source::TTFT_TIMEOUT_S),
                    secs(slowest.ttft_timeout)
                ),
            ));
        }
    }

    Ok(())
}

/// An embeddings scope has its knobs, and they are positive.
fn check_embedding(
    scope: &ScopeSettings,
    key: &dyn Fn(&KeyDef) -> String,
) -> Result<(), ConfigError> {
    match (&scope.kind, &scope.embedding) {
        (ScopeKind::Embeddings, None) => {
            return Err(ConfigError::Missing {
                key: key(&scope::BATCH_SIZE),
                reason: "embeddings scopes must set their batch size (no default)".to_string(),
            })
        }
        (_, Some(e)) => {
            if e.batch_size == 0 {
                return Err(refuse(key(&scope::BATCH_SIZE), "0", "must be >= 1"));
            }
            if e.expected_dim == Some(0) {
                return Err(refuse(key(&scope::EXPECTED_DIM), "0", "must be >= 1"));
            }
        }
        _ => {}
    }
    Ok(())
}

fn check_source(scope: &str, s: &SourceSettings, lease_ttl: Duration) -> Result<(), ConfigError> {
    let key = |field: &KeyDef| source_key(scope, s, field);

    match url::Url::parse(&s.base_url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") => {}
        _ => {
            return Err(refuse(
                key(&source::BASE_URL),
                format!("{:?}", shorten(&redact_dsn(&s.base_url))),
                "must be an http(s) URL such as https://api.example.com/v1",
            ))
        }
    }
    if s.model.trim().is_empty() {
        return Err(refuse(key(&source::MODEL), "\"\"", "must not be empty"));
    }

    // 0 < inter_token < ttft < timeout, unless the source has no watchdog of its own (all three
    // equal: the original library's rules without its TTFT / inter-token keys).
    let (inter, ttft, timeout) = (s.inter_token_timeout, s.ttft_timeout, s.timeout);
    if !s.watchdog_off() {
        check_watchdog_chain(&key, inter, ttft, timeout)?;
    }
    if timeout > lease_ttl {
        return Err(refuse(
            key(&source::TIMEOUT_S),
            secs(timeout),
            format!(
                "must be <= {}={} (a concurrency lease must outlive the request)",
                global::PGW_LEASE_TTL_S.name,
                secs(lease_ttl)
            ),
        ));
    }
    if s.tpm > 0 {
        if let Some(est) = s.est_tokens {
            if est <= 0 {
                return Err(refuse(
                    key(&source::EST_TOKENS),
                    est.to_string(),
                    format!(
                        "must be > 0 when {}={} (unset it to estimate tpm/60)",
                        key(&source::TPM),
                        s.tpm
                    ),
                ));
            }
        }
    }
    validate_overlay(&key(&source::EXTRA_BODY), &s.extra_body).map_err(|source| {
        ConfigError::Validation {
            key: key(&source::EXTRA_BODY),
            source,
        }
    })?;
    Ok(())
}

/// `0 < INTER_TOKEN_TIMEOUT_S < TTFT_TIMEOUT_S < TIMEOUT_S` of a source with a watchdog.
fn check_watchdog_chain(
    key: &dyn Fn(&KeyDef) -> String,
    inter: Duration,
    ttft: Duration,
    timeout: Duration,
) -> Result<(), ConfigError> {
    let chain = "0 < INTER_TOKEN_TIMEOUT_S < TTFT_TIMEOUT_S < TIMEOUT_S";
    if inter.is_zero() {
        return Err(refuse(
            key(&source::INTER_TOKEN_TIMEOUT_S),
            "0",
            format!("must be > 0 ({chain})"),
        ));
    }
    if inter >= ttft {
        return Err(refuse(
            key(&source::INTER_TOKEN_TIMEOUT_S),
            secs(inter),
            format!(
                "must be < {}={} ({chain})",
                key(&source::TTFT_TIMEOUT_S),
                secs(ttft)
            ),
        ));
    }
    if ttft >= timeout {
        return Err(refuse(
            key(&source::TTFT_TIMEOUT_S),
            secs(ttft),
            format!(
                "must be < {}={} ({chain})",
                key(&source::TIMEOUT_S),
                secs(timeout)
            ),
        ));
    }
    Ok(())
}

fn check_backends(settings: &Settings) -> Result<(), ConfigError> {
    let has_redis_url = settings.redis_url.as_ref().is_some_and(|u| !u.is_empty());
    if settings.limiter_backend == GovernanceBackendKind::Redis && !has_redis_url {
        return Err(needs_redis(&global::PGW_LIMITER_BACKEND));
    }
    if settings.breaker_backend == GovernanceBackendKind::Redis && !has_redis_url {
        return Err(needs_redis(&global::PGW_BREAKER_BACKEND));
    }
    check_cache(&settings.cache, has_redis_url)?;
    check_telemetry(&settings.telemetry)
}

fn needs_redis(def: &KeyDef) -> ConfigError {
    ConfigError::Missing {
        key: global::REDIS_URL.name.to_string(),
        reason: format!("{}=redis needs it", def.name),
    }
}

fn check_cache(cache: &CacheSettings, has_redis_url: bool) -> Result<(), ConfigError> {
    match cache {
        CacheSettings::None => {}
        CacheSettings::Memory { namespace, ttl } | CacheSettings::Redis { namespace, ttl } => {
            if namespace.trim().is_empty() {
                return Err(ConfigError::Missing {
                    key: global::PGW_CACHE_NAMESPACE.name.to_string(),
                    reason: "required when caching is on".to_string(),
                });
            }
            if ttl.is_zero() {
                return Err(refuse(
                    global::PGW_CACHE_TTL_S.name,
                    "0",
                    "the cache TTL must be > 0 (there is no never-expiring cache)",
                ));
            }
            if matches!(cache, CacheSettings::Redis { .. }) && !has_redis_url {
                return Err(needs_redis(&global::PGW_CACHE_BACKEND));
            }
        }
    }
    Ok(())
}

fn check_telemetry(t: &TelemetrySettings) -> Result<(), ConfigError> {
    if t.text_cap == Some(0) {
        return Err(refuse(
            global::PGW_TELEMETRY_TEXT_CAP.name,
            "0",
            "must be a positive number of chars (unset it for no cap)",
        ));
    }
    match &t.backend {
        TelemetryBackendSettings::None => {}
        TelemetryBackendSettings::Sqlite { path } => {
            if path.trim().is_empty() {
                return Err(ConfigError::Missing {
                    key: global::PGW_TELEMETRY_SQLITE_PATH.name.to_string(),
                    reason: "required when PGW_TELEMETRY_BACKEND=sqlite".to_string(),
                });
            }
        }
        TelemetryBackendSettings::Postgres {
            dsn,
            pool_max,
            write_timeout,
        } => {
            if dsn.expose().trim().is_empty() {
                return Err(ConfigError::Missing {
                    key: global::PGW_TELEMETRY_PG_DSN.name.to_string(),
                    reason: "required when PGW_TELEMETRY_BACKEND=postgres".to_string(),
                });
            }
            if *pool_max == 0 {
                return Err(refuse(
                    global::PGW_TELEMETRY_PG_POOL_MAX.name,
                    "0",
                    "must be >= 1",
                ));
            }
            if write_timeout.is_zero() {
                return Err(refuse(
                    global::PGW_TELEMETRY_PG_WRITE_TIMEOUT_S.name,
                    "0",
                    "must be > 0",
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod examples {
    //! Usage cases of crate-private items (they were doc examples while the items were public).

    #[test]
    fn check_example() {
        use crate::config::{guards, ConfigError, Settings};
        use std::collections::BTreeMap;
        let map: BTreeMap<String, String> = [
            ("PGW_LIMITER_BACKEND", "memory"),
            ("PGW_BREAKER_BACKEND", "memory"),
            ("LLM__QWEN__1__BASE_URL", "https://example.invalid/v1"),
            ("LLM__QWEN__1__MODEL", "qwen-plus"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let mut settings = Settings::from_map(&map).unwrap();
        assert!(guards::check(&settings).is_ok());
        // Edited by hand into something the parser would never produce: zero attempts.
        settings.scopes.get_mut("LLM").unwrap().retry.max_attempts = 0;
        let err = guards::check(&settings).unwrap_err();
        assert!(
            matches!(&err, ConfigError::Guard { key, .. } if key == "LLM__RETRY__MAX_ATTEMPTS"),
            "{err}"
        );
    }
}
