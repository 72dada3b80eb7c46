//! Chat messages in the OpenAI shape: every role, content as null, text or parts (text and
//! `image_url` typed; other part types kept verbatim), a speaker `name`, assistant `tool_calls`
//! (and the legacy `function_call`), a tool result's `tool_call_id`, a `refusal`. Fields this type
//! does not model survive a round trip, so a request's messages reach the upstream as the caller
//! wrote them.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use super::tool::{FunctionCall, ToolCall};

/// Who speaks a message.
///
/// ```
/// use polygateway::{Message, Role};
/// // Serialised in lower case, as the OpenAI API expects.
/// assert_eq!(serde_json::to_value(Role::Assistant).unwrap(), "assistant");
/// let tool = Message::new(Role::Tool, "42");
/// assert_eq!(serde_json::to_value(&tool).unwrap()["role"], "tool");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// System instructions.
    System,
    /// Developer instructions (OpenAI's successor of `system` for reasoning models).
    Developer,
    /// The user.
    User,
    /// The model.
    Assistant,
    /// A tool result.
    Tool,
}

/// One part of a multimodal content array.
///
/// ```
/// use polygateway::{ContentPart, ImageUrl};
/// let text = ContentPart::Text { text: "what is this?".into() };
/// assert_eq!(
///     serde_json::to_value(&text).unwrap(),
///     serde_json::json!({"type": "text", "text": "what is this?"})
/// );
/// let image = ContentPart::ImageUrl {
///     image_url: ImageUrl { url: "https://example.invalid/cat.png".into(), detail: None },
/// };
/// assert_eq!(serde_json::to_value(&image).unwrap()["type"], "image_url");
/// // A part type not modelled here is forwarded verbatim.
/// let audio = serde_json::json!({"type": "input_audio", "input_audio": {"data": "UklG", "format": "wav"}});
/// let part: ContentPart = serde_json::from_value(audio.clone()).unwrap();
/// assert_eq!(part, ContentPart::Other(audio.clone()));
/// assert_eq!(serde_json::to_value(&part).unwrap(), audio);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum ContentPart {
    /// A text part.
    Text {
        /// The text.
        text: String,
    },
    /// An image, usually a `data:image/png;base64,…` URL.
    ImageUrl {
        /// The image reference.
        image_url: ImageUrl,
    },
    /// Any other part (`input_audio`, `file`, future types), or a `text` / `image_url` part
    /// with fields not modelled here: kept exactly as it came.
    Other(Value),
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
enum KnownPart {
    Text { text: String },
    ImageUrl { image_url: StrictImageUrl },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StrictImageUrl {
    url: String,
    #[serde(default)]
    detail: Option<String>,
}

impl Serialize for ContentPart {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        if let ContentPart::Other(value) = self {
            return value.serialize(serializer);
        }
        // Written by hand so that a multi-megabyte data URL is never copied.
        let mut map = serializer.serialize_map(Some(2))?;
        match self {
            ContentPart::Text { text } => {
                map.serialize_entry("type", "text")?;
                map.serialize_entry("text", text)?;
            }
            ContentPart::ImageUrl { image_url } => {
                map.serialize_entry("type", "image_url")?;
                map.serialize_entry("image_url", image_url)?;
            }
            ContentPart::Other(_) => {}
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for ContentPart {
    /// A part is typed only when every field it has is modelled; anything else stays a raw
    /// value, so nothing the caller sent is lost on the way upstream.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        if !value.get("type").is_some_and(Value::is_string) {
            return Err(serde::de::Error::custom(
                "a content part must be an object with a string `type`",
            ));
        }
        Ok(match KnownPart::deserialize(&value) {
            Ok(KnownPart::Text { text }) => ContentPart::Text { text },
            Ok(KnownPart::ImageUrl { image_url }) => ContentPart::ImageUrl {
                image_url: ImageUrl {
                    url: image_url.url,
                    detail: image_url.detail,
                },
            },
            Err(_) => ContentPart::Other(value),
        })
    }
}

/// The `image_url` object of a content part.
///
/// ```
/// use polygateway::ImageUrl;
/// let plain = ImageUrl { url: "data:image/png;base64,iVBORw0K".into(), detail: None };
/// // An unset detail is left out of the JSON entirely.
/// let json = serde_json::to_string(&plain).unwrap();
/// assert_eq!(json, r#"{"url":"data:image/png;base64,iVBORw0K"}"#);
/// let low = ImageUrl { detail: Some("low".into()), ..plain };
/// assert_eq!(serde_json::to_value(&low).unwrap()["detail"], "low");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImageUrl {
    /// A data URL or an http(s) URL.
    pub url: String,
    /// Optional detail hint (`low` | `high` | `auto`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// A message's content: plain text or a multimodal array.
///
/// ```
/// use polygateway::{Content, ContentPart};
/// // Untagged: plain text is a JSON string, parts are a JSON array.
/// let text: Content = serde_json::from_str(r#""hello""#).unwrap();
/// assert_eq!(text, Content::Text("hello".into()));
/// let parts: Content = serde_json::from_str(r#"[{"type": "text", "text": "hi"}]"#).unwrap();
/// assert_eq!(parts, Content::Parts(vec![ContentPart::Text { text: "hi".into() }]));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Content {
    /// Plain text.
    Text(String),
    /// Text and image parts.
    Parts(Vec<ContentPart>),
}

/// One chat message.
///
/// ```
/// use polygateway::{Message, Role, ToolCall};
/// let m = Message::user("hello");
/// assert_eq!(serde_json::to_string(&m).unwrap(), r#"{"role":"user","content":"hello"}"#);
/// // An assistant turn that called a tool, and the tool's answer.
/// let call = Message::assistant_tool_calls(vec![ToolCall::function("call_1", "now", "{}")]);
/// let json = serde_json::to_value(&call).unwrap();
/// assert!(json["content"].is_null());
/// assert_eq!(json["tool_calls"][0]["id"], "call_1");
/// let result = Message::tool_result("call_1", "12:00");
/// assert_eq!(serde_json::to_value(&result).unwrap()["tool_call_id"], "call_1");
/// // Unmodelled fields survive a round trip.
/// let raw = serde_json::json!({"role": "user", "content": "hi", "cache_control": {"type": "ephemeral"}});
/// let m: Message = serde_json::from_value(raw.clone()).unwrap();
/// assert_eq!(serde_json::to_value(&m).unwrap(), raw);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// The speaker.
    pub role: Role,
    /// The content: `None` is JSON `null` (an assistant turn that only called tools).
    #[serde(default)]
    pub content: Option<Content>,
    /// The speaker's name (several users or tools in one conversation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The tool calls of an assistant turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
    /// The legacy single function call of an assistant turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function_call: Option<FunctionCall>,
    /// The call a `tool` message answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// An assistant turn's refusal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal: Option<String>,
    /// An assistant turn's thinking with its signatures, replayed verbatim to dialects that
    /// take it back (Anthropic, Gemini) and left out for those that do not (OpenAI chat).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub thinking_blocks: Vec<super::ThinkingBlock>,
    /// Fields not modelled here, kept as they came.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Message {
    /// A message with text content.
    ///
    /// ```
    /// use polygateway::{Content, Message, Role};
    /// let m = Message::new(Role::Tool, r#"{"temperature_c": 21}"#);
    /// assert_eq!(m.role, Role::Tool);
    /// assert_eq!(m.content, Some(Content::Text(r#"{"temperature_c": 21}"#.into())));
    /// ```
    pub fn new(role: Role, text: impl Into<String>) -> Self {
        Self::with_content(role, Content::Text(text.into()))
    }

    /// A message with the given content and no other field.
    ///
    /// ```
    /// use polygateway::{Content, ContentPart, Message, Role};
    /// let parts = Content::Parts(vec![ContentPart::Text { text: "hi".into() }]);
    /// let m = Message::with_content(Role::User, parts.clone());
    /// assert_eq!(m.content, Some(parts));
    /// ```
    pub fn with_content(role: Role, content: Content) -> Self {
        Self {
            role,
            content: Some(content),
            name: None,
            tool_calls: None,
            function_call: None,
            tool_call_id: None,
            refusal: None,
            thinking_blocks: Vec::new(),
            extra: Map::new(),
        }
    }

    /// A developer message.
    ///
    /// ```
    /// use polygateway::{Message, Role};
    /// assert_eq!(Message::developer("Be terse.").role, Role::Developer);
    /// ```
    pub fn developer(text: impl Into<String>) -> Self {
        Self::new(Role::Developer, text)
    }

    /// An assistant turn that called tools (content `null`), to replay in a conversation.
    ///
    /// ```
    /// use polygateway::{Message, ToolCall};
    /// let m = Message::assistant_tool_calls(vec![ToolCall::function("c1", "f", "{}")]);
    /// assert_eq!(m.content, None);
    /// assert_eq!(m.tool_calls.unwrap().len(), 1);
    /// ```
    pub fn assistant_tool_calls(calls: Vec<ToolCall>) -> Self {
        let mut m = Self::new(Role::Assistant, "");
        m.content = None;
        m.tool_calls = Some(calls);
        m
    }

    /// A `tool` message answering the call `tool_call_id`.
    ///
    /// ```
    /// use polygateway::{Message, Role};
    /// let m = Message::tool_result("call_1", r#"{"temperature_c": 21}"#);
    /// assert_eq!((m.role, m.tool_call_id.as_deref()), (Role::Tool, Some("call_1")));
    /// ```
    pub fn tool_result(tool_call_id: impl Into<String>, text: impl Into<String>) -> Self {
        let mut m = Self::new(Role::Tool, text);
        m.tool_call_id = Some(tool_call_id.into());
        m
    }

    /// The same message with a speaker name.
    ///
    /// ```
    /// use polygateway::Message;
    /// let m = Message::user("hi").named("alice");
    /// assert_eq!(serde_json::to_value(&m).unwrap()["name"], "alice");
    /// ```
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// A system message.
    ///
    /// ```
    /// use polygateway::{Message, Role};
    /// let m = Message::system("Answer in French.");
    /// assert_eq!(m, Message::new(Role::System, "Answer in French."));
    /// ```
    pub fn system(text: impl Into<String>) -> Self {
        Self::new(Role::System, text)
    }

    /// A user message.
    ///
    /// ```
    /// use polygateway::{Message, Role};
    /// let question = format!("Summarise: {}", "the quarterly report");
    /// let m = Message::user(question);
    /// assert_eq!(m.role, Role::User);
    /// assert_eq!(m.text(), "Summarise: the quarterly report");
    /// ```
    pub fn user(text: impl Into<String>) -> Self {
        Self::new(Role::User, text)
    }

    /// An assistant message.
    ///
    /// ```
    /// use polygateway::{Message, Role};
    /// // A few-shot history: an earlier answer is replayed as an assistant turn.
    /// let history = vec![
    ///     Message::user("2 + 2?"),
    ///     Message::assistant("4"),
    ///     Message::user("3 + 3?"),
    /// ];
    /// let roles: Vec<Role> = history.iter().map(|m| m.role).collect();
    /// assert_eq!(roles, [Role::User, Role::Assistant, Role::User]);
    /// ```
    pub fn assistant(text: impl Into<String>) -> Self {
        Self::new(Role::Assistant, text)
    }

    /// A user message with text and images (VLM). Each image is `(mime, bytes)` and becomes a
    /// base64 data URL.
    ///
    /// ```
    /// use polygateway::Message;
    /// let m = Message::user_with_images("what is this?", [("image/png", &b"\x89PNG"[..])]);
    /// let json = serde_json::to_value(&m).unwrap();
    /// assert!(json["content"][1]["image_url"]["url"].as_str().unwrap().starts_with("data:image/png;base64,"));
    /// ```
    pub fn user_with_images<'a>(
        text: impl Into<String>,
        images: impl IntoIterator<Item = (&'a str, &'a [u8])>,
    ) -> Self {
        use base64::Engine;
        let mut parts = vec![ContentPart::Text { text: text.into() }];
        for (mime, bytes) in images {
            let data = base64::engine::general_purpose::STANDARD.encode(bytes);
            parts.push(ContentPart::ImageUrl {
                image_url: ImageUrl {
                    url: format!("data:{mime};base64,{data}"),
                    detail: None,
                },
            });
        }
        Self::with_content(Role::User, Content::Parts(parts))
    }

    /// The text of this message (text parts joined with `\n`; other parts ignored; empty when
    /// the content is `null`).
    ///
    /// ```
    /// use polygateway::{Content, ContentPart, Message, Role};
    /// assert_eq!(Message::user("hello").text(), "hello");
    /// let m = Message::with_content(
    ///     Role::User,
    ///     Content::Parts(vec![
    ///         ContentPart::Text { text: "first".into() },
    ///         ContentPart::Text { text: "second".into() },
    ///     ]),
    /// );
    /// assert_eq!(m.text(), "first\nsecond");
    /// // Image parts contribute nothing.
    /// let vlm = Message::user_with_images("caption this", [("image/png", &b"\x89PNG"[..])]);
    /// assert_eq!(vlm.text(), "caption this");
    /// ```
    pub fn text(&self) -> String {
        match &self.content {
            None => String::new(),
            Some(Content::Text(t)) => t.clone(),
            Some(Content::Parts(parts)) => parts
                .iter()
                .filter_map(|p| match p {
                    ContentPart::Text { text } => Some(text.as_str()),
                    ContentPart::ImageUrl { .. } | ContentPart::Other(_) => None,
                })
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_whole_tool_conversation_round_trips_unchanged() {
        let raw = json!([
            {"role": "developer", "content": "Use tools."},
            {"role": "user", "content": "weather?", "name": "alice"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "21C"},
            {"role": "assistant", "content": null, "function_call": {"name": "f", "arguments": "{"}},
            {"role": "assistant", "content": null, "refusal": "no"},
            {"role": "user", "content": [
                {"type": "text", "text": "a", "cache_control": {"type": "ephemeral"}},
                {"type": "image_url", "image_url": {"url": "data:x", "detail": "low"}},
                {"type": "image_url", "image_url": {"url": "data:y", "format": "png"}},
                {"type": "file", "file": {"file_id": "f1"}}]},
        ]);
        let messages: Vec<Message> = serde_json::from_value(raw.clone()).unwrap();
        assert_eq!(serde_json::to_value(&messages).unwrap(), raw);
        let Some(Content::Parts(parts)) = &messages[6].content else {
            panic!("parts expected");
        };
        // Typed only where every field is modelled.
        assert!(matches!(parts[0], ContentPart::Other(_)));
        assert!(matches!(parts[1], ContentPart::ImageUrl { .. }));
        assert!(matches!(parts[2], ContentPart::Other(_)));
        assert!(matches!(parts[3], ContentPart::Other(_)));
        assert_eq!(messages[6].text(), "");
        assert_eq!(
            messages[2].tool_calls.as_ref().unwrap()[0].function.name,
            "get_weather"
        );
    }

    #[test]
    fn a_part_without_a_type_is_refused_with_a_reason() {
        let err =
            serde_json::from_value::<Message>(json!({"role": "user", "content": [{"text": "a"}]}))
                .unwrap_err();
        assert!(err.to_string().contains("did not match"), "{err}");
        let err =
            serde_json::from_value::<Message>(json!({"role": "boss", "content": "a"})).unwrap_err();
        assert!(err.to_string().contains("developer"), "{err}");
    }
}
