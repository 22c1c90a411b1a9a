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

    /// `GET url` with `headers` (string values; others sent as their JSON text),
    /// bounded by `timeout`: the status code, or why there is none.
    pub async fn status(
        &self,
        url: &str,
        headers: &Map<String, Value>,
        timeout: Duration,
    ) -> Result<u16, GetError> {
        let uri: hyper::Uri = url.parse().map_err(GetError::InvalidUrl)?;
        match uri.scheme_str() {
            Some("http" | "https") => {}
            _ => return Err(GetError::Scheme),
        }
        if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
            return Err(GetError::Credentials);
        }
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
