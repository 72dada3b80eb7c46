//! Settings for the examples: the environment's when it configures the wanted scopes, otherwise
//! the same scopes over built-in mock upstreams, so every example runs anywhere.

use std::collections::BTreeMap;
use std::time::Duration;

use super::mock_llm::{Behaviour, MockUpstream};
use super::mock_ocr::{MockOcr, OcrFault};
use crate::config::{ScopeKind, Settings};

/// Mocks kept alive for as long as the example runs.
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
    let mut env: BTreeMap<String, String> = [
        ("PGW_LIMITER_BACKEND", "memory"),
        ("PGW_BREAKER_BACKEND", "memory"),
        ("PGW_TELEMETRY_BACKEND", "none"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
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
