//! The fault model: what the mock does with a request ([`Behaviour`]) and how a script or a
//! probabilistic mix resolves to one behaviour per request ([`resolve`]).

use std::time::Duration;

use rand::rngs::StdRng;
use rand::Rng;
use serde_json::Value;

use super::fixture::MOCK_CONTENT;
/// What the mock does with a request.
///
/// Token usage: `prompt_tokens` = [`MOCK_PROMPT_TOKENS`](super::MOCK_PROMPT_TOKENS), `completion_tokens` = number of
/// content + reasoning deltas. Streaming sends the usage chunk only when the request asked for
/// it (`stream_options.include_usage`), like OpenAI. The reported `model` is the requested model
/// with `-mock` appended (so a test can tell it came from the wire).
///
/// A healthy answer to a request ending with a prefill — an assistant message with
/// `"prefix": true`, as DeepSeek's chat prefix completion and Mistral take it — is the
/// continuation only: the rest of the answer's text after the prefix (the whole text when the
/// prefix does not begin it), its words added to `prompt_tokens`.
///
/// A script makes a failure deterministic: here the first attempt gets a 503 and the gateway's
/// retry gets the healthy answer.
///
/// ```
/// use polygateway_testkit::{mock_settings, Behaviour, MockUpstream};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let script = vec![Behaviour::ServerError(503), Behaviour::healthy()];
/// let mock = MockUpstream::start(Behaviour::Scripted(script)).await;
/// let settings = mock_settings(&[("LLM", mock.base_url().as_str())], &[]);
/// let gw = polygateway::Gateway::from_settings(settings, "LLM").await.unwrap();
/// let resp = gw.chat(vec![polygateway::Message::user("hi")]).await.unwrap();
/// assert_eq!(resp.model_reported.as_deref(), Some("test-model-mock"));
/// let counts = mock.counts();
/// assert_eq!((counts.of("server_error"), counts.of("healthy")), (1, 1));
/// # gw.shutdown().await;
/// # }
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Behaviour {
    /// A normal answer: the first delta after `ttft`, then one every `inter_token`.
    Healthy {
        /// Delay before the first content delta (a role-only chunk is sent at once).
        ttft: Duration,
        /// Delay between content deltas.
        inter_token: Duration,
        /// Number of content deltas (the content is split into this many pieces).
        chunks: usize,
        /// The answer.
        content: String,
    },
    /// Waits `delay` before sending headers, then answers like [`Behaviour::healthy`].
    Slow {
        /// Delay before the response starts.
        delay: Duration,
    },
    /// Accepts the request and never answers.
    BlackHole,
    /// 429 pushback, with `Retry-After: <s>` when given.
    RateLimited {
        /// Seconds for the `Retry-After` header.
        retry_after_s: Option<u64>,
    },
    /// 429 with an `insufficient_quota` error body.
    InsufficientQuota,
    /// 401.
    Unauthorized,
    /// 403.
    Forbidden,
    /// 400.
    BadRequest,
    /// The given 5xx status (500, 502, 503, …).
    ServerError(u16),
    /// Content deltas (and the usage chunk when `with_usage`), then EOF without `[DONE]`.
    /// Non-streaming: a body cut in half.
    TruncatedStream {
        /// Send the usage chunk before ending.
        with_usage: bool,
    },
    /// A role-only chunk, then EOF: no content, no `[DONE]`. Non-streaming: an empty body.
    EarlyEof,
    /// The way proxies and load balancers end streams: the role chunk, then (with `content`) the
    /// content deltas and (with `with_usage`) the usage chunk, then the socket is dropped without
    /// the chunked encoding's final chunk — the client sees a body error, not a clean EOF.
    /// Non-streaming: half of the JSON body, then the same abrupt close.
    AbruptClose {
        /// Send the content deltas before closing (`false`: only the role chunk).
        content: bool,
        /// Send the usage chunk before closing (when the request asked for usage).
        with_usage: bool,
    },
    /// One valid delta, a frame of broken JSON, `[DONE]`. Non-streaming: a broken body.
    MalformedFrame,
    /// A complete stream (finish, usage, `[DONE]`) without any content.
    EmptyCompletion,
    /// `reasoning_content` deltas, then the default content.
    Reasoning,
    /// Like [`Behaviour::Reasoning`], every delta paced: the first after `ttft`, then one every
    /// `inter_token` (reasoning and content alike). Counted as `reasoning`.
    ReasoningPaced {
        /// Delay before the first reasoning delta.
        ttft: Duration,
        /// Delay between deltas.
        inter_token: Duration,
    },
    /// `<think>…</think>` inside `content`, tags split across deltas, then the default content.
    ThinkTags,
    /// Healthy, with `prompt_tokens_details.cached_tokens` and
    /// `completion_tokens_details.reasoning_tokens` in the usage.
    UsageDetails,
    /// Healthy but never sends usage (streaming or not, chat or embeddings).
    NoUsage,
    /// One content delta, then an in-band `{"error": …}` frame. Non-streaming: a 200 whose body is
    /// an error object.
    InBandError,
    /// Embeddings: one vector fewer than inputs. Chat: healthy.
    EmbeddingCountMismatch,
    /// Each request fails with `failure` with probability `failure_rate` (seeded), else does
    /// `healthy` — e.g. a JSON answer for a structured-output job under faults:
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use polygateway_testkit::{mock_settings, Behaviour, MockUpstream};
    /// let mock = MockUpstream::start(Behaviour::Mix {
    ///     failure_rate: 0.3,
    ///     failure: Box::new(Behaviour::ServerError(503)),
    ///     healthy: Box::new(Behaviour::healthy_with(r#"{"ok": true}"#)),
    ///     seed: 7,
    /// })
    /// .await;
    /// let settings = mock_settings(&[("LLM", mock.base_url().as_str())], &[("LLM__RETRY__MAX_ATTEMPTS", "20")]);
    /// let gw = polygateway::Gateway::from_settings(settings, "LLM").await.unwrap();
    /// for _ in 0..4 {
    ///     let answer = gw.chat(vec![polygateway::Message::user("status?")]).await.unwrap();
    ///     assert_eq!(answer.content, r#"{"ok": true}"#);
    /// }
    /// assert!(mock.counts().of("server_error") > 0);
    /// # gw.shutdown().await;
    /// # }
    /// ```
    Mix {
        /// Probability in `[0, 1]`.
        failure_rate: f64,
        /// What a failing request does.
        failure: Box<Behaviour>,
        /// What a succeeding request does (usually [`Behaviour::healthy`] or
        /// [`Behaviour::healthy_with`]).
        healthy: Box<Behaviour>,
        /// RNG seed (the draw sequence restarts on [`MockUpstream::set_behaviour`](super::MockUpstream::set_behaviour)).
        seed: u64,
    },
    /// One behaviour per request in order; the last one repeats.
    Scripted(Vec<Behaviour>),
    /// A healthy answer whose content is the next string per request; the last one repeats.
    ScriptedContent(Vec<String>),
    /// Tool calls instead of text, `(name, arguments)` each, ids `call_0`, `call_1`, …:
    /// streamed the way OpenAI streams them (the id and name in a call's first piece, the
    /// arguments in three more), `content: null` and `finish_reason: "tool_calls"`.
    ToolCalls(Vec<(String, String)>),
    /// The default content cut in half with `finish_reason: "length"` (max tokens reached).
    Length,
    /// A stream cut mid-answer: `answer` (e.g. [`Behaviour::healthy_with`], or
    /// [`Behaviour::ToolCalls`]) streamed up to its first `deltas` content deltas (everything
    /// before them included: reasoning, tool-call pieces), then the socket dropped the way
    /// [`Behaviour::AbruptClose`] drops it. Non-streaming: like `AbruptClose`.
    ///
    /// ```
    /// use polygateway_testkit::Behaviour;
    /// let cut = Behaviour::CutAfter { deltas: 2, answer: Box::new(Behaviour::healthy()) };
    /// assert_eq!(cut.name(), "cut_after");
    /// ```
    CutAfter {
        /// Content deltas sent before the cut.
        deltas: usize,
        /// The answer being cut.
        answer: Box<Behaviour>,
    },
    /// Exactly these chunks (each sent as one `data:` frame, then `[DONE]`) when streaming,
    /// exactly this body when not: provider shapes the mock does not otherwise produce.
    Raw {
        /// The stream's chunks.
        chunks: Vec<Value>,
        /// The non-streaming body.
        completion: Value,
    },
}

impl Behaviour {
    /// Healthy, no delays, [`MOCK_CONTENT`] in 4 deltas.
    ///
    /// ```
    /// use polygateway_testkit::{mock_llm::MOCK_CONTENT, Behaviour};
    /// let Behaviour::Healthy { ttft, chunks, content, .. } = Behaviour::healthy() else {
    ///     unreachable!()
    /// };
    /// assert!(ttft.is_zero());
    /// assert_eq!((chunks, content.as_str()), (4, MOCK_CONTENT));
    /// ```
    pub fn healthy() -> Self {
        Self::healthy_with(MOCK_CONTENT)
    }

    /// Healthy, no delays, the given content in up to 4 deltas.
    ///
    /// ```
    /// use polygateway_testkit::Behaviour;
    /// let b = Behaviour::healthy_with(r#"{"answer": 42}"#);
    /// assert!(matches!(&b, Behaviour::Healthy { content, .. } if content == r#"{"answer": 42}"#));
    /// assert_eq!(b.name(), "healthy");
    /// ```
    pub fn healthy_with(content: impl Into<String>) -> Self {
        Behaviour::Healthy {
            ttft: Duration::ZERO,
            inter_token: Duration::ZERO,
            chunks: 4,
            content: content.into(),
        }
    }

    /// The name under which requests are counted (`healthy`, `rate_limited`, …). Composite
    /// behaviours count under the behaviour they resolved to.
    ///
    /// ```
    /// use polygateway_testkit::Behaviour;
    /// assert_eq!(Behaviour::RateLimited { retry_after_s: Some(1) }.name(), "rate_limited");
    /// assert_eq!(Behaviour::ServerError(502).name(), "server_error");
    /// // The script's own name; its requests are counted under what each step resolves to.
    /// assert_eq!(Behaviour::Scripted(vec![Behaviour::BlackHole]).name(), "scripted");
    /// ```
    pub fn name(&self) -> &'static str {
        match self {
            Behaviour::Healthy { .. } => "healthy",
            Behaviour::Slow { .. } => "slow",
            Behaviour::BlackHole => "black_hole",
            Behaviour::RateLimited { .. } => "rate_limited",
            Behaviour::InsufficientQuota => "insufficient_quota",
            Behaviour::Unauthorized => "unauthorized",
            Behaviour::Forbidden => "forbidden",
            Behaviour::BadRequest => "bad_request",
            Behaviour::ServerError(_) => "server_error",
            Behaviour::TruncatedStream { .. } => "truncated_stream",
            Behaviour::EarlyEof => "early_eof",
            Behaviour::AbruptClose { .. } => "abrupt_close",
            Behaviour::MalformedFrame => "malformed_frame",
            Behaviour::EmptyCompletion => "empty_completion",
            Behaviour::Reasoning | Behaviour::ReasoningPaced { .. } => "reasoning",
            Behaviour::ThinkTags => "think_tags",
            Behaviour::UsageDetails => "usage_details",
            Behaviour::NoUsage => "no_usage",
            Behaviour::InBandError => "in_band_error",
            Behaviour::EmbeddingCountMismatch => "embedding_count_mismatch",
            Behaviour::Mix { .. } => "mix",
            Behaviour::Scripted(_) => "scripted",
            Behaviour::ScriptedContent(_) => "scripted_content",
            Behaviour::ToolCalls(_) => "tool_calls",
            Behaviour::Length => "length",
            Behaviour::Raw { .. } => "raw",
            Behaviour::CutAfter { .. } => "cut_after",
        }
    }

    pub(super) fn seed(&self) -> Option<u64> {
        match self {
            Behaviour::Mix { seed, .. } => Some(*seed),
            Behaviour::Scripted(list) => list.iter().find_map(Behaviour::seed),
            _ => None,
        }
    }
}

/// Pick the concrete behaviour for request number `seq`.
pub(super) fn resolve(b: &Behaviour, seq: u64, rng: &mut StdRng) -> Behaviour {
    match b {
        Behaviour::Scripted(list) => {
            match list.get((seq as usize).min(list.len().saturating_sub(1))) {
                Some(b) => resolve(b, seq, rng),
                None => Behaviour::healthy(),
            }
        }
        Behaviour::ScriptedContent(list) => {
            let i = (seq as usize).min(list.len().saturating_sub(1));
            Behaviour::healthy_with(list.get(i).cloned().unwrap_or_default())
        }
        Behaviour::Mix {
            failure_rate,
            failure,
            healthy,
            ..
        } => {
            if rng.random_bool(failure_rate.clamp(0.0, 1.0)) {
                resolve(failure, seq, rng)
            } else {
                resolve(healthy, seq, rng)
            }
        }
        other => other.clone(),
    }
}
