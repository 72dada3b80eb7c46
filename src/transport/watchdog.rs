//! Streaming watchdog (docs/behaviour.md §7.1): time-to-first-token, inter-token and total deadlines around
//! every read of a streaming body.
//!
//! [`StallClock`] is the sans-I/O part: it takes `now` and answers the deadline in force and
//! which layer it belongs to, and measures TTFT and the largest inter-token gap; a chat
//! attempt's exchange (`transport::machine`) keeps one, and `transport::drive` waits on its
//! deadlines. [`Watchdog`] applies one to futures with `tokio::time::timeout_at` (so tests can
//! pause tokio's clock): the whole-body reads of a non-streamed answer (embeddings). Any
//! delta — content or reasoning — counts as a token; keep-alives, role-only and usage frames do
//! not.

use std::future::Future;
use std::time::{Duration, Instant};

use futures::FutureExt;
use polygateway_actors::policy::pacer::RateLimitHint;
use polygateway_actors::SourceReason;

use super::TransportConfig;
use crate::error::TransportError;

/// Which deadline fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StallLayer {
    /// No token within the TTFT deadline since the attempt started.
    Ttft,
    /// No token within the inter-token deadline since the previous one.
    InterToken,
    /// The attempt's total deadline.
    Total,
}

impl StallLayer {
    /// The layer's name in error messages: `ttft`, `inter_token`, `total`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            StallLayer::Ttft => "ttft",
            StallLayer::InterToken => "inter_token",
            StallLayer::Total => "total",
        }
    }
}

/// The three deadlines of a streaming attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StallLimits {
    /// Time to first token.
    pub(crate) ttft: Duration,
    /// Largest allowed gap between tokens.
    pub(crate) inter_token: Duration,
    /// Whole attempt.
    pub(crate) total: Duration,
}

impl StallLimits {
    /// The limits configured for a source.
    pub(crate) fn from_config(config: &TransportConfig) -> Self {
        Self {
            ttft: config.ttft_timeout,
            inter_token: config.inter_token_timeout,
            total: config.timeout,
        }
    }

    /// The layer's configured limit.
    pub(crate) fn of(&self, layer: StallLayer) -> Duration {
        match layer {
            StallLayer::Ttft => self.ttft,
            StallLayer::InterToken => self.inter_token,
            StallLayer::Total => self.total,
        }
    }
}

/// Sans-I/O stall clock of one attempt.
#[derive(Debug, Clone)]
pub(crate) struct StallClock {
    start: Instant,
    limits: StallLimits,
    first_token: Option<Instant>,
    last_token: Option<Instant>,
    max_gap: Option<Duration>,
}

impl StallClock {
    /// A clock for an attempt that started at `start`.
    pub(crate) fn new(start: Instant, limits: StallLimits) -> Self {
        Self {
            start,
            limits,
            first_token: None,
            last_token: None,
            max_gap: None,
        }
    }

    /// When the attempt started.
    pub(crate) fn start(&self) -> Instant {
        self.start
    }

    /// The earliest deadline in force and its layer. Before the first token: TTFT or total;
    /// after: inter-token or total. On a tie the narrower layer is named.
    pub(crate) fn deadline(&self) -> (Instant, StallLayer) {
        let total = self.start + self.limits.total;
        let (local, layer) = match self.last_token {
            None => (self.start + self.limits.ttft, StallLayer::Ttft),
            Some(t) => (t + self.limits.inter_token, StallLayer::InterToken),
        };
        if local <= total {
            (local, layer)
        } else {
            (total, StallLayer::Total)
        }
    }

    /// The total deadline alone (for phases where tokens are not expected, e.g. a non-streaming
    /// body or a consumer that is slow to take a delta).
    pub(crate) fn total_deadline(&self) -> Instant {
        self.start + self.limits.total
    }

    /// `Err(layer)` when `now` is at or past the deadline in force (tests ask; the watchdog
    /// sleeps until [`StallClock::deadline`] instead).
    #[cfg(test)]
    pub(crate) fn check(&self, now: Instant) -> Result<(), StallLayer> {
        let (deadline, layer) = self.deadline();
        if now >= deadline {
            Err(layer)
        } else {
            Ok(())
        }
    }

    /// A token (content or reasoning delta) arrived at `now`.
    pub(crate) fn on_token(&mut self, now: Instant) {
        if let Some(last) = self.last_token {
            let gap = now.saturating_duration_since(last);
            self.max_gap = Some(self.max_gap.map_or(gap, |m| m.max(gap)));
        } else {
            self.first_token = Some(now);
        }
        self.last_token = Some(now);
    }

    /// Time from start to the first token, in milliseconds.
    pub(crate) fn ttft_ms(&self) -> Option<f64> {
        self.first_token
            .map(|t| ms(t.saturating_duration_since(self.start)))
    }

    /// Largest gap between two tokens, in milliseconds (`None` with fewer than two tokens).
    pub(crate) fn max_inter_token_ms(&self) -> Option<f64> {
        self.max_gap.map(ms)
    }

    /// `true` once a token arrived.
    #[cfg(test)]
    pub(crate) fn has_token(&self) -> bool {
        self.first_token.is_some()
    }

    /// The Transient `timeout` error of `layer`, naming its configured limit.
    pub(crate) fn stall_error(&self, layer: StallLayer) -> TransportError {
        stall_error(layer, self.limits.of(layer))
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The current instant on tokio's clock (which `tokio::time::pause` controls), as a std instant.
pub(crate) fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// Applies a [`StallClock`] to the futures of one attempt.
#[derive(Debug, Clone)]
pub(crate) struct Watchdog {
    clock: StallClock,
}

impl Watchdog {
    /// Start watching now.
    pub(crate) fn start(limits: StallLimits) -> Self {
        Self {
            clock: StallClock::new(now(), limits),
        }
    }

    /// The underlying clock.
    pub(crate) fn clock(&self) -> &StallClock {
        &self.clock
    }

    /// Record a token arriving now. (Streams are read by `transport::drive`, whose exchange
    /// keeps its own clock; this and [`Self::guard`] are the same steps, for the tests here.)
    #[cfg(test)]
    pub(crate) fn on_token(&mut self) {
        self.clock.on_token(now());
    }

    /// Await `fut` under the deadline in force (TTFT / inter-token / total).
    #[cfg(test)]
    pub(crate) fn guard<F: Future>(
        &self,
        fut: F,
    ) -> impl Future<Output = Result<F::Output, TransportError>> {
        let (deadline, layer) = self.clock.deadline();
        self.until(deadline, layer, fut)
    }

    /// Await `fut` under the total deadline only.
    pub(crate) fn guard_total<F: Future>(
        &self,
        fut: F,
    ) -> impl Future<Output = Result<F::Output, TransportError>> {
        self.until(self.clock.total_deadline(), StallLayer::Total, fut)
    }

    /// Send `request` and read its whole 2xx body under the total deadline; a non-2xx answer is
    /// classified by the dialect's `reader`, with its body summary. The non-streaming exchange of
    /// every JSON transport. Also returns the answer's rate-limit headers (for the pacer).
    ///
    /// Not an `async fn`, like [`Self::guard`]: one keeps its argument in its own state besides
    /// the future it was moved into, so `sent` would be held twice while the answer is awaited.
    pub(crate) fn whole_body(
        &self,
        sent: impl Future<Output = Result<reqwest::Response, reqwest::Error>>,
        reader: super::http::AnswerReader,
    ) -> impl Future<Output = Result<(bytes::Bytes, Option<RateLimitHint>), TransportError>> {
        self.guard_total(sent).then(move |sent| async move {
            let resp = sent?.map_err(|e| super::http::classify_reqwest(&e))?;
            if !resp.status().is_success() {
                return Err(reader.classify(resp, self.clock.total_deadline()).await);
            }
            let rate_limit = (reader.rate_limit)(resp.headers());
            let bytes = self
                .guard_total(resp.bytes())
                .await?
                .map_err(|e| super::http::classify_reqwest(&e))?;
            Ok((bytes, rate_limit))
        })
    }

    /// `fut` under `deadline`. A combinator rather than an `async fn`: an `async fn` keeps its
    /// arguments in its state for as long as it runs, so `fut`, moved into the timeout, would be
    /// held twice — three times through [`Self::guard`] — and the request future every attempt
    /// waits on is the largest part of the transport's state (what each call in flight holds).
    fn until<F: Future>(
        &self,
        deadline: Instant,
        layer: StallLayer,
        fut: F,
    ) -> impl Future<Output = Result<F::Output, TransportError>> {
        // `timeout_at` polls `fut` before the timer, so data already buffered still wins over a
        // deadline that passed while the consumer was slow.
        tokio::time::timeout_at(tokio::time::Instant::from_std(deadline), fut)
            .map(move |timed| timed.map_err(|_| self.stall_error(layer)))
    }

    /// The Transient `timeout` error naming `layer`.
    pub(crate) fn stall_error(&self, layer: StallLayer) -> TransportError {
        self.clock.stall_error(layer)
    }
}

/// The Transient `timeout` error of a watchdog layer; the message names the layer.
pub(crate) fn stall_error(layer: StallLayer, limit: Duration) -> TransportError {
    TransportError::transient(
        SourceReason::Timeout,
        format!(
            "watchdog: {} deadline of {:.3}s exceeded",
            layer.as_str(),
            limit.as_secs_f64()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use polygateway_actors::{Classify, FailureClass};

    fn limits(ttft: u64, inter: u64, total: u64) -> StallLimits {
        StallLimits {
            ttft: Duration::from_millis(ttft),
            inter_token: Duration::from_millis(inter),
            total: Duration::from_millis(total),
        }
    }

    #[test]
    fn layers_in_order() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut c = StallClock::new(t0, limits(100, 30, 200));
        assert_eq!(c.check(t0 + ms(99)), Ok(()));
        assert_eq!(c.check(t0 + ms(100)), Err(StallLayer::Ttft));
        c.on_token(t0 + ms(50));
        assert_eq!(c.check(t0 + ms(79)), Ok(()));
        assert_eq!(c.check(t0 + ms(80)), Err(StallLayer::InterToken));
        c.on_token(t0 + ms(75));
        c.on_token(t0 + ms(180));
        // Last token at 180 + 30 > 200: total is nearer.
        assert_eq!(c.deadline(), (t0 + ms(200), StallLayer::Total));
        assert_eq!(c.ttft_ms(), Some(50.0));
        assert_eq!(c.max_inter_token_ms(), Some(105.0));
    }

    #[test]
    fn no_gap_with_one_token() {
        let t0 = Instant::now();
        let mut c = StallClock::new(t0, limits(100, 30, 200));
        assert!(!c.has_token());
        c.on_token(t0 + Duration::from_millis(5));
        assert!(c.has_token());
        assert_eq!(c.max_inter_token_ms(), None);
    }

    #[test]
    fn ttft_longer_than_total_is_total() {
        let t0 = Instant::now();
        let c = StallClock::new(t0, limits(500, 30, 200));
        assert_eq!(c.deadline().1, StallLayer::Total);
    }

    #[tokio::test(start_paused = true)]
    async fn guard_fires_ttft_on_paused_clock() {
        let w = Watchdog::start(limits(100, 30, 1000));
        let err = w
            .guard(tokio::time::sleep(Duration::from_millis(150)))
            .await
            .unwrap_err();
        assert_eq!(err.class(), FailureClass::Transient);
        assert_eq!(err.source_reason(), SourceReason::Timeout);
        assert!(err.message.contains("ttft"), "{}", err.message);
    }

    /// Every attempt waits for its answer inside `guard` (or `whole_body`), so what they hold
    /// besides the request's own future is paid by every call in flight. As `async fn`s they
    /// kept their argument in their state next to the timeout it was moved into: the request
    /// future three times over through `guard` (issue #48).
    #[tokio::test]
    async fn guarding_a_future_holds_it_once() {
        let w = Watchdog::start(limits(100, 30, 1000));
        let request = async {
            let state = std::hint::black_box([7u8; 4096]);
            tokio::task::yield_now().await;
            state[0]
        };
        let alone = std::mem::size_of_val(&request);
        let guarded = std::mem::size_of_val(&w.guard(request));
        assert!(
            guarded < alone + 512,
            "guard holds {guarded} bytes around a {alone}-byte future"
        );
        let client = reqwest::Client::new();
        let sent = async {
            let state = std::hint::black_box([7u8; 4096]);
            tokio::task::yield_now().await;
            let _ = state[0];
            client.get("http://127.0.0.1:9").send().await
        };
        let alone = std::mem::size_of_val(&sent);
        let whole = std::mem::size_of_val(
            &w.whole_body(sent, crate::transport::http::AnswerReader::OPENAI),
        );
        assert!(
            whole < alone + 1024,
            "whole_body holds {whole} bytes around a {alone}-byte request"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn guard_inter_token_then_total() {
        let mut w = Watchdog::start(limits(100, 30, 120));
        w.guard(tokio::time::sleep(Duration::from_millis(20)))
            .await
            .unwrap();
        w.on_token();
        let err = w
            .guard(tokio::time::sleep(Duration::from_millis(40)))
            .await
            .unwrap_err();
        assert!(err.message.contains("inter_token"), "{}", err.message);
        // Keep producing tokens every 25 ms: the total deadline ends it at 120 ms.
        let mut w = Watchdog::start(limits(100, 30, 120));
        let err = loop {
            match w.guard(tokio::time::sleep(Duration::from_millis(25))).await {
                Ok(()) => w.on_token(),
                Err(e) => break e,
            }
        };
        assert!(err.message.contains("total"), "{}", err.message);
        assert_eq!(
            tokio::time::Instant::now().into_std(),
            w.clock().start() + Duration::from_millis(120)
        );
    }

    #[tokio::test]
    async fn real_clock_inter_token_stall() {
        let mut w = Watchdog::start(limits(300, 80, 2000));
        let t = std::time::Instant::now();
        w.guard(tokio::time::sleep(Duration::from_millis(10)))
            .await
            .unwrap();
        w.on_token();
        let err = w
            .guard(tokio::time::sleep(Duration::from_secs(5)))
            .await
            .unwrap_err();
        let waited = t.elapsed();
        assert!(err.message.contains("inter_token"));
        assert!(waited >= Duration::from_millis(85), "{waited:?}");
        assert!(waited < Duration::from_millis(1500), "{waited:?}");
        assert!(w.clock().ttft_ms().unwrap() >= 10.0);
    }
}

#[cfg(test)]
mod examples {
    //! Usage cases of crate-private items (they were doc examples while the items were public).

    #[test]
    fn stall_layer_example() {
        use crate::transport::watchdog::{StallClock, StallLayer, StallLimits};
        use std::time::{Duration, Instant};
        let t0 = Instant::now();
        let s = Duration::from_secs;
        // A TTFT limit longer than the whole attempt: the total deadline is the one that fires.
        let c = StallClock::new(
            t0,
            StallLimits {
                ttft: s(90),
                inter_token: s(5),
                total: s(60),
            },
        );
        assert_eq!(c.check(t0 + s(59)), Ok(()));
        assert_eq!(c.check(t0 + s(60)), Err(StallLayer::Total));
    }

    #[test]
    fn stall_layer_as_str_example() {
        use crate::transport::watchdog::StallLayer;
        assert_eq!(StallLayer::Ttft.as_str(), "ttft");
        assert_eq!(StallLayer::InterToken.as_str(), "inter_token");
        assert_eq!(StallLayer::Total.as_str(), "total");
    }

    #[test]
    fn stall_limits_example() {
        use crate::transport::watchdog::{StallClock, StallLayer, StallLimits};
        use std::time::{Duration, Instant};
        let limits = StallLimits {
            ttft: Duration::from_secs(10),
            inter_token: Duration::from_secs(2),
            total: Duration::from_secs(60),
        };
        // Before any token, the attempt waits at most `ttft`.
        let t0 = Instant::now();
        let clock = StallClock::new(t0, limits);
        assert_eq!(clock.deadline(), (t0 + limits.ttft, StallLayer::Ttft));
    }

    #[test]
    fn stall_limits_from_config_example() {
        use crate::transport::watchdog::StallLimits;
        use std::time::Duration;
        // TIMEOUT_S=30, TTFT_TIMEOUT_S=10, INTER_TOKEN_TIMEOUT_S=5
        let settings = crate::transport::TransportConfig::for_tests("http://127.0.0.1:9/v1");
        let limits = StallLimits::from_config(&settings);
        assert_eq!(limits.ttft, Duration::from_secs(10));
        assert_eq!(limits.inter_token, Duration::from_secs(5));
        assert_eq!(limits.total, settings.timeout);
    }

    #[test]
    fn stall_limits_of_example() {
        use crate::transport::watchdog::{StallLayer, StallLimits};
        use std::time::Duration;
        let s = Duration::from_secs;
        let limits = StallLimits {
            ttft: s(10),
            inter_token: s(2),
            total: s(60),
        };
        assert_eq!(limits.of(StallLayer::Ttft), s(10));
        assert_eq!(limits.of(StallLayer::InterToken), s(2));
        assert_eq!(limits.of(StallLayer::Total), s(60));
    }

    #[test]
    fn stall_clock_example() {
        use crate::transport::watchdog::{StallClock, StallLayer, StallLimits};
        use std::time::{Duration, Instant};
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut c = StallClock::new(
            t0,
            StallLimits {
                ttft: s(10),
                inter_token: s(2),
                total: s(60),
            },
        );
        assert_eq!(c.deadline(), (t0 + s(10), StallLayer::Ttft));
        c.on_token(t0 + s(3));
        assert_eq!(c.deadline(), (t0 + s(5), StallLayer::InterToken));
        assert_eq!(c.check(t0 + s(6)), Err(StallLayer::InterToken));
        assert_eq!(c.ttft_ms(), Some(3000.0));
    }

    #[test]
    fn stall_clock_new_example() {
        use crate::transport::watchdog::{StallClock, StallLimits};
        use std::time::{Duration, Instant};
        let s = Duration::from_secs;
        let t0 = Instant::now();
        let clock = StallClock::new(
            t0,
            StallLimits {
                ttft: s(10),
                inter_token: s(2),
                total: s(60),
            },
        );
        assert_eq!(clock.start(), t0);
        assert!(!clock.has_token());
        assert_eq!(clock.ttft_ms(), None);
    }

    #[test]
    fn stall_clock_start_example() {
        use crate::transport::watchdog::{StallClock, StallLimits};
        use std::time::{Duration, Instant};
        let s = Duration::from_secs;
        let t0 = Instant::now();
        let mut clock = StallClock::new(
            t0,
            StallLimits {
                ttft: s(10),
                inter_token: s(2),
                total: s(60),
            },
        );
        assert_eq!(clock.start(), t0);
        // TTFT (and the attempt's latency) are measured from the start.
        clock.on_token(clock.start() + Duration::from_millis(1500));
        assert_eq!(clock.ttft_ms(), Some(1500.0));
    }

    #[test]
    fn stall_clock_deadline_example() {
        use crate::transport::watchdog::{StallClock, StallLayer, StallLimits};
        use std::time::{Duration, Instant};
        let s = Duration::from_secs;
        let t0 = Instant::now();
        let mut c = StallClock::new(
            t0,
            StallLimits {
                ttft: s(10),
                inter_token: s(2),
                total: s(20),
            },
        );
        assert_eq!(c.deadline(), (t0 + s(10), StallLayer::Ttft));
        c.on_token(t0 + s(4));
        assert_eq!(c.deadline(), (t0 + s(6), StallLayer::InterToken));
        // A token at 18 s: the inter-token deadline (20 s) ties with the total one; the narrower is named.
        c.on_token(t0 + s(18));
        assert_eq!(c.deadline(), (t0 + s(20), StallLayer::InterToken));
        c.on_token(t0 + s(19));
        assert_eq!(c.deadline(), (t0 + s(20), StallLayer::Total));
    }

    #[test]
    fn stall_clock_total_deadline_example() {
        use crate::transport::watchdog::{StallClock, StallLimits};
        use std::time::{Duration, Instant};
        let s = Duration::from_secs;
        let t0 = Instant::now();
        let mut c = StallClock::new(
            t0,
            StallLimits {
                ttft: s(10),
                inter_token: s(2),
                total: s(60),
            },
        );
        c.on_token(t0 + s(1));
        // Tokens move the deadline in force, never the total one.
        assert_eq!(c.deadline().0, t0 + s(3));
        assert_eq!(c.total_deadline(), t0 + s(60));
    }

    #[test]
    fn stall_clock_check_example() {
        use crate::transport::watchdog::{StallClock, StallLayer, StallLimits};
        use std::time::{Duration, Instant};
        let ms = Duration::from_millis;
        let t0 = Instant::now();
        let c = StallClock::new(
            t0,
            StallLimits {
                ttft: ms(100),
                inter_token: ms(30),
                total: ms(500),
            },
        );
        assert_eq!(c.check(t0 + ms(99)), Ok(()));
        // "At or past": the deadline instant itself has fired.
        assert_eq!(c.check(t0 + ms(100)), Err(StallLayer::Ttft));
    }

    #[test]
    fn stall_clock_on_token_example() {
        use crate::transport::watchdog::{StallClock, StallLayer, StallLimits};
        use std::time::{Duration, Instant};
        let ms = Duration::from_millis;
        let t0 = Instant::now();
        let mut c = StallClock::new(
            t0,
            StallLimits {
                ttft: ms(100),
                inter_token: ms(30),
                total: ms(500),
            },
        );
        c.on_token(t0 + ms(40));
        assert!(c.has_token());
        // The next token is now due within the inter-token limit of the last one.
        assert_eq!(c.deadline(), (t0 + ms(70), StallLayer::InterToken));
    }

    #[test]
    fn stall_clock_ttft_ms_example() {
        use crate::transport::watchdog::{StallClock, StallLimits};
        use std::time::{Duration, Instant};
        let ms = Duration::from_millis;
        let t0 = Instant::now();
        let mut c = StallClock::new(
            t0,
            StallLimits {
                ttft: ms(1000),
                inter_token: ms(300),
                total: ms(5000),
            },
        );
        assert_eq!(c.ttft_ms(), None);
        c.on_token(t0 + ms(250));
        c.on_token(t0 + ms(400)); // later tokens do not change it
        assert_eq!(c.ttft_ms(), Some(250.0));
    }

    #[test]
    fn stall_clock_max_inter_token_ms_example() {
        use crate::transport::watchdog::{StallClock, StallLimits};
        use std::time::{Duration, Instant};
        let ms = Duration::from_millis;
        let t0 = Instant::now();
        let mut c = StallClock::new(
            t0,
            StallLimits {
                ttft: ms(1000),
                inter_token: ms(500),
                total: ms(5000),
            },
        );
        c.on_token(t0 + ms(100));
        assert_eq!(c.max_inter_token_ms(), None); // one token: no gap yet
        c.on_token(t0 + ms(400));
        c.on_token(t0 + ms(500));
        assert_eq!(c.max_inter_token_ms(), Some(300.0));
    }

    #[test]
    fn stall_clock_has_token_example() {
        use crate::transport::watchdog::{StallClock, StallLimits};
        use std::time::{Duration, Instant};
        let s = Duration::from_secs;
        let t0 = Instant::now();
        let mut c = StallClock::new(
            t0,
            StallLimits {
                ttft: s(10),
                inter_token: s(2),
                total: s(60),
            },
        );
        assert!(!c.has_token());
        c.on_token(t0 + s(1));
        assert!(c.has_token());
    }

    #[test]
    fn now_example() {
        #[tokio::main(flavor = "current_thread", start_paused = true)]
        async fn main() {
            use crate::transport::watchdog::now;
            use std::time::Duration;
            let before = now();
            // A paused tokio clock moves only when told to, and `now` follows it.
            tokio::time::advance(Duration::from_secs(5)).await;
            assert_eq!(now() - before, Duration::from_secs(5));
        }
        main();
    }

    #[test]
    fn watchdog_example() {
        #[tokio::main(flavor = "current_thread", start_paused = true)]
        async fn main() {
            use crate::transport::watchdog::{StallLimits, Watchdog};
            use std::time::Duration;
            let ms = Duration::from_millis;
            let mut w = Watchdog::start(StallLimits {
                ttft: ms(100),
                inter_token: ms(30),
                total: ms(120),
            });
            // A stream that sends a token every 25 ms never stalls, but runs into the total deadline.
            let mut tokens = 0;
            let err = loop {
                match w.guard(tokio::time::sleep(ms(25))).await {
                    Ok(()) => {
                        w.on_token();
                        tokens += 1;
                    }
                    Err(e) => break e,
                }
            };
            assert_eq!(tokens, 4);
            assert_eq!(err.message, "watchdog: total deadline of 0.120s exceeded");
        }
        main();
    }

    #[test]
    fn watchdog_start_example() {
        #[tokio::main(flavor = "current_thread", start_paused = true)]
        async fn main() {
            use crate::transport::watchdog::{now, StallLayer, StallLimits, Watchdog};
            use std::time::Duration;
            let s = Duration::from_secs;
            let w = Watchdog::start(StallLimits {
                ttft: s(10),
                inter_token: s(2),
                total: s(60),
            });
            assert_eq!(w.clock().start(), now());
            assert_eq!(w.clock().deadline(), (now() + s(10), StallLayer::Ttft));
        }
        main();
    }

    #[test]
    fn watchdog_clock_example() {
        #[tokio::main(flavor = "current_thread", start_paused = true)]
        async fn main() {
            use crate::transport::watchdog::{StallLimits, Watchdog};
            use std::time::Duration;
            let ms = Duration::from_millis;
            let mut w = Watchdog::start(StallLimits {
                ttft: ms(1000),
                inter_token: ms(100),
                total: ms(5000),
            });
            tokio::time::advance(ms(250)).await;
            w.on_token();
            tokio::time::advance(ms(40)).await;
            w.on_token();
            // The response's timing fields come from the clock.
            assert_eq!(w.clock().ttft_ms(), Some(250.0));
            assert_eq!(w.clock().max_inter_token_ms(), Some(40.0));
        }
        main();
    }

    #[test]
    fn watchdog_on_token_example() {
        #[tokio::main(flavor = "current_thread", start_paused = true)]
        async fn main() {
            use crate::transport::watchdog::{now, StallLayer, StallLimits, Watchdog};
            use std::time::Duration;
            let ms = Duration::from_millis;
            let mut w = Watchdog::start(StallLimits {
                ttft: ms(1000),
                inter_token: ms(100),
                total: ms(5000),
            });
            tokio::time::advance(ms(300)).await;
            w.on_token();
            assert_eq!(
                w.clock().deadline(),
                (now() + ms(100), StallLayer::InterToken)
            );
        }
        main();
    }

    #[test]
    fn watchdog_guard_example() {
        #[tokio::main(flavor = "current_thread", start_paused = true)]
        async fn main() {
            use crate::ports::SourceReason;
            use crate::transport::watchdog::{StallLimits, Watchdog};
            use std::time::Duration;
            let ms = Duration::from_millis;
            let w = Watchdog::start(StallLimits {
                ttft: ms(100),
                inter_token: ms(30),
                total: ms(1000),
            });
            // A read that completes in time passes its output through.
            assert_eq!(w.guard(async { 42 }).await.unwrap(), 42);
            // No first token within 100 ms: the TTFT layer fires.
            let err = w.guard(tokio::time::sleep(ms(150))).await.unwrap_err();
            assert_eq!(err.reason, SourceReason::Timeout);
            assert_eq!(err.message, "watchdog: ttft deadline of 0.100s exceeded");
        }
        main();
    }

    #[test]
    fn watchdog_guard_total_example() {
        #[tokio::main(flavor = "current_thread", start_paused = true)]
        async fn main() {
            use crate::transport::watchdog::{StallLimits, Watchdog};
            use std::time::Duration;
            let ms = Duration::from_millis;
            let mut w = Watchdog::start(StallLimits {
                ttft: ms(100),
                inter_token: ms(30),
                total: ms(1000),
            });
            w.on_token();
            // 200 ms without a token is fine under the total deadline alone…
            assert!(w.guard_total(tokio::time::sleep(ms(200))).await.is_ok());
            // …but not under the inter-token deadline in force.
            let err = w.guard(tokio::time::sleep(ms(200))).await.unwrap_err();
            assert!(err.message.contains("inter_token"));
        }
        main();
    }

    #[test]
    fn watchdog_whole_body_example() {
        #[tokio::main(flavor = "current_thread")]
        async fn main() {
            use crate::ports::FailureClass;
            use crate::transport::http::AnswerReader;
            use crate::transport::watchdog::{StallLimits, Watchdog};
            use polygateway_testkit::{Behaviour, MockUpstream};
            let mock = MockUpstream::start(Behaviour::healthy_with("pong")).await;
            let settings = crate::transport::TransportConfig::for_tests(&mock.base_url());
            let client = reqwest::Client::builder().no_proxy().build().unwrap();
            let body = serde_json::json!({
                "model": "test-model",
                "messages": [{"role": "user", "content": "ping"}],
                "stream": false,
            });
            let url = format!("{}/chat/completions", mock.base_url());
            let wd = Watchdog::start(StallLimits::from_config(&settings));
            let (bytes, _rate_limit) = wd
                .whole_body(client.post(&url).json(&body).send(), AnswerReader::OPENAI)
                .await
                .unwrap();
            let frame =
                crate::transport::wire::decode_completion(std::str::from_utf8(&bytes).unwrap())
                    .unwrap();
            assert_eq!(frame.choices[0].content.as_deref(), Some("pong"));
            // A non-2xx answer comes back classified.
            mock.set_behaviour(Behaviour::Unauthorized);
            let err = wd
                .whole_body(client.post(&url).json(&body).send(), AnswerReader::OPENAI)
                .await
                .unwrap_err();
            assert_eq!(err.status, Some(401));
            assert_eq!(err.class, FailureClass::SourceDead);
        }
        main();
    }

    #[test]
    fn watchdog_stall_error_example() {
        use crate::transport::watchdog::{StallLayer, StallLimits, Watchdog};
        use std::time::Duration;
        let s = Duration::from_secs;
        let w = Watchdog::start(StallLimits {
            ttft: s(10),
            inter_token: s(2),
            total: s(60),
        });
        // The message names the layer and that layer's configured limit.
        let err = w.stall_error(StallLayer::InterToken);
        assert_eq!(
            err.message,
            "watchdog: inter_token deadline of 2.000s exceeded"
        );
    }

    #[test]
    fn stall_error_example() {
        use crate::ports::{FailureClass, SourceReason};
        use crate::transport::watchdog::{stall_error, StallLayer};
        use std::time::Duration;
        let err = stall_error(StallLayer::Total, Duration::from_millis(1500));
        assert_eq!(err.class, FailureClass::Transient);
        assert_eq!(err.reason, SourceReason::Timeout);
        assert_eq!(err.message, "watchdog: total deadline of 1.500s exceeded");
    }
}
