//! Capacity: how close the governed runtime gets to what an upstream can serve, in the three
//! regimes users meet, with 1,024 callers over two sources and the default (adaptive) pacer.
//!
//! - `unlimited`: 200 ms per request, never refuses; measured against a bare reqwest client
//!   with the same callers on the same mocks (`direct_calls_per_s`);
//! - `rate_limited`: each source admits 1,000 requests/s (token bucket, OpenAI-style
//!   `x-ratelimit-*-requests` headers) and answers 429 with `Retry-After: 1` above; ideal 2,000/s;
//! - `queueing`: each source serves 64 at once in 200 ms and queues the rest; ideal 640/s.
//!
//! ```text
//! cargo run --release --example capacity -- [--seconds 10] [--callers 1024] [--pacer adaptive|aimd|off] [--no-headers]
//! ```
//!
//! Prints one JSON line per scenario. The mocks run in the same process on the same cores.

use std::time::Duration;

use clap::Parser;
use polygateway::testkit::capacity::{run_scenario, Scenario};

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
    Ok(())
}
