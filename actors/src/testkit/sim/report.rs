//! What one seed reports ([`SeedReport`]) and how it is run ([`run_seed`]).

use std::rc::Rc;
use std::sync::Arc;

use super::executor::Executor;
use super::wire::Wire;
use super::world::World;
/// The result of one simulated seed.
///
/// ```
/// use polygateway_actors::testkit::sim::run_seed;
/// let report = run_seed(42, 20, false);
/// assert_eq!(report.calls, 20);
/// assert!(report.violations.is_empty(), "{:?}", report.violations);
/// ```
#[derive(Debug, Clone)]
pub struct SeedReport {
    /// The seed.
    pub seed: u64,
    /// Calls simulated.
    pub calls: u32,
    /// The governance backend's round trip ([`run_seed_over_network`]); `None` in memory.
    pub network_round_trip_ms: Option<u64>,
    /// Machine steps taken (all calls).
    pub steps: u64,
    /// Broken invariants, each naming the call, the virtual time and what was wrong.
    pub violations: Vec<String>,
    /// Hash of every action of every call, with its virtual time: equal for equal seeds.
    pub trace_hash: u64,
    /// With `keep_trace`, the events of the first call that broke an invariant (else empty).
    pub trace: Vec<String>,
    /// Pacer observations made (all sources).
    pub pacer_observations: u64,
    /// Fault windows after which a pacer's recovery was checked.
    pub recoveries_checked: u32,
    /// First sends of calls that had waited in the scope's waiting room (each checked against
    /// the room's order).
    pub room_turns_checked: u32,
    /// Sends of calls with a deadline (each checked against it).
    pub deadline_sends_checked: u32,
    /// Attempts answered by an overload storm (`529 overloaded_error`).
    pub overloaded_answers: u32,
    /// Finishes the door held back and the scope's next admission carried
    /// ([`run_seed_over_network`]).
    pub carried_finishes: u64,
    /// Tasks the door spawned on the simulator's executor: backend work that had to wait, held
    /// finishes sent on their own, and admissions completed after their caller went away.
    pub door_tasks: u64,
    /// Admissions granted after their call's deadline, given back unsent (attempts, hedges and
    /// continuations; [`run_seed_over_network`]).
    pub given_back: u64,
    /// Hedges of first tokens sent (seeds with hedging on), each checked against the budget.
    pub hedges: u64,
    /// Continuations of cut streams sent (seeds with continuation on), each checked: never
    /// after a tool-call delta, never on the cut source, only on a source that takes a prefill.
    pub continuations: u64,
    /// Answers the seed's wire read ([`run_seed_through`]), each checked against what was meant.
    pub answers_read: u64,
}

/// Simulate `calls` calls under the fault schedule drawn from `seed`, with the governance backend
/// in memory (it answers in its first poll). `keep_trace` records a readable trace (slower; for
/// replaying a failing seed).
///
/// ```
/// use polygateway_actors::testkit::sim::run_seed;
/// // Replay is exact: the same seed gives the same trace.
/// assert_eq!(run_seed(7, 10, false).trace_hash, run_seed(7, 10, false).trace_hash);
/// ```
pub fn run_seed(seed: u64, calls: u32, keep_trace: bool) -> SeedReport {
    run(seed, calls, World::new(seed, calls, keep_trace, false))
}

/// [`run_seed`] with the governance backend reached over a simulated network: each backend call
/// takes a round trip (1–20 ms, drawn from the seed) and the backend carries finishes, so the
/// door holds successes for the scope's next admission, sends the rest from tasks of its own and
/// completes admissions whose caller went away. The waiting room's order is not checked here
/// (ARCHITECTURE.md, "The call machine and the simulator"); every other invariant is.
///
/// ```
/// use polygateway_actors::testkit::sim::run_seed_over_network;
/// let report = run_seed_over_network(7, 50, false);
/// assert!(report.violations.is_empty(), "{:?}", report.violations);
/// assert!((1..=20).contains(&report.network_round_trip_ms.unwrap()));
/// assert_eq!(report.room_turns_checked, 0);
/// ```
pub fn run_seed_over_network(seed: u64, calls: u32, keep_trace: bool) -> SeedReport {
    run(seed, calls, World::new(seed, calls, keep_trace, true))
}

/// [`run_seed`] (or, `over_network`, [`run_seed_over_network`]) with the sources' transports
/// reading what their upstreams send through `wire`: each attempt's answer, as the fault process
/// planned it, is what `wire` reads of it ([`Wire::read`]), and a reading that is not what was
/// meant ([`meant`](super::meant)) is a violation. The `polygateway` crate's wire reads them
/// through its production decoders; this crate's own test gives it one that misreads.
///
/// ```
/// use std::sync::Arc;
/// use polygateway_actors::testkit::sim::{meant, run_seed, run_seed_through, Attempt, Read, Sent, Wire};
/// /// Reads every answer right.
/// #[derive(Debug)]
/// struct Right;
/// impl Wire for Right {
///     fn read(&self, sent: Sent, attempt: &Attempt) -> Read {
///         meant(sent, attempt.streaming)
///     }
/// }
/// let through = run_seed_through(7, 50, false, false, Arc::new(Right));
/// assert!(through.violations.is_empty(), "{:?}", through.violations);
/// assert_eq!(through.trace_hash, run_seed(7, 50, false).trace_hash);
/// ```
pub fn run_seed_through(
    seed: u64,
    calls: u32,
    over_network: bool,
    keep_trace: bool,
    wire: Arc<dyn Wire>,
) -> SeedReport {
    let world = World::new(seed, calls, keep_trace, over_network);
    world.lock().wire = wire;
    run(seed, calls, world)
}

fn run(seed: u64, calls: u32, world: World) -> SeedReport {
    let world = Rc::new(world);
    Executor::new(Rc::clone(&world)).run();
    world.check_quiescent();
    let mut state = world.lock();
    let trace = state
        .violations
        .first()
        .map(|(call, _)| state.calls[*call].trace.clone())
        .unwrap_or_default();
    SeedReport {
        seed,
        calls,
        network_round_trip_ms: state.backend_round_trip,
        steps: state.steps,
        violations: std::mem::take(&mut state.violations)
            .into_iter()
            .map(|(_, v)| v)
            .collect(),
        trace_hash: state.hash,
        trace,
        pacer_observations: state.pacer.iter().map(|p| p.observations).sum(),
        recoveries_checked: state.recoveries_checked,
        room_turns_checked: state.room_turns_checked,
        deadline_sends_checked: state.deadline_sends_checked,
        overloaded_answers: state.overloaded_answers,
        carried_finishes: state.carried_finishes,
        door_tasks: state.door_tasks,
        given_back: state.given_back,
        hedges: state.calls.iter().map(|c| u64::from(c.hedges)).sum(),
        continuations: state.calls.iter().map(|c| u64::from(c.continuations)).sum(),
        answers_read: state.answers_read,
    }
}
