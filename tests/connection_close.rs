//! A connection the upstream closed is never a failed call (issue #35): against mock upstreams
//! that close every connection after its answer — silently, the way llama.cpp's `llama-server`
//! does after a streamed answer, or saying `Connection: close` — streamed calls all succeed, the
//! sources stay fully healthy, and the requests that met a closed pooled connection are re-sent
//! (counted, not attempts). And the pool follows a server's announced `Keep-Alive: timeout=`.

mod common;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use polygateway::{Gateway, Message};
use polygateway_testkit::mock_llm::{Behaviour, MockUpstream, MOCK_CONTENT};

const CALLS: usize = 2_000;
const CONCURRENCY: usize = 64;

/// `CALLS` streamed calls, `CONCURRENCY` at a time; the errors' texts.
async fn run(gw: &Arc<Gateway>) -> Vec<String> {
    futures::stream::iter(0..CALLS)
        .map(|i| {
            let gw = Arc::clone(gw);
            async move {
                // `chat` streams from the upstream (SSE) unless told otherwise.
                match gw.chat(vec![Message::user(format!("call {i}"))]).await {
                    Ok(r) if r.content == MOCK_CONTENT => None,
                    Ok(r) => Some(format!("wrong content {:?}", r.content)),
                    Err(e) => Some(e.to_string()),
                }
            }
        })
        .buffer_unordered(CONCURRENCY)
        .filter_map(|r| async move { r })
        .collect()
        .await
}

async fn closing_pair(announce: bool) -> (MockUpstream, MockUpstream, Arc<Gateway>) {
    let a = MockUpstream::start(Behaviour::healthy()).await;
    let b = MockUpstream::start(Behaviour::healthy()).await;
    a.close_connections_after_answers(announce);
    b.close_connections_after_answers(announce);
    // No retry at all: a call survives a closed connection only by being re-sent.
    let gw = common::gateway(
        &[("openai", &a), ("deepseek", &b)],
        &[("LLM__RETRY__MAX_ATTEMPTS", "1")],
    )
    .await;
    (a, b, Arc::new(gw))
}

/// `CALLS` streamed calls through a pair of upstreams that close every connection after its
/// answer (`announce`: saying `Connection: close`); prints the figures as a JSON line and asserts
/// what the issue asks: no call lost, no source fault, full health, one attempt per call.
async fn no_call_lost(mode: &str, announce: bool) {
    let (a, b, gw) = closing_pair(announce).await;
    let errors = run(&gw).await;
    common::wait_idle(&gw, &[&a, &b]).await;
    let sources = gw.sources("LLM").await.unwrap();
    let resends: u64 = sources.iter().map(|s| s.resends).sum();
    let failures: u64 = sources.iter().map(|s| s.failures + s.dead).sum();
    let attempts: u64 = sources.iter().map(|s| s.attempts).sum();
    let health: Vec<f64> = sources.iter().map(|s| s.health).collect();
    println!(
        "{{\"mode\":\"{mode}\",\"calls\":{CALLS},\"concurrency\":{CONCURRENCY},\"errors\":{},\"attempts\":{attempts},\"source_failures\":{failures},\"resends\":{resends},\"health\":{health:?},\"upstream_requests\":{}}}",
        errors.len(),
        a.counts().chat + b.counts().chat
    );
    assert!(
        errors.is_empty(),
        "{} errors, first: {:?}",
        errors.len(),
        errors.first()
    );
    assert_eq!(failures, 0);
    assert_eq!(attempts, CALLS as u64, "a re-send is not an attempt");
    assert!(health.iter().all(|h| *h == 1.0), "{health:?}");
    // How many requests meet a closed pooled connection is a race (the client reusing it before
    // the close arrives: 3 to 8 in 2,000 here), so the count is reported, not asserted: with one
    // attempt per call and no errors, each of them was saved by a re-send. That a close before
    // the answer is re-sent, once and counted, is pinned without a race by
    // `transport::resend`'s own tests (a server that closes every connection unanswered).
    Arc::try_unwrap(gw).ok().unwrap().shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstreams_that_close_silently_lose_no_call_and_no_health() {
    no_call_lost("close_silently", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstreams_that_announce_connection_close_lose_no_call() {
    no_call_lost("connection_close", true).await;
}

/// The pool follows what the upstream says (issue #35): a server announcing `Keep-Alive:
/// timeout=2` brings a source configured to keep idle connections 30 s below 2 s after one
/// answer, so the pool drops an idle connection before the server does; a server that announces
/// nothing leaves the configured value alone.
#[tokio::test]
async fn the_pool_idle_timeout_follows_an_announced_keep_alive_timeout() {
    async fn idle_timeout_after_one_call(
        mock: &MockUpstream,
    ) -> (Option<Duration>, Option<Duration>) {
        let gw = common::gateway(
            &[("openai", mock)],
            &[("LLM__OPENAI__1__POOL_IDLE_TIMEOUT_S", "30")],
        )
        .await;
        let before = gw.sources("LLM").await.unwrap()[0].pool_idle_timeout;
        let answer = gw.chat(vec![Message::user("hi")]).await.unwrap();
        assert_eq!(answer.content, MOCK_CONTENT);
        let after = gw.sources("LLM").await.unwrap()[0].pool_idle_timeout;
        gw.shutdown().await;
        (before, after)
    }

    let announcing = MockUpstream::start(Behaviour::healthy()).await;
    announcing.announce_keep_alive_timeout(2);
    let (before, after) = idle_timeout_after_one_call(&announcing).await;
    assert_eq!(before, Some(Duration::from_secs(30)));
    let after = after.expect("the gateway built this source's client");
    assert!(after < Duration::from_secs(2), "{after:?}");
    assert_eq!(after, Duration::from_secs(1), "2 s minus the 1 s margin");

    let silent = MockUpstream::start(Behaviour::healthy()).await;
    let (before, after) = idle_timeout_after_one_call(&silent).await;
    assert_eq!(
        (before, after),
        (Some(Duration::from_secs(30)), Some(Duration::from_secs(30)))
    );
}
