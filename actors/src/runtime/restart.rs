//! The restart policy of supervisors: OTP-like intensity limit with backoff.
//!
//! A child may fail at most `max_restarts` times within `period`; each restart waits a growing
//! backoff. One more failure inside the period escalates: the supervisor stops the child's subtree
//! and reports upward instead of restarting forever. Sans-I/O: time comes in as `now`.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use ractor::{ActorCell, SupervisionEvent};

/// Intensity limit and backoff of one supervised child.
///
/// ```
/// use std::time::Duration;
/// use polygateway_actors::runtime::{RestartPolicy, RuntimeOptions};
/// let default = RestartPolicy::default();
/// assert_eq!((default.max_restarts, default.period), (5, Duration::from_secs(30)));
/// // Stricter: give a child up at its second failure within a minute.
/// let strict = RestartPolicy { max_restarts: 1, period: Duration::from_secs(60), ..default };
/// let options = RuntimeOptions { restart: strict, ..RuntimeOptions::default() };
/// assert_eq!(options.restart.backoff_base, Duration::from_millis(50));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RestartPolicy {
    /// Restarts allowed within `period` before escalating.
    pub max_restarts: u32,
    /// The sliding window of the intensity limit.
    pub period: Duration,
    /// Backoff of the first restart; doubles per recent restart.
    pub backoff_base: Duration,
    /// Backoff cap.
    pub backoff_max: Duration,
}

impl Default for RestartPolicy {
    /// 5 restarts in 30 s, backoff 50 ms doubling to 2 s.
    fn default() -> Self {
        Self {
            max_restarts: 5,
            period: Duration::from_secs(30),
            backoff_base: Duration::from_millis(50),
            backoff_max: Duration::from_secs(2),
        }
    }
}

/// What a supervisor does with a failed child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RestartDecision {
    /// Restart after this delay.
    Restart(Duration),
    /// Intensity exceeded: stop and report upward.
    Escalate,
}

/// The failure history of one child.
#[derive(Debug, Clone)]
pub(crate) struct RestartBudget {
    policy: RestartPolicy,
    recent: VecDeque<Instant>,
}

impl RestartBudget {
    /// A fresh budget.
    pub(crate) fn new(policy: RestartPolicy) -> Self {
        Self {
            policy,
            recent: VecDeque::new(),
        }
    }

    /// Record a failure at `now` and decide.
    pub(crate) fn on_failure(&mut self, now: Instant) -> RestartDecision {
        while let Some(&first) = self.recent.front() {
            if now.saturating_duration_since(first) >= self.policy.period {
                self.recent.pop_front();
            } else {
                break;
            }
        }
        if self.recent.len() as u32 >= self.policy.max_restarts {
            return RestartDecision::Escalate;
        }
        let exponent = self.recent.len().min(16) as u32;
        self.recent.push_back(now);
        let delay = self
            .policy
            .backoff_base
            .saturating_mul(1u32 << exponent)
            .min(self.policy.backoff_max);
        RestartDecision::Restart(delay)
    }

    /// Restarts counted in the current window.
    #[cfg(test)]
    pub(crate) fn recent_restarts(&self) -> usize {
        self.recent.len()
    }
}

/// The child a supervision event reports as gone (failed or stopped) and why; `None` for events
/// that need no decision (started, process-group changes).
pub(crate) fn stopped_child(event: SupervisionEvent) -> Option<(ActorCell, String)> {
    match event {
        SupervisionEvent::ActorFailed(cell, err) => Some((cell, err.to_string())),
        SupervisionEvent::ActorTerminated(cell, _, reason) => {
            Some((cell, reason.unwrap_or_else(|| "stopped".into())))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> RestartPolicy {
        RestartPolicy {
            max_restarts: 3,
            period: Duration::from_secs(10),
            backoff_base: Duration::from_millis(100),
            backoff_max: Duration::from_millis(250),
        }
    }

    #[test]
    fn backoff_grows_and_caps_then_escalates() {
        let mut b = RestartBudget::new(policy());
        let t = Instant::now();
        assert_eq!(
            b.on_failure(t),
            RestartDecision::Restart(Duration::from_millis(100))
        );
        assert_eq!(
            b.on_failure(t),
            RestartDecision::Restart(Duration::from_millis(200))
        );
        assert_eq!(
            b.on_failure(t),
            RestartDecision::Restart(Duration::from_millis(250))
        );
        assert_eq!(b.on_failure(t), RestartDecision::Escalate);
    }

    #[test]
    fn old_failures_leave_the_window() {
        let mut b = RestartBudget::new(policy());
        let t = Instant::now();
        for _ in 0..3 {
            b.on_failure(t);
        }
        let later = t + Duration::from_secs(11);
        assert_eq!(
            b.on_failure(later),
            RestartDecision::Restart(Duration::from_millis(100))
        );
        assert_eq!(b.recent_restarts(), 1);
    }
}

#[cfg(test)]
mod examples {
    //! Usage cases of crate-private items (they were doc examples while the items were public).

    #[test]
    fn restart_decision_example() {
        use super::{RestartBudget, RestartDecision, RestartPolicy};
        use std::time::{Duration, Instant};
        let mut budget = RestartBudget::new(RestartPolicy::default());
        match budget.on_failure(Instant::now()) {
            RestartDecision::Restart(delay) => assert_eq!(delay, Duration::from_millis(50)),
            RestartDecision::Escalate => panic!("a first failure is within the default budget"),
        }
    }

    #[test]
    fn restart_budget_example() {
        use super::{RestartBudget, RestartDecision, RestartPolicy};
        use std::time::{Duration, Instant};
        let policy = RestartPolicy {
            max_restarts: 1,
            period: Duration::from_secs(10),
            ..Default::default()
        };
        let mut budget = RestartBudget::new(policy);
        let t = Instant::now();
        assert!(matches!(budget.on_failure(t), RestartDecision::Restart(_)));
        assert_eq!(
            budget.on_failure(t + Duration::from_secs(1)),
            RestartDecision::Escalate
        );
    }

    #[test]
    fn restart_budget_new_example() {
        use super::{RestartBudget, RestartPolicy};
        let budget = RestartBudget::new(RestartPolicy::default());
        assert_eq!(budget.recent_restarts(), 0);
    }

    #[test]
    fn restart_budget_on_failure_example() {
        use super::{RestartBudget, RestartDecision, RestartPolicy};
        use std::time::{Duration, Instant};
        let policy = RestartPolicy {
            max_restarts: 3,
            period: Duration::from_secs(10),
            backoff_base: Duration::from_millis(100),
            backoff_max: Duration::from_millis(250),
        };
        let mut budget = RestartBudget::new(policy);
        let now = Instant::now();
        // The backoff doubles per recent restart, up to its cap …
        assert_eq!(
            budget.on_failure(now),
            RestartDecision::Restart(Duration::from_millis(100))
        );
        assert_eq!(
            budget.on_failure(now),
            RestartDecision::Restart(Duration::from_millis(200))
        );
        assert_eq!(
            budget.on_failure(now),
            RestartDecision::Restart(Duration::from_millis(250))
        );
        // … and one failure too many within the period escalates.
        assert_eq!(budget.on_failure(now), RestartDecision::Escalate);
    }

    #[test]
    fn restart_budget_recent_restarts_example() {
        use super::{RestartBudget, RestartPolicy};
        use std::time::{Duration, Instant};
        let period = Duration::from_secs(30);
        let mut budget = RestartBudget::new(RestartPolicy {
            period,
            ..RestartPolicy::default()
        });
        let t0 = Instant::now();
        budget.on_failure(t0);
        budget.on_failure(t0 + Duration::from_secs(1));
        assert_eq!(budget.recent_restarts(), 2);
        // Failures older than the period leave the window.
        budget.on_failure(t0 + period + Duration::from_secs(2));
        assert_eq!(budget.recent_restarts(), 1);
    }
}
