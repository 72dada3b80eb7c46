//! polygateway: a supervised actor runtime that governs calls to LLM, VLM, embedding and OCR
//! upstreams.
//!
//! A service builds one [`Gateway`] (from the environment, from [`config::Settings`], or with a
//! [`GatewayBuilder`] that injects backends) and calls it through cheap typed handles
//! ([`ChatHandle`], [`EmbeddingHandle`], [`OcrHandle`]). Each call gets one typed answer or one
//! [`GatewayError`]; in between the runtime picks a source, applies the shared limits and the
//! circuit breaker, retries on another source, guards streams, caches, repairs structured output
//! and writes a telemetry row per attempt.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::collections::BTreeMap;
//! use polygateway::config::Settings;
//! use polygateway_testkit::{Behaviour, MockUpstream};
//! use polygateway::{Gateway, Message};
//!
//! // A built-in mock upstream stands in for an OpenAI-compatible endpoint.
//! let mock = MockUpstream::start(Behaviour::healthy_with("hi there")).await;
//! let env: BTreeMap<String, String> = [
//!     ("PGW_LIMITER_BACKEND", "memory".to_string()),
//!     ("PGW_BREAKER_BACKEND", "memory".to_string()),
//!     ("PGW_TELEMETRY_BACKEND", "none".to_string()),
//!     ("LLM__OPENAI__1__BASE_URL", mock.base_url()),
//!     ("LLM__OPENAI__1__API_KEY", "sk-demo".to_string()),
//!     ("LLM__OPENAI__1__MODEL", "gpt-4o-mini".to_string()),
//! ]
//! .into_iter()
//! .map(|(k, v)| (k.to_string(), v))
//! .collect();
//!
//! let gw = Gateway::from_settings(Settings::from_map(&env)?, "LLM").await?;
//! let answer = gw.chat(vec![Message::user("hello")]).await?;
//! assert_eq!(answer.content, "hi there");
//! assert_eq!(answer.source_name, "openai_1");
//! gw.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! Where to look: [`Gateway`] and its handles for calls; [`config`] for every setting;
//! [`types`] for messages, options and answers; [`error`] for what reaches the caller;
//! [`telemetry`] for the rows and their sinks; [`metrics`] for the metric names; [`ports`] and
//! [`policy`] for the parts you can replace with your own (limiter, breaker, transport, clock,
//! pacer, selector). The fault-injecting mock upstreams are the `polygateway-testkit` crate.
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![deny(unreachable_pub)]

pub mod batch;
pub mod cache;
mod call;
pub mod config;
pub mod error;
#[cfg(test)]
mod fuzz_parsers;
mod gateway;
pub mod metrics;
mod openai;
pub mod policy;
pub mod ports;
pub use gateway::{
    BudgetStatus, Chat, ChatEvent, ChatHandle, ChatStream, EmbeddingHandle, Embeddings, Gateway,
    GatewayBuilder, Kind, Ocr, OcrHandle, ScopeHandle, SourceSnapshot,
};
pub mod provider;
#[cfg(feature = "redis")]
pub mod redis;
#[cfg(feature = "server")]
pub mod server;
pub mod structured;
mod summary;
pub mod telemetry;
#[cfg(test)]
mod test_support;
pub mod transport;
pub mod types;
pub mod validate;

pub use error::{GatewayError, TransportError, Unavailable, UnavailableKind, UnavailableReason};
/// The `schemars` version the typed structured-output API is built on (`chat_structured::<T>`
/// needs `T: schemars::JsonSchema`): derive through this path and no version can mismatch —
/// `#[derive(polygateway::schemars::JsonSchema)]` with `#[schemars(crate = "polygateway::schemars")]`.
pub use schemars;
pub use types::*;

/// The README's Rust blocks, compiled as doc tests so the README cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

// The Rust blocks of the manual's chapters (the mdBook under `docs/`), one item per chapter that
// has any, so a doc test's name says which chapter it comes from.
#[cfg(doctest)]
#[doc = include_str!("../docs/manual/governance.md")]
pub struct GovernanceChapterDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/manual/caching-structured.md")]
pub struct CachingStructuredChapterDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/manual/embeddings-ocr.md")]
pub struct EmbeddingsOcrChapterDoctests;
#[cfg(doctest)]
#[doc = include_str!("../docs/manual/observability.md")]
pub struct ObservabilityChapterDoctests;
