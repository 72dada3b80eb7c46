//! OCR-specific shaping of the shared HTTP classification (docs/behaviour.md §6, §7.4).
//!
//! The shared [`classify_status`]/[`classify_reqwest`] are reused as is, with the OCR
//! differences applied on top: MonkeyOCR has no billing, so a 429 is a plain Transient (never
//! `SourceDead`, and not quota pushback either — the original library's OCR loop had no
//! budget-free 429 path), and a 404 on the result ZIP is Transient (see
//! [`download_status_error`]). Every message names the leg (`/ocr/text`, `/parse`, ZIP download).

use polygateway_actors::{FailureClass, SourceReason};
use reqwest::header::HeaderMap;

use crate::error::TransportError;
use crate::transport::http::{classify_reqwest, classify_status, parse_retry_after};

/// A non-2xx answer of an OCR endpoint.
pub(super) fn status_error(
    leg: &str,
    status: u16,
    headers: &HeaderMap,
    body: &str,
) -> TransportError {
    let mut err = classify_status(status, headers, body);
    if status == 429 {
        // No quota semantics on OCR: whatever the body says, the service is only busy. The
        // Retry-After hint is kept for the backoff.
        err.class = FailureClass::Transient;
        err.reason = SourceReason::RateLimited;
        err.rate_limited = false;
        err.retry_after = parse_retry_after(headers);
    }
    err.message = format!("MonkeyOCR {leg}: {}", err.message);
    err
}

/// A non-2xx answer when downloading the result ZIP.
///
/// 404/410 are Transient rather than RequestRejected: the URL came from the service a moment
/// ago, so a missing file is the service's fault (not yet flushed, cleaned up, or served by a
/// different replica behind a balancer), and the next attempt re-runs `/parse` and gets a fresh
/// file. Everything else follows [`status_error`].
pub(super) fn download_status_error(
    status: u16,
    headers: &HeaderMap,
    body: &str,
) -> TransportError {
    let mut err = status_error("ZIP download", status, headers, body);
    if matches!(status, 404 | 410) {
        err.class = FailureClass::Transient;
        err.reason = SourceReason::NetworkError;
    }
    err
}

/// A request that got no (complete) HTTP answer.
pub(super) fn reqwest_error(leg: &str, err: &reqwest::Error) -> TransportError {
    let mut out = classify_reqwest(err);
    out.message = format!("MonkeyOCR {leg}: {}", out.message);
    out
}

#[cfg(test)]
mod tests {
    use polygateway_actors::{AttemptVerdict, Classify};
    use reqwest::header::{HeaderValue, RETRY_AFTER};

    use super::*;

    #[test]
    fn ocr_429_is_plain_transient_even_with_a_quota_body() {
        let mut headers = HeaderMap::new();
        headers.insert(RETRY_AFTER, HeaderValue::from_static("2"));
        for body in ["busy", r#"{"error":{"code":"insufficient_quota"}}"#] {
            let err = status_error("/ocr/text", 429, &headers, body);
            assert_eq!(err.class, FailureClass::Transient, "{body}");
            assert!(!err.is_rate_limited());
            assert_eq!(err.source_reason(), SourceReason::RateLimited);
            assert_eq!(err.retry_after(), Some(std::time::Duration::from_secs(2)));
            assert_eq!(AttemptVerdict::of_error(&err), AttemptVerdict::Failure);
            assert!(err.message.starts_with("MonkeyOCR /ocr/text: HTTP 429"));
        }
    }

    #[test]
    fn missing_download_is_transient_other_statuses_shared() {
        let headers = HeaderMap::new();
        for status in [404, 410] {
            let err = download_status_error(status, &headers, "Not Found");
            assert_eq!(err.class, FailureClass::Transient);
            assert_eq!(err.status, Some(status));
            assert!(err.message.contains("ZIP download"));
        }
        let err = download_status_error(503, &headers, "");
        assert_eq!(err.class, FailureClass::Transient);
        let err = status_error(
            "/parse",
            422,
            &headers,
            r#"{"detail":[{"loc":["body","file"]}]}"#,
        );
        assert_eq!(err.class, FailureClass::RequestRejected);
        assert!(err.body_text.contains("file"));
    }
}
