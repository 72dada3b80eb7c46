//! The Redis key layout of the governance backends. One place builds every key name so the layout
//! is documented once and every script call provably shares one hash tag.
//!
//! Layout (`P` = key prefix, default `pgw`; `S` = scope; `R` = source):
//!
//! | key | type | used by |
//! |---|---|---|
//! | `P:{S}:lease` | ZSET lease id → expiry ms | global concurrency gate |
//! | `P:{S}:src:R:lease` | ZSET lease id → expiry ms | source concurrency gate |
//! | `P:{S}:win` | HASH `r:<w>`/`t:<w>` → requests/tokens of window `w` | global RPM/TPM |
//! | `P:{S}:src:R:win` | HASH, same fields | source RPM/TPM |
//! | `P:{S}:rec:<lease id>` | HASH `w`, `est`, `exp`, `settled`, `released`; `ep`, `pr` (breaker epoch and probe of an attempt admission), `fin` (attempt finished) | re-send, settle and verdict idempotency; kept 30 s once finished (released and settled) |
//! | `P:{S}:progress` | STRING server ms | stall guard (`mark_progress`) |
//! | `P:{S}:src:R:breaker` | HASH | breaker state of one source |
//! | `P:{S}:src:R:verdict:<id>` | STRING first answer | a standalone breaker verdict's id, kept 30 s: a re-sent verdict counts once |
//! | `P:{budget}:B:<name>` | HASH `<window index>` → micro-units spent | one spend budget (`scope:S`, `tenant:T`, `vkey:K`); kept an hour past its window |
//! | `P:{budget}:rec:<lease id>` | HASH `est`, `exp`, `settled`, `w1..wn` | a budget reservation: re-send and settle idempotency; lives for its TTL, 30 s once settled |
//!
//! Script calls and their keys (every key of a call carries the same `{S}` tag):
//!
//! | script | keys | round trips |
//! |---|---|---|
//! | `attempt.lua` `finish`…, `admit` | per operation: the five limiter keys, `breaker` of R, `progress` | one per admission (carrying the finishes held for it) and one per finish sent alone — the runtime's hot path |
//! | `limiter.lua` | `lease`, `src:R:lease`, `win`, `src:R:win`, `rec:<id>` | standalone gate port calls |
//! | `breaker.lua` | `src:R:breaker` (+ `src:R:verdict:<id>` for `record`) | standalone breaker port calls |
//! | `progress.lua` | `progress` | stall guard reads |
//! | `budget.lua` | `{budget}:rec:<id>` + one `{budget}:B:<name>` per budget | once when a budgeted call starts, once when it ends; never without a budget |
//!
//! The scope is the hash tag, so every key of one scope — global and per source — lands in one
//! cluster slot and each script call touches a single slot (a scope's gates live on one shard:
//! spread heavy traffic across scopes). Spend budgets are the exception: a tenant's budget is
//! shared by every scope, so all budget keys share the one `{budget}` tag (one slot; two script
//! calls per budgeted call). Not for: parsing keys back.

/// Builds key names under one prefix.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    prefix: String,
}

impl Keys {
    /// Keys under `prefix` (e.g. `pgw`, or a unique prefix per test).
    pub(crate) fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.to_owned(),
        }
    }

    fn scope(&self, scope: &str) -> String {
        format!("{}:{{{}}}", self.prefix, scope)
    }

    fn source(&self, scope: &str, source: &str) -> String {
        format!("{}:src:{}", self.scope(scope), source)
    }

    /// Global lease ZSET of a scope.
    pub(crate) fn global_leases(&self, scope: &str) -> String {
        format!("{}:lease", self.scope(scope))
    }

    /// Lease ZSET of one source.
    pub(crate) fn source_leases(&self, scope: &str, source: &str) -> String {
        format!("{}:lease", self.source(scope, source))
    }

    /// Global RPM/TPM window hash of a scope.
    pub(crate) fn global_window(&self, scope: &str) -> String {
        format!("{}:win", self.scope(scope))
    }

    /// RPM/TPM window hash of one source.
    pub(crate) fn source_window(&self, scope: &str, source: &str) -> String {
        format!("{}:win", self.source(scope, source))
    }

    /// Admission record of one lease.
    pub(crate) fn lease_record(&self, scope: &str, lease_id: &str) -> String {
        format!("{}:rec:{}", self.scope(scope), lease_id)
    }

    /// Spend counters of one budget (`scope:LLM`, `tenant:acme`, `vkey:ci`).
    pub(crate) fn budget(&self, name: &str) -> String {
        format!("{}:{{budget}}:B:{}", self.prefix, name)
    }

    /// Record of one budget reservation.
    pub(crate) fn budget_record(&self, lease_id: &str) -> String {
        format!("{}:{{budget}}:rec:{}", self.prefix, lease_id)
    }

    /// Progress clock of a scope.
    pub(crate) fn progress(&self, scope: &str) -> String {
        format!("{}:progress", self.scope(scope))
    }

    /// Breaker hash of one source.
    pub(crate) fn breaker(&self, scope: &str, source: &str) -> String {
        format!("{}:breaker", self.source(scope, source))
    }

    /// Verdict id of one standalone breaker verdict (remembered briefly against re-sends).
    pub(crate) fn verdict(&self, scope: &str, source: &str, verdict_id: &str) -> String {
        format!("{}:verdict:{}", self.source(scope, source), verdict_id)
    }

    /// The seven keys of an attempt call, in the order `lua/attempt.lua` expects: the five
    /// limiter keys, the source's breaker, the scope's progress clock.
    pub(crate) fn attempt(&self, scope: &str, source: &str, lease_id: &str) -> Vec<String> {
        let mut keys = self.gate(scope, source, lease_id);
        keys.push(self.breaker(scope, source));
        keys.push(self.progress(scope));
        keys
    }

    /// The five keys of a limiter call, in the order `lua/limiter.lua` expects.
    pub(crate) fn gate(&self, scope: &str, source: &str, lease_id: &str) -> Vec<String> {
        vec![
            self.global_leases(scope),
            self.source_leases(scope, source),
            self.global_window(scope),
            self.source_window(scope, source),
            self.lease_record(scope, lease_id),
        ]
    }
}

/// The cluster hash slot's tag of a key: the text between the first `{` and the next `}`.
#[cfg(test)]
fn hash_tag(key: &str) -> Option<&str> {
    let open = key.find('{')?;
    let close = key[open + 1..].find('}')? + open + 1;
    (close > open + 1).then(|| &key[open + 1..close])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_of_a_scope_shares_the_scope_tag() {
        let k = Keys::new("pgw");
        let mut all = k.attempt("LLM", "openai-a", "lease-1");
        all.push(k.breaker("LLM", "openai-b"));
        all.push(k.verdict("LLM", "openai-b", "v-1"));
        for key in &all {
            assert_eq!(hash_tag(key), Some("LLM"), "{key}");
            assert!(key.starts_with("pgw:{LLM}:"), "{key}");
        }
    }

    #[test]
    fn prefixes_and_sources_separate_keys() {
        let a = Keys::new("t1");
        let b = Keys::new("t2");
        assert_ne!(a.global_leases("LLM"), b.global_leases("LLM"));
        assert_ne!(a.source_leases("LLM", "x"), a.source_leases("LLM", "y"));
        assert_ne!(a.global_leases("LLM"), a.global_leases("VLM"));
        assert_eq!(a.breaker("OCR", "m1"), "t1:{OCR}:src:m1:breaker");
    }
}
