//! The structured ladder layer (docs/behaviour.md §9.2): a structured call becomes one ask after
//! another of the layer below — each a governed call of its own, with its own rows, budget
//! reservation and breaker exemption for re-asks — until an answer passes (`crate::structured::
//! ladder` decides: repair, validate, re-ask with feedback, give up). Every other call passes
//! through untouched, so it carries none of the ladder's state.

use std::future::Future;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::ask::{Ask, ChatAsk, Streamed, Structured};
use super::service::Service;
use crate::error::GatewayError;
use crate::structured::ladder::run_ladder_checked;
use crate::telemetry::record::Telemetry;
use crate::transport::chat::ChatTransport;
use crate::types::LlmResponse;

/// The ladder layer of one chat scope over `inner`.
pub(crate) struct Ladder<S> {
    pub telemetry: Arc<Telemetry>,
    /// The scope's sources' `extra_body`, merged: each ask's rows name it.
    pub extra_body: Map<String, Value>,
    pub inner: S,
}

impl<'r, 'a, S> Service<&'r Ask<'a, ChatTransport>> for Ladder<S>
where
    S: Service<&'r Ask<'a, ChatTransport>, Response = LlmResponse>,
{
    type Response = LlmResponse;

    fn call(
        &self,
        ask: &'r Ask<'a, ChatTransport>,
    ) -> impl Future<Output = Result<LlmResponse, GatewayError>> + Send {
        self.inner.call(ask)
    }
}

impl<'r, 'a, S> Service<Streamed<'r, 'a>> for Ladder<S>
where
    S: Service<&'r Ask<'a, ChatTransport>, Response = LlmResponse>,
{
    type Response = LlmResponse;

    fn call(
        &self,
        streamed: Streamed<'r, 'a>,
    ) -> impl Future<Output = Result<LlmResponse, GatewayError>> + Send {
        self.inner.call(streamed.0)
    }
}

impl<'r, 'a, S, C> Service<Structured<'r, 'a, C>> for Ladder<S>
where
    S: for<'s, 'x> Service<&'s Ask<'x, ChatTransport>, Response = LlmResponse> + Sync,
    C: Fn(Value) -> Result<(), Vec<String>> + Sync,
{
    type Response = LlmResponse;

    /// The accepted answer, `structured_data` set; an answer of tool calls or a refusal as is.
    async fn call(&self, structured: Structured<'r, 'a, C>) -> Result<LlmResponse, GatewayError> {
        let caller = structured.ask;
        let asks = ChatAsk {
            telemetry: &self.telemetry,
            extra_body: &self.extra_body,
            options: caller.options,
            order: caller.order,
            events: None,
        };
        let outcome = run_ladder_checked(
            |conversation, schema, is_reask| {
                let ask = asks.ask(conversation, schema, is_reask);
                async move { self.inner.call(&ask).await }
            },
            caller.request.messages.as_ref().clone(),
            structured.plan,
            structured.schema,
            structured.check,
        )
        .await?;
        Ok(outcome.response)
    }
}
