//! OCR through the governed path: text transcription, layout parsing, per-source health.
//!
//! ```text
//! cargo run --example ocr -- [path/to/page.png]
//! ```
//!
//! With `OCR__…` sources configured it calls them; otherwise the built-in MonkeyOCR mock.

use polygateway::config::ScopeKind;
use polygateway::{CallOptions, Gateway};
use polygateway_testkit::demo::settings_or_mock;

/// A PNG signature with a minimal header: enough for the mock (a real service needs a real page).
const DEMO_PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR demo page";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let image = match std::env::args().nth(1) {
        Some(path) => std::fs::read(path)?,
        None => DEMO_PNG.to_vec(),
    };
    let (settings, _mocks) = settings_or_mock(&[("OCR", ScopeKind::Ocr)], "").await;
    let gw = Gateway::from_settings(settings, "OCR").await?;
    let ocr = gw.ocr_scope("OCR")?;
    println!("health: {:?}", ocr.check_health().await);
    let text = ocr
        .recognize_text(image.clone(), CallOptions::new())
        .await?;
    println!(
        "text ({} via {}):\n{}\n",
        text.provenance.call_id, text.provenance.source_name, text.text
    );
    let layout = ocr.parse_layout(image, CallOptions::new()).await?;
    for e in &layout.elements {
        let preview: String = e.text.chars().take(50).collect();
        println!(
            "page {} {:<20} {:?} {preview}",
            e.page_index, e.kind, e.bbox
        );
    }
    match ocr
        .recognize_text(b"GIF89a".to_vec(), CallOptions::new())
        .await
    {
        Err(e) => println!("\na GIF is refused locally, nothing sent: {e}"),
        Ok(_) => println!("\nunexpected: a GIF was accepted"),
    }
    gw.shutdown().await;
    Ok(())
}
