//! Runtime overhead per call against a bare reqwest call to the same healthy mock, measured side
//! by side in one run: concurrency 1 and 256, streaming and not, all in-memory governance on
//! (selection, pacer, breaker, six gates, retry loop, telemetry hook), no cache, no telemetry sink
//! — and, when a Redis is reachable, the same runtime on Redis limiter and breaker backends.
//!
//! ```text
//! cargo run --release --example overhead -- [--calls N]
//! ```
//!
//! The last four lines of output are one JSON object per configuration. The mock runs in the same
//! process on the same cores, so absolute figures include its cost; compare the two columns.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use polygateway::config::Settings;
use polygateway::testkit::mock_llm::{Behaviour, MockUpstream};
use polygateway::{CallOptions, ChatEvent, Gateway, Message};
use serde_json::json;

struct Run {
    p50_us: f64,
    p99_us: f64,
    calls_per_s: f64,
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

#[tokio::main]
async fn main() {
    let mut calls = 4000usize;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        match (flag.as_str(), args.next()) {
            ("--calls", Some(n)) => calls = n.parse().expect("--calls takes a whole number"),
            _ => {
                eprintln!("usage: overhead [--calls N]");
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
    let gw = Gateway::from_settings(Settings::from_map(&env).unwrap(), "LLM")
        .await
        .unwrap();
    // The same scope on Redis backends (limiter and breaker), when a Redis is reachable.
    let redis_url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let gw_redis = if std::net::TcpStream::connect("127.0.0.1:6379").is_ok()
        || std::env::var("REDIS_URL").is_ok()
    {
        let mut env = env.clone();
        env.insert("PGW_LIMITER_BACKEND".into(), "redis".into());
        env.insert("PGW_BREAKER_BACKEND".into(), "redis".into());
        env.insert("REDIS_URL".into(), redis_url);
        Gateway::builder(Settings::from_map(&env).unwrap())
            .default_scope("LLM")
            .redis_key_prefix(&format!("pgw-overhead-{}", std::process::id()))
            .build()
            .await
            .ok()
    } else {
        println!("(no Redis reachable: the Redis column is skipped)");
        None
    };
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
            let governed = || {
                let gw = gw.clone();
                async move {
                    gw.chat_with(vec![Message::user("hi")], CallOptions::new().stream(stream))
                        .await
                        .unwrap();
                }
            };
            // Warm both paths, then measure them back to back. The AIMD pacer starts each source
            // at 8 in flight and adds about one per limit's worth of successes; warming until it
            // admits the whole concurrency measures overhead, not the pacer's ramp-up.
            measure(calls / 4, concurrency, &direct).await;
            for _ in 0..100 {
                measure(calls / 4, concurrency, &governed).await;
                let limit = gw.sources("LLM").await.unwrap()[0].pacer_limit as usize;
                if limit >= concurrency {
                    break;
                }
            }
            let d = measure(calls, concurrency, &direct).await;
            let r = measure(calls, concurrency, &governed).await;
            let on_redis = || {
                let gw = gw_redis.clone();
                async move {
                    gw.expect("only measured with Redis")
                        .chat_with(vec![Message::user("hi")], CallOptions::new().stream(stream))
                        .await
                        .unwrap();
                }
            };
            let rr = match &gw_redis {
                Some(gw_redis) => {
                    for _ in 0..100 {
                        measure(calls / 4, concurrency, &on_redis).await;
                        let limit = gw_redis.sources("LLM").await.unwrap()[0].pacer_limit;
                        if limit as usize >= concurrency {
                            break;
                        }
                    }
                    Some(measure(calls, concurrency, &on_redis).await)
                }
                None => None,
            };
            if let Some(rr) = &rr {
                println!(
                    "concurrency {concurrency:>3} stream {stream:<5}  redis backends p50 {:>8.1} µs p99 {:>8.1} µs {:>7.0}/s (memory p50 {:>8.1} µs)",
                    rr.p50_us, rr.p99_us, rr.calls_per_s, r.p50_us
                );
            }
            // `chat_stream()` on the same path, consuming every event: its cost over `chat()`.
            let streamed = || {
                let gw = gw.clone();
                async move {
                    let events: Vec<_> = gw
                        .chat_stream(vec![Message::user("hi")], CallOptions::new())
                        .unwrap()
                        .collect()
                        .await;
                    assert!(matches!(events.last(), Some(Ok(ChatEvent::Done(_)))));
                }
            };
            let s = if stream {
                Some(measure(calls, concurrency, &streamed).await)
            } else {
                None
            };
            println!(
                "concurrency {concurrency:>3} stream {stream:<5}  direct p50 {:>8.1} µs p99 {:>8.1} µs {:>7.0}/s | runtime p50 {:>8.1} µs p99 {:>8.1} µs {:>7.0}/s | added p50 {:>7.1} µs p99 {:>8.1} µs",
                d.p50_us, d.p99_us, d.calls_per_s, r.p50_us, r.p99_us, r.calls_per_s,
                r.p50_us - d.p50_us, r.p99_us - d.p99_us
            );
            if let Some(s) = &s {
                println!(
                    "concurrency {concurrency:>3} chat_stream   p50 {:>8.1} µs p99 {:>8.1} µs {:>7.0}/s (vs chat() streaming p50 {:>8.1} µs)",
                    s.p50_us, s.p99_us, s.calls_per_s, r.p50_us
                );
            }
            lines.push(json!({
                "concurrency": concurrency,
                "stream": stream,
                "calls": calls,
                "direct_p50_us": d.p50_us,
                "runtime_p50_us": r.p50_us,
                "direct_p99_us": d.p99_us,
                "runtime_p99_us": r.p99_us,
                "direct_calls_per_s": d.calls_per_s,
                "runtime_calls_per_s": r.calls_per_s,
                "redis_runtime_p50_us": rr.as_ref().map(|r| r.p50_us),
                "redis_runtime_p99_us": rr.as_ref().map(|r| r.p99_us),
                "redis_runtime_calls_per_s": rr.as_ref().map(|r| r.calls_per_s),
                "added_p50_us": r.p50_us - d.p50_us,
                "added_p99_us": r.p99_us - d.p99_us,
                "chat_stream_p50_us": s.as_ref().map(|s| s.p50_us),
                "chat_stream_p99_us": s.as_ref().map(|s| s.p99_us),
                "chat_stream_calls_per_s": s.as_ref().map(|s| s.calls_per_s),
            }));
        }
    }
    gw.shutdown().await;
    if let Some(gw) = gw_redis {
        gw.shutdown().await;
    }
    mock.shutdown().await;
    for line in lines {
        println!("{line}");
    }
}
