//! Per-key request-rate and concurrency limits, enforced by the runtime's own limiter backend
//! (memory, or Redis shared by every server replica): each key is a limiter scope of its own,
//! `vkey.{name}`, whose scope-wide gates carry the key's `rpm` and `max_concurrency`. A request
//! holds the lease for as long as its response (stream included) is alive; dropping the guard
//! releases it. Not authentication (that is [`super::keys`]) and not the upstream limits (those
//! are the scopes' own gates, applied per attempt as always).

use std::sync::Arc;
use std::time::Duration;

use polygateway_actors::{GateBackend, GateDecision, GateRequest, Lease, Limits};

use super::keys::VirtualKey;

/// Why a key's request was not admitted.
pub(crate) enum KeyRefusal {
    /// A limit of the key is full; try again after this long.
    Limited {
        gate: &'static str,
        retry_after: Duration,
    },
    /// The limiter backend did not answer (fail closed, as every governed call does).
    BackendDown(String),
}

/// The key's lease; released when dropped.
pub(crate) struct KeyLease {
    gate: Arc<dyn GateBackend>,
    lease: Option<Lease>,
}

impl Drop for KeyLease {
    fn drop(&mut self) {
        if let Some(lease) = self.lease.take() {
            let gate = Arc::clone(&self.gate);
            // Release off the response path; the lease TTL reclaims it should this be lost.
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(async move {
                    let _ = gate.release(&lease).await;
                });
            }
        }
    }
}

/// Takes the key's lease, or says why not. A key without limits costs nothing.
pub(crate) async fn admit_key(
    gate: &Arc<dyn GateBackend>,
    key: &VirtualKey,
    lease_ttl: Duration,
    timeout: Duration,
) -> Result<Option<KeyLease>, KeyRefusal> {
    if key.rpm() == 0 && key.max_concurrency() == 0 {
        return Ok(None);
    }
    let request = GateRequest {
        scope: format!("vkey.{}", key.name()).into(),
        source: "requests".into(),
        global: Limits {
            max_concurrency: key.max_concurrency(),
            rpm: key.rpm(),
            tpm: 0,
        },
        per_source: Limits::default(),
        est_tokens: 0,
        lease_id: polygateway_actors::runtime::new_id().into(),
        lease_ttl,
    };
    let decision = tokio::time::timeout(timeout, gate.admit(&request))
        .await
        .map_err(|_| KeyRefusal::BackendDown("the limiter did not answer in time".into()))?
        .map_err(|e| KeyRefusal::BackendDown(e.message))?;
    match decision {
        GateDecision::Admitted(lease) => Ok(Some(KeyLease {
            gate: Arc::clone(gate),
            lease: Some(lease),
        })),
        GateDecision::Refused { gate, retry_after } => Err(KeyRefusal::Limited {
            gate: if matches!(gate, polygateway_actors::Gate::GlobalRpm) {
                "rpm"
            } else {
                "max_concurrency"
            },
            retry_after,
        }),
    }
}
