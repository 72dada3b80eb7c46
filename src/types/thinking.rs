//! A model's thinking as blocks, with the signatures that let it be sent back.
//!
//! Anthropic's extended thinking (and Gemini's thought signatures) hand back, beside the answer,
//! blocks of reasoning that must be replayed verbatim in the next turn of a tool loop: the
//! provider checks the signature and refuses a conversation whose thinking was altered. An
//! answer's blocks are on [`LlmResponse::thinking_blocks`](crate::LlmResponse::thinking_blocks);
//! [`LlmResponse::to_message`](crate::LlmResponse::to_message) puts them on the assistant turn a
//! tool loop replays. Dialects that cannot take them back (OpenAI chat) drop them on the way out
//! (docs/behaviour.md §7.5).

use serde::{Deserialize, Serialize};

/// One block of a model's thinking, in the shape Anthropic's Messages API uses (and LiteLLM's
/// `thinking_blocks` field on OpenAI-shaped messages).
///
/// ```
/// use polygateway::ThinkingBlock;
/// let block = ThinkingBlock::Thinking {
///     thinking: "The user wants the weather; call the tool.".into(),
///     signature: Some("EqQBCgIYAhIM...".into()),
/// };
/// let json = serde_json::to_value(&block).unwrap();
/// assert_eq!(json["type"], "thinking");
/// assert_eq!(json["signature"], "EqQBCgIYAhIM...");
/// // Redacted thinking is opaque: only its encrypted data goes back.
/// let redacted: ThinkingBlock =
///     serde_json::from_value(serde_json::json!({"type": "redacted_thinking", "data": "EmwKAhgB"})).unwrap();
/// assert_eq!(redacted, ThinkingBlock::Redacted { data: "EmwKAhgB".into() });
/// assert_eq!(block.text(), "The user wants the weather; call the tool.");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum ThinkingBlock {
    /// Readable thinking and its signature (`None` when the provider signs nothing).
    #[serde(rename = "thinking")]
    Thinking {
        /// The thinking text.
        thinking: String,
        /// The provider's signature over the block, sent back unchanged.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
    },
    /// Thinking the provider's safety systems encrypted: opaque, replayed as it came.
    #[serde(rename = "redacted_thinking")]
    Redacted {
        /// The encrypted thinking.
        data: String,
    },
}

impl ThinkingBlock {
    /// The readable text of the block (empty for redacted thinking).
    ///
    /// ```
    /// use polygateway::ThinkingBlock;
    /// assert_eq!(ThinkingBlock::Redacted { data: "x".into() }.text(), "");
    /// ```
    pub fn text(&self) -> &str {
        match self {
            ThinkingBlock::Thinking { thinking, .. } => thinking,
            ThinkingBlock::Redacted { .. } => "",
        }
    }
}
