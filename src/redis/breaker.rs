//! [`RedisBreakers`]: one circuit breaker per `(scope, source)` stored in Redis so every process
//! shares it (docs/behaviour.md §5.4). The transitions are `lua/breaker.lua`, which mirrors the in-memory
//! `BreakerMachine` rule for rule; this file builds arguments and decodes answers.
//!
//! Not for: the local cooldown memo or the wait policy (the runtime's admission layer).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use fred::prelude::Value;
use polygateway_actors::{
    BackendError, BreakerAdmit, BreakerBackend, BreakerConfig, BreakerSnapshot, BreakerState,
    BreakerVerdict,
};

use super::connection::{RedisGovernance, ScriptKind};

/// The Redis breaker store.
///
/// Used through [`BreakerBackend`]; every process on the same server and prefix sees the same
/// breaker.
///
/// ```no_run
/// # async fn demo(redis: polygateway::redis::RedisGovernance) -> Result<(), polygateway::ports::BackendError> {
/// use polygateway::ports::{BreakerAdmit, BreakerBackend, BreakerConfig, BreakerState};
/// use polygateway::redis::RedisBreakers;
/// let breakers = RedisBreakers::new(redis);
/// let config = BreakerConfig::default();
/// breakers.force_open("LLM", "deepseek_1", &config).await?;
/// let admit = breakers.acquire("LLM", "deepseek_1", &config).await?;
/// assert!(matches!(admit, BreakerAdmit::Refused { state: BreakerState::Open, .. }));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RedisBreakers {
    redis: RedisGovernance,
}

impl RedisBreakers {
    /// Breakers stored through `redis`.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), polygateway::ports::BackendError> {
    /// use polygateway::ports::{BreakerBackend, BreakerConfig, BreakerState};
    /// use polygateway::config::Secret;
    /// use polygateway::redis::{RedisBreakers, RedisGovernance};
    /// let redis = RedisGovernance::connect(&Secret::new("redis://127.0.0.1:6379"), "pgw").await?;
    /// let breakers = RedisBreakers::new(redis.clone());
    /// let snapshot = breakers.snapshot("LLM", "openai_1", &BreakerConfig::default()).await?;
    /// assert_eq!(snapshot.state, BreakerState::Closed); // a source never seen is closed
    /// redis.close().await;
    /// # Ok(()) }
    /// ```
    pub fn new(redis: RedisGovernance) -> Self {
        Self { redis }
    }

    async fn call<R: fred::prelude::FromValue>(
        &self,
        scope: &str,
        source: &str,
        op: &str,
        config: &BreakerConfig,
        extra: Vec<Value>,
    ) -> Result<R, BackendError> {
        let keys = vec![self.redis.keys().breaker(scope, source)];
        let mut args = config_args(op, config);
        args.extend(extra);
        self.redis.eval(ScriptKind::Breaker, keys, args).await
    }
}

fn millis(d: Duration) -> Value {
    Value::Integer(i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// ARGV 1..=8 of `lua/breaker.lua` (and of `lua/attempt.lua`, which passes them on).
pub(super) fn config_args(op: &str, config: &BreakerConfig) -> Vec<Value> {
    vec![
        Value::from(op),
        Value::Integer(i64::from(config.effective_threshold())),
        millis(config.cooldown),
        millis(config.max_cooldown.max(config.cooldown)),
        millis(config.probe_ttl),
        Value::Integer(i64::from(config.min_calls)),
        // Lua parses the decimal text exactly as Rust prints it.
        Value::from(format!("{}", config.fail_rate)),
        millis(config.bucket.max(Duration::from_millis(1))),
    ]
}

pub(super) fn state_of(code: i64) -> Result<BreakerState, BackendError> {
    Ok(match code {
        0 => BreakerState::Closed,
        1 => BreakerState::Open,
        2 => BreakerState::HalfOpen,
        other => {
            return Err(BackendError::new(format!(
                "breaker.lua: unknown state {other}"
            )))
        }
    })
}

fn unsigned(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

fn small(v: i64) -> u32 {
    u32::try_from(v).unwrap_or(if v < 0 { 0 } else { u32::MAX })
}

fn unexpected(op: &str, reply: &[Value]) -> BackendError {
    BackendError::new(format!("breaker.lua {op}: unexpected reply {reply:?}"))
}

fn int(v: &Value) -> Option<i64> {
    v.as_i64()
}

#[async_trait]
impl BreakerBackend for RedisBreakers {
    async fn acquire(
        &self,
        scope: &str,
        source: &str,
        config: &BreakerConfig,
    ) -> Result<BreakerAdmit, BackendError> {
        // The probe id is chosen here so a re-sent script recognises its own probe.
        let candidate = uuid::Uuid::new_v4().to_string();
        let keys = vec![self.redis.keys().breaker(scope, source)];
        let mut args = config_args("acquire", config);
        args.push(Value::from(candidate.as_str()));
        let client = self.redis.pinned();
        let reply: Vec<Value> = match self
            .redis
            .eval_on(&client, ScriptKind::Breaker, keys.clone(), args)
            .await
        {
            Ok(reply) => reply,
            Err(e) => {
                // A probe granted to a caller who never learnt of it would wedge HALF_OPEN
                // until the probe TTL: give it back.
                let mut release = config_args("release_probe", config);
                release.push(Value::from(candidate.as_str()));
                self.redis
                    .compensate(client, ScriptKind::Breaker, keys, release);
                return Err(e);
            }
        };
        let codes: Vec<Option<i64>> = reply.iter().map(int).collect();
        match codes.as_slice() {
            [Some(0), Some(epoch)] => Ok(BreakerAdmit::Pass {
                epoch: unsigned(*epoch),
            }),
            [Some(1), Some(epoch), _] => {
                let probe = reply[2]
                    .as_string()
                    .ok_or_else(|| unexpected("acquire", &reply))?;
                Ok(BreakerAdmit::Probe {
                    epoch: unsigned(*epoch),
                    probe_id: Arc::from(probe),
                })
            }
            [Some(2), Some(state), Some(wait_ms)] => Ok(BreakerAdmit::Refused {
                state: state_of(*state)?,
                retry_after: Duration::from_millis(unsigned(*wait_ms)),
            }),
            _ => Err(unexpected("acquire", &reply)),
        }
    }

    async fn record(
        &self,
        scope: &str,
        source: &str,
        config: &BreakerConfig,
        epoch: u64,
        probe_id: Option<&str>,
        verdict: BreakerVerdict,
    ) -> Result<bool, BackendError> {
        let verdict = match verdict {
            BreakerVerdict::Success => "s",
            BreakerVerdict::Failure => "f",
        };
        // The verdict id makes a script fred re-sends after a reconnect answer the first verdict
        // instead of counting it again.
        let verdict_id = uuid::Uuid::new_v4().simple().to_string();
        let keys = vec![
            self.redis.keys().breaker(scope, source),
            self.redis.keys().verdict(scope, source, &verdict_id),
        ];
        let mut args = config_args("record", config);
        args.extend([
            Value::Integer(i64::try_from(epoch).unwrap_or(i64::MAX)),
            Value::from(probe_id.unwrap_or("")),
            Value::from(verdict),
        ]);
        let applied: i64 = self.redis.eval(ScriptKind::Breaker, keys, args).await?;
        Ok(applied == 1)
    }

    async fn force_open(
        &self,
        scope: &str,
        source: &str,
        config: &BreakerConfig,
    ) -> Result<(), BackendError> {
        let _epoch: i64 = self
            .call(scope, source, "force_open", config, Vec::new())
            .await?;
        Ok(())
    }

    async fn release_probe(
        &self,
        scope: &str,
        source: &str,
        probe_id: &str,
    ) -> Result<(), BackendError> {
        // Releasing reads no parameter; any config fills the fixed argument slots.
        let config = BreakerConfig::default();
        let _released: i64 = self
            .call(
                scope,
                source,
                "release_probe",
                &config,
                vec![Value::from(probe_id)],
            )
            .await?;
        Ok(())
    }

    async fn snapshot(
        &self,
        scope: &str,
        source: &str,
        config: &BreakerConfig,
    ) -> Result<BreakerSnapshot, BackendError> {
        let reply: Vec<i64> = self
            .call(scope, source, "snapshot", config, Vec::new())
            .await?;
        match reply.as_slice() {
            [state, epoch, wait_ms, fails, streak, probe_held, opens] => Ok(BreakerSnapshot {
                state: state_of(*state)?,
                epoch: unsigned(*epoch),
                retry_after: Duration::from_millis(unsigned(*wait_ms)),
                consecutive_failures: small(*fails),
                open_streak: small(*streak),
                probe_held: *probe_held == 1,
                opens: unsigned(*opens),
            }),
            other => Err(BackendError::new(format!(
                "breaker.lua snapshot: unexpected reply {other:?}"
            ))),
        }
    }
}
