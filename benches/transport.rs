//! Transport benchmarks: SSE parse throughput over a realistic 200-chunk stream, and the
//! overhead of `ChatTransport` over a bare `reqwest` call against the same local mock (streaming
//! and not), measured in the same run.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use futures::StreamExt;
use polygateway::actors::Transport;
use polygateway::provider::ProviderRegistry;
use polygateway::testkit::{source_settings, Behaviour, MockUpstream};
use polygateway::transport::sse::{SseEvent, SseParser};
use polygateway::transport::wire::decode_chunk;
use polygateway::transport::{ChatTransport, ChatWireRequest};
use polygateway::Message;
use serde_json::json;

/// 200 content chunks shaped like OpenAI's, plus role, finish, usage and `[DONE]`.
fn realistic_stream() -> Vec<u8> {
    let mut s = String::new();
    let frame = |s: &mut String, v: serde_json::Value| {
        s.push_str("data: ");
        s.push_str(&v.to_string());
        s.push_str("\n\n");
    };
    let head = |delta: serde_json::Value, finish: serde_json::Value| {
        json!({"id": "chatcmpl-9x8y7z", "object": "chat.completion.chunk", "created": 1_717_000_000,
               "model": "gpt-4o-2024-08-06", "system_fingerprint": "fp_abc123",
               "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]})
    };
    frame(
        &mut s,
        head(json!({"role": "assistant", "content": ""}), json!(null)),
    );
    for i in 0..200 {
        let word = if i % 7 == 0 { " 多字节" } else { " token" };
        frame(&mut s, head(json!({"content": word}), json!(null)));
    }
    frame(&mut s, head(json!({}), json!("stop")));
    frame(
        &mut s,
        json!({"id": "chatcmpl-9x8y7z", "object": "chat.completion.chunk", "choices": [],
        "usage": {"prompt_tokens": 120, "completion_tokens": 200, "total_tokens": 320,
                  "prompt_tokens_details": {"cached_tokens": 64}}}),
    );
    s.push_str("data: [DONE]\n\n");
    s.into_bytes()
}

fn sse_parse(c: &mut Criterion) {
    let bytes = realistic_stream();
    let mut g = c.benchmark_group("sse");
    g.throughput(Throughput::Bytes(bytes.len() as u64));
    g.bench_function("parse_decode_200_chunks", |b| {
        b.iter(|| {
            let mut p = SseParser::new();
            let mut events = Vec::with_capacity(256);
            // Network-like segments that cut frames anywhere.
            for seg in bytes.chunks(1400) {
                p.feed(seg, &mut events).unwrap();
            }
            p.finish(&mut events).unwrap();
            let mut n = 0usize;
            for e in &events {
                if let SseEvent::Data(d) = e {
                    let f = decode_chunk(d).unwrap();
                    n += f.content.map_or(0, |c| c.len());
                }
            }
            black_box(n)
        })
    });
    g.finish();
}

fn overhead(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mock = rt.block_on(MockUpstream::start(Behaviour::healthy_with(
        "A reasonably short answer of a few words, split in chunks.",
    )));
    let settings = source_settings(&mock.base_url());
    let transport = Arc::new(ChatTransport::new(
        settings.clone(),
        ProviderRegistry::with_defaults().get("openai").clone(),
    ));
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let url = format!("{}/chat/completions", mock.base_url());
    let messages = Arc::new(vec![Message::user("hello there")]);
    let body = |stream: bool| {
        let mut v = json!({"model": settings.model, "messages": &*messages, "stream": stream});
        if stream {
            v["stream_options"] = json!({"include_usage": true});
        }
        serde_json::to_vec(&v).unwrap()
    };
    let (plain_body, stream_body) = (body(false), body(true));

    let mut g = c.benchmark_group("chat_call");
    for stream in [false, true] {
        let mode = if stream { "stream" } else { "non_stream" };
        let mut req = ChatWireRequest::new(messages.clone());
        req.stream = stream;
        g.bench_function(format!("{mode}/chat_transport"), |b| {
            b.to_async(&rt).iter(|| async {
                black_box(transport.send(&req, None).await.unwrap());
            })
        });
        let raw = if stream {
            stream_body.clone()
        } else {
            plain_body.clone()
        };
        g.bench_function(format!("{mode}/bare_reqwest"), |b| {
            b.to_async(&rt).iter(|| async {
                let resp = client
                    .post(&url)
                    .header("content-type", "application/json")
                    .header("authorization", "Bearer sk-test")
                    .body(raw.clone())
                    .send()
                    .await
                    .unwrap();
                let mut s = resp.bytes_stream();
                let mut n = 0;
                while let Some(chunk) = s.next().await {
                    n += chunk.unwrap().len();
                }
                black_box(n);
            })
        });
    }
    g.finish();
    drop(mock);
}

criterion_group!(benches, sse_parse, overhead);
criterion_main!(benches);
