//! A mock MonkeyOCR server (axum, `127.0.0.1`, random port) with fault injection, for tests,
//! examples and soaks of the OCR path.
//!
//! It speaks the wire format of `docs/monkeyocr.md`: `GET /health`,
//! `POST /ocr/text`, `POST /parse` → relative (or absolute) `download_url`, `GET /static/{name}`
//! serving a real ZIP built in memory. Uploads are validated like the real server: a missing
//! `file` part is FastAPI's 422, and the filename's extension decides the type (a PNG sent as
//! `image.jpg` fails). Switch behaviours at runtime with [`MockOcr::set_mode`]; see [`OcrFault`].
//!
//! Not a MonkeyOCR emulator: it does no OCR and always answers the same fixture
//! ([`fixture`]).
//!
//! ```
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! use polygateway_testkit::mock_ocr::{MockOcr, OcrEndpoint, OcrFault};
//! let mock = MockOcr::start(OcrFault::None).await;
//! let health = reqwest::get(format!("{}/health", mock.base_url())).await.unwrap();
//! assert_eq!(health.status(), 200);
//! assert_eq!(mock.requests(OcrEndpoint::Health), 1);
//! # });
//! ```

pub mod fixture;

mod fault;
mod multipart;

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use fault::OcrFault;

use fault::ModeState;
use multipart::FormPart;

/// Result files kept for download; older ones are forgotten (a soak must not grow without bound).
const MAX_STORED_FILES: usize = 1024;
/// Largest accepted upload.
const MAX_UPLOAD_BYTES: usize = 64 * 1024 * 1024;

/// An endpoint of the mock, for request counters.
///
/// ```
/// use polygateway_testkit::mock_ocr::{MockOcr, OcrEndpoint, OcrFault};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let mock = MockOcr::start(OcrFault::None).await;
/// reqwest::get(format!("{}/health", mock.base_url())).await.unwrap();
/// assert_eq!(mock.requests(OcrEndpoint::Health), 1);
/// assert_eq!(mock.requests(OcrEndpoint::Parse), 0);
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OcrEndpoint {
    /// `GET /health`.
    Health,
    /// `POST /ocr/text`.
    OcrText,
    /// `POST /parse`.
    Parse,
    /// `GET /static/{name}`.
    Static,
}

impl OcrEndpoint {
    fn slot(self) -> usize {
        match self {
            OcrEndpoint::Health => 0,
            OcrEndpoint::OcrText => 1,
            OcrEndpoint::Parse => 2,
            OcrEndpoint::Static => 3,
        }
    }
}

/// What the mock saw of an upload.
///
/// ```
/// use polygateway_testkit::mock_ocr::{MockOcr, OcrEndpoint, OcrFault, UploadSeen};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// # async fn upload(url: String, name: &str, bytes: &[u8]) -> reqwest::Response {
/// #     let part = reqwest::multipart::Part::bytes(bytes.to_vec()).file_name(name.to_string());
/// #     let form = reqwest::multipart::Form::new().part("file", part.mime_str("image/png").unwrap());
/// #     reqwest::Client::new().post(url).multipart(form).send().await.unwrap()
/// # }
/// # const PNG: &[u8] = b"\x89PNG\r\n\x1a\n page";
/// let mock = MockOcr::start(OcrFault::None).await;
/// upload(format!("{}/ocr/text", mock.base_url()), "scan.png", PNG).await;
/// assert_eq!(
///     mock.last_upload(),
///     Some(UploadSeen {
///         endpoint: OcrEndpoint::OcrText,
///         file_name: Some("scan.png".into()),
///         content_type: Some("image/png".into()),
///         len: PNG.len(),
///     })
/// );
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadSeen {
    /// `/ocr/text` or `/parse`.
    pub endpoint: OcrEndpoint,
    /// The `file` part's filename.
    pub file_name: Option<String>,
    /// The `file` part's content type.
    pub content_type: Option<String>,
    /// Bytes in the `file` part.
    pub len: usize,
}

/// A running mock MonkeyOCR server. Dropping it stops the server and releases black-holed
/// requests.
///
/// An OCR scope over the mock:
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::collections::BTreeMap;
/// use polygateway::config::Settings;
/// use polygateway_testkit::mock_ocr::{fixture, MockOcr, OcrEndpoint, OcrFault};
/// use polygateway::Gateway;
///
/// let mock = MockOcr::start(OcrFault::None).await;
/// let env: BTreeMap<String, String> = [
///     ("PGW_LIMITER_BACKEND", "memory".to_string()),
///     ("PGW_BREAKER_BACKEND", "memory".into()),
///     ("PGW_TELEMETRY_BACKEND", "none".into()),
///     ("OCR__MONKEY__1__BASE_URL", mock.base_url()),
///     ("OCR__MONKEY__1__MODEL", "monkeyocr".into()),
/// ]
/// .into_iter()
/// .map(|(k, v)| (k.to_string(), v))
/// .collect();
/// let gw = Gateway::from_settings(Settings::from_map(&env).unwrap(), "OCR").await.unwrap();
/// let png = b"\x89PNG\r\n\x1a\n a scanned page".to_vec();
/// let text = gw.recognize_text(png).await.unwrap();
/// assert_eq!(text.text, fixture::SAMPLE_TEXT);
/// assert_eq!(mock.requests(OcrEndpoint::OcrText), 1);
/// gw.shutdown().await;
/// # }
/// ```
pub struct MockOcr {
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

struct Shared {
    addr: SocketAddr,
    mode: Mutex<ModeState>,
    absolute_urls: AtomicBool,
    result_stem: Mutex<Option<String>>,
    files: Mutex<FileStore>,
    requests: [AtomicU64; 4],
    in_flight: AtomicU64,
    max_in_flight: AtomicU64,
    faults_served: AtomicU64,
    last_upload: Mutex<Option<UploadSeen>>,
    cancel: CancellationToken,
}

#[derive(Default)]
struct FileStore {
    files: HashMap<String, Bytes>,
    order: VecDeque<String>,
}

impl FileStore {
    fn insert(&mut self, name: String, zip: Bytes) {
        if self.files.insert(name.clone(), zip).is_none() {
            self.order.push_back(name);
        }
        while self.order.len() > MAX_STORED_FILES {
            if let Some(old) = self.order.pop_front() {
                self.files.remove(&old);
            }
        }
    }
}

/// Lock a mock mutex; a test that panicked while holding one must not wedge the others.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl MockOcr {
    /// Bind `127.0.0.1:0` and serve in `mode`.
    ///
    /// ```
    /// use polygateway_testkit::mock_ocr::{MockOcr, OcrFault};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// # async fn upload(url: String, name: &str, bytes: &[u8]) -> reqwest::Response {
    /// #     let part = reqwest::multipart::Part::bytes(bytes.to_vec()).file_name(name.to_string());
    /// #     let form = reqwest::multipart::Form::new().part("file", part.mime_str("image/png").unwrap());
    /// #     reqwest::Client::new().post(url).multipart(form).send().await.unwrap()
    /// # }
    /// # const PNG: &[u8] = b"\x89PNG\r\n\x1a\n page";
    /// let mock = MockOcr::start(OcrFault::SuccessFalse).await;
    /// let answer: serde_json::Value =
    ///     upload(format!("{}/ocr/text", mock.base_url()), "scan.png", PNG).await.json().await.unwrap();
    /// // MonkeyOCR reports some failures with HTTP 200.
    /// assert_eq!(answer["success"], false);
    /// assert!(answer["message"].as_str().unwrap().starts_with("OCR task failed"));
    /// # }
    /// ```
    ///
    /// # Panics
    /// When no loopback port can be bound (a test environment defect).
    pub async fn start(mode: OcrFault) -> MockOcr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0 for the mock OCR server");
        let addr = listener.local_addr().expect("bound address");
        let shared = Arc::new(Shared {
            addr,
            mode: Mutex::new(ModeState::new(mode)),
            absolute_urls: AtomicBool::new(false),
            result_stem: Mutex::new(None),
            files: Mutex::new(FileStore::default()),
            requests: Default::default(),
            in_flight: AtomicU64::new(0),
            max_in_flight: AtomicU64::new(0),
            faults_served: AtomicU64::new(0),
            last_upload: Mutex::new(None),
            cancel: CancellationToken::new(),
        });
        let app = Router::new()
            .route("/health", get(health))
            .route("/ocr/text", post(ocr_text))
            .route("/parse", post(parse))
            .route("/static/{name}", get(static_file))
            .layer(DefaultBodyLimit::max(MAX_UPLOAD_BYTES))
            .with_state(shared.clone());
        let cancel = shared.cancel.clone();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(cancel.cancelled_owned())
                .await;
        });
        MockOcr { shared, task }
    }

    /// `http://127.0.0.1:{port}` (no trailing slash).
    ///
    /// ```
    /// use polygateway_testkit::mock_ocr::{MockOcr, OcrFault};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let mock = MockOcr::start(OcrFault::None).await;
    /// let health: serde_json::Value =
    ///     reqwest::get(format!("{}/health", mock.base_url())).await.unwrap().json().await.unwrap();
    /// assert_eq!(health["status"], "healthy");
    /// # }
    /// ```
    pub fn base_url(&self) -> String {
        format!("http://{}", self.shared.addr)
    }

    /// The bound address.
    ///
    /// ```
    /// use polygateway_testkit::mock_ocr::{MockOcr, OcrFault};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let mock = MockOcr::start(OcrFault::None).await;
    /// assert!(mock.addr().ip().is_loopback());
    /// assert_eq!(mock.base_url(), format!("http://{}", mock.addr()));
    /// # }
    /// ```
    pub fn addr(&self) -> SocketAddr {
        self.shared.addr
    }

    /// Switch behaviour for the following requests (resets a `Mix` generator to its seed).
    ///
    /// ```
    /// use polygateway_testkit::mock_ocr::{MockOcr, OcrFault};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// # async fn upload(url: String, name: &str, bytes: &[u8]) -> reqwest::Response {
    /// #     let part = reqwest::multipart::Part::bytes(bytes.to_vec()).file_name(name.to_string());
    /// #     let form = reqwest::multipart::Form::new().part("file", part.mime_str("image/png").unwrap());
    /// #     reqwest::Client::new().post(url).multipart(form).send().await.unwrap()
    /// # }
    /// # const PNG: &[u8] = b"\x89PNG\r\n\x1a\n page";
    /// let mock = MockOcr::start(OcrFault::None).await;
    /// let url = format!("{}/ocr/text", mock.base_url());
    /// mock.set_mode(OcrFault::RateLimited429);
    /// let resp = upload(url.clone(), "scan.png", PNG).await;
    /// assert_eq!(resp.status(), 429);
    /// assert_eq!(resp.headers()["retry-after"], "1");
    /// mock.set_mode(OcrFault::None);
    /// assert_eq!(upload(url, "scan.png", PNG).await.status(), 200);
    /// # }
    /// ```
    pub fn set_mode(&self, mode: OcrFault) {
        *lock(&self.shared.mode) = ModeState::new(mode);
    }

    /// Answer `/parse` with an absolute `download_url` (`http://127.0.0.1:{port}/static/…`)
    /// instead of the usual relative one.
    ///
    /// ```
    /// use polygateway_testkit::mock_ocr::{MockOcr, OcrFault};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// # async fn upload(url: String, name: &str, bytes: &[u8]) -> reqwest::Response {
    /// #     let part = reqwest::multipart::Part::bytes(bytes.to_vec()).file_name(name.to_string());
    /// #     let form = reqwest::multipart::Form::new().part("file", part.mime_str("image/png").unwrap());
    /// #     reqwest::Client::new().post(url).multipart(form).send().await.unwrap()
    /// # }
    /// # const PNG: &[u8] = b"\x89PNG\r\n\x1a\n page";
    /// let mock = MockOcr::start(OcrFault::None).await;
    /// let parse = || async {
    ///     let answer: serde_json::Value =
    ///         upload(format!("{}/parse", mock.base_url()), "scan.png", PNG).await.json().await.unwrap();
    ///     answer["download_url"].as_str().unwrap().to_string()
    /// };
    /// assert!(parse().await.starts_with("/static/scan_parsed_"));
    /// mock.set_absolute_download_urls(true);
    /// let url = parse().await;
    /// assert!(url.starts_with(&format!("{}/static/", mock.base_url())));
    /// assert_eq!(reqwest::get(url).await.unwrap().status(), 200);
    /// # }
    /// ```
    pub fn set_absolute_download_urls(&self, absolute: bool) {
        self.shared.absolute_urls.store(absolute, Ordering::SeqCst);
    }

    /// Use `stem` instead of the uploaded filename's stem in result names (e.g. a name with
    /// spaces, written raw into `download_url` as the real server does). `None` restores.
    ///
    /// ```
    /// use polygateway_testkit::mock_ocr::{MockOcr, OcrFault};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// # async fn upload(url: String, name: &str, bytes: &[u8]) -> reqwest::Response {
    /// #     let part = reqwest::multipart::Part::bytes(bytes.to_vec()).file_name(name.to_string());
    /// #     let form = reqwest::multipart::Form::new().part("file", part.mime_str("image/png").unwrap());
    /// #     reqwest::Client::new().post(url).multipart(form).send().await.unwrap()
    /// # }
    /// # const PNG: &[u8] = b"\x89PNG\r\n\x1a\n page";
    /// let mock = MockOcr::start(OcrFault::None).await;
    /// mock.set_result_stem(Some("my scan"));
    /// let answer: serde_json::Value =
    ///     upload(format!("{}/parse", mock.base_url()), "page.png", PNG).await.json().await.unwrap();
    /// assert!(answer["download_url"].as_str().unwrap().starts_with("/static/my scan_parsed_"));
    /// assert_eq!(answer["files"][0], "my scan.md");
    /// # }
    /// ```
    pub fn set_result_stem(&self, stem: Option<&str>) {
        *lock(&self.shared.result_stem) = stem.map(str::to_owned);
    }

    /// Requests received on `endpoint` (counted on arrival, whatever the answer).
    ///
    /// ```
    /// use polygateway_testkit::mock_ocr::{MockOcr, OcrEndpoint, OcrFault};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// # async fn upload(url: String, name: &str, bytes: &[u8]) -> reqwest::Response {
    /// #     let part = reqwest::multipart::Part::bytes(bytes.to_vec()).file_name(name.to_string());
    /// #     let form = reqwest::multipart::Form::new().part("file", part.mime_str("image/png").unwrap());
    /// #     reqwest::Client::new().post(url).multipart(form).send().await.unwrap()
    /// # }
    /// # const PNG: &[u8] = b"\x89PNG\r\n\x1a\n page";
    /// let mock = MockOcr::start(OcrFault::None).await;
    /// let answer: serde_json::Value =
    ///     upload(format!("{}/parse", mock.base_url()), "scan.png", PNG).await.json().await.unwrap();
    /// let zip_url = format!("{}{}", mock.base_url(), answer["download_url"].as_str().unwrap());
    /// assert_eq!(reqwest::get(zip_url).await.unwrap().status(), 200);
    /// assert_eq!(mock.requests(OcrEndpoint::Parse), 1);
    /// assert_eq!(mock.requests(OcrEndpoint::Static), 1);
    /// assert_eq!(mock.requests(OcrEndpoint::OcrText), 0);
    /// # }
    /// ```
    pub fn requests(&self, endpoint: OcrEndpoint) -> u64 {
        self.shared.requests[endpoint.slot()].load(Ordering::SeqCst)
    }

    /// Requests received on all endpoints.
    ///
    /// ```
    /// use polygateway_testkit::mock_ocr::{MockOcr, OcrFault};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let mock = MockOcr::start(OcrFault::None).await;
    /// reqwest::get(format!("{}/health", mock.base_url())).await.unwrap();
    /// // An upload without a `file` part is refused (422) but still counted.
    /// let refused = reqwest::Client::new().post(format!("{}/ocr/text", mock.base_url())).send().await.unwrap();
    /// assert_eq!(refused.status(), 422);
    /// assert_eq!(mock.total_requests(), 2);
    /// # }
    /// ```
    pub fn total_requests(&self) -> u64 {
        self.shared
            .requests
            .iter()
            .map(|c| c.load(Ordering::SeqCst))
            .sum()
    }

    /// Requests being handled now (all endpoints).
    ///
    /// ```
    /// use polygateway_testkit::mock_ocr::{MockOcr, OcrFault};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use std::time::Duration;
    /// let mock = MockOcr::start(OcrFault::Slow(Duration::from_millis(300))).await;
    /// let health = tokio::spawn(reqwest::get(format!("{}/health", mock.base_url())));
    /// for _ in 0..100 {
    ///     if mock.in_flight() == 1 { break }
    ///     tokio::time::sleep(Duration::from_millis(5)).await;
    /// }
    /// assert_eq!(mock.in_flight(), 1);
    /// health.await.unwrap().unwrap();
    /// assert_eq!(mock.in_flight(), 0);
    /// # }
    /// ```
    pub fn in_flight(&self) -> u64 {
        self.shared.in_flight.load(Ordering::SeqCst)
    }

    /// The most requests ever handled at once.
    ///
    /// ```
    /// use polygateway_testkit::mock_ocr::{MockOcr, OcrFault};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use std::time::Duration;
    /// let mock = MockOcr::start(OcrFault::Slow(Duration::from_millis(500))).await;
    /// let health = || reqwest::get(format!("{}/health", mock.base_url()));
    /// let (a, b) = tokio::join!(health(), health());
    /// assert!(a.is_ok() && b.is_ok());
    /// assert_eq!(mock.max_in_flight(), 2);
    /// # }
    /// ```
    pub fn max_in_flight(&self) -> u64 {
        self.shared.max_in_flight.load(Ordering::SeqCst)
    }

    /// `/ocr/text` and `/parse` requests answered with a fault (under `Mix`: the draws that
    /// failed). A [`OcrFault::BlankPage`] answer is not a fault.
    ///
    /// ```
    /// use polygateway_testkit::mock_ocr::{MockOcr, OcrFault};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// # async fn upload(url: String, name: &str, bytes: &[u8]) -> reqwest::Response {
    /// #     let part = reqwest::multipart::Part::bytes(bytes.to_vec()).file_name(name.to_string());
    /// #     let form = reqwest::multipart::Form::new().part("file", part.mime_str("image/png").unwrap());
    /// #     reqwest::Client::new().post(url).multipart(form).send().await.unwrap()
    /// # }
    /// # const PNG: &[u8] = b"\x89PNG\r\n\x1a\n page";
    /// let always = OcrFault::Mix { failure_rate: 1.0, faults: vec![OcrFault::Detail500], seed: 1 };
    /// let mock = MockOcr::start(always).await;
    /// let url = format!("{}/ocr/text", mock.base_url());
    /// assert_eq!(upload(url.clone(), "scan.png", PNG).await.status(), 500);
    /// mock.set_mode(OcrFault::BlankPage);
    /// assert_eq!(upload(url, "scan.png", PNG).await.status(), 200);
    /// assert_eq!(mock.faults_served(), 1);
    /// # }
    /// ```
    pub fn faults_served(&self) -> u64 {
        self.shared.faults_served.load(Ordering::SeqCst)
    }

    /// The last upload seen by `/ocr/text` or `/parse`.
    ///
    /// ```
    /// use polygateway_testkit::mock_ocr::{MockOcr, OcrEndpoint, OcrFault};
    /// use polygateway_testkit::mock_settings;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let mock = MockOcr::start(OcrFault::None).await;
    /// let settings = mock_settings(&[("OCR", mock.base_url().as_str())], &[]);
    /// let gw = polygateway::Gateway::from_settings(settings, "OCR").await.unwrap();
    /// assert!(mock.last_upload().is_none());
    /// let png = b"\x89PNG\r\n\x1a\n a scanned page".to_vec();
    /// gw.parse_layout(png.clone()).await.unwrap();
    /// // The gateway names the part after the bytes' real type.
    /// let seen = mock.last_upload().unwrap();
    /// assert_eq!((seen.endpoint, seen.file_name.as_deref()), (OcrEndpoint::Parse, Some("image.png")));
    /// assert_eq!(seen.len, png.len());
    /// # gw.shutdown().await;
    /// # }
    /// ```
    pub fn last_upload(&self) -> Option<UploadSeen> {
        lock(&self.shared.last_upload).clone()
    }
}

impl fmt::Debug for MockOcr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MockOcr")
            .field("base_url", &self.base_url())
            .field("mode", lock(&self.shared.mode).mode())
            .finish()
    }
}

impl Drop for MockOcr {
    fn drop(&mut self) {
        self.shared.cancel.cancel();
        self.task.abort();
    }
}

/// Counts a request and keeps the in-flight gauge while it is handled (dropped when the handler
/// finishes or the client goes away).
struct InFlight(Arc<Shared>);

impl InFlight {
    fn enter(shared: &Arc<Shared>, endpoint: OcrEndpoint) -> Self {
        shared.requests[endpoint.slot()].fetch_add(1, Ordering::SeqCst);
        let now = shared.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        shared.max_in_flight.fetch_max(now, Ordering::SeqCst);
        InFlight(shared.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

fn answer(status: StatusCode, body: Value) -> Response {
    (status, Json(body)).into_response()
}

/// Apply the timing faults; `Some` is the answer to give instead of continuing.
async fn delay(shared: &Shared, fault: &OcrFault) -> Option<Response> {
    match fault {
        OcrFault::Slow(d) => {
            tokio::select! {
                _ = tokio::time::sleep(*d) => None,
                _ = shared.cancel.cancelled() => Some(StatusCode::SERVICE_UNAVAILABLE.into_response()),
            }
        }
        OcrFault::BlackHole => {
            shared.cancel.cancelled().await;
            Some(StatusCode::SERVICE_UNAVAILABLE.into_response())
        }
        _ => None,
    }
}

async fn health(State(shared): State<Arc<Shared>>) -> Response {
    let _guard = InFlight::enter(&shared, OcrEndpoint::Health);
    let mode = lock(&shared.mode).mode().clone();
    if let Some(response) = delay(&shared, &mode).await {
        return response;
    }
    answer(
        StatusCode::OK,
        json!({"status": "healthy", "model_loaded": true}),
    )
}

/// FastAPI's answer to an upload without a `file` part.
fn missing_file() -> Response {
    answer(
        StatusCode::UNPROCESSABLE_ENTITY,
        json!({"detail": [{"type": "missing", "loc": ["body", "file"],
                           "msg": "Field required", "input": null}]}),
    )
}

/// The `file` part of an upload (recorded as the last upload), if there is one.
fn file_part(
    shared: &Shared,
    endpoint: OcrEndpoint,
    headers: &HeaderMap,
    body: &[u8],
) -> Option<FormPart> {
    let parts = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(multipart::boundary)
        .and_then(|boundary| multipart::parse(body, &boundary))
        .unwrap_or_default();
    let file = parts
        .into_iter()
        .find(|p| p.name == "file" && p.filename.is_some())?;
    *lock(&shared.last_upload) = Some(UploadSeen {
        endpoint,
        file_name: file.filename.clone(),
        content_type: file.content_type.clone(),
        len: file.data.len(),
    });
    Some(file)
}

/// The server reads the type from the extension, then opens the file as that type: an unknown
/// extension, or bytes that are not what the extension says, fail the task.
fn check_file_type(file: &FormPart) -> Result<(), String> {
    let name = file.filename.as_deref().unwrap_or_default();
    let ext = name
        .rsplit_once('.')
        .map(|(_, e)| e.to_ascii_lowercase())
        .unwrap_or_default();
    let looks_right = match ext.as_str() {
        "png" => file.data.starts_with(b"\x89PNG\r\n\x1a\n"),
        "jpg" | "jpeg" => file.data.starts_with(&[0xFF, 0xD8, 0xFF]),
        "pdf" => file.data.starts_with(b"%PDF"),
        _ => return Err(format!("Unsupported file type: .{ext}")),
    };
    if looks_right {
        Ok(())
    } else {
        Err(format!("cannot identify image file '{name}'"))
    }
}

fn draw(shared: &Shared) -> OcrFault {
    let fault = lock(&shared.mode).draw();
    if !matches!(fault, OcrFault::None | OcrFault::BlankPage) {
        shared.faults_served.fetch_add(1, Ordering::SeqCst);
    }
    fault
}

fn rate_limited() -> Response {
    (
        StatusCode::TOO_MANY_REQUESTS,
        [(header::RETRY_AFTER, "1")],
        Json(json!({"detail": "Too Many Requests"})),
    )
        .into_response()
}

/// What both task endpoints do first: count the request in flight (for as long as the returned
/// guard lives), read the uploaded file, draw this request's fault and serve its delay. `Err` is
/// the answer already decided: no file (422), or what the fault's delay ended in.
async fn upload(
    shared: &Arc<Shared>,
    endpoint: OcrEndpoint,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(InFlight, FormPart, OcrFault), Response> {
    let guard = InFlight::enter(shared, endpoint);
    let file = file_part(shared, endpoint, headers, body).ok_or_else(missing_file)?;
    let fault = draw(shared);
    match delay(shared, &fault).await {
        Some(response) => Err(response),
        None => Ok((guard, file, fault)),
    }
}

async fn ocr_text(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let (_guard, file, fault) = match upload(&shared, OcrEndpoint::OcrText, &headers, &body).await {
        Ok(upload) => upload,
        Err(response) => return response,
    };
    let failed = |why: &str| {
        answer(
            StatusCode::OK,
            json!({"success": false, "task_type": "text", "content": "",
                   "message": format!("OCR task failed: {why}")}),
        )
    };
    if let Err(why) = check_file_type(&file) {
        return failed(&why);
    }
    match fault {
        OcrFault::SuccessFalse => failed("CUDA out of memory"),
        OcrFault::Detail500 => answer(
            StatusCode::INTERNAL_SERVER_ERROR,
            json!({"detail": "OCR task failed: CUDA out of memory"}),
        ),
        OcrFault::RateLimited429 => rate_limited(),
        OcrFault::BlankPage => answer(
            StatusCode::OK,
            json!({"success": true, "task_type": "text", "content": "", "message": null}),
        ),
        _ => answer(
            StatusCode::OK,
            json!({"success": true, "task_type": "text", "content": fixture::SAMPLE_TEXT,
                   "message": null}),
        ),
    }
}

async fn parse(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let (_guard, file, fault) = match upload(&shared, OcrEndpoint::Parse, &headers, &body).await {
        Ok(upload) => upload,
        Err(response) => return response,
    };
    let failed = |why: &str| {
        answer(
            StatusCode::INTERNAL_SERVER_ERROR,
            json!({"detail": format!("Parsing failed: {why}")}),
        )
    };
    if let Err(why) = check_file_type(&file) {
        return failed(&why);
    }
    let middle = match fault {
        OcrFault::SuccessFalse => {
            return answer(
                StatusCode::OK,
                json!({"success": false, "message": "Parsing failed: layout model not loaded"}),
            )
        }
        OcrFault::Detail500 => return failed("CUDA out of memory"),
        OcrFault::RateLimited429 => return rate_limited(),
        OcrFault::MissingMiddleJson => None,
        OcrFault::DegenerateBbox => Some(fixture::degenerate_middle_json()),
        OcrFault::BlankPage => Some(fixture::blank_middle_json()),
        _ => Some(fixture::sample_middle_json()),
    };

    let uploaded = file.filename.as_deref().unwrap_or("upload");
    let stem = lock(&shared.result_stem).clone().unwrap_or_else(|| {
        uploaded
            .rsplit_once('.')
            .map_or(uploaded, |(stem, _)| stem)
            .to_owned()
    });
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_millis();
    let uuid8 = &uuid::Uuid::new_v4().simple().to_string()[..8];
    let name = format!("{stem}_parsed_{ms}_{uuid8}.zip");

    let mut zip = fixture::layout_zip(&stem, middle.as_ref());
    if fault == OcrFault::CorruptZip {
        // Keep the local-header magic so the bytes look like a ZIP yet cannot be opened.
        zip.truncate(zip.len() / 2);
    }
    if fault != OcrFault::Download404 {
        lock(&shared.files).insert(name.clone(), Bytes::from(zip));
    }
    // Written raw, unencoded, like the real server.
    let download_url = if shared.absolute_urls.load(Ordering::SeqCst) {
        format!("http://{}/static/{name}", shared.addr)
    } else {
        format!("/static/{name}")
    };
    answer(
        StatusCode::OK,
        json!({"success": true, "message": "Parsing completed successfully",
               "output_dir": format!("/app/tmp/{stem}_parsed"),
               "files": [format!("{stem}.md"), format!("{stem}_content_list.json"),
                         format!("{stem}_middle.json")],
               "download_url": download_url}),
    )
}

async fn static_file(State(shared): State<Arc<Shared>>, Path(name): Path<String>) -> Response {
    let _guard = InFlight::enter(&shared, OcrEndpoint::Static);
    let zip = lock(&shared.files).files.get(&name).cloned();
    match zip {
        Some(zip) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/zip")],
            zip,
        )
            .into_response(),
        None => answer(StatusCode::NOT_FOUND, json!({"detail": "Not Found"})),
    }
}
