//! `/v1/ports` and `/v1/portgroups`, and their lists under a node or a port group.
//! Reads come from the database; every write goes to the conductor that owns the node,
//! which applies it under the node's lock (`ironic-conductor` `nics.rs`). Both
//! resources share one shape ([`Nic`]): fields by microversion, lists with filters,
//! `fields`, `detail`, pagination and sort, and the policy on the owning node.

use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use ironic_db::Db;
use ironic_db::ports::{Key, NicListQuery};
use ironic_model::ids::ResourceUuid;
use ironic_model::ids::canonical_uuid;
use ironic_model::port::{
    self as pm, PORT_FIELDS, PORTGROUP_FIELDS, PORTGROUP_MIN, Port, PortSpec, Portgroup,
    PortgroupSpec, field_since, normalize_mac,
};
use ironic_model::{Error, Node, NodeId, NodeUuid, PortUuid, PortgroupUuid, Version, patch};
use ironic_rpc::NodeRef;
use ironic_rpc::calls::{
    CreatePort, CreatePortgroup, DestroyPort, DestroyPortgroup, UpdatePort, UpdatePortgroup,
};
use serde_json::{Map, Value, json};

use crate::body::{JsonBody, P};
use crate::error::ApiError;
use crate::nodes::load_node;
use crate::policy::{Authz, Policy, Target};
use crate::query::{LinkArgs, Query, field_list};
use crate::view::{Ts, links_value};
use crate::{AppState, Base, Req, json_response};

type ApiResult = Result<Response, ApiError>;

/// A field only some callers see: the policy, and how to hide it from the others.
pub(crate) type Restricted<T> = (Policy, fn(&mut T));

/// What ports, port groups and volume objects have in common for the API.
pub(crate) trait Nic: Sized + Send {
    /// Singular, as in messages and schema errors.
    const WHAT: &'static str;
    /// The collection's path below `/v1`.
    const PATH: &'static str;
    /// The list's key.
    const KEY: &'static str;
    /// The field `links` goes before (`""`: at the end).
    const LINKS_BEFORE: &'static str;
    /// Found by name too (else by uuid only: 400 for anything else).
    const BY_NAME: bool;
    /// The list's filter arguments.
    const FILTERS: &'static [&'static str];
    /// The microversion of the `detail` argument.
    const DETAIL_SINCE: u16;
    /// Fields a PATCH may not remove.
    const REQUIRED: &'static [&'static str] = &[];
    /// A field only some callers see (a target's `properties`): the policy, and what
    /// the others see instead.
    fn restricted() -> Option<Restricted<Self>> {
        None
    }
    const FIELDS: &'static [(&'static str, u16)];
    const DEFAULT_FIELDS: &'static [&'static str];
    const GET: Policy;
    const LIST: Policy;
    const LIST_ALL: Policy;
    /// The microversion from which the resource exists.
    const SINCE: u16;
    /// The type of its uuid (what a call names it by).
    type Uuid;
    fn id(&self) -> i64;
    fn uuid(&self) -> &str;
    fn typed_uuid(&self) -> Self::Uuid;
    fn node_id(&self) -> NodeId;
    fn value(&self, field: &str) -> Value;
    /// Link arrays shown after `links` in full views (a port group's `ports`).
    fn trailer(&self, _base: &str, _v: Version) -> Option<(&'static str, Value)> {
        None
    }
    fn not_found(ident: &str) -> Error;
    async fn fetch(db: &Db, key: Key<'_>) -> Result<Option<Self>, Error>;
    async fn page(db: &Db, q: &NicListQuery) -> Result<Vec<Self>, Error>;
}

fn s(v: &Option<String>) -> Value {
    v.clone().map_or(Value::Null, Value::String)
}

impl Nic for Port {
    type Uuid = PortUuid;
    const WHAT: &'static str = "port";
    const PATH: &'static str = "ports";
    const KEY: &'static str = "ports";
    const LINKS_BEFORE: &'static str = "portgroup_uuid";
    const BY_NAME: bool = true;
    const FILTERS: &'static [&'static str] = &[
        "node",
        "node_uuid",
        "address",
        "portgroup",
        "description_contains",
        "shard",
        "conductor_groups",
    ];
    const DETAIL_SINCE: u16 = 43;
    const FIELDS: &'static [(&'static str, u16)] = PORT_FIELDS;
    const DEFAULT_FIELDS: &'static [&'static str] = pm::PORT_DEFAULT_LIST_FIELDS;
    const GET: Policy = Policy::PortGet;
    const LIST: Policy = Policy::PortList;
    const LIST_ALL: Policy = Policy::PortListAll;
    const SINCE: u16 = 1;
    fn id(&self) -> i64 {
        self.id
    }
    fn uuid(&self) -> &str {
        &self.uuid
    }
    fn typed_uuid(&self) -> Self::Uuid {
        self.uuid.clone()
    }
    fn node_id(&self) -> NodeId {
        self.node_id
    }
    fn value(&self, f: &str) -> Value {
        match f {
            "uuid" => json!(self.uuid),
            "created_at" => json!(Ts(&self.created_at)),
            "updated_at" => json!(self.updated_at.as_ref().map(Ts)),
            "address" => json!(self.address),
            "extra" => Value::Object(self.extra.clone()),
            "internal_info" => Value::Object(self.internal_info.clone()),
            "is_smartnic" => json!(self.is_smartnic),
            "local_link_connection" => Value::Object(self.local_link_connection.clone()),
            "physical_network" => s(&self.physical_network),
            "pxe_enabled" => json!(self.pxe_enabled),
            "node_uuid" => json!(self.node_uuid),
            "name" => s(&self.name),
            "description" => s(&self.description),
            "vendor" => s(&self.vendor),
            "category" => s(&self.category),
            "available_for_dynamic_portgroup" => json!(self.available_for_dynamic_portgroup),
            "portgroup_uuid" => s(&self.portgroup_uuid.as_deref().map(str::to_string)),
            _ => Value::Null,
        }
    }
    fn not_found(ident: &str) -> Error {
        pm::port_not_found(ident)
    }
    async fn fetch(db: &Db, key: Key<'_>) -> Result<Option<Self>, Error> {
        db.port_get(key).await
    }
    async fn page(db: &Db, q: &NicListQuery) -> Result<Vec<Self>, Error> {
        db.port_list(q).await
    }
}

impl Nic for Portgroup {
    type Uuid = PortgroupUuid;
    const WHAT: &'static str = "portgroup";
    const PATH: &'static str = "portgroups";
    const REQUIRED: &'static [&'static str] = &["mode"];
    const KEY: &'static str = "portgroups";
    const LINKS_BEFORE: &'static str = "";
    const BY_NAME: bool = true;
    const FILTERS: &'static [&'static str] =
        &["node", "node_uuid", "address", "shard", "conductor_groups"];
    const DETAIL_SINCE: u16 = 43;
    const FIELDS: &'static [(&'static str, u16)] = PORTGROUP_FIELDS;
    const DEFAULT_FIELDS: &'static [&'static str] = pm::PORTGROUP_DEFAULT_LIST_FIELDS;
    const GET: Policy = Policy::PortgroupGet;
    const LIST: Policy = Policy::PortgroupList;
    const LIST_ALL: Policy = Policy::PortgroupListAll;
    const SINCE: u16 = PORTGROUP_MIN;
    fn id(&self) -> i64 {
        self.id
    }
    fn uuid(&self) -> &str {
        &self.uuid
    }
    fn typed_uuid(&self) -> Self::Uuid {
        self.uuid.clone()
    }
    fn node_id(&self) -> NodeId {
        self.node_id
    }
    fn value(&self, f: &str) -> Value {
        match f {
            "uuid" => json!(self.uuid),
            "created_at" => json!(Ts(&self.created_at)),
            "updated_at" => json!(self.updated_at.as_ref().map(Ts)),
            "address" => s(&self.address),
            "extra" => Value::Object(self.extra.clone()),
            "internal_info" => Value::Object(self.internal_info.clone()),
            "mode" => json!(self.mode),
            "name" => s(&self.name),
            "properties" => Value::Object(self.properties.clone()),
            "standalone_ports_supported" => json!(self.standalone_ports_supported),
            "node_uuid" => json!(self.node_uuid),
            "physical_network" => s(&self.physical_network),
            "category" => s(&self.category),
            "dynamic_portgroup" => json!(self.dynamic_portgroup),
            _ => Value::Null,
        }
    }
    fn trailer(&self, base: &str, v: Version) -> Option<(&'static str, Value)> {
        v.at_least(24).then(|| {
            (
                "ports",
                links_value(base, &format!("portgroups/{}/ports", self.uuid)),
            )
        })
    }
    fn not_found(ident: &str) -> Error {
        pm::portgroup_not_found(ident)
    }
    async fn fetch(db: &Db, key: Key<'_>) -> Result<Option<Self>, Error> {
        db.portgroup_get(key).await
    }
    async fn page(db: &Db, q: &NicListQuery) -> Result<Vec<Self>, Error> {
        db.portgroup_list(q).await
    }
}

/// Portgroup endpoints below 1.23: upstream's 404.
pub(crate) fn gate<T: Nic>(v: Version) -> Result<(), ApiError> {
    if v.at_least(T::SINCE) {
        Ok(())
    } else {
        Err(Error::NotFound("The API is not supported for this version".into()).into())
    }
}

/// An object in upstream's field order; `links` goes before [`Nic::LINKS_BEFORE`] or
/// at the end, then the trailer of full views.
pub(crate) fn render<T: Nic>(o: &T, base: &str, fields: &[&str], full: bool, v: Version) -> Value {
    let mut m = Map::new();
    let links = || links_value(base, &format!("{}/{}", T::PATH, o.uuid()));
    for f in fields {
        if *f == T::LINKS_BEFORE {
            m.insert("links".into(), links());
        }
        let mut val = o.value(f);
        if *f == "local_link_connection"
            && let Value::Object(llc) = &val
        {
            val = Value::Object(pm::llc_view(llc, v));
        }
        m.insert((*f).to_string(), val);
    }
    if !m.contains_key("links") {
        m.insert("links".into(), links());
    }
    if full && let Some((k, val)) = o.trailer(base, v) {
        m.insert(k.into(), val);
    }
    Value::Object(m)
}

/// `fields=`: known fields at this version (400 for unknown, 406 for newer ones).
pub(crate) fn fields_param<T: Nic>(list: &str, v: Version) -> Result<Vec<&'static str>, ApiError> {
    if !v.at_least(8) {
        return Err(Error::not_acceptable().into());
    }
    for f in list.split(',').map(str::trim) {
        if field_since(T::FIELDS, f).is_some_and(|since| !v.at_least(since)) {
            return Err(Error::not_acceptable().into());
        }
    }
    field_list(list, &pm::fields_at(T::FIELDS, v))
}

/// Loads `ident` (a uuid, or a name) and its node; 404 when either is missing or the
/// caller may not see the node, 403 when it may see it but not do `p`.
pub(crate) async fn load<T: Nic>(
    st: &AppState,
    authz: &Authz,
    ident: &str,
    p: Policy,
) -> Result<(T, Node), ApiError> {
    let uuid = canonical_uuid(ident);
    let key = match &uuid {
        Some(u) => Key::Uuid(u),
        None if T::BY_NAME => Key::Name(ident),
        None => {
            return Err(ApiError::invalid(format!(
                "Expected UUID for {}_uuid: {ident}",
                T::WHAT
            )));
        }
    };
    let o = T::fetch(&st.db, key)
        .await?
        .ok_or_else(|| T::not_found(ident))?;
    let node = st
        .db
        .node_by_id(o.node_id())
        .await?
        .ok_or_else(|| T::not_found(ident))?;
    authz.on_child(&node, T::GET, p, || T::not_found(ident))?;
    Ok((o, node))
}

/// A delete names the object by uuid (ports) — a name is 400 — or by either
/// (port groups).
pub(crate) fn uuid_only(ident: &str, what: &str) -> Result<(), ApiError> {
    match canonical_uuid(ident) {
        Some(_) => Ok(()),
        None => Err(ApiError::invalid(format!(
            "Expected UUID for {what}_uuid: {ident}"
        ))),
    }
}

/// Where a list is restricted to.
pub(crate) enum Within {
    All,
    Node(String),
    Portgroup(String),
}

pub(crate) async fn list<T: Nic>(
    st: &AppState,
    authz: &Authz,
    v: Version,
    base: &str,
    q: Query,
    detail_path: bool,
    within: Within,
) -> ApiResult {
    gate::<T>(v)?;
    let project = authz.list_scope(T::LIST_ALL, T::LIST, None)?;
    let mut allowed = vec!["limit", "marker", "sort_key", "sort_dir"];
    allowed.extend(T::FILTERS);
    if !detail_path {
        allowed.extend(["fields", "detail"]);
    }
    q.only(&allowed)?;
    // Filters newer than the request.
    let newer = |name: &str, since: u16| q.has(name) && !v.at_least(since);
    // `conductor_groups` (1.99) is not version-checked upstream (S084): neither here.
    let shard_since = if T::WHAT == "port" { 82 } else { 106 };
    if newer("shard", shard_since) {
        return Err(Error::not_acceptable_below(shard_since).into());
    }
    if newer("detail", T::DETAIL_SINCE)
        || newer("portgroup", 24)
        || newer("description_contains", 97)
    {
        return Err(Error::not_acceptable().into());
    }
    let detail = detail_path || q.bool("detail")?.unwrap_or(false);
    let fields = match q.get("fields") {
        Some(_) if detail => {
            return Err(ApiError::invalid(
                "Can not specify ?detail=True and fields in the same request.",
            ));
        }
        Some(f) => fields_param::<T>(f, v)?,
        None if detail => pm::fields_at(T::FIELDS, v),
        None => T::DEFAULT_FIELDS.to_vec(),
    };
    let node_arg = q.get("node").or_else(|| q.get("node_uuid"));
    if T::WHAT == "port" {
        let n = [node_arg.is_some(), q.has("portgroup"), q.has("shard")]
            .iter()
            .filter(|b| **b)
            .count();
        if n > 1 {
            return Err(Error::Forbidden("Operation not permitted.".into()).into());
        }
        if q.has("conductor_groups")
            && (node_arg.is_some() || q.has("portgroup") || q.has("address"))
        {
            return Err(ApiError::invalid(
                "Filtering by conductor_groups cannot be combined with node_ident, portgroup_ident, or node address filters.",
            ));
        }
    } else {
        let n = [
            node_arg.is_some(),
            q.has("address"),
            q.has("shard"),
            q.has("conductor_groups"),
        ]
        .iter()
        .filter(|b| **b)
        .count();
        if n > 1 {
            return Err(ApiError::invalid(
                "Filtering by node, address, or shard simultaneously is not supported.",
            ));
        }
    }
    let lp = q.list_params(st.settings.max_limit, None)?;
    let mut lq = NicListQuery {
        project,
        sort_key: lp.sort_key.to_string(),
        sort_desc: lp.desc,
        limit: lp.size(),
        description_contains: q.get("description_contains").map(str::to_string),
        shards: q.get("shard").map(crate::nodes::shard_list),
        // Empty names are dropped; none left is no filter (upstream's `string_list`).
        conductor_groups: q
            .get("conductor_groups")
            .map(|g| {
                g.split(',')
                    .map(|s| s.trim().to_ascii_lowercase())
                    .filter(|s| !s.is_empty())
                    .collect::<Vec<String>>()
            })
            .filter(|g| !g.is_empty()),
        ..Default::default()
    };
    if let Some(sk) = q.get("sort_key")
        && field_since(T::FIELDS, sk).is_some_and(|since| !v.at_least(since))
    {
        return Err(Error::not_acceptable().into());
    }
    if let Some(a) = q.get("address") {
        lq.address = Some(normalize_mac(a).ok_or_else(|| pm::bad_mac("address", a))?);
    }
    let path = match &within {
        Within::All => T::PATH.to_string(),
        Within::Node(ident) => {
            let node = load_node(st, ident, v).await?;
            authz.visible(&node, ident)?;
            lq.node_id = Some(node.id);
            format!("nodes/{}/{}", node.uuid.as_str(), T::PATH)
        }
        Within::Portgroup(ident) => {
            let (pg, _) = load::<Portgroup>(st, authz, ident, Policy::PortgroupGet).await?;
            lq.portgroup_id = Some(pg.id);
            format!("portgroups/{}/ports", pg.uuid)
        }
    };
    if let Some(n) = node_arg {
        let node = load_node(st, n, v).await?;
        authz.visible(&node, n)?;
        lq.node_id = Some(node.id);
    }
    if let Some(g) = q.get("portgroup") {
        let (pg, _) = load::<Portgroup>(st, authz, g, Policy::PortgroupGet).await?;
        lq.portgroup_id = Some(pg.id);
    }
    if let Some(m) = lp.marker {
        let uuid = canonical_uuid(m);
        let key = match &uuid {
            Some(u) => Key::Uuid(u),
            None if T::BY_NAME => Key::Name(m),
            None => return Err(T::not_found(m).into()),
        };
        let found = T::fetch(&st.db, key)
            .await?
            .ok_or_else(|| T::not_found(m))?;
        lq.marker = Some(found.id());
    }
    let mut page = T::page(&st.db, &lq).await?;
    hide_restricted(authz, &mut page);
    let full = fields.len() == pm::fields_at(T::FIELDS, v).len();
    let docs: Vec<Value> = page
        .iter()
        .map(|o| render(o, base, &fields, full, v))
        .collect();
    let path = if detail_path {
        format!("{path}/detail")
    } else {
        path
    };
    let how = LinkArgs::Sorted {
        others: false,
        fields: (!detail).then(|| fields.join(",")),
    };
    let last = page.last().map(|o| o.uuid());
    Ok(json_response(
        StatusCode::OK,
        &lp.page_with(base, &path, T::KEY, docs, &how, last),
    ))
}

/// Replaces the restricted field of each object the caller may not see.
pub(crate) fn hide_restricted<T: Nic>(authz: &Authz, objs: &mut [T]) {
    if let Some((p, hide)) = T::restricted()
        && !objs.is_empty()
        && !authz.allows(p, Target::default())
    {
        objs.iter_mut().for_each(hide);
    }
}

pub(crate) async fn get_one<T: Nic>(
    st: &AppState,
    authz: &Authz,
    v: Version,
    base: &str,
    ident: &str,
    q: Option<String>,
) -> ApiResult {
    gate::<T>(v)?;
    authz.could(T::GET)?;
    let q = Query::parse(q.as_deref())?;
    q.only(&["fields"])?;
    let all = pm::fields_at(T::FIELDS, v);
    let fields = match q.get("fields") {
        Some(f) => fields_param::<T>(f, v)?,
        None => all.clone(),
    };
    let (mut o, _) = load::<T>(st, authz, ident, T::GET).await?;
    hide_restricted(authz, std::slice::from_mut(&mut o));
    Ok(json_response(
        StatusCode::OK,
        &render(&o, base, &fields, fields.len() == all.len(), v),
    ))
}

/// A create body as an object whose keys exist at this version: 400 for unknown keys,
/// 406 for newer ones.
pub(crate) fn create_body<T: Nic>(
    body: Value,
    v: Version,
    settable: &[&str],
    extra_keys: &[(&str, u16)],
) -> Result<Map<String, Value>, ApiError> {
    let body = match body {
        Value::Object(o) => o,
        other => {
            return Err(ApiError::invalid(format!(
                "Schema error for {}: {} is not of type 'object'",
                T::WHAT,
                patch::py_repr(&other)
            )));
        }
    };
    for k in body.keys() {
        let since = if settable.contains(&k.as_str()) || k == "uuid" || k == "node_uuid" {
            field_since(T::FIELDS, k).unwrap_or(1)
        } else if let Some((_, since)) = extra_keys.iter().find(|(x, _)| x == k) {
            *since
        } else {
            return Err(ApiError::invalid(format!(
                "Schema error for {}: Additional properties are not allowed ('{k}' was unexpected)",
                T::WHAT
            )));
        };
        if !v.at_least(since) {
            return Err(Error::not_acceptable().into());
        }
    }
    Ok(body)
}

/// The `uuid` of a create body, or a new one.
pub(crate) fn new_uuid<T: ResourceUuid>(
    body: &mut Map<String, Value>,
    what: &str,
) -> Result<T, ApiError> {
    match body.remove("uuid") {
        None | Some(Value::Null) => Ok(T::new_v4()),
        Some(Value::String(u)) => T::parse(&u).ok_or_else(|| {
            ApiError::invalid(format!(
                "Schema error for {what}: {} is not a 'uuid'",
                ironic_model::names::py_repr_str(&u)
            ))
        }),
        Some(other) => Err(ApiError::invalid(format!(
            "Schema error for {what}: {} is not of type 'string'",
            patch::py_repr(&other)
        ))),
    }
}

/// The node a create body names (400 when it does not exist), with `p` decided on it.
pub(crate) async fn owning_node(
    st: &AppState,
    authz: &Authz,
    ident: &str,
    v: Version,
    p: Policy,
) -> Result<Node, ApiError> {
    let node = match load_node(st, ident, v).await {
        Ok(n) => n,
        Err(Error::NotFound(m)) => return Err(ApiError::invalid(m)),
        Err(e) => return Err(e.into()),
    };
    if !authz.allows(p, Target::node(&node)) {
        return Err(p.denied());
    }
    Ok(node)
}

pub(crate) fn created<T: Nic>(o: &T, base: &str, v: Version) -> Response {
    let fields = pm::fields_at(T::FIELDS, v);
    let mut resp = json_response(StatusCode::CREATED, &render(o, base, &fields, true, v));
    crate::set_location(&mut resp, &format!("{base}/v1/{}/{}", T::PATH, o.uuid()));
    resp
}

/// Checks a PATCH's paths: settable fields of this version (406 for newer ones, 400
/// for read-only ones).
pub(crate) fn patch_paths<T: Nic>(
    ops: &[patch::PatchOp],
    v: Version,
    settable: &[&str],
) -> Result<(), ApiError> {
    if let Some(op) = ops.iter().find(|op| {
        op.op == patch::Op::Remove
            && T::REQUIRED.contains(&op.root())
            && op.path.len() == op.root().len() + 1
    }) {
        return Err(ApiError::invalid(format!(
            "'{}' is a mandatory attribute and can not be removed",
            op.root()
        )));
    }
    for op in ops {
        let root = op.root();
        if root == "node_uuid" || settable.contains(&root) {
            if field_since(T::FIELDS, root).is_some_and(|since| !v.at_least(since)) {
                return Err(Error::not_acceptable().into());
            }
            if op.path == "/local_link_connection/network_type" && !v.at_least(64) {
                return Err(Error::not_acceptable().into());
            }
            continue;
        }
        return Err(ApiError::invalid(
            if field_since(T::FIELDS, root).is_some() {
                format!(
                    "'{}' is an internal attribute and can not be updated",
                    op.path
                )
            } else {
                format!("Cannot patch {}: no such field.", op.path)
            },
        ));
    }
    Ok(())
}

/// `PATCH /v1/<resource>/{ident}`: the paths checked here, the patch applied by the
/// node's conductor (`update` builds its call from the node, the object's uuid and the
/// operations).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn patch_via<T, C>(
    st: &AppState,
    authz: &Authz,
    req: &Req,
    base: &str,
    ident: &str,
    q: Option<String>,
    body: &Value,
    (settable, policy): (&[&str], Policy),
    update: impl FnOnce(NodeRef, T::Uuid, Vec<patch::PatchOp>) -> C,
) -> ApiResult
where
    T: Nic,
    C: ironic_rpc::Call<Reply = T>,
{
    let v = req.version;
    gate::<T>(v)?;
    authz.could(policy)?;
    Query::parse(q.as_deref())?.only(&[])?;
    let ops = patch::parse(body)?;
    patch_paths::<T>(&ops, v, settable)?;
    let (o, node) = load::<T>(st, authz, ident, policy).await?;
    let mut saved = st
        .conductor
        .call(&req.ctx, update(NodeRef::from(&node), o.typed_uuid(), ops))
        .await?;
    hide_restricted(authz, std::slice::from_mut(&mut saved));
    let fields = pm::fields_at(T::FIELDS, v);
    Ok(json_response(
        StatusCode::OK,
        &render(&saved, base, &fields, true, v),
    ))
}

/// `DELETE /v1/<resource>/{ident}`, carried out by the node's conductor; `uuid_only`:
/// a name is 400 (ports, as upstream).
pub(crate) async fn delete_via<T, C>(
    st: &AppState,
    authz: &Authz,
    req: &Req,
    ident: &str,
    q: Option<String>,
    (uuid_only_ident, policy): (bool, Policy),
    destroy: impl FnOnce(NodeRef, T::Uuid) -> C,
) -> ApiResult
where
    T: Nic,
    C: ironic_rpc::Call<Reply = ()>,
{
    gate::<T>(req.version)?;
    authz.could(policy)?;
    Query::parse(q.as_deref())?.only(&[])?;
    if uuid_only_ident {
        uuid_only(ident, T::WHAT)?;
    }
    let (o, node) = load::<T>(st, authz, ident, policy).await?;
    st.conductor
        .call(&req.ctx, destroy(NodeRef::from(&node), o.typed_uuid()))
        .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

// ---------------------------------------------------------------------------------------
// Ports

pub async fn port_create(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    Base(base): Base,
    RawQuery(q): RawQuery,
    JsonBody(body): JsonBody,
) -> ApiResult {
    let v = req.version;
    authz.could(Policy::PortCreate)?;
    Query::parse(q.as_deref())?.only(&[])?;
    let mut body = create_body::<Port>(body, v, pm::PORT_SETTABLE, &[("node_ident", 94)])?;
    let uuid = new_uuid(&mut body, "port")?;
    let node_ident = match (body.remove("node_ident"), body.get("node_uuid")) {
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid(
                "Schema error for port: only one of node_uuid and node_ident may be given.",
            ));
        }
        (Some(Value::String(n)), None) => n,
        (None, Some(Value::String(u))) => match canonical_uuid(u) {
            Some(u) => u,
            None => {
                return Err(ApiError::invalid(format!(
                    "Schema error for port: {} is not a 'uuid'",
                    ironic_model::names::py_repr_str(u)
                )));
            }
        },
        (None, None) => {
            return Err(ApiError::invalid(
                "Schema error for port: 'node_uuid' is a required property",
            ));
        }
        (Some(other), _) => {
            return Err(ApiError::invalid(format!(
                "Schema error for port: {} is not of type 'string'",
                patch::py_repr(&other)
            )));
        }
        (_, Some(other)) => {
            return Err(ApiError::invalid(format!(
                "Schema error for port: {} is not of type 'string'",
                patch::py_repr(other)
            )));
        }
    };
    // The shape first (400 before 404), with the node's uuid as given.
    if body.get("address").is_none() {
        return Err(ApiError::invalid(
            "Schema error for port: 'address' is a required property",
        ));
    }
    let node = owning_node(&st, &authz, &node_ident, v, Policy::PortCreate).await?;
    body.insert("node_uuid".into(), json!(node.uuid.as_str()));
    let spec = PortSpec::from_doc(&body, v)?;
    let port = Port::new(uuid, spec);
    let created_port = st
        .conductor
        .call(
            &req.ctx,
            CreatePort {
                node: NodeRef::from(&node),
                port,
            },
        )
        .await?;
    Ok(created(&created_port, &base, v))
}

pub async fn port_list(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    Base(base): Base,
    RawQuery(q): RawQuery,
) -> ApiResult {
    let q = Query::parse(q.as_deref())?;
    list::<Port>(&st, &authz, req.version, &base, q, false, Within::All).await
}

pub async fn port_detail(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    Base(base): Base,
    RawQuery(q): RawQuery,
) -> ApiResult {
    let q = Query::parse(q.as_deref())?;
    list::<Port>(&st, &authz, req.version, &base, q, true, Within::All).await
}

pub async fn port_get(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    Base(base): Base,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
) -> ApiResult {
    get_one::<Port>(&st, &authz, req.version, &base, &ident, q).await
}

pub async fn port_patch(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    Base(base): Base,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
    JsonBody(body): JsonBody,
) -> ApiResult {
    let version = req.version;
    let policy = (pm::PORT_SETTABLE, Policy::PortUpdate);
    patch_via(
        &st,
        &authz,
        &req,
        &base,
        &ident,
        q,
        &body,
        policy,
        |node, port_uuid, patch| UpdatePort {
            node,
            port_uuid,
            patch,
            version,
        },
    )
    .await
}

pub async fn port_delete(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
) -> ApiResult {
    let how = (true, Policy::PortDelete);
    delete_via::<Port, _>(&st, &authz, &req, &ident, q, how, |node, port_uuid| {
        DestroyPort { node, port_uuid }
    })
    .await
}

pub async fn node_ports(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    Base(base): Base,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
) -> ApiResult {
    let q = Query::parse(q.as_deref())?;
    refuse_parent_filter(&q, &["node", "node_uuid"])?;
    list::<Port>(
        &st,
        &authz,
        req.version,
        &base,
        q,
        false,
        Within::Node(ident),
    )
    .await
}

pub async fn node_ports_detail(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    Base(base): Base,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
) -> ApiResult {
    let q = Query::parse(q.as_deref())?;
    refuse_parent_filter(&q, &["node", "node_uuid"])?;
    list::<Port>(
        &st,
        &authz,
        req.version,
        &base,
        q,
        true,
        Within::Node(ident),
    )
    .await
}

/// `GET /v1/nodes/{node}/ports/{port}` (and the port group's): upstream's 400.
pub async fn child_port_one(authz: Authz) -> ApiResult {
    authz.could(Policy::PortGet)?;
    Err(ApiError::invalid("Malformed request URI."))
}

/// A filter on the parent given by the path is refused.
pub(crate) fn refuse_parent_filter(q: &Query, names: &[&str]) -> Result<(), ApiError> {
    match names.iter().find(|n| q.has(n)) {
        Some(n) => Err(ApiError::invalid(format!(
            "Unexpected argument {n}: the parent is in the path."
        ))),
        None => Ok(()),
    }
}

pub async fn portgroup_ports(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    Base(base): Base,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
) -> ApiResult {
    sub_gate(req.version)?;
    let q = Query::parse(q.as_deref())?;
    refuse_parent_filter(&q, &["portgroup"])?;
    list::<Port>(
        &st,
        &authz,
        req.version,
        &base,
        q,
        false,
        Within::Portgroup(ident),
    )
    .await
}

pub async fn portgroup_ports_detail(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    Base(base): Base,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
) -> ApiResult {
    sub_gate(req.version)?;
    let q = Query::parse(q.as_deref())?;
    refuse_parent_filter(&q, &["portgroup"])?;
    list::<Port>(
        &st,
        &authz,
        req.version,
        &base,
        q,
        true,
        Within::Portgroup(ident),
    )
    .await
}

/// The port group sub-resources (`/v1/nodes/{node}/portgroups`,
/// `/v1/portgroups/{pg}/ports`) exist from 1.24: a routing 404 below.
fn sub_gate(v: Version) -> Result<(), ApiError> {
    crate::error::route_since(v, 24)
}

// ---------------------------------------------------------------------------------------
// Port groups

pub async fn portgroup_create(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    Base(base): Base,
    RawQuery(q): RawQuery,
    JsonBody(body): JsonBody,
) -> ApiResult {
    let v = req.version;
    gate::<Portgroup>(v)?;
    authz.could(Policy::PortgroupCreate)?;
    Query::parse(q.as_deref())?.only(&[])?;
    let mut body = create_body::<Portgroup>(body, v, pm::PORTGROUP_SETTABLE, &[])?;
    let uuid = new_uuid(&mut body, "portgroup")?;
    // The shape first: a bad name or address is 400 whatever the node.
    let mut probe = body.clone();
    let node_uuid = pm::uuid_ref(&body, "node_uuid", NodeUuid::parse)?.ok_or_else(|| {
        ApiError::invalid("Schema error for portgroup: 'node_uuid' is a required property")
    })?;
    probe.insert("node_uuid".into(), json!(node_uuid.as_str()));
    let spec = PortgroupSpec::from_doc(&probe, None)?;
    let node = owning_node(&st, &authz, &node_uuid, v, Policy::PortgroupCreate).await?;
    let pg = Portgroup::new(uuid, spec);
    let saved = st
        .conductor
        .call(
            &req.ctx,
            CreatePortgroup {
                node: NodeRef::from(&node),
                portgroup: pg,
            },
        )
        .await?;
    Ok(created(&saved, &base, v))
}

pub async fn portgroup_list(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    Base(base): Base,
    RawQuery(q): RawQuery,
) -> ApiResult {
    let q = Query::parse(q.as_deref())?;
    list::<Portgroup>(&st, &authz, req.version, &base, q, false, Within::All).await
}

pub async fn portgroup_detail(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    Base(base): Base,
    RawQuery(q): RawQuery,
) -> ApiResult {
    let q = Query::parse(q.as_deref())?;
    list::<Portgroup>(&st, &authz, req.version, &base, q, true, Within::All).await
}

pub async fn portgroup_get(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    Base(base): Base,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
) -> ApiResult {
    get_one::<Portgroup>(&st, &authz, req.version, &base, &ident, q).await
}

pub async fn portgroup_patch(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    Base(base): Base,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
    JsonBody(body): JsonBody,
) -> ApiResult {
    let policy = (pm::PORTGROUP_SETTABLE, Policy::PortgroupUpdate);
    patch_via(
        &st,
        &authz,
        &req,
        &base,
        &ident,
        q,
        &body,
        policy,
        |node, portgroup_uuid, patch| UpdatePortgroup {
            node,
            portgroup_uuid,
            patch,
        },
    )
    .await
}

pub async fn portgroup_delete(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
) -> ApiResult {
    let how = (false, Policy::PortgroupDelete);
    delete_via::<Portgroup, _>(&st, &authz, &req, &ident, q, how, |node, portgroup_uuid| {
        DestroyPortgroup {
            node,
            portgroup_uuid,
        }
    })
    .await
}

pub async fn node_portgroups(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    Base(base): Base,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
) -> ApiResult {
    sub_gate(req.version)?;
    let q = Query::parse(q.as_deref())?;
    refuse_parent_filter(&q, &["node", "node_uuid"])?;
    list::<Portgroup>(
        &st,
        &authz,
        req.version,
        &base,
        q,
        false,
        Within::Node(ident),
    )
    .await
}

pub async fn node_portgroups_detail(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    Base(base): Base,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
) -> ApiResult {
    sub_gate(req.version)?;
    let q = Query::parse(q.as_deref())?;
    refuse_parent_filter(&q, &["node", "node_uuid"])?;
    list::<Portgroup>(
        &st,
        &authz,
        req.version,
        &base,
        q,
        true,
        Within::Node(ident),
    )
    .await
}
