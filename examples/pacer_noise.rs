//! Does the default pacer take latency spread for a queue? A closed loop in virtual time: `demand`
//! callers keep a source busy, each call's latency drawn independently of how many are in flight
//! (the upstream never queues), and the production `AdaptivePacer` (open start, the default) sees
//! every answer. Any throttling here is a false positive: the pacer should stay out of the way.
//!
//! The other side of the trade: the same spread of service times behind a server that serves
//! `slots` at once and queues the rest (first come, first served). There the pacer should keep
//! the queue short — latency near the service time — without starving the slots.
//!
//! ```text
//! cargo run --release --example pacer_noise -- [--seed 7]
//! ```
//!
//! One JSON line per latency profile and demand: calls per second served against what the
//! upstream can serve (`served_share`), mean latency over the mean service time, and the pacer's
//! limit (mean, min, sampled every 20 calls) over ten virtual minutes. Deterministic: one seed
//! (`--seed`; the figures in ARCHITECTURE.md span seeds 1–7), no wall clock.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::{Duration, Instant};

use clap::Parser;
use polygateway_actors::policy::adaptive_pacer::AdaptivePacer;
use polygateway_actors::policy::pacer::{Pacer, PacerObservation};
use polygateway_actors::AttemptVerdict;
use rand::{Rng, SeedableRng};

#[derive(Parser)]
struct Args {
    /// The seed every row's latencies are drawn from.
    #[arg(long, default_value_t = 7)]
    seed: u64,
}

/// Ten virtual minutes per row.
const RUN_MS: u64 = 600_000;

/// One run: service times uniform in `lo_ms..=hi_ms`; `slots`: a server that serves that many
/// at once and queues the rest, or `None` for one whose latency never depends on load.
fn row(seed: u64, lo_ms: u64, hi_ms: u64, demand: u32, slots: Option<u32>) -> serde_json::Value {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let mut pacer = AdaptivePacer::open(0);
    let t0 = Instant::now();
    // Attempts in service, by when they end: (end, sent).
    let mut ending = BinaryHeap::new();
    let mut waiting = VecDeque::new();
    let (mut in_flight, mut now_ms, mut served, mut latency_sum) = (0u32, 0u64, 0u64, 0u64);
    let mut limits = Vec::new();
    while now_ms < RUN_MS {
        while in_flight < demand.min(pacer.limit()) {
            if slots.is_some_and(|slots| ending.len() >= slots as usize) {
                waiting.push_back(now_ms);
            } else {
                ending.push(Reverse((now_ms + rng.random_range(lo_ms..=hi_ms), now_ms)));
            }
            in_flight += 1;
        }
        let Reverse((at, sent)) = ending.pop().expect("a call in service");
        now_ms = at;
        if let Some(next) = waiting.pop_front() {
            ending.push(Reverse((now_ms + rng.random_range(lo_ms..=hi_ms), next)));
        }
        let latency = at - sent;
        pacer.observe(&PacerObservation {
            latency: Duration::from_millis(latency),
            in_flight,
            ..PacerObservation::new(AttemptVerdict::Success, t0 + Duration::from_millis(at))
        });
        in_flight -= 1;
        served += 1;
        latency_sum += latency;
        if served % 20 == 0 {
            limits.push(pacer.limit().min(demand));
        }
    }
    let seconds = RUN_MS as f64 / 1000.0;
    let service_s = (lo_ms + hi_ms) as f64 / 2000.0;
    let capacity = f64::from(slots.unwrap_or(demand).min(demand)) / service_s;
    let calls_per_s = served as f64 / seconds;
    let mean = limits.iter().map(|&l| f64::from(l)).sum::<f64>() / limits.len().max(1) as f64;
    let round = |x: f64, places: i32| (x * 10f64.powi(places)).round() / 10f64.powi(places);
    serde_json::json!({
        "latency_ms": [lo_ms, hi_ms],
        "slots": slots,
        "demand": demand,
        "calls_per_s": round(calls_per_s, 1),
        "capacity_calls_per_s": round(capacity, 1),
        "served_share": round(calls_per_s / capacity, 3),
        "latency_over_service": round(latency_sum as f64 / served as f64 / 1000.0 / service_s, 2),
        "limit_mean_capped_at_demand": round(mean, 1),
        "limit_min": limits.iter().min(),
        "last_signal": format!("{:?}", pacer.last_signal()),
    })
}

fn main() {
    let seed = Args::parse().seed;
    // Constant, narrow, wide and LLM-like (1–20 s, as output lengths vary) latency.
    for (lo, hi) in [(500, 500), (400, 600), (100, 900), (1_000, 20_000)] {
        for demand in [4, 32] {
            println!("{}", row(seed, lo, hi, demand, None));
        }
    }
    // A queue behind 8 slots, 32 callers: unpaced, latency is 4× the service time.
    for (lo, hi) in [(500, 500), (100, 900), (1_000, 20_000)] {
        println!("{}", row(seed, lo, hi, 32, Some(8)));
    }
}
