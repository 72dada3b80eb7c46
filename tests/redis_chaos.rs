//! Fault behaviour of the Redis governance backends: an unreachable server and a server that dies
//! and comes back. Every call must answer within a bound — a `BackendError` while Redis is down
//! (the runtime fails closed on it), normal answers again after it returns, without rebuilding
//! the client.
//!
//! The restart test never touches the shared Redis on 6379: it runs a PRIVATE `redis-server` on a
//! free port as a child process. Without a `redis-server` binary: under `CI=true` the test fails,
//! otherwise it prints a loud SKIP.
//!
//! The failover proofs run the same runtime check against a Redis Cluster
//! (`PGW_TEST_REDIS_CLUSTER_URL`, started by `.ci/redis-cluster.sh`) and behind sentinels
//! (`PGW_TEST_REDIS_SENTINEL_URL`, `.ci/redis-sentinel.sh`): each kills the primary serving the
//! scope, and restarts it (it comes back as a replica) so the setup stays usable. Without the
//! variable: under `CI=true` the test fails, otherwise it prints a loud SKIP.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fred::prelude::{Builder, ClientLike, Config, HashesInterface};
use fred::types::{ClusterHash, CustomCommand};
use polygateway::config::Secret;
use polygateway::ports::{GateBackend, GateDecision, GateRequest, Lease, Limits};
use polygateway::redis::{RedisGate, RedisGovernance, RedisOptions};
use polygateway::{Gateway, GatewayError, Message, UnavailableReason};
use polygateway_testkit::mock_llm::{Behaviour, MockUpstream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

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
        Self::start_with(port, &[])
    }

    /// A server with `extra` arguments (e.g. `--requirepass`).
    fn start_with(port: u16, extra: &[&str]) -> std::io::Result<Self> {
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
            .args(extra)
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

/// A TCP relay to `upstream` that can swallow what clients send (`swallow`) and drop every
/// connection it carries (`cut`): a connection that loses commands, then breaks.
struct Relay {
    port: u16,
    swallow: Arc<AtomicBool>,
    cut: tokio::sync::watch::Sender<u64>,
}

impl Relay {
    async fn start(upstream: u16) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind relay");
        let port = listener.local_addr().expect("relay addr").port();
        let swallow = Arc::new(AtomicBool::new(false));
        let (cut, _) = tokio::sync::watch::channel(0u64);
        let (swallowing, cuts) = (Arc::clone(&swallow), cut.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = tokio::net::TcpStream::connect(("127.0.0.1", upstream)).await
                else {
                    continue;
                };
                let (swallowing, mut cut) = (Arc::clone(&swallowing), cuts.subscribe());
                tokio::spawn(async move {
                    let (mut from_client, mut to_client) = client.into_split();
                    let (mut from_server, mut to_server) = server.into_split();
                    let up = async {
                        let mut buf = vec![0u8; 64 * 1024];
                        loop {
                            let n = from_client.read(&mut buf).await?;
                            if n == 0 {
                                return Ok::<(), std::io::Error>(());
                            }
                            if !swallowing.load(Ordering::SeqCst) {
                                to_server.write_all(&buf[..n]).await?;
                            }
                        }
                    };
                    tokio::select! {
                        _ = up => {}
                        _ = tokio::io::copy(&mut from_server, &mut to_client) => {}
                        _ = cut.changed() => {}
                    }
                });
            }
        });
        Self { port, swallow, cut }
    }
}

/// What the 30 s lease-record tombstone rests on (src/redis/connection.rs): a command the
/// client's own timeout expired is never written again after a reconnect, while one merely
/// abandoned by a timer around the call is. Both are lost on the wire, then the connection breaks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_command_the_client_timed_out_is_not_sent_again_after_a_reconnect() {
    use fred::prelude::{KeysInterface, Options, ReconnectPolicy};
    let Some((port, server)) = private_redis("chaos test").await else {
        return;
    };
    let relay = Relay::start(port).await;
    let via_relay = Config::from_url(&format!("redis://127.0.0.1:{}", relay.port)).unwrap();
    let client = Builder::from_config(via_relay)
        .with_performance_config(|p| p.default_command_timeout = Duration::from_secs(5))
        .set_policy(ReconnectPolicy::new_constant(0, 50))
        .build()
        .expect("client");
    client.init().await.expect("connect through the relay");

    relay.swallow.store(true, Ordering::SeqCst);
    let short = Duration::from_millis(200);
    let abandoned = tokio::time::timeout(
        short,
        client.set::<(), _, _>("abandoned", 1, None, None, false),
    );
    let own = Options {
        timeout: Some(short),
        ..Options::default()
    };
    let bounded = client.with_options(&own);
    let timed_out = bounded.set::<(), _, _>("timed-out", 1, None, None, false);
    let (abandoned, timed_out) = tokio::join!(abandoned, timed_out);
    assert!(abandoned.is_err() && timed_out.is_err());
    // Both commands are lost on the wire. The relay stops swallowing BEFORE the cut: the client
    // may reconnect (and replay) the instant the cut lands, and a replay swallowed by a relay
    // still told to swallow would prove nothing.
    relay.swallow.store(false, Ordering::SeqCst);
    relay.cut.send_modify(|n| *n += 1);
    let _: () = client
        .set("after", 1, None, None, false)
        .await
        .expect("the client reconnects");

    let direct =
        Builder::from_config(Config::from_url(&format!("redis://127.0.0.1:{port}")).unwrap())
            .build()
            .expect("client");
    direct.init().await.expect("direct connect");
    // The witness: the abandoned command (still pending in the client, its 5 s timeout far off)
    // is replayed on the new connection. Waiting for it (bounded) makes the check below look
    // after the replay happened, whatever the scheduler did: a replay is written before any new
    // command on the new connection, so once it is seen, every replayed command has run.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let abandoned: Option<i64> = direct.get("abandoned").await.expect("GET");
        if abandoned == Some(1) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the abandoned command was never replayed: the test cannot see a replay"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The property the design rests on: the command whose own timeout expired is not.
    let timed_out: Option<i64> = direct.get("timed-out").await.expect("GET");
    assert_eq!(
        timed_out, None,
        "a command the client timed out was sent again after the reconnect"
    );
    direct.quit().await.ok();
    client.quit().await.ok();
    drop(server);
}

/// An admission whose command is lost on the wire times out, and its connection then breaks: the
/// client reconnects, and must not send the timed-out script again — the caller was already
/// told it failed, so a late admission would hold a slot for nobody, and the scripts keep lease
/// records only 30 s on the strength of this promise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_that_timed_out_is_not_sent_again_after_a_reconnect() {
    let Some((port, server)) = private_redis("chaos test").await else {
        return;
    };
    let relay = Relay::start(port).await;
    let url = format!("redis://127.0.0.1:{}", relay.port);
    let redis = RedisGovernance::connect_with(&Secret::new(url), "resend", options())
        .await
        .expect("connect through the relay");
    let gate = RedisGate::new(redis.clone());
    let warm = admit(&gate, 1).await.expect("admit through the relay");
    gate.release(&warm).await.expect("release");

    relay.swallow.store(true, Ordering::SeqCst);
    let lost = request(2);
    let started = Instant::now();
    assert!(gate.admit(&lost).await.is_err(), "a lost admission fails");
    assert!(started.elapsed() < DOWN_BOUND, "{:?}", started.elapsed());
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Stop swallowing before the cut, so a re-send right after the reconnect would be seen.
    relay.swallow.store(false, Ordering::SeqCst);
    relay.cut.send_modify(|n| *n += 1);

    // The client reconnects by itself; then give a re-send every chance to arrive.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut i = 100;
    let lease = loop {
        i += 1;
        match admit(&gate, i).await {
            Ok(lease) => break lease,
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            Err(e) => panic!("no recovery after the reconnect: {e}"),
        }
    };
    gate.release(&lease).await.expect("release");
    tokio::time::sleep(Duration::from_millis(1_000)).await;

    let raw = Builder::from_config(Config::from_url(&format!("redis://127.0.0.1:{port}")).unwrap())
        .build()
        .expect("client");
    raw.init().await.expect("direct connect");
    let record = format!("resend:{{LLM}}:rec:{}", lost.lease_id);
    let window: Option<String> = raw.hget(&record, "w").await.expect("HGET");
    assert_eq!(
        window, None,
        "the timed-out admission ran after the reconnect"
    );
    assert_eq!(gate.leases_held("LLM").await.unwrap(), 0);
    raw.quit().await.ok();
    redis.close().await;
    drop(server);
}

/// Script calls (EVAL/EVALSHA) the server has run so far, from `INFO commandstats`.
/// A gateway whose limiter and breakers live in the Redis at `url`, with one source (scope `LLM`)
/// on `mock`, no telemetry, and the `extra` keys.
async fn redis_gateway(
    url: &str,
    mock: &MockUpstream,
    api_key: &str,
    extra: &[(&str, &str)],
) -> Gateway {
    let env: std::collections::BTreeMap<String, String> = [
        ("PGW_LIMITER_BACKEND", "redis"),
        ("PGW_BREAKER_BACKEND", "redis"),
        ("PGW_TELEMETRY_BACKEND", "none"),
        ("REDIS_URL", url),
        ("LLM__OPENAI__1__BASE_URL", &mock.base_url()),
        ("LLM__OPENAI__1__API_KEY", api_key),
        ("LLM__OPENAI__1__MODEL", "m"),
    ]
    .iter()
    .chain(extra)
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let settings = polygateway::config::Settings::from_map(&env).unwrap();
    Gateway::from_settings(settings, "LLM").await.unwrap()
}

async fn script_calls(raw: &fred::prelude::Client) -> u64 {
    let stats: String = raw
        .info(Some(fred::types::InfoKind::CommandStats))
        .await
        .expect("INFO");
    stats
        .lines()
        .filter(|l| l.starts_with("cmdstat_eval"))
        .filter_map(|l| l.split(',').find_map(|kv| kv.split_once("calls=")))
        .filter_map(|(_, n)| n.parse::<u64>().ok())
        .sum()
}

/// A call dropped while its admission is on the wire (the runtime admits from the call's own
/// task, without the admission actor) must not leave a slot held by nobody: the admission still
/// completes, and its grant is given back. Here the server is paused, the caller gives up after
/// 150 ms, and the script runs late.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_dropped_during_its_admission_gives_the_grant_back() {
    let Some((port, server)) = private_redis("cancel-during-admit test").await else {
        return;
    };
    let mock = MockUpstream::start(Behaviour::healthy()).await;
    let url = format!("redis://127.0.0.1:{port}");
    let gw = redis_gateway(&url, &mock, "sk-cancel", &[]).await;
    gw.chat(vec![Message::user("warm")]).await.unwrap();
    let raw = Builder::from_config(Config::from_url(&url).expect("url"))
        .build()
        .expect("client");
    raw.init().await.expect("raw connect");
    let sent_before = mock.counts().chat;
    // Let the warm call's finish land before counting.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let scripts_before = script_calls(&raw).await;

    // Scripts pause for 600 ms (well inside the 2 s command timeout): the caller gives up first.
    let pause = CustomCommand::new_static("CLIENT", ClusterHash::Random, false);
    let _: String = raw
        .custom(pause, vec!["PAUSE", "600", "WRITE"])
        .await
        .expect("CLIENT PAUSE");
    let cut = tokio::time::timeout(
        Duration::from_millis(150),
        gw.chat(vec![Message::user("given up")]),
    )
    .await;
    assert!(cut.is_err(), "the call was dropped during its admission");

    tokio::time::sleep(Duration::from_millis(900)).await;
    assert_eq!(
        gw.leases_held("LLM").await.unwrap(),
        0,
        "the grant was given back"
    );
    // The late admission ran, and one more script gave it back (the lease read above is a
    // script too).
    assert_eq!(script_calls(&raw).await - scripts_before, 3);
    assert_eq!(mock.counts().chat, sent_before, "nothing was sent upstream");
    raw.quit().await.ok();
    gw.shutdown().await;
    drop(server);
}

/// The whole runtime over a Redis that dies and comes back: calls fail closed with
/// `GovernanceBackendError` (never ungoverned, never hanging), then the same gateway serves again
/// without a restart, and no lease is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runtime_fails_closed_while_redis_is_down_and_recovers_by_itself() {
    let Some((port, mut server)) = private_redis("runtime chaos test").await else {
        return;
    };
    let mock = MockUpstream::start(Behaviour::healthy()).await;
    let url = format!("redis://127.0.0.1:{port}");
    let gw = redis_gateway(
        &url,
        &mock,
        "sk-chaos",
        &[("LLM__GLOBAL__MAX_CONCURRENCY", "8")],
    )
    .await;
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
    // A success's finish is sent without waiting for it: give the last ones time to land on a
    // busy CI host. A leaked lease would be held for the lease TTL (1 500 s), far past this bound.
    no_lease_left(&gw, port, Duration::from_secs(10), "after recovery").await;
    gw.shutdown().await;
    server.kill();
}

/// Wait (at most `within`) until scope `LLM` of `gw`, on the private server at `port`, holds no
/// lease; fails naming each lease left and its record. How long it took.
async fn no_lease_left(gw: &Gateway, port: u16, within: Duration, when: &str) -> Duration {
    let started = Instant::now();
    loop {
        let leases = gw.leases_held("LLM").await.expect("leases readable");
        if leases == 0 {
            return started.elapsed();
        }
        if started.elapsed() >= within {
            panic!(
                "{leases} lease(s) left {when}: {}",
                leases_left(port, "pgw", "LLM").await
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The leases of `scope` still held on the server at `port` under `prefix`, each with its
/// admission record (window, estimate, expiry, settled/released/finished flags): what a failure
/// of a no-leak assertion must show to name the attempt that was never finished.
async fn leases_left(port: u16, prefix: &str, scope: &str) -> String {
    use fred::prelude::SortedSetsInterface;
    let raw =
        Builder::from_config(Config::from_url(&format!("redis://127.0.0.1:{port}")).expect("url"))
            .build()
            .expect("client");
    if let Err(e) = raw.init().await {
        return format!("(cannot read the leases: {e})");
    }
    let leases: Vec<(String, f64)> = raw
        .zrange(
            format!("{prefix}:{{{scope}}}:lease"),
            0,
            -1,
            None,
            false,
            None,
            true,
        )
        .await
        .unwrap_or_default();
    let mut out = Vec::new();
    for (id, expiry) in leases {
        let record: std::collections::HashMap<String, String> = raw
            .hgetall(format!("{prefix}:{{{scope}}}:rec:{id}"))
            .await
            .unwrap_or_default();
        out.push(format!("{id} (expiry {expiry}): {record:?}"));
    }
    raw.quit().await.ok();
    format!("[{}]", out.join("; "))
}

/// Finishes in flight across restarts never leave a slot held: eight concurrent callers (whose
/// successes' finishes are held and carried by the next admission) run through two kills and
/// restarts of the server; once they stop, every lease is released within a few seconds — not
/// left to the lease TTL (60 s here). Calls during an outage fail closed, none hangs, and the
/// same gateway recovers after each restart. Prints one JSON line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_across_restarts_leave_no_lease_behind() {
    let Some((port, mut server)) = private_redis("restart lease test").await else {
        return;
    };
    let mock = MockUpstream::start(Behaviour::healthy()).await;
    let url = format!("redis://127.0.0.1:{port}");
    let gw = Arc::new(
        redis_gateway(
            &url,
            &mock,
            "sk-restart",
            &[
                ("LLM__GLOBAL__MAX_CONCURRENCY", "8"),
                ("PGW_LEASE_TTL_S", "60"),
            ],
        )
        .await,
    );
    let stop = Arc::new(AtomicBool::new(false));
    let served = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let callers: Vec<_> = (0..8)
        .map(|_| {
            let (gw, stop, served) = (Arc::clone(&gw), Arc::clone(&stop), Arc::clone(&served));
            tokio::spawn(async move {
                let mut lost = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let answer = tokio::time::timeout(
                        Duration::from_secs(10),
                        gw.chat(vec![Message::user("x")]),
                    )
                    .await
                    .expect("no call hangs past its bound");
                    match answer {
                        Ok(_) => {
                            served.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => match e.unavailable() {
                            Some(u) if u.reason == UnavailableReason::GovernanceBackendDown => {
                                tokio::time::sleep(Duration::from_millis(20)).await
                            }
                            _ => lost.push(e.to_string()),
                        },
                    }
                }
                lost
            })
        })
        .collect();
    // Served calls keep coming (bounded wait): the gateway works on the current server.
    let serving = |within: Duration| {
        let served = Arc::clone(&served);
        async move {
            let from = served.load(Ordering::Relaxed);
            let deadline = Instant::now() + within;
            while served.load(Ordering::Relaxed) < from + 50 {
                assert!(
                    Instant::now() < deadline,
                    "calls were not served within {within:?}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    let mut recovered_s = Vec::new();
    for _ in 0..2 {
        serving(Duration::from_secs(10)).await;
        server.kill();
        tokio::time::sleep(Duration::from_millis(500)).await;
        server = PrivateRedis::start(port).expect("restart redis-server");
        assert!(server.ready().await, "restarted redis-server did not start");
        let back = Instant::now();
        serving(Duration::from_secs(15)).await;
        recovered_s.push(back.elapsed().as_secs_f64());
    }
    stop.store(true, Ordering::Relaxed);
    let mut lost = Vec::new();
    for caller in callers {
        lost.extend(caller.await.expect("caller"));
    }
    assert!(
        lost.is_empty(),
        "calls neither served nor refused closed: {lost:?}"
    );

    // Every finish owed is sent at once or within its retries (about 2 s): 5 s is ample, and
    // far below the 60 s lease TTL that would otherwise hide a leak.
    let released_within =
        no_lease_left(&gw, port, Duration::from_secs(5), "after the restarts").await;
    println!(
        "{}",
        serde_json::json!({"restart_leases": {
            "served": served.load(Ordering::Relaxed),
            "recovered_s": recovered_s,
            "released_within_s": released_within.as_secs_f64(),
        }})
    );
    gw.shutdown().await;
    server.kill();
}

/// `redis-cli -h host -p port args…`, its output (admin commands of the failover proof; the
/// runtime itself only ever talks through fred).
fn redis_cli(node: &str, args: &[&str]) -> String {
    let (host, port) = node.split_once(':').expect("host:port");
    let out = Command::new("redis-cli")
        .args(["-h", host, "-p", port])
        .args(args)
        .output()
        .expect("redis-cli runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The `host:port` of the connected primary serving `slot`, from any reachable node's view.
fn slot_owner(nodes: &[String], slot: u16) -> Option<String> {
    nodes.iter().find_map(|node| {
        redis_cli(node, &["cluster", "nodes"]).lines().find_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let serving = f.len() > 8
                && f[2].contains("master")
                && !f[2].contains("fail")
                && f[7] == "connected"
                && f[8..].iter().any(|range| {
                    let (lo, hi) = range.split_once('-').unwrap_or((range, range));
                    matches!((lo.parse::<u16>(), hi.parse::<u16>()), (Ok(lo), Ok(hi)) if lo <= slot && slot <= hi)
                });
            serving.then(|| f[1].split('@').next().unwrap_or(f[1]).to_string())
        })
    })
}

/// The `host:port` of the replica of primary `primary`.
fn replica_of(nodes: &[String], primary: &str) -> String {
    let view = redis_cli(&nodes[0], &["cluster", "nodes"]);
    let fields = |line: &str| {
        line.split_whitespace()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let lines: Vec<Vec<String>> = view.lines().map(fields).collect();
    let id = lines
        .iter()
        .find(|f| f[1].starts_with(&format!("{primary}@")))
        .map(|f| f[0].clone())
        .expect("the primary is listed");
    lines
        .iter()
        .find(|f| f[2].contains("slave") && f[3] == id)
        .map(|f| f[1].split('@').next().unwrap_or(&f[1]).to_string())
        .expect("the primary has a replica")
}

/// Every node answers `cluster_state:ok`, every replica is in sync (only then can it be
/// promoted) and a primary serves `slot` (bounded wait).
async fn cluster_settled(nodes: &[String], slot: u16, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        let ok = nodes.iter().all(|n| {
            let replication = redis_cli(n, &["info", "replication"]);
            redis_cli(n, &["cluster", "info"]).contains("cluster_state:ok")
                && (!replication.contains("role:slave")
                    || replication.contains("master_link_status:up"))
        });
        if ok && slot_owner(nodes, slot).is_some() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// A killed cluster node, restarted from its own config file when dropped (also on a failed
/// assertion), so the cluster is whole again for later tests: it rejoins as a replica.
struct KilledNode {
    config_file: String,
}

impl KilledNode {
    fn kill(node: &str) -> Self {
        let info = redis_cli(node, &["info", "server"]);
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.trim().to_string())
                .unwrap_or_else(|| panic!("INFO server of {node} has no {name}"))
        };
        let (pid, config_file) = (field("process_id:"), field("config_file:"));
        assert!(
            !config_file.is_empty(),
            "{node} was not started from a config file"
        );
        let killed = Command::new("kill")
            .args(["-9", &pid])
            .status()
            .expect("kill");
        assert!(killed.success(), "kill -9 {pid}");
        Self { config_file }
    }
}

impl Drop for KilledNode {
    fn drop(&mut self) {
        let _ = Command::new("redis-server").arg(&self.config_file).status();
    }
}

/// One call's outcome in the failover proof.
#[derive(Debug)]
enum Outcome {
    Ok,
    /// Refused closed: `GovernanceBackendDown` with a `retry_after_s` (the caller retries later).
    Refused,
    /// Anything else: the call is lost to its caller.
    Lost(String),
}

/// What one failover run saw ([`run_failover`]).
struct FailoverReport {
    promotion_s: f64,
    /// From the kill to the first call served after the promotion (0 when nothing was refused).
    refusal_s: f64,
    calls_ok: usize,
    calls_refused: usize,
    /// Calls served that were waiting when the replica was promoted: held through the outage
    /// instead of refused (a failover shorter than the client's command timeout looks so).
    calls_held: usize,
    /// Calls neither served nor refused with `retry_after_s`, with their errors.
    lost: Vec<String>,
    /// The calls of the scope on another shard, and how many of them were refused.
    other_calls: usize,
    other_refused: usize,
    idle_after_stop_s: f64,
    /// The killed node restarted and came back as a replica of the promoted one.
    rejoined: bool,
    restore_s: f64,
}

/// The failover proof's run, whatever promotes the replica (the cluster itself, or sentinels).
/// Traffic runs through the runtime at `url` on scope `LLM` (and on `other`, a scope another
/// primary serves, when there is one); `owner`, the primary serving `LLM`, is killed. While no
/// primary serves it, calls must be refused closed and the upstream must see nothing; after
/// `replica` is promoted they must succeed again by themselves; no lease, probe or in-flight
/// count may outlive the lease TTL. The killed node is restarted and must rejoin as a replica.
async fn run_failover(
    url: &str,
    owner: &str,
    replica: &str,
    other: Option<&str>,
) -> FailoverReport {
    const LEASE_TTL_S: u64 = 5;
    let mock = MockUpstream::start(Behaviour::healthy()).await;
    let scopes: Vec<&str> = std::iter::once("LLM").chain(other).collect();
    let env: std::collections::BTreeMap<String, String> = [
        ("PGW_LIMITER_BACKEND", "redis".to_string()),
        ("PGW_BREAKER_BACKEND", "redis".to_string()),
        ("PGW_TELEMETRY_BACKEND", "none".to_string()),
        ("PGW_LEASE_TTL_S", LEASE_TTL_S.to_string()),
        ("REDIS_URL", url.to_string()),
        ("LLM__GLOBAL__MAX_CONCURRENCY", "8".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .chain(scopes.iter().flat_map(|scope| {
        [
            ("OPENAI__1__BASE_URL", mock.base_url()),
            ("OPENAI__1__API_KEY", "sk-failover".to_string()),
            ("OPENAI__1__MODEL", "m".to_string()),
            ("OPENAI__1__TIMEOUT_S", "3".to_string()),
        ]
        .map(|(k, v)| (format!("{scope}__{k}"), v))
    }))
    .collect();
    let prefix = format!("pgwfailover-{}", uuid::Uuid::new_v4().simple());
    let gw = Arc::new(
        Gateway::builder(polygateway::config::Settings::from_map(&env).unwrap())
            .default_scope("LLM")
            .redis_key_prefix(&prefix)
            .build()
            .await
            .expect("the gateway connects to Redis"),
    );

    // Traffic: each call bounded (a hang is a failure), until told to stop.
    let started = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    // Each call's start, end and outcome.
    type Log = Arc<std::sync::Mutex<Vec<(Duration, Duration, Outcome)>>>;
    let log: Log = Arc::default();
    let other_log: Log = Arc::default();
    let callers: Vec<_> = (0..6)
        .filter_map(|i| {
            // Four callers on the killed primary's scope, two on the other shard's.
            let (scope, log) = match (i, other) {
                (0..4, _) => ("LLM", Arc::clone(&log)),
                (_, Some(other)) => (other, Arc::clone(&other_log)),
                (_, None) => return None,
            };
            let handle = gw.chat_scope(scope).unwrap();
            let stop = Arc::clone(&stop);
            Some(tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let call_started = started.elapsed();
                    let answer = tokio::time::timeout(
                        Duration::from_secs(10),
                        handle.chat(vec![Message::user("x")]),
                    )
                    .await
                    .expect("no call hangs past its bound");
                    let outcome = match answer {
                        Ok(_) => Outcome::Ok,
                        Err(e) => match e.unavailable() {
                            Some(u)
                                if u.reason == UnavailableReason::GovernanceBackendDown
                                    && u.retry_after_s > 0.0 =>
                            {
                                Outcome::Refused
                            }
                            _ => Outcome::Lost(e.to_string()),
                        },
                    };
                    log.lock()
                        .unwrap()
                        .push((call_started, started.elapsed(), outcome));
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }))
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(1)).await;

    let killed = KilledNode::kill(owner);
    let killed_at = started.elapsed();
    // Requests admitted just before the kill reach the mock within a few ms; after that, nothing
    // may reach it until a replica serves the scope again.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let sent_after_kill = mock.counts().chat;
    let promote_deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let sent = mock.counts().chat;
        // Read the count before asking the replica: it takes writes from the moment it calls
        // itself master, so a request counted here was sent while no primary served the scope.
        if redis_cli(replica, &["role"]).starts_with("master") {
            assert_eq!(
                sent, sent_after_kill,
                "the upstream saw a request while no primary served the scope (ungoverned)"
            );
            break;
        }
        assert!(
            Instant::now() < promote_deadline,
            "no replica promoted within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let promoted_at = started.elapsed();

    // Calls succeed again by themselves: wait for 2 s of traffic after the first success.
    let resume_deadline = Instant::now() + Duration::from_secs(30);
    let resumed_at = loop {
        let first_ok = log
            .lock()
            .unwrap()
            .iter()
            .find(|(_, t, o)| *t > promoted_at && matches!(o, Outcome::Ok))
            .map(|(_, t, _)| *t);
        if let Some(t) = first_ok {
            break t;
        }
        assert!(
            Instant::now() < resume_deadline,
            "calls did not resume within 30 s of the promotion"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    for caller in callers {
        caller.await.unwrap();
    }

    // Nothing leaked beyond the lease TTL: leases written on the old primary and never released
    // (or released on it and not replicated) expire by the server clock.
    let idle_deadline = Instant::now() + Duration::from_secs(LEASE_TTL_S + 3);
    loop {
        let mut leases = 0;
        let mut sources = Vec::new();
        for scope in &scopes {
            leases += gw
                .leases_held(scope)
                .await
                .expect("leases readable after the failover");
            sources.extend(gw.sources(scope).await.unwrap());
        }
        if leases == 0 && sources.iter().all(|s| s.in_flight == 0 && !s.probe_held) {
            break;
        }
        assert!(
            Instant::now() < idle_deadline,
            "state leaked beyond the lease TTL: leases {leases}, sources {sources:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let idle_at = started.elapsed();
    gw.shutdown().await;

    let log = std::mem::take(&mut *log.lock().unwrap());
    let other_log = std::mem::take(&mut *other_log.lock().unwrap());
    let count = |log: &[(Duration, Duration, Outcome)], refused: bool| {
        log.iter()
            .filter(|(_, _, o)| {
                matches!(o, Outcome::Refused) == refused && !matches!(o, Outcome::Lost(_))
            })
            .count()
    };
    let lost = log
        .iter()
        .chain(&other_log)
        .filter_map(|(_, _, o)| match o {
            Outcome::Lost(e) => Some(e.clone()),
            _ => None,
        })
        .collect();
    let refused_any = log.iter().any(|(_, _, o)| matches!(o, Outcome::Refused));
    let calls_held = log
        .iter()
        .filter(|(start, end, o)| {
            matches!(o, Outcome::Ok) && *start < promoted_at && *end > promoted_at
        })
        .count();

    // Restore: the killed node restarts and rejoins as a replica of the promoted one.
    drop(killed);
    let restore_started = Instant::now();
    let promoted_port = replica.rsplit_once(':').map_or(replica, |(_, port)| port);
    let rejoined = async {
        loop {
            let replication = redis_cli(owner, &["info", "replication"]);
            if replication.contains("role:slave")
                && replication.contains(&format!("master_port:{promoted_port}\r\n"))
                && replication.contains("master_link_status:up")
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let rejoined = tokio::time::timeout(Duration::from_secs(30), rejoined)
        .await
        .is_ok();
    FailoverReport {
        promotion_s: (promoted_at - killed_at).as_secs_f64(),
        refusal_s: if refused_any {
            resumed_at.saturating_sub(killed_at).as_secs_f64()
        } else {
            0.0
        },
        calls_ok: count(&log, false),
        calls_refused: count(&log, true),
        calls_held,
        lost,
        other_calls: other_log.len(),
        other_refused: count(&other_log, true),
        idle_after_stop_s: (idle_at - promoted_at).as_secs_f64(),
        rejoined,
        restore_s: restore_started.elapsed().as_secs_f64(),
    }
}

/// What every failover proof asserts, and its JSON line.
fn report_failover(
    label: &str,
    killed: &str,
    promoted: &str,
    report: &FailoverReport,
    extra: serde_json::Value,
) {
    println!(
        "{}",
        serde_json::json!({label: {
            "killed": killed, "promoted": promoted,
            "promotion_s": report.promotion_s,
            "refusal_s": report.refusal_s,
            "calls_ok": report.calls_ok, "calls_refused": report.calls_refused,
            "calls_held": report.calls_held,
            "calls_lost": report.lost.len(),
            "idle_after_stop_s": report.idle_after_stop_s,
            "restore_s": report.restore_s,
            "details": extra,
        }})
    );
    assert!(
        report.lost.is_empty(),
        "calls lost (neither served nor refused with retry_after_s): {:?}",
        report.lost
    );
    // The kill was seen by the callers: nothing reached the upstream while no primary served
    // (asserted during the run), and each caller's call across the outage was either refused
    // closed or held until the promotion. Which one depends on how the failover's length
    // compares with the client's command timeout and reconnect: both are correct.
    assert!(
        report.calls_refused + report.calls_held > 0,
        "the kill was not seen: no call was refused closed or held until the promotion"
    );
    assert!(report.calls_ok > 0);
    assert!(
        report.rejoined,
        "the killed node did not come back as a replica of the promoted one"
    );
}

/// The failover proof on a Redis Cluster ([`run_failover`]): the primary owning the scope's slot
/// is killed and the cluster promotes its replica; a scope on another shard keeps running.
/// Prints one JSON line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_primary_failover_fails_closed_then_resumes_without_leaks() {
    let Some(url) = topology_url(
        "PGW_TEST_REDIS_CLUSTER_URL",
        ".ci/redis-cluster.sh",
        "cluster",
    ) else {
        return;
    };
    let parsed = url::Url::parse(&url).expect("cluster url");
    let seed = format!(
        "{}:{}",
        parsed.host_str().expect("host"),
        parsed.port().unwrap_or(6379)
    );
    let nodes: Vec<String> = redis_cli(&seed, &["cluster", "nodes"])
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .map(|addr| addr.split('@').next().unwrap_or(addr).to_string())
        .collect();
    assert_eq!(nodes.len(), 6, "three primaries and three replicas");
    let slot: u16 = redis_cli(&seed, &["cluster", "keyslot", "{LLM}"])
        .trim()
        .parse()
        .expect("CLUSTER KEYSLOT");
    assert!(
        cluster_settled(&nodes, slot, Duration::from_secs(20)).await,
        "the cluster is not healthy before the test"
    );
    // A second scope whose slot another primary owns: what a failover does to other shards.
    let owner = slot_owner(&nodes, slot).expect("a primary owns the slot");
    let (other, other_slot) = (1..100)
        .map(|i| format!("OTHER{i}"))
        .find_map(|name| {
            let s: u16 = redis_cli(&seed, &["cluster", "keyslot", &format!("{{{name}}}")])
                .trim()
                .parse()
                .ok()?;
            (slot_owner(&nodes, s).as_ref() != Some(&owner)).then_some((name, s))
        })
        .expect("a scope on another shard");
    let replica = replica_of(&nodes, &owner);

    let report = run_failover(&url, &owner, &replica, Some(&other)).await;
    let settled = cluster_settled(&nodes, slot, Duration::from_secs(20)).await;
    let other_shard = serde_json::json!({"other_shard": {
        "slot": other_slot, "calls": report.other_calls, "refused": report.other_refused,
    }});
    report_failover("cluster_failover", &owner, &replica, &report, other_shard);
    assert!(
        settled,
        "the cluster is not healthy again after the failover"
    );
}

/// The failover proof behind sentinels ([`run_failover`]): the primary is killed, the sentinels
/// promote its replica, and the client finds the new primary through them. Prints one JSON line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_primary_failover_fails_closed_then_resumes_without_leaks() {
    let Some(url) = topology_url(
        "PGW_TEST_REDIS_SENTINEL_URL",
        ".ci/redis-sentinel.sh",
        "sentinel",
    ) else {
        return;
    };
    let parsed = url::Url::parse(&url).expect("sentinel url");
    let service = parsed
        .query_pairs()
        .find_map(|(k, v)| (k == "sentinelServiceName").then(|| v.into_owned()))
        .expect("sentinelServiceName");
    let sentinels: Vec<String> = std::iter::once(format!(
        "{}:{}",
        parsed.host_str().expect("host"),
        parsed.port().unwrap_or(26379)
    ))
    .chain(
        parsed
            .query_pairs()
            .filter_map(|(k, v)| (k == "node").then(|| v.into_owned())),
    )
    .collect();
    // What the sentinels name as the primary (every sentinel agrees; bounded wait).
    let (sentinels, service) = (&sentinels, &service);
    let primary_by_all = |within: Duration| async move {
        let deadline = Instant::now() + within;
        loop {
            let named: Vec<String> = sentinels
                .iter()
                .map(|s| {
                    redis_cli(s, &["sentinel", "get-master-addr-by-name", service])
                        .split_whitespace()
                        .collect::<Vec<_>>()
                        .join(":")
                })
                .collect();
            if named.iter().all(|n| !n.is_empty() && *n == named[0]) {
                return Some(named[0].clone());
            }
            if Instant::now() > deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let owner = primary_by_all(Duration::from_secs(20))
        .await
        .expect("the sentinels agree on a primary");
    let replica = redis_cli(&owner, &["info", "replication"])
        .lines()
        .find_map(|l| {
            let fields = l.strip_prefix("slave0:")?;
            let field = |name: &str| {
                fields
                    .split(',')
                    .find_map(|f| f.strip_prefix(name).map(str::to_string))
            };
            Some(format!("{}:{}", field("ip=")?, field("port=")?))
        })
        .expect("the primary has a replica");

    let report = run_failover(&url, &owner, &replica, None).await;
    let named_after = primary_by_all(Duration::from_secs(20)).await;
    report_failover(
        "sentinel_failover",
        &owner,
        &replica,
        &report,
        serde_json::json!({
            "sentinels": sentinels.len(), "primary_named_after": named_after,
        }),
    );
    assert_eq!(
        named_after.as_deref(),
        Some(replica.as_str()),
        "every sentinel names the promoted replica"
    );
}

/// The URL of a Redis topology a CI script starts, from `var`: under `CI=true` its absence fails
/// the test, otherwise the test is skipped loudly.
fn topology_url(var: &str, script: &str, what: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) => Some(url),
        Err(_) if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("{var} is required under CI=true ({script})")
        }
        Err(_) => {
            eprintln!("\n!!!!! SKIP: {var} unset (start {script}); the {what} failover proof did NOT run !!!!!\n");
            None
        }
    }
}

/// A gateway built while its governance Redis is down (issue #51, the original library's
/// behaviour): the build succeeds, every call fails closed at once with `GovernanceBackendError`
/// (`governance_backend_down`, retry in 5 s) and sends nothing upstream, and once a server
/// starts on that address the same gateway serves within one retry interval, with no restart
/// and no lease left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_built_while_redis_is_down_fails_closed_then_serves_once_it_starts() {
    let port = free_port();
    let mock = MockUpstream::start(Behaviour::healthy()).await;
    let url = format!("redis://127.0.0.1:{port}");
    let started = Instant::now();
    let gw = redis_gateway(&url, &mock, "sk-late-redis", &[]).await;
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "the build waited {:?} for a server that is not there",
        started.elapsed()
    );
    for _ in 0..3 {
        let began = Instant::now();
        let err = gw.chat(vec![Message::user("x")]).await.unwrap_err();
        let u = err
            .unavailable()
            .unwrap_or_else(|| panic!("fail closed, got {err}"));
        assert_eq!(
            (u.kind, u.reason, u.retry_after_s),
            (
                polygateway::UnavailableKind::GovernanceBackend,
                UnavailableReason::GovernanceBackendDown,
                5.0
            )
        );
        assert!(
            began.elapsed() < Duration::from_secs(1),
            "a call while Redis is down took {:?}",
            began.elapsed()
        );
    }
    assert_eq!(mock.counts().chat, 0, "nothing went through ungoverned");

    let server = match PrivateRedis::start(port) {
        Ok(s) => s,
        Err(e) if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("redis-server needed under CI=true: {e}")
        }
        Err(e) => {
            eprintln!("\n!!!!! SKIP: cannot start a private redis-server ({e}); the late-Redis test did NOT run to its end !!!!!\n");
            gw.shutdown().await;
            return;
        }
    };
    assert!(server.ready().await, "private redis-server did not start");
    let back = Instant::now();
    loop {
        match gw.chat(vec![Message::user("x")]).await {
            Ok(_) => break,
            Err(e) if back.elapsed() < Duration::from_secs(5) => {
                assert!(e.unavailable().is_some(), "{e}");
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(e) => panic!("not serving 5 s after Redis started: {e}"),
        }
    }
    println!("serving {:?} after Redis started", back.elapsed());
    for _ in 0..5 {
        gw.chat(vec![Message::user("x")]).await.unwrap();
    }
    assert_eq!(mock.counts().chat, 6);
    no_lease_left(&gw, port, Duration::from_secs(10), "after the late start").await;
    gw.shutdown().await;
    drop(server);
}

/// What a Redis that is up but refuses the gateway says is the configuration's to fix, not an
/// outage to wait out: a wrong password is refused at build (a `ConfigError` naming
/// `REDIS_URL`, the password never echoed), unlike a server that is down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_governance_redis_that_refuses_the_password_is_a_build_error() {
    let port = free_port();
    let server = match PrivateRedis::start_with(port, &["--requirepass", "right-pw"]) {
        Ok(s) => s,
        Err(e) if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("redis-server needed under CI=true: {e}")
        }
        Err(e) => {
            eprintln!("\n!!!!! SKIP: cannot start a private redis-server ({e}); the wrong-password test did NOT run !!!!!\n");
            return;
        }
    };
    assert!(server.ready().await, "private redis-server did not start");
    let mock = MockUpstream::start(Behaviour::healthy()).await;
    let env: std::collections::BTreeMap<String, String> = [
        ("PGW_LIMITER_BACKEND", "redis"),
        ("PGW_BREAKER_BACKEND", "redis"),
        ("PGW_TELEMETRY_BACKEND", "none"),
        ("LLM__OPENAI__1__BASE_URL", mock.base_url().as_str()),
        ("LLM__OPENAI__1__API_KEY", "sk-x"),
        ("LLM__OPENAI__1__MODEL", "m"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .chain([(
        "REDIS_URL".to_string(),
        format!("redis://:wrong-pw@127.0.0.1:{port}"),
    )])
    .collect();
    let settings = polygateway::config::Settings::from_map(&env).unwrap();
    let started = Instant::now();
    let Err(err) = Gateway::from_settings(settings, "LLM").await else {
        panic!("a gateway was built on a Redis that refuses its password")
    };
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(matches!(err, GatewayError::Config(_)), "{err}");
    let text = err.to_string();
    assert!(text.contains("REDIS_URL"), "{text}");
    assert!(!text.contains("wrong-pw"), "{text}");
    drop(server);
}
