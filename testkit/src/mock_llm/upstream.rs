//! The handle tests hold ([`MockUpstream`]): starting the axum server on a loopback port, reading
//! what it saw, changing what it does, stopping it.

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::HeaderValue;
use axum::routing::{get, post};
use axum::Router;
use rand::rngs::StdRng;
use rand::SeedableRng;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::behaviour::Behaviour;
use super::embeddings::embeddings;
use super::listener::CountingListener;
use super::recording::{MockCounts, RecordedRequest};
use super::server::{chat, end_connection, last_request, models, ConnectionEnd};
use super::shared::{lock, Plan, Shared, CLOSE_ANNOUNCED, CLOSE_SILENTLY, KEEP_ALIVE};
/// A running mock upstream. Dropping it stops the server (in-progress answers end).
///
/// The usual test: point a source at [`MockUpstream::base_url`], call, look at what the mock saw.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::collections::BTreeMap;
/// use polygateway::config::Settings;
/// use polygateway_testkit::{Behaviour, MockUpstream};
/// use polygateway::{Gateway, Message};
///
/// let mock = MockUpstream::start(Behaviour::healthy_with("pong")).await;
/// let env: BTreeMap<String, String> = [
///     ("PGW_LIMITER_BACKEND", "memory".to_string()),
///     ("PGW_BREAKER_BACKEND", "memory".into()),
///     ("PGW_TELEMETRY_BACKEND", "none".into()),
///     ("LLM__OPENAI__1__BASE_URL", mock.base_url()),
///     ("LLM__OPENAI__1__API_KEY", "sk-test".into()),
///     ("LLM__OPENAI__1__MODEL", "test-model".into()),
/// ]
/// .into_iter()
/// .map(|(k, v)| (k.to_string(), v))
/// .collect();
/// let gw = Gateway::from_settings(Settings::from_map(&env).unwrap(), "LLM").await.unwrap();
/// assert_eq!(gw.chat(vec![Message::user("ping")]).await.unwrap().content, "pong");
/// assert_eq!(mock.counts().chat, 1);
/// gw.shutdown().await;
/// mock.shutdown().await;
/// # }
/// ```
pub struct MockUpstream {
    addr: SocketAddr,
    shared: Arc<Shared>,
    server: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for MockUpstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockUpstream")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl MockUpstream {
    /// Bind `127.0.0.1:0` and serve `behaviour`. Embedding vectors have dimension 8 by default.
    ///
    /// ```
    /// use polygateway_testkit::{Behaviour, MockUpstream};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let mock = MockUpstream::start(Behaviour::RateLimited { retry_after_s: Some(7) }).await;
    /// let resp = reqwest::Client::new()
    ///     .post(format!("{}/chat/completions", mock.base_url()))
    ///     .json(&serde_json::json!({"model": "m", "messages": []}))
    ///     .send().await.unwrap();
    /// assert_eq!(resp.status(), 429);
    /// assert_eq!(resp.headers()["retry-after"], "7");
    /// # }
    /// ```
    ///
    /// # Panics
    /// When no loopback port can be bound (a test environment defect).
    pub async fn start(behaviour: Behaviour) -> MockUpstream {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .expect("bind 127.0.0.1:0 for the mock upstream");
        let addr = listener.local_addr().expect("mock upstream local addr");
        let cancel = CancellationToken::new();
        let shared = Arc::new(Shared {
            plan: Mutex::new(Plan {
                rng: StdRng::seed_from_u64(behaviour.seed().unwrap_or(0)),
                behaviour,
                seq: 0,
            }),
            counts: Mutex::new(MockCounts::default()),
            recorded: Mutex::new(VecDeque::new()),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
            per_minute: Mutex::new(BTreeMap::new()),
            connections: AtomicUsize::new(0),
            embedding_dim: AtomicUsize::new(8),
            refused_formats: Mutex::new(Vec::new()),
            connection_end: AtomicU8::new(KEEP_ALIVE),
            keep_alive: Mutex::new(None),
            cancel: cancel.clone(),
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(chat))
            .route("/v1/embeddings", post(embeddings))
            .route("/v1/models", get(models))
            .route("/mock/last_request", get(last_request))
            .layer(axum::middleware::from_fn_with_state(
                shared.clone(),
                end_connection,
            ))
            .with_state(shared.clone())
            .into_make_service_with_connect_info::<ConnectionEnd>();
        let listener = CountingListener {
            inner: listener,
            shared: shared.clone(),
        };
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(cancel.cancelled_owned())
                .await;
        });
        MockUpstream {
            addr,
            shared,
            server: Some(server),
        }
    }

    /// `http://127.0.0.1:<port>/v1` — what a source's `BASE_URL` should be.
    ///
    /// ```
    /// use polygateway_testkit::{Behaviour, MockUpstream};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let mock = MockUpstream::start(Behaviour::healthy()).await;
    /// let base = mock.base_url();
    /// assert!(base.starts_with("http://127.0.0.1:") && base.ends_with("/v1"));
    /// let models = reqwest::get(format!("{base}/models")).await.unwrap();
    /// assert_eq!(models.status(), 200);
    /// # }
    /// ```
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The bound address.
    ///
    /// ```
    /// use polygateway_testkit::{Behaviour, MockUpstream};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let mock = MockUpstream::start(Behaviour::healthy()).await;
    /// assert!(mock.addr().ip().is_loopback());
    /// assert_eq!(mock.base_url(), format!("http://{}/v1", mock.addr()));
    /// # }
    /// ```
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A snapshot of the request counters.
    ///
    /// ```
    /// use polygateway_testkit::{Behaviour, MockUpstream};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let mock = MockUpstream::start(Behaviour::healthy()).await;
    /// let before = mock.counts();
    /// reqwest::get(format!("{}/models", mock.base_url())).await.unwrap();
    /// assert_eq!(mock.counts().models, 1);
    /// // A snapshot does not move.
    /// assert_eq!(before.total, 0);
    /// # }
    /// ```
    pub fn counts(&self) -> MockCounts {
        lock(&self.shared.counts).clone()
    }

    /// Replace the behaviour; scripts and mixes restart from their beginning.
    ///
    /// ```
    /// use polygateway_testkit::{Behaviour, MockUpstream};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let mock = MockUpstream::start(Behaviour::healthy()).await;
    /// let post = |client: &reqwest::Client| {
    ///     client
    ///         .post(format!("{}/chat/completions", mock.base_url()))
    ///         .json(&serde_json::json!({"model": "m", "messages": []}))
    ///         .send()
    /// };
    /// let client = reqwest::Client::new();
    /// mock.set_behaviour(Behaviour::Unauthorized);
    /// assert_eq!(post(&client).await.unwrap().status(), 401);
    /// mock.set_behaviour(Behaviour::healthy());
    /// assert_eq!(post(&client).await.unwrap().status(), 200);
    /// # }
    /// ```
    pub fn set_behaviour(&self, behaviour: Behaviour) {
        let mut plan = lock(&self.shared.plan);
        plan.rng = StdRng::seed_from_u64(behaviour.seed().unwrap_or(0));
        plan.seq = 0;
        plan.behaviour = behaviour;
    }

    /// Dimension of the embedding vectors served from now on.
    ///
    /// ```
    /// use polygateway_testkit::{Behaviour, MockUpstream};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let mock = MockUpstream::start(Behaviour::healthy()).await;
    /// mock.set_embedding_dim(3);
    /// let body: serde_json::Value = reqwest::Client::new()
    ///     .post(format!("{}/embeddings", mock.base_url()))
    ///     .json(&serde_json::json!({"model": "m", "input": ["hello"]}))
    ///     .send().await.unwrap()
    ///     .json().await.unwrap();
    /// let vector: Vec<f32> = serde_json::from_value(body["data"][0]["embedding"].clone()).unwrap();
    /// assert_eq!(vector, polygateway_testkit::mock_embedding("hello", 3));
    /// # }
    /// ```
    pub fn set_embedding_dim(&self, dim: usize) {
        self.shared.embedding_dim.store(dim, Ordering::Relaxed);
    }

    /// From now on, refuse chat requests whose `response_format.type` is one of `types` with a
    /// 400 naming it, the way a server without that structured mode answers (the request is
    /// still counted and recorded). An empty list accepts every format again.
    ///
    /// ```
    /// use polygateway_testkit::{Behaviour, MockUpstream};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let mock = MockUpstream::start(Behaviour::healthy()).await;
    /// mock.refuse_response_formats(&["json_schema"]);
    /// let post = |kind: &str| {
    ///     reqwest::Client::new()
    ///         .post(format!("{}/chat/completions", mock.base_url()))
    ///         .json(&serde_json::json!({"model": "m", "messages": [], "response_format": {"type": kind}}))
    ///         .send()
    /// };
    /// let refused = post("json_schema").await.unwrap();
    /// assert_eq!(refused.status(), 400);
    /// assert!(refused.text().await.unwrap().contains("response_format"));
    /// assert_eq!(post("json_object").await.unwrap().status(), 200);
    /// # }
    /// ```
    pub fn refuse_response_formats(&self, types: &[&str]) {
        *lock(&self.shared.refused_formats) = types.iter().map(|t| t.to_string()).collect();
    }

    /// From now on, close every connection after its answer: with `announce`, the answer says
    /// `Connection: close` (a well-behaved server); without, it says `Keep-Alive: timeout=5,
    /// max=100` and the connection is closed anyway (llama.cpp's `llama-server` after a streamed
    /// answer), so a client that pools it finds it closed on its next request.
    ///
    /// ```
    /// use polygateway_testkit::{Behaviour, MockUpstream};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let mock = MockUpstream::start(Behaviour::healthy()).await;
    /// mock.close_connections_after_answers(true);
    /// let resp = reqwest::Client::new()
    ///     .post(format!("{}/chat/completions", mock.base_url()))
    ///     .json(&serde_json::json!({"model": "m", "messages": []}))
    ///     .send().await.unwrap();
    /// assert_eq!(resp.headers()["connection"], "close");
    /// resp.bytes().await.unwrap();
    /// for _ in 0..100 {
    ///     if mock.open_connections() == 0 { break }
    ///     tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    /// }
    /// assert_eq!(mock.open_connections(), 0);
    /// # }
    /// ```
    pub fn close_connections_after_answers(&self, announce: bool) {
        let end = if announce {
            CLOSE_ANNOUNCED
        } else {
            CLOSE_SILENTLY
        };
        self.shared.connection_end.store(end, Ordering::SeqCst);
    }

    /// From now on, every answer on a connection kept open says `Keep-Alive: timeout={seconds},
    /// max=100`, the way servers announce their idle timeout (the connection is kept; the mock
    /// itself does not close idle connections).
    ///
    /// ```
    /// use polygateway_testkit::{Behaviour, MockUpstream};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let mock = MockUpstream::start(Behaviour::healthy()).await;
    /// mock.announce_keep_alive_timeout(2);
    /// let resp = reqwest::Client::new()
    ///     .post(format!("{}/chat/completions", mock.base_url()))
    ///     .json(&serde_json::json!({"model": "m", "messages": []}))
    ///     .send().await.unwrap();
    /// assert_eq!(resp.headers()["keep-alive"], "timeout=2, max=100");
    /// # }
    /// ```
    pub fn announce_keep_alive_timeout(&self, seconds: u64) {
        let value = HeaderValue::from_str(&format!("timeout={seconds}, max=100"))
            .expect("digits and ASCII punctuation are a valid header value");
        *lock(&self.shared.keep_alive) = Some(value);
    }

    /// The last requests received (oldest first, at most 64).
    ///
    /// ```
    /// use polygateway_testkit::{Behaviour, MockUpstream};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let mock = MockUpstream::start(Behaviour::healthy()).await;
    /// let post = |client: &reqwest::Client, n: u32| {
    ///     client
    ///         .post(format!("{}/chat/completions", mock.base_url()))
    ///         .json(&serde_json::json!({"model": "m", "messages": [], "n": n}))
    ///         .send()
    /// };
    /// let client = reqwest::Client::new();
    /// post(&client, 1).await.unwrap();
    /// post(&client, 2).await.unwrap();
    /// let seen: Vec<_> = mock.requests().iter().map(|r| r.body["n"].clone()).collect();
    /// assert_eq!(seen, [1, 2]);
    /// # }
    /// ```
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.shared.recorded).iter().cloned().collect()
    }

    /// The most recent request.
    ///
    /// ```
    /// use polygateway_testkit::{Behaviour, MockUpstream};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let mock = MockUpstream::start(Behaviour::healthy()).await;
    /// assert!(mock.last_request().is_none());
    /// reqwest::Client::new()
    ///     .post(format!("{}/embeddings", mock.base_url()))
    ///     .bearer_auth("sk-test")
    ///     .json(&serde_json::json!({"model": "m", "input": "hi"}))
    ///     .send().await.unwrap();
    /// let last = mock.last_request().unwrap();
    /// assert_eq!(last.path, "/v1/embeddings");
    /// assert_eq!(last.authorization.as_deref(), Some("Bearer sk-test"));
    /// # }
    /// ```
    pub fn last_request(&self) -> Option<RecordedRequest> {
        lock(&self.shared.recorded).back().cloned()
    }

    /// Requests currently being answered (a streaming answer counts until its body ends or the
    /// client goes away).
    ///
    /// ```
    /// use polygateway_testkit::{Behaviour, MockUpstream};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use std::time::Duration;
    /// let mock = MockUpstream::start(Behaviour::Slow { delay: Duration::from_millis(300) }).await;
    /// let url = format!("{}/chat/completions", mock.base_url());
    /// let call = tokio::spawn(
    ///     reqwest::Client::new().post(url).json(&serde_json::json!({"model": "m", "messages": []})).send(),
    /// );
    /// for _ in 0..100 {
    ///     if mock.in_flight() == 1 { break }
    ///     tokio::time::sleep(Duration::from_millis(5)).await;
    /// }
    /// assert_eq!(mock.in_flight(), 1);
    /// call.await.unwrap().unwrap();
    /// assert_eq!(mock.in_flight(), 0);
    /// # }
    /// ```
    pub fn in_flight(&self) -> usize {
        self.shared.in_flight.load(Ordering::SeqCst)
    }

    /// The most requests ever in flight at once.
    ///
    /// ```
    /// use polygateway_testkit::{Behaviour, MockUpstream};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use std::time::Duration;
    /// let mock = MockUpstream::start(Behaviour::Slow { delay: Duration::from_millis(500) }).await;
    /// let post = |client: &reqwest::Client| {
    ///     client
    ///         .post(format!("{}/chat/completions", mock.base_url()))
    ///         .json(&serde_json::json!({"model": "m", "messages": []}))
    ///         .send()
    /// };
    /// let client = reqwest::Client::new();
    /// let (a, b, c) = tokio::join!(post(&client), post(&client), post(&client));
    /// assert!(a.is_ok() && b.is_ok() && c.is_ok());
    /// assert_eq!(mock.in_flight(), 0);
    /// assert_eq!(mock.max_in_flight(), 3);
    /// # }
    /// ```
    pub fn max_in_flight(&self) -> usize {
        self.shared.max_in_flight.load(Ordering::SeqCst)
    }

    /// Requests received per wall-clock minute (unix ms / 60 000): the fixed windows a Redis
    /// limiter counts RPM in, so a test can check no window got more than the limit.
    ///
    /// ```
    /// use polygateway_testkit::{Behaviour, MockUpstream};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let mock = MockUpstream::start(Behaviour::healthy()).await;
    /// let post = |client: &reqwest::Client| {
    ///     client
    ///         .post(format!("{}/chat/completions", mock.base_url()))
    ///         .json(&serde_json::json!({"model": "m", "messages": []}))
    ///         .send()
    /// };
    /// let client = reqwest::Client::new();
    /// post(&client).await.unwrap();
    /// post(&client).await.unwrap();
    /// let windows = mock.requests_per_minute();
    /// assert_eq!(windows.values().sum::<u64>(), 2);
    /// // What an RPM test checks: no minute window got more than the limit.
    /// let rpm_limit = 2;
    /// assert!(windows.values().all(|&n| n <= rpm_limit));
    /// # }
    /// ```
    pub fn requests_per_minute(&self) -> BTreeMap<u64, u64> {
        lock(&self.shared.per_minute).clone()
    }

    /// TCP connections currently open.
    ///
    /// ```
    /// use polygateway_testkit::{Behaviour, MockUpstream};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use std::time::Duration;
    /// let mock = MockUpstream::start(Behaviour::healthy()).await;
    /// let client = reqwest::Client::new();
    /// client.get(format!("{}/models", mock.base_url())).send().await.unwrap().text().await.unwrap();
    /// // The client keeps its connection alive for the next request.
    /// assert_eq!(mock.open_connections(), 1);
    /// drop(client);
    /// for _ in 0..200 {
    ///     if mock.open_connections() == 0 { break }
    ///     tokio::time::sleep(Duration::from_millis(10)).await;
    /// }
    /// assert_eq!(mock.open_connections(), 0);
    /// # }
    /// ```
    pub fn open_connections(&self) -> usize {
        self.shared.connections.load(Ordering::SeqCst)
    }

    /// Stop accepting, end in-progress answers, and wait (≤ 2 s) for the server to finish.
    ///
    /// ```
    /// use polygateway_testkit::{Behaviour, MockUpstream};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let mock = MockUpstream::start(Behaviour::healthy()).await;
    /// let url = format!("{}/models", mock.base_url());
    /// assert!(reqwest::get(&url).await.is_ok());
    /// mock.shutdown().await;
    /// assert!(reqwest::get(&url).await.is_err(), "nothing listens any more");
    /// # }
    /// ```
    pub async fn shutdown(mut self) {
        self.shared.cancel.cancel();
        if let Some(server) = self.server.take() {
            let abort = server.abort_handle();
            if tokio::time::timeout(Duration::from_secs(2), server)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
    }
}

impl Drop for MockUpstream {
    fn drop(&mut self) {
        self.shared.cancel.cancel();
        if let Some(server) = self.server.take() {
            server.abort();
        }
    }
}
