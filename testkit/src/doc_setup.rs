//! The one set-up the crate's doc examples share, so each example shows what it teaches and
//! not the same mock wiring again (a hidden `# let (settings, mocks) = doc_setup(…)` line).

use crate::mock_ocr::{MockOcr, OcrFault};
use crate::{mock_settings, Behaviour, MockUpstream};
use polygateway::config::{scope_kind_for, ScopeKind, Settings};

/// The mock upstreams behind [`doc_setup`]'s settings; they serve while this value lives.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let (_settings, mocks) = polygateway_testkit::doc_setup(&["LLM"], &[]).await;
/// assert!(mocks.ocr.is_none()); // no OCR scope asked for
/// assert_eq!(mocks.chat.counts().total, 0);
/// # }
/// ```
pub struct DocMocks {
    /// The OpenAI-compatible mock (healthy) serving every chat and embeddings scope.
    pub chat: MockUpstream,
    /// The MonkeyOCR mock (no fault) serving every OCR scope, when one was asked for.
    pub ocr: Option<MockOcr>,
}

/// Settings for `scopes` served by fresh mocks, as the doc examples use them: a chat scope's
/// source `openai_1` has model `gpt-test`; an embeddings scope's has model `embed-model` and
/// `BATCH_SIZE` 16; an OCR scope's source `monkey_1` has model `monkeyocr`. `extra` env-style
/// keys are applied last and win. Keep the returned mocks alive while the gateway runs.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), polygateway::GatewayError> {
/// let (settings, mocks) =
///     polygateway_testkit::doc_setup(&["LLM", "EMBED", "OCR"], &[("LLM__RETRY__MAX_ATTEMPTS", "1")])
///         .await;
/// assert_eq!(settings.scopes["LLM"].sources[0].model, "gpt-test");
/// assert_eq!(settings.scopes["EMBED"].embedding.as_ref().unwrap().batch_size, 16);
/// assert_eq!(settings.scopes["OCR"].sources[0].name, "monkey_1");
/// assert_eq!(settings.scopes["LLM"].retry.max_attempts, 1);
/// assert_eq!(settings.scopes["LLM"].sources[0].base_url, mocks.chat.base_url());
/// # Ok(()) }
/// ```
pub async fn doc_setup(scopes: &[&str], extra: &[(&str, &str)]) -> (Settings, DocMocks) {
    let chat = MockUpstream::start(Behaviour::healthy()).await;
    let wants_ocr = scopes.iter().any(|s| scope_kind_for(s) == ScopeKind::Ocr);
    let ocr = if wants_ocr {
        Some(MockOcr::start(OcrFault::None).await)
    } else {
        None
    };
    let mut urls = Vec::new();
    let mut keys: Vec<(String, String)> = Vec::new();
    for &scope in scopes {
        match (scope_kind_for(scope), &ocr) {
            (ScopeKind::Ocr, Some(ocr)) => {
                urls.push((scope, ocr.base_url()));
                keys.push((format!("{scope}__MONKEY__1__MODEL"), "monkeyocr".into()));
            }
            (ScopeKind::Embeddings, _) => {
                urls.push((scope, chat.base_url()));
                keys.push((format!("{scope}__OPENAI__1__MODEL"), "embed-model".into()));
                keys.push((format!("{scope}__BATCH_SIZE"), "16".into()));
            }
            _ => {
                urls.push((scope, chat.base_url()));
                keys.push((format!("{scope}__OPENAI__1__MODEL"), "gpt-test".into()));
            }
        }
    }
    keys.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let urls: Vec<(&str, &str)> = urls.iter().map(|(s, u)| (*s, u.as_str())).collect();
    let keys: Vec<(&str, &str)> = keys.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let settings = mock_settings(&urls, &keys);
    (settings, DocMocks { chat, ocr })
}
