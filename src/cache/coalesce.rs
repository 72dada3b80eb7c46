//! Single-flight: concurrent identical calls share one upstream call.
//!
//! The first caller for a key (the leader) runs its future; callers arriving while it runs
//! (followers) wait and receive a clone of the leader's `Ok` value. A leader's *error* is never
//! shared — followers retry and one of them becomes the new leader with its own future — because
//! an error may be specific to that attempt (its deadline, its cancellation). If the leader is
//! cancelled (its future dropped) or panics, followers are woken the same way, so nobody hangs.
//!
//! This is not a cache: once the leader finishes, the next caller for the key runs again.

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::watch;

/// How a caller's result was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// This caller ran its own future.
    Leader,
    /// This caller received a clone of another caller's result.
    Follower,
}

/// Single-flight coordinator keyed by `K`, sharing values `V`.
pub(crate) struct Coalescer<K, V> {
    flights: Arc<Mutex<Flights<K, V>>>,
}

struct Flights<K, V> {
    map: HashMap<K, Flight<V>>,
    next_id: u64,
}

struct Flight<V> {
    id: u64,
    rx: watch::Receiver<Option<V>>,
}

impl<K, V> std::fmt::Debug for Coalescer<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coalescer").finish_non_exhaustive()
    }
}

impl<K, V> Default for Coalescer<K, V>
where
    K: Eq + Hash + Clone,
    V: Clone,
{
    fn default() -> Self {
        Self::new()
    }
}

/// Held by the leader; removes the flight and wakes followers on completion, error, cancel or
/// panic (whichever drops it first).
struct LeaderGuard<K: Eq + Hash, V> {
    flights: Arc<Mutex<Flights<K, V>>>,
    key: K,
    id: u64,
    tx: Option<watch::Sender<Option<V>>>,
}

impl<K: Eq + Hash, V> LeaderGuard<K, V> {
    fn unregister(&mut self) {
        let mut flights = lock(&self.flights);
        if flights.map.get(&self.key).is_some_and(|f| f.id == self.id) {
            flights.map.remove(&self.key);
        }
    }

    fn complete(mut self, value: V) {
        // Unregister first: a caller arriving from now on starts a new flight instead of
        // subscribing to one that is about to end.
        self.unregister();
        if let Some(tx) = self.tx.take() {
            // `send_replace` stores the value even when no follower is subscribed.
            tx.send_replace(Some(value));
        }
    }
}

impl<K: Eq + Hash, V> Drop for LeaderGuard<K, V> {
    fn drop(&mut self) {
        if self.tx.is_some() {
            self.unregister();
            // Dropping the sender wakes followers with "closed": they retry.
            self.tx = None;
        }
    }
}

fn lock<K, V>(m: &Mutex<Flights<K, V>>) -> MutexGuard<'_, Flights<K, V>> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl<K, V> Coalescer<K, V>
where
    K: Eq + Hash + Clone,
    V: Clone,
{
    /// An empty coordinator.
    pub(crate) fn new() -> Self {
        Self {
            flights: Arc::new(Mutex::new(Flights {
                map: HashMap::new(),
                next_id: 0,
            })),
        }
    }

    /// Keys with a flight in progress.
    #[cfg(test)]
    pub(crate) fn in_flight(&self) -> usize {
        lock(&self.flights).map.len()
    }

    /// Runs `f` unless an identical flight is in progress, in which case waits for its `Ok`
    /// value. See the module docs for errors and cancellation. (The gateway needs the role and
    /// calls [`Coalescer::run_with_role`].)
    #[cfg(test)]
    pub(crate) async fn run<E, F>(&self, key: K, f: F) -> Result<V, E>
    where
        F: Future<Output = Result<V, E>>,
    {
        self.run_with_role(key, f).await.map(|(v, _)| v)
    }

    /// [`Coalescer::run`], also telling whether this caller led or followed.
    pub(crate) async fn run_with_role<E, F>(&self, key: K, f: F) -> Result<(V, Role), E>
    where
        F: Future<Output = Result<V, E>>,
    {
        loop {
            let joined = {
                let mut flights = lock(&self.flights);
                match flights.map.get(&key) {
                    Some(flight) => Err(flight.rx.clone()),
                    None => {
                        let id = flights.next_id;
                        flights.next_id += 1;
                        let (tx, rx) = watch::channel(None);
                        flights.map.insert(key.clone(), Flight { id, rx });
                        Ok(LeaderGuard {
                            flights: Arc::clone(&self.flights),
                            key: key.clone(),
                            id,
                            tx: Some(tx),
                        })
                    }
                }
            };
            match joined {
                Ok(guard) => {
                    // Dropping `guard` on error, cancellation or panic releases the followers.
                    let value = f.await?;
                    guard.complete(value.clone());
                    return Ok((value, Role::Leader));
                }
                Err(mut rx) => {
                    if let Ok(v) = rx.wait_for(Option::is_some).await {
                        if let Some(v) = v.as_ref() {
                            return Ok((v.clone(), Role::Follower));
                        }
                    }
                    // The leader failed or went away: try again (maybe as leader).
                }
            }
        }
    }
}

/// Shared result, errors not shared, leader cancellation and panic (docs/behaviour.md §9.1).
#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use super::{Coalescer, Role};

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
}

#[cfg(test)]
mod examples {
    //! Usage cases of crate-private items (they were doc examples while the items were public).

    #[test]
    fn role_example() {
        #[tokio::main(flavor = "current_thread")]
        async fn main() {
            use super::{Coalescer, Role};
            let flights: Coalescer<&str, u32> = Coalescer::new();
            // Alone, a caller always leads: it runs its own future.
            let (value, role) = flights
                .run_with_role("k", async { Ok::<_, ()>(7) })
                .await
                .unwrap();
            assert_eq!((value, role), (7, Role::Leader));
        }
        main();
    }

    #[test]
    fn coalescer_example() {
        #[tokio::main(flavor = "current_thread")]
        async fn main() {
            use super::Coalescer;
            use std::sync::atomic::{AtomicU32, Ordering};
            let flights: Coalescer<String, String> = Coalescer::new();
            let upstream_calls = AtomicU32::new(0);
            let counter = &upstream_calls;
            let call = move || async move {
                counter.fetch_add(1, Ordering::SeqCst);
                tokio::task::yield_now().await; // still running when the second caller arrives
                Ok::<_, std::io::Error>("answer".to_string())
            };
            let (a, b) = tokio::join!(
                flights.run("same question".to_string(), call()),
                flights.run("same question".to_string(), call()),
            );
            assert_eq!(
                (a.unwrap(), b.unwrap()),
                ("answer".to_string(), "answer".to_string())
            );
            assert_eq!(upstream_calls.load(Ordering::SeqCst), 1);
        }
        main();
    }

    #[test]
    fn coalescer_new_example() {
        let flights = super::Coalescer::<String, u64>::new();
        assert_eq!(flights.in_flight(), 0);
    }

    #[test]
    fn coalescer_in_flight_example() {
        #[tokio::main(flavor = "current_thread")]
        async fn main() {
            let flights = super::Coalescer::<&str, u32>::new();
            let value = flights
                .run("k", async {
                    assert_eq!(flights.in_flight(), 1); // this very flight
                    Ok::<_, ()>(1)
                })
                .await;
            assert_eq!(value, Ok(1));
            assert_eq!(flights.in_flight(), 0); // finished flights are forgotten
        }
        main();
    }

    #[test]
    fn coalescer_run_example() {
        #[tokio::main(flavor = "current_thread")]
        async fn main() {
            let flights = super::Coalescer::<&str, u32>::new();
            // Errors are the caller's own, and nothing is remembered: the next call runs again.
            assert_eq!(
                flights.run("k", async { Err::<u32, _>("timeout") }).await,
                Err("timeout")
            );
            assert_eq!(flights.run("k", async { Ok::<_, &str>(5) }).await, Ok(5));
        }
        main();
    }

    #[test]
    fn coalescer_run_with_role_example() {
        #[tokio::main(flavor = "current_thread")]
        async fn main() {
            use super::{Coalescer, Role};
            let flights: Coalescer<&str, u32> = Coalescer::new();
            let slow = async {
                tokio::task::yield_now().await;
                Ok::<_, ()>(42)
            };
            let (first, second) = tokio::join!(
                flights.run_with_role("k", slow),
                // This future would fail, but a follower's future is never run.
                flights.run_with_role("k", async { Err(()) }),
            );
            assert_eq!(first, Ok((42, Role::Leader)));
            assert_eq!(second, Ok((42, Role::Follower)));
        }
        main();
    }
}
