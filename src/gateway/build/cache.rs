//! Build step: the response cache — off, the injected backend, or the one `PGW_CACHE_BACKEND`
//! names (in memory, or Redis with feature `redis`).

use std::sync::Arc;
#[cfg(feature = "redis")]
use std::time::Duration;

use super::GatewayBuilder;
use crate::cache::coalesce::Coalescer;
use crate::cache::memory::MemoryCache;
#[cfg(feature = "redis")]
use crate::cache::redis::RedisCache;
use crate::cache::ResponseCache;
use crate::call::cache::CacheStore;
use crate::config::keys::global::PGW_CACHE_BACKEND;
use crate::config::CacheSettings;
use crate::error::GatewayError;

/// Memory cache bounds.
const MEMORY_CACHE_ENTRIES: usize = 10_000;
const MEMORY_CACHE_BYTES: usize = 256 * 1024 * 1024;

impl GatewayBuilder {
    pub(super) async fn build_cache(&mut self) -> Result<Option<Arc<CacheStore>>, GatewayError> {
        let (namespace, ttl) = match &self.settings.cache {
            CacheSettings::None => return Ok(None),
            CacheSettings::Memory { namespace, ttl } | CacheSettings::Redis { namespace, ttl } => {
                (namespace.clone(), *ttl)
            }
        };
        let backend = match (self.cache.take(), &self.settings.cache) {
            (Some(injected), _) => injected,
            (None, CacheSettings::Redis { .. }) => self.redis_cache().await?,
            (None, _) => memory_cache()?,
        };
        Ok(Some(Arc::new(CacheStore {
            backend,
            namespace,
            ttl,
            coalescer: Coalescer::new(),
        })))
    }

    #[cfg(feature = "redis")]
    async fn redis_cache(&self) -> Result<Arc<dyn ResponseCache>, GatewayError> {
        let url = self.settings.redis_url.as_ref().ok_or_else(|| {
            GatewayError::Config(crate::config::ConfigError::Assembly(format!(
                "{}=redis needs {}",
                PGW_CACHE_BACKEND.name,
                crate::config::keys::global::REDIS_URL.name
            )))
        })?;
        let cache = RedisCache::connect(url.expose(), Duration::from_secs(1))
            .await
            .map_err(|e| {
                GatewayError::Config(crate::config::ConfigError::Assembly(format!("cache: {e}")))
            })?;
        Ok(Arc::new(cache))
    }

    #[cfg(not(feature = "redis"))]
    async fn redis_cache(&self) -> Result<Arc<dyn ResponseCache>, GatewayError> {
        let refused = crate::config::features::disabled(PGW_CACHE_BACKEND.name, "redis", "redis");
        Err(GatewayError::Config(refused))
    }
}

fn memory_cache() -> Result<Arc<dyn ResponseCache>, GatewayError> {
    let cache = MemoryCache::new(MEMORY_CACHE_ENTRIES, MEMORY_CACHE_BYTES)
        .map_err(|e| GatewayError::Config(crate::config::ConfigError::Assembly(e.to_string())))?;
    Ok(Arc::new(cache))
}
