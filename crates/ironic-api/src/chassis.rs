//! `/v1/chassis` and `/v1/chassis/{uuid}/nodes` (upstream's shapes: the `nodes` link
//! pair nested in a list). Chassis are written here, as deploy templates are: no
//! conductor owns them.

use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use ironic_model::chassis::{self as ch, Chassis, DEFAULT_LIST_FIELDS, DESCRIPTION_MAX, FIELDS};
use ironic_model::ids::canonical_uuid;
use ironic_model::names::py_repr_str;
use ironic_model::{ChassisUuid, Error, patch};
use serde_json::{Map, Value, json};

use crate::body::{JsonBody, P};
use crate::error::ApiError;
use crate::nodes::list_nodes;
use crate::policy::{Authz, Policy};
use crate::query::{LinkArgs, Query, field_list};
use crate::view::{Ts, links_value};
use crate::{AppState, Base, Req, json_response};

type ApiResult = Result<Response, ApiError>;

fn schema(msg: impl std::fmt::Display) -> ApiError {
    ApiError::invalid(format!("Schema error for chassis: {msg}"))
}

fn doc(c: &Chassis, base: &str, fields: &[&str]) -> Value {
    let mut m = Map::new();
    for f in fields {
        let v = match *f {
            "uuid" => json!(c.uuid),
            "created_at" => json!(Ts(&c.created_at)),
            "updated_at" => json!(c.updated_at.as_ref().map(Ts)),
            "description" => json!(c.description),
            "extra" => Value::Object(c.extra.clone()),
            _ => continue,
        };
        m.insert((*f).to_string(), v);
    }
    m.insert(
        "links".into(),
        links_value(base, &format!("chassis/{}", c.uuid)),
    );
    if fields.len() == FIELDS.len() {
        m.insert(
            "nodes".into(),
            Value::Array(vec![links_value(
                base,
                &format!("chassis/{}/nodes", c.uuid),
            )]),
        );
    }
    Value::Object(m)
}

fn fields_of(list: &str) -> Result<Vec<&'static str>, ApiError> {
    field_list(list, FIELDS)
}

/// A chassis by uuid (chassis have no name): 400 for anything else, 404 if unknown.
async fn load(st: &AppState, ident: &str) -> Result<Chassis, ApiError> {
    let Some(uuid) = canonical_uuid(ident) else {
        return Err(ApiError::invalid(format!(
            "Expected UUID for chassis_uuid: {ident}"
        )));
    };
    st.db
        .chassis_by_uuid(&uuid)
        .await?
        .ok_or_else(|| ch::not_found(ident).into())
}

/// The description and extra of a create body or a patched document.
fn validated(body: &Map<String, Value>) -> Result<(Option<String>, Map<String, Value>), ApiError> {
    let description = match body.get("description") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.chars().count() > DESCRIPTION_MAX => {
            return Err(schema(format_args!("{} is too long", py_repr_str(s))));
        }
        Some(Value::String(s)) => Some(s.clone()),
        Some(other) => {
            return Err(schema(format_args!(
                "{} is not of type 'string', 'null'",
                patch::py_repr(other)
            )));
        }
    };
    let extra = match body.get("extra") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(o)) => o.clone(),
        Some(other) => {
            return Err(schema(format_args!(
                "{} is not of type 'object', 'null'",
                patch::py_repr(other)
            )));
        }
    };
    Ok((description, extra))
}

pub async fn create(
    State(st): State<AppState>,
    authz: Authz,
    Base(base): Base,
    RawQuery(q): RawQuery,
    JsonBody(body): JsonBody,
) -> ApiResult {
    authz.check(Policy::ChassisCreate)?;
    Query::parse(q.as_deref())?.only(&[])?;
    let body = match body {
        Value::Object(o) => o,
        other => {
            return Err(schema(format_args!(
                "{} is not of type 'object'",
                patch::py_repr(&other)
            )));
        }
    };
    if let Some(k) = body
        .keys()
        .find(|k| !matches!(k.as_str(), "description" | "extra" | "uuid"))
    {
        return Err(schema(format_args!(
            "Additional properties are not allowed ('{k}' was unexpected)"
        )));
    }
    let uuid = match body.get("uuid") {
        None | Some(Value::Null) => ChassisUuid::new_v4(),
        Some(Value::String(u)) => ChassisUuid::parse(u)
            .ok_or_else(|| schema(format_args!("{} is not a 'uuid'", py_repr_str(u))))?,
        Some(other) => {
            return Err(schema(format_args!(
                "{} is not of type 'string'",
                patch::py_repr(other)
            )));
        }
    };
    let (description, extra) = validated(&body)?;
    let created = st
        .db
        .chassis_create(&Chassis {
            id: 0,
            uuid,
            description,
            extra,
            created_at: ironic_model::node::now(),
            updated_at: None,
        })
        .await?;
    tracing::info!(chassis = %created.uuid, "chassis created");
    let mut resp = json_response(StatusCode::CREATED, &doc(&created, &base, FIELDS));
    crate::set_location(&mut resp, &format!("{base}/v1/chassis/{}", created.uuid));
    Ok(resp)
}

async fn list_chassis(st: &AppState, base: &str, q: Query, detail_path: bool) -> ApiResult {
    let mut allowed = vec!["limit", "marker", "sort_key", "sort_dir"];
    if !detail_path {
        allowed.extend(["fields", "detail"]);
    }
    q.only(&allowed)?;
    let detail = detail_path || q.bool("detail")?.unwrap_or(false);
    let fields = match q.get("fields") {
        Some(_) if detail => {
            return Err(ApiError::invalid(
                "Can not specify ?detail=True and fields in the same request.",
            ));
        }
        Some(f) => fields_of(f)?,
        None if detail => FIELDS.to_vec(),
        None => DEFAULT_LIST_FIELDS.to_vec(),
    };
    let lp = q.list_params(st.settings.max_limit, None)?;
    let marker = match lp.marker {
        Some(m) => Some(load(st, m).await?),
        None => None,
    };
    let page = st
        .db
        .chassis_list(lp.sort_key, lp.desc, marker.as_ref(), lp.size())
        .await?;
    let docs: Vec<Value> = page.iter().map(|c| doc(c, base, &fields)).collect();
    let path = if detail_path {
        "chassis/detail"
    } else {
        "chassis"
    };
    let how = LinkArgs::Sorted {
        others: false,
        fields: (!detail).then(|| fields.join(",")),
    };
    let last = page.last().map(|c| c.uuid.as_str());
    Ok(json_response(
        StatusCode::OK,
        &lp.page_with(base, path, "chassis", docs, &how, last),
    ))
}

pub async fn list(
    State(st): State<AppState>,
    authz: Authz,
    Base(base): Base,
    RawQuery(q): RawQuery,
) -> ApiResult {
    authz.check(Policy::ChassisGet)?;
    list_chassis(&st, &base, Query::parse(q.as_deref())?, false).await
}

pub async fn detail(
    State(st): State<AppState>,
    authz: Authz,
    Base(base): Base,
    RawQuery(q): RawQuery,
) -> ApiResult {
    authz.check(Policy::ChassisGet)?;
    list_chassis(&st, &base, Query::parse(q.as_deref())?, true).await
}

pub async fn get_one(
    State(st): State<AppState>,
    authz: Authz,
    Base(base): Base,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
) -> ApiResult {
    authz.check(Policy::ChassisGet)?;
    let q = Query::parse(q.as_deref())?;
    q.only(&["fields"])?;
    let fields = match q.get("fields") {
        Some(f) => fields_of(f)?,
        None => FIELDS.to_vec(),
    };
    let c = load(&st, &ident).await?;
    Ok(json_response(StatusCode::OK, &doc(&c, &base, &fields)))
}

pub async fn patch(
    State(st): State<AppState>,
    authz: Authz,
    Base(base): Base,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
    JsonBody(body): JsonBody,
) -> ApiResult {
    authz.check(Policy::ChassisUpdate)?;
    Query::parse(q.as_deref())?.only(&[])?;
    let ops = patch::parse(&body)?;
    for op in &ops {
        if !matches!(op.root(), "description" | "extra") {
            return Err(ApiError::invalid(format!(
                "Cannot patch {}. Only the following can be updated: description, extra",
                op.path
            )));
        }
    }
    let mut c = load(&st, &ident).await?;
    let mut d = Map::new();
    d.insert("description".into(), json!(c.description));
    d.insert("extra".into(), Value::Object(c.extra.clone()));
    for op in &ops {
        patch::apply(&mut d, op)?;
    }
    let (description, extra) = validated(&d)?;
    c.description = description;
    c.extra = extra;
    let saved = st.db.chassis_update(&c).await?;
    tracing::info!(chassis = %saved.uuid, "chassis updated");
    Ok(json_response(StatusCode::OK, &doc(&saved, &base, FIELDS)))
}

pub async fn delete(
    State(st): State<AppState>,
    authz: Authz,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
) -> ApiResult {
    authz.check(Policy::ChassisDelete)?;
    Query::parse(q.as_deref())?.only(&[])?;
    let c = load(&st, &ident).await?;
    st.db.chassis_destroy(&c).await?;
    tracing::info!(chassis = %c.uuid, "chassis deleted");
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `GET /v1/chassis/{uuid}/nodes[/detail]`: the node list, restricted to the chassis
/// (404 for an unknown chassis), with its filters, fields and pagination.
async fn chassis_nodes(
    st: &AppState,
    authz: &Authz,
    req: &Req,
    base: &str,
    ident: &str,
    q: Option<String>,
    detail: bool,
) -> ApiResult {
    authz.check(Policy::ChassisGet)?;
    let c = load(st, ident).await?;
    let q = Query::parse(q.as_deref())?;
    if q.has("chassis_uuid") {
        return Err(ApiError::invalid(
            "Unexpected argument chassis_uuid: the chassis is in the path.",
        ));
    }
    list_nodes(st, authz, req.version, base, q, detail, Some(&c.uuid)).await
}

pub async fn nodes(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    Base(base): Base,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
) -> ApiResult {
    chassis_nodes(&st, &authz, &req, &base, &ident, q, false).await
}

pub async fn nodes_detail(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    Base(base): Base,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
) -> ApiResult {
    chassis_nodes(&st, &authz, &req, &base, &ident, q, true).await
}

/// That the chassis a node names exists (node create and PATCH): 400 otherwise.
pub(crate) async fn check_exists(st: &AppState, uuid: &str) -> Result<(), ApiError> {
    match st.db.chassis_by_uuid(uuid).await? {
        Some(_) => Ok(()),
        None => Err(Error::invalid(ch::not_found(uuid).message().to_string()).into()),
    }
}
