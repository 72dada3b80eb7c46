//! A small `multipart/form-data` reader for the mock OCR server.
//!
//! The mock only needs what FastAPI's `UploadFile` needs: each part's name, filename, content
//! type and bytes. It is deliberately strict (a malformed body is `None`, answered 422 like the
//! real server) and not meant for production parsing — axum's own multipart support is not
//! compiled in this workspace.

/// One part of a multipart body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct FormPart {
    /// `name` of the `Content-Disposition`.
    pub name: String,
    /// `filename`, when the part is a file.
    pub filename: Option<String>,
    /// The part's `Content-Type`, if given.
    pub content_type: Option<String>,
    /// The part's body.
    pub data: Vec<u8>,
}

/// The boundary of a `multipart/form-data` content type.
pub(super) fn boundary(content_type: &str) -> Option<String> {
    let mut params = content_type.split(';');
    if !params
        .next()?
        .trim()
        .eq_ignore_ascii_case("multipart/form-data")
    {
        return None;
    }
    params.find_map(|p| {
        let (key, value) = p.split_once('=')?;
        key.trim()
            .eq_ignore_ascii_case("boundary")
            .then(|| value.trim().trim_matches('"').to_owned())
            .filter(|b| !b.is_empty())
    })
}

/// Split `body` into parts; `None` when it is not a well-formed multipart body.
pub(super) fn parse(body: &[u8], boundary: &str) -> Option<Vec<FormPart>> {
    let delimiter = format!("--{boundary}").into_bytes();
    let mut rest = body.get(find(body, &delimiter)? + delimiter.len()..)?;
    let mut parts = Vec::new();
    loop {
        if rest.starts_with(b"--") {
            return Some(parts); // closing delimiter
        }
        rest = rest.strip_prefix(b"\r\n")?;
        let header_end = find(rest, b"\r\n\r\n")?;
        let headers = std::str::from_utf8(&rest[..header_end]).ok()?;
        let content = &rest[header_end + 4..];
        let mut closing = b"\r\n".to_vec();
        closing.extend_from_slice(&delimiter);
        let end = find(content, &closing)?;
        parts.push(part(headers, content[..end].to_vec())?);
        rest = &content[end + closing.len()..];
    }
}

fn part(headers: &str, data: Vec<u8>) -> Option<FormPart> {
    let mut name = None;
    let mut filename = None;
    let mut content_type = None;
    for line in headers.split("\r\n") {
        let (key, value) = line.split_once(':')?;
        if key.trim().eq_ignore_ascii_case("content-disposition") {
            for param in value.split(';').skip(1) {
                let Some((k, v)) = param.split_once('=') else {
                    continue;
                };
                let v = v.trim().trim_matches('"').to_owned();
                match k.trim() {
                    "name" => name = Some(v),
                    "filename" => filename = Some(v),
                    _ => {}
                }
            }
        } else if key.trim().eq_ignore_ascii_case("content-type") {
            content_type = Some(value.trim().to_owned());
        }
    }
    Some(FormPart {
        name: name?,
        filename,
        content_type,
        data,
    })
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_files_and_fields() {
        let body = b"--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"image.png\"\r\nContent-Type: image/png\r\n\r\n\x89PNG\r\n--\r\n--XyZ\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\nhi\r\n--XyZ--\r\n";
        let ct = "multipart/form-data; boundary=\"XyZ\"";
        let parts = parse(body, &boundary(ct).unwrap()).unwrap();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].name, "file");
        assert_eq!(parts[0].filename.as_deref(), Some("image.png"));
        assert_eq!(parts[0].content_type.as_deref(), Some("image/png"));
        assert_eq!(parts[0].data, b"\x89PNG\r\n--");
        assert_eq!(parts[1].name, "note");
        assert_eq!(parts[1].filename, None);
        assert_eq!(parts[1].data, b"hi");
    }

    #[test]
    fn malformed_bodies_are_refused() {
        assert_eq!(boundary("application/json"), None);
        assert_eq!(boundary("multipart/form-data"), None);
        assert!(parse(b"no delimiter", "b").is_none());
        assert!(parse(
            b"--b\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\nunterminated",
            "b"
        )
        .is_none());
        assert_eq!(parse(b"--b--\r\n", "b"), Some(vec![]));
    }
}
