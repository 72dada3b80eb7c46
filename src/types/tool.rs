//! Function calling in the OpenAI shape: the tools a request offers ([`Tool`], [`ToolChoice`]) and
//! the calls an answer makes ([`ToolCall`], [`FunctionCall`]).
//!
//! A call's `arguments` are kept as the exact string the model produced: never parsed, repaired
//! or reordered (a model may produce invalid JSON; the caller decides what to do with it).

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

/// The function a tool call names, with its arguments as the model wrote them.
///
/// ```
/// use polygateway::FunctionCall;
/// let call = FunctionCall { name: "get_weather".into(), arguments: r#"{"city": "Paris"}"#.into() };
/// // The arguments stay a string on the wire, as OpenAI sends them.
/// assert_eq!(
///     serde_json::to_value(&call).unwrap(),
///     serde_json::json!({"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"})
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct FunctionCall {
    /// The function's name.
    #[serde(default)]
    pub name: String,
    /// The arguments, the exact string the model produced (usually JSON, not guaranteed).
    #[serde(default)]
    pub arguments: String,
}

/// One tool call of an assistant message or answer.
///
/// ```
/// use polygateway::ToolCall;
/// let call = ToolCall::function("call_1", "get_weather", r#"{"city":"Paris"}"#);
/// let json = serde_json::to_value(&call).unwrap();
/// assert_eq!(json["type"], "function");
/// assert_eq!(json["function"]["arguments"], r#"{"city":"Paris"}"#);
/// // Fields this type does not model survive a round trip.
/// let raw = serde_json::json!({"id": "c", "type": "function",
///     "function": {"name": "f", "arguments": "{}"}, "cache_hint": 3});
/// let back: ToolCall = serde_json::from_value(raw.clone()).unwrap();
/// assert_eq!(serde_json::to_value(&back).unwrap(), raw);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The call's id, which the `tool` message answering it repeats as `tool_call_id`.
    #[serde(default)]
    pub id: String,
    /// The tool type; `function` for every tool OpenAI defines today.
    #[serde(rename = "type", default = "function_type")]
    pub kind: String,
    /// The function called.
    #[serde(default)]
    pub function: FunctionCall,
    /// Fields not modelled here, kept as they came.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

fn function_type() -> String {
    "function".into()
}

impl ToolCall {
    /// A function call.
    ///
    /// ```
    /// use polygateway::ToolCall;
    /// let call = ToolCall::function("call_7", "lookup", "{}");
    /// assert_eq!((call.id.as_str(), call.kind.as_str()), ("call_7", "function"));
    /// assert_eq!(call.function.name, "lookup");
    /// ```
    pub fn function(
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Self {
        Self {
            id: id.into(),
            kind: function_type(),
            function: FunctionCall {
                name: name.into(),
                arguments: arguments.into(),
            },
            extra: Map::new(),
        }
    }
}

/// A piece of a tool call as it streams: the first piece of a call carries its `id` and name,
/// the following ones more of its `arguments`. Pieces of one call share its `index`. A piece
/// also carries the fields of the call its source sent and this type does not model, as
/// [`ToolCall::extra`] keeps them (Gemini's thought signature, in
/// `provider_specific_fields.thought_signature`), on the piece they came with.
///
/// ```
/// use polygateway::ToolCallDelta;
/// let pieces = [
///     ToolCallDelta { index: 0, id: Some("call_1".into()), name: Some("f".into()), arguments: "{\"a\"".into(), ..Default::default() },
///     ToolCallDelta { index: 0, arguments: ":1}".into(), ..Default::default() },
/// ];
/// let arguments: String = pieces.iter().map(|p| p.arguments.as_str()).collect();
/// assert_eq!(arguments, "{\"a\":1}");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ToolCallDelta {
    /// Which call of the answer this piece belongs to.
    pub index: u32,
    /// The call's id (first piece).
    pub id: Option<String>,
    /// The function's name (first piece).
    pub name: Option<String>,
    /// More of the arguments string.
    pub arguments: String,
    /// Fields of the call not modelled here, as the source sent them with this piece (merged
    /// into the final response's [`ToolCall::extra`]); usually empty.
    pub extra: Map<String, Value>,
}

/// A tool the model may call (`tools` of a request).
///
/// ```
/// use polygateway::Tool;
/// let tool = Tool::function(
///     "get_weather",
///     "Current weather in a city",
///     serde_json::json!({"type": "object", "properties": {"city": {"type": "string"}}}),
/// );
/// let json = tool.to_json();
/// assert_eq!(json["type"], "function");
/// assert_eq!(json["function"]["name"], "get_weather");
/// assert_eq!(tool.strict(true).to_json()["function"]["strict"], true);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Tool {
    name: String,
    description: Option<String>,
    parameters: Value,
    strict: Option<bool>,
}

impl Tool {
    /// A function tool with a JSON Schema for its arguments.
    ///
    /// ```
    /// use polygateway::Tool;
    /// let tool = Tool::function("now", "The current time", serde_json::json!({"type": "object"}));
    /// assert_eq!(tool.to_json()["function"]["description"], "The current time");
    /// ```
    pub fn function(
        name: impl Into<String>,
        description: impl Into<String>,
        parameters: Value,
    ) -> Self {
        Self {
            name: name.into(),
            description: Some(description.into()).filter(|d: &String| !d.is_empty()),
            parameters,
            strict: None,
        }
    }

    /// Ask for strict schema adherence of the arguments (`function.strict`).
    ///
    /// ```
    /// use polygateway::Tool;
    /// let tool = Tool::function("f", "", serde_json::json!({"type": "object"})).strict(false);
    /// assert_eq!(tool.to_json()["function"]["strict"], false);
    /// // An empty description is left out.
    /// assert!(tool.to_json()["function"].get("description").is_none());
    /// ```
    pub fn strict(mut self, strict: bool) -> Self {
        self.strict = Some(strict);
        self
    }

    /// The tool as the request's `tools` entry.
    ///
    /// ```
    /// use polygateway::Tool;
    /// let json = Tool::function("f", "d", serde_json::json!({})).to_json();
    /// assert_eq!(json["function"]["parameters"], serde_json::json!({}));
    /// ```
    pub fn to_json(&self) -> Value {
        let mut function = Map::new();
        function.insert("name".into(), Value::String(self.name.clone()));
        if let Some(d) = &self.description {
            function.insert("description".into(), Value::String(d.clone()));
        }
        function.insert("parameters".into(), self.parameters.clone());
        if let Some(strict) = self.strict {
            function.insert("strict".into(), Value::Bool(strict));
        }
        json!({"type": "function", "function": Value::Object(function)})
    }
}

/// Whether and which tool the model must call (`tool_choice` of a request).
///
/// ```
/// use polygateway::ToolChoice;
/// assert_eq!(ToolChoice::Auto.to_json(), "auto");
/// assert_eq!(ToolChoice::Required.to_json(), "required");
/// assert_eq!(
///     ToolChoice::Function("get_weather".into()).to_json(),
///     serde_json::json!({"type": "function", "function": {"name": "get_weather"}})
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model decides (the default when tools are given).
    Auto,
    /// No tool call.
    None,
    /// At least one tool call.
    Required,
    /// This function must be called.
    Function(String),
}

impl ToolChoice {
    /// The request's `tool_choice` value.
    ///
    /// ```
    /// use polygateway::ToolChoice;
    /// assert_eq!(ToolChoice::None.to_json(), "none");
    /// ```
    pub fn to_json(&self) -> Value {
        match self {
            ToolChoice::Auto => json!("auto"),
            ToolChoice::None => json!("none"),
            ToolChoice::Required => json!("required"),
            ToolChoice::Function(name) => json!({"type": "function", "function": {"name": name}}),
        }
    }
}
