//! `GET /v1/nodes/{node}/inventory` (1.81): what the node's last inspection found
//! (`inventory`) and what its processing added (`plugin_data`), as the conductor stored
//! them (`crates/ironic-conductor/src/provision/inspecting.rs`).

use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use ironic_model::Error;
use serde_json::json;

use crate::body::P;
use crate::error::{ApiError, route_since};
use crate::nodes::authorized_node;
use crate::policy::{Authz, Policy};
use crate::query::Query;
use crate::{AppState, Req, json_response};

pub async fn get(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
) -> Result<Response, ApiError> {
    route_since(req.version, 81)?;
    Query::parse(q.as_deref())?.only(&[])?;
    let node = authorized_node(&st, &authz, &ident, req.version, Policy::NodeInventoryGet).await?;
    // Upstream names the node by its internal id; we name it as clients know it.
    let (inventory, plugin_data) = st.db.inventory_get(node.id.0).await?.ok_or_else(|| {
        Error::NotFound(format!(
            "Node inventory record for node {} could not be found.",
            node.uuid
        ))
    })?;
    Ok(json_response(
        StatusCode::OK,
        &json!({"inventory": inventory, "plugin_data": plugin_data}),
    ))
}
