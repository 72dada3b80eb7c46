//! The carry policy: which finishes may wait (at most [`CARRY_WAIT`]) for their scope's next
//! admission to carry them ([`may_hold`]), and where they wait ([`Held`]). With a network
//! backend that saves a successful attempt one of its two round trips.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::ports::attempt::{AttemptOutcome, BreakerAction, PendingFinish};
use crate::ports::breaker::BreakerVerdict;

use super::permit::Permit;

/// Finishes nobody waits for, held back per scope until the scope's next admission carries them
/// ([`AttemptBackend::admit_after`]) — so a network backend spends one round trip per attempt
/// instead of two — or, when no admission comes within [`CARRY_WAIT`], sent together on their
/// own. A scope has an entry exactly while a send of its queue is scheduled.
#[derive(Debug, Default)]
pub(super) struct Held {
    queues: Mutex<HashMap<Arc<str>, Vec<PendingFinish>>>,
}

impl Held {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Vec<PendingFinish>>> {
        self.queues.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queue `pending`; true when its scope had nothing queued (the caller schedules the send).
    pub(super) fn push(&self, pending: PendingFinish) -> bool {
        match self.lock().entry(Arc::clone(&pending.permit.lease.scope)) {
            Entry::Occupied(mut queue) => {
                queue.get_mut().push(pending);
                false
            }
            Entry::Vacant(slot) => {
                slot.insert(vec![pending]);
                true
            }
        }
    }

    /// What an admission of `scope` carries (the scheduled send then finds less or nothing).
    pub(super) fn take(&self, scope: &str) -> Vec<PendingFinish> {
        self.lock()
            .get_mut(scope)
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// What the scheduled send of `scope` sends; a later finish schedules a new send.
    pub(super) fn remove(&self, scope: &str) -> Vec<PendingFinish> {
        self.lock().remove(scope).unwrap_or_default()
    }
}

/// How long a held finish waits for an admission of its scope to carry it. Its slot stays taken
/// in the shared store that long for other processes (this process's admissions carry it, so they
/// never wait for it): short against any upstream call, long enough for a busy scope's next
/// admission to come.
pub(super) const CARRY_WAIT: Duration = Duration::from_millis(5);

/// Whether a finish may be held back: nobody waits for its answer, and it changes nothing another
/// process must learn at once (a failure verdict, a forced opening and a probe's verdict are sent
/// at once).
pub(super) fn may_hold(permit: &Permit, outcome: &AttemptOutcome, answer_wanted: bool) -> bool {
    !answer_wanted
        && permit.attempt.probe_id.is_none()
        && matches!(
            outcome.action,
            BreakerAction::Record(BreakerVerdict::Success) | BreakerAction::NoVerdict
        )
}
