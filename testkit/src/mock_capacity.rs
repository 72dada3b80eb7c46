//! Mock upstreams for the three capacity regimes users meet (`examples/capacity.rs` and its
//! bounded test): one that never refuses, one that rate-limits per second (429 with
//! `Retry-After`, optionally OpenAI's `x-ratelimit-*-requests` headers), and a self-hosted-style
//! server that serves a fixed number at once and queues the rest. Each answers
//! `POST /v1/chat/completions` with a fixed completion (SSE when the body asks for
//! `"stream":true`, JSON otherwise) and records what it saw.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

use axum::extract::State;
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

const STREAMED: &str = concat!(
    "data: {\"id\":\"chatcmpl-capacity\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"test-model\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"},\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"chatcmpl-capacity\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"test-model\",\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":1,\"total_tokens\":6}}\n\n",
    "data: [DONE]\n\n",
);
const ANSWER: &str = r#"{"id":"chatcmpl-capacity","object":"chat.completion","created":0,"model":"test-model","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}"#;

/// How a capacity mock treats load.
///
/// ```
/// use std::time::Duration;
/// use polygateway_testkit::mock_capacity::Regime;
/// let queueing = Regime::Queueing { slots: 64, service: Duration::from_millis(200) };
/// assert_eq!(queueing.service(), Duration::from_millis(200));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Regime {
    /// Every request takes `service`; nothing is refused.
    Unlimited {
        /// Time per request.
        service: Duration,
    },
    /// A token bucket of `per_s` requests per second (full at start, `per_s` deep): above it,
    /// an immediate 429 with `Retry-After: 1`. `headers` adds `x-ratelimit-limit-requests`,
    /// `x-ratelimit-remaining-requests` and `x-ratelimit-reset-requests` to every answer, as
    /// OpenAI does.
    RateLimited {
        /// Admitted requests per second.
        per_s: u32,
        /// Time per admitted request.
        service: Duration,
        /// Send the rate-limit headers.
        headers: bool,
    },
    /// `slots` requests served at once in `service` each; the rest wait in FIFO order.
    Queueing {
        /// Requests served at once.
        slots: usize,
        /// Time per request once served.
        service: Duration,
    },
}

impl Regime {
    /// Time per served request.
    ///
    /// ```
    /// use std::time::Duration;
    /// use polygateway_testkit::mock_capacity::Regime;
    /// let r = Regime::Unlimited { service: Duration::from_millis(200) };
    /// assert_eq!(r.service().as_millis(), 200);
    /// ```
    pub fn service(&self) -> Duration {
        match *self {
            Regime::Unlimited { service }
            | Regime::RateLimited { service, .. }
            | Regime::Queueing { service, .. } => service,
        }
    }
}

/// What a capacity mock saw.
///
/// ```
/// use polygateway_testkit::mock_capacity::CapacityStats;
/// let stats = CapacityStats::default();
/// assert_eq!((stats.served, stats.refused), (0, 0));
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CapacityStats {
    /// Requests answered 200.
    pub served: u64,
    /// Requests answered 429.
    pub refused: u64,
    /// Arrival-to-answer time of each served request, as the server saw it.
    pub served_latencies: Vec<Duration>,
}

/// The content of a request's first message (what a batch benchmark's input line says), when
/// the body is chat JSON.
fn first_prompt(body: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    value["messages"][0]["content"].as_str().map(str::to_string)
}

struct Bucket {
    tokens: f64,
    at: Instant,
}

struct Shared {
    regime: Regime,
    bucket: Mutex<Bucket>,
    slots: Semaphore,
    served: AtomicU64,
    refused: AtomicU64,
    latencies: Mutex<Vec<Duration>>,
    /// Requests that arrived, by the content of their first message (served or not).
    prompts: Mutex<HashMap<String, u32>>,
}

/// A running capacity mock on 127.0.0.1; stops when dropped.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::time::Duration;
/// use polygateway_testkit::mock_capacity::{CapacityMock, Regime};
/// let mock = CapacityMock::start(Regime::RateLimited {
///     per_s: 1,
///     service: Duration::from_millis(1),
///     headers: true,
/// })
/// .await;
/// let client = reqwest::Client::builder().no_proxy().build().unwrap();
/// let url = format!("{}/chat/completions", mock.base_url());
/// let first = client.post(&url).body("{}").send().await.unwrap();
/// assert_eq!(first.status(), 200);
/// assert_eq!(first.headers()["x-ratelimit-remaining-requests"], "0");
/// // The bucket holds one request per second: the second is refused at once.
/// let second = client.post(&url).body("{}").send().await.unwrap();
/// assert_eq!(second.status(), 429);
/// assert_eq!(second.headers()["retry-after"], "1");
/// let stats = mock.stats();
/// assert_eq!((stats.served, stats.refused), (1, 1));
/// # }
/// ```
pub struct CapacityMock {
    addr: SocketAddr,
    shared: Arc<Shared>,
    cancel: CancellationToken,
}

impl CapacityMock {
    /// Start a mock of `regime` on an ephemeral loopback port.
    ///
    /// # Panics
    /// When no loopback port can be bound (a test environment defect).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use std::time::Duration;
    /// use polygateway_testkit::mock_capacity::{CapacityMock, Regime};
    /// let mock = CapacityMock::start(Regime::Unlimited { service: Duration::ZERO }).await;
    /// assert!(mock.base_url().ends_with("/v1"));
    /// # }
    /// ```
    pub async fn start(regime: Regime) -> CapacityMock {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .expect("bind 127.0.0.1:0 for the capacity mock");
        let addr = listener.local_addr().expect("capacity mock local addr");
        let (per_s, slots) = match regime {
            Regime::RateLimited { per_s, .. } => (f64::from(per_s), Semaphore::MAX_PERMITS),
            Regime::Queueing { slots, .. } => (0.0, slots.max(1)),
            Regime::Unlimited { .. } => (0.0, Semaphore::MAX_PERMITS),
        };
        let shared = Arc::new(Shared {
            regime,
            bucket: Mutex::new(Bucket {
                tokens: per_s,
                at: Instant::now(),
            }),
            slots: Semaphore::new(slots),
            served: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            latencies: Mutex::new(Vec::new()),
            prompts: Mutex::new(HashMap::new()),
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(answer))
            .with_state(Arc::clone(&shared));
        let cancel = CancellationToken::new();
        let stop = cancel.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(stop.cancelled_owned())
                .await;
        });
        CapacityMock {
            addr,
            shared,
            cancel,
        }
    }

    /// `http://127.0.0.1:<port>/v1`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use std::time::Duration;
    /// use polygateway_testkit::mock_capacity::{CapacityMock, Regime};
    /// let mock = CapacityMock::start(Regime::Unlimited { service: Duration::ZERO }).await;
    /// assert!(mock.base_url().starts_with("http://127.0.0.1:"));
    /// # }
    /// ```
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// What it saw so far.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use std::time::Duration;
    /// use polygateway_testkit::mock_capacity::{CapacityMock, Regime};
    /// let mock = CapacityMock::start(Regime::Queueing { slots: 1, service: Duration::from_millis(200) }).await;
    /// let client = reqwest::Client::builder().no_proxy().build().unwrap();
    /// let url = format!("{}/chat/completions", mock.base_url());
    /// // Two at once on one slot: the second waits for the first (whatever it arrived up to
    /// // 150 ms after it, on a loaded machine).
    /// let (a, b) = tokio::join!(client.post(&url).send(), client.post(&url).send());
    /// assert!(a.unwrap().status().is_success() && b.unwrap().status().is_success());
    /// let stats = mock.stats();
    /// let slowest = stats.served_latencies.iter().max().unwrap();
    /// assert!(*slowest >= Duration::from_millis(250));
    /// # }
    /// ```
    pub fn stats(&self) -> CapacityStats {
        CapacityStats {
            served: self.shared.served.load(Ordering::Relaxed),
            refused: self.shared.refused.load(Ordering::Relaxed),
            served_latencies: self
                .shared
                .latencies
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        }
    }

    /// Requests that arrived so far, by the content of their first message: how many times each
    /// prompt was sent (a batch benchmark checks no journalled item was sent again).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use std::time::Duration;
    /// use polygateway_testkit::mock_capacity::{CapacityMock, Regime};
    /// let mock = CapacityMock::start(Regime::Unlimited { service: Duration::ZERO }).await;
    /// let client = reqwest::Client::builder().no_proxy().build().unwrap();
    /// let url = format!("{}/chat/completions", mock.base_url());
    /// let body = r#"{"messages": [{"role": "user", "content": "item 7"}]}"#;
    /// for _ in 0..2 {
    ///     client.post(&url).body(body).send().await.unwrap();
    /// }
    /// assert_eq!(mock.prompts()["item 7"], 2);
    /// # }
    /// ```
    pub fn prompts(&self) -> HashMap<String, u32> {
        self.shared
            .prompts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Drop for CapacityMock {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// Take one token from the bucket (`false` when empty). Also returns the tokens left and the time
/// until the bucket is full again (what OpenAI's headers report).
fn take_token(shared: &Shared, per_s: f64, now: Instant) -> (bool, f64, Duration) {
    let mut bucket = shared.bucket.lock().unwrap_or_else(|e| e.into_inner());
    let refill = now.saturating_duration_since(bucket.at).as_secs_f64() * per_s;
    bucket.tokens = (bucket.tokens + refill).min(per_s);
    bucket.at = now;
    let admitted = bucket.tokens >= 1.0;
    if admitted {
        bucket.tokens -= 1.0;
    }
    let reset = Duration::from_secs_f64((per_s - bucket.tokens).max(0.0) / per_s);
    (admitted, bucket.tokens, reset)
}

async fn answer(State(shared): State<Arc<Shared>>, body: axum::body::Bytes) -> Response {
    let arrived = Instant::now();
    if let Some(prompt) = first_prompt(&body) {
        *shared
            .prompts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(prompt)
            .or_default() += 1;
    }
    let streamed = body.windows(13).any(|w| w == b"\"stream\":true");
    let mut headers = Vec::new();
    match shared.regime {
        Regime::Unlimited { service } => tokio::time::sleep(service).await,
        Regime::RateLimited {
            per_s,
            service,
            headers: send_headers,
        } => {
            let (admitted, left, reset) = take_token(&shared, f64::from(per_s), arrived);
            if send_headers {
                headers = vec![
                    ("x-ratelimit-limit-requests", per_s.to_string()),
                    ("x-ratelimit-remaining-requests", (left as u64).to_string()),
                    (
                        "x-ratelimit-reset-requests",
                        format!("{}ms", reset.as_millis()),
                    ),
                ];
            }
            if !admitted {
                shared.refused.fetch_add(1, Ordering::Relaxed);
                headers.push(("retry-after", "1".to_string()));
                let body = r#"{"error":{"message":"Rate limit reached for requests","type":"requests","code":"rate_limit_exceeded"}}"#;
                return with_headers((StatusCode::TOO_MANY_REQUESTS, body), &headers);
            }
            tokio::time::sleep(service).await;
        }
        Regime::Queueing { service, .. } => {
            let _slot = shared.slots.acquire().await;
            tokio::time::sleep(service).await;
        }
    }
    shared.served.fetch_add(1, Ordering::Relaxed);
    shared
        .latencies
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(arrived.elapsed());
    if streamed {
        headers.push(("content-type", "text/event-stream".to_string()));
        with_headers((StatusCode::OK, STREAMED), &headers)
    } else {
        headers.push(("content-type", "application/json".to_string()));
        with_headers((StatusCode::OK, ANSWER), &headers)
    }
}

fn with_headers(base: (StatusCode, &'static str), headers: &[(&'static str, String)]) -> Response {
    let mut response = base.into_response();
    for (name, value) in headers {
        if let Ok(value) = HeaderValue::from_str(value) {
            response
                .headers_mut()
                .insert(HeaderName::from_static(name), value);
        }
    }
    response
}
