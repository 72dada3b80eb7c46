//! `GatewayError` → the package's exception classes (defined in `polygateway/exceptions.py`,
//! whose `_from_native` factory this module calls with the class name, message and attributes).
//!
//! Not for: deciding the hierarchy (the Python module owns it) or validating input.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyDict;

use polygateway::GatewayError;

static FACTORY: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// The Python exception for `err` (an instance of a `PolyGatewayError` subclass, or `ValueError`
/// for entry validation).
pub(crate) fn to_py(py: Python<'_>, err: GatewayError) -> PyErr {
    match build(py, &err) {
        Ok(exc) => PyErr::from_value(exc),
        Err(e) => e,
    }
}

fn build<'py>(py: Python<'py>, err: &GatewayError) -> PyResult<Bound<'py, PyAny>> {
    let attrs = PyDict::new(py);
    let class = match err {
        GatewayError::Unavailable(u) => {
            attrs.set_item("scope", &u.scope)?;
            attrs.set_item("reason", u.reason.as_str())?;
            attrs.set_item("retry_after_s", u.retry_after_s)?;
            let per_source = PyDict::new(py);
            for (source, reason) in &u.per_source_reasons {
                per_source.set_item(source, reason.as_str())?;
            }
            attrs.set_item("per_source_reasons", per_source)?;
            attrs.set_item("detail", &u.detail)?;
            u.kind.class_name()
        }
        GatewayError::RequestRejected { body_text, .. } => {
            attrs.set_item("body_text", body_text)?;
            "RequestRejectedError"
        }
        GatewayError::ResultInvalid { details, .. } => {
            attrs.set_item("raw_text", &details.raw_text)?;
            attrs.set_item("repair_error", &details.repair_error)?;
            attrs.set_item("validation_errors", &details.validation_errors)?;
            "ResultInvalidError"
        }
        GatewayError::SourceNotConfigured(_) => "SourceNotConfiguredError",
        GatewayError::InvalidInput(_) => "ValueError",
        GatewayError::StreamInterrupted { delivered, .. } => {
            attrs.set_item("delivered", delivered)?;
            "StreamInterruptedError"
        }
        GatewayError::Config(_) => "ConfigError",
        GatewayError::Shutdown(_) => "GatewayClosedError",
        // Future variants keep their Rust class name in the message.
        _ => "PolyGatewayError",
    };
    FACTORY
        .import(py, "polygateway.exceptions", "_from_native")?
        .call1((class, message(err), attrs))
}

/// [`to_py`] where the caller holds no `Python` token.
pub(crate) fn to_py_now(err: GatewayError) -> PyErr {
    Python::attach(|py| to_py(py, err))
}

/// A configuration error (bad or missing key) as the package's `ConfigError`.
pub(crate) fn config_error(message: String) -> PyErr {
    to_py_now(GatewayError::Config(
        polygateway::config::ConfigError::Assembly(message),
    ))
}

/// The error's text without the leading class name (the Python class already says it).
fn message(err: &GatewayError) -> String {
    let text = err.to_string();
    let prefix = format!("{}: ", err.class_name());
    match text.strip_prefix(&prefix) {
        Some(rest) => rest.to_string(),
        None => text,
    }
}
