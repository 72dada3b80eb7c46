//! Chat messages in the OpenAI shape: text content, or multimodal content arrays whose images are
//! `image_url` data URLs.

use serde::{Deserialize, Serialize};

/// Who speaks a message.
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImageUrl {
    /// A data URL or an http(s) URL.
    pub url: String,
    /// Optional detail hint (`low` | `high` | `auto`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// A message's content: plain text or a multimodal array.
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
    pub fn new(role: Role, text: impl Into<String>) -> Self {
        Self {
            role,
            content: Content::Text(text.into()),
        }
    }

    /// A system message.
    pub fn system(text: impl Into<String>) -> Self {
        Self::new(Role::System, text)
    }

    /// A user message.
    pub fn user(text: impl Into<String>) -> Self {
        Self::new(Role::User, text)
    }

    /// An assistant message.
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
