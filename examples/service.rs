//! An HTTP service embedding the runtime — a template to copy: several scopes, a governed SSE
//! relay, `/healthz` backed by the runtime, Prometheus `/metrics`, graceful shutdown.
//!
//! ```text
//! cargo run --features server --example service                 # serve on 127.0.0.1:8080 until Ctrl-C or SIGTERM
//! cargo run --features server --example service -- --self-test  # serve on a random port, exercise it, exit
//! ```
//!
//! With no `LLM__…` sources in the environment it serves against the built-in mock upstream, so it
//! runs anywhere. Endpoints:
//! - `POST /chat/{scope}` with `{"prompt": "…"}` → the answer as JSON (one governed call);
//! - `GET /stream/{scope}?prompt=…` → Server-Sent Events relaying `chat_stream()`: `content`,
//!   `reasoning`, then `done` (usage, source, cost) or `error`. The HTTP status is decided after
//!   the stream's first event: a call that fails before any delta (every source down, circuits
//!   open) is answered with its error status, not a 200 with an error inside. When the client
//!   disconnects the stream is dropped, which aborts the upstream request and releases its permits;
//! - `GET /healthz` → 200 with per-scope source states, 503 if any scope has no closed breaker;
//! - `GET /metrics` → the `pgw_*` metrics in the Prometheus text format (feature `server`: the
//!   recorder `polygateway serve` uses, installed before the gateway is built);
//! - `GET /dashboard` → the live dashboard of `polygateway serve`, mounted from
//!   `Server::dashboard()` (with its `GET /dashboard/status.json`). Operator data needs the admin
//!   key: `SERVICE_ADMIN_KEY` from the environment, or one generated and printed at start.
//!
//! Errors: 503 for an unavailable scope and 429 for a full quota, both with `Retry-After` (the
//! error's `retry_after_s` rounded up, never 0: `Unavailable::retry_after_header`). SIGTERM and
//! Ctrl-C stop accepting connections, let requests in flight finish, then shut the gateway down
//! (calls first, then the telemetry flush).

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Json, Response};
use axum::routing::{get, post};
use axum::Router;
use futures::{Stream, StreamExt};
use polygateway::config::ScopeKind;
use polygateway::ports::BreakerState;
use polygateway::{CallOptions, ChatEvent, Gateway, GatewayError, Message, UnavailableReason};
use polygateway_testkit::demo::settings_or_mock;
use polygateway_testkit::mock_llm::{Behaviour, MockUpstream};
use serde::Deserialize;
use serde_json::json;

#[derive(Deserialize)]
struct Prompt {
    prompt: String,
}

fn error_response(e: GatewayError) -> Response {
    let status = match &e {
        GatewayError::Unavailable(u) if u.reason == UnavailableReason::QuotaExhausted => {
            StatusCode::TOO_MANY_REQUESTS
        }
        GatewayError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        GatewayError::RequestRejected { .. } | GatewayError::InvalidInput(_) => {
            StatusCode::BAD_REQUEST
        }
        GatewayError::SourceNotConfigured(_) => StatusCode::NOT_FOUND,
        _ => StatusCode::BAD_GATEWAY,
    };
    let retry_after = e.unavailable().map(|u| u.retry_after_s);
    let mut response = (
        status,
        Json(
            json!({"error": e.to_string(), "class": e.class_name(), "retry_after_s": retry_after}),
        ),
    )
        .into_response();
    // Whole seconds, rounded up and never 0: a client honouring `Retry-After: 0` would retry at
    // once against a scope that just said it cannot serve.
    if let Some(u) = e.unavailable() {
        response.headers_mut().insert(
            header::RETRY_AFTER,
            HeaderValue::from(u.retry_after_header()),
        );
    }
    response
}

async fn chat(
    State(gw): State<Gateway>,
    Path(scope): Path<String>,
    Json(body): Json<Prompt>,
) -> impl IntoResponse {
    let handle = match gw.chat_scope(&scope) {
        Ok(h) => h,
        Err(e) => return error_response(e),
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
        Err(e) => error_response(e),
    }
}

async fn stream(
    State(gw): State<Gateway>,
    Path(scope): Path<String>,
    Query(q): Query<Prompt>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, Response> {
    let handle = gw.chat_scope(&scope).map_err(error_response)?;
    let mut governed = handle.chat_stream(vec![Message::user(q.prompt)], CallOptions::new());
    // Until the first event, failures are retried and switched inside the call; the one that
    // ends it gets a proper status (503 + Retry-After…), because once the 200 and the SSE
    // headers are sent, a failure can only be an `error` event inside a successful response.
    let first = match governed.next().await {
        Some(Err(e)) => return Err(error_response(e)),
        first => first,
    };
    // axum drops this stream when the client goes away; dropping a ChatStream cancels the call.
    let events = futures::stream::iter(first).chain(governed).map(|item| {
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

/// The same text `polygateway serve` answers on `/metrics`.
async fn metrics() -> Response {
    match polygateway::server::render_metrics() {
        Some(text) => ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            "another metrics recorder was installed first\n",
        )
            .into_response(),
    }
}

/// Resolves on Ctrl-C, or SIGTERM (what `docker stop`, systemd and Kubernetes send).
async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            eprintln!("service: cannot listen for Ctrl-C: {e}");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut sigterm) => {
                sigterm.recv().await;
            }
            Err(e) => {
                eprintln!("service: cannot listen for SIGTERM: {e}");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = terminate => {}
    }
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
    // Before the gateway is built: its metric handles are registered with the recorder installed
    // at that moment.
    if !polygateway::server::install_metrics_recorder() {
        eprintln!("service: another metrics recorder is installed; /metrics will answer 404");
    }
    let (settings, mocks) = settings_or_mock(
        &[("LLM", ScopeKind::Chat), ("JUDGE", ScopeKind::Chat)],
        "streamed from the built-in mock upstream, one piece at a time",
    )
    .await;
    let default_scope = settings.scopes.keys().next().cloned().expect("a scope");
    let gw = Gateway::from_settings(settings, &default_scope)
        .await
        .expect("the runtime starts");
    // The dashboard of `polygateway serve`, behind one admin key (typed once into the page).
    let admin = std::env::var("SERVICE_ADMIN_KEY").unwrap_or_else(|_| {
        let key = polygateway::server::generate_key();
        println!("service: dashboard admin key (this run only): {key}");
        key
    });
    let keys = polygateway::server::KeyStore::from_json(&format!(
        r#"{{"keys": [{{"name": "service-admin", "hash": "{}", "scopes": ["admin"]}}]}}"#,
        polygateway::server::hash_key(&admin)
    ))
    .expect("a valid key file");
    let dashboard = polygateway::server::Server::new(gw.clone(), keys)
        .expect("the dashboard's server state")
        .dashboard();
    let app = Router::new()
        .route("/chat/{scope}", post(chat))
        .route("/stream/{scope}", get(stream))
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .with_state(gw.clone())
        .nest("/dashboard", dashboard);
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
                    () = shutdown_signal() => println!("service: signal received, draining"),
                }
            })
            .await
    });

    if self_test {
        run_self_test(&format!("http://{local}"), &gw, &mocks.llm).await;
        dashboard_self_test(&format!("http://{local}"), &admin).await;
        let _ = stop_tx.send(());
    }
    match server.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => eprintln!("service: server error: {e}"),
        Err(e) => eprintln!("service: server task failed: {e}"),
    }
    // Requests have drained; now the calls still running (none, normally), then telemetry.
    gw.shutdown().await;
    println!("service: stopped; runtime shut down");
}

/// With JUDGE's upstream answering 503: the error status and `Retry-After`, for a plain call and
/// for a stream that fails before its first event.
async fn refusals(client: &reqwest::Client, base: &str, judge: &MockUpstream) {
    judge.set_behaviour(Behaviour::ServerError(503));
    let retry_after = |r: &reqwest::Response| {
        r.headers()
            .get(header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
    };
    let refused = client
        .post(format!("{base}/chat/JUDGE"))
        .json(&json!({"prompt": "hello"}))
        .send()
        .await
        .unwrap();
    println!(
        "upstream 503 → POST /chat/JUDGE → {}, Retry-After {:?}",
        refused.status(),
        retry_after(&refused)
    );
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(retry_after(&refused).is_some_and(|s| s >= 1));
    let stream = client
        .get(format!("{base}/stream/JUDGE?prompt=hello"))
        .send()
        .await
        .unwrap();
    println!(
        "upstream 503 → GET /stream/JUDGE → {}, Retry-After {:?} (decided after the first event)",
        stream.status(),
        retry_after(&stream)
    );
    assert_eq!(stream.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(retry_after(&stream).is_some_and(|s| s >= 1));
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
    let scrape = client.get(format!("{base}/metrics")).send().await.unwrap();
    let scrape = scrape.text().await.unwrap();
    assert!(scrape.contains("pgw_calls_total{"), "{scrape}");
    println!(
        "GET /metrics → {} pgw_ samples",
        scrape.lines().filter(|l| l.starts_with("pgw_")).count()
    );
    if let Some(judge) = mocks.get(1) {
        refusals(&client, base, judge).await;
    }

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

/// The mounted dashboard: the page, its public data without a key, the series with the key.
async fn dashboard_self_test(base: &str, admin: &str) {
    let client = reqwest::Client::new();
    let page = client
        .get(format!("{base}/dashboard"))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("status.json"));
    let public: serde_json::Value = client
        .get(format!("{base}/dashboard/status.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(public.get("series").is_none(), "{public}");
    let full: serde_json::Value = client
        .get(format!("{base}/dashboard/status.json?range=60"))
        .bearer_auth(admin)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let calls: u64 = full["series"]["scopes"]["JUDGE"]["calls"]
        .as_object()
        .expect("JUDGE's series")
        .values()
        .flat_map(|v| v.as_array().unwrap().iter().map(|n| n.as_u64().unwrap()))
        .sum();
    assert!(calls > 0, "{full}");
    println!("GET /dashboard/status.json (admin) → JUDGE: {calls} calls in the last minute");
}
