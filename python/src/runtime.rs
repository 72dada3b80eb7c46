//! The one tokio runtime of the process: created on first use, re-created in a forked child,
//! shut down by the package's `atexit` hook before the interpreter finalizes.
//!
//! Not for: anything that touches Python. The runtime's threads never attach to the interpreter
//! (results cross back on the event loop's thread, see `bridge.rs`), so there is no thread that
//! could try to take the GIL while CPython finalizes.

use std::sync::Mutex;
use std::time::Duration;

use pyo3::exceptions::PyRuntimeError;
use pyo3::PyResult;
use tokio::runtime::{Builder, Handle, Runtime};

/// How long the exit hook lets in-flight calls unwind before abandoning them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

struct Live {
    pid: u32,
    generation: u64,
    runtime: Runtime,
}

struct State {
    live: Option<Live>,
    generation: u64,
    closed: bool,
}

static STATE: Mutex<State> = Mutex::new(State {
    live: None,
    generation: 0,
    closed: false,
});

/// The runtime of this process and its generation (a forked child gets a new generation; objects
/// of an older one belong to the parent's runtime, whose threads do not exist in the child).
pub(crate) fn current() -> PyResult<(Handle, u64)> {
    let mut state = STATE.lock().unwrap_or_else(|e| e.into_inner());
    if state.closed {
        return Err(PyRuntimeError::new_err(
            "polygateway: the runtime was shut down at interpreter exit",
        ));
    }
    let pid = std::process::id();
    if let Some(live) = &state.live {
        if live.pid == pid {
            return Ok((live.runtime.handle().clone(), live.generation));
        }
    }
    // First use, or first use in a forked child: the parent's runtime struct was copied but its
    // threads were not; dropping it would wait for them forever, so it is leaked.
    if let Some(stale) = state.live.take() {
        std::mem::forget(stale);
    }
    let runtime = Builder::new_multi_thread()
        .enable_all()
        .thread_name("polygateway")
        .build()
        .map_err(|e| PyRuntimeError::new_err(format!("polygateway: cannot start tokio: {e}")))?;
    state.generation += 1;
    let handle = runtime.handle().clone();
    let generation = state.generation;
    state.live = Some(Live {
        pid,
        generation,
        runtime,
    });
    Ok((handle, generation))
}

/// The runtime of `generation` if it is the live one of this process.
pub(crate) fn live_handle(generation: u64) -> Option<Handle> {
    let state = STATE.lock().unwrap_or_else(|e| e.into_inner());
    let live = state.live.as_ref()?;
    (live.generation == generation && live.pid == std::process::id())
        .then(|| live.runtime.handle().clone())
}

/// Run `work(generation)` on the live runtime of this process for at most `budget` (the exit
/// hook uses it to flush the clients nobody closed). Nothing happens without a live runtime.
pub(crate) fn block_on_live<F, W>(work: W, budget: Duration)
where
    W: FnOnce(u64) -> F,
    F: std::future::Future<Output = ()>,
{
    let (handle, generation) = {
        let state = STATE.lock().unwrap_or_else(|e| e.into_inner());
        match &state.live {
            Some(live) if live.pid == std::process::id() && !state.closed => {
                (live.runtime.handle().clone(), live.generation)
            }
            _ => return,
        }
    };
    let _ = handle.block_on(async { tokio::time::timeout(budget, work(generation)).await });
}

/// Shut the runtime down: in-flight calls are dropped (their permits released), threads joined
/// within a grace period. Called by `atexit` with the GIL released. Idempotent.
pub(crate) fn shutdown() {
    let live = {
        let mut state = STATE.lock().unwrap_or_else(|e| e.into_inner());
        state.closed = true;
        state.live.take()
    };
    if let Some(live) = live {
        if live.pid == std::process::id() {
            live.runtime.shutdown_timeout(SHUTDOWN_GRACE);
        } else {
            std::mem::forget(live);
        }
    }
}

/// A value that lives on the runtime of one generation. Dropped inside that runtime when it is
/// still live; leaked otherwise (a forked child, or after exit shutdown), because its destructor
/// may need the runtime's threads or locks they held at fork time.
pub(crate) struct OnRuntime<T> {
    value: Option<T>,
    generation: u64,
}

impl<T> OnRuntime<T> {
    pub(crate) fn new(value: T, generation: u64) -> Self {
        Self {
            value: Some(value),
            generation,
        }
    }

    /// The runtime generation the value belongs to.
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// The value, if it belongs to this process's live runtime, with that runtime's handle.
    pub(crate) fn get(&self) -> PyResult<(&T, Handle)> {
        match (&self.value, live_handle(self.generation)) {
            (Some(value), Some(handle)) => Ok((value, handle)),
            _ => Err(PyRuntimeError::new_err(
                "polygateway: this object belongs to another process (created before fork) or \
                 the runtime was shut down; create a new one in this process",
            )),
        }
    }
}

impl<T> Drop for OnRuntime<T> {
    fn drop(&mut self) {
        let value = self.value.take();
        match live_handle(self.generation) {
            Some(handle) => {
                let _entered = handle.enter();
                drop(value);
            }
            None => std::mem::forget(value),
        }
    }
}
