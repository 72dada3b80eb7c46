//! Where the door's background work runs in the simulator ([`SimTasks`]): spawned work joins the
//! executor's tasks (polled in the order it was woken, as every call is), and its timers are
//! virtual-time [`Sleep`]s.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;

use crate::runtime::admission::Tasks;

use super::params::ms;
use super::sleep::Sleep;
use super::state::State;

/// Work spawned since the executor last looked, in the order it was spawned.
pub(super) type Spawned = Arc<Mutex<Vec<BoxFuture<'static, ()>>>>;

/// The door's tasks and timers, in virtual time.
pub(super) struct SimTasks {
    pub(super) state: Arc<Mutex<State>>,
    pub(super) spawned: Spawned,
}

impl fmt::Debug for SimTasks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimTasks").finish_non_exhaustive()
    }
}

impl Tasks for SimTasks {
    fn can_run(&self) -> bool {
        true
    }

    fn spawn(&self, work: BoxFuture<'static, ()>) {
        self.spawned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(work);
    }

    fn sleep(&self, wait: Duration) -> BoxFuture<'static, ()> {
        Box::pin(Sleep::new(Arc::clone(&self.state), ms(wait)))
    }
}
