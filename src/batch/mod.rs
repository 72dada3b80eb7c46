//! Batch jobs: a stream of input lines in (OpenAI's Batch API input format, or plain
//! `{"custom_id", "messages", …}` lines), a stream of output lines out (OpenAI's Batch API
//! output format), with an optional journal that makes the job resumable
//! (docs/behaviour.md §13). `polygateway batch` is a thin user of [`Gateway::batch`].
//!
//! A batch job is a user of the gateway's public handles, like `serve`: every item is one
//! governed call (selection, limits, breakers, retries, pacing, cache, telemetry), and nothing
//! here talks to an upstream or an actor.
//!
//! Parts: `input` (a line → a call or an error), `runner` (streaming admission, rescheduling,
//! stop and cancel), `output` (output lines), `result` (one line's [`BatchResult`]), `journal`
//! (SQLite, feature `sqlite`) and `telemetry_barrier` (the telemetry rows of an item are written
//! before its journal row), `progress` (counters and the snapshot), `seen_ids` (duplicate
//! `custom_id`s in flat memory).

pub(crate) mod input;
#[cfg(feature = "sqlite")]
pub(crate) mod journal;
pub(crate) mod output;
mod progress;
mod result;
pub(crate) mod runner;
mod seen_ids;
#[cfg(feature = "sqlite")]
mod telemetry_barrier;

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::Stream;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub use progress::BatchProgress;
pub use result::BatchResult;

use crate::error::GatewayError;
use crate::Gateway;
use input::Routing;
use runner::{Job, Shared};

/// How a batch job runs.
///
/// ```
/// use std::time::Duration;
/// use polygateway::batch::BatchOptions;
/// let options = BatchOptions {
///     scope: Some("LLM".into()),
///     max_concurrency: 64,
///     ..BatchOptions::default()
/// };
/// assert_eq!(options.max_item_age, Duration::from_secs(3600));
/// assert!(options.journal.is_none() && options.schema.is_none());
/// ```
#[derive(Debug, Clone)]
pub struct BatchOptions {
    /// The scope of lines whose `model` names no scope or alias (plain lines usually have no
    /// `model`). `None`: such lines are error results naming the served models.
    pub scope: Option<String>,
    /// A JSON Schema for chat lines without a `response_format` (the plain form's `--schema`):
    /// their answers go through the typed structured ladder (repair, validation, re-ask) as a
    /// `json_schema` response format would.
    pub schema: Option<serde_json::Value>,
    /// Most items in flight at once (calls running or waiting for capacity inside the runtime,
    /// and items waiting to be rescheduled); also bounds how far the input is read ahead.
    /// The pacers decide how many of them reach the upstreams. Default 1024.
    pub max_concurrency: usize,
    /// An item refused as unavailable is sent again after its `retry_after_s` only while it is
    /// younger than this (counted from its first send); then its error is written. What is left
    /// of it is each send's deadline, so an item never waits inside the runtime past it (0: send
    /// once, no deadline). Default 1 h.
    pub max_item_age: Duration,
    /// The journal (SQLite file, created when absent): finished items are recorded there, and a
    /// job run again with the same journal replays them instead of sending them.
    #[cfg(feature = "sqlite")]
    pub journal: Option<std::path::PathBuf>,
}

impl Default for BatchOptions {
    fn default() -> Self {
        Self {
            scope: None,
            schema: None,
            max_concurrency: 1024,
            max_item_age: Duration::from_secs(3600),
            #[cfg(feature = "sqlite")]
            journal: None,
        }
    }
}

/// A running batch job: a [`Stream`] of [`BatchResult`]s (in completion order, one per input
/// line) that ends when every line is answered, or after [`stop`](Self::stop) or
/// [`cancel`](Self::cancel). Dropping it cancels the job.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), polygateway::GatewayError> {
/// use futures::StreamExt;
/// use polygateway::batch::BatchOptions;
/// use polygateway_testkit::{mock_settings, Behaviour, MockUpstream};
/// let mock = MockUpstream::start(Behaviour::healthy_with("ok")).await;
/// let gw = polygateway::Gateway::from_settings(mock_settings(&[("LLM", &mock.base_url())], &[]), "LLM").await?;
/// let lines = vec![
///     r#"{"custom_id": "a", "messages": [{"role": "user", "content": "hi"}]}"#.to_string(),
///     "not json".to_string(),
/// ];
/// let options = BatchOptions { scope: Some("LLM".into()), ..BatchOptions::default() };
/// let mut job = gw.batch(futures::stream::iter(lines), options)?;
/// let mut results = Vec::new();
/// while let Some(r) = job.next().await {
///     results.push(r);
/// }
/// results.sort_by_key(|r| r.custom_id.clone());
/// assert_eq!(results[0].error_code.as_deref(), Some("invalid_json"));
/// assert!(results[1].is_success());
/// let line: serde_json::Value = serde_json::from_str(&results[1].line).unwrap();
/// assert_eq!(line["response"]["body"]["choices"][0]["message"]["content"], "ok");
/// assert_eq!(job.progress().written, 2);
/// gw.shutdown().await;
/// # Ok(()) }
/// ```
pub struct BatchJob {
    results: mpsc::Receiver<BatchResult>,
    shared: Arc<Shared>,
    journal: Option<std::path::PathBuf>,
}

impl BatchJob {
    /// What the job has done so far.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway::GatewayError> {
    /// # let (settings, mocks) = polygateway_testkit::doc_setup(&["LLM"], &[]).await;
    /// # let gw = polygateway::Gateway::from_settings(settings, "LLM").await?;
    /// use futures::StreamExt;
    /// let job = gw.batch(futures::stream::iter(vec!["{}".to_string()]), Default::default())?;
    /// let results: Vec<_> = job.collect().await;
    /// assert_eq!(results[0].error_code.as_deref(), Some("missing_custom_id"));
    /// # gw.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub fn progress(&self) -> BatchProgress {
        self.shared.progress.snapshot()
    }

    /// Stop admitting items: the calls in flight finish and their results still arrive; items
    /// not started, and items waiting to be rescheduled, are left for the next run (with the
    /// same journal). The stream then ends.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway::GatewayError> {
    /// # let (settings, mocks) = polygateway_testkit::doc_setup(&["LLM"], &[]).await;
    /// # let gw = polygateway::Gateway::from_settings(settings, "LLM").await?;
    /// use futures::StreamExt;
    /// // An input that never ends: only stop() ends the job.
    /// let lines = futures::stream::pending::<String>();
    /// let job = gw.batch(lines, Default::default())?;
    /// job.stop();
    /// assert!(job.stopped());
    /// assert_eq!(job.collect::<Vec<_>>().await.len(), 0);
    /// # gw.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub fn stop(&self) {
        self.shared.stop.cancel();
    }

    /// Stop admitting and drop the calls in flight (they are cancelled, §4 step 7; their items
    /// are sent again by the next run).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway::GatewayError> {
    /// # use polygateway_testkit::{mock_settings, Behaviour, MockUpstream};
    /// use futures::StreamExt;
    /// let mock = MockUpstream::start(Behaviour::BlackHole).await;
    /// # let gw = polygateway::Gateway::from_settings(mock_settings(&[("LLM", &mock.base_url())], &[]), "LLM").await?;
    /// let line = r#"{"custom_id": "a", "messages": [{"role": "user", "content": "hi"}]}"#;
    /// let options = polygateway::batch::BatchOptions { scope: Some("LLM".into()), ..Default::default() };
    /// let job = gw.batch(futures::stream::iter(vec![line.to_string()]), options)?;
    /// while job.progress().in_flight == 0 {
    ///     tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    /// }
    /// job.cancel(); // the black hole would never answer
    /// assert_eq!(job.collect::<Vec<_>>().await.len(), 0);
    /// # gw.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub fn cancel(&self) {
        self.shared.stop.cancel();
        self.shared.cancel.cancel();
    }

    /// Whether [`stop`](Self::stop) or [`cancel`](Self::cancel) was called, or a journal
    /// failure stopped the job: the output is then incomplete and running the job again with
    /// the same journal resumes it.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway::GatewayError> {
    /// # let (settings, mocks) = polygateway_testkit::doc_setup(&["LLM"], &[]).await;
    /// # let gw = polygateway::Gateway::from_settings(settings, "LLM").await?;
    /// let job = gw.batch(futures::stream::iter(Vec::<String>::new()), Default::default())?;
    /// assert!(!job.stopped());
    /// # gw.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub fn stopped(&self) -> bool {
        self.shared.stop.is_cancelled()
    }

    /// The journal failure that stopped the job, if one did.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway::GatewayError> {
    /// # let (settings, mocks) = polygateway_testkit::doc_setup(&["LLM"], &[]).await;
    /// # let gw = polygateway::Gateway::from_settings(settings, "LLM").await?;
    /// let job = gw.batch(futures::stream::iter(Vec::<String>::new()), Default::default())?;
    /// assert_eq!(job.failure(), None);
    /// # gw.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub fn failure(&self) -> Option<String> {
        self.shared.fatal.lock().ok().and_then(|f| f.clone())
    }

    /// The journal's path, when the job has one.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway::GatewayError> {
    /// # let (settings, mocks) = polygateway_testkit::doc_setup(&["LLM"], &[]).await;
    /// # let gw = polygateway::Gateway::from_settings(settings, "LLM").await?;
    /// let job = gw.batch(futures::stream::iter(Vec::<String>::new()), Default::default())?;
    /// assert_eq!(job.journal(), None);
    /// # gw.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub fn journal(&self) -> Option<&std::path::Path> {
        self.journal.as_deref()
    }
}

impl Stream for BatchJob {
    type Item = BatchResult;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<BatchResult>> {
        self.results.poll_recv(cx)
    }
}

impl Drop for BatchJob {
    fn drop(&mut self) {
        self.shared.stop.cancel();
        self.shared.cancel.cancel();
    }
}

impl std::fmt::Debug for BatchJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchJob")
            .field("progress", &self.progress())
            .field("journal", &self.journal)
            .finish()
    }
}

impl Gateway {
    /// Run a batch job over `lines` (one JSON object per line; see [`crate::batch`]): results
    /// stream out as items finish. Needs a Tokio runtime (it spawns the job). Errors: the
    /// journal cannot be opened, `options.scope` is not configured, or an alias of
    /// `PGW_SERVER_MODEL_ALIASES` names an unknown scope.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use futures::StreamExt;
    /// use polygateway::batch::BatchOptions;
    /// use polygateway_testkit::{mock_settings, Behaviour, MockUpstream};
    /// let mock = MockUpstream::start(Behaviour::healthy()).await;
    /// let gw = polygateway::Gateway::from_settings(mock_settings(&[("LLM", &mock.base_url())], &[]), "LLM").await?;
    /// let dir = tempfile::tempdir()?;
    /// let options = BatchOptions { journal: Some(dir.path().join("job.journal")), ..Default::default() };
    /// let line = r#"{"custom_id": "q1", "method": "POST", "url": "/v1/chat/completions",
    ///     "body": {"model": "LLM", "messages": [{"role": "user", "content": "hi"}]}}"#.replace('\n', "");
    /// let first: Vec<_> = gw.batch(futures::stream::iter(vec![line.clone()]), options.clone())?.collect().await;
    /// assert!(first[0].is_success() && !first[0].from_journal);
    /// // The same job again: answered from the journal, nothing sent.
    /// let again: Vec<_> = gw.batch(futures::stream::iter(vec![line]), options)?.collect().await;
    /// assert!(again[0].from_journal);
    /// assert_eq!(again[0].line, first[0].line);
    /// assert_eq!(mock.requests().len(), 1);
    /// gw.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub fn batch<S>(&self, lines: S, options: BatchOptions) -> Result<BatchJob, GatewayError>
    where
        S: Stream<Item = String> + Send + 'static,
    {
        let models = crate::openai::models::model_table(self)?;
        let kinds = self
            .scopes()
            .into_iter()
            .filter_map(|s| crate::openai::models::kind_of(self, &s).map(|k| (s, k)))
            .collect();
        if let Some(scope) = &options.scope {
            if self.settings().scope(scope).is_err() {
                return Err(GatewayError::SourceNotConfigured(format!(
                    "batch scope {scope} is not configured (configured: {})",
                    self.scopes().join(", ")
                )));
            }
        }
        #[cfg(feature = "sqlite")]
        let journal = match &options.journal {
            Some(path) => Some(
                journal::Journal::open(path)
                    .map_err(|e| GatewayError::Config(crate::config::ConfigError::Assembly(e)))?
                    .after_telemetry(telemetry_barrier::TelemetryBarrier::new(self.clone())),
            ),
            None => None,
        };
        let shared = Arc::new(Shared {
            progress: progress::Progress::new(),
            stop: CancellationToken::new(),
            cancel: CancellationToken::new(),
            fatal: std::sync::Mutex::new(None),
        });
        let job = Job {
            gw: self.clone(),
            routing: Routing {
                models,
                kinds,
                default_scope: options.scope.clone(),
                default_schema: options.schema.clone(),
            },
            max_concurrency: options.max_concurrency.max(1),
            max_item_age: options.max_item_age,
            #[cfg(feature = "sqlite")]
            journal,
        };
        let results = runner::start(job, Box::pin(lines), Arc::clone(&shared));
        #[cfg(feature = "sqlite")]
        let journal = options.journal;
        #[cfg(not(feature = "sqlite"))]
        let journal = None;
        Ok(BatchJob {
            results,
            shared,
            journal,
        })
    }
}
