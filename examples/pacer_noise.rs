//! Does the default pacer take latency spread for a queue? A closed loop in virtual time: `demand`
//! callers keep a source busy, each call's latency drawn independently of how many are in flight
//! (the upstream never queues), and the production `AdaptivePacer` (open start, the default) sees
//! every answer. Any throttling here is a false positive: the pacer should stay out of the way.
//!
//! ```text
//! cargo run --release --example pacer_noise
//! ```
//!
//! One JSON line per latency profile and demand: calls per second served against what the
//! callers would get unthrottled, and the pacer's limit (mean, min, max, sampled every 20 calls)
//! over ten virtual minutes. Deterministic: one seed, no wall clock.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use polygateway_actors::policy::adaptive_pacer::AdaptivePacer;
use polygateway_actors::policy::pacer::{Pacer, PacerObservation};
use polygateway_actors::AttemptVerdict;
use rand::{Rng, SeedableRng};

/// Ten virtual minutes per row.
const RUN_MS: u64 = 600_000;

fn row(lo_ms: u64, hi_ms: u64, demand: u32) -> serde_json::Value {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
    let mut pacer = AdaptivePacer::open(0);
    let t0 = Instant::now();
    let mut ending = BinaryHeap::new();
    let (mut in_flight, mut now_ms, mut served) = (0u32, 0u64, 0u64);
    let mut limits = Vec::new();
    while now_ms < RUN_MS {
        while in_flight < demand.min(pacer.limit()) {
            let latency = rng.random_range(lo_ms..=hi_ms);
            ending.push(Reverse((now_ms + latency, latency)));
            in_flight += 1;
        }
        let Reverse((at, latency)) = ending.pop().expect("a call in flight");
        now_ms = at;
        pacer.observe(&PacerObservation {
            latency: Duration::from_millis(latency),
            in_flight,
            ..PacerObservation::new(AttemptVerdict::Success, t0 + Duration::from_millis(at))
        });
        in_flight -= 1;
        served += 1;
        if served % 20 == 0 {
            limits.push(pacer.limit().min(demand));
        }
    }
    let seconds = RUN_MS as f64 / 1000.0;
    let unthrottled = f64::from(demand) / ((lo_ms + hi_ms) as f64 / 2000.0);
    let calls_per_s = served as f64 / seconds;
    let mean = limits.iter().map(|&l| f64::from(l)).sum::<f64>() / limits.len().max(1) as f64;
    serde_json::json!({
        "latency_ms": [lo_ms, hi_ms],
        "demand": demand,
        "calls_per_s": (calls_per_s * 10.0).round() / 10.0,
        "unthrottled_calls_per_s": (unthrottled * 10.0).round() / 10.0,
        "served_share": (calls_per_s / unthrottled * 1000.0).round() / 1000.0,
        "limit_mean_capped_at_demand": (mean * 10.0).round() / 10.0,
        "limit_min": limits.iter().min(),
        "last_signal": format!("{:?}", pacer.last_signal()),
    })
}

fn main() {
    // Constant, narrow, wide and LLM-like (1–20 s, as output lengths vary) latency.
    for (lo, hi) in [(500, 500), (400, 600), (100, 900), (1_000, 20_000)] {
        for demand in [4, 32] {
            println!("{}", row(lo, hi, demand));
        }
    }
}
