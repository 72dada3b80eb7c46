//! [`RedisGate`]: the six-gate limiter (docs/behaviour.md §5.3) stored in Redis, shared by every process that
//! points at the same server and prefix. The gate logic is `lua/limiter.lua` (one atomic script
//! per operation); this file only builds keys and arguments and decodes answers. Its spend-budget
//! gate is `lua/budget.lua`, driven from `budget.rs`.
//!
//! Not for: deciding what to do on a refusal (wait or fail fast) — the admission layer does.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use fred::prelude::Value;
use polygateway_actors::{
    BackendError, BudgetClaim, BudgetDecision, BudgetLease, BudgetRequest, BudgetSpend, Gate,
    GateBackend, GateDecision, GateRequest, Lease,
};

use super::connection::{RedisGovernance, ScriptKind};

/// How long a scope's progress mark is kept without a new one.
pub(super) const PROGRESS_KEY_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// The Redis six-gate limiter.
///
/// Used through [`GateBackend`]: admit, then settle and release the lease.
///
/// ```no_run
/// # async fn demo(redis: polygateway::redis::RedisGovernance) -> Result<(), polygateway::ports::BackendError> {
/// use std::time::Duration;
/// use polygateway::ports::{GateBackend, GateDecision, GateRequest, Limits};
/// use polygateway::redis::RedisGate;
/// let gate = RedisGate::new(redis);
/// let request = GateRequest {
///     scope: "LLM".into(),
///     source: "openai_1".into(),
///     global: Limits { max_concurrency: 8, rpm: 600, tpm: 1_000_000 },
///     per_source: Limits { max_concurrency: 2, ..Limits::default() },
///     est_tokens: 1_500,
///     lease_id: "lease-1".into(), // unique per call (a UUID in practice)
///     lease_ttl: Duration::from_secs(1500),
/// };
/// match gate.admit(&request).await? {
///     GateDecision::Admitted(lease) => {
///         assert!(gate.leases_held("LLM").await? >= 1); // ours, shared with every process
///         gate.settle(&lease, 1_210).await?;
///         gate.release(&lease).await?;
///     }
///     GateDecision::Refused { gate: which, retry_after } => {
///         println!("{which:?} refused; retry in {retry_after:?}");
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RedisGate {
    redis: RedisGovernance,
    window: Duration,
}

impl RedisGate {
    /// The default RPM/TPM window length.
    ///
    /// ```
    /// use std::time::Duration;
    /// use polygateway::redis::RedisGate;
    /// // RPM and TPM limits are per minute: the window is one minute, as in memory.
    /// assert_eq!(RedisGate::DEFAULT_WINDOW, Duration::from_secs(60));
    /// assert_eq!(RedisGate::DEFAULT_WINDOW, polygateway_actors::policy::limiter::DEFAULT_WINDOW);
    /// ```
    pub const DEFAULT_WINDOW: Duration = polygateway_actors::policy::limiter::DEFAULT_WINDOW;

    /// A limiter with 60 s RPM/TPM windows.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), polygateway::ports::BackendError> {
    /// use polygateway::config::Secret;
    /// use polygateway::redis::{RedisGate, RedisGovernance};
    /// let redis = RedisGovernance::connect(&Secret::new("redis://127.0.0.1:6379"), "pgw").await?;
    /// let gate = RedisGate::new(redis.clone());
    /// assert_eq!(gate.window(), RedisGate::DEFAULT_WINDOW);
    /// # redis.close().await;
    /// # Ok(()) }
    /// ```
    pub fn new(redis: RedisGovernance) -> Self {
        Self {
            redis,
            window: Self::DEFAULT_WINDOW,
        }
    }

    /// Change the RPM/TPM window length (tests use short windows). At least 1 ms.
    ///
    /// ```no_run
    /// # async fn demo(redis: polygateway::redis::RedisGovernance) {
    /// use std::time::Duration;
    /// use polygateway::redis::RedisGate;
    /// let gate = RedisGate::new(redis.clone()).with_window(Duration::from_millis(200));
    /// assert_eq!(gate.window(), Duration::from_millis(200));
    /// // Shorter than 1 ms is raised to 1 ms.
    /// let gate = RedisGate::new(redis).with_window(Duration::ZERO);
    /// assert_eq!(gate.window(), Duration::from_millis(1));
    /// # }
    /// ```
    pub fn with_window(mut self, window: Duration) -> Self {
        self.window = window.max(Duration::from_millis(1));
        self
    }

    /// The RPM/TPM window length.
    ///
    /// ```no_run
    /// # async fn demo(redis: polygateway::redis::RedisGovernance) {
    /// use std::time::Duration;
    /// use polygateway::redis::RedisGate;
    /// let gate = RedisGate::new(redis).with_window(Duration::from_secs(10));
    /// // The `rpm`/`tpm` limits are now counted per 10 s window.
    /// assert_eq!(gate.window().as_secs(), 10);
    /// # }
    /// ```
    pub fn window(&self) -> Duration {
        self.window
    }

    fn window_ms(&self) -> i64 {
        millis(self.window).max(1)
    }

    pub(super) fn redis(&self) -> &RedisGovernance {
        &self.redis
    }

    /// The arguments of a limiter admission after the operation name: lease id, lease ttl ms,
    /// window ms, estimate, the six limits (`lua/limiter.lua` ARGV 2..=11).
    pub(super) fn admit_args(&self, request: &GateRequest) -> Vec<Value> {
        vec![
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
        ]
    }
}

pub(super) fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

pub(super) fn count(n: u64) -> Value {
    Value::Integer(i64::try_from(n).unwrap_or(i64::MAX))
}

pub(super) fn gate_of(code: i64) -> Result<Gate, BackendError> {
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

pub(super) fn non_negative(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

#[async_trait]
impl GateBackend for RedisGate {
    async fn admit(&self, request: &GateRequest) -> Result<GateDecision, BackendError> {
        let keys = self
            .redis
            .keys()
            .gate(&request.scope, &request.source, &request.lease_id);
        let mut args = vec![Value::from("admit")];
        args.extend(self.admit_args(request));
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

    async fn reserve_budget(
        &self,
        request: &BudgetRequest,
    ) -> Result<BudgetDecision, BackendError> {
        self.reserve_budget_lua(request).await
    }

    async fn settle_budget(
        &self,
        lease: &BudgetLease,
        actual_micros: u64,
    ) -> Result<(), BackendError> {
        self.settle_budget_lua(lease, actual_micros).await
    }

    async fn budget_spend(&self, claim: &BudgetClaim) -> Result<BudgetSpend, BackendError> {
        self.budget_spend_lua(claim).await
    }
}
