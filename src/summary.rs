//! The one shared body summariser (SPEC §6).

/// Fold whitespace and bound a response body for messages and `body_text`.
pub fn summarize_body(body: &str) -> String {
    body.split_whitespace().collect::<Vec<_>>().join(" ")
}
