//! The one domain error. Each variant carries the message a user sees; the API maps the
//! variant to an HTTP status (see `docs/api.md`, "Status codes") only at the edge.

/// Result with the domain error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A resource does not exist (404).
    #[error("{0}")]
    NotFound(String),
    /// The request is malformed or a value is invalid (400).
    #[error("{0}")]
    Invalid(String),
    /// A field, filter or verb needs a newer microversion (406).
    #[error("{0}")]
    NotAcceptable(String),
    /// A uniqueness or association conflict (409).
    #[error("{0}")]
    Conflict(String),
    /// The node is locked by a conductor (409).
    #[error("{0}")]
    Locked(String),
    /// The operation is not allowed in the current state (409).
    #[error("{0}")]
    InvalidState(String),
    /// The operation is forbidden, e.g. on a protected node (403).
    #[error("{0}")]
    Forbidden(String),
    /// No conductor or worker can take the request now (503).
    #[error("{0}")]
    Unavailable(String),
    /// A bug or an infrastructure failure (500). The message is logged, never shown.
    #[error("{0}")]
    Internal(String),
}

impl Error {
    pub fn invalid(msg: impl Into<String>) -> Self {
        Error::Invalid(msg.into())
    }
    pub fn node_not_found(ident: &str) -> Self {
        Error::NotFound(format!("Node {ident} could not be found."))
    }
    pub fn not_acceptable() -> Self {
        Error::NotAcceptable("Request not acceptable.".into())
    }
    /// 406 naming the microversion that would have accepted the request.
    pub fn not_acceptable_below(minor: u16) -> Self {
        Error::NotAcceptable(format!(
            "Request not acceptable. The minimal required API version should be 1.{minor}"
        ))
    }
    pub fn node_locked(uuid: &str, host: &str) -> Self {
        Error::Locked(format!(
            "Node {uuid} is locked by host {host}, please retry after the current operation is completed."
        ))
    }
    /// Upstream's `NoValidHost` (400 at the API): no live conductor serves the driver in
    /// the conductor group.
    pub fn no_valid_host(driver: &str, group: &str) -> Self {
        Error::Invalid(format!(
            "No valid host was found. Reason: No conductor service registered which supports driver {driver} for conductor group \"{group}\". Ensure the driver is valid and enabled."
        ))
    }
    /// The user-facing message.
    pub fn message(&self) -> &str {
        match self {
            Error::NotFound(m)
            | Error::Invalid(m)
            | Error::NotAcceptable(m)
            | Error::Conflict(m)
            | Error::Locked(m)
            | Error::InvalidState(m)
            | Error::Forbidden(m)
            | Error::Unavailable(m)
            | Error::Internal(m) => m,
        }
    }
}
