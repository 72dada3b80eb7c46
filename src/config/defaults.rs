//! Default values of the optional configuration keys (SPEC §3), written in one place so the
//! parser, the `Default` impls of the settings types and `.env.example` cannot drift.
//!
//! Behaviour-critical keys have no default here on purpose: the limiter and breaker backends,
//! embeddings `BATCH_SIZE`, and each source's `BASE_URL` and `MODEL` must be set explicitly.

use std::time::Duration;

/// Source `TIMEOUT_S` when neither it nor `LLM_TIMEOUT` is set.
pub const TIMEOUT_S: f64 = 60.0;
/// Ceiling of the derived `TTFT_TIMEOUT_S` default: `min(30, timeout / 2)`.
pub const TTFT_TIMEOUT_S: f64 = 30.0;
/// Ceiling of the derived `INTER_TOKEN_TIMEOUT_S` default: `min(15, ttft / 2)`.
pub const INTER_TOKEN_TIMEOUT_S: f64 = 15.0;
/// `RETRY__MAX_ATTEMPTS` (first attempt included).
pub const MAX_ATTEMPTS: u32 = 3;
/// `RETRY__BACKOFF_BASE_S`.
pub const BACKOFF_BASE_S: f64 = 1.0;
/// `RETRY__BACKOFF_MAX_S`.
pub const BACKOFF_MAX_S: f64 = 30.0;
/// `BREAKER__FAIL_THRESHOLD`.
pub const FAIL_THRESHOLD: u32 = 5;
/// `BREAKER__COOLDOWN_S`.
pub const COOLDOWN_S: f64 = 30.0;
/// `BREAKER__MIN_CALLS`.
pub const MIN_CALLS: u32 = 10;
/// `BREAKER__FAIL_RATE`.
pub const FAIL_RATE: f64 = 0.6;
/// `BREAKER__WINDOW_S`.
pub const WINDOW_S: f64 = 30.0;
/// Floor of the derived `BREAKER__MAX_COOLDOWN_S` default: `max(300, cooldown)`.
pub const MAX_COOLDOWN_FLOOR_S: f64 = 300.0;
/// `BACKPRESSURE__STALL_WINDOW_S`.
pub const STALL_WINDOW_S: f64 = 300.0;
/// `BACKPRESSURE__POLL_INTERVAL_S`.
pub const POLL_INTERVAL_S: f64 = 1.0;
/// `PGW_TELEMETRY_PG_POOL_MAX`.
pub const PG_POOL_MAX: usize = 4;
/// `PGW_TELEMETRY_PG_WRITE_TIMEOUT_S`.
pub const PG_WRITE_TIMEOUT_S: f64 = 5.0;
/// `PGW_STRUCTURED_MAX_RETRIES`.
pub const STRUCTURED_MAX_RETRIES: u32 = 2;
/// `PGW_LEASE_TTL_S`.
pub const LEASE_TTL_S: f64 = 1500.0;

/// The TTFT default for a source whose total timeout is `timeout`: `min(30 s, timeout / 2)`, so
/// the default always satisfies `ttft < timeout`.
pub fn ttft_for(timeout: Duration) -> Duration {
    Duration::from_secs_f64(TTFT_TIMEOUT_S).min(timeout / 2)
}

/// The inter-token default for a source whose TTFT deadline is `ttft`: `min(15 s, ttft / 2)`,
/// so the default always satisfies `inter_token < ttft`.
pub fn inter_token_for(ttft: Duration) -> Duration {
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
