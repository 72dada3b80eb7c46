//! The response-cache key (docs/behaviour.md §9.1): golden keys, canonical JSON, what changes the key and
//! what must not.

use polygateway::cache::{
    cache_key, cache_key_material, canonical_json, model_fingerprint, CacheKeyInput,
};
use polygateway::{ContentPart, ImageUrl, Message};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => panic!("not an object"),
    }
}

fn fp_one(model: &str) -> Value {
    model_fingerprint(&[(model.to_owned(), Map::new())])
}

fn key(
    fp: &Value,
    messages: &[Message],
    ns: &str,
    salt: Option<&str>,
    sampling: &Map<String, Value>,
) -> String {
    cache_key(&CacheKeyInput {
        model_fingerprint: fp,
        messages,
        namespace: ns,
        salt,
        sampling,
        structured: None,
    })
}

fn image_message(bytes: &[u8]) -> Message {
    Message::user_with_images("describe", [("image/png", bytes)])
}

#[test]
fn key_is_sha256_of_the_documented_canonical_material() {
    let fp = fp_one("gpt-4o-mini");
    let msgs = [Message::user("hi")];
    let material = cache_key_material(&CacheKeyInput {
        model_fingerprint: &fp,
        messages: &msgs,
        namespace: "ns",
        salt: None,
        sampling: &Map::new(),
        structured: None,
    });
    // Written by hand from docs/behaviour.md §9.1: sorted keys, no whitespace, no salt, no sampling.
    let expected = r#"{"messages":[{"content":"hi","role":"user"}],"model":[{"extra_body":{},"model":"gpt-4o-mini"}],"namespace":"ns"}"#;
    assert_eq!(material, expected);
    let k = key(&fp, &msgs, "ns", None, &Map::new());
    assert_eq!(
        k,
        format!(
            "pgw:cache:{}",
            hex::encode(Sha256::digest(expected.as_bytes()))
        )
    );
}

/// Golden keys: a change here means every deployed cache entry is orphaned — do it on purpose.
#[test]
fn golden_keys() {
    let empty = Map::new();
    let fp = fp_one("gpt-4o-mini");
    let two = model_fingerprint(&[
        ("qwen-max".into(), obj(json!({"enable_search": false}))),
        ("deepseek-chat".into(), Map::new()),
    ]);
    let sampling = obj(json!({"temperature": 0.2, "seed": 7}));
    let convo = [
        Message::system("You are terse."),
        Message::user("Capital of France?"),
        Message::assistant("Paris."),
        Message::user("And of Italy?"),
    ];
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "simple",
            key(&fp, &[Message::user("hi")], "ns", None, &empty),
            "pgw:cache:7dfcde2e971af620ae077d43992c0a9cf6e34683bb6fc56563866efea6301229",
        ),
        (
            "salted",
            key(&fp, &[Message::user("hi")], "ns", Some("v2"), &empty),
            "pgw:cache:0298b57236d4feb8484d23ab20c5cbc0ce4d4cb384562c205c168af163ee804f",
        ),
        (
            "empty salt",
            key(&fp, &[Message::user("hi")], "ns", Some(""), &empty),
            "pgw:cache:20a515b6db193db59972f747a118fcc8f00af9c3da02a2e5d561e34e840452b7",
        ),
        (
            "sampling",
            key(&fp, &[Message::user("hi")], "ns", None, &sampling),
            "pgw:cache:ca7c323981010e214a1a337d2e7a64ce9307c58adfcd4ddb782f8ebdec6a8d3e",
        ),
        (
            "two sources, conversation",
            key(&two, &convo, "tenant-a", None, &empty),
            "pgw:cache:e081bf84f2867cc9b2474b2794aa400049404e1e79634ff6b054ee892563ab0e",
        ),
        (
            "image",
            key(&fp, &[image_message(b"\x89PNG fake")], "vlm", None, &empty),
            "pgw:cache:be51945be649bfeee8003f6cd4f4df438af1aab5886fda11197407c7d14838b5",
        ),
    ];
    let mut report = String::new();
    for (name, got, want) in &cases {
        if got != want {
            report.push_str(&format!("{name}: got {got}\n"));
        }
    }
    assert!(report.is_empty(), "golden keys changed:\n{report}");
}

#[test]
fn object_key_order_does_not_change_the_key() {
    let msgs = [Message::user("q")];
    let a = obj(serde_json::from_str(
        r#"{"temperature":0.1,"top_p":0.9,"response_format":{"type":"json_object","x":1}}"#,
    )
    .unwrap());
    let b = obj(serde_json::from_str(
        r#"{"response_format":{"x":1,"type":"json_object"},"top_p":0.9,"temperature":0.1}"#,
    )
    .unwrap());
    let fp1 = model_fingerprint(&[("m".into(), obj(json!({"b": 1, "a": {"d": 2, "c": 3}})))]);
    let fp2 = model_fingerprint(&[(
        "m".into(),
        obj(serde_json::from_str(r#"{"a":{"c":3,"d":2},"b":1}"#).unwrap()),
    )]);
    assert_eq!(
        key(&fp1, &msgs, "n", None, &a),
        key(&fp2, &msgs, "n", None, &b)
    );
}

#[test]
fn source_order_and_duplicates_do_not_change_the_fingerprint() {
    let a = model_fingerprint(&[
        ("m1".into(), Map::new()),
        ("m2".into(), obj(json!({"x": 1}))),
    ]);
    let b = model_fingerprint(&[
        ("m2".into(), obj(json!({"x": 1}))),
        ("m1".into(), Map::new()),
        ("m2".into(), obj(json!({"x": 1}))),
    ]);
    assert_eq!(a, b);
    assert_eq!(a.as_array().unwrap().len(), 2);
}

#[test]
fn every_input_changes_the_key() {
    let empty = Map::new();
    let msgs = [Message::user("q")];
    let fp = fp_one("m");
    let base = key(&fp, &msgs, "ns", None, &empty);
    let variants = [
        ("model", key(&fp_one("m2"), &msgs, "ns", None, &empty)),
        (
            "extra_body",
            key(
                &model_fingerprint(&[("m".into(), obj(json!({"enable_thinking": true})))]),
                &msgs,
                "ns",
                None,
                &empty,
            ),
        ),
        (
            "extra source",
            key(
                &model_fingerprint(&[("m".into(), Map::new()), ("m2".into(), Map::new())]),
                &msgs,
                "ns",
                None,
                &empty,
            ),
        ),
        ("namespace", key(&fp, &msgs, "ns2", None, &empty)),
        ("salt", key(&fp, &msgs, "ns", Some("s"), &empty)),
        ("empty salt", key(&fp, &msgs, "ns", Some(""), &empty)),
        (
            "temperature",
            key(&fp, &msgs, "ns", None, &obj(json!({"temperature": 0.5}))),
        ),
        (
            "seed",
            key(&fp, &msgs, "ns", None, &obj(json!({"seed": 1}))),
        ),
        ("text", key(&fp, &[Message::user("q2")], "ns", None, &empty)),
        (
            "role",
            key(&fp, &[Message::system("q")], "ns", None, &empty),
        ),
        (
            "extra message",
            key(
                &fp,
                &[Message::user("q"), Message::user("q")],
                "ns",
                None,
                &empty,
            ),
        ),
    ];
    let mut all = vec![base.clone()];
    for (name, k) in &variants {
        assert_ne!(k, &base, "{name} did not change the key");
        all.push(k.clone());
    }
    all.sort();
    all.dedup();
    assert_eq!(all.len(), variants.len() + 1, "two variants collided");
    // Other sampling values differ from each other too.
    assert_ne!(
        key(&fp, &msgs, "ns", None, &obj(json!({"seed": 1}))),
        key(&fp, &msgs, "ns", None, &obj(json!({"seed": 2})))
    );
}

#[test]
fn none_salt_and_empty_salt_differ_and_empty_sampling_is_absent() {
    let fp = fp_one("m");
    let msgs = [Message::user("q")];
    let no_sampling = Map::new();
    let input = |salt| CacheKeyInput {
        model_fingerprint: &fp,
        messages: &msgs,
        namespace: "n",
        salt,
        sampling: &no_sampling,
        structured: None,
    };
    let none = cache_key_material(&input(None));
    let empty = cache_key_material(&input(Some("")));
    assert!(!none.contains("\"salt\""));
    assert!(empty.contains(r#""salt":"""#));
    assert!(!none.contains("sampling"));
    assert_ne!(cache_key(&input(None)), cache_key(&input(Some(""))));
}

#[test]
fn images_enter_as_their_hash_and_key_material_does_not_grow_with_them() {
    let fp = fp_one("vlm");
    let small = vec![7u8; 10];
    let big = vec![7u8; 5 * 1024 * 1024];
    let m_small = [image_message(&small)];
    let m_big = [image_message(&big)];
    let material = |m: &[Message]| {
        cache_key_material(&CacheKeyInput {
            model_fingerprint: &fp,
            messages: m,
            namespace: "n",
            salt: None,
            sampling: &Map::new(),
            structured: None,
        })
    };
    let (ms, mb) = (material(&m_small), material(&m_big));
    assert_eq!(ms.len(), mb.len(), "material length depends on image size");
    assert!(mb.len() < 400, "material is {} bytes", mb.len());
    assert_ne!(ms, mb, "different images must give different material");
    // The part digest is the sha256 of the URL.
    let url = match &m_big[0].content {
        Some(polygateway::Content::Parts(parts)) => match &parts[1] {
            ContentPart::ImageUrl { image_url } => image_url.url.clone(),
            _ => unreachable!(),
        },
        _ => unreachable!(),
    };
    assert!(mb.contains(&hex::encode(Sha256::digest(url.as_bytes()))));
    // `detail` is part of the key: the same image at another detail is another request.
    let with_detail = [Message::with_content(
        polygateway::Role::User,
        polygateway::Content::Parts(vec![ContentPart::ImageUrl {
            image_url: ImageUrl {
                url: url.clone(),
                detail: Some("low".into()),
            },
        }]),
    )];
    let without_detail = [Message::with_content(
        polygateway::Role::User,
        polygateway::Content::Parts(vec![ContentPart::ImageUrl {
            image_url: ImageUrl { url, detail: None },
        }]),
    )];
    assert_ne!(material(&with_detail), material(&without_detail));
}

/// `tenant_id` and `meta` are not fields of `CacheKeyInput` (docs/behaviour.md §2.2): this test constructs
/// the input exhaustively (no `..`), so adding such a field fails to compile here and forces a
/// decision. Two tenants in one namespace share entries; isolation is by namespace.
#[test]
fn tenant_and_meta_are_not_key_inputs() {
    let fp = fp_one("m");
    let msgs = [Message::user("q")];
    let sampling = Map::new();
    let CacheKeyInput {
        model_fingerprint: _,
        messages: _,
        namespace: _,
        salt: _,
        sampling: _,
        structured: _,
    } = CacheKeyInput {
        model_fingerprint: &fp,
        messages: &msgs,
        namespace: "shared",
        salt: None,
        sampling: &sampling,
        structured: None,
    };
    let tenant_a = key(&fp, &msgs, "shared", None, &sampling);
    let tenant_b = key(&fp, &msgs, "shared", None, &sampling);
    assert_eq!(tenant_a, tenant_b);
    assert_ne!(tenant_a, key(&fp, &msgs, "tenant-b", None, &sampling));
}

#[test]
fn canonical_json_sorts_recursively_and_escapes() {
    let v = json!({"z": [{"b": 1, "a": "\"q\"\n"}], "a": 1.5, "m": {"é": true, "e": null}});
    assert_eq!(
        canonical_json(&v),
        r#"{"a":1.5,"m":{"e":null,"é":true},"z":[{"a":"\"q\"\n","b":1}]}"#
    );
}
