//! Build step: the scopes — per configured scope, its transports (chat, embeddings or OCR), its
//! selector and pacer, and its router with one actor per source, registered with the runtime;
//! and its call stack (`crate::call`), composed here once: the layers its kind of call passes
//! through, over its runtime scope.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use polygateway_actors::policy::adaptive_pacer::AdaptivePacer;
use polygateway_actors::policy::pacer::{AimdPacer, Pacer, Unpaced, AIMD_MIN_CEILING, AIMD_START};
use polygateway_actors::policy::reserve::BatchReserve;
use polygateway_actors::policy::select::{HealthAware, LeastInflight, RoundRobin, Selector};
use polygateway_actors::runtime::{
    Governance, PacerFactory, Runtime, Scope, ScopeConfig, SourceSpec,
};
use polygateway_actors::{BreakerConfig, Limits};
use serde_json::Map;

use super::super::scopes::{ChatScope, EmbedScope, OcrScope};
use super::super::ScopeEntry;
use super::super::Telemetry;
use super::GatewayBuilder;
use crate::call::budget::BudgetPlan;
use crate::call::cache::CacheStore;
use crate::call::{Budget, Cache, ChatStack, EmbedStack, Govern, Ladder, OcrStack};
use crate::config::defaults;
use crate::config::keys::scope::BATCH_SIZE;
use crate::config::{
    GovernanceBackendKind, PacerMode, PacerSettings, ScopeKind, ScopeSettings, SelectorKind,
    Settings, SourceSettings,
};
use crate::error::GatewayError;
use crate::provider::Dialect;
use crate::telemetry::record::SourceIdentity;
use crate::transport::chat::ChatTransport;
use crate::transport::dialect::gemini::embed as gemini_embed;
use crate::transport::embeddings::EmbeddingTransport;
use crate::transport::ocr::OcrTransport;

/// What the call stacks of every scope share: telemetry, the response cache, spend budgets and
/// the limiter backend their budget gate is.
pub(super) struct Shared<'a> {
    pub telemetry: &'a Arc<Telemetry>,
    pub cache: &'a Option<Arc<CacheStore>>,
    pub budgets: &'a Arc<BudgetPlan>,
    pub governance: &'a Governance,
}

/// What every kind of scope is registered with: its configuration, selector and pacer.
struct Governed {
    config: ScopeConfig,
    selector: Box<dyn Selector>,
    pacer: PacerFactory,
}

impl GatewayBuilder {
    pub(super) async fn build_scopes(
        &self,
        runtime: &Runtime,
        shared: &Shared<'_>,
    ) -> Result<BTreeMap<String, ScopeEntry>, GatewayError> {
        let mut scopes = BTreeMap::new();
        for (name, scope) in &self.settings.scopes {
            let entry = match scope.kind {
                ScopeKind::Chat => self.chat_scope(runtime, shared, name, scope).await?,
                ScopeKind::Embeddings => self.embed_scope(runtime, shared, name, scope).await?,
                ScopeKind::Ocr => self.ocr_scope(runtime, shared, name, scope).await?,
            };
            scopes.insert(name.clone(), entry);
        }
        Ok(scopes)
    }

    /// The injected selector and pacer, else the ones the scope's settings name.
    fn governed(&self, scope: &ScopeSettings) -> Governed {
        Governed {
            config: scope_config(scope, &self.settings),
            selector: match &self.selector {
                Some(make) => make(),
                None => default_selector(scope.selector),
            },
            pacer: match &self.pacer {
                Some(make) => Arc::clone(make),
                None => pacer_factory(scope.pacer),
            },
        }
    }

    async fn chat_scope(
        &self,
        runtime: &Runtime,
        shared: &Shared<'_>,
        name: &str,
        scope: &ScopeSettings,
    ) -> Result<ScopeEntry, GatewayError> {
        let specs = source_specs(scope, |s| {
            ChatTransport::new(s.into(), self.registry.get(&s.provider).clone())
        });
        // Each source's configured mode (a fallback later only weakens how the schema is asked
        // for, never what is accepted); the set is part of the cache key of typed calls.
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
        let governed = add_scope(runtime, self.governed(scope), specs).await?;
        // Telemetry rows of typed asks name the mode their source was in.
        let identities = identities(scope)
            .into_iter()
            .zip(governed.sources())
            .map(|(identity, source)| SourceIdentity {
                structured_mode: Some(Arc::clone(source.transport.source_mode())),
                ..identity
            })
            .collect::<Vec<SourceIdentity>>();
        let metrics = Arc::new(crate::metrics::ChatMetrics::new(
            name,
            identities.iter().map(|i| i.name.as_str()),
        ));
        let name: Arc<str> = name.into();
        let govern = Govern {
            scope: governed.clone(),
            name: Arc::clone(&name),
            identities,
            telemetry: Arc::clone(shared.telemetry),
            metrics: Arc::clone(&metrics),
        };
        let budget = Budget {
            plan: Arc::clone(shared.budgets),
            gate: Arc::clone(&shared.governance.gate),
            timeout: shared.governance.timeout,
            scope: name,
            telemetry: Arc::clone(shared.telemetry),
            inner: govern,
        };
        let ladder = Ladder {
            telemetry: Arc::clone(shared.telemetry),
            extra_body: extra_body.clone(),
            inner: budget,
        };
        let cache = Cache {
            store: shared.cache.clone(),
            telemetry: Arc::clone(shared.telemetry),
            metrics,
            fingerprint: crate::cache::key::fingerprint_sources(&scope.sources),
            structured_modes,
            inner: ladder,
        };
        Ok(ScopeEntry::Chat(ChatScope {
            scope: governed,
            stack: ChatStack {
                layers: cache,
                telemetry: Arc::clone(shared.telemetry),
                extra_body,
            },
        }))
    }

    async fn embed_scope(
        &self,
        runtime: &Runtime,
        shared: &Shared<'_>,
        name: &str,
        scope: &ScopeSettings,
    ) -> Result<ScopeEntry, GatewayError> {
        let embedding = scope.embedding.clone().ok_or_else(|| {
            GatewayError::Config(crate::config::ConfigError::Assembly(format!(
                "{} is required for an embeddings scope",
                BATCH_SIZE.in_scope(name)
            )))
        })?;
        for s in &scope.sources {
            match s.effective_dialect(self.registry.get(&s.provider)) {
                Dialect::Anthropic => {
                    return Err(GatewayError::Config(crate::config::ConfigError::Assembly(
                        format!(
                        "source {} of embeddings scope {name} speaks Anthropic's Messages API, \
                         which has no embeddings; an embeddings source speaks openai or gemini",
                        s.name
                    ),
                    )))
                }
                Dialect::Gemini if embedding.batch_size > gemini_embed::MAX_BATCH => {
                    return Err(GatewayError::Config(crate::config::ConfigError::Assembly(
                        format!(
                            "{} is {}, but source {} is a Gemini source, whose batchEmbedContents \
                         takes at most {} texts a request",
                            BATCH_SIZE.in_scope(name),
                            embedding.batch_size,
                            s.name,
                            gemini_embed::MAX_BATCH
                        ),
                    )))
                }
                _ => {}
            }
        }
        let specs = source_specs(scope, |s| {
            EmbeddingTransport::for_source(
                s.into(),
                self.registry.get(&s.provider),
                embedding.expected_dim,
            )
        });
        let governed = add_scope(runtime, self.governed(scope), specs).await?;
        Ok(ScopeEntry::Embeddings(EmbedScope {
            stack: EmbedStack {
                layers: govern(governed.clone(), shared, name, scope),
            },
            scope: governed,
            settings: embedding,
        }))
    }

    async fn ocr_scope(
        &self,
        runtime: &Runtime,
        shared: &Shared<'_>,
        name: &str,
        scope: &ScopeSettings,
    ) -> Result<ScopeEntry, GatewayError> {
        let specs = source_specs(scope, |s| OcrTransport::new(s.into()));
        let governed = add_scope(runtime, self.governed(scope), specs).await?;
        Ok(ScopeEntry::Ocr(OcrScope {
            stack: OcrStack {
                layers: govern(governed.clone(), shared, name, scope),
            },
            scope: governed,
        }))
    }
}

/// The govern layer of an embeddings or OCR scope (no metrics of its own).
fn govern<T>(
    governed: Scope<T>,
    shared: &Shared<'_>,
    name: &str,
    scope: &ScopeSettings,
) -> Govern<T> {
    Govern {
        scope: governed,
        name: name.into(),
        identities: identities(scope),
        telemetry: Arc::clone(shared.telemetry),
        metrics: (),
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
                // Open until the source shows strain, unless a start was configured (then slow
                // start from it, as before the open start existed).
                Box::new(match settings.start {
                    Some(start) => AdaptivePacer::new(start, ceiling),
                    None => AdaptivePacer::open(ceiling),
                })
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
    governed: Governed,
    specs: Vec<SourceSpec<T>>,
) -> Result<Scope<T>, GatewayError> {
    runtime
        .add_scope(governed.config, specs, governed.selector, governed.pacer)
        .await
        .map_err(GatewayError::from)
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
    // Only a shared gate needs a reserve: another process may hold it (docs/behaviour.md §5.7).
    let shared = settings.limiter_backend == GovernanceBackendKind::Redis;
    let reserve = scope.backpressure.batch_reserve.unwrap_or(if shared {
        defaults::BATCH_RESERVE_SHARED
    } else {
        0.0
    });
    config.batch_reserve = BatchReserve::new(reserve).expect("guarded at parse (config/guards.rs)");
    config.hedge = polygateway_actors::runtime::HedgeConfig {
        enabled: scope.hedge.enabled,
        floor: scope.hedge.floor,
        ceiling: scope.hedge.ceiling,
        budget: scope.hedge.budget,
    };
    config.continuation = polygateway_actors::runtime::ContinueConfig {
        enabled: scope.continuation.enabled,
    };
    config
}

/// Breaker parameters of one source (docs/behaviour.md §5.4 defaults resolved here).
fn breaker_config(scope: &ScopeSettings, source: &SourceSettings) -> BreakerConfig {
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
