//! [`BatchResult`]: what a batch job yields per input line. Its own file because the runner
//! builds results and the job (`mod.rs`) streams them: both import it, neither owns it.

/// One result of a batch job: the output line of one input line.
///
/// ```
/// let r = polygateway::batch::BatchResult {
///     custom_id: Some("req-1".into()),
///     line: r#"{"custom_id":"req-1"}"#.into(),
///     status_code: Some(200),
///     error_code: None,
///     cost: 0.0,
///     latency_ms: Some(12.0),
///     from_journal: false,
/// };
/// assert!(r.is_success());
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct BatchResult {
    /// The line's `custom_id` (`None` when the line had none, or was not JSON).
    pub custom_id: Option<String>,
    /// The output line (OpenAI's Batch API output format), without a newline.
    pub line: String,
    /// The response's HTTP status (`None`: the line never became a call).
    pub status_code: Option<u16>,
    /// The error code (`invalid_json`, `missing_custom_id`, `duplicate_custom_id`,
    /// `invalid_url`, `invalid_body`, `model_not_found`, `journal_mismatch`, or the gateway
    /// error's code such as `request_rejected`, `retry_exhausted`, `circuit_open`).
    pub error_code: Option<String>,
    /// The answer's cost (0 when unpriced or failed).
    pub cost: f64,
    /// Time from the last send to the answer, milliseconds (`None` when nothing was sent).
    pub latency_ms: Option<f64>,
    /// Replayed from the journal (answered by an earlier run), not sent now.
    pub from_journal: bool,
}

impl BatchResult {
    /// Answered with status 200.
    ///
    /// ```
    /// let mut r = polygateway::batch::BatchResult {
    ///     custom_id: None,
    ///     line: String::new(),
    ///     status_code: None,
    ///     error_code: Some("invalid_json".into()),
    ///     cost: 0.0,
    ///     latency_ms: None,
    ///     from_journal: false,
    /// };
    /// assert!(!r.is_success());
    /// r.status_code = Some(200);
    /// r.error_code = None;
    /// assert!(r.is_success());
    /// ```
    pub fn is_success(&self) -> bool {
        self.status_code == Some(200)
    }
}
