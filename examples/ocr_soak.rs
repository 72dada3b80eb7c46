//! The OCR fault-pool soak across OS processes (docs/behaviour.md §11): this process starts the mock pool,
//! then runs `--processes` copies of itself as workers, each with its own gateway, all sharing one
//! Redis (`REDIS_URL`, default redis://127.0.0.1:6379) for limits and breakers. It prints the
//! success rate and the invariants; the last line is one JSON object.
//!
//! ```text
//! cargo run --release --features redis --example ocr_soak -- --calls 1500 --processes 3
//! ```

use std::process::Stdio;

use polygateway::config::Secret;
use polygateway::redis::{RedisBreakers, RedisGate, RedisGovernance};
use polygateway::GatewayBuilder;
use polygateway_testkit::ocr_soak::{run_worker, verdict, OcrPool, WorkerConfig, WorkerReport};

const WORKER_ENV: &str = "PGW_OCR_SOAK_WORKER";
const USAGE: &str = "usage: ocr_soak [--calls N] [--processes P] [--concurrency C]";

#[tokio::main]
async fn main() {
    if let Ok(config) = std::env::var(WORKER_ENV) {
        let config: WorkerConfig = serde_json::from_str(&config).expect("worker config");
        let report = run_worker(&config, GatewayBuilder::redis_key_prefix)
            .await
            .expect("worker runs");
        println!("{}", serde_json::to_string(&report).unwrap());
        return;
    }
    let (mut calls, mut processes, mut concurrency) = (1500usize, 3usize, 16usize);
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().and_then(|v| v.parse::<usize>().ok());
        match (flag.as_str(), value) {
            ("--calls", Some(v)) if v > 0 => calls = v,
            ("--processes", Some(v)) if v > 0 => processes = v,
            ("--concurrency", Some(v)) if v > 0 => concurrency = v,
            _ => {
                eprintln!("ocr_soak: bad flag {flag}; {USAGE}");
                std::process::exit(2);
            }
        }
    }
    let redis_url =
        std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_string());
    let pool = OcrPool::start(7).await;
    let dir = std::env::temp_dir().join(format!("polygateway-ocr-soak-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let key_prefix = format!("pgw-ocrsoak-{}", std::process::id());
    println!(
        "ocr_soak: {calls} calls over {processes} processes sharing {redis_url} (prefix {key_prefix})"
    );

    let mut children = Vec::new();
    for worker in 0..processes {
        let config = WorkerConfig {
            worker,
            calls: calls / processes + usize::from(worker < calls % processes),
            concurrency,
            redis_url: redis_url.clone(),
            key_prefix: key_prefix.clone(),
            sources: pool.sources.clone(),
            telemetry_sqlite: dir.join(format!("worker-{worker}.sqlite")),
        };
        let child = tokio::process::Command::new(std::env::current_exe().unwrap())
            .env(WORKER_ENV, serde_json::to_string(&config).unwrap())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn a worker process");
        children.push(child);
    }
    let mut reports: Vec<WorkerReport> = Vec::new();
    for child in children {
        let out = child.wait_with_output().await.expect("worker finishes");
        let text = String::from_utf8_lossy(&out.stdout);
        let last = text.lines().last().unwrap_or_default();
        match serde_json::from_str(last) {
            Ok(report) => reports.push(report),
            Err(e) => {
                eprintln!(
                    "ocr_soak: a worker failed ({}): {e}; output: {text}",
                    out.status
                );
                std::process::exit(1);
            }
        }
    }
    // What the workers left in Redis, read through the same governance they shared.
    let redis = RedisGovernance::connect(&Secret::new(&redis_url), &key_prefix)
        .await
        .expect("Redis is reachable for the verdict");
    let gate = RedisGate::new(redis.clone());
    let breakers = RedisBreakers::new(redis.clone());
    let v = verdict(&reports, &gate, &breakers, &pool.sources)
        .await
        .expect("Redis is reachable for the verdict");
    redis.close().await;
    println!("attempts per source: {:?}", v.attempts);
    println!("breaker openings:    {:?}", v.breaker_opens);
    println!(
        "success {}/{} non-cancelled calls = {:.3}% ({} cancelled on purpose)",
        v.succeeded,
        v.calls - v.cancelled,
        v.success_rate * 100.0,
        v.cancelled
    );
    for (name, ok) in &v.invariants {
        println!("invariant {name:<34} {}", if *ok { "ok" } else { "FAILED" });
    }
    let mut summary = serde_json::to_value(&v).unwrap();
    summary["processes"] = processes.into();
    println!("{summary}");
    if !v.invariants_ok() {
        std::process::exit(1);
    }
}
