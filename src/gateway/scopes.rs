//! What each kind of configured scope holds besides its runtime scope: [`ChatScope`],
//! [`EmbedScope`], [`OcrScope`] (built by `build/scopes.rs`). Their own file because the sealed
//! kinds (`handle.rs`) name them and each kind's calls (`chat.rs`, `embed.rs`, `ocr.rs`) read
//! them: both sides import them, so neither imports the other.

use polygateway_actors::runtime::Scope;

use crate::call::{ChatStack, EmbedStack, OcrStack};
use crate::config::EmbeddingSettings;
use crate::transport::chat::ChatTransport;
use crate::transport::embeddings::EmbeddingTransport;
use crate::transport::ocr::OcrTransport;

/// What one chat scope needs besides its runtime scope (callers reach it through a
/// [`ChatHandle`](crate::ChatHandle)).
///
/// Each chat scope has its own sources, so two scopes never serve each other's calls:
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), polygateway::GatewayError> {
/// use polygateway_testkit::{Behaviour, MockUpstream};
/// let mock = MockUpstream::start(Behaviour::healthy()).await;
/// let judge_mock = MockUpstream::start(Behaviour::healthy()).await;
/// # let settings = polygateway_testkit::mock_settings(
/// #     &[("LLM", &mock.base_url()), ("JUDGE", &judge_mock.base_url())],
/// #     &[("LLM__OPENAI__1__MODEL", "gpt-test"), ("JUDGE__OPENAI__1__MODEL", "judge-model")],
/// # );
/// use polygateway::Message;
/// // Settings: LLM over `mock`, JUDGE over `judge_mock`.
/// let gw = polygateway::Gateway::from_settings(settings, "LLM").await?;
/// gw.chat_scope("JUDGE")?.chat(vec![Message::user("grade this")]).await?;
/// assert_eq!((mock.counts().chat, judge_mock.counts().chat), (0, 1));
/// gw.shutdown().await;
/// # Ok(()) }
/// ```
pub(crate) struct ChatScope {
    pub(crate) scope: Scope<ChatTransport>,
    /// Its call stack: validate, record, cache, ladder, budget, govern (`crate::call`).
    pub(crate) stack: ChatStack,
}

/// What one embeddings scope needs besides its runtime scope: its sources and its batching
/// settings (callers reach it through an [`EmbeddingHandle`](crate::EmbeddingHandle)).
///
/// Its `BATCH_SIZE` splits a call into upstream requests:
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), polygateway::GatewayError> {
/// use polygateway_testkit::{Behaviour, MockUpstream};
/// let mock = MockUpstream::start(Behaviour::healthy()).await;
/// # let settings = polygateway_testkit::mock_settings(
/// #     &[("EMBED", &mock.base_url())],
/// #     &[("EMBED__OPENAI__1__MODEL", "embed-model"), ("EMBED__BATCH_SIZE", "2")],
/// # );
/// // Settings: EMBED__BATCH_SIZE=2.
/// let gw = polygateway::Gateway::from_settings(settings, "EMBED").await?;
/// let texts: Vec<String> = (1..=5).map(|i| format!("text {i}")).collect();
/// let out = gw.embed(texts).await?;
/// assert_eq!(out.vectors.len(), 5);
/// assert_eq!(mock.counts().embeddings, 3); // batches of 2, 2 and 1
/// gw.shutdown().await;
/// # Ok(()) }
/// ```
pub(crate) struct EmbedScope {
    pub(crate) scope: Scope<EmbeddingTransport>,
    /// Its call stack: validate, record, govern (`crate::call`).
    pub(crate) stack: EmbedStack,
    pub(crate) settings: EmbeddingSettings,
}

/// What one OCR scope needs besides its runtime scope: its sources (callers reach it through an
/// [`OcrHandle`](crate::OcrHandle)).
///
/// Every call is checked locally first: an upload that is not a PNG or JPEG never reaches a source.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), polygateway::GatewayError> {
/// let ocr_mock = polygateway_testkit::mock_ocr::MockOcr::start(
///     polygateway_testkit::mock_ocr::OcrFault::None,
/// ).await;
/// # let settings = polygateway_testkit::mock_settings(
/// #     &[("OCR", &ocr_mock.base_url())],
/// #     &[("OCR__MONKEY__1__MODEL", "monkeyocr")],
/// # );
/// use polygateway::{CallOptions, GatewayError};
/// let gw = polygateway::Gateway::from_settings(settings, "OCR").await?;
/// let ocr = gw.ocr_scope("OCR")?;
/// let pdf = b"%PDF-1.7 ...".to_vec();
/// let err = ocr.recognize_text(pdf, CallOptions::new()).await.unwrap_err();
/// assert!(matches!(err, GatewayError::RequestRejected { .. }));
/// assert_eq!(ocr_mock.total_requests(), 0);
/// gw.shutdown().await;
/// # Ok(()) }
/// ```
pub(crate) struct OcrScope {
    pub(crate) scope: Scope<OcrTransport>,
    /// Its call stack: validate, record, govern (`crate::call`).
    pub(crate) stack: OcrStack,
}
