//! One attempt against a Gemini source: `models/{model}:generateContent`, or
//! `models/{model}:streamGenerateContent?alt=sse` when streaming, with the key in
//! `x-goog-api-key`. The answer is read by Gemini's exchange (`transport::machine::gemini`: no
//! `[DONE]`, a stream is complete when a `finishReason` arrived and the body ended), run by the
//! driver every dialect shares (`transport::drive`).

use std::sync::Arc;

use polygateway_actors::EventSink;
use reqwest::header::ACCEPT;
use serde_json::{Map, Value};

use super::{encode_request, model_id, ThinkingAsk, KEY_HEADER, READER};
use crate::error::TransportError;
use crate::structured::StructuredMode;
use crate::transport::drive;
use crate::transport::endpoint::JsonEndpoint;
use crate::transport::exchange::{ChatDelta, ChatWireRequest};
use crate::transport::machine::{ChatExchange, GeminiContent};
use crate::transport::pool::SourcePool;
use crate::transport::prefill::LeadTrim;
use crate::transport::watchdog::now;
use crate::transport::TransportConfig;
use crate::types::LlmResponse;

/// A Gemini source's two endpoints, on one pool.
#[derive(Clone)]
pub(crate) struct GeminiEndpoints {
    plain: JsonEndpoint,
    stream: JsonEndpoint,
}

impl GeminiEndpoints {
    pub(crate) fn new(config: &Arc<TransportConfig>, pool: SourcePool) -> Self {
        let model = model_id(config);
        let plain = JsonEndpoint::keyed(
            config,
            pool,
            &format!("models/{model}:generateContent"),
            KEY_HEADER,
        );
        let stream = plain.sibling(
            config,
            &format!("models/{model}:streamGenerateContent?alt=sse"),
        );
        Self { plain, stream }
    }

    /// The non-streaming endpoint (the one a source's URL is reported as).
    pub(crate) fn plain(&self) -> &JsonEndpoint {
        &self.plain
    }
}

/// The request body for `request` in structured `mode`.
pub(crate) fn body(
    config: &TransportConfig,
    request: &ChatWireRequest,
    mode: StructuredMode,
) -> Result<Vec<u8>, TransportError> {
    let mut overlay: Map<String, Value> = config.extra_body.clone();
    overlay.extend(request.overlay.iter().map(|(k, v)| (k.clone(), v.clone())));
    if let Some(rf) = &request.response_format {
        overlay.insert("response_format".into(), rf.clone());
    }
    let mut messages = std::borrow::Cow::Borrowed(request.messages.as_slice());
    if let Some(schema) = &request.schema {
        let (asked, format) = schema.for_mode(mode, &request.messages);
        messages = asked;
        if let Some(format) = format {
            overlay.insert("response_format".into(), format);
        }
    }
    let thinking = config.enable_thinking.map(|on| ThinkingAsk {
        include_thoughts: on,
        budget: if on { None } else { Some(0) },
    });
    let body = encode_request(&messages, &overlay, thinking)?;
    serde_json::to_vec(&body)
        .map_err(|e| TransportError::rejected(format!("request body not serialisable: {e}")))
}

/// One attempt: Gemini's exchange run over HTTP by the driver.
pub(crate) async fn send(
    endpoints: &GeminiEndpoints,
    config: &TransportConfig,
    request: &ChatWireRequest,
    mode: StructuredMode,
    stream: bool,
    sink: Option<&EventSink<ChatDelta>>,
) -> Result<LlmResponse, TransportError> {
    let mut exchange = ChatExchange::new(
        config,
        now(),
        GeminiContent::default(),
        false,
        LeadTrim::default(),
    );
    let body = body(config, request, mode)?;
    // Each attempt is built in a statement of its own: a temporary of the awaited expression
    // (the request) would be kept beside the driver's copy.
    if stream {
        let endpoint = &endpoints.stream;
        let attempt = drive::streamed(
            &mut exchange,
            endpoint,
            endpoint
                .post_json(body)?
                .header(ACCEPT, "text/event-stream"),
            READER,
            sink,
        );
        attempt.await
    } else {
        let endpoint = &endpoints.plain;
        let attempt = drive::whole(
            &mut exchange,
            endpoint,
            endpoint.post_json(body)?,
            READER,
            sink,
        );
        attempt.await
    }
}
