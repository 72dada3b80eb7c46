//! MonkeyOCR transport (SPEC §7.4; wire format in `shared/monkeyocr-protocol.md`).
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
mod middle;
mod text;
mod upload;

use std::convert::Infallible;
use std::fmt;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use polygateway_actors::{EventSink, FailureClass, SourceReason, Transport};
use url::Url;

use crate::config::SourceSettings;
use crate::error::TransportError;
use crate::transport::http::build_client;
use crate::types::{OcrLayoutResult, OcrProvenance, OcrTextResult};

pub use download_url::resolve_download_url;
pub use image::{detect_image_kind, ImageKind};
pub use middle::{parse_middle_json, parse_middle_zip, MiddleLayout};

/// Deadline of one health probe (SPEC §7.4: "a short timeout").
pub const HEALTH_TIMEOUT: Duration = Duration::from_secs(3);

/// Which MonkeyOCR endpoint an attempt calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OcrMode {
    /// `POST /ocr/text`: plain transcription.
    Text,
    /// `POST /parse` then the result ZIP: layout elements with boxes.
    Layout,
}

/// One OCR call's request, reused by every attempt (cloning shares the bytes).
#[derive(Clone, PartialEq, Eq)]
pub struct OcrRequest {
    /// The image (PNG or JPEG; anything else is rejected before sending).
    pub bytes: Bytes,
    /// The endpoint.
    pub mode: OcrMode,
}

impl OcrRequest {
    /// A `recognize_text` request.
    pub fn text(bytes: impl Into<Bytes>) -> Self {
        Self {
            bytes: bytes.into(),
            mode: OcrMode::Text,
        }
    }

    /// A `parse_layout` request.
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
#[derive(Debug, Clone, PartialEq)]
pub enum OcrOutput {
    /// Answer of [`OcrMode::Text`].
    Text(OcrTextResult),
    /// Answer of [`OcrMode::Layout`].
    Layout(OcrLayoutResult),
}

impl OcrOutput {
    /// The provenance of either result.
    pub fn provenance(&self) -> &OcrProvenance {
        match self {
            OcrOutput::Text(r) => &r.provenance,
            OcrOutput::Layout(r) => &r.provenance,
        }
    }
}

/// The transport of one MonkeyOCR source: its settings and its own pooled HTTP client (which
/// honours the source's `TRUST_ENV`).
#[derive(Debug, Clone)]
pub struct OcrTransport {
    settings: SourceSettings,
    client: reqwest::Client,
}

impl OcrTransport {
    /// Build the transport and its HTTP client.
    ///
    /// # Panics
    /// When the TLS backend cannot be initialised (see [`build_client`]).
    pub fn new(settings: SourceSettings) -> Self {
        let client = build_client(&settings);
        Self { settings, client }
    }

    /// The source's settings.
    pub fn settings(&self) -> &SourceSettings {
        &self.settings
    }

    /// One attempt of `request`, outside any governance (what [`Transport::send`] runs).
    pub async fn attempt(&self, request: &OcrRequest) -> Result<OcrOutput, TransportError> {
        let kind = detect_image_kind(&request.bytes).ok_or_else(|| {
            TransportError::rejected(format!(
                "OCR accepts only PNG or JPEG images; the {} bytes given start with {}",
                request.bytes.len(),
                hex::encode(&request.bytes[..request.bytes.len().min(8)])
            ))
        })?;
        let started = Instant::now();
        let call_id = uuid::Uuid::new_v4().to_string();
        let limit = self.settings.timeout;
        let base = self.settings.base_url.as_str();
        let provenance = |raw| OcrProvenance {
            source_name: self.settings.name.clone(),
            usage: 0,
            latency_ms: started.elapsed().as_secs_f64() * 1000.0,
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

    /// `GET {base}/health` within [`HEALTH_TIMEOUT`]: `true` iff 200 with `status == "healthy"`.
    pub async fn check_health(&self) -> bool {
        self.check_health_within(HEALTH_TIMEOUT).await
    }

    /// The health probe with an explicit deadline.
    pub async fn check_health_within(&self, limit: Duration) -> bool {
        health::probe(&self.client, &self.settings.base_url, limit).await
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
