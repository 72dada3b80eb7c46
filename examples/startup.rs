//! What assembling a gateway costs before its first call: a fresh process builds a chat scope of
//! 1, 10 and 50 OpenAI sources (HTTPS base URLs, nothing is sent) with `Gateway::from_settings`,
//! in-memory governance, no telemetry. Each build runs in a child process of its own (this binary
//! re-executed), so one-time costs of the process count, as they do when a service or a
//! `polygateway serve` starts; the CPU is every thread's (`/proc/self/task/*/schedstat`).
//!
//! ```text
//! cargo run --release --example startup -- [--rounds 5] [--sources 1,10,50]
//! ```
//!
//! One JSON line per source count: `build_ms` and `cpu_ms`, medians over `--rounds` processes,
//! and `cpu_ms_per_source`.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Instant;

use clap::Parser;
use polygateway::config::Settings;
use polygateway::Gateway;
use serde_json::{json, Value};

#[path = "support/process_cpu.rs"]
mod process_cpu;
use process_cpu::live_threads_cpu_ms;

#[derive(Parser)]
struct Args {
    /// Processes per source count (the medians are printed).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Source counts of the scope.
    #[arg(long, value_delimiter = ',', default_value = "1,10,50")]
    sources: Vec<usize>,
    /// Internal: build one gateway of N sources and print what it cost.
    #[arg(long, value_name = "N", hide = true)]
    child: Option<usize>,
}

fn main() {
    let args = Args::parse();
    if let Some(n) = args.child {
        return child(n);
    }
    let rounds = args.rounds.max(1);
    for &n in &args.sources {
        let runs: Vec<Value> = (0..rounds).map(|_| run_child(n)).collect();
        let of = |field: &str| median(runs.iter().map(|r| r[field].as_f64().unwrap()).collect());
        let (build_ms, cpu_ms) = (of("build_ms"), of("cpu_ms"));
        println!(
            "{}",
            json!({
                "sources": n, "rounds": rounds,
                "build_ms": round1(build_ms), "cpu_ms": round1(cpu_ms),
                "cpu_ms_per_source": round1(cpu_ms / n as f64),
            })
        );
    }
}

/// This binary re-executed to build one gateway of `n` sources; its JSON line.
fn run_child(n: usize) -> Value {
    let out = Command::new(std::env::current_exe().expect("this binary"))
        .args(["--child", &n.to_string()])
        .output()
        .expect("the child runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the child's JSON line")
}

/// One build in this process: the wall time of `Gateway::from_settings` and the CPU every thread
/// spent meanwhile.
fn child(n: usize) {
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    let settings = settings(n);
    let (started, cpu_before) = (Instant::now(), live_threads_cpu_ms());
    let gw = runtime
        .block_on(Gateway::from_settings(settings, "LLM"))
        .expect("the gateway assembles");
    let (build_ms, cpu_ms) = (
        started.elapsed().as_secs_f64() * 1e3,
        live_threads_cpu_ms() - cpu_before,
    );
    runtime.block_on(gw.shutdown());
    println!("{}", json!({"build_ms": build_ms, "cpu_ms": cpu_ms}));
}

/// A chat scope `LLM` of `n` OpenAI sources on HTTPS addresses (never called).
fn settings(n: usize) -> Settings {
    let mut env: BTreeMap<String, String> = [
        ("PGW_LIMITER_BACKEND", "memory"),
        ("PGW_BREAKER_BACKEND", "memory"),
        ("PGW_TELEMETRY_BACKEND", "none"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    for i in 1..=n {
        let source = format!("LLM__OPENAI__{i}__");
        env.insert(
            format!("{source}BASE_URL"),
            format!("https://account-{i}.example.com/v1"),
        );
        env.insert(format!("{source}API_KEY"), format!("sk-startup-{i}"));
        env.insert(format!("{source}MODEL"), "gpt-4o-mini".into());
    }
    Settings::from_map(&env).expect("valid settings")
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}
