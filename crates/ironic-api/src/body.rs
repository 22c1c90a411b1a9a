//! Request bodies and path parameters: size-limited, parsed as JSON, with 400/413 (never
//! 500) on bad input.

use axum::body::Body;
use axum::extract::{FromRequest, Request};
use axum::http::header;
use serde_json::Value;

use crate::AppState;
use crate::error::ApiError;

/// The raw bytes of a body within `limit` bytes, received within `timeout` (a client
/// that sends a byte at a time holds a request slot no longer than that: 408).
pub async fn read_limited(
    body: Body,
    headers: &axum::http::HeaderMap,
    limit: usize,
    timeout: std::time::Duration,
) -> Result<Vec<u8>, ApiError> {
    if let Some(len) = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        && len > limit as u64
    {
        return Err(ApiError::TooLarge(limit));
    }
    match tokio::time::timeout(timeout, axum::body::to_bytes(body, limit)).await {
        Ok(Ok(b)) => Ok(b.to_vec()),
        Ok(Err(_)) => Err(ApiError::TooLarge(limit)),
        Err(_) => Err(ApiError::BodyTimeout(timeout)),
    }
}

/// A body left unread until the handler has made the checks that need none (a disabled
/// route, an old version): then [`LateBody::json`] reads it within its limit and
/// [`parse_json`]s it.
pub struct LateBody {
    headers: axum::http::HeaderMap,
    body: Body,
}

impl FromRequest<AppState> for LateBody {
    type Rejection = std::convert::Infallible;

    async fn from_request(req: Request, _: &AppState) -> Result<Self, Self::Rejection> {
        let (parts, body) = req.into_parts();
        Ok(LateBody {
            headers: parts.headers,
            body,
        })
    }
}

impl LateBody {
    /// The body as JSON, at most `limit` bytes, within `[api] body_read_timeout`.
    pub async fn json(self, st: &AppState, limit: usize) -> Result<Value, ApiError> {
        let bytes = read_limited(self.body, &self.headers, limit, st.settings.body_timeout).await?;
        parse_json(&bytes)
    }
}

/// Whether any string (or key) in the document holds a NUL character, which no
/// database column can store.
fn has_nul(v: &Value) -> bool {
    match v {
        Value::String(s) => s.contains('\0'),
        Value::Array(a) => a.iter().any(has_nul),
        Value::Object(o) => o.iter().any(|(k, v)| k.contains('\0') || has_nul(v)),
        _ => false,
    }
}

/// Parses a JSON body. Empty or malformed bodies are 400 with the parser's reason.
pub fn parse_json(bytes: &[u8]) -> Result<Value, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::invalid(
            "The request body is empty; a JSON document is expected.",
        ));
    }
    let v: Value = serde_json::from_slice(bytes)
        .map_err(|e| ApiError::invalid(format!("The request body is not valid JSON: {e}")))?;
    if has_nul(&v) {
        return Err(ApiError::invalid(
            "Strings in the request body must not contain NUL characters.",
        ));
    }
    Ok(v)
}

/// The raw body within the size limit, for handlers that check something (such as the
/// microversion) before they look at it.
pub struct RawBody(pub Vec<u8>);

impl FromRequest<AppState> for RawBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let (parts, body) = req.into_parts();
        let s = &state.settings;
        read_limited(body, &parts.headers, s.max_body, s.body_timeout)
            .await
            .map(RawBody)
    }
}

impl RawBody {
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(u8::is_ascii_whitespace)
    }
}

/// A JSON request body (see [`parse_json`]).
pub struct JsonBody(pub Value);

impl FromRequest<AppState> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let RawBody(bytes) = RawBody::from_request(req, state).await?;
        parse_json(&bytes).map(JsonBody)
    }
}

/// Path parameters, with rejections (bad percent-encoding) in Ironic's error body.
pub struct P<T>(pub T);

impl<T, S> axum::extract::FromRequestParts<S> for P<T>
where
    T: serde::de::DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, Self::Rejection> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(v)) => Ok(P(v)),
            Err(e) => Err(ApiError::invalid(format!(
                "Invalid path: {}",
                e.body_text()
            ))),
        }
    }
}
