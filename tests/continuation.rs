//! Mid-stream continuation against the mocks (docs/behaviour.md §5.10): a streamed text answer
//! cut after content is continued on another source that takes a prefill — the mocks continue
//! a prefix as the providers' APIs document — and the caller sees the uncut answer once, with
//! `continued_from`; a stream that began a tool call, a structured call, or a scope without
//! continuation ends as before; a caller gone mid-continuation leaves nothing held.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{gateway, source, wait_idle};
use futures::StreamExt;
use polygateway::config::Settings;
use polygateway::{CallOptions, ChatEvent, Gateway, GatewayError, LlmResponse, Message};
use polygateway_testkit::mock_anthropic::{AnthropicFault, MockAnthropic, MOCK_ANTHROPIC_KEY};
use polygateway_testkit::mock_llm::{Behaviour, MockUpstream, MOCK_PROMPT_TOKENS};

const ANSWER: &str = "one two three four five six seven eight";
const PROMPT: &str = "count to eight, please";

/// The answer streamed in 8 deltas, cut after the first `deltas` of them.
fn cut_after(deltas: usize, answer: Behaviour) -> Behaviour {
    Behaviour::CutAfter {
        deltas,
        answer: Box::new(answer),
    }
}

fn eight_deltas(content: &str) -> Behaviour {
    Behaviour::Healthy {
        ttft: Duration::ZERO,
        inter_token: Duration::ZERO,
        chunks: 8,
        content: content.into(),
    }
}

/// A scope of a generic source `a` (no prefill) that is picked first and a `deepseek` one
/// (chat prefix completion), with telemetry in `db` and `extra` keys.
async fn scope(
    a: &MockUpstream,
    deepseek: &MockUpstream,
    db: &std::path::Path,
    extra: &[(&str, &str)],
) -> Gateway {
    let db = db.display().to_string();
    let mut keys = vec![
        ("LLM__SELECTOR", "round_robin"),
        ("PGW_TELEMETRY_BACKEND", "sqlite"),
        ("PGW_TELEMETRY_SQLITE_PATH", db.as_str()),
    ];
    keys.extend_from_slice(extra);
    gateway(&[("a", a), ("deepseek", deepseek)], &keys).await
}

/// The text the caller saw, and the final answer or the stream's error.
async fn streamed(
    gw: &Gateway,
    options: CallOptions,
) -> (String, Result<LlmResponse, GatewayError>) {
    let mut stream = gw
        .chat_stream(vec![Message::user(PROMPT)], options)
        .unwrap();
    let mut text = String::new();
    let mut end = None;
    while let Some(item) = stream.next().await {
        match item {
            Ok(ChatEvent::Content(delta)) => text.push_str(&delta),
            Ok(ChatEvent::Done(response)) => end = Some(Ok(*response)),
            Ok(_) => {}
            Err(e) => end = Some(Err(e)),
        }
    }
    (text, end.expect("a final event"))
}

/// `(source_name, error is set, continued_from)` of every row (read once the gateway has shut
/// down: its writer flushed every row).
fn rows(db: &std::path::Path) -> Vec<(String, bool, Option<String>)> {
    let db = rusqlite::Connection::open(db).unwrap();
    let mut stmt = db
        .prepare(
            "SELECT source_name, error IS NOT NULL, continued_from FROM llm_calls \
             ORDER BY source_name",
        )
        .unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_cut_stream_is_continued_on_a_prefill_source_and_the_caller_sees_one_answer() {
    let a = MockUpstream::start(cut_after(3, eight_deltas(ANSWER))).await;
    let deepseek = MockUpstream::start(eight_deltas(ANSWER)).await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.sqlite");
    let gw = scope(&a, &deepseek, &db, &[("LLM__CONTINUE__ENABLED", "true")]).await;
    let (text, done) = streamed(&gw, CallOptions::new()).await;
    let done = done.expect("the continued call answers");
    // The caller saw the uncut answer once: the cut text, then the continuation.
    assert_eq!(text, ANSWER);
    assert_eq!(done.content, ANSWER);
    assert_eq!(done.source_name, "deepseek_1");
    assert_eq!(done.continued_from.as_deref(), Some("a_1"));
    // The continuation was asked as DeepSeek's chat prefix completion: the conversation, then
    // the delivered text as a final assistant message with `"prefix": true`.
    let sent = deepseek.last_request().unwrap().body;
    let messages = sent["messages"].as_array().unwrap();
    let prefix = messages.last().unwrap();
    assert_eq!(messages.len(), 2);
    assert_eq!(
        (&prefix["role"], &prefix["prefix"]),
        (&serde_json::json!("assistant"), &serde_json::json!(true))
    );
    let delivered = prefix["content"].as_str().unwrap();
    assert!(ANSWER.starts_with(delivered) && delivered.len() < ANSWER.len());
    // Usage: what both attempts reported. The cut reported nothing (OpenAI's usage frame comes
    // last), so the sum is the continuation's — the prefix billed as input — and estimated.
    let words = delivered.split_whitespace().count() as u64;
    assert_eq!(done.prompt_tokens, MOCK_PROMPT_TOKENS + words);
    assert_eq!(done.completion_tokens, 5, "the 5 deltas after the cut");
    assert_eq!(done.usage_source, polygateway::UsageSource::Estimated);
    let sources = gw.sources("LLM").await.unwrap();
    assert_eq!(
        sources.iter().map(|s| s.continuations).collect::<Vec<_>>(),
        [0, 1]
    );
    wait_idle(&gw, &[&a, &deepseek]).await;
    gw.shutdown().await;
    // Two attempts, two rows: the cut one with its error, the continuation's naming it.
    assert_eq!(
        rows(&db),
        [
            ("a_1".to_string(), true, None),
            ("deepseek_1".to_string(), false, Some("a_1".to_string()))
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_stream_that_began_a_tool_call_is_not_continued() {
    let calls = vec![("search".to_string(), r#"{"q": "rust"}"#.to_string())];
    let a = MockUpstream::start(cut_after(0, Behaviour::ToolCalls(calls))).await;
    let deepseek = MockUpstream::start(eight_deltas(ANSWER)).await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.sqlite");
    let gw = scope(&a, &deepseek, &db, &[("LLM__CONTINUE__ENABLED", "true")]).await;
    let (_, end) = streamed(&gw, CallOptions::new()).await;
    assert!(
        matches!(end, Err(GatewayError::StreamInterrupted { delivered, .. }) if delivered > 0),
        "{end:?}"
    );
    assert_eq!(deepseek.counts().chat, 0, "no continuation was sent");
    wait_idle(&gw, &[&a, &deepseek]).await;
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_structured_call_is_not_continued() {
    let json = r#"{"count": [1, 2, 3, 4, 5, 6, 7, 8]}"#;
    let a = MockUpstream::start(cut_after(3, eight_deltas(json))).await;
    let deepseek = MockUpstream::start(eight_deltas(json)).await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.sqlite");
    let gw = scope(&a, &deepseek, &db, &[("LLM__CONTINUE__ENABLED", "true")]).await;
    let mut options = CallOptions::new();
    options.overlay.insert(
        "response_format".into(),
        serde_json::json!({"type": "json_object"}),
    );
    let (text, end) = streamed(&gw, options).await;
    assert!(
        matches!(end, Err(GatewayError::StreamInterrupted { .. })),
        "{end:?}"
    );
    assert!(json.starts_with(&text) && text.len() < json.len());
    assert_eq!(deepseek.counts().chat, 0, "no continuation was sent");
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn without_continuation_a_cut_stream_ends_as_before() {
    let a = MockUpstream::start(cut_after(3, eight_deltas(ANSWER))).await;
    let deepseek = MockUpstream::start(eight_deltas(ANSWER)).await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.sqlite");
    let gw = scope(&a, &deepseek, &db, &[]).await;
    let (text, end) = streamed(&gw, CallOptions::new()).await;
    assert!(
        matches!(end, Err(GatewayError::StreamInterrupted { delivered, .. }) if delivered > 0),
        "{end:?}"
    );
    assert!(ANSWER.starts_with(&text) && text.len() < ANSWER.len());
    assert_eq!(deepseek.counts().chat, 0);
    gw.shutdown().await;
    assert_eq!(rows(&db), [("a_1".to_string(), true, None)]);
}

#[tokio::test(start_paused = true)]
async fn a_caller_gone_mid_continuation_leaves_nothing_held() {
    let a = MockUpstream::start(cut_after(3, eight_deltas(ANSWER))).await;
    // The continuation's first token would take seconds.
    let deepseek = MockUpstream::start(Behaviour::Healthy {
        ttft: Duration::from_secs(30),
        inter_token: Duration::ZERO,
        chunks: 8,
        content: ANSWER.into(),
    })
    .await;
    let mut keys = source("LLM", "a", 1, &a.base_url());
    keys.extend(source("LLM", "deepseek", 1, &deepseek.base_url()));
    keys.push(("LLM__SELECTOR".into(), "round_robin".into()));
    keys.push(("LLM__CONTINUE__ENABLED".into(), "true".into()));
    keys.push(("LLM__DEEPSEEK__1__TTFT_TIMEOUT_S".into(), "60".into()));
    keys.push(("LLM__DEEPSEEK__1__TIMEOUT_S".into(), "90".into()));
    let gw = Gateway::from_settings(common::settings_from(keys), "LLM")
        .await
        .unwrap();
    let mut stream = gw
        .chat_stream(vec![Message::user(PROMPT)], CallOptions::new())
        .unwrap();
    let mut seen = 0;
    while seen < 3 {
        if let Some(Ok(ChatEvent::Content(_))) = stream.next().await {
            seen += 1;
        }
    }
    // The continuation is in flight on the prefill source: the caller goes away.
    for _ in 0..150 {
        if deepseek.in_flight() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(deepseek.in_flight(), 1, "the continuation was sent");
    drop(stream);
    // Its request let go, its pacer slot, lease and permit released.
    wait_idle(&gw, &[&a, &deepseek]).await;
    let sources = gw.sources("LLM").await.unwrap();
    assert_eq!(sources[1].cancelled, 1, "{sources:?}");
    gw.shutdown().await;
}

/// A scope `LLM` of Anthropic sources on the mocks (the first picked first).
async fn anthropic(mocks: &[&MockAnthropic]) -> Gateway {
    let mut env: BTreeMap<String, String> = polygateway_testkit::mock_env();
    for (i, mock) in mocks.iter().enumerate() {
        let source = format!("LLM__ANTHROPIC__{}", i + 1);
        env.insert(format!("{source}__BASE_URL"), mock.base_url());
        env.insert(format!("{source}__API_KEY"), MOCK_ANTHROPIC_KEY.into());
        env.insert(format!("{source}__MODEL"), "claude-mock".into());
    }
    env.insert("LLM__SELECTOR".into(), "round_robin".into());
    env.insert("LLM__CONTINUE__ENABLED".into(), "true".into());
    let settings = Settings::from_map(&env).expect("settings");
    Gateway::from_settings(settings, "LLM").await.unwrap()
}

#[tokio::test(start_paused = true)]
async fn anthropic_continues_a_prefill_without_its_trailing_whitespace_and_usage_adds_up() {
    // The mock cuts its text block in the middle: "Say " is delivered, then the connection
    // breaks. The API refuses a prefill ending in whitespace, so "Say" is sent, and the
    // continuation's leading space (which the caller has seen) is not repeated.
    let (cut, whole) = (MockAnthropic::start().await, MockAnthropic::start().await);
    for mock in [&cut, &whole] {
        mock.set_text("Say hello");
    }
    cut.set_fault(AnthropicFault::CloseMidBlock);
    let gw = anthropic(&[&cut, &whole]).await;
    let (text, done) = streamed(&gw, CallOptions::new()).await;
    let done = done.expect("the continued call answers");
    assert_eq!(
        (text.as_str(), done.content.as_str()),
        ("Say hello", "Say hello")
    );
    assert_eq!(done.continued_from.as_deref(), Some("anthropic_1"));
    // The prefill as the API takes it: a final assistant turn without trailing whitespace.
    let sent = whole.requests().pop().unwrap().body;
    let last = sent["messages"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["role"], "assistant");
    let prefill = match &last["content"] {
        serde_json::Value::String(text) => text.clone(),
        blocks => blocks[0]["text"].as_str().unwrap().to_string(),
    };
    assert_eq!(prefill, "Say");
    // The cut attempt reported its input at `message_start`: the answer's usage is both
    // attempts', at least twice the input of the conversation alone.
    let alone = gw.chat(vec![Message::user(PROMPT)]).await.unwrap();
    assert!(alone.prompt_tokens >= 2, "{alone:?}");
    assert!(
        done.prompt_tokens >= 2 * alone.prompt_tokens,
        "{} vs {}",
        done.prompt_tokens,
        alone.prompt_tokens
    );
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_gemini_stream_cut_is_continued_on_a_prefix_completion_source() {
    use polygateway_testkit::mock_gemini::{GeminiFault, MockGemini, MOCK_GEMINI_KEY};
    let gemini = MockGemini::start().await;
    gemini.script(ANSWER, None, None, None);
    let deepseek = MockUpstream::start(eight_deltas(ANSWER)).await;
    let mut keys = source("LLM", "deepseek", 1, &deepseek.base_url());
    keys.push(("LLM__GEMINI__1__BASE_URL".into(), gemini.base_url()));
    keys.push(("LLM__GEMINI__1__API_KEY".into(), MOCK_GEMINI_KEY.into()));
    keys.push(("LLM__GEMINI__1__MODEL".into(), "gemini-mock".into()));
    keys.push(("LLM__SELECTOR".into(), "round_robin".into()));
    keys.push(("LLM__CONTINUE__ENABLED".into(), "true".into()));
    let gw = Gateway::from_settings(common::settings_from(keys), "LLM")
        .await
        .unwrap();
    // Turn by turn: the first call goes to DeepSeek, the second to Gemini, which cuts it after
    // its first chunk (half the text).
    let (text, done) = streamed(&gw, CallOptions::new()).await;
    assert_eq!(
        (text.as_str(), done.unwrap().source_name.as_str()),
        (ANSWER, "deepseek_1")
    );
    gemini.push_fault(GeminiFault::AbruptClose);
    let (text, done) = streamed(&gw, CallOptions::new()).await;
    let done = done.expect("the continued call answers");
    assert_eq!((text.as_str(), done.content.as_str()), (ANSWER, ANSWER));
    assert_eq!(done.continued_from.as_deref(), Some("gemini_1"));
    let prefix = deepseek.last_request().unwrap().body["messages"][1].clone();
    assert_eq!(prefix["prefix"], true);
    assert_eq!(prefix["content"], &ANSWER[..ANSWER.len() / 2]);
    wait_idle(&gw, &[&deepseek]).await;
    gw.shutdown().await;
}
