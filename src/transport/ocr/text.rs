//! `recognize_text`: `POST {base}/ocr/text` → `{"success", "content", "message"}`.
//!
//! Only the wire exchange and the answer's reading live here; timing, provenance and the
//! attempt deadline are the transport's (`mod.rs`).

use bytes::Bytes;
use reqwest::Client;
use serde_json::Value;

use super::answer::successful_envelope;
use super::image::ImageKind;
use super::upload::post_image;
use crate::error::TransportError;

const LEG: &str = "/ocr/text";

/// Upload the image and return the transcription with the raw answer.
pub(super) async fn recognize(
    client: &Client,
    base_url: &str,
    image: &Bytes,
    kind: ImageKind,
) -> Result<(String, Value), TransportError> {
    let url = super::endpoint(base_url, "ocr/text")?;
    let body = post_image(client, url, LEG, image, kind).await?;
    text_from_answer(&body)
}

/// Read a 200 answer of `/ocr/text`. An empty `content` is a page without text, not a failure.
fn text_from_answer(body: &str) -> Result<(String, Value), TransportError> {
    let object = successful_envelope(LEG, body)?;
    match object.get("content") {
        Some(Value::String(text)) => {
            let text = text.clone();
            Ok((text, Value::Object(object)))
        }
        other => {
            let mut err = TransportError::invalid(format!(
                "MonkeyOCR {LEG}: success=true but content is {}",
                other.map_or("missing".to_owned(), |v| format!("not a string ({v})"))
            ));
            err.status = Some(200);
            err.body_text = crate::error::summarize_body(body);
            Err(err)
        }
    }
}

#[cfg(test)]
mod tests {
    use polygateway_actors::FailureClass;

    use super::*;

    #[test]
    fn content_is_the_text_and_empty_content_is_legitimate() {
        let (text, raw) = text_from_answer(
            r#"{"success":true,"task_type":"text","content":"第一行\nline 2","message":null}"#,
        )
        .unwrap();
        assert_eq!(text, "第一行\nline 2");
        assert_eq!(raw["task_type"], "text");
        let (text, _) = text_from_answer(r#"{"success":true,"content":""}"#).unwrap();
        assert_eq!(text, "");
    }

    #[test]
    fn success_without_string_content_is_invalid() {
        for body in [
            r#"{"success":true}"#,
            r#"{"success":true,"content":null}"#,
            r#"{"success":true,"content":3}"#,
        ] {
            let err = text_from_answer(body).unwrap_err();
            assert_eq!(err.class, FailureClass::ResultInvalid, "{body}");
            assert!(err.answered);
        }
    }
}
