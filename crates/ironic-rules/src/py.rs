//! Python's view of JSON values, as upstream's rules see them: `str()` and `repr()`
//! (with secret masking), truthiness, `==`, `<`/`>`, `in`, `int()` and `float()`, and
//! the wording of the errors Python raises for them. Messages that end in `last_error`
//! are Python's own, so they are reproduced here.

use std::cmp::Ordering;

use serde_json::Value;

/// Keys whose values read as [`MASK`] where masking is on (upstream's `SENSITIVE_FIELDS`).
pub(super) const SENSITIVE: &[&str] = &["password", "auth_token", "bmc_password"];

/// What a masked value reads as.
pub(super) const MASK: &str = "***";

/// Whether `key` of an object is masked.
pub(super) fn is_sensitive(key: &str) -> bool {
    SENSITIVE.contains(&key)
}

/// Python's type name of a JSON value.
pub(super) fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "NoneType",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float",
        Value::Number(_) => "int",
        Value::String(_) => "str",
        Value::Array(_) => "list",
        Value::Object(_) => "dict",
    }
}

/// Python's `str()`: strings raw, everything else as `repr()`. With `mask`, the
/// values of sensitive keys at any depth read as `'***'`.
pub(super) fn py_str(v: &Value, mask: bool) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => py_repr(other, mask),
    }
}

/// Python's `repr()` of a JSON value (`None`, `True`, `'x'`, `[1, 2.0]`, `{'a': 1}`).
pub(super) fn py_repr(v: &Value, mask: bool) -> String {
    let mut out = String::new();
    write_repr(&mut out, v, mask);
    out
}

fn write_repr(out: &mut String, v: &Value, mask: bool) {
    match v {
        Value::Null => out.push_str("None"),
        Value::Bool(true) => out.push_str("True"),
        Value::Bool(false) => out.push_str("False"),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => out.push_str(&i.to_string()),
            (None, Some(u), _) => out.push_str(&u.to_string()),
            (None, None, Some(f)) => out.push_str(&py_float(f)),
            _ => out.push_str(&n.to_string()),
        },
        Value::String(s) => out.push_str(&py_repr_str(s)),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_repr(out, item, mask);
            }
            out.push(']');
        }
        Value::Object(o) => {
            out.push('{');
            for (i, (k, item)) in o.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push_str(&py_repr_str(k));
                out.push_str(": ");
                if mask && is_sensitive(k) {
                    out.push_str(&py_repr_str(MASK));
                } else {
                    write_repr(out, item, mask);
                }
            }
            out.push('}');
        }
    }
}

/// Python's `repr()` of a string: single quotes unless the text has a `'` and no `"`;
/// backslash, the quote, `\t`, `\n`, `\r` and unprintable characters escaped.
pub(super) fn py_repr_str(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if !printable(c) => {
                let n = u32::from(c);
                if n <= 0xff {
                    out.push_str(&format!("\\x{n:02x}"));
                } else if n <= 0xffff {
                    out.push_str(&format!("\\u{n:04x}"));
                } else {
                    out.push_str(&format!("\\U{n:08x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// Python's `str.isprintable()` for one character, close enough: control characters,
/// separators other than the space and the common format characters are not.
fn printable(c: char) -> bool {
    if c == ' ' {
        return true;
    }
    !(c.is_control()
        || c.is_whitespace()
        || matches!(c, '\u{ad}' | '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2064}' | '\u{feff}'))
}

/// Python's `repr()` of a float: the shortest digits that read back, positional for
/// exponents -4..16 (`0.3`, `2.0`, `1000000000000000.0`), scientific otherwise
/// (`1e+16`, `1.5e-05`).
pub(super) fn py_float(f: f64) -> String {
    if f.is_nan() {
        return "nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf" } else { "-inf" }.into();
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0.0" } else { "0.0" }.into();
    }
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let neg = mantissa.starts_with('-');
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let mut out = String::new();
    if neg {
        out.push('-');
    }
    if (-4..16).contains(&exp) {
        if exp >= 0 {
            let int_len = usize::try_from(exp).unwrap_or(0) + 1;
            if digits.len() <= int_len {
                out.push_str(&digits);
                out.push_str(&"0".repeat(int_len - digits.len()));
                out.push_str(".0");
            } else {
                out.push_str(&digits[..int_len]);
                out.push('.');
                out.push_str(&digits[int_len..]);
            }
        } else {
            out.push_str("0.");
            out.push_str(&"0".repeat(usize::try_from(-exp - 1).unwrap_or(0)));
            out.push_str(&digits);
        }
    } else {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        out.push_str(&format!(
            "e{}{:02}",
            if exp < 0 { '-' } else { '+' },
            exp.abs()
        ));
    }
    out
}

/// Python's truthiness.
pub(super) fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

/// A Python number: booleans count as 0 and 1.
#[derive(Debug, Clone, Copy)]
enum Num {
    Int(i128),
    Float(f64),
}

fn as_num(v: &Value) -> Option<Num> {
    match v {
        Value::Bool(b) => Some(Num::Int(i128::from(*b))),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Some(Num::Int(i128::from(i)))
            } else if let Some(u) = n.as_u64() {
                Some(Num::Int(i128::from(u)))
            } else {
                n.as_f64().map(Num::Float)
            }
        }
        _ => None,
    }
}

/// Exact comparison of two numbers, as Python compares an int with a float.
fn num_cmp(a: Num, b: Num) -> Option<Ordering> {
    const EXACT: f64 = 1e30;
    match (a, b) {
        (Num::Int(x), Num::Int(y)) => Some(x.cmp(&y)),
        (Num::Float(x), Num::Float(y)) => x.partial_cmp(&y),
        (Num::Int(i), Num::Float(f)) => int_float_cmp(i, f, EXACT),
        (Num::Float(f), Num::Int(i)) => int_float_cmp(i, f, EXACT).map(Ordering::reverse),
    }
}

fn int_float_cmp(i: i128, f: f64, exact: f64) -> Option<Ordering> {
    if f.is_nan() {
        return None;
    }
    if f.abs() < exact {
        let whole = f.trunc();
        // `whole` is integral and below 1e30, well within i128.
        let w = whole as i128;
        match i.cmp(&w) {
            Ordering::Equal if f > whole => Some(Ordering::Less),
            Ordering::Equal if f < whole => Some(Ordering::Greater),
            other => Some(other),
        }
    } else {
        (i as f64).partial_cmp(&f)
    }
}

/// Python's `==` between two JSON values.
pub(super) fn py_eq(a: &Value, b: &Value) -> bool {
    if let (Some(x), Some(y)) = (as_num(a), as_num(b)) {
        return num_cmp(x, y) == Some(Ordering::Equal);
    }
    match (a, b) {
        (Value::Null, Value::Null) => true,
        (Value::String(x), Value::String(y)) => x == y,
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| py_eq(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| py_eq(v, w)))
        }
        _ => false,
    }
}

/// An ordering comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cmp {
    Lt,
    Gt,
}

impl Cmp {
    fn symbol(self) -> &'static str {
        match self {
            Cmp::Lt => "<",
            Cmp::Gt => ">",
        }
    }
    fn holds(self, o: Ordering) -> bool {
        match self {
            Cmp::Lt => o == Ordering::Less,
            Cmp::Gt => o == Ordering::Greater,
        }
    }
}

/// The text of the Python exception upstream raises at that point (a `TypeError`'s, a
/// `KeyError`'s ...), as it ends in a failure message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct PyError(pub(crate) String);

impl From<&str> for PyError {
    fn from(s: &str) -> PyError {
        PyError(s.to_string())
    }
}

/// Python's `a < b` / `a > b`: numbers across int, float and bool; strings by code
/// point; lists lexicographically; anything else a `TypeError`, whose text is returned.
pub(super) fn py_compare(a: &Value, b: &Value, op: Cmp) -> Result<bool, PyError> {
    if let (Some(x), Some(y)) = (as_num(a), as_num(b)) {
        return Ok(num_cmp(x, y).is_some_and(|o| op.holds(o)));
    }
    match (a, b) {
        (Value::String(x), Value::String(y)) => Ok(op.holds(x.cmp(y))),
        (Value::Array(x), Value::Array(y)) => {
            for (p, q) in x.iter().zip(y) {
                if !py_eq(p, q) {
                    return py_compare(p, q, op);
                }
            }
            Ok(op.holds(x.len().cmp(&y.len())))
        }
        _ => Err(PyError(format!(
            "'{}' not supported between instances of '{}' and '{}'",
            op.symbol(),
            type_name(a),
            type_name(b)
        ))),
    }
}

/// Python's `value in container`; `Err` is the `TypeError` text.
pub(super) fn py_contains(container: &Value, value: &Value) -> Result<bool, PyError> {
    match container {
        Value::Array(items) => Ok(items.iter().any(|i| py_eq(i, value))),
        Value::String(s) => match value {
            Value::String(v) => Ok(s.contains(v.as_str())),
            other => Err(PyError(format!(
                "'in <string>' requires string as left operand, not {}",
                type_name(other)
            ))),
        },
        Value::Object(o) => match value {
            Value::String(k) => Ok(o.contains_key(k)),
            Value::Array(_) | Value::Object(_) => {
                Err(PyError(format!("unhashable type: '{}'", type_name(value))))
            }
            // JSON keys are strings: no number, boolean or None is one.
            _ => Ok(false),
        },
        other => Err(PyError(format!(
            "argument of type '{}' is not iterable",
            type_name(other)
        ))),
    }
}

/// Why a conversion failed: Python raised `ValueError` (the action reports it as an
/// invalid parameter) or `TypeError` (an unexpected error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ConvError {
    Value(String),
    Type(String),
}

/// Python's `float(v)`.
pub(super) fn py_to_float(v: &Value) -> Result<f64, ConvError> {
    match v {
        Value::Bool(b) => Ok(if *b { 1.0 } else { 0.0 }),
        Value::Number(n) => n
            .as_f64()
            .ok_or_else(|| ConvError::Value(format!("could not convert {n} to float"))),
        Value::String(s) => parse_py_float(s).ok_or_else(|| {
            ConvError::Value(format!(
                "could not convert string to float: {}",
                py_repr_str(s)
            ))
        }),
        other => Err(ConvError::Type(format!(
            "float() argument must be a string or a real number, not '{}'",
            type_name(other)
        ))),
    }
}

/// Digits with single underscores between them (Python's numeric literal rule).
fn digits_ok(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with('_')
        && !s.ends_with('_')
        && !s.contains("__")
        && s.chars().all(|c| c.is_ascii_digit() || c == '_')
}

fn parse_py_float(s: &str) -> Option<f64> {
    let t = s.trim();
    let body = t.strip_prefix(['+', '-']).unwrap_or(t);
    let neg = t.starts_with('-');
    let special = match body.to_ascii_lowercase().as_str() {
        "inf" | "infinity" => Some(f64::INFINITY),
        "nan" => Some(f64::NAN),
        _ => None,
    };
    if let Some(f) = special {
        return Some(if neg { -f } else { f });
    }
    // Python's grammar: digits [. digits] [e [+-] digits], or . digits; underscores
    // only between digits.
    let (mant, exp) = match body.find(['e', 'E']) {
        Some(i) => (&body[..i], Some(&body[i + 1..])),
        None => (body, None),
    };
    let (int_part, frac) = match mant.split_once('.') {
        Some((a, b)) => (a, Some(b)),
        None => (mant, None),
    };
    let int_ok = int_part.is_empty() || digits_ok(int_part);
    let frac_ok = frac.is_none_or(|f| f.is_empty() || digits_ok(f));
    let has_digits = !int_part.is_empty() || frac.is_some_and(|f| !f.is_empty());
    let exp_ok = exp.is_none_or(|e| digits_ok(e.strip_prefix(['+', '-']).unwrap_or(e)));
    if !(int_ok && frac_ok && has_digits && exp_ok) {
        return None;
    }
    t.replace('_', "").parse::<f64>().ok()
}

/// Python's `int(v)`.
pub(super) fn py_to_int(v: &Value) -> Result<i64, ConvError> {
    match v {
        Value::Bool(b) => Ok(i64::from(*b)),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Ok(i)
            } else if n.as_u64().is_some() {
                Ok(i64::MAX)
            } else {
                let f = n.as_f64().unwrap_or(0.0);
                // Saturating, as a retry count needs no more.
                Ok(f.trunc() as i64)
            }
        }
        Value::String(s) => {
            let t = s.trim();
            let body = t.strip_prefix(['+', '-']).unwrap_or(t);
            if digits_ok(body) {
                let n: i128 = body.replace('_', "").parse().unwrap_or(i128::MAX);
                let n = if t.starts_with('-') { -n } else { n };
                Ok(i64::try_from(n).unwrap_or(if n < 0 { i64::MIN } else { i64::MAX }))
            } else {
                Err(ConvError::Value(format!(
                    "invalid literal for int() with base 10: {}",
                    py_repr_str(s)
                )))
            }
        }
        other => Err(ConvError::Type(format!(
            "int() argument must be a string, a bytes-like object or a real number, not '{}'",
            type_name(other)
        ))),
    }
}

/// Python's `str(KeyError(key))`.
pub(super) fn key_error(key: &str) -> String {
    py_repr_str(key)
}
