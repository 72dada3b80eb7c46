//! A scope's counts of how a policy's cases ended, by outcome: kept in atomics for the status
//! page and `sources()`, and mirrored into a `pgw_*_total{scope, outcome}` counter. Hedging and
//! continuation count the same way; this is that one way.

use std::sync::atomic::{AtomicU64, Ordering};

use metrics::Counter;

/// Counts by outcome, indexed like `names` (an outcome enum's discriminant is its index).
#[derive(Debug)]
pub(crate) struct OutcomeCounts<const N: usize> {
    names: &'static [&'static str; N],
    counters: [AtomicU64; N],
    metrics: Vec<Counter>,
}

impl<const N: usize> OutcomeCounts<N> {
    /// Counts of scope `scope`, mirrored into the counter `metric` with an `outcome` label of
    /// each of `names`.
    pub(crate) fn new(
        metric: &'static str,
        scope: &str,
        names: &'static [&'static str; N],
    ) -> Self {
        Self {
            names,
            counters: std::array::from_fn(|_| AtomicU64::new(0)),
            metrics: names
                .iter()
                .map(|o| metrics::counter!(metric, "scope" => scope.to_string(), "outcome" => *o))
                .collect(),
        }
    }

    /// One more case ended with the outcome of index `outcome`.
    pub(crate) fn add(&self, outcome: usize) {
        self.counters[outcome].fetch_add(1, Ordering::Relaxed);
        self.metrics[outcome].increment(1);
    }

    /// How many cases ended with each outcome, by name.
    pub(crate) fn counts(&self) -> [(&'static str, u64); N] {
        std::array::from_fn(|i| (self.names[i], self.counters[i].load(Ordering::Relaxed)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_outcome_counts_apart() {
        static NAMES: [&str; 3] = ["won", "lost", "failed"];
        let counts = OutcomeCounts::new("pgw_test_total", "LLM", &NAMES);
        counts.add(0);
        counts.add(2);
        counts.add(2);
        assert_eq!(counts.counts(), [("won", 1), ("lost", 0), ("failed", 2)]);
    }
}
