//! One governed call, as a stack of layers (tower's model): each layer is a [`Service`] holding
//! the layer below it, one concern a file, composed once per scope by the gateway builder
//! (`gateway/build/scopes.rs`). This file is the one place the order is written: the stacks
//! below, and the steps each kind of call takes before its first layer. Outermost first:
//!
//! 1. **validate** (`validate.rs`): the options, an OCR image's kind — refused before anything
//!    is spent;
//! 2. **record** (`telemetry/record.rs`): the call's id and the rows' context of the ask; the same
//!    file builds every row the layers below record (attempts, terminal failures, cache hits,
//!    budget refusals);
//! 3. **cache + coalesce** (`cache.rs`, chat): lookup, single flight, store;
//! 4. **structured ladder** (`ladder.rs`, chat): one ask of the layers below per ask of the ladder;
//! 5. **budget** (`budget.rs`, chat): each ask's spend reserved, then settled at its cost;
//! 6. **govern** (`govern.rs`): the runtime's `Scope::call` — selection, admission, the
//!    transport's send, retries — with failures mapped (`failure.rs`) and the call's order
//!    among waiting calls (`order.rs`).
//!
//! An embeddings or OCR call takes the steps and layers that apply to it: validate, record,
//! govern. Nothing here calls up into the gateway: the handles (`gateway/chat.rs`, `stream.rs`,
//! `embed.rs`, `ocr.rs`) call down into these stacks and shape what they answer.

mod ask;
pub(crate) mod budget;
pub(crate) mod cache;
pub(crate) mod failure;
mod govern;
mod ladder;
pub(crate) mod order;
mod service;
mod validate;

use std::sync::Arc;

use polygateway_actors::runtime::Governed;
use polygateway_actors::EventSink;
use serde_json::{Map, Value};

use crate::error::GatewayError;
use crate::metrics::ChatMetrics;
use crate::structured::ladder::rehydrate_checked;
use crate::structured::{LadderPlan, SchemaRequest};
use crate::telemetry::record::{set_call_group, Telemetry};
use crate::transport::chat::{ChatDelta, ChatTransport};
use crate::transport::embeddings::{EmbeddingBatch, EmbeddingTransport, EmbeddingWireRequest};
use crate::transport::ocr::{OcrOutput, OcrRequest, OcrTransport};
use crate::types::{CallOptions, LlmResponse, Message};
use ask::{Ask, ChatAsk, Streamed, Structured};
pub(crate) use budget::Budget;
pub(crate) use cache::Cache;
pub(crate) use govern::Govern;
pub(crate) use ladder::Ladder;
use order::CallOrder;
use service::Service;

/// The layers of a chat scope, outermost first.
pub(crate) type ChatLayers = Cache<Ladder<Budget<Govern<ChatTransport, Arc<ChatMetrics>>>>>;

/// A chat scope's stack.
pub(crate) struct ChatStack {
    pub layers: ChatLayers,
    pub telemetry: Arc<Telemetry>,
    /// The scope's sources' `extra_body`, merged (the `sampling` column).
    pub extra_body: Map<String, Value>,
}

/// An embeddings scope's stack: one governed call per batch.
pub(crate) struct EmbedStack {
    pub layers: Govern<EmbeddingTransport>,
}

/// An OCR scope's stack.
pub(crate) struct OcrStack {
    pub layers: Govern<OcrTransport>,
}

impl ChatStack {
    fn asks<'a>(
        &'a self,
        options: &'a CallOptions,
        order: &'a CallOrder,
        events: Option<&'a EventSink<ChatDelta>>,
    ) -> ChatAsk<'a> {
        ChatAsk {
            telemetry: &self.telemetry,
            extra_body: &self.extra_body,
            options,
            order,
            events,
        }
    }

    /// A plain chat call.
    pub(crate) async fn chat(
        &self,
        messages: Vec<Message>,
        options: &mut CallOptions,
    ) -> Result<LlmResponse, GatewayError> {
        validate::options(options)?;
        set_call_group(options);
        let options = &*options;
        let order = CallOrder::of(options);
        let ask = self.asks(options, &order, None).ask(messages, None, false);
        self.layers.call(&ask).await
    }

    /// A streamed chat call delivering its deltas into `events`. A cache hit comes back marked
    /// `cache_hit`, with no delta delivered.
    pub(crate) async fn stream(
        &self,
        messages: Vec<Message>,
        options: &mut CallOptions,
        events: &EventSink<ChatDelta>,
    ) -> Result<LlmResponse, GatewayError> {
        validate::options(options)?;
        set_call_group(options);
        let options = &*options;
        let order = CallOrder::of(options);
        let ask = self
            .asks(options, &order, Some(events))
            .ask(messages, None, false);
        self.layers.call(Streamed(&ask)).await
    }

    /// A structured chat call: `schema` is what typed asks send, `check` what accepts an answer
    /// (a cache hit is checked again, so a hit stored under another check cannot pass). An
    /// answer of tool calls or a refusal comes back as is, without a value.
    pub(crate) async fn structured<T>(
        &self,
        messages: Vec<Message>,
        options: &mut CallOptions,
        plan: LadderPlan,
        schema: Option<SchemaRequest>,
        check: impl Fn(Value) -> Result<T, Vec<String>> + Send + Sync,
    ) -> Result<(LlmResponse, Option<T>), GatewayError>
    where
        T: Send,
    {
        validate::options(options)?;
        set_call_group(options);
        let options = &*options;
        let order = CallOrder::of(options);
        // The caller's ask: its conversation and the row of a cache hit.
        let ask = self.asks(options, &order, None).ask(messages, None, false);
        let judge = |value: Value| check(value).map(drop);
        let structured = Structured {
            ask: &ask,
            plan,
            schema,
            check: &judge,
        };
        let response = self.layers.call(structured).await?;
        if !response.is_content_answer() {
            return Ok((response, None));
        }
        let value = rehydrate_checked(&response, &check)?;
        Ok((response, Some(value)))
    }
}

impl EmbedStack {
    /// Refuse bad options before any batch is sent.
    pub(crate) fn validate(options: &CallOptions) -> Result<(), GatewayError> {
        validate::options(options)
    }

    /// One batch of an embeddings call, under the call's id `call_group`.
    pub(crate) async fn batch(
        &self,
        texts: Vec<String>,
        options: &CallOptions,
        order: &CallOrder,
        call_group: Option<String>,
    ) -> Result<Governed<EmbeddingBatch>, GatewayError> {
        let ask = Ask {
            context: self
                .layers
                .telemetry
                .texts_context(options, call_group, &texts),
            request: EmbeddingWireRequest {
                inputs: Arc::new(texts),
            },
            options,
            order,
            is_reask: false,
            events: None,
        };
        self.layers.call(&ask).await
    }
}

impl OcrStack {
    /// One OCR call.
    pub(crate) async fn call(
        &self,
        request: OcrRequest,
        options: &CallOptions,
    ) -> Result<Governed<OcrOutput>, GatewayError> {
        validate::options(options)?;
        let kind = validate::image(&request.bytes)?;
        let digest = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&request.bytes));
        let order = CallOrder::of(options);
        let ask = Ask {
            context: self.layers.telemetry.image_context(
                options,
                kind,
                &digest,
                request.bytes.len(),
            ),
            request,
            options,
            order: &order,
            is_reask: false,
            events: None,
        };
        self.layers.call(&ask).await
    }
}
