//! The dashboard's in-process time series: a fixed-memory ring per scope, source, virtual key
//! and tenant, fed at the very places that feed the metrics (the same events, no second
//! bookkeeping) and read by the status page, `GET /status.json`, `Gateway::series` and
//! `polygateway top`.
//!
//! Two tiers per scope and source: one bucket per second for the last 900 seconds
//! (15 min) and one per minute for the last 1,440 minutes (24 h); keys and tenants
//! keep the minute tier only. Every event writes both tiers under one lock (the series' own), so
//! a read never merges tiers. The logic is sans-I/O: every writer and reader is passed `now`
//! (Unix seconds), so the tests drive time by hand. Memory is fixed per series and the number of
//! series is bounded (configured scopes and sources; at most 1,024 keys and as many
//! tenants, the rest counted together as `(other)`): see [`Book::bytes`] and [`bound_bytes`].

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, OnceLock};

use dashmap::DashMap;
use serde::Serialize;

use super::labels::{ATTEMPT_RESULTS, CALL_OUTCOMES, CAPACITY_WAIT_REASONS};

/// Seconds kept at one-second resolution (15 minutes).
pub(crate) const FINE_SLOTS: usize = 900;
/// Minutes kept at one-minute resolution (24 hours).
pub(crate) const COARSE_SLOTS: usize = 1440;
/// Virtual keys (and, separately, tenants) with a series of their own; later ones share one
/// series named `(other)`.
pub(crate) const MAX_PARTIES: usize = 1024;
/// Breaker changes kept per source for the timeline.
const BREAKER_CHANGES: usize = 64;
/// Latency histogram bins: bin 0 is under 1 ms, bin `i` is `[2^(i-1), 2^i)` ms, the last is
/// everything from 2^18 ms (about 4.4 min) on.
const BINS: usize = 20;
/// Top keys and tenants listed in a view.
const TOP: usize = 10;

fn bin_of(seconds: f64) -> usize {
    // Whole milliseconds (a negative or NaN duration saturates to 0): bin `k ≥ 1` holds
    // [2^(k-1), 2^k) ms, its number of significant bits — an integer count, where `log2` of
    // a float cost more than the rest of the event.
    let ms = (seconds * 1e3) as u64;
    ((u64::BITS - ms.leading_zeros()) as usize).min(BINS - 1)
}

/// One fixed ring of buckets of `step` seconds: slot `(t / step) % len`, stamped with its period
/// so a stale slot reads empty and is cleared when written again.
struct Ring<B> {
    step: u64,
    slots: Box<[(u32, B)]>,
}

impl<B: Default + Clone> Ring<B> {
    fn new(step: u64, len: usize) -> Self {
        Self {
            step,
            slots: vec![(0, B::default()); len].into_boxed_slice(),
        }
    }

    fn stamp(&self, now: u64) -> u32 {
        (now / self.step + 1) as u32
    }

    /// The bucket of `now`, cleared first (by `fresh`) when it still holds an older period.
    fn at(&mut self, now: u64, fresh: impl FnOnce() -> B) -> &mut B {
        let stamp = self.stamp(now);
        let len = self.slots.len() as u64;
        let slot = &mut self.slots[((now / self.step) % len) as usize];
        if slot.0 != stamp {
            *slot = (stamp, fresh());
        }
        &mut slot.1
    }

    /// The last `points` periods up to `now`'s, oldest first (`None`: nothing recorded then).
    fn read(&self, now: u64, points: usize) -> Vec<Option<&B>> {
        let len = self.slots.len() as u64;
        let last = now / self.step;
        let points = points.min(self.slots.len()) as u64;
        (0..points)
            .rev()
            .map(|back| {
                let period = last.checked_sub(back)?;
                let (stamp, b) = &self.slots[(period % len) as usize];
                (u64::from(*stamp) == period + 1).then_some(b)
            })
            .collect()
    }

    fn bytes(&self) -> usize {
        std::mem::size_of_val(&*self.slots)
    }
}

#[derive(Default, Clone)]
struct ScopeBucket {
    calls: [u32; CALL_OUTCOMES.len()],
    latency: [u32; BINS],
    ttft: [u32; BINS],
    wait_ms: [u32; CAPACITY_WAIT_REASONS.len()],
    spend_micros: u64,
}

#[derive(Default, Clone)]
struct SourceBucket {
    attempts: [u32; ATTEMPT_RESULTS.len()],
    /// Attempt latency (sent to answered) and time to first token, log-2 bins; `u16` counts
    /// (saturating at 65 535 per bin and bucket) to keep a source's ring small.
    latency: [u16; BINS],
    ttft: [u16; BINS],
    /// Gauge values when the bucket opened, and last (and highest) seen in it.
    pacer_before: u32,
    pacer_last: u32,
    in_flight_before: u32,
    in_flight_last: u32,
    in_flight_max: u32,
}

#[derive(Default, Clone)]
struct PartyBucket {
    calls: u32,
    errors: u32,
    /// Saturates at 4 294 currency units per minute and party.
    spend_micros: u32,
}

struct Tiers<B> {
    fine: Ring<B>,
    coarse: Ring<B>,
}

impl<B: Default + Clone> Tiers<B> {
    fn new() -> Self {
        Self {
            fine: Ring::new(1, FINE_SLOTS),
            coarse: Ring::new(60, COARSE_SLOTS),
        }
    }

    fn both(&mut self, now: u64, fresh: impl Fn() -> B, mut f: impl FnMut(&mut B)) {
        f(self.fine.at(now, &fresh));
        f(self.coarse.at(now, &fresh));
    }

    fn pick(&self, step: u64) -> &Ring<B> {
        if step == 1 {
            &self.fine
        } else {
            &self.coarse
        }
    }
}

/// One scope's series: calls by outcome, call latency and time to first token (histograms),
/// capacity wait by reason, spend.
///
/// ```
/// use polygateway_actors::runtime::series::Book;
/// let book = Book::default();
/// let scope = book.scope("LLM");
/// scope.call(1_000, "ok", 0.120);
/// scope.call(1_000, "circuit_open", 0.001);
/// let view = book.view(1_000, 60);
/// assert_eq!(view.scopes["LLM"].calls["ok"].last(), Some(&1));
/// assert_eq!(view.scopes["LLM"].calls["circuit_open"].last(), Some(&1));
/// ```
pub struct ScopeSeries(Mutex<Tiers<ScopeBucket>>);

impl std::fmt::Debug for ScopeSeries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ScopeSeries")
    }
}

impl ScopeSeries {
    fn with(&self, now: u64, f: impl FnMut(&mut ScopeBucket)) {
        if let Ok(mut t) = self.0.lock() {
            t.both(now, ScopeBucket::default, f);
        }
    }

    /// A call finished at `now` with `outcome` (one of `CALL_OUTCOMES`) after `seconds`.
    ///
    /// ```
    /// # use polygateway_actors::runtime::series::Book;
    /// let book = Book::default();
    /// book.scope("LLM").call(50, "ok", 2.0);
    /// let q = &book.view(50, 10).scopes["LLM"].latency_ms;
    /// // Log-2 bins: 2 s falls in [1024, 2048) ms.
    /// assert!((1024.0..2048.0).contains(&q.p50[9].unwrap()));
    /// ```
    pub fn call(&self, now: u64, outcome: &str, seconds: f64) {
        let Some(i) = CALL_OUTCOMES.iter().position(|o| *o == outcome) else {
            return;
        };
        let bin = bin_of(seconds);
        self.with(now, |b| {
            b.calls[i] = b.calls[i].saturating_add(1);
            b.latency[bin] = b.latency[bin].saturating_add(1);
        });
    }

    /// A streamed answer's first token came after `seconds`.
    ///
    /// ```
    /// # use polygateway_actors::runtime::series::Book;
    /// let book = Book::default();
    /// book.scope("LLM").ttft(7, 0.0005);
    /// assert!(book.view(7, 1).scopes["LLM"].ttft_ms.p99[0].unwrap() < 1.0);
    /// ```
    pub fn ttft(&self, now: u64, seconds: f64) {
        let bin = bin_of(seconds);
        self.with(now, |b| b.ttft[bin] = b.ttft[bin].saturating_add(1));
    }

    /// A call waited `seconds` for capacity for `reason` (one of `CAPACITY_WAIT_REASONS`).
    ///
    /// ```
    /// # use polygateway_actors::runtime::series::Book;
    /// let book = Book::default();
    /// book.scope("LLM").waited(9, "pacer", 0.25);
    /// assert_eq!(book.view(9, 1).scopes["LLM"].capacity_wait_s["pacer"], [0.25]);
    /// ```
    pub fn waited(&self, now: u64, reason: &str, seconds: f64) {
        let Some(i) = CAPACITY_WAIT_REASONS.iter().position(|r| *r == reason) else {
            return;
        };
        let ms = (seconds * 1e3).round().clamp(0.0, f64::from(u32::MAX)) as u32;
        self.with(now, |b| b.wait_ms[i] = b.wait_ms[i].saturating_add(ms));
    }

    /// A call of the scope was charged `cost` (currency units).
    ///
    /// ```
    /// # use polygateway_actors::runtime::series::Book;
    /// let book = Book::default();
    /// book.scope("LLM").spend(3, 0.002);
    /// assert_eq!(book.view(3, 1).scopes["LLM"].spend, [0.002]);
    /// ```
    pub fn spend(&self, now: u64, cost: f64) {
        let micros = micros(cost);
        self.with(now, |b| {
            b.spend_micros = b.spend_micros.saturating_add(micros)
        });
    }
}

fn micros(cost: f64) -> u64 {
    (cost.max(0.0) * 1e6).round() as u64
}

struct SourceState {
    tiers: Tiers<SourceBucket>,
    pacer: u32,
    in_flight: u32,
    breaker: VecDeque<BreakerChange>,
}

/// One source's series: attempts by result, pacer limit and attempts in flight, and the
/// timeline of its breaker's state changes.
///
/// ```
/// use polygateway_actors::runtime::series::Book;
/// let book = Book::default();
/// let source = book.source("LLM", "openai-1");
/// source.pacer(100, 8);
/// source.in_flight(100, 1);
/// source.attempt(101, "rate_limited");
/// source.breaker(101_500, "open");
/// let view = book.view(101, 2);
/// let s = &view.scopes["LLM"].sources["openai-1"];
/// assert_eq!((s.pacer_limit.clone(), s.in_flight.clone()), (vec![8, 8], vec![1, 1]));
/// assert_eq!(s.attempts["rate_limited"], [0, 1]);
/// assert_eq!(s.breaker[0].to, "open");
/// ```
pub struct SourceSeries(Mutex<SourceState>);

impl std::fmt::Debug for SourceSeries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SourceSeries")
    }
}

impl SourceSeries {
    /// Update the state (`pre`), then both tiers' buckets of `now` (opened with the gauge values
    /// as they were before this event).
    fn with(&self, now: u64, pre: impl FnOnce(&mut SourceState), f: impl FnMut(&mut SourceBucket)) {
        let Ok(mut guard) = self.0.lock() else { return };
        let s = &mut *guard;
        let (pacer, in_flight) = (s.pacer, s.in_flight);
        pre(s);
        let fresh = || SourceBucket {
            pacer_before: pacer,
            pacer_last: pacer,
            in_flight_before: in_flight,
            in_flight_last: in_flight,
            in_flight_max: in_flight,
            ..SourceBucket::default()
        };
        s.tiers.both(now, fresh, f);
    }

    /// An attempt finished with `result` (one of `ATTEMPT_RESULTS`).
    ///
    /// ```
    /// # use polygateway_actors::runtime::series::Book;
    /// let book = Book::default();
    /// book.source("LLM", "a").attempt(5, "success");
    /// assert_eq!(book.view(5, 1).scopes["LLM"].sources["a"].attempts["success"], [1]);
    /// ```
    pub fn attempt(&self, now: u64, result: &str) {
        let Some(i) = ATTEMPT_RESULTS.iter().position(|r| *r == result) else {
            return;
        };
        self.with(
            now,
            |_| {},
            |b| b.attempts[i] = b.attempts[i].saturating_add(1),
        );
    }

    /// An attempt took `seconds` from being sent to being answered.
    pub(crate) fn attempt_took(&self, now: u64, seconds: f64) {
        let bin = bin_of(seconds);
        self.with(
            now,
            |_| {},
            |b| b.latency[bin] = b.latency[bin].saturating_add(1),
        );
    }

    /// A streamed answer of this source gave its first token after `seconds`.
    ///
    /// ```
    /// # use polygateway_actors::runtime::series::Book;
    /// let book = Book::default();
    /// book.source("LLM", "a").ttft(5, 0.2);
    /// assert!(book.view(5, 1).scopes["LLM"].sources["a"].ttft_ms.p95[0].is_some());
    /// ```
    pub fn ttft(&self, now: u64, seconds: f64) {
        let bin = bin_of(seconds);
        self.with(now, |_| {}, |b| b.ttft[bin] = b.ttft[bin].saturating_add(1));
    }

    /// The pacer's limit is `limit` now.
    ///
    /// ```
    /// # use polygateway_actors::runtime::series::Book;
    /// let book = Book::default();
    /// book.source("LLM", "a").pacer(5, 4);
    /// book.source("LLM", "a").pacer(7, 6);
    /// // Carried forward between changes.
    /// assert_eq!(book.view(8, 4).scopes["LLM"].sources["a"].pacer_limit, [4, 4, 6, 6]);
    /// ```
    pub fn pacer(&self, now: u64, limit: u32) {
        self.with(now, |s| s.pacer = limit, |b| b.pacer_last = limit);
    }

    /// `delta` more (or, negative, fewer) attempts hold a pacer slot now.
    ///
    /// ```
    /// # use polygateway_actors::runtime::series::Book;
    /// let book = Book::default();
    /// let s = book.source("LLM", "a");
    /// s.in_flight(5, 1);
    /// s.in_flight(5, 1);
    /// s.in_flight(5, -1);
    /// // A bucket shows the most in flight during it.
    /// assert_eq!(book.view(6, 2).scopes["LLM"].sources["a"].in_flight, [2, 1]);
    /// ```
    pub fn in_flight(&self, now: u64, delta: i32) {
        let current = std::cell::Cell::new(0);
        self.with(
            now,
            |s| {
                s.in_flight = s.in_flight.saturating_add_signed(delta);
                current.set(s.in_flight);
            },
            |b| {
                b.in_flight_last = current.get();
                b.in_flight_max = b.in_flight_max.max(current.get());
            },
        );
    }

    /// The breaker changed to `to` (`closed`, `open`, `half_open`) at `now_ms` (Unix ms).
    ///
    /// ```
    /// # use polygateway_actors::runtime::series::Book;
    /// let book = Book::default();
    /// book.source("LLM", "a").breaker(9_000, "open");
    /// book.source("LLM", "a").breaker(12_000, "half_open");
    /// let timeline = &book.view(12, 10).scopes["LLM"].sources["a"].breaker;
    /// assert_eq!(timeline.iter().map(|c| c.to).collect::<Vec<_>>(), ["open", "half_open"]);
    /// ```
    pub fn breaker(&self, now_ms: u64, to: &'static str) {
        if let Ok(mut s) = self.0.lock() {
            if s.breaker.len() == BREAKER_CHANGES {
                s.breaker.pop_front();
            }
            s.breaker.push_back(BreakerChange { at_ms: now_ms, to });
        }
    }
}

/// One virtual key's or tenant's series (minute tier only): calls, failed calls, spend.
///
/// ```
/// use polygateway_actors::runtime::series::Book;
/// let book = Book::default();
/// book.key("team-a").call(600, true, 0.5);
/// book.key("team-b").call(600, false, 0.0);
/// let view = book.view(600, 300);
/// assert_eq!(view.keys[0].name, "team-a");
/// assert_eq!((view.keys[0].calls, view.keys[0].spend), (1, 0.5));
/// assert_eq!(view.keys[1].errors, 1);
/// ```
pub struct PartySeries(Mutex<Ring<PartyBucket>>);

impl std::fmt::Debug for PartySeries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PartySeries")
    }
}

impl PartySeries {
    /// A call finished (`ok` or not), charged `cost`.
    ///
    /// ```
    /// # use polygateway_actors::runtime::series::Book;
    /// let book = Book::default();
    /// book.tenant("acme").call(60, true, 0.25);
    /// book.tenant("acme").call(61, true, 0.25);
    /// assert_eq!(book.view(61, 60).tenants[0].spend, 0.5);
    /// ```
    pub fn call(&self, now: u64, ok: bool, cost: f64) {
        let micros = micros(cost);
        if let Ok(mut r) = self.0.lock() {
            let b = r.at(now, PartyBucket::default);
            b.calls = b.calls.saturating_add(1);
            b.errors = b.errors.saturating_add(u32::from(!ok));
            b.spend_micros = b
                .spend_micros
                .saturating_add(u32::try_from(micros).unwrap_or(u32::MAX));
        }
    }
}

/// Every series of the process (like the `metrics` recorder, one per process: [`Book::global`]).
///
/// ```
/// use polygateway_actors::runtime::series::Book;
/// let book = Book::default();
/// book.source("LLM", "a").attempt(1, "success");
/// // Memory is fixed per series from its first event on.
/// assert!(book.bytes() > 100_000);
/// ```
#[derive(Default)]
pub struct Book {
    scopes: DashMap<String, Arc<ScopeSeries>>,
    sources: DashMap<(String, String), Arc<SourceSeries>>,
    keys: DashMap<String, Arc<PartySeries>>,
    tenants: DashMap<String, Arc<PartySeries>>,
}

impl std::fmt::Debug for Book {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Book")
            .field("scopes", &self.scopes.len())
            .field("sources", &self.sources.len())
            .field("keys", &self.keys.len())
            .field("tenants", &self.tenants.len())
            .finish()
    }
}

fn party(map: &DashMap<String, Arc<PartySeries>>, name: &str) -> Arc<PartySeries> {
    if let Some(p) = map.get(name) {
        return Arc::clone(&p);
    }
    let name = if map.len() >= MAX_PARTIES {
        "(other)"
    } else {
        name
    };
    Arc::clone(
        &map.entry(name.to_string())
            .or_insert_with(|| Arc::new(PartySeries(Mutex::new(Ring::new(60, COARSE_SLOTS))))),
    )
}

/// Memory the series of `scopes` scopes, `sources` sources and `parties` keys plus tenants
/// hold at most (bytes), the figure the docs state: 24 h of events add nothing to it.
///
/// ```
/// use polygateway_actors::runtime::series::bound_bytes;
/// // 10 scopes, 50 sources, 1,000 keys and 1,000 tenants: under 70 MiB.
/// assert!(bound_bytes(10, 50, 2_000) < 70 << 20);
/// ```
pub fn bound_bytes(scopes: usize, sources: usize, parties: usize) -> usize {
    let tiers = |slot: usize| (FINE_SLOTS + COARSE_SLOTS) * slot;
    let scope = tiers(std::mem::size_of::<(u32, ScopeBucket)>()) + 256;
    let source = tiers(std::mem::size_of::<(u32, SourceBucket)>())
        + BREAKER_CHANGES * std::mem::size_of::<BreakerChange>()
        + 256;
    let party = COARSE_SLOTS * std::mem::size_of::<(u32, PartyBucket)>() + 256;
    scopes * scope + sources * source + parties.min(2 * (MAX_PARTIES + 1)) * party
}

impl Book {
    /// The process's book, which the runtime and the gateway feed.
    ///
    /// ```
    /// use polygateway_actors::runtime::series::Book;
    /// assert!(std::ptr::eq(Book::global(), Book::global()));
    /// ```
    pub fn global() -> &'static Book {
        static BOOK: OnceLock<Book> = OnceLock::new();
        BOOK.get_or_init(Book::default)
    }

    /// The series of scope `name` (created on first use).
    ///
    /// ```
    /// # use polygateway_actors::runtime::series::Book;
    /// let book = Book::default();
    /// assert!(std::sync::Arc::ptr_eq(&book.scope("A"), &book.scope("A")));
    /// ```
    pub fn scope(&self, name: &str) -> Arc<ScopeSeries> {
        if let Some(s) = self.scopes.get(name) {
            return Arc::clone(&s);
        }
        Arc::clone(
            &self
                .scopes
                .entry(name.to_string())
                .or_insert_with(|| Arc::new(ScopeSeries(Mutex::new(Tiers::new())))),
        )
    }

    /// The series of source `source` of scope `scope` (created on first use).
    ///
    /// ```
    /// # use polygateway_actors::runtime::series::Book;
    /// let book = Book::default();
    /// book.source("A", "s1");
    /// assert!(book.view(0, 1).scopes["A"].sources.contains_key("s1"));
    /// ```
    pub fn source(&self, scope: &str, source: &str) -> Arc<SourceSeries> {
        self.scope(scope);
        let id = (scope.to_string(), source.to_string());
        if let Some(s) = self.sources.get(&id) {
            return Arc::clone(&s);
        }
        Arc::clone(&self.sources.entry(id).or_insert_with(|| {
            Arc::new(SourceSeries(Mutex::new(SourceState {
                tiers: Tiers::new(),
                pacer: 0,
                in_flight: 0,
                breaker: VecDeque::new(),
            })))
        }))
    }

    /// The series of virtual key `name` (the first 1,024 keys; then `(other)`).
    ///
    /// ```
    /// # use polygateway_actors::runtime::series::Book;
    /// let book = Book::default();
    /// book.key("k").call(0, true, 0.0);
    /// assert_eq!(book.view(0, 60).keys[0].name, "k");
    /// ```
    pub fn key(&self, name: &str) -> Arc<PartySeries> {
        party(&self.keys, name)
    }

    /// The series of tenant `name` (the first 1,024 tenants; then `(other)`).
    ///
    /// ```
    /// # use polygateway_actors::runtime::series::Book;
    /// let book = Book::default();
    /// book.tenant("t").call(0, false, 0.0);
    /// assert_eq!(book.view(0, 60).tenants[0].errors, 1);
    /// ```
    pub fn tenant(&self, name: &str) -> Arc<PartySeries> {
        party(&self.tenants, name)
    }

    /// Bytes the series hold now (fixed per series: independent of how many events they saw).
    ///
    /// ```
    /// # use polygateway_actors::runtime::series::{bound_bytes, Book};
    /// let book = Book::default();
    /// book.scope("A");
    /// assert!(book.bytes() <= bound_bytes(1, 0, 0));
    /// ```
    pub fn bytes(&self) -> usize {
        let mut total = 0;
        for s in &self.scopes {
            if let Ok(t) = s.0.lock() {
                total += t.fine.bytes() + t.coarse.bytes() + 256;
            }
        }
        for s in &self.sources {
            if let Ok(t) = s.0.lock() {
                total += t.tiers.fine.bytes()
                    + t.tiers.coarse.bytes()
                    + t.breaker.capacity() * std::mem::size_of::<BreakerChange>()
                    + 256;
            }
        }
        for p in self.keys.iter().chain(self.tenants.iter()) {
            if let Ok(r) = p.0.lock() {
                total += r.bytes() + 256;
            }
        }
        total
    }

    /// What the budget named `budget` (`scope:NAME`, `tenant:NAME` or `vkey:NAME`) was charged
    /// over the last `range_s` seconds up to `now` (0 for a name without a series), for a
    /// budget's projected exhaustion.
    ///
    /// ```
    /// # use polygateway_actors::runtime::series::Book;
    /// let book = Book::default();
    /// book.scope("LLM").spend(100, 0.5);
    /// book.tenant("acme").call(100, true, 0.25);
    /// assert_eq!(book.spent("scope:LLM", 100, 60), 0.5);
    /// assert_eq!(book.spent("tenant:acme", 100, 60), 0.25);
    /// assert_eq!(book.spent("vkey:nobody", 100, 60), 0.0);
    /// ```
    pub fn spent(&self, budget: &str, now: u64, range_s: u64) -> f64 {
        let range_s = range_s.clamp(1, COARSE_SLOTS as u64 * 60);
        let party = |map: &DashMap<String, Arc<PartySeries>>, name: &str| {
            let Some(p) = map.get(name) else { return 0 };
            let Ok(r) = p.0.lock() else { return 0 };
            r.read(now, range_s.div_ceil(60) as usize)
                .into_iter()
                .flatten()
                .map(|b| u64::from(b.spend_micros))
                .sum::<u64>()
        };
        let micros = match budget.split_once(':') {
            Some(("scope", name)) => self.scopes.get(name).map_or(0, |s| {
                let step = if range_s <= FINE_SLOTS as u64 { 1 } else { 60 };
                s.0.lock().map_or(0, |t| {
                    t.pick(step)
                        .read(now, range_s.div_ceil(step) as usize)
                        .into_iter()
                        .flatten()
                        .map(|b| b.spend_micros)
                        .sum()
                })
            }),
            Some(("tenant", name)) => party(&self.tenants, name),
            Some(("vkey", name)) => party(&self.keys, name),
            _ => 0,
        };
        micros as f64 / 1e6
    }

    /// The last `range_s` seconds up to `now` (Unix seconds): one point per second up to 15
    /// minutes, per minute beyond (up to 24 hours).
    ///
    /// ```
    /// # use polygateway_actors::runtime::series::Book;
    /// let book = Book::default();
    /// book.scope("A").call(3_600, "ok", 0.01);
    /// let hour = book.view(3_600, 3_600);
    /// assert_eq!((hour.step_s, hour.points), (60, 60));
    /// assert_eq!(hour.scopes["A"].calls["ok"].iter().sum::<u64>(), 1);
    /// ```
    pub fn view(&self, now: u64, range_s: u64) -> View {
        let range_s = range_s.clamp(1, COARSE_SLOTS as u64 * 60);
        let step = if range_s <= FINE_SLOTS as u64 { 1 } else { 60 };
        let points = range_s.div_ceil(step) as usize;
        let mut scopes: BTreeMap<String, ScopeView> = BTreeMap::new();
        for s in &self.scopes {
            if let Ok(t) = s.0.lock() {
                scopes.insert(s.key().clone(), scope_view(t.pick(step), now, points));
            }
        }
        for s in &self.sources {
            let (scope, source) = s.key();
            if let Ok(t) = s.0.lock() {
                let v = source_view(&t, step, now, points);
                scopes
                    .entry(scope.clone())
                    .or_default()
                    .sources
                    .insert(source.clone(), v);
            }
        }
        View {
            now,
            step_s: step,
            points,
            start: (now / step + 1).saturating_sub(points as u64) * step,
            scopes,
            keys: top(&self.keys, now, range_s),
            tenants: top(&self.tenants, now, range_s),
        }
    }
}

fn top(map: &DashMap<String, Arc<PartySeries>>, now: u64, range_s: u64) -> Vec<PartyTotal> {
    let points = range_s.div_ceil(60) as usize;
    let mut all: Vec<PartyTotal> = map
        .iter()
        .filter_map(|p| {
            let r = p.0.lock().ok()?;
            let mut t = PartyTotal {
                name: p.key().clone(),
                calls: 0,
                errors: 0,
                spend: 0.0,
            };
            let mut spend = 0u64;
            for b in r.read(now, points).into_iter().flatten() {
                t.calls += u64::from(b.calls);
                t.errors += u64::from(b.errors);
                spend += u64::from(b.spend_micros);
            }
            t.spend = spend as f64 / 1e6;
            (t.calls > 0).then_some(t)
        })
        .collect();
    all.sort_by(|a, b| {
        b.spend
            .total_cmp(&a.spend)
            .then(b.calls.cmp(&a.calls))
            .then(a.name.cmp(&b.name))
    });
    all.truncate(TOP);
    all
}

fn quantile(hist: &[u32; BINS], q: f64) -> Option<f64> {
    let n: u64 = hist.iter().map(|c| u64::from(*c)).sum();
    if n == 0 {
        return None;
    }
    let rank = q * n as f64;
    let mut seen = 0.0;
    for (i, c) in hist.iter().enumerate() {
        let c = f64::from(*c);
        if c > 0.0 && seen + c >= rank {
            let (lo, hi) = if i == 0 {
                (0.0, 1.0)
            } else {
                ((1u64 << (i - 1)) as f64, (1u64 << i) as f64)
            };
            return Some(lo + (hi - lo) * ((rank - seen) / c).clamp(0.0, 1.0));
        }
        seen += c;
    }
    None
}

fn quantiles(points: &[Option<&[u32; BINS]>]) -> Quantiles {
    let q = |p: f64| {
        points
            .iter()
            .map(|h| h.and_then(|h| quantile(h, p)))
            .collect()
    };
    Quantiles {
        p50: q(0.5),
        p95: q(0.95),
        p99: q(0.99),
    }
}

fn scope_view(ring: &Ring<ScopeBucket>, now: u64, points: usize) -> ScopeView {
    let buckets = ring.read(now, points);
    let mut calls = BTreeMap::new();
    for (i, outcome) in CALL_OUTCOMES.iter().enumerate() {
        let series: Vec<u64> = buckets
            .iter()
            .map(|b| b.map_or(0, |b| u64::from(b.calls[i])))
            .collect();
        if i == 0 || series.iter().any(|c| *c > 0) {
            calls.insert(*outcome, series);
        }
    }
    let latency: Vec<_> = buckets.iter().map(|b| b.map(|b| &b.latency)).collect();
    let ttft: Vec<_> = buckets.iter().map(|b| b.map(|b| &b.ttft)).collect();
    let capacity_wait_s = CAPACITY_WAIT_REASONS
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let series = buckets
                .iter()
                .map(|b| b.map_or(0.0, |b| f64::from(b.wait_ms[i]) / 1e3))
                .collect();
            (*r, series)
        })
        .collect();
    ScopeView {
        calls,
        latency_ms: quantiles(&latency),
        ttft_ms: quantiles(&ttft),
        capacity_wait_s,
        spend: buckets
            .iter()
            .map(|b| b.map_or(0.0, |b| b.spend_micros as f64 / 1e6))
            .collect(),
        sources: BTreeMap::new(),
    }
}

fn source_view(s: &SourceState, step: u64, now: u64, points: usize) -> SourceView {
    let buckets = s.tiers.pick(step).read(now, points);
    let attempts = ATTEMPT_RESULTS
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let series = buckets
                .iter()
                .map(|b| b.map_or(0, |b| u64::from(b.attempts[i])))
                .collect();
            (*r, series)
        })
        .collect();
    // Gauges carry forward between events; before the first event in range they held the
    // value that bucket opened with, and with no event in range the current value.
    let first = buckets.iter().flatten().next();
    let (mut pacer, mut in_flight) = first.map_or((s.pacer, s.in_flight), |b| {
        (b.pacer_before, b.in_flight_before)
    });
    let mut pacer_limit = Vec::with_capacity(points);
    let mut in_flight_series = Vec::with_capacity(points);
    for b in &buckets {
        match b {
            Some(b) => {
                pacer = b.pacer_last;
                in_flight_series.push(b.in_flight_max);
                in_flight = b.in_flight_last;
            }
            None => in_flight_series.push(in_flight),
        }
        pacer_limit.push(pacer);
    }
    let from_ms = (now + 1).saturating_sub(points as u64 * step) * 1000;
    let widen = |h: &[u16; BINS]| h.map(u32::from);
    let latency: Vec<_> = buckets
        .iter()
        .map(|b| b.map(|b| widen(&b.latency)))
        .collect();
    let ttft: Vec<_> = buckets.iter().map(|b| b.map(|b| widen(&b.ttft))).collect();
    let latency: Vec<_> = latency.iter().map(Option::as_ref).collect();
    let ttft: Vec<_> = ttft.iter().map(Option::as_ref).collect();
    SourceView {
        attempts,
        latency_ms: quantiles(&latency),
        ttft_ms: quantiles(&ttft),
        pacer_limit,
        in_flight: in_flight_series,
        breaker: s
            .breaker
            .iter()
            .filter(|c| c.at_ms >= from_ms)
            .cloned()
            .collect(),
    }
}

/// What [`Book::view`] answers: every series over one range, oldest point first.
///
/// ```
/// use polygateway_actors::runtime::series::Book;
/// let view = Book::default().view(1_000, 900);
/// assert_eq!((view.step_s, view.points, view.start), (1, 900, 101));
/// ```
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct View {
    /// The last point's time (Unix seconds).
    pub now: u64,
    /// Seconds per point (1 or 60).
    pub step_s: u64,
    /// Points per series.
    pub points: usize,
    /// The first point's time (Unix seconds).
    pub start: u64,
    /// Per scope (its sources inside).
    pub scopes: BTreeMap<String, ScopeView>,
    /// Top virtual keys over the range, by spend then calls.
    pub keys: Vec<PartyTotal>,
    /// Top tenants over the range, by spend then calls.
    pub tenants: Vec<PartyTotal>,
}

/// One scope's series in a [`View`].
///
/// ```
/// use polygateway_actors::runtime::series::Book;
/// let book = Book::default();
/// book.scope("A").call(10, "retry_exhausted", 1.0);
/// let a = &book.view(10, 5).scopes["A"];
/// // `ok` is always there; failure outcomes only when they happened in range.
/// assert_eq!(a.calls.keys().copied().collect::<Vec<_>>(), ["ok", "retry_exhausted"]);
/// ```
#[derive(Debug, Clone, Default, Serialize)]
#[non_exhaustive]
pub struct ScopeView {
    /// Calls finished per point, by outcome.
    pub calls: BTreeMap<&'static str, Vec<u64>>,
    /// Call latency quantiles per point (milliseconds; `None` without calls).
    pub latency_ms: Quantiles,
    /// Time-to-first-token quantiles per point (milliseconds).
    pub ttft_ms: Quantiles,
    /// Seconds calls waited for capacity per point, by reason.
    pub capacity_wait_s: BTreeMap<&'static str, Vec<f64>>,
    /// Spend per point.
    pub spend: Vec<f64>,
    /// The scope's sources.
    pub sources: BTreeMap<String, SourceView>,
}

/// p50, p95 and p99 per point, estimated from log-2 histogram bins (linear within a bin).
///
/// ```
/// use polygateway_actors::runtime::series::Book;
/// let book = Book::default();
/// for _ in 0..90 { book.scope("A").call(10, "ok", 0.010); }
/// for _ in 0..10 { book.scope("A").call(10, "ok", 1.0); }
/// let q = &book.view(10, 1).scopes["A"].latency_ms;
/// // 10 ms is in the [8, 16) ms bin, 1 s in [512, 1024).
/// assert!(q.p50[0].unwrap() < 16.0 && q.p99[0].unwrap() >= 512.0);
/// ```
#[derive(Debug, Clone, Default, Serialize)]
#[non_exhaustive]
pub struct Quantiles {
    /// Median.
    pub p50: Vec<Option<f64>>,
    /// 95th percentile.
    pub p95: Vec<Option<f64>>,
    /// 99th percentile.
    pub p99: Vec<Option<f64>>,
}

/// One source's series in a [`View`].
///
/// ```
/// use polygateway_actors::runtime::series::Book;
/// let book = Book::default();
/// book.source("A", "s").pacer(1, 3);
/// assert_eq!(book.view(2, 2).scopes["A"].sources["s"].pacer_limit, [3, 3]);
/// ```
#[derive(Debug, Clone, Default, Serialize)]
#[non_exhaustive]
pub struct SourceView {
    /// Attempts finished per point, by result.
    pub attempts: BTreeMap<&'static str, Vec<u64>>,
    /// Attempt latency quantiles per point (milliseconds, sent to answered).
    pub latency_ms: Quantiles,
    /// Time-to-first-token quantiles of the source's streamed answers (milliseconds).
    pub ttft_ms: Quantiles,
    /// The pacer's limit at each point.
    pub pacer_limit: Vec<u32>,
    /// The most attempts in flight during each point.
    pub in_flight: Vec<u32>,
    /// Breaker state changes in range, oldest first.
    pub breaker: Vec<BreakerChange>,
}

/// One breaker state change.
///
/// ```
/// use polygateway_actors::runtime::series::Book;
/// let book = Book::default();
/// book.source("A", "s").breaker(1_234, "open");
/// let c = &book.view(1, 1).scopes["A"].sources["s"].breaker[0];
/// assert_eq!((c.at_ms, c.to), (1_234, "open"));
/// ```
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct BreakerChange {
    /// When (Unix milliseconds).
    pub at_ms: u64,
    /// The new state (`closed`, `open`, `half_open`).
    pub to: &'static str,
}

/// A key's or tenant's totals over a view's range.
///
/// ```
/// use polygateway_actors::runtime::series::Book;
/// let book = Book::default();
/// book.key("k").call(0, true, 1.5);
/// let k = &book.view(0, 60).keys[0];
/// assert_eq!((k.name.as_str(), k.calls, k.errors, k.spend), ("k", 1, 0, 1.5));
/// ```
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct PartyTotal {
    /// Key or tenant name.
    pub name: String,
    /// Calls.
    pub calls: u64,
    /// Calls that failed.
    pub errors: u64,
    /// Spend (currency units).
    pub spend: f64,
}

/// Unix seconds and milliseconds now: what the I/O side passes the series as `now`.
pub(crate) fn unix_now() -> (u64, u64) {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    (ms / 1000, ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stale_slot_reads_empty_and_is_cleared_when_written_again() {
        let book = Book::default();
        let s = book.scope("A");
        s.call(100, "ok", 0.01);
        // 900 s later the fine slot is the same one: its old count must not show or add up.
        s.call(1_000, "ok", 0.01);
        let v = book.view(1_000, 900);
        assert_eq!(v.scopes["A"].calls["ok"].iter().sum::<u64>(), 1);
        // The minute tier still has both (100 s and 1 000 s are 15 minutes apart).
        let v = book.view(1_000, 3_600);
        assert_eq!(v.scopes["A"].calls["ok"].iter().sum::<u64>(), 2);
        // 24 h later both are gone.
        let v = book.view(1_000 + 86_400, 86_400);
        assert_eq!(v.scopes["A"].calls["ok"].iter().sum::<u64>(), 0);
    }

    #[test]
    fn points_line_up_with_their_seconds() {
        let book = Book::default();
        let s = book.scope("A");
        s.call(10, "ok", 0.01);
        s.call(12, "ok", 0.01);
        s.call(12, "stalled", 0.01);
        let v = book.view(12, 5);
        assert_eq!(v.start, 8);
        assert_eq!(v.scopes["A"].calls["ok"], [0, 0, 1, 0, 1]);
        assert_eq!(v.scopes["A"].calls["stalled"], [0, 0, 0, 0, 1]);
        assert_eq!(v.scopes["A"].latency_ms.p50[3], None);
    }

    #[test]
    fn quantiles_come_from_the_right_bins() {
        let mut h = [0u32; BINS];
        h[bin_of(0.100)] = 90; // [64, 128) ms
        h[bin_of(3.0)] = 10; // [2048, 4096) ms
        assert_eq!((bin_of(0.100), bin_of(3.0)), (7, 12));
        let p50 = quantile(&h, 0.5).unwrap();
        let p99 = quantile(&h, 0.99).unwrap();
        assert!((64.0..128.0).contains(&p50), "{p50}");
        assert!((2048.0..=4096.0).contains(&p99), "{p99}");
        assert_eq!(bin_of(1_000_000.0), BINS - 1);
        // The edges: under 1 ms is bin 0, then one bin per doubling; nonsense reads as 0.
        let edges = [0.0009, 0.001, 0.0019, 0.002, 0.004, -1.0, f64::NAN];
        assert_eq!(edges.map(bin_of), [0, 1, 1, 2, 3, 0, 0]);
    }

    #[test]
    fn gauges_carry_forward_and_start_from_the_value_before_the_range() {
        let book = Book::default();
        let s = book.source("A", "s");
        s.pacer(0, 4);
        s.pacer(100, 10);
        s.in_flight(100, 3);
        s.in_flight(103, -2);
        let v = book.view(104, 6);
        let src = &v.scopes["A"].sources["s"];
        assert_eq!(src.pacer_limit, [4, 10, 10, 10, 10, 10]);
        assert_eq!(src.in_flight, [0, 3, 3, 3, 3, 1]);
        // No event in range: the current values.
        let v = book.view(500, 3);
        assert_eq!(v.scopes["A"].sources["s"].pacer_limit, [10, 10, 10]);
        assert_eq!(v.scopes["A"].sources["s"].in_flight, [1, 1, 1]);
    }

    #[test]
    fn breaker_timeline_is_bounded_and_filtered_by_range() {
        let book = Book::default();
        let s = book.source("A", "s");
        for i in 0..200u64 {
            s.breaker(i * 1000, if i % 2 == 0 { "open" } else { "closed" });
        }
        let v = book.view(199, 900);
        assert_eq!(v.scopes["A"].sources["s"].breaker.len(), BREAKER_CHANGES);
        let v = book.view(199, 10);
        assert_eq!(v.scopes["A"].sources["s"].breaker.len(), 10);
    }

    #[test]
    fn parties_are_capped_and_ranked() {
        let book = Book::default();
        for i in 0..(MAX_PARTIES + 10) {
            book.key(&format!("k{i}")).call(60, true, 0.0);
        }
        book.key("k5").call(60, true, 2.0);
        let v = book.view(60, 60);
        assert_eq!(v.keys.len(), TOP);
        assert_eq!(v.keys[0].name, "k5");
        assert_eq!(book.keys.len(), MAX_PARTIES + 1);
        assert_eq!(book.key("k-late").call(60, true, 0.0), ());
        assert!(book.keys.contains_key("(other)"));
        assert!(!book.keys.contains_key("k-late"));
    }

    #[test]
    fn memory_stays_within_the_bound_after_a_day_of_events() {
        let book = Book::default();
        let scopes = 10;
        let t0 = 1_700_000_000;
        // A day at one event per source, scope and key per simulated minute, plus a
        // second-by-second last quarter hour: every slot of every tier written.
        for minute in 0..1_440u64 {
            let now = t0 + minute * 60;
            for src in 0..50 {
                let sc = format!("S{}", src % scopes);
                let s = book.source(&sc, &format!("src{src}"));
                s.attempt(now, "success");
                s.pacer(now, 8);
            }
            for sc in 0..scopes {
                book.scope(&format!("S{sc}")).call(now, "ok", 0.2);
            }
            for k in 0..1_000 {
                book.key(&format!("key{k}")).call(now, true, 0.001);
            }
        }
        let bytes = book.bytes();
        let bound = bound_bytes(scopes, 50, 1_000);
        assert!(bytes <= bound, "{bytes} > {bound}");
        assert!(
            bytes > bound / 2,
            "{bytes} far under {bound}: the bound is not tight"
        );
    }
}

#[cfg(test)]
mod examples {
    //! Usage cases of crate-private items (they were doc examples while the items were public).

    #[test]
    fn fine_slots_example() {
        assert_eq!(crate::runtime::series::FINE_SLOTS, 900);
    }

    #[test]
    fn coarse_slots_example() {
        assert_eq!(crate::runtime::series::COARSE_SLOTS, 24 * 60);
    }

    #[test]
    fn max_parties_example() {
        assert_eq!(crate::runtime::series::MAX_PARTIES, 1024);
    }

    #[test]
    fn source_series_attempt_took_example() {
        use crate::runtime::series::Book;
        let book = Book::default();
        book.source("LLM", "a").attempt_took(5, 0.003);
        let p50 = book.view(5, 1).scopes["LLM"].sources["a"].latency_ms.p50[0].unwrap();
        assert!((2.0..4.0).contains(&p50));
    }
}
