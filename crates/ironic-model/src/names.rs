//! Validation of logical names, traits and conductor groups (reference §4.1, §4.2).

use crate::ids::is_uuid_like;

/// Words a node may not be named, because they are sub-resources of `/v1/nodes`.
pub const RESERVED_NODE_NAMES: &[&str] = &[
    "states",
    "vendor_passthru",
    "management",
    "maintenance",
    "detail",
    "validate",
];

/// A logical name at API ≥ 1.10: RFC 3986 unreserved characters, 1..=255 long.
pub fn is_valid_logical_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'))
}

/// Below 1.10 a node name had to be a valid host name: dot-separated labels of letters,
/// digits and hyphens (no leading or trailing hyphen), labels of at most 63 characters,
/// at most 255 in all.
pub fn is_hostname_safe(name: &str) -> bool {
    if name.is_empty() || name.len() > 255 {
        return false;
    }
    let name = name.strip_suffix('.').unwrap_or(name);
    name.split('.').all(|label| {
        !label.is_empty()
            && label.len() <= 63
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
    }) && !name.bytes().all(|b| b.is_ascii_digit() || b == b'.')
}

/// Whether `name` is acceptable as a node name at the given version.
pub fn is_valid_node_name(name: &str, version: crate::Version) -> bool {
    let syntax = if version.at_least(10) {
        is_valid_logical_name(name)
    } else {
        is_hostname_safe(name)
    };
    syntax && !is_uuid_like(name) && !RESERVED_NODE_NAMES.contains(&name)
}

/// Most traits a node may carry (upstream `MAX_TRAITS_PER_NODE`).
pub const MAX_TRAITS_PER_NODE: usize = 50;

/// Namespaces of the standard traits (os-traits). We accept any upper-case name inside
/// one of them instead of shipping os-traits' exact list (see `docs/api.md`).
const STANDARD_TRAIT_NAMESPACES: &[&str] = &[
    "HW_",
    "COMPUTE_",
    "STORAGE_",
    "MISC_",
    "ACCELERATOR_",
    "OWNER_",
];

/// Why a trait name was refused; `message` gives Ironic's schema wording.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TraitError {
    TooLong,
    NotATrait,
}

/// Checks a trait name: `CUSTOM_[A-Z0-9_]+` or a standard trait, 1..=255 long.
pub fn validate_trait(t: &str) -> Result<(), TraitError> {
    if t.len() > 255 {
        return Err(TraitError::TooLong);
    }
    let upper = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
    };
    if let Some(rest) = t.strip_prefix("CUSTOM_")
        && upper(rest)
    {
        return Ok(());
    }
    let standard = STANDARD_TRAIT_NAMESPACES
        .iter()
        .any(|ns| t.strip_prefix(ns).is_some_and(upper));
    if standard {
        Ok(())
    } else {
        Err(TraitError::NotATrait)
    }
}

/// Ironic's JSON-schema wording for a refused trait (`what` is `trait` or `body`).
pub fn trait_error_message(what: &str, t: &str, err: &TraitError) -> String {
    let shown = py_repr_str(t);
    match err {
        TraitError::TooLong => format!("Schema error for {what}: {shown} is too long"),
        TraitError::NotATrait => format!(
            "Schema error for {what}: {shown} is not valid under any of the given schemas. Possible root cause: {shown} does not match '^CUSTOM_[A-Z0-9_]+$'"
        ),
    }
}

/// A conductor group: `[a-zA-Z0-9_\-.]*`, at most 255 long.
pub fn is_valid_conductor_group(g: &str) -> bool {
    g.len() <= 255
        && g.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// Python's `repr()` of a string, as Ironic's messages quote values (`'x'`).
pub fn py_repr_str(s: &str) -> String {
    if s.contains('\'') && !s.contains('"') {
        format!("\"{s}\"")
    } else {
        format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Version;

    #[test]
    fn node_names() {
        let v = Version::MAX;
        assert!(is_valid_node_name("node-1.a_b~c", v));
        assert!(!is_valid_node_name("bad name!", v));
        assert!(!is_valid_node_name("", v));
        assert!(!is_valid_node_name("detail", v));
        assert!(!is_valid_node_name(
            "7c1a0f2e-8b43-4c6a-9d1e-2f3a4b5c6d7e",
            v
        ));
        assert!(!is_valid_node_name(&"a".repeat(256), v));
        assert!(is_valid_node_name(&"a".repeat(255), v));
        // Before 1.10 only host names.
        assert!(is_valid_node_name("node-1.example", Version::new(5)));
        assert!(!is_valid_node_name("node_1", Version::new(5)));
        assert!(!is_valid_node_name("-node", Version::new(5)));
    }

    #[test]
    fn traits() {
        assert_eq!(validate_trait("CUSTOM_GPU_1"), Ok(()));
        assert_eq!(validate_trait("HW_CPU_X86_AVX2"), Ok(()));
        assert_eq!(validate_trait("CUSTOM_"), Err(TraitError::NotATrait));
        assert_eq!(
            validate_trait("lowercase_trait"),
            Err(TraitError::NotATrait)
        );
        assert_eq!(
            validate_trait("NOT_A_NAMESPACE"),
            Err(TraitError::NotATrait)
        );
        let long = format!("CUSTOM_{}", "A".repeat(249));
        assert_eq!(validate_trait(&long), Err(TraitError::TooLong));
        assert_eq!(
            trait_error_message("trait", "lowercase_trait", &TraitError::NotATrait),
            "Schema error for trait: 'lowercase_trait' is not valid under any of the given schemas. Possible root cause: 'lowercase_trait' does not match '^CUSTOM_[A-Z0-9_]+$'"
        );
    }

    #[test]
    fn groups() {
        assert!(is_valid_conductor_group(""));
        assert!(is_valid_conductor_group("rack-1.a_b"));
        assert!(!is_valid_conductor_group("rack 1"));
    }
}
