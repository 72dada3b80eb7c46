//! The OpenAI-compatible JSON shapes of chat answers: stream chunks, non-streaming completions,
//! usage blocks and in-band errors, decoded into small owned values.
//!
//! Only decoding and the classification of a frame that is itself an error live here; framing is
//! [`super::sse`], assembly of a response is [`super::chat`].

use polygateway_actors::{FailureClass, SourceReason};
use reqwest::header::HeaderMap;
use serde::Deserialize;
use serde_json::{Map, Value};
use std::borrow::Cow;

use super::http::classify_status;
use crate::error::{summarize_body, TransportError};
use crate::types::{Usage, UsageSource};

/// Token usage as reported on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct WireUsage {
    /// `prompt_tokens`.
    pub(crate) prompt_tokens: u64,
    /// `completion_tokens`.
    pub(crate) completion_tokens: u64,
    /// `prompt_tokens_details.cached_tokens` (or DeepSeek's `prompt_cache_hit_tokens`).
    pub(crate) cached_prompt_tokens: Option<u64>,
    /// Prompt tokens written to a 5-minute prompt cache (native dialects; OpenAI reports none).
    pub(crate) cache_write_5m_tokens: Option<u64>,
    /// Prompt tokens written to a 1-hour prompt cache (native dialects).
    pub(crate) cache_write_1h_tokens: Option<u64>,
    /// `completion_tokens_details.reasoning_tokens`.
    pub(crate) reasoning_tokens: Option<u64>,
}

impl WireUsage {
    /// These numbers as an answer's usage, from `source`.
    pub(crate) fn reported_by(self, source: UsageSource) -> Usage {
        Usage {
            prompt_tokens: self.prompt_tokens,
            completion_tokens: self.completion_tokens,
            cached_prompt_tokens: self.cached_prompt_tokens,
            cache_write_5m_tokens: self.cache_write_5m_tokens,
            cache_write_1h_tokens: self.cache_write_1h_tokens,
            reasoning_tokens: self.reasoning_tokens,
            source,
        }
    }
}

/// What one stream chunk (or a whole non-streaming completion) carried. `model` and
/// `system_fingerprint` borrow from the frame: every chunk repeats them and the assembly keeps
/// one copy, so a stream allocates them once, not once per chunk.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct ChunkFrame<'a> {
    /// Top-level `model`.
    pub(crate) model: Option<Cow<'a, str>>,
    /// Top-level `usage`, when present and not null.
    pub(crate) usage: Option<WireUsage>,
    /// Top-level `system_fingerprint`.
    pub(crate) system_fingerprint: Option<Cow<'a, str>>,
    /// The choices the frame carried (one per chunk usually; all of them in a completion).
    pub(crate) choices: Vec<ChoiceFrame>,
}

impl ChunkFrame<'_> {
    /// The frame's choice with index 0, if it carried one.
    #[cfg(test)]
    pub(crate) fn first(&self) -> Option<&ChoiceFrame> {
        self.choices.iter().find(|c| c.index == 0)
    }
}

/// What one choice of a frame carried: `choices[i].delta` (`message` when not streaming).
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct ChoiceFrame {
    /// `index` (0 when absent: a single-choice answer).
    pub(crate) index: u32,
    /// `content`.
    pub(crate) content: Option<String>,
    /// `reasoning_content` (or `reasoning`).
    pub(crate) reasoning: Option<String>,
    /// `tool_calls` pieces (a whole call in a completion).
    pub(crate) tool_calls: Vec<WireToolCall>,
    /// The legacy `function_call` piece.
    pub(crate) function_call: Option<WireFunction>,
    /// `refusal`.
    pub(crate) refusal: Option<String>,
    /// `logprobs` (beside the delta), when present and not null.
    pub(crate) logprobs: Option<Value>,
    /// `finish_reason`.
    pub(crate) finish_reason: Option<String>,
}

/// One `tool_calls` entry of a delta or message, as it came.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
pub(crate) struct WireToolCall {
    /// Which call a streamed piece belongs to; absent in most non-streaming answers (then the
    /// position in the array).
    #[serde(default)]
    pub(crate) index: Option<u32>,
    #[serde(default)]
    pub(crate) id: Option<String>,
    #[serde(default, rename = "type")]
    pub(crate) kind: Option<String>,
    #[serde(default)]
    pub(crate) function: Option<WireFunction>,
    /// Fields not modelled, kept for the assembled call.
    #[serde(flatten)]
    pub(crate) extra: Map<String, Value>,
}

/// A `function` object (of a tool call, or the legacy `function_call`); streamed pieces carry
/// the name once and the arguments in parts.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
pub(crate) struct WireFunction {
    #[serde(default)]
    pub(crate) name: Option<String>,
    #[serde(default)]
    pub(crate) arguments: Option<String>,
}

#[derive(Deserialize)]
struct RawChunk<'a> {
    #[serde(default)]
    choices: Option<ChoiceFrames>,
    #[serde(default, borrow)]
    model: Option<Text<'a>>,
    #[serde(default)]
    usage: Option<RawUsage>,
    #[serde(default, borrow)]
    system_fingerprint: Option<Text<'a>>,
    #[serde(default)]
    error: Option<serde_json::Value>,
}

/// A string borrowed from the frame when it has no escapes. (A `Cow` directly inside an
/// `Option` is always deserialised owned; its own derive borrows.)
#[derive(Deserialize)]
struct Text<'a>(#[serde(borrow)] Cow<'a, str>);

#[derive(Deserialize)]
struct RawChoice {
    #[serde(default)]
    index: Option<u32>,
    #[serde(default)]
    delta: Option<RawDelta>,
    /// Boxed: only a non-streaming answer has it, and inline it would double the size of every
    /// stream chunk's choice (decoded, moved and dropped per chunk).
    #[serde(default)]
    message: Option<Box<RawDelta>>,
    #[serde(default)]
    logprobs: Option<Value>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct RawDelta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    reasoning: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<WireToolCall>>,
    #[serde(default)]
    function_call: Option<WireFunction>,
    #[serde(default)]
    refusal: Option<String>,
}

#[derive(Deserialize)]
struct RawUsage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<RawPromptDetails>,
    #[serde(default)]
    completion_tokens_details: Option<RawCompletionDetails>,
    #[serde(default)]
    prompt_cache_hit_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct RawPromptDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct RawCompletionDetails {
    #[serde(default)]
    reasoning_tokens: Option<u64>,
}

impl From<RawUsage> for WireUsage {
    fn from(u: RawUsage) -> Self {
        WireUsage {
            prompt_tokens: u.prompt_tokens.unwrap_or(0),
            completion_tokens: u.completion_tokens.unwrap_or(0),
            cached_prompt_tokens: u
                .prompt_tokens_details
                .and_then(|d| d.cached_tokens)
                .or(u.prompt_cache_hit_tokens),
            reasoning_tokens: u.completion_tokens_details.and_then(|d| d.reasoning_tokens),
            ..WireUsage::default()
        }
    }
}

/// Decode one stream frame's `data` (or a whole non-streaming body).
///
/// - malformed JSON → Transient `network_error` carrying the summarised frame;
/// - an in-band `{"error": …}` object → classified like the HTTP status it names (a numeric
///   `code`/`status`), SourceDead when it says `insufficient_quota`, else Transient.
pub(crate) fn decode_chunk(data: &str) -> Result<ChunkFrame<'_>, TransportError> {
    decode(data, "malformed SSE frame")
}

/// Decode a whole non-streaming completion body (`choices[0].message`); same rules as
/// [`decode_chunk`].
pub(crate) fn decode_completion(body: &str) -> Result<ChunkFrame<'_>, TransportError> {
    decode(body, "malformed completion body")
}

fn decode<'a>(data: &'a str, label: &str) -> Result<ChunkFrame<'a>, TransportError> {
    let raw: RawChunk<'a> = serde_json::from_str(data).map_err(|e| malformed(label, data, &e))?;
    if let Some(err) = raw.error.filter(|e| !e.is_null()) {
        return Err(in_band_error(&err, data));
    }
    let choices = raw.choices.map(|c| c.0).unwrap_or_default();
    Ok(ChunkFrame {
        model: raw.model.map(|m| m.0).filter(|m| !m.is_empty()),
        usage: raw.usage.map(WireUsage::from),
        system_fingerprint: raw
            .system_fingerprint
            .map(|f| f.0)
            .filter(|f| !f.is_empty()),
        choices,
    })
}

/// A frame's `choices`, each turned into its [`ChoiceFrame`] as it is read: one vector per
/// frame instead of a vector of raw choices and a second one of frames.
struct ChoiceFrames(Vec<ChoiceFrame>);

impl<'de> Deserialize<'de> for ChoiceFrames {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Choices;
        impl<'de> serde::de::Visitor<'de> for Choices {
            type Value = ChoiceFrames;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an array of choices")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<ChoiceFrames, A::Error> {
                let mut frames = Vec::with_capacity(seq.size_hint().unwrap_or(1).min(16));
                while let Some(choice) = seq.next_element::<RawChoice>()? {
                    frames.push(choice_frame(frames.len(), choice));
                }
                Ok(ChoiceFrames(frames))
            }
        }
        deserializer.deserialize_seq(Choices)
    }
}

fn choice_frame(position: usize, choice: RawChoice) -> ChoiceFrame {
    let mut frame = ChoiceFrame {
        index: choice
            .index
            .unwrap_or(u32::try_from(position).unwrap_or(u32::MAX)),
        logprobs: choice.logprobs.filter(|l| !l.is_null()),
        finish_reason: choice.finish_reason,
        ..ChoiceFrame::default()
    };
    if let Some(d) = choice.delta.or(choice.message.map(|m| *m)) {
        frame.content = d.content;
        frame.reasoning = d.reasoning_content.or(d.reasoning);
        frame.tool_calls = d.tool_calls.unwrap_or_default();
        frame.function_call = d.function_call;
        frame.refusal = d.refusal;
    }
    frame
}

fn malformed(label: &str, data: &str, err: &serde_json::Error) -> TransportError {
    let summary = summarize_body(data);
    let mut e = TransportError::transient(
        SourceReason::NetworkError,
        format!("{label} ({err}): {summary}"),
    );
    e.body_text = summary;
    e
}

/// Classify an in-band error object. The HTTP status of the stream was 200, so `status` stays
/// empty; the class follows the status the error names, if any.
fn in_band_error(err: &serde_json::Value, frame: &str) -> TransportError {
    let named_status = ["code", "status", "status_code"].iter().find_map(|k| {
        let v = err.get(k)?;
        v.as_u64()
            .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
            .filter(|s| (400..600).contains(s))
    });
    let mut e = match named_status {
        Some(status) => classify_status(status as u16, &HeaderMap::new(), frame),
        None => {
            // No usable status: still honour an `insufficient_quota` marker.
            let probe = classify_status(429, &HeaderMap::new(), frame);
            if probe.class == FailureClass::SourceDead {
                probe
            } else {
                let mut t = TransportError::transient(SourceReason::NetworkError, "");
                t.body_text = summarize_body(frame);
                t
            }
        }
    };
    e.status = None;
    e.message = format!("in-band stream error: {}", e.body_text);
    e
}

#[cfg(test)]
mod tests {
    use super::*;
    use polygateway_actors::Classify;

    #[test]
    fn model_and_fingerprint_borrow_from_the_frame_unless_escaped() {
        let f =
            decode_chunk(r#"{"model":"gpt-x","system_fingerprint":"fp_1","choices":[]}"#).unwrap();
        assert!(
            matches!(f.model, Some(Cow::Borrowed("gpt-x"))),
            "{:?}",
            f.model
        );
        assert!(matches!(f.system_fingerprint, Some(Cow::Borrowed("fp_1"))));
        let f = decode_chunk(r#"{"model":"a\u00e9b","choices":[]}"#).unwrap();
        assert_eq!(f.model.as_deref(), Some("a\u{e9}b"));
        let f = decode_chunk(r#"{"model":"","system_fingerprint":null,"choices":null}"#).unwrap();
        assert_eq!((f.model, f.system_fingerprint), (None, None));
        assert!(f.choices.is_empty());
    }

    #[test]
    fn usage_details_and_empty_choices() {
        let f = decode_chunk(
            r#"{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":4,
            "prompt_tokens_details":{"cached_tokens":6},
            "completion_tokens_details":{"reasoning_tokens":2}}}"#,
        )
        .unwrap();
        assert!(f.choices.is_empty());
        assert_eq!(
            f.usage,
            Some(WireUsage {
                prompt_tokens: 10,
                completion_tokens: 4,
                cached_prompt_tokens: Some(6),
                reasoning_tokens: Some(2),
                ..WireUsage::default()
            })
        );
    }

    #[test]
    fn null_usage_and_reported_zero_cache() {
        let f = decode_chunk(r#"{"choices":[{"delta":{"content":"x"}}],"usage":null}"#).unwrap();
        assert_eq!(f.usage, None);
        let f = decode_chunk(
            r#"{"usage":{"prompt_tokens":1,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":0}}}"#,
        )
        .unwrap();
        assert_eq!(f.usage.unwrap().cached_prompt_tokens, Some(0));
        assert_eq!(f.usage.unwrap().reasoning_tokens, None);
    }

    #[test]
    fn deepseek_cache_hit_field() {
        let f = decode_chunk(
            r#"{"usage":{"prompt_tokens":9,"completion_tokens":1,"prompt_cache_hit_tokens":8}}"#,
        )
        .unwrap();
        assert_eq!(f.usage.unwrap().cached_prompt_tokens, Some(8));
    }

    #[test]
    fn reasoning_fields_and_message_shape() {
        let f = decode_chunk(r#"{"choices":[{"delta":{"reasoning_content":"hm"}}]}"#).unwrap();
        assert_eq!(f.first().unwrap().reasoning.as_deref(), Some("hm"));
        let f = decode_chunk(
            r#"{"model":"m1","choices":[{"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}"#,
        )
        .unwrap();
        assert_eq!(f.first().unwrap().content.as_deref(), Some("ok"));
        assert_eq!(f.first().unwrap().finish_reason.as_deref(), Some("stop"));
    }

    #[test]
    fn tool_calls_refusal_logprobs_and_choices() {
        let f = decode_chunk(
            r#"{"system_fingerprint":"fp_1","choices":[{"index":1,"delta":{"tool_calls":[
            {"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a"}}]},
            "logprobs":{"content":[{"token":"x","logprob":-0.1}]}}]}"#,
        )
        .unwrap();
        assert_eq!(f.system_fingerprint.as_deref(), Some("fp_1"));
        assert!(f.first().is_none());
        let c = &f.choices[0];
        assert_eq!(c.index, 1);
        assert_eq!(c.tool_calls[0].index, Some(0));
        assert_eq!(c.tool_calls[0].id.as_deref(), Some("call_1"));
        let function = c.tool_calls[0].function.as_ref().unwrap();
        assert_eq!(function.arguments.as_deref(), Some("{\"a"));
        assert!(c.logprobs.is_some());
        let f = decode_completion(
            r#"{"choices":[{"message":{"role":"assistant","content":null,"refusal":"no",
            "function_call":{"name":"g","arguments":"{}"}},"logprobs":null,"finish_reason":"stop"}]}"#,
        )
        .unwrap();
        let c = f.first().unwrap();
        assert_eq!(
            (c.content.as_deref(), c.refusal.as_deref()),
            (None, Some("no"))
        );
        assert_eq!(c.function_call.as_ref().unwrap().name.as_deref(), Some("g"));
        assert_eq!(c.logprobs, None);
    }

    #[test]
    fn malformed_frame_is_transient_with_summary() {
        let e = decode_chunk("{\"choices\":  [ {\"delta\":").unwrap_err();
        assert_eq!(e.class(), FailureClass::Transient);
        assert_eq!(e.body_text, "{\"choices\": [ {\"delta\":");
        assert!(e.message.contains("malformed SSE frame"));
    }

    #[test]
    fn in_band_errors_are_classified() {
        let e = decode_chunk(r#"{"error":{"message":"overloaded","type":"server_error"}}"#)
            .unwrap_err();
        assert_eq!(e.class(), FailureClass::Transient);
        assert!(e.message.contains("overloaded"));
        assert_eq!(e.status, None);
        let e = decode_chunk(r#"{"error":{"message":"quota","code":"insufficient_quota"}}"#)
            .unwrap_err();
        assert_eq!(e.class(), FailureClass::SourceDead);
        let e = decode_chunk(r#"{"error":{"message":"bad","code":400}}"#).unwrap_err();
        assert_eq!(e.class(), FailureClass::RequestRejected);
        let e = decode_chunk(r#"{"error":{"message":"slow","code":"429"}}"#).unwrap_err();
        assert!(e.is_rate_limited());
        assert!(decode_chunk(r#"{"error":null,"choices":[]}"#).is_ok());
    }
}

#[cfg(test)]
mod examples {
    //! Usage cases of crate-private items (they were doc examples while the items were public).

    #[test]
    fn wire_usage_example() {
        use crate::transport::wire::{decode_chunk, WireUsage};
        let frame = decode_chunk(
            r#"{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":3,
                "prompt_tokens_details":{"cached_tokens":8}}}"#,
        )
        .unwrap();
        assert_eq!(
            frame.usage,
            Some(WireUsage {
                prompt_tokens: 12,
                completion_tokens: 3,
                cached_prompt_tokens: Some(8),
                reasoning_tokens: None,
                ..WireUsage::default()
            })
        );
    }

    #[test]
    fn chunk_frame_example() {
        use crate::transport::wire::{decode_chunk, ChunkFrame};
        let frame = decode_chunk(
            r#"{"choices":[{"delta":{"reasoning_content":"hmm"},"finish_reason":null}]}"#,
        )
        .unwrap();
        assert_eq!(frame.choices[0].reasoning.as_deref(), Some("hmm"));
        assert_eq!(frame.choices[0].content, None);
        // The last chunk carries the finish reason and nothing else.
        let last = decode_chunk(r#"{"choices":[{"delta":{},"finish_reason":"stop"}]}"#).unwrap();
        assert_eq!(
            last,
            ChunkFrame {
                choices: vec![crate::transport::wire::ChoiceFrame {
                    finish_reason: Some("stop".into()),
                    ..Default::default()
                }],
                ..ChunkFrame::default()
            }
        );
    }

    #[test]
    fn decode_chunk_example() {
        use crate::transport::wire::decode_chunk;
        let f = decode_chunk(r#"{"model":"m","choices":[{"delta":{"content":"hi"}}]}"#).unwrap();
        assert_eq!(f.choices[0].content.as_deref(), Some("hi"));
        assert_eq!(f.model.as_deref(), Some("m"));
        assert!(decode_chunk("{not json").is_err());
    }

    #[test]
    fn decode_completion_example() {
        use crate::ports::FailureClass;
        use crate::transport::wire::decode_completion;
        let body = r#"{"model":"gpt-x","choices":[{"message":{"role":"assistant","content":"4"},
            "finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":1}}"#;
        let frame = decode_completion(body).unwrap();
        assert_eq!(frame.choices[0].content.as_deref(), Some("4"));
        assert_eq!(frame.usage.unwrap().completion_tokens, 1);
        // A 200 whose body is an error object is classified by the status it names.
        let err = decode_completion(r#"{"error":{"code":401,"message":"bad key"}}"#).unwrap_err();
        assert_eq!(err.class, FailureClass::SourceDead);
    }
}
