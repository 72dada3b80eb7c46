//! Gemini embeddings (`POST {base}/models/{model}:batchEmbedContents`, docs/behaviour.md §7.3):
//! one batch of texts is one request of `EmbedContentRequest`s, answered by one
//! `ContentEmbedding` per request, in request order.
//!
//! Pure codec: no I/O. `transport::embeddings` sends the body on the source's keyed endpoint and
//! checks the vectors as for any source (count, dimension, `NORMALIZE`).

use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::TransportError;

/// The most texts one `batchEmbedContents` request may carry (the API refuses more); an
/// embeddings scope with a Gemini source keeps `BATCH_SIZE` at or below it.
pub(crate) const MAX_BATCH: usize = 100;

/// The method path of a source whose model is `model` (an id without `models/`).
pub(crate) fn path(model: &str) -> String {
    format!("models/{model}:batchEmbedContents")
}

/// The request body: one `EmbedContentRequest` per text, each naming the model as the API
/// requires (`models/{model}`, the same for every request of the batch). `dimensions` (the
/// scope's `EXPECTED_DIM`) is sent as `outputDimensionality`: Gemini's embedding models return
/// their full dimension otherwise, and truncate on request.
pub(crate) fn encode(model: &str, inputs: &[String], dimensions: Option<usize>) -> Value {
    let name = format!("models/{model}");
    let requests: Vec<Value> = inputs
        .iter()
        .map(|text| {
            let mut request = json!({"model": name, "content": {"parts": [{"text": text}]}});
            if let Some(dim) = dimensions {
                request["outputDimensionality"] = json!(dim);
            }
            request
        })
        .collect();
    json!({ "requests": requests })
}

/// One batch's answer.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Embedded {
    /// The vectors, in request order (count not yet checked).
    pub(crate) vectors: Vec<Vec<f32>>,
    /// `usageMetadata.promptTokenCount` when the API reports it.
    pub(crate) prompt_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct Answer {
    #[serde(default)]
    embeddings: Vec<Embedding>,
    #[serde(default, rename = "usageMetadata")]
    usage: Option<Usage>,
}

#[derive(Deserialize)]
struct Embedding {
    #[serde(default)]
    values: Vec<f32>,
}

#[derive(Deserialize)]
struct Usage {
    #[serde(default, rename = "promptTokenCount")]
    prompt_token_count: Option<u64>,
}

/// Decode a 2xx answer. A body that is not the answer's shape is a malformed answer of the
/// source (transient: another attempt or source may answer well), its summary kept.
pub(crate) fn decode(body: &[u8]) -> Result<Embedded, TransportError> {
    let answer: Answer = serde_json::from_slice(body)
        .map_err(|e| TransportError::malformed_body("Gemini embeddings", &e, body))?;
    Ok(Embedded {
        vectors: answer.embeddings.into_iter().map(|e| e.values).collect(),
        prompt_tokens: answer.usage.and_then(|u| u.prompt_token_count),
    })
}

#[cfg(test)]
mod tests {
    use polygateway_actors::{Classify, FailureClass};

    use super::*;

    #[test]
    fn every_text_is_a_request_naming_the_model_and_the_dimension_when_asked() {
        let texts = vec!["first".to_string(), "second".to_string()];
        let body = encode("gemini-embedding-001", &texts, None);
        assert_eq!(
            body,
            json!({"requests": [
                {"model": "models/gemini-embedding-001", "content": {"parts": [{"text": "first"}]}},
                {"model": "models/gemini-embedding-001", "content": {"parts": [{"text": "second"}]}},
            ]})
        );
        let sized = encode("gemini-embedding-001", &texts, Some(768));
        assert_eq!(sized["requests"][1]["outputDimensionality"], 768);
        assert_eq!(
            path("gemini-embedding-001"),
            "models/gemini-embedding-001:batchEmbedContents"
        );
    }

    #[test]
    fn answers_decode_in_order_with_usage_when_reported() {
        let plain =
            decode(br#"{"embeddings": [{"values": [0.5, 1]}, {"values": [2, 3]}]}"#).unwrap();
        assert_eq!(plain.vectors, vec![vec![0.5, 1.0], vec![2.0, 3.0]]);
        assert_eq!(plain.prompt_tokens, None);
        let measured = decode(
            br#"{"embeddings": [{"values": [1]}], "usageMetadata": {"promptTokenCount": 7}}"#,
        )
        .unwrap();
        assert_eq!(measured.prompt_tokens, Some(7));
    }

    #[test]
    fn a_body_of_another_shape_is_a_malformed_answer() {
        let err = decode(b"<html>busy</html>").unwrap_err();
        assert_eq!(err.class(), FailureClass::Transient);
        assert!(err.message.contains("malformed Gemini embeddings body"));
        assert!(err.body_text.contains("busy"));
    }
}
