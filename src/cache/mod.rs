//! Response cache (docs/behaviour.md §9.1): the cache key, the [`ResponseCache`] port with its memory and Redis
//! backends, and single-flight coalescing of identical concurrent calls.
//!
//! This module decides *how* responses are keyed and stored. It does not decide *what* may be
//! stored (only successful, ladder-approved results — the runtime's job), nor does it record
//! telemetry for hits.
//!
//! Degrade direction (docs/behaviour.md §10.6): a cache backend never fails a call. Every backend error or
//! corrupt entry becomes a [`CacheLookup::Miss`] plus a `tracing::warn!` and a counter in
//! [`CacheStats`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;

use crate::types::LlmResponse;

pub(crate) mod coalesce;
pub mod key;
pub mod memory;
#[cfg(feature = "redis")]
pub mod redis;

pub use key::{cache_key, cache_key_material, canonical_json, model_fingerprint, CacheKeyInput};
pub use memory::MemoryCache;
#[cfg(feature = "redis")]
pub use redis::RedisCache;

/// Result of a cache lookup. Backend failures are folded into `Miss`.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::time::Duration;
/// use polygateway::cache::{CacheLookup, MemoryCache, ResponseCache};
/// let cache = MemoryCache::new(100, 1 << 20).unwrap();
/// assert_eq!(cache.get("pgw:cache:abc").await, CacheLookup::Miss);
/// cache.put("pgw:cache:abc", &polygateway::LlmResponse::new("42"), Duration::from_secs(60)).await;
/// match cache.get("pgw:cache:abc").await {
///     CacheLookup::Hit(resp) => assert!(resp.cache_hit && resp.content == "42"),
///     CacheLookup::Miss => panic!("just stored"),
/// }
/// # }
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum CacheLookup {
    /// A stored response, returned with `cache_hit = true` (other provenance fields unchanged;
    /// the runtime sets `call_id`, `latency_ms` and `cost` for the hit record).
    Hit(Box<LlmResponse>),
    /// Nothing usable stored under the key.
    Miss,
}

impl CacheLookup {
    /// The response of a hit.
    ///
    /// ```
    /// use polygateway::cache::CacheLookup;
    /// let hit = CacheLookup::Hit(Box::new(polygateway::LlmResponse::new("cached")));
    /// assert_eq!(hit.hit().map(|r| r.content), Some("cached".to_string()));
    /// assert!(CacheLookup::Miss.hit().is_none());
    /// ```
    pub fn hit(self) -> Option<LlmResponse> {
        match self {
            CacheLookup::Hit(r) => Some(*r),
            CacheLookup::Miss => None,
        }
    }
}

/// Counters of one cache instance, for status snapshots.
///
/// `misses` counts every lookup that did not return a hit, including those caused by backend
/// errors and corrupt entries; `errors` and `corrupt` say why some of them happened. `errors`
/// also counts failed or refused writes.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::time::Duration;
/// use polygateway::cache::{CacheStats, MemoryCache, ResponseCache};
/// let cache = MemoryCache::new(100, 1 << 20).unwrap();
/// let resp = polygateway::LlmResponse::new("hi");
/// cache.put("k", &resp, Duration::from_secs(60)).await;
/// cache.put("k2", &resp, Duration::ZERO).await; // refused: counted as an error
/// cache.get("k").await;
/// cache.get("k2").await;
/// assert_eq!(cache.stats(), CacheStats { hits: 1, misses: 1, errors: 1, corrupt: 0 });
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheStats {
    /// Lookups that returned a stored response.
    pub hits: u64,
    /// Lookups that returned `Miss`.
    pub misses: u64,
    /// Backend failures (timeouts, connection errors, refused writes).
    pub errors: u64,
    /// Stored entries that could not be decoded.
    pub corrupt: u64,
}

/// A response cache backend. Implementations must never surface errors: they log, count and
/// answer `Miss` (on `get`) or drop the write (on `put`).
///
/// An implementation that stores nothing (every lookup is a counted miss), used through the
/// trait object the gateway holds:
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use std::sync::Arc;
/// use std::time::Duration;
/// use polygateway::cache::{CacheLookup, CacheStats, ResponseCache};
/// use polygateway::LlmResponse;
///
/// #[derive(Default)]
/// struct NoCache { misses: AtomicU64 }
///
/// #[async_trait::async_trait]
/// impl ResponseCache for NoCache {
///     async fn get(&self, _key: &str) -> CacheLookup {
///         self.misses.fetch_add(1, Ordering::Relaxed);
///         CacheLookup::Miss
///     }
///     async fn put(&self, _key: &str, _value: &LlmResponse, _ttl: Duration) {}
///     fn stats(&self) -> CacheStats {
///         CacheStats { misses: self.misses.load(Ordering::Relaxed), ..CacheStats::default() }
///     }
/// }
///
/// let cache: Arc<dyn ResponseCache> = Arc::new(NoCache::default());
/// cache.put("k", &LlmResponse::new("hi"), Duration::from_secs(60)).await;
/// assert_eq!(cache.get("k").await, CacheLookup::Miss);
/// assert_eq!(cache.stats().misses, 1);
/// # }
/// ```
#[async_trait]
pub trait ResponseCache: Send + Sync {
    /// Look `key` up.
    async fn get(&self, key: &str) -> CacheLookup;
    /// Store `value` under `key` for `ttl`. A zero `ttl` is refused (counted as an error).
    async fn put(&self, key: &str, value: &LlmResponse, ttl: Duration);
    /// A snapshot of this instance's counters.
    fn stats(&self) -> CacheStats;
}

/// Checks a cache TTL: it must be greater than zero (docs/behaviour.md §9.1).
///
/// ```
/// use std::time::Duration;
/// use polygateway::cache::validate_ttl;
/// assert!(validate_ttl(Duration::from_secs(60)).is_ok());
/// assert!(validate_ttl(Duration::ZERO).is_err());
/// ```
pub fn validate_ttl(ttl: Duration) -> Result<Duration, CacheError> {
    if ttl.is_zero() {
        Err(CacheError::InvalidConfig("cache TTL must be > 0".into()))
    } else {
        Ok(ttl)
    }
}

/// Errors building a cache backend (the only cache errors that reach anyone: construction is
/// where misconfiguration fails loud).
///
/// ```
/// use polygateway::cache::{CacheError, MemoryCache};
/// let err = MemoryCache::new(0, 1024).unwrap_err();
/// assert!(matches!(err, CacheError::InvalidConfig(_)));
/// assert!(err.to_string().starts_with("invalid cache configuration"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CacheError {
    /// A size, TTL or timeout is out of range.
    #[error("invalid cache configuration: {0}")]
    InvalidConfig(String),
    /// The Redis URL could not be parsed (the URL itself is never echoed: it may hold a password).
    #[error("invalid cache Redis URL: {0}")]
    InvalidUrl(String),
}

/// Lock-free counters shared by the backends.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    hits: AtomicU64,
    misses: AtomicU64,
    errors: AtomicU64,
    corrupt: AtomicU64,
}

impl Counters {
    pub(crate) fn hit(&self) {
        self.hits.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn miss(&self) {
        self.misses.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn error(&self) {
        self.errors.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn corrupt(&self) {
        self.corrupt.fetch_add(1, Ordering::Relaxed);
    }
    /// Decode a stored entry: a hit, or (logged, counted) a corrupt entry that reads as a miss.
    pub(crate) fn decode(&self, backend: &str, key: &str, json: &str) -> Option<LlmResponse> {
        match serde_json::from_str::<LlmResponse>(json) {
            Ok(resp) => {
                self.hit();
                Some(resp)
            }
            Err(e) => {
                tracing::warn!(key = key_for_log(key), error = %e, "{backend} cache: corrupt entry, treating as miss");
                self.corrupt();
                self.miss();
                None
            }
        }
    }

    /// Encode an entry for a `put`, or refuse it (logged, counted): a TTL under 1 ms, or a value
    /// that does not serialise.
    pub(crate) fn encode(
        &self,
        backend: &str,
        key: &str,
        value: &LlmResponse,
        ttl: Duration,
    ) -> Option<String> {
        if ttl < Duration::from_millis(1) {
            tracing::warn!(
                key = key_for_log(key),
                "{backend} cache: refused put with TTL < 1 ms"
            );
            self.error();
            return None;
        }
        match serde_json::to_string(value) {
            Ok(json) => Some(json),
            Err(e) => {
                tracing::warn!(key = key_for_log(key), error = %e, "{backend} cache: cannot serialize response");
                self.error();
                None
            }
        }
    }

    pub(crate) fn snapshot(&self) -> CacheStats {
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            corrupt: self.corrupt.load(Ordering::Relaxed),
        }
    }
}

/// Marks a stored response as served from the cache.
pub(crate) fn into_hit(mut resp: LlmResponse) -> CacheLookup {
    resp.cache_hit = true;
    CacheLookup::Hit(Box::new(resp))
}

/// A short, secret-free prefix of a key for log lines.
pub(crate) fn key_for_log(key: &str) -> &str {
    let end = key.char_indices().nth(24).map_or(key.len(), |(i, _)| i);
    &key[..end]
}
