//! Transport benchmarks: a 200-chunk streamed answer read through `ChatTransport`, and the
//! overhead of `ChatTransport` over a bare `reqwest` call against the same local mock (streaming
//! and not), measured in the same run.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use futures::StreamExt;
use polygateway::ports::Transport;
use polygateway::provider::ProviderRegistry;
use polygateway::transport::{ChatTransport, ChatWireRequest, TransportConfig};
use polygateway::Message;
use polygateway_testkit::{source_settings, Behaviour, MockUpstream};
use serde_json::json;

/// A 200-chunk streamed answer (multi-byte text every seventh chunk) read through
/// `ChatTransport` from a local mock: SSE framing, chunk decoding, think-tag splitting and the
/// watchdog, plus the loopback HTTP they sit on. The parsers themselves are crate-private; this
/// is the closest figure a user can reproduce.
fn stream_200_chunks(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let content: String = (0..200)
        .map(|i| if i % 7 == 0 { " 多字节" } else { " token" })
        .collect();
    let mock = rt.block_on(MockUpstream::start(Behaviour::Healthy {
        ttft: Duration::ZERO,
        inter_token: Duration::ZERO,
        chunks: 200,
        content: content.clone(),
    }));
    let transport = Arc::new(ChatTransport::new(
        TransportConfig::from(&source_settings(&mock.base_url())),
        ProviderRegistry::with_defaults().get("openai").clone(),
    ));
    let mut req = ChatWireRequest::new(vec![Message::user("hello there")]);
    req.stream = true;
    let mut g = c.benchmark_group("sse");
    g.throughput(Throughput::Elements(200));
    g.bench_function("stream_200_chunks/chat_transport", |b| {
        b.to_async(&rt).iter(|| async {
            let answer = transport.send(&req, None).await.unwrap();
            black_box(answer.content.len())
        })
    });
    g.finish();
    drop(mock);
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
        TransportConfig::from(&settings),
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

criterion_group!(benches, stream_200_chunks, overhead);
criterion_main!(benches);
