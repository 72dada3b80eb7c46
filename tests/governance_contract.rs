//! The governance backend contract (tests/contract) run against the in-memory backends.
//! The memory backends read the tokio clock, so time-based cases run in virtual time (tokio's
//! paused clock); the two concurrency cases run on two worker threads, in real time.

mod contract;

use std::sync::Arc;
use std::time::Duration;

use polygateway_actors::memory::{MemoryBreakers, MemoryGate};
use polygateway_actors::{ComposedAttempts, TokioClock};

use contract::short_breaker_config;

#[tokio::test(start_paused = true)]
async fn memory_gate_rejection_has_no_side_effects() {
    contract::gate_contract_rejection_has_no_side_effects(&MemoryGate::default(), "MEM").await;
}

#[tokio::test(start_paused = true)]
async fn memory_gate_settle_adjusts_admission_window() {
    contract::gate_contract_settle_adjusts_admission_window(&MemoryGate::default(), "MEM").await;
}

#[tokio::test(start_paused = true)]
async fn memory_gate_lease_expiry_reclaims_slot() {
    contract::gate_contract_lease_expiry_reclaims_slot(&MemoryGate::default(), "MEM").await;
}

#[tokio::test(start_paused = true)]
async fn memory_gate_window_rollover_resets_quota() {
    let window = Duration::from_secs(1);
    let gate = MemoryGate::with_window(Arc::new(TokioClock), window);
    contract::gate_contract_window_rollover_resets_quota(&gate, "MEM", window).await;
}

#[tokio::test(start_paused = true)]
async fn memory_gate_release_and_settle_idempotent() {
    contract::gate_contract_release_and_settle_idempotent(&MemoryGate::default(), "MEM").await;
}

#[tokio::test(start_paused = true)]
async fn memory_gate_progress_freshness() {
    contract::gate_contract_progress_freshness(&MemoryGate::default(), "MEM").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_gate_concurrent_admissions_respect_limits() {
    contract::gate_contract_concurrent_admissions_respect_limits(&MemoryGate::default(), "MEM")
        .await;
}

#[tokio::test(start_paused = true)]
async fn memory_breaker_consecutive_failures_open() {
    let c = short_breaker_config();
    contract::breaker_contract_consecutive_failures_open(&MemoryBreakers::default(), "MEM", &c)
        .await;
}

#[tokio::test(start_paused = true)]
async fn memory_breaker_rate_channel_and_health_suppression() {
    let c = short_breaker_config();
    let b = MemoryBreakers::default();
    contract::breaker_contract_rate_channel_and_health_suppression(&b, "MEM", &c).await;
}

#[tokio::test(start_paused = true)]
async fn memory_breaker_force_open() {
    let c = short_breaker_config();
    contract::breaker_contract_force_open(&MemoryBreakers::default(), "MEM", &c).await;
}

#[tokio::test(start_paused = true)]
async fn memory_breaker_retry_after_values() {
    let c = short_breaker_config();
    contract::breaker_contract_retry_after_values(&MemoryBreakers::default(), "MEM", &c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_breaker_half_open_single_probe() {
    let c = short_breaker_config();
    contract::breaker_contract_half_open_single_probe(&MemoryBreakers::default(), "MEM", &c).await;
}

#[tokio::test(start_paused = true)]
async fn memory_breaker_probe_lease_expiry() {
    let c = short_breaker_config();
    contract::breaker_contract_probe_lease_expiry(&MemoryBreakers::default(), "MEM", &c).await;
}

#[tokio::test(start_paused = true)]
async fn memory_breaker_failed_probes_grow_cooldown() {
    let c = short_breaker_config();
    let b = MemoryBreakers::default();
    contract::breaker_contract_failed_probes_grow_cooldown(&b, "MEM", &c).await;
}

#[tokio::test(start_paused = true)]
async fn memory_breaker_epoch_fencing() {
    let c = short_breaker_config();
    contract::breaker_contract_epoch_fencing(&MemoryBreakers::default(), "MEM", &c).await;
}

/// Run one attempt case on in-memory gate and breakers composed into the attempt port.
macro_rules! memory_attempt_contract {
    ($($test:ident => $case:ident),* $(,)?) => {$(
        #[tokio::test(start_paused = true)]
        async fn $test() {
            let gate = Arc::new(MemoryGate::default());
            let breakers = Arc::new(MemoryBreakers::default());
            let attempts = ComposedAttempts::new(gate.clone(), breakers.clone());
            let store = contract::AttemptStore {
                attempts: &attempts,
                gate: gate.as_ref(),
                breakers: breakers.as_ref(),
            };
            contract::$case(&store, "MEM", &short_breaker_config()).await;
        }
    )*};
}

memory_attempt_contract! {
    memory_attempt_success_settles_releases_and_marks_progress =>
        attempt_contract_success_settles_releases_and_marks_progress,
    memory_attempt_open_breaker_spends_no_quota_and_probe_decides =>
        attempt_contract_open_breaker_spends_no_quota_and_probe_decides,
    memory_attempt_failures_open_and_force_open => attempt_contract_failures_open_and_force_open,
    memory_attempt_finish_reports_the_breaker_it_leaves =>
        attempt_contract_finish_reports_the_breaker_it_leaves,
    memory_attempt_carried_finishes_apply_before_the_admission =>
        attempt_contract_carried_finishes_apply_before_the_admission,
}

/// Run one budget case of the contract suite on a fresh memory gate.
macro_rules! memory_budget_contract {
    ($($test:ident => $case:ident),* $(,)?) => {$(
        #[tokio::test(start_paused = true)]
        async fn $test() {
            contract::$case(&MemoryGate::default(), "MEM").await;
        }
    )*};
}

memory_budget_contract! {
    memory_budget_reserve_and_settle_refund => budget_contract_reserve_and_settle_refund,
    memory_budget_settle_charges_and_overshoot_is_bounded =>
        budget_contract_settle_charges_and_overshoot_is_bounded,
    memory_budget_exhaustion_counts_nothing => budget_contract_exhaustion_counts_nothing,
    memory_budget_window_reset => budget_contract_window_reset,
    memory_budget_lease_expiry => budget_contract_lease_expiry,
    memory_budget_concurrent_reservations_respect_the_limit =>
        budget_contract_concurrent_reservations_respect_the_limit,
}
