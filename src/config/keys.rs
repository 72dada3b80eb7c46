//! The one table of configuration keys the parser accepts (docs/behaviour.md §3).
//!
//! Every key is one [`KeyDef`] in [`KEYS`]: its name, its family (source field, scope key,
//! shorthand or global), the kind of value it takes (with the allowed words of a choice), its
//! default and one line of documentation. The parser in `env` reads keys only through these
//! descriptors, the name lists below are derived from the table, and tests check the
//! configuration reference (docs/manual/configuration.md, generated from the table),
//! `.env.example` and the other docs against it. Adding a key: one descriptor in the module of
//! its family below, listed in [`KEYS`]; read it in `env` (`keys.secs(&scope::MY_KEY)` and the
//! like); add its row to docs/manual/configuration.md (`tests/docs_drift.rs` prints the table as
//! it should read) and a line to `.env.example` (`tests/config_env.rs` checks both ways).
//!
//! Typed defaults live in `defaults` (the settings types' `Default` impls share them); a test
//! checks that the default column of this table says the same.

/// Which part of the configuration a key belongs to, and so how its full name is spelt.
///
/// ```
/// use polygateway::config::keys::{KeyFamily, KEYS};
/// let model = KEYS.iter().find(|k| k.name == "MODEL").unwrap();
/// assert_eq!(model.family, KeyFamily::Source);
/// assert_eq!(model.pattern(), "{SCOPE}__{PROVIDER}__{N}__MODEL");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyFamily {
    /// A field of one source: `{SCOPE}__{PROVIDER}__{N}__{NAME}`.
    Source,
    /// A scope-level key: `{SCOPE}__{NAME}`.
    Scope,
    /// A scope-level key only embeddings scopes (names starting with `EMBED`) take.
    EmbeddingsScope,
    /// A flat shorthand of the original library: a default for every scope.
    Shorthand,
    /// A runtime-wide key (backends, library knobs, the server).
    Global,
}

/// The kind of value a key takes; a bad value is refused naming the key, the value and this.
///
/// ```
/// use polygateway::config::keys::{ValueKind, KEYS};
/// let selector = KEYS.iter().find(|k| k.name == "SELECTOR").unwrap();
/// let ValueKind::Choice(words) = selector.value else { panic!() };
/// assert_eq!(words, ["health_aware", "round_robin", "least_inflight"]);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueKind {
    /// Any non-empty text (a URL, a model name, a path).
    Text,
    /// A secret (never shown in errors, logs or `Debug`).
    Secret,
    /// A Redis URL (a secret too; checked as the client will read it).
    RedisUrl,
    /// A non-negative number of seconds (`1`, `0.5`).
    Seconds,
    /// A positive number of seconds.
    PositiveSeconds,
    /// A non-negative whole number.
    Count,
    /// A whole number, possibly negative.
    Integer,
    /// A positive whole number.
    Positive,
    /// A finite number.
    Number,
    /// `true`, `false`, `1`, `0`, `yes`, `no`, `on`, `off`.
    Bool,
    /// One of these words (case-insensitive).
    Choice(&'static [&'static str]),
    /// A JSON object.
    JsonObject,
    /// A socket address (`127.0.0.1:8080`).
    Address,
    /// `alias=SCOPE` pairs separated by commas.
    Aliases,
    /// A spend budget: `<amount>/<hour|day|month>` (docs/behaviour.md §5.8).
    Budget,
    /// `tenant=<amount>/<hour|day|month>` pairs separated by commas.
    TenantBudgets,
}

/// One configuration key: the row of the configuration reference, and what the parser
/// reads.
///
/// ```
/// use polygateway::config::keys::{KeyFamily, ValueKind, KEYS};
/// let lease = KEYS.iter().find(|k| k.name == "PGW_LEASE_TTL_S").unwrap();
/// assert_eq!(lease.family, KeyFamily::Global);
/// assert_eq!(lease.value, ValueKind::Seconds);
/// assert_eq!(lease.default, "1500");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyDef {
    /// The key for global keys and shorthands; the suffix after the scope (and source) for the
    /// others, e.g. `RETRY__MAX_ATTEMPTS`, `BASE_URL`.
    pub name: &'static str,
    /// Where the key belongs.
    pub family: KeyFamily,
    /// What value it takes.
    pub value: ValueKind,
    /// What it means, one line (the configuration reference's "meaning" column).
    pub doc: &'static str,
    /// Its default in words (the configuration reference's "default" column): a value, `required`,
    /// or how it is derived.
    pub default: &'static str,
}

impl KeyDef {
    /// The key as a pattern, the way [`accepted_keys`] and the configuration reference spell it:
    /// `{SCOPE}__{PROVIDER}__{N}__{NAME}`, `{SCOPE}__{NAME}`, or the name itself.
    ///
    /// ```
    /// use polygateway::config::keys::KEYS;
    /// let patterns: Vec<String> = KEYS.iter().map(|k| k.pattern()).collect();
    /// assert!(patterns.contains(&"{SCOPE}__RETRY__MAX_ATTEMPTS".to_string()));
    /// assert!(patterns.contains(&"LLM_TIMEOUT".to_string()));
    /// ```
    pub fn pattern(&self) -> String {
        match self.family {
            KeyFamily::Source => format!("{{SCOPE}}__{{PROVIDER}}__{{N}}__{}", self.name),
            KeyFamily::Scope | KeyFamily::EmbeddingsScope => format!("{{SCOPE}}__{}", self.name),
            KeyFamily::Shorthand | KeyFamily::Global => self.name.to_string(),
        }
    }

    /// The full key of a scope key in scope `scope`, e.g. `LLM__RETRY__MAX_ATTEMPTS`.
    pub(crate) fn in_scope(&self, scope: &str) -> String {
        debug_assert!(matches!(
            self.family,
            KeyFamily::Scope | KeyFamily::EmbeddingsScope
        ));
        format!("{scope}__{}", self.name)
    }

    /// The full key of a source field, e.g. `LLM__QWEN__1__TIMEOUT_S` (provider upper-cased).
    pub(crate) fn in_source(&self, scope: &str, provider: &str, n: u32) -> String {
        debug_assert_eq!(self.family, KeyFamily::Source);
        format!(
            "{scope}__{}__{n}__{}",
            provider.to_ascii_uppercase(),
            self.name
        )
    }
}

/// Every accepted key, in the configuration reference's order.
///
/// ```
/// use polygateway::config::keys::{KeyFamily, KEYS};
/// assert!(KEYS.iter().any(|k| k.name == "PGW_CACHE_BACKEND" && k.family == KeyFamily::Global));
/// let embeddings_only: Vec<_> = KEYS
///     .iter()
///     .filter(|k| k.family == KeyFamily::EmbeddingsScope)
///     .map(|k| k.name)
///     .collect();
/// assert_eq!(embeddings_only, ["BATCH_SIZE", "NORMALIZE", "EXPECTED_DIM"]);
/// ```
pub const KEYS: &[KeyDef] = &[
    source::BASE_URL,
    source::API_KEY,
    source::MODEL,
    source::TIMEOUT_S,
    source::MAX_CONCURRENCY,
    source::RPM,
    source::TPM,
    source::EST_TOKENS,
    source::TTFT_TIMEOUT_S,
    source::INTER_TOKEN_TIMEOUT_S,
    source::ENABLE_THINKING,
    source::MISSING_DONE,
    source::TRUST_ENV,
    source::STREAM,
    source::POOL_IDLE_TIMEOUT_S,
    source::STRUCTURED_MODE,
    source::DIALECT,
    source::EXTRA_BODY,
    scope::GLOBAL_MAX_CONCURRENCY,
    scope::GLOBAL_RPM,
    scope::GLOBAL_TPM,
    scope::SELECTOR,
    scope::PACER,
    scope::PACER_START,
    scope::PACER_CEILING,
    scope::RETRY_MAX_ATTEMPTS,
    scope::RETRY_BACKOFF_BASE_S,
    scope::RETRY_BACKOFF_MAX_S,
    scope::BREAKER_FAIL_THRESHOLD,
    scope::BREAKER_COOLDOWN_S,
    scope::BREAKER_PROBE_TTL_S,
    scope::BREAKER_MIN_CALLS,
    scope::BREAKER_FAIL_RATE,
    scope::BREAKER_WINDOW_S,
    scope::BREAKER_MAX_COOLDOWN_S,
    scope::BACKPRESSURE_STALL_WINDOW_S,
    scope::BACKPRESSURE_POLL_INTERVAL_S,
    scope::BACKPRESSURE_BATCH_RESERVE,
    scope::HEDGE_ENABLED,
    scope::HEDGE_FLOOR_S,
    scope::HEDGE_CEILING_S,
    scope::HEDGE_BUDGET,
    scope::CONTINUE_ENABLED,
    scope::QUOTA_FULL,
    scope::CIRCUIT_OPEN,
    scope::BUDGET,
    scope::BATCH_SIZE,
    scope::NORMALIZE,
    scope::EXPECTED_DIM,
    shorthand::LLM_TIMEOUT,
    shorthand::LLM_MAX_RETRIES,
    shorthand::LLM_RETRY_BASE_DELAY,
    shorthand::LLM_RETRY_MAX_DELAY,
    shorthand::LLM_CIRCUIT_BREAKER_THRESHOLD,
    shorthand::LLM_CIRCUIT_BREAKER_COOLDOWN,
    shorthand::LLM_TTFT_TIMEOUT,
    shorthand::LLM_INTER_TOKEN_TIMEOUT,
    global::PGW_LIMITER_BACKEND,
    global::PGW_BREAKER_BACKEND,
    global::REDIS_URL,
    global::PGW_CACHE_BACKEND,
    global::PGW_CACHE_NAMESPACE,
    global::PGW_CACHE_TTL_S,
    global::PGW_TELEMETRY_BACKEND,
    global::PGW_TELEMETRY_SQLITE_PATH,
    global::PGW_TELEMETRY_PG_DSN,
    global::PGW_TELEMETRY_SCHEMA_MODE,
    global::PGW_TELEMETRY_TEXT_CAP,
    global::PGW_TELEMETRY_PG_POOL_MAX,
    global::PGW_TELEMETRY_PG_WRITE_TIMEOUT_S,
    global::PGW_PRICING_PATH,
    global::PGW_STRUCTURED_MAX_RETRIES,
    global::PGW_LEASE_TTL_S,
    global::PGW_TENANT_BUDGETS,
    global::PGW_SERVER_BIND,
    global::PGW_SERVER_BODY_LIMIT_BYTES,
    global::PGW_SERVER_REQUEST_TIMEOUT_S,
    global::PGW_SERVER_DRAIN_TIMEOUT_S,
    global::PGW_SERVER_KEYS_FILE,
    global::PGW_SERVER_MODEL_ALIASES,
    global::PGW_SERVER_PUBLIC_STATUS,
    global::PGW_SERVER_METRICS_TOKEN,
    global::PGW_SERVER_HEADER_TIMEOUT_S,
    global::PGW_SERVER_BODY_TIMEOUT_S,
    global::PGW_SERVER_BODY_MIN_BYTES_PER_S,
    global::PGW_SERVER_IDLE_TIMEOUT_S,
    global::PGW_SERVER_MAX_CONNECTIONS,
    global::PGW_SERVER_ADMIN_BIND,
    global::PGW_SERVER_WORKERS,
];

/// Bit of a family in a family mask (for the derived name lists below).
const fn bit(family: KeyFamily) -> u8 {
    1 << family as u8
}
const SOURCE: u8 = bit(KeyFamily::Source);
const SCOPE: u8 = bit(KeyFamily::Scope) | bit(KeyFamily::EmbeddingsScope);
const EMBEDDINGS: u8 = bit(KeyFamily::EmbeddingsScope);
const SHORTHAND: u8 = bit(KeyFamily::Shorthand);
const GLOBAL: u8 = bit(KeyFamily::Global);

/// How many keys of the families in `mask` the table has.
const fn count(mask: u8) -> usize {
    let mut i = 0;
    let mut n = 0;
    while i < KEYS.len() {
        if bit(KEYS[i].family) & mask != 0 {
            n += 1;
        }
        i += 1;
    }
    n
}

/// The names of the keys of the families in `mask`, in table order.
const fn names<const N: usize>(mask: u8) -> [&'static str; N] {
    let mut out = [""; N];
    let (mut i, mut j) = (0, 0);
    while i < KEYS.len() {
        if bit(KEYS[i].family) & mask != 0 {
            out[j] = KEYS[i].name;
            j += 1;
        }
        i += 1;
    }
    assert!(j == N);
    out
}

/// Source fields: the full key is `{SCOPE}__{PROVIDER}__{N}__{FIELD}`.
pub(crate) mod source {
    use super::KeyDef;
    use super::KeyFamily::*;
    use super::ValueKind::*;
    pub(crate) const BASE_URL: KeyDef = KeyDef {
        name: "BASE_URL",
        family: Source,
        value: Text,
        doc: "source endpoint, e.g. `https://api.openai.com/v1`",
        default: "required",
    };
    pub(crate) const API_KEY: KeyDef = KeyDef {
        name: "API_KEY",
        family: Source,
        value: Secret,
        doc: "bearer key (never logged)",
        default: "empty = no auth header",
    };
    pub(crate) const MODEL: KeyDef = KeyDef {
        name: "MODEL",
        family: Source,
        value: Text,
        doc: "model sent upstream",
        default: "required",
    };
    pub(crate) const TIMEOUT_S: KeyDef = KeyDef {
        name: "TIMEOUT_S",
        family: Source,
        value: Seconds,
        doc: "total deadline of one attempt",
        default: "60",
    };
    pub(crate) const MAX_CONCURRENCY: KeyDef = KeyDef {
        name: "MAX_CONCURRENCY",
        family: Source,
        value: Count,
        doc: "source concurrency gate",
        default: "0 = unlimited",
    };
    pub(crate) const RPM: KeyDef = KeyDef {
        name: "RPM",
        family: Source,
        value: Count,
        doc: "source requests per minute",
        default: "0 = unlimited",
    };
    pub(crate) const TPM: KeyDef = KeyDef {
        name: "TPM",
        family: Source,
        value: Count,
        doc: "source tokens per minute",
        default: "0 = unlimited",
    };
    pub(crate) const EST_TOKENS: KeyDef = KeyDef {
        name: "EST_TOKENS",
        family: Source,
        value: Integer,
        doc: "tokens pre-deducted per request",
        default: "`max(1, TPM/60)` when TPM > 0",
    };
    pub(crate) const TTFT_TIMEOUT_S: KeyDef = KeyDef {
        name: "TTFT_TIMEOUT_S",
        family: Source,
        value: Seconds,
        doc: "time to first token (content or reasoning)",
        default: "`min(30, TIMEOUT_S/2)`",
    };
    pub(crate) const INTER_TOKEN_TIMEOUT_S: KeyDef = KeyDef {
        name: "INTER_TOKEN_TIMEOUT_S",
        family: Source,
        value: Seconds,
        doc: "largest gap between tokens",
        default: "`min(15, TTFT/2)`",
    };
    pub(crate) const ENABLE_THINKING: KeyDef = KeyDef {
        name: "ENABLE_THINKING",
        family: Source,
        value: Bool,
        doc: "`true`/`false` inject the provider's thinking switch",
        default: "absent = inject nothing",
    };
    pub(crate) const MISSING_DONE: KeyDef = KeyDef {
        name: "MISSING_DONE",
        family: Source,
        value: Choice(&["retry", "salvage"]),
        doc: "stream without `[DONE]`: `retry` or `salvage`",
        default: "`retry`",
    };
    pub(crate) const TRUST_ENV: KeyDef = KeyDef {
        name: "TRUST_ENV",
        family: Source,
        value: Bool,
        doc: "honour proxy environment variables",
        default: "`true`",
    };
    pub(crate) const STREAM: KeyDef = KeyDef {
        name: "STREAM",
        family: Source,
        value: Bool,
        doc: "`false`: every chat attempt on this source is non-streaming (one JSON answer under `TIMEOUT_S`)",
        default: "`true`",
    };
    pub(crate) const POOL_IDLE_TIMEOUT_S: KeyDef = KeyDef {
        name: "POOL_IDLE_TIMEOUT_S",
        family: Source,
        value: Seconds,
        doc: "how long an idle pooled connection to the source is kept; lowered automatically (never raised) when the server answers a shorter `Keep-Alive: timeout=` (chat and embeddings; `SourceSnapshot::pool_idle_timeout` shows the value in force)",
        default: "4",
    };
    pub(crate) const STRUCTURED_MODE: KeyDef = KeyDef {
        name: "STRUCTURED_MODE",
        family: Source,
        value: Choice(&["json_schema", "json_object", "prompt"]),
        doc: "how typed calls send their schema to this source: `json_schema`, `json_object` or `prompt` (chat sources; ignored elsewhere)",
        default: "the provider's strongest mode",
    };
    pub(crate) const DIALECT: KeyDef = KeyDef {
        name: "DIALECT",
        family: Source,
        value: Choice(&["openai", "anthropic", "gemini"]),
        doc: "the wire protocol of a chat or embeddings source: `openai` (chat completions, `/embeddings`), `anthropic` (Messages API; chat only) or `gemini` (generateContent, batchEmbedContents)",
        default: "the provider's (`anthropic` and `gemini` speak their own, every other provider `openai`)",
    };
    pub(crate) const EXTRA_BODY: KeyDef = KeyDef {
        name: "EXTRA_BODY",
        family: Source,
        value: JsonObject,
        doc: "JSON object merged into each request (lowest priority)",
        default: "none",
    };
}

/// Scope keys: the full key is `{SCOPE}__{SUFFIX}`.
pub(crate) mod scope {
    use super::KeyDef;
    use super::KeyFamily::*;
    use super::ValueKind::*;

    pub(crate) const GLOBAL_MAX_CONCURRENCY: KeyDef = KeyDef {
        name: "GLOBAL__MAX_CONCURRENCY",
        family: Scope,
        value: Count,
        doc: "scope concurrency gate",
        default: "0 = unlimited",
    };
    pub(crate) const GLOBAL_RPM: KeyDef = KeyDef {
        name: "GLOBAL__RPM",
        family: Scope,
        value: Count,
        doc: "scope requests per minute",
        default: "0 = unlimited",
    };
    pub(crate) const GLOBAL_TPM: KeyDef = KeyDef {
        name: "GLOBAL__TPM",
        family: Scope,
        value: Count,
        doc: "scope tokens per minute",
        default: "0 = unlimited",
    };
    pub(crate) const SELECTOR: KeyDef = KeyDef {
        name: "SELECTOR",
        family: Scope,
        value: Choice(&["health_aware", "round_robin", "least_inflight"]),
        doc: "`health_aware`, `round_robin`, `least_inflight`",
        default: "`health_aware`",
    };
    pub(crate) const PACER: KeyDef = KeyDef {
        name: "PACER",
        family: Scope,
        value: Choice(&["adaptive", "aimd", "off"]),
        doc: "per-source concurrency pacer: `adaptive`, `aimd` (the original library's: start 8, ×0.5 on 429, +1/limit, ceiling max(64, MAX_CONCURRENCY)), `off` (only `MAX_CONCURRENCY` caps)",
        default: "`adaptive`",
    };
    pub(crate) const PACER_START: KeyDef = KeyDef {
        name: "PACER__START",
        family: Scope,
        value: Positive,
        doc: "the pacer's starting limit (adaptive: slow start from it instead of starting open)",
        default: "adaptive open (the ceiling, or none, until the first sign of strain), aimd 8",
    };
    pub(crate) const PACER_CEILING: KeyDef = KeyDef {
        name: "PACER__CEILING",
        family: Scope,
        value: Positive,
        doc: "the pacer's ceiling (a source's `MAX_CONCURRENCY` still caps it)",
        default: "adaptive none, aimd max(64, MAX_CONCURRENCY)",
    };
    pub(crate) const RETRY_MAX_ATTEMPTS: KeyDef = KeyDef {
        name: "RETRY__MAX_ATTEMPTS",
        family: Scope,
        value: Count,
        doc: "attempts per call, first included",
        default: "3",
    };
    pub(crate) const RETRY_BACKOFF_BASE_S: KeyDef = KeyDef {
        name: "RETRY__BACKOFF_BASE_S",
        family: Scope,
        value: Seconds,
        doc: "backoff base",
        default: "1.0",
    };
    pub(crate) const RETRY_BACKOFF_MAX_S: KeyDef = KeyDef {
        name: "RETRY__BACKOFF_MAX_S",
        family: Scope,
        value: Seconds,
        doc: "backoff cap",
        default: "30.0",
    };
    pub(crate) const BREAKER_FAIL_THRESHOLD: KeyDef = KeyDef {
        name: "BREAKER__FAIL_THRESHOLD",
        family: Scope,
        value: Count,
        doc: "consecutive failures (effective: `max(this, 2 × MAX_CONCURRENCY)`)",
        default: "5",
    };
    pub(crate) const BREAKER_COOLDOWN_S: KeyDef = KeyDef {
        name: "BREAKER__COOLDOWN_S",
        family: Scope,
        value: Seconds,
        doc: "base open duration",
        default: "30",
    };
    pub(crate) const BREAKER_PROBE_TTL_S: KeyDef = KeyDef {
        name: "BREAKER__PROBE_TTL_S",
        family: Scope,
        value: Seconds,
        doc: "half-open probe lease",
        default: "`max(2 × slowest timeout, cooldown, timeout + 5)`",
    };
    pub(crate) const BREAKER_MIN_CALLS: KeyDef = KeyDef {
        name: "BREAKER__MIN_CALLS",
        family: Scope,
        value: Count,
        doc: "samples before the rate channel may open",
        default: "10",
    };
    pub(crate) const BREAKER_FAIL_RATE: KeyDef = KeyDef {
        name: "BREAKER__FAIL_RATE",
        family: Scope,
        value: Number,
        doc: "failure rate that opens",
        default: "0.6",
    };
    pub(crate) const BREAKER_WINDOW_S: KeyDef = KeyDef {
        name: "BREAKER__WINDOW_S",
        family: Scope,
        value: Seconds,
        doc: "width of each of the two rate buckets",
        default: "30",
    };
    pub(crate) const BREAKER_MAX_COOLDOWN_S: KeyDef = KeyDef {
        name: "BREAKER__MAX_COOLDOWN_S",
        family: Scope,
        value: Seconds,
        doc: "cap of the growing open duration",
        default: "`max(300, cooldown)`",
    };
    pub(crate) const BACKPRESSURE_STALL_WINDOW_S: KeyDef = KeyDef {
        name: "BACKPRESSURE__STALL_WINDOW_S",
        family: Scope,
        value: Seconds,
        doc: "waiting without scope progress before `stalled`",
        default: "300",
    };
    pub(crate) const BACKPRESSURE_POLL_INTERVAL_S: KeyDef = KeyDef {
        name: "BACKPRESSURE__POLL_INTERVAL_S",
        family: Scope,
        value: Seconds,
        doc: "quota-wait polling",
        default: "1.0",
    };
    pub(crate) const BACKPRESSURE_BATCH_RESERVE: KeyDef = KeyDef {
        name: "BACKPRESSURE__BATCH_RESERVE",
        family: Scope,
        value: Number,
        doc: "share of each gate limit that batch calls leave to the higher classes, so \
              interactive calls get through gates that batch processes saturate (0 to 0.9)",
        default: "0.1 with a Redis limiter, else 0",
    };
    pub(crate) const HEDGE_ENABLED: KeyDef = KeyDef {
        name: "HEDGE__ENABLED",
        family: Scope,
        value: Bool,
        doc: "hedge first tokens: an attempt without a first token after its source's p95 time \
              to first token is sent to a second source too, the first to answer a token wins \
              (docs/behaviour.md §5.9)",
        default: "false",
    };
    pub(crate) const HEDGE_FLOOR_S: KeyDef = KeyDef {
        name: "HEDGE__FLOOR_S",
        family: Scope,
        value: Seconds,
        doc: "never hedge sooner than this after an attempt was sent",
        default: "0.25",
    };
    pub(crate) const HEDGE_CEILING_S: KeyDef = KeyDef {
        name: "HEDGE__CEILING_S",
        family: Scope,
        value: PositiveSeconds,
        doc: "hedge by then at the latest, and while a source's p95 is not known yet (20 first \
              tokens)",
        default: "5",
    };
    pub(crate) const HEDGE_BUDGET: KeyDef = KeyDef {
        name: "HEDGE__BUDGET",
        family: Scope,
        value: Number,
        doc: "hedges per attempt sent, at most (0 to 1): hedging never adds more than this \
              share of attempts",
        default: "0.05",
    };
    pub(crate) const CONTINUE_ENABLED: KeyDef = KeyDef {
        name: "CONTINUE__ENABLED",
        family: Scope,
        value: Bool,
        doc: "continue a streamed text answer cut after content on another source that takes a \
              prefill, spliced into the same stream (docs/behaviour.md §5.10)",
        default: "false",
    };
    pub(crate) const QUOTA_FULL: KeyDef = KeyDef {
        name: "QUOTA_FULL",
        family: Scope,
        value: Choice(&["wait", "fail_fast"]),
        doc: "`wait` or `fail_fast`",
        default: "`wait`",
    };
    pub(crate) const BUDGET: KeyDef = KeyDef {
        name: "BUDGET",
        family: Scope,
        value: Budget,
        doc: "spend budget of a chat scope: `<amount>/<hour\\|day\\|month>` in the pricing \
              currency, calendar windows in UTC (needs a price for every source's model)",
        default: "none",
    };
    pub(crate) const CIRCUIT_OPEN: KeyDef = KeyDef {
        name: "CIRCUIT_OPEN",
        family: Scope,
        value: Choice(&["fail_fast", "wait"]),
        doc: "`fail_fast` or `wait`",
        default: "`fail_fast`",
    };
    pub(crate) const BATCH_SIZE: KeyDef = KeyDef {
        name: "BATCH_SIZE",
        family: EmbeddingsScope,
        value: Positive,
        doc: "embeddings batch size",
        default: "required for embeddings scopes",
    };
    pub(crate) const NORMALIZE: KeyDef = KeyDef {
        name: "NORMALIZE",
        family: EmbeddingsScope,
        value: Bool,
        doc: "L2-normalise embeddings",
        default: "`false`",
    };
    pub(crate) const EXPECTED_DIM: KeyDef = KeyDef {
        name: "EXPECTED_DIM",
        family: EmbeddingsScope,
        value: Positive,
        doc: "embeddings dimension check",
        default: "none",
    };
}

/// Flat shorthands of the original library: defaults for every scope (scope and source keys win).
pub(crate) mod shorthand {
    use super::KeyDef;
    use super::KeyFamily::*;
    use super::ValueKind::*;

    pub(crate) const LLM_TIMEOUT: KeyDef = KeyDef {
        name: "LLM_TIMEOUT",
        family: Shorthand,
        value: Seconds,
        doc: "shorthand default of every scope's `TIMEOUT_S` (scope keys win)",
        default: "—",
    };
    pub(crate) const LLM_MAX_RETRIES: KeyDef = KeyDef {
        name: "LLM_MAX_RETRIES",
        family: Shorthand,
        value: Count,
        doc: "shorthand of `RETRY__MAX_ATTEMPTS`",
        default: "—",
    };
    pub(crate) const LLM_RETRY_BASE_DELAY: KeyDef = KeyDef {
        name: "LLM_RETRY_BASE_DELAY",
        family: Shorthand,
        value: Seconds,
        doc: "shorthand of `RETRY__BACKOFF_BASE_S`",
        default: "—",
    };
    pub(crate) const LLM_RETRY_MAX_DELAY: KeyDef = KeyDef {
        name: "LLM_RETRY_MAX_DELAY",
        family: Shorthand,
        value: Seconds,
        doc: "shorthand of `RETRY__BACKOFF_MAX_S`",
        default: "—",
    };
    pub(crate) const LLM_CIRCUIT_BREAKER_THRESHOLD: KeyDef = KeyDef {
        name: "LLM_CIRCUIT_BREAKER_THRESHOLD",
        family: Shorthand,
        value: Count,
        doc: "shorthand of `BREAKER__FAIL_THRESHOLD`",
        default: "—",
    };
    pub(crate) const LLM_CIRCUIT_BREAKER_COOLDOWN: KeyDef = KeyDef {
        name: "LLM_CIRCUIT_BREAKER_COOLDOWN",
        family: Shorthand,
        value: Seconds,
        doc: "shorthand of `BREAKER__COOLDOWN_S`",
        default: "—",
    };
    pub(crate) const LLM_TTFT_TIMEOUT: KeyDef = KeyDef {
        name: "LLM_TTFT_TIMEOUT",
        family: Shorthand,
        value: Seconds,
        doc: "shorthand of `TTFT_TIMEOUT_S`",
        default: "—",
    };
    pub(crate) const LLM_INTER_TOKEN_TIMEOUT: KeyDef = KeyDef {
        name: "LLM_INTER_TOKEN_TIMEOUT",
        family: Shorthand,
        value: Seconds,
        doc: "shorthand of `INTER_TOKEN_TIMEOUT_S`",
        default: "—",
    };
}

/// Runtime-wide keys (backends and library knobs).
pub(crate) mod global {
    use super::KeyDef;
    use super::KeyFamily::*;
    use super::ValueKind::*;

    pub(crate) const PGW_LIMITER_BACKEND: KeyDef = KeyDef {
        name: "PGW_LIMITER_BACKEND",
        family: Global,
        value: Choice(&["memory", "redis"]),
        doc: "`memory` or `redis`",
        default: "required",
    };
    pub(crate) const PGW_BREAKER_BACKEND: KeyDef = KeyDef {
        name: "PGW_BREAKER_BACKEND",
        family: Global,
        value: Choice(&["memory", "redis"]),
        doc: "`memory` or `redis`",
        default: "required",
    };
    pub(crate) const REDIS_URL: KeyDef = KeyDef {
        name: "REDIS_URL",
        family: Global,
        value: RedisUrl,
        doc: "Redis for `redis` backends and cache: `redis://`, `redis-cluster://`, `redis-sentinel://` (see Scaling out)",
        default: "required by them",
    };
    pub(crate) const PGW_CACHE_BACKEND: KeyDef = KeyDef {
        name: "PGW_CACHE_BACKEND",
        family: Global,
        value: Choice(&["none", "memory", "redis"]),
        doc: "`none`, `memory`, `redis`",
        default: "`none`",
    };
    pub(crate) const PGW_CACHE_NAMESPACE: KeyDef = KeyDef {
        name: "PGW_CACHE_NAMESPACE",
        family: Global,
        value: Text,
        doc: "cache namespace",
        default: "required when caching",
    };
    pub(crate) const PGW_CACHE_TTL_S: KeyDef = KeyDef {
        name: "PGW_CACHE_TTL_S",
        family: Global,
        value: Seconds,
        doc: "cache entry lifetime (> 0)",
        default: "required when caching",
    };
    pub(crate) const PGW_TELEMETRY_BACKEND: KeyDef = KeyDef {
        name: "PGW_TELEMETRY_BACKEND",
        family: Global,
        value: Choice(&["none", "sqlite", "postgres"]),
        doc: "`none`, `sqlite`, `postgres`",
        default: "`none`",
    };
    pub(crate) const PGW_TELEMETRY_SQLITE_PATH: KeyDef = KeyDef {
        name: "PGW_TELEMETRY_SQLITE_PATH",
        family: Global,
        value: Text,
        doc: "SQLite file",
        default: "required for `sqlite`",
    };
    pub(crate) const PGW_TELEMETRY_PG_DSN: KeyDef = KeyDef {
        name: "PGW_TELEMETRY_PG_DSN",
        family: Global,
        value: Secret,
        doc: "PostgreSQL DSN (password never logged)",
        default: "required for `postgres`",
    };
    pub(crate) const PGW_TELEMETRY_SCHEMA_MODE: KeyDef = KeyDef {
        name: "PGW_TELEMETRY_SCHEMA_MODE",
        family: Global,
        value: Choice(&["auto", "manual"]),
        doc: "`auto` (add missing columns) or `manual` (no DDL)",
        default: "SQLite `auto`, PostgreSQL `manual`",
    };
    pub(crate) const PGW_TELEMETRY_TEXT_CAP: KeyDef = KeyDef {
        name: "PGW_TELEMETRY_TEXT_CAP",
        family: Global,
        value: Positive,
        doc: "cut stored texts to N chars",
        default: "no cap",
    };
    pub(crate) const PGW_TELEMETRY_PG_POOL_MAX: KeyDef = KeyDef {
        name: "PGW_TELEMETRY_PG_POOL_MAX",
        family: Global,
        value: Positive,
        doc: "PostgreSQL pool size",
        default: "4",
    };
    pub(crate) const PGW_TELEMETRY_PG_WRITE_TIMEOUT_S: KeyDef = KeyDef {
        name: "PGW_TELEMETRY_PG_WRITE_TIMEOUT_S",
        family: Global,
        value: Seconds,
        doc: "hard budget of one write",
        default: "5.0",
    };
    pub(crate) const PGW_PRICING_PATH: KeyDef = KeyDef {
        name: "PGW_PRICING_PATH",
        family: Global,
        value: Text,
        doc: "pricing JSON file",
        default: "none (cost NULL)",
    };
    pub(crate) const PGW_STRUCTURED_MAX_RETRIES: KeyDef = KeyDef {
        name: "PGW_STRUCTURED_MAX_RETRIES",
        family: Global,
        value: Count,
        doc: "structured-output re-asks",
        default: "2",
    };
    pub(crate) const PGW_TENANT_BUDGETS: KeyDef = KeyDef {
        name: "PGW_TENANT_BUDGETS",
        family: Global,
        value: TenantBudgets,
        doc: "spend budgets per tenant (the call's `tenant_id`, across scopes): \
              `tenant=<amount>/<hour\\|day\\|month>`, comma separated",
        default: "none",
    };
    pub(crate) const PGW_LEASE_TTL_S: KeyDef = KeyDef {
        name: "PGW_LEASE_TTL_S",
        family: Global,
        value: Seconds,
        doc: "concurrency lease lifetime (≥ every `TIMEOUT_S`)",
        default: "1500",
    };
    pub(crate) const PGW_SERVER_BIND: KeyDef = KeyDef {
        name: "PGW_SERVER_BIND",
        family: Global,
        value: Address,
        doc: "`polygateway serve`: listening address and port",
        default: "`127.0.0.1:8080`",
    };
    pub(crate) const PGW_SERVER_BODY_LIMIT_BYTES: KeyDef = KeyDef {
        name: "PGW_SERVER_BODY_LIMIT_BYTES",
        family: Global,
        value: Positive,
        doc: "largest request body (413 above)",
        default: "33554432 (32 MiB)",
    };
    pub(crate) const PGW_SERVER_REQUEST_TIMEOUT_S: KeyDef = KeyDef {
        name: "PGW_SERVER_REQUEST_TIMEOUT_S",
        family: Global,
        value: PositiveSeconds,
        doc: "longest one request may run, streamed or not (> 0)",
        default: "600",
    };
    pub(crate) const PGW_SERVER_DRAIN_TIMEOUT_S: KeyDef = KeyDef {
        name: "PGW_SERVER_DRAIN_TIMEOUT_S",
        family: Global,
        value: PositiveSeconds,
        doc: "on shutdown, how long requests in flight may finish (> 0)",
        default: "30",
    };
    pub(crate) const PGW_SERVER_KEYS_FILE: KeyDef = KeyDef {
        name: "PGW_SERVER_KEYS_FILE",
        family: Global,
        value: Text,
        doc: "JSON file of virtual keys (see Run as a server)",
        default: "required by `serve`",
    };
    pub(crate) const PGW_SERVER_MODEL_ALIASES: KeyDef = KeyDef {
        name: "PGW_SERVER_MODEL_ALIASES",
        family: Global,
        value: Aliases,
        doc: "`alias=SCOPE,…`: request `model` names besides the scope names",
        default: "none",
    };
    pub(crate) const PGW_SERVER_PUBLIC_STATUS: KeyDef = KeyDef {
        name: "PGW_SERVER_PUBLIC_STATUS",
        family: Global,
        value: Bool,
        doc:
            "`true`: the status page and `/status.json` show key and tenant names, spend, budgets \
              and error text without an admin key (loopback-only setups)",
        default: "`false` (an admin key is needed)",
    };
    pub(crate) const PGW_SERVER_METRICS_TOKEN: KeyDef = KeyDef {
        name: "PGW_SERVER_METRICS_TOKEN",
        family: Global,
        value: Secret,
        doc: "bearer token `GET /metrics` requires (Prometheus bearer auth; never logged)",
        default: "none (`/metrics` open)",
    };
    pub(crate) const PGW_SERVER_HEADER_TIMEOUT_S: KeyDef = KeyDef {
        name: "PGW_SERVER_HEADER_TIMEOUT_S",
        family: Global,
        value: PositiveSeconds,
        doc: "a request's headers must arrive whole within this, from its first byte (or from the connection's start); else the connection is closed",
        default: "10",
    };
    pub(crate) const PGW_SERVER_BODY_TIMEOUT_S: KeyDef = KeyDef {
        name: "PGW_SERVER_BODY_TIMEOUT_S",
        family: Global,
        value: PositiveSeconds,
        doc: "a request body's grace: it must have arrived by this plus its size at `PGW_SERVER_BODY_MIN_BYTES_PER_S`; else the connection is closed",
        default: "20",
    };
    pub(crate) const PGW_SERVER_BODY_MIN_BYTES_PER_S: KeyDef = KeyDef {
        name: "PGW_SERVER_BODY_MIN_BYTES_PER_S",
        family: Global,
        value: Positive,
        doc: "the slowest request body accepted past its grace, bytes per second",
        default: "1024",
    };
    pub(crate) const PGW_SERVER_IDLE_TIMEOUT_S: KeyDef = KeyDef {
        name: "PGW_SERVER_IDLE_TIMEOUT_S",
        family: Global,
        value: PositiveSeconds,
        doc: "how long a keep-alive connection may wait for its next request",
        default: "60",
    };
    pub(crate) const PGW_SERVER_MAX_CONNECTIONS: KeyDef = KeyDef {
        name: "PGW_SERVER_MAX_CONNECTIONS",
        family: Global,
        value: Positive,
        doc: "open client connections at most; past it a new one is closed at once",
        default:
            "¾ of the open-file limit (raised to its hard limit at start), at most the limit − 256",
    };
    pub(crate) const PGW_SERVER_WORKERS: KeyDef = KeyDef {
        name: "PGW_SERVER_WORKERS",
        family: Global,
        value: Positive,
        doc: "threads that run `serve`'s requests and the runtime; fewer when the host's cores are shared with the clients or the upstreams",
        default: "the cores available to the process",
    };
    pub(crate) const PGW_SERVER_ADMIN_BIND: KeyDef = KeyDef {
        name: "PGW_SERVER_ADMIN_BIND",
        family: Global,
        value: Address,
        doc: "a second listener serving only `/healthz`, `/readyz` and `/metrics`, with its own 64 connections, so they answer while the main listener is at its cap",
        default: "none",
    };
}

/// Fields of a source key `{SCOPE}__{PROVIDER}__{N}__{FIELD}` (derived from [`KEYS`]).
///
/// ```
/// use polygateway::config::{ConfigError, Settings, SOURCE_FIELDS};
/// # use std::collections::BTreeMap;
/// # fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
/// #     pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
/// # }
/// assert!(SOURCE_FIELDS.contains(&"BASE_URL"));
/// // A misspelt field is refused, and the error lists the accepted fields.
/// let err = Settings::from_map(&env(&[("LLM__QWEN__1__BASEURL", "https://x.invalid")]))
///     .unwrap_err();
/// let ConfigError::UnknownKey { allowed, .. } = err else { panic!("{err}") };
/// assert_eq!(allowed, SOURCE_FIELDS.join(", "));
/// ```
pub const SOURCE_FIELDS: [&str; count(SOURCE)] = names(SOURCE);

/// Scope-level key suffixes: the full key is `{SCOPE}__{SUFFIX}` (derived from [`KEYS`]). The
/// last three are only valid in embeddings scopes.
///
/// ```
/// use polygateway::config::{Settings, SCOPE_KEYS};
/// # use std::collections::BTreeMap;
/// # fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
/// #     pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
/// # }
/// assert!(SCOPE_KEYS.contains(&"RETRY__MAX_ATTEMPTS"));
/// let settings = Settings::from_map(&env(&[
///     ("PGW_LIMITER_BACKEND", "memory"),
///     ("PGW_BREAKER_BACKEND", "memory"),
///     ("LLM__QWEN__1__BASE_URL", "https://example.invalid/v1"),
///     ("LLM__QWEN__1__MODEL", "qwen-plus"),
///     ("LLM__RETRY__MAX_ATTEMPTS", "5"),
/// ]))
/// .unwrap();
/// assert_eq!(settings.scope("LLM").unwrap().retry.max_attempts, 5);
/// ```
pub const SCOPE_KEYS: [&str; count(SCOPE)] = names(SCOPE);

/// Scope-key suffixes valid only in embeddings scopes (derived from [`KEYS`]).
///
/// ```
/// use polygateway::config::{ConfigError, Settings, EMBEDDING_SCOPE_KEYS};
/// # use std::collections::BTreeMap;
/// # fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
/// #     pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
/// # }
/// assert!(EMBEDDING_SCOPE_KEYS.contains(&"BATCH_SIZE"));
/// // `LLM` is a chat scope, so an embeddings-only key is refused there.
/// let err = Settings::from_map(&env(&[
///     ("PGW_LIMITER_BACKEND", "memory"),
///     ("PGW_BREAKER_BACKEND", "memory"),
///     ("LLM__QWEN__1__BASE_URL", "https://example.invalid/v1"),
///     ("LLM__QWEN__1__MODEL", "qwen-plus"),
///     ("LLM__BATCH_SIZE", "32"),
/// ]))
/// .unwrap_err();
/// assert!(matches!(err, ConfigError::WrongScopeKind { kind: "chat", .. }), "{err}");
/// ```
pub const EMBEDDING_SCOPE_KEYS: [&str; count(EMBEDDINGS)] = names(EMBEDDINGS);

/// Second segments that introduce a scope-key group (`{SCOPE}__{GROUP}__{FIELD}`); they can never
/// be provider names. (A test checks they are exactly the groups of [`SCOPE_KEYS`].)
pub(crate) const SCOPE_KEY_GROUPS: [&str; 7] = [
    "GLOBAL",
    "PACER",
    "RETRY",
    "BREAKER",
    "BACKPRESSURE",
    "HEDGE",
    "CONTINUE",
];

/// Flat shorthands: defaults for every scope (scope and source keys win; derived from [`KEYS`]).
///
/// ```
/// use std::time::Duration;
/// use polygateway::config::{Settings, SHORTHAND_KEYS};
/// # use std::collections::BTreeMap;
/// # fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
/// #     pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
/// # }
/// assert!(SHORTHAND_KEYS.contains(&"LLM_TIMEOUT"));
/// let settings = Settings::from_map(&env(&[
///     ("PGW_LIMITER_BACKEND", "memory"),
///     ("PGW_BREAKER_BACKEND", "memory"),
///     ("LLM_TIMEOUT", "20"),
///     ("VLM__QWEN__1__BASE_URL", "https://example.invalid/v1"),
///     ("VLM__QWEN__1__MODEL", "qwen-vl"),
///     ("VLM__QWEN__2__BASE_URL", "https://example.invalid/v1"),
///     ("VLM__QWEN__2__MODEL", "qwen-vl"),
///     ("VLM__QWEN__2__TIMEOUT_S", "90"),
/// ]))
/// .unwrap();
/// // The shorthand applies to every scope (not only `LLM`); a source key wins over it.
/// let vlm = settings.scope("VLM").unwrap();
/// assert_eq!(vlm.sources[0].timeout, Duration::from_secs(20));
/// assert_eq!(vlm.sources[1].timeout, Duration::from_secs(90));
/// ```
pub const SHORTHAND_KEYS: [&str; count(SHORTHAND)] = names(SHORTHAND);

/// Runtime-wide keys (backends and library knobs; derived from [`KEYS`]). Any other `PGW_*` key
/// is an error.
///
/// ```
/// use polygateway::config::keys::GLOBAL_PREFIX;
/// use polygateway::config::GLOBAL_KEYS;
/// assert!(GLOBAL_KEYS.contains(&"PGW_LIMITER_BACKEND"));
/// // All but `REDIS_URL` live in the library's reserved namespace.
/// let outside: Vec<_> = GLOBAL_KEYS.iter().filter(|k| !k.starts_with(GLOBAL_PREFIX)).collect();
/// assert_eq!(outside, [&"REDIS_URL"]);
/// ```
pub const GLOBAL_KEYS: [&str; count(GLOBAL)] = names(GLOBAL);

/// Prefix reserved for the library's global keys.
///
/// ```
/// use polygateway::config::keys::GLOBAL_PREFIX;
/// use polygateway::config::{ConfigError, Settings};
/// # use std::collections::BTreeMap;
/// # fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
/// #     pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
/// # }
/// assert_eq!(GLOBAL_PREFIX, "PGW_");
/// // A typo in a library key fails loudly instead of being ignored.
/// let err = Settings::from_map(&env(&[("PGW_CACHE_BAKEND", "memory")])).unwrap_err();
/// let ConfigError::UnknownKey { key, .. } = err else { panic!("{err}") };
/// assert_eq!(key, "PGW_CACHE_BAKEND");
/// ```
pub const GLOBAL_PREFIX: &str = "PGW_";

/// Every accepted key as a pattern ([`KeyDef::pattern`] of each row of [`KEYS`]):
/// `{SCOPE}__{PROVIDER}__{N}__{FIELD}` for each source field, `{SCOPE}__{SUFFIX}` for each scope
/// key, then the shorthands and the global keys verbatim.
///
/// ```
/// let keys = polygateway::config::accepted_keys();
/// assert!(keys.contains(&"{SCOPE}__{PROVIDER}__{N}__BASE_URL".to_string()));
/// assert!(keys.contains(&"{SCOPE}__RETRY__MAX_ATTEMPTS".to_string()));
/// assert!(keys.contains(&"PGW_LEASE_TTL_S".to_string()));
/// ```
pub fn accepted_keys() -> Vec<String> {
    KEYS.iter().map(KeyDef::pattern).collect()
}

/// The descriptor of key `name` among the families in `mask`.
fn find(mask: u8, name: &str) -> Option<&'static KeyDef> {
    KEYS.iter()
        .find(|k| bit(k.family) & mask != 0 && k.name == name)
}

/// The source field called `name`.
pub(crate) fn source_field(name: &str) -> Option<&'static KeyDef> {
    find(SOURCE, name)
}

/// The scope key with suffix `suffix` (embeddings-only keys included).
pub(crate) fn scope_key(suffix: &str) -> Option<&'static KeyDef> {
    find(SCOPE, suffix)
}

/// The shorthand called `name`.
pub(crate) fn shorthand(name: &str) -> Option<&'static KeyDef> {
    find(SHORTHAND, name)
}

/// The global key called `name`.
pub(crate) fn global_key(name: &str) -> Option<&'static KeyDef> {
    find(GLOBAL, name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn the_table_has_no_duplicates_and_the_groups_are_the_scope_key_prefixes() {
        let all = accepted_keys();
        let set: BTreeSet<_> = all.iter().collect();
        assert_eq!(set.len(), all.len());
        let groups: BTreeSet<&str> = SCOPE_KEYS
            .iter()
            .filter_map(|k| Some(k.split_once("__")?.0))
            .chain(
                SCOPE_KEYS
                    .iter()
                    .copied()
                    .filter(|k| SCOPE_KEY_GROUPS.contains(k)),
            )
            .collect();
        assert_eq!(groups, SCOPE_KEY_GROUPS.into_iter().collect());
        for key in EMBEDDING_SCOPE_KEYS {
            assert!(SCOPE_KEYS.contains(&key));
        }
    }

    #[test]
    fn every_row_is_documented_and_every_choice_has_words() {
        for key in KEYS {
            assert!(!key.doc.is_empty() && !key.default.is_empty(), "{key:?}");
            if let ValueKind::Choice(words) = key.value {
                assert!(words.len() >= 2, "{key:?}");
            }
        }
    }

    /// The default column says what `defaults` (and so the parser and the `Default` impls) fill
    /// in.
    #[test]
    fn the_default_column_matches_the_typed_defaults() {
        use super::super::defaults as d;
        let numbers: [(&KeyDef, f64); 20] = [
            (&scope::HEDGE_FLOOR_S, d::HEDGE_FLOOR_S),
            (&scope::HEDGE_CEILING_S, d::HEDGE_CEILING_S),
            (&scope::HEDGE_BUDGET, d::HEDGE_BUDGET),
            (&source::TIMEOUT_S, d::TIMEOUT_S),
            (&source::POOL_IDLE_TIMEOUT_S, d::POOL_IDLE_TIMEOUT_S),
            (&scope::RETRY_MAX_ATTEMPTS, f64::from(d::MAX_ATTEMPTS)),
            (&scope::RETRY_BACKOFF_BASE_S, d::BACKOFF_BASE_S),
            (&scope::RETRY_BACKOFF_MAX_S, d::BACKOFF_MAX_S),
            (&scope::BREAKER_FAIL_THRESHOLD, f64::from(d::FAIL_THRESHOLD)),
            (&scope::BREAKER_COOLDOWN_S, d::COOLDOWN_S),
            (&scope::BREAKER_MIN_CALLS, f64::from(d::MIN_CALLS)),
            (&scope::BREAKER_FAIL_RATE, d::FAIL_RATE),
            (&scope::BREAKER_WINDOW_S, d::WINDOW_S),
            (&scope::BACKPRESSURE_STALL_WINDOW_S, d::STALL_WINDOW_S),
            (&scope::BACKPRESSURE_POLL_INTERVAL_S, d::POLL_INTERVAL_S),
            (&global::PGW_TELEMETRY_PG_POOL_MAX, d::PG_POOL_MAX as f64),
            (
                &global::PGW_TELEMETRY_PG_WRITE_TIMEOUT_S,
                d::PG_WRITE_TIMEOUT_S,
            ),
            (
                &global::PGW_STRUCTURED_MAX_RETRIES,
                f64::from(d::STRUCTURED_MAX_RETRIES),
            ),
            (&global::PGW_LEASE_TTL_S, d::LEASE_TTL_S),
            (
                &global::PGW_SERVER_REQUEST_TIMEOUT_S,
                d::SERVER_REQUEST_TIMEOUT_S,
            ),
        ];
        for (key, value) in numbers {
            let shown: f64 = key
                .default
                .split_whitespace()
                .next()
                .unwrap()
                .parse()
                .unwrap();
            assert_eq!(
                shown, value,
                "{}: default column {:?}",
                key.name, key.default
            );
        }
        let body: usize = global::PGW_SERVER_BODY_LIMIT_BYTES
            .default
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(body, d::SERVER_BODY_LIMIT_BYTES);
        let drain: f64 = global::PGW_SERVER_DRAIN_TIMEOUT_S.default.parse().unwrap();
        assert_eq!(drain, d::SERVER_DRAIN_TIMEOUT_S);
        for (key, value) in [
            (
                &global::PGW_SERVER_HEADER_TIMEOUT_S,
                d::SERVER_HEADER_TIMEOUT_S,
            ),
            (&global::PGW_SERVER_BODY_TIMEOUT_S, d::SERVER_BODY_TIMEOUT_S),
            (&global::PGW_SERVER_IDLE_TIMEOUT_S, d::SERVER_IDLE_TIMEOUT_S),
        ] {
            assert_eq!(key.default.parse::<f64>().unwrap(), value, "{}", key.name);
        }
        let rate: usize = global::PGW_SERVER_BODY_MIN_BYTES_PER_S
            .default
            .parse()
            .unwrap();
        assert_eq!(rate, d::SERVER_BODY_MIN_BYTES_PER_S);
        assert!(source::TTFT_TIMEOUT_S
            .default
            .contains(&format!("min({}", d::TTFT_TIMEOUT_S)));
        assert!(source::INTER_TOKEN_TIMEOUT_S
            .default
            .contains(&format!("min({}", d::INTER_TOKEN_TIMEOUT_S)));
        assert!(scope::BREAKER_MAX_COOLDOWN_S
            .default
            .contains(&format!("max({}", d::MAX_COOLDOWN_FLOOR_S)));
    }
}

#[cfg(test)]
mod examples {
    //! Usage cases of crate-private items (they were doc examples while the items were public).

    #[test]
    fn scope_key_groups_example() {
        use crate::config::keys::SCOPE_KEY_GROUPS;
        use crate::config::{ConfigError, Settings};
        use std::collections::BTreeMap;
        fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        }
        assert!(SCOPE_KEY_GROUPS.contains(&"RETRY"));
        // `RETRY` cannot be read as a provider name, even in a source-shaped key.
        let err = Settings::from_map(&env(&[("LLM__RETRY__1__MODEL", "m")])).unwrap_err();
        assert!(matches!(err, ConfigError::UnknownKey { .. }), "{err}");
    }
}
