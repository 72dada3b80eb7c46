//! The budget layer: spend budgets on the call path (docs/behaviour.md §5.8) — which budgets a
//! chat call counts against (its scope's `{SCOPE}__BUDGET`, its tenant's `PGW_TENANT_BUDGETS`
//! entry, its server key's `budget`), the reservation of its estimated cost before the governed
//! call ([`Budget`], above the govern layer), and the settlement of its real cost — the same cost
//! its telemetry rows record — when it ends.
//!
//! One reservation per ask (a structured re-ask is an ask of its own), not per attempt: failed
//! attempts cost nothing in telemetry, so only the answer that succeeds is charged. The gate
//! itself is the limiter backend's (`GateBackend::reserve_budget`): memory or Redis.
//!
//! A call with no budget configured anywhere takes the early return of [`BudgetPlan::claims`]:
//! no allocation, no backend call.
//!
//! Not for: pricing (`telemetry::cost`) or the window arithmetic (the actors crate's
//! `policy::budget`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use polygateway_actors::{
    BudgetClaim, BudgetDecision, BudgetExhausted, BudgetLease, BudgetRequest, GateBackend,
};

use super::ask::Ask;
use super::service::Service;
use crate::config::{ScopeSettings, Settings, SpendBudget};
use crate::error::{GatewayError, Unavailable, UnavailableKind, UnavailableReason};
use crate::telemetry::cost::Pricing;
use crate::telemetry::record::Telemetry;
use crate::transport::chat::ChatTransport;
use crate::types::{BudgetStatus, LlmResponse};

/// The budget layer of one chat scope over `inner`: each ask is reserved before it is governed
/// and settled at its cost after; a refusal is recorded like any call that never reached a
/// transport.
pub(crate) struct Budget<S> {
    pub plan: Arc<BudgetPlan>,
    /// The limiter backend (its budget gate) and its call bound.
    pub gate: Arc<dyn GateBackend>,
    pub timeout: Duration,
    pub scope: Arc<str>,
    pub telemetry: Arc<Telemetry>,
    pub inner: S,
}

impl<'r, 'a, S> Service<&'r Ask<'a, ChatTransport>> for Budget<S>
where
    S: Service<&'r Ask<'a, ChatTransport>, Response = LlmResponse> + Sync,
{
    type Response = LlmResponse;

    async fn call(&self, ask: &'r Ask<'a, ChatTransport>) -> Result<LlmResponse, GatewayError> {
        let options = ask.options;
        let claims = self
            .plan
            .claims(&self.scope, options.tenant(), options.key_budget.as_ref());
        let reservation = if claims.is_empty() {
            None
        } else {
            // Boxed, like the settlements below: only calls under a budget pay for them, and
            // inline they would size every call's future.
            let reserved =
                Box::pin(
                    self.plan
                        .reserve(&self.gate, self.timeout, &self.scope, claims),
                )
                .await;
            match reserved {
                Ok(r) => Some(r),
                Err(e) => {
                    self.telemetry.record_refusal(&ask.context, &e);
                    return Err(e);
                }
            }
        };
        let answer = self.inner.call(ask).await;
        if let Some(r) = reservation {
            let cost = match &answer {
                Ok(response) => response.cost,
                // A failed call's rows carry no cost, so it is charged nothing — except a
                // stream broken after deltas reached the caller: the upstream generated them,
                // so it keeps its estimate.
                Err(GatewayError::StreamInterrupted { .. }) => None,
                Err(_) => Some(0.0),
            };
            Box::pin(r.settle(cost)).await;
        }
        answer
    }
}

/// Every budget of a gateway and what a call in each chat scope is estimated to cost.
#[derive(Debug, Default)]
pub(crate) struct BudgetPlan {
    scopes: BTreeMap<String, BudgetClaim>,
    tenants: BTreeMap<String, BudgetClaim>,
    /// Per chat scope: the estimate reserved per call, in micro-units (`None` when a source
    /// has no price, so no budget can apply there).
    estimates: BTreeMap<String, Option<u64>>,
    lease_ttl: Duration,
}

/// The claim of a named budget (`scope:…`, `tenant:…`, `vkey:…`).
pub(crate) fn claim(name: String, budget: SpendBudget) -> BudgetClaim {
    BudgetClaim {
        key: name.into(),
        limit_micros: budget.micros,
        period: budget.period,
    }
}

/// A call's estimate: its tokens at the dearest price of any source of the scope (the source is
/// chosen per attempt, after the reservation). `est_tokens × price per 1M tokens` is exactly
/// micro-units. `None` when a source's model has no price.
fn estimate(scope: &ScopeSettings, pricing: Option<&Pricing>) -> Option<u64> {
    let pricing = pricing?;
    let mut est = 0.0_f64;
    for s in &scope.sources {
        let price = pricing.price(&s.model)?;
        let dearest = price.dearest_per_1m();
        est = est.max(s.effective_est_tokens() as f64 * dearest);
    }
    // Finite and non-negative (prices are checked at load); `as` saturates absurd values.
    Some(est.ceil() as u64)
}

impl BudgetPlan {
    /// The plan of `settings`; a budget that could never be charged is refused here.
    pub(crate) fn new(
        settings: &Settings,
        pricing: Option<&Pricing>,
    ) -> Result<Self, GatewayError> {
        let mut plan = Self {
            lease_ttl: settings.lease_ttl,
            ..Self::default()
        };
        for (name, scope) in &settings.scopes {
            if scope.kind != crate::config::ScopeKind::Chat {
                continue;
            }
            let est = estimate(scope, pricing);
            plan.estimates.insert(name.clone(), est);
            let needs_prices = scope.budget.is_some() || !settings.tenant_budgets.is_empty();
            if needs_prices && est.is_none() {
                return Err(GatewayError::Config(crate::config::ConfigError::Assembly(
                    format!(
                        "{} needs a price for every source's model of chat scope {name} \
                     (PGW_PRICING_PATH{}): a spend budget cannot count calls it cannot price",
                        if scope.budget.is_some() {
                            format!("{name}__BUDGET")
                        } else {
                            "PGW_TENANT_BUDGETS".to_string()
                        },
                        if pricing.is_none() {
                            " is not set"
                        } else {
                            " lacks one"
                        },
                    ),
                )));
            }
            if let Some(b) = scope.budget {
                plan.scopes
                    .insert(name.clone(), claim(format!("scope:{name}"), b));
            }
        }
        for (tenant, b) in &settings.tenant_budgets {
            plan.tenants
                .insert(tenant.clone(), claim(format!("tenant:{tenant}"), *b));
        }
        Ok(plan)
    }

    /// The budgets a call of `scope` by `tenant` (and server key `key`) counts against.
    pub(crate) fn claims(
        &self,
        scope: &str,
        tenant: &str,
        key: Option<&(String, SpendBudget)>,
    ) -> Vec<BudgetClaim> {
        if self.scopes.is_empty() && self.tenants.is_empty() && key.is_none() {
            return Vec::new();
        }
        let mut claims = Vec::new();
        claims.extend(self.scopes.get(scope).cloned());
        claims.extend(self.tenants.get(tenant).cloned());
        if let Some((name, b)) = key {
            claims.push(claim(format!("vkey:{name}"), *b));
        }
        claims
    }

    /// The chat scopes a spend budget cannot count (a source's model has no price): a budget
    /// that reaches one of them is refused when it is configured, not one call at a time.
    #[cfg(feature = "server")]
    pub(crate) fn unpriced_scopes(&self) -> impl Iterator<Item = &str> {
        self.estimates
            .iter()
            .filter(|(_, est)| est.is_none())
            .map(|(scope, _)| scope.as_str())
    }

    /// Every configured budget (scope, then tenant), for snapshots.
    pub(crate) fn configured(&self) -> impl Iterator<Item = &BudgetClaim> {
        self.scopes.values().chain(self.tenants.values())
    }

    /// Reserve the estimate of a call of `scope` in `claims`, or refuse it.
    pub(crate) async fn reserve(
        &self,
        gate: &Arc<dyn GateBackend>,
        timeout: Duration,
        scope: &str,
        claims: Vec<BudgetClaim>,
    ) -> Result<Reservation, GatewayError> {
        let est = self
            .estimates
            .get(scope)
            .copied()
            .flatten()
            .ok_or_else(|| {
                GatewayError::Config(crate::config::ConfigError::Assembly(format!(
                    "chat scope {scope} has a source without a price (PGW_PRICING_PATH): a spend \
                 budget cannot count its calls"
                )))
            })?;
        let request = BudgetRequest {
            claims,
            est_micros: est,
            lease_id: polygateway_actors::runtime::new_id().into(),
            lease_ttl: self.lease_ttl,
        };
        let periods: Vec<_> = request
            .claims
            .iter()
            .map(|c| (c.key.clone(), c.period))
            .collect();
        let decision = tokio::time::timeout(timeout, gate.reserve_budget(&request))
            .await
            .map_err(|_| backend_down(scope, "the budget gate did not answer in time".into()))?
            .map_err(|e| backend_down(scope, e.message))?;
        match decision {
            BudgetDecision::Reserved(lease) => Ok(Reservation {
                gate: Arc::clone(gate),
                timeout,
                lease: Some(lease),
            }),
            BudgetDecision::Exhausted(e) => {
                let period = periods
                    .iter()
                    .find(|(k, _)| *k == e.key)
                    .map_or_else(String::new, |(_, p)| p.name());
                Err(exhausted(scope, &e, period))
            }
        }
    }
}

fn backend_down(scope: &str, detail: String) -> GatewayError {
    GatewayError::Unavailable(Box::new(Unavailable {
        kind: UnavailableKind::GovernanceBackend,
        scope: scope.to_string(),
        reason: UnavailableReason::GovernanceBackendDown,
        retry_after_s: 5.0,
        per_source_reasons: BTreeMap::new(),
        detail: format!("spend budget: {detail}"),
        budget: None,
    }))
}

fn exhausted(scope: &str, e: &BudgetExhausted, period: String) -> GatewayError {
    let status = BudgetStatus::new(
        &e.key,
        e.limit_micros,
        e.spent_micros,
        period,
        e.retry_after,
    );
    GatewayError::Unavailable(Box::new(Unavailable {
        kind: UnavailableKind::AllSourcesExhausted,
        scope: scope.to_string(),
        reason: UnavailableReason::BudgetExhausted,
        retry_after_s: e.retry_after.as_secs_f64(),
        per_source_reasons: BTreeMap::new(),
        detail: format!(
            "spend budget {} is exhausted: {:.6} of {:.6} spent this {}, {:.6} left (less \
             than the call's estimate); it resets in {}s",
            status.name,
            status.spent,
            status.limit,
            status.period,
            status.remaining,
            e.retry_after.as_secs()
        ),
        budget: Some(status),
    }))
}

/// A call's reservation. [`Reservation::settle`] charges the real cost; dropped unsettled (the
/// call was cancelled) it is settled at the estimate in the background, because the upstream may
/// have worked on it.
pub(crate) struct Reservation {
    gate: Arc<dyn GateBackend>,
    timeout: Duration,
    lease: Option<BudgetLease>,
}

/// Currency → micro-units, rounded up: the gate never counts less than telemetry records.
fn micros(cost: f64) -> u64 {
    (cost.max(0.0) * 1e6).ceil() as u64
}

impl Reservation {
    /// Settle at the call's real cost: `Some(cost)` of an answer, `None` for an answer whose
    /// usage was not reported (charged at the estimate: unknown is not free), or `Some(0.0)`
    /// for a call that failed (its telemetry rows carry no cost either).
    pub(crate) async fn settle(mut self, cost: Option<f64>) {
        let Some(lease) = self.lease.take() else {
            return;
        };
        let actual = cost.map_or(lease.est_micros, micros);
        match tokio::time::timeout(self.timeout, self.gate.settle_budget(&lease, actual)).await {
            Ok(Ok(())) => {}
            // The reservation stays at its estimate until its TTL: the safe direction.
            Ok(Err(e)) => tracing::warn!(error = %e, "spend budget settle failed"),
            Err(_) => tracing::warn!("spend budget settle timed out"),
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if let Some(lease) = self.lease.take() {
            let gate = Arc::clone(&self.gate);
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(async move {
                    let est = lease.est_micros;
                    let _ = gate.settle_budget(&lease, est).await;
                });
            }
        }
    }
}

/// Spend against limit of `claims` (a failure names the budget in place of a scope).
pub(crate) async fn statuses<'a>(
    gate: &Arc<dyn GateBackend>,
    timeout: Duration,
    claims: impl Iterator<Item = &'a BudgetClaim>,
) -> Result<Vec<BudgetStatus>, GatewayError> {
    let mut out = Vec::new();
    for c in claims {
        let spend = tokio::time::timeout(timeout, gate.budget_spend(c))
            .await
            .map_err(|_| backend_down(&c.key, "the budget gate did not answer in time".into()))?
            .map_err(|e| backend_down(&c.key, e.message))?;
        out.push(BudgetStatus::new(
            &c.key,
            c.limit_micros,
            spend.spent_micros,
            c.period.name(),
            spend.resets_in,
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn micros_round_up() {
        assert_eq!(micros(0.000_001), 1);
        assert_eq!(micros(0.000_001_1), 2);
        assert_eq!(micros(-1.0), 0);
        assert_eq!(micros(2.5), 2_500_000);
    }

    #[test]
    fn no_budget_means_no_claims_and_no_allocation() {
        let plan = BudgetPlan::default();
        let claims = plan.claims("LLM", "acme", None);
        assert!(claims.is_empty() && claims.capacity() == 0);
    }
}
