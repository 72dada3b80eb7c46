//! The OpenAI-compatible endpoints: `POST /v1/chat/completions` (streamed and not),
//! `POST /v1/embeddings` and `GET /v1/models`. Each request is authenticated by its virtual key,
//! mapped to a scope by its `model`, admitted by the key's limits, and then is one call of the
//! gateway's handles — the same governed path as any embedded caller; nothing here retries,
//! selects or limits upstreams. Not OCR ([`super::ocr`]) and not the operational endpoints.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::{json, Value};

use crate::config::ScopeKind;
use crate::openai::completion::{now_s, Completion};
use crate::openai::embedding::{embedding_json, input_texts, wants_base64};
use crate::openai::request::{options_for, response_format, ChatRequest, EmbeddingRequest, Format};
use crate::server::call_order::with_call_order;
use crate::server::errors::ApiError;
use crate::server::sse::{self, ChunkHead, Relay};
use crate::server::state::App;
use crate::types::LlmResponse;

/// The request body, or a 413/400 in OpenAI's shape.
pub(crate) fn body_bytes(body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    body.map_err(|e| {
        let mut err = ApiError::bad_request(format!("could not read the request body: {e}"), None);
        err.0.status = e.status().as_u16();
        err
    })
}

fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("invalid request body: {e}"), None))
}

/// `POST /v1/chat/completions`.
pub(crate) async fn chat_completions(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    app.answer(async |scope| chat(&app, &headers, body, scope).await)
        .await
}

async fn chat(
    app: &App,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
    scope_out: &mut Option<String>,
) -> Result<Response, ApiError> {
    let key = app.authenticate(headers)?;
    let req: ChatRequest = parse(&body_bytes(body)?)?;
    let scope = app.scope_for(key, &req.model, ScopeKind::Chat)?;
    *scope_out = Some(scope.clone());
    let Format {
        mut options,
        schema,
        structured,
    } = response_format(
        req.response_format,
        with_call_order(
            options_for(Some(key.tenant()), req.user).overlay(req.rest),
            key,
            headers,
        )?,
    )?;
    // The key's spend budget counts every ask of this request (docs/behaviour.md §5.8).
    options.key_budget = key.budget().map(|b| (key.name().to_string(), b));
    options.key_name = Some(key.shared_name());
    let lease = app.admit(key).await?;
    let handle = app.gw.chat_scope(&scope)?;
    let timeout = app.settings.request_timeout;
    let deadline = tokio::time::Instant::now() + timeout;
    let head = ChunkHead {
        id: format!("chatcmpl-{}", polygateway_actors::runtime::new_id()),
        model: req.model,
        created: now_s(),
    };
    let include_usage = req.stream_options.unwrap_or_default().include_usage;

    if !req.stream || structured {
        // Structured answers come out of the ladder whole; a streamed request gets them as one
        // delta, the way a cache hit is replayed.
        let call = async {
            match schema {
                Some(schema) => handle.chat_with_schema(req.messages, options, schema).await,
                None => handle.chat_with(req.messages, options).await,
            }
        };
        let response = tokio::time::timeout_at(deadline, call)
            .await
            .map_err(|_| ApiError::timeout(timeout))??;
        if !req.stream {
            drop(lease);
            return Ok(completion(&head, &response));
        }
        let events: Vec<_> = crate::gateway::whole_answer_deltas(&response)
            .into_iter()
            .map(|d| Ok(crate::ChatEvent::from(d)))
            .chain([Ok(crate::ChatEvent::Done(Box::new(response)))])
            .collect();
        let stream = futures::stream::iter(events);
        let relay = Relay {
            head,
            stream: Box::pin(stream),
            first: None,
            include_usage,
            deadline,
            timeout,
            errors: app.errors.clone(),
            stop: app.stop.clone(),
            scope,
            _lease: lease,
        };
        return Ok(sse_response(relay));
    }

    let mut stream = handle.chat_stream(req.messages, options);
    // Until the first delta, failures are retried inside the call; the one that ends it is
    // answered with a proper status rather than inside a 200 stream.
    let first = match tokio::time::timeout_at(deadline, stream.next()).await {
        Err(_) => return Err(ApiError::timeout(timeout)),
        Ok(Some(Err(e))) => return Err(e.into()),
        Ok(first) => first.and_then(Result::ok),
    };
    let relay = Relay {
        head,
        stream: Box::pin(stream),
        first,
        include_usage,
        deadline,
        timeout,
        errors: app.errors.clone(),
        stop: app.stop.clone(),
        scope,
        _lease: lease,
    };
    Ok(sse_response(relay))
}

fn sse_response(relay: Relay) -> Response {
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(sse::body(relay)))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// The answer as a `chat.completion` body, written straight from the answer.
fn completion(head: &ChunkHead, r: &LlmResponse) -> Response {
    let body = Completion::of(&head.id, &head.model, head.created, r);
    let mut response = axum::Json(body).into_response();
    if let Ok(v) = r.source_name.parse() {
        response.headers_mut().insert("x-pgw-source", v);
    }
    response
}

/// `POST /v1/embeddings`.
pub(crate) async fn embeddings(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    app.answer(async |scope| embed(&app, &headers, body, scope).await)
        .await
}

async fn embed(
    app: &App,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
    scope_out: &mut Option<String>,
) -> Result<Response, ApiError> {
    let key = app.authenticate(headers)?;
    let req: EmbeddingRequest = parse(&body_bytes(body)?)?;
    let scope = app.scope_for(key, &req.model, ScopeKind::Embeddings)?;
    *scope_out = Some(scope.clone());
    let texts = input_texts(req.input).map_err(|m| ApiError::bad_request(m, Some("input")))?;
    if req.dimensions.is_some() {
        return Err(ApiError::bad_request(
            "dimensions is not served: the scope's model and EXPECTED_DIM decide the dimension",
            Some("dimensions"),
        ));
    }
    let base64 = wants_base64(req.encoding_format.as_deref())
        .map_err(|m| ApiError::bad_request(m, Some("encoding_format")))?;
    let options = with_call_order(options_for(Some(key.tenant()), req.user), key, headers)?;
    let lease = app.admit(key).await?;
    let handle = app.gw.embedding_scope(&scope)?;
    let timeout = app.settings.request_timeout;
    let out = tokio::time::timeout(timeout, handle.embed(texts, options))
        .await
        .map_err(|_| ApiError::timeout(timeout))??;
    drop(lease);
    Ok(axum::Json(embedding_json(&out, &req.model, base64)).into_response())
}

/// `GET /v1/models`: the scope names and aliases the key may use.
pub(crate) async fn models(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    let key = match app.authenticate(&headers) {
        Ok(key) => key,
        Err(e) => return e.into_response(),
    };
    let data: Vec<Value> = app
        .models
        .iter()
        .filter(|(_, scope)| key.may_use(scope))
        .map(|(model, scope)| {
            json!({"id": model, "object": "model", "created": 0, "owned_by": "polygateway",
                   "scope": scope})
        })
        .collect();
    axum::Json(json!({"object": "list", "data": data})).into_response()
}
