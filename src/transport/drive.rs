//! The I/O half of one chat attempt, for every dialect: send the request, read the answer into
//! the dialect's sans-I/O [`ChatExchange`] (`transport::machine`) under the deadline it names,
//! hand its deltas to the consumer as each event is read, and return its verdict. The time is
//! tokio's (`watchdog::now`), so tests can pause it; a deadline is a `timeout_at` around one
//! read, which polls the read first: data already buffered wins over a deadline that passed
//! while the consumer was slow.

use futures::StreamExt;
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
    let mut deltas = Vec::new();
    if let Err(e) = read_body(exchange, resp, sink, &mut deltas).await {
        return Err(exchange.cut(e));
    }
    exchange.flush(&mut deltas);
    emit_all(exchange.clock(), sink, &mut deltas).await?;
    let mut answer = exchange.finish(now())?;
    answer.rate_limit = rate_limit;
    Ok(answer)
}

/// Read a streamed body into `exchange`, handing each event's deltas to the consumer before the
/// next event is read, until the exchange is over.
async fn read_body<D: WireDialect>(
    exchange: &mut ChatExchange<'_, D>,
    resp: reqwest::Response,
    sink: Option<&EventSink<ChatDelta>>,
    deltas: &mut Vec<ChatDelta>,
) -> Result<(), TransportError> {
    let mut body = resp.bytes_stream();
    loop {
        // An event is read at the time it is read: the clock is read again only after handing
        // deltas to a consumer, which may have made the reading wait.
        let mut at = now();
        while exchange.poll_deltas(at, deltas)? {
            if deltas.is_empty() {
                continue;
            }
            if sink.is_none() {
                deltas.clear();
                continue;
            }
            emit_all(exchange.clock(), sink, deltas).await?;
            at = now();
        }
        if exchange.is_over() {
            return Ok(());
        }
        let (deadline, _) = exchange.deadline();
        match timeout_at(TokioInstant::from_std(deadline), body.next()).await {
            Err(_) => {
                if let Some(stall) = exchange.on_timeout(now()) {
                    return Err(stall);
                }
            }
            Ok(None) => exchange.on_end(BodyEnd::Finished)?,
            // The connection dropped mid-body (no final chunk). What arrived is judged like any
            // stream without its end marker.
            Ok(Some(Err(_))) => exchange.on_end(BodyEnd::Closed)?,
            Ok(Some(Ok(bytes))) => exchange.on_bytes(&bytes)?,
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
