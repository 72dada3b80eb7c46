//! The Redis connection shared by the governance backends: a fred pool with a reconnect policy,
//! bounded commands, and the Lua scripts run by EVALSHA (reloaded on NOSCRIPT).
//!
//! The URL may name one server, a Redis Cluster or a sentinel-managed primary (the client's
//! `redis://`, `redis-cluster://` and `redis-sentinel://` forms): every script's keys share the
//! scope's hash tag, so on a cluster each call runs on the one shard that owns that slot.
//!
//! Every failure — unreachable server, timeout, script error — becomes a [`BackendError`] whose
//! message never contains the URL's password; callers fail closed (docs/behaviour.md §10.6). Not for: the
//! response cache (it degrades silently and has its own client).

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fred::error::ErrorKind;
use fred::prelude::{
    Builder, Client, ClientLike, Config, EventInterface, FromValue, Pool, ReconnectPolicy, Value,
};
use fred::types::scripts::Script;
use polygateway_actors::BackendError;

use super::keys::Keys;
use crate::config::Secret;

/// Connection knobs. The defaults suit production; tests shorten them.
///
/// ```
/// use std::time::Duration;
/// use polygateway::redis::RedisOptions;
/// let options = RedisOptions {
///     command_timeout: Duration::from_millis(500),
///     connect_timeout: Duration::from_secs(1),
///     ..RedisOptions::default()
/// };
/// assert_eq!(options.pool_size, 2);
/// assert!(options.reconnect_min_delay < options.reconnect_max_delay);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct RedisOptions {
    /// Bound of each Redis command, a fred re-send included (default 2 s, at most 10 s: finished
    /// lease records are kept 30 s, and no script is sent after its timeout). A script call is
    /// one command; after the server lost its scripts (`NOSCRIPT`) it is three, each bounded.
    pub command_timeout: Duration,
    /// Bound of the initial connection (default 3 s).
    pub connect_timeout: Duration,
    /// Pooled connections (default 2; Redis runs scripts one at a time anyway).
    pub pool_size: usize,
    /// First reconnect delay after a dropped connection (default 100 ms).
    pub reconnect_min_delay: Duration,
    /// Largest reconnect delay (default 2 s); reconnection never gives up.
    pub reconnect_max_delay: Duration,
}

impl Default for RedisOptions {
    fn default() -> Self {
        Self {
            command_timeout: Duration::from_secs(2),
            connect_timeout: Duration::from_secs(3),
            pool_size: 2,
            reconnect_min_delay: Duration::from_millis(100),
            reconnect_max_delay: Duration::from_secs(2),
        }
    }
}

/// The longest [`RedisOptions::command_timeout`] accepted: a finished lease record and a verdict
/// id are kept [`TOMBSTONE`] = 3 × this, so a script re-sent within its timeout always finds them.
const MAX_COMMAND_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the scripts keep a finished lease record and a verdict id (`TOMBSTONE_MS` in
/// `lua/limiter.lua`, `VERDICT_KEEP_MS` in `lua/breaker.lua`).
const TOMBSTONE: Duration = Duration::from_secs(30);

/// Which Lua script to run.
#[derive(Debug, Clone, Copy)]
pub(crate) enum ScriptKind {
    /// `lua/limiter.lua`.
    Limiter,
    /// `lua/progress.lua`.
    Progress,
    /// `lua/breaker.lua`.
    Breaker,
    /// `lua/attempt.lua` over the three above.
    Attempt,
    /// `lua/budget.lua`.
    Budget,
}

impl ScriptKind {
    fn name(self) -> &'static str {
        match self {
            ScriptKind::Limiter => "limiter",
            ScriptKind::Progress => "progress",
            ScriptKind::Breaker => "breaker",
            ScriptKind::Attempt => "attempt",
            ScriptKind::Budget => "budget",
        }
    }
}

const LIMITER_LUA: &str = include_str!("../../lua/limiter.lua");
const PROGRESS_LUA: &str = include_str!("../../lua/progress.lua");
const BREAKER_LUA: &str = include_str!("../../lua/breaker.lua");
const ATTEMPT_LUA: &str = include_str!("../../lua/attempt.lua");
const BUDGET_LUA: &str = include_str!("../../lua/budget.lua");

/// `lua/attempt.lua` preceded by the three single-purpose scripts, each wrapped as a local
/// function whose parameters shadow `KEYS` and `ARGV`: one state machine, callable in-script.
fn attempt_lua() -> String {
    let mut lua = String::new();
    for (name, body) in [
        ("breaker", BREAKER_LUA),
        ("limiter", LIMITER_LUA),
        ("progress", PROGRESS_LUA),
    ] {
        lua.push_str(&format!("local function {name}(KEYS, ARGV)\n{body}\nend\n"));
    }
    lua.push_str(ATTEMPT_LUA);
    lua
}

struct Scripts {
    limiter: Script,
    progress: Script,
    breaker: Script,
    attempt: Script,
    budget: Script,
}

impl Scripts {
    fn new() -> Self {
        Self {
            limiter: Script::from_lua(LIMITER_LUA),
            progress: Script::from_lua(PROGRESS_LUA),
            breaker: Script::from_lua(BREAKER_LUA),
            attempt: Script::from_lua(attempt_lua()),
            budget: Script::from_lua(BUDGET_LUA),
        }
    }

    fn get(&self, kind: ScriptKind) -> &Script {
        match kind {
            ScriptKind::Limiter => &self.limiter,
            ScriptKind::Progress => &self.progress,
            ScriptKind::Breaker => &self.breaker,
            ScriptKind::Attempt => &self.attempt,
            ScriptKind::Budget => &self.budget,
        }
    }

    fn all(&self) -> [(ScriptKind, &Script); 5] {
        [
            (ScriptKind::Limiter, &self.limiter),
            (ScriptKind::Progress, &self.progress),
            (ScriptKind::Breaker, &self.breaker),
            (ScriptKind::Attempt, &self.attempt),
            (ScriptKind::Budget, &self.budget),
        ]
    }
}

struct Inner {
    pool: Pool,
    keys: Keys,
    prefix: String,
    scripts: Scripts,
    command_timeout: Duration,
    /// The URL password, scrubbed from every error message.
    password: Option<String>,
    /// A pooled connection has been up at least once. Until then (a store built while the server
    /// was unreachable) a command with no connection to go out on fails at once instead of
    /// queueing for its timeout: there is no reconnect in progress to wait for, only a server
    /// that is not there yet.
    up_once: AtomicBool,
}

/// A connected Redis governance store: build [`super::RedisGate`] and [`super::RedisBreakers`]
/// from it. Cheap to clone (one shared pool). The builder owns it and calls [`Self::close`].
///
/// ```no_run
/// # async fn demo() -> Result<(), polygateway::ports::BackendError> {
/// use polygateway::config::Secret;
/// use polygateway::redis::{RedisBreakers, RedisGate, RedisGovernance};
/// let redis = RedisGovernance::connect(&Secret::new("redis://127.0.0.1:6379"), "pgw").await?;
/// let gate = RedisGate::new(redis.clone());
/// let breakers = RedisBreakers::new(redis.clone());
/// # drop((gate, breakers));
/// redis.close().await;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisGovernance {
    inner: Arc<Inner>,
}

impl fmt::Debug for RedisGovernance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisGovernance")
            .field("prefix", &self.inner.prefix)
            .field("command_timeout", &self.inner.command_timeout)
            .finish_non_exhaustive()
    }
}

impl RedisGovernance {
    /// Whether `url` parses as a Redis URL, without connecting: the builder tells a mistyped
    /// `REDIS_URL` (a configuration error) from a server that is down (a governance outage).
    pub(crate) fn check_url(url: &Secret) -> Result<(), BackendError> {
        let password = url::Url::parse(url.expose())
            .ok()
            .and_then(|u| u.password().map(str::to_owned))
            .filter(|p| !p.is_empty());
        Config::from_url(url.expose()).map(|_| ()).map_err(|e| {
            BackendError::new(redact(
                format!("invalid redis url: {e}"),
                password.as_deref(),
            ))
        })
    }

    /// Connect with default [`RedisOptions`]; keys live under `key_prefix` (`pgw` in production,
    /// a unique prefix per test).
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), polygateway::ports::BackendError> {
    /// use polygateway::config::Secret;
    /// use polygateway::redis::RedisGovernance;
    /// let url = Secret::new("redis://:password@127.0.0.1:6379/0");
    /// let redis = RedisGovernance::connect(&url, "pgw").await?;
    /// assert_eq!(redis.key_prefix(), "pgw");
    /// redis.close().await;
    /// # Ok(()) }
    /// ```
    pub async fn connect(url: &Secret, key_prefix: &str) -> Result<Self, BackendError> {
        Self::connect_with(url, key_prefix, RedisOptions::default()).await
    }

    /// Connect, load the scripts, and fail within `connect_timeout` if the server is unreachable.
    ///
    /// Nothing listens on port 1 here, so this fails fast — and without echoing the password:
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use std::time::{Duration, Instant};
    /// use polygateway::config::Secret;
    /// use polygateway::redis::{RedisGovernance, RedisOptions};
    /// let options = RedisOptions { connect_timeout: Duration::from_millis(300), ..RedisOptions::default() };
    /// let started = Instant::now();
    /// let err = RedisGovernance::connect_with(&Secret::new("redis://:hunter2@127.0.0.1:1"), "pgw", options)
    ///     .await
    ///     .unwrap_err();
    /// assert!(started.elapsed() < Duration::from_secs(2));
    /// assert!(!err.message.contains("hunter2"));
    /// # }
    /// ```
    pub async fn connect_with(
        url: &Secret,
        key_prefix: &str,
        options: RedisOptions,
    ) -> Result<Self, BackendError> {
        let (this, down) = Self::open(url, key_prefix, options, false).await?;
        match down {
            None => Ok(this),
            Some(failure) => {
                // Stop the background reconnect tasks of a pool nobody will use.
                this.close().await;
                Err(failure)
            }
        }
    }

    /// Like [`Self::connect_with`], but a server that cannot be reached now is not an error:
    /// the store is returned with the reason, and keeps reconnecting in the background (the
    /// reconnect policy of `options`, for ever). Until its first connection every script call
    /// fails at once with a [`BackendError`] (the runtime fails closed on it: docs/behaviour.md
    /// §6); from then on it behaves as a store built with the server up. The builder builds the
    /// gateway's governance this way, so a service that starts before its Redis serves by itself
    /// once Redis is there, without a restart. An invalid URL or option is still an error.
    pub(crate) async fn connect_degraded(
        url: &Secret,
        key_prefix: &str,
        options: RedisOptions,
    ) -> Result<(Self, Option<BackendError>), BackendError> {
        Self::open(url, key_prefix, options, true).await
    }

    /// Build the pool and wait (at most `connect_timeout`) for it to connect and load the
    /// scripts. `keep_trying`: the first connection goes through the reconnect policy, and the
    /// wait ends at the first failed attempt (a refused port answers at once) with the store and
    /// the failure; otherwise the store is returned with the failure for the caller to close.
    async fn open(
        url: &Secret,
        key_prefix: &str,
        options: RedisOptions,
        keep_trying: bool,
    ) -> Result<(Self, Option<BackendError>), BackendError> {
        let password = url::Url::parse(url.expose())
            .ok()
            .and_then(|u| u.password().map(str::to_owned))
            .filter(|p| !p.is_empty());
        let scrub = |message: String| redact(message, password.as_deref());
        if options.command_timeout.is_zero() || options.command_timeout > MAX_COMMAND_TIMEOUT {
            return Err(BackendError::new(format!(
                "redis command_timeout {:?} is out of range: allowed is more than 0 and at most \
                 {MAX_COMMAND_TIMEOUT:?} (finished lease records are kept {TOMBSTONE:?})",
                options.command_timeout
            )));
        }

        let mut config = Config::from_url(url.expose())
            .map_err(|e| BackendError::new(scrub(format!("invalid redis url: {e}"))))?;
        // Without `keep_trying`, a failed first connection ends the client (fred's default);
        // with it, the first connection is retried like any dropped one.
        config.fail_fast = !keep_trying;
        let pool = Builder::from_config(config)
            .with_performance_config(|p| p.default_command_timeout = options.command_timeout)
            .with_connection_config(|c| {
                c.connection_timeout = options.connect_timeout;
                c.internal_command_timeout = options.command_timeout;
            })
            .set_policy(ReconnectPolicy::new_exponential(
                0,
                millis_u32(options.reconnect_min_delay),
                millis_u32(options.reconnect_max_delay),
                2,
            ))
            .build_pool(options.pool_size.max(1))
            .map_err(|e| BackendError::new(scrub(format!("redis client: {e}"))))?;

        let inner = Arc::new(Inner {
            pool,
            keys: Keys::new(key_prefix),
            prefix: key_prefix.to_owned(),
            scripts: Scripts::new(),
            command_timeout: options.command_timeout,
            password,
            up_once: AtomicBool::new(false),
        });
        let this = Self { inner };

        let connected = async {
            if keep_trying {
                // Subscribed before connecting, so the first failed attempt is seen.
                let mut errors: Vec<_> = this
                    .inner
                    .pool
                    .clients()
                    .iter()
                    .map(|c| c.error_rx())
                    .collect();
                let _task = this.inner.pool.connect();
                let first_error = async {
                    let waits = errors.iter_mut().map(|rx| Box::pin(rx.recv()));
                    let (first, _, _) = futures::future::select_all(waits).await;
                    match first {
                        Ok((e, _)) => e,
                        Err(_) => fred::error::Error::new(ErrorKind::IO, "connection closed"),
                    }
                };
                tokio::select! {
                    up = this.inner.pool.wait_for_connect() => up?,
                    e = first_error => return Err(e),
                }
            } else {
                this.inner.pool.init().await?;
            }
            this.inner.up_once.store(true, Ordering::Release);
            for (_, script) in this.inner.scripts.all() {
                script.load(this.inner.pool.next()).await?;
            }
            Ok::<(), fred::error::Error>(())
        };
        let outcome = tokio::time::timeout(options.connect_timeout, connected).await;
        let failure = match outcome {
            Ok(Ok(())) => return Ok((this, None)),
            // A server that answers but refuses these credentials or this setup will not
            // change its mind by itself: that is the configuration's, not an outage.
            Ok(Err(e))
                if keep_trying
                    && matches!(
                        e.kind(),
                        ErrorKind::Auth | ErrorKind::Config | ErrorKind::Url
                    ) =>
            {
                let refused = this.error("connect", &e);
                this.close().await;
                return Err(refused);
            }
            Ok(Err(e)) => this.error("connect", &e),
            Err(_) => BackendError::new(format!(
                "redis connect timed out after {:?}",
                options.connect_timeout
            )),
        };
        Ok((this, Some(failure)))
    }

    /// The key prefix.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), polygateway::ports::BackendError> {
    /// use polygateway::config::Secret;
    /// use polygateway::redis::RedisGovernance;
    /// // One prefix per tenant keeps their limiters and breakers apart on one server.
    /// let redis = RedisGovernance::connect(&Secret::new("redis://127.0.0.1:6379"), "pgw:tenant-a").await?;
    /// assert_eq!(redis.key_prefix(), "pgw:tenant-a");
    /// assert_eq!(redis.clone().key_prefix(), redis.key_prefix()); // clones share the store
    /// redis.close().await;
    /// # Ok(()) }
    /// ```
    pub fn key_prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// Close the connections (idempotent). Clones share the pool: close once, when done with all.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), polygateway::ports::BackendError> {
    /// use polygateway::ports::GateBackend;
    /// use polygateway::config::Secret;
    /// use polygateway::redis::{RedisGate, RedisGovernance};
    /// let redis = RedisGovernance::connect(&Secret::new("redis://127.0.0.1:6379"), "pgw").await?;
    /// let gate = RedisGate::new(redis.clone());
    /// gate.mark_progress("LLM").await?;
    /// assert!(gate.progress_age("LLM").await?.is_some());
    /// // Done with every clone (the gate shares this pool): close once.
    /// drop(gate);
    /// redis.close().await;
    /// redis.close().await; // idempotent
    /// # Ok(()) }
    /// ```
    pub async fn close(&self) {
        let _ = tokio::time::timeout(self.inner.command_timeout, self.inner.pool.quit()).await;
    }

    pub(crate) fn keys(&self) -> &Keys {
        &self.inner.keys
    }

    /// Run one script by EVALSHA (reloading it on NOSCRIPT), bounded by the command timeout.
    pub(crate) async fn eval<R: FromValue>(
        &self,
        kind: ScriptKind,
        keys: Vec<String>,
        args: Vec<Value>,
    ) -> Result<R, BackendError> {
        self.eval_on(self.inner.pool.next_connected(), kind, keys, args)
            .await
    }

    /// A pooled connection to pin a call and its compensation to (commands of one connection run
    /// in order, so a compensation queued behind a re-sent script runs after it).
    pub(crate) fn pinned(&self) -> Client {
        self.inner.pool.next_connected().clone()
    }

    /// [`Self::eval`] on a given connection.
    ///
    /// Bounded by fred's own command timeout (`command_timeout`, for the `EVALSHA` and, on
    /// `NOSCRIPT`, for the reload and the second `EVALSHA` each), never by a timer around the call:
    /// fred marks a command it timed out and then neither writes it late nor replays it after a
    /// reconnect, whereas a command abandoned by an outer timer is replayed. So no script of this
    /// call is sent after its timeout — which is what lets a finished lease record be forgotten
    /// after [`TOMBSTONE`] instead of outliving every possible reconnect.
    pub(crate) async fn eval_on<R: FromValue>(
        &self,
        client: &Client,
        kind: ScriptKind,
        keys: Vec<String>,
        args: Vec<Value>,
    ) -> Result<R, BackendError> {
        if !self.inner.up_once.load(Ordering::Acquire) {
            if !client.is_connected() {
                return Err(BackendError::new(format!(
                    "redis {}: not connected (the server was unreachable when the store was \
                     built; reconnecting in the background)",
                    kind.name()
                )));
            }
            self.inner.up_once.store(true, Ordering::Release);
        }
        let script = self.inner.scripts.get(kind);
        script
            .evalsha_with_reload::<R, _, _>(client, keys, args)
            .await
            .map_err(|e| match e.kind() {
                ErrorKind::Timeout => BackendError::new(format!(
                    "redis {} script timed out after {:?}",
                    kind.name(),
                    self.inner.command_timeout
                )),
                _ => self.error(kind.name(), &e),
            })
    }

    /// After a failed call that may still have taken effect (a timeout, or a connection dropped
    /// after the server ran the script), undo it in the background on the same connection.
    /// Best effort: the compensation is idempotent and a no-op if the call never ran; if it fails
    /// too, the lease/probe TTL reclaims what was taken.
    pub(crate) fn compensate(
        &self,
        client: Client,
        kind: ScriptKind,
        keys: Vec<String>,
        args: Vec<Value>,
    ) {
        let this = self.clone();
        tokio::spawn(async move {
            if let Err(e) = this.eval_on::<Value>(&client, kind, keys, args).await {
                tracing::debug!(error = %e, "compensation after a failed redis call did not run");
            }
        });
    }

    fn error(&self, what: &str, e: &fred::error::Error) -> BackendError {
        BackendError::new(redact(
            format!("redis {what}: {e}"),
            self.inner.password.as_deref(),
        ))
    }
}

fn millis_u32(d: Duration) -> u32 {
    u32::try_from(d.as_millis()).unwrap_or(u32::MAX)
}

/// Remove the password from a message (fred and url errors should not echo it; be sure anyway).
fn redact(message: String, password: Option<&str>) -> String {
    match password {
        Some(p) if message.contains(p) => message.replace(p, "***"),
        _ => message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scripts_keep_records_as_long_as_the_client_promises() {
        let ms = TOMBSTONE.as_millis();
        assert_eq!(TOMBSTONE, MAX_COMMAND_TIMEOUT * 3);
        assert!(LIMITER_LUA.contains(&format!("local TOMBSTONE_MS = {ms}\n")));
        assert!(BREAKER_LUA.contains(&format!("local VERDICT_KEEP_MS = {ms}\n")));
    }

    #[tokio::test]
    async fn a_command_timeout_out_of_range_is_refused_by_name() {
        for bad in [
            Duration::ZERO,
            MAX_COMMAND_TIMEOUT + Duration::from_millis(1),
        ] {
            let options = RedisOptions {
                command_timeout: bad,
                ..RedisOptions::default()
            };
            let err =
                RedisGovernance::connect_with(&Secret::new("redis://127.0.0.1:1"), "t", options)
                    .await
                    .unwrap_err();
            assert!(err.message.contains("command_timeout"), "{}", err.message);
            assert!(err.message.contains("at most 10s"), "{}", err.message);
        }
    }

    #[test]
    fn redact_scrubs_the_password() {
        assert_eq!(
            redact("auth failed for hunter2 at x".into(), Some("hunter2")),
            "auth failed for *** at x"
        );
        assert_eq!(redact("plain".into(), None), "plain");
    }

    #[tokio::test]
    async fn unreachable_server_fails_fast_without_leaking_the_password() {
        let url = Secret::new("redis://user:s3cr3t-pw@127.0.0.1:1");
        let options = RedisOptions {
            connect_timeout: Duration::from_millis(800),
            ..RedisOptions::default()
        };
        let started = std::time::Instant::now();
        let err = RedisGovernance::connect_with(&url, "t", options)
            .await
            .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(3));
        assert!(!err.message.contains("s3cr3t-pw"), "{}", err.message);
    }

    #[tokio::test]
    async fn invalid_url_is_a_backend_error() {
        let err = RedisGovernance::connect(&Secret::new("not a url:pw@"), "t")
            .await
            .unwrap_err();
        assert!(err.message.contains("invalid redis url"), "{}", err.message);
    }
}
