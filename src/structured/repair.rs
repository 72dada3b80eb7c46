//! Repair of almost-JSON model output (docs/behaviour.md §9.2 step 2).
//!
//! [`repair_json`] turns what models actually send into a [`serde_json::Value`]:
//!
//! - reasoning preambles: leading `<think>…</think>` / `<thinking>…</thinking>` blocks, and
//!   everything before an orphan `</think>` (some templates drop the opening tag);
//! - prose, markdown and code fences around the value: the first balanced top-level object or
//!   array is extracted by a string-aware parser (fences are never matched textually, so fences
//!   nested inside JSON strings are harmless); when several candidates parse, the longest wins;
//! - trailing commas and doubled commas, missing commas between members;
//! - single-quoted strings (an apostrophe closes such a string only when followed by `,` `:` `}`
//!   `]` or the end, so `'it's'` keeps its apostrophe), unquoted keys;
//! - Python/JS literals `True`, `False`, `None`, `undefined`;
//! - double-encoded JSON (the whole answer is a JSON string holding an object or array);
//! - truncation at the end: unclosed strings, arrays and objects are closed; a member whose key or
//!   value was cut off is dropped; a line starting with a code fence ends the value;
//! - decided: typographic quotes `“…”` / `‘…’` used *as delimiters* are accepted (inside a normal
//!   string they are ordinary characters); `//` and `/* */` comments outside strings are skipped;
//!   `NaN`/`Infinity` are rejected (JSON has no such numbers).
//!
//! Not here: schema validation ([`validate`](mod@super::validate)) and caller-specific fix-ups (the
//! [`Normalizer`] hook, applied by the ladder after repair).

use std::sync::Arc;

use serde_json::{Map, Number, Value};

/// A caller-supplied fix-up applied to the repaired value before validation (e.g. rename keys,
/// coerce `"3"` to `3`). Semantic rules stay with the caller.
///
/// ```
/// use std::sync::Arc;
/// use polygateway::structured::{repair_json, Normalizer};
/// use serde_json::{json, Value};
/// // Rename the key a model keeps capitalising.
/// let rename: Normalizer = Arc::new(|mut v: Value| {
///     if let Some(obj) = v.as_object_mut() {
///         if let Some(name) = obj.remove("Name") {
///             obj.insert("name".into(), name);
///         }
///     }
///     v
/// });
/// let repaired = repair_json("{Name: 'Ada'}").unwrap();
/// assert_eq!(rename(repaired), json!({"name": "Ada"}));
/// ```
pub type Normalizer = Arc<dyn Fn(Value) -> Value + Send + Sync>;

/// Why no JSON value could be recovered.
///
/// ```
/// use polygateway::structured::{repair_json, RepairError};
/// assert_eq!(repair_json("<think>let me see</think>   "), Err(RepairError::Empty));
/// let err = repair_json("I cannot answer that.").unwrap_err();
/// assert!(matches!(err, RepairError::NotFound(_)));
/// assert!(err.to_string().starts_with("no JSON value found"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RepairError {
    /// Nothing but whitespace (or reasoning) in the answer.
    #[error("empty answer (no content outside reasoning)")]
    Empty,
    /// No JSON value could be extracted; carries the most informative parse problem (≤ 200 chars).
    #[error("no JSON value found: {0}")]
    NotFound(String),
}

/// Candidates tried per answer (bounds the work on long, bracket-rich prose).
const MAX_CANDIDATES: usize = 64;
/// Nesting limit of the lenient parser (stack safety).
const MAX_DEPTH: usize = 128;

/// Extracts and repairs the JSON value in a model answer.
///
/// ```
/// use polygateway::structured::repair_json;
/// let v = repair_json("<think>hmm</think>Sure! ```json\n{'a': 1, b: [True, None,],}\n```").unwrap();
/// assert_eq!(v, serde_json::json!({"a": 1, "b": [true, null]}));
/// ```
pub fn repair_json(text: &str) -> Result<Value, RepairError> {
    let stripped = strip_reasoning(text);
    if stripped.trim().is_empty() {
        return Err(RepairError::Empty);
    }
    match extract(stripped) {
        Ok(v) => Ok(v),
        // The "reasoning" we cut may have been part of the value (a literal `</think>` inside a
        // string): retry on the untouched text before giving up.
        Err(e) if stripped.len() != text.len() => extract(text).map_err(|_| e),
        Err(e) => Err(e),
    }
}

/// Removes leading reasoning blocks and anything before an orphan closing tag.
fn strip_reasoning(text: &str) -> &str {
    const TAGS: [(&str, &str); 2] = [("<think>", "</think>"), ("<thinking>", "</thinking>")];
    let mut rest = text;
    'outer: loop {
        let trimmed = rest.trim_start();
        for (open, close) in TAGS {
            if let Some(after) = strip_prefix_ci(trimmed, open) {
                rest = match find_ci(after, close) {
                    Some(pos) => &after[pos + close.len()..],
                    // Unclosed reasoning: the answer never started.
                    None => "",
                };
                continue 'outer;
            }
        }
        break;
    }
    for (open, close) in TAGS {
        if find_ci(rest, open).is_none() {
            if let Some(pos) = rfind_ci(rest, close) {
                rest = &rest[pos + close.len()..];
            }
        }
    }
    rest
}

fn strip_prefix_ci<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &s[prefix.len()..])
}

fn find_ci(s: &str, needle: &str) -> Option<usize> {
    let (h, n) = (s.as_bytes(), needle.as_bytes());
    (0..=h.len().checked_sub(n.len())?).find(|&i| h[i..i + n.len()].eq_ignore_ascii_case(n))
}

fn rfind_ci(s: &str, needle: &str) -> Option<usize> {
    let (h, n) = (s.as_bytes(), needle.as_bytes());
    (0..=h.len().checked_sub(n.len())?)
        .rev()
        .find(|&i| h[i..i + n.len()].eq_ignore_ascii_case(n))
}

/// Finds the best JSON value in `text`.
fn extract(text: &str) -> Result<Value, RepairError> {
    let trimmed = text.trim();
    if let Ok(v) = serde_json::from_str::<Value>(trimmed) {
        return Ok(unwrap_double_encoded(v));
    }
    let bytes = text.as_bytes();
    let mut best: Option<(usize, Value)> = None;
    let mut first_err: Option<String> = None;
    let (mut i, mut tried) = (0, 0);
    while i < bytes.len() && tried < MAX_CANDIDATES {
        if bytes[i] == b'{' || bytes[i] == b'[' {
            tried += 1;
            match parse_at(text, i) {
                Ok((value, end)) => {
                    if best.as_ref().is_none_or(|(len, _)| end - i > *len) {
                        best = Some((end - i, value));
                    }
                    // Candidates inside a parsed value are its own members: skip them.
                    i = end.max(i + 1);
                    continue;
                }
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        i += 1;
    }
    if let Some((_, v)) = best {
        return Ok(v);
    }
    // A bare scalar, possibly in a fence or lenient syntax (`'yes'`, `True`).
    let inner = unfence(trimmed);
    if let Ok(v) = serde_json::from_str::<Value>(inner) {
        return Ok(v);
    }
    let mut p = Parser::new(inner);
    if let Ok(Some(v)) = p.value(0) {
        p.skip_ws();
        if p.pos >= inner.len() {
            return Ok(v);
        }
    }
    Err(RepairError::NotFound(truncate(
        &first_err.unwrap_or_else(|| "no object or array in the answer".into()),
        170,
    )))
}

/// A whole answer that is a JSON *string* holding an object or array (double-encoded JSON) is
/// replaced by the decoded value.
fn unwrap_double_encoded(v: Value) -> Value {
    if let Value::String(s) = &v {
        let inner = s.trim();
        if inner.starts_with(['{', '[']) {
            if let Ok(decoded) = serde_json::from_str::<Value>(inner) {
                return decoded;
            }
        }
    }
    v
}

/// The content of a text wrapped in one code fence, else the text.
fn unfence(s: &str) -> &str {
    let Some(rest) = s.strip_prefix("```") else {
        return s;
    };
    let Some(body_start) = rest.find('\n') else {
        return s;
    };
    let body = &rest[body_start + 1..];
    body.trim_end().strip_suffix("```").unwrap_or(body).trim()
}

/// Parses one value starting at byte `start`: strict first, lenient second. Returns the value
/// and the byte offset just past it.
fn parse_at(text: &str, start: usize) -> Result<(Value, usize), String> {
    let mut stream = serde_json::Deserializer::from_str(&text[start..]).into_iter::<Value>();
    if let Some(Ok(v)) = stream.next() {
        return Ok((v, start + stream.byte_offset()));
    }
    let mut p = Parser::new(&text[start..]);
    match p.value(0) {
        Ok(Some(v)) => Ok((v, start + p.pos)),
        Ok(None) => Err("value cut off before it started".into()),
        Err(e) => Err(e),
    }
}

fn truncate(s: &str, max_chars: usize) -> String {
    if s.chars().count() <= max_chars {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(max_chars.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// Lenient recursive-descent parser. `Ok(None)` means "input ended before this value began or
/// while it was unusable" — the enclosing container drops the member (truncation repair).
struct Parser<'a> {
    s: &'a str,
    pos: usize,
}

impl<'a> Parser<'a> {
    fn new(s: &'a str) -> Self {
        Self { s, pos: 0 }
    }

    fn peek(&self) -> Option<char> {
        self.s[self.pos..].chars().next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    /// End of input, or a code fence (a fence line ends a truncated value).
    fn at_end(&self) -> bool {
        self.pos >= self.s.len() || self.s[self.pos..].starts_with("```")
    }

    fn err(&self, what: &str) -> String {
        let near: String = self.s[self.pos..].chars().take(24).collect();
        format!("{what} at byte {} near {near:?}", self.pos)
    }

    fn skip_ws(&mut self) {
        loop {
            let rest = &self.s[self.pos..];
            if let Some(c) = rest.chars().next().filter(|c| c.is_whitespace()) {
                self.pos += c.len_utf8();
            } else if rest.starts_with("//") {
                self.pos += rest.find('\n').unwrap_or(rest.len());
            } else if let Some(body) = rest.strip_prefix("/*") {
                self.pos += body.find("*/").map_or(rest.len(), |e| e + 4);
            } else {
                return;
            }
        }
    }

    fn value(&mut self, depth: usize) -> Result<Option<Value>, String> {
        if depth > MAX_DEPTH {
            return Err(self.err("nesting too deep"));
        }
        self.skip_ws();
        if self.at_end() {
            return Ok(None);
        }
        match self.peek() {
            Some('{') => self.object(depth).map(Some),
            Some('[') => self.array(depth).map(Some),
            Some(q) if is_quote(q) => Ok(Some(Value::String(self.string().0))),
            Some(c) if c == '-' || c == '+' || c == '.' || c.is_ascii_digit() => self.number(),
            Some(c) if c.is_alphabetic() || c == '_' => self.word(),
            _ => Err(self.err("unexpected character")),
        }
    }

    fn object(&mut self, depth: usize) -> Result<Value, String> {
        self.bump();
        let mut map = Map::new();
        loop {
            self.skip_ws();
            if self.at_end() {
                return Ok(Value::Object(map));
            }
            match self.peek() {
                Some('}') => {
                    self.bump();
                    return Ok(Value::Object(map));
                }
                Some(',') => {
                    self.bump();
                    continue;
                }
                _ => {}
            }
            let Some(key) = self.key()? else {
                return Ok(Value::Object(map));
            };
            self.skip_ws();
            if self.at_end() {
                return Ok(Value::Object(map));
            }
            if self.peek() != Some(':') {
                return Err(self.err("expected ':' after key"));
            }
            self.bump();
            let Some(value) = self.value(depth + 1)? else {
                return Ok(Value::Object(map));
            };
            map.insert(key, value);
            self.skip_ws();
            match self.peek() {
                Some(',') | Some('}') | None => {}
                Some(c) if is_quote(c) || c.is_alphabetic() || c == '_' => {} // missing comma
                _ if self.at_end() => {}
                _ => return Err(self.err("expected ',' or '}'")),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<Value, String> {
        self.bump();
        let mut items = Vec::new();
        loop {
            self.skip_ws();
            if self.at_end() {
                return Ok(Value::Array(items));
            }
            match self.peek() {
                Some(']') => {
                    self.bump();
                    return Ok(Value::Array(items));
                }
                Some(',') => {
                    self.bump();
                    continue;
                }
                _ => {}
            }
            let Some(value) = self.value(depth + 1)? else {
                return Ok(Value::Array(items));
            };
            items.push(value);
            self.skip_ws();
            match self.peek() {
                Some(',') | Some(']') | None => {}
                Some(c) if is_value_start(c) => {} // missing comma
                _ if self.at_end() => {}
                _ => return Err(self.err("expected ',' or ']'")),
            }
        }
    }

    fn key(&mut self) -> Result<Option<String>, String> {
        match self.peek() {
            Some(q) if is_quote(q) => {
                // A key cut off by the end of input is useless.
                let (key, terminated) = self.string();
                Ok(terminated.then_some(key))
            }
            Some(c) if is_ident_char(c) => {
                let start = self.pos;
                while self.peek().is_some_and(is_ident_char) {
                    self.bump();
                }
                Ok(Some(self.s[start..self.pos].to_owned()))
            }
            _ => Err(self.err("expected a key")),
        }
    }

    /// A string delimited by `"`, `'` or typographic quotes, and whether its closing quote was
    /// found. Unterminated at the end of input: the content so far (truncation repair).
    fn string(&mut self) -> (String, bool) {
        let Some(open) = self.bump() else {
            return (String::new(), false);
        };
        let apostrophe_rules = matches!(open, '\'' | '‘' | '’');
        let mut out = String::new();
        loop {
            let Some(c) = self.bump() else {
                return (out, false);
            };
            if c == '\\' {
                let Some(e) = self.bump() else {
                    return (out, false);
                };
                match e {
                    '"' | '\\' | '/' | '\'' => out.push(e),
                    'b' => out.push('\u{8}'),
                    'f' => out.push('\u{c}'),
                    'n' => out.push('\n'),
                    'r' => out.push('\r'),
                    't' => out.push('\t'),
                    'u' => match self.unicode_escape() {
                        Some(ch) => out.push(ch),
                        None if self.s.len() - self.pos < 4 => return (out, false),
                        None => out.push('\u{fffd}'),
                    },
                    // An invalid escape (`C:\path`): keep it literally.
                    other => {
                        out.push('\\');
                        out.push(other);
                    }
                }
                continue;
            }
            if is_closer(open, c) && (!apostrophe_rules || self.closes_here()) {
                return (out, true);
            }
            out.push(c);
        }
    }

    /// For single-quote strings: does the quote just consumed end the string? Only if what
    /// follows is structural (so `'it's'` keeps its apostrophe).
    fn closes_here(&self) -> bool {
        let rest = self.s[self.pos..].trim_start();
        rest.is_empty()
            || rest.starts_with("```")
            || matches!(rest.chars().next(), Some(',' | ':' | '}' | ']'))
    }

    fn unicode_escape(&mut self) -> Option<char> {
        let hi = self.hex4()?;
        if (0xD800..0xDC00).contains(&hi) {
            if self.s[self.pos..].starts_with("\\u") {
                let save = self.pos;
                self.pos += 2;
                if let Some(lo) = self.hex4().filter(|lo| (0xDC00..0xE000).contains(lo)) {
                    return char::from_u32(0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00));
                }
                self.pos = save;
            }
            return Some('\u{fffd}');
        }
        char::from_u32(hi)
    }

    fn hex4(&mut self) -> Option<u32> {
        let digits = self.s.get(self.pos..self.pos + 4)?;
        let v = u32::from_str_radix(digits, 16).ok()?;
        self.pos += 4;
        Some(v)
    }

    fn number(&mut self) -> Result<Option<Value>, String> {
        let start = self.pos;
        while self
            .peek()
            .is_some_and(|c| c.is_ascii_digit() || matches!(c, '+' | '-' | '.' | 'e' | 'E'))
        {
            self.bump();
        }
        let raw = &self.s[start..self.pos];
        if let Some(n) = normalize_number(raw).and_then(|t| serde_json::from_str::<Number>(&t).ok())
        {
            return Ok(Some(Value::Number(n)));
        }
        if self.pos >= self.s.len() {
            // `1e` or `-` cut off by the end of input.
            return Ok(None);
        }
        self.pos = start;
        Err(self.err("invalid number"))
    }

    fn word(&mut self) -> Result<Option<Value>, String> {
        let start = self.pos;
        while self.peek().is_some_and(is_ident_char) {
            self.bump();
        }
        let word = &self.s[start..self.pos];
        let value = match word {
            "true" | "True" | "TRUE" => Value::Bool(true),
            "false" | "False" | "FALSE" => Value::Bool(false),
            "null" | "None" | "NULL" | "Null" | "undefined" => Value::Null,
            _ => {
                let literal_prefix = ["true", "false", "null", "True", "False", "None"]
                    .iter()
                    .any(|l| l.starts_with(word));
                if self.pos >= self.s.len() && literal_prefix {
                    return Ok(None);
                }
                self.pos = start;
                return Err(self.err("unquoted word where a value belongs"));
            }
        };
        Ok(Some(value))
    }
}

fn is_quote(c: char) -> bool {
    matches!(c, '"' | '\'' | '“' | '”' | '‘' | '’')
}

fn is_closer(open: char, c: char) -> bool {
    match open {
        '“' | '”' => matches!(c, '”' | '“'),
        '‘' | '’' => matches!(c, '’' | '‘'),
        _ => c == open,
    }
}

fn is_ident_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '_' | '$' | '-')
}

fn is_value_start(c: char) -> bool {
    is_quote(c) || c.is_alphanumeric() || matches!(c, '{' | '[' | '-' | '+' | '.' | '_')
}

/// Rewrites lenient number spellings (`+1`, `.5`, `5.`, `007`) into JSON; `None` if hopeless.
fn normalize_number(raw: &str) -> Option<String> {
    let (sign, body) = match raw.as_bytes().first()? {
        b'-' => ("-", &raw[1..]),
        b'+' => ("", &raw[1..]),
        _ => ("", raw),
    };
    let (mantissa, exponent) = match body.find(['e', 'E']) {
        Some(i) => (&body[..i], Some(&body[i + 1..])),
        None => (body, None),
    };
    let (int, frac) = match mantissa.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (mantissa, None),
    };
    if !int.bytes().all(|b| b.is_ascii_digit())
        || !frac.is_none_or(|f| f.bytes().all(|b| b.is_ascii_digit()))
        || (int.is_empty() && frac.is_none_or(str::is_empty))
    {
        return None;
    }
    let int = int.trim_start_matches('0');
    let mut out = format!("{sign}{}", if int.is_empty() { "0" } else { int });
    if let Some(f) = frac.filter(|f| !f.is_empty()) {
        out.push('.');
        out.push_str(f);
    } else if frac.is_some() {
        out.push_str(".0");
    }
    if let Some(e) = exponent {
        let digits = e.trim_start_matches(['+', '-']);
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        out.push('e');
        out.push_str(e);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_normalize() {
        assert_eq!(normalize_number("+1").as_deref(), Some("1"));
        assert_eq!(normalize_number(".5").as_deref(), Some("0.5"));
        assert_eq!(normalize_number("-.5").as_deref(), Some("-0.5"));
        assert_eq!(normalize_number("5.").as_deref(), Some("5.0"));
        assert_eq!(normalize_number("007").as_deref(), Some("7"));
        assert_eq!(normalize_number("1e5").as_deref(), Some("1e5"));
        assert_eq!(normalize_number("1e"), None);
        assert_eq!(normalize_number("-"), None);
        assert_eq!(normalize_number("1.2.3"), None);
    }

    #[test]
    fn reasoning_is_stripped() {
        assert_eq!(strip_reasoning("<think>a</think> {}"), " {}");
        assert_eq!(strip_reasoning("<THINK>a</THINK><think>b</think>x"), "x");
        assert_eq!(strip_reasoning("plan...</think>{\"a\":1}"), "{\"a\":1}");
        assert_eq!(strip_reasoning("<think>never closed {\"a\":1}"), "");
        assert_eq!(strip_reasoning("{\"a\":1}"), "{\"a\":1}");
    }
}
