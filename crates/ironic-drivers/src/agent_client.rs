//! A client for ironic-python-agent's (IPA) HTTP command API: the agent's status, the
//! commands it ran, one command's result, and running a command (`POST
//! /v1/commands/`). One small client for one kind of peer, as the drivers' other
//! clients ([`crate::redfish::client`]): it owns the URLs, TLS, timeouts and retries,
//! and callers only name the agent ([`Endpoint`]) and the command.
//!
//! # Trust
//!
//! The agent's auto-TLS certificate is self-signed, EC P-384 and signed with SHA-512,
//! which rustls-webpki cannot verify, so it cannot serve as a trust anchor. The agent
//! sends that certificate in its heartbeat (`agent_verify_ca`), a request authenticated
//! by the agent token, so the client *pins* it: the handshake is accepted only if the
//! certificate the agent presents is byte for byte the one it sent ([`Endpoint::pinned_pem`]),
//! and the handshake's own signature (P-384 with SHA-384, which ring verifies) proves
//! the agent holds its key. That is stronger than CA validation (no other certificate,
//! however well signed, is accepted), so neither the host name nor the validity dates
//! are checked. An `https://` agent without a pinned certificate is refused
//! ([`AgentError::NoCertificate`]) unless the client was given a TLS configuration for
//! that case ([`AgentClient::with_fallback_tls`], e.g. the operator's CA bundle).
//! `http://` agents are spoken to in clear: whether that is allowed (`[agent]
//! require_tls`) is the API's decision when it accepts the heartbeat, not this client's.
//!
//! # The token
//!
//! The agent token travels in the `agent_token` query parameter, as IPA expects. It is
//! never logged (paths are logged without their query) and never put in an error's
//! text: every text that could carry it (the agent's fault strings, transport errors)
//! has it masked.
//!
//! # Retries
//!
//! Failures to connect (refused, unreachable, the connect timeout, the connection closed
//! during the TLS handshake) are retried [`Settings::attempts`] times in all, since
//! nothing reached the agent. A GET is also retried after a timeout or a broken
//! connection, as reading twice is harmless. A POST that may have reached the agent (a
//! timeout or a broken connection after connecting) is *not* repeated: the agent may be
//! running the command, and a second one would be refused as busy at best and run twice
//! at worst; the caller finds out on the next heartbeat. A refused handshake (a
//! certificate other than the pinned one) is not retried either: it would be refused
//! again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use serde_json::Value;

use crate::outbound::Origin;

/// The default of [`Settings::max_answer_bytes`].
const MAX_BODY: usize = 8 << 20;

/// The most HTTP clients kept, one per pinned certificate. A deploy of many nodes
/// reuses each node's client (and its TLS session cache); past this the cache is
/// emptied rather than tracked, since rebuilding a client is cheap and rare.
const MAX_CLIENTS: usize = 1024;

/// How much of a non-JSON error page an error message quotes.
const QUOTE: usize = 200;

type Http = HttpClient<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// What a client is cached under: the DER of each pinned certificate, `None` for no pin
/// (`http://`, or `https://` trusted by the fallback configuration).
type PinKey = Option<Vec<Vec<u8>>>;

/// The lowest TLS version offered to an agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TlsMinVersion {
    /// TLS 1.2 and 1.3.
    #[default]
    Tls12,
    /// TLS 1.3 only (upstream Ironic's default).
    Tls13,
}

/// How hard to try one agent (`[agent]` options).
#[derive(Debug, Clone)]
pub struct Settings {
    /// The limit of one HTTP call, reading the answer included (`[agent]
    /// command_timeout`). A `wait=true` call must finish within it too.
    pub command_timeout: Duration,
    /// The limit of one TCP connect. Kept below `command_timeout` so a connect that
    /// hangs is known to be a connect failure, which even a POST may retry.
    pub connect_timeout: Duration,
    /// Attempts of a call that cannot reach the agent, the first included (`[agent]
    /// max_command_attempts`); at least one is made.
    pub attempts: u32,
    /// The pause between them.
    pub retry_interval: Duration,
    /// The lowest TLS version offered.
    pub tls_min_version: TlsMinVersion,
    /// The largest answer read; a bigger one is refused rather than buffered. IPA
    /// answers an `execute_deploy_step` with the step it ran, arguments included, so
    /// `write_image`'s result carries the config drive: the conductor sizes this from
    /// `[deploy] configdrive_max_bytes`.
    pub max_answer_bytes: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            command_timeout: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(10),
            attempts: 3,
            retry_interval: Duration::from_secs(2),
            tls_min_version: TlsMinVersion::Tls12,
            max_answer_bytes: MAX_BODY,
        }
    }
}

/// One agent: where it listens and how it is trusted, as its last heartbeat said.
#[derive(Clone, Copy)]
pub struct Endpoint<'a> {
    /// The callback URL (`agent_url`), `http[s]://host:port`. Only the scheme, host and
    /// port are used: the API's paths are this client's.
    pub url: &'a str,
    /// The agent token (`agent_secret_token`).
    pub token: &'a str,
    /// The agent's certificate (`agent_verify_ca`), PEM, for `https://` URLs: the
    /// only certificate accepted. Several certificates in the PEM are each accepted.
    pub pinned_pem: Option<&'a str>,
}

impl std::fmt::Debug for Endpoint<'_> {
    /// Without the token.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("url", &self.url)
            .field("pinned", &self.pinned_pem.is_some())
            .finish()
    }
}

/// What `GET /v1/status` says.
#[derive(Debug, Clone, PartialEq)]
pub struct Status {
    /// When the agent started, seconds since the epoch.
    pub started_at: f64,
    /// The agent's version (`13.0.0`).
    pub version: String,
}

/// A command's state (`command_status`). Unknown values are kept, so a newer agent does
/// not break the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandStatus {
    Running,
    Succeeded,
    Failed,
    /// The agent's steps differ from those the conductor planned with (cleaning).
    CleanVersionMismatch,
    Other(String),
}

impl CommandStatus {
    pub fn parse(s: &str) -> CommandStatus {
        match s {
            "RUNNING" => CommandStatus::Running,
            "SUCCEEDED" => CommandStatus::Succeeded,
            "FAILED" => CommandStatus::Failed,
            "CLEAN_VERSION_MISMATCH" => CommandStatus::CleanVersionMismatch,
            other => CommandStatus::Other(other.to_string()),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            CommandStatus::Running => "RUNNING",
            CommandStatus::Succeeded => "SUCCEEDED",
            CommandStatus::Failed => "FAILED",
            CommandStatus::CleanVersionMismatch => "CLEAN_VERSION_MISMATCH",
            CommandStatus::Other(s) => s,
        }
    }
}

/// One command as the agent reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct CommandResult {
    /// The agent's id of the command (a UUID).
    pub id: String,
    /// `<extension>.<command>`.
    pub name: String,
    pub status: CommandStatus,
    /// `command_error`: an object with `type`, `code`, `message`, `details`, or none.
    pub error: Option<Value>,
    /// `command_result`, or none.
    pub result: Option<Value>,
}

impl CommandResult {
    /// The error's text, if the command failed with one: its `details` (the agent's
    /// specific reason, e.g. the command that was missing) after its `message` (the
    /// kind of failure) unless they repeat each other, else the error as JSON.
    pub fn error_message(&self) -> Option<String> {
        let e = self.error.as_ref()?;
        let text = |k: &str| {
            e.get(k)
                .and_then(Value::as_str)
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        };
        Some(match (e, text("message"), text("details")) {
            (Value::String(s), ..) => s.clone(),
            (_, Some(m), Some(d)) if d.contains(&m) => d,
            (_, Some(m), Some(d)) => format!("{m}: {d}"),
            (_, Some(t), None) | (_, None, Some(t)) => t,
            (_, None, None) => e.to_string(),
        })
    }

    /// From the agent's JSON; `None` if a required field is missing or not a string.
    fn from_json(v: &Value) -> Option<CommandResult> {
        let s = |k: &str| v.get(k).and_then(Value::as_str);
        let present = |k: &str| v.get(k).filter(|x| !x.is_null()).cloned();
        Some(CommandResult {
            id: s("id")?.to_string(),
            name: s("command_name")?.to_string(),
            status: CommandStatus::parse(s("command_status")?),
            error: present("command_error"),
            result: present("command_result"),
        })
    }
}

/// An error answer's body (`{"faultcode": …, "faultstring": …}`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    /// `Client` or `Server`, if the body said.
    pub code: Option<String>,
    /// The `faultstring`, else the start of the body.
    pub message: String,
}

/// What went wrong talking to an agent. Every text names the agent's URL (scheme, host
/// and port) and, for answers, the call; none carries the token.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// A command is still running (409, or a fault saying "agent is busy"): try again
    /// later, e.g. on the next heartbeat.
    #[error("the agent at {url} is busy with another command: {}", .fault.message)]
    Busy { url: String, fault: Fault },
    /// The agent could not be reached or did not answer in time, after the retries.
    #[error("the agent at {url} is unreachable: {reason}")]
    Unreachable { url: String, reason: String },
    /// The agent presented a certificate other than the pinned one: it is not the agent
    /// that sent the heartbeat, or it restarted with a new certificate.
    #[error(
        "the agent at {url} presented a certificate other than the one it sent in its heartbeat"
    )]
    CertificateMismatch { url: String },
    /// The TLS handshake failed for another reason.
    #[error("the TLS handshake with the agent at {url} failed")]
    Tls {
        url: String,
        #[source]
        source: rustls::Error,
    },
    /// An error answer.
    #[error("the agent at {url} answered {call} with {status}: {}", .fault.message)]
    Http {
        url: String,
        call: String,
        status: u16,
        fault: Fault,
    },
    /// An answer that is not what the API promises.
    #[error("the agent at {url} answered {call} with something unreadable: {reason}")]
    Garbage {
        url: String,
        call: String,
        reason: String,
    },
    /// The agent's URL (or a command id to put in it) cannot be used.
    #[error("invalid agent URL {url:?}: {reason}")]
    InvalidUrl { url: String, reason: String },
    /// The pinned PEM holds no readable certificate.
    #[error("the certificate pinned for the agent at {url} is not a PEM certificate")]
    BadCertificate {
        url: String,
        #[source]
        source: Option<rustls::pki_types::pem::Error>,
    },
    /// An `https://` agent without a pinned certificate, and no fallback TLS
    /// configuration to trust it by.
    #[error("the agent at {url} speaks HTTPS but no certificate is pinned for it")]
    NoCertificate { url: String },
}

impl AgentError {
    /// The `outcome` label of `ironic_agent_calls_total`.
    fn outcome(&self) -> &'static str {
        match self {
            AgentError::Busy { .. } => "busy",
            AgentError::Unreachable { .. }
            | AgentError::CertificateMismatch { .. }
            | AgentError::Tls { .. } => "unreachable",
            _ => "error",
        }
    }
}

/// A client for any number of agents. Cheap to clone: clones share the HTTP clients.
#[derive(Clone)]
pub struct AgentClient {
    settings: Settings,
    /// For `https://` agents without a pinned certificate.
    fallback_tls: Option<rustls::ClientConfig>,
    /// One HTTP client per set of pinned certificates (`None`: no pin).
    clients: Arc<Mutex<HashMap<PinKey, Http>>>,
}

impl std::fmt::Debug for AgentClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentClient")
            .field("settings", &self.settings)
            .field("fallback_tls", &self.fallback_tls.is_some())
            .finish()
    }
}

/// GET or POST.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Method {
    Get,
    Post,
}

impl Method {
    fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
        }
    }
}

/// Why one attempt failed before an answer was read.
enum Failure {
    /// Nothing reached the agent: safe to retry any call.
    Connect(String),
    /// The request may have reached the agent.
    AfterSend(String),
    /// The handshake was refused because of the certificate pin.
    Mismatch,
    /// The handshake failed otherwise.
    Tls(rustls::Error),
    /// The answer's body could not be read.
    Body(String),
}

/// Which query an API call carries.
#[derive(Clone, Copy)]
enum Query {
    /// None (`/v1/status`).
    Bare,
    /// The token, and `wait=true|false` when given.
    Token { wait: Option<bool> },
}

/// A 2xx answer, JSON, with what its errors must name.
#[derive(Debug)]
struct Answer {
    url: String,
    call: String,
    body: Value,
}

impl Answer {
    fn garbage(self, reason: &str) -> AgentError {
        AgentError::Garbage {
            url: self.url,
            call: self.call,
            reason: reason.to_string(),
        }
    }

    fn result(self) -> Result<CommandResult, AgentError> {
        match CommandResult::from_json(&self.body) {
            Some(r) => Ok(r),
            None => Err(self.garbage("not a command result (id, command_name, command_status)")),
        }
    }
}

impl AgentClient {
    pub fn new(settings: Settings) -> AgentClient {
        AgentClient {
            settings,
            fallback_tls: None,
            clients: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// Trusts `https://` agents without a pinned certificate by `tls` (e.g. the
    /// operator's CA bundle, [`crate::tls::client_config`]) instead of refusing them.
    /// `tls` is used as given: [`Settings::tls_min_version`] applies to pinned agents.
    pub fn with_fallback_tls(mut self, tls: rustls::ClientConfig) -> AgentClient {
        self.fallback_tls = Some(tls);
        self.clients = Arc::new(Mutex::new(HashMap::new()));
        self
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// `GET /v1/status` (no token): whether the agent is up, since when, which version.
    pub async fn status(&self, ep: &Endpoint<'_>) -> Result<Status, AgentError> {
        self.measured("status", async {
            let a = self
                .call(ep, Method::Get, "/v1/status", Query::Bare, None)
                .await?;
            let started_at = a.body.get("started_at").and_then(Value::as_f64);
            let version = a.body.get("version").and_then(Value::as_str);
            match (started_at, version) {
                (Some(started_at), Some(version)) => Ok(Status {
                    started_at,
                    version: version.to_string(),
                }),
                _ => Err(a.garbage("no numeric started_at or no version")),
            }
        })
        .await
    }

    /// `GET /v1/commands/`: every command the agent ran since it started, oldest first.
    pub async fn commands(&self, ep: &Endpoint<'_>) -> Result<Vec<CommandResult>, AgentError> {
        self.measured("list", self.list(ep)).await
    }

    /// The newest command the agent ran, if any: what a heartbeat handler looks at to
    /// see whether the asynchronous command it started has ended.
    pub async fn last_command(
        &self,
        ep: &Endpoint<'_>,
    ) -> Result<Option<CommandResult>, AgentError> {
        self.measured("list", async { Ok(self.list(ep).await?.pop()) })
            .await
    }

    /// `GET /v1/commands/<id>`: one command. With `wait` the agent answers only once
    /// the command has ended, which must happen within [`Settings::command_timeout`].
    pub async fn command(
        &self,
        ep: &Endpoint<'_>,
        id: &str,
        wait: bool,
    ) -> Result<CommandResult, AgentError> {
        self.measured("get", async {
            // The id comes from the agent's answers: it may only name a command, never
            // reach another path.
            let id_ok = !id.is_empty()
                && id.len() <= 64
                && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
            if !id_ok {
                return Err(AgentError::InvalidUrl {
                    url: origin_text(ep),
                    reason: format!("{:?} is not a command id", redact(id, ep.token)),
                });
            }
            let path = format!("/v1/commands/{id}");
            let query = Query::Token { wait: Some(wait) };
            self.call(ep, Method::Get, &path, query, None)
                .await?
                .result()
        })
        .await
    }

    /// `POST /v1/commands/`: runs `name` (`<extension>.<command>`, e.g.
    /// `standby.get_partition_uuids`) with `params`. Without `wait` the agent answers at
    /// once, an asynchronous command `RUNNING`; with it, once the command has ended.
    /// [`AgentError::Busy`] if another command is still running. Never repeated once
    /// it may have reached the agent (see the module's docs).
    ///
    /// `name` is the `command` label of the metrics: it comes from code or from the
    /// steps the agent advertises, never from free text.
    pub async fn execute(
        &self,
        ep: &Endpoint<'_>,
        name: &str,
        params: &Value,
        wait: bool,
    ) -> Result<CommandResult, AgentError> {
        let body = Bytes::from(serde_json::json!({"name": name, "params": params}).to_string());
        self.measured(name, async {
            let query = Query::Token { wait: Some(wait) };
            self.call(ep, Method::Post, "/v1/commands/", query, Some(body))
                .await?
                .result()
        })
        .await
    }

    async fn list(&self, ep: &Endpoint<'_>) -> Result<Vec<CommandResult>, AgentError> {
        let query = Query::Token { wait: None };
        let a = self
            .call(ep, Method::Get, "/v1/commands/", query, None)
            .await?;
        let all = a.body.get("commands").and_then(Value::as_array).map(|c| {
            c.iter()
                .map(CommandResult::from_json)
                .collect::<Option<Vec<_>>>()
        });
        match all {
            Some(Some(all)) => Ok(all),
            _ => Err(a.garbage("not a list of command results")),
        }
    }

    /// Counts and times one public call (`ironic_agent_calls_total`,
    /// `ironic_agent_call_seconds`), retries included.
    async fn measured<T>(
        &self,
        command: &str,
        call: impl std::future::Future<Output = Result<T, AgentError>>,
    ) -> Result<T, AgentError> {
        let started = Instant::now();
        let r = call.await;
        let outcome = match &r {
            Ok(_) => "ok",
            Err(e) => e.outcome(),
        };
        metrics::counter!("ironic_agent_calls_total", "command" => command.to_string(), "outcome" => outcome)
            .increment(1);
        metrics::histogram!("ironic_agent_call_seconds", "command" => command.to_string())
            .record(started.elapsed().as_secs_f64());
        r
    }

    /// One API call with its retries: the JSON of a 2xx answer, else the error.
    async fn call(
        &self,
        ep: &Endpoint<'_>,
        method: Method,
        path: &str,
        query: Query,
        body: Option<Bytes>,
    ) -> Result<Answer, AgentError> {
        let origin = Origin::parse(ep.url, "http").map_err(|e| AgentError::InvalidUrl {
            url: redact(ep.url.trim(), ep.token),
            reason: redact(&e.to_string(), ep.token),
        })?;
        let url = origin.base();
        let http = self.http_for(ep, &url)?;
        let call = format!("{} {path}", method.as_str());
        let mut target = format!("{url}{path}");
        if let Query::Token { wait } = query {
            target.push_str("?agent_token=");
            target.push_str(&ironic_model::percent::encode(ep.token));
            match wait {
                Some(true) => target.push_str("&wait=true"),
                Some(false) => target.push_str("&wait=false"),
                None => {}
            }
        }
        let uri: hyper::Uri = target.parse().map_err(|_| AgentError::InvalidUrl {
            url: url.clone(),
            reason: format!("{path} on it is not a valid URI"),
        })?;
        let attempts = self.settings.attempts.max(1);
        let mut last = String::new();
        for n in 1..=attempts {
            let req = request(method, &uri, body.clone()).map_err(|e| AgentError::InvalidUrl {
                url: url.clone(),
                reason: redact(&e.to_string(), ep.token),
            })?;
            let started = Instant::now();
            let r = self.once(&http, req, ep.token).await;
            let elapsed_ms = started.elapsed().as_millis() as u64;
            let m = method.as_str();
            match r {
                Ok((status, raw)) => {
                    tracing::debug!(agent = %url, method = m, %path, status, elapsed_ms, attempt = n, "agent call");
                    return answer(url, call, status, &raw, ep.token);
                }
                Err(Failure::Mismatch) => {
                    tracing::debug!(agent = %url, method = m, %path, elapsed_ms, attempt = n, "agent call: certificate not the pinned one");
                    return Err(AgentError::CertificateMismatch { url });
                }
                Err(Failure::Tls(source)) => {
                    tracing::debug!(agent = %url, method = m, %path, elapsed_ms, attempt = n, error = %source, "agent call: TLS failed");
                    return Err(AgentError::Tls { url, source });
                }
                Err(Failure::Body(reason)) => {
                    tracing::debug!(agent = %url, method = m, %path, elapsed_ms, attempt = n, error = %reason, "agent call: unreadable answer");
                    return Err(AgentError::Garbage { url, call, reason });
                }
                Err(Failure::AfterSend(reason)) if method == Method::Post => {
                    tracing::debug!(agent = %url, method = m, %path, elapsed_ms, attempt = n, error = %reason, "agent call failed after sending; not repeated");
                    return Err(AgentError::Unreachable {
                        url,
                        reason: format!(
                            "{call}: {reason} (not repeated: the agent may have received it)"
                        ),
                    });
                }
                Err(Failure::Connect(reason) | Failure::AfterSend(reason)) => {
                    tracing::debug!(agent = %url, method = m, %path, elapsed_ms, attempt = n, error = %reason, "agent call failed");
                    last = reason;
                }
            }
            if n < attempts {
                tokio::time::sleep(self.settings.retry_interval).await;
            }
        }
        Err(AgentError::Unreachable {
            url,
            reason: format!("{call}: {last} (after {attempts} attempts)"),
        })
    }

    /// One attempt, bounded by the command timeout: the status and the body.
    async fn once(
        &self,
        http: &Http,
        req: hyper::Request<Full<Bytes>>,
        token: &str,
    ) -> Result<(u16, Bytes), Failure> {
        let exchange = async {
            let r = http.request(req).await.map_err(|e| failure(&e, token))?;
            let status = r.status().as_u16();
            let raw = http_body_util::Limited::new(r.into_body(), self.settings.max_answer_bytes)
                .collect()
                .await
                .map_err(|e| Failure::Body(redact(&e.to_string(), token)))?
                .to_bytes();
            Ok((status, raw))
        };
        let limit = self.settings.command_timeout;
        tokio::time::timeout(limit, exchange)
            .await
            .unwrap_or_else(|_| Err(Failure::AfterSend(format!("no answer within {limit:?}"))))
    }

    /// The HTTP client for `ep`: one per pinned certificate, built once.
    fn http_for(&self, ep: &Endpoint<'_>, url: &str) -> Result<Http, AgentError> {
        let https = url.starts_with("https://");
        let key = match ep.pinned_pem {
            // Plain HTTP has no certificate to pin: a pin given anyway is ignored.
            _ if !https => None,
            Some(pem) => Some(pins(pem, url)?),
            None if self.fallback_tls.is_some() => None,
            None => {
                return Err(AgentError::NoCertificate {
                    url: url.to_string(),
                });
            }
        };
        // Never held across an await; a panic elsewhere leaves a usable map.
        let mut clients = self
            .clients
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(c) = clients.get(&key) {
            return Ok(c.clone());
        }
        let tls = match &key {
            Some(ders) => pinned_config(ders, self.settings.tls_min_version),
            None => match &self.fallback_tls {
                Some(tls) => Ok(tls.clone()),
                // For `http://` only: with no roots it would refuse any certificate.
                None => builder(self.settings.tls_min_version).map(|(b, _)| {
                    b.with_root_certificates(rustls::RootCertStore::empty())
                        .with_no_client_auth()
                }),
            },
        }
        .map_err(|source| AgentError::Tls {
            url: url.to_string(),
            source,
        })?;
        if clients.len() >= MAX_CLIENTS {
            clients.clear();
        }
        let http = http_client(tls, self.settings.connect_timeout);
        clients.insert(key, http.clone());
        Ok(http)
    }
}

/// An HTTP/1 client for `http://` and `https://` URLs. Unlike
/// [`crate::tls::https_client`] it keeps no idle connection: calls to one agent are
/// seconds apart, and its ramdisk may have rebooted in between, so a pooled connection
/// would more often be dead than useful (and a POST sent on a dead one could not be
/// retried). TLS sessions are still resumed, from the configuration's session cache.
fn http_client(tls: rustls::ClientConfig, connect_timeout: Duration) -> Http {
    HttpClient::builder(hyper_util::rt::TokioExecutor::new())
        .pool_max_idle_per_host(0)
        .build(crate::tls::https_connector(tls, Some(connect_timeout)))
}

fn request(
    method: Method,
    uri: &hyper::Uri,
    body: Option<Bytes>,
) -> Result<hyper::Request<Full<Bytes>>, hyper::http::Error> {
    let mut req = hyper::Request::builder()
        .method(method.as_str())
        .uri(uri.clone())
        .header("accept", "application/json");
    if body.is_some() {
        req = req.header("content-type", "application/json");
    }
    req.body(Full::new(body.unwrap_or_default()))
}

/// A TLS configuration builder with the ring provider and the allowed versions.
fn builder(
    min: TlsMinVersion,
) -> Result<
    (
        rustls::ConfigBuilder<rustls::ClientConfig, rustls::WantsVerifier>,
        Arc<rustls::crypto::CryptoProvider>,
    ),
    rustls::Error,
> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let versions: &[&'static rustls::SupportedProtocolVersion] = match min {
        TlsMinVersion::Tls12 => &[&rustls::version::TLS13, &rustls::version::TLS12],
        TlsMinVersion::Tls13 => &[&rustls::version::TLS13],
    };
    let b = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(versions)?;
    Ok((b, provider))
}

/// A configuration that accepts only the certificates `ders`.
fn pinned_config(
    ders: &[Vec<u8>],
    min: TlsMinVersion,
) -> Result<rustls::ClientConfig, rustls::Error> {
    let (b, provider) = builder(min)?;
    let pinned = Pinned {
        certs: ders
            .iter()
            .map(|d| CertificateDer::from(d.clone()))
            .collect(),
        provider,
    };
    Ok(b.dangerous()
        .with_custom_certificate_verifier(Arc::new(pinned))
        .with_no_client_auth())
}

/// The DER of every certificate in `pem`; at least one.
fn pins(pem: &str, url: &str) -> Result<Vec<Vec<u8>>, AgentError> {
    let bad = |source| AgentError::BadCertificate {
        url: url.to_string(),
        source,
    };
    let ders = CertificateDer::pem_slice_iter(pem.as_bytes())
        .map(|c| c.map(|c| c.as_ref().to_vec()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(Some(e)))?;
    if ders.is_empty() {
        return Err(bad(None));
    }
    Ok(ders)
}

/// The handshake was refused because the agent's certificate is not the pinned one.
#[derive(Debug, thiserror::Error)]
#[error("the certificate presented is not the pinned one")]
struct NotPinned;

/// Accepts the server only if its certificate is one of `certs`, byte for byte.
///
/// No chain is built and no name or date is checked: the pinned certificate is the one
/// the agent sent in its heartbeat, authenticated by the agent token, so a byte-equal
/// certificate whose key signs the handshake is the agent, whatever its name, and no
/// other certificate is, however it is signed. That is also why the certificate's own
/// signature (P-384 with SHA-512 for IPA's auto-TLS, which rustls-webpki cannot check)
/// never needs verifying. Intermediates the server sends are ignored rather than
/// refused: they take no part in the decision, and refusing them would only break an
/// agent whose TLS stack sends its issuer along.
#[derive(Debug)]
struct Pinned {
    certs: Vec<CertificateDer<'static>>,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl rustls::client::danger::ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        if self.certs.iter().any(|c| c.as_ref() == end_entity.as_ref()) {
            Ok(rustls::client::danger::ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::Other(rustls::OtherError(Arc::new(NotPinned))),
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// What a failed request was: a refused pin, another TLS failure, a failure to connect
/// (nothing sent) or one after connecting.
fn failure(e: &hyper_util::client::legacy::Error, token: &str) -> Failure {
    if let Some(tls) = rustls_error(e) {
        let pin = matches!(
            tls,
            rustls::Error::InvalidCertificate(rustls::CertificateError::Other(o))
                if o.0.downcast_ref::<NotPinned>().is_some()
        );
        return if pin {
            Failure::Mismatch
        } else {
            Failure::Tls(tls.clone())
        };
    }
    let text = redact(&crate::tls::error_chain(e), token);
    if e.is_connect() {
        Failure::Connect(text)
    } else {
        Failure::AfterSend(text)
    }
}

/// The rustls error among `e`'s causes. `io::Error` hides the error it wraps from
/// `source()` (it returns the wrapped error's source), so it is opened by hand.
fn rustls_error<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    let mut cur = Some(e);
    // Bounded: causes do not loop, but never trust that.
    for _ in 0..16 {
        let e = cur?;
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        cur = match e.downcast_ref::<std::io::Error>() {
            Some(io) => match io.get_ref() {
                Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
                None => None,
            },
            None => e.source(),
        };
    }
    None
}

/// The most JSON values an agent's answer may hold (its steps, its commands' results:
/// hundreds; a config drive echoed back is one string).
const MAX_ANSWER_VALUES: usize = 200_000;
/// The most of an agent's `faultstring` kept.
const FAULT_CHARS: usize = 4096;

/// A whole answer: JSON on 2xx, else the fault, [`AgentError::Busy`] for a busy agent.
fn answer(
    url: String,
    call: String,
    status: u16,
    raw: &[u8],
    token: &str,
) -> Result<Answer, AgentError> {
    // Counted before parsing: a parsed value costs up to 160 bytes, whatever the
    // answer's size says (`[0,0,…]`).
    if ironic_model::json_size::values(raw) > MAX_ANSWER_VALUES {
        return Err(AgentError::Garbage {
            url,
            call,
            reason: format!("status {status}, more than {MAX_ANSWER_VALUES} JSON values"),
        });
    }
    let json: Option<Value> = serde_json::from_slice(raw).ok();
    if (200..300).contains(&status) {
        return match json {
            Some(body) => Ok(Answer { url, call, body }),
            None => Err(AgentError::Garbage {
                url,
                call,
                reason: format!("status {status}, not JSON"),
            }),
        };
    }
    let text = |k: &str| {
        json.as_ref()
            .and_then(|j| j.get(k))
            .and_then(Value::as_str)
            .map(|s| redact(&s.chars().take(FAULT_CHARS).collect::<String>(), token))
    };
    let fault = Fault {
        code: text("faultcode"),
        message: text("faultstring").unwrap_or_else(|| {
            redact(
                &String::from_utf8_lossy(raw)
                    .chars()
                    .take(QUOTE)
                    .collect::<String>(),
                token,
            )
        }),
    };
    // Upstream treats the text as the sign too, whatever the status.
    if status == 409 || fault.message.to_lowercase().contains("agent is busy") {
        return Err(AgentError::Busy { url, fault });
    }
    Err(AgentError::Http {
        url,
        call,
        status,
        fault,
    })
}

/// `text` with the token masked (as is, and percent-encoded as in a URL).
fn redact(text: &str, token: &str) -> String {
    if token.is_empty() {
        return text.to_string();
    }
    text.replace(token, "***")
        .replace(&ironic_model::percent::encode(token), "***")
}

/// The agent's URL as errors name it: its origin if it parses, else as given; masked.
fn origin_text(ep: &Endpoint<'_>) -> String {
    let url = Origin::parse(ep.url, "http")
        .map(|o| o.base())
        .unwrap_or_else(|_| ep.url.trim().to_string());
    redact(&url, ep.token)
}

#[cfg(test)]
mod tests {
    //! Against a scripted stand-in agent: a tiny blocking HTTP/1 responder (over rustls
    //! for `https://`) on 127.0.0.1:0, one thread per connection, that records what it
    //! was sent.
    #![allow(clippy::unwrap_used)]

    use super::*;
    use serde_json::json;
    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Like IPA's auto-TLS certificate: self-signed, P-384, signed with SHA-512, CN and
    /// the only SAN 127.0.0.1, no BasicConstraints. Made once with `openssl req -x509
    /// -newkey ec -pkeyopt ec_paramgen_curve:secp384r1 -sha512 -days 36500 -nodes` and a
    /// configuration whose only extension is `subjectAltName = IP:127.0.0.1`
    /// (`subjectKeyIdentifier = none`).
    const IPA_CERT: &str = include_str!("../tests/data/agent-p384-sha512.pem");
    const IPA_KEY: &str = include_str!("../tests/data/agent-p384-sha512.key");
    /// An ordinary P-256/SHA-256 self-signed certificate for 127.0.0.1.
    const OTHER_CERT: &str = include_str!("../tests/data/other-p256.pem");
    const OTHER_KEY: &str = include_str!("../tests/data/other-p256.key");

    const TOKEN: &str = "s3cr3t/t+k=";

    #[derive(Debug, Clone)]
    struct Seen {
        method: String,
        target: String,
        body: String,
    }

    enum Reply {
        Json(u16, String),
        /// Reads the request and never answers.
        Hang,
        /// Reads the request and closes the connection.
        Close,
    }

    struct Agent {
        url: String,
        seen: Arc<Mutex<Vec<Seen>>>,
        accepted: Arc<AtomicUsize>,
    }

    impl Agent {
        fn seen(&self) -> Vec<Seen> {
            self.seen.lock().unwrap().clone()
        }
        fn accepted(&self) -> usize {
            self.accepted.load(Ordering::SeqCst)
        }
    }

    fn server_tls(
        cert: &str,
        key: &str,
        versions: &[&'static rustls::SupportedProtocolVersion],
    ) -> Arc<rustls::ServerConfig> {
        use rustls::pki_types::PrivateKeyDer;
        let certs = CertificateDer::pem_slice_iter(cert.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        Arc::new(
            rustls::ServerConfig::builder_with_provider(provider)
                .with_protocol_versions(versions)
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(certs, key)
                .unwrap(),
        )
    }

    fn both() -> Vec<&'static rustls::SupportedProtocolVersion> {
        vec![&rustls::version::TLS13, &rustls::version::TLS12]
    }

    fn agent(
        tls: Option<Arc<rustls::ServerConfig>>,
        reply: impl Fn(&Seen) -> Reply + Send + Sync + 'static,
    ) -> Agent {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let scheme = if tls.is_some() { "https" } else { "http" };
        let seen = Arc::new(Mutex::new(Vec::new()));
        let accepted = Arc::new(AtomicUsize::new(0));
        let reply = Arc::new(reply);
        let (s, a) = (seen.clone(), accepted.clone());
        std::thread::spawn(move || {
            for tcp in listener.incoming() {
                let Ok(tcp) = tcp else { continue };
                a.fetch_add(1, Ordering::SeqCst);
                let (seen, reply, tls) = (s.clone(), reply.clone(), tls.clone());
                std::thread::spawn(move || match tls {
                    Some(cfg) => {
                        let conn = rustls::ServerConnection::new(cfg).unwrap();
                        serve(rustls::StreamOwned::new(conn, tcp), &seen, &*reply);
                    }
                    None => serve(tcp, &seen, &*reply),
                });
            }
        });
        Agent {
            url: format!("{scheme}://{addr}"),
            seen,
            accepted,
        }
    }

    fn serve(mut s: impl Read + Write, seen: &Mutex<Vec<Seen>>, reply: &dyn Fn(&Seen) -> Reply) {
        // A failed handshake ends here, before anything is recorded.
        let Some(req) = read_request(&mut s) else {
            return;
        };
        seen.lock().unwrap().push(req.clone());
        match reply(&req) {
            Reply::Json(status, body) => {
                let _ = write!(
                    s,
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.flush();
            }
            Reply::Hang => std::thread::sleep(Duration::from_secs(30)),
            Reply::Close => {}
        }
    }

    fn read_request(s: &mut impl Read) -> Option<Seen> {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        let head_end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            let n = s.read(&mut chunk).ok().filter(|n| *n > 0)?;
            buf.extend_from_slice(&chunk[..n]);
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
        let mut first = head.lines().next()?.split(' ');
        let (method, target) = (first.next()?.to_string(), first.next()?.to_string());
        let length = head
            .lines()
            .filter_map(|l| l.split_once(':'))
            .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
            .and_then(|(_, v)| v.trim().parse::<usize>().ok())
            .unwrap_or(0);
        while buf.len() < head_end + length {
            let n = s.read(&mut chunk).ok().filter(|n| *n > 0)?;
            buf.extend_from_slice(&chunk[..n]);
        }
        let body = String::from_utf8_lossy(&buf[head_end..head_end + length]).into_owned();
        Some(Seen {
            method,
            target,
            body,
        })
    }

    fn client(command_timeout: Duration) -> AgentClient {
        AgentClient::new(Settings {
            command_timeout,
            connect_timeout: Duration::from_secs(2),
            attempts: 3,
            retry_interval: Duration::from_millis(10),
            tls_min_version: TlsMinVersion::Tls12,
            max_answer_bytes: MAX_BODY,
        })
    }

    fn ep<'a>(url: &'a str, pinned_pem: Option<&'a str>) -> Endpoint<'a> {
        Endpoint {
            url,
            token: TOKEN,
            pinned_pem,
        }
    }

    fn result_json(status: &str) -> String {
        json!({"id": "0f9c5a9e-6d1c-4a8e-9f57-1d2b3c4d5e6f",
               "command_name": "get_partition_uuids", "command_status": status,
               "command_error": null, "command_result": {"root uuid": "abc"}})
        .to_string()
    }

    /// The query parameters of a request target, decoded just enough for the token.
    fn query(target: &str) -> Vec<(String, String)> {
        let q = target.split_once('?').map_or("", |(_, q)| q);
        q.split('&')
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (k, v) = p.split_once('=').unwrap_or((p, ""));
                let v = v
                    .replace("%2F", "/")
                    .replace("%2B", "+")
                    .replace("%3D", "=");
                (k.to_string(), v)
            })
            .collect()
    }

    #[tokio::test]
    async fn pinned_certificate_runs_a_command() {
        let tls = server_tls(OTHER_CERT, OTHER_KEY, &both());
        let a = agent(Some(tls), |_| Reply::Json(200, result_json("SUCCEEDED")));
        let c = client(Duration::from_secs(10));
        let r = c
            .execute(
                &ep(&a.url, Some(OTHER_CERT)),
                "standby.get_partition_uuids",
                &json!({"image_info": {"id": "x"}}),
                true,
            )
            .await
            .unwrap();
        assert_eq!(r.id, "0f9c5a9e-6d1c-4a8e-9f57-1d2b3c4d5e6f");
        assert_eq!(r.status, CommandStatus::Succeeded);
        assert_eq!(r.result, Some(json!({"root uuid": "abc"})));
        assert_eq!(r.error, None);
        let seen = a.seen();
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].method, "POST");
        assert!(seen[0].target.starts_with("/v1/commands/?"));
        let q = query(&seen[0].target);
        assert!(q.contains(&("agent_token".into(), TOKEN.into())), "{q:?}");
        assert!(q.contains(&("wait".into(), "true".into())), "{q:?}");
        let body: Value = serde_json::from_str(&seen[0].body).unwrap();
        assert_eq!(
            body,
            json!({"name": "standby.get_partition_uuids", "params": {"image_info": {"id": "x"}}})
        );
    }

    #[tokio::test]
    async fn another_certificate_is_refused_before_anything_is_sent() {
        let tls = server_tls(OTHER_CERT, OTHER_KEY, &both());
        let a = agent(Some(tls), |_| Reply::Json(200, result_json("SUCCEEDED")));
        let e = client(Duration::from_secs(10))
            .execute(&ep(&a.url, Some(IPA_CERT)), "standby.x", &json!({}), false)
            .await
            .unwrap_err();
        assert!(matches!(e, AgentError::CertificateMismatch { .. }), "{e:?}");
        assert!(a.seen().is_empty());
        // Not retried: it would be refused again.
        assert_eq!(a.accepted(), 1);
    }

    #[tokio::test]
    async fn an_ipa_certificate_p384_sha512_works_when_pinned_tls12_and_tls13() {
        for version in [&rustls::version::TLS12, &rustls::version::TLS13] {
            let tls = server_tls(IPA_CERT, IPA_KEY, &[version]);
            let a = agent(Some(tls), |_| {
                Reply::Json(
                    200,
                    r#"{"started_at": 1700000000.5, "version": "13.0.0"}"#.into(),
                )
            });
            let s = client(Duration::from_secs(10))
                .status(&ep(&a.url, Some(IPA_CERT)))
                .await
                .unwrap();
            assert_eq!(s.version, "13.0.0");
            assert_eq!(s.started_at, 1_700_000_000.5);
            // The status needs no token: none is sent.
            assert_eq!(a.seen()[0].target, "/v1/status");
        }
    }

    #[tokio::test]
    async fn webpki_refuses_the_ipa_certificate_as_a_trust_anchor() {
        // What pinning is for: as a trust anchor, the same certificate is refused by
        // webpki, which cannot check ECDSA with SHA-512 (OID 1.2.840.10045.4.3.4).
        let tls = server_tls(IPA_CERT, IPA_KEY, &both());
        let a = agent(Some(tls), |_| Reply::Json(200, "{}".into()));
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(IPA_CERT.as_bytes()) {
            roots.add(c.unwrap()).unwrap();
        }
        let (b, _) = builder(TlsMinVersion::Tls12).unwrap();
        let c = client(Duration::from_secs(10))
            .with_fallback_tls(b.with_root_certificates(roots).with_no_client_auth());
        let e = c.status(&ep(&a.url, None)).await.unwrap_err();
        let AgentError::Tls { source, .. } = &e else {
            panic!("{e:?}")
        };
        assert!(
            matches!(
                source,
                rustls::Error::InvalidCertificate(
                    rustls::CertificateError::UnsupportedSignatureAlgorithmContext { .. }
                )
            ),
            "{source:?}"
        );
        assert!(a.seen().is_empty());
    }

    #[tokio::test]
    async fn tls_min_version_13_refuses_a_tls12_agent() {
        let tls = server_tls(IPA_CERT, IPA_KEY, &[&rustls::version::TLS12]);
        let a = agent(Some(tls), |_| Reply::Json(200, "{}".into()));
        let c = AgentClient::new(Settings {
            tls_min_version: TlsMinVersion::Tls13,
            ..Settings::default()
        });
        let e = c.status(&ep(&a.url, Some(IPA_CERT))).await.unwrap_err();
        assert!(matches!(e, AgentError::Tls { .. }), "{e:?}");
    }

    #[tokio::test]
    async fn a_busy_agent_is_busy() {
        let a = agent(None, |_| {
            Reply::Json(
                409,
                r#"{"faultcode":"Client","faultstring":"Agent is busy"}"#.into(),
            )
        });
        let e = client(Duration::from_secs(10))
            .execute(
                &ep(&a.url, None),
                "deploy.execute_deploy_step",
                &json!({}),
                false,
            )
            .await
            .unwrap_err();
        let AgentError::Busy { fault, .. } = &e else {
            panic!("{e:?}")
        };
        assert_eq!(fault.code.as_deref(), Some("Client"));
        assert_eq!(fault.message, "Agent is busy");
        // Not retried: the caller tries again on a later heartbeat.
        assert_eq!(a.seen().len(), 1);
    }

    #[test]
    fn answers_are_bounded_before_they_are_parsed() {
        let flood = format!("[{}0]", "0,".repeat(MAX_ANSWER_VALUES));
        let e = answer("u".into(), "GET /".into(), 200, flood.as_bytes(), TOKEN).unwrap_err();
        assert!(
            matches!(&e, AgentError::Garbage { reason, .. } if reason.contains("JSON values")),
            "{e:?}"
        );
        let long = format!(
            r#"{{"faultcode":"Server","faultstring":"{}"}}"#,
            "x".repeat(100_000)
        );
        let e = answer("u".into(), "POST /".into(), 500, long.as_bytes(), TOKEN).unwrap_err();
        assert!(
            matches!(&e, AgentError::Http { fault, .. } if fault.message.len() == FAULT_CHARS),
            "{e:?}"
        );
    }

    #[test]
    fn a_fault_saying_busy_is_busy_whatever_the_status() {
        let raw = br#"{"faultcode":"Server","faultstring":"Command failed: agent is BUSY now"}"#;
        let e = answer("u".into(), "POST /".into(), 500, raw, TOKEN).unwrap_err();
        assert!(matches!(e, AgentError::Busy { .. }), "{e:?}");
        let raw = br#"{"faultcode":"Client","faultstring":"Unknown extension: foo"}"#;
        let e = answer("u".into(), "POST /".into(), 404, raw, TOKEN).unwrap_err();
        assert!(
            matches!(&e, AgentError::Http { status: 404, fault, .. } if fault.message == "Unknown extension: foo"),
            "{e:?}"
        );
        let e = answer(
            "u".into(),
            "GET /".into(),
            502,
            b"<html>bad gateway</html>",
            TOKEN,
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "the agent at u answered GET / with 502: <html>bad gateway</html>"
        );
    }

    #[tokio::test]
    async fn an_agent_that_never_answers_times_out_and_a_post_is_not_repeated() {
        let a = agent(None, |_| Reply::Hang);
        let c = client(Duration::from_millis(300));
        let e = c
            .execute(&ep(&a.url, None), "standby.x", &json!({}), true)
            .await
            .unwrap_err();
        assert!(matches!(e, AgentError::Unreachable { .. }), "{e:?}");
        assert_eq!(
            a.seen().len(),
            1,
            "a POST that may have arrived is not repeated"
        );
        // A GET may be repeated.
        let e = c.commands(&ep(&a.url, None)).await.unwrap_err();
        assert!(matches!(e, AgentError::Unreachable { .. }), "{e:?}");
        assert_eq!(a.seen().len(), 1 + 3);
    }

    #[tokio::test]
    async fn connection_refused_is_retried_then_unreachable() {
        let port = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let url = format!("http://127.0.0.1:{port}");
        let c = client(Duration::from_secs(10));
        let e = c.status(&ep(&url, None)).await.unwrap_err();
        let AgentError::Unreachable { reason, .. } = &e else {
            panic!("{e:?}")
        };
        assert!(reason.contains("after 3 attempts"), "{reason}");
        // A POST too: nothing reached the agent.
        let e = c
            .execute(&ep(&url, None), "standby.x", &json!({}), false)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("after 3 attempts"), "{e}");
    }

    #[tokio::test]
    async fn a_dropped_connection_repeats_a_get_but_not_a_post() {
        let a = agent(None, |_| Reply::Close);
        let c = client(Duration::from_secs(10));
        let e = c.status(&ep(&a.url, None)).await.unwrap_err();
        assert!(matches!(e, AgentError::Unreachable { .. }), "{e:?}");
        assert_eq!(a.accepted(), 3);
        let e = c
            .execute(&ep(&a.url, None), "standby.x", &json!({}), false)
            .await
            .unwrap_err();
        assert!(matches!(e, AgentError::Unreachable { .. }), "{e:?}");
        assert_eq!(a.accepted(), 4);
    }

    #[tokio::test]
    async fn plain_http_lists_and_gets_commands() {
        let a = agent(None, |req| {
            if req.target.starts_with("/v1/commands/?") {
                let list = format!(
                    r#"{{"commands": [{}, {}]}}"#,
                    result_json("SUCCEEDED").replace("0f9c", "aaaa"),
                    result_json("RUNNING")
                );
                Reply::Json(200, list)
            } else if req.target.starts_with("/v1/commands/0f9c") {
                Reply::Json(200, result_json("FAILED"))
            } else {
                Reply::Json(200, "not json".into())
            }
        });
        let c = client(Duration::from_secs(10));
        let e = ep(&a.url, None);
        let all = c.commands(&e).await.unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].status, CommandStatus::Succeeded);
        let last = c.last_command(&e).await.unwrap().unwrap();
        assert_eq!(last.status, CommandStatus::Running);
        let one = c.command(&e, &last.id, true).await.unwrap();
        assert_eq!(one.status, CommandStatus::Failed);
        let seen = a.seen();
        assert!(seen.iter().all(|s| s.method == "GET"));
        assert_eq!(
            query(&seen[2].target),
            vec![
                ("agent_token".to_string(), TOKEN.to_string()),
                ("wait".to_string(), "true".to_string())
            ]
        );
        // Whatever the agent says, it must be JSON.
        let e = c.status(&e).await.unwrap_err();
        assert!(matches!(e, AgentError::Garbage { .. }), "{e:?}");
    }

    #[tokio::test]
    async fn a_command_id_cannot_name_another_path() {
        let a = agent(None, |_| Reply::Json(200, result_json("SUCCEEDED")));
        let c = client(Duration::from_secs(10));
        for id in ["../status", "a?b", "", "a/b"] {
            let e = c.command(&ep(&a.url, None), id, false).await.unwrap_err();
            assert!(matches!(e, AgentError::InvalidUrl { .. }), "{e:?}");
        }
        assert!(a.seen().is_empty());
    }

    #[tokio::test]
    async fn https_needs_a_readable_pinned_certificate() {
        let c = client(Duration::from_secs(10));
        let e = c
            .status(&ep("https://127.0.0.1:9", None))
            .await
            .unwrap_err();
        assert!(matches!(e, AgentError::NoCertificate { .. }), "{e:?}");
        let e = c
            .status(&ep("https://127.0.0.1:9", Some("not a certificate")))
            .await
            .unwrap_err();
        assert!(matches!(e, AgentError::BadCertificate { .. }), "{e:?}");
        let e = c.status(&ep("ftp://127.0.0.1:9", None)).await.unwrap_err();
        assert!(matches!(e, AgentError::InvalidUrl { .. }), "{e:?}");
    }

    #[tokio::test]
    async fn the_token_is_never_in_an_error_text() {
        let a = agent(None, |req| {
            // An agent that echoes what it was sent.
            Reply::Json(401, json!({"faultcode": "Client", "faultstring": format!("Token invalid: {}", req.target)}).to_string())
        });
        let c = client(Duration::from_millis(300));
        let refused = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            format!("http://127.0.0.1:{}", l.local_addr().unwrap().port())
        };
        let hang = agent(None, |_| Reply::Hang);
        let mut errors = vec![
            c.execute(&ep(&a.url, None), "standby.x", &json!({}), false)
                .await
                .unwrap_err(),
            c.commands(&ep(&refused, None)).await.unwrap_err(),
            c.commands(&ep(&hang.url, None)).await.unwrap_err(),
            c.status(&ep(&format!("http://{TOKEN}@127.0.0.1:1"), None))
                .await
                .unwrap_err(),
            c.command(&ep(&a.url, None), TOKEN, false)
                .await
                .unwrap_err(),
        ];
        errors.push(
            c.command(&ep(&a.url, None), "abc", false)
                .await
                .unwrap_err(),
        );
        assert!(matches!(errors[0], AgentError::Http { status: 401, .. }));
        for e in &errors {
            for text in [e.to_string(), crate::tls::error_chain(e), format!("{e:?}")] {
                assert!(!text.contains(TOKEN), "{text}");
                assert!(
                    !text.contains(&ironic_model::percent::encode(TOKEN)),
                    "{text}"
                );
            }
        }
        assert!(
            errors[0].to_string().contains("agent_token=***"),
            "{}",
            errors[0]
        );
    }

    #[test]
    fn results_keep_unknown_statuses_and_say_the_error() {
        let r = CommandResult::from_json(&json!({"id": "1", "command_name": "x",
            "command_status": "PAUSED", "command_error": {"type": "CommandExecutionError",
            "code": 500, "message": "Command execution failed: disk gone", "details": "…"}}))
        .unwrap();
        assert_eq!(r.status, CommandStatus::Other("PAUSED".into()));
        assert_eq!(r.status.as_str(), "PAUSED");
        assert_eq!(
            r.error_message().as_deref(),
            Some("Command execution failed: disk gone: …")
        );
        assert_eq!(r.result, None);
        // IPA's own: the details repeat the message and say the reason.
        let r = CommandResult::from_json(&json!({"id": "1", "command_name": "x",
            "command_status": "FAILED", "command_error": {"type": "CleaningError",
            "code": 500, "message": "Clean step failed",
            "details": "Clean step failed: Unexpected exception. No such file: 'fuser'"}}))
        .unwrap();
        assert_eq!(
            r.error_message().as_deref(),
            Some("Clean step failed: Unexpected exception. No such file: 'fuser'")
        );
        let r = CommandResult::from_json(&json!({"id": "1", "command_name": "x",
            "command_status": "CLEAN_VERSION_MISMATCH", "command_error": null}))
        .unwrap();
        assert_eq!(r.status, CommandStatus::CleanVersionMismatch);
        assert_eq!(r.error_message(), None);
        assert!(CommandResult::from_json(&json!({"id": "1"})).is_none());
    }

    #[test]
    fn the_token_is_percent_encoded() {
        assert_eq!(ironic_model::percent::encode("a-b_c.d~e"), "a-b_c.d~e");
        assert_eq!(
            ironic_model::percent::encode("s3/t+k= &"),
            "s3%2Ft%2Bk%3D%20%26"
        );
    }

    #[test]
    fn an_endpoint_debug_hides_the_token() {
        assert!(!format!("{:?}", ep("http://h", None)).contains(TOKEN));
    }
}
