//! The governed chat path end to end against the mock upstream, with in-memory governance.

mod common;

use polygateway::testkit::mock_llm::{Behaviour, MockUpstream};
use polygateway::Message;

#[tokio::test]
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
