//! The capacity benchmark's engine, shared by `examples/capacity.rs` and its bounded test: how
//! close the governed runtime gets to what an upstream can really serve, per regime
//! ([`Regime`]), with many callers and the default pacer.
//!
//! Each scenario starts one mock per source in-process, builds a gateway over them (memory
//! governance, no cache, no telemetry, `MAX_CONCURRENCY` unset) and lets `callers` tasks call
//! back to back for `duration`. Traffic goes to 127.0.0.1 only and stops at the deadline.

use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

use serde_json::{json, Value};

use super::mock_capacity::{CapacityMock, CapacityStats, Regime};
use super::settings::mock_env;
use polygateway::config::Settings;
use polygateway::{Gateway, GatewayError, Message, SourceSnapshot};

/// One scenario to run.
///
/// ```
/// use std::time::Duration;
/// use polygateway_testkit::capacity::Scenario;
/// let s = Scenario::queueing(Duration::from_millis(200));
/// assert_eq!((s.name, s.ideal_calls_per_s), ("queueing", Some(640.0)));
/// ```
#[derive(Debug, Clone)]
pub struct Scenario {
    /// `unlimited`, `rate_limited` or `queueing`.
    pub name: &'static str,
    /// The regime of each source's mock.
    pub regime: Regime,
    /// Sources (one mock each).
    pub sources: usize,
    /// The best possible rate, `None` when it is measured (a bare client, `unlimited`).
    pub ideal_calls_per_s: Option<f64>,
}

impl Scenario {
    /// Two sources that answer in `service` and never refuse; ideal = a bare reqwest client.
    ///
    /// ```
    /// use std::time::Duration;
    /// use polygateway_testkit::capacity::Scenario;
    /// assert_eq!(Scenario::unlimited(Duration::from_millis(200)).ideal_calls_per_s, None);
    /// ```
    pub fn unlimited(service: Duration) -> Self {
        Self {
            name: "unlimited",
            regime: Regime::Unlimited { service },
            sources: 2,
            ideal_calls_per_s: None,
        }
    }

    /// Two sources admitting `per_s` requests per second each (429 + `Retry-After: 1` above),
    /// with or without OpenAI's rate-limit headers.
    ///
    /// ```
    /// use std::time::Duration;
    /// use polygateway_testkit::capacity::Scenario;
    /// let s = Scenario::rate_limited(1000, Duration::from_millis(200), true);
    /// assert_eq!(s.ideal_calls_per_s, Some(2000.0));
    /// ```
    pub fn rate_limited(per_s: u32, service: Duration, headers: bool) -> Self {
        Self {
            name: "rate_limited",
            regime: Regime::RateLimited {
                per_s,
                service,
                headers,
            },
            sources: 2,
            ideal_calls_per_s: Some(2.0 * f64::from(per_s)),
        }
    }

    /// Two self-hosted-style sources serving 64 at once in `service`, queueing the rest.
    ///
    /// ```
    /// use std::time::Duration;
    /// use polygateway_testkit::capacity::Scenario;
    /// assert_eq!(Scenario::queueing(Duration::from_millis(100)).ideal_calls_per_s, Some(1280.0));
    /// ```
    pub fn queueing(service: Duration) -> Self {
        Self {
            name: "queueing",
            regime: Regime::Queueing { slots: 64, service },
            sources: 2,
            ideal_calls_per_s: Some(2.0 * 64.0 / service.as_secs_f64()),
        }
    }
}

/// What one scenario measured. [`CapacityReport::json`] is the benchmark's output line.
///
/// ```
/// use polygateway_testkit::capacity::CapacityReport;
/// let r = CapacityReport { scenario: "queueing", ideal_calls_per_s: 640.0, measured_ideal: false,
///     steady_calls_per_s: 600.0, seconds_to_90pct: Some(1.5), rate_limited_share: 0.0,
///     upstream_p50_ms: 260.0, caller_p99_ms: 2000.0, calls: 6000, errors: 0, first_error: None, sources: vec![] };
/// assert_eq!(r.goodput_ratio(), 600.0 / 640.0);
/// assert_eq!(r.json()["ideal_calls_per_s"], 640.0);
/// ```
#[derive(Debug, Clone)]
pub struct CapacityReport {
    /// Scenario name.
    pub scenario: &'static str,
    /// The rate goodput is measured against.
    pub ideal_calls_per_s: f64,
    /// `true` when the ideal was measured with a bare client (`direct_calls_per_s`).
    pub measured_ideal: bool,
    /// Successful calls per second over the last half of the run.
    pub steady_calls_per_s: f64,
    /// From the first call until a 1 s window first reached 90 % of the ideal.
    pub seconds_to_90pct: Option<f64>,
    /// 429 answers / all answers, as the mocks counted them.
    pub rate_limited_share: f64,
    /// Median arrival-to-answer time of served requests, as the mocks saw it.
    pub upstream_p50_ms: f64,
    /// 99th percentile of the callers' call time.
    pub caller_p99_ms: f64,
    /// Successful calls.
    pub calls: u64,
    /// Failed calls.
    pub errors: u64,
    /// The first failure, if any.
    pub first_error: Option<String>,
    /// The sources at the end of the run (pacer mode, limit, last signal).
    pub sources: Vec<SourceSnapshot>,
}

impl CapacityReport {
    /// Steady rate / ideal.
    ///
    /// ```
    /// # use polygateway_testkit::capacity::CapacityReport;
    /// # let r = CapacityReport { scenario: "x", ideal_calls_per_s: 100.0, measured_ideal: true,
    /// #     steady_calls_per_s: 95.0, seconds_to_90pct: None, rate_limited_share: 0.0,
    /// #     upstream_p50_ms: 0.0, caller_p99_ms: 0.0, calls: 0, errors: 0, first_error: None, sources: vec![] };
    /// assert_eq!(r.goodput_ratio(), 0.95);
    /// ```
    pub fn goodput_ratio(&self) -> f64 {
        if self.ideal_calls_per_s > 0.0 {
            self.steady_calls_per_s / self.ideal_calls_per_s
        } else {
            0.0
        }
    }

    /// The JSON line: exactly the benchmark's keys.
    ///
    /// ```
    /// # use polygateway_testkit::capacity::CapacityReport;
    /// # let r = CapacityReport { scenario: "unlimited", ideal_calls_per_s: 4000.0, measured_ideal: true,
    /// #     steady_calls_per_s: 3800.0, seconds_to_90pct: Some(1.2), rate_limited_share: 0.0,
    /// #     upstream_p50_ms: 201.0, caller_p99_ms: 260.0, calls: 30000, errors: 0, first_error: None, sources: vec![] };
    /// let line = r.json();
    /// assert_eq!(line["direct_calls_per_s"], 4000.0);
    /// assert!(line.get("ideal_calls_per_s").is_none());
    /// assert_eq!(line.as_object().unwrap().len(), 10);
    /// ```
    pub fn json(&self) -> Value {
        let ideal_key = if self.measured_ideal {
            "direct_calls_per_s"
        } else {
            "ideal_calls_per_s"
        };
        let round = |x: f64| (x * 1000.0).round() / 1000.0;
        let mut line = serde_json::Map::new();
        line.insert("scenario".into(), json!(self.scenario));
        line.insert(ideal_key.into(), json!(round(self.ideal_calls_per_s)));
        line.insert(
            "steady_calls_per_s".into(),
            json!(round(self.steady_calls_per_s)),
        );
        line.insert("goodput_ratio".into(), json!(round(self.goodput_ratio())));
        line.insert(
            "seconds_to_90pct".into(),
            json!(self.seconds_to_90pct.map(round)),
        );
        line.insert(
            "rate_limited_share".into(),
            json!(round(self.rate_limited_share)),
        );
        line.insert("upstream_p50_ms".into(), json!(round(self.upstream_p50_ms)));
        line.insert("caller_p99_ms".into(), json!(round(self.caller_p99_ms)));
        line.insert("calls".into(), json!(self.calls));
        line.insert("errors".into(), json!(self.errors));
        Value::Object(line)
    }
}

/// Completion times (since the first call) and call durations of the successful calls.
#[derive(Default)]
struct Calls {
    done_at: Vec<f64>,
    took: Vec<f64>,
    errors: u64,
    first_error: Option<String>,
}

/// `callers` tasks calling `one` back to back until `duration` has passed.
async fn drive<F, Fut>(callers: usize, duration: Duration, one: F) -> Calls
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<(), String>> + Send,
{
    let one = Arc::new(one);
    let calls = Arc::new(Mutex::new(Calls::default()));
    let start = Instant::now();
    let deadline = start + duration;
    let tasks: Vec<_> = (0..callers)
        .map(|_| {
            let (one, calls) = (Arc::clone(&one), Arc::clone(&calls));
            tokio::spawn(async move {
                let mut mine = Calls::default();
                while Instant::now() < deadline {
                    let t = Instant::now();
                    match one().await {
                        Ok(()) => {
                            mine.done_at.push(start.elapsed().as_secs_f64());
                            mine.took.push(t.elapsed().as_secs_f64());
                        }
                        Err(e) => {
                            mine.errors += 1;
                            mine.first_error.get_or_insert(e);
                        }
                    }
                }
                let mut all = calls.lock().unwrap_or_else(|e| e.into_inner());
                all.done_at.extend(mine.done_at);
                all.took.extend(mine.took);
                all.errors += mine.errors;
                if all.first_error.is_none() {
                    all.first_error = mine.first_error;
                }
            })
        })
        .collect();
    for task in tasks {
        let _ = task.await;
    }
    let mut out = calls.lock().unwrap_or_else(|e| e.into_inner());
    std::mem::take(&mut *out)
}

/// Successful calls per second over the last half of `duration`.
fn steady_rate(done_at: &[f64], duration: f64) -> f64 {
    let half = duration / 2.0;
    let n = done_at
        .iter()
        .filter(|&&t| t >= half && t <= duration)
        .count();
    n as f64 / half
}

/// The end of the first 1 s window (sliding by 100 ms) holding 90 % of `ideal` calls per second.
fn seconds_to_90pct(done_at: &[f64], ideal: f64, duration: f64) -> Option<f64> {
    let mut sorted = done_at.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mut end = 1.0;
    while end <= duration + 1e-9 {
        let lo = sorted.partition_point(|&t| t < end - 1.0);
        let hi = sorted.partition_point(|&t| t < end);
        if (hi - lo) as f64 >= 0.9 * ideal {
            return Some(end);
        }
        end += 0.1;
    }
    None
}

fn percentile(values: &mut [f64], p: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let i = ((values.len() as f64 - 1.0) * p).round() as usize;
    values[i]
}

/// A bare reqwest client's steady rate against `mock` with the same callers (the `unlimited`
/// scenario's ideal).
async fn direct_rate(mock: &CapacityMock, callers: usize, duration: Duration) -> f64 {
    let client = reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(callers)
        .build()
        .expect("a plain reqwest client");
    let url = format!("{}/chat/completions", mock.base_url());
    // The same streamed request the gateway sends.
    let body = json!({"model": "test-model", "messages": [{"role": "user", "content": "hi"}], "stream": true})
        .to_string();
    let calls = drive(callers, duration, move || {
        let request = client.post(&url).body(body.clone()).send();
        async move {
            match request.await {
                Ok(r) if r.status().is_success() => {
                    r.bytes().await.map(drop).map_err(|e| e.to_string())
                }
                Ok(r) => Err(format!("HTTP {}", r.status())),
                Err(e) => Err(e.to_string()),
            }
        }
    })
    .await;
    steady_rate(&calls.done_at, duration.as_secs_f64())
}

/// Run one scenario with `callers` for `duration` under `{SCOPE}__PACER=pacer` (`adaptive`,
/// `aimd`, `off`).
///
/// # Errors
/// When the gateway cannot be built.
///
/// ```no_run
/// # async fn demo() -> Result<(), polygateway::GatewayError> {
/// use std::time::Duration;
/// use polygateway_testkit::capacity::{run_scenario, Scenario};
/// let scenario = Scenario::queueing(Duration::from_millis(200));
/// let report = run_scenario(&scenario, 1024, Duration::from_secs(10), "adaptive").await?;
/// println!("{}", report.json());
/// # Ok(()) }
/// ```
pub async fn run_scenario(
    scenario: &Scenario,
    callers: usize,
    duration: Duration,
    pacer: &str,
) -> Result<CapacityReport, GatewayError> {
    let mut mocks = Vec::new();
    for _ in 0..scenario.sources {
        mocks.push(CapacityMock::start(scenario.regime).await);
    }
    let (ideal, measured_ideal) = match scenario.ideal_calls_per_s {
        Some(ideal) => (ideal, false),
        None => {
            let mut total = 0.0;
            // The bare client spreads its callers over the same mocks.
            let per_mock = callers / mocks.len().max(1);
            let rates =
                futures::future::join_all(mocks.iter().map(|m| direct_rate(m, per_mock, duration)))
                    .await;
            for r in rates {
                total += r;
            }
            (total, true)
        }
    };
    let before: Vec<CapacityStats> = mocks.iter().map(CapacityMock::stats).collect();

    let mut env = mock_env();
    for (n, mock) in mocks.iter().enumerate() {
        let source = format!("LLM__OPENAI__{}", n + 1);
        env.insert(format!("{source}__BASE_URL"), mock.base_url());
        env.insert(format!("{source}__API_KEY"), "sk-test".into());
        env.insert(format!("{source}__MODEL"), "test-model".into());
        env.insert(format!("{source}__TIMEOUT_S"), "30".into());
    }
    env.insert("LLM__PACER".into(), pacer.to_string());
    env.insert("LLM__RETRY__BACKOFF_BASE_S".into(), "0.05".into());
    env.insert("LLM__RETRY__BACKOFF_MAX_S".into(), "1".into());
    let settings = Settings::from_map(&env).map_err(GatewayError::Config)?;
    let gateway = Arc::new(Gateway::from_settings(settings, "LLM").await?);
    let gw = Arc::clone(&gateway);
    let calls = drive(callers, duration, move || {
        let gw = Arc::clone(&gw);
        async move {
            gw.chat(vec![Message::user("hi")])
                .await
                .map(drop)
                .map_err(|e| e.to_string())
        }
    })
    .await;
    let sources = gateway.sources("LLM").await?;
    if let Ok(gateway) = Arc::try_unwrap(gateway) {
        gateway.shutdown().await;
    }

    let (mut served, mut refused, mut latencies) = (0u64, 0u64, Vec::new());
    for (mock, before) in mocks.iter().zip(&before) {
        let stats = mock.stats();
        served += stats.served - before.served;
        refused += stats.refused - before.refused;
        latencies.extend(
            stats.served_latencies[before.served_latencies.len()..]
                .iter()
                .map(|d| d.as_secs_f64() * 1e3),
        );
    }
    let secs = duration.as_secs_f64();
    let mut took: Vec<f64> = calls.took.iter().map(|s| s * 1e3).collect();
    Ok(CapacityReport {
        scenario: scenario.name,
        ideal_calls_per_s: ideal,
        measured_ideal,
        steady_calls_per_s: steady_rate(&calls.done_at, secs),
        seconds_to_90pct: seconds_to_90pct(&calls.done_at, ideal, secs),
        rate_limited_share: if served + refused > 0 {
            refused as f64 / (served + refused) as f64
        } else {
            0.0
        },
        upstream_p50_ms: percentile(&mut latencies, 0.5),
        caller_p99_ms: percentile(&mut took, 0.99),
        calls: calls.done_at.len() as u64,
        errors: calls.errors,
        first_error: calls.first_error,
        sources,
    })
}

/// What a cold start measured: `callers` arriving at once at a fresh gateway whose one source
/// answers in a constant time whatever the concurrency (an upstream that is never strained),
/// over the first seconds. [`ColdStartReport::json`] is the benchmark's output line.
///
/// ```
/// use polygateway_testkit::capacity::ColdStartReport;
/// let r = ColdStartReport { pacer: "adaptive".into(), calls_per_s: 190.0, p50_ms: 1302.0,
///     p99_ms: 1390.0, calls: 1900, errors: 0, pacer_waits: 0, pacer_signal: "none" };
/// assert_eq!(r.json()["pacer"], "adaptive");
/// assert_eq!(r.json()["pacer_waits"], 0);
/// ```
#[derive(Debug, Clone)]
pub struct ColdStartReport {
    /// `{SCOPE}__PACER` of the run.
    pub pacer: String,
    /// Successful calls per second over the window.
    pub calls_per_s: f64,
    /// Median call time of the calls that ended in the window.
    pub p50_ms: f64,
    /// 99th percentile of the same.
    pub p99_ms: f64,
    /// Successful calls.
    pub calls: u64,
    /// Failed calls.
    pub errors: u64,
    /// Calls whose answer says they waited for a pacer slot (`capacity_wait_ms` > 0 with no
    /// gate, cooldown or 429 in this scenario).
    pub pacer_waits: u64,
    /// The source's pacer at the end: its last signal (`none` when it never saw strain).
    pub pacer_signal: &'static str,
}

impl ColdStartReport {
    /// The JSON line.
    ///
    /// ```
    /// # use polygateway_testkit::capacity::ColdStartReport;
    /// # let r = ColdStartReport { pacer: "off".into(), calls_per_s: 190.0, p50_ms: 1302.0,
    /// #     p99_ms: 1390.0, calls: 1900, errors: 0, pacer_waits: 0, pacer_signal: "none" };
    /// assert_eq!(r.json()["scenario"], "cold_start");
    /// ```
    pub fn json(&self) -> Value {
        let round = |x: f64| (x * 1000.0).round() / 1000.0;
        json!({
            "scenario": "cold_start",
            "pacer": self.pacer,
            "calls_per_s": round(self.calls_per_s),
            "p50_ms": round(self.p50_ms),
            "p99_ms": round(self.p99_ms),
            "calls": self.calls,
            "errors": self.errors,
            "pacer_waits": self.pacer_waits,
            "pacer_signal": self.pacer_signal,
        })
    }
}

/// `callers` arrive at once at a fresh gateway (one source, `{SCOPE}__PACER=pacer`) whose
/// upstream answers in `service` whatever the concurrency; measured over `window` from the
/// first call (docs/behaviour.md §5.2: a pacer that has seen no strain makes no call wait).
///
/// # Errors
/// When the gateway cannot be built.
///
/// ```no_run
/// # async fn demo() -> Result<(), polygateway::GatewayError> {
/// use std::time::Duration;
/// use polygateway_testkit::capacity::run_cold_start;
/// let on = run_cold_start(256, Duration::from_millis(1300), Duration::from_secs(10), "adaptive").await?;
/// let off = run_cold_start(256, Duration::from_millis(1300), Duration::from_secs(10), "off").await?;
/// println!("{}\n{}", on.json(), off.json());
/// # Ok(()) }
/// ```
pub async fn run_cold_start(
    callers: usize,
    service: Duration,
    window: Duration,
    pacer: &str,
) -> Result<ColdStartReport, GatewayError> {
    let mock = CapacityMock::start(Regime::Unlimited { service }).await;
    let mut env = mock_env();
    env.insert("LLM__OPENAI__1__BASE_URL".into(), mock.base_url());
    env.insert("LLM__OPENAI__1__API_KEY".into(), "sk-test".into());
    env.insert("LLM__OPENAI__1__MODEL".into(), "test-model".into());
    env.insert("LLM__OPENAI__1__TIMEOUT_S".into(), "60".into());
    env.insert("LLM__PACER".into(), pacer.to_string());
    let settings = Settings::from_map(&env).map_err(GatewayError::Config)?;
    let gateway = Arc::new(Gateway::from_settings(settings, "LLM").await?);
    let waits = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let (gw, counted) = (Arc::clone(&gateway), Arc::clone(&waits));
    let calls = drive(callers, window, move || {
        let (gw, counted) = (Arc::clone(&gw), Arc::clone(&counted));
        async move {
            let answer = gw
                .chat(vec![Message::user("hi")])
                .await
                .map_err(|e| e.to_string())?;
            if answer.capacity_wait_ms > 0.0 {
                counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            Ok(())
        }
    })
    .await;
    let pacer_signal = gateway
        .sources("LLM")
        .await?
        .first()
        .map_or("none", |s| s.pacer_signal.as_str());
    if let Ok(gateway) = Arc::try_unwrap(gateway) {
        gateway.shutdown().await;
    }
    // The callers' last calls end after the window: only the calls that ended in it count.
    let secs = window.as_secs_f64();
    let mut took: Vec<f64> = calls
        .done_at
        .iter()
        .zip(&calls.took)
        .filter(|(done, _)| **done <= secs)
        .map(|(_, took)| took * 1e3)
        .collect();
    Ok(ColdStartReport {
        pacer: pacer.to_string(),
        calls_per_s: took.len() as f64 / secs,
        p50_ms: percentile(&mut took, 0.5),
        p99_ms: percentile(&mut took, 0.99),
        calls: calls.done_at.len() as u64,
        errors: calls.errors,
        pacer_waits: waits.load(std::sync::atomic::Ordering::Relaxed),
        pacer_signal,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_and_rates() {
        // 100 calls per second for 4 s.
        let done: Vec<f64> = (0..400).map(|i| f64::from(i) / 100.0).collect();
        assert!((steady_rate(&done, 4.0) - 100.0).abs() < 1.0);
        assert_eq!(seconds_to_90pct(&done, 100.0, 4.0), Some(1.0));
        assert_eq!(seconds_to_90pct(&done, 200.0, 4.0), None);
    }
}
