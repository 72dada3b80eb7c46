//! The three lines: build from the environment, call, shut down.
//!
//! ```text
//! cargo run --example quickstart
//! ```
//!
//! With `LLM__…` sources in the environment or `.env` it calls them; otherwise it starts the
//! built-in mock upstream and calls that.

use polygateway::config::ScopeKind;
use polygateway::{Gateway, Message};
use polygateway_testkit::demo::settings_or_mock;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (settings, _mocks) = settings_or_mock(
        &[("LLM", ScopeKind::Chat)],
        "Hello! I am the mock upstream.",
    )
    .await;
    // In your service: `let gw = Gateway::from_env("LLM").await?;`
    let gw = Gateway::from_settings(settings, "LLM").await?;
    let resp = gw.chat(vec![Message::user("hello")]).await?;
    println!("{}", resp.content);
    println!(
        "source {} · {}+{} tokens ({}) · {:.0} ms · call {}",
        resp.source_name,
        resp.prompt_tokens,
        resp.completion_tokens,
        resp.usage_source.as_str(),
        resp.latency_ms,
        resp.call_id
    );
    gw.shutdown().await;
    Ok(())
}
