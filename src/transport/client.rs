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
    #[cfg(feature = "native-tls")]
    let builder = match shared_native_tls() {
        Some(connector) => builder.tls_backend_preconfigured(connector),
        // reqwest builds its own, as before, and says why when it cannot.
        None => builder,
    };
    if config.trust_env {
        builder
    } else {
        builder.no_proxy()
    }
}

/// The process's native-tls connector, built once and shared by every client. Building one loads
/// and parses the system's CA bundle: about 40 ms of CPU on a 2-core VM, nearly all of what
/// assembling one source cost, paid again by every source and every client rebuilt for a shorter
/// `Keep-Alive` (on the call path). A connector is a handle on one OpenSSL context, which is safe
/// to share between clients and threads. Configured as reqwest's own default connector: system
/// roots, SNI, hostname and certificate checks, ALPN `h2` then `http/1.1`.
///
/// `None` in a process forked after the connector was built (each client then builds its own, as
/// before: a context copied by `fork` may hold a lock a thread of the parent had taken) or when it
/// cannot be built (reqwest then tries itself and reports why).
#[cfg(feature = "native-tls")]
fn shared_native_tls() -> Option<native_tls::TlsConnector> {
    static SHARED: std::sync::OnceLock<(u32, Option<native_tls::TlsConnector>)> =
        std::sync::OnceLock::new();
    let (built_by, connector) = SHARED.get_or_init(|| {
        let connector = native_tls::TlsConnector::builder()
            .request_alpns(&["h2", "http/1.1"])
            .build()
            .ok();
        (std::process::id(), connector)
    });
    if *built_by == std::process::id() {
        connector.clone()
    } else {
        None
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

#[cfg(all(test, feature = "native-tls"))]
mod shared_tls {
    use super::*;

    /// A TLS server on 127.0.0.1 with a self-signed certificate (for `localhost` and 127.0.0.1)
    /// that no trust store holds: it takes `handshakes` connections and tries a handshake on each.
    fn untrusted_server(handshakes: usize) -> u16 {
        let identity = native_tls::Identity::from_pkcs8(
            include_bytes!("../../tests/fixtures/self-signed-test.crt"),
            include_bytes!("../../tests/fixtures/self-signed-test.key"),
        )
        .unwrap();
        let acceptor = native_tls::TlsAcceptor::new(identity).unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for stream in listener.incoming().take(handshakes) {
                // The client refuses the certificate, so this handshake fails too.
                let _ = acceptor.accept(stream.unwrap());
            }
        });
        port
    }

    /// The one connector every client shares is reqwest's default one, certificate checks
    /// included: sharing it must not have turned verification off for any client.
    #[tokio::test]
    async fn clients_share_one_connector_that_still_refuses_an_untrusted_certificate() {
        let config = TransportConfig::for_tests("https://127.0.0.1:1");
        let clients = [
            build_client(&config),
            build_client_with_idle_timeout(&config, Duration::from_secs(1)),
            fresh_connection_client(&config),
        ];
        assert!(
            shared_native_tls().is_some(),
            "the process's connector was built and is handed out"
        );
        let port = untrusted_server(clients.len());
        for client in clients {
            let err = client
                .get(format!("https://127.0.0.1:{port}/"))
                .send()
                .await
                .unwrap_err();
            let chain: Vec<String> =
                std::iter::successors(Some(&err as &dyn std::error::Error), |e| e.source())
                    .map(ToString::to_string)
                    .collect();
            assert!(
                chain
                    .iter()
                    .any(|e| e.contains("certificate verify failed")),
                "{chain:?}"
            );
        }
    }
}
