//! Errors at the HTTP edge, in Ironic's body format (reference §3): every error body is
//! `{"error_message": "<JSON text>"}`, where the text is `{faultcode, faultstring,
//! debuginfo}` for handler errors and `{code, title, description}` for routing errors.
//! The status policy is written down in `docs/api.md`.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use ironic_model::{Error, secrets};

/// Marks a response that must not carry the microversion headers (routing errors).
#[derive(Debug, Clone, Copy)]
pub struct NoVersionHeaders;

#[derive(Debug)]
pub enum ApiError {
    /// A domain error from a handler or a conductor.
    Domain(Error),
    /// An error of the routing layer (unknown path, method, version gate).
    Routing {
        status: StatusCode,
        description: String,
        version_headers: bool,
    },
    /// Missing or wrong credentials.
    Unauthorized(String),
    /// A body over the configured limit.
    TooLarge(usize),
    /// A body holding more JSON values than the route allows (413).
    TooManyValues(usize),
    /// Too many large bodies being read at once (503); retry after.
    LargeBodiesBusy,
    /// A body not received within `[api] body_read_timeout` (408).
    BodyTimeout(std::time::Duration),
    /// Too many ramdisk requests from one client address (429); retry after.
    TooManyRequests(std::time::Duration),
    /// Too many failed logins for the user or the client address (429); retry after.
    TooManyLogins(std::time::Duration),
    /// A method the negotiated microversion does not allow (405, handler body).
    MethodNotAllowed(String),
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        ApiError::Domain(e)
    }
}

impl ApiError {
    pub fn invalid(msg: impl Into<String>) -> Self {
        ApiError::Domain(Error::Invalid(msg.into()))
    }
    pub fn routing(status: StatusCode, description: impl Into<String>) -> Self {
        ApiError::Routing {
            status,
            description: description.into(),
            version_headers: false,
        }
    }
}

/// A route newer than the request (`minor` is the microversion that added it): the
/// routing layer's 404, as upstream answers it.
pub(crate) fn route_since(v: ironic_model::Version, minor: u16) -> Result<(), ApiError> {
    if v.at_least(minor) {
        Ok(())
    } else {
        Err(ApiError::routing(StatusCode::NOT_FOUND, ""))
    }
}

pub fn status_of(e: &Error) -> StatusCode {
    match e {
        Error::NotFound(_) => StatusCode::NOT_FOUND,
        Error::Invalid(_) => StatusCode::BAD_REQUEST,
        Error::NotAcceptable(_) => StatusCode::NOT_ACCEPTABLE,
        Error::Conflict(_) | Error::Locked(_) | Error::InvalidState(_) => StatusCode::CONFLICT,
        Error::Forbidden(_) => StatusCode::FORBIDDEN,
        Error::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        Error::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// `{"faultcode": ..., "faultstring": ..., "debuginfo": null}` as Python's json.dumps
/// writes it.
fn fault_text(status: StatusCode, message: &str) -> String {
    let code = if status.is_server_error() {
        "Server"
    } else {
        "Client"
    };
    let msg = serde_json::to_string(message).unwrap_or_else(|_| "\"\"".into());
    format!("{{\"faultcode\": \"{code}\", \"faultstring\": {msg}, \"debuginfo\": null}}")
}

/// Upstream's routing-layer body (`code`, `title`, `description`), with a
/// `faultstring` too, so that clients which print the faultstring (the
/// `openstack baremetal` CLI) show a message instead of the raw body.
fn routing_text(status: StatusCode, description: &str) -> String {
    let d = serde_json::to_string(description).unwrap_or_else(|_| "\"\"".into());
    let title = status.canonical_reason().unwrap_or("Error");
    let fault = match (description, status) {
        ("", StatusCode::NOT_FOUND) => "The resource could not be found.",
        ("", StatusCode::METHOD_NOT_ALLOWED) => "The method is not allowed for this resource.",
        ("", _) => title,
        (d, _) => d,
    };
    let f = serde_json::to_string(fault).unwrap_or_else(|_| "\"\"".into());
    let code = if status.is_server_error() {
        "Server"
    } else {
        "Client"
    };
    format!(
        "{{\"code\": {}, \"title\": \"{title}\", \"description\": {d}, \"faultcode\": \"{code}\", \"faultstring\": {f}, \"debuginfo\": null}}",
        status.as_u16()
    )
}

/// 429 with `Retry-After`: `message` names the seconds to wait where it says `{}`.
fn retry_later(wait: std::time::Duration, message: &str) -> Response {
    let secs = wait.as_secs().max(1);
    let mut r = error_response(
        StatusCode::TOO_MANY_REQUESTS,
        fault_text(
            StatusCode::TOO_MANY_REQUESTS,
            &message.replace("{}", &secs.to_string()),
        ),
    );
    if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
        r.headers_mut().insert(header::RETRY_AFTER, v);
    }
    r
}

/// Builds the `{"error_message": ...}` response.
pub fn error_response(status: StatusCode, inner: String) -> Response {
    let body = serde_json::json!({ "error_message": inner }).to_string();
    let mut resp = (status, body).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        match self {
            ApiError::Domain(e) => {
                let status = status_of(&e);
                // A message may quote what the client sent, or a driver's answer:
                // secrets are masked in what is shown and logged, and control characters
                // escaped in the log.
                let shown = match &e {
                    Error::Internal(_) => {
                        "An internal error occurred; the server log has the details.".to_string()
                    }
                    // Cut: a message may echo a body of a megabyte.
                    other => secrets::stored_text(other.message()),
                };
                if let Error::Internal(_) = &e {
                    // The one log line of the failure, with its causes; the client sees
                    // none of it.
                    tracing::error!(
                        status = status.as_u16(),
                        error = %secrets::log_safe(&ironic_model::error::chain(&e)),
                        "internal error"
                    );
                } else if status.is_client_error() {
                    tracing::info!(
                        status = status.as_u16(),
                        "{}",
                        secrets::log_safe(e.message())
                    );
                }
                error_response(status, fault_text(status, &shown))
            }
            ApiError::Routing {
                status,
                description,
                version_headers,
            } => {
                let mut r = error_response(status, routing_text(status, &description));
                if !version_headers {
                    r.extensions_mut().insert(NoVersionHeaders);
                }
                r
            }
            ApiError::Unauthorized(msg) => {
                let mut r = error_response(
                    StatusCode::UNAUTHORIZED,
                    fault_text(StatusCode::UNAUTHORIZED, &msg),
                );
                r.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Basic realm=\"Baremetal API\""),
                );
                r
            }
            ApiError::MethodNotAllowed(msg) => error_response(
                StatusCode::METHOD_NOT_ALLOWED,
                fault_text(StatusCode::METHOD_NOT_ALLOWED, &msg),
            ),
            ApiError::TooManyLogins(wait) => {
                retry_later(wait, "Too many failed logins; retry in {} seconds.")
            }
            ApiError::BodyTimeout(t) => error_response(
                StatusCode::REQUEST_TIMEOUT,
                fault_text(
                    StatusCode::REQUEST_TIMEOUT,
                    &format!(
                        "The request body was not received within {} seconds.",
                        t.as_secs()
                    ),
                ),
            ),
            ApiError::TooManyRequests(wait) => retry_later(
                wait,
                "Too many requests from this address; retry in {} seconds.",
            ),
            ApiError::TooLarge(limit) => error_response(
                StatusCode::PAYLOAD_TOO_LARGE,
                fault_text(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    &format!("Request body is larger than the limit of {limit} bytes."),
                ),
            ),
            ApiError::TooManyValues(limit) => error_response(
                StatusCode::PAYLOAD_TOO_LARGE,
                fault_text(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    &format!(
                        "Request body holds more than {limit} JSON values ([api] max_json_values)."
                    ),
                ),
            ),
            ApiError::LargeBodiesBusy => {
                let mut r = error_response(
                    StatusCode::SERVICE_UNAVAILABLE,
                    fault_text(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "Too many large request bodies are being received; retry shortly ([api] large_bodies_at_once).",
                    ),
                );
                r.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("2"));
                r
            }
        }
    }
}
