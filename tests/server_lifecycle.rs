//! `polygateway serve` over time: a client that disconnects cancels its governed call (upstream
//! request closed, pacer slots and leases released), shutdown drains streams in flight and bounds
//! the drain, the request timeout, and the operational endpoints (`/healthz`, `/readyz`,
//! `/metrics`, the status page).

mod server_support;

use std::time::Duration;

use futures::StreamExt;
use polygateway_testkit::{mock_settings, Behaviour, MockUpstream};
use serde_json::Value;
use server_support::*;

fn slow_stream() -> Behaviour {
    Behaviour::Healthy {
        ttft: Duration::ZERO,
        inter_token: Duration::from_millis(50),
        chunks: 20,
        content: "y".repeat(20),
    }
}

async fn idle(server: &TestServer, mock: &MockUpstream) -> bool {
    let sources = server.gw.sources("LLM").await.unwrap();
    sources.iter().all(|s| s.in_flight == 0)
        && server.gw.leases_held("LLM").await.unwrap() == 0
        && mock.in_flight() == 0
}

#[tokio::test(start_paused = true)]
async fn a_client_that_leaves_mid_stream_cancels_the_governed_call() {
    let mock = MockUpstream::start(slow_stream()).await;
    let server = start(mock_settings(&[("LLM", &mock.base_url())], &[])).await;
    let resp = reqwest::Client::new()
        .post(server.url("/v1/chat/completions"))
        .bearer_auth(KEY)
        .json(&chat_body("LLM", true))
        .send()
        .await
        .unwrap();
    let mut body = resp.bytes_stream();
    let first = body.next().await.unwrap().unwrap();
    assert!(first.starts_with(b"data: "));
    assert_eq!(
        mock.in_flight(),
        1,
        "the upstream request is open while relaying"
    );
    assert_eq!(server.gw.leases_held("LLM").await.unwrap(), 1);
    drop(body);
    eventually("upstream closed, slots and leases released", || {
        idle(&server, &mock)
    })
    .await;
    let snapshot = server.gw.sources("LLM").await.unwrap();
    assert_eq!(
        snapshot[0].cancelled, 1,
        "the attempt is recorded as cancelled"
    );
    assert_eq!(mock.counts().chat, 1, "nothing retried in the background");
    server.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_client_that_leaves_a_non_streamed_call_cancels_it_too() {
    let mock = MockUpstream::start(Behaviour::BlackHole).await;
    let server = start(mock_settings(&[("LLM", &mock.base_url())], &[])).await;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let sent = client
        .post(server.url("/v1/chat/completions"))
        .bearer_auth(KEY)
        .json(&chat_body("LLM", false))
        .send()
        .await;
    assert!(sent.unwrap_err().is_timeout());
    eventually("upstream closed, slots and leases released", || {
        idle(&server, &mock)
    })
    .await;
    server.stop().await;
}

#[tokio::test(start_paused = true)]
async fn shutdown_drains_a_stream_in_flight_and_refuses_new_connections() {
    let mock = MockUpstream::start(slow_stream()).await;
    let mut server = start(mock_settings(&[("LLM", &mock.base_url())], &[])).await;
    let resp = reqwest::Client::new()
        .post(server.url("/v1/chat/completions"))
        .bearer_auth(KEY)
        .json(&chat_body("LLM", true))
        .send()
        .await
        .unwrap();
    let mut body = resp.bytes_stream();
    let mut text = String::from_utf8(body.next().await.unwrap().unwrap().to_vec()).unwrap();
    server.begin_shutdown();
    while let Some(chunk) = body.next().await {
        text.push_str(std::str::from_utf8(&chunk.unwrap()).unwrap());
    }
    let payloads = sse_payloads(&text);
    assert_eq!(
        payloads.last().unwrap(),
        "[DONE]",
        "the stream ran to its end"
    );
    let content: String = payloads[..payloads.len() - 1]
        .iter()
        .filter_map(|p| {
            let v: Value = serde_json::from_str(p).unwrap();
            v["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_string)
        })
        .collect();
    assert_eq!(content, "y".repeat(20));
    server.served().await.unwrap();
    let refused = reqwest::Client::new()
        .get(server.url("/healthz"))
        .send()
        .await;
    assert!(
        refused.is_err(),
        "no connection is accepted after the drain"
    );
    server.gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn the_drain_is_bounded_and_what_remains_is_cancelled() {
    let mock = MockUpstream::start(Behaviour::Healthy {
        ttft: Duration::ZERO,
        inter_token: Duration::from_millis(200),
        chunks: 200,
        content: "z".repeat(200),
    })
    .await;
    let settings = mock_settings(
        &[("LLM", &mock.base_url())],
        &[("PGW_SERVER_DRAIN_TIMEOUT_S", "0.3")],
    );
    let mut server = start(settings).await;
    let resp = reqwest::Client::new()
        .post(server.url("/v1/chat/completions"))
        .bearer_auth(KEY)
        .json(&chat_body("LLM", true))
        .send()
        .await
        .unwrap();
    let mut body = resp.bytes_stream();
    body.next().await.unwrap().unwrap();
    server.begin_shutdown();
    server.served().await.unwrap();
    // serve() returned with the stream unfinished; its call is cancelled and everything released.
    let mut rest = String::new();
    while let Some(Ok(chunk)) = body.next().await {
        rest.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    assert!(!rest.contains("[DONE]"));
    eventually("upstream closed, slots and leases released", || {
        idle(&server, &mock)
    })
    .await;
    server.gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn the_request_timeout_answers_504_and_cancels() {
    let mock = MockUpstream::start(Behaviour::BlackHole).await;
    let settings = mock_settings(
        &[("LLM", &mock.base_url())],
        &[("PGW_SERVER_REQUEST_TIMEOUT_S", "0.3")],
    );
    let server = start(settings).await;
    let resp = reqwest::Client::new()
        .post(server.url("/v1/chat/completions"))
        .bearer_auth(KEY)
        .json(&chat_body("LLM", false))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 504);
    let e: Value = resp.json().await.unwrap();
    assert_eq!(e["error"]["code"], "request_timeout");
    eventually("upstream closed, slots and leases released", || {
        idle(&server, &mock)
    })
    .await;
    server.stop().await;
}

#[tokio::test(start_paused = true)]
async fn health_readiness_metrics_and_the_status_page() {
    assert!(polygateway::server::install_metrics_recorder());
    let good = MockUpstream::start(Behaviour::healthy()).await;
    let dead = MockUpstream::start(Behaviour::Unauthorized).await;
    let settings = mock_settings(
        &[("LLM", &good.base_url()), ("JUDGE", &dead.base_url())],
        &[
            ("JUDGE__RETRY__MAX_ATTEMPTS", "1"),
            // Operator data (error text) without an admin key: a loopback test server.
            ("PGW_SERVER_PUBLIC_STATUS", "true"),
        ],
    );
    let server = start(settings).await;
    let client = reqwest::Client::new();
    assert_eq!(
        client
            .get(server.url("/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let ready = client.get(server.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 200, "{:?}", ready.text().await);

    // A dead key force-opens JUDGE's only breaker: not ready, and the page shows it.
    let judged = client
        .post(server.url("/v1/chat/completions"))
        .bearer_auth(KEY)
        .json(&chat_body("JUDGE", false))
        .send()
        .await
        .unwrap();
    assert_eq!(judged.status(), 503);
    let ready = client.get(server.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 503);
    let why: Value = ready.json().await.unwrap();
    assert!(
        why["reasons"][0].as_str().unwrap().contains("JUDGE"),
        "{why}"
    );

    let ok = client
        .post(server.url("/v1/chat/completions"))
        .bearer_auth(KEY)
        .json(&chat_body("LLM", false))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    let metrics = client
        .get(server.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(metrics.contains("pgw_calls_total"), "{metrics}");
    assert!(metrics.contains("scope=\"LLM\""), "{metrics}");

    let page = client.get(server.url("/")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let html = page.text().await.unwrap();
    // Live: the page polls `status.json` (its script is inline, nothing is fetched elsewhere).
    assert!(html.contains("status.json") && !html.contains("<script src"));
    for needle in [
        "LLM",
        "JUDGE",
        "openai_1",
        ">open<",
        ">closed<",
        "recent errors",
    ] {
        assert!(html.contains(needle), "status page lacks {needle}: {html}");
    }
    assert!(!html.contains("sk-test"), "no secret on the page");
    server.stop().await;
}
