//! Anthropic's Messages API (`POST {base_url}/messages`, docs/behaviour.md §7.5): `x-api-key`,
//! `anthropic-version`, an optional `anthropic-beta`; the request body ([`request`]), the answer
//! and its stream ([`response`]), the `anthropic-ratelimit-*` headers (here).
//!
//! Errors need no rule of their own: the statuses mean what the shared classification says
//! (`429 rate_limit_error` with `retry-after` is pushback, `529 overloaded_error` and `500
//! api_error` are a busy or failing source — transient, tried elsewhere — `400
//! invalid_request_error` is the caller's, `401`/`403` a dead key).

pub(crate) mod request;
pub(crate) mod response;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use polygateway_actors::policy::pacer::RateLimitHint;
use reqwest::header::HeaderMap;

/// The API version every request names.
pub(crate) const VERSION: &str = "2023-06-01";

/// `anthropic-ratelimit-requests-{limit,remaining,reset}` as the pacer's hint (the request
/// bucket, like OpenAI's `x-ratelimit-*-requests`); `None` when none is present.
pub(crate) fn rate_limit(headers: &HeaderMap) -> Option<RateLimitHint> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    crate::transport::http::rate_limit_headers(
        headers,
        [
            "anthropic-ratelimit-requests-limit",
            "anthropic-ratelimit-requests-remaining",
            "anthropic-ratelimit-requests-reset",
        ],
        |reset| rfc3339_unix(reset).map(|at| at.saturating_sub(now)),
    )
}

/// An RFC 3339 UTC time (`2025-06-01T12:00:30Z`, fractional seconds allowed) as time since the
/// Unix epoch. Anthropic sends UTC (`Z`); an offset other than `Z`/`+00:00` is not read.
fn rfc3339_unix(raw: &str) -> Option<Duration> {
    let raw = raw
        .strip_suffix('Z')
        .or_else(|| raw.strip_suffix("+00:00"))?;
    let (date, time) = raw.split_once('T')?;
    let mut d = date.splitn(3, '-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let mut t = time.splitn(3, ':');
    let (hh, mm) = (
        t.next()?.parse::<u64>().ok()?,
        t.next()?.parse::<u64>().ok()?,
    );
    let secs: f64 = t.next()?.parse().ok()?;
    if !(1..=12).contains(&m)
        || !(1..=31).contains(&day)
        || hh > 23
        || mm > 59
        || !(0.0..61.0).contains(&secs)
    {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = u64::try_from(era * 146_097 + doe - 719_468).ok()?;
    Some(Duration::from_secs(days * 86_400 + hh * 3600 + mm * 60) + Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_times_and_the_rate_limit_hint() {
        assert_eq!(rfc3339_unix("1970-01-01T00:00:00Z"), Some(Duration::ZERO));
        assert_eq!(
            rfc3339_unix("2025-06-01T12:00:30.5Z"),
            Some(Duration::from_secs(1_748_779_230) + Duration::from_millis(500))
        );
        assert_eq!(rfc3339_unix("2025-13-01T00:00:00Z"), None);
        assert_eq!(rfc3339_unix("2025-06-01T12:00:30+02:00"), None);
        let mut headers = HeaderMap::new();
        headers.insert("anthropic-ratelimit-requests-limit", "50".parse().unwrap());
        headers.insert(
            "anthropic-ratelimit-requests-remaining",
            "3".parse().unwrap(),
        );
        headers.insert(
            "anthropic-ratelimit-requests-reset",
            "1970-01-01T00:00:00Z".parse().unwrap(),
        );
        let hint = rate_limit(&headers).unwrap();
        assert_eq!((hint.limit, hint.remaining), (Some(50), Some(3)));
        // A reset in the past is due now.
        assert_eq!(hint.reset, Some(Duration::ZERO));
        assert!(rate_limit(&HeaderMap::new()).is_none());
    }
}
