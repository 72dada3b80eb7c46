//! Runtime overhead per call against a bare reqwest call to the same healthy mock, measured side
//! by side in one run: concurrency 1 and 256, streaming and not.
//!
//! Runtime variants, each its own gateway over the same mock:
//! - `memory`: in-memory governance on (selection, pacer, breaker, six gates, retry loop), no
//!   cache, no telemetry — the baseline the goal is about;
//! - `memory+sqlite`: the same with SQLite telemetry on (recording is off the call path);
//! - `redis`: limiter and breaker in Redis at `REDIS_URL` (default `redis://127.0.0.1:6379`;
//!   skipped when unreachable). Its rows also carry what the server saw during the measured
//!   calls, from `INFO` deltas summed over every primary (one server, or each primary of a
//!   cluster): `redis_round_trips_per_attempt` (script calls — EVAL/EVALSHA/FCALL — per governed
//!   call; every call here is one successful attempt; commands a script runs inside are not round
//!   trips and are not counted), `redis_cpu_us_per_call` (server user+sys CPU) and the ceiling
//!   that CPU implies for one server core, `redis_cpu_ceiling_calls_per_s`.
//!
//! `chat_stream()` is measured against `chat()` on the streaming rows. The first JSON line is one
//! loopback `EVALSHA` round trip (`evalsha_p50_us`, a script that returns 1), the yardstick of the
//! Redis variant's added latency, and one attempt's two scripts driven straight from a task
//! without the runtime (`attempt_admit_p50_us`: `RedisAttempts::admit`;
//! `attempt_admit_finish_p50_us`: admit, then the finish of a success, awaited). At concurrency 1
//! the Redis row also carries `added_p50_target_us` (2 × that EVALSHA) and `added_p50_floor_us`:
//! the admission's p50 from a task plus the memory variant's added p50 — what the Redis variant
//! would add if its finish and every contention were free (a sum of medians: an estimate).
//!
//! ```text
//! cargo run --release --example overhead --features redis -- [--calls N] [--concurrency 1,64,256] [--rounds 3]
//! REDIS_URL=redis://127.0.0.1:6390 cargo run --release --example overhead --features redis
//! ```
//!
//! Each configuration runs `--rounds` times (default 3), the direct calls and every variant
//! interleaved (on the streaming rows, `chat_stream()` right after the memory variant's `chat()`);
//! its figures are medians over the rounds, the Redis server's counters are summed
//! over them, and `calls_per_s_vs_memory` is the median of each round's ratio. The last lines of
//! output are one JSON object per configuration. The mock runs in the same process on the same
//! cores, so absolute figures include its cost; compare the columns. Point
//! `REDIS_URL` at a server nobody else uses: the counters are server-wide.

#[path = "support/process_cpu.rs"]
mod process_cpu;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fred::prelude::{Builder, Client, ClientLike, Config};
use fred::types::scripts::Script;
use fred::types::{ClusterHash, CustomCommand, InfoKind};
use futures::StreamExt;
use polygateway::config::{Secret, Settings};
use polygateway::ports::{
    AttemptAdmit, AttemptBackend, AttemptOutcome, BreakerAction, BreakerConfig, BreakerVerdict,
    GateRequest, Limits,
};
use polygateway::redis::{RedisAttempts, RedisGate, RedisGovernance};
use polygateway::{CallOptions, ChatEvent, Gateway, Message};
use polygateway_testkit::mock_llm::{Behaviour, MockUpstream};
use process_cpu::process_cpu_s;
use serde_json::{json, Value};

#[derive(Clone, Copy)]
struct Run {
    p50_us: f64,
    p99_us: f64,
    calls_per_s: f64,
    /// This process's CPU (user + sys) per call over the measured window.
    process_cpu_us_per_call: Option<f64>,
}

/// The middle value (the upper one of an even count).
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    values[values.len() / 2]
}

impl Run {
    /// Each figure's median over `runs` (not one run's figures).
    fn median(runs: &[Run]) -> Run {
        let of = |f: fn(&Run) -> f64| median(runs.iter().map(f).collect());
        let cpu: Option<Vec<f64>> = runs.iter().map(|r| r.process_cpu_us_per_call).collect();
        Run {
            p50_us: of(|r| r.p50_us),
            p99_us: of(|r| r.p99_us),
            calls_per_s: of(|r| r.calls_per_s),
            process_cpu_us_per_call: cpu.map(median),
        }
    }

    fn json(&self) -> Value {
        json!({
            "p50_us": self.p50_us,
            "p99_us": self.p99_us,
            "calls_per_s": self.calls_per_s,
            "process_cpu_us_per_call": self.process_cpu_us_per_call,
        })
    }
}

/// Counters of the Redis primaries behind `REDIS_URL`, read with `INFO` (server-side truth).
struct RedisServers {
    primaries: Vec<Client>,
}

/// What the primaries did between two [`RedisServers::sample`]s.
#[derive(Clone, Copy, Default)]
struct ServerSample {
    /// EVAL/EVALSHA/FCALL calls (the network round trips of the governance scripts).
    script_calls: f64,
    /// Time the server spent executing those calls, µs (`usec` of the same commandstats).
    script_us: f64,
    /// used_cpu_user + used_cpu_sys, seconds.
    cpu_s: f64,
}

impl ServerSample {
    /// Add what happened between `before` and `after`.
    fn add_delta(&mut self, after: &ServerSample, before: &ServerSample) {
        self.script_calls += after.script_calls - before.script_calls;
        self.script_us += after.script_us - before.script_us;
        self.cpu_s += after.cpu_s - before.cpu_s;
    }
}

impl RedisServers {
    /// Connect to the server in `url`; for a cluster node, to every primary it lists.
    async fn connect(url: &str) -> Option<Self> {
        let first = standalone(url, None).await?;
        let info: String = first.info(Some(InfoKind::Cluster)).await.ok()?;
        if !info.contains("cluster_enabled:1") {
            return Some(Self {
                primaries: vec![first],
            });
        }
        let cluster = CustomCommand::new_static("CLUSTER", ClusterHash::Random, false);
        let nodes: String = first.custom(cluster, vec!["NODES"]).await.ok()?;
        let _ = first.quit().await;
        let mut primaries = Vec::new();
        for line in nodes
            .lines()
            .filter(|l| l.contains("master") && !l.contains("fail"))
        {
            // `<id> <ip:port@cport> <flags> ...`
            let addr = line.split_whitespace().nth(1)?.split('@').next()?;
            primaries.push(standalone(url, Some(addr)).await?);
        }
        Some(Self { primaries })
    }

    async fn sample(&self) -> ServerSample {
        // Let the finishes of calls that just returned (a cast, settled in the background) land
        // on the right side of the sample.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut total = ServerSample::default();
        for node in &self.primaries {
            let stats: String = node.info(Some(InfoKind::CommandStats)).await.unwrap();
            let cpu: String = node.info(Some(InfoKind::Cpu)).await.unwrap();
            let scripts = || {
                info_fields(&stats).filter(|(k, _)| {
                    matches!(
                        *k,
                        "cmdstat_eval"
                            | "cmdstat_evalsha"
                            | "cmdstat_eval_ro"
                            | "cmdstat_evalsha_ro"
                            | "cmdstat_fcall"
                            | "cmdstat_fcall_ro"
                    )
                })
            };
            let field = |v: &str, name: &str| {
                v.split(',')
                    .find_map(|kv| kv.strip_prefix(name))
                    .and_then(|n| n.parse::<f64>().ok())
            };
            total.script_calls += scripts()
                .filter_map(|(_, v)| field(v, "calls="))
                .sum::<f64>();
            total.script_us += scripts()
                .filter_map(|(_, v)| field(v, "usec="))
                .sum::<f64>();
            total.cpu_s += info_fields(&cpu)
                .filter(|(k, _)| matches!(*k, "used_cpu_sys" | "used_cpu_user"))
                .filter_map(|(_, v)| v.parse::<f64>().ok())
                .sum::<f64>();
        }
        total
    }

    /// p50 of one `EVALSHA` of a script returning 1, sequentially (the loopback round trip).
    async fn evalsha_p50_us(&self, calls: usize) -> f64 {
        let node = &self.primaries[0];
        let script = Script::from_lua("return 1");
        script.load(node).await.unwrap();
        let mut us = Vec::with_capacity(calls);
        for _ in 0..calls {
            let t = Instant::now();
            let one: i64 = script
                .evalsha(node, Vec::<String>::new(), Vec::<String>::new())
                .await
                .unwrap();
            us.push(t.elapsed().as_secs_f64() * 1e6);
            assert_eq!(one, 1);
        }
        us.sort_by(|a, b| a.total_cmp(b));
        us[us.len() / 2]
    }

    async fn close(&self) {
        for node in &self.primaries {
            let _ = node.quit().await;
        }
    }
}

/// p50s of one attempt's scripts driven straight from this task, sequentially: the admission,
/// and the admission plus the finish of a success — the Redis path without the runtime.
async fn attempt_scripts_p50_us(url: &str, calls: usize) -> Option<(f64, f64)> {
    let prefix = format!("pgw-overhead-direct-{}", std::process::id());
    let redis = RedisGovernance::connect(&Secret::new(url), &prefix)
        .await
        .ok()?;
    let attempts = RedisAttempts::new(RedisGate::new(redis.clone()));
    let breaker = BreakerConfig::default();
    let success = AttemptOutcome {
        action: BreakerAction::Record(BreakerVerdict::Success),
        tokens: 120,
        progress: true,
    };
    let (mut admit_us, mut pair_us) = (Vec::with_capacity(calls), Vec::with_capacity(calls));
    for n in 0..calls {
        // The gates of the benchmark's gateways.
        let request = GateRequest {
            scope: "LLM".into(),
            source: "mock_1".into(),
            global: Limits {
                max_concurrency: 1024,
                rpm: 100_000_000,
                tpm: 0,
            },
            per_source: Limits {
                max_concurrency: 512,
                ..Limits::default()
            },
            est_tokens: 300,
            lease_id: format!("direct-{n}").into(),
            lease_ttl: Duration::from_secs(1500),
        };
        let t = Instant::now();
        let AttemptAdmit::Admitted(permit) = attempts.admit(&request, &breaker).await.ok()? else {
            return None;
        };
        admit_us.push(t.elapsed().as_secs_f64() * 1e6);
        attempts.finish(&permit, &breaker, success).await.ok()?;
        pair_us.push(t.elapsed().as_secs_f64() * 1e6);
    }
    redis.close().await;
    let p50 = |mut us: Vec<f64>| {
        us.sort_by(|a, b| a.total_cmp(b));
        us[us.len() / 2]
    };
    Some((p50(admit_us), p50(pair_us)))
}

/// One plain connection to `url`'s server, or to `addr` with `url`'s credentials.
async fn standalone(url: &str, addr: Option<&str>) -> Option<Client> {
    let mut parsed = url::Url::parse(url).ok()?;
    let _ = parsed.set_scheme("redis");
    if let Some(addr) = addr {
        let (host, port) = addr.rsplit_once(':')?;
        parsed.set_host(Some(host)).ok()?;
        parsed.set_port(port.parse().ok()).ok()?;
    }
    let client = Builder::from_config(Config::from_url(parsed.as_str()).ok()?)
        .build()
        .ok()?;
    tokio::time::timeout(Duration::from_secs(2), client.init())
        .await
        .ok()?
        .ok()?;
    Some(client)
}

/// `key:value` lines of an INFO section.
fn info_fields(info: &str) -> impl Iterator<Item = (&str, &str)> {
    info.lines().filter_map(|l| l.trim().split_once(':'))
}

async fn measure<F, Fut>(calls: usize, concurrency: usize, one: F) -> Run
where
    F: Fn() -> Fut + Copy,
    Fut: std::future::Future<Output = ()>,
{
    let cpu_before = process_cpu_s();
    let started = Instant::now();
    let mut us: Vec<f64> = futures::stream::iter(0..calls)
        .map(|_| {
            let call = one();
            async move {
                let t = Instant::now();
                call.await;
                t.elapsed().as_secs_f64() * 1e6
            }
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = process_cpu_s()
        .zip(cpu_before)
        .map(|(after, before)| after - before);
    us.sort_by(|a, b| a.total_cmp(b));
    let pct = |q: f64| us[((us.len() - 1) as f64 * q).round() as usize];
    Run {
        p50_us: pct(0.5),
        p99_us: pct(0.99),
        calls_per_s: calls as f64 / elapsed,
        process_cpu_us_per_call: cpu.map(|s| s * 1e6 / calls as f64),
    }
}

/// Warm a gateway until its AIMD pacer admits the whole concurrency (it starts at 8 and adds
/// about one per limit's worth of successes): the benchmark measures overhead, not the ramp.
async fn warm(gw: &Gateway, calls: usize, concurrency: usize, stream: bool) {
    for _ in 0..100 {
        measure(calls, concurrency, || governed(gw, stream)).await;
        let limit = gw.sources("LLM").await.unwrap()[0].pacer_limit as usize;
        if limit >= concurrency {
            break;
        }
    }
}

async fn governed(gw: &Gateway, stream: bool) {
    gw.chat_with(vec![Message::user("hi")], CallOptions::new().stream(stream))
        .await
        .unwrap();
}

async fn streamed(gw: &Gateway) {
    let events: Vec<_> = gw
        .chat_stream(vec![Message::user("hi")], CallOptions::new())
        .unwrap()
        .collect()
        .await;
    assert!(matches!(events.last(), Some(Ok(ChatEvent::Done(_)))));
}

async fn variant(env: &BTreeMap<String, String>, extra: &[(&str, String)]) -> Option<Gateway> {
    let mut env = env.clone();
    for (k, v) in extra {
        env.insert(k.to_string(), v.clone());
    }
    Gateway::builder(Settings::from_map(&env).ok()?)
        .default_scope("LLM")
        .redis_key_prefix(&format!("pgw-overhead-{}", std::process::id()))
        .build()
        .await
        .ok()
}

#[tokio::main]
async fn main() {
    let mut calls = 4000usize;
    let mut levels = vec![1usize, 64, 256];
    let mut rounds = 3usize;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().unwrap_or_default();
        let list: Option<Vec<usize>> = value.split(',').map(|n| n.parse().ok()).collect();
        match (flag.as_str(), value.parse::<usize>().ok(), list) {
            ("--calls", Some(n), _) if n >= 100 => calls = n,
            ("--concurrency", _, Some(list)) if list.iter().all(|&c| c >= 1) => levels = list,
            ("--rounds", Some(n), _) if n >= 1 => rounds = n,
            _ => {
                eprintln!(
                    "usage: overhead [--calls N≥100] [--concurrency C,C,… (each ≥1)] [--rounds N≥1]"
                );
                std::process::exit(2);
            }
        }
    }
    let mock = MockUpstream::start(Behaviour::Healthy {
        ttft: Duration::ZERO,
        inter_token: Duration::ZERO,
        chunks: 4,
        content: "a short answer".into(),
    })
    .await;
    let env: BTreeMap<String, String> = [
        ("PGW_LIMITER_BACKEND", "memory"),
        ("PGW_BREAKER_BACKEND", "memory"),
        ("PGW_TELEMETRY_BACKEND", "none"),
        ("PGW_CACHE_BACKEND", "none"),
        ("LLM__MOCK__1__MODEL", "bench-model"),
        ("LLM__MOCK__1__API_KEY", "sk-bench"),
        ("LLM__MOCK__1__MAX_CONCURRENCY", "512"),
        ("LLM__GLOBAL__MAX_CONCURRENCY", "1024"),
        ("LLM__GLOBAL__RPM", "100000000"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .chain([("LLM__MOCK__1__BASE_URL".to_string(), mock.base_url())])
    .collect();
    let dir = std::env::temp_dir().join(format!("pgw-overhead-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sqlite = dir.join("telemetry.sqlite").display().to_string();
    let redis_url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let servers = RedisServers::connect(&redis_url).await;
    let mut variants: Vec<(&str, Gateway)> = Vec::new();
    variants.push((
        "memory",
        variant(&env, &[]).await.expect("baseline gateway"),
    ));
    let telemetry = [
        ("PGW_TELEMETRY_BACKEND", "sqlite".to_string()),
        ("PGW_TELEMETRY_SQLITE_PATH", sqlite),
    ];
    variants.push((
        "memory+sqlite",
        variant(&env, &telemetry).await.expect("telemetry gateway"),
    ));
    let redis = [
        ("PGW_LIMITER_BACKEND", "redis".to_string()),
        ("PGW_BREAKER_BACKEND", "redis".to_string()),
        ("REDIS_URL", redis_url.clone()),
    ];
    match (&servers, variant(&env, &redis).await) {
        (Some(_), Some(gw)) => variants.push(("redis", gw)),
        _ => println!("(no Redis reachable at REDIS_URL: the redis variant is skipped)"),
    }
    let mut lines = Vec::new();
    // The yardsticks of the concurrency-1 rows: one EVALSHA, one admission script from a task.
    let (mut evalsha_p50_us, mut admit_p50_us) = (None, None);
    if let Some(servers) = &servers {
        let p50 = servers.evalsha_p50_us(calls / 2).await;
        evalsha_p50_us = Some(p50);
        println!("one loopback EVALSHA round trip p50 {p50:>8.1} µs");
        let mut line = json!({"evalsha_p50_us": p50, "redis_primaries": servers.primaries.len()});
        if let Some((admit, pair)) = attempt_scripts_p50_us(&redis_url, calls / 2).await {
            println!(
                "one attempt's scripts from a task: admit p50 {admit:>8.1} µs, admit + finish p50 {pair:>8.1} µs"
            );
            line["attempt_admit_p50_us"] = json!(admit);
            admit_p50_us = Some(admit);
            line["attempt_admit_finish_p50_us"] = json!(pair);
        }
        lines.push(line);
    }

    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let client = reqwest::Client::new();
    let url = Arc::new(format!("{}/chat/completions", mock.base_url()));
    for &concurrency in &levels {
        for stream in [false, true] {
            let body = Arc::new(
                serde_json::to_vec(&json!({
                    "model": "bench-model",
                    "messages": [{"role": "user", "content": "hi"}],
                    "stream": stream,
                }))
                .unwrap(),
            );
            let direct = || {
                let (client, url, body) = (client.clone(), Arc::clone(&url), Arc::clone(&body));
                async move {
                    let resp = client
                        .post(url.as_str())
                        .header("authorization", "Bearer sk-bench")
                        .header("content-type", "application/json")
                        .body(body.as_ref().clone())
                        .send()
                        .await
                        .unwrap();
                    assert!(resp.status().is_success());
                    resp.bytes().await.unwrap();
                }
            };
            // Rounds interleave every variant with the direct calls, so a shift in what the
            // shared machine gives us hits them alike; figures are medians over rounds, and the
            // Redis-to-memory ratio is taken within each round first.
            measure(calls / 4, concurrency, direct).await;
            let mut directs = Vec::with_capacity(rounds);
            let mut runs_of: BTreeMap<&str, Vec<Run>> = BTreeMap::new();
            let mut server_total = ServerSample::default();
            let mut chat_streams = Vec::with_capacity(rounds);
            for _ in 0..rounds {
                directs.push(measure(calls, concurrency, direct).await);
                for (name, gw) in &variants {
                    warm(gw, calls / 4, concurrency, stream).await;
                    let before = match (*name, &servers) {
                        ("redis", Some(s)) => Some(s.sample().await),
                        _ => None,
                    };
                    let r = measure(calls, concurrency, || governed(gw, stream)).await;
                    if let (Some(before), Some(servers)) = (before, &servers) {
                        server_total.add_delta(&servers.sample().await, &before);
                    }
                    runs_of.entry(name).or_default().push(r);
                    if stream && *name == "memory" {
                        let s = measure(calls, concurrency, || streamed(gw)).await;
                        chat_streams.push(s);
                    }
                }
            }
            let d = Run::median(&directs);
            println!(
                "concurrency {concurrency:>3} stream {stream:<5} direct         p50 {:>8.1} µs p99 {:>8.1} µs {:>7.0}/s",
                d.p50_us, d.p99_us, d.calls_per_s
            );
            let mut runs = serde_json::Map::new();
            let mut baseline: Option<Run> = None;
            for (name, _) in &variants {
                let of_rounds = &runs_of[name];
                let r = Run::median(of_rounds);
                println!(
                    "concurrency {concurrency:>3} stream {stream:<5} {name:<14} p50 {:>8.1} µs p99 {:>8.1} µs {:>7.0}/s | added p50 {:>8.1} µs p99 {:>8.1} µs",
                    r.p50_us, r.p99_us, r.calls_per_s, r.p50_us - d.p50_us, r.p99_us - d.p99_us
                );
                let mut row = r.json();
                if *name == "redis" && servers.is_some() {
                    let n = (calls * rounds) as f64;
                    let trips = server_total.script_calls / n;
                    let cpu_us = server_total.cpu_s * 1e6 / n;
                    println!(
                        "concurrency {concurrency:>3} stream {stream:<5} redis server   {trips:.2} round trips per attempt, {cpu_us:.1} µs CPU per call (one core: {:.0}/s)",
                        1e6 / cpu_us
                    );
                    row["redis_round_trips_per_attempt"] = json!(trips);
                    row["redis_cpu_us_per_call"] = json!(cpu_us);
                    row["redis_script_us_per_call"] = json!(server_total.script_us / n);
                    row["redis_cpu_ceiling_calls_per_s"] = json!(1e6 / cpu_us);
                    if let Some(process_us) = r.process_cpu_us_per_call {
                        let ceiling = cores * 1e6 / (process_us + cpu_us);
                        println!(
                            "concurrency {concurrency:>3} stream {stream:<5} machine        {process_us:.1} µs process CPU per call; {cores} cores imply {ceiling:.0}/s ({:.2} of it reached)",
                            r.calls_per_s / ceiling
                        );
                        row["machine_cores"] = json!(cores);
                        row["machine_ceiling_calls_per_s"] = json!(ceiling);
                        row["calls_per_s_vs_ceiling"] = json!(r.calls_per_s / ceiling);
                    }
                    row["added_p50_us"] = json!(r.p50_us - d.p50_us);
                    let ratios: Vec<f64> = of_rounds
                        .iter()
                        .zip(&runs_of["memory"])
                        .map(|(redis, memory)| redis.calls_per_s / memory.calls_per_s)
                        .collect();
                    row["calls_per_s_vs_memory"] = json!(median(ratios));
                    if let (1, Some(evalsha), Some(admit), Some(memory)) =
                        (concurrency, evalsha_p50_us, admit_p50_us, baseline)
                    {
                        // The issue's bound, and what the added p50 would be if the call paid only
                        // the admission's round trip and the runtime's own work (the memory
                        // variant's added p50) — no finish, no contention: a sum of medians, so an
                        // estimate of the floor, not a measurement of it.
                        let runtime_us = memory.p50_us - d.p50_us;
                        let (target, floor) = (2.0 * evalsha, admit + runtime_us);
                        println!(
                            "concurrency {concurrency:>3} stream {stream:<5} redis added    target {target:.1} µs (2 × EVALSHA); floor {floor:.1} µs (admission {admit:.1} + runtime {runtime_us:.1})"
                        );
                        row["added_p50_target_us"] = json!(target);
                        row["added_p50_floor_us"] = json!(floor);
                    }
                }
                runs.insert((*name).to_string(), row);
                baseline.get_or_insert(r);
            }
            let r = baseline.expect("the memory variant always runs");
            let mut line = json!({
                "concurrency": concurrency,
                "stream": stream,
                "calls": calls,
                "rounds": rounds,
                "direct_p50_us": d.p50_us,
                "runtime_p50_us": r.p50_us,
                "direct_p99_us": d.p99_us,
                "runtime_p99_us": r.p99_us,
                "direct_calls_per_s": d.calls_per_s,
                "direct_process_cpu_us_per_call": d.process_cpu_us_per_call,
                "runtime_calls_per_s": r.calls_per_s,
                "added_p50_us": r.p50_us - d.p50_us,
                "added_p99_us": r.p99_us - d.p99_us,
                "variants": runs,
            });
            if stream {
                let s = Run::median(&chat_streams);
                println!(
                    "concurrency {concurrency:>3} chat_stream        p50 {:>8.1} µs p99 {:>8.1} µs {:>7.0}/s (memory chat() streaming p50 {:>8.1} µs)",
                    s.p50_us, s.p99_us, s.calls_per_s, r.p50_us
                );
                line["chat_stream"] = s.json();
            }
            lines.push(line);
        }
    }
    for (_, gw) in &variants {
        gw.shutdown().await;
    }
    mock.shutdown().await;
    if let Some(servers) = &servers {
        servers.close().await;
    }
    let _ = std::fs::remove_dir_all(&dir);
    for line in lines {
        println!("{line}");
    }
}
