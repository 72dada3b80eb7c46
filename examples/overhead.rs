//! Runtime overhead per call against a bare reqwest call to the same healthy mock, measured side
//! by side in one run: concurrency 1 and 256, streaming and not.
//!
//! Runtime variants, each its own gateway over the same mock:
//! - `memory`: in-memory governance on (selection, pacer, breaker, six gates, retry loop), no
//!   cache, no telemetry — the baseline the goal is about;
//! - `memory+sqlite`: the same with SQLite telemetry on (recording is off the call path);
//! - `redis`: limiter and breaker in Redis (skipped when no Redis is reachable).
//!
//! `chat_stream()` is measured against `chat()` on the streaming rows.
//!
//! ```text
//! cargo run --release --features testkit,redis --example overhead -- [--calls N]
//! ```
//!
//! The last four lines of output are one JSON object per configuration. The mock runs in the same
//! process on the same cores, so absolute figures include its cost; compare the columns.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use polygateway::config::Settings;
use polygateway::testkit::mock_llm::{Behaviour, MockUpstream};
use polygateway::{CallOptions, ChatEvent, Gateway, Message};
use serde_json::{json, Value};

#[derive(Clone, Copy)]
struct Run {
    p50_us: f64,
    p99_us: f64,
    calls_per_s: f64,
}

impl Run {
    fn json(&self) -> Value {
        json!({"p50_us": self.p50_us, "p99_us": self.p99_us, "calls_per_s": self.calls_per_s})
    }
}

async fn measure<F, Fut>(calls: usize, concurrency: usize, one: F) -> Run
where
    F: Fn() -> Fut + Copy,
    Fut: std::future::Future<Output = ()>,
{
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
    us.sort_by(|a, b| a.total_cmp(b));
    let pct = |q: f64| us[((us.len() - 1) as f64 * q).round() as usize];
    Run {
        p50_us: pct(0.5),
        p99_us: pct(0.99),
        calls_per_s: calls as f64 / elapsed,
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
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        match (flag.as_str(), args.next().and_then(|n| n.parse().ok())) {
            ("--calls", Some(n)) if n >= 100 => calls = n,
            _ => {
                eprintln!("usage: overhead [--calls N≥100]");
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
    let redis_reachable = std::net::TcpStream::connect("127.0.0.1:6379").is_ok();
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
        (
            "REDIS_URL",
            std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into()),
        ),
    ];
    match (redis_reachable, variant(&env, &redis).await) {
        (true, Some(gw)) => variants.push(("redis", gw)),
        _ => println!("(no Redis reachable: the redis variant is skipped)"),
    }

    let client = reqwest::Client::new();
    let url = Arc::new(format!("{}/chat/completions", mock.base_url()));
    let mut lines = Vec::new();
    for concurrency in [1usize, 256] {
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
            measure(calls / 4, concurrency, direct).await;
            let d = measure(calls, concurrency, direct).await;
            println!(
                "concurrency {concurrency:>3} stream {stream:<5} direct         p50 {:>8.1} µs p99 {:>8.1} µs {:>7.0}/s",
                d.p50_us, d.p99_us, d.calls_per_s
            );
            let mut runs = serde_json::Map::new();
            let mut baseline = None;
            for (name, gw) in &variants {
                warm(gw, calls / 4, concurrency, stream).await;
                let r = measure(calls, concurrency, || governed(gw, stream)).await;
                println!(
                    "concurrency {concurrency:>3} stream {stream:<5} {name:<14} p50 {:>8.1} µs p99 {:>8.1} µs {:>7.0}/s | added p50 {:>8.1} µs p99 {:>8.1} µs",
                    r.p50_us, r.p99_us, r.calls_per_s, r.p50_us - d.p50_us, r.p99_us - d.p99_us
                );
                runs.insert((*name).to_string(), r.json());
                baseline.get_or_insert(r);
            }
            let r = baseline.expect("the memory variant always runs");
            let mut line = json!({
                "concurrency": concurrency,
                "stream": stream,
                "calls": calls,
                "direct_p50_us": d.p50_us,
                "runtime_p50_us": r.p50_us,
                "direct_p99_us": d.p99_us,
                "runtime_p99_us": r.p99_us,
                "direct_calls_per_s": d.calls_per_s,
                "runtime_calls_per_s": r.calls_per_s,
                "added_p50_us": r.p50_us - d.p50_us,
                "added_p99_us": r.p99_us - d.p99_us,
                "variants": runs,
            });
            if stream {
                let gw = &variants[0].1;
                let s = measure(calls, concurrency, || streamed(gw)).await;
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
    let _ = std::fs::remove_dir_all(&dir);
    for line in lines {
        println!("{line}");
    }
}
