//! Sans-I/O governance policies: deterministic state machines that take time (`now`) and
//! randomness as arguments and never perform I/O, so each is unit-testable with exact values.
//!
//! One file per policy. The actors hold them; the memory backends wrap
//! [`breaker::BreakerMachine`], [`limiter::LimiterState`] and [`budget::BudgetLedger`] behind the ports. Not for: storage,
//! waiting, or anything that talks to the network.

pub mod adaptive_pacer;
pub(crate) mod backoff;
pub mod breaker;
pub mod budget;
pub(crate) mod health;
pub mod limiter;
pub mod pacer;
pub mod reserve;
pub mod select;
pub(crate) mod stall;
pub mod wait_queue;
