//! Reading MonkeyOCR's `/parse` result: the ZIP, its `*_middle.json`, and the layout elements in
//! it (`docs/monkeyocr.md`).
//!
//! Pure functions over bytes, no I/O: the transport downloads the ZIP and hands it here. Every
//! defect of the answer (unreadable ZIP, no middle JSON, malformed page, degenerate bbox) is a
//! [`TransportError::invalid`] — the service answered, the content is unusable. Unknown keys are
//! ignored; `discarded_blocks` (headers, footers) are not elements.

use std::borrow::Cow;
use std::io::{Cursor, Read};

use serde_json::Value;

use crate::error::TransportError;
use crate::types::OcrLayoutElement;

/// Elements over all pages in order, and `(width, height)` per page.
pub(crate) type MiddleLayout = (Vec<OcrLayoutElement>, Vec<(f64, f64)>);

/// Suffix that marks the middle JSON among the ZIP's entries.
const MIDDLE_SUFFIX: &str = "_middle.json";
/// Decompressed size cap of one middle JSON: a defence against a runaway or hostile archive.
const MAX_MIDDLE_JSON_BYTES: u64 = 256 * 1024 * 1024;
/// `blocks` nesting followed when collecting text (real files nest one level).
const MAX_BLOCK_DEPTH: usize = 8;

/// Read the layout out of a `/parse` result ZIP.
///
/// The middle JSON is the entry whose name ends with `_middle.json`. A `/parse/split` archive
/// holds one per page under `page_{i}/`; those are merged in numeric page order, and their pages
/// are numbered consecutively. When top-level middle files exist they are used alone (they
/// already cover the document), so a mixed archive is never counted twice.
pub(crate) fn parse_middle_zip(bytes: &[u8]) -> Result<MiddleLayout, TransportError> {
    let mut archive = zip::ZipArchive::new(Cursor::new(bytes))
        .map_err(|e| TransportError::invalid(format!("OCR layout ZIP is unreadable: {e}")))?;

    let mut names = Vec::with_capacity(archive.len());
    for index in 0..archive.len() {
        let entry = archive.by_index(index).map_err(|e| {
            TransportError::invalid(format!("OCR layout ZIP entry {index} is unreadable: {e}"))
        })?;
        let name = entry
            .name()
            .map_err(|e| {
                TransportError::invalid(format!("OCR layout ZIP entry {index} has a bad name: {e}"))
            })?
            .into_owned();
        names.push((index, name, entry.is_dir()));
    }

    let mut middles: Vec<(Option<u64>, &str, usize)> = names
        .iter()
        .filter(|(_, name, is_dir)| !is_dir && name.ends_with(MIDDLE_SUFFIX))
        .map(|(index, name, _)| (page_dir_number(name), name.as_str(), *index))
        .collect();
    if middles.is_empty() {
        let listed: Vec<&str> = names.iter().take(20).map(|(_, n, _)| n.as_str()).collect();
        return Err(TransportError::invalid(format!(
            "OCR layout ZIP has no *{MIDDLE_SUFFIX} (entries: [{}]{})",
            listed.join(", "),
            if names.len() > listed.len() {
                ", …"
            } else {
                ""
            }
        )));
    }
    if middles.iter().any(|(page, _, _)| page.is_none()) {
        middles.retain(|(page, _, _)| page.is_none());
    }
    middles.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(b.1)));

    let mut layout: MiddleLayout = (Vec::new(), Vec::new());
    for (_, name, index) in middles {
        let mut entry = archive.by_index(index).map_err(|e| {
            TransportError::invalid(format!("OCR layout ZIP entry {name} is unreadable: {e}"))
        })?;
        let mut raw = Vec::new();
        (&mut entry)
            .take(MAX_MIDDLE_JSON_BYTES + 1)
            .read_to_end(&mut raw)
            .map_err(|e| {
                TransportError::invalid(format!("OCR layout ZIP entry {name} is unreadable: {e}"))
            })?;
        if raw.len() as u64 > MAX_MIDDLE_JSON_BYTES {
            return Err(TransportError::invalid(format!(
                "OCR layout ZIP entry {name} exceeds {MAX_MIDDLE_JSON_BYTES} bytes"
            )));
        }
        append_middle_json(&raw, name, &mut layout)?;
    }
    Ok(layout)
}

/// Read the layout out of one middle JSON document (the ZIP's `*_middle.json`, or the inline
/// answer of the `return_type=middle_json` server variant).
pub(crate) fn parse_middle_json(bytes: &[u8]) -> Result<MiddleLayout, TransportError> {
    let mut layout = (Vec::new(), Vec::new());
    append_middle_json(bytes, "middle JSON", &mut layout)?;
    Ok(layout)
}

/// Parse one middle JSON and append its pages after those already in `layout`.
fn append_middle_json(
    bytes: &[u8],
    name: &str,
    layout: &mut MiddleLayout,
) -> Result<(), TransportError> {
    let text = std::str::from_utf8(bytes)
        .map_err(|e| TransportError::invalid(format!("OCR {name} is not UTF-8: {e}")))?;
    let doc: Value = serde_json::from_str(&quote_python_literals(text))
        .map_err(|e| TransportError::invalid(format!("OCR {name} is not valid JSON: {e}")))?;
    let pages = doc
        .get("pdf_info")
        .and_then(Value::as_array)
        .ok_or_else(|| TransportError::invalid(format!("OCR {name} has no pdf_info array")))?;

    let offset = layout.1.len();
    for (position, page) in pages.iter().enumerate() {
        let page_index = offset + page.get("page_idx").and_then(as_index).unwrap_or(position);
        layout.1.push(page_size(page, page_index, name)?);
        let blocks = match page.get("para_blocks") {
            None | Some(Value::Null) => continue,
            Some(Value::Array(blocks)) => blocks,
            Some(_) => {
                return Err(TransportError::invalid(format!(
                    "OCR {name} page {page_index}: para_blocks is not an array"
                )))
            }
        };
        for (block_index, block) in blocks.iter().enumerate() {
            layout
                .0
                .push(element(block, page_index, block_index, name)?);
        }
    }
    Ok(())
}

/// `page_size` = `[width, height]`, both finite and positive.
fn page_size(page: &Value, page_index: usize, name: &str) -> Result<(f64, f64), TransportError> {
    let size = page.get("page_size").and_then(Value::as_array);
    match size.map(|s| s.iter().map(coordinate).collect::<Vec<_>>()) {
        Some(v) if v.len() == 2 => match (v[0], v[1]) {
            (Some(w), Some(h)) if w.is_finite() && h.is_finite() && w > 0.0 && h > 0.0 => {
                Ok((w, h))
            }
            _ => Err(TransportError::invalid(format!(
                "OCR {name} page {page_index}: page_size {} is not a finite positive size",
                compact(page.get("page_size"))
            ))),
        },
        _ => Err(TransportError::invalid(format!(
            "OCR {name} page {page_index}: page_size missing or not [width, height]"
        ))),
    }
}

/// One `para_blocks` entry → element, with the bbox defence of docs/behaviour.md §7.4.
fn element(
    block: &Value,
    page_index: usize,
    block_index: usize,
    name: &str,
) -> Result<OcrLayoutElement, TransportError> {
    let at = || format!("OCR {name} page {page_index} block {block_index}");
    let kind = block
        .get("type")
        .and_then(Value::as_str)
        .ok_or_else(|| TransportError::invalid(format!("{}: no type", at())))?;
    let raw_bbox = block.get("bbox");
    let coords: Vec<Option<f64>> = raw_bbox
        .and_then(Value::as_array)
        .map(|b| b.iter().map(coordinate).collect())
        .unwrap_or_default();
    let [Some(x0), Some(y0), Some(x1), Some(y1)] = coords[..] else {
        return Err(TransportError::invalid(format!(
            "{} ({kind}): bbox {} is not four numbers",
            at(),
            compact(raw_bbox)
        )));
    };
    let defect = if ![x0, y0, x1, y1].iter().all(|c| c.is_finite()) {
        Some("is non-finite")
    } else if x0 > x1 || y0 > y1 {
        Some("is inverted")
    } else if x0 == x1 || y0 == y1 {
        Some("has zero area")
    } else {
        None
    };
    if let Some(defect) = defect {
        return Err(TransportError::invalid(format!(
            "{} ({kind}): bbox {} {defect}",
            at(),
            compact(raw_bbox)
        )));
    }
    Ok(OcrLayoutElement {
        kind: kind.to_owned(),
        bbox: (x0, y0, x1, y1),
        page_index,
        text: block_text(block),
    })
}

/// A bbox or size coordinate: a JSON number, or one of Python's non-standard literals (kept as
/// strings by [`quote_python_literals`]) so a NaN box is reported with its page and block.
fn coordinate(value: &Value) -> Option<f64> {
    match value {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => match s.as_str() {
            "NaN" => Some(f64::NAN),
            "Infinity" => Some(f64::INFINITY),
            "-Infinity" => Some(f64::NEG_INFINITY),
            _ => None,
        },
        _ => None,
    }
}

/// `page_idx` as an index; MonkeyOCR writes integers but floats such as `1.0` are tolerated.
fn as_index(value: &Value) -> Option<usize> {
    if let Some(n) = value.as_u64() {
        return usize::try_from(n).ok();
    }
    let f = value.as_f64()?;
    (f >= 0.0 && f.fract() == 0.0 && f < usize::MAX as f64).then_some(f as usize)
}

/// A short rendering of a JSON value for error messages.
fn compact(value: Option<&Value>) -> String {
    let text = value.map_or_else(|| "null".to_owned(), Value::to_string);
    if text.chars().count() > 120 {
        let head: String = text.chars().take(120).collect();
        format!("{head}…")
    } else {
        text
    }
}

/// Text of a block: its own `lines[].spans[]`, then nested `blocks[]` (tables, images), one line
/// per output line.
fn block_text(block: &Value) -> String {
    let mut lines = Vec::new();
    collect_lines(block, 0, &mut lines);
    lines.join("\n")
}

fn collect_lines(block: &Value, depth: usize, out: &mut Vec<String>) {
    if let Some(lines) = block.get("lines").and_then(Value::as_array) {
        for line in lines {
            let text = line_text(line);
            if !text.is_empty() {
                out.push(text);
            }
        }
    }
    if depth < MAX_BLOCK_DEPTH {
        if let Some(children) = block.get("blocks").and_then(Value::as_array) {
            for child in children {
                collect_lines(child, depth + 1, out);
            }
        }
    }
}

/// Spans of one line: `content`, else `html` (tables), else `latex`.
fn line_text(line: &Value) -> String {
    let mut text = String::new();
    for span in line
        .get("spans")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let piece = ["content", "html", "latex"]
            .iter()
            .filter_map(|key| span.get(*key).and_then(Value::as_str))
            .find(|s| !s.trim().is_empty());
        if let Some(piece) = piece {
            let piece = piece.trim();
            if let (Some(last), Some(first)) = (text.chars().last(), piece.chars().next()) {
                // Latin spans are separate words; CJK text runs on without spaces.
                if !is_cjk(last) && !is_cjk(first) {
                    text.push(' ');
                }
            }
            text.push_str(piece);
        }
    }
    text
}

fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3000..=0x30FF      // CJK punctuation, kana
        | 0x3400..=0x4DBF    // CJK extension A
        | 0x4E00..=0x9FFF    // CJK unified ideographs
        | 0xAC00..=0xD7AF    // Hangul syllables
        | 0xF900..=0xFAFF    // CJK compatibility ideographs
        | 0xFF00..=0xFFEF // full-width forms
    )
}

/// Python's `json.dumps` writes `NaN`, `Infinity` and `-Infinity` as bare literals, which JSON
/// (and serde_json) rejects. Quote them outside strings so one bad coordinate is reported where
/// it is instead of failing the whole document.
fn quote_python_literals(text: &str) -> Cow<'_, str> {
    if !text.contains("NaN") && !text.contains("Infinity") {
        return Cow::Borrowed(text);
    }
    const LITERALS: [&str; 3] = ["-Infinity", "Infinity", "NaN"];
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len() + 16);
    let (mut in_string, mut escaped) = (false, false);
    let (mut i, mut copied) = (0, 0);
    while i < bytes.len() {
        let b = bytes[i];
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            i += 1;
            continue;
        }
        if b == b'"' {
            in_string = true;
            i += 1;
            continue;
        }
        // All literals start with an ASCII byte, so `i` is a char boundary when one matches.
        match LITERALS
            .iter()
            .find(|l| bytes[i..].starts_with(l.as_bytes()))
        {
            Some(literal) => {
                out.push_str(&text[copied..i]);
                out.push('"');
                out.push_str(literal);
                out.push('"');
                i += literal.len();
                copied = i;
            }
            None => i += 1,
        }
    }
    out.push_str(&text[copied..]);
    Cow::Owned(out)
}

/// The `N` of a `page_N` directory in an entry path, if any.
fn page_dir_number(name: &str) -> Option<u64> {
    let mut components: Vec<&str> = name.split('/').collect();
    components.pop(); // the file itself
    components
        .iter()
        .rev()
        .find_map(|c| c.strip_prefix("page_").and_then(|n| n.parse().ok()))
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use polygateway_actors::FailureClass;
    use serde_json::json;

    use super::*;

    fn zip_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let mut writer = zip::ZipWriter::new(Cursor::new(Vec::new()));
        for (name, data) in entries {
            writer
                .start_file(*name, zip::write::SimpleFileOptions::default())
                .unwrap();
            writer.write_all(data).unwrap();
        }
        writer.finish().unwrap().into_inner()
    }

    fn span_line(text: &str) -> Value {
        json!({"bbox": [0, 0, 1, 1], "spans": [{"type": "text", "content": text, "score": 1.0}]})
    }

    fn doc(pages: Vec<Value>) -> Vec<u8> {
        serde_json::to_vec(
            &json!({"pdf_info": pages, "_parse_type": "ocr", "_version_name": "1.1.0"}),
        )
        .unwrap()
    }

    fn page(idx: usize, blocks: Vec<Value>) -> Value {
        json!({"page_idx": idx, "page_size": [612.0, 792.0], "para_blocks": blocks,
               "discarded_blocks": [{"type": "header", "bbox": [0, 0, 600, 20],
                                     "lines": [span_line("running header")]}],
               "preproc_blocks": [], "images": [], "tables": [], "future_key": {"x": 1}})
    }

    fn assert_invalid(result: Result<MiddleLayout, TransportError>, needle: &str) {
        let err = result.expect_err("expected ResultInvalid");
        assert_eq!(err.class, FailureClass::ResultInvalid, "{err}");
        assert!(err.answered);
        assert!(
            err.message.contains(needle),
            "message {:?} lacks {needle:?}",
            err.message
        );
    }

    #[test]
    fn realistic_zip_yields_elements_in_order_with_text_and_sizes() {
        let table = json!({"type": "table", "bbox": [314, 356, 557, 459], "index": 13.0,
            "blocks": [{"type": "table_body", "bbox": [314, 356, 557, 459], "group_id": 0,
                "lines": [{"bbox": [314, 356, 557, 459], "spans": [{"bbox": [314, 356, 557, 459],
                    "score": 1.0, "html": "<table><tr><td>A</td></tr></table>", "type": "table",
                    "image_path": "4d6f62f2.jpg"}]}]},
                {"type": "table_caption", "bbox": [314, 340, 557, 352], "lines": [span_line("Table 1")]}],
            "page_num": "page_3", "page_size": [612.0, 792.0]});
        let middle = doc(vec![
            page(
                0,
                vec![
                    json!({"type": "title", "bbox": [61, 56, 548, 106], "index": 0,
                       "lines": [span_line("Aggregation"), span_line("Methods")]}),
                    json!({"type": "text", "bbox": [61.5, 120.25, 548, 300], "index": 1.5,
                       "lines": [{"spans": [{"type": "text", "content": "value"},
                                            {"type": "inline_equation", "content": "x^2"},
                                            {"type": "text", "content": "holds"}]}]}),
                ],
            ),
            page(1, vec![table]),
        ]);
        let zip = zip_of(&[
            ("doc.md", b"# Aggregation"),
            ("doc_content_list.json", b"[]"),
            ("doc_middle.json", &middle),
            ("images/abc.jpg", b"\xFF\xD8\xFF"),
        ]);
        let (elements, pages) = parse_middle_zip(&zip).unwrap();
        assert_eq!(pages, vec![(612.0, 792.0), (612.0, 792.0)]);
        let kinds: Vec<&str> = elements.iter().map(|e| e.kind.as_str()).collect();
        assert_eq!(kinds, ["title", "text", "table"]);
        assert_eq!(elements[0].text, "Aggregation\nMethods");
        assert_eq!(elements[0].bbox, (61.0, 56.0, 548.0, 106.0));
        assert_eq!(elements[1].text, "value x^2 holds");
        assert_eq!(elements[1].bbox, (61.5, 120.25, 548.0, 300.0));
        assert_eq!(elements[2].page_index, 1);
        assert_eq!(
            elements[2].text,
            "<table><tr><td>A</td></tr></table>\nTable 1"
        );
        assert!(elements.iter().all(|e| !e.text.contains("running header")));
    }

    #[test]
    fn split_pages_merge_in_numeric_order() {
        let one = |title: &str| {
            doc(vec![page(
                0,
                vec![json!({"type": "title", "bbox": [1, 1, 2, 2],
                                          "lines": [span_line(title)]})],
            )])
        };
        let (p0, p2, p10) = (one("zero"), one("two"), one("ten"));
        let zip = zip_of(&[
            ("out/page_10/doc_middle.json", &p10),
            ("out/page_2/doc_middle.json", &p2),
            ("out/page_0/doc_middle.json", &p0),
        ]);
        let (elements, pages) = parse_middle_zip(&zip).unwrap();
        let got: Vec<(&str, usize)> = elements
            .iter()
            .map(|e| (e.text.as_str(), e.page_index))
            .collect();
        assert_eq!(got, [("zero", 0), ("two", 1), ("ten", 2)]);
        assert_eq!(pages.len(), 3);
    }

    #[test]
    fn top_level_middle_wins_over_split_pages() {
        let whole = doc(vec![page(0, vec![]), page(1, vec![])]);
        let part = doc(vec![page(0, vec![])]);
        let zip = zip_of(&[
            ("page_0/doc_middle.json", &part),
            ("doc_middle.json", &whole),
        ]);
        let (_, pages) = parse_middle_zip(&zip).unwrap();
        assert_eq!(pages.len(), 2);
    }

    #[test]
    fn empty_pages_are_a_legitimate_empty_layout() {
        let zip = zip_of(&[("d_middle.json", &doc(vec![page(0, vec![])]))]);
        let (elements, pages) = parse_middle_zip(&zip).unwrap();
        assert!(elements.is_empty());
        assert_eq!(pages, vec![(612.0, 792.0)]);
    }

    #[test]
    fn unreadable_zip_and_missing_middle_are_invalid() {
        assert_invalid(parse_middle_zip(b"PK\x03\x04 truncated"), "unreadable");
        assert_invalid(parse_middle_zip(b""), "unreadable");
        let zip = zip_of(&[("doc.md", b"x"), ("doc_content_list.json", b"[]")]);
        assert_invalid(parse_middle_zip(&zip), "doc_content_list.json");
    }

    #[test]
    fn malformed_documents_are_invalid() {
        assert_invalid(parse_middle_json(b"{"), "not valid JSON");
        assert_invalid(parse_middle_json(b"{\"pages\": []}"), "no pdf_info");
        assert_invalid(
            parse_middle_json(br#"{"pdf_info":[{"page_idx":0,"para_blocks":[]}]}"#),
            "page 0: page_size missing",
        );
        assert_invalid(
            parse_middle_json(
                br#"{"pdf_info":[{"page_idx":0,"page_size":[0,792],"para_blocks":[]}]}"#,
            ),
            "not a finite positive size",
        );
        assert_invalid(
            parse_middle_json(&doc(vec![page(0, vec![json!({"bbox": [1, 1, 2, 2]})])])),
            "page 0 block 0: no type",
        );
    }

    #[test]
    fn bbox_defence_names_page_and_block() {
        let bad = |bbox: Value| {
            doc(vec![
                page(0, vec![json!({"type": "text", "bbox": [1, 1, 5, 5]})]),
                page(
                    1,
                    vec![
                        json!({"type": "text", "bbox": [1, 1, 5, 5]}),
                        json!({"type": "table", "bbox": bbox}),
                    ],
                ),
            ])
        };
        assert_invalid(
            parse_middle_json(&bad(json!([10, 10, 5, 20]))),
            "page 1 block 1 (table)",
        );
        assert_invalid(parse_middle_json(&bad(json!([10, 10, 5, 20]))), "inverted");
        assert_invalid(parse_middle_json(&bad(json!([10, 20, 30, 5]))), "inverted");
        assert_invalid(
            parse_middle_json(&bad(json!([10, 10, 10, 20]))),
            "zero area",
        );
        assert_invalid(
            parse_middle_json(&bad(json!([10, 10, 30, 10]))),
            "zero area",
        );
        assert_invalid(
            parse_middle_json(&bad(json!([10, 10, 30]))),
            "not four numbers",
        );
        assert_invalid(parse_middle_json(&bad(json!(null))), "not four numbers");
        assert_invalid(
            parse_middle_json(&bad(json!(["a", 1, 2, 3]))),
            "not four numbers",
        );
    }

    #[test]
    fn python_non_finite_literals_are_located() {
        let text = r#"{"pdf_info":[{"page_idx":0,"page_size":[612.0,792.0],"para_blocks":[
            {"type":"text","bbox":[1,1,5,5],"lines":[{"spans":[{"content":"NaN Infinity \"NaN\""}]}]},
            {"type":"image","bbox":[1,NaN,5,-Infinity]}]}]}"#;
        assert_invalid(parse_middle_json(text.as_bytes()), "page 0 block 1 (image)");
        assert_invalid(parse_middle_json(text.as_bytes()), "non-finite");
        let inf = text.replace("[1,NaN,5,-Infinity]", "[1,2,Infinity,5]");
        assert_invalid(parse_middle_json(inf.as_bytes()), "non-finite");
        // Literals inside strings are left alone.
        let fine = text.replace("[1,NaN,5,-Infinity]", "[1,2,5,6]");
        let (elements, _) = parse_middle_json(fine.as_bytes()).unwrap();
        assert_eq!(elements[0].text, "NaN Infinity \"NaN\"");
    }

    #[test]
    fn cjk_spans_join_without_spaces() {
        let middle = doc(vec![page(
            0,
            vec![json!({"type": "text", "bbox": [1, 1, 5, 5],
            "lines": [{"spans": [{"content": "聚合"}, {"content": "方法"}, {"content": "v2"}]}]})],
        )]);
        let (elements, _) = parse_middle_json(&middle).unwrap();
        assert_eq!(elements[0].text, "聚合方法v2");
    }

    #[test]
    fn missing_page_idx_falls_back_to_position_and_float_idx_is_accepted() {
        let text = r#"{"pdf_info":[
            {"page_size":[100,200],"para_blocks":[{"type":"text","bbox":[1,1,2,2]}]},
            {"page_idx":1.0,"page_size":[100,200],"para_blocks":[{"type":"text","bbox":[1,1,2,2]}]}]}"#;
        let (elements, pages) = parse_middle_json(text.as_bytes()).unwrap();
        assert_eq!(
            elements.iter().map(|e| e.page_index).collect::<Vec<_>>(),
            [0, 1]
        );
        assert_eq!(pages, vec![(100.0, 200.0), (100.0, 200.0)]);
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            if let Err(err) = parse_middle_zip(&bytes) {
                proptest::prop_assert_eq!(err.class, FailureClass::ResultInvalid);
            }
            if let Err(err) = parse_middle_json(&bytes) {
                proptest::prop_assert_eq!(err.class, FailureClass::ResultInvalid);
            }
        }

        #[test]
        fn literal_quoting_never_panics_and_keeps_plain_text(text in "[\\PC\"NaInfity{}\\[\\],:-]{0,64}") {
            let quoted = quote_python_literals(&text);
            if !text.contains("NaN") && !text.contains("Infinity") {
                proptest::prop_assert_eq!(quoted.as_ref(), text.as_str());
            }
        }
    }
}

#[cfg(test)]
mod examples {
    //! Usage cases of crate-private items (they were doc examples while the items were public).

    #[test]
    fn middle_layout_example() {
        use super::{parse_middle_json, MiddleLayout};
        use polygateway_testkit::mock_ocr::fixture::{
            sample_middle_json, SAMPLE_ELEMENTS, SAMPLE_PAGE_SIZE,
        };
        let doc = sample_middle_json().to_string();
        let (elements, page_sizes): MiddleLayout = parse_middle_json(doc.as_bytes()).unwrap();
        assert_eq!(elements.len(), SAMPLE_ELEMENTS.len());
        assert_eq!(elements[0].kind, "title");
        assert_eq!(page_sizes, vec![SAMPLE_PAGE_SIZE; 3]);
    }

    #[test]
    fn parse_middle_zip_example() {
        use super::parse_middle_zip;
        let err = parse_middle_zip(b"not a zip").unwrap_err();
        assert_eq!(err.class, crate::ports::FailureClass::ResultInvalid);
    }

    #[test]
    fn parse_middle_json_example() {
        use super::parse_middle_json;
        let doc = br#"{"pdf_info":[{"page_idx":0,"page_size":[612.0,792.0],
          "para_blocks":[{"type":"title","bbox":[61,56,548,106],"index":0.0,
            "lines":[{"spans":[{"type":"text","content":"Results"}]}]}]}]}"#;
        let (elements, pages) = parse_middle_json(doc).unwrap();
        assert_eq!(elements[0].kind, "title");
        assert_eq!(elements[0].text, "Results");
        assert_eq!(pages, vec![(612.0, 792.0)]);
    }
}
