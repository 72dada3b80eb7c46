//! Issue #18 item 2 through the Gateway: when the only source's breaker is open after the call's
//! own failure, `retry_after_s` is never below its cooldown — whether the retry budget (1) ends the
//! call on that failure or (3) the next round finds the circuit open, for a failure that trips the
//! breaker and for a dead key, on memory backends and (with the `redis` feature) on Redis, where
//! the state comes back from the same finish script.

mod common;
#[cfg(feature = "server")]
mod server_support;

use futures::StreamExt;
use polygateway::{CallOptions, Gateway, Message};
use polygateway_testkit::mock_llm::{Behaviour, MockUpstream};

/// The breaker cooldown of these tests, seconds.
const COOLDOWN_S: f64 = 30.0;

/// Keys of one `LLM` source on `mock` whose breaker opens on the first failure, with `budget`.
fn keys(mock: &MockUpstream, budget: u32) -> Vec<(String, String)> {
    let mut keys = common::source("LLM", "only", 1, &mock.base_url());
    for (k, v) in [
        ("LLM__BREAKER__FAIL_THRESHOLD", "1".to_string()),
        ("LLM__BREAKER__COOLDOWN_S", COOLDOWN_S.to_string()),
        ("LLM__RETRY__MAX_ATTEMPTS", budget.to_string()),
        ("LLM__RETRY__BACKOFF_BASE_S", "0.01".to_string()),
        ("LLM__RETRY__BACKOFF_MAX_S", "0.05".to_string()),
    ] {
        keys.push((k.to_string(), v));
    }
    keys
}

/// One call against the only source, which fails as `behaviour`: the hint it ends with is the
/// breaker's cooldown (less the little time the call took), and the source saw one request.
async fn the_hint_covers_the_cooldown(gw: &Gateway, mock: &MockUpstream, case: &str) {
    let err = gw.chat(vec![Message::user("hi")]).await.unwrap_err();
    let unavailable = err.unavailable().expect("scope-level unavailable");
    assert!(
        unavailable.retry_after_s > COOLDOWN_S - 1.0 && unavailable.retry_after_s <= COOLDOWN_S,
        "{case}: {unavailable:?}"
    );
    assert_eq!(mock.counts().chat, 1, "{case}: the open breaker refuses");
}

/// The cases: a transient failure that trips the breaker, and a dead key; budgets 1 and 3.
fn cases() -> Vec<(&'static str, Behaviour, u32)> {
    let mut cases = Vec::new();
    for budget in [1, 3] {
        cases.push(("transient trip", Behaviour::ServerError(503), budget));
        cases.push(("dead key", Behaviour::Unauthorized, budget));
    }
    cases
}

#[tokio::test]
async fn memory_backends_hint_the_cooldown_of_the_breaker_the_call_opened() {
    for (name, behaviour, budget) in cases() {
        let mock = MockUpstream::start(behaviour).await;
        let settings = common::settings_from(keys(&mock, budget));
        let gw = Gateway::from_settings(settings, "LLM").await.unwrap();
        let case = format!("memory, {name}, MAX_ATTEMPTS={budget}");
        the_hint_covers_the_cooldown(&gw, &mock, &case).await;
        gw.shutdown().await;
    }
}

/// The same through `chat_stream`: a failure before the first delta ends the stream with the
/// scope-level error, hinting the cooldown.
#[tokio::test]
async fn a_stream_hints_the_cooldown_of_the_breaker_the_call_opened() {
    for (name, behaviour, budget) in cases() {
        let mock = MockUpstream::start(behaviour).await;
        let settings = common::settings_from(keys(&mock, budget));
        let gw = Gateway::from_settings(settings, "LLM").await.unwrap();
        let case = format!("stream, {name}, MAX_ATTEMPTS={budget}");
        let mut stream = gw
            .chat_stream(vec![Message::user("hi")], CallOptions::new())
            .unwrap();
        let err = match stream.next().await {
            Some(Err(e)) => e,
            other => panic!("{case}: {other:?}"),
        };
        let unavailable = err.unavailable().expect("scope-level unavailable");
        assert!(
            unavailable.retry_after_s > COOLDOWN_S - 1.0 && unavailable.retry_after_s <= COOLDOWN_S,
            "{case}: {unavailable:?}"
        );
        assert_eq!(mock.counts().chat, 1, "{case}");
        gw.shutdown().await;
    }
}

/// The same through the server, streamed and not: the 503's `Retry-After` header and body
/// hint the cooldown.
#[cfg(feature = "server")]
#[tokio::test]
async fn the_server_hints_the_cooldown_of_the_breaker_the_call_opened() {
    for (name, behaviour, budget) in cases() {
        for stream in [false, true] {
            let mock = MockUpstream::start(behaviour.clone()).await;
            let server = server_support::start(common::settings_from(keys(&mock, budget))).await;
            let case = format!("server, stream={stream}, {name}, MAX_ATTEMPTS={budget}");
            let resp = reqwest::Client::new()
                .post(server.url("/v1/chat/completions"))
                .bearer_auth(server_support::KEY)
                .json(&server_support::chat_body("LLM", stream))
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), 503, "{case}");
            let header: f64 = resp.headers()["retry-after"]
                .to_str()
                .unwrap()
                .parse()
                .unwrap();
            assert!(header >= COOLDOWN_S - 1.0, "{case}: Retry-After {header}");
            let body: serde_json::Value = resp.json().await.unwrap();
            let message = body["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            assert!(!message.contains("retry after 0.0s"), "{case}: {message}");
            server.stop().await;
        }
    }
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_backends_hint_the_cooldown_of_the_breaker_the_call_opened() {
    use polygateway::GatewayBuilder;
    let url =
        std::env::var("PGW_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    for (name, behaviour, budget) in cases() {
        let mock = MockUpstream::start(behaviour).await;
        let mut pairs = keys(&mock, budget);
        pairs.push(("PGW_LIMITER_BACKEND".into(), "redis".into()));
        pairs.push(("PGW_BREAKER_BACKEND".into(), "redis".into()));
        pairs.push(("REDIS_URL".into(), url.clone()));
        // A fresh prefix per case: a breaker opened by one case must not refuse the next.
        let prefix = format!("pgwtest-hint-{}", uuid::Uuid::new_v4().simple());
        let built = GatewayBuilder::new(common::settings_from(pairs))
            .default_scope("LLM")
            .redis_key_prefix(&prefix)
            .build()
            .await;
        let gw = match built {
            Ok(gw) => gw,
            Err(e) if std::env::var("CI").as_deref() != Ok("true") => {
                eprintln!(
                    "\n!!!!! SKIP: no Redis at {url} ({e}); the Redis case did NOT run !!!!!\n"
                );
                return;
            }
            Err(e) => panic!("Redis is required under CI=true: {e}"),
        };
        let case = format!("redis, {name}, MAX_ATTEMPTS={budget}");
        the_hint_covers_the_cooldown(&gw, &mock, &case).await;
        gw.shutdown().await;
        tokio::time::timeout(std::time::Duration::from_secs(10), purge(&url, &prefix))
            .await
            .expect("the test keys are purged within 10 s");
    }
}

/// Delete the keys under `prefix` on every primary (the breaker's would stay for 7 days).
#[cfg(feature = "redis")]
async fn purge(url: &str, prefix: &str) {
    use fred::prelude::{Builder, ClientLike, Config, LuaInterface};
    const PURGE: &str = "local n = 0 \
        for _, k in ipairs(redis.call('KEYS', ARGV[1])) do n = n + redis.call('DEL', k) end \
        return n";
    let client = Builder::from_config(Config::from_url(url).expect("url"))
        .build()
        .expect("client");
    client.init().await.expect("connect");
    // One client per primary on a cluster, else the one client, each quit exactly once: fred's
    // `quit` returns early only once the client's router task has stopped, so a second QUIT sent
    // while it is stopping is never answered, and this client has no command timeout (a CI run
    // through sentinels hung here with no socket open).
    let nodes = match client.split_cluster() {
        Ok(nodes) => {
            client.quit().await.ok();
            for node in &nodes {
                node.init().await.expect("connect to a cluster node");
            }
            nodes
        }
        Err(_) => vec![client],
    };
    for node in nodes {
        let _: i64 = node
            .eval(PURGE, Vec::<String>::new(), format!("{prefix}:*"))
            .await
            .expect("purge");
        node.quit().await.ok();
    }
}
