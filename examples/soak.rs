//! The main job: a fault-mix soak through the full runtime on embedded defaults.
//!
//! Three healthy mock sources and the seeds' fault mix (bad key, black hole, slow, rate-limited
//! with Retry-After, 90 % transient), `--calls` governed chat calls at `--concurrency`, every
//! attempt written to SQLite. The last line of output is one JSON object. Traffic goes to
//! 127.0.0.1 only; the run is bounded and stops by itself.
//!
//! ```text
//! cargo run --release --example soak -- --calls 8000 --concurrency 64 --seed 7
//! ```

use std::path::PathBuf;

use polygateway_testkit::soak::{run_soak, SoakConfig};

const USAGE: &str =
    "usage: soak [--calls N] [--concurrency C] [--seed S] [--telemetry-sqlite PATH]";

fn parse_args() -> Result<SoakConfig, String> {
    let mut config = SoakConfig {
        calls: 8000,
        concurrency: 64,
        seed: 7,
        telemetry_sqlite: Some(
            std::env::temp_dir().join(format!("polygateway-soak-{}.sqlite", std::process::id())),
        ),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value; {USAGE}"));
        let number = |v: String, flag: &str| {
            v.parse::<u64>()
                .map_err(|e| format!("{flag} takes a whole number ({e}); {USAGE}"))
        };
        match flag.as_str() {
            "--calls" => config.calls = number(value()?, "--calls")? as usize,
            "--concurrency" => config.concurrency = number(value()?, "--concurrency")? as usize,
            "--seed" => config.seed = number(value()?, "--seed")?,
            "--telemetry-sqlite" => config.telemetry_sqlite = Some(PathBuf::from(value()?)),
            "--help" | "-h" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown flag {other}; {USAGE}")),
        }
    }
    if config.calls == 0 || config.concurrency == 0 {
        return Err(format!("--calls and --concurrency must be > 0; {USAGE}"));
    }
    Ok(config)
}

#[tokio::main]
async fn main() {
    let config = match parse_args() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("soak: {e}");
            std::process::exit(2);
        }
    };
    let sqlite = config
        .telemetry_sqlite
        .as_ref()
        .map_or_else(String::new, |p| p.display().to_string());
    println!(
        "soak: {} calls at concurrency {} (seed {}), telemetry → {sqlite}",
        config.calls, config.concurrency, config.seed
    );
    let report = match run_soak(&config).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("soak: the runtime did not start: {e}");
            std::process::exit(1);
        }
    };
    println!("\n{}", report.table());
    println!(
        "success {}/{} = {:.3}%  p50 {:.1} ms  p99 {:.1} ms  {:.0} calls/s",
        report.succeeded,
        report.calls,
        report.success_rate() * 100.0,
        report.p50_ms,
        report.p99_ms,
        report.calls_per_s
    );
    println!(
        "invariants ok: {}  telemetry rows: expected {}, written {}",
        report.invariants_ok(),
        report.telemetry_rows_expected,
        report.telemetry_rows_written
    );
    let mut summary = report.to_json();
    summary["telemetry_sqlite"] = sqlite.into();
    println!("{summary}");
}
