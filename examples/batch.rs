//! A batch job: thousands of governed calls with bounded concurrency and progress reporting; the
//! failures that are scope-level unavailability are collected for a later retry with their
//! `retry_after_s`, the way a job queue would reschedule them.
//!
//! ```text
//! cargo run --release --example batch -- [--items N] [--concurrency C]
//! ```

use std::time::Instant;

use futures::StreamExt;
use polygateway::config::ScopeKind;
use polygateway::{CallOptions, Gateway, Message};
use polygateway_testkit::demo::settings_or_mock;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (mut items, mut concurrency) = (2000usize, 64usize);
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        match (flag.as_str(), args.next().and_then(|v| v.parse().ok())) {
            ("--items", Some(n)) if n > 0 => items = n,
            ("--concurrency", Some(n)) if n > 0 => concurrency = n,
            _ => {
                eprintln!("usage: batch [--items N] [--concurrency C]");
                std::process::exit(2);
            }
        }
    }
    let (settings, _mocks) = settings_or_mock(&[("LLM", ScopeKind::Chat)], "summary").await;
    let gw = Gateway::from_settings(settings, "LLM").await?;
    let started = Instant::now();
    let mut done = 0usize;
    let mut reschedule = Vec::new();
    let mut failed = 0usize;
    let mut results = futures::stream::iter(0..items)
        .map(|i| {
            let gw = gw.clone();
            async move {
                let options = CallOptions::new()
                    .session_id("batch-demo")
                    .meta_entry("item", i as i64);
                (
                    i,
                    gw.chat_with(vec![Message::user(format!("summarise item {i}"))], options)
                        .await,
                )
            }
        })
        .buffer_unordered(concurrency);
    while let Some((i, result)) = results.next().await {
        done += 1;
        match result {
            Ok(_) => {}
            Err(e) => match e.unavailable() {
                Some(u) => reschedule.push((i, u.retry_after_s)),
                None => failed += 1,
            },
        }
        if done % (items / 10).max(1) == 0 {
            println!(
                "{done}/{items} done · {:.0} items/s · {} to reschedule · {failed} failed",
                done as f64 / started.elapsed().as_secs_f64(),
                reschedule.len()
            );
        }
    }
    println!(
        "finished {items} items in {:.1} s; {} rescheduled, {failed} failed for good",
        started.elapsed().as_secs_f64(),
        reschedule.len()
    );
    gw.shutdown().await;
    Ok(())
}
