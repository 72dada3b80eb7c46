//! Property: a conversation survives every dialect the gateway translates between — OpenAI chat
//! (the canonical `Message` as the OpenAI codec sends and the chat ingress reads it) ⇄ canonical
//! ⇄ Anthropic Messages (the source codec's request builder, read back by the `/v1/messages`
//! ingress) ⇄ canonical ⇄ Responses (assistant turns written by the `/v1/responses` ingress's own
//! output renderer, read back by its input reader) — with nothing lost that both ends can say:
//! roles and order, text, tool calls (ids, names, arguments as JSON), tool results and their
//! ids, and, where both ends carry them (chat and Anthropic), thinking blocks with their
//! signatures and redacted blocks. Responses input has no signed reasoning, so thinking is not
//! compared after that leg (its reasoning items are dropped, docs/behaviour.md §12.6).

use proptest::prelude::*;
use serde_json::{json, Map, Value};

use crate::transport::dialect::anthropic::request::build;
use crate::types::{Content, ContentPart, LlmResponse, Message, Role, ThinkingBlock, ToolCall};

/// What a message says, in a form every dialect can be compared in.
#[derive(Debug, Clone, PartialEq)]
struct View {
    role: Role,
    text: String,
    calls: Vec<(String, String, Value)>,
    tool_call_id: Option<String>,
    thinking: Vec<ThinkingBlock>,
}

fn text_of(m: &Message) -> String {
    match &m.content {
        None => String::new(),
        Some(Content::Text(t)) => t.clone(),
        Some(Content::Parts(parts)) => parts
            .iter()
            .map(|p| match p {
                ContentPart::Text { text } => text.clone(),
                other => panic!("a part no generator made: {other:?}"),
            })
            .collect(),
    }
}

fn view(m: &Message, with_thinking: bool) -> View {
    View {
        // A system prompt is a system prompt whichever role name carried it.
        role: if m.role == Role::Developer {
            Role::System
        } else {
            m.role
        },
        text: text_of(m),
        calls: m
            .tool_calls
            .iter()
            .flatten()
            .map(|c| {
                let args: Value = serde_json::from_str(&c.function.arguments).unwrap();
                (c.id.clone(), c.function.name.clone(), args)
            })
            .collect(),
        tool_call_id: m.tool_call_id.clone(),
        thinking: if with_thinking {
            m.thinking_blocks.clone()
        } else {
            Vec::new()
        },
    }
}

fn views(ms: &[Message], with_thinking: bool) -> Vec<View> {
    ms.iter().map(|m| view(m, with_thinking)).collect()
}

fn text() -> impl Strategy<Value = String> {
    "[a-zA-Z][a-zA-Z0-9 ,.!?'\"éß漢😀{}:\\\\-]{0,20}"
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        text().prop_map(Value::String),
        any::<i32>().prop_map(|n| json!(n)),
        any::<bool>().prop_map(Value::Bool),
        Just(Value::Null),
    ];
    leaf.prop_recursive(2, 8, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            prop::collection::btree_map("[a-z]{1,6}", inner, 0..3)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn arguments() -> impl Strategy<Value = String> {
    prop::collection::btree_map("[a-z_]{1,8}", json_value(), 0..4)
        .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>()).to_string())
}

fn thinking_block() -> impl Strategy<Value = ThinkingBlock> {
    prop_oneof![
        3 => (text(), "[A-Za-z0-9+/=]{8,40}").prop_map(|(thinking, sig)| ThinkingBlock::Thinking {
            thinking,
            signature: Some(sig),
        }),
        1 => "[A-Za-z0-9+/=]{8,40}".prop_map(|data| ThinkingBlock::Redacted { data }),
    ]
}

/// One exchange: the user's text, the assistant's turn (thinking, text, calls), a result for
/// each call.
#[derive(Debug, Clone)]
struct Round {
    user: String,
    thinking: Vec<ThinkingBlock>,
    answer: Option<String>,
    calls: Vec<(String, String, String)>,
}

fn round() -> impl Strategy<Value = Round> {
    (
        text(),
        prop::collection::vec(thinking_block(), 0..3),
        prop::option::of(text()),
        prop::collection::vec(("[a-z][a-z_]{0,10}", arguments(), text()), 0..3),
    )
        .prop_filter("an assistant turn says something", |(_, _, a, c)| {
            a.is_some() || !c.is_empty()
        })
        .prop_map(|(user, thinking, answer, calls)| Round {
            user,
            thinking,
            answer,
            calls,
        })
}

fn conversation() -> impl Strategy<Value = Vec<Message>> {
    (
        prop::option::of(text()),
        prop::collection::vec(round(), 1..4),
        text(),
    )
        .prop_map(|(system, rounds, last)| {
            let mut ms: Vec<Message> = system.map(Message::system).into_iter().collect();
            for (r, round) in rounds.into_iter().enumerate() {
                ms.push(Message::user(round.user));
                let calls: Vec<ToolCall> = round
                    .calls
                    .iter()
                    .enumerate()
                    .map(|(i, (name, args, _))| {
                        ToolCall::function(format!("call_{r}_{i}"), name.clone(), args.clone())
                    })
                    .collect();
                let mut turn = Message::with_content(
                    Role::Assistant,
                    Content::Text(round.answer.unwrap_or_default()),
                );
                if text_of(&turn).is_empty() {
                    turn.content = None;
                }
                if !calls.is_empty() {
                    turn.tool_calls = Some(calls.clone());
                }
                turn.thinking_blocks = round.thinking;
                ms.push(turn);
                for (call, (_, _, result)) in calls.iter().zip(&round.calls) {
                    ms.push(Message::tool_result(call.id.clone(), result.clone()));
                }
            }
            ms.push(Message::user(last));
            ms
        })
}

/// Canonical → OpenAI chat JSON → canonical.
fn via_chat(ms: &[Message]) -> Vec<Message> {
    let wire = serde_json::to_string(ms).unwrap();
    serde_json::from_str(&wire).unwrap()
}

/// Canonical → the Anthropic source codec's body → the Messages ingress → canonical.
fn via_anthropic(ms: &[Message]) -> Vec<Message> {
    let built = build("claude-test", ms, Map::new(), false, None, None).unwrap();
    let body: Value = serde_json::from_slice(&built.body).unwrap();
    super::messages::to_canonical(&body)
        .unwrap_or_else(|e| panic!("{}: {body}", e.message))
        .messages
}

/// Canonical → Responses input items (assistant turns by the Responses ingress's own output
/// renderer) → the Responses ingress → canonical.
fn via_responses(ms: &[Message]) -> Vec<Message> {
    let mut items = Vec::new();
    for (i, m) in ms.iter().enumerate() {
        match m.role {
            Role::System | Role::Developer | Role::User => {
                let (role, kind) = match m.role {
                    Role::User => ("user", "input_text"),
                    Role::Developer => ("developer", "input_text"),
                    _ => ("system", "input_text"),
                };
                items.push(json!({"type": "message", "role": role,
                    "content": [{"type": kind, "text": text_of(m)}]}));
            }
            Role::Assistant => {
                let mut answer = LlmResponse::new(text_of(m));
                answer.tool_calls = m.tool_calls.clone().unwrap_or_default();
                answer.thinking = m
                    .thinking_blocks
                    .iter()
                    .filter_map(|b| match b {
                        ThinkingBlock::Thinking { thinking, .. } => Some(thinking.as_str()),
                        ThinkingBlock::Redacted { .. } => None,
                    })
                    .collect();
                items.extend(super::responses::output_items(&i.to_string(), &answer));
            }
            Role::Tool => items.push(json!({"type": "function_call_output",
                "call_id": m.tool_call_id, "output": text_of(m)})),
        }
    }
    let req = json!({"model": "m", "input": items});
    super::responses::to_canonical(&req)
        .unwrap_or_else(|e| panic!("{}: {req}", e.message))
        .messages
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn conversations_survive_chat_anthropic_and_responses(ms in conversation()) {
        let chat = via_chat(&ms);
        prop_assert_eq!(&chat, &ms);
        let anthropic = via_anthropic(&chat);
        prop_assert_eq!(views(&anthropic, true), views(&ms, true));
        let responses = via_responses(&anthropic);
        prop_assert_eq!(views(&responses, false), views(&ms, false));
        // And back: Responses → canonical → Anthropic → canonical → chat.
        let again = via_chat(&via_anthropic(&responses));
        prop_assert_eq!(views(&again, false), views(&ms, false));
    }
}
