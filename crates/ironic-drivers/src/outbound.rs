//! Where the drivers' HTTP clients may send requests. The scheme, host and port come
//! only from the configured address ([`Origin`]: `[oneview] manager_url`, later a
//! node's BMC address); every path, whether it comes from a node's `driver_info` (which
//! anyone allowed to PATCH a node can set) or from the device's own answers (a task's
//! `Location`), is accepted only as an absolute path under the driver's prefix
//! ([`Origin::url`]). A value such as `@other.host/rest/x`, `//other.host/rest/x`,
//! `https://other.host/rest/x` or `/rest/../login` is refused before anything is sent,
//! so a session token or BMC password never travels to a host the operator did not
//! configure.
//!
//! Written by hand rather than with a URL crate's `join`, which would happily follow an
//! absolute or scheme-relative reference: here the point is to refuse them.

/// A refused path: what was wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path:?} is not a path on {origin} under {prefix}: {why}")]
pub struct UnsafePath {
    pub path: String,
    pub origin: String,
    pub prefix: String,
    pub why: &'static str,
}

/// A refused address ([`Origin::parse`]): what was wrong with it. The text is what
/// the driver's validation message says after the setting's name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidAddress {
    #[error("the address is empty")]
    Empty,
    #[error("{address:?}: unknown scheme {scheme:?}")]
    UnknownScheme { address: String, scheme: String },
    #[error("{address:?} has no host")]
    NoHost { address: String },
    #[error(
        "{address:?} carries user information (`user@`); give credentials in their own settings"
    )]
    UserInformation { address: String },
    #[error("{address:?}: the host contains invalid characters")]
    InvalidCharacters { address: String },
    #[error("{address:?} is not a valid host[:port]")]
    NotHostPort { address: String },
}

/// `scheme://host[:port]` of the one device a client talks to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    scheme: String,
    authority: String,
}

impl Origin {
    /// From a configured address: `host[:port]` (scheme `default_scheme`) or
    /// `http[s]://host[:port][/ignored path]`. No user information (`user@`): credentials
    /// go in headers, never in the address.
    pub fn parse(address: &str, default_scheme: &str) -> Result<Origin, InvalidAddress> {
        let address = address.trim();
        if address.is_empty() {
            return Err(InvalidAddress::Empty);
        }
        let owned = || address.to_string();
        let (scheme, rest) = match address.split_once("://") {
            Some((s, r)) => (s.to_ascii_lowercase(), r),
            None => (default_scheme.to_string(), address),
        };
        if !matches!(scheme.as_str(), "http" | "https") {
            return Err(InvalidAddress::UnknownScheme {
                address: owned(),
                scheme,
            });
        }
        let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
        if authority.is_empty() {
            return Err(InvalidAddress::NoHost { address: owned() });
        }
        if authority.contains('@') {
            return Err(InvalidAddress::UserInformation { address: owned() });
        }
        if authority
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '\\')
        {
            return Err(InvalidAddress::InvalidCharacters { address: owned() });
        }
        let origin = Origin {
            scheme,
            authority: authority.to_string(),
        };
        // The host must survive parsing unchanged (IPv6 in brackets) and a port, when
        // given, is a number (the URI parser leaves it unchecked).
        let port_ok = port_is_valid(&origin.authority);
        match origin.base().parse::<hyper::Uri>() {
            Ok(u)
                if port_ok
                    && u.authority().map(|a| a.as_str()) == Some(origin.authority.as_str()) =>
            {
                Ok(origin)
            }
            _ => Err(InvalidAddress::NotHostPort { address: owned() }),
        }
    }

    /// `scheme://authority`.
    pub fn base(&self) -> String {
        format!("{}://{}", self.scheme, self.authority)
    }

    /// The host, without port or IPv6 brackets.
    pub fn host(&self) -> String {
        let a = self.authority.as_str();
        if let Some(rest) = a.strip_prefix('[') {
            return rest.split(']').next().unwrap_or("").to_string();
        }
        a.rsplit_once(':').map_or(a, |(h, _)| h).to_string()
    }

    /// The URL of `path` on this origin, if `path` is safe: an absolute path (or an
    /// absolute URL on this very origin, as devices put in `Location`) that starts with
    /// `prefix` (which ends with `/`), without dot segments, backslashes, fragments,
    /// whitespace, control characters or malformed percent escapes.
    pub fn url(&self, path: &str, prefix: &str) -> Result<String, UnsafePath> {
        let refuse = |why| UnsafePath {
            path: path.to_string(),
            origin: self.base(),
            prefix: prefix.to_string(),
            why,
        };
        // An absolute URL is accepted only on this origin, compared exactly.
        let local = match path.split_once("://") {
            Some(_) => path
                .strip_prefix(self.base().as_str())
                .filter(|rest| rest.starts_with('/'))
                .ok_or_else(|| refuse("it names another host"))?,
            None => path,
        };
        check_path(local, prefix).map_err(refuse)?;
        let url = format!("{}{local}", self.base());
        // Belt and braces: what an HTTP client will parse goes to this origin.
        match url.parse::<hyper::Uri>() {
            Ok(u)
                if u.scheme_str() == Some(self.scheme.as_str())
                    && u.authority().map(|a| a.as_str()) == Some(self.authority.as_str()) =>
            {
                Ok(url)
            }
            _ => Err(refuse("it does not parse as a path on this host")),
        }
    }
}

/// Whether the port of `authority` (`host`, `host:port`, `[v6]`, `[v6]:port`), if it has
/// one, is a number from 1 to 65535.
fn port_is_valid(authority: &str) -> bool {
    let after_host = match authority.rfind(']') {
        Some(i) => &authority[i + 1..],
        None => authority,
    };
    match after_host.rsplit_once(':') {
        None => true,
        Some((_, port)) => port.parse::<u16>().is_ok_and(|p| p > 0),
    }
}

/// Why `path` is not a safe absolute path under `prefix` (see [`Origin::url`]), if it
/// is not. For values checked before any origin is at hand (a node's `driver_info`).
pub fn check_path(path: &str, prefix: &str) -> Result<(), &'static str> {
    if !path.starts_with('/') {
        return Err("it does not start with /");
    }
    if path.starts_with("//") {
        return Err("it starts with // (another host)");
    }
    if !path.starts_with(prefix) {
        return Err("it is outside the allowed prefix");
    }
    if path
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || !c.is_ascii())
    {
        return Err("it contains whitespace, control or non-ASCII characters");
    }
    if path.contains(['\\', '#']) {
        return Err("it contains a backslash or a fragment");
    }
    let bytes = path.as_bytes();
    for (i, b) in bytes.iter().enumerate() {
        if *b == b'%'
            && !(bytes.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                && bytes.get(i + 2).is_some_and(u8::is_ascii_hexdigit))
        {
            return Err("it contains a malformed percent escape");
        }
    }
    let path_part = path.split('?').next().unwrap_or("");
    let decoded_dots = path_part.to_ascii_lowercase().replace("%2e", ".");
    if decoded_dots
        .split('/')
        .any(|segment| segment == "." || segment == "..")
    {
        return Err("it contains a dot segment (. or ..)");
    }
    Ok(())
}

/// A URL as messages and logs show it (the model's, which the inspection rules' `api-call`
/// shares).
pub use ironic_model::secrets::shown_url;

#[cfg(test)]
mod tests {
    use super::*;

    fn appliance() -> Origin {
        Origin::parse("https://ov.example:8443/ignored", "https").unwrap()
    }

    #[test]
    fn origins() {
        assert_eq!(appliance().base(), "https://ov.example:8443");
        assert_eq!(
            Origin::parse("10.0.0.1", "https").unwrap().base(),
            "https://10.0.0.1"
        );
        assert_eq!(
            Origin::parse("HTTP://[::1]:8080", "https").unwrap().base(),
            "http://[::1]:8080"
        );
        for bad in [
            "",
            "ftp://x",
            "http://",
            "https://user:pw@host",
            "https://host:port",
            "https://host:0",
            "https://host:65536",
            "https://host:",
            "https://[::1]:x",
            "https://ho st",
            "https://host\\evil",
        ] {
            assert!(Origin::parse(bad, "https").is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn safe_paths_resolve_on_the_origin() {
        let o = appliance();
        for (path, url) in [
            (
                "/rest/server-hardware/abc",
                "https://ov.example:8443/rest/server-hardware/abc",
            ),
            (
                "/rest/server-profiles?filter=%22name%3Dx%22",
                "https://ov.example:8443/rest/server-profiles?filter=%22name%3Dx%22",
            ),
            (
                "https://ov.example:8443/rest/tasks/1",
                "https://ov.example:8443/rest/tasks/1",
            ),
            ("/rest/a..b/c", "https://ov.example:8443/rest/a..b/c"),
        ] {
            assert_eq!(o.url(path, "/rest/").unwrap(), url, "{path}");
        }
    }

    /// The values that would send the session (or a BMC password) elsewhere, or
    /// outside the API the driver may use.
    #[test]
    fn hostile_paths_are_refused() {
        let o = appliance();
        for hostile in [
            "@other.host/rest/x",
            "//other.host/rest/x",
            "https://other.host/rest/x",
            "https://ov.example:8443@other.host/rest/x",
            "https://ov.example:84430/rest/x",
            "http://ov.example:8443/rest/x",
            "rest/x",
            "",
            "/other/x",
            "/rest/../login-sessions",
            "/rest/%2e%2e/x",
            "/rest/%2E./x",
            "/rest/./x",
            "/rest/x/..",
            "/rest\\..\\x",
            "/rest/x#frag",
            "/rest/x y",
            "/rest/x\r\nHost: other",
            "/rest/x%zz",
            "/rest/x%4",
            "/rest/é",
            ":8443@other.host/rest/x",
        ] {
            let r = o.url(hostile, "/rest/");
            assert!(r.is_err(), "{hostile:?} accepted: {r:?}");
        }
        let e = o.url("@other.host/rest/x", "/rest/").unwrap_err();
        assert_eq!(
            e.to_string(),
            "\"@other.host/rest/x\" is not a path on https://ov.example:8443 under /rest/: it does not start with /"
        );
    }
}
