//! The order in which waiting calls get their turn (issue #30): priority class first; within a
//! class, tenants share turns by weight (stride scheduling); within a tenant, the earliest
//! deadline first, then arrival order (FIFO).
//!
//! Sans-I/O: time (`now`) comes in as an argument, nothing here waits. The runtime's waiting room
//! (`runtime/waiting_room.rs`) wraps it with the wake-ups, in production and in the simulator.
//!
//! Why stride scheduling: every tenant has a pass (its virtual time), a turn adds `1 / weight`
//! of a turn to it, and the tenant with the lowest pass goes next (the earlier to join on a
//! tie). While tenants stay backlogged each gets turns in proportion to its weight, whatever
//! its queue length, interleaved rather than in bursts. A tenant that joins (or comes back
//! after emptying) starts at the pass the class has reached, so idle tenants bank no credit.
//! What decided the algorithm is the refund: the room gives several turns at once (one per
//! freed pacer slot), and a turn that finds no capacity is handed back. A refund subtracts what
//! the turn added, so refunds commute and the order they leave does not depend on which turn
//! came back first. Deficit round robin, the algorithm before, refunded by moving the tenant
//! to the front of its ring: with eight turns out at once the last tenant refunded went first,
//! and when every call ended at the same instant (virtual time; in production, an upstream of
//! steady latency) tenants of weights 1, 2, 3, 4 got 6.5 %, 6 %, 37.5 % and 50 % of the turns.
//! Deadlines order only within a tenant: ordering across tenants by deadline would let one
//! tenant's tight deadlines take another's share.

use std::collections::{BTreeMap, BTreeSet, HashMap};
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
    /// Its tenant's share of turns against other tenants of the class: each of its turns costs
    /// the tenant `1 / weight` of a turn (at least 1).
    pub(crate) weight: u32,
    pub(crate) deadline: Option<Instant>,
}

/// Order within a tenant: earliest deadline first (no deadline last), then arrival.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Place {
    /// `(false, t)` sorts before `(true, _)`: a deadline before none.
    deadline: (bool, Option<Instant>),
    id: u64,
    /// The call's weight: its turn is charged (and refunded) at it. After `id`, which is unique,
    /// so it never decides the order.
    weight: u32,
}

impl Place {
    fn of(waiter: &Waiter) -> Self {
        Place {
            deadline: (waiter.deadline.is_none(), waiter.deadline),
            id: waiter.id,
            weight: waiter.weight.max(1),
        }
    }
}

/// One turn at weight 1, in pass units: 16 times the least common multiple of 1 to 16, so those
/// weights share turns exactly and larger ones round down by less than one part in 10,000 up to
/// weight 1,000. A `u64` pass lasts 1.6 × 10¹² turns at weight 1.
const TURN: u64 = 16 * 720_720;

/// What a turn costs a tenant at `weight`, in pass units (at least 1).
fn stride(weight: u32) -> u64 {
    (TURN / u64::from(weight.max(1))).max(1)
}

#[derive(Debug)]
struct TenantQueue {
    places: BTreeSet<Place>,
    /// The tenant's virtual time: every turn it takes adds [`stride`] of the call's weight.
    pass: u64,
    /// When it joined the class (ties between equal passes go to the earlier).
    joined: u64,
    /// Its turns out (taken, neither refunded nor settled yet): a tenant without waiting calls
    /// is kept while any is out, so that its refund is exact.
    out: u32,
}

/// One priority class: its tenants, ordered by pass (stride scheduling; see the module docs).
#[derive(Debug, Default)]
struct ClassQueue {
    /// Tenants with waiting calls or turns out.
    tenants: HashMap<Arc<str>, TenantQueue>,
    /// The tenants with waiting calls by `(pass, joined)`: the first takes the next turn.
    order: BTreeSet<(u64, u64, Arc<str>)>,
    /// The pass at which the class last gave a turn: a tenant joining starts there, so one
    /// that was idle banks no credit.
    now: u64,
    /// Join numbers.
    joins: u64,
}

impl ClassQueue {
    fn head(&self) -> Option<u64> {
        let (_, _, tenant) = self.order.first()?;
        self.tenants.get(tenant)?.places.first().map(|p| p.id)
    }

    fn push(&mut self, tenant: &Arc<str>, place: Place) {
        let now = self.now;
        let queue = self
            .tenants
            .entry(Arc::clone(tenant))
            .or_insert_with(|| TenantQueue {
                places: BTreeSet::new(),
                pass: now,
                joined: 0,
                out: 0,
            });
        if queue.places.is_empty() {
            // Joining (again): level with the class, behind whoever joined before at that pass.
            queue.pass = queue.pass.max(now);
            self.joins += 1;
            queue.joined = self.joins;
        } else {
            self.order
                .remove(&(queue.pass, queue.joined, Arc::clone(tenant)));
        }
        queue.places.insert(place);
        self.order
            .insert((queue.pass, queue.joined, Arc::clone(tenant)));
    }

    fn pop(&mut self) -> Option<u64> {
        let (pass, joined, tenant) = self.order.pop_first()?;
        let queue = self.tenants.get_mut(&tenant)?;
        let place = queue.places.pop_first()?;
        self.now = self.now.max(pass);
        queue.pass = pass.saturating_add(stride(place.weight));
        queue.out += 1;
        if !queue.places.is_empty() {
            self.order.insert((queue.pass, joined, tenant));
        }
        Some(place.id)
    }

    /// Undo a [`ClassQueue::pop`] of `tenant`: its place back, the turn refunded. Refunds
    /// subtract what the pop added, so with several turns out at once they may come back in any
    /// order and leave the same order behind.
    fn restore(&mut self, tenant: &Arc<str>, place: Place) {
        let Some(queue) = self.tenants.get_mut(tenant) else {
            return self.push(tenant, place);
        };
        if !queue.places.is_empty() {
            self.order
                .remove(&(queue.pass, queue.joined, Arc::clone(tenant)));
        }
        queue.out = queue.out.saturating_sub(1);
        queue.pass = queue.pass.saturating_sub(stride(place.weight));
        queue.places.insert(place);
        self.order
            .insert((queue.pass, queue.joined, Arc::clone(tenant)));
    }

    /// A turn of `tenant` ended without coming back.
    fn settle(&mut self, tenant: &Arc<str>) {
        if let Some(queue) = self.tenants.get_mut(tenant) {
            queue.out = queue.out.saturating_sub(1);
            self.forget_if_idle(tenant);
        }
    }

    fn remove(&mut self, tenant: &Arc<str>, place: Place) {
        let Some(queue) = self.tenants.get_mut(tenant) else {
            return;
        };
        let key = (queue.pass, queue.joined, Arc::clone(tenant));
        if queue.places.remove(&place) && queue.places.is_empty() {
            self.order.remove(&key);
            self.forget_if_idle(tenant);
        }
    }

    /// A tenant with neither waiting calls nor turns out leaves the class; it starts level
    /// with the class when it comes back.
    fn forget_if_idle(&mut self, tenant: &Arc<str>) {
        if self
            .tenants
            .get(tenant)
            .is_some_and(|q| q.places.is_empty() && q.out == 0)
        {
            self.tenants.remove(tenant);
        }
    }
}

/// The waiting calls of one scope in the order they get their turn. See the module docs.
#[derive(Debug, Default)]
pub(crate) struct WaitQueue {
    classes: [ClassQueue; 3],
    /// Where each waiting id is, to remove it (cancellation, expiry) without a search.
    located: HashMap<u64, (Priority, Arc<str>, Place)>,
    /// The turns out: calls taken by [`WaitQueue::pop`], until their turn is refunded
    /// ([`WaitQueue::restore`]) or ends ([`WaitQueue::settle`]).
    taken: HashMap<u64, (Priority, Arc<str>)>,
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

    /// Add a waiting call (again: a call that comes back keeps its id, so its place). Its turn
    /// will be charged to its tenant at the call's own weight.
    pub(crate) fn push(&mut self, waiter: Waiter) {
        if self.located.contains_key(&waiter.id) {
            return;
        }
        let place = Place::of(&waiter);
        self.classes[waiter.priority.index()].push(&waiter.tenant, place);
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

    /// Take the call whose turn it is ([`WaitQueue::head`]), charging its tenant one turn at the
    /// call's weight. The turn is out until [`WaitQueue::restore`] or [`WaitQueue::settle`].
    pub(crate) fn pop(&mut self) -> Option<u64> {
        let id = self.classes.iter_mut().find_map(ClassQueue::pop)?;
        if let Some((priority, tenant)) = self.forget(id) {
            self.taken.insert(id, (priority, tenant));
        }
        Some(id)
    }

    /// Put back a call [`WaitQueue::pop`] took, as if it had not been taken: its turn found no
    /// capacity, so it is not charged to its tenant. Other turns may have been taken and
    /// refunded meanwhile, in any order: the refunds commute.
    pub(crate) fn restore(&mut self, waiter: Waiter) {
        if self.located.contains_key(&waiter.id) {
            return;
        }
        let place = Place::of(&waiter);
        let class = &mut self.classes[waiter.priority.index()];
        if self.taken.remove(&waiter.id).is_some() {
            class.restore(&waiter.tenant, place);
        } else {
            // Not a turn out (nothing to refund): back at its place like any waiting call.
            class.push(&waiter.tenant, place);
        }
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

    /// What the queue still keeps besides waiting calls: tenants (with or without waiting calls)
    /// and turns out. Both are 0 once every call ended (the simulator checks it).
    #[cfg(feature = "testkit")]
    pub(crate) fn books(&self) -> (usize, usize) {
        let tenants = self.classes.iter().map(|c| c.tenants.len()).sum();
        (tenants, self.taken.len())
    }

    /// The soonest deadline of a waiting call.
    #[cfg(test)]
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.deadlines.first_key_value().map(|(&(d, _), ())| d)
    }

    /// The turn [`WaitQueue::pop`] gave `id` ended without coming back (the call was admitted,
    /// or gave up): its tenant is no longer kept for a refund.
    pub(crate) fn settle(&mut self, id: u64) {
        if let Some((priority, tenant)) = self.taken.remove(&id) {
            self.classes[priority.index()].settle(&tenant);
        }
    }

    /// Drop `id` from the books of waiting calls; where it was, if it was waiting.
    fn forget(&mut self, id: u64) -> Option<(Priority, Arc<str>)> {
        let (priority, tenant, place) = self.located.remove(&id)?;
        if let (false, Some(deadline)) = place.deadline {
            self.deadlines.remove(&(deadline, id));
        }
        Some((priority, tenant))
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
    fn refunds_of_turns_taken_together_leave_the_same_order_whatever_their_order() {
        // The room gives one turn per freed pacer slot, so eight turns can be out at once, and
        // the calls whose turns found no capacity hand them back in whatever order their tasks
        // run. Each order of refunds must leave the order there was before the turns.
        let fill = || {
            let mut q = WaitQueue::default();
            let mut id = 0;
            for _ in 0..8 {
                for (tenant, weight) in [("w1", 1), ("w2", 2), ("w3", 3), ("w4", 4)] {
                    q.push(Waiter {
                        weight,
                        ..waiter(id, Priority::Normal, tenant)
                    });
                    id += 1;
                }
            }
            q
        };
        let untouched = drain(&mut fill());
        let taken: Vec<Waiter> = {
            let mut q = fill();
            (0..8)
                .map(|_| {
                    let id = q.pop().unwrap();
                    let (tenant, weight) =
                        [("w1", 1), ("w2", 2), ("w3", 3), ("w4", 4)][(id % 4) as usize];
                    Waiter {
                        weight,
                        ..waiter(id, Priority::Normal, tenant)
                    }
                })
                .collect()
        };
        let orders: [Vec<usize>; 3] = [
            (0..8).collect(),
            (0..8).rev().collect(),
            vec![3, 0, 6, 1, 7, 2, 5, 4],
        ];
        for order in orders {
            let mut q = fill();
            for _ in 0..8 {
                q.pop().unwrap();
            }
            for &i in &order {
                q.restore(taken[i].clone());
            }
            assert_eq!(drain(&mut q), untouched, "refunds in the order {order:?}");
        }
    }

    #[test]
    fn a_tenant_is_kept_only_while_it_waits_or_has_a_turn_out() {
        // One call per tenant (say, a tenant per end user): nothing stays behind once each
        // turn ended, however many tenants passed through.
        let mut q = WaitQueue::default();
        for id in 0..10_000 {
            q.push(waiter(id, Priority::Normal, &format!("user-{id}")));
            assert_eq!(q.pop(), Some(id));
            q.settle(id);
        }
        assert!(q.classes.iter().all(|c| c.tenants.is_empty()));
        // A turn out keeps its tenant (for an exact refund) until it ends either way.
        q.push(waiter(1, Priority::Normal, "a"));
        q.push(waiter(2, Priority::Normal, "b"));
        assert_eq!(q.pop(), Some(1));
        assert_eq!(q.pop(), Some(2));
        assert_eq!(q.classes[Priority::Normal.index()].tenants.len(), 2);
        q.restore(waiter(1, Priority::Normal, "a"));
        q.settle(2);
        assert_eq!(q.classes[Priority::Normal.index()].tenants.len(), 1);
        assert!(q.remove(1));
        assert!(q.classes.iter().all(|c| c.tenants.is_empty()));
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
