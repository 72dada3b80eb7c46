//! The structured-output ladder (docs/behaviour.md §9.2) driven by a scripted `ask`: prevent, repair,
//! validate, re-ask, exhaustion; json mode; normaliser; errors from `ask`; rehydration.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use polygateway::structured::{rehydrate, run_ladder, LadderPlan, SchemaRequest, StructuredMode};
use polygateway::{Content, GatewayError, LlmResponse, Message, Role};
use serde::Deserialize;
use serde_json::{json, Value};

#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
struct City {
    name: String,
    population: u64,
    #[serde(default)]
    nickname: Option<String>,
}

/// One recorded call of the scripted ask.
#[derive(Debug, Clone)]
struct Call {
    messages: Vec<Message>,
    schema: Option<Arc<SchemaRequest>>,
    is_reask: bool,
}

impl Call {
    /// The `response_format` this ask sends to a source whose provider has strict mode.
    fn strict_format(&self) -> Value {
        let schema = self.schema.as_ref().expect("the ask carries the schema");
        schema.for_mode(StructuredMode::JsonSchema, &[]).1.unwrap()
    }
}

type Script = Arc<Mutex<VecDeque<Result<LlmResponse, GatewayError>>>>;
type Log = Arc<Mutex<Vec<Call>>>;

fn script(answers: Vec<Result<&str, GatewayError>>) -> (Script, Log) {
    let q = answers
        .into_iter()
        .map(|a| a.map(LlmResponse::new))
        .collect::<VecDeque<_>>();
    (Arc::new(Mutex::new(q)), Arc::new(Mutex::new(Vec::new())))
}

macro_rules! asker {
    ($script:expr, $log:expr) => {{
        let (script, log) = ($script.clone(), $log.clone());
        move |messages: Vec<Message>, schema: Option<Arc<SchemaRequest>>, is_reask: bool| {
            log.lock().unwrap().push(Call {
                messages,
                schema,
                is_reask,
            });
            let next = script.lock().unwrap().pop_front();
            async move { next.expect("ask called more often than scripted") }
        }
    }};
}

fn question() -> Vec<Message> {
    vec![
        Message::system("Answer in JSON."),
        Message::user("Largest city in France?"),
    ]
}

fn text(m: &Message) -> String {
    match &m.content {
        Some(Content::Text(t)) => t.clone(),
        _ => panic!("expected text"),
    }
}

#[tokio::test(start_paused = true)]
async fn prevent_sends_the_schema_and_accepts_first_answer() {
    let (s, log) = script(vec![Ok(
        r#"{"name":"Paris","population":2100000,"nickname":null}"#,
    )]);
    let out = run_ladder::<City, _, _>(asker!(s, log), question(), LadderPlan::typed(2))
        .await
        .unwrap();
    assert_eq!(out.asks, 1);
    assert_eq!(out.value.name, "Paris");
    assert_eq!(
        out.response.structured_data,
        Some(json!({"name":"Paris","population":2100000,"nickname":null}))
    );
    let calls = log.lock().unwrap();
    assert_eq!(calls.len(), 1);
    assert!(!calls[0].is_reask);
    let rf = calls[0].strict_format();
    assert_eq!(rf["type"], "json_schema");
    assert_eq!(rf["json_schema"]["name"], "City");
    assert_eq!(rf["json_schema"]["strict"], true);
    assert_eq!(rf["json_schema"]["schema"]["additionalProperties"], false);
    // Every property is required in strict mode (order follows serde_json's map order).
    let mut required: Vec<&str> = rf["json_schema"]["schema"]["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    required.sort_unstable();
    assert_eq!(required, ["name", "nickname", "population"]);
    // The optional field stays optional through its type.
    assert_eq!(
        rf["json_schema"]["schema"]["properties"]["nickname"]["type"],
        json!(["string", "null"])
    );
    assert_eq!(calls[0].messages, question());
}

#[tokio::test(start_paused = true)]
async fn repair_fixes_fenced_sloppy_json_without_reask() {
    let (s, log) = script(vec![Ok(
        "<think>ok</think>Here you go:\n```json\n{'name': 'Lyon', population: 520000,}\n```",
    )]);
    let out = run_ladder::<City, _, _>(asker!(s, log), question(), LadderPlan::typed(2))
        .await
        .unwrap();
    assert_eq!(out.asks, 1);
    assert_eq!(
        out.value,
        City {
            name: "Lyon".into(),
            population: 520000,
            nickname: None
        }
    );
}

#[tokio::test(start_paused = true)]
async fn validation_failure_reasks_with_the_error_and_succeeds() {
    let bad = r#"{"name":"Paris","population":"lots"}"#;
    let (s, log) = script(vec![
        Ok(bad),
        Ok(r#"{"name":"Paris","population":2100000}"#),
    ]);
    let out = run_ladder::<City, _, _>(asker!(s, log), question(), LadderPlan::typed(2))
        .await
        .unwrap();
    assert_eq!(out.asks, 2);
    assert_eq!(out.value.population, 2_100_000);
    let calls = log.lock().unwrap();
    assert!(calls[1].is_reask);
    // The schema on the re-ask too.
    assert_eq!(calls[1].strict_format(), calls[0].strict_format());
    let msgs = &calls[1].messages;
    assert_eq!(msgs.len(), 4);
    assert_eq!(&msgs[..2], &question()[..]);
    assert_eq!(msgs[2].role, Role::Assistant);
    assert_eq!(text(&msgs[2]), bad);
    assert_eq!(msgs[3].role, Role::User);
    let correction = text(&msgs[3]);
    assert!(
        correction.contains("$.population: invalid type: string \"lots\""),
        "{correction}"
    );
    // The schema travels with the ask (in its source's mode), not in the correction text.
    assert!(!correction.contains("JSON Schema"), "{correction}");
}

#[tokio::test(start_paused = true)]
async fn reasks_use_only_the_latest_bad_answer() {
    let (s, log) = script(vec![
        Ok("bad one"),
        Ok("bad two"),
        Ok(r#"{"name":"A","population":1}"#),
    ]);
    let out = run_ladder::<City, _, _>(asker!(s, log), question(), LadderPlan::typed(2))
        .await
        .unwrap();
    assert_eq!(out.asks, 3);
    let calls = log.lock().unwrap();
    assert_eq!(calls[2].messages.len(), 4);
    assert_eq!(text(&calls[2].messages[2]), "bad two");
    assert!(calls.iter().skip(1).all(|c| c.is_reask));
}

#[tokio::test(start_paused = true)]
async fn exhaustion_returns_result_invalid_with_details() {
    let (s, log) = script(vec![
        Ok(r#"{"name": 1}"#),
        Ok(r#"{"name": 2}"#),
        Ok(r#"{"name": "X"}"#),
    ]);
    let err = run_ladder::<City, _, _>(asker!(s, log), question(), LadderPlan::typed(2))
        .await
        .unwrap_err();
    assert_eq!(log.lock().unwrap().len(), 3, "1 ask + 2 re-asks");
    match err {
        GatewayError::ResultInvalid { message, details } => {
            assert!(message.contains("after 3 ask(s)"), "{message}");
            assert_eq!(details.raw_text, r#"{"name": "X"}"#);
            assert_eq!(details.repair_error, None);
            assert_eq!(
                details.validation_errors,
                vec!["$: missing field `population`"]
            );
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn exhaustion_after_unrepairable_text_carries_repair_error() {
    let (s, log) = script(vec![Ok("I cannot answer that.")]);
    let err = run_ladder::<City, _, _>(asker!(s, log), question(), LadderPlan::typed(0))
        .await
        .unwrap_err();
    assert_eq!(
        log.lock().unwrap().len(),
        1,
        "max_retries = 0 never re-asks"
    );
    let GatewayError::ResultInvalid { details, .. } = err else {
        panic!("expected ResultInvalid")
    };
    assert_eq!(details.raw_text, "I cannot answer that.");
    assert!(details
        .repair_error
        .as_deref()
        .unwrap()
        .starts_with("no JSON value found"));
    assert!(details.validation_errors.is_empty());
}

#[tokio::test(start_paused = true)]
async fn json_mode_repairs_once_and_never_reasks() {
    let (s, log) = script(vec![Ok("```json\n{'a': [1, 2,],}\n```")]);
    let out = run_ladder::<Value, _, _>(asker!(s, log), question(), LadderPlan::json())
        .await
        .unwrap();
    assert_eq!(out.value, json!({"a": [1, 2]}));
    assert_eq!(out.response.structured_data, Some(json!({"a": [1, 2]})));
    // Json mode asks for no schema.
    assert!(log.lock().unwrap()[0].schema.is_none());

    let (s, log) = script(vec![Ok("not json at all")]);
    let mut plan = LadderPlan::json();
    plan.max_retries = 5; // ignored in json mode
    let err = run_ladder::<Value, _, _>(asker!(s, log), question(), plan)
        .await
        .unwrap_err();
    assert!(matches!(err, GatewayError::ResultInvalid { .. }));
    assert_eq!(log.lock().unwrap().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn normalizer_runs_before_validation() {
    let (s, log) = script(vec![Ok(r#"{"Name": "Metz", "population": "120000"}"#)]);
    let normalizer: polygateway::structured::Normalizer = Arc::new(|mut v: Value| {
        if let Some(obj) = v.as_object_mut() {
            if let Some(name) = obj.remove("Name") {
                obj.insert("name".into(), name);
            }
            if let Some(p) = obj
                .get("population")
                .and_then(Value::as_str)
                .and_then(|s| s.parse::<u64>().ok())
            {
                obj.insert("population".into(), json!(p));
            }
        }
        v
    });
    let plan = LadderPlan::typed(0).with_normalizer(normalizer);
    let out = run_ladder::<City, _, _>(asker!(s, log), question(), plan)
        .await
        .unwrap();
    assert_eq!(out.value.population, 120_000);
    assert_eq!(
        out.response.structured_data,
        Some(json!({"name": "Metz", "population": 120000}))
    );
}

#[tokio::test(start_paused = true)]
async fn ask_errors_end_the_ladder_unchanged() {
    let rejected = GatewayError::RequestRejected {
        message: "400 bad schema".into(),
        body_text: String::new(),
    };
    let (s, log) = script(vec![Ok("nope"), Err(rejected)]);
    let err = run_ladder::<City, _, _>(asker!(s, log), question(), LadderPlan::typed(3))
        .await
        .unwrap_err();
    assert!(
        matches!(err, GatewayError::RequestRejected { ref message, .. } if message == "400 bad schema")
    );
    assert_eq!(log.lock().unwrap().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn correction_errors_are_clipped_to_200_chars() {
    let long = "x".repeat(1000);
    let first = format!(r#"{{"name": "A", "population": "{long}"}}"#);
    let (s, log) = script(vec![Ok(&first), Ok(r#"{"name":"A","population":1}"#)]);
    run_ladder::<City, _, _>(asker!(s, log), question(), LadderPlan::typed(1))
        .await
        .unwrap();
    let calls = log.lock().unwrap();
    let correction = text(&calls[1].messages[3]);
    for line in correction.lines().filter(|l| l.starts_with("- ")) {
        assert!(
            line.chars().count() <= 202,
            "{} chars",
            line.chars().count()
        );
    }
    assert!(correction.contains('…'));
}

#[tokio::test(start_paused = true)]
async fn rehydrate_rebuilds_the_value_from_structured_data() {
    let (s, log) = script(vec![Ok(r#"{"name":"Paris","population":2100000}"#)]);
    let out = run_ladder::<City, _, _>(asker!(s, log), question(), LadderPlan::typed(0))
        .await
        .unwrap();
    // Round trip through the cache's serialized form.
    let stored = serde_json::to_string(&out.response).unwrap();
    let cached: LlmResponse = serde_json::from_str(&stored).unwrap();
    assert_eq!(rehydrate::<City>(&cached).unwrap(), out.value);

    let plain = LlmResponse::new("text only");
    assert!(matches!(
        rehydrate::<City>(&plain),
        Err(GatewayError::ResultInvalid { .. })
    ));
    let mut wrong = LlmResponse::new("{}");
    wrong.structured_data = Some(json!({"name": 3}));
    let Err(GatewayError::ResultInvalid { details, .. }) = rehydrate::<City>(&wrong) else {
        panic!("expected ResultInvalid");
    };
    assert!(details.validation_errors[0].starts_with("$.name: invalid type"));
}
