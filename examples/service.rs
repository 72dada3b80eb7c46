//! An HTTP service embedding the runtime: several scopes, a governed SSE relay, `/healthz` backed
//! by the runtime, graceful shutdown.
//!
//! ```text
//! cargo run --features testkit --example service                 # serve on 127.0.0.1:8080 until Ctrl-C
//! cargo run --features testkit --example service -- --self-test  # serve on a random port, exercise it, exit
//! ```
//!
//! With no `LLM__…` sources in the environment it serves against the built-in mock upstream, so it
//! runs anywhere. Endpoints:
//! - `POST /chat/{scope}` with `{"prompt": "…"}` → the answer as JSON (one governed call);
//! - `GET /stream/{scope}?prompt=…` → Server-Sent Events relaying `chat_stream()`: `content`,
//!   `reasoning`, then `done` (usage, source, cost) or `error`. When the client disconnects the
//!   stream is dropped, which aborts the upstream request and releases its permits;
//! - `GET /healthz` → 200 with per-scope source states, 503 if any scope has no closed breaker.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Json};
use axum::routing::{get, post};
use axum::Router;
use futures::{Stream, StreamExt};
use polygateway::config::ScopeKind;
use polygateway::ports::BreakerState;
use polygateway::testkit::demo::settings_or_mock;
use polygateway::testkit::mock_llm::MockUpstream;
use polygateway::{CallOptions, ChatEvent, Gateway, GatewayError, Message};
use serde::Deserialize;
use serde_json::json;

#[derive(Deserialize)]
struct Prompt {
    prompt: String,
}

fn error_response(e: GatewayError) -> (StatusCode, Json<serde_json::Value>) {
    let status = match &e {
        GatewayError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        GatewayError::RequestRejected { .. } | GatewayError::InvalidInput(_) => {
            StatusCode::BAD_REQUEST
        }
        GatewayError::SourceNotConfigured(_) => StatusCode::NOT_FOUND,
        _ => StatusCode::BAD_GATEWAY,
    };
    let retry_after = e.unavailable().map(|u| u.retry_after_s);
    (
        status,
        Json(
            json!({"error": e.to_string(), "class": e.class_name(), "retry_after_s": retry_after}),
        ),
    )
}

async fn chat(
    State(gw): State<Gateway>,
    Path(scope): Path<String>,
    Json(body): Json<Prompt>,
) -> impl IntoResponse {
    let handle = match gw.chat_scope(&scope) {
        Ok(h) => h,
        Err(e) => return error_response(e).into_response(),
    };
    match handle.chat(vec![Message::user(body.prompt)]).await {
        Ok(r) => Json(json!({
            "content": r.content,
            "source": r.source_name,
            "prompt_tokens": r.prompt_tokens,
            "completion_tokens": r.completion_tokens,
            "latency_ms": r.latency_ms,
            "cost": r.cost,
        }))
        .into_response(),
        Err(e) => error_response(e).into_response(),
    }
}

async fn stream(
    State(gw): State<Gateway>,
    Path(scope): Path<String>,
    Query(q): Query<Prompt>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, (StatusCode, Json<serde_json::Value>)>
{
    let handle = gw.chat_scope(&scope).map_err(error_response)?;
    // axum drops this stream when the client goes away; dropping a ChatStream cancels the call.
    let events = handle
        .chat_stream(vec![Message::user(q.prompt)], CallOptions::new())
        .map(|item| {
            Ok(match item {
                Ok(ChatEvent::Content(text)) => Event::default().event("content").data(text),
                Ok(ChatEvent::Reasoning(text)) => Event::default().event("reasoning").data(text),
                Ok(ChatEvent::Done(r)) => Event::default().event("done").data(
                    json!({"source": r.source_name, "prompt_tokens": r.prompt_tokens,
                           "completion_tokens": r.completion_tokens, "cost": r.cost})
                    .to_string(),
                ),
                Ok(_) => Event::default().comment("unknown event"),
                Err(e) => Event::default().event("error").data(e.to_string()),
            })
        });
    Ok(Sse::new(events).keep_alive(KeepAlive::default()))
}

async fn healthz(State(gw): State<Gateway>) -> impl IntoResponse {
    let mut scopes = serde_json::Map::new();
    let mut healthy = true;
    for scope in gw.scopes() {
        let sources = gw.sources(&scope).await.unwrap_or_default();
        healthy &= sources
            .iter()
            .any(|s| s.breaker == Some(BreakerState::Closed));
        scopes.insert(
            scope,
            sources
                .iter()
                .map(|s| {
                    json!({"source": s.name, "breaker": s.breaker.map(|b| b.as_str()),
                                "health": s.health, "in_flight": s.in_flight})
                })
                .collect(),
        );
    }
    let telemetry = gw.telemetry_status();
    let status = if healthy {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        status,
        Json(
            json!({"scopes": scopes, "telemetry_degraded": telemetry.degraded,
                    "telemetry_dropped_rows": telemetry.dropped_rows}),
        ),
    )
}

#[tokio::main]
async fn main() {
    let self_test = std::env::args().any(|a| a == "--self-test");
    let (settings, mocks) = settings_or_mock(
        &[("LLM", ScopeKind::Chat), ("JUDGE", ScopeKind::Chat)],
        "streamed from the built-in mock upstream, one piece at a time",
    )
    .await;
    let default_scope = settings.scopes.keys().next().cloned().expect("a scope");
    let gw = Gateway::from_settings(settings, &default_scope)
        .await
        .expect("the runtime starts");
    let app = Router::new()
        .route("/chat/{scope}", post(chat))
        .route("/stream/{scope}", get(stream))
        .route("/healthz", get(healthz))
        .with_state(gw.clone());
    let addr = if self_test {
        "127.0.0.1:0"
    } else {
        "127.0.0.1:8080"
    };
    let listener = tokio::net::TcpListener::bind(addr).await.expect("bind");
    let local = listener.local_addr().unwrap();
    println!(
        "service: listening on http://{local} (scopes: {:?})",
        gw.scopes()
    );
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async {
                tokio::select! {
                    _ = stop_rx => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            })
            .await
    });

    if self_test {
        run_self_test(&format!("http://{local}"), &gw, &mocks.llm).await;
        let _ = stop_tx.send(());
    }
    let _ = server.await;
    gw.shutdown().await;
    println!("service: stopped; runtime shut down");
}

async fn run_self_test(base: &str, gw: &Gateway, mocks: &[MockUpstream]) {
    let client = reqwest::Client::new();
    let health = client.get(format!("{base}/healthz")).send().await.unwrap();
    println!(
        "GET /healthz → {} {}",
        health.status(),
        health.text().await.unwrap()
    );
    let answer = client
        .post(format!("{base}/chat/JUDGE"))
        .json(&json!({"prompt": "hello"}))
        .send()
        .await
        .unwrap();
    println!(
        "POST /chat/JUDGE → {} {}",
        answer.status(),
        answer.text().await.unwrap()
    );

    // Read the first few SSE chunks, then disconnect mid-stream.
    let mut body = client
        .get(format!("{base}/stream/LLM?prompt=tell%20me"))
        .send()
        .await
        .unwrap()
        .bytes_stream();
    let mut seen = String::new();
    while seen.matches("event: content").count() < 3 {
        let chunk = body.next().await.expect("stream open").unwrap();
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    println!("GET /stream/LLM → first events:\n{}", seen.trim_end());
    drop(body);
    // The client is gone: the governed stream is dropped and the upstream request aborted.
    for _ in 0..100 {
        let idle = gw
            .sources("LLM")
            .await
            .unwrap()
            .iter()
            .all(|s| s.in_flight == 0);
        if idle && mocks.iter().all(|m| m.in_flight() == 0) {
            println!("client disconnected → upstream closed, pacer slots and leases released");
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!("client disconnected → upstream still open after 2 s (unexpected)");
    std::process::exit(1);
}
