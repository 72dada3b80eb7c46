//! The wire dialects of chat sources behind the one chat transport (docs/behaviour.md §7.5).
//!
//! `transport::chat::ChatTransport` owns HTTP, the watchdog, SSE framing, the assembly of an
//! answer and its end-of-stream verdicts; a dialect owns what differs between APIs: the
//! endpoint and its credentials, the request body built from the canonical call, the answer and
//! its streamed events turned into the assembly's frames, and the rate-limit headers. OpenAI's
//! codec is `transport::wire` (the canonical model is its superset); the others live here, one
//! module each. A dialect is chosen once per source ([`crate::provider::Dialect`]). Anthropic
//! plugs into the transport's own send loop; Gemini, whose stream has no end marker and whose
//! URL depends on streaming, runs its exchange in `gemini::send` over the same pieces (folding
//! the two into one exchange per dialect is the layered call path's work, issue #50).

pub(crate) mod anthropic;
pub(crate) mod gemini;
