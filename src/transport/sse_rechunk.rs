//! Property: re-chunking a valid SSE stream at arbitrary byte boundaries (inside UTF-8
//! characters, between CR and LF, inside `<think>` tags) yields exactly the same events and the
//! same assembled content and thinking as feeding it whole.

use crate::transport::sse::{SseEvent, SseParser};
use crate::transport::think::ThinkSplitter;
use crate::transport::wire::decode_chunk;
use crate::transport::ChatDelta;
use proptest::prelude::*;
use serde_json::json;

/// A realistic stream: role chunk, content/reasoning deltas with multi-byte text and split
/// think tags, a keep-alive comment, a usage chunk with empty choices, `[DONE]`.
fn stream_text(pieces: &[(bool, String)], eol: &str, space: bool) -> String {
    let sp = if space { " " } else { "" };
    let mut out = format!(": keep-alive{eol}{eol}");
    let mut push = |v: serde_json::Value| {
        out.push_str(&format!("data:{sp}{v}{eol}{eol}"));
    };
    push(json!({"model": "m", "choices": [{"delta": {"role": "assistant", "content": ""}}]}));
    for (reasoning, text) in pieces {
        let key = if *reasoning {
            "reasoning_content"
        } else {
            "content"
        };
        push(json!({"model": "m", "choices": [{"delta": {key: text}}]}));
    }
    push(json!({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 5}}));
    out.push_str(&format!("data:{sp}[DONE]{eol}{eol}"));
    out
}

#[derive(Debug, PartialEq)]
struct Assembled {
    events: Vec<SseEvent>,
    content: String,
    thinking: String,
    usage_seen: bool,
}

fn run(bytes: &[u8], cuts: &[usize]) -> Assembled {
    let mut parser = SseParser::new();
    let mut events = Vec::new();
    let mut start = 0;
    for &cut in cuts {
        parser.feed(&bytes[start..cut], &mut events).unwrap();
        start = cut;
    }
    parser.feed(&bytes[start..], &mut events).unwrap();
    parser.finish(&mut events).unwrap();

    let mut splitter = ThinkSplitter::new();
    let mut deltas = Vec::new();
    let mut usage_seen = false;
    for e in &events {
        if let SseEvent::Data(d) = e {
            let f = decode_chunk(d).expect("valid frame");
            usage_seen |= f.usage.is_some();
            for choice in f.choices {
                if let Some(r) = choice.reasoning {
                    deltas.push(ChatDelta::Reasoning(r));
                }
                if let Some(c) = choice.content {
                    splitter.push(&c, &mut deltas);
                }
            }
        }
    }
    splitter.finish(&mut deltas);
    let (mut content, mut thinking) = (String::new(), String::new());
    for d in deltas {
        match d {
            ChatDelta::Content(c) => content.push_str(&c),
            ChatDelta::Reasoning(r) => thinking.push_str(&r),
            ChatDelta::ToolCall(_) | ChatDelta::Refusal(_) | ChatDelta::ThinkingSignature(_) => {}
        }
    }
    Assembled {
        events,
        content,
        thinking,
        usage_seen,
    }
}

fn piece() -> impl Strategy<Value = (bool, String)> {
    (
        any::<bool>(),
        prop_oneof![
            "[a-z ]{1,8}",
            Just("你好，世界".to_string()),
            Just("<think>".to_string()),
            Just("</think>\n\n".to_string()),
            Just("🙂 ok".to_string()),
            Just("line\nbreak".to_string()),
        ],
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn rechunking_never_changes_the_result(
        pieces in prop::collection::vec(piece(), 1..20),
        eol in prop_oneof![Just("\n"), Just("\r\n"), Just("\r")],
        space in any::<bool>(),
        raw_cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..40),
    ) {
        let text = stream_text(&pieces, eol, space);
        let bytes = text.as_bytes();
        let whole = run(bytes, &[]);
        prop_assert_eq!(whole.events.last(), Some(&SseEvent::Done));
        prop_assert!(whole.usage_seen);
        let mut cuts: Vec<usize> = raw_cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
        cuts.sort_unstable();
        let chunked = run(bytes, &cuts);
        prop_assert_eq!(&chunked, &whole);
        // Byte-at-a-time is the extreme re-chunking.
        let every: Vec<usize> = (1..bytes.len()).collect();
        prop_assert_eq!(&run(bytes, &every), &whole);
    }

    #[test]
    fn the_last_event_without_a_blank_line_survives_any_cut(
        body in "[a-z]{1,20}",
        cut in any::<prop::sample::Index>(),
    ) {
        let text = format!("data: {{\"choices\":[{{\"delta\":{{\"content\":\"{body}\"}}}}]}}");
        let bytes = text.as_bytes();
        let r = run(bytes, &[cut.index(bytes.len() + 1)]);
        prop_assert_eq!(r.content, body);
    }
}
