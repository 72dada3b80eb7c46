//! Capacity: how close the governed runtime gets to what an upstream can serve, in the three
//! regimes users meet, with 1,024 callers over two sources and the default (adaptive) pacer.
//!
//! - `unlimited`: 200 ms per request, never refuses; measured against a bare reqwest client
//!   with the same callers on the same mocks (`direct_calls_per_s`);
//! - `rate_limited`: each source admits 1,000 requests/s (token bucket, OpenAI-style
//!   `x-ratelimit-*-requests` headers) and answers 429 with `Retry-After: 1` above; ideal 2,000/s;
//! - `queueing`: each source serves 64 at once in 200 ms and queues the rest; ideal 640/s.
//!
//! Then the cold start: 256 callers arrive at once at a fresh gateway whose one source answers
//! every call in a constant 1.3 s, whatever the concurrency (never strained); the first 10 s,
//! with `--pacer` and with the pacer off, in `--cold-pairs` pairs whose order alternates, after
//! one discarded run (the first cold burst of a process pays about a second of its own on some
//! calls, pacer or not), and one line comparing the medians (targets: p99 ≤ 1.2× and calls/s ≥
//! 0.95× the pacer-off run's).
//!
//! ```text
//! cargo run --release --example capacity -- [--seconds 10] [--callers 1024] [--pacer adaptive|aimd|off] [--no-headers]
//! ```
//!
//! Prints one JSON line per scenario. The mocks run in the same process on the same cores.

use std::time::Duration;

use clap::Parser;
use polygateway_testkit::capacity::{run_cold_start, run_scenario, Scenario};
use serde_json::json;

#[derive(Parser)]
struct Args {
    /// Seconds per scenario (the steady rate is the last half).
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Concurrent callers.
    #[arg(long, default_value_t = 1024)]
    callers: usize,
    /// `{SCOPE}__PACER`: adaptive, aimd or off.
    #[arg(long, default_value = "adaptive")]
    pacer: String,
    /// The rate-limited mock sends no rate-limit headers (429 and Retry-After only).
    #[arg(long)]
    no_headers: bool,
    /// Callers of the cold-start scenario (0 skips it).
    #[arg(long, default_value_t = 256)]
    cold_callers: usize,
    /// Seconds measured from the cold start.
    #[arg(long, default_value_t = 10)]
    cold_seconds: u64,
    /// Pairs of cold starts (pacer, pacer off), the order alternating.
    #[arg(long, default_value_t = 2)]
    cold_pairs: usize,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let service = Duration::from_millis(200);
    let duration = Duration::from_secs(args.seconds);
    for scenario in [
        Scenario::unlimited(service),
        Scenario::rate_limited(1000, service, !args.no_headers),
        Scenario::queueing(service),
    ] {
        let report = run_scenario(&scenario, args.callers, duration, &args.pacer).await?;
        for s in &report.sources {
            eprintln!(
                "{}: {} pacer limit {} (last signal {})",
                s.name,
                s.pacer_mode,
                s.pacer_limit,
                s.pacer_signal.as_str()
            );
        }
        if let Some(e) = &report.first_error {
            eprintln!("first failure: {e}");
        }
        println!("{}", report.json());
    }
    if args.cold_callers > 0 {
        let (service, window) = (
            Duration::from_millis(1300),
            Duration::from_secs(args.cold_seconds),
        );
        // Discarded: the process's first cold burst is slower whatever the pacer.
        run_cold_start(args.cold_callers, service, window, "off").await?;
        let (mut paced, mut off) = (Vec::new(), Vec::new());
        for pair in 0..args.cold_pairs {
            let order = if pair % 2 == 0 {
                [args.pacer.as_str(), "off"]
            } else {
                ["off", args.pacer.as_str()]
            };
            for pacer in order {
                let report = run_cold_start(args.cold_callers, service, window, pacer).await?;
                println!("{}", report.json());
                if pacer == "off" { &mut off } else { &mut paced }.push(report);
            }
        }
        let median =
            |runs: &[polygateway_testkit::capacity::ColdStartReport],
             f: fn(&polygateway_testkit::capacity::ColdStartReport) -> f64| {
                let mut v: Vec<f64> = runs.iter().map(f).collect();
                v.sort_by(f64::total_cmp);
                v.get(v.len() / 2).copied().unwrap_or(0.0)
            };
        let ratio = |a: f64, b: f64| {
            if b > 0.0 {
                (a / b * 1000.0).round() / 1000.0
            } else {
                0.0
            }
        };
        let (p99, rate) = (
            ratio(median(&paced, |r| r.p99_ms), median(&off, |r| r.p99_ms)),
            ratio(
                median(&paced, |r| r.calls_per_s),
                median(&off, |r| r.calls_per_s),
            ),
        );
        println!(
            "{}",
            json!({
                "scenario": "cold_start_vs_off",
                "pacer": args.pacer,
                "pairs": args.cold_pairs,
                "p99_ratio": p99,
                "calls_per_s_ratio": rate,
            })
        );
    }
    Ok(())
}
