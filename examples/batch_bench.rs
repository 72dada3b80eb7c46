//! Batch job throughput and memory: `Gateway::batch` over a generated input (streamed, never
//! held whole) against two capacity mocks that serve 64 requests at once each and queue the rest
//! (`testkit::capacity::Scenario::queueing`), with a journal. Prints one JSON line: items,
//! results, goodput against the mocks' capacity, peak RSS (`VmHWM`), wall time.
//!
//! ```text
//! cargo run --release --features testkit --example batch_bench -- [--items 100000] [--service-ms 200] [--max-concurrency 1024] [--no-journal]
//! ```

use std::time::{Duration, Instant};

use clap::Parser;
use futures::StreamExt;
use polygateway::batch::BatchOptions;
use polygateway::config::Settings;
use polygateway::testkit::capacity::Scenario;
use polygateway::testkit::mock_capacity::CapacityMock;
use polygateway::testkit::mock_env;
use polygateway::Gateway;
use serde_json::json;

#[derive(Parser)]
struct Args {
    /// Input lines.
    #[arg(long, default_value_t = 100_000)]
    items: usize,
    /// Service time of each mock request, milliseconds.
    #[arg(long, default_value_t = 200)]
    service_ms: u64,
    /// `BatchOptions::max_concurrency`.
    #[arg(long, default_value_t = 1024)]
    max_concurrency: usize,
    /// Run without a journal.
    #[arg(long)]
    no_journal: bool,
}

/// Peak resident set size of this process, MiB (`VmHWM` of /proc/self/status; Linux only).
fn rss_peak_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let scenario = Scenario::queueing(Duration::from_millis(args.service_ms));
    let mut mocks = Vec::new();
    let mut env = mock_env();
    for n in 0..scenario.sources {
        let mock = CapacityMock::start(scenario.regime).await;
        let source = format!("LLM__OPENAI__{}", n + 1);
        env.insert(format!("{source}__BASE_URL"), mock.base_url());
        env.insert(format!("{source}__API_KEY"), "sk-test".into());
        env.insert(format!("{source}__MODEL"), "test-model".into());
        mocks.push(mock);
    }
    let gw = Gateway::from_settings(Settings::from_map(&env)?, "LLM").await?;
    let dir = tempfile::tempdir()?;
    let options = BatchOptions {
        scope: Some("LLM".into()),
        max_concurrency: args.max_concurrency,
        journal: (!args.no_journal).then(|| dir.path().join("bench.journal")),
        ..BatchOptions::default()
    };
    // Generated lazily: the input is a stream, as a file read line by line would be.
    let lines = futures::stream::iter(0..args.items).map(|i| {
        json!({"custom_id": format!("item-{i}"), "messages": [{"role": "user", "content": format!("item {i}")}]})
            .to_string()
    });
    let started = Instant::now();
    let mut job = gw.batch(lines, options)?;
    let (mut results, mut succeeded) = (0u64, 0u64);
    while let Some(result) = job.next().await {
        results += 1;
        succeeded += u64::from(result.is_success());
    }
    let wall = started.elapsed().as_secs_f64();
    let progress = job.progress();
    drop(job);
    gw.shutdown().await;
    let ideal = scenario.ideal_calls_per_s.unwrap_or(f64::NAN);
    let goodput = succeeded as f64 / wall;
    println!(
        "{}",
        json!({
            "bench": "batch",
            "scenario": scenario.name,
            "items": args.items,
            "results": results,
            "succeeded": succeeded,
            "errors": progress.errors,
            "journal": !args.no_journal,
            "max_concurrency": args.max_concurrency,
            "wall_s": (wall * 1000.0).round() / 1000.0,
            "goodput_calls_per_s": goodput.round(),
            "capacity_calls_per_s": ideal,
            "goodput_ratio": ((goodput / ideal) * 1000.0).round() / 1000.0,
            "p50_ms": progress.p50_ms,
            "p99_ms": progress.p99_ms,
            "rss_peak_mib": rss_peak_mib(),
        })
    );
    Ok(())
}
