//! Configuration parsing (docs/behaviour.md §3): every key family, defaults, shorthand precedence, every
//! assembly guard, error texts, secrecy, `.env` layering, and `.env.example` vs the parser.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use polygateway::config::{
    accepted_keys, CacheSettings, CircuitOpenPolicy, ConfigError, GovernanceBackendKind,
    MissingDone, QuotaFull, SchemaMode, ScopeKind, SelectorKind, Settings,
    TelemetryBackendSettings, GLOBAL_KEYS, SCOPE_KEYS, SHORTHAND_KEYS, SOURCE_FIELDS,
};

const API_KEY: &str = "sk-live-TOPSECRET-a1b2c3";
const REDIS_PASSWORD: &str = "redisPASSWORD-x9";
const PG_PASSWORD: &str = "pgPASSWORD-q7";

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A minimal valid chat configuration.
fn base() -> BTreeMap<String, String> {
    map(&[
        ("LLM__QWEN__1__BASE_URL", "https://qwen.example.invalid/v1"),
        ("LLM__QWEN__1__API_KEY", API_KEY),
        ("LLM__QWEN__1__MODEL", "qwen-plus"),
        ("PGW_LIMITER_BACKEND", "memory"),
        ("PGW_BREAKER_BACKEND", "memory"),
    ])
}

fn with(mut m: BTreeMap<String, String>, pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    for (k, v) in pairs {
        m.insert(k.to_string(), v.to_string());
    }
    m
}

fn without(mut m: BTreeMap<String, String>, keys: &[&str]) -> BTreeMap<String, String> {
    for k in keys {
        m.remove(*k);
    }
    m
}

fn parse(m: &BTreeMap<String, String>) -> Settings {
    Settings::from_map(m).unwrap_or_else(|e| panic!("expected a valid config, got: {e}"))
}

fn parse_err(m: &BTreeMap<String, String>) -> ConfigError {
    match Settings::from_map(m) {
        Ok(s) => panic!("expected an error, got {s:?}"),
        Err(e) => {
            // No error message ever carries a secret.
            let text = format!("{e} {e:?}");
            for secret in [API_KEY, REDIS_PASSWORD, PG_PASSWORD] {
                assert!(!text.contains(secret), "secret leaked in {text}");
            }
            e
        }
    }
}

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

// ─────────────────────────────────── families and defaults ───────────────────────────────────

#[test]
fn minimal_config_gets_every_documented_default() {
    let s = parse(&base());
    assert_eq!(s.scopes.len(), 1);
    let llm = s.scope("LLM").unwrap();
    assert_eq!(llm.name, "LLM");
    assert_eq!(llm.kind, ScopeKind::Chat);
    assert_eq!(llm.global_max_concurrency, 0);
    assert_eq!(llm.global_rpm, 0);
    assert_eq!(llm.global_tpm, 0);
    assert_eq!(llm.selector, SelectorKind::HealthAware);
    assert_eq!(llm.retry.max_attempts, 3);
    assert_eq!(llm.retry.backoff_base, secs(1.0));
    assert_eq!(llm.retry.backoff_max, secs(30.0));
    assert_eq!(llm.breaker.fail_threshold, 5);
    assert_eq!(llm.breaker.cooldown, secs(30.0));
    assert_eq!(llm.breaker.probe_ttl, None);
    assert_eq!(llm.breaker.min_calls, 10);
    assert_eq!(llm.breaker.fail_rate, 0.6);
    assert_eq!(llm.breaker.window, secs(30.0));
    assert_eq!(llm.breaker.max_cooldown, None);
    assert_eq!(llm.breaker.effective_max_cooldown(), secs(300.0));
    assert_eq!(llm.effective_probe_ttl(), secs(120.0));
    assert_eq!(llm.backpressure.stall_window, secs(300.0));
    assert_eq!(llm.backpressure.poll_interval, secs(1.0));
    assert_eq!(llm.quota_full, QuotaFull::Wait);
    assert_eq!(llm.circuit_open, CircuitOpenPolicy::FailFast);
    assert_eq!(llm.embedding, None);

    let src = &llm.sources[0];
    assert_eq!(src.name, "qwen_1");
    assert_eq!(src.provider, "qwen");
    assert_eq!(src.base_url, "https://qwen.example.invalid/v1");
    assert_eq!(src.api_key.expose(), API_KEY);
    assert_eq!(src.model, "qwen-plus");
    assert_eq!(src.timeout, secs(60.0));
    assert_eq!(src.ttft_timeout, secs(30.0));
    assert_eq!(src.inter_token_timeout, secs(15.0));
    assert_eq!(src.max_concurrency, 0);
    assert_eq!(src.rpm, 0);
    assert_eq!(src.tpm, 0);
    assert_eq!(src.est_tokens, None);
    assert_eq!(src.enable_thinking, None);
    assert_eq!(src.missing_done, MissingDone::Retry);
    assert!(src.trust_env);
    assert!(src.stream);
    assert!(src.extra_body.is_empty());

    assert_eq!(s.limiter_backend, GovernanceBackendKind::Memory);
    assert_eq!(s.breaker_backend, GovernanceBackendKind::Memory);
    assert_eq!(s.redis_url, None);
    assert_eq!(s.cache, CacheSettings::None);
    assert_eq!(s.telemetry.backend, TelemetryBackendSettings::None);
    assert_eq!(s.telemetry.schema_mode, None);
    assert_eq!(s.telemetry.text_cap, None);
    assert_eq!(s.pricing_path, None);
    assert_eq!(s.structured_max_retries, 2);
    assert_eq!(s.lease_ttl, secs(1500.0));
}

#[test]
fn every_source_field_is_parsed() {
    let m = with(
        base(),
        &[
            ("LLM__QWEN__1__TIMEOUT_S", "120"),
            ("LLM__QWEN__1__MAX_CONCURRENCY", "8"),
            ("LLM__QWEN__1__RPM", "60"),
            ("LLM__QWEN__1__TPM", "100000"),
            ("LLM__QWEN__1__EST_TOKENS", "2000"),
            ("LLM__QWEN__1__TTFT_TIMEOUT_S", "40.5"),
            ("LLM__QWEN__1__INTER_TOKEN_TIMEOUT_S", "7.25"),
            ("LLM__QWEN__1__ENABLE_THINKING", "false"),
            ("LLM__QWEN__1__MISSING_DONE", "salvage"),
            ("LLM__QWEN__1__TRUST_ENV", "false"),
            ("LLM__QWEN__1__STREAM", "off"),
            (
                "LLM__QWEN__1__EXTRA_BODY",
                r#"{"temperature": 0.2, "top_k": 5}"#,
            ),
        ],
    );
    let s = parse(&m);
    let src = &s.scope("LLM").unwrap().sources[0];
    assert_eq!(src.timeout, secs(120.0));
    assert_eq!(src.max_concurrency, 8);
    assert_eq!(src.rpm, 60);
    assert_eq!(src.tpm, 100_000);
    assert_eq!(src.est_tokens, Some(2000));
    assert_eq!(src.effective_est_tokens(), 2000);
    assert_eq!(src.ttft_timeout, secs(40.5));
    assert_eq!(src.inter_token_timeout, secs(7.25));
    assert_eq!(src.enable_thinking, Some(false));
    assert_eq!(src.missing_done, MissingDone::Salvage);
    assert!(!src.trust_env);
    assert!(!src.stream);
    assert_eq!(src.extra_body["temperature"], serde_json::json!(0.2));
    assert_eq!(src.extra_body["top_k"], serde_json::json!(5));

    let on = parse(&with(base(), &[("LLM__QWEN__1__ENABLE_THINKING", "TRUE")]));
    assert_eq!(
        on.scope("LLM").unwrap().sources[0].enable_thinking,
        Some(true)
    );
}

#[test]
fn every_scope_key_is_parsed() {
    let m = with(
        base(),
        &[
            ("LLM__GLOBAL__MAX_CONCURRENCY", "16"),
            ("LLM__GLOBAL__RPM", "120"),
            ("LLM__GLOBAL__TPM", "500000"),
            ("LLM__SELECTOR", "least_inflight"),
            ("LLM__RETRY__MAX_ATTEMPTS", "5"),
            ("LLM__RETRY__BACKOFF_BASE_S", "0.5"),
            ("LLM__RETRY__BACKOFF_MAX_S", "8"),
            ("LLM__BREAKER__FAIL_THRESHOLD", "7"),
            ("LLM__BREAKER__COOLDOWN_S", "45"),
            ("LLM__BREAKER__PROBE_TTL_S", "200"),
            ("LLM__BREAKER__MIN_CALLS", "20"),
            ("LLM__BREAKER__FAIL_RATE", "0.5"),
            ("LLM__BREAKER__WINDOW_S", "10"),
            ("LLM__BREAKER__MAX_COOLDOWN_S", "600"),
            ("LLM__BACKPRESSURE__STALL_WINDOW_S", "120"),
            ("LLM__BACKPRESSURE__POLL_INTERVAL_S", "0.25"),
            ("LLM__QUOTA_FULL", "fail_fast"),
            ("LLM__CIRCUIT_OPEN", "wait"),
        ],
    );
    let s = parse(&m);
    let llm = s.scope("LLM").unwrap();
    assert_eq!(llm.global_max_concurrency, 16);
    assert_eq!(llm.global_rpm, 120);
    assert_eq!(llm.global_tpm, 500_000);
    assert_eq!(llm.selector, SelectorKind::LeastInflight);
    assert_eq!(llm.retry.max_attempts, 5);
    assert_eq!(llm.retry.backoff_base, secs(0.5));
    assert_eq!(llm.retry.backoff_max, secs(8.0));
    assert_eq!(llm.breaker.fail_threshold, 7);
    assert_eq!(llm.breaker.cooldown, secs(45.0));
    assert_eq!(llm.breaker.probe_ttl, Some(secs(200.0)));
    assert_eq!(llm.effective_probe_ttl(), secs(200.0));
    assert_eq!(llm.breaker.min_calls, 20);
    assert_eq!(llm.breaker.fail_rate, 0.5);
    assert_eq!(llm.breaker.window, secs(10.0));
    assert_eq!(llm.breaker.max_cooldown, Some(secs(600.0)));
    assert_eq!(llm.backpressure.stall_window, secs(120.0));
    assert_eq!(llm.backpressure.poll_interval, secs(0.25));
    assert_eq!(llm.quota_full, QuotaFull::FailFast);
    assert_eq!(llm.circuit_open, CircuitOpenPolicy::Wait);

    let rr = parse(&with(base(), &[("LLM__SELECTOR", "ROUND_ROBIN")]));
    assert_eq!(rr.scope("llm").unwrap().selector, SelectorKind::RoundRobin);
}

#[test]
fn sources_are_named_and_ordered_by_provider_then_index() {
    let m = with(
        base(),
        &[
            ("LLM__QWEN__2__BASE_URL", "https://q2.example.invalid/v1"),
            ("LLM__QWEN__2__MODEL", "qwen-max"),
            (
                "LLM__DEEPSEEK__10__BASE_URL",
                "https://ds.example.invalid/v1",
            ),
            ("LLM__DEEPSEEK__10__MODEL", "deepseek-chat"),
            (
                "LLM__DEEPSEEK__9__BASE_URL",
                "https://ds9.example.invalid/v1",
            ),
            ("LLM__DEEPSEEK__9__MODEL", "deepseek-chat"),
            ("LLM__MY_PROXY__1__BASE_URL", "http://127.0.0.1:9000/v1"),
            ("LLM__MY_PROXY__1__MODEL", "m"),
        ],
    );
    let s = parse(&m);
    let names: Vec<&str> = s
        .scope("LLM")
        .unwrap()
        .sources
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(
        names,
        [
            "deepseek_9",
            "deepseek_10",
            "my_proxy_1",
            "qwen_1",
            "qwen_2"
        ]
    );
    let llm = s.scope("LLM").unwrap();
    assert_eq!(llm.source("my_proxy_1").unwrap().provider, "my_proxy");
    assert_eq!(llm.source("qwen_2").unwrap().api_key.expose(), "");
}

#[test]
fn scope_kinds_follow_the_name_and_scopes_are_independent() {
    let m = with(
        base(),
        &[
            ("VLM__QWEN__1__BASE_URL", "https://vlm.example.invalid/v1"),
            ("VLM__QWEN__1__MODEL", "qwen-vl"),
            ("VLM__RETRY__MAX_ATTEMPTS", "2"),
            ("OCR__MONKEY__1__BASE_URL", "http://127.0.0.1:7861"),
            ("OCR__MONKEY__1__MODEL", "monkey-ocr"),
            ("OCR__MONKEY__1__TIMEOUT_S", "300"),
            ("OCR_FAST__MONKEY__1__BASE_URL", "http://127.0.0.1:7862"),
            ("OCR_FAST__MONKEY__1__MODEL", "monkey-ocr"),
            ("OCRX__OPENAI__1__BASE_URL", "https://x.example.invalid/v1"),
            ("OCRX__OPENAI__1__MODEL", "gpt"),
            ("EMBED__OPENAI__1__BASE_URL", "https://e.example.invalid/v1"),
            ("EMBED__OPENAI__1__MODEL", "text-embedding-3-small"),
            ("EMBED__BATCH_SIZE", "64"),
            ("EMBED__NORMALIZE", "true"),
            ("EMBED__EXPECTED_DIM", "1536"),
            (
                "EMBEDDINGS_B__OPENAI__1__BASE_URL",
                "https://e.example.invalid/v1",
            ),
            ("EMBEDDINGS_B__OPENAI__1__MODEL", "text-embedding-3-large"),
            ("EMBEDDINGS_B__BATCH_SIZE", "16"),
        ],
    );
    let s = parse(&m);
    let kinds: BTreeMap<&str, ScopeKind> =
        s.scopes.iter().map(|(k, v)| (k.as_str(), v.kind)).collect();
    assert_eq!(kinds["LLM"], ScopeKind::Chat);
    assert_eq!(kinds["VLM"], ScopeKind::Chat);
    assert_eq!(kinds["OCR"], ScopeKind::Ocr);
    assert_eq!(kinds["OCR_FAST"], ScopeKind::Ocr);
    assert_eq!(kinds["OCRX"], ScopeKind::Chat);
    assert_eq!(kinds["EMBED"], ScopeKind::Embeddings);
    assert_eq!(kinds["EMBEDDINGS_B"], ScopeKind::Embeddings);
    assert_eq!(s.scope("VLM").unwrap().retry.max_attempts, 2);
    assert_eq!(s.scope("LLM").unwrap().retry.max_attempts, 3);
    let e = s.scope("EMBED").unwrap().embedding.clone().unwrap();
    assert_eq!(
        (e.batch_size, e.normalize, e.expected_dim),
        (64, true, Some(1536))
    );
    let e = s.scope("EMBEDDINGS_B").unwrap().embedding.clone().unwrap();
    assert_eq!(
        (e.batch_size, e.normalize, e.expected_dim),
        (16, false, None)
    );
    assert_eq!(s.scope("OCR").unwrap().sources[0].timeout, secs(300.0));
}

#[test]
fn unknown_scope_lookup_names_the_configured_ones() {
    let s = parse(&base());
    let e = s.scope("JUDGE").unwrap_err();
    assert!(matches!(e, ConfigError::UnknownScope { .. }));
    let msg = e.to_string();
    assert!(msg.contains("JUDGE") && msg.contains("LLM"), "{msg}");
}

#[test]
fn unrelated_environment_variables_are_ignored() {
    let m = with(
        base(),
        &[
            ("PATH", "/usr/bin"),
            ("HOME", "/root"),
            ("RUST_LOG", "debug"),
            ("__CF_USER_TEXT_ENCODING", "x"),
            ("lower__case__1__x", "y"),
            ("LLM_API_KEY", "something-else"),
        ],
    );
    assert_eq!(parse(&m).scopes.len(), 1);
}

#[test]
fn empty_values_count_as_unset() {
    let m = with(
        base(),
        &[("LLM__QWEN__1__TIMEOUT_S", ""), ("PGW_PRICING_PATH", "  ")],
    );
    let s = parse(&m);
    assert_eq!(s.scope("LLM").unwrap().sources[0].timeout, secs(60.0));
    assert_eq!(s.pricing_path, None);
    let e = parse_err(&with(base(), &[("LLM__QWEN__1__MODEL", "")]));
    assert!(e.to_string().contains("LLM__QWEN__1__MODEL"), "{e}");
}

#[test]
fn global_keys_are_parsed() {
    let m = with(
        base(),
        &[
            ("PGW_LIMITER_BACKEND", "redis"),
            ("PGW_BREAKER_BACKEND", "REDIS"),
            (
                "REDIS_URL",
                &format!("redis://:{REDIS_PASSWORD}@127.0.0.1:6379/0"),
            ),
            ("PGW_CACHE_BACKEND", "redis"),
            ("PGW_CACHE_NAMESPACE", "proj"),
            ("PGW_CACHE_TTL_S", "604800"),
            ("PGW_TELEMETRY_BACKEND", "postgres"),
            (
                "PGW_TELEMETRY_PG_DSN",
                &format!("postgresql://writer:{PG_PASSWORD}@127.0.0.1:5432/pgw"),
            ),
            ("PGW_TELEMETRY_SCHEMA_MODE", "auto"),
            ("PGW_TELEMETRY_TEXT_CAP", "20000"),
            ("PGW_TELEMETRY_PG_POOL_MAX", "9"),
            ("PGW_TELEMETRY_PG_WRITE_TIMEOUT_S", "2.5"),
            ("PGW_PRICING_PATH", "config/prices.json"),
            ("PGW_STRUCTURED_MAX_RETRIES", "0"),
            ("PGW_LEASE_TTL_S", "900"),
        ],
    );
    let s = parse(&m);
    assert_eq!(s.limiter_backend, GovernanceBackendKind::Redis);
    assert_eq!(s.breaker_backend, GovernanceBackendKind::Redis);
    assert!(s
        .redis_url
        .as_ref()
        .unwrap()
        .expose()
        .contains(REDIS_PASSWORD));
    assert_eq!(
        s.cache,
        CacheSettings::Redis {
            namespace: "proj".into(),
            ttl: secs(604800.0)
        }
    );
    match &s.telemetry.backend {
        TelemetryBackendSettings::Postgres {
            dsn,
            pool_max,
            write_timeout,
        } => {
            assert!(dsn.expose().contains(PG_PASSWORD));
            assert_eq!(*pool_max, 9);
            assert_eq!(*write_timeout, secs(2.5));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(s.telemetry.schema_mode, Some(SchemaMode::Auto));
    assert_eq!(s.telemetry.text_cap, Some(20000));
    assert_eq!(s.pricing_path.as_deref(), Some("config/prices.json"));
    assert_eq!(s.structured_max_retries, 0);
    assert_eq!(s.lease_ttl, secs(900.0));

    let sqlite = parse(&with(
        base(),
        &[
            ("PGW_CACHE_BACKEND", "memory"),
            ("PGW_CACHE_NAMESPACE", "p"),
            ("PGW_CACHE_TTL_S", "60"),
            ("PGW_TELEMETRY_BACKEND", "sqlite"),
            ("PGW_TELEMETRY_SQLITE_PATH", "/tmp/t.db"),
        ],
    ));
    assert_eq!(
        sqlite.cache,
        CacheSettings::Memory {
            namespace: "p".into(),
            ttl: secs(60.0)
        }
    );
    assert_eq!(
        sqlite.telemetry.backend,
        TelemetryBackendSettings::Sqlite {
            path: "/tmp/t.db".into()
        }
    );
    assert_eq!(
        sqlite.telemetry.effective_schema_mode(),
        Some(SchemaMode::Auto)
    );
    assert_eq!(s.telemetry.effective_schema_mode(), Some(SchemaMode::Auto));
}

// ─────────────────────────────────── shorthands ───────────────────────────────────

#[test]
fn shorthands_apply_to_every_scope_and_scope_keys_win() {
    let m = with(
        base(),
        &[
            ("VLM__QWEN__1__BASE_URL", "https://vlm.example.invalid/v1"),
            ("VLM__QWEN__1__MODEL", "qwen-vl"),
            ("LLM_TIMEOUT", "100"),
            ("LLM_MAX_RETRIES", "6"),
            ("LLM_RETRY_BASE_DELAY", "2"),
            ("LLM_RETRY_MAX_DELAY", "20"),
            ("LLM_CIRCUIT_BREAKER_THRESHOLD", "9"),
            ("LLM_CIRCUIT_BREAKER_COOLDOWN", "60"),
            ("LLM_TTFT_TIMEOUT", "50"),
            ("LLM_INTER_TOKEN_TIMEOUT", "20"),
            // Scope and source keys of VLM override the shorthands there only.
            ("VLM__RETRY__MAX_ATTEMPTS", "2"),
            ("VLM__RETRY__BACKOFF_BASE_S", "0.1"),
            ("VLM__RETRY__BACKOFF_MAX_S", "1"),
            ("VLM__BREAKER__FAIL_THRESHOLD", "3"),
            ("VLM__BREAKER__COOLDOWN_S", "10"),
            ("VLM__QWEN__1__TIMEOUT_S", "30"),
            ("VLM__QWEN__1__TTFT_TIMEOUT_S", "12"),
            ("VLM__QWEN__1__INTER_TOKEN_TIMEOUT_S", "4"),
        ],
    );
    let s = parse(&m);
    let llm = s.scope("LLM").unwrap();
    assert_eq!(llm.retry.max_attempts, 6);
    assert_eq!(llm.retry.backoff_base, secs(2.0));
    assert_eq!(llm.retry.backoff_max, secs(20.0));
    assert_eq!(llm.breaker.fail_threshold, 9);
    assert_eq!(llm.breaker.cooldown, secs(60.0));
    let src = &llm.sources[0];
    assert_eq!(src.timeout, secs(100.0));
    assert_eq!(src.ttft_timeout, secs(50.0));
    assert_eq!(src.inter_token_timeout, secs(20.0));

    let vlm = s.scope("VLM").unwrap();
    assert_eq!(vlm.retry.max_attempts, 2);
    assert_eq!(vlm.retry.backoff_base, secs(0.1));
    assert_eq!(vlm.retry.backoff_max, secs(1.0));
    assert_eq!(vlm.breaker.fail_threshold, 3);
    assert_eq!(vlm.breaker.cooldown, secs(10.0));
    let src = &vlm.sources[0];
    assert_eq!(src.timeout, secs(30.0));
    assert_eq!(src.ttft_timeout, secs(12.0));
    assert_eq!(src.inter_token_timeout, secs(4.0));
}

#[test]
fn watchdog_defaults_shrink_to_fit_a_short_timeout() {
    let s = parse(&with(base(), &[("LLM__QWEN__1__TIMEOUT_S", "10")]));
    let src = &s.scope("LLM").unwrap().sources[0];
    assert_eq!(src.ttft_timeout, secs(5.0));
    assert_eq!(src.inter_token_timeout, secs(2.5));
    // An explicit TTFT drives the inter-token default.
    let s = parse(&with(base(), &[("LLM__QWEN__1__TTFT_TIMEOUT_S", "8")]));
    assert_eq!(
        s.scope("LLM").unwrap().sources[0].inter_token_timeout,
        secs(4.0)
    );
}

// ─────────────────────────────────── parse errors ───────────────────────────────────

#[test]
fn unknown_source_field_names_the_key_and_the_allowed_fields() {
    let e = parse_err(&with(base(), &[("LLM__QWEN__1__BASEURL", "x")]));
    assert!(matches!(e, ConfigError::UnknownKey { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains("LLM__QWEN__1__BASEURL"), "{msg}");
    for field in SOURCE_FIELDS {
        assert!(msg.contains(field), "{msg} lacks {field}");
    }
}

#[test]
fn unknown_keys_in_our_namespaces_fail_loud() {
    let cases = [
        ("PGW_CACHE_BAKEND", "PGW_CACHE_BACKEND"),
        ("LLM__SELECTR", "SELECTOR"),
        ("LLM__RETRY__MAX_ATTEMPT", "LLM__RETRY__MAX_ATTEMPTS"),
        ("LLM__BREAKER__COOLDOWN", "LLM__BREAKER__COOLDOWN_S"),
        ("LLM__GLOBAL__CONCURRENCY", "LLM__GLOBAL__MAX_CONCURRENCY"),
        (
            "LLM__BACKPRESSURE__STALL",
            "LLM__BACKPRESSURE__STALL_WINDOW_S",
        ),
        ("LLM__QWEN__BASE_URL", "{N}"),
        ("LLM__QWEN__ONE__BASE_URL", "{N}"),
        ("LLM__RETRY__1__MODEL", "RETRY__MAX_ATTEMPTS"),
        ("LLM__qwen__1__MODEL", "LLM__QWEN__1__MODEL"),
        ("LLM__QWEN__1__MODEL__X", "SELECTOR"),
    ];
    for (key, hint) in cases {
        let e = parse_err(&with(base(), &[(key, "1")]));
        let msg = e.to_string();
        assert!(matches!(e, ConfigError::UnknownKey { .. }), "{key}: {e:?}");
        assert!(msg.contains(key), "{key}: {msg}");
        assert!(msg.contains(hint), "{key}: {msg} lacks {hint}");
    }
}

#[test]
fn unknown_enum_values_name_the_key_and_the_allowed_values() {
    let cases = [
        (
            "LLM__SELECTOR",
            "random",
            "health_aware | round_robin | least_inflight",
        ),
        ("LLM__QUOTA_FULL", "block", "wait | fail_fast"),
        ("LLM__CIRCUIT_OPEN", "retry", "fail_fast | wait"),
        ("LLM__QWEN__1__MISSING_DONE", "ignore", "retry | salvage"),
        ("LLM__QWEN__1__ENABLE_THINKING", "maybe", "true, false"),
        ("LLM__QWEN__1__TRUST_ENV", "perhaps", "true, false"),
        ("LLM__QWEN__1__STREAM", "sometimes", "true, false"),
        ("PGW_LIMITER_BACKEND", "etcd", "memory | redis"),
        ("PGW_BREAKER_BACKEND", "disk", "memory | redis"),
        ("PGW_CACHE_BACKEND", "disk", "none | memory | redis"),
        ("PGW_TELEMETRY_BACKEND", "mysql", "none | sqlite | postgres"),
        ("PGW_TELEMETRY_SCHEMA_MODE", "lazy", "auto | manual"),
    ];
    for (key, value, allowed) in cases {
        let e = parse_err(&with(base(), &[(key, value)]));
        let msg = e.to_string();
        assert!(
            matches!(e, ConfigError::InvalidValue { .. }),
            "{key}: {e:?}"
        );
        assert!(
            msg.contains(key) && msg.contains(value) && msg.contains(allowed),
            "{msg}"
        );
    }
}

#[test]
fn unparsable_numbers_are_refused() {
    let cases = [
        ("LLM__QWEN__1__TIMEOUT_S", "fast"),
        ("LLM__QWEN__1__TIMEOUT_S", "-5"),
        ("LLM__QWEN__1__TIMEOUT_S", "inf"),
        ("LLM__QWEN__1__RPM", "-1"),
        ("LLM__QWEN__1__MAX_CONCURRENCY", "1.5"),
        ("LLM__QWEN__1__EST_TOKENS", "lots"),
        ("LLM__GLOBAL__TPM", "x"),
        ("LLM__BREAKER__FAIL_RATE", "NaN"),
        ("LLM__RETRY__MAX_ATTEMPTS", "three"),
        ("PGW_STRUCTURED_MAX_RETRIES", "-1"),
        ("PGW_LEASE_TTL_S", "soon"),
        ("PGW_TELEMETRY_PG_POOL_MAX", "0"),
        ("PGW_TELEMETRY_TEXT_CAP", "-3"),
        ("PGW_TELEMETRY_TEXT_CAP", "0"),
    ];
    for (key, value) in cases {
        let e = parse_err(&with(base(), &[(key, value)]));
        let msg = e.to_string();
        assert!(
            matches!(e, ConfigError::InvalidValue { .. }),
            "{key}={value}: {e:?}"
        );
        assert!(msg.contains(key) && msg.contains(value), "{msg}");
    }
}

#[test]
fn required_keys_have_no_default() {
    let cases: Vec<(BTreeMap<String, String>, &str)> = vec![
        (
            without(base(), &["PGW_LIMITER_BACKEND"]),
            "PGW_LIMITER_BACKEND",
        ),
        (
            without(base(), &["PGW_BREAKER_BACKEND"]),
            "PGW_BREAKER_BACKEND",
        ),
        (
            without(base(), &["LLM__QWEN__1__BASE_URL"]),
            "LLM__QWEN__1__BASE_URL",
        ),
        (
            without(base(), &["LLM__QWEN__1__MODEL"]),
            "LLM__QWEN__1__MODEL",
        ),
        (
            with(
                base(),
                &[
                    ("EMBED__OPENAI__1__BASE_URL", "https://e.example.invalid/v1"),
                    ("EMBED__OPENAI__1__MODEL", "m"),
                ],
            ),
            "EMBED__BATCH_SIZE",
        ),
        (
            with(
                base(),
                &[("PGW_CACHE_BACKEND", "memory"), ("PGW_CACHE_TTL_S", "5")],
            ),
            "PGW_CACHE_NAMESPACE",
        ),
        (
            with(
                base(),
                &[
                    ("PGW_CACHE_BACKEND", "memory"),
                    ("PGW_CACHE_NAMESPACE", "p"),
                ],
            ),
            "PGW_CACHE_TTL_S",
        ),
        (
            with(base(), &[("PGW_TELEMETRY_BACKEND", "sqlite")]),
            "PGW_TELEMETRY_SQLITE_PATH",
        ),
        (
            with(base(), &[("PGW_TELEMETRY_BACKEND", "postgres")]),
            "PGW_TELEMETRY_PG_DSN",
        ),
        (
            with(base(), &[("PGW_LIMITER_BACKEND", "redis")]),
            "REDIS_URL",
        ),
        (
            with(base(), &[("PGW_BREAKER_BACKEND", "redis")]),
            "REDIS_URL",
        ),
        (
            with(
                base(),
                &[
                    ("PGW_CACHE_BACKEND", "redis"),
                    ("PGW_CACHE_NAMESPACE", "p"),
                    ("PGW_CACHE_TTL_S", "5"),
                ],
            ),
            "REDIS_URL",
        ),
    ];
    for (m, key) in cases {
        let e = parse_err(&m);
        assert!(matches!(e, ConfigError::Missing { .. }), "{key}: {e:?}");
        assert!(e.to_string().contains(key), "{key}: {e}");
    }
}

#[test]
fn redis_url_accepts_one_server_a_cluster_and_a_sentinel() {
    let redis = |url: &str| {
        with(
            base(),
            &[
                ("PGW_LIMITER_BACKEND", "redis"),
                ("PGW_BREAKER_BACKEND", "redis"),
                ("REDIS_URL", url),
            ],
        )
    };
    let pw = REDIS_PASSWORD;
    for url in [
        format!("redis://:{pw}@127.0.0.1:6379/0"),
        format!("redis-cluster://:{pw}@127.0.0.1:7000?node=127.0.0.1:7001&node=127.0.0.1:7002"),
        "valkey-cluster://10.0.0.1:7000".to_string(),
        format!(
            "redis-sentinel://:{pw}@127.0.0.1:26379/0?sentinelServiceName=pgw&node=127.0.0.1:26380"
        ),
    ] {
        let s = parse(&redis(&url));
        assert_eq!(s.redis_url.unwrap().expose(), url);
    }
    // Each refusal names REDIS_URL and what was wrong, and never echoes the URL (parse_err checks).
    for (url, reason) in [
        (
            format!("redis-sentinel://:{pw}@127.0.0.1:26379/0"),
            "sentinel",
        ),
        (
            format!("redis-cluster://:{pw}@127.0.0.1:7000?node=nohost"),
            "cluster node",
        ),
        (format!("rediss://:{pw}@127.0.0.1:6380"), "TLS"),
        (
            format!("http://:{pw}@127.0.0.1:6379"),
            "unknown scheme http",
        ),
        (format!(":{pw}@127.0.0.1"), "not a URL"),
    ] {
        let e = parse_err(&redis(&url));
        let text = e.to_string();
        assert!(
            matches!(e, ConfigError::InvalidValue { ref key, .. } if key == "REDIS_URL"),
            "{text}"
        );
        assert!(text.contains(reason), "{url}: {text}");
        assert!(
            text.contains("redis-cluster://"),
            "the allowed forms are listed: {text}"
        );
    }
}

#[test]
fn backends_are_optional_without_scopes() {
    let s = parse(&BTreeMap::new());
    assert!(s.scopes.is_empty());
    assert_eq!(s.limiter_backend, GovernanceBackendKind::Memory);
}

#[test]
fn a_scope_without_sources_is_refused() {
    let e = parse_err(&with(base(), &[("JUDGE__SELECTOR", "round_robin")]));
    assert!(matches!(e, ConfigError::NoSources { .. }), "{e:?}");
    assert!(e.to_string().contains("JUDGE"));
}

#[test]
fn embedding_keys_outside_embedding_scopes_are_refused() {
    for key in ["LLM__BATCH_SIZE", "LLM__NORMALIZE", "LLM__EXPECTED_DIM"] {
        let e = parse_err(&with(base(), &[(key, "1")]));
        assert!(matches!(e, ConfigError::WrongScopeKind { .. }), "{e:?}");
        assert!(e.to_string().contains(key), "{e}");
    }
}

#[test]
fn extra_body_must_be_a_json_object_without_protected_keys() {
    let bad_shape = [
        ("[1, 2]", "array"),
        ("\"text\"", "string"),
        ("42", "number"),
        ("true", "bool"),
        ("null", "null"),
        ("{not json", "unparsable"),
    ];
    for (value, found) in bad_shape {
        let e = parse_err(&with(base(), &[("LLM__QWEN__1__EXTRA_BODY", value)]));
        let msg = e.to_string();
        assert!(
            matches!(e, ConfigError::InvalidValue { .. }),
            "{value}: {e:?}"
        );
        assert!(
            msg.contains("LLM__QWEN__1__EXTRA_BODY") && msg.contains(found),
            "{msg}"
        );
        assert!(msg.contains("JSON object"), "{msg}");
    }
    for protected in ["model", "messages", "stream", "stream_options"] {
        let body = format!(r#"{{"{protected}": 1}}"#);
        let e = parse_err(&with(base(), &[("LLM__QWEN__1__EXTRA_BODY", &body)]));
        assert!(matches!(e, ConfigError::Validation { .. }), "{e:?}");
        let msg = e.to_string();
        assert!(
            msg.contains("LLM__QWEN__1__EXTRA_BODY") && msg.contains(protected),
            "{msg}"
        );
    }
}

#[test]
fn extra_body_is_ignored_in_ocr_and_embed_scopes() {
    let m = with(
        base(),
        &[
            ("OCR__MONKEY__1__BASE_URL", "http://127.0.0.1:7861"),
            ("OCR__MONKEY__1__MODEL", "monkey-ocr"),
            // Not even parsed: it is ignored, with one warning.
            ("OCR__MONKEY__1__EXTRA_BODY", "[1]"),
            ("EMBED__OPENAI__1__BASE_URL", "https://e.example.invalid/v1"),
            ("EMBED__OPENAI__1__MODEL", "m"),
            ("EMBED__OPENAI__1__EXTRA_BODY", r#"{"dimensions": 256}"#),
            ("EMBED__BATCH_SIZE", "8"),
        ],
    );
    let s = parse(&m);
    assert!(s.scope("OCR").unwrap().sources[0].extra_body.is_empty());
    assert!(s.scope("EMBED").unwrap().sources[0].extra_body.is_empty());
}

/// Collects formatted log output for one test.
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn ignored_extra_body_warns_once_per_key() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let m = with(
        base(),
        &[
            ("OCR__MONKEY__1__BASE_URL", "http://127.0.0.1:7861"),
            ("OCR__MONKEY__1__MODEL", "monkey-ocr"),
            ("OCR__MONKEY__1__EXTRA_BODY", r#"{"a": 1}"#),
            ("LLM__QWEN__1__EXTRA_BODY", r#"{"temperature": 0.1}"#),
        ],
    );
    tracing::subscriber::with_default(subscriber, || parse(&m));
    let logs = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert_eq!(logs.matches("EXTRA_BODY is ignored").count(), 1, "{logs}");
    assert!(
        logs.contains("WARN") && logs.contains("OCR__MONKEY__1__EXTRA_BODY"),
        "{logs}"
    );
    assert!(!logs.contains("LLM__QWEN__1__EXTRA_BODY"), "{logs}");
}

// ─────────────────────────────────── assembly guards ───────────────────────────────────

fn guard_err(pairs: &[(&str, &str)]) -> String {
    let e = parse_err(&with(base(), pairs));
    assert!(
        matches!(
            e,
            ConfigError::Guard { .. } | ConfigError::Validation { .. }
        ),
        "{pairs:?}: expected a guard refusal, got {e:?}"
    );
    e.to_string()
}

#[test]
fn watchdog_ordering_guard() {
    let msg = guard_err(&[
        ("LLM__QWEN__1__TTFT_TIMEOUT_S", "10"),
        ("LLM__QWEN__1__INTER_TOKEN_TIMEOUT_S", "10"),
    ]);
    assert!(
        msg.contains("LLM__QWEN__1__INTER_TOKEN_TIMEOUT_S=10"),
        "{msg}"
    );
    assert!(msg.contains("LLM__QWEN__1__TTFT_TIMEOUT_S=10"), "{msg}");

    let msg = guard_err(&[
        ("LLM__QWEN__1__TIMEOUT_S", "20"),
        ("LLM__QWEN__1__TTFT_TIMEOUT_S", "20"),
    ]);
    assert!(
        msg.contains("LLM__QWEN__1__TTFT_TIMEOUT_S=20") && msg.contains("TIMEOUT_S=20"),
        "{msg}"
    );

    let msg = guard_err(&[("LLM__QWEN__1__INTER_TOKEN_TIMEOUT_S", "0")]);
    assert!(
        msg.contains("LLM__QWEN__1__INTER_TOKEN_TIMEOUT_S=0") && msg.contains("> 0"),
        "{msg}"
    );

    // A shorthand that breaks the ordering is caught too.
    let msg = guard_err(&[("LLM_INTER_TOKEN_TIMEOUT", "40")]);
    assert!(msg.contains("INTER_TOKEN_TIMEOUT_S=40"), "{msg}");
    // Boundaries: strictly ordered values pass.
    parse(&with(
        base(),
        &[
            ("LLM__QWEN__1__TIMEOUT_S", "3"),
            ("LLM__QWEN__1__TTFT_TIMEOUT_S", "2"),
            ("LLM__QWEN__1__INTER_TOKEN_TIMEOUT_S", "1"),
        ],
    ));
}

#[test]
fn timeout_must_not_exceed_the_lease_ttl() {
    let msg = guard_err(&[("LLM__QWEN__1__TIMEOUT_S", "1600")]);
    assert!(
        msg.contains("LLM__QWEN__1__TIMEOUT_S=1600") && msg.contains("PGW_LEASE_TTL_S=1500"),
        "{msg}"
    );
    let msg = guard_err(&[("PGW_LEASE_TTL_S", "30")]);
    assert!(
        msg.contains("TIMEOUT_S=60") && msg.contains("PGW_LEASE_TTL_S=30"),
        "{msg}"
    );
    parse(&with(base(), &[("LLM__QWEN__1__TIMEOUT_S", "1500")]));
    let msg = guard_err(&[("PGW_LEASE_TTL_S", "0")]);
    assert!(msg.contains("PGW_LEASE_TTL_S=0"), "{msg}");
}

#[test]
fn stall_window_must_cover_the_slowest_ttft() {
    let msg = guard_err(&[
        ("LLM__QWEN__1__TIMEOUT_S", "600"),
        ("LLM__QWEN__1__TTFT_TIMEOUT_S", "400"),
    ]);
    assert!(
        msg.contains("LLM__BACKPRESSURE__STALL_WINDOW_S=300"),
        "{msg}"
    );
    assert!(msg.contains("LLM__QWEN__1__TTFT_TIMEOUT_S=400"), "{msg}");
    parse(&with(
        base(),
        &[
            ("LLM__QWEN__1__TIMEOUT_S", "600"),
            ("LLM__QWEN__1__TTFT_TIMEOUT_S", "400"),
            ("LLM__BACKPRESSURE__STALL_WINDOW_S", "400"),
        ],
    ));
}

#[test]
fn a_zero_stall_window_is_refused_as_zero_not_as_too_short() {
    let msg = guard_err(&[("LLM__BACKPRESSURE__STALL_WINDOW_S", "0")]);
    assert!(msg.contains("LLM__BACKPRESSURE__STALL_WINDOW_S=0"), "{msg}");
    assert!(msg.contains("must be > 0"), "{msg}");
    assert!(!msg.contains("TTFT"), "{msg}");
}

#[test]
fn explicit_non_positive_est_tokens_with_tpm_is_refused() {
    for est in ["0", "-5"] {
        let msg = guard_err(&[
            ("LLM__QWEN__1__TPM", "6000"),
            ("LLM__QWEN__1__EST_TOKENS", est),
        ]);
        assert!(
            msg.contains(&format!("LLM__QWEN__1__EST_TOKENS={est}")),
            "{msg}"
        );
        assert!(msg.contains("LLM__QWEN__1__TPM=6000"), "{msg}");
    }
    // Without TPM the estimate is unused, and without an explicit value it is derived.
    parse(&with(base(), &[("LLM__QWEN__1__EST_TOKENS", "0")]));
    let s = parse(&with(base(), &[("LLM__QWEN__1__TPM", "6000")]));
    assert_eq!(
        s.scope("LLM").unwrap().sources[0].effective_est_tokens(),
        100
    );
}

#[test]
fn scope_knob_guards() {
    let cases: [(&[(&str, &str)], &str); 9] = [
        (
            &[("LLM__RETRY__MAX_ATTEMPTS", "0")],
            "LLM__RETRY__MAX_ATTEMPTS=0",
        ),
        (&[("LLM_MAX_RETRIES", "0")], "LLM__RETRY__MAX_ATTEMPTS=0"),
        (
            &[("LLM__RETRY__BACKOFF_BASE_S", "40")],
            "LLM__RETRY__BACKOFF_MAX_S=30",
        ),
        (
            &[("LLM__BREAKER__FAIL_RATE", "1.5")],
            "LLM__BREAKER__FAIL_RATE=1.5",
        ),
        (
            &[("LLM__BREAKER__FAIL_RATE", "0")],
            "LLM__BREAKER__FAIL_RATE=0",
        ),
        (
            &[("LLM__BREAKER__MAX_COOLDOWN_S", "10")],
            "LLM__BREAKER__COOLDOWN_S=30",
        ),
        (
            &[("LLM__BREAKER__COOLDOWN_S", "0")],
            "LLM__BREAKER__COOLDOWN_S=0",
        ),
        (
            &[("LLM__BACKPRESSURE__POLL_INTERVAL_S", "0")],
            "POLL_INTERVAL_S=0",
        ),
        (
            &[("LLM__QWEN__1__BASE_URL", "ftp://x")],
            "LLM__QWEN__1__BASE_URL",
        ),
    ];
    for (pairs, needle) in cases {
        let msg = guard_err(pairs);
        assert!(msg.contains(needle), "{pairs:?}: {msg}");
    }
}

#[test]
fn backend_guards() {
    let cache = [
        ("PGW_CACHE_BACKEND", "memory"),
        ("PGW_CACHE_NAMESPACE", "p"),
        ("PGW_CACHE_TTL_S", "0"),
    ];
    let msg = guard_err(&cache);
    assert!(
        msg.contains("PGW_CACHE_TTL_S=0") && msg.contains("> 0"),
        "{msg}"
    );

    let msg = guard_err(&[
        ("PGW_TELEMETRY_BACKEND", "postgres"),
        (
            "PGW_TELEMETRY_PG_DSN",
            &format!("postgresql://w:{PG_PASSWORD}@127.0.0.1/x"),
        ),
        ("PGW_TELEMETRY_PG_WRITE_TIMEOUT_S", "0"),
    ]);
    assert!(msg.contains("PGW_TELEMETRY_PG_WRITE_TIMEOUT_S=0"), "{msg}");
}

#[test]
fn hand_built_settings_are_checked_by_validate() {
    let mut s = parse(&base());
    assert!(s.validate().is_ok());
    s.telemetry.text_cap = Some(0);
    assert!(s
        .validate()
        .unwrap_err()
        .to_string()
        .contains("PGW_TELEMETRY_TEXT_CAP=0"));
    s.telemetry.text_cap = None;
    s.telemetry.backend = TelemetryBackendSettings::Postgres {
        dsn: polygateway::config::Secret::new(format!("postgresql://w:{PG_PASSWORD}@h/x")),
        pool_max: 0,
        write_timeout: secs(5.0),
    };
    let e = s.validate().unwrap_err().to_string();
    assert!(
        e.contains("PGW_TELEMETRY_PG_POOL_MAX=0") && !e.contains(PG_PASSWORD),
        "{e}"
    );
    s.telemetry.backend = TelemetryBackendSettings::None;
    s.cache = CacheSettings::Redis {
        namespace: "p".into(),
        ttl: secs(5.0),
    };
    assert!(s.validate().unwrap_err().to_string().contains("REDIS_URL"));
    s.cache = CacheSettings::Memory {
        namespace: " ".into(),
        ttl: secs(5.0),
    };
    assert!(s
        .validate()
        .unwrap_err()
        .to_string()
        .contains("PGW_CACHE_NAMESPACE"));
    s.cache = CacheSettings::None;

    let llm = s.scopes.get_mut("LLM").unwrap();
    let mut dup = llm.sources[0].clone();
    dup.base_url = "https://other.example.invalid".into();
    llm.sources.push(dup);
    assert!(s.validate().unwrap_err().to_string().contains("unique"));
    let llm = s.scopes.get_mut("LLM").unwrap();
    llm.sources.pop();
    llm.sources[0]
        .extra_body
        .insert("stream".into(), serde_json::json!(true));
    assert!(s
        .validate()
        .unwrap_err()
        .to_string()
        .contains("LLM__QWEN__1__EXTRA_BODY"));
}

// ─────────────────────────────────── secrets ───────────────────────────────────

#[test]
fn secrets_never_appear_in_debug_or_errors() {
    let redis_url = format!("redis://:{REDIS_PASSWORD}@127.0.0.1:6379/0");
    let dsn = format!("postgresql://writer:{PG_PASSWORD}@127.0.0.1:5432/pgw");
    let full = with(
        base(),
        &[
            ("PGW_LIMITER_BACKEND", "redis"),
            ("REDIS_URL", &redis_url),
            ("PGW_TELEMETRY_BACKEND", "postgres"),
            ("PGW_TELEMETRY_PG_DSN", &dsn),
        ],
    );
    let s = parse(&full);
    let debug = format!("{s:?} {:#?}", s.scope("LLM").unwrap());
    for secret in [API_KEY, REDIS_PASSWORD, PG_PASSWORD] {
        assert!(!debug.contains(secret), "Debug leaks a secret: {debug}");
    }

    // Credentials embedded in a base URL are masked in Debug as well.
    let with_creds = parse(&with(
        base(),
        &[(
            "LLM__QWEN__1__BASE_URL",
            &format!("https://u:{API_KEY}@h.example.invalid/v1"),
        )],
    ));
    let debug = format!("{with_creds:?}");
    assert!(
        !debug.contains(API_KEY) && debug.contains("u:***@h.example.invalid"),
        "{debug}"
    );

    // Errors raised while secrets are configured never echo them (parse_err asserts this).
    parse_err(&with(
        full.clone(),
        &[("LLM__QWEN__1__TTFT_TIMEOUT_S", "100")],
    ));
    parse_err(&with(full.clone(), &[("PGW_TELEMETRY_PG_POOL_MAX", "0")]));
    // A malformed REDIS_URL is refused without showing it.
    let e = parse_err(&with(
        full.clone(),
        &[("REDIS_URL", &format!("::{REDIS_PASSWORD}::"))],
    ));
    assert!(
        e.to_string().contains("REDIS_URL") && e.to_string().contains("hidden"),
        "{e}"
    );
    // A base URL carrying credentials is shown masked.
    let e = parse_err(&with(
        full,
        &[("LLM__QWEN__1__BASE_URL", &format!("ftp://u:{API_KEY}@h/v1"))],
    ));
    assert!(e.to_string().contains("u:***@h"), "{e}");
}

#[test]
fn redact_dsn_masks_passwords() {
    use polygateway::config::redact_dsn;
    let cases = [
        (
            "postgresql://u:pw@h:5432/db?sslmode=require",
            "postgresql://u:***@h:5432/db?sslmode=require",
        ),
        ("postgres://u@h/db", "postgres://***@h/db"),
        ("postgres://h/db", "postgres://h/db"),
        ("redis://:pw@h:6379/0", "redis://:***@h:6379/0"),
        (
            "host=h password=pw dbname=x",
            "host=h password=*** dbname=x",
        ),
        (
            "host=h password = 'p w\\'x' user=u",
            "host=h password = *** user=u",
        ),
        ("host=h PASSWORD=pw", "host=h PASSWORD=***"),
        ("host=h", "host=h"),
    ];
    for (dsn, expected) in cases {
        assert_eq!(redact_dsn(dsn), expected, "{dsn}");
    }
}

// ─────────────────────────────────── .env layering ───────────────────────────────────

#[test]
fn dotenv_is_read_and_the_environment_wins() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(".env");
    std::fs::write(
        &path,
        format!(
            "# comment\n\
             LLM__QWEN__1__BASE_URL=https://from-dotenv.example.invalid/v1\n\
             LLM__QWEN__1__API_KEY='{API_KEY}'\n\
             LLM__QWEN__1__MODEL=\"dotenv-model\"\n\
             LLM__QWEN__1__TIMEOUT_S=90\n\
             PGW_LIMITER_BACKEND=memory\n\
             export PGW_BREAKER_BACKEND=memory\n"
        ),
    )
    .unwrap();
    let env = map(&[
        ("LLM__QWEN__1__MODEL", "env-model"),
        ("LLM_MAX_RETRIES", "4"),
    ]);
    let s = Settings::from_env_with(Some(&path), &env).unwrap();
    let llm = s.scope("LLM").unwrap();
    let src = &llm.sources[0];
    assert_eq!(src.model, "env-model", "the environment wins over .env");
    assert_eq!(src.base_url, "https://from-dotenv.example.invalid/v1");
    assert_eq!(src.api_key.expose(), API_KEY);
    assert_eq!(src.timeout, secs(90.0));
    assert_eq!(llm.retry.max_attempts, 4);

    // Without a file only the environment counts.
    let e = Settings::from_env_with(None, &env).unwrap_err();
    assert!(e.to_string().contains("BASE_URL"), "{e}");
}

#[test]
fn dotenv_errors_never_show_line_contents() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(".env");
    std::fs::write(
        &path,
        format!("PGW_LIMITER_BACKEND=memory\nLLM__QWEN__1__API_KEY='{API_KEY}\n"),
    )
    .unwrap();
    let e = Settings::from_env_with(Some(&path), &BTreeMap::new()).unwrap_err();
    assert!(matches!(e, ConfigError::DotEnv { .. }), "{e:?}");
    let msg = format!("{e} {e:?}");
    assert!(!msg.contains(API_KEY), "{msg}");

    let missing = dir.path().join("absent.env");
    let e = Settings::from_env_with(Some(&missing), &BTreeMap::new()).unwrap_err();
    assert!(matches!(e, ConfigError::DotEnv { .. }), "{e:?}");
}

// ─────────────────────────────────── docs vs parser ───────────────────────────────────

fn example_path() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.env.example"))
}

/// The pattern an example key documents: `{SCOPE}__{PROVIDER}__{N}__FIELD`, `{SCOPE}__SUFFIX`,
/// or the key itself.
fn pattern_of(key: &str) -> String {
    if GLOBAL_KEYS.contains(&key) || SHORTHAND_KEYS.contains(&key) {
        return key.to_string();
    }
    let segments: Vec<&str> = key.split("__").collect();
    if segments.len() == 4 {
        return format!("{{SCOPE}}__{{PROVIDER}}__{{N}}__{}", segments[3]);
    }
    format!("{{SCOPE}}__{}", segments[1..].join("__"))
}

#[test]
fn env_example_documents_exactly_the_accepted_keys() {
    let text = std::fs::read_to_string(example_path()).unwrap();
    let mut documented = BTreeSet::new();
    for line in text.lines() {
        let line = line.trim_start_matches('#').trim();
        let Some((key, _)) = line.split_once('=') else {
            continue;
        };
        if key.is_empty()
            || !key
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
        {
            continue;
        }
        documented.insert(pattern_of(key));
    }
    let accepted: BTreeSet<String> = accepted_keys().into_iter().collect();
    let undocumented: Vec<_> = accepted.difference(&documented).collect();
    let unknown: Vec<_> = documented.difference(&accepted).collect();
    assert!(
        undocumented.is_empty(),
        ".env.example misses {undocumented:?}"
    );
    assert!(
        unknown.is_empty(),
        ".env.example documents unknown keys {unknown:?}"
    );
    assert_eq!(
        accepted.len(),
        SOURCE_FIELDS.len() + SCOPE_KEYS.len() + SHORTHAND_KEYS.len() + GLOBAL_KEYS.len()
    );
}

#[test]
fn env_example_active_lines_form_a_valid_config() {
    let s = Settings::from_env_with(Some(example_path()), &BTreeMap::new()).unwrap();
    assert_eq!(s.scope("LLM").unwrap().sources[0].name, "openai_1");
}

#[test]
fn env_example_commented_values_are_all_accepted() {
    // Uncomment every example line (last value wins) and parse: each documented example value is
    // one the parser accepts. Telemetry is switched to postgres so its DSN example is checked too.
    let text = std::fs::read_to_string(example_path()).unwrap();
    let mut m = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim_start_matches('#').trim();
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        if key.is_empty()
            || !key
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
        {
            continue;
        }
        m.insert(key.to_string(), value.to_string());
    }
    m.insert("PGW_TELEMETRY_BACKEND".into(), "postgres".into());
    let s = Settings::from_map(&m).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.scopes.len(), 3);
    assert!(s.scope("EMBED").unwrap().embedding.is_some());
}
