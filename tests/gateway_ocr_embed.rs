//! Embeddings and OCR through the same governed call path as chat (docs/behaviour.md §7.3, §7.4).

use polygateway::config::Settings;
use polygateway::{CallOptions, Gateway, GatewayError, UsageSource};
use polygateway_testkit::mock_llm::{mock_embedding, Behaviour, MockUpstream};
use polygateway_testkit::mock_ocr::fixture::{SAMPLE_ELEMENTS, SAMPLE_PAGE_SIZE, SAMPLE_TEXT};
use polygateway_testkit::mock_ocr::{MockOcr, OcrEndpoint, OcrFault};

const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR fake png body";

async fn gateway(pairs: Vec<(String, String)>, scope: &str) -> Gateway {
    let mut map = polygateway_testkit::mock_env();
    map.extend(pairs);
    Gateway::from_settings(Settings::from_map(&map).unwrap(), scope)
        .await
        .unwrap()
}

fn embed_source(n: u32, base: &str) -> Vec<(String, String)> {
    let p = format!("EMBED__OPENAI__{n}");
    vec![
        (format!("{p}__BASE_URL"), base.to_string()),
        (format!("{p}__API_KEY"), "sk-embed".into()),
        (format!("{p}__MODEL"), "embed-model".into()),
        ("EMBED__RETRY__BACKOFF_BASE_S".into(), "0.01".into()),
    ]
}

fn ocr_source(n: u32, base: &str) -> Vec<(String, String)> {
    let p = format!("OCR__MONKEY__{n}");
    vec![
        (format!("{p}__BASE_URL"), base.to_string()),
        (format!("{p}__MODEL"), "monkeyocr".into()),
        (format!("{p}__TIMEOUT_S"), "5".into()),
        ("OCR__RETRY__BACKOFF_BASE_S".into(), "0.01".into()),
    ]
}

fn texts(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("text number {i}")).collect()
}

#[tokio::test]
async fn batches_are_governed_independently_and_merged_in_order() {
    let mock = MockUpstream::start(Behaviour::Scripted(vec![
        Behaviour::healthy(),
        Behaviour::ServerError(503),
        Behaviour::healthy(),
    ]))
    .await;
    let mut keys = embed_source(1, &mock.base_url());
    keys.push(("EMBED__BATCH_SIZE".into(), "2".into()));
    let gw = gateway(keys, "EMBED").await;
    let input = texts(5);
    let out = gw.embed(input.clone()).await.unwrap();
    assert_eq!(out.vectors.len(), 5);
    for (text, vector) in input.iter().zip(&out.vectors) {
        assert_eq!(
            vector,
            &mock_embedding(text, 8),
            "order preserved for {text}"
        );
    }
    assert_eq!(out.dim, 8);
    // Three batches; one of them failed once and only it was retried.
    assert_eq!(mock.counts().embeddings, 4);
    assert_eq!(out.usage_source, UsageSource::Measured);
    assert!(out.prompt_tokens > 0);
    assert_eq!(out.model, "embed-model");
    gw.shutdown().await;
}

#[tokio::test]
async fn dimension_normalisation_and_usage_rules() {
    let mock = MockUpstream::start(Behaviour::healthy()).await;
    let mut keys = embed_source(1, &mock.base_url());
    keys.push(("EMBED__BATCH_SIZE".into(), "10".into()));
    keys.push(("EMBED__NORMALIZE".into(), "true".into()));
    let gw = gateway(keys.clone(), "EMBED").await;
    let out = gw.embed(texts(3)).await.unwrap();
    for v in &out.vectors {
        let norm: f32 = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "{norm}");
    }
    gw.shutdown().await;

    keys.push(("EMBED__EXPECTED_DIM".into(), "16".into()));
    let gw = gateway(keys, "EMBED").await;
    let err = gw.embed(texts(2)).await.unwrap_err();
    assert!(matches!(err, GatewayError::ResultInvalid { .. }), "{err}");
    mock.set_behaviour(Behaviour::NoUsage);
    gw.shutdown().await;

    let mut keys = embed_source(1, &mock.base_url());
    keys.push(("EMBED__BATCH_SIZE".into(), "10".into()));
    let gw = gateway(keys, "EMBED").await;
    let out = gw.embed(texts(2)).await.unwrap();
    assert_eq!(out.usage_source, UsageSource::Unavailable);
    assert_eq!(out.prompt_tokens, 0, "nothing invented");
    gw.shutdown().await;
}

#[tokio::test]
async fn ocr_text_and_layout_through_the_runtime() {
    let ocr = MockOcr::start(OcrFault::None).await;
    let gw = gateway(ocr_source(1, &ocr.base_url()), "OCR").await;
    let text = gw.recognize_text(PNG.to_vec()).await.unwrap();
    assert_eq!(text.text, SAMPLE_TEXT);
    assert_eq!(text.provenance.source_name, "monkey_1");
    assert_eq!(text.provenance.usage, 0);
    let layout = gw.parse_layout(PNG.to_vec()).await.unwrap();
    let kinds: Vec<(usize, &str)> = layout
        .elements
        .iter()
        .map(|e| (e.page_index, e.kind.as_str()))
        .collect();
    assert_eq!(kinds, SAMPLE_ELEMENTS);
    assert!(layout.page_sizes.iter().all(|p| *p == SAMPLE_PAGE_SIZE));
    assert_eq!(
        gw.check_health().await.unwrap().get("monkey_1"),
        Some(&true)
    );
    gw.shutdown().await;
}

#[tokio::test]
async fn a_non_image_is_rejected_before_admission_and_reaches_no_source() {
    let ocr = MockOcr::start(OcrFault::None).await;
    let gw = gateway(ocr_source(1, &ocr.base_url()), "OCR").await;
    let err = gw
        .recognize_text(b"%PDF-1.7 not an image".to_vec())
        .await
        .unwrap_err();
    assert!(matches!(err, GatewayError::RequestRejected { .. }), "{err}");
    assert_eq!(ocr.requests(OcrEndpoint::OcrText), 0);
    assert_eq!(gw.sources("OCR").await.unwrap()[0].attempts, 0);
    gw.shutdown().await;
}

#[tokio::test]
async fn an_ocr_failure_switches_source_and_success_false_keeps_the_breaker_closed() {
    let broken = MockOcr::start(OcrFault::Detail500).await;
    let healthy = MockOcr::start(OcrFault::None).await;
    let mut keys = ocr_source(1, &broken.base_url());
    keys.extend(ocr_source(2, &healthy.base_url()));
    let gw = gateway(keys, "OCR").await;
    for _ in 0..5 {
        let text = gw.recognize_text(PNG.to_vec()).await.unwrap();
        assert_eq!(text.provenance.source_name, "monkey_2");
    }
    gw.shutdown().await;

    let answers_false = MockOcr::start(OcrFault::SuccessFalse).await;
    let mut keys = ocr_source(1, &answers_false.base_url());
    keys.push(("OCR__BREAKER__FAIL_THRESHOLD".into(), "2".into()));
    let gw = gateway(keys, "OCR").await;
    for _ in 0..5 {
        let err = gw
            .ocr_scope("OCR")
            .unwrap()
            .recognize_text(PNG.to_vec(), CallOptions::new())
            .await
            .unwrap_err();
        assert!(matches!(err, GatewayError::ResultInvalid { .. }), "{err}");
    }
    let source = &gw.sources("OCR").await.unwrap()[0];
    assert_eq!(
        source.breaker,
        Some(polygateway::ports::BreakerState::Closed)
    );
    assert_eq!(
        answers_false.requests(OcrEndpoint::OcrText),
        5,
        "no retries, no opening"
    );
    gw.shutdown().await;
}
