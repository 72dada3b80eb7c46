//! The scheduler: reads input lines one at a time (never the whole input), admits an item only
//! when one of `max_concurrency` permits is free (so at most that many items are in memory),
//! runs each as one governed call of the gateway's handles, reschedules items refused as
//! unavailable after their `retry_after_s` (while younger than `max_item_age`, which is also
//! each send's deadline), commits each
//! finished item to the journal and only then hands its result out.
//!
//! How many calls actually reach the upstreams at once is the runtime's decision: each source's
//! adaptive pacer admits what the source can serve and the rest wait inside the call
//! (docs/behaviour.md §5.6), so the permits are only a cap, not a tuning knob.
//!
//! Stopping: `stop` ends admission and lets calls in flight finish (items waiting to be
//! rescheduled are left for the next run); `cancel` also drops the calls in flight.

use std::sync::Arc;
use std::time::Duration;

use futures::stream::BoxStream;
use futures::StreamExt;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
// Tokio's clock, as the runtime reads it: an item's age is on the clock its deadline is.
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::input::{parse_line, Call, Item, LineError, Routing};
#[cfg(feature = "sqlite")]
use super::journal::{fingerprint, Entry, Journal};
use super::output;
use super::progress::Progress;
use super::result::BatchResult;
use super::seen_ids::SeenIds;
use crate::error::GatewayError;
use crate::openai::completion::{completion_json, now_s};
use crate::openai::embedding::embedding_json;
use crate::types::CallOptions;
use crate::Gateway;

/// Shortest wait before an item refused as unavailable is sent again: a hint of 0 after a call
/// that already spent its retries must not become a hot loop.
const MIN_RESCHEDULE: Duration = Duration::from_secs(1);

/// What every part of a running job shares.
pub(crate) struct Shared {
    pub(crate) progress: Progress,
    pub(crate) stop: CancellationToken,
    pub(crate) cancel: CancellationToken,
    /// The first journal failure, which stops the job (answers it cannot make durable would be
    /// sent again by the next run).
    pub(crate) fatal: std::sync::Mutex<Option<String>>,
}

pub(crate) struct Job {
    pub(crate) gw: Gateway,
    pub(crate) routing: Routing,
    pub(crate) max_concurrency: usize,
    pub(crate) max_item_age: Duration,
    #[cfg(feature = "sqlite")]
    pub(crate) journal: Option<Journal>,
}

/// Start the job; results arrive on the returned channel, which closes when the job ends.
pub(crate) fn start(
    job: Job,
    lines: BoxStream<'static, String>,
    shared: Arc<Shared>,
) -> mpsc::Receiver<BatchResult> {
    let (tx, rx) = mpsc::channel(job.max_concurrency.max(1));
    tokio::spawn(drive(Arc::new(job), lines, shared, tx));
    rx
}

async fn drive(
    job: Arc<Job>,
    mut lines: BoxStream<'static, String>,
    shared: Arc<Shared>,
    tx: mpsc::Sender<BatchResult>,
) {
    let permits = Arc::new(Semaphore::new(job.max_concurrency.max(1)));
    let mut tasks = JoinSet::new();
    let mut seen = SeenIds::new();
    let mut line_no = 0u64;
    let p = &shared.progress;
    loop {
        let permit = tokio::select! {
            biased;
            () = shared.stop.cancelled() => break,
            permit = Arc::clone(&permits).acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
        };
        let line = tokio::select! {
            biased;
            () = shared.stop.cancelled() => break,
            line = lines.next() => line,
        };
        let Some(line) = line else {
            Progress::add(&p.input_done);
            break;
        };
        line_no += 1;
        Progress::add(&p.read);
        while tasks.try_join_next().is_some() {}
        if line.trim().is_empty() {
            continue;
        }
        let item = match parse_line(&line, line_no, &job.routing) {
            Ok(item) => item,
            Err(e) => {
                emit(&shared, &tx, line_error(&e)).await;
                continue;
            }
        };
        if !seen.insert(&item.custom_id) {
            let e = LineError {
                code: "duplicate_custom_id",
                message: format!(
                    "line {line_no}: custom_id {:?} was already used by an earlier line; each \
                     custom_id must be unique",
                    item.custom_id
                ),
                custom_id: Some(item.custom_id),
            };
            emit(&shared, &tx, line_error(&e)).await;
            continue;
        }
        #[cfg(feature = "sqlite")]
        let fingerprint = fingerprint(&line);
        #[cfg(feature = "sqlite")]
        if let Some(journal) = &job.journal {
            match journal.lookup(&item.custom_id).await {
                Ok(Some(entry)) if entry.fingerprint == fingerprint => {
                    Progress::add(&p.from_journal);
                    emit(&shared, &tx, replayed(entry)).await;
                    continue;
                }
                Ok(Some(_)) => {
                    let e = LineError {
                        code: "journal_mismatch",
                        message: format!(
                            "line {line_no}: custom_id {:?} was answered in journal {} for a \
                             different input line; use another journal (--journal) for another \
                             input",
                            item.custom_id,
                            journal.path().display()
                        ),
                        custom_id: Some(item.custom_id),
                    };
                    emit(&shared, &tx, line_error(&e)).await;
                    continue;
                }
                Ok(None) => {}
                Err(e) => {
                    fail(&shared, e);
                    break;
                }
            }
        }
        tasks.spawn(run_item(
            Arc::clone(&job),
            item,
            #[cfg(feature = "sqlite")]
            fingerprint,
            permit,
            Arc::clone(&shared),
            tx.clone(),
        ));
    }
    // Admission is over: let what runs finish, unless cancelled.
    loop {
        tokio::select! {
            biased;
            () = shared.cancel.cancelled() => {
                tasks.abort_all();
                while tasks.join_next().await.is_some() {}
                break;
            }
            next = tasks.join_next() => if next.is_none() { break },
        }
    }
}

async fn emit(shared: &Shared, tx: &mpsc::Sender<BatchResult>, result: BatchResult) {
    Progress::add(&shared.progress.written);
    if result.status_code == Some(200) {
        Progress::add(&shared.progress.succeeded);
    }
    if let Some(code) = &result.error_code {
        shared.progress.error(code);
    }
    // A consumer that went away has dropped the job, which cancels it.
    let _ = tx.send(result).await;
}

#[cfg(feature = "sqlite")]
fn fail(shared: &Shared, message: String) {
    if let Ok(mut fatal) = shared.fatal.lock() {
        fatal.get_or_insert(message);
    }
    shared.stop.cancel();
}

fn line_error(e: &LineError) -> BatchResult {
    BatchResult {
        custom_id: e.custom_id.clone(),
        line: output::rejected_line(e),
        status_code: None,
        error_code: Some(e.code.to_string()),
        cost: 0.0,
        latency_ms: None,
        from_journal: false,
    }
}

#[cfg(feature = "sqlite")]
fn replayed(entry: Entry) -> BatchResult {
    BatchResult {
        custom_id: Some(entry.custom_id),
        line: entry.line,
        status_code: Some(entry.status_code),
        error_code: entry.error_code,
        cost: entry.cost,
        latency_ms: None,
        from_journal: true,
    }
}

/// One item, from its first send to its result (or to a stop that leaves it for the next run).
async fn run_item(
    job: Arc<Job>,
    item: Item,
    #[cfg(feature = "sqlite")] fingerprint: String,
    _permit: OwnedSemaphorePermit,
    shared: Arc<Shared>,
    tx: mpsc::Sender<BatchResult>,
) {
    let p = &shared.progress;
    let first_sent = Instant::now();
    // `answered`: a final answer, journalled. An unavailability (also one past max_item_age) or a
    // shutdown was not an answer: written, not journalled, so the next run sends it again.
    let (line, status_code, error_code, cost, latency, answered) = loop {
        Progress::add(&p.in_flight);
        let started = Instant::now();
        let outcome = tokio::select! {
            biased;
            () = shared.cancel.cancelled() => {
                Progress::sub(&p.in_flight);
                return;
            }
            outcome = send(&job.gw, &item, item_deadline(job.max_item_age, first_sent)) => outcome,
        };
        Progress::sub(&p.in_flight);
        let latency = started.elapsed();
        match outcome {
            Ok((line, cost, source)) => {
                p.call(latency, cost);
                p.served_by(&source);
                break (line, 200, None, cost, latency, true);
            }
            Err(e) => {
                p.call(latency, 0.0);
                if let GatewayError::Unavailable(u) = &e {
                    let wait =
                        Duration::from_secs_f64(u.retry_after_s.max(0.0)).max(MIN_RESCHEDULE);
                    if first_sent.elapsed() + wait < job.max_item_age {
                        Progress::add(&p.rescheduled);
                        Progress::add(&p.waiting_retry);
                        let stopped = tokio::select! {
                            () = tokio::time::sleep(wait) => false,
                            () = shared.stop.cancelled() => true,
                        };
                        Progress::sub(&p.waiting_retry);
                        if stopped {
                            // Not answered: the next run sends it.
                            return;
                        }
                        continue;
                    }
                }
                let answered =
                    !matches!(e, GatewayError::Unavailable(_) | GatewayError::Shutdown(_));
                let (line, shape) = output::failed(&item.custom_id, &e);
                let code = Some(shape.code.to_string());
                break (line, shape.status, code, 0.0, latency, answered);
            }
        }
    };
    #[cfg(feature = "sqlite")]
    if answered {
        if let Some(journal) = &job.journal {
            let entry = Entry {
                custom_id: item.custom_id.clone(),
                fingerprint,
                status_code,
                error_code: error_code.clone(),
                cost,
                line: line.clone(),
            };
            if let Err(e) = journal.record(entry).await {
                fail(&shared, e);
            }
        }
    }
    #[cfg(not(feature = "sqlite"))]
    let _ = answered;
    emit(
        &shared,
        &tx,
        BatchResult {
            custom_id: Some(item.custom_id),
            line,
            status_code: Some(status_code),
            error_code,
            cost,
            latency_ms: Some(latency.as_secs_f64() * 1000.0),
            from_journal: false,
        },
    )
    .await;
}

/// What is left of an item's age, as the deadline of its next send: an item never waits inside
/// the runtime (for a pacer slot, a gate, a cooldown) past its `max_item_age`. `None` with an age
/// of 0 (send once, no deadline) or when nothing is left.
fn item_deadline(max_item_age: Duration, first_sent: Instant) -> Option<Duration> {
    Some(max_item_age.saturating_sub(first_sent.elapsed())).filter(|left| !left.is_zero())
}

/// One governed call with the item's `deadline`; the output line of its answer, the answer's
/// cost and the source that served it. Each kind of call is boxed, so an item in flight holds
/// the future of its own kind only (a structured call's ladder is twice a plain call's; inline,
/// every item would hold the largest): the job's memory is `max_concurrency` of these.
async fn send(
    gw: &Gateway,
    item: &Item,
    deadline: Option<Duration>,
) -> Result<(String, f64, String), GatewayError> {
    let with_deadline = |options: &CallOptions| match deadline {
        Some(deadline) => options.clone().deadline(deadline),
        None => options.clone(),
    };
    match &item.call {
        Call::Chat {
            messages,
            options,
            schema,
        } => {
            let options = with_deadline(options);
            let handle = gw.chat_scope(&item.scope)?;
            let answer = match schema {
                Some(schema) => {
                    Box::pin(handle.chat_with_schema(messages.clone(), options, schema.clone()))
                        .await?
                }
                None => Box::pin(handle.chat_with(messages.clone(), options)).await?,
            };
            let id = format!("chatcmpl-{}", polygateway_actors::runtime::new_id());
            let body = completion_json(&id, &item.model, now_s(), &answer);
            let cost = answer.cost.unwrap_or(0.0);
            Ok((
                output::answered(&item.custom_id, 200, &answer.call_id, body),
                cost,
                answer.source_name,
            ))
        }
        Call::Embed {
            texts,
            options,
            base64,
        } => {
            let handle = gw.embedding_scope(&item.scope)?;
            let out = Box::pin(handle.embed(texts.clone(), with_deadline(options))).await?;
            let body = embedding_json(&out, &item.model, *base64);
            Ok((
                output::answered(&item.custom_id, 200, &out.call_id, body),
                0.0,
                out.source_name,
            ))
        }
    }
}
