//! `/v1/allocations` (1.52+) and `/v1/nodes/{node}/allocation`: validation, reads and
//! PATCH here; creating and deleting go to a conductor (`create_allocation` over the
//! shared queue, or the node's conductor when backfilling; `destroy_allocation`).

use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use ironic_db::allocations::AllocationFilter;
use ironic_model::allocation::{self as alloc, Allocation, NewAllocation, RESOURCE_CLASS_MAX};
use ironic_model::ids::{canonical_uuid, is_uuid_like};
use ironic_model::names::{is_valid_logical_name, trait_error_message, validate_trait};
use ironic_model::{AllocationUuid, Error, Version, patch};
use ironic_rpc::NodeRef;
use ironic_rpc::calls::{CreateAllocation, DestroyAllocation};
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{Map, Value, json};

use crate::body::{JsonBody, P};
use crate::error::ApiError;
use crate::nodes::{authorized_node, load_node};
use crate::policy::{Authz, Policy, Target};
use crate::query::{LinkArgs, Query, field_list};
use crate::view::{Links, ListPage, Ts};
use crate::{AppState, Base, Req, json_response, json_response_sized};

type ApiResult = Result<Response, ApiError>;

/// Fields in upstream's order; `owner` from 1.60.
const FIELDS: &[&str] = &[
    "uuid",
    "created_at",
    "updated_at",
    "candidate_nodes",
    "extra",
    "last_error",
    "name",
    "owner",
    "resource_class",
    "state",
    "traits",
    "node_uuid",
];

fn gate_read(v: Version) -> Result<(), ApiError> {
    if v.at_least(52) {
        Ok(())
    } else {
        Err(Error::NotFound("The API version does not allow allocations".into()).into())
    }
}

fn gate_write(v: Version) -> Result<(), ApiError> {
    if v.at_least(52) {
        Ok(())
    } else {
        Err(ApiError::MethodNotAllowed(
            "The API version does not allow allocations".into(),
        ))
    }
}

fn fields_of(q: &Query, v: Version) -> Result<Vec<&'static str>, ApiError> {
    let all: Vec<&'static str> = FIELDS
        .iter()
        .copied()
        .filter(|f| *f != "owner" || v.at_least(60))
        .collect();
    let Some(list) = q.get("fields") else {
        return Ok(all);
    };
    // In the list's order: an unknown field before `owner` is the 400 (field_list's).
    for f in list.split(',').map(str::trim) {
        if f == "owner" && !v.at_least(60) {
            return Err(Error::not_acceptable().into());
        }
        if !f.is_empty() && !FIELDS.contains(&f) {
            break;
        }
    }
    field_list(list, FIELDS)
}

/// An allocation as the API shows it (`fields` in upstream's order, the links after
/// them and `node_uuid` last, as upstream), written straight into the answer: built as a
/// JSON value first, a page of 100 cost the API more than twice what reading it from the
/// database did (perf at 100,000 nodes, docs/scale.md).
struct AllocationView<'a> {
    a: &'a Allocation,
    base: &'a str,
    fields: &'a [&'a str],
}

impl Serialize for AllocationView<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let a = self.a;
        let mut m = s.serialize_map(None)?;
        for f in self.fields {
            match *f {
                "uuid" => m.serialize_entry(f, &a.uuid)?,
                "created_at" => m.serialize_entry(f, &Ts(&a.created_at))?,
                "updated_at" => m.serialize_entry(f, &a.updated_at.as_ref().map(Ts))?,
                "candidate_nodes" => m.serialize_entry(f, &a.candidate_nodes)?,
                "extra" => m.serialize_entry(f, &a.extra)?,
                "last_error" => m.serialize_entry(f, &a.last_error)?,
                "name" => m.serialize_entry(f, &a.name)?,
                "owner" => m.serialize_entry(f, &a.owner)?,
                "resource_class" => m.serialize_entry(f, &a.resource_class)?,
                "state" => m.serialize_entry(f, a.state.as_str())?,
                "traits" => m.serialize_entry(f, &a.traits)?,
                // After the links, as upstream.
                _ => {}
            }
        }
        let path = format!("allocations/{}", a.uuid);
        m.serialize_entry(
            "links",
            &Links {
                base: self.base,
                path: &path,
                suffix: "",
            },
        )?;
        if self.fields.contains(&"node_uuid") {
            m.serialize_entry("node_uuid", &a.node_uuid)?;
        }
        m.end()
    }
}

impl AllocationView<'_> {
    /// About what one allocation takes in a list (its links are most of it).
    const BYTES: usize = 640;
}

fn one_response(a: &Allocation, base: &str, fields: &[&str], status: StatusCode) -> ApiResult {
    Ok(json_response(status, &AllocationView { a, base, fields }))
}

/// By uuid, else by name.
async fn load(st: &AppState, ident: &str) -> Result<Allocation, Error> {
    let found = if is_uuid_like(ident) {
        st.db
            .allocation_by_uuid(&canonical_uuid(ident).unwrap_or_else(|| ident.to_string()))
            .await?
    } else if is_valid_logical_name(ident) {
        st.db.allocation_by_name(ident).await?
    } else {
        return Err(Error::invalid(format!(
            "Expected a logical name or UUID but received {ident}."
        )));
    };
    found.ok_or_else(|| alloc::not_found(ident))
}

fn schema_type_error(v: &Value, ty: &str) -> ApiError {
    ApiError::invalid(format!(
        "Schema error: {} is not of type {ty}",
        patch::py_repr(v)
    ))
}

fn opt_string(
    body: &Map<String, Value>,
    key: &str,
    max: usize,
) -> Result<Option<String>, ApiError> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.chars().count() <= max => Ok(Some(s.clone())),
        Some(v @ Value::String(_)) => Err(ApiError::invalid(format!(
            "Schema error: {} is too long",
            patch::py_repr(v)
        ))),
        Some(v) => Err(schema_type_error(v, "'string', 'null'")),
    }
}

fn string_list(body: &Map<String, Value>, key: &str) -> Result<Vec<String>, ApiError> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(l)) => l
            .iter()
            .map(|v| match v {
                Value::String(s) => Ok(s.clone()),
                v => Err(schema_type_error(v, "'string'")),
            })
            .collect(),
        Some(v) => Err(schema_type_error(v, "'array', 'null'")),
    }
}

/// A node an allocation request names (`node`, `?node=`): 400 with the not-found
/// message when it does not exist or is not `usable` by the caller (as upstream, which
/// does not tell the two apart).
async fn named_node(
    st: &AppState,
    ident: &str,
    v: Version,
    usable: impl Fn(&ironic_model::Node) -> bool,
) -> Result<ironic_model::Node, Error> {
    match load_node(st, ident, v).await {
        Ok(node) if usable(&node) => Ok(node),
        Ok(_) | Err(Error::NotFound(_)) => Err(Error::Invalid(
            Error::node_not_found(ident).message().to_string(),
        )),
        Err(e) => Err(e),
    }
}

pub async fn create(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    Base(base): Base,
    RawQuery(q): RawQuery,
    JsonBody(body): JsonBody,
) -> ApiResult {
    let v = req.version;
    gate_write(v)?;
    authz.check(Policy::AllocationCreate)?;
    // A project's allocations are its own, and choose among the nodes it owns or leases;
    // only a system member may name another owner or any node.
    let restricted = !authz.allows(Policy::AllocationCreateRestricted, Target::default());
    Query::parse(q.as_deref())?.only(&[])?;
    let Value::Object(body) = body else {
        return Err(schema_type_error(&body, "'object'"));
    };
    let mut allowed = vec![
        "resource_class",
        "traits",
        "candidate_nodes",
        "name",
        "uuid",
        "extra",
    ];
    if v.at_least(58) {
        allowed.push("node");
    }
    allowed.push("owner");
    if let Some(k) = body.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(ApiError::invalid(format!(
            "Schema error: Additional properties are not allowed ('{k}' was unexpected)"
        )));
    }
    if body.contains_key("owner") && !v.at_least(60) {
        return Err(Error::not_acceptable().into());
    }
    let resource_class = opt_string(&body, "resource_class", RESOURCE_CLASS_MAX)?;
    let name = opt_string(&body, "name", 255)?;
    let uuid = opt_string(&body, "uuid", 36)?;
    let mut owner = opt_string(&body, "owner", 255)?;
    if let Some(mine) = authz.project() {
        match &owner {
            Some(o) if o != mine && restricted => {
                return Err(Error::Forbidden(format!(
                    "Cannot create allocation with an owner Project ID value {o} not matching the requester Project ID {mine}. Policy {} is required for this capability.",
                    Policy::AllocationCreateRestricted.name()
                ))
                .into());
            }
            Some(_) => {}
            None => owner = Some(mine.to_string()),
        }
    }
    // A node the caller may not see is "not found", as one that does not exist.
    let usable = |n: &ironic_model::Node| {
        !restricted || Policy::NodeGet.allows(authz.creds(), Target::node(n))
    };
    let node_ident = opt_string(&body, "node", 255)?;
    let traits = string_list(&body, "traits")?;
    for t in &traits {
        if let Err(e) = validate_trait(t) {
            let msg =
                trait_error_message("", t, &e).replacen("Schema error for : ", "Schema error: ", 1);
            return Err(ApiError::invalid(msg));
        }
    }
    let candidates = string_list(&body, "candidate_nodes")?;
    let extra = match body.get("extra") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(o)) => o.clone(),
        Some(v) => return Err(schema_type_error(v, "'object', 'null'")),
    };
    if let Some(n) = &name
        && !is_valid_logical_name(n)
    {
        return Err(ApiError::invalid(format!(
            "Cannot create allocation with invalid name '{n}'"
        )));
    }
    if let Some(u) = &uuid
        && canonical_uuid(u).is_none()
    {
        return Err(ApiError::invalid(format!(
            "Schema error: '{u}' is not a 'uuid'"
        )));
    }
    // Candidates by uuid or name, kept in order; every unknown one is named.
    let mut candidate_nodes = Vec::with_capacity(candidates.len());
    let mut missing = Vec::new();
    for c in &candidates {
        match load_node(&st, c, v).await {
            Ok(n) if usable(&n) => candidate_nodes.push(n.uuid),
            Ok(_) => missing.push(c.clone()),
            Err(Error::NotFound(_) | Error::Invalid(_)) => missing.push(c.clone()),
            Err(e) => return Err(e.into()),
        }
    }
    if !missing.is_empty() {
        return Err(ApiError::invalid(format!(
            "Nodes cannot be found: {}",
            missing.join(", ")
        )));
    }
    let backfill = match &node_ident {
        Some(n) => Some(named_node(&st, n, v, usable).await?),
        None => None,
    };
    if resource_class.is_none() && backfill.is_none() {
        return Err(ApiError::invalid(
            "The resource_class field is mandatory when not backfilling",
        ));
    }
    // Checked above; a backfilled node's instance_uuid is checked where it is set.
    let uuid = match (&uuid, &backfill) {
        (Some(u), _) => AllocationUuid::parse(u),
        (None, Some(n)) => n.instance_uuid.as_deref().and_then(AllocationUuid::parse),
        (None, None) => None,
    }
    .unwrap_or_else(AllocationUuid::new_v4);
    let resource_class =
        resource_class.or_else(|| backfill.as_ref().and_then(|n| n.resource_class.clone()));
    let create = CreateAllocation {
        allocation: NewAllocation {
            uuid,
            name,
            resource_class,
            candidate_nodes,
            traits,
            owner,
            extra,
        },
        backfill: backfill.as_ref().map(NodeRef::from),
    };
    let created = st.conductor.call(&req.ctx, create).await?;
    let fields = fields_of(&Query(Vec::new()), v)?;
    let mut resp = one_response(&created, &base, &fields, StatusCode::CREATED)?;
    crate::set_location(
        &mut resp,
        &format!("{base}/v1/allocations/{}", created.uuid),
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
    let v = req.version;
    gate_read(v)?;
    let q = Query::parse(q.as_deref())?;
    q.only(&[
        "node",
        "resource_class",
        "state",
        "owner",
        "fields",
        "limit",
        "marker",
        "sort_key",
        "sort_dir",
    ])?;
    if q.has("owner") && !v.at_least(60) {
        return Err(Error::not_acceptable().into());
    }
    let fields = fields_of(&q, v)?;
    let scope = authz.list_scope(
        Policy::AllocationListAll,
        Policy::AllocationList,
        q.get("owner"),
    )?;
    let mut f = AllocationFilter {
        state: q.get("state").map(str::to_owned),
        resource_class: q.get("resource_class").map(str::to_owned),
        owner: scope.or_else(|| q.get("owner").map(str::to_owned)),
        node_id: None,
    };
    if let Some(n) = q.get("node") {
        let visible =
            |node: &ironic_model::Node| Policy::NodeGet.allows(authz.creds(), Target::node(node));
        f.node_id = Some(named_node(&st, n, v, visible).await?.id);
    }
    let lp = q.list_params(st.settings.max_limit, None)?;
    let marker = match lp.marker {
        Some(m) => Some(
            st.db
                .allocation_by_uuid(m)
                .await?
                .ok_or_else(|| alloc::not_found(m))?,
        ),
        None => None,
    };
    let page = st
        .db
        .allocation_list(&f, lp.sort_key, lp.desc, marker.as_ref(), lp.size())
        .await?;
    // Each one must be readable too (a project's service user may list, not read).
    if page
        .iter()
        .any(|a| !Policy::AllocationGet.allows(authz.creds(), Target::allocation(a)))
    {
        return Err(Policy::AllocationGet.denied());
    }
    let next = lp.next(
        &base,
        "allocations",
        &LinkArgs::Kept,
        page.len(),
        page.last().map(|a| a.uuid.as_str()),
    );
    Ok(json_response_sized(
        StatusCode::OK,
        &ListPage {
            key: "allocations",
            items: &page,
            view: |a| AllocationView {
                a,
                base: &base,
                fields: &fields,
            },
            next: next.as_deref(),
        },
        crate::RESPONSE_BYTES + AllocationView::BYTES * page.len(),
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
    gate_read(req.version)?;
    let q = Query::parse(q.as_deref())?;
    q.only(&["fields"])?;
    let fields = fields_of(&q, req.version)?;
    let a = load(&st, &ident).await?;
    authz.allocation(&a, &ident, Policy::AllocationGet)?;
    one_response(&a, &base, &fields, StatusCode::OK)
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
    if !v.at_least(57) {
        return Err(ApiError::MethodNotAllowed(
            "The API version does not allow updating allocations".into(),
        ));
    }
    Query::parse(q.as_deref())?.only(&[])?;
    let ops = patch::parse(&body)?;
    for op in &ops {
        if !matches!(op.root(), "name" | "extra") {
            return Err(ApiError::invalid(format!(
                "Cannot patch {}. Only the following can be updated: name, extra",
                op.path
            )));
        }
    }
    let mut a = load(&st, &ident).await?;
    authz.allocation(&a, &ident, Policy::AllocationUpdate)?;
    let mut d = Map::new();
    d.insert("name".into(), json!(a.name));
    d.insert("extra".into(), Value::Object(a.extra.clone()));
    for op in &ops {
        patch::apply(&mut d, op)?;
    }
    a.name = match d.get("name") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if is_valid_logical_name(s) => Some(s.clone()),
        Some(other) => {
            return Err(ApiError::invalid(format!(
                "Cannot update allocation with invalid name '{}'",
                other.as_str().unwrap_or(&other.to_string())
            )));
        }
    };
    a.extra = match d.get("extra") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(o)) => o.clone(),
        Some(v) => return Err(schema_type_error(v, "'object'")),
    };
    let saved = st.db.allocation_update_meta(&a).await?;
    let fields = fields_of(&Query(Vec::new()), v)?;
    one_response(&saved, &base, &fields, StatusCode::OK)
}

pub async fn delete(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
) -> ApiResult {
    gate_write(req.version)?;
    Query::parse(q.as_deref())?.only(&[])?;
    let a = load(&st, &ident).await?;
    authz.allocation(&a, &ident, Policy::AllocationDelete)?;
    let destroy = DestroyAllocation {
        allocation: a.reference(),
    };
    st.conductor.call(&req.ctx, destroy).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// The routing-style 404 of an endpoint the microversion does not have.
fn node_gate(v: Version) -> Result<(), ApiError> {
    if v.at_least(52) {
        Ok(())
    } else {
        Err(ApiError::routing(StatusCode::NOT_FOUND, ""))
    }
}

/// The allocation of a node the caller may see (404 otherwise), if the caller may do
/// `p` on it (403 otherwise: the node is visible).
async fn node_allocation(
    st: &AppState,
    authz: &Authz,
    ident: &str,
    v: Version,
    p: Policy,
) -> Result<Allocation, ApiError> {
    let node = authorized_node(st, authz, ident, v, Policy::NodeGet).await?;
    let a = st
        .db
        .allocation_by_node(node.id)
        .await?
        .ok_or_else(|| Error::NotFound(format!("Allocation for node {ident} was not found")))?;
    if !authz.allows(p, Target::allocation(&a)) {
        return Err(p.denied());
    }
    Ok(a)
}

pub async fn node_get(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    Base(base): Base,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
) -> ApiResult {
    node_gate(req.version)?;
    let q = Query::parse(q.as_deref())?;
    q.only(&["fields"])?;
    let fields = fields_of(&q, req.version)?;
    let a = node_allocation(&st, &authz, &ident, req.version, Policy::AllocationGet).await?;
    one_response(&a, &base, &fields, StatusCode::OK)
}

pub async fn node_delete(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
) -> ApiResult {
    node_gate(req.version)?;
    Query::parse(q.as_deref())?.only(&[])?;
    let a = node_allocation(&st, &authz, &ident, req.version, Policy::AllocationDelete).await?;
    let destroy = DestroyAllocation {
        allocation: a.reference(),
    };
    st.conductor.call(&req.ctx, destroy).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
