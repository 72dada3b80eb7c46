//! What `polygateway batch` shows on stderr while a job runs: on a terminal a live progress bar
//! (`indicatif`) with done/total, ETA, calls/s, cost so far, calls in flight, errors by reason
//! and each source's share; without a terminal one plain line per interval; `--progress json`
//! one JSON object per interval. The final summary is `batch_cmd`'s (stdout).

use std::io::{BufRead, IsTerminal};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::ValueEnum;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use polygateway::batch::BatchProgress;
use serde_json::json;

/// Three lines: the bar with done/total and ETA, then the job's counters (two lines of the
/// message, each short enough for an 80-column terminal in the usual case).
const BAR_TEMPLATE: &str =
    "{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} ({percent}%) ETA {eta}\n{msg}";

/// How often the bar is refreshed from the job's counters.
const BAR_REFRESH: Duration = Duration::from_millis(250);

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ProgressMode {
    Auto,
    Plain,
    Json,
}

/// The progress view of one run.
pub(crate) struct View {
    mode: ProgressMode,
    /// The live bar (terminal only).
    bar: Option<ProgressBar>,
    /// Non-blank lines of the input file, once counted (0: not known yet, or not a file).
    total: Arc<AtomicU64>,
    previous: BatchProgress,
}

impl View {
    /// The view for `mode`: a bar when `auto` and stderr is a terminal. Counts the input's lines
    /// in the background (a regular file only: a pipe cannot be read twice) for done/total.
    pub(crate) fn new(mode: ProgressMode, input: &Path) -> Self {
        let bar = (mode == ProgressMode::Auto && std::io::stderr().is_terminal()).then(|| {
            let style = ProgressStyle::with_template(BAR_TEMPLATE)
                .unwrap_or_else(|_| ProgressStyle::default_bar());
            ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr()).with_style(style)
        });
        let total = Arc::new(AtomicU64::new(0));
        if input.metadata().is_ok_and(|m| m.is_file()) {
            let (total, input) = (Arc::clone(&total), input.to_path_buf());
            // A detached thread: a job that ends first does not wait for the count.
            let _ = std::thread::Builder::new()
                .name("pgw-batch-count".into())
                .spawn(move || {
                    if let Some(n) = count_lines(&input) {
                        total.store(n, Ordering::Relaxed);
                    }
                });
        }
        Self {
            mode,
            bar,
            total,
            previous: BatchProgress::default(),
        }
    }

    /// Time between updates: the bar refreshes several times a second, the other modes every
    /// `asked` seconds.
    pub(crate) fn interval(&self, asked: Duration) -> Duration {
        if self.bar.is_some() {
            asked.min(BAR_REFRESH)
        } else {
            asked
        }
    }

    /// A message that must not be overdrawn by the bar (Ctrl-C notices).
    pub(crate) fn note(&self, message: &str) {
        match &self.bar {
            Some(bar) => bar.suspend(|| eprintln!("{message}")),
            None => eprintln!("{message}"),
        }
    }

    /// Show `now` (called every interval): rates over the last interval.
    pub(crate) fn update(&mut self, now: BatchProgress) {
        let since = self.previous.clone();
        self.show(now, &since);
    }

    /// Show `now` against `since` (the rates are over the time between them).
    fn show(&mut self, now: BatchProgress, since: &BatchProgress) {
        let seconds = (now.elapsed - since.elapsed).as_secs_f64().max(1e-3);
        let calls_per_s = (now.calls - since.calls) as f64 / seconds;
        let results_per_s = (now.written - since.written) as f64 / seconds;
        let total = self.total(&now);
        let eta = eta_s(&now, total, results_per_s);
        match (self.mode, &self.bar) {
            (_, Some(bar)) => {
                bar.set_length(total.unwrap_or(now.read).max(now.written));
                bar.set_position(now.written);
                bar.set_message(format!(
                    "{calls_per_s:.1} calls/s | cost {:.6} | {} in flight | {} waiting to retry \
                     | {} from journal\nerrors: {} | sources: {}",
                    now.cost,
                    now.in_flight,
                    now.waiting_retry,
                    now.from_journal,
                    errors_text(&now),
                    sources_text(&now)
                ));
            }
            (ProgressMode::Json, None) => eprintln!(
                "{}",
                json!({
                    "read": now.read,
                    "input_done": now.input_done,
                    "total": total,
                    "written": now.written,
                    "succeeded": now.succeeded,
                    "from_journal": now.from_journal,
                    "in_flight": now.in_flight,
                    "waiting_retry": now.waiting_retry,
                    "rescheduled": now.rescheduled,
                    "calls": now.calls,
                    "calls_per_s": (calls_per_s * 10.0).round() / 10.0,
                    "errors": now.errors,
                    "sources": now.sources,
                    "cost": now.cost,
                    "p50_ms": now.p50_ms,
                    "p99_ms": now.p99_ms,
                    "eta_s": eta,
                    "elapsed_s": now.elapsed.as_secs_f64(),
                })
            ),
            (ProgressMode::Auto | ProgressMode::Plain, None) => eprintln!(
                "batch: {} done of {}{} read | {} from journal | {calls_per_s:.1} calls/s | {} \
                 in flight | {} waiting to retry | errors: {} | sources: {} | cost {:.6}{}",
                now.written,
                now.read,
                if now.input_done { "" } else { "+" },
                now.from_journal,
                now.in_flight,
                now.waiting_retry,
                errors_text(&now),
                sources_text(&now),
                now.cost,
                eta.map_or(String::new(), |s| format!(" | ETA {s:.0}s"))
            ),
        }
        self.previous = now;
    }

    /// The last update, its rates over the whole run; the bar stays on screen and the summary
    /// follows it on a line of its own.
    pub(crate) fn finish(&mut self, now: BatchProgress) {
        self.show(now, &BatchProgress::default());
        if let Some(bar) = &self.bar {
            bar.finish();
            eprintln!();
        }
    }

    /// The input's size in items: the counted lines, or what was read once the input ended.
    fn total(&self, now: &BatchProgress) -> Option<u64> {
        match self.total.load(Ordering::Relaxed) {
            0 if now.input_done => Some(now.read),
            0 => None,
            n => Some(n),
        }
    }
}

/// Non-blank lines of a file, read in pieces (the file can be larger than memory).
fn count_lines(path: &Path) -> Option<u64> {
    let mut reader = std::io::BufReader::new(std::fs::File::open(path).ok()?);
    let mut line = Vec::new();
    let mut n = 0;
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line).ok()? == 0 {
            return Some(n);
        }
        if line.iter().any(|b| !b.is_ascii_whitespace()) {
            n += 1;
        }
    }
}

pub(crate) fn errors_text(p: &BatchProgress) -> String {
    if p.errors.is_empty() {
        return "none".into();
    }
    p.errors
        .iter()
        .map(|(code, n)| format!("{code}={n}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Each source's share of this run's answers: `openai_1 52% openai_2 48%`.
pub(crate) fn sources_text(p: &BatchProgress) -> String {
    let answered: u64 = p.sources.values().sum();
    if answered == 0 {
        return "none yet".into();
    }
    p.sources
        .iter()
        .map(|(source, n)| format!("{source} {:.0}%", *n as f64 * 100.0 / answered as f64))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Seconds until the remaining results are out at `per_s` results a second (known once the
/// input's size is).
fn eta_s(now: &BatchProgress, total: Option<u64>, per_s: f64) -> Option<f64> {
    let total = total?;
    (per_s > 0.0).then(|| total.saturating_sub(now.written) as f64 / per_s)
}
