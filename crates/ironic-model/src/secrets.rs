//! The one place that decides what is a secret and how it is hidden, for API responses,
//! error messages, logs and RPC logs alike: values under secret-looking keys at any
//! depth (objects and arrays), `password=...`-style patterns inside strings (as
//! upstream's `mask_password` does), and control characters in anything logged from a
//! client (so a newline in a query parameter cannot forge a log line).

use std::borrow::Cow;

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Map, Value};

/// What a secret is shown as.
pub const MASK: &str = "******";

/// Key fragments whose values are secrets (matched case-insensitively anywhere in the
/// key, as upstream's sanitised keys are): BMC passwords, tokens, keys.
const SECRET_WORDS: &[&str] = &[
    "password",
    "passwd",
    "pswd",
    "passphrase",
    "secret",
    "token",
    "credential",
    "private_key",
    "privkey",
    "priv_key",
    "auth_key",
    "cert_key",
    "sslkey",
    "encryption_key",
    "encrypted_key",
    "fernetkey",
    "cephxkey",
    "pskey",
    "keyring",
    "authpass",
    "privpass",
    "adminpass",
    "admin_pass",
    "new_pass",
];

/// Finds any of [`SECRET_WORDS`] in any case, in one pass.
static SECRET_WORDS_ANYWHERE: std::sync::LazyLock<aho_corasick::AhoCorasick> =
    std::sync::LazyLock::new(|| {
        aho_corasick::AhoCorasick::builder()
            .ascii_case_insensitive(true)
            .build(SECRET_WORDS)
            .expect("a handful of fixed words always build")
    });

/// Whether values under `key` are secrets.
pub fn is_secret_key(key: &str) -> bool {
    SECRET_WORDS_ANYWHERE.is_match(key)
}

/// Whether a JSON pointer (`/driver_info/ipmi_password`) names a secret: any of its
/// segments is a secret key.
pub fn is_secret_path(path: &str) -> bool {
    path.split('/').any(is_secret_key)
}

/// An object with secrets hidden, serialised as it is read (no copy, for answers):
/// values under secret keys become [`MASK`], at any depth, inside arrays too, and secret
/// patterns inside strings are masked; `extra` names more keys to hide whole (a node's
/// `instance_info` hides `configdrive` and `image_url`).
pub struct Masked<'a> {
    pub obj: &'a Map<String, Value>,
    pub extra: &'a [&'a str],
}

/// Any value with secrets hidden, as [`Masked`] does for objects.
struct MaskedValue<'a>(&'a Value);

impl Serialize for MaskedValue<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Value::Object(obj) => Masked { obj, extra: &[] }.serialize(s),
            Value::Array(a) => s.collect_seq(a.iter().map(MaskedValue)),
            Value::String(text) => s.serialize_str(&mask_text(text)),
            other => other.serialize(s),
        }
    }
}

impl Serialize for Masked<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.obj.len()))?;
        for (k, v) in self.obj {
            if is_secret_key(k) || self.extra.contains(&k.as_str()) {
                m.serialize_entry(k, MASK)?;
            } else {
                m.serialize_entry(k, &MaskedValue(v))?;
            }
        }
        m.end()
    }
}

/// `v` with secrets hidden, as a value (for messages that quote it).
pub fn masked(v: &Value) -> Value {
    serde_json::to_value(MaskedValue(v)).unwrap_or(Value::Null)
}

/// `s` with the value of every `<secret key><quote?><space?>[=:]<space?><quote?>value`
/// replaced by [`MASK`]: `password=hunter2`, `"ipmi_password": "x"`,
/// `'auth_token': 'x'`, `--password x` stays as is (no separator). The value runs to
/// its closing quote, or to whitespace, `&`, `,`, `;`, `}` or `)` when unquoted.
pub fn mask_text(s: &str) -> Cow<'_, str> {
    // One pass of one automaton finds every secret word at once, in any case (searching
    // each word in turn made masking the largest part of rendering a page of nodes);
    // most strings name none and are returned as they are, after the automaton's
    // quickest question.
    if !SECRET_WORDS_ANYWHERE.is_match(s) {
        return Cow::Borrowed(s);
    }
    let bytes = s.as_bytes();
    // (start, end) of each value to hide; sorted and merged below.
    let spans: Vec<(usize, usize)> = SECRET_WORDS_ANYWHERE
        .find_overlapping_iter(s)
        .filter_map(|m| value_after_key(bytes, m.end()))
        .collect();
    mask_spans(s, spans)
}

/// The value that follows a secret word ending at `key_end`, when a separator follows
/// the rest of its key: its span, without its quotes.
fn value_after_key(bytes: &[u8], key_end: usize) -> Option<(usize, usize)> {
    // The rest of the key: word characters after the fragment.
    let mut j = key_end;
    while j < bytes.len() && (bytes[j].is_ascii_alphanumeric() || bytes[j] == b'_') {
        j += 1;
    }
    // A closing quote of the key, spaces, the separator, spaces.
    if j < bytes.len() && matches!(bytes[j], b'"' | b'\'') {
        j += 1;
    }
    while j < bytes.len() && bytes[j] == b' ' {
        j += 1;
    }
    if j >= bytes.len() || !matches!(bytes[j], b'=' | b':') {
        return None;
    }
    j += 1;
    while j < bytes.len() && bytes[j] == b' ' {
        j += 1;
    }
    let (start, end) = match bytes.get(j) {
        Some(q @ (b'"' | b'\'')) => {
            let start = j + 1;
            let mut end = start;
            while end < bytes.len() && bytes[end] != *q {
                // A backslash escapes the next character (JSON, Python repr).
                end += if bytes[end] == b'\\' { 2 } else { 1 };
            }
            (start, end.min(bytes.len()))
        }
        _ => {
            let start = j;
            let mut end = start;
            while end < bytes.len()
                && !bytes[end].is_ascii_whitespace()
                && !matches!(bytes[end], b'&' | b',' | b';' | b'}' | b')' | b']')
            {
                end += 1;
            }
            (start, end)
        }
    };
    (end > start).then_some((start, end))
}

/// `s` with each span replaced by [`MASK`]; spans that overlap are hidden as one
/// (`password=token="a b"`: the first value runs to the space, the second to its quote).
fn mask_spans(s: &str, mut spans: Vec<(usize, usize)>) -> Cow<'_, str> {
    if spans.is_empty() {
        return Cow::Borrowed(s);
    }
    spans.sort_unstable();
    let mut out = String::with_capacity(s.len());
    let mut at = 0;
    for (start, end) in spans {
        if start < at {
            at = at.max(end);
            continue;
        }
        // Spans start and end at ASCII bytes, so these are character boundaries.
        out.push_str(&s[at..start]);
        out.push_str(MASK);
        at = end;
    }
    out.push_str(&s[at..]);
    Cow::Owned(out)
}

/// `s` as it may be logged: secrets masked ([`mask_text`]) and control characters
/// escaped (`\n` as `\\n`, others as `\\u{..}`), so client input can neither leak a
/// secret into the log nor start a line of its own.
pub fn log_safe(s: &str) -> Cow<'_, str> {
    let masked = mask_text(s);
    if !masked.chars().any(char::is_control) {
        return masked;
    }
    let mut out = String::with_capacity(masked.len() + 8);
    for c in masked.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_at_any_depth_arrays_included() {
        let v = json!({
            "ipmi_password": "p1",
            "bmcs": [{"password": "p2", "address": "10.0.0.1"}, "note password=p3"],
            "nested": {"auth_token": "t", "OK": 1, "list": [[{"Redfish_Password": "p4"}]]},
            "snmp_auth_key": "k",
            "ipmi_address": "1.2.3.4"
        });
        let m = masked(&v);
        let text = m.to_string();
        for secret in ["p1", "p2", "p3", "\"t\"", "p4", "\"k\""] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        assert_eq!(m["bmcs"][0]["address"], "10.0.0.1");
        assert_eq!(m["ipmi_address"], "1.2.3.4");
        assert_eq!(m["bmcs"][1], "note password=******");
    }

    #[test]
    fn patterns_in_text() {
        for (text, shown) in [
            ("password=hunter2", "password=******"),
            ("x?ipmi_password=a&b=c", "x?ipmi_password=******&b=c"),
            (
                "{'op': 'add', 'ipmi_password': 'se cret', 'x': 1}",
                "{'op': 'add', 'ipmi_password': '******', 'x': 1}",
            ),
            (
                r#"{"auth_token": "a\"b", "ok": true}"#,
                r#"{"auth_token": "******", "ok": true}"#,
            ),
            ("Password : x y", "Password : ****** y"),
            ("no secrets here", "no secrets here"),
            ("password", "password"),
            ("passwords are checked", "passwords are checked"),
            ("token=", "token="),
            ("secret='unterminated", "secret='******"),
            (r#"password=token="a b" c"#, r#"password=******" c"#),
        ] {
            assert_eq!(mask_text(text), shown, "{text}");
        }
    }

    #[test]
    fn logged_client_input_cannot_start_a_line() {
        assert_eq!(log_safe("x\nforged=1"), "x\\nforged=1");
        assert_eq!(log_safe("a\r\u{1b}[31mb"), "a\\r\\u{1b}[31mb");
        assert_eq!(log_safe("password=x\ny"), "password=******\\ny");
        assert!(matches!(log_safe("plain"), Cow::Borrowed(_)));
    }

    #[test]
    fn secret_paths() {
        assert!(is_secret_path("/driver_info/ipmi_password"));
        assert!(is_secret_path("/instance_info/auth_token/x"));
        assert!(!is_secret_path("/driver_info/ipmi_address"));
    }

    /// Secret words are found in any case and anywhere in a key or a text, each of them.
    #[test]
    fn every_word_in_any_case() {
        for w in SECRET_WORDS {
            let upper = w.to_ascii_uppercase();
            assert!(is_secret_key(&format!("x_{upper}_y")), "{w}");
            assert!(is_secret_key(w), "{w}");
            assert_eq!(
                mask_text(&format!("a {upper}=v b")),
                format!("a {upper}=****** b")
            );
        }
        for plain in ["ipmi_address", "redfish_system_id", "PASS", "tok en", ""] {
            assert!(!is_secret_key(plain), "{plain}");
            assert!(matches!(mask_text(&format!("{plain}=v")), Cow::Borrowed(_)));
        }
    }
}
