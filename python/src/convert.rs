//! Python values ↔ the runtime's types: messages and call options in, answers out.
//!
//! Answers become the package's frozen dataclasses (`polygateway/types.py`), built positionally
//! in their declared field order. Not for: errors (`errors.rs`).

use std::collections::BTreeMap;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde_json::Value;

use polygateway::telemetry::TelemetryStatus;
use polygateway::types::MetaValue;
use polygateway::{
    CallOptions, EmbeddingResponse, LlmResponse, Message, OcrLayoutResult, OcrProvenance,
    OcrTextResult,
};

/// The chat messages, given by the Python layer as a JSON array (OpenAI message objects).
pub(crate) fn messages(json: &str) -> PyResult<Vec<Message>> {
    serde_json::from_str(json).map_err(|e| {
        PyValueError::new_err(format!(
            "messages must be a list of {{\"role\": ..., \"content\": ...}} objects \
             (content: a string or OpenAI content parts): {e}"
        ))
    })
}

/// The per-call keyword arguments shared by every call kind.
pub(crate) struct CallArgs<'py> {
    pub(crate) session_id: Option<String>,
    pub(crate) parent_call_id: Option<String>,
    pub(crate) cache_salt: Option<String>,
    pub(crate) cache_namespace: Option<String>,
    pub(crate) stream: bool,
    pub(crate) overlay_json: Option<String>,
    pub(crate) tenant_id: Option<String>,
    pub(crate) meta: Option<Bound<'py, PyDict>>,
}

/// `options` with the call's place among waiting calls (`priority=`, `deadline_s=`,
/// `weight=`; docs/behaviour.md §5.7). A bad value is a `ValueError` naming it and what is
/// allowed.
pub(crate) fn call_order(
    mut options: CallOptions,
    priority: Option<String>,
    deadline_s: Option<f64>,
    weight: Option<u64>,
) -> PyResult<CallOptions> {
    let bad = |e: polygateway::validate::ValidationError| PyValueError::new_err(e.to_string());
    if let Some(priority) = priority {
        options = options.priority(polygateway::validate::parse_priority(&priority).map_err(bad)?);
    }
    if let Some(seconds) = deadline_s {
        options =
            options.deadline(polygateway::validate::deadline_from_secs(seconds).map_err(bad)?);
    }
    if let Some(weight) = weight {
        options = options.weight(polygateway::validate::validate_weight(weight).map_err(bad)?);
    }
    Ok(options)
}

/// `CallOptions` from the keyword arguments. The runtime validates `tenant_id` and `meta`
/// (docs/behaviour.md §2.2) before anything is sent; here only the Python types are checked.
pub(crate) fn options(args: CallArgs<'_>) -> PyResult<CallOptions> {
    let mut options = CallOptions::new().stream(args.stream);
    if let Some(id) = args.session_id {
        options = options.session_id(id);
    }
    if let Some(id) = args.parent_call_id {
        options = options.parent_call_id(id);
    }
    if let Some(salt) = args.cache_salt {
        options = options.cache_salt(salt);
    }
    if let Some(namespace) = args.cache_namespace {
        options = options.cache_namespace(namespace);
    }
    if let Some(tenant) = args.tenant_id {
        options = options.tenant_id(tenant);
    }
    if let Some(json) = args.overlay_json {
        match serde_json::from_str::<Value>(&json) {
            Ok(Value::Object(map)) => options = options.overlay(map),
            _ => {
                return Err(PyValueError::new_err(
                    "overlay must be a dict of JSON-serialisable sampling parameters",
                ))
            }
        }
    }
    if let Some(meta) = args.meta {
        let mut entries = BTreeMap::new();
        for (key, value) in meta.iter() {
            let key: String = key.extract().map_err(|_| {
                PyValueError::new_err("meta keys must be strings matching [a-z0-9_.]{1,64}")
            })?;
            let value = meta_value(&key, &value)?;
            entries.insert(key, value);
        }
        options = options.meta(entries);
    }
    Ok(options)
}

fn meta_value(key: &str, value: &Bound<'_, PyAny>) -> PyResult<MetaValue> {
    if let Ok(b) = value.cast::<PyBool>() {
        return Ok(MetaValue::from(b.is_true()));
    }
    if value.is_instance_of::<PyInt>() {
        return Ok(match value.extract::<i64>() {
            Ok(i) => MetaValue::from(i),
            Err(_) => MetaValue::Float(value.extract::<f64>()?),
        });
    }
    if value.is_instance_of::<PyFloat>() {
        return Ok(MetaValue::Float(value.extract::<f64>()?));
    }
    if value.is_instance_of::<PyString>() {
        return Ok(MetaValue::from(value.extract::<String>()?));
    }
    Err(PyValueError::new_err(format!(
        "meta[{key:?}] must be a str, int, float or bool, not {}",
        value.get_type().name()?
    )))
}

/// A JSON value as plain Python objects (dict, list, str, int, float, bool, None).
pub(crate) fn json_to_py(py: Python<'_>, value: &Value) -> PyResult<Py<PyAny>> {
    Ok(match value {
        Value::Null => py.None(),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any().unbind(),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => i.into_pyobject(py)?.into_any().unbind(),
            (None, Some(u)) => u.into_pyobject(py)?.into_any().unbind(),
            _ => n
                .as_f64()
                .unwrap_or(f64::NAN)
                .into_pyobject(py)?
                .into_any()
                .unbind(),
        },
        Value::String(s) => PyString::new(py, s).into_any().unbind(),
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(json_to_py(py, item)?)?;
            }
            list.into_any().unbind()
        }
        Value::Object(map) => {
            let dict = PyDict::new(py);
            for (k, v) in map {
                dict.set_item(k, json_to_py(py, v)?)?;
            }
            dict.into_any().unbind()
        }
    })
}

static LLM_RESPONSE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static TOOL_CALL: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static EMBEDDING_RESPONSE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static OCR_TEXT: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static OCR_LAYOUT: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static OCR_ELEMENT: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static TELEMETRY_STATUS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

fn class<'py>(
    py: Python<'py>,
    cell: &'static PyOnceLock<Py<PyAny>>,
    name: &str,
) -> PyResult<&'py Bound<'py, PyAny>> {
    cell.import(py, "polygateway.types", name)
}

/// Whole milliseconds, rounded, as the original library's `LLMResponse.latency_ms` (an `int`).
fn whole_ms(ms: f64) -> u64 {
    if ms.is_finite() && ms > 0.0 {
        // Rounded and non-negative: the cast cannot wrap (it saturates above u64::MAX).
        ms.round() as u64
    } else {
        0
    }
}

/// `polygateway.LLMResponse`: the original library's fields in its order, then this runtime's.
pub(crate) fn llm_response(py: Python<'_>, r: LlmResponse) -> PyResult<Py<PyAny>> {
    let structured = match &r.structured_data {
        Some(v) => json_to_py(py, v)?,
        None => py.None(),
    };
    let tool_class = class(py, &TOOL_CALL, "ToolCall")?;
    let tool_calls = r
        .tool_calls
        .iter()
        .map(|c| {
            tool_class.call1((
                c.id.as_str(),
                c.kind.as_str(),
                c.function.name.as_str(),
                c.function.arguments.as_str(),
            ))
        })
        .collect::<PyResult<Vec<_>>>()?;
    let logprobs = match &r.logprobs {
        Some(v) => json_to_py(py, v)?,
        None => py.None(),
    };
    let other_choices = r
        .other_choices
        .iter()
        .map(|c| json_to_py(py, &serde_json::to_value(c).unwrap_or_default()))
        .collect::<PyResult<Vec<_>>>()?;
    let thinking_blocks = r
        .thinking_blocks
        .iter()
        .map(|b| json_to_py(py, &serde_json::to_value(b).unwrap_or_default()))
        .collect::<PyResult<Vec<_>>>()?;
    let args = PyTuple::new(
        py,
        [
            r.content.into_pyobject(py)?.into_any(),
            r.thinking.into_pyobject(py)?.into_any(),
            r.model.into_pyobject(py)?.into_any(),
            r.provider.into_pyobject(py)?.into_any(),
            r.prompt_tokens.into_pyobject(py)?.into_any(),
            r.completion_tokens.into_pyobject(py)?.into_any(),
            whole_ms(r.latency_ms).into_pyobject(py)?.into_any(),
            r.ttft_ms.into_pyobject(py)?.into_any(),
            r.max_inter_token_ms.into_pyobject(py)?.into_any(),
            PyBool::new(py, r.cache_hit).to_owned().into_any(),
            r.call_id.into_pyobject(py)?.into_any(),
            r.source_name.into_pyobject(py)?.into_any(),
            r.cost.into_pyobject(py)?.into_any(),
            r.usage_source.as_str().into_pyobject(py)?.into_any(),
            structured.into_bound(py),
            r.cached_prompt_tokens.into_pyobject(py)?.into_any(),
            r.model_reported.into_pyobject(py)?.into_any(),
            r.reasoning_tokens.into_pyobject(py)?.into_any(),
            PyBool::new(py, r.truncated).to_owned().into_any(),
            r.asks.into_pyobject(py)?.into_any(),
            r.parent_call_id.into_pyobject(py)?.into_any(),
            r.last_ask_cost.into_pyobject(py)?.into_any(),
            PyTuple::new(py, tool_calls)?.into_any(),
            r.finish_reason.into_pyobject(py)?.into_any(),
            r.refusal.into_pyobject(py)?.into_any(),
            logprobs.into_bound(py),
            r.system_fingerprint.into_pyobject(py)?.into_any(),
            PyTuple::new(py, other_choices)?.into_any(),
            r.capacity_wait_ms.into_pyobject(py)?.into_any(),
            r.call_group_id.into_pyobject(py)?.into_any(),
            PyTuple::new(py, thinking_blocks)?.into_any(),
            r.cache_write_5m_tokens.into_pyobject(py)?.into_any(),
            r.cache_write_1h_tokens.into_pyobject(py)?.into_any(),
        ],
    )?;
    Ok(class(py, &LLM_RESPONSE, "LLMResponse")?
        .call1(args)?
        .unbind())
}

/// `polygateway.EmbeddingResponse`.
pub(crate) fn embedding_response(
    py: Python<'_>,
    r: EmbeddingResponse,
    cost: Option<f64>,
) -> PyResult<Py<PyAny>> {
    let vectors = PyList::empty(py);
    for v in &r.vectors {
        vectors.append(PyList::new(py, v)?)?;
    }
    let args = (
        vectors,
        r.dim,
        r.model,
        r.provider,
        r.source_name,
        r.prompt_tokens,
        r.usage_source.as_str(),
        r.latency_ms,
        r.call_id,
        r.capacity_wait_ms,
        cost,
    );
    Ok(class(py, &EMBEDDING_RESPONSE, "EmbeddingResponse")?
        .call1(args)?
        .unbind())
}

fn provenance(
    py: Python<'_>,
    p: &OcrProvenance,
) -> PyResult<(String, u64, f64, String, Py<PyAny>)> {
    Ok((
        p.source_name.clone(),
        p.usage,
        p.latency_ms,
        p.call_id.clone(),
        json_to_py(py, &p.raw)?,
    ))
}

/// `polygateway.ocr.OcrText`.
pub(crate) fn ocr_text(py: Python<'_>, r: OcrTextResult) -> PyResult<Py<PyAny>> {
    let (source_name, usage, latency_ms, call_id, raw) = provenance(py, &r.provenance)?;
    let wait = r.provenance.capacity_wait_ms;
    let args = (r.text, source_name, latency_ms, call_id, usage, raw, wait);
    Ok(class(py, &OCR_TEXT, "OcrText")?.call1(args)?.unbind())
}

/// `polygateway.ocr.OcrLayout` (its elements are `OcrElement`s).
pub(crate) fn ocr_layout(py: Python<'_>, r: OcrLayoutResult) -> PyResult<Py<PyAny>> {
    let element_class = class(py, &OCR_ELEMENT, "OcrElement")?;
    let elements = PyList::empty(py);
    for e in r.elements {
        elements.append(element_class.call1((e.kind, e.bbox, e.page_index, e.text))?)?;
    }
    let (source_name, usage, latency_ms, call_id, raw) = provenance(py, &r.provenance)?;
    let args = (
        elements,
        r.page_sizes,
        source_name,
        latency_ms,
        call_id,
        usage,
        raw,
        r.provenance.capacity_wait_ms,
    );
    Ok(class(py, &OCR_LAYOUT, "OcrLayout")?.call1(args)?.unbind())
}

/// `polygateway.TelemetryStatus`.
pub(crate) fn telemetry_status(py: Python<'_>, s: TelemetryStatus) -> PyResult<Py<PyAny>> {
    let args = (
        s.degraded,
        s.fatal,
        s.reason,
        s.degraded_for_s,
        s.dropped_rows,
        s.retry_after_s,
    );
    Ok(class(py, &TELEMETRY_STATUS, "TelemetryStatus")?
        .call1(args)?
        .unbind())
}
