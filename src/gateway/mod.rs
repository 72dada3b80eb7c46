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
mod failure;
mod handle;
mod ocr;
mod record;
mod snapshot;
mod stream;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use polygateway_actors::runtime::{ActorSlot, Governance, Runtime};
use polygateway_actors::telemetry::{TelemetryArgs, TelemetryMsg};

pub use build::GatewayBuilder;
pub use handle::{Chat, Embeddings, Kind, Ocr, ScopeHandle};

/// A handle to one chat scope (LLM, VLM, JUDGE, …).
pub type ChatHandle = ScopeHandle<Chat>;
/// A handle to one embeddings scope.
pub type EmbeddingHandle = ScopeHandle<Embeddings>;
/// A handle to one OCR scope.
pub type OcrHandle = ScopeHandle<Ocr>;
pub use snapshot::SourceSnapshot;
pub use stream::{ChatEvent, ChatStream};

use crate::cache::coalesce::Coalescer;
use crate::cache::ResponseCache;
use crate::config::{ScopeKind, Settings};
use crate::error::GatewayError;
use crate::telemetry::row::TelemetryRow;
use crate::telemetry::TelemetryStatus;
use crate::types::{
    CallOptions, EmbeddingResponse, LlmResponse, Message, OcrLayoutResult, OcrTextResult,
};

pub(crate) use record::Telemetry;

/// Response cache wiring.
pub(crate) struct CacheLayer {
    pub backend: Arc<dyn ResponseCache>,
    pub namespace: String,
    pub ttl: Duration,
    pub coalescer: Coalescer<String, LlmResponse>,
}

pub enum ScopeEntry {
    Chat(chat::ChatScope),
    Embeddings(embed::EmbedScope),
    Ocr(ocr::OcrScope),
}

/// What the runtime built itself and therefore closes (SPEC §10.3); injected parts are left alone.
#[derive(Default)]
pub(crate) struct Owned {
    pub redis: Vec<crate::redis::RedisGovernance>,
    pub telemetry_sink: bool,
}

pub(crate) struct Core {
    pub runtime: Runtime,
    pub governance: Governance,
    pub scopes: BTreeMap<String, ScopeEntry>,
    pub telemetry: Telemetry,
    pub telemetry_args: TelemetryArgs<TelemetryRow>,
    pub telemetry_actor: ActorSlot<TelemetryMsg>,
    pub cache: Option<CacheLayer>,
    pub structured_max_retries: u32,
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
    pub async fn from_env(scope: &str) -> Result<Self, GatewayError> {
        let settings = Settings::from_env().map_err(|e| GatewayError::Config(e.to_string()))?;
        Self::from_settings(settings, scope).await
    }

    /// Build from resolved settings.
    pub async fn from_settings(settings: Settings, scope: &str) -> Result<Self, GatewayError> {
        GatewayBuilder::new(settings)
            .default_scope(scope)
            .build()
            .await
    }

    /// A builder to inject ports (governance backends, telemetry sink, cache, clock, selector).
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
    pub fn chat_scope(&self, name: &str) -> Result<ChatHandle, GatewayError> {
        ScopeHandle::new(&self.core, name)
    }

    /// The handle of embeddings scope `name`.
    pub fn embedding_scope(&self, name: &str) -> Result<EmbeddingHandle, GatewayError> {
        ScopeHandle::new(&self.core, name)
    }

    /// The handle of OCR scope `name`.
    pub fn ocr_scope(&self, name: &str) -> Result<OcrHandle, GatewayError> {
        ScopeHandle::new(&self.core, name)
    }

    /// Chat on the default scope with default options.
    pub async fn chat(&self, messages: Vec<Message>) -> Result<LlmResponse, GatewayError> {
        self.chat_scope(&self.default_scope)?.chat(messages).await
    }

    /// Chat on the default scope.
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
    pub async fn embed(&self, texts: Vec<String>) -> Result<EmbeddingResponse, GatewayError> {
        self.embedding_scope(&self.default_scope)?
            .embed(texts, CallOptions::new())
            .await
    }

    /// OCR text on the default scope.
    pub async fn recognize_text(&self, image: Vec<u8>) -> Result<OcrTextResult, GatewayError> {
        self.ocr_scope(&self.default_scope)?
            .recognize_text(image, CallOptions::new())
            .await
    }

    /// OCR layout on the default scope.
    pub async fn parse_layout(&self, image: Vec<u8>) -> Result<OcrLayoutResult, GatewayError> {
        self.ocr_scope(&self.default_scope)?
            .parse_layout(image, CallOptions::new())
            .await
    }

    /// Per-source health of the default OCR scope.
    pub async fn check_health(&self) -> Result<BTreeMap<String, bool>, GatewayError> {
        Ok(self.ocr_scope(&self.default_scope)?.check_health().await)
    }

    /// Names of the configured scopes.
    pub fn scopes(&self) -> Vec<String> {
        self.core.scopes.keys().cloned().collect()
    }

    /// The resolved settings this gateway was built from (secrets stay redacted in `Debug`).
    pub fn settings(&self) -> &Settings {
        &self.core.settings
    }

    /// A live snapshot of every source of scope `name`: breaker, health, pacer, counters.
    pub async fn sources(&self, name: &str) -> Result<Vec<SourceSnapshot>, GatewayError> {
        let entry = self.core.entry(name)?;
        Ok(snapshot::collect(&self.core, entry.erased()).await)
    }

    /// Limiter leases currently held in scope `name` (0 when idle: an invariant soaks check).
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
    /// `scope` fail, as a panic would. The router restarts it under the restart policy.
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
    /// calls fail closed with `GovernanceBackendError`.
    pub fn inject_admission_failure(&self) {
        if let Some(entry) = self.core.scopes.values().next() {
            entry.erased().crash_admission();
        }
    }

    /// Telemetry health (SPEC §8.6): degraded/fatal, reason, dropped rows.
    pub fn telemetry_status(&self) -> TelemetryStatus {
        self.core.telemetry_args.status()
    }

    /// Rows accepted by the telemetry queue so far (written or pending).
    pub fn telemetry_rows_accepted(&self) -> u64 {
        self.core.telemetry.queue.accepted()
    }

    /// Stop: calls in flight end with a shutdown error and release what they hold, the Redis
    /// bookkeeping they owe is finished, telemetry is flushed, the actor tree stops. Bounded
    /// (≈ 12 s at most) and idempotent; closes only what the gateway built itself.
    pub async fn shutdown(&self) {
        if self.core.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        let core = &self.core;
        // Calls first (their cancelled attempts still get rows), then telemetry, then the tree.
        core.runtime.quiesce(Duration::from_secs(2)).await;
        if let Ok(actor) = core.telemetry_actor.get() {
            let flushed = tokio::time::timeout(Duration::from_secs(5), async {
                ractor::call!(actor, TelemetryMsg::Flush)
            })
            .await;
            if !matches!(flushed, Ok(Ok(_))) {
                tracing::warn!("telemetry flush did not finish within 5 s");
            }
        }
        core.runtime.shutdown(Duration::from_secs(3)).await;
        if core.owned.telemetry_sink {
            let _ =
                tokio::time::timeout(Duration::from_secs(2), core.telemetry_args.sink.shutdown())
                    .await;
        }
        for redis in &core.owned.redis {
            redis.close().await;
        }
    }
}
