//! One attempt against a Gemini source: `models/{model}:generateContent`, or
//! `models/{model}:streamGenerateContent?alt=sse` when streaming, with the key in
//! `x-goog-api-key`. Same watchdog, SSE framing, assembly and salvage rules as OpenAI chat
//! (docs/behaviour.md §7.1), with Gemini's end of stream: no `[DONE]`, a stream is complete when
//! a `finishReason` arrived and the body ended.

use futures::StreamExt;
use polygateway_actors::{EventSink, SourceReason};
use reqwest::header::ACCEPT;
use serde_json::{Map, Value};

use super::{
    encode_request, finish_verdict, merge_blocks, model_id, Decoder, ThinkingAsk, KEY_HEADER,
    READER,
};
use crate::config::{MissingDone, SourceSettings};
use crate::error::TransportError;
use crate::structured::StructuredMode;
use crate::transport::assembly::Assembly;
use crate::transport::endpoint::JsonEndpoint;
use crate::transport::exchange::{emit_all, frame_too_large, ms_since, ChatDelta, ChatWireRequest};
use crate::transport::http::classify_reqwest;
use crate::transport::pool::SourcePool;
use crate::transport::prefill::keep_cut;
use crate::transport::sse::{SseEvent, SseParser};
use crate::transport::watchdog::{StallLimits, Watchdog};
use crate::types::{LlmResponse, ThinkingBlock, UsageSource};

/// A Gemini source's two endpoints, on one pool.
#[derive(Clone)]
pub(crate) struct GeminiEndpoints {
    plain: JsonEndpoint,
    stream: JsonEndpoint,
}

impl GeminiEndpoints {
    pub(crate) fn new(settings: &SourceSettings, pool: SourcePool) -> Self {
        let model = model_id(settings);
        let plain = JsonEndpoint::keyed(
            settings,
            pool,
            &format!("models/{model}:generateContent"),
            KEY_HEADER,
        );
        let stream = plain.sibling(
            settings,
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
    settings: &SourceSettings,
    request: &ChatWireRequest,
    mode: StructuredMode,
) -> Result<Vec<u8>, TransportError> {
    let mut overlay: Map<String, Value> = settings.extra_body.clone();
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
    let thinking = settings.enable_thinking.map(|on| ThinkingAsk {
        include_thoughts: on,
        budget: if on { None } else { Some(0) },
    });
    let body = encode_request(&messages, &overlay, thinking)?;
    serde_json::to_vec(&body)
        .map_err(|e| TransportError::rejected(format!("request body not serialisable: {e}")))
}

/// One attempt.
pub(crate) async fn send(
    endpoints: &GeminiEndpoints,
    settings: &SourceSettings,
    request: &ChatWireRequest,
    mode: StructuredMode,
    stream: bool,
    sink: Option<&EventSink<ChatDelta>>,
) -> Result<LlmResponse, TransportError> {
    let mut wd = Watchdog::start(StallLimits::from_settings(settings));
    let body = body(settings, request, mode)?;
    let endpoint = if stream {
        &endpoints.stream
    } else {
        &endpoints.plain
    };
    let mut rb = endpoint.post_json(body)?;
    if stream {
        rb = rb.header(ACCEPT, "text/event-stream");
    }
    let sent = endpoint.send(rb);
    let resp = if stream {
        wd.guard(sent).await?
    } else {
        wd.guard_total(sent).await?
    }
    .map_err(|e| classify_reqwest(&e))?;
    if !resp.status().is_success() {
        return Err(READER.classify(resp, wd.clock().total_deadline()).await);
    }
    let rate_limit = (READER.rate_limit)(resp.headers());
    let mut decoder = Decoder::default();
    let mut acc = Assembly::new(false);
    let mut blocks: Vec<ThinkingBlock> = Vec::new();
    let mut deltas = Vec::new();
    if stream {
        // A stream cut after content keeps what it delivered (docs/behaviour.md §5.10).
        let cut = |e: TransportError, acc: Assembly, blocks: Vec<ThinkingBlock>| {
            let output = acc.has_output();
            keep_cut(e, output, || {
                let usage_source = if acc.usage.is_some() {
                    UsageSource::Measured
                } else {
                    UsageSource::Unavailable
                };
                response(settings, acc, usage_source, blocks)
            })
        };
        let read = async {
            let mut bytes = resp.bytes_stream();
            let mut parser = SseParser::new();
            let mut events = Vec::new();
            let mut closed = false;
            loop {
                let eof = match wd.guard(bytes.next()).await? {
                    None => {
                        parser.finish(&mut events).map_err(frame_too_large)?;
                        true
                    }
                    Some(Err(_)) => {
                        closed = true;
                        true
                    }
                    Some(Ok(chunk)) => {
                        parser.feed(&chunk, &mut events).map_err(frame_too_large)?;
                        false
                    }
                };
                for event in events.drain(..) {
                    // Gemini sends no `[DONE]`; one would be a stray line, not an ending.
                    let SseEvent::Data(data) = event else {
                        continue;
                    };
                    let frame = decoder.decode(&data)?;
                    merge_blocks(&mut blocks, frame.thinking_blocks);
                    if acc.apply(frame.frame, &mut deltas) {
                        wd.on_token();
                    }
                    emit_all(&wd, sink, &mut deltas).await?;
                }
                if eof {
                    break;
                }
            }
            Ok::<_, TransportError>(closed)
        };
        let closed = match read.await {
            Ok(closed) => closed,
            Err(e) => return Err(cut(e, acc, blocks)),
        };
        acc.finish(&mut deltas);
        emit_all(&wd, sink, &mut deltas).await?;
        let usage_source = match verdict(settings, &acc, decoder.finished(), closed) {
            Ok(usage_source) => usage_source,
            Err(e) => return Err(cut(e, acc, blocks)),
        };
        let mut r = response(settings, acc, usage_source, blocks);
        r.truncated = !decoder.finished();
        r.rate_limit = rate_limit;
        let clock = wd.clock();
        r.latency_ms = ms_since(clock.start());
        r.ttft_ms = clock.ttft_ms();
        r.max_inter_token_ms = clock.max_inter_token_ms();
        Ok(r)
    } else {
        let whole = wd
            .guard_total(resp.bytes())
            .await?
            .map_err(|e| classify_reqwest(&e))?;
        let frame = decoder.decode(&String::from_utf8_lossy(&whole))?;
        merge_blocks(&mut blocks, frame.thinking_blocks);
        acc.apply(frame.frame, &mut deltas);
        acc.finish(&mut deltas);
        let usage_source = verdict(settings, &acc, decoder.finished(), false)?;
        emit_all(&wd, sink, &mut deltas).await?;
        let mut r = response(settings, acc, usage_source, blocks);
        r.truncated = !decoder.finished();
        r.rate_limit = rate_limit;
        r.latency_ms = ms_since(wd.clock().start());
        Ok(r)
    }
}

/// End of answer: a finish reason that withholds or botches the answer fails the attempt by its
/// class (`finish_verdict`); an answer without a finish reason is truncated (retried, or salvaged
/// under `MISSING_DONE=salvage`); a finished answer with nothing in it is an empty completion,
/// unless it ran out of tokens (`length`).
fn verdict(
    settings: &SourceSettings,
    acc: &Assembly,
    finished: bool,
    closed: bool,
) -> Result<UsageSource, TransportError> {
    let transient = |m: String| Err(TransportError::transient(SourceReason::NetworkError, m));
    let measured = if acc.usage.is_some() {
        UsageSource::Measured
    } else {
        UsageSource::Unavailable
    };
    let how = if closed {
        "connection closed"
    } else {
        "the body ended"
    };
    if finished {
        let reason = acc.finish_reason().unwrap_or("other");
        if let Some(e) = finish_verdict(reason) {
            return Err(e);
        }
        if !acc.has_answer() && reason != "length" {
            return transient(format!(
                "empty completion: finishReason {reason} without content or function calls"
            ));
        }
        return Ok(measured);
    }
    if !acc.has_answer() {
        return transient(format!("early_eof: {how} before any content"));
    }
    match settings.missing_done {
        MissingDone::Retry => transient(format!(
            "truncated stream: {how} after {} chars of content, without finishReason",
            acc.content_chars()
        )),
        MissingDone::Salvage => Ok(if acc.usage.is_some() {
            UsageSource::Estimated
        } else {
            UsageSource::Unavailable
        }),
    }
}

fn response(
    settings: &SourceSettings,
    acc: Assembly,
    usage_source: UsageSource,
    blocks: Vec<ThinkingBlock>,
) -> LlmResponse {
    let usage = acc.usage;
    let mut r = acc.into_response();
    r.thinking_blocks = blocks;
    r.model = settings.model.clone();
    r.provider = settings.provider.clone();
    r.source_name = settings.name.clone();
    r.usage_source = usage_source;
    if let (Some(u), true) = (usage, usage_source != UsageSource::Unavailable) {
        r.prompt_tokens = u.prompt_tokens;
        r.completion_tokens = u.completion_tokens;
        r.cached_prompt_tokens = u.cached_prompt_tokens;
        r.cache_write_5m_tokens = u.cache_write_5m_tokens;
        r.cache_write_1h_tokens = u.cache_write_1h_tokens;
        r.reasoning_tokens = u.reasoning_tokens;
    }
    r
}
