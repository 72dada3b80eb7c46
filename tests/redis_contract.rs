//! The Redis governance backends against a real Redis (127.0.0.1:6379, or `PGW_TEST_REDIS_URL`,
//! which may be a cluster URL: `.ci/run` runs this binary a second time against a local Redis
//! Cluster, where a script touching two slots would fail with CROSSSLOT).
//!
//! Part one runs every case of the shared contract suite (`tests/contract`, also run against the
//! memory backends) on `RedisGate`/`RedisBreakers`. Part two covers Redis-specific behaviour the
//! generic suite cannot see (re-sent admissions, lease reclamation by server time, key layout and
//! expiry, breaker parity with the in-memory machine, round-trip latency).
//! Every test uses a unique key prefix and deletes its keys, so tests run in parallel beside other
//! users of the same server. Without Redis: under `CI=true` the tests fail, otherwise they print a
//! loud SKIP and return.

mod contract;

use std::sync::Arc;
use std::time::Duration;

use fred::prelude::{Builder, ClientLike, Config, KeysInterface, LuaInterface};
use polygateway::config::Secret;
use polygateway::ports::{
    AttemptAdmit, AttemptBackend, AttemptOutcome, BreakerAction, BreakerAdmit, BreakerBackend,
    BreakerConfig, BreakerState, BreakerStatus, BreakerVerdict, Gate, GateBackend, GateDecision,
    GateRequest, Lease, Limits,
};
use polygateway::redis::{RedisAttempts, RedisBreakers, RedisGate, RedisGovernance};
use polygateway_actors::policy::breaker::BreakerMachine;

fn redis_url() -> String {
    std::env::var("PGW_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

/// A connection under a fresh prefix, or `None` (after a loud SKIP) when Redis is absent locally.
async fn connect() -> Option<Fixture> {
    let prefix = format!("pgwtest-{}", uuid::Uuid::new_v4().simple());
    match RedisGovernance::connect(&Secret::new(redis_url()), &prefix).await {
        Ok(redis) => Some(Fixture {
            redis,
            prefix,
            finished: false,
        }),
        Err(e) if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("Redis is required under CI=true: {e}")
        }
        Err(e) => {
            eprintln!(
                "\n!!!!! SKIP: Redis unreachable ({e}); Redis backend tests did NOT run !!!!!\n"
            );
            None
        }
    }
}

/// Deletes every key under `prefix` (test keys only: the prefix is a fresh uuid).
const PURGE: &str = "local n = 0 \
    for _, k in ipairs(redis.call('KEYS', ARGV[1])) do n = n + redis.call('DEL', k) end \
    return n";

async fn raw_client() -> fred::prelude::Client {
    let client = Builder::from_config(Config::from_url(&redis_url()).expect("url"))
        .build()
        .expect("client");
    client.init().await.expect("raw connect");
    client
}

/// One connected client per primary (a cluster), or the one server: `KEYS` sees one node only.
async fn raw_nodes() -> Vec<fred::prelude::Client> {
    let raw = raw_client().await;
    let Ok(nodes) = raw.split_cluster() else {
        return vec![raw];
    };
    raw.quit().await.ok();
    for node in &nodes {
        node.init().await.expect("raw connect to a cluster node");
    }
    nodes
}

/// Run a `KEYS`-style script with `ARGV[1] = {prefix}:*` on every node and collect the answers.
async fn on_every_node<R: fred::prelude::FromValue>(script: &str, prefix: &str) -> Vec<R> {
    let mut answers = Vec::new();
    for node in raw_nodes().await {
        answers.push(
            node.eval(script, Vec::<String>::new(), format!("{prefix}:*"))
                .await
                .expect("script on a node"),
        );
        node.quit().await.ok();
    }
    answers
}

async fn purge(prefix: &str) {
    let _: Vec<i64> = on_every_node(PURGE, prefix).await;
}

struct Fixture {
    redis: RedisGovernance,
    prefix: String,
    finished: bool,
}

impl Fixture {
    /// A raw client for inspecting keys (never used by the backends themselves).
    async fn raw(&self) -> fred::prelude::Client {
        raw_client().await
    }

    async fn keys(&self) -> Vec<String> {
        let per_node: Vec<Vec<String>> =
            on_every_node("return redis.call('KEYS', ARGV[1])", &self.prefix).await;
        per_node.concat()
    }

    /// Delete this test's keys and close the pool.
    async fn finish(mut self) {
        purge(&self.prefix).await;
        self.finished = true;
        self.redis.close().await;
    }
}

impl Drop for Fixture {
    /// A failed test still removes its keys (from a separate thread: we may be unwinding inside
    /// the test's runtime).
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let prefix = self.prefix.clone();
        let _ = std::thread::spawn(move || {
            if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                rt.block_on(purge(&prefix));
            }
        })
        .join();
    }
}

/// Run one gate case of the contract suite on a fresh prefix.
macro_rules! gate_contract {
    ($($test:ident => $case:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $test() {
            let Some(fx) = connect().await else { return };
            contract::$case(&RedisGate::new(fx.redis.clone()), &fx.prefix).await;
            fx.finish().await;
        }
    )*};
}

/// Run one breaker case of the contract suite on a fresh prefix with the short config.
macro_rules! breaker_contract {
    ($($test:ident => $case:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $test() {
            let Some(fx) = connect().await else { return };
            let config = contract::short_breaker_config();
            contract::$case(&RedisBreakers::new(fx.redis.clone()), &fx.prefix, &config).await;
            fx.finish().await;
        }
    )*};
}

/// Run one attempt case of the contract suite on `RedisAttempts` and the same store's ports.
macro_rules! attempt_contract {
    ($($test:ident => $case:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $test() {
            let Some(fx) = connect().await else { return };
            let gate = RedisGate::new(fx.redis.clone());
            let breakers = RedisBreakers::new(fx.redis.clone());
            let attempts = RedisAttempts::new(gate.clone());
            let store = contract::AttemptStore {
                attempts: &attempts,
                gate: &gate,
                breakers: &breakers,
            };
            contract::$case(&store, &fx.prefix, &contract::short_breaker_config()).await;
            fx.finish().await;
        }
    )*};
}

attempt_contract! {
    redis_attempt_success_settles_releases_and_marks_progress =>
        attempt_contract_success_settles_releases_and_marks_progress,
    redis_attempt_open_breaker_spends_no_quota_and_probe_decides =>
        attempt_contract_open_breaker_spends_no_quota_and_probe_decides,
    redis_attempt_failures_open_and_force_open => attempt_contract_failures_open_and_force_open,
    redis_attempt_finish_reports_the_breaker_it_leaves =>
        attempt_contract_finish_reports_the_breaker_it_leaves,
    redis_attempt_carried_finishes_apply_before_the_admission =>
        attempt_contract_carried_finishes_apply_before_the_admission,
}

gate_contract! {
    redis_gate_rejection_has_no_side_effects => gate_contract_rejection_has_no_side_effects,
    redis_gate_settle_adjusts_admission_window => gate_contract_settle_adjusts_admission_window,
    redis_gate_lease_expiry_reclaims_slot => gate_contract_lease_expiry_reclaims_slot,
    redis_gate_release_and_settle_idempotent => gate_contract_release_and_settle_idempotent,
    redis_gate_progress_freshness => gate_contract_progress_freshness,
    redis_gate_concurrent_admissions_respect_limits =>
        gate_contract_concurrent_admissions_respect_limits,
    redis_budget_reserve_and_settle_refund => budget_contract_reserve_and_settle_refund,
    redis_budget_settle_charges_and_overshoot_is_bounded =>
        budget_contract_settle_charges_and_overshoot_is_bounded,
    redis_budget_exhaustion_counts_nothing => budget_contract_exhaustion_counts_nothing,
    redis_budget_window_reset => budget_contract_window_reset,
    redis_budget_lease_expiry => budget_contract_lease_expiry,
    redis_budget_concurrent_reservations_respect_the_limit =>
        budget_contract_concurrent_reservations_respect_the_limit,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_gate_window_rollover_resets_quota() {
    let Some(fx) = connect().await else { return };
    let window = Duration::from_secs(1);
    let gate = RedisGate::new(fx.redis.clone()).with_window(window);
    contract::gate_contract_window_rollover_resets_quota(&gate, &fx.prefix, window).await;
    fx.finish().await;
}

breaker_contract! {
    redis_breaker_consecutive_failures_open => breaker_contract_consecutive_failures_open,
    redis_breaker_rate_channel_and_health_suppression =>
        breaker_contract_rate_channel_and_health_suppression,
    redis_breaker_force_open => breaker_contract_force_open,
    redis_breaker_retry_after_values => breaker_contract_retry_after_values,
    redis_breaker_half_open_single_probe => breaker_contract_half_open_single_probe,
    redis_breaker_probe_lease_expiry => breaker_contract_probe_lease_expiry,
    redis_breaker_failed_probes_grow_cooldown => breaker_contract_failed_probes_grow_cooldown,
    redis_breaker_epoch_fencing => breaker_contract_epoch_fencing,
}

fn request(scope: &str, source: &str, global: Limits, per_source: Limits, est: u64) -> GateRequest {
    GateRequest {
        scope: scope.into(),
        source: source.into(),
        global,
        per_source,
        est_tokens: est,
        lease_id: uuid::Uuid::new_v4().to_string().into(),
        lease_ttl: Duration::from_secs(60),
    }
}

fn limits(max_concurrency: u32, rpm: u32, tpm: u64) -> Limits {
    Limits {
        max_concurrency,
        rpm,
        tpm,
    }
}

fn admitted(d: GateDecision) -> Lease {
    match d {
        GateDecision::Admitted(lease) => lease,
        other => panic!("expected admission, got {other:?}"),
    }
}

fn refused(d: GateDecision) -> (Gate, Duration) {
    match d {
        GateDecision::Refused { gate, retry_after } => (gate, retry_after),
        other => panic!("expected refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn resent_admission_answers_the_first_and_counts_once() {
    let Some(fx) = connect().await else { return };
    let gate = RedisGate::new(fx.redis.clone());
    let req = request("LLM", "a", limits(5, 1, 1000), Limits::default(), 40);
    let first = admitted(gate.admit(&req).await.unwrap());
    // fred re-sends the same EVALSHA after a dropped connection: same lease id, same answer.
    let again = admitted(gate.admit(&req).await.unwrap());
    assert_eq!(first, again);
    assert_eq!(gate.leases_held("LLM").await.unwrap(), 1);
    // RPM 1 was counted once: a different lease is refused by the RPM gate, not admitted.
    let other = request("LLM", "a", limits(5, 1, 1000), Limits::default(), 40);
    assert_eq!(
        refused(gate.admit(&other).await.unwrap()).0,
        Gate::GlobalRpm
    );
    gate.release(&first).await.unwrap();
    gate.release(&first).await.unwrap();
    assert_eq!(gate.leases_held("LLM").await.unwrap(), 0);
    // A released lease holds no slot, and a re-sent admission of its id must not take one.
    assert_eq!(admitted(gate.admit(&req).await.unwrap()), first);
    assert_eq!(gate.leases_held("LLM").await.unwrap(), 0);
    fx.finish().await;
}

#[tokio::test]
async fn a_release_that_overtakes_its_admission_leaves_no_slot_taken() {
    // The caller timed out and gave the lease back; fred re-sends the admission after reconnecting.
    let Some(fx) = connect().await else { return };
    let gate = RedisGate::new(fx.redis.clone());
    let req = request("LLM", "a", limits(5, 0, 0), Limits::default(), 0);
    let lease = polygateway::ports::Lease {
        scope: req.scope.clone(),
        source: req.source.clone(),
        id: req.lease_id.clone(),
        est_tokens: 0,
        window: 0,
    };
    gate.release(&lease).await.unwrap();
    admitted(gate.admit(&req).await.unwrap());
    assert_eq!(gate.leases_held("LLM").await.unwrap(), 0);
    fx.finish().await;
}

#[tokio::test]
async fn settle_applies_once_in_the_admission_window() {
    let Some(fx) = connect().await else { return };
    let gate = RedisGate::new(fx.redis.clone());
    let tpm = limits(0, 0, 100);
    let a = admitted(
        gate.admit(&request("LLM", "a", tpm, Limits::default(), 60))
            .await
            .unwrap(),
    );
    assert_eq!(a.est_tokens, 60);
    let (g, wait) = refused(
        gate.admit(&request("LLM", "b", tpm, Limits::default(), 60))
            .await
            .unwrap(),
    );
    assert_eq!(g, Gate::GlobalTpm);
    assert!(
        wait > Duration::ZERO && wait <= Duration::from_secs(60),
        "{wait:?}"
    );
    // Actual 10: 50 tokens refunded, exactly once however often settle is repeated.
    for _ in 0..3 {
        gate.settle(&a, 10).await.unwrap();
    }
    let b = admitted(
        gate.admit(&request("LLM", "b", tpm, Limits::default(), 90))
            .await
            .unwrap(),
    );
    // 10 + 90 = 100 is full now.
    let (g, _) = refused(
        gate.admit(&request("LLM", "c", tpm, Limits::default(), 1))
            .await
            .unwrap(),
    );
    assert_eq!(g, Gate::GlobalTpm);
    // Charging more than the estimate works the other way.
    gate.settle(&b, 80).await.unwrap();
    admitted(
        gate.admit(&request("LLM", "c", tpm, Limits::default(), 10))
            .await
            .unwrap(),
    );
    fx.finish().await;
}

#[tokio::test]
async fn dead_holders_leases_expire_by_server_time() {
    let Some(fx) = connect().await else { return };
    let gate = RedisGate::new(fx.redis.clone());
    let mut req = request("OCR", "m", limits(1, 0, 0), limits(1, 0, 0), 0);
    req.lease_ttl = Duration::from_millis(300);
    let _never_released = admitted(gate.admit(&req).await.unwrap());
    let next = request("OCR", "m", limits(1, 0, 0), limits(1, 0, 0), 0);
    let (g, wait) = refused(gate.admit(&next).await.unwrap());
    assert_eq!(g, Gate::GlobalConcurrency);
    assert!(wait <= Duration::from_millis(300), "{wait:?}");
    assert_eq!(gate.leases_held("OCR").await.unwrap(), 1);
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        gate.leases_held("OCR").await.unwrap(),
        0,
        "expired leases are not held"
    );
    let lease = admitted(gate.admit(&next).await.unwrap());
    gate.release(&lease).await.unwrap();
    fx.finish().await;
}

#[tokio::test]
async fn short_windows_roll_over_on_the_server_clock() {
    let Some(fx) = connect().await else { return };
    let gate = RedisGate::new(fx.redis.clone()).with_window(Duration::from_millis(400));
    let rpm = limits(0, 0, 0);
    let src = limits(0, 1, 0);
    // Two admissions back to back straddle a window's end now and then (a 400 ms window, a round
    // trip or two between them): then the second is rightly admitted in the next window. Such a
    // pair proves nothing either way, so it is tried again on a fresh source; a second admission
    // in the *same* window is the failure.
    let mut tries = 0;
    let (source, first, g, wait) = loop {
        tries += 1;
        let source = format!("s{tries}");
        let first = admitted(
            gate.admit(&request("VLM", &source, rpm, src, 0))
                .await
                .unwrap(),
        );
        match gate
            .admit(&request("VLM", &source, rpm, src, 0))
            .await
            .unwrap()
        {
            GateDecision::Admitted(second) if second.window > first.window && tries < 5 => {}
            other => {
                let (g, wait) = refused(other);
                break (source, first, g, wait);
            }
        }
    };
    assert_eq!(g, Gate::SourceRpm);
    assert!(wait <= Duration::from_millis(400), "{wait:?}");
    tokio::time::sleep(wait + Duration::from_millis(30)).await;
    let second = admitted(
        gate.admit(&request("VLM", &source, rpm, src, 0))
            .await
            .unwrap(),
    );
    assert!(second.window > first.window);
    // Another source is not limited by this source's RPM gate.
    admitted(
        gate.admit(&request("VLM", "other", rpm, src, 0))
            .await
            .unwrap(),
    );
    fx.finish().await;
}

#[tokio::test]
async fn refusal_writes_nothing() {
    let Some(fx) = connect().await else { return };
    let gate = RedisGate::new(fx.redis.clone());
    // Source TPM refuses last, after every other gate passed.
    let req = request("EMBED", "e", limits(10, 10, 1000), limits(10, 10, 5), 6);
    refused(gate.admit(&req).await.unwrap());
    assert!(fx.keys().await.is_empty(), "a refusal leaves no key behind");
    assert_eq!(gate.leases_held("EMBED").await.unwrap(), 0);
    fx.finish().await;
}

#[tokio::test]
async fn every_key_expires_and_shares_the_scope_tag() {
    let Some(fx) = connect().await else { return };
    let gate = RedisGate::new(fx.redis.clone());
    let breakers = RedisBreakers::new(fx.redis.clone());
    let req = || request("JUDGE", "j", limits(2, 2, 200), limits(2, 2, 200), 5);
    // One finished lease (settled, then released) and one still held.
    let done = admitted(gate.admit(&req()).await.unwrap());
    gate.settle(&done, 3).await.unwrap();
    gate.release(&done).await.unwrap();
    let held = admitted(gate.admit(&req()).await.unwrap());
    gate.mark_progress("JUDGE").await.unwrap();
    breakers
        .force_open("JUDGE", "j", &BreakerConfig::default())
        .await
        .unwrap();
    let mut keys = fx.keys().await;
    keys.sort();
    let tag = format!("{}:{{JUDGE}}", fx.prefix);
    let mut expected = vec![
        format!("{tag}:lease"),
        format!("{tag}:progress"),
        format!("{tag}:rec:{}", held.id),
        format!("{tag}:rec:{}", done.id),
        format!("{tag}:src:j:breaker"),
        format!("{tag}:src:j:lease"),
        format!("{tag}:src:j:win"),
        format!("{tag}:win"),
    ];
    expected.sort();
    assert_eq!(
        keys, expected,
        "a finished lease leaves only its short-lived tombstone behind"
    );
    let raw_tomb = fx.raw().await;
    let tomb_ttl: i64 = raw_tomb
        .pttl(format!("{tag}:rec:{}", done.id))
        .await
        .unwrap();
    assert!(tomb_ttl > 0 && tomb_ttl <= 30_000, "{tomb_ttl}");
    let raw = fx.raw().await;
    for key in &keys {
        assert!(
            key.starts_with(&format!("{}:{{JUDGE}}:", fx.prefix)),
            "{key}"
        );
        let ttl: i64 = raw.pttl(key).await.unwrap();
        assert!(ttl > 0, "{key} has no expiry ({ttl})");
    }
    raw.quit().await.ok();
    fx.finish().await;
}

#[tokio::test]
async fn progress_is_global_per_scope() {
    let Some(fx) = connect().await else { return };
    let gate = RedisGate::new(fx.redis.clone());
    assert_eq!(gate.progress_age("LLM").await.unwrap(), None);
    gate.mark_progress("LLM").await.unwrap();
    // A second process (another pool, same prefix) sees the same mark.
    let other = RedisGovernance::connect(&Secret::new(redis_url()), &fx.prefix)
        .await
        .unwrap();
    let age = RedisGate::new(other.clone())
        .progress_age("LLM")
        .await
        .unwrap()
        .unwrap();
    assert!(age < Duration::from_secs(2), "{age:?}");
    assert_eq!(
        RedisGate::new(other.clone())
            .progress_age("VLM")
            .await
            .unwrap(),
        None
    );
    other.close().await;
    fx.finish().await;
}

/// Drive the Lua breaker and the in-memory `BreakerMachine` with the same time-free operation
/// sequences and compare every observable answer: the script mirrors the machine rule for rule.
#[tokio::test]
async fn breaker_script_matches_the_memory_machine() {
    let Some(fx) = connect().await else { return };
    let breakers = RedisBreakers::new(fx.redis.clone());
    // Long cooldown and buckets: nothing time-driven happens while a sequence runs.
    let config = BreakerConfig {
        fail_threshold: 3,
        max_concurrency: 1,
        cooldown: Duration::from_secs(600),
        max_cooldown: Duration::from_secs(1200),
        probe_ttl: Duration::from_secs(600),
        min_calls: 6,
        fail_rate: 0.5,
        bucket: Duration::from_secs(600),
    };
    let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    for run in 0..12 {
        let source = format!("s{run}");
        let mut memory = BreakerMachine::new();
        let now = 1_000;
        for step in 0..40 {
            let ctx = format!("run {run} step {step}");
            let epoch = memory.epoch();
            match next(10) {
                0..=3 => {
                    let verdict = BreakerVerdict::Failure;
                    let r = breakers
                        .record("LLM", &source, &config, epoch, None, verdict)
                        .await
                        .unwrap();
                    assert_eq!(
                        r,
                        memory.record(now, &config, epoch, None, verdict),
                        "{ctx}"
                    );
                }
                4..=6 => {
                    let verdict = BreakerVerdict::Success;
                    let r = breakers
                        .record("LLM", &source, &config, epoch, None, verdict)
                        .await
                        .unwrap();
                    assert_eq!(
                        r,
                        memory.record(now, &config, epoch, None, verdict),
                        "{ctx}"
                    );
                }
                7 => {
                    // A stale epoch is fenced in both.
                    let stale = epoch.saturating_sub(1);
                    let r = breakers
                        .record(
                            "LLM",
                            &source,
                            &config,
                            stale,
                            None,
                            BreakerVerdict::Failure,
                        )
                        .await
                        .unwrap();
                    let m = memory.record(now, &config, stale, None, BreakerVerdict::Failure);
                    assert_eq!(r, m, "{ctx}");
                }
                8 => {
                    breakers.force_open("LLM", &source, &config).await.unwrap();
                    memory.force_open(now, &config);
                }
                _ => {
                    let r = breakers.acquire("LLM", &source, &config).await.unwrap();
                    let m = memory.acquire(now, &config, || Arc::from("p"));
                    match (r, m) {
                        (BreakerAdmit::Pass { epoch: a }, BreakerAdmit::Pass { epoch: b }) => {
                            assert_eq!(a, b, "{ctx}")
                        }
                        (
                            BreakerAdmit::Refused {
                                state: a,
                                retry_after: ra,
                            },
                            BreakerAdmit::Refused {
                                state: b,
                                retry_after: rb,
                            },
                        ) => {
                            assert_eq!(a, b, "{ctx}");
                            // Server time advanced a little since the opening.
                            assert!(ra <= rb && rb - ra < Duration::from_secs(5), "{ctx}");
                        }
                        (r, m) => panic!("{ctx}: redis {r:?} vs memory {m:?}"),
                    }
                }
            }
            let r = breakers.snapshot("LLM", &source, &config).await.unwrap();
            let m = memory.snapshot(now);
            assert_eq!(
                (
                    r.state,
                    r.epoch,
                    r.consecutive_failures,
                    r.open_streak,
                    r.probe_held,
                    r.opens
                ),
                (
                    m.state,
                    m.epoch,
                    m.consecutive_failures,
                    m.open_streak,
                    m.probe_held,
                    m.opens
                ),
                "{ctx}"
            );
            assert_eq!(r.retry_after.is_zero(), m.retry_after.is_zero(), "{ctx}");
        }
    }
    fx.finish().await;
}

/// The time-driven half of the state machine on the server clock: cooldown → one probe (lease
/// with TTL) → verdicts, growing open duration, epoch fencing.
#[tokio::test]
async fn breaker_half_open_probe_on_the_server_clock() {
    let Some(fx) = connect().await else { return };
    let breakers = RedisBreakers::new(fx.redis.clone());
    let config = BreakerConfig {
        fail_threshold: 1,
        cooldown: Duration::from_millis(300),
        max_cooldown: Duration::from_millis(500),
        probe_ttl: Duration::from_millis(300),
        ..BreakerConfig::default()
    };
    let (scope, src) = ("VLM", "v");
    let BreakerAdmit::Pass { epoch } = breakers.acquire(scope, src, &config).await.unwrap() else {
        panic!("closed breaker must pass")
    };
    assert!(breakers
        .record(scope, src, &config, epoch, None, BreakerVerdict::Failure)
        .await
        .unwrap());
    let BreakerAdmit::Refused {
        state: BreakerState::Open,
        retry_after,
    } = breakers.acquire(scope, src, &config).await.unwrap()
    else {
        panic!("open breaker must refuse")
    };
    assert!(retry_after <= Duration::from_millis(300) && !retry_after.is_zero());
    // The late verdict of the old epoch is fenced.
    assert!(!breakers
        .record(scope, src, &config, epoch, None, BreakerVerdict::Success)
        .await
        .unwrap());

    tokio::time::sleep(retry_after + Duration::from_millis(30)).await;
    let BreakerAdmit::Probe {
        epoch: e1,
        probe_id: p1,
    } = breakers.acquire(scope, src, &config).await.unwrap()
    else {
        panic!("half-open grants one probe")
    };
    assert_eq!(e1, epoch + 1);
    assert_eq!(
        breakers.acquire(scope, src, &config).await.unwrap(),
        BreakerAdmit::Refused {
            state: BreakerState::HalfOpen,
            retry_after: Duration::ZERO
        }
    );
    // The holder died: its lease expires and the slot is granted again.
    tokio::time::sleep(config.probe_ttl + Duration::from_millis(30)).await;
    let BreakerAdmit::Probe { probe_id: p2, .. } =
        breakers.acquire(scope, src, &config).await.unwrap()
    else {
        panic!("expired probe frees the slot")
    };
    assert_ne!(p1, p2);
    assert!(!breakers
        .record(scope, src, &config, e1, Some(&p1), BreakerVerdict::Success)
        .await
        .unwrap());
    // A failed probe re-opens at a new epoch and grows the streak to 1 (cooldown × 2^0).
    assert!(breakers
        .record(scope, src, &config, e1, Some(&p2), BreakerVerdict::Failure)
        .await
        .unwrap());
    let snap = breakers.snapshot(scope, src, &config).await.unwrap();
    assert_eq!(
        (snap.state, snap.epoch, snap.open_streak),
        (BreakerState::Open, e1 + 1, 1)
    );
    assert!(
        snap.retry_after > Duration::from_millis(250),
        "{:?}",
        snap.retry_after
    );

    tokio::time::sleep(snap.retry_after + Duration::from_millis(30)).await;
    let BreakerAdmit::Probe {
        epoch: e2,
        probe_id: p3,
    } = breakers.acquire(scope, src, &config).await.unwrap()
    else {
        panic!("probe after the second cooldown")
    };
    breakers.release_probe(scope, src, &p3).await.unwrap();
    breakers.release_probe(scope, src, &p3).await.unwrap();
    let BreakerAdmit::Probe { probe_id: p4, .. } =
        breakers.acquire(scope, src, &config).await.unwrap()
    else {
        panic!("a released probe frees the slot")
    };
    assert!(breakers
        .record(scope, src, &config, e2, Some(&p4), BreakerVerdict::Success)
        .await
        .unwrap());
    assert_eq!(
        breakers.acquire(scope, src, &config).await.unwrap(),
        BreakerAdmit::Pass { epoch: e2 }
    );
    fx.finish().await;
}

/// Latency of one admission (one EVALSHA round trip) against the local Redis: median and p99 of
/// 2000 sequential admit+release pairs, printed for the record. The bound only catches a
/// pathological regression (e.g. a script doing O(n) work per call).
#[tokio::test]
async fn admission_round_trip_latency() {
    let Some(fx) = connect().await else { return };
    let gate = RedisGate::new(fx.redis.clone());
    let limits = limits(100, 1_000_000, 1_000_000_000);
    let mut admits = Vec::with_capacity(2000);
    let mut releases = Vec::with_capacity(2000);
    for _ in 0..2000 {
        let req = request("BENCH", "b", limits, limits, 10);
        let t = std::time::Instant::now();
        let lease = admitted(gate.admit(&req).await.unwrap());
        admits.push(t.elapsed());
        let t = std::time::Instant::now();
        gate.release(&lease).await.unwrap();
        releases.push(t.elapsed());
    }
    admits.sort();
    releases.sort();
    let (median, p99) = (admits[1000], admits[1980]);
    eprintln!(
        "redis admission latency over 2000 EVALSHA round trips: median {median:?}, p99 {p99:?}; \
         release median {:?}",
        releases[1000]
    );
    assert!(median < Duration::from_millis(20), "median {median:?}");
    assert_eq!(gate.leases_held("BENCH").await.unwrap(), 0);
    fx.finish().await;
}

fn attempt_outcome(action: BreakerAction) -> AttemptOutcome {
    AttemptOutcome {
        action,
        tokens: 0,
        progress: false,
    }
}

#[tokio::test]
async fn a_resent_attempt_finish_counts_its_verdict_once() {
    // fred re-sends the finish script after a reconnect: same lease id, same arguments.
    let Some(fx) = connect().await else { return };
    let gate = RedisGate::new(fx.redis.clone());
    let breakers = RedisBreakers::new(fx.redis.clone());
    let attempts = RedisAttempts::new(gate.clone());
    let config = BreakerConfig {
        fail_threshold: 2,
        ..BreakerConfig::default()
    };
    let req = request("LLM", "a", Limits::default(), Limits::default(), 0);
    let AttemptAdmit::Admitted(permit) = attempts.admit(&req, &config).await.unwrap() else {
        panic!("a closed breaker and no limits admit");
    };
    let failure = attempt_outcome(BreakerAction::Record(BreakerVerdict::Failure));
    let first = attempts.finish(&permit, &config, failure).await.unwrap();
    let resent = attempts.finish(&permit, &config, failure).await.unwrap();
    assert_eq!(
        (first, resent),
        (BreakerStatus::Closed, BreakerStatus::Closed),
        "a re-sent finish reports the breaker without counting"
    );
    let snap = breakers.snapshot("LLM", "a", &config).await.unwrap();
    assert_eq!(
        (snap.state, snap.consecutive_failures),
        (BreakerState::Closed, 1),
        "the re-sent failure counted again"
    );
    assert_eq!(gate.leases_held("LLM").await.unwrap(), 0);
    // A re-sent admission of the finished attempt takes nothing either.
    assert!(matches!(
        attempts.admit(&req, &config).await.unwrap(),
        AttemptAdmit::Admitted(_)
    ));
    assert_eq!(gate.leases_held("LLM").await.unwrap(), 0);
    fx.finish().await;
}

#[tokio::test]
async fn a_resent_attempt_admission_answers_the_first_with_its_probe() {
    let Some(fx) = connect().await else { return };
    let gate = RedisGate::new(fx.redis.clone());
    let breakers = RedisBreakers::new(fx.redis.clone());
    let attempts = RedisAttempts::new(gate.clone());
    let config = contract::short_breaker_config();
    breakers.force_open("LLM", "a", &config).await.unwrap();
    tokio::time::sleep(config.cooldown + Duration::from_millis(120)).await;
    let req = request("LLM", "a", limits(0, 1, 0), Limits::default(), 0);
    let first = attempts.admit(&req, &config).await.unwrap();
    let AttemptAdmit::Admitted(permit) = &first else {
        panic!("the cooldown is over: expected the probe, got {first:?}");
    };
    assert!(permit.probe_id.is_some());
    // Same lease id: the first answer again (probe included); RPM 1 and the lease counted once.
    assert_eq!(attempts.admit(&req, &config).await.unwrap(), first);
    assert_eq!(gate.leases_held("LLM").await.unwrap(), 1);
    let success = attempt_outcome(BreakerAction::Record(BreakerVerdict::Success));
    attempts.finish(permit, &config, success).await.unwrap();
    let snap = breakers.snapshot("LLM", "a", &config).await.unwrap();
    assert_eq!((snap.state, snap.probe_held), (BreakerState::Closed, false));
    fx.finish().await;
}

#[tokio::test]
async fn a_resent_closed_breaker_verdict_counts_once() {
    // The standalone verdict carries a verdict id key; a re-sent EVALSHA repeats keys and
    // arguments exactly, which this replays with the script's own text.
    let Some(fx) = connect().await else { return };
    let breakers = RedisBreakers::new(fx.redis.clone());
    let config = BreakerConfig {
        fail_threshold: 2,
        ..BreakerConfig::default()
    };
    let tag = format!("{}:{{LLM}}:src:a", fx.prefix);
    let keys = vec![format!("{tag}:breaker"), format!("{tag}:verdict:v-1")];
    let args: Vec<String> = [
        "record", "2", "30000", "300000", "120000", "10", "0.6", "30000", "0", "", "f",
    ]
    .map(String::from)
    .to_vec();
    let raw = fx.raw().await;
    for _ in 0..2 {
        let applied: i64 = raw
            .eval(
                include_str!("../lua/breaker.lua"),
                keys.clone(),
                args.clone(),
            )
            .await
            .unwrap();
        assert_eq!(applied, 1, "the re-send answers the first verdict");
    }
    raw.quit().await.ok();
    let snap = breakers.snapshot("LLM", "a", &config).await.unwrap();
    assert_eq!(
        (snap.state, snap.consecutive_failures),
        (BreakerState::Closed, 1),
        "a re-sent CLOSED verdict counted twice"
    );
    // The public port gives every verdict its own id: two verdicts count twice.
    breakers
        .record("LLM", "a", &config, 0, None, BreakerVerdict::Failure)
        .await
        .unwrap();
    let snap = breakers.snapshot("LLM", "a", &config).await.unwrap();
    assert_eq!(snap.state, BreakerState::Open, "the second failure opens");
    fx.finish().await;
}

#[tokio::test]
async fn budget_keys_share_one_tag_expire_and_a_refusal_writes_nothing() {
    use polygateway::ports::{BudgetClaim, BudgetDecision, BudgetPeriod, BudgetRequest};
    let Some(fx) = connect().await else { return };
    let gate = RedisGate::new(fx.redis.clone());
    let claim = |name: &str, limit| BudgetClaim {
        key: name.into(),
        limit_micros: limit,
        period: BudgetPeriod::Hour,
    };
    let req = |id: &str, claims: Vec<BudgetClaim>| BudgetRequest {
        claims,
        est_micros: 100,
        lease_id: id.into(),
        lease_ttl: Duration::from_secs(60),
    };
    let refused = gate
        .reserve_budget(&req(
            "r",
            vec![claim("scope:LLM", 1_000), claim("tenant:a", 50)],
        ))
        .await
        .unwrap();
    assert!(
        matches!(refused, BudgetDecision::Exhausted(_)),
        "{refused:?}"
    );
    assert!(fx.keys().await.is_empty(), "a refusal leaves no key behind");

    let both = vec![claim("scope:LLM", 1_000), claim("tenant:a", 500)];
    let BudgetDecision::Reserved(done) = gate
        .reserve_budget(&req("done", both.clone()))
        .await
        .unwrap()
    else {
        panic!("room in both")
    };
    gate.settle_budget(&done, 70).await.unwrap();
    let BudgetDecision::Reserved(again) = gate.reserve_budget(&req("done", both)).await.unwrap()
    else {
        panic!("a re-sent reservation answers the first")
    };
    assert_eq!(again.windows, done.windows);
    assert_eq!(
        gate.budget_spend(&claim("tenant:a", 500))
            .await
            .unwrap()
            .spent_micros,
        70
    );

    let mut keys = fx.keys().await;
    keys.sort();
    let tag = format!("{}:{{budget}}", fx.prefix);
    let mut expected = vec![
        format!("{tag}:B:scope:LLM"),
        format!("{tag}:B:tenant:a"),
        format!("{tag}:rec:done"),
    ];
    expected.sort();
    assert_eq!(
        keys, expected,
        "every budget key carries the one {{budget}} tag"
    );
    let raw = fx.raw().await;
    let rec_ttl: i64 = raw.pttl(format!("{tag}:rec:done")).await.unwrap();
    assert!(
        rec_ttl > 0 && rec_ttl <= 30_000,
        "a settled record is a short tombstone: {rec_ttl}"
    );
    for key in &keys[..2] {
        let ttl: i64 = raw.pttl(key).await.unwrap();
        // Kept until an hour past the end of the current hour.
        assert!(ttl > 3_600_000 && ttl <= 7_200_000, "{key}: {ttl}");
    }
    raw.quit().await.ok();
    fx.finish().await;
}
