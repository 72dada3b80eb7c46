//! Corpus of real-world-style broken model outputs for `repair_json` (docs/behaviour.md §9.2 step 2).
//! Each case names the defect, the raw answer and the expected value or failure.

use polygateway::structured::{repair_json, RepairError};
use serde_json::{json, Value};

enum Expect {
    Value(Value),
    Empty,
    NotFound,
}
use Expect::*;

fn corpus() -> Vec<(&'static str, String, Expect)> {
    let big_prose = "word ".repeat(2000);
    vec![
        (
            "clean object",
            r#"{"a": 1, "b": [true, false, null]}"#.into(),
            Value(json!({"a": 1, "b": [true, false, null]})),
        ),
        (
            "clean array",
            "[1, 2.5, -3e2]".into(),
            Value(json!([1, 2.5, -300.0])),
        ),
        (
            "clean scalar string",
            r#""just a string""#.into(),
            Value(json!("just a string")),
        ),
        ("clean scalar number", "  42\n".into(), Value(json!(42))),
        (
            "json fence",
            "```json\n{\"city\": \"Paris\"}\n```".into(),
            Value(json!({"city": "Paris"})),
        ),
        ("bare fence", "```\n[1,2]\n```".into(), Value(json!([1, 2]))),
        (
            "fence with prose around",
            "Here is the result:\n\n```json\n{\"ok\": true}\n```\n\nLet me know if you need more!"
                .into(),
            Value(json!({"ok": true})),
        ),
        (
            "prose before and after, no fence",
            "Sure! The answer is {\"n\": 3} as requested.".into(),
            Value(json!({"n": 3})),
        ),
        (
            "think preamble",
            "<think>\nThe user wants JSON. {draft: 1}\n</think>\n{\"final\": 2}".into(),
            Value(json!({"final": 2})),
        ),
        (
            "think preamble with fence",
            "<think>reasoning [with brackets] {and braces}</think>\n\n```json\n{\"a\": \"b\"}\n```"
                .into(),
            Value(json!({"a": "b"})),
        ),
        (
            "orphan closing think tag",
            "Let me think step by step... {\"x\": 0} is a draft.\n</think>\n{\"x\": 1}".into(),
            Value(json!({"x": 1})),
        ),
        (
            "two think blocks",
            "<think>a</think>\n<think>b</think>{\"k\": []}".into(),
            Value(json!({"k": []})),
        ),
        (
            "thinking tag variant",
            "<thinking>hmm</thinking>[\"a\"]".into(),
            Value(json!(["a"])),
        ),
        (
            "unclosed think only",
            "<think>I will answer {\"a\": 1} soon but".into(),
            Empty,
        ),
        (
            "trailing comma object",
            r#"{"a": 1, "b": 2,}"#.into(),
            Value(json!({"a": 1, "b": 2})),
        ),
        (
            "trailing comma array nested",
            r#"{"a": [1, 2, ], "b": {"c": 3,},}"#.into(),
            Value(json!({"a": [1, 2], "b": {"c": 3}})),
        ),
        ("double comma", "[1,,2]".into(), Value(json!([1, 2]))),
        (
            "single quoted strings",
            "{'name': 'Ann', 'tags': ['a', 'b']}".into(),
            Value(json!({"name": "Ann", "tags": ["a", "b"]})),
        ),
        (
            "single quotes with apostrophe inside",
            "{'quote': 'it's fine', 'n': 1}".into(),
            Value(json!({"quote": "it's fine", "n": 1})),
        ),
        (
            "apostrophe inside double-quoted string",
            r#"{"name": "O'Brien", 'x': 'y'}"#.into(),
            Value(json!({"name": "O'Brien", "x": "y"})),
        ),
        (
            "apostrophe in prose before json",
            "Here's what I found: {\"found\": true}. That's all.".into(),
            Value(json!({"found": true})),
        ),
        (
            "unquoted keys",
            "{name: \"Bo\", age_years: 7, $ref2: null}".into(),
            Value(json!({"name": "Bo", "age_years": 7, "$ref2": null})),
        ),
        (
            "python literals",
            "{'ok': True, 'bad': False, 'none': None}".into(),
            Value(json!({"ok": true, "bad": false, "none": null})),
        ),
        (
            "python dict repr",
            "Result: {'scores': [0.5, 1.0], 'label': 'spam'}".into(),
            Value(json!({"scores": [0.5, 1.0], "label": "spam"})),
        ),
        (
            "truncated object",
            r#"{"items": [{"id": 1}, {"id": 2"#.into(),
            Value(json!({"items": [{"id": 1}, {"id": 2}]})),
        ),
        (
            "truncated inside string",
            r#"{"summary": "The quick brown"#.into(),
            Value(json!({"summary": "The quick brown"})),
        ),
        (
            "truncated after colon",
            r#"{"a": 1, "b":"#.into(),
            Value(json!({"a": 1})),
        ),
        (
            "truncated inside key",
            r#"{"a": 1, "bet"#.into(),
            Value(json!({"a": 1})),
        ),
        (
            "truncated literal",
            r#"[true, fal"#.into(),
            Value(json!([true])),
        ),
        (
            "truncated number exponent",
            r#"{"a": 1, "b": 2e"#.into(),
            Value(json!({"a": 1})),
        ),
        (
            "truncated in fence",
            "```json\n{\"a\": [1, 2,\n".into(),
            Value(json!({"a": [1, 2]})),
        ),
        (
            "missing closing brace before fence end",
            "```json\n{\"a\": 1\n```".into(),
            Value(json!({"a": 1})),
        ),
        (
            "nested fence inside string",
            "```json\n{\"code\": \"```python\\nprint(1)\\n```\", \"lang\": \"py\"}\n```".into(),
            Value(json!({"code": "```python\nprint(1)\n```", "lang": "py"})),
        ),
        (
            "markdown table then json",
            "| field | value |\n|---|---|\n| a | 1 |\n\n```json\n{\"a\": 1}\n```".into(),
            Value(json!({"a": 1})),
        ),
        (
            "markdown link before json",
            "See [the docs](https://x.y) for details.\n{\"a\": 2}".into(),
            Value(json!({"a": 2})),
        ),
        (
            "citation brackets lose to longer object",
            "As shown in [1], {\"claim\": \"x\", \"support\": [1]}".into(),
            Value(json!({"claim": "x", "support": [1]})),
        ),
        (
            "template braces in prose",
            "Use {name} as placeholder. Output: {\"name\": \"n\"}".into(),
            Value(json!({"name": "n"})),
        ),
        (
            "line comments",
            "{\n  // the id\n  \"id\": 7, /* inline */ \"url\": \"http://a/b\"\n}".into(),
            Value(json!({"id": 7, "url": "http://a/b"})),
        ),
        (
            "smart quotes as delimiters",
            "{“title”: “Hello”, “n”: 1}".into(),
            Value(json!({"title": "Hello", "n": 1})),
        ),
        (
            "smart quotes inside a normal string",
            "{\"q\": \"she said “hi”\"}".into(),
            Value(json!({"q": "she said “hi”"})),
        ),
        (
            "missing comma between members",
            "{\"a\": 1 \"b\": 2}".into(),
            Value(json!({"a": 1, "b": 2})),
        ),
        (
            "lenient numbers",
            "[+1, .5, 5., 007]".into(),
            Value(json!([1, 0.5, 5.0, 7])),
        ),
        (
            "escapes and unicode",
            r#"{'path': 'C:\path', "e": "\u00e9\ud83d\ude00", "n": "a\tb"}"#.into(),
            Value(json!({"path": "C:\\path", "e": "é😀", "n": "a\tb"})),
        ),
        (
            "raw newline inside string",
            "{\"text\": \"line1\nline2\"}".into(),
            Value(json!({"text": "line1\nline2"})),
        ),
        (
            "array of objects in prose",
            "The entities are:\n[{\"t\": \"PER\"}, {\"t\": \"ORG\"}]\nDone.".into(),
            Value(json!([{"t": "PER"}, {"t": "ORG"}])),
        ),
        (
            "long prose then json",
            format!("{big_prose} {{\"k\": 1}}"),
            Value(json!({"k": 1})),
        ),
        ("single quoted scalar", "'yes'".into(), Value(json!("yes"))),
        (
            "double-encoded json",
            r#""{\"a\": [1, 2]}""#.into(),
            Value(json!({"a": [1, 2]})),
        ),
        (
            "string that merely starts with a brace stays a string",
            r#""{not json""#.into(),
            Value(json!("{not json")),
        ),
        (
            "two alternatives: the longer wins",
            "Option A: {\"v\": 1}\nOption B (better): {\"v\": 2, \"why\": \"more complete\"}"
                .into(),
            Value(json!({"v": 2, "why": "more complete"})),
        ),
        (
            "truncated after a backslash",
            r#"{"p": "C:\"#.into(),
            Value(json!({"p": "C:"})),
        ),
        ("empty", "".into(), Empty),
        ("whitespace only", "  \n\t ".into(), Empty),
        (
            "plain prose",
            "I'm sorry, I can't help with that.".into(),
            NotFound,
        ),
        ("bare words in array", "[yes, no]".into(), NotFound),
        ("NaN is not JSON", "{\"a\": NaN}".into(), NotFound),
        ("garbage braces", "{{{{ :: }".into(), NotFound),
        (
            "innermost empty object is still an object",
            "{{ {} ::".into(),
            Value(json!({})),
        ),
        ("only a fence", "```json\n```".into(), NotFound),
    ]
}

#[test]
fn corpus_repairs_as_expected() {
    let cases = corpus();
    assert!(cases.len() >= 40, "corpus has {} cases", cases.len());
    let mut failures = Vec::new();
    for (name, input, expect) in &cases {
        let got = repair_json(input);
        let ok = match (expect, &got) {
            (Value(want), Ok(v)) => want == v,
            (Empty, Err(RepairError::Empty)) => true,
            (NotFound, Err(RepairError::NotFound(_))) => true,
            _ => false,
        };
        if !ok {
            failures.push(format!("{name}: got {got:?}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn not_found_errors_are_short() {
    let long_garbage = format!("{{ {} ::", "x".repeat(5000));
    match repair_json(&long_garbage) {
        Err(e) => assert!(e.to_string().chars().count() <= 200, "{e}"),
        Ok(v) => panic!("repaired garbage into {v}"),
    }
}

#[test]
fn deep_nesting_is_bounded() {
    let deep = "[".repeat(10_000);
    // Must not overflow the stack: past the depth limit nothing is recovered.
    assert!(repair_json(&deep).is_err());
    let deep_obj = "{\"a\":".repeat(5_000);
    assert!(repair_json(&deep_obj).is_err());
}
