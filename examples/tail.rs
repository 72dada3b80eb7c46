//! Tail latency and cut streams with and without hedged first tokens (docs/behaviour.md §5.9)
//! and mid-stream continuation (§5.10), on the mock.
//!
//! ```text
//! cargo run --release --example tail -- [--calls N] [--rounds R] [--seed S]
//! ```
//!
//! A scope of 4 sources on the built-in mock, each a DeepSeek source (whose chat prefix
//! completion the mock implements, so any of them can continue another's stream). Every answer
//! is a stream of 8 deltas, the first after 20 ms, then one every 2 ms. A slow first token (2 s,
//! 100×) meets 2 % of the scope's requests on a source drawn at random: every source is slow for
//! 2 % of its requests, each request drawing on its own (seeded per source), so a caller cannot
//! know which source or request will be slow — the issue's "one source at random … for 2 % of
//! requests", read per request. One source (drawn from the seed) cuts 1 % of its streams half-way
//! (after 4 of the 8 deltas the socket is dropped without `[DONE]`). `--calls` streaming callers
//! (default 1,024) arrive 2 ms apart, each making one `chat_stream` call and reading it to the
//! end.
//!
//! Each round runs the scope in four modes — hedging off/on (`HEDGE__ENABLED`, floor 50 ms,
//! ceiling 1 s, budget 5 %) × continuation off/on (`CONTINUE__ENABLED`) — in an order that turns
//! every round, each on fresh mocks and a fresh gateway with the same seeds. One JSON line per
//! run: latency quantiles of whole calls (start to the final event), extra attempts (attempts
//! beyond one per call, as a share of calls), extra upstream requests (the mock's count beyond
//! one per call: what an upstream bills at least the prompt of), hedges sent and won,
//! continuations, the cost overhead (the tokens the upstreams bill, estimated — what the answers
//! reported, plus each cut attempt's prompt and delivered deltas, which its stream never
//! reported, plus each hedge loser's prompt — over `calls` uncut answers of 20 tokens: a
//! continuation pays the prefix again as input), calls failed and those failed by a cut stream,
//! and what was still held once the
//! run was idle (leases, pacer slots, probes, upstream requests: all 0 when nothing leaked).
//! Then one line with the medians of the per-round ratios, hedging on/off with continuation off
//! (p99, p999), of the extra attempts with hedging on, and of the calls failed by cut streams
//! with continuation off and on.

use std::time::{Duration, Instant};

use futures::StreamExt;
use polygateway::config::Settings;
use polygateway::{CallOptions, ChatEvent, Gateway, GatewayError, Message};
use polygateway_testkit::mock_llm::{Behaviour, MockUpstream, MOCK_PROMPT_TOKENS};
use rand::{Rng, SeedableRng};
use serde_json::json;

const SOURCES: usize = 4;

fn healthy(ttft: Duration) -> Behaviour {
    Behaviour::Healthy {
        ttft,
        inter_token: Duration::from_millis(2),
        chunks: 8,
        // 40 characters: the mock streams them as 8 deltas of 5.
        content: "a streamed answer: eight pieces of five.".into(),
    }
}

/// The behaviour of each source: every one slow for 2 % of its requests (drawn per request),
/// one of them also cutting 1 % of its streams half-way.
fn behaviours(seed: u64) -> Vec<Behaviour> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let cut = rng.random_range(0..SOURCES);
    (0..SOURCES)
        .map(|i| {
            let sometimes_slow = Behaviour::Mix {
                failure_rate: 0.02,
                failure: Box::new(healthy(Duration::from_millis(2_000))),
                healthy: Box::new(healthy(Duration::from_millis(20))),
                seed: seed ^ (0x51 + i as u64),
            };
            if i == cut {
                Behaviour::Mix {
                    failure_rate: 0.01,
                    failure: Box::new(Behaviour::CutAfter {
                        deltas: CUT_AT as usize,
                        answer: Box::new(healthy(Duration::from_millis(20))),
                    }),
                    healthy: Box::new(sometimes_slow),
                    seed: seed ^ 0xc7,
                }
            } else {
                sometimes_slow
            }
        })
        .collect()
}

/// Deltas of an answer, and those a cut stream delivers.
const DELTAS: u64 = 8;
const CUT_AT: u64 = 4;
/// Tokens an uncut answer reports: the mock's prompt and one per delta.
const UNCUT_TOKENS: u64 = MOCK_PROMPT_TOKENS + DELTAS;

/// A run's mode.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Mode {
    hedge: bool,
    continuation: bool,
}

fn settings(mocks: &[MockUpstream], mode: Mode) -> Settings {
    let mut map = polygateway_testkit::mock_env();
    for (i, mock) in mocks.iter().enumerate() {
        let p = format!("LLM__DEEPSEEK__{}", i + 1);
        map.insert(format!("{p}__BASE_URL"), mock.base_url());
        map.insert(format!("{p}__API_KEY"), format!("sk-tail-{i}"));
        map.insert(format!("{p}__MODEL"), "tail-model".into());
        map.insert(format!("{p}__TIMEOUT_S"), "30".into());
        map.insert(format!("{p}__TTFT_TIMEOUT_S"), "10".into());
        map.insert(format!("{p}__INTER_TOKEN_TIMEOUT_S"), "5".into());
    }
    map.insert("LLM__RETRY__BACKOFF_BASE_S".into(), "0.01".into());
    map.insert("LLM__RETRY__BACKOFF_MAX_S".into(), "0.05".into());
    if mode.hedge {
        map.insert("LLM__HEDGE__ENABLED".into(), "true".into());
        map.insert("LLM__HEDGE__FLOOR_S".into(), "0.05".into());
        map.insert("LLM__HEDGE__CEILING_S".into(), "1".into());
    }
    if mode.continuation {
        map.insert("LLM__CONTINUE__ENABLED".into(), "true".into());
    }
    Settings::from_map(&map).expect("valid settings")
}

/// One streaming call: its wall time, the tokens its answer reported, and how it failed (if it
/// did).
async fn one_call(gw: Gateway) -> (Duration, u64, Option<GatewayError>) {
    let started = Instant::now();
    let mut stream = match gw.chat_stream(vec![Message::user("tail")], CallOptions::new()) {
        Ok(stream) => stream,
        Err(e) => return (started.elapsed(), 0, Some(e)),
    };
    let mut failure = None;
    let mut tokens = None;
    while let Some(item) = stream.next().await {
        match item {
            Ok(ChatEvent::Done(answer)) => {
                tokens = Some(answer.prompt_tokens + answer.completion_tokens);
            }
            Ok(_) => {}
            Err(e) => failure = Some(e),
        }
    }
    if tokens.is_none() && failure.is_none() {
        failure = Some(GatewayError::Shutdown(
            "the stream ended without an answer".into(),
        ));
    }
    (started.elapsed(), tokens.unwrap_or(0), failure)
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    let rank = ((sorted.len() as f64) * q).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

struct Run {
    p99_ms: f64,
    p999_ms: f64,
    extra_attempts: f64,
    cut: u64,
}

async fn run(calls: usize, seed: u64, mode: Mode, round: usize) -> Run {
    let mut mocks = Vec::new();
    for behaviour in behaviours(seed) {
        mocks.push(MockUpstream::start(behaviour).await);
    }
    let gw = Gateway::from_settings(settings(&mocks, mode), "LLM")
        .await
        .expect("the gateway starts");
    let mut tasks = Vec::with_capacity(calls);
    let started = Instant::now();
    for i in 0..calls {
        // Callers arrive 2 ms apart.
        let at = started + Duration::from_millis(2 * i as u64);
        tokio::time::sleep_until(at.into()).await;
        tasks.push(tokio::spawn(one_call(gw.clone())));
    }
    let mut latencies = Vec::with_capacity(calls);
    let (mut failed, mut cut, mut tokens) = (0u64, 0u64, 0u64);
    for task in tasks {
        let (took, reported, failure) = task.await.expect("the caller task");
        latencies.push(took.as_secs_f64() * 1e3);
        tokens += reported;
        if let Some(e) = failure {
            failed += 1;
            if matches!(e, GatewayError::StreamInterrupted { .. }) {
                cut += 1;
            }
        }
    }
    latencies.sort_by(f64::total_cmp);
    // Idle: every loser's request let go, every slot, lease and probe back.
    let mut held = (u64::MAX, u32::MAX, usize::MAX, usize::MAX);
    for _ in 0..250 {
        let sources = gw.sources("LLM").await.expect("scope LLM");
        held = (
            gw.leases_held("LLM").await.expect("scope LLM"),
            sources.iter().map(|s| s.in_flight).sum(),
            sources.iter().filter(|s| s.probe_held).count(),
            mocks.iter().map(MockUpstream::in_flight).sum(),
        );
        if held == (0, 0, 0, 0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let sources = gw.sources("LLM").await.expect("scope LLM");
    let attempts: u64 = sources.iter().map(|s| s.attempts).sum();
    let hedges: u64 = sources.iter().map(|s| s.hedges).sum();
    let hedges_won: u64 = sources.iter().map(|s| s.hedges_won).sum();
    let continuations: u64 = sources.iter().map(|s| s.continuations).sum();
    // What the upstreams bill, estimated: the tokens the answers reported (a continued one: the
    // continuation's, its prompt holding the prefix again), each cut attempt's prompt and the
    // deltas it delivered (unreported: its usage frame never came), and each hedge loser's
    // prompt (cancelled before its first token).
    let billed = tokens
        + (continuations + cut) * (MOCK_PROMPT_TOKENS + CUT_AT)
        + hedges * MOCK_PROMPT_TOKENS;
    let requests: u64 = mocks.iter().map(|m| m.counts().chat).sum();
    let calls_f = calls as f64;
    let extra_attempts = (attempts as f64 - calls_f) / calls_f;
    let line = json!({
        "example": "tail",
        "round": round,
        "hedging": mode.hedge,
        "continuation": mode.continuation,
        "calls": calls,
        "p50_ms": quantile(&latencies, 0.50),
        "p99_ms": quantile(&latencies, 0.99),
        "p999_ms": quantile(&latencies, 0.999),
        "max_ms": latencies.last().copied().unwrap_or(0.0),
        "extra_attempts_share": extra_attempts,
        "extra_upstream_requests_share": (requests as f64 - calls_f) / calls_f,
        "hedges_sent": hedges,
        "hedges_won": hedges_won,
        "continuations": continuations,
        "cost_overhead": billed as f64 / (calls as u64 * UNCUT_TOKENS) as f64 - 1.0,
        "failed": failed,
        "failed_by_cut_stream": cut,
        "held_at_end": {"leases": held.0, "pacer_slots": held.1, "probes": held.2, "upstream_requests": held.3},
    });
    println!("{line}");
    gw.shutdown().await;
    for mock in mocks {
        mock.shutdown().await;
    }
    Run {
        p99_ms: quantile(&latencies, 0.99),
        p999_ms: quantile(&latencies, 0.999),
        extra_attempts,
        cut,
    }
}

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

#[tokio::main]
async fn main() {
    let calls = arg("--calls", 1024) as usize;
    let rounds = arg("--rounds", 3) as usize;
    let seed = arg("--seed", 47);
    let modes = [(false, false), (true, false), (false, true), (true, true)].map(
        |(hedge, continuation)| Mode {
            hedge,
            continuation,
        },
    );
    let (mut ratios, mut tail_ratios, mut extra) = (Vec::new(), Vec::new(), Vec::new());
    let (mut cut_off, mut cut_on) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        // Turn the order every round, so drift on a shared machine lands on every mode.
        let mut runs: Vec<Option<Run>> = (0..modes.len()).map(|_| None).collect();
        for k in 0..modes.len() {
            let i = (k + round) % modes.len();
            runs[i] = Some(run(calls, seed + round as u64, modes[i], round).await);
        }
        let [plain, hedged, continued, _both] = [0, 1, 2, 3].map(|i| runs[i].take().expect("ran"));
        ratios.push(hedged.p99_ms / plain.p99_ms);
        tail_ratios.push(hedged.p999_ms / plain.p999_ms);
        extra.push(hedged.extra_attempts);
        cut_off.push(plain.cut as f64);
        cut_on.push(continued.cut as f64);
    }
    println!(
        "{}",
        json!({
            "example": "tail",
            "summary": true,
            "rounds": rounds,
            "p99_ratio_on_off_median": median(ratios),
            "p999_ratio_on_off_median": median(tail_ratios),
            "extra_attempts_share_on_median": median(extra),
            "failed_by_cut_stream_continuation_off_median": median(cut_off),
            "failed_by_cut_stream_continuation_on_median": median(cut_on),
        })
    );
}
