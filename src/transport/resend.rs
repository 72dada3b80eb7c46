//! Re-sending a request the upstream closed its connection on before answering
//! (docs/behaviour.md §7.1, "a connection the upstream closed").
//!
//! A pooled keep-alive connection can be closed by the upstream at any moment: an idle timeout
//! shorter than the pool's, a server that closes after every streamed answer although it
//! advertises `Keep-Alive` (llama.cpp's `llama-server`), a load balancer recycling connections.
//! A request that goes out on such a connection fails before any byte of an answer arrives —
//! hyper reports it as *canceled* (found closed before the request was written) or *incomplete
//! message* (`connection closed before message completed`), or the write meets a reset. That is
//! the connection's fault, not the source's: the request is re-sent at once, once, on a
//! connection opened for it alone (a client that keeps no idle connections), and only what that
//! re-send gives is the attempt's result. A genuinely broken source fails the re-send too, so its
//! fault is still counted — on the fresh connection, where staleness cannot be the cause.
//!
//! What cannot be told apart on the wire: a server that read the request and died before
//! answering looks the same as one that had closed the socket. One re-send bounds the cost of
//! that case to one extra upstream request (an LLM call changes nothing upstream), which is the
//! same request a retry would have sent, without spending the call's retry budget or the source's
//! health. Errors after an answer began (a cut stream) are never re-sent here: the transport
//! judges those, and the runtime retries them as attempts.

use std::error::Error as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use super::TransportConfig;

/// `pgw_resends_total`: requests re-sent on a fresh connection, by `source`.
pub(crate) const RESENDS_TOTAL: &str = "pgw_resends_total";

/// Sends a source's requests on its pooled client, and once more on a fresh connection when the
/// pooled one turned out closed. Every answer is shown to the pool, which follows its
/// `Keep-Alive: timeout=` (`pool`).
#[derive(Debug)]
pub(crate) struct Resender {
    pooled: super::pool::SourcePool,
    /// Keeps no idle connection: every request it sends opens its own. Built at the first
    /// re-send, from `config`: building a client sets up its TLS backend (the system's CA
    /// store read and parsed, about 36 ms and 1 MB each on a 2-core CI machine), and most sources
    /// never re-send — built with the pooled one, it doubled every source's start-up cost.
    fresh: OnceLock<reqwest::Client>,
    /// The transport's, shared.
    config: Arc<TransportConfig>,
    resends: AtomicU64,
    counter: metrics::Counter,
}

impl Resender {
    pub(crate) fn new(config: &Arc<TransportConfig>, pooled: super::pool::SourcePool) -> Self {
        Self {
            pooled,
            fresh: OnceLock::new(),
            config: Arc::clone(config),
            resends: AtomicU64::new(0),
            counter: metrics::counter!(RESENDS_TOTAL, "source" => config.name.clone()),
        }
    }

    /// The pool ordinary requests go out on.
    pub(crate) fn pool(&self) -> &super::pool::SourcePool {
        &self.pooled
    }

    /// Requests re-sent so far.
    pub(crate) fn resends(&self) -> u64 {
        self.resends.load(Ordering::Relaxed)
    }

    /// Whether the fresh-connection client has been built (only a re-send builds it).
    #[cfg(test)]
    fn fresh_client_built(&self) -> bool {
        self.fresh.get().is_some()
    }

    /// Send `request`; when it fails before any answer because its connection was closed, send
    /// it once more on a fresh connection. A body that cannot be copied (a stream) is never
    /// re-sent.
    pub(crate) async fn execute(
        &self,
        request: reqwest::Request,
    ) -> Result<reqwest::Response, reqwest::Error> {
        let spare = request.try_clone();
        let answer = match self.pooled.client().execute(request).await {
            Err(e) if closed_before_answer(&e) => match spare {
                Some(again) => {
                    self.resends.fetch_add(1, Ordering::Relaxed);
                    self.counter.increment(1);
                    tracing::debug!(
                        source = %self.config.name,
                        error = %super::http::error_chain(&e),
                        "the connection was closed before any answer; re-sending on a fresh one"
                    );
                    // Built here on the worker thread, once per source: a pause of one
                    // client build on the first re-send, instead of one at every start.
                    let fresh = self
                        .fresh
                        .get_or_init(|| super::client::fresh_connection_client(&self.config));
                    fresh.execute(again).await
                }
                None => Err(e),
            },
            other => other,
        };
        if let Ok(response) = &answer {
            self.pooled.observe(response.headers());
        }
        answer
    }
}

/// `true` when `err` says the connection ended before any byte of an answer: hyper's canceled
/// or incomplete-message errors, or a reset / broken pipe while sending. Timeouts and connect
/// failures are not (a connect failure is a fresh connection: the source itself is unreachable).
pub(crate) fn closed_before_answer(err: &reqwest::Error) -> bool {
    if err.is_timeout() || err.is_connect() || err.is_body() || err.is_decode() {
        return false;
    }
    let mut cause = err.source();
    while let Some(e) = cause {
        if let Some(h) = e.downcast_ref::<hyper::Error>() {
            if h.is_incomplete_message() || h.is_canceled() {
                return true;
            }
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset};
            if matches!(io.kind(), ConnectionReset | BrokenPipe | ConnectionAborted) {
                return true;
            }
        }
        cause = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server that accepts, reads a little and closes without answering, every time.
    async fn closing_server() -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let Ok((mut s, _)) = listener.accept().await else {
                    return;
                };
                let mut buf = [0u8; 16];
                let _ = tokio::io::AsyncReadExt::read(&mut s, &mut buf).await;
                drop(s);
            }
        });
        format!("http://{addr}/v1")
    }

    #[tokio::test]
    async fn a_close_before_the_answer_is_recognised_and_resent_once() {
        let base = closing_server().await;
        let config = Arc::new(TransportConfig::for_tests(&base));
        let resender = Resender::new(&config, super::super::pool::SourcePool::built(&config));
        let request = resender
            .pool()
            .client()
            .post(format!("{base}/chat/completions"))
            .body("{}")
            .build()
            .unwrap();
        assert!(!resender.fresh_client_built(), "built before any re-send");
        let err = resender.execute(request).await.unwrap_err();
        assert!(closed_before_answer(&err), "{err:?}");
        // Once: the fresh connection was closed too, and that is the result.
        assert_eq!(resender.resends(), 1);
        assert!(resender.fresh_client_built());
    }

    #[tokio::test]
    async fn refused_connections_and_timeouts_are_not_resent() {
        let config = Arc::new(TransportConfig::for_tests("http://127.0.0.1:9/v1"));
        let resender = Resender::new(&config, super::super::pool::SourcePool::built(&config));
        let request = resender
            .pool()
            .client()
            .post("http://127.0.0.1:9/v1/chat/completions")
            .body("{}")
            .build()
            .unwrap();
        let err = resender.execute(request).await.unwrap_err();
        assert!(err.is_connect() && !closed_before_answer(&err), "{err:?}");
        assert_eq!(resender.resends(), 0);
        // Nothing was re-sent, so no second client (and no second TLS setup) was built.
        assert!(!resender.fresh_client_built());
    }
}
