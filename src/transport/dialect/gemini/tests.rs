use super::*;
use crate::transport::assembly::Assembly;
use crate::types::{ImageUrl, ToolCall};
use polygateway_actors::FailureClass;
use reqwest::header::{HeaderValue, RETRY_AFTER};

fn signature_of(call: &ToolCall) -> Option<&str> {
    call.extra
        .get(PROVIDER_FIELDS)?
        .get(SIGNATURE_FIELD)?
        .as_str()
}

fn overlay(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap()
}

#[test]
fn roles_system_images_and_generation_config() {
    let messages = vec![
        Message::system("Be brief."),
        Message::developer("Answer in French."),
        Message::user_with_images("What is this?", [("image/png", &b"\x89PNG\r\n\x1a\n"[..])]),
        Message::assistant("Un chat."),
        Message::with_content(
            Role::User,
            Content::Parts(vec![
                ContentPart::Text {
                    text: "And this?".into(),
                },
                ContentPart::ImageUrl {
                    image_url: ImageUrl {
                        url: "https://example.invalid/dog.webp?x=1".into(),
                        detail: None,
                    },
                },
            ]),
        ),
    ];
    let body = encode_request(
        &messages,
        &overlay(
            json!({"max_tokens": 64, "temperature": 0.2, "top_p": 0.9, "stop": "END", "n": 1}),
        ),
        None,
    )
    .unwrap();
    assert_eq!(
        body["systemInstruction"],
        json!({"parts": [{"text": "Be brief."}, {"text": "Answer in French."}]})
    );
    let contents = body["contents"].as_array().unwrap();
    assert_eq!(contents.len(), 3);
    assert_eq!(contents[0]["role"], "user");
    assert_eq!(
        contents[0]["parts"][1],
        json!({"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}})
    );
    assert_eq!(
        contents[1],
        json!({"role": "model", "parts": [{"text": "Un chat."}]})
    );
    assert_eq!(
        contents[2]["parts"][1],
        json!({"fileData": {"mimeType": "image/webp", "fileUri": "https://example.invalid/dog.webp?x=1"}})
    );
    assert_eq!(
        body["generationConfig"],
        json!({"maxOutputTokens": 64, "temperature": 0.2, "topP": 0.9, "candidateCount": 1, "stopSequences": ["END"]})
    );
    assert!(body.get("tools").is_none() && body.get("toolConfig").is_none());
}

#[test]
fn unknown_parts_and_empty_conversations_are_rejected() {
    let audio = Message::with_content(
        Role::User,
        Content::Parts(vec![ContentPart::Other(
            json!({"type": "input_audio", "input_audio": {"data": "UklG", "format": "wav"}}),
        )]),
    );
    let e = encode_request(&[audio], &Map::new(), None).unwrap_err();
    assert_eq!(e.class, FailureClass::RequestRejected);
    assert!(e.message.contains("input_audio"), "{}", e.message);
    let e = encode_request(&[Message::system("only rules")], &Map::new(), None).unwrap_err();
    assert_eq!(e.class, FailureClass::RequestRejected);
}

#[test]
fn tools_tool_choice_and_the_tool_round_trip() {
    let tools = json!([{"type": "function", "function": {
        "name": "weather", "description": "Weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"], "additionalProperties": false}}}]);
    let mut call = ToolCall::function("call_a", "weather", r#"{"city":"Paris"}"#);
    call.extra.insert(
        PROVIDER_FIELDS.into(),
        json!({ SIGNATURE_FIELD: "c2lnLWZj" }),
    );
    let parallel = ToolCall::function("call_b", "weather", r#"{"city":"Lyon"}"#);
    let messages = vec![
        Message::user("Weather in Paris and Lyon?"),
        Message::assistant_tool_calls(vec![call, parallel]),
        Message::tool_result("call_a", r#"{"temp_c": 18}"#),
        Message::tool_result("call_b", "21"),
    ];
    for (choice, config) in [
        (json!("auto"), json!({"mode": "AUTO"})),
        (json!("none"), json!({"mode": "NONE"})),
        (json!("required"), json!({"mode": "ANY"})),
        (
            json!({"type": "function", "function": {"name": "weather"}}),
            json!({"mode": "ANY", "allowedFunctionNames": ["weather"]}),
        ),
    ] {
        let body = encode_request(
            &messages,
            &overlay(json!({"tools": tools, "tool_choice": choice})),
            None,
        )
        .unwrap();
        assert_eq!(body["toolConfig"]["functionCallingConfig"], config);
        let declaration = &body["tools"][0]["functionDeclarations"][0];
        assert_eq!(declaration["name"], "weather");
        // JSON Schema as is, additionalProperties included: parametersJsonSchema takes it.
        assert_eq!(
            declaration["parametersJsonSchema"],
            tools[0]["function"]["parameters"]
        );
        let contents = body["contents"].as_array().unwrap();
        assert_eq!(contents.len(), 3, "both tool results in one user turn");
        assert_eq!(
            contents[1]["parts"][0],
            json!({"functionCall": {"name": "weather", "args": {"city": "Paris"}},
                   "thoughtSignature": "c2lnLWZj"})
        );
        assert!(contents[1]["parts"][1].get("thoughtSignature").is_none());
        assert_eq!(contents[2]["role"], "user");
        assert_eq!(
            contents[2]["parts"],
            json!([
                {"functionResponse": {"name": "weather", "response": {"temp_c": 18}}},
                {"functionResponse": {"name": "weather", "response": {"result": 21}}}
            ])
        );
    }
    // A tool result that answers no earlier call cannot be named.
    let orphan = vec![Message::user("hi"), Message::tool_result("call_x", "1")];
    let e = encode_request(&orphan, &Map::new(), None).unwrap_err();
    assert_eq!(e.class, FailureClass::RequestRejected);
    // Arguments Gemini cannot take as an object are refused here, not upstream.
    let bad = vec![
        Message::user("hi"),
        Message::assistant_tool_calls(vec![ToolCall::function("c", "f", "{oops")]),
    ];
    assert_eq!(
        encode_request(&bad, &Map::new(), None).unwrap_err().class,
        FailureClass::RequestRejected
    );
}

#[test]
fn thinking_config_from_the_source_and_the_overlay() {
    let user = [Message::user("think")];
    let ask = ThinkingAsk {
        include_thoughts: true,
        budget: Some(1024),
    };
    let body = encode_request(&user, &Map::new(), Some(ask)).unwrap();
    assert_eq!(
        body["generationConfig"]["thinkingConfig"],
        json!({"includeThoughts": true, "thinkingBudget": 1024})
    );
    let body = encode_request(
        &user,
        &overlay(json!({"thinking": {"type": "enabled", "budget_tokens": 2048}})),
        Some(ask),
    )
    .unwrap();
    assert_eq!(
        body["generationConfig"]["thinkingConfig"],
        json!({"includeThoughts": true, "thinkingBudget": 2048})
    );
    let body = encode_request(
        &user,
        &overlay(json!({"thinking": {"type": "disabled"}})),
        Some(ask),
    )
    .unwrap();
    assert_eq!(
        body["generationConfig"]["thinkingConfig"],
        json!({"thinkingBudget": 0})
    );
}

#[test]
fn thought_signatures_round_trip_through_the_assembly() {
    let frame = r#"{"candidates": [{"content": {"role": "model", "parts": [
        {"text": "The user wants weather.", "thought": true, "thoughtSignature": "dGhvdWdodA=="},
        {"functionCall": {"name": "weather", "args": {"city": "Paris"}}, "thoughtSignature": "ZmM="},
        {"functionCall": {"name": "weather", "args": {"city": "Lyon"}}}
      ]}, "finishReason": "STOP", "index": 0}],
      "usageMetadata": {"promptTokenCount": 100, "cachedContentTokenCount": 60,
        "candidatesTokenCount": 20, "thoughtsTokenCount": 30, "toolUsePromptTokenCount": 5,
        "totalTokenCount": 155},
      "modelVersion": "gemini-2.5-flash", "responseId": "r1"}"#;
    let mut decoder = Decoder::default();
    let decoded = decoder.decode(frame).unwrap();
    assert!(decoder.finished());
    assert_eq!(
        decoded.frame.usage,
        Some(WireUsage {
            prompt_tokens: 105,
            completion_tokens: 50,
            cached_prompt_tokens: Some(60),
            cache_write_5m_tokens: None,
            cache_write_1h_tokens: None,
            reasoning_tokens: Some(30),
        })
    );
    let mut acc = Assembly::new(false);
    let mut deltas = Vec::new();
    assert!(acc.apply(decoded.frame, &mut deltas));
    acc.finish(&mut deltas);
    let mut answer = acc.into_response();
    answer.thinking_blocks = decoded.thinking_blocks;
    assert_eq!(answer.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(answer.thinking, "The user wants weather.");
    assert_eq!(answer.model_reported.as_deref(), Some("gemini-2.5-flash"));
    assert_eq!(answer.tool_calls.len(), 2);
    assert_eq!(answer.tool_calls[0].id, "call_r1_0");
    assert_eq!(answer.tool_calls[1].id, "call_r1_1");
    assert_eq!(
        answer.tool_calls[0].function.arguments,
        r#"{"city":"Paris"}"#
    );
    assert_eq!(signature_of(&answer.tool_calls[0]), Some("ZmM="));
    assert_eq!(signature_of(&answer.tool_calls[1]), None);

    // Next turn: the signatures go back on the same parts, unchanged.
    let next = vec![
        Message::user("Weather?"),
        answer.to_message(),
        Message::tool_result("call_r1_0", "18"),
        Message::tool_result("call_r1_1", "21"),
    ];
    let body = encode_request(&next, &Map::new(), None).unwrap();
    let model = &body["contents"][1];
    assert_eq!(model["role"], "model");
    assert_eq!(
        model["parts"],
        json!([
            {"text": "The user wants weather.", "thought": true, "thoughtSignature": "dGhvdWdodA=="},
            {"functionCall": {"name": "weather", "args": {"city": "Paris"}}, "thoughtSignature": "ZmM="},
            {"functionCall": {"name": "weather", "args": {"city": "Lyon"}}}
        ])
    );
    assert_eq!(
        body["contents"][2]["parts"][1]["functionResponse"]["name"],
        "weather"
    );
}

#[test]
fn a_signature_on_a_text_part_comes_back_on_the_text_part() {
    let mut decoder = Decoder::default();
    let decoded = decoder
        .decode(r#"{"candidates": [{"content": {"parts": [{"text": "Paris.", "thoughtSignature": "dHh0"}]}, "finishReason": "STOP"}]}"#)
        .unwrap();
    assert_eq!(
        decoded.thinking_blocks,
        vec![ThinkingBlock::Thinking {
            thinking: String::new(),
            signature: Some("dHh0".into())
        }]
    );
    let mut turn = Message::assistant("Paris.");
    turn.thinking_blocks = decoded.thinking_blocks;
    let body = encode_request(&[Message::user("Capital?"), turn], &Map::new(), None).unwrap();
    assert_eq!(
        body["contents"][1]["parts"],
        json!([{"text": "Paris.", "thoughtSignature": "dHh0"}])
    );
}

#[test]
fn streamed_thoughts_merge_into_one_signed_block() {
    let mut decoder = Decoder::default();
    let mut blocks = Vec::new();
    let mut text = String::new();
    for data in [
        r#"{"candidates": [{"content": {"parts": [{"text": "Let me ", "thought": true}]}}]}"#,
        r#"{"candidates": [{"content": {"parts": [{"text": "think.", "thought": true, "thoughtSignature": "c2ln"}]}}]}"#,
        r#"{"candidates": [{"content": {"parts": [{"text": "Forty-two."}]}}]}"#,
        r#"{"candidates": [{"content": {"parts": [{"text": ""}]}, "finishReason": "STOP"}], "usageMetadata": {"promptTokenCount": 4, "candidatesTokenCount": 3}}"#,
    ] {
        assert!(!decoder.finished());
        let f = decoder.decode(data).unwrap();
        merge_blocks(&mut blocks, f.thinking_blocks);
        for c in f.frame.choices {
            text.push_str(c.content.as_deref().unwrap_or_default());
        }
    }
    assert!(decoder.finished());
    assert_eq!(text, "Forty-two.");
    assert_eq!(
        blocks,
        vec![ThinkingBlock::Thinking {
            thinking: "Let me think.".into(),
            signature: Some("c2ln".into())
        }]
    );
}

#[test]
fn finish_reasons_stay_visible_and_are_judged() {
    for (raw, canonical, class) in [
        ("STOP", "stop", None),
        ("MAX_TOKENS", "length", None),
        ("SAFETY", "safety", Some(FailureClass::RequestRejected)),
        (
            "RECITATION",
            "recitation",
            Some(FailureClass::RequestRejected),
        ),
        (
            "PROHIBITED_CONTENT",
            "prohibited_content",
            Some(FailureClass::RequestRejected),
        ),
        (
            "BLOCKLIST",
            "blocklist",
            Some(FailureClass::RequestRejected),
        ),
        ("SPII", "spii", Some(FailureClass::RequestRejected)),
        (
            "MALFORMED_FUNCTION_CALL",
            "malformed_function_call",
            Some(FailureClass::Transient),
        ),
        ("OTHER", "other", Some(FailureClass::Transient)),
        (
            "FINISH_REASON_UNSPECIFIED",
            "other",
            Some(FailureClass::Transient),
        ),
    ] {
        let mut d = Decoder::default();
        let f = d
            .decode(&format!(
                r#"{{"candidates": [{{"content": {{"parts": [{{"text": "x"}}]}}, "finishReason": "{raw}"}}]}}"#
            ))
            .unwrap();
        assert_eq!(
            f.frame.choices[0].finish_reason.as_deref(),
            Some(canonical),
            "{raw}"
        );
        assert_eq!(finish_verdict(canonical).map(|e| e.class), class, "{raw}");
    }
}

#[test]
fn a_blocked_prompt_is_rejected_and_in_band_errors_are_classified() {
    let mut d = Decoder::default();
    let e = d
        .decode(r#"{"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {"promptTokenCount": 7}}"#)
        .unwrap_err();
    assert_eq!(e.class, FailureClass::RequestRejected);
    assert!(e.message.contains("SAFETY"));
    let e = Decoder::default()
        .decode(r#"{"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}}"#)
        .unwrap_err();
    assert_eq!((e.class, e.status), (FailureClass::Transient, None));
    let e = Decoder::default().decode("{not json").unwrap_err();
    assert_eq!(e.class, FailureClass::Transient);
}

#[test]
fn error_bodies_are_classified() {
    let retry = r#"{"error": {"code": 429, "message": "Resource has been exhausted (e.g. check quota).",
        "status": "RESOURCE_EXHAUSTED", "details": [
          {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": []},
          {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "12s"}]}}"#;
    let e = classify_error(429, &HeaderMap::new(), retry);
    assert_eq!(e.class, FailureClass::Transient);
    assert_eq!(e.reason, SourceReason::RateLimited);
    assert!(e.rate_limited);
    assert_eq!(e.retry_after, Some(Duration::from_secs(12)));
    // A Retry-After header, when sent, wins.
    let mut headers = HeaderMap::new();
    headers.insert(RETRY_AFTER, HeaderValue::from_static("3"));
    assert_eq!(
        classify_error(429, &headers, retry).retry_after,
        Some(Duration::from_secs(3))
    );
    assert_eq!(parse_delay("1.5s"), Some(Duration::from_millis(1500)));
    assert_eq!(parse_delay("soon"), None);

    for (status, name, class) in [
        (503, "UNAVAILABLE", FailureClass::Transient),
        (500, "INTERNAL", FailureClass::Transient),
        (504, "DEADLINE_EXCEEDED", FailureClass::Transient),
        (400, "INVALID_ARGUMENT", FailureClass::RequestRejected),
        (400, "FAILED_PRECONDITION", FailureClass::RequestRejected),
        (403, "PERMISSION_DENIED", FailureClass::SourceDead),
        (401, "UNAUTHENTICATED", FailureClass::SourceDead),
    ] {
        let body =
            format!(r#"{{"error": {{"code": {status}, "message": "m", "status": "{name}"}}}}"#);
        let e = classify_error(status, &HeaderMap::new(), &body);
        assert_eq!((e.class, e.status), (class, Some(status)), "{name}");
    }
    // Gemini answers an invalid key with 400 INVALID_ARGUMENT and reason API_KEY_INVALID.
    let bad_key = r#"{"error": {"code": 400, "message": "API key not valid. Please pass a valid API key.",
        "status": "INVALID_ARGUMENT", "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": "API_KEY_INVALID", "domain": "googleapis.com"}]}}"#;
    let e = classify_error(400, &HeaderMap::new(), bad_key);
    assert_eq!((e.class, e.status), (FailureClass::SourceDead, Some(400)));
}
