//! `polygateway batch INPUT.jsonl -o OUTPUT.jsonl`: a thin user of `Gateway::batch`. It streams
//! the input file in, writes each result line to the output as it arrives, prints progress on
//! stderr (a line redrawn in place on a terminal, plain lines through a pipe, or JSON) and a final
//! summary (stdout), and turns Ctrl-C into `stop` (first) and `cancel` (second).
//!
//! The output is rewritten on every run: journalled items are replayed from the journal and the
//! others sent, so a resumed run's output has every line once (docs/behaviour.md §13.2).

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::{Args, ValueEnum};
use futures::StreamExt;
use polygateway::batch::{BatchJob, BatchOptions, BatchProgress};
use polygateway::config::Settings;
use polygateway::Gateway;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, BufWriter};

#[derive(Args)]
pub(crate) struct BatchArgs {
    /// Input file: one JSON object per line, OpenAI's Batch API input format
    /// (`custom_id`, `method`, `url`, `body`) or plain `{"custom_id", "messages", …}` lines.
    input: PathBuf,
    /// Output file (OpenAI's Batch API output format), rewritten on every run.
    #[arg(short, long)]
    output: PathBuf,
    /// The journal (SQLite) that makes the job resumable [default: OUTPUT.journal].
    #[arg(long, value_name = "PATH")]
    journal: Option<PathBuf>,
    /// Scope of lines whose `body.model` names no configured scope or alias (plain lines).
    #[arg(long)]
    scope: Option<String>,
    /// A JSON Schema file: answers of chat lines without a `response_format` must fit it (the
    /// structured ladder repairs, validates and re-asks).
    #[arg(long, value_name = "FILE")]
    schema: Option<PathBuf>,
    /// Most items in flight at once; the sources' pacers decide how many reach the upstreams.
    #[arg(long, default_value_t = 1024)]
    max_concurrency: usize,
    /// Seconds an item refused as unavailable keeps being rescheduled before its error is
    /// written.
    #[arg(long, default_value_t = 3600.0, value_name = "SECS")]
    max_item_age: f64,
    /// Progress on stderr: `plain` lines, `json` objects, or `auto` (one line redrawn in place
    /// on a terminal, plain lines otherwise).
    #[arg(long, value_enum, default_value = "auto")]
    progress: ProgressMode,
    /// Seconds between progress reports.
    #[arg(long, default_value_t = 5.0, value_name = "SECS")]
    progress_interval: f64,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ProgressMode {
    Auto,
    Plain,
    Json,
}

pub(crate) async fn run(settings: Settings, args: &BatchArgs) -> Result<ExitCode, String> {
    if !(args.max_item_age >= 0.0 && args.max_item_age.is_finite()) {
        return Err("--max-item-age must be a number of seconds ≥ 0".into());
    }
    if !(args.progress_interval > 0.0 && args.progress_interval.is_finite()) {
        return Err("--progress-interval must be a number of seconds > 0".into());
    }
    if args.max_concurrency == 0 {
        return Err("--max-concurrency must be at least 1".into());
    }
    let journal = args.journal.clone().unwrap_or_else(|| {
        let mut name = args.output.clone().into_os_string();
        name.push(".journal");
        PathBuf::from(name)
    });
    let schema = match &args.schema {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read --schema {}: {e}", path.display()))?;
            let schema: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
                format!(
                    "--schema {}: not JSON ({e}); give a JSON Schema object",
                    path.display()
                )
            })?;
            if !schema.is_object() {
                return Err(format!(
                    "--schema {}: must be a JSON Schema object",
                    path.display()
                ));
            }
            Some(schema)
        }
        None => None,
    };
    let input = tokio::fs::File::open(&args.input)
        .await
        .map_err(|e| format!("cannot read {}: {e}", args.input.display()))?;
    let default_scope = match &args.scope {
        Some(scope) => scope.clone(),
        None => settings.scopes.keys().next().cloned().ok_or(
            "no scope is configured: add a source such as LLM__OPENAI__1__BASE_URL, \
             LLM__OPENAI__1__API_KEY and LLM__OPENAI__1__MODEL (see .env.example)",
        )?,
    };
    let gw = Gateway::from_settings(settings, &default_scope)
        .await
        .map_err(|e| e.to_string())?;
    let result = run_job(&gw, args, input, journal, schema).await;
    gw.shutdown().await;
    result
}

async fn run_job(
    gw: &Gateway,
    args: &BatchArgs,
    input: tokio::fs::File,
    journal: PathBuf,
    schema: Option<serde_json::Value>,
) -> Result<ExitCode, String> {
    let read_error = Arc::new(Mutex::new(None::<String>));
    let lines = {
        let read_error = Arc::clone(&read_error);
        let path = args.input.display().to_string();
        futures::stream::unfold(BufReader::new(input).lines(), move |mut lines| {
            let read_error = Arc::clone(&read_error);
            let path = path.clone();
            async move {
                match lines.next_line().await {
                    Ok(Some(line)) => Some((line, lines)),
                    Ok(None) => None,
                    Err(e) => {
                        if let Ok(mut slot) = read_error.lock() {
                            *slot = Some(format!("reading {path} failed: {e}"));
                        }
                        None
                    }
                }
            }
        })
    };
    let options = BatchOptions {
        scope: args.scope.clone(),
        schema,
        max_concurrency: args.max_concurrency,
        max_item_age: Duration::from_secs_f64(args.max_item_age),
        journal: Some(journal.clone()),
    };
    let out = tokio::fs::File::create(&args.output)
        .await
        .map_err(|e| format!("cannot write {}: {e}", args.output.display()))?;
    let mut out = BufWriter::new(out);
    let mut job = gw.batch(lines, options).map_err(|e| e.to_string())?;
    // On a terminal the progress line is redrawn in place, twice a second (or faster if asked).
    let live = args.progress == ProgressMode::Auto && std::io::stderr().is_terminal();
    let interval = if live {
        args.progress_interval.min(0.5)
    } else {
        args.progress_interval
    };
    let mut tick = tokio::time::interval(Duration::from_secs_f64(interval));
    tick.tick().await;
    let mut interrupts = Interrupts::new();
    let mut previous = job.progress();
    let write_failed = |e: std::io::Error| format!("cannot write {}: {e}", args.output.display());
    loop {
        tokio::select! {
            result = job.next() => match result {
                Some(result) => {
                    out.write_all(result.line.as_bytes()).await.map_err(write_failed)?;
                    out.write_all(b"\n").await.map_err(write_failed)?;
                }
                None => break,
            },
            _ = tick.tick() => {
                out.flush().await.map_err(write_failed)?;
                let now = job.progress();
                report(args.progress, live, &now, &previous);
                previous = now;
            }
            () = interrupts.next() => {
                if live {
                    eprintln!();
                }
                if job.stopped() {
                    eprintln!("polygateway batch: cancelling the calls in flight");
                    job.cancel();
                } else {
                    eprintln!(
                        "polygateway batch: stopping: no new items; the {} call(s) in flight \
                         finish (Ctrl-C again cancels them)",
                        job.progress().in_flight
                    );
                    job.stop();
                }
            }
        }
    }
    out.flush().await.map_err(write_failed)?;
    // A last report, so even a job shorter than one interval shows its progress line.
    report(args.progress, live, &job.progress(), &previous);
    if live {
        eprintln!();
    }
    let read_error = read_error.lock().ok().and_then(|e| e.clone());
    summary(args, &job, &journal, read_error.as_deref())
}

/// Ctrl-C (SIGINT), buffered between polls so a second press is never missed.
struct Interrupts {
    #[cfg(unix)]
    signal: Option<tokio::signal::unix::Signal>,
}

impl Interrupts {
    fn new() -> Self {
        Self {
            #[cfg(unix)]
            signal: tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()).ok(),
        }
    }

    async fn next(&mut self) {
        #[cfg(unix)]
        if let Some(signal) = &mut self.signal {
            if signal.recv().await.is_some() {
                return;
            }
            std::future::pending::<()>().await;
        }
        let _ = tokio::signal::ctrl_c().await;
    }
}

fn errors_text(p: &BatchProgress) -> String {
    if p.errors.is_empty() {
        return "none".into();
    }
    p.errors
        .iter()
        .map(|(code, n)| format!("{code}={n}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Seconds until the remaining results are out at `per_s` results a second (known once the
/// whole input has been read).
fn eta_s(now: &BatchProgress, per_s: f64) -> Option<f64> {
    (now.input_done && per_s > 0.0).then(|| (now.read - now.written) as f64 / per_s)
}

fn report(mode: ProgressMode, live: bool, now: &BatchProgress, previous: &BatchProgress) {
    let seconds = (now.elapsed - previous.elapsed).as_secs_f64().max(1e-3);
    let calls_per_s = (now.calls - previous.calls) as f64 / seconds;
    let results_per_s = (now.written - previous.written) as f64 / seconds;
    let eta = eta_s(now, results_per_s);
    match mode {
        ProgressMode::Json => eprintln!(
            "{}",
            json!({
                "read": now.read,
                "input_done": now.input_done,
                "written": now.written,
                "succeeded": now.succeeded,
                "from_journal": now.from_journal,
                "in_flight": now.in_flight,
                "waiting_retry": now.waiting_retry,
                "rescheduled": now.rescheduled,
                "calls": now.calls,
                "calls_per_s": (calls_per_s * 10.0).round() / 10.0,
                "errors": now.errors,
                "cost": now.cost,
                "p50_ms": now.p50_ms,
                "p99_ms": now.p99_ms,
                "eta_s": eta,
                "elapsed_s": now.elapsed.as_secs_f64(),
            })
        ),
        ProgressMode::Auto | ProgressMode::Plain => {
            let line = format!(
                "batch: {} done of {}{} read | {} from journal | {calls_per_s:.1} calls/s | {} \
                 in flight | {} waiting to retry | errors: {} | cost {:.6}{}",
                now.written,
                now.read,
                if now.input_done { "" } else { "+" },
                now.from_journal,
                now.in_flight,
                now.waiting_retry,
                errors_text(now),
                now.cost,
                eta.map_or(String::new(), |s| format!(" | ETA {s:.0}s"))
            );
            if live {
                // Back to the line's start and clear it: one line that updates in place.
                eprint!("\r\x1b[2K{line}");
            } else {
                eprintln!("{line}");
            }
        }
    }
}

fn summary(
    args: &BatchArgs,
    job: &BatchJob,
    journal: &Path,
    read_error: Option<&str>,
) -> Result<ExitCode, String> {
    let p = job.progress();
    let complete = p.input_done && !job.stopped() && read_error.is_none();
    let ms = |v: Option<f64>| v.map_or("n/a".to_string(), |v| format!("{v:.0} ms"));
    if args.progress == ProgressMode::Json {
        println!(
            "{}",
            json!({
                "complete": complete,
                "results": p.written,
                "succeeded": p.succeeded,
                "from_journal": p.from_journal,
                "calls": p.calls,
                "errors": p.errors,
                "cost": p.cost,
                "p50_ms": p.p50_ms,
                "p99_ms": p.p99_ms,
                "wall_s": p.elapsed.as_secs_f64(),
                "output": args.output.display().to_string(),
                "journal": journal.display().to_string(),
            })
        );
    } else {
        println!(
            "batch {}: {} results ({} succeeded, {} errors; {} from the journal), {} calls in \
             this run",
            if complete { "finished" } else { "stopped" },
            p.written,
            p.succeeded,
            p.written - p.succeeded,
            p.from_journal,
            p.calls
        );
        println!("errors: {}", errors_text(&p));
        println!("cost this run: {:.6}", p.cost);
        println!("latency: p50 {}, p99 {}", ms(p.p50_ms), ms(p.p99_ms));
        println!("wall time: {:.1} s", p.elapsed.as_secs_f64());
        println!("output: {}", args.output.display());
        println!("journal: {}", journal.display());
    }
    if let Some(failure) = job.failure() {
        return Err(failure);
    }
    if let Some(e) = read_error {
        return Err(e.to_string());
    }
    if complete {
        return Ok(ExitCode::SUCCESS);
    }
    let scope = args
        .scope
        .as_ref()
        .map_or(String::new(), |s| format!(" --scope {s}"));
    eprintln!(
        "polygateway batch: stopped before the end; to resume (answered items are not sent \
         again): polygateway batch {} -o {} --journal {}{scope}",
        args.input.display(),
        args.output.display(),
        journal.display()
    );
    Ok(ExitCode::from(2))
}
