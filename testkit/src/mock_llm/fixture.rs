//! What the mock's answers say: the fixed content, thinking and token counts tests compare
//! against, and the fingerprint and logprob every answer carries.

/// Prompt tokens the mock reports for every chat request.
///
/// ```
/// use polygateway_testkit::mock_llm::MOCK_PROMPT_TOKENS;
/// use polygateway_testkit::{mock_settings, Behaviour, MockUpstream};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let mock = MockUpstream::start(Behaviour::healthy()).await;
/// let settings = mock_settings(&[("LLM", mock.base_url().as_str())], &[]);
/// let gw = polygateway::Gateway::from_settings(settings, "LLM").await.unwrap();
/// let resp = gw.chat(vec![polygateway::Message::user("hi")]).await.unwrap();
/// assert_eq!(resp.prompt_tokens, MOCK_PROMPT_TOKENS);
/// // One completion token per delta: the healthy answer comes in 4.
/// assert_eq!(resp.completion_tokens, 4);
/// # gw.shutdown().await;
/// # }
/// ```
pub const MOCK_PROMPT_TOKENS: u64 = 12;
/// Cached prompt tokens reported by [`Behaviour::UsageDetails`](super::Behaviour::UsageDetails).
///
/// ```
/// use polygateway_testkit::mock_llm::MOCK_CACHED_TOKENS;
/// use polygateway_testkit::{mock_settings, Behaviour, MockUpstream};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let mock = MockUpstream::start(Behaviour::UsageDetails).await;
/// let settings = mock_settings(&[("LLM", mock.base_url().as_str())], &[]);
/// let gw = polygateway::Gateway::from_settings(settings, "LLM").await.unwrap();
/// let resp = gw.chat(vec![polygateway::Message::user("hi")]).await.unwrap();
/// assert_eq!(resp.cached_prompt_tokens, Some(MOCK_CACHED_TOKENS));
/// # gw.shutdown().await;
/// # }
/// ```
pub const MOCK_CACHED_TOKENS: u64 = 8;
/// Reasoning tokens reported by [`Behaviour::UsageDetails`](super::Behaviour::UsageDetails).
///
/// They are part of `completion_tokens`, as in OpenAI's usage block:
///
/// ```
/// use polygateway_testkit::{mock_llm::MOCK_REASONING_TOKENS, Behaviour, MockUpstream};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let mock = MockUpstream::start(Behaviour::UsageDetails).await;
/// let body: serde_json::Value = reqwest::Client::new()
///     .post(format!("{}/chat/completions", mock.base_url()))
///     .json(&serde_json::json!({"model": "m", "messages": []}))
///     .send().await.unwrap()
///     .json().await.unwrap();
/// let usage = &body["usage"];
/// assert_eq!(usage["completion_tokens_details"]["reasoning_tokens"], MOCK_REASONING_TOKENS);
/// assert_eq!(usage["completion_tokens"], 4 + MOCK_REASONING_TOKENS);
/// # }
/// ```
pub const MOCK_REASONING_TOKENS: u64 = 3;
/// Default answer of [`Behaviour::healthy`](super::Behaviour::healthy).
///
/// ```
/// use polygateway_testkit::mock_llm::MOCK_CONTENT;
/// use polygateway_testkit::{mock_settings, Behaviour, MockUpstream};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let mock = MockUpstream::start(Behaviour::healthy()).await;
/// let settings = mock_settings(&[("LLM", mock.base_url().as_str())], &[]);
/// let gw = polygateway::Gateway::from_settings(settings, "LLM").await.unwrap();
/// let resp = gw.chat(vec![polygateway::Message::user("hi")]).await.unwrap();
/// assert_eq!(resp.content, MOCK_CONTENT);
/// # gw.shutdown().await;
/// # }
/// ```
pub const MOCK_CONTENT: &str = "Hello from the mock upstream.";
/// Reasoning text of [`Behaviour::Reasoning`](super::Behaviour::Reasoning) and [`Behaviour::ThinkTags`](super::Behaviour::ThinkTags).
///
/// The gateway returns the streamed `reasoning_content` as `thinking`, apart from the answer:
///
/// ```
/// use polygateway_testkit::mock_llm::{MOCK_CONTENT, MOCK_THINKING};
/// use polygateway_testkit::{mock_settings, Behaviour, MockUpstream};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let mock = MockUpstream::start(Behaviour::Reasoning).await;
/// let settings = mock_settings(&[("LLM", mock.base_url().as_str())], &[]);
/// let gw = polygateway::Gateway::from_settings(settings, "LLM").await.unwrap();
/// let resp = gw.chat(vec![polygateway::Message::user("hi")]).await.unwrap();
/// assert_eq!(resp.thinking, MOCK_THINKING);
/// assert_eq!(resp.content, MOCK_CONTENT);
/// # gw.shutdown().await;
/// # }
/// ```
pub const MOCK_THINKING: &str = "Let me think.";

/// The `system_fingerprint` of every chat answer.
pub(super) const MOCK_FINGERPRINT: &str = "fp_mock";

/// The logprob of every token when logprobs are asked for.
pub(super) const MOCK_LOGPROB: f64 = -0.25;
