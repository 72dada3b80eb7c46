//! A chat answer ([`LlmResponse`]) as OpenAI's `chat.completion` object and its `usage`.

use serde_json::{json, Value};

use crate::types::{FunctionCall, LlmResponse, ToolCall};

/// OpenAI's `usage` object of an answer.
pub(crate) fn usage_json(r: &LlmResponse) -> Value {
    let mut usage = json!({
        "prompt_tokens": r.prompt_tokens,
        "completion_tokens": r.completion_tokens,
        "total_tokens": r.prompt_tokens + r.completion_tokens,
    });
    if let Some(cached) = r.cached_prompt_tokens {
        usage["prompt_tokens_details"] = json!({"cached_tokens": cached});
    }
    if let Some(reasoning) = r.reasoning_tokens {
        usage["completion_tokens_details"] = json!({"reasoning_tokens": reasoning});
    }
    usage
}

/// The assistant message of one choice, as OpenAI writes it: `content` is `null` beside tool
/// calls, a function call or a refusal when there is no text; `refusal` is always present.
fn message_json(
    content: &str,
    thinking: &str,
    tool_calls: &[ToolCall],
    function_call: Option<&FunctionCall>,
    refusal: Option<&str>,
) -> Value {
    let said_otherwise = !tool_calls.is_empty() || function_call.is_some() || refusal.is_some();
    let content = if content.is_empty() && said_otherwise {
        Value::Null
    } else {
        json!(content)
    };
    let mut message = json!({"role": "assistant", "content": content, "refusal": refusal});
    if !thinking.is_empty() {
        message["reasoning_content"] = json!(thinking);
    }
    if !tool_calls.is_empty() {
        message["tool_calls"] = json!(tool_calls);
    }
    if let Some(call) = function_call {
        message["function_call"] = json!(call);
    }
    message
}

/// The `chat.completion` body of answer `r`: every choice, the upstream's `finish_reason`
/// (`stop` when it gave none), `usage` and `system_fingerprint`. `model` is what the caller
/// asked for (a scope name or alias), not the source's model.
pub(crate) fn completion_json(id: &str, model: &str, created: u64, r: &LlmResponse) -> Value {
    let first = json!({
        "index": 0,
        "message": message_json(&r.content, &r.thinking, &r.tool_calls, r.function_call.as_ref(),
            r.refusal.as_deref()),
        "logprobs": r.logprobs,
        "finish_reason": r.finish_reason.as_deref().unwrap_or("stop"),
    });
    let others = r.other_choices.iter().map(|c| {
        json!({
            "index": c.index,
            "message": message_json(&c.content, &c.thinking, &c.tool_calls,
                c.function_call.as_ref(), c.refusal.as_deref()),
            "logprobs": c.logprobs,
            "finish_reason": c.finish_reason.as_deref().unwrap_or("stop"),
        })
    });
    let choices: Vec<Value> = std::iter::once(first).chain(others).collect();
    json!({
        "id": id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": choices,
        "usage": usage_json(r),
        "system_fingerprint": r.system_fingerprint,
    })
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
}
