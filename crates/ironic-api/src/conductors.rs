//! `/v1/conductors` (1.49): the registered conductors and whether they are alive.

use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use ironic_db::Conductor;
use ironic_model::Error;
use serde_json::{Map, Value, json};

use crate::body::P;
use crate::error::ApiError;
use crate::policy::{Authz, Policy};
use crate::query::Query;
use crate::view::Ts;
use crate::{AppState, Base, Req, json_response};

const FIELDS: &[&str] = &[
    "hostname",
    "conductor_group",
    "alive",
    "drivers",
    "created_at",
    "updated_at",
];

fn gate(req: &Req) -> Result<(), ApiError> {
    if req.version.at_least(49) {
        Ok(())
    } else {
        Err(Error::NotFound("The API is not supported for this version".into()).into())
    }
}

fn doc(c: &Conductor, alive: bool, base: &str, fields: &[&str]) -> Value {
    let mut d = Map::new();
    for f in fields {
        let v = match *f {
            "hostname" => json!(c.hostname),
            "conductor_group" => json!(c.conductor_group),
            "alive" => json!(alive),
            "drivers" => json!(c.drivers),
            "created_at" => serde_json::to_value(Ts(&c.created_at)).unwrap_or(Value::Null),
            "updated_at" => {
                serde_json::to_value(c.updated_at.as_ref().map(Ts)).unwrap_or(Value::Null)
            }
            _ => continue,
        };
        d.insert((*f).to_string(), v);
    }
    d.insert(
        "links".into(),
        crate::view::links_value(base, &format!("conductors/{}", c.hostname)),
    );
    Value::Object(d)
}

pub async fn list(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    Base(base): Base,
    RawQuery(q): RawQuery,
) -> Result<Response, ApiError> {
    gate(&req)?;
    authz.check(Policy::ConductorGet)?;
    let q = Query::parse(q.as_deref())?;
    q.only(&[
        "limit", "marker", "detail", "fields", "sort_key", "sort_dir",
    ])?;
    let detail = q.bool("detail")?.unwrap_or(false);
    let fields: Vec<&str> = match q.get("fields") {
        Some(_) if detail => {
            return Err(ApiError::invalid(
                "Can not specify ?detail=True and fields in the same request.",
            ));
        }
        Some(f) => {
            let list: Vec<&str> = f
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .collect();
            if let Some(bad) = list.iter().find(|f| !FIELDS.contains(f)) {
                return Err(ApiError::invalid(format!(
                    "Field {bad} is not a valid field."
                )));
            }
            list
        }
        None if detail => FIELDS.to_vec(),
        None => vec!["hostname", "conductor_group", "alive"],
    };
    let lp = q.list_params(
        st.settings.max_limit,
        Some(&[
            "id",
            "hostname",
            "conductor_group",
            "created_at",
            "updated_at",
        ]),
    )?;
    let snap = st.topology.snapshot();
    let mut all: Vec<&(Conductor, bool)> = snap.conductors.iter().collect();
    match lp.sort_key {
        "id" => all.sort_by_key(|(c, _)| c.id),
        "hostname" => all.sort_by(|a, b| a.0.hostname.cmp(&b.0.hostname)),
        "conductor_group" => {
            all.sort_by(|a, b| (&a.0.conductor_group, a.0.id).cmp(&(&b.0.conductor_group, b.0.id)))
        }
        "created_at" => all.sort_by_key(|(c, _)| (c.created_at, c.id)),
        _ => all.sort_by_key(|(c, _)| (c.updated_at, c.id)),
    }
    if lp.desc {
        all.reverse();
    }
    if let Some(m) = lp.marker {
        let pos = all
            .iter()
            .position(|(c, _)| c.hostname == m)
            .ok_or_else(|| Error::NotFound(format!("Conductor {m} could not be found.")))?;
        all.drain(..=pos);
    }
    all.truncate(lp.size());
    let docs: Vec<Value> = all
        .iter()
        .map(|(c, a)| doc(c, *a, &base, &fields))
        .collect();
    let last = all.last().map(|(c, _)| c.hostname.as_str());
    Ok(json_response(
        StatusCode::OK,
        &lp.page(&base, "conductors", "conductors", docs, last),
    ))
}

pub async fn get_one(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    Base(base): Base,
    P(hostname): P<String>,
    RawQuery(q): RawQuery,
) -> Result<Response, ApiError> {
    gate(&req)?;
    authz.check(Policy::ConductorGet)?;
    Query::parse(q.as_deref())?.only(&[])?;
    if hostname.contains('\0') {
        return Err(Error::NotFound(format!(
            "Conductor {} could not be found.",
            hostname.escape_default()
        ))
        .into());
    }
    let c = st.db.conductor_get(&hostname).await?;
    let alive = c.is_alive(chrono::Utc::now(), st.topology.liveness());
    Ok(json_response(
        StatusCode::OK,
        &doc(&c, alive, &base, FIELDS),
    ))
}
