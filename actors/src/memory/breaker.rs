//! [`MemoryBreakers`]: the breaker port over one [`BreakerMachine`] per `(scope, source)` in
//! process memory.
//!
//! Not for: several processes sharing breaker state (the Redis backend does that).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use async_trait::async_trait;

use crate::clock::{Clock, TokioClock};
use crate::policy::breaker::BreakerMachine;
use crate::policy::FastMap;
use crate::ports::breaker::{
    BreakerAdmit, BreakerBackend, BreakerConfig, BreakerSnapshot, BreakerVerdict,
};
use crate::ports::BackendError;

use crate::clock::millis_since;

type Machines = FastMap<Arc<str>, FastMap<Arc<str>, BreakerMachine>>;

/// In-memory [`BreakerBackend`]. Probe ids are `"{instance nonce}-{counter}"` in hex: unique
/// per backend value, and unlike ids of another instance.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), polygateway_actors::BackendError> {
/// use polygateway_actors::memory::MemoryBreakers;
/// use polygateway_actors::{BreakerAdmit, BreakerBackend, BreakerConfig};
/// let breakers = MemoryBreakers::default();
/// let cfg = BreakerConfig::default();
/// breakers.force_open("LLM", "openai_1", &cfg).await?;
/// // One breaker per (scope, source): the others are untouched.
/// let refused = breakers.acquire("LLM", "openai_1", &cfg).await?;
/// assert!(matches!(refused, BreakerAdmit::Refused { .. }));
/// assert_eq!(breakers.acquire("LLM", "openai_2", &cfg).await?, BreakerAdmit::Pass { epoch: 0 });
/// assert_eq!(breakers.acquire("VLM", "openai_1", &cfg).await?, BreakerAdmit::Pass { epoch: 0 });
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct MemoryBreakers {
    clock: Arc<dyn Clock>,
    origin: Instant,
    nonce: u64,
    next_probe: AtomicU64,
    machines: Mutex<Machines>,
}

impl Default for MemoryBreakers {
    fn default() -> Self {
        Self::new(Arc::new(TokioClock))
    }
}

fn machine<'a>(m: &'a mut Machines, scope: &str, source: &str) -> &'a mut BreakerMachine {
    // Look up by &str first so the hot path never allocates a key.
    if !m.contains_key(scope) {
        m.insert(Arc::from(scope), FastMap::default());
    }
    let sources = m.get_mut(scope).expect("inserted above");
    if !sources.contains_key(source) {
        sources.insert(Arc::from(source), BreakerMachine::new());
    }
    sources.get_mut(source).expect("inserted above")
}

impl MemoryBreakers {
    /// Breakers reading time from `clock`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway_actors::BackendError> {
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use polygateway_actors::memory::{ManualClock, MemoryBreakers};
    /// use polygateway_actors::{BreakerAdmit, BreakerBackend, BreakerConfig, BreakerVerdict};
    /// let clock = Arc::new(ManualClock::new());
    /// let breakers = MemoryBreakers::new(clock.clone());
    /// let cfg = BreakerConfig::default(); // 30 s cooldown
    /// breakers.force_open("LLM", "openai_1", &cfg).await?;
    /// clock.advance(Duration::from_secs(30));
    /// let admit = breakers.acquire("LLM", "openai_1", &cfg).await?;
    /// let BreakerAdmit::Probe { epoch, probe_id } = admit else {
    ///     panic!("the cooldown is over: expected the probe");
    /// };
    /// let probe = Some(&*probe_id);
    /// let verdict = BreakerVerdict::Success;
    /// assert!(breakers.record("LLM", "openai_1", &cfg, epoch, probe, verdict).await?);
    /// let closed = breakers.acquire("LLM", "openai_1", &cfg).await?;
    /// assert_eq!(closed, BreakerAdmit::Pass { epoch: 1 });
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        let origin = clock.now();
        Self {
            clock,
            origin,
            nonce: rand::random(),
            next_probe: AtomicU64::new(0),
            machines: Mutex::new(FastMap::default()),
        }
    }

    fn now_ms(&self) -> u64 {
        millis_since(self.origin, self.clock.now())
    }

    fn new_probe_id(&self) -> Arc<str> {
        let n = self.next_probe.fetch_add(1, Ordering::Relaxed);
        Arc::from(format!("{:016x}-{n:x}", self.nonce))
    }

    /// Fail closed on a poisoned lock (docs/behaviour.md §10.6).
    fn lock(&self) -> Result<MutexGuard<'_, Machines>, BackendError> {
        self.machines
            .lock()
            .map_err(|_| BackendError::new("memory breaker state poisoned by a panic"))
    }
}

#[async_trait]
impl BreakerBackend for MemoryBreakers {
    async fn acquire(
        &self,
        scope: &str,
        source: &str,
        config: &BreakerConfig,
    ) -> Result<BreakerAdmit, BackendError> {
        let mut m = self.lock()?;
        let now = self.now_ms();
        Ok(machine(&mut m, scope, source).acquire(now, config, || self.new_probe_id()))
    }

    async fn record(
        &self,
        scope: &str,
        source: &str,
        config: &BreakerConfig,
        epoch: u64,
        probe_id: Option<&str>,
        verdict: BreakerVerdict,
    ) -> Result<bool, BackendError> {
        let mut m = self.lock()?;
        let now = self.now_ms();
        Ok(machine(&mut m, scope, source).record(now, config, epoch, probe_id, verdict))
    }

    async fn force_open(
        &self,
        scope: &str,
        source: &str,
        config: &BreakerConfig,
    ) -> Result<(), BackendError> {
        let mut m = self.lock()?;
        let now = self.now_ms();
        machine(&mut m, scope, source).force_open(now, config);
        Ok(())
    }

    async fn release_probe(
        &self,
        scope: &str,
        source: &str,
        probe_id: &str,
    ) -> Result<(), BackendError> {
        let mut m = self.lock()?;
        if let Some(b) = m.get_mut(scope).and_then(|s| s.get_mut(source)) {
            b.release_probe(probe_id);
        }
        Ok(())
    }

    async fn snapshot(
        &self,
        scope: &str,
        source: &str,
        _config: &BreakerConfig,
    ) -> Result<BreakerSnapshot, BackendError> {
        let m = self.lock()?;
        let now = self.now_ms();
        Ok(match m.get(scope).and_then(|s| s.get(source)) {
            Some(b) => b.snapshot(now),
            None => BreakerMachine::new().snapshot(now),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::ManualClock;
    use crate::ports::breaker::BreakerState;
    use std::time::Duration;

    fn cfg() -> BreakerConfig {
        BreakerConfig {
            fail_threshold: 2,
            cooldown: Duration::from_secs(30),
            probe_ttl: Duration::from_secs(60),
            ..BreakerConfig::default()
        }
    }

    #[tokio::test]
    async fn cooldown_then_single_probe_under_a_manual_clock() {
        let clock = Arc::new(ManualClock::new());
        let b = MemoryBreakers::new(clock.clone());
        let c = cfg();
        for _ in 0..2 {
            assert!(b
                .record("S", "a", &c, 0, None, BreakerVerdict::Failure)
                .await
                .unwrap());
        }
        clock.advance(Duration::from_secs(12));
        assert_eq!(
            b.acquire("S", "a", &c).await.unwrap(),
            BreakerAdmit::Refused {
                state: BreakerState::Open,
                retry_after: Duration::from_secs(18)
            }
        );
        assert_eq!(
            b.acquire("S", "b", &c).await.unwrap(),
            BreakerAdmit::Pass { epoch: 0 },
            "sources are independent"
        );
        clock.advance(Duration::from_secs(18));
        let BreakerAdmit::Probe { epoch, probe_id } = b.acquire("S", "a", &c).await.unwrap() else {
            panic!("expected probe")
        };
        assert_eq!(epoch, 1);
        assert!(matches!(
            b.acquire("S", "a", &c).await.unwrap(),
            BreakerAdmit::Refused { .. }
        ));
        assert!(b
            .record(
                "S",
                "a",
                &c,
                epoch,
                Some(&probe_id),
                BreakerVerdict::Success
            )
            .await
            .unwrap());
        assert_eq!(
            b.snapshot("S", "a", &c).await.unwrap().state,
            BreakerState::Closed
        );
    }

    #[tokio::test]
    async fn probe_ids_are_unique_and_scopes_are_independent() {
        let clock = Arc::new(ManualClock::new());
        let b = MemoryBreakers::new(clock.clone());
        let c = cfg();
        b.force_open("S", "a", &c).await.unwrap();
        b.force_open("T", "a", &c).await.unwrap();
        clock.advance(Duration::from_secs(30));
        let BreakerAdmit::Probe { probe_id: p1, .. } = b.acquire("S", "a", &c).await.unwrap()
        else {
            panic!()
        };
        let BreakerAdmit::Probe { probe_id: p2, .. } = b.acquire("T", "a", &c).await.unwrap()
        else {
            panic!()
        };
        assert_ne!(p1, p2);
        b.release_probe("S", "a", &p2).await.unwrap();
        assert!(b.snapshot("S", "a", &c).await.unwrap().probe_held);
        b.release_probe("nope", "a", &p1).await.unwrap();
    }

    #[tokio::test]
    async fn unknown_breaker_snapshots_closed_without_being_created() {
        let b = MemoryBreakers::default();
        let s = b.snapshot("S", "x", &cfg()).await.unwrap();
        assert_eq!((s.state, s.epoch, s.opens), (BreakerState::Closed, 0, 0));
        assert!(b.lock().unwrap().is_empty());
    }
}
