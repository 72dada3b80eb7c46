//! What OCR calls return.

use serde::{Deserialize, Serialize};

/// Where an OCR result came from.
///
/// ```
/// use polygateway::OcrProvenance;
/// let provenance = OcrProvenance {
///     source_name: "monkey_1".into(),
///     usage: 0,
///     latency_ms: 812.5,
///     capacity_wait_ms: 0.0,
///     call_id: "0b6c1c1e-7c1f-4d0e-9a52-3f1f3f3d9a10".into(),
///     raw: serde_json::json!({"success": true, "content": "Hello"}),
/// };
/// // The service's own answer stays available for fields the typed result does not carry.
/// assert_eq!(provenance.raw["success"], true);
/// let json = serde_json::to_value(&provenance).unwrap();
/// assert_eq!(serde_json::from_value::<OcrProvenance>(json).unwrap(), provenance);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OcrProvenance {
    /// Source name.
    pub source_name: String,
    /// Always 0: OCR is not billed per token.
    pub usage: u64,
    /// Wall time of the attempt.
    pub latency_ms: f64,
    /// Time the call waited for capacity before its attempts were sent (pacer slot, quota
    /// gate, cooldown, 429 pushback); not part of `latency_ms`.
    #[serde(default)]
    pub capacity_wait_ms: f64,
    /// Attempt id.
    pub call_id: String,
    /// The raw JSON answer of the service.
    pub raw: serde_json::Value,
}

/// `recognize_text` result. An empty `text` means the page legitimately has no text.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::collections::BTreeMap;
/// use polygateway::config::Settings;
/// use polygateway_testkit::mock_ocr::{fixture, MockOcr, OcrFault};
/// use polygateway::Gateway;
/// let ocr = MockOcr::start(OcrFault::None).await;
/// let base_url = ocr.base_url();
/// let map: BTreeMap<String, String> = [
///     ("PGW_LIMITER_BACKEND", "memory"),
///     ("PGW_BREAKER_BACKEND", "memory"),
///     ("PGW_TELEMETRY_BACKEND", "none"),
///     ("OCR__MONKEY__1__BASE_URL", base_url.as_str()),
///     ("OCR__MONKEY__1__MODEL", "monkeyocr"),
/// ]
/// .into_iter()
/// .map(|(k, v)| (k.to_string(), v.to_string()))
/// .collect();
/// let gw = Gateway::from_settings(Settings::from_map(&map).unwrap(), "OCR").await.unwrap();
/// let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
/// let result = gw.recognize_text(png).await.unwrap();
/// assert_eq!(result.text, fixture::SAMPLE_TEXT);
/// assert_eq!(result.provenance.source_name, "monkey_1");
/// assert_eq!(result.provenance.usage, 0);
/// gw.shutdown().await;
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct OcrTextResult {
    /// The transcription.
    pub text: String,
    /// Provenance.
    pub provenance: OcrProvenance,
}

/// One layout element (a `para_blocks` entry).
///
/// ```
/// use polygateway::OcrLayoutElement;
/// let elements = [
///     OcrLayoutElement {
///         kind: "title".into(),
///         bbox: (72.0, 60.0, 540.0, 90.0),
///         page_index: 0,
///         text: "Quarterly report".into(),
///     },
///     OcrLayoutElement {
///         kind: "table".into(),
///         bbox: (72.0, 200.0, 540.0, 400.0),
///         page_index: 1,
///         text: "<table><tr><td>Q1</td></tr></table>".into(),
///     },
/// ];
/// let table = elements.iter().find(|e| e.kind == "table").unwrap();
/// let (x1, y1, x2, y2) = table.bbox;
/// assert_eq!((table.page_index, x2 - x1, y2 - y1), (1, 468.0, 200.0));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OcrLayoutElement {
    /// Block type: `text`, `title`, `table`, `image`, … (open set).
    pub kind: String,
    /// `(x1, y1, x2, y2)` in the service's page coordinates; validated finite and non-degenerate.
    pub bbox: (f64, f64, f64, f64),
    /// Page index (`page_idx`).
    pub page_index: usize,
    /// Text the block carries (spans' `content`/`html` joined), empty if none.
    pub text: String,
}

/// `parse_layout` result.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::collections::BTreeMap;
/// use polygateway::config::Settings;
/// use polygateway_testkit::mock_ocr::{fixture, MockOcr, OcrFault};
/// use polygateway::Gateway;
/// let ocr = MockOcr::start(OcrFault::None).await;
/// let base_url = ocr.base_url();
/// let map: BTreeMap<String, String> = [
///     ("PGW_LIMITER_BACKEND", "memory"),
///     ("PGW_BREAKER_BACKEND", "memory"),
///     ("PGW_TELEMETRY_BACKEND", "none"),
///     ("OCR__MONKEY__1__BASE_URL", base_url.as_str()),
///     ("OCR__MONKEY__1__MODEL", "monkeyocr"),
/// ]
/// .into_iter()
/// .map(|(k, v)| (k.to_string(), v.to_string()))
/// .collect();
/// let gw = Gateway::from_settings(Settings::from_map(&map).unwrap(), "OCR").await.unwrap();
/// let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
/// let layout = gw.parse_layout(png).await.unwrap();
/// assert_eq!(layout.elements.len(), fixture::SAMPLE_ELEMENTS.len());
/// assert_eq!(layout.elements[0].kind, "title");
/// // One size per page; elements point into it with `page_index`.
/// let last_page = layout.elements.last().unwrap().page_index;
/// assert_eq!(layout.page_sizes.len(), last_page + 1);
/// assert_eq!(layout.page_sizes[0], fixture::SAMPLE_PAGE_SIZE);
/// gw.shutdown().await;
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct OcrLayoutResult {
    /// Elements over all pages, in order.
    pub elements: Vec<OcrLayoutElement>,
    /// `(width, height)` per page.
    pub page_sizes: Vec<(f64, f64)>,
    /// Provenance.
    pub provenance: OcrProvenance,
}
