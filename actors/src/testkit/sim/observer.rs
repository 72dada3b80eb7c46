//! What the simulator hears from the driver per attempt ([`SimObserver`]): the telemetry rows it
//! checks.

use std::sync::{Arc, Mutex};

use crate::outcome::FailureClass;
use crate::runtime::{AttemptReport, AttemptResult, CallObserver, TerminalReport};

use super::faults::SimError;
use super::params::{ms, Ms};
use super::state::{lock, State};
use super::transport::SimTransport;
/// What the simulator hears from the driver per attempt: the telemetry rows it checks.
pub(super) struct SimObserver {
    pub(super) state: Arc<Mutex<State>>,
    /// Per source, its name and breaker cooldown.
    pub(super) sources: Vec<(Arc<str>, Ms)>,
    pub(super) call: usize,
}

impl CallObserver<SimTransport> for SimObserver {
    fn on_attempt(&self, report: &AttemptReport<'_, SimTransport>) {
        let (source, cooldown) = self
            .sources
            .iter()
            .enumerate()
            .find(|(_, (name, _))| **name == *report.source)
            .map(|(i, (_, cooldown))| (i, *cooldown))
            .expect("a source of the scope");
        let mut state = lock(&self.state);
        let now = state.now;
        let call = self.call;
        state.calls[call].rows += 1;
        #[cfg(test)]
        {
            let result = match &report.result {
                AttemptResult::Ok(()) => "ok".to_string(),
                AttemptResult::Err(error) => error.to_string(),
                AttemptResult::Cancelled => "cancelled".to_string(),
                AttemptResult::HedgeCancelled => "hedge_cancelled".to_string(),
            };
            state.calls[call]
                .log
                .push((report.source.to_string(), result));
        }
        state.trace_event(call, || {
            let result = match &report.result {
                AttemptResult::Ok(()) => "ok".to_string(),
                AttemptResult::Err(error) => format!("{error} (cut {:?})", error.cut),
                AttemptResult::Cancelled => "cancelled".into(),
                AttemptResult::HedgeCancelled => "hedge cancelled".into(),
            };
            format!("row of {}: {result}", report.source)
        });
        let sending = state.calls[call].sending;
        // A hedge's row, or a continuation's: no attempt of the machine's.
        let hedge_row =
            sending.is_some_and(|s| s != source) || state.calls[call].continuing.is_some();
        if let AttemptResult::HedgeCancelled = &report.result {
            if sending.is_none() {
                state.violation(call, "a hedge_cancelled row outside a hedged send".into());
            }
        }
        if hedge_row && state.calls[call].continuing.is_none() {
            let failed_before_delta =
                matches!(&report.result, AttemptResult::Err(e) if e.cut.is_none());
            state.calls[call].close_hedge(failed_before_delta);
        }
        if let (false, AttemptResult::Err(error)) = (hedge_row, &report.result) {
            if error.rate_limited {
                let book = &mut state.calls[call];
                if book.hedge_open {
                    book.pushback_pending = true;
                } else {
                    book.pushbacks += 1;
                }
            }
            let mut ready = now;
            if let Some(hint) = error.retry_after {
                ready = ready.max(now + ms(hint));
            }
            if error.class == FailureClass::SourceDead {
                state.dead_seen[source] = Some((now, state.event()));
                ready = ready.max(now + cooldown);
            }
            let known = &mut state.calls[call].known_ready[source];
            *known = (*known).max(ready);
        }
    }

    fn on_terminal(&self, _report: &TerminalReport<'_, SimError>) {
        lock(&self.state).calls[self.call].terminal_rows += 1;
    }
}
