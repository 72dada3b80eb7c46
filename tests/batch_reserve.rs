//! The batch reserve (docs/behaviour.md §5.7, "Across processes"): batch calls are admitted
//! against each gate limit less its reserve; other classes see the whole limit. Across OS
//! processes on Redis, `examples/multi_process.rs` (phase 3, run by CI) proves the point of it;
//! here the same rule on the memory gate, where it can be counted exactly at the upstream.

use std::time::Duration;

use futures::StreamExt;
use polygateway::config::Settings;
use polygateway::types::Priority;
use polygateway::{CallOptions, Gateway, Message};
use polygateway_testkit::mock_env;
use polygateway_testkit::mock_llm::{Behaviour, MockUpstream};

async fn gateway(mock: &MockUpstream, reserve: Option<&str>) -> Gateway {
    let mut env = mock_env();
    env.insert("LLM__OPENAI__1__BASE_URL".into(), mock.base_url());
    env.insert("LLM__OPENAI__1__API_KEY".into(), "sk-test".into());
    env.insert("LLM__OPENAI__1__MODEL".into(), "m".into());
    env.insert("LLM__GLOBAL__MAX_CONCURRENCY".into(), "4".into());
    env.insert("LLM__BACKPRESSURE__POLL_INTERVAL_S".into(), "0.01".into());
    env.insert("LLM__PACER".into(), "off".into());
    if let Some(share) = reserve {
        env.insert("LLM__BACKPRESSURE__BATCH_RESERVE".into(), share.into());
    }
    Gateway::from_settings(Settings::from_map(&env).unwrap(), "LLM")
        .await
        .unwrap()
}

fn slow() -> Behaviour {
    Behaviour::Healthy {
        ttft: Duration::from_millis(50),
        inter_token: Duration::ZERO,
        chunks: 1,
        content: "ok".into(),
    }
}

/// Sends `calls` calls of class `priority`, `in_flight` at a time; all must succeed.
async fn flood(gw: &Gateway, priority: Priority, calls: usize, in_flight: usize) {
    let options = CallOptions::new().priority(priority);
    let results = futures::stream::iter(0..calls)
        .map(|_| gw.chat_with(vec![Message::user("x")], options.clone()))
        .buffer_unordered(in_flight)
        .collect::<Vec<_>>()
        .await;
    assert!(results.iter().all(Result::is_ok), "every call is answered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_calls_leave_the_reserve_and_other_classes_take_it() {
    let mock = MockUpstream::start(slow()).await;
    // Half of four slots reserved: batch holds at most two, however many it sends at once.
    let gw = gateway(&mock, Some("0.5")).await;
    flood(&gw, Priority::Batch, 24, 12).await;
    assert_eq!(
        mock.max_in_flight(),
        2,
        "batch calls hold 4 − ceil(0.5 × 4)"
    );
    // Interactive calls beside a batch flood use the whole gate.
    tokio::join!(
        flood(&gw, Priority::Batch, 24, 12),
        flood(&gw, Priority::Interactive, 24, 12)
    );
    assert_eq!(mock.max_in_flight(), 4, "the gate's limit still holds");
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memory_limiter_reserves_nothing_by_default() {
    // One process's own gate: its waiting room already orders the classes.
    let mock = MockUpstream::start(slow()).await;
    let gw = gateway(&mock, None).await;
    flood(&gw, Priority::Batch, 24, 12).await;
    assert_eq!(mock.max_in_flight(), 4);
    gw.shutdown().await;
}

#[test]
fn a_reserve_outside_its_range_is_refused_naming_the_range() {
    for bad in ["0.95", "-0.1", "1"] {
        let mut env = mock_env();
        env.insert(
            "LLM__OPENAI__1__BASE_URL".into(),
            "http://127.0.0.1:9/v1".into(),
        );
        env.insert("LLM__OPENAI__1__MODEL".into(), "m".into());
        env.insert("LLM__BACKPRESSURE__BATCH_RESERVE".into(), bad.into());
        let err = Settings::from_map(&env).unwrap_err().to_string();
        assert!(
            err.contains("LLM__BACKPRESSURE__BATCH_RESERVE") && err.contains("0 to 0.9"),
            "{bad}: {err}"
        );
    }
}
