//! `_native.Batch`: a `Gateway::batch` job fed and read from Python (`GatewayClient.run_batch`).
//!
//! Input lines cross in chunks (`feed`) into a bounded channel that is the job's input stream,
//! so a producer faster than the job waits (the items are never all in memory). A pump task
//! owns the job: it hands results to a bounded channel that `next_results` drains in batches
//! (one crossing per batch, as `stream.rs` does), applies `stop`/`cancel`, and keeps a progress
//! snapshot Python can read at any time without waiting for a result. Dropping the object (or
//! `cancel`) cancels the job like dropping the Rust `BatchJob`.
//!
//! Not for: argument defaults and the result type (the Python layer, `client.py`/`types.py`).

use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use tokio::sync::{mpsc, Mutex};

use polygateway::batch::{BatchJob, BatchProgress, BatchResult};

use crate::bridge::{spawn, Bridge};
use crate::runtime::OnRuntime;

/// Input lines buffered between Python and the job (the job itself reads ahead at most
/// `max_concurrency` items).
const INPUT_BUFFER: usize = 1024;
/// Results buffered for a Python consumer that is behind.
const RESULT_BUFFER: usize = 1024;
/// How often the progress snapshot is refreshed while no result arrives.
const PROGRESS_REFRESH: Duration = Duration::from_millis(200);

/// Set by the pump when the job ends: `(stopped, failure)`.
type Outcome = Arc<StdMutex<Option<(bool, Option<String>)>>>;

enum Control {
    Stop,
    Cancel,
}

struct State {
    /// The job's input; `None` once Python said the items ended.
    input: StdMutex<Option<mpsc::Sender<String>>>,
    results: Mutex<mpsc::Receiver<BatchResult>>,
    control: mpsc::UnboundedSender<Control>,
    progress: Arc<StdMutex<BatchProgress>>,
    outcome: Outcome,
}

/// A running batch job read from Python.
#[pyclass(module = "polygateway._native", frozen)]
pub(crate) struct NativeBatch {
    state: OnRuntime<Arc<State>>,
}

impl NativeBatch {
    /// Start the job `make` builds over the lines Python feeds (on `runtime`, which `make` needs
    /// to spawn the job).
    pub(crate) fn start<F>(
        runtime: &tokio::runtime::Handle,
        generation: u64,
        make: F,
    ) -> Result<Self, polygateway::GatewayError>
    where
        F: FnOnce(
            futures::stream::BoxStream<'static, String>,
        ) -> Result<BatchJob, polygateway::GatewayError>,
    {
        let (input, lines) = mpsc::channel::<String>(INPUT_BUFFER);
        let lines = futures::stream::unfold(lines, |mut rx| async move {
            rx.recv().await.map(|line| (line, rx))
        })
        .boxed();
        let job = {
            let _entered = runtime.enter();
            make(lines)?
        };
        let (results_tx, results) = mpsc::channel(RESULT_BUFFER);
        let (control, control_rx) = mpsc::unbounded_channel();
        let progress = Arc::new(StdMutex::new(job.progress()));
        let outcome = Arc::new(StdMutex::new(None));
        runtime.spawn(pump(
            job,
            results_tx,
            control_rx,
            Arc::clone(&progress),
            Arc::clone(&outcome),
        ));
        let state = State {
            input: StdMutex::new(Some(input)),
            results: Mutex::new(results),
            control,
            progress,
            outcome,
        };
        Ok(Self {
            state: OnRuntime::new(Arc::new(state), generation),
        })
    }
}

/// Own the job: results out, control in, progress refreshed.
async fn pump(
    mut job: BatchJob,
    results: mpsc::Sender<BatchResult>,
    mut control: mpsc::UnboundedReceiver<Control>,
    progress: Arc<StdMutex<BatchProgress>>,
    outcome: Outcome,
) {
    let mut refresh = tokio::time::interval(PROGRESS_REFRESH);
    let mut control_open = true;
    let publish = |job: &BatchJob| {
        *progress.lock().unwrap_or_else(|e| e.into_inner()) = job.progress();
    };
    loop {
        tokio::select! {
            result = job.next() => match result {
                Some(result) => {
                    publish(&job);
                    // The Python side went away: dropping the job below cancels it.
                    if results.send(result).await.is_err() {
                        break;
                    }
                }
                None => break,
            },
            command = control.recv(), if control_open => match command {
                Some(Control::Stop) => job.stop(),
                Some(Control::Cancel) => job.cancel(),
                None => {
                    // The Python object is gone.
                    control_open = false;
                    job.cancel();
                }
            },
            _ = refresh.tick() => publish(&job),
        }
    }
    publish(&job);
    *outcome.lock().unwrap_or_else(|e| e.into_inner()) = Some((job.stopped(), job.failure()));
}

/// `(custom_id, line, status_code, error_code, cost, latency_ms, from_journal)`.
type ResultTuple = (
    Option<String>,
    String,
    Option<u16>,
    Option<String>,
    f64,
    Option<f64>,
    bool,
);

fn result_tuple(r: BatchResult) -> ResultTuple {
    (
        r.custom_id,
        r.line,
        r.status_code,
        r.error_code,
        r.cost,
        r.latency_ms,
        r.from_journal,
    )
}

#[pymethods]
impl NativeBatch {
    /// Send `lines` to the job (waits while its input buffer is full); `future` gets `True`, or
    /// `False` when the job no longer reads input (stopped, cancelled, failed).
    fn feed(&self, bridge: &Bridge, future: &Bound<'_, PyAny>, lines: Vec<String>) -> PyResult<()> {
        let (state, runtime) = self.state.get()?;
        let input = state
            .input
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        spawn(
            &runtime,
            bridge,
            future,
            async move {
                let Some(input) = input else {
                    return false;
                };
                for line in lines {
                    if input.send(line).await.is_err() {
                        return false;
                    }
                }
                true
            },
            |py, open| Ok(open.into_pyobject(py)?.to_owned().into_any().unbind()),
        )
    }

    /// The items ended: the job finishes what it has.
    fn end_input(&self) -> PyResult<()> {
        let (state, _) = self.state.get()?;
        state.input.lock().unwrap_or_else(|e| e.into_inner()).take();
        Ok(())
    }

    /// Resolve `future` with the next results (a list of tuples `(custom_id, line, status_code,
    /// error_code, cost, latency_ms, from_journal)`: every result already waiting), or `None`
    /// once the job has ended.
    fn next_results(&self, bridge: &Bridge, future: &Bound<'_, PyAny>) -> PyResult<()> {
        let (state, runtime) = self.state.get()?;
        let state = Arc::clone(state);
        spawn(
            &runtime,
            bridge,
            future,
            async move {
                let mut results = state.results.lock().await;
                let first = results.recv().await?;
                let mut batch = vec![result_tuple(first)];
                while let Some(Some(next)) = results.recv().now_or_never() {
                    batch.push(result_tuple(next));
                }
                Some(batch)
            },
            |py, batch| match batch {
                None => Ok(py.None()),
                Some(batch) => Ok(batch.into_pyobject(py)?.into_any().unbind()),
            },
        )
    }

    /// Stop admitting items: calls in flight finish and their results still arrive.
    fn stop(&self) -> PyResult<()> {
        let (state, _) = self.state.get()?;
        let _ = state.control.send(Control::Stop);
        Ok(())
    }

    /// Stop admitting and cancel the calls in flight. Idempotent.
    fn cancel(&self) -> PyResult<()> {
        let (state, _) = self.state.get()?;
        let _ = state.control.send(Control::Cancel);
        Ok(())
    }

    /// What the job has done so far, as a dict of `BatchProgress`'s fields (`elapsed_s` for
    /// `elapsed`).
    fn progress<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let (state, _) = self.state.get()?;
        let p = state
            .progress
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let d = PyDict::new(py);
        d.set_item("read", p.read)?;
        d.set_item("input_done", p.input_done)?;
        d.set_item("written", p.written)?;
        d.set_item("succeeded", p.succeeded)?;
        d.set_item("from_journal", p.from_journal)?;
        d.set_item("in_flight", p.in_flight)?;
        d.set_item("waiting_retry", p.waiting_retry)?;
        d.set_item("rescheduled", p.rescheduled)?;
        d.set_item("calls", p.calls)?;
        d.set_item("errors", p.errors)?;
        d.set_item("sources", p.sources)?;
        d.set_item("cost", p.cost)?;
        d.set_item("p50_ms", p.p50_ms)?;
        d.set_item("p99_ms", p.p99_ms)?;
        d.set_item("elapsed_s", p.elapsed.as_secs_f64())?;
        Ok(d)
    }

    /// `None` while the job runs; then `(stopped, failure)`: whether it was stopped before the
    /// end of its input (the output is then incomplete; the same journal resumes it), and the
    /// journal failure that stopped it, if any.
    fn outcome(&self) -> PyResult<Option<(bool, Option<String>)>> {
        let (state, _) = self.state.get()?;
        Ok(state
            .outcome
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone())
    }
}

impl Drop for NativeBatch {
    fn drop(&mut self) {
        if let Ok((state, _)) = self.state.get() {
            let _ = state.control.send(Control::Cancel);
        }
    }
}
