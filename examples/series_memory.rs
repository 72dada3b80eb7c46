//! The dashboard ring's memory, measured: 10 scopes, 50 sources and 1,000 virtual keys (and as
//! many tenants) fed a simulated day of events — every one-second slot of the last 15 minutes and
//! every one-minute slot of 24 hours written — then the process's resident memory growth
//! (`/proc/self/statm`, Linux) and the ring's own count (`Book::bytes`) are compared with the
//! documented bound (`bound_bytes`, docs/behaviour.md §12.8). Exits non-zero past the bound.
//! Then what the call path pays per event (one lock, two bucket writes), as a JSON line: a
//! measurement to read, not a pass/fail (build in release).
//!
//! ```text
//! cargo run --release --example series_memory
//! ```

use polygateway::metrics::series::{bound_bytes, Book};

const SCOPES: usize = 10;
const SOURCES: usize = 50;
const KEYS: usize = 1_000;

fn rss_bytes() -> Option<usize> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: usize = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

fn main() {
    memory();
    cost_per_event();
}

fn memory() {
    let before = rss_bytes();
    let book = Book::default();
    let t0: u64 = 1_700_000_000;
    let day = 86_400u64;
    let scopes: Vec<_> = (0..SCOPES).map(|i| book.scope(&format!("S{i}"))).collect();
    let sources: Vec<_> = (0..SOURCES)
        .map(|i| book.source(&format!("S{}", i % SCOPES), &format!("src{i}")))
        .collect();
    let keys: Vec<_> = (0..KEYS).map(|i| book.key(&format!("key{i}"))).collect();
    let tenants: Vec<_> = (0..KEYS)
        .map(|i| book.tenant(&format!("tenant{i}")))
        .collect();
    let mut events = 0u64;
    // One event per minute for the day, then one per second for its last 15 minutes.
    let times = (0..day / 60)
        .map(|m| t0 + m * 60)
        .chain((day - 900..day).map(|s| t0 + s));
    for now in times {
        for (i, s) in scopes.iter().enumerate() {
            s.call(now, if i % 7 == 0 { "retry_exhausted" } else { "ok" }, 0.3);
            s.ttft(now, 0.05);
            s.waited(now, "pacer", 0.01);
            s.spend(now, 0.001);
        }
        for s in &sources {
            s.attempt(now, "success");
            s.pacer(now, 8);
            s.in_flight(now, 1);
            s.in_flight(now, -1);
        }
        for (k, t) in keys.iter().zip(&tenants) {
            k.call(now, true, 0.0001);
            t.call(now, true, 0.0001);
        }
        events += (SCOPES * 4 + SOURCES * 4 + KEYS * 2) as u64;
    }
    for (i, s) in sources.iter().enumerate() {
        s.breaker((t0 + day) * 1000 + i as u64, "open");
    }
    let view = book.view(t0 + day - 1, 86_400);
    assert_eq!(view.points, 1_440);
    let bytes = book.bytes();
    let bound = bound_bytes(SCOPES, SOURCES, 2 * KEYS);
    let grown = match (before, rss_bytes()) {
        (Some(b), Some(a)) => Some(a.saturating_sub(b)),
        _ => None,
    };
    let mib = |b: usize| b as f64 / (1 << 20) as f64;
    println!(
        "{events} events; ring {:.1} MiB (bound {:.1} MiB); resident memory grew {}",
        mib(bytes),
        mib(bound),
        grown.map_or("(unknown: no /proc)".into(), |g| format!(
            "{:.1} MiB",
            mib(g)
        ))
    );
    assert!(
        bytes <= bound,
        "the ring holds {bytes} B, over its bound {bound} B"
    );
    if let Some(g) = grown {
        // The ring plus the allocator's and the series maps' overhead: within a quarter.
        assert!(g <= bound + bound / 4, "RSS grew {g} B, bound {bound} B");
    }
}

/// Nanoseconds per event on one scope and one source, single-threaded (no contention).
fn cost_per_event() {
    let book = Book::default();
    let scope = book.scope("A");
    let source = book.source("A", "s");
    let n = 2_000_000u64;
    let t0 = 1_700_000_000;
    let started = std::time::Instant::now();
    for i in 0..n {
        let now = t0 + i / 10_000;
        scope.call(now, "ok", 0.2);
        source.attempt(now, "success");
    }
    let per_event = started.elapsed().as_nanos() as f64 / (2 * n) as f64;
    println!(
        "{{\"series_ns_per_event\": {per_event:.1}, \"events\": {}}}",
        2 * n
    );
}
