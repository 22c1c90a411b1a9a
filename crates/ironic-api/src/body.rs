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
    if let Some(len) = declared_length(headers)
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

/// The right to hold a body larger than `[api] max_request_body_bytes` (one of `[api]
/// large_bodies_at_once`): kept by the handler as long as the parsed body lives.
#[must_use]
pub struct LargeBody(#[allow(dead_code)] Option<tokio::sync::OwnedSemaphorePermit>);

impl LateBody {
    /// The body as JSON, at most `limit` bytes, within `[api] body_read_timeout`. A
    /// body larger than `[api] max_request_body_bytes` (as declared, or once that many
    /// bytes came) waits for one of `[api] large_bodies_at_once` first; the document
    /// may hold `[api] max_json_values` values, or `large_body_json_values` when large.
    pub async fn json(self, st: &AppState, limit: usize) -> Result<(Value, LargeBody), ApiError> {
        let (v, large, _) = self.json_guarded(st, limit, || async { Ok(()) }).await?;
        Ok((v, large))
    }

    /// [`LateBody::json`], with `guard` (an authorization, say) run before a body
    /// larger than `[api] max_request_body_bytes` is read past that size: a caller it
    /// refuses never makes the API receive more. Small bodies are read first, so that
    /// their errors come in upstream's order; `guard`'s answer is returned when it ran.
    pub async fn json_guarded<T, F, Fut>(
        self,
        st: &AppState,
        limit: usize,
        guard: F,
    ) -> Result<(Value, LargeBody, Option<T>), ApiError>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<T, ApiError>>,
    {
        use http_body_util::BodyExt;
        let mut guard = Some(guard);
        let mut guarded = None;
        let s = &st.settings;
        let deadline = tokio::time::Instant::now() + s.body_timeout;
        let declared = declared_length(&self.headers);
        if declared.is_some_and(|len| len > limit as u64) {
            return Err(ApiError::TooLarge(limit));
        }
        let large = |st: &AppState| {
            let sem = st.settings.large_bodies.clone();
            async move {
                match tokio::time::timeout_at(deadline, sem.acquire_owned()).await {
                    Ok(Ok(p)) => Ok(p),
                    _ => {
                        metrics::counter!("ironic_api_large_bodies_refused_total").increment(1);
                        Err(ApiError::LargeBodiesBusy)
                    }
                }
            }
        };
        let mut permit = None;
        if declared.is_some_and(|len| len > s.max_body as u64) {
            if let Some(g) = guard.take() {
                guarded = Some(g().await?);
            }
            permit = Some(large(st).await?);
        }
        let mut body = self.body;
        // The declared size at once (no doubling past it), within what may be held.
        let room = if permit.is_some() { limit } else { s.max_body };
        let mut bytes = Vec::with_capacity(declared.map_or(0, |l| l as usize).min(room));
        loop {
            let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
                Err(_) => return Err(ApiError::BodyTimeout(s.body_timeout)),
                Ok(None) => break,
                Ok(Some(Err(_))) => return Err(ApiError::TooLarge(limit)),
                Ok(Some(Ok(f))) => f,
            };
            let Ok(data) = frame.into_data() else {
                continue;
            };
            if bytes.len() + data.len() > limit {
                return Err(ApiError::TooLarge(limit));
            }
            if permit.is_none() && bytes.len() + data.len() > s.max_body {
                if let Some(g) = guard.take() {
                    guarded = Some(g().await?);
                }
                permit = Some(large(st).await?);
            }
            bytes.extend_from_slice(&data);
        }
        let most = match permit {
            Some(_) => s.large_body_json_values,
            None => s.max_json_values,
        };
        check_values(&bytes, most)?;
        Ok((parse_json(&bytes)?, LargeBody(permit), guarded))
    }
}

/// The length a request declares (`Content-Length`).
fn declared_length(headers: &axum::http::HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
}

/// Refuses (413) a document of more than `most` JSON values before it is parsed: a
/// parsed value costs up to `ironic_model::json_size::VALUE_BYTES`.
pub fn check_values(bytes: &[u8], most: usize) -> Result<(), ApiError> {
    if ironic_model::json_size::values(bytes) > most {
        metrics::counter!("ironic_api_bodies_over_json_values_total").increment(1);
        return Err(ApiError::TooManyValues(most));
    }
    Ok(())
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
        let bytes = read_limited(body, &parts.headers, s.max_body, s.body_timeout).await?;
        check_values(&bytes, s.max_json_values)?;
        Ok(RawBody(bytes))
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
