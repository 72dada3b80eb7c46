//! The main job: a fault-mix soak through the full runtime on embedded defaults.
//!
//! Starts mock upstreams in-process — three healthy sources and the seeds' fault mix (bad key,
//! black hole, slow, rate-limited with Retry-After, 90 % transient) — runs `--calls` governed chat
//! calls at `--concurrency`, writes every attempt to SQLite, and prints a report whose last line is
//! one JSON object. Traffic goes to 127.0.0.1 only; the run is bounded and stops by itself.
//!
//! ```text
//! cargo run --release --example soak -- --calls 8000 --concurrency 64 --seed 7
//! ```

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::StreamExt;
use polygateway::testkit::mock_llm::{Behaviour, MockUpstream};
use polygateway::{config::Settings, CallOptions, Gateway, Message};

struct Args {
    calls: usize,
    concurrency: usize,
    seed: u64,
    sqlite: String,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        calls: 8000,
        concurrency: 64,
        seed: 7,
        sqlite: std::env::temp_dir()
            .join(format!("polygateway-soak-{}.sqlite", std::process::id()))
            .display()
            .to_string(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--calls" => args.calls = value()?.parse().map_err(|e| format!("--calls: {e}"))?,
            "--concurrency" => {
                args.concurrency = value()?
                    .parse()
                    .map_err(|e| format!("--concurrency: {e}"))?
            }
            "--seed" => args.seed = value()?.parse().map_err(|e| format!("--seed: {e}"))?,
            "--telemetry-sqlite" => args.sqlite = value()?,
            "--help" | "-h" => {
                println!("usage: soak [--calls N] [--concurrency C] [--seed S] [--telemetry-sqlite PATH]");
                std::process::exit(0);
            }
            other => {
                return Err(format!(
                "unknown flag {other}; allowed: --calls, --concurrency, --seed, --telemetry-sqlite"
            ))
            }
        }
    }
    if args.calls == 0 || args.concurrency == 0 {
        return Err("--calls and --concurrency must be > 0".into());
    }
    Ok(args)
}

/// The fault mix: (provider name, behaviour, healthy?).
fn fault_mix(seed: u64) -> Vec<(&'static str, Behaviour, bool)> {
    let healthy = || Behaviour::Healthy {
        ttft: Duration::from_millis(5),
        inter_token: Duration::from_millis(1),
        chunks: 4,
        content: "a healthy answer".into(),
    };
    vec![
        ("healthya", healthy(), true),
        ("healthyb", healthy(), true),
        ("healthyc", healthy(), true),
        ("badkey", Behaviour::Unauthorized, false),
        ("blackhole", Behaviour::BlackHole, false),
        (
            "slow",
            Behaviour::Slow {
                delay: Duration::from_millis(1500),
            },
            false,
        ),
        (
            "ratelimited",
            Behaviour::RateLimited {
                retry_after_s: Some(1),
            },
            false,
        ),
        (
            "halfdead",
            Behaviour::Mix {
                failure_rate: 0.9,
                failure: Box::new(Behaviour::ServerError(503)),
                seed,
            },
            false,
        ),
    ]
}

#[tokio::main]
async fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("soak: {e}");
            std::process::exit(2);
        }
    };
    let mix = fault_mix(args.seed);
    let mut mocks = Vec::new();
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    for (key, value) in [
        ("PGW_LIMITER_BACKEND", "memory"),
        ("PGW_BREAKER_BACKEND", "memory"),
        ("PGW_CACHE_BACKEND", "none"),
        ("PGW_TELEMETRY_BACKEND", "sqlite"),
        ("LLM__RETRY__MAX_ATTEMPTS", "4"),
        ("LLM__RETRY__BACKOFF_BASE_S", "0.02"),
        ("LLM__RETRY__BACKOFF_MAX_S", "0.5"),
        ("LLM__BREAKER__FAIL_THRESHOLD", "5"),
        ("LLM__BREAKER__COOLDOWN_S", "5"),
        ("LLM__BACKPRESSURE__STALL_WINDOW_S", "60"),
    ] {
        env.insert(key.into(), value.into());
    }
    env.insert("PGW_TELEMETRY_SQLITE_PATH".into(), args.sqlite.clone());
    for (name, behaviour, _) in &mix {
        let mock = MockUpstream::start(behaviour.clone()).await;
        let p = format!("LLM__{}__1", name.to_uppercase());
        env.insert(format!("{p}__BASE_URL"), mock.base_url());
        env.insert(format!("{p}__API_KEY"), format!("sk-soak-{name}"));
        env.insert(format!("{p}__MODEL"), format!("mock-{name}"));
        env.insert(format!("{p}__TIMEOUT_S"), "10".into());
        env.insert(format!("{p}__TTFT_TIMEOUT_S"), "1".into());
        env.insert(format!("{p}__INTER_TOKEN_TIMEOUT_S"), "0.5".into());
        mocks.push(mock);
    }
    let settings = Settings::from_map(&env).expect("soak settings are valid");
    let gw = Gateway::from_settings(settings, "LLM")
        .await
        .expect("the runtime starts");

    println!(
        "soak: {} calls at concurrency {} over {} sources (seed {}), telemetry → {}",
        args.calls,
        args.concurrency,
        mix.len(),
        args.seed,
        args.sqlite
    );
    let started = Instant::now();
    let latencies: Vec<(Result<(), String>, f64)> = futures::stream::iter(0..args.calls)
        .map(|i| {
            let gw = gw.clone();
            async move {
                let t = Instant::now();
                let ok = gw
                    .chat_with(
                        vec![Message::user(format!("soak call {i}"))],
                        CallOptions::new().session_id("soak"),
                    )
                    .await
                    .map(|_| ())
                    .map_err(|e| match e.unavailable() {
                        Some(u) => format!("{}:{}", e.class_name(), u.reason.as_str()),
                        None => e.class_name().to_string(),
                    });
                (ok, t.elapsed().as_secs_f64() * 1e3)
            }
        })
        .buffer_unordered(args.concurrency)
        .collect()
        .await;
    let elapsed = started.elapsed().as_secs_f64();

    let succeeded = latencies.iter().filter(|(ok, _)| ok.is_ok()).count();
    let mut failures: BTreeMap<String, u64> = BTreeMap::new();
    for (outcome, _) in &latencies {
        if let Err(kind) = outcome {
            *failures.entry(kind.clone()).or_default() += 1;
        }
    }
    let mut ms: Vec<f64> = latencies.iter().map(|(_, ms)| *ms).collect();
    ms.sort_by(|a, b| a.total_cmp(b));
    let pct = |q: f64| ms[((ms.len() - 1) as f64 * q).round() as usize];

    // Invariants: everything released once the calls are done (bookkeeping casts are async).
    let deadline = Instant::now() + Duration::from_secs(3);
    let (mut sources, mut leases) = (Vec::new(), u64::MAX);
    while Instant::now() < deadline {
        sources = gw.sources("LLM").await.expect("scope exists");
        leases = gw.leases_held("LLM").await.unwrap_or(u64::MAX);
        if leases == 0 && sources.iter().all(|s| s.in_flight == 0 && !s.probe_held) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let in_flight: u32 = sources.iter().map(|s| s.in_flight).sum();
    let probes = sources.iter().filter(|s| s.probe_held).count();
    let attempts_total: u64 = sources.iter().map(|s| s.attempts).sum();
    let healthy: Vec<&str> = mix.iter().filter(|m| m.2).map(|m| m.0).collect();

    println!(
        "\n{:<14} {:>9} {:>7} {:>9} {:>7} {:>6} {:>7}",
        "source", "attempts", "share", "successes", "opens", "health", "pacer"
    );
    let mut bad_share = serde_json::Map::new();
    let mut opens = serde_json::Map::new();
    let mut false_opens = 0u64;
    for s in &sources {
        let share = s.attempts as f64 / attempts_total.max(1) as f64;
        let provider = s.name.trim_end_matches("_1");
        println!(
            "{:<14} {:>9} {:>6.2}% {:>9} {:>7} {:>6.2} {:>7}",
            s.name,
            s.attempts,
            share * 100.0,
            s.successes,
            s.epoch,
            s.health,
            s.pacer_limit
        );
        opens.insert(s.name.clone(), s.epoch.into());
        if healthy.contains(&provider) {
            false_opens += s.epoch;
        } else {
            bad_share.insert(s.name.clone(), share.into());
        }
    }

    let expected_rows = gw.telemetry_rows_accepted();
    gw.shutdown().await;
    let written_rows = count_rows(&args.sqlite);
    let status_dropped = gw.telemetry_status().dropped_rows;
    for mock in mocks {
        mock.shutdown().await;
    }

    let success_rate = succeeded as f64 / args.calls as f64;
    let invariants_ok = in_flight == 0 && leases == 0 && probes == 0;
    println!(
        "\nsuccess {succeeded}/{} = {:.3}%  p50 {:.1} ms  p99 {:.1} ms  {:.0} calls/s",
        args.calls,
        success_rate * 100.0,
        pct(0.5),
        pct(0.99),
        args.calls as f64 / elapsed
    );
    println!(
        "invariants: in_flight={in_flight} leases={leases} probes_held={probes}  telemetry rows: expected {expected_rows}, written {written_rows}, dropped {status_dropped}"
    );
    let summary = serde_json::json!({
        "calls": args.calls,
        "succeeded": succeeded,
        "success_rate": success_rate,
        "bad_source_attempt_share": bad_share,
        "breaker_opens": opens,
        "false_opens_healthy": false_opens,
        "p50_ms": pct(0.5),
        "p99_ms": pct(0.99),
        "calls_per_s": args.calls as f64 / elapsed,
        "failures": failures,
        "invariants_ok": invariants_ok,
        "telemetry_sqlite": args.sqlite,
        "telemetry_rows_expected": expected_rows,
        "telemetry_rows_written": written_rows,
    });
    println!("{summary}");
}

fn count_rows(path: &str) -> u64 {
    rusqlite::Connection::open(path)
        .and_then(|c| c.query_row("SELECT COUNT(*) FROM llm_calls", [], |r| r.get::<_, i64>(0)))
        .map(|n| n as u64)
        .unwrap_or(0)
}
