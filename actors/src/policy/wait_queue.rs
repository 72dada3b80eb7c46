//! The order in which waiting calls get their turn (issue #30): priority class first; within a
//! class, tenants share turns by weight (deficit round robin); within a tenant, the earliest
//! deadline first, then arrival order (FIFO).
//!
//! Sans-I/O: time (`now`) comes in as an argument, nothing here waits. The runtime's waiting room
//! (`runtime/waiting_room.rs`) wraps it with the wake-ups, in production and in the simulator.
//!
//! Why deficit round robin with unit cost: every waiter asks for one turn (one attempt), so the
//! weighted round robin DRR degenerates to is exact — while tenants stay backlogged, each gets
//! `weight` turns per round, whatever its queue length. A tenant that empties leaves the round
//! and forfeits its deficit (DRR's rule), so idle tenants bank no credit. Deadlines order only
//! within a tenant: ordering across tenants by deadline would let one tenant's tight deadlines
//! take another's share.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Instant;

/// A call's priority class: a waiting call of a higher class always gets its turn before any
/// waiting call of a lower class (docs/behaviour.md §5.7).
///
/// ```
/// use polygateway_actors::policy::wait_queue::Priority;
/// assert_eq!(Priority::default(), Priority::Normal);
/// assert_eq!("batch".parse::<Priority>(), Ok(Priority::Batch));
/// assert!(Priority::Interactive < Priority::Batch); // served first
/// let err = "urgent".parse::<Priority>().unwrap_err();
/// assert_eq!(err, "unknown priority \"urgent\": use interactive, normal or batch");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum Priority {
    /// A person is waiting for the answer: served before everything else.
    Interactive,
    /// The default class.
    #[default]
    Normal,
    /// Bulk work that may wait: served when nothing of a higher class waits.
    Batch,
}

impl Priority {
    /// Every class, highest first (the order they are served in).
    ///
    /// ```
    /// use polygateway_actors::policy::wait_queue::Priority;
    /// let names: Vec<&str> = Priority::ALL.iter().map(|p| p.as_str()).collect();
    /// assert_eq!(names, ["interactive", "normal", "batch"]);
    /// ```
    pub const ALL: [Priority; 3] = [Priority::Interactive, Priority::Normal, Priority::Batch];

    /// The wire name (`interactive`, `normal`, `batch`).
    ///
    /// ```
    /// use polygateway_actors::policy::wait_queue::Priority;
    /// assert_eq!(Priority::Interactive.as_str(), "interactive");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Interactive => "interactive",
            Priority::Normal => "normal",
            Priority::Batch => "batch",
        }
    }

    fn index(self) -> usize {
        match self {
            Priority::Interactive => 0,
            Priority::Normal => 1,
            Priority::Batch => 2,
        }
    }
}

impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Priority {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Priority::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| format!("unknown priority {s:?}: use interactive, normal or batch"))
    }
}

/// One waiting call as the order sees it. `id` is its arrival number: smaller arrived earlier,
/// and a call that comes back (its turn did not find capacity) keeps its number, so its place.
#[derive(Debug, Clone)]
pub(crate) struct Waiter {
    pub(crate) id: u64,
    pub(crate) priority: Priority,
    /// Fair-share key: the call's tenant (`""` for unattributed calls, one tenant like any other).
    pub(crate) tenant: Arc<str>,
    /// Turns per round relative to other tenants of the class (at least 1).
    pub(crate) weight: u32,
    pub(crate) deadline: Option<Instant>,
}

/// Order within a tenant: earliest deadline first (no deadline last), then arrival.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Place {
    /// `(false, t)` sorts before `(true, _)`: a deadline before none.
    deadline: (bool, Option<Instant>),
    id: u64,
}

impl Place {
    fn of(waiter: &Waiter) -> Self {
        Place {
            deadline: (waiter.deadline.is_none(), waiter.deadline),
            id: waiter.id,
        }
    }
}

#[derive(Debug, Default)]
struct TenantQueue {
    places: BTreeSet<Place>,
    weight: u32,
    /// Turns left in the tenant's current round (0: a new round starts when it is at the front).
    deficit: u32,
}

/// One priority class: the tenants with waiting calls, and the round-robin ring over them.
#[derive(Debug, Default)]
struct ClassQueue {
    tenants: HashMap<Arc<str>, TenantQueue>,
    ring: VecDeque<Arc<str>>,
}

impl ClassQueue {
    fn head(&self) -> Option<u64> {
        let tenant = self.ring.front()?;
        self.tenants.get(tenant)?.places.first().map(|p| p.id)
    }

    fn pop(&mut self) -> Option<u64> {
        let tenant = Arc::clone(self.ring.front()?);
        let queue = self.tenants.get_mut(&tenant)?;
        if queue.deficit == 0 {
            queue.deficit = queue.weight.max(1);
        }
        let place = queue.places.pop_first()?;
        queue.deficit -= 1;
        if queue.places.is_empty() {
            self.tenants.remove(&tenant);
            self.ring.pop_front();
        } else if queue.deficit == 0 {
            self.ring.rotate_left(1);
        }
        Some(place.id)
    }

    /// Undo the last [`ClassQueue::pop`] of `tenant`: its place back, the turn refunded, the
    /// tenant at the front of the round again.
    fn restore(&mut self, tenant: &Arc<str>, place: Place, weight: u32) {
        let queue = self.tenants.entry(Arc::clone(tenant)).or_default();
        queue.weight = weight.max(1);
        queue.places.insert(place);
        queue.deficit += 1;
        self.ring.retain(|t| t != tenant);
        self.ring.push_front(Arc::clone(tenant));
    }

    fn remove(&mut self, tenant: &Arc<str>, place: Place) {
        let Some(queue) = self.tenants.get_mut(tenant) else {
            return;
        };
        queue.places.remove(&place);
        if queue.places.is_empty() {
            self.tenants.remove(tenant);
            self.ring.retain(|t| t != tenant);
        }
    }
}

/// The waiting calls of one scope in the order they get their turn. See the module docs.
#[derive(Debug, Default)]
pub(crate) struct WaitQueue {
    classes: [ClassQueue; 3],
    /// Where each waiting id is, to remove it (cancellation, expiry) without a search.
    located: HashMap<u64, (Priority, Arc<str>, Place)>,
    /// Deadlines of waiting calls, soonest first.
    deadlines: BTreeMap<(Instant, u64), ()>,
}

impl WaitQueue {
    /// Waiting calls.
    pub(crate) fn len(&self) -> usize {
        self.located.len()
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.located.is_empty()
    }

    pub(crate) fn contains(&self, id: u64) -> bool {
        self.located.contains_key(&id)
    }

    /// Add a waiting call (again: a call that comes back keeps its id, so its place). The
    /// tenant's weight is the one its latest call carries.
    pub(crate) fn push(&mut self, waiter: Waiter) {
        if self.located.contains_key(&waiter.id) {
            return;
        }
        let place = Place::of(&waiter);
        let class = &mut self.classes[waiter.priority.index()];
        let queue = class
            .tenants
            .entry(Arc::clone(&waiter.tenant))
            .or_insert_with(|| {
                class.ring.push_back(Arc::clone(&waiter.tenant));
                TenantQueue::default()
            });
        queue.weight = waiter.weight.max(1);
        queue.places.insert(place);
        if let Some(deadline) = waiter.deadline {
            self.deadlines.insert((deadline, waiter.id), ());
        }
        self.located
            .insert(waiter.id, (waiter.priority, waiter.tenant, place));
    }

    /// The call that gets the next turn, left in place.
    pub(crate) fn head(&self) -> Option<u64> {
        self.classes.iter().find_map(ClassQueue::head)
    }

    /// Take the call whose turn it is ([`WaitQueue::head`]), charging its tenant's round.
    pub(crate) fn pop(&mut self) -> Option<u64> {
        let id = self.classes.iter_mut().find_map(ClassQueue::pop)?;
        self.forget(id);
        Some(id)
    }

    /// Put back the call [`WaitQueue::pop`] just took, as if it had not been taken: its turn
    /// found no capacity, so it is not charged to its tenant. Only valid before any other pop.
    pub(crate) fn restore(&mut self, waiter: Waiter) {
        if self.located.contains_key(&waiter.id) {
            return;
        }
        let place = Place::of(&waiter);
        self.classes[waiter.priority.index()].restore(&waiter.tenant, place, waiter.weight);
        if let Some(deadline) = waiter.deadline {
            self.deadlines.insert((deadline, waiter.id), ());
        }
        self.located
            .insert(waiter.id, (waiter.priority, waiter.tenant, place));
    }

    /// Remove a call that stopped waiting (cancelled, expired). `false` if it was not waiting.
    pub(crate) fn remove(&mut self, id: u64) -> bool {
        let Some((priority, tenant, place)) = self.located.get(&id).cloned() else {
            return false;
        };
        self.classes[priority.index()].remove(&tenant, place);
        self.forget(id);
        true
    }

    /// Remove and return every call whose deadline is at or before `now`, soonest first.
    pub(crate) fn expire(&mut self, now: Instant) -> Vec<u64> {
        let mut expired = Vec::new();
        while let Some((&(deadline, id), ())) = self.deadlines.first_key_value() {
            if deadline > now {
                break;
            }
            self.remove(id);
            expired.push(id);
        }
        expired
    }

    /// The ids of the waiting calls, smallest first (the simulator checks the order by them).
    #[cfg(feature = "testkit")]
    pub(crate) fn waiting(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = self.located.keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    /// The soonest deadline of a waiting call.
    #[cfg(test)]
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.deadlines.first_key_value().map(|(&(d, _), ())| d)
    }

    fn forget(&mut self, id: u64) {
        if let Some((_, _, place)) = self.located.remove(&id) {
            if let (false, Some(deadline)) = place.deadline {
                self.deadlines.remove(&(deadline, id));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn waiter(id: u64, priority: Priority, tenant: &str) -> Waiter {
        Waiter {
            id,
            priority,
            tenant: tenant.into(),
            weight: 1,
            deadline: None,
        }
    }

    fn drain(queue: &mut WaitQueue) -> Vec<u64> {
        std::iter::from_fn(|| queue.pop()).collect()
    }

    #[test]
    fn one_class_one_tenant_is_fifo() {
        let mut q = WaitQueue::default();
        for id in [3, 1, 2, 7, 5] {
            q.push(waiter(id, Priority::Normal, "a"));
        }
        assert_eq!(q.head(), Some(1));
        assert_eq!(drain(&mut q), [1, 2, 3, 5, 7]);
        assert!(q.is_empty());
    }

    #[test]
    fn a_higher_class_always_goes_first() {
        let mut q = WaitQueue::default();
        q.push(waiter(1, Priority::Batch, "bulk"));
        q.push(waiter(2, Priority::Batch, "bulk"));
        q.push(waiter(3, Priority::Normal, "web"));
        q.push(waiter(4, Priority::Interactive, "chat"));
        assert_eq!(q.pop(), Some(4));
        // An interactive call arriving later still overtakes everything left.
        q.push(waiter(9, Priority::Interactive, "chat"));
        assert_eq!(drain(&mut q), [9, 3, 1, 2]);
    }

    #[test]
    fn earlier_deadlines_first_then_arrival_and_no_deadline_last() {
        let t0 = Instant::now();
        let mut q = WaitQueue::default();
        let with = |id, secs: Option<u64>| Waiter {
            deadline: secs.map(|s| t0 + Duration::from_secs(s)),
            ..waiter(id, Priority::Normal, "a")
        };
        q.push(with(1, None));
        q.push(with(2, Some(30)));
        q.push(with(3, Some(10)));
        q.push(with(4, Some(10)));
        q.push(with(5, None));
        assert_eq!(drain(&mut q), [3, 4, 2, 1, 5]);
    }

    #[test]
    fn tenants_take_turns_whatever_their_backlog() {
        // Tenant "big" queued 1000 calls before "small" queued its first: "small" waits one
        // turn, not a thousand.
        let mut q = WaitQueue::default();
        for id in 0..1000 {
            q.push(waiter(id, Priority::Normal, "big"));
        }
        q.push(waiter(1000, Priority::Normal, "small"));
        let first: Vec<u64> = (0..3).filter_map(|_| q.pop()).collect();
        assert_eq!(first, [0, 1000, 1]);
    }

    /// Turns per tenant over `turns` pops while every tenant stays backlogged.
    fn shares(weights: &[(&str, u32, u64)], turns: usize) -> HashMap<String, usize> {
        let mut q = WaitQueue::default();
        let mut owner = HashMap::new();
        let mut id = 0;
        // Demand in proportion to `backlog` (queued interleaved by arrival).
        for _ in 0..2000 {
            for &(tenant, weight, backlog) in weights {
                for _ in 0..backlog {
                    q.push(Waiter {
                        weight,
                        ..waiter(id, Priority::Normal, tenant)
                    });
                    owner.insert(id, tenant.to_string());
                    id += 1;
                }
            }
        }
        let mut served: HashMap<String, usize> = HashMap::new();
        for _ in 0..turns {
            let id = q.pop().expect("backlogged");
            *served.entry(owner[&id].clone()).or_default() += 1;
        }
        served
    }

    #[test]
    fn equal_weights_share_equally_under_unequal_demand() {
        // 1×, 2×, 4×, 8× demand: equal turns while all are backlogged.
        let served = shares(&[("a", 1, 1), ("b", 1, 2), ("c", 1, 4), ("d", 1, 8)], 1000);
        for tenant in ["a", "b", "c", "d"] {
            assert_eq!(served[tenant], 250, "{served:?}");
        }
    }

    #[test]
    fn turns_follow_weights() {
        let served = shares(&[("one", 1, 5), ("two", 2, 5), ("four", 4, 5)], 700);
        assert_eq!(
            (served["one"], served["two"], served["four"]),
            (100, 200, 400)
        );
        // 1:2 within 10 % whatever the turn count.
        for turns in [31, 100, 301] {
            let served = shares(&[("x", 1, 3), ("y", 2, 3)], turns);
            let share_y = served["y"] as f64 / turns as f64;
            assert!((share_y - 2.0 / 3.0).abs() <= 0.1 * 2.0 / 3.0, "{served:?}");
        }
    }

    #[test]
    fn nobody_starves_within_a_class() {
        // A weight-1 tenant among heavy ones still gets a turn every round.
        let mut q = WaitQueue::default();
        for id in 0..300 {
            let (tenant, weight) = match id % 3 {
                0 => ("light", 1),
                1 => ("heavy", 50),
                _ => ("heavier", 100),
            };
            q.push(Waiter {
                weight,
                ..waiter(id, Priority::Normal, tenant)
            });
        }
        let order = drain(&mut q);
        let light: Vec<usize> = order
            .iter()
            .enumerate()
            .filter(|(_, id)| **id % 3 == 0)
            .map(|(i, _)| i)
            .collect();
        assert_eq!(light.len(), 100);
        // The first light call is served within the first round (≤ 151 turns).
        assert!(light[0] <= 151, "{light:?}");
        assert_eq!(order.len(), 300);
    }

    #[test]
    fn removal_keeps_the_order_of_the_rest() {
        let mut q = WaitQueue::default();
        for id in 0..4 {
            q.push(waiter(
                id,
                Priority::Normal,
                if id % 2 == 0 { "a" } else { "b" },
            ));
        }
        assert!(q.remove(0));
        assert!(!q.remove(0));
        assert!(q.remove(2)); // tenant "a" is gone from the round
        assert_eq!(q.len(), 2);
        assert_eq!(drain(&mut q), [1, 3]);
    }

    #[test]
    fn a_returning_call_keeps_its_place() {
        let mut q = WaitQueue::default();
        for id in 0..3 {
            q.push(waiter(id, Priority::Normal, "a"));
        }
        assert_eq!(q.pop(), Some(0));
        // Its turn found no capacity: it comes back ahead of later arrivals.
        q.push(waiter(0, Priority::Normal, "a"));
        q.push(waiter(0, Priority::Normal, "a")); // twice is once
        assert_eq!(drain(&mut q), [0, 1, 2]);
    }

    #[test]
    fn a_restored_turn_is_not_charged() {
        // Weights 1:1, a and b alternate. a's turn finds no capacity twice and is put back:
        // the order afterwards is exactly as if it had never been taken.
        let mut q = WaitQueue::default();
        for id in 0..6 {
            q.push(waiter(
                id,
                Priority::Normal,
                if id % 2 == 0 { "a" } else { "b" },
            ));
        }
        for _ in 0..2 {
            assert_eq!(q.pop(), Some(0));
            q.restore(waiter(0, Priority::Normal, "a"));
        }
        assert_eq!(drain(&mut q), [0, 1, 2, 3, 4, 5]);
        // A tenant whose only call was taken comes back at the front with its turn.
        let mut q = WaitQueue::default();
        q.push(waiter(0, Priority::Normal, "solo"));
        q.push(waiter(1, Priority::Normal, "other"));
        assert_eq!(q.pop(), Some(0));
        q.push(waiter(2, Priority::Normal, "late"));
        q.restore(waiter(0, Priority::Normal, "solo"));
        assert_eq!(drain(&mut q), [0, 1, 2]);
    }

    #[test]
    fn expired_deadlines_leave_in_deadline_order() {
        let t0 = Instant::now();
        let mut q = WaitQueue::default();
        for (id, ms) in [(1, 300), (2, 100), (3, 200)] {
            q.push(Waiter {
                deadline: Some(t0 + Duration::from_millis(ms)),
                ..waiter(id, Priority::Batch, "a")
            });
        }
        q.push(waiter(4, Priority::Batch, "a"));
        assert_eq!(q.next_deadline(), Some(t0 + Duration::from_millis(100)));
        assert!(q.expire(t0 + Duration::from_millis(99)).is_empty());
        assert_eq!(q.expire(t0 + Duration::from_millis(200)), [2, 3]);
        assert_eq!(q.next_deadline(), Some(t0 + Duration::from_millis(300)));
        assert_eq!(q.pop(), Some(1));
        assert_eq!(q.next_deadline(), None);
        assert!(q.contains(4));
        assert_eq!(drain(&mut q), [4]);
    }
}
