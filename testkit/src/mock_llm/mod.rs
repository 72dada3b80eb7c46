//! A mock OpenAI-compatible upstream with fault injection (axum on `127.0.0.1`, random port).
//!
//! Serves `POST /v1/chat/completions` (streaming or not, as the request's `stream` says),
//! `POST /v1/embeddings` and `GET /v1/models`. What it does per request is a [`Behaviour`]:
//! healthy, slow, black hole, every HTTP failure class, every stream defect the chat transport
//! must classify, probabilistic mixes and scripts. It counts requests (total and per behaviour),
//! keeps the last request bodies, and tracks in-flight requests and open connections, so tests
//! can see what was sent and that an aborted stream was let go.
//!
//! Built to be cheap under soaks (10k+ requests): no per-request logging, frames without delay
//! are sent together in chunks of up to 64 KB. Not a general HTTP mock; nothing in the runtime
//! uses it.
//!
//! Files, one concern each: `behaviour` (the fault model), `fixture` (what the answers say),
//! `recording` (counters and recorded requests), `shared` (the state the handlers share),
//! `upstream` (the handle: start, read, change, stop), `server` (the axum handlers), `script`
//! (what a chat answer says), `wire` (SSE frames, JSON bodies and their pacing), `embeddings`
//! and `listener` (connections counted and ended).

mod behaviour;
mod embeddings;
mod fixture;
mod listener;
mod recording;
mod script;
mod server;
mod shared;
mod upstream;
mod wire;

pub use behaviour::Behaviour;
pub use embeddings::mock_embedding;
pub use fixture::{
    MOCK_CACHED_TOKENS, MOCK_CONTENT, MOCK_PROMPT_TOKENS, MOCK_REASONING_TOKENS, MOCK_THINKING,
};
pub use recording::{MockCounts, RecordedRequest};
pub use upstream::MockUpstream;
