//! `deadlines`: while background callers keep the upstream saturated (a queue of about
//! `queue_factor` service times), calls arrive with feasible deadlines (far longer than the
//! queue) and infeasible ones (shorter than one service time: no attempt could end in time).
//! Targets: no feasible deadline missed, and every infeasible call refused with
//! `deadline_exceeded` without reaching the upstream.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use polygateway::{CallOptions, GatewayError, UnavailableReason};
use serde_json::{json, Value};

use crate::common::{round, Bench};

/// The scenario's load.
pub struct Params {
    pub slots: usize,
    pub service: Duration,
    /// Background callers per slot (the queue is about this many service times, less one).
    pub queue_factor: usize,
    /// Calls of each kind, sent alternately.
    pub calls_each: usize,
    pub feasible: Duration,
    pub infeasible: Duration,
    /// Between two deadline calls.
    pub every: Duration,
}

/// What it measured.
pub struct Report {
    pub feasible_calls: usize,
    pub feasible_missed: usize,
    pub infeasible_calls: usize,
    pub infeasible_refused: usize,
    /// Upstream requests beyond the calls that were answered: infeasible calls that got sent.
    pub infeasible_reached_upstream: i64,
    pub feasible_s: f64,
    pub infeasible_s: f64,
    pub errors: usize,
}

impl Report {
    pub fn targets_met(&self) -> bool {
        self.feasible_missed == 0
            && self.infeasible_refused == self.infeasible_calls
            && self.infeasible_reached_upstream == 0
    }

    pub fn json(&self) -> Value {
        json!({
            "scenario": "deadlines",
            "feasible_deadline_s": round(self.feasible_s),
            "infeasible_deadline_s": round(self.infeasible_s),
            "feasible_calls": self.feasible_calls,
            "feasible_missed": self.feasible_missed,
            "infeasible_calls": self.infeasible_calls,
            "infeasible_refused": self.infeasible_refused,
            "infeasible_reached_upstream": self.infeasible_reached_upstream,
            "targets_met": self.targets_met(),
            "errors": self.errors,
        })
    }
}

pub async fn run(p: &Params) -> Result<Report, GatewayError> {
    let bench = Arc::new(Bench::start(p.slots, p.service).await?);
    let reached_before = bench.reached();
    let stop = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicU64::new(0));
    let background_errors = Arc::new(AtomicU64::new(0));
    let background: Vec<_> = (0..p.slots * p.queue_factor)
        .map(|_| {
            let (bench, stop, answered, errors) = (
                Arc::clone(&bench),
                Arc::clone(&stop),
                Arc::clone(&answered),
                Arc::clone(&background_errors),
            );
            tokio::spawn(async move {
                while !stop.load(Ordering::Acquire) {
                    match bench.call(CallOptions::new().tenant_id("load")).await {
                        Ok(_) => answered.fetch_add(1, Ordering::Relaxed),
                        Err(_) => errors.fetch_add(1, Ordering::Relaxed),
                    };
                }
            })
        })
        .collect();
    // Let the queue form.
    tokio::time::sleep(p.service * (p.queue_factor as u32 + 1)).await;
    let mut calls = Vec::new();
    for i in 0..2 * p.calls_each {
        let feasible = i % 2 == 0;
        let deadline = if feasible { p.feasible } else { p.infeasible };
        let bench = Arc::clone(&bench);
        calls.push(tokio::spawn(async move {
            let options = CallOptions::new().tenant_id("deadlines").deadline(deadline);
            (feasible, deadline, bench.call(options).await)
        }));
        tokio::time::sleep(p.every).await;
    }
    let mut report = Report {
        feasible_calls: 0,
        feasible_missed: 0,
        infeasible_calls: 0,
        infeasible_refused: 0,
        infeasible_reached_upstream: 0,
        feasible_s: p.feasible.as_secs_f64(),
        infeasible_s: p.infeasible.as_secs_f64(),
        errors: 0,
    };
    let mut deadline_answers = 0u64;
    for call in calls {
        let Ok((feasible, deadline, result)) = call.await else {
            report.errors += 1;
            continue;
        };
        if result.is_ok() {
            deadline_answers += 1;
        }
        if feasible {
            report.feasible_calls += 1;
            if !result.is_ok_and(|took| took <= deadline) {
                report.feasible_missed += 1;
            }
        } else {
            report.infeasible_calls += 1;
            let refused = matches!(&result, Err(e) if e.unavailable().is_some_and(|u| u.reason == UnavailableReason::DeadlineExceeded));
            if refused {
                report.infeasible_refused += 1;
            }
        }
    }
    stop.store(true, Ordering::Release);
    for task in background {
        let _ = task.await;
    }
    let reached = bench.reached() - reached_before;
    report.infeasible_reached_upstream =
        reached as i64 - (answered.load(Ordering::Relaxed) + deadline_answers) as i64;
    report.errors += background_errors.load(Ordering::Relaxed) as usize;
    if let Ok(bench) = Arc::try_unwrap(bench) {
        bench.shutdown().await;
    }
    Ok(report)
}
