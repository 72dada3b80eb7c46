//! `tenants`: tenants of one class sharing a saturated upstream. First four equal-weight
//! tenants with unequal demand (1×, 2×, 4×, 8× the callers): Jain's fairness index of their
//! throughput while all are backlogged (target ≥ 0.95). Then four tenants with equal demand and
//! weights 1, 2, 3, 4: each tenant's share of the throughput against its weight's share
//! (target: within 10 % of it).

use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

use polygateway::{CallOptions, GatewayError};
use serde_json::{json, Value};

use crate::common::{jain, round, Bench};

/// The scenario's load.
pub struct Params {
    pub slots: usize,
    pub service: Duration,
    /// Callers of the 1× tenant (the others have 2, 4 and 8 times as many).
    pub base_callers: usize,
    /// Callers of each weighted tenant.
    pub weighted_callers: usize,
    /// Length of each half; throughput is counted over its last three quarters.
    pub duration: Duration,
}

/// What it measured.
pub struct Report {
    pub demand_throughput: Vec<f64>,
    pub jain_index: f64,
    pub weights: Vec<u32>,
    pub weight_shares: Vec<f64>,
    /// The largest |share − expected| / expected over the weighted tenants.
    pub worst_share_error: f64,
    pub errors: usize,
}

impl Report {
    pub fn json(&self) -> Value {
        let expected: u32 = self.weights.iter().sum();
        json!({
            "scenario": "tenants",
            "demand": [1, 2, 4, 8],
            "calls_per_s_by_tenant": self.demand_throughput.iter().map(|x| round(*x)).collect::<Vec<_>>(),
            "jain_index": round(self.jain_index),
            "jain_target": 0.95,
            "weights": self.weights,
            "shares": self.weight_shares.iter().map(|x| round(*x)).collect::<Vec<_>>(),
            "expected_shares": self.weights.iter().map(|w| round(f64::from(*w) / f64::from(expected))).collect::<Vec<_>>(),
            "worst_share_error": round(self.worst_share_error),
            "share_error_target": 0.1,
            "targets_met": self.jain_index >= 0.95 && self.worst_share_error <= 0.1,
            "errors": self.errors,
        })
    }
}

/// Run `callers[i]` closed-loop callers for tenant `i` (weight `weights[i]`) for `duration`;
/// each tenant's completions per second over the last three quarters, and the errors.
async fn contend(
    bench: &Arc<Bench>,
    callers: &[usize],
    weights: &[u32],
    duration: Duration,
) -> (Vec<f64>, usize) {
    let started = Instant::now();
    let from = duration / 4;
    let counts = Arc::new(Mutex::new(vec![0u64; callers.len()]));
    let errors = Arc::new(Mutex::new(0usize));
    let mut tasks = Vec::new();
    for (tenant, (&n, &weight)) in callers.iter().zip(weights).enumerate() {
        for _ in 0..n {
            let (bench, counts, errors) =
                (Arc::clone(bench), Arc::clone(&counts), Arc::clone(&errors));
            tasks.push(tokio::spawn(async move {
                let options = CallOptions::new()
                    .tenant_id(format!("tenant-{tenant}"))
                    .weight(weight);
                while started.elapsed() < duration {
                    match bench.call(options.clone()).await {
                        Ok(_) => {
                            let at = started.elapsed();
                            if at >= from && at <= duration {
                                counts.lock().unwrap()[tenant] += 1;
                            }
                        }
                        Err(_) => *errors.lock().unwrap() += 1,
                    }
                }
            }));
        }
    }
    for task in tasks {
        let _ = task.await;
    }
    let window = (duration - from).as_secs_f64();
    let rates = counts
        .lock()
        .unwrap()
        .iter()
        .map(|&c| c as f64 / window)
        .collect();
    let errors = *errors.lock().unwrap();
    (rates, errors)
}

pub async fn run(p: &Params) -> Result<Report, GatewayError> {
    let bench = Arc::new(Bench::start(p.slots, p.service).await?);
    let demand: Vec<usize> = [1, 2, 4, 8].iter().map(|m| m * p.base_callers).collect();
    let (demand_throughput, errors_a) = contend(&bench, &demand, &[1, 1, 1, 1], p.duration).await;
    let weights = vec![1, 2, 3, 4];
    let (rates, errors_b) = contend(&bench, &[p.weighted_callers; 4], &weights, p.duration).await;
    let total: f64 = rates.iter().sum();
    let weight_sum: u32 = weights.iter().sum();
    let weight_shares: Vec<f64> = rates.iter().map(|r| r / total.max(1e-9)).collect();
    let worst_share_error = weight_shares
        .iter()
        .zip(&weights)
        .map(|(share, &w)| {
            let expected = f64::from(w) / f64::from(weight_sum);
            (share - expected).abs() / expected
        })
        .fold(0.0, f64::max);
    if let Ok(bench) = Arc::try_unwrap(bench) {
        bench.shutdown().await;
    }
    Ok(Report {
        jain_index: jain(&demand_throughput),
        demand_throughput,
        weights,
        weight_shares,
        worst_share_error,
        errors: errors_a + errors_b,
    })
}
