//! [`CallOrder`]: a call's place among waiting calls, taken from its options once and handed to
//! each governed call it makes. Its own file because chat, embeddings and OCR calls all use it.

use std::sync::Arc;

use polygateway_actors::runtime::GovernOptions;

use crate::types::CallOptions;

/// What orders a call among waiting calls (docs/behaviour.md §5.7): its class, its tenant and
/// weight, and its deadline as an instant fixed when the call starts, so a structured re-ask
/// has what is left of it, not a fresh one.
#[derive(Debug, Clone, Default)]
pub(crate) struct CallOrder {
    pub priority: crate::types::Priority,
    pub deadline_at: Option<std::time::Instant>,
    pub tenant: Option<Arc<str>>,
    pub weight: u32,
}

impl CallOrder {
    pub(crate) fn of(options: &CallOptions) -> Self {
        Self {
            priority: options.priority,
            deadline_at: options.deadline.map(|d| std::time::Instant::now() + d),
            tenant: options.tenant_id.as_deref().map(Arc::from),
            weight: options.weight.unwrap_or(1),
        }
    }

    /// The runtime's options for one governed call of it.
    pub(crate) fn govern(&self, breaker_exempt: bool) -> GovernOptions {
        GovernOptions {
            breaker_exempt,
            priority: self.priority,
            deadline: self
                .deadline_at
                .map(|at| at.saturating_duration_since(std::time::Instant::now())),
            tenant: self.tenant.clone(),
            weight: self.weight,
        }
    }
}
