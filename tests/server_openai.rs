//! `polygateway serve`'s OpenAI-compatible routes over real HTTP: response shapes, SSE framing
//! (raw bytes), reasoning, usage, sampling pass-through, embeddings (float and base64), models,
//! OCR pass-through and the HTTP mapping of every error class.

mod server_support;

use base64::Engine;
use polygateway_testkit::mock_llm::{mock_embedding, MOCK_CONTENT};
use polygateway_testkit::mock_ocr::{fixture, MockOcr, OcrFault};
use polygateway_testkit::{mock_settings, Behaviour, MockUpstream};
use serde_json::{json, Value};
use server_support::*;

fn client() -> reqwest::Client {
    reqwest::Client::new()
}

async fn post(server: &TestServer, path: &str, body: &Value) -> reqwest::Response {
    client()
        .post(server.url(path))
        .bearer_auth(KEY)
        .json(body)
        .send()
        .await
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_chat_completion_has_the_openai_shape_and_passes_sampling_through() {
    let mock = MockUpstream::start(Behaviour::healthy()).await;
    let server = start(mock_settings(&[("LLM", &mock.base_url())], &[])).await;
    let mut body = chat_body("LLM", false);
    body["temperature"] = json!(0.25);
    body["max_tokens"] = json!(33);
    let resp = post(&server, "/v1/chat/completions", &body).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-pgw-source"], "openai_1");
    let answer: Value = resp.json().await.unwrap();
    assert_eq!(answer["object"], "chat.completion");
    assert_eq!(answer["model"], "LLM");
    assert!(answer["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert_eq!(answer["choices"][0]["message"]["role"], "assistant");
    assert_eq!(answer["choices"][0]["message"]["content"], MOCK_CONTENT);
    assert_eq!(answer["choices"][0]["finish_reason"], "stop");
    let usage = &answer["usage"];
    assert_eq!(
        usage["total_tokens"].as_u64().unwrap(),
        usage["prompt_tokens"].as_u64().unwrap() + usage["completion_tokens"].as_u64().unwrap()
    );
    // Sampling parameters reach the upstream through the overlay; the model is the source's.
    let sent = mock.last_request().unwrap().body;
    assert_eq!(sent["temperature"], 0.25);
    assert_eq!(sent["max_tokens"], 33);
    assert_eq!(sent["model"], "test-model");
    server.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_stream_is_openai_sse_with_usage_and_done() {
    let mock = MockUpstream::start(Behaviour::healthy()).await;
    let server = start(mock_settings(&[("LLM", &mock.base_url())], &[])).await;
    let mut body = chat_body("LLM", true);
    body["stream_options"] = json!({"include_usage": true});
    let resp = post(&server, "/v1/chat/completions", &body).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let text = resp.text().await.unwrap();
    let payloads = sse_payloads(&text);
    assert_eq!(payloads.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = payloads[..payloads.len() - 1]
        .iter()
        .map(|p| serde_json::from_str(p).unwrap())
        .collect();
    assert!(chunks
        .iter()
        .all(|c| c["object"] == "chat.completion.chunk"));
    let id = &chunks[0]["id"];
    assert!(chunks.iter().all(|c| &c["id"] == id), "one id per stream");
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let content: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(content, MOCK_CONTENT);
    // More than one content delta: relayed as they arrive, not buffered into one.
    let deltas = chunks
        .iter()
        .filter(|c| c["choices"][0]["delta"]["content"].is_string())
        .count();
    assert!(deltas >= 2, "{deltas} content deltas");
    let finish = &chunks[chunks.len() - 2];
    assert_eq!(finish["choices"][0]["finish_reason"], "stop");
    let usage = chunks.last().unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert!(usage["usage"]["completion_tokens"].as_u64().unwrap() > 0);
    // The upstream was asked to stream.
    assert_eq!(mock.last_request().unwrap().body["stream"], true);
    server.stop().await;
}

#[tokio::test(start_paused = true)]
async fn without_include_usage_no_usage_chunk_is_sent() {
    let mock = MockUpstream::start(Behaviour::healthy()).await;
    let server = start(mock_settings(&[("LLM", &mock.base_url())], &[])).await;
    let text = post(&server, "/v1/chat/completions", &chat_body("LLM", true))
        .await
        .text()
        .await
        .unwrap();
    let payloads = sse_payloads(&text);
    assert!(payloads.iter().all(|p| !p.contains("\"usage\"")), "{text}");
    server.stop().await;
}

#[tokio::test(start_paused = true)]
async fn reasoning_is_relayed_as_reasoning_content() {
    let mock = MockUpstream::start(Behaviour::Reasoning).await;
    let server = start(mock_settings(&[("LLM", &mock.base_url())], &[])).await;
    let text = post(&server, "/v1/chat/completions", &chat_body("LLM", true))
        .await
        .text()
        .await
        .unwrap();
    let payloads = sse_payloads(&text);
    let chunks: Vec<Value> = payloads
        .iter()
        .filter(|p| *p != "[DONE]")
        .map(|p| serde_json::from_str(p).unwrap())
        .collect();
    let reasoning: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["reasoning_content"].as_str())
        .collect();
    assert!(!reasoning.is_empty(), "{text}");
    let content: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(content, MOCK_CONTENT);
    // Not streamed: the thinking is the message's reasoning_content.
    let answer: Value = post(&server, "/v1/chat/completions", &chat_body("LLM", false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        answer["choices"][0]["message"]["reasoning_content"].as_str(),
        Some(reasoning.as_str())
    );
    server.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_refusal_is_relayed_as_it_arrives() {
    let chunk = |delta: Value, finish: Value| {
        json!({"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let mock = MockUpstream::start(Behaviour::Raw {
        chunks: vec![
            chunk(
                json!({"role": "assistant", "refusal": "I can't"}),
                Value::Null,
            ),
            chunk(json!({"refusal": " help with that."}), Value::Null),
            chunk(json!({}), json!("stop")),
        ],
        completion: Value::Null,
    })
    .await;
    let server = start(mock_settings(&[("LLM", &mock.base_url())], &[])).await;
    let text = post(&server, "/v1/chat/completions", &chat_body("LLM", true))
        .await
        .text()
        .await
        .unwrap();
    let chunks: Vec<Value> = sse_payloads(&text)
        .iter()
        .filter(|p| *p != "[DONE]")
        .map(|p| serde_json::from_str(p).unwrap())
        .collect();
    // Each piece in a chunk of its own, before the finish chunk — not joined at the end.
    let pieces: Vec<&str> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["refusal"].as_str())
        .collect();
    assert_eq!(pieces, ["I can't", " help with that."], "{text}");
    let first = chunks
        .iter()
        .position(|c| c["choices"][0]["delta"]["refusal"].is_string())
        .unwrap();
    assert_eq!(chunks[first]["choices"][0]["delta"]["role"], "assistant");
    let finish = chunks
        .iter()
        .position(|c| c["choices"][0]["finish_reason"].is_string())
        .unwrap();
    assert!(first < finish, "{text}");
    server.stop().await;
}

#[tokio::test(start_paused = true)]
async fn models_and_aliases_select_scopes() {
    let llm = MockUpstream::start(Behaviour::healthy_with("from LLM")).await;
    let judge = MockUpstream::start(Behaviour::healthy_with("from JUDGE")).await;
    let settings = mock_settings(
        &[("LLM", &llm.base_url()), ("JUDGE", &judge.base_url())],
        &[("PGW_SERVER_MODEL_ALIASES", "gpt-4o-mini=JUDGE")],
    );
    let server = start(settings).await;
    let answer: Value = post(
        &server,
        "/v1/chat/completions",
        &chat_body("gpt-4o-mini", false),
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(answer["choices"][0]["message"]["content"], "from JUDGE");
    assert_eq!(answer["model"], "gpt-4o-mini");
    let models: Value = client()
        .get(server.url("/v1/models"))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ids: Vec<&str> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["JUDGE", "LLM", "gpt-4o-mini"]);
    let unknown = post(&server, "/v1/chat/completions", &chat_body("gpt-5", false)).await;
    assert_eq!(unknown.status(), 404);
    let e: Value = unknown.json().await.unwrap();
    assert_eq!(e["error"]["code"], "model_not_found");
    assert!(e["error"]["message"]
        .as_str()
        .unwrap()
        .contains("gpt-4o-mini"));
    server.stop().await;
}

#[tokio::test(start_paused = true)]
async fn embeddings_come_back_as_floats_or_base64_in_input_order() {
    let mock = MockUpstream::start(Behaviour::healthy()).await;
    let settings = mock_settings(
        &[("EMBED", &mock.base_url())],
        &[("EMBED__BATCH_SIZE", "2")],
    );
    let server = start(settings).await;
    let inputs = ["alpha", "beta", "gamma"];
    let floats: Value = post(
        &server,
        "/v1/embeddings",
        &json!({"model": "EMBED", "input": inputs}),
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(floats["object"], "list");
    for (i, text) in inputs.iter().enumerate() {
        let item = &floats["data"][i];
        assert_eq!(item["index"], i);
        let v: Vec<f32> = serde_json::from_value(item["embedding"].clone()).unwrap();
        assert_eq!(v, mock_embedding(text, 8));
    }
    let b64: Value = post(
        &server,
        "/v1/embeddings",
        &json!({"model": "EMBED", "input": "alpha", "encoding_format": "base64"}),
    )
    .await
    .json()
    .await
    .unwrap();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64["data"][0]["embedding"].as_str().unwrap())
        .unwrap();
    let v: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    assert_eq!(v, mock_embedding("alpha", 8));
    // A chat scope is not an embeddings model.
    let wrong = post(&server, "/v1/chat/completions", &chat_body("EMBED", false)).await;
    assert_eq!(wrong.status(), 404);
    let tokens = post(
        &server,
        "/v1/embeddings",
        &json!({"model": "EMBED", "input": [[1, 2, 3]]}),
    )
    .await;
    assert_eq!(tokens.status(), 400);
    server.stop().await;
}

#[tokio::test(start_paused = true)]
async fn errors_speak_http_in_the_openai_shape() {
    let mock = MockUpstream::start(Behaviour::BadRequest).await;
    let settings = mock_settings(
        &[("LLM", &mock.base_url())],
        &[("LLM__RETRY__MAX_ATTEMPTS", "2")],
    );
    let server = start(settings).await;
    // Rejected upstream → 400 with the upstream's reason, not retried.
    for stream in [false, true] {
        let resp = post(&server, "/v1/chat/completions", &chat_body("LLM", stream)).await;
        assert_eq!(resp.status(), 400, "stream={stream}");
        let e: Value = resp.json().await.unwrap();
        assert_eq!(e["error"]["type"], "invalid_request_error");
        assert_eq!(e["error"]["code"], "request_rejected");
        assert!(
            e["error"]["message"].as_str().unwrap().contains("400"),
            "{e}"
        );
    }
    // Every attempt fails → 503 with Retry-After, before any SSE byte for a stream.
    mock.set_behaviour(Behaviour::ServerError(503));
    for stream in [false, true] {
        let resp = post(&server, "/v1/chat/completions", &chat_body("LLM", stream)).await;
        assert_eq!(resp.status(), 503, "stream={stream}");
        assert!(resp.headers().contains_key("retry-after"));
        let e: Value = resp.json().await.unwrap();
        assert_eq!(e["error"]["code"], "retry_exhausted");
    }
    // An answer that is not the JSON asked for → 502.
    mock.set_behaviour(Behaviour::healthy_with("not json at all"));
    let mut body = chat_body("LLM", false);
    body["response_format"] = json!({"type": "json_object"});
    let resp = post(&server, "/v1/chat/completions", &body).await;
    assert_eq!(resp.status(), 502);
    let e: Value = resp.json().await.unwrap();
    assert_eq!(e["error"]["code"], "result_invalid");
    // Local refusals: not JSON, an unknown response format.
    let resp = client()
        .post(server.url("/v1/chat/completions"))
        .bearer_auth(KEY)
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let e: Value = resp.json().await.unwrap();
    assert_eq!(e["error"]["type"], "invalid_request_error");
    let mut body = chat_body("LLM", false);
    body["response_format"] = json!({"type": "yaml"});
    let resp = post(&server, "/v1/chat/completions", &body).await;
    assert_eq!(resp.status(), 400);
    assert_eq!(
        resp.json::<Value>().await.unwrap()["error"]["param"],
        "response_format"
    );
    server.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_json_object_answer_is_repaired_and_streams_as_one_delta() {
    let mock = MockUpstream::start(Behaviour::healthy_with("```json\n{\"ok\": true,}\n```")).await;
    let server = start(mock_settings(&[("LLM", &mock.base_url())], &[])).await;
    let mut body = chat_body("LLM", false);
    body["response_format"] = json!({"type": "json_object"});
    let answer: Value = post(&server, "/v1/chat/completions", &body)
        .await
        .json()
        .await
        .unwrap();
    // The caller's format reaches the upstream; the answer is the raw text, valid JSON behind it.
    assert_eq!(
        mock.last_request().unwrap().body["response_format"]["type"],
        "json_object"
    );
    assert!(answer["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .contains("\"ok\""));
    body["stream"] = json!(true);
    let text = post(&server, "/v1/chat/completions", &body)
        .await
        .text()
        .await
        .unwrap();
    let payloads = sse_payloads(&text);
    assert_eq!(payloads.last().unwrap(), "[DONE]");
    server.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_failure_after_the_first_delta_is_an_error_frame_without_done() {
    let mock = MockUpstream::start(Behaviour::InBandError).await;
    let server = start(mock_settings(&[("LLM", &mock.base_url())], &[])).await;
    let resp = post(&server, "/v1/chat/completions", &chat_body("LLM", true)).await;
    assert_eq!(resp.status(), 200);
    let text = resp.text().await.unwrap();
    let payloads = sse_payloads(&text);
    assert!(!payloads.contains(&"[DONE]".to_string()), "{text}");
    let last: Value = serde_json::from_str(payloads.last().unwrap()).unwrap();
    assert_eq!(last["error"]["code"], "stream_interrupted", "{text}");
    server.stop().await;
}

#[tokio::test(start_paused = true)]
async fn ocr_is_passed_through_governed_with_the_layout_inline() {
    let ocr = MockOcr::start(OcrFault::None).await;
    let server = start(mock_settings(&[("OCR", &ocr.base_url())], &[])).await;
    let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR fake png body".to_vec();
    let form = || {
        reqwest::multipart::Form::new().part(
            "file",
            reqwest::multipart::Part::bytes(png.clone()).file_name("page.png"),
        )
    };
    let text: Value = client()
        .post(server.url("/ocr/text"))
        .bearer_auth(KEY)
        .multipart(form())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(text["success"], true);
    assert_eq!(text["content"], fixture::SAMPLE_TEXT);
    let layout: Value = client()
        .post(server.url("/parse?model=OCR"))
        .bearer_auth(KEY)
        .multipart(form())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(layout["success"], true);
    assert!(
        !layout["elements"].as_array().unwrap().is_empty(),
        "{layout}"
    );
    assert_eq!(layout["page_sizes"][0], json!([612.0, 792.0]));
    // Not an image: refused locally as a bad request.
    let bad = client()
        .post(server.url("/ocr/text"))
        .bearer_auth(KEY)
        .multipart(reqwest::multipart::Form::new().part(
            "file",
            reqwest::multipart::Part::bytes(b"%PDF-1.7".to_vec()).file_name("x.pdf"),
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    server.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_json_schema_response_format_runs_the_ladder_with_re_asks() {
    let mock = MockUpstream::start(Behaviour::ScriptedContent(vec![
        r#"{"city": "Oslo"}"#.into(),
        r#"{"city": "Oslo", "population": 709000}"#.into(),
    ]))
    .await;
    let server = start(mock_settings(&[("LLM", &mock.base_url())], &[])).await;
    let schema = json!({
        "type": "object",
        "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
        "required": ["city", "population"],
        "additionalProperties": false,
    });
    let mut body = chat_body("LLM", false);
    body["response_format"] = json!({"type": "json_schema", "json_schema": {"name": "city fact", "schema": schema, "strict": true}});
    let resp = post(&server, "/v1/chat/completions", &body).await;
    assert_eq!(resp.status(), 200);
    let answer: Value = resp.json().await.unwrap();
    let content: Value =
        serde_json::from_str(answer["choices"][0]["message"]["content"].as_str().unwrap()).unwrap();
    assert_eq!(content, json!({"city": "Oslo", "population": 709000}));
    let asked = mock.requests();
    assert_eq!(
        asked.len(),
        2,
        "one re-ask after the answer missing `population`"
    );
    // The schema went to the (openai) upstream in its strict json_schema form.
    let format = &asked[0].body["response_format"];
    assert_eq!(format["type"], "json_schema");
    assert_eq!(format["json_schema"]["name"], "city_fact");
    assert_eq!(format["json_schema"]["schema"], schema);
    // The re-ask told the model what was wrong.
    let reask = asked[1].body["messages"].to_string();
    assert!(reask.contains("population"), "{reask}");

    // Never fitting: 502 once the re-asks are spent.
    mock.set_behaviour(Behaviour::healthy_with(r#"{"city": 1}"#));
    let resp = post(&server, "/v1/chat/completions", &body).await;
    assert_eq!(resp.status(), 502);
    let e: Value = resp.json().await.unwrap();
    assert_eq!(e["error"]["code"], "result_invalid");
    // A json_schema without a schema is the caller's mistake.
    body["response_format"] = json!({"type": "json_schema", "json_schema": {"name": "x"}});
    let resp = post(&server, "/v1/chat/completions", &body).await;
    assert_eq!(resp.status(), 400);
    server.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_body_over_the_limit_is_413_in_the_openai_shape() {
    let mock = MockUpstream::start(Behaviour::healthy()).await;
    let settings = mock_settings(
        &[("LLM", &mock.base_url())],
        &[("PGW_SERVER_BODY_LIMIT_BYTES", "1024")],
    );
    let server = start(settings).await;
    let mut body = chat_body("LLM", false);
    body["messages"][0]["content"] = json!("x".repeat(4096));
    let resp = post(&server, "/v1/chat/completions", &body).await;
    assert_eq!(resp.status(), 413);
    let e: Value = resp.json().await.unwrap();
    assert_eq!(e["error"]["type"], "invalid_request_error");
    assert_eq!(mock.counts().chat, 0);
    // Under the limit, the same route serves.
    let resp = post(&server, "/v1/chat/completions", &chat_body("LLM", false)).await;
    assert_eq!(resp.status(), 200);
    server.stop().await;
}
