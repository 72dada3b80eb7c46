//! Redis backends of the governance ports: the six-gate limiter ([`RedisGate`]), the per-source
//! breakers ([`RedisBreakers`]) and both at once for one attempt ([`RedisAttempts`]: one round
//! trip to admit, one to finish), shared by every process pointed at the same server and key
//! prefix. All state changes are single atomic Lua scripts (`lua/`) timed by the server clock.
//!
//! Failures surface as [`polygateway_actors::BackendError`]; the runtime fails closed on them
//! (docs/behaviour.md §10.6). Not for: the response cache, which degrades silently instead.

mod attempt;
mod breaker;
mod budget;
mod connection;
mod gate;
mod keys;

pub use attempt::RedisAttempts;
pub use breaker::RedisBreakers;
pub use connection::{RedisGovernance, RedisOptions};
pub use gate::RedisGate;
