//! The chat transport (docs/behaviour.md §7.1, §7.5): one attempt against one source, in the
//! source's dialect — `POST {base_url}/chat/completions` (OpenAI), `/messages` (Anthropic) or
//! Gemini's `generateContent` — streamed (SSE, under the watchdog) or not, turned into one
//! [`LlmResponse`] or a classified [`TransportError`].
//!
//! No retry, breaker, cache or telemetry here — the runtime owns those. This file owns the
//! request body, the choice of the dialect's exchange (`transport::machine`: decoding, assembly,
//! deadlines and the end-of-stream verdicts) and the structured mode's fall-back; the exchange
//! is run over HTTP by `transport::drive`.

use std::sync::Arc;

use async_trait::async_trait;
use polygateway_actors::policy::pacer::RateLimitHint;
use polygateway_actors::{EventSink, StreamCut, Transport};
use reqwest::header::ACCEPT;
use serde::Serialize;
use serde_json::{Map, Value};

use super::dialect::anthropic;
use super::dialect::gemini::refuses_structured;
use super::dialect::gemini::send::{send as gemini_send, GeminiEndpoints};
use super::drive;
use super::endpoint::{Credentials, JsonEndpoint};
pub use super::exchange::{ChatDelta, ChatWireRequest};
use super::http::AnswerReader;
use super::machine::{AnthropicMessages, ChatExchange, OpenAiChat, WireDialect};
use super::pool::SourcePool;
use super::prefill::{self, LeadTrim};
use super::watchdog::now;
use super::TransportConfig;
use crate::error::TransportError;
use crate::provider::{Dialect, ProviderProfile};
use crate::structured::source_mode::{refuses_mode, SourceMode};
use crate::structured::StructuredMode;
use crate::types::{LlmResponse, Message, UsageSource};

/// Body keys the transport owns; never taken from `extra_body` or an overlay.
pub(crate) const PROTECTED_KEYS: [&str; 4] = ["model", "messages", "stream", "stream_options"];

/// The chat transport of one source. Cheap to share (`Arc`); one pooled client per source.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use polygateway::ports::{EventSink, Transport};
/// use polygateway::provider::ProviderProfile;
/// use polygateway_testkit::{Behaviour, MockUpstream};
/// use polygateway::transport::chat::{ChatDelta, ChatTransport, ChatWireRequest};
/// use polygateway::transport::TransportConfig;
/// let mock = MockUpstream::start(Behaviour::healthy_with("Hello there")).await;
/// let settings = polygateway_testkit::source_settings(&mock.base_url());
/// let transport = ChatTransport::new(TransportConfig::from(&settings), ProviderProfile::generic());
/// let request = ChatWireRequest::new(vec![polygateway::Message::user("Hi")]);
/// // One streaming attempt; deltas reach the consumer while the response is assembled.
/// let (sink, mut deltas) = EventSink::channel(16);
/// let response = transport.send(&request, Some(&sink)).await.unwrap();
/// drop(sink);
/// assert_eq!(response.content, "Hello there");
/// assert_eq!(response.source_name, "openai_1");
/// let mut streamed = String::new();
/// while let Some(ChatDelta::Content(piece)) = deltas.recv().await {
///     streamed.push_str(&piece);
/// }
/// assert_eq!(streamed, "Hello there");
/// # }
/// ```
pub struct ChatTransport {
    /// Shared with the endpoint's pool and re-sender, which rebuild clients from it.
    config: Arc<TransportConfig>,
    profile: ProviderProfile,
    /// The wire protocol of this source (`DIALECT`, else the provider's).
    dialect: Dialect,
    endpoint: JsonEndpoint,
    /// The structured mode typed calls are sent in, shared with snapshots and telemetry.
    mode: Arc<SourceMode>,
    /// A Gemini source's endpoints (its dialect is Gemini): attempts go there instead.
    gemini: Option<GeminiEndpoints>,
}

impl std::fmt::Debug for ChatTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTransport")
            .field("source", &self.config.name)
            .field("url", &self.endpoint.url())
            .field("provider", &self.profile.name)
            .field("dialect", &self.dialect)
            .finish_non_exhaustive()
    }
}

#[derive(Serialize)]
struct WireBody<'a> {
    model: &'a str,
    messages: &'a [Message],
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
    #[serde(flatten)]
    params: &'a Map<String, Value>,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

impl ChatTransport {
    /// A transport with its own client (`client::build_client`), for the source `config`
    /// describes (`TransportConfig::from(&source_settings)` for a configured source) speaking
    /// `profile`'s API unless `config.dialect` says otherwise.
    ///
    /// ```
    /// use polygateway::provider::{Dialect, ProviderRegistry};
    /// use polygateway::transport::{ChatTransport, TransportConfig};
    /// let registry = ProviderRegistry::with_defaults();
    /// let settings = polygateway_testkit::source_settings("http://127.0.0.1:9/v1");
    /// // Building a transport connects nowhere; the first attempt does.
    /// let transport = ChatTransport::new(TransportConfig::from(&settings), registry.get("anthropic").clone());
    /// assert_eq!(transport.config().name, "openai_1");
    /// // The provider's dialect decides the endpoint.
    /// assert_eq!(transport.url(), "http://127.0.0.1:9/v1/messages");
    /// let mut config = TransportConfig::from(&settings);
    /// config.dialect = Some(Dialect::OpenAi); // an Anthropic model behind an OpenAI-compatible proxy
    /// let proxied = ChatTransport::new(config, registry.get("anthropic").clone());
    /// assert_eq!(proxied.url(), "http://127.0.0.1:9/v1/chat/completions");
    /// ```
    pub fn new(config: TransportConfig, profile: ProviderProfile) -> Self {
        let config = Arc::new(config);
        let pool = SourcePool::built(&config);
        Self::with_pool(config, profile, pool)
    }

    /// A transport using a given client (e.g. shared in a benchmark). It is used as it is: unlike
    /// the transport's own, its idle timeout does not follow the upstream's `Keep-Alive`.
    ///
    /// ```
    /// use polygateway::provider::ProviderProfile;
    /// use polygateway_testkit::source_settings;
    /// use polygateway::transport::{ChatTransport, TransportConfig};
    /// let config = |url: &str| TransportConfig::from(&source_settings(url));
    /// // Two sources on one connection pool.
    /// let client = reqwest::Client::builder().no_proxy().build().unwrap();
    /// let a = ChatTransport::with_client(config("http://10.0.0.1/v1"), ProviderProfile::generic(), client.clone());
    /// let b = ChatTransport::with_client(config("http://10.0.0.2/v1"), ProviderProfile::generic(), client);
    /// assert_eq!(a.url(), "http://10.0.0.1/v1/chat/completions");
    /// assert_eq!(b.url(), "http://10.0.0.2/v1/chat/completions");
    /// ```
    pub fn with_client(
        config: TransportConfig,
        profile: ProviderProfile,
        client: reqwest::Client,
    ) -> Self {
        Self::with_pool(Arc::new(config), profile, SourcePool::given(client))
    }

    fn with_pool(config: Arc<TransportConfig>, profile: ProviderProfile, pool: SourcePool) -> Self {
        let dialect = profile.dialect_for(config.dialect);
        let mut gemini = None;
        let endpoint = match dialect {
            Dialect::Anthropic => JsonEndpoint::with_credentials(
                &config,
                pool,
                "messages",
                Credentials {
                    key_header: Some("x-api-key"),
                    fixed: &[("anthropic-version", anthropic::VERSION)],
                },
            ),
            Dialect::Gemini => {
                let endpoints = GeminiEndpoints::new(&config, pool);
                let plain = endpoints.plain().clone();
                gemini = Some(endpoints);
                plain
            }
            _ => JsonEndpoint::new(&config, pool, "chat/completions"),
        };
        let mode = SourceMode::new(
            &config.name,
            profile.structured_mode_for(config.structured_mode),
        );
        Self {
            config,
            profile,
            dialect,
            endpoint,
            mode: Arc::new(mode),
            gemini,
        }
    }

    /// Requests re-sent on a fresh connection because their pooled one was closed.
    pub(crate) fn resends(&self) -> u64 {
        self.endpoint.resends()
    }

    /// The source's pool idle timeout now (`POOL_IDLE_TIMEOUT_S`, or lower after the upstream
    /// announced a shorter `Keep-Alive: timeout=`); `None` for a client given by the application.
    pub(crate) fn pool_idle_timeout(&self) -> Option<std::time::Duration> {
        self.endpoint.pool_idle_timeout()
    }

    /// This source's structured mode (configured and current).
    pub(crate) fn source_mode(&self) -> &Arc<SourceMode> {
        &self.mode
    }

    /// The transport's configuration.
    ///
    /// ```
    /// use std::time::Duration;
    /// use polygateway::provider::ProviderProfile;
    /// use polygateway::transport::{ChatTransport, TransportConfig};
    /// let settings = polygateway_testkit::source_settings("http://127.0.0.1:9/v1");
    /// let transport = ChatTransport::new(TransportConfig::from(&settings), ProviderProfile::generic());
    /// // The watchdog's first-token deadline comes from here.
    /// assert_eq!(transport.config().ttft_timeout, Duration::from_secs(10));
    /// ```
    pub fn config(&self) -> &TransportConfig {
        &self.config
    }

    /// The provider profile in use.
    #[cfg(test)]
    pub(crate) fn profile(&self) -> &ProviderProfile {
        &self.profile
    }

    /// The endpoint URL.
    ///
    /// ```
    /// use polygateway::provider::ProviderProfile;
    /// use polygateway::transport::{ChatTransport, TransportConfig};
    /// let settings = polygateway_testkit::source_settings("https://api.example.com/v1/");
    /// let transport = ChatTransport::new(TransportConfig::from(&settings), ProviderProfile::generic());
    /// assert_eq!(transport.url(), "https://api.example.com/v1/chat/completions");
    /// ```
    pub fn url(&self) -> &str {
        self.endpoint.url()
    }

    /// The body keys besides `model`/`messages`/`stream`/`stream_options`, merged by priority
    /// (later wins, shallow per top-level key): source `extra_body` < thinking injection (when
    /// `ENABLE_THINKING` is set) < call overlay < `response_format`. Protected keys are dropped
    /// from every layer.
    pub(crate) fn body_params(&self, request: &ChatWireRequest) -> Map<String, Value> {
        let mut params = self.config.extra_body.clone();
        if let Some(on) = self.config.enable_thinking {
            params.extend(self.profile.thinking.injection(on));
        }
        params.extend(request.overlay.iter().map(|(k, v)| (k.clone(), v.clone())));
        if let Some(rf) = &request.response_format {
            params.insert("response_format".into(), rf.clone());
        }
        for key in PROTECTED_KEYS {
            params.remove(key);
        }
        params
    }

    /// The exact JSON body sent for `request`, a typed call's schema carried in `mode`.
    pub(crate) fn body(
        &self,
        request: &ChatWireRequest,
        mode: StructuredMode,
    ) -> Result<Vec<u8>, TransportError> {
        let mut params = self.body_params(request);
        let mut messages = std::borrow::Cow::Borrowed(request.messages.as_slice());
        if let Some(schema) = &request.schema {
            let (asked, format) = schema.for_mode(mode, &request.messages);
            messages = asked;
            if let Some(mut format) = format {
                if self.profile.schema_under_value && mode == StructuredMode::JsonSchema {
                    // TGI's grammar: `json` takes a bare schema in `value` on every version
                    // since 1.4.3; its own `json_schema` type (≥ 3.3) wants `{name, schema}`
                    // there and is refused by older servers.
                    format = serde_json::json!({"type": "json", "value": schema.schema});
                }
                params.insert("response_format".into(), format);
            }
        }
        if let Some(text) = &request.prefill {
            messages.to_mut().push(prefill::prefix_message(text));
        }
        let messages = super::quirks::adapt(&self.profile, messages);
        let stream = self.streams(request);
        let body = WireBody {
            model: &self.config.model,
            messages: &messages,
            stream,
            stream_options: stream.then_some(StreamOptions {
                include_usage: true,
            }),
            params: &params,
        };
        serde_json::to_vec(&body)
            .map_err(|e| TransportError::rejected(format!("request body not serialisable: {e}")))
    }

    /// What one attempt sends in this source's dialect: the body (a typed call's schema in
    /// `mode`) and, for Anthropic, the `anthropic-beta` header and the forced answer tool.
    fn outgoing(
        &self,
        request: &ChatWireRequest,
        mode: StructuredMode,
    ) -> Result<Outgoing, TransportError> {
        if self.dialect != Dialect::Anthropic {
            return Ok(Outgoing {
                body: self.body(request, mode)?,
                beta: None,
                forced_tool: None,
            });
        }
        // The client wrote the call in this source's dialect: what it wrote goes, model and
        // `stream` excepted (a typed call's schema is the gateway's, so it is built as usual).
        if let Some(native) = request
            .native
            .as_ref()
            .filter(|n| n.dialect == Dialect::Anthropic && request.schema.is_none())
        {
            let body = native.for_source(&self.config.model, self.streams(request));
            return Ok(Outgoing {
                body: serde_json::to_vec(&body).map_err(|e| {
                    TransportError::rejected(format!("request body not serialisable: {e}"))
                })?,
                beta: native.beta.clone(),
                forced_tool: None,
            });
        }
        let mut params = self.config.extra_body.clone();
        params.extend(request.overlay.iter().map(|(k, v)| (k.clone(), v.clone())));
        if let Some(rf) = &request.response_format {
            params.insert("response_format".into(), rf.clone());
        }
        for key in PROTECTED_KEYS {
            params.remove(key);
        }
        let (mut messages, structured) = match &request.schema {
            Some(schema) => {
                // JSON-object mode has no Anthropic equivalent: its prompt is what remains.
                let (messages, _) = schema.for_mode(mode, &request.messages);
                (messages, Some((schema.as_ref(), mode)))
            }
            None => (
                std::borrow::Cow::Borrowed(request.messages.as_slice()),
                None,
            ),
        };
        if let Some((Some(turn), _)) = request.prefill.as_deref().map(prefill::assistant_turn) {
            messages.to_mut().push(turn);
        }
        let built = anthropic::request::build(
            &self.config.model,
            &messages,
            params,
            self.streams(request),
            structured,
            self.config.enable_thinking,
        )?;
        Ok(Outgoing {
            body: built.body,
            beta: built.beta,
            forced_tool: built.forced_tool,
        })
    }

    /// Whether an attempt streams: the call can refuse streaming, and so can the source
    /// (`STREAM=false`, for servers that do not stream or stream badly).
    fn streams(&self, request: &ChatWireRequest) -> bool {
        request.stream && self.config.stream
    }

    fn post(&self, out: Outgoing, stream: bool) -> Result<reqwest::RequestBuilder, TransportError> {
        let mut rb = self.endpoint.post_json(out.body)?;
        if stream {
            rb = rb.header(ACCEPT, "text/event-stream");
        }
        if let Some(beta) = out.beta {
            rb = rb.header("anthropic-beta", beta);
        }
        Ok(rb)
    }

    /// How this source's dialect states its rate limits and errors in an answer.
    fn answer_reader(&self) -> AnswerReader {
        super::dialect::answer_reader(self.dialect)
    }

    /// One streamed attempt in this source's dialect (OpenAI's or Anthropic's).
    async fn send_streaming(
        &self,
        request: &ChatWireRequest,
        mode: StructuredMode,
        sink: Option<&EventSink<ChatDelta>>,
    ) -> Result<LlmResponse, TransportError> {
        let start = now();
        let out = self.outgoing(request, mode)?;
        let reader = self.answer_reader();
        // The exchange is held here and lent to the driver, and the request is built in the
        // driver's statement: what an awaited `async fn` takes by value, or a temporary of the
        // awaited expression, would be kept twice in this state.
        match self.dialect {
            Dialect::Anthropic => {
                let mut exchange = self.exchange(
                    start,
                    request,
                    AnthropicMessages::new(out.forced_tool.clone()),
                );
                let attempt = drive::streamed(
                    &mut exchange,
                    &self.endpoint,
                    self.post(out, true)?,
                    reader,
                    sink,
                );
                attempt.await
            }
            _ => {
                let mut exchange = self.exchange(start, request, OpenAiChat);
                let attempt = drive::streamed(
                    &mut exchange,
                    &self.endpoint,
                    self.post(out, true)?,
                    reader,
                    sink,
                );
                attempt.await
            }
        }
    }

    /// One attempt whose answer comes whole (`stream: false`): only the total deadline applies.
    async fn send_plain(
        &self,
        request: &ChatWireRequest,
        mode: StructuredMode,
        sink: Option<&EventSink<ChatDelta>>,
    ) -> Result<LlmResponse, TransportError> {
        let start = now();
        let out = self.outgoing(request, mode)?;
        let reader = self.answer_reader();
        match self.dialect {
            Dialect::Anthropic => {
                let mut exchange = self.exchange(
                    start,
                    request,
                    AnthropicMessages::new(out.forced_tool.clone()),
                );
                let attempt = drive::whole(
                    &mut exchange,
                    &self.endpoint,
                    self.post(out, false)?,
                    reader,
                    sink,
                );
                attempt.await
            }
            _ => {
                let mut exchange = self.exchange(start, request, OpenAiChat);
                let attempt = drive::whole(
                    &mut exchange,
                    &self.endpoint,
                    self.post(out, false)?,
                    reader,
                    sink,
                );
                attempt.await
            }
        }
    }

    /// The exchange of an attempt that started at `start`, in `dialect`.
    fn exchange<D: WireDialect>(
        &self,
        start: std::time::Instant,
        request: &ChatWireRequest,
        dialect: D,
    ) -> ChatExchange<'_, D> {
        let strips_think = self.profile.reasoning.strips_think_tags();
        ChatExchange::new(
            &self.config,
            start,
            dialect,
            strips_think,
            self.lead_trim(request),
        )
    }

    /// The leading whitespace a continuation sent to this source must lose: what its dialect's
    /// prefill could not carry (Anthropic's refuses trailing whitespace).
    fn lead_trim(&self, request: &ChatWireRequest) -> LeadTrim {
        match (&request.prefill, self.dialect) {
            (Some(text), Dialect::Anthropic) => prefill::assistant_turn(text).1,
            _ => LeadTrim::default(),
        }
    }
}

/// One attempt's request in the source's dialect.
struct Outgoing {
    body: Vec<u8>,
    /// Anthropic's `anthropic-beta` header.
    beta: Option<String>,
    /// A typed call's answer tool (Anthropic): its input is the answer's text.
    forced_tool: Option<String>,
}

#[async_trait]
impl Transport for ChatTransport {
    type Request = ChatWireRequest;
    type Response = LlmResponse;
    type Event = ChatDelta;
    type Error = TransportError;

    async fn send(
        &self,
        request: &ChatWireRequest,
        events: Option<&EventSink<ChatDelta>>,
    ) -> Result<LlmResponse, TransportError> {
        let mut mode = self.mode.current();
        // Bounded: each pass sends a strictly weaker mode, and the prompt mode is never refused.
        loop {
            // Each way of sending is boxed on its own: inline, this future (boxed whole by
            // `async_trait`, held for the whole attempt) would be as large as the largest of the
            // three, whichever one the source uses.
            let result = if let Some(gemini) = &self.gemini {
                let stream = self.streams(request);
                Box::pin(gemini_send(
                    gemini,
                    &self.config,
                    request,
                    mode,
                    stream,
                    events,
                ))
                .await
            } else if self.streams(request) {
                Box::pin(self.send_streaming(request, mode, events)).await
            } else {
                Box::pin(self.send_plain(request, mode, events)).await
            };
            // A continuation's whole text loses what its deltas lost.
            let result = result.map(|mut answer| {
                self.lead_trim(request).text(&mut answer.content);
                answer
            });
            match result {
                // The source speaks less than it was told: not its fault, not the call's. The
                // refusal arrives before any delta, so the consumer has seen nothing yet.
                Err(e)
                    if request.schema.is_some()
                        && (refuses_mode(&e, mode)
                            || (self.gemini.is_some()
                                && mode != StructuredMode::Prompt
                                && refuses_structured(&e))) =>
                {
                    match self.mode.fall_back(mode, &e.body_text) {
                        Some(weaker) => mode = weaker,
                        None => return Err(e),
                    }
                }
                other => return other,
            }
        }
    }

    fn tokens_used(response: &LlmResponse) -> Option<u64> {
        (response.usage_source != UsageSource::Unavailable)
            .then(|| response.prompt_tokens + response.completion_tokens)
    }

    fn rate_limit_hint(response: &LlmResponse) -> Option<RateLimitHint> {
        response.rate_limit
    }

    /// A prefill is sent only where the provider registry says the API continues one, in a
    /// dialect that writes it (OpenAI's `"prefix": true`, Anthropic's final assistant turn) and,
    /// for Anthropic, not with extended thinking on (its API refuses a prefill then).
    fn prefill(&self) -> bool {
        match self.dialect {
            Dialect::OpenAi => self.profile.prefill,
            Dialect::Anthropic => self.profile.prefill && self.config.enable_thinking != Some(true),
            _ => false,
        }
    }

    fn stream_cut(
        request: &ChatWireRequest,
        error: &TransportError,
    ) -> Option<StreamCut<ChatWireRequest>> {
        prefill::stream_cut(request, error)
    }

    fn splice(error: &TransportError, continuation: LlmResponse, cut_source: &str) -> LlmResponse {
        prefill::splice(error, continuation, cut_source)
    }
}

#[cfg(test)]
mod examples {
    //! Usage cases of crate-private items (they were doc examples while the items were public).

    #[test]
    fn protected_keys_example() {
        use crate::provider::ProviderProfile;
        use crate::transport::chat::{ChatTransport, ChatWireRequest, PROTECTED_KEYS};
        let config = crate::transport::TransportConfig::for_tests("http://127.0.0.1:9/v1");
        let transport = ChatTransport::new(config, ProviderProfile::generic());
        let mut request = ChatWireRequest::new(vec![crate::Message::user("hi")]);
        for key in PROTECTED_KEYS {
            request.overlay.insert(key.into(), "from the caller".into());
        }
        // An overlay cannot replace what the transport owns.
        assert!(transport.body_params(&request).is_empty());
    }

    /// `ChatTransport::new`'s and `profile`'s doc examples while `profile` was public.
    #[test]
    fn chat_transport_profile_example() {
        use crate::provider::ProviderRegistry;
        use crate::structured::StructuredMode;
        use crate::transport::chat::ChatTransport;
        let registry = ProviderRegistry::with_defaults();
        let config = crate::transport::TransportConfig::for_tests("http://127.0.0.1:9/v1");
        // Building a transport connects nowhere; the first attempt does.
        let transport = ChatTransport::new(config.clone(), registry.get("deepseek").clone());
        assert_eq!(transport.config().name, "openai_1");
        assert_eq!(transport.profile().name, "deepseek");
        let transport = ChatTransport::new(config, registry.get("qwen").clone());
        // The profile says how a typed call's schema is sent to this source.
        assert_eq!(
            transport.profile().structured_mode(),
            StructuredMode::JsonSchema
        );
    }

    #[test]
    fn chat_transport_body_params_example() {
        use crate::provider::ProviderRegistry;
        use crate::transport::chat::{ChatTransport, ChatWireRequest};
        fn settings() -> crate::transport::TransportConfig {
            crate::transport::TransportConfig::for_tests("http://127.0.0.1:1/v1")
        }
        let mut s = settings();
        s.extra_body.insert("temperature".into(), 0.1.into());
        s.enable_thinking = Some(false);
        let t = ChatTransport::new(s, ProviderRegistry::with_defaults().get("qwen").clone());
        let mut req = ChatWireRequest::new(vec![]);
        req.overlay.insert("temperature".into(), 0.7.into());
        let p = t.body_params(&req);
        assert_eq!(p["temperature"], 0.7);
        assert_eq!(p["enable_thinking"], false);
    }

    #[test]
    fn chat_transport_body_example() {
        use crate::provider::ProviderProfile;
        use crate::transport::chat::{ChatTransport, ChatWireRequest};
        use serde_json::Value;
        let config = crate::transport::TransportConfig::for_tests("http://127.0.0.1:9/v1");
        let transport = ChatTransport::new(config, ProviderProfile::generic());
        let mut request = ChatWireRequest::new(vec![crate::Message::user("hi")]);
        let mode = transport.source_mode().current();
        let body: Value = serde_json::from_slice(&transport.body(&request, mode).unwrap()).unwrap();
        assert_eq!(body["model"], "test-model");
        assert_eq!(body["messages"][0]["content"], "hi");
        assert_eq!(body["stream_options"]["include_usage"], true);
        // Not streaming: no `stream_options`.
        request.stream = false;
        let body: Value = serde_json::from_slice(&transport.body(&request, mode).unwrap()).unwrap();
        assert_eq!(body["stream"], false);
        assert!(body.get("stream_options").is_none());
        // A typed call's schema, to a provider without `response_format`: it goes into the prompt.
        let schema = serde_json::json!({"type": "object"});
        request.schema = Some(std::sync::Arc::new(crate::structured::SchemaRequest {
            name: "a".into(),
            schema,
        }));
        let body: Value = serde_json::from_slice(&transport.body(&request, mode).unwrap()).unwrap();
        assert_eq!(body["messages"][0]["role"], "system");
        assert_eq!(body["messages"][1]["content"], "hi");
        assert!(body.get("response_format").is_none());
    }
}
