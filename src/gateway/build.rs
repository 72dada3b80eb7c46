//! [`GatewayBuilder`]: settings plus injected ports → a running supervised runtime.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use polygateway_actors::assembly::{ActorSlot, TelemetryActor, TelemetryArgs, TelemetryQueue};
use polygateway_actors::memory::{MemoryBreakers, MemoryGate};
use polygateway_actors::policy::adaptive_pacer::{AdaptivePacer, ADAPTIVE_START};
use polygateway_actors::policy::pacer::{AimdPacer, Pacer, Unpaced, AIMD_MIN_CEILING, AIMD_START};
use polygateway_actors::policy::select::{HealthAware, LeastInflight, RoundRobin, Selector};
use polygateway_actors::runtime::{
    Governance, GovernanceFactory, PacerFactory, Runtime, RuntimeOptions, Scope, ScopeConfig,
    SourceSpec,
};
use polygateway_actors::telemetry::{TelemetryConfig, TelemetrySink};
use polygateway_actors::{
    AttemptBackend, BreakerBackend, BreakerConfig, Clock, GateBackend, Limits, TokioClock,
};
use serde_json::Map;

use super::chat::ChatScope;
use super::embed::EmbedScope;
use super::ocr::OcrScope;
use super::record::SourceIdentity;
use super::{CacheLayer, Core, Gateway, Owned, ScopeEntry, Telemetry};
use crate::cache::coalesce::Coalescer;
use crate::cache::memory::MemoryCache;
#[cfg(feature = "redis")]
use crate::cache::redis::RedisCache;
use crate::cache::ResponseCache;
use crate::config::{
    CacheSettings, GovernanceBackendKind, PacerMode, PacerSettings, ScopeKind, ScopeSettings,
    SelectorKind, Settings, SourceSettings,
};
use crate::error::GatewayError;
use crate::provider::ProviderRegistry;
#[cfg(feature = "redis")]
use crate::redis::{RedisAttempts, RedisBreakers, RedisGate, RedisGovernance};
use crate::telemetry::row::TelemetryRow;
use crate::telemetry::{sink_from_settings, Pricing};
use crate::transport::chat::ChatTransport;
use crate::transport::embeddings::EmbeddingTransport;
use crate::transport::ocr::OcrTransport;

/// Rows the telemetry queue holds before counting overflow as dropped.
const TELEMETRY_QUEUE_CAPACITY: usize = 65_536;
/// Memory cache bounds.
const MEMORY_CACHE_ENTRIES: usize = 10_000;
const MEMORY_CACHE_BYTES: usize = 256 * 1024 * 1024;

/// Builds a [`Gateway`] from [`Settings`], with every port injectable. Whatever is injected is
/// never closed by the gateway (docs/behaviour.md §10.3); whatever it builds, it closes on shutdown.
///
/// ```no_run
/// # async fn demo(settings: polygateway::config::Settings) -> Result<(), polygateway::GatewayError> {
/// use std::sync::Arc;
/// use polygateway::ports::{MemoryBreakers, MemoryGate};
/// // Two gateways sharing one in-process limiter and breaker store.
/// let gate = Arc::new(MemoryGate::default());
/// let breakers = Arc::new(MemoryBreakers::default());
/// let gw = polygateway::Gateway::builder(settings)
///     .default_scope("LLM")
///     .governance(gate, breakers)
///     .build()
///     .await?;
/// # gw.shutdown().await; Ok(()) }
/// ```
pub struct GatewayBuilder {
    settings: Settings,
    default_scope: Option<String>,
    gate: Option<Arc<dyn GateBackend>>,
    breakers: Option<Arc<dyn BreakerBackend>>,
    telemetry_sink: Option<Arc<dyn TelemetrySink<TelemetryRow>>>,
    cache: Option<Arc<dyn ResponseCache>>,
    clock: Arc<dyn Clock>,
    registry: ProviderRegistry,
    selector: Option<Arc<dyn Fn() -> Box<dyn Selector> + Send + Sync>>,
    pacer: Option<PacerFactory>,
    telemetry_config: TelemetryConfig,
    runtime_options: Option<RuntimeOptions>,
    #[cfg(feature = "redis")]
    redis_key_prefix: String,
}

impl GatewayBuilder {
    /// A builder over resolved settings; nothing is injected yet.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway::GatewayError> {
    /// # use polygateway::testkit::{Behaviour, MockUpstream};
    /// # let mock = MockUpstream::start(Behaviour::healthy()).await;
    /// # let settings = polygateway::testkit::mock_settings(
    /// #     &[("LLM", &mock.base_url()), ("EMBED", &mock.base_url())],
    /// #     &[
    /// #         ("LLM__OPENAI__1__MODEL", "gpt-test"),
    /// #         ("EMBED__OPENAI__1__MODEL", "embed-model"),
    /// #         ("EMBED__BATCH_SIZE", "16"),
    /// #     ],
    /// # );
    /// use polygateway::GatewayBuilder;
    /// let gw = GatewayBuilder::new(settings).build().await?;
    /// // Without `default_scope`, the first configured scope (in name order) is the default.
    /// let out = gw.embed(vec!["hello".into()]).await?;
    /// assert_eq!(out.vectors.len(), 1);
    /// gw.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub fn new(settings: Settings) -> Self {
        Self {
            settings,
            default_scope: None,
            gate: None,
            breakers: None,
            telemetry_sink: None,
            cache: None,
            clock: Arc::new(TokioClock),
            registry: ProviderRegistry::with_defaults(),
            selector: None,
            pacer: None,
            telemetry_config: TelemetryConfig::default(),
            runtime_options: None,
            #[cfg(feature = "redis")]
            redis_key_prefix: "pgw".into(),
        }
    }

    /// The scope used by the gateway's convenience methods.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway::GatewayError> {
    /// # use polygateway::testkit::{Behaviour, MockUpstream};
    /// # let mock = MockUpstream::start(Behaviour::healthy()).await;
    /// # let settings = polygateway::testkit::mock_settings(
    /// #     &[("LLM", &mock.base_url()), ("EMBED", &mock.base_url())],
    /// #     &[
    /// #         ("LLM__OPENAI__1__MODEL", "gpt-test"),
    /// #         ("EMBED__OPENAI__1__MODEL", "embed-model"),
    /// #         ("EMBED__BATCH_SIZE", "16"),
    /// #     ],
    /// # );
    /// use polygateway::{GatewayBuilder, Message};
    /// let gw = GatewayBuilder::new(settings.clone()).default_scope("LLM").build().await?;
    /// let reply = gw.chat(vec![Message::user("hi")]).await?; // served by LLM, not EMBED
    /// assert_eq!(reply.model, "gpt-test");
    /// gw.shutdown().await;
    /// // A default scope that is not configured is refused at build time.
    /// assert!(GatewayBuilder::new(settings).default_scope("JUDGE").build().await.is_err());
    /// # Ok(()) }
    /// ```
    pub fn default_scope(mut self, scope: &str) -> Self {
        self.default_scope = Some(scope.to_string());
        self
    }

    /// Inject the limiter and breaker backends (shared with other gateways if you like).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway::GatewayError> {
    /// use polygateway::testkit::{Behaviour, MockUpstream};
    /// let mock = MockUpstream::start(Behaviour::Slow { delay: std::time::Duration::from_millis(600) }).await;
    /// # let settings = polygateway::testkit::mock_settings(
    /// #     &[("LLM", &mock.base_url())],
    /// #     &[("LLM__OPENAI__1__MODEL", "gpt-test")],
    /// # );
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use polygateway::ports::{MemoryBreakers, MemoryGate};
    /// use polygateway::{Gateway, Message};
    /// // Two gateways sharing one in-process limiter and breaker store.
    /// let gate = Arc::new(MemoryGate::default());
    /// let breakers = Arc::new(MemoryBreakers::default());
    /// let a = Gateway::builder(settings.clone()).governance(gate.clone(), breakers.clone()).build().await?;
    /// let b = Gateway::builder(settings).governance(gate, breakers).build().await?;
    /// // A slow call through `a` holds a lease that `b` sees.
    /// let call = tokio::spawn({
    ///     let a = a.clone();
    ///     async move { a.chat(vec![Message::user("slow")]).await }
    /// });
    /// let mut seen = 0;
    /// for _ in 0..100 {
    ///     seen = b.leases_held("LLM").await?;
    ///     if seen == 1 {
    ///         break;
    ///     }
    ///     tokio::time::sleep(Duration::from_millis(10)).await;
    /// }
    /// assert_eq!(seen, 1);
    /// call.await.expect("the task ran")?;
    /// a.shutdown().await;
    /// b.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub fn governance(
        mut self,
        gate: Arc<dyn GateBackend>,
        breakers: Arc<dyn BreakerBackend>,
    ) -> Self {
        self.gate = Some(gate);
        self.breakers = Some(breakers);
        self
    }

    /// Inject the telemetry sink.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway::GatewayError> {
    /// # use polygateway::testkit::{Behaviour, MockUpstream};
    /// # let mock = MockUpstream::start(Behaviour::healthy()).await;
    /// # let settings = polygateway::testkit::mock_settings(
    /// #     &[("LLM", &mock.base_url())],
    /// #     &[("LLM__OPENAI__1__MODEL", "gpt-test")],
    /// # );
    /// use std::sync::{Arc, Mutex};
    /// use polygateway::telemetry::{TelemetryRow, TelemetrySink, TelemetryStatus};
    ///
    /// /// Keeps every row in memory.
    /// #[derive(Default)]
    /// struct Collect(Mutex<Vec<TelemetryRow>>);
    ///
    /// #[async_trait::async_trait]
    /// impl TelemetrySink<TelemetryRow> for Collect {
    ///     async fn write_batch(&self, rows: Vec<TelemetryRow>) {
    ///         self.0.lock().unwrap().extend(rows);
    ///     }
    ///     fn status(&self) -> TelemetryStatus {
    ///         TelemetryStatus::default()
    ///     }
    /// }
    ///
    /// let sink = Arc::new(Collect::default());
    /// let gw = polygateway::Gateway::builder(settings).telemetry_sink(sink.clone()).build().await?;
    /// gw.chat(vec![polygateway::Message::user("hi")]).await?;
    /// gw.shutdown().await; // flushes telemetry (an injected sink is not closed)
    /// let rows = sink.0.lock().unwrap();
    /// assert_eq!(rows.len(), 1);
    /// assert_eq!(rows[0].source_name, "openai_1");
    /// # Ok(()) }
    /// ```
    pub fn telemetry_sink(mut self, sink: Arc<dyn TelemetrySink<TelemetryRow>>) -> Self {
        self.telemetry_sink = Some(sink);
        self
    }

    /// Telemetry batching (size and interval).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway::GatewayError> {
    /// # use polygateway::testkit::{Behaviour, MockUpstream};
    /// # let mock = MockUpstream::start(Behaviour::healthy()).await;
    /// # let settings = polygateway::testkit::mock_settings(
    /// #     &[("LLM", &mock.base_url())],
    /// #     &[("LLM__OPENAI__1__MODEL", "gpt-test")],
    /// # );
    /// # use std::sync::{Arc, Mutex};
    /// # use polygateway::telemetry::{TelemetryRow, TelemetrySink, TelemetryStatus};
    /// #
    /// # /// Keeps every row in memory.
    /// # #[derive(Default)]
    /// # struct Collect(Mutex<Vec<TelemetryRow>>);
    /// #
    /// # #[async_trait::async_trait]
    /// # impl TelemetrySink<TelemetryRow> for Collect {
    /// #     async fn write_batch(&self, rows: Vec<TelemetryRow>) {
    /// #         self.0.lock().unwrap().extend(rows);
    /// #     }
    /// #     fn status(&self) -> TelemetryStatus {
    /// #         TelemetryStatus::default()
    /// #     }
    /// # }
    /// use std::time::Duration;
    /// use polygateway::telemetry::TelemetryConfig;
    /// // `Collect` keeps rows in memory, as in the `telemetry_sink` example.
    /// let sink = Arc::new(Collect::default());
    /// let gw = polygateway::Gateway::builder(settings)
    ///     .telemetry_sink(sink.clone())
    ///     // Write every row at once instead of waiting for 256 rows or 200 ms.
    ///     .telemetry_config(TelemetryConfig { batch_size: 1, flush_interval: Duration::from_millis(10) })
    ///     .build()
    ///     .await?;
    /// gw.chat(vec![polygateway::Message::user("hi")]).await?;
    /// for _ in 0..100 {
    ///     if !sink.0.lock().unwrap().is_empty() {
    ///         break;
    ///     }
    ///     tokio::time::sleep(Duration::from_millis(10)).await;
    /// }
    /// assert_eq!(sink.0.lock().unwrap().len(), 1, "written before shutdown");
    /// gw.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub fn telemetry_config(mut self, config: TelemetryConfig) -> Self {
        self.telemetry_config = config;
        self
    }

    /// Inject the response cache (its namespace and TTL still come from the settings).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway::GatewayError> {
    /// use polygateway::testkit::{Behaviour, MockUpstream};
    /// let mock = MockUpstream::start(Behaviour::healthy()).await;
    /// # let settings = polygateway::testkit::mock_settings(
    /// #     &[("LLM", &mock.base_url())],
    /// #     &[
    /// #         ("LLM__OPENAI__1__MODEL", "gpt-test"),
    /// #         ("PGW_CACHE_BACKEND", "memory"),
    /// #         ("PGW_CACHE_NAMESPACE", "docs"),
    /// #         ("PGW_CACHE_TTL_S", "60"),
    /// #     ],
    /// # );
    /// use std::sync::Arc;
    /// use polygateway::cache::MemoryCache;
    /// use polygateway::Message;
    /// // Settings: PGW_CACHE_BACKEND=memory, PGW_CACHE_NAMESPACE=docs, PGW_CACHE_TTL_S=60.
    /// let cache = Arc::new(MemoryCache::new(1_000, 16 << 20).unwrap());
    /// let gw = polygateway::Gateway::builder(settings).cache(cache.clone()).build().await?;
    /// let first = gw.chat(vec![Message::user("What is 2 + 2?")]).await?;
    /// let second = gw.chat(vec![Message::user("What is 2 + 2?")]).await?;
    /// assert!(!first.cache_hit && second.cache_hit);
    /// assert_eq!(second.content, first.content);
    /// assert_eq!((mock.counts().chat, cache.len()), (1, 1)); // one upstream call, one entry
    /// gw.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub fn cache(mut self, cache: Arc<dyn ResponseCache>) -> Self {
        self.cache = Some(cache);
        self
    }

    /// Inject the clock (tests).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway::GatewayError> {
    /// # use polygateway::testkit::{Behaviour, MockUpstream};
    /// # let mock = MockUpstream::start(Behaviour::healthy()).await;
    /// # let settings = polygateway::testkit::mock_settings(
    /// #     &[("LLM", &mock.base_url())],
    /// #     &[
    /// #         ("LLM__OPENAI__1__MODEL", "gpt-test"),
    /// #         ("LLM__OPENAI__1__RPM", "1"),
    /// #         ("LLM__QUOTA_FULL", "fail_fast"),
    /// #     ],
    /// # );
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use polygateway::ports::ManualClock;
    /// use polygateway::Message;
    /// // Settings: LLM__OPENAI__1__RPM=1, LLM__QUOTA_FULL=fail_fast.
    /// let clock = Arc::new(ManualClock::new());
    /// let gw = polygateway::Gateway::builder(settings).clock(clock.clone()).build().await?;
    /// gw.chat(vec![Message::user("one")]).await?;
    /// assert!(gw.chat(vec![Message::user("two")]).await.is_err(), "1 request per minute");
    /// clock.advance(Duration::from_secs(61)); // a minute passes without waiting for it
    /// gw.chat(vec![Message::user("three")]).await?;
    /// gw.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Replace the provider registry (register your own provider profiles).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway::GatewayError> {
    /// use polygateway::testkit::{Behaviour, MockUpstream};
    /// let mock = MockUpstream::start(Behaviour::healthy()).await;
    /// # let mut env = vec![
    /// #     ("PGW_LIMITER_BACKEND", "memory".to_string()),
    /// #     ("PGW_BREAKER_BACKEND", "memory".into()),
    /// #     ("PGW_TELEMETRY_BACKEND", "none".into()),
    /// # ];
    /// # env.push(("LLM__VLLM__1__BASE_URL", mock.base_url().into()));
    /// # env.push(("LLM__VLLM__1__MODEL", "qwen3-8b".into()));
    /// # env.push(("LLM__VLLM__1__ENABLE_THINKING", "false".into()));
    /// # let env = env.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    /// # let settings = polygateway::config::Settings::from_map(&env).unwrap();
    /// use polygateway::provider::{ProviderProfile, ProviderRegistry, ReasoningForm, ThinkingForm};
    /// // A self-hosted vLLM serving Qwen: `{"enable_thinking": …}` switches reasoning.
    /// let mut registry = ProviderRegistry::with_defaults();
    /// registry.register(ProviderProfile::new("vllm", ThinkingForm::Qwen, ReasoningForm::Field, true));
    /// // Settings: LLM__VLLM__1__BASE_URL, …__MODEL, …__ENABLE_THINKING=false.
    /// let gw = polygateway::Gateway::builder(settings).providers(registry).build().await?;
    /// gw.chat(vec![polygateway::Message::user("hi")]).await?;
    /// assert_eq!(mock.last_request().unwrap().body["enable_thinking"], false);
    /// gw.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub fn providers(mut self, registry: ProviderRegistry) -> Self {
        self.registry = registry;
        self
    }

    /// Use a custom selection policy for every scope.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway::GatewayError> {
    /// use polygateway::testkit::{Behaviour, MockUpstream};
    /// let mock = MockUpstream::start(Behaviour::healthy()).await;
    /// let other = MockUpstream::start(Behaviour::healthy()).await;
    /// # let settings = polygateway::testkit::mock_settings(
    /// #     &[("LLM", &mock.base_url())],
    /// #     &[
    /// #         ("LLM__OPENAI__1__MODEL", "gpt-test"),
    /// #         ("LLM__OPENAI__2__BASE_URL", &other.base_url()),
    /// #         ("LLM__OPENAI__2__API_KEY", "sk-test"),
    /// #         ("LLM__OPENAI__2__MODEL", "gpt-test"),
    /// #     ],
    /// # );
    /// use std::sync::Arc;
    /// use polygateway::policy::{RoundRobin, Selector};
    /// use polygateway::Message;
    /// // Settings: two LLM sources, `mock` (openai_1) and `other` (openai_2).
    /// let gw = polygateway::Gateway::builder(settings)
    ///     .selector(Arc::new(|| Box::new(RoundRobin::default()) as Box<dyn Selector>))
    ///     .build()
    ///     .await?;
    /// for _ in 0..4 {
    ///     gw.chat(vec![Message::user("hi")]).await?;
    /// }
    /// assert_eq!((mock.counts().chat, other.counts().chat), (2, 2));
    /// gw.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub fn selector(mut self, make: Arc<dyn Fn() -> Box<dyn Selector> + Send + Sync>) -> Self {
        self.selector = Some(make);
        self
    }

    /// Replace the pacer `{SCOPE}__PACER` selects, for every source of every scope.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway::GatewayError> {
    /// # use polygateway::testkit::{Behaviour, MockUpstream};
    /// # let mock = MockUpstream::start(Behaviour::healthy()).await;
    /// # let settings = polygateway::testkit::mock_settings(
    /// #     &[("LLM", &mock.base_url())],
    /// #     &[("LLM__OPENAI__1__MODEL", "gpt-test")],
    /// # );
    /// use std::sync::Arc;
    /// use polygateway::policy::{Pacer, PacerObservation};
    /// use polygateway::ports::Limits;
    ///
    /// /// A fixed concurrency cap that ignores pushback.
    /// #[derive(Debug)]
    /// struct Fixed(u32);
    ///
    /// impl Pacer for Fixed {
    ///     fn limit(&self) -> u32 {
    ///         self.0
    ///     }
    ///     fn observe(&mut self, _attempt: &PacerObservation) {}
    /// }
    ///
    /// let gw = polygateway::Gateway::builder(settings)
    ///     .pacer(Arc::new(|_limits: &Limits| Box::new(Fixed(2)) as Box<dyn Pacer>))
    ///     .build()
    ///     .await?;
    /// assert_eq!(gw.sources("LLM").await?[0].pacer_limit, 2);
    /// gw.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub fn pacer(mut self, make: PacerFactory) -> Self {
        self.pacer = Some(make);
        self
    }

    /// Key prefix of the Redis governance backends built from the settings (default `pgw`).
    /// Gateways that must share limits and breakers use the same prefix; separate deployments
    /// (or test runs) on one Redis use different ones.
    /// ```no_run
    /// # async fn demo(settings: polygateway::config::Settings) -> Result<(), polygateway::GatewayError> {
    /// // Settings: PGW_LIMITER_BACKEND=redis, PGW_BREAKER_BACKEND=redis, REDIS_URL=redis://…
    /// // Staging and production share one Redis but never each other's limits and breakers.
    /// let gw = polygateway::Gateway::builder(settings)
    ///     .redis_key_prefix("pgw-staging")
    ///     .build()
    ///     .await?;
    /// gw.shutdown().await; // also closes the Redis connections it opened
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "redis")]
    pub fn redis_key_prefix(mut self, prefix: &str) -> Self {
        self.redis_key_prefix = prefix.to_string();
        self
    }

    /// Restart policy and clock of the supervision tree.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway::GatewayError> {
    /// # use polygateway::testkit::{Behaviour, MockUpstream};
    /// # let mock = MockUpstream::start(Behaviour::healthy()).await;
    /// # let settings = polygateway::testkit::mock_settings(
    /// #     &[("LLM", &mock.base_url())],
    /// #     &[("LLM__OPENAI__1__MODEL", "gpt-test")],
    /// # );
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use polygateway::policy::{RestartPolicy, RuntimeOptions};
    /// use polygateway::ports::TokioClock;
    /// use polygateway::Message;
    /// let options = RuntimeOptions {
    ///     clock: Arc::new(TokioClock),
    ///     // Restart a failed actor after 5 ms (default 50 ms), at most 3 times in 10 s.
    ///     restart: RestartPolicy {
    ///         max_restarts: 3,
    ///         period: Duration::from_secs(10),
    ///         backoff_base: Duration::from_millis(5),
    ///         backoff_max: Duration::from_millis(100),
    ///     },
    /// };
    /// let gw = polygateway::Gateway::builder(settings).runtime_options(options).build().await?;
    /// gw.inject_source_failure("LLM", "openai_1")?;
    /// let mut served = false;
    /// for _ in 0..100 {
    ///     if gw.chat(vec![Message::user("hi")]).await.is_ok() {
    ///         served = true;
    ///         break;
    ///     }
    ///     tokio::time::sleep(Duration::from_millis(10)).await;
    /// }
    /// assert!(served, "restarted under the policy");
    /// gw.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub fn runtime_options(mut self, options: RuntimeOptions) -> Self {
        self.runtime_options = Some(options);
        self
    }

    /// Start the runtime: supervisor, admission, telemetry, one router per scope, one actor per
    /// source.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway::GatewayError> {
    /// # use polygateway::testkit::{Behaviour, MockUpstream};
    /// # let mock = MockUpstream::start(Behaviour::healthy()).await;
    /// # let other = MockUpstream::start(Behaviour::healthy()).await;
    /// # let settings = polygateway::testkit::mock_settings(
    /// #     &[("LLM", &mock.base_url())],
    /// #     &[
    /// #         ("LLM__OPENAI__1__MODEL", "gpt-test"),
    /// #         ("LLM__OPENAI__2__BASE_URL", &other.base_url()),
    /// #         ("LLM__OPENAI__2__API_KEY", "sk-test"),
    /// #         ("LLM__OPENAI__2__MODEL", "gpt-test"),
    /// #     ],
    /// # );
    /// use polygateway::{Gateway, GatewayError};
    /// // Settings: two LLM sources, openai_1 and openai_2.
    /// let gw = Gateway::builder(settings.clone()).default_scope("LLM").build().await?;
    /// let names: Vec<String> = gw.sources("LLM").await?.into_iter().map(|s| s.name).collect();
    /// assert_eq!(names, ["openai_1", "openai_2"]); // one actor per source
    /// gw.shutdown().await;
    /// let err = Gateway::builder(settings).default_scope("VLM").build().await.unwrap_err();
    /// assert!(matches!(err, GatewayError::SourceNotConfigured(_)));
    /// # Ok(()) }
    /// ```
    pub async fn build(self) -> Result<Gateway, GatewayError> {
        let settings = self.settings;
        let config_err = |e: String| GatewayError::Config(e);
        let default_scope = match self.default_scope {
            Some(s) => s,
            None => settings
                .scopes
                .keys()
                .next()
                .cloned()
                .ok_or_else(|| config_err("no scope is configured".into()))?,
        };
        if !settings.scopes.contains_key(&default_scope) {
            return Err(GatewayError::SourceNotConfigured(format!(
                "scope {default_scope} has no sources configured (configured: {})",
                settings
                    .scopes
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        // Settings built by hand never went through the parser's guards: a backend whose cargo
        // feature is off is refused here too, before anything starts.
        crate::config::features::check(&settings).map_err(|e| config_err(e.to_string()))?;
        let clock = self.clock;
        let mut owned = Owned::default();

        // Governance backends: injected, or built from the settings.
        let needs_redis = settings.limiter_backend == GovernanceBackendKind::Redis
            || settings.breaker_backend == GovernanceBackendKind::Redis;
        #[cfg(not(feature = "redis"))]
        let redis: Option<std::convert::Infallible> = {
            let _ = needs_redis; // refused above when true
            None
        };
        #[cfg(feature = "redis")]
        let redis = match (needs_redis, &settings.redis_url) {
            (true, Some(url)) if self.gate.is_none() || self.breakers.is_none() => {
                RedisGovernance::check_url(url)
                    .map_err(|e| GatewayError::Config(format!("REDIS_URL: {e}")))?;
                let redis = RedisGovernance::connect(url, &self.redis_key_prefix)
                    .await
                    .map_err(|e| governance_down(&default_scope, &e.message))?;
                owned.redis.push(redis.clone());
                Some(redis)
            }
            (true, None) => return Err(config_err("redis backends need REDIS_URL".into())),
            _ => None,
        };
        // Both ports on the same Redis (neither injected): one script call per admission and one
        // per finished attempt instead of one per step.
        let attempts: Option<Arc<dyn AttemptBackend>> = match (&redis, &self.gate, &self.breakers) {
            #[cfg(feature = "redis")]
            (Some(r), None, None)
                if settings.limiter_backend == GovernanceBackendKind::Redis
                    && settings.breaker_backend == GovernanceBackendKind::Redis =>
            {
                Some(Arc::new(RedisAttempts::new(RedisGate::new(r.clone()))))
            }
            _ => None,
        };
        let gate: Arc<dyn GateBackend> = match (self.gate, settings.limiter_backend, &redis) {
            (Some(g), _, _) => g,
            #[cfg(feature = "redis")]
            (None, GovernanceBackendKind::Redis, Some(r)) => Arc::new(RedisGate::new(r.clone())),
            _ => Arc::new(MemoryGate::new(Arc::clone(&clock))),
        };
        let breakers: Arc<dyn BreakerBackend> =
            match (self.breakers, settings.breaker_backend, &redis) {
                (Some(b), _, _) => b,
                #[cfg(feature = "redis")]
                (None, GovernanceBackendKind::Redis, Some(r)) => {
                    Arc::new(RedisBreakers::new(r.clone()))
                }
                _ => Arc::new(MemoryBreakers::new(Arc::clone(&clock))),
            };
        let governance = Governance {
            gate,
            breakers,
            attempts,
            timeout: Duration::from_secs(3),
        };
        let factory_gov = governance.clone();
        // fred reconnects by itself and reloads scripts on NOSCRIPT; a restarted admission actor
        // reuses the same clients.
        let factory: GovernanceFactory = Arc::new(move || {
            let gov = factory_gov.clone();
            Box::pin(async move { Ok(gov) })
        });
        let runtime_options = self.runtime_options.unwrap_or(RuntimeOptions {
            clock: Arc::clone(&clock),
            ..RuntimeOptions::default()
        });
        let runtime = Runtime::start(factory, runtime_options)
            .await
            .map_err(GatewayError::Shutdown)?;

        // Telemetry.
        let telemetry_enabled = self.telemetry_sink.is_some()
            || settings.telemetry.backend != crate::config::TelemetryBackendSettings::None;
        let sink = match self.telemetry_sink {
            Some(sink) => sink,
            None => {
                owned.telemetry_sink = true;
                sink_from_settings(&settings.telemetry)
                    .await
                    .map_err(|e| config_err(e.to_string()))?
            }
        };
        let queue = Arc::new(TelemetryQueue::new(TELEMETRY_QUEUE_CAPACITY));
        let telemetry_actor = ActorSlot::down("telemetry actor starting");
        let args = TelemetryArgs::new(Arc::clone(&queue), sink, self.telemetry_config);
        runtime
            .adopt(
                "telemetry",
                TelemetryActor::<TelemetryRow>::new,
                args.clone(),
                Some(Default::default()),
                telemetry_actor.clone(),
            )
            .await
            .map_err(GatewayError::Shutdown)?;
        let pricing = match &settings.pricing_path {
            Some(path) => Some(Arc::new(
                Pricing::load(path).map_err(|e| config_err(format!("PGW_PRICING_PATH: {e}")))?,
            )),
            None => None,
        };
        let budgets = super::budget::BudgetPlan::new(&settings, pricing.as_deref())?;
        let telemetry = Telemetry {
            queue,
            pricing,
            text_cap: settings.telemetry.text_cap,
            enabled: telemetry_enabled,
        };

        // Cache.
        let cache = match (&settings.cache, self.cache) {
            (CacheSettings::None, _) => None,
            (
                CacheSettings::Memory { namespace, ttl } | CacheSettings::Redis { namespace, ttl },
                Some(backend),
            ) => Some(CacheLayer {
                backend,
                namespace: namespace.clone(),
                ttl: *ttl,
                coalescer: Coalescer::new(),
            }),
            (CacheSettings::Memory { namespace, ttl }, None) => Some(CacheLayer {
                backend: Arc::new(
                    MemoryCache::new(MEMORY_CACHE_ENTRIES, MEMORY_CACHE_BYTES)
                        .map_err(|e| config_err(e.to_string()))?,
                ),
                namespace: namespace.clone(),
                ttl: *ttl,
                coalescer: Coalescer::new(),
            }),
            #[cfg(not(feature = "redis"))]
            (CacheSettings::Redis { .. }, None) => {
                let refused =
                    crate::config::features::disabled("PGW_CACHE_BACKEND", "redis", "redis");
                return Err(config_err(refused.to_string()));
            }
            #[cfg(feature = "redis")]
            (CacheSettings::Redis { namespace, ttl }, None) => {
                let url = settings
                    .redis_url
                    .as_ref()
                    .ok_or_else(|| config_err("PGW_CACHE_BACKEND=redis needs REDIS_URL".into()))?;
                Some(CacheLayer {
                    backend: Arc::new(
                        RedisCache::connect(url.expose(), Duration::from_secs(1))
                            .await
                            .map_err(|e| config_err(format!("cache: {e}")))?,
                    ),
                    namespace: namespace.clone(),
                    ttl: *ttl,
                    coalescer: Coalescer::new(),
                })
            }
        };

        // Scopes.
        let mut scopes = BTreeMap::new();
        for (name, scope) in &settings.scopes {
            let selector: Box<dyn Selector> = match &self.selector {
                Some(make) => make(),
                None => default_selector(scope.selector),
            };
            let config = scope_config(scope, &settings);
            let pacer = match &self.pacer {
                Some(make) => Arc::clone(make),
                None => pacer_factory(scope.pacer),
            };
            let identities = identities(scope);
            let entry = match scope.kind {
                ScopeKind::Chat => {
                    let specs = source_specs(scope, |s| {
                        ChatTransport::new(s.clone(), self.registry.get(&s.provider).clone())
                    });
                    // Each source's configured mode (a fallback later only weakens how the
                    // schema is asked for, never what is accepted); the set is part of the cache
                    // key of typed calls.
                    let mut structured_modes: Vec<_> = scope
                        .sources
                        .iter()
                        .map(|s| s.effective_structured_mode(self.registry.get(&s.provider)))
                        .collect();
                    structured_modes.sort_unstable();
                    structured_modes.dedup();
                    let mut extra_body = Map::new();
                    for s in &scope.sources {
                        extra_body.extend(s.extra_body.clone());
                    }
                    let governed = add_scope(&runtime, config, specs, selector, pacer).await?;
                    // Telemetry rows of typed asks name the mode their source was in.
                    let identities = identities
                        .into_iter()
                        .zip(governed.sources())
                        .map(|(identity, source)| SourceIdentity {
                            structured_mode: Some(Arc::clone(source.transport.source_mode())),
                            ..identity
                        })
                        .collect();
                    ScopeEntry::Chat(ChatScope {
                        scope: governed,
                        identities,
                        fingerprint: crate::cache::key::fingerprint_sources(&scope.sources),
                        extra_body,
                        structured_modes,
                        metrics: crate::metrics::ChatMetrics::new(name),
                    })
                }
                ScopeKind::Embeddings => {
                    let specs = source_specs(scope, |s| EmbeddingTransport::new(s.clone()));
                    let embedding = scope.embedding.clone().ok_or_else(|| {
                        config_err(format!(
                            "{name}__BATCH_SIZE is required for an embeddings scope"
                        ))
                    })?;
                    ScopeEntry::Embeddings(EmbedScope {
                        scope: add_scope(&runtime, config, specs, selector, pacer).await?,
                        identities,
                        settings: embedding,
                    })
                }
                ScopeKind::Ocr => {
                    let specs = source_specs(scope, |s| OcrTransport::new(s.clone()));
                    ScopeEntry::Ocr(OcrScope {
                        scope: add_scope(&runtime, config, specs, selector, pacer).await?,
                        identities,
                    })
                }
            };
            scopes.insert(name.clone(), entry);
        }

        let core = Core {
            runtime,
            governance,
            scopes,
            telemetry,
            telemetry_args: args,
            telemetry_actor,
            cache,
            structured_max_retries: settings.structured_max_retries,
            budgets,
            owned,
            closed: AtomicBool::new(false),
            settings,
        };
        Ok(Gateway::from_core(Arc::new(core), default_scope.into()))
    }
}

/// The pacer `{SCOPE}__PACER*` asks for. A source's `MAX_CONCURRENCY` stays a hard cap (the
/// limiter's concurrency gate enforces it whatever the pacer says).
fn pacer_factory(settings: PacerSettings) -> PacerFactory {
    Arc::new(move |limits: &Limits| -> Box<dyn Pacer> {
        let max = limits.max_concurrency;
        match settings.mode {
            PacerMode::Adaptive => {
                let ceiling = match (settings.ceiling, max) {
                    (Some(c), 0) => c,
                    (Some(c), m) => c.min(m),
                    (None, m) => m,
                };
                Box::new(AdaptivePacer::new(
                    settings.start.unwrap_or(ADAPTIVE_START),
                    ceiling,
                ))
            }
            PacerMode::Aimd => Box::new(AimdPacer::with_bounds(
                settings.start.map_or(AIMD_START, f64::from),
                settings.ceiling.unwrap_or(AIMD_MIN_CEILING.max(max)),
            )),
            PacerMode::Off => Box::new(Unpaced::new(max)),
        }
    })
}

fn default_selector(kind: SelectorKind) -> Box<dyn Selector> {
    match kind {
        SelectorKind::HealthAware => Box::new(HealthAware::default()),
        SelectorKind::RoundRobin => Box::new(RoundRobin::default()),
        SelectorKind::LeastInflight => Box::new(LeastInflight),
    }
}

async fn add_scope<T: polygateway_actors::Transport>(
    runtime: &Runtime,
    config: ScopeConfig,
    specs: Vec<SourceSpec<T>>,
    selector: Box<dyn Selector>,
    pacer: PacerFactory,
) -> Result<Scope<T>, GatewayError> {
    runtime
        .add_scope(config, specs, selector, pacer)
        .await
        .map_err(GatewayError::Shutdown)
}

fn identities(scope: &ScopeSettings) -> Vec<SourceIdentity> {
    scope
        .sources
        .iter()
        .map(|s| SourceIdentity {
            name: s.name.clone(),
            model: s.model.clone(),
            provider: s.provider.clone(),
            structured_mode: None,
        })
        .collect()
}

fn scope_config(scope: &ScopeSettings, settings: &Settings) -> ScopeConfig {
    let mut config = ScopeConfig::new(scope.name.as_str());
    config.global = Limits {
        max_concurrency: scope.global_max_concurrency,
        rpm: scope.global_rpm,
        tpm: scope.global_tpm,
    };
    config.max_attempts = scope.retry.max_attempts.max(1);
    config.backoff_base = scope.retry.backoff_base;
    config.backoff_max = scope.retry.backoff_max;
    config.quota_full_fails_fast = scope.quota_full == crate::config::QuotaFull::FailFast;
    config.circuit_open_waits = scope.circuit_open == crate::config::CircuitOpenPolicy::Wait;
    config.stall_window = scope.backpressure.stall_window;
    config.poll_interval = scope.backpressure.poll_interval;
    config.lease_ttl = settings.lease_ttl;
    config
}

/// Breaker parameters of one source (docs/behaviour.md §5.4 defaults resolved here).
pub(crate) fn breaker_config(scope: &ScopeSettings, source: &SourceSettings) -> BreakerConfig {
    let b = &scope.breaker;
    let slowest = scope
        .sources
        .iter()
        .map(|s| s.timeout)
        .max()
        .unwrap_or(source.timeout);
    let probe_ttl = b.probe_ttl.unwrap_or_else(|| {
        (2 * slowest)
            .max(b.cooldown)
            .max(source.timeout + Duration::from_secs(5))
    });
    BreakerConfig {
        fail_threshold: b.fail_threshold,
        max_concurrency: source.max_concurrency,
        cooldown: b.cooldown,
        max_cooldown: b
            .max_cooldown
            .unwrap_or_else(|| b.cooldown.max(Duration::from_secs(300))),
        probe_ttl,
        min_calls: b.min_calls,
        fail_rate: b.fail_rate,
        bucket: b.window,
    }
}

fn source_specs<T>(
    scope: &ScopeSettings,
    make: impl Fn(&SourceSettings) -> T,
) -> Vec<SourceSpec<T>> {
    scope
        .sources
        .iter()
        .map(|s| SourceSpec {
            name: s.name.as_str().into(),
            transport: Arc::new(make(s)),
            breaker: breaker_config(scope, s),
            limits: Limits {
                max_concurrency: s.max_concurrency,
                rpm: s.rpm,
                tpm: s.tpm,
            },
            est_tokens: s.effective_est_tokens(),
        })
        .collect()
}

/// A governance backend (Redis) that cannot be reached while the gateway is built: the
/// fail-closed outage of docs/behaviour.md §6 (`GovernanceBackendError`, retry in 5 s), not a
/// configuration mistake — the same URL works once the server is back.
#[cfg(feature = "redis")]
fn governance_down(scope: &str, message: &str) -> GatewayError {
    GatewayError::Unavailable(Box::new(crate::error::Unavailable {
        kind: crate::error::UnavailableKind::GovernanceBackend,
        scope: scope.to_string(),
        reason: crate::error::UnavailableReason::GovernanceBackendDown,
        retry_after_s: 5.0,
        per_source_reasons: BTreeMap::new(),
        detail: format!("REDIS_URL: {message}"),
        budget: None,
    }))
}
