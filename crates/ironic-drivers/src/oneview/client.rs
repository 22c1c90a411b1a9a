//! A OneView REST client: one session reused across calls (logged in on first use,
//! again once on 401), JSON in and out, and bounded waits for asynchronous tasks.
//! Every failure is a [`OvError`] whose message says what went wrong in words an
//! operator can act on (appliance down, bad credentials, task error, garbage).

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{Value, json};
use tokio::sync::Mutex;

use crate::outbound::Origin;

/// The API version we speak (Gen B's).
pub const API_VERSION: &str = "300";

/// The largest answer read from the appliance.
const MAX_BODY: usize = 16 << 20;

/// Where and how to reach the appliance (`Debug` shows the password masked).
#[derive(Clone)]
pub struct Settings {
    /// `https://host[:port]` (the default scheme) or `http://host[:port]`.
    pub manager_url: String,
    pub username: String,
    pub password: String,
    /// The longest a task may run before we give up waiting (the task goes on).
    pub task_timeout: Duration,
    /// The first pause between task polls; it doubles up to 1 s.
    pub poll_interval: Duration,
    /// One HTTP request's limit.
    pub request_timeout: Duration,
    /// Retries of a call answered 408 or 409 (`[oneview] max_polling_attempts`).
    pub max_retries: u32,
    /// The pause before such a retry.
    pub retry_pause: Duration,
    /// HTTPS: accept any certificate (`[oneview] allow_insecure_connections`).
    pub allow_insecure: bool,
    /// HTTPS: trust this PEM bundle instead of the built-in web roots
    /// (`[oneview] tls_cacert_file`; ignored, with the insecure option).
    pub ca_file: Option<String>,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("manager_url", &self.manager_url)
            .field("username", &self.username)
            .field("password", &ironic_model::secrets::MASK)
            .field("task_timeout", &self.task_timeout)
            .field("poll_interval", &self.poll_interval)
            .field("request_timeout", &self.request_timeout)
            .field("max_retries", &self.max_retries)
            .field("retry_pause", &self.retry_pause)
            .field("allow_insecure", &self.allow_insecure)
            .field("ca_file", &self.ca_file)
            .finish()
    }
}

/// What went wrong talking to OneView.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OvError {
    /// The appliance cannot be reached (connection refused, timeout, TLS).
    Unreachable(String),
    /// An error answer: HTTP status, OneView's errorCode and message.
    Http {
        status: u16,
        code: String,
        message: String,
    },
    /// A task ended in error.
    Task { code: String, message: String },
    /// The appliance answered something we cannot read.
    Garbage(String),
    /// A setting is wrong (e.g. the manager URL).
    Config(String),
    /// A path that is not under `/rest/` of the configured appliance (from a node's
    /// `driver_info` or an answer): refused before anything was sent.
    Refused(String),
}

impl std::fmt::Display for OvError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OvError::Unreachable(m) => write!(f, "OneView appliance unreachable: {m}"),
            OvError::Http {
                status,
                code,
                message,
            } => {
                write!(f, "OneView answered {status} {code}: {message}")
            }
            OvError::Task { code, message } => write!(f, "OneView task failed ({code}): {message}"),
            OvError::Garbage(m) => write!(f, "OneView answered something unreadable: {m}"),
            OvError::Config(m) => write!(f, "OneView configuration error: {m}"),
            OvError::Refused(m) => write!(f, "OneView request refused: {m}"),
        }
    }
}

impl std::error::Error for OvError {}

impl OvError {
    pub fn is_not_found(&self) -> bool {
        matches!(self, OvError::Http { status: 404, .. })
    }
}

/// A reply: status, `Location`, JSON body.
struct Reply {
    status: u16,
    location: Option<String>,
    body: Value,
}

pub struct Client {
    origin: Origin,
    settings: Settings,
    http: HttpClient<HttpsConnector<HttpConnector>, Full<Bytes>>,
    session: Mutex<Option<String>>,
}

/// The appliance's origin from `[oneview] manager_url`: `host[:port]` with an optional
/// scheme (HTTPS by default) and path (ignored).
fn origin(manager_url: &str) -> Result<Origin, OvError> {
    if manager_url.trim().is_empty() {
        return Err(OvError::Config("[oneview] manager_url is not set".into()));
    }
    Origin::parse(manager_url, "https").map_err(|e| OvError::Config(format!("manager_url {e}")))
}

/// Every request goes under this prefix of the appliance (see [`crate::outbound`]).
const REST: &str = "/rest/";

/// TLS for an `https://` appliance: the web roots, a CA bundle, or no verification.
fn tls_config(s: &Settings) -> Result<rustls::ClientConfig, OvError> {
    let ca = if s.allow_insecure {
        None
    } else {
        s.ca_file.as_deref()
    };
    crate::tls::client_config(s.allow_insecure, ca).map_err(|e| {
        OvError::Config(match e.ca_file() {
            Some(_) => format!("tls_cacert_file {e}"),
            None => e.to_string(),
        })
    })
}

fn error_from(status: u16, body: &Value) -> OvError {
    OvError::Http {
        status,
        code: body
            .get("errorCode")
            .and_then(Value::as_str)
            .unwrap_or("UNKNOWN")
            .to_string(),
        message: body
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("no message")
            .to_string(),
    }
}

impl Client {
    pub fn new(settings: Settings) -> Result<Client, OvError> {
        let origin = origin(&settings.manager_url)?;
        let http = crate::tls::https_client(tls_config(&settings)?, Some(settings.request_timeout));
        Ok(Client {
            origin,
            http,
            settings,
            session: Mutex::new(None),
        })
    }

    /// The URL of `path` on the appliance; only a path under `/rest/` is accepted.
    fn url(&self, path: &str) -> Result<String, OvError> {
        self.origin
            .url(path, REST)
            .map_err(|e| OvError::Refused(e.to_string()))
    }

    async fn raw(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        session: Option<&str>,
    ) -> Result<Reply, OvError> {
        // Only a path under /rest/ of the configured appliance: the path may come from a
        // node's driver_info or from the appliance's answers.
        let url = self.url(path)?;
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(url)
            .header("accept", "application/json")
            .header("content-type", "application/json")
            .header("x-api-version", API_VERSION);
        if let Some(s) = session {
            req = req.header("auth", s);
        }
        let bytes = body.map(|b| Bytes::from(b.to_string())).unwrap_or_default();
        let req = req
            .body(Full::new(bytes))
            .map_err(|e| OvError::Config(format!("bad request to {path}: {e}")))?;
        let fut = async {
            let r = self.http.request(req).await.map_err(|e| {
                OvError::Unreachable(format!(
                    "{} ({})",
                    self.origin.base(),
                    crate::tls::error_chain(&e)
                ))
            })?;
            let status = r.status().as_u16();
            let location = r
                .headers()
                .get("location")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            // An appliance's answer is small; a bigger one is refused, not buffered (a
            // hostile appliance, or a man in the middle, cannot exhaust our memory).
            let bytes = http_body_util::Limited::new(r.into_body(), MAX_BODY)
                .collect()
                .await
                .map_err(|e| OvError::Unreachable(format!("{} ({e})", self.origin.base())))?
                .to_bytes();
            let body = if bytes.is_empty() {
                Value::Null
            } else {
                serde_json::from_slice(&bytes).map_err(|_| {
                    OvError::Garbage(format!(
                        "{method} {path}: status {status}, not JSON: {:?}",
                        String::from_utf8_lossy(&bytes[..bytes.len().min(120)])
                    ))
                })?
            };
            Ok(Reply {
                status,
                location,
                body,
            })
        };
        let r = tokio::time::timeout(self.settings.request_timeout, fut)
            .await
            .map_err(|_| {
                OvError::Unreachable(format!(
                    "{} did not answer {method} {path} within {:?}",
                    self.origin.base(),
                    self.settings.request_timeout
                ))
            })
            .and_then(|r| r);
        let outcome = match &r {
            Ok(r) => format!("{}xx", r.status / 100),
            Err(_) => "error".to_string(),
        };
        metrics::counter!("ironic_oneview_requests_total", "method" => method.to_string(), "outcome" => outcome)
            .increment(1);
        r
    }

    async fn login(&self) -> Result<String, OvError> {
        let body = json!({"userName": self.settings.username, "password": self.settings.password});
        let r = self
            .raw("POST", "/rest/login-sessions", Some(&body), None)
            .await?;
        if r.status != 200 {
            return Err(error_from(r.status, &r.body));
        }
        r.body
            .get("sessionID")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| OvError::Garbage("login answer without sessionID".into()))
    }

    /// One call with the session, logging in when there is none and once more on 401;
    /// a call the appliance answers 408 or 409 (busy) is retried, `max_retries` times
    /// at most, after `retry_pause`.
    async fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Reply, OvError> {
        // Refused before logging in: nothing at all is sent for a hostile path.
        self.url(path)?;
        let mut busy = 0;
        let mut relogged = false;
        // Bounded: one re-login plus the retries.
        for _ in 0..(self.settings.max_retries + 2) {
            let token = {
                let mut s = self.session.lock().await;
                match &*s {
                    Some(t) => t.clone(),
                    None => {
                        let t = self.login().await?;
                        *s = Some(t.clone());
                        t
                    }
                }
            };
            let r = self.raw(method, path, body, Some(&token)).await?;
            if r.status == 401 && !relogged {
                relogged = true;
                let mut s = self.session.lock().await;
                if s.as_deref() == Some(token.as_str()) {
                    *s = None;
                }
                continue;
            }
            if matches!(r.status, 408 | 409) && busy < self.settings.max_retries {
                busy += 1;
                tokio::time::sleep(self.settings.retry_pause).await;
                continue;
            }
            if r.status >= 300 {
                return Err(error_from(r.status, &r.body));
            }
            return Ok(r);
        }
        Err(OvError::Http {
            status: 401,
            code: "AUTHORIZATION".into(),
            message: "the session was refused right after logging in".into(),
        })
    }

    pub async fn get(&self, path: &str) -> Result<Value, OvError> {
        Ok(self.call("GET", path, None).await?.body)
    }

    /// A call answered by a task (202): waits for the task and returns it.
    pub async fn run(&self, method: &str, path: &str, body: &Value) -> Result<Value, OvError> {
        let r = self.call(method, path, Some(body)).await?;
        if r.status != 202 {
            return Ok(r.body);
        }
        let uri = r
            .location
            .or_else(|| r.body.get("uri").and_then(Value::as_str).map(str::to_owned))
            .ok_or_else(|| OvError::Garbage(format!("{method} {path}: a task without a URI")))?;
        self.wait_task(&uri).await
    }

    /// Polls a task until it ends (bounded by `task_timeout`); `Err` if it failed.
    pub async fn wait_task(&self, uri: &str) -> Result<Value, OvError> {
        let deadline = tokio::time::Instant::now() + self.settings.task_timeout;
        let mut pause = self.settings.poll_interval;
        loop {
            let t = self.get(uri).await?;
            let state = t
                .get("taskState")
                .and_then(Value::as_str)
                .ok_or_else(|| OvError::Garbage(format!("task {uri} without taskState")))?;
            match state {
                "Completed" | "Warning" => return Ok(t),
                "Error" | "Terminated" | "Killed" => {
                    let e = t.get("taskErrors").and_then(|e| e.get(0));
                    let code = e
                        .and_then(|e| e.get("errorCode"))
                        .and_then(Value::as_str)
                        .unwrap_or(state);
                    let message = e
                        .and_then(|e| e.get("message"))
                        .and_then(Value::as_str)
                        .or_else(|| t.get("taskStatus").and_then(Value::as_str))
                        .unwrap_or("no message");
                    return Err(OvError::Task {
                        code: code.to_string(),
                        message: message.to_string(),
                    });
                }
                _ => {}
            }
            if tokio::time::Instant::now() + pause > deadline {
                return Err(OvError::Unreachable(format!(
                    "task {uri} did not end within {:?}",
                    self.settings.task_timeout
                )));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(1));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manager_urls() {
        let base = |u: &str| origin(u).map(|o| o.base());
        assert_eq!(
            base("http://10.0.0.1:8443/x"),
            Ok("http://10.0.0.1:8443".into())
        );
        assert_eq!(
            base("10.0.0.1"),
            Ok("https://10.0.0.1".into()),
            "HTTPS by default"
        );
        for bad in ["", "ftp://x", "http://", "https://admin:pw@ov"] {
            assert!(matches!(base(bad), Err(OvError::Config(_))), "{bad}");
        }
    }
}
