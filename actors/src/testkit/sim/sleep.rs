//! A virtual-time sleep ([`Sleep`]): the timer every simulated wait, latency and backoff uses.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use super::params::Ms;
use super::state::{lock, State, Timer};
/// A virtual-time sleep: ready once the world's clock reaches `at`. It always yields once (as
/// tokio's timers do), so a loop of zero-length waits still hands control back to the executor.
pub(super) struct Sleep {
    pub(super) state: Arc<Mutex<State>>,
    pub(super) at: Ms,
    pub(super) armed: bool,
}

impl Sleep {
    pub(super) fn new(state: Arc<Mutex<State>>, after: Ms) -> Self {
        let at = lock(&state).now.saturating_add(after);
        Self {
            state,
            at,
            armed: false,
        }
    }
}

impl Future for Sleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut state = lock(&self.state);
        if self.armed && state.now >= self.at {
            return Poll::Ready(());
        }
        let at = self.at;
        state.timer(at, Timer::Wake(cx.waker().clone()));
        drop(state);
        self.armed = true;
        Poll::Pending
    }
}
