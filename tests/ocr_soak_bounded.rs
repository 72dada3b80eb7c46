//! A bounded OCR fault-pool soak: two gateways (separate runtimes and Redis clients) share one
//! real Redis for limits and breakers. `examples/ocr_soak.rs` runs the same engine in separate OS
//! processes.

use polygateway::config::Secret;
use polygateway::redis::{RedisBreakers, RedisGate, RedisGovernance};
use polygateway::GatewayBuilder;
use polygateway_testkit::ocr_soak::{run_worker, verdict, OcrPool, WorkerConfig};

fn redis_url() -> Option<String> {
    let url = "redis://127.0.0.1:6379".to_string();
    if std::net::TcpStream::connect("127.0.0.1:6379").is_ok() {
        return Some(url);
    }
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("Redis is not reachable on 127.0.0.1:6379 and CI=true: the OCR soak needs it");
    }
    eprintln!("\n!!! SKIPPED: Redis is not reachable on 127.0.0.1:6379 — OCR soak not run !!!\n");
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateways_over_one_redis_meet_the_ocr_soak_targets() {
    let Some(redis_url) = redis_url() else { return };
    let pool = OcrPool::start(5).await;
    let dir = tempfile::tempdir().unwrap();
    let key_prefix = format!("pgwtest-ocrsoak-{}", uuid::Uuid::new_v4());
    let workers: Vec<_> = (0..2)
        .map(|worker| WorkerConfig {
            worker,
            calls: 300,
            concurrency: 16,
            redis_url: redis_url.clone(),
            key_prefix: key_prefix.clone(),
            sources: pool.sources.clone(),
            telemetry_sqlite: dir.path().join(format!("w{worker}.sqlite")),
        })
        .collect();
    let runs = workers
        .iter()
        .map(|config| run_worker(config, GatewayBuilder::redis_key_prefix));
    let reports: Vec<_> = futures::future::join_all(runs)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    // What the workers left in Redis, read through the same governance they shared.
    let redis = RedisGovernance::connect(&Secret::new(&redis_url), &key_prefix)
        .await
        .unwrap();
    let gate = RedisGate::new(redis.clone());
    let breakers = RedisBreakers::new(redis.clone());
    let v = verdict(&reports, &gate, &breakers, &pool.sources)
        .await
        .unwrap();
    redis.close().await;
    println!("{}", serde_json::to_string(&v).unwrap());
    assert!(v.invariants_ok(), "{:?}", v.invariants);
    assert!(v.success_rate >= 0.997, "{:?}", v.failures);
}
