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

/// The maps the memory backends look up on every attempt (the limiter's scopes, sources and
/// leases; the breakers by scope and source), hashed with foldhash instead of std's SipHash: the
/// keys are the gateway's own names and random lease ids, and SipHash of them was a few thousand
/// instructions of every request (issue #48). foldhash is hashbrown's own default hasher,
/// seeded per process.
pub(crate) type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
