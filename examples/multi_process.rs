//! Limits and breakers hold across OS processes sharing one Redis (docs/behaviour.md §5.3, §5.4).
//!
//! This process starts mock upstreams, then runs `--processes` copies of itself as workers, each
//! with its own gateway on Redis backends (`REDIS_URL`, default redis://127.0.0.1:6379):
//! 1. load — every worker pushes more traffic than the limits allow into scope `CONC` (global
//!    concurrency 4, callers wait) and scope `RPM` (global 120 requests per minute, callers fail
//!    fast); the mocks count what actually arrived, per minute and at once;
//! 2. breaker — worker 0 calls a source whose key is dead (401: the breaker force-opens in Redis),
//!    then every other worker calls it and must be refused without reaching it;
//! 3. reserve — all workers but one flood a shared four-slot gate with batch calls, and once they
//!    hold what batch may hold, the last one sends interactive calls one after another: in scope
//!    `RESERVED` (the default batch reserve of a Redis limiter, docs/behaviour.md §5.7) none of
//!    them may wait for the gate; scope `UNRESERVED` (`BATCH_RESERVE=0`) shows the wait without.
//!
//! The last line is one JSON object.
//!
//! ```text
//! cargo run --release --features redis --example multi_process -- --processes 4
//! ```

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::Duration;

use futures::StreamExt;
use polygateway::config::Settings;
use polygateway::types::Priority;
use polygateway::{CallOptions, Gateway, Message};
use polygateway_testkit::mock_llm::{Behaviour, MockUpstream};
use serde::{Deserialize, Serialize};
use serde_json::json;

const WORKER_ENV: &str = "PGW_MULTI_PROCESS_WORKER";
const RPM_LIMIT: u32 = 120;
const CONCURRENCY_LIMIT: u32 = 4;
/// How long the reserve phase's upstream takes to answer.
const SERVICE: Duration = Duration::from_millis(100);
/// Batch calls of each flooding process in the reserve phase (about 4 s at three at a time with
/// two flooders), and how many each keeps in flight.
const FLOOD_CALLS: usize = 60;
const FLOOD_IN_FLIGHT: usize = 16;
/// Interactive calls of the reserve phase, one after another.
const INTERACTIVE_CALLS: usize = 8;

#[derive(Serialize, Deserialize)]
struct Worker {
    phase: String,
    redis_url: String,
    key_prefix: String,
    conc_url: String,
    rpm_url: String,
    dead_url: String,
    reserved_url: String,
    unreserved_url: String,
}

#[derive(Serialize, Deserialize, Default)]
struct Report {
    conc_ok: usize,
    rpm_ok: usize,
    rpm_refused: usize,
    other_errors: usize,
    dead_reason: Option<String>,
    /// Reserve phase: each interactive call's gate/pacer wait, in order.
    capacity_waits_ms: Vec<f64>,
    /// Reserve phase: when the worker's last call ended (ms since the Unix epoch).
    ended_ms: u64,
}

async fn gateway(w: &Worker) -> Gateway {
    let mut env = BTreeMap::new();
    let mut set = |k: &str, v: String| {
        env.insert(k.to_string(), v);
    };
    set("PGW_LIMITER_BACKEND", "redis".into());
    set("PGW_BREAKER_BACKEND", "redis".into());
    set("PGW_TELEMETRY_BACKEND", "none".into());
    set("REDIS_URL", w.redis_url.clone());
    set(
        "CONC__GLOBAL__MAX_CONCURRENCY",
        CONCURRENCY_LIMIT.to_string(),
    );
    set("CONC__BACKPRESSURE__POLL_INTERVAL_S", "0.01".into());
    set("RPM__GLOBAL__RPM", RPM_LIMIT.to_string());
    set("RPM__QUOTA_FULL", "fail_fast".into());
    set("DEAD__BREAKER__COOLDOWN_S", "60".into());
    for scope in ["RESERVED", "UNRESERVED"] {
        set(
            &format!("{scope}__GLOBAL__MAX_CONCURRENCY"),
            CONCURRENCY_LIMIT.to_string(),
        );
        set(
            &format!("{scope}__BACKPRESSURE__POLL_INTERVAL_S"),
            "0.01".into(),
        );
        // The pacer is not what is measured: only the shared gate limits the flood.
        set(&format!("{scope}__PACER"), "off".into());
    }
    set("UNRESERVED__BACKPRESSURE__BATCH_RESERVE", "0".into());
    for (scope, url) in [
        ("CONC", &w.conc_url),
        ("RPM", &w.rpm_url),
        ("DEAD", &w.dead_url),
        ("RESERVED", &w.reserved_url),
        ("UNRESERVED", &w.unreserved_url),
    ] {
        set(&format!("{scope}__MOCK__1__BASE_URL"), url.clone());
        set(&format!("{scope}__MOCK__1__API_KEY"), "sk-multi".into());
        set(&format!("{scope}__MOCK__1__MODEL"), "m".into());
    }
    Gateway::builder(Settings::from_map(&env).expect("valid settings"))
        .default_scope("CONC")
        .redis_key_prefix(&w.key_prefix)
        .build()
        .await
        .expect("the gateway starts (is Redis up?)")
}

async fn run_worker(w: Worker) -> Report {
    let gw = gateway(&w).await;
    let mut report = Report::default();
    match w.phase.as_str() {
        "load" => {
            let conc = gw.chat_scope("CONC").unwrap();
            let rpm = gw.chat_scope("RPM").unwrap();
            let conc_calls = futures::stream::iter(0..40)
                .map(|_| conc.chat(vec![Message::user("c")]))
                .buffer_unordered(8)
                .collect::<Vec<_>>();
            let rpm_calls = futures::stream::iter(0..60)
                .map(|_| rpm.chat(vec![Message::user("r")]))
                .buffer_unordered(8)
                .collect::<Vec<_>>();
            let (conc_results, rpm_results) = tokio::join!(conc_calls, rpm_calls);
            for r in conc_results {
                match r {
                    Ok(_) => report.conc_ok += 1,
                    Err(_) => report.other_errors += 1,
                }
            }
            for r in rpm_results {
                match r {
                    Ok(_) => report.rpm_ok += 1,
                    Err(e)
                        if e.unavailable()
                            .is_some_and(|u| u.reason.as_str() == "quota_exhausted") =>
                    {
                        report.rpm_refused += 1
                    }
                    Err(_) => report.other_errors += 1,
                }
            }
        }
        "breaker" => {
            let err = gw
                .chat_scope("DEAD")
                .unwrap()
                .chat(vec![Message::user("d")])
                .await
                .expect_err("a dead source never answers");
            report.dead_reason =
                Some(err.unavailable().map_or(err.class_name().to_string(), |u| {
                    u.reason.as_str().to_string()
                }));
        }
        phase => {
            let (kind, scope) = phase.split_once(':').expect("phase kind:SCOPE");
            let scope = gw.chat_scope(scope).unwrap();
            if kind == "flood" {
                let batch = CallOptions::new().priority(Priority::Batch);
                let results = futures::stream::iter(0..FLOOD_CALLS)
                    .map(|_| scope.chat_with(vec![Message::user("b")], batch.clone()))
                    .buffer_unordered(FLOOD_IN_FLIGHT)
                    .collect::<Vec<_>>()
                    .await;
                report.other_errors = results.iter().filter(|r| r.is_err()).count();
            } else {
                let interactive = CallOptions::new().priority(Priority::Interactive);
                for _ in 0..INTERACTIVE_CALLS {
                    match scope
                        .chat_with(vec![Message::user("i")], interactive.clone())
                        .await
                    {
                        Ok(answer) => report.capacity_waits_ms.push(answer.capacity_wait_ms),
                        Err(_) => report.other_errors += 1,
                    }
                }
            }
            report.ended_ms = unix_ms();
        }
    }
    gw.shutdown().await;
    report
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as u64
}

/// Phase 3 on one scope: a batch flood from `flooders` processes, and once they hold what batch
/// may hold of the gate, interactive calls from another. The interactive calls' waits, whether
/// the flood was still running when the last of them ended (else nothing was proved), and the
/// errors.
async fn reserve_phase(
    flooders: usize,
    scope: &str,
    mock: &MockUpstream,
    worker: impl Fn(&str) -> Worker,
) -> (Vec<f64>, bool, usize) {
    let batch_share = if scope == "RESERVED" {
        CONCURRENCY_LIMIT as usize - 1
    } else {
        CONCURRENCY_LIMIT as usize
    };
    let mut floods = Vec::new();
    for _ in 0..flooders {
        floods.push(spawn(&worker(&format!("flood:{scope}"))).await);
    }
    let saturated = tokio::time::timeout(Duration::from_secs(60), async {
        while mock.in_flight() < batch_share {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .is_ok();
    let interactive = collect(spawn(&worker(&format!("interactive:{scope}"))).await).await;
    let mut errors = interactive.other_errors;
    let mut overlapped = saturated;
    for flood in floods {
        let flood = collect(flood).await;
        overlapped &= flood.ended_ms > interactive.ended_ms;
        errors += flood.other_errors;
    }
    (interactive.capacity_waits_ms, overlapped, errors)
}

async fn spawn(worker: &Worker) -> tokio::process::Child {
    tokio::process::Command::new(std::env::current_exe().unwrap())
        .env(WORKER_ENV, serde_json::to_string(worker).unwrap())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn a worker")
}

async fn collect(child: tokio::process::Child) -> Report {
    let out = child.wait_with_output().await.expect("worker finishes");
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.lines().last().unwrap_or_default()).unwrap_or_else(|e| {
        eprintln!(
            "multi_process: a worker failed ({}): {e}: {text}",
            out.status
        );
        std::process::exit(1)
    })
}

#[tokio::main]
async fn main() {
    if let Ok(config) = std::env::var(WORKER_ENV) {
        let report = run_worker(serde_json::from_str(&config).expect("worker config")).await;
        println!("{}", serde_json::to_string(&report).unwrap());
        return;
    }
    let mut processes = 4usize;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        match (flag.as_str(), args.next().and_then(|v| v.parse().ok())) {
            ("--processes", Some(n)) if n >= 2 => processes = n,
            _ => {
                eprintln!("usage: multi_process [--processes N≥2]");
                std::process::exit(2);
            }
        }
    }
    let conc = MockUpstream::start(Behaviour::Healthy {
        ttft: Duration::from_millis(30),
        inter_token: Duration::ZERO,
        chunks: 1,
        content: "c".into(),
    })
    .await;
    let rpm = MockUpstream::start(Behaviour::healthy()).await;
    let dead = MockUpstream::start(Behaviour::Unauthorized).await;
    let slow = || {
        MockUpstream::start(Behaviour::Healthy {
            ttft: SERVICE,
            inter_token: Duration::ZERO,
            chunks: 1,
            content: "s".into(),
        })
    };
    let (reserved, unreserved) = (slow().await, slow().await);
    let worker = |phase: &str| Worker {
        phase: phase.into(),
        redis_url: std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into()),
        key_prefix: format!("pgw-multi-{}", std::process::id()),
        conc_url: conc.base_url(),
        rpm_url: rpm.base_url(),
        dead_url: dead.base_url(),
        reserved_url: reserved.base_url(),
        unreserved_url: unreserved.base_url(),
    };

    // The limiter's RPM gate counts per fixed minute of the Redis server's clock, the mock per
    // minute of arrival: a request admitted in the last instant of one minute arrives in the next
    // and would be counted against the wrong window. Start the load early in a minute so both
    // count the same window (same machine, same clock). The load phase takes about two seconds:
    // ten left in the minute are plenty.
    let into_minute = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis()
        % 60_000;
    if into_minute > 50_000 {
        tokio::time::sleep(Duration::from_millis((60_000 - into_minute) as u64 + 200)).await;
    }

    // Phase 1: load from every process at once.
    let mut children = Vec::new();
    for _ in 0..processes {
        children.push(spawn(&worker("load")).await);
    }
    let mut load = Vec::new();
    for child in children {
        load.push(collect(child).await);
    }
    // Phase 2: one process trips the breaker, every other one must see it.
    let opener = collect(spawn(&worker("breaker")).await).await;
    let mut observers = Vec::new();
    for _ in 1..processes {
        observers.push(spawn(&worker("breaker")).await);
    }
    let mut seen = Vec::new();
    for child in observers {
        seen.push(collect(child).await.dead_reason);
    }

    // Phase 3: interactive calls through a shared gate that batch work in another process holds.
    let (reserved_waits, reserved_overlapped, reserved_errors) =
        reserve_phase(processes - 1, "RESERVED", &reserved, worker).await;
    let (unreserved_waits, unreserved_overlapped, unreserved_errors) =
        reserve_phase(processes - 1, "UNRESERVED", &unreserved, worker).await;
    let waited = |waits: &[f64]| waits.iter().filter(|&&w| w > 0.0).count();
    let max_wait = |waits: &[f64]| waits.iter().copied().fold(0.0, f64::max);

    let per_minute = rpm.requests_per_minute();
    let max_window = per_minute.values().copied().max().unwrap_or(0);
    let rpm_ok: usize = load.iter().map(|r| r.rpm_ok).sum();
    let conc_ok: usize = load.iter().map(|r| r.conc_ok).sum();
    let other_errors: usize =
        load.iter().map(|r| r.other_errors).sum::<usize>() + reserved_errors + unreserved_errors;
    let breaker_seen_by_all =
        dead.counts().chat == 1 && seen.iter().all(|r| r.as_deref() == Some("circuit_open"));
    println!("RPM scope: {rpm_ok} admitted of {} attempted; requests per minute window at the mock: {per_minute:?}", processes * 60);
    println!(
        "CONC scope: {conc_ok} calls, at most {} in flight at the mock (limit {CONCURRENCY_LIMIT})",
        conc.max_in_flight()
    );
    println!(
        "breaker: opener saw {:?}, the others saw {seen:?}; the dead source received {} request(s)",
        opener.dead_reason,
        dead.counts().chat
    );
    let summary = json!({
        "processes": processes,
        "rpm_limit": RPM_LIMIT,
        "max_admitted_in_any_window": max_window,
        "rpm_admitted_total": rpm_ok,
        "concurrency_limit": CONCURRENCY_LIMIT,
        "max_observed_concurrency": conc.max_in_flight(),
        "concurrency_calls_served": conc_ok,
        "unexpected_errors": other_errors,
        "breaker_seen_by_all": breaker_seen_by_all,
        "reserve": {
            "gate_slots": CONCURRENCY_LIMIT,
            "service_ms": SERVICE.as_millis() as u64,
            "interactive_calls": INTERACTIVE_CALLS,
            "flood_held_gate_throughout": reserved_overlapped && unreserved_overlapped,
            "with_reserve_calls_that_waited": waited(&reserved_waits),
            "with_reserve_max_wait_ms": max_wait(&reserved_waits),
            "max_in_flight_with_reserve": reserved.max_in_flight(),
            "without_reserve_calls_that_waited": waited(&unreserved_waits),
            "without_reserve_max_wait_ms": max_wait(&unreserved_waits),
        },
    });
    println!("{summary}");
    let ok = max_window <= u64::from(RPM_LIMIT)
        && conc.max_in_flight() <= CONCURRENCY_LIMIT as usize
        && breaker_seen_by_all
        && other_errors == 0
        && reserved_overlapped
        && reserved_waits.len() == INTERACTIVE_CALLS
        && waited(&reserved_waits) == 0
        && reserved.max_in_flight() <= CONCURRENCY_LIMIT as usize;
    if !ok {
        std::process::exit(1);
    }
}
