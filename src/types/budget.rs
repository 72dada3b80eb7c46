//! Spend-budget values (docs/behaviour.md §5.8): a configured limit per window
//! ([`SpendBudget`]; parsed in `config::budget`) and a budget's spend against it
//! ([`BudgetStatus`]). Values only, so options, errors and the gateway share them without
//! importing one another.

use std::fmt;
use std::time::Duration;

use polygateway_actors::BudgetPeriod;

/// A spend limit per window.
///
/// ```
/// use polygateway::config::SpendBudget;
/// use polygateway::ports::BudgetPeriod;
/// let b = SpendBudget::parse("LLM__BUDGET", "12.5/day")?;
/// assert_eq!((b.micros, b.period), (12_500_000, BudgetPeriod::Day));
/// assert_eq!(b.to_string(), "12.5/day");
/// let err = SpendBudget::parse("LLM__BUDGET", "12.5 per day").unwrap_err();
/// assert!(err.to_string().contains("LLM__BUDGET"), "{err}");
/// # Ok::<(), polygateway::config::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpendBudget {
    /// The limit per window in micro-units of the pricing currency (1 = 0.000001).
    pub micros: u64,
    /// The window: a calendar hour, day or month in UTC.
    pub period: BudgetPeriod,
}

impl SpendBudget {
    /// The limit in currency units.
    pub(crate) fn amount(&self) -> f64 {
        self.micros as f64 / 1e6
    }
}

impl fmt::Display for SpendBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.amount(), self.period.name())
    }
}

/// A budget's spend against its limit in the current window (what [`crate::Gateway::budgets`]
/// lists, and what a `budget_exhausted` refusal carries).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use polygateway_testkit::{mock_settings, Behaviour, MockUpstream};
/// use polygateway::Message;
/// let mock = MockUpstream::start(Behaviour::healthy()).await;
/// let dir = tempfile::tempdir()?;
/// let prices = dir.path().join("prices.json");
/// // $1 per million tokens either way.
/// std::fs::write(&prices, r#"{"gpt-test": {"input_per_1m": 1.0, "output_per_1m": 1.0}}"#)?;
/// let settings = mock_settings(
///     &[("LLM", &mock.base_url())],
///     &[
///         ("LLM__OPENAI__1__MODEL", "gpt-test"),
///         ("LLM__BUDGET", "5/day"),
///         ("PGW_PRICING_PATH", prices.to_str().unwrap()),
///     ],
/// );
/// let gw = polygateway::Gateway::from_settings(settings, "LLM").await?;
/// let answer = gw.chat(vec![Message::user("hi")]).await?;
/// let budgets = gw.budgets().await?;
/// assert_eq!(budgets[0].name, "scope:LLM");
/// assert_eq!((budgets[0].limit, budgets[0].period.as_str()), (5.0, "day"));
/// assert!((budgets[0].spent - answer.cost.unwrap()).abs() < 1e-6);
/// let tokens = answer.prompt_tokens + answer.completion_tokens;
/// assert!((answer.cost.unwrap() - tokens as f64 / 1e6).abs() < 1e-12);
/// gw.shutdown().await;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct BudgetStatus {
    /// `scope:<SCOPE>`, `tenant:<tenant id>` or `vkey:<key name>`.
    pub name: String,
    /// The limit per window, in the pricing table's currency.
    pub limit: f64,
    /// Spent (settled) and reserved (calls in flight) in the current window.
    pub spent: f64,
    /// `limit - spent`, never below 0.
    pub remaining: f64,
    /// `hour`, `day` or `month` (calendar windows in UTC).
    pub period: String,
    /// Until the window resets.
    pub resets_in: Duration,
}

impl BudgetStatus {
    pub(crate) fn new(
        name: &str,
        limit_micros: u64,
        spent_micros: u64,
        period: String,
        resets_in: Duration,
    ) -> Self {
        Self {
            name: name.to_string(),
            limit: limit_micros as f64 / 1e6,
            spent: spent_micros as f64 / 1e6,
            remaining: limit_micros.saturating_sub(spent_micros) as f64 / 1e6,
            period,
            resets_in,
        }
    }
}

#[cfg(test)]
mod examples {
    //! Usage cases of crate-private items (they were doc examples while the items were public).

    #[test]
    fn spend_budget_amount_example() -> Result<(), Box<dyn std::error::Error>> {
        use crate::config::SpendBudget;
        assert_eq!(SpendBudget::parse("K", "0.25/hour")?.amount(), 0.25);
        Ok(())
    }
}
