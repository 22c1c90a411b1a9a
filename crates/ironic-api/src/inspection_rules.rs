//! `/v1/inspection_rules` (1.96): conditions over what an inspection found and actions
//! that change the node when they hold. Plain records like runbooks: validated here
//! (`ironic_model::inspection_rule`), stored without an RPC, run by the conductor that
//! processes an inspection (`ironic-rules`). Addressed by uuid
//! only; readable by system readers, written by system admins (upstream's policies). A
//! `sensitive` rule never shows its conditions and actions.

use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use ironic_model::ids::is_uuid_like;
use ironic_model::inspection_rule::{
    self as ir, DEFAULT_LIST_FIELDS, FIELDS, InspectionRule, Origin, PATCHABLE, item_view,
    validate_doc,
};
use ironic_model::patch::{self, Op, py_repr};
use ironic_model::{Error, Version};
use serde_json::{Map, Value, json};

use crate::body::{JsonBody, P};
use crate::error::ApiError;
use crate::policy::{Authz, Policy};
use crate::query::Query;
use crate::view::{Ts, links_value};
use crate::{AppState, Base, Req, json_response};

type ApiResult = Result<Response, ApiError>;

/// Database columns a list may sort by.
const SORT_KEYS: &[&str] = &[
    "id",
    "uuid",
    "priority",
    "description",
    "scope",
    "sensitive",
    "phase",
    "created_at",
    "updated_at",
];

/// Node fields newer than some versions: upstream checks `fields` and `sort_key`
/// against them too (a shared table), so naming one below its version is 406.
const VERSIONED_NODE_FIELDS: &[(&str, u16)] = &[("instance_name", 104), ("health", 109)];

fn gate(v: Version, status: StatusCode) -> Result<(), ApiError> {
    if v.at_least(96) {
        Ok(())
    } else {
        Err(ApiError::routing(
            status,
            "The API version does not allow inspection rules",
        ))
    }
}

fn schema(msg: impl std::fmt::Display) -> ApiError {
    ApiError::invalid(format!("Schema error: {msg}"))
}

/// Query arguments outside `allowed`: upstream's schema message.
fn only(q: &Query, allowed: &[&str]) -> Result<(), ApiError> {
    let mut bad: Vec<String> = Vec::new();
    for (k, _) in &q.0 {
        if !allowed.contains(&k.as_str()) && !bad.iter().any(|b| b.trim_matches('\'') == k) {
            bad.push(format!("'{k}'"));
        }
    }
    match bad.len() {
        0 => Ok(()),
        1 => Err(schema(format_args!(
            "Additional properties are not allowed ({} was unexpected)",
            bad[0]
        ))),
        _ => Err(schema(format_args!(
            "Additional properties are not allowed ({} were unexpected)",
            bad.join(", ")
        ))),
    }
}

fn path_uuid(id: &str) -> Result<String, ApiError> {
    if is_uuid_like(id) {
        Ok(id.to_ascii_lowercase())
    } else {
        Err(schema(format_args!("'{id}' is not a 'uuid'")))
    }
}

/// A `fields` list: trimmed, lower-cased, de-duplicated; a too-new node field is 406,
/// anything else unknown 400 naming them all.
fn fields_of(list: &str, v: Version) -> Result<Vec<&'static str>, ApiError> {
    let mut asked: Vec<String> = Vec::new();
    for f in list.split(',').map(|f| f.trim().to_ascii_lowercase()) {
        if !f.is_empty() && !asked.contains(&f) {
            asked.push(f);
        }
    }
    too_new(asked.iter().map(String::as_str), v)?;
    let bad: Vec<&str> = asked
        .iter()
        .map(String::as_str)
        .filter(|f| *f != "links" && !FIELDS.contains(f))
        .collect();
    if !bad.is_empty() {
        return Err(ApiError::invalid(format!(
            "Field(s) \"{}\" are not valid",
            bad.join(", ")
        )));
    }
    Ok(FIELDS
        .iter()
        .copied()
        .filter(|f| asked.iter().any(|a| a == f))
        .collect())
}

fn too_new<'a>(names: impl IntoIterator<Item = &'a str>, v: Version) -> Result<(), ApiError> {
    for n in names {
        if VERSIONED_NODE_FIELDS
            .iter()
            .any(|(f, since)| *f == n && !v.at_least(*since))
        {
            return Err(Error::not_acceptable().into());
        }
    }
    Ok(())
}

fn rule_path(r: &InspectionRule) -> String {
    format!("inspection_rules/{}", r.uuid)
}

/// A rule as shown: `fields` in upstream's order, then `links`; a sensitive rule's
/// conditions and actions are null.
fn doc(r: &InspectionRule, base: &str, fields: &[&str]) -> Value {
    let mut d = Map::new();
    let items = |list: &[ironic_model::node::JsonObject], condition: bool| {
        if r.sensitive {
            Value::Null
        } else {
            Value::Array(list.iter().map(|i| item_view(i, condition)).collect())
        }
    };
    for f in fields {
        let v = match *f {
            "uuid" => json!(r.uuid),
            "created_at" => json!(Ts(&r.created_at)),
            "updated_at" => json!(r.updated_at.as_ref().map(Ts)),
            "description" => json!(r.description),
            "priority" => json!(r.priority),
            "sensitive" => json!(r.sensitive),
            "phase" => json!(r.phase),
            "conditions" => items(&r.conditions, true),
            "actions" => items(&r.actions, false),
            _ => continue,
        };
        d.insert((*f).to_string(), v);
    }
    d.insert("links".into(), links_value(base, &rule_path(r)));
    Value::Object(d)
}

async fn load(st: &AppState, uuid: &str) -> Result<InspectionRule, Error> {
    st.db
        .inspection_rule_by_uuid(uuid)
        .await?
        .ok_or_else(|| ir::not_found(uuid))
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
    Query::parse(q.as_deref())?.only(&[])?;
    // Upstream checks the schema before the policy; the operators' arguments after.
    if let Err(Error::Invalid(m)) = validate_doc(&body, Origin::Create)
        && m.starts_with("Schema error:")
    {
        return Err(ApiError::invalid(m));
    }
    authz.check(Policy::InspectionRuleCreate)?;
    let d = validate_doc(&body, Origin::Create)?;
    let mut r = InspectionRule {
        id: 0,
        uuid: d
            .uuid
            .clone()
            .unwrap_or_else(ironic_model::RuleUuid::new_v4),
        description: None,
        priority: 0,
        sensitive: false,
        phase: String::new(),
        conditions: Vec::new(),
        actions: Vec::new(),
        built_in: false,
        created_at: ironic_model::node::now(),
        updated_at: None,
    };
    r.set(d);
    let created = st.db.inspection_rule_create(&r).await?;
    tracing::info!(uuid = %created.uuid, priority = created.priority, "inspection rule created");
    let mut resp = json_response(StatusCode::CREATED, &doc(&created, &base, FIELDS));
    crate::set_location(&mut resp, &format!("{base}/v1/{}", rule_path(&created)));
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
    if let Some(l) = q.get("limit")
        && l.trim().parse::<i64>().is_err()
    {
        return Err(ApiError::invalid(format!(
            "Expected an integer for limit: {l}"
        )));
    }
    let detail = q.bool("detail")?.unwrap_or(false);
    only(
        &q,
        &[
            "detail", "fields", "marker", "limit", "sort_key", "sort_dir", "phase",
        ],
    )?;
    if let Some(d) = q.get("sort_dir")
        && !matches!(d, "asc" | "desc")
    {
        return Err(schema(format_args!(
            "{} is not one of ['asc', 'desc']",
            py_repr(&json!(d))
        )));
    }
    let sort_key = q.get("sort_key").unwrap_or("id");
    if matches!(sort_key, "actions" | "conditions") {
        return Err(schema(format_args!(
            "'{sort_key}' should not be valid under {{'type': 'string', 'enum': ['actions', 'conditions']}}"
        )));
    }
    authz.check(Policy::InspectionRuleGet)?;
    too_new(
        q.get("fields")
            .into_iter()
            .flat_map(|f| f.split(','))
            .map(str::trim)
            .chain([sort_key]),
        v,
    )?;
    let fields = match q.get("fields") {
        Some(_) if detail => {
            return Err(ApiError::invalid(
                "Can not specify ?detail=True and fields in the same request.",
            ));
        }
        Some(f) => Some(f),
        None => None,
    };
    let lp = q.list_params(st.settings.max_limit, None)?;
    let marker = match lp.marker {
        None => None,
        Some(m) => Some(
            st.db
                .inspection_rule_by_uuid(&m.to_ascii_lowercase())
                .await?
                .ok_or_else(|| ir::not_found(m))?,
        ),
    };
    if !SORT_KEYS.contains(&sort_key) {
        return Err(ApiError::invalid(format!(
            "The sort_key value \"{sort_key}\" is an invalid field for sorting"
        )));
    }
    // Every rule is in phase `main`; upstream takes the filter and does not apply it.
    // Rules have no `scope` column: sorted by it, they come in id order.
    let column = if sort_key == "scope" { "id" } else { sort_key };
    let page = st
        .db
        .inspection_rule_list(column, lp.desc, marker.as_ref(), lp.size())
        .await?;
    // Upstream judges `fields` per item: an empty page never fails.
    let shown: Vec<&'static str> = match fields {
        Some(f) if !page.is_empty() => fields_of(f, v)?,
        Some(_) => Vec::new(),
        None if detail => FIELDS.to_vec(),
        None => FIELDS
            .iter()
            .copied()
            .filter(|f| DEFAULT_LIST_FIELDS.contains(f))
            .collect(),
    };
    let docs: Vec<Value> = page.iter().map(|r| doc(r, &base, &shown)).collect();
    let last = page.last().map(|r| r.uuid.as_str());
    Ok(json_response(
        StatusCode::OK,
        &lp.page(&base, "inspection_rules", "inspection_rules", docs, last),
    ))
}

pub async fn get_one(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    Base(base): Base,
    P(id): P<String>,
    RawQuery(q): RawQuery,
) -> ApiResult {
    gate(req.version, StatusCode::NOT_FOUND)?;
    let uuid = path_uuid(&id)?;
    let q = Query::parse(q.as_deref())?;
    only(&q, &["fields"])?;
    authz.check(Policy::InspectionRuleGet)?;
    let r = load(&st, &uuid).await?;
    let fields = match q.get("fields") {
        Some(f) => fields_of(f, req.version)?,
        None => FIELDS.to_vec(),
    };
    Ok(json_response(StatusCode::OK, &doc(&r, &base, &fields)))
}

/// Whether a patch turns the sensitive flag off: the first `add`/`replace` of
/// `/sensitive` with a value Python holds false (null aside), or its removal.
fn unsets_sensitive(ops: &[patch::PatchOp]) -> bool {
    ops.iter()
        .find(|o| o.path == "/sensitive")
        .is_some_and(|o| match (&o.op, &o.value) {
            (Op::Remove, _) => true,
            (_, Some(v)) => match v {
                Value::Null => true,
                Value::Bool(b) => !b,
                Value::Number(n) => n.as_f64() == Some(0.0),
                Value::String(s) => s.is_empty(),
                Value::Array(a) => a.is_empty(),
                Value::Object(o) => o.is_empty(),
            },
            (_, None) => false,
        })
}

fn describe_patch(body: &Value) -> String {
    py_repr(body)
}

pub async fn patch(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    Base(base): Base,
    P(id): P<String>,
    RawQuery(q): RawQuery,
    JsonBody(body): JsonBody,
) -> ApiResult {
    gate(req.version, StatusCode::METHOD_NOT_ALLOWED)?;
    if !is_uuid_like(&id) {
        return Err(ApiError::invalid(format!(
            "Expected UUID for inspection_rule_uuid: {id}"
        )));
    }
    Query::parse(q.as_deref())?.only(&[])?;
    let ops = patch::parse(&body)?;
    authz.check(Policy::InspectionRuleUpdate)?;
    let mut r = load(&st, &id.to_ascii_lowercase()).await?;
    if r.sensitive && unsets_sensitive(&ops) {
        return Err(ApiError::invalid(format!(
            "Couldn't apply patch '{}'. Reason: Inspection rules cannot have the sensitive flag unset.",
            describe_patch(&body)
        )));
    }
    let mut d = r.patch_doc();
    for op in &ops {
        match op.root() {
            root if PATCHABLE.contains(&root) => patch::apply(&mut d, op)?,
            "uuid" => {
                return Err(ApiError::invalid(format!(
                    "Cannot patch {}. Only the following can be updated: {}",
                    op.path,
                    PATCHABLE.join(", ")
                )));
            }
            // Read-only columns: upstream drops such changes without a word.
            "id" | "created_at" | "updated_at" | "scope" => {}
            root => {
                return Err(ApiError::invalid(format!(
                    "Adding a new attribute (/{root}) to the root of the resource is not allowed"
                )));
            }
        }
    }
    // What a removal leaves behind: the field's default (upstream fails on most).
    for (k, default) in [
        ("conditions", json!([])),
        ("priority", json!(0)),
        ("phase", json!(ir::PHASE_MAIN)),
        ("sensitive", json!(false)),
    ] {
        if !d.contains_key(k) || (k == "sensitive" && d[k].is_null()) {
            d.insert(k.into(), default);
        }
    }
    d.remove("uuid");
    let valid = validate_doc(&Value::Object(d), Origin::Patch)?;
    // Whatever the patch's spelling (`"false"`, several operations), once sensitive,
    // always sensitive.
    if r.sensitive && !valid.sensitive {
        return Err(ApiError::invalid(format!(
            "Couldn't apply patch '{}'. Reason: Inspection rules cannot have the sensitive flag unset.",
            describe_patch(&body)
        )));
    }
    r.set(valid);
    let saved = st.db.inspection_rule_update(&r).await?;
    tracing::info!(uuid = %saved.uuid, "inspection rule updated");
    Ok(json_response(StatusCode::OK, &doc(&saved, &base, FIELDS)))
}

pub async fn delete(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    P(id): P<String>,
    RawQuery(q): RawQuery,
) -> ApiResult {
    gate(req.version, StatusCode::METHOD_NOT_ALLOWED)?;
    let uuid = path_uuid(&id)?;
    Query::parse(q.as_deref())?.only(&[])?;
    authz.check(Policy::InspectionRuleDelete)?;
    let r = load(&st, &uuid).await?;
    st.db.inspection_rule_destroy(&r).await?;
    tracing::info!(uuid = %r.uuid, "inspection rule deleted");
    Ok(StatusCode::NO_CONTENT.into_response())
}
