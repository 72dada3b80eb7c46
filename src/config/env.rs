//! Parsing [`Settings`] from environment variables and a `.env` file (docs/behaviour.md §3).
//!
//! Key families (full list: [`super::accepted_keys`], documented in `.env.example`):
//!
//! - `{SCOPE}__{PROVIDER}__{N}__{FIELD}`: one source; its name is `{provider}_{n}` lower-case.
//! - `{SCOPE}__{SUFFIX}`: scope-level knobs (`GLOBAL__*`, `SELECTOR`, `RETRY__*`, `BREAKER__*`,
//!   `BACKPRESSURE__*`, `QUOTA_FULL`, `CIRCUIT_OPEN`, `BUDGET`, `BATCH_SIZE`, `NORMALIZE`,
//!   `EXPECTED_DIM`).
//! - `LLM_TIMEOUT`, `LLM_MAX_RETRIES`, …: flat shorthands, defaults for *every* scope; a scope or
//!   source key wins over them.
//! - `PGW_*` and `REDIS_URL`: runtime-wide backends and knobs.
//!
//! Scopes are discovered from keys: any first segment matching `[A-Z][A-Z0-9_]*` followed by
//! `__` names a scope. Its kind follows from the name: `OCR` or `OCR_*` → OCR, a name starting
//! with `EMBED` → embeddings, anything else → chat. Keys outside these families are ignored
//! (the process environment holds many unrelated variables), except that every `PGW_*` key and
//! every `{SCOPE}__…` key must be known: a typo fails loudly, naming the key and what is allowed.
//! Empty values count as unset. After parsing, the assembly guards ([`super::guards`]) run.
//!
//! Not for: reading the environment anywhere else. Components get [`Settings`] values; nothing
//! inside the runtime reads environment variables.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use super::defaults;
use super::error::ConfigError;
use super::keys::{
    EMBEDDING_SCOPE_KEYS, GLOBAL_KEYS, GLOBAL_PREFIX, SCOPE_KEYS, SCOPE_KEY_GROUPS, SHORTHAND_KEYS,
    SOURCE_FIELDS,
};
use super::settings::*;
use super::ServerSettings;
use crate::structured::StructuredMode;
use crate::validate::shorten;

/// Placeholder shown instead of a secret value.
const HIDDEN: &str = "(value hidden: it may hold a secret)";

/// The `REDIS_URL` forms the Redis client accepts (README "Scaling out").
const REDIS_URL_FORMS: &str = "one server redis://[:password@]host:6379[/db], \
    a cluster redis-cluster://[:password@]host:7000[?node=host:7001&node=...], \
    or a sentinel-managed primary \
    redis-sentinel://[:password@]host:26379[/db]?sentinelServiceName=NAME[&node=host:26380...] \
    (valkey, valkey-cluster and valkey-sentinel are the same)";

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

impl Settings {
    /// Parse the process environment plus `./.env` (current directory only; a missing file is
    /// fine). A variable set in the environment wins over the same key in `.env`. The process
    /// environment is only read, never modified.
    ///
    /// ```no_run
    /// # fn demo() -> Result<(), polygateway::config::ConfigError> {
    /// use polygateway::config::Settings;
    /// // e.g. with LLM__OPENAI__1__BASE_URL, …__MODEL and the PGW_*_BACKEND keys exported.
    /// let settings = Settings::from_env()?;
    /// let llm = settings.scope("LLM")?;
    /// println!("{} source(s) in {}", llm.sources.len(), llm.name);
    /// # Ok(()) }
    /// ```
    pub fn from_env() -> Result<Self, ConfigError> {
        let env: BTreeMap<String, String> = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect();
        let dotenv = Path::new(".env");
        Self::from_env_with(dotenv.is_file().then_some(dotenv), &env)
    }

    /// Parse `env` layered over the `.env` file at `dotenv` (if given; it must exist). Keys in
    /// `env` win. This is the seam [`Settings::from_env`] uses, so tests need not touch the
    /// process environment.
    ///
    /// ```
    /// use std::collections::BTreeMap;
    /// use polygateway::config::Settings;
    /// let dir = tempfile::tempdir().unwrap();
    /// let dotenv = dir.path().join(".env");
    /// std::fs::write(
    ///     &dotenv,
    ///     "PGW_LIMITER_BACKEND=memory\n\
    ///      PGW_BREAKER_BACKEND=memory\n\
    ///      LLM__QWEN__1__BASE_URL=https://example.invalid/v1\n\
    ///      LLM__QWEN__1__MODEL=qwen-plus\n",
    /// )
    /// .unwrap();
    /// // The given variables win over the file.
    /// let env = BTreeMap::from([("LLM__QWEN__1__MODEL".to_string(), "qwen-max".to_string())]);
    /// let settings = Settings::from_env_with(Some(&dotenv), &env).unwrap();
    /// let source = &settings.scope("LLM").unwrap().sources[0];
    /// assert_eq!(source.base_url, "https://example.invalid/v1");
    /// assert_eq!(source.model, "qwen-max");
    /// ```
    pub fn from_env_with(
        dotenv: Option<&Path>,
        env: &BTreeMap<String, String>,
    ) -> Result<Self, ConfigError> {
        let mut merged = match dotenv {
            Some(path) => read_dotenv(path)?,
            None => BTreeMap::new(),
        };
        merged.extend(env.iter().map(|(k, v)| (k.clone(), v.clone())));
        Self::from_map(&merged)
    }

    /// Parse settings from a key → value map, then run the assembly guards.
    ///
    /// ```
    /// use std::collections::BTreeMap;
    /// use polygateway::config::Settings;
    /// let map: BTreeMap<String, String> = [
    ///     ("LLM__QWEN__1__BASE_URL", "https://example.invalid/v1"),
    ///     ("LLM__QWEN__1__API_KEY", "sk-test"),
    ///     ("LLM__QWEN__1__MODEL", "qwen-plus"),
    ///     ("PGW_LIMITER_BACKEND", "memory"),
    ///     ("PGW_BREAKER_BACKEND", "memory"),
    /// ]
    /// .into_iter()
    /// .map(|(k, v)| (k.to_string(), v.to_string()))
    /// .collect();
    /// let settings = Settings::from_map(&map).unwrap();
    /// let llm = settings.scope("LLM").unwrap();
    /// assert_eq!(llm.sources[0].name, "qwen_1");
    /// assert_eq!(llm.retry.max_attempts, 3);
    /// ```
    pub fn from_map(map: &BTreeMap<String, String>) -> Result<Self, ConfigError> {
        let settings = parse(map, Rules::Runtime)?;
        super::guards::check(&settings)?;
        Ok(settings)
    }

    /// [`Settings::from_env_with`] under the original Python library's assembly rules, which the
    /// Python package uses (docs/behaviour.md §3.4): `PGW_CACHE_BACKEND`,
    /// `PGW_TELEMETRY_BACKEND` and each source's `API_KEY` and `TIMEOUT_S` (or `LLM_TIMEOUT`)
    /// are required instead of defaulted, and a source gets no streaming watchdog of its own
    /// unless its `TTFT_TIMEOUT_S` / `INTER_TOKEN_TIMEOUT_S` (or `LLM_TTFT_TIMEOUT` /
    /// `LLM_INTER_TOKEN_TIMEOUT`) are set — both, as the original pairs them. Without them its
    /// deadlines are its `TIMEOUT_S`.
    ///
    /// ```
    /// use std::collections::BTreeMap;
    /// use polygateway::config::{ConfigError, Settings};
    /// let mut env: BTreeMap<String, String> = [
    ///     ("LLM__QWEN__1__BASE_URL", "https://example.invalid/v1"),
    ///     ("LLM__QWEN__1__API_KEY", "sk-test"),
    ///     ("LLM__QWEN__1__MODEL", "qwen-plus"),
    ///     ("LLM__QWEN__1__TIMEOUT_S", "4"),
    ///     ("PGW_LIMITER_BACKEND", "memory"),
    ///     ("PGW_BREAKER_BACKEND", "memory"),
    ///     ("PGW_TELEMETRY_BACKEND", "none"),
    /// ]
    /// .into_iter()
    /// .map(|(k, v)| (k.to_string(), v.to_string()))
    /// .collect();
    /// // The runtime's rules default the cache backend; the original's refuse, naming the key.
    /// assert!(Settings::from_map(&env).is_ok());
    /// let err = Settings::from_env_original(None, &env).unwrap_err();
    /// assert!(matches!(&err, ConfigError::Missing { key, .. } if key == "PGW_CACHE_BACKEND"));
    /// env.insert("PGW_CACHE_BACKEND".into(), "none".into());
    /// let settings = Settings::from_env_original(None, &env).unwrap();
    /// // No TTFT / inter-token keys: no watchdog, the 4 s total limit is the only deadline.
    /// let source = &settings.scope("LLM").unwrap().sources[0];
    /// assert_eq!(source.ttft_timeout, source.timeout);
    /// assert_eq!(source.inter_token_timeout, source.timeout);
    /// ```
    pub fn from_env_original(
        dotenv: Option<&Path>,
        env: &BTreeMap<String, String>,
    ) -> Result<Self, ConfigError> {
        let mut merged = match dotenv {
            Some(path) => read_dotenv(path)?,
            None => BTreeMap::new(),
        };
        merged.extend(env.iter().map(|(k, v)| (k.clone(), v.clone())));
        let settings = parse(&merged, Rules::Original)?;
        super::guards::check(&settings)?;
        Ok(settings)
    }

    /// The scope called `name` (case-insensitive; scope names are upper-case).
    ///
    /// ```
    /// use std::collections::BTreeMap;
    /// use polygateway::config::{ConfigError, Settings};
    /// # let map: BTreeMap<String, String> = [
    /// #     ("PGW_LIMITER_BACKEND", "memory"),
    /// #     ("PGW_BREAKER_BACKEND", "memory"),
    /// #     ("LLM__QWEN__1__BASE_URL", "https://example.invalid/v1"),
    /// #     ("LLM__QWEN__1__MODEL", "qwen-plus"),
    /// # ]
    /// # .into_iter()
    /// # .map(|(k, v)| (k.to_string(), v.to_string()))
    /// # .collect();
    /// // `map` configures one source in scope `LLM`.
    /// let settings = Settings::from_map(&map).unwrap();
    /// assert_eq!(settings.scope("llm").unwrap().name, "LLM");
    /// let err = settings.scope("VLM").unwrap_err();
    /// assert!(
    ///     matches!(&err, ConfigError::UnknownScope { available, .. } if available == "LLM"),
    ///     "{err}"
    /// );
    /// ```
    pub fn scope(&self, name: &str) -> Result<&ScopeSettings, ConfigError> {
        self.scopes
            .get(&name.to_ascii_uppercase())
            .ok_or_else(|| ConfigError::UnknownScope {
                scope: name.to_string(),
                available: if self.scopes.is_empty() {
                    "none".to_string()
                } else {
                    self.scopes.keys().cloned().collect::<Vec<_>>().join(", ")
                },
            })
    }

    /// Run the assembly guards on settings built by hand (the env path runs them already).
    ///
    /// ```
    /// use std::collections::BTreeMap;
    /// use std::time::Duration;
    /// use polygateway::config::{ConfigError, Settings};
    /// # let map: BTreeMap<String, String> = [
    /// #     ("PGW_LIMITER_BACKEND", "memory"),
    /// #     ("PGW_BREAKER_BACKEND", "memory"),
    /// #     ("LLM__QWEN__1__BASE_URL", "https://example.invalid/v1"),
    /// #     ("LLM__QWEN__1__MODEL", "qwen-plus"),
    /// # ]
    /// # .into_iter()
    /// # .map(|(k, v)| (k.to_string(), v.to_string()))
    /// # .collect();
    /// // `map` configures source `qwen_1` in scope `LLM` with the default 60 s timeout.
    /// let mut settings = Settings::from_map(&map).unwrap();
    /// assert_eq!(settings.validate(), Ok(()));
    /// // A concurrency lease must outlive the request, so a 30 s lease TTL is refused.
    /// settings.lease_ttl = Duration::from_secs(30);
    /// let err = settings.validate().unwrap_err();
    /// assert!(
    ///     matches!(&err, ConfigError::Guard { key, .. } if key == "LLM__QWEN__1__TIMEOUT_S"),
    ///     "{err}"
    /// );
    /// ```
    pub fn validate(&self) -> Result<(), ConfigError> {
        super::guards::check(self)
    }
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

/// Read a `.env` file into a map with dotenvy's iterator (the process env is not modified).
fn read_dotenv(path: &Path) -> Result<BTreeMap<String, String>, ConfigError> {
    let shown = path.display().to_string();
    let iter = dotenvy::from_path_iter(path).map_err(|e| ConfigError::DotEnv {
        path: shown.clone(),
        reason: dotenv_reason(path, &e),
    })?;
    let mut map = BTreeMap::new();
    for item in iter {
        let (k, v) = item.map_err(|e| ConfigError::DotEnv {
            path: shown.clone(),
            reason: dotenv_reason(path, &e),
        })?;
        map.insert(k, v);
    }
    Ok(map)
}

/// Describe a dotenvy error without the offending line's content (it may hold a key).
fn dotenv_reason(path: &Path, e: &dotenvy::Error) -> String {
    match e {
        dotenvy::Error::LineParse(line, _) => {
            let number = std::fs::read_to_string(path).ok().and_then(|text| {
                text.lines()
                    .position(|l| l.trim() == line.trim())
                    .map(|i| i + 1)
            });
            match number {
                Some(n) => format!("line {n} cannot be parsed (content not shown)"),
                None => "a line cannot be parsed (content not shown)".to_string(),
            }
        }
        dotenvy::Error::Io(io) => io.kind().to_string(),
        _ => "a variable substitution failed".to_string(),
    }
}

/// Where a raw key belongs.
enum KeyClass<'a> {
    Global,
    Shorthand,
    Scope {
        scope: &'a str,
        suffix: String,
    },
    Source {
        scope: &'a str,
        provider: &'a str,
        n: u32,
        field: &'static str,
    },
    NotOurs,
}

fn is_scope_name(s: &str) -> bool {
    let mut bytes = s.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_uppercase())
        && bytes.all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

fn is_provider_segment(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

fn unknown(key: &str, reason: impl Into<String>, allowed: impl Into<String>) -> ConfigError {
    ConfigError::UnknownKey {
        key: key.to_string(),
        reason: reason.into(),
        allowed: allowed.into(),
    }
}

fn scope_suffixes_allowed() -> String {
    format!(
        "{} or a source key {{SCOPE}}__{{PROVIDER}}__{{N}}__{{FIELD}}",
        SCOPE_KEYS.join(", ")
    )
}

fn classify(key: &str) -> Result<KeyClass<'_>, ConfigError> {
    if GLOBAL_KEYS.contains(&key) {
        return Ok(KeyClass::Global);
    }
    if key.starts_with(GLOBAL_PREFIX) {
        return Err(unknown(
            key,
            "the PGW_ prefix is reserved for the library's keys",
            GLOBAL_KEYS.join(", "),
        ));
    }
    if SHORTHAND_KEYS.contains(&key) {
        return Ok(KeyClass::Shorthand);
    }
    let segments: Vec<&str> = key.split("__").collect();
    if segments.len() < 2 || !is_scope_name(segments[0]) {
        return Ok(KeyClass::NotOurs);
    }
    let scope = segments[0];
    if segments[1..].iter().any(|s| s.is_empty()) {
        return Err(unknown(key, "empty segment", scope_suffixes_allowed()));
    }
    match segments.len() {
        2 | 3 if SCOPE_KEYS.contains(&segments[1..].join("__").as_str()) => Ok(KeyClass::Scope {
            scope,
            suffix: segments[1..].join("__"),
        }),
        2 => Err(unknown(
            key,
            format!("unknown scope key {}", segments[1]),
            scope_suffixes_allowed(),
        )),
        3 if SCOPE_KEY_GROUPS.contains(&segments[1]) => {
            let group = segments[1];
            let allowed: Vec<String> = SCOPE_KEYS
                .iter()
                .filter(|k| k.starts_with(&format!("{group}__")))
                .map(|k| format!("{scope}__{k}"))
                .collect();
            Err(unknown(
                key,
                format!("unknown {group} field {}", segments[2]),
                allowed.join(", "),
            ))
        }
        3 => Err(unknown(
            key,
            "a source key needs a provider, an index and a field",
            format!("{scope}__{}__{{N}}__{{FIELD}} with N a number", segments[1]),
        )),
        4 => {
            let (provider, index, field) = (segments[1], segments[2], segments[3]);
            if SCOPE_KEY_GROUPS.contains(&provider) || SCOPE_KEYS.contains(&provider) {
                return Err(unknown(
                    key,
                    format!("{provider} is a scope-key word, not a provider"),
                    scope_suffixes_allowed(),
                ));
            }
            if !is_provider_segment(provider) {
                return Err(unknown(
                    key,
                    format!("provider segment {provider} must be upper-case [A-Z0-9_]"),
                    format!(
                        "{scope}__{}__{index}__{field}",
                        provider.to_ascii_uppercase()
                    ),
                ));
            }
            let n = match index.parse::<u32>() {
                Ok(n) if index.bytes().all(|b| b.is_ascii_digit()) => n,
                _ => {
                    return Err(unknown(
                        key,
                        format!("source index {index} is not a number"),
                        format!("{scope}__{provider}__{{N}}__{field} with N = 1, 2, …"),
                    ))
                }
            };
            let Some(field) = SOURCE_FIELDS.iter().find(|f| **f == field) else {
                return Err(unknown(
                    key,
                    format!("unknown source field {field}"),
                    SOURCE_FIELDS.join(", "),
                ));
            };
            Ok(KeyClass::Source {
                scope,
                provider,
                n,
                field,
            })
        }
        _ => Err(unknown(
            key,
            "too many __-separated segments",
            scope_suffixes_allowed(),
        )),
    }
}

/// A key and its (trimmed, non-empty) value.
#[derive(Clone, Copy)]
struct Entry<'a> {
    key: &'a str,
    value: &'a str,
}

#[derive(Default)]
struct RawSource<'a> {
    fields: BTreeMap<&'static str, Entry<'a>>,
}

#[derive(Default)]
struct RawScope<'a> {
    keys: BTreeMap<String, Entry<'a>>,
    /// Keyed by (lower-case provider, index) so sources come out ordered.
    sources: BTreeMap<(String, u32), RawSource<'a>>,
}

/// Which assembly rules a parse applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rules {
    /// This runtime's: documented defaults fill the optional keys (docs/behaviour.md §3).
    Runtime,
    /// The original Python library's: the keys it made required are required, and no streaming
    /// watchdog is derived (see [`Settings::from_env_original`]).
    Original,
}

/// How the original library asks for a key it requires ("报什么补什么": name what to add).
fn original_requires(key: String, what: &str) -> ConfigError {
    ConfigError::Missing {
        key,
        reason: format!(
            "add it: {what} (the original library's assembly rules, which the Python package \
             keeps, fill in no default for it)"
        ),
    }
}

fn parse(map: &BTreeMap<String, String>, rules: Rules) -> Result<Settings, ConfigError> {
    let mut globals: BTreeMap<&str, Entry<'_>> = BTreeMap::new();
    let mut shorthands: BTreeMap<&str, Entry<'_>> = BTreeMap::new();
    let mut scopes: BTreeMap<&str, RawScope<'_>> = BTreeMap::new();
    for (key, value) in map {
        let class = classify(key)?;
        let value = value.trim();
        if value.is_empty() {
            continue;
        }
        let entry = Entry { key, value };
        match class {
            KeyClass::Global => {
                globals.insert(key, entry);
            }
            KeyClass::Shorthand => {
                shorthands.insert(key, entry);
            }
            KeyClass::Scope { scope, suffix } => {
                scopes.entry(scope).or_default().keys.insert(suffix, entry);
            }
            KeyClass::Source {
                scope,
                provider,
                n,
                field,
            } => {
                let raw = scopes.entry(scope).or_default();
                let source = raw
                    .sources
                    .entry((provider.to_ascii_lowercase(), n))
                    .or_default();
                if let Some(previous) = source.fields.insert(field, entry) {
                    // e.g. LLM__QWEN__1__MODEL and LLM__QWEN__01__MODEL.
                    return Err(ConfigError::InvalidValue {
                        key: key.to_string(),
                        value: "(duplicate)".to_string(),
                        expected: format!(
                            "one value per source field; {} sets it too",
                            previous.key
                        ),
                    });
                }
            }
            KeyClass::NotOurs => {}
        }
    }

    let shorthands = Shorthands::parse(&shorthands)?;
    let mut parsed_scopes = BTreeMap::new();
    for (name, raw) in &scopes {
        parsed_scopes.insert(
            name.to_string(),
            build_scope(name, raw, &shorthands, rules)?,
        );
    }
    if rules == Rules::Original {
        for (key, what) in [
            ("PGW_CACHE_BACKEND", "none, memory or redis"),
            ("PGW_TELEMETRY_BACKEND", "none, sqlite or postgres"),
        ] {
            if !globals.contains_key(key) {
                return Err(original_requires(key.to_string(), what));
            }
        }
    }
    build_settings(&globals, parsed_scopes)
}

/// The flat shorthands, parsed once.
#[derive(Default)]
struct Shorthands {
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
    fn parse(entries: &BTreeMap<&str, Entry<'_>>) -> Result<Self, ConfigError> {
        let secs = |k: &str| entries.get(k).map(|e| parse_secs(*e)).transpose();
        let count = |k: &str| entries.get(k).map(|e| parse_int::<u32>(*e)).transpose();
        Ok(Self {
            timeout: secs("LLM_TIMEOUT")?,
            max_attempts: count("LLM_MAX_RETRIES")?,
            backoff_base: secs("LLM_RETRY_BASE_DELAY")?,
            backoff_max: secs("LLM_RETRY_MAX_DELAY")?,
            fail_threshold: count("LLM_CIRCUIT_BREAKER_THRESHOLD")?,
            cooldown: secs("LLM_CIRCUIT_BREAKER_COOLDOWN")?,
            ttft: secs("LLM_TTFT_TIMEOUT")?,
            inter_token: secs("LLM_INTER_TOKEN_TIMEOUT")?,
        })
    }
}

fn invalid(entry: Entry<'_>, expected: impl Into<String>) -> ConfigError {
    ConfigError::InvalidValue {
        key: entry.key.to_string(),
        value: format!("{:?}", shorten(entry.value)),
        expected: expected.into(),
    }
}

/// Seconds as a non-negative finite number (`1`, `0.5`). Positivity is a guard's job.
fn parse_secs(entry: Entry<'_>) -> Result<Duration, ConfigError> {
    entry
        .value
        .parse::<f64>()
        .ok()
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .ok_or_else(|| invalid(entry, "a non-negative number of seconds"))
}

fn parse_int<T: std::str::FromStr>(entry: Entry<'_>) -> Result<T, ConfigError> {
    entry.value.parse::<T>().map_err(|_| {
        invalid(
            entry,
            format!("an integer in the range of {}", std::any::type_name::<T>()),
        )
    })
}

fn parse_positive(entry: Entry<'_>) -> Result<usize, ConfigError> {
    match entry.value.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(invalid(entry, "a positive integer")),
    }
}

fn parse_pacer_bound(entry: Entry<'_>) -> Result<u32, ConfigError> {
    match entry.value.parse::<u32>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(invalid(
            entry,
            "a positive whole number of concurrent attempts",
        )),
    }
}

fn parse_f64(entry: Entry<'_>) -> Result<f64, ConfigError> {
    match entry.value.parse::<f64>() {
        Ok(x) if x.is_finite() => Ok(x),
        _ => Err(invalid(entry, "a finite number")),
    }
}

fn parse_bool(entry: Entry<'_>) -> Result<bool, ConfigError> {
    match entry.value.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" => Ok(false),
        _ => Err(invalid(entry, "one of true, false, 1, 0, yes, no, on, off")),
    }
}

fn parse_enum<T: Copy>(entry: Entry<'_>, choices: &[(&str, T)]) -> Result<T, ConfigError> {
    let lowered = entry.value.to_ascii_lowercase();
    choices
        .iter()
        .find(|(name, _)| *name == lowered)
        .map(|(_, v)| *v)
        .ok_or_else(|| {
            let names: Vec<&str> = choices.iter().map(|(n, _)| *n).collect();
            invalid(entry, format!("one of {}", names.join(" | ")))
        })
}

fn kind_name(kind: ScopeKind) -> &'static str {
    match kind {
        ScopeKind::Chat => "chat",
        ScopeKind::Embeddings => "embeddings",
        ScopeKind::Ocr => "ocr",
    }
}

fn build_scope(
    name: &str,
    raw: &RawScope<'_>,
    shorthands: &Shorthands,
    rules: Rules,
) -> Result<ScopeSettings, ConfigError> {
    let kind = scope_kind_for(name);
    let get = |suffix: &str| raw.keys.get(suffix).copied();
    let secs = |suffix: &str| get(suffix).map(parse_secs).transpose();

    if raw.sources.is_empty() {
        return Err(ConfigError::NoSources {
            scope: name.to_string(),
        });
    }
    let mut sources = Vec::with_capacity(raw.sources.len());
    for ((provider, n), source) in &raw.sources {
        sources.push(build_source(
            name, kind, provider, *n, source, shorthands, rules,
        )?);
    }

    let retry = RetrySettings {
        max_attempts: get("RETRY__MAX_ATTEMPTS")
            .map(parse_int::<u32>)
            .transpose()?
            .or(shorthands.max_attempts)
            .unwrap_or(defaults::MAX_ATTEMPTS),
        backoff_base: secs("RETRY__BACKOFF_BASE_S")?
            .or(shorthands.backoff_base)
            .unwrap_or(Duration::from_secs_f64(defaults::BACKOFF_BASE_S)),
        backoff_max: secs("RETRY__BACKOFF_MAX_S")?
            .or(shorthands.backoff_max)
            .unwrap_or(Duration::from_secs_f64(defaults::BACKOFF_MAX_S)),
    };
    let default_breaker = BreakerSettings::default();
    let breaker = BreakerSettings {
        fail_threshold: get("BREAKER__FAIL_THRESHOLD")
            .map(parse_int::<u32>)
            .transpose()?
            .or(shorthands.fail_threshold)
            .unwrap_or(default_breaker.fail_threshold),
        cooldown: secs("BREAKER__COOLDOWN_S")?
            .or(shorthands.cooldown)
            .unwrap_or(default_breaker.cooldown),
        probe_ttl: secs("BREAKER__PROBE_TTL_S")?,
        min_calls: get("BREAKER__MIN_CALLS")
            .map(parse_int::<u32>)
            .transpose()?
            .unwrap_or(default_breaker.min_calls),
        fail_rate: get("BREAKER__FAIL_RATE")
            .map(parse_f64)
            .transpose()?
            .unwrap_or(default_breaker.fail_rate),
        window: secs("BREAKER__WINDOW_S")?.unwrap_or(default_breaker.window),
        max_cooldown: secs("BREAKER__MAX_COOLDOWN_S")?,
    };
    let default_backpressure = BackpressureSettings::default();
    let backpressure = BackpressureSettings {
        stall_window: secs("BACKPRESSURE__STALL_WINDOW_S")?
            .unwrap_or(default_backpressure.stall_window),
        poll_interval: secs("BACKPRESSURE__POLL_INTERVAL_S")?
            .unwrap_or(default_backpressure.poll_interval),
    };

    let embedding = if kind == ScopeKind::Embeddings {
        let batch_key = format!("{name}__BATCH_SIZE");
        let batch_size = get("BATCH_SIZE")
            .map(parse_positive)
            .transpose()?
            .ok_or_else(|| ConfigError::Missing {
                key: batch_key,
                reason: "embeddings scopes must set their batch size (no default)".to_string(),
            })?;
        Some(EmbeddingSettings {
            batch_size,
            normalize: get("NORMALIZE")
                .map(parse_bool)
                .transpose()?
                .unwrap_or(false),
            expected_dim: get("EXPECTED_DIM").map(parse_positive).transpose()?,
        })
    } else {
        if let Some(suffix) = EMBEDDING_SCOPE_KEYS
            .iter()
            .find(|s| raw.keys.contains_key(**s))
        {
            return Err(ConfigError::WrongScopeKind {
                key: format!("{name}__{suffix}"),
                scope: name.to_string(),
                kind: kind_name(kind),
                reason: "only embeddings scopes (names starting with EMBED) take it".to_string(),
            });
        }
        None
    };

    let budget = match get("BUDGET") {
        Some(entry) if kind != ScopeKind::Chat => {
            return Err(ConfigError::WrongScopeKind {
                key: entry.key.to_string(),
                scope: name.to_string(),
                kind: kind_name(kind),
                reason: "spend budgets gate chat calls only (docs/behaviour.md §5.7)".to_string(),
            });
        }
        Some(entry) => Some(super::SpendBudget::parse(entry.key, entry.value)?),
        None => None,
    };

    Ok(ScopeSettings {
        name: name.to_string(),
        kind,
        sources,
        global_max_concurrency: get("GLOBAL__MAX_CONCURRENCY")
            .map(parse_int::<u32>)
            .transpose()?
            .unwrap_or(0),
        global_rpm: get("GLOBAL__RPM")
            .map(parse_int::<u32>)
            .transpose()?
            .unwrap_or(0),
        global_tpm: get("GLOBAL__TPM")
            .map(parse_int::<u64>)
            .transpose()?
            .unwrap_or(0),
        selector: get("SELECTOR")
            .map(|e| {
                parse_enum(
                    e,
                    &[
                        ("health_aware", SelectorKind::HealthAware),
                        ("round_robin", SelectorKind::RoundRobin),
                        ("least_inflight", SelectorKind::LeastInflight),
                    ],
                )
            })
            .transpose()?
            .unwrap_or_default(),
        pacer: PacerSettings {
            mode: get("PACER")
                .map(|e| {
                    parse_enum(
                        e,
                        &[
                            ("adaptive", PacerMode::Adaptive),
                            ("aimd", PacerMode::Aimd),
                            ("off", PacerMode::Off),
                        ],
                    )
                })
                .transpose()?
                .unwrap_or_default(),
            start: get("PACER__START").map(parse_pacer_bound).transpose()?,
            ceiling: get("PACER__CEILING").map(parse_pacer_bound).transpose()?,
        },
        retry,
        breaker,
        backpressure,
        quota_full: get("QUOTA_FULL")
            .map(|e| {
                parse_enum(
                    e,
                    &[
                        ("wait", QuotaFull::Wait),
                        ("fail_fast", QuotaFull::FailFast),
                    ],
                )
            })
            .transpose()?
            .unwrap_or_default(),
        circuit_open: get("CIRCUIT_OPEN")
            .map(|e| {
                parse_enum(
                    e,
                    &[
                        ("fail_fast", CircuitOpenPolicy::FailFast),
                        ("wait", CircuitOpenPolicy::Wait),
                    ],
                )
            })
            .transpose()?
            .unwrap_or_default(),
        budget,
        embedding,
    })
}

fn build_source(
    scope: &str,
    kind: ScopeKind,
    provider: &str,
    n: u32,
    raw: &RawSource<'_>,
    shorthands: &Shorthands,
    rules: Rules,
) -> Result<SourceSettings, ConfigError> {
    let get = |field: &str| raw.fields.get(field).copied();
    let secs = |field: &str| get(field).map(parse_secs).transpose();
    let required = |field: &str, what: &str| {
        get(field).ok_or_else(|| ConfigError::Missing {
            key: format!("{scope}__{}__{n}__{field}", provider.to_ascii_uppercase()),
            reason: format!("every source needs {what} (no default)"),
        })
    };

    let base_url = required("BASE_URL", "a base URL")?.value.to_string();
    let model = required("MODEL", "a model name")?.value.to_string();
    let source_key =
        |field: &str| format!("{scope}__{}__{n}__{field}", provider.to_ascii_uppercase());
    let original = rules == Rules::Original;
    if original && get("API_KEY").is_none() {
        return Err(original_requires(
            source_key("API_KEY"),
            "the source's API key (`none` for a service without authentication)",
        ));
    }
    let timeout = match secs("TIMEOUT_S")?.or(shorthands.timeout) {
        Some(timeout) => timeout,
        None if original => {
            return Err(original_requires(
                source_key("TIMEOUT_S"),
                "the source's wall-clock limit per call in seconds (or LLM_TIMEOUT for every \
                 source)",
            ))
        }
        None => Duration::from_secs_f64(defaults::TIMEOUT_S),
    };
    let ttft = secs("TTFT_TIMEOUT_S")?.or(shorthands.ttft);
    let inter_token = secs("INTER_TOKEN_TIMEOUT_S")?.or(shorthands.inter_token);
    let (ttft_timeout, inter_token_timeout) = match (ttft, inter_token) {
        // The original has no watchdog unless its keys are set: deadlines at the total limit.
        (None, None) if original => (timeout, timeout),
        (Some(_), None) | (None, Some(_)) if original => {
            let missing = if ttft.is_none() {
                "TTFT_TIMEOUT_S"
            } else {
                "INTER_TOKEN_TIMEOUT_S"
            };
            return Err(original_requires(
                source_key(missing),
                "the streaming watchdog's keys are set in pairs (TTFT_TIMEOUT_S with \
                 INTER_TOKEN_TIMEOUT_S, or LLM_TTFT_TIMEOUT with LLM_INTER_TOKEN_TIMEOUT)",
            ));
        }
        (ttft, inter_token) => {
            let ttft = ttft.unwrap_or_else(|| defaults::ttft_for(timeout));
            (
                ttft,
                inter_token.unwrap_or_else(|| defaults::inter_token_for(ttft)),
            )
        }
    };

    let extra_body = match get("EXTRA_BODY") {
        Some(entry) if kind != ScopeKind::Chat => {
            tracing::warn!(
                key = entry.key,
                scope,
                "EXTRA_BODY is ignored in {} scopes (no chat request body to merge it into)",
                kind_name(kind)
            );
            serde_json::Map::new()
        }
        Some(entry) => match serde_json::from_str::<Value>(entry.value) {
            Ok(Value::Object(map)) => map,
            Ok(other) => {
                let found = match other {
                    Value::Array(_) => "an array",
                    Value::String(_) => "a string",
                    Value::Number(_) => "a number",
                    Value::Bool(_) => "a bool",
                    _ => "null",
                };
                return Err(ConfigError::InvalidValue {
                    key: entry.key.to_string(),
                    value: found.to_string(),
                    expected: "a JSON object string, e.g. {\"temperature\": 0.2}".to_string(),
                });
            }
            Err(e) => {
                return Err(ConfigError::InvalidValue {
                    key: entry.key.to_string(),
                    value: format!("unparsable JSON ({e})"),
                    expected: "a JSON object string, e.g. {\"temperature\": 0.2}".to_string(),
                })
            }
        },
        None => serde_json::Map::new(),
    };

    Ok(SourceSettings {
        name: format!("{provider}_{n}"),
        provider: provider.to_string(),
        base_url,
        api_key: Secret::new(get("API_KEY").map(|e| e.value).unwrap_or("")),
        model,
        timeout,
        max_concurrency: get("MAX_CONCURRENCY")
            .map(parse_int::<u32>)
            .transpose()?
            .unwrap_or(0),
        rpm: get("RPM").map(parse_int::<u32>).transpose()?.unwrap_or(0),
        tpm: get("TPM").map(parse_int::<u64>).transpose()?.unwrap_or(0),
        est_tokens: get("EST_TOKENS").map(parse_int::<i64>).transpose()?,
        ttft_timeout,
        inter_token_timeout,
        enable_thinking: get("ENABLE_THINKING").map(parse_bool).transpose()?,
        missing_done: get("MISSING_DONE")
            .map(|e| {
                parse_enum(
                    e,
                    &[
                        ("retry", MissingDone::Retry),
                        ("salvage", MissingDone::Salvage),
                    ],
                )
            })
            .transpose()?
            .unwrap_or_default(),
        trust_env: get("TRUST_ENV")
            .map(parse_bool)
            .transpose()?
            .unwrap_or(true),
        stream: get("STREAM").map(parse_bool).transpose()?.unwrap_or(true),
        structured_mode: get("STRUCTURED_MODE")
            .map(|e| {
                let choices = StructuredMode::ALL.map(|m| (m.as_str(), m));
                parse_enum(e, &choices)
            })
            .transpose()?,
        pool_idle_timeout: secs("POOL_IDLE_TIMEOUT_S")?
            .unwrap_or(Duration::from_secs_f64(defaults::POOL_IDLE_TIMEOUT_S)),
        extra_body,
    })
}

fn governance_backend(
    globals: &BTreeMap<&str, Entry<'_>>,
    key: &str,
    required: bool,
) -> Result<GovernanceBackendKind, ConfigError> {
    match globals.get(key) {
        Some(entry) => parse_enum(
            *entry,
            &[
                ("memory", GovernanceBackendKind::Memory),
                ("redis", GovernanceBackendKind::Redis),
            ],
        ),
        None if required => Err(ConfigError::Missing {
            key: key.to_string(),
            reason: "required when any scope is configured: memory | redis (no default; \
                     memory is per process, redis is shared across processes)"
                .to_string(),
        }),
        // No scope consumes it; memory is inert.
        None => Ok(GovernanceBackendKind::Memory),
    }
}

fn build_settings(
    globals: &BTreeMap<&str, Entry<'_>>,
    scopes: BTreeMap<String, ScopeSettings>,
) -> Result<Settings, ConfigError> {
    let get = |key: &str| globals.get(key).copied();
    let secs = |key: &str| get(key).map(parse_secs).transpose();
    let required = |key: &str, reason: &str| {
        get(key).ok_or_else(|| ConfigError::Missing {
            key: key.to_string(),
            reason: reason.to_string(),
        })
    };
    let any_scope = !scopes.is_empty();
    let limiter_backend = governance_backend(globals, "PGW_LIMITER_BACKEND", any_scope)?;
    let breaker_backend = governance_backend(globals, "PGW_BREAKER_BACKEND", any_scope)?;

    let redis_url = match get("REDIS_URL") {
        Some(entry) => {
            if let Err(reason) = check_redis_url(entry.value) {
                return Err(ConfigError::InvalidValue {
                    key: entry.key.to_string(),
                    value: HIDDEN.to_string(),
                    expected: format!("{REDIS_URL_FORMS}; {reason}"),
                });
            }
            Some(Secret::new(entry.value))
        }
        None => None,
    };

    #[derive(Clone, Copy)]
    enum CacheKind {
        None,
        Memory,
        Redis,
    }
    let cache_kind = get("PGW_CACHE_BACKEND")
        .map(|e| {
            parse_enum(
                e,
                &[
                    ("none", CacheKind::None),
                    ("memory", CacheKind::Memory),
                    ("redis", CacheKind::Redis),
                ],
            )
        })
        .transpose()?
        .unwrap_or(CacheKind::None);
    let cache = match cache_kind {
        CacheKind::None => CacheSettings::None,
        CacheKind::Memory | CacheKind::Redis => {
            let why = "required when PGW_CACHE_BACKEND is memory or redis";
            let namespace = required("PGW_CACHE_NAMESPACE", why)?.value.to_string();
            let ttl = parse_secs(required("PGW_CACHE_TTL_S", why)?)?;
            if matches!(cache_kind, CacheKind::Memory) {
                CacheSettings::Memory { namespace, ttl }
            } else {
                CacheSettings::Redis { namespace, ttl }
            }
        }
    };

    #[derive(Clone, Copy)]
    enum TelemetryKind {
        None,
        Sqlite,
        Postgres,
    }
    let telemetry_kind = get("PGW_TELEMETRY_BACKEND")
        .map(|e| {
            parse_enum(
                e,
                &[
                    ("none", TelemetryKind::None),
                    ("sqlite", TelemetryKind::Sqlite),
                    ("postgres", TelemetryKind::Postgres),
                ],
            )
        })
        .transpose()?
        .unwrap_or(TelemetryKind::None);
    // Parsed whatever the backend, so a bad value never hides behind an unused one.
    let pool_max = get("PGW_TELEMETRY_PG_POOL_MAX")
        .map(parse_positive)
        .transpose()?
        .unwrap_or(defaults::PG_POOL_MAX);
    let write_timeout = secs("PGW_TELEMETRY_PG_WRITE_TIMEOUT_S")?
        .unwrap_or(Duration::from_secs_f64(defaults::PG_WRITE_TIMEOUT_S));
    let backend = match telemetry_kind {
        TelemetryKind::None => TelemetryBackendSettings::None,
        TelemetryKind::Sqlite => TelemetryBackendSettings::Sqlite {
            path: required(
                "PGW_TELEMETRY_SQLITE_PATH",
                "required when PGW_TELEMETRY_BACKEND=sqlite",
            )?
            .value
            .to_string(),
        },
        TelemetryKind::Postgres => TelemetryBackendSettings::Postgres {
            dsn: Secret::new(
                required(
                    "PGW_TELEMETRY_PG_DSN",
                    "required when PGW_TELEMETRY_BACKEND=postgres",
                )?
                .value,
            ),
            pool_max,
            write_timeout,
        },
    };
    let telemetry = TelemetrySettings {
        backend,
        schema_mode: get("PGW_TELEMETRY_SCHEMA_MODE")
            .map(|e| {
                parse_enum(
                    e,
                    &[("auto", SchemaMode::Auto), ("manual", SchemaMode::Manual)],
                )
            })
            .transpose()?,
        text_cap: get("PGW_TELEMETRY_TEXT_CAP")
            .map(parse_positive)
            .transpose()?,
    };

    Ok(Settings {
        scopes,
        limiter_backend,
        breaker_backend,
        redis_url,
        cache,
        telemetry,
        pricing_path: get("PGW_PRICING_PATH").map(|e| e.value.to_string()),
        structured_max_retries: get("PGW_STRUCTURED_MAX_RETRIES")
            .map(parse_int::<u32>)
            .transpose()?
            .unwrap_or(defaults::STRUCTURED_MAX_RETRIES),
        tenant_budgets: get("PGW_TENANT_BUDGETS")
            .map(|e| super::budget::parse_tenant_budgets(e.key, e.value))
            .transpose()?
            .unwrap_or_default(),
        lease_ttl: secs("PGW_LEASE_TTL_S")?
            .unwrap_or(Duration::from_secs_f64(defaults::LEASE_TTL_S)),
        server: build_server(globals)?,
    })
}

fn build_server(globals: &BTreeMap<&str, Entry<'_>>) -> Result<ServerSettings, ConfigError> {
    let get = |key: &str| globals.get(key).copied();
    let positive_secs = |key: &str| -> Result<Option<Duration>, ConfigError> {
        match get(key) {
            Some(entry) => match parse_secs(entry)? {
                d if d.is_zero() => Err(invalid(entry, "a positive number of seconds")),
                d => Ok(Some(d)),
            },
            None => Ok(None),
        }
    };
    let mut server = ServerSettings::default();
    if let Some(entry) = get("PGW_SERVER_BIND") {
        server.bind = entry.value.parse().map_err(|_| {
            invalid(
                entry,
                "an address and port such as 127.0.0.1:8080 or [::]:8080",
            )
        })?;
    }
    if let Some(entry) = get("PGW_SERVER_BODY_LIMIT_BYTES") {
        server.body_limit_bytes = parse_positive(entry)?;
    }
    if let Some(d) = positive_secs("PGW_SERVER_REQUEST_TIMEOUT_S")? {
        server.request_timeout = d;
    }
    if let Some(d) = positive_secs("PGW_SERVER_DRAIN_TIMEOUT_S")? {
        server.drain_timeout = d;
    }
    server.keys_file = get("PGW_SERVER_KEYS_FILE").map(|e| e.value.to_string());
    if let Some(entry) = get("PGW_SERVER_MODEL_ALIASES") {
        server.model_aliases = super::server::parse_aliases(entry.value).map_err(|why| {
            invalid(
                entry,
                format!("alias=SCOPE pairs separated by commas: {why}"),
            )
        })?;
    }
    Ok(server)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classify_families() {
        assert!(matches!(classify("PATH"), Ok(KeyClass::NotOurs)));
        assert!(matches!(classify("__CF_X"), Ok(KeyClass::NotOurs)));
        assert!(matches!(classify("lower__x"), Ok(KeyClass::NotOurs)));
        assert!(matches!(classify("PGW_LEASE_TTL_S"), Ok(KeyClass::Global)));
        assert!(matches!(classify("LLM_TIMEOUT"), Ok(KeyClass::Shorthand)));
        assert!(matches!(
            classify("LLM__RETRY__MAX_ATTEMPTS"),
            Ok(KeyClass::Scope { scope: "LLM", .. })
        ));
        assert!(matches!(
            classify("OCR_FAST__MONKEY__2__TIMEOUT_S"),
            Ok(KeyClass::Source {
                scope: "OCR_FAST",
                provider: "MONKEY",
                n: 2,
                field: "TIMEOUT_S"
            })
        ));
        for bad in [
            "PGW_CACHE_BAKEND",
            "LLM__SELECTR",
            "LLM__RETRY__MAX",
            "LLM__QWEN__BASE_URL",
            "LLM__QWEN__X__BASE_URL",
            "LLM__QWEN__1__BASEURL",
            "LLM__RETRY__1__MODEL",
            "LLM__qwen__1__MODEL",
            "LLM__QWEN__1__MODEL__X",
            "LLM____X",
        ] {
            assert!(classify(bad).is_err(), "{bad}");
        }
    }
}
