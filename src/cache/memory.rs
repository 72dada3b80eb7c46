//! In-process response cache: TTL per entry, bounded by entry count and by bytes, evicting the
//! least recently used entry first.
//!
//! For one process only; it is not shared between runtimes unless the same instance is injected.
//! Time comes from `tokio::time::Instant`, so tests can pause and advance the clock.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use super::{into_hit, key_for_log, CacheError, CacheLookup, CacheStats, Counters, ResponseCache};
use crate::types::LlmResponse;

/// Bounded in-memory [`ResponseCache`].
///
/// Entries are stored serialized (the same JSON the Redis backend stores), so `max_bytes` bounds
/// real memory and a hit hands out an independent copy.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::time::Duration;
/// use polygateway::cache::{CacheLookup, MemoryCache, ResponseCache};
/// tokio::time::pause(); // the cache reads tokio's clock: let the example move it
/// let cache = MemoryCache::new(1_000, 16 << 20).unwrap();
/// cache.put("k", &polygateway::LlmResponse::new("hi"), Duration::from_secs(60)).await;
/// assert!(cache.get("k").await.hit().is_some_and(|r| r.cache_hit));
/// tokio::time::advance(Duration::from_secs(61)).await;
/// assert_eq!(cache.get("k").await, CacheLookup::Miss); // expired
/// # }
/// ```
#[derive(Debug)]
pub struct MemoryCache {
    max_entries: usize,
    max_bytes: usize,
    inner: Mutex<Inner>,
    counters: Counters,
}

#[derive(Debug, Default)]
struct Inner {
    entries: HashMap<String, Entry>,
    /// Recency order: tick → key; the smallest tick is the least recently used.
    order: BTreeMap<u64, String>,
    next_tick: u64,
    bytes: usize,
}

#[derive(Debug)]
struct Entry {
    json: String,
    expires_at: Instant,
    tick: u64,
}

impl Inner {
    fn touch(&mut self, key: &str) {
        let tick = self.next_tick;
        self.next_tick += 1;
        if let Some(entry) = self.entries.get_mut(key) {
            self.order.remove(&entry.tick);
            entry.tick = tick;
            self.order.insert(tick, key.to_owned());
        }
    }

    fn remove(&mut self, key: &str) {
        if let Some(entry) = self.entries.remove(key) {
            self.order.remove(&entry.tick);
            self.bytes -= entry_size(key, &entry.json);
        }
    }

    fn evict_lru(&mut self) -> bool {
        match self.order.pop_first() {
            Some((_, key)) => {
                if let Some(entry) = self.entries.remove(&key) {
                    self.bytes -= entry_size(&key, &entry.json);
                }
                true
            }
            None => false,
        }
    }
}

/// Bytes an entry is accounted for: its key and its stored JSON.
fn entry_size(key: &str, json: &str) -> usize {
    key.len() + json.len()
}

impl MemoryCache {
    /// A cache holding at most `max_entries` entries and `max_bytes` bytes (key + stored JSON).
    /// Both must be > 0.
    ///
    /// ```
    /// use polygateway::cache::MemoryCache;
    /// let cache = MemoryCache::new(10_000, 256 * 1024 * 1024).unwrap();
    /// assert!(cache.is_empty());
    /// assert!(MemoryCache::new(10_000, 0).is_err());
    /// ```
    pub fn new(max_entries: usize, max_bytes: usize) -> Result<Self, CacheError> {
        if max_entries == 0 || max_bytes == 0 {
            return Err(CacheError::InvalidConfig(
                "memory cache max_entries and max_bytes must be > 0".into(),
            ));
        }
        Ok(Self {
            max_entries,
            max_bytes,
            inner: Mutex::new(Inner::default()),
            counters: Counters::default(),
        })
    }

    /// Entries currently held (expired ones included until touched or evicted).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use std::time::Duration;
    /// use polygateway::cache::{MemoryCache, ResponseCache};
    /// let cache = MemoryCache::new(2, 1 << 20).unwrap();
    /// let resp = polygateway::LlmResponse::new("hi");
    /// for key in ["a", "b", "c"] {
    ///     cache.put(key, &resp, Duration::from_secs(60)).await;
    /// }
    /// // At most two entries: "a", the least recently used, was evicted.
    /// assert_eq!(cache.len(), 2);
    /// assert!(cache.get("a").await.hit().is_none());
    /// # }
    /// ```
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// `true` when nothing is held.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use std::time::Duration;
    /// use polygateway::cache::{MemoryCache, ResponseCache};
    /// let cache = MemoryCache::new(10, 1 << 20).unwrap();
    /// assert!(cache.is_empty());
    /// cache.put("k", &polygateway::LlmResponse::new("hi"), Duration::from_secs(60)).await;
    /// assert!(!cache.is_empty());
    /// # }
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes currently accounted.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use std::time::Duration;
    /// use polygateway::cache::{MemoryCache, ResponseCache};
    /// let cache = MemoryCache::new(10, 1 << 20).unwrap();
    /// let resp = polygateway::LlmResponse::new("hi");
    /// cache.put("key", &resp, Duration::from_secs(60)).await;
    /// // An entry costs its key plus the JSON it is stored as.
    /// assert_eq!(cache.bytes(), "key".len() + serde_json::to_string(&resp).unwrap().len());
    /// # }
    /// ```
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the maps inconsistent in a way that matters
        // for a cache; keep serving.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait]
impl ResponseCache for MemoryCache {
    async fn get(&self, key: &str) -> CacheLookup {
        let json = {
            let mut inner = self.lock();
            let now = Instant::now();
            match inner.entries.get(key) {
                None => None,
                Some(entry) if entry.expires_at <= now => {
                    inner.remove(key);
                    None
                }
                Some(entry) => {
                    let json = entry.json.clone();
                    inner.touch(key);
                    Some(json)
                }
            }
        };
        let Some(json) = json else {
            self.counters.miss();
            return CacheLookup::Miss;
        };
        match self.counters.decode("memory", key, &json) {
            Some(resp) => into_hit(resp),
            None => {
                self.lock().remove(key);
                CacheLookup::Miss
            }
        }
    }

    async fn put(&self, key: &str, value: &LlmResponse, ttl: Duration) {
        let Some(json) = self.counters.encode("memory", key, value, ttl) else {
            return;
        };
        let size = entry_size(key, &json);
        if size > self.max_bytes {
            tracing::debug!(
                key = key_for_log(key),
                size,
                max = self.max_bytes,
                "memory cache: entry larger than the whole cache, not stored"
            );
            return;
        }
        let expires_at = Instant::now()
            .checked_add(ttl)
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(365 * 24 * 3600));
        let mut inner = self.lock();
        inner.remove(key);
        while inner.entries.len() >= self.max_entries || inner.bytes + size > self.max_bytes {
            if !inner.evict_lru() {
                break;
            }
        }
        let tick = inner.next_tick;
        inner.next_tick += 1;
        inner.order.insert(tick, key.to_owned());
        inner.bytes += size;
        inner.entries.insert(
            key.to_owned(),
            Entry {
                json,
                expires_at,
                tick,
            },
        );
    }

    fn stats(&self) -> CacheStats {
        self.counters.snapshot()
    }
}

#[cfg(test)]
impl MemoryCache {
    /// Overwrites a stored entry's JSON (to test corrupt-entry handling).
    pub(crate) fn corrupt_entry(&self, key: &str, json: &str) {
        let mut guard = self.lock();
        let inner = &mut *guard;
        if let Some(entry) = inner.entries.get_mut(key) {
            inner.bytes = inner.bytes - entry.json.len() + json.len();
            entry.json = json.to_owned();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn corrupt_entry_is_a_counted_miss_and_is_dropped() {
        let cache = MemoryCache::new(10, 1 << 20).unwrap();
        cache
            .put("k", &LlmResponse::new("hi"), Duration::from_secs(60))
            .await;
        cache.corrupt_entry("k", "{not json");
        assert_eq!(cache.get("k").await, CacheLookup::Miss);
        let s = cache.stats();
        assert_eq!((s.hits, s.misses, s.corrupt), (0, 1, 1));
        assert!(cache.is_empty());
        assert_eq!(cache.bytes(), 0);
    }
}
