//! Governance through the whole runtime (memory backends) against mock upstreams: switching,
//! classification-driven behaviour, circuit-open, cancellation and supervision.

mod common;

use std::time::Duration;

use common::{cancelled_attempts, gateway, wait_idle};
use polygateway::{GatewayError, Message, UnavailableKind, UnavailableReason};
use polygateway_testkit::mock_llm::{Behaviour, MockUpstream};

#[tokio::test(start_paused = true)]
async fn transient_failures_switch_to_a_healthy_source() {
    let broken = MockUpstream::start(Behaviour::ServerError(503)).await;
    let healthy = MockUpstream::start(Behaviour::healthy_with("ok")).await;
    let gw = gateway(&[("broken", &broken), ("healthy", &healthy)], &[]).await;
    for _ in 0..20 {
        let resp = gw.chat(vec![Message::user("hi")]).await.unwrap();
        assert_eq!(resp.source_name, "healthy_1");
    }
    // Health-aware selection learns: the broken source gets only a few attempts.
    assert!(
        broken.counts().chat <= 8,
        "broken got {}",
        broken.counts().chat
    );
    wait_idle(&gw, &[&broken, &healthy]).await;
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_dead_key_force_opens_and_is_skipped() {
    let dead = MockUpstream::start(Behaviour::Unauthorized).await;
    let healthy = MockUpstream::start(Behaviour::healthy()).await;
    let gw = gateway(&[("dead", &dead), ("healthy", &healthy)], &[]).await;
    for _ in 0..30 {
        gw.chat(vec![Message::user("hi")]).await.unwrap();
    }
    // Both sources start equally healthy and idle; P2C breaks the tie by position, so the dead
    // source ("dead_1" sorts first) takes the first attempt, force-opens, and is never tried again.
    assert_eq!(dead.counts().chat, 1);
    assert_eq!(healthy.counts().chat, 30);
    let snapshot = gw.sources("LLM").await.unwrap();
    let dead_state = snapshot.iter().find(|s| s.name == "dead_1").unwrap();
    assert_eq!(
        dead_state.breaker,
        Some(polygateway::ports::BreakerState::Open)
    );
    assert_eq!(dead_state.dead, 1);
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_bad_request_is_returned_without_retry() {
    let mock = MockUpstream::start(Behaviour::BadRequest).await;
    let gw = gateway(&[("only", &mock)], &[]).await;
    let err = gw.chat(vec![Message::user("hi")]).await.unwrap_err();
    assert!(matches!(err, GatewayError::RequestRejected { .. }), "{err}");
    assert_eq!(mock.counts().chat, 1);
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn every_circuit_open_fails_fast_with_a_retry_hint() {
    let mock = MockUpstream::start(Behaviour::Unauthorized).await;
    let gw = gateway(&[("only", &mock)], &[("LLM__BREAKER__COOLDOWN_S", "30")]).await;
    let err = gw.chat(vec![Message::user("hi")]).await.unwrap_err();
    let unavailable = err.unavailable().expect("scope-level unavailable");
    assert_eq!(unavailable.reason, UnavailableReason::CircuitOpen);
    // The call's own attempt opened the only breaker: it used up its sources.
    assert_eq!(unavailable.kind, UnavailableKind::AllSourcesExhausted);
    assert!(unavailable.retry_after_s > 20.0, "{unavailable:?}");
    assert_eq!(
        unavailable
            .per_source_reasons
            .get("only_1")
            .map(|r| r.as_str()),
        Some("source_dead")
    );
    // The next call is refused without reaching the source.
    let again = gw.chat(vec![Message::user("hi")]).await.unwrap_err();
    assert!(again.is_unavailable());
    // Refused at the gate without an attempt: the circuit-open member of the family.
    assert_eq!(
        again.unavailable().map(|u| u.kind),
        Some(UnavailableKind::CircuitOpen)
    );
    assert_eq!(mock.counts().chat, 1);
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn retry_budget_exhaustion_names_every_source() {
    let a = MockUpstream::start(Behaviour::ServerError(500)).await;
    let b = MockUpstream::start(Behaviour::ServerError(502)).await;
    let gw = gateway(
        &[("a", &a), ("b", &b)],
        &[("LLM__RETRY__MAX_ATTEMPTS", "3")],
    )
    .await;
    let err = gw.chat(vec![Message::user("hi")]).await.unwrap_err();
    let u = err.unavailable().expect("unavailable");
    assert_eq!(u.reason, UnavailableReason::RetryExhausted);
    assert_eq!(a.counts().chat + b.counts().chat, 3);
    assert_eq!(u.per_source_reasons.len(), 2);
    // Both answered 5xx: a server error each, not a network one (docs/behaviour.md §6).
    for (source, reason) in &u.per_source_reasons {
        assert_eq!(reason.as_str(), "server_error", "{source}: {u:?}");
    }
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn rate_limits_do_not_spend_the_budget() {
    let mock = MockUpstream::start(Behaviour::Scripted(vec![
        Behaviour::RateLimited {
            retry_after_s: None,
        },
        Behaviour::RateLimited {
            retry_after_s: None,
        },
        Behaviour::RateLimited {
            retry_after_s: None,
        },
        Behaviour::healthy_with("finally"),
    ]))
    .await;
    let gw = gateway(&[("only", &mock)], &[("LLM__RETRY__MAX_ATTEMPTS", "1")]).await;
    let resp = gw.chat(vec![Message::user("hi")]).await.unwrap();
    assert_eq!(resp.content, "finally");
    assert_eq!(mock.counts().chat, 4);
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn cancelled_calls_release_everything() {
    let slow = MockUpstream::start(Behaviour::Healthy {
        ttft: Duration::from_millis(40),
        inter_token: Duration::from_millis(5),
        chunks: 4,
        content: "slow".into(),
    })
    .await;
    let rl = MockUpstream::start(Behaviour::RateLimited {
        retry_after_s: Some(1),
    })
    .await;
    let gw = gateway(
        &[("slow", &slow), ("rl", &rl)],
        &[("LLM__GLOBAL__MAX_CONCURRENCY", "16")],
    )
    .await;
    // 2000 calls, each cancelled at a random point (waiting for quota, in backoff, mid-stream).
    let mut tasks = Vec::new();
    for i in 0..2000u64 {
        let gw = gw.clone();
        tasks.push(tokio::spawn(async move {
            let budget = Duration::from_millis(i % 97);
            let _ = tokio::time::timeout(budget, gw.chat(vec![Message::user("x")])).await;
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    wait_idle(&gw, &[&slow, &rl]).await;
    assert!(
        cancelled_attempts(&gw).await > 0,
        "the test must actually cancel attempts"
    );
    // Still serving after the storm.
    gw.chat(vec![Message::user("x")]).await.unwrap();
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_failed_source_actor_is_restarted_and_the_scope_keeps_serving() {
    let mock = MockUpstream::start(Behaviour::healthy()).await;
    let other = MockUpstream::start(Behaviour::healthy()).await;
    let gw = gateway(&[("a", &mock), ("b", &other)], &[]).await;
    let traffic = {
        let gw = gw.clone();
        tokio::spawn(async move {
            for _ in 0..200 {
                gw.chat(vec![Message::user("x")]).await.unwrap();
            }
        })
    };
    for _ in 0..3 {
        gw.inject_source_failure("LLM", "a_1").unwrap();
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    tokio::time::timeout(Duration::from_secs(20), traffic)
        .await
        .expect("no call hangs")
        .unwrap();
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn exceeding_the_restart_intensity_escalates_to_a_clear_error() {
    let mock = MockUpstream::start(Behaviour::healthy()).await;
    let gw = gateway(&[("a", &mock)], &[]).await;
    // The default policy allows 5 restarts in 30 s; fail the actor until it escalates.
    for _ in 0..12 {
        let _ = gw.inject_source_failure("LLM", "a_1");
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    let result = tokio::time::timeout(Duration::from_secs(5), gw.chat(vec![Message::user("x")]))
        .await
        .expect("a call after escalation must not hang");
    let err = result.unwrap_err();
    assert!(
        matches!(err, GatewayError::Shutdown(ref m) if m.contains("restart intensity")),
        "{err}"
    );
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_full_scope_quota_fails_fast_with_quota_exhausted() {
    let mock = MockUpstream::start(Behaviour::healthy()).await;
    let gw = gateway(
        &[("only", &mock)],
        &[("LLM__GLOBAL__RPM", "2"), ("LLM__QUOTA_FULL", "fail_fast")],
    )
    .await;
    gw.chat(vec![Message::user("1")]).await.unwrap();
    gw.chat(vec![Message::user("2")]).await.unwrap();
    let err = gw.chat(vec![Message::user("3")]).await.unwrap_err();
    let u = err.unavailable().expect("unavailable");
    assert_eq!(u.reason, UnavailableReason::QuotaExhausted);
    assert!(u.retry_after_s > 0.0 && u.retry_after_s <= 60.0, "{u:?}");
    assert_eq!(mock.counts().chat, 2, "nothing is sent past the quota");
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_full_concurrency_gate_makes_callers_wait_not_fail() {
    let mock = MockUpstream::start(Behaviour::Healthy {
        ttft: Duration::from_millis(150),
        inter_token: Duration::ZERO,
        chunks: 1,
        content: "ok".into(),
    })
    .await;
    let gw = gateway(
        &[("only", &mock)],
        &[
            ("LLM__GLOBAL__MAX_CONCURRENCY", "1"),
            ("LLM__BACKPRESSURE__POLL_INTERVAL_S", "0.02"),
        ],
    )
    .await;
    let started = tokio::time::Instant::now();
    let calls: Vec<_> = (0..3)
        .map(|i| {
            let gw = gw.clone();
            tokio::spawn(async move { gw.chat(vec![Message::user(format!("{i}"))]).await })
        })
        .collect();
    for call in calls {
        call.await.unwrap().unwrap();
    }
    // One at a time: three 150 ms calls take at least 450 ms, and the mock never saw two at once.
    assert!(started.elapsed() >= Duration::from_millis(440));
    assert_eq!(mock.counts().chat, 3);
    wait_idle(&gw, &[&mock]).await;
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_wait_shorter_than_the_stall_window_is_served() {
    let mock = MockUpstream::start(Behaviour::Healthy {
        ttft: Duration::from_millis(1500),
        inter_token: Duration::ZERO,
        chunks: 1,
        content: "slow".into(),
    })
    .await;
    let gw = gateway(
        &[("only", &mock)],
        &[
            ("LLM__GLOBAL__MAX_CONCURRENCY", "1"),
            ("LLM__BACKPRESSURE__POLL_INTERVAL_S", "0.05"),
            ("LLM__BACKPRESSURE__STALL_WINDOW_S", "2"),
            ("LLM__ONLY__1__TTFT_TIMEOUT_S", "1.8"),
        ],
    )
    .await;
    // The first call holds the only slot; the scope has never made progress.
    let holder = {
        let gw = gw.clone();
        tokio::spawn(async move { gw.chat(vec![Message::user("hold")]).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The stall window (2 s) is longer than the holder's attempt, so the waiter sees progress when
    // the holder finishes and is served: waiting alone is not stalling.
    let waiter = gw.chat(vec![Message::user("wait")]).await;
    assert!(waiter.is_ok(), "{waiter:?}");
    holder.await.unwrap().unwrap();
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn quota_waits_past_the_stall_window_without_progress_fail_as_stalled() {
    let mock = MockUpstream::start(Behaviour::BlackHole).await;
    let gw = gateway(
        &[("only", &mock)],
        &[
            ("LLM__GLOBAL__MAX_CONCURRENCY", "1"),
            ("LLM__BACKPRESSURE__POLL_INTERVAL_S", "0.05"),
            ("LLM__BACKPRESSURE__STALL_WINDOW_S", "1.5"),
            ("LLM__ONLY__1__TIMEOUT_S", "5"),
            ("LLM__ONLY__1__TTFT_TIMEOUT_S", "1.2"),
            ("LLM__ONLY__1__INTER_TOKEN_TIMEOUT_S", "0.6"),
        ],
    )
    .await;
    // A non-streaming call to a black hole holds the only slot for its 5 s total deadline; the
    // scope never progresses.
    let holder = {
        let gw = gw.clone();
        tokio::spawn(async move {
            gw.chat_with(
                vec![Message::user("hold")],
                polygateway::CallOptions::new().stream(false),
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = tokio::time::Instant::now();
    let err = gw.chat(vec![Message::user("wait")]).await.unwrap_err();
    let u = err.unavailable().expect("unavailable");
    assert_eq!(u.reason, UnavailableReason::Stalled, "{u:?}");
    assert!(
        started.elapsed() >= Duration::from_millis(1400)
            && started.elapsed() < Duration::from_secs(4),
        "stalled after the 1.5 s window, not after the holder"
    );
    holder.abort();
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn circuit_open_wait_sleeps_until_the_cooldown_then_probes() {
    let mock = MockUpstream::start(Behaviour::Scripted(vec![
        Behaviour::Unauthorized,
        Behaviour::healthy_with("after the cooldown"),
    ]))
    .await;
    let gw = gateway(
        &[("only", &mock)],
        &[
            ("LLM__CIRCUIT_OPEN", "wait"),
            ("LLM__BREAKER__COOLDOWN_S", "1"),
            ("LLM__RETRY__MAX_ATTEMPTS", "3"),
        ],
    )
    .await;
    let started = tokio::time::Instant::now();
    let resp = gw.chat(vec![Message::user("hi")]).await.unwrap();
    assert_eq!(resp.content, "after the cooldown");
    // No request while waiting: one 401, then the half-open probe after ≥ 1 s.
    assert!(started.elapsed() >= Duration::from_millis(950));
    assert_eq!(mock.counts().chat, 2);
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_failed_admission_actor_fails_closed_then_is_restarted() {
    let mock = MockUpstream::start(Behaviour::healthy()).await;
    let gw = gateway(&[("only", &mock)], &[]).await;
    gw.chat(vec![Message::user("before")]).await.unwrap();
    gw.inject_admission_failure();
    // Right after the failure the door is down: calls fail closed, never ungoverned.
    let mut saw_fail_closed = false;
    let mut recovered = false;
    for _ in 0..100 {
        match gw.chat(vec![Message::user("during")]).await {
            Err(e) => {
                let u = e.unavailable().expect("fail closed");
                assert_eq!(u.reason, UnavailableReason::GovernanceBackendDown);
                saw_fail_closed = true;
            }
            Ok(_) if saw_fail_closed => {
                recovered = true;
                break;
            }
            Ok(_) => {}
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(saw_fail_closed, "the restart window was observed");
    assert!(recovered, "the supervisor restarted the admission actor");
    wait_idle(&gw, &[&mock]).await;
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn shutdown_ends_calls_in_flight_and_still_records_them() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.sqlite");
    let db_s = db.display().to_string();
    let slow = MockUpstream::start(Behaviour::Healthy {
        ttft: Duration::from_millis(1500),
        inter_token: Duration::ZERO,
        chunks: 1,
        content: "late".into(),
    })
    .await;
    let gw = gateway(
        &[("slow", &slow)],
        &[
            ("PGW_TELEMETRY_BACKEND", "sqlite"),
            ("PGW_TELEMETRY_SQLITE_PATH", &db_s),
        ],
    )
    .await;
    let call = {
        let gw = gw.clone();
        tokio::spawn(async move { gw.chat(vec![Message::user("x")]).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = tokio::time::Instant::now();
    gw.shutdown().await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "shutdown is bounded"
    );
    let err = call.await.unwrap().unwrap_err();
    assert!(matches!(err, GatewayError::Shutdown(_)), "{err}");
    gw.shutdown().await; // idempotent
    let conn = rusqlite::Connection::open(&db).unwrap();
    let error: String = conn
        .query_row("SELECT error FROM llm_calls", [], |r| r.get(0))
        .unwrap();
    assert_eq!(error, "cancelled");
}

/// Issue #18: the hint never promises service before the dead source's cooldown ends, whether
/// the budget runs out on the dead attempt (1) or the next round finds every circuit open (3).
#[tokio::test(start_paused = true)]
async fn a_dead_only_source_hints_its_cooldown_whatever_the_budget() {
    for budget in ["1", "3"] {
        let mock = MockUpstream::start(Behaviour::Unauthorized).await;
        let gw = gateway(
            &[("only", &mock)],
            &[
                ("LLM__BREAKER__COOLDOWN_S", "30"),
                ("LLM__RETRY__MAX_ATTEMPTS", budget),
            ],
        )
        .await;
        let err = gw.chat(vec![Message::user("hi")]).await.unwrap_err();
        let unavailable = err.unavailable().expect("scope-level unavailable");
        assert!(
            unavailable.retry_after_s > 29.0 && unavailable.retry_after_s <= 30.0,
            "MAX_ATTEMPTS={budget}: {unavailable:?}"
        );
        assert_eq!(mock.counts().chat, 1, "MAX_ATTEMPTS={budget}");
        gw.shutdown().await;
    }
}

/// Three concurrent calls on one source: each one's result and how long it took.
async fn three_at_once(
    gw: &polygateway::Gateway,
) -> Vec<(
    Result<polygateway::LlmResponse, GatewayError>,
    std::time::Duration,
)> {
    let one = || async {
        let started = tokio::time::Instant::now();
        let result = gw.chat(vec![Message::user("hi")]).await;
        (result, started.elapsed())
    };
    let (a, b, c) = tokio::join!(one(), one(), one());
    vec![a, b, c]
}

/// `QUOTA_FULL=fail_fast` on a source's own limit (issue #51): one call is served, the other two
/// fail at once with `quota_exhausted` instead of waiting their turn; nothing more reaches the
/// upstream. Returns the failures' `retry_after_s`.
async fn source_limit_fails_fast(limit: &[(&str, &str)]) -> Vec<f64> {
    let mock = MockUpstream::start(Behaviour::Slow {
        delay: Duration::from_millis(1_500),
    })
    .await;
    let mut extra = vec![("LLM__QUOTA_FULL", "fail_fast")];
    extra.extend_from_slice(limit);
    let gw = gateway(&[("only", &mock)], &extra).await;
    let results = three_at_once(&gw).await;
    let served = results.iter().filter(|(r, _)| r.is_ok()).count();
    assert_eq!(served, 1, "{limit:?}: {results:?}");
    let mut hints = Vec::new();
    for (result, took) in &results {
        let Err(err) = result else { continue };
        let u = err.unavailable().unwrap_or_else(|| panic!("{err}"));
        assert_eq!(
            (u.kind, u.reason),
            (
                UnavailableKind::AllSourcesExhausted,
                UnavailableReason::QuotaExhausted
            ),
            "{limit:?}"
        );
        assert!(
            *took < Duration::from_millis(600),
            "{limit:?}: a fail-fast call waited {took:?}"
        );
        hints.push(u.retry_after_s);
    }
    assert_eq!(mock.counts().chat, 1, "{limit:?}");
    gw.shutdown().await;
    hints
}

#[tokio::test(start_paused = true)]
async fn fail_fast_covers_a_sources_own_concurrency_limit() {
    let hints = source_limit_fails_fast(&[("LLM__ONLY__1__MAX_CONCURRENCY", "1")]).await;
    // A slot can come back any moment: the lease poll, not a window.
    assert!(hints.iter().all(|h| *h > 0.0 && *h <= 1.0), "{hints:?}");
}

#[tokio::test(start_paused = true)]
async fn fail_fast_covers_a_sources_own_rpm_limit() {
    let hints = source_limit_fails_fast(&[("LLM__ONLY__1__RPM", "1")]).await;
    // The minute window's end.
    assert!(hints.iter().all(|h| *h > 1.0), "{hints:?}");
}

#[tokio::test(start_paused = true)]
async fn fail_fast_covers_a_sources_own_tpm_limit() {
    let hints = source_limit_fails_fast(&[
        ("LLM__ONLY__1__TPM", "1000"),
        ("LLM__ONLY__1__EST_TOKENS", "600"),
    ])
    .await;
    assert!(hints.iter().all(|h| *h > 1.0), "{hints:?}");
}

/// With the default `QUOTA_FULL=wait`, calls on a source at its own concurrency limit still take
/// turns (they wait for the freed slot).
#[tokio::test(start_paused = true)]
async fn waiting_on_a_sources_own_concurrency_limit_stays_the_default() {
    let mock = MockUpstream::start(Behaviour::Slow {
        delay: Duration::from_millis(300),
    })
    .await;
    let gw = gateway(
        &[("only", &mock)],
        &[("LLM__ONLY__1__MAX_CONCURRENCY", "1")],
    )
    .await;
    let results = three_at_once(&gw).await;
    assert!(results.iter().all(|(r, _)| r.is_ok()), "{results:?}");
    let longest = results.iter().map(|(_, took)| *took).max().unwrap();
    assert!(longest >= Duration::from_millis(850), "{longest:?}");
    assert_eq!(mock.counts().chat, 3);
    gw.shutdown().await;
}

/// The unavailable family as a downstream retry loop sees it (issue #51), as the original
/// raises it: breakers opened by the call's own failed attempts end it `AllSourcesExhausted`;
/// the next call, refused at the gate without an attempt, is `CircuitOpen` — so a loop that
/// retries must name the whole family (`GatewayUnavailableError`), not `AllSourcesExhausted`.
#[tokio::test(start_paused = true)]
async fn breakers_opened_by_the_calls_own_retries_end_it_exhausted_and_the_next_call_circuit_open()
{
    let mock = MockUpstream::start(Behaviour::ServerError(503)).await;
    let gw = gateway(
        &[("only", &mock)],
        &[
            ("LLM__RETRY__MAX_ATTEMPTS", "3"),
            ("LLM__BREAKER__FAIL_THRESHOLD", "2"),
        ],
    )
    .await;
    let kinds: Vec<_> = futures_kinds(&gw, 3).await;
    // First call: two 503s open the only breaker, the third attempt is refused at the gate.
    assert_eq!(
        kinds[0],
        (
            UnavailableKind::AllSourcesExhausted,
            UnavailableReason::CircuitOpen
        )
    );
    assert_eq!(mock.counts().chat, 2);
    // The next ones send nothing.
    for kind in &kinds[1..] {
        assert_eq!(
            *kind,
            (UnavailableKind::CircuitOpen, UnavailableReason::CircuitOpen)
        );
    }
    assert_eq!(mock.counts().chat, 2);
    gw.shutdown().await;
}

/// `n` calls in a row, each failing unavailable with a positive hint: their kind and reason.
async fn futures_kinds(
    gw: &polygateway::Gateway,
    n: usize,
) -> Vec<(UnavailableKind, UnavailableReason)> {
    let mut kinds = Vec::new();
    for _ in 0..n {
        let err = gw.chat(vec![Message::user("hi")]).await.unwrap_err();
        let u = err.unavailable().unwrap_or_else(|| panic!("{err}"));
        assert!(u.retry_after_s > 0.0, "{u:?}");
        kinds.push((u.kind, u.reason));
    }
    kinds
}
