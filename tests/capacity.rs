//! Bounded versions of `examples/capacity.rs`: the three regimes and the cold start, scaled down
//! (fewer callers, shorter runs, debug build) with thresholds tight enough that the old AIMD
//! pacer or a wrong signal fails them.
//!
//! They run in virtual time (`start_paused`: tokio's clock moves only when every task waits), so
//! the mock upstream's service times, the gateway's timers and the drivers' clocks advance
//! together, and a loaded machine can no longer make an answer look late: the binary took 41 s
//! of wall time alone in CI, it takes about 8 s of CPU beside the other tests now. Scales and
//! thresholds are those of the real-time runs, kept so the assertions are unchanged; the
//! figures the comments quote were measured in real time (the example still runs there).

use std::time::Duration;

use polygateway::policy::PacerSignal;
use polygateway_testkit::capacity::{run_cold_start, run_scenario, CapacityReport, Scenario};
use polygateway_testkit::mock_capacity::Regime;

const RUN: Duration = Duration::from_secs(4);

fn show(report: &CapacityReport) -> String {
    let limits: Vec<String> = report
        .sources
        .iter()
        .map(|s| format!("{}={}({})", s.name, s.pacer_limit, s.pacer_signal.as_str()))
        .collect();
    format!(
        "{} {} first failure: {:?}",
        report.json(),
        limits.join(" "),
        report.first_error
    )
}

#[tokio::test(start_paused = true)]
async fn unlimited_upstream_grows_past_the_old_hidden_ceiling() {
    // 500 ms answers (the example uses 200 ms): the same 160 callers per source at 640 calls/s
    // instead of 1,600, which a debug build sustains on half a loaded machine, and a scheduler's
    // delay on such a machine (tens of ms, in the mock as much as in the gateway: they share the
    // process) stays far below the 1.25x that counts as queueing. At 200 ms, beside a parallel
    // cargo build, the pacer rightly saw 234 ms answers as a queue and cut.
    let scenario = Scenario::unlimited(Duration::from_millis(500));
    let report = run_scenario(&scenario, 320, Duration::from_secs(6), "adaptive")
        .await
        .unwrap();
    let why = show(&report);
    println!("{why}");
    assert_eq!(report.errors, 0, "{why}");
    // 160 callers per source: the old pacer stopped at 64 each, which here is at most 256 of
    // 640 calls/s (goodput 0.4). Beside a parallel cargo build this setup measured 0.79–0.99.
    assert!(report.sources.iter().all(|s| s.pacer_limit > 64), "{why}");
    assert!(report.goodput_ratio() >= 0.5, "{why}");
    assert!(
        report
            .sources
            .iter()
            .all(|s| s.pacer_signal == PacerSignal::None),
        "a busy host was mistaken for a queue: {why}"
    );
}

#[tokio::test(start_paused = true)]
async fn rate_limited_upstream_is_found_with_and_without_headers() {
    // Most refusals are slow start's overshoot, a large part of so short a run; an unpaced
    // client here is refused on most attempts.
    for (headers, max_refused) in [(true, 0.15), (false, 0.3)] {
        let scenario = Scenario::rate_limited(200, Duration::from_millis(100), headers);
        let report = run_scenario(&scenario, 256, RUN, "adaptive").await.unwrap();
        let why = format!("headers {headers}: {}", show(&report));
        println!("{why}");
        assert_eq!(report.errors, 0, "{why}");
        assert!(report.goodput_ratio() >= 0.7, "{why}");
        assert!(report.rate_limited_share <= max_refused, "{why}");
    }
}

#[tokio::test(start_paused = true)]
async fn queueing_upstream_keeps_its_queue_short() {
    // 16 slots per source (the example's 64, scaled to what a debug build sustains).
    let scenario = Scenario {
        regime: Regime::Queueing {
            slots: 16,
            service: Duration::from_millis(100),
        },
        ideal_calls_per_s: Some(320.0),
        ..Scenario::queueing(Duration::from_millis(100))
    };
    let report = run_scenario(&scenario, 256, RUN, "adaptive").await.unwrap();
    let why = show(&report);
    println!("{why}");
    assert_eq!(report.errors, 0, "{why}");
    assert!(report.goodput_ratio() >= 0.7, "{why}");
    // 100 ms of service; unpaced, 128 callers per source would wait 800 ms in its queue. Half
    // of that is the bound: beside a parallel cargo build the paced queue measured 254 ms (the
    // in-process mock's own timers run late there), and the release benchmark
    // (`examples/capacity.rs`) carries the tight figure.
    assert!(report.upstream_p50_ms <= 400.0, "{why}");
    assert!(
        report
            .sources
            .iter()
            .any(|s| s.pacer_signal == PacerSignal::Queueing),
        "{why}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_cold_start_makes_no_call_wait_for_the_pacer() {
    // 256 callers at once at a fresh gateway whose upstream answers in 500 ms whatever the
    // concurrency: the default (open) pacer has seen no strain, so no call waits for a slot.
    let service = Duration::from_millis(500);
    let window = Duration::from_secs(3);
    let open = run_cold_start(256, service, window, "adaptive")
        .await
        .unwrap();
    println!("{}", open.json());
    assert_eq!(open.errors, 0, "{}", open.json());
    assert!(open.calls >= 256, "{}", open.json());
    assert_eq!(open.pacer_waits, 0, "{}", open.json());
    // The original library's AIMD pacer (start 8) on the same cold start does make calls wait:
    // what the assertion above rules out is what a learning pacer costs.
    let aimd = run_cold_start(256, service, window, "aimd").await.unwrap();
    println!("{}", aimd.json());
    assert!(aimd.pacer_waits > 0, "{}", aimd.json());
}
