//! Shared set-up of the `server_*` tests: a gateway over mock upstreams behind a real
//! `polygateway::server::Server` on a loopback port, and SSE helpers.

#![allow(dead_code)] // each test binary uses its own subset

use std::time::Duration;

use polygateway::config::Settings;
use polygateway::server::{hash_key, KeyStore, Server};
use polygateway::Gateway;
use serde_json::Value;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The key every test's default key file accepts, for every scope.
pub const KEY: &str = "pgw-test-key";

pub struct TestServer {
    pub base: String,
    pub gw: Gateway,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl TestServer {
    /// Signal shutdown (drain) without waiting.
    pub fn begin_shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }

    /// Shut the server down, wait for the drain, then shut the gateway down.
    pub async fn stop(mut self) {
        self.begin_shutdown();
        if let Some(task) = self.task.take() {
            task.await.unwrap().unwrap();
        }
        self.gw.shutdown().await;
    }

    /// Wait for `serve` to return (after `begin_shutdown`).
    pub async fn served(&mut self) -> std::io::Result<()> {
        self.task.take().unwrap().await.unwrap()
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }
}

/// A key file entry for `key` with the given scopes and extra JSON fields.
pub fn key_entry(name: &str, key: &str, scopes: &[&str], extra: &str) -> String {
    let scopes: Vec<String> = scopes.iter().map(|s| format!("{s:?}")).collect();
    format!(
        r#"{{"name": "{name}", "hash": "{}", "scopes": [{}]{}{extra}}}"#,
        hash_key(key),
        scopes.join(", "),
        if extra.is_empty() { "" } else { ", " }
    )
}

pub fn key_file(entries: &[String]) -> String {
    format!(r#"{{"keys": [{}]}}"#, entries.join(", "))
}

/// Start a server for `settings` accepting [`KEY`] on every scope.
pub async fn start(settings: Settings) -> TestServer {
    start_with_keys(settings, key_file(&[key_entry("test", KEY, &["*"], "")])).await
}

pub async fn start_with_keys(settings: Settings, keys: String) -> TestServer {
    let default = settings.scopes.keys().next().cloned().unwrap();
    let gw = Gateway::from_settings(settings, &default).await.unwrap();
    start_for(gw, keys).await
}

pub async fn start_for(gw: Gateway, keys: String) -> TestServer {
    let server = Server::new(gw.clone(), KeyStore::from_json(&keys).unwrap()).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(server.serve(listener, async {
        let _ = stopped.await;
    }));
    TestServer {
        base,
        gw,
        stop: Some(stop),
        task: Some(task),
    }
}

pub fn chat_body(model: &str, stream: bool) -> Value {
    serde_json::json!({
        "model": model,
        "messages": [{"role": "user", "content": "hello"}],
        "stream": stream,
    })
}

/// The `data:` payloads of an SSE body, checking the framing: every event is exactly one
/// `data: …` line followed by a blank line.
pub fn sse_payloads(body: &str) -> Vec<String> {
    assert!(
        body.ends_with("\n\n"),
        "an SSE body ends with a blank line: {body:?}"
    );
    body.trim_end_matches("\n\n")
        .split("\n\n")
        .map(|event| {
            assert!(!event.contains('\n'), "one line per event: {event:?}");
            event
                .strip_prefix("data: ")
                .unwrap_or_else(|| panic!("not a data line: {event:?}"))
                .to_string()
        })
        .collect()
}

/// Poll `check` until it holds (bounded: 5 s), for effects that land asynchronously.
pub async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..250 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("still not true after 5 s: {what}");
}
