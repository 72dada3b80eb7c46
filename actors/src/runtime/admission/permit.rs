//! What one attempt asks admission for ([`AdmitRequest`]), what it is answered
//! ([`AdmitAnswer`]) and what it holds when admitted ([`Permit`]) until its finish.

use std::sync::Arc;

use crate::ports::attempt::{AttemptAdmit, AttemptPermit};
use crate::ports::breaker::BreakerConfig;
use crate::ports::gate::GateRequest;
use crate::ports::BackendError;

use super::super::metrics::BreakerGauge;

/// One admission request.
#[derive(Debug, Clone)]
pub(crate) struct AdmitRequest {
    /// The gates to pass.
    pub(crate) gate: GateRequest,
    /// The source's breaker parameters.
    pub(crate) breaker: BreakerConfig,
    /// Where the breaker state this admission, or the finish of its permit, learns is published.
    pub(crate) gauge: Arc<BreakerGauge>,
}

/// A granted admission: breaker passed (or probe held) and a lease in every gate.
#[derive(Debug, Clone)]
pub(crate) struct Permit {
    /// Lease, epoch and probe.
    pub(crate) attempt: AttemptPermit,
    /// The source's breaker parameters.
    pub(crate) breaker: BreakerConfig,
    /// The source's breaker gauge: the finish publishes the state it left there.
    pub(crate) gauge: Arc<BreakerGauge>,
}

/// The answer to an admission request: the backend's, or the error that closes the door (a
/// backend that failed or timed out, an admission actor that is down).
pub(crate) type AdmitAnswer = Result<AttemptAdmit, BackendError>;
