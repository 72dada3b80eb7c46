//! The `polygateway` command line, run as a real process against the mock upstream.

use std::path::Path;

use polygateway_testkit::mock_llm::{Behaviour, MockUpstream};
use tokio::io::AsyncBufReadExt;
use tokio::process::Command;

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Run the CLI in `dir` with only the given environment (nothing inherited but PATH).
async fn cli(dir: &Path, env: &[(&str, String)], args: &[&str]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_polygateway"))
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .await
        .unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn env_for(base_url: &str) -> Vec<(&'static str, String)> {
    vec![
        ("PGW_LIMITER_BACKEND", "memory".into()),
        ("PGW_BREAKER_BACKEND", "memory".into()),
        ("LLM__OPENAI__1__BASE_URL", base_url.into()),
        ("LLM__OPENAI__1__API_KEY", "sk-cli-secret-value".into()),
        ("LLM__OPENAI__1__MODEL", "cli-model".into()),
    ]
}

#[tokio::test]
async fn config_check_explains_a_broken_env_file_precisely() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join(".env"),
        "PGW_LIMITER_BACKEND=memory\nPGW_BREAKER_BACKEND=memory\n\
         LLM__OPENAI__1__BASE_URL=http://127.0.0.1:9/v1\nLLM__OPENAI__1__MODLE=x\n",
    )
    .unwrap();
    let run = cli(dir.path(), &[], &["config", "check"]).await;
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(
        run.stderr.contains("LLM__OPENAI__1__MODLE"),
        "{}",
        run.stderr
    );

    let empty = tempfile::tempdir().unwrap();
    let run = cli(empty.path(), &[], &["config", "check"]).await;
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.contains("no scope is configured"),
        "{}",
        run.stderr
    );
}

#[tokio::test]
async fn config_check_prints_the_effective_configuration_without_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let run = cli(
        dir.path(),
        &env_for("http://127.0.0.1:9/v1"),
        &["config", "check"],
    )
    .await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("scope LLM (Chat)"), "{}", run.stdout);
    assert!(run.stdout.contains("openai_1"));
    assert!(run.stdout.contains("key=set"));
    assert!(!run.stdout.contains("sk-cli-secret-value"));
    assert!(
        run.stdout.contains("structured=json_schema (provider)"),
        "{}",
        run.stdout
    );

    // The override is shown with where it comes from.
    let mut env = env_for("http://127.0.0.1:9/v1");
    env.push(("LLM__OPENAI__1__STRUCTURED_MODE", "prompt".into()));
    let run = cli(dir.path(), &env, &["config", "check"]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.contains("structured=prompt (STRUCTURED_MODE)"),
        "{}",
        run.stdout
    );
}

#[tokio::test]
async fn chat_health_and_sources_against_the_mock() {
    let mock = MockUpstream::start(Behaviour::healthy_with("hello from the mock")).await;
    let dir = tempfile::tempdir().unwrap();
    let env = env_for(&mock.base_url());

    let run = cli(dir.path(), &env, &["chat", "hi there"]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.starts_with("hello from the mock"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("source openai_1"));
    assert_eq!(mock.last_request().unwrap().body["stream"], true);
    let run = cli(dir.path(), &env, &["chat", "--no-stream", "hi there"]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.starts_with("hello from the mock"));
    assert_eq!(mock.last_request().unwrap().body["stream"], false);

    let run = cli(dir.path(), &env, &["health"]).await;
    assert_eq!(run.code, 0, "{}", run.stdout);
    assert!(run.stdout.contains("openai_1") && run.stdout.contains(" up"));

    let run = cli(dir.path(), &env, &["sources", "LLM", "--probe", "2"]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let row = run
        .stdout
        .lines()
        .find(|l| l.starts_with("openai_1"))
        .unwrap();
    assert!(row.contains("closed"), "{row}");
    assert!(row.ends_with("json_schema"), "{row}");

    let down = env_for("http://127.0.0.1:9/v1");
    let run = cli(dir.path(), &down, &["health", "LLM"]).await;
    assert_eq!(run.code, 1);
    assert!(run.stdout.contains("DOWN"), "{}", run.stdout);
}

/// Issue #21: `chat` with an unreachable PostgreSQL said nothing about telemetry.
#[tokio::test]
async fn chat_warns_in_one_line_when_telemetry_is_degraded() {
    let mock = MockUpstream::start(Behaviour::healthy_with("answer")).await;
    let dir = tempfile::tempdir().unwrap();
    let mut env = env_for(&mock.base_url());
    env.push(("PGW_TELEMETRY_BACKEND", "postgres".into()));
    env.push((
        "PGW_TELEMETRY_PG_DSN",
        "postgres://app:pg-secret-pw@127.0.0.1:9/telemetry".into(),
    ));
    env.push(("PGW_TELEMETRY_PG_WRITE_TIMEOUT_S", "1".into()));
    let run = cli(dir.path(), &env, &["chat", "hi"]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.starts_with("answer"), "{}", run.stdout);
    let warnings: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.starts_with("polygateway: warning: telemetry degraded"))
        .collect();
    assert_eq!(warnings.len(), 1, "{}", run.stderr);
    assert!(!run.stderr.contains("pg-secret-pw"), "{}", run.stderr);

    // Healthy telemetry: no warning.
    let run = cli(dir.path(), &env_for(&mock.base_url()), &["chat", "hi"]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(!run.stderr.contains("warning: telemetry"), "{}", run.stderr);
}

#[tokio::test]
async fn a_failed_chat_prints_each_structured_field_once() {
    let mock = MockUpstream::start(Behaviour::Unauthorized).await;
    let dir = tempfile::tempdir().unwrap();
    let mut env = env_for(&mock.base_url());
    env.push(("LLM__RETRY__MAX_ATTEMPTS", "1".into()));
    let run = cli(dir.path(), &env, &["chat", "hi"]).await;
    assert_eq!(run.code, 1, "{}", run.stdout);
    for once in ["retry after", "last error", "attempt(s) failed", "401"] {
        assert_eq!(
            run.stderr.matches(once).count(),
            1,
            "{once:?} in {}",
            run.stderr
        );
    }
    assert!(!run.stderr.contains("sk-cli-secret-value"));
}

#[tokio::test]
async fn schema_sql_and_retention() {
    let dir = tempfile::tempdir().unwrap();
    let run = cli(dir.path(), &[], &["schema-sql", "postgres"]).await;
    assert_eq!(run.code, 0);
    assert!(
        run.stdout.contains("CREATE TABLE IF NOT EXISTS llm_calls"),
        "{}",
        run.stdout
    );

    let db = dir.path().join("t.sqlite");
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute_batch(&polygateway::telemetry::create_table_sql(
        polygateway::telemetry::SchemaBackend::Sqlite,
        "llm_calls",
    ))
    .unwrap();
    conn.execute_batch(
        "INSERT INTO llm_calls (call_id, created_at) VALUES ('old', datetime('now', '-40 days'));
         INSERT INTO llm_calls (call_id) VALUES ('new');",
    )
    .unwrap();
    let db_s = db.display().to_string();
    let args = ["retention", "--sqlite", &db_s, "--older-than-days", "30"];
    let run = cli(dir.path(), &[], &args).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("dry run: 1 rows"), "{}", run.stdout);
    let mut apply = args.to_vec();
    apply.push("--apply");
    let run = cli(dir.path(), &[], &apply).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let left: i64 = conn
        .query_row("SELECT COUNT(*) FROM llm_calls", [], |r| r.get(0))
        .unwrap();
    assert_eq!(left, 1);
}

#[cfg(feature = "server")]
#[tokio::test]
async fn key_new_and_key_hash_print_a_key_file_hash_and_serve_needs_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let run = cli(dir.path(), &[], &["key", "new"]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let key = run
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("key:  "))
        .unwrap();
    let hash = run
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("hash: "))
        .unwrap();
    let rehash = cli(dir.path(), &[], &["key", "hash", key]).await;
    assert_eq!(rehash.code, 0, "{}", rehash.stderr);
    // Both hashes verify the key (fresh salts: the strings differ).
    assert_ne!(rehash.stdout.trim(), hash);
    for stored in [hash, rehash.stdout.trim()] {
        let json = format!(r#"{{"keys": [{{"name": "k", "hash": "{stored}", "scopes": ["*"]}}]}}"#);
        let keys = polygateway::server::KeyStore::from_json(&json).unwrap();
        assert!(keys.authenticate(key).is_some());
    }
    // `serve` refuses to start without a keys file, naming the key.
    let mock = MockUpstream::start(Behaviour::healthy()).await;
    let run = cli(dir.path(), &env_for(&mock.base_url()), &["serve"]).await;
    assert_eq!(run.code, 1);
    assert!(
        run.stderr.contains("PGW_SERVER_KEYS_FILE"),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains("sk-cli-secret-value"));

    // A key budget on a scope without prices: `serve` exits at start with the reason, instead
    // of answering each of that key's calls with a configuration error.
    let keys_path = dir.path().join("keys.json");
    let json = format!(
        r#"{{"keys": [{{"name": "ci", "hash": "{}", "scopes": ["*"], "budget": "5/day"}}]}}"#,
        polygateway::server::hash_key(key)
    );
    std::fs::write(&keys_path, json).unwrap();
    let mut env = env_for(&mock.base_url());
    env.push(("PGW_SERVER_KEYS_FILE", keys_path.display().to_string()));
    env.push(("PGW_SERVER_BIND", "127.0.0.1:0".into()));
    let run = cli(dir.path(), &env, &["serve"]).await;
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains("key ci: budget 5/day") && run.stderr.contains("PGW_PRICING_PATH"),
        "{}",
        run.stderr
    );
}

/// `serve` runs on `PGW_SERVER_WORKERS` worker threads and says so when it starts; a count that
/// is not a positive whole number is refused at start, naming the key.
#[tokio::test]
async fn serve_runs_on_the_worker_threads_it_is_given() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockUpstream::start(Behaviour::healthy()).await;
    let keys_path = dir.path().join("keys.json");
    let hash = polygateway::server::hash_key("pgw-workers-test-key");
    std::fs::write(
        &keys_path,
        format!(r#"{{"keys": [{{"name": "k", "hash": "{hash}", "scopes": ["*"]}}]}}"#),
    )
    .unwrap();
    let mut env = env_for(&mock.base_url());
    env.push(("PGW_SERVER_KEYS_FILE", keys_path.display().to_string()));
    env.push(("PGW_SERVER_BIND", "127.0.0.1:0".into()));

    let mut refused = env.clone();
    refused.push(("PGW_SERVER_WORKERS", "0".into()));
    let run = cli(dir.path(), &refused, &["serve"]).await;
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.stderr.contains("PGW_SERVER_WORKERS"), "{}", run.stderr);

    for (workers, says) in [("1", "; 1 worker thread)"), ("3", "; 3 worker threads)")] {
        let mut env = env.clone();
        env.push(("PGW_SERVER_WORKERS", workers.into()));
        let mut child = Command::new(env!("CARGO_BIN_EXE_polygateway"))
            .arg("serve")
            .current_dir(dir.path())
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let first = tokio::time::timeout(std::time::Duration::from_secs(60), lines.next_line())
            .await
            .expect("serve prints its start line")
            .unwrap()
            .unwrap_or_default();
        assert!(
            first.starts_with("polygateway serve: listening on http://127.0.0.1:")
                && first.contains(says),
            "PGW_SERVER_WORKERS={workers}: {first}"
        );
        child.kill().await.unwrap();
    }
}

fn batch_input(dir: &Path, n: usize, bad: bool) -> std::path::PathBuf {
    let mut text = String::new();
    for i in 0..n {
        text.push_str(
            &serde_json::json!({
                "custom_id": format!("job-{i}"),
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {"model": "gpt-4o-mini",
                         "messages": [{"role": "user", "content": format!("item job-{i}")}]},
            })
            .to_string(),
        );
        text.push('\n');
    }
    if bad {
        text.push_str("{\"custom_id\": \"broken\"\n");
    }
    let path = dir.join("input.jsonl");
    std::fs::write(&path, text).unwrap();
    path
}

/// custom_id → output lines carrying it.
fn output_ids(path: &Path) -> std::collections::BTreeMap<String, usize> {
    let mut ids = std::collections::BTreeMap::new();
    for line in std::fs::read_to_string(path).unwrap().lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let id = v["custom_id"].as_str().unwrap_or("<none>").to_string();
        *ids.entry(id).or_default() += 1;
    }
    ids
}

/// custom_id → chat requests the mock received for it.
fn sent_ids(mock: &MockUpstream) -> std::collections::BTreeMap<String, usize> {
    let mut ids = std::collections::BTreeMap::new();
    for r in mock.requests() {
        if let Some(content) = r.body["messages"][0]["content"].as_str() {
            let id = content.trim_start_matches("item ").to_string();
            *ids.entry(id).or_default() += 1;
        }
    }
    ids
}

fn journalled(path: &Path) -> Vec<String> {
    let Ok(db) = rusqlite::Connection::open(path) else {
        return Vec::new();
    };
    let Ok(mut stmt) = db.prepare("SELECT custom_id FROM batch_items") else {
        return Vec::new();
    };
    stmt.query_map([], |row| row.get::<_, String>(0))
        .map(|rows| rows.filter_map(Result::ok).collect())
        .unwrap_or_default()
}

fn batch_env(base_url: &str) -> Vec<(&'static str, String)> {
    let mut env = env_for(base_url);
    env.push(("PGW_TELEMETRY_BACKEND", "none".into()));
    env.push(("PGW_SERVER_MODEL_ALIASES", "gpt-4o-mini=LLM".into()));
    env
}

#[tokio::test]
async fn batch_runs_a_file_prints_plain_progress_through_a_pipe_and_resumes_from_its_journal() {
    let mock = MockUpstream::start(Behaviour::healthy_with("done")).await;
    let dir = tempfile::tempdir().unwrap();
    let input = batch_input(dir.path(), 10, true);
    let args = [
        "batch",
        input.to_str().unwrap(),
        "-o",
        "out.jsonl",
        "--progress",
        "plain",
    ];
    let run = cli(dir.path(), &batch_env(&mock.base_url()), &args).await;
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stderr.contains("batch: 11 done of 11 read")
            && run.stderr.contains("calls/s")
            && run.stderr.contains("sources: openai_1 100%"),
        "{}",
        run.stderr
    );
    assert!(
        run.stdout
            .contains("batch finished: 11 results (10 succeeded, 1 errors; 0 from the journal)"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("journal: out.jsonl.journal"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("latency: p50 "), "{}", run.stdout);
    let ids = output_ids(&dir.path().join("out.jsonl"));
    assert_eq!(ids.len(), 11);
    assert!(ids.values().all(|&n| n == 1), "{ids:?}");
    assert!(
        !run.stdout.contains("sk-cli-secret-value") && !run.stderr.contains("sk-cli-secret-value")
    );

    // The same command again: everything answered comes from the journal, nothing is sent.
    let again = cli(dir.path(), &batch_env(&mock.base_url()), &args).await;
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert!(
        again
            .stdout
            .contains("(10 succeeded, 1 errors; 10 from the journal), 0 calls"),
        "{}",
        again.stdout
    );
    assert_eq!(output_ids(&dir.path().join("out.jsonl")).len(), 11);
    assert!(sent_ids(&mock).values().all(|&n| n == 1));
    assert_eq!(sent_ids(&mock).len(), 10);

    // For machines: JSON progress objects on stderr, the summary as one JSON object on stdout.
    let mut json_args = args.to_vec();
    json_args[5] = "json";
    let machine = cli(dir.path(), &batch_env(&mock.base_url()), &json_args).await;
    assert_eq!(machine.code, 0, "{}", machine.stderr);
    let last: serde_json::Value =
        serde_json::from_str(machine.stderr.lines().last().unwrap()).unwrap();
    assert_eq!(
        (last["written"].as_u64(), last["read"].as_u64()),
        (Some(11), Some(11))
    );
    assert_eq!(last["errors"]["invalid_json"], 1);
    assert_eq!(last["total"], 11);
    let summary: serde_json::Value = serde_json::from_str(machine.stdout.trim()).unwrap();
    assert_eq!(summary["complete"], true);
    assert_eq!(
        (
            summary["results"].as_u64(),
            summary["from_journal"].as_u64()
        ),
        (Some(11), Some(10))
    );
    assert_eq!(summary["journal"], "out.jsonl.journal");
}

#[tokio::test]
async fn batch_killed_with_sigkill_resumes_without_resending_journalled_items() {
    let mock = MockUpstream::start(Behaviour::Slow {
        delay: std::time::Duration::from_millis(40),
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let input = batch_input(dir.path(), 60, false);
    let journal = dir.path().join("out.jsonl.journal");
    let args = [
        "batch",
        input.to_str().unwrap(),
        "-o",
        "out.jsonl",
        "--max-concurrency",
        "4",
    ];
    let mut child = Command::new(env!("CARGO_BIN_EXE_polygateway"))
        .args(args)
        .current_dir(dir.path())
        .env_clear()
        .envs(batch_env(&mock.base_url()))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    for _ in 0..600 {
        if journalled(&journal).len() >= 8 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    child.start_kill().unwrap(); // SIGKILL: no chance to flush anything
    child.wait().await.unwrap();
    let answered = journalled(&journal);
    assert!((8..60).contains(&answered.len()), "{}", answered.len());

    let run = cli(dir.path(), &batch_env(&mock.base_url()), &args).await;
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let ids = output_ids(&dir.path().join("out.jsonl"));
    assert_eq!(ids.len(), 60, "every custom_id in the output");
    assert!(ids.values().all(|&n| n == 1), "exactly once: {ids:?}");
    let sent = sent_ids(&mock);
    assert_eq!(sent.len(), 60);
    for id in &answered {
        assert_eq!(
            sent[id], 1,
            "{id} was journalled as answered and sent again"
        );
    }
}

#[tokio::test]
async fn batch_ctrl_c_stops_admitting_and_says_how_to_resume() {
    let mock = MockUpstream::start(Behaviour::Slow {
        delay: std::time::Duration::from_millis(40),
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let input = batch_input(dir.path(), 60, false);
    let journal = dir.path().join("out.jsonl.journal");
    let args = [
        "batch",
        input.to_str().unwrap(),
        "-o",
        "out.jsonl",
        "--max-concurrency",
        "4",
    ];
    let child = Command::new(env!("CARGO_BIN_EXE_polygateway"))
        .args(args)
        .current_dir(dir.path())
        .env_clear()
        .envs(batch_env(&mock.base_url()))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    for _ in 0..600 {
        if journalled(&journal).len() >= 4 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let pid = child.id().unwrap().to_string();
    let sent = std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap();
    assert!(sent.success());
    let out = child.wait_with_output().await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("stopping: no new items"), "{stderr}");
    assert!(
        stderr.contains("to resume") && stderr.contains("--journal"),
        "{stderr}"
    );
    let partial = output_ids(&dir.path().join("out.jsonl"));
    assert!(partial.len() < 60 && partial.len() == journalled(&journal).len());

    let run = cli(dir.path(), &batch_env(&mock.base_url()), &args).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(output_ids(&dir.path().join("out.jsonl")).len(), 60);
    assert!(
        sent_ids(&mock).values().all(|&n| n == 1),
        "{:?}",
        sent_ids(&mock)
    );
}

#[tokio::test]
async fn batch_on_a_terminal_draws_a_live_progress_bar_and_ends_with_the_summary() {
    let mock = MockUpstream::start(Behaviour::Slow {
        delay: std::time::Duration::from_millis(40),
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let input = batch_input(dir.path(), 40, true);
    // `script` runs the command on a pseudo-terminal and copies what it draws to our pipe.
    let command = format!(
        "{} batch {} -o out.jsonl --max-concurrency 2",
        env!("CARGO_BIN_EXE_polygateway"),
        input.display()
    );
    let out = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .current_dir(dir.path())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("TERM", "xterm-256color")
        .envs(batch_env(&mock.base_url()))
        .output()
        .await
        .unwrap();
    let screen = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{screen}");
    // The bar is drawn with done/total (the input's 41 lines, counted up front), then redrawn
    // as items finish: several positions appear before the last.
    let positions: std::collections::BTreeSet<u64> = screen
        .match_indices("/41 (")
        .filter_map(|(at, _)| {
            let digits: String = screen[..at]
                .chars()
                .rev()
                .take_while(char::is_ascii_digit)
                .collect();
            digits.chars().rev().collect::<String>().parse().ok()
        })
        .collect();
    assert!(positions.len() >= 3, "{positions:?}\n{screen}");
    assert!(positions.contains(&41), "{positions:?}\n{screen}");
    let last_draw = screen.rfind("41/41 (100%)").expect("the finished bar");
    // The counters under the bar: rate, cost, in flight, errors by reason, each source's share.
    assert!(screen.contains("calls/s | cost "), "{screen}");
    assert!(screen.contains(" in flight | "), "{screen}");
    let counters = screen
        .rfind("errors: invalid_json=1 | sources: openai_1 100%")
        .expect("errors and sources under the bar");
    let summary = screen
        .find("batch finished: 41 results (40 succeeded, 1 errors")
        .expect("the summary");
    assert!(last_draw < summary && counters < summary, "{screen}");
    assert!(screen[summary..].contains("latency: p50 "), "{screen}");
    assert!(
        screen[summary..].contains("journal: out.jsonl.journal"),
        "{screen}"
    );
    assert_eq!(output_ids(&dir.path().join("out.jsonl")).len(), 41);
}
