//! The sans-I/O exchange of one chat attempt, whatever its dialect (docs/behaviour.md §7.1,
//! §7.5): the answer's bytes and `now` in; deltas, the deadline in force and a verdict out. No
//! I/O and no tokio: `transport::drive` reads the body, keeps the time and hands deltas on.
//!
//! [`ChatExchange`] owns what every dialect shares: the stall clock (TTFT, inter-token and total
//! deadlines), the SSE framing, the events framed but not yet read, the assembly (the think
//! splitter inside it), a continuation's leading-whitespace trim, and how the stream ended. A
//! [`WireDialect`] owns what differs: how one event and a whole answer decode, and how the end
//! of an answer is judged. One dialect a file beside this one: `openai.rs`, `anthropic.rs`,
//! `gemini.rs`.
//!
//! A streamed answer, as the driver runs it:
//! 1. [`ChatExchange::poll_deltas`] until it says nothing is pending: each call reads one event
//!    and appends its deltas, which the driver hands on before the next;
//! 2. [`ChatExchange::is_over`]: the end marker, an error event or the end of the body — stop;
//! 3. else wait for the body until [`ChatExchange::deadline`], then [`ChatExchange::on_bytes`],
//!    [`ChatExchange::on_end`], or [`ChatExchange::on_timeout`] (the stall error); back to 1;
//! 4. at the end [`ChatExchange::flush`] (what the think splitter held back), then
//!    [`ChatExchange::finish`]: the answer, or the verdict's error. An error while reading
//!    becomes [`ChatExchange::cut`]: the error, with what was delivered when it is a cut stream.
//!
//! A whole (non-streamed) answer is [`ChatExchange::on_answer`] (decoded and judged at once),
//! its deltas handed on, then [`ChatExchange::finish`].

use std::time::Instant;

use polygateway_actors::SourceReason;

use crate::config::MissingDone;
use crate::error::TransportError;
use crate::transport::assembly::Assembly;
use crate::transport::exchange::{frame_too_large, ChatDelta};
use crate::transport::prefill::{keep_cut, LeadTrim};
use crate::transport::sse::{SseEvent, SseParser};
use crate::transport::watchdog::{StallClock, StallLayer, StallLimits};
use crate::transport::wire::{ChunkFrame, WireUsage};
use crate::transport::TransportConfig;
use crate::types::{LlmResponse, ThinkingBlock, UsageSource};

/// What a dialect decides in an exchange: how its events and whole answers read, and how the
/// end of an answer is judged. `Default` is the state a spent exchange is left with.
pub(crate) trait WireDialect: Default {
    /// Read one event of the stream (its `data`, or the `[DONE]` sentinel) into `read` at
    /// `now`, the first choice's new deltas appended to `out`. The dialect marks the answer
    /// complete ([`Reading::complete`]) and stops the reading ([`Reading::stop`]) as its end
    /// marker or error event says.
    fn read_event(
        &mut self,
        read: &mut Reading,
        event: SseEvent,
        now: Instant,
        out: &mut Vec<ChatDelta>,
    ) -> Result<(), TransportError>;

    /// Read a whole (non-streamed) answer's body into `read`, its deltas appended to `out`.
    fn read_answer(
        &mut self,
        read: &mut Reading,
        body: &str,
        out: &mut Vec<ChatDelta>,
    ) -> Result<(), TransportError>;

    /// The verdict on an answer that is over (complete or not; streamed, or whole when
    /// [`Reading::whole`]): how its usage is known, or the error it is. By default that of a
    /// dialect whose stream ends with a marker ([`end_marker_verdict`]: OpenAI, Anthropic).
    fn verdict(
        &self,
        read: &Reading,
        missing_done: MissingDone,
    ) -> Result<UsageSource, TransportError> {
        end_marker_verdict(read, missing_done)
    }

    /// The answer's thinking blocks with their signatures (none in OpenAI's dialect).
    fn into_thinking(self) -> Vec<ThinkingBlock>;
}

/// How a stream without its end marker (`[DONE]`, Anthropic's `message_stop`) ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) enum StreamEnd {
    /// The body ended properly (final chunk received), or has not ended yet.
    #[default]
    Clean,
    /// The connection dropped mid-body.
    ConnectionClosed,
    /// The source sent an `error` event (Anthropic) and stopped: its type and message.
    ErrorEvent(String),
}

/// How the body of a streamed answer ended, as the driver saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyEnd {
    /// The body ended: an unterminated last line is still read.
    Finished,
    /// The connection dropped mid-body (no final chunk), the way proxies and load balancers end
    /// streams: an unterminated last line is a torn frame and is dropped.
    Closed,
}

/// What one attempt has read so far: the answer being assembled, the stall clock, and how its
/// stream stands. A dialect reads events into it.
pub(crate) struct Reading {
    /// The answer being assembled.
    pub(crate) acc: Assembly,
    /// The attempt's deadlines and timings.
    pub(crate) clock: StallClock,
    /// The answer's end arrived: the end marker (`[DONE]`, `message_stop`) or, for Gemini, a
    /// finish reason.
    pub(crate) complete: bool,
    /// How the stream ended short of its end marker.
    pub(crate) ending: StreamEnd,
    /// The answer came whole, not streamed.
    pub(crate) whole: bool,
    /// Nothing more is read: the end marker or an error event came.
    stopped: bool,
    /// The body ended.
    ended: bool,
}

impl Reading {
    /// Fold a decoded frame in at `now`: a token (text, reasoning, a tool call's piece or a
    /// refusal) moves the stall clock.
    pub(crate) fn apply(&mut self, frame: ChunkFrame<'_>, now: Instant, out: &mut Vec<ChatDelta>) {
        if self.acc.apply(frame, out) {
            self.clock.on_token(now);
        }
    }

    /// The end marker arrived: the answer is complete and nothing after it is read.
    pub(crate) fn end_marker(&mut self) {
        self.complete = true;
        self.stopped = true;
    }

    /// Nothing more is read (an error event).
    pub(crate) fn stop(&mut self) {
        self.stopped = true;
    }
}

/// One chat attempt's exchange in dialect `D`: see the module's documentation.
pub(crate) struct ChatExchange<'a, D> {
    /// The source: the answer is named after it; `MISSING_DONE` judges a truncated stream.
    config: &'a TransportConfig,
    parser: SseParser,
    /// Events framed but not read yet, from `next` on.
    events: Vec<SseEvent>,
    next: usize,
    read: Reading,
    /// The leading whitespace a continuation's content must lose.
    trim: LeadTrim,
    /// A whole answer's verdict, given when it was read.
    answered: Option<UsageSource>,
    dialect: D,
}

impl<'a, D: WireDialect> ChatExchange<'a, D> {
    /// The exchange of an attempt to `config`'s source that started at `start`: its deadlines
    /// are the source's, `<think>` tags in content are reasoning when `strips_think`, and a
    /// continuation's content loses `trim`.
    pub(crate) fn new(
        config: &'a TransportConfig,
        start: Instant,
        dialect: D,
        strips_think: bool,
        trim: LeadTrim,
    ) -> Self {
        Self {
            config,
            parser: SseParser::new(),
            events: Vec::new(),
            next: 0,
            read: Reading {
                acc: Assembly::new(strips_think),
                clock: StallClock::new(start, StallLimits::from_config(config)),
                complete: false,
                ending: StreamEnd::Clean,
                whole: false,
                stopped: false,
                ended: false,
            },
            trim,
            answered: None,
            dialect,
        }
    }

    /// The stall clock: the total deadline, the limits, TTFT and the largest gap.
    pub(crate) fn clock(&self) -> &StallClock {
        &self.read.clock
    }

    /// The deadline in force and its layer: before the first token TTFT (or total), after it
    /// inter-token (or total).
    pub(crate) fn deadline(&self) -> (Instant, StallLayer) {
        self.read.clock.deadline()
    }

    /// Bytes of the body arrived. Framed only: the events are read by [`Self::poll_deltas`].
    pub(crate) fn on_bytes(&mut self, chunk: &[u8]) -> Result<(), TransportError> {
        self.parser
            .feed(chunk, &mut self.events)
            .map_err(frame_too_large)
    }

    /// The body ended (`how`): what was framed is still read; then the exchange is over.
    pub(crate) fn on_end(&mut self, how: BodyEnd) -> Result<(), TransportError> {
        self.read.ended = true;
        match how {
            BodyEnd::Finished => self
                .parser
                .finish(&mut self.events)
                .map_err(frame_too_large),
            BodyEnd::Closed => {
                self.read.ending = StreamEnd::ConnectionClosed;
                Ok(())
            }
        }
    }

    /// The timer of [`Self::deadline`] fired at `now`: the stall error naming the layer, or
    /// `None` when `now` is short of the deadline (keep waiting).
    pub(crate) fn on_timeout(&self, now: Instant) -> Option<TransportError> {
        let (at, layer) = self.read.clock.deadline();
        (now >= at).then(|| self.read.clock.stall_error(layer))
    }

    /// Read the next pending event at `now`, its deltas appended to `out` (to be handed on
    /// before the next). `false` when nothing is pending, or the reading stopped.
    pub(crate) fn poll_deltas(
        &mut self,
        now: Instant,
        out: &mut Vec<ChatDelta>,
    ) -> Result<bool, TransportError> {
        if self.read.stopped {
            return Ok(false);
        }
        let Some(event) = self.next_event() else {
            return Ok(false);
        };
        self.dialect.read_event(&mut self.read, event, now, out)?;
        self.trim.deltas(out);
        Ok(true)
    }

    fn next_event(&mut self) -> Option<SseEvent> {
        match self.events.get_mut(self.next) {
            Some(event) => {
                self.next += 1;
                // `Done` holds nothing: the slot is cleared with the rest when all are read.
                Some(std::mem::replace(event, SseEvent::Done))
            }
            None => {
                self.events.clear();
                self.next = 0;
                None
            }
        }
    }

    /// Nothing more to read: the end marker or an error event came, or the body ended and
    /// every event it framed was read.
    pub(crate) fn is_over(&self) -> bool {
        self.read.stopped || (self.read.ended && self.next >= self.events.len())
    }

    /// The end of a stream's reading: what the think splitters held back, appended to `out`.
    pub(crate) fn flush(&mut self, out: &mut Vec<ChatDelta>) {
        self.read.acc.finish(out);
        self.trim.deltas(out);
    }

    /// A whole (non-streamed) answer's body: decoded, its verdict given (an error ends the
    /// attempt here, before any delta is handed on), its deltas appended to `out`.
    pub(crate) fn on_answer(
        &mut self,
        body: &[u8],
        out: &mut Vec<ChatDelta>,
    ) -> Result<(), TransportError> {
        let body = String::from_utf8_lossy(body);
        self.dialect.read_answer(&mut self.read, &body, out)?;
        self.read.acc.finish(out);
        self.read.whole = true;
        let usage_source = self.dialect.verdict(&self.read, self.config.missing_done)?;
        self.trim.deltas(out);
        self.answered = Some(usage_source);
        Ok(())
    }

    /// The verdict at `now`: the answer, with its timings, or the error the stream's end is
    /// (carrying what was delivered, as [`Self::cut`]). The answer is taken out: the exchange is
    /// spent. (`&mut self` rather than `self`, so that the driver borrows the exchange its
    /// caller holds: an `async fn` taking it by value would keep a second copy in its state.)
    pub(crate) fn finish(&mut self, now: Instant) -> Result<LlmResponse, TransportError> {
        let clock = &self.read.clock;
        let latency_ms = ms_between(clock.start(), now);
        if let Some(usage_source) = self.answered {
            let truncated = !self.read.complete;
            let mut answer = self.take_response(usage_source);
            answer.truncated = truncated;
            answer.latency_ms = latency_ms;
            return Ok(answer);
        }
        let usage_source = match self.dialect.verdict(&self.read, self.config.missing_done) {
            Ok(usage_source) => usage_source,
            Err(e) => return Err(self.cut(e)),
        };
        let (ttft_ms, max_inter_token_ms) = (clock.ttft_ms(), clock.max_inter_token_ms());
        let truncated = !self.read.complete;
        let mut answer = self.take_response(usage_source);
        answer.truncated = truncated;
        answer.latency_ms = latency_ms;
        answer.ttft_ms = ttft_ms;
        answer.max_inter_token_ms = max_inter_token_ms;
        Ok(answer)
    }

    /// A failed stream's error, with what it had delivered when it was cut (§5.10), taken out
    /// of the exchange as by [`Self::finish`].
    pub(crate) fn cut(&mut self, error: TransportError) -> TransportError {
        let output = self.read.acc.has_output();
        keep_cut(error, output, || {
            let usage_source = measured_or_unavailable(self.read.acc.usage);
            self.take_response(usage_source)
        })
    }

    /// The answer assembled so far, taken out (the exchange keeps an empty one).
    fn take_response(&mut self, usage_source: UsageSource) -> LlmResponse {
        let config = self.config;
        let acc = std::mem::replace(&mut self.read.acc, Assembly::new(false));
        let usage = acc.usage;
        let mut r = acc.into_response();
        r.thinking_blocks = std::mem::take(&mut self.dialect).into_thinking();
        r.model = config.model.clone();
        r.provider = config.provider.clone();
        r.source_name = config.name.clone();
        r.usage_source = usage_source;
        // Numbers only from a frame the upstream sent; never invented.
        if let (Some(u), true) = (usage, usage_source != UsageSource::Unavailable) {
            r.set_usage(u.reported_by(usage_source));
        }
        r
    }
}

fn ms_between(start: Instant, now: Instant) -> f64 {
    now.saturating_duration_since(start).as_secs_f64() * 1000.0
}

/// `measured` when the upstream reported usage, else `unavailable` (never an invented estimate).
pub(crate) fn measured_or_unavailable(usage: Option<WireUsage>) -> UsageSource {
    if usage.is_some() {
        UsageSource::Measured
    } else {
        UsageSource::Unavailable
    }
}

/// A complete answer with no content, no tool call and no refusal (docs/behaviour.md §7.1):
/// - `finish_reason: length` is a complete answer: the model spent the tokens it was allowed
///   (typically on reasoning) and another source would do the same; it is returned, not retried;
/// - `finish_reason: content_filter` is the provider's filter withholding the answer: a verdict
///   on the request, not a fault of the source, so `RequestRejected` (returned, not retried, not
///   counted against the source, not cached);
/// - anything else is an empty completion: Transient, retried elsewhere.
fn nothing_said(acc: &Assembly, what: &str) -> Result<(), TransportError> {
    match acc.finish_reason() {
        Some("length") => Ok(()),
        // Anthropic's `refusal`: its classifiers declined the request, as a filter does.
        Some(reason @ ("content_filter" | "refusal")) => Err(TransportError::rejected(format!(
            "{reason}: {what} was withheld by the provider's content filter"
        ))),
        _ => Err(TransportError::transient(
            SourceReason::NetworkError,
            format!("empty completion: {what} without content, tool calls or refusal"),
        )),
    }
}

/// The verdict of a dialect whose stream ends with a marker (OpenAI's `[DONE]`, Anthropic's
/// `message_stop`): an empty completion, an early EOF, a missing end marker (retried, or
/// salvaged under `MISSING_DONE=salvage`). An abrupt close is named as such, so telemetry tells
/// a cut-off stream from a clean EOF.
fn end_marker_verdict(
    read: &Reading,
    missing_done: MissingDone,
) -> Result<UsageSource, TransportError> {
    let acc = &read.acc;
    if read.whole {
        if !acc.has_answer() {
            nothing_said(acc, "the answer")?;
        }
        return Ok(measured_or_unavailable(acc.usage));
    }
    let ending = &read.ending;
    let reason = match ending {
        // The source itself reported a failure: reachable but failing.
        StreamEnd::ErrorEvent(_) => SourceReason::ServerError,
        _ => SourceReason::NetworkError,
    };
    let transient = |m: String| Err(TransportError::transient(reason, m));
    let chars = acc.content_chars();
    match (read.complete, acc.has_answer()) {
        (true, false) => {
            nothing_said(acc, "the stream finished")?;
            Ok(measured_or_unavailable(acc.usage))
        }
        (true, true) => Ok(measured_or_unavailable(acc.usage)),
        (false, false) => transient(match ending {
            StreamEnd::Clean => "early_eof: the stream ended before any content".into(),
            StreamEnd::ConnectionClosed => "early_eof: connection closed before any content".into(),
            StreamEnd::ErrorEvent(e) => {
                format!("the stream's error event before any content: {e}")
            }
        }),
        (false, true) => match missing_done {
            MissingDone::Retry => transient(match ending {
                StreamEnd::Clean => {
                    format!("truncated stream: ended without [DONE] after {chars} chars of content")
                }
                StreamEnd::ConnectionClosed => format!(
                    "truncated stream: connection closed after {chars} chars of content, \
                     without [DONE]"
                ),
                StreamEnd::ErrorEvent(e) => {
                    format!("truncated stream: an error event after {chars} chars of content: {e}")
                }
            }),
            MissingDone::Salvage => Ok(if acc.usage.is_some() {
                UsageSource::Estimated
            } else {
                UsageSource::Unavailable
            }),
        },
    }
}
