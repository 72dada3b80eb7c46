//! A chat answer ([`LlmResponse`]) as OpenAI's `chat.completion` object and its `usage`.
//!
//! The objects are written straight from the answer ([`Completion`], [`UsageJson`]): the server
//! serializes them into its response body without building a `serde_json::Value` tree first.
//! Their fields are declared in alphabetical order, the order a `Value` object (a sorted map)
//! writes its keys, so the bytes are those the tree gave; `completion_json` and `usage_json`
//! (batch output lines, the SSE usage chunk) are the same objects as trees.

use serde::Serialize;
use serde_json::Value;

use crate::types::{Choice, FunctionCall, LlmResponse, ToolCall};

/// OpenAI's `usage` object of an answer.
#[derive(Serialize)]
pub(crate) struct UsageJson {
    completion_tokens: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    completion_tokens_details: Option<ReasoningTokens>,
    prompt_tokens: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_tokens_details: Option<CachedTokens>,
    total_tokens: u64,
}

#[derive(Serialize)]
struct ReasoningTokens {
    reasoning_tokens: u64,
}

#[derive(Serialize)]
struct CachedTokens {
    cached_tokens: u64,
}

impl UsageJson {
    pub(crate) fn of(r: &LlmResponse) -> Self {
        Self {
            completion_tokens: r.completion_tokens,
            completion_tokens_details: r
                .reasoning_tokens
                .map(|reasoning_tokens| ReasoningTokens { reasoning_tokens }),
            prompt_tokens: r.prompt_tokens,
            prompt_tokens_details: r
                .cached_prompt_tokens
                .map(|cached_tokens| CachedTokens { cached_tokens }),
            total_tokens: r.prompt_tokens + r.completion_tokens,
        }
    }
}

/// OpenAI's `usage` object of an answer, as a tree (the server's last SSE chunk).
#[cfg(feature = "server")]
pub(crate) fn usage_json(r: &LlmResponse) -> Value {
    tree(&UsageJson::of(r))
}

/// The assistant message of one choice, as OpenAI writes it: `content` is `null` beside tool
/// calls, a function call or a refusal when there is no text; `refusal` is always present.
/// Tool calls and a function call are written as trees (rare, and a tree sorts their keys as
/// before).
#[derive(Serialize)]
struct MessageJson<'a> {
    content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    function_call: Option<Value>,
    #[serde(skip_serializing_if = "str::is_empty")]
    reasoning_content: &'a str,
    refusal: Option<&'a str>,
    role: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls: Option<Value>,
}

impl<'a> MessageJson<'a> {
    fn of(
        content: &'a str,
        thinking: &'a str,
        tool_calls: &[ToolCall],
        function_call: Option<&FunctionCall>,
        refusal: Option<&'a str>,
    ) -> Self {
        let said_otherwise = !tool_calls.is_empty() || function_call.is_some() || refusal.is_some();
        Self {
            content: (!content.is_empty() || !said_otherwise).then_some(content),
            function_call: function_call.map(tree),
            reasoning_content: thinking,
            refusal,
            role: "assistant",
            tool_calls: (!tool_calls.is_empty()).then(|| tree(&tool_calls)),
        }
    }
}

/// One choice of a `chat.completion`: the upstream's `finish_reason` (`stop` when it gave none).
#[derive(Serialize)]
struct ChoiceJson<'a> {
    finish_reason: &'a str,
    index: u32,
    logprobs: &'a Option<Value>,
    message: MessageJson<'a>,
}

impl<'a> ChoiceJson<'a> {
    fn first(r: &'a LlmResponse) -> Self {
        Self {
            finish_reason: r.finish_reason.as_deref().unwrap_or("stop"),
            index: 0,
            logprobs: &r.logprobs,
            message: MessageJson::of(
                &r.content,
                &r.thinking,
                &r.tool_calls,
                r.function_call.as_ref(),
                r.refusal.as_deref(),
            ),
        }
    }

    fn other(c: &'a Choice) -> Self {
        Self {
            finish_reason: c.finish_reason.as_deref().unwrap_or("stop"),
            index: c.index,
            logprobs: &c.logprobs,
            message: MessageJson::of(
                &c.content,
                &c.thinking,
                &c.tool_calls,
                c.function_call.as_ref(),
                c.refusal.as_deref(),
            ),
        }
    }
}

/// The `chat.completion` body of an answer: every choice, `usage` and `system_fingerprint`.
/// `model` is what the caller asked for (a scope name or alias), not the source's model.
#[derive(Serialize)]
pub(crate) struct Completion<'a> {
    choices: Vec<ChoiceJson<'a>>,
    created: u64,
    id: &'a str,
    model: &'a str,
    object: &'static str,
    system_fingerprint: Option<&'a str>,
    usage: UsageJson,
}

impl<'a> Completion<'a> {
    pub(crate) fn of(id: &'a str, model: &'a str, created: u64, r: &'a LlmResponse) -> Self {
        let mut choices = Vec::with_capacity(1 + r.other_choices.len());
        choices.push(ChoiceJson::first(r));
        choices.extend(r.other_choices.iter().map(ChoiceJson::other));
        Self {
            choices,
            created,
            id,
            model,
            object: "chat.completion",
            system_fingerprint: r.system_fingerprint.as_deref(),
            usage: UsageJson::of(r),
        }
    }
}

/// The `chat.completion` body of answer `r` as a tree (batch output lines).
pub(crate) fn completion_json(id: &str, model: &str, created: u64, r: &LlmResponse) -> Value {
    tree(&Completion::of(id, model, created, r))
}

/// `value` as a tree; these objects are maps of strings, numbers and trees, which always convert.
fn tree(value: &impl Serialize) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

/// Seconds since the Unix epoch, for `created`.
pub(crate) fn now_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_call_answer_has_null_content_and_its_finish_reason() {
        let mut r = LlmResponse::new("");
        r.tool_calls = vec![ToolCall::function("call_0", "lookup", "{}")];
        r.finish_reason = Some("tool_calls".into());
        let body = completion_json("chatcmpl-1", "LLM", 7, &r);
        assert_eq!(body["choices"][0]["message"]["content"], Value::Null);
        assert_eq!(body["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(body["object"], "chat.completion");
        assert_eq!(body["usage"]["total_tokens"], 0);
    }

    /// The server writes `Completion` straight into its body: the bytes must be those of the
    /// tree (`completion_json`), whose keys a sorted map orders, with every optional part there.
    #[test]
    fn the_direct_body_is_the_tree_byte_for_byte() {
        let mut r = LlmResponse::new("");
        r.thinking = "hmm".into();
        r.tool_calls = vec![ToolCall::function("call_0", "lookup", "{}")];
        r.function_call = Some(FunctionCall {
            name: "f".into(),
            arguments: "{}".into(),
        });
        r.refusal = Some("no".into());
        r.logprobs = Some(serde_json::json!({"content": [{"token": "a", "logprob": -0.1}]}));
        r.system_fingerprint = Some("fp".into());
        r.prompt_tokens = 3;
        r.completion_tokens = 4;
        r.cached_prompt_tokens = Some(1);
        r.reasoning_tokens = Some(2);
        r.other_choices = vec![Choice {
            index: 1,
            content: "second".into(),
            finish_reason: Some("length".into()),
            ..Choice::default()
        }];
        for r in [r, LlmResponse::new("plain")] {
            let direct =
                serde_json::to_string(&Completion::of("chatcmpl-1", "LLM", 7, &r)).unwrap();
            let tree = completion_json("chatcmpl-1", "LLM", 7, &r).to_string();
            assert_eq!(direct, tree);
        }
    }
}
