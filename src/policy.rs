//! The adaptive policies a user can swap: the per-source pacer (how many attempts a source may
//! have in flight) and the selector (which eligible source an attempt goes to), with the ones
//! that ship; and the supervision options (restart policy, clock) of the runtime underneath.
//!
//! Install them with [`GatewayBuilder::pacer`](crate::GatewayBuilder::pacer),
//! [`GatewayBuilder::selector`](crate::GatewayBuilder::selector) and
//! [`GatewayBuilder::runtime_options`](crate::GatewayBuilder::runtime_options). Policies are
//! sans-I/O: time and randomness come in as arguments, so a custom one is tested without a
//! runtime. Not here: the breaker and limiter transitions (behind the ports of [`crate::ports`],
//! configured through [`crate::config`]).
//!
//! ```
//! use polygateway::policy::{AdaptivePacer, Pacer, PacerObservation};
//! use polygateway::ports::AttemptVerdict;
//! let mut pacer = AdaptivePacer::new(4, 64);
//! pacer.observe(&PacerObservation::new(AttemptVerdict::RateLimited, std::time::Instant::now()));
//! assert!(pacer.limit() < 4);
//! ```

pub use polygateway_actors::policy::adaptive_pacer::AdaptivePacer;
pub use polygateway_actors::policy::pacer::{
    AimdPacer, Pacer, PacerObservation, PacerSignal, RateLimitHint, Unpaced,
};
pub use polygateway_actors::policy::select::{
    Candidate, HealthAware, LeastInflight, RoundRobin, Selector,
};
pub use polygateway_actors::runtime::{PacerFactory, RestartPolicy, RuntimeOptions};
