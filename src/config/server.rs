//! Settings of `polygateway serve` (the `PGW_SERVER_*` keys): where it listens, how much it
//! accepts, how long it waits. Parsed with every other key, whether or not the `server` feature
//! is built, so a typo is refused the same way everywhere. What the server does with them lives
//! in `crate::server` (feature `server`); this module is values only.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

/// The `PGW_SERVER_*` keys, resolved.
///
/// ```
/// use std::collections::BTreeMap;
/// use std::time::Duration;
/// use polygateway::config::Settings;
/// let env: BTreeMap<String, String> = [
///     ("PGW_SERVER_BIND", "0.0.0.0:9000"),
///     ("PGW_SERVER_MODEL_ALIASES", "gpt-4o-mini=LLM, text-embedding-3-small=EMBED"),
///     ("PGW_SERVER_DRAIN_TIMEOUT_S", "5"),
///     ("PGW_SERVER_HEADER_TIMEOUT_S", "2.5"),
///     ("PGW_SERVER_MAX_CONNECTIONS", "5000"),
///     ("PGW_SERVER_ADMIN_BIND", "127.0.0.1:9001"),
///     ("PGW_SERVER_WORKERS", "1"),
/// ]
/// .into_iter()
/// .map(|(k, v)| (k.to_string(), v.to_string()))
/// .collect();
/// let server = Settings::from_map(&env).unwrap().server;
/// assert_eq!(server.bind.port(), 9000);
/// assert_eq!(server.model_aliases["gpt-4o-mini"], "LLM");
/// assert_eq!(server.drain_timeout, Duration::from_secs(5));
/// assert_eq!(server.keys_file, None);
/// // Operator data needs an admin key unless opted in; `/metrics` is open unless a token is set.
/// assert!(!server.public_status && server.metrics_token.is_none());
/// assert_eq!(server.header_timeout, Duration::from_millis(2500));
/// assert_eq!(server.idle_timeout, Duration::from_secs(60));
/// assert_eq!(server.max_connections, Some(5000));
/// assert_eq!(server.admin_bind.map(|a| a.port()), Some(9001));
/// assert_eq!(server.workers, Some(1));
/// // A malformed alias table is refused, naming the key.
/// let bad: BTreeMap<String, String> =
///     [("PGW_SERVER_MODEL_ALIASES".to_string(), "gpt-4o-mini".to_string())].into();
/// let err = Settings::from_map(&bad).unwrap_err();
/// assert!(err.to_string().contains("PGW_SERVER_MODEL_ALIASES"), "{err}");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ServerSettings {
    /// `PGW_SERVER_BIND`: the listening address.
    pub bind: SocketAddr,
    /// `PGW_SERVER_BODY_LIMIT_BYTES`: the largest request body accepted (413 above it).
    pub body_limit_bytes: usize,
    /// `PGW_SERVER_REQUEST_TIMEOUT_S`: the longest one request may run, streamed or not.
    pub request_timeout: Duration,
    /// `PGW_SERVER_DRAIN_TIMEOUT_S`: how long a shutdown waits for requests in flight.
    pub drain_timeout: Duration,
    /// `PGW_SERVER_KEYS_FILE`: the JSON file of virtual keys (required by `serve`).
    pub keys_file: Option<String>,
    /// `PGW_SERVER_MODEL_ALIASES`: request `model` → scope name, besides the scope names
    /// themselves.
    pub model_aliases: BTreeMap<String, String>,
    /// `PGW_SERVER_PUBLIC_STATUS`: the status page and `/status.json` show operator data (key
    /// and tenant names, spend, budgets, error text) without an admin key. For loopback-only
    /// setups.
    pub public_status: bool,
    /// `PGW_SERVER_METRICS_TOKEN`: when set, `GET /metrics` needs `Authorization: Bearer` with
    /// it (Prometheus' `authorization` / `bearer_token` scrape setting).
    pub metrics_token: Option<super::secret::Secret>,
    /// `PGW_SERVER_HEADER_TIMEOUT_S`: a request's headers arrive whole within this, counted from
    /// their first byte, or from the connection's start for its first request.
    pub header_timeout: Duration,
    /// `PGW_SERVER_BODY_TIMEOUT_S`: a request body's grace before its minimum rate counts.
    pub body_timeout: Duration,
    /// `PGW_SERVER_BODY_MIN_BYTES_PER_S`: a body of `n` bytes must have arrived within
    /// `body_timeout + n / body_min_bytes_per_s`.
    pub body_min_bytes_per_s: usize,
    /// `PGW_SERVER_IDLE_TIMEOUT_S`: how long a keep-alive connection waits for its next request.
    pub idle_timeout: Duration,
    /// `PGW_SERVER_MAX_CONNECTIONS`: open client connections at most (`None`: derived from the
    /// open-file limit when the server starts, docs/behaviour.md §12.9).
    pub max_connections: Option<usize>,
    /// `PGW_SERVER_ADMIN_BIND`: a second listener for `/healthz`, `/readyz` and `/metrics` only.
    pub admin_bind: Option<SocketAddr>,
    /// `PGW_SERVER_WORKERS`: the worker threads of `polygateway serve`'s runtime (`None`: one
    /// per core available to the process). Read by the binary before it builds its runtime; a
    /// server embedded in an application runs on the application's runtime.
    pub workers: Option<usize>,
}

impl Default for ServerSettings {
    fn default() -> Self {
        Self {
            bind: SocketAddr::from(([127, 0, 0, 1], 8080)),
            body_limit_bytes: super::defaults::SERVER_BODY_LIMIT_BYTES,
            request_timeout: Duration::from_secs_f64(super::defaults::SERVER_REQUEST_TIMEOUT_S),
            drain_timeout: Duration::from_secs_f64(super::defaults::SERVER_DRAIN_TIMEOUT_S),
            keys_file: None,
            model_aliases: BTreeMap::new(),
            public_status: false,
            metrics_token: None,
            header_timeout: Duration::from_secs_f64(super::defaults::SERVER_HEADER_TIMEOUT_S),
            body_timeout: Duration::from_secs_f64(super::defaults::SERVER_BODY_TIMEOUT_S),
            body_min_bytes_per_s: super::defaults::SERVER_BODY_MIN_BYTES_PER_S,
            idle_timeout: Duration::from_secs_f64(super::defaults::SERVER_IDLE_TIMEOUT_S),
            max_connections: None,
            admin_bind: None,
            workers: None,
        }
    }
}

/// Parses `alias=SCOPE, alias2=SCOPE2`; the error says what is wrong with which entry.
pub(crate) fn parse_aliases(value: &str) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for pair in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((alias, scope)) = pair.split_once('=') else {
            return Err(format!("entry {pair:?} has no '='"));
        };
        let (alias, scope) = (alias.trim(), scope.trim());
        if alias.is_empty() || scope.is_empty() {
            return Err(format!("entry {pair:?} has an empty side"));
        }
        if out.insert(alias.to_string(), scope.to_string()).is_some() {
            return Err(format!("alias {alias:?} is given twice"));
        }
    }
    Ok(out)
}
