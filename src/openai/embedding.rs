//! `POST /v1/embeddings` bodies: the accepted `input` and `encoding_format`, and an
//! [`EmbeddingResponse`] as OpenAI's `list` of `embedding` objects.

use base64::Engine;
use serde_json::{json, Value};

use crate::types::EmbeddingResponse;

/// The texts of `input`: a string or an array of strings (token arrays are not served), never
/// empty. The error names what is allowed.
pub(crate) fn input_texts(input: Value) -> Result<Vec<String>, &'static str> {
    let texts: Vec<String> = match input {
        Value::String(s) => vec![s],
        Value::Array(items) if items.iter().all(Value::is_string) => items
            .into_iter()
            .filter_map(|v| match v {
                Value::String(s) => Some(s),
                _ => None,
            })
            .collect(),
        _ => {
            return Err(
                "input must be a string or an array of strings (token arrays are not served)",
            )
        }
    };
    if texts.is_empty() {
        return Err("input must not be empty");
    }
    Ok(texts)
}

/// Whether `encoding_format` asks for base64 (little-endian f32) rather than float arrays.
pub(crate) fn wants_base64(encoding_format: Option<&str>) -> Result<bool, &'static str> {
    match encoding_format {
        None | Some("float") => Ok(false),
        Some("base64") => Ok(true),
        Some(_) => Err("encoding_format must be float or base64"),
    }
}

/// OpenAI's embeddings answer: vectors in input order, `model` as the caller named it.
pub(crate) fn embedding_json(out: &EmbeddingResponse, model: &str, base64: bool) -> Value {
    let data: Vec<Value> = out
        .vectors
        .iter()
        .enumerate()
        .map(|(index, v)| {
            let embedding = if base64 {
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                json!(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                json!(v)
            };
            json!({"object": "embedding", "index": index, "embedding": embedding})
        })
        .collect();
    json!({
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": out.prompt_tokens, "total_tokens": out.prompt_tokens},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_is_a_string_or_strings_and_never_empty() {
        assert_eq!(input_texts(json!("a")).unwrap(), ["a"]);
        assert_eq!(input_texts(json!(["a", "b"])).unwrap(), ["a", "b"]);
        assert!(input_texts(json!([1, 2]))
            .unwrap_err()
            .contains("token arrays"));
        assert!(input_texts(json!([])).unwrap_err().contains("empty"));
        assert!(wants_base64(Some("base64")).unwrap());
        assert!(wants_base64(Some("hex")).is_err());
    }
}
