//! `polygateway._native`: the extension module under the `polygateway` Python package.
//!
//! The Python layer (`python/polygateway/`) owns the public API — class names, keyword
//! arguments, defaults, the exception hierarchy, pydantic — and calls into this module, which
//! owns the process runtime (`runtime`), the crossing of results back to asyncio (`bridge`),
//! conversions (`convert`, `errors`) and the runtime-backed objects (`client`, `stream`, `batch`,
//! `testing`).
//!
//! Not for: public API decisions (the `.pyi` stubs and the Python modules are the contract).
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod batch;
mod bridge;
mod client;
mod convert;
mod errors;
mod logs;
mod providers;
mod runtime;
mod shared;
mod stream;
#[cfg(feature = "testkit")]
mod testing;

use pyo3::prelude::*;

/// How long the exit hook waits for unclosed clients to flush their telemetry.
const EXIT_FLUSH: std::time::Duration = std::time::Duration::from_secs(2);

/// Flush the clients nobody closed, then shut the process runtime down (the package registers
/// this with `atexit`; the GIL is released meanwhile).
#[pyfunction]
fn _shutdown(py: Python<'_>) {
    py.detach(|| {
        runtime::block_on_live(client::close_live, EXIT_FLUSH);
        runtime::shutdown();
    });
}

/// The extension module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    logs::install();
    m.add_class::<bridge::Bridge>()?;
    m.add_class::<client::NativeGateway>()?;
    m.add_class::<stream::NativeChatStream>()?;
    m.add_class::<batch::NativeBatch>()?;
    m.add_class::<shared::NativeGovernance>()?;
    m.add_function(wrap_pyfunction!(client::schema_sql, m)?)?;
    m.add_function(wrap_pyfunction!(providers::default_profiles, m)?)?;
    // The package version is the crate's: one number for the wheel, the runtime and Python.
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(_shutdown, m)?)?;
    #[cfg(feature = "testkit")]
    {
        m.add_class::<testing::NativeMockUpstream>()?;
        m.add_class::<testing::NativeMockOcr>()?;
    }
    m.add("HAS_TESTKIT", cfg!(feature = "testkit"))?;
    Ok(())
}
