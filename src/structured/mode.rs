//! How one attempt tells the model the schema of a typed call (docs/behaviour.md §9.2 step 1, "prevent").
//!
//! A scope may mix providers: one accepts strict `json_schema`, another only `json_object`,
//! a third nothing at all. The schema therefore travels with the wire request as a
//! [`SchemaRequest`], and the transport of the source an attempt goes to — which knows its
//! provider — sends it in the strongest [`StructuredMode`] that provider supports. Every ask,
//! the first included, tells the model the schema one way or another.

use std::borrow::Cow;

use schemars::JsonSchema;
use serde_json::Value;

use super::schema::{json_schema_format, schema_name, strict_schema};
use crate::types::{Content, Message, Role};

/// The strongest way a provider can be held to a JSON Schema.
///
/// ```
/// use polygateway::provider::ProviderRegistry;
/// use polygateway::structured::StructuredMode;
/// let registry = ProviderRegistry::with_defaults();
/// assert_eq!(registry.get("openai").structured_mode(), StructuredMode::JsonSchema);
/// assert_eq!(registry.get("deepseek").structured_mode(), StructuredMode::JsonObject);
/// assert_eq!(registry.get("some-proxy").structured_mode(), StructuredMode::Prompt);
/// assert_eq!(StructuredMode::JsonObject.as_str(), "json_object");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum StructuredMode {
    /// `response_format: {"type": "json_schema", "strict": true, …}`: the provider enforces it.
    JsonSchema,
    /// `response_format: {"type": "json_object"}` (valid JSON guaranteed) plus the schema in the
    /// prompt.
    JsonObject,
    /// The schema in the prompt only.
    Prompt,
}

impl StructuredMode {
    /// The name used in cache-key material and logs.
    ///
    /// ```
    /// use polygateway::structured::StructuredMode;
    /// assert_eq!(StructuredMode::JsonSchema.as_str(), "json_schema");
    /// assert_eq!(StructuredMode::Prompt.as_str(), "prompt");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            StructuredMode::JsonSchema => "json_schema",
            StructuredMode::JsonObject => "json_object",
            StructuredMode::Prompt => "prompt",
        }
    }

    /// Every mode, strongest first (the order a source falls back through, and the values
    /// `STRUCTURED_MODE` accepts).
    pub(crate) const ALL: [StructuredMode; 3] = [
        StructuredMode::JsonSchema,
        StructuredMode::JsonObject,
        StructuredMode::Prompt,
    ];

    /// The next weaker mode, `None` for [`StructuredMode::Prompt`] (nothing is left to drop:
    /// the prompt alone needs nothing from the server).
    pub(crate) fn weaker(self) -> Option<StructuredMode> {
        match self {
            StructuredMode::JsonSchema => Some(StructuredMode::JsonObject),
            StructuredMode::JsonObject => Some(StructuredMode::Prompt),
            StructuredMode::Prompt => None,
        }
    }
}

/// The schema a typed call asks for, carried by the request to every attempt.
///
/// ```
/// use polygateway::structured::{SchemaRequest, StructuredMode};
/// use polygateway::Message;
/// #[derive(schemars::JsonSchema)]
/// struct City {
///     name: String,
/// }
/// let schema = SchemaRequest::of::<City>();
/// let question = vec![Message::user("Largest city of Norway?")];
/// // Strict mode: the provider gets the schema in `response_format`; the prompt is unchanged.
/// let (messages, format) = schema.for_mode(StructuredMode::JsonSchema, &question);
/// assert_eq!(format.unwrap()["json_schema"]["name"], "City");
/// assert_eq!(messages, &question[..]);
/// // JSON mode: valid JSON is enforced, the schema goes into a system message.
/// let (messages, format) = schema.for_mode(StructuredMode::JsonObject, &question);
/// assert_eq!(format.unwrap()["type"], "json_object");
/// assert!(messages[0].text().contains(r#""name""#));
/// assert_eq!(messages[1], question[0]);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct SchemaRequest {
    /// The schema's name in `response_format` (sanitised).
    pub name: String,
    /// The strict-mode JSON Schema ([`strict_schema`]).
    pub schema: Value,
}

impl SchemaRequest {
    /// The request for `T`.
    ///
    /// ```
    /// use polygateway::structured::{strict_schema, SchemaRequest};
    /// #[derive(schemars::JsonSchema)]
    /// struct Invoice {
    ///     total: u64,
    /// }
    /// let request = SchemaRequest::of::<Invoice>();
    /// assert_eq!(request.name, "Invoice");
    /// assert_eq!(request.schema, strict_schema::<Invoice>());
    /// ```
    pub fn of<T: JsonSchema>() -> Self {
        Self {
            name: schema_name::<T>(),
            schema: strict_schema::<T>(),
        }
    }

    /// The request for a JSON Schema known only at run time (e.g. pydantic's
    /// `model_json_schema()`), given the same strict-mode transform and name sanitising as
    /// [`SchemaRequest::of`].
    ///
    /// ```
    /// use polygateway::structured::SchemaRequest;
    /// use serde_json::json;
    /// let request = SchemaRequest::from_schema(
    ///     "City answer",
    ///     json!({
    ///         "$schema": "https://json-schema.org/draft/2020-12/schema",
    ///         "type": "object",
    ///         "properties": {"name": {"type": "string"}, "population": {"type": "integer"}},
    ///         "required": ["name"]
    ///     }),
    /// );
    /// assert_eq!(request.name, "City_answer");
    /// assert_eq!(request.schema["additionalProperties"], false);
    /// assert_eq!(request.schema["required"], json!(["name", "population"]));
    /// assert!(request.schema.get("$schema").is_none());
    /// ```
    pub fn from_schema(name: &str, mut schema: Value) -> Self {
        if let Value::Object(root) = &mut schema {
            root.remove("$schema");
        }
        super::schema::strictify(&mut schema);
        Self {
            name: super::schema::sanitize_name(name),
            schema,
        }
    }

    /// The messages and `response_format` one attempt sends in `mode`. The messages are only
    /// copied when the schema goes into the prompt: appended to a leading text system message,
    /// or as a new system message in front (so there is still one system message, first).
    ///
    /// ```
    /// use polygateway::structured::{SchemaRequest, StructuredMode};
    /// use polygateway::Message;
    /// let request = SchemaRequest { name: "answer".into(), schema: serde_json::json!({"type": "object"}) };
    /// let asked = vec![Message::system("Be brief."), Message::user("2+2?")];
    /// let (messages, format) = request.for_mode(StructuredMode::Prompt, &asked);
    /// assert!(format.is_none());
    /// assert_eq!(messages.len(), 2);
    /// let system = messages[0].text();
    /// assert!(system.starts_with("Be brief.\n\n") && system.contains(r#"{"type":"object"}"#));
    /// ```
    pub fn for_mode<'a>(
        &self,
        mode: StructuredMode,
        messages: &'a [Message],
    ) -> (Cow<'a, [Message]>, Option<Value>) {
        match mode {
            StructuredMode::JsonSchema => (
                Cow::Borrowed(messages),
                Some(json_schema_format(&self.name, &self.schema)),
            ),
            StructuredMode::JsonObject => (
                Cow::Owned(self.prompted(messages)),
                Some(super::schema::json_object_format()),
            ),
            StructuredMode::Prompt => (Cow::Owned(self.prompted(messages)), None),
        }
    }

    /// The instruction that carries the schema in the prompt (it names JSON, as OpenAI's
    /// `json_object` mode requires).
    fn instruction(&self) -> String {
        format!(
            "Reply with only a JSON value (no prose, no code fences) that matches this JSON Schema:\n{}",
            self.schema
        )
    }

    fn prompted(&self, messages: &[Message]) -> Vec<Message> {
        let instruction = self.instruction();
        let mut out = messages.to_vec();
        match out.first_mut() {
            Some(Message {
                role: Role::System,
                content: Some(Content::Text(text)),
                ..
            }) => {
                text.push_str("\n\n");
                text.push_str(&instruction);
            }
            _ => out.insert(0, Message::system(instruction)),
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn request() -> SchemaRequest {
        SchemaRequest {
            name: "n".into(),
            schema: json!({"type": "object", "properties": {"a": {"type": "integer"}}}),
        }
    }

    #[test]
    fn every_mode_tells_the_model_the_schema() {
        let asked = vec![Message::user("q")];
        for mode in [
            StructuredMode::JsonSchema,
            StructuredMode::JsonObject,
            StructuredMode::Prompt,
        ] {
            let (messages, format) = request().for_mode(mode, &asked);
            let in_format = format
                .as_ref()
                .is_some_and(|f| f["json_schema"]["schema"] == request().schema);
            let in_prompt = messages
                .iter()
                .any(|m| m.text().contains(&request().schema.to_string()));
            assert!(in_format ^ in_prompt, "{mode:?}: {messages:?} {format:?}");
            assert_eq!(messages.last(), asked.last(), "{mode:?}");
        }
    }

    #[test]
    fn a_multimodal_system_message_is_left_alone() {
        let system = Message::with_content(Role::System, Content::Parts(Vec::new()));
        let asked = [system.clone()];
        let (messages, _) = request().for_mode(StructuredMode::Prompt, &asked);
        assert_eq!(messages.len(), 2);
        assert_eq!(messages[1], system);
        assert_eq!(messages[0].role, Role::System);
    }
}
