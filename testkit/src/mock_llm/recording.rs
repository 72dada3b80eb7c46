//! What the mock saw, as tests read it: request counters ([`MockCounts`]) and the recorded
//! requests ([`RecordedRequest`]).

use std::collections::BTreeMap;

use serde_json::Value;
/// Requests received so far.
///
/// ```
/// use polygateway_testkit::{Behaviour, MockUpstream};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let mock = MockUpstream::start(Behaviour::BadRequest).await;
/// let client = reqwest::Client::new();
/// client.get(format!("{}/models", mock.base_url())).send().await.unwrap();
/// client.post(format!("{}/chat/completions", mock.base_url()))
///     .json(&serde_json::json!({"model": "m", "messages": []}))
///     .send().await.unwrap();
/// let counts = mock.counts();
/// assert_eq!((counts.total, counts.models, counts.chat, counts.embeddings), (2, 1, 1, 0));
/// // Only chat and embeddings requests have a behaviour.
/// assert_eq!(counts.by_behaviour.len(), 1);
/// assert_eq!(counts.of("bad_request"), 1);
/// # }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MockCounts {
    /// Every request (all endpoints).
    pub total: u64,
    /// `POST /v1/chat/completions`.
    pub chat: u64,
    /// `POST /v1/embeddings`.
    pub embeddings: u64,
    /// `GET /v1/models`.
    pub models: u64,
    /// Chat and embeddings requests by resolved [`Behaviour::name`](super::Behaviour::name).
    pub by_behaviour: BTreeMap<&'static str, u64>,
}

impl MockCounts {
    /// Requests that resolved to the behaviour named `name` (0 if none).
    ///
    /// ```
    /// use polygateway_testkit::MockCounts;
    /// let mut counts = MockCounts::default();
    /// counts.by_behaviour.insert("healthy", 3);
    /// assert_eq!(counts.of("healthy"), 3);
    /// assert_eq!(counts.of("black_hole"), 0);
    /// ```
    pub fn of(&self, name: &str) -> u64 {
        self.by_behaviour.get(name).copied().unwrap_or(0)
    }
}

/// One recorded request.
///
/// What the gateway really sent:
///
/// ```
/// use polygateway_testkit::{mock_settings, Behaviour, MockUpstream};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let mock = MockUpstream::start(Behaviour::healthy()).await;
/// let settings = mock_settings(&[("LLM", mock.base_url().as_str())], &[]);
/// let gw = polygateway::Gateway::from_settings(settings, "LLM").await.unwrap();
/// gw.chat(vec![polygateway::Message::user("hi")]).await.unwrap();
/// let sent = mock.last_request().unwrap();
/// assert_eq!(sent.path, "/v1/chat/completions");
/// assert_eq!(sent.body["model"], "test-model");
/// assert_eq!(sent.body["messages"][0]["content"], "hi");
/// assert_eq!(sent.authorization.as_deref(), Some("Bearer sk-test"));
/// # gw.shutdown().await;
/// # }
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRequest {
    /// Request path.
    pub path: String,
    /// The JSON body (`Null` when it did not parse).
    pub body: Value,
    /// The `Authorization` header, if sent (test keys only ever reach a mock).
    pub authorization: Option<String>,
}
