//! A mock OpenAI-compatible upstream with fault injection (axum on `127.0.0.1`, random port).
//!
//! Serves `POST /v1/chat/completions` (streaming or not, as the request's `stream` says),
//! `POST /v1/embeddings` and `GET /v1/models`. What it does per request is a [`Behaviour`]:
//! healthy, slow, black hole, every HTTP failure class, every stream defect the chat transport
//! must classify, probabilistic mixes and scripts. It counts requests (total and per behaviour),
//! keeps the last request bodies, and tracks in-flight requests and open connections, so tests
//! can see what was sent and that an aborted stream was let go.
//!
//! Built to be cheap under soaks (10k+ requests): no per-request logging, frames without delay
//! are sent together in chunks of up to 64 KB. Not a general HTTP mock; nothing in the runtime
//! uses it.

use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Prompt tokens the mock reports for every chat request.
///
/// ```
/// use polygateway::testkit::mock_llm::MOCK_PROMPT_TOKENS;
/// use polygateway::testkit::{mock_settings, Behaviour, MockUpstream};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let mock = MockUpstream::start(Behaviour::healthy()).await;
/// let settings = mock_settings(&[("LLM", mock.base_url().as_str())], &[]);
/// let gw = polygateway::Gateway::from_settings(settings, "LLM").await.unwrap();
/// let resp = gw.chat(vec![polygateway::Message::user("hi")]).await.unwrap();
/// assert_eq!(resp.prompt_tokens, MOCK_PROMPT_TOKENS);
/// // One completion token per delta: the healthy answer comes in 4.
/// assert_eq!(resp.completion_tokens, 4);
/// # gw.shutdown().await;
/// # }
/// ```
pub const MOCK_PROMPT_TOKENS: u64 = 12;
/// Cached prompt tokens reported by [`Behaviour::UsageDetails`].
///
/// ```
/// use polygateway::testkit::mock_llm::MOCK_CACHED_TOKENS;
/// use polygateway::testkit::{mock_settings, Behaviour, MockUpstream};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let mock = MockUpstream::start(Behaviour::UsageDetails).await;
/// let settings = mock_settings(&[("LLM", mock.base_url().as_str())], &[]);
/// let gw = polygateway::Gateway::from_settings(settings, "LLM").await.unwrap();
/// let resp = gw.chat(vec![polygateway::Message::user("hi")]).await.unwrap();
/// assert_eq!(resp.cached_prompt_tokens, Some(MOCK_CACHED_TOKENS));
/// # gw.shutdown().await;
/// # }
/// ```
pub const MOCK_CACHED_TOKENS: u64 = 8;
/// Reasoning tokens reported by [`Behaviour::UsageDetails`].
///
/// They are part of `completion_tokens`, as in OpenAI's usage block:
///
/// ```
/// use polygateway::testkit::{mock_llm::MOCK_REASONING_TOKENS, Behaviour, MockUpstream};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let mock = MockUpstream::start(Behaviour::UsageDetails).await;
/// let body: serde_json::Value = reqwest::Client::new()
///     .post(format!("{}/chat/completions", mock.base_url()))
///     .json(&serde_json::json!({"model": "m", "messages": []}))
///     .send().await.unwrap()
///     .json().await.unwrap();
/// let usage = &body["usage"];
/// assert_eq!(usage["completion_tokens_details"]["reasoning_tokens"], MOCK_REASONING_TOKENS);
/// assert_eq!(usage["completion_tokens"], 4 + MOCK_REASONING_TOKENS);
/// # }
/// ```
pub const MOCK_REASONING_TOKENS: u64 = 3;
/// Default answer of [`Behaviour::healthy`].
///
/// ```
/// use polygateway::testkit::mock_llm::MOCK_CONTENT;
/// use polygateway::testkit::{mock_settings, Behaviour, MockUpstream};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let mock = MockUpstream::start(Behaviour::healthy()).await;
/// let settings = mock_settings(&[("LLM", mock.base_url().as_str())], &[]);
/// let gw = polygateway::Gateway::from_settings(settings, "LLM").await.unwrap();
/// let resp = gw.chat(vec![polygateway::Message::user("hi")]).await.unwrap();
/// assert_eq!(resp.content, MOCK_CONTENT);
/// # gw.shutdown().await;
/// # }
/// ```
pub const MOCK_CONTENT: &str = "Hello from the mock upstream.";
/// Reasoning text of [`Behaviour::Reasoning`] and [`Behaviour::ThinkTags`].
///
/// The gateway returns the streamed `reasoning_content` as `thinking`, apart from the answer:
///
/// ```
/// use polygateway::testkit::mock_llm::{MOCK_CONTENT, MOCK_THINKING};
/// use polygateway::testkit::{mock_settings, Behaviour, MockUpstream};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let mock = MockUpstream::start(Behaviour::Reasoning).await;
/// let settings = mock_settings(&[("LLM", mock.base_url().as_str())], &[]);
/// let gw = polygateway::Gateway::from_settings(settings, "LLM").await.unwrap();
/// let resp = gw.chat(vec![polygateway::Message::user("hi")]).await.unwrap();
/// assert_eq!(resp.thinking, MOCK_THINKING);
/// assert_eq!(resp.content, MOCK_CONTENT);
/// # gw.shutdown().await;
/// # }
/// ```
pub const MOCK_THINKING: &str = "Let me think.";

/// The `system_fingerprint` of every chat answer.
const MOCK_FINGERPRINT: &str = "fp_mock";

/// The logprob of every token when logprobs are asked for.
const MOCK_LOGPROB: f64 = -0.25;
/// How many request bodies are kept.
const RECORDED_MAX: usize = 64;

/// What the mock does with a request.
///
/// Token usage: `prompt_tokens` = [`MOCK_PROMPT_TOKENS`], `completion_tokens` = number of
/// content + reasoning deltas. Streaming sends the usage chunk only when the request asked for
/// it (`stream_options.include_usage`), like OpenAI. The reported `model` is the requested model
/// with `-mock` appended (so a test can tell it came from the wire).
///
/// A healthy answer to a request ending with a prefill — an assistant message with
/// `"prefix": true`, as DeepSeek's chat prefix completion and Mistral take it — is the
/// continuation only: the rest of the answer's text after the prefix (the whole text when the
/// prefix does not begin it), its words added to `prompt_tokens`.
///
/// A script makes a failure deterministic: here the first attempt gets a 503 and the gateway's
/// retry gets the healthy answer.
///
/// ```
/// use polygateway::testkit::{mock_settings, Behaviour, MockUpstream};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let script = vec![Behaviour::ServerError(503), Behaviour::healthy()];
/// let mock = MockUpstream::start(Behaviour::Scripted(script)).await;
/// let settings = mock_settings(&[("LLM", mock.base_url().as_str())], &[]);
/// let gw = polygateway::Gateway::from_settings(settings, "LLM").await.unwrap();
/// let resp = gw.chat(vec![polygateway::Message::user("hi")]).await.unwrap();
/// assert_eq!(resp.model_reported.as_deref(), Some("test-model-mock"));
/// let counts = mock.counts();
/// assert_eq!((counts.of("server_error"), counts.of("healthy")), (1, 1));
/// # gw.shutdown().await;
/// # }
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Behaviour {
    /// A normal answer: the first delta after `ttft`, then one every `inter_token`.
    Healthy {
        /// Delay before the first content delta (a role-only chunk is sent at once).
        ttft: Duration,
        /// Delay between content deltas.
        inter_token: Duration,
        /// Number of content deltas (the content is split into this many pieces).
        chunks: usize,
        /// The answer.
        content: String,
    },
    /// Waits `delay` before sending headers, then answers like [`Behaviour::healthy`].
    Slow {
        /// Delay before the response starts.
        delay: Duration,
    },
    /// Accepts the request and never answers.
    BlackHole,
    /// 429 pushback, with `Retry-After: <s>` when given.
    RateLimited {
        /// Seconds for the `Retry-After` header.
        retry_after_s: Option<u64>,
    },
    /// 429 with an `insufficient_quota` error body.
    InsufficientQuota,
    /// 401.
    Unauthorized,
    /// 403.
    Forbidden,
    /// 400.
    BadRequest,
    /// The given 5xx status (500, 502, 503, …).
    ServerError(u16),
    /// Content deltas (and the usage chunk when `with_usage`), then EOF without `[DONE]`.
    /// Non-streaming: a body cut in half.
    TruncatedStream {
        /// Send the usage chunk before ending.
        with_usage: bool,
    },
    /// A role-only chunk, then EOF: no content, no `[DONE]`. Non-streaming: an empty body.
    EarlyEof,
    /// The way proxies and load balancers end streams: the role chunk, then (with `content`) the
    /// content deltas and (with `with_usage`) the usage chunk, then the socket is dropped without
    /// the chunked encoding's final chunk — the client sees a body error, not a clean EOF.
    /// Non-streaming: half of the JSON body, then the same abrupt close.
    AbruptClose {
        /// Send the content deltas before closing (`false`: only the role chunk).
        content: bool,
        /// Send the usage chunk before closing (when the request asked for usage).
        with_usage: bool,
    },
    /// One valid delta, a frame of broken JSON, `[DONE]`. Non-streaming: a broken body.
    MalformedFrame,
    /// A complete stream (finish, usage, `[DONE]`) without any content.
    EmptyCompletion,
    /// `reasoning_content` deltas, then the default content.
    Reasoning,
    /// Like [`Behaviour::Reasoning`], every delta paced: the first after `ttft`, then one every
    /// `inter_token` (reasoning and content alike). Counted as `reasoning`.
    ReasoningPaced {
        /// Delay before the first reasoning delta.
        ttft: Duration,
        /// Delay between deltas.
        inter_token: Duration,
    },
    /// `<think>…</think>` inside `content`, tags split across deltas, then the default content.
    ThinkTags,
    /// Healthy, with `prompt_tokens_details.cached_tokens` and
    /// `completion_tokens_details.reasoning_tokens` in the usage.
    UsageDetails,
    /// Healthy but never sends usage (streaming or not, chat or embeddings).
    NoUsage,
    /// One content delta, then an in-band `{"error": …}` frame. Non-streaming: a 200 whose body is
    /// an error object.
    InBandError,
    /// Embeddings: one vector fewer than inputs. Chat: healthy.
    EmbeddingCountMismatch,
    /// Each request fails with `failure` with probability `failure_rate` (seeded), else does
    /// `healthy` — e.g. a JSON answer for a structured-output job under faults:
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use polygateway::testkit::{mock_settings, Behaviour, MockUpstream};
    /// let mock = MockUpstream::start(Behaviour::Mix {
    ///     failure_rate: 0.3,
    ///     failure: Box::new(Behaviour::ServerError(503)),
    ///     healthy: Box::new(Behaviour::healthy_with(r#"{"ok": true}"#)),
    ///     seed: 7,
    /// })
    /// .await;
    /// let settings = mock_settings(&[("LLM", mock.base_url().as_str())], &[("LLM__RETRY__MAX_ATTEMPTS", "20")]);
    /// let gw = polygateway::Gateway::from_settings(settings, "LLM").await.unwrap();
    /// for _ in 0..4 {
    ///     let answer = gw.chat(vec![polygateway::Message::user("status?")]).await.unwrap();
    ///     assert_eq!(answer.content, r#"{"ok": true}"#);
    /// }
    /// assert!(mock.counts().of("server_error") > 0);
    /// # gw.shutdown().await;
    /// # }
    /// ```
    Mix {
        /// Probability in `[0, 1]`.
        failure_rate: f64,
        /// What a failing request does.
        failure: Box<Behaviour>,
        /// What a succeeding request does (usually [`Behaviour::healthy`] or
        /// [`Behaviour::healthy_with`]).
        healthy: Box<Behaviour>,
        /// RNG seed (the draw sequence restarts on [`MockUpstream::set_behaviour`]).
        seed: u64,
    },
    /// One behaviour per request in order; the last one repeats.
    Scripted(Vec<Behaviour>),
    /// A healthy answer whose content is the next string per request; the last one repeats.
    ScriptedContent(Vec<String>),
    /// Tool calls instead of text, `(name, arguments)` each, ids `call_0`, `call_1`, …:
    /// streamed the way OpenAI streams them (the id and name in a call's first piece, the
    /// arguments in three more), `content: null` and `finish_reason: "tool_calls"`.
    ToolCalls(Vec<(String, String)>),
    /// The default content cut in half with `finish_reason: "length"` (max tokens reached).
    Length,
    /// A stream cut mid-answer: `answer` (e.g. [`Behaviour::healthy_with`], or
    /// [`Behaviour::ToolCalls`]) streamed up to its first `deltas` content deltas (everything
    /// before them included: reasoning, tool-call pieces), then the socket dropped the way
    /// [`Behaviour::AbruptClose`] drops it. Non-streaming: like `AbruptClose`.
    ///
    /// ```
    /// use polygateway::testkit::Behaviour;
    /// let cut = Behaviour::CutAfter { deltas: 2, answer: Box::new(Behaviour::healthy()) };
    /// assert_eq!(cut.name(), "cut_after");
    /// ```
    CutAfter {
        /// Content deltas sent before the cut.
        deltas: usize,
        /// The answer being cut.
        answer: Box<Behaviour>,
    },
    /// Exactly these chunks (each sent as one `data:` frame, then `[DONE]`) when streaming,
    /// exactly this body when not: provider shapes the mock does not otherwise produce.
    Raw {
        /// The stream's chunks.
        chunks: Vec<Value>,
        /// The non-streaming body.
        completion: Value,
    },
}

impl Behaviour {
    /// Healthy, no delays, [`MOCK_CONTENT`] in 4 deltas.
    ///
    /// ```
    /// use polygateway::testkit::{mock_llm::MOCK_CONTENT, Behaviour};
    /// let Behaviour::Healthy { ttft, chunks, content, .. } = Behaviour::healthy() else {
    ///     unreachable!()
    /// };
    /// assert!(ttft.is_zero());
    /// assert_eq!((chunks, content.as_str()), (4, MOCK_CONTENT));
    /// ```
    pub fn healthy() -> Self {
        Self::healthy_with(MOCK_CONTENT)
    }

    /// Healthy, no delays, the given content in up to 4 deltas.
    ///
    /// ```
    /// use polygateway::testkit::Behaviour;
    /// let b = Behaviour::healthy_with(r#"{"answer": 42}"#);
    /// assert!(matches!(&b, Behaviour::Healthy { content, .. } if content == r#"{"answer": 42}"#));
    /// assert_eq!(b.name(), "healthy");
    /// ```
    pub fn healthy_with(content: impl Into<String>) -> Self {
        Behaviour::Healthy {
            ttft: Duration::ZERO,
            inter_token: Duration::ZERO,
            chunks: 4,
            content: content.into(),
        }
    }

    /// The name under which requests are counted (`healthy`, `rate_limited`, …). Composite
    /// behaviours count under the behaviour they resolved to.
    ///
    /// ```
    /// use polygateway::testkit::Behaviour;
    /// assert_eq!(Behaviour::RateLimited { retry_after_s: Some(1) }.name(), "rate_limited");
    /// assert_eq!(Behaviour::ServerError(502).name(), "server_error");
    /// // The script's own name; its requests are counted under what each step resolves to.
    /// assert_eq!(Behaviour::Scripted(vec![Behaviour::BlackHole]).name(), "scripted");
    /// ```
    pub fn name(&self) -> &'static str {
        match self {
            Behaviour::Healthy { .. } => "healthy",
            Behaviour::Slow { .. } => "slow",
            Behaviour::BlackHole => "black_hole",
            Behaviour::RateLimited { .. } => "rate_limited",
            Behaviour::InsufficientQuota => "insufficient_quota",
            Behaviour::Unauthorized => "unauthorized",
            Behaviour::Forbidden => "forbidden",
            Behaviour::BadRequest => "bad_request",
            Behaviour::ServerError(_) => "server_error",
            Behaviour::TruncatedStream { .. } => "truncated_stream",
            Behaviour::EarlyEof => "early_eof",
            Behaviour::AbruptClose { .. } => "abrupt_close",
            Behaviour::MalformedFrame => "malformed_frame",
            Behaviour::EmptyCompletion => "empty_completion",
            Behaviour::Reasoning | Behaviour::ReasoningPaced { .. } => "reasoning",
            Behaviour::ThinkTags => "think_tags",
            Behaviour::UsageDetails => "usage_details",
            Behaviour::NoUsage => "no_usage",
            Behaviour::InBandError => "in_band_error",
            Behaviour::EmbeddingCountMismatch => "embedding_count_mismatch",
            Behaviour::Mix { .. } => "mix",
            Behaviour::Scripted(_) => "scripted",
            Behaviour::ScriptedContent(_) => "scripted_content",
            Behaviour::ToolCalls(_) => "tool_calls",
            Behaviour::Length => "length",
            Behaviour::Raw { .. } => "raw",
            Behaviour::CutAfter { .. } => "cut_after",
        }
    }

    fn seed(&self) -> Option<u64> {
        match self {
            Behaviour::Mix { seed, .. } => Some(*seed),
            Behaviour::Scripted(list) => list.iter().find_map(Behaviour::seed),
            _ => None,
        }
    }
}

/// Requests received so far.
///
/// ```
/// use polygateway::testkit::{Behaviour, MockUpstream};
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
    /// Chat and embeddings requests by resolved [`Behaviour::name`].
    pub by_behaviour: BTreeMap<&'static str, u64>,
}

impl MockCounts {
    /// Requests that resolved to the behaviour named `name` (0 if none).
    ///
    /// ```
    /// use polygateway::testkit::MockCounts;
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
/// use polygateway::testkit::{mock_settings, Behaviour, MockUpstream};
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

struct Plan {
    behaviour: Behaviour,
    seq: u64,
    rng: StdRng,
}

struct Shared {
    plan: Mutex<Plan>,
    counts: Mutex<MockCounts>,
    recorded: Mutex<VecDeque<RecordedRequest>>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    /// Requests by wall-clock minute (unix ms / 60 000) — the windows a Redis limiter counts in.
    per_minute: Mutex<BTreeMap<u64, u64>>,
    connections: AtomicUsize,
    embedding_dim: AtomicUsize,
    /// `response_format` types the mock refuses with a 400, like a server without them.
    refused_formats: Mutex<Vec<String>>,
    /// How connections end after an answer: [`KEEP_ALIVE`], [`CLOSE_ANNOUNCED`] or
    /// [`CLOSE_SILENTLY`].
    connection_end: AtomicU8,
    /// The `Keep-Alive` header answers carry while connections stay open
    /// ([`MockUpstream::announce_keep_alive_timeout`]); `None`: no such header.
    keep_alive: Mutex<Option<HeaderValue>>,
    cancel: CancellationToken,
}

/// Connections stay open for the next request (the default).
const KEEP_ALIVE: u8 = 0;
/// Every answer says `Connection: close`, and the connection is closed after it.
const CLOSE_ANNOUNCED: u8 = 1;
/// Every answer says `Keep-Alive: timeout=5, max=100`, and the connection is closed after it
/// anyway (what llama.cpp's `llama-server` does after a streamed answer).
const CLOSE_SILENTLY: u8 = 2;

/// A running mock upstream. Dropping it stops the server (in-progress answers end).
///
/// The usual test: point a source at [`MockUpstream::base_url`], call, look at what the mock saw.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::collections::BTreeMap;
/// use polygateway::config::Settings;
/// use polygateway::testkit::{Behaviour, MockUpstream};
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
    /// use polygateway::testkit::{Behaviour, MockUpstream};
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
    /// use polygateway::testkit::{Behaviour, MockUpstream};
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
    /// use polygateway::testkit::{Behaviour, MockUpstream};
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
    /// use polygateway::testkit::{Behaviour, MockUpstream};
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
    /// use polygateway::testkit::{Behaviour, MockUpstream};
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
    /// use polygateway::testkit::{Behaviour, MockUpstream};
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
    /// assert_eq!(vector, polygateway::testkit::mock_embedding("hello", 3));
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
    /// use polygateway::testkit::{Behaviour, MockUpstream};
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
    /// use polygateway::testkit::{Behaviour, MockUpstream};
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
    /// use polygateway::testkit::{Behaviour, MockUpstream};
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
    /// use polygateway::testkit::{Behaviour, MockUpstream};
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
    /// use polygateway::testkit::{Behaviour, MockUpstream};
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
    /// use polygateway::testkit::{Behaviour, MockUpstream};
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
    /// use polygateway::testkit::{Behaviour, MockUpstream};
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
    /// use polygateway::testkit::{Behaviour, MockUpstream};
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
    /// use polygateway::testkit::{Behaviour, MockUpstream};
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
    /// use polygateway::testkit::{Behaviour, MockUpstream};
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

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panicking test thread must not wedge the mock for the others.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Counts one in-flight request until dropped (with the response body for streams).
struct InFlight(Arc<Shared>);

impl InFlight {
    fn new(shared: &Arc<Shared>) -> Self {
        let now = shared.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        shared.max_in_flight.fetch_max(now, Ordering::SeqCst);
        let minute = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64 / 60_000);
        *lock(&shared.per_minute).entry(minute).or_default() += 1;
        InFlight(shared.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Shared {
    /// Count, record and resolve the behaviour of one request.
    fn admit(&self, path: &str, body: &Value, headers: &HeaderMap) -> Behaviour {
        let resolved = {
            let mut plan = lock(&self.plan);
            let seq = plan.seq;
            plan.seq += 1;
            let Plan { behaviour, rng, .. } = &mut *plan;
            resolve(behaviour, seq, rng)
        };
        {
            let mut counts = lock(&self.counts);
            counts.total += 1;
            if path.ends_with("/embeddings") {
                counts.embeddings += 1;
            } else {
                counts.chat += 1;
            }
            *counts.by_behaviour.entry(resolved.name()).or_insert(0) += 1;
        }
        self.record(path, body, headers);
        resolved
    }

    fn record(&self, path: &str, body: &Value, headers: &HeaderMap) {
        let mut rec = lock(&self.recorded);
        if rec.len() == RECORDED_MAX {
            rec.pop_front();
        }
        rec.push_back(RecordedRequest {
            path: path.to_string(),
            body: body.clone(),
            authorization: headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string),
        });
    }
}

/// Pick the concrete behaviour for request number `seq`.
fn resolve(b: &Behaviour, seq: u64, rng: &mut StdRng) -> Behaviour {
    match b {
        Behaviour::Scripted(list) => {
            match list.get((seq as usize).min(list.len().saturating_sub(1))) {
                Some(b) => resolve(b, seq, rng),
                None => Behaviour::healthy(),
            }
        }
        Behaviour::ScriptedContent(list) => {
            let i = (seq as usize).min(list.len().saturating_sub(1));
            Behaviour::healthy_with(list.get(i).cloned().unwrap_or_default())
        }
        Behaviour::Mix {
            failure_rate,
            failure,
            healthy,
            ..
        } => {
            if rng.random_bool(failure_rate.clamp(0.0, 1.0)) {
                resolve(failure, seq, rng)
            } else {
                resolve(healthy, seq, rng)
            }
        }
        other => other.clone(),
    }
}

/// An HTTP-level failure response for the status behaviours; `None` for the others.
fn status_failure(b: &Behaviour) -> Option<Response> {
    let (status, body, retry_after) = match b {
        Behaviour::RateLimited { retry_after_s } => (
            StatusCode::TOO_MANY_REQUESTS,
            json!({"error": {"message": "Rate limit reached for requests", "type": "requests", "code": "rate_limit_exceeded"}}),
            *retry_after_s,
        ),
        Behaviour::InsufficientQuota => (
            StatusCode::TOO_MANY_REQUESTS,
            json!({"error": {"message": "You exceeded your current quota, please check your plan and billing details.", "type": "insufficient_quota", "code": "insufficient_quota"}}),
            None,
        ),
        Behaviour::Unauthorized => (
            StatusCode::UNAUTHORIZED,
            json!({"error": {"message": "Incorrect API key provided.", "type": "invalid_request_error", "code": "invalid_api_key"}}),
            None,
        ),
        Behaviour::Forbidden => (
            StatusCode::FORBIDDEN,
            json!({"error": {"message": "This key is not allowed to access the model.", "type": "permission_error"}}),
            None,
        ),
        Behaviour::BadRequest => (
            StatusCode::BAD_REQUEST,
            json!({"error": {"message": "Invalid 'messages': the request is malformed.", "type": "invalid_request_error"}}),
            None,
        ),
        Behaviour::ServerError(code) => (
            StatusCode::from_u16(*code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            json!({"error": {"message": "The server had an error while processing your request.", "type": "server_error"}}),
            None,
        ),
        _ => return None,
    };
    let mut resp = (status, axum::Json(body)).into_response();
    if let Some(s) = retry_after {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(s));
    }
    Some(resp)
}

/// Ends the connection after each answer when the mock was told to
/// ([`MockUpstream::close_connections_after_answers`]), or announces its keep-alive timeout
/// ([`MockUpstream::announce_keep_alive_timeout`]).
async fn end_connection(
    State(shared): State<Arc<Shared>>,
    axum::extract::ConnectInfo(connection): axum::extract::ConnectInfo<ConnectionEnd>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let mut response = next.run(request).await;
    match shared.connection_end.load(Ordering::SeqCst) {
        // hyper's server closes the connection once this answer is written.
        CLOSE_ANNOUNCED => {
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        CLOSE_SILENTLY => {
            response
                .headers_mut()
                .insert("keep-alive", HeaderValue::from_static("timeout=5, max=100"));
            // When the body has been handed over, the connection reads end-of-stream: hyper
            // finishes writing the answer and closes it.
            let (parts, body) = response.into_parts();
            use futures::StreamExt;
            let close = futures::stream::once(async move {
                connection.0.store(true, Ordering::SeqCst);
            })
            .filter_map(|()| async { None::<Result<Bytes, axum::Error>> });
            let body = Body::from_stream(body.into_data_stream().chain(close));
            response = Response::from_parts(parts, body);
        }
        _ => {
            if let Some(value) = lock(&shared.keep_alive).clone() {
                response.headers_mut().insert("keep-alive", value);
            }
        }
    }
    response
}

/// The per-connection "close after this answer" flag, shared with its [`CountedStream`].
#[derive(Clone)]
struct ConnectionEnd(Arc<AtomicBool>);

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, CountingListener>>
    for ConnectionEnd
{
    fn connect_info(stream: axum::serve::IncomingStream<'_, CountingListener>) -> Self {
        ConnectionEnd(Arc::clone(&stream.io().closing))
    }
}

/// A 400 for a `response_format` type the mock was told to refuse (vLLM-style wording).
fn refused_format(shared: &Shared, body: &Value) -> Option<Response> {
    let kind = body["response_format"]["type"].as_str()?;
    if !lock(&shared.refused_formats).iter().any(|r| r == kind) {
        return None;
    }
    let message = format!("response_format type '{kind}' is not supported by this server");
    let body = json!({"error": {"message": message, "type": "invalid_request_error", "param": "response_format"}});
    Some((StatusCode::BAD_REQUEST, axum::Json(body)).into_response())
}

/// Wait for the request's delay-before-answer behaviours; `false` when the mock shut down.
async fn pre_answer(shared: &Shared, b: &Behaviour) -> bool {
    match b {
        Behaviour::BlackHole => {
            shared.cancel.cancelled().await;
            false
        }
        Behaviour::Slow { delay } => {
            tokio::select! {
                _ = tokio::time::sleep(*delay) => true,
                _ = shared.cancel.cancelled() => false,
            }
        }
        _ => true,
    }
}

fn shutting_down() -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        "mock upstream shutting down",
    )
        .into_response()
}

fn parse_body(bytes: &Bytes) -> Value {
    serde_json::from_slice(bytes).unwrap_or(Value::Null)
}

async fn chat(State(shared): State<Arc<Shared>>, headers: HeaderMap, bytes: Bytes) -> Response {
    let body = parse_body(&bytes);
    let behaviour = shared.admit("/v1/chat/completions", &body, &headers);
    let guard = InFlight::new(&shared);
    if !pre_answer(&shared, &behaviour).await {
        return shutting_down();
    }
    if let Some(resp) = status_failure(&behaviour) {
        return resp;
    }
    if let Some(resp) = refused_format(&shared, &body) {
        return resp;
    }
    let model = format!("{}-mock", body["model"].as_str().unwrap_or("unknown"));
    let mut script = Script::of(&behaviour);
    if matches!(behaviour, Behaviour::Healthy { .. }) {
        script.answer_the_request(&body);
    }
    let abrupt = matches!(script.ending, Ending::Abrupt { .. });
    if body["stream"].as_bool().unwrap_or(false) {
        let include_usage = body["stream_options"]["include_usage"]
            .as_bool()
            .unwrap_or(false);
        body_response(
            guard,
            shared.cancel.clone(),
            script.frames(&model, include_usage),
            BodyKind::EventStream,
            abrupt,
        )
    } else {
        if !script.ttft.is_zero() {
            tokio::select! {
                _ = tokio::time::sleep(script.ttft) => {},
                _ = shared.cancel.cancelled() => return shutting_down(),
            }
        }
        let text = Bytes::from(script.completion(&model));
        if abrupt {
            return body_response(
                guard,
                shared.cancel.clone(),
                vec![(Duration::ZERO, text)],
                BodyKind::Json,
                true,
            );
        }
        drop(guard);
        (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            text,
        )
            .into_response()
    }
}

/// The deltas and ending of a chat answer, independent of streaming.
struct Script {
    ttft: Duration,
    inter_token: Duration,
    reasoning: Vec<String>,
    content: Vec<String>,
    usage: Option<Value>,
    ending: Ending,
    /// Tool calls `(name, arguments)` (no content then).
    tool_calls: Vec<(String, String)>,
    finish_reason: &'static str,
    /// The request asked for `logprobs`: every content delta carries them.
    logprobs: bool,
    /// The request's `n`: choices 1.. repeat the content with a `[i] ` prefix.
    n: u32,
    /// Exact chunks and body ([`Behaviour::Raw`]).
    raw: Option<(Vec<Value>, Value)>,
}

#[derive(PartialEq)]
enum Ending {
    /// finish chunk, usage, `[DONE]`.
    Done,
    /// EOF after the deltas (usage chunk first when `with_usage`).
    Truncated { with_usage: bool },
    /// Role chunk only, then EOF.
    EarlyEof,
    /// Like `Truncated` (only the role chunk without `content`), then the socket is dropped
    /// mid-body.
    Abrupt { content: bool, with_usage: bool },
    /// A broken frame after the first delta, then `[DONE]`.
    Malformed,
    /// An error frame after the first delta, then EOF.
    InBandError,
}

fn split_even(text: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    if chars.is_empty() {
        return Vec::new();
    }
    let n = n.clamp(1, chars.len());
    let per = chars.len().div_ceil(n);
    chars.chunks(per).map(|c| c.iter().collect()).collect()
}

impl Script {
    fn of(b: &Behaviour) -> Script {
        let mut s = Script {
            ttft: Duration::ZERO,
            inter_token: Duration::ZERO,
            reasoning: Vec::new(),
            content: split_even(MOCK_CONTENT, 4),
            usage: None,
            ending: Ending::Done,
            tool_calls: Vec::new(),
            finish_reason: "stop",
            logprobs: false,
            n: 1,
            raw: None,
        };
        match b {
            Behaviour::Healthy {
                ttft,
                inter_token,
                chunks,
                content,
            } => {
                s.ttft = *ttft;
                s.inter_token = *inter_token;
                s.content = split_even(content, *chunks);
            }
            Behaviour::TruncatedStream { with_usage } => {
                s.ending = Ending::Truncated {
                    with_usage: *with_usage,
                }
            }
            Behaviour::EarlyEof => s.ending = Ending::EarlyEof,
            Behaviour::AbruptClose {
                content,
                with_usage,
            } => {
                s.ending = Ending::Abrupt {
                    content: *content,
                    with_usage: *with_usage,
                }
            }
            Behaviour::MalformedFrame => s.ending = Ending::Malformed,
            Behaviour::EmptyCompletion => s.content.clear(),
            Behaviour::Reasoning => s.reasoning = split_even(MOCK_THINKING, 3),
            Behaviour::ReasoningPaced { ttft, inter_token } => {
                s.reasoning = split_even(MOCK_THINKING, 3);
                s.ttft = *ttft;
                s.inter_token = *inter_token;
            }
            Behaviour::ThinkTags => {
                // Tags deliberately split across deltas.
                let mut c = vec![
                    "<thi".to_string(),
                    format!("nk>{MOCK_THINKING}</th"),
                    "ink>\n\n".to_string(),
                ];
                c.extend(split_even(MOCK_CONTENT, 4));
                s.content = c;
            }
            Behaviour::InBandError => s.ending = Ending::InBandError,
            Behaviour::ToolCalls(calls) => {
                s.content.clear();
                s.tool_calls = calls.clone();
                s.finish_reason = "tool_calls";
            }
            Behaviour::Length => {
                let half: String = MOCK_CONTENT
                    .chars()
                    .take(MOCK_CONTENT.chars().count() / 2)
                    .collect();
                s.content = split_even(&half, 2);
                s.finish_reason = "length";
            }
            Behaviour::Raw { chunks, completion } => {
                s.raw = Some((chunks.clone(), completion.clone()));
            }
            Behaviour::CutAfter { deltas, answer } => {
                s = Script::of(answer);
                s.content.truncate(*deltas);
                s.ending = Ending::Abrupt {
                    content: true,
                    with_usage: false,
                };
                return s;
            }
            _ => {}
        }
        let completion = (s.reasoning.len() + s.content.len() + s.tool_calls.len() * 4) as u64;
        s.usage = match b {
            Behaviour::NoUsage => None,
            Behaviour::UsageDetails => Some(json!({
                "prompt_tokens": MOCK_PROMPT_TOKENS,
                "completion_tokens": completion + MOCK_REASONING_TOKENS,
                "total_tokens": MOCK_PROMPT_TOKENS + completion + MOCK_REASONING_TOKENS,
                "prompt_tokens_details": {"cached_tokens": MOCK_CACHED_TOKENS},
                "completion_tokens_details": {"reasoning_tokens": MOCK_REASONING_TOKENS}
            })),
            _ => Some(json!({
                "prompt_tokens": MOCK_PROMPT_TOKENS,
                "completion_tokens": completion,
                "total_tokens": MOCK_PROMPT_TOKENS + completion
            })),
        };
        s
    }

    /// The SSE frames with the delay before each.
    fn frames(&self, model: &str, include_usage: bool) -> Vec<(Duration, Bytes)> {
        if let Some((chunks, _)) = &self.raw {
            let mut out: Vec<_> = chunks.iter().map(|c| (Duration::ZERO, frame(c))).collect();
            out.push((Duration::ZERO, Bytes::from_static(b"data: [DONE]\n\n")));
            return out;
        }
        let chunk_of = |index: u32, delta: Value, finish: Value, logprobs: Value| {
            frame(&json!({
                "id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 0, "model": model,
                "system_fingerprint": MOCK_FINGERPRINT,
                "choices": [{"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish}]
            }))
        };
        let chunk = |delta: Value, finish: Value| chunk_of(0, delta, finish, Value::Null);
        let usage_frame = |usage: &Value| {
            frame(&json!({
                "id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 0, "model": model,
                "choices": [], "usage": usage
            }))
        };
        // OpenAI opens a tool-call answer with `content: null`, a text answer with `""`.
        let opening = if self.tool_calls.is_empty() {
            json!("")
        } else {
            Value::Null
        };
        let mut out = vec![(
            Duration::ZERO,
            chunk(
                json!({"role": "assistant", "content": opening}),
                Value::Null,
            ),
        )];
        if matches!(
            self.ending,
            Ending::EarlyEof | Ending::Abrupt { content: false, .. }
        ) {
            return out;
        }
        let mut first = true;
        let mut delay = || {
            let d = if first { self.ttft } else { self.inter_token };
            first = false;
            d
        };
        for r in &self.reasoning {
            out.push((delay(), chunk(json!({"reasoning_content": r}), Value::Null)));
        }
        for (i, (name, arguments)) in self.tool_calls.iter().enumerate() {
            let first = json!({"tool_calls": [{"index": i, "id": format!("call_{i}"), "type": "function",
                "function": {"name": name, "arguments": ""}}]});
            out.push((delay(), chunk(first, Value::Null)));
            for piece in split_even(arguments, 3) {
                let more = json!({"tool_calls": [{"index": i, "function": {"arguments": piece}}]});
                out.push((delay(), chunk(more, Value::Null)));
            }
        }
        for (i, c) in self.content.iter().enumerate() {
            let d = delay();
            for index in 0..self.n {
                let text = choice_text(index, i, c);
                let logprobs = self.logprobs_of(&text);
                out.push((
                    d,
                    chunk_of(index, json!({"content": text}), Value::Null, logprobs),
                ));
            }
            if i == 0 {
                match self.ending {
                    Ending::Malformed => {
                        out.push((
                            Duration::ZERO,
                            Bytes::from_static(
                                b"data: {\"choices\":[{\"delta\":{\"content\":\"x\"\n\n",
                            ),
                        ));
                        out.push((Duration::ZERO, Bytes::from_static(b"data: [DONE]\n\n")));
                        return out;
                    }
                    Ending::InBandError => {
                        out.push((
                            Duration::ZERO,
                            frame(&json!({"error": {"message": "The server is overloaded", "type": "server_error", "code": "overloaded"}})),
                        ));
                        return out;
                    }
                    _ => {}
                }
            }
        }
        match self.ending {
            Ending::Truncated { with_usage } | Ending::Abrupt { with_usage, .. } => {
                if let (true, true, Some(u)) = (with_usage, include_usage, &self.usage) {
                    out.push((Duration::ZERO, usage_frame(u)));
                }
            }
            _ => {
                for index in 0..self.n {
                    let finish = json!(self.finish_reason);
                    out.push((
                        Duration::ZERO,
                        chunk_of(index, json!({}), finish, Value::Null),
                    ));
                }
                if let (true, Some(u)) = (include_usage, &self.usage) {
                    out.push((Duration::ZERO, usage_frame(u)));
                }
                out.push((Duration::ZERO, Bytes::from_static(b"data: [DONE]\n\n")));
            }
        }
        out
    }

    /// The non-streaming answer.
    /// The non-streaming body.
    fn completion(&self, model: &str) -> String {
        match self.ending {
            Ending::EarlyEof => String::new(),
            Ending::InBandError => json!({"error": {"message": "The server is overloaded", "type": "server_error", "code": "overloaded"}}).to_string(),
            _ if self.raw.is_some() => self.raw.as_ref().map(|(_, c)| c.to_string()).unwrap_or_default(),
            _ => {
                let choices: Vec<Value> = (0..self.n).map(|index| self.choice(index)).collect();
                let mut v = json!({
                    "id": "chatcmpl-mock", "object": "chat.completion", "created": 0, "model": model,
                    "system_fingerprint": MOCK_FINGERPRINT, "choices": choices
                });
                if let Some(u) = &self.usage {
                    v["usage"] = u.clone();
                }
                let text = v.to_string();
                match self.ending {
                    Ending::Truncated { .. } | Ending::Abrupt { .. } => {
                        text[..text.len() / 2].to_string()
                    }
                    Ending::Malformed => text.replacen('{', "{{", 2),
                    _ => text,
                }
            }
        }
    }
}

impl Script {
    /// A healthy answer follows what the request asks, the way an OpenAI-compatible server
    /// does:
    /// - `tools` offered and the conversation ends with a user-side turn: the model calls the
    ///   first tool (the first two when there are several and `parallel_tool_calls` is not
    ///   `false`) with `{"query": <the last message's text>}`;
    /// - the conversation ends with a `tool` message: the content is `tool said: <its text>`;
    /// - `max_tokens` / `max_completion_tokens` below the number of content deltas: the answer
    ///   is cut there with `finish_reason: "length"`;
    /// - `logprobs: true`: every content delta carries logprobs; `n`: that many choices (≤ 8).
    fn answer_the_request(&mut self, body: &Value) {
        self.logprobs = body["logprobs"].as_bool() == Some(true);
        self.n = body["n"]
            .as_u64()
            .map_or(1, |n| u32::try_from(n.clamp(1, 8)).unwrap_or(1));
        let messages = body["messages"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        let last = messages.last();
        let text_of = |m: &Value| match &m["content"] {
            Value::String(s) => s.clone(),
            Value::Array(parts) => parts
                .iter()
                .filter_map(|p| p["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n"),
            _ => String::new(),
        };
        // A prefill (DeepSeek's chat prefix completion, Mistral): a final assistant message with
        // `"prefix": true` is the beginning of the answer, and the answer is only its
        // continuation — the rest of the text when the prefix begins it — with the prefix billed
        // as input.
        if let Some(prefix) = last
            .filter(|m| m["role"] == "assistant" && m["prefix"] == true)
            .map(text_of)
        {
            self.continue_after(&prefix);
            return;
        }
        let tools = body["tools"].as_array().map(Vec::as_slice).unwrap_or(&[]);
        match last.and_then(|m| m["role"].as_str()) {
            Some("tool") => {
                let said = last.map(text_of).unwrap_or_default();
                self.content = split_even(&format!("tool said: {said}"), 4);
            }
            Some(_) if !tools.is_empty() && body["tool_choice"] != "none" => {
                let parallel = body["parallel_tool_calls"] != false;
                let take = if parallel { 2 } else { 1 };
                let query = json!({"query": last.map(text_of).unwrap_or_default()}).to_string();
                self.tool_calls = tools
                    .iter()
                    .take(take)
                    .map(|t| {
                        let name = t["function"]["name"].as_str().unwrap_or("tool");
                        (name.to_string(), query.clone())
                    })
                    .collect();
                self.content.clear();
                self.finish_reason = "tool_calls";
            }
            _ => {}
        }
        let limit = body["max_completion_tokens"]
            .as_u64()
            .or_else(|| body["max_tokens"].as_u64());
        if let Some(limit) = limit.and_then(|l| usize::try_from(l).ok()) {
            if limit < self.content.len() {
                self.content.truncate(limit);
                self.finish_reason = "length";
            }
        }
    }

    /// Answer the continuation of `prefix`: the pieces it covers are dropped (the rest of a
    /// piece it ends inside is kept), and its words are billed as prompt tokens.
    fn continue_after(&mut self, prefix: &str) {
        let whole = self.content.concat();
        if let Some(rest) = whole.strip_prefix(prefix) {
            let mut covered = 0;
            let mut pieces = Vec::new();
            for piece in &self.content {
                let start = covered;
                covered += piece.len();
                if covered > prefix.len() {
                    pieces.push(whole[start.max(prefix.len())..covered].to_string());
                }
            }
            debug_assert_eq!(pieces.concat(), rest);
            self.content = pieces;
        }
        if let Some(usage) = self.usage.as_mut() {
            let prompt = MOCK_PROMPT_TOKENS + prefix.split_whitespace().count() as u64;
            let completion = self.content.len() as u64;
            usage["prompt_tokens"] = json!(prompt);
            usage["completion_tokens"] = json!(completion);
            usage["total_tokens"] = json!(prompt + completion);
        }
    }

    /// One whole choice of the non-streaming answer.
    fn choice(&self, index: u32) -> Value {
        let text: String = self
            .content
            .iter()
            .enumerate()
            .map(|(i, c)| choice_text(index, i, c))
            .collect();
        let mut message = json!({"role": "assistant", "content": text, "refusal": null});
        if !self.reasoning.is_empty() {
            message["reasoning_content"] = json!(self.reasoning.concat());
        }
        if !self.tool_calls.is_empty() {
            message["content"] = Value::Null;
            message["tool_calls"] = self
                .tool_calls
                .iter()
                .enumerate()
                .map(|(i, (name, arguments))| {
                    json!({"id": format!("call_{i}"), "type": "function",
                        "function": {"name": name, "arguments": arguments}})
                })
                .collect();
        }
        let logprobs = self.logprobs_of(&text);
        json!({"index": index, "message": message, "logprobs": logprobs,
            "finish_reason": self.finish_reason})
    }

    /// The `logprobs` object of a piece of text when the request asked for them: one entry per
    /// character (so streamed pieces join into exactly the whole answer's list), a fixed
    /// logprob.
    fn logprobs_of(&self, text: &str) -> Value {
        if !self.logprobs {
            return Value::Null;
        }
        let tokens: Vec<Value> = text
            .chars()
            .map(|c| {
                let t = c.to_string();
                json!({"token": t, "logprob": MOCK_LOGPROB, "bytes": t.as_bytes(), "top_logprobs": []})
            })
            .collect();
        json!({"content": tokens, "refusal": null})
    }
}

/// The text of choice `index`'s piece `piece`: choices after the first are told apart by a
/// `[index] ` prefix on their first piece.
fn choice_text(index: u32, piece: usize, text: &str) -> String {
    if index > 0 && piece == 0 {
        format!("[{index}] {text}")
    } else {
        text.to_string()
    }
}

fn frame(v: &Value) -> Bytes {
    let mut s = String::with_capacity(128);
    s.push_str("data: ");
    s.push_str(&v.to_string());
    s.push_str("\n\n");
    Bytes::from(s)
}

/// Largest body chunk the mock hands to the server at once: consecutive frames without delay are
/// merged up to this size. Bounded so a large answer still flows chunk by chunk under TCP
/// backpressure (one huge chunk would be taken whole, and the body would end at once).
const MAX_BATCH_BYTES: usize = 64 * 1024;

/// What a streamed body carries.
#[derive(Clone, Copy)]
enum BodyKind {
    EventStream,
    Json,
}

/// Pause before an abrupt close, so the chunks already handed to the server reach the socket
/// first (the server drops its unflushed buffer with the connection).
const ABRUPT_CLOSE_PAUSE: Duration = Duration::from_millis(30);

/// A chunked body: frames after their delays; consecutive frames without delay go out together
/// in chunks of up to [`MAX_BATCH_BYTES`]. The in-flight guard lives with the body, so it drops
/// when the client goes away or the last chunk has been taken. With `abrupt`, the body then
/// fails: the server drops the connection without the chunked encoding's final chunk.
fn body_response(
    guard: InFlight,
    cancel: CancellationToken,
    frames: Vec<(Duration, Bytes)>,
    kind: BodyKind,
    abrupt: bool,
) -> Response {
    let mut batches: Vec<(Duration, Vec<u8>)> = Vec::new();
    for (delay, bytes) in frames {
        match batches.last_mut() {
            Some((_, buf)) if delay.is_zero() && buf.len() < MAX_BATCH_BYTES => {
                buf.extend_from_slice(&bytes)
            }
            _ => batches.push((delay, bytes.to_vec())),
        }
    }
    let stream = futures::stream::unfold(
        (batches.into_iter(), guard, cancel, abrupt),
        |(mut it, guard, cancel, abrupt)| async move {
            let Some((delay, bytes)) = it.next() else {
                if !abrupt {
                    return None;
                }
                tokio::select! {
                    _ = tokio::time::sleep(ABRUPT_CLOSE_PAUSE) => {},
                    _ = cancel.cancelled() => return None,
                }
                let cut = io::Error::new(io::ErrorKind::ConnectionAborted, "mock: abrupt close");
                return Some((Err(cut), (it, guard, cancel, false)));
            };
            if !delay.is_zero() {
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {},
                    _ = cancel.cancelled() => return None,
                }
            }
            Some((Ok(Bytes::from(bytes)), (it, guard, cancel, abrupt)))
        },
    );
    let builder = Response::builder().status(StatusCode::OK);
    let builder = match kind {
        BodyKind::EventStream => builder
            .header(header::CONTENT_TYPE, "text/event-stream")
            .header(header::CACHE_CONTROL, "no-cache"),
        BodyKind::Json => builder.header(header::CONTENT_TYPE, "application/json"),
    };
    builder
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// The deterministic vector the mock serves for `text` (components in `[-1, 1]`).
///
/// ```
/// use polygateway::testkit::mock_embedding;
/// assert_eq!(mock_embedding("a", 4), mock_embedding("a", 4));
/// assert_ne!(mock_embedding("a", 4), mock_embedding("b", 4));
/// ```
pub fn mock_embedding(text: &str, dim: usize) -> Vec<f32> {
    // FNV-1a of the text seeds a xorshift sequence.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    let mut x = h | 1;
    (0..dim)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 40) as f64 / (1u64 << 24) as f64 * 2.0 - 1.0) as f32
        })
        .collect()
}

async fn embeddings(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    bytes: Bytes,
) -> Response {
    let body = parse_body(&bytes);
    let behaviour = shared.admit("/v1/embeddings", &body, &headers);
    let _guard = InFlight::new(&shared);
    if !pre_answer(&shared, &behaviour).await {
        return shutting_down();
    }
    if let Some(resp) = status_failure(&behaviour) {
        return resp;
    }
    let inputs: Vec<String> = match &body["input"] {
        Value::String(s) => vec![s.clone()],
        Value::Array(a) => a
            .iter()
            .map(|v| v.as_str().unwrap_or_default().to_string())
            .collect(),
        _ => {
            return (
                StatusCode::BAD_REQUEST,
                axum::Json(json!({"error": {"message": "'input' is required", "type": "invalid_request_error"}})),
            )
                .into_response()
        }
    };
    let dim = shared.embedding_dim.load(Ordering::Relaxed);
    let mut data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(i, t)| json!({"object": "embedding", "index": i, "embedding": mock_embedding(t, dim)}))
        .collect();
    // Answer in reverse order: clients must sort by `index`.
    data.reverse();
    if behaviour == Behaviour::EmbeddingCountMismatch {
        data.pop();
    }
    let tokens: u64 = inputs
        .iter()
        .map(|t| (t.chars().count() as u64 / 4).max(1))
        .sum();
    let mut answer = json!({
        "object": "list",
        "model": format!("{}-mock", body["model"].as_str().unwrap_or("unknown")),
        "data": data,
    });
    if behaviour != Behaviour::NoUsage {
        answer["usage"] = json!({"prompt_tokens": tokens, "total_tokens": tokens});
    }
    axum::Json(answer).into_response()
}

async fn models(State(shared): State<Arc<Shared>>) -> Response {
    {
        let mut counts = lock(&shared.counts);
        counts.total += 1;
        counts.models += 1;
    }
    axum::Json(json!({"object": "list", "data": [{"id": "test-model", "object": "model", "owned_by": "mock"}]}))
        .into_response()
}

/// `GET /mock/last_request`: the body of the last request the mock received (`null` before
/// any), so an out-of-process test (the OpenAI SDK pass) checks what reached the upstream.
async fn last_request(State(shared): State<Arc<Shared>>) -> Response {
    let last = lock(&shared.recorded).back().map(|r| r.body.clone());
    axum::Json(last.unwrap_or(Value::Null)).into_response()
}

/// A TCP listener that counts open connections.
struct CountingListener {
    inner: TcpListener,
    shared: Arc<Shared>,
}

impl axum::serve::Listener for CountingListener {
    type Io = CountedStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.inner.accept().await {
                Ok((stream, addr)) => {
                    let _ = stream.set_nodelay(true);
                    self.shared.connections.fetch_add(1, Ordering::SeqCst);
                    return (
                        CountedStream {
                            inner: stream,
                            shared: self.shared.clone(),
                            closing: Arc::new(AtomicBool::new(false)),
                        },
                        addr,
                    );
                }
                // Out of file descriptors and the like: back off instead of spinning.
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// A TCP stream that decrements the open-connection count when closed.
struct CountedStream {
    inner: TcpStream,
    shared: Arc<Shared>,
    /// Set after an answer the connection must not outlive: reads then see end-of-stream.
    closing: Arc<AtomicBool>,
}

impl Drop for CountedStream {
    fn drop(&mut self) {
        self.shared.connections.fetch_sub(1, Ordering::SeqCst);
    }
}

impl AsyncRead for CountedStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.closing.load(Ordering::SeqCst) {
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for CountedStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}
