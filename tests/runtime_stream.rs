//! `chat_stream`: governed streaming to the caller.

mod common;

use std::time::Duration;

use common::{cancelled_attempts, gateway, wait_idle};
use futures::StreamExt;
use polygateway::{CallOptions, ChatEvent, GatewayError, Message};
use polygateway_testkit::mock_llm::{Behaviour, MockUpstream};

#[tokio::test(start_paused = true)]
async fn a_clean_stream_delivers_deltas_then_the_response() {
    let mock = MockUpstream::start(Behaviour::healthy_with("one two three four")).await;
    let gw = gateway(&[("a", &mock)], &[]).await;
    let mut stream = gw
        .chat_stream(vec![Message::user("hi")], CallOptions::new())
        .unwrap();
    let mut text = String::new();
    let mut done = None;
    while let Some(item) = stream.next().await {
        match item.unwrap() {
            ChatEvent::Content(delta) => text.push_str(&delta),
            ChatEvent::Done(resp) => done = Some(resp),
            _ => {}
        }
    }
    let done = done.expect("a final event");
    assert_eq!(text, "one two three four");
    assert_eq!(done.content, text);
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_failure_before_the_first_delta_is_retried_invisibly() {
    let mock = MockUpstream::start(Behaviour::Scripted(vec![
        Behaviour::ServerError(503),
        Behaviour::healthy_with("recovered"),
    ]))
    .await;
    let gw = gateway(&[("a", &mock)], &[]).await;
    let events: Vec<_> = gw
        .chat_stream(vec![Message::user("hi")], CallOptions::new())
        .unwrap()
        .collect()
        .await;
    assert!(events.iter().all(Result::is_ok), "{events:?}");
    assert!(matches!(events.last(), Some(Ok(ChatEvent::Done(r))) if r.content == "recovered"));
    assert_eq!(mock.counts().chat, 2);
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_failure_after_the_first_delta_is_an_error_item() {
    let mock = MockUpstream::start(Behaviour::TruncatedStream { with_usage: false }).await;
    let gw = gateway(&[("a", &mock)], &[]).await;
    let events: Vec<_> = gw
        .chat_stream(vec![Message::user("hi")], CallOptions::new())
        .unwrap()
        .collect()
        .await;
    assert!(matches!(events.first(), Some(Ok(ChatEvent::Content(_)))));
    match events.last() {
        Some(Err(GatewayError::StreamInterrupted { delivered, .. })) => assert!(*delivered > 0),
        other => panic!("expected StreamInterrupted, got {other:?}"),
    }
    assert_eq!(
        mock.counts().chat,
        1,
        "no retry after deltas were delivered"
    );
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn dropping_the_stream_closes_the_upstream_and_releases_everything() {
    let mock = MockUpstream::start(Behaviour::Healthy {
        ttft: Duration::from_millis(10),
        inter_token: Duration::from_millis(100),
        chunks: 50,
        content: "x".repeat(50),
    })
    .await;
    let gw = gateway(&[("a", &mock)], &[]).await;
    let mut stream = gw
        .chat_stream(vec![Message::user("hi")], CallOptions::new())
        .unwrap();
    assert!(matches!(
        stream.next().await,
        Some(Ok(ChatEvent::Content(_)))
    ));
    drop(stream);
    wait_idle(&gw, &[&mock]).await;
    assert_eq!(cancelled_attempts(&gw).await, 1);
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_slow_consumer_pauses_the_upstream_instead_of_buffering() {
    let mock = MockUpstream::start(Behaviour::Healthy {
        ttft: Duration::from_millis(1),
        inter_token: Duration::from_millis(0),
        // 16 MB in 4 KB deltas: far more than loopback socket buffers hold, so if the runtime
        // buffered without bound the upstream would finish while the consumer sleeps.
        chunks: 4096,
        content: "y".repeat(16 * 1024 * 1024),
    })
    .await;
    // The mock prepares 16 MB on the test's single thread before the first byte (seconds in a
    // debug build on a busy machine): generous watchdogs, so this tests backpressure, not TTFT.
    let gw = gateway(
        &[("a", &mock)],
        &[
            ("LLM__A__1__TIMEOUT_S", "120"),
            ("LLM__A__1__TTFT_TIMEOUT_S", "60"),
            ("LLM__A__1__INTER_TOKEN_TIMEOUT_S", "30"),
        ],
    )
    .await;
    let mut stream = gw
        .chat_stream(vec![Message::user("hi")], CallOptions::new())
        .unwrap();
    // Read one delta, then stall: the bounded channel holds at most 32 deltas, the rest waits
    // upstream.
    assert!(stream.next().await.is_some());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        mock.in_flight(),
        1,
        "the upstream request is still open (paused), not finished"
    );
    let rest: Vec<_> = stream.collect().await;
    assert!(matches!(rest.last(), Some(Ok(ChatEvent::Done(_)))));
    gw.shutdown().await;
}

const CACHE: [(&str, &str); 3] = [
    ("PGW_CACHE_BACKEND", "memory"),
    ("PGW_CACHE_NAMESPACE", "stream-tests"),
    ("PGW_CACHE_TTL_S", "60"),
];

#[tokio::test(start_paused = true)]
async fn a_clean_stream_is_cached_and_a_hit_replays_as_a_stream() {
    let mock = MockUpstream::start(Behaviour::healthy_with("cache me")).await;
    let gw = gateway(&[("a", &mock)], &CACHE).await;
    let first: Vec<_> = gw
        .chat_stream(vec![Message::user("q")], CallOptions::new())
        .unwrap()
        .collect()
        .await;
    assert!(matches!(first.last(), Some(Ok(ChatEvent::Done(r))) if !r.cache_hit));
    let replay: Vec<_> = gw
        .chat_stream(vec![Message::user("q")], CallOptions::new())
        .unwrap()
        .collect()
        .await;
    assert_eq!(replay.len(), 2, "one content event, then the final event");
    assert!(matches!(&replay[0], Ok(ChatEvent::Content(t)) if t == "cache me"));
    assert!(matches!(&replay[1], Ok(ChatEvent::Done(r)) if r.cache_hit));
    assert_eq!(mock.counts().chat, 1);
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_broken_stream_is_never_cached() {
    let mock = MockUpstream::start(Behaviour::Scripted(vec![
        Behaviour::TruncatedStream { with_usage: true },
        Behaviour::healthy_with("whole"),
    ]))
    .await;
    let gw = gateway(&[("a", &mock)], &CACHE).await;
    let broken: Vec<_> = gw
        .chat_stream(vec![Message::user("q")], CallOptions::new())
        .unwrap()
        .collect()
        .await;
    assert!(matches!(
        broken.last(),
        Some(Err(GatewayError::StreamInterrupted { .. }))
    ));
    let resp = gw.chat(vec![Message::user("q")]).await.unwrap();
    assert!(!resp.cache_hit, "the truncated stream was not stored");
    assert_eq!(resp.content, "whole");
    assert_eq!(mock.counts().chat, 2);
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn every_streamed_attempt_has_a_row_and_a_dropped_stream_is_recorded_cancelled() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.sqlite");
    let db_s = db.display().to_string();
    let mock = MockUpstream::start(Behaviour::Scripted(vec![
        Behaviour::ServerError(503),
        Behaviour::healthy_with("clean"),
        Behaviour::Healthy {
            ttft: Duration::from_millis(5),
            inter_token: Duration::from_millis(200),
            chunks: 20,
            content: "z".repeat(20),
        },
    ]))
    .await;
    let gw = gateway(
        &[("a", &mock)],
        &[
            ("PGW_TELEMETRY_BACKEND", "sqlite"),
            ("PGW_TELEMETRY_SQLITE_PATH", &db_s),
        ],
    )
    .await;
    // A retry before the first delta, then a clean stream: two attempt rows.
    let clean: Vec<_> = gw
        .chat_stream(vec![Message::user("one")], CallOptions::new())
        .unwrap()
        .collect()
        .await;
    let done = match clean.last() {
        Some(Ok(ChatEvent::Done(r))) => r.clone(),
        other => panic!("{other:?}"),
    };
    // A stream dropped after its first delta: one `cancelled` row.
    let mut dropped = gw
        .chat_stream(vec![Message::user("two")], CallOptions::new())
        .unwrap();
    assert!(matches!(
        dropped.next().await,
        Some(Ok(ChatEvent::Content(_)))
    ));
    drop(dropped);
    wait_idle(&gw, &[&mock]).await;
    gw.shutdown().await;

    let conn = rusqlite::Connection::open(&db).unwrap();
    let mut stmt = conn
        .prepare("SELECT call_id, COALESCE(error, ''), response FROM llm_calls ORDER BY created_at, rowid")
        .unwrap();
    let rows: Vec<(String, String, Option<String>)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert!(rows[0].1.starts_with("TransientError: "), "{rows:?}");
    assert_eq!(rows[1].0, done.call_id);
    assert_eq!(rows[1].2.as_deref(), Some("clean"));
    assert_eq!(rows[2].1, "cancelled");
}
