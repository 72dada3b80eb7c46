//! Provider profiles between Python and the runtime: the built-in table (`DEFAULT_PROFILES`) out,
//! a caller's registry (`from_env(registry=…)`) in.
//!
//! A profile crosses as a tuple `(name, thinking_on, thinking_off, reasoning, native_json_schema,
//! json_object, schema_under_value)`: the two thinking switches are JSON object texts (the keys
//! merged into the request body), `reasoning` is `field`, `think_tags` or `both`.
//!
//! Not for: the Python dataclass (`polygateway/providers.py` owns names and validation).

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use serde_json::{Map, Value};

use polygateway::provider::{ProviderProfile, ProviderRegistry, ReasoningForm, ThinkingForm};

/// One profile as it crosses the boundary (see the module comment).
pub(crate) type ProfileTuple = (String, String, String, String, bool, bool, bool);

fn reasoning_name(form: ReasoningForm) -> &'static str {
    match form {
        ReasoningForm::Field => "field",
        ReasoningForm::ThinkTags => "think_tags",
        ReasoningForm::Both => "both",
    }
}

/// The runtime's built-in profiles, sorted by name.
#[pyfunction]
pub(crate) fn default_profiles() -> Vec<ProfileTuple> {
    let registry = ProviderRegistry::with_defaults();
    registry
        .names()
        .iter()
        .map(|name| {
            let p = registry.get(name);
            (
                p.name.clone(),
                Value::Object(p.thinking.injection(true)).to_string(),
                Value::Object(p.thinking.injection(false)).to_string(),
                reasoning_name(p.reasoning).to_string(),
                p.native_json_schema,
                p.json_object,
                p.schema_under_value,
            )
        })
        .collect()
}

fn object(name: &str, which: &str, text: &str) -> PyResult<Map<String, Value>> {
    match serde_json::from_str(text) {
        Ok(Value::Object(map)) => Ok(map),
        _ => Err(PyValueError::new_err(format!(
            "provider profile {name}: {which} must be a JSON object (the keys merged into the \
             request body)"
        ))),
    }
}

/// The runtime's registry: the built-in profiles, with `profiles` added or replacing those of the
/// same name.
pub(crate) fn registry(profiles: Vec<ProfileTuple>) -> PyResult<ProviderRegistry> {
    let mut registry = ProviderRegistry::with_defaults();
    for (name, on, off, reasoning, native, json_object, under_value) in profiles {
        let on = object(&name, "thinking_on", &on)?;
        let off = object(&name, "thinking_off", &off)?;
        let thinking = if on.is_empty() && off.is_empty() {
            ThinkingForm::None
        } else {
            ThinkingForm::Custom { on, off }
        };
        let reasoning = match reasoning.as_str() {
            "field" => ReasoningForm::Field,
            "think_tags" => ReasoningForm::ThinkTags,
            "both" => ReasoningForm::Both,
            other => {
                return Err(PyValueError::new_err(format!(
                    "provider profile {name}: reasoning {other:?} is not one of field, \
                     think_tags, both"
                )))
            }
        };
        let mut profile =
            ProviderProfile::new(name, thinking, reasoning, native).with_json_object(json_object);
        if under_value {
            profile = profile.with_schema_under_value();
        }
        registry.register(profile);
    }
    Ok(registry)
}
