//! Streamed calls per second through the runtime against an upstream that is byte-for-byte the
//! same in every build: the tool for comparing two builds (or two commits) side by side.
//!
//! `overhead` measures against the built-in mock, which changes as the mock learns new
//! behaviours (tool calls, logprobs, `n` choices); its cost lands in both columns of one run but
//! differs between builds, so two builds' `overhead` figures also compare two mocks. Here the
//! upstream is a fixed OpenAI-style stream (role chunk, four content chunks, finish chunk, usage
//! chunk, `[DONE]`, with `system_fingerprint` and `logprobs: null` as OpenAI sends them) served by
//! a bare axum route that does no work per request, so what differs between two builds' figures
//! is the runtime.
//!
//! ```text
//! cargo run --release --example stream_ab -- [--calls N] [--rounds R] [--source-limit L]
//! ```
//!
//! The same answer also comes as Anthropic's event stream (`message_start`, four `text_delta`s,
//! `message_delta` with usage, `message_stop`) to a native Anthropic source of scope `CLAUDE`:
//! the `anthropic_*` rows measure that path beside the OpenAI rows, in the same run.
//!
//! 64 callers, memory governance, no telemetry, no cache. `--source-limit` is the source's
//! `MAX_CONCURRENCY` (default 512: the adaptive pacer, warmed first, is the only bound; 32: a
//! pacer-bound scope, where calls wait in the waiting room). Each round runs `chat()` streamed,
//! then `chat_stream()`. One JSON line per round, then one with the medians over the rounds.
//! To compare builds, run each build's binary in turn, several times, and compare medians: on a
//! shared 2-core machine single rounds vary by ±25 %.
//!
//! `--pacer off` takes the adaptive pacer out of both scopes (`--pacer adaptive`, the default,
//! keeps it). On a saturated machine the pacer reads the CPU's queueing as the upstream's latency
//! and now and then cuts its limit below the 64 callers, who then wait; two builds whose pacers
//! differ wait differently, so `off` is how to compare their call paths alone.

#[path = "support/process_cpu.rs"]
mod process_cpu;

use std::collections::BTreeMap;
use std::time::Instant;

use axum::routing::post;
use futures::StreamExt;
use polygateway::{CallOptions, ChatEvent, ChatHandle, Gateway, Message};
use process_cpu::process_cpu_s;
use serde_json::json;

const CALLERS: usize = 64;

/// The stream every request gets.
fn fixed_stream() -> String {
    let chunk = |delta: &str, finish: &str| {
        format!(
            "data: {{\"id\":\"chatcmpl-ab\",\"object\":\"chat.completion.chunk\",\"created\":0,\
             \"model\":\"ab-model\",\"system_fingerprint\":\"fp_ab\",\"choices\":[{{\"index\":0,\
             \"delta\":{delta},\"logprobs\":null,\"finish_reason\":{finish}}}]}}\n\n"
        )
    };
    let mut body = chunk(r#"{"role":"assistant","content":""}"#, "null");
    for piece in ["a sh", "ort ", "answ", "er"] {
        body += &chunk(&json!({ "content": piece }).to_string(), "null");
    }
    body += &chunk("{}", r#""stop""#);
    body += "data: {\"id\":\"chatcmpl-ab\",\"object\":\"chat.completion.chunk\",\"created\":0,\
             \"model\":\"ab-model\",\"choices\":[],\"usage\":{\"prompt_tokens\":5,\
             \"completion_tokens\":4,\"total_tokens\":9}}\n\n";
    body + "data: [DONE]\n\n"
}

/// The same answer as Anthropic streams it.
fn fixed_anthropic_stream() -> String {
    let event = |name: &str, data: serde_json::Value| format!("event: {name}\ndata: {data}\n\n");
    let mut body = event(
        "message_start",
        json!({"type": "message_start", "message": {"id": "msg_ab", "type": "message",
            "role": "assistant", "model": "ab-model", "content": [], "stop_reason": null,
            "stop_sequence": null, "usage": {"input_tokens": 5, "output_tokens": 1}}}),
    );
    body += &event(
        "content_block_start",
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
    );
    for piece in ["a sh", "ort ", "answ", "er"] {
        body += &event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": piece}}),
        );
    }
    body += &event(
        "content_block_stop",
        json!({"type": "content_block_stop", "index": 0}),
    );
    body += &event(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null},
            "usage": {"output_tokens": 4}}),
    );
    body + &event("message_stop", json!({"type": "message_stop"}))
}

#[derive(Clone, Copy, PartialEq)]
enum Api {
    /// `chat_with(…, stream(true))`: streamed upstream, one answer.
    Chat,
    /// `chat_stream()`: every delta to the caller, then the answer.
    ChatStream,
}

/// Who a round calls: the gateway's default scope (the OpenAI source) or a scope's handle.
#[derive(Clone, Copy)]
enum Target<'a> {
    Gateway(&'a Gateway),
    Scope(&'a ChatHandle),
}

async fn one_call(target: Target<'_>, api: Api) {
    let gw = match target {
        Target::Gateway(gw) => gw,
        Target::Scope(scope) => return one_scope_call(scope, api).await,
    };
    let hi = vec![Message::user("hi")];
    match api {
        Api::Chat => {
            gw.chat_with(hi, CallOptions::new().stream(true))
                .await
                .expect("the fixed upstream always answers");
        }
        Api::ChatStream => {
            let events: Vec<_> = gw
                .chat_stream(hi, CallOptions::new())
                .expect("a valid call")
                .collect()
                .await;
            assert!(matches!(events.last(), Some(Ok(ChatEvent::Done(_)))));
        }
    }
}

async fn one_scope_call(scope: &ChatHandle, api: Api) {
    let hi = vec![Message::user("hi")];
    match api {
        Api::Chat => {
            scope
                .chat_with(hi, CallOptions::new().stream(true))
                .await
                .expect("the fixed upstream always answers");
        }
        Api::ChatStream => {
            let events: Vec<_> = scope.chat_stream(hi, CallOptions::new()).collect().await;
            assert!(matches!(events.last(), Some(Ok(ChatEvent::Done(_)))));
        }
    }
}

/// `calls` calls by [`CALLERS`] concurrent callers: (calls per second, CPU µs per call).
async fn measure(target: Target<'_>, api: Api, calls: usize) -> (f64, Option<f64>) {
    let (cpu0, t0) = (process_cpu_s(), Instant::now());
    futures::stream::iter(0..calls)
        .for_each_concurrent(CALLERS, |_| one_call(target, api))
        .await;
    let rate = calls as f64 / t0.elapsed().as_secs_f64();
    let cpu = match (cpu0, process_cpu_s()) {
        (Some(a), Some(b)) => Some((b - a) * 1e6 / calls as f64),
        _ => None,
    };
    (rate, cpu)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

#[tokio::main]
async fn main() {
    let (mut calls, mut rounds, mut source_limit) = (15_000usize, 3usize, 512usize);
    let mut pacer = "adaptive".to_string();
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next();
        let count = value.as_deref().and_then(|v| v.parse::<usize>().ok());
        match (flag.as_str(), count) {
            ("--calls", Some(n)) if n >= 100 => calls = n,
            ("--rounds", Some(n)) if n >= 1 => rounds = n,
            ("--source-limit", Some(n)) if n >= 1 => source_limit = n,
            ("--pacer", _) if matches!(value.as_deref(), Some("adaptive" | "off")) => {
                pacer = value.unwrap_or_default()
            }
            _ => {
                eprintln!(
                    "usage: stream_ab [--calls N≥100] [--rounds R≥1] [--source-limit L≥1] \
                     [--pacer adaptive|off]"
                );
                std::process::exit(2);
            }
        }
    }
    let body = fixed_stream();
    let anthropic_body = fixed_anthropic_stream();
    let app = axum::Router::new()
        .route(
            "/v1/chat/completions",
            post(move || {
                let body = body.clone();
                async move { ([("content-type", "text/event-stream")], body) }
            }),
        )
        .route(
            "/v1/messages",
            post(move || {
                let body = anthropic_body.clone();
                async move { ([("content-type", "text/event-stream")], body) }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    // The testkit's governance (memory limiter and breaker, no telemetry, no cache): the same
    // helper and the same settings in every build this example is compiled against.
    let source_limit_value = source_limit.to_string();
    let base = format!("http://{upstream}/v1");
    let settings = polygateway_testkit::mock_settings(
        &[("LLM", &base), ("CLAUDE", &base)],
        &[
            ("LLM__OPENAI__1__MAX_CONCURRENCY", &source_limit_value),
            ("LLM__GLOBAL__MAX_CONCURRENCY", "1024"),
            ("LLM__GLOBAL__RPM", "100000000"),
            ("LLM__PACER", &pacer),
            ("CLAUDE__OPENAI__1__DIALECT", "anthropic"),
            ("CLAUDE__OPENAI__1__MAX_CONCURRENCY", &source_limit_value),
            ("CLAUDE__GLOBAL__MAX_CONCURRENCY", "1024"),
            ("CLAUDE__GLOBAL__RPM", "100000000"),
            ("CLAUDE__PACER", &pacer),
        ],
    );
    let gw = Gateway::builder(settings)
        .default_scope("LLM")
        .build()
        .await
        .expect("gateway");
    let claude = gw.chat_scope("CLAUDE").expect("the Anthropic scope");
    // Warm the pacers up to what the sources allow, so rounds measure the steady state.
    let ceiling = source_limit.min(CALLERS) as u32;
    for (scope, target) in [
        ("LLM", Target::Gateway(&gw)),
        ("CLAUDE", Target::Scope(&claude)),
    ] {
        // Without a pacer one pass warms the connections; there is no limit to wait for.
        for _ in 0..if pacer == "off" { 1 } else { 50 } {
            measure(target, Api::Chat, 2_000).await;
            if gw.sources(scope).await.unwrap()[0].pacer_limit >= ceiling {
                break;
            }
        }
    }
    let rows = [
        ("chat", "LLM", Target::Gateway(&gw), Api::Chat),
        ("chat_stream", "LLM", Target::Gateway(&gw), Api::ChatStream),
        (
            "anthropic_chat",
            "CLAUDE",
            Target::Scope(&claude),
            Api::Chat,
        ),
        (
            "anthropic_chat_stream",
            "CLAUDE",
            Target::Scope(&claude),
            Api::ChatStream,
        ),
    ];
    let mut per_api: BTreeMap<&str, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
    for round in 1..=rounds {
        for (name, scope, target, api) in rows {
            let (rate, cpu) = measure(target, api, calls).await;
            let pacer_limit = gw.sources(scope).await.unwrap()[0].pacer_limit;
            println!(
                "{}",
                json!({"round": round, "api": name, "calls": calls, "callers": CALLERS,
                    "source_limit": source_limit, "calls_per_s": rate,
                    "process_cpu_us_per_call": cpu, "pacer_limit": pacer_limit})
            );
            let entry = per_api.entry(name).or_default();
            entry.0.push(rate);
            entry.1.extend(cpu);
        }
    }
    let medians: BTreeMap<&str, serde_json::Value> = per_api
        .into_iter()
        .map(|(name, (rates, cpus))| {
            let cpu = (!cpus.is_empty()).then(|| median(cpus));
            (
                name,
                json!({"calls_per_s": median(rates), "process_cpu_us_per_call": cpu}),
            )
        })
        .collect();
    println!(
        "{}",
        json!({"medians_over_rounds": medians, "rounds": rounds, "callers": CALLERS,
            "source_limit": source_limit})
    );
    gw.shutdown().await;
}
