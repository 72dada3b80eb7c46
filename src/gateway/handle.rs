//! One handle type for every kind of scope: `ScopeHandle<Chat>`, `ScopeHandle<Embeddings>`,
//! `ScopeHandle<Ocr>` (aliased as [`ChatHandle`](super::ChatHandle), …). The kind only decides
//! which calls the handle offers; lookup, cloning and identity are shared.

use std::marker::PhantomData;
use std::sync::Arc;

use super::chat::ChatScope;
use super::embed::EmbedScope;
use super::ocr::OcrScope;
use super::{Core, ScopeEntry};
use crate::config::ScopeKind;
use crate::error::GatewayError;

mod sealed {
    use super::ScopeEntry;

    /// How a kind finds its scope; not nameable outside the crate.
    pub trait Sealed {
        type Scope;
        fn of(entry: &ScopeEntry) -> Option<&Self::Scope>;
    }
}

/// A kind of scope (chat, embeddings, OCR). Sealed: the three kinds are the crate's.
pub trait Kind: sealed::Sealed + Send + Sync + 'static {
    /// The kind as configuration names it.
    const KIND: ScopeKind;
}

/// Chat scopes (LLM, VLM, JUDGE, …).
#[derive(Debug, Clone, Copy)]
pub struct Chat;
/// Embeddings scopes.
#[derive(Debug, Clone, Copy)]
pub struct Embeddings;
/// MonkeyOCR scopes.
#[derive(Debug, Clone, Copy)]
pub struct Ocr;

macro_rules! kind {
    ($marker:ident, $scope:ty, $variant:ident) => {
        impl sealed::Sealed for $marker {
            type Scope = $scope;
            fn of(entry: &ScopeEntry) -> Option<&$scope> {
                match entry {
                    ScopeEntry::$variant(scope) => Some(scope),
                    _ => None,
                }
            }
        }
        impl Kind for $marker {
            const KIND: ScopeKind = ScopeKind::$variant;
        }
    };
}
kind!(Chat, ChatScope, Chat);
kind!(Embeddings, EmbedScope, Embeddings);
kind!(Ocr, OcrScope, Ocr);

/// A handle to one scope of a running gateway. Cheap to clone, `Send + Sync`.
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
            Some(entry) if K::of(entry).is_some() => Ok(Self {
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
    pub fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn scope(&self) -> &<K as sealed::Sealed>::Scope {
        self.core
            .scopes
            .get(&*self.name)
            .and_then(K::of)
            .expect("a handle is only built for an existing scope of its kind")
    }
}
