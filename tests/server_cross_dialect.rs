//! Any ingress on any source (docs/behaviour.md §12.5–§12.6): a `/v1/messages` call on an
//! Anthropic source reaches it as the client wrote it — unknown top-level fields, unknown block
//! types and `cache_control` intact, only `model` (and `stream`) set by the gateway — while the
//! same call on a Gemini source and a `/v1/responses` call on an Anthropic source are translated
//! through the canonical model, tool and thinking round trips included. The mocks check requests
//! as the providers' APIs do (signatures, `tool_result` ids, alternating turns).

mod server_support;

use std::collections::BTreeMap;

use polygateway::config::Settings;
use polygateway_testkit::mock_anthropic::{MockAnthropic, MOCK_ANTHROPIC_KEY};
use polygateway_testkit::mock_env;
use polygateway_testkit::mock_gemini::{MockGemini, MOCK_GEMINI_KEY};
use serde_json::{json, Value};
use server_support::*;

/// A scope `LLM` of one source of `provider` at `base_url`.
fn settings(provider: &str, base_url: &str, key: &str, model: &str) -> Settings {
    let mut env: BTreeMap<String, String> = mock_env();
    let source = format!("LLM__{provider}__1");
    env.insert(format!("{source}__BASE_URL"), base_url.into());
    env.insert(format!("{source}__API_KEY"), key.into());
    env.insert(format!("{source}__MODEL"), model.into());
    env.insert(format!("{source}__TIMEOUT_S"), "10".into());
    Settings::from_map(&env).expect("settings")
}

async fn post(server: &TestServer, path: &str, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(server.url(path))
        .header("x-api-key", KEY)
        .header("authorization", format!("Bearer {KEY}"))
        .header("anthropic-version", "2023-06-01")
        .header("anthropic-beta", "context-management-2025-06-27")
        .json(body)
        .send()
        .await
        .unwrap()
}

/// A Messages request with what the canonical model does not carry: top-level keys it does not
/// know, a block type it does not know, `cache_control` on system and user blocks, a signed
/// thinking block and a tool round trip.
fn rich_request(stream: bool) -> Value {
    let thought = "The user wants the weather.";
    json!({
        "model": "LLM",
        "max_tokens": 300,
        "stream": stream,
        "system": [{"type": "text", "text": "Be brief.",
                    "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
        "context_management": {"edits": [{"type": "clear_tool_uses_20250919"}]},
        "x_future_field": {"nested": [1, 2.5, "three", null, true]},
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "tools": [{"name": "weather", "description": "Weather of a city",
                   "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
                   "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "Weather in Paris?", "cache_control": {"type": "ephemeral"}},
                {"type": "search_result", "source": "https://example.com/paris",
                 "title": "Paris", "content": [{"type": "text", "text": "Paris is in France."}],
                 "citations": {"enabled": true}}
            ]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": thought,
                 "signature": MockAnthropic::signature(thought)},
                {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny, 21 °C",
                 "cache_control": {"type": "ephemeral"}}
            ]}
        ]
    })
}

/// The text of an Anthropic event stream: its `text_delta`s, joined.
fn said(sse: &str) -> String {
    sse.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter(|e| e["delta"]["type"] == "text_delta")
        .map(|e| e["delta"]["text"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn messages_on_an_anthropic_source_pass_through_as_written_but_the_model() {
    let mock = MockAnthropic::start().await;
    let server = start(settings(
        "ANTHROPIC",
        &mock.base_url(),
        MOCK_ANTHROPIC_KEY,
        "claude-mock",
    ))
    .await;
    for stream in [false, true] {
        let req = rich_request(stream);
        let resp = post(&server, "/v1/messages", &req).await;
        assert_eq!(resp.status(), 200, "stream {stream}");
        let text = if stream {
            said(&resp.text().await.unwrap())
        } else {
            let m: Value = resp.json().await.unwrap();
            m["content"].as_array().unwrap().last().unwrap()["text"]
                .as_str()
                .unwrap()
                .to_owned()
        };
        assert_eq!(text, "tool said: Sunny, 21 °C", "stream {stream}");
        let got = mock.requests().last().unwrap().clone();
        let mut expected = req.clone();
        expected["model"] = json!("claude-mock");
        // The gateway reads its sources' answers as streams (a source's `STREAM`), whether or
        // not the client streams: `stream` is the gateway's, like `model`.
        expected["stream"] = json!(true);
        // Everything the client wrote, exactly: the unknown key's value, the unknown block,
        // every cache_control, the signature, the tool definition in Anthropic's own shape.
        assert_eq!(got.body, expected, "stream {stream}");
        assert_eq!(
            got.body["x_future_field"].to_string(),
            r#"{"nested":[1,2.5,"three",null,true]}"#
        );
        assert_eq!(got.beta.as_deref(), Some("context-management-2025-06-27"));
        assert_eq!(got.api_key.as_deref(), Some(MOCK_ANTHROPIC_KEY));
    }
    server.stop().await;
}

#[tokio::test(start_paused = true)]
async fn messages_on_an_anthropic_source_keep_thinking_and_tool_use_and_cache_usage() {
    let mock = MockAnthropic::start().await;
    let server = start(settings(
        "ANTHROPIC",
        &mock.base_url(),
        MOCK_ANTHROPIC_KEY,
        "claude-mock",
    ))
    .await;
    // A first turn that thinks and calls a tool…
    let first = json!({
        "model": "LLM", "max_tokens": 2000,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        "tools": [{"name": "weather", "input_schema": {"type": "object",
                   "properties": {"city": {"type": "string"}}}}],
        "messages": [{"role": "user", "content": "Paris"}]
    });
    let m: Value = post(&server, "/v1/messages", &first)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(m["stop_reason"], "tool_use", "{m}");
    assert_eq!(m["content"][0]["type"], "thinking", "{m}");
    assert_eq!(
        m["content"][0]["signature"],
        MockAnthropic::signature(m["content"][0]["thinking"].as_str().unwrap()).as_str()
    );
    assert_eq!(m["content"][1]["type"], "tool_use", "{m}");
    assert_eq!(
        m["usage"]["cache_creation_input_tokens"],
        json!(m["usage"]["cache_creation"]["ephemeral_5m_input_tokens"])
    );
    assert!(
        m["usage"]["cache_creation_input_tokens"].as_u64().unwrap() > 0,
        "{m}"
    );
    // Streamed, the thinking block is signed before the tool call's block starts, as the API
    // streams it (the signature is the block's last delta).
    let mut streamed = first.clone();
    streamed["stream"] = json!(true);
    let sse = post(&server, "/v1/messages", &streamed)
        .await
        .text()
        .await
        .unwrap();
    let events: Vec<Value> = sse
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let at = |pred: &dyn Fn(&Value) -> bool| events.iter().position(pred).unwrap_or(usize::MAX);
    let signed = at(&|e| e["delta"]["type"] == "signature_delta");
    let first_stop = at(&|e| e["type"] == "content_block_stop");
    let second_start = at(&|e| e["type"] == "content_block_start" && e["index"] == 1);
    assert!(signed < first_stop && first_stop < second_start, "{sse}");
    assert_eq!(events[signed]["index"], 0);
    assert_eq!(
        events[signed]["delta"]["signature"], m["content"][0]["signature"],
        "{sse}"
    );
    assert_eq!(
        sse.matches("signature_delta").count(),
        1,
        "signed once: {sse}"
    );
    // …then the result, with the assistant turn sent back as the API gave it: the mock refuses
    // a thinking block whose signature changed.
    let mut second = first.clone();
    second["messages"] = json!([
        {"role": "user", "content": "Paris"},
        {"role": "assistant", "content": m["content"]},
        {"role": "user", "content": [{"type": "tool_result",
            "tool_use_id": m["content"][1]["id"], "content": "Sunny"}]}
    ]);
    let resp = post(&server, "/v1/messages", &second).await;
    assert_eq!(resp.status(), 200);
    let m2: Value = resp.json().await.unwrap();
    assert_eq!(m2["stop_reason"], "end_turn", "{m2}");
    let text = m2["content"].as_array().unwrap().last().unwrap()["text"].clone();
    assert_eq!(text, "tool said: Sunny");
    // The system prefix written by the first call is read by the second.
    assert!(
        m2["usage"]["cache_read_input_tokens"].as_u64().unwrap() > 0,
        "{m2}"
    );
    server.stop().await;
}

/// A Gemini mock scripted to call `weather` for Paris, then answer "Sunny in Paris.", and a
/// server whose scope `LLM` is that source.
async fn gemini_weather() -> (MockGemini, TestServer) {
    let mock = MockGemini::start().await;
    mock.script(
        "Sunny in Paris.",
        None,
        Some(("weather", json!({"city": "Paris"}))),
        None,
    );
    let server = start(settings(
        "GEMINI",
        &mock.base_url(),
        MOCK_GEMINI_KEY,
        "gemini-2.5-flash",
    ))
    .await;
    (mock, server)
}

/// Every part of every content of a `generateContent` body Gemini received.
fn parts_sent(body: &Value) -> Vec<&Value> {
    body["contents"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["parts"].as_array().unwrap())
        .collect()
}

/// Gemini's second request carried its one function call with the signature the mock gave it
/// (not the stand-in for a call Gemini did not make).
fn second_turn_returned_the_signature(mock: &MockGemini) {
    let sent = &mock.requests()[1]["body"];
    let called: Vec<&Value> = parts_sent(sent)
        .into_iter()
        .filter(|p| p.get("functionCall").is_some())
        .collect();
    assert_eq!(called.len(), 1, "{sent}");
    assert_eq!(called[0]["thoughtSignature"], "mock-sig-0", "{sent}");
}

#[tokio::test(start_paused = true)]
async fn messages_on_a_gemini_source_are_translated_with_a_tool_round_trip() {
    let (mock, server) = gemini_weather().await;
    let tools = json!([{"name": "weather", "description": "Weather of a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]);
    let first = json!({"model": "LLM", "max_tokens": 100, "tools": tools,
        "x_anthropic_only": true,
        "messages": [{"role": "user", "content": "Weather in Paris?"}]});
    let m: Value = post(&server, "/v1/messages", &first)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(m["type"], "message", "{m}");
    assert_eq!(m["stop_reason"], "tool_use", "{m}");
    let call = m["content"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["type"] == "tool_use")
        .unwrap()
        .clone();
    assert_eq!(call["name"], "weather");
    assert_eq!(call["input"], json!({"city": "Paris"}));
    let sent = &mock.requests()[0]["body"];
    assert!(sent.get("x_anthropic_only").is_none(), "{sent}");
    assert_eq!(
        sent["contents"][0]["parts"][0]["text"], "Weather in Paris?",
        "{sent}"
    );
    // The tool's result: the mock checks the call it answers (and its thought signature).
    let second = json!({"model": "LLM", "max_tokens": 100, "tools": tools, "stream": true,
    "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": m["content"]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call["id"],
            "content": "{\"sky\": \"clear\"}"}]}
    ]});
    let resp = post(&server, "/v1/messages", &second).await;
    assert_eq!(resp.status(), 200);
    let text = resp.text().await.unwrap();
    assert!(text.contains("event: message_stop"), "{text}");
    // The mock answers its scripted text and echoes the function's response it received.
    assert_eq!(said(&text), r#"Sunny in Paris. {"sky":"clear"}"#, "{text}");
    assert!(text.contains(r#""stop_reason":"end_turn""#), "{text}");
    let sent = &mock.requests()[1]["body"];
    let parts = parts_sent(sent);
    assert!(
        parts
            .iter()
            .any(|p| p["functionResponse"]["name"] == "weather"),
        "{sent}"
    );
    server.stop().await;
}

/// The final message an Anthropic SDK's stream accumulator builds from an event stream: each
/// `content_block_start` block as it came (unknown fields kept), its deltas applied, a
/// `tool_use` block's `input` parsed from its `input_json_delta`s when it stops.
fn accumulated(sse: &str) -> Value {
    let mut content: Vec<Value> = Vec::new();
    let mut partial_json = String::new();
    let mut message = json!({});
    for data in sse.lines().filter_map(|l| l.strip_prefix("data: ")) {
        let e: Value = serde_json::from_str(data).unwrap();
        match e["type"].as_str().unwrap() {
            "message_start" => message = e["message"].clone(),
            "content_block_start" => {
                content.push(e["content_block"].clone());
                partial_json.clear();
            }
            "content_block_delta" => {
                let block = content.last_mut().unwrap();
                let d = &e["delta"];
                match d["type"].as_str().unwrap() {
                    "text_delta" => {
                        let text = format!(
                            "{}{}",
                            block["text"].as_str().unwrap(),
                            d["text"].as_str().unwrap()
                        );
                        block["text"] = json!(text);
                    }
                    "input_json_delta" => {
                        partial_json.push_str(d["partial_json"].as_str().unwrap())
                    }
                    "thinking_delta" => {
                        let t = format!(
                            "{}{}",
                            block["thinking"].as_str().unwrap(),
                            d["thinking"].as_str().unwrap()
                        );
                        block["thinking"] = json!(t);
                    }
                    "signature_delta" => block["signature"] = d["signature"].clone(),
                    other => panic!("unknown delta {other}"),
                }
            }
            "content_block_stop" => {
                let block = content.last_mut().unwrap();
                if block["type"] == "tool_use" && !partial_json.is_empty() {
                    block["input"] = serde_json::from_str(&partial_json).unwrap();
                }
            }
            "message_delta" => message["stop_reason"] = e["delta"]["stop_reason"].clone(),
            _ => {}
        }
    }
    message["content"] = Value::Array(content);
    message
}

#[tokio::test(start_paused = true)]
async fn a_streamed_gemini_tool_use_keeps_its_thought_signature_for_the_next_turn() {
    let (mock, server) = gemini_weather().await;
    let tools = json!([{"name": "weather", "description": "Weather of a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]);
    let first = json!({"model": "LLM", "max_tokens": 100, "tools": tools, "stream": true,
        "messages": [{"role": "user", "content": "Weather in Paris?"}]});
    let resp = post(&server, "/v1/messages", &first).await;
    assert_eq!(resp.status(), 200);
    let sse = resp.text().await.unwrap();
    let m = accumulated(&sse);
    assert_eq!(m["stop_reason"], "tool_use", "{sse}");
    let call = m["content"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["type"] == "tool_use")
        .unwrap_or_else(|| panic!("{sse}"))
        .clone();
    assert_eq!(call["input"], json!({"city": "Paris"}), "{sse}");
    // The mock signed the call; the stream carries the signature where the whole answer does.
    let signed = mock.requests()[0].clone();
    assert!(
        signed["action"].as_str().unwrap().contains("stream"),
        "{signed}"
    );
    assert_eq!(
        call["provider_specific_fields"]["thought_signature"], "mock-sig-0",
        "{sse}"
    );
    // The accumulated turn sent back as the SDK holds it: the call reaches Gemini with its own
    // signature (not the stand-in for a call Gemini did not make).
    let second = json!({"model": "LLM", "max_tokens": 100, "tools": tools,
    "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": m["content"]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call["id"],
            "content": "{\"sky\": \"clear\"}"}]}
    ]});
    let resp = post(&server, "/v1/messages", &second).await;
    assert_eq!(resp.status(), 200);
    let answer: Value = resp.json().await.unwrap();
    assert_eq!(answer["stop_reason"], "end_turn", "{answer}");
    second_turn_returned_the_signature(&mock);
    server.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_streamed_gemini_tool_call_on_the_chat_ingress_keeps_its_thought_signature() {
    let (mock, server) = gemini_weather().await;
    let tools = json!([{"type": "function", "function": {"name": "weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]);
    let ask = json!({"role": "user", "content": "Weather in Paris?"});
    let first = json!({"model": "LLM", "tools": tools, "stream": true, "messages": [ask]});
    let resp = post(&server, "/v1/chat/completions", &first).await;
    assert_eq!(resp.status(), 200);
    let sse = resp.text().await.unwrap();
    // The pieces merged by index as the OpenAI SDK's accumulator merges them: strings joined,
    // other fields kept.
    let mut call = serde_json::Map::new();
    for data in sse.lines().filter_map(|l| l.strip_prefix("data: ")) {
        let Ok(chunk) = serde_json::from_str::<Value>(data) else {
            continue;
        };
        for piece in chunk["choices"][0]["delta"]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
        {
            for (key, value) in piece.as_object().unwrap() {
                match (call.get_mut(key), value) {
                    (Some(Value::Object(have)), Value::Object(more)) => {
                        for (k, v) in more {
                            match (have.get_mut(k), v) {
                                (Some(Value::String(a)), Value::String(b)) => a.push_str(b),
                                _ => {
                                    have.insert(k.clone(), v.clone());
                                }
                            }
                        }
                    }
                    (Some(_), _) => {}
                    (None, _) => {
                        call.insert(key.clone(), value.clone());
                    }
                }
            }
        }
    }
    assert_eq!(call["function"]["name"], "weather", "{sse}");
    assert_eq!(
        call["provider_specific_fields"]["thought_signature"], "mock-sig-0",
        "{sse}"
    );
    call.remove("index");
    let second = json!({"model": "LLM", "tools": tools, "messages": [
        ask,
        {"role": "assistant", "content": null, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": "{\"sky\": \"clear\"}"}
    ]});
    let resp = post(&server, "/v1/chat/completions", &second).await;
    assert_eq!(resp.status(), 200);
    second_turn_returned_the_signature(&mock);
    server.stop().await;
}

#[tokio::test(start_paused = true)]
async fn responses_on_an_anthropic_source_are_translated_with_a_function_round_trip() {
    let mock = MockAnthropic::start().await;
    mock.set_text("Plain answer");
    let server = start(settings(
        "ANTHROPIC",
        &mock.base_url(),
        MOCK_ANTHROPIC_KEY,
        "claude-mock",
    ))
    .await;
    // Text, not streamed and streamed.
    let r: Value = post(
        &server,
        "/v1/responses",
        &json!({"model": "LLM", "instructions": "Be brief.", "input": "Hi",
                "max_output_tokens": 64}),
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(r["output"][0]["content"][0]["text"], "Plain answer", "{r}");
    assert!(r["usage"]["input_tokens"].as_u64().unwrap() > 0, "{r}");
    let sent = &mock.requests()[0].body;
    assert_eq!(sent["model"], "claude-mock");
    assert_eq!(sent["max_tokens"], 64);
    assert_eq!(sent["system"][0]["text"], "Be brief.", "{sent}");
    assert_eq!(
        sent["messages"],
        json!([{"role": "user", "content": [{"type": "text", "text": "Hi"}]}])
    );
    let streamed = post(
        &server,
        "/v1/responses",
        &json!({"model": "LLM", "input": "Hi", "stream": true}),
    )
    .await
    .text()
    .await
    .unwrap();
    assert!(
        streamed.contains("response.output_text.delta"),
        "{streamed}"
    );
    assert!(streamed.contains("response.completed"), "{streamed}");
    assert_eq!(mock.requests()[1].body["stream"], true);

    // A function tool: the call comes back as a function_call item…
    let tools = json!([{"type": "function", "name": "weather", "description": "Weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]);
    let r: Value = post(
        &server,
        "/v1/responses",
        &json!({"model": "LLM", "input": "Paris", "tools": tools}),
    )
    .await
    .json()
    .await
    .unwrap();
    let call = r["output"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["type"] == "function_call")
        .unwrap_or_else(|| panic!("{r}"))
        .clone();
    assert_eq!(call["name"], "weather");
    assert_eq!(
        serde_json::from_str::<Value>(call["arguments"].as_str().unwrap()).unwrap(),
        json!({"city": "Paris"})
    );
    let sent = &mock.requests()[2].body;
    assert_eq!(sent["tools"][0]["name"], "weather", "{sent}");
    assert_eq!(
        sent["tools"][0]["input_schema"]["properties"]["city"]["type"],
        "string"
    );
    // …and its output goes back as a tool_result the mock matches to its tool_use.
    let r: Value = post(
        &server,
        "/v1/responses",
        &json!({"model": "LLM", "tools": tools, "input": [
            {"role": "user", "content": "Paris"},
            call,
            {"type": "function_call_output", "call_id": call["call_id"], "output": "Sunny"}
        ]}),
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(
        r["output"][0]["content"][0]["text"], "tool said: Sunny",
        "{r}"
    );
    let sent = &mock.requests()[3].body;
    assert_eq!(
        sent["messages"][1]["content"][0]["type"], "tool_use",
        "{sent}"
    );
    assert_eq!(
        sent["messages"][2]["content"][0]["tool_use_id"],
        sent["messages"][1]["content"][0]["id"]
    );
    server.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_mixed_scope_sends_each_source_its_own_form_and_the_cache_key_covers_the_body() {
    use polygateway_testkit::{Behaviour, MockUpstream};
    let claude = MockAnthropic::start().await;
    let openai = MockUpstream::start(Behaviour::healthy()).await;
    let mut env: BTreeMap<String, String> = mock_env();
    for (k, v) in [
        ("LLM__SELECTOR", "round_robin"),
        ("PGW_CACHE_BACKEND", "memory"),
        ("PGW_CACHE_NAMESPACE", "test"),
        ("PGW_CACHE_TTL_S", "600"),
        ("LLM__ANTHROPIC__1__API_KEY", MOCK_ANTHROPIC_KEY),
        ("LLM__ANTHROPIC__1__MODEL", "claude-mock"),
        ("LLM__OPENAI__1__API_KEY", "sk-test"),
        ("LLM__OPENAI__1__MODEL", "test-model"),
    ] {
        env.insert(k.into(), v.into());
    }
    env.insert("LLM__ANTHROPIC__1__BASE_URL".into(), claude.base_url());
    env.insert("LLM__OPENAI__1__BASE_URL".into(), openai.base_url());
    let server = start(Settings::from_map(&env).expect("settings")).await;
    // Four different calls (the cache would answer a repeated one), alternating sources.
    for i in 0..4 {
        let req = json!({"model": "LLM", "max_tokens": 50, "x_future_field": i,
            "messages": [{"role": "user", "content": [
                {"type": "text", "text": "hello", "cache_control": {"type": "ephemeral"}}]}]});
        let resp = post(&server, "/v1/messages", &req).await;
        assert_eq!(resp.status(), 200);
        let _: Value = resp.json().await.unwrap();
    }
    let native = claude.requests();
    let canonical = openai.requests();
    assert_eq!((native.len(), canonical.len()), (2, 2));
    for r in &native {
        assert!(r.body["x_future_field"].is_number(), "{}", r.body);
        assert_eq!(r.body["model"], "claude-mock");
        assert_eq!(
            r.body["messages"][0]["content"][0]["cache_control"],
            json!({"type": "ephemeral"})
        );
    }
    for r in &canonical {
        assert!(r.body.get("x_future_field").is_none(), "{}", r.body);
        assert_eq!(r.body["model"], "test-model");
        assert_eq!(r.body["messages"][0]["role"], "user", "{}", r.body);
        assert_eq!(r.body["max_tokens"], 50);
    }
    // The same canonical call with a different unknown field is a different question: not a
    // cache hit. The very same body is.
    let again = json!({"model": "LLM", "max_tokens": 50, "x_future_field": 0,
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "hello", "cache_control": {"type": "ephemeral"}}]}]});
    assert_eq!(post(&server, "/v1/messages", &again).await.status(), 200);
    assert_eq!(
        claude.requests().len() + openai.requests().len(),
        4,
        "a hit"
    );
    let other = json!({"model": "LLM", "max_tokens": 50, "x_future_field": 9,
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "hello", "cache_control": {"type": "ephemeral"}}]}]});
    assert_eq!(post(&server, "/v1/messages", &other).await.status(), 200);
    assert_eq!(
        claude.requests().len() + openai.requests().len(),
        5,
        "a miss"
    );
    // Streaming is the client's way of reading, not part of the question: a hit.
    let mut streamed = other.clone();
    streamed["stream"] = json!(true);
    let resp = post(&server, "/v1/messages", &streamed).await;
    assert_eq!(resp.status(), 200);
    assert!(resp.text().await.unwrap().contains("message_stop"));
    assert_eq!(
        claude.requests().len() + openai.requests().len(),
        5,
        "a streamed hit"
    );
    server.stop().await;
}
