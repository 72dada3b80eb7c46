//! Dialects: how a source's API spells the canonical call model (docs/behaviour.md §7.3).
//!
//! Placeholder module root on the Gemini branch until the dialect seam (dispatch, OpenAI and
//! Anthropic) is merged in; only the Gemini codec lives here for now.

// Not dispatched to until the seam's dispatch is merged into this branch; its unit tests run.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) mod gemini;
