//! `GET /v1/nodes/{node}/history[/{uuid}]` (1.78): the entries the node's conductor
//! recorded (`crates/ironic-conductor/src/history.rs`), oldest first. The list shows
//! `uuid`, `created_at`, `severity` and `event` (cut to 255 characters); `detail=true`
//! and a single entry add `event_type`, `conductor`, `user`, `project` (1.113) and
//! `state`, `target_provision_state`, `duration_seconds` (1.115).

use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use ironic_model::Version;
use ironic_model::history::{HistoryEntry, not_found};
use serde_json::{Map, Value, json};

use crate::body::P;
use crate::error::{ApiError, route_since};
use crate::nodes::authorized_node;
use crate::policy::{Authz, Policy};
use crate::query::Query;
use crate::view::Ts;
use crate::{AppState, Base, Req, json_response};

fn entry_doc(base: &str, node_uuid: &str, e: &HistoryEntry, detail: bool, v: Version) -> Value {
    let mut m = Map::new();
    m.insert("uuid".into(), json!(e.uuid));
    m.insert("created_at".into(), json!(Ts(&e.created_at)));
    m.insert("severity".into(), json!(e.severity));
    if detail {
        m.insert("event_type".into(), json!(e.event_type));
        m.insert("event".into(), json!(e.event));
        m.insert("conductor".into(), json!(e.conductor));
        m.insert("user".into(), json!(e.user));
        if v.at_least(113) {
            m.insert("project".into(), json!(e.project));
        }
        if v.at_least(115) {
            m.insert("state".into(), json!(e.state));
            m.insert(
                "target_provision_state".into(),
                json!(e.target_provision_state),
            );
            m.insert("duration_seconds".into(), json!(e.duration_seconds));
        }
    } else {
        let event = if e.event.chars().count() > 255 {
            let cut: String = e.event.chars().take(251).collect();
            format!("{cut}...")
        } else {
            e.event.clone()
        };
        m.insert("event".into(), json!(event));
    }
    // Upstream gives only the self link.
    m.insert(
        "links".into(),
        json!([{"href": format!("{base}/v1/nodes/{node_uuid}/history/{}", e.uuid), "rel": "self"}]),
    );
    Value::Object(m)
}

pub async fn list(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    Base(base): Base,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
) -> Result<Response, ApiError> {
    let v = req.version;
    route_since(v, 78)?;
    let q = Query::parse(q.as_deref())?;
    q.only(&["detail", "limit", "marker", "sort_key", "sort_dir"])?;
    let detail = q.bool("detail")?.unwrap_or(false);
    let lp = q.list_params(st.settings.max_limit, Some(&["created_at", "id"]))?;
    let node = authorized_node(&st, &authz, &ident, v, Policy::NodeHistoryGet).await?;
    let marker = match lp.marker {
        None => None,
        Some(m) => Some(st.db.history_get(node.id.0, m).await?.id),
    };
    let entries = st
        .db
        .history_list(node.id.0, marker, lp.desc, lp.size())
        .await?;
    let list: Vec<Value> = entries
        .iter()
        .map(|e| entry_doc(&base, node.uuid.as_str(), e, detail, v))
        .collect();
    let last = entries.last().map(|e| e.uuid.as_str());
    let path = format!("nodes/{ident}/history");
    Ok(json_response(
        StatusCode::OK,
        &lp.page(&base, &path, "history", list, last),
    ))
}

pub async fn get_one(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    Base(base): Base,
    P((ident, uuid)): P<(String, String)>,
    RawQuery(q): RawQuery,
) -> Result<Response, ApiError> {
    let v = req.version;
    route_since(v, 78)?;
    Query::parse(q.as_deref())?.only(&[])?;
    let node = authorized_node(&st, &authz, &ident, v, Policy::NodeHistoryGet).await?;
    if ironic_model::ids::canonical_uuid(&uuid).is_none() {
        return Err(not_found(&uuid).into());
    }
    let e = st.db.history_get(node.id.0, &uuid).await?;
    Ok(json_response(
        StatusCode::OK,
        &entry_doc(&base, node.uuid.as_str(), &e, true, v),
    ))
}
