//! What a chat call returns.

use serde::{Deserialize, Serialize};

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
///     reasoning_tokens: None,
///     source: UsageSource::Measured,
/// };
/// let uncached = usage.prompt_tokens - usage.cached_prompt_tokens.unwrap_or(0);
/// assert_eq!(uncached, 176);
/// assert_eq!(Usage::default().source, UsageSource::Unavailable);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Usage {
    /// Prompt tokens.
    pub prompt_tokens: u64,
    /// Completion tokens.
    pub completion_tokens: u64,
    /// Provider prompt-cache hits; `None` = not reported, `Some(0)` = reported zero.
    pub cached_prompt_tokens: Option<u64>,
    /// Reasoning tokens, when reported.
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
}

/// One chat answer (SPEC §2.1). Immutable once built; serde round-trips (the cache stores it).
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
    /// Reasoning text (`reasoning_content` or `<think>` blocks), empty when none.
    pub thinking: String,
    /// The configured model of the source that answered.
    pub model: String,
    /// Provider name (registry key).
    pub provider: String,
    /// Source name, `{provider}_{n}`.
    pub source_name: String,
    /// Prompt tokens (0 when unavailable).
    pub prompt_tokens: u64,
    /// Completion tokens (0 when unavailable).
    pub completion_tokens: u64,
    /// Wall time of the attempt that produced it (0 on a cache hit).
    pub latency_ms: f64,
    /// Time to first token (content or reasoning) when streaming.
    pub ttft_ms: Option<f64>,
    /// Largest gap between tokens when streaming.
    pub max_inter_token_ms: Option<f64>,
    /// `true` when served from the response cache.
    pub cache_hit: bool,
    /// UUID of the attempt (or of the cache-hit record).
    pub call_id: String,
    /// Where the token counts came from.
    pub usage_source: UsageSource,
    /// Parsed structured output, when requested.
    pub structured_data: Option<serde_json::Value>,
    /// Provider prompt-cache hits.
    pub cached_prompt_tokens: Option<u64>,
    /// The `model` field the API reported.
    pub model_reported: Option<String>,
    /// Reasoning tokens, when reported.
    pub reasoning_tokens: Option<u64>,
    /// Cost in the pricing table's currency, when a pricing table is configured.
    pub cost: Option<f64>,
    /// The answer was salvaged from a stream that ended without `[DONE]`
    /// (`MISSING_DONE=salvage`). Such an answer is returned but never cached.
    #[serde(default)]
    pub truncated: bool,
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
            reasoning_tokens: self.reasoning_tokens,
            source: self.usage_source,
        }
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
            model: String::new(),
            provider: String::new(),
            source_name: String::new(),
            prompt_tokens: 0,
            completion_tokens: 0,
            latency_ms: 0.0,
            ttft_ms: None,
            max_inter_token_ms: None,
            cache_hit: false,
            call_id: String::new(),
            usage_source: UsageSource::Unavailable,
            structured_data: None,
            cached_prompt_tokens: None,
            model_reported: None,
            reasoning_tokens: None,
            cost: None,
            truncated: false,
            rate_limit: None,
        }
    }

    /// Whether this answer may be stored in the response cache: it has content and came from a
    /// complete response (SPEC §9.1: empty completions and truncated streams are never stored).
    ///
    /// ```
    /// use polygateway::LlmResponse;
    /// assert!(LlmResponse::new("Paris").is_cacheable());
    /// assert!(!LlmResponse::new("  \n").is_cacheable()); // blank
    /// let mut salvaged = LlmResponse::new("Par");
    /// salvaged.truncated = true; // stream ended without [DONE]
    /// assert!(!salvaged.is_cacheable());
    /// ```
    pub fn is_cacheable(&self) -> bool {
        !self.content.trim().is_empty() && !self.truncated
    }
}
