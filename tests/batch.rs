//! Batch jobs through `Gateway::batch` against the mock upstream: OpenAI Batch API lines in,
//! output lines with every `custom_id` exactly once, bad lines as error lines, unavailable
//! items rescheduled, and resumption from the journal without sending an answered item twice.

use std::collections::BTreeMap;

use futures::StreamExt;
use polygateway::batch::{BatchOptions, BatchResult};
use polygateway::Gateway;
use polygateway_testkit::{mock_settings, Behaviour, MockUpstream, RecordedRequest};
use serde_json::{json, Value};

fn chat_line(id: &str, model: &str) -> String {
    json!({
        "custom_id": id,
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {"model": model, "messages": [{"role": "user", "content": format!("item {id}")}],
                 "temperature": 0.2},
    })
    .to_string()
}

fn plain_line(id: &str) -> String {
    json!({"custom_id": id, "messages": [{"role": "user", "content": format!("item {id}")}]})
        .to_string()
}

async fn run(gw: &Gateway, lines: Vec<String>, options: BatchOptions) -> Vec<BatchResult> {
    gw.batch(futures::stream::iter(lines), options)
        .unwrap()
        .collect()
        .await
}

fn parsed(result: &BatchResult) -> Value {
    serde_json::from_str(&result.line).unwrap()
}

/// How many requests the mock received per custom_id (the id is in the user message).
fn sends_per_id(requests: &[RecordedRequest]) -> BTreeMap<String, usize> {
    let mut sends = BTreeMap::new();
    for r in requests
        .iter()
        .filter(|r| r.path.ends_with("/chat/completions"))
    {
        let content = r.body["messages"][0]["content"]
            .as_str()
            .unwrap_or_default();
        let id = content.strip_prefix("item ").unwrap_or(content).to_string();
        *sends.entry(id).or_default() += 1;
    }
    sends
}

#[tokio::test(start_paused = true)]
async fn an_openai_batch_file_gives_every_custom_id_once_in_openai_shapes() {
    let mock = MockUpstream::start(Behaviour::healthy_with("answer")).await;
    let settings = mock_settings(
        &[("LLM", &mock.base_url()), ("EMBED", &mock.base_url())],
        &[
            ("EMBED__BATCH_SIZE", "16"),
            ("PGW_SERVER_MODEL_ALIASES", "gpt-4o-mini=LLM"),
        ],
    );
    let gw = Gateway::from_settings(settings, "LLM").await.unwrap();
    let mut lines: Vec<String> = (0..20)
        .map(|i| {
            chat_line(
                &format!("c{i}"),
                if i % 2 == 0 { "LLM" } else { "gpt-4o-mini" },
            )
        })
        .collect();
    for i in 0..5 {
        lines.push(
            json!({"custom_id": format!("e{i}"), "method": "POST", "url": "/v1/embeddings",
                   "body": {"model": "EMBED", "input": ["a", "b"]}})
            .to_string(),
        );
    }
    let results = run(&gw, lines, BatchOptions::default()).await;
    assert_eq!(results.len(), 25);
    let mut ids: Vec<_> = results
        .iter()
        .map(|r| r.custom_id.clone().unwrap())
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 25, "every custom_id exactly once");
    for r in &results {
        let line = parsed(r);
        assert!(r.is_success(), "{}", r.line);
        assert!(line["id"].as_str().unwrap().starts_with("batch_req_"));
        assert_eq!(line["custom_id"].as_str(), r.custom_id.as_deref());
        assert_eq!(line["error"], Value::Null);
        assert_eq!(line["response"]["status_code"], 200);
        assert!(line["response"]["request_id"]
            .as_str()
            .is_some_and(|s| !s.is_empty()));
        let body = &line["response"]["body"];
        if r.custom_id.as_deref().unwrap().starts_with('c') {
            assert_eq!(body["object"], "chat.completion");
            assert_eq!(body["choices"][0]["message"]["content"], "answer");
            assert!(body["model"] == "LLM" || body["model"] == "gpt-4o-mini");
            assert!(body["usage"]["total_tokens"].as_u64().is_some());
        } else {
            assert_eq!(body["object"], "list");
            assert_eq!(body["data"].as_array().unwrap().len(), 2);
            assert_eq!(body["model"], "EMBED");
        }
    }
    // The body's other fields are the call's overlay, as in `serve`.
    let chat = mock
        .requests()
        .into_iter()
        .find(|r| r.path.ends_with("/chat/completions"))
        .unwrap();
    assert_eq!(chat.body["temperature"], 0.2);
    assert_eq!(
        chat.body["model"], "test-model",
        "the scope decides the upstream model"
    );
    assert!(sends_per_id(&mock.requests()).values().all(|&n| n == 1));
    let progress = gw
        .batch(futures::stream::empty(), BatchOptions::default())
        .unwrap()
        .progress();
    assert_eq!(progress.written, 0);
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn bad_lines_become_error_lines_and_nothing_is_lost() {
    let mock = MockUpstream::start(Behaviour::healthy()).await;
    let gw = Gateway::from_settings(mock_settings(&[("LLM", &mock.base_url())], &[]), "LLM")
        .await
        .unwrap();
    let lines = vec![
        plain_line("ok-1"),
        "this is not json".to_string(),
        json!({"messages": [{"role": "user", "content": "no id"}]}).to_string(),
        plain_line("ok-1"),
        json!({"custom_id": "u", "method": "POST", "url": "/v1/completions", "body": {}})
            .to_string(),
        json!({"custom_id": "m", "method": "POST", "url": "/v1/chat/completions",
               "body": {"model": "gpt-unknown", "messages": [{"role": "user", "content": "x"}]}})
        .to_string(),
        String::new(),
        plain_line("ok-2"),
    ];
    // No default scope: the plain lines name none either, so they are refused too.
    let refused = run(&gw, lines.clone(), BatchOptions::default()).await;
    let codes: Vec<_> = refused
        .iter()
        .filter_map(|r| r.error_code.clone())
        .collect();
    assert_eq!(refused.len(), 7, "one result per non-empty line");
    assert!(
        codes.iter().filter(|c| *c == "model_not_found").count() >= 3,
        "{codes:?}"
    );

    let options = BatchOptions {
        scope: Some("LLM".into()),
        ..BatchOptions::default()
    };
    let results = run(&gw, lines, options).await;
    assert_eq!(results.len(), 7);
    let by_code: BTreeMap<String, &BatchResult> = results
        .iter()
        .filter_map(|r| r.error_code.clone().map(|c| (c, r)))
        .collect();
    let expected = [
        ("invalid_json", "each line must be one JSON object"),
        ("missing_custom_id", "custom_id is missing"),
        ("duplicate_custom_id", "must be unique"),
        (
            "invalid_url",
            "allowed: /v1/chat/completions, /v1/embeddings",
        ),
    ];
    for (code, says) in expected {
        let r = by_code
            .get(code)
            .unwrap_or_else(|| panic!("no {code} in {results:?}"));
        let line = parsed(r);
        assert_eq!(line["response"], Value::Null);
        assert_eq!(line["error"]["code"], code);
        assert!(
            line["error"]["message"].as_str().unwrap().contains(says),
            "{}",
            r.line
        );
    }
    // `model` naming nothing falls back to the default scope.
    assert!(results
        .iter()
        .any(|r| r.custom_id.as_deref() == Some("m") && r.is_success()));
    assert_eq!(results.iter().filter(|r| r.is_success()).count(), 3);
    assert_eq!(
        by_code["duplicate_custom_id"].custom_id.as_deref(),
        Some("ok-1")
    );
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn items_refused_as_unavailable_are_rescheduled_and_succeed() {
    // Two 503s (each call has one attempt, so each ends `retry_exhausted`), then healthy.
    let mock = MockUpstream::start(Behaviour::Scripted(vec![
        Behaviour::ServerError(503),
        Behaviour::ServerError(503),
        Behaviour::healthy(),
    ]))
    .await;
    let settings = mock_settings(
        &[("LLM", &mock.base_url())],
        &[
            ("LLM__RETRY__MAX_ATTEMPTS", "1"),
            ("LLM__BREAKER__FAIL_THRESHOLD", "100"),
        ],
    );
    let gw = Gateway::from_settings(settings, "LLM").await.unwrap();
    let options = BatchOptions {
        scope: Some("LLM".into()),
        max_concurrency: 1,
        ..BatchOptions::default()
    };
    let lines = vec![plain_line("a"), plain_line("b")];
    let job = gw.batch(futures::stream::iter(lines), options).unwrap();
    let progress = {
        let mut job = job;
        let mut results = Vec::new();
        while let Some(r) = job.next().await {
            results.push(r);
        }
        assert_eq!(results.len(), 2);
        assert!(results.iter().all(BatchResult::is_success), "{results:?}");
        job.progress()
    };
    assert_eq!(progress.rescheduled, 2);
    assert_eq!(progress.calls, 4);
    assert_eq!(sends_per_id(&mock.requests()).values().sum::<usize>(), 4);
    gw.shutdown().await;
}

// Real time: the journal commits on a thread of its own, which a paused clock would skip
// ahead of.
#[tokio::test]
async fn an_item_past_its_age_is_written_with_its_error_and_sent_again_by_the_next_run() {
    let mock = MockUpstream::start(Behaviour::ServerError(503)).await;
    let settings = mock_settings(
        &[("LLM", &mock.base_url())],
        &[("LLM__RETRY__MAX_ATTEMPTS", "1")],
    );
    let gw = Gateway::from_settings(settings, "LLM").await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let options = BatchOptions {
        scope: Some("LLM".into()),
        max_item_age: std::time::Duration::ZERO,
        journal: Some(dir.path().join("job.journal")),
        ..BatchOptions::default()
    };
    let first = run(&gw, vec![plain_line("x")], options.clone()).await;
    assert_eq!(first[0].status_code, Some(503));
    assert_eq!(first[0].error_code.as_deref(), Some("retry_exhausted"));
    assert_eq!(
        parsed(&first[0])["response"]["body"]["error"]["code"],
        "retry_exhausted"
    );
    // An unavailability is not an answer: it is not journalled, so the next run sends it.
    mock.set_behaviour(Behaviour::healthy());
    let second = run(&gw, vec![plain_line("x")], options).await;
    assert!(
        second[0].is_success() && !second[0].from_journal,
        "{second:?}"
    );
    assert_eq!(sends_per_id(&mock.requests())["x"], 2);
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn an_item_never_waits_inside_the_runtime_past_its_age() {
    // One request a minute: the second item would wait ~60 s for the gate. Its age (2 s) is its
    // deadline, so it ends `deadline_exceeded` at once, without reaching the upstream.
    let mock = MockUpstream::start(Behaviour::healthy()).await;
    let settings = mock_settings(&[("LLM", &mock.base_url())], &[("LLM__GLOBAL__RPM", "1")]);
    let gw = Gateway::from_settings(settings, "LLM").await.unwrap();
    let options = BatchOptions {
        scope: Some("LLM".into()),
        max_concurrency: 1,
        max_item_age: std::time::Duration::from_secs(2),
        ..BatchOptions::default()
    };
    // Tokio's clock: the test runs in virtual time, where the OS clock would not see a wait.
    let started = tokio::time::Instant::now();
    let results = run(&gw, vec![plain_line("a"), plain_line("b")], options).await;
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "the job waited for the gate"
    );
    assert_eq!(results.len(), 2);
    let late = results
        .iter()
        .find(|r| !r.is_success())
        .expect("one item is refused");
    assert_eq!(
        late.error_code.as_deref(),
        Some("deadline_exceeded"),
        "{late:?}"
    );
    assert_eq!(late.status_code, Some(504));
    assert_eq!(sends_per_id(&mock.requests()).values().sum::<usize>(), 1);
    gw.shutdown().await;
}

// Real time: the journal commits on a thread of its own, which a paused clock would skip
// ahead of.
#[tokio::test]
async fn a_stopped_job_resumes_from_its_journal_without_sending_an_answered_item_again() {
    let mock = MockUpstream::start(Behaviour::Slow {
        delay: std::time::Duration::from_millis(30),
    })
    .await;
    let gw = Gateway::from_settings(mock_settings(&[("LLM", &mock.base_url())], &[]), "LLM")
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let options = BatchOptions {
        scope: Some("LLM".into()),
        max_concurrency: 2,
        journal: Some(dir.path().join("job.journal")),
        ..BatchOptions::default()
    };
    let lines: Vec<String> = (0..12).map(|i| plain_line(&format!("r{i}"))).collect();

    // Run 1: stop after four results; what is in flight still finishes.
    let mut job = gw
        .batch(futures::stream::iter(lines.clone()), options.clone())
        .unwrap();
    let mut first = Vec::new();
    while let Some(r) = job.next().await {
        first.push(r);
        if first.len() == 4 {
            job.stop();
        }
    }
    assert!(job.stopped());
    assert!((4..12).contains(&first.len()), "{}", first.len());
    drop(job);

    // Run 2: the whole input again. Every line comes out once (answered ones from the journal).
    let second = run(&gw, lines, options).await;
    assert_eq!(second.len(), 12);
    let mut ids: Vec<_> = second
        .iter()
        .map(|r| r.custom_id.clone().unwrap())
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 12);
    assert!(second.iter().all(BatchResult::is_success), "{second:?}");
    let replayed: Vec<_> = second.iter().filter(|r| r.from_journal).collect();
    assert_eq!(replayed.len(), first.len());
    for r in &replayed {
        let original = first.iter().find(|f| f.custom_id == r.custom_id).unwrap();
        assert_eq!(r.line, original.line, "replayed verbatim");
    }
    // No custom_id was sent twice.
    let sends = sends_per_id(&mock.requests());
    assert_eq!(sends.len(), 12);
    assert!(sends.values().all(|&n| n == 1), "{sends:?}");
    gw.shutdown().await;
}

// Real time: the journal commits on a thread of its own, which a paused clock would skip
// ahead of.
#[tokio::test]
async fn a_journal_does_not_replay_an_answer_for_a_different_request() {
    let mock = MockUpstream::start(Behaviour::healthy()).await;
    let gw = Gateway::from_settings(mock_settings(&[("LLM", &mock.base_url())], &[]), "LLM")
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let options = BatchOptions {
        scope: Some("LLM".into()),
        journal: Some(dir.path().join("job.journal")),
        ..BatchOptions::default()
    };
    run(&gw, vec![plain_line("same-id")], options.clone()).await;
    let other =
        json!({"custom_id": "same-id", "messages": [{"role": "user", "content": "changed"}]});
    let second = run(&gw, vec![other.to_string()], options).await;
    assert_eq!(second[0].error_code.as_deref(), Some("journal_mismatch"));
    assert!(parsed(&second[0])["error"]["message"]
        .as_str()
        .unwrap()
        .contains("--journal"));
    gw.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn structured_items_go_through_the_ladder_with_their_schema() {
    // The first answer does not fit the schema; the ladder re-asks and the second does.
    let mock = MockUpstream::start(Behaviour::ScriptedContent(vec![
        r#"{"verdict": "yes"}"#.into(),
        r#"{"score": 4}"#.into(),
    ]))
    .await;
    let gw = Gateway::from_settings(mock_settings(&[("LLM", &mock.base_url())], &[]), "LLM")
        .await
        .unwrap();
    let options = BatchOptions {
        scope: Some("LLM".into()),
        schema: Some(
            json!({"type": "object", "properties": {"score": {"type": "integer"}},
                            "required": ["score"]}),
        ),
        ..BatchOptions::default()
    };
    let results = run(&gw, vec![plain_line("s1")], options).await;
    assert!(results[0].is_success(), "{}", results[0].line);
    let content = parsed(&results[0])["response"]["body"]["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string();
    let value: Value = serde_json::from_str(&content).unwrap();
    assert_eq!(value["score"], 4);
    assert_eq!(mock.requests().len(), 2, "one re-ask");
    gw.shutdown().await;
}
