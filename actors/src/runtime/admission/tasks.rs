//! Where the door runs the work that outlives the call that started it, and the timers that work
//! waits on ([`Tasks`]): the runtime's tracked Tokio tasks in production ([`TrackedTasks`]), the
//! simulator's virtual-time executor there — so the simulator runs the door itself.

use std::fmt;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio_util::task::TaskTracker;

/// The door's executor and timer.
pub(crate) trait Tasks: Send + Sync + fmt::Debug {
    /// Whether work can run at all. A call dropped while its Tokio runtime shuts down has none,
    /// and backends time their calls with its timers: the lease and probe TTLs then reclaim what
    /// the call held.
    fn can_run(&self) -> bool;

    /// Run `work` as a task of its own, to its end, whoever waits for it (shutdown waits for it).
    fn spawn(&self, work: BoxFuture<'static, ()>);

    /// A timer of `wait`.
    fn sleep(&self, wait: Duration) -> BoxFuture<'static, ()>;
}

/// Tokio tasks on the runtime's tracker, which shutdown drains, and Tokio's timers.
#[derive(Debug, Clone)]
pub(crate) struct TrackedTasks(pub(crate) TaskTracker);

impl Tasks for TrackedTasks {
    fn can_run(&self) -> bool {
        tokio::runtime::Handle::try_current().is_ok()
    }

    fn spawn(&self, work: BoxFuture<'static, ()>) {
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                self.0.spawn_on(work, &runtime);
            }
            Err(_) => {
                tracing::warn!("no runtime to finish governance work on (lease TTL reclaims)")
            }
        }
    }

    fn sleep(&self, wait: Duration) -> BoxFuture<'static, ()> {
        Box::pin(tokio::time::sleep(wait))
    }
}
