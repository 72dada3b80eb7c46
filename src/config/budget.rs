//! Spend-budget values (docs/behaviour.md §5.8): `<amount>/<hour|day|month>` in the pricing
//! table's currency, as the scope key `{SCOPE}__BUDGET`, the tenant map `PGW_TENANT_BUDGETS` and
//! a server key's `budget` take them. Parsing only (the value is `types::budget`'s); the gate is the limiter's
//! (`polygateway_actors::policy::budget`), the wiring `call::budget`.

use std::collections::BTreeMap;

use polygateway_actors::BudgetPeriod;

use super::ConfigError;
use crate::types::budget::SpendBudget;

/// Largest amount accepted, in currency units: budgets are counted in integer micro-units and
/// the Redis backend's Lua numbers are exact up to 2^53 of them.
const MAX_BUDGET_AMOUNT: f64 = 9e9;

/// What a budget value must look like (every error says it).
const EXPECTED: &str = "<amount>/<hour|day|month>, e.g. 25/day or 0.5/hour: the amount a number \
                        >= 0 and <= 9000000000 in the pricing table's currency, the window a \
                        calendar hour, day or month in UTC";

impl SpendBudget {
    /// Parse `<amount>/<hour|day|month>`; `key` names the setting in the error.
    ///
    /// ```
    /// use polygateway::config::{ConfigError, SpendBudget};
    /// assert_eq!(SpendBudget::parse("K", "0/month")?.micros, 0); // nothing may be spent
    /// for bad in ["-1/day", "5/week", "5", "lots/day", "1e12/day"] {
    ///     let err = SpendBudget::parse("K", bad).unwrap_err();
    ///     assert!(matches!(err, ConfigError::InvalidValue { .. }), "{bad}: {err}");
    /// }
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn parse(key: &str, value: &str) -> Result<Self, ConfigError> {
        let invalid = || ConfigError::InvalidValue {
            key: key.to_string(),
            value: format!("{value:?}"),
            expected: EXPECTED.to_string(),
        };
        let (amount, period) = value.trim().split_once('/').ok_or_else(invalid)?;
        let amount: f64 = amount.trim().parse().map_err(|_| invalid())?;
        if !amount.is_finite() || !(0.0..=MAX_BUDGET_AMOUNT).contains(&amount) {
            return Err(invalid());
        }
        let period = match period.trim() {
            "hour" => BudgetPeriod::Hour,
            "day" => BudgetPeriod::Day,
            "month" => BudgetPeriod::Month,
            _ => return Err(invalid()),
        };
        Ok(Self {
            // In range by the check above; rounding keeps 0.1 from becoming 99 999 micro-units.
            micros: (amount * 1e6).round() as u64,
            period,
        })
    }
}

/// `PGW_TENANT_BUDGETS`: `tenant=<amount>/<window>` pairs separated by commas.
pub(crate) fn parse_tenant_budgets(
    key: &str,
    value: &str,
) -> Result<BTreeMap<String, SpendBudget>, ConfigError> {
    let mut out = BTreeMap::new();
    for pair in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((tenant, budget)) = pair.split_once('=') else {
            return Err(ConfigError::InvalidValue {
                key: key.to_string(),
                value: format!("{pair:?}"),
                expected: format!(
                    "tenant=<budget> pairs separated by commas, the budget {EXPECTED}"
                ),
            });
        };
        let tenant = tenant.trim();
        crate::validate::validate_tenant_id(tenant).map_err(|source| ConfigError::Validation {
            key: key.to_string(),
            source,
        })?;
        let budget = SpendBudget::parse(&format!("{key} (tenant {tenant})"), budget)?;
        if out.insert(tenant.to_string(), budget).is_some() {
            return Err(ConfigError::InvalidValue {
                key: key.to_string(),
                value: format!("{tenant:?}"),
                expected: "each tenant at most once".to_string(),
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenant_budgets_parse_and_name_what_is_wrong() {
        let m = parse_tenant_budgets("PGW_TENANT_BUDGETS", "acme=25/day, beta=0.5/hour").unwrap();
        assert_eq!(m["acme"].micros, 25_000_000);
        assert_eq!(m["beta"].period, BudgetPeriod::Hour);
        let err = parse_tenant_budgets("PGW_TENANT_BUDGETS", "acme=25/fortnight").unwrap_err();
        assert!(
            err.to_string().contains("PGW_TENANT_BUDGETS (tenant acme)"),
            "{err}"
        );
        assert!(err.to_string().contains("hour|day|month"), "{err}");
        let err = parse_tenant_budgets("PGW_TENANT_BUDGETS", "acme").unwrap_err();
        assert!(err.to_string().contains("tenant=<budget>"), "{err}");
        assert!(parse_tenant_budgets("PGW_TENANT_BUDGETS", "a=1/day,a=2/day").is_err());
        assert!(parse_tenant_budgets("PGW_TENANT_BUDGETS", "")
            .unwrap()
            .is_empty());
    }
}
