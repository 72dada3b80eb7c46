//! The multipart upload both OCR endpoints take: one part named `file`, whose filename extension
//! (`image.png` / `image.jpg`) is what MonkeyOCR uses to decide the file type.
//!
//! Also reads the answer: a 2xx body comes back as text, anything else is classified.

use bytes::Bytes;
use reqwest::multipart::{Form, Part};
use reqwest::{Body, Client, Response};
use url::Url;

use super::errors::{reqwest_error, status_error};
use super::image::ImageKind;
use crate::error::TransportError;

/// The multipart form for `image` of type `kind`. The bytes are shared, not copied.
pub(super) fn image_form(image: &Bytes, kind: ImageKind) -> Form {
    let part = Part::stream_with_length(Body::from(image.clone()), image.len() as u64)
        .file_name(kind.file_name())
        .mime_str(kind.mime())
        .expect("image/png and image/jpeg are valid MIME types");
    Form::new().part("file", part)
}

/// POST the image to `url` and return the body of a 2xx answer.
pub(super) async fn post_image(
    client: &Client,
    url: Url,
    leg: &str,
    image: &Bytes,
    kind: ImageKind,
) -> Result<String, TransportError> {
    let response = client
        .post(url)
        .multipart(image_form(image, kind))
        .send()
        .await
        .map_err(|e| reqwest_error(leg, &e))?;
    read_answer(leg, response).await
}

/// The body of a 2xx answer, or the classified failure of any other status.
async fn read_answer(leg: &str, response: Response) -> Result<String, TransportError> {
    let status = response.status();
    if status.is_success() {
        return response.text().await.map_err(|e| reqwest_error(leg, &e));
    }
    let headers = response.headers().clone();
    // The status alone classifies the failure; a body that breaks mid-read only loses detail.
    let body = response.text().await.unwrap_or_default();
    Err(status_error(leg, status.as_u16(), &headers, &body))
}
