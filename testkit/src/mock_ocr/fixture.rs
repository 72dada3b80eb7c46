//! The documents the mock OCR server answers with: a realistic three-page `*_middle.json`
//! (modelled on real MonkeyOCR output) and the `/parse` result ZIP built around it.
//!
//! Public so tests can assert against the same fixture the server serves.

use std::io::{Cursor, Write};

use serde_json::{json, Value};

/// Text `/ocr/text` answers in the normal mode.
///
/// ```
/// use polygateway_testkit::mock_ocr::fixture::SAMPLE_TEXT;
/// use polygateway_testkit::mock_ocr::{MockOcr, OcrFault};
/// use polygateway_testkit::mock_settings;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let mock = MockOcr::start(OcrFault::None).await;
/// let settings = mock_settings(&[("OCR", mock.base_url().as_str())], &[]);
/// let gw = polygateway::Gateway::from_settings(settings, "OCR").await.unwrap();
/// let png = b"\x89PNG\r\n\x1a\n a scanned page".to_vec();
/// let result = gw.recognize_text(png).await.unwrap();
/// assert_eq!(result.text, SAMPLE_TEXT);
/// # gw.shutdown().await;
/// # }
/// ```
pub const SAMPLE_TEXT: &str =
    "MonkeyOCR: Document Parsing with a Structure-Recognition-Relation Triplet Paradigm\n\
     We introduce the SRR paradigm for document parsing.";

/// `(page_index, type)` of every `para_blocks` entry of [`sample_middle_json`], in order.
///
/// ```
/// use polygateway_testkit::mock_ocr::fixture::SAMPLE_ELEMENTS;
/// use polygateway_testkit::mock_ocr::{MockOcr, OcrFault};
/// use polygateway_testkit::mock_settings;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let mock = MockOcr::start(OcrFault::None).await;
/// let settings = mock_settings(&[("OCR", mock.base_url().as_str())], &[]);
/// let gw = polygateway::Gateway::from_settings(settings, "OCR").await.unwrap();
/// let png = b"\x89PNG\r\n\x1a\n a scanned page".to_vec();
/// let layout = gw.parse_layout(png).await.unwrap();
/// let seen: Vec<(usize, &str)> =
///     layout.elements.iter().map(|e| (e.page_index, e.kind.as_str())).collect();
/// assert_eq!(seen, SAMPLE_ELEMENTS);
/// # gw.shutdown().await;
/// # }
/// ```
pub const SAMPLE_ELEMENTS: &[(usize, &str)] = &[
    (0, "title"),
    (0, "text"),
    (0, "interline_equation"),
    (0, "text"),
    (1, "text"),
    (1, "table"),
    (1, "text"),
    (2, "image"),
    (2, "title"),
    (2, "list"),
];

/// Page size of every page of the fixture (US letter, in points).
///
/// ```
/// use polygateway_testkit::mock_ocr::fixture::{sample_middle_json, SAMPLE_PAGE_SIZE};
/// let (width, height) = SAMPLE_PAGE_SIZE;
/// for page in sample_middle_json()["pdf_info"].as_array().unwrap() {
///     assert_eq!(page["page_size"], serde_json::json!([width, height]));
/// }
/// ```
pub const SAMPLE_PAGE_SIZE: (f64, f64) = (612.0, 792.0);

/// The HTML of the fixture's table (page 1, block 1).
///
/// ```
/// use std::io::Read;
/// use polygateway_testkit::mock_ocr::fixture::{layout_zip, SAMPLE_TABLE_HTML};
/// // The Markdown file of the result ZIP embeds the table as HTML, as MonkeyOCR does.
/// let mut zip = zip::ZipArchive::new(std::io::Cursor::new(layout_zip("scan", None))).unwrap();
/// let mut markdown = String::new();
/// zip.by_name("scan.md").unwrap().read_to_string(&mut markdown).unwrap();
/// assert!(markdown.contains(SAMPLE_TABLE_HTML));
/// ```
pub const SAMPLE_TABLE_HTML: &str =
    "<table><tr><td>Method</td><td>Score</td></tr><tr><td>MonkeyOCR</td><td>87.4</td></tr></table>";

fn line(bbox: [i64; 4], spans: Vec<Value>) -> Value {
    json!({"bbox": bbox, "spans": spans})
}

fn span(kind: &str, bbox: [i64; 4], content: &str) -> Value {
    json!({"type": kind, "bbox": bbox, "score": 1.0, "content": content})
}

fn text_block(kind: &str, bbox: [i64; 4], index: Value, lines: Vec<Value>) -> Value {
    json!({"type": kind, "bbox": bbox, "lines": lines, "index": index})
}

fn page(page_idx: usize, para_blocks: Vec<Value>, discarded: Vec<Value>) -> Value {
    json!({
        "page_idx": page_idx,
        "page_size": [SAMPLE_PAGE_SIZE.0, SAMPLE_PAGE_SIZE.1],
        "preproc_blocks": para_blocks.clone(),
        "layout_bboxes": [],
        "images": [], "tables": [], "interline_equations": [],
        "discarded_blocks": discarded,
        "para_blocks": para_blocks,
        "_layout_tree": [],
        "need_drop": false,
        "drop_reason": []
    })
}

fn header_footer(page_idx: usize) -> Vec<Value> {
    vec![
        text_block(
            "header",
            [61, 20, 548, 40],
            json!(0),
            vec![line(
                [61, 20, 548, 40],
                vec![span("text", [61, 20, 548, 40], "arXiv preprint")],
            )],
        ),
        text_block(
            "page_number",
            [300, 760, 312, 772],
            json!(1),
            vec![line(
                [300, 760, 312, 772],
                vec![span(
                    "text",
                    [300, 760, 312, 772],
                    &(page_idx + 1).to_string(),
                )],
            )],
        ),
    ]
}

/// A realistic three-page middle JSON: title, text with inline equations, interline equation,
/// a table and an image with nested `blocks`, a list, float `index` values, headers and footers
/// in `discarded_blocks`, and keys the transport must ignore.
///
/// ```
/// use polygateway_testkit::mock_ocr::fixture::{sample_middle_json, SAMPLE_ELEMENTS};
/// let doc = sample_middle_json();
/// let pages = doc["pdf_info"].as_array().unwrap();
/// assert_eq!(pages.len(), 3);
/// assert_eq!(pages[1]["para_blocks"][1]["type"], "table");
/// let blocks: usize = pages.iter().map(|p| p["para_blocks"].as_array().unwrap().len()).sum();
/// assert_eq!(blocks, SAMPLE_ELEMENTS.len());
/// ```
pub fn sample_middle_json() -> Value {
    let page0 = vec![
        text_block(
            "title",
            [61, 56, 548, 106],
            json!(0),
            vec![line(
                [61, 56, 548, 106],
                vec![span(
                    "text",
                    [61, 56, 548, 106],
                    "MonkeyOCR: Document Parsing with a Structure-Recognition-Relation Triplet Paradigm",
                )],
            )],
        ),
        text_block(
            "text",
            [61, 120, 548, 220],
            json!(1.0),
            vec![
                line(
                    [61, 120, 548, 140],
                    vec![
                        span("text", [61, 120, 200, 140], "We introduce the"),
                        span("inline_equation", [201, 120, 230, 140], "\\mathrm{SRR}"),
                        span("text", [231, 120, 548, 140], "paradigm for document parsing."),
                    ],
                ),
                line(
                    [61, 142, 548, 162],
                    vec![span("text", [61, 142, 548, 162], "It splits parsing into three tasks.")],
                ),
            ],
        ),
        text_block(
            "interline_equation",
            [200, 230, 410, 260],
            json!(2),
            vec![line(
                [200, 230, 410, 260],
                vec![span("interline_equation", [200, 230, 410, 260], "E = mc^2")],
            )],
        ),
        text_block(
            "text",
            [61, 270, 548, 400],
            json!(3.5),
            vec![line(
                [61, 270, 548, 290],
                vec![span("text", [61, 270, 548, 290], "结构识别关系三元组范式。")],
            )],
        ),
    ];
    let table = json!({
        "type": "table", "bbox": [314, 356, 557, 459], "index": 13.0,
        "page_num": "page_1", "page_size": [SAMPLE_PAGE_SIZE.0, SAMPLE_PAGE_SIZE.1],
        "blocks": [
            {"type": "table_caption", "bbox": [314, 340, 557, 352], "group_id": 0, "index": 12,
             "lines": [line([314, 340, 557, 352], vec![span("text", [314, 340, 557, 352], "Table 1: Results")])]},
            {"type": "table_body", "bbox": [314, 356, 557, 459], "group_id": 0, "index": 13,
             "lines": [{"bbox": [314, 356, 557, 459], "spans": [{
                 "bbox": [314, 356, 557, 459], "score": 1.0, "html": SAMPLE_TABLE_HTML,
                 "type": "table", "image_path": "4d6f62f2.jpg"}]}]},
            {"type": "table_footnote", "bbox": [314, 461, 557, 470], "group_id": 0, "index": 14,
             "lines": [line([314, 461, 557, 470], vec![span("text", [314, 461, 557, 470], "Higher is better.")])]}
        ]
    });
    let page1 = vec![
        text_block(
            "text",
            [61, 60, 548, 200],
            json!(11),
            vec![line(
                [61, 60, 548, 80],
                vec![span(
                    "text",
                    [61, 60, 548, 80],
                    "Table 1 compares the methods.",
                )],
            )],
        ),
        table,
        text_block(
            "text",
            [61, 480, 548, 600],
            json!(14.5),
            vec![line(
                [61, 480, 548, 500],
                vec![span(
                    "text",
                    [61, 480, 548, 500],
                    "The gap widens on long documents.",
                )],
            )],
        ),
    ];
    let image = json!({
        "type": "image", "bbox": [100, 100, 500, 400], "index": 20,
        "blocks": [
            {"type": "image_body", "bbox": [100, 100, 500, 380], "group_id": 0,
             "lines": [{"bbox": [100, 100, 500, 380], "spans": [{
                 "bbox": [100, 100, 500, 380], "score": 0.98, "type": "image",
                 "image_path": "9b1c0e7a.jpg"}]}]},
            {"type": "image_caption", "bbox": [100, 382, 500, 400], "group_id": 0,
             "lines": [line([100, 382, 500, 400], vec![span("text", [100, 382, 500, 400], "Figure 1: Pipeline")])]}
        ]
    });
    let page2 = vec![
        image,
        text_block(
            "title",
            [61, 420, 300, 450],
            json!(21),
            vec![line(
                [61, 420, 300, 450],
                vec![span("text", [61, 420, 300, 450], "Conclusion")],
            )],
        ),
        text_block(
            "list",
            [61, 460, 548, 560],
            json!(22.0),
            vec![
                line(
                    [61, 460, 548, 480],
                    vec![span("text", [61, 460, 548, 480], "1. Structure")],
                ),
                line(
                    [61, 482, 548, 502],
                    vec![span("text", [61, 482, 548, 502], "2. Recognition")],
                ),
            ],
        ),
    ];
    json!({
        "pdf_info": [
            page(0, page0, header_footer(0)),
            page(1, page1, header_footer(1)),
            page(2, page2, header_footer(2)),
        ],
        "_parse_type": "ocr",
        "_version_name": "1.1.0",
        "lang": "en"
    })
}

/// [`sample_middle_json`] with page 1 block 1 (the table) given a zero-width bbox.
pub(crate) fn degenerate_middle_json() -> Value {
    let mut doc = sample_middle_json();
    doc["pdf_info"][1]["para_blocks"][1]["bbox"] = json!([314, 356, 314, 459]);
    doc
}

/// A one-page middle JSON with no content (only a discarded header): a blank scan.
pub(crate) fn blank_middle_json() -> Value {
    json!({"pdf_info": [page(0, vec![], header_footer(0))], "_parse_type": "ocr", "_version_name": "1.1.0"})
}

/// The `/parse` result ZIP for `middle` (omitted when `None`), with the other files MonkeyOCR
/// writes: `{stem}.md`, `{stem}_content_list.json`, `{stem}_middle.json`, an extracted image.
///
/// ```
/// use polygateway_testkit::mock_ocr::fixture::{layout_zip, sample_middle_json};
/// let names = |bytes: Vec<u8>| {
///     let zip = zip::ZipArchive::new(std::io::Cursor::new(bytes)).unwrap();
///     zip.file_names().map(|name| name.unwrap().into_owned()).collect::<Vec<_>>()
/// };
/// let full = names(layout_zip("scan", Some(&sample_middle_json())));
/// assert!(full.contains(&"scan_middle.json".to_string()));
/// assert!(full.contains(&"scan.md".to_string()));
/// // `None` builds the archive of a `MissingMiddleJson` fault.
/// assert!(!names(layout_zip("scan", None)).contains(&"scan_middle.json".to_string()));
/// ```
pub fn layout_zip(stem: &str, middle: Option<&Value>) -> Vec<u8> {
    let mut files: Vec<(String, Vec<u8>)> = vec![
        (
            format!("{stem}.md"),
            format!("# MonkeyOCR\n\n{SAMPLE_TEXT}\n\n{SAMPLE_TABLE_HTML}\n").into_bytes(),
        ),
        (
            format!("{stem}_content_list.json"),
            serde_json::to_vec(&json!([
                {"type": "text", "text": "MonkeyOCR", "text_level": 1, "page_idx": 0},
                {"type": "table", "img_path": "images/4d6f62f2.jpg", "table_body": SAMPLE_TABLE_HTML, "page_idx": 1}
            ]))
            .expect("static JSON serialises"),
        ),
        (
            "images/4d6f62f2.jpg".to_owned(),
            vec![0xFF, 0xD8, 0xFF, 0xE0, 0, 0x10],
        ),
    ];
    if let Some(middle) = middle {
        files.push((
            format!("{stem}_middle.json"),
            serde_json::to_vec(middle).expect("JSON values serialise"),
        ));
    }
    let mut writer = zip::ZipWriter::new(Cursor::new(Vec::new()));
    for (name, data) in files {
        writer
            .start_file(name, zip::write::SimpleFileOptions::default())
            .expect("in-memory ZIP entry");
        writer.write_all(&data).expect("in-memory ZIP write");
    }
    writer.finish().expect("in-memory ZIP").into_inner()
}

#[cfg(test)]
mod examples {
    //! Usage cases of crate-private items (they were doc examples while the items were public).

    #[test]
    fn degenerate_middle_json_example() {
        use crate::mock_ocr::fixture::{degenerate_middle_json, sample_middle_json};
        let bad = degenerate_middle_json();
        let bbox = &bad["pdf_info"][1]["para_blocks"][1]["bbox"];
        assert_eq!(bbox[0], bbox[2], "x0 == x1: zero width");
        assert_ne!(bad, sample_middle_json());
    }

    #[test]
    fn blank_middle_json_example() {
        use crate::mock_ocr::fixture::blank_middle_json;
        let doc = blank_middle_json();
        let pages = doc["pdf_info"].as_array().unwrap();
        assert_eq!(pages.len(), 1);
        assert!(pages[0]["para_blocks"].as_array().unwrap().is_empty());
        assert!(!pages[0]["discarded_blocks"].as_array().unwrap().is_empty());
    }
}
