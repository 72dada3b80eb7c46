//! The OCR handle: MonkeyOCR text and layout over the scope's call stack (`crate::call`:
//! validate, record, govern).
//!
//! The image is checked locally first (PNG/JPEG magic bytes, the validate step): a bad upload is
//! rejected before any admission, so it costs no quota and reaches no source.

use std::collections::BTreeMap;

use super::handle::{Ocr, ScopeHandle};
use crate::error::GatewayError;
use crate::transport::ocr::{OcrOutput, OcrRequest};
use crate::types::{CallOptions, OcrLayoutResult, OcrTextResult};

/// OCR calls of an [`OcrHandle`](crate::OcrHandle).
///
/// ```no_run
/// # async fn demo(gw: polygateway::Gateway, png: Vec<u8>) -> Result<(), polygateway::GatewayError> {
/// let ocr = gw.ocr_scope("OCR")?;
/// let text = ocr.recognize_text(png, Default::default()).await?;
/// println!("{}", text.text);
/// # Ok(()) }
/// ```
impl ScopeHandle<Ocr> {
    /// Transcribe the text of a PNG/JPEG image (`POST /ocr/text`).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway::GatewayError> {
    /// # let (settings, mocks) = polygateway_testkit::doc_setup(&["OCR"], &[]).await;
    /// use polygateway_testkit::mock_ocr::fixture::SAMPLE_TEXT;
    /// use polygateway::CallOptions;
    /// let gw = polygateway::Gateway::from_settings(settings, "OCR").await?;
    /// let ocr = gw.ocr_scope("OCR")?;
    /// let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR fake png body".to_vec();
    /// let text = ocr.recognize_text(png, CallOptions::new().session_id("doc-17")).await?;
    /// assert_eq!(text.text, SAMPLE_TEXT);
    /// assert_eq!(text.provenance.source_name, "monkey_1");
    /// gw.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub async fn recognize_text(
        &self,
        image: Vec<u8>,
        options: CallOptions,
    ) -> Result<OcrTextResult, GatewayError> {
        match self.run(OcrRequest::text(image), &options).await? {
            OcrOutput::Text(text) => Ok(text),
            OcrOutput::Layout(_) => unreachable!("a text request answers text"),
        }
    }

    /// Parse the layout of a PNG/JPEG image (`POST /parse` → ZIP → `*_middle.json`).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway::GatewayError> {
    /// # let (settings, mocks) = polygateway_testkit::doc_setup(&["OCR"], &[]).await;
    /// use polygateway_testkit::mock_ocr::fixture::SAMPLE_ELEMENTS;
    /// use polygateway::CallOptions;
    /// let gw = polygateway::Gateway::from_settings(settings, "OCR").await?;
    /// let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR fake png body".to_vec();
    /// let layout = gw.ocr_scope("OCR")?.parse_layout(png, CallOptions::new()).await?;
    /// // (page, kind) of every element, in reading order.
    /// let kinds: Vec<(usize, &str)> = layout.elements.iter().map(|e| (e.page_index, e.kind.as_str())).collect();
    /// assert_eq!(kinds, SAMPLE_ELEMENTS);
    /// gw.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub async fn parse_layout(
        &self,
        image: Vec<u8>,
        options: CallOptions,
    ) -> Result<OcrLayoutResult, GatewayError> {
        match self.run(OcrRequest::layout(image), &options).await? {
            OcrOutput::Layout(layout) => Ok(layout),
            OcrOutput::Text(_) => unreachable!("a layout request answers layout"),
        }
    }

    /// Probe every source's `/health` (short timeout); source name → healthy.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway::GatewayError> {
    /// # let ocr_mock = polygateway_testkit::mock_ocr::MockOcr::start(
    /// #     polygateway_testkit::mock_ocr::OcrFault::None,
    /// # ).await;
    /// let gone = polygateway_testkit::mock_ocr::MockOcr::start(polygateway_testkit::mock_ocr::OcrFault::None).await;
    /// # let settings = polygateway_testkit::mock_settings(
    /// #     &[("OCR", &ocr_mock.base_url())],
    /// #     &[
    /// #         ("OCR__MONKEY__1__MODEL", "monkeyocr"),
    /// #         ("OCR__MONKEY__2__BASE_URL", &gone.base_url()),
    /// #         ("OCR__MONKEY__2__MODEL", "monkeyocr"),
    /// #     ],
    /// # );
    /// // Settings: two OCR sources; the second one's server is gone.
    /// let gw = polygateway::Gateway::from_settings(settings, "OCR").await?;
    /// drop(gone);
    /// let health = gw.ocr_scope("OCR")?.check_health().await;
    /// assert_eq!(health.get("monkey_1"), Some(&true));
    /// assert_eq!(health.get("monkey_2"), Some(&false));
    /// gw.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub async fn check_health(&self) -> BTreeMap<String, bool> {
        let scope = self.scope();
        let probes = scope.scope.sources().iter().map(|source| async move {
            (
                source.name.to_string(),
                source.transport.check_health().await,
            )
        });
        futures::future::join_all(probes)
            .await
            .into_iter()
            .collect()
    }

    async fn run(
        &self,
        request: OcrRequest,
        options: &CallOptions,
    ) -> Result<OcrOutput, GatewayError> {
        let governed = self.scope().stack.call(request, options).await?;
        // The provenance names the attempt that produced it, as its telemetry row does.
        let mut output = governed.response;
        let provenance = match &mut output {
            OcrOutput::Text(t) => &mut t.provenance,
            OcrOutput::Layout(l) => &mut l.provenance,
        };
        provenance.call_id = governed.attempt_id;
        provenance.capacity_wait_ms = governed.capacity_wait.as_secs_f64() * 1e3;
        provenance.source_name = governed.source.to_string();
        Ok(output)
    }
}
