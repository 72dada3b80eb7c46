//! The local cooldown memo (SPEC §5.4): sources refused by their breaker are skipped by selection
//! until their known cooldown end, so no quota is spent asking again.
//!
//! Sources are identified by their index in the scope (the same index as
//! [`crate::policy::select::Candidate::index`]), which keeps lookups allocation-free.
//! An end time only ever moves forward.
//!
//! Not for: the breaker itself (the memo is a local hint; the breaker backend stays the truth).

use std::time::Instant;

/// Per-source "cooling until" instants of one scope.
///
/// ```
/// use std::time::{Duration, Instant};
/// use polygateway_actors::policy::cooldown::CooldownMemo;
/// let t0 = Instant::now();
/// let mut m = CooldownMemo::new(2);
/// m.note_refused(1, t0 + Duration::from_secs(5));
/// assert!(m.is_cooling(1, t0));
/// assert!(!m.is_cooling(0, t0));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CooldownMemo {
    until: Vec<Option<Instant>>,
}

impl CooldownMemo {
    /// A memo for `sources` sources (it grows if a larger index is noted).
    pub fn new(sources: usize) -> Self {
        Self {
            until: vec![None; sources],
        }
    }

    /// Remember that `source` is refused until `until`. Never moves an end backwards.
    pub fn note_refused(&mut self, source: usize, until: Instant) {
        if source >= self.until.len() {
            self.until.resize(source + 1, None);
        }
        let slot = &mut self.until[source];
        *slot = Some(slot.map_or(until, |old| old.max(until)));
    }

    /// Whether `source` is still cooling at `now`.
    pub fn is_cooling(&self, source: usize, now: Instant) -> bool {
        self.until
            .get(source)
            .copied()
            .flatten()
            .is_some_and(|until| now < until)
    }

    /// The end of `source`'s cooldown, if one was ever noted (possibly in the past).
    pub fn cooling_until(&self, source: usize) -> Option<Instant> {
        self.until.get(source).copied().flatten()
    }

    /// The earliest end among sources still cooling at `now` (when a "wait" caller should look
    /// again), or `None` if nothing is cooling.
    pub fn earliest_end(&self, now: Instant) -> Option<Instant> {
        self.until
            .iter()
            .flatten()
            .copied()
            .filter(|&u| u > now)
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn never_moves_backwards() {
        let t0 = Instant::now();
        let mut m = CooldownMemo::new(1);
        m.note_refused(0, t0 + s(10));
        m.note_refused(0, t0 + s(3));
        assert_eq!(m.cooling_until(0), Some(t0 + s(10)));
        m.note_refused(0, t0 + s(12));
        assert_eq!(m.cooling_until(0), Some(t0 + s(12)));
    }

    #[test]
    fn cooling_ends_at_the_deadline() {
        let t0 = Instant::now();
        let mut m = CooldownMemo::default();
        m.note_refused(3, t0 + s(5));
        assert!(m.is_cooling(3, t0 + s(4)));
        assert!(!m.is_cooling(3, t0 + s(5)));
        assert!(!m.is_cooling(2, t0));
        assert!(!m.is_cooling(99, t0));
    }

    #[test]
    fn earliest_end_ignores_finished_cooldowns() {
        let t0 = Instant::now();
        let mut m = CooldownMemo::new(3);
        assert_eq!(m.earliest_end(t0), None);
        m.note_refused(0, t0 + s(2));
        m.note_refused(1, t0 + s(8));
        m.note_refused(2, t0 + s(5));
        assert_eq!(m.earliest_end(t0), Some(t0 + s(2)));
        assert_eq!(m.earliest_end(t0 + s(2)), Some(t0 + s(5)));
        assert_eq!(m.earliest_end(t0 + s(9)), None);
    }
}
