//! The files one streamed chat call runs through, for `.ci/call-walk` (ARCHITECTURE.md "One call,
//! as it really flows"): `N` streamed calls through `Gateway::chat_stream` against the mock
//! upstream, with SQLite telemetry, one after another.
//!
//! ```text
//! cargo run --example call_walk -- N
//! ```
//!
//! The script runs it twice under callgrind (2 calls, then 6) and counts a file of the workspace
//! when the instructions of its functions grew between the two runs: what one call costs beyond
//! the gateway's start and stop.

use futures::StreamExt;
use polygateway::{CallOptions, ChatEvent, Gateway, Message};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let calls: usize = match std::env::args().nth(1).map(|n| n.parse()) {
        Some(Ok(n)) => n,
        _ => return Err("usage: call_walk N (the number of streamed calls, e.g. 2)".into()),
    };
    let db = std::env::temp_dir().join(format!("call-walk-{}.sqlite", std::process::id()));
    let db_path = db.to_string_lossy().into_owned();
    let (settings, _mocks) = polygateway_testkit::doc_setup(
        &["LLM"],
        &[
            ("PGW_TELEMETRY_BACKEND", "sqlite"),
            ("PGW_TELEMETRY_SQLITE_PATH", &db_path),
        ],
    )
    .await;
    let gw = Gateway::from_settings(settings, "LLM").await?;
    for _ in 0..calls {
        let mut stream = gw.chat_stream(vec![Message::user("hi")], CallOptions::default())?;
        let mut answered = false;
        while let Some(event) = stream.next().await {
            answered |= matches!(event?, ChatEvent::Done(_));
        }
        if !answered {
            return Err("a streamed call ended without its final response".into());
        }
    }
    gw.shutdown().await;
    let _ = std::fs::remove_file(&db);
    Ok(())
}
