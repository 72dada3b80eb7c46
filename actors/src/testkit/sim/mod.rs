//! Deterministic simulation of governed calls (the FoundationDB / VOPR idea, at the scale of
//! one scope), through the production call driver.
//!
//! Every call runs `runtime::driver::run` — the driver every production call runs — with the
//! simulator's `CallEffects`: selection is the router's `Picker` over real `SourceShared`
//! values (real pacer slots, cooldown memos and the scope's `Notify`), admission and settlement
//! go through the production admission door over the memory gate and breakers (reached at once,
//! or over a simulated network: [`run_seed_over_network`]), each attempt feeds the real pacer
//! and health policies (`SourcePolicies`, what the source actor runs), and streaming calls emit
//! their deltas into a real `EventSink`. Only the world is simulated: a seeded fault process
//! behind a [`Transport`](crate::Transport) (what each upstream sends, read by a [`Wire`]: as it
//! was meant, or through the `polygateway` crate's decoders with [`run_seed_through`]), timers,
//! and a hand-rolled single-threaded executor in virtual time
//! ([`ManualClock`](crate::memory::ManualClock)). No tokio, no threads: one seed is one schedule, replayed exactly, and the
//! invariants listed in `ARCHITECTURE.md` ("Simulation") are checked at every step.
//!
//! What is modelled per seed: 1–4 sources with latency distributions, 429 bursts with and
//! without Retry-After (Anthropic's `rate_limit_error`, Gemini's `RESOURCE_EXHAUSTED` with its
//! `RetryInfo` delay: the same class), 503s with and without Retry-After, a 429 fault window (every answer pushes back) that ends,
//! an overload storm (Anthropic's `529 overloaded_error`: every answer a fast transient server
//! error without a hint, for a while), dead-key
//! windows that recover, black holes (cut by the attempt watchdog), mid-stream truncation, slow
//! first tokens, per-source and scope gates; the adaptive or AIMD pacer; a governance "backend
//! down" window (an admission actor restarting or Redis away: admits fail closed, the door
//! retries finishes a while and leaves the rest to the lease/probe TTLs); random caller cancellations at
//! any point (the call's future is dropped, as a caller drops it); streams cut after content,
//! some after a tool call's first piece, continued on another source that takes a prefill (half
//! the seeds, docs/behaviour.md §5.10). Not modelled: the actors'
//! mailboxes and restarts themselves (their effect on a call is the backend-down window).
//!
//! Files, one concern each: `report` (a seed's report and how it is run), `world` (the simulated
//! scope, assembled over the production pieces), `faults` (the fault world), `wire` (what an
//! upstream sends, and how a transport reads it), `transport` (a
//! source's simulated upstream), `governance` (the door's simulated backend), `tasks` (the
//! door's tasks and timers on the executor), `state` (the world's mutable state and books), `invariants`
//! (what is checked, and when), `effects` and `observer` (what the production driver asks and
//! tells), `executor` and `sleep` (virtual time), `params` (fixed parameters), `comparison`
//! (test builds: the simulator against the production runtime on scripted schedules).

#[cfg(test)]
mod comparison;
mod effects;
mod executor;
mod faults;
mod governance;
mod invariants;
mod observer;
mod params;
mod report;
mod sleep;
mod state;
mod tasks;
mod transport;
mod wire;
mod world;

pub use report::{run_seed, run_seed_over_network, run_seed_through, SeedReport};
pub use wire::{meant, Attempt, Failure, Read, Sent, Wire};
