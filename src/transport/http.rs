//! HTTP plumbing shared by every transport: translating HTTP statuses and `reqwest` failures into
//! classified [`TransportError`]s (docs/behaviour.md §6). A source's client is built in `client`,
//! the endpoint requests go through is `endpoint`.
//!
//! This is the only place that looks at status codes (docs/behaviour.md §10.4). It does not read bodies or
//! streams (the transports do) and holds no retry or breaker logic (the runtime does).

use std::time::Duration;

use polygateway_actors::policy::pacer::RateLimitHint;
use polygateway_actors::{FailureClass, SourceReason};
use reqwest::header::{HeaderMap, RETRY_AFTER};

use crate::error::{summarize_body, TransportError};

/// The `Retry-After` hint in its seconds form (`"3"`, `"1.5"`). HTTP-dates, negative and
/// non-finite values are ignored (docs/behaviour.md §5.1).
pub(crate) fn parse_retry_after(headers: &HeaderMap) -> Option<Duration> {
    let raw = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    let secs: f64 = raw.parse().ok()?;
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs))
}

/// How a dialect reads an answer besides its body: the rate-limit headers (for the pacer) and an
/// error answer's status, headers and body (each API puts its error details its own way).
#[derive(Clone, Copy)]
pub(crate) struct AnswerReader {
    /// The answer's rate-limit headers as the pacer's hint.
    pub(crate) rate_limit: fn(&HeaderMap) -> Option<RateLimitHint>,
    /// A non-2xx answer classified.
    pub(crate) error: fn(u16, &HeaderMap, &str) -> TransportError,
}

impl AnswerReader {
    /// OpenAI's headers and the generic status rules ([`classify_status`]).
    pub(crate) const OPENAI: AnswerReader = AnswerReader {
        rate_limit: parse_rate_limit,
        error: classify_status,
    };

    /// A non-2xx answer classified: its body (at most `MAX_ERROR_BODY` bytes, read until
    /// `deadline`) summarised into the error.
    pub(crate) async fn classify(
        self,
        resp: reqwest::Response,
        deadline: std::time::Instant,
    ) -> TransportError {
        let (status, headers, body) = read_error(resp, deadline).await;
        (self.error)(status, &headers, &body)
    }
}

/// OpenAI-style request rate-limit headers (`x-ratelimit-limit-requests`,
/// `x-ratelimit-remaining-requests`, `x-ratelimit-reset-requests`), `None` when none is
/// present. Unparsable parts are left out; the reset takes OpenAI's duration forms
/// ([`parse_reset_duration`]). Read on every answer, so it only looks up three headers.
pub(crate) fn parse_rate_limit(headers: &HeaderMap) -> Option<RateLimitHint> {
    rate_limit_headers(
        headers,
        [
            "x-ratelimit-limit-requests",
            "x-ratelimit-remaining-requests",
            "x-ratelimit-reset-requests",
        ],
        parse_reset_duration,
    )
}

/// A request bucket's `[limit, remaining, reset]` headers as the pacer's hint, the reset read by
/// `reset` (each API spells it its own way); `None` when none of the three is present.
pub(crate) fn rate_limit_headers(
    headers: &HeaderMap,
    names: [&str; 3],
    reset: impl Fn(&str) -> Option<Duration>,
) -> Option<RateLimitHint> {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    let [limit, remaining, reset_at] = names.map(text);
    if limit.is_none() && remaining.is_none() && reset_at.is_none() {
        return None;
    }
    Some(RateLimitHint {
        limit: limit.and_then(|v| v.parse().ok()),
        remaining: remaining.and_then(|v| v.parse().ok()),
        reset: reset_at.and_then(reset),
    })
}

/// A rate-limit reset in OpenAI's forms: Go-style durations (`20ms`, `1s`, `6m0s`, `1h2m3.5s`)
/// or plain seconds (`1.5`). Negative, empty or unknown units give `None`.
pub(crate) fn parse_reset_duration(raw: &str) -> Option<Duration> {
    let raw = raw.trim();
    if let Ok(secs) = raw.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs));
    }
    let mut total = 0.0;
    let mut rest = raw;
    while !rest.is_empty() {
        let split = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .filter(|&i| i > 0)?;
        let value: f64 = rest[..split].parse().ok()?;
        rest = &rest[split..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        total += value * scale;
        rest = &rest[unit_len..];
    }
    (!raw.is_empty() && total.is_finite()).then(|| Duration::from_secs_f64(total))
}

/// `true` when the body says `insufficient_quota` anywhere: in any JSON string value or key
/// when it parses as JSON, else anywhere in the raw text. Always the untruncated body.
fn says_insufficient_quota(body: &str) -> bool {
    const NEEDLE: &str = "insufficient_quota";
    fn walk(v: &serde_json::Value) -> bool {
        match v {
            serde_json::Value::String(s) => s.contains(NEEDLE),
            serde_json::Value::Array(a) => a.iter().any(walk),
            serde_json::Value::Object(m) => m.iter().any(|(k, v)| k.contains(NEEDLE) || walk(v)),
            _ => false,
        }
    }
    match serde_json::from_str::<serde_json::Value>(body) {
        Ok(v) => walk(&v),
        Err(_) => body.contains(NEEDLE),
    }
}

/// Translate a non-2xx HTTP answer into a classified error (docs/behaviour.md §6 table).
///
/// | status | class | reason |
/// |---|---|---|
/// | 429 (`insufficient_quota` in the body) | SourceDead | source_dead |
/// | 429 | Transient, `rate_limited`, Retry-After (seconds form) | rate_limited |
/// | 401, 403 | SourceDead | source_dead |
/// | 400, 404, 413, 422 | RequestRejected | network_error |
/// | 5xx | Transient, Retry-After (seconds form) | server_error |
/// | anything else | Transient | server_error |
///
/// Every error is marked `answered` (the service did answer) and carries the body summary in
/// both `message` and `body_text`.
pub(crate) fn classify_status(status: u16, headers: &HeaderMap, body: &str) -> TransportError {
    let summary = summarize_body(body);
    let (class, reason, label) = match status {
        429 if says_insufficient_quota(body) => (
            FailureClass::SourceDead,
            SourceReason::SourceDead,
            "insufficient quota",
        ),
        429 => (
            FailureClass::Transient,
            SourceReason::RateLimited,
            "rate limited",
        ),
        401 => (
            FailureClass::SourceDead,
            SourceReason::SourceDead,
            "unauthorized",
        ),
        403 => (
            FailureClass::SourceDead,
            SourceReason::SourceDead,
            "forbidden",
        ),
        400 | 404 | 413 | 422 => (
            FailureClass::RequestRejected,
            SourceReason::NetworkError,
            "request rejected",
        ),
        500..=599 => (
            FailureClass::Transient,
            SourceReason::ServerError,
            "server error",
        ),
        _ => (
            FailureClass::Transient,
            SourceReason::ServerError,
            "unexpected status",
        ),
    };
    let message = if summary.is_empty() {
        format!("HTTP {status} {label}")
    } else {
        format!("HTTP {status} {label}: {summary}")
    };
    let mut err = TransportError::new(class, reason, message);
    err.status = Some(status);
    err.body_text = summary;
    err.answered = true;
    if reason == SourceReason::RateLimited {
        err.rate_limited = true;
        err.rate_limit = parse_rate_limit(headers);
    }
    // A 429's and a failing server's hint (a 503's `Retry-After`, RFC 9110 §10.2.3; the original
    // library read it on 500/502/503/504 as on 429): the back-off before the next attempt is at
    // least that long (docs/behaviour.md §5.1). A 3xx's or 409's would mean something else.
    if class == FailureClass::Transient && (status == 429 || (500..=599).contains(&status)) {
        err.retry_after = parse_retry_after(headers);
    }
    err
}

/// Translate a `reqwest` failure (no HTTP answer, or a body read that broke): timeouts →
/// Transient `timeout`, everything else (connect refused/reset, body decode) → Transient
/// `network_error`. The message names the cause chain; the URL's query string is removed.
pub(crate) fn classify_reqwest(err: &reqwest::Error) -> TransportError {
    let reason = if err.is_timeout() {
        SourceReason::Timeout
    } else {
        SourceReason::NetworkError
    };
    let kind = if err.is_timeout() {
        "timeout"
    } else if err.is_connect() {
        "connect error"
    } else if err.is_body() || err.is_decode() {
        "body error"
    } else {
        "network error"
    };
    let mut message = format!("{kind}: {}", error_chain(err));
    if let Some(url) = err.url() {
        // A query string may carry credentials for some services; never echo it.
        let mut redacted = url.clone();
        redacted.set_query(None);
        redacted.set_fragment(None);
        let _ = redacted.set_password(None);
        message = message.replace(url.as_str(), redacted.as_str());
    }
    TransportError::transient(reason, message)
}

/// Most bytes of an error body read for classification; a larger body is cut here (the summary
/// keeps far less, and `insufficient_quota` sits near the top of real error bodies).
pub(crate) const MAX_ERROR_BODY: usize = 1 << 20;

/// An error answer's status, headers and body (at most `MAX_ERROR_BODY` bytes, read until
/// `deadline`), for a dialect that classifies its own error bodies.
pub(crate) async fn read_error(
    resp: reqwest::Response,
    deadline: std::time::Instant,
) -> (u16, HeaderMap, String) {
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let mut resp = resp;
    let mut body = Vec::new();
    let read = async {
        while let Ok(Some(chunk)) = resp.chunk().await {
            let room = MAX_ERROR_BODY.saturating_sub(body.len());
            body.extend_from_slice(&chunk[..chunk.len().min(room)]);
            if body.len() >= MAX_ERROR_BODY {
                break;
            }
        }
    };
    let _ = tokio::time::timeout_at(tokio::time::Instant::from_std(deadline), read).await;
    (status, headers, String::from_utf8_lossy(&body).into_owned())
}

/// `err: cause: cause…`, skipping causes whose text repeats the previous one.
pub(crate) fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut out = err.to_string();
    let mut last = out.clone();
    let mut source = err.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !text.is_empty() && !last.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        last = text;
        source = cause.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use polygateway_actors::Classify;
    use reqwest::header::HeaderValue;

    fn headers(retry_after: Option<&'static str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(v) = retry_after {
            h.insert(RETRY_AFTER, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn rate_limited_carries_retry_after_seconds() {
        let e = classify_status(
            429,
            &headers(Some("3")),
            r#"{"error":{"message":"slow down"}}"#,
        );
        assert_eq!(e.class, FailureClass::Transient);
        assert!(e.is_rate_limited());
        assert_eq!(e.source_reason(), SourceReason::RateLimited);
        assert_eq!(e.retry_after(), Some(Duration::from_secs(3)));
        assert_eq!(e.status, Some(429));
        assert!(e.body_text.contains("slow down"));
        assert!(e.message.contains("slow down"));
    }

    #[test]
    fn rate_limited_http_date_is_ignored() {
        let e = classify_status(429, &headers(Some("Wed, 21 Oct 2015 07:28:00 GMT")), "");
        assert!(e.is_rate_limited());
        assert_eq!(e.retry_after(), None);
        let e = classify_status(429, &headers(Some("-4")), "");
        assert_eq!(e.retry_after(), None);
        let e = classify_status(429, &headers(Some("0.5")), "");
        assert_eq!(e.retry_after(), Some(Duration::from_millis(500)));
    }

    #[test]
    fn insufficient_quota_is_source_dead_even_past_the_summary_cut() {
        // The marker sits beyond the summariser's head; classification reads the whole body.
        let filler = "x ".repeat(5000);
        let body = format!(
            r#"{{"error":{{"message":"{filler}","type":"insufficient_quota","code":"insufficient_quota"}}}}"#
        );
        let e = classify_status(429, &headers(Some("9")), &body);
        assert_eq!(e.class, FailureClass::SourceDead);
        assert!(!e.is_rate_limited());
        assert_eq!(e.retry_after(), None);
        assert_eq!(e.source_reason(), SourceReason::SourceDead);
    }

    #[test]
    fn auth_failures_are_source_dead() {
        for s in [401, 403] {
            let e = classify_status(s, &headers(None), "bad key");
            assert_eq!(e.class, FailureClass::SourceDead, "{s}");
            assert_eq!(e.body_text, "bad key");
            assert!(!e.is_rate_limited());
        }
    }

    #[test]
    fn client_errors_are_rejected_and_prove_alive() {
        for s in [400, 404, 413, 422] {
            let e = classify_status(s, &headers(None), "{\n  \"error\": \"bad\"\n}");
            assert_eq!(e.class, FailureClass::RequestRejected, "{s}");
            assert!(e.answered);
            assert!(e.proves_alive());
            assert_eq!(e.body_text, r#"{ "error": "bad" }"#);
        }
    }

    #[test]
    fn server_and_unknown_errors_are_transient() {
        for s in [500, 502, 503, 504, 409, 302] {
            let e = classify_status(s, &headers(Some("5")), "oops");
            assert_eq!(e.class, FailureClass::Transient, "{s}");
            // The source answered: a server error, not a network one.
            assert_eq!(e.source_reason(), SourceReason::ServerError, "{s}");
            assert!(!e.is_rate_limited());
            // A 5xx's Retry-After is the least back-off (behaviour §5.1); other statuses' is not
            // a retry hint.
            let hint = (500..=599).contains(&s).then(|| Duration::from_secs(5));
            assert_eq!(e.retry_after(), hint, "{s}");
            assert!(!e.proves_alive());
        }
    }

    #[test]
    fn empty_body_message_has_no_dangling_colon() {
        let e = classify_status(503, &headers(None), "");
        assert_eq!(e.message, "HTTP 503 server error");
        assert_eq!(e.body_text, "");
    }
}

#[cfg(test)]
mod examples {
    //! Usage cases of crate-private items (they were doc examples while the items were public).

    #[test]
    fn parse_retry_after_example() {
        use crate::transport::http::parse_retry_after;
        use reqwest::header::{HeaderMap, HeaderValue, RETRY_AFTER};
        let mut h = HeaderMap::new();
        h.insert(RETRY_AFTER, HeaderValue::from_static("7"));
        assert_eq!(
            parse_retry_after(&h),
            Some(std::time::Duration::from_secs(7))
        );
        h.insert(
            RETRY_AFTER,
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(parse_retry_after(&h), None);
    }

    #[test]
    fn parse_rate_limit_example() {
        use crate::transport::http::parse_rate_limit;
        use reqwest::header::{HeaderMap, HeaderValue};
        use std::time::Duration;
        let mut h = HeaderMap::new();
        assert_eq!(parse_rate_limit(&h), None);
        h.insert(
            "x-ratelimit-remaining-requests",
            HeaderValue::from_static("59"),
        );
        h.insert("x-ratelimit-reset-requests", HeaderValue::from_static("1s"));
        let hint = parse_rate_limit(&h).unwrap();
        assert_eq!(
            (hint.limit, hint.remaining, hint.reset),
            (None, Some(59), Some(Duration::from_secs(1)))
        );
    }

    #[test]
    fn parse_reset_duration_example() {
        use crate::transport::http::parse_reset_duration;
        use std::time::Duration;
        assert_eq!(
            parse_reset_duration("20ms"),
            Some(Duration::from_millis(20))
        );
        assert_eq!(parse_reset_duration("6m0s"), Some(Duration::from_secs(360)));
        assert_eq!(
            parse_reset_duration("0.5"),
            Some(Duration::from_millis(500))
        );
        assert_eq!(parse_reset_duration("soon"), None);
    }

    #[test]
    fn classify_status_example() {
        use crate::ports::{FailureClass, SourceReason};
        use crate::transport::http::classify_status;
        use reqwest::header::{HeaderMap, HeaderValue, RETRY_AFTER};
        use std::time::Duration;

        let e = classify_status(401, &HeaderMap::new(), r#"{"error": "invalid api key"}"#);
        assert_eq!(
            (e.class, e.status, e.answered),
            (FailureClass::SourceDead, Some(401), true)
        );
        assert_eq!(
            e.message,
            r#"HTTP 401 unauthorized: {"error": "invalid api key"}"#
        );

        let mut headers = HeaderMap::new();
        headers.insert(RETRY_AFTER, HeaderValue::from_static("2"));
        let e = classify_status(429, &headers, "slow down");
        assert_eq!(e.reason, SourceReason::RateLimited);
        assert!(e.rate_limited);
        assert_eq!(e.retry_after, Some(Duration::from_secs(2)));

        // The same status with a quota error is a dead source, not pushback.
        let e = classify_status(
            429,
            &headers,
            r#"{"error": {"code": "insufficient_quota"}}"#,
        );
        assert_eq!(e.class, FailureClass::SourceDead);
    }

    #[test]
    fn classify_reqwest_example() {
        #[tokio::main(flavor = "current_thread")]
        async fn main() {
            use crate::ports::{FailureClass, SourceReason};
            use crate::transport::http::classify_reqwest;
            // A port nobody listens on.
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let client = reqwest::Client::builder().no_proxy().build().unwrap();
            let url = format!("http://127.0.0.1:{port}/v1/models?key=secret");
            let err = client.get(&url).send().await.unwrap_err();
            let e = classify_reqwest(&err);
            assert_eq!(
                (e.class, e.reason),
                (FailureClass::Transient, SourceReason::NetworkError)
            );
            assert!(e.message.starts_with("connect error"), "{}", e.message);
            assert!(!e.message.contains("secret")); // the query string is never echoed
        }
        main();
    }

    #[test]
    fn max_error_body_example() {
        use crate::transport::http::MAX_ERROR_BODY;
        // One MiB: enough for any real error document, bounded against a runaway body.
        assert_eq!(MAX_ERROR_BODY, 1024 * 1024);
    }

    #[test]
    fn answer_reader_classify_example() {
        #[tokio::main(flavor = "current_thread")]
        async fn main() {
            use crate::transport::http::AnswerReader;
            use polygateway_testkit::{Behaviour, MockUpstream};
            use std::time::{Duration, Instant};
            let mock = MockUpstream::start(Behaviour::RateLimited {
                retry_after_s: Some(3),
            })
            .await;
            let client = reqwest::Client::builder().no_proxy().build().unwrap();
            let resp = client
                .post(format!("{}/chat/completions", mock.base_url()))
                .json(&serde_json::json!({"model": "m", "messages": []}))
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), 429);
            let deadline = Instant::now() + Duration::from_secs(5);
            let err = AnswerReader::OPENAI.classify(resp, deadline).await;
            assert!(err.rate_limited);
            assert_eq!(err.retry_after, Some(Duration::from_secs(3)));
        }
        main();
    }
}
