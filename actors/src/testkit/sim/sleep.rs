//! A virtual-time sleep ([`Sleep`]): the timer every simulated wait, latency and backoff uses.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use super::params::Ms;
use super::state::{lock, State, Timer};
/// A virtual-time sleep: ready once the world's clock reaches `at`. It always yields once (as
/// tokio's timers do), so a loop of zero-length waits still hands control back to the executor.
/// Like a tokio timer it keeps its place among the timers due at the same instant however often
/// it is polled, and wakes whoever polled it last — the door's work is polled once in place
/// before its task takes it over, and its timer must not fall behind timers set in between.
pub(super) struct Sleep {
    pub(super) state: Arc<Mutex<State>>,
    pub(super) at: Ms,
    /// The timer set by the first poll.
    pub(super) timer: Option<u64>,
}

impl Sleep {
    pub(super) fn new(state: Arc<Mutex<State>>, after: Ms) -> Self {
        let at = lock(&state).now.saturating_add(after);
        Self {
            state,
            at,
            timer: None,
        }
    }
}

impl Future for Sleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut state = lock(&self.state);
        if let Some(timer) = self.timer {
            // Ready once its own timer fired, not merely once the clock reached `at`: a task
            // woken for something else at that instant must not overtake timers set before
            // this one (a network backend applies requests in the order they were sent).
            return match state.timer_payloads.get_mut(&timer) {
                Some(wake) => {
                    *wake = Timer::Wake(cx.waker().clone());
                    Poll::Pending
                }
                None => Poll::Ready(()),
            };
        }
        let at = self.at;
        let timer = state.timer(at, Timer::Wake(cx.waker().clone()));
        drop(state);
        self.timer = Some(timer);
        Poll::Pending
    }
}
