//! What a chat call returns.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::tool::{FunctionCall, ToolCall};

/// Where token counts came from.
///
/// ```
/// use polygateway::{LlmResponse, UsageSource};
/// // A fresh response claims nothing: its zero counts are "not reported", not "zero tokens".
/// assert_eq!(LlmResponse::new("hi").usage_source, UsageSource::Unavailable);
/// assert_eq!(serde_json::to_value(UsageSource::Measured).unwrap(), "measured");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum UsageSource {
    /// Reported by the upstream.
    Measured,
    /// Salvaged from an incomplete stream that did carry a usage frame.
    Estimated,
    /// Not reported: counts are 0 and must not be read as real.
    #[default]
    Unavailable,
}

impl UsageSource {
    /// The telemetry value.
    ///
    /// ```
    /// use polygateway::UsageSource;
    /// assert_eq!(UsageSource::Estimated.as_str(), "estimated");
    /// // The same spelling as the serde form.
    /// let json = serde_json::to_value(UsageSource::Unavailable).unwrap();
    /// assert_eq!(json, UsageSource::Unavailable.as_str());
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            UsageSource::Measured => "measured",
            UsageSource::Estimated => "estimated",
            UsageSource::Unavailable => "unavailable",
        }
    }
}

/// Token usage of one answer.
///
/// ```
/// use polygateway::{Usage, UsageSource};
/// let usage = Usage {
///     prompt_tokens: 1_200,
///     completion_tokens: 300,
///     cached_prompt_tokens: Some(1_024),
///     cache_write_5m_tokens: Some(100),
///     cache_write_1h_tokens: None,
///     reasoning_tokens: None,
///     source: UsageSource::Measured,
/// };
/// assert_eq!(usage.cache_write_tokens(), Some(100));
/// assert_eq!(Usage::default().source, UsageSource::Unavailable);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Usage {
    /// Prompt tokens, all of them: those read from the provider's prompt cache and those
    /// written to it included (OpenAI's meaning; Anthropic's `input_tokens` is only the rest).
    pub prompt_tokens: u64,
    /// Completion tokens, reasoning included (it is billed as output).
    pub completion_tokens: u64,
    /// Prompt tokens read from the provider's prompt cache (cache hits); `None` = not
    /// reported, `Some(0)` = reported zero.
    pub cached_prompt_tokens: Option<u64>,
    /// Prompt tokens written to the provider's prompt cache with a 5-minute lifetime
    /// (Anthropic's `cache_creation.ephemeral_5m_input_tokens`; billed above plain input).
    #[serde(default)]
    pub cache_write_5m_tokens: Option<u64>,
    /// Prompt tokens written to the provider's prompt cache with a 1-hour lifetime.
    #[serde(default)]
    pub cache_write_1h_tokens: Option<u64>,
    /// Reasoning tokens, when reported (a part of `completion_tokens`).
    pub reasoning_tokens: Option<u64>,
    /// Where the numbers came from.
    pub source: UsageSource,
}

impl Usage {
    /// Prompt + completion.
    ///
    /// ```
    /// use polygateway::Usage;
    /// let usage = Usage { prompt_tokens: 1_200, completion_tokens: 300, ..Usage::default() };
    /// assert_eq!(usage.total(), 1_500);
    /// ```
    pub fn total(&self) -> u64 {
        self.prompt_tokens + self.completion_tokens
    }

    /// Prompt tokens written to the prompt cache, either lifetime; `None` when neither was
    /// reported.
    ///
    /// ```
    /// use polygateway::Usage;
    /// let usage = Usage { cache_write_1h_tokens: Some(2_048), ..Usage::default() };
    /// assert_eq!(usage.cache_write_tokens(), Some(2_048));
    /// assert_eq!(Usage::default().cache_write_tokens(), None);
    /// ```
    pub fn cache_write_tokens(&self) -> Option<u64> {
        add_optional(self.cache_write_5m_tokens, self.cache_write_1h_tokens)
    }
}

/// The sum of two counts that may be unreported: unreported only when both are.
fn add_optional(x: Option<u64>, y: Option<u64>) -> Option<u64> {
    match (x, y) {
        (None, None) => None,
        (x, y) => Some(x.unwrap_or(0) + y.unwrap_or(0)),
    }
}

/// One chat answer (docs/behaviour.md §2.1). Immutable once built; serde round-trips (the cache stores it).
///
/// ```
/// use polygateway::LlmResponse;
/// let mut answer = LlmResponse::new("Paris");
/// answer.model = "qwen-plus".into();
/// answer.prompt_tokens = 12;
/// // What the cache stores and reads back is the same value.
/// let stored = serde_json::to_string(&answer).unwrap();
/// let restored: LlmResponse = serde_json::from_str(&stored).unwrap();
/// assert_eq!(restored, answer);
/// assert!(!restored.cache_hit && !restored.truncated);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct LlmResponse {
    /// The answer text (reasoning stripped out).
    pub content: String,
    /// Reasoning text (`reasoning_content`, `<think>` blocks, or the text of the thinking
    /// blocks), empty when none.
    pub thinking: String,
    /// The thinking as blocks with their signatures, when the dialect has them (Anthropic,
    /// Gemini): what a tool loop must send back unchanged ([`LlmResponse::to_message`]).
    #[serde(default)]
    pub thinking_blocks: Vec<super::ThinkingBlock>,
    /// The configured model of the source that answered.
    pub model: String,
    /// Provider name (registry key).
    pub provider: String,
    /// Source name, `{provider}_{n}`.
    pub source_name: String,
    /// Prompt tokens of the whole call: every billed ask, structured-output re-asks included
    /// (0 when unavailable). The final ask alone: [`LlmResponse::last_ask_usage`].
    pub prompt_tokens: u64,
    /// Completion tokens of the whole call (0 when unavailable).
    pub completion_tokens: u64,
    /// Wall time of the attempt that produced it (0 on a cache hit).
    pub latency_ms: f64,
    /// Time the call waited for capacity before its attempts were sent — a pacer slot, a
    /// quota gate, sources cooling down, a 429 pushback — over every ask (0 on a cache hit).
    /// Not part of `latency_ms`, which is the final attempt's alone; the back-off before
    /// retrying a transient failure is not counted.
    #[serde(default)]
    pub capacity_wait_ms: f64,
    /// Time to first token (content or reasoning) when streaming.
    pub ttft_ms: Option<f64>,
    /// Largest gap between tokens when streaming.
    pub max_inter_token_ms: Option<f64>,
    /// `true` when served from the response cache.
    pub cache_hit: bool,
    /// UUID of the attempt (or of the cache-hit record).
    pub call_id: String,
    /// Where the token counts came from (over several asks: the least certain of them).
    pub usage_source: UsageSource,
    /// Parsed structured output, when requested.
    pub structured_data: Option<serde_json::Value>,
    /// Provider prompt-cache hits (prompt tokens read from the cache) over the whole call.
    pub cached_prompt_tokens: Option<u64>,
    /// Prompt tokens written to the provider's prompt cache with a 5-minute lifetime, over the
    /// whole call (Anthropic; `None` = not reported).
    #[serde(default)]
    pub cache_write_5m_tokens: Option<u64>,
    /// Prompt tokens written to the provider's prompt cache with a 1-hour lifetime, over the
    /// whole call.
    #[serde(default)]
    pub cache_write_1h_tokens: Option<u64>,
    /// The `model` field the API reported.
    pub model_reported: Option<String>,
    /// Reasoning tokens over the whole call, when reported.
    pub reasoning_tokens: Option<u64>,
    /// Cost of the whole call in the pricing table's currency: every billed ask, re-asks
    /// included, so summing answers matches summing telemetry rows (`SUM(cost) GROUP BY
    /// parent_call_id`). `None` without a pricing table or when any ask's cost is unknown
    /// (unknown is not free); `Some(0.0)` for a cache hit. The final ask alone:
    /// [`LlmResponse::last_ask_cost`].
    pub cost: Option<f64>,
    /// The answer was salvaged from a stream that ended without `[DONE]`
    /// (`MISSING_DONE=salvage`). Such an answer is returned but never cached.
    #[serde(default)]
    pub truncated: bool,
    /// Governed asks behind this answer: 1, more after structured-output re-asks, 0 for a
    /// cache hit. The token counts and `cost` cover all of them.
    #[serde(default)]
    pub asks: u32,
    /// Token usage of the final ask alone (the one that produced this answer).
    #[serde(default)]
    pub last_ask_usage: Usage,
    /// Cost of the final ask alone.
    #[serde(default)]
    pub last_ask_cost: Option<f64>,
    /// The caller's [`CallOptions::parent_call_id`](crate::CallOptions::parent_call_id) (the
    /// chain link the caller gave), as telemetry's `parent_call_id`; `None` when none was given.
    #[serde(default)]
    pub parent_call_id: Option<String>,
    /// The call's id in telemetry: every row of this call — each attempt, each re-ask, a cache
    /// hit — carries it as `call_group_id` (a fresh id per call). `None` outside a gateway.
    #[serde(default)]
    pub call_group_id: Option<String>,
    /// The tool calls of the answer, in the order of their `index`; arguments as the exact
    /// strings the model produced.
    #[serde(default)]
    pub tool_calls: Vec<ToolCall>,
    /// The legacy single `function_call` of the answer.
    #[serde(default)]
    pub function_call: Option<FunctionCall>,
    /// Why the model stopped, as the upstream said it (`stop`, `length`, `tool_calls`,
    /// `content_filter`, …); `None` when the upstream did not say.
    #[serde(default)]
    pub finish_reason: Option<String>,
    /// The model's refusal, when it refused.
    #[serde(default)]
    pub refusal: Option<String>,
    /// The `logprobs` object of the answer, when asked for (`logprobs: true`); streamed
    /// pieces are joined into one object.
    #[serde(default)]
    pub logprobs: Option<Value>,
    /// The upstream's `system_fingerprint`.
    #[serde(default)]
    pub system_fingerprint: Option<String>,
    /// The choices after the first when the request asked for `n > 1` (the first is this
    /// response's own fields); empty otherwise.
    #[serde(default)]
    pub other_choices: Vec<Choice>,
    /// The source whose stream was cut after content when this answer's source continued it
    /// (docs/behaviour.md §5.10): `content` is the cut text and the continuation, spliced, and
    /// the usage both attempts'. `None` for an answer from one attempt.
    #[serde(default)]
    pub continued_from: Option<String>,
    /// The upstream's rate-limit headers, for the pacer (never cached or serialised).
    #[serde(skip)]
    pub(crate) rate_limit: Option<polygateway_actors::policy::pacer::RateLimitHint>,
}

impl LlmResponse {
    /// The usage block of this response.
    ///
    /// ```
    /// use polygateway::{LlmResponse, UsageSource};
    /// let mut answer = LlmResponse::new("Paris");
    /// answer.prompt_tokens = 12;
    /// answer.completion_tokens = 3;
    /// answer.usage_source = UsageSource::Measured;
    /// let usage = answer.usage();
    /// assert_eq!((usage.total(), usage.source), (15, UsageSource::Measured));
    /// ```
    pub fn usage(&self) -> Usage {
        Usage {
            prompt_tokens: self.prompt_tokens,
            completion_tokens: self.completion_tokens,
            cached_prompt_tokens: self.cached_prompt_tokens,
            cache_write_5m_tokens: self.cache_write_5m_tokens,
            cache_write_1h_tokens: self.cache_write_1h_tokens,
            reasoning_tokens: self.reasoning_tokens,
            source: self.usage_source,
        }
    }

    /// Set the token counts and their source from `usage` (what [`LlmResponse::usage`] reads).
    pub(crate) fn set_usage(&mut self, usage: Usage) {
        self.prompt_tokens = usage.prompt_tokens;
        self.completion_tokens = usage.completion_tokens;
        self.cached_prompt_tokens = usage.cached_prompt_tokens;
        self.cache_write_5m_tokens = usage.cache_write_5m_tokens;
        self.cache_write_1h_tokens = usage.cache_write_1h_tokens;
        self.reasoning_tokens = usage.reasoning_tokens;
        self.usage_source = usage.source;
    }

    /// The assistant turn this answer makes in a conversation: its text (or `null` when it only
    /// called tools), its tool calls, its refusal and its thinking blocks with their signatures.
    /// A tool loop appends it before the tool results, and the same loop runs on every dialect.
    ///
    /// ```
    /// use polygateway::{LlmResponse, Message, Role, ThinkingBlock, ToolCall};
    /// let mut answer = LlmResponse::new("");
    /// answer.tool_calls.push(ToolCall::function("toolu_1", "weather", r#"{"city":"Paris"}"#));
    /// answer.thinking_blocks.push(ThinkingBlock::Thinking {
    ///     thinking: "Look it up.".into(),
    ///     signature: Some("sig".into()),
    /// });
    /// let turn = answer.to_message();
    /// assert_eq!((turn.role, turn.content.clone()), (Role::Assistant, None));
    /// assert_eq!(turn.tool_calls.as_ref().unwrap()[0].id, "toolu_1");
    /// assert_eq!(turn.thinking_blocks, answer.thinking_blocks);
    /// let conversation = vec![Message::user("Weather in Paris?"), turn, Message::tool_result("toolu_1", "18 °C")];
    /// assert_eq!(conversation.len(), 3);
    /// ```
    pub fn to_message(&self) -> super::Message {
        let mut turn = super::Message::assistant(self.content.clone());
        if self.content.is_empty() && (!self.tool_calls.is_empty() || self.function_call.is_some())
        {
            turn.content = None;
        }
        if !self.tool_calls.is_empty() {
            turn.tool_calls = Some(self.tool_calls.clone());
        }
        turn.function_call = self.function_call.clone();
        turn.refusal = self.refusal.clone();
        turn.thinking_blocks = self.thinking_blocks.clone();
        turn
    }

    /// A response with the given content and everything else empty; the transport and the
    /// runtime fill the rest. Useful to build expected values in tests.
    ///
    /// ```
    /// use polygateway::{LlmResponse, UsageSource};
    /// let answer = LlmResponse::new("Paris");
    /// assert_eq!(answer.content, "Paris");
    /// assert!(answer.thinking.is_empty() && answer.call_id.is_empty());
    /// assert_eq!(answer.usage().total(), 0);
    /// assert_eq!(answer.usage_source, UsageSource::Unavailable);
    /// ```
    pub fn new(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            thinking: String::new(),
            thinking_blocks: Vec::new(),
            model: String::new(),
            provider: String::new(),
            source_name: String::new(),
            prompt_tokens: 0,
            completion_tokens: 0,
            latency_ms: 0.0,
            capacity_wait_ms: 0.0,
            ttft_ms: None,
            max_inter_token_ms: None,
            cache_hit: false,
            call_id: String::new(),
            usage_source: UsageSource::Unavailable,
            structured_data: None,
            cached_prompt_tokens: None,
            cache_write_5m_tokens: None,
            cache_write_1h_tokens: None,
            model_reported: None,
            reasoning_tokens: None,
            cost: None,
            truncated: false,
            asks: 0,
            last_ask_usage: Usage::default(),
            last_ask_cost: None,
            parent_call_id: None,
            call_group_id: None,
            tool_calls: Vec::new(),
            function_call: None,
            finish_reason: None,
            refusal: None,
            logprobs: None,
            system_fingerprint: None,
            other_choices: Vec::new(),
            continued_from: None,
            rate_limit: None,
        }
    }

    /// Whether the answer says anything: content, a tool call or a refusal
    /// (docs/behaviour.md §7.1). An answer without any of them is an empty completion.
    pub(crate) fn has_answer(&self) -> bool {
        !self.content.trim().is_empty()
            || !self.tool_calls.is_empty()
            || self.function_call.is_some()
            || self.refusal.as_ref().is_some_and(|r| !r.is_empty())
    }

    /// Whether a structured call's ladder reads this answer: it is text for the ladder to
    /// repair and validate, not tool calls (or a legacy function call) and not a refusal without
    /// content. Those are valid answers of another kind, returned as they are
    /// (docs/behaviour.md §9.2).
    pub(crate) fn is_content_answer(&self) -> bool {
        let refused = self.refusal.as_ref().is_some_and(|r| !r.is_empty());
        self.tool_calls.is_empty()
            && self.function_call.is_none()
            && !(refused && self.content.trim().is_empty())
    }

    /// Mark this response as one ask: the whole-call figures are this ask's.
    pub(crate) fn as_single_ask(&mut self) {
        self.asks = 1;
        self.last_ask_usage = self.usage();
        self.last_ask_cost = self.cost;
    }

    /// Whether this answer may be stored in the response cache: it has an answer (content,
    /// tool calls or a refusal, [`LlmResponse::has_answer`]) and came from a complete response
    /// (docs/behaviour.md §9.1: empty completions and truncated streams are never stored).
    pub(crate) fn is_cacheable(&self) -> bool {
        self.has_answer() && !self.truncated
    }
}

/// One choice of an answer to a request with `n > 1`, beyond the first.
///
/// ```
/// use polygateway::Choice;
/// let second = Choice { index: 1, content: "Lyon".into(), ..Choice::default() };
/// let json = serde_json::to_value(&second).unwrap();
/// assert_eq!((json["index"].as_u64(), json["content"].as_str()), (Some(1), Some("Lyon")));
/// ```
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Choice {
    /// The choice's `index`.
    pub index: u32,
    /// Its text (reasoning stripped out).
    #[serde(default)]
    pub content: String,
    /// Its reasoning text.
    #[serde(default)]
    pub thinking: String,
    /// Its tool calls.
    #[serde(default)]
    pub tool_calls: Vec<ToolCall>,
    /// Its legacy function call.
    #[serde(default)]
    pub function_call: Option<FunctionCall>,
    /// Its refusal.
    #[serde(default)]
    pub refusal: Option<String>,
    /// Its finish reason.
    #[serde(default)]
    pub finish_reason: Option<String>,
    /// Its logprobs.
    #[serde(default)]
    pub logprobs: Option<Value>,
}

/// What the asks before the final one spent (structured-output re-asks), added to the final
/// answer so it reports the whole call.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct EarlierAsks {
    usage: Option<Usage>,
    cost: Option<f64>,
    cost_unknown: bool,
    asks: u32,
    capacity_wait_ms: f64,
}

impl EarlierAsks {
    /// Count one earlier answer (all it spent, its own earlier asks included).
    pub(crate) fn add(&mut self, answer: &LlmResponse) {
        let usage = answer.usage();
        self.usage = Some(match self.usage {
            Some(sum) => add_usage(sum, usage),
            None => usage,
        });
        match answer.cost {
            Some(c) => self.cost = Some(self.cost.unwrap_or(0.0) + c),
            None => self.cost_unknown = true,
        }
        self.asks += answer.asks.max(1);
        self.capacity_wait_ms += answer.capacity_wait_ms;
    }

    /// Add what the earlier asks spent to `last` (its `last_ask_*` figures stay its own).
    pub(crate) fn charge_to(&self, last: &mut LlmResponse) {
        let Some(earlier) = self.usage else {
            return;
        };
        last.set_usage(add_usage(last.usage(), earlier));
        // Unknown is not free: one unpriced ask makes the total unknown.
        last.cost = match (last.cost, self.cost_unknown) {
            (Some(c), false) => Some(c + self.cost.unwrap_or(0.0)),
            _ => None,
        };
        last.asks = last.asks.max(1) + self.asks;
        last.capacity_wait_ms += self.capacity_wait_ms;
    }
}

/// The sum of two usages; the source is the less certain of the two.
fn add_usage(a: Usage, b: Usage) -> Usage {
    let add = add_optional;
    let certainty = |s: UsageSource| match s {
        UsageSource::Measured => 2,
        UsageSource::Estimated => 1,
        UsageSource::Unavailable => 0,
    };
    Usage {
        prompt_tokens: a.prompt_tokens + b.prompt_tokens,
        completion_tokens: a.completion_tokens + b.completion_tokens,
        cached_prompt_tokens: add(a.cached_prompt_tokens, b.cached_prompt_tokens),
        cache_write_5m_tokens: add(a.cache_write_5m_tokens, b.cache_write_5m_tokens),
        cache_write_1h_tokens: add(a.cache_write_1h_tokens, b.cache_write_1h_tokens),
        reasoning_tokens: add(a.reasoning_tokens, b.reasoning_tokens),
        source: if certainty(a.source) <= certainty(b.source) {
            a.source
        } else {
            b.source
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(prompt: u64, cost: Option<f64>, source: UsageSource) -> LlmResponse {
        let mut r = LlmResponse::new("{}");
        (r.prompt_tokens, r.completion_tokens, r.cost) = (prompt, 10, cost);
        r.usage_source = source;
        r.reasoning_tokens = Some(1);
        r.as_single_ask();
        r
    }

    #[test]
    fn earlier_asks_are_added_and_the_last_ask_kept() {
        let mut earlier = EarlierAsks::default();
        earlier.add(&ask(100, Some(0.002), UsageSource::Measured));
        earlier.add(&ask(120, Some(0.001), UsageSource::Estimated));
        let mut last = ask(140, Some(0.003), UsageSource::Measured);
        earlier.charge_to(&mut last);
        assert_eq!(last.asks, 3);
        assert_eq!((last.prompt_tokens, last.completion_tokens), (360, 30));
        assert_eq!(last.reasoning_tokens, Some(3));
        assert_eq!(last.cached_prompt_tokens, None);
        assert_eq!(last.usage_source, UsageSource::Estimated);
        assert!((last.cost.unwrap() - 0.006).abs() < 1e-12);
        assert_eq!(last.last_ask_usage.prompt_tokens, 140);
        assert_eq!(last.last_ask_cost, Some(0.003));
    }

    #[test]
    fn an_unpriced_earlier_ask_makes_the_cost_unknown() {
        let mut earlier = EarlierAsks::default();
        earlier.add(&ask(100, None, UsageSource::Measured));
        let mut last = ask(140, Some(0.003), UsageSource::Measured);
        earlier.charge_to(&mut last);
        assert_eq!(last.cost, None);
        assert_eq!(last.last_ask_cost, Some(0.003));
    }

    #[test]
    fn no_earlier_ask_changes_nothing() {
        let mut last = ask(140, Some(0.003), UsageSource::Measured);
        let before = last.clone();
        EarlierAsks::default().charge_to(&mut last);
        assert_eq!(last, before);
    }
}

#[cfg(test)]
mod examples {
    //! Usage cases of crate-private items (they were doc examples while the items were public).

    #[test]
    fn llm_response_has_answer_example() {
        use crate::{LlmResponse, ToolCall};
        assert!(!LlmResponse::new(" ").has_answer());
        let mut calls = LlmResponse::new("");
        calls
            .tool_calls
            .push(ToolCall::function("call_1", "now", "{}"));
        assert!(calls.has_answer());
    }

    #[test]
    fn llm_response_is_cacheable_example() {
        use crate::{LlmResponse, ToolCall};
        assert!(LlmResponse::new("Paris").is_cacheable());
        assert!(!LlmResponse::new("  \n").is_cacheable()); // blank
        let mut salvaged = LlmResponse::new("Par");
        salvaged.truncated = true; // stream ended without [DONE]
        assert!(!salvaged.is_cacheable());
        let mut calls = LlmResponse::new("");
        calls
            .tool_calls
            .push(ToolCall::function("call_1", "now", "{}"));
        assert!(calls.is_cacheable());
    }
}
