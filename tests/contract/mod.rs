//! The governance backend contract (docs/behaviour.md §5.3, §5.4): one async function per behaviour, generic
//! over the port trait objects, so every backend (memory, Redis+Lua) runs the same cases.
//!
//! Usage: `mod contract;` in a test file, build a backend, call a case with a `prefix` that is
//! unique per test *and per run* (persistent backends such as Redis keep state between runs;
//! scopes, sources and lease ids are derived from the prefix). Cases may run in parallel.
//!
//! Requirements on the backend under test:
//! - lease TTLs of about 1 s must be honoured (the cases pass them in [`GateRequest::lease_ttl`]);
//! - the rate-window length must be configurable: the roll-over case takes the window length the
//!   backend was built with (memory: `MemoryGate::with_window`; the Redis backend must offer the
//!   same knob) and waits into the next window, so keep it ≤ 2 s for that case;
//! - breaker cases take a [`BreakerConfig`] with short cooldown/probe TTL
//!   ([`short_breaker_config`]); they check the preconditions they rely on.
//!
//! Rate cases guard against a window boundary falling in the middle of a case: if an expectation
//! fails and the backend's window index moved meanwhile, the case reruns with fresh names.
// Each test binary that includes this module uses only some of the cases.
#![allow(dead_code)]

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use polygateway_actors::{
    AttemptAdmit, AttemptBackend, AttemptOutcome, AttemptPermit, BreakerAction, BreakerAdmit,
    BreakerBackend, BreakerConfig, BreakerState, BreakerStatus, BreakerVerdict, BudgetClaim,
    BudgetDecision, BudgetExhausted, BudgetLease, BudgetPeriod, BudgetRequest, Gate, GateBackend,
    GateDecision, GateRequest, Lease, Limits, PendingFinish,
};

/// Breaker parameters short enough for real-time cases (all waits stay well under 3 s).
pub fn short_breaker_config() -> BreakerConfig {
    BreakerConfig {
        fail_threshold: 3,
        max_concurrency: 0,
        cooldown: Duration::from_millis(400),
        max_cooldown: Duration::from_secs(2),
        probe_ttl: Duration::from_millis(800),
        min_calls: 10,
        fail_rate: 0.6,
        bucket: Duration::from_secs(30),
    }
}

/// Lease TTL used by cases that do not test expiry: long enough never to expire mid-case.
const LONG_TTL: Duration = Duration::from_secs(120);
/// Slack added to real waits so a backend's clock granularity cannot make them short.
const SLACK: Duration = Duration::from_millis(120);

static LEASE_SEQ: AtomicU64 = AtomicU64::new(0);

fn limits(max_concurrency: u32, rpm: u32, tpm: u64) -> Limits {
    Limits {
        max_concurrency,
        rpm,
        tpm,
    }
}

fn request(
    scope: &str,
    source: &str,
    global: Limits,
    per_source: Limits,
    est_tokens: u64,
    lease_ttl: Duration,
) -> GateRequest {
    let n = LEASE_SEQ.fetch_add(1, Ordering::Relaxed);
    GateRequest {
        scope: scope.into(),
        source: source.into(),
        global,
        per_source,
        est_tokens,
        lease_id: Arc::from(format!("{scope}/{source}/{n}")),
        lease_ttl,
    }
}

async fn admit(backend: &dyn GateBackend, req: &GateRequest) -> GateDecision {
    backend.admit(req).await.expect("admit: backend error")
}

async fn must_admit(backend: &dyn GateBackend, req: &GateRequest) -> Lease {
    match admit(backend, req).await {
        GateDecision::Admitted(lease) => lease,
        other => panic!("expected admission of {}, got {other:?}", req.lease_id),
    }
}

/// The backend's current window index, read through an unlimited scratch scope.
async fn current_window(backend: &dyn GateBackend, prefix: &str) -> u64 {
    let scope = format!("{prefix}_CLOCK");
    let none = Limits::default();
    let lease = must_admit(backend, &request(&scope, "clock", none, none, 0, LONG_TTL)).await;
    backend.release(&lease).await.expect("release");
    lease.window
}

/// Run `case` on a fresh scope; rerun (at most 3 times) only if it failed while the backend's
/// rate window rolled over, which makes rate expectations void.
async fn rerun_on_rollover<'a, F, Fut>(
    backend: &'a dyn GateBackend,
    prefix: &str,
    name: &str,
    case: F,
) where
    F: Fn(String) -> Fut,
    Fut: Future<Output = Result<(), String>> + 'a,
{
    for round in 0..3 {
        let before = current_window(backend, prefix).await;
        let scope = format!("{prefix}_{name}_{round}");
        match case(scope).await {
            Ok(()) => return,
            Err(msg) => {
                if current_window(backend, prefix).await == before {
                    panic!("{name}: {msg}");
                }
            }
        }
    }
    panic!("{name}: the rate window rolled over in three consecutive rounds");
}

macro_rules! check {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}

fn refusal(d: &GateDecision) -> Option<(Gate, Duration)> {
    match d {
        GateDecision::Refused { gate, retry_after } => Some((*gate, *retry_after)),
        GateDecision::Admitted(_) => None,
    }
}

// ------------------------------------------------------------------------------------------
// Gate cases
// ------------------------------------------------------------------------------------------

/// A refused admission counts nothing in any of the six gates, and names the refusing gate with a
/// positive wait hint.
pub async fn gate_contract_rejection_has_no_side_effects(backend: &dyn GateBackend, prefix: &str) {
    rerun_on_rollover(backend, prefix, "GATE_NOSIDE", |scope| async move {
        let scope = scope.as_str();
        let global = limits(2, 3, 1_000);
        let none = Limits::default();
        let a1 = must_admit(
            backend,
            &request(scope, "a", global, limits(1, 0, 0), 0, LONG_TTL),
        )
        .await;
        // Refused by the source concurrency gate (the second gate).
        let d = admit(
            backend,
            &request(scope, "a", global, limits(1, 0, 0), 0, LONG_TTL),
        )
        .await;
        let (gate, wait) = refusal(&d).ok_or_else(|| format!("a2 admitted: {d:?}"))?;
        assert_eq!(gate, Gate::SourceConcurrency);
        assert!(
            wait > Duration::ZERO && wait <= LONG_TTL,
            "concurrency hint {wait:?}"
        );
        // Refused by the last gate (source TPM): none of the five before it may count.
        let d = admit(
            backend,
            &request(scope, "b", global, limits(0, 0, 10), 50, LONG_TTL),
        )
        .await;
        check!(
            refusal(&d).map(|r| r.0) == Some(Gate::SourceTpm),
            "b: {d:?}"
        );
        // If either refusal had counted RPM (limit 3), this third request would be refused.
        let d = admit(backend, &request(scope, "c", global, none, 50, LONG_TTL)).await;
        let GateDecision::Admitted(c1) = d else {
            return Err(format!("c1 refused: {d:?}"));
        };
        assert_eq!(
            backend.leases_held(scope).await.unwrap(),
            2,
            "only admitted leases hold slots"
        );
        let d = admit(backend, &request(scope, "d", global, none, 0, LONG_TTL)).await;
        assert_eq!(
            refusal(&d).map(|r| r.0),
            Some(Gate::GlobalConcurrency),
            "d: {d:?}"
        );
        backend.release(&a1).await.unwrap();
        backend.release(&c1).await.unwrap();
        // Exactly three requests counted (a1, c1, d2): the fourth meets the global RPM gate.
        let d2 = must_admit(backend, &request(scope, "d", global, none, 0, LONG_TTL)).await;
        let d = admit(backend, &request(scope, "e", global, none, 0, LONG_TTL)).await;
        let refused = refusal(&d);
        check!(refused.map(|r| r.0) == Some(Gate::GlobalRpm), "e: {d:?}");
        let wait = refused.map(|r| r.1).unwrap_or_default();
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_secs(60),
            "rate hint {wait:?}"
        );
        backend.release(&d2).await.unwrap();
        assert_eq!(backend.leases_held(scope).await.unwrap(), 0);
        Ok(())
    })
    .await;
}

/// TPM pre-deducts the estimate; `settle` refunds or charges the difference in the admission
/// window, on both the source and the global TPM gate.
pub async fn gate_contract_settle_adjusts_admission_window(
    backend: &dyn GateBackend,
    prefix: &str,
) {
    rerun_on_rollover(backend, prefix, "GATE_SETTLE", |scope| async move {
        let scope = scope.as_str();
        let global = limits(0, 0, 130);
        let src = limits(0, 0, 100);
        let a = must_admit(backend, &request(scope, "s", global, src, 60, LONG_TTL)).await;
        assert_eq!(a.est_tokens, 60);
        let d = admit(backend, &request(scope, "s", global, src, 60, LONG_TTL)).await;
        check!(
            refusal(&d).map(|r| r.0) == Some(Gate::SourceTpm),
            "before refund: {d:?}"
        );
        backend.settle(&a, 10).await.unwrap(); // refund 50
        let d = admit(backend, &request(scope, "s", global, src, 60, LONG_TTL)).await;
        let GateDecision::Admitted(b) = d else {
            return Err(format!("after refund: {d:?}"));
        };
        check!(a.window == b.window, "admissions straddle windows");
        backend.settle(&b, 90).await.unwrap(); // charge 30: source at 100, global at 100
        let d = admit(backend, &request(scope, "s", global, src, 1, LONG_TTL)).await;
        check!(
            refusal(&d).map(|r| r.0) == Some(Gate::SourceTpm),
            "after charge: {d:?}"
        );
        let d = admit(
            backend,
            &request(scope, "t", global, Limits::default(), 31, LONG_TTL),
        )
        .await;
        check!(
            refusal(&d).map(|r| r.0) == Some(Gate::GlobalTpm),
            "global after charge: {d:?}"
        );
        let c = must_admit(
            backend,
            &request(scope, "t", global, Limits::default(), 30, LONG_TTL),
        )
        .await;
        backend.settle(&c, 0).await.unwrap(); // full refund (4xx)
        let e = must_admit(
            backend,
            &request(scope, "t", global, Limits::default(), 30, LONG_TTL),
        )
        .await;
        for lease in [&a, &b, &c, &e] {
            backend.release(lease).await.unwrap();
        }
        Ok(())
    })
    .await;
}

/// A lease whose holder never releases it frees its slot after the TTL; the late release of the
/// expired lease does not free the slot of the holder that replaced it.
pub async fn gate_contract_lease_expiry_reclaims_slot(backend: &dyn GateBackend, prefix: &str) {
    let scope = format!("{prefix}_GATE_EXPIRY");
    let scope = scope.as_str();
    let ttl = Duration::from_secs(1);
    let src = limits(1, 0, 0);
    let none = Limits::default();
    let a = must_admit(backend, &request(scope, "x", none, src, 0, ttl)).await;
    let d = admit(backend, &request(scope, "x", none, src, 0, ttl)).await;
    let (gate, wait) = refusal(&d).expect("slot is held");
    assert_eq!(gate, Gate::SourceConcurrency);
    assert!(
        wait > Duration::ZERO && wait <= ttl,
        "hint {wait:?} within the TTL"
    );
    tokio::time::sleep(ttl + SLACK).await;
    let b = must_admit(backend, &request(scope, "x", none, src, 0, ttl)).await;
    assert_eq!(backend.leases_held(scope).await.unwrap(), 1);
    backend.release(&a).await.unwrap();
    assert_eq!(
        backend.leases_held(scope).await.unwrap(),
        1,
        "stale release freed another's slot"
    );
    let d = admit(backend, &request(scope, "x", none, src, 0, ttl)).await;
    assert_eq!(refusal(&d).map(|r| r.0), Some(Gate::SourceConcurrency));
    backend.release(&b).await.unwrap();
    assert_eq!(backend.leases_held(scope).await.unwrap(), 0);
}

/// RPM and TPM quotas reset when the window rolls over. `window` is the backend's window length
/// (≤ 2 s); the case waits for the refusal's hint, which must not exceed it.
pub async fn gate_contract_window_rollover_resets_quota(
    backend: &dyn GateBackend,
    prefix: &str,
    window: Duration,
) {
    assert!(
        window <= Duration::from_secs(2),
        "build the backend with a short window"
    );
    let none = Limits::default();
    let src = limits(0, 2, 100);
    for round in 0..3 {
        let scope = format!("{prefix}_GATE_ROLL_{round}");
        let scope = scope.as_str();
        let a = must_admit(backend, &request(scope, "r", none, src, 40, LONG_TTL)).await;
        let b = must_admit(backend, &request(scope, "r", none, src, 40, LONG_TTL)).await;
        let d = admit(backend, &request(scope, "r", none, src, 40, LONG_TTL)).await;
        if a.window != b.window || refusal(&d).is_none() {
            // A boundary fell between the admissions: start again in a fresh scope.
            continue;
        }
        let (gate, wait) = refusal(&d).unwrap();
        assert_eq!(gate, Gate::SourceRpm);
        assert!(
            wait > Duration::ZERO && wait <= window,
            "hint {wait:?} beyond window {window:?}"
        );
        tokio::time::sleep(wait + SLACK).await;
        let c = must_admit(backend, &request(scope, "r", none, src, 40, LONG_TTL)).await;
        assert!(c.window > a.window, "new window index");
        // 60 more tokens fit only if the old window's 80 are gone.
        let e = must_admit(backend, &request(scope, "r", none, src, 60, LONG_TTL)).await;
        for lease in [&a, &b, &c, &e] {
            backend.release(lease).await.unwrap();
        }
        return;
    }
    panic!("window boundaries kept falling between two admissions");
}

/// `release` and `settle` are idempotent by lease id, in either order.
pub async fn gate_contract_release_and_settle_idempotent(backend: &dyn GateBackend, prefix: &str) {
    let conc_scope = format!("{prefix}_GATE_IDEM_C");
    let conc_scope = conc_scope.as_str();
    let global = limits(2, 0, 0);
    let none = Limits::default();
    let a = must_admit(
        backend,
        &request(conc_scope, "i", global, none, 0, LONG_TTL),
    )
    .await;
    let b = must_admit(
        backend,
        &request(conc_scope, "i", global, none, 0, LONG_TTL),
    )
    .await;
    backend.release(&a).await.unwrap();
    backend.release(&a).await.unwrap();
    assert_eq!(backend.leases_held(conc_scope).await.unwrap(), 1);
    let c = must_admit(
        backend,
        &request(conc_scope, "i", global, none, 0, LONG_TTL),
    )
    .await;
    let d = admit(
        backend,
        &request(conc_scope, "i", global, none, 0, LONG_TTL),
    )
    .await;
    assert_eq!(
        refusal(&d).map(|r| r.0),
        Some(Gate::GlobalConcurrency),
        "double release freed two"
    );
    for lease in [&a, &b, &c, &b, &c] {
        backend.release(lease).await.unwrap();
    }
    assert_eq!(backend.leases_held(conc_scope).await.unwrap(), 0);

    rerun_on_rollover(backend, prefix, "GATE_IDEM_T", |scope| async move {
        let scope = scope.as_str();
        let src = limits(0, 0, 100);
        let a = must_admit(backend, &request(scope, "i", none, src, 40, LONG_TTL)).await;
        let b = must_admit(backend, &request(scope, "i", none, src, 40, LONG_TTL)).await;
        backend.settle(&a, 10).await.unwrap();
        backend.settle(&a, 10).await.unwrap(); // a second refund would leave 20 instead of 50
        backend.release(&a).await.unwrap();
        backend.settle(&a, 0).await.unwrap(); // settle after release: still once
        backend.release(&b).await.unwrap();
        backend.settle(&b, 40).await.unwrap();
        backend.settle(&b, 0).await.unwrap(); // release-then-settle, then a repeat
        let c = must_admit(backend, &request(scope, "i", none, src, 40, LONG_TTL)).await; // 90
        let d = admit(backend, &request(scope, "i", none, src, 20, LONG_TTL)).await;
        check!(
            refusal(&d).map(|r| r.0) == Some(Gate::SourceTpm),
            "tokens refunded twice: {d:?}"
        );
        check!(a.window == c.window, "admissions straddle windows");
        backend.release(&c).await.unwrap();
        assert_eq!(backend.leases_held(scope).await.unwrap(), 0);
        Ok(())
    })
    .await;
}

/// `progress_age` is `None` until `mark_progress`, then grows with real time, is reset by the
/// next mark, and is per scope.
pub async fn gate_contract_progress_freshness(backend: &dyn GateBackend, prefix: &str) {
    let scope = format!("{prefix}_GATE_PROGRESS");
    let other = format!("{prefix}_GATE_PROGRESS_OTHER");
    assert_eq!(backend.progress_age(&scope).await.unwrap(), None);
    backend.mark_progress(&scope).await.unwrap();
    let fresh = backend.progress_age(&scope).await.unwrap().expect("marked");
    assert!(fresh < Duration::from_millis(250), "fresh age {fresh:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let aged = backend.progress_age(&scope).await.unwrap().expect("marked");
    assert!(
        aged >= Duration::from_millis(250) && aged < Duration::from_secs(3),
        "aged {aged:?}"
    );
    backend.mark_progress(&scope).await.unwrap();
    let again = backend.progress_age(&scope).await.unwrap().expect("marked");
    assert!(again < aged, "mark resets the age ({again:?} vs {aged:?})");
    assert_eq!(
        backend.progress_age(&other).await.unwrap(),
        None,
        "progress is per scope"
    );
}

/// Many concurrent admissions never exceed a concurrency limit (atomic check-and-count).
pub async fn gate_contract_concurrent_admissions_respect_limits(
    backend: &dyn GateBackend,
    prefix: &str,
) {
    let scope = format!("{prefix}_GATE_RACE");
    let scope = scope.as_str();
    let reqs: Vec<_> = (0..40)
        .map(|_| request(scope, "r", limits(0, 0, 0), limits(5, 0, 0), 0, LONG_TTL))
        .collect();
    let decisions = join_all(reqs.iter().map(|r| admit(backend, r))).await;
    let leases: Vec<Lease> = decisions
        .into_iter()
        .filter_map(|d| match d {
            GateDecision::Admitted(l) => Some(l),
            GateDecision::Refused { gate, .. } => {
                assert_eq!(gate, Gate::SourceConcurrency);
                None
            }
        })
        .collect();
    assert_eq!(leases.len(), 5);
    assert_eq!(backend.leases_held(scope).await.unwrap(), 5);
    join_all(leases.iter().map(|l| backend.release(l))).await;
    assert_eq!(backend.leases_held(scope).await.unwrap(), 0);
}

// ------------------------------------------------------------------------------------------
// Breaker cases
// ------------------------------------------------------------------------------------------

fn scope_source(prefix: &str, case: &str) -> (String, String) {
    (
        format!("{prefix}_BRK_{case}"),
        format!("{}_src", prefix.to_lowercase()),
    )
}

fn assert_short(config: &BreakerConfig) {
    assert!(
        config.cooldown <= Duration::from_millis(800),
        "cooldown too long for a real wait"
    );
    assert!(
        config.probe_ttl <= Duration::from_millis(1_500),
        "probe TTL too long"
    );
    assert!(
        config.max_cooldown >= 2 * config.cooldown,
        "cases need room for the streak to grow"
    );
}

async fn wait_out_cooldown(
    backend: &dyn BreakerBackend,
    scope: &str,
    source: &str,
    c: &BreakerConfig,
) {
    let snap = backend.snapshot(scope, source, c).await.unwrap();
    tokio::time::sleep(snap.retry_after + SLACK).await;
}

async fn take_probe(
    backend: &dyn BreakerBackend,
    scope: &str,
    source: &str,
    c: &BreakerConfig,
) -> (u64, Arc<str>) {
    match backend.acquire(scope, source, c).await.unwrap() {
        BreakerAdmit::Probe { epoch, probe_id } => (epoch, probe_id),
        other => panic!("expected a probe, got {other:?}"),
    }
}

/// Channel 1: `effective_threshold()` consecutive failures open; a success in between resets
/// the streak.
pub async fn breaker_contract_consecutive_failures_open(
    backend: &dyn BreakerBackend,
    prefix: &str,
    config: &BreakerConfig,
) {
    assert_short(config);
    let t = config.effective_threshold();
    assert!(
        t >= 2 && config.min_calls > 2 * t,
        "streak must open before the rate channel judges"
    );
    let (scope, source) = scope_source(prefix, "STREAK");
    let (scope, source) = (scope.as_str(), source.as_str());
    let rec = |v| backend.record(scope, source, config, 0, None, v);
    for _ in 0..t - 1 {
        assert!(rec(BreakerVerdict::Failure).await.unwrap());
    }
    assert!(rec(BreakerVerdict::Success).await.unwrap());
    let snap = backend.snapshot(scope, source, config).await.unwrap();
    assert_eq!(
        (snap.state, snap.consecutive_failures),
        (BreakerState::Closed, 0)
    );
    for _ in 0..t {
        assert!(rec(BreakerVerdict::Failure).await.unwrap());
    }
    let snap = backend.snapshot(scope, source, config).await.unwrap();
    assert_eq!(
        (snap.state, snap.epoch, snap.opens, snap.open_streak),
        (BreakerState::Open, 1, 1, 0)
    );
    match backend.acquire(scope, source, config).await.unwrap() {
        BreakerAdmit::Refused {
            state: BreakerState::Open,
            retry_after,
        } => {
            assert!(retry_after > Duration::ZERO && retry_after <= config.cooldown);
        }
        other => panic!("expected OPEN refusal, got {other:?}"),
    }
}

/// Channel 2 opens a source that fails often without a long streak (and grows the streak);
/// a healthy window suppresses channel 1.
pub async fn breaker_contract_rate_channel_and_health_suppression(
    backend: &dyn BreakerBackend,
    prefix: &str,
    config: &BreakerConfig,
) {
    assert_short(config);
    let t = config.effective_threshold();
    assert!(t >= 3, "needs a threshold of at least 3");
    assert!(
        config.bucket >= Duration::from_secs(10),
        "samples must stay in the window"
    );
    let (scope, source) = scope_source(prefix, "RATE");
    let (scope, source) = (scope.as_str(), source.as_str());
    // (t−1) failures then one success, repeated: the streak never reaches t, the rate is
    // (t−1)/t ≥ 2/3.
    assert!(f64::from(t - 1) / f64::from(t) >= config.fail_rate);
    let mut n = 0;
    while backend.snapshot(scope, source, config).await.unwrap().state == BreakerState::Closed {
        let v = if n % t == t - 1 {
            BreakerVerdict::Success
        } else {
            BreakerVerdict::Failure
        };
        assert!(backend
            .record(scope, source, config, 0, None, v)
            .await
            .unwrap());
        n += 1;
        assert!(n <= config.min_calls + t, "rate channel never opened");
    }
    assert!(
        n >= config.min_calls,
        "opened before min_calls samples ({n})"
    );
    let snap = backend.snapshot(scope, source, config).await.unwrap();
    assert_eq!((snap.state, snap.open_streak), (BreakerState::Open, 1));

    let (scope, source) = scope_source(prefix, "SUPPRESS");
    let (scope, source) = (scope.as_str(), source.as_str());
    for _ in 0..config.min_calls {
        assert!(backend
            .record(scope, source, config, 0, None, BreakerVerdict::Success)
            .await
            .unwrap());
    }
    for _ in 0..t {
        assert!(backend
            .record(scope, source, config, 0, None, BreakerVerdict::Failure)
            .await
            .unwrap());
    }
    let snap = backend.snapshot(scope, source, config).await.unwrap();
    assert_eq!(
        snap.state,
        BreakerState::Closed,
        "healthy window suppresses the streak channel"
    );
    assert_eq!(snap.consecutive_failures, t);
}

/// `force_open` opens at once from CLOSED, increments the epoch and refuses with the cooldown.
pub async fn breaker_contract_force_open(
    backend: &dyn BreakerBackend,
    prefix: &str,
    config: &BreakerConfig,
) {
    assert_short(config);
    let (scope, source) = scope_source(prefix, "FORCE");
    let (scope, source) = (scope.as_str(), source.as_str());
    assert_eq!(
        backend.acquire(scope, source, config).await.unwrap(),
        BreakerAdmit::Pass { epoch: 0 }
    );
    backend.force_open(scope, source, config).await.unwrap();
    let snap = backend.snapshot(scope, source, config).await.unwrap();
    assert_eq!(
        (snap.state, snap.epoch, snap.opens),
        (BreakerState::Open, 1, 1)
    );
    match backend.acquire(scope, source, config).await.unwrap() {
        BreakerAdmit::Refused {
            state: BreakerState::Open,
            retry_after,
        } => {
            assert!(retry_after > Duration::ZERO && retry_after <= config.cooldown);
        }
        other => panic!("expected OPEN refusal, got {other:?}"),
    }
}

/// `retry_after`: CLOSED → 0; OPEN → remaining cooldown (shrinking); HALF_OPEN → 0, also for a
/// caller refused because the probe is taken.
pub async fn breaker_contract_retry_after_values(
    backend: &dyn BreakerBackend,
    prefix: &str,
    config: &BreakerConfig,
) {
    assert_short(config);
    let (scope, source) = scope_source(prefix, "RETRY");
    let (scope, source) = (scope.as_str(), source.as_str());
    let snap = backend.snapshot(scope, source, config).await.unwrap();
    assert_eq!(
        (snap.state, snap.retry_after),
        (BreakerState::Closed, Duration::ZERO)
    );
    backend.force_open(scope, source, config).await.unwrap();
    let first = backend
        .snapshot(scope, source, config)
        .await
        .unwrap()
        .retry_after;
    assert!(
        first > Duration::ZERO && first <= config.cooldown,
        "{first:?}"
    );
    tokio::time::sleep(config.cooldown / 4).await;
    let later = backend
        .snapshot(scope, source, config)
        .await
        .unwrap()
        .retry_after;
    assert!(
        later < first && later > Duration::ZERO,
        "{later:?} after {first:?}"
    );
    wait_out_cooldown(backend, scope, source, config).await;
    let snap = backend.snapshot(scope, source, config).await.unwrap();
    assert_eq!(
        (snap.state, snap.retry_after),
        (BreakerState::HalfOpen, Duration::ZERO)
    );
    let _probe = take_probe(backend, scope, source, config).await;
    assert_eq!(
        backend.acquire(scope, source, config).await.unwrap(),
        BreakerAdmit::Refused {
            state: BreakerState::HalfOpen,
            retry_after: Duration::ZERO
        }
    );
}

/// HALF_OPEN admits exactly one probe among many concurrent callers; its success closes.
pub async fn breaker_contract_half_open_single_probe(
    backend: &dyn BreakerBackend,
    prefix: &str,
    config: &BreakerConfig,
) {
    assert_short(config);
    let (scope, source) = scope_source(prefix, "PROBE1");
    let (scope, source) = (scope.as_str(), source.as_str());
    backend.force_open(scope, source, config).await.unwrap();
    wait_out_cooldown(backend, scope, source, config).await;
    let answers = join_all((0..16).map(|_| backend.acquire(scope, source, config))).await;
    let mut probes = Vec::new();
    for a in answers {
        match a.unwrap() {
            BreakerAdmit::Probe { epoch, probe_id } => probes.push((epoch, probe_id)),
            BreakerAdmit::Refused {
                state: BreakerState::HalfOpen,
                retry_after,
            } => {
                assert_eq!(retry_after, Duration::ZERO);
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(probes.len(), 1, "exactly one probe");
    let (epoch, id) = probes.pop().unwrap();
    assert!(
        backend
            .snapshot(scope, source, config)
            .await
            .unwrap()
            .probe_held
    );
    assert!(backend
        .record(
            scope,
            source,
            config,
            epoch,
            Some(&id),
            BreakerVerdict::Success
        )
        .await
        .unwrap());
    let snap = backend.snapshot(scope, source, config).await.unwrap();
    assert_eq!((snap.state, snap.probe_held), (BreakerState::Closed, false));
    assert_eq!(
        backend.acquire(scope, source, config).await.unwrap(),
        BreakerAdmit::Pass { epoch }
    );
}

/// The probe is a lease: an expired one frees the slot for a new probe; the expired holder's
/// late verdict and release do not touch the new probe; `release_probe` is idempotent and gives
/// no verdict; a failed probe re-opens.
pub async fn breaker_contract_probe_lease_expiry(
    backend: &dyn BreakerBackend,
    prefix: &str,
    config: &BreakerConfig,
) {
    assert_short(config);
    let (scope, source) = scope_source(prefix, "PROBETTL");
    let (scope, source) = (scope.as_str(), source.as_str());
    backend.force_open(scope, source, config).await.unwrap();
    wait_out_cooldown(backend, scope, source, config).await;
    let (epoch, p1) = take_probe(backend, scope, source, config).await;
    assert!(matches!(
        backend.acquire(scope, source, config).await.unwrap(),
        BreakerAdmit::Refused {
            state: BreakerState::HalfOpen,
            ..
        }
    ));
    tokio::time::sleep(config.probe_ttl + SLACK).await;
    assert!(
        !backend
            .snapshot(scope, source, config)
            .await
            .unwrap()
            .probe_held,
        "lease expired"
    );
    let (epoch2, p2) = take_probe(backend, scope, source, config).await;
    assert_eq!(epoch2, epoch, "half-open re-probing is not an opening");
    assert_ne!(p1, p2);
    let late = backend.record(
        scope,
        source,
        config,
        epoch,
        Some(&p1),
        BreakerVerdict::Success,
    );
    assert!(
        !late.await.unwrap(),
        "the expired probe's verdict is not applied"
    );
    backend.release_probe(scope, source, &p1).await.unwrap();
    let snap = backend.snapshot(scope, source, config).await.unwrap();
    assert_eq!(
        (snap.state, snap.probe_held),
        (BreakerState::HalfOpen, true)
    );
    backend.release_probe(scope, source, &p2).await.unwrap();
    backend.release_probe(scope, source, &p2).await.unwrap();
    let snap = backend.snapshot(scope, source, config).await.unwrap();
    assert_eq!(
        (snap.state, snap.probe_held, snap.epoch),
        (BreakerState::HalfOpen, false, epoch)
    );
    let (_, p3) = take_probe(backend, scope, source, config).await;
    assert!(backend
        .record(
            scope,
            source,
            config,
            epoch,
            Some(&p3),
            BreakerVerdict::Failure
        )
        .await
        .unwrap());
    let snap = backend.snapshot(scope, source, config).await.unwrap();
    assert_eq!(
        (snap.state, snap.epoch, snap.open_streak),
        (BreakerState::Open, epoch + 1, 1)
    );
}

/// Failed probes grow the open duration (`cooldown × 2^(streak−1)`, capped).
pub async fn breaker_contract_failed_probes_grow_cooldown(
    backend: &dyn BreakerBackend,
    prefix: &str,
    config: &BreakerConfig,
) {
    assert_short(config);
    let (scope, source) = scope_source(prefix, "GROW");
    let (scope, source) = (scope.as_str(), source.as_str());
    backend.force_open(scope, source, config).await.unwrap();
    let mut waits = Vec::new();
    for _ in 0..2 {
        wait_out_cooldown(backend, scope, source, config).await;
        let (epoch, id) = take_probe(backend, scope, source, config).await;
        let applied = backend.record(
            scope,
            source,
            config,
            epoch,
            Some(&id),
            BreakerVerdict::Failure,
        );
        assert!(applied.await.unwrap());
        waits.push(
            backend
                .snapshot(scope, source, config)
                .await
                .unwrap()
                .retry_after,
        );
    }
    assert!(
        waits[0] <= config.cooldown,
        "streak 1 opens for one cooldown: {waits:?}"
    );
    assert!(
        waits[1] > config.cooldown,
        "streak 2 opens longer: {waits:?}"
    );
    assert!(waits[1] <= 2 * config.cooldown);
    let snap = backend.snapshot(scope, source, config).await.unwrap();
    assert_eq!((snap.open_streak, snap.opens, snap.epoch), (2, 3, 3));
}

/// Verdicts carrying an epoch from before an opening are refused (`applied = false`) and change
/// nothing, even with a valid probe id.
pub async fn breaker_contract_epoch_fencing(
    backend: &dyn BreakerBackend,
    prefix: &str,
    config: &BreakerConfig,
) {
    assert_short(config);
    let (scope, source) = scope_source(prefix, "FENCE");
    let (scope, source) = (scope.as_str(), source.as_str());
    let BreakerAdmit::Pass { epoch: old } = backend.acquire(scope, source, config).await.unwrap()
    else {
        panic!("fresh breaker must pass")
    };
    backend.force_open(scope, source, config).await.unwrap();
    for v in [BreakerVerdict::Failure, BreakerVerdict::Success] {
        assert!(!backend
            .record(scope, source, config, old, None, v)
            .await
            .unwrap());
    }
    let snap = backend.snapshot(scope, source, config).await.unwrap();
    assert_eq!(
        (snap.state, snap.epoch, snap.consecutive_failures),
        (BreakerState::Open, old + 1, 0)
    );
    wait_out_cooldown(backend, scope, source, config).await;
    let (epoch, id) = take_probe(backend, scope, source, config).await;
    assert_eq!(epoch, old + 1);
    let stale = backend.record(
        scope,
        source,
        config,
        old,
        Some(&id),
        BreakerVerdict::Success,
    );
    assert!(!stale.await.unwrap(), "old epoch with a valid probe id");
    assert_eq!(
        backend.snapshot(scope, source, config).await.unwrap().state,
        BreakerState::HalfOpen
    );
    assert!(backend
        .record(
            scope,
            source,
            config,
            epoch,
            Some(&id),
            BreakerVerdict::Success
        )
        .await
        .unwrap());
    assert_eq!(
        backend.snapshot(scope, source, config).await.unwrap().state,
        BreakerState::Closed
    );
    for _ in 0..config.effective_threshold() {
        let late = backend.record(scope, source, config, old, None, BreakerVerdict::Failure);
        assert!(!late.await.unwrap());
    }
    assert_eq!(
        backend.snapshot(scope, source, config).await.unwrap().state,
        BreakerState::Closed
    );
}

/// One governance store seen through the three ports an attempt case needs: the attempt port
/// under test, and the gate and breaker ports of the same store to observe it.
pub struct AttemptStore<'a> {
    /// The backend under test.
    pub attempts: &'a dyn AttemptBackend,
    /// The same store's gates (leases held, progress, TPM).
    pub gate: &'a dyn GateBackend,
    /// The same store's breakers (snapshots, force-open).
    pub breakers: &'a dyn BreakerBackend,
}

fn finished(action: BreakerAction, tokens: u64, progress: bool) -> AttemptOutcome {
    AttemptOutcome {
        action,
        tokens,
        progress,
    }
}

async fn attempt_admit(
    store: &AttemptStore<'_>,
    req: &GateRequest,
    config: &BreakerConfig,
) -> AttemptAdmit {
    store
        .attempts
        .admit(req, config)
        .await
        .expect("attempt admit: backend error")
}

async fn attempt_permit(
    store: &AttemptStore<'_>,
    req: &GateRequest,
    config: &BreakerConfig,
) -> AttemptPermit {
    match attempt_admit(store, req, config).await {
        AttemptAdmit::Admitted(permit) => permit,
        other => panic!("expected admission of {}, got {other:?}", req.lease_id),
    }
}

/// A success: admit takes a lease in every gate; finish settles TPM at the actual tokens,
/// releases the lease, marks progress and leaves the breaker CLOSED with no failure streak.
pub async fn attempt_contract_success_settles_releases_and_marks_progress(
    store: &AttemptStore<'_>,
    prefix: &str,
    config: &BreakerConfig,
) {
    rerun_on_rollover(store.gate, prefix, "ATT_OK", |scope| async move {
        let global = limits(0, 0, 1_000);
        let per_source = limits(1, 0, 0);
        let req = request(&scope, "a", global, per_source, 400, LONG_TTL);
        let permit = attempt_permit(store, &req, config).await;
        check!(
            (
                permit.epoch,
                permit.probe_id.is_none(),
                permit.lease.est_tokens
            ) == (0, true, 400),
            "closed breaker, no probe, estimate deducted: {permit:?}"
        );
        check!(
            store.gate.leases_held(&scope).await.unwrap() == 1,
            "one lease held"
        );
        let second = request(&scope, "a", global, per_source, 0, LONG_TTL);
        match attempt_admit(store, &second, config).await {
            AttemptAdmit::GateRefused {
                gate: Gate::SourceConcurrency,
                ..
            } => {}
            other => return Err(format!("source slot is taken, got {other:?}")),
        }
        check!(
            store.gate.progress_age(&scope).await.unwrap().is_none(),
            "no progress before the finish"
        );
        let success = BreakerAction::Record(BreakerVerdict::Success);
        let after = store
            .attempts
            .finish(&permit, config, finished(success, 100, true))
            .await
            .unwrap();
        check!(
            after == BreakerStatus::Closed,
            "a success leaves the breaker closed: {after:?}"
        );
        check!(
            store.gate.leases_held(&scope).await.unwrap() == 0,
            "lease released"
        );
        check!(
            store.gate.progress_age(&scope).await.unwrap().is_some(),
            "a success marks progress"
        );
        let snap = store.breakers.snapshot(&scope, "a", config).await.unwrap();
        check!(
            (snap.state, snap.consecutive_failures) == (BreakerState::Closed, 0),
            "closed after a success: {snap:?}"
        );
        // Settled at 100 of the 400 estimated: 900 more fit the 1 000 TPM.
        let rest = request(&scope, "a", global, per_source, 900, LONG_TTL);
        match attempt_admit(store, &rest, config).await {
            AttemptAdmit::Admitted(p) => {
                store
                    .attempts
                    .finish(&p, config, finished(BreakerAction::NoVerdict, 900, false))
                    .await
                    .unwrap();
            }
            other => return Err(format!("settlement refunded 300 tokens, got {other:?}")),
        }
        Ok(())
    })
    .await;
}

/// Finishes nobody waits for can ride on a later call: `admit_after` applies them in order before
/// the admission (so the slot a carried finish frees is free for it), `finish_all` applies several,
/// and either, sent again (a lost reply), counts nothing twice.
pub async fn attempt_contract_carried_finishes_apply_before_the_admission(
    store: &AttemptStore<'_>,
    prefix: &str,
    config: &BreakerConfig,
) {
    rerun_on_rollover(store.gate, prefix, "ATT_CARRY", |scope| async move {
        let global = limits(0, 0, 1_000);
        let one_each = limits(1, 0, 0);
        let success = BreakerAction::Record(BreakerVerdict::Success);
        let a = attempt_permit(
            store,
            &request(&scope, "a", global, one_each, 400, LONG_TTL),
            config,
        )
        .await;
        let b = attempt_permit(
            store,
            &request(&scope, "b", global, one_each, 400, LONG_TTL),
            config,
        )
        .await;
        let held = |permit: &AttemptPermit, tokens| PendingFinish {
            permit: permit.clone(),
            breaker: config.clone(),
            outcome: finished(success, tokens, true),
        };
        // Source a's only slot is a's: the admission carrying a's finish gets it.
        let next = request(&scope, "a", global, one_each, 100, LONG_TTL);
        let carried = [held(&a, 100)];
        let c = match store
            .attempts
            .admit_after(&carried, &next, config)
            .await
            .unwrap()
        {
            AttemptAdmit::Admitted(c) => c,
            other => return Err(format!("a's slot was freed first, got {other:?}")),
        };
        check!(
            store.gate.leases_held(&scope).await.unwrap() == 2,
            "b and c hold slots, a's is released"
        );
        check!(
            store.gate.progress_age(&scope).await.unwrap().is_some(),
            "the carried success marked progress"
        );
        // b and c at once, then the same again: applied once. 400 (b) + 100 (c) estimated,
        // settled at 300 + 100, plus a's 100: 500 of the 1 000 TPM used.
        let both = [held(&b, 300), held(&c, 100)];
        store.attempts.finish_all(&both).await.unwrap();
        store.attempts.finish_all(&both).await.unwrap();
        let z = request(&scope, "z", global, limits(0, 0, 0), 0, LONG_TTL);
        match store
            .attempts
            .admit_after(&carried, &z, config)
            .await
            .unwrap()
        {
            AttemptAdmit::Admitted(_) => {}
            other => return Err(format!("nothing is full, got {other:?}")),
        }
        check!(
            store.gate.leases_held(&scope).await.unwrap() == 1,
            "b and c released, a re-sent finish of a took nothing back: only z holds a slot"
        );
        let fits = request(&scope, "b", global, one_each, 500, LONG_TTL);
        match attempt_admit(store, &fits, config).await {
            AttemptAdmit::Admitted(_) => {}
            other => return Err(format!("500 of 1 000 TPM used, so 500 fit: {other:?}")),
        }
        let over = request(&scope, "c", global, one_each, 1, LONG_TTL);
        match attempt_admit(store, &over, config).await {
            AttemptAdmit::GateRefused {
                gate: Gate::GlobalTpm,
                ..
            } => {}
            other => return Err(format!("the TPM is full, nothing counted twice: {other:?}")),
        }
        let snap = store.breakers.snapshot(&scope, "a", config).await.unwrap();
        check!(
            (snap.state, snap.consecutive_failures) == (BreakerState::Closed, 0),
            "closed after the carried success: {snap:?}"
        );
        Ok(())
    })
    .await;
}

/// An OPEN breaker refuses before any gate counts; after the cooldown the probe goes to an
/// attempt the gates admit (a probe taken for a gate refusal is given back at once), and the
/// probe's success closes the breaker.
pub async fn attempt_contract_open_breaker_spends_no_quota_and_probe_decides(
    store: &AttemptStore<'_>,
    prefix: &str,
    config: &BreakerConfig,
) {
    assert_short(config);
    let (scope, source) = scope_source(prefix, "ATT_PROBE");
    let (scope, source) = (scope.as_str(), source.as_str());
    let global = limits(1, 0, 0);
    let none = Limits::default();
    store
        .breakers
        .force_open(scope, source, config)
        .await
        .unwrap();
    match attempt_admit(
        store,
        &request(scope, source, global, none, 0, LONG_TTL),
        config,
    )
    .await
    {
        AttemptAdmit::BreakerRefused {
            state: BreakerState::Open,
            retry_after,
        } => assert!(retry_after > Duration::ZERO && retry_after <= config.cooldown),
        other => panic!("expected an OPEN refusal, got {other:?}"),
    }
    assert_eq!(store.gate.leases_held(scope).await.unwrap(), 0);
    wait_out_cooldown(store.breakers, scope, source, config).await;

    // Another source holds the scope's only global slot: the half-open source's attempt is
    // refused by the gate and must not keep the probe.
    let other = format!("{source}_other");
    let blocker = attempt_permit(
        store,
        &request(scope, &other, global, none, 0, LONG_TTL),
        config,
    )
    .await;
    let req = request(scope, source, global, none, 0, LONG_TTL);
    match attempt_admit(store, &req, config).await {
        AttemptAdmit::GateRefused {
            gate: Gate::GlobalConcurrency,
            ..
        } => {}
        other => panic!("expected the global slot to refuse, got {other:?}"),
    }
    let snap = store
        .breakers
        .snapshot(scope, source, config)
        .await
        .unwrap();
    assert_eq!(
        (snap.state, snap.probe_held),
        (BreakerState::HalfOpen, false)
    );
    store
        .attempts
        .finish(
            &blocker,
            config,
            finished(BreakerAction::NoVerdict, 0, false),
        )
        .await
        .unwrap();

    let probe = attempt_permit(
        store,
        &request(scope, source, global, none, 0, LONG_TTL),
        config,
    )
    .await;
    assert_eq!(probe.epoch, 1);
    assert!(
        probe.probe_id.is_some(),
        "half-open: this attempt is the probe"
    );
    match attempt_admit(
        store,
        &request(scope, source, none, none, 0, LONG_TTL),
        config,
    )
    .await
    {
        AttemptAdmit::BreakerRefused {
            state: BreakerState::HalfOpen,
            retry_after,
        } => assert_eq!(retry_after, Duration::ZERO),
        other => panic!("the probe is taken, got {other:?}"),
    }
    let success = BreakerAction::Record(BreakerVerdict::Success);
    store
        .attempts
        .finish(&probe, config, finished(success, 0, true))
        .await
        .unwrap();
    let snap = store
        .breakers
        .snapshot(scope, source, config)
        .await
        .unwrap();
    assert_eq!((snap.state, snap.probe_held), (BreakerState::Closed, false));
    assert_eq!(store.gate.leases_held(scope).await.unwrap(), 0);
}

/// A finish answers the breaker as the attempt left it: a probe given back without a verdict
/// leaves it half-open (the next attempt may probe), a failed probe re-opens it for the grown
/// cooldown, a successful one closes it.
pub async fn attempt_contract_finish_reports_the_breaker_it_leaves(
    store: &AttemptStore<'_>,
    prefix: &str,
    config: &BreakerConfig,
) {
    assert_short(config);
    let (scope, source) = scope_source(prefix, "ATT_AFTER");
    let (scope, source) = (scope.as_str(), source.as_str());
    let none = Limits::default();
    let admit = || request(scope, source, none, none, 0, LONG_TTL);
    store
        .breakers
        .force_open(scope, source, config)
        .await
        .unwrap();
    wait_out_cooldown(store.breakers, scope, source, config).await;

    let probe = attempt_permit(store, &admit(), config).await;
    assert!(probe.probe_id.is_some(), "half-open: the probe");
    let given_back = store
        .attempts
        .finish(&probe, config, finished(BreakerAction::NoVerdict, 0, false))
        .await
        .unwrap();
    assert_eq!(given_back, BreakerStatus::HalfOpen);

    let probe = attempt_permit(store, &admit(), config).await;
    assert!(probe.probe_id.is_some(), "the probe was given back");
    let failure = BreakerAction::Record(BreakerVerdict::Failure);
    let failed = store
        .attempts
        .finish(&probe, config, finished(failure, 0, false))
        .await
        .unwrap();
    let snap = store
        .breakers
        .snapshot(scope, source, config)
        .await
        .unwrap();
    assert_eq!((snap.state, snap.open_streak), (BreakerState::Open, 1));
    match failed {
        BreakerStatus::Open { retry_after } => assert!(
            retry_after <= config.cooldown && retry_after >= snap.retry_after,
            "the fresh cooldown, read before the snapshot: {retry_after:?} vs {snap:?}"
        ),
        other => panic!("a failed probe re-opens: {other:?}"),
    }

    wait_out_cooldown(store.breakers, scope, source, config).await;
    let probe = attempt_permit(store, &admit(), config).await;
    let success = BreakerAction::Record(BreakerVerdict::Success);
    let closed = store
        .attempts
        .finish(&probe, config, finished(success, 0, true))
        .await
        .unwrap();
    assert_eq!(closed, BreakerStatus::Closed);
    assert_eq!(store.gate.leases_held(scope).await.unwrap(), 0);
}

/// Failure verdicts of finished attempts open the breaker at the streak threshold; a verdict of
/// the epoch before the opening is fenced off; a dead source's finish (force-open) re-opens a
/// half-open breaker and gives its probe back.
pub async fn attempt_contract_failures_open_and_force_open(
    store: &AttemptStore<'_>,
    prefix: &str,
    config: &BreakerConfig,
) {
    assert_short(config);
    let t = config.effective_threshold();
    assert!(
        t >= 2 && config.min_calls > t,
        "the streak channel must decide"
    );
    let (scope, source) = scope_source(prefix, "ATT_FAIL");
    let (scope, source) = (scope.as_str(), source.as_str());
    let none = Limits::default();
    let failure = BreakerAction::Record(BreakerVerdict::Failure);
    let mut permits = Vec::new();
    for _ in 0..=t {
        permits.push(
            attempt_permit(
                store,
                &request(scope, source, none, none, 0, LONG_TTL),
                config,
            )
            .await,
        );
    }
    let late = permits.pop().expect("t + 1 permits");
    let mut after = Vec::new();
    for permit in &permits {
        after.push(
            store
                .attempts
                .finish(permit, config, finished(failure, 0, false))
                .await
                .unwrap(),
        );
    }
    // Each finish reports the breaker it leaves: closed until the threshold, then open for the
    // cooldown (what the caller's retry_after must not undercut).
    let tripped = after.pop().expect("t finishes");
    assert!(
        after.iter().all(|a| *a == BreakerStatus::Closed),
        "{after:?}"
    );
    assert!(
        matches!(tripped, BreakerStatus::Open { retry_after }
            if retry_after > Duration::ZERO && retry_after <= config.cooldown),
        "the failure that trips reports the cooldown: {tripped:?}"
    );
    let snap = store
        .breakers
        .snapshot(scope, source, config)
        .await
        .unwrap();
    assert_eq!(
        (snap.state, snap.epoch, snap.opens),
        (BreakerState::Open, 1, 1)
    );
    // Admitted at epoch 0, finished after the opening: the verdict is fenced, the lease released,
    // and the answer is still the open breaker.
    let fenced = store
        .attempts
        .finish(&late, config, finished(failure, 0, false))
        .await
        .unwrap();
    assert_eq!(fenced.state(), BreakerState::Open, "{fenced:?}");
    let snap = store
        .breakers
        .snapshot(scope, source, config)
        .await
        .unwrap();
    assert_eq!(
        (snap.state, snap.epoch, snap.consecutive_failures),
        (BreakerState::Open, 1, 0)
    );
    assert_eq!(store.gate.leases_held(scope).await.unwrap(), 0);

    wait_out_cooldown(store.breakers, scope, source, config).await;
    let probe = attempt_permit(
        store,
        &request(scope, source, none, none, 0, LONG_TTL),
        config,
    )
    .await;
    assert!(probe.probe_id.is_some());
    let dead = store
        .attempts
        .finish(&probe, config, finished(BreakerAction::ForceOpen, 0, false))
        .await
        .unwrap();
    assert!(
        matches!(dead, BreakerStatus::Open { retry_after }
            if retry_after > Duration::ZERO && retry_after <= config.cooldown),
        "a dead source's finish reports the open breaker: {dead:?}"
    );
    let snap = store
        .breakers
        .snapshot(scope, source, config)
        .await
        .unwrap();
    assert_eq!(
        (snap.state, snap.epoch, snap.probe_held),
        (BreakerState::Open, 2, false)
    );
    assert_eq!(store.gate.leases_held(scope).await.unwrap(), 0);
}

// ---------------------------------------------------------------------------------------------
// Spend budgets (docs/behaviour.md §5.8): reserve the estimate, settle the real cost.

fn budget(prefix: &str, name: &str, limit_micros: u64, period: BudgetPeriod) -> BudgetClaim {
    BudgetClaim {
        key: Arc::from(format!("{prefix}:{name}")),
        limit_micros,
        period,
    }
}

fn budget_request(claims: Vec<BudgetClaim>, est_micros: u64, lease_ttl: Duration) -> BudgetRequest {
    let n = LEASE_SEQ.fetch_add(1, Ordering::Relaxed);
    let first = claims.first().map_or("-", |c| &*c.key);
    let lease_id = Arc::from(format!("budget/{first}/{n}"));
    BudgetRequest {
        claims,
        est_micros,
        lease_id,
        lease_ttl,
    }
}

async fn must_reserve(backend: &dyn GateBackend, req: &BudgetRequest) -> BudgetLease {
    match backend.reserve_budget(req).await.expect("backend answers") {
        BudgetDecision::Reserved(lease) => lease,
        other => panic!("expected a reservation, got {other:?}"),
    }
}

async fn must_exhaust(backend: &dyn GateBackend, req: &BudgetRequest) -> BudgetExhausted {
    match backend.reserve_budget(req).await.expect("backend answers") {
        BudgetDecision::Exhausted(e) => e,
        other => panic!("expected exhaustion, got {other:?}"),
    }
}

async fn spent(backend: &dyn GateBackend, claim: &BudgetClaim) -> u64 {
    backend
        .budget_spend(claim)
        .await
        .expect("backend answers")
        .spent_micros
}

/// Reserve counts the estimate; settling below it refunds the difference, idempotently.
pub async fn budget_contract_reserve_and_settle_refund(backend: &dyn GateBackend, prefix: &str) {
    let day = budget(prefix, "refund", 1_000, BudgetPeriod::Day);
    let lease = must_reserve(backend, &budget_request(vec![day.clone()], 600, LONG_TTL)).await;
    assert_eq!(lease.est_micros, 600);
    assert_eq!(spent(backend, &day).await, 600, "the estimate is reserved");
    must_exhaust(backend, &budget_request(vec![day.clone()], 600, LONG_TTL)).await;
    backend.settle_budget(&lease, 150).await.expect("settle");
    backend
        .settle_budget(&lease, 150)
        .await
        .expect("settle again");
    assert_eq!(spent(backend, &day).await, 150, "refunded once");
    must_reserve(backend, &budget_request(vec![day.clone()], 600, LONG_TTL)).await;
    assert_eq!(spent(backend, &day).await, 750);
}

/// Settling above the estimate charges the difference; the overshoot is bounded by what was in
/// flight and nothing more is admitted once the limit is reached.
pub async fn budget_contract_settle_charges_and_overshoot_is_bounded(
    backend: &dyn GateBackend,
    prefix: &str,
) {
    let day = budget(prefix, "charge", 1_000, BudgetPeriod::Day);
    let mut leases = Vec::new();
    for _ in 0..4 {
        leases.push(must_reserve(backend, &budget_request(vec![day.clone()], 250, LONG_TTL)).await);
    }
    must_exhaust(backend, &budget_request(vec![day.clone()], 1, LONG_TTL)).await;
    for lease in &leases {
        backend.settle_budget(lease, 400).await.expect("settle");
    }
    // Four calls in flight each cost 150 more than estimated: 600 over, and no more.
    assert_eq!(spent(backend, &day).await, 1_600);
    let e = must_exhaust(backend, &budget_request(vec![day.clone()], 0, LONG_TTL)).await;
    assert_eq!(
        (e.spent_micros, e.limit_micros, e.remaining_micros()),
        (1_600, 1_000, 0)
    );
}

/// A refusal names the first budget without room, says when its window resets, and counts
/// nothing in any budget of the request.
pub async fn budget_contract_exhaustion_counts_nothing(backend: &dyn GateBackend, prefix: &str) {
    let roomy = budget(prefix, "roomy", 10_000, BudgetPeriod::Hour);
    let tight = budget(prefix, "tight", 500, BudgetPeriod::Month);
    must_reserve(
        backend,
        &budget_request(vec![roomy.clone(), tight.clone()], 400, LONG_TTL),
    )
    .await;
    let e = must_exhaust(
        backend,
        &budget_request(vec![roomy.clone(), tight.clone()], 200, LONG_TTL),
    )
    .await;
    assert_eq!(&*e.key, &*tight.key);
    assert_eq!(
        (e.limit_micros, e.spent_micros, e.remaining_micros()),
        (500, 400, 100)
    );
    let month_left = backend.budget_spend(&tight).await.expect("spend").resets_in;
    assert!(
        e.retry_after <= month_left + Duration::from_secs(1)
            && e.retry_after + Duration::from_secs(1) >= month_left,
        "retry_after {:?} is when the month resets ({month_left:?})",
        e.retry_after
    );
    assert_eq!(
        (spent(backend, &roomy).await, spent(backend, &tight).await),
        (400, 400)
    );
}

/// A new window starts empty; a reservation settled after its window rolled over leaves the new
/// window alone. `period` must be a short fixed window (≤ 2 s).
pub async fn budget_contract_window_reset(backend: &dyn GateBackend, prefix: &str) {
    let window = Duration::from_secs(1);
    let claim = budget(prefix, "reset", 100, BudgetPeriod::Fixed(window));
    // Start just after a window begins, so the case has the whole window.
    let left = backend.budget_spend(&claim).await.expect("spend").resets_in;
    tokio::time::sleep(left + SLACK).await;
    let old = must_reserve(backend, &budget_request(vec![claim.clone()], 100, LONG_TTL)).await;
    let e = must_exhaust(backend, &budget_request(vec![claim.clone()], 1, LONG_TTL)).await;
    assert!(
        e.retry_after <= window,
        "resets within the window: {:?}",
        e.retry_after
    );
    tokio::time::sleep(e.retry_after + SLACK).await;
    assert_eq!(spent(backend, &claim).await, 0, "a new window starts empty");
    let new = must_reserve(backend, &budget_request(vec![claim.clone()], 30, LONG_TTL)).await;
    assert_ne!(old.windows, new.windows);
    backend.settle_budget(&old, 0).await.expect("late settle");
    assert_eq!(
        spent(backend, &claim).await,
        30,
        "the late settle left the new window alone"
    );
}

/// A reservation never settled within its TTL stays counted at its estimate; a late settle is a
/// no-op.
pub async fn budget_contract_lease_expiry(backend: &dyn GateBackend, prefix: &str) {
    let day = budget(prefix, "expiry", 1_000, BudgetPeriod::Day);
    let ttl = Duration::from_millis(300);
    let lease = must_reserve(backend, &budget_request(vec![day.clone()], 400, ttl)).await;
    tokio::time::sleep(ttl + SLACK).await;
    backend.settle_budget(&lease, 0).await.expect("late settle");
    assert_eq!(
        spent(backend, &day).await,
        400,
        "the estimate stays charged"
    );
    // A live reservation still settles normally.
    let live = must_reserve(backend, &budget_request(vec![day.clone()], 100, LONG_TTL)).await;
    backend.settle_budget(&live, 50).await.expect("settle");
    assert_eq!(spent(backend, &day).await, 450);
}

/// Concurrent reservations never exceed the budget by more than their estimates allow.
pub async fn budget_contract_concurrent_reservations_respect_the_limit(
    backend: &dyn GateBackend,
    prefix: &str,
) {
    let day = budget(prefix, "concurrent", 1_000, BudgetPeriod::Day);
    let requests: Vec<_> = (0..40)
        .map(|_| budget_request(vec![day.clone()], 100, LONG_TTL))
        .collect();
    let decisions = join_all(requests.iter().map(|r| backend.reserve_budget(r))).await;
    let granted = decisions
        .iter()
        .filter(|d| matches!(d, Ok(BudgetDecision::Reserved(_))))
        .count();
    assert_eq!(granted, 10, "exactly the limit / estimate");
    assert_eq!(spent(backend, &day).await, 1_000);
}
