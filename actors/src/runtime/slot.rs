//! A shared, replaceable reference to a supervised actor.
//!
//! Supervisors restart children; handles must reach the *current* incarnation without a round trip
//! through the supervisor. The slot is written only by the supervisor and read on every call.

use std::sync::{Arc, RwLock};

use ractor::ActorRef;

/// The current incarnation of an actor, or `None` while it is down.
#[derive(Debug)]
pub struct ActorSlot<M> {
    inner: Arc<RwLock<SlotState<M>>>,
}

#[derive(Debug)]
enum SlotState<M> {
    Up(ActorRef<M>),
    Down(String),
}

impl<M> Clone for ActorSlot<M> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<M: Send + 'static> ActorSlot<M> {
    /// A slot holding `actor`.
    pub fn new(actor: ActorRef<M>) -> Self {
        Self {
            inner: Arc::new(RwLock::new(SlotState::Up(actor))),
        }
    }

    /// The current actor, or why there is none.
    pub fn get(&self) -> Result<ActorRef<M>, String> {
        match &*self.inner.read().unwrap_or_else(|e| e.into_inner()) {
            SlotState::Up(actor) => Ok(actor.clone()),
            SlotState::Down(reason) => Err(reason.clone()),
        }
    }

    /// Point the slot at a new incarnation.
    pub fn set(&self, actor: ActorRef<M>) {
        *self.inner.write().unwrap_or_else(|e| e.into_inner()) = SlotState::Up(actor);
    }

    /// Mark the actor as down with a reason callers will see.
    pub fn set_down(&self, reason: impl Into<String>) {
        *self.inner.write().unwrap_or_else(|e| e.into_inner()) = SlotState::Down(reason.into());
    }
}

impl<M: Send + 'static> ActorSlot<M> {
    /// A slot whose actor is not (yet) running.
    pub fn down(reason: impl Into<String>) -> Self {
        Self {
            inner: Arc::new(RwLock::new(SlotState::Down(reason.into()))),
        }
    }
}
