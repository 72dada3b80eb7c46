//! A streamed body on virtual time ([`Script`]): the reading loop of `transport::drive`
//! ([`read_answer`](super::drive::read_answer)) over pieces that arrive at given instants, with
//! no I/O and no tokio. The machines' tests and the simulator's wire (`transport::simulated`)
//! read answers through it, so they run the loop every streamed attempt runs.

use std::collections::VecDeque;
use std::time::Instant;

use futures::FutureExt;

use super::drive::{read_answer, BodyIo, BodyPiece};
use super::exchange::ChatDelta;
use super::machine::{BodyEnd, ChatExchange, WireDialect};
use super::watchdog::StallClock;
use crate::error::TransportError;
use crate::types::LlmResponse;

/// A body whose pieces arrive at their instants, then ends: what [`BodyIo::next_before`] reads
/// on virtual time. A piece that arrives at or past the deadline in force is a stall: the
/// driver's timer fires first.
pub(crate) struct Script {
    now: Instant,
    pieces: VecDeque<(Instant, BodyPiece)>,
    /// When the verdict is given: at the body's end (an answer whose end marker came earlier is
    /// judged when the script says the body ended), or where the reading stopped.
    verdict_at: Option<Instant>,
    /// The deltas handed on, when a consumer takes them.
    handed: Option<Vec<ChatDelta>>,
}

impl Script {
    /// `chunks` arriving at their instants from `start` on, then the body's end (`how`) at its
    /// instant; `None` for a body that never ends (nothing more arrives). The deltas are kept
    /// for [`Self::run`]'s answer when `consumed`.
    pub(crate) fn new(
        start: Instant,
        chunks: impl IntoIterator<Item = (Instant, Vec<u8>)>,
        end: Option<(Instant, BodyEnd)>,
        consumed: bool,
    ) -> Self {
        let mut pieces: VecDeque<_> = chunks
            .into_iter()
            .map(|(at, bytes)| (at, BodyPiece::Bytes(bytes.into())))
            .collect();
        pieces.extend(end.map(|(at, how)| (at, BodyPiece::End(how))));
        Self {
            now: start,
            pieces,
            verdict_at: end.map(|(at, _)| at),
            handed: consumed.then(Vec::new),
        }
    }

    /// The answer read from this body into `exchange` by the driver's loop: the deltas handed
    /// on (none when nobody consumes them), and the verdict at the body's end.
    pub(crate) fn run<D: WireDialect>(
        mut self,
        exchange: &mut ChatExchange<'_, D>,
    ) -> (Vec<ChatDelta>, Result<LlmResponse, TransportError>) {
        let read = read_answer(exchange, &mut self)
            .now_or_never()
            .expect("a script never waits: its pieces are there or the deadline passed");
        let verdict = read.and_then(|()| exchange.finish(self.verdict_at.unwrap_or(self.now)));
        (self.handed.unwrap_or_default(), verdict)
    }
}

impl BodyIo for Script {
    fn now(&self) -> Instant {
        self.now
    }

    async fn next_before(&mut self, deadline: Instant) -> Option<BodyPiece> {
        match self.pieces.front() {
            Some((at, _)) if *at < deadline => {
                self.now = self.now.max(*at);
                self.pieces.pop_front().map(|(_, piece)| piece)
            }
            _ => {
                self.now = deadline;
                None
            }
        }
    }

    fn consumed(&self) -> bool {
        self.handed.is_some()
    }

    async fn hand_on(
        &mut self,
        _: &StallClock,
        deltas: &mut Vec<ChatDelta>,
    ) -> Result<(), TransportError> {
        match &mut self.handed {
            Some(handed) => handed.append(deltas),
            None => deltas.clear(),
        }
        Ok(())
    }
}

/// The driver's loop on virtual time for the machines' tests: bodies scripted chunk by chunk,
/// a test source's deadlines, and what the deltas say.
#[cfg(test)]
pub(crate) mod runs {
    use std::time::Instant;

    use super::Script;
    use crate::error::TransportError;
    use crate::transport::exchange::ChatDelta;
    use crate::transport::machine::{BodyEnd, ChatExchange, WireDialect};
    use crate::transport::TransportConfig;
    use crate::types::LlmResponse;

    /// Run `exchange` by `transport::drive`'s loop on virtual time ([`Script`]), each chunk of
    /// the body arriving at its instant: a chunk that arrives at or past the deadline in force is a stall (the driver's
    /// timer fires first). Then the body ends (`how`) at `end`, unless the answer was over
    /// before. The deltas handed on, and the verdict at `end`.
    pub(crate) fn run<D: WireDialect>(
        mut exchange: ChatExchange<'_, D>,
        chunks: &[(Instant, &[u8])],
        end: (Instant, BodyEnd),
    ) -> (Vec<ChatDelta>, Result<LlmResponse, TransportError>) {
        let start = exchange.clock().start();
        let chunks = chunks.iter().map(|&(at, bytes)| (at, bytes.to_vec()));
        Script::new(start, chunks, Some(end), true).run(&mut exchange)
    }

    /// `body` cut into pieces of `size` bytes (the last one shorter), all arriving at `at`.
    pub(crate) fn pieces(body: &[u8], size: usize, at: Instant) -> Vec<(Instant, &[u8])> {
        body.chunks(size).map(|piece| (at, piece)).collect()
    }

    /// `n` milliseconds.
    pub(crate) fn ms(n: u64) -> std::time::Duration {
        std::time::Duration::from_millis(n)
    }

    /// A source with a 100 ms TTFT, 30 ms inter-token and 1 s total deadline.
    pub(crate) fn config() -> TransportConfig {
        let mut s = TransportConfig::for_tests("http://127.0.0.1:9/v1");
        s.ttft_timeout = ms(100);
        s.inter_token_timeout = ms(30);
        s.timeout = ms(1000);
        s
    }

    /// Every piece size of `body`, down to one byte, all arriving at `at` and ended at `end`,
    /// gives the exchanges `fresh` makes the deltas and the answer of the whole body at once.
    pub(crate) fn assert_same_at_every_split<'s, D: WireDialect>(
        fresh: impl Fn() -> ChatExchange<'s, D>,
        body: &str,
        at: Instant,
        end: (Instant, BodyEnd),
        whole: &(Vec<ChatDelta>, LlmResponse),
    ) {
        for size in 1..body.len() {
            let chunks = pieces(body.as_bytes(), size, at);
            let (deltas, answer) = run(fresh(), &chunks, end);
            assert_eq!(deltas, whole.0, "pieces of {size} bytes");
            assert_eq!(answer.unwrap(), whole.1, "pieces of {size} bytes");
        }
    }

    /// The text of the content deltas.
    pub(crate) fn content(deltas: &[ChatDelta]) -> String {
        deltas
            .iter()
            .filter_map(|d| match d {
                ChatDelta::Content(text) => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }
}
