//! The agent's side of the Ironic API (upstream `ironic_python_agent/ironic_api_client.py`
//! and the heartbeater in `agent.py`): it looks itself up by its MAC addresses until the
//! API knows it, then heartbeats until stopped.
//!
//! - Lookup: `GET /v1/lookup?addresses=<macs>` with microversion 1.62 (IPA asks for
//!   `min(server, 1.62)`), retried with a jittered, doubling back-off on any failure
//!   (404 before the node waits for an agent, 409 while it is locked, connection
//!   refused). The answer must carry `node.uuid` and `config.heartbeat_timeout`, which
//!   IPA cannot run without.
//! - Heartbeat: `POST /v1/heartbeat/<uuid>` with `callback_url`, `agent_token` and
//!   `agent_version`, microversion 1.68; 202 counts. The first goes at once; then every
//!   interval, and soon after an asynchronous command ends. A refused one (409 while
//!   the node is locked, or any other failure) is retried after IPA's 5-10 s, or the
//!   configured interval if shorter.
//!
//! The agent advertises plain `http://` and sends no `agent_verify_ca`: it has no TLS.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::{Method, Request, header};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::{Inner, jitter};

/// The microversion of lookups: what IPA asks for from an API that knows tokens.
const LOOKUP_VERSION: &str = "1.62";
/// The microversion of heartbeats: IPA's newest known.
const HEARTBEAT_VERSION: &str = "1.68";
/// The limit of one request to the API, connecting included.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The first pause between lookups, doubled after each failure up to the next.
const LOOKUP_FIRST_RETRY: Duration = Duration::from_millis(100);
const LOOKUP_MAX_RETRY: Duration = Duration::from_secs(2);
/// IPA's pause after a failed heartbeat: this × a random factor in 1..2.
const HEARTBEAT_RETRY: Duration = Duration::from_secs(5);
/// The lookup's placeholder for a token that was already handed out.
const MASKED_TOKEN: &str = "******";
/// IPA ignores a token shorter than this.
const MIN_TOKEN_LEN: usize = 32;

/// Where the API is: `http://host[:port][/prefix]`.
#[derive(Debug, Clone)]
pub(super) struct Api {
    /// `host[:port]` as given: the `Host` header.
    authority: String,
    /// `host:port`: what is connected to (port 80 when none is given).
    connect: String,
    /// The path before `/v1`, without a trailing slash (often empty).
    prefix: String,
}

impl Api {
    /// Parses the API's URL; only plain `http://` (the fake has no TLS client).
    pub(super) fn parse(url: &str) -> std::io::Result<Api> {
        let invalid = |why: &str| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("AgentConfig::api_url {url:?}: {why}"),
            )
        };
        let rest = url
            .trim()
            .strip_prefix("http://")
            .ok_or_else(|| invalid("the fake agent speaks plain HTTP: give an http:// URL"))?;
        let (authority, path) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
        if authority.is_empty() || path.contains('?') {
            return Err(invalid("give http://host[:port][/path], without a query"));
        }
        let has_port = authority
            .rsplit_once(':')
            .is_some_and(|(_, p)| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
        let connect = if has_port {
            authority.to_string()
        } else {
            format!("{authority}:80")
        };
        Ok(Api {
            authority: authority.to_string(),
            connect,
            prefix: path.trim_end_matches('/').to_string(),
        })
    }
}

/// The agent's connection to the API, kept alive between requests as IPA's `requests`
/// session keeps its own: hundreds of agents heartbeating often would otherwise leave
/// a closed connection (and a port in TIME_WAIT) per heartbeat.
struct Session<'a> {
    api: &'a Api,
    sender: Option<SendRequest<Full<Bytes>>>,
}

/// Why a lookup or a heartbeat did not go through (the loops log it and try again).
#[derive(Debug, thiserror::Error)]
pub(crate) enum CallError {
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("building the request: {0}")]
    Request(#[from] hyper::http::Error),
    #[error("{what} {connect}: {cause}")]
    Io {
        what: &'static str,
        connect: String,
        cause: std::io::Error,
    },
    #[error("{what} {connect}: {cause}")]
    Http {
        what: &'static str,
        connect: String,
        cause: hyper::Error,
    },
    #[error("{method} {path}: {status} {body}")]
    Status {
        method: &'static str,
        path: String,
        status: u16,
        body: String,
    },
    #[error("GET {path}: {why}")]
    Lookup { path: String, why: LookupError },
}

/// What is wrong with a lookup's answer.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LookupError {
    #[error("the answer is not JSON: {0}")]
    NotJson(#[from] serde_json::Error),
    #[error("the answer has no node.uuid")]
    NoUuid,
    #[error("the answer has no positive config.heartbeat_timeout, which IPA requires")]
    NoHeartbeatTimeout,
}

impl<'a> Session<'a> {
    fn new(api: &'a Api) -> Session<'a> {
        Session { api, sender: None }
    }

    /// One request, bounded by [`REQUEST_TIMEOUT`] per attempt: the status and the
    /// body, or what went wrong. A failure on a kept connection (the API may have
    /// closed it just then) is tried once more on a new one, as `requests` does; lookups
    /// and heartbeats may be repeated.
    async fn call(
        &mut self,
        method: Method,
        path: &str,
        microversion: &str,
        body: Option<Value>,
    ) -> Result<(u16, Bytes), CallError> {
        let reused = self.sender.as_ref().is_some_and(|s| !s.is_closed());
        let req = self.request(method.clone(), path, microversion, body.clone())?;
        match tokio::time::timeout(REQUEST_TIMEOUT, self.exchange(req)).await {
            Ok(Err(_)) if reused => {
                let req = self.request(method, path, microversion, body)?;
                tokio::time::timeout(REQUEST_TIMEOUT, self.exchange(req))
                    .await
                    .unwrap_or(Err(CallError::Timeout(REQUEST_TIMEOUT)))
            }
            Ok(r) => r,
            Err(_) => Err(CallError::Timeout(REQUEST_TIMEOUT)),
        }
    }

    fn request(
        &self,
        method: Method,
        path: &str,
        microversion: &str,
        body: Option<Value>,
    ) -> Result<Request<Full<Bytes>>, CallError> {
        let mut req = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.api.prefix))
            .header(header::HOST, &self.api.authority)
            .header(header::ACCEPT, "application/json")
            .header(
                header::USER_AGENT,
                "ironic-python-agent (ironic-fake-agent)",
            )
            .header("x-openstack-ironic-api-version", microversion);
        if body.is_some() {
            req = req.header(header::CONTENT_TYPE, "application/json");
        }
        let body = body.map(|b| Bytes::from(b.to_string())).unwrap_or_default();
        Ok(req.body(Full::new(body))?)
    }

    /// Sends `req` on the kept connection, or a new one if there is none or the API
    /// closed it. The connection is kept only after a whole answer was read.
    async fn exchange(&mut self, req: Request<Full<Bytes>>) -> Result<(u16, Bytes), CallError> {
        let connect = &self.api.connect;
        let mut sender = match self.sender.take() {
            Some(s) if !s.is_closed() => s,
            _ => self.connect().await?,
        };
        let http = |what, cause| CallError::Http {
            what,
            connect: connect.clone(),
            cause,
        };
        sender.ready().await.map_err(|e| http("connection to", e))?;
        let resp = sender
            .send_request(req)
            .await
            .map_err(|e| http("sending to", e))?;
        let status = resp.status().as_u16();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| http("reading the answer of", e))?
            .to_bytes();
        self.sender = Some(sender);
        Ok((status, body))
    }

    async fn connect(&self) -> Result<SendRequest<Full<Bytes>>, CallError> {
        let connect = &self.api.connect;
        let stream = TcpStream::connect(connect)
            .await
            .map_err(|cause| CallError::Io {
                what: "connecting to",
                connect: connect.clone(),
                cause,
            })?;
        let _ = stream.set_nodelay(true);
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|cause| CallError::Http {
                what: "HTTP handshake with",
                connect: connect.clone(),
                cause,
            })?;
        // Ends when the sender is dropped or the API closes the connection.
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(sender)
    }
}

/// What the lookup found.
#[derive(Debug, Clone, PartialEq)]
struct Found {
    uuid: String,
    /// `config.heartbeat_timeout`, seconds.
    heartbeat_timeout: f64,
    /// `config.agent_token` as sent.
    token: Option<String>,
    /// `config.agent_md5_checksum_enable`.
    md5_enabled: bool,
}

/// The agent's life towards the API: lookup, then heartbeats, until stopped.
pub(super) async fn run(inner: Arc<Inner>, api: Api) {
    let mut session = Session::new(&api);
    let Some(found) = lookup(&inner, &mut session).await else {
        return;
    };
    adopt(&inner, &found);
    heartbeats(&inner, &mut session, &found).await;
}

/// Looks up until found or stopped (`None`).
async fn lookup(inner: &Inner, session: &mut Session<'_>) -> Option<Found> {
    let path = format!(
        "/v1/lookup?addresses={}",
        ironic_model::percent::encode(&inner.cfg.macs.join(","))
    );
    let mut pause = LOOKUP_FIRST_RETRY;
    let mut failing = false;
    loop {
        let attempt = tokio::select! {
            r = async {
                inner.api_calls.fetch_add(1, Ordering::SeqCst);
                lookup_once(session, &path).await
            } => r,
            _ = inner.stopped() => return None,
        };
        match attempt {
            Ok(found) => return Some(found),
            // Once per streak of failures: a node not yet waiting for its agent makes
            // many.
            Err(e) if !failing => {
                failing = true;
                eprintln!(
                    "fake agent {}: lookup failed, retrying until it works: {e}",
                    inner.url
                );
            }
            Err(_) => {}
        }
        tokio::select! {
            _ = tokio::time::sleep(jitter(pause, 0.5, 1.0)) => {}
            _ = inner.stopped() => return None,
        }
        pause = (pause * 2).min(LOOKUP_MAX_RETRY);
    }
}

async fn lookup_once(session: &mut Session<'_>, path: &str) -> Result<Found, CallError> {
    let (status, body) = session
        .call(Method::GET, path, LOOKUP_VERSION, None)
        .await?;
    if status != 200 {
        return Err(CallError::Status {
            method: "GET",
            path: path.to_string(),
            status,
            body: quote(&body),
        });
    }
    let lookup = |why| CallError::Lookup {
        path: path.to_string(),
        why,
    };
    let v: Value = serde_json::from_slice(&body).map_err(|e| lookup(e.into()))?;
    parse_lookup(&v).map_err(lookup)
}

/// The parts of a lookup answer the agent uses.
fn parse_lookup(v: &Value) -> Result<Found, LookupError> {
    let uuid = v
        .pointer("/node/uuid")
        .and_then(Value::as_str)
        .ok_or(LookupError::NoUuid)?;
    let heartbeat_timeout = v
        .pointer("/config/heartbeat_timeout")
        .and_then(Value::as_f64)
        .filter(|t| *t > 0.0)
        .ok_or(LookupError::NoHeartbeatTimeout)?;
    Ok(Found {
        uuid: uuid.to_string(),
        heartbeat_timeout,
        token: v
            .pointer("/config/agent_token")
            .and_then(Value::as_str)
            .map(str::to_string),
        md5_enabled: v
            .pointer("/config/agent_md5_checksum_enable")
            .and_then(Value::as_bool)
            .unwrap_or(false),
    })
}

/// Records the node and picks the token, as IPA does: a real token from the lookup
/// wins; `******` (already handed out) or a token too short to be one leaves the
/// token known in advance, if any.
fn adopt(inner: &Inner, found: &Found) {
    let mut state = inner.state();
    state.node_uuid = Some(found.uuid.clone());
    state.md5_enabled = found.md5_enabled;
    match found.token.as_deref() {
        Some(t) if t.len() >= MIN_TOKEN_LEN => state.token = Some(t.to_string()),
        Some(MASKED_TOKEN) if state.token.is_none() => eprintln!(
            "fake agent {}: the lookup says node {}'s token was already handed out and \
             none was given in advance (AgentConfig::token): commands and heartbeats \
             will be refused",
            inner.url, found.uuid
        ),
        Some(MASKED_TOKEN) | None => {}
        Some(_) => eprintln!(
            "fake agent {}: ignoring a token shorter than {MIN_TOKEN_LEN} characters \
             from the lookup of node {}",
            inner.url, found.uuid
        ),
    }
}

/// Why the heartbeat loop woke.
#[derive(PartialEq, Eq)]
enum Wake {
    Due,
    Asked,
}

/// Heartbeats until stopped: at once, then every interval, and when asked (a forced
/// heartbeat waits until [`super::AgentConfig::forced_heartbeat_min_interval`] has
/// passed since the previous one, as IPA's 5 s).
async fn heartbeats(inner: &Inner, session: &mut Session<'_>, found: &Found) {
    let path = format!(
        "/v1/heartbeat/{}",
        ironic_model::percent::encode(&found.uuid)
    );
    let mut next = Instant::now();
    let mut last_sent: Option<Instant> = None;
    let mut failing = false;
    loop {
        let wake = tokio::select! {
            biased;
            _ = inner.stopped() => return,
            _ = inner.beat_wake.notified() => Wake::Asked,
            _ = tokio::time::sleep_until(next) => Wake::Due,
        };
        if wake == Wake::Asked {
            let now = inner.beat_now.swap(false, Ordering::SeqCst);
            let forced = inner.beat_forced.load(Ordering::SeqCst);
            if !now && !forced {
                // A wake-up left from a heartbeat that already went.
                continue;
            }
            if let (false, Some(last)) = (now, last_sent) {
                let earliest = last + inner.cfg.forced_heartbeat_min_interval;
                tokio::select! {
                    _ = tokio::time::sleep_until(earliest) => {}
                    _ = inner.stopped() => return,
                }
            }
        }
        // This heartbeat answers every request made so far.
        inner.beat_now.store(false, Ordering::SeqCst);
        inner.beat_forced.store(false, Ordering::SeqCst);
        if !inner.may_heartbeat() {
            next = Instant::now() + interval(inner, found);
            continue;
        }
        inner.api_calls.fetch_add(1, Ordering::SeqCst);
        let sent = tokio::select! {
            r = beat(inner, session, &path) => r,
            _ = inner.stopped() => return,
        };
        last_sent = Some(Instant::now());
        match sent {
            Ok(()) => {
                inner.heartbeats.fetch_add(1, Ordering::SeqCst);
                failing = false;
                next = Instant::now() + interval(inner, found);
            }
            Err(e) => {
                if !failing {
                    eprintln!("fake agent {}: heartbeat failed, retrying: {e}", inner.url);
                }
                failing = true;
                next = Instant::now() + retry(inner);
            }
        }
    }
}

/// One heartbeat; `Ok` only on 202.
async fn beat(inner: &Inner, session: &mut Session<'_>, path: &str) -> Result<(), CallError> {
    let token = inner.state().token.clone();
    let body = json!({
        "callback_url": inner.url,
        "agent_token": token,
        "agent_version": inner.cfg.version,
    });
    let (status, answer) = session
        .call(Method::POST, path, HEARTBEAT_VERSION, Some(body))
        .await?;
    match status {
        202 => Ok(()),
        _ => Err(CallError::Status {
            method: "POST",
            path: path.to_string(),
            status,
            body: quote(&answer),
        }),
    }
}

/// The time to the next periodic heartbeat.
fn interval(inner: &Inner, found: &Found) -> Duration {
    inner.cfg.heartbeat_interval.unwrap_or_else(|| {
        let timeout = Duration::try_from_secs_f64(found.heartbeat_timeout)
            .unwrap_or(Duration::from_secs(300));
        jitter(timeout, 0.3, 0.6)
    })
}

/// The time to the next try after a failed heartbeat.
fn retry(inner: &Inner) -> Duration {
    let ipa = jitter(HEARTBEAT_RETRY, 1.0, 2.0);
    match inner.cfg.heartbeat_interval {
        Some(i) => ipa.min(i),
        None => ipa,
    }
}

/// The start of an answer's body, for a log line.
fn quote(body: &[u8]) -> String {
    String::from_utf8_lossy(body).chars().take(200).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_urls_keep_their_prefix_and_default_to_port_80() {
        let a = Api::parse("http://127.0.0.1:6385").unwrap();
        assert_eq!(
            (a.connect.as_str(), a.prefix.as_str()),
            ("127.0.0.1:6385", "")
        );
        let a = Api::parse("http://localhost/baremetal/").unwrap();
        assert_eq!(a.connect, "localhost:80");
        assert_eq!(a.authority, "localhost");
        assert_eq!(a.prefix, "/baremetal");
        let a = Api::parse("http://[::1]").unwrap();
        assert_eq!(a.connect, "[::1]:80");
        let a = Api::parse("http://[::1]:6385").unwrap();
        assert_eq!(a.connect, "[::1]:6385");
        for bad in [
            "https://127.0.0.1:6385",
            "127.0.0.1:6385",
            "http://",
            "http://h?x=1",
        ] {
            let e = Api::parse(bad).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{bad}");
        }
    }

    #[test]
    fn a_lookup_answer_needs_a_uuid_and_a_heartbeat_timeout() {
        let ok = json!({"node": {"uuid": "u"}, "config": {"heartbeat_timeout": 300, "agent_token": "t"}});
        let found = parse_lookup(&ok).unwrap();
        assert_eq!(found.uuid, "u");
        assert_eq!(found.heartbeat_timeout, 300.0);
        assert_eq!(found.token.as_deref(), Some("t"));
        assert!(!found.md5_enabled);
        assert!(parse_lookup(&json!({"node": {"uuid": "u"}, "config": {}})).is_err());
        assert!(parse_lookup(&json!({"config": {"heartbeat_timeout": 1}})).is_err());
    }

    #[test]
    fn macs_are_percent_encoded_as_requests_does() {
        assert_eq!(
            ironic_model::percent::encode("52:54:00:aa:bb:cc,52:54:00:aa:bb:cd"),
            "52%3A54%3A00%3Aaa%3Abb%3Acc%2C52%3A54%3A00%3Aaa%3Abb%3Acd"
        );
    }
}
