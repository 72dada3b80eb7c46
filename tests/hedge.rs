//! Hedged first tokens against the mock upstream (docs/behaviour.md §5.9): an attempt without a
//! first token after the hedge delay is sent to another source too; the first token wins, the
//! loser is cancelled and releases everything it held; its row says `hedge_cancelled`, and it is
//! neither a failure nor a success of its source.

mod common;

use std::time::Duration;

use common::{gateway, wait_idle};
use futures::StreamExt;
use polygateway::{CallOptions, ChatEvent, Gateway, Message, SourceSnapshot};
use polygateway_testkit::mock_llm::{Behaviour, MockUpstream};
use tokio::time::Instant;

fn slow(ttft: Duration, content: &str) -> Behaviour {
    Behaviour::Healthy {
        ttft,
        inter_token: Duration::ZERO,
        chunks: 4,
        content: content.into(),
    }
}

/// `(source_name, error)` of every row.
fn rows(path: &std::path::Path) -> Vec<(String, Option<String>)> {
    let db = rusqlite::Connection::open(path).unwrap();
    let mut stmt = db
        .prepare("SELECT source_name, error FROM llm_calls ORDER BY source_name")
        .unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// A scope of two sources, `a` then `b`, picked in turn (so the first call goes to `a`), hedging
/// after 200 ms (the ceiling: no p95 is known yet) with a budget that allows a hedge at once.
async fn hedged(a: &MockUpstream, b: &MockUpstream, extra: &[(&str, &str)]) -> Gateway {
    let mut keys = vec![
        ("LLM__SELECTOR", "round_robin"),
        ("LLM__HEDGE__ENABLED", "true"),
        ("LLM__HEDGE__FLOOR_S", "0.05"),
        ("LLM__HEDGE__CEILING_S", "0.2"),
        ("LLM__HEDGE__BUDGET", "1"),
    ];
    keys.extend_from_slice(extra);
    gateway(&[("a", a), ("b", b)], &keys).await
}

async fn streamed(gw: &Gateway) -> (String, polygateway::LlmResponse) {
    let mut stream = gw
        .chat_stream(vec![Message::user("hi")], CallOptions::new())
        .unwrap();
    let mut text = String::new();
    let mut done = None;
    while let Some(item) = stream.next().await {
        match item.unwrap() {
            ChatEvent::Content(delta) => text.push_str(&delta),
            ChatEvent::Done(response) => done = Some(response),
            _ => {}
        }
    }
    (text, *done.expect("a final event"))
}

/// The sources once the counters of every attempt are in (the actor counts a moment later).
async fn settled(gw: &Gateway, attempts: u64) -> Vec<SourceSnapshot> {
    for _ in 0..150 {
        let sources = gw.sources("LLM").await.unwrap();
        let ended: u64 = sources
            .iter()
            .map(|s| s.successes + s.failures + s.cancelled)
            .sum();
        if ended == attempts {
            return sources;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("attempts not settled: {:?}", gw.sources("LLM").await);
}

#[tokio::test(start_paused = true)]
async fn a_slow_first_token_is_hedged_and_the_loser_releases_everything() {
    let a = MockUpstream::start(slow(Duration::from_secs(5), "slow answer")).await;
    let b = MockUpstream::start(Behaviour::healthy_with("fast answer")).await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.sqlite");
    let db_s = db.display().to_string();
    let gw = hedged(
        &a,
        &b,
        &[
            ("PGW_TELEMETRY_BACKEND", "sqlite"),
            ("PGW_TELEMETRY_SQLITE_PATH", &db_s),
        ],
    )
    .await;
    let started = Instant::now();
    let (text, done) = streamed(&gw).await;
    // The caller saw one answer: the hedge's, long before the slow source's first token.
    assert_eq!(
        (text.as_str(), done.content.as_str()),
        ("fast answer", "fast answer")
    );
    assert_eq!(done.source_name, "b_1");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    // The loser's request was let go; no slot, lease or probe is left.
    wait_idle(&gw, &[&a, &b]).await;
    let sources = settled(&gw, 2).await;
    let (sa, sb) = (&sources[0], &sources[1]);
    // Cancelled: neither a failure for the breaker nor a success.
    assert_eq!(
        (sa.attempts, sa.cancelled, sa.failures, sa.successes),
        (1, 1, 0, 0)
    );
    assert_eq!(sa.health, 1.0, "no latency sample, no failure");
    assert_eq!((sb.hedges, sb.hedges_won, sb.successes), (1, 1, 1));
    assert_eq!((a.counts().chat, b.counts().chat), (1, 1));
    gw.shutdown().await;
    // Both attempts have their row; the loser's says why it ended.
    assert_eq!(
        rows(&db),
        [
            ("a_1".to_string(), Some("hedge_cancelled".to_string())),
            ("b_1".to_string(), None)
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_call_that_does_not_stream_is_hedged_too() {
    let a = MockUpstream::start(slow(Duration::from_secs(5), "slow answer")).await;
    let b = MockUpstream::start(Behaviour::healthy_with("fast answer")).await;
    let gw = hedged(&a, &b, &[]).await;
    let answer = gw.chat(vec![Message::user("hi")]).await.unwrap();
    assert_eq!(
        (answer.content.as_str(), answer.source_name.as_str()),
        ("fast answer", "b_1")
    );
    wait_idle(&gw, &[&a, &b]).await;
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn no_hedge_when_the_first_token_is_in_time_or_the_budget_is_spent() {
    // In time: the first source answers at once, the other is never asked.
    let a = MockUpstream::start(Behaviour::healthy_with("first")).await;
    let b = MockUpstream::start(Behaviour::healthy_with("second")).await;
    // A ceiling far above the mock's answer, so a loaded machine does not make it late.
    let gw = hedged(&a, &b, &[("LLM__HEDGE__CEILING_S", "3")]).await;
    let (text, _) = streamed(&gw).await;
    assert_eq!(text, "first");
    assert_eq!((a.counts().chat, b.counts().chat), (1, 0));
    gw.shutdown().await;

    // No budget: the call waits for its slow first token.
    let a = MockUpstream::start(slow(Duration::from_millis(600), "slow answer")).await;
    let b = MockUpstream::start(Behaviour::healthy_with("fast answer")).await;
    let gw = hedged(&a, &b, &[("LLM__HEDGE__BUDGET", "0")]).await;
    let (text, _) = streamed(&gw).await;
    assert_eq!(text, "slow answer");
    assert_eq!((a.counts().chat, b.counts().chat), (1, 0));
    assert!(gw
        .sources("LLM")
        .await
        .unwrap()
        .iter()
        .all(|s| s.hedges == 0));
    gw.shutdown().await;

    // Off (the default): the same.
    let a = MockUpstream::start(slow(Duration::from_millis(600), "slow answer")).await;
    let b = MockUpstream::start(Behaviour::healthy_with("fast answer")).await;
    let gw = gateway(&[("a", &a), ("b", &b)], &[("LLM__SELECTOR", "round_robin")]).await;
    let (text, _) = streamed(&gw).await;
    assert_eq!(text, "slow answer");
    assert_eq!(b.counts().chat, 0);
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_hedge_that_fails_leaves_the_first_attempt_running() {
    let a = MockUpstream::start(slow(Duration::from_millis(700), "slow answer")).await;
    let b = MockUpstream::start(Behaviour::ServerError(503)).await;
    let gw = hedged(&a, &b, &[]).await;
    let (text, done) = streamed(&gw).await;
    assert_eq!(
        (text.as_str(), done.source_name.as_str()),
        ("slow answer", "a_1")
    );
    wait_idle(&gw, &[&a, &b]).await;
    let sources = settled(&gw, 2).await;
    // The hedge's failure is a failure of its source like any other.
    assert_eq!((sources[0].successes, sources[0].cancelled), (1, 0));
    assert_eq!(
        (
            sources[1].hedges,
            sources[1].hedges_won,
            sources[1].failures
        ),
        (1, 0, 1)
    );
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_caller_that_leaves_mid_race_cancels_both_attempts() {
    let a = MockUpstream::start(slow(Duration::from_secs(5), "slow a")).await;
    let b = MockUpstream::start(slow(Duration::from_secs(5), "slow b")).await;
    let gw = hedged(&a, &b, &[]).await;
    let mut stream = gw
        .chat_stream(vec![Message::user("hi")], CallOptions::new())
        .unwrap();
    // Past the hedge delay: both sources were asked.
    let next = tokio::time::timeout(Duration::from_millis(600), stream.next()).await;
    assert!(next.is_err(), "no token yet");
    assert_eq!((a.counts().chat, b.counts().chat), (1, 1));
    drop(stream);
    wait_idle(&gw, &[&a, &b]).await;
    let sources = settled(&gw, 2).await;
    assert_eq!((sources[0].cancelled, sources[1].cancelled), (1, 1));
    assert!(sources.iter().all(|s| s.failures == 0 && s.successes == 0));
    gw.shutdown().await;
}
