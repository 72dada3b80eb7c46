//! The `budget` scenario of `examples/fairness` (issue #30, docs/behaviour.md §5.8): a scope
//! spend budget worth `n` calls, `10 n` calls offered by `callers` concurrent callers on the
//! capacity mock (a queueing upstream: 8 slots, 20 ms each). Reports how many calls were admitted
//! and answered, how many the budget refused, and the spend against the budget — read back from
//! the gate (`Gateway::budgets`) and summed from the answers' `cost`.
//!
//! The mock answers 5 prompt + 1 completion tokens; at 1 per million tokens either way a call
//! costs 6 micro-units, and `EST_TOKENS=6` estimates it exactly, so the target is: admitted = `n`,
//! spent = budget (no overshoot), and the upstream served exactly the admitted calls.
//!
//! `examples/fairness/main.rs` calls [`run`] and prints its line; `tests/budget.rs` runs it
//! bounded.

use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

use futures::StreamExt;
use polygateway::{Gateway, Message, UnavailableReason};
use polygateway_testkit::mock_capacity::{CapacityMock, Regime};
use polygateway_testkit::mock_settings;
use serde_json::{json, Value};

/// Cost of one mock answer in micro-units (6 tokens at 1 per million).
const CALL_MICROS: u64 = 6;

/// One run of the scenario; the JSON line's fields are documented in the module docs.
///
/// # Panics
/// If the gateway cannot be built (a broken test kit), or the temporary price file cannot be
/// written.
pub async fn run(n: u64, callers: usize) -> Value {
    let mock = CapacityMock::start(Regime::Queueing {
        slots: 8,
        service: Duration::from_millis(20),
    })
    .await;
    let dir = tempfile::tempdir().expect("temporary directory");
    let prices = dir.path().join("prices.json");
    std::fs::write(
        &prices,
        r#"{"test-model": {"input_per_1m": 1.0, "output_per_1m": 1.0}}"#,
    )
    .expect("price file");
    let limit = (n * CALL_MICROS) as f64 / 1e6;
    let budget = format!("{limit}/day");
    let settings = mock_settings(
        &[("LLM", &mock.base_url())],
        &[
            ("LLM__OPENAI__1__EST_TOKENS", "6"),
            ("LLM__OPENAI__1__TIMEOUT_S", "30"),
            ("LLM__BUDGET", &budget),
            ("PGW_PRICING_PATH", prices.to_str().expect("utf-8 path")),
        ],
    );
    let gw = Arc::new(
        Gateway::from_settings(settings, "LLM")
            .await
            .expect("gateway"),
    );
    let offered = 10 * n;
    let started = Instant::now();
    let results: Vec<_> = futures::stream::iter(0..offered)
        .map(|i| {
            let gw = Arc::clone(&gw);
            async move { gw.chat(vec![Message::user(format!("call {i}"))]).await }
        })
        .buffer_unordered(callers.max(1))
        .collect()
        .await;
    let wall_s = started.elapsed().as_secs_f64();
    let (mut admitted, mut refused, mut other) = (0u64, 0u64, 0u64);
    let mut answered_cost = 0.0;
    for r in &results {
        match r {
            Ok(answer) => {
                admitted += 1;
                answered_cost += answer.cost.unwrap_or(0.0);
            }
            Err(e)
                if e.unavailable().map(|u| u.reason)
                    == Some(UnavailableReason::BudgetExhausted) =>
            {
                refused += 1;
            }
            Err(_) => other += 1,
        }
    }
    let spent = gw
        .budgets()
        .await
        .ok()
        .and_then(|b| b.into_iter().find(|b| b.name == "scope:LLM"))
        .map_or(f64::NAN, |b| b.spent);
    if let Ok(gw) = Arc::try_unwrap(gw) {
        gw.shutdown().await;
    }
    json!({
        "scenario": "budget",
        "budget_calls": n,
        "offered": offered,
        "callers": callers,
        "admitted": admitted,
        "refused_budget": refused,
        "other_errors": other,
        "upstream_served": mock.stats().served,
        "budget": limit,
        "spent": spent,
        "answered_cost": answered_cost,
        "spent_over_budget": spent / limit,
        "wall_s": wall_s,
    })
}
