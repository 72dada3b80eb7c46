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

mod classify;
mod globals;
mod read;
mod rules;
mod scope;

use classify::{classify, KeyClass};
use globals::build_settings;
use read::{Entry, Keys};
use rules::{original_requires, Rules};
use scope::{build_scope, RawScope, Shorthands};

pub use scope::scope_kind_for;

use super::error::ConfigError;
use super::keys::{global, KeyDef, ValueKind};
use super::settings::*;

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

/// The keys of a map sorted by level: the globals, the shorthands, and each scope's.
#[derive(Default)]
struct Sorted<'a> {
    globals: Keys<'a>,
    shorthands: Keys<'a>,
    scopes: BTreeMap<&'a str, RawScope<'a>>,
}

impl<'a> Sorted<'a> {
    fn new(map: &'a BTreeMap<String, String>) -> Result<Self, ConfigError> {
        let mut sorted = Sorted::default();
        for (key, value) in map {
            let class = classify(key)?;
            let value = value.trim();
            if !value.is_empty() {
                sorted.add(class, Entry { key, value })?;
            }
        }
        Ok(sorted)
    }

    fn add(&mut self, class: KeyClass<'a>, entry: Entry<'a>) -> Result<(), ConfigError> {
        match class {
            KeyClass::Global(def) => {
                self.globals.insert(def, entry);
            }
            KeyClass::Shorthand(def) => {
                self.shorthands.insert(def, entry);
            }
            KeyClass::Scope { scope, key } => {
                self.scopes
                    .entry(scope)
                    .or_default()
                    .keys
                    .insert(key, entry);
            }
            KeyClass::Source {
                scope,
                provider,
                n,
                field,
            } => {
                let source = self
                    .scopes
                    .entry(scope)
                    .or_default()
                    .sources
                    .entry((provider.to_ascii_lowercase(), n))
                    .or_default();
                if let Some(previous) = source.insert(field, entry) {
                    // e.g. LLM__QWEN__1__MODEL and LLM__QWEN__01__MODEL.
                    return Err(ConfigError::InvalidValue {
                        key: entry.key.to_string(),
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
        Ok(())
    }
}

fn parse(map: &BTreeMap<String, String>, rules: Rules) -> Result<Settings, ConfigError> {
    let sorted = Sorted::new(map)?;
    let shorthands = Shorthands::parse(&sorted.shorthands)?;
    let mut scopes = BTreeMap::new();
    for (name, raw) in &sorted.scopes {
        scopes.insert(
            name.to_string(),
            build_scope(name, raw, &shorthands, rules)?,
        );
    }
    if rules == Rules::Original {
        for def in [&global::PGW_CACHE_BACKEND, &global::PGW_TELEMETRY_BACKEND] {
            if !sorted.globals.contains(def) {
                return Err(original_requires(def.name.to_string(), &choices(def)));
            }
        }
    }
    build_settings(&sorted.globals, scopes)
}

/// A choice key's words as a sentence: `none, memory or redis`.
fn choices(def: &KeyDef) -> String {
    let ValueKind::Choice(words) = def.value else {
        unreachable!("{} is not a choice in the key table", def.name)
    };
    match words.split_last() {
        Some((last, [])) => last.to_string(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}
