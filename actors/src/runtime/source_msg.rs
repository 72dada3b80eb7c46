//! What a source actor hears: its own file so the values the router reads (`shared.rs`), which
//! send it, and the actor (`source.rs`), which reads them, do not import each other.

use crate::policy::pacer::PacerObservation;

/// Messages of a source actor.
#[derive(Debug)]
pub(crate) enum SourceMsg {
    /// One attempt finished.
    Report(PacerObservation),
    /// Chaos hook: make the actor fail, to exercise supervision (test builds only).
    #[cfg(feature = "testkit")]
    Crash(String),
}
