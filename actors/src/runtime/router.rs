//! The scope router: one per scope. It selects a source for each attempt and supervises the
//! scope's source actors.
//!
//! Selection runs inside the handler over values the source actors publish
//! ([`SourceShared`](crate::runtime::SourceShared)): no round trip, no I/O, a few hundred nanoseconds. Picking a source also
//! takes its pacer slot (`SourceTicket`), so two concurrent selections can never both overshoot
//! the pacer limit. Source actors that fail are restarted with backoff under an intensity limit;
//! past the limit the router itself fails, escalating to the runtime supervisor, and every call of
//! the scope gets a clear error instead of hanging.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef, SupervisionEvent};
use rand::rngs::SmallRng;
use rand::SeedableRng;
use tokio::sync::oneshot;

use crate::clock::Clock;
use crate::policy::select::{Candidate, Selector};

use super::error::RuntimeError;
use super::restart::{stopped_child, RestartBudget, RestartDecision, RestartPolicy};
use super::shared::{SourceShared, SourceTicket};
use super::source::{SourceActor, SourceArgs};
use super::source_msg::SourceMsg;

/// The result of a selection.
#[derive(Debug)]
pub(crate) enum Selection<T> {
    /// This source, with its pacer slot held.
    Picked(SourceTicket<T>),
    /// Nothing eligible right now.
    NoneEligible {
        /// The scope has no sources at all.
        no_sources: bool,
        /// Earliest end of a local cooldown among the sources not excluded by the caller.
        earliest_cooling: Option<Instant>,
        /// Some source was skipped only because its pacer was full, below the source's own
        /// concurrency limit (the pacer's own backpressure).
        paced: bool,
        /// Some source was skipped only because its calls in flight reached its configured
        /// concurrency limit (`MAX_CONCURRENCY`): a quota, which `QUOTA_FULL=fail_fast` does not
        /// wait for (its concurrency gate would refuse the attempt anyway).
        capped: bool,
    },
}

/// Messages of a scope router.
pub(crate) enum RouterMsg<T> {
    /// Pick a source. `exclude`: refused in this round; `avoid`: just failed (used only when
    /// nothing else is eligible).
    Select {
        /// Hard exclusions (indexes).
        exclude: Vec<usize>,
        /// Soft exclusion.
        avoid: Option<usize>,
        /// Where the answer goes.
        reply: oneshot::Sender<Selection<T>>,
    },
    /// Chaos hook: make source `index` fail (test builds only).
    #[cfg(feature = "testkit")]
    CrashSource(usize, String),
    /// Restart a failed source actor (sent to itself after the backoff).
    Respawn(usize),
}

impl<T> std::fmt::Debug for RouterMsg<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RouterMsg::Select { exclude, avoid, .. } => f
                .debug_struct("Select")
                .field("exclude", exclude)
                .field("avoid", avoid)
                .finish(),
            #[cfg(feature = "testkit")]
            RouterMsg::CrashSource(i, r) => write!(f, "CrashSource({i}, {r})"),
            RouterMsg::Respawn(i) => write!(f, "Respawn({i})"),
        }
    }
}

/// Arguments of a router.
pub(crate) struct RouterArgs<T> {
    /// Scope name.
    pub(crate) scope: Arc<str>,
    /// One entry per source.
    pub(crate) sources: Vec<SourceArgs<T>>,
    /// The selection policy.
    pub(crate) selector: Box<dyn Selector>,
    /// Restart policy of the source actors.
    pub(crate) restart: RestartPolicy,
    /// Time.
    pub(crate) clock: Arc<dyn Clock>,
}

/// The scope router actor.
pub(crate) struct ScopeRouter<T> {
    _transport: std::marker::PhantomData<fn() -> T>,
}

impl<T> Default for ScopeRouter<T> {
    fn default() -> Self {
        Self {
            _transport: std::marker::PhantomData,
        }
    }
}

struct SourceChild<T> {
    args: SourceArgs<T>,
    actor: Option<ActorRef<SourceMsg>>,
    budget: RestartBudget,
}

/// State of a router.
pub(crate) struct RouterState<T> {
    scope: Arc<str>,
    children: Vec<SourceChild<T>>,
    by_id: HashMap<ActorId, usize>,
    selector: Box<dyn Selector>,
    clock: Arc<dyn Clock>,
    rng: SmallRng,
    candidates: Vec<Candidate>,
}

impl<T: Send + Sync + 'static> ScopeRouter<T> {
    async fn spawn_source(
        myself: &ActorRef<RouterMsg<T>>,
        state: &mut RouterState<T>,
        index: usize,
    ) -> Result<(), ActorProcessingErr> {
        let args = state.children[index].args.clone();
        let (actor, _) =
            Actor::spawn_linked(None, SourceActor::<T>::default(), args, myself.get_cell()).await?;
        state.by_id.insert(actor.get_id(), index);
        state.children[index]
            .args
            .shared
            .actor_slot()
            .set(actor.clone());
        state.children[index].actor = Some(actor);
        Ok(())
    }

    fn select(state: &mut RouterState<T>, exclude: &[usize], avoid: Option<usize>) -> Selection<T> {
        let now = state.clock.now();
        let mut pick = Picker {
            selector: state.selector.as_mut(),
            rng: &mut state.rng,
            candidates: &mut state.candidates,
        };
        pick.select(
            state.children.iter().map(|c| &c.args.shared),
            now,
            exclude,
            avoid,
        )
    }
}

/// The selection decision over the sources' published values, shared by the router actor and
/// the simulator: skip the excluded, the cooling and the full pacers, prefer any other source
/// over `avoid`, let the selector choose, and take the chosen source's pacer slot.
pub(crate) struct Picker<'a> {
    /// The selection policy.
    pub(crate) selector: &'a mut dyn Selector,
    /// Its random source.
    pub(crate) rng: &'a mut SmallRng,
    /// A buffer reused across selections (no allocation per pick).
    pub(crate) candidates: &'a mut Vec<Candidate>,
}

impl Picker<'_> {
    /// Select among `sources` (in index order) at `now`.
    pub(crate) fn select<'s, T: 's>(
        &mut self,
        sources: impl ExactSizeIterator<Item = &'s Arc<SourceShared<T>>> + Clone,
        now: Instant,
        exclude: &[usize],
        avoid: Option<usize>,
    ) -> Selection<T> {
        if sources.len() == 0 {
            return Selection::NoneEligible {
                no_sources: true,
                earliest_cooling: None,
                paced: false,
                capped: false,
            };
        }
        let mut earliest_cooling: Option<Instant> = None;
        let mut paced = false;
        let mut capped = false;
        self.candidates.clear();
        for s in sources.clone() {
            let excluded = exclude.contains(&s.index);
            let cooling = s.cooling_until(now);
            if let (false, Some(until)) = (excluded, cooling) {
                earliest_cooling = Some(earliest_cooling.map_or(until, |e| e.min(until)));
            }
            let in_flight = s.in_flight();
            let has_slot = in_flight < s.pacer_limit();
            if !excluded && cooling.is_none() && !has_slot {
                let cap = s.limits.max_concurrency;
                if cap > 0 && in_flight >= cap {
                    capped = true;
                } else {
                    paced = true;
                }
            }
            self.candidates.push(Candidate {
                index: s.index,
                health: s.health(),
                in_flight,
                eligible: !excluded && cooling.is_none() && has_slot,
            });
        }
        let eligible_other = self
            .candidates
            .iter()
            .any(|c| c.eligible && Some(c.index) != avoid);
        if let (true, Some(a)) = (eligible_other, avoid) {
            self.candidates[a].eligible = false;
        }
        let picked = self.selector.select(self.candidates, self.rng);
        if let Some(index) = picked {
            if let Some(ticket) = sources.clone().nth(index).and_then(|s| s.try_enter()) {
                return Selection::Picked(ticket);
            }
            paced = true;
        }
        Selection::NoneEligible {
            no_sources: false,
            earliest_cooling,
            paced,
            capped,
        }
    }
}

impl<T: Send + Sync + 'static> Actor for ScopeRouter<T> {
    type Msg = RouterMsg<T>;
    type State = RouterState<T>;
    type Arguments = RouterArgs<T>;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: RouterArgs<T>,
    ) -> Result<Self::State, ActorProcessingErr> {
        let mut state = RouterState {
            scope: args.scope,
            children: args
                .sources
                .into_iter()
                .map(|a| SourceChild {
                    args: a,
                    actor: None,
                    budget: RestartBudget::new(args.restart),
                })
                .collect(),
            by_id: HashMap::new(),
            selector: args.selector,
            clock: args.clock,
            rng: SmallRng::from_rng(&mut rand::rng()),
            candidates: Vec::new(),
        };
        for index in 0..state.children.len() {
            Self::spawn_source(&myself, &mut state, index).await?;
        }
        Ok(state)
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            RouterMsg::Select {
                exclude,
                avoid,
                reply,
            } => {
                // A caller that went away drops its ticket with the unsent answer.
                let _ = reply.send(Self::select(state, &exclude, avoid));
            }
            #[cfg(feature = "testkit")]
            RouterMsg::CrashSource(index, reason) => {
                if let Some(actor) = state.children.get(index).and_then(|c| c.actor.as_ref()) {
                    let _ = actor.cast(SourceMsg::Crash(reason));
                }
            }
            RouterMsg::Respawn(index) => {
                if index < state.children.len() && state.children[index].actor.is_none() {
                    Self::spawn_source(&myself, state, index).await?;
                    tracing::info!(scope = %state.scope, source = %state.children[index].args.shared.name, "source actor restarted");
                }
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let Some((cell, why)) = stopped_child(event) else {
            return Ok(());
        };
        let Some(index) = state.by_id.remove(&cell.get_id()) else {
            return Ok(());
        };
        let now = state.clock.now();
        let child = &mut state.children[index];
        child.actor = None;
        let name = child.args.shared.name.clone();
        child
            .args
            .shared
            .actor_slot()
            .set_down(RuntimeError::Restarting {
                actor: format!("source actor {name}"),
                cause: why.clone(),
            });
        match child.budget.on_failure(now) {
            RestartDecision::Restart(delay) => {
                tracing::warn!(scope = %state.scope, source = %name, reason = %why, ?delay, "source actor failed; restarting");
                let me = myself.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(delay).await;
                    let _ = me.cast(RouterMsg::Respawn(index));
                });
                Ok(())
            }
            RestartDecision::Escalate => {
                tracing::error!(scope = %state.scope, source = %name, reason = %why, "source actor exceeded its restart intensity; escalating");
                Err(format!(
                    "source actor {name} of scope {} exceeded its restart intensity (last failure: {why})",
                    state.scope
                )
                .into())
            }
        }
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        for child in &state.children {
            if let Some(actor) = &child.actor {
                actor.stop(None);
            }
        }
        Ok(())
    }
}
