//! `GET /v1/nodes/{node}/firmware` (1.86): the node's firmware components as its
//! firmware interface last reported them (the conductor records them after an
//! inspection, `provision/inspecting.rs` `cache_firmware`). Each shows `created_at`,
//! `updated_at` and the default fields, or those `fields` names; `vendor`, `model` and
//! `serial_number` from 1.114 (400 when named below, upstream's message).

use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use ironic_model::firmware::{FIELDS, FirmwareComponent};
use serde_json::{Map, Value, json};

use crate::body::P;
use crate::error::{ApiError, route_since};
use crate::nodes::authorized_node;
use crate::policy::{Authz, Policy};
use crate::query::{Query, field_list};
use crate::view::Ts;
use crate::{AppState, Req, json_response};

fn doc(c: &FirmwareComponent, fields: &[&str]) -> Value {
    let mut m = Map::new();
    m.insert("created_at".into(), json!(Ts(&c.created_at)));
    m.insert("updated_at".into(), json!(c.updated_at.as_ref().map(Ts)));
    for f in fields {
        let v = match *f {
            "component" => json!(c.component),
            "initial_version" => json!(c.initial_version),
            "current_version" => json!(c.current_version),
            "last_version_flashed" => json!(c.last_version_flashed),
            "vendor" => json!(c.vendor),
            "model" => json!(c.model),
            "serial_number" => json!(c.serial_number),
            _ => continue,
        };
        m.insert((*f).into(), v);
    }
    Value::Object(m)
}

pub async fn list(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
) -> Result<Response, ApiError> {
    let v = req.version;
    route_since(v, 86)?;
    let q = Query::parse(q.as_deref())?;
    q.only(&["fields", "detail"])?;
    // Accepted as upstream's schema does; the same fields either way.
    q.bool("detail")?;
    let known: Vec<&'static str> = FIELDS.iter().map(|(f, _)| *f).collect();
    let fields: Vec<&'static str> = match q.get("fields") {
        Some(list) => {
            let mut asked = field_list(
                list,
                &["created_at", "updated_at"]
                    .iter()
                    .chain(&known)
                    .copied()
                    .collect::<Vec<_>>(),
            )?;
            let mut newer: Vec<&str> = asked
                .iter()
                .filter(|f| {
                    FIELDS
                        .iter()
                        .any(|(n, since)| n == *f && !v.at_least(*since))
                })
                .copied()
                .collect();
            newer.sort_unstable();
            if !newer.is_empty() {
                return Err(ApiError::invalid(format!(
                    "Fields {} are not allowed in this API version. They require at least API version 1.114.",
                    newer.join(", ")
                )));
            }
            asked.retain(|f| !matches!(*f, "created_at" | "updated_at"));
            asked
        }
        None => FIELDS
            .iter()
            .filter(|(_, since)| v.at_least(*since))
            .map(|(f, _)| *f)
            .collect(),
    };
    let node = authorized_node(&st, &authz, &ident, v, Policy::NodeFirmwareGet).await?;
    let list: Vec<Value> = st
        .db
        .firmware_list(node.id.0)
        .await?
        .iter()
        .map(|c| doc(c, &fields))
        .collect();
    Ok(json_response(StatusCode::OK, &json!({ "firmware": list })))
}
