//! What a JSON document costs once parsed, told from its bytes before it is parsed: a
//! `serde_json::Value` is tens of bytes whatever it holds (with `preserve_order`, about
//! 80, and an array's or object's spare capacity besides), so `[0,0,0,…]` costs some
//! 80 bytes of memory per 2 bytes of body. The API and the agent client count the
//! values of a document first and refuse one with more than its route allows, so that
//! parsing costs at most [`VALUE_BYTES`] per allowed value plus the document's size.

/// What one parsed value may cost, at most (the `Value`, an array slot's spare half,
/// an object entry's key and index).
pub const VALUE_BYTES: usize = 160;

/// How many JSON values `doc` holds at most (an upper bound, exact for well-formed
/// documents up to object keys, which count with their values): one plus every `,`,
/// `[` and `{` outside strings. Linear, no allocation.
pub fn values(doc: &[u8]) -> usize {
    let mut n = 1;
    let mut in_string = false;
    let mut escaped = false;
    for &b in doc {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b',' | b'[' | b'{' => n += 1,
            _ => {}
        }
    }
    n
}

/// The most memory parsing `doc` into a `Value` may take ([`values`] ×
/// [`VALUE_BYTES`], plus the document's own size for its strings).
pub fn parsed_bytes(doc: &[u8]) -> usize {
    values(doc)
        .saturating_mul(VALUE_BYTES)
        .saturating_add(doc.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_counted_outside_strings() {
        assert_eq!(values(b"0"), 1);
        assert_eq!(values(b"[0,0,0]"), 4);
        assert_eq!(values(br#"{"a":[1,2],"b":{"c":"x,[{"}}"#), 6);
        assert_eq!(values(br#""a\",[{""#), 1);
        assert_eq!(values(br#"["\\",1]"#), 3);
        let flood = format!("[{}0]", "0,".repeat(100_000));
        assert_eq!(values(flood.as_bytes()), 100_002);
        assert!(parsed_bytes(flood.as_bytes()) > 16_000_000);
    }

    /// The bound holds for what serde_json really builds (upper bound by the
    /// allocator's count would need a global allocator; the sizes of the types do).
    #[test]
    fn a_value_is_within_the_bound() {
        let v = std::mem::size_of::<serde_json::Value>();
        assert!(v * 2 <= VALUE_BYTES, "{v}");
        let entry = std::mem::size_of::<(String, serde_json::Value)>() + 16;
        assert!(entry <= VALUE_BYTES, "{entry}");
    }
}
