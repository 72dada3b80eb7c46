//! Bounded versions of `examples/fairness`: the same scenario files, scaled down (fewer calls,
//! shorter runs), with thresholds tight enough that serving waiting calls in no order fails
//! them: without priority the interactive calls wait behind the batch queue (seconds), without
//! fair sharing the 8× tenant takes about half the throughput (Jain ≈ 0.6), and without FIFO
//! the p99/p50 of a steady overload spreads far beyond 2.
//!
//! They run in virtual time (`start_paused`: tokio's clock moves only when every task waits):
//! the queueing mock's service times, the gateway's timers and the callers' clocks advance
//! together, so the binary takes about a second (20 s of wall time, alone, in real time) and a
//! loaded machine cannot skew it.
//! Calls that end at the same virtual instant are the hard case for the order of turns: it is
//! how the tenants test found deficit round robin's refunds favouring the heavier tenants
//! (`policy/wait_queue.rs`). The thresholds are those of the real-time runs, unchanged.

#[path = "../examples/fairness/common.rs"]
mod common;
#[path = "../examples/fairness/deadlines.rs"]
mod deadlines;
#[path = "../examples/fairness/fifo.rs"]
mod fifo;
#[path = "../examples/fairness/priority.rs"]
mod priority;
#[path = "../examples/fairness/tenants.rs"]
mod tenants;

use std::time::Duration;

const SERVICE: Duration = Duration::from_millis(100);

#[tokio::test(start_paused = true)]
async fn interactive_calls_overtake_a_batch_flood() {
    let params = priority::Params {
        slots: 16,
        service: SERVICE,
        batch_calls: 600,
        batch_in_flight: 192,
        interactive_per_s: 5.0,
        idle_calls: 8,
    };
    let report = priority::run(&params).await.unwrap();
    let line = report.json();
    println!("{line}");
    assert_eq!(report.errors, 0, "{line}");
    assert!(report.interactive_calls >= 5, "{line}");
    // Behind the batch queue (≈ 176 calls ahead at 160/s) they would take > 1 s.
    assert!(
        report.interactive_p99_ms <= report.idle_p99_ms + 3.0 * 100.0,
        "{line}"
    );
    assert!(report.batch_goodput_ratio >= 0.6, "{line}");
}

#[tokio::test(start_paused = true)]
async fn tenants_share_by_weight_whatever_their_demand() {
    let params = tenants::Params {
        slots: 8,
        service: SERVICE,
        base_callers: 4,
        weighted_callers: 8,
        duration: Duration::from_secs(3),
    };
    let report = tenants::run(&params).await.unwrap();
    let line = report.json();
    println!("{line}");
    assert_eq!(report.errors, 0, "{line}");
    assert!(report.jain_index >= 0.85, "{line}");
    assert!(report.worst_share_error <= 0.3, "{line}");
}

#[tokio::test(start_paused = true)]
async fn one_class_in_overload_is_served_in_arrival_order() {
    let params = fifo::Params {
        slots: 8,
        service: SERVICE,
        callers: 64,
        duration: Duration::from_secs(3),
    };
    let report = fifo::run(&params).await.unwrap();
    let line = report.json();
    println!("{line}");
    assert_eq!(report.errors, 0, "{line}");
    assert!(report.calls >= 50, "{line}");
    assert!(report.ratio() <= 2.0, "{line}");
}

#[tokio::test(start_paused = true)]
async fn infeasible_deadlines_never_reach_the_upstream() {
    let params = deadlines::Params {
        slots: 8,
        service: SERVICE,
        queue_factor: 3,
        calls_each: 10,
        feasible: Duration::from_secs(20),
        infeasible: SERVICE / 2,
        every: Duration::from_millis(50),
    };
    let report = deadlines::run(&params).await.unwrap();
    let line = report.json();
    println!("{line}");
    assert_eq!(report.errors, 0, "{line}");
    assert_eq!(report.feasible_missed, 0, "{line}");
    assert_eq!(report.infeasible_refused, report.infeasible_calls, "{line}");
    assert_eq!(report.infeasible_reached_upstream, 0, "{line}");
}
