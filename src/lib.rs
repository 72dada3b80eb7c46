//! polygateway: a supervised actor runtime that governs calls to LLM, VLM, embedding and OCR
//! upstreams.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod config;
pub mod error;
mod summary;
pub mod types;
pub mod validate;

pub use error::{GatewayError, TransportError, Unavailable, UnavailableKind, UnavailableReason};
pub use polygateway_actors as actors;
pub use types::*;
