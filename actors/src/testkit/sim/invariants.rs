//! The invariants, checked at every step of every call (`ARCHITECTURE.md`, "Simulation"), when
//! a call returns, and once everything is quiet.

use crate::machine::call::{Action, CallMachine, Ending};
use crate::policy::pacer::PacerObservation;
use crate::ports::breaker::BreakerBackend;
use crate::ports::gate::GateBackend;
use crate::runtime::{CallFailure, ScopeConfig, ScopeReason};

use super::faults::SimError;
use super::params::{ms, Ms, DEEPEST_CUT, RECOVERY_SUCCESSES, SCOPE, STEEPEST_RISE};
use super::state::{CallBook, State};
use super::world::World;
impl State {
    pub(super) fn check_call(
        &mut self,
        call: usize,
        action: &Action,
        machine: &CallMachine,
        config: &ScopeConfig,
    ) {
        let max = config.max_attempts;
        let window = config.stall_window;
        let c = &self.calls[call];
        let used = machine.budget_used();
        let mut problems = Vec::new();
        if used > max {
            problems.push(format!("budget {used} above MAX_ATTEMPTS {max}"));
        }
        if used != c.granted - c.pushbacks {
            problems.push(format!(
                "budget {used} but {} attempts granted, {} of them 429",
                c.granted, c.pushbacks
            ));
        }
        if std::mem::take(&mut self.calls[call].capped_only) {
            // QUOTA_FULL=fail_fast: a source's own concurrency limit is not waited for.
            let fails_fast = matches!(
                action,
                Action::Finish(Ending::Unavailable {
                    reason: ScopeReason::QuotaExhausted | ScopeReason::DeadlineExceeded,
                    ..
                })
            );
            if !fails_fast {
                problems.push(format!(
                    "only sources at their concurrency limit, fail-fast scope, yet {action:?}"
                ));
            }
        }
        let c = &self.calls[call];
        if let Action::Wait(_) = action {
            let fresh = matches!(c.last_progress, Some(Some(age)) if age < window);
            if machine.waited() >= window && !fresh {
                problems.push(format!(
                    "waits on after {:?} of stalling without fresh scope progress",
                    machine.waited()
                ));
            }
        }
        for p in problems {
            self.violation(call, p);
        }
    }

    /// At each send: nothing goes out past the call's deadline. At a call's first send, the
    /// waiting room's order (docs/behaviour.md §5.7): no call that was waiting before it and
    /// never admitted since still waits while it is ahead in the order (a higher class, or the
    /// same class and tenant with an earlier deadline or arrival). Such a call was queued when
    /// this one got its turn, so the turn was not the head's.
    pub(super) fn check_send(&mut self, call: usize, waiting: &[u64]) {
        let now = self.now;
        let c = &self.calls[call];
        let mut problems = Vec::new();
        if let Some(deadline) = c.deadline {
            self.deadline_sends_checked += 1;
            if now > deadline {
                problems.push(format!(
                    "sent at {now} ms, past its deadline at {deadline} ms"
                ));
            }
        }
        // The room orders turns. With the in-memory backend a turn's selection, admission and
        // send are one instant, so the first send of a call that waited is where its order
        // shows. Over a network backend a turn lasts the admission's round trip, turns run in
        // parallel (one per freed pacer slot), and a call refused meanwhile goes back to its
        // place while others hold theirs: which turn meets the next freed slot first is a race
        // the room does not order, so these seeds do not check it.
        let in_memory = self.backend_round_trip.is_none();
        if let (false, Some(mine), true) = (c.admitted, c.place, in_memory) {
            self.room_turns_checked += 1;
            let key = |b: &CallBook| (b.deadline.is_none(), b.deadline, b.place);
            for &w in waiting.iter().filter(|&&w| w < mine) {
                let Some(other) = self.calls.iter().position(|b| b.place == Some(w)) else {
                    continue;
                };
                let b = &self.calls[other];
                let higher = b.priority < c.priority;
                let ahead_in_tenant =
                    b.priority == c.priority && b.tenant == c.tenant && key(b) < key(c);
                if !b.admitted && (higher || ahead_in_tenant) {
                    problems.push(format!(
                        "first sent (arrival {mine}, {}) while call {other} (arrival {w}, {}) \
                         waits ahead of it",
                        c.priority, b.priority
                    ));
                }
            }
        }
        self.calls[call].admitted = true;
        for p in problems {
            self.violation(call, p);
        }
    }

    pub(super) fn check_epoch(&mut self, call: usize, source: usize, epoch: u64) {
        if epoch < self.epochs[source] {
            let what = format!(
                "breaker epoch of s{source} went back from {} to {epoch}",
                self.epochs[source]
            );
            self.violation(call, what);
        } else {
            self.epochs[source] = epoch;
        }
    }

    /// The pacer invariants, after `source`'s policies observed one attempt: no limit below 1,
    /// recovery after the 429 fault window, no oscillation beyond the band.
    pub(super) fn check_pacer(
        &mut self,
        call: usize,
        source: usize,
        limit: u32,
        attempt: &PacerObservation,
    ) {
        if limit < 1 {
            self.violation(call, format!("s{source} pacer limit {limit} below 1"));
        }
        let now = self.now;
        let window = self.faults[source].pushback;
        let book = &mut self.pacer[source];
        book.observations += 1;
        let mut problems = Vec::new();
        let rate_limited = attempt.verdict == crate::outcome::AttemptVerdict::RateLimited;
        if rate_limited {
            // `Retry-After` freezes growth until it passes (a 429 inside the window may freeze
            // it well past the window's end).
            let freeze = attempt.retry_after.map_or(0, |d| d.as_millis() as Ms);
            book.frozen_until = book.frozen_until.max(now + freeze);
        }
        if let Some((from, until)) = window {
            if now < from {
                book.before_window = Some(limit);
            } else if now < until {
                book.lowest_since_window =
                    Some(book.lowest_since_window.map_or(limit, |l| l.min(limit)));
            } else if !book.judged {
                // A cut after the window answers a new signal (a 429 burst, queueing): the
                // recovery is counted from the last cut, and is growth above it. So does a
                // later 429 — at the floor its cut is invisible (1 stays 1) — and its
                // `Retry-After` freezes growth, so successes count from the end of that freeze.
                if book.last.is_some_and(|last| limit < last) {
                    book.lowest_since_window = Some(limit);
                    book.successes_after = 0;
                }
                if rate_limited {
                    book.successes_after = 0;
                }
                // The pacer grows only on a success while at least half its (fractional) limit
                // is in flight; above half the whole limit it surely is.
                let can_grow = book
                    .last
                    .is_some_and(|last| attempt.in_flight.saturating_mul(2) > last);
                if attempt.verdict == crate::outcome::AttemptVerdict::Success
                    && now >= book.frozen_until
                    && can_grow
                {
                    book.successes_after += 1;
                }
                if let (Some(lowest), Some(before)) = (book.lowest_since_window, book.before_window)
                {
                    if limit > lowest || lowest >= before {
                        book.judged = true;
                        self.recoveries_checked += 1;
                    } else if book.successes_after >= RECOVERY_SUCCESSES {
                        book.judged = true;
                        problems.push(format!(
                            "s{source} pacer stuck at {limit} after {} successes past its 429 window (was {before} before)",
                            book.successes_after
                        ));
                    }
                }
            }
        }
        let book = &mut self.pacer[source];
        if book.open {
            book.open_peak = book.open_peak.max(attempt.in_flight);
        }
        if let Some(last) = book.last.replace(limit) {
            if book.open {
                // An open pacer holds its limit until its first cut, which starts from what was
                // in flight: it lands at or below the most that ever was (plus the growth step
                // the success that closed the round may add in the same observation).
                if limit < last {
                    book.open = false;
                    if limit > book.open_peak.max(1).saturating_add(STEEPEST_RISE) {
                        problems.push(format!(
                            "s{source} open pacer's first cut went to {limit}, above the {} ever in flight",
                            book.open_peak
                        ));
                    }
                } else if limit > last {
                    problems.push(format!("s{source} open pacer grew from {last} to {limit}"));
                }
            } else {
                // Published limits are whole numbers: a cut of exactly one half may floor below
                // it.
                let floor = (f64::from(last) * DEEPEST_CUT).floor() as u32;
                if limit < floor.max(1) || limit > last.saturating_add(STEEPEST_RISE) {
                    problems.push(format!(
                        "s{source} pacer moved from {last} to {limit} in one observation (band: ×{DEEPEST_CUT} to +{STEEPEST_RISE})"
                    ));
                }
            }
        }
        for p in problems {
            self.violation(call, p);
        }
    }
}

impl World {
    /// After the last event: every call ended, and nothing is held once the TTLs have passed.
    pub(super) fn check_quiescent(&self) {
        let mut state = self.lock();
        if let Some(call) = (0..state.calls.len()).find(|&c| !state.calls[c].done) {
            state.violation(call, "never finished (hung)".into());
        }
        let last = state.calls.len().saturating_sub(1);
        for s in &self.sources {
            if s.in_flight() != 0 {
                let what = format!("{} leaked {} pacer slots", s.name, s.in_flight());
                state.violation(last, what);
            }
        }
        if state.probes_out != 0 {
            let what = format!("{} probes never handed back", state.probes_out);
            state.violation(last, what);
        }
        if self.room.busy() {
            let what = format!("the waiting room still holds {:?}", self.room.waiting());
            state.violation(last, what);
        }
        // Every turn ended (refunded or settled), so no tenant is kept for a refund.
        let (tenants, turns_out) = self.room.books();
        if (tenants, turns_out) != (0, 0) {
            let what =
                format!("the waiting room keeps {tenants} tenants and {turns_out} turns out");
            state.violation(last, what);
        }
        // The hedge budget (§5.9): never more hedges than its share of the attempts raced.
        if let Some(hedging) = &self.hedging {
            let hedges: u64 = state.calls.iter().map(|c| u64::from(c.hedges)).sum();
            let allowed = hedging.config.budget * state.races as f64;
            if hedges as f64 > allowed + 1e-9 {
                let what = format!(
                    "{hedges} hedges for {} attempts raced at a budget of {}",
                    state.races, hedging.config.budget
                );
                state.violation(last, what);
            }
        }
        // Without a backend-down window no bookkeeping was lost: every lease was given back
        // when its attempt ended (hedge losers and cancelled calls included), not by its TTL.
        if state.backend_down.is_none() {
            let leases = World::at_once(self.gate.leases_held(SCOPE)).unwrap_or(0);
            if leases != 0 {
                // Traced on a call whose lease was never finished, where one is known.
                let call = state.leases.values().next().map_or(last, |l| l.call);
                let what = format!("{leases} leases held once every call ended");
                state.violation(call, what);
            }
        }
        let now = state.now;
        drop(state);
        let ttl = ms(self.config.lease_ttl);
        let probe_ttl = self.sources.iter().map(|s| ms(s.breaker.probe_ttl)).max();
        self.advance_to(now + ttl.max(probe_ttl.unwrap_or(0)) + 1);
        let leases = World::at_once(self.gate.leases_held(SCOPE)).unwrap_or(0);
        let mut problems = Vec::new();
        if leases != 0 {
            problems.push(format!("{leases} leases outlive their TTL"));
        }
        for s in &self.sources {
            let snapshot = World::at_once(self.breakers.snapshot(SCOPE, &s.name, &s.breaker));
            if snapshot.is_ok_and(|b| b.probe_held) {
                problems.push(format!("{} holds a probe past its TTL", s.name));
            }
        }
        let mut state = self.lock();
        for p in problems {
            state.violation(last, p);
        }
    }
}

impl World {
    /// The call returned: its telemetry rows, sends and `retry_after` hint.
    pub(super) fn finished(
        &self,
        call: usize,
        result: &Result<crate::runtime::Governed<()>, CallFailure<SimError>>,
    ) {
        let mut state = self.lock();
        let now = state.now;
        let c = &mut state.calls[call];
        c.done = true;
        #[cfg(test)]
        {
            c.ending = Some(result.as_ref().map_or_else(CallFailure::kind, |_| "ok"));
        }
        let attempts = c.attempts;
        let unavailable = matches!(result, Err(CallFailure::Unavailable { .. }));
        let expected_terminal = u32::from(c.sends == 0 && unavailable);
        // Each hedge and continuation admitted is sent once and leaves one row (§5.9, §5.10).
        let sent = attempts + c.hedges + c.continuations;
        if c.rows != sent || c.sends != sent || c.terminal_rows != expected_terminal {
            let what = format!(
                "{} attempt rows, {} terminal rows and {} sends for {attempts} attempts, {} \
                 hedges and {} continuations",
                c.rows, c.terminal_rows, c.sends, c.hedges, c.continuations
            );
            state.violation(call, what);
        }
        if let Err(CallFailure::Unavailable {
            reason,
            retry_after,
            ..
        }) = result
        {
            let floor = state.calls[call]
                .known_ready
                .iter()
                .map(|r| r.saturating_sub(now))
                .min()
                .unwrap_or(0);
            let checked = !matches!(
                reason,
                ScopeReason::NoSources | ScopeReason::GovernanceBackendDown
            );
            if checked && ms(*retry_after) < floor {
                let what = format!(
                    "{} with retry_after {} ms, but no source can serve for {floor} ms",
                    reason.as_str(),
                    ms(*retry_after)
                );
                state.violation(call, what);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use rand::SeedableRng;

    use super::*;
    use crate::outcome::AttemptVerdict;

    /// A source whose upstream answers every attempt with a 429 in `[1000, 2000)` ms.
    fn one_source_with_a_429_window() -> State {
        let faults = super::super::faults::Faults {
            pushback: Some((1000, 2000)),
            ..super::super::faults::Faults::quiet(10)
        };
        let calls = vec![CallBook::new(0, false, 1)];
        State::new(
            rand::rngs::SmallRng::seed_from_u64(0),
            vec![faults],
            1000,
            None,
            calls,
            false,
        )
    }

    /// The pacer published `limit` after an attempt ending `verdict` at `now` ms with
    /// `in_flight` attempts in flight.
    fn observed(state: &mut State, now: Ms, verdict: AttemptVerdict, in_flight: u32, limit: u32) {
        state.now = now;
        let attempt = PacerObservation {
            in_flight,
            ..PacerObservation::new(verdict, Instant::now())
        };
        state.check_pacer(0, 0, limit, &attempt);
    }

    /// `count` successes a millisecond apart from `from` ms, each with `in_flight` in flight and
    /// the pacer at `limit` after it.
    fn successes(state: &mut State, from: Ms, count: u32, in_flight: u32, limit: u32) {
        for i in 0..Ms::from(count) {
            observed(state, from + i, AttemptVerdict::Success, in_flight, limit);
        }
    }

    /// 8 before the window, cut to 4 in it.
    fn cut_by_the_window() -> State {
        let mut state = one_source_with_a_429_window();
        observed(&mut state, 500, AttemptVerdict::Success, 8, 8);
        observed(&mut state, 1500, AttemptVerdict::RateLimited, 8, 4);
        state
    }

    #[test]
    fn a_pacer_that_does_not_grow_while_it_could_is_stuck() {
        let mut state = cut_by_the_window();
        successes(&mut state, 2000, RECOVERY_SUCCESSES, 3, 4);
        assert_eq!(state.violations.len(), 1, "{:?}", state.violations);
        assert!(state.violations[0].1.contains("pacer stuck at 4"));
    }

    #[test]
    fn successes_with_less_than_half_the_limit_in_flight_do_not_count() {
        // The pacer grows only while half its limit is in use: at 4 with 2 in flight it may
        // hold (a fractional 4.x needs more than 2).
        let mut state = cut_by_the_window();
        successes(&mut state, 2000, RECOVERY_SUCCESSES * 2, 2, 4);
        assert!(state.violations.is_empty(), "{:?}", state.violations);
        assert_eq!(state.recoveries_checked, 0);
    }

    #[test]
    fn after_a_later_cut_recovery_is_growth_from_that_cut() {
        // A later signal cuts 4 → 2 (the first success after the window); growing to 3 within
        // ten successes recovers from it, though 3 is below the window's lowest (4).
        let mut state = cut_by_the_window();
        observed(&mut state, 2000, AttemptVerdict::Success, 4, 2);
        successes(&mut state, 2001, 9, 2, 2);
        observed(&mut state, 2100, AttemptVerdict::Success, 2, 3);
        assert!(state.violations.is_empty(), "{:?}", state.violations);
        assert_eq!(state.recoveries_checked, 1);

        // Held at the later cut's 2 instead: stuck.
        let mut state = cut_by_the_window();
        observed(&mut state, 2000, AttemptVerdict::Success, 4, 2);
        successes(&mut state, 2001, RECOVERY_SUCCESSES, 2, 2);
        assert_eq!(state.violations.len(), 1, "{:?}", state.violations);
        assert!(state.violations[0].1.contains("pacer stuck at 2"));
    }
}
