//! A configuration that names a backend whose cargo feature is off is refused with an error
//! naming the key and the feature (never a silent fallback to another backend). CI runs this file
//! both with every feature and with `--no-default-features --features rustls`, so both branches
//! (and the rustls-only TLS setup) are exercised.

use std::collections::BTreeMap;

use polygateway::config::{ConfigError, Settings};

fn settings(extra: &[(&str, &str)]) -> Result<Settings, ConfigError> {
    let mut env: BTreeMap<String, String> = [
        ("PGW_LIMITER_BACKEND", "memory"),
        ("PGW_BREAKER_BACKEND", "memory"),
        ("LLM__OPENAI__1__BASE_URL", "http://127.0.0.1:9"),
        ("LLM__OPENAI__1__MODEL", "m"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    for (k, v) in extra {
        env.insert(k.to_string(), v.to_string());
    }
    Settings::from_map(&env)
}

/// `Ok` when `compiled`, else the feature error for `key=value`.
fn expect(result: Result<Settings, ConfigError>, compiled: bool, key: &str, feature: &str) {
    match result {
        Ok(_) => assert!(compiled, "{key} accepted without the `{feature}` feature"),
        Err(err) => {
            assert!(!compiled, "{key} refused although `{feature}` is on: {err}");
            assert!(
                matches!(&err, ConfigError::FeatureDisabled { key: k, feature: f, .. }
                    if k == key && *f == feature),
                "{err:?}"
            );
            let text = err.to_string();
            assert!(
                text.contains(key) && text.contains(&format!("`{feature}`")),
                "{text}"
            );
        }
    }
}

#[test]
fn redis_backends_need_the_redis_feature() {
    let url = ("REDIS_URL", "redis://127.0.0.1:6379");
    let redis = cfg!(feature = "redis");
    let limiter = settings(&[("PGW_LIMITER_BACKEND", "redis"), url]);
    expect(limiter, redis, "PGW_LIMITER_BACKEND", "redis");
    let breaker = settings(&[("PGW_BREAKER_BACKEND", "redis"), url]);
    expect(breaker, redis, "PGW_BREAKER_BACKEND", "redis");
    let cache = settings(&[
        ("PGW_CACHE_BACKEND", "redis"),
        ("PGW_CACHE_NAMESPACE", "ns"),
        ("PGW_CACHE_TTL_S", "60"),
        url,
    ]);
    expect(cache, redis, "PGW_CACHE_BACKEND", "redis");
}

#[test]
fn telemetry_sinks_need_their_feature() {
    let sqlite = settings(&[
        ("PGW_TELEMETRY_BACKEND", "sqlite"),
        ("PGW_TELEMETRY_SQLITE_PATH", "t.db"),
    ]);
    expect(
        sqlite,
        cfg!(feature = "sqlite"),
        "PGW_TELEMETRY_BACKEND",
        "sqlite",
    );
    let postgres = settings(&[
        ("PGW_TELEMETRY_BACKEND", "postgres"),
        ("PGW_TELEMETRY_PG_DSN", "postgres://u@127.0.0.1/db"),
    ]);
    expect(
        postgres,
        cfg!(feature = "postgres"),
        "PGW_TELEMETRY_BACKEND",
        "postgres",
    );
}

#[tokio::test]
async fn hand_built_settings_are_refused_at_assembly_too() {
    // Settings built in code skip the parser; the builder checks again before starting anything.
    let mut s = settings(&[]).unwrap();
    s.limiter_backend = polygateway::config::GovernanceBackendKind::Redis;
    s.redis_url = Some(polygateway::config::Secret::new("redis://127.0.0.1:1"));
    let built = polygateway::Gateway::builder(s).build().await;
    if cfg!(feature = "redis") {
        // Compiled in: it gets past the feature check. Nothing listens on port 1, and a Redis
        // that is down is an outage, not a build error (issue #51): the gateway is built and
        // its calls fail closed.
        let gw = built.unwrap_or_else(|e| panic!("refused at assembly: {e}"));
        let err = gw
            .chat(vec![polygateway::Message::user("hi")])
            .await
            .unwrap_err();
        let u = err.unavailable().unwrap_or_else(|| panic!("{err}"));
        assert_eq!(
            u.reason,
            polygateway::UnavailableReason::GovernanceBackendDown
        );
        gw.shutdown().await;
    } else {
        let Err(err) = built else {
            panic!("PGW_LIMITER_BACKEND=redis accepted without the `redis` feature")
        };
        let text = err.to_string();
        assert!(
            text.contains("PGW_LIMITER_BACKEND=redis") && text.contains("`redis`"),
            "{text}"
        );
    }
}

/// With `rustls` alone, reqwest has no crypto provider of its own (`rustls-no-provider`): the
/// gateway installs ring before it builds a source's client, or that build would panic.
#[cfg(all(feature = "rustls", not(feature = "native-tls")))]
#[tokio::test]
async fn rustls_alone_builds_the_https_clients() {
    let s = settings(&[("LLM__OPENAI__1__BASE_URL", "https://127.0.0.1:9")]).unwrap();
    let gateway = polygateway::Gateway::builder(s).build().await.unwrap();
    gateway.shutdown().await;
}
