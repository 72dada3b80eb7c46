//! The I/O half of one chat attempt, for every dialect: send the request, read the answer into
//! the dialect's sans-I/O [`ChatExchange`] (`transport::machine`) under the deadline it names,
//! hand its deltas to the consumer as each event is read, and return its verdict. The time is
//! tokio's (`watchdog::now`), so tests can pause it; a deadline is a `timeout_at` around one
//! read, which polls the read first: data already buffered wins over a deadline that passed
//! while the consumer was slow. The reading loop itself is I/O-agnostic ([`read_answer`] over a
//! [`BodyIo`]): the simulator runs the same loop over scripted bytes on virtual time.

use std::future::Future;
use std::time::Instant;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use polygateway_actors::{EventSink, SourceReason};
use tokio::time::{timeout_at, Instant as TokioInstant};

use super::endpoint::JsonEndpoint;
use super::exchange::ChatDelta;
use super::http::{classify_reqwest, AnswerReader};
use super::machine::{BodyEnd, ChatExchange, WireDialect};
use super::watchdog::{now, StallClock, StallLayer};
use crate::error::TransportError;
use crate::types::LlmResponse;

/// One streamed attempt: `request` sent to `endpoint` under the deadline in force (TTFT), a
/// non-2xx answer classified by `reader`, then the body read into `exchange` until its end
/// marker, its end, a stall or a failure (a cut, carrying what was delivered).
pub(crate) async fn streamed<D: WireDialect>(
    exchange: &mut ChatExchange<'_, D>,
    endpoint: &JsonEndpoint,
    request: reqwest::RequestBuilder,
    reader: AnswerReader,
    sink: Option<&EventSink<ChatDelta>>,
) -> Result<LlmResponse, TransportError> {
    // The timeout is a temporary of its statement: the request's future (the largest part of
    // this state) is gone once the answer's head arrived, not kept beside the body's reading.
    let (deadline, layer) = exchange.deadline();
    let sent = timeout_at(TokioInstant::from_std(deadline), endpoint.send(request)).await;
    let resp = match sent {
        Ok(sent) => sent.map_err(|e| classify_reqwest(&e))?,
        // The timer fires at the deadline or after it: the stall of the layer in force.
        Err(_) => {
            return Err(exchange
                .on_timeout(now())
                .unwrap_or_else(|| exchange.clock().stall_error(layer)))
        }
    };
    if !resp.status().is_success() {
        return Err(reader
            .classify(resp, exchange.clock().total_deadline())
            .await);
    }
    let rate_limit = (reader.rate_limit)(resp.headers());
    let mut network = Network {
        body: resp.bytes_stream(),
        sink,
    };
    read_answer(exchange, &mut network).await?;
    let mut answer = exchange.finish(now())?;
    answer.rate_limit = rate_limit;
    Ok(answer)
}

/// Where a streamed answer's body comes from, what time it is, and whom its deltas go to: the
/// network on tokio's clock ([`Network`]), or a script on virtual time (the simulator's wire,
/// `transport::simulated`). One reading loop ([`read_answer`]) runs over both.
pub(crate) trait BodyIo {
    /// The time now, as the attempt's stall clock counts it.
    fn now(&self) -> Instant;

    /// The body's next piece, or `None` when `deadline` came first.
    fn next_before(&mut self, deadline: Instant) -> impl Future<Output = Option<BodyPiece>> + Send;

    /// Whether anybody consumes the deltas.
    fn consumed(&self) -> bool;

    /// Hand `deltas` on to the consumer (bounded by `clock`'s total deadline), emptying it.
    fn hand_on(
        &mut self,
        clock: &StallClock,
        deltas: &mut Vec<ChatDelta>,
    ) -> impl Future<Output = Result<(), TransportError>> + Send;
}

/// A piece of a streamed body, as [`BodyIo::next_before`] reads it.
pub(crate) enum BodyPiece {
    /// Bytes arrived.
    Bytes(Bytes),
    /// The body ended, and how.
    End(BodyEnd),
}

/// A body read from the network under tokio's clock, its deltas handed to `sink`.
struct Network<'s, B> {
    body: B,
    sink: Option<&'s EventSink<ChatDelta>>,
}

impl<B> BodyIo for Network<'_, B>
where
    B: Stream<Item = reqwest::Result<Bytes>> + Unpin + Send,
{
    fn now(&self) -> Instant {
        now()
    }

    async fn next_before(&mut self, deadline: Instant) -> Option<BodyPiece> {
        match timeout_at(TokioInstant::from_std(deadline), self.body.next()).await {
            Err(_) => None,
            Ok(None) => Some(BodyPiece::End(BodyEnd::Finished)),
            // The connection dropped mid-body (no final chunk). What arrived is judged like any
            // stream without its end marker.
            Ok(Some(Err(_))) => Some(BodyPiece::End(BodyEnd::Closed)),
            Ok(Some(Ok(bytes))) => Some(BodyPiece::Bytes(bytes)),
        }
    }

    fn consumed(&self) -> bool {
        self.sink.is_some()
    }

    async fn hand_on(
        &mut self,
        clock: &StallClock,
        deltas: &mut Vec<ChatDelta>,
    ) -> Result<(), TransportError> {
        emit_all(clock, self.sink, deltas).await
    }
}

/// A streamed answer's body (after a 2xx head) read into `exchange` from `io`, each event's
/// deltas handed on before the next event is read, until the exchange is over and what it held
/// back is handed on too ([`ChatExchange::finish`] gives the verdict next); or the error that
/// ended the reading (a cut carrying what was delivered).
pub(crate) async fn read_answer<D: WireDialect>(
    exchange: &mut ChatExchange<'_, D>,
    io: &mut impl BodyIo,
) -> Result<(), TransportError> {
    let mut deltas = Vec::new();
    if let Err(e) = read_body(exchange, io, &mut deltas).await {
        return Err(exchange.cut(e));
    }
    exchange.flush(&mut deltas);
    io.hand_on(exchange.clock(), &mut deltas).await
}

/// Read a streamed body into `exchange`, handing each event's deltas to the consumer before the
/// next event is read, until the exchange is over.
async fn read_body<D: WireDialect>(
    exchange: &mut ChatExchange<'_, D>,
    io: &mut impl BodyIo,
    deltas: &mut Vec<ChatDelta>,
) -> Result<(), TransportError> {
    loop {
        // An event is read at the time it is read: the clock is read again only after handing
        // deltas to a consumer, which may have made the reading wait.
        let mut at = io.now();
        while exchange.poll_deltas(at, deltas)? {
            if deltas.is_empty() {
                continue;
            }
            if !io.consumed() {
                deltas.clear();
                continue;
            }
            io.hand_on(exchange.clock(), deltas).await?;
            at = io.now();
        }
        if exchange.is_over() {
            return Ok(());
        }
        let (deadline, _) = exchange.deadline();
        match io.next_before(deadline).await {
            None => {
                if let Some(stall) = exchange.on_timeout(io.now()) {
                    return Err(stall);
                }
            }
            Some(BodyPiece::End(how)) => exchange.on_end(how)?,
            Some(BodyPiece::Bytes(bytes)) => exchange.on_bytes(&bytes)?,
        }
    }
}

/// One attempt whose answer comes whole: `request` sent to `endpoint` and the answer's body
/// read under the total deadline, a non-2xx answer classified by `reader`, the body judged by
/// `exchange` before any delta is handed on.
pub(crate) async fn whole<D: WireDialect>(
    exchange: &mut ChatExchange<'_, D>,
    endpoint: &JsonEndpoint,
    request: reqwest::RequestBuilder,
    reader: AnswerReader,
    sink: Option<&EventSink<ChatDelta>>,
) -> Result<LlmResponse, TransportError> {
    let total = exchange.clock().total_deadline();
    let late = || exchange.clock().stall_error(StallLayer::Total);
    let resp = timeout_at(TokioInstant::from_std(total), endpoint.send(request))
        .await
        .map_err(|_| late())?
        .map_err(|e| classify_reqwest(&e))?;
    if !resp.status().is_success() {
        return Err(reader.classify(resp, total).await);
    }
    let rate_limit = (reader.rate_limit)(resp.headers());
    let bytes = timeout_at(TokioInstant::from_std(total), resp.bytes())
        .await
        .map_err(|_| late())?
        .map_err(|e| classify_reqwest(&e))?;
    let mut deltas = Vec::new();
    exchange.on_answer(&bytes, &mut deltas)?;
    emit_all(exchange.clock(), sink, &mut deltas).await?;
    let mut answer = exchange.finish(now())?;
    answer.rate_limit = rate_limit;
    Ok(answer)
}

/// Push pending deltas to the consumer. Bounded by the total deadline (a consumer that stops
/// reading without dropping must not hold the attempt forever).
async fn emit_all(
    clock: &StallClock,
    sink: Option<&EventSink<ChatDelta>>,
    deltas: &mut Vec<ChatDelta>,
) -> Result<(), TransportError> {
    let Some(sink) = sink else {
        deltas.clear();
        return Ok(());
    };
    let total = TokioInstant::from_std(clock.total_deadline());
    for delta in deltas.drain(..) {
        timeout_at(total, sink.emit(delta))
            .await
            .map_err(|_| clock.stall_error(StallLayer::Total))?
            .map_err(|_| {
                TransportError::transient(
                    SourceReason::NetworkError,
                    "consumer gone: the stream consumer dropped its receiver; reading stopped",
                )
            })?;
    }
    Ok(())
}
