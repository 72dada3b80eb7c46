//! [`RedisAttempts`]: one attempt's governance in at most two script calls (`lua/attempt.lua`) —
//! admission (breaker check, six gates, lease) and finish (verdict, settlement, release, progress,
//! and the breaker state it leaves). Finishes nobody waits for ride on the scope's next admission
//! ([`AttemptBackend::admit_after`]), so under load an attempt costs one round trip. The script
//! runs the same breaker, limiter and progress code as the single-purpose calls of
//! [`super::RedisBreakers`] and [`super::RedisGate`].
//!
//! Not for: mixed setups (Redis limiter with in-memory breakers, or the reverse) — those compose
//! the two ports ([`polygateway_actors::ComposedAttempts`]).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use fred::prelude::Value;
use polygateway_actors::{
    AttemptAdmit, AttemptBackend, AttemptOutcome, AttemptPermit, BackendError, BreakerAction,
    BreakerConfig, BreakerState, BreakerStatus, BreakerVerdict, GateRequest, Lease, PendingFinish,
};

use super::breaker::{config_args, state_of};
use super::connection::ScriptKind;
use super::gate::{count, gate_of, millis, non_negative, PROGRESS_KEY_TTL};
use super::RedisGate;

/// Admission and finish of one attempt against Redis, one script call each.
///
/// Built from the [`RedisGate`] it shares its connection and RPM/TPM window with; the breakers
/// are the ones [`super::RedisBreakers`] on the same connection sees.
///
/// ```no_run
/// # async fn demo(redis: polygateway::redis::RedisGovernance) -> Result<(), polygateway::ports::BackendError> {
/// use std::time::Duration;
/// use polygateway::ports::{
///     AttemptAdmit, AttemptBackend, AttemptOutcome, BreakerAction, BreakerConfig, BreakerVerdict,
///     GateRequest, Limits,
/// };
/// use polygateway::redis::{RedisAttempts, RedisGate};
/// let attempts = RedisAttempts::new(RedisGate::new(redis));
/// let request = GateRequest {
///     scope: "LLM".into(),
///     source: "openai_1".into(),
///     global: Limits { max_concurrency: 8, rpm: 600, tpm: 1_000_000 },
///     per_source: Limits::default(),
///     est_tokens: 1_500,
///     lease_id: "call-1/attempt-1".into(), // unique per attempt (a UUID in practice)
///     lease_ttl: Duration::from_secs(1500),
/// };
/// let breaker = BreakerConfig::default();
/// // Round trip 1: breaker, six gates, lease.
/// if let AttemptAdmit::Admitted(permit) = attempts.admit(&request, &breaker).await? {
///     // ... the call succeeds with 1 210 tokens. Round trip 2: verdict, settle, release, progress.
///     let outcome = AttemptOutcome {
///         action: BreakerAction::Record(BreakerVerdict::Success),
///         tokens: 1_210,
///         progress: true,
///     };
///     let after = attempts.finish(&permit, &breaker, outcome).await?;
///     assert_eq!(after, polygateway::ports::BreakerStatus::Closed);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RedisAttempts {
    gate: RedisGate,
}

impl RedisAttempts {
    /// Attempts over `gate`'s connection and window.
    ///
    /// ```no_run
    /// # async fn demo(redis: polygateway::redis::RedisGovernance) {
    /// use std::time::Duration;
    /// use polygateway::redis::{RedisAttempts, RedisGate};
    /// // A short window (tests): the attempts count RPM/TPM in the gate's window.
    /// let attempts = RedisAttempts::new(RedisGate::new(redis).with_window(Duration::from_secs(1)));
    /// # drop(attempts);
    /// # }
    /// ```
    pub fn new(gate: RedisGate) -> Self {
        Self { gate }
    }
}

fn unexpected(op: &str, reply: &[Value]) -> BackendError {
    BackendError::new(format!("attempt.lua {op}: unexpected reply {reply:?}"))
}

/// `lua/attempt.lua` finish ARGV 9..=14 after the breaker parameters.
fn finish_args(permit: &AttemptPermit, outcome: AttemptOutcome) -> Vec<Value> {
    let action = match outcome.action {
        BreakerAction::Record(BreakerVerdict::Success) => "s",
        BreakerAction::Record(BreakerVerdict::Failure) => "f",
        BreakerAction::ForceOpen => "o",
        BreakerAction::NoVerdict => "n",
    };
    let progress_ttl = if outcome.progress {
        millis(PROGRESS_KEY_TTL)
    } else {
        0
    };
    vec![
        Value::from(permit.lease.id.as_ref()),
        Value::Integer(i64::try_from(permit.epoch).unwrap_or(i64::MAX)),
        Value::from(permit.probe_id.as_deref().unwrap_or("")),
        Value::from(action),
        count(outcome.tokens),
        Value::Integer(progress_ttl),
    ]
}

impl RedisAttempts {
    /// The keys and arguments of one `finish` operation.
    fn finish_op(
        &self,
        permit: &AttemptPermit,
        breaker: &BreakerConfig,
        outcome: AttemptOutcome,
    ) -> (Vec<String>, Vec<Value>) {
        let lease = &permit.lease;
        let keys = self
            .gate
            .redis()
            .keys()
            .attempt(&lease.scope, &lease.source, &lease.id);
        let mut args = config_args("finish", breaker);
        args.extend(finish_args(permit, outcome));
        (keys, args)
    }

    /// The keys and arguments of the finishes in `pending`, one operation after the other.
    fn finish_ops(&self, pending: &[PendingFinish]) -> (Vec<String>, Vec<Value>) {
        let (mut keys, mut args) = (Vec::new(), Vec::new());
        for p in pending {
            let (k, a) = self.finish_op(&p.permit, &p.breaker, p.outcome);
            keys.extend(k);
            args.extend(a);
        }
        (keys, args)
    }

    /// Run `carried` operations (finishes), then the admission of `request`, in one script call.
    async fn admit_carrying(
        &self,
        (mut keys, mut args): (Vec<String>, Vec<Value>),
        request: &GateRequest,
        breaker: &BreakerConfig,
    ) -> Result<AttemptAdmit, BackendError> {
        let redis = self.gate.redis();
        let admit_keys = redis
            .keys()
            .attempt(&request.scope, &request.source, &request.lease_id);
        keys.extend(admit_keys.iter().cloned());
        args.extend(config_args("admit", breaker));
        args.extend(self.gate.admit_args(request));
        let client = redis.pinned();
        let reply: Vec<Value> = match redis
            .eval_on(&client, ScriptKind::Attempt, keys, args)
            .await
        {
            Ok(reply) => reply,
            Err(e) => {
                // The caller treats the attempt as never admitted: give back the lease and a probe
                // it may hold (the probe id is the lease id), counting no verdict. (It sends
                // carried finishes again itself.)
                let lost = AttemptPermit {
                    lease: Lease {
                        scope: Arc::clone(&request.scope),
                        source: Arc::clone(&request.source),
                        id: Arc::clone(&request.lease_id),
                        est_tokens: request.est_tokens,
                        window: 0,
                    },
                    epoch: 0,
                    probe_id: Some(Arc::clone(&request.lease_id)),
                };
                let outcome = AttemptOutcome {
                    action: BreakerAction::NoVerdict,
                    tokens: request.est_tokens,
                    progress: false,
                };
                let mut undo = config_args("finish", breaker);
                undo.extend(finish_args(&lost, outcome));
                redis.compensate(client, ScriptKind::Attempt, admit_keys, undo);
                return Err(e);
            }
        };
        let codes: Vec<Option<i64>> = reply.iter().map(Value::as_i64).collect();
        match codes.as_slice() {
            [Some(1), Some(window), Some(est), Some(epoch), _] => {
                let probe = reply[4]
                    .as_string()
                    .ok_or_else(|| unexpected("admit", &reply))?;
                Ok(AttemptAdmit::Admitted(AttemptPermit {
                    lease: Lease {
                        scope: Arc::clone(&request.scope),
                        source: Arc::clone(&request.source),
                        id: Arc::clone(&request.lease_id),
                        est_tokens: non_negative(*est),
                        window: non_negative(*window),
                    },
                    epoch: non_negative(*epoch),
                    probe_id: (!probe.is_empty()).then(|| Arc::from(probe)),
                }))
            }
            [Some(0), Some(gate), Some(wait_ms)] => Ok(AttemptAdmit::GateRefused {
                gate: gate_of(*gate)?,
                retry_after: Duration::from_millis(non_negative(*wait_ms)),
            }),
            [Some(2), Some(state), Some(wait_ms)] => Ok(AttemptAdmit::BreakerRefused {
                state: state_of(*state)?,
                retry_after: Duration::from_millis(non_negative(*wait_ms)),
            }),
            _ => Err(unexpected("admit", &reply)),
        }
    }
}

#[async_trait]
impl AttemptBackend for RedisAttempts {
    async fn admit(
        &self,
        request: &GateRequest,
        breaker: &BreakerConfig,
    ) -> Result<AttemptAdmit, BackendError> {
        self.admit_carrying(Default::default(), request, breaker)
            .await
    }

    fn carries_finishes(&self) -> bool {
        true
    }

    async fn admit_after(
        &self,
        pending: &[PendingFinish],
        request: &GateRequest,
        breaker: &BreakerConfig,
    ) -> Result<AttemptAdmit, BackendError> {
        self.admit_carrying(self.finish_ops(pending), request, breaker)
            .await
    }

    async fn finish_all(&self, pending: &[PendingFinish]) -> Result<(), BackendError> {
        if pending.is_empty() {
            return Ok(());
        }
        let (keys, args) = self.finish_ops(pending);
        let _last: Vec<Value> = self
            .gate
            .redis()
            .eval(ScriptKind::Attempt, keys, args)
            .await?;
        Ok(())
    }

    async fn finish(
        &self,
        permit: &AttemptPermit,
        breaker: &BreakerConfig,
        outcome: AttemptOutcome,
    ) -> Result<BreakerStatus, BackendError> {
        let (keys, args) = self.finish_op(permit, breaker, outcome);
        let reply: Vec<Value> = self
            .gate
            .redis()
            .eval(ScriptKind::Attempt, keys, args)
            .await?;
        let codes: Vec<Option<i64>> = reply.iter().map(Value::as_i64).collect();
        // {applied, state, retry_after_ms}: a re-sent finish (applied 0) reports the breaker too.
        match codes.as_slice() {
            [Some(0 | 1), Some(state), Some(wait_ms)] => Ok(match state_of(*state)? {
                BreakerState::Closed => BreakerStatus::Closed,
                BreakerState::HalfOpen => BreakerStatus::HalfOpen,
                BreakerState::Open => BreakerStatus::Open {
                    retry_after: Duration::from_millis(non_negative(*wait_ms)),
                },
            }),
            _ => Err(unexpected("finish", &reply)),
        }
    }
}
