//! One telemetry row: a record of one attempt, one cache hit or one terminal failure (docs/behaviour.md §8.1).
//!
//! The fields follow the column order of the `llm_calls` table; `created_at` is absent because the
//! database fills it (`DEFAULT now()` / `CURRENT_TIMESTAMP`). Building a row (digesting messages,
//! pricing, formatting errors) is done with the helpers of [`super::digest`] and [`super::cost`];
//! this file only holds the value and how it binds to SQL parameters.

use std::collections::BTreeMap;

use crate::types::MetaValue;

/// One row of `llm_calls`, in column order (without `created_at`).
///
/// Start from [`TelemetryRow::new`] and fill what the record knows:
///
/// ```
/// use polygateway::telemetry::TelemetryRow;
/// let row = TelemetryRow {
///     model: "deepseek-chat".into(),
///     provider: "deepseek".into(),
///     source_name: "deepseek_1".into(),
///     response: Some("Paris".into()),
///     prompt_tokens: 12,
///     completion_tokens: 3,
///     usage_source: "measured".into(),
///     latency_ms: 420.0,
///     ..TelemetryRow::new("6f1c0d2e-0000-4000-8000-000000000001")
/// };
/// assert!(row.error.is_none() && !row.cache_hit);
/// assert_eq!(row.tenant_id, "");
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct TelemetryRow {
    /// UUID of this attempt or cache-hit record; every row has its own.
    pub call_id: String,
    /// The caller's parent call, for chains.
    pub parent_call_id: Option<String>,
    /// The caller's session.
    pub session_id: Option<String>,
    /// Configured model of the source.
    pub model: String,
    /// Provider name.
    pub provider: String,
    /// Source name `{provider}_{n}`.
    pub source_name: String,
    /// JSON of the messages, multimodal parts digested, text capped ([`super::messages_json`]).
    pub messages: String,
    /// Answer text (capped); `None` on failures.
    pub response: Option<String>,
    /// Reasoning text (capped); `None` when there was none.
    pub thinking: Option<String>,
    /// Prompt tokens (0 when unavailable).
    pub prompt_tokens: i64,
    /// Completion tokens (0 when unavailable).
    pub completion_tokens: i64,
    /// `measured` | `estimated` | `unavailable`.
    pub usage_source: String,
    /// Wall time of the attempt (0 on a cache hit).
    pub latency_ms: f64,
    /// Time to first token, when streaming.
    pub ttft_ms: Option<f64>,
    /// Largest inter-token gap, when streaming.
    pub max_inter_token_ms: Option<f64>,
    /// Served from the response cache.
    pub cache_hit: bool,
    /// `ClassName: message` (`digest::error_text`); `None` on success.
    pub error: Option<String>,
    /// Cost, `None` when unknown (no price, usage unavailable); 0.0 on cache hits.
    pub cost: Option<f64>,
    /// Provider prompt-cache hits, when reported (the original library's column; the same
    /// count as `cache_read_tokens`).
    pub cached_prompt_tokens: Option<i64>,
    /// The `model` the API reported.
    pub model_reported: Option<String>,
    /// Canonical JSON of overlay ⊎ extra_body (`digest::sampling_json`); `None` when empty.
    pub sampling: Option<String>,
    /// Reasoning tokens, when reported.
    pub reasoning_tokens: Option<i64>,
    /// Tenant; `""` = unattributed.
    pub tenant_id: String,
    /// JSON object of the caller's meta (`meta_json`); `"{}"` when empty.
    pub meta: String,
    /// The structured mode a typed call's ask was sent in (`json_schema`, `json_object`,
    /// `prompt`); `None` for other calls.
    pub structured_mode: Option<String>,
    /// A chat answer's `finish_reason` as the upstream said it (`stop`, `length`,
    /// `tool_calls`, …); `None` for failed attempts, other kinds and upstreams that gave none.
    pub finish_reason: Option<String>,
    /// A chat answer's number of tool calls (the legacy `function_call` counts as one);
    /// `None` for failed attempts and other kinds.
    pub tool_call_count: Option<i64>,
    /// Time the call waited for capacity (pacer slot, quota gate, cooldown, 429 pushback)
    /// before this attempt, since its previous attempt or its start: the rows of one call add
    /// up to its wait. A terminal row carries the call's whole wait; a cache hit 0.
    pub capacity_wait_ms: f64,
    /// The call this row belongs to (attempts, re-asks and a cache hit of one call share it);
    /// `parent_call_id` is the caller's chain link.
    pub call_group_id: Option<String>,
    /// Prompt tokens read from the provider's prompt cache, when reported (billed at the
    /// cached-input price).
    pub cache_read_tokens: Option<i64>,
    /// Prompt tokens written to the provider's prompt cache, either lifetime, when reported
    /// (billed at the cache-write prices).
    pub cache_write_tokens: Option<i64>,
    /// The part of `cache_write_tokens` written with a 1-hour lifetime.
    pub cache_write_1h_tokens: Option<i64>,
    /// The source whose stream, cut after content, this attempt continued (docs/behaviour.md
    /// §5.10); `None` for every other row.
    pub continued_from: Option<String>,
}

impl TelemetryRow {
    /// A row with the given `call_id` and every other column empty (`usage_source` =
    /// `unavailable`, `tenant_id` = `""`, `meta` = `{}`, `messages` = `[]`).
    ///
    /// ```
    /// use polygateway::telemetry::TelemetryRow;
    /// let row = TelemetryRow::new("call-1");
    /// assert_eq!(row.call_id, "call-1");
    /// assert_eq!((row.messages.as_str(), row.meta.as_str()), ("[]", "{}"));
    /// assert_eq!(row.usage_source, "unavailable");
    /// assert_eq!((row.prompt_tokens, row.cost), (0, None));
    /// ```
    pub fn new(call_id: impl Into<String>) -> Self {
        Self {
            call_id: call_id.into(),
            parent_call_id: None,
            session_id: None,
            model: String::new(),
            provider: String::new(),
            source_name: String::new(),
            messages: "[]".into(),
            response: None,
            thinking: None,
            prompt_tokens: 0,
            completion_tokens: 0,
            usage_source: "unavailable".into(),
            latency_ms: 0.0,
            ttft_ms: None,
            max_inter_token_ms: None,
            cache_hit: false,
            error: None,
            cost: None,
            cached_prompt_tokens: None,
            model_reported: None,
            sampling: None,
            reasoning_tokens: None,
            tenant_id: String::new(),
            meta: "{}".into(),
            structured_mode: None,
            finish_reason: None,
            tool_call_count: None,
            capacity_wait_ms: 0.0,
            call_group_id: None,
            cache_read_tokens: None,
            cache_write_tokens: None,
            cache_write_1h_tokens: None,
            continued_from: None,
        }
    }

    /// The values in [`super::schema::INSERT_COLUMNS`] order.
    pub(crate) fn values(&self) -> [SqlValue<'_>; 33] {
        use SqlValue::{Bool, Int, Real, Text};
        fn s(v: &Option<String>) -> SqlValue<'_> {
            SqlValue::Text(v.as_deref())
        }
        [
            Text(Some(&self.call_id)),
            s(&self.parent_call_id),
            s(&self.session_id),
            Text(Some(&self.model)),
            Text(Some(&self.provider)),
            Text(Some(&self.source_name)),
            Text(Some(&self.messages)),
            s(&self.response),
            s(&self.thinking),
            Int(Some(self.prompt_tokens)),
            Int(Some(self.completion_tokens)),
            Text(Some(&self.usage_source)),
            Real(Some(self.latency_ms)),
            Real(self.ttft_ms),
            Real(self.max_inter_token_ms),
            Bool(self.cache_hit),
            s(&self.error),
            Real(self.cost),
            Int(self.cached_prompt_tokens),
            s(&self.model_reported),
            s(&self.sampling),
            Int(self.reasoning_tokens),
            Text(Some(&self.tenant_id)),
            Text(Some(&self.meta)),
            s(&self.structured_mode),
            s(&self.finish_reason),
            Int(self.tool_call_count),
            Real(Some(self.capacity_wait_ms)),
            s(&self.call_group_id),
            Int(self.cache_read_tokens),
            Int(self.cache_write_tokens),
            Int(self.cache_write_1h_tokens),
            s(&self.continued_from),
        ]
    }
}

/// The caller's meta as the `meta` column's JSON object (keys sorted).
pub(crate) fn meta_json(meta: &BTreeMap<String, MetaValue>) -> String {
    let obj: serde_json::Map<String, serde_json::Value> =
        meta.iter().map(|(k, v)| (k.clone(), v.to_json())).collect();
    crate::cache::canonical_json(&serde_json::Value::Object(obj))
}

/// One SQL parameter, borrowed from a row. Binds to both backends.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum SqlValue<'a> {
    Text(Option<&'a str>),
    Int(Option<i64>),
    Real(Option<f64>),
    Bool(bool),
}

#[cfg(feature = "sqlite")]
impl rusqlite::ToSql for SqlValue<'_> {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        match self {
            SqlValue::Text(v) => v.to_sql(),
            SqlValue::Int(v) => v.to_sql(),
            SqlValue::Real(v) => v.to_sql(),
            SqlValue::Bool(v) => v.to_sql(),
        }
    }
}

#[cfg(feature = "postgres")]
impl tokio_postgres::types::ToSql for SqlValue<'_> {
    fn to_sql(
        &self,
        ty: &tokio_postgres::types::Type,
        out: &mut bytes::BytesMut,
    ) -> Result<tokio_postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self {
            SqlValue::Text(v) => v.to_sql(ty, out),
            SqlValue::Int(v) => v.to_sql(ty, out),
            SqlValue::Real(v) => v.to_sql(ty, out),
            SqlValue::Bool(v) => v.to_sql(ty, out),
        }
    }

    fn accepts(_ty: &tokio_postgres::types::Type) -> bool {
        // Every placeholder carries an explicit cast (`$n::text`, `$n::int8`, …) that matches the
        // variant; `to_sql_checked` still verifies the concrete type per value.
        true
    }

    fn to_sql_checked(
        &self,
        ty: &tokio_postgres::types::Type,
        out: &mut bytes::BytesMut,
    ) -> Result<tokio_postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self {
            SqlValue::Text(v) => v.to_sql_checked(ty, out),
            SqlValue::Int(v) => v.to_sql_checked(ty, out),
            SqlValue::Real(v) => v.to_sql_checked(ty, out),
            SqlValue::Bool(v) => v.to_sql_checked(ty, out),
        }
    }
}

#[cfg(test)]
mod examples {
    //! Usage cases of crate-private items (they were doc examples while the items were public).

    #[test]
    fn meta_json_example() {
        use super::meta_json;
        use std::collections::BTreeMap;
        let mut meta = BTreeMap::new();
        meta.insert("stage".to_string(), "extract".into());
        meta.insert("batch".to_string(), 42.into());
        assert_eq!(meta_json(&meta), r#"{"batch":42,"stage":"extract"}"#);
        assert_eq!(meta_json(&BTreeMap::new()), "{}");
    }
}
