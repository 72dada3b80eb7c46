//! Response cache backends (docs/behaviour.md §9.1) and single-flight coalescing.
//!
//! Memory: TTL with paused time, LRU eviction by entries and by bytes, zero TTL refused.
//! Redis: the real server on 127.0.0.1:6379 (keys made unique per test run; `CI=true` makes a
//! missing server a failure, locally the test is skipped loudly), corrupt entries, an
//! unreachable server answering misses within a bound.
//! Coalescer: shared result, errors not shared, leader cancellation and panic.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fred::prelude::{ClientLike, KeysInterface};
use polygateway::cache::{
    cache_key, model_fingerprint, CacheError, CacheKeyInput, CacheLookup, Coalescer, MemoryCache,
    RedisCache, ResponseCache, Role,
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

// ---------------------------------------------------------------- coalescer

#[tokio::test(start_paused = true)]
async fn coalescer_shares_the_leaders_result() {
    let co: Arc<Coalescer<String, u32>> = Arc::new(Coalescer::new());
    let runs = Arc::new(AtomicU32::new(0));
    let mut tasks = Vec::new();
    for _ in 0..10 {
        let (co, runs) = (co.clone(), runs.clone());
        tasks.push(tokio::spawn(async move {
            co.run_with_role("k".to_owned(), async {
                runs.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_secs(1)).await;
                Ok::<_, String>(42)
            })
            .await
        }));
    }
    let mut leaders = 0;
    for t in tasks {
        let (v, role) = t.await.unwrap().unwrap();
        assert_eq!(v, 42);
        leaders += u32::from(role == Role::Leader);
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(leaders, 1);
    assert_eq!(co.in_flight(), 0);
    // Not a cache: the next call runs again.
    let v = co
        .run("k".to_owned(), async { Ok::<_, String>(7) })
        .await
        .unwrap();
    assert_eq!(v, 7);
}

#[tokio::test(start_paused = true)]
async fn coalescer_distinct_keys_do_not_wait_for_each_other() {
    let co: Arc<Coalescer<u32, u32>> = Arc::new(Coalescer::new());
    let runs = Arc::new(AtomicU32::new(0));
    let mut tasks = Vec::new();
    for k in 0..5 {
        let (co, runs) = (co.clone(), runs.clone());
        tasks.push(tokio::spawn(async move {
            co.run(k, async move {
                runs.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_secs(1)).await;
                Ok::<_, ()>(k * 10)
            })
            .await
        }));
    }
    for (k, t) in tasks.into_iter().enumerate() {
        assert_eq!(t.await.unwrap().unwrap(), k as u32 * 10);
    }
    assert_eq!(runs.load(Ordering::SeqCst), 5);
}

#[tokio::test(start_paused = true)]
async fn coalescer_leader_error_is_not_shared_followers_retry() {
    let co: Arc<Coalescer<&'static str, u32>> = Arc::new(Coalescer::new());
    let runs = Arc::new(AtomicU32::new(0));
    let leader = {
        let (co, runs) = (co.clone(), runs.clone());
        tokio::spawn(async move {
            co.run("k", async {
                runs.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_secs(1)).await;
                Err::<u32, _>("leader failed")
            })
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(10)).await; // the leader is now in flight
    let mut followers = Vec::new();
    for i in 0..5u32 {
        let (co, runs) = (co.clone(), runs.clone());
        followers.push(tokio::spawn(async move {
            co.run_with_role("k", async move {
                runs.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_secs(1)).await;
                Ok::<_, &str>(100 + i)
            })
            .await
        }));
    }
    assert_eq!(leader.await.unwrap(), Err("leader failed"));
    let mut values = Vec::new();
    let mut new_leaders = 0;
    for f in followers {
        let (v, role) = f
            .await
            .unwrap()
            .expect("followers never see the leader's error");
        values.push(v);
        new_leaders += u32::from(role == Role::Leader);
    }
    assert_eq!(new_leaders, 1, "exactly one follower took over");
    assert!(values.windows(2).all(|w| w[0] == w[1]), "{values:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    assert_eq!(co.in_flight(), 0);
}

#[tokio::test]
async fn coalescer_cancelled_leader_wakes_followers() {
    let co: Arc<Coalescer<&'static str, u32>> = Arc::new(Coalescer::new());
    let leader = {
        let co = co.clone();
        tokio::spawn(async move {
            co.run("k", async {
                std::future::pending::<()>().await;
                Ok::<u32, ()>(0)
            })
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(20)).await;
    let followers: Vec<_> = (0..4)
        .map(|_| {
            let co = co.clone();
            tokio::spawn(async move { co.run("k", async { Ok::<u32, ()>(9) }).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(
        co.in_flight(),
        1,
        "followers are waiting on the stuck leader"
    );
    leader.abort();
    for f in followers {
        let v = tokio::time::timeout(Duration::from_secs(2), f)
            .await
            .expect("a follower hung after the leader was cancelled")
            .unwrap();
        assert_eq!(v, Ok(9));
    }
    assert_eq!(co.in_flight(), 0);
}

#[tokio::test]
async fn coalescer_panicking_leader_wakes_followers() {
    let co: Arc<Coalescer<&'static str, u32>> = Arc::new(Coalescer::new());
    let leader = {
        let co = co.clone();
        tokio::spawn(async move {
            co.run("k", async {
                tokio::time::sleep(Duration::from_millis(50)).await;
                panic!("leader blew up");
                #[allow(unreachable_code)]
                Ok::<u32, ()>(0)
            })
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(10)).await;
    let follower = {
        let co = co.clone();
        tokio::spawn(async move { co.run("k", async { Ok::<u32, ()>(5) }).await })
    };
    assert!(leader.await.unwrap_err().is_panic());
    let v = tokio::time::timeout(Duration::from_secs(2), follower)
        .await
        .expect("follower hung after the leader panicked")
        .unwrap();
    assert_eq!(v, Ok(5));
    assert_eq!(co.in_flight(), 0);
}
