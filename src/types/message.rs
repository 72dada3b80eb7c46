//! Chat messages in the OpenAI shape: text content, or multimodal content arrays whose images are
//! `image_url` data URLs.

use serde::{Deserialize, Serialize};

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
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
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
/// use polygateway::Message;
/// let m = Message::user("hello");
/// assert_eq!(serde_json::to_string(&m).unwrap(), r#"{"role":"user","content":"hello"}"#);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// The speaker.
    pub role: Role,
    /// The content.
    pub content: Content,
}

impl Message {
    /// A message with text content.
    ///
    /// ```
    /// use polygateway::{Content, Message, Role};
    /// let m = Message::new(Role::Tool, r#"{"temperature_c": 21}"#);
    /// assert_eq!(m.role, Role::Tool);
    /// assert_eq!(m.content, Content::Text(r#"{"temperature_c": 21}"#.into()));
    /// ```
    pub fn new(role: Role, text: impl Into<String>) -> Self {
        Self {
            role,
            content: Content::Text(text.into()),
        }
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
        Self {
            role: Role::User,
            content: Content::Parts(parts),
        }
    }

    /// The text of this message (text parts joined with `\n`; images ignored).
    ///
    /// ```
    /// use polygateway::{Content, ContentPart, Message, Role};
    /// assert_eq!(Message::user("hello").text(), "hello");
    /// let m = Message {
    ///     role: Role::User,
    ///     content: Content::Parts(vec![
    ///         ContentPart::Text { text: "first".into() },
    ///         ContentPart::Text { text: "second".into() },
    ///     ]),
    /// };
    /// assert_eq!(m.text(), "first\nsecond");
    /// // Image parts contribute nothing.
    /// let vlm = Message::user_with_images("caption this", [("image/png", &b"\x89PNG"[..])]);
    /// assert_eq!(vlm.text(), "caption this");
    /// ```
    pub fn text(&self) -> String {
        match &self.content {
            Content::Text(t) => t.clone(),
            Content::Parts(parts) => parts
                .iter()
                .filter_map(|p| match p {
                    ContentPart::Text { text } => Some(text.as_str()),
                    ContentPart::ImageUrl { .. } => None,
                })
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }
}
