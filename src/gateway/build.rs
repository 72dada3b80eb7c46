//! [`GatewayBuilder`]: settings plus injected ports → a running supervised runtime.

//!
//! [`GatewayBuilder::build`] runs named steps, each in its own file and owning the `cfg` arms
//! of its backends: the governance ports (`build/governance.rs`: memory or Redis), the runtime,
//! telemetry (`build/telemetry.rs`: sink, writer actor, pricing), the response cache
//! (`build/cache.rs`: memory or Redis) and the scopes (`build/scopes.rs`: transports, selector,
//! pacer and router per scope).

mod cache;
mod governance;
mod scopes;
mod telemetry;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use polygateway_actors::policy::select::Selector;
use polygateway_actors::runtime::{
    Governance, GovernanceFactory, PacerFactory, Runtime, RuntimeOptions,
};
use polygateway_actors::telemetry::{TelemetryConfig, TelemetrySink};
use polygateway_actors::{BreakerBackend, Clock, GateBackend, TokioClock};

use super::{Core, Gateway, Owned};
use crate::cache::ResponseCache;
use crate::config::Settings;
use crate::error::GatewayError;
use crate::provider::ProviderRegistry;
use crate::telemetry::row::TelemetryRow;

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
    /// # let (settings, mocks) = polygateway_testkit::doc_setup(&["LLM", "EMBED"], &[]).await;
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
    /// # let (settings, mocks) = polygateway_testkit::doc_setup(&["LLM", "EMBED"], &[]).await;
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
    /// use polygateway_testkit::{Behaviour, MockUpstream};
    /// let mock = MockUpstream::start(Behaviour::Slow { delay: std::time::Duration::from_millis(600) }).await;
    /// # let settings = polygateway_testkit::mock_settings(
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
    /// # let (settings, mocks) = polygateway_testkit::doc_setup(&["LLM"], &[]).await;
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
    /// # let (settings, mocks) = polygateway_testkit::doc_setup(&["LLM"], &[]).await;
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
    /// use polygateway_testkit::{Behaviour, MockUpstream};
    /// let mock = MockUpstream::start(Behaviour::healthy()).await;
    /// # let settings = polygateway_testkit::mock_settings(
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
    /// # let (settings, mocks) = polygateway_testkit::doc_setup(
    /// #     &["LLM"],
    /// #     &[
    /// #         ("LLM__OPENAI__1__RPM", "1"),
    /// #         ("LLM__QUOTA_FULL", "fail_fast"),
    /// #     ],
    /// # )
    /// # .await;
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
    /// use polygateway_testkit::{Behaviour, MockUpstream};
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
    /// use polygateway_testkit::{Behaviour, MockUpstream};
    /// let mock = MockUpstream::start(Behaviour::healthy()).await;
    /// let other = MockUpstream::start(Behaviour::healthy()).await;
    /// # let settings = polygateway_testkit::mock_settings(
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
    /// # let (settings, mocks) = polygateway_testkit::doc_setup(&["LLM"], &[]).await;
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
    /// # let (settings, mocks) = polygateway_testkit::doc_setup(&["LLM"], &[]).await;
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
    /// # use polygateway_testkit::{Behaviour, MockUpstream};
    /// # let mock = MockUpstream::start(Behaviour::healthy()).await;
    /// # let other = MockUpstream::start(Behaviour::healthy()).await;
    /// # let settings = polygateway_testkit::mock_settings(
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
    pub async fn build(mut self) -> Result<Gateway, GatewayError> {
        let default_scope = self.resolve_default_scope()?;
        // Settings built by hand never went through the parser's guards: a backend whose cargo
        // feature is off is refused here too, before anything starts.
        crate::config::features::check(&self.settings).map_err(GatewayError::Config)?;
        let mut owned = Owned::default();
        let governance = self.build_governance(&default_scope, &mut owned).await?;
        let runtime = self.start_runtime(&governance).await?;
        let telemetry = self.build_telemetry(&runtime, &mut owned).await?;
        let cache = self.build_cache().await?;
        let budgets = Arc::new(crate::call::budget::BudgetPlan::new(
            &self.settings,
            telemetry.pricing.as_deref(),
        )?);
        let shared = telemetry;
        let layers = scopes::Shared {
            telemetry: &shared,
            cache: &cache,
            budgets: &budgets,
            governance: &governance,
        };
        let scopes = self.build_scopes(&runtime, &layers).await?;
        let core = Core {
            runtime,
            governance,
            scopes,
            telemetry: shared,
            structured_max_retries: self.settings.structured_max_retries,
            budgets,
            owned,
            closed: AtomicBool::new(false),
            settings: self.settings,
        };
        Ok(Gateway::from_core(Arc::new(core), default_scope.into()))
    }

    /// The scope asked for, else the first configured one (in name order); it must exist.
    fn resolve_default_scope(&mut self) -> Result<String, GatewayError> {
        let configured = &self.settings.scopes;
        let default_scope = match self.default_scope.take() {
            Some(scope) => scope,
            None => configured.keys().next().cloned().ok_or_else(|| {
                GatewayError::Config(crate::config::ConfigError::Assembly(
                    "no scope is configured".into(),
                ))
            })?,
        };
        if !configured.contains_key(&default_scope) {
            let names: Vec<&str> = configured.keys().map(String::as_str).collect();
            return Err(GatewayError::SourceNotConfigured(format!(
                "scope {default_scope} has no sources configured (configured: {})",
                names.join(", ")
            )));
        }
        Ok(default_scope)
    }

    /// The supervised runtime over `governance`. fred reconnects by itself and reloads scripts
    /// on NOSCRIPT, so a restarted admission actor reuses the same clients.
    async fn start_runtime(&mut self, governance: &Governance) -> Result<Runtime, GatewayError> {
        let shared = governance.clone();
        let factory: GovernanceFactory = Arc::new(move || {
            let gov = shared.clone();
            Box::pin(async move { Ok(gov) })
        });
        let options = self.runtime_options.take().unwrap_or(RuntimeOptions {
            clock: Arc::clone(&self.clock),
            ..RuntimeOptions::default()
        });
        Runtime::start(factory, options)
            .await
            .map_err(GatewayError::from)
    }
}
