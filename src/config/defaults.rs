//! Default values of the optional configuration keys (docs/behaviour.md §3), written in one place so the
//! parser and the `Default` impls of the settings types cannot drift; a test in `keys` checks the
//! key table's default column (and so the configuration reference) against them.
//!
//! Behaviour-critical keys have no default here on purpose: the limiter and breaker backends,
//! embeddings `BATCH_SIZE`, and each source's `BASE_URL` and `MODEL` must be set explicitly.

use std::time::Duration;

/// Source `TIMEOUT_S` when neither it nor `LLM_TIMEOUT` is set.
pub(crate) const TIMEOUT_S: f64 = 60.0;
/// Source `POOL_IDLE_TIMEOUT_S`: below the common 5 s server keep-alive (llama.cpp, uvicorn,
/// Node, Apache), so the pool seldom offers a connection the server already closed.
pub(crate) const POOL_IDLE_TIMEOUT_S: f64 = 4.0;
/// Ceiling of the derived `TTFT_TIMEOUT_S` default: `min(30, timeout / 2)`.
pub(crate) const TTFT_TIMEOUT_S: f64 = 30.0;
/// Ceiling of the derived `INTER_TOKEN_TIMEOUT_S` default: `min(15, ttft / 2)`.
pub(crate) const INTER_TOKEN_TIMEOUT_S: f64 = 15.0;
/// `RETRY__MAX_ATTEMPTS` (first attempt included).
pub(crate) const MAX_ATTEMPTS: u32 = 3;
/// `RETRY__BACKOFF_BASE_S`.
pub(crate) const BACKOFF_BASE_S: f64 = 1.0;
/// `RETRY__BACKOFF_MAX_S`.
pub(crate) const BACKOFF_MAX_S: f64 = 30.0;
/// `BREAKER__FAIL_THRESHOLD`.
pub(crate) const FAIL_THRESHOLD: u32 = 5;
/// `BREAKER__COOLDOWN_S`.
pub(crate) const COOLDOWN_S: f64 = 30.0;
/// `BREAKER__MIN_CALLS`.
pub(crate) const MIN_CALLS: u32 = 10;
/// `BREAKER__FAIL_RATE`.
pub(crate) const FAIL_RATE: f64 = 0.6;
/// `BREAKER__WINDOW_S`.
pub(crate) const WINDOW_S: f64 = 30.0;
/// Floor of the derived `BREAKER__MAX_COOLDOWN_S` default: `max(300, cooldown)`.
pub(crate) const MAX_COOLDOWN_FLOOR_S: f64 = 300.0;
/// `BACKPRESSURE__STALL_WINDOW_S`.
pub(crate) const STALL_WINDOW_S: f64 = 300.0;
/// `BACKPRESSURE__POLL_INTERVAL_S`.
pub(crate) const POLL_INTERVAL_S: f64 = 1.0;
/// `BACKPRESSURE__BATCH_RESERVE` when the limiter is shared (Redis); a process's own memory
/// gate has no other process to hold it, and its waiting room already orders the classes.
pub(crate) const BATCH_RESERVE_SHARED: f64 = 0.1;
/// `HEDGE__FLOOR_S`: hedge no sooner than this after an attempt was sent.
pub(crate) const HEDGE_FLOOR_S: f64 = 0.25;
/// `HEDGE__CEILING_S`: hedge by then, and while a source's p95 is unknown.
pub(crate) const HEDGE_CEILING_S: f64 = 5.0;
/// `HEDGE__BUDGET`: hedges per attempt sent, at most.
pub(crate) const HEDGE_BUDGET: f64 = 0.05;
/// `PGW_TELEMETRY_PG_POOL_MAX`.
pub(crate) const PG_POOL_MAX: usize = 4;
/// `PGW_TELEMETRY_PG_WRITE_TIMEOUT_S`.
pub(crate) const PG_WRITE_TIMEOUT_S: f64 = 5.0;
/// `PGW_STRUCTURED_MAX_RETRIES`.
pub(crate) const STRUCTURED_MAX_RETRIES: u32 = 2;
/// `PGW_LEASE_TTL_S`.
pub(crate) const LEASE_TTL_S: f64 = 1500.0;
/// `PGW_SERVER_BODY_LIMIT_BYTES`: 32 MiB, room for an OCR page image.
pub(crate) const SERVER_BODY_LIMIT_BYTES: usize = 32 << 20;
/// `PGW_SERVER_REQUEST_TIMEOUT_S`: at least the default source `TIMEOUT_S` times the default
/// attempts, so the server's deadline is not the first to fire.
pub(crate) const SERVER_REQUEST_TIMEOUT_S: f64 = 600.0;
/// `PGW_SERVER_DRAIN_TIMEOUT_S`.
pub(crate) const SERVER_DRAIN_TIMEOUT_S: f64 = 30.0;
/// `PGW_SERVER_HEADER_TIMEOUT_S`: a request's headers arrive whole within this (Go's
/// `ReadHeaderTimeout` as usually set, shorter than nginx's 60 s `client_header_timeout`).
pub(crate) const SERVER_HEADER_TIMEOUT_S: f64 = 10.0;
/// `PGW_SERVER_BODY_TIMEOUT_S`: the grace a request body has before its minimum rate counts
/// (Apache `mod_reqtimeout`'s `body=20`).
pub(crate) const SERVER_BODY_TIMEOUT_S: f64 = 20.0;
/// `PGW_SERVER_BODY_MIN_BYTES_PER_S`: the slowest body accepted past the grace (Apache's
/// `MinRate=500`, doubled).
pub(crate) const SERVER_BODY_MIN_BYTES_PER_S: usize = 1024;
/// `PGW_SERVER_IDLE_TIMEOUT_S`: how long a keep-alive connection may wait for its next request
/// (nginx `keepalive_timeout` is 75 s; below the 90 s idle timeout of reqwest's pool would race
/// it, so clients should keep theirs shorter).
pub(crate) const SERVER_IDLE_TIMEOUT_S: f64 = 60.0;

/// The TTFT default for a source whose total timeout is `timeout`: `min(30 s, timeout / 2)`, so
/// the default always satisfies `ttft < timeout`.
pub(crate) fn ttft_for(timeout: Duration) -> Duration {
    Duration::from_secs_f64(TTFT_TIMEOUT_S).min(timeout / 2)
}

/// The inter-token default for a source whose TTFT deadline is `ttft`: `min(15 s, ttft / 2)`,
/// so the default always satisfies `inter_token < ttft`.
pub(crate) fn inter_token_for(ttft: Duration) -> Duration {
    Duration::from_secs_f64(INTER_TOKEN_TIMEOUT_S).min(ttft / 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_watchdog_defaults_keep_the_ordering() {
        for timeout in [1.0, 10.0, 59.0, 60.0, 61.0, 300.0] {
            let timeout = Duration::from_secs_f64(timeout);
            let ttft = ttft_for(timeout);
            let inter = inter_token_for(ttft);
            assert!(Duration::ZERO < inter && inter < ttft && ttft < timeout);
        }
        assert_eq!(ttft_for(Duration::from_secs(60)), Duration::from_secs(30));
        assert_eq!(
            inter_token_for(Duration::from_secs(30)),
            Duration::from_secs(15)
        );
        assert_eq!(ttft_for(Duration::from_secs(20)), Duration::from_secs(10));
    }
}

#[cfg(test)]
mod examples {
    //! Usage cases of crate-private items (they were doc examples while the items were public).

    #[test]
    fn timeout_s_example() {
        use crate::config::{defaults, Settings};
        use std::collections::BTreeMap;
        use std::time::Duration;
        let map: BTreeMap<String, String> = [
            ("PGW_LIMITER_BACKEND", "memory"),
            ("PGW_BREAKER_BACKEND", "memory"),
            ("LLM__QWEN__1__BASE_URL", "https://example.invalid/v1"),
            ("LLM__QWEN__1__MODEL", "qwen-plus"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let settings = Settings::from_map(&map).unwrap();
        let source = &settings.scope("LLM").unwrap().sources[0];
        assert_eq!(source.timeout, Duration::from_secs_f64(defaults::TIMEOUT_S));
    }

    #[test]
    fn ttft_timeout_s_example() {
        use crate::config::defaults::{ttft_for, TTFT_TIMEOUT_S};
        use std::time::Duration;
        // A long total timeout hits the ceiling; a short one gets half of itself.
        assert_eq!(
            ttft_for(Duration::from_secs(600)),
            Duration::from_secs_f64(TTFT_TIMEOUT_S)
        );
        assert_eq!(ttft_for(Duration::from_secs(20)), Duration::from_secs(10));
    }

    #[test]
    fn inter_token_timeout_s_example() {
        use crate::config::defaults::{inter_token_for, INTER_TOKEN_TIMEOUT_S, TTFT_TIMEOUT_S};
        use std::time::Duration;
        // The ceiling is exactly half of the TTFT ceiling, so the defaults chain without a gap.
        assert_eq!(INTER_TOKEN_TIMEOUT_S, TTFT_TIMEOUT_S / 2.0);
        assert_eq!(
            inter_token_for(Duration::from_secs(120)),
            Duration::from_secs_f64(INTER_TOKEN_TIMEOUT_S)
        );
    }

    #[test]
    fn max_attempts_example() {
        use crate::config::{defaults, RetrySettings};
        // One first attempt plus two retries.
        assert_eq!(
            RetrySettings::default().max_attempts,
            defaults::MAX_ATTEMPTS
        );
        assert_eq!(defaults::MAX_ATTEMPTS - 1, 2);
    }

    #[test]
    fn backoff_base_s_example() {
        use crate::config::{defaults, RetrySettings};
        use std::time::Duration;
        let retry = RetrySettings::default();
        assert_eq!(
            retry.backoff_base,
            Duration::from_secs_f64(defaults::BACKOFF_BASE_S)
        );
        // The assembly guards require base <= cap; the defaults satisfy it.
        assert!(retry.backoff_base <= retry.backoff_max);
    }

    #[test]
    fn backoff_max_s_example() {
        use crate::config::{defaults, RetrySettings};
        use std::time::Duration;
        assert_eq!(
            RetrySettings::default().backoff_max,
            Duration::from_secs_f64(defaults::BACKOFF_MAX_S)
        );
        // A doubling backoff from the base reaches the cap after five steps (1, 2, 4, 8, 16, 32 → 30).
        assert!(defaults::BACKOFF_BASE_S * 2f64.powi(5) > defaults::BACKOFF_MAX_S);
    }

    #[test]
    fn fail_threshold_example() {
        use crate::config::{defaults, BreakerSettings};
        assert_eq!(
            BreakerSettings::default().fail_threshold,
            defaults::FAIL_THRESHOLD
        );
        assert_eq!(defaults::FAIL_THRESHOLD, 5);
    }

    #[test]
    fn cooldown_s_example() {
        use crate::config::{defaults, BreakerSettings};
        use std::time::Duration;
        let breaker = BreakerSettings::default();
        assert_eq!(
            breaker.cooldown,
            Duration::from_secs_f64(defaults::COOLDOWN_S)
        );
        // The default cooldown is below the max-cooldown floor, so the floor applies.
        assert!(breaker.effective_max_cooldown() > breaker.cooldown);
    }

    #[test]
    fn min_calls_example() {
        use crate::config::{defaults, BreakerSettings};
        // The failure-rate rule needs at least this many calls in the window before it can trip,
        // which is more than the consecutive-failure threshold.
        assert_eq!(BreakerSettings::default().min_calls, defaults::MIN_CALLS);
        const { assert!(defaults::MIN_CALLS > defaults::FAIL_THRESHOLD) };
    }

    #[test]
    fn fail_rate_example() {
        use crate::config::{defaults, BreakerSettings};
        assert_eq!(BreakerSettings::default().fail_rate, defaults::FAIL_RATE);
        // The guards accept a rate in (0, 1].
        const { assert!(defaults::FAIL_RATE > 0.0 && defaults::FAIL_RATE <= 1.0) };
    }

    #[test]
    fn window_s_example() {
        use crate::config::{defaults, BreakerSettings};
        use std::time::Duration;
        assert_eq!(
            BreakerSettings::default().window,
            Duration::from_secs_f64(defaults::WINDOW_S)
        );
    }

    #[test]
    fn max_cooldown_floor_s_example() {
        use crate::config::{defaults, BreakerSettings};
        use std::time::Duration;
        let floor = Duration::from_secs_f64(defaults::MAX_COOLDOWN_FLOOR_S);
        assert_eq!(BreakerSettings::default().effective_max_cooldown(), floor);
        // A cooldown above the floor raises the derived maximum with it.
        let slow = BreakerSettings {
            cooldown: Duration::from_secs(600),
            ..Default::default()
        };
        assert_eq!(slow.effective_max_cooldown(), Duration::from_secs(600));
    }

    #[test]
    fn stall_window_s_example() {
        use crate::config::{defaults, BackpressureSettings};
        use std::time::Duration;
        let stall = BackpressureSettings::default().stall_window;
        assert_eq!(stall, Duration::from_secs_f64(defaults::STALL_WINDOW_S));
        // It must be at least the slowest TTFT; the default covers the TTFT ceiling.
        const { assert!(defaults::STALL_WINDOW_S >= defaults::TTFT_TIMEOUT_S) };
    }

    #[test]
    fn poll_interval_s_example() {
        use crate::config::{defaults, BackpressureSettings};
        use std::time::Duration;
        assert_eq!(
            BackpressureSettings::default().poll_interval,
            Duration::from_secs_f64(defaults::POLL_INTERVAL_S)
        );
    }

    #[test]
    fn pg_pool_max_example() {
        use crate::config::{defaults, Settings, TelemetryBackendSettings};
        use std::collections::BTreeMap;
        let map: BTreeMap<String, String> = [
            ("PGW_TELEMETRY_BACKEND", "postgres"),
            ("PGW_TELEMETRY_PG_DSN", "postgres://app:pw@db/telemetry"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let settings = Settings::from_map(&map).unwrap();
        let TelemetryBackendSettings::Postgres { pool_max, .. } = settings.telemetry.backend else {
            panic!("postgres backend expected");
        };
        assert_eq!(pool_max, defaults::PG_POOL_MAX);
    }

    #[test]
    fn pg_write_timeout_s_example() {
        use crate::config::{defaults, Settings, TelemetryBackendSettings};
        use std::collections::BTreeMap;
        use std::time::Duration;
        let map: BTreeMap<String, String> = [
            ("PGW_TELEMETRY_BACKEND", "postgres"),
            ("PGW_TELEMETRY_PG_DSN", "host=db user=app password=pw"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let settings = Settings::from_map(&map).unwrap();
        let TelemetryBackendSettings::Postgres { write_timeout, .. } = settings.telemetry.backend
        else {
            panic!("postgres backend expected");
        };
        assert_eq!(
            write_timeout,
            Duration::from_secs_f64(defaults::PG_WRITE_TIMEOUT_S)
        );
    }

    #[test]
    fn structured_max_retries_example() {
        use crate::config::{defaults, Settings};
        use std::collections::BTreeMap;
        // An empty configuration (no scopes) is valid and carries every global default.
        let settings = Settings::from_map(&BTreeMap::new()).unwrap();
        assert_eq!(
            settings.structured_max_retries,
            defaults::STRUCTURED_MAX_RETRIES
        );
    }

    #[test]
    fn lease_ttl_s_example() {
        use crate::config::{defaults, Settings};
        use std::collections::BTreeMap;
        use std::time::Duration;
        let settings = Settings::from_map(&BTreeMap::new()).unwrap();
        assert_eq!(
            settings.lease_ttl,
            Duration::from_secs_f64(defaults::LEASE_TTL_S)
        );
        // A source timeout must not exceed the lease TTL; the default timeout is well inside it.
        const { assert!(defaults::TIMEOUT_S <= defaults::LEASE_TTL_S) };
    }

    #[test]
    fn ttft_for_example() {
        use crate::config::defaults::ttft_for;
        use std::time::Duration;
        assert_eq!(ttft_for(Duration::from_secs(60)), Duration::from_secs(30));
        assert_eq!(ttft_for(Duration::from_secs(8)), Duration::from_secs(4));
        assert_eq!(ttft_for(Duration::from_secs(300)), Duration::from_secs(30));
    }

    #[test]
    fn inter_token_for_example() {
        use crate::config::defaults::{inter_token_for, ttft_for};
        use std::time::Duration;
        assert_eq!(
            inter_token_for(Duration::from_secs(30)),
            Duration::from_secs(15)
        );
        assert_eq!(
            inter_token_for(Duration::from_secs(4)),
            Duration::from_secs(2)
        );
        // Chained from a total timeout of 10 s: TTFT 5 s, inter-token 2.5 s.
        let ttft = ttft_for(Duration::from_secs(10));
        assert_eq!(inter_token_for(ttft), Duration::from_millis(2500));
    }

    #[test]
    fn server_defaults_example() {
        use crate::config::{defaults, Settings};
        use std::collections::BTreeMap;
        use std::time::Duration;
        let settings = Settings::from_map(&BTreeMap::new()).unwrap();
        assert_eq!(
            settings.server.body_limit_bytes,
            defaults::SERVER_BODY_LIMIT_BYTES
        );
        assert_eq!(
            settings.server.drain_timeout,
            Duration::from_secs_f64(defaults::SERVER_DRAIN_TIMEOUT_S)
        );
        // The server's deadline is not the first to fire.
        const { assert!(defaults::SERVER_REQUEST_TIMEOUT_S >= defaults::TIMEOUT_S * 3.0) };
    }
}
