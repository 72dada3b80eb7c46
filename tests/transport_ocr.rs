//! The MonkeyOCR transport against the mock MonkeyOCR server (real sockets on 127.0.0.1): every
//! fault mode maps to its docs/behaviour.md §6 class, uploads are named after their magic bytes, download URLs
//! resolve and encode, bbox defence holds, health probes answer.

use std::time::Duration;

use polygateway::config::Secret;
use polygateway::ports::{AttemptVerdict, Classify, FailureClass, SourceReason, Transport};
use polygateway::transport::ocr::{OcrOutput, OcrRequest, OcrTransport};
use polygateway::transport::TransportConfig;
use polygateway::{OcrLayoutResult, OcrTextResult, TransportError};
use polygateway_testkit::mock_ocr::fixture::{
    SAMPLE_ELEMENTS, SAMPLE_PAGE_SIZE, SAMPLE_TABLE_HTML, SAMPLE_TEXT,
};
use polygateway_testkit::mock_ocr::{MockOcr, OcrEndpoint, OcrFault};
use tokio::time::Instant;

const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR fake png body";
const JPEG: &[u8] = &[0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x10, b'J', b'F', b'I', b'F'];

/// The test kit's source (no proxy from the environment: loopback only) as a MonkeyOCR source
/// with one deadline for every layer.
fn settings(base_url: &str, timeout: Duration) -> TransportConfig {
    let mut config = TransportConfig::from(&polygateway_testkit::source_settings(base_url));
    config.name = "monkey_1".to_owned();
    config.provider = "monkey".to_owned();
    config.api_key = Secret::new("");
    config.model = "monkey-ocr".to_owned();
    (
        config.timeout,
        config.ttft_timeout,
        config.inter_token_timeout,
    ) = (timeout, timeout, timeout);
    config
}

fn transport(mock: &MockOcr) -> OcrTransport {
    OcrTransport::new(settings(&mock.base_url(), Duration::from_secs(5)))
}

async fn text(t: &OcrTransport, bytes: &'static [u8]) -> Result<OcrTextResult, TransportError> {
    match t.send(&OcrRequest::text(bytes), None).await? {
        OcrOutput::Text(r) => Ok(r),
        other => panic!("text request answered {other:?}"),
    }
}

async fn layout(t: &OcrTransport, bytes: &'static [u8]) -> Result<OcrLayoutResult, TransportError> {
    match t.send(&OcrRequest::layout(bytes), None).await? {
        OcrOutput::Layout(r) => Ok(r),
        other => panic!("layout request answered {other:?}"),
    }
}

fn assert_class(err: &TransportError, class: FailureClass, needle: &str) {
    assert_eq!(err.class, class, "{err:?}");
    assert!(
        err.message.contains(needle),
        "message {:?} lacks {needle:?}",
        err.message
    );
}

fn assert_sample_layout(result: &OcrLayoutResult) {
    let got: Vec<(usize, &str)> = result
        .elements
        .iter()
        .map(|e| (e.page_index, e.kind.as_str()))
        .collect();
    assert_eq!(got, SAMPLE_ELEMENTS);
    assert_eq!(result.page_sizes, vec![SAMPLE_PAGE_SIZE; 3]);
}

// Real time: it checks that a latency is measured, and a mock without delays answers in 0 ms of
// paused time.
#[tokio::test]
async fn text_png_success_with_provenance() {
    let mock = MockOcr::start(OcrFault::None).await;
    let t = transport(&mock);
    let out = t.send(&OcrRequest::text(PNG), None).await.unwrap();
    assert_eq!(OcrTransport::tokens_used(&out), Some(0));
    let OcrOutput::Text(result) = out else {
        panic!("not a text result")
    };
    assert_eq!(result.text, SAMPLE_TEXT);
    let p = &result.provenance;
    assert_eq!(p.source_name, "monkey_1");
    assert_eq!(p.usage, 0);
    assert!(p.latency_ms > 0.0);
    assert!(uuid::Uuid::parse_str(&p.call_id).is_ok());
    assert_eq!(p.raw["task_type"], "text");
    let upload = mock.last_upload().unwrap();
    assert_eq!(upload.endpoint, OcrEndpoint::OcrText);
    assert_eq!(upload.file_name.as_deref(), Some("image.png"));
    assert_eq!(upload.content_type.as_deref(), Some("image/png"));
    assert_eq!(upload.len, PNG.len());
    assert_eq!(mock.requests(OcrEndpoint::OcrText), 1);
}

#[tokio::test(start_paused = true)]
async fn jpeg_uploads_are_named_image_jpg_on_both_endpoints() {
    let mock = MockOcr::start(OcrFault::None).await;
    let t = transport(&mock);
    assert_eq!(text(&t, JPEG).await.unwrap().text, SAMPLE_TEXT);
    let upload = mock.last_upload().unwrap();
    assert_eq!(upload.file_name.as_deref(), Some("image.jpg"));
    assert_eq!(upload.content_type.as_deref(), Some("image/jpeg"));
    assert_sample_layout(&layout(&t, JPEG).await.unwrap());
    let upload = mock.last_upload().unwrap();
    assert_eq!(upload.endpoint, OcrEndpoint::Parse);
    assert_eq!(upload.file_name.as_deref(), Some("image.jpg"));
}

#[tokio::test(start_paused = true)]
async fn non_image_bytes_are_rejected_and_nothing_is_sent() {
    let mock = MockOcr::start(OcrFault::None).await;
    let t = transport(&mock);
    for bytes in [&b"%PDF-1.7 ..."[..], b"GIF89a....", b"", &PNG[..7]] {
        for request in [OcrRequest::text(bytes), OcrRequest::layout(bytes)] {
            let err = t.send(&request, None).await.unwrap_err();
            assert_class(&err, FailureClass::RequestRejected, "PNG or JPEG");
            assert!(!err.answered);
            assert_eq!(AttemptVerdict::of_error(&err), AttemptVerdict::Failure);
        }
    }
    assert_eq!(mock.total_requests(), 0);
}

#[tokio::test(start_paused = true)]
async fn blank_page_is_a_legitimately_empty_result() {
    let mock = MockOcr::start(OcrFault::BlankPage).await;
    let t = transport(&mock);
    assert_eq!(text(&t, PNG).await.unwrap().text, "");
    let result = layout(&t, PNG).await.unwrap();
    assert!(result.elements.is_empty(), "{:?}", result.elements);
    assert_eq!(result.page_sizes, vec![SAMPLE_PAGE_SIZE]);
}

#[tokio::test(start_paused = true)]
async fn success_false_is_result_invalid_but_proves_the_service_alive() {
    let mock = MockOcr::start(OcrFault::SuccessFalse).await;
    let t = transport(&mock);
    let err = text(&t, PNG).await.unwrap_err();
    assert_class(
        &err,
        FailureClass::ResultInvalid,
        "OCR task failed: CUDA out of memory",
    );
    assert!(err.answered && err.proves_alive());
    assert_eq!(
        AttemptVerdict::of_error(&err),
        AttemptVerdict::AliveButUnusable
    );
    assert_eq!(err.status, Some(200));
    let err = layout(&t, PNG).await.unwrap_err();
    assert_class(&err, FailureClass::ResultInvalid, "layout model not loaded");
    assert_eq!(
        AttemptVerdict::of_error(&err),
        AttemptVerdict::AliveButUnusable
    );
    assert_eq!(mock.requests(OcrEndpoint::Static), 0);
}

#[tokio::test(start_paused = true)]
async fn detail_500_is_transient_with_the_body_summary() {
    let mock = MockOcr::start(OcrFault::Detail500).await;
    let t = transport(&mock);
    for err in [
        text(&t, PNG).await.unwrap_err(),
        layout(&t, PNG).await.unwrap_err(),
    ] {
        assert_class(&err, FailureClass::Transient, "CUDA out of memory");
        assert_eq!(err.status, Some(500));
        assert!(err.body_text.contains("\"detail\""), "{}", err.body_text);
        assert_eq!(err.source_reason(), SourceReason::ServerError);
        assert_eq!(AttemptVerdict::of_error(&err), AttemptVerdict::Failure);
    }
    let err = layout(&t, PNG).await.unwrap_err();
    assert!(err.message.contains("/parse"), "{}", err.message);
}

#[tokio::test(start_paused = true)]
async fn rate_limited_429_is_plain_transient() {
    let mock = MockOcr::start(OcrFault::RateLimited429).await;
    let t = transport(&mock);
    for err in [
        text(&t, PNG).await.unwrap_err(),
        layout(&t, JPEG).await.unwrap_err(),
    ] {
        assert_class(&err, FailureClass::Transient, "429");
        assert!(!err.is_rate_limited());
        assert_eq!(err.source_reason(), SourceReason::RateLimited);
        assert_eq!(err.retry_after(), Some(Duration::from_secs(1)));
        assert_eq!(AttemptVerdict::of_error(&err), AttemptVerdict::Failure);
    }
}

#[tokio::test(start_paused = true)]
async fn layout_follows_a_relative_download_url() {
    let mock = MockOcr::start(OcrFault::None).await;
    let t = transport(&mock);
    let result = layout(&t, PNG).await.unwrap();
    assert_sample_layout(&result);
    let download_url = result.provenance.raw["download_url"].as_str().unwrap();
    assert!(
        download_url.starts_with("/static/image_parsed_"),
        "{download_url}"
    );
    let table = &result.elements[5];
    assert_eq!(table.bbox, (314.0, 356.0, 557.0, 459.0));
    assert!(table.text.contains(SAMPLE_TABLE_HTML), "{}", table.text);
    assert!(table.text.contains("Table 1: Results"));
    assert_eq!(
        result.elements[1].text.lines().next(),
        Some("We introduce the \\mathrm{SRR} paradigm for document parsing.")
    );
    assert!(result
        .elements
        .iter()
        .all(|e| !e.text.contains("arXiv preprint")));
    assert_eq!(mock.requests(OcrEndpoint::Parse), 1);
    assert_eq!(mock.requests(OcrEndpoint::Static), 1);
}

#[tokio::test(start_paused = true)]
async fn layout_follows_an_absolute_download_url() {
    let mock = MockOcr::start(OcrFault::None).await;
    mock.set_absolute_download_urls(true);
    mock.set_result_stem(Some("scan two"));
    let result = layout(&transport(&mock), PNG).await.unwrap();
    assert_sample_layout(&result);
    let download_url = result.provenance.raw["download_url"].as_str().unwrap();
    assert!(download_url.starts_with(&format!("{}/static/scan two_parsed_", mock.base_url())));
    assert_eq!(mock.requests(OcrEndpoint::Static), 1);
}

#[tokio::test(start_paused = true)]
async fn raw_result_names_are_percent_encoded() {
    let mock = MockOcr::start(OcrFault::None).await;
    // A raw `#` would cut the path into a fragment, `%` would be misread as an escape: the
    // download only finds the file when every segment is encoded.
    mock.set_result_stem(Some("my scan #1 100% [a]"));
    let result = layout(&transport(&mock), PNG).await.unwrap();
    assert_sample_layout(&result);
    assert_eq!(mock.requests(OcrEndpoint::Static), 1);
}

#[tokio::test(start_paused = true)]
async fn broken_results_are_result_invalid() {
    let mock = MockOcr::start(OcrFault::MissingMiddleJson).await;
    let t = transport(&mock);
    let err = layout(&t, PNG).await.unwrap_err();
    assert_class(&err, FailureClass::ResultInvalid, "_middle.json");
    assert_eq!(
        AttemptVerdict::of_error(&err),
        AttemptVerdict::AliveButUnusable
    );
    // Modes that concern `/parse` leave `/ocr/text` alone.
    assert_eq!(text(&t, PNG).await.unwrap().text, SAMPLE_TEXT);

    mock.set_mode(OcrFault::CorruptZip);
    let err = layout(&t, PNG).await.unwrap_err();
    assert_class(&err, FailureClass::ResultInvalid, "unreadable");
    assert_eq!(
        AttemptVerdict::of_error(&err),
        AttemptVerdict::AliveButUnusable
    );

    mock.set_mode(OcrFault::DegenerateBbox);
    let err = layout(&t, PNG).await.unwrap_err();
    assert_class(&err, FailureClass::ResultInvalid, "page 1 block 1 (table)");
    assert!(err.message.contains("zero area"), "{}", err.message);
    assert_eq!(
        AttemptVerdict::of_error(&err),
        AttemptVerdict::AliveButUnusable
    );
}

#[tokio::test(start_paused = true)]
async fn download_404_is_transient() {
    let mock = MockOcr::start(OcrFault::Download404).await;
    let err = layout(&transport(&mock), PNG).await.unwrap_err();
    assert_class(&err, FailureClass::Transient, "ZIP download");
    assert_eq!(err.status, Some(404));
    assert_eq!(AttemptVerdict::of_error(&err), AttemptVerdict::Failure);
    assert_eq!(mock.requests(OcrEndpoint::Static), 1);
}

#[tokio::test(start_paused = true)]
async fn slow_answers_within_the_timeout_succeed() {
    let mock = MockOcr::start(OcrFault::Slow(Duration::from_millis(100))).await;
    let t = transport(&mock);
    let result = text(&t, PNG).await.unwrap();
    assert!(
        result.provenance.latency_ms >= 100.0,
        "{}",
        result.provenance.latency_ms
    );
    assert_sample_layout(&layout(&t, PNG).await.unwrap());
}

#[tokio::test(start_paused = true)]
async fn slow_and_black_hole_are_bounded_by_the_source_timeout() {
    for fault in [OcrFault::Slow(Duration::from_secs(3)), OcrFault::BlackHole] {
        let mock = MockOcr::start(fault.clone()).await;
        let t = OcrTransport::new(settings(&mock.base_url(), Duration::from_millis(300)));
        for request in [OcrRequest::text(PNG), OcrRequest::layout(PNG)] {
            let started = Instant::now();
            let err = t.send(&request, None).await.unwrap_err();
            let took = started.elapsed();
            assert_class(&err, FailureClass::Transient, "timeout");
            assert_eq!(err.source_reason(), SourceReason::Timeout, "{fault:?}");
            assert!(
                took >= Duration::from_millis(290),
                "{fault:?} after {took:?}"
            );
            assert!(
                took < Duration::from_millis(1500),
                "{fault:?} after {took:?}"
            );
        }
        // The abandoned requests are released on the server side too (the client hung up).
        let deadline = Instant::now() + Duration::from_secs(2);
        while mock.in_flight() > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(mock.in_flight(), 0, "{fault:?}");
        assert_eq!(mock.requests(OcrEndpoint::OcrText), 1);
        assert_eq!(mock.requests(OcrEndpoint::Parse), 1);
    }
}

#[tokio::test(start_paused = true)]
async fn unreachable_source_is_a_transient_network_error() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let t = OcrTransport::new(settings(
        &format!("http://127.0.0.1:{port}"),
        Duration::from_secs(2),
    ));
    let err = text(&t, PNG).await.unwrap_err();
    assert_eq!(err.class, FailureClass::Transient, "{err:?}");
    assert_eq!(err.source_reason(), SourceReason::NetworkError);
    assert!(!t.check_health().await);
}

#[tokio::test(start_paused = true)]
async fn a_base_url_that_is_not_a_url_is_source_dead() {
    let t = OcrTransport::new(settings("not a url", Duration::from_secs(1)));
    let err = layout(&t, PNG).await.unwrap_err();
    assert_eq!(err.class, FailureClass::SourceDead, "{err:?}");
    assert_eq!(AttemptVerdict::of_error(&err), AttemptVerdict::Dead);
}

#[tokio::test(start_paused = true)]
async fn health_reports_up_and_down() {
    let mock = MockOcr::start(OcrFault::None).await;
    let t = transport(&mock);
    assert!(t.check_health().await);
    // A failing task does not make the service unhealthy.
    mock.set_mode(OcrFault::Detail500);
    assert!(t.check_health().await);
    mock.set_mode(OcrFault::BlackHole);
    let started = Instant::now();
    assert!(!t.check_health_within(Duration::from_millis(200)).await);
    assert!(started.elapsed() < Duration::from_secs(1));
    mock.set_mode(OcrFault::Slow(Duration::from_millis(50)));
    assert!(t.check_health_within(Duration::from_secs(2)).await);
    assert_eq!(mock.requests(OcrEndpoint::Health), 4);
}

#[tokio::test(start_paused = true)]
async fn mock_validates_uploads_like_the_real_server() {
    let mock = MockOcr::start(OcrFault::None).await;
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let url = format!("{}/ocr/text", mock.base_url());
    // No `file` part: FastAPI's 422, which the transport would classify RequestRejected.
    let form = reqwest::multipart::Form::new().text("image", "x");
    let response = client.post(&url).multipart(form).send().await.unwrap();
    assert_eq!(response.status(), 422);
    // The extension decides the type: PNG bytes named `.jpg` fail the task.
    let part = reqwest::multipart::Part::bytes(PNG).file_name("image.jpg");
    let form = reqwest::multipart::Form::new().part("file", part);
    let body: serde_json::Value = client
        .post(&url)
        .multipart(form)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(body["success"], false);
    assert!(body["message"]
        .as_str()
        .unwrap()
        .starts_with("OCR task failed"));
    let part = reqwest::multipart::Part::bytes(PNG).file_name("image.gif");
    let form = reqwest::multipart::Form::new().part("file", part);
    let response = client
        .post(format!("{}/parse", mock.base_url()))
        .multipart(form)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 500);
    assert!(response
        .text()
        .await
        .unwrap()
        .contains("Unsupported file type: .gif"));
}

#[tokio::test(start_paused = true)]
async fn mix_serves_a_reproducible_fault_pool() {
    let mix = OcrFault::Mix {
        failure_rate: 0.5,
        faults: vec![
            OcrFault::Detail500,
            OcrFault::CorruptZip,
            OcrFault::SuccessFalse,
        ],
        seed: 42,
    };
    let mut runs = Vec::new();
    for _ in 0..2 {
        let mock = MockOcr::start(mix.clone()).await;
        let t = transport(&mock);
        let mut classes = Vec::new();
        for _ in 0..40 {
            classes.push(
                layout(&t, PNG)
                    .await
                    .map(|r| r.elements.len())
                    .map_err(|e| e.class),
            );
        }
        let failures = classes.iter().filter(|r| r.is_err()).count() as u64;
        assert_eq!(failures, mock.faults_served());
        assert!((8..=32).contains(&failures), "{failures} of 40");
        assert!(classes.contains(&Err(FailureClass::Transient)));
        assert!(classes.contains(&Err(FailureClass::ResultInvalid)));
        assert!(classes.contains(&Ok(SAMPLE_ELEMENTS.len())));
        runs.push(classes);
    }
    assert_eq!(runs[0], runs[1], "same seed, same sequence");
}

#[tokio::test(start_paused = true)]
async fn concurrent_attempts_share_one_client() {
    let mock = MockOcr::start(OcrFault::Slow(Duration::from_millis(100))).await;
    let t = std::sync::Arc::new(transport(&mock));
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let t = t.clone();
            tokio::spawn(async move {
                let request = if i % 2 == 0 {
                    OcrRequest::text(PNG)
                } else {
                    OcrRequest::layout(JPEG)
                };
                t.send(&request, None).await
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    assert!(mock.max_in_flight() >= 2, "{}", mock.max_in_flight());
    assert_eq!(mock.in_flight(), 0);
}
