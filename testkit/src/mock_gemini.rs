//! A mock of Google's Gemini API (`v1beta`): `models/{model}:generateContent`,
//! `models/{model}:streamGenerateContent?alt=sse`, `models/{model}:embedContent` and
//! `models/{model}:batchEmbedContents`, with fault injection.
//!
//! Built from the published API reference (ai.google.dev/api: `GenerateContentResponse`,
//! `Content`, `Part`, `UsageMetadata`, `FinishReason`, the error body of
//! ai.google.dev/gemini-api/docs/troubleshooting), not from the gateway's own translation. It
//! validates requests as the API does and answers 400 `INVALID_ARGUMENT` otherwise:
//! - the key comes in the `x-goog-api-key` header (a `key` query parameter is refused here so a
//!   client that leaks it into URLs is caught); a wrong key is 400 `API_KEY_INVALID`;
//! - `contents` is a non-empty list of turns with role `user` or `model`, each with parts that
//!   carry exactly one of `text`, `inlineData`, `fileData`, `functionCall`, `functionResponse`;
//! - a `functionResponse` names a function a previous `model` turn called, and its `response`
//!   is an object;
//! - the mock signs the first `functionCall` part of each answer (`thoughtSignature`, as
//!   Gemini 3 does); a later request whose `model` turn calls functions must carry that exact
//!   signature on its first `functionCall` part ("Function call is missing a
//!   thought_signature"), or one of the stand-ins the API documents for calls it did not make
//!   (`skip_thought_signature_validator`, `context_engineering_is_the_way_to_go`);
//! - function declarations' `parameters` (the OpenAPI subset) refuse `additionalProperties`;
//!   `parametersJsonSchema` takes JSON Schema as is.
//!
//! A streamed answer is a series of whole `GenerateContentResponse` objects, one per SSE
//! `data:`, the last with `finishReason` and `usageMetadata`; no `[DONE]`.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The key the mock accepts (`x-goog-api-key`).
///
/// ```
/// assert!(!polygateway_testkit::mock_gemini::MOCK_GEMINI_KEY.is_empty());
/// ```
pub const MOCK_GEMINI_KEY: &str = "gemini-test-key";

/// One injected fault, taken by the next `generateContent` / `streamGenerateContent` request
/// (the error faults — rate limited, unavailable, internal, invalid argument, permission denied —
/// by the next embeddings request too, when one comes first).
///
/// ```
/// use polygateway_testkit::mock_gemini::{GeminiFault, MockGemini};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let mock = MockGemini::start().await;
/// mock.push_fault(GeminiFault::RateLimited { retry_delay_s: 12 });
/// let resp = reqwest::Client::new()
///     .post(format!("{}/models/gemini-2.5-flash:generateContent", mock.base_url()))
///     .header("x-goog-api-key", polygateway_testkit::mock_gemini::MOCK_GEMINI_KEY)
///     .json(&serde_json::json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}))
///     .send().await.unwrap();
/// assert_eq!(resp.status(), 429);
/// let body: serde_json::Value = resp.json().await.unwrap();
/// assert_eq!(body["error"]["status"], "RESOURCE_EXHAUSTED");
/// assert_eq!(body["error"]["details"][1]["retryDelay"], "12s");
/// # }
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum GeminiFault {
    /// 429 `RESOURCE_EXHAUSTED` with a `google.rpc.RetryInfo` of `retry_delay_s` seconds.
    RateLimited {
        /// The `retryDelay`.
        retry_delay_s: u64,
    },
    /// 503 `UNAVAILABLE` ("The model is overloaded").
    Unavailable,
    /// 500 `INTERNAL`.
    Internal,
    /// 400 `INVALID_ARGUMENT`.
    InvalidArgument,
    /// 403 `PERMISSION_DENIED`.
    PermissionDenied,
    /// A stream cut after its first chunk (the connection drops, no `finishReason`).
    AbruptClose,
    /// A stream (or answer) that ends cleanly without any `finishReason`.
    NoFinishReason,
    /// The first chunk (or the whole answer) waits this long.
    SlowFirstChunk(Duration),
    /// The candidate ends with this `finishReason` (`SAFETY`, `RECITATION`,
    /// `MALFORMED_FUNCTION_CALL`, …); no text for the safety family, as the API withholds it.
    Finish(&'static str),
    /// `promptFeedback.blockReason: SAFETY` and no candidate.
    PromptBlocked,
}

/// What the mock answers when no fault is queued.
#[derive(Debug, Clone)]
struct Script {
    text: String,
    thought: Option<String>,
    call: Option<(String, Value)>,
    cached_tokens: Option<u64>,
}

struct Shared {
    script: Mutex<Script>,
    faults: Mutex<VecDeque<GeminiFault>>,
    requests: Mutex<Vec<Value>>,
    signatures: Mutex<u64>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The mock Gemini API on `127.0.0.1`.
///
/// ```
/// use polygateway_testkit::mock_gemini::{MockGemini, MOCK_GEMINI_KEY};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let mock = MockGemini::start().await;
/// let resp = reqwest::Client::new()
///     .post(format!("{}/models/gemini-2.5-flash:generateContent", mock.base_url()))
///     .header("x-goog-api-key", MOCK_GEMINI_KEY)
///     .json(&serde_json::json!({"contents": [{"role": "assistant", "parts": [{"text": "hi"}]}]}))
///     .send().await.unwrap();
/// // Gemini knows the roles `user` and `model` only.
/// assert_eq!(resp.status(), 400);
/// assert_eq!(mock.requests().len(), 1);
/// # }
/// ```
pub struct MockGemini {
    addr: SocketAddr,
    shared: Arc<Shared>,
    cancel: CancellationToken,
    server: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for MockGemini {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockGemini")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl Drop for MockGemini {
    fn drop(&mut self) {
        self.cancel.cancel();
        if let Some(server) = self.server.take() {
            server.abort();
        }
    }
}

impl MockGemini {
    /// Bind `127.0.0.1:0`; answers "Hello from Gemini" until told otherwise.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let mock = polygateway_testkit::mock_gemini::MockGemini::start().await;
    /// assert!(mock.base_url().ends_with("/v1beta"));
    /// # }
    /// ```
    ///
    /// # Panics
    /// When no loopback port can be bound (a test environment defect).
    pub async fn start() -> MockGemini {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .expect("bind 127.0.0.1:0 for the mock Gemini API");
        let addr = listener.local_addr().expect("mock Gemini local addr");
        let shared = Arc::new(Shared {
            script: Mutex::new(Script {
                text: "Hello from Gemini".into(),
                thought: None,
                call: None,
                cached_tokens: None,
            }),
            faults: Mutex::new(VecDeque::new()),
            requests: Mutex::new(Vec::new()),
            signatures: Mutex::new(0),
        });
        let app = Router::new()
            .route("/v1beta/models/{action}", post(models_action))
            .with_state(shared.clone());
        let cancel = CancellationToken::new();
        let stop = cancel.clone();
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(stop.cancelled_owned())
                .await;
        });
        MockGemini {
            addr,
            shared,
            cancel,
            server: Some(server),
        }
    }

    /// `http://127.0.0.1:<port>/v1beta` — a Gemini source's `BASE_URL`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let mock = polygateway_testkit::mock_gemini::MockGemini::start().await;
    /// assert!(mock.base_url().starts_with("http://127.0.0.1:"));
    /// # }
    /// ```
    pub fn base_url(&self) -> String {
        format!("http://{}/v1beta", self.addr)
    }

    /// Queue a fault for the next generate request (faults are taken in order).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use polygateway_testkit::mock_gemini::{GeminiFault, MockGemini};
    /// let mock = MockGemini::start().await;
    /// mock.push_fault(GeminiFault::Unavailable);
    /// # }
    /// ```
    pub fn push_fault(&self, fault: GeminiFault) {
        lock(&self.shared.faults).push_back(fault);
    }

    /// Answer with `text`, after a thought summary when `thought` is given (sent only when the
    /// request asks `includeThoughts`; its tokens are counted as `thoughtsTokenCount` either
    /// way), and, when `call` is given and the request declares tools and its last turn is not a
    /// function response, with a signed `functionCall` instead of text. `cached_tokens` is
    /// reported as `cachedContentTokenCount`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use polygateway_testkit::mock_gemini::MockGemini;
    /// let mock = MockGemini::start().await;
    /// mock.script("Sunny.", Some("Check the weather."), Some(("weather", serde_json::json!({"city": "Paris"}))), Some(40));
    /// # }
    /// ```
    pub fn script(
        &self,
        text: &str,
        thought: Option<&str>,
        call: Option<(&str, Value)>,
        cached_tokens: Option<u64>,
    ) {
        *lock(&self.shared.script) = Script {
            text: text.into(),
            thought: thought.map(str::to_owned),
            call: call.map(|(n, a)| (n.to_owned(), a)),
            cached_tokens,
        };
    }

    /// The requests received, in order: `{"action", "query", "api_key_header", "body"}`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let mock = polygateway_testkit::mock_gemini::MockGemini::start().await;
    /// assert!(mock.requests().is_empty());
    /// # }
    /// ```
    pub fn requests(&self) -> Vec<Value> {
        lock(&self.shared.requests).clone()
    }
}

fn error(status: StatusCode, name: &str, message: &str, details: Value) -> Response {
    let body = json!({"error": {
        "code": status.as_u16(), "message": message, "status": name, "details": details}});
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn invalid(message: &str) -> Response {
    error(
        StatusCode::BAD_REQUEST,
        "INVALID_ARGUMENT",
        message,
        json!([]),
    )
}

async fn models_action(
    State(shared): State<Arc<Shared>>,
    Path(action): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let key = headers
        .get("x-goog-api-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let parsed: Result<Value, _> = serde_json::from_slice(&body);
    lock(&shared.requests).push(json!({
        "action": action,
        "query": query,
        "api_key_header": key.is_some(),
        "body": parsed.as_ref().ok().cloned().unwrap_or(Value::Null),
    }));
    let query = query.unwrap_or_default();
    if query.split('&').any(|p| p.starts_with("key=")) {
        return invalid("mock: the API key must come in the x-goog-api-key header, not the URL");
    }
    if key.as_deref() != Some(MOCK_GEMINI_KEY) {
        return error(
            StatusCode::BAD_REQUEST,
            "INVALID_ARGUMENT",
            "API key not valid. Please pass a valid API key.",
            json!([{"@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": "API_KEY_INVALID", "domain": "googleapis.com"}]),
        );
    }
    let Ok(body) = parsed else {
        return invalid("Invalid JSON payload received.");
    };
    let Some((model, method)) = action.split_once(':') else {
        return error(
            StatusCode::NOT_FOUND,
            "NOT_FOUND",
            "unknown method",
            json!([]),
        );
    };
    match method {
        "embedContent" | "batchEmbedContents" => {
            // The error faults answer embeddings too; the others shape chat answers only and
            // stay queued for them.
            let mut faults = lock(&shared.faults);
            if let Some(refusal) = faults.front().and_then(fault_error) {
                faults.pop_front();
                return refusal;
            }
            drop(faults);
            return if method == "embedContent" {
                embed_one(&body)
            } else {
                embed_batch(model, &body)
            };
        }
        "generateContent" | "streamGenerateContent" => {}
        _ => {
            return error(
                StatusCode::NOT_FOUND,
                "NOT_FOUND",
                "unknown method",
                json!([]),
            )
        }
    }
    let stream = method == "streamGenerateContent";
    if stream && !query.split('&').any(|p| p == "alt=sse") {
        return invalid("mock: streamGenerateContent is served as SSE only (alt=sse)");
    }
    if let Err(message) = validate(&shared, &body) {
        return invalid(&message);
    }
    let fault = lock(&shared.faults).pop_front();
    if let Some(refusal) = fault.as_ref().and_then(fault_error) {
        return refusal;
    }
    let script = lock(&shared.script).clone();
    let chunks = answer(&shared, &script, &body, model, fault.as_ref());
    let delay = match fault {
        Some(GeminiFault::SlowFirstChunk(d)) => d,
        _ => Duration::ZERO,
    };
    let abrupt = fault == Some(GeminiFault::AbruptClose);
    let mut frames: Vec<Result<Bytes, std::io::Error>> = if stream {
        chunks
            .iter()
            .map(|c| Ok(Bytes::from(format!("data: {c}\r\n\r\n"))))
            .collect()
    } else {
        vec![Ok(Bytes::from(merge(chunks).to_string()))]
    };
    if abrupt {
        frames.truncate(1);
        if !stream {
            // Half of the JSON body, then the cut.
            if let Some(Ok(whole)) = frames.first_mut() {
                *whole = whole.slice(..whole.len() / 2);
            }
        }
        frames.push(Err(std::io::Error::new(
            std::io::ErrorKind::ConnectionAborted,
            "mock: abrupt close",
        )));
    }
    let stream_body =
        futures::stream::unfold((frames.into_iter(), delay), |(mut it, delay)| async move {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            let next = it.next()?;
            if next.is_err() {
                // Let what was sent reach the client first: the server drops its unflushed
                // buffer with the connection, and a cut before the response head would read as
                // a stale pooled connection (re-sent), not a cut answer.
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Some((next, (it, Duration::ZERO)))
        });
    let kind = if stream {
        "text/event-stream"
    } else {
        "application/json"
    };
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, kind)
        .body(Body::from_stream(stream_body))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// The error answer of an error fault (`None` for a fault that shapes a 2xx answer).
fn fault_error(fault: &GeminiFault) -> Option<Response> {
    Some(match fault {
        GeminiFault::RateLimited { retry_delay_s } => error(
            StatusCode::TOO_MANY_REQUESTS,
            "RESOURCE_EXHAUSTED",
            "You exceeded your current quota, please check your plan and billing details.",
            json!([
                {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [
                    {"quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
                     "quotaId": "GenerateRequestsPerMinutePerProjectPerModel-FreeTier"}]},
                {"@type": "type.googleapis.com/google.rpc.RetryInfo",
                 "retryDelay": format!("{retry_delay_s}s")}
            ]),
        ),
        GeminiFault::Unavailable => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "UNAVAILABLE",
            "The model is overloaded. Please try again later.",
            json!([]),
        ),
        GeminiFault::Internal => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "INTERNAL",
            "An internal error has occurred.",
            json!([]),
        ),
        GeminiFault::InvalidArgument => {
            invalid("* GenerateContentRequest.contents: contents is not specified")
        }
        GeminiFault::PermissionDenied => error(
            StatusCode::FORBIDDEN,
            "PERMISSION_DENIED",
            "Generative Language API has not been used in this project before or it is disabled.",
            json!([]),
        ),
        _ => return None,
    })
}

/// The signatures Gemini's thought-signature guide gives for function calls it did not
/// generate (a conversation moved from another model): the check is skipped.
const FOREIGN_SIGNATURES: [&str; 2] = [
    "skip_thought_signature_validator",
    "context_engineering_is_the_way_to_go",
];

const KNOWN_FIELDS: [&str; 7] = [
    "contents",
    "systemInstruction",
    "tools",
    "toolConfig",
    "generationConfig",
    "safetySettings",
    "cachedContent",
];
const DATA_FIELDS: [&str; 5] = [
    "text",
    "inlineData",
    "fileData",
    "functionCall",
    "functionResponse",
];

/// The API's request checks (see the module documentation).
fn validate(shared: &Shared, body: &Value) -> Result<(), String> {
    let object = body.as_object().ok_or("Invalid JSON payload received.")?;
    if let Some(unknown) = object.keys().find(|k| !KNOWN_FIELDS.contains(&k.as_str())) {
        return Err(format!(
            "Invalid JSON payload received. Unknown name \"{unknown}\": Cannot find field."
        ));
    }
    let contents = body["contents"]
        .as_array()
        .filter(|c| !c.is_empty())
        .ok_or("* GenerateContentRequest.contents: contents is not specified")?;
    let mut called: Vec<String> = Vec::new();
    let issued = *lock(&shared.signatures);
    for (i, turn) in contents.iter().enumerate() {
        let role = turn["role"].as_str().unwrap_or("user");
        if role != "user" && role != "model" {
            return Err(format!(
                "Please use a valid role: user, model. (contents[{i}].role = {role:?})"
            ));
        }
        let parts = turn["parts"]
            .as_array()
            .filter(|p| !p.is_empty())
            .ok_or(format!(
                "* GenerateContentRequest.contents[{i}].parts: contents.parts must not be empty."
            ))?;
        let mut first_call = true;
        for (j, part) in parts.iter().enumerate() {
            let data = DATA_FIELDS
                .iter()
                .filter(|f| part.get(**f).is_some())
                .count();
            if data != 1 {
                return Err(format!(
                    "* GenerateContentRequest.contents[{i}].parts[{j}].data: required oneof field 'data' must have one initialized field"
                ));
            }
            if let Some(call) = part.get("functionCall") {
                if role != "model" {
                    return Err(format!("contents[{i}]: functionCall in a {role} turn"));
                }
                called.push(call["name"].as_str().unwrap_or_default().to_owned());
                if first_call && issued > 0 {
                    let signature = part["thoughtSignature"].as_str().unwrap_or_default();
                    // The API's documented stand-ins for a call Gemini did not make pass.
                    let known = FOREIGN_SIGNATURES.contains(&signature)
                        || signature
                            .strip_prefix("mock-sig-")
                            .and_then(|n| n.parse::<u64>().ok())
                            .is_some_and(|n| n < issued);
                    if !known {
                        return Err(format!(
                            "Function call is missing a thought_signature in functionCall parts. (contents[{i}].parts[{j}])"
                        ));
                    }
                }
                first_call = false;
            }
            if let Some(response) = part.get("functionResponse") {
                let name = response["name"].as_str().unwrap_or_default();
                if !called.iter().any(|c| c == name) {
                    return Err(format!(
                        "contents[{i}].parts[{j}].functionResponse: {name:?} answers no previous functionCall"
                    ));
                }
                if !response["response"].is_object() {
                    return Err(format!(
                        "contents[{i}].parts[{j}].functionResponse.response: Proto field is not repeating, cannot start list."
                    ));
                }
            }
        }
    }
    for tool in body["tools"].as_array().into_iter().flatten() {
        for declaration in tool["functionDeclarations"]
            .as_array()
            .into_iter()
            .flatten()
        {
            if declaration["parameters"]
                .to_string()
                .contains("\"additionalProperties\"")
            {
                return Err("Invalid JSON payload received. Unknown name \"additionalProperties\" at 'tools[0].function_declarations[0].parameters': Cannot find field.".into());
            }
        }
    }
    Ok(())
}

/// The chunks of an answer (a non-streamed answer merges them).
fn answer(
    shared: &Shared,
    script: &Script,
    body: &Value,
    model: &str,
    fault: Option<&GeminiFault>,
) -> Vec<Value> {
    let contents = body["contents"].as_array().cloned().unwrap_or_default();
    // The prompt is every turn and the system instruction (the API counts both).
    let prompt_chars: usize = contents.iter().map(|c| c.to_string().len()).sum::<usize>()
        + body
            .get("systemInstruction")
            .map_or(0, |s| s.to_string().len());
    let prompt_tokens = (prompt_chars / 4).max(1) as u64;
    let include_thoughts = body
        .pointer("/generationConfig/thinkingConfig/includeThoughts")
        .and_then(Value::as_bool)
        == Some(true);
    let last_is_response = contents
        .last()
        .and_then(|c| c["parts"].as_array())
        .is_some_and(|p| p.iter().any(|p| p.get("functionResponse").is_some()));
    let has_tools = body["tools"].is_array();
    let mut chunks = Vec::new();
    let mut thoughts_tokens = None;
    if let Some(thought) = &script.thought {
        thoughts_tokens = Some((thought.len() / 4).max(1) as u64);
        if include_thoughts {
            chunks.push(vec![json!({"text": thought, "thought": true})]);
        }
    }
    let mut candidates_tokens = 0;
    let mut finish = "STOP";
    if let Some(GeminiFault::Finish(reason)) = fault {
        finish = reason;
    }
    let withheld = !matches!(finish, "STOP" | "MAX_TOKENS" | "MALFORMED_FUNCTION_CALL");
    match (&script.call, has_tools && !last_is_response) {
        (Some((name, args)), true) if finish == "STOP" => {
            let mut n = lock(&shared.signatures);
            chunks.push(vec![json!({"functionCall": {"name": name, "args": args},
                                    "thoughtSignature": format!("mock-sig-{}", *n)})]);
            *n += 1;
            candidates_tokens = 8;
        }
        _ if withheld || finish == "MALFORMED_FUNCTION_CALL" => {}
        _ => {
            let text = if last_is_response {
                let result = contents
                    .last()
                    .and_then(|c| c["parts"][0].get("functionResponse"))
                    .map(|r| r["response"].to_string())
                    .unwrap_or_default();
                format!("{} {result}", script.text)
            } else {
                script.text.clone()
            };
            let cut = text
                .char_indices()
                .nth(text.chars().count() / 2)
                .map_or(0, |(i, _)| i);
            let (a, b) = text.split_at(cut);
            for piece in [a, b].into_iter().filter(|p| !p.is_empty()) {
                chunks.push(vec![json!({"text": piece})]);
            }
            candidates_tokens = (text.len() / 4).max(1) as u64;
        }
    }
    if fault == Some(&GeminiFault::PromptBlocked) {
        return vec![json!({
            "promptFeedback": {"blockReason": "SAFETY", "safetyRatings": []},
            "usageMetadata": {"promptTokenCount": prompt_tokens, "totalTokenCount": prompt_tokens},
            "modelVersion": model,
        })];
    }
    let mut usage = json!({
        "promptTokenCount": prompt_tokens,
        "candidatesTokenCount": candidates_tokens,
        "totalTokenCount": prompt_tokens + candidates_tokens + thoughts_tokens.unwrap_or(0),
    });
    if let Some(t) = thoughts_tokens {
        usage["thoughtsTokenCount"] = json!(t);
    }
    if let Some(c) = script.cached_tokens {
        usage["cachedContentTokenCount"] = json!(c.min(prompt_tokens));
    }
    let count = chunks.len().max(1);
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        let parts = chunks.get(i).cloned().unwrap_or_default();
        let mut candidate = json!({"content": {"role": "model", "parts": parts}, "index": 0});
        let mut frame = json!({"modelVersion": model, "responseId": "mock-response"});
        if i + 1 == count {
            if fault != Some(&GeminiFault::NoFinishReason) {
                candidate["finishReason"] = json!(finish);
            }
            frame["usageMetadata"] = usage.clone();
        }
        if candidate["content"]["parts"] == json!([]) {
            candidate.as_object_mut().map(|c| c.remove("content"));
        }
        frame["candidates"] = json!([candidate]);
        out.push(frame);
    }
    out
}

/// A non-streamed answer: every chunk's parts in one candidate, the last chunk's ending.
fn merge(chunks: Vec<Value>) -> Value {
    let mut parts: Vec<Value> = Vec::new();
    let mut last = json!({});
    for chunk in chunks {
        if let Some(p) = chunk
            .pointer("/candidates/0/content/parts")
            .and_then(Value::as_array)
        {
            parts.extend(p.iter().cloned());
        }
        last = chunk;
    }
    if let Some(candidate) = last.pointer_mut("/candidates/0") {
        candidate["content"] = json!({"role": "model", "parts": parts});
    }
    last
}

/// The mock's embedding of `text`: deterministic, of dimension `dim` (the request's
/// `outputDimensionality`, else [`EMBEDDING_DIM`]); a smaller dimension is a prefix of the full
/// vector, as Gemini's truncatable embeddings are.
///
/// ```
/// use polygateway_testkit::mock_gemini::{embedding, EMBEDDING_DIM};
/// let full = embedding("hello", EMBEDDING_DIM);
/// assert_eq!(full.len(), EMBEDDING_DIM);
/// assert_eq!(embedding("hello", 3), full[..3]);
/// ```
pub fn embedding(text: &str, dim: usize) -> Vec<f32> {
    (0..dim)
        .map(|i| {
            let h = text.bytes().fold(i as u64 + 1, |h, b| {
                h.wrapping_mul(31).wrapping_add(b as u64)
            });
            ((h % 2001) as f64 / 1000.0 - 1.0) as f32
        })
        .collect()
}

/// The dimension of the mock's embeddings when a request asks none.
///
/// ```
/// assert_eq!(polygateway_testkit::mock_gemini::EMBEDDING_DIM, 8);
/// ```
pub const EMBEDDING_DIM: usize = 8;

/// The embedding an `EmbedContentRequest` asks for, or the API's message for what is missing.
fn embed_request(request: &Value) -> Result<Value, String> {
    let text = content_text(&request["content"]).ok_or("content is not specified")?;
    let dim = match request.get("outputDimensionality") {
        None => EMBEDDING_DIM,
        Some(d) => d
            .as_u64()
            .filter(|d| (1..=EMBEDDING_DIM as u64).contains(d))
            .ok_or(format!("outputDimensionality must be 1 to {EMBEDDING_DIM}"))?
            as usize,
    };
    Ok(json!({"values": embedding(&text, dim)}))
}

fn content_text(content: &Value) -> Option<String> {
    let parts = content["parts"].as_array()?;
    Some(parts.iter().filter_map(|p| p["text"].as_str()).collect())
}

fn embed_one(body: &Value) -> Response {
    match embed_request(body) {
        Ok(values) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            json!({ "embedding": values }).to_string(),
        )
            .into_response(),
        Err(message) => invalid(&format!("* EmbedContentRequest: {message}")),
    }
}

fn embed_batch(model: &str, body: &Value) -> Response {
    let Some(requests) = body["requests"].as_array().filter(|r| !r.is_empty()) else {
        return invalid("* BatchEmbedContentsRequest.requests: requests is not specified");
    };
    if requests.len() > 100 {
        return invalid(
            "* BatchEmbedContentsRequest.requests: at most 100 requests can be in one batch",
        );
    }
    let mut embeddings = Vec::new();
    for (i, request) in requests.iter().enumerate() {
        if request["model"].as_str() != Some(&format!("models/{model}")) {
            return invalid(&format!(
                "requests[{i}].model: the model of every request must be models/{model}"
            ));
        }
        match embed_request(request) {
            Ok(values) => embeddings.push(values),
            Err(message) => return invalid(&format!("requests[{i}]: {message}")),
        }
    }
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        json!({ "embeddings": embeddings }).to_string(),
    )
        .into_response()
}
