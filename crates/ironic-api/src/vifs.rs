//! `/v1/nodes/{node}/vifs` (1.28): list, attach and detach virtual interfaces. Each goes
//! to the node's conductor, whose network interface decides (`ironic-conductor`
//! `nics.rs`): `noop` records nothing, `flat` records the VIF on a free port or port
//! group.

use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use ironic_model::ids::ResourceUuid;
use ironic_model::patch::py_repr;
use ironic_model::{PortUuid, PortgroupUuid};
use ironic_rpc::NodeRef;
use ironic_rpc::calls::{VifAttach, VifDetach, VifList};
use serde_json::{Value, json};

use crate::body::{JsonBody, P};
use crate::error::ApiError;
use crate::nodes::{authorized_node, call_on_node};
use crate::policy::{Authz, Policy};
use crate::query::Query;
use crate::{AppState, Req, json_response};

type ApiResult = Result<Response, ApiError>;

/// Below 1.28 the route does not exist (a routing 404, as upstream).
fn gate(req: &Req) -> Result<(), ApiError> {
    crate::error::route_since(req.version, 28)
}

pub async fn list(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
) -> ApiResult {
    gate(&req)?;
    let p = Policy::NodeVifList;
    let vifs = call_on_node(&st, &authz, &req, &ident, q.as_deref(), p, |node| VifList {
        node,
    })
    .await?;
    let list: Vec<Value> = vifs.0.into_iter().map(|id| json!({ "id": id })).collect();
    Ok(json_response(StatusCode::OK, &json!({ "vifs": list })))
}

/// An optional uuid of the attach body.
fn uuid_arg<T: ResourceUuid>(
    body: &serde_json::Map<String, Value>,
    key: &str,
) -> Result<Option<T>, ApiError> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => T::parse(s)
            .map(Some)
            .ok_or_else(|| ApiError::invalid(format!("Expected UUID for {key}: {s}"))),
        Some(other) => Err(ApiError::invalid(format!(
            "Schema error for vif: {} is not of type 'string'",
            py_repr(other)
        ))),
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
    gate(&req)?;
    Query::parse(q.as_deref())?.only(&[])?;
    let node = authorized_node(&st, &authz, &ident, req.version, Policy::NodeVifAttach).await?;
    let Value::Object(body) = body else {
        return Err(ApiError::invalid(format!(
            "Schema error for vif: {} is not of type 'object'",
            py_repr(&body)
        )));
    };
    let vif_id = match body.get("id") {
        Some(Value::String(s)) if !s.is_empty() && s.len() <= 255 => s.clone(),
        Some(Value::String(s)) => {
            return Err(ApiError::invalid(format!(
                "Schema error for vif: {} is not a valid VIF id",
                ironic_model::names::py_repr_str(s)
            )));
        }
        Some(other) => {
            return Err(ApiError::invalid(format!(
                "Schema error for vif: {} is not of type 'string'",
                py_repr(other)
            )));
        }
        None => {
            return Err(ApiError::invalid(
                "Schema error for vif: 'id' is a required property",
            ));
        }
    };
    let port_uuid = uuid_arg::<PortUuid>(&body, "port_uuid")?;
    let portgroup_uuid = uuid_arg::<PortgroupUuid>(&body, "portgroup_uuid")?;
    if port_uuid.is_some() && portgroup_uuid.is_some() && req.version.at_least(67) {
        return Err(ApiError::invalid(
            "Cannot specify both port_uuid and portgroup_uuid",
        ));
    }
    st.conductor
        .call(
            &req.ctx,
            VifAttach {
                node: NodeRef::from(&node),
                vif_id,
                // Before 1.67 both may be given; the port wins, as upstream.
                portgroup_uuid: portgroup_uuid.filter(|_| port_uuid.is_none()),
                port_uuid,
            },
        )
        .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub async fn detach(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    P((ident, vif_id)): P<(String, String)>,
    RawQuery(q): RawQuery,
) -> ApiResult {
    gate(&req)?;
    let p = Policy::NodeVifDetach;
    call_on_node(&st, &authz, &req, &ident, q.as_deref(), p, |node| {
        VifDetach { node, vif_id }
    })
    .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
