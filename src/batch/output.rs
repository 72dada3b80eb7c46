//! Output lines in OpenAI's Batch API output format:
//! `{"id", "custom_id", "response": {"status_code", "request_id", "body"} | null, "error": null | {"code", "message"}}`.
//!
//! An answered call, and a call the gateway refused or failed, have a `response` whose `body` is
//! exactly what `polygateway serve` would have answered (the shared [`crate::openai`] rendering);
//! a line that never became a call has `response: null` and an `error` naming what was wrong.

use serde_json::{json, Value};

use super::input::LineError;
use crate::error::GatewayError;
use crate::openai::error::ErrorShape;

/// A fresh output line id (`batch_req_…`).
fn line_id() -> String {
    format!("batch_req_{}", uuid::Uuid::new_v4().simple())
}

/// The line of a call that got an HTTP-shaped answer (`body` a completion, an embeddings list or
/// an error object).
pub(crate) fn answered(custom_id: &str, status_code: u16, request_id: &str, body: Value) -> String {
    json!({
        "id": line_id(),
        "custom_id": custom_id,
        "response": {"status_code": status_code, "request_id": request_id, "body": body},
        "error": null,
    })
    .to_string()
}

/// The line of a call that ended with `error`, and the shape it was rendered from.
pub(crate) fn failed(custom_id: &str, error: &GatewayError) -> (String, ErrorShape) {
    let shape = ErrorShape::from(error);
    let request_id = format!("req_{}", uuid::Uuid::new_v4().simple());
    (
        answered(custom_id, shape.status, &request_id, shape.body()),
        shape,
    )
}

/// The line of an input line that is not a call.
pub(crate) fn rejected_line(error: &LineError) -> String {
    json!({
        "id": line_id(),
        "custom_id": error.custom_id,
        "response": null,
        "error": {"code": error.code, "message": error.message},
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_line_has_no_response_and_names_its_error() {
        let line = rejected_line(&LineError {
            custom_id: Some("x".into()),
            code: "invalid_url",
            message: "line 1: url …".into(),
        });
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["response"], Value::Null);
        assert_eq!(
            (v["custom_id"].as_str(), v["error"]["code"].as_str()),
            (Some("x"), Some("invalid_url"))
        );
        assert!(v["id"].as_str().unwrap().starts_with("batch_req_"));
    }

    #[test]
    fn a_rejected_call_carries_the_servers_status_and_error_body() {
        let e = GatewayError::RequestRejected {
            message: "HTTP 400".into(),
            body_text: "context too long".into(),
        };
        let (line, shape) = failed("c", &e);
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(shape.code, "request_rejected");
        assert_eq!(v["response"]["status_code"], 400);
        assert_eq!(v["response"]["body"]["error"]["code"], "request_rejected");
        assert_eq!(v["error"], Value::Null);
    }
}
