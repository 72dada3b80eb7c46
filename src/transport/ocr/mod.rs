//! MonkeyOCR transport (docs/behaviour.md §7.4; wire format in `docs/monkeyocr.md`).
//!
//! One [`OcrTransport`] per OCR source. An attempt is one [`OcrRequest`] — the image bytes and
//! which endpoint ([`OcrMode::Text`] → `/ocr/text`, [`OcrMode::Layout`] → `/parse` + ZIP) — and
//! answers an [`OcrOutput`]. The image is checked locally first (PNG/JPEG only, nothing sent
//! otherwise); the whole attempt, both legs of `/parse` included, is bounded by the source's
//! `timeout`. Every failure is a classified [`TransportError`].
//!
//! Not here: retries, source selection, breaker and telemetry (the runtime), the public
//! `recognize_text`/`parse_layout` call API (the gateway handles).

mod answer;
mod download_url;
mod errors;
mod health;
mod image;
mod layout;
pub(crate) mod middle;
mod text;
mod upload;

use std::convert::Infallible;
use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use polygateway_actors::{EventSink, FailureClass, SourceReason, Transport};
use url::Url;

use crate::error::TransportError;
use crate::transport::client::build_client;
use crate::transport::TransportConfig;
use crate::types::{OcrLayoutResult, OcrProvenance, OcrTextResult};

pub(crate) use image::{detect_image_kind, ImageKind};

/// Deadline of one health probe (docs/behaviour.md §7.4: "a short timeout").
pub(crate) const HEALTH_TIMEOUT: Duration = Duration::from_secs(3);

/// Which MonkeyOCR endpoint an attempt calls.
///
/// ```
/// use polygateway::transport::ocr::{OcrMode, OcrRequest};
/// let endpoint = |mode: OcrMode| match mode {
///     OcrMode::Text => "/ocr/text",
///     OcrMode::Layout => "/parse",
/// };
/// let png = b"\x89PNG\r\n\x1a\n".to_vec();
/// assert_eq!(endpoint(OcrRequest::layout(png).mode), "/parse");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OcrMode {
    /// `POST /ocr/text`: plain transcription.
    Text,
    /// `POST /parse` then the result ZIP: layout elements with boxes.
    Layout,
}

/// One OCR call's request, reused by every attempt (cloning shares the bytes).
///
/// ```
/// use bytes::Bytes;
/// use polygateway::transport::ocr::{OcrMode, OcrRequest};
/// const PNG: &[u8] = b"\x89PNG\r\n\x1a\n fake";
/// let request = OcrRequest { bytes: Bytes::from_static(PNG), mode: OcrMode::Text };
/// assert_eq!(request, OcrRequest::text(PNG));
/// // Retries clone the request without copying the image.
/// assert_eq!(request.clone().bytes.as_ptr(), request.bytes.as_ptr());
/// // Debug shows size and type, not the bytes.
/// assert_eq!(format!("{request:?}"), "OcrRequest { mode: Text, bytes: 13, kind: Some(Png) }");
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct OcrRequest {
    /// The image (PNG or JPEG; anything else is rejected before sending).
    pub bytes: Bytes,
    /// The endpoint.
    pub mode: OcrMode,
}

impl OcrRequest {
    /// A `recognize_text` request.
    ///
    /// ```
    /// use polygateway::transport::ocr::{OcrMode, OcrRequest};
    /// let jpeg = vec![0xFF, 0xD8, 0xFF, 0xE0];
    /// let request = OcrRequest::text(jpeg);
    /// assert_eq!(request.mode, OcrMode::Text);
    /// assert_eq!(request.bytes.len(), 4);
    /// ```
    pub fn text(bytes: impl Into<Bytes>) -> Self {
        Self {
            bytes: bytes.into(),
            mode: OcrMode::Text,
        }
    }

    /// A `parse_layout` request.
    ///
    /// ```
    /// use polygateway::transport::ocr::{OcrMode, OcrRequest};
    /// let request = OcrRequest::layout(&b"\x89PNG\r\n\x1a\n"[..]);
    /// assert_eq!(request.mode, OcrMode::Layout);
    /// ```
    pub fn layout(bytes: impl Into<Bytes>) -> Self {
        Self {
            bytes: bytes.into(),
            mode: OcrMode::Layout,
        }
    }
}

impl fmt::Debug for OcrRequest {
    // The image itself is noise in logs; its size and type are what matter.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OcrRequest")
            .field("mode", &self.mode)
            .field("bytes", &self.bytes.len())
            .field("kind", &detect_image_kind(&self.bytes))
            .finish()
    }
}

/// What an OCR attempt answers, by mode.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use polygateway_testkit::mock_ocr::{fixture::SAMPLE_TEXT, MockOcr, OcrFault};
/// use polygateway::transport::ocr::{OcrOutput, OcrRequest, OcrTransport};
/// use polygateway::transport::TransportConfig;
/// let mock = MockOcr::start(OcrFault::None).await;
/// let settings = polygateway_testkit::source_settings(&mock.base_url());
/// let transport = OcrTransport::new(TransportConfig::from(&settings));
/// let png = b"\x89PNG\r\n\x1a\n fake".to_vec();
/// match transport.attempt(&OcrRequest::text(png)).await.unwrap() {
///     OcrOutput::Text(result) => assert_eq!(result.text, SAMPLE_TEXT),
///     OcrOutput::Layout(_) => unreachable!("a text request answers text"),
/// }
/// # }
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum OcrOutput {
    /// Answer of [`OcrMode::Text`].
    Text(OcrTextResult),
    /// Answer of [`OcrMode::Layout`].
    Layout(OcrLayoutResult),
}

impl OcrOutput {
    /// The provenance of either result.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use polygateway_testkit::mock_ocr::{MockOcr, OcrFault};
    /// use polygateway::transport::ocr::{OcrRequest, OcrTransport};
    /// use polygateway::transport::TransportConfig;
    /// let mock = MockOcr::start(OcrFault::None).await;
    /// let mut settings = polygateway_testkit::source_settings(&mock.base_url());
    /// settings.name = "monkey_1".into();
    /// let transport = OcrTransport::new(TransportConfig::from(&settings));
    /// let png = b"\x89PNG\r\n\x1a\n fake".to_vec();
    /// let output = transport.attempt(&OcrRequest::layout(png)).await.unwrap();
    /// let provenance = output.provenance();
    /// assert_eq!(provenance.source_name, "monkey_1");
    /// assert_eq!(provenance.usage, 0);
    /// assert!(!provenance.raw.is_null()); // the service's own JSON answer
    /// # }
    /// ```
    pub fn provenance(&self) -> &OcrProvenance {
        match self {
            OcrOutput::Text(r) => &r.provenance,
            OcrOutput::Layout(r) => &r.provenance,
        }
    }
}

/// The transport of one MonkeyOCR source: its configuration and its own pooled HTTP client (which
/// honours the source's `TRUST_ENV`).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use polygateway::ports::Transport;
/// use polygateway_testkit::mock_ocr::fixture::{SAMPLE_ELEMENTS, SAMPLE_PAGE_SIZE};
/// use polygateway_testkit::mock_ocr::{MockOcr, OcrFault};
/// use polygateway::transport::ocr::{OcrOutput, OcrRequest, OcrTransport};
/// use polygateway::transport::TransportConfig;
/// let mock = MockOcr::start(OcrFault::None).await;
/// let settings = polygateway_testkit::source_settings(&mock.base_url());
/// let transport = OcrTransport::new(TransportConfig::from(&settings));
/// let png = b"\x89PNG\r\n\x1a\n fake".to_vec();
/// // What the runtime calls: `/parse`, then the result ZIP.
/// let output = transport.send(&OcrRequest::layout(png), None).await.unwrap();
/// assert_eq!(OcrTransport::tokens_used(&output), Some(0));
/// let OcrOutput::Layout(layout) = output else { panic!("a layout request answers a layout") };
/// assert_eq!(layout.elements.len(), SAMPLE_ELEMENTS.len());
/// assert_eq!(layout.page_sizes, vec![SAMPLE_PAGE_SIZE; 3]);
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct OcrTransport {
    config: TransportConfig,
    client: reqwest::Client,
}

impl OcrTransport {
    /// Build the transport and its HTTP client for the source `config` describes
    /// (`TransportConfig::from(&source_settings)` for a configured source).
    ///
    /// # Panics
    /// When the TLS backend cannot be initialised (see `client::build_client`).
    ///
    /// ```
    /// use polygateway::transport::ocr::OcrTransport;
    /// use polygateway::transport::TransportConfig;
    /// // Building the transport contacts nothing.
    /// let settings = polygateway_testkit::source_settings("http://127.0.0.1:9");
    /// let transport = OcrTransport::new(TransportConfig::from(&settings));
    /// assert_eq!(transport.config().base_url, "http://127.0.0.1:9");
    /// ```
    pub fn new(config: TransportConfig) -> Self {
        let client = build_client(&config);
        Self { config, client }
    }

    /// The transport's configuration.
    ///
    /// ```
    /// use std::time::Duration;
    /// use polygateway::transport::ocr::OcrTransport;
    /// use polygateway::transport::TransportConfig;
    /// let mut settings = polygateway_testkit::source_settings("http://127.0.0.1:9");
    /// settings.timeout = Duration::from_secs(120);
    /// let transport = OcrTransport::new(TransportConfig::from(&settings));
    /// // The deadline of each whole attempt (both legs of `/parse` included).
    /// assert_eq!(transport.config().timeout, Duration::from_secs(120));
    /// ```
    pub fn config(&self) -> &TransportConfig {
        &self.config
    }

    /// One attempt of `request`, outside any governance (what [`Transport::send`] runs).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use polygateway::ports::FailureClass;
    /// use polygateway_testkit::mock_ocr::{MockOcr, OcrFault};
    /// use polygateway::transport::ocr::{OcrRequest, OcrTransport};
    /// use polygateway::transport::TransportConfig;
    /// let mock = MockOcr::start(OcrFault::None).await;
    /// let settings = polygateway_testkit::source_settings(&mock.base_url());
    /// let transport = OcrTransport::new(TransportConfig::from(&settings));
    /// // A PDF is refused locally: RequestRejected, and nothing reaches the service.
    /// let err = transport.attempt(&OcrRequest::text(b"%PDF-1.7".to_vec())).await.unwrap_err();
    /// assert_eq!(err.class, FailureClass::RequestRejected);
    /// assert_eq!(mock.total_requests(), 0);
    /// // A service-side failure is classified too: HTTP 500 is transient.
    /// mock.set_mode(OcrFault::Detail500);
    /// let png = b"\x89PNG\r\n\x1a\n fake".to_vec();
    /// let err = transport.attempt(&OcrRequest::text(png)).await.unwrap_err();
    /// assert_eq!(err.class, FailureClass::Transient);
    /// # }
    /// ```
    pub async fn attempt(&self, request: &OcrRequest) -> Result<OcrOutput, TransportError> {
        let kind = detect_image_kind(&request.bytes).ok_or_else(|| {
            TransportError::rejected(format!(
                "OCR accepts only PNG or JPEG images; the {} bytes given start with {}",
                request.bytes.len(),
                hex::encode(&request.bytes[..request.bytes.len().min(8)])
            ))
        })?;
        // Tokio's clock, as the chat path reads it, so a paused-clock test sees what it scripted.
        let started = tokio::time::Instant::now();
        let call_id = uuid::Uuid::new_v4().to_string();
        let limit = self.config.timeout;
        let base = self.config.base_url.as_str();
        let provenance = |raw| OcrProvenance {
            source_name: self.config.name.clone(),
            usage: 0,
            latency_ms: started.elapsed().as_secs_f64() * 1000.0,
            // The runtime knows the call's waiting, the transport does not.
            capacity_wait_ms: 0.0,
            call_id: call_id.clone(),
            raw,
        };
        let exchange = async {
            match request.mode {
                OcrMode::Text => {
                    let (text, raw) =
                        text::recognize(&self.client, base, &request.bytes, kind).await?;
                    Ok(OcrOutput::Text(OcrTextResult {
                        text,
                        provenance: provenance(raw),
                    }))
                }
                OcrMode::Layout => {
                    let ((elements, page_sizes), raw) =
                        layout::parse(&self.client, base, &request.bytes, kind).await?;
                    Ok(OcrOutput::Layout(OcrLayoutResult {
                        elements,
                        page_sizes,
                        provenance: provenance(raw),
                    }))
                }
            }
        };
        match tokio::time::timeout(limit, exchange).await {
            Ok(result) => result,
            Err(_) => Err(TransportError::transient(
                SourceReason::Timeout,
                format!(
                    "MonkeyOCR {}: attempt exceeded the source timeout of {:.1}s",
                    match request.mode {
                        OcrMode::Text => "/ocr/text",
                        OcrMode::Layout => "/parse",
                    },
                    limit.as_secs_f64()
                ),
            )),
        }
    }

    /// `GET {base}/health` within `HEALTH_TIMEOUT` (3 s): `true` iff 200 with `status == "healthy"`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use polygateway_testkit::mock_ocr::{MockOcr, OcrFault};
    /// use polygateway::transport::ocr::OcrTransport;
    /// use polygateway::transport::TransportConfig;
    /// let mock = MockOcr::start(OcrFault::None).await;
    /// let settings = polygateway_testkit::source_settings(&mock.base_url());
    /// let transport = OcrTransport::new(TransportConfig::from(&settings));
    /// assert!(transport.check_health().await);
    /// // A source whose base URL is not a URL is never healthy.
    /// let unusable = TransportConfig::from(&polygateway_testkit::source_settings("not a url"));
    /// assert!(!OcrTransport::new(unusable).check_health().await);
    /// # }
    /// ```
    pub async fn check_health(&self) -> bool {
        self.check_health_within(HEALTH_TIMEOUT).await
    }

    /// The health probe with an explicit deadline.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use std::time::{Duration, Instant};
    /// use polygateway_testkit::mock_ocr::{MockOcr, OcrFault};
    /// use polygateway::transport::ocr::OcrTransport;
    /// use polygateway::transport::TransportConfig;
    /// // A server that accepts the request and never answers.
    /// let mock = MockOcr::start(OcrFault::BlackHole).await;
    /// let settings = polygateway_testkit::source_settings(&mock.base_url());
    /// let transport = OcrTransport::new(TransportConfig::from(&settings));
    /// let started = Instant::now();
    /// assert!(!transport.check_health_within(Duration::from_millis(100)).await);
    /// assert!(started.elapsed() < Duration::from_secs(1));
    /// # }
    /// ```
    pub async fn check_health_within(&self, limit: Duration) -> bool {
        health::probe(&self.client, &self.config.base_url, limit).await
    }
}

#[async_trait]
impl Transport for OcrTransport {
    type Request = OcrRequest;
    type Response = OcrOutput;
    type Event = Infallible;
    type Error = TransportError;

    async fn send(
        &self,
        request: &OcrRequest,
        _events: Option<&EventSink<Infallible>>,
    ) -> Result<OcrOutput, TransportError> {
        self.attempt(request).await
    }

    /// OCR is not billed per token: always `Some(0)`.
    fn tokens_used(_response: &OcrOutput) -> Option<u64> {
        Some(0)
    }
}

/// `{base}/{path}` as a URL. A base that is not a URL means this source can serve nothing:
/// SourceDead, so the breaker isolates it and the call moves on to another source.
fn endpoint(base_url: &str, path: &str) -> Result<Url, TransportError> {
    Url::parse(&format!("{}/{path}", base_url.trim_end_matches('/'))).map_err(|e| {
        TransportError::new(
            FailureClass::SourceDead,
            SourceReason::SourceDead,
            format!("MonkeyOCR source base_url {base_url:?} is not a URL: {e}"),
        )
    })
}

#[cfg(test)]
mod examples {
    //! Usage cases of crate-private items (they were doc examples while the items were public).

    #[test]
    fn health_timeout_example() {
        use crate::transport::ocr::HEALTH_TIMEOUT;
        use std::time::Duration;
        // Much shorter than an attempt: a probe asks "is it up?", not "can it finish a page?".
        assert_eq!(HEALTH_TIMEOUT, Duration::from_secs(3));
        assert!(
            HEALTH_TIMEOUT
                < crate::transport::TransportConfig::for_tests("http://127.0.0.1:9").timeout
        );
    }
}
