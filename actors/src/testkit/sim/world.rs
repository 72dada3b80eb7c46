//! The simulated scope ([`World`]): the seed's sources, faults and governance, assembled over the
//! production pieces and the memory backends on a virtual clock.

use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::clock::Clock;
use crate::memory::{ManualClock, MemoryBreakers, MemoryGate};
use crate::policy::adaptive_pacer::AdaptivePacer;
use crate::policy::pacer::{AimdPacer, Pacer};
use crate::policy::reserve::BatchReserve;
use crate::policy::select::{Candidate, LeastInflight, Selector};
use crate::policy::wait_queue::Priority;
use crate::ports::attempt::ComposedAttempts;
use crate::ports::breaker::{BreakerBackend, BreakerConfig};
use crate::ports::gate::{GateBackend, Limits};
use crate::runtime::admission::Door;
use crate::runtime::metrics::{ScopeMetrics, SourceMetrics};
use crate::runtime::source::{PacerFactory, SourcePolicies};
use crate::runtime::waiting_room::WaitingRoom;
use crate::runtime::{ScopeConfig, SourceShared};
use futures::FutureExt;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::faults::Faults;
use super::governance::SimAttempts;
use super::params::{Ms, GOVERNANCE_TIMEOUT, SCOPE};
use super::state::{lock, CallBook, State};
use super::tasks::{SimTasks, Spawned};
use super::transport::SimTransport;
/// The simulated scope: its sources and governance, shared by every call of the seed.
pub(super) struct World {
    pub(super) state: Arc<Mutex<State>>,
    pub(super) clock: Arc<ManualClock>,
    pub(super) base: Instant,
    pub(super) config: ScopeConfig,
    pub(super) sources: Vec<Arc<SourceShared<SimTransport>>>,
    pub(super) policies: Mutex<Vec<SourcePolicies>>,
    pub(super) picker: Mutex<(Box<dyn Selector>, SmallRng, Vec<Candidate>)>,
    pub(super) gate: Arc<MemoryGate>,
    pub(super) breakers: Arc<MemoryBreakers>,
    /// The production door over the simulated backend ([`SimAttempts`]).
    pub(super) door: Arc<Door>,
    /// Work the door spawned, for the executor to adopt.
    pub(super) spawned: Spawned,
    pub(super) metrics: ScopeMetrics,
    /// The scope's waiting room (the production one, sleeping in virtual time); its sources tell
    /// it when a pacer slot is freed.
    pub(super) room: Arc<WaitingRoom>,
    /// Per call, when it arrives and when its caller gives up (if it does).
    pub(super) arrivals: Vec<(Ms, Option<Ms>)>,
    /// Hedged first tokens, when the seed turns them on (`config.hedge`).
    pub(super) hedging: Option<crate::runtime::hedge::Hedging>,
    /// Continuation of cut streams, when the seed turns it on (`config.continuation`).
    pub(super) continuing: Option<crate::runtime::continuation::Continuing>,
}

impl World {
    /// The scope and fault schedule drawn from `seed`; its governance backend answers at once, or
    /// `over_network`, after a round trip drawn from the seed.
    pub(super) fn new(seed: u64, calls: u32, keep_trace: bool, over_network: bool) -> Self {
        let mut rng = SmallRng::seed_from_u64(seed);
        let n = rng.random_range(1..=4usize);
        let mut config = ScopeConfig::new(SCOPE);
        config.max_attempts = rng.random_range(1..=4);
        config.backoff_base = Duration::from_millis(rng.random_range(50..=1_000));
        config.backoff_max = Duration::from_millis(rng.random_range(1_000..=8_000));
        config.quota_full_fails_fast = rng.random_bool(0.3);
        config.circuit_open_waits = rng.random_bool(0.5);
        config.stall_window = Duration::from_millis(rng.random_range(2_000..=60_000));
        config.poll_interval = Duration::from_millis(rng.random_range(100..=1_000));
        config.lease_ttl = Duration::from_secs(60);
        config.global = Limits {
            max_concurrency: if rng.random_bool(0.3) {
                rng.random_range(1..=6)
            } else {
                0
            },
            rpm: if rng.random_bool(0.2) {
                rng.random_range(20..=300)
            } else {
                0
            },
            tpm: if rng.random_bool(0.1) {
                rng.random_range(500..=5_000)
            } else {
                0
            },
        };
        // Half the seeds leave batch calls a share of every gate (`BACKPRESSURE__BATCH_RESERVE`).
        let share = if rng.random_bool(0.5) {
            rng.random_range(0.1..=0.5)
        } else {
            0.0
        };
        config.batch_reserve = BatchReserve::new(share).expect("within the allowed range");
        let horizon: Ms = u64::from(calls) * rng.random_range(20..=400);
        let mut faults = Vec::new();
        let mut specs = Vec::new();
        let mut opens = Vec::new();
        for _ in 0..n {
            let fault_rate = [0.0, 0.05, 0.3, 0.8][rng.random_range(0..4usize)];
            let dead = rng.random_bool(0.25).then(|| {
                let from = rng.random_range(0..=horizon.max(1));
                (from, from + rng.random_range(1_000..=120_000))
            });
            let pushback = rng.random_bool(0.3).then(|| {
                let from = rng.random_range(0..=horizon.max(1));
                (from, from + rng.random_range(500..=30_000))
            });
            // Drawn from a generator of its own, so the rest of every seed's schedule stays
            // what it was before overload storms were modelled.
            let mut storms = SmallRng::seed_from_u64(seed ^ 0x0529_0529 ^ faults.len() as u64);
            let overloaded = storms.random_bool(0.25).then(|| {
                let from = storms.random_range(0..=horizon.max(1));
                (from, from + storms.random_range(500..=20_000))
            });
            let breaker = BreakerConfig {
                fail_threshold: rng.random_range(1..=6),
                cooldown: Duration::from_millis(rng.random_range(500..=30_000)),
                max_cooldown: Duration::from_secs(60),
                probe_ttl: Duration::from_secs(30),
                min_calls: rng.random_range(3..=10),
                ..BreakerConfig::default()
            };
            let limits = Limits {
                max_concurrency: if rng.random_bool(0.4) {
                    rng.random_range(1..=4)
                } else {
                    0
                },
                rpm: if rng.random_bool(0.2) {
                    rng.random_range(10..=200)
                } else {
                    0
                },
                tpm: 0,
            };
            // The production default (adaptive, open until the first sign of strain), adaptive
            // from a small start (`PACER__START`) so the pacer is the obstacle now and then, or
            // AIMD.
            let start = rng.random_range(1..=8u32);
            let kind = rng.random_range(0..10u32);
            opens.push(kind < 3);
            let pacer: PacerFactory = if kind < 3 {
                Arc::new(move |l: &Limits| {
                    Box::new(AdaptivePacer::open(l.max_concurrency)) as Box<dyn Pacer>
                })
            } else if kind < 7 {
                Arc::new(move |l: &Limits| {
                    Box::new(AdaptivePacer::new(start, l.max_concurrency)) as Box<dyn Pacer>
                })
            } else {
                Arc::new(move |l: &Limits| {
                    Box::new(AimdPacer::with_bounds(
                        f64::from(start),
                        l.max_concurrency.max(8),
                    )) as Box<dyn Pacer>
                })
            };
            faults.push(Faults {
                latency: (rng.random_range(1..=50), rng.random_range(50..=3_000)),
                slow_first_token: fault_rate * 0.2,
                transient: fault_rate * 0.4,
                rate_limited: fault_rate * rng.random_range(0.0..0.6),
                retry_after: rng.random_range(0.0..1.0),
                black_hole: fault_rate * 0.05,
                truncate: fault_rate * 0.1,
                rejected: 0.01,
                invalid: 0.01,
                dead,
                pushback,
                overloaded,
                prefill: false,
            });
            specs.push((breaker, limits, pacer));
        }
        // Continuation from a generator of its own, so the seed's schedule stays what it was.
        let mut continues = SmallRng::seed_from_u64(seed ^ 0x0c0a_7147);
        let continuing = continues.random_bool(0.5);
        config.continuation = crate::runtime::ContinueConfig {
            enabled: continuing,
        };
        for f in &mut faults {
            f.prefill = continues.random_bool(0.7);
            if continuing {
                // Cut streams are what these seeds are about: more of them.
                f.truncate = f.truncate * 4.0 + 0.05;
            }
        }
        let backend_down = rng.random_bool(0.2).then(|| {
            let from = rng.random_range(0..=horizon.max(1));
            (from, from + rng.random_range(100..=20_000))
        });
        let attempt_timeout = rng.random_range(1_000..=20_000);
        let mut arrivals = Vec::new();
        let mut books = Vec::new();
        for c in 0..calls as usize {
            let arrival = rng.random_range(0..=horizon);
            let streaming = rng.random_bool(0.3);
            let cancel_at = rng
                .random_bool(0.15)
                .then(|| arrival + rng.random_range(0..=20_000));
            arrivals.push((arrival, cancel_at));
            let priority = [
                Priority::Interactive,
                Priority::Normal,
                Priority::Normal,
                Priority::Batch,
            ][rng.random_range(0..4usize)];
            let tenant = [None, Some("a"), Some("b")][rng.random_range(0..3usize)].map(Arc::from);
            let weight = rng.random_range(1..=3);
            let deadline = rng
                .random_bool(0.3)
                .then(|| arrival + rng.random_range(200..=30_000));
            books.push(CallBook {
                priority,
                tenant,
                weight,
                deadline,
                ..CallBook::new(seed.wrapping_mul(31).wrapping_add(c as u64), streaming, n)
            });
        }
        let mut state = State::new(
            rng,
            faults,
            attempt_timeout,
            backend_down,
            books,
            keep_trace,
        );
        for (book, open) in state.pacer.iter_mut().zip(opens) {
            book.open = open;
        }
        let picker = (
            Box::new(LeastInflight) as Box<dyn Selector>,
            SmallRng::seed_from_u64(seed ^ 0x5e1e_c702),
            Vec::new(),
        );
        // Hedging from a generator of its own, so the draws above stay what they were per seed.
        let mut hedges = SmallRng::seed_from_u64(seed ^ 0x4ed6_e047);
        if hedges.random_bool(0.5) {
            config.hedge = crate::runtime::HedgeConfig {
                enabled: true,
                floor: Duration::from_millis(hedges.random_range(10..=200)),
                ceiling: Duration::from_millis(hedges.random_range(200..=3_000)),
                budget: [0.05, 0.2, 1.0][hedges.random_range(0..3usize)],
            };
        }
        // Over a network, the round trip comes from a generator of its own, so the draws above
        // stay what they were per seed and the seed's schedule is the in-memory one's.
        let round_trip =
            over_network.then(|| SmallRng::seed_from_u64(seed ^ 0x0d00_2bac).random_range(1..=20));
        World::assemble(state, config, specs, picker, arrivals, round_trip)
    }

    /// The scope over `specs` (breaker, limits, pacer per source), its governance on the memory
    /// backends (reached in `round_trip`, or at once) and a fresh virtual clock.
    pub(super) fn assemble(
        mut state: State,
        config: ScopeConfig,
        specs: Vec<(BreakerConfig, Limits, PacerFactory)>,
        picker: (Box<dyn Selector>, SmallRng, Vec<Candidate>),
        arrivals: Vec<(Ms, Option<Ms>)>,
        round_trip: Option<Ms>,
    ) -> Self {
        let clock = Arc::new(ManualClock::new());
        let base = clock.now();
        let room = Arc::new(WaitingRoom::new(clock.clone()));
        state.backend_round_trip = round_trip;
        let state = Arc::new(Mutex::new(state));
        let mut sources = Vec::new();
        let mut policies = Vec::new();
        for (index, (breaker, limits, pacer)) in specs.into_iter().enumerate() {
            let name: Arc<str> = format!("s{index}").into();
            let initial = pacer(&limits).limit();
            // The first observation is judged against the limit the pacer started with.
            lock(&state).pacer[index].last = Some(initial);
            let shared = Arc::new(SourceShared::new(
                index,
                Arc::clone(&name),
                Arc::new(SimTransport {
                    index,
                    state: Arc::clone(&state),
                }),
                breaker,
                limits,
                100,
                initial,
                base,
                Arc::clone(&room),
                SourceMetrics::new(SCOPE, &name),
            ));
            policies.push(SourcePolicies::start(&pacer, &shared));
            sources.push(shared);
        }
        let gate = Arc::new(MemoryGate::new(clock.clone()));
        let breakers = Arc::new(MemoryBreakers::new(clock.clone()));
        let attempts = SimAttempts {
            inner: ComposedAttempts::new(
                Arc::clone(&gate) as Arc<dyn GateBackend>,
                Arc::clone(&breakers) as Arc<dyn BreakerBackend>,
            ),
            breakers: Arc::clone(&breakers) as Arc<dyn BreakerBackend>,
            state: Arc::clone(&state),
            round_trip,
            sources: sources.iter().map(|s| Arc::clone(&s.name)).collect(),
        };
        let spawned = Spawned::default();
        let tasks = SimTasks {
            state: Arc::clone(&state),
            spawned: Arc::clone(&spawned),
        };
        let door = Arc::new(Door::new(
            Arc::new(attempts),
            Arc::clone(&gate) as Arc<dyn GateBackend>,
            GOVERNANCE_TIMEOUT,
            Arc::new(tasks),
        ));
        let config_hedge = config.hedge.clone();
        let continuing = crate::runtime::continuation::Continuing::of(SCOPE, &config.continuation);
        World {
            continuing,
            state,
            clock,
            base,
            picker: Mutex::new(picker),
            config,
            sources,
            policies: Mutex::new(policies),
            gate,
            breakers,
            door,
            spawned,
            metrics: ScopeMetrics::new(SCOPE),
            room,
            arrivals,
            hedging: crate::runtime::hedge::Hedging::of(SCOPE, &config_hedge),
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Move the virtual clock (the memory backends and the cooldown memos read it).
    pub(super) fn advance_to(&self, t: Ms) {
        let mut state = self.lock();
        if t > state.now {
            self.clock.advance(Duration::from_millis(t - state.now));
            state.now = t;
        }
    }

    /// A governance call the memory backends answer on their first poll.
    pub(super) fn at_once<R>(future: impl Future<Output = R>) -> R {
        future
            .now_or_never()
            .expect("the memory backends answer without waiting")
    }
}
