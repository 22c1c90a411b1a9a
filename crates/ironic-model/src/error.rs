//! The one domain error. The variant is the kind (what HTTP status and RPC error code it
//! maps to, only at the edge: `ironic-api`'s `status_of`, `ironic-rpc`'s `error_to_pb`);
//! its text is the message a client may see. An internal failure also keeps its cause
//! ([`InternalError::source`]) for the log: it is never shown, never sent over the bus,
//! and logged once, with [`chain`], where the error is handled.

use std::sync::Arc;

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
    /// A bug or an infrastructure failure (500): the context and its cause are logged,
    /// never shown.
    #[error(transparent)]
    Internal(InternalError),
}

/// A document that does not match its JSON schema, in the words of upstream's validator
/// (Python `jsonschema`: "'x' is a required property"), which a client sees as they are.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SchemaError(pub String);

impl From<&str> for SchemaError {
    fn from(s: &str) -> Self {
        SchemaError(s.to_string())
    }
}

/// The request's fault (400), its message as it is.
impl From<SchemaError> for Error {
    fn from(e: SchemaError) -> Self {
        Error::Invalid(e.0)
    }
}

/// `Err(schema!("{x} is not of type 'object'"))`: a [`SchemaError`] from a format.
#[macro_export]
macro_rules! schema {
    ($($arg:tt)*) => {
        $crate::error::SchemaError(format!($($arg)*))
    };
}

/// The cause of an internal error, shared so that [`Error`] stays `Clone`.
pub type Source = Arc<dyn std::error::Error + Send + Sync + 'static>;

/// What an internal failure was doing (`context`, displayed) and what caused it (the
/// `source`, not displayed: a chain printed with [`chain`] shows each link once).
/// Two are equal when their contexts are.
#[derive(Debug, Clone)]
pub struct InternalError {
    context: String,
    source: Option<Source>,
}

impl InternalError {
    /// What failed, as the log and the RPC reply say it.
    pub fn context(&self) -> &str {
        &self.context
    }
}

impl std::fmt::Display for InternalError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.context)
    }
}

impl std::error::Error for InternalError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|s| s as &(dyn std::error::Error + 'static))
    }
}

impl PartialEq for InternalError {
    fn eq(&self, other: &Self) -> bool {
        self.context == other.context
    }
}

impl Eq for InternalError {}

/// An error and its causes, outermost first, joined by ": ": what a log line says of a
/// failure that is handled (and not passed on).
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        let text = cause.to_string();
        // A cause whose text its wrapper already quotes (omicron's "pitfall 2") is said
        // once.
        if !out.ends_with(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        next = cause.source();
    }
    out
}

impl Error {
    /// A 500 without a cause worth keeping (a broken invariant): `context` is logged.
    pub fn internal(context: impl Into<String>) -> Self {
        Error::Internal(InternalError {
            context: context.into(),
            source: None,
        })
    }
    /// A 500 caused by `source`: `context` says what was being done, without repeating
    /// the source's text; the log gets both ([`chain`]).
    pub fn internal_from(
        context: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Error::Internal(InternalError {
            context: context.into(),
            source: Some(Arc::new(source)),
        })
    }
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
            | Error::Unavailable(m) => m,
            Error::Internal(i) => &i.context,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("connection reset")]
    struct Reset;

    #[derive(Debug, thiserror::Error)]
    #[error("reading the node")]
    struct Reading(#[source] Reset);

    #[test]
    fn an_internal_error_shows_its_context_and_logs_its_chain() {
        let e = Error::internal_from("database error while saving a node", Reading(Reset));
        assert_eq!(e.to_string(), "database error while saving a node");
        assert_eq!(e.message(), "database error while saving a node");
        assert_eq!(
            chain(&e),
            "database error while saving a node: reading the node: connection reset"
        );
        let copy = e.clone();
        assert_eq!(copy, Error::internal("database error while saving a node"));
        assert_ne!(copy, Error::internal("something else"));
        assert!(std::error::Error::source(&Error::internal("no cause")).is_none());
        assert_eq!(chain(&Error::internal("no cause")), "no cause");
    }

    #[test]
    fn a_cause_quoted_by_its_wrapper_is_said_once() {
        #[derive(Debug, thiserror::Error)]
        #[error("cannot listen: connection reset")]
        struct Quoting(#[source] Reset);
        assert_eq!(chain(&Quoting(Reset)), "cannot listen: connection reset");
    }
}
