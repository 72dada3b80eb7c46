//! Telemetry recording: the one place rows are built and emitted (docs/behaviour.md §10.5) —
//! the record layer of the call stack (`crate::call`).
//!
//! A call's [`RowContext`] (the columns every row of it shares) is built here, once per ask, for
//! each kind of call: a chat conversation ([`Telemetry::chat_context`]), a batch of texts to embed
//! ([`Telemetry::texts_context`]), an image ([`Telemetry::image_context`]). Every call kind then
//! records through [`Recorder`], the runtime's [`CallObserver`]: one row per attempt (including
//! cancelled ones), one per terminal failure that never reached a source, one per cache hit
//! ([`Telemetry::record_cache_hit`]) and one per call a spend budget refused
//! ([`Telemetry::record_refusal`]). What an answer puts in its row is [`Recorded::outcome`], per
//! transport. Emitting pushes onto a bounded queue and returns at once; recording never fails a
//! call.

use std::sync::Arc;

use polygateway_actors::runtime::{
    AttemptReport, AttemptResult, CallFailure, CallObserver, TerminalReport,
};
use polygateway_actors::telemetry::TelemetryWriter;
use polygateway_actors::Transport;
use serde_json::{Map, Value};

use crate::call::failure::{classify, detail_text};
use crate::error::TransportError;
use crate::telemetry::cost::Pricing;
use crate::telemetry::digest::{
    cap_text, error_text, failure_class_name, messages_json, sampling_json,
};
use crate::telemetry::row::{meta_json, TelemetryRow};
use crate::transport::chat::ChatTransport;
use crate::transport::embeddings::{EmbeddingBatch, EmbeddingTransport};
use crate::transport::ocr::{ImageKind, OcrOutput, OcrTransport};
use crate::types::{CallOptions, LlmResponse, Message, Usage, UsageSource};

/// What a successful response contributes to its row.
#[derive(Debug, Default)]
pub(crate) struct RowOutcome<'a> {
    pub response: Option<&'a str>,
    pub thinking: Option<&'a str>,
    pub usage: Usage,
    pub ttft_ms: Option<f64>,
    pub max_inter_token_ms: Option<f64>,
    pub model_reported: Option<&'a str>,
    /// Whether token usage is billable (OCR is not).
    pub priced: bool,
    /// A chat answer's finish reason.
    pub finish_reason: Option<&'a str>,
    /// A chat answer's number of tool calls (`None` for other kinds).
    pub tool_call_count: Option<usize>,
}

/// A transport whose responses can be recorded.
pub(crate) trait Recorded: Transport<Error = TransportError> {
    fn outcome(response: &Self::Response) -> RowOutcome<'_>;
}

impl Recorded for ChatTransport {
    fn outcome(response: &LlmResponse) -> RowOutcome<'_> {
        RowOutcome {
            response: Some(&response.content),
            thinking: Some(&response.thinking),
            usage: response.usage(),
            ttft_ms: response.ttft_ms,
            max_inter_token_ms: response.max_inter_token_ms,
            model_reported: response.model_reported.as_deref(),
            priced: true,
            finish_reason: response.finish_reason.as_deref(),
            tool_call_count: Some(
                response.tool_calls.len() + usize::from(response.function_call.is_some()),
            ),
        }
    }
}

impl Recorded for EmbeddingTransport {
    fn outcome(batch: &EmbeddingBatch) -> RowOutcome<'_> {
        RowOutcome {
            response: None,
            thinking: None,
            usage: Usage {
                prompt_tokens: batch.prompt_tokens,
                completion_tokens: 0,
                source: batch.usage_source,
                ..Usage::default()
            },
            ttft_ms: None,
            max_inter_token_ms: None,
            model_reported: batch.model_reported.as_deref(),
            priced: true,
            finish_reason: None,
            tool_call_count: None,
        }
    }
}

impl Recorded for OcrTransport {
    fn outcome(output: &OcrOutput) -> RowOutcome<'_> {
        let response = match output {
            OcrOutput::Text(t) => Some(t.text.as_str()),
            OcrOutput::Layout(_) => None,
        };
        RowOutcome {
            response,
            usage: Usage {
                source: UsageSource::Measured,
                ..Usage::default()
            },
            priced: false,
            finish_reason: None,
            tool_call_count: None,
            ..RowOutcome::default()
        }
    }
}

/// Per-call context shared by all rows of one call.
#[derive(Debug, Clone, Default)]
pub(crate) struct RowContext {
    pub session_id: Option<String>,
    pub parent_call_id: Option<String>,
    /// The call's own id, shared by all its rows.
    pub call_group_id: Option<String>,
    pub messages: String,
    pub sampling: Option<String>,
    pub tenant_id: String,
    pub meta: String,
    /// A typed call: its rows name the structured mode of each ask.
    pub typed: bool,
}

/// Every row of one chat call carries one fresh id as `call_group_id`; `parent_call_id` stays
/// the caller's chain link (or empty), as in the original library.
pub(crate) fn set_call_group(options: &mut CallOptions) {
    if options.call_group.is_none() {
        options.call_group = Some(polygateway_actors::runtime::new_id());
    }
}

impl RowContext {
    /// The columns a call's options give every row of it, under the call's id `call_group`.
    fn of(options: &CallOptions, call_group: Option<String>) -> Self {
        Self {
            session_id: options.session_id.clone(),
            parent_call_id: options.parent_call_id.clone(),
            call_group_id: call_group,
            messages: String::new(),
            sampling: None,
            tenant_id: options.tenant().to_string(),
            meta: meta_json(&options.meta),
            typed: false,
        }
    }
}

/// Configured identity of a source, for rows.
#[derive(Debug, Clone)]
pub(crate) struct SourceIdentity {
    pub name: String,
    pub model: String,
    pub provider: String,
    /// A chat source's structured mode (`None` in embeddings and OCR scopes).
    pub structured_mode: Option<Arc<crate::structured::source_mode::SourceMode>>,
}

/// The runtime's telemetry front: the writer rows are pushed into, pricing, text cap.
#[derive(Debug)]
pub(crate) struct Telemetry {
    pub writer: TelemetryWriter<TelemetryRow>,
    pub pricing: Option<Arc<Pricing>>,
    pub text_cap: Option<usize>,
    pub enabled: bool,
}

impl Telemetry {
    /// The per-call row context, built only when rows are recorded at all (digesting messages
    /// is the costliest part of a row).
    pub(crate) fn context(&self, build: impl FnOnce() -> RowContext) -> RowContext {
        if self.enabled {
            build()
        } else {
            RowContext::default()
        }
    }

    /// The context of one chat ask: its conversation digested, its sampling (the call's overlay
    /// over the scope's `extra_body`), `typed` when the ask carries a schema.
    pub(crate) fn chat_context(
        &self,
        options: &CallOptions,
        messages: &[Message],
        extra_body: &Map<String, Value>,
        typed: bool,
    ) -> RowContext {
        self.context(|| RowContext {
            messages: messages_json(messages, self.text_cap),
            sampling: sampling_json(Some(&options.overlay), Some(extra_body)),
            typed,
            ..RowContext::of(options, options.call_group.clone())
        })
    }

    /// The context of one batch of texts to embed: the texts, each capped, as a JSON array.
    pub(crate) fn texts_context(
        &self,
        options: &CallOptions,
        call_group: Option<String>,
        texts: &[String],
    ) -> RowContext {
        self.context(|| RowContext {
            messages: Value::Array(
                texts
                    .iter()
                    .map(|t| Value::String(cap_text(t, self.text_cap)))
                    .collect(),
            )
            .to_string(),
            ..RowContext::of(options, call_group)
        })
    }

    /// The context of one image: its kind, digest and size, never its bytes.
    pub(crate) fn image_context(
        &self,
        options: &CallOptions,
        kind: ImageKind,
        sha256: &str,
        bytes: usize,
    ) -> RowContext {
        self.context(|| RowContext {
            messages: serde_json::json!([{
                "type": "image",
                "mime": kind.mime(),
                "sha256": sha256,
                "bytes": bytes,
            }])
            .to_string(),
            ..RowContext::of(options, Some(polygateway_actors::runtime::new_id()))
        })
    }

    /// The one emit function.
    pub(crate) fn emit(&self, row: TelemetryRow) {
        if !self.writer.push(row) {
            metrics::counter!(crate::metrics::TELEMETRY_DROPPED_ROWS_TOTAL).increment(1);
        }
    }

    /// Cost of `usage` on `model`: `None` without a pricing table, for unknown models and when
    /// usage is unavailable (unknown is not free).
    pub(crate) fn cost(&self, model: &str, usage: &Usage) -> Option<f64> {
        self.pricing.as_ref().and_then(|p| p.cost(model, usage))
    }

    /// Record a cache hit: its own row id, latency 0, cost 0.0, the current call's context.
    pub(crate) fn record_cache_hit(&self, ctx: &RowContext, response: &LlmResponse) {
        if !self.enabled {
            return;
        }
        let mut row = self.base_row(&response.call_id, ctx);
        row.model = response.model.clone();
        row.provider = response.provider.clone();
        row.source_name = response.source_name.clone();
        self.fill_success(&mut row, &ChatTransport::outcome(response));
        row.latency_ms = 0.0;
        row.cache_hit = true;
        row.cost = Some(0.0);
        self.emit(row);
    }

    /// Record a call refused before any attempt by the gateway itself (a spend budget): one
    /// row with the error, no source and no cost, as the runtime's terminal rows.
    pub(crate) fn record_refusal(&self, ctx: &RowContext, error: &crate::error::GatewayError) {
        if !self.enabled {
            return;
        }
        let mut row = self.base_row(&polygateway_actors::runtime::new_id(), ctx);
        let class = error
            .unavailable()
            .map_or("GatewayError", |u| u.kind.class_name());
        row.error = Some(error_text(class, &error.to_string()));
        self.emit(row);
    }

    /// The columns a successful answer fills (cost included, from the row's model).
    fn fill_success(&self, row: &mut TelemetryRow, outcome: &RowOutcome<'_>) {
        row.response = outcome.response.map(|r| cap_text(r, self.text_cap));
        row.thinking = outcome
            .thinking
            .filter(|s| !s.is_empty())
            .map(|r| cap_text(r, self.text_cap));
        row.prompt_tokens = outcome.usage.prompt_tokens as i64;
        row.completion_tokens = outcome.usage.completion_tokens as i64;
        row.usage_source = outcome.usage.source.as_str().to_string();
        row.ttft_ms = outcome.ttft_ms;
        row.max_inter_token_ms = outcome.max_inter_token_ms;
        let count = |n: Option<u64>| n.map(|n| i64::try_from(n).unwrap_or(i64::MAX));
        row.cached_prompt_tokens = count(outcome.usage.cached_prompt_tokens);
        row.cache_read_tokens = row.cached_prompt_tokens;
        row.cache_write_tokens = count(outcome.usage.cache_write_tokens());
        row.cache_write_1h_tokens = count(outcome.usage.cache_write_1h_tokens);
        row.reasoning_tokens = outcome.usage.reasoning_tokens.map(|n| n as i64);
        row.model_reported = outcome.model_reported.map(str::to_string);
        row.finish_reason = outcome.finish_reason.map(str::to_string);
        row.tool_call_count = outcome
            .tool_call_count
            .map(|n| i64::try_from(n).unwrap_or(i64::MAX));
        row.cost = if outcome.priced {
            self.cost(&row.model, &outcome.usage)
        } else {
            None
        };
    }

    fn base_row(&self, call_id: &str, ctx: &RowContext) -> TelemetryRow {
        let mut row = TelemetryRow::new(call_id);
        row.session_id = ctx.session_id.clone();
        row.parent_call_id = ctx.parent_call_id.clone();
        row.call_group_id = ctx.call_group_id.clone();
        row.messages = ctx.messages.clone();
        row.sampling = ctx.sampling.clone();
        row.tenant_id = ctx.tenant_id.clone();
        row.meta = ctx.meta.clone();
        row
    }
}

/// The observer handed to the runtime for one call.
pub(crate) struct Recorder<'a> {
    pub telemetry: &'a Telemetry,
    pub context: &'a RowContext,
    pub sources: &'a [SourceIdentity],
}

impl Recorder<'_> {
    fn identity(&self, source: &str) -> Option<&SourceIdentity> {
        self.sources.iter().find(|s| s.name == source)
    }
}

impl<T: Recorded> CallObserver<T> for Recorder<'_> {
    fn on_attempt(&self, report: &AttemptReport<'_, T>) {
        let t = self.telemetry;
        if !t.enabled {
            return;
        }
        let mut row = t.base_row(report.attempt_id, self.context);
        if let Some(identity) = self.identity(report.source) {
            row.model = identity.model.clone();
            row.provider = identity.provider.clone();
            // The source's mode as the ask ends: the one it was sent in, or the weaker one it
            // fell back to (a refused mode is re-sent inside the same ask).
            if self.context.typed {
                row.structured_mode = identity
                    .structured_mode
                    .as_ref()
                    .map(|m| m.current().as_str().to_string());
            }
        }
        row.source_name = report.source.to_string();
        row.latency_ms = report.elapsed.as_secs_f64() * 1e3;
        row.capacity_wait_ms = report.capacity_wait.as_secs_f64() * 1e3;
        row.continued_from = report.continued_from.map(str::to_string);
        match &report.result {
            AttemptResult::Ok(response) => t.fill_success(&mut row, &T::outcome(response)),
            AttemptResult::Err(error) => {
                // A stream cut after content: what it delivered and what its upstream
                // reported, so a continued call's rows add up to its answer (§5.10).
                if let Some(cut) = error.cut.as_deref() {
                    t.fill_success(&mut row, &ChatTransport::outcome(cut));
                }
                row.error = Some(error_text(
                    failure_class_name(polygateway_actors::Classify::class(*error)),
                    &error.message,
                ));
            }
            AttemptResult::Cancelled => row.error = Some("cancelled".to_string()),
            AttemptResult::HedgeCancelled => row.error = Some("hedge_cancelled".to_string()),
        }
        t.emit(row);
    }

    fn on_terminal(&self, report: &TerminalReport<'_, TransportError>) {
        let t = self.telemetry;
        if !t.enabled {
            return;
        }
        let mut row = t.base_row(report.record_id, self.context);
        row.error = Some(describe(report.scope, report.failure));
        row.capacity_wait_ms = report.capacity_wait.as_secs_f64() * 1e3;
        t.emit(row);
    }
}

/// `Class: message` of a failure, for a terminal telemetry row.
fn describe(scope: &str, failure: &CallFailure<TransportError>) -> String {
    let (class, message) = match failure {
        CallFailure::Unavailable {
            reason,
            detail,
            last_error,
            ..
        } => (
            classify(*reason, last_error.is_some()).0.class_name(),
            format!(
                "scope {scope}: {}",
                detail_text(detail, last_error.as_ref())
            ),
        ),
        // The Python package's exception classes (the original library's, and its
        // `StreamInterruptedError` / `GatewayClosedError`): one vocabulary for every row.
        CallFailure::Rejected(e) => ("RequestRejectedError", e.message.clone()),
        CallFailure::Invalid(e) => ("ResultInvalidError", e.message.clone()),
        CallFailure::StreamBroken { error, .. } => {
            ("StreamInterruptedError", error.message.clone())
        }
        CallFailure::Shutdown(reason) => ("GatewayClosedError", reason.clone()),
    };
    error_text(class, &message)
}
