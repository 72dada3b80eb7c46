//! The composition root: builds the supervised runtime from [`Settings`] (or injected ports) and
//! hands out typed handles. The only module that names concrete backends.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use polygateway::{Gateway, Message};
//! let gw = Gateway::from_env("LLM").await?;
//! let resp = gw.chat(vec![Message::user("hello")]).await?;
//! println!("{}", resp.content);
//! gw.shutdown().await;
//! # Ok(()) }
//! ```

mod build;
mod chat;
mod embed;
mod handle;
mod ocr;
mod scopes;
mod snapshot;
mod stream;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use polygateway_actors::runtime::{Governance, Runtime};

pub use build::GatewayBuilder;
pub use handle::{Chat, Embeddings, Kind, Ocr, ScopeHandle};

/// A handle to one chat scope (LLM, VLM, JUDGE, …).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), polygateway::GatewayError> {
/// # let (settings, mocks) = polygateway_testkit::doc_setup(&["LLM"], &[]).await;
/// use polygateway::{ChatHandle, Gateway, Message};
/// let gw = Gateway::from_settings(settings, "LLM").await?;
/// let llm: ChatHandle = gw.chat_scope("LLM")?;
/// let reply = llm.chat(vec![Message::user("hi")]).await?;
/// assert_eq!(reply.source_name, "openai_1");
/// gw.shutdown().await;
/// # Ok(()) }
/// ```
pub type ChatHandle = ScopeHandle<Chat>;
/// A handle to one embeddings scope.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), polygateway::GatewayError> {
/// use polygateway_testkit::{Behaviour, MockUpstream};
/// let mock = MockUpstream::start(Behaviour::healthy()).await;
/// # let settings = polygateway_testkit::mock_settings(
/// #     &[("EMBED", &mock.base_url())],
/// #     &[("EMBED__OPENAI__1__MODEL", "embed-model"), ("EMBED__BATCH_SIZE", "16")],
/// # );
/// use polygateway::{CallOptions, EmbeddingHandle, Gateway};
/// let gw = Gateway::from_settings(settings, "EMBED").await?;
/// let embed: EmbeddingHandle = gw.embedding_scope("EMBED")?;
/// let out = embed.embed(vec!["alpha".into(), "beta".into()], CallOptions::new()).await?;
/// assert_eq!(out.vectors.len(), 2);
/// assert_eq!(out.dim, 8); // the mock answers 8-dimensional vectors
/// gw.shutdown().await;
/// # Ok(()) }
/// ```
pub type EmbeddingHandle = ScopeHandle<Embeddings>;
/// A handle to one OCR scope.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), polygateway::GatewayError> {
/// # let (settings, mocks) = polygateway_testkit::doc_setup(&["OCR"], &[]).await;
/// use polygateway::{Gateway, OcrHandle};
/// let gw = Gateway::from_settings(settings, "OCR").await?;
/// let ocr: OcrHandle = gw.ocr_scope("OCR")?;
/// assert_eq!(ocr.check_health().await.get("monkey_1"), Some(&true));
/// gw.shutdown().await;
/// # Ok(()) }
/// ```
pub type OcrHandle = ScopeHandle<Ocr>;
pub use crate::types::BudgetStatus;
pub use snapshot::SourceSnapshot;
#[cfg(feature = "server")]
pub(crate) use stream::whole_answer_deltas;
pub use stream::{ChatEvent, ChatStream};

use crate::call::budget;
use crate::config::{ScopeKind, Settings};
use crate::error::GatewayError;
use crate::telemetry::TelemetryStatus;
use crate::types::{
    CallOptions, EmbeddingResponse, LlmResponse, Message, OcrLayoutResult, OcrTextResult,
};

pub(crate) use crate::telemetry::record::Telemetry;

/// One configured scope, by kind: what a handle of that kind looks up.
///
/// A scope is registered under exactly one kind, so a handle of another kind is refused:
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), polygateway::GatewayError> {
/// # let (settings, mocks) = polygateway_testkit::doc_setup(&["LLM"], &[]).await;
/// use polygateway::{Gateway, GatewayError};
/// let gw = Gateway::from_settings(settings, "LLM").await?;
/// assert!(gw.chat_scope("LLM").is_ok());
/// assert!(matches!(gw.embedding_scope("LLM"), Err(GatewayError::SourceNotConfigured(_))));
/// assert!(gw.ocr_scope("LLM").is_err());
/// gw.shutdown().await;
/// # Ok(()) }
/// ```
pub(crate) enum ScopeEntry {
    Chat(scopes::ChatScope),
    Embeddings(scopes::EmbedScope),
    Ocr(scopes::OcrScope),
}

/// What the runtime built itself and therefore closes (docs/behaviour.md §10.3); injected parts are left alone.
#[derive(Default)]
pub(crate) struct Owned {
    #[cfg(feature = "redis")]
    pub redis: Vec<crate::redis::RedisGovernance>,
    pub telemetry_sink: bool,
}

pub(crate) struct Core {
    pub runtime: Runtime,
    pub governance: Governance,
    pub scopes: BTreeMap<String, ScopeEntry>,
    pub telemetry: Arc<Telemetry>,
    pub structured_max_retries: u32,
    /// Spend budgets: which apply to a call, and each chat scope's estimate.
    pub budgets: Arc<budget::BudgetPlan>,
    pub owned: Owned,
    pub closed: AtomicBool,
    pub settings: Settings,
}

impl ScopeEntry {
    pub(crate) fn kind(&self) -> ScopeKind {
        match self {
            ScopeEntry::Chat(_) => ScopeKind::Chat,
            ScopeEntry::Embeddings(_) => ScopeKind::Embeddings,
            ScopeEntry::Ocr(_) => ScopeKind::Ocr,
        }
    }

    /// The scope without its transport type, for snapshots and chaos hooks.
    pub(crate) fn erased(&self) -> &dyn snapshot::ErasedScope {
        match self {
            ScopeEntry::Chat(s) => &s.scope,
            ScopeEntry::Embeddings(s) => &s.scope,
            ScopeEntry::Ocr(s) => &s.scope,
        }
    }
}

impl Core {
    pub(crate) fn entry(&self, name: &str) -> Result<&ScopeEntry, GatewayError> {
        self.scopes
            .get(name)
            .ok_or_else(|| self.unknown_scope(name))
    }

    pub(crate) fn unknown_scope(&self, name: &str) -> GatewayError {
        GatewayError::SourceNotConfigured(format!(
            "scope {name} is not configured (configured: {})",
            self.scopes.keys().cloned().collect::<Vec<_>>().join(", ")
        ))
    }
}

/// An embedded polygateway runtime: one supervision tree, its scopes and shared telemetry,
/// admission and cache. Cheap to clone (an `Arc`); every clone talks to the same runtime.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), polygateway::GatewayError> {
/// # let (settings, mocks) = polygateway_testkit::doc_setup(&["LLM"], &[]).await;
/// use polygateway::{Gateway, Message};
/// let gw = Gateway::from_settings(settings, "LLM").await?;
/// let worker = gw.clone();
/// let reply = tokio::spawn(async move { worker.chat(vec![Message::user("hi")]).await })
///     .await
///     .expect("the task ran")?;
/// assert!(!reply.content.is_empty());
/// // The clone's call shows in the original's counters: one runtime.
/// assert_eq!(gw.sources("LLM").await?[0].attempts, 1);
/// gw.shutdown().await;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Gateway {
    core: Arc<Core>,
    default_scope: Arc<str>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("default_scope", &self.default_scope)
            .field("scopes", &self.core.scopes.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Gateway {
    /// Build from the process environment and `.env`, with `scope` as the default scope of the
    /// convenience methods (`chat`, `embed`, `recognize_text`, …). Every configured scope is built.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), polygateway::GatewayError> {
    /// // Sources come from LLM__OPENAI__1__BASE_URL, …__API_KEY, …__MODEL (see `.env.example`).
    /// let gw = polygateway::Gateway::from_env("LLM").await?;
    /// let reply = gw.chat(vec![polygateway::Message::user("hello")]).await?;
    /// println!("{} (from {})", reply.content, reply.source_name);
    /// gw.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub async fn from_env(scope: &str) -> Result<Self, GatewayError> {
        let settings = Settings::from_env().map_err(GatewayError::Config)?;
        Self::from_settings(settings, scope).await
    }

    /// Build from resolved settings.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway::GatewayError> {
    /// use polygateway_testkit::{Behaviour, MockUpstream};
    /// let mock = MockUpstream::start(Behaviour::healthy()).await;
    /// use std::collections::BTreeMap;
    /// use polygateway::{config::Settings, Gateway, GatewayError};
    /// let base_url = mock.base_url(); // a mock upstream, for the example
    /// let env: BTreeMap<String, String> = [
    ///     ("PGW_LIMITER_BACKEND", "memory"),
    ///     ("PGW_BREAKER_BACKEND", "memory"),
    ///     ("PGW_TELEMETRY_BACKEND", "none"),
    ///     ("LLM__OPENAI__1__BASE_URL", base_url.as_str()),
    ///     ("LLM__OPENAI__1__API_KEY", "sk-test"),
    ///     ("LLM__OPENAI__1__MODEL", "gpt-test"),
    /// ]
    /// .into_iter()
    /// .map(|(k, v)| (k.to_string(), v.to_string()))
    /// .collect();
    /// let settings = Settings::from_map(&env).expect("valid settings");
    /// // The default scope must be one of the configured ones.
    /// let err = Gateway::from_settings(settings.clone(), "JUDGE").await.unwrap_err();
    /// assert!(matches!(err, GatewayError::SourceNotConfigured(_)));
    /// let gw = Gateway::from_settings(settings, "LLM").await?;
    /// assert_eq!(gw.scopes(), ["LLM"]);
    /// gw.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub async fn from_settings(settings: Settings, scope: &str) -> Result<Self, GatewayError> {
        GatewayBuilder::new(settings)
            .default_scope(scope)
            .build()
            .await
    }

    /// A builder to inject ports (governance backends, telemetry sink, cache, clock, selector).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway::GatewayError> {
    /// # let (settings, mocks) = polygateway_testkit::doc_setup(&["LLM"], &[]).await;
    /// use std::sync::Arc;
    /// use polygateway::{telemetry::NullSink, Gateway, Message};
    /// let gw = Gateway::builder(settings)
    ///     .default_scope("LLM")
    ///     .telemetry_sink(Arc::new(NullSink)) // record rows, write them nowhere
    ///     .build()
    ///     .await?;
    /// gw.chat(vec![Message::user("hi")]).await?;
    /// assert_eq!(gw.telemetry_rows_accepted(), 1);
    /// gw.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub fn builder(settings: Settings) -> GatewayBuilder {
        GatewayBuilder::new(settings)
    }

    pub(crate) fn from_core(core: Arc<Core>, default_scope: Arc<str>) -> Self {
        Self {
            core,
            default_scope,
        }
    }

    /// The handle of chat scope `name`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway::GatewayError> {
    /// # let (settings, mocks) = polygateway_testkit::doc_setup(&["LLM"], &[]).await;
    /// let gw = polygateway::Gateway::from_settings(settings, "LLM").await?;
    /// let llm = gw.chat_scope("LLM")?;
    /// assert_eq!(llm.name(), "LLM");
    /// // An unknown scope is an error naming the configured ones.
    /// let err = gw.chat_scope("JUDGE").unwrap_err();
    /// assert!(err.to_string().contains("configured: LLM"), "{err}");
    /// gw.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub fn chat_scope(&self, name: &str) -> Result<ChatHandle, GatewayError> {
        ScopeHandle::new(&self.core, name)
    }

    /// The handle of embeddings scope `name`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway::GatewayError> {
    /// # let (settings, mocks) = polygateway_testkit::doc_setup(&["LLM", "EMBED"], &[]).await;
    /// use polygateway::CallOptions;
    /// let gw = polygateway::Gateway::from_settings(settings, "LLM").await?;
    /// let embed = gw.embedding_scope("EMBED")?;
    /// let out = embed.embed(vec!["a cat".into(), "a dog".into()], CallOptions::new()).await?;
    /// assert_eq!(out.vectors.len(), 2);
    /// assert_eq!(out.model, "embed-model");
    /// gw.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub fn embedding_scope(&self, name: &str) -> Result<EmbeddingHandle, GatewayError> {
        ScopeHandle::new(&self.core, name)
    }

    /// The handle of OCR scope `name`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway::GatewayError> {
    /// # let (settings, mocks) = polygateway_testkit::doc_setup(&["LLM", "OCR"], &[]).await;
    /// use polygateway::CallOptions;
    /// let gw = polygateway::Gateway::from_settings(settings, "LLM").await?;
    /// let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR fake png body".to_vec();
    /// let text = gw.ocr_scope("OCR")?.recognize_text(png, CallOptions::new()).await?;
    /// assert_eq!(text.provenance.source_name, "monkey_1");
    /// gw.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub fn ocr_scope(&self, name: &str) -> Result<OcrHandle, GatewayError> {
        ScopeHandle::new(&self.core, name)
    }

    /// Chat on the default scope with default options.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway::GatewayError> {
    /// # let (settings, mocks) = polygateway_testkit::doc_setup(&["LLM"], &[]).await;
    /// use polygateway::Message;
    /// use polygateway_testkit::mock_llm::MOCK_CONTENT;
    /// let gw = polygateway::Gateway::from_settings(settings, "LLM").await?;
    /// let reply = gw.chat(vec![Message::system("Be brief."), Message::user("Say hello")]).await?;
    /// assert_eq!(reply.content, MOCK_CONTENT);
    /// assert!(!reply.cache_hit);
    /// gw.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub async fn chat(&self, messages: Vec<Message>) -> Result<LlmResponse, GatewayError> {
        self.chat_scope(&self.default_scope)?.chat(messages).await
    }

    /// Chat on the default scope.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway::GatewayError> {
    /// use polygateway_testkit::{Behaviour, MockUpstream};
    /// let mock = MockUpstream::start(Behaviour::healthy()).await;
    /// # let settings = polygateway_testkit::mock_settings(
    /// #     &[("LLM", &mock.base_url())],
    /// #     &[("LLM__OPENAI__1__MODEL", "gpt-test")],
    /// # );
    /// use polygateway::{CallOptions, Message};
    /// let gw = polygateway::Gateway::from_settings(settings, "LLM").await?;
    /// let options = CallOptions::new().tenant_id("acme").overlay_param("temperature", 0.2);
    /// gw.chat_with(vec![Message::user("hi")], options).await?;
    /// // The sampling overlay is merged into the request body.
    /// assert_eq!(mock.last_request().unwrap().body["temperature"], 0.2);
    /// gw.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub async fn chat_with(
        &self,
        messages: Vec<Message>,
        options: CallOptions,
    ) -> Result<LlmResponse, GatewayError> {
        self.chat_scope(&self.default_scope)?
            .chat_with(messages, options)
            .await
    }

    /// Typed structured chat on the default scope (see [`ChatHandle::chat_structured`]).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway::GatewayError> {
    /// use polygateway_testkit::{Behaviour, MockUpstream};
    /// let mock = MockUpstream::start(Behaviour::healthy_with(r#"{"score": 5, "reason": "correct"}"#)).await;
    /// # let settings = polygateway_testkit::mock_settings(
    /// #     &[("LLM", &mock.base_url())],
    /// #     &[("LLM__OPENAI__1__MODEL", "gpt-test")],
    /// # );
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// struct Verdict {
    ///     score: u8,
    ///     reason: String,
    /// }
    /// let gw = polygateway::Gateway::from_settings(settings, "LLM").await?;
    /// let (resp, verdict): (_, Verdict) = gw
    ///     .chat_structured(vec![polygateway::Message::user("grade: 2+2=4")], Default::default())
    ///     .await?;
    /// assert_eq!((verdict.score, verdict.reason.as_str()), (5, "correct"));
    /// assert!(resp.structured_data.is_some());
    /// gw.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub async fn chat_structured<T>(
        &self,
        messages: Vec<Message>,
        options: CallOptions,
    ) -> Result<(LlmResponse, T), GatewayError>
    where
        T: serde::de::DeserializeOwned + schemars::JsonSchema + Send,
    {
        self.chat_scope(&self.default_scope)?
            .chat_structured(messages, options)
            .await
    }

    /// Streaming chat on the default scope (see [`ChatHandle::chat_stream`]).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway::GatewayError> {
    /// # let (settings, mocks) = polygateway_testkit::doc_setup(&["LLM"], &[]).await;
    /// use futures::StreamExt;
    /// use polygateway::{CallOptions, ChatEvent, Message};
    /// use polygateway_testkit::mock_llm::MOCK_CONTENT;
    /// let gw = polygateway::Gateway::from_settings(settings, "LLM").await?;
    /// let mut stream = gw.chat_stream(vec![Message::user("hi")], CallOptions::new())?;
    /// let mut text = String::new();
    /// while let Some(event) = stream.next().await {
    ///     match event? {
    ///         ChatEvent::Content(delta) => text.push_str(&delta),
    ///         ChatEvent::Done(resp) => assert_eq!(resp.content, text),
    ///         _ => {}
    ///     }
    /// }
    /// assert_eq!(text, MOCK_CONTENT);
    /// gw.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub fn chat_stream(
        &self,
        messages: Vec<Message>,
        options: CallOptions,
    ) -> Result<ChatStream, GatewayError> {
        Ok(self
            .chat_scope(&self.default_scope)?
            .chat_stream(messages, options))
    }

    /// Embed on the default scope.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway::GatewayError> {
    /// # let (settings, mocks) = polygateway_testkit::doc_setup(&["EMBED"], &[]).await;
    /// let gw = polygateway::Gateway::from_settings(settings, "EMBED").await?;
    /// let out = gw.embed(vec!["first".into(), "second".into(), "third".into()]).await?;
    /// assert_eq!(out.vectors.len(), 3);
    /// assert!(out.vectors.iter().all(|v| v.len() == out.dim));
    /// gw.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub async fn embed(&self, texts: Vec<String>) -> Result<EmbeddingResponse, GatewayError> {
        self.embedding_scope(&self.default_scope)?
            .embed(texts, CallOptions::new())
            .await
    }

    /// OCR text on the default scope.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway::GatewayError> {
    /// # let (settings, mocks) = polygateway_testkit::doc_setup(&["OCR"], &[]).await;
    /// use polygateway_testkit::mock_ocr::fixture::SAMPLE_TEXT;
    /// let gw = polygateway::Gateway::from_settings(settings, "OCR").await?;
    /// let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR fake png body".to_vec();
    /// let text = gw.recognize_text(png).await?;
    /// assert_eq!(text.text, SAMPLE_TEXT);
    /// // Not an image: rejected locally, before any quota is taken.
    /// assert!(gw.recognize_text(b"%PDF-1.7".to_vec()).await.is_err());
    /// gw.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub async fn recognize_text(&self, image: Vec<u8>) -> Result<OcrTextResult, GatewayError> {
        self.ocr_scope(&self.default_scope)?
            .recognize_text(image, CallOptions::new())
            .await
    }

    /// OCR layout on the default scope.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway::GatewayError> {
    /// # let (settings, mocks) = polygateway_testkit::doc_setup(&["OCR"], &[]).await;
    /// use polygateway_testkit::mock_ocr::fixture::SAMPLE_PAGE_SIZE;
    /// let gw = polygateway::Gateway::from_settings(settings, "OCR").await?;
    /// let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR fake png body".to_vec();
    /// let layout = gw.parse_layout(png).await?;
    /// assert!(!layout.elements.is_empty());
    /// assert!(layout.page_sizes.iter().all(|size| *size == SAMPLE_PAGE_SIZE));
    /// gw.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub async fn parse_layout(&self, image: Vec<u8>) -> Result<OcrLayoutResult, GatewayError> {
        self.ocr_scope(&self.default_scope)?
            .parse_layout(image, CallOptions::new())
            .await
    }

    /// Per-source health of the default OCR scope.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway::GatewayError> {
    /// # let (settings, mocks) = polygateway_testkit::doc_setup(&["OCR"], &[]).await;
    /// let gw = polygateway::Gateway::from_settings(settings, "OCR").await?;
    /// let health = gw.check_health().await?;
    /// assert_eq!(health.into_iter().collect::<Vec<_>>(), [("monkey_1".to_string(), true)]);
    /// gw.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub async fn check_health(&self) -> Result<BTreeMap<String, bool>, GatewayError> {
        Ok(self.ocr_scope(&self.default_scope)?.check_health().await)
    }

    /// Names of the configured scopes.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway::GatewayError> {
    /// # let (settings, mocks) = polygateway_testkit::doc_setup(&["LLM", "EMBED"], &[]).await;
    /// let gw = polygateway::Gateway::from_settings(settings, "LLM").await?;
    /// // Every configured scope is built, in name order, whatever the default scope.
    /// assert_eq!(gw.scopes(), ["EMBED", "LLM"]);
    /// gw.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub fn scopes(&self) -> Vec<String> {
        self.core.scopes.keys().cloned().collect()
    }

    /// The resolved settings this gateway was built from (secrets stay redacted in `Debug`).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway::GatewayError> {
    /// # let (settings, mocks) = polygateway_testkit::doc_setup(&["LLM"], &[]).await;
    /// let gw = polygateway::Gateway::from_settings(settings, "LLM").await?;
    /// let llm = gw.settings().scope("LLM").expect("configured");
    /// assert_eq!(llm.sources[0].model, "gpt-test");
    /// assert!(!format!("{:?}", gw.settings()).contains("sk-test"));
    /// gw.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub fn settings(&self) -> &Settings {
        &self.core.settings
    }

    /// A live snapshot of every source of scope `name`: breaker, health, pacer, counters.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway::GatewayError> {
    /// # let (settings, mocks) = polygateway_testkit::doc_setup(&["LLM"], &[]).await;
    /// use polygateway::{ports::BreakerState, Message};
    /// let gw = polygateway::Gateway::from_settings(settings, "LLM").await?;
    /// gw.chat(vec![Message::user("hi")]).await?;
    /// let sources = gw.sources("LLM").await?;
    /// assert_eq!(sources.len(), 1);
    /// assert_eq!((sources[0].name.as_str(), sources[0].attempts), ("openai_1", 1));
    /// assert_eq!(sources[0].breaker, Some(BreakerState::Closed));
    /// gw.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub async fn sources(&self, name: &str) -> Result<Vec<SourceSnapshot>, GatewayError> {
        let entry = self.core.entry(name)?;
        Ok(snapshot::collect(&self.core, entry).await)
    }

    /// Spend against limit of every configured spend budget in its current window: each chat
    /// scope's `{SCOPE}__BUDGET` (`scope:<SCOPE>`), then each entry of `PGW_TENANT_BUDGETS`
    /// (`tenant:<id>`). Spent includes the estimates of calls in flight. Read from the limiter
    /// backend, so with Redis it is every process's spend.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use polygateway_testkit::{Behaviour, MockUpstream};
    /// # let mock = MockUpstream::start(Behaviour::healthy()).await;
    /// # let dir = tempfile::tempdir()?;
    /// # let prices = dir.path().join("prices.json");
    /// # std::fs::write(&prices, r#"{"gpt-test": {"input_per_1m": 1.0, "output_per_1m": 1.0}}"#)?;
    /// # let settings = polygateway_testkit::mock_settings(
    /// #     &[("LLM", &mock.base_url())],
    /// #     &[("LLM__OPENAI__1__MODEL", "gpt-test"), ("PGW_PRICING_PATH", prices.to_str().unwrap()),
    /// #       ("PGW_TENANT_BUDGETS", "acme=2/month")],
    /// # );
    /// use polygateway::{CallOptions, Message};
    /// // Settings: PGW_TENANT_BUDGETS=acme=2/month and a pricing table.
    /// let gw = polygateway::Gateway::from_settings(settings, "LLM").await?;
    /// let options = CallOptions::new().tenant_id("acme");
    /// gw.chat_scope("LLM")?.chat_with(vec![Message::user("hi")], options).await?;
    /// let acme = &gw.budgets().await?[0];
    /// assert_eq!((acme.name.as_str(), acme.limit, acme.period.as_str()), ("tenant:acme", 2.0, "month"));
    /// assert!(acme.spent > 0.0 && acme.remaining < 2.0);
    /// gw.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub async fn budgets(&self) -> Result<Vec<BudgetStatus>, GatewayError> {
        self.budgets_with(&[]).await
    }

    /// [`Self::budgets`] followed by `extra` ones (the server's key budgets).
    pub(crate) async fn budgets_with(
        &self,
        extra: &[polygateway_actors::BudgetClaim],
    ) -> Result<Vec<BudgetStatus>, GatewayError> {
        let gov = &self.core.governance;
        let claims = self.core.budgets.configured().chain(extra);
        budget::statuses(&gov.gate, gov.timeout, claims).await
    }

    /// The dashboard's time series over the last `range_s` seconds (docs/behaviour.md §12.8):
    /// per scope calls by outcome, latency and TTFT quantiles, capacity wait by reason, spend;
    /// per source attempts by result, pacer limit, in flight and the breaker's timeline; the top
    /// keys and tenants. One point per second up to 15 minutes, per minute up to 24 hours. The
    /// same series `GET /status.json` serves, read from the ring the metrics' events feed.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway::GatewayError> {
    /// # let (settings, mocks) = polygateway_testkit::doc_setup(&["SERIES_DOC"], &[]).await;
    /// use polygateway::Message;
    /// let gw = polygateway::Gateway::from_settings(settings, "SERIES_DOC").await?;
    /// gw.chat(vec![Message::user("hi")]).await?;
    /// let view = gw.series(60);
    /// assert_eq!((view.step_s, view.points), (1, 60));
    /// let scope = &view.scopes["SERIES_DOC"];
    /// assert_eq!(scope.calls["ok"].iter().sum::<u64>(), 1);
    /// assert!(scope.latency_ms.p50.iter().any(Option::is_some));
    /// assert!(scope.sources.contains_key("openai_1"));
    /// gw.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub fn series(&self, range_s: u64) -> polygateway_actors::runtime::series::View {
        let mut view = polygateway_actors::runtime::series::Book::global()
            .view(crate::metrics::unix_now(), range_s);
        let mine = self.scopes();
        view.scopes.retain(|name, _| mine.contains(name));
        view
    }

    /// The chat scopes a spend budget cannot count (a source's model has no price): the server
    /// refuses a key budget that reaches one.
    #[cfg(feature = "server")]
    pub(crate) fn unpriced_scopes(&self) -> impl Iterator<Item = &str> {
        self.core.budgets.unpriced_scopes()
    }

    /// Limiter leases currently held in scope `name` (0 when idle: an invariant soaks check).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway::GatewayError> {
    /// # let (settings, mocks) = polygateway_testkit::doc_setup(&["LLM"], &[]).await;
    /// let gw = polygateway::Gateway::from_settings(settings, "LLM").await?;
    /// assert_eq!(gw.leases_held("LLM").await?, 0); // idle
    /// assert!(gw.leases_held("JUDGE").await.is_err()); // not a configured scope
    /// gw.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub async fn leases_held(&self, name: &str) -> Result<u64, GatewayError> {
        self.core.entry(name)?;
        self.core
            .governance
            .gate
            .leases_held(name)
            .await
            .map_err(|e| GatewayError::Shutdown(e.to_string()))
    }

    /// Chaos hook for supervision tests and drills: make the actor of source `source` in scope
    /// `scope` fail, as a panic would. The router restarts it under the restart policy. Only with
    /// the `test-util` feature: a production build has no way to crash its own actors.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway::GatewayError> {
    /// # let (settings, mocks) = polygateway_testkit::doc_setup(&["LLM"], &[]).await;
    /// let gw = polygateway::Gateway::from_settings(settings, "LLM").await?;
    /// gw.inject_source_failure("LLM", "openai_1")?; // restarted by its router
    /// assert!(gw.inject_source_failure("LLM", "no_such_source").is_err());
    /// gw.shutdown().await;
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "test-util")]
    pub fn inject_source_failure(&self, scope: &str, source: &str) -> Result<(), GatewayError> {
        let erased = self.core.entry(scope)?.erased();
        let index = erased
            .source_names()
            .iter()
            .position(|n| **n == *source)
            .ok_or_else(|| {
                GatewayError::SourceNotConfigured(format!(
                    "source {source} is not in scope {scope}"
                ))
            })?;
        erased.crash_source(index);
        Ok(())
    }

    /// Chaos hook for supervision tests and drills: make the admission actor (the door to the
    /// limiter and breaker backends) fail. The supervisor restarts it with backoff; meanwhile
    /// calls fail closed with `GovernanceBackendError`. Only with the `test-util` feature.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway::GatewayError> {
    /// # let (settings, mocks) = polygateway_testkit::doc_setup(&["LLM"], &[]).await;
    /// use polygateway::{Message, UnavailableReason};
    /// let gw = polygateway::Gateway::from_settings(settings, "LLM").await?;
    /// gw.inject_admission_failure();
    /// // Until the restart, calls fail closed (never ungoverned).
    /// if let Err(e) = gw.chat(vec![Message::user("x")]).await {
    ///     let reason = e.unavailable().map(|u| u.reason);
    ///     assert_eq!(reason, Some(UnavailableReason::GovernanceBackendDown));
    /// }
    /// gw.shutdown().await;
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "test-util")]
    pub fn inject_admission_failure(&self) {
        if let Some(entry) = self.core.scopes.values().next() {
            entry.erased().crash_admission();
        }
    }

    /// Telemetry health (docs/behaviour.md §8.6): degraded/fatal, reason, dropped rows.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway::GatewayError> {
    /// # let (settings, mocks) = polygateway_testkit::doc_setup(&["LLM"], &[]).await;
    /// let gw = polygateway::Gateway::from_settings(settings, "LLM").await?;
    /// let status = gw.telemetry_status();
    /// assert!(!status.degraded && !status.fatal, "{:?}", status.reason);
    /// assert_eq!(status.dropped_rows, 0);
    /// gw.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub fn telemetry_status(&self) -> TelemetryStatus {
        self.core.telemetry.writer.status()
    }

    /// Rows accepted by the telemetry queue so far (written or pending).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway::GatewayError> {
    /// let dir = tempfile::tempdir().unwrap();
    /// let path = dir.path().join("telemetry.sqlite").display().to_string();
    /// # let (settings, mocks) = polygateway_testkit::doc_setup(
    /// #     &["LLM"],
    /// #     &[("PGW_TELEMETRY_BACKEND", "sqlite"), ("PGW_TELEMETRY_SQLITE_PATH", &path)],
    /// # )
    /// # .await;
    /// use polygateway::Message;
    /// // Settings: PGW_TELEMETRY_BACKEND=sqlite, PGW_TELEMETRY_SQLITE_PATH=<dir>/telemetry.sqlite.
    /// let gw = polygateway::Gateway::from_settings(settings, "LLM").await?;
    /// assert_eq!(gw.telemetry_rows_accepted(), 0);
    /// gw.chat(vec![Message::user("hi")]).await?;
    /// gw.chat(vec![Message::user("again")]).await?;
    /// assert_eq!(gw.telemetry_rows_accepted(), 2); // one row per attempt
    /// gw.shutdown().await; // writes what is still pending
    /// let db = rusqlite::Connection::open(dir.path().join("telemetry.sqlite")).unwrap();
    /// let sql = format!("SELECT count(*) FROM {}", polygateway::telemetry::DEFAULT_TABLE);
    /// let written: i64 = db.query_row(&sql, [], |row| row.get(0)).unwrap();
    /// assert_eq!(written, 2);
    /// # Ok(()) }
    /// ```
    pub fn telemetry_rows_accepted(&self) -> u64 {
        self.core.telemetry.writer.accepted()
    }

    /// The limiter backend and its call bound, for the server's per-key limits (the same store
    /// as every scope's gates, so server replicas sharing Redis share them too).
    #[cfg(feature = "server")]
    pub(crate) fn key_gate(&self) -> (Arc<dyn polygateway_actors::GateBackend>, Duration) {
        (
            Arc::clone(&self.core.governance.gate),
            self.core.governance.timeout,
        )
    }

    /// Write every telemetry row queued so far, bounded by 5 s (a warning says when it was not
    /// done in time). The batch journal waits on it (`batch::telemetry_barrier`).
    pub(crate) async fn flush_telemetry(&self) {
        if let Err(reason) = self
            .core
            .telemetry
            .writer
            .flush(Duration::from_secs(5))
            .await
        {
            tracing::warn!("telemetry not flushed: {reason}");
        }
    }

    /// Stop: calls in flight end with a shutdown error and release what they hold, the Redis
    /// bookkeeping they owe is finished, telemetry is flushed, the actor tree stops. Bounded
    /// (≈ 12 s at most) and idempotent; closes only what the gateway built itself.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway::GatewayError> {
    /// # let (settings, mocks) = polygateway_testkit::doc_setup(&["LLM"], &[]).await;
    /// use polygateway::{GatewayError, Message};
    /// let gw = polygateway::Gateway::from_settings(settings, "LLM").await?;
    /// let clone = gw.clone();
    /// gw.shutdown().await;
    /// clone.shutdown().await; // idempotent, from any clone
    /// let after = clone.chat(vec![Message::user("hi")]).await;
    /// assert!(matches!(after, Err(GatewayError::Shutdown(_))), "{after:?}");
    /// # Ok(()) }
    /// ```
    pub async fn shutdown(&self) {
        if self.core.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        let core = &self.core;
        // Calls first (their cancelled attempts still get rows), then telemetry, then the tree.
        core.runtime.quiesce(Duration::from_secs(2)).await;
        self.flush_telemetry().await;
        core.runtime.shutdown(Duration::from_secs(3)).await;
        if core.owned.telemetry_sink {
            let sink = core.telemetry.writer.sink();
            let _ = tokio::time::timeout(Duration::from_secs(2), sink.shutdown()).await;
        }
        #[cfg(feature = "redis")]
        for redis in &core.owned.redis {
            redis.close().await;
        }
    }
}
