//! `/v1/runbooks` (1.92; `description` and `/traits` 1.112): named lists of steps a
//! node runs in manual cleaning or servicing (`runbook` in `PUT …/states/provision`,
//! `provision.rs`). Plain records like deploy templates: validated here
//! (`ironic_model::runbook`), stored without an RPC. Owned by a project (its managers
//! may change them) or by the deployment; a `public` one is seen by every reader.

use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use ironic_model::ids::is_uuid_like;
use ironic_model::names::validate_trait;
use ironic_model::patch::py_repr;
use ironic_model::runbook::{self as rb, FIELDS, Runbook, validate_doc};
use ironic_model::{Error, Version, patch};
use serde_json::{Map, Value, json};

use crate::body::{JsonBody, P};
use crate::error::ApiError;
use crate::policy::{Authz, Policy, Target};
use crate::query::{Query, field_list};
use crate::view::{Ts, links_value, masked};
use crate::{AppState, Base, Req, json_response};

type ApiResult = Result<Response, ApiError>;

/// Sort keys a list accepts.
use ironic_db::runbooks::SORT_KEYS;

fn gate(v: Version, status: StatusCode) -> Result<(), ApiError> {
    if v.at_least(92) {
        Ok(())
    } else {
        Err(ApiError::routing(
            status,
            "The API version does not allow runbooks",
        ))
    }
}

/// The fields version `v` shows, in upstream's order.
fn fields_at(v: Version) -> Vec<&'static str> {
    FIELDS
        .iter()
        .filter(|(_, since)| v.at_least(*since))
        .map(|(f, _)| *f)
        .collect()
}

fn doc(r: &Runbook, base: &str, fields: &[&str]) -> Value {
    let mut d = Map::new();
    for f in fields {
        if *f == "steps" {
            d.insert(
                "links".into(),
                links_value(base, &format!("runbooks/{}", r.uuid)),
            );
        }
        let v = match *f {
            "uuid" => json!(r.uuid),
            "created_at" => json!(Ts(&r.created_at)),
            "updated_at" => json!(r.updated_at.as_ref().map(Ts)),
            "name" => json!(r.name),
            "extra" => Value::Object(r.extra.clone()),
            "public" => json!(r.public),
            "owner" => json!(r.owner),
            "disable_ramdisk" => json!(r.disable_ramdisk),
            "description" => json!(r.description),
            "steps" => Value::Array(
                r.steps
                    .iter()
                    .map(|s| {
                        json!({"interface": s.interface, "step": s.step,
                               "args": masked(&s.args), "order": s.order})
                    })
                    .collect(),
            ),
            "traits" => json!(r.traits),
            _ => continue,
        };
        d.insert((*f).to_string(), v);
    }
    if !d.contains_key("links") {
        d.insert(
            "links".into(),
            links_value(base, &format!("runbooks/{}", r.uuid)),
        );
    }
    Value::Object(d)
}

fn fields_of(list: &str, v: Version) -> Result<Vec<&'static str>, ApiError> {
    let all: Vec<&'static str> = FIELDS.iter().map(|(f, _)| *f).collect();
    let asked = field_list(list, &all)?;
    if asked.iter().any(|f| {
        FIELDS
            .iter()
            .any(|(n, since)| n == f && !v.at_least(*since))
    }) {
        return Err(Error::not_acceptable().into());
    }
    Ok(asked)
}

/// By uuid, else by name.
pub(crate) async fn load(st: &AppState, ident: &str) -> Result<Runbook, Error> {
    let found = if is_uuid_like(ident) {
        st.db.runbook_by_uuid(&ident.to_ascii_lowercase()).await?
    } else {
        st.db.runbook_by_name(ident).await?
    };
    found.ok_or_else(|| rb::not_found(ident))
}

/// A runbook the caller may do `p` on (404 when it may not see it).
pub(crate) async fn authorized(
    st: &AppState,
    authz: &Authz,
    ident: &str,
    p: Policy,
) -> Result<Runbook, ApiError> {
    // A caller who may do `p` on no runbook learns nothing of what exists.
    authz.could(p)?;
    let r = load(st, ident).await?;
    authz.runbook(&r, ident, p)?;
    Ok(r)
}

pub async fn create(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    Base(base): Base,
    RawQuery(q): RawQuery,
    JsonBody(body): JsonBody,
) -> ApiResult {
    gate(req.version, StatusCode::METHOD_NOT_ALLOWED)?;
    authz.check(Policy::RunbookCreate)?;
    Query::parse(q.as_deref())?.only(&[])?;
    let d = validate_doc(&body, req.version, "runbook")?;
    // A public runbook is shown to every project: only the system publishes one (as
    // upstream; PATCH asks `RunbookUpdatePublic` for the same reason).
    if d.public && authz.project().is_some() {
        return Err(ApiError::invalid(
            "Cannot create a public runbook as a project scoped admin.",
        ));
    }
    // A project's caller creates its project's runbooks; nobody names another owner.
    let owner = match (d.owner, authz.project()) {
        (Some(o), mine) if Some(o.as_str()) != mine => {
            return Err(ApiError::invalid(
                "Cannot create a runbook as a project scoped admin with an owner other than your own project.",
            ));
        }
        (Some(o), _) => Some(o),
        (None, mine) => mine.map(str::to_string),
    };
    let r = Runbook {
        id: 0,
        uuid: d.uuid.unwrap_or_else(ironic_model::RunbookUuid::new_v4),
        name: d.name,
        description: d.description,
        steps: d.steps,
        traits: Vec::new(),
        disable_ramdisk: d.disable_ramdisk,
        public: d.public,
        owner,
        extra: d.extra,
        created_at: ironic_model::node::now(),
        updated_at: None,
    };
    let created = st.db.runbook_create(&r).await?;
    tracing::info!(runbook = %created.name, uuid = %created.uuid, "runbook created");
    let mut resp = json_response(
        StatusCode::CREATED,
        &doc(&created, &base, &fields_at(req.version)),
    );
    crate::set_location(&mut resp, &format!("{base}/v1/runbooks/{}", created.uuid));
    Ok(resp)
}

pub async fn list(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    Base(base): Base,
    RawQuery(q): RawQuery,
) -> ApiResult {
    let v = req.version;
    gate(v, StatusCode::NOT_FOUND)?;
    let q = Query::parse(q.as_deref())?;
    q.only(&[
        "fields", "detail", "limit", "marker", "sort_key", "sort_dir",
    ])?;
    let scope = authz.list_scope(Policy::RunbookListAll, Policy::RunbookList, None)?;
    let detail = q.bool("detail")?.unwrap_or(false);
    let fields = match q.get("fields") {
        Some(_) if detail => {
            return Err(ApiError::invalid(
                "Can not specify ?detail=True and fields in the same request.",
            ));
        }
        Some(f) => fields_of(f, v)?,
        None if detail => fields_at(v),
        None => rb::DEFAULT_LIST_FIELDS.to_vec(),
    };
    let lp = q.list_params(st.settings.max_limit, Some(SORT_KEYS))?;
    let visible = |r: &Runbook| match &scope {
        None => true,
        Some(mine) => r.public || r.owner.as_deref() == Some(mine.as_str()),
    };
    let marker = match lp.marker {
        None => None,
        Some(m) => Some(
            st.db
                .runbook_by_uuid(m)
                .await?
                .filter(visible)
                .ok_or_else(|| rb::not_found(m))?,
        ),
    };
    let page = st
        .db
        .runbook_list(
            lp.sort_key,
            lp.desc,
            marker.as_ref(),
            lp.size(),
            scope.as_deref(),
        )
        .await?;
    let docs: Vec<Value> = page.iter().map(|r| doc(r, &base, &fields)).collect();
    let last = page.last().map(|r| r.uuid.as_str());
    Ok(json_response(
        StatusCode::OK,
        &lp.page(&base, "runbooks", "runbooks", docs, last),
    ))
}

pub async fn get_one(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    Base(base): Base,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
) -> ApiResult {
    gate(req.version, StatusCode::NOT_FOUND)?;
    let q = Query::parse(q.as_deref())?;
    q.only(&["fields"])?;
    let fields = match q.get("fields") {
        Some(f) => fields_of(f, req.version)?,
        None => fields_at(req.version),
    };
    let r = authorized(&st, &authz, &ident, Policy::RunbookGet).await?;
    Ok(json_response(StatusCode::OK, &doc(&r, &base, &fields)))
}

pub async fn patch(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    Base(base): Base,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
    JsonBody(body): JsonBody,
) -> ApiResult {
    let v = req.version;
    gate(v, StatusCode::METHOD_NOT_ALLOWED)?;
    Query::parse(q.as_deref())?.only(&[])?;
    let mut allowed = rb::PATCHABLE.to_vec();
    if v.at_least(112) {
        allowed.push("description");
    }
    let ops = patch::parse(&body)?;
    for op in &ops {
        if !allowed.contains(&op.root()) {
            return Err(ApiError::invalid(format!(
                "Cannot patch {}. Only the following can be updated: {}",
                op.path,
                allowed.join(", ")
            )));
        }
    }
    let mut r = authorized(&st, &authz, &ident, Policy::RunbookUpdate).await?;
    let mut d = r.patch_doc();
    for op in &ops {
        patch::apply(&mut d, op)?;
    }
    let valid = validate_doc(
        &Value::Object(d),
        Version {
            minor: v.minor.max(112),
        },
        "patch",
    )
    .and_then(|valid| {
        // Names keep the rule of the version asked for.
        rb::check_name(&json!(valid.name), v, "patch")?;
        Ok(valid)
    })?;
    let t = Target::runbook(&r);
    if valid.public != r.public && !authz.allows(Policy::RunbookUpdatePublic, t) {
        return Err(Policy::RunbookUpdatePublic.denied());
    }
    if valid.owner != r.owner && !authz.allows(Policy::RunbookUpdateOwner, t) {
        return Err(Policy::RunbookUpdateOwner.denied());
    }
    r.name = valid.name;
    r.description = valid.description;
    r.steps = valid.steps;
    r.disable_ramdisk = valid.disable_ramdisk;
    r.public = valid.public;
    r.owner = valid.owner;
    r.extra = valid.extra;
    let saved = st.db.runbook_update(&r).await?;
    tracing::info!(runbook = %saved.name, uuid = %saved.uuid, "runbook updated");
    Ok(json_response(
        StatusCode::OK,
        &doc(&saved, &base, &fields_at(v)),
    ))
}

pub async fn delete(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
) -> ApiResult {
    gate(req.version, StatusCode::METHOD_NOT_ALLOWED)?;
    Query::parse(q.as_deref())?.only(&[])?;
    let r = authorized(&st, &authz, &ident, Policy::RunbookDelete).await?;
    st.db.runbook_destroy(&r).await?;
    tracing::info!(runbook = %r.name, uuid = %r.uuid, "runbook deleted");
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// The traits sub-resource exists from 1.112 (a plain 404 below, S439).
fn traits_gate(v: Version) -> Result<(), ApiError> {
    if v.at_least(112) {
        Ok(())
    } else {
        Err(Error::NotFound("The resource could not be found.".into()).into())
    }
}

fn check_trait(t: &Value) -> Result<String, ApiError> {
    match t.as_str() {
        Some(s) if validate_trait(s).is_ok() => Ok(s.to_string()),
        _ => Err(ApiError::invalid(format!(
            "Schema error for trait: {} is not valid under any of the given schemas. Possible root cause: {} does not match '^CUSTOM_[A-Z0-9_]+$'",
            py_repr(t),
            py_repr(t)
        ))),
    }
}

pub async fn traits_get(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
) -> ApiResult {
    gate(req.version, StatusCode::NOT_FOUND)?;
    Query::parse(q.as_deref())?.only(&[])?;
    let r = authorized(&st, &authz, &ident, Policy::RunbookGet).await?;
    traits_gate(req.version)?;
    Ok(json_response(StatusCode::OK, &json!({"traits": r.traits})))
}

/// `PUT …/traits {"traits": [...]}`: the runbook's traits become these.
pub async fn traits_put(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
    JsonBody(body): JsonBody,
) -> ApiResult {
    gate(req.version, StatusCode::METHOD_NOT_ALLOWED)?;
    Query::parse(q.as_deref())?.only(&[])?;
    let mut r = authorized(&st, &authz, &ident, Policy::RunbookUpdate).await?;
    traits_gate(req.version)?;
    let Some(list) = body.get("traits").and_then(Value::as_array) else {
        return Err(ApiError::invalid(
            "Schema error for traits: 'traits' is a required property",
        ));
    };
    let mut traits = Vec::new();
    for t in list {
        let t = check_trait(t)?;
        if !traits.contains(&t) {
            traits.push(t);
        }
    }
    r.traits = traits;
    st.db.runbook_update(&r).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `PUT …/traits/{trait}`: adds one (204 with a `Location`).
pub async fn trait_put(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    Base(base): Base,
    P((ident, name)): P<(String, String)>,
    RawQuery(q): RawQuery,
) -> ApiResult {
    gate(req.version, StatusCode::METHOD_NOT_ALLOWED)?;
    Query::parse(q.as_deref())?.only(&[])?;
    let mut r = authorized(&st, &authz, &ident, Policy::RunbookUpdate).await?;
    traits_gate(req.version)?;
    let t = check_trait(&json!(name))?;
    if !r.traits.contains(&t) {
        r.traits.push(t.clone());
        st.db.runbook_update(&r).await?;
    }
    let mut resp = StatusCode::NO_CONTENT.into_response();
    crate::set_location(
        &mut resp,
        &format!(
            "{base}/v1/runbooks/{}/traits/{t}",
            ironic_model::percent::encode_list(&ident)
        ),
    );
    Ok(resp)
}

/// `DELETE …/traits/{trait}`: 204 whether it was there or not (S437).
pub async fn trait_delete(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    P((ident, name)): P<(String, String)>,
    RawQuery(q): RawQuery,
) -> ApiResult {
    gate(req.version, StatusCode::METHOD_NOT_ALLOWED)?;
    Query::parse(q.as_deref())?.only(&[])?;
    let mut r = authorized(&st, &authz, &ident, Policy::RunbookUpdate).await?;
    traits_gate(req.version)?;
    let before = r.traits.len();
    r.traits.retain(|t| *t != name);
    if r.traits.len() != before {
        st.db.runbook_update(&r).await?;
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}
