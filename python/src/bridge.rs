//! Rust futures as asyncio futures, with results crossing back in batches.
//!
//! A call spawns its future on the process runtime and hands Python an asyncio future. When the
//! Rust future ends, its result (still Rust data) is queued in the event loop's [`Bridge`] and a
//! byte is written to a socket the loop watches — only when the queue was empty, so a burst of
//! completions costs one wake-up. The loop's reader callback ([`Bridge::drain`]) then converts
//! everything queued, under the GIL it already holds, and resolves the futures. Runtime threads
//! therefore never take the GIL: no contention with the loop thread, and nothing that could
//! touch the interpreter while it finalizes.
//!
//! Cancelling the asyncio future (task cancellation, timeouts) aborts the tokio task, which drops
//! the governed call: its permits, leases and upstream connection are released.
//!
//! Not for: converting values (`convert.rs`) or mapping errors (`errors.rs`).

use std::future::Future;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use pyo3::prelude::*;
use tokio::runtime::Handle;
use tokio::task::AbortHandle;

/// Turns a finished call's Rust result into a Python value or exception (run on the loop thread).
pub(crate) type Deliver = Box<dyn FnOnce(Python<'_>) -> PyResult<Py<PyAny>> + Send>;

struct Shared {
    done: Mutex<Vec<(Py<PyAny>, Deliver)>>,
    notified: AtomicBool,
    wake: UnixStream,
}

impl Shared {
    fn complete(&self, future: Py<PyAny>, deliver: Deliver) {
        self.done
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((future, deliver));
        if !self.notified.swap(true, Ordering::AcqRel) {
            // A full socket buffer means a wake-up is already pending: nothing is lost.
            let _ = (&self.wake).write(&[1]);
        }
    }
}

/// The crossing point of one event loop (created by the Python layer, one per loop).
#[pyclass(module = "polygateway._native", frozen)]
pub(crate) struct Bridge {
    shared: Arc<Shared>,
    reader: UnixStream,
}

#[pymethods]
impl Bridge {
    #[new]
    fn new() -> PyResult<Self> {
        let (reader, wake) = UnixStream::pair()?;
        reader.set_nonblocking(true)?;
        wake.set_nonblocking(true)?;
        Ok(Self {
            shared: Arc::new(Shared {
                done: Mutex::new(Vec::new()),
                notified: AtomicBool::new(false),
                wake,
            }),
            reader,
        })
    }

    /// The file descriptor the event loop watches (`loop.add_reader(bridge.fileno(), bridge.drain)`).
    fn fileno(&self) -> i32 {
        self.reader.as_raw_fd()
    }

    /// Resolve every future whose call has finished (the loop's reader callback).
    fn drain(&self, py: Python<'_>) {
        let mut buf = [0u8; 64];
        while let Ok(n) = (&self.reader).read(&mut buf) {
            if n < buf.len() {
                break;
            }
        }
        // Cleared before taking the queue: a completion queued after the take writes again.
        self.shared.notified.store(false, Ordering::Release);
        let done = std::mem::take(&mut *self.shared.done.lock().unwrap_or_else(|e| e.into_inner()));
        for (future, deliver) in done {
            // One failing future must not strand the others of the batch.
            if let Err(err) = resolve(py, future.bind(py), deliver) {
                err.write_unraisable(py, Some(future.bind(py)));
            }
        }
        crate::logs::drain(py);
    }
}

fn resolve(py: Python<'_>, future: &Bound<'_, PyAny>, deliver: Deliver) -> PyResult<()> {
    if future.call_method0("done")?.is_truthy()? {
        return Ok(()); // cancelled meanwhile
    }
    match deliver(py) {
        Ok(value) => future.call_method1("set_result", (value,))?,
        Err(err) => future.call_method1("set_exception", (err.into_value(py),))?,
    };
    Ok(())
}

/// Aborts the call's task when its asyncio future is done (a no-op when it finished normally).
#[pyclass(module = "polygateway._native", frozen)]
struct AbortOnDone(AbortHandle);

#[pymethods]
impl AbortOnDone {
    fn __call__(&self, _future: &Bound<'_, PyAny>) {
        self.0.abort();
    }
}

/// Spawn `call` on `runtime`; `future` (created by the Python layer on the running loop) gets its
/// result through `bridge`. `deliver` converts the output on the loop thread.
pub(crate) fn spawn<F, T, D>(
    runtime: &Handle,
    bridge: &Bridge,
    future: &Bound<'_, PyAny>,
    call: F,
    deliver: D,
) -> PyResult<()>
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
    D: FnOnce(Python<'_>, T) -> PyResult<Py<PyAny>> + Send + 'static,
{
    let shared = bridge.shared.clone();
    let target = future.clone().unbind();
    let task = runtime.spawn(async move {
        let output = call.await;
        shared.complete(target, Box::new(move |py| deliver(py, output)));
    });
    future.call_method1("add_done_callback", (AbortOnDone(task.abort_handle()),))?;
    Ok(())
}
