//! What every request handler shares: the gateway, the virtual keys, the model → scope table,
//! the server settings, the draining flag and the log of recent errors the status page shows.
//! Not the routes themselves.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use tokio_util::sync::CancellationToken;

use super::auth::keys::{KeyStore, VirtualKey};
use super::auth::limits::{admit_key, KeyLease, KeyRefusal};
use super::errors::ApiError;
use crate::config::{ScopeKind, ServerSettings};
use crate::Gateway;

/// How many recent errors the status page keeps per scope.
const RECENT_ERRORS: usize = 8;

/// One error answered to a client, as the status page lists it.
#[derive(Clone)]
pub(crate) struct RecentError {
    pub(crate) at: SystemTime,
    pub(crate) status: u16,
    pub(crate) code: &'static str,
    pub(crate) message: String,
}

/// Recent errors per scope (bounded).
#[derive(Clone, Default)]
pub(crate) struct ErrorLog(Arc<Mutex<BTreeMap<String, VecDeque<RecentError>>>>);

impl ErrorLog {
    pub(crate) fn record(&self, scope: &str, e: &ApiError) {
        let Ok(mut log) = self.0.lock() else { return };
        let entries = log.entry(scope.to_string()).or_default();
        if entries.len() == RECENT_ERRORS {
            entries.pop_front();
        }
        entries.push_back(RecentError {
            at: SystemTime::now(),
            status: e.status,
            code: e.code,
            message: e.message.chars().take(300).collect(),
        });
    }

    pub(crate) fn recent(&self, scope: &str) -> Vec<RecentError> {
        self.0
            .lock()
            .map(|log| {
                log.get(scope)
                    .map(|e| e.iter().rev().cloned().collect())
                    .unwrap_or_default()
            })
            .unwrap_or_default()
    }
}

pub(crate) struct App {
    pub(crate) gw: Gateway,
    pub(crate) keys: KeyStore,
    /// Request `model` → scope (aliases and the scope names themselves).
    pub(crate) models: BTreeMap<String, String>,
    pub(crate) settings: ServerSettings,
    pub(crate) draining: AtomicBool,
    /// Cancelled when the drain timeout passes: whatever still runs ends, cancelling its call.
    pub(crate) stop: CancellationToken,
    pub(crate) errors: ErrorLog,
    /// Requests per ingress (chat, messages, responses, embeddings, ocr).
    pub(crate) ingress: super::ingress::IngressCounts,
}

impl App {
    pub(crate) fn new(gw: Gateway, keys: KeyStore) -> Result<Self, crate::GatewayError> {
        let settings = gw.settings().server.clone();
        let models = crate::openai::models::model_table(&gw)?;
        refuse_uncountable_budgets(&gw, &keys)?;
        Ok(Self {
            gw,
            keys,
            models,
            settings,
            draining: AtomicBool::new(false),
            stop: CancellationToken::new(),
            errors: ErrorLog::default(),
            ingress: Default::default(),
        })
    }

    /// One request's answer: `work` runs unless the drain timeout passes first (then 503, and
    /// `work` is dropped). An error becomes its HTTP answer and is recorded against the scope
    /// `work` resolved (once known) for the status page.
    pub(crate) async fn answer(
        &self,
        work: impl AsyncFnOnce(&mut Option<String>) -> Result<Response, ApiError>,
    ) -> Response {
        let mut scope = None;
        let done = tokio::select! {
            done = work(&mut scope) => done,
            () = self.stop.cancelled() => Err(ApiError::from(crate::GatewayError::Shutdown(
                "the server's drain timeout passed; the call was cancelled".into(),
            ))),
        };
        match done {
            Ok(response) => response,
            Err(e) => {
                if let Some(scope) = scope {
                    self.errors.record(&scope, &e);
                }
                e.into_response()
            }
        }
    }

    pub(crate) fn draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    /// The caller's virtual key, from `Authorization: Bearer …`.
    pub(crate) fn authenticate(&self, headers: &HeaderMap) -> Result<&VirtualKey, ApiError> {
        let presented = bearer(headers)
            .filter(|v| !v.is_empty())
            .ok_or_else(ApiError::missing_key)?;
        self.keys
            .authenticate(presented)
            .ok_or_else(ApiError::unknown_key)
    }

    /// The scope a request's `model` names, if it is of `kind` and the key may use it.
    pub(crate) fn scope_for(
        &self,
        key: &VirtualKey,
        model: &str,
        kind: ScopeKind,
    ) -> Result<String, ApiError> {
        let served = || -> Vec<String> {
            self.models
                .iter()
                .filter(|(_, s)| self.kind_of(s) == Some(kind) && key.may_use(s))
                .map(|(m, _)| m.clone())
                .collect()
        };
        let scope = self
            .models
            .get(model)
            .filter(|s| self.kind_of(s) == Some(kind))
            .ok_or_else(|| ApiError::unknown_model(model, &served()))?;
        if !key.may_use(scope) {
            return Err(ApiError::forbidden_scope(key.name(), scope));
        }
        Ok(scope.clone())
    }

    pub(crate) fn kind_of(&self, scope: &str) -> Option<ScopeKind> {
        crate::openai::models::kind_of(&self.gw, scope)
    }

    /// The key's per-key limits, through the runtime's limiter backend.
    pub(crate) async fn admit(&self, key: &VirtualKey) -> Result<Option<KeyLease>, ApiError> {
        let (gate, timeout) = self.gw.key_gate();
        admit_key(&gate, key, self.gw.settings().lease_ttl, timeout)
            .await
            .map_err(|refusal| match refusal {
                KeyRefusal::Limited { gate, retry_after } => {
                    ApiError::key_limited(key.name(), gate, retry_after.as_secs_f64())
                }
                KeyRefusal::BackendDown(detail) => ApiError::governance_down(&detail),
            })
    }
}

/// A key's spend budget must be countable on every chat scope the key may call: refused at
/// start, naming the key and the scope, instead of a configuration error on each of its calls.
fn refuse_uncountable_budgets(gw: &Gateway, keys: &KeyStore) -> Result<(), crate::GatewayError> {
    for key in keys.iter() {
        let Some(budget) = key.budget() else { continue };
        if let Some(scope) = gw.unpriced_scopes().find(|s| key.may_use(s)) {
            return Err(crate::GatewayError::Config(
                crate::config::ConfigError::Assembly(format!(
                "key {}: budget {budget} reaches chat scope {scope}, which has a source without \
                 a price (PGW_PRICING_PATH): a spend budget cannot count its calls; price every \
                 model of the scope, or narrow the key's scopes, or drop its budget",
                key.name()
            )),
            ));
        }
    }
    Ok(())
}

/// The credential of `Authorization: Bearer …` (either case of the scheme), trimmed.
pub(crate) fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim)
}
