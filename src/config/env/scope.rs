//! Building one scope's settings, and its sources', from the keys set for it; and a scope's kind
//! from its name ([`scope_kind_for`], which the builder and the public API share).

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use super::read::{Entry, Keys};
use super::rules::{original_requires, Rules};
use crate::config::defaults;
use crate::config::error::ConfigError;
use crate::config::keys::{scope, shorthand, source, KeyDef, KeyFamily, KEYS};
use crate::config::settings::*;
use crate::provider::Dialect;
use crate::structured::StructuredMode;

/// The keys set for one scope: its own, and each source's.
#[derive(Default)]
pub(super) struct RawScope<'a> {
    pub(super) keys: Keys<'a>,
    /// Keyed by (lower-case provider, index) so sources come out ordered.
    pub(super) sources: BTreeMap<(String, u32), Keys<'a>>,
}

/// The flat shorthands, parsed once: defaults for every scope.
#[derive(Default)]
pub(super) struct Shorthands {
    timeout: Option<Duration>,
    max_attempts: Option<u32>,
    backoff_base: Option<Duration>,
    backoff_max: Option<Duration>,
    fail_threshold: Option<u32>,
    cooldown: Option<Duration>,
    ttft: Option<Duration>,
    inter_token: Option<Duration>,
}

impl Shorthands {
    pub(super) fn parse(keys: &Keys<'_>) -> Result<Self, ConfigError> {
        Ok(Self {
            timeout: keys.secs(&shorthand::LLM_TIMEOUT)?,
            max_attempts: keys.int(&shorthand::LLM_MAX_RETRIES)?,
            backoff_base: keys.secs(&shorthand::LLM_RETRY_BASE_DELAY)?,
            backoff_max: keys.secs(&shorthand::LLM_RETRY_MAX_DELAY)?,
            fail_threshold: keys.int(&shorthand::LLM_CIRCUIT_BREAKER_THRESHOLD)?,
            cooldown: keys.secs(&shorthand::LLM_CIRCUIT_BREAKER_COOLDOWN)?,
            ttft: keys.secs(&shorthand::LLM_TTFT_TIMEOUT)?,
            inter_token: keys.secs(&shorthand::LLM_INTER_TOKEN_TIMEOUT)?,
        })
    }
}

fn secs_default(secs: f64) -> Duration {
    Duration::from_secs_f64(secs)
}

/// The kind of a scope, from its name: `OCR`/`OCR_*` → OCR, `EMBED*` → embeddings, else chat.
///
/// ```
/// use polygateway::config::{scope_kind_for, ScopeKind};
/// assert_eq!(scope_kind_for("OCR_FAST"), ScopeKind::Ocr);
/// assert_eq!(scope_kind_for("EMBEDDINGS"), ScopeKind::Embeddings);
/// assert_eq!(scope_kind_for("OCRX"), ScopeKind::Chat);
/// assert_eq!(scope_kind_for("VLM"), ScopeKind::Chat);
/// ```
pub fn scope_kind_for(name: &str) -> ScopeKind {
    if name == "OCR" || name.starts_with("OCR_") {
        ScopeKind::Ocr
    } else if name.starts_with("EMBED") {
        ScopeKind::Embeddings
    } else {
        ScopeKind::Chat
    }
}

pub(super) fn kind_name(kind: ScopeKind) -> &'static str {
    match kind {
        ScopeKind::Chat => "chat",
        ScopeKind::Embeddings => "embeddings",
        ScopeKind::Ocr => "ocr",
    }
}

pub(super) fn build_scope(
    name: &str,
    raw: &RawScope<'_>,
    shorthands: &Shorthands,
    rules: Rules,
) -> Result<ScopeSettings, ConfigError> {
    let kind = scope_kind_for(name);
    let keys = &raw.keys;
    if raw.sources.is_empty() {
        return Err(ConfigError::NoSources {
            scope: name.to_string(),
        });
    }
    let mut sources = Vec::with_capacity(raw.sources.len());
    for ((provider, n), fields) in &raw.sources {
        let at = SourceAt {
            scope: name,
            kind,
            provider,
            n: *n,
        };
        sources.push(build_source(&at, fields, shorthands, rules)?);
    }
    Ok(ScopeSettings {
        name: name.to_string(),
        kind,
        sources,
        retry: retry(keys, shorthands)?,
        breaker: breaker(keys, shorthands)?,
        backpressure: backpressure(keys)?,
        hedge: hedge(keys)?,
        continuation: ContinueSettings {
            enabled: keys.boolean(&scope::CONTINUE_ENABLED)?.unwrap_or(false),
        },
        embedding: embedding(name, kind, keys)?,
        global_max_concurrency: keys.int(&scope::GLOBAL_MAX_CONCURRENCY)?.unwrap_or(0),
        global_rpm: keys.int(&scope::GLOBAL_RPM)?.unwrap_or(0),
        global_tpm: keys.int(&scope::GLOBAL_TPM)?.unwrap_or(0),
        selector: selector(keys)?,
        pacer: pacer(keys)?,
        quota_full: quota_full(keys)?,
        circuit_open: circuit_open(keys)?,
        budget: budget(name, kind, keys)?,
    })
}

/// `BUDGET`: a chat scope's spend budget (docs/behaviour.md §5.8); other kinds refuse it.
fn budget(
    name: &str,
    kind: ScopeKind,
    keys: &Keys<'_>,
) -> Result<Option<crate::config::SpendBudget>, ConfigError> {
    let Some(entry) = keys.get(&scope::BUDGET) else {
        return Ok(None);
    };
    if kind != ScopeKind::Chat {
        return Err(ConfigError::WrongScopeKind {
            key: entry.key.to_string(),
            scope: name.to_string(),
            kind: kind_name(kind),
            reason: "spend budgets gate chat calls only (docs/behaviour.md §5.8)".to_string(),
        });
    }
    crate::config::SpendBudget::parse(entry.key, entry.value).map(Some)
}

fn retry(keys: &Keys<'_>, shorthands: &Shorthands) -> Result<RetrySettings, ConfigError> {
    Ok(RetrySettings {
        max_attempts: keys
            .int(&scope::RETRY_MAX_ATTEMPTS)?
            .or(shorthands.max_attempts)
            .unwrap_or(defaults::MAX_ATTEMPTS),
        backoff_base: keys
            .secs(&scope::RETRY_BACKOFF_BASE_S)?
            .or(shorthands.backoff_base)
            .unwrap_or(secs_default(defaults::BACKOFF_BASE_S)),
        backoff_max: keys
            .secs(&scope::RETRY_BACKOFF_MAX_S)?
            .or(shorthands.backoff_max)
            .unwrap_or(secs_default(defaults::BACKOFF_MAX_S)),
    })
}

fn breaker(keys: &Keys<'_>, shorthands: &Shorthands) -> Result<BreakerSettings, ConfigError> {
    let default = BreakerSettings::default();
    Ok(BreakerSettings {
        fail_threshold: keys
            .int(&scope::BREAKER_FAIL_THRESHOLD)?
            .or(shorthands.fail_threshold)
            .unwrap_or(default.fail_threshold),
        cooldown: keys
            .secs(&scope::BREAKER_COOLDOWN_S)?
            .or(shorthands.cooldown)
            .unwrap_or(default.cooldown),
        probe_ttl: keys.secs(&scope::BREAKER_PROBE_TTL_S)?,
        min_calls: keys
            .int(&scope::BREAKER_MIN_CALLS)?
            .unwrap_or(default.min_calls),
        fail_rate: keys
            .number(&scope::BREAKER_FAIL_RATE)?
            .unwrap_or(default.fail_rate),
        window: keys
            .secs(&scope::BREAKER_WINDOW_S)?
            .unwrap_or(default.window),
        max_cooldown: keys.secs(&scope::BREAKER_MAX_COOLDOWN_S)?,
    })
}

fn backpressure(keys: &Keys<'_>) -> Result<BackpressureSettings, ConfigError> {
    let default = BackpressureSettings::default();
    Ok(BackpressureSettings {
        stall_window: keys
            .secs(&scope::BACKPRESSURE_STALL_WINDOW_S)?
            .unwrap_or(default.stall_window),
        poll_interval: keys
            .secs(&scope::BACKPRESSURE_POLL_INTERVAL_S)?
            .unwrap_or(default.poll_interval),
        batch_reserve: keys.number(&scope::BACKPRESSURE_BATCH_RESERVE)?,
    })
}

fn hedge(keys: &Keys<'_>) -> Result<HedgeSettings, ConfigError> {
    let default = HedgeSettings::default();
    Ok(HedgeSettings {
        enabled: keys
            .boolean(&scope::HEDGE_ENABLED)?
            .unwrap_or(default.enabled),
        floor: keys.secs(&scope::HEDGE_FLOOR_S)?.unwrap_or(default.floor),
        ceiling: keys
            .positive_secs(&scope::HEDGE_CEILING_S)?
            .unwrap_or(default.ceiling),
        budget: keys.number(&scope::HEDGE_BUDGET)?.unwrap_or(default.budget),
    })
}

/// The embeddings knobs of an embeddings scope; in any other scope they are refused.
fn embedding(
    name: &str,
    kind: ScopeKind,
    keys: &Keys<'_>,
) -> Result<Option<EmbeddingSettings>, ConfigError> {
    if kind != ScopeKind::Embeddings {
        let embeddings_only = KEYS
            .iter()
            .filter(|def| def.family == KeyFamily::EmbeddingsScope);
        if let Some(def) = embeddings_only.into_iter().find(|def| keys.contains(def)) {
            return Err(ConfigError::WrongScopeKind {
                key: def.in_scope(name),
                scope: name.to_string(),
                kind: kind_name(kind),
                reason: "only embeddings scopes (names starting with EMBED) take it".to_string(),
            });
        }
        return Ok(None);
    }
    let batch_size = keys
        .positive(&scope::BATCH_SIZE)?
        .ok_or_else(|| ConfigError::Missing {
            key: scope::BATCH_SIZE.in_scope(name),
            reason: "embeddings scopes must set their batch size (no default)".to_string(),
        })?;
    Ok(Some(EmbeddingSettings {
        batch_size,
        normalize: keys.boolean(&scope::NORMALIZE)?.unwrap_or(false),
        expected_dim: keys.positive(&scope::EXPECTED_DIM)?,
    }))
}

fn selector(keys: &Keys<'_>) -> Result<SelectorKind, ConfigError> {
    let values = [
        ("health_aware", SelectorKind::HealthAware),
        ("round_robin", SelectorKind::RoundRobin),
        ("least_inflight", SelectorKind::LeastInflight),
    ];
    Ok(keys.choice(&scope::SELECTOR, &values)?.unwrap_or_default())
}

fn pacer(keys: &Keys<'_>) -> Result<PacerSettings, ConfigError> {
    let modes = [
        ("adaptive", PacerMode::Adaptive),
        ("aimd", PacerMode::Aimd),
        ("off", PacerMode::Off),
    ];
    let bound = |def: &KeyDef| {
        keys.positive_as::<u32>(def, "a positive whole number of concurrent attempts")
    };
    Ok(PacerSettings {
        mode: keys.choice(&scope::PACER, &modes)?.unwrap_or_default(),
        start: bound(&scope::PACER_START)?,
        ceiling: bound(&scope::PACER_CEILING)?,
    })
}

fn quota_full(keys: &Keys<'_>) -> Result<QuotaFull, ConfigError> {
    let values = [
        ("wait", QuotaFull::Wait),
        ("fail_fast", QuotaFull::FailFast),
    ];
    Ok(keys
        .choice(&scope::QUOTA_FULL, &values)?
        .unwrap_or_default())
}

fn circuit_open(keys: &Keys<'_>) -> Result<CircuitOpenPolicy, ConfigError> {
    let values = [
        ("fail_fast", CircuitOpenPolicy::FailFast),
        ("wait", CircuitOpenPolicy::Wait),
    ];
    Ok(keys
        .choice(&scope::CIRCUIT_OPEN, &values)?
        .unwrap_or_default())
}

/// Where a source sits, for its name and its keys' full names.
struct SourceAt<'a> {
    scope: &'a str,
    kind: ScopeKind,
    provider: &'a str,
    n: u32,
}

impl SourceAt<'_> {
    fn key(&self, field: &KeyDef) -> String {
        field.in_source(self.scope, self.provider, self.n)
    }
}

fn build_source(
    at: &SourceAt<'_>,
    fields: &Keys<'_>,
    shorthands: &Shorthands,
    rules: Rules,
) -> Result<SourceSettings, ConfigError> {
    let required = |field: &KeyDef, what: &str| {
        fields.text(field).ok_or_else(|| ConfigError::Missing {
            key: at.key(field),
            reason: format!("every source needs {what} (no default)"),
        })
    };
    let base_url = required(&source::BASE_URL, "a base URL")?.to_string();
    let model = required(&source::MODEL, "a model name")?.to_string();
    if rules == Rules::Original && !fields.contains(&source::API_KEY) {
        return Err(original_requires(
            at.key(&source::API_KEY),
            "the source's API key (`none` for a service without authentication)",
        ));
    }
    let timeout = timeout(at, fields, shorthands, rules)?;
    let (ttft_timeout, inter_token_timeout) = watchdog(at, fields, shorthands, rules, timeout)?;
    let structured_modes = StructuredMode::ALL.map(|m| (m.as_str(), m));
    let dialects = Dialect::ALL.map(|d| (d.as_str(), d));
    let missing_done = [
        ("retry", MissingDone::Retry),
        ("salvage", MissingDone::Salvage),
    ];
    Ok(SourceSettings {
        name: format!("{}_{}", at.provider, at.n),
        provider: at.provider.to_string(),
        base_url,
        api_key: Secret::new(fields.text(&source::API_KEY).unwrap_or("")),
        model,
        timeout,
        max_concurrency: fields.int(&source::MAX_CONCURRENCY)?.unwrap_or(0),
        rpm: fields.int(&source::RPM)?.unwrap_or(0),
        tpm: fields.int(&source::TPM)?.unwrap_or(0),
        est_tokens: fields.int(&source::EST_TOKENS)?,
        ttft_timeout,
        inter_token_timeout,
        enable_thinking: fields.boolean(&source::ENABLE_THINKING)?,
        missing_done: fields
            .choice(&source::MISSING_DONE, &missing_done)?
            .unwrap_or_default(),
        trust_env: fields.boolean(&source::TRUST_ENV)?.unwrap_or(true),
        stream: fields.boolean(&source::STREAM)?.unwrap_or(true),
        structured_mode: fields.choice(&source::STRUCTURED_MODE, &structured_modes)?,
        dialect: fields.choice(&source::DIALECT, &dialects)?,
        pool_idle_timeout: fields
            .secs(&source::POOL_IDLE_TIMEOUT_S)?
            .unwrap_or(secs_default(defaults::POOL_IDLE_TIMEOUT_S)),
        extra_body: extra_body(at, fields)?,
    })
}

/// The source's total limit per attempt: its key, else the shorthand, else the default (which
/// the original's rules refuse to fill in).
fn timeout(
    at: &SourceAt<'_>,
    fields: &Keys<'_>,
    shorthands: &Shorthands,
    rules: Rules,
) -> Result<Duration, ConfigError> {
    match fields.secs(&source::TIMEOUT_S)?.or(shorthands.timeout) {
        Some(timeout) => Ok(timeout),
        None if rules == Rules::Original => Err(original_requires(
            at.key(&source::TIMEOUT_S),
            "the source's wall-clock limit per call in seconds (or LLM_TIMEOUT for every \
             source)",
        )),
        None => Ok(secs_default(defaults::TIMEOUT_S)),
    }
}

/// The streaming watchdog's (TTFT, inter-token) deadlines.
fn watchdog(
    at: &SourceAt<'_>,
    fields: &Keys<'_>,
    shorthands: &Shorthands,
    rules: Rules,
    timeout: Duration,
) -> Result<(Duration, Duration), ConfigError> {
    let ttft = fields.secs(&source::TTFT_TIMEOUT_S)?.or(shorthands.ttft);
    let inter_token = fields
        .secs(&source::INTER_TOKEN_TIMEOUT_S)?
        .or(shorthands.inter_token);
    let original = rules == Rules::Original;
    match (ttft, inter_token) {
        // The original has no watchdog unless its keys are set: deadlines at the total limit.
        (None, None) if original => Ok((timeout, timeout)),
        (Some(_), None) | (None, Some(_)) if original => {
            let missing = if ttft.is_none() {
                &source::TTFT_TIMEOUT_S
            } else {
                &source::INTER_TOKEN_TIMEOUT_S
            };
            Err(original_requires(
                at.key(missing),
                "the streaming watchdog's keys are set in pairs (TTFT_TIMEOUT_S with \
                 INTER_TOKEN_TIMEOUT_S, or LLM_TTFT_TIMEOUT with LLM_INTER_TOKEN_TIMEOUT)",
            ))
        }
        (ttft, inter_token) => {
            let ttft = ttft.unwrap_or_else(|| defaults::ttft_for(timeout));
            Ok((
                ttft,
                inter_token.unwrap_or_else(|| defaults::inter_token_for(ttft)),
            ))
        }
    }
}

/// The source's `EXTRA_BODY` object (ignored, with a warning, outside chat scopes).
fn extra_body(
    at: &SourceAt<'_>,
    fields: &Keys<'_>,
) -> Result<serde_json::Map<String, Value>, ConfigError> {
    let Some(entry) = fields.get(&source::EXTRA_BODY) else {
        return Ok(serde_json::Map::new());
    };
    if at.kind != ScopeKind::Chat {
        tracing::warn!(
            key = entry.key,
            scope = at.scope,
            "EXTRA_BODY is ignored in {} scopes (no chat request body to merge it into)",
            kind_name(at.kind)
        );
        return Ok(serde_json::Map::new());
    }
    let found = match serde_json::from_str::<Value>(entry.value) {
        Ok(Value::Object(map)) => return Ok(map),
        Ok(Value::Array(_)) => "an array".to_string(),
        Ok(Value::String(_)) => "a string".to_string(),
        Ok(Value::Number(_)) => "a number".to_string(),
        Ok(Value::Bool(_)) => "a bool".to_string(),
        Ok(Value::Null) => "null".to_string(),
        Err(e) => format!("unparsable JSON ({e})"),
    };
    Err(not_a_json_object(entry, found))
}

fn not_a_json_object(entry: Entry<'_>, found: String) -> ConfigError {
    ConfigError::InvalidValue {
        key: entry.key.to_string(),
        value: found,
        expected: "a JSON object string, e.g. {\"temperature\": 0.2}".to_string(),
    }
}
