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
/// its closing quote (one not escaped by a backslash), or to whitespace, `&`, `,`, `;`,
/// `}`, `)` or `]` when unquoted.
///
/// Linear in the length of `s` whatever it holds: every scan resumes where an earlier
/// one stopped (see [`Scanner`]), so `password:password:…` or a quote never closed cost
/// one pass, not one pass per secret word (which made a 1 MiB body cost minutes).
pub fn mask_text(s: &str) -> Cow<'_, str> {
    // One pass of one automaton finds every secret word at once, in any case (searching
    // each word in turn made masking the largest part of rendering a page of nodes);
    // most strings name none and are returned as they are, after the automaton's
    // quickest question.
    if !SECRET_WORDS_ANYWHERE.is_match(s) {
        return Cow::Borrowed(s);
    }
    let mut scan = Scanner::new(s.as_bytes());
    // (start, end) of each value to hide; merged below. The automaton reports matches
    // in the order of their ends, so the spans come sorted by where their keys end.
    let spans: Vec<(usize, usize)> = SECRET_WORDS_ANYWHERE
        .find_overlapping_iter(s)
        .filter_map(|m| scan.value_after_key(m.end()))
        .collect();
    mask_spans(s, spans)
}

/// The scans of [`mask_text`], each remembering where it last stopped. Secret words are
/// handed over in the order of their ends, so every question starts at or after the
/// previous one's start, and a scan that starts inside a stretch already scanned has
/// the same answer as the scan that covered it:
/// - the rest of a key is the run of word characters it is in (one answer per run);
/// - what follows a key (quote, spaces, separator, value) depends only on where its run
///   ends;
/// - an unquoted value ends at the first terminator at or after its start;
/// - a quoted value ends at the first quote of its kind at or after its start that no
///   backslash escapes (an odd run of backslashes before it), which is a property of
///   the quote's position alone.
struct Scanner<'a> {
    bytes: &'a [u8],
    /// The end of the last run of word characters found, and where that run was entered.
    word: Option<(usize, usize)>,
    /// The answer for the run that ended at `.0`.
    answer: Option<(usize, Option<(usize, usize)>)>,
    /// Where the last unquoted scan started and the terminator it found.
    bare: Option<(usize, usize)>,
    /// The same for each quote: `"` then `'`.
    quoted: [Option<(usize, usize)>; 2],
}

impl<'a> Scanner<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Scanner {
            bytes,
            word: None,
            answer: None,
            bare: None,
            quoted: [None, None],
        }
    }

    /// The value that follows a secret word ending at `key_end`, when a separator
    /// follows the rest of its key: its span, without its quotes.
    fn value_after_key(&mut self, key_end: usize) -> Option<(usize, usize)> {
        let bytes = self.bytes;
        // The rest of the key: the word characters after the fragment.
        let run_end = match self.word {
            Some((from, end)) if from <= key_end && key_end <= end => end,
            _ => {
                let mut j = key_end;
                while j < bytes.len() && (bytes[j].is_ascii_alphanumeric() || bytes[j] == b'_') {
                    j += 1;
                }
                self.word = Some((key_end, j));
                j
            }
        };
        if let Some((end, answer)) = self.answer
            && end == run_end
        {
            return answer;
        }
        let answer = self.after_run(run_end);
        self.answer = Some((run_end, answer));
        answer
    }

    /// What follows a key whose run of word characters ends at `j`.
    fn after_run(&mut self, mut j: usize) -> Option<(usize, usize)> {
        let bytes = self.bytes;
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
            Some(&q @ (b'"' | b'\'')) => (j + 1, self.closing_quote(q, j + 1)),
            _ => (j, self.terminator(j)),
        };
        (end > start).then_some((start, end))
    }

    /// The first byte at or after `start` that ends an unquoted value (or the end).
    fn terminator(&mut self, start: usize) -> usize {
        if let Some((from, end)) = self.bare
            && from <= start
            && start <= end
        {
            return end;
        }
        let end = self.bytes[start..]
            .iter()
            .position(|&b| {
                b.is_ascii_whitespace() || matches!(b, b'&' | b',' | b';' | b'}' | b')' | b']')
            })
            .map_or(self.bytes.len(), |p| start + p);
        self.bare = Some((start, end));
        end
    }

    /// The first quote `q` at or after `start` that no backslash escapes (or the end).
    fn closing_quote(&mut self, q: u8, start: usize) -> usize {
        let slot = usize::from(q == b'\'');
        if let Some((from, end)) = self.quoted[slot]
            && from <= start
            && start <= end
        {
            return end;
        }
        let bytes = self.bytes;
        let mut at = start;
        let end = loop {
            let Some(p) = bytes[at..].iter().position(|&b| b == q) else {
                break bytes.len();
            };
            let p = at + p;
            // Count the backslashes right before it, back to `start` at most: each
            // run is counted once, by the one quote that follows it.
            let escapes = bytes[start..p]
                .iter()
                .rev()
                .take_while(|&&b| b == b'\\')
                .count();
            if escapes % 2 == 0 {
                break p;
            }
            at = p + 1;
        };
        self.quoted[slot] = Some((start, end));
        end
    }
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

/// The most of a message that is shown, logged or stored (`last_error`, history):
/// messages may quote what a client sent, and a client may send a megabyte.
pub const TEXT_MAX: usize = 4096;

/// `s` cut to at most [`TEXT_MAX`] bytes (at character boundaries): its beginning and its
/// last KiB, with how much was left out between them (a message's reason comes last:
/// `'…' is too long`). Cut after masking, so that a cut never shows part of a secret. A
/// cut text is not cut again (`cut(cut(s)) == cut(s)`).
pub fn cut(s: &str) -> Cow<'_, str> {
    if s.len() <= TEXT_MAX {
        return Cow::Borrowed(s);
    }
    const TAIL: usize = 1024;
    // Room for the marker, whatever the number in it.
    const MARKER: usize = 64;
    let mut head = TEXT_MAX - TAIL - MARKER;
    while !s.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = s.len() - TAIL;
    while !s.is_char_boundary(tail) {
        tail += 1;
    }
    Cow::Owned(format!(
        "{} … ({} bytes left out) … {}",
        &s[..head],
        tail - head,
        &s[tail..]
    ))
}

/// A text as it may be stored where readers see it (`last_error`, node history): its
/// secrets masked, then cut to [`TEXT_MAX`].
pub fn stored_text(s: &str) -> String {
    cut(&mask_text(s)).into_owned()
}

/// `s` as it may be logged: secrets masked ([`mask_text`]), cut to [`TEXT_MAX`], and
/// control characters escaped (`\n` as `\\n`, others as `\\u{..}`), so client input
/// can neither leak a secret into the log nor start a line of its own.
pub fn log_safe(s: &str) -> Cow<'_, str> {
    let masked = match mask_text(s) {
        Cow::Borrowed(b) => cut(b),
        Cow::Owned(o) => Cow::Owned(cut(&o).into_owned()),
    };
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

/// A URL as messages and logs show it: `scheme://host[:port]/path`, without user
/// information (`user:password@`), query or fragment (signed URLs and webhooks carry
/// their tokens there).
pub fn shown_url(url: &str) -> Cow<'_, str> {
    let base = url.split(['?', '#']).next().unwrap_or(url);
    let (scheme, rest) = match base.split_once("://") {
        Some((scheme, rest)) => (Some(scheme), rest),
        None => (None, base),
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    match authority.rfind('@') {
        Some(at) => {
            let host = &authority[at + 1..];
            Cow::Owned(match scheme {
                Some(scheme) => format!("{scheme}://{host}{path}"),
                None => format!("{host}{path}"),
            })
        }
        None => Cow::Borrowed(base),
    }
}

/// A URL (`postgres://u:pw@h/db`, `amqps://u:pw@h/vhost`) without its password, for
/// logs and `Debug`.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let creds = &url[s + 3..at];
            match creds.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..s + 3], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

/// Texts of about `len` bytes built to be hard to mask, named by shape: the benchmark
/// (`cargo run --release -p ironic-model --example mask_bench`) and the tests use them.
pub fn hostile_texts(len: usize) -> Vec<(&'static str, String)> {
    let fill = |unit: &str| unit.repeat(len / unit.len().max(1));
    vec![
        ("repeated key words", fill("password:")),
        (
            "quote never closed",
            format!(r#"secret="{}"#, fill(r#"\"token="#)),
        ),
        ("nested keys", fill(r#"{"auth_token": {"password": "#)),
        ("words without separators", fill("passwordtoken")),
        ("escaped quotes", fill(r#"secret='\\\'"#)),
        ("separators and spaces", fill("token  =  ")),
        ("plain text", fill("the quick brown fox ")),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shown_urls_keep_scheme_host_port_and_path() {
        for (url, shown) in [
            ("https://h:8443/a/b?token=x#f", "https://h:8443/a/b"),
            ("http://user:pw@h/p?q=1", "http://h/p"),
            ("http://user:p@w@[::1]:80", "http://[::1]:80"),
            ("user:pw@h/x", "h/x"),
            ("http://h/path@x?s=1", "http://h/path@x"),
            ("https://h", "https://h"),
            ("", ""),
        ] {
            assert_eq!(shown_url(url), shown, "{url}");
        }
    }

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

    /// Shapes that made the old masking quadratic (every secret word scanned its value
    /// to the end again), each 1 MiB: masked in one pass each. The test runner's
    /// per-test timeout (`.config/nextest.toml`) fails this test if any shape is
    /// quadratic again (minutes instead of milliseconds).
    #[test]
    fn masking_is_linear_on_hostile_text() {
        for (shape, text) in hostile_texts(1 << 20) {
            let shown = mask_text(&text);
            match shape {
                // The first value runs to the end: everything after it is hidden.
                "repeated key words" => assert_eq!(shown, "password:******"),
                "quote never closed" => assert_eq!(shown, r#"secret="******"#),
                "words without separators" | "plain text" => assert_eq!(shown, text),
                _ => assert_ne!(shown, text, "{shape}"),
            }
        }
    }

    /// The masking before scans resumed (one scan per secret word, quadratic on hostile
    /// text): what [`mask_text`] must still answer.
    fn reference_mask(s: &str) -> String {
        let spans = SECRET_WORDS_ANYWHERE
            .find_overlapping_iter(s)
            .filter_map(|m| reference_value_after_key(s.as_bytes(), m.end()))
            .collect();
        mask_spans(s, spans).into_owned()
    }

    fn reference_value_after_key(bytes: &[u8], key_end: usize) -> Option<(usize, usize)> {
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

    proptest::proptest! {
        /// Text made of key words, separators, quotes and backslashes is masked as the
        /// scan-per-word masking masked it.
        #[test]
        fn resumed_scans_mask_as_fresh_scans_did(parts in proptest::collection::vec(
            proptest::sample::select(vec![
                "password", "token", "Secret", "pass", "_x", "=", ":", " ", "\"", "'",
                "\\", ",", "a", "}", "é",
            ]),
            0..40,
        )) {
            let text = parts.concat();
            proptest::prop_assert_eq!(mask_text(&text).into_owned(), reference_mask(&text));
        }
    }

    #[test]
    fn long_texts_keep_their_beginning_and_their_end() {
        let long = format!("Schema error: '{}' is too long", "é".repeat(5000));
        let shown = cut(&long);
        assert!(shown.len() <= TEXT_MAX, "{}", shown.len());
        assert!(shown.starts_with("Schema error: 'éé"), "{shown}");
        assert!(shown.ends_with("éé' is too long"), "{shown}");
        assert!(shown.contains(" bytes left out) "), "{shown}");
        assert_eq!(cut(&shown), shown, "a cut text is not cut again");
        assert!(matches!(cut("short"), Cow::Borrowed("short")));
        let stored = stored_text(&format!("password=x {}", "y".repeat(10_000)));
        assert_eq!(stored_text(&stored), stored);
    }

    /// The scans that resume where others stopped give what one scan per key gives.
    #[test]
    fn resumed_scans_agree_with_fresh_ones() {
        for (text, shown) in [
            ("password=a password=b", "password=****** password=******"),
            ("password:password:x y", "password:****** y"),
            (
                r#"token="a\" b" password=c"#,
                r#"token="******" password=******"#,
            ),
            (r#"a='x' secret='y\\' z"#, r#"a='x' secret='******' z"#),
            (
                "passwordpassword=x,token=y",
                "passwordpassword=******,token=******",
            ),
            (
                r#""secret": "p\\\"q", "t":1"#,
                r#""secret": "******", "t":1"#,
            ),
            (
                r#"secret="a\\\\\" b" token=c"#,
                r#"secret="******" token=******"#,
            ),
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
