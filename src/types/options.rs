//! Per-call options (docs/behaviour.md §2): attribution (`session_id`, `parent_call_id`, `tenant_id`, `meta`),
//! cache controls, structured-output mode, streaming and the sampling overlay.
//!
//! This module only holds and checks the caller's choices; what the runtime does with them
//! (cache keys, request bodies, telemetry rows) lives with the call path. The typed structured
//! mode (`T: DeserializeOwned + JsonSchema`) is a separate API on the chat handle.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::validate::{self, ValidationError};

pub use polygateway_actors::policy::wait_queue::Priority;

use super::meta::MetaValue;

/// Structured-output mode of a call (docs/behaviour.md §9.2). The typed mode (`T: JsonSchema`) is a separate
/// method on the chat handle, not a variant here.
///
/// ```
/// use polygateway::types::{CallOptions, Structured};
/// assert_eq!(CallOptions::new().structured, Structured::None);
/// // Ask the runtime to repair the answer into a JSON value (`structured_data` on the response).
/// let opts = CallOptions::new().structured(Structured::Json);
/// assert_eq!(opts.structured, Structured::Json);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Structured {
    /// Raw text (default).
    #[default]
    None,
    /// Repair to a JSON value only (no schema, no re-ask).
    Json,
}

/// Options of one call, built fluently. Every field is public to read; construct with
/// [`CallOptions::new`] (or `default()`) and the builder methods. [`CallOptions::validate`] runs
/// the docs/behaviour.md §2.2 entry checks; the runtime runs it before anything is sent.
///
/// Defaults: no session/parent/salt/namespace override, `structured = None`, `stream = true`,
/// empty overlay, tenant unset (recorded as `""`, the unattributed sentinel), empty meta,
/// cache not bypassed.
///
/// ```
/// use polygateway::types::{CallOptions, Structured};
/// let opts = CallOptions::new()
///     .session_id("job-42")
///     .tenant_id("acme")
///     .meta_entry("batch_id", "b-17")
///     .meta_entry("attempt", 2)
///     .overlay_param("temperature", 0.2)
///     .structured(Structured::Json)
///     .cache_salt("epoch-3");
/// assert!(opts.validate().is_ok());
/// assert_eq!(opts.tenant(), "acme");
/// assert!(opts.stream);
///
/// // Setting the sentinel explicitly is a caller error, unlike leaving the tenant unset.
/// assert!(CallOptions::new().tenant_id("").validate().is_err());
/// assert_eq!(CallOptions::new().tenant(), "");
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct CallOptions {
    /// Groups the calls of one business task (telemetry `session_id`).
    pub session_id: Option<String>,
    /// The call this one derives from (telemetry `parent_call_id`).
    pub parent_call_id: Option<String>,
    /// Cache salt; `Some("")` is a salt too (it enters the key), `None` is no salt.
    pub cache_salt: Option<String>,
    /// Per-call cache namespace, overriding the configured one.
    pub cache_namespace: Option<String>,
    /// Structured-output mode.
    pub structured: Structured,
    /// Stream the response (SSE with watchdogs); `false` uses the non-streaming path.
    pub stream: bool,
    /// Sampling parameters merged into the request body (above the source `extra_body`).
    pub overlay: Map<String, Value>,
    /// Tenant attribution; `None` = unset (recorded as `""`). `Some("")` fails validation.
    pub tenant_id: Option<String>,
    /// Audit dimensions recorded with the call (never part of the cache key).
    pub meta: BTreeMap<String, MetaValue>,
    /// Skip the cache lookup and store for this call.
    pub bypass_cache: bool,
    /// The call's class among waiting calls (docs/behaviour.md §5.7).
    pub priority: Priority,
    /// Answer within this long or not at all: past it the call ends `deadline_exceeded` and
    /// nothing more is sent (docs/behaviour.md §5.7). `None`: no deadline.
    pub deadline: Option<std::time::Duration>,
    /// The tenant's weight in the fair share among waiting calls of its class (`None`: 1).
    pub weight: Option<u32>,
    /// The call's own id in telemetry (`call_group_id` of every row of the call), set once
    /// when the call starts so its re-asks share it.
    pub(crate) call_group: Option<String>,
    /// The server key's spend budget (`vkey:<name>`), set by `polygateway serve` only.
    pub(crate) key_budget: Option<(String, super::budget::SpendBudget)>,
    /// The client's own body when the server's ingress speaks a source dialect (set by
    /// `polygateway serve`'s `/v1/messages` only): a source of that dialect is sent it as written.
    pub(crate) native: Option<crate::types::native_body::NativeBody>,
    /// The server key's name, for the dashboard's per-key series (`polygateway serve` only).
    pub(crate) key_name: Option<std::sync::Arc<str>>,
}

impl Default for CallOptions {
    fn default() -> Self {
        Self {
            session_id: None,
            parent_call_id: None,
            cache_salt: None,
            cache_namespace: None,
            structured: Structured::None,
            stream: true,
            overlay: Map::new(),
            tenant_id: None,
            meta: BTreeMap::new(),
            bypass_cache: false,
            priority: Priority::Normal,
            deadline: None,
            weight: None,
            call_group: None,
            key_budget: None,
            native: None,
            key_name: None,
        }
    }
}

impl CallOptions {
    /// Default options (see the type docs).
    ///
    /// ```
    /// use polygateway::types::{CallOptions, Structured};
    /// let opts = CallOptions::new();
    /// assert_eq!(opts, CallOptions::default());
    /// assert!(opts.stream && !opts.bypass_cache);
    /// assert_eq!(opts.structured, Structured::None);
    /// assert_eq!((opts.session_id, opts.tenant_id), (None, None));
    /// assert!(opts.overlay.is_empty() && opts.meta.is_empty());
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Set the session id.
    ///
    /// ```
    /// use polygateway::types::CallOptions;
    /// // Every call of one business task shares the id, so telemetry can group them.
    /// let job = "invoice-2024-117";
    /// let opts = CallOptions::new().session_id(job);
    /// assert_eq!(opts.session_id.as_deref(), Some("invoice-2024-117"));
    /// ```
    pub fn session_id(mut self, id: impl Into<String>) -> Self {
        self.session_id = Some(id.into());
        self
    }

    /// Set the parent call id.
    ///
    /// ```
    /// use polygateway::{CallOptions, LlmResponse};
    /// // `draft` stands for an earlier answer; the critique call derives from it.
    /// let mut draft = LlmResponse::new("Rain on the roof, ...");
    /// draft.call_id = "7d2f9c1e-0b4a-4c55-9e3d-2a6b8f1c0d42".into();
    /// let opts = CallOptions::new().parent_call_id(draft.call_id.clone());
    /// assert_eq!(opts.parent_call_id.as_deref(), Some(draft.call_id.as_str()));
    /// ```
    pub fn parent_call_id(mut self, id: impl Into<String>) -> Self {
        self.parent_call_id = Some(id.into());
        self
    }

    /// Set the cache salt (an empty string is a valid salt).
    ///
    /// ```
    /// use polygateway::types::CallOptions;
    /// // Changing the salt makes the cache miss for otherwise identical calls.
    /// let opts = CallOptions::new().cache_salt("prompt-v2");
    /// assert_eq!(opts.cache_salt.as_deref(), Some("prompt-v2"));
    /// // "" is a salt too, distinct from no salt at all.
    /// assert_ne!(CallOptions::new().cache_salt(""), CallOptions::new());
    /// ```
    pub fn cache_salt(mut self, salt: impl Into<String>) -> Self {
        self.cache_salt = Some(salt.into());
        self
    }

    /// Override the cache namespace for this call.
    ///
    /// ```
    /// use polygateway::types::CallOptions;
    /// let opts = CallOptions::new().cache_namespace("eval-run-7");
    /// assert_eq!(opts.cache_namespace.as_deref(), Some("eval-run-7"));
    /// ```
    pub fn cache_namespace(mut self, namespace: impl Into<String>) -> Self {
        self.cache_namespace = Some(namespace.into());
        self
    }

    /// Choose the structured-output mode.
    ///
    /// ```
    /// use polygateway::types::{CallOptions, Structured};
    /// let opts = CallOptions::new().structured(Structured::Json);
    /// assert_eq!(opts.structured, Structured::Json);
    /// assert_eq!(opts.structured(Structured::None).structured, Structured::None);
    /// ```
    pub fn structured(mut self, mode: Structured) -> Self {
        self.structured = mode;
        self
    }

    /// Stream (`true`, default) or not.
    ///
    /// ```
    /// use polygateway::types::CallOptions;
    /// assert!(CallOptions::new().stream);
    /// // `false`: one plain request/response instead of an SSE stream.
    /// assert!(!CallOptions::new().stream(false).stream);
    /// ```
    pub fn stream(mut self, stream: bool) -> Self {
        self.stream = stream;
        self
    }

    /// Replace the whole sampling overlay.
    ///
    /// ```
    /// use polygateway::types::CallOptions;
    /// let sampling = serde_json::json!({"temperature": 0.0, "top_p": 1.0});
    /// let opts = CallOptions::new()
    ///     .overlay_param("seed", 7)
    ///     .overlay(sampling.as_object().unwrap().clone());
    /// // The earlier `seed` is gone: the map was replaced, not merged.
    /// assert_eq!(opts.overlay.len(), 2);
    /// assert!(!opts.overlay.contains_key("seed"));
    /// ```
    pub fn overlay(mut self, overlay: Map<String, Value>) -> Self {
        self.overlay = overlay;
        self
    }

    /// Set one sampling parameter of the overlay.
    ///
    /// ```
    /// use polygateway::types::CallOptions;
    /// let opts = CallOptions::new()
    ///     .overlay_param("temperature", 0.2)
    ///     .overlay_param("max_tokens", 256);
    /// assert_eq!(opts.overlay["max_tokens"], 256);
    /// assert!(opts.validate().is_ok());
    /// // Keys the runtime owns are refused when the options are validated.
    /// assert!(CallOptions::new().overlay_param("model", "gpt-4o").validate().is_err());
    /// ```
    pub fn overlay_param(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.overlay.insert(key.into(), value.into());
        self
    }

    /// Offer tools to the model (`tools` of the request, in the overlay: the cache key covers
    /// them). The answer's calls are in [`LlmResponse::tool_calls`](crate::LlmResponse::tool_calls).
    ///
    /// ```
    /// use polygateway::types::CallOptions;
    /// use polygateway::{Tool, ToolChoice};
    /// let weather = Tool::function("get_weather", "Weather in a city",
    ///     serde_json::json!({"type": "object", "properties": {"city": {"type": "string"}}}));
    /// let opts = CallOptions::new()
    ///     .tools([weather])
    ///     .tool_choice(ToolChoice::Required)
    ///     .overlay_param("parallel_tool_calls", false);
    /// assert_eq!(opts.overlay["tools"][0]["function"]["name"], "get_weather");
    /// assert_eq!(opts.overlay["tool_choice"], "required");
    /// ```
    pub fn tools(mut self, tools: impl IntoIterator<Item = crate::types::Tool>) -> Self {
        let tools = tools.into_iter().map(|t| t.to_json()).collect();
        self.overlay.insert("tools".into(), Value::Array(tools));
        self
    }

    /// Whether and which tool the model must call (`tool_choice` of the request).
    ///
    /// ```
    /// use polygateway::types::CallOptions;
    /// use polygateway::ToolChoice;
    /// let opts = CallOptions::new().tool_choice(ToolChoice::Function("lookup".into()));
    /// assert_eq!(opts.overlay["tool_choice"]["function"]["name"], "lookup");
    /// ```
    pub fn tool_choice(mut self, choice: crate::types::ToolChoice) -> Self {
        self.overlay.insert("tool_choice".into(), choice.to_json());
        self
    }

    /// Attribute the call to a tenant (checked by [`CallOptions::validate`]; never trimmed).
    ///
    /// ```
    /// use polygateway::types::CallOptions;
    /// let opts = CallOptions::new().tenant_id("acme");
    /// assert_eq!(opts.tenant_id.as_deref(), Some("acme"));
    /// // Not trimmed: surrounding whitespace is an error, not silently removed.
    /// assert!(CallOptions::new().tenant_id(" acme").validate().is_err());
    /// ```
    pub fn tenant_id(mut self, tenant_id: impl Into<String>) -> Self {
        self.tenant_id = Some(tenant_id.into());
        self
    }

    /// Replace the whole `meta` map.
    ///
    /// ```
    /// use std::collections::BTreeMap;
    /// use polygateway::types::{CallOptions, MetaValue};
    /// let meta = BTreeMap::from([
    ///     ("batch_id".to_string(), MetaValue::from("b-17")),
    ///     ("retry".to_string(), MetaValue::from(false)),
    /// ]);
    /// let opts = CallOptions::new().meta_entry("stale", 1).meta(meta.clone());
    /// assert_eq!(opts.meta, meta);
    /// ```
    pub fn meta(mut self, meta: BTreeMap<String, MetaValue>) -> Self {
        self.meta = meta;
        self
    }

    /// Set one `meta` entry.
    ///
    /// ```
    /// use polygateway::types::{CallOptions, MetaValue};
    /// let opts = CallOptions::new().meta_entry("page", 3).meta_entry("page", 4);
    /// assert_eq!(opts.meta["page"], MetaValue::Int(4)); // the last value wins
    /// // The `pg_` prefix is reserved for the library.
    /// assert!(CallOptions::new().meta_entry("pg_internal", 1).validate().is_err());
    /// ```
    pub fn meta_entry(mut self, key: impl Into<String>, value: impl Into<MetaValue>) -> Self {
        self.meta.insert(key.into(), value.into());
        self
    }

    /// Skip the cache for this call (`true`) or not.
    ///
    /// ```
    /// use polygateway::types::CallOptions;
    /// // e.g. a "regenerate" button: neither read nor store a cached answer.
    /// let opts = CallOptions::new().bypass_cache(true);
    /// assert!(opts.bypass_cache);
    /// assert!(!CallOptions::new().bypass_cache);
    /// ```
    pub fn bypass_cache(mut self, bypass: bool) -> Self {
        self.bypass_cache = bypass;
        self
    }

    /// The call's class among waiting calls: `Interactive` before `Normal` (the default) before
    /// `Batch` (docs/behaviour.md §5.7).
    ///
    /// ```
    /// use polygateway::types::{CallOptions, Priority};
    /// let opts = CallOptions::new().priority(Priority::Interactive);
    /// assert_eq!(opts.priority, Priority::Interactive);
    /// assert_eq!(CallOptions::new().priority, Priority::Normal);
    /// ```
    pub fn priority(mut self, priority: Priority) -> Self {
        self.priority = priority;
        self
    }

    /// Answer within `deadline` (counted from when the call starts) or not at all: a call still
    /// waiting for capacity then ends `Unavailable` with reason `deadline_exceeded`, and no
    /// attempt starts that cannot end before it (docs/behaviour.md §5.7).
    ///
    /// ```
    /// use std::time::Duration;
    /// use polygateway::types::CallOptions;
    /// let opts = CallOptions::new().deadline(Duration::from_secs(5));
    /// assert_eq!(opts.deadline, Some(Duration::from_secs(5)));
    /// assert!(CallOptions::new().deadline(Duration::ZERO).validate().is_err());
    /// ```
    pub fn deadline(mut self, deadline: std::time::Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// The tenant's weight (1 to 1000, default 1): while tenants of one class wait, each gets
    /// turns in proportion to its weight (docs/behaviour.md §5.7).
    ///
    /// ```
    /// use polygateway::types::CallOptions;
    /// let opts = CallOptions::new().tenant_id("acme").weight(4);
    /// assert!(opts.validate().is_ok());
    /// let err = CallOptions::new().weight(0).validate().unwrap_err();
    /// assert_eq!(err.to_string(), "weight must be a whole number from 1 to 1000, got 0");
    /// ```
    pub fn weight(mut self, weight: u32) -> Self {
        self.weight = Some(weight);
        self
    }

    /// The tenant as recorded in telemetry: the set value, or `""` when unset.
    ///
    /// ```
    /// use polygateway::types::CallOptions;
    /// assert_eq!(CallOptions::new().tenant(), "");
    /// assert_eq!(CallOptions::new().tenant_id("acme").tenant(), "acme");
    /// ```
    pub fn tenant(&self) -> &str {
        self.tenant_id.as_deref().unwrap_or("")
    }

    /// Run every docs/behaviour.md §2.2 entry check: `tenant_id` (when set), `meta`, and the overlay's
    /// protected keys.
    ///
    /// ```
    /// use polygateway::types::CallOptions;
    /// use polygateway::validate::ValidationError;
    /// assert_eq!(CallOptions::new().tenant_id("acme").validate(), Ok(()));
    /// let err = CallOptions::new().overlay_param("stream", false).validate().unwrap_err();
    /// assert!(
    ///     matches!(&err, ValidationError::ProtectedKey { key, .. } if key == "stream"),
    ///     "{err}"
    /// );
    /// let err = CallOptions::new().meta_entry("Batch", "x").validate().unwrap_err();
    /// assert!(matches!(err, ValidationError::MetaKeyInvalid { .. }), "{err}");
    /// ```
    pub fn validate(&self) -> Result<(), ValidationError> {
        if let Some(tenant) = &self.tenant_id {
            validate::validate_tenant_id(tenant)?;
        }
        validate::validate_meta(&self.meta)?;
        validate::validate_overlay("overlay", &self.overlay)?;
        if let Some(deadline) = self.deadline {
            validate::deadline_from_secs(deadline.as_secs_f64())?;
        }
        if let Some(weight) = self.weight {
            validate::validate_weight(u64::from(weight))?;
        }
        Ok(())
    }
}
