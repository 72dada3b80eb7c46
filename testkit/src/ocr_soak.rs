//! The OCR fault-pool soak (docs/behaviour.md §11): workers — each its own gateway, usually its own OS
//! process — share one Redis for limits and breakers and run OCR calls against a pool of mock
//! MonkeyOCR sources, some of them faulty. Used by `examples/ocr_soak.rs` (several processes) and
//! by a bounded test (two gateways in one process).
//!
//! The pool: three healthy sources, one that fails 30 % of requests (500 detail, 429, 404 on the
//! ZIP download), one black hole and one slower than its timeout. Every 25th call is cancelled
//! at a random point to prove cancellation releases everything across processes.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde::{Deserialize, Serialize};

use super::mock_ocr::{MockOcr, OcrFault};
use polygateway::config::Settings;
use polygateway::ports::{BreakerBackend, GateBackend};
use polygateway::{CallOptions, Gateway, GatewayBuilder, GatewayError};

/// The scope every worker uses.
///
/// ```
/// use polygateway::config::{scope_kind_for, ScopeKind};
/// use polygateway_testkit::ocr_soak::SCOPE;
/// // Its name makes it an OCR scope; the pool's sources are configured as `OCR__{NAME}__1__…`.
/// assert_eq!(scope_kind_for(SCOPE), ScopeKind::Ocr);
/// ```
pub const SCOPE: &str = "OCR";

/// A PNG header: enough for the local check and the mock.
const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR soak page";

/// One source of the pool: name (provider), base URL, whether it is healthy.
///
/// ```
/// use polygateway_testkit::ocr_soak::PoolSource;
/// let source = PoolSource { name: "healthya".into(), base_url: "http://127.0.0.1:9".into(), healthy: true };
/// // It travels to worker processes as JSON.
/// let json = serde_json::to_string(&source).unwrap();
/// let back: PoolSource = serde_json::from_str(&json).unwrap();
/// assert_eq!((back.name.as_str(), back.healthy), ("healthya", true));
/// ```
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PoolSource {
    /// Provider name (`{SCOPE}__{NAME}__1__…`).
    pub name: String,
    /// Base URL of its mock.
    pub base_url: String,
    /// A healthy source must never be opened.
    pub healthy: bool,
}

/// The running mock pool (owned by the parent process).
///
/// ```
/// use polygateway_testkit::ocr_soak::OcrPool;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let pool = OcrPool::start(7).await;
/// assert_eq!(pool.mocks.len(), pool.sources.len());
/// for (mock, source) in pool.mocks.iter().zip(&pool.sources) {
///     assert_eq!(mock.base_url(), source.base_url);
/// }
/// # }
/// ```
pub struct OcrPool {
    /// The mocks, in the order of [`OcrPool::sources`].
    pub mocks: Vec<MockOcr>,
    /// Their descriptions.
    pub sources: Vec<PoolSource>,
}

impl OcrPool {
    /// Start the fault pool on 127.0.0.1.
    ///
    /// ```
    /// use polygateway_testkit::ocr_soak::OcrPool;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let pool = OcrPool::start(7).await;
    /// let healthy: Vec<&str> =
    ///     pool.sources.iter().filter(|s| s.healthy).map(|s| s.name.as_str()).collect();
    /// assert_eq!(healthy, ["healthya", "healthyb", "healthyc"]);
    /// assert_eq!(pool.sources.len(), 6, "plus flaky, black hole and slow");
    /// assert!(pool.sources.iter().all(|s| s.base_url.starts_with("http://127.0.0.1:")));
    /// # }
    /// ```
    pub async fn start(seed: u64) -> Self {
        let pool = [
            ("healthya", OcrFault::None, true),
            ("healthyb", OcrFault::None, true),
            ("healthyc", OcrFault::None, true),
            (
                "flaky",
                OcrFault::Mix {
                    failure_rate: 0.3,
                    faults: vec![
                        OcrFault::Detail500,
                        OcrFault::RateLimited429,
                        OcrFault::Download404,
                    ],
                    seed,
                },
                false,
            ),
            ("blackhole", OcrFault::BlackHole, false),
            ("slow", OcrFault::Slow(Duration::from_secs(4)), false),
        ];
        let mut mocks = Vec::new();
        let mut sources = Vec::new();
        for (name, fault, healthy) in pool {
            let mock = MockOcr::start(fault).await;
            sources.push(PoolSource {
                name: name.into(),
                base_url: mock.base_url(),
                healthy,
            });
            mocks.push(mock);
        }
        Self { mocks, sources }
    }
}

/// What one worker runs.
///
/// ```
/// use polygateway_testkit::ocr_soak::{PoolSource, WorkerConfig};
/// # let pool_sources: Vec<PoolSource> = Vec::new();
/// let config = WorkerConfig {
///     worker: 1,
///     calls: 500,
///     concurrency: 16,
///     redis_url: "redis://127.0.0.1:6379".into(),
///     key_prefix: "pgw-ocrsoak-1234".into(),
///     sources: pool_sources,
///     telemetry_sqlite: std::env::temp_dir().join("worker-1.sqlite"),
/// };
/// // A worker process receives its config as JSON.
/// let json = serde_json::to_string(&config).unwrap();
/// let received: WorkerConfig = serde_json::from_str(&json).unwrap();
/// assert_eq!((received.worker, received.calls), (1, 500));
/// ```
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkerConfig {
    /// Worker number (for seeds and file names).
    pub worker: usize,
    /// Calls this worker makes.
    pub calls: usize,
    /// Calls in flight at once.
    pub concurrency: usize,
    /// The shared Redis.
    pub redis_url: String,
    /// Key prefix shared by all workers of one run.
    pub key_prefix: String,
    /// The pool.
    pub sources: Vec<PoolSource>,
    /// This worker's telemetry file.
    pub telemetry_sqlite: PathBuf,
}

/// What one worker saw.
///
/// ```
/// use polygateway_testkit::ocr_soak::WorkerReport;
/// let mut report = WorkerReport { calls: 50, cancelled: 2, succeeded: 47, ..Default::default() };
/// report.failures.insert("ResultInvalid".into(), 1);
/// // Every call is accounted for exactly once.
/// let failed: u64 = report.failures.values().sum();
/// assert_eq!(report.succeeded + report.cancelled + failed as usize, report.calls);
/// // The worker prints it as its last stdout line; the parent parses it.
/// let line = serde_json::to_string(&report).unwrap();
/// let parsed: WorkerReport = serde_json::from_str(&line).unwrap();
/// assert_eq!(parsed.failures["ResultInvalid"], 1);
/// ```
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct WorkerReport {
    /// Calls made, cancelled ones included.
    pub calls: usize,
    /// Calls cancelled on purpose.
    pub cancelled: usize,
    /// Successful calls.
    pub succeeded: usize,
    /// Failed calls by class and reason.
    pub failures: BTreeMap<String, u64>,
    /// Pacer slots still held after the run (must be 0).
    pub in_flight_after: u32,
    /// Attempts per source.
    pub attempts: BTreeMap<String, u64>,
    /// Telemetry rows accepted.
    pub telemetry_rows_expected: u64,
    /// Telemetry rows found in the file after shutdown.
    pub telemetry_rows_written: u64,
}

fn settings(config: &WorkerConfig) -> Result<Settings, GatewayError> {
    let mut env: BTreeMap<String, String> = [
        ("PGW_LIMITER_BACKEND", "redis"),
        ("PGW_BREAKER_BACKEND", "redis"),
        ("PGW_TELEMETRY_BACKEND", "sqlite"),
        ("OCR__GLOBAL__MAX_CONCURRENCY", "64"),
        ("OCR__RETRY__MAX_ATTEMPTS", "4"),
        ("OCR__RETRY__BACKOFF_BASE_S", "0.02"),
        ("OCR__RETRY__BACKOFF_MAX_S", "0.2"),
        ("OCR__BREAKER__FAIL_THRESHOLD", "3"),
        ("OCR__BREAKER__COOLDOWN_S", "5"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    env.insert("REDIS_URL".into(), config.redis_url.clone());
    env.insert(
        "PGW_TELEMETRY_SQLITE_PATH".into(),
        config.telemetry_sqlite.display().to_string(),
    );
    for source in &config.sources {
        let p = format!("OCR__{}__1", source.name.to_uppercase());
        env.insert(format!("{p}__BASE_URL"), source.base_url.clone());
        env.insert(format!("{p}__MODEL"), "monkeyocr".into());
        env.insert(format!("{p}__TIMEOUT_S"), "2".into());
    }
    Settings::from_map(&env).map_err(GatewayError::Config)
}

/// Run one worker: its own gateway over the shared Redis, its keys under `config.key_prefix`.
/// `key_prefix` is `GatewayBuilder::redis_key_prefix`, passed in by the caller: that method exists
/// only with `polygateway`'s `redis` feature, which this crate does not turn on (it would turn it
/// on for every test build of a service that uses the kit).
///
/// ```no_run
/// use polygateway::GatewayBuilder;
/// use polygateway_testkit::ocr_soak::{run_worker, OcrPool, WorkerConfig};
/// # async fn demo() -> Result<(), polygateway::GatewayError> {
/// let pool = OcrPool::start(7).await;
/// let dir = tempfile::tempdir().unwrap();
/// let config = WorkerConfig {
///     worker: 0,
///     calls: 300,
///     concurrency: 16,
///     redis_url: "redis://127.0.0.1:6379".into(),
///     key_prefix: "pgw-ocrsoak-demo".into(),
///     sources: pool.sources.clone(),
///     telemetry_sqlite: dir.path().join("worker-0.sqlite"),
/// };
/// # let redis_key_prefix = |builder: GatewayBuilder, _: &str| builder;
/// // With `polygateway`'s `redis` feature: `run_worker(&config, GatewayBuilder::redis_key_prefix)`.
/// let report = run_worker(&config, redis_key_prefix).await?;
/// assert_eq!(report.in_flight_after, 0);
/// assert!(report.cancelled > 0, "every 25th call is cancelled on purpose");
/// # Ok(()) }
/// ```
pub async fn run_worker(
    config: &WorkerConfig,
    key_prefix: impl FnOnce(GatewayBuilder, &str) -> GatewayBuilder,
) -> Result<WorkerReport, GatewayError> {
    let builder = Gateway::builder(settings(config)?).default_scope(SCOPE);
    let gw = key_prefix(builder, &config.key_prefix).build().await?;
    let outcomes: Vec<Option<Result<(), String>>> = futures::stream::iter(0..config.calls)
        .map(|i| {
            let gw = gw.clone();
            async move {
                let handle = gw.ocr_scope(SCOPE).expect("the OCR scope exists");
                let call = async {
                    let result = if i % 2 == 0 {
                        handle
                            .recognize_text(PNG.to_vec(), CallOptions::new())
                            .await
                            .map(|_| ())
                    } else {
                        handle
                            .parse_layout(PNG.to_vec(), CallOptions::new())
                            .await
                            .map(|_| ())
                    };
                    result.map_err(|e| match e.unavailable() {
                        Some(u) => format!("{}:{}", e.class_name(), u.reason.as_str()),
                        None => e.class_name().to_string(),
                    })
                };
                if i % 25 == 24 {
                    // Cancel at a varying point: admission, mid-request, backoff.
                    let budget = Duration::from_millis((i as u64 * 7 + config.worker as u64) % 60);
                    tokio::time::timeout(budget, call).await.ok()
                } else {
                    Some(call.await)
                }
            }
        })
        .buffer_unordered(config.concurrency.max(1))
        .collect()
        .await;

    let mut report = WorkerReport {
        calls: config.calls,
        ..WorkerReport::default()
    };
    for outcome in &outcomes {
        match outcome {
            None => report.cancelled += 1,
            Some(Ok(())) => report.succeeded += 1,
            Some(Err(kind)) => *report.failures.entry(kind.clone()).or_default() += 1,
        }
    }
    // Bookkeeping is asynchronous (Redis releases run in tasks): give it a bounded moment.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let sources = gw.sources(SCOPE).await?;
        report.in_flight_after = sources.iter().map(|s| s.in_flight).sum();
        report.attempts = sources
            .iter()
            .map(|s| (s.name.clone(), s.attempts))
            .collect();
        if report.in_flight_after == 0 || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    report.telemetry_rows_expected = gw.telemetry_rows_accepted();
    gw.shutdown().await;
    report.telemetry_rows_written = rusqlite::Connection::open(&config.telemetry_sqlite)
        .and_then(|c| c.query_row("SELECT COUNT(*) FROM llm_calls", [], |r| r.get::<_, i64>(0)))
        .map_or(0, |n| n as u64);
    Ok(report)
}

/// The run's verdict: the workers' reports plus what Redis holds afterwards.
///
/// ```
/// use polygateway_testkit::ocr_soak::SoakVerdict;
/// # use std::collections::BTreeMap;
/// let verdict = SoakVerdict {
///     calls: 100,
///     cancelled: 4,
///     succeeded: 96,
///     success_rate: 1.0,
///     failures: BTreeMap::new(),
///     attempts: BTreeMap::from([("healthya_1".to_string(), 40)]),
///     breaker_opens: BTreeMap::from([("blackhole_1".to_string(), 1)]),
///     invariants: BTreeMap::from([
///         ("leases_back_to_zero".to_string(), true),
///         ("healthy_sources_never_opened".to_string(), true),
///     ]),
/// };
/// // The example prints it as one JSON object.
/// let json = serde_json::to_value(&verdict).unwrap();
/// assert_eq!(json["breaker_opens"]["blackhole_1"], 1);
/// assert_eq!(json["invariants"]["leases_back_to_zero"], true);
/// ```
#[derive(Debug, Clone, Serialize)]
pub struct SoakVerdict {
    /// Calls over all workers (cancelled ones included).
    pub calls: usize,
    /// Calls cancelled on purpose.
    pub cancelled: usize,
    /// Successful calls.
    pub succeeded: usize,
    /// Success over the calls that were not cancelled (0–1).
    pub success_rate: f64,
    /// Failed calls by class and reason.
    pub failures: BTreeMap<String, u64>,
    /// Attempts per source, summed over workers.
    pub attempts: BTreeMap<String, u64>,
    /// Breaker openings per source (Redis epochs).
    pub breaker_opens: BTreeMap<String, u64>,
    /// Invariant name → holds.
    pub invariants: BTreeMap<String, bool>,
}

impl SoakVerdict {
    /// Every invariant holds.
    ///
    /// ```
    /// use polygateway_testkit::ocr_soak::SoakVerdict;
    /// # use std::collections::BTreeMap;
    /// let verdict = SoakVerdict {
    ///     calls: 100,
    ///     cancelled: 4,
    ///     succeeded: 96,
    ///     success_rate: 1.0,
    ///     failures: BTreeMap::new(),
    ///     attempts: BTreeMap::from([("healthya_1".to_string(), 40)]),
    ///     breaker_opens: BTreeMap::from([("blackhole_1".to_string(), 1)]),
    ///     invariants: BTreeMap::from([
    ///         ("leases_back_to_zero".to_string(), true),
    ///         ("healthy_sources_never_opened".to_string(), true),
    ///     ]),
    /// };
    /// assert!(verdict.invariants_ok());
    /// let mut leaky = verdict.clone();
    /// leaky.invariants.insert("no_dangling_probe".into(), false);
    /// assert!(!leaky.invariants_ok());
    /// ```
    pub fn invariants_ok(&self) -> bool {
        self.invariants.values().all(|ok| *ok)
    }
}

/// Combine worker reports with the shared state left in Redis, read through the shared
/// governance the workers used (`polygateway::redis::{RedisGate, RedisBreakers}` over the run's
/// Redis and key prefix; the caller connects and closes it).
///
/// ```no_run
/// use polygateway::ports::{BreakerBackend, GateBackend};
/// use polygateway::GatewayBuilder;
/// use polygateway_testkit::ocr_soak::{run_worker, verdict, OcrPool, WorkerConfig};
/// # async fn demo(gate: &dyn GateBackend, breakers: &dyn BreakerBackend)
/// #     -> Result<(), polygateway::GatewayError> {
/// let pool = OcrPool::start(7).await;
/// let dir = tempfile::tempdir().unwrap();
/// let configs: Vec<WorkerConfig> = (0..2)
///     .map(|worker| WorkerConfig {
///         worker,
///         calls: 300,
///         concurrency: 16,
///         redis_url: "redis://127.0.0.1:6379".into(),
///         key_prefix: "pgw-ocrsoak-demo".into(),
///         sources: pool.sources.clone(),
///         telemetry_sqlite: dir.path().join(format!("w{worker}.sqlite")),
///     })
///     .collect();
/// # let prefix = |builder: GatewayBuilder, _: &str| builder; // `GatewayBuilder::redis_key_prefix`
/// let runs = configs.iter().map(|config| run_worker(config, prefix));
/// let reports = futures::future::try_join_all(runs).await?;
/// let v = verdict(&reports, gate, breakers, &pool.sources).await?;
/// assert!(v.invariants_ok(), "{:?}", v.invariants);
/// assert!(v.success_rate >= 0.99, "{:?}", v.failures);
/// # Ok(()) }
/// ```
pub async fn verdict(
    reports: &[WorkerReport],
    gate: &dyn GateBackend,
    breakers: &dyn BreakerBackend,
    sources: &[PoolSource],
) -> Result<SoakVerdict, GatewayError> {
    let backend_err = |e: polygateway::ports::BackendError| {
        GatewayError::Config(polygateway::config::ConfigError::Assembly(e.to_string()))
    };
    // Releases are casts handled in tasks: let the last ones land.
    let mut leases = u64::MAX;
    for _ in 0..100 {
        leases = gate.leases_held(SCOPE).await.map_err(backend_err)?;
        if leases == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut breaker_opens = BTreeMap::new();
    let mut probes_held = 0;
    let mut healthy_opens = 0;
    for source in sources {
        let name = format!("{}_1", source.name);
        let snapshot = breakers
            .snapshot(SCOPE, &name, &Default::default())
            .await
            .map_err(backend_err)?;
        probes_held += usize::from(snapshot.probe_held);
        if source.healthy {
            healthy_opens += snapshot.epoch;
        }
        breaker_opens.insert(name, snapshot.epoch);
    }

    let calls: usize = reports.iter().map(|r| r.calls).sum();
    let cancelled: usize = reports.iter().map(|r| r.cancelled).sum();
    let succeeded: usize = reports.iter().map(|r| r.succeeded).sum();
    let mut failures = BTreeMap::new();
    let mut attempts = BTreeMap::new();
    for r in reports {
        for (k, v) in &r.failures {
            *failures.entry(k.clone()).or_default() += v;
        }
        for (k, v) in &r.attempts {
            *attempts.entry(k.clone()).or_default() += v;
        }
    }
    let invariants = BTreeMap::from([
        ("leases_back_to_zero".to_string(), leases == 0),
        ("no_dangling_probe".to_string(), probes_held == 0),
        (
            "in_flight_zero_in_every_process".to_string(),
            reports.iter().all(|r| r.in_flight_after == 0),
        ),
        (
            "cancelled_calls_leaked_nothing".to_string(),
            cancelled > 0 && leases == 0 && reports.iter().all(|r| r.in_flight_after == 0),
        ),
        (
            "every_call_has_telemetry_rows".to_string(),
            reports.iter().all(|r| {
                r.telemetry_rows_written == r.telemetry_rows_expected
                    && r.telemetry_rows_written >= (r.calls - r.cancelled) as u64
            }),
        ),
        (
            "healthy_sources_never_opened".to_string(),
            healthy_opens == 0,
        ),
        (
            "every_call_accounted".to_string(),
            reports.iter().all(|r| {
                r.succeeded + r.cancelled + r.failures.values().sum::<u64>() as usize == r.calls
            }),
        ),
    ]);
    Ok(SoakVerdict {
        calls,
        cancelled,
        succeeded,
        success_rate: succeeded as f64 / (calls - cancelled).max(1) as f64,
        failures,
        attempts,
        breaker_opens,
        invariants,
    })
}
