//! The governed chat path end to end against the mock upstream, with in-memory governance.

mod common;

use polygateway::Message;
use polygateway_testkit::mock_llm::{Behaviour, MockUpstream};

#[tokio::test(start_paused = true)]
async fn a_healthy_source_answers_through_the_runtime() {
    let mock = MockUpstream::start(Behaviour::healthy_with("hello there")).await;
    let gw = common::gateway(&[("openai", &mock)], &[]).await;
    let resp = gw.chat(vec![Message::user("hi")]).await.unwrap();
    assert_eq!(resp.content, "hello there");
    assert_eq!(resp.source_name, "openai_1");
    assert_eq!(resp.call_id.len(), 36);
    assert_eq!(mock.counts().chat, 1);
    gw.shutdown().await;
}

fn telemetry_errors(path: &std::path::Path) -> Vec<String> {
    let db = rusqlite::Connection::open(path).unwrap();
    let mut stmt = db
        .prepare("SELECT error FROM llm_calls WHERE error IS NOT NULL")
        .unwrap();
    stmt.query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

#[tokio::test(start_paused = true)]
async fn an_abrupt_close_is_named_in_the_error_and_in_telemetry() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.sqlite");
    let db_s = db.display().to_string();
    let mock = MockUpstream::start(Behaviour::AbruptClose {
        content: true,
        with_usage: true,
    })
    .await;
    let keys = [
        ("LLM__RETRY__MAX_ATTEMPTS", "1"),
        ("PGW_TELEMETRY_BACKEND", "sqlite"),
        ("PGW_TELEMETRY_SQLITE_PATH", db_s.as_str()),
    ];
    let gw = common::gateway(&[("openai", &mock)], &keys).await;
    let err = gw.chat(vec![Message::user("hi")]).await.unwrap_err();
    gw.shutdown().await;
    let chars = polygateway_testkit::mock_llm::MOCK_CONTENT.chars().count();
    let named = format!("truncated stream: connection closed after {chars} chars");
    let text = err.to_string();
    assert_eq!(text.matches(&named).count(), 1, "{text}");
    let rows = telemetry_errors(&db);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert!(rows[0].contains(&named), "{rows:?}");
}

#[tokio::test(start_paused = true)]
async fn an_error_message_says_each_thing_once() {
    let mock = MockUpstream::start(Behaviour::Unauthorized).await;
    let gw = common::gateway(&[("openai", &mock)], &[("LLM__RETRY__MAX_ATTEMPTS", "1")]).await;
    let err = gw.chat(vec![Message::user("hi")]).await.unwrap_err();
    gw.shutdown().await;
    let text = err.to_string();
    for once in ["last error", "attempt(s) failed", "401", "retry after"] {
        assert_eq!(text.matches(once).count(), 1, "{once:?} in {text}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_stream_false_source_serves_chat_and_chat_stream_without_streaming() {
    use futures::StreamExt;
    let mock = MockUpstream::start(Behaviour::healthy_with("whole answer")).await;
    let gw = common::gateway(&[("openai", &mock)], &[("LLM__OPENAI__1__STREAM", "false")]).await;
    let resp = gw.chat(vec![Message::user("hi")]).await.unwrap();
    assert_eq!(resp.content, "whole answer");
    assert_eq!(resp.ttft_ms, None, "no stream, no time to first token");
    assert_eq!(mock.last_request().unwrap().body["stream"], false);

    let events: Vec<_> = gw
        .chat_stream(
            vec![Message::user("again")],
            polygateway::CallOptions::new(),
        )
        .unwrap()
        .collect()
        .await;
    let mut content = String::new();
    let mut done = false;
    for event in events {
        match event.unwrap() {
            polygateway::ChatEvent::Content(c) => content.push_str(&c),
            polygateway::ChatEvent::Done(r) => done = r.content == "whole answer",
            _ => {}
        }
    }
    assert_eq!(content, "whole answer");
    assert!(done);
    assert_eq!(mock.last_request().unwrap().body["stream"], false);
    assert_eq!(mock.counts().chat, 2);
    gw.shutdown().await;
}
