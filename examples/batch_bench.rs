//! Batch job throughput, durability and memory, as `polygateway batch` runs a file: each job is
//! a child process (this program run again with `--child`) that streams an input file through
//! `Gateway::batch` with a journal and writes the output file, against capacity mocks held by
//! the parent (so what they received survives a child's SIGKILL). Prints one JSON line per
//! phase:
//!
//! - `goodput`: N items against two mocks that serve 64 requests at once each in `service_ms`
//!   and queue the rest (`polygateway_testkit::capacity::Scenario::queueing`): goodput against their
//!   capacity, the child's peak RSS (`VmHWM`), wall time.
//! - `kill_resume`: the same job with SQLite telemetry and a pricing table, SIGKILLed once about
//!   half of it is journalled, then run again: every `custom_id` exactly once in the output, no
//!   item journalled as answered sent again, the journal's cost against the telemetry's cost of
//!   the same calls (joined on the call id the output line carries).
//! - `million_lines`: a 1,000,000-line input (an unbounded queue mock, `--fast-service-ms`):
//!   the child's peak RSS.
//!
//! ```text
//! cargo build --release --example batch_bench
//! target/release/examples/batch_bench [--items 100000] [--service-ms 200] [--million 1000000] [--phases goodput,kill_resume,million_lines]
//! ```

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use futures::StreamExt;
use polygateway::batch::BatchOptions;
use polygateway::config::Settings;
use polygateway::Gateway;
use polygateway_testkit::capacity::Scenario;
use polygateway_testkit::mock_capacity::{CapacityMock, Regime};
use polygateway_testkit::mock_env;
use serde_json::{json, Value};
use tokio::io::AsyncBufReadExt;

#[derive(Parser)]
struct Args {
    /// Items of the `goodput` and `kill_resume` jobs (a child: of its job).
    #[arg(long, default_value_t = 100_000)]
    items: usize,
    /// Service time of each capacity-mock request, milliseconds.
    #[arg(long, default_value_t = 200)]
    service_ms: u64,
    /// Lines of the `million_lines` job.
    #[arg(long, default_value_t = 1_000_000)]
    million: usize,
    /// Service time of the `million_lines` mock, milliseconds.
    #[arg(long, default_value_t = 0)]
    fast_service_ms: u64,
    /// `BatchOptions::max_concurrency` (the CLI's default).
    #[arg(long, default_value_t = 1024)]
    max_concurrency: usize,
    /// Phases to run, comma-separated.
    #[arg(long, default_value = "goodput,kill_resume,million_lines")]
    phases: String,
    /// Internal: run one job in this process (the parent passes the rest).
    #[arg(long, hide = true)]
    child: bool,
    #[arg(long, hide = true)]
    input: Option<PathBuf>,
    #[arg(long, hide = true)]
    output: Option<PathBuf>,
    #[arg(long, hide = true)]
    journal: Option<PathBuf>,
    /// Comma-separated mock base URLs, one source each.
    #[arg(long, hide = true)]
    urls: Option<String>,
    /// SQLite telemetry file (none when absent).
    #[arg(long, hide = true)]
    telemetry: Option<PathBuf>,
    /// Pricing table file.
    #[arg(long, hide = true)]
    pricing: Option<PathBuf>,
}

/// Peak resident set size of this process, MiB (`VmHWM` of /proc/self/status; Linux only).
fn rss_peak_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some((kib / 1024.0 * 10.0).round() / 10.0)
}

/// The first whole second of a run whose successes reached `rate`.
fn first_second_at(per_second: &Value, rate: f64) -> Option<usize> {
    per_second
        .as_array()?
        .iter()
        .position(|n| n.as_f64().is_some_and(|n| n >= rate))
}

/// The machine's 1-minute load average (the benchmark shares its cores with whatever else runs).
fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    if args.child {
        return child(&args).await;
    }
    let phases: Vec<&str> = args.phases.split(',').map(str::trim).collect();
    let dir = tempfile::tempdir()?;
    if phases.contains(&"goodput") || phases.contains(&"kill_resume") {
        let input = dir.path().join("input.jsonl");
        write_input(&input, args.items)?;
        if phases.contains(&"goodput") {
            goodput(&args, dir.path(), &input).await?;
        }
        if phases.contains(&"kill_resume") {
            kill_resume(&args, dir.path(), &input).await?;
        }
    }
    if phases.contains(&"million_lines") {
        million_lines(&args, dir.path()).await?;
    }
    Ok(())
}

/// One plain chat line per item; the prompt names the item so the mocks can count its sends.
fn write_input(path: &Path, items: usize) -> std::io::Result<()> {
    let mut out = BufWriter::new(std::fs::File::create(path)?);
    for i in 0..items {
        let line = json!({"custom_id": format!("item-{i}"),
                          "messages": [{"role": "user", "content": format!("item-{i}")}]});
        writeln!(out, "{line}")?;
    }
    out.flush()
}

async fn queueing_mocks(scenario: &Scenario) -> Vec<CapacityMock> {
    let mut mocks = Vec::new();
    for _ in 0..scenario.sources {
        mocks.push(CapacityMock::start(scenario.regime).await);
    }
    mocks
}

fn urls(mocks: &[CapacityMock]) -> String {
    mocks
        .iter()
        .map(CapacityMock::base_url)
        .collect::<Vec<_>>()
        .join(",")
}

/// Start a child job; `extra` adds telemetry/pricing arguments.
fn spawn_child(
    args: &Args,
    items: usize,
    input: &Path,
    output: &Path,
    journal: &Path,
    urls: &str,
    extra: &[String],
) -> std::io::Result<std::process::Child> {
    Command::new(std::env::current_exe()?)
        .arg("--child")
        .arg("--input")
        .arg(input)
        .arg("--output")
        .arg(output)
        .arg("--journal")
        .arg(journal)
        .arg("--urls")
        .arg(urls)
        .arg("--max-concurrency")
        .arg(args.max_concurrency.to_string())
        .arg("--items")
        .arg(items.to_string())
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
}

/// Wait for a child and parse its JSON line.
fn child_report(child: std::process::Child) -> Result<Value, String> {
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!("child job failed: {}", out.status));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("child job's report: {e}"))
}

async fn goodput(args: &Args, dir: &Path, input: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let scenario = Scenario::queueing(Duration::from_millis(args.service_ms));
    let mocks = queueing_mocks(&scenario).await;
    let child = spawn_child(
        args,
        args.items,
        input,
        &dir.join("goodput.jsonl"),
        &dir.join("goodput.journal"),
        &urls(&mocks),
        &[],
    )?;
    let report = tokio::task::spawn_blocking(move || child_report(child)).await??;
    let ideal = scenario.ideal_calls_per_s.unwrap_or(f64::NAN);
    let wall = report["wall_s"].as_f64().unwrap_or(f64::NAN);
    let succeeded = report["succeeded"].as_u64().unwrap_or(0);
    let goodput = succeeded as f64 / wall;
    println!(
        "{}",
        json!({
            "bench": "batch",
            "phase": "goodput",
            "scenario": scenario.name,
            "items": args.items,
            "results": report["results"],
            "succeeded": succeeded,
            "errors": report["errors"],
            "journal": true,
            "telemetry": "none",
            "max_concurrency": args.max_concurrency,
            "wall_s": wall,
            "goodput_calls_per_s": goodput.round(),
            "capacity_calls_per_s": ideal,
            "goodput_ratio": round3(goodput / ideal),
            "steady_goodput_ratio": report["steady_calls_per_s"].as_f64().map(|r| round3(r / ideal)),
            "first_second_at_95pct": first_second_at(&report["per_second"], 0.95 * ideal),
            "load_average": load_average(),
            "p50_ms": report["p50_ms"],
            "p99_ms": report["p99_ms"],
            "rss_peak_mib": report["rss_peak_mib"],
        })
    );
    Ok(())
}

/// Journalled custom_id → (cost, call id of the output line), read while a child may be writing.
fn journal_rows(path: &Path) -> HashMap<String, (f64, String)> {
    let Ok(db) =
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
    else {
        return HashMap::new();
    };
    let Ok(mut stmt) = db.prepare("SELECT custom_id, cost, output_line FROM batch_items") else {
        return HashMap::new();
    };
    stmt.query_map([], |row| {
        let line: String = row.get(2)?;
        let request_id = serde_json::from_str::<Value>(&line)
            .ok()
            .and_then(|v| v["response"]["request_id"].as_str().map(str::to_string))
            .unwrap_or_default();
        Ok((
            row.get::<_, String>(0)?,
            (row.get::<_, f64>(1)?, request_id),
        ))
    })
    .map(|rows| rows.filter_map(Result::ok).collect())
    .unwrap_or_default()
}

fn journal_count(path: &Path) -> usize {
    rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .and_then(|db| {
            db.query_row("SELECT count(*) FROM batch_items", [], |r| {
                r.get::<_, i64>(0)
            })
        })
        .map_or(0, |n| usize::try_from(n).unwrap_or(0))
}

/// Telemetry call id → cost.
fn telemetry_costs(path: &Path) -> Result<HashMap<String, f64>, rusqlite::Error> {
    let db = rusqlite::Connection::open(path)?;
    let mut stmt = db.prepare("SELECT call_id, coalesce(cost, 0) FROM llm_calls")?;
    let rows = stmt.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?;
    rows.collect()
}

/// custom_id → lines carrying it.
fn output_ids(path: &Path) -> std::io::Result<HashMap<String, u32>> {
    let mut ids = HashMap::new();
    for line in std::io::BufReader::new(std::fs::File::open(path)?).lines() {
        let v: Value = serde_json::from_str(&line?).unwrap_or(Value::Null);
        let id = v["custom_id"].as_str().unwrap_or("<none>").to_string();
        *ids.entry(id).or_default() += 1;
    }
    Ok(ids)
}

async fn kill_resume(
    args: &Args,
    dir: &Path,
    input: &Path,
) -> Result<(), Box<dyn std::error::Error>> {
    let scenario = Scenario::queueing(Duration::from_millis(args.service_ms));
    let mocks = queueing_mocks(&scenario).await;
    let output = dir.join("resume.jsonl");
    let journal = dir.join("resume.journal");
    let telemetry = dir.join("telemetry.db");
    let pricing = dir.join("prices.json");
    std::fs::write(
        &pricing,
        r#"{"test-model": {"input_per_1m": 2.5, "output_per_1m": 10.0}}"#,
    )?;
    let extra = [
        "--telemetry".to_string(),
        telemetry.display().to_string(),
        "--pricing".to_string(),
        pricing.display().to_string(),
    ];
    let started = Instant::now();
    let mut first = spawn_child(
        args,
        args.items,
        input,
        &output,
        &journal,
        &urls(&mocks),
        &extra,
    )?;
    let half = args.items / 2;
    while journal_count(&journal) < half {
        if let Some(status) = first.try_wait()? {
            return Err(format!("the job ended ({status}) before half was journalled").into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    first.kill()?; // SIGKILL: nothing is flushed
    first.wait()?;
    let killed_after_s = started.elapsed().as_secs_f64();
    let journalled_at_kill: HashSet<String> = journal_rows(&journal).into_keys().collect();
    let sent_at_kill = prompt_counts(&mocks);
    let resumed = spawn_child(
        args,
        args.items,
        input,
        &output,
        &journal,
        &urls(&mocks),
        &extra,
    )?;
    let report = tokio::task::spawn_blocking(move || child_report(resumed)).await??;
    let wall = started.elapsed().as_secs_f64();

    let ids = output_ids(&output)?;
    let every_id_once =
        ids.len() == args.items && ids.values().all(|&n| n == 1) && !ids.contains_key("<none>");
    let sent = prompt_counts(&mocks);
    // An item journalled before the kill must not reach an upstream again.
    let resent_after_journalled = journalled_at_kill
        .iter()
        .filter(|id| sent.get(*id) != sent_at_kill.get(*id))
        .count();
    // Sent twice at all: only the calls in flight at the kill (answered, not yet journalled).
    let sent_twice = sent.values().filter(|&&n| n > 1).count();
    let rows = journal_rows(&journal);
    let journal_cost: f64 = rows.values().map(|(cost, _)| cost).sum();
    let telemetry = telemetry_costs(&telemetry)?;
    let telemetry_cost_total: f64 = telemetry.values().sum();
    let joined_cost: f64 = rows
        .values()
        .filter_map(|(_, call)| telemetry.get(call))
        .sum();
    let journalled_without_telemetry = rows
        .values()
        .filter(|(_, call)| !telemetry.contains_key(call))
        .count();
    // The resumed run alone (it ended cleanly, so its telemetry was flushed).
    let resumed_rows: Vec<&(f64, String)> = rows
        .iter()
        .filter(|(id, _)| !journalled_at_kill.contains(*id))
        .map(|(_, row)| row)
        .collect();
    let resumed_journal_cost: f64 = resumed_rows.iter().map(|(cost, _)| cost).sum();
    let resumed_telemetry_cost: f64 = resumed_rows
        .iter()
        .filter_map(|(_, call)| telemetry.get(call))
        .sum();
    let resumed_without_telemetry = resumed_rows
        .iter()
        .filter(|(_, call)| !telemetry.contains_key(call))
        .count();
    println!(
        "{}",
        json!({
            "bench": "batch",
            "phase": "kill_resume",
            "items": args.items,
            "killed_after_s": round3(killed_after_s),
            "journalled_at_kill": journalled_at_kill.len(),
            "resumed_calls": report["calls"],
            "resumed_from_journal": report["from_journal"],
            "output_ids": ids.len(),
            "every_custom_id_exactly_once": every_id_once,
            "journalled_then_sent_again": resent_after_journalled,
            "sent_twice_in_flight_at_kill": sent_twice,
            "journal_cost": round9(journal_cost),
            "telemetry_cost_of_journalled_calls": round9(joined_cost),
            "journal_cost_equals_telemetry_cost": (journal_cost - joined_cost).abs() < 1e-9
                && journalled_without_telemetry == 0,
            "journalled_without_telemetry_row": journalled_without_telemetry,
            "resumed_run_journal_cost": round9(resumed_journal_cost),
            "resumed_run_telemetry_cost": round9(resumed_telemetry_cost),
            "resumed_run_costs_equal": (resumed_journal_cost - resumed_telemetry_cost).abs() < 1e-9
                && resumed_without_telemetry == 0,
            "telemetry_cost_all_calls": round9(telemetry_cost_total),
            "telemetry_calls": telemetry.len(),
            "wall_s": round3(wall),
            "resumed_rss_peak_mib": report["rss_peak_mib"],
        })
    );
    Ok(())
}

fn round9(v: f64) -> f64 {
    (v * 1e9).round() / 1e9
}

fn prompt_counts(mocks: &[CapacityMock]) -> HashMap<String, u32> {
    let mut all = HashMap::new();
    for mock in mocks {
        for (prompt, n) in mock.prompts() {
            *all.entry(prompt).or_default() += n;
        }
    }
    all
}

async fn million_lines(args: &Args, dir: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let input = dir.join("million.jsonl");
    write_input(&input, args.million)?;
    let input_mib = std::fs::metadata(&input)?.len() as f64 / (1024.0 * 1024.0);
    let mock = CapacityMock::start(Regime::Unlimited {
        service: Duration::from_millis(args.fast_service_ms),
    })
    .await;
    let child = spawn_child(
        args,
        args.million,
        &input,
        &dir.join("million-out.jsonl"),
        &dir.join("million.journal"),
        &mock.base_url(),
        &[],
    )?;
    let report = tokio::task::spawn_blocking(move || child_report(child)).await??;
    println!(
        "{}",
        json!({
            "bench": "batch",
            "phase": "million_lines",
            "lines": args.million,
            "input_mib": (input_mib * 10.0).round() / 10.0,
            "results": report["results"],
            "succeeded": report["succeeded"],
            "journal": true,
            "wall_s": report["wall_s"],
            "rss_peak_mib": report["rss_peak_mib"],
            "rss_limit_mib": 100,
        })
    );
    Ok(())
}

/// The child: one job over `--input` (read line by line, as the CLI does), its output file, one
/// JSON line on stdout.
async fn child(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let (Some(input), Some(output), Some(journal), Some(urls)) =
        (&args.input, &args.output, &args.journal, &args.urls)
    else {
        return Err("--child needs --input, --output, --journal and --urls".into());
    };
    let mut env = mock_env();
    for (n, url) in urls.split(',').enumerate() {
        let source = format!("LLM__OPENAI__{}", n + 1);
        env.insert(format!("{source}__BASE_URL"), url.to_string());
        env.insert(format!("{source}__API_KEY"), "sk-test".into());
        env.insert(format!("{source}__MODEL"), "test-model".into());
    }
    if let Some(telemetry) = &args.telemetry {
        env.insert("PGW_TELEMETRY_BACKEND".into(), "sqlite".into());
        env.insert(
            "PGW_TELEMETRY_SQLITE_PATH".into(),
            telemetry.display().to_string(),
        );
    }
    if let Some(pricing) = &args.pricing {
        env.insert("PGW_PRICING_PATH".into(), pricing.display().to_string());
    }
    let gw = Gateway::from_settings(Settings::from_map(&env)?, "LLM").await?;
    let file = tokio::fs::File::open(input).await?;
    let lines = tokio_stream_lines(tokio::io::BufReader::new(file));
    let options = BatchOptions {
        scope: Some("LLM".into()),
        max_concurrency: args.max_concurrency,
        journal: Some(journal.clone()),
        ..BatchOptions::default()
    };
    let started = Instant::now();
    let mut out = BufWriter::new(std::fs::File::create(output)?);
    let mut job = gw.batch(lines, options)?;
    let (mut results, mut succeeded) = (0u64, 0u64);
    // When 10 % and 90 % of the items were out: the rate between them is the steady state,
    // without the pacers' start and the last items' tail.
    let (mut at10, mut at90) = (None, None);
    let items = args.items as u64;
    // Successes per second of the run, for the parent to see how long the pacers took.
    let mut per_second: Vec<u64> = Vec::new();
    while let Some(result) = job.next().await {
        results += 1;
        succeeded += u64::from(result.is_success());
        let second = started.elapsed().as_secs() as usize;
        if per_second.len() <= second {
            per_second.resize(second + 1, 0);
        }
        per_second[second] += u64::from(result.is_success());
        writeln!(out, "{}", result.line)?;
        if results == items / 10 {
            at10 = Some(started.elapsed().as_secs_f64());
        }
        if results == items * 9 / 10 {
            at90 = Some(started.elapsed().as_secs_f64());
        }
    }
    out.flush()?;
    let wall = started.elapsed().as_secs_f64();
    let progress = job.progress();
    drop(job);
    gw.shutdown().await;
    println!(
        "{}",
        json!({
            "results": results,
            "succeeded": succeeded,
            "from_journal": progress.from_journal,
            "calls": progress.calls,
            "errors": progress.errors,
            "cost": progress.cost,
            "wall_s": round3(wall),
            "steady_calls_per_s": at10.zip(at90).map(|(a, b)| (items * 8 / 10) as f64 / (b - a)),
            "per_second": per_second,
            "p50_ms": progress.p50_ms,
            "p99_ms": progress.p99_ms,
            "rss_peak_mib": rss_peak_mib(),
        })
    );
    Ok(())
}

/// The lines of a file as a stream, read as they are needed.
fn tokio_stream_lines(
    reader: tokio::io::BufReader<tokio::fs::File>,
) -> impl futures::Stream<Item = String> + Send + 'static {
    futures::stream::unfold(reader.lines(), |mut lines| async move {
        match lines.next_line().await {
            Ok(Some(line)) => Some((line, lines)),
            _ => None,
        }
    })
}
