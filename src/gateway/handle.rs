//! One handle type for every kind of scope: `ScopeHandle<Chat>`, `ScopeHandle<Embeddings>`,
//! `ScopeHandle<Ocr>` (aliased as [`ChatHandle`](super::ChatHandle), …). The kind only decides
//! which calls the handle offers; lookup, cloning and identity are shared.

use std::marker::PhantomData;
use std::sync::Arc;

use super::scopes::{ChatScope, EmbedScope, OcrScope};
use super::{Core, ScopeEntry};
use crate::config::ScopeKind;
use crate::error::GatewayError;

mod sealed {
    /// Seals [`Kind`](super::Kind): not nameable outside the crate, so code outside it cannot add
    /// a kind of scope.
    ///
    /// ```compile_fail
    /// struct Audio;
    /// // error: the trait bound `Audio: Sealed` is not satisfied
    /// impl polygateway::Kind for Audio {
    ///     const KIND: polygateway::config::ScopeKind = polygateway::config::ScopeKind::Chat;
    /// }
    /// ```
    pub trait Sealed {}
}

/// A kind of scope (chat, embeddings, OCR). Sealed: the three kinds are the crate's.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), polygateway::GatewayError> {
/// # let (settings, mocks) = polygateway_testkit::doc_setup(&["LLM", "EMBED"], &[]).await;
/// use polygateway::{Kind, ScopeHandle};
/// /// Code generic over the kind of scope, for logs and dashboards.
/// fn describe<K: Kind>(handle: &ScopeHandle<K>) -> String {
///     format!("{} ({:?})", handle.name(), K::KIND)
/// }
/// let gw = polygateway::Gateway::from_settings(settings, "LLM").await?;
/// assert_eq!(describe(&gw.chat_scope("LLM")?), "LLM (Chat)");
/// assert_eq!(describe(&gw.embedding_scope("EMBED")?), "EMBED (Embeddings)");
/// gw.shutdown().await;
/// # Ok(()) }
/// ```
pub trait Kind: sealed::Sealed + Send + Sync + 'static {
    /// The kind as configuration names it.
    const KIND: ScopeKind;
}

/// Chat scopes (LLM, VLM, JUDGE, …).
/// ```
/// use polygateway::config::{scope_kind_for, ScopeKind};
/// use polygateway::{Chat, Kind};
/// assert_eq!(Chat::KIND, ScopeKind::Chat);
/// // Any scope name not starting with OCR or EMBED is a chat scope.
/// assert_eq!(scope_kind_for("JUDGE"), Chat::KIND);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Chat;
/// Embeddings scopes.
/// ```
/// use polygateway::config::{scope_kind_for, ScopeKind};
/// use polygateway::{Embeddings, Kind};
/// assert_eq!(Embeddings::KIND, ScopeKind::Embeddings);
/// // Scope names starting with EMBED are embeddings scopes.
/// assert_eq!(scope_kind_for("EMBED_SMALL"), Embeddings::KIND);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Embeddings;
/// MonkeyOCR scopes.
/// ```
/// use polygateway::config::{scope_kind_for, ScopeKind};
/// use polygateway::{Kind, Ocr};
/// assert_eq!(Ocr::KIND, ScopeKind::Ocr);
/// // OCR and OCR_* are OCR scopes.
/// assert_eq!(scope_kind_for("OCR_FAST"), Ocr::KIND);
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Ocr;

/// A kind's marker sealed and tied to its `ScopeKind`, and its handle's way to the scope it
/// names (what a call of that kind runs through).
macro_rules! kind {
    ($marker:ident, $scope:ty, $variant:ident) => {
        impl sealed::Sealed for $marker {}
        impl Kind for $marker {
            const KIND: ScopeKind = ScopeKind::$variant;
        }
        impl ScopeHandle<$marker> {
            pub(crate) fn scope(&self) -> &$scope {
                match self.entry() {
                    ScopeEntry::$variant(scope) => scope,
                    _ => unreachable!("a handle is only built for a scope of its kind"),
                }
            }
        }
    };
}
kind!(Chat, ChatScope, Chat);
kind!(Embeddings, EmbedScope, Embeddings);
kind!(Ocr, OcrScope, Ocr);

/// A handle to one scope of a running gateway. Cheap to clone, `Send + Sync`.
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
/// use polygateway::{ChatHandle, Message};
/// let gw = polygateway::Gateway::from_settings(settings, "LLM").await?;
/// let llm: ChatHandle = gw.chat_scope("LLM")?;
/// // Hand a clone to each task; all of them call the same scope.
/// let tasks: Vec<_> = (0..3)
///     .map(|i| {
///         let llm = llm.clone();
///         tokio::spawn(async move { llm.chat(vec![Message::user(format!("question {i}"))]).await })
///     })
///     .collect();
/// for task in tasks {
///     task.await.expect("the task ran")?;
/// }
/// assert_eq!(mock.counts().chat, 3);
/// gw.shutdown().await;
/// # Ok(()) }
/// ```
pub struct ScopeHandle<K> {
    pub(crate) core: Arc<Core>,
    pub(crate) name: Arc<str>,
    kind: PhantomData<fn() -> K>,
}

impl<K> Clone for ScopeHandle<K> {
    fn clone(&self) -> Self {
        Self {
            core: Arc::clone(&self.core),
            name: Arc::clone(&self.name),
            kind: PhantomData,
        }
    }
}

impl<K: Kind> std::fmt::Debug for ScopeHandle<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScopeHandle")
            .field("scope", &self.name)
            .field("kind", &K::KIND)
            .finish()
    }
}

impl<K: Kind> ScopeHandle<K> {
    /// The handle of scope `name`, if it exists and is of kind `K`.
    pub(crate) fn new(core: &Arc<Core>, name: &str) -> Result<Self, GatewayError> {
        match core.scopes.get(name) {
            Some(entry) if entry.kind() == K::KIND => Ok(Self {
                core: Arc::clone(core),
                name: name.into(),
                kind: PhantomData,
            }),
            Some(entry) => Err(GatewayError::SourceNotConfigured(format!(
                "scope {name} serves {:?} calls, not {:?}",
                entry.kind(),
                K::KIND
            ))),
            None => Err(core.unknown_scope(name)),
        }
    }

    /// The scope's name.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway::GatewayError> {
    /// # let (settings, mocks) = polygateway_testkit::doc_setup(&["LLM", "OCR"], &[]).await;
    /// let gw = polygateway::Gateway::from_settings(settings, "LLM").await?;
    /// let handle = gw.ocr_scope("OCR")?;
    /// assert_eq!(handle.name(), "OCR");
    /// assert_eq!(format!("{handle:?}"), r#"ScopeHandle { scope: "OCR", kind: Ocr }"#);
    /// gw.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    fn entry(&self) -> &ScopeEntry {
        self.core
            .scopes
            .get(&*self.name)
            .expect("a handle is only built for an existing scope")
    }
}
