//! A client's request body in one source dialect, kept beside the canonical call it was
//! translated to (the Messages ingress, docs/behaviour.md §12.5): what a source of that dialect
//! is sent instead of the canonical call's translation. In `types` because the call's options
//! carry it from the server to the transport.

use std::sync::Arc;

use serde_json::{Map, Value};

/// A client's request body in one source dialect, kept beside its canonical translation so
/// that a source speaking that dialect gets what the client wrote — fields and blocks the
/// canonical model does not carry (`cache_control` anywhere, unknown block types, new top-level
/// keys) included — with only `model` and `stream` set by the gateway.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct NativeBody {
    /// The dialect the body is written in.
    pub(crate) dialect: super::dialect::Dialect,
    /// The body (a JSON object), shared between attempts without copying.
    pub(crate) body: Arc<Map<String, Value>>,
    /// The client's `anthropic-beta` header, if any (sent on as the same header).
    pub(crate) beta: Option<String>,
}

impl NativeBody {
    /// The body for one attempt on a source of this dialect serving `model`: the client's body,
    /// `model` replaced, `stream: true` when the attempt streams and no `stream` key otherwise.
    /// The one thing taken out is the gateway's own: the `provider_specific_fields` the
    /// Messages ingress puts on a `tool_use` block of another dialect's source (a Gemini
    /// signature), which Anthropic's API would refuse when the conversation moves to it.
    pub(crate) fn for_source(&self, model: &str, stream: bool) -> Map<String, Value> {
        let mut body = (*self.body).clone();
        let blocks = body
            .get_mut("messages")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
            .filter_map(|turn| turn.get_mut("content").and_then(Value::as_array_mut))
            .flatten();
        for block in blocks {
            if block["type"] == "tool_use" {
                if let Some(block) = block.as_object_mut() {
                    block.remove("provider_specific_fields");
                }
            }
        }
        body.insert("model".into(), Value::String(model.to_owned()));
        body.remove("stream");
        if stream {
            body.insert("stream".into(), Value::Bool(true));
        }
        body
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_native_body_changes_only_model_stream_and_the_gateways_own_fields() {
        let body = json!({"model": "LLM", "stream": false, "x_new": [1, {"a": null}],
            "messages": [
                {"role": "user", "content": [{"type": "search_result", "source": "s"}]},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "w",
                    "input": {}, "provider_specific_fields": {"thought_signature": "g"}}]}]});
        let native = NativeBody {
            dialect: crate::types::dialect::Dialect::Anthropic,
            body: Arc::new(body.as_object().unwrap().clone()),
            beta: None,
        };
        let mut expected = body.clone();
        expected["model"] = json!("claude");
        expected["stream"] = json!(true);
        expected["messages"][1]["content"][0]
            .as_object_mut()
            .unwrap()
            .remove("provider_specific_fields");
        assert_eq!(Value::Object(native.for_source("claude", true)), expected);
        expected.as_object_mut().unwrap().remove("stream");
        assert_eq!(Value::Object(native.for_source("claude", false)), expected);
    }
}
