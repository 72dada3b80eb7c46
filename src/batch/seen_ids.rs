//! The `custom_id`s a job has admitted, as 64-bit hashes in about 8 bytes each: the memory of a
//! million-line input stays flat.
//!
//! A hash set of a million `u64` holds a 2²¹-slot table (18 MB) and, while it doubles, the old
//! one beside it (27 MB at once). A sorted vector holds 8 MB and a lookup is a binary search.
//! New ids go to a small set first and are merged into the vector in sorted batches — one
//! linear merge per batch — so an insert stays cheap.
//!
//! Two ids with the same hash (odds ~n²/2⁶⁵: 3·10⁻⁸ for a million lines) would report the
//! second as a duplicate.

use std::collections::HashSet;
use std::hash::{BuildHasher, RandomState};

/// Ids kept unsorted before a merge: small beside the vector, large enough that the merges
/// (each linear in the vector) cost little per id.
const BATCH: usize = 1 << 16;

pub(crate) struct SeenIds {
    hasher: RandomState,
    sorted: Vec<u64>,
    recent: HashSet<u64>,
}

impl SeenIds {
    pub(crate) fn new() -> Self {
        Self {
            hasher: RandomState::new(),
            sorted: Vec::new(),
            recent: HashSet::new(),
        }
    }

    /// Records `id`; `false` when it was seen before.
    pub(crate) fn insert(&mut self, id: &str) -> bool {
        let hash = self.hasher.hash_one(id);
        if self.sorted.binary_search(&hash).is_ok() || !self.recent.insert(hash) {
            return false;
        }
        if self.recent.len() >= BATCH {
            self.merge();
        }
        true
    }

    /// Moves the recent ids into the sorted vector: sort the batch, then merge from the back
    /// into the room made at the end (no second copy of the vector).
    fn merge(&mut self) {
        let mut batch: Vec<u64> = self.recent.drain().collect();
        batch.sort_unstable();
        let old = self.sorted.len();
        self.sorted.resize(old + batch.len(), 0);
        let (mut i, mut j) = (old, batch.len());
        for k in (0..self.sorted.len()).rev() {
            if j == 0 {
                break;
            }
            if i > 0 && self.sorted[i - 1] > batch[j - 1] {
                self.sorted[k] = self.sorted[i - 1];
                i -= 1;
            } else {
                self.sorted[k] = batch[j - 1];
                j -= 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_id_is_new_once_across_merges() {
        let mut seen = SeenIds::new();
        let n = 3 * BATCH + 17;
        // Inserted out of order, so the merges interleave with what is already sorted.
        let ids: Vec<String> = (0..n).map(|i| format!("item-{}", (i * 7919) % n)).collect();
        assert!(ids.iter().all(|id| seen.insert(id)), "each id is new once");
        assert!(
            seen.sorted.windows(2).all(|w| w[0] < w[1]),
            "sorted, no repeats"
        );
        assert_eq!(seen.sorted.len() + seen.recent.len(), n);
        // Seen before: in the sorted vector and among the recent ones alike.
        assert!(!seen.insert("item-0"));
        assert!(!seen.insert(&ids[n - 1]));
        assert!(seen.insert("item-new"));
        assert!(!seen.insert("item-new"));
    }
}
