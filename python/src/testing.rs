//! `polygateway.testing`: the runtime's fault-injecting mock upstreams (OpenAI-compatible and
//! MonkeyOCR), started on the process runtime from Python, for tests and benchmarks.
//!
//! Not for: services (the cargo feature `testkit` leaves it out of a production wheel).

use std::time::Duration;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use polygateway_testkit::mock_ocr::{MockOcr, OcrFault};
use polygateway_testkit::{Behaviour, MockUpstream};

use crate::runtime::{self, OnRuntime};

const BEHAVIOURS: &str = "healthy, slow, black_hole, rate_limited, insufficient_quota, \
    unauthorized, forbidden, bad_request, server_error, truncated_stream, early_eof, \
    malformed_frame, empty_completion, reasoning, think_tags, no_usage, scripted_content";

/// A behaviour by name; `content`, `chunks`, `ttft_ms`, `inter_token_ms` (healthy), `delay_ms`
/// (slow), `retry_after_s` (rate_limited), `status` (server_error), `contents` (scripted_content).
fn behaviour(name: &str, params: Option<&Bound<'_, PyDict>>) -> PyResult<Behaviour> {
    let get = |key: &str| -> PyResult<Option<Bound<'_, PyAny>>> {
        match params {
            Some(p) => p.get_item(key),
            None => Ok(None),
        }
    };
    let millis = |key: &str| -> PyResult<Duration> {
        Ok(match get(key)? {
            Some(v) => Duration::from_secs_f64(v.extract::<f64>()? / 1000.0),
            None => Duration::ZERO,
        })
    };
    Ok(match name {
        "healthy" => {
            let content = match get("content")? {
                Some(c) => c.extract::<String>()?,
                None => polygateway_testkit::mock_llm::MOCK_CONTENT.to_string(),
            };
            let chunks = match get("chunks")? {
                Some(c) => c.extract::<usize>()?,
                None => 4,
            };
            Behaviour::Healthy {
                ttft: millis("ttft_ms")?,
                inter_token: millis("inter_token_ms")?,
                chunks,
                content,
            }
        }
        "slow" => Behaviour::Slow {
            delay: millis("delay_ms")?,
        },
        "black_hole" => Behaviour::BlackHole,
        "rate_limited" => Behaviour::RateLimited {
            retry_after_s: get("retry_after_s")?.map(|v| v.extract()).transpose()?,
        },
        "insufficient_quota" => Behaviour::InsufficientQuota,
        "unauthorized" => Behaviour::Unauthorized,
        "forbidden" => Behaviour::Forbidden,
        "bad_request" => Behaviour::BadRequest,
        "server_error" => Behaviour::ServerError(match get("status")? {
            Some(s) => s.extract()?,
            None => 503,
        }),
        "truncated_stream" => Behaviour::TruncatedStream { with_usage: true },
        "early_eof" => Behaviour::EarlyEof,
        "malformed_frame" => Behaviour::MalformedFrame,
        "empty_completion" => Behaviour::EmptyCompletion,
        "reasoning" => Behaviour::Reasoning,
        "think_tags" => Behaviour::ThinkTags,
        "no_usage" => Behaviour::NoUsage,
        "scripted_content" => Behaviour::ScriptedContent(match get("contents")? {
            Some(c) => c.extract()?,
            None => {
                return Err(PyValueError::new_err(
                    "scripted_content needs contents=[...]",
                ))
            }
        }),
        other => {
            return Err(PyValueError::new_err(format!(
                "unknown mock behaviour {other:?}; expected one of: {BEHAVIOURS}"
            )))
        }
    })
}

/// A mock OpenAI-compatible upstream on `127.0.0.1` (chat completions, embeddings, models).
#[pyclass(module = "polygateway._native", frozen, subclass)]
pub(crate) struct NativeMockUpstream {
    mock: OnRuntime<MockUpstream>,
}

#[pymethods]
impl NativeMockUpstream {
    #[new]
    #[pyo3(signature = (behaviour="healthy", **params))]
    fn new(py: Python<'_>, behaviour: &str, params: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let behaviour = self::behaviour(behaviour, params)?;
        let (runtime, generation) = runtime::current()?;
        let mock = py.detach(|| runtime.block_on(MockUpstream::start(behaviour)));
        Ok(Self {
            mock: OnRuntime::new(mock, generation),
        })
    }

    /// `http://127.0.0.1:<port>/v1`: a source's `BASE_URL`.
    #[getter]
    fn base_url(&self) -> PyResult<String> {
        Ok(self.mock.get()?.0.base_url())
    }

    /// Change what the mock does with the next requests.
    #[pyo3(signature = (behaviour, **params))]
    fn set_behaviour(&self, behaviour: &str, params: Option<&Bound<'_, PyDict>>) -> PyResult<()> {
        let behaviour = self::behaviour(behaviour, params)?;
        self.mock.get()?.0.set_behaviour(behaviour);
        Ok(())
    }

    /// Request counts: `total`, `chat`, `embeddings`, `models`, and one per resolved behaviour.
    fn counts<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let counts = self.mock.get()?.0.counts();
        let dict = PyDict::new(py);
        dict.set_item("total", counts.total)?;
        dict.set_item("chat", counts.chat)?;
        dict.set_item("embeddings", counts.embeddings)?;
        dict.set_item("models", counts.models)?;
        for (name, n) in counts.by_behaviour {
            dict.set_item(name, n)?;
        }
        Ok(dict)
    }

    /// The last request bodies received (up to 64, oldest first), as plain Python values.
    fn request_bodies(&self, py: Python<'_>) -> PyResult<Vec<Py<PyAny>>> {
        self.mock
            .get()?
            .0
            .requests()
            .iter()
            .map(|r| crate::convert::json_to_py(py, &r.body))
            .collect()
    }

    /// Requests being served now.
    #[getter]
    fn in_flight(&self) -> PyResult<usize> {
        Ok(self.mock.get()?.0.in_flight())
    }

    /// Open client connections now.
    #[getter]
    fn open_connections(&self) -> PyResult<usize> {
        Ok(self.mock.get()?.0.open_connections())
    }
}

/// A mock MonkeyOCR upstream on `127.0.0.1` (`/ocr/text`, `/parse`, health).
#[pyclass(module = "polygateway._native", frozen, subclass)]
pub(crate) struct NativeMockOcr {
    mock: OnRuntime<MockOcr>,
}

#[pymethods]
impl NativeMockOcr {
    #[new]
    fn new(py: Python<'_>) -> PyResult<Self> {
        let (runtime, generation) = runtime::current()?;
        let mock = py.detach(|| runtime.block_on(MockOcr::start(OcrFault::None)));
        Ok(Self {
            mock: OnRuntime::new(mock, generation),
        })
    }

    /// The base URL a source's `BASE_URL` should be.
    #[getter]
    fn base_url(&self) -> PyResult<String> {
        Ok(self.mock.get()?.0.base_url())
    }

    /// Every request served so far.
    fn total_requests(&self) -> PyResult<u64> {
        Ok(self.mock.get()?.0.total_requests())
    }
}
