//! A source's pooled client, and how its idle timeout follows the upstream's `Keep-Alive:
//! timeout=` (docs/behaviour.md §7.1).
//!
//! A server that keeps connections alive for `N` seconds closes an idle one after `N`; a pool that
//! keeps it longer offers the next request a connection the server already closed (re-sent by
//! `resend`, but one wasted round trip each time). `POOL_IDLE_TIMEOUT_S` (default 4 s) is below
//! the common 5 s; a server that announces less is followed: its answer's `Keep-Alive: timeout=N`
//! lowers the source's idle timeout to [`idle_timeout_for`]`(N)`. hyper's pool has one idle
//! timeout per client, so lowering it means replacing the source's client with one built with the
//! lower value; idle connections of the old client close when its last in-flight request ends.
//!
//! The timeout only ever goes down (a server announcing more than the configured value is not
//! followed above it), and it moves in whole 100 ms steps, so a source's client is replaced once
//! for a server that announces one value, and a bounded number of times whatever it announces.
//! A client given by the application (`with_client`) is never replaced: its settings are the
//! application's, not this crate's to rebuild.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError, RwLock, TryLockError};
use std::time::Duration;

use std::sync::Arc;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use super::TransportConfig;

/// The lowest idle timeout a server's announcement can bring a pool to: below it, nearly every
/// request would open a connection, and a stale pick is rare enough for `resend` to absorb.
pub(crate) const MIN_IDLE_TIMEOUT: Duration = Duration::from_millis(500);

/// Taken off the announced timeout: the server starts its idle clock when it has written the
/// answer, the client when it has read it, and a request picked just before the end of the
/// window still has to reach the server. A fixed second covers network and scheduling delay
/// regardless of `N` (a percentage would leave 0.2 s at `N = 1` and 12 s at `N = 60`).
const MARGIN: Duration = Duration::from_secs(1);

/// Not among `http`'s constants (it is a hop-by-hop header of HTTP/1.1).
const KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");

/// Step the adopted timeout is rounded down to, bounding how many times a pool can be replaced.
const STEP_MS: u64 = 100;

/// The `timeout` parameter of a `Keep-Alive` header value (`timeout=5, max=100`): comma-separated
/// `name=value` parameters, names case-insensitive, the value whole or decimal seconds, optionally
/// quoted. `None` when there is no `timeout` parameter or its value is not a finite, non-negative
/// number of seconds (junk is ignored, never an error). Allocates nothing.
pub(crate) fn keep_alive_timeout(value: &str) -> Option<Duration> {
    let raw = value.split(',').find_map(|param| {
        let (name, value) = param.split_once('=')?;
        name.trim()
            .eq_ignore_ascii_case("timeout")
            .then(|| value.trim().trim_matches('"'))
    })?;
    // `f64::from_str` also takes `inf`, `nan` and exponents: only digits and one dot are seconds.
    if raw.is_empty() || !raw.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return None;
    }
    Duration::try_from_secs_f64(raw.parse().ok()?).ok()
}

/// The idle timeout a pool adopts for a server that announced `announced`: `announced` minus
/// [`MARGIN`] but at least half of it (a short announcement keeps a usable window), rounded down
/// to 100 ms, never below [`MIN_IDLE_TIMEOUT`]. `5 s → 4 s`, `2 s → 1 s`, `1 s → 0.5 s`.
pub(crate) fn idle_timeout_for(announced: Duration) -> Duration {
    let kept = announced.saturating_sub(MARGIN).max(announced / 2);
    let millis = u64::try_from(kept.as_millis()).unwrap_or(u64::MAX);
    Duration::from_millis(millis - millis % STEP_MS).max(MIN_IDLE_TIMEOUT)
}

/// The lower idle timeout a pool now at `current` moves to after a `Keep-Alive` header saying
/// `announced`; `None` when it is already at or below what the announcement asks for (the
/// timeout only goes down, so it never exceeds the configured value).
pub(crate) fn lowered_idle_timeout(current: Duration, announced: Duration) -> Option<Duration> {
    let target = idle_timeout_for(announced);
    (target < current).then_some(target)
}

/// One source's pooled client: the one ordinary requests go out on.
pub(crate) struct SourcePool {
    client: RwLock<reqwest::Client>,
    /// What the client was built with, for rebuilding it with a lower idle timeout; `None` for a
    /// client the application gave, which is never replaced.
    config: Option<Arc<TransportConfig>>,
    /// The current client's idle timeout in milliseconds (read without the lock on every answer).
    idle_timeout_ms: AtomicU64,
    /// Held while a lower-timeout client is built, so concurrent answers saying the same build it
    /// once (the others go on; the next answer says it again if it is still needed).
    rebuilding: Mutex<()>,
}

impl std::fmt::Debug for SourcePool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SourcePool")
            .field("idle_timeout", &self.idle_timeout())
            .finish_non_exhaustive()
    }
}

impl SourcePool {
    /// A pool this crate builds (`client::build_client`) and may rebuild with a lower idle timeout.
    pub(crate) fn built(config: &Arc<TransportConfig>) -> Self {
        Self {
            client: RwLock::new(super::client::build_client(config)),
            idle_timeout_ms: AtomicU64::new(millis(config.pool_idle_timeout)),
            config: Some(Arc::clone(config)),
            rebuilding: Mutex::new(()),
        }
    }

    /// A client the application gave: used as it is, never replaced, its idle timeout unknown.
    pub(crate) fn given(client: reqwest::Client) -> Self {
        Self {
            client: RwLock::new(client),
            idle_timeout_ms: AtomicU64::new(u64::MAX),
            config: None,
            rebuilding: Mutex::new(()),
        }
    }

    /// The current client (a handle: reqwest's client is reference-counted).
    pub(crate) fn client(&self) -> reqwest::Client {
        self.client
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The current idle timeout of a pool this crate built; `None` for a given client.
    pub(crate) fn idle_timeout(&self) -> Option<Duration> {
        self.config
            .as_ref()
            .map(|_| Duration::from_millis(self.idle_timeout_ms.load(Ordering::Relaxed)))
    }

    /// Follow an answer's `Keep-Alive: timeout=`: when it asks for a shorter idle timeout than the
    /// pool's, replace the client with one built with [`lowered_idle_timeout`]'s value. One
    /// header lookup per answer; nothing is allocated unless the client is replaced.
    pub(crate) fn observe(&self, headers: &HeaderMap) {
        let Some(value) = headers.get(KEEP_ALIVE) else {
            return;
        };
        let Some(config) = &self.config else {
            return;
        };
        let Some(announced) = header_timeout(value) else {
            return;
        };
        let current = Duration::from_millis(self.idle_timeout_ms.load(Ordering::Relaxed));
        if lowered_idle_timeout(current, announced).is_none() {
            return;
        }
        let _building = match self.rebuilding.try_lock() {
            Ok(guard) => guard,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => return,
        };
        // Another answer may have lowered it since the check above.
        let current = Duration::from_millis(self.idle_timeout_ms.load(Ordering::Relaxed));
        let Some(lowered) = lowered_idle_timeout(current, announced) else {
            return;
        };
        // Built outside the client lock: requests keep taking the old client meanwhile.
        let rebuilt = super::client::build_client_with_idle_timeout(config, lowered);
        *self.client.write().unwrap_or_else(PoisonError::into_inner) = rebuilt;
        self.idle_timeout_ms
            .store(millis(lowered), Ordering::Relaxed);
        tracing::info!(
            source = %config.name,
            announced_s = announced.as_secs_f64(),
            idle_timeout_s = lowered.as_secs_f64(),
            "the upstream's Keep-Alive timeout is shorter than the pool's: idle connections to it are now dropped sooner"
        );
    }
}

fn header_timeout(value: &HeaderValue) -> Option<Duration> {
    keep_alive_timeout(value.to_str().ok()?)
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timeout_parameter_is_read_among_others() {
        let s = |secs: f64| Some(Duration::from_secs_f64(secs));
        assert_eq!(keep_alive_timeout("timeout=5, max=100"), s(5.0));
        assert_eq!(keep_alive_timeout("max=100,timeout=2"), s(2.0));
        assert_eq!(keep_alive_timeout(" Timeout = 1.5 "), s(1.5));
        assert_eq!(keep_alive_timeout("timeout=\"3\""), s(3.0));
        assert_eq!(keep_alive_timeout("timeout=0"), s(0.0));
        // The first `timeout` decides.
        assert_eq!(keep_alive_timeout("timeout=7, timeout=1"), s(7.0));
    }

    #[test]
    fn junk_is_ignored() {
        for junk in [
            "",
            "max=100",
            "timeout",
            "timeout=",
            "timeout=-1",
            "timeout=abc",
            "timeout=5s",
            "timeout=inf",
            "timeout=NaN",
            "timeout=1e3",
            "timeout=1.2.3",
            "timeout=99999999999999999999999999",
            "xtimeout=5",
        ] {
            assert_eq!(keep_alive_timeout(junk), None, "{junk:?}");
        }
    }

    #[test]
    fn the_adopted_timeout_keeps_a_margin_and_a_floor() {
        let ms = Duration::from_millis;
        assert_eq!(idle_timeout_for(ms(5_000)), ms(4_000));
        assert_eq!(idle_timeout_for(ms(60_000)), ms(59_000));
        assert_eq!(idle_timeout_for(ms(2_000)), ms(1_000));
        // Half of a short announcement, in whole 100 ms steps.
        assert_eq!(idle_timeout_for(ms(1_500)), ms(700));
        assert_eq!(idle_timeout_for(ms(1_000)), MIN_IDLE_TIMEOUT);
        assert_eq!(idle_timeout_for(Duration::ZERO), MIN_IDLE_TIMEOUT);
        assert_eq!(idle_timeout_for(ms(4_550)), ms(3_500));
    }

    #[test]
    fn the_timeout_only_goes_down() {
        let s = Duration::from_secs;
        // The default 4 s already suits the common 5 s keep-alive.
        assert_eq!(lowered_idle_timeout(s(4), s(5)), None);
        assert_eq!(lowered_idle_timeout(s(30), s(5)), Some(s(4)));
        // A longer announcement never raises the configured value.
        assert_eq!(lowered_idle_timeout(s(4), s(75)), None);
        assert_eq!(lowered_idle_timeout(s(4), s(3)), Some(s(2)));
        // Once lowered, the same announcement changes nothing.
        assert_eq!(lowered_idle_timeout(s(2), s(3)), None);
    }

    fn keep_alive(value: &'static str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("keep-alive", HeaderValue::from_static(value));
        h
    }

    #[test]
    fn a_built_pool_follows_a_shorter_announcement_and_never_rises() {
        let mut config = TransportConfig::for_tests("http://127.0.0.1:9/v1");
        config.pool_idle_timeout = Duration::from_secs(30);
        let pool = SourcePool::built(&Arc::new(config));
        assert_eq!(pool.idle_timeout(), Some(Duration::from_secs(30)));
        pool.observe(&HeaderMap::new());
        pool.observe(&keep_alive("max=100"));
        assert_eq!(pool.idle_timeout(), Some(Duration::from_secs(30)));
        pool.observe(&keep_alive("timeout=5, max=100"));
        assert_eq!(pool.idle_timeout(), Some(Duration::from_secs(4)));
        pool.observe(&keep_alive("timeout=75"));
        assert_eq!(pool.idle_timeout(), Some(Duration::from_secs(4)));
        pool.observe(&keep_alive("timeout=2"));
        assert_eq!(pool.idle_timeout(), Some(Duration::from_secs(1)));
    }

    #[test]
    fn a_given_client_is_never_replaced() {
        let pool = SourcePool::given(reqwest::Client::new());
        pool.observe(&keep_alive("timeout=1"));
        assert_eq!(pool.idle_timeout(), None);
        assert!(pool.config.is_none());
    }
}
