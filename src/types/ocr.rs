//! What OCR calls return.

use serde::{Deserialize, Serialize};

/// Where an OCR result came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OcrProvenance {
    /// Source name.
    pub source_name: String,
    /// Always 0: OCR is not billed per token.
    pub usage: u64,
    /// Wall time of the attempt.
    pub latency_ms: f64,
    /// Attempt id.
    pub call_id: String,
    /// The raw JSON answer of the service.
    pub raw: serde_json::Value,
}

/// `recognize_text` result. An empty `text` means the page legitimately has no text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct OcrTextResult {
    /// The transcription.
    pub text: String,
    /// Provenance.
    pub provenance: OcrProvenance,
}

/// One layout element (a `para_blocks` entry).
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
