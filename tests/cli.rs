//! The `polygateway` command line, run as a real process against the mock upstream.

use std::path::Path;

use polygateway::testkit::mock_llm::{Behaviour, MockUpstream};
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
}
