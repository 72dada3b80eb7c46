//! Which scope a request's `model` names: every configured scope by its own name, plus the
//! aliases of `PGW_SERVER_MODEL_ALIASES` (docs/behaviour.md §12.1). `serve` and batch jobs map
//! models the same way.

use std::collections::BTreeMap;

use crate::config::ScopeKind;
use crate::error::GatewayError;
use crate::Gateway;

/// Request `model` → scope, or an error naming an alias whose scope is not configured.
pub(crate) fn model_table(gw: &Gateway) -> Result<BTreeMap<String, String>, GatewayError> {
    let mut models: BTreeMap<String, String> =
        gw.scopes().into_iter().map(|s| (s.clone(), s)).collect();
    for (alias, scope) in &gw.settings().server.model_aliases {
        if gw.settings().scope(scope).is_err() {
            return Err(GatewayError::Config(crate::config::ConfigError::Assembly(
                format!(
                    "PGW_SERVER_MODEL_ALIASES: alias {alias} names scope {scope}, which is not \
                 configured (configured: {})",
                    gw.scopes().join(", ")
                ),
            )));
        }
        models.insert(alias.clone(), scope.clone());
    }
    Ok(models)
}

/// The kind of scope `scope`, if configured.
pub(crate) fn kind_of(gw: &Gateway, scope: &str) -> Option<ScopeKind> {
    gw.settings().scope(scope).ok().map(|s| s.kind)
}
