//! The server's connections: its own accept loop in front of the axum routes, so that a hostile
//! client cannot hold what every other client needs (docs/behaviour.md §12.9).
//!
//! - a cap on open connections (a semaphore; past it a new connection is closed at once), derived
//!   by default from the open-file limit, which [`raise_open_file_limit`] raises to its hard
//!   limit first;
//! - a time limit on a request's headers (from the connection's start for its first request,
//!   from the first byte of the head after that), on the body at a minimum rate, and on a
//!   keep-alive connection waiting for its next request. One monitor per connection watches the
//!   three: it sleeps until the earliest deadline, or at most the shortest of the three limits
//!   (then it looks again), and closes the connection when one passes. A deadline that starts
//!   later cannot fall before the monitor's next look, so nothing a request does wakes it: a
//!   request costs the monitor nothing. (hyper's own `header_read_timeout` also runs while a
//!   keep-alive connection waits, so it cannot tell an idle connection from a slow head; this
//!   module keeps them apart.)
//! - HTTP/1.1 only (keep-alive and pipelining), at most [`MAX_HEADERS`] headers in at most
//!   [`MAX_HEAD_BYTES`]: over either the answer is 431 and the connection closes.
//!
//! What a connection does once its request is read is the router's business: nothing here knows
//! a route. Draining closes a connection with no request in flight at once and lets a busy one
//! end after its answer (hyper's graceful shutdown).
//!
//! One gap is known: a head pipelined in the same read as the request before it is seen only
//! when that request has been answered, so it is held to the idle timeout, not the header
//! timeout (still bounded).

use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, Uri};
use axum::response::Response;
use axum::Router;
use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::ServerSettings;
use crate::metrics::{SERVER_CONNECTIONS, SERVER_CONNECTIONS_SHED_TOTAL};

/// Headers a request may have (hyper's default, stated): more is 431.
pub(crate) const MAX_HEADERS: usize = 100;
/// The largest request head (request line and headers), bytes: more is 431. nginx allows 4 × 8 KiB
/// by default, Go 1 MiB; 64 KiB leaves room for large bearer tokens and cookies.
pub(crate) const MAX_HEAD_BYTES: usize = 64 << 10;
/// Connections the admin listener (`PGW_SERVER_ADMIN_BIND`) holds at most, besides the main cap.
pub(crate) const ADMIN_CONNECTIONS: usize = 64;
/// File descriptors the default cap always leaves to the rest of the process.
const FD_RESERVE: u64 = 256;
/// The open-file limit the default cap is derived from is read as at most this (a platform
/// without a limit reports `u64::MAX`).
const FD_CEILING: u64 = 1 << 20;
/// Request body pieces smaller than this are copied out of the connection's read buffer.
const COMPACT_BELOW: usize = 1024;
/// A shed warning is logged at most this often per reason.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// Raises the soft open-file limit to the hard limit and answers the soft limit now in force
/// (`None` where it cannot be read). A server holds a descriptor per connection: the soft limit
/// distributions ship (1024) would cap it far below what the hard limit allows.
pub(crate) fn raise_open_file_limit() -> Option<u64> {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => Some(limit),
        Err(e) => {
            tracing::warn!("could not raise the open-file limit: {e}");
            None
        }
    }
}

/// The default connection cap for an open-file limit: three quarters of it, and at least
/// [`FD_RESERVE`] descriptors left over for upstream connections, the telemetry store, Redis,
/// the listeners and the admin listener's connections.
pub(crate) fn derived_cap(open_files: Option<u64>) -> usize {
    let limit = open_files.unwrap_or(1024).min(FD_CEILING);
    let cap = (limit / 4 * 3)
        .min(limit.saturating_sub(FD_RESERVE))
        .max(16);
    usize::try_from(cap).unwrap_or(usize::MAX)
}

/// Why a connection was closed by the server rather than by its client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Close {
    /// The cap was reached: closed at accept (shed).
    Cap,
    /// Its request head did not arrive in time (shed).
    HeaderTimeout,
    /// Its request body came slower than the minimum rate (shed).
    BodyTooSlow,
    /// A keep-alive connection waited longer than the idle timeout (ordinary hygiene, not shed).
    Idle,
}

impl Close {
    fn reason(self) -> &'static str {
        match self {
            Close::Cap => "cap",
            Close::HeaderTimeout => "header_timeout",
            Close::BodyTooSlow => "body_too_slow",
            Close::Idle => "idle",
        }
    }
}

/// Counts a shed connection and logs it, at most once per [`WARN_EVERY`] per reason.
fn shed(reason: Close, open: usize, cap: usize) {
    static LAST: Mutex<[Option<Instant>; 3]> = Mutex::new([None; 3]);
    static SINCE: [AtomicU64; 3] = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];
    let i = match reason {
        Close::Cap => 0,
        Close::HeaderTimeout => 1,
        Close::BodyTooSlow => 2,
        Close::Idle => return,
    };
    metrics::counter!(SERVER_CONNECTIONS_SHED_TOTAL, "reason" => reason.reason()).increment(1);
    SINCE[i].fetch_add(1, Ordering::Relaxed);
    let now = Instant::now();
    let Ok(mut last) = LAST.lock() else { return };
    if last[i].is_some_and(|t| now.duration_since(t) < WARN_EVERY) {
        return;
    }
    last[i] = Some(now);
    drop(last);
    let n = SINCE[i].swap(0, Ordering::Relaxed);
    tracing::warn!(
        reason = reason.reason(),
        shed = n,
        open,
        cap,
        "closed {n} client connection(s) ({}) since the last warning; {open} open of {cap}",
        reason.reason()
    );
}

/// The time limits of one listener's connections.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) header: Duration,
    pub(crate) body_grace: Duration,
    pub(crate) body_rate: usize,
    pub(crate) idle: Duration,
}

impl Limits {
    pub(crate) fn of(settings: &ServerSettings) -> Self {
        Self {
            header: settings.header_timeout,
            body_grace: settings.body_timeout,
            body_rate: settings.body_min_bytes_per_s.max(1),
            idle: settings.idle_timeout,
        }
    }

    /// The longest the monitor sleeps without looking: the shortest limit. Every deadline
    /// starts at least this long after the moment it is set, so one set while the monitor
    /// sleeps cannot pass before its next look.
    fn look_every(&self) -> Duration {
        self.header.min(self.body_grace).min(self.idle)
    }
}

/// What one connection is doing, as its monitor needs to know.
struct State {
    /// Requests whose answer has not ended (HTTP/1: 0 or 1).
    in_flight: u32,
    /// Since when no request has been in flight (the connection's start at first).
    idle_since: Instant,
    /// No request has arrived yet.
    fresh: bool,
    /// The first byte read while no request was in flight: a head has started.
    head_started: Option<Instant>,
    /// A request body being read: when it started and how many bytes have come.
    body: Option<(Instant, u64)>,
}

/// One connection's shared state: written by its socket, its requests and their bodies, read
/// by its monitor (which nothing wakes: it looks at least every [`Limits::look_every`]).
struct ConnState {
    state: Mutex<State>,
}

enum Verdict {
    Close(Close),
    Until(Option<Instant>),
}

impl ConnState {
    /// A connection accepted at `accepted`: its first head is due a header timeout after that.
    fn new(accepted: Instant) -> Self {
        Self {
            state: Mutex::new(State {
                in_flight: 0,
                idle_since: accepted,
                fresh: true,
                head_started: None,
                body: None,
            }),
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut state)
    }

    fn read_bytes(&self) {
        self.with(|s| {
            if s.in_flight == 0 && s.head_started.is_none() && !s.fresh {
                s.head_started = Some(Instant::now());
            }
        });
    }

    fn request_started(&self) {
        self.with(|s| {
            s.in_flight += 1;
            s.fresh = false;
            s.head_started = None;
        });
    }

    fn request_ended(&self) {
        self.with(|s| {
            s.in_flight = s.in_flight.saturating_sub(1);
            if s.in_flight == 0 {
                s.idle_since = Instant::now();
                s.head_started = None;
                s.body = None;
            }
        });
    }

    fn body_started(&self) {
        self.with(|s| s.body = Some((Instant::now(), 0)));
    }

    fn body_read(&self, n: usize) {
        self.with(|s| {
            if let Some((_, bytes)) = &mut s.body {
                *bytes += n as u64;
            }
        });
    }

    fn body_ended(&self) {
        self.with(|s| s.body = None);
    }

    fn verdict(&self, limits: &Limits, now: Instant) -> Verdict {
        self.with(|s| {
            let (deadline, why) = if s.in_flight == 0 {
                if s.fresh {
                    (s.idle_since + limits.header, Close::HeaderTimeout)
                } else if let Some(t) = s.head_started {
                    (t + limits.header, Close::HeaderTimeout)
                } else {
                    (s.idle_since + limits.idle, Close::Idle)
                }
            } else if let Some((started, bytes)) = s.body {
                let earned = Duration::from_secs_f64(bytes as f64 / limits.body_rate as f64);
                (started + limits.body_grace + earned, Close::BodyTooSlow)
            } else {
                return Verdict::Until(None);
            };
            if now >= deadline {
                Verdict::Close(why)
            } else {
                Verdict::Until(Some(deadline))
            }
        })
    }

    /// Resolves when one of the connection's deadlines passes, with why. It sleeps until the
    /// earliest deadline or for [`Limits::look_every`], whichever comes first, and looks again:
    /// a deadline set meanwhile starts at least that long after it was set, so none is missed
    /// and none is seen late, and the state changes of a request need not wake it.
    async fn monitor(&self, limits: Limits) -> Close {
        let look_every = limits.look_every();
        let sleep = tokio::time::sleep(Duration::ZERO);
        tokio::pin!(sleep);
        loop {
            let now = Instant::now();
            match self.verdict(&limits, now) {
                Verdict::Close(why) => return why,
                Verdict::Until(deadline) => {
                    let next = now + look_every;
                    sleep.as_mut().reset(deadline.map_or(next, |d| d.min(next)));
                    sleep.as_mut().await;
                }
            }
        }
    }
}

/// The socket, telling its connection's state when bytes come in.
struct Observed {
    inner: TcpStream,
    conn: Arc<ConnState>,
}

impl AsyncRead for Observed {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.conn.read_bytes();
        }
        polled
    }
}

impl AsyncWrite for Observed {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A request body, telling its connection's state how fast it comes.
struct RateBody {
    inner: Incoming,
    conn: Arc<ConnState>,
    done: bool,
}

impl RateBody {
    fn new(inner: Incoming, conn: Arc<ConnState>) -> Self {
        let done = inner.is_end_stream();
        if !done {
            conn.body_started();
        }
        Self { inner, conn, done }
    }

    fn finish(&mut self) {
        if !self.done {
            self.done = true;
            self.conn.body_ended();
        }
    }
}

impl HttpBody for RateBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    self.conn.body_read(data.len());
                }
                if self.inner.is_end_stream() {
                    self.finish();
                }
                // A small piece shares the connection's whole read buffer: kept until the body
                // is complete, a trickle of them would pin a buffer each (8 KiB for a byte).
                Poll::Ready(Some(Ok(frame.map_data(|data| {
                    if data.len() < COMPACT_BELOW {
                        Bytes::copy_from_slice(&data)
                    } else {
                        data
                    }
                }))))
            }
            Poll::Ready(other) => {
                self.finish();
                Poll::Ready(other)
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for RateBody {
    fn drop(&mut self) {
        self.finish();
    }
}

/// Ends its request's time in flight when dropped (its answer written, or abandoned).
struct InFlight(Arc<ConnState>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.request_ended();
    }
}

/// A response body holding its request's [`InFlight`] until hyper has written it.
struct Tracked {
    inner: Body,
    _in_flight: InFlight,
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The request's head copied out of its connection's read buffer. hyper hands the URI and the
/// header values out as slices of that buffer: held for the whole request (a 20 ms upstream, a
/// long stream) they pin it, and hyper's next read on the connection, which it makes while the
/// request is in flight, has to allocate another — two 8 KiB buffers per request in flight. The
/// few hundred bytes of a head, copied into one small buffer of their own (one allocation, not
/// one per value), leave the read buffer to be reused.
fn detach_head<B>(mut req: Request<B>) -> Request<B> {
    // A server's request target is a path and query (origin form); any other form is copied
    // through its text.
    let origin_form = req.uri().scheme().is_none() && req.uri().authority().is_none();
    let target = req.uri().path_and_query().filter(|_| origin_form);
    let size = req.headers().values().map(HeaderValue::len).sum::<usize>()
        + target.map_or(0, |pq| pq.as_str().len());
    let mut copy = bytes::BytesMut::with_capacity(size);
    for value in req.headers().values() {
        copy.extend_from_slice(value.as_bytes());
    }
    if let Some(pq) = target {
        copy.extend_from_slice(pq.as_str().as_bytes());
    }
    let copy = copy.freeze();
    let mut at = 0;
    for value in req.headers_mut().values_mut() {
        let piece = copy.slice(at..at + value.len());
        at += value.len();
        if let Ok(mut detached) = HeaderValue::from_maybe_shared(piece) {
            detached.set_sensitive(value.is_sensitive());
            *value = detached;
        }
    }
    let uri = if origin_form {
        axum::http::uri::PathAndQuery::from_maybe_shared(copy.slice(at..))
            .ok()
            .map(Uri::from)
    } else {
        Uri::from_maybe_shared(Bytes::from(req.uri().to_string())).ok()
    };
    if let Some(uri) = uri {
        *req.uri_mut() = uri;
    }
    req
}

/// One listener: its routes, its cap and its connections' limits.
pub(crate) struct Listener {
    pub(crate) listener: TcpListener,
    pub(crate) router: Router,
    pub(crate) cap: usize,
    pub(crate) limits: Limits,
}

impl Listener {
    /// Accepts until `drain`, then lets every connection end gracefully; returns when the last
    /// one has. `kill` drops whatever connection is left at once.
    pub(crate) async fn run(self, drain: CancellationToken, kill: CancellationToken) {
        let Listener {
            listener,
            router,
            cap,
            limits,
        } = self;
        let permits = Arc::new(Semaphore::new(cap));
        let mut http = hyper::server::conn::http1::Builder::new();
        http.keep_alive(true)
            .max_headers(MAX_HEADERS)
            .max_header_size(MAX_HEAD_BYTES)
            .header_read_timeout(None);
        let http = Arc::new(http);
        loop {
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                () = drain.cancelled() => break,
            };
            let at = Instant::now();
            let stream = match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of descriptors (or a connection reset before accept): the next accept
                    // can only succeed once something closes, so do not spin.
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
                drop(stream);
                shed(Close::Cap, cap - permits.available_permits(), cap);
                continue;
            };
            // Deltas are small writes: without TCP_NODELAY each would wait for the peer's ACK.
            let _ = stream.set_nodelay(true);
            let (router, http, drain, kill) = (
                router.clone(),
                Arc::clone(&http),
                drain.clone(),
                kill.clone(),
            );
            let permits = Arc::clone(&permits);
            metrics::gauge!(SERVER_CONNECTIONS).increment(1.0);
            tokio::spawn(async move {
                let conn = connection(stream, at, router, &http, limits, drain, kill);
                if let Some(why) = conn.await {
                    shed(why, cap - permits.available_permits(), cap);
                }
                metrics::gauge!(SERVER_CONNECTIONS).decrement(1.0);
                drop(permit);
            });
        }
        drop(listener);
        // Every permit back: every connection has ended.
        let all = u32::try_from(cap).unwrap_or(u32::MAX);
        tokio::select! {
            _ = permits.acquire_many(all) => {}
            () = kill.cancelled() => {}
        }
    }
}

/// Serves one connection to its end; answers why the server closed it, if it did.
async fn connection(
    stream: TcpStream,
    accepted: Instant,
    router: Router,
    http: &hyper::server::conn::http1::Builder,
    limits: Limits,
    drain: CancellationToken,
    kill: CancellationToken,
) -> Option<Close> {
    let conn = Arc::new(ConnState::new(accepted));
    let io = TokioIo::new(Observed {
        inner: stream,
        conn: Arc::clone(&conn),
    });
    let for_service = Arc::clone(&conn);
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        let conn = Arc::clone(&for_service);
        conn.request_started();
        let in_flight = InFlight(Arc::clone(&conn));
        let req = detach_head(req.map(|body| Body::new(RateBody::new(body, conn))));
        let mut router = router.clone();
        async move {
            let response = tower_service::Service::call(&mut router, req).await?;
            Ok::<Response, Infallible>(response.map(|body| {
                Body::new(Tracked {
                    inner: body,
                    _in_flight: in_flight,
                })
            }))
        }
    });
    let served = http.serve_connection(io, service);
    tokio::pin!(served);
    let monitor = conn.monitor(limits);
    tokio::pin!(monitor);
    let mut draining = false;
    loop {
        tokio::select! {
            result = served.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!("client connection ended: {e}");
                }
                return None;
            }
            why = &mut monitor => {
                return (why != Close::Idle).then_some(why);
            }
            () = drain.cancelled(), if !draining => {
                // No request being answered (a fresh connection, an idle one, a head still
                // coming): nothing is lost by closing it now. hyper's graceful shutdown would
                // wait for a fresh connection's first request.
                if conn.with(|s| s.in_flight == 0) {
                    return None;
                }
                draining = true;
                served.as_mut().graceful_shutdown();
            }
            () = kill.cancelled() => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_cap_leaves_room_for_the_rest_of_the_process() {
        assert_eq!(derived_cap(Some(20_000)), 15_000);
        assert_eq!(derived_cap(Some(1024)), 768);
        assert_eq!(derived_cap(Some(512)), 256);
        assert_eq!(derived_cap(Some(100)), 16);
        assert_eq!(derived_cap(Some(u64::MAX)), (FD_CEILING / 4 * 3) as usize);
        assert_eq!(derived_cap(None), 768);
    }

    #[test]
    fn a_detached_head_is_the_same_head() {
        let mut token = HeaderValue::from_static("Bearer pgw-secret");
        token.set_sensitive(true);
        let req = axum::http::Request::builder()
            .method("POST")
            .uri("/v1/chat/completions?a=1&b=%20")
            .header("authorization", token)
            .header("x-pgw-call-order", "3")
            .header("x-pgw-call-order", "4")
            .body(())
            .unwrap();
        let (before, ()) = req.clone().into_parts();
        let (after, ()) = detach_head(req).into_parts();
        assert_eq!(after.uri, before.uri);
        assert_eq!(after.uri.query(), Some("a=1&b=%20"));
        assert_eq!(after.method, before.method);
        assert_eq!(after.headers, before.headers);
        assert!(after.headers["authorization"].is_sensitive());
        assert!(!after.headers["x-pgw-call-order"].is_sensitive());
        let orders: Vec<_> = after.headers.get_all("x-pgw-call-order").iter().collect();
        assert_eq!(orders, ["3", "4"]);
    }

    #[test]
    fn an_absolute_target_is_kept_whole() {
        let req = axum::http::Request::builder()
            .uri("http://example.com:8080/v1/models?x=1")
            .header("host", "example.com")
            .body(())
            .unwrap();
        let (before, ()) = req.clone().into_parts();
        let (after, ()) = detach_head(req).into_parts();
        assert_eq!(after.uri, before.uri);
        assert_eq!(after.headers, before.headers);
    }

    /// Nothing a request does wakes the monitor; a deadline that starts while it sleeps is
    /// still met on time, not late: the header timeout of a head started during a keep-alive
    /// wait (far shorter than the idle timeout the monitor was sleeping towards), the body
    /// timeout of a body started while a request was in flight without a deadline.
    #[tokio::test(start_paused = true)]
    async fn deadlines_set_while_the_monitor_sleeps_are_met_on_time() {
        let limits = Limits {
            header: Duration::from_secs(10),
            body_grace: Duration::from_secs(20),
            body_rate: 100,
            idle: Duration::from_secs(60),
        };
        let conn = Arc::new(ConnState::new(Instant::now()));
        conn.request_started();
        conn.request_ended();
        let start = Instant::now();
        let monitor = tokio::spawn({
            let conn = Arc::clone(&conn);
            async move { (conn.monitor(limits).await, Instant::now()) }
        });
        tokio::time::sleep(Duration::from_secs(25)).await;
        conn.read_bytes();
        let (why, at) = monitor.await.unwrap();
        assert_eq!(why, Close::HeaderTimeout);
        assert_eq!(at - start, Duration::from_secs(35));

        let conn = Arc::new(ConnState::new(Instant::now()));
        conn.request_started();
        let start = Instant::now();
        let monitor = tokio::spawn({
            let conn = Arc::clone(&conn);
            async move { (conn.monitor(limits).await, Instant::now()) }
        });
        tokio::time::sleep(Duration::from_secs(33)).await;
        conn.body_started();
        let (why, at) = monitor.await.unwrap();
        assert_eq!(why, Close::BodyTooSlow);
        assert_eq!(at - start, Duration::from_secs(53));
    }

    #[tokio::test(start_paused = true)]
    async fn the_monitor_tells_each_deadline_apart() {
        let limits = Limits {
            header: Duration::from_secs(10),
            body_grace: Duration::from_secs(20),
            body_rate: 100,
            idle: Duration::from_secs(60),
        };
        let conn = ConnState::new(Instant::now());
        let at = |c: &ConnState| match c.verdict(&limits, Instant::now()) {
            Verdict::Close(why) => Err(why),
            Verdict::Until(d) => Ok(d.map(|d| d - Instant::now())),
        };
        // A fresh connection must send a whole head within the header timeout.
        assert_eq!(at(&conn), Ok(Some(Duration::from_secs(10))));
        conn.request_started();
        assert_eq!(at(&conn), Ok(None));
        conn.body_started();
        conn.body_read(1000);
        // 20 s of grace plus 1000 bytes at 100 B/s.
        assert_eq!(at(&conn), Ok(Some(Duration::from_secs(30))));
        tokio::time::advance(Duration::from_secs(31)).await;
        assert_eq!(at(&conn), Err(Close::BodyTooSlow));
        conn.body_ended();
        conn.request_ended();
        // Idle between requests: the idle timeout, until a head starts.
        assert_eq!(at(&conn), Ok(Some(Duration::from_secs(60))));
        tokio::time::advance(Duration::from_secs(5)).await;
        conn.read_bytes();
        assert_eq!(at(&conn), Ok(Some(Duration::from_secs(10))));
        tokio::time::advance(Duration::from_secs(10)).await;
        assert_eq!(at(&conn), Err(Close::HeaderTimeout));
    }
}
