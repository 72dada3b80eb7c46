//! The comparison (test builds): scripted schedules run through the simulator and through the
//! production runtime must give the same attempts and the same ending.

use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::outcome::{FailureClass, SourceReason};
use crate::policy::select::Selector;
use crate::ports::breaker::BreakerConfig;
use crate::ports::gate::Limits;
use crate::ports::transport::{EventSink, Transport};
use crate::runtime::{
    AttemptReport, AttemptResult, CallFailure, CallObserver, GovernOptions, ScopeConfig,
    TerminalReport,
};
use rand::rngs::SmallRng;
use rand::SeedableRng;

use super::executor::Executor;
use super::faults::{Answer, Faults, SimError};
use super::params::{SCOPE, SCRIPT_LATENCY};
use super::state::{AttemptLog, CallBook, State};
use super::world::World;
/// One call through the simulator on a scripted schedule: `sources` sources (default breakers,
/// no limits, AIMD pacers, round-robin selection) whose attempts answer `script` in order (then
/// `Ok`), 10 ms each. Returns the attempts, how the call ended, and any broken invariant.
fn run_script(
    config: ScopeConfig,
    sources: usize,
    script: Vec<Answer>,
) -> (AttemptLog, &'static str, Vec<String>) {
    let book = CallBook::new(1, false, sources);
    let faults = (0..sources)
        .map(|_| Faults::quiet(SCRIPT_LATENCY))
        .collect();
    let mut state = State::new(
        SmallRng::seed_from_u64(0),
        faults,
        60_000,
        None,
        vec![book],
        true,
    );
    state.script = Some(script.into());
    let specs = (0..sources)
        .map(|_| {
            (
                BreakerConfig::default(),
                Limits::default(),
                crate::testkit::aimd(),
            )
        })
        .collect();
    let picker = (
        Box::new(crate::policy::select::RoundRobin::default()) as Box<dyn Selector>,
        SmallRng::seed_from_u64(0),
        Vec::new(),
    );
    let world = Rc::new(World::assemble(
        state,
        config,
        specs,
        picker,
        vec![(0, None)],
        None,
    ));
    Executor::new(Rc::clone(&world)).run();
    world.check_quiescent();
    let mut state = world.lock();
    let violations = state.violations.iter().map(|(_, v)| v.clone()).collect();
    let call = &mut state.calls[0];
    let ending = call.ending.unwrap_or("never returned");
    (std::mem::take(&mut call.log), ending, violations)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::{Runtime, RuntimeOptions, SourceSpec};

    /// The production transport on the same script: each attempt answers the next entry.
    #[derive(Debug)]
    struct Scripted(Arc<Mutex<VecDeque<Answer>>>);

    #[async_trait::async_trait]
    impl Transport for Scripted {
        type Request = ();
        type Response = ();
        type Event = u64;
        type Error = SimError;

        async fn send(&self, _: &(), _: Option<&EventSink<u64>>) -> Result<(), SimError> {
            tokio::time::sleep(Duration::from_millis(SCRIPT_LATENCY)).await;
            let answer = self.0.lock().unwrap().pop_front();
            answer.unwrap_or(Ok(()))
        }

        fn tokens_used(_: &()) -> Option<u64> {
            None
        }
    }

    #[derive(Default)]
    struct Log(Mutex<AttemptLog>);

    impl CallObserver<Scripted> for Log {
        fn on_attempt(&self, report: &AttemptReport<'_, Scripted>) {
            let result = match &report.result {
                AttemptResult::Ok(()) => "ok".to_string(),
                AttemptResult::Err(error) => error.to_string(),
                AttemptResult::Cancelled => "cancelled".to_string(),
                AttemptResult::HedgeCancelled => "hedge_cancelled".to_string(),
            };
            self.0
                .lock()
                .unwrap()
                .push((report.source.to_string(), result));
        }
        fn on_terminal(&self, _: &TerminalReport<'_, SimError>) {}
    }

    /// The same script through the production runtime (actors, tokio, paused time).
    async fn run_production(
        config: ScopeConfig,
        sources: usize,
        script: Vec<Answer>,
    ) -> (AttemptLog, &'static str) {
        let runtime = Runtime::start(
            crate::testkit::memory_governance(),
            RuntimeOptions::default(),
        )
        .await
        .unwrap();
        let answers = Arc::new(Mutex::new(VecDeque::from(script)));
        let specs = (0..sources)
            .map(|i| SourceSpec {
                name: format!("s{i}").into(),
                transport: Arc::new(Scripted(Arc::clone(&answers))),
                breaker: BreakerConfig::default(),
                limits: Limits::default(),
                est_tokens: 100,
            })
            .collect();
        let scope = runtime
            .add_scope(
                config,
                specs,
                Box::new(crate::policy::select::RoundRobin::default()),
                crate::testkit::aimd(),
            )
            .await
            .unwrap();
        let log = Log::default();
        let result = scope.call(&(), &log, None, GovernOptions::default()).await;
        runtime.shutdown(Duration::from_secs(1)).await;
        let ending = result.as_ref().map_or_else(CallFailure::kind, |_| "ok");
        (log.0.into_inner().unwrap(), ending)
    }

    fn error(class: FailureClass, reason: SourceReason, retry_after: Option<u64>) -> Answer {
        Err(SimError {
            class,
            reason,
            rate_limited: reason == SourceReason::RateLimited,
            retry_after: retry_after.map(Duration::from_millis),
            cut: None,
        })
    }

    /// Same events in, same attempts and ending out: the simulator and production run the same
    /// driver, so they must agree on every scripted schedule.
    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn production_and_the_simulator_agree_on_scripted_schedules() {
        use FailureClass::{RequestRejected, SourceDead, Transient};
        use SourceReason::{NetworkError, RateLimited, Timeout};
        let scripts = [
            // A 429 with Retry-After, a 503, a dead key, then an answer.
            vec![
                error(Transient, RateLimited, Some(300)),
                error(Transient, NetworkError, None),
                error(SourceDead, SourceReason::SourceDead, None),
            ],
            // The budget spent on transient failures.
            vec![
                error(Transient, Timeout, None),
                error(Transient, NetworkError, Some(50)),
                error(Transient, Timeout, None),
                error(Transient, NetworkError, None),
            ],
            // A rejected request ends the call at once.
            vec![error(RequestRejected, NetworkError, None)],
        ];
        for (i, script) in scripts.into_iter().enumerate() {
            let mut config = ScopeConfig::new(SCOPE);
            config.max_attempts = 3;
            config.backoff_base = Duration::from_millis(100);
            config.backoff_max = Duration::from_secs(1);
            let (sim_log, sim_ending, violations) = run_script(config.clone(), 3, script.clone());
            assert!(violations.is_empty(), "script {i}: {violations:?}");
            let (prod_log, prod_ending) = run_production(config, 3, script).await;
            assert!(!prod_log.is_empty(), "script {i}: no attempt made");
            assert_eq!(sim_log, prod_log, "script {i}: attempts differ");
            assert_eq!(sim_ending, prod_ending, "script {i}: endings differ");
        }
    }
}
