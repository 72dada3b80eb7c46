//! `parse_layout`: `POST {base}/parse` → `download_url` → `GET` the ZIP → middle JSON.
//!
//! The two-leg exchange lives here; reading the ZIP is the pure [`super::middle`], URL
//! resolution is [`super::download_url`].

use bytes::Bytes;
use reqwest::Client;
use serde_json::Value;
use url::Url;

use super::answer::successful_envelope;
use super::download_url::resolve_download_url;
use super::errors::{download_status_error, reqwest_error};
use super::image::ImageKind;
use super::middle::{parse_middle_json, parse_middle_zip, MiddleLayout};
use super::upload::post_image;
use crate::error::{summarize_body, TransportError};

const LEG: &str = "/parse";
const DOWNLOAD: &str = "ZIP download";

/// Upload the image, fetch the result and return the layout with the raw `/parse` answer.
pub(super) async fn parse(
    client: &Client,
    base_url: &str,
    image: &Bytes,
    kind: ImageKind,
) -> Result<(MiddleLayout, Value), TransportError> {
    let url = super::endpoint(base_url, "parse")?;
    let body = post_image(client, url, LEG, image, kind).await?;
    let object = successful_envelope(LEG, &body)?;
    let layout = match object.get("download_url") {
        Some(Value::String(link)) if !link.trim().is_empty() => {
            let zip = download(client, resolve_download_url(base_url, link)?).await?;
            parse_middle_zip(&zip)?
        }
        // The `return_type=middle_json` server variant answers inline, without a ZIP.
        _ => match object.get("middle_json") {
            Some(Value::String(text)) => parse_middle_json(text.as_bytes())?,
            Some(inline @ Value::Object(_)) => parse_middle_json(inline.to_string().as_bytes())?,
            _ => {
                let mut err = TransportError::invalid(format!(
                    "MonkeyOCR {LEG}: success=true without a download_url"
                ));
                err.status = Some(200);
                err.body_text = summarize_body(&body);
                return Err(err);
            }
        },
    };
    Ok((layout, Value::Object(object)))
}

/// GET the result ZIP.
async fn download(client: &Client, url: Url) -> Result<Bytes, TransportError> {
    let response = client
        .get(url)
        .send()
        .await
        .map_err(|e| reqwest_error(DOWNLOAD, &e))?;
    let status = response.status();
    if !status.is_success() {
        let headers = response.headers().clone();
        let body = response.text().await.unwrap_or_default();
        return Err(download_status_error(status.as_u16(), &headers, &body));
    }
    response
        .bytes()
        .await
        .map_err(|e| reqwest_error(DOWNLOAD, &e))
}
