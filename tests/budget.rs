//! Spend budgets end to end (docs/behaviour.md §5.8): the gate charges exactly what telemetry
//! records (SQLite), an exhausted budget refuses without reaching the upstream and says when it
//! resets, overshoot stays within the calls in flight, the server answers 429 with the budget in
//! headers, bad configuration is refused naming the key, and two gateways on one Redis share a
//! budget. The gate itself (memory and Redis) is covered by the contract suite (tests/contract,
//! `budget_contract_*`).

mod server_support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, SystemTime};

use polygateway::config::{ConfigError, Settings};
use polygateway::{BudgetStatus, CallOptions, Gateway, GatewayError, Message, UnavailableReason};
use polygateway_testkit::{mock_settings, Behaviour, MockUpstream};
use server_support::*;

/// The mock's healthy answer is 12 prompt + 4 completion tokens; at these prices it costs
/// 12 × 1000 + 4 × 2000 = 20 000 micro-units (0.02), and `EST_TOKENS=10` estimates it at
/// 10 × 2000 (the dearer price) = 0.02 as well.
const PRICES: &str = r#"{"test-model": {"input_per_1m": 1000.0, "output_per_1m": 2000.0}}"#;
const CALL_COST: f64 = 0.02;

fn price_file(dir: &Path) -> String {
    let path = dir.join("prices.json");
    std::fs::write(&path, PRICES).unwrap();
    path.display().to_string()
}

fn budget<'a>(list: &'a [BudgetStatus], name: &str) -> &'a BudgetStatus {
    list.iter()
        .find(|b| b.name == name)
        .unwrap_or_else(|| panic!("no budget {name} in {list:?}"))
}

fn refusal(e: &GatewayError) -> &BudgetStatus {
    let u = e.unavailable().unwrap_or_else(|| panic!("{e}"));
    assert_eq!(u.reason, UnavailableReason::BudgetExhausted, "{e}");
    u.budget
        .as_ref()
        .expect("a budget refusal names its budget")
}

/// Seconds until the next 00:00 UTC.
fn until_midnight_s() -> f64 {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    86_400.0 - now % 86_400.0
}

async fn chat(gw: &Gateway, scope: &str, tenant: &str) -> Result<f64, GatewayError> {
    let handle = gw.chat_scope(scope)?;
    let options = CallOptions::new().tenant_id(tenant);
    let answer = handle.chat_with(vec![Message::user("hi")], options).await?;
    Ok(answer.cost.expect("priced"))
}

#[tokio::test]
async fn the_gate_charges_what_telemetry_records() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("t.sqlite");
    let prices = price_file(dir.path());
    let llm = MockUpstream::start(Behaviour::healthy()).await;
    // JUDGE's upstream rejects every request: those calls fail and must cost nothing.
    let judge = MockUpstream::start(Behaviour::BadRequest).await;
    let settings = mock_settings(
        &[("LLM", &llm.base_url()), ("JUDGE", &judge.base_url())],
        &[
            // An estimate above the real cost (16 tokens at the dearer price = 0.032): every
            // settle refunds.
            ("LLM__OPENAI__1__EST_TOKENS", "16"),
            ("LLM__BUDGET", "1/day"),
            ("JUDGE__BUDGET", "1/hour"),
            ("PGW_TENANT_BUDGETS", "acme=0.5/month"),
            ("PGW_PRICING_PATH", &prices),
            ("PGW_TELEMETRY_BACKEND", "sqlite"),
            ("PGW_TELEMETRY_SQLITE_PATH", &db.display().to_string()),
        ],
    );
    let gw = Gateway::from_settings(settings, "LLM").await.unwrap();
    let mut costs = 0.0;
    for i in 0..15 {
        let tenant = if i % 3 == 0 { "beta" } else { "acme" };
        costs += chat(&gw, "LLM", tenant).await.unwrap();
    }
    for _ in 0..3 {
        let e = chat(&gw, "JUDGE", "acme").await.unwrap_err();
        assert!(matches!(e, GatewayError::RequestRejected { .. }), "{e}");
    }
    let budgets = gw.budgets().await.unwrap();
    gw.shutdown().await;

    let db = rusqlite::Connection::open(&db).unwrap();
    let sum = |filter: &str| -> f64 {
        db.query_row(
            &format!("SELECT COALESCE(SUM(cost), 0) FROM llm_calls WHERE {filter}"),
            [],
            |r| r.get(0),
        )
        .unwrap()
    };
    let llm_spent = budget(&budgets, "scope:LLM").spent;
    let acme_spent = budget(&budgets, "tenant:acme").spent;
    assert!((costs - 15.0 * CALL_COST).abs() < 1e-9, "{costs}");
    // Exact to the micro-unit the gate counts in (each call's cost is a whole number of them).
    let telemetry = sum("1=1");
    assert!(
        (telemetry - llm_spent).abs() < 1e-9,
        "telemetry {telemetry} vs gate {llm_spent}"
    );
    assert!((sum("tenant_id = 'acme'") - acme_spent).abs() < 1e-9);
    assert!((acme_spent - 10.0 * CALL_COST).abs() < 1e-9, "{acme_spent}");
    // Failed calls: rows without cost, and the estimate refunded in full.
    assert_eq!(budget(&budgets, "scope:JUDGE").spent, 0.0);
    let judge_rows: i64 = db
        .query_row(
            "SELECT COUNT(*) FROM llm_calls WHERE error IS NOT NULL AND cost IS NULL",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(judge_rows >= 3, "{judge_rows}");
}

#[tokio::test]
async fn an_exhausted_budget_refuses_without_reaching_the_upstream() {
    let dir = tempfile::tempdir().unwrap();
    let prices = price_file(dir.path());
    let mock = MockUpstream::start(Behaviour::healthy()).await;
    let settings = mock_settings(
        &[("LLM", &mock.base_url())],
        &[
            ("LLM__OPENAI__1__EST_TOKENS", "10"),
            ("LLM__BUDGET", "0.06/day"),
            ("PGW_PRICING_PATH", &prices),
        ],
    );
    let gw = Gateway::from_settings(settings, "LLM").await.unwrap();
    let mut admitted = 0;
    let mut refused = Vec::new();
    for _ in 0..10 {
        match chat(&gw, "LLM", "acme").await {
            Ok(_) => admitted += 1,
            Err(e) => refused.push(e),
        }
    }
    assert_eq!((admitted, refused.len()), (3, 7));
    assert_eq!(
        mock.counts().chat,
        3,
        "refused calls never reach the upstream"
    );
    let e = &refused[0];
    let b = refusal(e);
    assert_eq!((b.name.as_str(), b.period.as_str()), ("scope:LLM", "day"));
    assert!((b.spent - 0.06).abs() < 1e-9 && b.remaining == 0.0, "{b:?}");
    let retry = e.unavailable().unwrap().retry_after_s;
    assert!(
        (retry - until_midnight_s()).abs() < 5.0,
        "resets at 00:00 UTC: {retry}"
    );
    assert!(e.to_string().contains("budget_exhausted"), "{e}");
    gw.shutdown().await;
}

/// With no estimate (`EST_TOKENS` unset) every call in flight is admitted while the budget has
/// room, so the window ends over its limit by at most those calls' cost; with an estimate equal
/// to the real cost there is no overshoot at all.
#[tokio::test]
async fn overshoot_is_at_most_the_calls_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let prices = price_file(dir.path());
    for (est, limit, in_flight) in [(None, 0.03, 8), (Some("10"), 0.06, 8)] {
        // Slow enough that all calls are in flight before any settles (a reservation would have
        // to wait 2 s behind the others to see two settled calls).
        let mock = MockUpstream::start(Behaviour::Slow {
            delay: Duration::from_secs(1),
        })
        .await;
        let mut extra = vec![
            ("LLM__BUDGET", format!("{limit}/day")),
            ("PGW_PRICING_PATH", prices.clone()),
        ];
        if let Some(est) = est {
            extra.push(("LLM__OPENAI__1__EST_TOKENS", est.to_string()));
        }
        let extra: Vec<(&str, &str)> = extra.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let gw = Gateway::from_settings(mock_settings(&[("LLM", &mock.base_url())], &extra), "LLM")
            .await
            .unwrap();
        let calls = (0..in_flight).map(|_| chat(&gw, "LLM", "t"));
        let results = futures::future::join_all(calls).await;
        let admitted = results.iter().filter(|r| r.is_ok()).count();
        let spent = budget(&gw.budgets().await.unwrap(), "scope:LLM").spent;
        assert!(
            (spent - admitted as f64 * CALL_COST).abs() < 1e-9,
            "{spent}"
        );
        if est.is_none() {
            assert_eq!(
                admitted, in_flight,
                "nothing estimated: every call in flight fits"
            );
            assert!(
                spent > limit && spent <= limit + in_flight as f64 * CALL_COST,
                "{spent}"
            );
        } else {
            assert_eq!(
                admitted, 3,
                "the estimate is the real cost: exactly the limit"
            );
            assert!((spent - limit).abs() < 1e-9, "no overshoot: {spent}");
        }
        // Once over (or at) the limit nothing more is admitted in this window.
        refusal(&chat(&gw, "LLM", "t").await.unwrap_err());
        assert_eq!(mock.counts().chat as usize, admitted);
        gw.shutdown().await;
    }
}

#[tokio::test]
async fn the_server_answers_429_with_the_budget_in_headers() {
    let dir = tempfile::tempdir().unwrap();
    let prices = price_file(dir.path());
    let mock = MockUpstream::start(Behaviour::healthy()).await;
    let settings = mock_settings(
        &[("LLM", &mock.base_url())],
        &[
            ("LLM__OPENAI__1__EST_TOKENS", "10"),
            ("PGW_PRICING_PATH", &prices),
            ("PGW_SERVER_PUBLIC_STATUS", "true"),
        ],
    );
    let keys = key_file(&[key_entry("ci", KEY, &["*"], r#""budget": "0.04/hour""#)]);
    let server = start_with_keys(settings, keys).await;
    let post = || {
        reqwest::Client::new()
            .post(server.url("/v1/chat/completions"))
            .bearer_auth(KEY)
            .json(&chat_body("LLM", false))
            .send()
    };
    for _ in 0..2 {
        assert_eq!(post().await.unwrap().status(), 200);
    }
    let refused = post().await.unwrap();
    assert_eq!(refused.status(), 429);
    let h = refused.headers().clone();
    assert_eq!(h["x-pgw-budget-name"], "vkey:ci");
    assert_eq!(h["x-pgw-budget-limit"], "0.040000");
    assert_eq!(h["x-pgw-budget-remaining"], "0.000000");
    let reset: u64 = h["x-pgw-budget-reset-s"].to_str().unwrap().parse().unwrap();
    assert!((1..=3_600).contains(&reset), "{reset}");
    assert_eq!(h["retry-after"].to_str().unwrap(), reset.to_string());
    let body: serde_json::Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["type"], "insufficient_quota");
    assert_eq!(body["error"]["code"], "budget_exhausted");
    assert_eq!(mock.counts().chat, 2);
    // The status page shows the key's spend against its limit.
    let page = reqwest::get(server.url("/"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        page.contains("vkey:ci") && page.contains("0.040000"),
        "{page}"
    );
    // The dashboard's data: the key's budget is spent, so it is exhausted now; its spend rate
    // is what the last 15 minutes charged it.
    let status: serde_json::Value = reqwest::get(server.url("/status.json"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let budget = status["budgets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == "vkey:ci")
        .unwrap_or_else(|| panic!("{status}"));
    assert_eq!(budget["exhausted_in_s"], 0.0, "{budget}");
    assert!(budget["spend_per_s"].as_f64().unwrap() > 0.0, "{budget}");
    let ci = status["series"]["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["name"] == "ci")
        .unwrap_or_else(|| panic!("{status}"));
    assert!(ci["spend"].as_f64().unwrap() >= 0.04 - 1e-9, "{ci}");
}

fn parse(pairs: &[(&str, &str)]) -> Result<Settings, ConfigError> {
    let mut env: BTreeMap<String, String> = [
        ("PGW_LIMITER_BACKEND", "memory"),
        ("PGW_BREAKER_BACKEND", "memory"),
        ("LLM__OPENAI__1__BASE_URL", "http://127.0.0.1:9/v1"),
        ("LLM__OPENAI__1__MODEL", "test-model"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    env.extend(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    Settings::from_map(&env)
}

#[tokio::test]
async fn bad_budgets_are_refused_naming_key_value_and_form() {
    let e = parse(&[("LLM__BUDGET", "5/week")]).unwrap_err();
    let ConfigError::InvalidValue {
        key,
        value,
        expected,
    } = &e
    else {
        panic!("{e}")
    };
    assert_eq!(
        (key.as_str(), value.as_str()),
        ("LLM__BUDGET", "\"5/week\"")
    );
    assert!(expected.contains("<amount>/<hour|day|month>"), "{expected}");
    let e = parse(&[("PGW_TENANT_BUDGETS", "acme=-1/day")]).unwrap_err();
    assert!(
        e.to_string().contains("PGW_TENANT_BUDGETS (tenant acme)"),
        "{e}"
    );
    let e = parse(&[
        ("EMBED__OPENAI__1__BASE_URL", "http://127.0.0.1:9/v1"),
        ("EMBED__OPENAI__1__MODEL", "e"),
        ("EMBED__BATCH_SIZE", "8"),
        ("EMBED__BUDGET", "1/day"),
    ])
    .unwrap_err();
    assert!(matches!(e, ConfigError::WrongScopeKind { .. }), "{e}");

    // A budget over a scope it cannot price is refused when the gateway is built.
    let settings = parse(&[("LLM__BUDGET", "1/day")]).unwrap();
    let Err(e) = Gateway::from_settings(settings, "LLM").await else {
        panic!("an unpriced budget must be refused")
    };
    let text = e.to_string();
    assert!(
        text.contains("LLM__BUDGET") && text.contains("PGW_PRICING_PATH"),
        "{text}"
    );
}

#[tokio::test]
async fn a_key_budget_that_cannot_be_counted_is_refused_at_start() {
    // Two chat scopes: LLM priced, JUDGE (another model) not.
    let dir = tempfile::tempdir().unwrap();
    let prices = price_file(dir.path());
    let settings = |extra: &[(&str, &str)]| {
        let mut pairs = vec![
            ("PGW_PRICING_PATH", prices.as_str()),
            ("JUDGE__OPENAI__1__BASE_URL", "http://127.0.0.1:9/v1"),
            ("JUDGE__OPENAI__1__MODEL", "a-model-without-a-price"),
        ];
        pairs.extend_from_slice(extra);
        parse(&pairs).unwrap()
    };
    let keys = |scopes: &[&str]| {
        polygateway::server::KeyStore::from_json(&key_file(&[
            key_entry("ops", KEY, &["*"], ""),
            key_entry("ci", "sk-ci", scopes, r#""budget": "5/day""#),
        ]))
        .unwrap()
    };
    let gw = Gateway::from_settings(settings(&[]), "LLM").await.unwrap();
    // A budget on a key that may call the unpriced scope: refused, naming key, budget and scope.
    for scopes in [&["*"][..], &["LLM", "JUDGE"]] {
        let err = polygateway::server::Server::new(gw.clone(), keys(scopes)).unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, GatewayError::Config(_)), "{err:?}");
        assert!(
            text.contains("key ci: budget 5/day")
                && text.contains("JUDGE")
                && text.contains("PGW_PRICING_PATH"),
            "{text}"
        );
    }
    // The same budget on a key kept to priced scopes starts.
    assert!(polygateway::server::Server::new(gw.clone(), keys(&["LLM"])).is_ok());
    gw.shutdown().await;

    // A tenant budget reaches every chat scope: refused when the gateway is built.
    let with_tenants = settings(&[("PGW_TENANT_BUDGETS", "acme=5/day")]);
    let Err(e) = Gateway::from_settings(with_tenants, "LLM").await else {
        panic!("a tenant budget over an unpriced scope must be refused")
    };
    let text = e.to_string();
    assert!(
        text.contains("PGW_TENANT_BUDGETS") && text.contains("JUDGE"),
        "{text}"
    );
}

#[path = "../examples/fairness/budget.rs"]
mod fairness_budget;

/// The benchmark's `budget` scenario, bounded: a budget of 20 calls, 200 offered by 16 callers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_budget_scenario_admits_exactly_the_budget() {
    let line = fairness_budget::run(20, 16).await;
    println!("{line}");
    assert_eq!(line["admitted"], 20, "{line}");
    assert_eq!(line["refused_budget"], 180, "{line}");
    assert_eq!(line["other_errors"], 0, "{line}");
    assert_eq!(line["upstream_served"], 20, "{line}");
    let (spent, budget) = (
        line["spent"].as_f64().unwrap(),
        line["budget"].as_f64().unwrap(),
    );
    assert!((spent - budget).abs() < 1e-9, "{line}");
    assert!(
        (line["answered_cost"].as_f64().unwrap() - spent).abs() < 1e-9,
        "{line}"
    );
}

/// Two gateways on one Redis (two processes, as far as the gate can tell) share one budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateways_sharing_redis_share_the_budget() {
    let url =
        std::env::var("PGW_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let probe = polygateway::redis::RedisGovernance::connect(
        &polygateway::config::Secret::new(url.clone()),
        "pgw",
    )
    .await;
    let Ok(probe) = probe else {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "Redis is required under CI=true"
        );
        eprintln!("\n!!!!! SKIP: Redis unreachable; the shared-budget test did NOT run !!!!!\n");
        return;
    };
    probe.close().await;
    let dir = tempfile::tempdir().unwrap();
    let prices = price_file(dir.path());
    let mock = MockUpstream::start(Behaviour::healthy()).await;
    // A scope name of its own: the budget key (`pgw:{budget}:B:scope:<name>`) is unique per run.
    let scope = format!("B{}", uuid::Uuid::new_v4().simple()).to_uppercase();
    let model = format!("{scope}__OPENAI__1__EST_TOKENS");
    let budget_key = format!("{scope}__BUDGET");
    let extra = [
        (model.as_str(), "10"),
        (budget_key.as_str(), "0.08/day"),
        ("PGW_PRICING_PATH", prices.as_str()),
        ("PGW_LIMITER_BACKEND", "redis"),
        ("PGW_BREAKER_BACKEND", "redis"),
        ("REDIS_URL", url.as_str()),
    ];
    let mut gateways = Vec::new();
    for _ in 0..2 {
        let settings = mock_settings(&[(scope.as_str(), &mock.base_url())], &extra);
        gateways.push(Gateway::from_settings(settings, &scope).await.unwrap());
    }
    let mut admitted = 0;
    for i in 0..10 {
        if chat(&gateways[i % 2], &scope, "t").await.is_ok() {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 4, "one budget of four calls across both gateways");
    for gw in &gateways {
        let spent = budget(&gw.budgets().await.unwrap(), &format!("scope:{scope}")).spent;
        assert!(
            (spent - 0.08).abs() < 1e-9,
            "both read the shared spend: {spent}"
        );
    }
    for gw in gateways {
        gw.shutdown().await;
    }
}
