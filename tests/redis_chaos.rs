//! Fault behaviour of the Redis governance backends: an unreachable server and a server that dies
//! and comes back. Every call must answer within a bound — a `BackendError` while Redis is down
//! (the runtime fails closed on it), normal answers again after it returns, without rebuilding
//! the client.
//!
//! The restart test never touches the shared Redis on 6379: it runs a PRIVATE `redis-server` on a
//! free port as a child process. Without a `redis-server` binary: under `CI=true` the test fails,
//! otherwise it prints a loud SKIP.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fred::prelude::{Builder, ClientLike, Config, HashesInterface};
use fred::types::{ClusterHash, CustomCommand};
use polygateway::actors::{GateBackend, GateDecision, GateRequest, Lease, Limits};
use polygateway::config::Secret;
use polygateway::redis::{RedisGate, RedisGovernance, RedisOptions};

/// Upper bound of any single call while Redis is down (command timeout 400 ms + slack).
const DOWN_BOUND: Duration = Duration::from_millis(1_500);

fn options() -> RedisOptions {
    RedisOptions {
        command_timeout: Duration::from_millis(400),
        connect_timeout: Duration::from_secs(2),
        pool_size: 2,
        reconnect_min_delay: Duration::from_millis(50),
        reconnect_max_delay: Duration::from_millis(300),
    }
}

fn request(i: usize) -> GateRequest {
    GateRequest {
        scope: "LLM".into(),
        source: "a".into(),
        global: Limits {
            max_concurrency: 50,
            rpm: 0,
            tpm: 0,
        },
        per_source: Limits {
            max_concurrency: 50,
            rpm: 0,
            tpm: 0,
        },
        est_tokens: 1,
        lease_id: Arc::from(format!("lease-{i}-{}", uuid::Uuid::new_v4())),
        lease_ttl: Duration::from_secs(60),
    }
}

#[tokio::test]
async fn refused_port_fails_within_bound() {
    let url = Secret::new("redis://127.0.0.1:1");
    let started = Instant::now();
    let err = RedisGovernance::connect_with(&url, "chaos", options())
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert!(err.message.contains("redis"), "{}", err.message);
}

/// A private redis-server child, killed on drop.
struct PrivateRedis {
    child: Child,
    port: u16,
}

impl PrivateRedis {
    fn start(port: u16) -> std::io::Result<Self> {
        let child = Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .args(["--daemonize", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        Ok(Self { child, port })
    }

    /// Wait until the port accepts connections (bounded).
    async fn ready(&self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if tokio::net::TcpStream::connect(("127.0.0.1", self.port))
                .await
                .is_ok()
            {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        self.kill();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("port")
}

/// A private redis-server on a free port, up and answering; `None` (after a loud skip line) when
/// it cannot start outside CI. Under `CI=true` a missing redis-server fails the test.
async fn private_redis(test: &str) -> Option<(u16, PrivateRedis)> {
    let port = free_port();
    let server = match PrivateRedis::start(port) {
        Ok(s) => s,
        Err(e) if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("redis-server needed under CI=true: {e}")
        }
        Err(e) => {
            eprintln!("\n!!!!! SKIP: cannot start a private redis-server ({e}); {test} did NOT run !!!!!\n");
            return None;
        }
    };
    assert!(server.ready().await, "private redis-server did not start");
    Some((port, server))
}

async fn admit(gate: &RedisGate, i: usize) -> Result<Lease, String> {
    match gate.admit(&request(i)).await {
        Ok(GateDecision::Admitted(lease)) => Ok(lease),
        Ok(other) => Err(format!("unexpected refusal {other:?}")),
        Err(e) => Err(e.message),
    }
}

#[tokio::test]
async fn killed_and_restarted_server_fails_closed_then_recovers() {
    let Some((port, mut server)) = private_redis("chaos test").await else {
        return;
    };
    let url = Secret::new(format!("redis://127.0.0.1:{port}"));
    let redis = RedisGovernance::connect_with(&url, "chaos", options())
        .await
        .expect("connect");
    let gate = RedisGate::new(redis.clone());

    // Up: admissions and releases work.
    let mut leases = Vec::new();
    for i in 0..20 {
        leases.push(admit(&gate, i).await.expect("admit while up"));
    }
    assert_eq!(gate.leases_held("LLM").await.unwrap(), 20);

    // Down: every call answers BackendError within the bound (fail closed, never hang).
    server.kill();
    for i in 0..3 {
        let started = Instant::now();
        let outcome = admit(&gate, 100 + i).await;
        let took = started.elapsed();
        assert!(
            outcome.is_err(),
            "admission must fail closed while Redis is down"
        );
        assert!(took < DOWN_BOUND, "call {i} took {took:?}");
        eprintln!("admission {i} while down: {took:?}");
    }
    let started = Instant::now();
    assert!(gate.release(&leases[0]).await.is_err());
    assert!(gate.leases_held("LLM").await.is_err());
    assert!(started.elapsed() < DOWN_BOUND * 2);

    // Back on the same port (empty: no scripts, no keys): the same client reconnects and
    // reloads the scripts on NOSCRIPT.
    let server = PrivateRedis::start(port).expect("restart redis-server");
    assert!(server.ready().await, "restarted redis-server did not start");
    let deadline = Instant::now() + Duration::from_secs(10);
    let restarted = Instant::now();
    let lease = loop {
        match admit(&gate, 1000).await {
            Ok(lease) => break lease,
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(e) => panic!("no recovery within 10 s: {e}"),
        }
    };
    eprintln!("recovered {:?} after the restart", restarted.elapsed());
    let mut fresh = vec![lease];
    for i in 0..10 {
        fresh.push(admit(&gate, 2000 + i).await.expect("admit after recovery"));
    }
    // The restarted server lost the old leases; the new ones are all that is held.
    assert_eq!(gate.leases_held("LLM").await.unwrap(), 11);
    for lease in fresh.iter().chain(leases.iter()) {
        gate.release(lease).await.expect("release after recovery");
    }
    assert_eq!(gate.leases_held("LLM").await.unwrap(), 0);
    redis.close().await;
    drop(server);
}

/// An admission that times out on the client but still runs on the server (here: the server is
/// paused, then resumes) must not leave a slot held by nobody: the gate gives the lease back on
/// the same connection, behind the late script.
#[tokio::test]
async fn timed_out_admission_that_ran_late_is_given_back() {
    let Some((port, server)) = private_redis("chaos test").await else {
        return;
    };
    let url = format!("redis://127.0.0.1:{port}");
    let redis = RedisGovernance::connect_with(&Secret::new(url.clone()), "late", options())
        .await
        .expect("connect");
    let gate = RedisGate::new(redis.clone());
    assert_eq!(gate.leases_held("LLM").await.unwrap(), 0);

    // Writes (and scripts) pause for 900 ms: the admission outlives its 400 ms timeout.
    let raw = Builder::from_config(Config::from_url(&url).expect("url"))
        .build()
        .expect("client");
    raw.init().await.expect("raw connect");
    let pause = CustomCommand::new_static("CLIENT", ClusterHash::Random, false);
    let _: String = raw
        .custom(pause, vec!["PAUSE", "900", "WRITE"])
        .await
        .expect("CLIENT PAUSE");
    let req = request(0);
    let started = Instant::now();
    assert!(
        gate.admit(&req).await.is_err(),
        "admission must time out while paused"
    );
    assert!(started.elapsed() < DOWN_BOUND);

    tokio::time::sleep(Duration::from_millis(1_200)).await;
    // The script did run after the pause (its record exists) and the lease was given back.
    let record = format!("late:{{LLM}}:rec:{}", req.lease_id);
    let released: Option<String> = raw.hget(&record, "released").await.expect("HGET");
    assert_eq!(
        released.as_deref(),
        Some("1"),
        "late admission ran and was released"
    );
    assert_eq!(gate.leases_held("LLM").await.unwrap(), 0);
    raw.quit().await.ok();
    redis.close().await;
    drop(server);
}

/// The whole runtime over a Redis that dies and comes back: calls fail closed with
/// `GovernanceBackendError` (never ungoverned, never hanging), then the same gateway serves again
/// without a restart, and no lease is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runtime_fails_closed_while_redis_is_down_and_recovers_by_itself() {
    use polygateway::testkit::mock_llm::{Behaviour, MockUpstream};
    use polygateway::{Gateway, GatewayError, Message, UnavailableReason};

    let Some((port, mut server)) = private_redis("runtime chaos test").await else {
        return;
    };
    let mock = MockUpstream::start(Behaviour::healthy()).await;
    let env: std::collections::BTreeMap<String, String> = [
        ("PGW_LIMITER_BACKEND", "redis".to_string()),
        ("PGW_BREAKER_BACKEND", "redis".to_string()),
        ("PGW_TELEMETRY_BACKEND", "none".to_string()),
        ("REDIS_URL", format!("redis://127.0.0.1:{port}")),
        ("LLM__GLOBAL__MAX_CONCURRENCY", "8".to_string()),
        ("LLM__OPENAI__1__BASE_URL", mock.base_url()),
        ("LLM__OPENAI__1__API_KEY", "sk-chaos".to_string()),
        ("LLM__OPENAI__1__MODEL", "m".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let settings = polygateway::config::Settings::from_map(&env).unwrap();
    let gw = Gateway::from_settings(settings, "LLM").await.unwrap();
    let call = || async {
        tokio::time::timeout(Duration::from_secs(8), gw.chat(vec![Message::user("x")]))
            .await
            .expect("no call hangs past its bound")
    };
    for _ in 0..10 {
        call().await.unwrap();
    }

    server.kill();
    let down_started = Instant::now();
    let sent_before = mock.counts().chat;
    for _ in 0..3 {
        let err = call().await.unwrap_err();
        let u = err
            .unavailable()
            .unwrap_or_else(|| panic!("fail closed, got {err}"));
        assert_eq!(u.reason, UnavailableReason::GovernanceBackendDown);
        assert_eq!(u.retry_after_s, 5.0);
        assert!(matches!(err, GatewayError::Unavailable(_)));
    }
    assert_eq!(
        mock.counts().chat,
        sent_before,
        "nothing went through ungoverned"
    );
    assert!(down_started.elapsed() < Duration::from_secs(30));

    let mut server = PrivateRedis::start(port).unwrap();
    assert!(server.ready().await);
    let back = Instant::now();
    let mut recovered = false;
    while back.elapsed() < Duration::from_secs(10) {
        if call().await.is_ok() {
            recovered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        recovered,
        "the same gateway serves again once Redis is back"
    );
    println!("recovered {:?} after Redis came back", back.elapsed());
    for _ in 0..10 {
        call().await.unwrap();
    }
    let mut leases = u64::MAX;
    for _ in 0..50 {
        leases = gw.leases_held("LLM").await.unwrap();
        if leases == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(leases, 0, "no lease leaked after recovery");
    gw.shutdown().await;
    server.kill();
}
