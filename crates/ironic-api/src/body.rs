//! Request bodies: size-limited, parsed as JSON, with 400/413 (never 500) on bad input.

use axum::body::Body;
use axum::extract::{FromRequest, Request};
use axum::http::header;
use serde_json::Value;

use crate::AppState;
use crate::error::ApiError;

/// The raw bytes of a body within `[api] max_request_body_bytes`.
pub async fn read_limited(
    body: Body,
    headers: &axum::http::HeaderMap,
    limit: usize,
) -> Result<Vec<u8>, ApiError> {
    if let Some(len) = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        && len > limit as u64
    {
        return Err(ApiError::TooLarge(limit));
    }
    axum::body::to_bytes(body, limit)
        .await
        .map(|b| b.to_vec())
        .map_err(|_| ApiError::TooLarge(limit))
}

/// A JSON request body. Empty or malformed bodies are 400 with the parser's reason.
pub struct JsonBody(pub Value);

impl FromRequest<AppState> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let (parts, body) = req.into_parts();
        let bytes = read_limited(body, &parts.headers, state.settings.max_body).await?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Err(ApiError::invalid(
                "The request body is empty; a JSON document is expected.",
            ));
        }
        serde_json::from_slice(&bytes)
            .map(JsonBody)
            .map_err(|e| ApiError::invalid(format!("The request body is not valid JSON: {e}")))
    }
}

/// A body that must be empty (e.g. `PUT /v1/nodes/{node}/traits/{trait}`).
pub struct EmptyBody;

impl FromRequest<AppState> for EmptyBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let (parts, body) = req.into_parts();
        let bytes = read_limited(body, &parts.headers, state.settings.max_body).await?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            Ok(EmptyBody)
        } else {
            Err(ApiError::invalid("This request does not accept a body."))
        }
    }
}
