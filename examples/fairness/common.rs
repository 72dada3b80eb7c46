//! What every fairness scenario shares: a queueing upstream of known capacity (the capacity
//! mock: `slots` requests served at once in `service` each, the rest queued FIFO), a gateway
//! over it that holds the queue itself, timed calls and the statistics the JSON lines report.
//!
//! The gateway's source runs `PACER=off` with `MAX_CONCURRENCY = slots`: the pacer limit is the
//! upstream's capacity exactly, so every call beyond it waits in the gateway's waiting room
//! (docs/behaviour.md §5.7), where priority, deadlines and tenant weights decide the order —
//! not in the upstream's FIFO queue, where nothing can.

use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

use polygateway::config::Settings;
use polygateway::{CallOptions, Gateway, GatewayError, Message};
use polygateway_testkit::mock_capacity::{CapacityMock, Regime};
use polygateway_testkit::mock_env;

/// A queueing upstream and the gateway in front of it.
pub struct Bench {
    pub mock: CapacityMock,
    pub gateway: Arc<Gateway>,
    pub slots: usize,
    pub service: Duration,
}

impl Bench {
    /// Start the mock and a gateway over it (memory backends, no cache, no telemetry).
    pub async fn start(slots: usize, service: Duration) -> Result<Self, GatewayError> {
        let mock = CapacityMock::start(Regime::Queueing { slots, service }).await;
        let mut env = mock_env();
        let source = "LLM__OPENAI__1";
        env.insert(format!("{source}__BASE_URL"), mock.base_url());
        env.insert(format!("{source}__API_KEY"), "sk-test".into());
        env.insert(format!("{source}__MODEL"), "test-model".into());
        env.insert(format!("{source}__TIMEOUT_S"), "120".into());
        env.insert(format!("{source}__MAX_CONCURRENCY"), slots.to_string());
        env.insert("LLM__PACER".into(), "off".into());
        let settings = Settings::from_map(&env).map_err(GatewayError::Config)?;
        let gateway = Arc::new(Gateway::from_settings(settings, "LLM").await?);
        let bench = Self {
            mock,
            gateway,
            slots,
            service,
        };
        // Open connections and teach the source how long an attempt takes (the deadline
        // check's floor), as a running service would have learned long before.
        for _ in 0..3 {
            bench.call(CallOptions::new()).await?;
        }
        Ok(bench)
    }

    /// Calls per second the upstream can serve.
    pub fn capacity_per_s(&self) -> f64 {
        self.slots as f64 / self.service.as_secs_f64()
    }

    /// Requests that reached the upstream so far.
    pub fn reached(&self) -> u64 {
        let stats = self.mock.stats();
        stats.served + stats.refused
    }

    /// One chat call; its duration as the caller saw it.
    pub async fn call(&self, options: CallOptions) -> Result<Duration, GatewayError> {
        let started = Instant::now();
        self.gateway
            .chat_with(vec![Message::user("hi")], options)
            .await?;
        Ok(started.elapsed())
    }

    pub async fn shutdown(self) {
        if let Ok(gateway) = Arc::try_unwrap(self.gateway) {
            gateway.shutdown().await;
        }
    }
}

/// The `p` quantile (0..=1) of `values` in milliseconds (0 when empty).
pub fn percentile_ms(values: &[Duration], p: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    let mut ms: Vec<f64> = values.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    ms.sort_by(f64::total_cmp);
    let i = ((ms.len() as f64 - 1.0) * p).round() as usize;
    ms[i]
}

/// Jain's fairness index of `xs`: 1 when all are equal, 1/n when one takes everything.
pub fn jain(xs: &[f64]) -> f64 {
    let sum: f64 = xs.iter().sum();
    let squares: f64 = xs.iter().map(|x| x * x).sum();
    if squares == 0.0 {
        return 0.0;
    }
    sum * sum / (xs.len() as f64 * squares)
}

/// Round to three decimals for the JSON lines.
pub fn round(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}
