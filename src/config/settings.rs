//! Resolved configuration values. Parsing from the environment lives in the crate-private `env`
//! ([`Settings::from_env`], [`Settings::from_map`]); these types are what every component is
//! built from. Nothing inside the runtime reads env vars.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde_json::{Map, Value};

pub use super::secret::Secret;

/// What to do with a stream that ended with content but without `[DONE]`.
///
/// ```
/// use polygateway::config::{MissingDone, Settings};
/// # use std::collections::BTreeMap;
/// # fn env(extra: &[(&str, &str)]) -> BTreeMap<String, String> {
/// #     let base = [
/// #         ("PGW_LIMITER_BACKEND", "memory"),
/// #         ("PGW_BREAKER_BACKEND", "memory"),
/// #         ("LLM__QWEN__1__BASE_URL", "https://example.invalid/v1"),
/// #         ("LLM__QWEN__1__MODEL", "qwen-plus"),
/// #     ];
/// #     base.iter().chain(extra).map(|(k, v)| (k.to_string(), v.to_string())).collect()
/// # }
/// // `env` adds the backends and source `qwen_1` (`LLM__QWEN__1__…`) to these keys.
/// let settings = Settings::from_map(&env(&[("LLM__QWEN__1__MISSING_DONE", "salvage")])).unwrap();
/// assert_eq!(settings.scope("LLM").unwrap().sources[0].missing_done, MissingDone::Salvage);
/// assert_eq!(MissingDone::default(), MissingDone::Retry);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MissingDone {
    /// Transient failure; retried, never cached (default).
    #[default]
    Retry,
    /// Accept what arrived.
    Salvage,
}

/// Selection policy of a scope.
///
/// ```
/// use polygateway::config::{SelectorKind, Settings};
/// # use std::collections::BTreeMap;
/// # fn env(extra: &[(&str, &str)]) -> BTreeMap<String, String> {
/// #     let base = [
/// #         ("PGW_LIMITER_BACKEND", "memory"),
/// #         ("PGW_BREAKER_BACKEND", "memory"),
/// #         ("LLM__QWEN__1__BASE_URL", "https://example.invalid/v1"),
/// #         ("LLM__QWEN__1__MODEL", "qwen-plus"),
/// #     ];
/// #     base.iter().chain(extra).map(|(k, v)| (k.to_string(), v.to_string())).collect()
/// # }
/// // `env` adds the backends and one `LLM` source; the selector is a scope key.
/// let default = Settings::from_map(&env(&[])).unwrap();
/// assert_eq!(default.scope("LLM").unwrap().selector, SelectorKind::HealthAware);
/// let rotating = Settings::from_map(&env(&[("LLM__SELECTOR", "round_robin")])).unwrap();
/// assert_eq!(rotating.scope("LLM").unwrap().selector, SelectorKind::RoundRobin);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SelectorKind {
    /// Success EWMA / (1 + in-flight), power of two choices (default).
    #[default]
    HealthAware,
    /// Rotate.
    RoundRobin,
    /// Fewest in flight.
    LeastInflight,
}

/// Which pacer a scope's sources run (`{SCOPE}__PACER`).
///
/// ```
/// use polygateway::config::{PacerMode, Settings};
/// # use std::collections::BTreeMap;
/// # fn env(extra: &[(&str, &str)]) -> BTreeMap<String, String> {
/// #     let base = [
/// #         ("PGW_LIMITER_BACKEND", "memory"),
/// #         ("PGW_BREAKER_BACKEND", "memory"),
/// #         ("LLM__QWEN__1__BASE_URL", "https://example.invalid/v1"),
/// #         ("LLM__QWEN__1__MODEL", "qwen-plus"),
/// #     ];
/// #     base.iter().chain(extra).map(|(k, v)| (k.to_string(), v.to_string())).collect()
/// # }
/// let default = Settings::from_map(&env(&[])).unwrap();
/// assert_eq!(default.scope("LLM").unwrap().pacer.mode, PacerMode::Adaptive);
/// // The original library's AIMD pacer, start and ceiling overridden.
/// let old = Settings::from_map(&env(&[
///     ("LLM__PACER", "aimd"),
///     ("LLM__PACER__START", "4"),
///     ("LLM__PACER__CEILING", "32"),
/// ]))
/// .unwrap();
/// let pacer = old.scope("LLM").unwrap().pacer;
/// assert_eq!((pacer.mode, pacer.start, pacer.ceiling), (PacerMode::Aimd, Some(4), Some(32)));
/// assert!(Settings::from_map(&env(&[("LLM__PACER", "fast")])).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PacerMode {
    /// Slow start, then pushback- and latency-driven (default).
    #[default]
    Adaptive,
    /// The original library's AIMD: start 8, ×0.5 on 429, +1/limit, ceiling max(64, MAX_CONCURRENCY).
    Aimd,
    /// No pacing: only `MAX_CONCURRENCY` caps a source.
    Off,
}

/// A scope's pacer: `{SCOPE}__PACER`, `{SCOPE}__PACER__START`, `{SCOPE}__PACER__CEILING`.
///
/// ```
/// use polygateway::config::{PacerMode, PacerSettings};
/// let default = PacerSettings::default();
/// // No start or ceiling override: each pacer uses its own (adaptive: start 16, no ceiling).
/// assert_eq!((default.mode, default.start, default.ceiling), (PacerMode::Adaptive, None, None));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PacerSettings {
    /// Which pacer.
    pub mode: PacerMode,
    /// Starting limit override.
    pub start: Option<u32>,
    /// Ceiling override (a source's `MAX_CONCURRENCY`, when set, still caps it).
    pub ceiling: Option<u32>,
}

/// Behaviour when a quota gate is full.
///
/// ```
/// use polygateway::config::{QuotaFull, Settings};
/// # use std::collections::BTreeMap;
/// # fn env(extra: &[(&str, &str)]) -> BTreeMap<String, String> {
/// #     let base = [
/// #         ("PGW_LIMITER_BACKEND", "memory"),
/// #         ("PGW_BREAKER_BACKEND", "memory"),
/// #         ("LLM__QWEN__1__BASE_URL", "https://example.invalid/v1"),
/// #         ("LLM__QWEN__1__MODEL", "qwen-plus"),
/// #     ];
/// #     base.iter().chain(extra).map(|(k, v)| (k.to_string(), v.to_string())).collect()
/// # }
/// // `env` adds the backends and source `qwen_1` (`LLM__QWEN__1__…`) to these keys.
/// let settings = Settings::from_map(&env(&[("LLM__QUOTA_FULL", "fail_fast")])).unwrap();
/// assert_eq!(settings.scope("LLM").unwrap().quota_full, QuotaFull::FailFast);
/// assert_eq!(QuotaFull::default(), QuotaFull::Wait);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QuotaFull {
    /// Poll with jitter under the stall guard (default).
    #[default]
    Wait,
    /// Raise at once.
    FailFast,
}

/// Behaviour when every breaker refuses.
///
/// ```
/// use polygateway::config::{CircuitOpenPolicy, Settings};
/// # use std::collections::BTreeMap;
/// # fn env(extra: &[(&str, &str)]) -> BTreeMap<String, String> {
/// #     let base = [
/// #         ("PGW_LIMITER_BACKEND", "memory"),
/// #         ("PGW_BREAKER_BACKEND", "memory"),
/// #         ("LLM__QWEN__1__BASE_URL", "https://example.invalid/v1"),
/// #         ("LLM__QWEN__1__MODEL", "qwen-plus"),
/// #     ];
/// #     base.iter().chain(extra).map(|(k, v)| (k.to_string(), v.to_string())).collect()
/// # }
/// // `env` adds the backends and source `qwen_1` (`LLM__QWEN__1__…`) to these keys.
/// let settings = Settings::from_map(&env(&[("LLM__CIRCUIT_OPEN", "wait")])).unwrap();
/// assert_eq!(settings.scope("LLM").unwrap().circuit_open, CircuitOpenPolicy::Wait);
/// assert_eq!(CircuitOpenPolicy::default(), CircuitOpenPolicy::FailFast);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CircuitOpenPolicy {
    /// Raise `CircuitOpen` at once (default).
    #[default]
    FailFast,
    /// Sleep until the earliest cooldown end, within the stall budget.
    Wait,
}

/// What kind of calls a scope serves (decides its transport).
///
/// ```
/// use polygateway::config::{ScopeKind, Settings};
/// # use std::collections::BTreeMap;
/// # fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
/// #     pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
/// # }
/// // The kind follows from the scope name: `OCR*` → OCR, `EMBED*` → embeddings, else chat.
/// let settings = Settings::from_map(&env(&[
///     ("PGW_LIMITER_BACKEND", "memory"),
///     ("PGW_BREAKER_BACKEND", "memory"),
///     ("OCR__MONKEY__1__BASE_URL", "http://127.0.0.1:7861"),
///     ("OCR__MONKEY__1__MODEL", "monkeyocr"),
///     ("VLM__QWEN__1__BASE_URL", "https://example.invalid/v1"),
///     ("VLM__QWEN__1__MODEL", "qwen-vl"),
/// ]))
/// .unwrap();
/// assert_eq!(settings.scope("OCR").unwrap().kind, ScopeKind::Ocr);
/// assert_eq!(settings.scope("VLM").unwrap().kind, ScopeKind::Chat);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScopeKind {
    /// Chat completions (LLM and VLM).
    Chat,
    /// Embeddings.
    Embeddings,
    /// MonkeyOCR.
    Ocr,
}

/// One upstream source: `{SCOPE}__{PROVIDER}__{N}__{FIELD}`.
///
/// ```
/// use std::time::Duration;
/// use polygateway::config::Settings;
/// # use std::collections::BTreeMap;
/// # fn env(extra: &[(&str, &str)]) -> BTreeMap<String, String> {
/// #     let base = [
/// #         ("PGW_LIMITER_BACKEND", "memory"),
/// #         ("PGW_BREAKER_BACKEND", "memory"),
/// #         ("LLM__QWEN__1__BASE_URL", "https://example.invalid/v1"),
/// #         ("LLM__QWEN__1__MODEL", "qwen-plus"),
/// #     ];
/// #     base.iter().chain(extra).map(|(k, v)| (k.to_string(), v.to_string())).collect()
/// # }
/// // `env` adds the backends and `LLM__QWEN__1__BASE_URL` / `__MODEL` to these keys.
/// let settings = Settings::from_map(&env(&[
///     ("LLM__QWEN__1__API_KEY", "sk-live-123"),
///     ("LLM__QWEN__1__RPM", "600"),
///     ("LLM__QWEN__1__EXTRA_BODY", r#"{"temperature": 0.2}"#),
/// ]))
/// .unwrap();
/// let source = settings.scope("LLM").unwrap().source("qwen_1").unwrap();
/// assert_eq!(source.provider, "qwen");
/// assert_eq!(source.rpm, 600);
/// assert_eq!(source.timeout, Duration::from_secs(60));
/// assert_eq!(source.extra_body["temperature"], 0.2);
/// // Debug output never shows the key.
/// assert!(!format!("{source:?}").contains("sk-live-123"));
/// ```
#[derive(Clone, PartialEq)]
pub struct SourceSettings {
    /// `{provider}_{n}`, lower-case.
    pub name: String,
    /// Provider registry key, lower-case.
    pub provider: String,
    /// Base URL, e.g. `https://api.openai.com/v1`.
    pub base_url: String,
    /// API key (may be empty for keyless services such as a local OCR server).
    pub api_key: Secret,
    /// Model name sent upstream.
    pub model: String,
    /// Total deadline of one attempt.
    pub timeout: Duration,
    /// Source concurrency limit (0 = unlimited).
    pub max_concurrency: u32,
    /// Source RPM (0 = unlimited).
    pub rpm: u32,
    /// Source TPM (0 = unlimited).
    pub tpm: u64,
    /// Explicit `EST_TOKENS`, if set.
    pub est_tokens: Option<i64>,
    /// Time to first token deadline (equal to `timeout`, with `inter_token_timeout`, when the
    /// source has no watchdog of its own: see [`Settings::from_env_original`]).
    pub ttft_timeout: Duration,
    /// Inter-token deadline.
    pub inter_token_timeout: Duration,
    /// `None` = inject nothing; `Some(b)` = inject on/off.
    pub enable_thinking: Option<bool>,
    /// Missing `[DONE]` policy.
    pub missing_done: MissingDone,
    /// Honour proxy env vars (default true).
    pub trust_env: bool,
    /// `STREAM` (default true): `false` makes every chat attempt on this source non-streaming
    /// (one JSON answer under the total deadline), for servers and proxies that do not stream or
    /// stream badly. A call that asks for no streaming is never streamed either way.
    pub stream: bool,
    /// `STRUCTURED_MODE`: how typed calls carry their schema to this source, overriding the
    /// provider registry (`None` = the provider's strongest mode). Chat sources only.
    pub structured_mode: Option<crate::structured::StructuredMode>,
    /// `DIALECT`: the wire protocol of this chat source, overriding the provider registry
    /// (`None` = the provider's, [`ProviderProfile::dialect`](crate::provider::ProviderProfile::dialect)).
    pub dialect: Option<crate::provider::Dialect>,
    /// `POOL_IDLE_TIMEOUT_S` (default 4 s): how long an idle pooled connection to this source is
    /// kept. Keep it below the server's keep-alive timeout.
    pub pool_idle_timeout: Duration,
    /// Extra JSON merged into each request body (lowest priority).
    pub extra_body: Map<String, Value>,
}

impl SourceSettings {
    /// `effective_est_tokens` (docs/behaviour.md §5.3): explicit > 0 as is; else TPM > 0 → `max(1, tpm/60)`;
    /// else 0.
    ///
    /// ```
    /// let mut source = polygateway_testkit::source_settings("http://127.0.0.1:9/v1");
    /// assert_eq!(source.effective_est_tokens(), 0); // no TPM limit: nothing to estimate
    /// source.tpm = 6_000;
    /// assert_eq!(source.effective_est_tokens(), 100); // tpm / 60
    /// source.est_tokens = Some(500);
    /// assert_eq!(source.effective_est_tokens(), 500); // explicit value wins
    /// ```
    pub fn effective_est_tokens(&self) -> u64 {
        match self.est_tokens {
            Some(n) if n > 0 => n as u64,
            _ if self.tpm > 0 => (self.tpm / 60).max(1),
            _ => 0,
        }
    }

    /// `true` when the source has no streaming watchdog of its own: its TTFT and inter-token
    /// deadlines are its total `timeout` (the original library's rules without its watchdog
    /// keys), so only the total limit acts and no TTFT bound constrains the stall window.
    pub(crate) fn watchdog_off(&self) -> bool {
        self.ttft_timeout == self.timeout && self.inter_token_timeout == self.timeout
    }

    /// The structured mode typed calls start in on this source: `STRUCTURED_MODE` when set,
    /// else the strongest mode of its provider's profile.
    ///
    /// ```
    /// use polygateway::provider::ProviderRegistry;
    /// use polygateway::structured::StructuredMode;
    /// let registry = ProviderRegistry::with_defaults();
    /// let mut source = polygateway_testkit::source_settings("http://127.0.0.1:9/v1");
    /// source.provider = "llamacpp".into();
    /// let profile = registry.get(&source.provider);
    /// assert_eq!(source.effective_structured_mode(profile), StructuredMode::JsonSchema);
    /// source.structured_mode = Some(StructuredMode::Prompt);
    /// assert_eq!(source.effective_structured_mode(profile), StructuredMode::Prompt);
    /// ```
    pub fn effective_structured_mode(
        &self,
        profile: &crate::provider::ProviderProfile,
    ) -> crate::structured::StructuredMode {
        profile.structured_mode_for(self.structured_mode)
    }

    /// The wire protocol this source speaks: `DIALECT` when set, else its provider's.
    ///
    /// ```
    /// use polygateway::provider::{Dialect, ProviderRegistry};
    /// let registry = ProviderRegistry::with_defaults();
    /// let mut source = polygateway_testkit::source_settings("http://127.0.0.1:9/v1");
    /// source.provider = "anthropic".into();
    /// assert_eq!(source.effective_dialect(registry.get(&source.provider)), Dialect::Anthropic);
    /// // An Anthropic model behind an OpenAI-compatible proxy.
    /// source.dialect = Some(Dialect::OpenAi);
    /// assert_eq!(source.effective_dialect(registry.get(&source.provider)), Dialect::OpenAi);
    /// ```
    pub fn effective_dialect(
        &self,
        profile: &crate::provider::ProviderProfile,
    ) -> crate::provider::Dialect {
        profile.dialect_for(self.dialect)
    }
}

impl fmt::Debug for SourceSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SourceSettings")
            .field("name", &self.name)
            .field("provider", &self.provider)
            .field("base_url", &redact_dsn(&self.base_url))
            .field("api_key", &self.api_key)
            .field("model", &self.model)
            .field("timeout", &self.timeout)
            .field("max_concurrency", &self.max_concurrency)
            .field("rpm", &self.rpm)
            .field("tpm", &self.tpm)
            .field("est_tokens", &self.est_tokens)
            .field("ttft_timeout", &self.ttft_timeout)
            .field("inter_token_timeout", &self.inter_token_timeout)
            .field("enable_thinking", &self.enable_thinking)
            .field("missing_done", &self.missing_done)
            .field("trust_env", &self.trust_env)
            .field("stream", &self.stream)
            .field("structured_mode", &self.structured_mode)
            .field("dialect", &self.dialect)
            .field("pool_idle_timeout", &self.pool_idle_timeout)
            .field("extra_body", &self.extra_body)
            .finish()
    }
}

/// Retry budget of a scope.
///
/// ```
/// use std::time::Duration;
/// use polygateway::config::{RetrySettings, Settings};
/// # use std::collections::BTreeMap;
/// # fn env(extra: &[(&str, &str)]) -> BTreeMap<String, String> {
/// #     let base = [
/// #         ("PGW_LIMITER_BACKEND", "memory"),
/// #         ("PGW_BREAKER_BACKEND", "memory"),
/// #         ("LLM__QWEN__1__BASE_URL", "https://example.invalid/v1"),
/// #         ("LLM__QWEN__1__MODEL", "qwen-plus"),
/// #     ];
/// #     base.iter().chain(extra).map(|(k, v)| (k.to_string(), v.to_string())).collect()
/// # }
/// // `env` adds the backends and source `qwen_1` (`LLM__QWEN__1__…`) to these keys.
/// let settings = Settings::from_map(&env(&[
///     ("LLM__RETRY__MAX_ATTEMPTS", "5"),
///     ("LLM__RETRY__BACKOFF_BASE_S", "0.5"),
/// ]))
/// .unwrap();
/// let expected = RetrySettings {
///     max_attempts: 5,
///     backoff_base: Duration::from_millis(500),
///     ..RetrySettings::default()
/// };
/// assert_eq!(settings.scope("LLM").unwrap().retry, expected);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct RetrySettings {
    /// Attempts per call, first included.
    pub max_attempts: u32,
    /// Backoff base.
    pub backoff_base: Duration,
    /// Backoff cap.
    pub backoff_max: Duration,
}

/// Breaker settings of a scope (per-source values are derived from these).
///
/// ```
/// use std::time::Duration;
/// use polygateway::config::{BreakerSettings, Settings};
/// # use std::collections::BTreeMap;
/// # fn env(extra: &[(&str, &str)]) -> BTreeMap<String, String> {
/// #     let base = [
/// #         ("PGW_LIMITER_BACKEND", "memory"),
/// #         ("PGW_BREAKER_BACKEND", "memory"),
/// #         ("LLM__QWEN__1__BASE_URL", "https://example.invalid/v1"),
/// #         ("LLM__QWEN__1__MODEL", "qwen-plus"),
/// #     ];
/// #     base.iter().chain(extra).map(|(k, v)| (k.to_string(), v.to_string())).collect()
/// # }
/// // `env` adds the backends and source `qwen_1` (`LLM__QWEN__1__…`) to these keys.
/// let settings = Settings::from_map(&env(&[
///     ("LLM__BREAKER__FAIL_THRESHOLD", "3"),
///     ("LLM__BREAKER__COOLDOWN_S", "10"),
/// ]))
/// .unwrap();
/// let breaker = &settings.scope("LLM").unwrap().breaker;
/// assert_eq!(breaker.fail_threshold, 3);
/// assert_eq!(breaker.cooldown, Duration::from_secs(10));
/// // Unset knobs keep their defaults; the two derived ones stay `None`.
/// assert_eq!(breaker.min_calls, BreakerSettings::default().min_calls);
/// assert_eq!((breaker.probe_ttl, breaker.max_cooldown), (None, None));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct BreakerSettings {
    /// `FAIL_THRESHOLD`.
    pub fail_threshold: u32,
    /// `COOLDOWN_S`.
    pub cooldown: Duration,
    /// `PROBE_TTL_S`; `None` = `max(2 × slowest timeout, cooldown, timeout + 5)`.
    pub probe_ttl: Option<Duration>,
    /// `MIN_CALLS`.
    pub min_calls: u32,
    /// `FAIL_RATE`.
    pub fail_rate: f64,
    /// `WINDOW_S` (width of each of the two buckets).
    pub window: Duration,
    /// `MAX_COOLDOWN_S`; `None` = `max(300, cooldown)`.
    pub max_cooldown: Option<Duration>,
}

/// Stall guard settings.
///
/// ```
/// use std::time::Duration;
/// use polygateway::config::{ConfigError, Settings};
/// # use std::collections::BTreeMap;
/// # fn env(extra: &[(&str, &str)]) -> BTreeMap<String, String> {
/// #     let base = [
/// #         ("PGW_LIMITER_BACKEND", "memory"),
/// #         ("PGW_BREAKER_BACKEND", "memory"),
/// #         ("LLM__QWEN__1__BASE_URL", "https://example.invalid/v1"),
/// #         ("LLM__QWEN__1__MODEL", "qwen-plus"),
/// #     ];
/// #     base.iter().chain(extra).map(|(k, v)| (k.to_string(), v.to_string())).collect()
/// # }
/// // `env` adds the backends and source `qwen_1` (`LLM__QWEN__1__…`) to these keys.
/// let settings =
///     Settings::from_map(&env(&[("LLM__BACKPRESSURE__STALL_WINDOW_S", "60")])).unwrap();
/// let backpressure = &settings.scope("LLM").unwrap().backpressure;
/// assert_eq!(backpressure.stall_window, Duration::from_secs(60));
/// assert_eq!(backpressure.poll_interval, Duration::from_secs(1));
/// // The window must cover the slowest source's TTFT (30 s by default here).
/// let err = Settings::from_map(&env(&[("LLM__BACKPRESSURE__STALL_WINDOW_S", "10")])).unwrap_err();
/// assert!(matches!(err, ConfigError::Guard { .. }), "{err}");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct BackpressureSettings {
    /// `STALL_WINDOW_S` (default 300).
    pub stall_window: Duration,
    /// `POLL_INTERVAL_S` for quota waits.
    pub poll_interval: Duration,
    /// `BATCH_RESERVE`, when set; unset, 0.1 with a Redis limiter and 0 with the memory one.
    pub batch_reserve: Option<f64>,
}

/// Hedged first tokens of a scope (`{SCOPE}__HEDGE__*`, docs/behaviour.md §5.9): off unless
/// `ENABLED`.
///
/// ```
/// use std::time::Duration;
/// use polygateway::config::Settings;
/// # use std::collections::BTreeMap;
/// # fn env(extra: &[(&str, &str)]) -> BTreeMap<String, String> {
/// #     let base = [
/// #         ("PGW_LIMITER_BACKEND", "memory"),
/// #         ("PGW_BREAKER_BACKEND", "memory"),
/// #         ("LLM__QWEN__1__BASE_URL", "https://example.invalid/v1"),
/// #         ("LLM__QWEN__1__MODEL", "qwen-plus"),
/// #     ];
/// #     base.iter().chain(extra).map(|(k, v)| (k.to_string(), v.to_string())).collect()
/// # }
/// let settings = Settings::from_map(&env(&[
///     ("LLM__HEDGE__ENABLED", "true"),
///     ("LLM__HEDGE__FLOOR_S", "0.1"),
/// ]))
/// .unwrap();
/// let hedge = &settings.scope("LLM").unwrap().hedge;
/// assert!(hedge.enabled);
/// assert_eq!(hedge.floor, Duration::from_millis(100));
/// assert_eq!(hedge.budget, 0.05); // at most one hedge per 20 attempts
/// // A budget is a share of attempts.
/// assert!(Settings::from_map(&env(&[("LLM__HEDGE__BUDGET", "1.5")])).is_err());
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct HedgeSettings {
    /// `ENABLED` (default false).
    pub enabled: bool,
    /// `FLOOR_S`: never hedge sooner (default 0.25 s).
    pub floor: Duration,
    /// `CEILING_S`: hedge by then, and while a source's p95 is unknown (default 5 s).
    pub ceiling: Duration,
    /// `BUDGET`: hedges per attempt sent, at most (default 0.05).
    pub budget: f64,
}

impl Default for HedgeSettings {
    /// Off; floor 0.25 s, ceiling 5 s, budget 5 %.
    fn default() -> Self {
        Self {
            enabled: false,
            floor: Duration::from_secs_f64(super::defaults::HEDGE_FLOOR_S),
            ceiling: Duration::from_secs_f64(super::defaults::HEDGE_CEILING_S),
            budget: super::defaults::HEDGE_BUDGET,
        }
    }
}

/// Mid-stream continuation of a scope (`{SCOPE}__CONTINUE__*`, docs/behaviour.md §5.10): off
/// unless `ENABLED`.
///
/// ```
/// use polygateway::config::Settings;
/// # use std::collections::BTreeMap;
/// # fn env(extra: &[(&str, &str)]) -> BTreeMap<String, String> {
/// #     let base = [
/// #         ("PGW_LIMITER_BACKEND", "memory"),
/// #         ("PGW_BREAKER_BACKEND", "memory"),
/// #         ("LLM__QWEN__1__BASE_URL", "https://example.invalid/v1"),
/// #         ("LLM__QWEN__1__MODEL", "qwen-plus"),
/// #     ];
/// #     base.iter().chain(extra).map(|(k, v)| (k.to_string(), v.to_string())).collect()
/// # }
/// let off = Settings::from_map(&env(&[])).unwrap();
/// assert!(!off.scope("LLM").unwrap().continuation.enabled);
/// let on = Settings::from_map(&env(&[("LLM__CONTINUE__ENABLED", "true")])).unwrap();
/// assert!(on.scope("LLM").unwrap().continuation.enabled);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContinueSettings {
    /// `ENABLED` (default false).
    pub enabled: bool,
}

/// Embeddings options of a scope.
///
/// ```
/// use polygateway::config::{EmbeddingSettings, Settings};
/// # use std::collections::BTreeMap;
/// # fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
/// #     pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
/// # }
/// let settings = Settings::from_map(&env(&[
///     ("PGW_LIMITER_BACKEND", "memory"),
///     ("PGW_BREAKER_BACKEND", "memory"),
///     ("EMBED__OPENAI__1__BASE_URL", "https://example.invalid/v1"),
///     ("EMBED__OPENAI__1__MODEL", "text-embedding-3-small"),
///     ("EMBED__BATCH_SIZE", "64"),
///     ("EMBED__NORMALIZE", "true"),
/// ]))
/// .unwrap();
/// assert_eq!(
///     settings.scope("EMBED").unwrap().embedding,
///     Some(EmbeddingSettings { batch_size: 64, normalize: true, expected_dim: None })
/// );
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct EmbeddingSettings {
    /// `BATCH_SIZE` (required for embedding scopes).
    pub batch_size: usize,
    /// `NORMALIZE` → L2.
    pub normalize: bool,
    /// `EXPECTED_DIM`.
    pub expected_dim: Option<usize>,
}

/// One scope: its sources and governance knobs.
///
/// ```
/// use polygateway::config::{ScopeKind, Settings};
/// # use std::collections::BTreeMap;
/// # fn env(extra: &[(&str, &str)]) -> BTreeMap<String, String> {
/// #     let base = [
/// #         ("PGW_LIMITER_BACKEND", "memory"),
/// #         ("PGW_BREAKER_BACKEND", "memory"),
/// #         ("LLM__QWEN__1__BASE_URL", "https://example.invalid/v1"),
/// #         ("LLM__QWEN__1__MODEL", "qwen-plus"),
/// #     ];
/// #     base.iter().chain(extra).map(|(k, v)| (k.to_string(), v.to_string())).collect()
/// # }
/// // `env` adds the backends and source `qwen_1` to these keys.
/// let settings = Settings::from_map(&env(&[
///     ("LLM__DEEPSEEK__1__BASE_URL", "https://api.deepseek.com/v1"),
///     ("LLM__DEEPSEEK__1__MODEL", "deepseek-chat"),
///     ("LLM__GLOBAL__RPM", "1000"),
/// ]))
/// .unwrap();
/// let llm = settings.scope("LLM").unwrap();
/// assert_eq!(llm.kind, ScopeKind::Chat);
/// let names: Vec<&str> = llm.sources.iter().map(|s| s.name.as_str()).collect();
/// assert_eq!(names, ["deepseek_1", "qwen_1"]); // ordered by provider, then index
/// assert_eq!((llm.global_rpm, llm.global_max_concurrency), (1000, 0));
/// assert!(llm.embedding.is_none());
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ScopeSettings {
    /// Upper-case scope name (`LLM`, `VLM`, `OCR`, `EMBED`, …).
    pub name: String,
    /// What it serves.
    pub kind: ScopeKind,
    /// Sources, ordered by provider then index.
    pub sources: Vec<SourceSettings>,
    /// `GLOBAL__MAX_CONCURRENCY` (0 = unlimited).
    pub global_max_concurrency: u32,
    /// `GLOBAL__RPM`.
    pub global_rpm: u32,
    /// `GLOBAL__TPM`.
    pub global_tpm: u64,
    /// Selection policy.
    pub selector: SelectorKind,
    /// The sources' pacer.
    pub pacer: PacerSettings,
    /// Retry budget.
    pub retry: RetrySettings,
    /// Breaker knobs.
    pub breaker: BreakerSettings,
    /// Stall guard.
    pub backpressure: BackpressureSettings,
    /// Hedged first tokens (`HEDGE__*`, off by default).
    pub hedge: HedgeSettings,
    /// Mid-stream continuation on another source (`CONTINUE__*`, off by default).
    pub continuation: ContinueSettings,
    /// Quota-full behaviour.
    pub quota_full: QuotaFull,
    /// All-circuits-open behaviour.
    pub circuit_open: CircuitOpenPolicy,
    /// `BUDGET`: the scope's spend limit per window (chat scopes; `None` = unlimited).
    pub budget: Option<super::SpendBudget>,
    /// Embeddings options (embedding scopes only).
    pub embedding: Option<EmbeddingSettings>,
}

/// Which backend stores limiter or breaker state.
///
/// ```
/// use polygateway::config::{ConfigError, GovernanceBackendKind, Settings};
/// # use std::collections::BTreeMap;
/// # fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
/// #     pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
/// # }
/// let shared = Settings::from_map(&env(&[
///     ("PGW_LIMITER_BACKEND", "redis"),
///     ("REDIS_URL", "redis://127.0.0.1:6379/0"),
/// ]))
/// .unwrap();
/// assert_eq!(shared.limiter_backend, GovernanceBackendKind::Redis);
/// // The Redis backend needs REDIS_URL.
/// let err = Settings::from_map(&env(&[("PGW_BREAKER_BACKEND", "redis")])).unwrap_err();
/// assert!(matches!(&err, ConfigError::Missing { key, .. } if key == "REDIS_URL"), "{err}");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GovernanceBackendKind {
    /// In-process.
    Memory,
    /// Redis + Lua (needs `REDIS_URL`).
    Redis,
}

/// Response cache backend.
///
/// ```
/// use std::time::Duration;
/// use polygateway::config::{CacheSettings, Settings};
/// # use std::collections::BTreeMap;
/// # fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
/// #     pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
/// # }
/// let settings = Settings::from_map(&env(&[
///     ("PGW_CACHE_BACKEND", "memory"),
///     ("PGW_CACHE_NAMESPACE", "dev"),
///     ("PGW_CACHE_TTL_S", "3600"),
/// ]))
/// .unwrap();
/// assert_eq!(
///     settings.cache,
///     CacheSettings::Memory { namespace: "dev".into(), ttl: Duration::from_secs(3600) }
/// );
/// // Caching is off unless asked for.
/// assert_eq!(Settings::from_map(&env(&[])).unwrap().cache, CacheSettings::None);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum CacheSettings {
    /// No caching.
    None,
    /// In-process cache.
    Memory {
        /// Default namespace.
        namespace: String,
        /// Entry lifetime.
        ttl: Duration,
    },
    /// Redis cache.
    Redis {
        /// Default namespace.
        namespace: String,
        /// Entry lifetime.
        ttl: Duration,
    },
}

/// Telemetry schema handling.
///
/// ```
/// use polygateway::config::{SchemaMode, Settings};
/// # use std::collections::BTreeMap;
/// # fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
/// #     pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
/// # }
/// let settings = Settings::from_map(&env(&[
///     ("PGW_TELEMETRY_BACKEND", "sqlite"),
///     ("PGW_TELEMETRY_SQLITE_PATH", "telemetry.db"),
///     ("PGW_TELEMETRY_SCHEMA_MODE", "manual"),
/// ]))
/// .unwrap();
/// assert_eq!(settings.telemetry.schema_mode, Some(SchemaMode::Manual));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemaMode {
    /// Add missing columns.
    Auto,
    /// No DDL on an existing table; trim the INSERT and warn.
    Manual,
}

/// Telemetry backend.
///
/// ```
/// use std::time::Duration;
/// use polygateway::config::{Secret, TelemetryBackendSettings};
/// let backend = TelemetryBackendSettings::Postgres {
///     dsn: Secret::new("postgres://app:s3cret@db:5432/telemetry"),
///     pool_max: 4,
///     write_timeout: Duration::from_secs(5),
/// };
/// // Debug output keeps the DSN (and its password) hidden.
/// let shown = format!("{backend:?}");
/// assert!(shown.contains("pool_max: 4") && !shown.contains("s3cret"));
/// ```
#[derive(Clone, PartialEq)]
pub enum TelemetryBackendSettings {
    /// Record nothing.
    None,
    /// SQLite file.
    Sqlite {
        /// Database path.
        path: String,
    },
    /// PostgreSQL.
    Postgres {
        /// Connection string (secret: holds a password).
        dsn: Secret,
        /// Pool size (default 4).
        pool_max: usize,
        /// Hard budget per write (default 5 s).
        write_timeout: Duration,
    },
}

impl fmt::Debug for TelemetryBackendSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::None => f.write_str("None"),
            Self::Sqlite { path } => f.debug_struct("Sqlite").field("path", path).finish(),
            Self::Postgres {
                dsn,
                pool_max,
                write_timeout,
            } => f
                .debug_struct("Postgres")
                .field("dsn", dsn)
                .field("pool_max", pool_max)
                .field("write_timeout", write_timeout)
                .finish(),
        }
    }
}

/// Telemetry settings.
///
/// ```
/// use polygateway::config::{Settings, TelemetryBackendSettings, TelemetrySettings};
/// # use std::collections::BTreeMap;
/// # fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
/// #     pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
/// # }
/// let settings = Settings::from_map(&env(&[
///     ("PGW_TELEMETRY_BACKEND", "sqlite"),
///     ("PGW_TELEMETRY_SQLITE_PATH", "telemetry.db"),
///     ("PGW_TELEMETRY_TEXT_CAP", "2000"),
/// ]))
/// .unwrap();
/// let expected = TelemetrySettings {
///     backend: TelemetryBackendSettings::Sqlite { path: "telemetry.db".into() },
///     schema_mode: None,
///     text_cap: Some(2000),
/// };
/// assert_eq!(settings.telemetry, expected);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct TelemetrySettings {
    /// Where rows go.
    pub backend: TelemetryBackendSettings,
    /// `None` → SQLite auto, Postgres manual.
    pub schema_mode: Option<SchemaMode>,
    /// `PGW_TELEMETRY_TEXT_CAP`.
    pub text_cap: Option<usize>,
}

/// Everything a runtime is built from.
///
/// ```
/// use std::collections::BTreeMap;
/// use std::time::Duration;
/// use polygateway::config::{
///     CacheSettings, GovernanceBackendKind, Settings, TelemetryBackendSettings,
/// };
/// // With no keys at all: no scopes, nothing cached or recorded, global defaults.
/// let settings = Settings::from_map(&BTreeMap::new()).unwrap();
/// assert!(settings.scopes.is_empty());
/// assert_eq!(settings.limiter_backend, GovernanceBackendKind::Memory);
/// assert_eq!(settings.cache, CacheSettings::None);
/// assert_eq!(settings.telemetry.backend, TelemetryBackendSettings::None);
/// assert_eq!(settings.redis_url, None);
/// assert_eq!(settings.lease_ttl, Duration::from_secs(1500));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Scopes by upper-case name.
    pub scopes: BTreeMap<String, ScopeSettings>,
    /// Limiter backend.
    pub limiter_backend: GovernanceBackendKind,
    /// Breaker backend.
    pub breaker_backend: GovernanceBackendKind,
    /// `REDIS_URL` (secret: may hold a password).
    pub redis_url: Option<Secret>,
    /// Response cache.
    pub cache: CacheSettings,
    /// Telemetry.
    pub telemetry: TelemetrySettings,
    /// `PGW_PRICING_PATH`.
    pub pricing_path: Option<String>,
    /// `PGW_STRUCTURED_MAX_RETRIES` (default 2).
    pub structured_max_retries: u32,
    /// `PGW_TENANT_BUDGETS`: spend limits per tenant (the call's `tenant_id`), across scopes.
    pub tenant_budgets: BTreeMap<String, super::SpendBudget>,
    /// `PGW_LEASE_TTL_S` (default 1500).
    pub lease_ttl: Duration,
    /// The `PGW_SERVER_*` keys of `polygateway serve`.
    pub server: super::ServerSettings,
}

/// Mask the password (or the whole credential part) of a DSN or URL so it can appear in a
/// message: `postgresql://u:pw@h/db` → `postgresql://u:***@h/db`, key/value form
/// `host=h password=pw` → `host=h password=***`. Text without credentials is returned as is.
///
/// ```
/// use polygateway::config::redact_dsn;
/// assert_eq!(redact_dsn("postgres://app:s3cret@db:5432/x"), "postgres://app:***@db:5432/x");
/// assert_eq!(redact_dsn("redis://:s3cret@r:6379/0"), "redis://:***@r:6379/0");
/// assert_eq!(redact_dsn("host=db password=s3cret user=app"), "host=db password=*** user=app");
/// ```
pub fn redact_dsn(dsn: &str) -> String {
    if let Some(scheme_end) = dsn.find("://") {
        let rest = &dsn[scheme_end + 3..];
        // The authority ends at the first '/', '?' or '#'; credentials are before its last '@'.
        let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let authority = &rest[..authority_end];
        if let Some(at) = authority.rfind('@') {
            let userinfo = &authority[..at];
            let masked = match userinfo.find(':') {
                Some(colon) => format!("{}:***", &userinfo[..colon]),
                None => "***".to_string(),
            };
            return format!("{}{}{}", &dsn[..scheme_end + 3], masked, &rest[at..]);
        }
        return dsn.to_string();
    }
    // libpq key/value form: mask the value of every `password=` pair (quoted or not).
    let mut out = String::with_capacity(dsn.len());
    let mut rest = dsn;
    while let Some(pos) = rest.to_ascii_lowercase().find("password") {
        let after = &rest[pos + "password".len()..];
        let trimmed = after.trim_start();
        if let Some(value) = trimmed.strip_prefix('=') {
            let value = value.trim_start();
            let consumed = if let Some(quoted) = value.strip_prefix('\'') {
                // Quoted value: up to the closing unescaped quote.
                let mut end = quoted.len();
                let mut escaped = false;
                for (i, c) in quoted.char_indices() {
                    if escaped {
                        escaped = false;
                    } else if c == '\\' {
                        escaped = true;
                    } else if c == '\'' {
                        end = i + 1;
                        break;
                    }
                }
                1 + end
            } else {
                value.find(char::is_whitespace).unwrap_or(value.len())
            };
            let value_start = rest.len() - value.len();
            out.push_str(&rest[..value_start]);
            out.push_str("***");
            rest = &value[consumed..];
        } else {
            out.push_str(&rest[..pos + "password".len()]);
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

impl Default for RetrySettings {
    /// 3 attempts, backoff 1 s doubling up to 30 s.
    fn default() -> Self {
        Self {
            max_attempts: super::defaults::MAX_ATTEMPTS,
            backoff_base: Duration::from_secs_f64(super::defaults::BACKOFF_BASE_S),
            backoff_max: Duration::from_secs_f64(super::defaults::BACKOFF_MAX_S),
        }
    }
}

impl Default for BreakerSettings {
    /// Threshold 5, cooldown 30 s, derived probe TTL, min calls 10, fail rate 0.6, window 30 s,
    /// derived max cooldown.
    fn default() -> Self {
        Self {
            fail_threshold: super::defaults::FAIL_THRESHOLD,
            cooldown: Duration::from_secs_f64(super::defaults::COOLDOWN_S),
            probe_ttl: None,
            min_calls: super::defaults::MIN_CALLS,
            fail_rate: super::defaults::FAIL_RATE,
            window: Duration::from_secs_f64(super::defaults::WINDOW_S),
            max_cooldown: None,
        }
    }
}

impl BreakerSettings {
    /// `MAX_COOLDOWN_S`, or its default `max(300 s, cooldown)`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use polygateway::config::BreakerSettings;
    /// let mut breaker = BreakerSettings::default(); // cooldown 30 s
    /// assert_eq!(breaker.effective_max_cooldown(), Duration::from_secs(300));
    /// breaker.max_cooldown = Some(Duration::from_secs(120));
    /// assert_eq!(breaker.effective_max_cooldown(), Duration::from_secs(120));
    /// ```
    pub fn effective_max_cooldown(&self) -> Duration {
        self.max_cooldown.unwrap_or_else(|| {
            Duration::from_secs_f64(super::defaults::MAX_COOLDOWN_FLOOR_S).max(self.cooldown)
        })
    }
}

impl Default for BackpressureSettings {
    /// Stall window 300 s, poll interval 1 s, batch reserve by limiter backend.
    fn default() -> Self {
        Self {
            stall_window: Duration::from_secs_f64(super::defaults::STALL_WINDOW_S),
            poll_interval: Duration::from_secs_f64(super::defaults::POLL_INTERVAL_S),
            batch_reserve: None,
        }
    }
}

impl ScopeSettings {
    /// The longest source `TIMEOUT_S` (zero without sources).
    ///
    /// ```
    /// use std::time::Duration;
    /// use polygateway::config::Settings;
    /// # use std::collections::BTreeMap;
    /// # fn env(extra: &[(&str, &str)]) -> BTreeMap<String, String> {
    /// #     let base = [
    /// #         ("PGW_LIMITER_BACKEND", "memory"),
    /// #         ("PGW_BREAKER_BACKEND", "memory"),
    /// #         ("LLM__QWEN__1__BASE_URL", "https://example.invalid/v1"),
    /// #         ("LLM__QWEN__1__MODEL", "qwen-plus"),
    /// #     ];
    /// #     base.iter().chain(extra).map(|(k, v)| (k.to_string(), v.to_string())).collect()
    /// # }
    /// // `env` adds the backends and source `qwen_1` (`LLM__QWEN__1__…`) to these keys.
    ///     // `env` adds `qwen_1` (default 60 s timeout); `qwen_2` gets 90 s.
    /// let settings = Settings::from_map(&env(&[
    ///     ("LLM__QWEN__2__BASE_URL", "https://example.invalid/v1"),
    ///     ("LLM__QWEN__2__MODEL", "qwen-max"),
    ///     ("LLM__QWEN__2__TIMEOUT_S", "90"),
    /// ]))
    /// .unwrap();
    /// assert_eq!(settings.scope("LLM").unwrap().slowest_timeout(), Duration::from_secs(90));
    /// ```
    pub fn slowest_timeout(&self) -> Duration {
        self.sources
            .iter()
            .map(|s| s.timeout)
            .max()
            .unwrap_or_default()
    }

    /// The longest source TTFT deadline (zero without sources).
    ///
    /// ```
    /// use std::time::Duration;
    /// use polygateway::config::Settings;
    /// # use std::collections::BTreeMap;
    /// # fn env(extra: &[(&str, &str)]) -> BTreeMap<String, String> {
    /// #     let base = [
    /// #         ("PGW_LIMITER_BACKEND", "memory"),
    /// #         ("PGW_BREAKER_BACKEND", "memory"),
    /// #         ("LLM__QWEN__1__BASE_URL", "https://example.invalid/v1"),
    /// #         ("LLM__QWEN__1__MODEL", "qwen-plus"),
    /// #     ];
    /// #     base.iter().chain(extra).map(|(k, v)| (k.to_string(), v.to_string())).collect()
    /// # }
    /// // `env` adds the backends and source `qwen_1` (`LLM__QWEN__1__…`) to these keys.
    ///     // `qwen_1` keeps the derived 30 s TTFT; `qwen_2` is tighter.
    /// let settings = Settings::from_map(&env(&[
    ///     ("LLM__QWEN__2__BASE_URL", "https://example.invalid/v1"),
    ///     ("LLM__QWEN__2__MODEL", "qwen-turbo"),
    ///     ("LLM__QWEN__2__TTFT_TIMEOUT_S", "5"),
    ///     ("LLM__QWEN__2__INTER_TOKEN_TIMEOUT_S", "2"),
    /// ]))
    /// .unwrap();
    /// assert_eq!(settings.scope("LLM").unwrap().slowest_ttft(), Duration::from_secs(30));
    /// ```
    pub fn slowest_ttft(&self) -> Duration {
        self.sources
            .iter()
            .map(|s| s.ttft_timeout)
            .max()
            .unwrap_or_default()
    }

    /// `PROBE_TTL_S`, or its default `max(2 × slowest timeout, cooldown, slowest timeout + 5 s)`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use polygateway::config::Settings;
    /// # use std::collections::BTreeMap;
    /// # fn env(extra: &[(&str, &str)]) -> BTreeMap<String, String> {
    /// #     let base = [
    /// #         ("PGW_LIMITER_BACKEND", "memory"),
    /// #         ("PGW_BREAKER_BACKEND", "memory"),
    /// #         ("LLM__QWEN__1__BASE_URL", "https://example.invalid/v1"),
    /// #         ("LLM__QWEN__1__MODEL", "qwen-plus"),
    /// #     ];
    /// #     base.iter().chain(extra).map(|(k, v)| (k.to_string(), v.to_string())).collect()
    /// # }
    /// // `env` adds the backends and source `qwen_1` (`LLM__QWEN__1__…`) to these keys.
    ///     // One source with the default 60 s timeout: max(120 s, 30 s, 65 s).
    /// let derived = Settings::from_map(&env(&[])).unwrap();
    /// assert_eq!(derived.scope("LLM").unwrap().effective_probe_ttl(), Duration::from_secs(120));
    /// let explicit = Settings::from_map(&env(&[("LLM__BREAKER__PROBE_TTL_S", "45")])).unwrap();
    /// assert_eq!(explicit.scope("LLM").unwrap().effective_probe_ttl(), Duration::from_secs(45));
    /// ```
    pub fn effective_probe_ttl(&self) -> Duration {
        self.breaker.probe_ttl.unwrap_or_else(|| {
            let slowest = self.slowest_timeout();
            (slowest * 2)
                .max(self.breaker.cooldown)
                .max(slowest + Duration::from_secs(5))
        })
    }

    /// The source named `name`, if configured.
    ///
    /// ```
    /// use polygateway::config::Settings;
    /// # use std::collections::BTreeMap;
    /// # fn env(extra: &[(&str, &str)]) -> BTreeMap<String, String> {
    /// #     let base = [
    /// #         ("PGW_LIMITER_BACKEND", "memory"),
    /// #         ("PGW_BREAKER_BACKEND", "memory"),
    /// #         ("LLM__QWEN__1__BASE_URL", "https://example.invalid/v1"),
    /// #         ("LLM__QWEN__1__MODEL", "qwen-plus"),
    /// #     ];
    /// #     base.iter().chain(extra).map(|(k, v)| (k.to_string(), v.to_string())).collect()
    /// # }
    /// // `env` adds the backends and source `qwen_1` (`LLM__QWEN__1__…`) to these keys.
    ///     // `env` configures `LLM__QWEN__1__…`, i.e. source `qwen_1`.
    /// let settings = Settings::from_map(&env(&[])).unwrap();
    /// let llm = settings.scope("LLM").unwrap();
    /// assert_eq!(llm.source("qwen_1").map(|s| s.model.as_str()), Some("qwen-plus"));
    /// assert!(llm.source("qwen_2").is_none());
    /// ```
    pub fn source(&self, name: &str) -> Option<&SourceSettings> {
        self.sources.iter().find(|s| s.name == name)
    }
}

impl TelemetrySettings {
    /// `PGW_TELEMETRY_SCHEMA_MODE`, or its backend-derived default: SQLite → auto, Postgres →
    /// manual (`None` for the `none` backend: nothing consumes it).
    ///
    /// ```
    /// use polygateway::config::{SchemaMode, TelemetryBackendSettings, TelemetrySettings};
    /// let mut telemetry = TelemetrySettings {
    ///     backend: TelemetryBackendSettings::Sqlite { path: "telemetry.db".into() },
    ///     schema_mode: None,
    ///     text_cap: None,
    /// };
    /// assert_eq!(telemetry.effective_schema_mode(), Some(SchemaMode::Auto));
    /// telemetry.schema_mode = Some(SchemaMode::Manual);
    /// assert_eq!(telemetry.effective_schema_mode(), Some(SchemaMode::Manual));
    /// telemetry.backend = TelemetryBackendSettings::None;
    /// assert_eq!(telemetry.effective_schema_mode(), None);
    /// ```
    pub fn effective_schema_mode(&self) -> Option<SchemaMode> {
        match (&self.backend, self.schema_mode) {
            (TelemetryBackendSettings::None, _) => None,
            (_, Some(mode)) => Some(mode),
            (TelemetryBackendSettings::Sqlite { .. }, None) => Some(SchemaMode::Auto),
            (TelemetryBackendSettings::Postgres { .. }, None) => Some(SchemaMode::Manual),
        }
    }
}
