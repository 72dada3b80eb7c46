//! The structured-output ladder (SPEC §9.2): prevent → repair → validate → re-ask → give up.
//!
//! [`run_ladder`] is pure orchestration over an `ask` function supplied by the runtime, so it can
//! be tested with a scripted closure. Each `ask` is a full governed call made by the runtime;
//! the `is_reask` flag tells it the call is a re-ask (SPEC: re-asks never count toward the
//! breaker). Errors returned by `ask` (unavailable, rejected, …) end the ladder unchanged.
//!
//! Re-asks send the original messages plus the latest bad answer (as an assistant message) and
//! one correction message — not the whole history of bad answers — so the prompt stays bounded.

use std::fmt;
use std::future::Future;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::repair::{repair_json, Normalizer};
use super::schema::{response_format_for, schema_name, strict_schema};
use super::validate::{clip, validate};
use crate::error::{GatewayError, InvalidResult};
use crate::types::{LlmResponse, Message};

/// Errors listed in a correction message (SPEC §9.2).
const ERRORS_IN_CORRECTION: usize = 3;

/// What the caller asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LadderMode {
    /// `structured = json`: repair only — one ask, no schema, no re-ask.
    Json,
    /// `structured = T`: the whole ladder.
    Typed,
}

/// How to run the ladder for one call.
#[derive(Clone)]
pub struct LadderPlan {
    /// The provider supports native `response_format: json_schema` (typed mode uses it on
    /// every ask).
    pub native_schema: bool,
    /// Re-asks allowed after the first answer (`PGW_STRUCTURED_MAX_RETRIES`; 0 = never).
    pub max_retries: u32,
    /// Applied to the repaired value before validation.
    pub normalizer: Option<Normalizer>,
    /// Json or typed.
    pub mode: LadderMode,
}

impl LadderPlan {
    /// Typed mode.
    pub fn typed(native_schema: bool, max_retries: u32) -> Self {
        Self {
            native_schema,
            max_retries,
            normalizer: None,
            mode: LadderMode::Typed,
        }
    }

    /// Json mode (repair only).
    pub fn json() -> Self {
        Self {
            native_schema: false,
            max_retries: 0,
            normalizer: None,
            mode: LadderMode::Json,
        }
    }

    /// With a normaliser hook.
    pub fn with_normalizer(mut self, normalizer: Normalizer) -> Self {
        self.normalizer = Some(normalizer);
        self
    }
}

impl fmt::Debug for LadderPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LadderPlan")
            .field("native_schema", &self.native_schema)
            .field("max_retries", &self.max_retries)
            .field("normalizer", &self.normalizer.is_some())
            .field("mode", &self.mode)
            .finish()
    }
}

/// A successful ladder run.
#[derive(Debug, Clone)]
pub struct LadderOutcome<T> {
    /// The accepted answer, `structured_data` set to the validated JSON (what the cache stores).
    pub response: LlmResponse,
    /// The typed value.
    pub value: T,
    /// Asks made, the first included (1 = no re-ask).
    pub asks: u32,
}

/// Why one answer was not accepted.
struct Rejection {
    repair_error: Option<String>,
    validation_errors: Vec<String>,
}

impl Rejection {
    fn errors(&self) -> Vec<String> {
        match &self.repair_error {
            Some(e) => vec![e.clone()],
            None => self.validation_errors.clone(),
        }
    }
}

/// Runs the ladder: asks, repairs, validates and re-asks until an answer deserializes into `T`
/// or the budget is spent (→ [`GatewayError::ResultInvalid`] with the raw text, the repair error
/// and the validation errors of the last answer).
///
/// `ask(messages, response_format, is_reask)` makes one governed call.
pub async fn run_ladder<T, F, Fut>(
    mut ask: F,
    messages: Vec<Message>,
    plan: LadderPlan,
) -> Result<LadderOutcome<T>, GatewayError>
where
    T: DeserializeOwned + JsonSchema,
    F: FnMut(Vec<Message>, Option<Value>, bool) -> Fut,
    Fut: Future<Output = Result<LlmResponse, GatewayError>>,
{
    let typed = plan.mode == LadderMode::Typed;
    let response_format =
        (typed && plan.native_schema).then(|| response_format_for::<T>(&schema_name::<T>()));
    let max_asks = if typed {
        plan.max_retries.saturating_add(1)
    } else {
        1
    };
    let mut conversation = messages.clone();
    let mut asks = 0u32;
    loop {
        let is_reask = asks > 0;
        let mut response = ask(conversation, response_format.clone(), is_reask).await?;
        asks += 1;
        match accept::<T>(&response.content, plan.normalizer.as_ref()) {
            Ok((json, value)) => {
                response.structured_data = Some(json);
                return Ok(LadderOutcome {
                    response,
                    value,
                    asks,
                });
            }
            Err(rejection) if asks >= max_asks => {
                return Err(exhausted(response.content, rejection, asks));
            }
            Err(rejection) => {
                let schema_hint = (!plan.native_schema).then(strict_schema::<T>);
                conversation = messages.clone();
                conversation.push(Message::assistant(response.content));
                conversation.push(Message::user(correction(
                    &rejection.errors(),
                    schema_hint.as_ref(),
                )));
            }
        }
    }
}

/// Rebuilds the typed value of a cached response from its `structured_data`, without network.
pub fn rehydrate<T: DeserializeOwned>(response: &LlmResponse) -> Result<T, GatewayError> {
    let Some(data) = &response.structured_data else {
        return Err(GatewayError::ResultInvalid {
            message: "cached response has no structured_data".into(),
            details: Box::new(InvalidResult {
                raw_text: response.content.clone(),
                repair_error: None,
                validation_errors: Vec::new(),
            }),
        });
    };
    validate::<T>(data.clone()).map_err(|errors| GatewayError::ResultInvalid {
        message: clip(&format!(
            "cached structured_data does not fit the requested type: {}",
            errors.first().map(String::as_str).unwrap_or("")
        )),
        details: Box::new(InvalidResult {
            raw_text: response.content.clone(),
            repair_error: None,
            validation_errors: errors,
        }),
    })
}

/// Repair → normalise → validate one answer.
fn accept<T: DeserializeOwned>(
    content: &str,
    normalizer: Option<&Normalizer>,
) -> Result<(Value, T), Rejection> {
    let repaired = repair_json(content).map_err(|e| Rejection {
        repair_error: Some(clip(&e.to_string())),
        validation_errors: Vec::new(),
    })?;
    let json = match normalizer {
        Some(n) => n(repaired),
        None => repaired,
    };
    match validate::<T>(json.clone()) {
        Ok(value) => Ok((json, value)),
        Err(validation_errors) => Err(Rejection {
            repair_error: None,
            validation_errors,
        }),
    }
}

/// The user message of a re-ask.
fn correction(errors: &[String], schema: Option<&Value>) -> String {
    let mut text = String::from(
        "Your previous answer could not be used: it is not valid JSON of the required shape.\nErrors:\n",
    );
    for e in errors.iter().take(ERRORS_IN_CORRECTION) {
        text.push_str("- ");
        text.push_str(&clip(e));
        text.push('\n');
    }
    if let Some(schema) = schema {
        text.push_str("The answer must be JSON matching this JSON Schema:\n");
        text.push_str(&schema.to_string());
        text.push('\n');
    }
    text.push_str("Reply with only the corrected JSON value: no prose, no code fences.");
    text
}

fn exhausted(raw_text: String, rejection: Rejection, asks: u32) -> GatewayError {
    let first = rejection.errors().into_iter().next().unwrap_or_default();
    GatewayError::ResultInvalid {
        message: clip(&format!(
            "structured output invalid after {asks} ask(s): {first}"
        )),
        details: Box::new(InvalidResult {
            raw_text,
            repair_error: rejection.repair_error,
            validation_errors: rejection
                .validation_errors
                .into_iter()
                .take(ERRORS_IN_CORRECTION)
                .collect(),
        }),
    }
}
