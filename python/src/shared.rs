//! `_native.NativeGovernance`: the limiter-and-breaker store of one client, handed to another
//! client so both are governed by the same state (the original library's `from_env(limiter=…,
//! breaker=…)` injection: two clients share one limiter only when it is injected explicitly).
//!
//! In memory the store is the pair of backends the first client was built with, injected into the
//! second. In Redis the store is the server itself (every client on the same `REDIS_URL` already
//! shares it), so injection only checks that both clients point at the same server.
//!
//! Not for: the response cache or telemetry (shared through their backends' configuration).

use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use polygateway::config::{GovernanceBackendKind, Secret, Settings};
use polygateway::ports::{BreakerBackend, GateBackend, MemoryBreakers, MemoryGate, TokioClock};
use polygateway::GatewayBuilder;

/// Where a client's limits and breakers live.
#[derive(Clone)]
enum Store {
    /// Process-local backends, shared by handing the same instances to another client.
    Memory {
        gate: Arc<dyn GateBackend>,
        breakers: Arc<dyn BreakerBackend>,
    },
    /// A Redis server: shared by every client that uses it.
    Redis { url: Secret },
}

/// The governance store of a client (`client.limiter` / `client.breaker` in Python).
#[pyclass(module = "polygateway._native", frozen)]
#[derive(Clone)]
pub(crate) struct NativeGovernance {
    store: Store,
}

#[pymethods]
impl NativeGovernance {
    /// `memory` or `redis`.
    #[getter]
    fn backend(&self) -> &'static str {
        match self.store {
            Store::Memory { .. } => "memory",
            Store::Redis { .. } => "redis",
        }
    }

    fn __repr__(&self) -> String {
        format!("<polygateway governance store ({})>", self.backend())
    }

    /// The same store: the same backend instances, or the same Redis server.
    fn __eq__(&self, other: &Self) -> bool {
        match (&self.store, &other.store) {
            (Store::Memory { gate: a, .. }, Store::Memory { gate: b, .. }) => Arc::ptr_eq(a, b),
            (Store::Redis { url: a }, Store::Redis { url: b }) => a == b,
            _ => false,
        }
    }
}

/// The store a client built from `settings` uses: `injected` when given (after checking it fits
/// the settings), else a new one. `None` when limits and breakers live in different kinds of
/// backend (one in memory, one in Redis): such a client has nothing single to share.
pub(crate) fn store_for(
    settings: &Settings,
    injected: Option<&NativeGovernance>,
) -> PyResult<Option<NativeGovernance>> {
    use GovernanceBackendKind::{Memory, Redis};
    let kinds = (settings.limiter_backend, settings.breaker_backend);
    let store =
        match (kinds, injected.map(|g| &g.store)) {
            ((Memory, Memory), None) => {
                let clock = Arc::new(TokioClock);
                Store::Memory {
                    gate: Arc::new(MemoryGate::new(clock.clone())),
                    breakers: Arc::new(MemoryBreakers::new(clock)),
                }
            }
            ((Memory, Memory), Some(store @ Store::Memory { .. })) => store.clone(),
            ((Redis, Redis), None) => match &settings.redis_url {
                Some(url) => Store::Redis { url: url.clone() },
                None => return Ok(None), // refused by the builder, naming REDIS_URL
            },
            ((Redis, Redis), Some(Store::Redis { url })) => {
                if settings.redis_url.as_ref() != Some(url) {
                    return Err(PyValueError::new_err(
                    "limiter=/breaker= come from a client on another Redis server: clients share \
                     Redis governance by using the same REDIS_URL",
                ));
                }
                Store::Redis { url: url.clone() }
            }
            ((Memory, Memory), Some(Store::Redis { .. })) => return Err(PyValueError::new_err(
                "limiter=/breaker= come from a client governed in Redis, this one is configured \
                 with PGW_LIMITER_BACKEND=memory and PGW_BREAKER_BACKEND=memory: set both to \
                 redis with the same REDIS_URL (Redis state is shared by every client on it)",
            )),
            ((Redis, Redis), Some(Store::Memory { .. })) => return Err(PyValueError::new_err(
                "limiter=/breaker= hold process-local (memory) state, this client is configured \
                 with PGW_LIMITER_BACKEND=redis and PGW_BREAKER_BACKEND=redis: its limits are \
                 already shared through REDIS_URL; drop limiter=/breaker=, or configure both \
                 clients with memory backends to share in-process state",
            )),
            (_, None) => return Ok(None),
            (_, Some(_)) => return Err(PyValueError::new_err(
                "limiter=/breaker= need PGW_LIMITER_BACKEND and PGW_BREAKER_BACKEND to name the \
                 same backend (both memory or both redis)",
            )),
        };
    Ok(Some(NativeGovernance { store }))
}

/// Hand a memory store to the builder (a Redis store is the builder's own, from the settings).
pub(crate) fn apply(builder: GatewayBuilder, store: Option<&NativeGovernance>) -> GatewayBuilder {
    match store.map(|s| &s.store) {
        Some(Store::Memory { gate, breakers }) => {
            builder.governance(gate.clone(), breakers.clone())
        }
        _ => builder,
    }
}
