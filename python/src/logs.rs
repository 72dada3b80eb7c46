//! The runtime's log events (`tracing`, e.g. "telemetry degraded: rows are dropped …") delivered
//! to Python's `logging`, logger `polygateway`.
//!
//! Runtime threads never take the GIL (see `runtime.rs`), so events at INFO and above are queued
//! here and emitted on a Python thread: when a client is built (a telemetry backend that cannot
//! write says so before the constructor returns), whenever finished calls cross back to an
//! event loop (`bridge.rs`), and when the telemetry status is read. Finer levels and spans are
//! not recorded at all (their call sites are disabled), so they cost nothing.
//!
//! Not for: deciding what is logged (the runtime does) or Python-side configuration (handlers
//! and levels stay the application's).

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::Mutex;

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use tracing::field::{Field, Visit};
use tracing::subscriber::Interest;
use tracing::{Event, Level, Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

/// Events kept until a Python thread emits them; beyond this the oldest are counted and dropped.
const QUEUE_LIMIT: usize = 1024;

struct Queue {
    records: VecDeque<(Level, String)>,
    overflowed: u64,
}

static QUEUE: Mutex<Queue> = Mutex::new(Queue {
    records: VecDeque::new(),
    overflowed: 0,
});

static LOGGER: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// Queues the runtime's events at INFO, WARN and ERROR.
struct ToPython;

/// Events at INFO and above; never spans (the call path's spans then cost nothing here).
fn wanted(metadata: &Metadata<'_>) -> bool {
    metadata.is_event() && *metadata.level() <= Level::INFO
}

impl<S: Subscriber> Layer<S> for ToPython {
    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        if wanted(metadata) {
            Interest::always()
        } else {
            Interest::never()
        }
    }

    fn enabled(&self, metadata: &Metadata<'_>, _: Context<'_, S>) -> bool {
        wanted(metadata)
    }

    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let mut text = Text::default();
        event.record(&mut text);
        let mut queue = QUEUE.lock().unwrap_or_else(|e| e.into_inner());
        if queue.records.len() == QUEUE_LIMIT {
            queue.records.pop_front();
            queue.overflowed += 1;
        }
        queue
            .records
            .push_back((*event.metadata().level(), text.finish()));
    }
}

/// `message key=value …` of one event.
#[derive(Default)]
struct Text {
    message: String,
    fields: String,
}

impl Text {
    fn finish(self) -> String {
        if self.fields.is_empty() {
            self.message
        } else {
            format!("{} ({})", self.message, self.fields.trim_start())
        }
    }
}

impl Visit for Text {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            let _ = write!(self.fields, " {}={value:?}", field.name());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            let _ = write!(self.fields, " {}={value}", field.name());
        }
    }
}

/// Route the runtime's events here (once per process, at import). Another global subscriber
/// already installed (by an embedding application) is left in place.
pub(crate) fn install() {
    let subscriber = tracing_subscriber::registry().with(ToPython);
    let _ = tracing::subscriber::set_global_default(subscriber);
}

/// Emit the queued events to `logging.getLogger("polygateway")`. Failures to log are dropped:
/// logging never breaks a call.
pub(crate) fn drain(py: Python<'_>) {
    let (records, overflowed) = {
        let mut queue = QUEUE.lock().unwrap_or_else(|e| e.into_inner());
        if queue.records.is_empty() && queue.overflowed == 0 {
            return;
        }
        (
            std::mem::take(&mut queue.records),
            std::mem::take(&mut queue.overflowed),
        )
    };
    let Ok(logger) = LOGGER.get_or_try_init(py, || -> PyResult<Py<PyAny>> {
        Ok(py
            .import("logging")?
            .call_method1("getLogger", ("polygateway",))?
            .unbind())
    }) else {
        return;
    };
    let logger = logger.bind(py);
    if overflowed > 0 {
        let note = format!("{overflowed} runtime log event(s) dropped (the queue was full)");
        let _ = logger.call_method1("log", (30, "%s", note));
    }
    for (level, text) in records {
        let python_level = match level {
            Level::ERROR => 40,
            Level::WARN => 30,
            _ => 20,
        };
        let _ = logger.call_method1("log", (python_level, "%s", text));
    }
}
