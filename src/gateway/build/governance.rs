//! Build step: the governance ports (limiter gate, breaker store, fused attempts), injected or
//! built from the settings: in memory, or on one shared Redis connection (feature `redis`).

use std::sync::Arc;
use std::time::Duration;

use polygateway_actors::memory::{MemoryBreakers, MemoryGate};
use polygateway_actors::runtime::Governance;
use polygateway_actors::{AttemptBackend, BreakerBackend, GateBackend};

use super::super::Owned;
use super::GatewayBuilder;
use crate::config::{GovernanceBackendKind, Settings};
use crate::error::GatewayError;
#[cfg(feature = "redis")]
use crate::redis::{RedisAttempts, RedisBreakers, RedisGate, RedisGovernance, RedisOptions};

/// How long one governance call may take before it counts as a backend outage.
const GOVERNANCE_TIMEOUT: Duration = Duration::from_secs(3);

/// The Redis connection the built governance ports share. Without the `redis` feature there is
/// none (a Redis backend was refused by the feature check before this step).
#[cfg(feature = "redis")]
type RedisConn = RedisGovernance;
#[cfg(not(feature = "redis"))]
type RedisConn = std::convert::Infallible;

impl GatewayBuilder {
    /// The injected gate and breaker store, else the ones the settings name; when both are built
    /// on Redis, also the fused attempts port.
    pub(super) async fn build_governance(
        &mut self,
        default_scope: &str,
        owned: &mut Owned,
    ) -> Result<Governance, GatewayError> {
        let redis = self.connect_redis(default_scope, owned).await?;
        let attempts = self.fused_attempts(redis.as_ref());
        let settings = &self.settings;
        let gate = match self.gate.take() {
            Some(gate) => gate,
            None => self.built_gate(settings.limiter_backend, redis.as_ref()),
        };
        let breakers = match self.breakers.take() {
            Some(breakers) => breakers,
            None => self.built_breakers(settings.breaker_backend, redis.as_ref()),
        };
        Ok(Governance {
            gate,
            breakers,
            attempts,
            timeout: GOVERNANCE_TIMEOUT,
        })
    }

    fn needs_redis(settings: &Settings) -> bool {
        settings.limiter_backend == GovernanceBackendKind::Redis
            || settings.breaker_backend == GovernanceBackendKind::Redis
    }

    /// The Redis connection a built port needs (none when both ports are injected). It is
    /// owned, so shutdown closes it.
    #[cfg(feature = "redis")]
    async fn connect_redis(
        &self,
        default_scope: &str,
        owned: &mut Owned,
    ) -> Result<Option<RedisConn>, GatewayError> {
        let settings = &self.settings;
        let something_to_build = self.gate.is_none() || self.breakers.is_none();
        match (Self::needs_redis(settings), &settings.redis_url) {
            (true, Some(url)) if something_to_build => {
                RedisGovernance::check_url(url).map_err(|e| {
                    GatewayError::Config(crate::config::ConfigError::Assembly(format!(
                        "REDIS_URL: {e}"
                    )))
                })?;
                // A server that is down is an outage, not a build failure (the original
                // library's behaviour): the gateway is built, every call fails closed with
                // `GovernanceBackendError` (retry in 5 s) and it serves by itself once the
                // server is there — a service that starts before its Redis does not crash-loop.
                let (redis, down) = RedisGovernance::connect_degraded(
                    url,
                    &self.redis_key_prefix,
                    RedisOptions::default(),
                )
                .await
                .map_err(|e| {
                    GatewayError::Config(crate::config::ConfigError::Assembly(format!(
                        "REDIS_URL: {}",
                        e.message
                    )))
                })?;
                if let Some(down) = down {
                    tracing::warn!(
                        scope = default_scope,
                        error = %down.message,
                        "governance Redis unreachable at start: calls fail closed \
                         (GovernanceBackendError) until it answers; reconnecting in the background"
                    );
                }
                owned.redis.push(redis.clone());
                Ok(Some(redis))
            }
            (true, None) => Err(GatewayError::Config(crate::config::ConfigError::Assembly(
                "redis backends need REDIS_URL".into(),
            ))),
            _ => Ok(None),
        }
    }

    #[cfg(not(feature = "redis"))]
    async fn connect_redis(
        &self,
        _default_scope: &str,
        _owned: &mut Owned,
    ) -> Result<Option<RedisConn>, GatewayError> {
        // A Redis backend without the feature was refused by the feature check.
        debug_assert!(!Self::needs_redis(&self.settings));
        Ok(None)
    }

    /// Both ports on the same Redis (neither injected): one script call per admission and one
    /// per finished attempt instead of one per step.
    fn fused_attempts(&self, redis: Option<&RedisConn>) -> Option<Arc<dyn AttemptBackend>> {
        let both_built_on_redis = self.gate.is_none()
            && self.breakers.is_none()
            && self.settings.limiter_backend == GovernanceBackendKind::Redis
            && self.settings.breaker_backend == GovernanceBackendKind::Redis;
        if !both_built_on_redis {
            return None;
        }
        match redis {
            #[cfg(feature = "redis")]
            Some(r) => Some(Arc::new(RedisAttempts::new(RedisGate::new(r.clone())))),
            _ => None,
        }
    }

    fn built_gate(
        &self,
        kind: GovernanceBackendKind,
        redis: Option<&RedisConn>,
    ) -> Arc<dyn GateBackend> {
        match (kind, redis) {
            #[cfg(feature = "redis")]
            (GovernanceBackendKind::Redis, Some(r)) => Arc::new(RedisGate::new(r.clone())),
            _ => Arc::new(MemoryGate::new(Arc::clone(&self.clock))),
        }
    }

    fn built_breakers(
        &self,
        kind: GovernanceBackendKind,
        redis: Option<&RedisConn>,
    ) -> Arc<dyn BreakerBackend> {
        match (kind, redis) {
            #[cfg(feature = "redis")]
            (GovernanceBackendKind::Redis, Some(r)) => Arc::new(RedisBreakers::new(r.clone())),
            _ => Arc::new(MemoryBreakers::new(Arc::clone(&self.clock))),
        }
    }
}
