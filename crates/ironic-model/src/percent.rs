//! Percent-encoding of a URL's query value or path segment: the one encoder of the
//! workspace (the API's `next` links and `Location`s, the agent client's and the
//! simulated agent's requests).

/// `s` with every byte but RFC 3986's unreserved characters (`A-Z a-z 0-9 - . _ ~`)
/// percent-encoded, as Python's `requests` encodes parameters.
pub fn encode(s: &str) -> String {
    encode_keeping(s, &[])
}

/// [`encode`], but commas kept as they are: the API's `next` links keep a list
/// (`fields=name,uuid`) readable, as upstream's do.
pub fn encode_list(s: &str) -> String {
    encode_keeping(s, b",")
}

fn encode_keeping(s: &str, keep: &[u8]) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') || keep.contains(&b)
        {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_unreserved_characters_stay() {
        assert_eq!(encode("aZ09-._~"), "aZ09-._~");
        assert_eq!(encode("a b/c?d=e&f,g"), "a%20b%2Fc%3Fd%3De%26f%2Cg");
        assert_eq!(encode("52:54:00:aa"), "52%3A54%3A00%3Aaa");
        assert_eq!(encode("é"), "%C3%A9");
        assert_eq!(encode_list("name,uuid x"), "name,uuid%20x");
    }
}
