//! `priority`: a batch tenant floods the upstream (`batch_calls` calls, `batch_in_flight` at
//! once) while an interactive tenant sends `interactive_per_s` calls per second. The
//! interactive calls' p50/p99 are compared with the same calls on the idle upstream, and the
//! batch goodput with the upstream's capacity. Targets: interactive p99 ≤ idle p99 + one
//! service time; batch goodput ≥ 0.9 of capacity.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

use polygateway::types::Priority;
use polygateway::{CallOptions, GatewayError};
use serde_json::{json, Value};

use crate::common::{percentile_ms, round, Bench};

/// The scenario's load.
pub struct Params {
    pub slots: usize,
    pub service: Duration,
    pub batch_calls: usize,
    pub batch_in_flight: usize,
    pub interactive_per_s: f64,
    /// Interactive calls measured on the idle upstream first.
    pub idle_calls: usize,
}

/// What it measured.
pub struct Report {
    pub capacity_per_s: f64,
    pub idle_p50_ms: f64,
    pub idle_p99_ms: f64,
    pub interactive_p50_ms: f64,
    pub interactive_p99_ms: f64,
    pub interactive_calls: usize,
    pub batch_goodput_ratio: f64,
    pub service_ms: f64,
    pub errors: usize,
}

impl Report {
    /// Interactive p99 within one service time of the idle p99.
    pub fn interactive_target_met(&self) -> bool {
        self.interactive_p99_ms <= self.idle_p99_ms + self.service_ms
    }

    pub fn json(&self) -> Value {
        json!({
            "scenario": "priority",
            "capacity_per_s": round(self.capacity_per_s),
            "interactive_idle_p50_ms": round(self.idle_p50_ms),
            "interactive_idle_p99_ms": round(self.idle_p99_ms),
            "interactive_p50_ms": round(self.interactive_p50_ms),
            "interactive_p99_ms": round(self.interactive_p99_ms),
            "interactive_p99_target_ms": round(self.idle_p99_ms + self.service_ms),
            "interactive_calls": self.interactive_calls,
            "batch_goodput_ratio": round(self.batch_goodput_ratio),
            "batch_goodput_target": 0.9,
            "targets_met": self.interactive_target_met() && self.batch_goodput_ratio >= 0.9,
            "errors": self.errors,
        })
    }
}

fn interactive() -> CallOptions {
    CallOptions::new()
        .tenant_id("web")
        .priority(Priority::Interactive)
}

/// Interactive calls at `per_s` until `stop` says so (or `count` were sent); their durations.
async fn interactive_calls(
    bench: &Arc<Bench>,
    per_s: f64,
    count: Option<usize>,
    stop: Arc<AtomicUsize>,
) -> (Vec<Duration>, usize) {
    let mut tasks = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / per_s));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if stop.load(Ordering::Acquire) > 0 || count.is_some_and(|c| tasks.len() >= c) {
            break;
        }
        let bench = Arc::clone(bench);
        tasks.push(tokio::spawn(async move { bench.call(interactive()).await }));
    }
    let (mut took, mut errors) = (Vec::new(), 0);
    for task in tasks {
        match task.await {
            Ok(Ok(d)) => took.push(d),
            _ => errors += 1,
        }
    }
    (took, errors)
}

pub async fn run(p: &Params) -> Result<Report, GatewayError> {
    let bench = Arc::new(Bench::start(p.slots, p.service).await?);
    let never = Arc::new(AtomicUsize::new(0));
    let (idle, idle_errors) =
        interactive_calls(&bench, p.interactive_per_s, Some(p.idle_calls), never).await;

    // The flood: `batch_in_flight` workers share `batch_calls` calls.
    let next = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(Mutex::new(Vec::new()));
    let batch_errors = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let workers: Vec<_> = (0..p.batch_in_flight)
        .map(|_| {
            let (bench, next, done, errors) = (
                Arc::clone(&bench),
                Arc::clone(&next),
                Arc::clone(&done),
                Arc::clone(&batch_errors),
            );
            let total = p.batch_calls;
            tokio::spawn(async move {
                while next.fetch_add(1, Ordering::AcqRel) < total {
                    let options = CallOptions::new()
                        .tenant_id("etl")
                        .priority(Priority::Batch);
                    match bench.call(options).await {
                        Ok(_) => done.lock().unwrap().push(started.elapsed()),
                        Err(_) => {
                            errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            })
        })
        .collect();
    // Interactive traffic while the batch runs (it starts once the upstream is saturated).
    let flood_over = Arc::new(AtomicUsize::new(0));
    tokio::time::sleep(p.service).await;
    let interactive = tokio::spawn({
        let (bench, stop) = (Arc::clone(&bench), Arc::clone(&flood_over));
        let per_s = p.interactive_per_s;
        async move { interactive_calls(&bench, per_s, None, stop).await }
    });
    for worker in workers {
        let _ = worker.await;
    }
    flood_over.store(1, Ordering::Release);
    let (loaded, loaded_errors) = interactive.await.unwrap_or_default();
    let done = std::mem::take(&mut *done.lock().unwrap());
    let last = done.iter().max().copied().unwrap_or_default();
    let batch_rate = done.len() as f64 / last.as_secs_f64().max(1e-9);
    let report = Report {
        capacity_per_s: bench.capacity_per_s(),
        idle_p50_ms: percentile_ms(&idle, 0.5),
        idle_p99_ms: percentile_ms(&idle, 0.99),
        interactive_p50_ms: percentile_ms(&loaded, 0.5),
        interactive_p99_ms: percentile_ms(&loaded, 0.99),
        interactive_calls: loaded.len(),
        batch_goodput_ratio: batch_rate / bench.capacity_per_s(),
        service_ms: p.service.as_secs_f64() * 1e3,
        errors: idle_errors + loaded_errors + batch_errors.load(Ordering::Relaxed),
    };
    if let Ok(bench) = Arc::try_unwrap(bench) {
        bench.shutdown().await;
    }
    Ok(report)
}
