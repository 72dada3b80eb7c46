//! [`MetaValue`], one value of a call's `meta` map (docs/behaviour.md §2.2), and its JSON
//! conversions. Its own file because the call options (`options`) hold it and the entry checks
//! (`crate::validate`) check it: both import it, neither owns it.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::validate::shorten;
use crate::validate::ValidationError;

/// One `meta` value: a string, integer, float or bool (docs/behaviour.md §2.2). Serialises as the plain JSON
/// value (untagged).
///
/// ```
/// use polygateway::types::MetaValue;
/// assert_eq!(serde_json::to_string(&MetaValue::from(3)).unwrap(), "3");
/// let v: MetaValue = serde_json::from_str("\"b-17\"").unwrap();
/// assert_eq!(v, MetaValue::from("b-17"));
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MetaValue {
    /// A bool.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A float (must be finite to pass validation).
    Float(f64),
    /// A string (at most 256 chars to pass validation).
    String(String),
}

impl MetaValue {
    /// Convert a JSON value; `null`, arrays and objects are rejected naming `key`. Integers
    /// beyond `i64` become floats.
    ///
    /// ```
    /// use polygateway::types::MetaValue;
    /// use polygateway::validate::ValidationError;
    /// use serde_json::json;
    /// assert_eq!(MetaValue::from_json("run", &json!(3)).unwrap(), MetaValue::Int(3));
    /// let big = MetaValue::from_json("big", &json!(u64::MAX)).unwrap();
    /// assert_eq!(big, MetaValue::Float(u64::MAX as f64));
    /// let err = MetaValue::from_json("tags", &json!(["a", "b"])).unwrap_err();
    /// assert!(matches!(err, ValidationError::MetaValueType { found: "array", .. }), "{err}");
    /// ```
    pub fn from_json(key: &str, value: &Value) -> Result<Self, ValidationError> {
        let found = match value {
            Value::Bool(b) => return Ok(Self::Bool(*b)),
            Value::String(s) => return Ok(Self::String(s.clone())),
            Value::Number(n) => {
                return Ok(match n.as_i64() {
                    Some(i) => Self::Int(i),
                    // Every serde_json number has an f64 view (u64 beyond i64, or a float).
                    None => Self::Float(n.as_f64().unwrap_or(f64::NAN)),
                });
            }
            Value::Null => "null",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
        };
        Err(ValidationError::MetaValueType {
            key: shorten(key),
            found,
        })
    }

    /// The JSON form (a non-finite float becomes `null`, as JSON has no NaN).
    ///
    /// ```
    /// use polygateway::types::MetaValue;
    /// use serde_json::json;
    /// assert_eq!(MetaValue::from("b-17").to_json(), json!("b-17"));
    /// assert_eq!(MetaValue::from(0.25).to_json(), json!(0.25));
    /// assert_eq!(MetaValue::Float(f64::NAN).to_json(), serde_json::Value::Null);
    /// ```
    pub fn to_json(&self) -> Value {
        match self {
            Self::Bool(b) => Value::Bool(*b),
            Self::Int(i) => Value::from(*i),
            Self::Float(f) => serde_json::Number::from_f64(*f)
                .map(Value::Number)
                .unwrap_or(Value::Null),
            Self::String(s) => Value::String(s.clone()),
        }
    }
}

impl fmt::Display for MetaValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Bool(b) => write!(f, "{b}"),
            Self::Int(i) => write!(f, "{i}"),
            Self::Float(x) => write!(f, "{x}"),
            Self::String(s) => f.write_str(s),
        }
    }
}

impl From<bool> for MetaValue {
    fn from(v: bool) -> Self {
        Self::Bool(v)
    }
}
impl From<i64> for MetaValue {
    fn from(v: i64) -> Self {
        Self::Int(v)
    }
}
impl From<i32> for MetaValue {
    fn from(v: i32) -> Self {
        Self::Int(i64::from(v))
    }
}
impl From<u32> for MetaValue {
    fn from(v: u32) -> Self {
        Self::Int(i64::from(v))
    }
}
impl From<f64> for MetaValue {
    fn from(v: f64) -> Self {
        Self::Float(v)
    }
}
impl From<&str> for MetaValue {
    fn from(v: &str) -> Self {
        Self::String(v.to_string())
    }
}
impl From<String> for MetaValue {
    fn from(v: String) -> Self {
        Self::String(v)
    }
}
