//! The axum handlers: chat completions, models and the last request, and what every route shares
//! (HTTP failures, refused formats, waits before answering, how a connection ends).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use super::behaviour::Behaviour;
use super::listener::CountingListener;
use super::script::{Ending, Script};
use super::shared::{lock, InFlight, Shared, CLOSE_ANNOUNCED, CLOSE_SILENTLY};
use super::wire::{body_response, BodyKind};
/// An HTTP-level failure response for the status behaviours; `None` for the others.
pub(super) fn status_failure(b: &Behaviour) -> Option<Response> {
    let (status, body, retry_after) = match b {
        Behaviour::RateLimited { retry_after_s } => (
            StatusCode::TOO_MANY_REQUESTS,
            json!({"error": {"message": "Rate limit reached for requests", "type": "requests", "code": "rate_limit_exceeded"}}),
            *retry_after_s,
        ),
        Behaviour::InsufficientQuota => (
            StatusCode::TOO_MANY_REQUESTS,
            json!({"error": {"message": "You exceeded your current quota, please check your plan and billing details.", "type": "insufficient_quota", "code": "insufficient_quota"}}),
            None,
        ),
        Behaviour::Unauthorized => (
            StatusCode::UNAUTHORIZED,
            json!({"error": {"message": "Incorrect API key provided.", "type": "invalid_request_error", "code": "invalid_api_key"}}),
            None,
        ),
        Behaviour::Forbidden => (
            StatusCode::FORBIDDEN,
            json!({"error": {"message": "This key is not allowed to access the model.", "type": "permission_error"}}),
            None,
        ),
        Behaviour::BadRequest => (
            StatusCode::BAD_REQUEST,
            json!({"error": {"message": "Invalid 'messages': the request is malformed.", "type": "invalid_request_error"}}),
            None,
        ),
        Behaviour::ServerError(code) => (
            StatusCode::from_u16(*code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            json!({"error": {"message": "The server had an error while processing your request.", "type": "server_error"}}),
            None,
        ),
        _ => return None,
    };
    let mut resp = (status, axum::Json(body)).into_response();
    if let Some(s) = retry_after {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(s));
    }
    Some(resp)
}

/// Ends the connection after each answer when the mock was told to
/// ([`MockUpstream::close_connections_after_answers`]), or announces its keep-alive timeout
/// ([`MockUpstream::announce_keep_alive_timeout`]).
pub(super) async fn end_connection(
    State(shared): State<Arc<Shared>>,
    axum::extract::ConnectInfo(connection): axum::extract::ConnectInfo<ConnectionEnd>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let mut response = next.run(request).await;
    match shared.connection_end.load(Ordering::SeqCst) {
        // hyper's server closes the connection once this answer is written.
        CLOSE_ANNOUNCED => {
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        CLOSE_SILENTLY => {
            response
                .headers_mut()
                .insert("keep-alive", HeaderValue::from_static("timeout=5, max=100"));
            // When the body has been handed over, the connection reads end-of-stream: hyper
            // finishes writing the answer and closes it.
            let (parts, body) = response.into_parts();
            use futures::StreamExt;
            let close = futures::stream::once(async move {
                connection.0.store(true, Ordering::SeqCst);
            })
            .filter_map(|()| async { None::<Result<Bytes, axum::Error>> });
            let body = Body::from_stream(body.into_data_stream().chain(close));
            response = Response::from_parts(parts, body);
        }
        _ => {
            if let Some(value) = lock(&shared.keep_alive).clone() {
                response.headers_mut().insert("keep-alive", value);
            }
        }
    }
    response
}

/// The per-connection "close after this answer" flag, shared with its [`CountedStream`].
#[derive(Clone)]
pub(super) struct ConnectionEnd(Arc<AtomicBool>);

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, CountingListener>>
    for ConnectionEnd
{
    fn connect_info(stream: axum::serve::IncomingStream<'_, CountingListener>) -> Self {
        ConnectionEnd(Arc::clone(&stream.io().closing))
    }
}

/// A 400 for a `response_format` type the mock was told to refuse (vLLM-style wording).
pub(super) fn refused_format(shared: &Shared, body: &Value) -> Option<Response> {
    let kind = body["response_format"]["type"].as_str()?;
    if !lock(&shared.refused_formats).iter().any(|r| r == kind) {
        return None;
    }
    let message = format!("response_format type '{kind}' is not supported by this server");
    let body = json!({"error": {"message": message, "type": "invalid_request_error", "param": "response_format"}});
    Some((StatusCode::BAD_REQUEST, axum::Json(body)).into_response())
}

/// Wait for the request's delay-before-answer behaviours; `false` when the mock shut down.
pub(super) async fn pre_answer(shared: &Shared, b: &Behaviour) -> bool {
    match b {
        Behaviour::BlackHole => {
            shared.cancel.cancelled().await;
            false
        }
        Behaviour::Slow { delay } => {
            tokio::select! {
                _ = tokio::time::sleep(*delay) => true,
                _ = shared.cancel.cancelled() => false,
            }
        }
        _ => true,
    }
}

pub(super) fn shutting_down() -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        "mock upstream shutting down",
    )
        .into_response()
}

pub(super) fn parse_body(bytes: &Bytes) -> Value {
    serde_json::from_slice(bytes).unwrap_or(Value::Null)
}

pub(super) async fn chat(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    bytes: Bytes,
) -> Response {
    let body = parse_body(&bytes);
    let behaviour = shared.admit("/v1/chat/completions", &body, &headers);
    let guard = InFlight::new(&shared);
    if !pre_answer(&shared, &behaviour).await {
        return shutting_down();
    }
    if let Some(resp) = status_failure(&behaviour) {
        return resp;
    }
    if let Some(resp) = refused_format(&shared, &body) {
        return resp;
    }
    let model = format!("{}-mock", body["model"].as_str().unwrap_or("unknown"));
    let mut script = Script::of(&behaviour);
    if matches!(behaviour, Behaviour::Healthy { .. }) {
        script.answer_the_request(&body);
    }
    let abrupt = matches!(script.ending, Ending::Abrupt { .. });
    if body["stream"].as_bool().unwrap_or(false) {
        let include_usage = body["stream_options"]["include_usage"]
            .as_bool()
            .unwrap_or(false);
        body_response(
            guard,
            shared.cancel.clone(),
            script.frames(&model, include_usage),
            BodyKind::EventStream,
            abrupt,
        )
    } else {
        if !script.ttft.is_zero() {
            tokio::select! {
                _ = tokio::time::sleep(script.ttft) => {},
                _ = shared.cancel.cancelled() => return shutting_down(),
            }
        }
        let text = Bytes::from(script.completion(&model));
        if abrupt {
            return body_response(
                guard,
                shared.cancel.clone(),
                vec![(Duration::ZERO, text)],
                BodyKind::Json,
                true,
            );
        }
        drop(guard);
        (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            text,
        )
            .into_response()
    }
}

pub(super) async fn models(State(shared): State<Arc<Shared>>) -> Response {
    {
        let mut counts = lock(&shared.counts);
        counts.total += 1;
        counts.models += 1;
    }
    axum::Json(json!({"object": "list", "data": [{"id": "test-model", "object": "model", "owned_by": "mock"}]}))
        .into_response()
}

/// `GET /mock/last_request`: the body of the last request the mock received (`null` before
/// any), so an out-of-process test (the OpenAI SDK pass) checks what reached the upstream.
pub(super) async fn last_request(State(shared): State<Arc<Shared>>) -> Response {
    let last = lock(&shared.recorded).back().map(|r| r.body.clone());
    axum::Json(last.unwrap_or(Value::Null)).into_response()
}
