//! Pricing and cost (docs/behaviour.md §8.2).
//!
//! The pricing file is the original library's JSON, so price files carry over:
//! `{"MiniMax-M3": {"input_per_1m": 2.1, "output_per_1m": 8.4, "cached_input_per_1m": 0.42}}`.
//! Prompt-cache writes (Anthropic bills them above plain input, by lifetime) have prices of
//! their own: `cache_write_5m_per_1m`, `cache_write_1h_per_1m`.
//! This module computes the cost of one real call. A cache hit costs `0.0` — that is the
//! caller's rule (no call was made), not this module's: do not call [`Pricing::cost`] for hit rows.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Mutex;

use serde::Deserialize;

use crate::types::{Usage, UsageSource};

/// Prices of one model, per million tokens.
///
/// ```
/// use polygateway::telemetry::{ModelPrice, Pricing};
/// let p = Pricing::from_json(r#"{"MiniMax-M3": {"input_per_1m": 2.1, "output_per_1m": 8.4}}"#)?;
/// assert_eq!(
///     p.price("MiniMax-M3"),
///     Some(&ModelPrice { input_per_1m: 2.1, output_per_1m: 8.4, ..ModelPrice::default() })
/// );
/// // Anthropic's prompt caching: reads at a tenth of input, writes above it.
/// let p = Pricing::from_json(r#"{"claude-sonnet-4-5": {"input_per_1m": 3.0, "output_per_1m": 15.0,
///     "cached_input_per_1m": 0.3, "cache_write_5m_per_1m": 3.75, "cache_write_1h_per_1m": 6.0}}"#)?;
/// assert_eq!(p.price("claude-sonnet-4-5").unwrap().cache_write_1h_per_1m, Some(6.0));
/// # Ok::<(), polygateway::telemetry::PricingError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Default, Deserialize)]
pub struct ModelPrice {
    /// Price of a million prompt tokens.
    pub input_per_1m: f64,
    /// Price of a million completion tokens (reasoning included).
    pub output_per_1m: f64,
    /// Price of a million prompt tokens read from the provider's prompt cache (optional; absent,
    /// they are billed at `input_per_1m`).
    #[serde(default)]
    pub cached_input_per_1m: Option<f64>,
    /// Price of a million prompt tokens written to the prompt cache with a 5-minute lifetime
    /// (optional; absent, they are billed at `input_per_1m`, with a warning).
    #[serde(default)]
    pub cache_write_5m_per_1m: Option<f64>,
    /// Price of a million prompt tokens written to the prompt cache with a 1-hour lifetime
    /// (optional; absent, they are billed at `input_per_1m`, with a warning).
    #[serde(default)]
    pub cache_write_1h_per_1m: Option<f64>,
}

impl ModelPrice {
    /// The highest price per million tokens of any kind: what a budget reserves per estimated
    /// token, so that no mix of input, output and cache writes costs more than it reserved.
    pub(crate) fn dearest_per_1m(&self) -> f64 {
        [
            self.cached_input_per_1m,
            self.cache_write_5m_per_1m,
            self.cache_write_1h_per_1m,
        ]
        .into_iter()
        .flatten()
        .fold(self.input_per_1m.max(self.output_per_1m), f64::max)
    }
}

/// Why a pricing file could not be loaded.
///
/// ```
/// use polygateway::telemetry::{Pricing, PricingError};
/// let negative = Pricing::from_json(r#"{"m": {"input_per_1m": -1.0, "output_per_1m": 1.0}}"#);
/// assert!(matches!(negative, Err(PricingError::InvalidPrice(model)) if model == "m"));
/// assert!(matches!(Pricing::from_json("[1, 2]"), Err(PricingError::Parse(_))));
/// assert!(matches!(Pricing::load("/no/such/prices.json"), Err(PricingError::Read { .. })));
/// ```
#[derive(Debug, thiserror::Error)]
pub enum PricingError {
    /// The file could not be read.
    #[error("cannot read pricing file {path}: {source}")]
    Read {
        /// The path.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not the expected JSON.
    #[error("invalid pricing JSON: {0}")]
    Parse(#[from] serde_json::Error),
    /// A price is negative or not finite.
    #[error("invalid price for model {0}: prices must be finite and >= 0")]
    InvalidPrice(String),
}

/// A pricing table. Warns once per unknown model.
///
/// ```
/// use polygateway::telemetry::Pricing;
/// use polygateway::{Usage, UsageSource};
/// let pricing = Pricing::from_json(r#"{"gpt-4o-mini": {"input_per_1m": 0.15, "output_per_1m": 0.6}}"#)?;
/// let usage = Usage { prompt_tokens: 2_000, completion_tokens: 1_000, source: UsageSource::Measured, ..Usage::default() };
/// let cost = pricing.cost("gpt-4o-mini", &usage).unwrap();
/// assert!((cost - 0.0009).abs() < 1e-12);
/// // A table without prices (the default) prices nothing.
/// assert_eq!(Pricing::default().cost("gpt-4o-mini", &usage), None);
/// # Ok::<(), polygateway::telemetry::PricingError>(())
/// ```
#[derive(Debug, Default)]
pub struct Pricing {
    prices: HashMap<String, ModelPrice>,
    /// Models asked for without a price (warned once each).
    warned: Mutex<HashSet<String>>,
    /// Models whose prompt-cache writes had no price (warned once each).
    warned_writes: Mutex<HashSet<String>>,
}

impl Pricing {
    /// Load a pricing file (`PGW_PRICING_PATH`).
    ///
    /// ```
    /// use polygateway::telemetry::Pricing;
    /// let dir = tempfile::tempdir()?;
    /// let path = dir.path().join("prices.json");
    /// std::fs::write(&path, r#"{"qwen-max": {"input_per_1m": 1.6, "output_per_1m": 6.4, "cached_input_per_1m": 0.64}}"#)?;
    /// let pricing = Pricing::load(&path)?;
    /// assert_eq!(pricing.price("qwen-max").unwrap().cached_input_per_1m, Some(0.64));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn load(path: impl AsRef<Path>) -> Result<Self, PricingError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| PricingError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_json(&text)
    }

    /// Parse a pricing table from JSON text.
    ///
    /// ```
    /// use polygateway::{telemetry::Pricing, Usage, UsageSource};
    /// let p = Pricing::from_json(r#"{"m": {"input_per_1m": 2.0, "output_per_1m": 8.0}}"#).unwrap();
    /// let usage = Usage { prompt_tokens: 1_000_000, completion_tokens: 500_000,
    ///                     source: UsageSource::Measured, ..Usage::default() };
    /// assert_eq!(p.cost("m", &usage), Some(6.0));
    /// ```
    pub fn from_json(text: &str) -> Result<Self, PricingError> {
        let prices: HashMap<String, ModelPrice> = serde_json::from_str(text)?;
        for (model, p) in &prices {
            let ok = |v: f64| v.is_finite() && v >= 0.0;
            let optional = [
                p.cached_input_per_1m,
                p.cache_write_5m_per_1m,
                p.cache_write_1h_per_1m,
            ];
            if !ok(p.input_per_1m)
                || !ok(p.output_per_1m)
                || !optional.into_iter().all(|v| v.is_none_or(ok))
            {
                return Err(PricingError::InvalidPrice(model.clone()));
            }
        }
        Ok(Self {
            prices,
            ..Self::default()
        })
    }

    /// The price of `model`, if listed.
    ///
    /// ```
    /// use polygateway::telemetry::Pricing;
    /// let pricing = Pricing::from_json(r#"{"glm-4": {"input_per_1m": 1.0, "output_per_1m": 4.0}}"#)?;
    /// assert_eq!(pricing.price("glm-4").map(|p| p.output_per_1m), Some(4.0));
    /// assert!(pricing.price("GLM-4").is_none()); // model names are matched exactly
    /// # Ok::<(), polygateway::telemetry::PricingError>(())
    /// ```
    pub fn price(&self, model: &str) -> Option<&ModelPrice> {
        self.prices.get(model)
    }

    /// Cost of one real call of `model` with `usage`, per million tokens:
    /// `uncached·input + cache_read·cached_input + write_5m·cache_write_5m +
    /// write_1h·cache_write_1h + completion·output`, where `uncached` is the prompt tokens
    /// neither read from nor written to the prompt cache.
    ///
    /// - usage `unavailable` → `None` (unknown is not free);
    /// - unknown model → `None`, with one warning per model;
    /// - a cache price that is not configured bills those tokens at the input price (a cache
    ///   write without its price warns once per model: the cost is then below the bill);
    /// - cache reads and writes above the prompt count are clamped to it, with a warning.
    ///
    /// ```
    /// use polygateway::telemetry::Pricing;
    /// use polygateway::{Usage, UsageSource};
    /// let pricing = Pricing::from_json(
    ///     r#"{"m": {"input_per_1m": 2.0, "output_per_1m": 8.0, "cached_input_per_1m": 0.5}}"#,
    /// )?;
    /// // 1M prompt tokens of which 400k were prompt-cache hits, 100k completion tokens.
    /// let usage = Usage {
    ///     prompt_tokens: 1_000_000,
    ///     completion_tokens: 100_000,
    ///     cached_prompt_tokens: Some(400_000),
    ///     source: UsageSource::Measured,
    ///     ..Usage::default()
    /// };
    /// let cost = pricing.cost("m", &usage).unwrap();
    /// assert!((cost - (0.6 * 2.0 + 0.4 * 0.5 + 0.1 * 8.0)).abs() < 1e-9);
    /// // Unknown usage is not free: no cost at all.
    /// let unknown = Usage { source: UsageSource::Unavailable, ..usage };
    /// assert_eq!(pricing.cost("m", &unknown), None);
    ///
    /// // Anthropic-style caching: 10k prompt tokens, 8k read from the cache, 1k written for 1 h.
    /// let claude = Pricing::from_json(r#"{"c": {"input_per_1m": 3.0, "output_per_1m": 15.0,
    ///     "cached_input_per_1m": 0.3, "cache_write_1h_per_1m": 6.0}}"#)?;
    /// let usage = Usage {
    ///     prompt_tokens: 10_000,
    ///     completion_tokens: 500,
    ///     cached_prompt_tokens: Some(8_000),
    ///     cache_write_1h_tokens: Some(1_000),
    ///     source: UsageSource::Measured,
    ///     ..Usage::default()
    /// };
    /// let cost = claude.cost("c", &usage).unwrap();
    /// let expected = (1_000.0 * 3.0 + 8_000.0 * 0.3 + 1_000.0 * 6.0 + 500.0 * 15.0) / 1e6;
    /// assert!((cost - expected).abs() < 1e-12);
    /// # Ok::<(), polygateway::telemetry::PricingError>(())
    /// ```
    pub fn cost(&self, model: &str, usage: &Usage) -> Option<f64> {
        if usage.source == UsageSource::Unavailable {
            return None;
        }
        let Some(price) = self.prices.get(model) else {
            warn_once(&self.warned, model, || {
                tracing::warn!(
                    model,
                    "no price for model in the pricing table: cost left NULL"
                );
            });
            return None;
        };
        // Reads first, then 5-minute and 1-hour writes, each clamped to what is left of the
        // prompt: a count the upstream over-reports can never make the uncached part negative.
        let mut left = usage.prompt_tokens;
        let mut take = |n: Option<u64>| {
            let n = n.unwrap_or(0);
            let taken = n.min(left);
            left -= taken;
            (taken, n > taken)
        };
        let (read, read_clamped) = take(usage.cached_prompt_tokens);
        let (write_5m, w5_clamped) = take(usage.cache_write_5m_tokens);
        let (write_1h, w1h_clamped) = take(usage.cache_write_1h_tokens);
        if read_clamped || w5_clamped || w1h_clamped {
            tracing::warn!(
                model,
                prompt = usage.prompt_tokens,
                cache_read = usage.cached_prompt_tokens,
                cache_write_5m = usage.cache_write_5m_tokens,
                cache_write_1h = usage.cache_write_1h_tokens,
                "prompt-cache tokens exceed prompt tokens: clamped"
            );
        }
        let writes_unpriced = (write_5m > 0 && price.cache_write_5m_per_1m.is_none())
            || (write_1h > 0 && price.cache_write_1h_per_1m.is_none());
        if writes_unpriced {
            warn_once(&self.warned_writes, model, || {
                tracing::warn!(
                    model,
                    "prompt-cache writes without a cache-write price: billed at the input price"
                );
            });
        }
        let at =
            |tokens: u64, per_1m: Option<f64>| tokens as f64 * per_1m.unwrap_or(price.input_per_1m);
        let input = left as f64 * price.input_per_1m
            + at(read, price.cached_input_per_1m)
            + at(write_5m, price.cache_write_5m_per_1m)
            + at(write_1h, price.cache_write_1h_per_1m);
        Some((input + usage.completion_tokens as f64 * price.output_per_1m) / 1_000_000.0)
    }

    /// Models that were asked for but had no price (each warned once).
    ///
    /// ```
    /// use polygateway::telemetry::Pricing;
    /// use polygateway::{Usage, UsageSource};
    /// let pricing = Pricing::default();
    /// let usage = Usage { source: UsageSource::Measured, ..Usage::default() };
    /// for model in ["b-model", "a-model", "b-model"] {
    ///     assert_eq!(pricing.cost(model, &usage), None);
    /// }
    /// assert_eq!(pricing.unknown_models_seen(), ["a-model", "b-model"]);
    /// ```
    pub fn unknown_models_seen(&self) -> Vec<String> {
        let warned = self.warned.lock().unwrap_or_else(|p| p.into_inner());
        let mut v: Vec<String> = warned.iter().cloned().collect();
        v.sort();
        v
    }
}

/// Run `warn` the first time `model` enters `seen`.
fn warn_once(seen: &Mutex<HashSet<String>>, model: &str, warn: impl FnOnce()) {
    let mut seen = seen.lock().unwrap_or_else(|p| p.into_inner());
    if seen.insert(model.to_owned()) {
        warn();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = r#"{
        "MiniMax-M3": {"input_per_1m": 2.1, "output_per_1m": 8.4, "cached_input_per_1m": 0.42},
        "plain": {"input_per_1m": 1.0, "output_per_1m": 4.0}
    }"#;

    fn usage(prompt: u64, completion: u64, cached: Option<u64>) -> Usage {
        Usage {
            prompt_tokens: prompt,
            completion_tokens: completion,
            cached_prompt_tokens: cached,
            source: UsageSource::Measured,
            ..Usage::default()
        }
    }

    fn close(a: Option<f64>, b: f64) {
        let a = a.expect("cost missing");
        assert!((a - b).abs() < 1e-12, "{a} != {b}");
    }

    #[test]
    fn cached_price_applies_to_hits() {
        let p = Pricing::from_json(TABLE).unwrap();
        // 1000 prompt (400 cached), 200 completion.
        let expected = (600.0 * 2.1 + 400.0 * 0.42 + 200.0 * 8.4) / 1e6;
        close(p.cost("MiniMax-M3", &usage(1000, 200, Some(400))), expected);
    }

    #[test]
    fn no_cached_price_or_zero_hits_bills_everything_at_input() {
        let p = Pricing::from_json(TABLE).unwrap();
        close(
            p.cost("plain", &usage(1000, 200, Some(400))),
            (1000.0 + 800.0) / 1e6,
        );
        close(
            p.cost("MiniMax-M3", &usage(1000, 200, Some(0))),
            (1000.0 * 2.1 + 200.0 * 8.4) / 1e6,
        );
        close(
            p.cost("MiniMax-M3", &usage(1000, 200, None)),
            (1000.0 * 2.1 + 200.0 * 8.4) / 1e6,
        );
    }

    #[test]
    fn cache_writes_have_prices_of_their_own_by_lifetime() {
        let p = Pricing::from_json(
            r#"{"c": {"input_per_1m": 3.0, "output_per_1m": 15.0, "cached_input_per_1m": 0.3,
                      "cache_write_5m_per_1m": 3.75, "cache_write_1h_per_1m": 6.0}}"#,
        )
        .unwrap();
        let mut u = usage(10_000, 100, Some(6_000));
        u.cache_write_5m_tokens = Some(2_000);
        u.cache_write_1h_tokens = Some(1_000);
        let expected =
            (1_000.0 * 3.0 + 6_000.0 * 0.3 + 2_000.0 * 3.75 + 1_000.0 * 6.0 + 100.0 * 15.0) / 1e6;
        close(p.cost("c", &u), expected);
    }

    #[test]
    fn unpriced_cache_writes_bill_at_input_and_are_not_unknown_models() {
        let p = Pricing::from_json(TABLE).unwrap();
        let mut u = usage(1000, 200, Some(400));
        u.cache_write_5m_tokens = Some(100);
        close(
            p.cost("MiniMax-M3", &u),
            (500.0 * 2.1 + 400.0 * 0.42 + 100.0 * 2.1 + 200.0 * 8.4) / 1e6,
        );
        assert!(p.unknown_models_seen().is_empty());
    }

    #[test]
    fn reads_and_writes_above_the_prompt_are_clamped_in_order() {
        let p = Pricing::from_json(
            r#"{"c": {"input_per_1m": 1.0, "output_per_1m": 1.0, "cached_input_per_1m": 0.1,
                      "cache_write_5m_per_1m": 2.0, "cache_write_1h_per_1m": 4.0}}"#,
        )
        .unwrap();
        let mut u = usage(100, 0, Some(60));
        u.cache_write_5m_tokens = Some(30);
        u.cache_write_1h_tokens = Some(50);
        // 60 read, 30 written for 5 min, the 10 left written for 1 h; nothing at plain input.
        close(
            p.cost("c", &u),
            (60.0 * 0.1 + 30.0 * 2.0 + 10.0 * 4.0) / 1e6,
        );
    }

    #[test]
    fn cached_above_prompt_is_clamped() {
        let p = Pricing::from_json(TABLE).unwrap();
        close(
            p.cost("MiniMax-M3", &usage(100, 10, Some(500))),
            (100.0 * 0.42 + 10.0 * 8.4) / 1e6,
        );
    }

    #[test]
    fn unknown_model_is_null_and_remembered_once() {
        let p = Pricing::from_json(TABLE).unwrap();
        assert_eq!(p.cost("nope", &usage(1, 1, None)), None);
        assert_eq!(p.cost("nope", &usage(1, 1, None)), None);
        assert_eq!(p.cost("nope2", &usage(1, 1, None)), None);
        assert_eq!(p.unknown_models_seen(), vec!["nope", "nope2"]);
    }

    #[test]
    fn unavailable_usage_is_null_but_estimated_is_priced() {
        let p = Pricing::from_json(TABLE).unwrap();
        let mut u = usage(0, 0, None);
        u.source = UsageSource::Unavailable;
        assert_eq!(p.cost("plain", &u), None);
        assert!(p.unknown_models_seen().is_empty());
        let mut u = usage(10, 10, None);
        u.source = UsageSource::Estimated;
        close(p.cost("plain", &u), 50.0 / 1e6);
    }

    #[test]
    fn bad_files_are_errors() {
        assert!(matches!(
            Pricing::from_json("[1]"),
            Err(PricingError::Parse(_))
        ));
        assert!(matches!(
            Pricing::from_json(r#"{"m": {"input_per_1m": -1, "output_per_1m": 1}}"#),
            Err(PricingError::InvalidPrice(_))
        ));
        assert!(matches!(
            Pricing::load("/nonexistent/prices.json"),
            Err(PricingError::Read { .. })
        ));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.json");
        std::fs::write(&path, TABLE).unwrap();
        assert!(Pricing::load(&path).unwrap().price("plain").is_some());
    }
}
