//! A Redfish client for one BMC: JSON in and out, HTTP basic authentication, bounded
//! timeouts, and retries of connection errors and 5xx answers. Every request goes to
//! the origin of the node's `redfish_address` and under `/redfish/v1/`
//! ([`crate::outbound`]): a system id or an `@odata.id` from the BMC's answers cannot
//! send the credentials elsewhere. Errors name the BMC and the call.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::Value;

use crate::outbound::Origin;

/// The largest answer read from a BMC.
const MAX_BODY: usize = 16 << 20;

/// Every request goes under this prefix of the BMC.
pub const PREFIX: &str = "/redfish/v1/";

pub type Http = HttpClient<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// How hard to try one BMC (`[redfish]` options).
#[derive(Debug, Clone)]
pub struct Settings {
    /// One HTTP request's limit.
    pub request_timeout: Duration,
    /// Attempts of a call that fails to connect or is answered 5xx
    /// (`[redfish] connection_attempts`).
    pub attempts: u32,
    /// The pause between them (`[redfish] connection_retry_interval`).
    pub retry_interval: Duration,
    /// How long a power change may take to show (`[redfish] power_state_change_timeout`).
    pub power_state_change_timeout: Duration,
    /// The pause between reads of the power state while waiting.
    pub power_poll_interval: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            request_timeout: Duration::from_secs(30),
            attempts: 5,
            retry_interval: Duration::from_secs(4),
            power_state_change_timeout: Duration::from_secs(60),
            power_poll_interval: Duration::from_secs(1),
        }
    }
}

/// What went wrong talking to a BMC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RfError {
    /// Connection refused, timeout, TLS.
    Unreachable(String),
    /// An error answer: the call, the status and the BMC's message.
    Http {
        call: String,
        status: u16,
        message: String,
    },
    /// An answer we cannot read.
    Garbage(String),
    /// A path outside `/redfish/v1/` of the BMC: refused before anything was sent.
    Refused(String),
}

impl std::fmt::Display for RfError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RfError::Unreachable(m) => write!(f, "Redfish BMC unreachable: {m}"),
            RfError::Http {
                call,
                status,
                message,
            } => write!(f, "Redfish BMC answered {call} with {status}: {message}"),
            RfError::Garbage(m) => write!(f, "Redfish BMC answered something unreadable: {m}"),
            RfError::Refused(m) => write!(f, "Redfish request refused: {m}"),
        }
    }
}

impl std::error::Error for RfError {}

impl RfError {
    pub fn status(&self) -> Option<u16> {
        match self {
            RfError::Http { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// Redfish's error message (`error.@Message.ExtendedInfo[0].Message`, else
/// `error.message`), or the start of the body.
fn message_of(body: &Value, raw: &[u8]) -> String {
    let e = body.get("error");
    e.and_then(|e| e.get("@Message.ExtendedInfo"))
        .and_then(Value::as_array)
        .and_then(|a| a.first())
        .and_then(|i| i.get("Message"))
        .and_then(Value::as_str)
        .or_else(|| e.and_then(|e| e.get("message")).and_then(Value::as_str))
        .map(str::to_owned)
        .unwrap_or_else(|| String::from_utf8_lossy(&raw[..raw.len().min(200)]).into_owned())
}

/// One BMC: where, who, and the HTTP client to use (shared per TLS setting).
pub struct Bmc<'a> {
    pub origin: Origin,
    pub username: Option<&'a str>,
    pub password: Option<&'a str>,
    pub http: &'a Http,
    pub settings: &'a Settings,
}

impl Bmc<'_> {
    fn url(&self, path: &str) -> Result<String, RfError> {
        self.origin
            .url(path, PREFIX)
            .map_err(|e| RfError::Refused(e.to_string()))
    }

    /// One request, no retry: the status and the JSON body (null when empty).
    async fn once(
        &self,
        method: &str,
        url: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(u16, Value, Vec<u8>), RfError> {
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(url)
            .header("accept", "application/json")
            .header("odata-version", "4.0");
        if body.is_some() {
            req = req.header("content-type", "application/json");
        }
        if let Some(user) = self.username {
            use base64::Engine as _;
            let token = base64::engine::general_purpose::STANDARD
                .encode(format!("{user}:{}", self.password.unwrap_or("")));
            req = req.header("authorization", format!("Basic {token}"));
        }
        let bytes = body.map(|b| Bytes::from(b.to_string())).unwrap_or_default();
        let req = req
            .body(Full::new(bytes))
            .map_err(|e| RfError::Refused(format!("{method} {path}: {e}")))?;
        let base = self.origin.base();
        let fut = async {
            let r = self.http.request(req).await.map_err(|e| {
                RfError::Unreachable(format!("{base} ({})", crate::tls::error_chain(&e)))
            })?;
            let status = r.status().as_u16();
            // A BMC's answer is small; a bigger one is refused, not buffered.
            let raw = http_body_util::Limited::new(r.into_body(), MAX_BODY)
                .collect()
                .await
                .map_err(|e| RfError::Garbage(format!("{base}: {method} {path}: {e}")))?
                .to_bytes()
                .to_vec();
            let json = if raw.iter().all(u8::is_ascii_whitespace) {
                Value::Null
            } else {
                match serde_json::from_slice(&raw) {
                    Ok(v) => v,
                    // An error page need not be JSON; a success must be.
                    Err(_) if status >= 400 => Value::Null,
                    Err(_) => {
                        return Err(RfError::Garbage(format!(
                            "{base}: {method} {path}: status {status}, not JSON"
                        )));
                    }
                }
            };
            Ok((status, json, raw))
        };
        let r = tokio::time::timeout(self.settings.request_timeout, fut)
            .await
            .map_err(|_| {
                RfError::Unreachable(format!(
                    "{base} did not answer {method} {path} within {:?}",
                    self.settings.request_timeout
                ))
            })
            .and_then(|r| r);
        let outcome = match &r {
            Ok((s, _, _)) => format!("{}xx", s / 100),
            Err(_) => "error".to_string(),
        };
        metrics::counter!("ironic_redfish_requests_total", "method" => method.to_string(), "outcome" => outcome)
            .increment(1);
        r
    }

    /// A call, retried `attempts` times in all when the BMC cannot be reached or
    /// answers 5xx (a POST, which may have been applied, only when it could not
    /// connect); an answer of 400 or more is an error naming the BMC and the call.
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, RfError> {
        // Refused before anything is sent.
        let url = self.url(path)?;
        let attempts = self.settings.attempts.max(1);
        let mut last = None;
        for n in 1..=attempts {
            match self.once(method, &url, path, body).await {
                Ok((status, json, raw)) if status >= 400 => {
                    let e = RfError::Http {
                        call: format!("{method} {path} at {}", self.origin.base()),
                        status,
                        message: message_of(&json, &raw),
                    };
                    // A POST (a reset, an insertion) may have been applied: not repeated.
                    if status < 500 || method == "POST" {
                        return Err(e);
                    }
                    last = Some(e);
                }
                Ok((_, json, _)) => return Ok(json),
                // A POST is repeated only when it never reached the BMC.
                Err(RfError::Unreachable(m)) if method == "POST" && !m.contains("Connect") => {
                    return Err(RfError::Unreachable(m));
                }
                Err(e @ RfError::Unreachable(_)) => last = Some(e),
                Err(e) => return Err(e),
            }
            if n < attempts {
                tracing::debug!(bmc = %self.origin.base(), %method, %path, attempt = n, "Redfish call failed; retrying");
                tokio::time::sleep(self.settings.retry_interval).await;
            }
        }
        Err(last.unwrap_or_else(|| RfError::Unreachable(self.origin.base())))
    }

    pub async fn get(&self, path: &str) -> Result<Value, RfError> {
        self.call("GET", path, None).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_bmc_message_is_redfish_extended_info_first() {
        let body = json!({"error": {"code": "Base.1.0.GeneralError", "message": "general",
            "@Message.ExtendedInfo": [{"Message": "The action ComputerSystem.Reset is not supported"}]}});
        assert_eq!(
            message_of(&body, b""),
            "The action ComputerSystem.Reset is not supported"
        );
        assert_eq!(
            message_of(&json!({"error": {"message": "nope"}}), b""),
            "nope"
        );
        assert_eq!(
            message_of(&Value::Null, b"<html>oops</html>"),
            "<html>oops</html>"
        );
    }
}
