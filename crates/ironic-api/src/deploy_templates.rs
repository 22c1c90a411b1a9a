//! `/v1/deploy_templates` (1.55+; `/v1/deploy-templates` is an alias) and
//! `GET /v1/nodes/{node}/deployment/steps`. Templates are plain records: the API
//! validates and stores them (no RPC); their steps are checked against a node's driver
//! when it deploys, and the steps a node would run can be seen beforehand.

use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use ironic_model::deploy_template::{self as dt, DeployTemplate, validate_doc};
use ironic_model::ids::is_uuid_like;
use ironic_model::names::validate_trait;
use ironic_model::{Error, Version, patch};
use serde_json::{Map, Value, json};

use crate::body::{JsonBody, P};
use crate::error::ApiError;
use crate::nodes::authorized_node;
use crate::policy::{Authz, Policy};
use crate::query::{Query, field_list};
use crate::view::{Ts, links_value, masked};
use crate::{AppState, Base, Req, json_response};

type ApiResult = Result<Response, ApiError>;

/// Fields in upstream's order (`links` goes before `steps`).
const FIELDS: &[&str] = &["uuid", "created_at", "updated_at", "name", "extra", "steps"];
const DEFAULT_LIST_FIELDS: &[&str] = &["uuid", "name"];

fn gate(v: Version) -> Result<(), ApiError> {
    if v.at_least(55) {
        Ok(())
    } else {
        Err(ApiError::routing(
            StatusCode::NOT_FOUND,
            "The API version does not allow deploy templates",
        ))
    }
}

fn gate_write(v: Version) -> Result<(), ApiError> {
    if v.at_least(55) {
        Ok(())
    } else {
        Err(ApiError::routing(
            StatusCode::METHOD_NOT_ALLOWED,
            "The API version does not allow deploy templates",
        ))
    }
}

fn doc(t: &DeployTemplate, base: &str, fields: &[&str]) -> Value {
    let mut d = Map::new();
    for f in fields {
        let v = match *f {
            "uuid" => json!(t.uuid),
            "created_at" => serde_json::to_value(Ts(&t.created_at)).unwrap_or(Value::Null),
            "updated_at" => {
                serde_json::to_value(t.updated_at.as_ref().map(Ts)).unwrap_or(Value::Null)
            }
            "name" => json!(t.name),
            "extra" => Value::Object(t.extra.clone()),
            _ => continue,
        };
        d.insert((*f).to_string(), v);
    }
    d.insert(
        "links".into(),
        links_value(base, &format!("deploy_templates/{}", t.uuid)),
    );
    if fields.contains(&"steps") {
        let steps: Vec<Value> = t
            .steps
            .iter()
            .map(|s| {
                json!({"interface": s.interface, "step": s.step, "args": masked(&s.args), "priority": s.priority})
            })
            .collect();
        d.insert("steps".into(), Value::Array(steps));
    }
    Value::Object(d)
}

fn fields_of(list: &str) -> Result<Vec<&'static str>, ApiError> {
    field_list(list, FIELDS)
}

/// By uuid, else by name (a trait).
async fn load(st: &AppState, ident: &str) -> Result<DeployTemplate, Error> {
    let found = if is_uuid_like(ident) {
        st.db
            .deploy_template_by_uuid(&ident.to_ascii_lowercase())
            .await?
    } else if validate_trait(ident).is_ok() {
        st.db.deploy_template_by_name(ident).await?
    } else {
        None
    };
    found.ok_or_else(|| dt::not_found(ident))
}

pub async fn create(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    Base(base): Base,
    RawQuery(q): RawQuery,
    JsonBody(body): JsonBody,
) -> ApiResult {
    gate_write(req.version)?;
    authz.check(Policy::DeployTemplateCreate)?;
    Query::parse(q.as_deref())?.only(&[])?;
    let d = validate_doc(&body, "template")?;
    let t = DeployTemplate {
        id: ironic_model::TemplateId::default(),
        uuid: d.uuid.unwrap_or_else(ironic_model::TemplateUuid::new_v4),
        name: d.name,
        steps: d.steps,
        extra: d.extra,
        created_at: ironic_model::node::now(),
        updated_at: None,
    };
    let created = st.db.deploy_template_create(&t).await?;
    tracing::info!(template = %created.name, uuid = %created.uuid, "deploy template created");
    let mut resp = json_response(StatusCode::CREATED, &doc(&created, &base, FIELDS));
    crate::set_location(
        &mut resp,
        &format!("{base}/v1/deploy_templates/{}", created.uuid),
    );
    Ok(resp)
}

pub async fn list(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    Base(base): Base,
    RawQuery(q): RawQuery,
) -> ApiResult {
    gate(req.version)?;
    authz.check(Policy::DeployTemplateGet)?;
    let q = Query::parse(q.as_deref())?;
    q.only(&[
        "fields", "detail", "limit", "marker", "sort_key", "sort_dir",
    ])?;
    let detail = q.bool("detail")?.unwrap_or(false);
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
        Some(m) => Some(
            st.db
                .deploy_template_by_uuid(m)
                .await?
                .ok_or_else(|| dt::not_found(m))?,
        ),
        None => None,
    };
    let page = st
        .db
        .deploy_template_list(lp.sort_key, lp.desc, marker.as_ref(), lp.size())
        .await?;
    let docs: Vec<Value> = page.iter().map(|t| doc(t, &base, &fields)).collect();
    let last = page.last().map(|t| t.uuid.as_str());
    Ok(json_response(
        StatusCode::OK,
        &lp.page(&base, "deploy_templates", "deploy_templates", docs, last),
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
    gate(req.version)?;
    authz.check(Policy::DeployTemplateGet)?;
    let q = Query::parse(q.as_deref())?;
    q.only(&["fields"])?;
    let fields = match q.get("fields") {
        Some(f) => fields_of(f)?,
        None => FIELDS.to_vec(),
    };
    let t = load(&st, &ident).await?;
    Ok(json_response(StatusCode::OK, &doc(&t, &base, &fields)))
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
    gate_write(req.version)?;
    authz.check(Policy::DeployTemplateUpdate)?;
    Query::parse(q.as_deref())?.only(&[])?;
    let ops = patch::parse(&body)?;
    for op in &ops {
        if !matches!(op.root(), "name" | "steps" | "extra" | "description") {
            return Err(ApiError::invalid(format!(
                "Cannot patch {}. Only the following can be updated: extra, name, steps, description",
                op.path
            )));
        }
    }
    let mut t = load(&st, &ident).await?;
    let mut d = t.patch_doc();
    for op in &ops {
        patch::apply(&mut d, op)?;
    }
    let valid = validate_doc(&Value::Object(d), "patch")?;
    t.name = valid.name;
    t.steps = valid.steps;
    t.extra = valid.extra;
    let saved = st.db.deploy_template_update(&t).await?;
    tracing::info!(template = %saved.name, uuid = %saved.uuid, "deploy template updated");
    Ok(json_response(StatusCode::OK, &doc(&saved, &base, FIELDS)))
}

pub async fn delete(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
) -> ApiResult {
    gate_write(req.version)?;
    authz.check(Policy::DeployTemplateDelete)?;
    Query::parse(q.as_deref())?.only(&[])?;
    let t = load(&st, &ident).await?;
    st.db.deploy_template_destroy(&t).await?;
    tracing::info!(template = %t.name, uuid = %t.uuid, "deploy template deleted");
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `GET /v1/nodes/{node}/deployment/steps` (an extension, from 1.55): the deploy steps
/// the node would run now, in order, with the templates its instance traits select; 400
/// with the reason when they are invalid (what a deploy would answer).
pub async fn node_deploy_steps(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
) -> ApiResult {
    gate(req.version)?;
    Query::parse(q.as_deref())?.only(&[])?;
    let node = authorized_node(&st, &authz, &ident, req.version, Policy::NodeGet).await?;
    if ironic_catalog::known(&node.driver).is_none() {
        return Err(Error::no_valid_host(&node.driver, &node.conductor_group).into());
    }
    let traits = dt::instance_traits(&node).map_err(Error::from)?;
    let templates = st.db.deploy_templates_by_names(&traits).await?;
    let names: Vec<String> = templates.iter().map(|t| t.name.clone()).collect();
    let plan = ironic_catalog::deploy_plan_for(
        &node,
        templates,
        &ironic_model::deploy_template::user_deploy_steps(&node),
    )
    .map_err(Error::from)?;
    let steps: Vec<Value> = plan
        .iter()
        .map(|s| {
            json!({"interface": s.interface, "step": s.step, "args": masked(&s.args), "priority": s.priority})
        })
        .collect();
    Ok(json_response(
        StatusCode::OK,
        &json!({"deploy_templates": names, "steps": steps}),
    ))
}
