//! Transports: how one attempt reaches one upstream over HTTP (docs/behaviour.md §7).
//!
//! Each transport implements [`polygateway_actors::Transport`] and classifies its own failures
//! into [`crate::TransportError`]. Retry, switching and breaking are the runtime's business, not
//! this module's.
//!
//! Public: the three shipped transports, [`chat`], [`embeddings`] and [`ocr`], with their request
//! and answer types, and the [`TransportConfig`] each is built from (a source's settings without
//! their governance), for users who run the `polygateway-actors` runtime over them or wrap them in
//! a transport of their own. Crate-private, free to change: `client` (client construction),
//! `endpoint` (a source's JSON endpoint: URL, credentials, pooled client), `http` (status and
//! network-error classification), `quirks` (what a provider needs changed in the messages it is
//! sent), `pool` (a source's pooled client, whose idle timeout follows the upstream's
//! `Keep-Alive: timeout=`), `resend` (one re-send on a fresh connection when a pooled one
//! was found closed), `machine` (a chat attempt's sans-I/O exchange, one per dialect: bytes and
//! `now` in, deltas, deadlines and a verdict out), `drive` (the one loop that runs an exchange
//! over HTTP), `sse` (incremental SSE framing), `wire` (OpenAI JSON shapes), `dialect` (the
//! other chat APIs' codecs: Anthropic's Messages, Gemini), `assembly` (one answer from its
//! frames), `think` (`<think>` tags), `watchdog` (TTFT / inter-token / total deadlines) and the
//! MonkeyOCR readers.

pub(crate) mod assembly;
pub mod chat;
pub(crate) mod client;
mod config;
pub(crate) mod dialect;
pub(crate) mod drive;
pub mod embeddings;
pub(crate) mod endpoint;
pub(crate) mod exchange;
pub(crate) mod http;
pub(crate) mod machine;
pub mod ocr;
pub(crate) mod pool;
pub(crate) mod prefill;
pub(crate) mod quirks;
pub(crate) mod resend;
#[cfg(any(test, feature = "test-util"))]
pub(crate) mod script;
#[cfg(any(test, feature = "test-util"))]
mod simulated;
pub(crate) mod sse;
#[cfg(test)]
mod sse_rechunk;
pub(crate) mod think;
pub(crate) mod watchdog;
pub(crate) mod wire;

pub use chat::{ChatDelta, ChatTransport, ChatWireRequest};
pub use config::TransportConfig;
pub use embeddings::{EmbeddingBatch, EmbeddingTransport, EmbeddingWireRequest};
#[cfg(any(test, feature = "test-util"))]
pub use simulated::DecodingWire;
