//! Provider quirks applied to a request's messages on the way out (docs/behaviour.md §7.2): the
//! caller's conversation is kept as written, and each attempt sends what the source's provider
//! accepts. The common case (no quirk applies) borrows the messages and copies nothing.

use std::borrow::Cow;

use crate::provider::ProviderProfile;
use crate::types::{Content, Message, Role};

/// `messages` as `profile`'s provider must receive them.
pub(crate) fn adapt<'a>(
    profile: &ProviderProfile,
    messages: Cow<'a, [Message]>,
) -> Cow<'a, [Message]> {
    if !messages.iter().any(|m| needs_change(profile, m)) {
        return messages;
    }
    let mut owned = messages.into_owned();
    for message in owned.iter_mut() {
        if !profile.developer_role && message.role == Role::Developer {
            message.role = Role::System;
        }
        if empty_content_wanted(profile, message) {
            message.content = Some(Content::Text(String::new()));
        }
        // OpenAI's chat API has no thinking blocks (a reasoning model's thinking is not sent
        // back there): a turn answered earlier by an Anthropic or Gemini source loses them.
        message.thinking_blocks.clear();
    }
    Cow::Owned(owned)
}

fn needs_change(profile: &ProviderProfile, message: &Message) -> bool {
    (!profile.developer_role && message.role == Role::Developer)
        || empty_content_wanted(profile, message)
        || !message.thinking_blocks.is_empty()
}

fn empty_content_wanted(profile: &ProviderProfile, message: &Message) -> bool {
    profile.empty_content_beside_tool_calls
        && message.content.is_none()
        && (message.tool_calls.is_some() || message.function_call.is_some())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::{ProviderRegistry, ReasoningForm, ThinkingForm};
    use crate::types::ToolCall;
    use serde_json::json;

    fn conversation() -> Vec<Message> {
        vec![
            Message::developer("Use tools."),
            Message::user("weather?"),
            Message::assistant_tool_calls(vec![ToolCall::function("c1", "weather", "{}")]),
            Message::tool_result("c1", "sunny"),
        ]
    }

    #[test]
    fn thinking_blocks_are_left_out_of_openai_chat() {
        let registry = ProviderRegistry::with_defaults();
        let mut turn = Message::assistant("It is sunny.");
        turn.thinking_blocks
            .push(crate::types::ThinkingBlock::Thinking {
                thinking: "Check the tool result.".into(),
                signature: Some("sig".into()),
            });
        let messages = vec![Message::user("weather?"), turn];
        let sent = adapt(registry.get("openai"), Cow::Borrowed(&messages));
        assert!(matches!(sent, Cow::Owned(_)));
        assert!(sent.iter().all(|m| m.thinking_blocks.is_empty()));
        assert_eq!(sent[1].content, messages[1].content);
        let json = serde_json::to_value(&sent[1]).unwrap();
        assert!(json.get("thinking_blocks").is_none());
    }

    #[test]
    fn openai_and_unknown_providers_get_the_messages_as_written_without_a_copy() {
        let registry = ProviderRegistry::with_defaults();
        let messages = conversation();
        for name in ["openai", "not-in-the-registry"] {
            let sent = adapt(registry.get(name), Cow::Borrowed(&messages));
            assert!(matches!(sent, Cow::Borrowed(_)), "{name}");
        }
    }

    #[test]
    fn a_provider_without_the_developer_role_gets_it_as_system() {
        let registry = ProviderRegistry::with_defaults();
        let messages = conversation();
        let sent = adapt(registry.get("qwen"), Cow::Borrowed(&messages));
        let json = serde_json::to_value(sent.as_ref()).unwrap();
        assert_eq!(json[0], json!({"role": "system", "content": "Use tools."}));
        // Everything else is untouched, including the null content beside tool calls.
        assert_eq!(json[1], serde_json::to_value(&messages[1]).unwrap());
        assert!(json[2]["content"].is_null());
        assert_eq!(json[3], serde_json::to_value(&messages[3]).unwrap());
    }

    #[test]
    fn a_provider_that_wants_empty_content_beside_tool_calls_gets_it() {
        let profile = ProviderProfile::new("mlx", ThinkingForm::None, ReasoningForm::Both, true)
            .with_empty_content_beside_tool_calls();
        let messages = conversation();
        let sent = adapt(&profile, Cow::Borrowed(&messages));
        let json = serde_json::to_value(sent.as_ref()).unwrap();
        assert_eq!(json[2]["content"], "");
        assert_eq!(json[2]["tool_calls"][0]["id"], "c1");
        // The developer role is this profile's to keep.
        assert_eq!(json[0]["role"], "developer");
        // An assistant turn with text keeps it.
        let mut with_text = messages[2].clone();
        with_text.content = Some(Content::Text("Checking.".into()));
        let sent = adapt(&profile, Cow::Owned(vec![with_text]));
        assert_eq!(
            serde_json::to_value(sent.as_ref()).unwrap()[0]["content"],
            "Checking."
        );
    }
}
