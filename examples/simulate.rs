//! Deterministic simulation of the governed call path over many seeded fault schedules.
//!
//! Each seed draws a scope (1–4 sources, budgets, gates, breaker settings) and a fault schedule
//! (latencies, 429 bursts with and without Retry-After, dead keys that recover, black holes,
//! truncated streams, slow first tokens, a governance backend-down window, caller
//! cancellations), then runs `--calls` calls through the real call machine and governance state
//! machines in virtual time, checking the invariants at every step. `--network` puts the
//! governance backend a simulated round trip away. `--decoded` (feature `test-util`) writes every
//! answer in a provider's dialect and reads it back through this crate's decoders
//! (`transport::DecodingWire`); the schedules, and so `trace_hash`, are those of the run without
//! it when every answer is read as it was meant. Failing seeds are printed with the trace of the
//! first failing call; the last line is one JSON object.
//!
//! ```text
//! cargo run --release --example simulate -- --seeds 1000 --calls 200
//! cargo run --release --example simulate -- --seeds 1000 --calls 200 --network
//! cargo run --release --features test-util --example simulate -- --seeds 1000 --calls 200 --decoded
//! cargo run --release --example simulate -- --seed 12 --calls 60     # replay one seed
//! ```

use std::collections::HashSet;
use std::time::Instant;

use polygateway_actors::testkit::sim::{
    run_seed, run_seed_over_network, run_seed_through, SeedReport,
};

/// Which seeds to run and how many calls each.
#[derive(clap::Parser)]
struct Args {
    /// Run seeds 0..N.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    seeds: u64,
    /// Run this one seed only (replay), instead of `--seeds`.
    #[arg(long, conflicts_with = "seeds")]
    seed: Option<u64>,
    /// Calls per seed.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..))]
    calls: u32,
    /// Reach the governance backend over a simulated network (`run_seed_over_network`).
    #[arg(long)]
    network: bool,
    /// Read every answer through the crate's decoders (`DecodingWire`; feature `test-util`).
    #[arg(long)]
    decoded: bool,
}

impl Args {
    fn seeds(&self) -> std::ops::Range<u64> {
        match self.seed {
            Some(seed) => seed..seed.saturating_add(1),
            None => 0..self.seeds,
        }
    }

    fn run(&self, seed: u64, keep_trace: bool) -> SeedReport {
        match (self.decoded, self.network) {
            (true, network) => {
                run_seed_through(seed, self.calls, network, keep_trace, decoding(seed))
            }
            (false, true) => run_seed_over_network(seed, self.calls, keep_trace),
            (false, false) => run_seed(seed, self.calls, keep_trace),
        }
    }
}

/// Seed `seed`'s wire through the crate's decoders.
#[cfg(feature = "test-util")]
fn decoding(seed: u64) -> std::sync::Arc<dyn polygateway_actors::testkit::sim::Wire> {
    std::sync::Arc::new(polygateway::transport::DecodingWire::new(seed))
}

#[cfg(not(feature = "test-util"))]
fn decoding(_: u64) -> std::sync::Arc<dyn polygateway_actors::testkit::sim::Wire> {
    eprintln!("--decoded reads answers through the crate's decoders, which feature `test-util` builds: run with `--features test-util`");
    std::process::exit(2);
}

/// FNV-1a over the per-seed hashes, in seed order.
fn combine(reports: &[SeedReport]) -> u64 {
    reports.iter().fold(0xcbf2_9ce4_8422_2325, |h, r| {
        r.trace_hash
            .to_le_bytes()
            .iter()
            .fold(h, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
    })
}

fn main() {
    let args = <Args as clap::Parser>::parse();
    let started = Instant::now();
    // Two workers (the machine has two cores); each seed is independent and deterministic,
    // and the results are put back in seed order.
    let seeds: Vec<u64> = args.seeds().collect();
    let mut reports: Vec<SeedReport> = std::thread::scope(|s| {
        let workers: Vec<_> = seeds
            .chunks(seeds.len().div_ceil(2))
            .map(|chunk| {
                s.spawn(|| {
                    chunk
                        .iter()
                        .map(|&seed| args.run(seed, false))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("a simulation worker panicked"))
            .collect()
    });
    reports.sort_by_key(|r| r.seed);
    let wall_s = started.elapsed().as_secs_f64();
    let mut violations = 0;
    for report in reports.iter().filter(|r| !r.violations.is_empty()) {
        violations += report.violations.len();
        let replay = args.run(report.seed, true);
        println!(
            "FAILED seed {} ({} violations):",
            report.seed,
            report.violations.len()
        );
        for v in report.violations.iter().take(5) {
            println!("  {v}");
        }
        println!("  trace of the first failing call (last 40 events):");
        let skip = replay.trace.len().saturating_sub(40);
        for line in &replay.trace[skip..] {
            println!("    {line}");
        }
        println!(
            "  replay: cargo run --release{} --example simulate -- --seed {} --calls {}{}{}",
            if args.decoded {
                " --features test-util"
            } else {
                ""
            },
            report.seed,
            args.calls,
            if args.network { " --network" } else { "" },
            if args.decoded { " --decoded" } else { "" }
        );
    }
    let distinct: HashSet<u64> = reports.iter().map(|r| r.trace_hash).collect();
    let steps: u64 = reports.iter().map(|r| r.steps).sum();
    let json = serde_json::json!({
        "seeds": reports.len(),
        "calls": reports.iter().map(|r| u64::from(r.calls)).sum::<u64>(),
        "steps": steps,
        "violations": violations,
        "distinct_schedules": distinct.len(),
        "pacer_observations": reports.iter().map(|r| r.pacer_observations).sum::<u64>(),
        "pacer_recoveries_checked": reports.iter().map(|r| u64::from(r.recoveries_checked)).sum::<u64>(),
        "room_turns_checked": reports.iter().map(|r| u64::from(r.room_turns_checked)).sum::<u64>(),
        "overloaded_answers": reports.iter().map(|r| u64::from(r.overloaded_answers)).sum::<u64>(),
        "deadline_sends_checked": reports.iter().map(|r| u64::from(r.deadline_sends_checked)).sum::<u64>(),
        "network": args.network,
        "wire": if args.decoded { "decoded" } else { "meant" },
        "answers_read": reports.iter().map(|r| r.answers_read).sum::<u64>(),
        "carried_finishes": reports.iter().map(|r| r.carried_finishes).sum::<u64>(),
        "door_tasks": reports.iter().map(|r| r.door_tasks).sum::<u64>(),
        "given_back": reports.iter().map(|r| r.given_back).sum::<u64>(),
        "wall_s": (wall_s * 1000.0).round() / 1000.0,
        "trace_hash": format!("{:016x}", combine(&reports)),
    });
    println!("{json}");
    if violations > 0 {
        std::process::exit(1);
    }
}
