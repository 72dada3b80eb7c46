//! Turning `/parse`'s `download_url` into the URL of the result ZIP.
//!
//! MonkeyOCR answers with a server-relative path (`/static/{name}_parsed_{ms}_{uuid8}.zip`) whose
//! name it does not URL-encode, so a name with spaces, `#` or `%` must be encoded here, segment
//! by segment. Only path resolution lives here; the download itself is in `layout`.

use percent_encoding::{utf8_percent_encode, AsciiSet, CONTROLS};
use url::Url;

use crate::error::TransportError;

/// Everything outside RFC 3986 `pchar` that may appear in a raw file name.
const SEGMENT: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'`')
    .add(b'{')
    .add(b'}')
    .add(b'[')
    .add(b']')
    .add(b'\\')
    .add(b'^')
    .add(b'|');

/// Resolve `download_url` against the source's base URL.
///
/// - A relative path is a raw file path: each segment is percent-encoded and the path is
///   appended to the base URL *including its path*, the same way the endpoints are built (a
///   service mounted under a reverse-proxy prefix serves `/static` under that prefix too).
/// - An absolute `http`/`https` URL is already a URL the server built and is used as parsed
///   (the URL parser still encodes spaces and other characters that cannot appear in a URL).
/// - Anything else (empty, another scheme, unparsable) is an unusable answer: `ResultInvalid`.
pub(crate) fn resolve_download_url(
    base_url: &str,
    download_url: &str,
) -> Result<Url, TransportError> {
    let raw = download_url.trim();
    if raw.is_empty() {
        return Err(TransportError::invalid(
            "OCR /parse answered an empty download_url",
        ));
    }
    let lower = raw.to_ascii_lowercase();
    let parsed = if lower.starts_with("http://") || lower.starts_with("https://") {
        Url::parse(raw)
    } else if lower.contains("://") {
        return Err(TransportError::invalid(format!(
            "OCR /parse answered a download_url with an unsupported scheme: {raw}"
        )));
    } else {
        let path: Vec<String> = raw
            .trim_start_matches('/')
            .split('/')
            .map(|segment| utf8_percent_encode(segment, SEGMENT).to_string())
            .collect();
        Url::parse(&format!(
            "{}/{}",
            base_url.trim_end_matches('/'),
            path.join("/")
        ))
    };
    parsed.map_err(|e| {
        TransportError::invalid(format!(
            "OCR /parse answered an unusable download_url {raw:?}: {e}"
        ))
    })
}

#[cfg(test)]
mod tests {
    use polygateway_actors::FailureClass;

    use super::*;

    fn resolved(base: &str, url: &str) -> String {
        resolve_download_url(base, url).unwrap().to_string()
    }

    #[test]
    fn relative_paths_join_the_base_url() {
        assert_eq!(
            resolved("http://127.0.0.1:7866", "/static/x_parsed_1_ab12cd34.zip"),
            "http://127.0.0.1:7866/static/x_parsed_1_ab12cd34.zip"
        );
        assert_eq!(
            resolved("http://127.0.0.1:7866/", "static/x.zip"),
            "http://127.0.0.1:7866/static/x.zip"
        );
        assert_eq!(
            resolved("http://gw.local/monkey/", "/static/x.zip"),
            "http://gw.local/monkey/static/x.zip"
        );
    }

    #[test]
    fn raw_names_are_percent_encoded_per_segment() {
        assert_eq!(
            resolved("http://h:1", "/static/my scan #2 100%?.zip"),
            "http://h:1/static/my%20scan%20%232%20100%25%3F.zip"
        );
        assert_eq!(
            resolved("http://h:1", "/static/扫描件.zip"),
            "http://h:1/static/%E6%89%AB%E6%8F%8F%E4%BB%B6.zip"
        );
    }

    #[test]
    fn absolute_urls_are_accepted() {
        assert_eq!(
            resolved("http://h:1", "http://files.local:9000/static/x.zip"),
            "http://files.local:9000/static/x.zip"
        );
        assert_eq!(
            resolved("http://h:1", "HTTPS://files.local/static/a b.zip"),
            "https://files.local/static/a%20b.zip"
        );
    }

    #[test]
    fn unusable_urls_are_invalid() {
        for bad in ["", "   ", "ftp://h/x.zip", "file:///etc/passwd", "http://"] {
            let err = resolve_download_url("http://h:1", bad).unwrap_err();
            assert_eq!(err.class, FailureClass::ResultInvalid, "{bad:?}");
        }
    }
}

#[cfg(test)]
mod examples {
    //! Usage cases of crate-private items (they were doc examples while the items were public).

    #[test]
    fn resolve_download_url_example() {
        use super::resolve_download_url;
        let url =
            resolve_download_url("http://10.0.0.5:7866", "/static/scan 1_parsed.zip").unwrap();
        assert_eq!(
            url.as_str(),
            "http://10.0.0.5:7866/static/scan%201_parsed.zip"
        );
    }
}
