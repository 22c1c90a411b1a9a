//! Virtual media of a node: `POST /v1/nodes/{node}/vmedia` inserts an image as a
//! virtual CD, floppy or disk and `DELETE` ejects them (1.89); `GET` reports them (1.93).
//! Checked here against upstream's schema and URL schemes, done by the node's conductor
//! through its management interface (`ironic-conductor` `management.rs`).

use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use ironic_model::Error;
use ironic_model::patch::py_repr;
use ironic_rpc::NodeRef;
use ironic_rpc::calls::{AttachVirtualMedia, DetachVirtualMedia, GetVirtualMedia};
use serde_json::Value;

use crate::body::{JsonBody, P};
use crate::error::{ApiError, route_since};
use crate::nodes::{authorized_node, call_on_node};
use crate::policy::{Authz, Policy};
use crate::query::Query;
use crate::{AppState, Req, json_response};

type ApiResult = Result<Response, ApiError>;

/// Upstream's `VMEDIA_DEVICES`, in its order.
const DEVICES: &[&str] = &["disk", "cdrom", "floppy"];
/// The URL schemes an image may be served from (upstream's
/// `VMEDIA_SUPPORTED_URL_SCHEMES`).
const SCHEMES: &[&str] = &["http", "https", "nfs", "cifs", "smb"];
const SOURCES: &[&str] = &["http", "local", "swift"];

fn schema(msg: impl std::fmt::Display) -> ApiError {
    ApiError::invalid(format!("Schema error for vmedia: {msg}"))
}

fn one_of(v: &Value, allowed: &[&str]) -> Result<String, ApiError> {
    match v.as_str() {
        Some(s) if allowed.contains(&s) => Ok(s.to_string()),
        Some(_) => Err(schema(format_args!(
            "{} is not one of [{}]",
            py_repr(v),
            allowed
                .iter()
                .map(|a| format!("'{a}'"))
                .collect::<Vec<_>>()
                .join(", ")
        ))),
        None => Err(schema(format_args!(
            "{} is not of type 'string'",
            py_repr(v)
        ))),
    }
}

/// The scheme of a URL as Python's `urlparse` reads it (empty when there is none).
fn scheme(url: &str) -> String {
    match url.split_once(':') {
        Some((s, _))
            if s.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')) =>
        {
            s.to_ascii_lowercase()
        }
        _ => String::new(),
    }
}

pub async fn attach(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
    JsonBody(body): JsonBody,
) -> ApiResult {
    route_since(req.version, 89)?;
    let Value::Object(body) = body else {
        return Err(schema(format_args!(
            "{} is not of type 'object'",
            py_repr(&body)
        )));
    };
    for required in ["device_type", "image_url"] {
        if !body.contains_key(required) {
            return Err(schema(format_args!("'{required}' is a required property")));
        }
    }
    if let Some(k) = body
        .keys()
        .find(|k| !["device_type", "image_url", "image_download_source"].contains(&k.as_str()))
    {
        return Err(schema(format_args!(
            "Additional properties are not allowed ('{k}' was unexpected)"
        )));
    }
    let device_type = one_of(&body["device_type"], DEVICES)?;
    let Some(image_url) = body["image_url"].as_str().map(str::to_string) else {
        return Err(schema(format_args!(
            "{} is not of type 'string'",
            py_repr(&body["image_url"])
        )));
    };
    let image_download_source = match body.get("image_download_source") {
        None => "local".to_string(),
        Some(v) => one_of(v, SOURCES)?,
    };
    let s = scheme(&image_url);
    if !SCHEMES.contains(&s.as_str()) {
        return Err(ApiError::invalid(format!(
            "Unsupported or missing URL scheme: {s}"
        )));
    }
    call_on_node(
        &st,
        &authz,
        &req,
        &ident,
        q.as_deref(),
        Policy::NodeVmediaAttach,
        |node| AttachVirtualMedia {
            node,
            device_type,
            image_url,
            image_download_source,
        },
    )
    .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub async fn detach(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
) -> ApiResult {
    route_since(req.version, 89)?;
    let query = Query::parse(q.as_deref())?;
    query.only(&["device_types"])?;
    let device_types = match query.get("device_types") {
        None => None,
        Some(list) => {
            let types: Vec<String> = list
                .split(',')
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(str::to_string)
                .collect();
            let invalid: Vec<&str> = types
                .iter()
                .map(String::as_str)
                .filter(|t| !DEVICES.contains(t))
                .collect();
            if !invalid.is_empty() {
                return Err(ApiError::invalid(format!(
                    "Invalid device type(s) {} (valid are {})",
                    invalid.join(", "),
                    DEVICES.join(", ")
                )));
            }
            // An empty list ejects everything, as upstream's.
            (!types.is_empty()).then_some(types)
        }
    };
    call_on_node(
        &st,
        &authz,
        &req,
        &ident,
        None,
        Policy::NodeVmediaDetach,
        |node| DetachVirtualMedia { node, device_types },
    )
    .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub async fn get(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
) -> ApiResult {
    route_since(req.version, 89)?;
    Query::parse(q.as_deref())?.only(&[])?;
    let node = authorized_node(&st, &authz, &ident, req.version, Policy::NodeVmediaGet).await?;
    // Between 1.89 and 1.93 the route exists without GET: upstream's plain not-found.
    if !req.version.at_least(93) {
        return Err(Error::NotFound("The resource could not be found.".into()).into());
    }
    let node = NodeRef::from(&node);
    let doc = st
        .conductor
        .call(&req.ctx, GetVirtualMedia { node })
        .await?;
    Ok(json_response(StatusCode::OK, &doc.0))
}

#[cfg(test)]
mod tests {
    #[test]
    fn schemes_read_as_python_does() {
        assert_eq!(super::scheme("http://192.0.2.1/boot.iso"), "http");
        assert_eq!(super::scheme("NFS://host/x"), "nfs");
        assert_eq!(super::scheme("file:///boot.iso"), "file");
        assert_eq!(super::scheme("/boot.iso"), "");
        assert_eq!(super::scheme("192.0.2.1:80/boot.iso"), "");
    }
}
