//! Property fuzzing of the parsers that read what upstreams and operators hand us: the SSE
//! framer, the configuration parser (map and `.env` file), the structured-output repair ladder
//! and the MonkeyOCR middle-JSON/ZIP reader. Each target must never panic on arbitrary input,
//! and, for well-formed input, give the same result however the input is chunked or wrapped.
//!
//! `cargo fuzz` needs a nightly toolchain; these run on stable, in CI, with case counts bounded
//! so the whole file stays within a few seconds in a debug build. Inputs that ever failed are
//! kept by proptest in `src/fuzz_parsers.proptest-regressions` and replayed first (the
//! first entry is the empty-chunk-between-CR-and-LF case this target found in the SSE framer).

use std::collections::BTreeMap;
use std::io::Write;

use crate::config::{Settings, GLOBAL_KEYS, SCOPE_KEYS, SOURCE_FIELDS};
use crate::ports::FailureClass;
use crate::structured::{repair_json, run_ladder, LadderPlan};
use crate::transport::ocr::middle::{parse_middle_json, parse_middle_zip};
use crate::transport::sse::{SseEvent, SseParser};
use crate::{GatewayError, LlmResponse, Message};
use proptest::prelude::*;
use serde_json::{json, Value};

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        max_shrink_iters: 2_000,
        ..ProptestConfig::default()
    }
}

// ---------------------------------------------------------------- SSE framer

/// Pieces real and hostile streams are made of: field names, every line end, comments, the
/// sentinel, NULs, multi-byte characters, runs of filler, and any byte at all.
fn sse_piece() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        3 => Just(b"data:".to_vec()),
        3 => Just(b"data: ".to_vec()),
        3 => Just(b"\n".to_vec()),
        2 => Just(b"\r".to_vec()),
        2 => Just(b"\r\n".to_vec()),
        1 => Just(b":".to_vec()),
        1 => Just(b": keep-alive\n".to_vec()),
        1 => Just(b"[DONE]".to_vec()),
        1 => Just(b"event: x\n".to_vec()),
        1 => Just(b"\0".to_vec()),
        1 => Just("é你😀".as_bytes().to_vec()),
        1 => Just(b"{\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}".to_vec()),
        1 => (0usize..3000).prop_map(|n| vec![b'x'; n]),
        2 => proptest::collection::vec(any::<u8>(), 1..8),
    ]
}

fn sse_bytes() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(sse_piece(), 0..80).prop_map(|p| p.concat())
}

/// Events (and whether the parser refused the input) after feeding `bytes` cut at `cuts`.
fn frame(bytes: &[u8], cuts: &[usize]) -> (Vec<SseEvent>, bool) {
    let mut parser = SseParser::new();
    let mut events = Vec::new();
    let mut start = 0;
    let mut bounds: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    bounds.sort_unstable();
    bounds.push(bytes.len());
    for end in bounds {
        if parser.feed(&bytes[start..end], &mut events).is_err() {
            return (events, true);
        }
        start = end;
    }
    let refused = parser.finish(&mut events).is_err();
    (events, refused)
}

proptest! {
    #![proptest_config(config(384))]

    /// Any bytes, any chunking: no panic, and exactly the events of feeding it whole (also
    /// one byte at a time, which splits every CRLF and every UTF-8 character).
    #[test]
    fn sse_framing_is_chunking_invariant(
        bytes in sse_bytes(),
        cuts in proptest::collection::vec(any::<usize>(), 0..12),
    ) {
        let whole = frame(&bytes, &[]);
        prop_assert_eq!(&frame(&bytes, &cuts), &whole);
        let every: Vec<usize> = (0..bytes.len()).collect();
        prop_assert_eq!(&frame(&bytes, &every), &whole);
    }

    /// Well-formed frames come out as they went in, whatever the line ends and the chunking.
    #[test]
    fn well_formed_frames_round_trip(
        payloads in proptest::collection::vec("[^\r\n]{0,40}", 0..10),
        eol in prop_oneof![Just("\n"), Just("\r\n"), Just("\r")],
        cuts in proptest::collection::vec(any::<usize>(), 0..8),
    ) {
        let mut text = String::new();
        for p in &payloads {
            text.push_str(&format!(": ping{eol}data: {p}{eol}{eol}"));
        }
        text.push_str(&format!("data: [DONE]{eol}{eol}"));
        let (events, refused) = frame(text.as_bytes(), &cuts);
        prop_assert!(!refused);
        let mut expected: Vec<SseEvent> = payloads
            .iter()
            .map(|p| {
                if p.trim() == "[DONE]" {
                    SseEvent::Done
                } else {
                    SseEvent::Data(p.clone())
                }
            })
            .collect();
        expected.push(SseEvent::Done);
        prop_assert_eq!(events, expected);
    }
}

// ---------------------------------------------------------------- configuration parser

fn config_key() -> impl Strategy<Value = String> {
    let scope = prop_oneof![Just("LLM"), Just("EMBED"), Just("OCR"), Just("X_Y")];
    let provider = prop_oneof![Just("OPENAI"), Just("QWEN"), Just("MONKEY"), Just("A")];
    let index = prop_oneof![Just("1"), Just("2"), Just("0"), Just("x")];
    prop_oneof![
        4 => (scope.clone(), provider, index, proptest::sample::select(SOURCE_FIELDS.to_vec()))
            .prop_map(|(s, p, n, f)| format!("{s}__{p}__{n}__{f}")),
        2 => (scope, proptest::sample::select(SCOPE_KEYS.to_vec()))
            .prop_map(|(s, k)| format!("{s}__{k}")),
        2 => proptest::sample::select(GLOBAL_KEYS.to_vec()).prop_map(str::to_string),
        1 => "[A-Z_]{1,12}(__[A-Z0-9_]{0,8}){0,4}",
    ]
}

fn config_value() -> impl Strategy<Value = String> {
    prop_oneof![
        proptest::sample::select(vec![
            "",
            "0",
            "1",
            "-1",
            "3",
            "0.5",
            "1e309",
            "NaN",
            "inf",
            "-0",
            "18446744073709551616",
            "true",
            "false",
            "memory",
            "redis",
            "sqlite",
            "postgres",
            "salvage",
            "retry",
            "http://127.0.0.1:9/v1",
            "redis://127.0.0.1:1",
            "{",
            "[]",
            "{\"a\": 1}",
            "null",
            "health_aware",
            "fail_fast",
            "wait",
            "auto",
            "manual",
        ])
        .prop_map(str::to_string),
        "\\PC{0,24}",
    ]
}

proptest! {
    #![proptest_config(config(256))]

    /// Any set of keys and values: a settings value or a configuration error naming something,
    /// never a panic; accepted settings pass their own validation.
    #[test]
    fn config_parser_never_panics(
        pairs in proptest::collection::vec((config_key(), config_value()), 0..24),
    ) {
        let map: BTreeMap<String, String> = pairs.into_iter().collect();
        match Settings::from_map(&map) {
            Ok(settings) => prop_assert!(settings.validate().is_ok()),
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }
}

proptest! {
    #![proptest_config(config(48))]

    /// Any `.env` file text: parsed or refused with an error, never a panic.
    #[test]
    fn dotenv_files_never_panic(text in "(\\PC|\n|=|#|\"|'|\\\\|\\$|\\{|\\}){0,200}") {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        file.write_all(text.as_bytes()).unwrap();
        let _ = Settings::from_env_with(Some(file.path()), &BTreeMap::new());
    }
}

// ---------------------------------------------------------------- native dialects' stream decoders

/// One streamed event of a native dialect as a hostile or broken upstream might send it: the
/// real event and block types with any field values (any index, any type where a string is due),
/// or any JSON at all, or text that is not JSON.
fn dialect_event() -> impl Strategy<Value = String> {
    let kind = prop_oneof![
        Just("message_start"),
        Just("content_block_start"),
        Just("content_block_delta"),
        Just("content_block_stop"),
        Just("message_delta"),
        Just("message_stop"),
        Just("ping"),
        Just("error"),
    ];
    let block = prop_oneof![
        Just("text"),
        Just("tool_use"),
        Just("thinking"),
        Just("redacted_thinking"),
        Just("text_delta"),
        Just("input_json_delta"),
        Just("thinking_delta"),
        Just("signature_delta"),
    ];
    let field = prop_oneof![
        any::<u64>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        "\\PC{0,8}".prop_map(Value::from),
        json_value(),
    ];
    let anthropic = (kind, block.clone(), field.clone(), field.clone(), block).prop_map(
        |(kind, block, index, value, delta)| {
            json!({"type": kind, "index": index,
                   "content_block": {"type": block, "text": value, "name": value, "id": value,
                                     "thinking": value, "signature": value, "data": value},
                   "delta": {"type": delta, "text": value, "partial_json": value,
                             "thinking": value, "signature": value, "stop_reason": value},
                   "message": {"model": value, "usage": {"input_tokens": index}},
                   "usage": {"output_tokens": index, "cache_creation": value},
                   "error": {"type": value, "message": value}})
            .to_string()
        },
    );
    let part = prop_oneof![
        field.clone().prop_map(|v| json!({"text": v})),
        field
            .clone()
            .prop_map(|v| json!({"text": "t", "thought": v, "thoughtSignature": v})),
        (field.clone(), field.clone()).prop_map(
            |(n, a)| json!({"functionCall": {"name": n, "args": a}, "thoughtSignature": n})
        ),
        json_value(),
    ];
    let gemini = (proptest::collection::vec(part, 0..4), field.clone(), field).prop_map(
        |(parts, reason, count)| {
            json!({"candidates": [{"content": {"role": "model", "parts": parts},
                                   "finishReason": reason, "index": count}],
                   "usageMetadata": {"promptTokenCount": count, "thoughtsTokenCount": count,
                                     "cachedContentTokenCount": count},
                   "promptFeedback": {"blockReason": reason}})
            .to_string()
        },
    );
    prop_oneof![
        4 => anthropic,
        4 => gemini,
        1 => json_value().prop_map(|v| v.to_string()),
        1 => "\\PC{0,40}",
    ]
}

proptest! {
    #![proptest_config(config(256))]

    /// Any sequence of events, to either dialect's stream decoder: frames or a transient error,
    /// never a panic, and no allocation sized by a number the upstream sent (an Anthropic block
    /// `index` of 4 000 000 000 once sized a vector).
    #[test]
    fn dialect_stream_decoders_never_panic(events in proptest::collection::vec(dialect_event(), 0..16)) {
        let mut anthropic = crate::transport::dialect::anthropic::response::StreamState::new(
            Some("answer".into()),
        );
        let mut gemini = crate::transport::dialect::gemini::Decoder::default();
        for event in &events {
            if let Err(e) = anthropic.feed(event) {
                prop_assert_eq!(e.class, FailureClass::Transient);
            }
            if let Err(e) = gemini.decode(event) {
                prop_assert!(e.class != FailureClass::SourceDead, "{}", e.message);
            }
        }
        let _ = anthropic.into_thinking();
    }
}

// ---------------------------------------------------------------- structured-output repair ladder

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        "\\PC{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
            proptest::collection::btree_map("[a-z_]{1,8}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Runs the ladder (typed as `Value`, two re-asks) over answers served in order; no I/O, so a
/// plain executor drives it.
fn ladder(answers: &[String]) -> (Result<Value, GatewayError>, usize) {
    let mut served = 0usize;
    let outcome = futures::executor::block_on(run_ladder::<Value, _, _>(
        |_, _, _| {
            let text = answers
                .get(served)
                .or(answers.last())
                .cloned()
                .unwrap_or_default();
            served += 1;
            async move { Ok(LlmResponse::new(text)) }
        },
        vec![Message::user("give JSON")],
        LadderPlan::typed(2),
    ));
    (outcome.map(|o| o.value), served)
}

proptest! {
    #![proptest_config(config(384))]

    /// Any answer text: a value or a repair error, never a panic.
    #[test]
    fn repair_never_panics(text in "(\\PC|[{}\\[\\]\":,'`]){0,300}") {
        let _ = repair_json(&text);
    }

    /// A well-formed value survives the wrappers models put around it: prose, a fenced block,
    /// a reasoning block.
    #[test]
    fn well_formed_json_is_recovered_from_its_wrapping(
        value in json_value(),
        wrapper in 0usize..4,
    ) {
        prop_assume!(value.is_object() || value.is_array());
        let compact = value.to_string();
        let text = match wrapper {
            0 => compact,
            1 => format!("Sure, here it is: {compact}\nHope that helps."),
            2 => format!("```json\n{}\n```", serde_json::to_string_pretty(&value).unwrap()),
            _ => format!("<think>the user wants JSON</think>\n{compact}"),
        };
        prop_assert_eq!(repair_json(&text).unwrap(), value);
    }

    /// The ladder over arbitrary answers: accepts on the first repairable one, otherwise gives
    /// up with `ResultInvalid` after the budget (1 + 2 re-asks); never panics.
    #[test]
    fn ladder_accepts_the_first_repairable_answer_or_gives_up(
        answers in proptest::collection::vec("(\\PC|[{}\\[\\]\":,]){0,60}", 1..4),
    ) {
        let (outcome, asks) = ladder(&answers);
        let first_ok = (0..3).position(|i| {
            let text = answers.get(i).or(answers.last()).unwrap();
            repair_json(text).is_ok()
        });
        match (outcome, first_ok) {
            (Ok(value), Some(i)) => {
                let text = answers.get(i).or(answers.last()).unwrap();
                prop_assert_eq!(value, repair_json(text).unwrap());
                prop_assert_eq!(asks, i + 1);
            }
            (Err(GatewayError::ResultInvalid { .. }), None) => prop_assert_eq!(asks, 3),
            (other, expected) => {
                prop_assert!(false, "outcome {other:?}, first repairable answer {expected:?}")
            }
        }
    }
}

// ---------------------------------------------------------------- MonkeyOCR middle JSON / ZIP

fn block() -> impl Strategy<Value = Value> {
    let kind = proptest::sample::select(vec![
        "text",
        "title",
        "table",
        "image",
        "interline_equation",
    ]);
    let coord = prop_oneof![4 => (0u32..800).prop_map(f64::from), 1 => -5.0f64..900.0];
    let span = "\\PC{0,10}".prop_map(|c| json!({"content": c}));
    (
        kind,
        proptest::collection::vec(coord, 3..6),
        proptest::collection::vec(proptest::collection::vec(span, 0..3), 0..3),
    )
        .prop_map(|(kind, bbox, lines)| {
            let lines: Vec<Value> = lines.into_iter().map(|s| json!({"spans": s})).collect();
            json!({"type": kind, "bbox": bbox, "lines": lines})
        })
}

fn middle_doc() -> impl Strategy<Value = Value> {
    let page = (
        proptest::collection::vec(block(), 0..5),
        prop_oneof![4 => Just(json!([612.0, 792.0])), 1 => Just(json!([0, 10])), 1 => Just(json!("A4"))],
    );
    proptest::collection::vec(page, 0..4).prop_map(|pages| {
        let pdf_info: Vec<Value> = pages
            .into_iter()
            .enumerate()
            .map(|(i, (blocks, size))| json!({"page_idx": i, "page_size": size, "para_blocks": blocks}))
            .collect();
        json!({"pdf_info": pdf_info, "_backend": "fuzz"})
    })
}

fn zip_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut writer = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for (name, data) in entries {
        writer
            .start_file(*name, zip::write::SimpleFileOptions::default())
            .unwrap();
        writer.write_all(data).unwrap();
    }
    writer.finish().unwrap().into_inner()
}

proptest! {
    #![proptest_config(config(192))]

    /// A generated document reads the same from the bare JSON and from its ZIP; a damaged
    /// archive (truncated, one byte flipped) is a `ResultInvalid` or still readable, never a
    /// panic.
    #[test]
    fn middle_reader_same_from_json_and_zip_and_survives_damage(
        doc in middle_doc(),
        cut in any::<usize>(),
        flip in any::<(usize, u8)>(),
    ) {
        let text = doc.to_string();
        let zip = zip_of(&[("doc/doc.md", b"# doc"), ("doc/doc_middle.json", text.as_bytes())]);
        let from_json = parse_middle_json(text.as_bytes());
        let from_zip = parse_middle_zip(&zip);
        match (&from_json, &from_zip) {
            (Ok(a), Ok(b)) => prop_assert_eq!(a, b),
            (Err(a), Err(b)) => {
                prop_assert_eq!(a.class, FailureClass::ResultInvalid);
                prop_assert_eq!(b.class, FailureClass::ResultInvalid);
            }
            _ => prop_assert!(false, "json {from_json:?} vs zip {from_zip:?}"),
        }
        let truncated = &zip[..cut % (zip.len() + 1)];
        if let Err(e) = parse_middle_zip(truncated) {
            prop_assert_eq!(e.class, FailureClass::ResultInvalid);
        }
        let mut flipped = zip.clone();
        let at = flip.0 % flipped.len();
        flipped[at] ^= flip.1 | 1;
        if let Err(e) = parse_middle_zip(&flipped) {
            prop_assert_eq!(e.class, FailureClass::ResultInvalid);
        }
    }
}
