//! `polygateway serve`: an OpenAI-compatible HTTP server in front of a [`Gateway`] (feature
//! `server`).
//!
//! Any language's OpenAI SDK calls `POST /v1/chat/completions` (streamed or not),
//! `POST /v1/responses`, `POST /v1/embeddings` and `GET /v1/models`; Anthropic's SDKs and Claude
//! Code call `POST /v1/messages` (docs/behaviour.md §12.5–§12.6); MonkeyOCR clients call
//! `POST /ocr/text` and `POST /parse`. Callers authenticate with virtual keys ([`KeyStore`]: salted hashes, per-key
//! tenant, scopes and limits); the request's `model` names a scope (or an alias of one,
//! `PGW_SERVER_MODEL_ALIASES`). Errors come back in OpenAI's error shape with the HTTP status of
//! docs/behaviour.md §12. `GET /healthz`, `GET /readyz`, `GET /metrics` and the status page
//! (`GET /`) serve operations.
//!
//! What it is not: a second call path. Every request is one call of the gateway's handles, so
//! selection, limits, breakers, retries, caching, telemetry and cancellation are exactly those
//! of an embedded caller; a client that disconnects drops its call, which releases everything.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use polygateway::server::{hash_key, KeyStore, Server};
//! use polygateway_testkit::{mock_settings, Behaviour, MockUpstream};
//! let mock = MockUpstream::start(Behaviour::healthy_with("hi")).await;
//! let gw = polygateway::Gateway::from_settings(mock_settings(&[("LLM", &mock.base_url())], &[]), "LLM").await?;
//! let keys = KeyStore::from_json(&format!(
//!     r#"{{"keys": [{{"name": "demo", "hash": "{}", "scopes": ["*"]}}]}}"#,
//!     hash_key("pgw-demo")
//! ))?;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! let base = format!("http://{}", listener.local_addr()?);
//! let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
//! let server = tokio::spawn(Server::new(gw.clone(), keys)?.serve(listener, async {
//!     let _ = stopped.await;
//! }));
//! let answer: serde_json::Value = reqwest::Client::new()
//!     .post(format!("{base}/v1/chat/completions"))
//!     .bearer_auth("pgw-demo")
//!     .json(&serde_json::json!({"model": "LLM", "messages": [{"role": "user", "content": "hello"}]}))
//!     .send()
//!     .await?
//!     .json()
//!     .await?;
//! assert_eq!(answer["choices"][0]["message"]["content"], "hi");
//! let _ = stop.send(());
//! server.await??;
//! gw.shutdown().await;
//! # Ok(()) }
//! ```

mod auth;
mod call_order;
mod conn;
mod errors;
mod ingress;
mod json_pieces;
mod prometheus;
mod routes;
mod sse;
mod state;
mod status;

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::Router;

pub use auth::keys::{generate_key, hash_key, KeyStore, VirtualKey};
pub use prometheus::{install_metrics_recorder, render_metrics};

use crate::error::GatewayError;
use crate::Gateway;
use state::App;

/// The server: a [`Gateway`], its virtual keys and the `PGW_SERVER_*` settings the gateway was
/// built with.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), polygateway::GatewayError> {
/// use polygateway::server::{KeyStore, Server};
/// use polygateway_testkit::{mock_settings, Behaviour, MockUpstream};
/// let mock = MockUpstream::start(Behaviour::healthy()).await;
/// // An alias must name a configured scope, or the server refuses to start.
/// let settings = mock_settings(&[("LLM", &mock.base_url())], &[("PGW_SERVER_MODEL_ALIASES", "gpt-4o=JUDGE")]);
/// let gw = polygateway::Gateway::from_settings(settings, "LLM").await?;
/// let err = Server::new(gw.clone(), KeyStore::from_json(r#"{"keys": []}"#)?).unwrap_err();
/// assert!(err.to_string().contains("JUDGE"), "{err}");
/// gw.shutdown().await;
/// # Ok(()) }
/// ```
pub struct Server {
    app: Arc<App>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("gateway", &self.app.gw)
            .field("keys", &self.app.keys.len())
            .field("bind", &self.app.settings.bind)
            .finish()
    }
}

impl Server {
    /// A server for `gw` accepting `keys`. Refuses an alias table naming an unknown scope.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway::GatewayError> {
    /// # use polygateway_testkit::{mock_settings, Behaviour, MockUpstream};
    /// # let mock = MockUpstream::start(Behaviour::healthy()).await;
    /// let gw = polygateway::Gateway::from_settings(mock_settings(&[("LLM", &mock.base_url())], &[]), "LLM").await?;
    /// let server = polygateway::server::Server::new(gw.clone(), polygateway::server::KeyStore::from_json(r#"{"keys": []}"#)?)?;
    /// assert!(format!("{server:?}").contains("keys: 0"));
    /// gw.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub fn new(gw: Gateway, keys: KeyStore) -> Result<Self, GatewayError> {
        Ok(Self {
            app: Arc::new(App::new(gw, keys)?),
        })
    }

    /// The routes, to serve yourself or nest into a larger axum application.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use polygateway_testkit::{mock_settings, Behaviour, MockUpstream};
    /// # let mock = MockUpstream::start(Behaviour::healthy()).await;
    /// let gw = polygateway::Gateway::from_settings(mock_settings(&[("LLM", &mock.base_url())], &[]), "LLM").await?;
    /// let keys = polygateway::server::KeyStore::from_json(r#"{"keys": []}"#)?;
    /// let router = polygateway::server::Server::new(gw.clone(), keys)?.router();
    /// let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    /// let base = format!("http://{}", listener.local_addr()?);
    /// tokio::spawn(async move { axum::serve(listener, router).await });
    /// let health = reqwest::get(format!("{base}/healthz")).await?;
    /// assert_eq!(health.status(), 200);
    /// // No key: 401 in OpenAI's error shape.
    /// let models = reqwest::get(format!("{base}/v1/models")).await?;
    /// assert_eq!(models.status(), 401);
    /// let body: serde_json::Value = models.json().await?;
    /// assert_eq!(body["error"]["code"], "invalid_api_key");
    /// gw.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub fn router(&self) -> Router {
        Router::new()
            .route(
                "/v1/chat/completions",
                post(routes::openai::chat_completions),
            )
            .route("/v1/messages", post(routes::messages::messages))
            .route(
                "/v1/messages/count_tokens",
                post(routes::messages::count_tokens),
            )
            .route("/v1/responses", post(routes::responses::responses))
            .route("/v1/responses/{id}", get(routes::responses::retrieve))
            .route("/v1/embeddings", post(routes::openai::embeddings))
            .route("/v1/models", get(routes::openai::models))
            .route("/ocr/text", post(routes::ocr::ocr_text))
            .route("/parse", post(routes::ocr::parse))
            .route("/healthz", get(routes::health::healthz))
            .route("/readyz", get(routes::health::readyz))
            .route("/metrics", get(routes::health::metrics))
            .route("/", get(status::page))
            .route("/status.json", get(status::json))
            .fallback(routes::not_found)
            .layer(routes::CountIngress(Arc::clone(&self.app)))
            .layer(DefaultBodyLimit::max(self.app.settings.body_limit_bytes))
            .with_state(Arc::clone(&self.app))
    }

    /// The dashboard alone — `GET /` (the live status page) and `GET /status.json` (its data) —
    /// for a service that embeds the gateway to mount under a path of its own. The same gating
    /// as `polygateway serve`: operator data needs a key of `keys` with the `admin` scope, or
    /// `PGW_SERVER_PUBLIC_STATUS=true` (docs/behaviour.md §12.8).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # use polygateway_testkit::{mock_settings, Behaviour, MockUpstream};
    /// # let mock = MockUpstream::start(Behaviour::healthy()).await;
    /// use polygateway::server::{hash_key, KeyStore, Server};
    /// let gw = polygateway::Gateway::from_settings(mock_settings(&[("LLM", &mock.base_url())], &[]), "LLM").await?;
    /// let keys = KeyStore::from_json(&format!(
    ///     r#"{{"keys": [{{"name": "ops", "hash": "{}", "scopes": ["admin"]}}]}}"#,
    ///     hash_key("pgw-ops")
    /// ))?;
    /// let app = axum::Router::new().nest("/dashboard", Server::new(gw.clone(), keys)?.dashboard());
    /// let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    /// let base = format!("http://{}/dashboard", listener.local_addr()?);
    /// tokio::spawn(async move { axum::serve(listener, app).await });
    /// let client = reqwest::Client::new();
    /// // Without a key: scopes and sources, up or down, nothing else.
    /// let public: serde_json::Value = client.get(format!("{base}/status.json")).send().await?.json().await?;
    /// assert_eq!(public["scopes"]["LLM"]["sources"]["openai_1"]["up"], true);
    /// assert!(public.get("series").is_none());
    /// // With the admin key: the series too.
    /// let full: serde_json::Value = client
    ///     .get(format!("{base}/status.json?range=60"))
    ///     .bearer_auth("pgw-ops")
    ///     .send().await?.json().await?;
    /// assert_eq!(full["series"]["points"], 60);
    /// gw.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub fn dashboard(&self) -> Router {
        Router::new()
            .route("/", get(status::page))
            .route("/status.json", get(status::json))
            .with_state(Arc::clone(&self.app))
    }

    /// Serve on `listener` until `shutdown` completes, then drain: `/readyz` turns 503, no new
    /// connection is accepted, requests in flight (streams included) run to their end for at most
    /// `PGW_SERVER_DRAIN_TIMEOUT_S`; what is still running then is dropped, which cancels its
    /// governed call. The gateway itself is left running (shut it down after).
    ///
    /// Connections are held to docs/behaviour.md §12.9: at start the soft open-file limit is
    /// raised to the hard limit and the connection cap (`PGW_SERVER_MAX_CONNECTIONS`, derived from
    /// that limit by default) is set; a connection past it is closed at once; heads, bodies and
    /// idle keep-alive connections have time limits. With `PGW_SERVER_ADMIN_BIND` a second
    /// listener serves `/healthz`, `/readyz` and `/metrics` with connections of its own, and
    /// keeps serving them until the drain has ended.
    ///
    /// ```no_run
    /// # async fn demo(gw: polygateway::Gateway, keys: polygateway::server::KeyStore) -> Result<(), Box<dyn std::error::Error>> {
    /// let listener = tokio::net::TcpListener::bind(gw.settings().server.bind).await?;
    /// polygateway::server::Server::new(gw.clone(), keys)?
    ///     .serve(listener, async { let _ = tokio::signal::ctrl_c().await; })
    ///     .await?;
    /// gw.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let settings = &self.app.settings;
        let open_files = conn::raise_open_file_limit();
        let cap = settings
            .max_connections
            .unwrap_or_else(|| conn::derived_cap(open_files));
        if let Some(limit) = open_files {
            if cap as u64 >= limit {
                tracing::warn!(
                    "PGW_SERVER_MAX_CONNECTIONS={cap} is not below the open-file limit ({limit}): \
                     past the limit the server cannot accept, answer /healthz or reach its upstreams"
                );
            }
        }
        tracing::info!(
            open_file_limit = open_files,
            max_connections = cap,
            "serving at most {cap} client connections"
        );
        let limits = conn::Limits::of(settings);
        let admin = match settings.admin_bind {
            Some(addr) => {
                let admin = tokio::net::TcpListener::bind(addr).await?;
                tracing::info!("admin listener (/healthz, /readyz, /metrics) on {addr}");
                Some(admin)
            }
            None => None,
        };
        let drain = tokio_util::sync::CancellationToken::new();
        let admin_drain = tokio_util::sync::CancellationToken::new();
        let kill = tokio_util::sync::CancellationToken::new();
        let main = tokio::spawn(
            conn::Listener {
                listener,
                router: self.router(),
                cap,
                limits,
            }
            .run(drain.clone(), kill.clone()),
        );
        let admin = admin.map(|listener| {
            tokio::spawn(
                conn::Listener {
                    listener,
                    router: self.admin_router(),
                    cap: conn::ADMIN_CONNECTIONS,
                    limits,
                }
                .run(admin_drain.clone(), kill.clone()),
            )
        });
        shutdown.await;
        self.app.draining.store(true, Ordering::SeqCst);
        drain.cancel();
        let drain_timeout = settings.drain_timeout;
        let mut main = main;
        let drained = tokio::time::timeout(drain_timeout, &mut main).await.is_ok();
        if !drained {
            tracing::warn!(
                "drain timeout ({:.1}s) passed with requests in flight; cancelling them",
                drain_timeout.as_secs_f64()
            );
            // Connections run in tasks of their own: ending their responses is what ends them.
            self.app.stop.cancel();
            if tokio::time::timeout(std::time::Duration::from_secs(2), &mut main)
                .await
                .is_err()
            {
                kill.cancel();
            }
        }
        admin_drain.cancel();
        if let Some(admin) = admin {
            if tokio::time::timeout(std::time::Duration::from_secs(2), admin)
                .await
                .is_err()
            {
                kill.cancel();
            }
        }
        kill.cancel();
        Ok(())
    }

    /// The admin listener's routes: the probes and the metrics, nothing a client calls.
    fn admin_router(&self) -> Router {
        Router::new()
            .route("/healthz", get(routes::health::healthz))
            .route("/readyz", get(routes::health::readyz))
            .route("/metrics", get(routes::health::metrics))
            .fallback(routes::not_found)
            .with_state(Arc::clone(&self.app))
    }
}
