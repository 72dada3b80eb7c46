//! [`Ask`]: one ask as it goes down the call stack, and the two shapes of a chat call the cache
//! and ladder layers tell apart ([`Streamed`], [`Structured`]).

use std::sync::Arc;

use polygateway_actors::{EventSink, Transport};
use serde_json::{Map, Value};

use super::order::CallOrder;
use crate::structured::{LadderPlan, SchemaRequest};
use crate::telemetry::record::{RowContext, Telemetry};
use crate::transport::chat::{ChatTransport, ChatWireRequest};
use crate::types::{CallOptions, Message};

/// One governed ask: what the transport sends, and what the layers below the record step read.
pub(crate) struct Ask<'a, T: Transport> {
    /// The transport's request.
    pub request: T::Request,
    /// The caller's options, validated.
    pub options: &'a CallOptions,
    /// The columns every row of the ask shares (the record step's).
    pub context: RowContext,
    /// The call's place among waiting calls, shared by its asks (re-asks keep its deadline).
    pub order: &'a CallOrder,
    /// A structured re-ask: it never counts toward the breaker (docs/behaviour.md §9.2).
    pub is_reask: bool,
    /// Where a streamed ask's deltas go.
    pub events: Option<&'a EventSink<T::Event>>,
}

/// What a chat ask is built from besides its conversation.
pub(crate) struct ChatAsk<'a> {
    pub telemetry: &'a Telemetry,
    /// The scope's sources' `extra_body`, merged (the `sampling` column).
    pub extra_body: &'a Map<String, Value>,
    pub options: &'a CallOptions,
    pub order: &'a CallOrder,
    pub events: Option<&'a EventSink<<ChatTransport as Transport>::Event>>,
}

impl<'a> ChatAsk<'a> {
    /// The ask of `messages`: its wire request and its rows' context (the record step). A typed
    /// ask carries `schema`, which each attempt sends in its source's structured mode.
    pub(crate) fn ask(
        &self,
        messages: Vec<Message>,
        schema: Option<Arc<SchemaRequest>>,
        is_reask: bool,
    ) -> Ask<'a, ChatTransport> {
        let options = self.options;
        let context =
            self.telemetry
                .chat_context(options, &messages, self.extra_body, schema.is_some());
        let mut request = ChatWireRequest::new(messages);
        request.overlay = options.overlay.clone();
        request.schema = schema;
        request.stream = options.stream;
        request.native = options.native.clone();
        Ask {
            request,
            options,
            context,
            order: self.order,
            is_reask,
            events: self.events,
        }
    }
}

/// A streamed chat call: the cache layer looks it up and stores it but does not coalesce it (a
/// follower would have no deltas to show).
pub(crate) struct Streamed<'r, 'a>(pub &'r Ask<'a, ChatTransport>);

/// A structured chat call: the caller's ask (its conversation, and the row of a cache hit) and
/// what the ladder needs. `check` judges a repaired answer; the typed value is rebuilt from the
/// accepted answer's `structured_data` above the stack, as for a cache hit.
pub(crate) struct Structured<'r, 'a, C> {
    pub ask: &'r Ask<'a, ChatTransport>,
    pub plan: LadderPlan,
    pub schema: Option<SchemaRequest>,
    pub check: &'r C,
}
