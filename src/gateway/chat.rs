//! The chat handle: `chat`, `chat_with`, `chat_structured`, `chat_stream`.
//!
//! Each call goes down its scope's call stack (`crate::call`, where the order of its layers is
//! written): validate → record → cache → structured ladder → budget → govern.

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::handle::{Chat, ScopeHandle};
use crate::error::GatewayError;
use crate::structured::{validate, LadderPlan, SchemaRequest};
use crate::types::{CallOptions, LlmResponse, Message, Structured};

/// Chat calls of a [`ChatHandle`](crate::ChatHandle).
///
/// ```no_run
/// # async fn demo(gw: polygateway::Gateway) -> Result<(), polygateway::GatewayError> {
/// use polygateway::{CallOptions, Message};
/// let judge = gw.chat_scope("JUDGE")?;
/// let answer = judge
///     .chat_with(vec![Message::user("grade this")], CallOptions::new().tenant_id("acme"))
///     .await?;
/// println!("{} (from {})", answer.content, answer.source_name);
/// # Ok(()) }
/// ```
impl ScopeHandle<Chat> {
    /// One governed chat call with default options.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway::GatewayError> {
    /// # let (settings, mocks) = polygateway_testkit::doc_setup(&["LLM"], &[]).await;
    /// use polygateway::Message;
    /// use polygateway_testkit::mock_llm::MOCK_CONTENT;
    /// let gw = polygateway::Gateway::from_settings(settings, "LLM").await?;
    /// let llm = gw.chat_scope("LLM")?;
    /// let reply = llm.chat(vec![Message::user("Say hello")]).await?;
    /// assert_eq!(reply.content, MOCK_CONTENT);
    /// assert_eq!(reply.model, "gpt-test");
    /// gw.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub async fn chat(&self, messages: Vec<Message>) -> Result<LlmResponse, GatewayError> {
        self.chat_with(messages, CallOptions::new()).await
    }

    /// One governed chat call.
    ///
    /// With `Structured::Json` the answer is repaired into a JSON value (`structured_data`);
    /// an unrepairable answer is `ResultInvalid` and is never cached.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway::GatewayError> {
    /// use polygateway_testkit::{Behaviour, MockUpstream};
    /// let mock = MockUpstream::start(Behaviour::healthy_with(r#"{"prime": true}"#)).await;
    /// # let settings = polygateway_testkit::mock_settings(
    /// #     &[("LLM", &mock.base_url())],
    /// #     &[("LLM__OPENAI__1__MODEL", "gpt-test")],
    /// # );
    /// use polygateway::{CallOptions, Message, Structured};
    /// let gw = polygateway::Gateway::from_settings(settings, "LLM").await?;
    /// let llm = gw.chat_scope("LLM")?;
    /// let options = CallOptions::new().structured(Structured::Json).session_id("s-42");
    /// let reply = llm.chat_with(vec![Message::user("Is 7 prime? Answer in JSON.")], options).await?;
    /// assert_eq!(reply.structured_data, Some(serde_json::json!({"prime": true})));
    /// gw.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub async fn chat_with(
        &self,
        messages: Vec<Message>,
        mut options: CallOptions,
    ) -> Result<LlmResponse, GatewayError> {
        let stack = &self.scope().stack;
        match options.structured {
            // Boxed: the ladder's future is several times a plain call's, and inline it would
            // size every call's future (what a caller holds per call in flight) to the ladder.
            Structured::Json => Box::pin(stack.structured(
                messages,
                &mut options,
                LadderPlan::json(),
                None,
                Ok::<Value, _>,
            ))
            .await
            .map(|(response, _)| response),
            _ => stack.chat(messages, &mut options).await,
        }
    }

    /// A typed structured call: the whole ladder (native schema where supported, repair,
    /// validation into `T`, bounded re-ask with feedback — re-asks never count toward the
    /// breaker). Returns the response (with `structured_data`) and the typed value. A cache hit
    /// rebuilds `T` from the stored `structured_data` without network.
    ///
    /// ```no_run
    /// # async fn demo(gw: polygateway::Gateway) -> Result<(), polygateway::GatewayError> {
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// struct Verdict { score: u8, reason: String }
    /// let (_resp, verdict): (_, Verdict) = gw
    ///     .chat_structured(vec![polygateway::Message::user("grade: 2+2=4")], Default::default())
    ///     .await?;
    /// println!("{} because {}", verdict.score, verdict.reason);
    /// # Ok(()) }
    /// ```
    pub async fn chat_structured<T>(
        &self,
        messages: Vec<Message>,
        mut options: CallOptions,
    ) -> Result<(LlmResponse, T), GatewayError>
    where
        T: DeserializeOwned + schemars::JsonSchema + Send,
    {
        let plan = LadderPlan::typed(self.core.structured_max_retries);
        let schema = SchemaRequest::of::<T>();
        let (response, value) = self
            .scope()
            .stack
            .structured(messages, &mut options, plan, Some(schema), validate::<T>)
            .await?;
        match value {
            Some(value) => Ok((response, value)),
            None => Err(GatewayError::NoStructuredValue(Box::new(response))),
        }
    }

    /// A structured call whose type is known only at run time (a JSON Schema produced by another
    /// language's type system, e.g. a Python binding): the same ladder as
    /// [`chat_structured`](Self::chat_structured), with `check` judging each repaired answer —
    /// `Err` carries the validation errors fed back on the re-ask. A cache hit is checked again.
    /// The accepted JSON is the response's `structured_data`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), polygateway::GatewayError> {
    /// use polygateway_testkit::{mock_settings, Behaviour, MockUpstream};
    /// use polygateway::{structured::SchemaRequest, CallOptions, Message};
    /// use serde_json::json;
    /// // A missing field first, then a valid answer.
    /// let answers = vec![r#"{"city": "Oslo"}"#.into(), r#"{"city": "Oslo", "population": 709000}"#.into()];
    /// let mock = MockUpstream::start(Behaviour::ScriptedContent(answers)).await;
    /// let settings = mock_settings(&[("LLM", mock.base_url().as_str())], &[]);
    /// let gw = polygateway::Gateway::from_settings(settings, "LLM").await?;
    /// let schema = SchemaRequest {
    ///     name: "City".into(),
    ///     schema: json!({"type": "object", "required": ["city", "population"]}),
    /// };
    /// let check = |v: &serde_json::Value| match v.get("population") {
    ///     Some(_) => Ok(()),
    ///     None => Err(vec!["population: field required".to_string()]),
    /// };
    /// let reply = gw
    ///     .chat_scope("LLM")?
    ///     .chat_structured_schema(vec![Message::user("Oslo?")], CallOptions::new(), schema, check)
    ///     .await?;
    /// assert_eq!(reply.asks, 2);
    /// assert_eq!(reply.structured_data.unwrap()["population"], 709000);
    /// gw.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub async fn chat_structured_schema<C>(
        &self,
        messages: Vec<Message>,
        mut options: CallOptions,
        schema: SchemaRequest,
        check: C,
    ) -> Result<LlmResponse, GatewayError>
    where
        C: Fn(&Value) -> Result<(), Vec<String>> + Send + Sync,
    {
        let plan = LadderPlan::typed(self.core.structured_max_retries);
        let accept = |value: Value| check(&value);
        self.scope()
            .stack
            .structured(messages, &mut options, plan, Some(schema), accept)
            .await
            .map(|(response, _)| response)
    }

    /// A structured call against a JSON Schema known only at run time (the server's
    /// `response_format: json_schema`): the whole ladder, validation by
    /// [`crate::structured::shape`]. The accepted value is the answer's `structured_data`.
    pub(crate) async fn chat_with_schema(
        &self,
        messages: Vec<Message>,
        options: CallOptions,
        schema: SchemaRequest,
    ) -> Result<LlmResponse, GatewayError> {
        let shape = schema.schema.clone();
        let check = move |value: &Value| {
            let errors = crate::structured::shape::check(&shape, value);
            if errors.is_empty() {
                Ok(())
            } else {
                Err(errors)
            }
        };
        // Boxed like `chat_with`'s ladder: inline, the ladder's state would size the future of
        // every caller that may take this path (the server's chat handler), schema or not.
        Box::pin(self.chat_structured_schema(messages, options, schema, check)).await
    }
}
