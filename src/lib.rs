//! polygateway: a supervised actor runtime that governs calls to LLM, VLM, embedding and OCR
//! upstreams.
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![deny(unreachable_pub)]

pub mod cache;
pub mod config;
pub mod error;
mod gateway;
pub mod metrics;
pub use gateway::{
    Chat, ChatEvent, ChatHandle, ChatStream, EmbeddingHandle, Embeddings, Gateway, GatewayBuilder,
    Kind, Ocr, OcrHandle, ScopeHandle, SourceSnapshot,
};
pub mod provider;
pub mod redis;
pub mod structured;
mod summary;
pub mod telemetry;
#[cfg(feature = "testkit")]
pub mod testkit;
pub mod transport;
pub mod types;
pub mod validate;

pub use error::{GatewayError, TransportError, Unavailable, UnavailableKind, UnavailableReason};
pub use polygateway_actors as actors;
pub use types::*;
