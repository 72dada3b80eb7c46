//! `polygateway serve`'s Anthropic Messages ingress over real HTTP, on an OpenAI-compatible
//! source: the request translated into the canonical call (what the upstream receives), the
//! `message` object, the exact event sequence of a stream, tool use, `x-api-key`,
//! `count_tokens`, errors in Anthropic's shape and the dialect of a 404 for an unknown path.

mod server_support;

use polygateway_testkit::mock_llm::MOCK_CONTENT;
use polygateway_testkit::{mock_settings, Behaviour, MockUpstream};
use serde_json::{json, Value};
use server_support::*;

async fn post(server: &TestServer, path: &str, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(server.url(path))
        .header("x-api-key", KEY)
        .header("anthropic-version", "2023-06-01")
        .json(body)
        .send()
        .await
        .unwrap()
}

fn body(stream: bool) -> Value {
    json!({"model": "LLM", "max_tokens": 50, "stream": stream, "system": "be brief",
           "messages": [{"role": "user", "content": "hello"}]})
}

/// `(event, data)` of each SSE frame.
fn events(text: &str) -> Vec<(String, Value)> {
    text.split("\n\n")
        .filter(|f| !f.trim().is_empty())
        .map(|f| {
            let mut event = String::new();
            let mut data = Value::Null;
            for line in f.lines() {
                if let Some(e) = line.strip_prefix("event: ") {
                    event = e.to_string();
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data = serde_json::from_str(d).unwrap();
                }
            }
            assert_eq!(data["type"], event.as_str(), "{f}");
            (event, data)
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_message_has_anthropic_shape_and_the_upstream_gets_the_canonical_call() {
    let mock = MockUpstream::start(Behaviour::healthy()).await;
    let server = start(mock_settings(&[("LLM", &mock.base_url())], &[])).await;
    let mut req = body(false);
    req["stop_sequences"] = json!(["END"]);
    req["temperature"] = json!(0.5);
    let resp = post(&server, "/v1/messages", &req).await;
    assert_eq!(resp.status(), 200);
    let m: Value = resp.json().await.unwrap();
    assert_eq!(m["type"], "message");
    assert_eq!(m["role"], "assistant");
    assert_eq!(m["model"], "LLM");
    assert!(m["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(
        m["content"],
        json!([{"type": "text", "text": MOCK_CONTENT}])
    );
    assert_eq!(m["stop_reason"], "end_turn");
    assert!(m["usage"]["input_tokens"].as_u64().unwrap() > 0, "{m}");
    assert!(m["usage"]["output_tokens"].as_u64().unwrap() > 0, "{m}");
    assert_eq!(m["usage"]["cache_read_input_tokens"], 0);
    let sent = mock.last_request().unwrap().body;
    assert_eq!(
        sent["messages"][0],
        json!({"role": "system", "content": "be brief"})
    );
    assert_eq!(sent["messages"][1]["content"], "hello");
    assert_eq!(sent["max_tokens"], 50);
    assert_eq!(sent["stop"], json!(["END"]));
    assert_eq!(sent["temperature"], 0.5);
    assert_eq!(sent["model"], "test-model");
    server.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_stream_is_anthropics_exact_event_sequence() {
    let mock = MockUpstream::start(Behaviour::Reasoning).await;
    let server = start(mock_settings(&[("LLM", &mock.base_url())], &[])).await;
    let resp = post(&server, "/v1/messages", &body(true)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let evs = events(&resp.text().await.unwrap());
    let names: Vec<&str> = evs.iter().map(|(e, _)| e.as_str()).collect();
    assert_eq!(names[0], "message_start");
    assert_eq!(&names[names.len() - 2..], ["message_delta", "message_stop"]);
    // Thinking block 0, then text block 1, each opened, filled and closed in order.
    let starts: Vec<&Value> = evs
        .iter()
        .filter(|(e, _)| e == "content_block_start")
        .map(|(_, d)| d)
        .collect();
    assert_eq!(starts.len(), 2, "{names:?}");
    assert_eq!(starts[0]["index"], 0);
    assert_eq!(starts[0]["content_block"]["type"], "thinking");
    assert_eq!(starts[1]["index"], 1);
    assert_eq!(starts[1]["content_block"]["type"], "text");
    let stops = names.iter().filter(|n| **n == "content_block_stop").count();
    assert_eq!(stops, 2);
    let text: String = evs
        .iter()
        .filter(|(_, d)| d["delta"]["type"] == "text_delta")
        .map(|(_, d)| {
            assert_eq!(d["index"], 1);
            d["delta"]["text"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(text, MOCK_CONTENT);
    let delta = &evs[evs.len() - 2].1;
    assert_eq!(delta["delta"]["stop_reason"], "end_turn");
    assert!(delta["usage"]["output_tokens"].as_u64().unwrap() > 0);
    server.stop().await;
}

#[tokio::test(start_paused = true)]
async fn tool_use_goes_out_as_tools_and_comes_back_as_tool_use_blocks() {
    let mock = MockUpstream::start(Behaviour::ToolCalls(vec![(
        "weather".into(),
        r#"{"city":"Oslo"}"#.into(),
    )]))
    .await;
    let server = start(mock_settings(&[("LLM", &mock.base_url())], &[])).await;
    let mut req = body(false);
    req["tools"] = json!([{"name": "weather", "description": "w",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]);
    req["tool_choice"] = json!({"type": "tool", "name": "weather"});
    let m: Value = post(&server, "/v1/messages", &req)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(m["stop_reason"], "tool_use", "{m}");
    let block = m["content"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["type"] == "tool_use")
        .unwrap();
    assert_eq!(block["name"], "weather");
    assert_eq!(block["input"], json!({"city": "Oslo"}));
    let sent = mock.last_request().unwrap().body;
    assert_eq!(sent["tools"][0]["type"], "function");
    assert_eq!(sent["tools"][0]["function"]["parameters"]["type"], "object");
    assert_eq!(sent["tool_choice"]["function"]["name"], "weather");
    // The round trip: the tool_use and its tool_result become a tool call and a tool message.
    let id = block["id"].as_str().unwrap().to_string();
    req["messages"] = json!([
        {"role": "user", "content": "weather in Oslo?"},
        {"role": "assistant", "content": [block.clone()]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": "rain"}]}
    ]);
    req["stream"] = json!(true);
    let evs = events(
        &post(&server, "/v1/messages", &req)
            .await
            .text()
            .await
            .unwrap(),
    );
    let sent = mock.last_request().unwrap().body;
    assert_eq!(sent["messages"][2]["tool_calls"][0]["id"], id.as_str());
    assert_eq!(sent["messages"][3]["role"], "tool");
    assert_eq!(sent["messages"][3]["tool_call_id"], id.as_str());
    // Streamed, the call is a tool_use block filled by input_json_delta pieces.
    let start = evs
        .iter()
        .find(|(e, _)| e == "content_block_start")
        .unwrap();
    assert_eq!(start.1["content_block"]["type"], "tool_use");
    let json: String = evs
        .iter()
        .filter(|(_, d)| d["delta"]["type"] == "input_json_delta")
        .map(|(_, d)| d["delta"]["partial_json"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&json).unwrap(),
        json!({"city": "Oslo"})
    );
    assert_eq!(evs[evs.len() - 2].1["delta"]["stop_reason"], "tool_use");
    server.stop().await;
}

#[tokio::test(start_paused = true)]
async fn errors_are_in_anthropics_shape_and_statuses() {
    let mock = MockUpstream::start(Behaviour::ServerError(503)).await;
    let settings = mock_settings(
        &[("LLM", &mock.base_url())],
        &[("LLM__RETRY__MAX_ATTEMPTS", "2")],
    );
    let server = start(settings).await;
    let client = reqwest::Client::new();
    // No key.
    let resp = client
        .post(server.url("/v1/messages"))
        .json(&body(false))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    let e: Value = resp.json().await.unwrap();
    assert_eq!(e["type"], "error");
    assert_eq!(e["error"]["type"], "authentication_error");
    // Bearer works too; an unknown model is 404 not_found_error.
    let mut req = body(false);
    req["model"] = json!("nope");
    let resp = client
        .post(server.url("/v1/messages"))
        .bearer_auth(KEY)
        .json(&req)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    let e: Value = resp.json().await.unwrap();
    assert_eq!(e["error"]["type"], "not_found_error");
    // No source could take it → 529 overloaded_error with Retry-After, streamed or not.
    for stream in [false, true] {
        let resp = post(&server, "/v1/messages", &body(stream)).await;
        assert_eq!(resp.status(), 529, "stream={stream}");
        assert!(resp.headers().contains_key("retry-after"));
        let e: Value = resp.json().await.unwrap();
        assert_eq!(e["error"]["type"], "overloaded_error");
    }
    // A malformed request is 400 invalid_request_error.
    let resp = post(&server, "/v1/messages", &json!({"model": "LLM"})).await;
    assert_eq!(resp.status(), 400);
    let e: Value = resp.json().await.unwrap();
    assert_eq!(e["error"]["type"], "invalid_request_error");
    server.stop().await;
}

#[tokio::test(start_paused = true)]
async fn count_tokens_is_the_gateways_estimate_and_says_so() {
    let mock = MockUpstream::start(Behaviour::healthy()).await;
    let server = start(mock_settings(&[("LLM", &mock.base_url())], &[])).await;
    let resp = post(&server, "/v1/messages/count_tokens", &body(false)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-pgw-token-estimate"], "chars/4");
    let n: Value = resp.json().await.unwrap();
    // "be brief" + "hello": 13 characters → 4 tokens.
    assert_eq!(n["input_tokens"], 4);
    assert!(mock.requests().is_empty(), "counting calls no upstream");
    server.stop().await;
}

#[tokio::test(start_paused = true)]
async fn an_unknown_path_is_a_json_404_in_its_paths_dialect() {
    let mock = MockUpstream::start(Behaviour::healthy()).await;
    let server = start(mock_settings(&[("LLM", &mock.base_url())], &[])).await;
    let resp = post(&server, "/v1/messages/batches", &json!({})).await;
    assert_eq!(resp.status(), 404);
    let e: Value = resp.json().await.unwrap();
    assert_eq!(e["type"], "error");
    assert_eq!(e["error"]["type"], "not_found_error");
    let resp = post(&server, "/v1/nothing", &json!({})).await;
    assert_eq!(resp.status(), 404);
    let e: Value = resp.json().await.unwrap();
    assert_eq!(e["error"]["code"], "unknown_url");
    server.stop().await;
}

#[tokio::test(start_paused = true)]
async fn metrics_and_the_status_page_count_requests_by_ingress() {
    assert!(polygateway::server::install_metrics_recorder());
    let mock = MockUpstream::start(Behaviour::healthy()).await;
    let server = start(mock_settings(
        &[("LLM", &mock.base_url())],
        &[("PGW_SERVER_PUBLIC_STATUS", "true")],
    ))
    .await;
    for _ in 0..2 {
        assert_eq!(
            post(&server, "/v1/messages", &body(false)).await.status(),
            200
        );
    }
    let resp = reqwest::Client::new()
        .post(server.url("/v1/responses"))
        .bearer_auth(KEY)
        .json(&json!({"model": "LLM", "input": "hi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let metrics = reqwest::get(server.url("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(r#"pgw_server_requests_total{ingress="messages"} 2"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"pgw_server_requests_total{ingress="responses"} 1"#),
        "{metrics}"
    );
    let page = reqwest::get(server.url("/"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.contains("chat 0 · messages 2 · responses 1"), "{page}");
    server.stop().await;
}
