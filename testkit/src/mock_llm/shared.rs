//! The state the server's handlers share ([`Shared`]): the behaviour plan, counters, recorded
//! requests, in-flight and connection settings; admitting (count, record, resolve) one request.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::http::{header, HeaderMap, HeaderValue};
use rand::rngs::StdRng;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::behaviour::{resolve, Behaviour};
use super::recording::{MockCounts, RecordedRequest};
/// How many request bodies are kept.
pub(super) const RECORDED_MAX: usize = 64;

pub(super) struct Plan {
    pub(super) behaviour: Behaviour,
    pub(super) seq: u64,
    pub(super) rng: StdRng,
}

pub(super) struct Shared {
    pub(super) plan: Mutex<Plan>,
    pub(super) counts: Mutex<MockCounts>,
    pub(super) recorded: Mutex<VecDeque<RecordedRequest>>,
    pub(super) in_flight: AtomicUsize,
    pub(super) max_in_flight: AtomicUsize,
    /// Requests by wall-clock minute (unix ms / 60 000) — the windows a Redis limiter counts in.
    pub(super) per_minute: Mutex<BTreeMap<u64, u64>>,
    pub(super) connections: AtomicUsize,
    pub(super) embedding_dim: AtomicUsize,
    /// `response_format` types the mock refuses with a 400, like a server without them.
    pub(super) refused_formats: Mutex<Vec<String>>,
    /// How connections end after an answer: [`KEEP_ALIVE`], [`CLOSE_ANNOUNCED`] or
    /// [`CLOSE_SILENTLY`].
    pub(super) connection_end: AtomicU8,
    /// The `Keep-Alive` header answers carry while connections stay open
    /// ([`MockUpstream::announce_keep_alive_timeout`]); `None`: no such header.
    pub(super) keep_alive: Mutex<Option<HeaderValue>>,
    pub(super) cancel: CancellationToken,
}

/// Connections stay open for the next request (the default).
pub(super) const KEEP_ALIVE: u8 = 0;
/// Every answer says `Connection: close`, and the connection is closed after it.
pub(super) const CLOSE_ANNOUNCED: u8 = 1;
/// Every answer says `Keep-Alive: timeout=5, max=100`, and the connection is closed after it
/// anyway (what llama.cpp's `llama-server` does after a streamed answer).
pub(super) const CLOSE_SILENTLY: u8 = 2;

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panicking test thread must not wedge the mock for the others.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Counts one in-flight request until dropped (with the response body for streams).
pub(super) struct InFlight(Arc<Shared>);

impl InFlight {
    pub(super) fn new(shared: &Arc<Shared>) -> Self {
        let now = shared.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        shared.max_in_flight.fetch_max(now, Ordering::SeqCst);
        let minute = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64 / 60_000);
        *lock(&shared.per_minute).entry(minute).or_default() += 1;
        InFlight(shared.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Shared {
    /// Count, record and resolve the behaviour of one request.
    pub(super) fn admit(&self, path: &str, body: &Value, headers: &HeaderMap) -> Behaviour {
        let resolved = {
            let mut plan = lock(&self.plan);
            let seq = plan.seq;
            plan.seq += 1;
            let Plan { behaviour, rng, .. } = &mut *plan;
            resolve(behaviour, seq, rng)
        };
        {
            let mut counts = lock(&self.counts);
            counts.total += 1;
            if path.ends_with("/embeddings") {
                counts.embeddings += 1;
            } else {
                counts.chat += 1;
            }
            *counts.by_behaviour.entry(resolved.name()).or_insert(0) += 1;
        }
        self.record(path, body, headers);
        resolved
    }

    pub(super) fn record(&self, path: &str, body: &Value, headers: &HeaderMap) {
        let mut rec = lock(&self.recorded);
        if rec.len() == RECORDED_MAX {
            rec.pop_front();
        }
        rec.push_back(RecordedRequest {
            path: path.to_string(),
            body: body.clone(),
            authorization: headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string),
        });
    }
}
