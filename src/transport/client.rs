//! Building a source's HTTP client: connect deadline, proxies, TLS provider and the pool's idle
//! timeout. Its own file because the pool (`pool`), the re-send (`resend`) and the OCR transport
//! build clients, and none of them should depend on the others to do it.

use std::time::Duration;

use super::TransportConfig;

/// Connect deadline when the source's TTFT deadline is longer: a TCP/TLS handshake that takes
/// longer than this is a dead route, not a slow model.
const MAX_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Build the pooled HTTP client of one source.
///
/// - connect timeout = `min(ttft_timeout, timeout, 10 s)`;
/// - **no** total timeout: `reqwest`'s total deadline includes the body and would kill healthy
///   long streams; the watchdog bounds the body instead;
/// - `trust_env = false` → proxy environment variables are ignored (`no_proxy()`);
/// - idle pooled connections are dropped after `POOL_IDLE_TIMEOUT_S` (default 4 s, below the
///   5 s keep-alive of llama.cpp, uvicorn, Node and Apache), so the pool rarely offers a
///   connection the server already closed; hyper itself never reuses a connection whose answer
///   said `Connection: close`. A server that announces a shorter `Keep-Alive: timeout=` gets a
///   lower idle timeout: hyper's pool has one idle timeout per client, so the source's client is
///   replaced by one from [`build_client_with_idle_timeout`] (`pool::SourcePool`).
///
/// One client per source, cloned into every attempt (it pools connections per host).
///
/// # Panics
/// Like `reqwest::Client::new`, when the TLS backend cannot be initialised.
pub(crate) fn build_client(config: &TransportConfig) -> reqwest::Client {
    build_client_with_idle_timeout(config, config.pool_idle_timeout)
}

/// [`build_client`] with another idle timeout than the configured one (`pool::SourcePool`).
///
/// # Panics
/// Like [`build_client`].
pub(crate) fn build_client_with_idle_timeout(
    config: &TransportConfig,
    idle_timeout: Duration,
) -> reqwest::Client {
    client_builder(config)
        .pool_idle_timeout(idle_timeout)
        .build()
        .expect("the HTTP client's TLS backend could not be initialised")
}

/// A client like [`build_client`]'s that keeps no idle connection: each request it sends opens
/// its own (the re-send of a request whose pooled connection was closed, `resend`).
///
/// # Panics
/// Like [`build_client`].
pub(crate) fn fresh_connection_client(config: &TransportConfig) -> reqwest::Client {
    client_builder(config)
        .pool_max_idle_per_host(0)
        .build()
        .expect("the HTTP client's TLS backend could not be initialised")
}

fn client_builder(config: &TransportConfig) -> reqwest::ClientBuilder {
    #[cfg(feature = "rustls")]
    install_rustls_provider();
    let connect = config
        .ttft_timeout
        .min(config.timeout)
        .min(MAX_CONNECT_TIMEOUT);
    let builder = reqwest::Client::builder()
        .connect_timeout(connect)
        .tcp_nodelay(true);
    if config.trust_env {
        builder
    } else {
        builder.no_proxy()
    }
}

/// reqwest's rustls backend (`rustls-no-provider`) uses the process's default crypto provider and
/// panics without one: make it ring, unless the application already installed its own.
#[cfg(feature = "rustls")]
fn install_rustls_provider() {
    let _already_installed = rustls::crypto::ring::default_provider().install_default();
}

#[cfg(test)]
mod examples {
    //! Usage cases of crate-private items (they were doc examples while the items were public).

    #[test]
    fn build_client_example() {
        #[tokio::main(flavor = "current_thread")]
        async fn main() {
            use crate::transport::client::build_client;
            use polygateway_testkit::{Behaviour, MockUpstream};
            let mock = MockUpstream::start(Behaviour::healthy()).await;
            // testkit settings have TRUST_ENV=false: no proxy from the environment.
            let config = crate::transport::TransportConfig::for_tests(&mock.base_url());
            let client = build_client(&config);
            let resp = client
                .get(format!("{}/models", mock.base_url()))
                .send()
                .await
                .unwrap();
            assert!(resp.status().is_success());
        }
        main();
    }
}
