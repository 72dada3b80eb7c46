//! `fifo`: one class, one tenant, steady overload (`callers` closed-loop callers on an upstream
//! serving `slots` at once). Calls get their turn in arrival order, so every caller waits about
//! as long: caller p99/p50 (target ≤ 1.5).

use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

use polygateway::{CallOptions, GatewayError};
use serde_json::{json, Value};

use crate::common::{percentile_ms, round, Bench};

/// The scenario's load.
pub struct Params {
    pub slots: usize,
    pub service: Duration,
    pub callers: usize,
    /// Calls that start in the first quarter are left out (the queue is still forming).
    pub duration: Duration,
}

/// What it measured.
pub struct Report {
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub calls: usize,
    pub errors: usize,
}

impl Report {
    pub fn ratio(&self) -> f64 {
        self.p99_ms / self.p50_ms.max(1e-9)
    }

    pub fn json(&self) -> Value {
        json!({
            "scenario": "fifo",
            "caller_p50_ms": round(self.p50_ms),
            "caller_p99_ms": round(self.p99_ms),
            "p99_over_p50": round(self.ratio()),
            "ratio_target": 1.5,
            "targets_met": self.ratio() <= 1.5,
            "calls": self.calls,
            "errors": self.errors,
        })
    }
}

pub async fn run(p: &Params) -> Result<Report, GatewayError> {
    let bench = Arc::new(Bench::start(p.slots, p.service).await?);
    let started = Instant::now();
    let from = p.duration / 4;
    let took = Arc::new(Mutex::new(Vec::new()));
    let errors = Arc::new(Mutex::new(0usize));
    let duration = p.duration;
    let tasks: Vec<_> = (0..p.callers)
        .map(|_| {
            let (bench, took, errors) =
                (Arc::clone(&bench), Arc::clone(&took), Arc::clone(&errors));
            tokio::spawn(async move {
                while started.elapsed() < duration {
                    let began = started.elapsed();
                    match bench.call(CallOptions::new().tenant_id("one")).await {
                        Ok(d) if began >= from => took.lock().unwrap().push(d),
                        Ok(_) => {}
                        Err(_) => *errors.lock().unwrap() += 1,
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        let _ = task.await;
    }
    let took = std::mem::take(&mut *took.lock().unwrap());
    let errors = *errors.lock().unwrap();
    if let Ok(bench) = Arc::try_unwrap(bench) {
        bench.shutdown().await;
    }
    Ok(Report {
        p50_ms: percentile_ms(&took, 0.5),
        p99_ms: percentile_ms(&took, 0.99),
        calls: took.len(),
        errors,
    })
}
