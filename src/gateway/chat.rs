//! The chat handle: `chat`, `chat_with`, `chat_structured`, `chat_stream`.
//!
//! Layer order (docs/behaviour.md §4): telemetry → cache → structured ladder → governed retry loop. The cache
//! sits outside the loop: a hit takes no quota and ignores breakers but still records a row.
//! Concurrent identical misses are coalesced: one leader calls upstream, followers wait for its
//! `Ok` result; if the leader fails or is cancelled, a follower takes over (see
//! `cache::coalesce`).

use std::sync::Arc;

use polygateway_actors::runtime::CallFailure;
use serde::de::DeserializeOwned;
use serde_json::{json, Map, Value};
use tracing::Instrument;

use super::handle::{Chat, ScopeHandle};
use crate::cache::key::{cache_key, CacheKeyInput};
use crate::cache::CacheLookup;
use crate::call::failure::to_gateway_error;
use crate::call::order::CallOrder;
use crate::error::GatewayError;
use crate::structured::ladder::{rehydrate_checked, run_ladder_checked};
use crate::structured::{validate, LadderMode, LadderPlan, SchemaRequest};
use crate::telemetry::record::{Recorder, RowContext};
use crate::transport::chat::ChatWireRequest;
use crate::types::{CallOptions, LlmResponse, Message, Structured};

/// A prepared call: the wire request, its telemetry context and its cache key.
pub(crate) struct Prepared {
    pub wire: ChatWireRequest,
    pub context: RowContext,
    pub cache_key: Option<String>,
    /// The call's id in telemetry (`call_group_id` of every row of the call).
    pub call_group: Option<String>,
    /// The caller's `parent_call_id` (the answer carries it back).
    pub parent_call_id: Option<String>,
    /// Its place among waiting calls, shared by its re-asks.
    pub order: CallOrder,
    /// The spend budgets each ask of the call counts against (empty: none configured).
    pub budgets: Vec<polygateway_actors::BudgetClaim>,
    /// The dashboard's series of the caller's server key and tenant (when there is one).
    pub parties: Parties,
}

/// The per-key and per-tenant series a call feeds (docs/behaviour.md §12.8).
#[derive(Default)]
pub(crate) struct Parties {
    key: Option<Arc<polygateway_actors::runtime::series::PartySeries>>,
    tenant: Option<Arc<polygateway_actors::runtime::series::PartySeries>>,
}

impl Parties {
    fn of(options: &CallOptions) -> Self {
        let book = polygateway_actors::runtime::series::Book::global();
        Self {
            key: options.key_name.as_deref().map(|k| book.key(k)),
            tenant: options.tenant_id.as_deref().map(|t| book.tenant(t)),
        }
    }

    /// A governed call of the scope `series` finished, `ok` or not, charged `cost`.
    fn finished(
        &self,
        series: &polygateway_actors::runtime::series::ScopeSeries,
        ok: bool,
        cost: f64,
    ) {
        let now = crate::metrics::unix_now();
        if cost > 0.0 {
            series.spend(now, cost);
        }
        for p in [&self.key, &self.tenant].into_iter().flatten() {
            p.call(now, ok, cost);
        }
    }
}

/// What of a call's sampling its cache key covers: the overlay, and a native body as written.
///
/// A native body reaches a source of its dialect as written, fields the canonical call does not
/// carry included: they are part of what was asked, so of the key — but for what the gateway
/// sets itself (the model is the scope's, streaming is not asked of it). Built only when a
/// cache is asked: copying the body costs every call otherwise.
fn cache_sampling(options: &CallOptions) -> std::borrow::Cow<'_, Map<String, Value>> {
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
            std::borrow::Cow::Owned(sampling)
        }
        None => std::borrow::Cow::Borrowed(&options.overlay),
    }
}

/// What a structured call asks for besides the conversation: the schema each attempt sends,
/// and the cache-key material that tells calls apart (plain, json, typed with a schema).
#[derive(Default)]
pub(crate) struct Asked {
    pub schema: Option<Arc<SchemaRequest>>,
    pub key: Option<Value>,
}

/// Every row of one call carries one fresh id as `call_group_id`; `parent_call_id` stays the
/// caller's chain link (or empty), as in the original library.
pub(crate) fn with_call_group(mut options: CallOptions) -> CallOptions {
    if options.call_group.is_none() {
        options.call_group = Some(polygateway_actors::runtime::new_id());
    }
    options
}

/// Chat calls of a [`ChatHandle`](crate::ChatHandle).
///
/// ```no_run
/// # async fn demo(gw: polygateway::Gateway) -> Result<(), polygateway::GatewayError> {
/// use polygateway::{CallOptions, Message};
/// let judge = gw.chat_scope("JUDGE")?;
/// let answer = judge
///     .chat_with(vec![Message::user("grade this")], CallOptions::new().tenant_id("acme"))
///     .await?;
/// println!("{} (from {})", answer.content, answer.source_name);
/// # Ok(()) }
/// ```
impl ScopeHandle<Chat> {
    /// One governed chat call with default options.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway::GatewayError> {
    /// # let (settings, mocks) = polygateway::testkit::doc_setup(&["LLM"], &[]).await;
    /// use polygateway::{testkit::mock_llm::MOCK_CONTENT, Message};
    /// let gw = polygateway::Gateway::from_settings(settings, "LLM").await?;
    /// let llm = gw.chat_scope("LLM")?;
    /// let reply = llm.chat(vec![Message::user("Say hello")]).await?;
    /// assert_eq!(reply.content, MOCK_CONTENT);
    /// assert_eq!(reply.model, "gpt-test");
    /// gw.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub async fn chat(&self, messages: Vec<Message>) -> Result<LlmResponse, GatewayError> {
        self.chat_with(messages, CallOptions::new()).await
    }

    /// One governed chat call.
    ///
    /// With `Structured::Json` the answer is repaired into a JSON value (`structured_data`);
    /// an unrepairable answer is `ResultInvalid` and is never cached.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway::GatewayError> {
    /// use polygateway::testkit::{Behaviour, MockUpstream};
    /// let mock = MockUpstream::start(Behaviour::healthy_with(r#"{"prime": true}"#)).await;
    /// # let settings = polygateway::testkit::mock_settings(
    /// #     &[("LLM", &mock.base_url())],
    /// #     &[("LLM__OPENAI__1__MODEL", "gpt-test")],
    /// # );
    /// use polygateway::{CallOptions, Message, Structured};
    /// let gw = polygateway::Gateway::from_settings(settings, "LLM").await?;
    /// let llm = gw.chat_scope("LLM")?;
    /// let options = CallOptions::new().structured(Structured::Json).session_id("s-42");
    /// let reply = llm.chat_with(vec![Message::user("Is 7 prime? Answer in JSON.")], options).await?;
    /// assert_eq!(reply.structured_data, Some(serde_json::json!({"prime": true})));
    /// gw.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub async fn chat_with(
        &self,
        messages: Vec<Message>,
        options: CallOptions,
    ) -> Result<LlmResponse, GatewayError> {
        let options = with_call_group(options);
        match options.structured {
            // Boxed: the ladder's future is several times a plain call's, and inline it would
            // size every call's future (what a caller holds per call in flight) to the ladder.
            Structured::Json => {
                Box::pin(self.laddered(messages, options, LadderPlan::json(), None, Ok::<Value, _>))
                    .await
                    .map(|(response, _)| response)
            }
            _ => {
                let prepared = self.prepare(messages, &options, &Asked::default())?;
                self.cached(&prepared, || self.governed(&prepared, false))
                    .await
            }
        }
    }

    /// A typed structured call: the whole ladder (native schema where supported, repair,
    /// validation into `T`, bounded re-ask with feedback — re-asks never count toward the
    /// breaker). Returns the response (with `structured_data`) and the typed value. A cache hit
    /// rebuilds `T` from the stored `structured_data` without network.
    ///
    /// ```no_run
    /// # async fn demo(gw: polygateway::Gateway) -> Result<(), polygateway::GatewayError> {
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// struct Verdict { score: u8, reason: String }
    /// let (_resp, verdict): (_, Verdict) = gw
    ///     .chat_structured(vec![polygateway::Message::user("grade: 2+2=4")], Default::default())
    ///     .await?;
    /// println!("{} because {}", verdict.score, verdict.reason);
    /// # Ok(()) }
    /// ```
    pub async fn chat_structured<T>(
        &self,
        messages: Vec<Message>,
        options: CallOptions,
    ) -> Result<(LlmResponse, T), GatewayError>
    where
        T: DeserializeOwned + schemars::JsonSchema + Send,
    {
        let plan = LadderPlan::typed(self.core.structured_max_retries);
        let schema = SchemaRequest::of::<T>();
        let (response, value) = self
            .laddered(
                messages,
                with_call_group(options),
                plan,
                Some(schema),
                validate::<T>,
            )
            .await?;
        match value {
            Some(value) => Ok((response, value)),
            None => Err(GatewayError::NoStructuredValue(Box::new(response))),
        }
    }

    /// A structured call whose type is known only at run time (a JSON Schema produced by another
    /// language's type system, e.g. a Python binding): the same ladder as
    /// [`chat_structured`](Self::chat_structured), with `check` judging each repaired answer —
    /// `Err` carries the validation errors fed back on the re-ask. A cache hit is checked again.
    /// The accepted JSON is the response's `structured_data`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway::GatewayError> {
    /// use polygateway::testkit::{mock_settings, Behaviour, MockUpstream};
    /// use polygateway::{structured::SchemaRequest, CallOptions, Message};
    /// use serde_json::json;
    /// // A missing field first, then a valid answer.
    /// let answers = vec![r#"{"city": "Oslo"}"#.into(), r#"{"city": "Oslo", "population": 709000}"#.into()];
    /// let mock = MockUpstream::start(Behaviour::ScriptedContent(answers)).await;
    /// let settings = mock_settings(&[("LLM", mock.base_url().as_str())], &[]);
    /// let gw = polygateway::Gateway::from_settings(settings, "LLM").await?;
    /// let schema = SchemaRequest {
    ///     name: "City".into(),
    ///     schema: json!({"type": "object", "required": ["city", "population"]}),
    /// };
    /// let check = |v: &serde_json::Value| match v.get("population") {
    ///     Some(_) => Ok(()),
    ///     None => Err(vec!["population: field required".to_string()]),
    /// };
    /// let reply = gw
    ///     .chat_scope("LLM")?
    ///     .chat_structured_schema(vec![Message::user("Oslo?")], CallOptions::new(), schema, check)
    ///     .await?;
    /// assert_eq!(reply.asks, 2);
    /// assert_eq!(reply.structured_data.unwrap()["population"], 709000);
    /// gw.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub async fn chat_structured_schema<C>(
        &self,
        messages: Vec<Message>,
        options: CallOptions,
        schema: SchemaRequest,
        check: C,
    ) -> Result<LlmResponse, GatewayError>
    where
        C: Fn(&Value) -> Result<(), Vec<String>> + Send + Sync,
    {
        let plan = LadderPlan::typed(self.core.structured_max_retries);
        let accept = |value: Value| check(&value);
        self.laddered(
            messages,
            with_call_group(options),
            plan,
            Some(schema),
            accept,
        )
        .await
        .map(|(response, _)| response)
    }

    /// A structured call against a JSON Schema known only at run time (the server's
    /// `response_format: json_schema`): the whole ladder, validation by
    /// [`crate::structured::shape`]. The accepted value is the answer's `structured_data`.
    pub(crate) async fn chat_with_schema(
        &self,
        messages: Vec<Message>,
        options: CallOptions,
        schema: SchemaRequest,
    ) -> Result<LlmResponse, GatewayError> {
        let shape = schema.schema.clone();
        let check = move |value: &Value| {
            let errors = crate::structured::shape::check(&shape, value);
            if errors.is_empty() {
                Ok(())
            } else {
                Err(errors)
            }
        };
        self.chat_structured_schema(messages, options, schema, check)
            .await
    }

    /// The ladder behind the cache: `schema` is what typed asks send, `check` what accepts an
    /// answer (a cache hit is checked again, so a hit stored under another check cannot pass).
    /// An answer of tool calls or a refusal comes back as is, without a value.
    async fn laddered<T>(
        &self,
        messages: Vec<Message>,
        options: CallOptions,
        plan: LadderPlan,
        schema: Option<SchemaRequest>,
        check: impl Fn(Value) -> Result<T, Vec<String>> + Send + Sync,
    ) -> Result<(LlmResponse, Option<T>), GatewayError>
    where
        T: Send,
    {
        // The cache key is that of the caller's conversation and of what was asked (json, or the
        // schema and the modes the scope's sources send it in); what is stored is the answer
        // that passed the ladder, so a hit rebuilds `T` without network.
        let asked = Asked {
            schema: None,
            key: Some(match (plan.mode, &schema) {
                (LadderMode::Typed, Some(schema)) => json!({
                    "schema": schema.schema,
                    "modes": self.scope().structured_modes.iter().map(|m| m.as_str()).collect::<Vec<_>>(),
                }),
                _ => json!({"mode": "json"}),
            }),
        };
        let prepared = self.prepare(messages.clone(), &options, &asked)?;
        let response = self
            .cached(&prepared, || async {
                let outcome = run_ladder_checked(
                    |conversation, schema, is_reask| {
                        let ask = Asked { schema, key: None };
                        let prepared = self.prepare(conversation, &options, &ask);
                        async move { self.governed(&prepared?, is_reask).await }
                    },
                    messages,
                    plan,
                    schema,
                    &check,
                )
                .await?;
                Ok(outcome.response)
            })
            .await?;
        if !response.is_content_answer() {
            return Ok((response, None));
        }
        let value = rehydrate_checked(&response, &check)?;
        Ok((response, Some(value)))
    }

    /// The wire request, telemetry context and cache key of one ask. Ladder asks pass no key
    /// material: their key is never used (the ladder is cached as a whole).
    pub(crate) fn prepare(
        &self,
        messages: Vec<Message>,
        options: &CallOptions,
        asked: &Asked,
    ) -> Result<Prepared, GatewayError> {
        options.validate()?;
        let scope = self.scope();
        let core = &self.core;
        let cache_key = match (&core.cache, options.bypass_cache) {
            (Some(cache), false) => Some(cache_key(&CacheKeyInput {
                structured: asked.key.as_ref(),
                model_fingerprint: &scope.fingerprint,
                messages: &messages,
                namespace: options
                    .cache_namespace
                    .as_deref()
                    .unwrap_or(&cache.namespace),
                salt: options.cache_salt.as_deref(),
                sampling: &cache_sampling(options),
            })),
            _ => None,
        };
        let context = core.telemetry.chat_context(
            options,
            &messages,
            &scope.extra_body,
            asked.schema.is_some(),
        );
        let mut wire = ChatWireRequest::new(messages);
        wire.overlay = options.overlay.clone();
        wire.schema = asked.schema.clone();
        wire.stream = options.stream;
        wire.native = options.native.clone();
        Ok(Prepared {
            wire,
            context,
            cache_key,
            call_group: options.call_group.clone(),
            parent_call_id: options.parent_call_id.clone(),
            order: CallOrder::of(options),
            budgets: core
                .budgets
                .claims(&self.name, options.tenant(), options.key_budget.as_ref()),
            parties: Parties::of(options),
        })
    }

    /// Cache lookup, coalescing and store around `produce`.
    pub(crate) async fn cached<F, Fut>(
        &self,
        prepared: &Prepared,
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
        let (Some(cache), Some(key)) = (&self.core.cache, &prepared.cache_key) else {
            return Box::pin(produce()).await;
        };
        if let Some(hit) = self.lookup(prepared).await {
            return Ok(hit);
        }
        let (response, role) = cache
            .coalescer
            .run_with_role(
                key.clone(),
                Box::pin(async {
                    let response = produce().await?;
                    if response.is_cacheable() {
                        cache.backend.put(key, &response, cache.ttl).await;
                    }
                    Ok::<_, GatewayError>(response)
                }),
            )
            .await?;
        if role == crate::cache::coalesce::Role::Follower {
            // A follower did not pay: it is served like a cache hit, with its own record.
            return Ok(self.as_hit(prepared, response));
        }
        Ok(response)
    }

    pub(crate) async fn lookup(&self, prepared: &Prepared) -> Option<LlmResponse> {
        let cache = self.core.cache.as_ref()?;
        let key = prepared.cache_key.as_ref()?;
        match cache.backend.get(key).await {
            CacheLookup::Hit(stored) => {
                let stored = *stored;
                self.scope().metrics.cache_hits.increment(1);
                Some(self.as_hit(prepared, stored))
            }
            CacheLookup::Miss => {
                self.scope().metrics.cache_misses.increment(1);
                None
            }
        }
    }

    fn as_hit(&self, prepared: &Prepared, mut response: LlmResponse) -> LlmResponse {
        response.cache_hit = true;
        response.call_id = polygateway_actors::runtime::new_id();
        response.parent_call_id = prepared.parent_call_id.clone();
        response.call_group_id = prepared.call_group.clone();
        response.latency_ms = 0.0;
        response.capacity_wait_ms = 0.0;
        // Nothing was asked: no cost (the row says the same); the tokens stay the stored ones.
        response.cost = Some(0.0);
        response.asks = 0;
        response.last_ask_cost = Some(0.0);
        self.core
            .telemetry
            .record_cache_hit(&prepared.context, &response);
        response
    }

    /// One governed call (no cache, no ladder).
    pub(crate) async fn governed(
        &self,
        prepared: &Prepared,
        is_reask: bool,
    ) -> Result<LlmResponse, GatewayError> {
        self.governed_inner(prepared, is_reask, None).await
    }

    /// One governed streaming call delivering deltas into `sink`.
    pub(crate) async fn governed_stream(
        &self,
        prepared: &Prepared,
        sink: &polygateway_actors::EventSink<crate::transport::chat::ChatDelta>,
    ) -> Result<LlmResponse, GatewayError> {
        self.governed_inner(prepared, false, Some(sink)).await
    }

    async fn governed_inner(
        &self,
        prepared: &Prepared,
        is_reask: bool,
        sink: Option<&polygateway_actors::EventSink<crate::transport::chat::ChatDelta>>,
    ) -> Result<LlmResponse, GatewayError> {
        let scope = self.scope();
        let recorder = Recorder {
            telemetry: &self.core.telemetry,
            context: &prepared.context,
            sources: &scope.identities,
        };
        // OpenTelemetry GenAI semantic conventions, so an OTel subscriber exports them as is.
        let span = tracing::info_span!(
            "chat",
            "gen_ai.operation.name" = "chat",
            "gen_ai.request.model" = tracing::field::Empty,
            "gen_ai.response.model" = tracing::field::Empty,
            "gen_ai.usage.input_tokens" = tracing::field::Empty,
            "gen_ai.usage.output_tokens" = tracing::field::Empty,
            "pgw.scope" = %self.name,
            "pgw.source" = tracing::field::Empty,
            "pgw.cost" = tracing::field::Empty,
        );
        // Spend budgets: the ask's estimate is reserved before any attempt (docs/behaviour.md
        // §5.7); a refusal is recorded like any call that never reached a transport.
        let reservation = if prepared.budgets.is_empty() {
            None
        } else {
            let core = &self.core;
            // Boxed, like the settlements below: only calls under a budget pay for them, and
            // inline they would size every call's future.
            let reserved = Box::pin(core.budgets.reserve(
                &core.governance.gate,
                core.governance.timeout,
                &self.name,
                prepared.budgets.clone(),
            ))
            .await;
            match reserved {
                Ok(r) => Some(r),
                Err(e) => {
                    core.telemetry.record_refusal(&prepared.context, &e);
                    return Err(e);
                }
            }
        };
        let governed = scope
            .scope
            .call(
                &prepared.wire,
                &recorder,
                sink,
                prepared.order.govern(is_reask),
            )
            .instrument(span.clone())
            .await;
        let governed = match governed {
            Ok(g) => g,
            Err(failure) => {
                prepared.parties.finished(&scope.metrics.series, false, 0.0);
                if let Some(r) = reservation {
                    // A failed call's rows carry no cost, so it is charged nothing — except a
                    // stream broken after deltas reached the caller: the upstream generated
                    // them, so it keeps its estimate.
                    let broken = matches!(failure, CallFailure::StreamBroken { .. });
                    Box::pin(r.settle((!broken).then_some(0.0))).await;
                }
                return Err(to_gateway_error(&self.name, failure));
            }
        };
        let mut response = governed.response;
        response.call_id = governed.attempt_id;
        response.capacity_wait_ms = governed.capacity_wait.as_secs_f64() * 1e3;
        response.parent_call_id = prepared.parent_call_id.clone();
        response.call_group_id = prepared.call_group.clone();
        response.cost = self.core.telemetry.cost(&response.model, &response.usage());
        if let Some(r) = reservation {
            Box::pin(r.settle(response.cost)).await;
        }
        response.as_single_ask();
        if let Some(ttft) = response.ttft_ms {
            scope.metrics.ttft.record(ttft / 1e3);
            let now = crate::metrics::unix_now();
            scope.metrics.series.ttft(now, ttft / 1e3);
            if let Some(source) = scope.metrics.source_series.get(&response.source_name) {
                source.ttft(now, ttft / 1e3);
            }
        }
        prepared
            .parties
            .finished(&scope.metrics.series, true, response.cost.unwrap_or(0.0));
        span.record("gen_ai.request.model", response.model.as_str());
        if let Some(reported) = &response.model_reported {
            span.record("gen_ai.response.model", reported.as_str());
        }
        span.record("gen_ai.usage.input_tokens", response.prompt_tokens);
        span.record("gen_ai.usage.output_tokens", response.completion_tokens);
        span.record("pgw.source", response.source_name.as_str());
        if let Some(cost) = response.cost {
            span.record("pgw.cost", cost);
        }
        Ok(response)
    }
}
