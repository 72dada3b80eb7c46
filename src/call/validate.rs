//! The validate step: what is refused before anything is spent — no row, no quota, no source.
//! The caller's options (docs/behaviour.md §2.2) for every kind of call, and an OCR call's image,
//! which must be a PNG or a JPEG.

use crate::error::GatewayError;
use crate::transport::ocr::{detect_image_kind, ImageKind};
use crate::types::CallOptions;

/// The caller's options: tenant id, meta, sampling overlay (`crate::validate`).
pub(crate) fn options(options: &CallOptions) -> Result<(), GatewayError> {
    Ok(options.validate()?)
}

/// The kind of an OCR call's image, or the refusal of anything else (magic bytes).
pub(crate) fn image(bytes: &[u8]) -> Result<ImageKind, GatewayError> {
    detect_image_kind(bytes).ok_or_else(|| GatewayError::RequestRejected {
        message: format!(
            "OCR accepts PNG or JPEG images only; the {} bytes given match neither magic number",
            bytes.len()
        ),
        body_text: String::new(),
    })
}
