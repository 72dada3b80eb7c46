//! [`RedisGate`]: the six-gate limiter (SPEC §5.3) stored in Redis, shared by every process that
//! points at the same server and prefix. The gate logic is `lua/limiter.lua` (one atomic script
//! per operation); this file only builds keys and arguments and decodes answers.
//!
//! Not for: deciding what to do on a refusal (wait or fail fast) — the admission layer does.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use fred::prelude::Value;
use polygateway_actors::{BackendError, Gate, GateBackend, GateDecision, GateRequest, Lease};

use super::connection::{RedisGovernance, ScriptKind};

/// How long a scope's progress mark is kept without a new one.
const PROGRESS_KEY_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// The Redis six-gate limiter.
#[derive(Debug, Clone)]
pub struct RedisGate {
    redis: RedisGovernance,
    window: Duration,
}

impl RedisGate {
    /// The default RPM/TPM window length.
    pub const DEFAULT_WINDOW: Duration = Duration::from_secs(60);

    /// A limiter with 60 s RPM/TPM windows.
    pub fn new(redis: RedisGovernance) -> Self {
        Self {
            redis,
            window: Self::DEFAULT_WINDOW,
        }
    }

    /// Change the RPM/TPM window length (tests use short windows). At least 1 ms.
    pub fn with_window(mut self, window: Duration) -> Self {
        self.window = window.max(Duration::from_millis(1));
        self
    }

    /// The RPM/TPM window length.
    pub fn window(&self) -> Duration {
        self.window
    }

    fn window_ms(&self) -> i64 {
        millis(self.window).max(1)
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn count(n: u64) -> Value {
    Value::Integer(i64::try_from(n).unwrap_or(i64::MAX))
}

fn gate_of(code: i64) -> Result<Gate, BackendError> {
    Ok(match code {
        1 => Gate::GlobalConcurrency,
        2 => Gate::SourceConcurrency,
        3 => Gate::GlobalRpm,
        4 => Gate::SourceRpm,
        5 => Gate::GlobalTpm,
        6 => Gate::SourceTpm,
        other => {
            return Err(BackendError::new(format!(
                "limiter.lua: unknown gate {other}"
            )))
        }
    })
}

fn non_negative(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

#[async_trait]
impl GateBackend for RedisGate {
    async fn admit(&self, request: &GateRequest) -> Result<GateDecision, BackendError> {
        let keys = self
            .redis
            .keys()
            .gate(&request.scope, &request.source, &request.lease_id);
        let args = vec![
            Value::from("admit"),
            Value::from(request.lease_id.as_ref()),
            Value::Integer(millis(request.lease_ttl).max(1)),
            Value::Integer(self.window_ms()),
            count(request.est_tokens),
            count(u64::from(request.global.max_concurrency)),
            count(u64::from(request.global.rpm)),
            count(request.global.tpm),
            count(u64::from(request.per_source.max_concurrency)),
            count(u64::from(request.per_source.rpm)),
            count(request.per_source.tpm),
        ];
        let client = self.redis.pinned();
        let reply: Vec<i64> = match self
            .redis
            .eval_on(&client, ScriptKind::Limiter, keys.clone(), args)
            .await
        {
            Ok(reply) => reply,
            Err(e) => {
                // The caller treats the lease as never granted: make sure it is not held.
                let release = vec![
                    Value::from("release"),
                    Value::from(request.lease_id.as_ref()),
                ];
                self.redis
                    .compensate(client, ScriptKind::Limiter, keys, release);
                return Err(e);
            }
        };
        match reply.as_slice() {
            [1, window, est] => Ok(GateDecision::Admitted(Lease {
                scope: Arc::clone(&request.scope),
                source: Arc::clone(&request.source),
                id: Arc::clone(&request.lease_id),
                est_tokens: non_negative(*est),
                window: non_negative(*window),
            })),
            [0, gate, wait_ms] => Ok(GateDecision::Refused {
                gate: gate_of(*gate)?,
                retry_after: Duration::from_millis(non_negative(*wait_ms)),
            }),
            other => Err(BackendError::new(format!(
                "limiter.lua: unexpected reply {other:?}"
            ))),
        }
    }

    async fn release(&self, lease: &Lease) -> Result<(), BackendError> {
        let keys = self
            .redis
            .keys()
            .gate(&lease.scope, &lease.source, &lease.id);
        let args = vec![Value::from("release"), Value::from(lease.id.as_ref())];
        let _freed: i64 = self.redis.eval(ScriptKind::Limiter, keys, args).await?;
        Ok(())
    }

    async fn settle(&self, lease: &Lease, actual_tokens: u64) -> Result<(), BackendError> {
        let keys = self
            .redis
            .keys()
            .gate(&lease.scope, &lease.source, &lease.id);
        let args = vec![Value::from("settle"), count(actual_tokens)];
        let _applied: i64 = self.redis.eval(ScriptKind::Limiter, keys, args).await?;
        Ok(())
    }

    async fn mark_progress(&self, scope: &str) -> Result<(), BackendError> {
        let keys = vec![self.redis.keys().progress(scope)];
        let args = vec![
            Value::from("mark"),
            Value::Integer(millis(PROGRESS_KEY_TTL)),
        ];
        let _: i64 = self.redis.eval(ScriptKind::Progress, keys, args).await?;
        Ok(())
    }

    async fn progress_age(&self, scope: &str) -> Result<Option<Duration>, BackendError> {
        let keys = vec![self.redis.keys().progress(scope)];
        let age: i64 = self
            .redis
            .eval(ScriptKind::Progress, keys, vec![Value::from("age")])
            .await?;
        Ok((age >= 0).then(|| Duration::from_millis(non_negative(age))))
    }

    async fn leases_held(&self, scope: &str) -> Result<u64, BackendError> {
        let keys = vec![self.redis.keys().global_leases(scope)];
        let held: i64 = self
            .redis
            .eval(ScriptKind::Limiter, keys, vec![Value::from("held")])
            .await?;
        Ok(non_negative(held))
    }
}
