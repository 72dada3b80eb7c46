//! `polygateway batch INPUT.jsonl -o OUTPUT.jsonl`: a thin user of `Gateway::batch`. It streams
//! the input file in, writes each result line to the output as it arrives, prints progress on
//! stderr (`batch_view`: a live bar on a terminal, plain lines through a pipe, or JSON) and a final
//! summary (stdout), and turns Ctrl-C into `stop` (first) and `cancel` (second).
//!
//! The output is rewritten on every run: journalled items are replayed from the journal and the
//! others sent, so a resumed run's output has every line once (docs/behaviour.md §13.2).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Args;
use futures::StreamExt;
use polygateway::batch::{BatchJob, BatchOptions};
use polygateway::config::Settings;
use polygateway::Gateway;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, BufWriter};

use crate::batch_view::{errors_text, sources_text, ProgressMode, View};

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
    /// written; what is left of it is also each send's deadline (0: send once, no deadline).
    #[arg(long, default_value_t = 3600.0, value_name = "SECS")]
    max_item_age: f64,
    /// Progress on stderr: `plain` lines, `json` objects, or `auto` (a live progress bar on a
    /// terminal, plain lines otherwise).
    #[arg(long, value_enum, default_value = "auto")]
    progress: ProgressMode,
    /// Seconds between progress reports.
    #[arg(long, default_value_t = 5.0, value_name = "SECS")]
    progress_interval: f64,
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
    let mut view = View::new(args.progress, &args.input);
    let mut tick =
        tokio::time::interval(view.interval(Duration::from_secs_f64(args.progress_interval)));
    tick.tick().await;
    let mut interrupts = Interrupts::new();
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
                view.update(job.progress());
            }
            () = interrupts.next() => {
                if job.stopped() {
                    view.note("polygateway batch: cancelling the calls in flight");
                    job.cancel();
                } else {
                    view.note(&format!(
                        "polygateway batch: stopping: no new items; the {} call(s) in flight \
                         finish (Ctrl-C again cancels them)",
                        job.progress().in_flight
                    ));
                    job.stop();
                }
            }
        }
    }
    out.flush().await.map_err(write_failed)?;
    // A last update, so even a job shorter than one interval shows its progress.
    view.finish(job.progress());
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
                "sources": p.sources,
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
        println!("sources: {}", sources_text(&p));
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
