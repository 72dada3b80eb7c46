//! `_native.Gateway`: one runtime `Gateway` and the handle of the scope a Python client serves.
//!
//! Every call method takes the event loop's `Bridge` and an asyncio future created on that loop
//! (the Python layer passes both) and returns at once; the governed call runs on the process
//! runtime. Construction is synchronous, like the original library's `from_env`.
//!
//! Not for: argument defaults, the exception hierarchy or pydantic (the Python layer).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use serde_json::Value;

use polygateway::batch::BatchOptions;
use polygateway::config::{Settings, TelemetryBackendSettings};
use polygateway::structured::SchemaRequest;
use polygateway::telemetry::{telemetry_schema_sql, Pricing, SchemaBackend};
use polygateway::{ChatHandle, EmbeddingHandle, Gateway, GatewayError, OcrHandle, Usage};

use crate::batch::NativeBatch;
use crate::bridge::{spawn, Bridge};
use crate::convert::{self, CallArgs};
use crate::errors;
use crate::logs;
use crate::providers::{self, ProfileTuple};
use crate::runtime::{self, OnRuntime};
use crate::shared::{self, NativeGovernance};
use crate::stream::NativeChatStream;

/// The handle of the client's scope, by kind.
#[derive(Clone)]
enum ScopeOf {
    Chat(ChatHandle),
    Embedding(EmbeddingHandle),
    Ocr(OcrHandle),
}

struct Inner {
    gateway: Gateway,
    scope: ScopeOf,
    /// The limiter-and-breaker store, when it is one the client can hand to another.
    governance: Option<NativeGovernance>,
    /// The pricing table (`PGW_PRICING_PATH`), to price embeddings answers.
    pricing: Option<Arc<Pricing>>,
}

/// Every client's gateway with its runtime generation, so the exit hook can flush those nobody
/// closed.
static LIVE: Mutex<Vec<(u64, Weak<Inner>)>> = Mutex::new(Vec::new());

/// Shutdowns started by dropped clients (with their generation), maybe still running.
static CLOSING: Mutex<Vec<(u64, tokio::task::JoinHandle<()>)>> = Mutex::new(Vec::new());

fn register(inner: &Arc<Inner>, generation: u64) {
    let mut live = LIVE.lock().unwrap_or_else(|e| e.into_inner());
    live.retain(|(_, w)| w.strong_count() > 0);
    live.push((generation, Arc::downgrade(inner)));
}

/// Shut down (flush telemetry, stop actors) every gateway of `generation` still alive —
/// `aclose()`d ones return at once — and wait for the shutdowns dropped clients started. Run by
/// the exit hook before the runtime stops. Gateways of an older generation (the parent's, in a
/// forked child) are left alone: their runtime's threads do not exist here.
pub(crate) async fn close_live(generation: u64) {
    let live: Vec<Arc<Inner>> = LIVE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|(g, _)| *g == generation)
        .filter_map(|(_, w)| w.upgrade())
        .collect();
    let mut closing = Vec::new();
    for (g, task) in std::mem::take(&mut *CLOSING.lock().unwrap_or_else(|e| e.into_inner())) {
        if g == generation {
            closing.push(task);
        } else {
            std::mem::forget(task); // belongs to the parent's runtime
        }
    }
    futures::future::join_all(live.iter().map(|inner| inner.gateway.shutdown())).await;
    futures::future::join_all(closing).await;
}

/// A built runtime serving one scope (the Python clients wrap it).
#[pyclass(module = "polygateway._native", frozen)]
pub(crate) struct NativeGateway {
    inner: OnRuntime<Arc<Inner>>,
    scope_name: String,
}

/// The settings under the original library's assembly rules (required keys, no derived
/// watchdog: `Settings::from_env_original`), from a mapping, a `.env` file under the process
/// environment, or the process environment over `./.env`.
fn settings_from(
    env: Option<BTreeMap<String, String>>,
    dotenv: Option<PathBuf>,
) -> PyResult<Settings> {
    let process = || std::env::vars().collect::<BTreeMap<String, String>>();
    let parsed = match (env, dotenv) {
        (Some(map), dotenv) => Settings::from_env_original(dotenv.as_deref(), &map),
        (None, Some(path)) => Settings::from_env_original(Some(&path), &process()),
        (None, None) => {
            let local = std::path::Path::new(".env");
            Settings::from_env_original(local.is_file().then_some(local), &process())
        }
    };
    parsed.map_err(|e| errors::config_error(e.to_string()))
}

/// The original library writes `PGW_TELEMETRY_SQLITE_PATH=logs/telemetry.db` in its tutorial:
/// the file's directory is created when missing, so the first rows land; a directory that
/// cannot be created is refused here, naming the key.
fn create_telemetry_directory(settings: &Settings) -> PyResult<()> {
    let TelemetryBackendSettings::Sqlite { path } = &settings.telemetry.backend else {
        return Ok(());
    };
    match std::path::Path::new(path).parent() {
        Some(dir) if !dir.as_os_str().is_empty() && !dir.exists() => std::fs::create_dir_all(dir)
            .map_err(|e| {
                errors::config_error(format!(
                    "PGW_TELEMETRY_SQLITE_PATH: cannot create the directory {} for {path}: {e}",
                    dir.display()
                ))
            }),
        _ => Ok(()),
    }
}

fn wrong_kind(scope: &str, kind: &str) -> GatewayError {
    GatewayError::SourceNotConfigured(format!(
        "scope {scope} is not a {kind} scope (OCR… scopes speak MonkeyOCR, EMBED… scopes \
         embeddings, the others chat)"
    ))
}

/// Call arguments shared by chat, embed and OCR (positional after the payload, from the Python
/// layer that owns the keyword names and defaults).
macro_rules! call_args {
    ($s:ident, $p:ident, $c:ident, $n:ident, $st:ident, $o:ident, $t:ident, $m:ident) => {
        convert::options(CallArgs {
            session_id: $s,
            parent_call_id: $p,
            cache_salt: $c,
            cache_namespace: $n,
            stream: $st,
            overlay_json: $o,
            tenant_id: $t,
            meta: $m,
        })?
    };
}

impl NativeGateway {
    fn chat_handle(&self) -> PyResult<(ChatHandle, tokio::runtime::Handle)> {
        let (inner, runtime) = self.inner.get()?;
        match &inner.scope {
            ScopeOf::Chat(h) => Ok((h.clone(), runtime)),
            _ => Err(errors::to_py_now(wrong_kind(&self.scope_name, "chat"))),
        }
    }
}

#[pymethods]
impl NativeGateway {
    /// Build from the environment (`env=None`: the process environment over `./.env`), from a
    /// mapping of configuration keys, or from a `.env` file; `kind` is `chat`, `embedding` or `ocr`.
    /// `governance` is another client's store to share (`limiter=`/`breaker=`), `profiles` the
    /// provider profiles added to the built-in ones (`registry=`).
    #[new]
    #[pyo3(signature = (scope, kind, env=None, dotenv=None, governance=None, profiles=None))]
    fn new(
        py: Python<'_>,
        scope: String,
        kind: &str,
        env: Option<BTreeMap<String, String>>,
        dotenv: Option<PathBuf>,
        governance: Option<PyRef<'_, NativeGovernance>>,
        profiles: Option<Vec<ProfileTuple>>,
    ) -> PyResult<Self> {
        let settings = settings_from(env, dotenv)?;
        create_telemetry_directory(&settings)?;
        let store = shared::store_for(&settings, governance.as_deref())?;
        let registry = profiles.map(providers::registry).transpose()?;
        let pricing = match &settings.pricing_path {
            Some(path) => {
                Some(Arc::new(Pricing::load(path).map_err(|e| {
                    errors::config_error(format!("PGW_PRICING_PATH: {e}"))
                })?))
            }
            None => None,
        };
        let (runtime, generation) = runtime::current()?;
        let scope_name = scope.to_uppercase();
        let kind = kind.to_string();
        let built = py.detach(|| {
            runtime.block_on(async {
                let mut builder = Gateway::builder(settings).default_scope(&scope_name);
                builder = shared::apply(builder, store.as_ref());
                if let Some(registry) = registry {
                    builder = builder.providers(registry);
                }
                let gateway = builder.build().await?;
                let handle = match kind.as_str() {
                    "chat" => gateway.chat_scope(&scope_name).map(ScopeOf::Chat),
                    "embedding" => gateway.embedding_scope(&scope_name).map(ScopeOf::Embedding),
                    _ => gateway.ocr_scope(&scope_name).map(ScopeOf::Ocr),
                };
                match handle {
                    Ok(scope) => Ok(Inner {
                        gateway,
                        scope,
                        governance: store,
                        pricing,
                    }),
                    Err(_) => {
                        gateway.shutdown().await;
                        Err(wrong_kind(&scope_name, &kind))
                    }
                }
            })
        });
        // What the build logged (a telemetry backend that cannot write) reaches `logging` now.
        logs::drain(py);
        let inner = Arc::new(built.map_err(errors::to_py_now)?);
        register(&inner, generation);
        Ok(Self {
            inner: OnRuntime::new(inner, generation),
            scope_name,
        })
    }

    /// The scope this client serves.
    #[getter]
    fn scope(&self) -> &str {
        &self.scope_name
    }

    /// The limiter-and-breaker store, to share with another client; `None` when the limiter and
    /// the breaker live in different kinds of backend.
    #[getter]
    fn governance(&self) -> PyResult<Option<NativeGovernance>> {
        let (inner, _) = self.inner.get()?;
        Ok(inner.governance.clone())
    }

    /// One governed chat call; `future` gets the `LLMResponse`.
    #[pyo3(signature = (bridge, future, messages, session_id, parent_call_id, cache_salt, cache_namespace, stream, overlay, tenant_id, meta, priority, deadline_s, weight, json_mode))]
    #[allow(clippy::too_many_arguments)]
    fn chat<'py>(
        &self,
        bridge: &Bridge,
        future: &Bound<'py, PyAny>,
        messages: &str,
        session_id: Option<String>,
        parent_call_id: Option<String>,
        cache_salt: Option<String>,
        cache_namespace: Option<String>,
        stream: bool,
        overlay: Option<String>,
        tenant_id: Option<String>,
        meta: Option<Bound<'py, PyDict>>,
        priority: Option<String>,
        deadline_s: Option<f64>,
        weight: Option<u64>,
        json_mode: bool,
    ) -> PyResult<()> {
        let (handle, runtime) = self.chat_handle()?;
        let messages = convert::messages(messages)?;
        let options = call_args!(
            session_id,
            parent_call_id,
            cache_salt,
            cache_namespace,
            stream,
            overlay,
            tenant_id,
            meta
        );
        let mut options = convert::call_order(options, priority, deadline_s, weight)?;
        if json_mode {
            options = options.structured(polygateway::Structured::Json);
        }
        spawn(
            &runtime,
            bridge,
            future,
            async move { handle.chat_with(messages, options).await },
            |py, out| {
                out.map_err(|e| errors::to_py(py, e))
                    .and_then(|r| convert::llm_response(py, r))
            },
        )
    }

    /// A governed chat stream (read with `ChatStream.next_batch`).
    #[pyo3(signature = (messages, session_id, parent_call_id, cache_salt, cache_namespace, overlay, tenant_id, meta))]
    #[allow(clippy::too_many_arguments)]
    fn chat_stream<'py>(
        &self,
        messages: &str,
        session_id: Option<String>,
        parent_call_id: Option<String>,
        cache_salt: Option<String>,
        cache_namespace: Option<String>,
        overlay: Option<String>,
        tenant_id: Option<String>,
        meta: Option<Bound<'py, PyDict>>,
    ) -> PyResult<NativeChatStream> {
        let (handle, runtime) = self.chat_handle()?;
        let messages = convert::messages(messages)?;
        let options = call_args!(
            session_id,
            parent_call_id,
            cache_salt,
            cache_namespace,
            true,
            overlay,
            tenant_id,
            meta
        );
        let _entered = runtime.enter();
        Ok(NativeChatStream::new(
            handle.chat_stream(messages, options),
            self.inner.generation(),
        ))
    }

    /// One governed structured chat call against a JSON Schema; `validate(json_text)` returns
    /// `None` when the answer is accepted, else the list of validation errors (fed back on the
    /// re-ask). It runs on a runtime thread, with the GIL taken for its duration.
    #[pyo3(signature = (bridge, future, messages, schema_name, schema, validate, session_id, parent_call_id, cache_salt, cache_namespace, stream, overlay, tenant_id, meta, priority, deadline_s, weight))]
    #[allow(clippy::too_many_arguments)]
    fn chat_schema<'py>(
        &self,
        bridge: &Bridge,
        future: &Bound<'py, PyAny>,
        messages: &str,
        schema_name: String,
        schema: &str,
        validate: Py<PyAny>,
        session_id: Option<String>,
        parent_call_id: Option<String>,
        cache_salt: Option<String>,
        cache_namespace: Option<String>,
        stream: bool,
        overlay: Option<String>,
        tenant_id: Option<String>,
        meta: Option<Bound<'py, PyDict>>,
        priority: Option<String>,
        deadline_s: Option<f64>,
        weight: Option<u64>,
    ) -> PyResult<()> {
        let (handle, runtime) = self.chat_handle()?;
        let messages = convert::messages(messages)?;
        let options = call_args!(
            session_id,
            parent_call_id,
            cache_salt,
            cache_namespace,
            stream,
            overlay,
            tenant_id,
            meta
        );
        let options = convert::call_order(options, priority, deadline_s, weight)?;
        let schema: Value = serde_json::from_str(schema).map_err(|e| {
            pyo3::exceptions::PyValueError::new_err(format!("structured schema is not JSON: {e}"))
        })?;
        let request = SchemaRequest::from_schema(&schema_name, schema);
        let check = move |value: &Value| check_in_python(&validate, value);
        spawn(
            &runtime,
            bridge,
            future,
            async move {
                handle
                    .chat_structured_schema(messages, options, request, check)
                    .await
            },
            |py, out| {
                out.map_err(|e| errors::to_py(py, e))
                    .and_then(|r| convert::llm_response(py, r))
            },
        )
    }

    /// One governed embeddings call (batched per `{SCOPE}__BATCH_SIZE`).
    #[pyo3(signature = (bridge, future, texts, session_id, parent_call_id, tenant_id, meta))]
    #[allow(clippy::too_many_arguments)]
    fn embed<'py>(
        &self,
        bridge: &Bridge,
        future: &Bound<'py, PyAny>,
        texts: Vec<String>,
        session_id: Option<String>,
        parent_call_id: Option<String>,
        tenant_id: Option<String>,
        meta: Option<Bound<'py, PyDict>>,
    ) -> PyResult<()> {
        let (inner, runtime) = self.inner.get()?;
        let pricing = inner.pricing.clone();
        let ScopeOf::Embedding(handle) = inner.scope.clone() else {
            return Err(errors::to_py_now(wrong_kind(&self.scope_name, "embedding")));
        };
        let (cache_salt, cache_namespace, overlay) = (None, None, None);
        let options = call_args!(
            session_id,
            parent_call_id,
            cache_salt,
            cache_namespace,
            true,
            overlay,
            tenant_id,
            meta
        );
        spawn(
            &runtime,
            bridge,
            future,
            async move { handle.embed(texts, options).await },
            move |py, out| {
                out.map_err(|e| errors::to_py(py, e)).and_then(|r| {
                    let cost = pricing.as_deref().and_then(|p| embedding_cost(p, &r));
                    convert::embedding_response(py, r, cost)
                })
            },
        )
    }

    /// One governed OCR call: `layout=False` transcribes text, `True` parses the layout.
    #[pyo3(signature = (bridge, future, image, layout, session_id, parent_call_id, tenant_id, meta))]
    #[allow(clippy::too_many_arguments)]
    fn ocr<'py>(
        &self,
        bridge: &Bridge,
        future: &Bound<'py, PyAny>,
        image: &Bound<'py, PyBytes>,
        layout: bool,
        session_id: Option<String>,
        parent_call_id: Option<String>,
        tenant_id: Option<String>,
        meta: Option<Bound<'py, PyDict>>,
    ) -> PyResult<()> {
        let handle = self.ocr_handle()?;
        let (_, runtime) = self.inner.get()?;
        let image = image.as_bytes().to_vec();
        let (cache_salt, cache_namespace, overlay) = (None, None, None);
        let options = call_args!(
            session_id,
            parent_call_id,
            cache_salt,
            cache_namespace,
            true,
            overlay,
            tenant_id,
            meta
        );
        if layout {
            spawn(
                &runtime,
                bridge,
                future,
                async move { handle.parse_layout(image, options).await },
                |py, out| {
                    out.map_err(|e| errors::to_py(py, e))
                        .and_then(|r| convert::ocr_layout(py, r))
                },
            )
        } else {
            spawn(
                &runtime,
                bridge,
                future,
                async move { handle.recognize_text(image, options).await },
                |py, out| {
                    out.map_err(|e| errors::to_py(py, e))
                        .and_then(|r| convert::ocr_text(py, r))
                },
            )
        }
    }

    /// Start a batch job (`Gateway::batch`): lines whose `model` names no scope or alias go to
    /// `scope` (this client's scope when `None`); Python feeds the lines and reads the results
    /// through the returned object. `schema` is a JSON Schema (text) for chat lines without a
    /// `response_format`; `journal` the SQLite file that makes the job resumable.
    #[pyo3(signature = (scope, schema, max_concurrency, max_item_age_s, journal))]
    fn batch(
        &self,
        scope: Option<String>,
        schema: Option<String>,
        max_concurrency: usize,
        max_item_age_s: f64,
        journal: Option<PathBuf>,
    ) -> PyResult<NativeBatch> {
        let (inner, runtime) = self.inner.get()?;
        let schema = schema
            .map(|text| serde_json::from_str::<Value>(&text))
            .transpose()
            .map_err(|e| PyValueError::new_err(format!("schema is not JSON: {e}")))?;
        let max_item_age =
            std::time::Duration::try_from_secs_f64(max_item_age_s).map_err(|_| {
                PyValueError::new_err("max_item_age_s must be a finite number of seconds >= 0")
            })?;
        let options = BatchOptions {
            scope: Some(scope.unwrap_or_else(|| self.scope_name.clone())),
            schema,
            max_concurrency: max_concurrency.max(1),
            max_item_age,
            journal,
        };
        let gateway = inner.gateway.clone();
        NativeBatch::start(&runtime, self.inner.generation(), move |lines| {
            gateway.batch(lines, options)
        })
        .map_err(errors::to_py_now)
    }

    /// Per-source health probe of an OCR scope: `{source_name: healthy}`.
    fn check_health<'py>(&self, bridge: &Bridge, future: &Bound<'py, PyAny>) -> PyResult<()> {
        let handle = self.ocr_handle()?;
        let (_, runtime) = self.inner.get()?;
        spawn(
            &runtime,
            bridge,
            future,
            async move { handle.check_health().await },
            |py, health| Ok(health.into_pyobject(py)?.into_any().unbind()),
        )
    }

    /// The telemetry sink's read-only status snapshot.
    fn telemetry_status(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        logs::drain(py);
        let (inner, _) = self.inner.get()?;
        convert::telemetry_status(py, inner.gateway.telemetry_status())
    }

    /// Telemetry rows accepted by the writer since start (written or dropped, see the status).
    fn telemetry_rows_accepted(&self) -> PyResult<u64> {
        let (inner, _) = self.inner.get()?;
        Ok(inner.gateway.telemetry_rows_accepted())
    }

    /// Governance leases this scope holds now (0 once every call has released its permits).
    fn leases_held<'py>(&self, bridge: &Bridge, future: &Bound<'py, PyAny>) -> PyResult<()> {
        let (inner, runtime) = self.inner.get()?;
        let inner = inner.clone();
        let scope = self.scope_name.clone();
        spawn(
            &runtime,
            bridge,
            future,
            async move { inner.gateway.leases_held(&scope).await },
            |py, out| {
                out.map_err(|e| errors::to_py(py, e))
                    .and_then(|n| Ok(n.into_pyobject(py)?.into_any().unbind()))
            },
        )
    }

    /// Flush telemetry and stop the runtime's actors; later calls fail with `GatewayClosedError`.
    fn aclose<'py>(&self, bridge: &Bridge, future: &Bound<'py, PyAny>) -> PyResult<()> {
        let (inner, runtime) = self.inner.get()?;
        let inner = inner.clone();
        spawn(
            &runtime,
            bridge,
            future,
            async move { inner.gateway.shutdown().await },
            |py, ()| Ok(py.None()),
        )
    }
}

impl Drop for NativeGateway {
    /// A client dropped without `aclose()` still flushes its telemetry and stops its actors.
    fn drop(&mut self) {
        if let Ok((inner, runtime)) = self.inner.get() {
            let inner = inner.clone();
            let task = runtime.spawn(async move { inner.gateway.shutdown().await });
            let mut closing = CLOSING.lock().unwrap_or_else(|e| e.into_inner());
            closing.retain(|(_, t)| !t.is_finished());
            closing.push((self.inner.generation(), task));
        }
    }
}

impl NativeGateway {
    fn ocr_handle(&self) -> PyResult<OcrHandle> {
        let (inner, _) = self.inner.get()?;
        match &inner.scope {
            ScopeOf::Ocr(h) => Ok(h.clone()),
            _ => Err(errors::to_py_now(wrong_kind(&self.scope_name, "OCR"))),
        }
    }
}

/// What an embeddings answer cost: its prompt tokens at the model's input price (embeddings have
/// no completion), `None` when the table has no price for the model or usage is unknown.
fn embedding_cost(pricing: &Pricing, r: &polygateway::EmbeddingResponse) -> Option<f64> {
    let usage = Usage {
        prompt_tokens: r.prompt_tokens,
        source: r.usage_source,
        ..Usage::default()
    };
    pricing.cost(&r.model, &usage)
}

/// Run the Python validator on one repaired answer (see `NativeGateway::chat_schema`).
fn check_in_python(validate: &Py<PyAny>, value: &Value) -> Result<(), Vec<String>> {
    let text = value.to_string();
    let verdict = tokio::task::block_in_place(|| {
        Python::try_attach(|py| -> PyResult<Option<Vec<String>>> {
            validate.bind(py).call1((text,))?.extract()
        })
    });
    match verdict {
        Some(Ok(None)) => Ok(()),
        Some(Ok(Some(errors))) => Err(errors),
        Some(Err(e)) => Err(vec![format!("validator raised: {e}")]),
        None => Err(vec!["the Python interpreter is shutting down".to_string()]),
    }
}

/// `telemetry_schema_sql(backend)`: the DDL the runtime itself runs, for migration files.
#[pyfunction]
pub(crate) fn schema_sql(backend: &str) -> PyResult<String> {
    let backend: SchemaBackend = backend
        .parse()
        .map_err(pyo3::exceptions::PyValueError::new_err)?;
    Ok(telemetry_schema_sql(backend))
}
