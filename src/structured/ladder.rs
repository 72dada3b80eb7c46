//! The structured-output ladder (docs/behaviour.md §9.2): prevent → repair → validate → re-ask → give up.
//!
//! [`run_ladder`] is pure orchestration over an `ask` function supplied by the runtime, so it can
//! be tested with a scripted closure. Each `ask` is a full governed call made by the runtime;
//! the `is_reask` flag tells it the call is a re-ask (docs/behaviour.md §9.2: re-asks never count toward the
//! breaker). Errors returned by `ask` (unavailable, rejected, …) end the ladder unchanged.
//!
//! Every ask of a typed call, the first included, carries the schema ([`SchemaRequest`]); the
//! runtime's transport sends it in the strongest mode the provider of the source the attempt
//! goes to supports ([`super::StructuredMode`]), so a mixed scope never loses the schema.
//!
//! Re-asks send the original messages plus the latest bad answer (as an assistant message) and
//! one correction message — not the whole history of bad answers — so the prompt stays bounded.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::mode::SchemaRequest;
use super::repair::{repair_json, Normalizer};
use super::validate::{clip, validate};
use crate::error::{GatewayError, InvalidResult};
use crate::types::response::EarlierAsks;
use crate::types::{LlmResponse, Message};

/// Errors listed in a correction message (docs/behaviour.md §9.2).
const ERRORS_IN_CORRECTION: usize = 3;

/// What the caller asked for.
///
/// ```
/// use polygateway::structured::{LadderMode, LadderPlan};
/// // Json mode asks once; typed mode may re-ask `max_retries` times.
/// let asks_allowed = |plan: &LadderPlan| match plan.mode {
///     LadderMode::Json => 1,
///     LadderMode::Typed => plan.max_retries + 1,
/// };
/// assert_eq!(asks_allowed(&LadderPlan::json()), 1);
/// assert_eq!(asks_allowed(&LadderPlan::typed(2)), 3);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LadderMode {
    /// `structured = json`: repair only — one ask, no schema, no re-ask.
    Json,
    /// `structured = T`: the whole ladder.
    Typed,
}

/// How to run the ladder for one call.
///
/// ```
/// use polygateway::structured::{LadderMode, LadderPlan};
/// let plan = LadderPlan {
///     max_retries: 1,
///     normalizer: None,
///     mode: LadderMode::Typed,
/// };
/// // Debug shows whether a normaliser is set, not the closure itself.
/// assert_eq!(
///     format!("{plan:?}"),
///     "LadderPlan { max_retries: 1, normalizer: false, mode: Typed }"
/// );
/// ```
#[derive(Clone)]
pub struct LadderPlan {
    /// Re-asks allowed after the first answer (`PGW_STRUCTURED_MAX_RETRIES`; 0 = never).
    pub max_retries: u32,
    /// Applied to the repaired value before validation.
    pub normalizer: Option<Normalizer>,
    /// Json or typed.
    pub mode: LadderMode,
}

impl LadderPlan {
    /// Typed mode.
    ///
    /// ```
    /// use polygateway::structured::{LadderMode, LadderPlan};
    /// // Allow two re-asks after the first answer.
    /// let plan = LadderPlan::typed(2);
    /// assert_eq!(plan.mode, LadderMode::Typed);
    /// assert_eq!(plan.max_retries, 2);
    /// assert!(plan.normalizer.is_none());
    /// ```
    pub fn typed(max_retries: u32) -> Self {
        Self {
            max_retries,
            normalizer: None,
            mode: LadderMode::Typed,
        }
    }

    /// Json mode (repair only).
    ///
    /// ```
    /// use polygateway::structured::{LadderMode, LadderPlan};
    /// let plan = LadderPlan::json();
    /// assert_eq!(plan.mode, LadderMode::Json);
    /// assert_eq!(plan.max_retries, 0);
    /// ```
    pub fn json() -> Self {
        Self {
            max_retries: 0,
            normalizer: None,
            mode: LadderMode::Json,
        }
    }

    /// With a normaliser hook.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use polygateway::structured::LadderPlan;
    /// use serde_json::{json, Value};
    /// // Models often quote numbers: turn `"qty": "3"` into `"qty": 3` before validation.
    /// let plan = LadderPlan::typed(1).with_normalizer(Arc::new(|mut v: Value| {
    ///     let parsed = v["qty"].as_str().and_then(|s| s.parse::<u64>().ok());
    ///     if let Some(n) = parsed {
    ///         v["qty"] = json!(n);
    ///     }
    ///     v
    /// }));
    /// let normalize = plan.normalizer.as_ref().unwrap();
    /// assert_eq!(normalize(json!({"qty": "3"})), json!({"qty": 3}));
    /// ```
    pub fn with_normalizer(mut self, normalizer: Normalizer) -> Self {
        self.normalizer = Some(normalizer);
        self
    }
}

impl fmt::Debug for LadderPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LadderPlan")
            .field("max_retries", &self.max_retries)
            .field("normalizer", &self.normalizer.is_some())
            .field("mode", &self.mode)
            .finish()
    }
}

/// A successful ladder run. The response's token counts and `cost` cover every ask (rejected
/// answers were billed too); its `last_ask_*` fields hold the accepted ask alone.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use polygateway::structured::{run_ladder, LadderPlan};
/// use polygateway::{LlmResponse, Message};
/// use serde_json::{json, Value};
/// let outcome = run_ladder::<Value, _, _>(
///     |_messages, _schema, _is_reask| async {
///         Ok(LlmResponse::new("Sure: {\"ok\": true,}"))
///     },
///     vec![Message::user("Answer in JSON")],
///     LadderPlan::json(),
/// )
/// .await
/// .unwrap();
/// assert_eq!(outcome.asks, 1);
/// assert_eq!(outcome.value, json!({"ok": true}));
/// // The raw text is kept; the repaired JSON is what the cache stores.
/// assert_eq!(outcome.response.content, "Sure: {\"ok\": true,}");
/// assert_eq!(outcome.response.structured_data, Some(json!({"ok": true})));
/// # }
/// ```
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
/// `ask(messages, schema, is_reask)` makes one governed call; in typed mode `schema` is set on
/// every ask (the first included) and the ask must tell the model (see [`SchemaRequest::for_mode`]).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use polygateway::structured::{run_ladder, LadderPlan};
/// use polygateway::{LlmResponse, Message};
///
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct City {
///     name: String,
///     population: u64,
/// }
///
/// // A scripted upstream: a wrong type first, then a valid answer (popped from the end).
/// let mut answers = vec![
///     r#"{"name": "Oslo", "population": 709000}"#,
///     "{'name': 'Oslo', 'population': 'many'}",
/// ];
/// let outcome = run_ladder::<City, _, _>(
///     |messages: Vec<Message>, schema, is_reask| {
///         // Every ask carries the schema, the first one included.
///         assert_eq!(schema.unwrap().name, "City");
///         // A re-ask sends the question, the bad answer and one correction message.
///         assert_eq!(messages.len(), if is_reask { 3 } else { 1 });
///         let answer = answers.pop().unwrap();
///         async move { Ok(LlmResponse::new(answer)) }
///     },
///     vec![Message::user("Largest city of Norway, as JSON")],
///     LadderPlan::typed(2),
/// )
/// .await
/// .unwrap();
/// assert_eq!(outcome.asks, 2);
/// assert_eq!(outcome.value.name, "Oslo");
/// assert_eq!(outcome.value.population, 709_000);
/// # }
/// ```
pub async fn run_ladder<T, F, Fut>(
    ask: F,
    messages: Vec<Message>,
    plan: LadderPlan,
) -> Result<LadderOutcome<T>, GatewayError>
where
    T: DeserializeOwned + JsonSchema,
    F: FnMut(Vec<Message>, Option<Arc<SchemaRequest>>, bool) -> Fut,
    Fut: Future<Output = Result<LlmResponse, GatewayError>>,
{
    let schema = (plan.mode == LadderMode::Typed).then(SchemaRequest::of::<T>);
    let outcome = run_ladder_checked(ask, messages, plan, schema, validate::<T>).await?;
    match outcome.value {
        Some(value) => Ok(LadderOutcome {
            response: outcome.response,
            value,
            asks: outcome.asks,
        }),
        None => Err(GatewayError::NoStructuredValue(Box::new(outcome.response))),
    }
}

/// [`run_ladder`] with the schema and the validation given as values rather than by a Rust type
/// (a schema known only at run time, e.g. from another language's type system). `check` turns a
/// repaired (and normalised) JSON value into the accepted value or the validation errors.
///
/// The ladder reads text answers only: an answer of tool calls or a refusal
/// ([`LlmResponse::is_content_answer`]) ends it at once, returned as is with no value
/// (`structured_data` unset).
pub(crate) async fn run_ladder_checked<T, F, Fut, C>(
    mut ask: F,
    messages: Vec<Message>,
    plan: LadderPlan,
    schema: Option<SchemaRequest>,
    check: C,
) -> Result<LadderOutcome<Option<T>>, GatewayError>
where
    F: FnMut(Vec<Message>, Option<Arc<SchemaRequest>>, bool) -> Fut,
    Fut: Future<Output = Result<LlmResponse, GatewayError>>,
    C: Fn(Value) -> Result<T, Vec<String>>,
{
    let typed = plan.mode == LadderMode::Typed;
    let schema = schema.filter(|_| typed).map(Arc::new);
    let max_asks = if typed {
        plan.max_retries.saturating_add(1)
    } else {
        1
    };
    let mut conversation = messages.clone();
    let mut asks = 0u32;
    // Rejected answers were billed too: the accepted one reports the whole call.
    let mut earlier = EarlierAsks::default();
    loop {
        let is_reask = asks > 0;
        let mut response = ask(conversation, schema.clone(), is_reask).await?;
        asks += 1;
        if !response.is_content_answer() {
            earlier.charge_to(&mut response);
            return Ok(LadderOutcome {
                response,
                value: None,
                asks,
            });
        }
        match accept(&response.content, plan.normalizer.as_ref(), &check) {
            Ok((json, value)) => {
                response.structured_data = Some(json);
                earlier.charge_to(&mut response);
                return Ok(LadderOutcome {
                    response,
                    value: Some(value),
                    asks,
                });
            }
            Err(rejection) if asks >= max_asks => {
                return Err(exhausted(response.content, rejection, asks));
            }
            Err(rejection) => {
                earlier.add(&response);
                conversation = messages.clone();
                conversation.push(Message::assistant(response.content));
                conversation.push(Message::user(correction(&rejection.errors())));
            }
        }
    }
}

/// Rebuilds the typed value of a cached response from its `structured_data`, without network.
///
/// ```
/// use polygateway::structured::rehydrate;
/// use polygateway::{GatewayError, LlmResponse};
///
/// #[derive(serde::Deserialize)]
/// struct Count {
///     n: u32,
/// }
///
/// let mut cached = LlmResponse::new(r#"{"n": 3}"#);
/// // Without structured_data there is nothing to rebuild from.
/// assert!(matches!(rehydrate::<Count>(&cached), Err(GatewayError::ResultInvalid { .. })));
/// cached.structured_data = Some(serde_json::json!({"n": 3}));
/// assert_eq!(rehydrate::<Count>(&cached).unwrap().n, 3);
/// ```
pub fn rehydrate<T: DeserializeOwned>(response: &LlmResponse) -> Result<T, GatewayError> {
    rehydrate_checked(response, validate::<T>)
}

/// [`rehydrate`] with the validation given as a value (see [`run_ladder_checked`]).
pub(crate) fn rehydrate_checked<T>(
    response: &LlmResponse,
    check: impl Fn(Value) -> Result<T, Vec<String>>,
) -> Result<T, GatewayError> {
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
    check(data.clone()).map_err(|errors| GatewayError::ResultInvalid {
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
fn accept<T>(
    content: &str,
    normalizer: Option<&Normalizer>,
    check: impl Fn(Value) -> Result<T, Vec<String>>,
) -> Result<(Value, T), Rejection> {
    let repaired = repair_json(content).map_err(|e| Rejection {
        repair_error: Some(clip(&e.to_string())),
        validation_errors: Vec::new(),
    })?;
    let json = match normalizer {
        Some(n) => n(repaired),
        None => repaired,
    };
    match check(json.clone()) {
        Ok(value) => Ok((json, value)),
        Err(validation_errors) => Err(Rejection {
            repair_error: None,
            validation_errors,
        }),
    }
}

/// The user message of a re-ask (the schema travels with the ask itself).
fn correction(errors: &[String]) -> String {
    let mut text = String::from(
        "Your previous answer could not be used: it is not valid JSON of the required shape.\nErrors:\n",
    );
    for e in errors.iter().take(ERRORS_IN_CORRECTION) {
        text.push_str("- ");
        text.push_str(&clip(e));
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
