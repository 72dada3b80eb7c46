//! Fairness: the order in which waiting calls are served (issue #30; docs/behaviour.md §5.7),
//! on a queueing upstream of known capacity (the capacity mock: `--slots` requests at once,
//! `--service-ms` each, the rest queued). One JSON line per scenario, with its targets:
//!
//! - `priority`: a batch flood and an interactive trickle (`priority.rs`);
//! - `tenants`: unequal demand and unequal weights within one class (`tenants.rs`);
//! - `fifo`: one class in steady overload (`fifo.rs`);
//! - `deadlines`: feasible and infeasible deadlines under load (`deadlines.rs`);
//! - `budget`: a spend budget worth N calls, 10 N offered (`budget.rs`, docs/behaviour.md §5.8).
//!
//! ```text
//! cargo run --release --example fairness -- [--scenario NAME] [--slots 32] [--service-ms 100]
//! ```
//!
//! The mock runs in the same process on the same cores.

mod budget;
mod common;
mod deadlines;
mod fifo;
mod priority;
mod tenants;

use std::time::Duration;

use clap::Parser;

#[derive(Parser)]
struct Args {
    /// Run only this scenario (priority, tenants, fifo, deadlines, budget); all by default.
    #[arg(long)]
    scenario: Option<String>,
    /// Requests the upstream serves at once.
    #[arg(long, default_value_t = 32)]
    slots: usize,
    /// Time per request once served, in milliseconds.
    #[arg(long, default_value_t = 100)]
    service_ms: u64,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let service = Duration::from_millis(args.service_ms);
    let slots = args.slots;
    let wanted = |name: &str| args.scenario.as_deref().is_none_or(|s| s == name);
    if wanted("priority") {
        let params = priority::Params {
            slots,
            service,
            batch_calls: 2000,
            batch_in_flight: 512,
            interactive_per_s: 5.0,
            idle_calls: 20,
        };
        println!("{}", priority::run(&params).await?.json());
    }
    if wanted("tenants") {
        let params = tenants::Params {
            slots,
            service,
            base_callers: slots / 2,
            weighted_callers: slots,
            duration: Duration::from_secs(8),
        };
        println!("{}", tenants::run(&params).await?.json());
    }
    if wanted("fifo") {
        let params = fifo::Params {
            slots,
            service,
            callers: 8 * slots,
            duration: Duration::from_secs(8),
        };
        println!("{}", fifo::run(&params).await?.json());
    }
    if wanted("deadlines") {
        let params = deadlines::Params {
            slots,
            service,
            queue_factor: 4,
            calls_each: 50,
            feasible: Duration::from_secs(10),
            infeasible: service / 2,
            every: Duration::from_millis(50),
        };
        println!("{}", deadlines::run(&params).await?.json());
    }
    if wanted("budget") {
        println!("{}", budget::run(50, 32).await);
    }
    Ok(())
}
