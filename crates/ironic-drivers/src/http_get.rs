//! A plain HTTP(S) GET for the `api-call` action of inspection rules: one request,
//! its status code back, the body read and dropped. Certificates are verified against
//! the public web roots; only `http` and `https` URLs are sent, and no credentials in
//! the URL (headers carry them).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{Map, Value};

use crate::tls::TlsConfigError;

/// The most of a response body read (and thrown away) before the connection is let go.
const MAX_BODY: usize = 1 << 20;

/// Why a GET has no status code. The text is what the rule's failure message shows
/// after `Request to <url> failed: `.
#[derive(Debug, thiserror::Error)]
pub enum GetError {
    #[error("invalid URL: {0}")]
    InvalidUrl(#[source] hyper::http::uri::InvalidUri),
    #[error("only http and https URLs are allowed")]
    Scheme,
    #[error("credentials in the URL are not allowed; use headers")]
    Credentials,
    #[error("invalid request: {0}")]
    InvalidRequest(#[source] hyper::http::Error),
    /// No TLS configuration could be made when the client was.
    #[error("TLS: {0}")]
    Tls(#[source] Arc<TlsConfigError>),
    /// No answer: connection refused, TLS handshake, reset...
    #[error(transparent)]
    Request(#[from] hyper_util::client::legacy::Error),
    #[error("timed out after {:.1} s", .0.as_secs_f64())]
    Timeout(Duration),
    /// The answer's body broke off.
    #[error("reading the answer: {0}")]
    Body(#[source] hyper::Error),
    /// A download answered with another status than 200.
    #[error("answered {0}")]
    Status(u16),
    /// A download larger than allowed.
    #[error("larger than {0} bytes")]
    TooLarge(u64),
    /// A download could not be written.
    #[error("cannot write {}", .path.display())]
    Write {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
}

#[derive(Clone)]
pub struct GetClient {
    /// `Err`: why no TLS configuration could be made (every call says it).
    http: Result<HttpClient<HttpsConnector<HttpConnector>, Empty<Bytes>>, Arc<TlsConfigError>>,
}

impl std::fmt::Debug for GetClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GetClient")
    }
}

impl Default for GetClient {
    fn default() -> Self {
        Self::new()
    }
}

impl GetClient {
    pub fn new() -> GetClient {
        GetClient {
            http: crate::tls::client_config(false, None)
                .map(|tls| crate::tls::https_client(tls, None))
                .map_err(Arc::new),
        }
    }

    /// Downloads `url` into the file `to` (created or replaced), at most `max_bytes`,
    /// within `timeout` for the whole transfer: the bytes written. A failure removes
    /// what was written.
    pub async fn download(
        &self,
        url: &str,
        to: &std::path::Path,
        max_bytes: u64,
        timeout: Duration,
    ) -> Result<u64, GetError> {
        use tokio::io::AsyncWriteExt;
        let uri = checked_uri(url)?;
        let req = hyper::Request::get(uri)
            .body(Empty::<Bytes>::new())
            .map_err(GetError::InvalidRequest)?;
        let http = self.http.as_ref().map_err(|e| GetError::Tls(e.clone()))?;
        let write = |source| GetError::Write {
            path: to.to_path_buf(),
            source,
        };
        let call = async {
            let resp = http.request(req).await?;
            if resp.status() != hyper::StatusCode::OK {
                return Err(GetError::Status(resp.status().as_u16()));
            }
            let mut file = tokio::fs::File::create(to).await.map_err(write)?;
            let mut body = resp.into_body();
            let mut written = 0u64;
            while let Some(frame) = body.frame().await {
                let frame = frame.map_err(GetError::Body)?;
                if let Some(data) = frame.data_ref() {
                    written += data.len() as u64;
                    if written > max_bytes {
                        return Err(GetError::TooLarge(max_bytes));
                    }
                    file.write_all(data).await.map_err(write)?;
                }
            }
            file.sync_all().await.map_err(write)?;
            Ok(written)
        };
        let outcome = tokio::time::timeout(timeout, call)
            .await
            .map_err(|_| GetError::Timeout(timeout))
            .and_then(|r| r);
        if outcome.is_err() {
            let _ = tokio::fs::remove_file(to).await;
        }
        outcome
    }

    /// `GET url` with `headers` (string values; others sent as their JSON text),
    /// bounded by `timeout`: the status code, or why there is none.
    pub async fn status(
        &self,
        url: &str,
        headers: &Map<String, Value>,
        timeout: Duration,
    ) -> Result<u16, GetError> {
        let uri = checked_uri(url)?;
        let mut req = hyper::Request::get(uri);
        for (k, v) in headers {
            let v = match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            req = req.header(k.as_str(), v);
        }
        let req = req
            .body(Empty::<Bytes>::new())
            .map_err(GetError::InvalidRequest)?;
        let http = self.http.as_ref().map_err(|e| GetError::Tls(e.clone()))?;
        let call = async {
            let resp = http.request(req).await?;
            let status = resp.status().as_u16();
            let mut body = resp.into_body();
            let mut read = 0usize;
            while read < MAX_BODY {
                match body.frame().await {
                    Some(Ok(f)) => read += f.data_ref().map_or(0, |d| d.len()),
                    _ => break,
                }
            }
            Ok::<u16, GetError>(status)
        };
        tokio::time::timeout(timeout, call)
            .await
            .map_err(|_| GetError::Timeout(timeout))?
    }
}

/// `url` parsed, an `http` or `https` one without credentials.
fn checked_uri(url: &str) -> Result<hyper::Uri, GetError> {
    let uri: hyper::Uri = url.parse().map_err(GetError::InvalidUrl)?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        _ => return Err(GetError::Scheme),
    }
    if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
        return Err(GetError::Credentials);
    }
    Ok(uri)
}
