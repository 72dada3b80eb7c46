//! `polygateway serve` under hostile clients (docs/behaviour.md §12.8), at scale: a flood of
//! half-open connections (a partial request head, then nothing) past the connection cap, then
//! slow-body connections, while a well-behaved client keeps calling.
//!
//! Three kinds of process, all this binary on loopback:
//! - the server (`--server`), built as `polygateway serve` builds it (Prometheus recorder,
//!   in-memory governance, one virtual key, no telemetry) with its default limits except an
//!   admin listener; its open descriptors and RSS are read from `/proc/<pid>/fd` and
//!   `/proc/<pid>/status` every 50 ms;
//! - attackers (`--attack`), each holding at most `--per-process` connections from its own
//!   loopback source address (`127.0.0.2`, `127.0.0.3`, …) so neither the open-file limit nor the
//!   ephemeral ports of one process bound the attack; each connection records when the server
//!   closed it;
//! - this process: the mock upstream and the well-behaved client, which calls `/healthz` on the
//!   admin listener and `POST /v1/chat/completions` on the main listener (one kept-alive
//!   connection, opened before the attack: a new connection past the cap is refused, which is
//!   the point of the cap) one after the other, without pause.
//!
//! ```text
//! cargo run --release --features server --example hostile -- [--flood 25000] [--slow 2000]
//! ```
//!
//! One JSON line per phase: `baseline` (the client alone), `half_open_flood`, `slow_body`; each
//! attack's line has the client's p99 before and during, its failures, the server's largest
//! descriptor count against its cap, its peak RSS, and how long after its timeout the last
//! hostile connection was closed, measured by the attacker from its last byte sent — so it
//! includes the wait in the server's accept queue while the flood arrives, and the attacker's
//! own scheduling (percentiles: the worst process's) (`hostile.closed_within_1s`: shed at the cap — a few shed
//! connections wait longer than 1 s in the accept queue and count as `closed_after_1s`; the
//! others were held to their timeout). Targets (`targets_met`): p99 during ≤ 2 × before + 50 ms, no
//! failed well-behaved request, descriptors ≤ cap + the process's own (listeners, runtime,
//! upstream pool: at most 64), every hostile connection closed by its timeout + 1 s.

use std::io::{BufRead, BufReader};
use std::net::{IpAddr, SocketAddr};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use polygateway::config::Settings;
use polygateway::server::{hash_key, install_metrics_recorder, KeyStore, Server};
use polygateway::Gateway;
use polygateway_testkit::mock_llm::{Behaviour, MockUpstream};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The server child's listener and its end (shared with `server_bench`).
#[path = "support/child.rs"]
mod child;

const KEY: &str = "pgw-hostile-key";
/// The server's defaults (docs/behaviour.md §12.8): the attacks are held to them.
const HEADER_TIMEOUT_S: f64 = 10.0;
const BODY_TIMEOUT_S: f64 = 20.0;
/// Descriptors the server process holds besides its client connections, at most.
const OWN_FDS: usize = 64;

#[derive(Parser)]
struct Args {
    /// Half-open connections of the flood.
    #[arg(long, default_value_t = 25_000)]
    flood: usize,
    /// Slow-body connections.
    #[arg(long, default_value_t = 2_000)]
    slow: usize,
    /// Connections per attacker process at most.
    #[arg(long, default_value_t = 12_500)]
    per_process: usize,
    /// Internal: run the server for MOCK_URL, its admin listener on ADMIN.
    #[arg(long, num_args = 2, value_names = ["MOCK_URL", "ADMIN"], hide = true)]
    server: Option<Vec<String>>,
    /// Internal: attack TARGET with N connections of KIND (`flood`, `slow`) from SOURCE.
    #[arg(long, num_args = 4, value_names = ["KIND", "N", "TARGET", "SOURCE"], hide = true)]
    attack: Option<Vec<String>>,
}

fn main() {
    let args = Args::parse();
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    if let Some(server) = &args.server {
        runtime.block_on(serve_child(&server[0], &server[1]));
    } else if let Some(a) = &args.attack {
        let report = runtime.block_on(attack(
            &a[0],
            a[1].parse().unwrap(),
            a[2].parse().unwrap(),
            a[3].parse().unwrap(),
        ));
        println!("{report}");
    } else {
        runtime.block_on(orchestrate(&args));
    }
}

/// The server process: prints its address, serves until its stdin closes.
async fn serve_child(mock_url: &str, admin: &str) {
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter("polygateway=info")
        .try_init();
    install_metrics_recorder();
    let env = [
        ("PGW_LIMITER_BACKEND", "memory"),
        ("PGW_BREAKER_BACKEND", "memory"),
        ("PGW_TELEMETRY_BACKEND", "none"),
        ("PGW_SERVER_ADMIN_BIND", admin),
        ("LLM__OPENAI__1__BASE_URL", mock_url),
        ("LLM__OPENAI__1__API_KEY", "sk-hostile"),
        ("LLM__OPENAI__1__MODEL", "hostile-model"),
        ("LLM__PACER", "off"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let gw = Gateway::from_settings(Settings::from_map(&env).unwrap(), "LLM")
        .await
        .unwrap();
    let keys = format!(
        r#"{{"keys": [{{"name": "client", "hash": "{}", "scopes": ["*"]}}]}}"#,
        hash_key(KEY)
    );
    let server = Server::new(gw.clone(), KeyStore::from_json(&keys).unwrap()).unwrap();
    child::serve_until_stdin_closes(server).await;
    gw.shutdown().await;
}

/// One attacker process: opens `n` connections from `source` to `target`, at most 512 connecting
/// at once, and reports when the server closed each (seconds after its last head byte).
async fn attack(kind: &str, n: usize, target: SocketAddr, source: IpAddr) -> Value {
    let _ = rlimit::increase_nofile_limit(u64::MAX);
    let slow = kind == "slow";
    let connecting = Arc::new(tokio::sync::Semaphore::new(512));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..n {
        let permit = Arc::clone(&connecting).acquire_owned().await.unwrap();
        tasks.spawn(async move {
            let socket = tokio::net::TcpSocket::new_v4().ok()?;
            socket.bind(SocketAddr::new(source, 0)).ok()?;
            let mut s = tokio::time::timeout(Duration::from_secs(10), socket.connect(target))
                .await
                .ok()?
                .ok()?;
            let head: &[u8] = if slow {
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{"
            } else {
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: "
            };
            let _ = s.write_all(head).await;
            let sent = Instant::now();
            drop(permit);
            let mut buf = [0u8; 1024];
            loop {
                tokio::select! {
                    read = s.read(&mut buf) => match read {
                        Ok(0) | Err(_) => return Some(Ok(sent.elapsed().as_secs_f64())),
                        Ok(_) => {}
                    },
                    () = tokio::time::sleep(Duration::from_millis(500)), if slow => {
                        let _ = s.write_all(b" ").await;
                    }
                    () = tokio::time::sleep_until((sent + Duration::from_secs(90)).into()) => {
                        return Some(Err(()));
                    }
                }
            }
        });
    }
    let (mut failed, mut at_once, mut never) = (0, 0, 0);
    let mut later = Vec::new();
    while let Some(done) = tasks.join_next().await {
        match done.ok().flatten() {
            None => failed += 1,
            Some(Err(())) => never += 1,
            Some(Ok(after)) if after < 1.0 => at_once += 1,
            Some(Ok(after)) => later.push(after),
        }
    }
    later.sort_by(f64::total_cmp);
    let at = |q: f64| {
        later
            .get(((later.len() as f64 * q) as usize).min(later.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0.0)
    };
    json!({"connect_failed": failed, "closed_within_1s": at_once, "closed_after_1s": later.len(),
           "not_closed_in_90s": never, "last_closed_after_s": at(1.0),
           "closed_after_p50_s": at(0.5), "closed_after_p99_s": at(0.99)})
}

/// What the well-behaved client saw in one phase.
#[derive(Default)]
struct Seen {
    healthz_ms: Vec<f64>,
    chat_ms: Vec<f64>,
    failed: u64,
}

fn p99(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let i = ((v.len() as f64 * 0.99).ceil() as usize).clamp(1, v.len()) - 1;
    (v[i] * 100.0).round() / 100.0
}

/// The server's open descriptors and RSS (KiB), largest seen per phase.
#[derive(Default, Clone, Copy)]
struct Peak {
    fds: usize,
    rss_kib: u64,
}

fn server_sample(pid: u32) -> Option<(usize, u64)> {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some((fds, rss))
}

async fn run_attackers(kind: &str, total: usize, per: usize, target: SocketAddr) -> Value {
    let mut children = Vec::new();
    let mut left = total;
    let mut i = 0;
    while left > 0 {
        let n = left.min(per);
        left -= n;
        i += 1;
        let source = format!("127.0.0.{}", i + 1);
        children.push(
            tokio::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--attack",
                    kind,
                    &n.to_string(),
                    &target.to_string(),
                    &source,
                ])
                .stdout(Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .expect("spawn an attacker"),
        );
    }
    let processes = children.len();
    let mut sum = json!({"connect_failed": 0, "closed_within_1s": 0, "closed_after_1s": 0,
                         "not_closed_in_90s": 0, "last_closed_after_s": 0.0});
    for child in children {
        let out = child.wait_with_output().await.unwrap();
        let report: Value = serde_json::from_slice(&out.stdout).expect("an attacker's report");
        for k in [
            "connect_failed",
            "closed_within_1s",
            "closed_after_1s",
            "not_closed_in_90s",
        ] {
            sum[k] = json!(sum[k].as_u64().unwrap() + report[k].as_u64().unwrap());
        }
        let last = sum["last_closed_after_s"]
            .as_f64()
            .unwrap()
            .max(report["last_closed_after_s"].as_f64().unwrap());
        sum["last_closed_after_s"] = json!((last * 1000.0).round() / 1000.0);
        for k in ["closed_after_p50_s", "closed_after_p99_s"] {
            let worst = sum[k]
                .as_f64()
                .unwrap_or(0.0)
                .max(report[k].as_f64().unwrap());
            sum[k] = json!((worst * 1000.0).round() / 1000.0);
        }
    }
    sum["processes"] = json!(processes);
    sum
}

async fn orchestrate(args: &Args) {
    let _ = rlimit::increase_nofile_limit(u64::MAX);
    let mock = MockUpstream::start(Behaviour::healthy_with("hi")).await;
    let admin = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--server", &mock.base_url(), &admin.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the server");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let target: SocketAddr = line.trim().parse().unwrap();
    let pid = child.id();
    // The server's log: its cap, and how many rate-limited shed warnings it wrote.
    let cap = Arc::new(AtomicU64::new(0));
    let warnings = Arc::new(AtomicU64::new(0));
    {
        let (cap, warnings) = (Arc::clone(&cap), Arc::clone(&warnings));
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.split("max_connections=").nth(1) {
                    let n: String = rest.chars().take_while(char::is_ascii_digit).collect();
                    cap.store(n.parse().unwrap_or(0), Ordering::SeqCst);
                }
                if line.contains("client connection(s)") {
                    warnings.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
    }
    let phase = Arc::new(Mutex::new("baseline"));
    let stop = Arc::new(AtomicBool::new(false));
    let seen: Arc<Mutex<std::collections::BTreeMap<&'static str, Seen>>> = Arc::default();
    let peaks: Arc<Mutex<std::collections::BTreeMap<&'static str, Peak>>> = Arc::default();
    let sampler = {
        let (phase, stop, peaks) = (Arc::clone(&phase), Arc::clone(&stop), Arc::clone(&peaks));
        tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                if let Some((fds, rss)) = server_sample(pid) {
                    let p = *phase.lock().unwrap();
                    let mut peaks = peaks.lock().unwrap();
                    let peak = peaks.entry(p).or_default();
                    peak.fds = peak.fds.max(fds);
                    peak.rss_kib = peak.rss_kib.max(rss);
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let client_task = {
        let (phase, stop, seen) = (Arc::clone(&phase), Arc::clone(&stop), Arc::clone(&seen));
        let chat_url = format!("http://{target}/v1/chat/completions");
        let health_url = format!("http://{admin}/healthz");
        tokio::spawn(async move {
            let client = reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .unwrap();
            let body = json!({"model": "LLM", "messages": [{"role": "user", "content": "hello"}]});
            while !stop.load(Ordering::SeqCst) {
                let p = *phase.lock().unwrap();
                let t = Instant::now();
                let health = client.get(&health_url).send().await;
                let health_ok = matches!(&health, Ok(r) if r.status() == 200);
                let health_ms = t.elapsed().as_secs_f64() * 1000.0;
                let t = Instant::now();
                let chat = client
                    .post(&chat_url)
                    .bearer_auth(KEY)
                    .json(&body)
                    .send()
                    .await;
                let chat_ok = match chat {
                    Ok(r) if r.status() == 200 => r.bytes().await.is_ok(),
                    _ => false,
                };
                let chat_ms = t.elapsed().as_secs_f64() * 1000.0;
                let mut seen = seen.lock().unwrap();
                let s = seen.entry(p).or_default();
                s.healthz_ms.push(health_ms);
                s.chat_ms.push(chat_ms);
                s.failed += u64::from(!health_ok) + u64::from(!chat_ok);
            }
        })
    };
    // Warm up, then the baseline.
    tokio::time::sleep(Duration::from_secs(1)).await;
    seen.lock().unwrap().clear();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let baseline = {
        let mut seen = seen.lock().unwrap();
        let s = seen.entry("baseline").or_default();
        let line = json!({
            "attack": "baseline",
            "requests": s.healthz_ms.len() + s.chat_ms.len(),
            "failed": s.failed,
            "healthz_p99_ms": p99(&mut s.healthz_ms),
            "chat_p99_ms": p99(&mut s.chat_ms),
            "server_fds": peaks.lock().unwrap().get("baseline").map(|p| p.fds),
            "server_rss_mib": peaks.lock().unwrap().get("baseline").map(|p| p.rss_kib / 1024),
        });
        println!("{line}");
        line
    };
    let before_h = baseline["healthz_p99_ms"].as_f64().unwrap();
    let before_c = baseline["chat_p99_ms"].as_f64().unwrap();
    for (name, kind, n, timeout_s) in [
        ("half_open_flood", "flood", args.flood, HEADER_TIMEOUT_S),
        ("slow_body", "slow", args.slow, BODY_TIMEOUT_S),
    ] {
        *phase.lock().unwrap() = name;
        let started = Instant::now();
        let attacked = run_attackers(kind, n, args.per_process, target).await;
        let lasted = started.elapsed().as_secs_f64();
        *phase.lock().unwrap() = "between";
        let line = {
            let mut seen = seen.lock().unwrap();
            let s = seen.entry(name).or_default();
            let (h, c) = (p99(&mut s.healthz_ms), p99(&mut s.chat_ms));
            let peak = peaks.lock().unwrap().get(name).copied().unwrap_or_default();
            let cap = cap.load(Ordering::SeqCst) as usize;
            let last = attacked["last_closed_after_s"].as_f64().unwrap();
            let met = h <= 2.0 * before_h + 50.0
                && c <= 2.0 * before_c + 50.0
                && s.failed == 0
                && peak.fds <= cap + OWN_FDS
                && last <= timeout_s + 1.0
                && attacked["not_closed_in_90s"] == 0;
            json!({
                "attack": name,
                "connections": n,
                "attack_s": (lasted * 10.0).round() / 10.0,
                "hostile": attacked,
                "timeout_s": timeout_s,
                "well_behaved_requests": s.healthz_ms.len() + s.chat_ms.len(),
                "well_behaved_failed": s.failed,
                "healthz_p99_ms_before": before_h,
                "healthz_p99_ms_during": h,
                "chat_p99_ms_before": before_c,
                "chat_p99_ms_during": c,
                "server_cap": cap,
                "server_max_fds": peak.fds,
                "server_max_rss_mib": peak.rss_kib / 1024,
                "shed_warnings_logged": warnings.load(Ordering::SeqCst),
                "targets_met": met,
            })
        };
        println!("{line}");
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    stop.store(true, Ordering::SeqCst);
    let _ = client_task.await;
    let _ = sampler.await;
    drop(child.stdin.take());
    let _ = child.wait();
}
