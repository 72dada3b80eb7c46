//! Redis backends of the governance ports: the six-gate limiter ([`RedisGate`]) and the per-source
//! breakers ([`RedisBreakers`]), shared by every process pointed at the same server and key
//! prefix. All state changes are single atomic Lua scripts (`lua/`) timed by the server clock.
//!
//! Failures surface as [`polygateway_actors::BackendError`]; the runtime fails closed on them
//! (docs/behaviour.md §10.6). Not for: the response cache, which degrades silently instead.

mod breaker;
mod connection;
mod gate;
mod keys;

pub use breaker::RedisBreakers;
pub use connection::{RedisGovernance, RedisOptions};
pub use gate::RedisGate;
