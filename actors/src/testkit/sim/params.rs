//! The simulation's fixed parameters and its unit of virtual time ([`Ms`], [`ms`]).

use std::time::Duration;

/// Virtual milliseconds since the start of the seed.
pub(super) type Ms = u64;

pub(super) const SCOPE: &str = "sim";
/// The door's bound on a backend call the backend does not bound itself (the progress clock's):
/// long against the simulated round trips, so only a backend that never answers meets it.
pub(super) const GOVERNANCE_TIMEOUT: Duration = Duration::from_secs(1);
/// How long every attempt of a scripted schedule takes.
pub(super) const SCRIPT_LATENCY: Ms = 10;
/// Past this many steps a seed is a runaway (a call loops without time passing).
pub(super) const STEP_LIMIT: u64 = 2_000_000;
/// Successes after a 429 fault window that could grow the pacer (half its limit in flight; counted
/// from the last cut, if a later signal cut again) within which it must have grown from its
/// lowest limit since the window began (unless the window never brought it below its pre-window
/// limit).
pub(super) const RECOVERY_SUCCESSES: u32 = 40;
/// The oscillation band: one observation moves a pacer's limit at most down to half
/// ([`DEEPEST_CUT`]: the adaptive pacer's cuts are clamped to ×0.5, AIMD halves) and at most up
/// by [`STEEPEST_RISE`] (the adaptive pacer's slow-start gain; AIMD adds less).
pub(super) const DEEPEST_CUT: f64 = 0.5;
pub(super) const STEEPEST_RISE: u32 = 2;
/// The stream delta that is a tool call's first piece (every other delta is text).
pub(super) const TOOL_DELTA: u64 = u64::MAX;

pub(super) fn ms(d: Duration) -> Ms {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
