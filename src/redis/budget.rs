//! The spend-budget gate of [`RedisGate`] (docs/behaviour.md §5.8): `lua/budget.lua` does the
//! work atomically on the server clock; this file builds keys and arguments and decodes answers.
//! The reference state machine is `polygateway_actors::policy::budget::BudgetLedger`.

use std::sync::Arc;
use std::time::Duration;

use fred::prelude::Value;
use polygateway_actors::{
    BackendError, BudgetClaim, BudgetDecision, BudgetExhausted, BudgetLease, BudgetPeriod,
    BudgetRequest, BudgetSpend,
};

use super::connection::ScriptKind;
use super::gate::{count, millis, non_negative, RedisGate};

/// A period as `lua/budget.lua` reads it: a letter and, for fixed windows, their length.
fn period_args(period: BudgetPeriod) -> [Value; 2] {
    match period {
        BudgetPeriod::Hour => [Value::from("h"), Value::Integer(0)],
        BudgetPeriod::Day => [Value::from("d"), Value::Integer(0)],
        BudgetPeriod::Month => [Value::from("m"), Value::Integer(0)],
        BudgetPeriod::Fixed(len) => [Value::from("f"), Value::Integer(millis(len).max(1))],
    }
}

impl RedisGate {
    fn budget_keys<'a>(&self, lease_id: &str, names: impl Iterator<Item = &'a str>) -> Vec<String> {
        let keys = self.redis().keys();
        let mut out = vec![keys.budget_record(lease_id)];
        out.extend(names.map(|n| keys.budget(n)));
        out
    }

    pub(super) async fn reserve_budget_lua(
        &self,
        request: &BudgetRequest,
    ) -> Result<BudgetDecision, BackendError> {
        let keys = self.budget_keys(&request.lease_id, request.claims.iter().map(|c| &*c.key));
        let mut args = vec![
            Value::from("reserve"),
            Value::Integer(millis(request.lease_ttl).max(1)),
            count(request.est_micros),
        ];
        for claim in &request.claims {
            args.push(count(claim.limit_micros));
            args.extend(period_args(claim.period));
        }
        let client = self.redis().pinned();
        let reply: Vec<i64> = match self
            .redis()
            .eval_on(&client, ScriptKind::Budget, keys.clone(), args)
            .await
        {
            Ok(reply) => reply,
            Err(e) => {
                // The caller treats the reservation as never made: refund it should it have run.
                let refund = vec![Value::from("settle"), Value::Integer(0)];
                self.redis()
                    .compensate(client, ScriptKind::Budget, keys, refund);
                return Err(e);
            }
        };
        match reply.as_slice() {
            [1, windows @ ..] if windows.len() == request.claims.len() => {
                Ok(BudgetDecision::Reserved(BudgetLease {
                    id: Arc::clone(&request.lease_id),
                    est_micros: request.est_micros,
                    windows: request
                        .claims
                        .iter()
                        .zip(windows)
                        .map(|(c, w)| (Arc::clone(&c.key), non_negative(*w)))
                        .collect(),
                }))
            }
            [0, i, limit, spent, wait_ms] => {
                let claim = usize::try_from(*i)
                    .ok()
                    .and_then(|i| i.checked_sub(1))
                    .and_then(|i| request.claims.get(i))
                    .ok_or_else(|| {
                        BackendError::new(format!("budget.lua: unknown claim number {i}"))
                    })?;
                Ok(BudgetDecision::Exhausted(BudgetExhausted {
                    key: Arc::clone(&claim.key),
                    limit_micros: non_negative(*limit),
                    spent_micros: non_negative(*spent),
                    retry_after: Duration::from_millis(non_negative(*wait_ms)),
                }))
            }
            other => Err(BackendError::new(format!(
                "budget.lua: unexpected reply {other:?}"
            ))),
        }
    }

    pub(super) async fn settle_budget_lua(
        &self,
        lease: &BudgetLease,
        actual_micros: u64,
    ) -> Result<(), BackendError> {
        let keys = self.budget_keys(&lease.id, lease.windows.iter().map(|(k, _)| &**k));
        let args = vec![Value::from("settle"), count(actual_micros)];
        let _applied: i64 = self.redis().eval(ScriptKind::Budget, keys, args).await?;
        Ok(())
    }

    pub(super) async fn budget_spend_lua(
        &self,
        claim: &BudgetClaim,
    ) -> Result<BudgetSpend, BackendError> {
        let keys = vec![self.redis().keys().budget(&claim.key)];
        let mut args = vec![Value::from("spent")];
        args.extend(period_args(claim.period));
        let reply: Vec<i64> = self.redis().eval(ScriptKind::Budget, keys, args).await?;
        match reply.as_slice() {
            [spent, resets_ms] => Ok(BudgetSpend {
                spent_micros: non_negative(*spent),
                resets_in: Duration::from_millis(non_negative(*resets_ms)),
            }),
            other => Err(BackendError::new(format!(
                "budget.lua: unexpected reply {other:?}"
            ))),
        }
    }
}
