//! `polygateway-mock`: the mock upstreams (OpenAI-compatible, Anthropic and MonkeyOCR) as one
//! process, printing their base URLs and serving until killed; for trying `polygateway serve` and
//! for its end-to-end tests (`tests/openai_sdk/run.sh`).

use std::io::Write;
use std::time::Duration;

use clap::Parser;
use polygateway_testkit::mock_anthropic::MockAnthropic;
use polygateway_testkit::mock_llm::{Behaviour, MockUpstream, MOCK_CONTENT};
use polygateway_testkit::mock_ocr::{MockOcr, OcrFault};

/// Run the mock upstreams until killed, printing `LLM_BASE_URL=…`, `ANTHROPIC_BASE_URL=…` and
/// `OCR_BASE_URL=…`, one a line.
#[derive(Parser)]
#[command(name = "polygateway-mock", version)]
struct Args {
    /// Delay before the first content delta, milliseconds.
    #[arg(long, default_value_t = 0)]
    ttft_ms: u64,
    /// Delay between content deltas, milliseconds.
    #[arg(long, default_value_t = 0)]
    inter_token_ms: u64,
    /// Content deltas per answer.
    #[arg(long, default_value_t = 4)]
    chunks: usize,
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let llm = MockUpstream::start(Behaviour::Healthy {
        ttft: Duration::from_millis(args.ttft_ms),
        inter_token: Duration::from_millis(args.inter_token_ms),
        chunks: args.chunks,
        content: MOCK_CONTENT.to_string(),
    })
    .await;
    let ocr = MockOcr::start(OcrFault::None).await;
    let anthropic = MockAnthropic::start().await;
    println!("LLM_BASE_URL={}", llm.base_url());
    println!("ANTHROPIC_BASE_URL={}", anthropic.base_url());
    println!("OCR_BASE_URL={}", ocr.base_url());
    let _ = std::io::stdout().flush();
    let _ = tokio::signal::ctrl_c().await;
}
