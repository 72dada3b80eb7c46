//! Response cache backends (docs/behaviour.md §9.1) and single-flight coalescing.
//!
//! Memory: TTL with paused time, LRU eviction by entries and by bytes, zero TTL refused.
//! Redis: the real server on 127.0.0.1:6379 (keys made unique per test run; `CI=true` makes a
//! missing server a failure, locally the test is skipped loudly), corrupt entries, an
//! unreachable server answering misses within a bound.

use std::time::Duration;

use fred::prelude::{ClientLike, KeysInterface};
use polygateway::cache::{
    cache_key, model_fingerprint, CacheError, CacheKeyInput, CacheLookup, MemoryCache, RedisCache,
    ResponseCache,
};
use polygateway::{LlmResponse, Message};
use serde_json::{json, Map};

fn response(content: &str) -> LlmResponse {
    let mut r = LlmResponse::new(content);
    r.model = "m".into();
    r.prompt_tokens = 3;
    r.completion_tokens = 5;
    r.structured_data = Some(json!({"a": content}));
    r
}

fn expect_hit(l: CacheLookup) -> LlmResponse {
    match l {
        CacheLookup::Hit(r) => *r,
        CacheLookup::Miss => panic!("expected a hit"),
    }
}

// ---------------------------------------------------------------- memory

#[tokio::test]
async fn memory_hit_marks_cache_hit_and_counts() {
    let c = MemoryCache::new(10, 1 << 20).unwrap();
    assert_eq!(c.get("k").await, CacheLookup::Miss);
    let stored = response("x");
    c.put("k", &stored, Duration::from_secs(60)).await;
    let got = expect_hit(c.get("k").await);
    assert!(got.cache_hit);
    let mut expected = stored.clone();
    expected.cache_hit = true;
    assert_eq!(got, expected);
    let s = c.stats();
    assert_eq!((s.hits, s.misses, s.errors, s.corrupt), (1, 1, 0, 0));
}

#[tokio::test(start_paused = true)]
async fn memory_entries_expire_after_ttl() {
    let c = MemoryCache::new(10, 1 << 20).unwrap();
    c.put("k", &response("x"), Duration::from_secs(10)).await;
    tokio::time::advance(Duration::from_millis(9_900)).await;
    assert!(matches!(c.get("k").await, CacheLookup::Hit(_)));
    tokio::time::advance(Duration::from_millis(200)).await;
    assert_eq!(c.get("k").await, CacheLookup::Miss);
    assert!(c.is_empty(), "expired entry is dropped on lookup");
    assert_eq!(c.bytes(), 0);
}

#[tokio::test]
async fn memory_evicts_least_recently_used_by_entry_count() {
    let c = MemoryCache::new(2, 1 << 20).unwrap();
    let ttl = Duration::from_secs(60);
    c.put("a", &response("a"), ttl).await;
    c.put("b", &response("b"), ttl).await;
    assert!(matches!(c.get("a").await, CacheLookup::Hit(_))); // a is now more recent than b
    c.put("c", &response("c"), ttl).await;
    assert_eq!(c.len(), 2);
    assert_eq!(c.get("b").await, CacheLookup::Miss);
    assert!(matches!(c.get("a").await, CacheLookup::Hit(_)));
    assert!(matches!(c.get("c").await, CacheLookup::Hit(_)));
    // Overwriting a key does not evict anything else.
    c.put("c", &response("c2"), ttl).await;
    assert_eq!(c.len(), 2);
    assert_eq!(expect_hit(c.get("c").await).content, "c2");
}

#[tokio::test]
async fn memory_evicts_by_bytes_and_refuses_oversized_entries() {
    let entry_bytes =
        |key: &str, r: &LlmResponse| key.len() + serde_json::to_string(r).unwrap().len();
    let r = response("0123456789");
    let one = entry_bytes("k1", &r);
    let c = MemoryCache::new(100, 2 * one + one / 2).unwrap();
    let ttl = Duration::from_secs(60);
    c.put("k1", &r, ttl).await;
    c.put("k2", &r, ttl).await;
    assert_eq!(c.bytes(), 2 * one);
    c.put("k3", &r, ttl).await;
    assert_eq!(c.len(), 2);
    assert!(c.bytes() <= 2 * one + one / 2);
    assert_eq!(c.get("k1").await, CacheLookup::Miss, "oldest evicted");
    let huge = response(&"z".repeat(10 * one));
    c.put("big", &huge, ttl).await;
    assert_eq!(c.get("big").await, CacheLookup::Miss);
    assert_eq!(c.len(), 2, "an oversized entry evicts nothing");
}

#[tokio::test]
async fn memory_refuses_zero_ttl_and_bad_bounds() {
    let c = MemoryCache::new(10, 1000).unwrap();
    c.put("k", &response("x"), Duration::ZERO).await;
    assert_eq!(c.get("k").await, CacheLookup::Miss);
    assert_eq!(c.stats().errors, 1);
    assert!(matches!(
        MemoryCache::new(0, 10),
        Err(CacheError::InvalidConfig(_))
    ));
    assert!(matches!(
        MemoryCache::new(10, 0),
        Err(CacheError::InvalidConfig(_))
    ));
}

// ---------------------------------------------------------------- redis

const REDIS_URL: &str = "redis://127.0.0.1:6379";

/// `None` (with a loud message) when Redis is not running locally; panics under `CI=true`.
async fn redis_or_skip(test: &str) -> Option<RedisCache> {
    let up = tokio::time::timeout(
        Duration::from_secs(1),
        tokio::net::TcpStream::connect("127.0.0.1:6379"),
    )
    .await
    .is_ok_and(|r| r.is_ok());
    if !up {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("{test}: Redis at 127.0.0.1:6379 is required under CI=true");
        }
        eprintln!("!!!!! SKIPPED {test}: no Redis at 127.0.0.1:6379 (set CI=true to make this fail) !!!!!");
        return None;
    }
    Some(
        RedisCache::connect(REDIS_URL, Duration::from_secs(1))
            .await
            .unwrap(),
    )
}

/// A key unique to this run (the namespace is a fresh UUID).
fn unique_key() -> String {
    let fp = model_fingerprint(&[("m".into(), Map::new())]);
    let ns = format!("test-{}", uuid::Uuid::new_v4());
    cache_key(&CacheKeyInput {
        model_fingerprint: &fp,
        messages: &[Message::user("q")],
        namespace: &ns,
        salt: None,
        sampling: &Map::new(),
        structured: None,
    })
}

async fn raw_client() -> fred::clients::Client {
    let client =
        fred::prelude::Builder::from_config(fred::prelude::Config::from_url(REDIS_URL).unwrap())
            .build()
            .unwrap();
    client.init().await.unwrap();
    client
}

#[tokio::test]
async fn redis_round_trip_with_ttl() {
    let Some(c) = redis_or_skip("redis_round_trip_with_ttl").await else {
        return;
    };
    let key = unique_key();
    assert_eq!(c.get(&key).await, CacheLookup::Miss);
    let stored = response("hello");
    c.put(&key, &stored, Duration::from_secs(30)).await;
    let got = expect_hit(c.get(&key).await);
    let mut expected = stored;
    expected.cache_hit = true;
    assert_eq!(got, expected);

    let raw = raw_client().await;
    let pttl: i64 = raw.pttl(&key).await.unwrap();
    assert!((29_000..=30_000).contains(&pttl), "PTTL {pttl}");

    let short = unique_key();
    c.put(&short, &response("brief"), Duration::from_millis(200))
        .await;
    assert!(matches!(c.get(&short).await, CacheLookup::Hit(_)));
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(c.get(&short).await, CacheLookup::Miss);

    let s = c.stats();
    assert_eq!((s.hits, s.misses, s.errors, s.corrupt), (2, 2, 0, 0));
    let _: i64 = raw.del(&key).await.unwrap();
    raw.quit().await.unwrap();
    c.close().await;
}

#[tokio::test]
async fn redis_corrupt_entry_is_a_counted_miss() {
    let Some(c) = redis_or_skip("redis_corrupt_entry_is_a_counted_miss").await else {
        return;
    };
    let key = unique_key();
    let raw = raw_client().await;
    let _: () = raw
        .set(
            &key,
            "{\"content\": 12, not json",
            Some(fred::prelude::Expiration::EX(30)),
            None,
            false,
        )
        .await
        .unwrap();
    assert_eq!(c.get(&key).await, CacheLookup::Miss);
    let s = c.stats();
    assert_eq!((s.hits, s.misses, s.corrupt), (0, 1, 1));
    let _: i64 = raw.del(&key).await.unwrap();
    raw.quit().await.unwrap();
    c.close().await;
}

#[tokio::test]
async fn redis_refuses_zero_ttl() {
    let Some(c) = redis_or_skip("redis_refuses_zero_ttl").await else {
        return;
    };
    let key = unique_key();
    c.put(&key, &response("x"), Duration::ZERO).await;
    assert_eq!(c.get(&key).await, CacheLookup::Miss);
    assert_eq!(c.stats().errors, 1);
    c.close().await;
}

#[tokio::test]
async fn redis_unreachable_degrades_to_counted_misses_within_a_bound() {
    let started = std::time::Instant::now();
    let c = RedisCache::connect("redis://127.0.0.1:1", Duration::from_millis(300))
        .await
        .expect("an unreachable cache still builds (degrade, not fail)");
    c.put(
        "pgw:cache:unreachable",
        &response("x"),
        Duration::from_secs(5),
    )
    .await;
    assert_eq!(c.get("pgw:cache:unreachable").await, CacheLookup::Miss);
    let elapsed = started.elapsed();
    assert!(elapsed < Duration::from_secs(3), "took {elapsed:?}");
    let s = c.stats();
    assert_eq!(s.misses, 1);
    assert_eq!(s.errors, 2, "failed put and failed get are both counted");
    c.close().await;
}

#[tokio::test]
async fn redis_bad_url_fails_without_echoing_the_password() {
    let err = RedisCache::connect("redis://:hunter2@[::1", Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(matches!(err, CacheError::InvalidUrl(_)));
    assert!(!err.to_string().contains("hunter2"), "{err}");
    assert!(matches!(
        RedisCache::connect(REDIS_URL, Duration::ZERO).await,
        Err(CacheError::InvalidConfig(_))
    ));
}

#[tokio::test]
async fn redis_injected_client_is_not_closed() {
    let Some(_probe) = redis_or_skip("redis_injected_client_is_not_closed").await else {
        return;
    };
    let raw = raw_client().await;
    let c = RedisCache::from_client(raw.clone(), Duration::from_secs(1)).unwrap();
    let key = unique_key();
    c.put(&key, &response("x"), Duration::from_secs(30)).await;
    c.close().await;
    assert!(raw.is_connected());
    let _: i64 = raw.del(&key).await.unwrap();
    raw.quit().await.unwrap();
}
