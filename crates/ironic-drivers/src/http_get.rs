//! A plain HTTP(S) GET for the `api-call` action of inspection rules: one request,
//! its status code back, the body read and dropped. Certificates are verified against
//! the public web roots; only `http` and `https` URLs are sent, and no credentials in
//! the URL (headers carry them).

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{Map, Value};

/// The most of a response body read (and thrown away) before the connection is let go.
const MAX_BODY: usize = 1 << 20;

#[derive(Clone)]
pub struct GetClient {
    /// `Err`: why no TLS configuration could be made (every call says it).
    http: Result<HttpClient<HttpsConnector<HttpConnector>, Empty<Bytes>>, String>,
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
                .map(|tls| crate::tls::https_client(tls, None)),
        }
    }

    /// `GET url` with `headers` (string values; others sent as their JSON text),
    /// bounded by `timeout`: the status code, or why there is none.
    pub async fn status(
        &self,
        url: &str,
        headers: &Map<String, Value>,
        timeout: Duration,
    ) -> Result<u16, String> {
        let uri: hyper::Uri = url.parse().map_err(|e| format!("invalid URL: {e}"))?;
        match uri.scheme_str() {
            Some("http" | "https") => {}
            _ => return Err("only http and https URLs are allowed".into()),
        }
        if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
            return Err("credentials in the URL are not allowed; use headers".into());
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
            .map_err(|e| format!("invalid request: {e}"))?;
        let http = self.http.as_ref().map_err(|e| format!("TLS: {e}"))?;
        let call = async {
            let resp = http.request(req).await.map_err(|e| e.to_string())?;
            let status = resp.status().as_u16();
            let mut body = resp.into_body();
            let mut read = 0usize;
            while read < MAX_BODY {
                match body.frame().await {
                    Some(Ok(f)) => read += f.data_ref().map_or(0, |d| d.len()),
                    _ => break,
                }
            }
            Ok(status)
        };
        tokio::time::timeout(timeout, call)
            .await
            .map_err(|_| format!("timed out after {:.1} s", timeout.as_secs_f64()))?
    }
}
