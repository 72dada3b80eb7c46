//! Provider registry (docs/behaviour.md §7.2): what differs between OpenAI-compatible providers, as explicit
//! entries.
//!
//! A profile says how to switch thinking on/off in the request body, where the provider puts its
//! reasoning (a `reasoning_content` field, `<think>` tags inside `content`, or either) and whether
//! it accepts a native JSON-schema or JSON-object `response_format`. Profiles are looked up by the
//! source's configured provider name — never guessed from the model string. The registry is a
//! plain value (no global): build one with [`ProviderRegistry::with_defaults`], add your own with
//! [`ProviderRegistry::register`].
//!
//! Not here: HTTP, status classification (the crate-private `transport::http`) and SSE parsing.

use std::collections::HashMap;

use serde_json::{json, Map, Value};

use crate::structured::StructuredMode;

pub use crate::types::dialect::Dialect;

/// How a provider's request body switches thinking (reasoning) on or off.
///
/// ```
/// use polygateway::provider::ThinkingForm;
/// // A vendor whose switch is `{"reasoning": {"effort": "high" | "none"}}`.
/// let custom = ThinkingForm::Custom {
///     on: serde_json::json!({"reasoning": {"effort": "high"}}).as_object().unwrap().clone(),
///     off: serde_json::json!({"reasoning": {"effort": "none"}}).as_object().unwrap().clone(),
/// };
/// assert_eq!(custom.injection(false)["reasoning"]["effort"], "none");
/// assert_ne!(custom, ThinkingForm::DeepSeek);
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ThinkingForm {
    /// The provider has no switch: nothing is injected even when `ENABLE_THINKING` is set.
    None,
    /// DeepSeek / GLM style: `{"thinking": {"type": "enabled" | "disabled"}}`.
    DeepSeek,
    /// Self-hosted servers that pass `chat_template_kwargs` to the model's chat template (vLLM,
    /// SGLang, llama.cpp's server): `{"chat_template_kwargs": {"enable_thinking": true | false}}`.
    /// Templates that read `enable_thinking` (Qwen3 and its kind) obey it; others ignore it.
    TemplateKwargs,
    /// Qwen (DashScope) style: `{"enable_thinking": true | false}`.
    Qwen,
    /// Any other form: the top-level keys merged for "on" and for "off".
    Custom {
        /// Keys merged when thinking is switched on.
        on: Map<String, Value>,
        /// Keys merged when thinking is switched off.
        off: Map<String, Value>,
    },
}

impl ThinkingForm {
    /// The top-level body keys to merge for `enabled`.
    ///
    /// ```
    /// use polygateway::provider::ThinkingForm;
    /// let on = ThinkingForm::DeepSeek.injection(true);
    /// assert_eq!(serde_json::Value::Object(on), serde_json::json!({"thinking": {"type": "enabled"}}));
    /// let off = ThinkingForm::Qwen.injection(false);
    /// assert_eq!(serde_json::Value::Object(off), serde_json::json!({"enable_thinking": false}));
    /// assert!(ThinkingForm::None.injection(true).is_empty());
    /// let off = ThinkingForm::TemplateKwargs.injection(false);
    /// assert_eq!(off["chat_template_kwargs"]["enable_thinking"], false);
    /// ```
    pub fn injection(&self, enabled: bool) -> Map<String, Value> {
        let mut out = Map::new();
        match self {
            ThinkingForm::None => {}
            ThinkingForm::DeepSeek => {
                let kind = if enabled { "enabled" } else { "disabled" };
                out.insert("thinking".into(), json!({ "type": kind }));
            }
            ThinkingForm::Qwen => {
                out.insert("enable_thinking".into(), Value::Bool(enabled));
            }
            ThinkingForm::TemplateKwargs => {
                out.insert(
                    "chat_template_kwargs".into(),
                    json!({ "enable_thinking": enabled }),
                );
            }
            ThinkingForm::Custom { on, off } => {
                out = if enabled { on.clone() } else { off.clone() };
            }
        }
        out
    }
}

/// Where a provider puts its reasoning text.
///
/// The `reasoning_content` delta field is always read when present; this form says whether
/// `content` may additionally carry `<think>…</think>` blocks that must be moved into `thinking`.
///
/// ```
/// use polygateway::provider::{ProviderRegistry, ReasoningForm};
/// let reg = ProviderRegistry::with_defaults();
/// // MiniMax reasons inside `<think>` tags; DeepSeek uses `reasoning_content`.
/// assert_eq!(reg.get("minimax").reasoning, ReasoningForm::ThinkTags);
/// assert_eq!(reg.get("deepseek").reasoning, ReasoningForm::Field);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReasoningForm {
    /// A separate `reasoning_content` field; `content` is taken verbatim.
    Field,
    /// `<think>…</think>` blocks inside `content`.
    ThinkTags,
    /// Either (generic/self-hosted servers whose reasoning parser may or may not be on).
    Both,
}

impl ReasoningForm {
    /// `true` when `<think>` tags in `content` must be stripped into thinking.
    ///
    /// ```
    /// use polygateway::provider::ReasoningForm;
    /// assert!(ReasoningForm::ThinkTags.strips_think_tags());
    /// assert!(ReasoningForm::Both.strips_think_tags());
    /// assert!(!ReasoningForm::Field.strips_think_tags());
    /// ```
    pub fn strips_think_tags(self) -> bool {
        matches!(self, ReasoningForm::ThinkTags | ReasoningForm::Both)
    }
}

/// One provider's wire peculiarities.
///
/// The struct is `#[non_exhaustive]`: build one with [`ProviderProfile::new`].
///
/// ```
/// use polygateway::provider::{ProviderProfile, ProviderRegistry, ReasoningForm, ThinkingForm};
/// let profile = ProviderRegistry::with_defaults().get("qwen").clone();
/// assert_eq!(
///     profile,
///     ProviderProfile::new("qwen", ThinkingForm::Qwen, ReasoningForm::Field, true)
///         .without_developer_role()
/// );
/// assert!(profile.native_json_schema);
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ProviderProfile {
    /// Registry key (lower-case), e.g. `deepseek`.
    pub name: String,
    /// How thinking is switched on/off.
    pub thinking: ThinkingForm,
    /// Where reasoning text arrives.
    pub reasoning: ReasoningForm,
    /// `true` when `response_format: {"type": "json_schema", …}` is supported natively.
    pub native_json_schema: bool,
    /// `true` when `response_format: {"type": "json_object"}` is supported (set by
    /// [`ProviderProfile::new`] to `native_json_schema`; see [`ProviderProfile::with_json_object`]).
    pub json_object: bool,
    /// `true` when the server takes a schema as `{"type": "json", "value": <schema>}` (TGI's
    /// grammar form) instead of OpenAI's `response_format.json_schema.schema`; see
    /// [`ProviderProfile::with_schema_under_value`].
    pub schema_under_value: bool,
    /// `false` when the provider knows no `developer` role: such messages are sent as `system`
    /// (see [`ProviderProfile::without_developer_role`]).
    pub developer_role: bool,
    /// `true` when an assistant turn with tool calls and no content must say `"content": ""`
    /// instead of `null` (see [`ProviderProfile::with_empty_content_beside_tool_calls`]).
    pub empty_content_beside_tool_calls: bool,
    /// The wire protocol the provider speaks (see [`ProviderProfile::with_dialect`]).
    pub dialect: Dialect,
    /// `true` when the provider continues a final assistant turn it is sent (a prefill), the
    /// way its dialect writes one (see [`ProviderProfile::with_prefill`]).
    pub prefill: bool,
}

impl ProviderProfile {
    /// A profile; `name` is lower-cased.
    ///
    /// ```
    /// use polygateway::provider::{ProviderProfile, ReasoningForm, ThinkingForm};
    /// let p = ProviderProfile::new("MyVendor", ThinkingForm::Qwen, ReasoningForm::Field, true);
    /// assert_eq!(p.name, "myvendor");
    /// ```
    pub fn new(
        name: impl Into<String>,
        thinking: ThinkingForm,
        reasoning: ReasoningForm,
        native_json_schema: bool,
    ) -> Self {
        Self {
            name: name.into().to_ascii_lowercase(),
            thinking,
            reasoning,
            native_json_schema,
            json_object: native_json_schema,
            schema_under_value: false,
            developer_role: true,
            empty_content_beside_tool_calls: false,
            dialect: Dialect::OpenAi,
            prefill: false,
        }
    }

    /// The provider continues an answer it is handed the beginning of (docs/behaviour.md
    /// §5.10), as its API documents: in Anthropic's dialect a final `assistant` turn (the
    /// answer holds only the continuation; the turn may not end with whitespace), in the OpenAI
    /// dialect a final assistant message with `"prefix": true` (DeepSeek's chat prefix
    /// completion, Mistral). Plain OpenAI chat has no prefill; Gemini's dialect is not sent one.
    ///
    /// ```
    /// use polygateway::provider::ProviderRegistry;
    /// let registry = ProviderRegistry::with_defaults();
    /// for provider in ["anthropic", "deepseek", "mistral"] {
    ///     assert!(registry.get(provider).prefill, "{provider}");
    /// }
    /// assert!(!registry.get("openai").prefill);
    /// assert!(!registry.get("someone-else").prefill);
    /// ```
    pub fn with_prefill(mut self) -> Self {
        self.prefill = true;
        self
    }

    /// The provider speaks `dialect` instead of OpenAI's chat API.
    ///
    /// ```
    /// use polygateway::provider::{Dialect, ProviderProfile, ReasoningForm, ThinkingForm};
    /// // A second Anthropic account under a provider name of its own.
    /// let claude = ProviderProfile::new("claude-eu", ThinkingForm::None, ReasoningForm::Field, true)
    ///     .with_dialect(Dialect::Anthropic);
    /// assert_eq!(claude.dialect, Dialect::Anthropic);
    /// ```
    pub fn with_dialect(mut self, dialect: Dialect) -> Self {
        self.dialect = dialect;
        self
    }

    /// The provider refuses (or silently drops) the `developer` role, which only OpenAI
    /// documents: each `developer` message is sent as a `system` message instead, its content
    /// and other fields unchanged.
    ///
    /// ```
    /// use polygateway::provider::ProviderRegistry;
    /// let registry = ProviderRegistry::with_defaults();
    /// assert!(registry.get("openai").developer_role);
    /// assert!(!registry.get("deepseek").developer_role);
    /// // A provider the registry does not know gets the caller's messages as written.
    /// assert!(registry.get("someone-else").developer_role);
    /// ```
    pub fn without_developer_role(mut self) -> Self {
        self.developer_role = false;
        self
    }

    /// The provider (or the chat template of a self-hosted server) wants an assistant turn that
    /// only called tools to carry `"content": ""`: a `null` content there is sent as `""`.
    /// No built-in entry needs it (OpenAI's format and the listed servers take `null`); register
    /// a profile with it for a server that does.
    ///
    /// ```
    /// use polygateway::provider::{ProviderProfile, ReasoningForm, ThinkingForm};
    /// let mlx = ProviderProfile::new("mlx", ThinkingForm::None, ReasoningForm::Both, true)
    ///     .with_empty_content_beside_tool_calls();
    /// assert!(mlx.empty_content_beside_tool_calls);
    /// ```
    pub fn with_empty_content_beside_tool_calls(mut self) -> Self {
        self.empty_content_beside_tool_calls = true;
        self
    }

    /// Send the `json_schema` mode as `{"type": "json", "value": <schema>}`, the grammar form
    /// every text-generation-inference (TGI) version since 1.4.3 reads, instead of OpenAI's
    /// nested form (TGI's own `json_schema` type exists only since 3.3 and nests differently).
    ///
    /// ```
    /// use polygateway::provider::ProviderRegistry;
    /// let registry = ProviderRegistry::with_defaults();
    /// assert!(registry.get("tgi").schema_under_value);
    /// assert!(!registry.get("vllm").schema_under_value);
    /// ```
    pub fn with_schema_under_value(mut self) -> Self {
        self.schema_under_value = true;
        self
    }

    /// Whether `response_format: {"type": "json_object"}` is accepted (providers with JSON mode
    /// but no strict schema, such as DeepSeek).
    ///
    /// ```
    /// use polygateway::provider::{ProviderProfile, ReasoningForm, ThinkingForm};
    /// use polygateway::structured::StructuredMode;
    /// let vllm = ProviderProfile::new("vllm", ThinkingForm::None, ReasoningForm::Both, false);
    /// assert_eq!(vllm.structured_mode(), StructuredMode::Prompt);
    /// let vllm = vllm.with_json_object(true);
    /// assert_eq!(vllm.structured_mode(), StructuredMode::JsonObject);
    /// ```
    pub fn with_json_object(mut self, supported: bool) -> Self {
        self.json_object = supported;
        self
    }

    /// The strongest way this provider can be held to a typed call's schema: strict
    /// `json_schema`, else `json_object` plus the schema in the prompt, else the prompt alone.
    /// Decided per attempt, by the transport of the source the attempt goes to.
    ///
    /// ```
    /// use polygateway::provider::ProviderRegistry;
    /// use polygateway::structured::StructuredMode;
    /// let registry = ProviderRegistry::with_defaults();
    /// assert_eq!(registry.get("qwen").structured_mode(), StructuredMode::JsonSchema);
    /// assert_eq!(registry.get("moonshot").structured_mode(), StructuredMode::JsonObject);
    /// ```
    pub fn structured_mode(&self) -> StructuredMode {
        if self.native_json_schema {
            StructuredMode::JsonSchema
        } else if self.json_object {
            StructuredMode::JsonObject
        } else {
            StructuredMode::Prompt
        }
    }

    /// The wire protocol of a source of this provider: its `DIALECT` when set, else ours.
    pub(crate) fn dialect_for(&self, configured: Option<Dialect>) -> Dialect {
        configured.unwrap_or(self.dialect)
    }

    /// The structured mode a source of this provider starts typed calls in: its
    /// `STRUCTURED_MODE` when set, else [`Self::structured_mode`].
    pub(crate) fn structured_mode_for(&self, configured: Option<StructuredMode>) -> StructuredMode {
        configured.unwrap_or_else(|| self.structured_mode())
    }

    /// The fallback for providers without an entry: no thinking switch, reasoning from either
    /// form, no native JSON schema.
    ///
    /// ```
    /// use polygateway::provider::{ProviderProfile, ReasoningForm, ThinkingForm, GENERIC};
    /// let p = ProviderProfile::generic();
    /// assert_eq!(p.name, GENERIC);
    /// assert_eq!(p.thinking, ThinkingForm::None);
    /// assert_eq!(p.reasoning, ReasoningForm::Both);
    /// assert!(!p.native_json_schema);
    /// ```
    pub fn generic() -> Self {
        Self::new(GENERIC, ThinkingForm::None, ReasoningForm::Both, false)
    }
}

/// Name of the generic fallback profile.
///
/// Registering a profile under this name replaces the fallback instead of adding an entry.
///
/// ```
/// use polygateway::provider::{ProviderProfile, ProviderRegistry, ReasoningForm, ThinkingForm, GENERIC};
/// let mut reg = ProviderRegistry::empty();
/// reg.register(ProviderProfile::new(GENERIC, ThinkingForm::Qwen, ReasoningForm::Field, false));
/// assert!(!reg.contains(GENERIC));
/// assert_eq!(reg.get("anything").thinking, ThinkingForm::Qwen);
/// ```
pub const GENERIC: &str = "generic";

/// Provider profiles by name, with a generic fallback.
///
/// ```
/// use polygateway::provider::{ProviderRegistry, ThinkingForm};
/// let reg = ProviderRegistry::with_defaults();
/// assert_eq!(reg.get("deepseek").thinking, ThinkingForm::DeepSeek);
/// // Unknown names fall back to the generic profile; the model string is never consulted.
/// assert_eq!(reg.get("acme").name, "generic");
/// ```
#[derive(Debug, Clone)]
pub struct ProviderRegistry {
    profiles: HashMap<String, ProviderProfile>,
    generic: ProviderProfile,
}

impl Default for ProviderRegistry {
    fn default() -> Self {
        Self::with_defaults()
    }
}

impl ProviderRegistry {
    /// An empty registry: every lookup answers the generic profile.
    ///
    /// ```
    /// use polygateway::provider::{ProviderProfile, ProviderRegistry};
    /// let reg = ProviderRegistry::empty();
    /// assert!(reg.names().is_empty());
    /// assert_eq!(reg.get("openai"), &ProviderProfile::generic());
    /// ```
    pub fn empty() -> Self {
        Self {
            profiles: HashMap::new(),
            generic: ProviderProfile::generic(),
        }
    }

    /// The built-in entries: the hosted APIs `openai`, `deepseek`, `qwen`, `minimax`, `glm`,
    /// `moonshot`, `mistral`, the native dialects `anthropic` and `gemini`, and the self-hosted servers
    /// `vllm`, `sglang`, `llamacpp`, `ollama`, `lmstudio`, `tgi` (each checked against its
    /// server's documentation: docs/behaviour.md §7.2).
    ///
    /// ```
    /// use polygateway::provider::{ProviderRegistry, ThinkingForm};
    /// use polygateway::structured::StructuredMode;
    /// let reg = ProviderRegistry::with_defaults();
    /// assert_eq!(
    ///     reg.names(),
    ///     [
    ///         "anthropic", "deepseek", "gemini", "glm", "llamacpp", "lmstudio", "minimax",
    ///         "mistral", "moonshot", "ollama", "openai", "qwen", "sglang", "tgi", "vllm"
    ///     ]
    /// );
    /// assert_eq!(reg.get("glm").thinking, ThinkingForm::DeepSeek);
    /// // Every self-hosted server enforces a JSON Schema with its grammar engine.
    /// for server in ["vllm", "sglang", "llamacpp", "ollama", "lmstudio", "tgi"] {
    ///     assert_eq!(reg.get(server).structured_mode(), StructuredMode::JsonSchema, "{server}");
    /// }
    /// ```
    pub fn with_defaults() -> Self {
        use ReasoningForm::*;
        use ThinkingForm as T;
        let mut reg = Self::empty();
        let hosted = [
            ProviderProfile::new("openai", T::None, Field, true),
            // Chat prefix completion (beta: the source's BASE_URL must be DeepSeek's `/beta`).
            ProviderProfile::new("deepseek", T::DeepSeek, Field, false)
                .with_json_object(true)
                .with_prefill(),
            ProviderProfile::new("qwen", T::Qwen, Field, true),
            // MiniMax M-series reason inside `<think>` tags in `content`.
            ProviderProfile::new("minimax", T::None, ThinkTags, true),
            ProviderProfile::new("glm", T::DeepSeek, Field, false).with_json_object(true),
            ProviderProfile::new("moonshot", T::None, Field, false).with_json_object(true),
            // A final assistant message with `"prefix": true`; custom structured outputs.
            ProviderProfile::new("mistral", T::None, Field, true).with_prefill(),
            // The native dialects: thinking is switched by the dialect's own request fields
            // (`thinking` / `thinkingConfig`), reasoning arrives as thinking blocks or parts.
            ProviderProfile::new("anthropic", T::None, Field, true)
                .with_dialect(Dialect::Anthropic)
                .with_prefill(),
            ProviderProfile::new("gemini", T::None, Field, true).with_dialect(Dialect::Gemini),
        ];
        let self_hosted = [
            // Self-hosted servers. Reasoning arrives in `reasoning_content` / `reasoning` when
            // the server runs a reasoning parser and as `<think>` tags in `content` when it does
            // not, so both are read. All six accept `stream_options.include_usage`.
            ProviderProfile::new("vllm", T::TemplateKwargs, Both, true),
            ProviderProfile::new("sglang", T::TemplateKwargs, Both, true),
            ProviderProfile::new("llamacpp", T::TemplateKwargs, Both, true),
            // Ollama's switch (`reasoning_effort`) takes model-defined values: set it through
            // EXTRA_BODY.
            ProviderProfile::new("ollama", T::None, Both, true),
            // LM Studio accepts `json_schema` (and `text`) but not `json_object`.
            ProviderProfile::new("lmstudio", T::None, Both, true).with_json_object(false),
            // TGI reads the schema as `{"type": "json", "value": …}`; its `json_object` needs a
            // schema too, so plain JSON mode is not offered.
            ProviderProfile::new("tgi", T::None, Both, true)
                .with_json_object(false)
                .with_schema_under_value(),
        ];
        for profile in hosted.into_iter().chain(self_hosted) {
            // Only OpenAI documents the `developer` role: the other APIs list system, user,
            // assistant and tool, and a chat template that does not know the role drops the
            // message silently (Qwen's does), so everyone else gets it as `system`.
            let profile = if profile.name == "openai" {
                profile
            } else {
                profile.without_developer_role()
            };
            reg.register(profile);
        }
        reg
    }

    /// Add or replace an entry (by its lower-case name). Registering `generic` replaces the
    /// fallback.
    ///
    /// ```
    /// use polygateway::provider::{ProviderProfile, ProviderRegistry, ReasoningForm, ThinkingForm};
    /// let mut reg = ProviderRegistry::with_defaults();
    /// // An in-house server with a reasoning parser and guided JSON decoding.
    /// reg.register(ProviderProfile::new("MyLab", ThinkingForm::Qwen, ReasoningForm::Field, true));
    /// assert!(reg.contains("mylab"));
    /// // Same name again: the entry is replaced, not duplicated.
    /// reg.register(ProviderProfile::new("mylab", ThinkingForm::None, ReasoningForm::Both, false));
    /// assert!(!reg.get("mylab").native_json_schema);
    /// assert_eq!(reg.names().iter().filter(|n| *n == "mylab").count(), 1);
    /// ```
    pub fn register(&mut self, profile: ProviderProfile) {
        if profile.name == GENERIC {
            self.generic = profile;
        } else {
            self.profiles.insert(profile.name.clone(), profile);
        }
    }

    /// The profile for a provider name (case-insensitive); unknown names get the generic
    /// profile (logged at debug level).
    ///
    /// ```
    /// use polygateway::provider::{ProviderRegistry, ReasoningForm};
    /// let reg = ProviderRegistry::with_defaults();
    /// assert_eq!(reg.get("MiniMax").name, "minimax");
    /// assert!(reg.get("MiniMax").reasoning.strips_think_tags());
    /// assert_eq!(reg.get("my-local-llm").name, "generic");
    /// ```
    pub fn get(&self, name: &str) -> &ProviderProfile {
        let key = name.to_ascii_lowercase();
        match self.profiles.get(&key) {
            Some(p) => p,
            None => {
                tracing::debug!(provider = %key, "no provider profile; using the generic one");
                &self.generic
            }
        }
    }

    /// `true` when a dedicated entry exists for `name`.
    ///
    /// ```
    /// use polygateway::provider::ProviderRegistry;
    /// let reg = ProviderRegistry::with_defaults();
    /// assert!(reg.contains("DeepSeek"));
    /// // `get` would still answer (the generic profile), but there is no entry.
    /// assert!(!reg.contains("acme"));
    /// ```
    pub fn contains(&self, name: &str) -> bool {
        self.profiles.contains_key(&name.to_ascii_lowercase())
    }

    /// Names of the dedicated entries, sorted.
    ///
    /// ```
    /// use polygateway::provider::{ProviderProfile, ProviderRegistry, ReasoningForm, ThinkingForm};
    /// let mut reg = ProviderRegistry::empty();
    /// reg.register(ProviderProfile::new("zeta", ThinkingForm::None, ReasoningForm::Field, false));
    /// reg.register(ProviderProfile::new("Alpha", ThinkingForm::None, ReasoningForm::Field, false));
    /// assert_eq!(reg.names(), ["alpha", "zeta"]);
    /// ```
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.profiles.keys().cloned().collect();
        names.sort();
        names
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_cover_the_listed_providers() {
        let reg = ProviderRegistry::with_defaults();
        assert_eq!(
            reg.names(),
            [
                "anthropic",
                "deepseek",
                "gemini",
                "glm",
                "llamacpp",
                "lmstudio",
                "minimax",
                "mistral",
                "moonshot",
                "ollama",
                "openai",
                "qwen",
                "sglang",
                "tgi",
                "vllm"
            ]
        );
        // A prefill only where the provider's API documents one (docs/behaviour.md §5.10).
        let prefill: Vec<String> = reg
            .names()
            .into_iter()
            .filter(|n| reg.get(n).prefill)
            .collect();
        assert_eq!(prefill, ["anthropic", "deepseek", "mistral"]);
        assert_eq!(
            reg.get("lmstudio").structured_mode(),
            StructuredMode::JsonSchema
        );
        assert!(!reg.get("lmstudio").json_object && !reg.get("tgi").json_object);
        assert!(reg.get("ollama").json_object);
        assert_eq!(reg.get("QWEN").thinking, ThinkingForm::Qwen);
        assert_eq!(reg.get("minimax").reasoning, ReasoningForm::ThinkTags);
        assert!(reg.get("openai").native_json_schema);
    }

    #[test]
    fn unknown_provider_is_generic_not_guessed() {
        let reg = ProviderRegistry::with_defaults();
        // A name that merely contains a known provider is still unknown.
        let p = reg.get("deepseek-proxy");
        assert_eq!(p, &ProviderProfile::generic());
        assert!(!reg.contains("deepseek-proxy"));
    }

    #[test]
    fn register_adds_and_replaces() {
        let mut reg = ProviderRegistry::with_defaults();
        let mut on = Map::new();
        on.insert("reasoning".into(), json!({"effort": "high"}));
        let custom = ThinkingForm::Custom {
            on,
            off: Map::new(),
        };
        reg.register(ProviderProfile::new(
            "Acme",
            custom.clone(),
            ReasoningForm::Both,
            false,
        ));
        assert_eq!(reg.get("acme").thinking, custom);
        assert_eq!(
            Value::Object(reg.get("acme").thinking.injection(true)),
            json!({"reasoning": {"effort": "high"}})
        );
        assert!(reg.get("acme").thinking.injection(false).is_empty());
        reg.register(ProviderProfile::new(
            "openai",
            ThinkingForm::None,
            ReasoningForm::Field,
            false,
        ));
        assert!(!reg.get("openai").native_json_schema);
        reg.register(ProviderProfile::new(
            GENERIC,
            ThinkingForm::Qwen,
            ReasoningForm::Field,
            false,
        ));
        assert_eq!(reg.get("nobody").thinking, ThinkingForm::Qwen);
    }

    #[test]
    fn thinking_forms_support_on_and_off() {
        assert_eq!(
            Value::Object(ThinkingForm::DeepSeek.injection(false)),
            json!({"thinking": {"type": "disabled"}})
        );
        assert_eq!(
            Value::Object(ThinkingForm::Qwen.injection(true)),
            json!({"enable_thinking": true})
        );
    }
}
