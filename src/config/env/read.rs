//! Reading the keys set at one level (the globals, one scope, one source) through the key table.
//!
//! Every read names its [`KeyDef`], so no key name is spelt outside `keys`, and a bad value is
//! refused naming the key as it was set, the value and what the key allows. In debug builds each
//! read also checks that the table declares the kind of value it is read as, so the table and the
//! parser cannot disagree unnoticed.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::time::Duration;

use crate::config::error::ConfigError;
use crate::config::keys::{KeyDef, ValueKind};
use crate::validate::shorten;

/// A key as it was set, and its (trimmed, non-empty) value.
#[derive(Clone, Copy)]
pub(super) struct Entry<'a> {
    pub(super) key: &'a str,
    pub(super) value: &'a str,
}

/// The keys set at one level, by their name in the table.
#[derive(Default)]
pub(super) struct Keys<'a> {
    entries: BTreeMap<&'static str, Entry<'a>>,
}

/// `value` refused for `entry`'s key, with what the key allows.
pub(super) fn invalid(entry: Entry<'_>, expected: impl Into<String>) -> ConfigError {
    ConfigError::InvalidValue {
        key: entry.key.to_string(),
        value: format!("{:?}", shorten(entry.value)),
        expected: expected.into(),
    }
}

impl<'a> Keys<'a> {
    /// Record `entry` for `def`; the entry it replaces, if any.
    pub(super) fn insert(&mut self, def: &'static KeyDef, entry: Entry<'a>) -> Option<Entry<'a>> {
        self.entries.insert(def.name, entry)
    }

    pub(super) fn get(&self, def: &KeyDef) -> Option<Entry<'a>> {
        self.entries.get(def.name).copied()
    }

    pub(super) fn contains(&self, def: &KeyDef) -> bool {
        self.entries.contains_key(def.name)
    }

    /// A value taken as it is (text, paths, URLs, secrets).
    pub(super) fn text(&self, def: &KeyDef) -> Option<&'a str> {
        debug_assert!(
            matches!(
                def.value,
                ValueKind::Text | ValueKind::Secret | ValueKind::RedisUrl
            ),
            "{def:?}"
        );
        self.get(def).map(|e| e.value)
    }

    /// Seconds as a non-negative finite number (`1`, `0.5`). Positivity is a guard's job.
    pub(super) fn secs(&self, def: &KeyDef) -> Result<Option<Duration>, ConfigError> {
        debug_assert_eq!(def.value, ValueKind::Seconds, "{}", def.name);
        self.get(def).map(parse_secs).transpose()
    }

    /// Seconds that must be positive (refused here, not by a guard).
    pub(super) fn positive_secs(&self, def: &KeyDef) -> Result<Option<Duration>, ConfigError> {
        debug_assert_eq!(def.value, ValueKind::PositiveSeconds, "{}", def.name);
        let Some(entry) = self.get(def) else {
            return Ok(None);
        };
        match parse_secs(entry)? {
            d if d.is_zero() => Err(invalid(entry, "a positive number of seconds")),
            d => Ok(Some(d)),
        }
    }

    /// A whole number in the range of `T`.
    pub(super) fn int<T: FromStr>(&self, def: &KeyDef) -> Result<Option<T>, ConfigError> {
        debug_assert!(
            matches!(def.value, ValueKind::Count | ValueKind::Integer),
            "{def:?}"
        );
        self.get(def)
            .map(|entry| {
                entry.value.parse::<T>().map_err(|_| {
                    invalid(
                        entry,
                        format!("an integer in the range of {}", std::any::type_name::<T>()),
                    )
                })
            })
            .transpose()
    }

    /// A positive whole number.
    pub(super) fn positive(&self, def: &KeyDef) -> Result<Option<usize>, ConfigError> {
        self.positive_as(def, "a positive integer")
    }

    /// A positive whole number, refused with `what` as what is allowed.
    pub(super) fn positive_as<T: FromStr + Default + PartialOrd>(
        &self,
        def: &KeyDef,
        what: &str,
    ) -> Result<Option<T>, ConfigError> {
        debug_assert_eq!(def.value, ValueKind::Positive, "{}", def.name);
        self.get(def)
            .map(|entry| match entry.value.parse::<T>() {
                Ok(n) if n > T::default() => Ok(n),
                _ => Err(invalid(entry, what)),
            })
            .transpose()
    }

    /// A finite number.
    pub(super) fn number(&self, def: &KeyDef) -> Result<Option<f64>, ConfigError> {
        debug_assert_eq!(def.value, ValueKind::Number, "{}", def.name);
        self.get(def)
            .map(|entry| match entry.value.parse::<f64>() {
                Ok(x) if x.is_finite() => Ok(x),
                _ => Err(invalid(entry, "a finite number")),
            })
            .transpose()
    }

    pub(super) fn boolean(&self, def: &KeyDef) -> Result<Option<bool>, ConfigError> {
        debug_assert_eq!(def.value, ValueKind::Bool, "{}", def.name);
        self.get(def)
            .map(|entry| match entry.value.to_ascii_lowercase().as_str() {
                "true" | "1" | "yes" | "on" => Ok(true),
                "false" | "0" | "no" | "off" => Ok(false),
                _ => Err(invalid(entry, "one of true, false, 1, 0, yes, no, on, off")),
            })
            .transpose()
    }

    /// One of the table's words for `def`, mapped to its value by `values` (case-insensitive).
    pub(super) fn choice<T: Copy>(
        &self,
        def: &KeyDef,
        values: &[(&str, T)],
    ) -> Result<Option<T>, ConfigError> {
        let ValueKind::Choice(words) = def.value else {
            unreachable!("{} is not a choice in the key table", def.name)
        };
        debug_assert!(
            words.iter().eq(values.iter().map(|(w, _)| w)),
            "{}: the parser maps other words than the table lists",
            def.name
        );
        let Some(entry) = self.get(def) else {
            return Ok(None);
        };
        let lowered = entry.value.to_ascii_lowercase();
        values
            .iter()
            .find(|(word, _)| *word == lowered)
            .map(|(_, value)| Some(*value))
            .ok_or_else(|| invalid(entry, format!("one of {}", words.join(" | "))))
    }
}

fn parse_secs(entry: Entry<'_>) -> Result<Duration, ConfigError> {
    entry
        .value
        .parse::<f64>()
        .ok()
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .ok_or_else(|| invalid(entry, "a non-negative number of seconds"))
}
