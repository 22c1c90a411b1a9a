//! API microversions (`1.x`) and the negotiation rules of the reference (§2.2).

use std::fmt;

/// A negotiated API version. Only major version 1 exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    pub minor: u16,
}

impl Version {
    /// The oldest version we serve (1.0, Juno, is not supported).
    pub const MIN: Version = Version { minor: 1 };
    /// The newest version whose node features (fields, filters and node endpoints of
    /// every version up to it) we serve. See `docs/api.md` for what is left out.
    pub const MAX: Version = Version { minor: 115 };

    pub const fn new(minor: u16) -> Self {
        Version { minor }
    }
    /// True when this request version has the feature introduced at `1.<minor>`.
    pub fn at_least(self, minor: u16) -> bool {
        self.minor >= minor
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "1.{}", self.minor)
    }
}

/// Why a requested version cannot be served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VersionError {
    /// Not `<int>.<int>` nor `latest`. Answered 406 without version headers.
    Malformed,
    /// A major version other than 1.
    MajorUnsupported(String),
    /// Minor version outside [MIN, MAX].
    MinorUnsupported(String),
}

impl VersionError {
    pub fn message(&self) -> String {
        let range = format!("[{}, {}]", Version::MIN, Version::MAX);
        match self {
            VersionError::Malformed => {
                "Invalid value for X-OpenStack-Ironic-API-Version header".to_string()
            }
            VersionError::MajorUnsupported(v) => format!(
                "Mutually exclusive versions requested. Version {v} requested but not supported by this service. The supported version range is: {range}."
            ),
            VersionError::MinorUnsupported(v) => format!(
                "Version {v} was requested but the minor version is not supported by this service. The supported version range is: {range}."
            ),
        }
    }
}

/// Negotiates the version from the raw header value (`None`: no header → minimum).
pub fn negotiate(raw: Option<&str>) -> Result<Version, VersionError> {
    let Some(raw) = raw else {
        return Ok(Version::MIN);
    };
    let raw = raw.trim();
    if raw.eq_ignore_ascii_case("latest") {
        return Ok(Version::MAX);
    }
    let (maj, min) = raw.split_once('.').ok_or(VersionError::Malformed)?;
    let all_digits =
        |s: &str| !s.is_empty() && s.len() <= 9 && s.bytes().all(|b| b.is_ascii_digit());
    if !all_digits(maj) || !all_digits(min) {
        return Err(VersionError::Malformed);
    }
    let (maj, min): (u32, u32) = (
        maj.parse().map_err(|_| VersionError::Malformed)?,
        min.parse().map_err(|_| VersionError::Malformed)?,
    );
    let shown = format!("{maj}.{min}");
    if maj != 1 {
        return Err(VersionError::MajorUnsupported(shown));
    }
    if min < u32::from(Version::MIN.minor) || min > u32::from(Version::MAX.minor) {
        return Err(VersionError::MinorUnsupported(shown));
    }
    Ok(Version::new(min as u16))
}

/// Extracts the baremetal version from an `OpenStack-API-Version` header value such as
/// `baremetal 1.61` (several services may be listed, comma separated).
pub fn from_openstack_header(value: &str) -> Option<&str> {
    value.split(',').find_map(|part| {
        let mut it = part.split_whitespace();
        let service = it.next()?;
        let version = it.next()?;
        service.eq_ignore_ascii_case("baremetal").then_some(version)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_follows_the_reference() {
        assert_eq!(negotiate(None), Ok(Version::MIN));
        assert_eq!(negotiate(Some("LATEST")), Ok(Version::MAX));
        assert_eq!(negotiate(Some("1.5")), Ok(Version::new(5)));
        assert_eq!(negotiate(Some("abc")), Err(VersionError::Malformed));
        assert_eq!(negotiate(Some("1.x")), Err(VersionError::Malformed));
        assert_eq!(negotiate(Some("1")), Err(VersionError::Malformed));
        assert_eq!(negotiate(Some("1.2.3")), Err(VersionError::Malformed));
        assert!(matches!(
            negotiate(Some("2.0")),
            Err(VersionError::MajorUnsupported(_))
        ));
        assert!(matches!(
            negotiate(Some("1.0")),
            Err(VersionError::MinorUnsupported(_))
        ));
        assert!(matches!(
            negotiate(Some("1.999")),
            Err(VersionError::MinorUnsupported(_))
        ));
        assert_eq!(
            from_openstack_header("compute 2.1, baremetal 1.7"),
            Some("1.7")
        );
        assert_eq!(from_openstack_header("compute 2.1"), None);
    }
}
