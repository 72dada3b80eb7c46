//! Typed structured output: the ladder (the schema in each source's strongest mode, repair,
//! validation into your type, bounded re-ask with feedback).
//!
//! ```text
//! cargo run --example structured
//! ```
//!
//! Against the built-in mock the first answer is broken on purpose (prose, single quotes, a
//! trailing comma, a wrong type) so you can see the repair and the re-ask at work.

use polygateway::config::Settings;
use polygateway::{CallOptions, Gateway, Message};
use polygateway_testkit::mock_llm::{Behaviour, MockUpstream};
use serde::Deserialize;

#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct Review {
    /// 1 (bad) to 5 (excellent).
    score: u8,
    /// One sentence.
    reason: String,
    tags: Vec<String>,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mock = MockUpstream::start(Behaviour::ScriptedContent(vec![
        "Sure! Here you go: {'score': 'five', 'reason': 'clear and short', 'tags': ['docs',],}".into(),
        "```json\n{\"score\": 5, \"reason\": \"clear and short\", \"tags\": [\"docs\", \"rust\"],}\n```".into(),
    ]))
    .await;
    let env = [
        ("PGW_LIMITER_BACKEND", "memory".to_string()),
        ("PGW_BREAKER_BACKEND", "memory".to_string()),
        ("LLM__OPENAI__1__BASE_URL", mock.base_url()),
        ("LLM__OPENAI__1__API_KEY", "sk-demo".to_string()),
        ("LLM__OPENAI__1__MODEL", "demo-model".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let gw = Gateway::from_settings(Settings::from_map(&env)?, "LLM").await?;
    let (response, review): (_, Review) = gw
        .chat_structured(
            vec![Message::user(
                "Review this README in JSON: score, reason, tags.",
            )],
            CallOptions::new(),
        )
        .await?;
    println!(
        "typed value: score {} · {} · tags {:?}",
        review.score, review.reason, review.tags
    );
    println!("asked the model {} time(s)", mock.counts().chat);
    println!(
        "structured_data: {}",
        response.structured_data.unwrap_or_default()
    );
    gw.shutdown().await;
    Ok(())
}
