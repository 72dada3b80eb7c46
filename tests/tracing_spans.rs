//! Calls and attempts are traced as spans, with OpenTelemetry GenAI attribute names on chat.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use polygateway::Message;
use polygateway_testkit::mock_llm::{Behaviour, MockUpstream};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;

type Spans = Arc<Mutex<Vec<(String, BTreeMap<String, String>)>>>;

/// Records every span's name and every field value it was given or later recorded.
struct Capture(Spans);

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(
            field.name().to_string(),
            format!("{value:?}").trim_matches('"').to_string(),
        );
    }
}

impl<S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>> Layer<S>
    for Capture
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _ctx: Context<'_, S>) {
        let mut fields = BTreeMap::new();
        attrs.record(&mut Fields(&mut fields));
        fields.insert("#id".into(), id.into_u64().to_string());
        self.0
            .lock()
            .unwrap()
            .push((attrs.metadata().name().to_string(), fields));
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, _ctx: Context<'_, S>) {
        let mut spans = self.0.lock().unwrap();
        let key = id.into_u64().to_string();
        if let Some((_, fields)) = spans.iter_mut().rev().find(|(_, f)| f["#id"] == key) {
            values.record(&mut Fields(fields));
        }
    }
}

#[tokio::test]
async fn a_call_with_a_retry_leaves_call_attempt_and_gen_ai_spans() {
    let spans: Spans = Arc::default();
    let subscriber = tracing_subscriber::registry().with(Capture(Arc::clone(&spans)));
    let _guard = tracing::subscriber::set_default(subscriber);

    let mock = MockUpstream::start(Behaviour::Scripted(vec![
        Behaviour::ServerError(503),
        Behaviour::UsageDetails,
    ]))
    .await;
    let gw = common::gateway(&[("openai", &mock)], &[]).await;
    let resp = gw.chat(vec![Message::user("hi")]).await.unwrap();
    gw.shutdown().await;

    let spans = spans.lock().unwrap();
    let named = |name: &str| -> Vec<&BTreeMap<String, String>> {
        spans
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, f)| f)
            .collect()
    };
    let call = named("pgw.call");
    assert_eq!(call.len(), 1);
    assert_eq!(call[0]["scope"], "LLM");
    assert_eq!(call[0]["outcome"], "ok");
    assert_eq!(call[0]["attempts"], "2");

    let attempts = named("pgw.attempt");
    assert_eq!(attempts.len(), 2);
    assert_eq!(attempts[0]["source"], "openai_1");
    assert_eq!(attempts[0]["class"], "Transient");
    assert_eq!(attempts[1]["verdict"], "Success");
    assert!(attempts[1].contains_key("elapsed_ms"));

    let chat = named("chat");
    assert_eq!(chat.len(), 1);
    assert_eq!(chat[0]["gen_ai.operation.name"], "chat");
    assert_eq!(chat[0]["gen_ai.request.model"], "model-openai");
    assert_eq!(
        chat[0]["gen_ai.usage.input_tokens"],
        resp.prompt_tokens.to_string()
    );
    assert_eq!(
        chat[0]["gen_ai.usage.output_tokens"],
        resp.completion_tokens.to_string()
    );
    assert_eq!(
        chat[0].get("gen_ai.response.model").map(String::as_str),
        resp.model_reported.as_deref()
    );
}
