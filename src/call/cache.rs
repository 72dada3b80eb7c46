//! The cache layer (docs/behaviour.md §4): lookup, single flight, store. It sits above the ladder
//! and the governed loop: a hit takes no quota and ignores breakers but still records a row (its
//! own, with cost 0); a follower of a coalesced miss is served like a hit. Concurrent identical
//! misses are coalesced: one leader calls upstream, followers wait for its `Ok` result; if the
//! leader fails or is cancelled, a follower takes over (`crate::cache::coalesce`). A streamed call
//! is looked up and stored but not coalesced. A structured call is cached as a whole: the answer
//! that passed the ladder, under a key that adds what was asked (json, or the schema and the
//! modes the scope's sources send it in).

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Map, Value};

use super::ask::{Ask, Streamed, Structured};
use super::service::Service;
use crate::cache::coalesce::{Coalescer, Role};
use crate::cache::key::{cache_key, CacheKeyInput};
use crate::cache::{CacheLookup, ResponseCache};
use crate::error::GatewayError;
use crate::metrics::ChatMetrics;
use crate::structured::{LadderMode, StructuredMode};
use crate::telemetry::record::Telemetry;
use crate::transport::chat::ChatTransport;
use crate::types::{CallOptions, LlmResponse};

/// The response cache a gateway was built with (`PGW_CACHE_*`), shared by its chat scopes.
pub(crate) struct CacheStore {
    pub backend: Arc<dyn ResponseCache>,
    pub namespace: String,
    pub ttl: Duration,
    pub coalescer: Coalescer<String, LlmResponse>,
}

/// The cache layer of one chat scope over `inner`.
pub(crate) struct Cache<S> {
    pub store: Option<Arc<CacheStore>>,
    pub telemetry: Arc<Telemetry>,
    pub metrics: Arc<ChatMetrics>,
    /// Model fingerprint over every source's `(model, extra_body)`.
    pub fingerprint: Value,
    /// The structured modes of the scope's sources, sorted and deduplicated: which modes could
    /// have been used is part of what a typed call asked.
    pub structured_modes: Vec<StructuredMode>,
    pub inner: S,
}

impl<'r, 'a, S> Service<&'r Ask<'a, ChatTransport>> for Cache<S>
where
    S: Service<&'r Ask<'a, ChatTransport>, Response = LlmResponse> + Sync,
{
    type Response = LlmResponse;

    async fn call(&self, ask: &'r Ask<'a, ChatTransport>) -> Result<LlmResponse, GatewayError> {
        let key = self.key(ask, None);
        self.coalesced(ask, key, || self.inner.call(ask)).await
    }
}

impl<'r, 'a, S> Service<Streamed<'r, 'a>> for Cache<S>
where
    S: Service<Streamed<'r, 'a>, Response = LlmResponse> + Sync,
{
    type Response = LlmResponse;

    /// A hit comes back marked `cache_hit`: the stream replays it whole.
    async fn call(&self, streamed: Streamed<'r, 'a>) -> Result<LlmResponse, GatewayError> {
        let ask = streamed.0;
        let key = self.key(ask, None);
        if let Some(key) = &key {
            if let Some(hit) = self.lookup(ask, key).await {
                return Ok(hit);
            }
        }
        let response = self.inner.call(streamed).await?;
        if let (Some(store), Some(key)) = (&self.store, &key) {
            if response.is_cacheable() {
                store.backend.put(key, &response, store.ttl).await;
            }
        }
        Ok(response)
    }
}

impl<'r, 'a, S, C> Service<Structured<'r, 'a, C>> for Cache<S>
where
    S: Service<Structured<'r, 'a, C>, Response = LlmResponse> + Sync,
    C: Sync,
{
    type Response = LlmResponse;

    async fn call(&self, structured: Structured<'r, 'a, C>) -> Result<LlmResponse, GatewayError> {
        let asked = self
            .store
            .as_ref()
            .map(|_| match (structured.plan.mode, &structured.schema) {
                (LadderMode::Typed, Some(schema)) => json!({
                    "schema": schema.schema,
                    "modes": self.structured_modes.iter().map(|m| m.as_str()).collect::<Vec<_>>(),
                }),
                _ => json!({"mode": "json"}),
            });
        let ask = structured.ask;
        let key = self.key(ask, asked.as_ref());
        self.coalesced(ask, key, || self.inner.call(structured))
            .await
    }
}

impl<S> Cache<S> {
    /// The cache key of `ask` (and of what a structured call asked), when a cache is configured
    /// and the call does not bypass it.
    fn key(&self, ask: &Ask<'_, ChatTransport>, asked: Option<&Value>) -> Option<String> {
        let store = self.store.as_ref()?;
        let options = ask.options;
        if options.bypass_cache {
            return None;
        }
        Some(cache_key(&CacheKeyInput {
            structured: asked,
            model_fingerprint: &self.fingerprint,
            messages: ask.request.messages.as_slice(),
            namespace: options
                .cache_namespace
                .as_deref()
                .unwrap_or(&store.namespace),
            salt: options.cache_salt.as_deref(),
            sampling: &sampling(options),
        }))
    }

    /// Lookup, single flight and store around `produce`, the layer below's answer to the ask.
    async fn coalesced<F, Fut>(
        &self,
        ask: &Ask<'_, ChatTransport>,
        key: Option<String>,
        produce: F,
    ) -> Result<LlmResponse, GatewayError>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<LlmResponse, GatewayError>>,
    {
        // The call's future is boxed on both paths: inline, it would be copied into each layer's
        // frame (the coalescer's argument, its pinned copy, this future's) and size every call
        // at several times the call itself (100 KB against 9 KB) — what each caller holds and
        // moves per call in flight.
        let (Some(store), Some(key)) = (&self.store, key) else {
            return Box::pin(produce()).await;
        };
        if let Some(hit) = self.lookup(ask, &key).await {
            return Ok(hit);
        }
        let (response, role) = store
            .coalescer
            .run_with_role(
                key.clone(),
                Box::pin(async {
                    let response = produce().await?;
                    if response.is_cacheable() {
                        store.backend.put(&key, &response, store.ttl).await;
                    }
                    Ok::<_, GatewayError>(response)
                }),
            )
            .await?;
        if role == Role::Follower {
            // A follower did not pay: it is served like a cache hit, with its own record.
            return Ok(self.as_hit(ask, response));
        }
        Ok(response)
    }

    async fn lookup(&self, ask: &Ask<'_, ChatTransport>, key: &str) -> Option<LlmResponse> {
        let store = self.store.as_ref()?;
        match store.backend.get(key).await {
            CacheLookup::Hit(stored) => {
                self.metrics.cache_hits.increment(1);
                Some(self.as_hit(ask, *stored))
            }
            CacheLookup::Miss => {
                self.metrics.cache_misses.increment(1);
                None
            }
        }
    }

    fn as_hit(&self, ask: &Ask<'_, ChatTransport>, mut response: LlmResponse) -> LlmResponse {
        response.cache_hit = true;
        response.call_id = polygateway_actors::runtime::new_id();
        response.parent_call_id = ask.options.parent_call_id.clone();
        response.call_group_id = ask.options.call_group.clone();
        response.latency_ms = 0.0;
        response.capacity_wait_ms = 0.0;
        // Nothing was asked: no cost (the row says the same); the tokens stay the stored ones.
        response.cost = Some(0.0);
        response.asks = 0;
        response.last_ask_cost = Some(0.0);
        self.telemetry.record_cache_hit(&ask.context, &response);
        response
    }
}

/// What of a call's sampling its cache key covers: the overlay, and a native body as written.
///
/// A native body reaches a source of its dialect as written, fields the canonical call does not
/// carry included: they are part of what was asked, so of the key — but for what the gateway
/// sets itself (the model is the scope's, streaming is not asked of it). Built only when a
/// cache is asked: copying the body costs every call otherwise.
fn sampling(options: &CallOptions) -> Cow<'_, Map<String, Value>> {
    match &options.native {
        Some(native) => {
            let mut body = (*native.body).clone();
            body.remove("model");
            body.remove("stream");
            if let Some(beta) = &native.beta {
                body.insert("anthropic-beta".into(), Value::String(beta.clone()));
            }
            let mut sampling = options.overlay.clone();
            sampling.insert("native_body".into(), Value::Object(body));
            Cow::Owned(sampling)
        }
        None => Cow::Borrowed(&options.overlay),
    }
}
