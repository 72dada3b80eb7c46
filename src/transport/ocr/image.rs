//! Local image check before an OCR upload (docs/behaviour.md §7.4): only PNG and JPEG are sent.
//!
//! MonkeyOCR decides the file type from the uploaded filename's extension, so the transport
//! detects the real type from magic bytes and names the part accordingly. This module only
//! sniffs bytes; it does not decode or validate whole images.

/// An image type the OCR service accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum ImageKind {
    /// PNG (`89 50 4E 47 0D 0A 1A 0A`).
    Png,
    /// JPEG (`FF D8 FF`).
    Jpeg,
}

impl ImageKind {
    /// The filename sent in the multipart part; its extension is what the server reads.
    pub(crate) fn file_name(self) -> &'static str {
        match self {
            ImageKind::Png => "image.png",
            ImageKind::Jpeg => "image.jpg",
        }
    }

    /// The part's content type.
    pub(crate) fn mime(self) -> &'static str {
        match self {
            ImageKind::Png => "image/png",
            ImageKind::Jpeg => "image/jpeg",
        }
    }
}

const PNG_MAGIC: &[u8] = b"\x89PNG\r\n\x1a\n";
const JPEG_MAGIC: &[u8] = &[0xFF, 0xD8, 0xFF];

/// The image type announced by `bytes`' magic number, or `None` for anything else.
pub(crate) fn detect_image_kind(bytes: &[u8]) -> Option<ImageKind> {
    if bytes.starts_with(PNG_MAGIC) {
        Some(ImageKind::Png)
    } else if bytes.starts_with(JPEG_MAGIC) {
        Some(ImageKind::Jpeg)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn png_and_jpeg_are_recognised() {
        assert_eq!(detect_image_kind(PNG_MAGIC), Some(ImageKind::Png));
        assert_eq!(
            detect_image_kind(&[0xFF, 0xD8, 0xFF, 0xDB, 0, 0]),
            Some(ImageKind::Jpeg)
        );
    }

    #[test]
    fn truncated_or_foreign_magic_is_refused() {
        assert_eq!(detect_image_kind(b""), None);
        assert_eq!(detect_image_kind(&PNG_MAGIC[..7]), None);
        assert_eq!(detect_image_kind(&[0xFF, 0xD8]), None);
        assert_eq!(detect_image_kind(b"GIF89a"), None);
        assert_eq!(detect_image_kind(b"%PDF-1.4"), None);
        assert_eq!(detect_image_kind(b"RIFF\0\0\0\0WEBP"), None);
    }

    #[test]
    fn names_match_the_detected_type() {
        assert_eq!(ImageKind::Png.file_name(), "image.png");
        assert_eq!(ImageKind::Png.mime(), "image/png");
        assert_eq!(ImageKind::Jpeg.file_name(), "image.jpg");
        assert_eq!(ImageKind::Jpeg.mime(), "image/jpeg");
    }
}

#[cfg(test)]
mod examples {
    //! Usage cases of crate-private items (they were doc examples while the items were public).

    #[test]
    fn image_kind_example() {
        use super::{detect_image_kind, ImageKind};
        let verdict = |bytes: &[u8]| match detect_image_kind(bytes) {
            Some(ImageKind::Png) => "png",
            Some(ImageKind::Jpeg) => "jpeg",
            None => "rejected before sending",
        };
        assert_eq!(verdict(&[0xFF, 0xD8, 0xFF, 0xE0]), "jpeg");
        assert_eq!(verdict(b"GIF89a"), "rejected before sending");
    }

    #[test]
    fn image_kind_file_name_example() {
        use super::{detect_image_kind, ImageKind};
        // The server reads the type from the extension, so it must match the magic bytes.
        let kind = detect_image_kind(b"\x89PNG\r\n\x1a\n...").unwrap();
        assert_eq!(kind.file_name(), "image.png");
        assert_eq!(ImageKind::Jpeg.file_name(), "image.jpg");
    }

    #[test]
    fn image_kind_mime_example() {
        use super::ImageKind;
        assert_eq!(ImageKind::Png.mime(), "image/png");
        assert_eq!(ImageKind::Jpeg.mime(), "image/jpeg");
    }

    #[test]
    fn detect_image_kind_example() {
        use super::{detect_image_kind, ImageKind};
        assert_eq!(
            detect_image_kind(b"\x89PNG\r\n\x1a\n...."),
            Some(ImageKind::Png)
        );
        assert_eq!(
            detect_image_kind(&[0xFF, 0xD8, 0xFF, 0xE0]),
            Some(ImageKind::Jpeg)
        );
        assert_eq!(detect_image_kind(b"%PDF-1.7"), None);
    }
}
