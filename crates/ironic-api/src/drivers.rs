//! `/v1/drivers`: the hardware types live conductors enable (reference §4, drivers).

use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use ironic_model::{Error, Version};
use serde_json::{Map, Value, json};

use crate::body::P;
use crate::error::ApiError;
use crate::policy::{Authz, Policy};
use crate::query::Query;
use crate::{AppState, Base, Req, json_response};

/// Interface types shown in driver details and the version that added each.
const DRIVER_INTERFACES: &[(&str, u16)] = &[
    ("bios", 40),
    ("boot", 30),
    ("console", 30),
    ("deploy", 30),
    ("firmware", 86),
    ("inspect", 30),
    ("management", 30),
    ("network", 30),
    ("power", 30),
    ("raid", 30),
    ("rescue", 38),
    ("storage", 33),
    ("vendor", 30),
];

use crate::view::links_value as link_pair;

fn driver_doc(name: &str, hosts: &[String], v: Version, base: &str, detail: bool) -> Value {
    let mut d = Map::new();
    d.insert("name".into(), json!(name));
    d.insert("hosts".into(), json!(hosts));
    d.insert("links".into(), link_pair(base, &format!("drivers/{name}")));
    if v.at_least(30) {
        d.insert(
            "properties".into(),
            link_pair(base, &format!("drivers/{name}/properties")),
        );
        d.insert("type".into(), json!("dynamic"));
        if detail {
            let hw = ironic_catalog::known(name);
            for (t, min) in DRIVER_INTERFACES {
                if !v.at_least(*min) {
                    continue;
                }
                d.insert(
                    format!("default_{t}_interface"),
                    json!(hw.and_then(|h| h.default_interface(t))),
                );
                d.insert(
                    format!("enabled_{t}_interfaces"),
                    json!(hw.map(|h| h.enabled_interfaces(t)).unwrap_or(&[])),
                );
            }
        }
    }
    Value::Object(d)
}

/// `fields` (1.77, 406 below: see [`fields_allowed`]): the document keeps those and its
/// links; a field it does not have is 400, as upstream's.
fn only_fields(doc: Value, fields: Option<&str>) -> Result<Value, ApiError> {
    let Some(list) = fields else {
        return Ok(doc);
    };
    let Value::Object(mut d) = doc else {
        return Ok(doc);
    };
    let wanted: Vec<&str> = list
        .split(',')
        .map(str::trim)
        .filter(|f| !f.is_empty())
        .collect();
    let invalid: Vec<&str> = wanted
        .iter()
        .copied()
        .filter(|f| !d.contains_key(*f))
        .collect();
    if !invalid.is_empty() {
        return Err(ApiError::invalid(format!(
            "Field(s) \"{}\" are not valid",
            invalid.join(", ")
        )));
    }
    d.retain(|k, _| k == "links" || wanted.contains(&k.as_str()));
    Ok(Value::Object(d))
}

fn fields_allowed(q: &Query, v: Version) -> Result<(), ApiError> {
    if q.has("fields") && !v.at_least(77) {
        return Err(Error::not_acceptable().into());
    }
    Ok(())
}

pub async fn list(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    Base(base): Base,
    RawQuery(q): RawQuery,
) -> Result<Response, ApiError> {
    authz.check(Policy::DriverGet)?;
    let q = Query::parse(q.as_deref())?;
    q.only(&["type", "detail", "fields"])?;
    let detail = q.bool("detail")?.unwrap_or(false);
    if q.has("detail") && !req.version.at_least(30) {
        return Err(Error::not_acceptable().into());
    }
    fields_allowed(&q, req.version)?;
    if detail && q.has("fields") {
        return Err(ApiError::invalid(
            "Can not specify ?detail=True and fields in the same request.",
        ));
    }
    let drivers = match q.get("type") {
        None | Some("dynamic") => st.topology.snapshot().drivers(),
        Some("classic") => Default::default(),
        Some(other) => {
            return Err(ApiError::invalid(format!(
                "Invalid type \"{other}\" for driver list: use \"classic\" or \"dynamic\""
            )));
        }
    };
    let docs = drivers
        .iter()
        .map(|(name, hosts)| {
            let doc = driver_doc(name, hosts, req.version, &base, detail);
            only_fields(doc, q.get("fields"))
        })
        .collect::<Result<Vec<Value>, ApiError>>()?;
    Ok(json_response(StatusCode::OK, &json!({ "drivers": docs })))
}

pub async fn get_one(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    Base(base): Base,
    P(name): P<String>,
    RawQuery(q): RawQuery,
) -> Result<Response, ApiError> {
    authz.check(Policy::DriverGet)?;
    let q = Query::parse(q.as_deref())?;
    q.only(&["fields"])?;
    fields_allowed(&q, req.version)?;
    let drivers = st.topology.snapshot().drivers();
    let hosts = drivers.get(&name).ok_or_else(|| {
        Error::NotFound(format!(
            "Could not find the following driver(s) or hardware type(s): {name}."
        ))
    })?;
    let doc = driver_doc(&name, hosts, req.version, &base, true);
    Ok(json_response(
        StatusCode::OK,
        &only_fields(doc, q.get("fields"))?,
    ))
}

/// `GET /v1/drivers/{name}/properties`: the driver properties a node may set. The fake
/// hardware type needs none, so it is an empty object for the hardware types we have.
pub async fn properties(
    State(st): State<AppState>,
    authz: Authz,
    P(name): P<String>,
    RawQuery(q): RawQuery,
) -> Result<Response, ApiError> {
    authz.check(Policy::DriverGetProperties)?;
    Query::parse(q.as_deref())?.only(&[])?;
    if !st.topology.snapshot().drivers().contains_key(&name) {
        return Err(Error::NotFound(format!(
            "Could not find the following driver(s) or hardware type(s): {name}."
        ))
        .into());
    }
    let props: Map<String, Value> = ironic_catalog::known(&name)
        .map(ironic_catalog::vendor::driver_properties)
        .unwrap_or(&[])
        .iter()
        .map(|(k, d)| ((*k).to_string(), json!(d)))
        .collect();
    Ok(json_response(StatusCode::OK, &Value::Object(props)))
}
