//! The govern layer: one ask handed to the runtime — the actors crate's `Scope::call`, where
//! selection, admission (breaker, gates, lease), the transport's send and the retry loop run —
//! with the record step's [`Recorder`] as its observer (one row per attempt and per terminal
//! failure). Its failure becomes the caller's error (`failure.rs`); a chat answer gets the
//! call's ids, its cost and its waits, and feeds the scope's metrics and the OpenTelemetry span.

use std::sync::Arc;

use polygateway_actors::runtime::series::{Book, PartySeries, ScopeSeries};
use polygateway_actors::runtime::{Governed, Scope};
use tracing::Instrument;

use super::ask::Ask;
use super::failure::to_gateway_error;
use super::service::Service;
use crate::error::GatewayError;
use crate::metrics::ChatMetrics;
use crate::telemetry::record::{Recorded, Recorder, SourceIdentity, Telemetry};
use crate::transport::chat::ChatTransport;
use crate::types::{CallOptions, LlmResponse};

/// The govern layer of one scope: its runtime scope and what its rows and metrics need. `M` is
/// the scope's metrics (chat scopes have their own; embeddings and OCR none).
pub(crate) struct Govern<T, M = ()> {
    pub scope: Scope<T>,
    pub name: Arc<str>,
    pub identities: Vec<SourceIdentity>,
    pub telemetry: Arc<Telemetry>,
    pub metrics: M,
}

impl<T: Recorded, M> Govern<T, M> {
    /// The governed call of `ask`, its rows recorded as it goes.
    async fn governed(
        &self,
        ask: &Ask<'_, T>,
    ) -> Result<Governed<T::Response>, polygateway_actors::runtime::CallFailure<T::Error>> {
        let recorder = Recorder {
            telemetry: &self.telemetry,
            context: &ask.context,
            sources: &self.identities,
        };
        self.scope
            .call(
                &ask.request,
                &recorder,
                ask.events,
                ask.order.govern(ask.is_reask),
            )
            .await
    }
}

/// An embeddings batch or an OCR image: the runtime's answer as is (the handle reads its
/// attempt id, source and wait).
impl<'r, 'a, T> Service<&'r Ask<'a, T>> for Govern<T>
where
    T: Recorded,
    T::Response: Sync,
{
    type Response = Governed<T::Response>;

    async fn call(&self, ask: &'r Ask<'a, T>) -> Result<Governed<T::Response>, GatewayError> {
        self.governed(ask)
            .await
            .map_err(|failure| to_gateway_error(&self.name, failure))
    }
}

/// A chat ask: the answer with the call's ids, cost and waits.
impl<'r, 'a> Service<&'r Ask<'a, ChatTransport>> for Govern<ChatTransport, Arc<ChatMetrics>> {
    type Response = LlmResponse;

    async fn call(&self, ask: &'r Ask<'a, ChatTransport>) -> Result<LlmResponse, GatewayError> {
        // OpenTelemetry GenAI semantic conventions, so an OTel subscriber exports them as is.
        let span = tracing::info_span!(
            "chat",
            "gen_ai.operation.name" = "chat",
            "gen_ai.request.model" = tracing::field::Empty,
            "gen_ai.response.model" = tracing::field::Empty,
            "gen_ai.usage.input_tokens" = tracing::field::Empty,
            "gen_ai.usage.output_tokens" = tracing::field::Empty,
            "pgw.scope" = %self.name,
            "pgw.source" = tracing::field::Empty,
            "pgw.cost" = tracing::field::Empty,
        );
        let parties = Parties::of(ask.options);
        let governed = match self.governed(ask).instrument(span.clone()).await {
            Ok(g) => g,
            Err(failure) => {
                parties.finished(&self.metrics.series, false, 0.0);
                return Err(to_gateway_error(&self.name, failure));
            }
        };
        let mut response = governed.response;
        response.call_id = governed.attempt_id;
        response.capacity_wait_ms = governed.capacity_wait.as_secs_f64() * 1e3;
        response.parent_call_id = ask.options.parent_call_id.clone();
        response.call_group_id = ask.options.call_group.clone();
        response.cost = self.telemetry.cost(&response.model, &response.usage());
        response.as_single_ask();
        let metrics = &self.metrics;
        if let Some(ttft) = response.ttft_ms {
            metrics.ttft.record(ttft / 1e3);
            let now = crate::metrics::unix_now();
            metrics.series.ttft(now, ttft / 1e3);
            if let Some(source) = metrics.source_series.get(&response.source_name) {
                source.ttft(now, ttft / 1e3);
            }
        }
        parties.finished(&metrics.series, true, response.cost.unwrap_or(0.0));
        span.record("gen_ai.request.model", response.model.as_str());
        if let Some(reported) = &response.model_reported {
            span.record("gen_ai.response.model", reported.as_str());
        }
        span.record("gen_ai.usage.input_tokens", response.prompt_tokens);
        span.record("gen_ai.usage.output_tokens", response.completion_tokens);
        span.record("pgw.source", response.source_name.as_str());
        if let Some(cost) = response.cost {
            span.record("pgw.cost", cost);
        }
        Ok(response)
    }
}

/// The per-key and per-tenant series a call feeds (docs/behaviour.md §12.8).
struct Parties {
    key: Option<Arc<PartySeries>>,
    tenant: Option<Arc<PartySeries>>,
}

impl Parties {
    fn of(options: &CallOptions) -> Self {
        let book = Book::global();
        Self {
            key: options.key_name.as_deref().map(|k| book.key(k)),
            tenant: options.tenant_id.as_deref().map(|t| book.tenant(t)),
        }
    }

    /// A governed call of the scope `series` finished, `ok` or not, charged `cost`.
    fn finished(&self, series: &ScopeSeries, ok: bool, cost: f64) {
        let now = crate::metrics::unix_now();
        if cost > 0.0 {
            series.spend(now, cost);
        }
        for p in [&self.key, &self.tenant].into_iter().flatten() {
            p.call(now, ok, cost);
        }
    }
}
