//! Dialects: how a source's API spells the canonical call model (docs/behaviour.md §7.3).
//!
//! On the Gemini branch before the dialect seam (dispatch, OpenAI and Anthropic) is merged in:
//! only the Gemini codec lives here, and `ChatTransport` sends a Gemini source's attempts to it.

pub(crate) mod gemini;
