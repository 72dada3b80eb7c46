//! What a running job has done so far: counters the runner updates, and the [`BatchProgress`]
//! snapshot a caller reads (the CLI prints one per interval). Latency percentiles come from a
//! log-bucketed histogram (5 % wide buckets), so memory stays flat however long the job.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Bucket `i` holds latencies in `[GROWTH^i, GROWTH^(i+1))` milliseconds.
const GROWTH: f64 = 1.05;
/// Enough buckets for a call of several days.
const BUCKETS: usize = 512;

/// Progress of a batch job (a snapshot: [`BatchJob::progress`](super::BatchJob::progress)).
///
/// ```
/// let p = polygateway::batch::BatchProgress::default();
/// assert_eq!((p.read, p.written, p.in_flight), (0, 0, 0));
/// assert!(p.errors.is_empty());
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BatchProgress {
    /// Input lines read so far (the total, once the input has ended).
    pub read: u64,
    /// Whether the whole input has been read.
    pub input_done: bool,
    /// Results out (one per item: answers, errors and lines replayed from the journal).
    pub written: u64,
    /// Of `written`: answered with status 200.
    pub succeeded: u64,
    /// Of `written`: replayed from the journal, not sent in this run.
    pub from_journal: u64,
    /// Calls running now.
    pub in_flight: u64,
    /// Items refused as unavailable, waiting for their `retry_after_s` before being sent again.
    pub waiting_retry: u64,
    /// Times an item was rescheduled after an unavailability.
    pub rescheduled: u64,
    /// Calls finished in this run (every send, rescheduled ones included).
    pub calls: u64,
    /// Error results by code (`invalid_json`, `duplicate_custom_id`, `retry_exhausted`, …).
    pub errors: BTreeMap<String, u64>,
    /// Answers of this run by the source that served them (`openai_1`, …): each
    /// source's share of the work.
    pub sources: BTreeMap<String, u64>,
    /// Cost of this run's answers (what the telemetry rows price).
    pub cost: f64,
    /// Median call latency in this run, milliseconds (capacity wait included).
    pub p50_ms: Option<f64>,
    /// 99th percentile call latency in this run, milliseconds.
    pub p99_ms: Option<f64>,
    /// Time since the job started.
    pub elapsed: Duration,
}

/// The runner's live counters.
pub(crate) struct Progress {
    started: Instant,
    pub(crate) read: AtomicU64,
    pub(crate) input_done: AtomicU64,
    pub(crate) written: AtomicU64,
    pub(crate) succeeded: AtomicU64,
    pub(crate) from_journal: AtomicU64,
    pub(crate) in_flight: AtomicU64,
    pub(crate) waiting_retry: AtomicU64,
    pub(crate) rescheduled: AtomicU64,
    pub(crate) calls: AtomicU64,
    /// Cost in micro-units, so it adds up atomically.
    cost_micros: AtomicU64,
    errors: Mutex<BTreeMap<String, u64>>,
    sources: Mutex<BTreeMap<String, u64>>,
    latencies: Mutex<Vec<u64>>,
}

impl Progress {
    pub(crate) fn new() -> Self {
        Self {
            started: Instant::now(),
            read: AtomicU64::new(0),
            input_done: AtomicU64::new(0),
            written: AtomicU64::new(0),
            succeeded: AtomicU64::new(0),
            from_journal: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            waiting_retry: AtomicU64::new(0),
            rescheduled: AtomicU64::new(0),
            calls: AtomicU64::new(0),
            cost_micros: AtomicU64::new(0),
            errors: Mutex::new(BTreeMap::new()),
            sources: Mutex::new(BTreeMap::new()),
            latencies: Mutex::new(vec![0; BUCKETS]),
        }
    }

    pub(crate) fn add(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn sub(counter: &AtomicU64) {
        counter.fetch_sub(1, Ordering::Relaxed);
    }

    pub(crate) fn error(&self, code: &str) {
        if let Ok(mut errors) = self.errors.lock() {
            *errors.entry(code.to_string()).or_default() += 1;
        }
    }

    /// One answer served by `source`.
    pub(crate) fn served_by(&self, source: &str) {
        if let Ok(mut sources) = self.sources.lock() {
            match sources.get_mut(source) {
                Some(n) => *n += 1,
                None => {
                    sources.insert(source.to_string(), 1);
                }
            }
        }
    }

    /// One finished call: its latency and cost.
    pub(crate) fn call(&self, latency: Duration, cost: f64) {
        Self::add(&self.calls);
        let micros = (cost.max(0.0) * 1e6).round() as u64;
        self.cost_micros.fetch_add(micros, Ordering::Relaxed);
        let ms = latency.as_secs_f64() * 1000.0;
        let bucket = if ms <= 1.0 {
            0
        } else {
            ((ms.ln() / GROWTH.ln()) as usize).min(BUCKETS - 1)
        };
        if let Ok(mut buckets) = self.latencies.lock() {
            buckets[bucket] += 1;
        }
    }

    pub(crate) fn snapshot(&self) -> BatchProgress {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let (p50_ms, p99_ms) = self
            .latencies
            .lock()
            .map(|b| (quantile(&b, 0.5), quantile(&b, 0.99)))
            .unwrap_or_default();
        BatchProgress {
            read: load(&self.read),
            input_done: load(&self.input_done) > 0,
            written: load(&self.written),
            succeeded: load(&self.succeeded),
            from_journal: load(&self.from_journal),
            in_flight: load(&self.in_flight),
            waiting_retry: load(&self.waiting_retry),
            rescheduled: load(&self.rescheduled),
            calls: load(&self.calls),
            errors: self.errors.lock().map(|e| e.clone()).unwrap_or_default(),
            sources: self.sources.lock().map(|s| s.clone()).unwrap_or_default(),
            cost: load(&self.cost_micros) as f64 / 1e6,
            p50_ms,
            p99_ms,
            elapsed: self.started.elapsed(),
        }
    }
}

/// The `q` quantile of a bucketed histogram: the upper edge of the bucket it falls in.
fn quantile(buckets: &[u64], q: f64) -> Option<f64> {
    let total: u64 = buckets.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = ((total as f64) * q).ceil().max(1.0) as u64;
    let mut seen = 0;
    for (i, count) in buckets.iter().enumerate() {
        seen += count;
        if seen >= rank {
            return Some(GROWTH.powi(i as i32 + 1));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_within_a_bucket_of_the_truth() {
        let p = Progress::new();
        for ms in 1..=100u64 {
            p.call(Duration::from_millis(ms), 0.001);
        }
        let s = p.snapshot();
        let p50 = s.p50_ms.unwrap();
        let p99 = s.p99_ms.unwrap();
        assert!((50.0..=50.0 * GROWTH * GROWTH).contains(&p50), "{p50}");
        assert!((99.0..=99.0 * GROWTH * GROWTH).contains(&p99), "{p99}");
        assert!((s.cost - 0.1).abs() < 1e-9, "{}", s.cost);
        assert_eq!(s.calls, 100);
    }

    #[test]
    fn answers_are_counted_by_source() {
        let p = Progress::new();
        p.served_by("openai_1");
        p.served_by("openai_2");
        p.served_by("openai_1");
        let sources = p.snapshot().sources;
        assert_eq!(sources["openai_1"], 2);
        assert_eq!(sources["openai_2"], 1);
    }
}
