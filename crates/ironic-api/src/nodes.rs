//! `/v1/nodes` and its sub-resources (reference §4.2).

use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use ironic_db::{NodeFilter, NodeListQuery};
use ironic_model::ids::{NodeIdent, NodeUuid, canonical_uuid};
use ironic_model::names::{
    is_hostname_safe, is_valid_logical_name, trait_error_message, validate_trait,
};
use ironic_model::node::{
    DEFAULT_LIST_FIELDS, FIELDS, FieldMask, PATCH_ALLOWED, field, from_create_body, parse_fields,
};
use ironic_model::patch;
use ironic_model::states::ProvisionState;
use ironic_model::{Error, Node, Version};
use ironic_rpc::NodeRef;
use ironic_rpc::calls::{
    AddNodeTraits, CreateNode, DestroyNode, RemoveNodeTraits, SetMaintenance, UpdateNode,
};
use serde_json::{Value, json};

use crate::body::P;
use crate::body::{JsonBody, RawBody, parse_json};
use crate::error::ApiError;
use crate::policy::{Authz, Policy, Redaction, Target};
use crate::query::{LinkArgs, Query};
use crate::view::{ListPage, NodeView, Ts, ViewCtx};
use crate::{AppState, Base, Req, json_response, json_response_sized};

type ApiResult = Result<Response, ApiError>;

/// Resolves `{ident}` the way Ironic does: a UUID, or from 1.5 a logical name.
fn parse_ident(ident: &str, v: Version) -> Result<NodeIdent, Error> {
    if let Some(u) = NodeUuid::parse(ident) {
        return Ok(NodeIdent::Uuid(u));
    }
    if !v.at_least(5) {
        return Err(Error::node_not_found(ident));
    }
    let ok = if v.at_least(10) {
        is_valid_logical_name(ident)
    } else {
        is_hostname_safe(ident)
    };
    if ok {
        Ok(NodeIdent::Name(ident.to_string()))
    } else {
        Err(Error::invalid(format!(
            "Expected a logical name or UUID but received {ident}."
        )))
    }
}

pub(crate) async fn load_node(st: &AppState, ident: &str, v: Version) -> Result<Node, Error> {
    match find_node(st, ident, v).await {
        // Before 1.91 a trailing ".json" is a format suffix: retry once without it
        // (upstream strips it first; a node whose name ends so is found either way).
        Err(e) if v.at_least(91) => Err(e),
        Err(e) => match ident.strip_suffix(".json") {
            Some(stripped) => find_node(st, stripped, v).await.map_err(|_| e),
            None => Err(e),
        },
        ok => ok,
    }
}

/// `{ident}` loaded and `p` decided for the caller: 404 when the caller may not see the
/// node (or it does not exist), 403 when it may see it but not do `p`.
pub(crate) async fn authorized_node(
    st: &AppState,
    authz: &Authz,
    ident: &str,
    v: Version,
    p: Policy,
) -> Result<Node, ApiError> {
    let node = load_node(st, ident, v).await?;
    authz.node(&node, ident, p)?;
    Ok(node)
}

/// The shape of a call on a node's hardware or NICs: no query arguments, `{ident}`
/// authorized for `p` (as [`authorized_node`]), then the conductor call `make` builds
/// from the node's reference.
pub(crate) async fn call_on_node<C: ironic_rpc::Call>(
    st: &AppState,
    authz: &Authz,
    req: &Req,
    ident: &str,
    q: Option<&str>,
    p: Policy,
    make: impl FnOnce(NodeRef) -> C,
) -> Result<C::Reply, ApiError> {
    Query::parse(q)?.only(&[])?;
    let node = authorized_node(st, authz, ident, req.version, p).await?;
    Ok(st
        .conductor
        .call(&req.ctx, make(NodeRef::from(&node)))
        .await?)
}

async fn find_node(st: &AppState, ident: &str, v: Version) -> Result<Node, Error> {
    let found = match parse_ident(ident, v)? {
        NodeIdent::Uuid(u) => st.db.node_by_uuid(u.as_str()).await?,
        NodeIdent::Name(n) => st.db.node_by_name(&n).await?,
    };
    found.ok_or_else(|| Error::node_not_found(ident))
}

fn node_response(
    st: &AppState,
    status: StatusCode,
    node: &Node,
    v: Version,
    base: &str,
    mask: Option<FieldMask>,
    redaction: Option<Redaction>,
) -> Response {
    let topology = st.topology.snapshot();
    let ctx = ViewCtx {
        version: v,
        base,
        mask,
        link_arrays: mask.is_none(),
        topology: &topology,
        redaction,
    };
    json_response_sized(status, &NodeView { node, ctx: &ctx }, NodeView::BYTES_ALONE)
}

pub async fn get_one(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    Base(base): Base,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
) -> ApiResult {
    let q = Query::parse(q.as_deref())?;
    q.only(&["fields"])?;
    let mask = match q.get("fields") {
        Some(f) => {
            if !req.version.at_least(8) {
                return Err(Error::not_acceptable().into());
            }
            Some(parse_fields(f, req.version)?)
        }
        None => None,
    };
    let node = authorized_node(&st, &authz, &ident, req.version, Policy::NodeGet).await?;
    Ok(node_response(
        &st,
        StatusCode::OK,
        &node,
        req.version,
        &base,
        mask,
        authz.redaction(),
    ))
}

/// A `parent_node` as given (a node's name or uuid) as the uuid of an existing node
/// other than `child` (1.83); null stays null.
async fn resolve_parent(
    st: &AppState,
    value: &Value,
    v: Version,
    child: Option<&Node>,
) -> Result<Value, ApiError> {
    let Some(ident) = value.as_str() else {
        return Ok(value.clone());
    };
    let invalid = || {
        ApiError::invalid(format!(
            "Unable to apply the requested parent_node '{ident}'. Requested value was invalid."
        ))
    };
    let parent = find_node(st, ident, v).await.map_err(|_| invalid())?;
    if child.is_some_and(|c| c.id == parent.id) {
        return Err(invalid());
    }
    Ok(Value::String(parent.uuid.to_string()))
}

/// `GET /v1/nodes/{node}/children` (1.83): the uuids of the nodes whose parent it is
/// (those the caller may see), and a link to their list.
pub async fn children(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    Base(base): Base,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
) -> ApiResult {
    crate::error::route_since(req.version, 83)?;
    no_args(&q)?;
    let node = authorized_node(&st, &authz, &ident, req.version, Policy::NodeGet).await?;
    let scope = authz.list_scope(Policy::NodeListAll, Policy::NodeList, None)?;
    let query = NodeListQuery {
        filter: NodeFilter {
            parent_node: Some(node.uuid.to_string()),
            project: scope,
            ..Default::default()
        },
        limit: u32::MAX,
        fields: Some(vec!["uuid".into()]),
        with_traits: false,
        ..Default::default()
    };
    let kids: Vec<String> = st
        .db
        .node_list(&query)
        .await?
        .into_iter()
        .map(|n| n.uuid.to_string())
        .collect();
    Ok(json_response(
        StatusCode::OK,
        &json!({
            "children": kids,
            "links": {"href": format!("{base}/v1/nodes?parent_node={}", node.uuid), "rel": "children"},
        }),
    ))
}

/// `shard=a,b`: the shards named (1.82).
pub(crate) fn shard_list(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// List arguments and the microversion that introduced each.
const LIST_ARGS: &[(&str, u16)] = &[
    ("chassis_uuid", 1),
    ("instance_uuid", 1),
    ("associated", 1),
    ("maintenance", 1),
    ("retired", 1),
    ("marker", 1),
    ("limit", 1),
    ("sort_key", 1),
    ("sort_dir", 1),
    ("fields", 8),
    ("provision_state", 9),
    ("driver", 16),
    ("resource_class", 21),
    ("fault", 42),
    ("detail", 43),
    ("conductor_group", 46),
    ("conductor", 49),
    ("owner", 50),
    ("description_contains", 51),
    ("lessee", 65),
    ("project", 65),
    ("shard", 82),
    ("sharded", 82),
    ("include_children", 83),
    ("parent_node", 83),
    ("instance_name", 104),
];

pub async fn list(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    Base(base): Base,
    RawQuery(q): RawQuery,
) -> ApiResult {
    let q = Query::parse(q.as_deref())?;
    list_nodes(&st, &authz, req.version, &base, q, false, None).await
}

pub async fn detail(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    Base(base): Base,
    RawQuery(q): RawQuery,
) -> ApiResult {
    let q = Query::parse(q.as_deref())?;
    list_nodes(&st, &authz, req.version, &base, q, true, None).await
}

/// A page of nodes; `within` restricts it to one chassis (`/v1/chassis/{uuid}/nodes`).
pub(crate) async fn list_nodes(
    st: &AppState,
    authz: &Authz,
    v: Version,
    base: &str,
    q: Query,
    detail_path: bool,
    within: Option<&str>,
) -> ApiResult {
    let allowed: Vec<&str> = LIST_ARGS
        .iter()
        .map(|(n, _)| *n)
        .filter(|n| !(detail_path && matches!(*n, "fields" | "detail")))
        .collect();
    q.only(&allowed)?;
    for (name, min) in LIST_ARGS {
        if q.has(name) && !v.at_least(*min) {
            if *name == "detail" {
                return Err(ApiError::invalid(
                    "The detail parameter is not supported at this API version (it needs 1.43).",
                ));
            }
            if *name == "instance_name" {
                // Upstream's wording for this one (S224).
                return Err(Error::NotAcceptable(
                    "instance_name is not acceptable in this API version".into(),
                )
                .into());
            }
            if *min >= 82 {
                return Err(Error::not_acceptable_below(*min).into());
            }
            return Err(Error::not_acceptable().into());
        }
    }
    // A project-scoped caller lists the nodes its project owns or leases.
    let scope = authz.list_scope(Policy::NodeListAll, Policy::NodeList, q.get("project"))?;
    let redaction = authz.redaction();
    let detail = detail_path || q.bool("detail")?.unwrap_or(false);
    if detail && q.has("fields") {
        return Err(ApiError::invalid(
            "Can not specify ?detail=True and fields in the same request.",
        ));
    }
    let provision_state =
        match q.get("provision_state") {
            None => None,
            Some(s) => Some(ProvisionState::parse(s).ok_or_else(|| {
                ApiError::invalid(format!("Provision state \"{s}\" is not valid"))
            })?),
        };
    let uuid_arg = |name: &str| -> Result<Option<String>, ApiError> {
        match q.get(name) {
            None => Ok(None),
            Some(s) => canonical_uuid(s)
                .map(Some)
                .ok_or_else(|| ApiError::invalid(format!("Invalid UUID for {name}: {s}"))),
        }
    };
    let filter = NodeFilter {
        driver: q.get("driver").map(str::to_owned),
        provision_state,
        maintenance: q.bool("maintenance")?,
        retired: q.bool("retired")?,
        associated: q.bool("associated")?,
        instance_uuid: uuid_arg("instance_uuid")?,
        chassis_uuid: match within {
            Some(c) => Some(c.to_string()),
            None => uuid_arg("chassis_uuid")?,
        },
        resource_class: q.get("resource_class").map(str::to_owned),
        conductor_group: q.get("conductor_group").map(|g| g.to_ascii_lowercase()),
        fault: q.get("fault").map(str::to_owned),
        owner: q.get("owner").map(str::to_owned),
        lessee: q.get("lessee").map(str::to_owned),
        project: scope.or_else(|| q.get("project").map(str::to_owned)),
        description_contains: q.get("description_contains").map(str::to_owned),
        instance_name: q.get("instance_name").map(str::to_owned),
        shards: q.get("shard").map(shard_list),
        sharded: q.bool("sharded")?,
        parent_node: match q.get("parent_node") {
            // A name is resolved (upstream compares it with uuids and finds nothing).
            Some(p) => Some(match find_node(st, p, v).await {
                Ok(n) => n.uuid.to_string(),
                Err(_) => p.to_string(),
            }),
            None => None,
        },
        // From 1.83 child nodes are listed only when asked for.
        exclude_children: v.at_least(83)
            && !q.has("parent_node")
            && !q.bool("include_children")?.unwrap_or(false),
    };
    let lp = q.list_params(st.settings.max_limit, None)?;
    let user_fields = match q.get("fields") {
        Some(f) => Some(parse_fields(f, v)?),
        None => None,
    };
    let mask = if detail {
        None
    } else {
        let mut m = match user_fields {
            Some(m) => m,
            None => {
                let list: Vec<&str> = DEFAULT_LIST_FIELDS
                    .iter()
                    .copied()
                    .filter(|f| field(f).is_some_and(|s| v.at_least(s.min)))
                    .collect();
                parse_fields(&list.join(","), v)?
            }
        };
        if let Some(i) = FIELDS.iter().position(|s| s.name == "uuid") {
            m.insert(i);
        }
        Some(m)
    };
    let fields: Option<Vec<String>> = mask.map(|m| {
        let mut f: Vec<String> = FIELDS
            .iter()
            .enumerate()
            .filter(|(i, _)| m.contains(*i))
            .map(|(_, f)| f.name.to_string())
            .collect();
        if q.has("conductor") {
            // The conductor filter runs on the ring, which needs driver and group.
            f.push("conductor".into());
        }
        if redaction.is_some() {
            // Which restricted fields show depends on each node's owner and lessee,
            // whether or not the client asked for them (they stay masked out).
            f.extend(["owner".to_string(), "lessee".to_string()]);
        }
        f
    });
    let needs_traits = v.at_least(37) && mask.is_none_or(|m| m.has("traits"));
    let dbq = NodeListQuery {
        filter,
        sort_key: lp.sort_key.to_string(),
        sort_desc: lp.desc,
        limit: lp.limit,
        marker: lp.marker.map(str::to_owned),
        fields,
        with_traits: needs_traits,
    };
    let mut nodes = st.db.node_list(&dbq).await?;
    let count = nodes.len();
    let last_uuid = nodes.last().map(|n| n.uuid.to_string());
    let topology = st.topology.snapshot();
    if let Some(c) = q.get("conductor") {
        nodes.retain(|n| topology.owner(&n.conductor_group, &n.driver, n.uuid.as_str()) == Some(c));
    }
    // A list by instance has one page (upstream's).
    let next = match q.has("instance_uuid") {
        true => None,
        false => {
            let nodes = match within {
                Some(c) => format!("chassis/{c}/nodes"),
                None => "nodes".to_string(),
            };
            let path = match detail_path {
                true => format!("{nodes}/detail"),
                false => nodes,
            };
            let how = LinkArgs::Sorted {
                others: true,
                fields: q.get("fields").map(str::to_string),
            };
            lp.next(base, &path, &how, count, last_uuid.as_deref())
        }
    };
    let ctx = ViewCtx {
        version: v,
        base,
        mask,
        link_arrays: detail,
        topology: &topology,
        redaction,
    };
    let per_node = if detail {
        NodeView::BYTES_DETAILED
    } else {
        NodeView::BYTES_LISTED
    };
    Ok(json_response_sized(
        StatusCode::OK,
        &ListPage {
            key: "nodes",
            items: &nodes,
            view: |node| NodeView { node, ctx: &ctx },
            next: next.as_deref(),
        },
        crate::RESPONSE_BYTES + per_node * nodes.len(),
    ))
}

pub async fn create(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    Base(base): Base,
    JsonBody(body): JsonBody,
) -> ApiResult {
    // A project admin (or service user) enrols nodes owned by its project; a system
    // admin or service user any node.
    let project = authz.project().map(str::to_owned);
    let allowed = match &project {
        Some(_) => authz.allows(Policy::NodeCreateSelfOwned, Target::default()),
        None => authz.allows(Policy::NodeCreate, Target::default()),
    };
    if !allowed {
        return Err(Policy::NodeCreate.denied());
    }
    let mut body = body;
    if req.version.at_least(83)
        && let Some(p) = body.get_mut("parent_node")
    {
        *p = resolve_parent(&st, p, req.version, None).await?;
    }
    let mut node = from_create_body(&body, req.version, &st.settings.defaults)?;
    if let Some(c) = &node.chassis_uuid {
        crate::chassis::check_exists(&st, c).await?;
    }
    if let Some(p) = project {
        match &node.owner {
            Some(o) if *o != p => {
                return Err(ApiError::invalid(
                    "Cannot create a node as a project scoped admin with an owner other than your own project.",
                ));
            }
            _ => node.owner = Some(p),
        }
    }
    if !st
        .topology
        .serves(&node.conductor_group, &node.driver)
        .await
    {
        return Err(Error::no_valid_host(&node.driver, &node.conductor_group).into());
    }
    let created = st.conductor.call(&req.ctx, CreateNode { node }).await?;
    let mut resp = node_response(
        &st,
        StatusCode::CREATED,
        &created,
        req.version,
        &base,
        None,
        authz.redaction(),
    );
    crate::set_location(&mut resp, &format!("{base}/v1/nodes/{}", created.uuid));
    Ok(resp)
}

/// The policy a node PATCH operation needs, by the field it changes (upstream's table).
fn patch_policy(op: &patch::PatchOp) -> Policy {
    match op.root() {
        "extra" => Policy::NodeUpdateExtra,
        "instance_info" | "instance_name" => Policy::NodeUpdateInstanceInfo,
        "driver_info" => Policy::NodeUpdateDriverInfo,
        "properties" => Policy::NodeUpdateProperties,
        "instance_uuid" => Policy::NodeUpdateInstanceUuid,
        "lessee" => Policy::NodeUpdateLessee,
        "name" => Policy::NodeUpdateName,
        "retired" | "retired_reason" => Policy::NodeUpdateRetired,
        "owner" => Policy::NodeUpdateOwner,
        "conductor_group" => Policy::NodeUpdateConductorGroup,
        "chassis_uuid" => Policy::NodeUpdateChassisUuid,
        "network_data" => Policy::NodeUpdateNetworkData,
        "shard" => Policy::NodeUpdateShard,
        "parent_node" => Policy::NodeUpdateParentNode,
        "disable_power_off" => Policy::NodeUpdateDisablePowerOff,
        "automated_clean"
            if op.op != patch::Op::Remove
                && op.value.as_ref().and_then(Value::as_bool) == Some(false) =>
        {
            Policy::NodeDisableCleaning
        }
        f if f == "driver" || f.ends_with("_interface") => Policy::NodeUpdateDriverInterfaces,
        _ => Policy::NodeUpdate,
    }
}

/// Every policy the operations need (404 if the node is hidden from the caller, 403 for
/// the first one denied); a new `owner` of a deployed node needs a system admin, and one
/// tied to an owned allocation cannot change (409, as upstream).
async fn authorize_patch(
    st: &AppState,
    authz: &Authz,
    node: &Node,
    ident: &str,
    ops: &[patch::PatchOp],
) -> Result<(), ApiError> {
    authz.visible(node, ident)?;
    let mut needed: Vec<Policy> = ops.iter().map(patch_policy).collect();
    needed.dedup();
    if needed.is_empty() {
        needed.push(Policy::NodeUpdate);
    }
    for p in &needed {
        authz.on_node(node, *p)?;
    }
    if needed.contains(&Policy::NodeUpdateOwner) {
        if node.provision_state == ProvisionState::Active
            && !authz.allows(Policy::NodeUpdateOwnerProvisioned, Target::node(node))
        {
            return Err(Error::Conflict(format!(
                "Cannot change the owner of node {} while it is active: {} is required.",
                node.uuid,
                Policy::NodeUpdateOwnerProvisioned.name()
            ))
            .into());
        }
        if let Some(a) = st.db.allocation_by_node(node.id).await?
            && a.owner.as_deref().is_some_and(|o| !o.is_empty())
        {
            return Err(Error::Conflict(format!(
                "Cannot change the owner of node {}: allocation {} of project {} holds it.",
                node.uuid,
                a.uuid,
                a.owner.as_deref().unwrap_or_default()
            ))
            .into());
        }
    }
    Ok(())
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
    let q = Query::parse(q.as_deref())?;
    q.only(&["reset_interfaces"])?;
    let reset_interfaces = q.bool("reset_interfaces")?;
    if reset_interfaces.is_some() && !v.at_least(45) {
        return Err(Error::not_acceptable().into());
    }
    let node = load_node(&st, &ident, v).await?;
    let mut ops = patch::parse(&body)?;
    for op in &ops {
        let root = op.root();
        if root == "traits" {
            return Err(ApiError::invalid(
                "Cannot update node traits via node patch. Node traits should be updated via the node traits API.",
            ));
        }
        if !PATCH_ALLOWED.contains(&root) {
            return Err(ApiError::invalid(format!(
                "Cannot patch {}. Only the following can be updated: {}",
                op.path,
                PATCH_ALLOWED.join(", ")
            )));
        }
        if field(root).is_none_or(|s| !v.at_least(s.min)) {
            return Err(Error::not_acceptable().into());
        }
        // A node leaves its chassis from 1.25 (as upstream).
        if op.path == "/chassis_uuid" && op.op == patch::Op::Remove && !v.at_least(25) {
            return Err(Error::not_acceptable().into());
        }
    }
    authorize_patch(&st, &authz, &node, &ident, &ops).await?;
    for op in ops.iter_mut().filter(|o| o.path == "/parent_node") {
        if let Some(value) = op.value.as_mut() {
            *value = resolve_parent(&st, value, v, Some(&node)).await?;
        }
    }
    for op in &ops {
        if op.path == "/chassis_uuid"
            && op.op != patch::Op::Remove
            && let Some(c) = op.value.as_ref().and_then(Value::as_str)
            && let Some(c) = canonical_uuid(c)
        {
            crate::chassis::check_exists(&st, &c).await?;
        }
    }
    // A new driver or conductor group must be served by some conductor.
    let mut driver = node.driver.clone();
    let mut group = node.conductor_group.clone();
    let mut moved = false;
    for op in &ops {
        let val = || op.value.as_ref().and_then(Value::as_str).map(str::to_owned);
        match (op.path.as_str(), op.op) {
            ("/driver", patch::Op::Add | patch::Op::Replace) => {
                if let Some(d) = val() {
                    driver = d;
                    moved = true;
                }
            }
            ("/conductor_group", patch::Op::Add | patch::Op::Replace) => {
                if let Some(g) = val() {
                    group = g.to_ascii_lowercase();
                    moved = true;
                }
            }
            ("/conductor_group", patch::Op::Remove) => {
                group = String::new();
                moved = true;
            }
            _ => {}
        }
    }
    if moved
        && (driver != node.driver || group != node.conductor_group)
        && !st.topology.serves(&group, &driver).await
    {
        return Err(Error::no_valid_host(&driver, &group).into());
    }
    let updated = st
        .conductor
        .call(
            &req.ctx,
            UpdateNode {
                node: NodeRef {
                    id: node.id,
                    uuid: node.uuid.clone(),
                    driver,
                    conductor_group: group,
                },
                ident,
                patch: ops,
                version: v,
                reset_interfaces,
            },
        )
        .await?;
    Ok(node_response(
        &st,
        StatusCode::OK,
        &updated,
        v,
        &base,
        None,
        authz.redaction(),
    ))
}

/// Refuses every query argument (for endpoints that take none).
pub(crate) fn no_args(q: &Option<String>) -> Result<(), ApiError> {
    Query::parse(q.as_deref())?.only(&[])
}

pub async fn delete(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
) -> ApiResult {
    no_args(&q)?;
    let node = load_node(&st, &ident, req.version).await?;
    authz.visible(&node, &ident)?;
    // A system admin deletes any node; a project admin the nodes its project owns.
    if !(authz.allows(Policy::NodeDelete, Target::node(&node))
        || authz.allows(Policy::NodeDeleteSelfOwned, Target::node(&node)))
    {
        return Err(Policy::NodeDelete.denied());
    }
    st.conductor
        .call(
            &req.ctx,
            DestroyNode {
                node: NodeRef::from(&node),
            },
        )
        .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub async fn states(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
) -> ApiResult {
    no_args(&q)?;
    let v = req.version;
    let n = authorized_node(&st, &authz, &ident, v, Policy::NodeGetStates).await?;
    let mut doc = serde_json::Map::new();
    doc.insert("console_enabled".into(), json!(n.console_enabled));
    doc.insert("last_error".into(), json!(n.last_error));
    doc.insert("power_state".into(), json!(n.power_state));
    doc.insert(
        "provision_state".into(),
        json!(n.provision_state.display(v)),
    );
    doc.insert("target_power_state".into(), json!(n.target_power_state));
    doc.insert(
        "target_provision_state".into(),
        json!(n.target_provision_state.and_then(|s| s.display(v))),
    );
    doc.insert(
        "provision_updated_at".into(),
        serde_json::to_value(n.provision_updated_at.as_ref().map(Ts)).unwrap_or(Value::Null),
    );
    if v.at_least(12) {
        doc.insert("raid_config".into(), Value::Object(n.raid_config.clone()));
        doc.insert(
            "target_raid_config".into(),
            Value::Object(n.target_raid_config.clone()),
        );
    }
    if v.at_least(75) {
        doc.insert("boot_mode".into(), json!(n.boot_mode));
        doc.insert("secure_boot".into(), json!(n.secure_boot));
    }
    Ok(json_response(StatusCode::OK, &Value::Object(doc)))
}

pub async fn maintenance_on(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
    raw: RawBody,
) -> ApiResult {
    no_args(&q)?;
    let reason = if raw.is_empty() {
        None
    } else {
        let Value::Object(obj) = parse_json(&raw.0)? else {
            return Err(ApiError::invalid(
                "The maintenance body must be a JSON object.",
            ));
        };
        if let Some(k) = obj.keys().find(|k| *k != "reason") {
            return Err(ApiError::invalid(format!("Unexpected arguments: {k}")));
        }
        match obj.get("reason") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.chars().count() <= 4096 => Some(s.clone()),
            Some(_) => {
                return Err(ApiError::invalid(
                    "reason must be a string of at most 4096 characters",
                ));
            }
        }
    };
    let node =
        authorized_node(&st, &authz, &ident, req.version, Policy::NodeSetMaintenance).await?;
    st.conductor
        .call(
            &req.ctx,
            SetMaintenance {
                node: NodeRef::from(&node),
                on: true,
                reason,
            },
        )
        .await?;
    Ok(StatusCode::ACCEPTED.into_response())
}

pub async fn maintenance_off(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
) -> ApiResult {
    no_args(&q)?;
    let node = authorized_node(
        &st,
        &authz,
        &ident,
        req.version,
        Policy::NodeClearMaintenance,
    )
    .await?;
    st.conductor
        .call(
            &req.ctx,
            SetMaintenance {
                node: NodeRef::from(&node),
                on: false,
                reason: None,
            },
        )
        .await?;
    Ok(StatusCode::ACCEPTED.into_response())
}

/// Traits need 1.37: reads answer 406 below it, writes 405 (as upstream).
fn traits_gate(v: Version, write: bool) -> Result<(), ApiError> {
    if v.at_least(37) {
        Ok(())
    } else if write {
        Err(ApiError::routing(StatusCode::METHOD_NOT_ALLOWED, ""))
    } else {
        Err(Error::not_acceptable().into())
    }
}

pub async fn traits_get(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
) -> ApiResult {
    traits_gate(req.version, false)?;
    no_args(&q)?;
    let node = authorized_node(&st, &authz, &ident, req.version, Policy::NodeTraitsList).await?;
    Ok(json_response(
        StatusCode::OK,
        &json!({ "traits": node.traits }),
    ))
}

fn schema(what: &str, msg: impl std::fmt::Display) -> ApiError {
    ApiError::invalid(format!("Schema error for {what}: {msg}"))
}

/// The `{"traits": [...]}` body of `PUT /v1/nodes/{node}/traits`, validated and deduplicated.
fn trait_list(body: &Value) -> Result<Vec<String>, ApiError> {
    let Value::Object(obj) = body else {
        return Err(schema(
            "body",
            format_args!("{} is not of type 'object'", patch::py_repr(body)),
        ));
    };
    if let Some(k) = obj.keys().find(|k| *k != "traits") {
        return Err(schema(
            "body",
            format_args!("Additional properties are not allowed ('{k}' was unexpected)"),
        ));
    }
    let list = match obj.get("traits") {
        None => return Err(schema("body", "'traits' is a required property")),
        Some(Value::Array(a)) => a,
        Some(other) => {
            return Err(schema(
                "body",
                format_args!("{} is not of type 'array'", patch::py_repr(other)),
            ));
        }
    };
    let mut traits = Vec::with_capacity(list.len());
    for t in list {
        let Value::String(s) = t else {
            return Err(schema(
                "body",
                format_args!("{} is not of type 'string'", patch::py_repr(t)),
            ));
        };
        validate_trait(s).map_err(|e| ApiError::invalid(trait_error_message("body", s, &e)))?;
        if !traits.contains(s) {
            traits.push(s.clone());
        }
    }
    Ok(traits)
}

pub async fn traits_put(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
    raw: RawBody,
) -> ApiResult {
    traits_gate(req.version, true)?;
    no_args(&q)?;
    let traits = trait_list(&parse_json(&raw.0)?)?;
    let node = authorized_node(&st, &authz, &ident, req.version, Policy::NodeTraitsSet).await?;
    st.conductor
        .call(
            &req.ctx,
            AddNodeTraits {
                node: NodeRef::from(&node),
                traits,
                replace: true,
            },
        )
        .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub async fn trait_put(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    Base(base): Base,
    P((ident, name)): P<(String, String)>,
    RawQuery(q): RawQuery,
    raw: RawBody,
) -> ApiResult {
    traits_gate(req.version, true)?;
    no_args(&q)?;
    if !raw.is_empty() {
        return Err(ApiError::invalid("This request does not accept a body."));
    }
    validate_trait(&name)
        .map_err(|e| ApiError::invalid(trait_error_message("trait", &name, &e)))?;
    let node = authorized_node(&st, &authz, &ident, req.version, Policy::NodeTraitsSet).await?;
    st.conductor
        .call(
            &req.ctx,
            AddNodeTraits {
                node: NodeRef::from(&node),
                traits: vec![name.clone()],
                replace: false,
            },
        )
        .await?;
    let mut resp = StatusCode::NO_CONTENT.into_response();
    crate::set_location(
        &mut resp,
        &format!(
            "{base}/v1/nodes/{}/traits/{}",
            ironic_model::percent::encode_list(&ident),
            ironic_model::percent::encode_list(&name)
        ),
    );
    Ok(resp)
}

pub async fn traits_delete_all(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
) -> ApiResult {
    traits_gate(req.version, true)?;
    no_args(&q)?;
    let node = authorized_node(&st, &authz, &ident, req.version, Policy::NodeTraitsDelete).await?;
    st.conductor
        .call(
            &req.ctx,
            RemoveNodeTraits {
                node: NodeRef::from(&node),
                one: None,
            },
        )
        .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub async fn trait_delete(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    P((ident, name)): P<(String, String)>,
    RawQuery(q): RawQuery,
) -> ApiResult {
    traits_gate(req.version, true)?;
    no_args(&q)?;
    let node = authorized_node(&st, &authz, &ident, req.version, Policy::NodeTraitsDelete).await?;
    if validate_trait(&name).is_err() {
        // No node can carry an invalid trait.
        return Err(
            Error::NotFound(format!("Node {} doesn't have a trait '{name}'", node.uuid)).into(),
        );
    }
    st.conductor
        .call(
            &req.ctx,
            RemoveNodeTraits {
                node: NodeRef::from(&node),
                one: Some(name),
            },
        )
        .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
