//! What every chat exchange shares, whatever its dialect: the request a call sends, the deltas a
//! consumer is handed, and a frame past the SSE cap as an error. Apart from `chat.rs` so that
//! the exchanges (`transport::machine`), the driver and the assembly use them without importing
//! the transport that dispatches to them.

use std::sync::Arc;

use polygateway_actors::SourceReason;
use serde_json::{Map, Value};

use super::sse::FrameTooLarge;
use crate::error::TransportError;
use crate::structured::SchemaRequest;
use crate::types::{Message, ToolCallDelta};

/// One streamed delta handed to a consumer.
///
/// ```
/// use polygateway::transport::chat::ChatDelta;
/// let deltas = vec![
///     ChatDelta::Reasoning("2 + 2 is ".into()),
///     ChatDelta::Reasoning("4.".into()),
///     ChatDelta::Content("4".into()),
/// ];
/// let (mut answer, mut thinking) = (String::new(), String::new());
/// for delta in deltas {
///     match delta {
///         ChatDelta::Content(text) => answer.push_str(&text),
///         ChatDelta::Reasoning(text) => thinking.push_str(&text),
///         ChatDelta::ToolCall(piece) => println!("tool call {}: {}", piece.index, piece.arguments),
///         other => println!("not shown here: {other:?}"),
///     }
/// }
/// assert_eq!((answer.as_str(), thinking.as_str()), ("4", "2 + 2 is 4."));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ChatDelta {
    /// Answer text.
    Content(String),
    /// Reasoning text (`reasoning_content` or a `<think>` block).
    Reasoning(String),
    /// A piece of a tool call, as it arrived (the complete calls are in the final response).
    ToolCall(ToolCallDelta),
    /// A piece of the model's refusal (the whole refusal is in the final response).
    Refusal(String),
    /// A piece of the signature of the thinking block being streamed (Anthropic's
    /// `signature_delta`), sent when it arrives: before the next block starts. The whole
    /// signature is also in the final response's `thinking_blocks`.
    ThinkingSignature(String),
}

/// What a chat call sends, built once per call and reused by every attempt (on any source).
///
/// ```
/// use std::sync::Arc;
/// use polygateway::transport::chat::ChatWireRequest;
/// use polygateway::Message;
/// let messages = Arc::new(vec![Message::system("Be brief."), Message::user("Capital of France?")]);
/// let mut request = ChatWireRequest::new(Arc::clone(&messages));
/// request.overlay = serde_json::Map::from_iter([("temperature".to_string(), 0.2.into())]);
/// request.response_format = Some(polygateway::structured::json_object_format());
/// request.stream = false;
/// // Every attempt works on a clone; the conversation itself is not copied.
/// let attempt = request.clone();
/// assert!(Arc::ptr_eq(&attempt.messages, &messages));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ChatWireRequest {
    /// The conversation, shared between attempts without copying.
    pub messages: Arc<Vec<Message>>,
    /// The call's sampling overlay (validated by the caller side: no protected keys).
    pub overlay: Map<String, Value>,
    /// An explicit `response_format`, sent as is to every source (above the overlay).
    pub response_format: Option<Value>,
    /// A typed call's schema. Each attempt sends it in its source's structured mode
    /// (`STRUCTURED_MODE`, else the strongest its provider supports,
    /// [`ProviderProfile::structured_mode`](crate::provider::ProviderProfile::structured_mode)): strict `json_schema`, else `json_object` plus the
    /// schema in the prompt, else the prompt alone; a source that refuses its mode falls back to
    /// a weaker one for good. Its `response_format` wins over every other layer.
    pub schema: Option<Arc<SchemaRequest>>,
    /// Stream (SSE) or a single JSON answer.
    pub stream: bool,
    /// The request as the client wrote it in a source dialect (the server's `/v1/messages`
    /// ingress): a source of that dialect is sent it with only the model (and `stream`) set,
    /// every other source the canonical call above (docs/behaviour.md §12.5).
    pub(crate) native: Option<crate::types::native_body::NativeBody>,
    /// The beginning of the answer, delivered by a source whose stream was cut, for this
    /// source to continue (docs/behaviour.md §5.10): sent as the final assistant turn, the way
    /// the source's dialect writes a prefill.
    pub(crate) prefill: Option<Arc<str>>,
}

impl ChatWireRequest {
    /// A streaming request with no overlay and no `response_format`.
    ///
    /// ```
    /// use polygateway::transport::chat::ChatWireRequest;
    /// let request = ChatWireRequest::new(vec![polygateway::Message::user("hi")]);
    /// assert!(request.stream);
    /// assert!(request.overlay.is_empty());
    /// assert_eq!(request.response_format, None);
    /// assert!(request.schema.is_none());
    /// assert_eq!(request.messages.len(), 1);
    /// ```
    pub fn new(messages: impl Into<Arc<Vec<Message>>>) -> Self {
        Self {
            messages: messages.into(),
            overlay: Map::new(),
            response_format: None,
            schema: None,
            stream: true,
            native: None,
            prefill: None,
        }
    }
}

/// An upstream that sends a line or event past the SSE cap is broken (or hostile): Transient,
/// the next attempt may go elsewhere.
pub(crate) fn frame_too_large(e: FrameTooLarge) -> TransportError {
    TransportError::transient(SourceReason::NetworkError, format!("malformed stream: {e}"))
}
