//! `polygateway serve`'s OpenAI Responses ingress over real HTTP, on an OpenAI-compatible
//! source: the request translated into the canonical call, the `response` object, the event
//! sequence with its sequence numbers, function calls, `text.format` through the structured
//! ladder, and the stateless refusals (`previous_response_id`, `GET /v1/responses/{id}`).

mod server_support;

use polygateway_testkit::mock_llm::MOCK_CONTENT;
use polygateway_testkit::{mock_settings, Behaviour, MockUpstream};
use serde_json::{json, Value};
use server_support::*;

async fn post(server: &TestServer, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(server.url("/v1/responses"))
        .bearer_auth(KEY)
        .json(body)
        .send()
        .await
        .unwrap()
}

fn events(text: &str) -> Vec<Value> {
    text.split("\n\n")
        .filter(|f| !f.trim().is_empty())
        .map(|f| {
            let event = f.lines().find_map(|l| l.strip_prefix("event: ")).unwrap();
            let data: Value =
                serde_json::from_str(f.lines().find_map(|l| l.strip_prefix("data: ")).unwrap())
                    .unwrap();
            assert_eq!(data["type"], event, "{f}");
            data
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_response_has_the_responses_shape_and_the_upstream_gets_the_canonical_call() {
    let mock = MockUpstream::start(Behaviour::healthy()).await;
    let server = start(mock_settings(&[("LLM", &mock.base_url())], &[])).await;
    let req = json!({"model": "LLM", "instructions": "be brief", "input": "hello",
                     "max_output_tokens": 40, "temperature": 0.5});
    let resp = post(&server, &req).await;
    assert_eq!(resp.status(), 200);
    let r: Value = resp.json().await.unwrap();
    assert_eq!(r["object"], "response");
    assert_eq!(r["status"], "completed");
    assert!(r["id"].as_str().unwrap().starts_with("resp_"));
    assert_eq!(r["output"][0]["type"], "message");
    assert_eq!(r["output"][0]["content"][0]["type"], "output_text");
    assert_eq!(r["output"][0]["content"][0]["text"], MOCK_CONTENT);
    let u = &r["usage"];
    assert_eq!(
        u["total_tokens"].as_u64().unwrap(),
        u["input_tokens"].as_u64().unwrap() + u["output_tokens"].as_u64().unwrap()
    );
    assert_eq!(u["input_tokens_details"]["cached_tokens"], 0);
    let sent = mock.last_request().unwrap().body;
    assert_eq!(
        sent["messages"][0],
        json!({"role": "developer", "content": "be brief"})
    );
    assert_eq!(
        sent["messages"][1],
        json!({"role": "user", "content": "hello"})
    );
    assert_eq!(sent["max_tokens"], 40);
    assert_eq!(sent["temperature"], 0.5);
    server.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_stream_is_the_responses_event_sequence_with_sequence_numbers() {
    let mock = MockUpstream::start(Behaviour::healthy()).await;
    let server = start(mock_settings(&[("LLM", &mock.base_url())], &[])).await;
    let resp = post(
        &server,
        &json!({"model": "LLM", "input": "hello", "stream": true}),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let evs = events(&resp.text().await.unwrap());
    let kinds: Vec<&str> = evs.iter().map(|e| e["type"].as_str().unwrap()).collect();
    let deltas = kinds
        .iter()
        .filter(|k| **k == "response.output_text.delta")
        .count();
    assert!(deltas >= 1);
    let mut expected = vec![
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ];
    expected.extend(std::iter::repeat_n("response.output_text.delta", deltas));
    expected.extend([
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]);
    assert_eq!(kinds, expected);
    for (i, e) in evs.iter().enumerate() {
        assert_eq!(e["sequence_number"], i as u64);
    }
    let text: String = evs
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(text, MOCK_CONTENT);
    let done = &evs.last().unwrap()["response"];
    assert_eq!(done["output"][0]["content"][0]["text"], MOCK_CONTENT);
    assert!(done["usage"]["output_tokens"].as_u64().unwrap() > 0);
    server.stop().await;
}

#[tokio::test(start_paused = true)]
async fn function_calls_round_trip_as_items() {
    let mock = MockUpstream::start(Behaviour::ToolCalls(vec![(
        "weather".into(),
        r#"{"city":"Oslo"}"#.into(),
    )]))
    .await;
    let server = start(mock_settings(&[("LLM", &mock.base_url())], &[])).await;
    let tools = json!([{"type": "function", "name": "weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]);
    let r: Value = post(
        &server,
        &json!({"model": "LLM", "input": "weather?", "tools": tools}),
    )
    .await
    .json()
    .await
    .unwrap();
    let call = r["output"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == "function_call")
        .unwrap()
        .clone();
    assert_eq!(call["name"], "weather");
    assert_eq!(call["arguments"], r#"{"city":"Oslo"}"#);
    assert_eq!(
        mock.last_request().unwrap().body["tools"][0]["function"]["name"],
        "weather"
    );
    let call_id = call["call_id"].as_str().unwrap().to_string();
    let req = json!({"model": "LLM", "tools": tools, "stream": true, "input": [
        {"role": "user", "content": "weather?"}, call,
        {"type": "function_call_output", "call_id": call_id, "output": "rain"}]});
    let evs = events(&post(&server, &req).await.text().await.unwrap());
    let sent = mock.last_request().unwrap().body;
    assert_eq!(sent["messages"][1]["tool_calls"][0]["id"], call_id.as_str());
    assert_eq!(sent["messages"][2]["role"], "tool");
    let args: String = evs
        .iter()
        .filter(|e| e["type"] == "response.function_call_arguments.delta")
        .map(|e| e["delta"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(args, r#"{"city":"Oslo"}"#);
    assert!(evs
        .iter()
        .any(|e| e["type"] == "response.function_call_arguments.done"));
    server.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_json_schema_format_runs_the_structured_ladder() {
    let mock = MockUpstream::start(Behaviour::healthy_with(r#"{"answer": 42}"#)).await;
    let server = start(mock_settings(&[("LLM", &mock.base_url())], &[])).await;
    let req = json!({"model": "LLM", "input": "answer?", "text": {"format": {
        "type": "json_schema", "name": "a", "strict": true,
        "schema": {"type": "object", "properties": {"answer": {"type": "integer"}},
                   "required": ["answer"]}}}});
    let r: Value = post(&server, &req).await.json().await.unwrap();
    let text = r["output"][0]["content"][0]["text"].as_str().unwrap();
    assert_eq!(serde_json::from_str::<Value>(text).unwrap()["answer"], 42);
    server.stop().await;
}

#[tokio::test(start_paused = true)]
async fn stored_state_is_refused_with_the_alternative_named() {
    let mock = MockUpstream::start(Behaviour::healthy()).await;
    let server = start(mock_settings(&[("LLM", &mock.base_url())], &[])).await;
    let resp = post(
        &server,
        &json!({"model": "LLM", "input": "more", "previous_response_id": "resp_1"}),
    )
    .await;
    assert_eq!(resp.status(), 400);
    let e: Value = resp.json().await.unwrap();
    assert_eq!(e["error"]["param"], "previous_response_id");
    assert!(e["error"]["message"]
        .as_str()
        .unwrap()
        .contains("whole conversation"));
    let resp = reqwest::Client::new()
        .get(server.url("/v1/responses/resp_1"))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    let e: Value = resp.json().await.unwrap();
    assert!(e["error"]["message"]
        .as_str()
        .unwrap()
        .contains("stateless"));
    assert!(mock.requests().is_empty());
    server.stop().await;
}
