//! `polygateway serve` against the same client calling the mock upstream directly: what the
//! server adds per call, and what it costs in CPU and memory.
//!
//! The server runs as a child process (this binary re-executed with `--child`, built exactly as
//! `polygateway serve` builds it: Prometheus recorder, in-memory governance, `--keys` virtual
//! keys, no telemetry, `PACER=off` so the figures are the server's and not the pacer's warm-up).
//! Its CPU (utime + stime) and RSS are read from `/proc/<pid>/stat` and `/proc/<pid>/status`
//! around each measured run. The client (one reqwest client, closed loop) and the mock upstream share this
//! process; all three share the machine's cores.
//!
//! ```text
//! cargo run --release --features server,jemalloc --example server_bench -- [--calls 20000] [--concurrency 1,64]
//!     [--ingress-rounds 5] [--ingress-calls 4000] [--only overhead|ingress|sweep|refused] [--keys 1]
//! ```
//!
//! One JSON line per configuration (concurrency × streaming): `direct_calls_per_s`,
//! `server_calls_per_s`, `added_p50_ms`, `added_p99_ms`, `server_cpu_ms_per_call`,
//! `server_rss_mb`, with the underlying percentiles, and the same for the *floor* (`floor_*`): a
//! pass-through proxy in a child process of its own, built on the stack `serve` is built on
//! (hyper's HTTP/1 server with the same settings, a reqwest client like the transport's, the same
//! runtime and allocator) and governing nothing — no key, no admission, no watchdog, no parse of
//! the upstream's answer, which it streams back as it comes. What the floor adds is what any
//! proxy on this stack adds on this machine; `serve`'s figures above the floor are what
//! governing a call costs. Then the ingress comparison, paired: each of
//! `--ingress-rounds` rounds runs streamed calls through the `chat`, `messages` and `responses`
//! ingresses on the same source, one after another (the order rotating); one line per ingress and
//! concurrency with its median calls/s and server CPU per call, and `vs_chat` / `cpu_vs_chat`:
//! the median over rounds of its ratio to the chat ingress in the same round (the target is
//! `vs_chat` ≥ 0.9 at the top concurrency).
//!
//! Then the sustained-load sweep (`--sweep`, default `64,128,256,512,1024`), run on `serve` and then
//! on the floor (`proxy`: `polygateway` or `floor` in each line): a second server on a
//! mock that answers after 20 ms (a real upstream's shape: the server holds every request while
//! it waits), non-streamed calls at each concurrency, one line each (`sweep`), then a summary
//! line (`sweep_summary`): the highest concurrency whose p99 stays under 1 s and its calls/s,
//! the server's CPU per call there, and its RSS idle (before the sweep), at 512 concurrent
//! requests, at its peak (`VmHWM`), 6 s after the callers hung up (`rss_after_6s_mb`) and 10 s
//! after (`rss_after_mb`, `after_vs_idle`: when hyper's pool has reaped every upstream
//! connection past its 4 s idle timeout), with its open descriptors then. Every line names the
//! server's allocator (`jemalloc` with the feature of that name, else `system`), its worker
//! threads (`server_workers`: `PGW_SERVER_WORKERS` from this process's environment, as
//! `polygateway serve` reads it, else one per core) and the virtual keys its key file holds
//! (`server_keys`, `--keys`: the bench's own, last, after the others; what authenticating a
//! request costs may grow with their number).
//!
//! Last, `refused`: a quarter of `--calls` requests at each `--concurrency`, all presenting one
//! key the key file does not hold, as a client with a revoked key in a retry loop does; one line
//! each with the server's CPU per 401.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use futures::StreamExt;
use polygateway::config::Settings;
use polygateway::server::{hash_key, install_metrics_recorder, KeyStore, Server};
use polygateway::Gateway;
use polygateway_testkit::mock_llm::{Behaviour, MockUpstream};
use serde_json::{json, Value};

/// The `polygateway` binary's allocator, with the feature of that name (ARCHITECTURE.md, "The
/// binary's allocator").
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The child processes' listener and their end (shared with `hostile`).
#[path = "support/child.rs"]
mod child;

/// What `polygateway serve`'s workers do when they go idle, the same file.
#[cfg(feature = "jemalloc")]
#[path = "../src/bin/polygateway/idle_cache.rs"]
mod idle_cache;

const KEY: &str = "pgw-bench-key";
/// A key no entry of the key file holds: the `refused` part presents it on every request.
const WRONG_KEY: &str = "pgw-revoked-key";

/// What every response of a run must be: its status and, for a stream, what its last frame
/// contains.
#[derive(Clone, Copy)]
struct Answer {
    status: u16,
    ends_with: Option<&'static str>,
}

impl Answer {
    /// 200, and a stream's last frame contains `end`.
    fn ok(end: Option<&'static str>) -> Self {
        Self {
            status: 200,
            ends_with: end,
        }
    }
}
/// The virtual keys in the server's key file (`--keys`), stated in every line.
static SERVER_KEYS: AtomicUsize = AtomicUsize::new(1);
/// The server's global allocator (feature `jemalloc`), stated in every line.
const ALLOCATOR_NAME: &str = if cfg!(feature = "jemalloc") {
    "jemalloc"
} else {
    "system"
};

/// The parts of the bench `--only` selects.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Part {
    Overhead,
    Ingress,
    Sweep,
    Refused,
}

#[derive(Parser)]
struct Args {
    /// Measured calls per configuration at the highest concurrency (concurrency 1 runs a tenth).
    #[arg(long, default_value_t = 20_000)]
    calls: usize,
    /// Concurrency levels.
    #[arg(long, value_delimiter = ',', default_value = "1,64")]
    concurrency: Vec<usize>,
    /// Concurrency levels of the sustained-load sweep against a 20 ms upstream (empty: none).
    #[arg(long, value_delimiter = ',', default_value = "64,128,256,512,1024")]
    sweep: Vec<usize>,
    /// Rounds of the ingress comparison (each round runs chat, messages and responses once).
    #[arg(long, default_value_t = 5)]
    ingress_rounds: usize,
    /// Streamed calls per ingress and round at the highest concurrency (concurrency 1 runs a
    /// quarter).
    #[arg(long, default_value_t = 4_000)]
    ingress_calls: usize,
    /// Run only one part: `overhead` (server vs direct), `ingress`, `sweep` or `refused`.
    #[arg(long, value_enum)]
    only: Option<Part>,
    /// Virtual keys in the server's key file: the bench's own and `keys - 1` others before it.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    keys: u32,
    /// Internal: run the server for MOCK_URL with the keys file KEYS.
    #[arg(long, num_args = 2, value_names = ["MOCK_URL", "KEYS"], hide = true)]
    child: Option<Vec<String>>,
    /// Internal: run the floor proxy in front of MOCK_URL.
    #[arg(long, value_name = "MOCK_URL", hide = true)]
    floor: Option<String>,
}

fn main() {
    let args = Args::parse();
    // A child's runtime as `polygateway serve` builds it: `PGW_SERVER_WORKERS` worker threads
    // when set, else one per core.
    let child_runtime = || {
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        builder.enable_all().worker_threads(server_workers());
        #[cfg(feature = "jemalloc")]
        builder.on_thread_park(idle_cache::on_park);
        builder.build().expect("tokio runtime")
    };
    match (args.child, args.floor) {
        (Some(child), _) => child_runtime().block_on(serve_child(&child[0], &child[1])),
        (None, Some(mock_url)) => child_runtime().block_on(floor_child(&mock_url)),
        (None, None) => {
            SERVER_KEYS.store(args.keys as usize, Ordering::Relaxed);
            tokio::runtime::Runtime::new()
                .expect("tokio runtime")
                .block_on(async {
                    let runs = |part| args.only.is_none_or(|only| only == part);
                    if runs(Part::Overhead) {
                        bench(args.calls, &args.concurrency).await;
                    }
                    if runs(Part::Ingress) {
                        ingress(args.ingress_calls, &args.concurrency, args.ingress_rounds).await;
                    }
                    if runs(Part::Sweep) && !args.sweep.is_empty() {
                        sweep(&args.sweep).await;
                    }
                    if runs(Part::Refused) {
                        refused(args.calls / 4, &args.concurrency).await;
                    }
                })
        }
    }
}

/// The server process: prints its address, serves until its stdin closes.
async fn serve_child(mock_url: &str, keys: &str) {
    install_metrics_recorder();
    let env = [
        ("PGW_LIMITER_BACKEND", "memory"),
        ("PGW_BREAKER_BACKEND", "memory"),
        ("PGW_TELEMETRY_BACKEND", "none"),
        ("LLM__OPENAI__1__BASE_URL", mock_url),
        ("LLM__OPENAI__1__API_KEY", "sk-bench"),
        ("LLM__OPENAI__1__MODEL", "bench-model"),
        ("LLM__PACER", "off"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let gw = Gateway::from_settings(Settings::from_map(&env).unwrap(), "LLM")
        .await
        .unwrap();
    let server = Server::new(gw.clone(), KeyStore::from_file(keys).unwrap()).unwrap();
    child::serve_until_stdin_closes(server).await;
    gw.shutdown().await;
}

/// The floor: every request's body sent on to the mock's chat endpoint, the answer streamed back
/// as it comes. hyper's HTTP/1 server with `serve`'s settings (keep-alive, `TCP_NODELAY`) and a
/// reqwest client with the transport's (`TCP_NODELAY`, no proxy, 4 s pool idle timeout); nothing
/// else, so that what it adds is the stack's share of what `serve` adds.
async fn floor_child(mock_url: &str) {
    let client = reqwest::Client::builder()
        .tcp_nodelay(true)
        .no_proxy()
        .pool_idle_timeout(Duration::from_secs(4))
        .build()
        .unwrap();
    let upstream: Arc<str> = format!("{mock_url}/chat/completions").into();
    let (listener, stdin_closed) = child::child_listener().await;
    let mut http = hyper::server::conn::http1::Builder::new();
    http.keep_alive(true);
    let http = Arc::new(http);
    tokio::pin!(stdin_closed);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => accepted.unwrap().0,
            _ = &mut stdin_closed => return,
        };
        let _ = stream.set_nodelay(true);
        let (client, upstream, http) = (client.clone(), Arc::clone(&upstream), Arc::clone(&http));
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                forward(client.clone(), Arc::clone(&upstream), request)
            });
            let _ = http
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
        });
    }
}

/// One request through the floor.
async fn forward(
    client: reqwest::Client,
    upstream: Arc<str>,
    request: hyper::Request<hyper::body::Incoming>,
) -> Result<hyper::Response<axum::body::Body>, std::convert::Infallible> {
    let body = axum::body::to_bytes(axum::body::Body::new(request.into_body()), 1 << 20)
        .await
        .expect("the request's body");
    let answer = client
        .post(&*upstream)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .bearer_auth("sk-bench")
        .body(body)
        .send()
        .await
        .expect("the mock answers");
    let mut response = hyper::Response::builder().status(answer.status().as_u16());
    if let Some(kind) = answer.headers().get(reqwest::header::CONTENT_TYPE) {
        response = response.header(hyper::header::CONTENT_TYPE, kind.as_bytes());
    }
    Ok(response
        .body(axum::body::Body::from_stream(answer.bytes_stream()))
        .unwrap())
}

struct ChildServer {
    child: Child,
    base: String,
    ticks_per_s: f64,
}

impl ChildServer {
    /// `serve` in front of `mock_url`, with the key file `keys`.
    fn serve(mock_url: &str, keys: &str) -> Self {
        Self::start(&["--child", mock_url, keys])
    }

    /// The floor proxy in front of `mock_url`.
    fn floor(mock_url: &str) -> Self {
        Self::start(&["--floor", mock_url])
    }

    /// This binary re-executed with `child_args`.
    fn start(child_args: &[&str]) -> Self {
        // `SERVER_BENCH_CHILD_WRAPPER` runs each child (the server, the floor) under a profiler,
        // e.g. `valgrind --tool=callgrind --callgrind-out-file=/tmp/server.%p`.
        let exe = std::env::current_exe().unwrap();
        let wrapper = std::env::var("SERVER_BENCH_CHILD_WRAPPER").unwrap_or_default();
        let mut command = match wrapper.split_whitespace().collect::<Vec<_>>().split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(exe);
                c
            }
            None => Command::new(exe),
        };
        let mut child = command
            .args(child_args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn the server child");
        // The first line that is an address (a wrapper may print lines of its own); what the
        // child prints after it goes to stderr.
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let line = lines
            .by_ref()
            .map(Result::unwrap)
            .find(|l| l.trim().parse::<std::net::SocketAddr>().is_ok())
            .expect("the server child prints its address");
        std::thread::spawn(move || lines.map_while(Result::ok).for_each(|l| eprintln!("{l}")));
        let ticks = Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100.0);
        Self {
            base: format!("http://{}", line.trim()),
            child,
            ticks_per_s: ticks,
        }
    }

    /// utime + stime of the server process, seconds.
    fn cpu_s(&self) -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap();
        // Fields after the command name (which may contain spaces) — utime, stime are 14, 15.
        let after = &stat[stat.rfind(')').unwrap() + 2..];
        let fields: Vec<&str> = after.split(' ').collect();
        let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
        ticks / self.ticks_per_s
    }

    fn rss_mb(&self) -> f64 {
        self.status_mb("VmRSS:")
    }

    /// The server's peak resident set so far (`VmHWM`).
    fn peak_rss_mb(&self) -> f64 {
        self.status_mb("VmHWM:")
    }

    fn status_mb(&self, field: &str) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map_or(0.0, |kb| kb / 1024.0)
    }
}

impl Drop for ChildServer {
    fn drop(&mut self) {
        drop(self.child.stdin.take()); // the child drains and exits
        let _ = self.child.wait();
    }
}

struct Measured {
    calls_per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
}

/// One measured load of `bench`: `calls` calls by `concurrency` workers, after a tenth as many
/// (at least 200) to warm the path up.
struct Load {
    stream: bool,
    concurrency: usize,
    calls: usize,
}

impl Load {
    /// The load sent to `url`, and the CPU per call (ms) of `child`, the process that answered
    /// it (0 without one: the mock, measured directly).
    async fn through(
        &self,
        child: Option<&ChildServer>,
        client: &reqwest::Client,
        url: &str,
        auth: Option<&str>,
    ) -> (Measured, f64) {
        let (stream, concurrency) = (self.stream, self.concurrency);
        let warm = (self.calls / 10).max(200);
        run(client, url, auth, stream, concurrency, warm).await;
        let cpu_before = child.map_or(0.0, ChildServer::cpu_s);
        let measured = run(client, url, auth, stream, concurrency, self.calls).await;
        let cpu = child.map_or(0.0, ChildServer::cpu_s) - cpu_before;
        (measured, cpu * 1e3 / self.calls as f64)
    }
}

/// `calls` closed-loop calls by `concurrency` workers; every response is read to its end.
async fn run(
    client: &reqwest::Client,
    url: &str,
    auth: Option<&str>,
    stream: bool,
    concurrency: usize,
    calls: usize,
) -> Measured {
    let body = json!({
        "model": "LLM",
        "messages": [{"role": "user", "content": "hello"}],
        "stream": stream,
    });
    run_body(
        client,
        url,
        auth,
        body,
        Answer::ok(stream.then_some("data: [DONE]\n\n")),
        concurrency,
        calls,
    )
    .await
}

/// `run` with any request body, every response being `answer`.
async fn run_body(
    client: &reqwest::Client,
    url: &str,
    auth: Option<&str>,
    body: Value,
    answer: Answer,
    concurrency: usize,
    calls: usize,
) -> Measured {
    let body = Arc::new(body);
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..concurrency {
        let (client, url, body, next) = (
            client.clone(),
            url.to_string(),
            Arc::clone(&body),
            Arc::clone(&next),
        );
        let auth = auth.map(str::to_string);
        workers.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < calls {
                let t = Instant::now();
                let mut req = client.post(&url).json(&*body);
                if let Some(key) = &auth {
                    req = req.bearer_auth(key);
                }
                let resp = req.send().await.expect("the call is answered");
                assert_eq!(resp.status().as_u16(), answer.status, "{}", resp.status());
                let mut bytes = resp.bytes_stream();
                let mut tail = Vec::new();
                while let Some(chunk) = bytes.next().await {
                    tail = chunk.expect("the body is read").to_vec();
                }
                if let Some(end) = answer.ends_with {
                    let last = String::from_utf8_lossy(&tail);
                    assert!(last.contains(end), "stream ended cleanly: {last}");
                }
                latencies.push(t.elapsed().as_secs_f64() * 1e3);
            }
            latencies
        }));
    }
    let mut all = Vec::with_capacity(calls);
    for w in workers {
        all.extend(w.await.unwrap());
    }
    let elapsed = started.elapsed().as_secs_f64();
    all.sort_by(f64::total_cmp);
    let pct = |p: f64| all[((all.len() as f64 - 1.0) * p).round() as usize];
    Measured {
        calls_per_s: all.len() as f64 / elapsed,
        p50_ms: pct(0.5),
        p99_ms: pct(0.99),
    }
}

/// A mock upstream answering after `ttft`, the bench's keys file, and a server child on them.
async fn setup(
    ttft: Duration,
) -> (
    MockUpstream,
    tempfile::TempDir,
    ChildServer,
    reqwest::Client,
) {
    let mock = MockUpstream::start(Behaviour::Healthy {
        ttft,
        inter_token: Duration::ZERO,
        chunks: 4,
        content: "Hello from the mock upstream.".into(),
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys.json");
    // The bench's key last: a search in file order would try every other key first.
    let entries: Vec<Value> = (1..server_keys())
        .map(|i| (format!("other-{i}"), format!("pgw-other-key-{i}")))
        .chain([("bench".to_string(), KEY.to_string())])
        .map(|(name, key)| json!({"name": name, "hash": hash_key(&key), "scopes": ["*"]}))
        .collect();
    std::fs::write(&keys, json!({ "keys": entries }).to_string()).unwrap();
    let server = ChildServer::serve(&mock.base_url(), keys.to_str().unwrap());
    (mock, dir, server, load_client())
}

/// The load generator's client: a pool as large as the highest concurrency, `TCP_NODELAY`.
fn load_client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(1024)
        .tcp_nodelay(true)
        .build()
        .unwrap()
}

async fn bench(calls: usize, levels: &[usize]) {
    let (mock, _dir, server, client) = setup(Duration::ZERO).await;
    let floor = ChildServer::floor(&mock.base_url());
    let direct_url = format!("{}/chat/completions", mock.base_url());
    let floor_url = format!("{}/v1/chat/completions", floor.base);
    let server_url = format!("{}/v1/chat/completions", server.base);
    let top = levels.iter().copied().max().unwrap_or(1);
    for &concurrency in levels {
        let n = if concurrency == 1 && top > 1 {
            (calls / 10).max(500)
        } else {
            calls
        };
        for stream in [false, true] {
            let load = Load {
                stream,
                concurrency,
                calls: n,
            };
            let (direct, _) = load.through(None, &client, &direct_url, None).await;
            let (floored, floor_cpu_ms_per_call) =
                load.through(Some(&floor), &client, &floor_url, None).await;
            let (served, cpu_ms_per_call) = load
                .through(Some(&server), &client, &server_url, Some(KEY))
                .await;
            let line: Value = json!({
                "concurrency": concurrency,
                "stream": stream,
                "calls": n,
                "direct_calls_per_s": direct.calls_per_s.round(),
                "server_calls_per_s": served.calls_per_s.round(),
                "direct_p50_ms": round3(direct.p50_ms),
                "server_p50_ms": round3(served.p50_ms),
                "direct_p99_ms": round3(direct.p99_ms),
                "server_p99_ms": round3(served.p99_ms),
                "added_p50_ms": round3(served.p50_ms - direct.p50_ms),
                "added_p99_ms": round3(served.p99_ms - direct.p99_ms),
                "server_cpu_ms_per_call": round3(cpu_ms_per_call),
                "server_rss_mb": (server.rss_mb() * 10.0).round() / 10.0,
                "floor_calls_per_s": floored.calls_per_s.round(),
                "floor_p50_ms": round3(floored.p50_ms),
                "floor_p99_ms": round3(floored.p99_ms),
                "floor_added_p50_ms": round3(floored.p50_ms - direct.p50_ms),
                "floor_added_p99_ms": round3(floored.p99_ms - direct.p99_ms),
                "floor_cpu_ms_per_call": round3(floor_cpu_ms_per_call),
                "floor_rss_mb": (floor.rss_mb() * 10.0).round() / 10.0,
                "allocator": ALLOCATOR_NAME,
                "server_workers": server_workers(),
                "server_keys": server_keys(),
            });
            println!("{line}");
        }
    }
}

/// Streamed calls through each ingress (`chat`, `messages`, `responses`) on the same source,
/// paired: every round runs each ingress once (the order rotating from round to round), and an
/// ingress's `vs_chat` is the median over rounds of its calls/s over the chat ingress's in the
/// same round (`cpu_vs_chat`: the same for the server's CPU per call). One line per ingress and
/// concurrency.
async fn ingress(calls: usize, levels: &[usize], rounds: usize) {
    let (_mock, _dir, server, client) = setup(Duration::ZERO).await;
    let hello = json!([{"role": "user", "content": "hello"}]);
    let ingresses: [(&str, &str, Value, &'static str); 3] = [
        (
            "chat",
            "/v1/chat/completions",
            json!({"model": "LLM", "messages": hello, "stream": true}),
            "data: [DONE]\n\n",
        ),
        (
            "messages",
            "/v1/messages",
            json!({"model": "LLM", "max_tokens": 64, "messages": hello, "stream": true}),
            "\"message_stop\"}\n\n",
        ),
        (
            "responses",
            "/v1/responses",
            json!({"model": "LLM", "input": "hello", "stream": true}),
            "\"type\":\"response.completed\"",
        ),
    ];
    let top = levels.iter().copied().max().unwrap_or(1);
    let rounds = rounds.max(1);
    for &concurrency in levels {
        let n = if concurrency == 1 && top > 1 {
            (calls / 4).max(200)
        } else {
            calls
        };
        for (_, path, body, end) in &ingresses {
            let url = format!("{}{path}", server.base);
            let warm = (n / 5).max(100);
            run_body(
                &client,
                &url,
                Some(KEY),
                body.clone(),
                Answer::ok(Some(end)),
                concurrency,
                warm,
            )
            .await;
        }
        // Per ingress, per round: calls/s, CPU µs per call, p50, p99.
        let mut seen = vec![Vec::new(); ingresses.len()];
        for round in 0..rounds {
            for k in 0..ingresses.len() {
                let i = (k + round) % ingresses.len();
                let (_, path, body, end) = &ingresses[i];
                let url = format!("{}{path}", server.base);
                let cpu_before = server.cpu_s();
                let m = run_body(
                    &client,
                    &url,
                    Some(KEY),
                    body.clone(),
                    Answer::ok(Some(end)),
                    concurrency,
                    n,
                )
                .await;
                let cpu_us = (server.cpu_s() - cpu_before) * 1e6 / n as f64;
                seen[i].push((m.calls_per_s, cpu_us, m.p50_ms, m.p99_ms));
            }
        }
        for (i, (name, ..)) in ingresses.iter().enumerate() {
            let ratios: Vec<f64> = (0..rounds).map(|r| seen[i][r].0 / seen[0][r].0).collect();
            let cpu_ratios: Vec<f64> = (0..rounds).map(|r| seen[i][r].1 / seen[0][r].1).collect();
            let of = |f: fn(&(f64, f64, f64, f64)) -> f64| median(seen[i].iter().map(f).collect());
            let line = json!({
                "ingress": name, "concurrency": concurrency, "stream": true,
                "rounds": rounds, "calls_per_round": n,
                "server_calls_per_s": of(|s| s.0).round(),
                "vs_chat": round3(median(ratios.clone())),
                "vs_chat_rounds": ratios.iter().map(|r| round3(*r)).collect::<Vec<_>>(),
                "server_cpu_us_per_call": of(|s| s.1).round(),
                "cpu_vs_chat": round3(median(cpu_ratios)),
                "server_p50_ms": round3(of(|s| s.2)), "server_p99_ms": round3(of(|s| s.3)),
                "server_workers": server_workers(),
                "server_keys": server_keys(),
            });
            println!("{line}");
        }
    }
}

/// A client presenting a key the server does not hold, over and over (a revoked or mistyped key
/// in a retry loop): what each 401 costs the server with `--keys` configured. One line per
/// concurrency (`refused`).
async fn refused(calls: usize, levels: &[usize]) {
    let (_mock, _dir, server, client) = setup(Duration::ZERO).await;
    let url = format!("{}/v1/chat/completions", server.base);
    let body = json!({"model": "LLM", "messages": [{"role": "user", "content": "hello"}]});
    let refusal = Answer {
        status: 401,
        ends_with: None,
    };
    for &concurrency in levels {
        let refused_n = |n| {
            run_body(
                &client,
                &url,
                Some(WRONG_KEY),
                body.clone(),
                refusal,
                concurrency,
                n,
            )
        };
        refused_n((calls / 10).max(200)).await;
        let cpu_before = server.cpu_s();
        let m = refused_n(calls).await;
        let cpu_ms_per_call = (server.cpu_s() - cpu_before) * 1e3 / calls as f64;
        let line = json!({
            "refused": "repeated_wrong_key", "concurrency": concurrency, "calls": calls,
            "server_calls_per_s": m.calls_per_s.round(),
            "server_p50_ms": round3(m.p50_ms), "server_p99_ms": round3(m.p99_ms),
            "server_cpu_ms_per_call": round3(cpu_ms_per_call),
            "allocator": ALLOCATOR_NAME,
            "server_workers": server_workers(),
            "server_keys": server_keys(),
        });
        println!("{line}");
    }
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    match xs.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => xs[n / 2],
        n => (xs[n / 2 - 1] + xs[n / 2]) / 2.0,
    }
}

/// Sustained load on a 20 ms upstream: what the server costs while it holds many requests, then
/// what the floor costs under the same load.
async fn sweep(levels: &[usize]) {
    let (mock, _dir, server, client) = setup(Duration::from_millis(20)).await;
    sweep_on("polygateway", &server, client, levels).await;
    drop(server);
    let floor = ChildServer::floor(&mock.base_url());
    sweep_on("floor", &floor, load_client(), levels).await;
}

/// The sweep on one proxy (`proxy` names it in every line); `client` is dropped at the end, as
/// callers that hang up.
async fn sweep_on(proxy: &str, server: &ChildServer, client: reqwest::Client, levels: &[usize]) {
    let url = format!("{}/v1/chat/completions", server.base);
    // Idle: the server has started and answered a few calls (its pools and tables exist).
    run(&client, &url, Some(KEY), false, 4, 200).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle = server.rss_mb();
    let mut best: Option<Value> = None;
    let mut at_512 = None;
    for &concurrency in levels {
        // About two seconds of calls at the upstream's pace (50 calls/s per caller).
        let calls = (concurrency * 100).max(2_000);
        run(
            &client,
            &url,
            Some(KEY),
            false,
            concurrency,
            concurrency * 10,
        )
        .await;
        let cpu_before = server.cpu_s();
        let m = run(&client, &url, Some(KEY), false, concurrency, calls).await;
        let cpu_us = (server.cpu_s() - cpu_before) * 1e6 / calls as f64;
        let rss = server.rss_mb();
        if concurrency == 512 {
            at_512 = Some(rss);
        }
        let line = json!({
            "sweep": concurrency, "proxy": proxy, "upstream_ms": 20, "stream": false, "calls": calls,
            "server_calls_per_s": m.calls_per_s.round(),
            "server_p50_ms": round3(m.p50_ms), "server_p99_ms": round3(m.p99_ms),
            "server_cpu_us_per_call": cpu_us.round(),
            "server_rss_mb": (rss * 10.0).round() / 10.0,
            "allocator": ALLOCATOR_NAME,
            "server_workers": server_workers(),
            "server_keys": server_keys(),
        });
        println!("{line}");
        if m.p99_ms < 1_000.0 {
            best = Some(line);
        }
    }
    // The load ends: the callers hang up. The server's idle upstream connections pass their idle
    // timeout (`POOL_IDLE_TIMEOUT_S`, 4 s) — hyper's pool reaps them on an interval as long as
    // the timeout, so one lives 4 to 8 s idle: read at 6 s, and at 10 s, when all have gone.
    drop(client);
    let fds =
        || std::fs::read_dir(format!("/proc/{}/fd", server.child.id())).map_or(0, Iterator::count);
    tokio::time::sleep(Duration::from_secs(6)).await;
    let (after_6s, fds_6s) = (server.rss_mb(), fds());
    tokio::time::sleep(Duration::from_secs(4)).await;
    let (after, fds_after) = (server.rss_mb(), fds());
    let mb = |x: f64| (x * 10.0).round() / 10.0;
    let summary = json!({
        "sweep_summary": true,
        "proxy": proxy,
        "best_under_1s_p99": best,
        "rss_idle_mb": mb(idle),
        "rss_at_512_mb": at_512.map(mb),
        "rss_peak_mb": mb(server.peak_rss_mb()),
        "rss_after_6s_mb": mb(after_6s),
        "server_fds_after_6s": fds_6s,
        "rss_after_mb": mb(after),
        "after_vs_idle": (after / idle * 1e3).round() / 1e3,
        "server_fds_after": fds_after,
        "allocator": ALLOCATOR_NAME,
        "server_workers": server_workers(),
        "server_keys": server_keys(),
    });
    println!("{summary}");
}

/// The server child's worker threads: `PGW_SERVER_WORKERS` (inherited from this process's
/// environment), else one per core, as `polygateway serve` decides. Stated in every line.
fn server_workers() -> usize {
    match std::env::var("PGW_SERVER_WORKERS") {
        Ok(n) => n
            .parse()
            .ok()
            .filter(|&n| n > 0)
            .expect("PGW_SERVER_WORKERS: a positive whole number"),
        Err(_) => std::thread::available_parallelism().map_or(1, usize::from),
    }
}

/// The virtual keys in the server's key file (`--keys`). Stated in every line.
fn server_keys() -> usize {
    SERVER_KEYS.load(Ordering::Relaxed)
}

fn round3(x: f64) -> f64 {
    (x * 1e3).round() / 1e3
}
