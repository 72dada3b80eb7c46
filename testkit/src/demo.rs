//! Settings for the examples: the environment's when it configures the wanted scopes, otherwise
//! the same scopes over built-in mock upstreams, so every example runs anywhere.

use std::time::Duration;

use super::mock_llm::{Behaviour, MockUpstream};
use super::mock_ocr::{MockOcr, OcrFault};
use polygateway::config::{ScopeKind, Settings};

/// Mocks kept alive for as long as the example runs.
///
/// ```
/// use polygateway::config::ScopeKind;
/// use polygateway_testkit::demo::settings_or_mock;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// // `DEMO` and `OCR_DEMO` are not configured in the environment, so both get a mock.
/// let (settings, mocks) =
///     settings_or_mock(&[("DEMO", ScopeKind::Chat), ("OCR_DEMO", ScopeKind::Ocr)], "hi").await;
/// assert_eq!((mocks.llm.len(), mocks.ocr.len()), (1, 1));
/// let source = &settings.scope("OCR_DEMO").unwrap().sources[0];
/// assert_eq!(source.base_url, mocks.ocr[0].base_url());
/// // Dropping `mocks` stops the servers: keep it alive while the gateway runs.
/// drop(mocks);
/// # }
/// ```
#[derive(Default)]
pub struct DemoMocks {
    /// Chat and embeddings mocks.
    pub llm: Vec<MockUpstream>,
    /// OCR mocks.
    pub ocr: Vec<MockOcr>,
}

/// Settings from the environment if it configures every scope of `scopes`, else those scopes over
/// mocks (chat: a streaming healthy mock answering `content`; embeddings: batch size 16; OCR: a
/// MonkeyOCR mock). Prints which one it uses.
///
/// ```
/// use polygateway::config::ScopeKind;
/// use polygateway_testkit::demo::settings_or_mock;
/// use polygateway::{Gateway, Message};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// // With no `DEMO__…` sources in the environment, the scope runs over a mock answering "hello".
/// let (settings, _mocks) = settings_or_mock(&[("DEMO", ScopeKind::Chat)], "hello").await;
/// let gw = Gateway::from_settings(settings, "DEMO").await.unwrap();
/// let answer = gw.chat(vec![Message::user("hi")]).await.unwrap();
/// assert_eq!(answer.content, "hello");
/// gw.shutdown().await;
/// # }
/// ```
pub async fn settings_or_mock(
    scopes: &[(&str, ScopeKind)],
    content: &str,
) -> (Settings, DemoMocks) {
    if let Ok(settings) = Settings::from_env() {
        if scopes.iter().all(|(s, _)| settings.scopes.contains_key(*s)) {
            println!("using the configured sources from the environment");
            return (settings, DemoMocks::default());
        }
    }
    println!("no sources configured for {scopes:?}: using the built-in mock upstreams");
    let mut env = super::mock_env();
    let mut mocks = DemoMocks::default();
    for (scope, kind) in scopes {
        let base = match kind {
            ScopeKind::Ocr => {
                let mock = MockOcr::start(OcrFault::None).await;
                let base = mock.base_url();
                mocks.ocr.push(mock);
                base
            }
            ScopeKind::Chat | ScopeKind::Embeddings => {
                let mock = MockUpstream::start(Behaviour::Healthy {
                    ttft: Duration::from_millis(20),
                    inter_token: Duration::from_millis(15),
                    chunks: 12,
                    content: content.to_string(),
                })
                .await;
                let base = mock.base_url();
                mocks.llm.push(mock);
                base
            }
        };
        env.insert(format!("{scope}__MOCK__1__BASE_URL"), base);
        env.insert(format!("{scope}__MOCK__1__API_KEY"), "sk-demo".into());
        env.insert(format!("{scope}__MOCK__1__MODEL"), "demo-model".into());
        if *kind == ScopeKind::Embeddings {
            env.insert(format!("{scope}__BATCH_SIZE"), "16".into());
        }
    }
    let settings = Settings::from_map(&env).expect("demo settings are valid");
    (settings, mocks)
}
