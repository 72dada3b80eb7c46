//! The fault-mix soak: the main job's engine, shared by `examples/soak.rs` and a bounded test.
//!
//! Starts one mock upstream per source — three healthy ones and the seeds' fault mix (bad key,
//! black hole, slow, 429 with Retry-After, 90 % transient failures), and three native Anthropic
//! sources in the same scope (one healthy, one answering `529 overloaded_error`, one cutting its
//! streams with an `error` event after content) and a native Gemini source — builds a gateway
//! over them on
//! embedded defaults (memory governance, SQLite telemetry when a path is given), runs the calls at
//! the requested concurrency and reports success, where attempts went, breaker openings, latency,
//! throughput and whether every counter came back to zero. Traffic goes to 127.0.0.1 only; the
//! run is bounded by its call count and by each call's retry and stall budgets.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{json, Value};

use super::mock_anthropic::{AnthropicFault, MockAnthropic, MOCK_ANTHROPIC_KEY};
use super::mock_gemini::{MockGemini, MOCK_GEMINI_KEY};
use super::mock_llm::{Behaviour, MockUpstream};
use polygateway::config::Settings;
use polygateway::{CallOptions, Gateway, GatewayError, Message, SourceSnapshot};

/// What to run.
///
/// ```no_run
/// use polygateway_testkit::soak::{run_soak, SoakConfig};
/// # async fn demo() -> Result<(), polygateway::GatewayError> {
/// let dir = tempfile::tempdir().unwrap();
/// let config = SoakConfig {
///     calls: 2000,
///     concurrency: 64,
///     seed: 7,
///     // Every attempt gets a telemetry row; the report counts them after shutdown.
///     telemetry_sqlite: Some(dir.path().join("soak.sqlite")),
/// };
/// let report = run_soak(&config).await?;
/// assert_eq!(report.telemetry_rows_written, report.telemetry_rows_expected);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct SoakConfig {
    /// Calls to make.
    pub calls: usize,
    /// Calls in flight at once.
    pub concurrency: usize,
    /// Seed of the failing source's fault draws.
    pub seed: u64,
    /// Where telemetry goes (`None`: no telemetry).
    pub telemetry_sqlite: Option<PathBuf>,
}

/// One source of the mix.
struct MixSource {
    name: &'static str,
    upstream: Upstream,
    healthy: bool,
}

/// The mock behind a source of the mix, in the dialect the source speaks.
enum Upstream {
    OpenAi(Behaviour),
    Anthropic(AnthropicFault),
    Gemini,
}

fn fault_mix(seed: u64) -> Vec<MixSource> {
    let healthy = || Behaviour::Healthy {
        ttft: Duration::from_millis(5),
        inter_token: Duration::from_millis(1),
        chunks: 4,
        content: "a healthy answer".into(),
    };
    let source = |name, behaviour, healthy| MixSource {
        name,
        upstream: Upstream::OpenAi(behaviour),
        healthy,
    };
    let claude = |name, fault, healthy| MixSource {
        name,
        upstream: Upstream::Anthropic(fault),
        healthy,
    };
    vec![
        source("healthya", healthy(), true),
        source("healthyb", healthy(), true),
        source("healthyc", healthy(), true),
        source("badkey", Behaviour::Unauthorized, false),
        source("blackhole", Behaviour::BlackHole, false),
        source(
            "slow",
            Behaviour::Slow {
                delay: Duration::from_millis(1500),
            },
            false,
        ),
        source(
            "ratelimited",
            Behaviour::RateLimited {
                retry_after_s: Some(1),
            },
            false,
        ),
        source(
            "halfdead",
            Behaviour::Mix {
                failure_rate: 0.9,
                failure: Box::new(Behaviour::ServerError(503)),
                healthy: Box::new(Behaviour::healthy()),
                seed,
            },
            false,
        ),
        claude("claudeok", AnthropicFault::None, true),
        claude("claudebusy", AnthropicFault::Overloaded, false),
        claude("claudecut", AnthropicFault::ErrorEventAfterContent, false),
        MixSource {
            name: "geminiok",
            upstream: Upstream::Gemini,
            healthy: true,
        },
    ]
}

/// The outcome of a soak.
///
/// ```no_run
/// use polygateway_testkit::soak::{run_soak, SoakConfig};
/// # async fn demo() -> Result<(), polygateway::GatewayError> {
/// let config = SoakConfig { calls: 500, concurrency: 32, seed: 1, telemetry_sqlite: None };
/// let report = run_soak(&config).await?;
/// assert_eq!(report.calls, 500);
/// assert!(report.p50_ms <= report.p99_ms);
/// println!("{:.0} calls/s, p99 {:.0} ms", report.calls_per_s, report.p99_ms);
/// for (failure, n) in &report.failures {
///     println!("{failure}: {n}");
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct SoakReport {
    /// Calls made.
    pub calls: usize,
    /// Calls that succeeded.
    pub succeeded: usize,
    /// Failed calls by `Class[:reason]`.
    pub failures: BTreeMap<String, u64>,
    /// The sources at the end of the run.
    pub sources: Vec<SourceSnapshot>,
    /// Names of the healthy sources.
    pub healthy: Vec<String>,
    /// Call latency percentiles (ms).
    pub p50_ms: f64,
    /// 99th percentile (ms).
    pub p99_ms: f64,
    /// Throughput.
    pub calls_per_s: f64,
    /// Limiter leases still held after the run.
    pub leases_held: u64,
    /// Telemetry rows the gateway accepted.
    pub telemetry_rows_expected: u64,
    /// Rows found in the SQLite table after shutdown.
    pub telemetry_rows_written: u64,
}

impl SoakReport {
    /// Share of successful calls (0–1).
    ///
    /// ```
    /// use polygateway_testkit::soak::SoakReport;
    /// # use std::collections::BTreeMap;
    /// # let report = |calls: usize, succeeded: usize, leases_held: u64| SoakReport {
    /// #     calls, succeeded, failures: BTreeMap::new(), sources: Vec::new(), healthy: Vec::new(),
    /// #     p50_ms: 12.0, p99_ms: 80.0, calls_per_s: 400.0, leases_held,
    /// #     telemetry_rows_expected: 0, telemetry_rows_written: 0,
    /// # };
    /// // `report(calls, succeeded, leases_held)` builds a report by hand.
    /// assert_eq!(report(200, 199, 0).success_rate(), 0.995);
    /// // A run without calls has no successes rather than a NaN.
    /// assert_eq!(report(0, 0, 0).success_rate(), 0.0);
    /// ```
    pub fn success_rate(&self) -> f64 {
        self.succeeded as f64 / self.calls.max(1) as f64
    }

    fn attempts_total(&self) -> u64 {
        self.sources.iter().map(|s| s.attempts).sum::<u64>().max(1)
    }

    /// Share of all attempts that went to each faulty source.
    ///
    /// ```
    /// use polygateway_testkit::soak::SoakReport;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// # use std::collections::BTreeMap;
    /// # use polygateway_testkit::{Behaviour, MockUpstream};
    /// # let good = MockUpstream::start(Behaviour::healthy()).await;
    /// # let bad = MockUpstream::start(Behaviour::Unauthorized).await;
    /// # let mut env: BTreeMap<String, String> = [
    /// #     ("PGW_LIMITER_BACKEND", "memory"), ("PGW_BREAKER_BACKEND", "memory"),
    /// #     ("PGW_TELEMETRY_BACKEND", "none"), ("LLM__SELECTOR", "round_robin"),
    /// # ].into_iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    /// # for (name, mock) in [("HEALTHYA", &good), ("BADKEY", &bad)] {
    /// #     env.insert(format!("LLM__{name}__1__BASE_URL"), mock.base_url());
    /// #     env.insert(format!("LLM__{name}__1__API_KEY"), "sk-test".into());
    /// #     env.insert(format!("LLM__{name}__1__MODEL"), "m".into());
    /// # }
    /// # let settings = polygateway::config::Settings::from_map(&env).unwrap();
    /// # let gw = polygateway::Gateway::from_settings(settings, "LLM").await.unwrap();
    /// # for _ in 0..4 {
    /// #     gw.chat(vec![polygateway::Message::user("hi")]).await.unwrap();
    /// # }
    /// # let sources = gw.sources("LLM").await.unwrap();
    /// # gw.shutdown().await;
    /// // `sources`: a round-robin scope after four calls; `badkey_1` answered its one attempt with 401
    /// // and its breaker opened, `healthya_1` served all four calls.
    /// let report = SoakReport {
    ///     calls: 4, succeeded: 4, failures: BTreeMap::new(), sources,
    ///     healthy: vec!["healthya".to_string()],
    ///     p50_ms: 1.0, p99_ms: 2.0, calls_per_s: 100.0, leases_held: 0,
    ///     telemetry_rows_expected: 0, telemetry_rows_written: 0,
    /// };
    /// let share = report.bad_source_attempt_share();
    /// // One attempt of five went to the bad source; healthy sources are not listed.
    /// assert_eq!(share, BTreeMap::from([("badkey_1".to_string(), 0.2)]));
    /// # }
    /// ```
    pub fn bad_source_attempt_share(&self) -> BTreeMap<String, f64> {
        let total = self.attempts_total() as f64;
        self.sources
            .iter()
            .filter(|s| !self.is_healthy(s))
            .map(|s| (s.name.clone(), s.attempts as f64 / total))
            .collect()
    }

    /// Breaker openings (epochs) on the healthy sources: false opens.
    ///
    /// ```
    /// use polygateway_testkit::soak::SoakReport;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// # use std::collections::BTreeMap;
    /// # use polygateway_testkit::{Behaviour, MockUpstream};
    /// # let good = MockUpstream::start(Behaviour::healthy()).await;
    /// # let bad = MockUpstream::start(Behaviour::Unauthorized).await;
    /// # let mut env: BTreeMap<String, String> = [
    /// #     ("PGW_LIMITER_BACKEND", "memory"), ("PGW_BREAKER_BACKEND", "memory"),
    /// #     ("PGW_TELEMETRY_BACKEND", "none"), ("LLM__SELECTOR", "round_robin"),
    /// # ].into_iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    /// # for (name, mock) in [("HEALTHYA", &good), ("BADKEY", &bad)] {
    /// #     env.insert(format!("LLM__{name}__1__BASE_URL"), mock.base_url());
    /// #     env.insert(format!("LLM__{name}__1__API_KEY"), "sk-test".into());
    /// #     env.insert(format!("LLM__{name}__1__MODEL"), "m".into());
    /// # }
    /// # let settings = polygateway::config::Settings::from_map(&env).unwrap();
    /// # let gw = polygateway::Gateway::from_settings(settings, "LLM").await.unwrap();
    /// # for _ in 0..4 {
    /// #     gw.chat(vec![polygateway::Message::user("hi")]).await.unwrap();
    /// # }
    /// # let sources = gw.sources("LLM").await.unwrap();
    /// # gw.shutdown().await;
    /// // `sources`: a round-robin scope after four calls; `badkey_1` answered its one attempt with 401
    /// // and its breaker opened, `healthya_1` served all four calls.
    /// let report = SoakReport {
    ///     calls: 4, succeeded: 4, failures: BTreeMap::new(), sources,
    ///     healthy: vec!["healthya".to_string()],
    ///     p50_ms: 1.0, p99_ms: 2.0, calls_per_s: 100.0, leases_held: 0,
    ///     telemetry_rows_expected: 0, telemetry_rows_written: 0,
    /// };
    /// let opens: u64 = report.sources.iter().map(|s| s.epoch).sum();
    /// assert_eq!(opens, 1, "the bad source was opened");
    /// assert_eq!(report.false_opens_healthy(), 0);
    /// # }
    /// ```
    pub fn false_opens_healthy(&self) -> u64 {
        self.sources
            .iter()
            .filter(|s| self.is_healthy(s))
            .map(|s| s.epoch)
            .sum()
    }

    /// Every pacer slot, lease and probe is back.
    ///
    /// ```
    /// use polygateway_testkit::soak::SoakReport;
    /// # use std::collections::BTreeMap;
    /// # let report = |calls: usize, succeeded: usize, leases_held: u64| SoakReport {
    /// #     calls, succeeded, failures: BTreeMap::new(), sources: Vec::new(), healthy: Vec::new(),
    /// #     p50_ms: 12.0, p99_ms: 80.0, calls_per_s: 400.0, leases_held,
    /// #     telemetry_rows_expected: 0, telemetry_rows_written: 0,
    /// # };
    /// // `report(calls, succeeded, leases_held)` builds a report by hand, with no sources.
    /// assert!(report(100, 100, 0).invariants_ok());
    /// // A limiter lease that was never given back is a leak.
    /// assert!(!report(100, 100, 1).invariants_ok());
    /// ```
    pub fn invariants_ok(&self) -> bool {
        self.leases_held == 0
            && self
                .sources
                .iter()
                .all(|s| s.in_flight == 0 && !s.probe_held)
    }

    fn is_healthy(&self, s: &SourceSnapshot) -> bool {
        self.healthy.iter().any(|h| s.name == format!("{h}_1"))
    }

    /// A human-readable table of the sources.
    ///
    /// ```
    /// use polygateway_testkit::soak::SoakReport;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// # use std::collections::BTreeMap;
    /// # use polygateway_testkit::{Behaviour, MockUpstream};
    /// # let good = MockUpstream::start(Behaviour::healthy()).await;
    /// # let bad = MockUpstream::start(Behaviour::Unauthorized).await;
    /// # let mut env: BTreeMap<String, String> = [
    /// #     ("PGW_LIMITER_BACKEND", "memory"), ("PGW_BREAKER_BACKEND", "memory"),
    /// #     ("PGW_TELEMETRY_BACKEND", "none"), ("LLM__SELECTOR", "round_robin"),
    /// # ].into_iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    /// # for (name, mock) in [("HEALTHYA", &good), ("BADKEY", &bad)] {
    /// #     env.insert(format!("LLM__{name}__1__BASE_URL"), mock.base_url());
    /// #     env.insert(format!("LLM__{name}__1__API_KEY"), "sk-test".into());
    /// #     env.insert(format!("LLM__{name}__1__MODEL"), "m".into());
    /// # }
    /// # let settings = polygateway::config::Settings::from_map(&env).unwrap();
    /// # let gw = polygateway::Gateway::from_settings(settings, "LLM").await.unwrap();
    /// # for _ in 0..4 {
    /// #     gw.chat(vec![polygateway::Message::user("hi")]).await.unwrap();
    /// # }
    /// # let sources = gw.sources("LLM").await.unwrap();
    /// # gw.shutdown().await;
    /// // `sources`: a round-robin scope after four calls; `badkey_1` answered its one attempt with 401
    /// // and its breaker opened, `healthya_1` served all four calls.
    /// let report = SoakReport {
    ///     calls: 4, succeeded: 4, failures: BTreeMap::new(), sources,
    ///     healthy: vec!["healthya".to_string()],
    ///     p50_ms: 1.0, p99_ms: 2.0, calls_per_s: 100.0, leases_held: 0,
    ///     telemetry_rows_expected: 0, telemetry_rows_written: 0,
    /// };
    /// let table = report.table();
    /// let lines: Vec<&str> = table.lines().collect();
    /// assert!(lines[0].starts_with("source"));
    /// assert_eq!(lines.len(), 1 + report.sources.len());
    /// assert!(lines.iter().any(|l| l.starts_with("badkey_1") && l.contains("20.00%")));
    /// # }
    /// ```
    pub fn table(&self) -> String {
        let total = self.attempts_total() as f64;
        let mut out = format!(
            "{:<14} {:>9} {:>7} {:>9} {:>6} {:>6} {:>6}\n",
            "source", "attempts", "share", "successes", "opens", "health", "pacer"
        );
        for s in &self.sources {
            out.push_str(&format!(
                "{:<14} {:>9} {:>6.2}% {:>9} {:>6} {:>6.2} {:>6}\n",
                s.name,
                s.attempts,
                s.attempts as f64 / total * 100.0,
                s.successes,
                s.epoch,
                s.health,
                s.pacer_limit
            ));
        }
        out
    }

    /// The summary as one JSON object.
    ///
    /// ```
    /// use polygateway_testkit::soak::SoakReport;
    /// # use std::collections::BTreeMap;
    /// # let report = |calls: usize, succeeded: usize, leases_held: u64| SoakReport {
    /// #     calls, succeeded, failures: BTreeMap::new(), sources: Vec::new(), healthy: Vec::new(),
    /// #     p50_ms: 12.0, p99_ms: 80.0, calls_per_s: 400.0, leases_held,
    /// #     telemetry_rows_expected: 0, telemetry_rows_written: 0,
    /// # };
    /// // `report(calls, succeeded, leases_held)` builds a report by hand.
    /// let json = report(8, 6, 0).to_json();
    /// assert_eq!(json["success_rate"], 0.75);
    /// assert_eq!(json["invariants_ok"], true);
    /// assert_eq!(json["p99_ms"], 80.0);
    /// ```
    pub fn to_json(&self) -> Value {
        json!({
            "calls": self.calls,
            "succeeded": self.succeeded,
            "success_rate": self.success_rate(),
            "failures": self.failures,
            "bad_source_attempt_share": self.bad_source_attempt_share(),
            "breaker_opens": self.sources.iter().map(|s| (s.name.clone(), s.epoch)).collect::<BTreeMap<_, _>>(),
            "false_opens_healthy": self.false_opens_healthy(),
            "p50_ms": self.p50_ms,
            "p99_ms": self.p99_ms,
            "calls_per_s": self.calls_per_s,
            "invariants_ok": self.invariants_ok(),
            "telemetry_rows_expected": self.telemetry_rows_expected,
            "telemetry_rows_written": self.telemetry_rows_written,
        })
    }
}

/// Run a soak. Fails only if the runtime cannot be built.
///
/// ```no_run
/// use polygateway_testkit::soak::{run_soak, SoakConfig};
/// # async fn demo() -> Result<(), polygateway::GatewayError> {
/// let report = run_soak(&SoakConfig { calls: 8000, concurrency: 64, seed: 42, telemetry_sqlite: None }).await?;
/// println!("{}", report.table());
/// // The soak's targets.
/// assert!(report.success_rate() >= 0.99, "{:?}", report.failures);
/// assert_eq!(report.false_opens_healthy(), 0);
/// assert!(report.invariants_ok());
/// assert!(report.bad_source_attempt_share().values().all(|&share| share < 0.05));
/// # Ok(()) }
/// ```
pub async fn run_soak(config: &SoakConfig) -> Result<SoakReport, GatewayError> {
    let mix = fault_mix(config.seed);
    let mut env: BTreeMap<String, String> = [
        ("PGW_LIMITER_BACKEND", "memory"),
        ("PGW_BREAKER_BACKEND", "memory"),
        ("PGW_CACHE_BACKEND", "none"),
        ("LLM__RETRY__MAX_ATTEMPTS", "4"),
        ("LLM__RETRY__BACKOFF_BASE_S", "0.02"),
        ("LLM__RETRY__BACKOFF_MAX_S", "0.5"),
        ("LLM__BREAKER__FAIL_THRESHOLD", "5"),
        ("LLM__BREAKER__COOLDOWN_S", "5"),
        ("LLM__BACKPRESSURE__STALL_WINDOW_S", "60"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    match &config.telemetry_sqlite {
        Some(path) => {
            env.insert("PGW_TELEMETRY_BACKEND".into(), "sqlite".into());
            env.insert(
                "PGW_TELEMETRY_SQLITE_PATH".into(),
                path.display().to_string(),
            );
        }
        None => {
            env.insert("PGW_TELEMETRY_BACKEND".into(), "none".into());
        }
    }
    let (mut mocks, mut claude_mocks, mut gemini_mocks) = (Vec::new(), Vec::new(), Vec::new());
    for source in &mix {
        let p = format!("LLM__{}__1", source.name.to_uppercase());
        match &source.upstream {
            Upstream::OpenAi(behaviour) => {
                let mock = MockUpstream::start(behaviour.clone()).await;
                env.insert(format!("{p}__BASE_URL"), mock.base_url());
                env.insert(format!("{p}__API_KEY"), format!("sk-soak-{}", source.name));
                mocks.push(mock);
            }
            Upstream::Anthropic(fault) => {
                let mock = MockAnthropic::start().await;
                mock.set_fault(fault.clone());
                env.insert(format!("{p}__BASE_URL"), mock.base_url());
                env.insert(format!("{p}__API_KEY"), MOCK_ANTHROPIC_KEY.into());
                env.insert(format!("{p}__DIALECT"), "anthropic".into());
                claude_mocks.push(mock);
            }
            Upstream::Gemini => {
                let mock = MockGemini::start().await;
                env.insert(format!("{p}__BASE_URL"), mock.base_url());
                env.insert(format!("{p}__API_KEY"), MOCK_GEMINI_KEY.into());
                env.insert(format!("{p}__DIALECT"), "gemini".into());
                gemini_mocks.push(mock);
            }
        }
        env.insert(format!("{p}__MODEL"), format!("mock-{}", source.name));
        env.insert(format!("{p}__TIMEOUT_S"), "10".into());
        env.insert(format!("{p}__TTFT_TIMEOUT_S"), "1".into());
        env.insert(format!("{p}__INTER_TOKEN_TIMEOUT_S"), "0.5".into());
    }
    let settings = Settings::from_map(&env).map_err(GatewayError::Config)?;
    let gw = Gateway::from_settings(settings, "LLM").await?;

    let started = Instant::now();
    let outcomes: Vec<(Result<(), String>, f64)> = futures::stream::iter(0..config.calls)
        .map(|i| {
            let gw = gw.clone();
            async move {
                let t = Instant::now();
                let outcome = gw
                    .chat_with(
                        vec![Message::user(format!("soak call {i}"))],
                        CallOptions::new().session_id("soak"),
                    )
                    .await
                    .map(|_| ())
                    .map_err(|e| match e.unavailable() {
                        Some(u) => format!("{}:{}", e.class_name(), u.reason.as_str()),
                        None => e.class_name().to_string(),
                    });
                (outcome, t.elapsed().as_secs_f64() * 1e3)
            }
        })
        .buffer_unordered(config.concurrency.max(1))
        .collect()
        .await;
    let elapsed = started.elapsed().as_secs_f64();

    let mut failures = BTreeMap::new();
    for (outcome, _) in &outcomes {
        if let Err(kind) = outcome {
            *failures.entry(kind.clone()).or_default() += 1;
        }
    }
    let mut ms: Vec<f64> = outcomes.iter().map(|(_, ms)| *ms).collect();
    ms.sort_by(|a, b| a.total_cmp(b));
    let pct = |q: f64| {
        ms.get(((ms.len().max(1) - 1) as f64 * q).round() as usize)
            .copied()
            .unwrap_or(0.0)
    };

    // Bookkeeping casts are asynchronous: give them a bounded moment to land.
    let deadline = Instant::now() + Duration::from_secs(3);
    let (mut sources, mut leases_held) = (Vec::new(), u64::MAX);
    while Instant::now() < deadline {
        sources = gw.sources("LLM").await?;
        leases_held = gw.leases_held("LLM").await?;
        if leases_held == 0 && sources.iter().all(|s| s.in_flight == 0 && !s.probe_held) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let telemetry_rows_expected = gw.telemetry_rows_accepted();
    gw.shutdown().await;
    let telemetry_rows_written = config
        .telemetry_sqlite
        .as_ref()
        .map_or(0, |path| count_rows(path));
    for mock in mocks {
        mock.shutdown().await;
    }
    drop((claude_mocks, gemini_mocks));
    Ok(SoakReport {
        calls: config.calls,
        succeeded: outcomes.iter().filter(|(o, _)| o.is_ok()).count(),
        failures,
        sources,
        healthy: mix
            .iter()
            .filter(|m| m.healthy)
            .map(|m| m.name.to_string())
            .collect(),
        p50_ms: pct(0.5),
        p99_ms: pct(0.99),
        calls_per_s: config.calls as f64 / elapsed.max(f64::EPSILON),
        leases_held,
        telemetry_rows_expected,
        telemetry_rows_written,
    })
}

fn count_rows(path: &std::path::Path) -> u64 {
    rusqlite::Connection::open(path)
        .and_then(|c| c.query_row("SELECT COUNT(*) FROM llm_calls", [], |r| r.get::<_, i64>(0)))
        .map(|n| n as u64)
        .unwrap_or(0)
}
