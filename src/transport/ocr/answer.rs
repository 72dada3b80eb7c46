//! The JSON envelope both OCR endpoints answer with on HTTP 200:
//! `{"success": bool, "message": str?, …}`.
//!
//! A body that is not a JSON object is Transient (a proxy page, a truncated answer: the service
//! did not really answer). `success != true` is the service telling us it failed; MonkeyOCR
//! reports *every* `/ocr/*` failure that way, so it is ResultInvalid with `answered = true` —
//! the breaker records a success, because the service is demonstrably up (docs/behaviour.md §7.4).

use polygateway_actors::SourceReason;
use serde_json::{Map, Value};

use crate::error::{summarize_body, TransportError};

/// Parse a 200 answer of `leg` and require `success == true`.
pub(super) fn successful_envelope(
    leg: &str,
    body: &str,
) -> Result<Map<String, Value>, TransportError> {
    let summary = summarize_body(body);
    let object = match serde_json::from_str::<Value>(body) {
        Ok(Value::Object(object)) => object,
        Ok(_) | Err(_) => {
            let mut err = TransportError::transient(
                SourceReason::NetworkError,
                format!("MonkeyOCR {leg}: HTTP 200 with a malformed JSON answer: {summary}"),
            );
            err.status = Some(200);
            err.body_text = summary;
            err.answered = true;
            return Err(err);
        }
    };
    if object.get("success") != Some(&Value::Bool(true)) {
        let said = object
            .get("message")
            .and_then(Value::as_str)
            .filter(|m| !m.trim().is_empty())
            .or_else(|| object.get("detail").and_then(Value::as_str))
            .unwrap_or("(no message)");
        let mut err = TransportError::invalid(format!(
            "MonkeyOCR {leg}: service answered success={}: {said}",
            object
                .get("success")
                .map_or("<missing>".to_owned(), Value::to_string)
        ));
        err.status = Some(200);
        err.body_text = summary;
        return Err(err);
    }
    Ok(object)
}

#[cfg(test)]
mod tests {
    use polygateway_actors::{AttemptVerdict, Classify, FailureClass};

    use super::*;

    #[test]
    fn success_true_passes_the_object_through() {
        let object =
            successful_envelope("/ocr/text", r#"{"success":true,"content":"hi","x":1}"#).unwrap();
        assert_eq!(object["content"], "hi");
    }

    #[test]
    fn success_false_is_invalid_but_alive_and_names_the_message() {
        let body = r#"{"success":false,"task_type":"text","content":"","message":"OCR task failed: CUDA out of memory"}"#;
        let err = successful_envelope("/ocr/text", body).unwrap_err();
        assert_eq!(err.class, FailureClass::ResultInvalid);
        assert!(err.proves_alive());
        assert_eq!(
            AttemptVerdict::of_error(&err),
            AttemptVerdict::AliveButUnusable
        );
        assert!(
            err.message.contains("CUDA out of memory"),
            "{}",
            err.message
        );
        assert_eq!(err.status, Some(200));
        assert!(err.body_text.contains("OCR task failed"));
        for body in [
            r#"{"content":"x"}"#,
            r#"{"success":"true"}"#,
            r#"{"success":null}"#,
        ] {
            let err = successful_envelope("/parse", body).unwrap_err();
            assert_eq!(err.class, FailureClass::ResultInvalid, "{body}");
        }
    }

    #[test]
    fn malformed_json_is_transient() {
        for body in [
            "<html>502 Bad Gateway</html>",
            "",
            "[1,2]",
            r#"{"success":tr"#,
        ] {
            let err = successful_envelope("/ocr/text", body).unwrap_err();
            assert_eq!(err.class, FailureClass::Transient, "{body:?}");
            assert_eq!(AttemptVerdict::of_error(&err), AttemptVerdict::Failure);
        }
    }
}
