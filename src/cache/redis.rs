//! Redis response cache: `SET key json PX ttl_ms` and `GET key`, each bounded by a per-operation
//! timeout so a dead or hanging Redis can never stall a call (docs/behaviour.md §9.1, §10.6: degrade silently).
//!
//! Values are the serde JSON of [`LlmResponse`]. Not for limiter or breaker state (those fail
//! closed and live in the governance backends).

use std::time::Duration;

use async_trait::async_trait;
use fred::prelude::{
    Builder, ClientLike, Config, Expiration, KeysInterface, PerformanceConfig, ReconnectPolicy,
};

use super::{into_hit, key_for_log, CacheError, CacheLookup, CacheStats, Counters, ResponseCache};
use crate::types::LlmResponse;

/// Default bound of one Redis operation.
///
/// ```
/// use std::time::Duration;
/// use polygateway::cache::redis::DEFAULT_OP_TIMEOUT;
/// use polygateway::cache::RedisCache;
/// // A dead or hanging Redis costs a call at most this long per cache lookup or store.
/// assert_eq!(DEFAULT_OP_TIMEOUT, Duration::from_secs(1));
/// let client = fred::prelude::Builder::default_centralized().build().unwrap();
/// assert!(RedisCache::from_client(client, DEFAULT_OP_TIMEOUT).is_ok());
/// ```
pub const DEFAULT_OP_TIMEOUT: Duration = Duration::from_secs(1);

/// [`ResponseCache`] on Redis.
///
/// ```no_run
/// # async fn demo(settings: polygateway::config::Settings) -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use polygateway::cache::redis::{RedisCache, DEFAULT_OP_TIMEOUT};
/// // One cache shared by every process of a deployment (namespace and TTL from the settings).
/// let cache = Arc::new(RedisCache::connect("redis://cache.internal:6379", DEFAULT_OP_TIMEOUT).await?);
/// let gw = polygateway::Gateway::builder(settings).cache(cache.clone()).build().await?;
/// gw.shutdown().await;
/// cache.close().await; // injected, so the gateway left it open
/// # Ok(()) }
/// ```
pub struct RedisCache {
    client: fred::clients::Client,
    op_timeout: Duration,
    /// `true` when this instance built the client (and so closes it, docs/behaviour.md §10.3).
    owned: bool,
    counters: Counters,
}

impl std::fmt::Debug for RedisCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The client's config holds the URL (and maybe a password): never print it.
        f.debug_struct("RedisCache")
            .field("op_timeout", &self.op_timeout)
            .field("owned", &self.owned)
            .finish_non_exhaustive()
    }
}

impl RedisCache {
    /// Builds a client for `url` and starts connecting. Waits at most `op_timeout` for the first
    /// connection; if Redis is down the cache is still returned (with a warning) and keeps
    /// reconnecting in the background — lookups meanwhile are misses. Fails only on an invalid
    /// URL or a zero timeout.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use std::time::Duration;
    /// use polygateway::cache::{CacheError, CacheLookup, RedisCache, ResponseCache};
    /// // Nothing listens on port 1: the cache is still built, and lookups degrade to misses.
    /// let cache = RedisCache::connect("redis://127.0.0.1:1", Duration::from_millis(100)).await.unwrap();
    /// assert_eq!(cache.get("pgw:cache:k").await, CacheLookup::Miss);
    /// assert_eq!(cache.stats().errors, 1);
    /// cache.close().await;
    /// // Misconfiguration, on the other hand, fails loud.
    /// let bad = RedisCache::connect("not a url", Duration::from_secs(1)).await;
    /// assert!(matches!(bad, Err(CacheError::InvalidUrl(_))));
    /// # }
    /// ```
    pub async fn connect(url: &str, op_timeout: Duration) -> Result<Self, CacheError> {
        if op_timeout.is_zero() {
            return Err(CacheError::InvalidConfig(
                "redis cache op timeout must be > 0".into(),
            ));
        }
        let config = Config {
            // Initial connection failures go through the reconnect policy instead of failing the
            // build: the cache degrades, it does not fail closed.
            fail_fast: false,
            ..Config::from_url(url).map_err(|e| CacheError::InvalidUrl(e.kind().to_str().into()))?
        };
        let client = Builder::from_config(config)
            .with_performance_config(|p: &mut PerformanceConfig| {
                p.default_command_timeout = op_timeout;
            })
            .with_connection_config(|c| {
                c.connection_timeout = op_timeout;
                c.max_command_attempts = 1;
            })
            .set_policy(ReconnectPolicy::new_exponential(0, 100, 5_000, 2))
            .build()
            .map_err(|e| {
                CacheError::InvalidConfig(format!("redis cache client: {}", e.kind().to_str()))
            })?;
        let _task = client.connect();
        match tokio::time::timeout(op_timeout, client.wait_for_connect()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(error = %e.kind().to_str(), "redis cache: not connected yet; lookups miss until it is")
            }
            Err(_) => {
                tracing::warn!("redis cache: no connection within the op timeout; lookups miss until it connects")
            }
        }
        Ok(Self {
            client,
            op_timeout,
            owned: true,
            counters: Counters::default(),
        })
    }

    /// Uses an injected, already connected client. [`RedisCache::close`] will not quit it.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use fred::prelude::{Builder, ClientLike, Config};
    /// use polygateway::cache::redis::{RedisCache, DEFAULT_OP_TIMEOUT};
    /// let client = Builder::from_config(Config::from_url("redis://localhost:6379")?).build()?;
    /// client.init().await?;
    /// let cache = RedisCache::from_client(client.clone(), DEFAULT_OP_TIMEOUT)?;
    /// cache.close().await;
    /// assert!(client.is_connected(), "an injected client stays open");
    /// client.quit().await?;
    /// # Ok(()) }
    /// ```
    pub fn from_client(
        client: fred::clients::Client,
        op_timeout: Duration,
    ) -> Result<Self, CacheError> {
        if op_timeout.is_zero() {
            return Err(CacheError::InvalidConfig(
                "redis cache op timeout must be > 0".into(),
            ));
        }
        Ok(Self {
            client,
            op_timeout,
            owned: false,
            counters: Counters::default(),
        })
    }

    /// Closes the connection if this instance built it; idempotent and bounded by the op
    /// timeout. Injected clients are left alone.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use std::time::{Duration, Instant};
    /// use polygateway::cache::RedisCache;
    /// let cache = RedisCache::connect("redis://127.0.0.1:1", Duration::from_millis(100)).await.unwrap();
    /// let started = Instant::now();
    /// cache.close().await;
    /// cache.close().await; // idempotent
    /// // Bounded by the op timeout even when Redis never answered.
    /// assert!(started.elapsed() < Duration::from_secs(1));
    /// # }
    /// ```
    pub async fn close(&self) {
        if self.owned {
            let _ = tokio::time::timeout(self.op_timeout, self.client.quit()).await;
        }
    }
}

#[async_trait]
impl ResponseCache for RedisCache {
    async fn get(&self, key: &str) -> CacheLookup {
        let res =
            tokio::time::timeout(self.op_timeout, self.client.get::<Option<String>, _>(key)).await;
        let json = match res {
            Ok(Ok(Some(json))) => json,
            Ok(Ok(None)) => {
                self.counters.miss();
                return CacheLookup::Miss;
            }
            Ok(Err(e)) => {
                tracing::warn!(key = key_for_log(key), error = %e.kind().to_str(), detail = %e.details(), "redis cache: GET failed, treating as miss");
                self.counters.error();
                self.counters.miss();
                return CacheLookup::Miss;
            }
            Err(_) => {
                tracing::warn!(
                    key = key_for_log(key),
                    timeout_ms = self.op_timeout.as_millis() as u64,
                    "redis cache: GET timed out, treating as miss"
                );
                self.counters.error();
                self.counters.miss();
                return CacheLookup::Miss;
            }
        };
        match self.counters.decode("redis", key, &json) {
            Some(resp) => into_hit(resp),
            None => CacheLookup::Miss,
        }
    }

    async fn put(&self, key: &str, value: &LlmResponse, ttl: Duration) {
        let Some(json) = self.counters.encode("redis", key, value, ttl) else {
            return;
        };
        let ttl_ms = ttl.as_millis().min(i64::MAX as u128) as i64;
        let fut = self
            .client
            .set::<(), _, _>(key, json, Some(Expiration::PX(ttl_ms)), None, false);
        match tokio::time::timeout(self.op_timeout, fut).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(key = key_for_log(key), error = %e.kind().to_str(), detail = %e.details(), "redis cache: SET failed, entry dropped");
                self.counters.error();
            }
            Err(_) => {
                tracing::warn!(
                    key = key_for_log(key),
                    "redis cache: SET timed out, entry dropped"
                );
                self.counters.error();
            }
        }
    }

    fn stats(&self) -> CacheStats {
        self.counters.snapshot()
    }
}
