//! The simulator's own executor: one call as a caller makes it ([`one_call`]) and the
//! single-threaded virtual-time loop that runs them and the door's background work, so one seed
//! is one schedule.

use std::cmp::Reverse;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::task::{Context, Wake, Waker};
use std::time::Duration;

use crate::clock::Clock;
use crate::ports::transport::EventSink;
use crate::runtime::driver;
use crate::runtime::GovernOptions;

use super::effects::SimCall;
use super::observer::SimObserver;
use super::params::{ms, Ms, STEP_LIMIT};
use super::state::Timer;
use super::transport::SimRequest;
use super::world::World;
/// One call, as a caller makes it: a streaming call brings its consumer.
pub(super) async fn one_call(world: Rc<World>, call: usize) {
    let streaming = world.lock().calls[call].streaming;
    let request = SimRequest {
        call,
        streaming,
        continues_from: None,
    };
    let (sink, _consumer) = match streaming {
        true => {
            let (sink, consumer) = EventSink::channel(64);
            (Some(sink), Some(consumer))
        }
        false => (None, None),
    };
    let options = {
        let state = world.lock();
        let c = &state.calls[call];
        GovernOptions {
            priority: c.priority,
            deadline: c
                .deadline
                .map(|d| Duration::from_millis(d.saturating_sub(state.now))),
            tenant: c.tenant.clone(),
            weight: c.weight,
            ..GovernOptions::default()
        }
    };
    let effects = SimCall {
        world: Rc::clone(&world),
        call,
    };
    let observer = SimObserver {
        state: Arc::clone(&world.state),
        sources: world
            .sources
            .iter()
            .map(|s| (Arc::clone(&s.name), ms(s.breaker.cooldown)))
            .collect(),
        call,
    };
    let result = driver::run(&effects, &request, &observer, sink.as_ref(), options).await;
    world.finished(call, &result);
}

/// Wakes one task: its index goes on the executor's ready queue.
pub(super) struct TaskWaker {
    pub(super) task: usize,
    pub(super) ready: Arc<Mutex<VecDeque<usize>>>,
}

impl Wake for TaskWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.ready
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_back(self.task);
    }
}

/// A task in progress: a call (the driver's future) or the door's background work.
pub(super) type Running = Pin<Box<dyn Future<Output = ()>>>;

/// The single-threaded virtual-time executor: it polls the woken tasks in the order they were
/// woken, and when none is ready moves the clock to the next timer (ties in the order they were
/// set). Nothing else decides the order, so a seed replays exactly. Tasks `0..calls` are the
/// calls; the door's background work is numbered after them, in the order it was spawned.
pub(super) struct Executor {
    pub(super) world: Rc<World>,
    pub(super) ready: Arc<Mutex<VecDeque<usize>>>,
    pub(super) running: Vec<Option<Running>>,
    pub(super) wakers: Vec<Waker>,
    calls: usize,
}

impl Executor {
    pub(super) fn new(world: Rc<World>) -> Self {
        let ready = Arc::new(Mutex::new(VecDeque::new()));
        let calls = world.arrivals.len();
        {
            let mut state = world.lock();
            for (call, &(arrival, cancel)) in world.arrivals.iter().enumerate() {
                state.timer(arrival, Timer::Start(call));
                if let Some(at) = cancel {
                    state.timer(at, Timer::Cancel(call));
                }
            }
        }
        let wakers = (0..calls)
            .map(|task| {
                Waker::from(Arc::new(TaskWaker {
                    task,
                    ready: Arc::clone(&ready),
                }))
            })
            .collect();
        Self {
            world,
            ready,
            running: (0..calls).map(|_| None).collect(),
            wakers,
            calls,
        }
    }

    pub(super) fn run(&mut self) {
        loop {
            while let Some(call) = self.next_ready() {
                self.poll(call);
            }
            let next = {
                let mut state = self.world.lock();
                if state.steps > STEP_LIMIT {
                    let call = state.calls.iter().position(|c| !c.done).unwrap_or(0);
                    state.violation(call, format!("runaway: more than {STEP_LIMIT} steps"));
                    return;
                }
                state.timers.pop().map(|Reverse((at, seq))| {
                    let timer = state.timer_payloads.remove(&seq);
                    (at, timer.expect("every timer has a payload"))
                })
            };
            let Some((at, timer)) = next else {
                self.check_background();
                return;
            };
            self.world.advance_to(at);
            match timer {
                Timer::Wake(waker) => waker.wake(),
                Timer::Start(call) => self.start(call),
                Timer::Cancel(call) => self.cancel(call),
            }
        }
    }

    pub(super) fn next_ready(&self) -> Option<usize> {
        self.ready
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop_front()
    }

    pub(super) fn start(&mut self, call: usize) {
        {
            let now = self.world.clock.now();
            let cooling: Vec<Ms> = self
                .world
                .sources
                .iter()
                .map(|s| {
                    s.cooling_until(now)
                        .map_or(0, |t| ms(t.saturating_duration_since(self.world.base)))
                })
                .collect();
            self.world.lock().calls[call].known_ready = cooling;
        }
        self.running[call] = Some(Box::pin(one_call(Rc::clone(&self.world), call)));
        self.poll(call);
    }

    pub(super) fn poll(&mut self, task: usize) {
        let Some(running) = self.running[task].as_mut() else {
            return;
        };
        let mut cx = Context::from_waker(&self.wakers[task]);
        // One task runs at a time, so an arrival number the room hands out during this poll is
        // this call's: its place, for the order invariant.
        let taken = self.world.room.arrivals_taken();
        let ready = running.as_mut().poll(&mut cx).is_ready();
        if task < self.calls && self.world.room.arrivals_taken() > taken {
            self.world.lock().calls[task].place = Some(taken);
        }
        if ready {
            self.running[task] = None;
        }
        self.adopt_spawned();
    }

    /// Work the door spawned during the last poll becomes tasks of the executor, ready to run
    /// (as a spawned Tokio task is scheduled at once).
    fn adopt_spawned(&mut self) {
        let spawned =
            std::mem::take(&mut *self.world.spawned.lock().unwrap_or_else(|e| e.into_inner()));
        self.world.lock().door_tasks += spawned.len() as u64;
        for work in spawned {
            let task = self.running.len();
            self.running.push(Some(work));
            self.wakers.push(Waker::from(Arc::new(TaskWaker {
                task,
                ready: Arc::clone(&self.ready),
            })));
            self.ready
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push_back(task);
        }
    }

    /// Nothing is left to run or wake: background work still pending waits for a wake that
    /// never comes, and what it owes the backend is never sent.
    fn check_background(&self) {
        let hung = self.running[self.calls..].iter().flatten().count();
        if hung > 0 {
            let last = self.calls.saturating_sub(1);
            let what = format!("{hung} tasks of the door's background work never finished");
            self.world.lock().violation(last, what);
        }
    }

    /// The caller dropped its future: the driver's guards release everything, an attempt in
    /// flight is recorded `cancelled`, and no retry continues.
    pub(super) fn cancel(&mut self, call: usize) {
        let Some(running) = self.running[call].take() else {
            return;
        };
        {
            let mut state = self.world.lock();
            state.trace_event(call, || "cancelled by the caller".into());
        }
        drop(running);
        // Dropping the call settled what it held: the door may have spawned the rest.
        self.adopt_spawned();
        let mut state = self.world.lock();
        let c = &mut state.calls[call];
        c.done = true;
        // A cancelled attempt still leaves its row; nothing else is owed.
        if c.rows != c.sends {
            let what = format!(
                "{} attempt rows for {} sends after cancellation",
                c.rows, c.sends
            );
            state.violation(call, what);
        }
    }
}
