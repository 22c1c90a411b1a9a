//! One keep-alive HTTP/1.1 connection per worker (hyper's client connection, no pool):
//! the cheapest way to hold many requests in flight from one thread.

use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// Why a URL names no server this tool can talk to.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error("{0}: only http:// URLs are supported")]
    NotHttp(String),
    #[error("{0}: give the server's root URL, without a path")]
    HasPath(String),
    #[error("{url}")]
    Lookup {
        url: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}: no address")]
    NoAddress(String),
}

/// Why a connection could not be opened.
#[derive(Debug, thiserror::Error)]
enum ConnectError {
    #[error("connect")]
    Connect(#[source] std::io::Error),
    #[error("handshake")]
    Handshake(#[source] hyper::Error),
}

/// Where requests go: `http://host:port`, with the microversion every request carries.
#[derive(Clone, Debug)]
pub struct Target {
    pub addr: SocketAddr,
    pub authority: String,
    pub microversion: String,
}

impl Target {
    /// Parses `http://host:port` (no path, no TLS: a bench talks to a local server).
    pub async fn parse(url: &str, microversion: &str) -> Result<Target, TargetError> {
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| TargetError::NotHttp(url.to_string()))?;
        let authority = rest.trim_end_matches('/').to_string();
        if authority.contains('/') {
            return Err(TargetError::HasPath(url.to_string()));
        }
        let addr = tokio::net::lookup_host(&authority)
            .await
            .map_err(|source| TargetError::Lookup {
                url: url.to_string(),
                source,
            })?
            .next()
            .ok_or_else(|| TargetError::NoAddress(url.to_string()))?;
        Ok(Target {
            addr,
            authority,
            microversion: microversion.to_string(),
        })
    }
}

/// An answer: status (0 when the request could not be made) and body.
pub struct Answer {
    pub status: u16,
    pub body: Bytes,
}

impl Answer {
    pub fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
    pub fn describe(&self) -> String {
        let text = String::from_utf8_lossy(&self.body);
        let text: String = text.chars().take(200).collect();
        format!("{} {text}", self.status)
    }
}

/// How long one request may take, answer included.
const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

pub struct Conn {
    target: Target,
    sender: Option<SendRequest<Full<Bytes>>>,
}

impl Conn {
    pub fn new(target: &Target) -> Conn {
        Conn {
            target: target.clone(),
            sender: None,
        }
    }

    async fn connect(&mut self) -> Result<(), ConnectError> {
        let stream = TcpStream::connect(self.target.addr)
            .await
            .map_err(ConnectError::Connect)?;
        let _ = stream.set_nodelay(true);
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(ConnectError::Handshake)?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        self.sender = Some(sender);
        Ok(())
    }

    /// One request; a connection the server closed is reopened once (the request had
    /// not reached it).
    pub async fn call(&mut self, method: Method, path: &str, body: Option<&[u8]>) -> Answer {
        for attempt in 0..2 {
            if self.sender.as_ref().is_none_or(|s| s.is_closed())
                && let Err(e) = self.connect().await
            {
                return Answer {
                    status: 0,
                    body: Bytes::from(crate::chain(&e)),
                };
            }
            let Some(sender) = self.sender.as_mut() else {
                break;
            };
            if sender.ready().await.is_err() {
                self.sender = None;
                continue;
            }
            let mut req = Request::builder()
                .method(method.clone())
                .uri(path)
                .header("host", &self.target.authority)
                .header("accept", "application/json")
                .header("user-agent", "ironic-load/1")
                .header("x-openstack-ironic-api-version", &self.target.microversion);
            if body.is_some() {
                req = req.header("content-type", "application/json");
            }
            let req = match req.body(Full::new(Bytes::copy_from_slice(body.unwrap_or_default()))) {
                Ok(r) => r,
                Err(e) => {
                    return Answer {
                        status: 0,
                        body: Bytes::from(format!("request: {e}")),
                    };
                }
            };
            // Bounded: a server that stops answering ends the request, not the run.
            let sent = tokio::time::timeout(REQUEST_TIMEOUT, async {
                let resp = sender.send_request(req).await?;
                let status = resp.status().as_u16();
                let body = resp.into_body().collect().await;
                Ok::<_, hyper::Error>((status, body))
            })
            .await;
            let sent = match sent {
                Ok(r) => r,
                Err(_) => {
                    self.sender = None;
                    return Answer {
                        status: 0,
                        body: Bytes::from(format!("no answer within {REQUEST_TIMEOUT:?}")),
                    };
                }
            };
            match sent {
                Ok((status, body)) => {
                    return match body {
                        Ok(b) => Answer {
                            status,
                            body: b.to_bytes(),
                        },
                        Err(e) => {
                            self.sender = None;
                            Answer {
                                status: 0,
                                body: Bytes::from(format!("reading the answer: {e}")),
                            }
                        }
                    };
                }
                Err(e) => {
                    self.sender = None;
                    // Not sent at all (the connection was gone): once more.
                    if attempt == 0 && e.is_canceled() {
                        continue;
                    }
                    return Answer {
                        status: 0,
                        body: Bytes::from(format!("sending: {e}")),
                    };
                }
            }
        }
        Answer {
            status: 0,
            body: Bytes::from_static(b"connection closed"),
        }
    }
}
