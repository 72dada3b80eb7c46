//! One JSON endpoint of a source ([`JsonEndpoint`]): its URL, credential headers and the pooled
//! client with its one re-send. Chat, embeddings and Gemini post through it; it sits above `pool`
//! and `resend`, which only know clients, so the three stay in one direction.

use std::sync::Arc;
use std::time::Duration;

use polygateway_actors::{FailureClass, SourceReason};
use reqwest::header::{HeaderName, HeaderValue};

use super::TransportConfig;
use crate::error::TransportError;

/// How a source's key is sent: `Authorization: Bearer …` (OpenAI and most others), or under a
/// header of the API's own (Anthropic's `x-api-key`, Gemini's `x-goog-api-key`), with the fixed
/// headers the API requires beside it (Anthropic's `anthropic-version`).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Credentials {
    /// The key's header; `None` = `Authorization: Bearer`.
    pub(crate) key_header: Option<&'static str>,
    /// Headers every request carries.
    pub(crate) fixed: &'static [(&'static str, &'static str)],
}

/// The credential headers of a source, the key marked sensitive; none for an empty key
/// (keyless services) besides the fixed ones. A key that cannot be an HTTP header value makes
/// the source unable to serve anything: SourceDead, with a message that does not echo the key.
fn auth_headers(
    config: &TransportConfig,
    credentials: Credentials,
) -> Result<Vec<(HeaderName, HeaderValue)>, TransportError> {
    let mut headers: Vec<(HeaderName, HeaderValue)> = credentials
        .fixed
        .iter()
        .map(|(name, value)| {
            (
                HeaderName::from_static(name),
                HeaderValue::from_static(value),
            )
        })
        .collect();
    if config.api_key.is_empty() {
        return Ok(headers);
    }
    let (name, value) = match credentials.key_header {
        None => (
            reqwest::header::AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {}", config.api_key.expose())),
        ),
        Some(name) => (
            HeaderName::from_static(name),
            HeaderValue::from_str(config.api_key.expose()),
        ),
    };
    match value {
        Ok(mut v) => {
            v.set_sensitive(true);
            headers.push((name, v));
            Ok(headers)
        }
        Err(_) => Err(TransportError::new(
            FailureClass::SourceDead,
            SourceReason::SourceDead,
            format!(
                "source {}: API key contains characters not allowed in an HTTP header",
                config.name
            ),
        )),
    }
}

/// One JSON endpoint of a source: its pool (`pool::SourcePool`), URL and `Authorization` header. Chat and
/// embeddings post through it, so both build requests the same way.
#[derive(Clone)]
pub(crate) struct JsonEndpoint {
    resender: Arc<super::resend::Resender>,
    url: String,
    /// `url` parsed once: parsing it per request (host, IDNA) cost more than the clone. `None`
    /// when it does not parse; each request then reports why, as before.
    parsed: Option<reqwest::Url>,
    auth: Result<Vec<(HeaderName, HeaderValue)>, TransportError>,
}

impl std::fmt::Debug for JsonEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonEndpoint")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl JsonEndpoint {
    /// `{base_url}/{path}` of `config`, posted through `pool`.
    pub(crate) fn new(
        config: &Arc<TransportConfig>,
        pool: super::pool::SourcePool,
        path: &str,
    ) -> Self {
        Self::with_credentials(config, pool, path, Credentials::default())
    }

    /// `{base_url}/{path}` of `config`, its key sent as `credentials` say.
    pub(crate) fn with_credentials(
        config: &Arc<TransportConfig>,
        pool: super::pool::SourcePool,
        path: &str,
        credentials: Credentials,
    ) -> Self {
        let url = format!("{}/{path}", config.base_url.trim_end_matches('/'));
        Self {
            resender: Arc::new(super::resend::Resender::new(config, pool)),
            parsed: reqwest::Url::parse(&url).ok(),
            url,
            auth: auth_headers(config, credentials),
        }
    }

    /// An endpoint at `path` whose key goes, bare, in the header `header` (Gemini's
    /// `x-goog-api-key`): never in the URL, where it would reach logs.
    pub(crate) fn keyed(
        config: &Arc<TransportConfig>,
        pool: super::pool::SourcePool,
        path: &str,
        header: &'static str,
    ) -> Self {
        let credentials = Credentials {
            key_header: Some(header),
            fixed: &[],
        };
        Self::with_credentials(config, pool, path, credentials)
    }

    /// The same pool and key at another path of the same base URL.
    pub(crate) fn sibling(&self, config: &TransportConfig, path: &str) -> Self {
        let url = format!("{}/{path}", config.base_url.trim_end_matches('/'));
        Self {
            resender: self.resender.clone(),
            parsed: reqwest::Url::parse(&url).ok(),
            url,
            auth: self.auth.clone(),
        }
    }

    /// The endpoint URL.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// A POST of a JSON `body` with the source's credentials. Fails (SourceDead) only when the
    /// key cannot be a header value.
    pub(crate) fn post_json(
        &self,
        body: Vec<u8>,
    ) -> Result<reqwest::RequestBuilder, TransportError> {
        let client = self.resender.pool().client();
        let rb = match &self.parsed {
            Some(url) => client.post(url.clone()),
            None => client.post(&self.url),
        };
        let rb = rb
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        match &self.auth {
            Ok(headers) => Ok(headers
                .iter()
                .fold(rb, |rb, (name, value)| rb.header(name, value.clone()))),
            Err(e) => Err(e.clone()),
        }
    }

    /// Send a request built by [`JsonEndpoint::post_json`], re-sent once on a fresh connection
    /// when its pooled connection was closed before any answer (`resend`).
    pub(crate) async fn send(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, reqwest::Error> {
        self.resender.execute(request.build()?).await
    }

    /// Requests this endpoint re-sent on a fresh connection.
    pub(crate) fn resends(&self) -> u64 {
        self.resender.resends()
    }

    /// The pool's current idle timeout (`None` for a client the application gave).
    pub(crate) fn pool_idle_timeout(&self) -> Option<Duration> {
        self.resender.pool().idle_timeout()
    }
}

#[cfg(test)]
mod examples {
    //! Usage cases of crate-private items (they were doc examples while the items were public).

    use std::sync::Arc;

    use crate::transport::TransportConfig;

    /// The shared configuration of `testkit::source_settings(base_url)`.
    fn config(base_url: &str) -> Arc<TransportConfig> {
        Arc::new(TransportConfig::for_tests(base_url))
    }

    #[test]
    fn json_endpoint_example() {
        use crate::transport::endpoint::JsonEndpoint;
        let endpoint = JsonEndpoint::new(
            &config("http://127.0.0.1:9/v1"),
            crate::transport::pool::SourcePool::given(reqwest::Client::new()),
            "embeddings",
        );
        // Debug shows where it posts, never the credentials.
        let shown = format!("{endpoint:?}");
        assert!(shown.contains("http://127.0.0.1:9/v1/embeddings"));
        assert!(!shown.contains("sk-test"));
    }

    #[test]
    fn json_endpoint_new_example() {
        use crate::transport::endpoint::JsonEndpoint;
        // A trailing slash on BASE_URL does not double the separator.
        let endpoint = JsonEndpoint::new(
            &config("http://127.0.0.1:9/v1/"),
            crate::transport::pool::SourcePool::given(reqwest::Client::new()),
            "chat/completions",
        );
        assert_eq!(endpoint.url(), "http://127.0.0.1:9/v1/chat/completions");
    }

    #[test]
    fn requests_go_to_the_endpoint_url_and_a_bad_url_still_says_why() {
        use crate::transport::endpoint::JsonEndpoint;
        let endpoint = |base: &str| {
            JsonEndpoint::new(
                &config(base),
                crate::transport::pool::SourcePool::given(reqwest::Client::new()),
                "chat/completions",
            )
        };
        // The URL parsed at construction and the one reqwest parses from the string agree
        // (normalised host included); a URL that does not parse still fails at build, naming why.
        let good = endpoint("http://Example.COM:8080/v1");
        let request = good.post_json(b"{}".to_vec()).unwrap().build().unwrap();
        assert_eq!(
            request.url().as_str(),
            "http://example.com:8080/v1/chat/completions"
        );
        let bad = endpoint("not a url");
        let err = bad.post_json(b"{}".to_vec()).unwrap().build().unwrap_err();
        assert!(err.is_builder(), "{err:?}");
    }

    #[test]
    fn json_endpoint_url_example() {
        use crate::transport::endpoint::JsonEndpoint;
        let endpoint = JsonEndpoint::new(
            &config("https://api.example.com/v1"),
            crate::transport::pool::SourcePool::given(reqwest::Client::new()),
            "embeddings",
        );
        assert_eq!(endpoint.url(), "https://api.example.com/v1/embeddings");
    }

    #[test]
    fn json_endpoint_post_json_example() {
        #[tokio::main(flavor = "current_thread")]
        async fn main() {
            use crate::config::Secret;
            use crate::ports::FailureClass;
            use crate::transport::endpoint::JsonEndpoint;
            use polygateway_testkit::{Behaviour, MockUpstream};
            let mock = MockUpstream::start(Behaviour::healthy()).await;
            let mut settings = TransportConfig::for_tests(&mock.base_url());
            let client = reqwest::Client::builder().no_proxy().build().unwrap();
            let endpoint = JsonEndpoint::new(
                &Arc::new(settings.clone()),
                crate::transport::pool::SourcePool::given(client.clone()),
                "embeddings",
            );
            let body = br#"{"model": "test-model", "input": ["hello"]}"#.to_vec();
            let resp = endpoint.post_json(body).unwrap().send().await.unwrap();
            assert!(resp.status().is_success());
            let seen = mock.last_request().unwrap();
            assert_eq!(seen.authorization.as_deref(), Some("Bearer sk-test"));
            // A key that cannot be a header value: nothing is sent, the source is dead.
            settings.api_key = Secret::new("sk-bad\nkey");
            let broken = JsonEndpoint::new(
                &Arc::new(settings),
                crate::transport::pool::SourcePool::given(client),
                "embeddings",
            );
            assert_eq!(
                broken.post_json(Vec::new()).unwrap_err().class,
                FailureClass::SourceDead
            );
        }
        main();
    }
}
