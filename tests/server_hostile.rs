//! `polygateway serve` under hostile clients (docs/behaviour.md §12.8): partial heads
//! (slowloris), slow bodies, a flood past the connection cap, oversized and too many headers,
//! invalid UTF-8 in headers and bodies, deep JSON nesting on every ingress route, pipelined
//! requests. During each attack a well-behaved client calls and must succeed. Loopback only,
//! small numbers, small timeouts (through the `PGW_SERVER_*` keys); every wait is bounded.

mod server_support;

use std::time::Duration;

use polygateway_testkit::{mock_settings, Behaviour, MockUpstream};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{timeout, Instant};

use server_support::*;

/// The limits every test runs with, small so the attacks end quickly.
const HEADER_TIMEOUT_S: &str = "0.5";
const BODY_TIMEOUT_S: &str = "0.5";
/// Generous: how long past its timeout a hostile connection may stay open before the test fails.
const SLACK: Duration = Duration::from_secs(5);

struct Setup {
    server: TestServer,
    admin: String,
    _mock: MockUpstream,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

async fn setup(extra: &[(&str, &str)]) -> Setup {
    let mock = MockUpstream::start(Behaviour::healthy_with("hi")).await;
    let admin = format!("127.0.0.1:{}", free_port());
    let mut keys = vec![
        ("PGW_SERVER_HEADER_TIMEOUT_S", HEADER_TIMEOUT_S),
        ("PGW_SERVER_BODY_TIMEOUT_S", BODY_TIMEOUT_S),
        ("PGW_SERVER_BODY_MIN_BYTES_PER_S", "1000"),
        ("PGW_SERVER_IDLE_TIMEOUT_S", "5"),
        ("PGW_SERVER_MAX_CONNECTIONS", "64"),
        ("PGW_SERVER_ADMIN_BIND", admin.as_str()),
    ];
    for (k, v) in extra {
        keys.retain(|(key, _)| key != k);
        keys.push((k, v));
    }
    let settings = mock_settings(&[("LLM", &mock.base_url())], &keys);
    let server = start(settings).await;
    let admin = format!("http://{admin}");
    // The admin listener is bound inside `serve`: wait for it.
    let client = reqwest::Client::new();
    eventually("the admin listener answers", || {
        let url = format!("{admin}/healthz");
        let client = client.clone();
        async move { client.get(url).send().await.is_ok() }
    })
    .await;
    Setup {
        server,
        admin,
        _mock: mock,
    }
}

fn addr(server: &TestServer) -> String {
    server.base.trim_start_matches("http://").to_string()
}

/// A well-behaved client: a chat call on the main listener and `/healthz` on both listeners
/// succeed.
async fn well_behaved(client: &reqwest::Client, setup: &Setup) {
    let answer = client
        .post(setup.server.url("/v1/chat/completions"))
        .bearer_auth(KEY)
        .json(&chat_body("LLM", false))
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .expect("the well-behaved chat call is answered");
    assert_eq!(answer.status(), 200);
    let body: serde_json::Value = answer.json().await.unwrap();
    assert_eq!(body["choices"][0]["message"]["content"], "hi");
    for base in [setup.server.base.as_str(), setup.admin.as_str()] {
        let health = client
            .get(format!("{base}/healthz"))
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .expect("/healthz is answered");
        assert_eq!(health.status(), 200);
    }
}

/// Reads until the server closes the connection (EOF or reset); answers what was read and when
/// the close came. Panics if it stays open past `bound`.
async fn read_until_closed(stream: &mut TcpStream, bound: Duration) -> (Vec<u8>, Instant) {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + bound;
    loop {
        match timeout(deadline - Instant::now(), stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return (got, Instant::now()),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => panic!(
                "the server kept a hostile connection open past {bound:?}; read so far: {:?}",
                String::from_utf8_lossy(&got)
            ),
        }
    }
}

/// The status code of the first response in `raw`.
fn status_of(raw: &[u8]) -> u16 {
    let text = String::from_utf8_lossy(raw);
    text.split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP status in {text:?}"))
}

#[tokio::test(start_paused = true)]
async fn partial_heads_are_closed_at_the_header_timeout() {
    // An idle timeout far above the header timeout and its slack, so the two cannot be confused.
    let setup = setup(&[("PGW_SERVER_IDLE_TIMEOUT_S", "30")]).await;
    let client = reqwest::Client::new();
    well_behaved(&client, &setup).await;
    let mut attackers = Vec::new();
    for i in 0..20 {
        let mut s = TcpStream::connect(addr(&setup.server)).await.unwrap();
        // Half of them send a partial request line, the other half nothing at all.
        if i % 2 == 0 {
            s.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ")
                .await
                .unwrap();
        }
        attackers.push(s);
    }
    well_behaved(&client, &setup).await;
    let bound = Duration::from_secs_f64(HEADER_TIMEOUT_S.parse().unwrap()) + SLACK;
    for mut s in attackers {
        let (got, _) = read_until_closed(&mut s, bound).await;
        // No request was read: nothing is answered, the connection is just closed.
        assert!(got.is_empty(), "{:?}", String::from_utf8_lossy(&got));
    }
    // A keep-alive connection that starts a head after a request gets the header timeout too,
    // not the (longer) idle timeout.
    let mut s = TcpStream::connect(addr(&setup.server)).await.unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !String::from_utf8_lossy(&got).contains("\"ok\"") {
        let n = timeout(SLACK, s.read(&mut buf)).await.unwrap().unwrap();
        assert!(n > 0, "closed before answering");
        got.extend_from_slice(&buf[..n]);
    }
    assert_eq!(status_of(&got), 200);
    s.write_all(b"GET /healthz HTTP/1.1\r\nHo").await.unwrap();
    let (got, _) = read_until_closed(&mut s, bound).await;
    assert!(got.is_empty(), "{:?}", String::from_utf8_lossy(&got));
    well_behaved(&client, &setup).await;
    setup.server.stop().await;
}

#[tokio::test(start_paused = true)]
async fn slow_bodies_are_closed_below_the_minimum_rate() {
    let setup = setup(&[]).await;
    let client = reqwest::Client::new();
    let mut attackers = Vec::new();
    for _ in 0..10 {
        let mut s = TcpStream::connect(addr(&setup.server)).await.unwrap();
        s.write_all(
            format!(
                "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n\
                 Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{{\"model\""
            )
            .as_bytes(),
        )
        .await
        .unwrap();
        attackers.push(s);
    }
    // Trickle a byte per connection every 100 ms (10 B/s, far below 1000 B/s) until the server
    // closes it, while a well-behaved client calls.
    let started = Instant::now();
    let bound = Duration::from_secs_f64(BODY_TIMEOUT_S.parse().unwrap()) + SLACK;
    let trickles: Vec<_> = attackers
        .into_iter()
        .map(|mut s| {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                loop {
                    tokio::select! {
                        read = s.read(&mut buf) => match read {
                            Ok(0) | Err(_) => return Instant::now(),
                            Ok(_) => {}
                        },
                        () = tokio::time::sleep(Duration::from_millis(100)) => {
                            let _ = s.write_all(b" ").await;
                        }
                    }
                }
            })
        })
        .collect();
    for _ in 0..5 {
        well_behaved(&client, &setup).await;
    }
    for trickle in trickles {
        let closed_at = timeout(bound, trickle)
            .await
            .expect("a slow body was closed within its grace")
            .unwrap();
        assert!(closed_at - started < bound);
    }
    // A body that arrives at a normal pace is not cut.
    let big = "x".repeat(200_000);
    let answer = client
        .post(setup.server.url("/v1/chat/completions"))
        .bearer_auth(KEY)
        .json(&json!({"model": "LLM", "messages": [{"role": "user", "content": big}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    setup.server.stop().await;
}

#[tokio::test(start_paused = true)]
async fn slow_bodies_are_closed_within_the_grace_plus_the_rate() {
    let setup = setup(&[]).await;
    let mut s = TcpStream::connect(addr(&setup.server)).await.unwrap();
    s.write_all(
        format!(
            "POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n\
             Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{"
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let started = Instant::now();
    let bound = Duration::from_secs_f64(BODY_TIMEOUT_S.parse().unwrap()) + SLACK;
    let (_, at) = read_until_closed(&mut s, bound).await;
    assert!(at - started < bound);
    well_behaved(&reqwest::Client::new(), &setup).await;
    setup.server.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_flood_past_the_cap_is_closed_at_once_and_healthz_still_answers() {
    // Shedding shows on /metrics.
    assert!(polygateway::server::install_metrics_recorder());
    // A long header timeout: whatever closes within it was shed at the cap.
    let setup = setup(&[
        ("PGW_SERVER_MAX_CONNECTIONS", "16"),
        ("PGW_SERVER_HEADER_TIMEOUT_S", "30"),
        ("PGW_SERVER_IDLE_TIMEOUT_S", "30"),
    ])
    .await;
    // The well-behaved client holds a keep-alive connection from before the flood.
    let client = reqwest::Client::new();
    well_behaved(&client, &setup).await;
    let mut flood = Vec::new();
    for _ in 0..48 {
        flood.push(TcpStream::connect(addr(&setup.server)).await.unwrap());
    }
    // At most 16 are held (the well-behaved client's among them): at least 33 are closed at
    // once, long before the 30 s header timeout.
    let reads = flood.into_iter().map(|mut s| async move {
        let mut buf = [0u8; 16];
        match timeout(Duration::from_secs(2), s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => None,
            Ok(Ok(_)) => panic!("the server wrote to a connection that sent nothing"),
            Err(_) => Some(s),
        }
    });
    let results = futures::future::join_all(reads).await;
    let closed = results.iter().filter(|r| r.is_none()).count() as u32;
    let open: Vec<TcpStream> = results.into_iter().flatten().collect();
    assert!(closed >= 48 - 15, "only {closed} of 48 closed at the cap");
    assert!(!open.is_empty(), "the cap held no flood connection at all");
    // During the flood: the admin listener answers, the kept connection calls.
    well_behaved(&client, &setup).await;
    let metrics = reqwest::get(format!("{}/metrics", setup.admin))
        .await
        .unwrap();
    assert_eq!(metrics.status(), 200);
    let text = metrics.text().await.unwrap();
    let value = |prefix: &str| -> f64 {
        text.lines()
            .find(|l| l.starts_with(prefix))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or_else(|| panic!("no {prefix} on /metrics:\n{text}"))
    };
    let shed = value("pgw_server_connections_shed_total{reason=\"cap\"}");
    assert!(shed >= f64::from(closed), "{shed} < {closed}");
    // The main listener's 16 at most, and a few of the admin listener's own (this client's
    // probe and the scrape).
    let open_now = value("pgw_server_connections ");
    assert!((2.0..=16.0 + 4.0).contains(&open_now), "{open_now}");
    // When the flood goes away, new connections are served again.
    drop(open);
    eventually("a new connection is served after the flood", || {
        let url = setup.server.url("/healthz");
        async move {
            let fresh = reqwest::Client::new();
            matches!(fresh.get(url).send().await, Ok(r) if r.status() == 200)
        }
    })
    .await;
    setup.server.stop().await;
}

#[tokio::test(start_paused = true)]
async fn oversized_and_too_many_headers_are_431() {
    let setup = setup(&[]).await;
    let client = reqwest::Client::new();
    let huge = format!(
        "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(100 << 10)
    );
    let mut many = String::from("GET /healthz HTTP/1.1\r\nHost: x\r\n");
    for i in 0..150 {
        many.push_str(&format!("X-H{i}: v\r\n"));
    }
    many.push_str("\r\n");
    for request in [huge, many] {
        let mut s = TcpStream::connect(addr(&setup.server)).await.unwrap();
        let _ = s.write_all(request.as_bytes()).await;
        let (got, _) = read_until_closed(&mut s, SLACK).await;
        assert_eq!(status_of(&got), 431, "{:?}", String::from_utf8_lossy(&got));
        well_behaved(&client, &setup).await;
    }
    setup.server.stop().await;
}

/// Sends `head` + `body` on a fresh connection and answers the response's status.
async fn raw_status(server: &TestServer, head: &[u8], body: &[u8]) -> u16 {
    let mut s = TcpStream::connect(addr(server)).await.unwrap();
    s.write_all(head).await.unwrap();
    s.write_all(
        format!(
            "Content-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    s.write_all(body).await.unwrap();
    let (got, _) = read_until_closed(&mut s, Duration::from_secs(10)).await;
    status_of(&got)
}

const INGRESSES: [&str; 4] = [
    "/v1/chat/completions",
    "/v1/embeddings",
    "/v1/messages",
    "/v1/responses",
];

#[tokio::test(start_paused = true)]
async fn invalid_utf8_in_headers_and_bodies_is_refused_cleanly() {
    let setup = setup(&[]).await;
    let client = reqwest::Client::new();
    // A bearer token that is not UTF-8: 401, never a crash.
    let mut head =
        b"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \xff\xfe\xfd\r\n".to_vec();
    assert_eq!(raw_status(&setup.server, &head, b"").await, 401);
    // A priority header that is not UTF-8: refused (400), the call never made.
    head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n\
         Content-Type: application/json\r\n"
    )
    .into_bytes();
    head.extend_from_slice(b"x-pgw-priority: \xc3\x28\r\n");
    let body = serde_json::to_vec(&chat_body("LLM", false)).unwrap();
    let status = raw_status(&setup.server, &head, &body).await;
    assert!((400..500).contains(&status), "{status}");
    // A body that is not UTF-8 on every ingress: 400.
    for path in INGRESSES {
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\nx-api-key: {KEY}\r\n\
             Content-Type: application/json\r\n"
        );
        let body = b"{\"model\": \"LLM\", \"input\": \"\xff\xfe\", \"messages\": [{\"role\": \"user\", \"content\": \"\xc3\x28\"}]}";
        let status = raw_status(&setup.server, head.as_bytes(), body).await;
        assert_eq!(status, 400, "{path}");
        well_behaved(&client, &setup).await;
    }
    setup.server.stop().await;
}

#[tokio::test(start_paused = true)]
async fn deep_json_nesting_is_refused_on_every_ingress() {
    let setup = setup(&[("PGW_SERVER_BODY_TIMEOUT_S", "10")]).await;
    let client = reqwest::Client::new();
    for depth in [200, 100_000] {
        let nested = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        for path in INGRESSES {
            let body = format!(
                r#"{{"model": "LLM", "input": {nested}, "messages": [{{"role": "user", "content": {nested}}}], "max_tokens": 16}}"#
            );
            let answer = client
                .post(setup.server.url(path))
                .bearer_auth(KEY)
                .header("x-api-key", KEY)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap_or_else(|e| panic!("{path} at depth {depth}: {e}"));
            assert_eq!(answer.status(), 400, "{path} at depth {depth}");
            well_behaved(&client, &setup).await;
        }
    }
    setup.server.stop().await;
}

#[tokio::test(start_paused = true)]
async fn pipelined_requests_are_answered_in_order() {
    let setup = setup(&[]).await;
    let body = serde_json::to_string(&chat_body("LLM", false)).unwrap();
    let mut s = TcpStream::connect(addr(&setup.server)).await.unwrap();
    let pipelined = format!(
        "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n\
         POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}\
         GET /nope HTTP/1.1\r\nHost: x\r\n\r\n\
         GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(pipelined.as_bytes()).await.unwrap();
    let (got, _) = read_until_closed(&mut s, Duration::from_secs(10)).await;
    let text = String::from_utf8_lossy(&got);
    let statuses: Vec<&str> = text
        .match_indices("HTTP/1.1 ")
        .map(|(i, _)| &text[i + 9..i + 12])
        .collect();
    assert_eq!(statuses, ["200", "200", "404", "200"], "{text}");
    assert!(text.contains("\"hi\""), "{text}");
    well_behaved(&reqwest::Client::new(), &setup).await;
    setup.server.stop().await;
}

#[tokio::test(start_paused = true)]
async fn the_drain_still_ends_held_connections() {
    let mut setup = setup(&[
        ("PGW_SERVER_HEADER_TIMEOUT_S", "30"),
        ("PGW_SERVER_DRAIN_TIMEOUT_S", "1"),
    ])
    .await;
    let mut idle = TcpStream::connect(addr(&setup.server)).await.unwrap();
    let mut partial = TcpStream::connect(addr(&setup.server)).await.unwrap();
    partial
        .write_all(b"GET /healthz HTTP/1.1\r\n")
        .await
        .unwrap();
    well_behaved(&reqwest::Client::new(), &setup).await;
    setup.server.begin_shutdown();
    timeout(Duration::from_secs(10), setup.server.served())
        .await
        .expect("serve returns within the drain timeout and its bound")
        .unwrap();
    read_until_closed(&mut idle, SLACK).await;
    read_until_closed(&mut partial, SLACK).await;
    // The admin listener is closed too once the drain has ended.
    assert!(reqwest::get(format!("{}/healthz", setup.admin))
        .await
        .is_err());
    setup.server.gw.shutdown().await;
}
