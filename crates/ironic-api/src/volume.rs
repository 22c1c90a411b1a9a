//! `/v1/volume` (1.32): volume connectors and targets, and their lists under a node.
//! They share the list, show and policy machinery of ports ([`Nic`]). Created here
//! (as upstream: the database's uniqueness decides races); changed and deleted by the
//! node's conductor under its lock (`ironic-conductor` `volume.rs`), a change only
//! while the node is powered off.

use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use ironic_db::Db;
use ironic_db::ports::{Key, NicListQuery};
use ironic_model::volume::{
    self as vm, CONNECTOR_FIELDS, ConnectorSpec, TARGET_FIELDS, TargetSpec, VOLUME_MIN,
    VolumeConnector, VolumeTarget,
};
use ironic_model::{ConnectorUuid, Error, NodeId, NodeRef, TargetUuid, Version};
use ironic_rpc::calls::{
    CreateVolumeConnector, CreateVolumeTarget, DestroyVolumeConnector, DestroyVolumeTarget,
    UpdateVolumeConnector, UpdateVolumeTarget,
};
use serde_json::{Value, json};

use crate::body::{JsonBody, P};
use crate::error::ApiError;
use crate::nodes::authorized_node;
use crate::policy::{Authz, Policy};
use crate::ports::{
    Nic, Within, create_body, created, delete_via, gate, get_one, hide_restricted, list, new_uuid,
    owning_node, patch_via,
};
use crate::query::Query;
use crate::view::{Ts, links_value};
use crate::{AppState, Base, Req, json_response};

type ApiResult = Result<Response, ApiError>;

impl Nic for VolumeConnector {
    type Uuid = ConnectorUuid;
    const WHAT: &'static str = "connector";
    const PATH: &'static str = "volume/connectors";
    const KEY: &'static str = "connectors";
    const LINKS_BEFORE: &'static str = "node_uuid";
    const BY_NAME: bool = false;
    const FILTERS: &'static [&'static str] = &["node"];
    const DETAIL_SINCE: u16 = VOLUME_MIN;
    const FIELDS: &'static [(&'static str, u16)] = CONNECTOR_FIELDS;
    const DEFAULT_FIELDS: &'static [&'static str] = vm::CONNECTOR_DEFAULT_LIST_FIELDS;
    const GET: Policy = Policy::VolumeGet;
    const LIST: Policy = Policy::VolumeList;
    const LIST_ALL: Policy = Policy::VolumeListAll;
    const SINCE: u16 = VOLUME_MIN;
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
            "connector_id" => json!(self.connector_id),
            "extra" => Value::Object(self.extra.clone()),
            "type" => json!(self.connector_type),
            "node_uuid" => json!(self.node_uuid),
            _ => Value::Null,
        }
    }
    fn not_found(ident: &str) -> Error {
        vm::connector_not_found(ident)
    }
    async fn fetch(db: &Db, key: Key<'_>) -> Result<Option<Self>, Error> {
        db.volume_connector_get(key).await
    }
    async fn page(db: &Db, q: &NicListQuery) -> Result<Vec<Self>, Error> {
        db.volume_connector_list(q).await
    }
}

/// What a caller without `baremetal:volume:view_target_properties` sees of a target's
/// properties (upstream's text).
fn redact_properties(t: &mut VolumeTarget) {
    t.properties = serde_json::Map::new();
    t.properties.insert(
        "content".into(),
        json!("** Value redacted: Requires permission baremetal:volume:view_target_properties access. Permission denied. **"),
    );
}

impl Nic for VolumeTarget {
    type Uuid = TargetUuid;
    const WHAT: &'static str = "target";
    const PATH: &'static str = "volume/targets";
    const KEY: &'static str = "targets";
    const LINKS_BEFORE: &'static str = "node_uuid";
    const BY_NAME: bool = false;
    const FILTERS: &'static [&'static str] = &["node"];
    const DETAIL_SINCE: u16 = VOLUME_MIN;
    const FIELDS: &'static [(&'static str, u16)] = TARGET_FIELDS;
    const DEFAULT_FIELDS: &'static [&'static str] = vm::TARGET_DEFAULT_LIST_FIELDS;
    const GET: Policy = Policy::VolumeGet;
    const LIST: Policy = Policy::VolumeList;
    const LIST_ALL: Policy = Policy::VolumeListAll;
    const SINCE: u16 = VOLUME_MIN;
    fn restricted() -> Option<crate::ports::Restricted<Self>> {
        Some((Policy::VolumeViewTargetProperties, redact_properties))
    }
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
            "boot_index" => json!(self.boot_index),
            "extra" => Value::Object(self.extra.clone()),
            "properties" => Value::Object(self.properties.clone()),
            "volume_id" => json!(self.volume_id),
            "volume_type" => json!(self.volume_type),
            "node_uuid" => json!(self.node_uuid),
            _ => Value::Null,
        }
    }
    fn not_found(ident: &str) -> Error {
        vm::target_not_found(ident)
    }
    async fn fetch(db: &Db, key: Key<'_>) -> Result<Option<Self>, Error> {
        db.volume_target_get(key).await
    }
    async fn page(db: &Db, q: &NicListQuery) -> Result<Vec<Self>, Error> {
        db.volume_target_list(q).await
    }
}

/// The links of `/v1/volume` and `/v1/nodes/{node}/volume`.
fn root_doc(base: &str, prefix: &str) -> Value {
    json!({
        "links": links_value(base, &format!("{prefix}/")),
        "connectors": links_value(base, &format!("{prefix}/connectors")),
        "targets": links_value(base, &format!("{prefix}/targets")),
    })
}

pub async fn root(authz: Authz, req: Req, Base(base): Base, RawQuery(q): RawQuery) -> ApiResult {
    gate::<VolumeConnector>(req.version)?;
    authz.could(Policy::VolumeGet)?;
    Query::parse(q.as_deref())?.only(&[])?;
    Ok(json_response(StatusCode::OK, &root_doc(&base, "volume")))
}

pub async fn node_root(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    Base(base): Base,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
) -> ApiResult {
    gate::<VolumeConnector>(req.version)?;
    Query::parse(q.as_deref())?.only(&[])?;
    authorized_node(&st, &authz, &ident, req.version, Policy::VolumeGet).await?;
    Ok(json_response(
        StatusCode::OK,
        &root_doc(&base, &format!("nodes/{ident}/volume")),
    ))
}

/// The node a create body names (400 when unknown, with upstream's wording).
async fn node_of(
    st: &AppState,
    authz: &Authz,
    node_uuid: &str,
    v: Version,
) -> Result<ironic_model::Node, ApiError> {
    match owning_node(st, authz, node_uuid, v, Policy::VolumeCreate).await {
        Err(ApiError::Domain(Error::Invalid(_))) => Err(ApiError::invalid(format!(
            "Invalid input for field/attribute node_uuid. Value: '{node_uuid}'. "
        ))),
        r => r,
    }
}

pub async fn connector_create(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    Base(base): Base,
    RawQuery(q): RawQuery,
    JsonBody(body): JsonBody,
) -> ApiResult {
    let v = req.version;
    gate::<VolumeConnector>(v)?;
    authz.could(Policy::VolumeCreate)?;
    Query::parse(q.as_deref())?.only(&[])?;
    let mut body = create_body::<VolumeConnector>(body, v, vm::CONNECTOR_SETTABLE, &[])?;
    let uuid = new_uuid(&mut body, "connector")?;
    let spec = ConnectorSpec::from_doc(&body)?;
    let node = node_of(&st, &authz, &spec.node_uuid, v).await?;
    let mut c = VolumeConnector::new(uuid, spec);
    c.node_id = node.id;
    // Written by the node's conductor, under the node's lock.
    let call = CreateVolumeConnector {
        node: NodeRef::from(&node),
        connector: c,
    };
    let saved = st.conductor.call(&req.ctx, call).await?;
    Ok(created(&saved, &base, v))
}

pub async fn target_create(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    Base(base): Base,
    RawQuery(q): RawQuery,
    JsonBody(body): JsonBody,
) -> ApiResult {
    let v = req.version;
    gate::<VolumeTarget>(v)?;
    authz.could(Policy::VolumeCreate)?;
    Query::parse(q.as_deref())?.only(&[])?;
    let mut body = create_body::<VolumeTarget>(body, v, vm::TARGET_SETTABLE, &[])?;
    let uuid = new_uuid(&mut body, "target")?;
    let spec = TargetSpec::from_doc(&body)?;
    let node = node_of(&st, &authz, &spec.node_uuid, v).await?;
    let mut t = VolumeTarget::new(uuid, spec);
    t.node_id = node.id;
    // Written by the node's conductor, under the node's lock.
    let call = CreateVolumeTarget {
        node: NodeRef::from(&node),
        target: t,
    };
    let mut saved = st.conductor.call(&req.ctx, call).await?;
    hide_restricted(&authz, std::slice::from_mut(&mut saved));
    Ok(created(&saved, &base, v))
}

macro_rules! reads {
    ($t:ty, $list:ident, $get:ident, $node_list:ident) => {
        pub async fn $list(
            State(st): State<AppState>,
            authz: Authz,
            req: Req,
            Base(base): Base,
            RawQuery(q): RawQuery,
        ) -> ApiResult {
            let q = Query::parse(q.as_deref())?;
            list::<$t>(&st, &authz, req.version, &base, q, false, Within::All).await
        }

        pub async fn $get(
            State(st): State<AppState>,
            authz: Authz,
            req: Req,
            Base(base): Base,
            P(ident): P<String>,
            RawQuery(q): RawQuery,
        ) -> ApiResult {
            get_one::<$t>(&st, &authz, req.version, &base, &ident, q).await
        }

        pub async fn $node_list(
            State(st): State<AppState>,
            authz: Authz,
            req: Req,
            Base(base): Base,
            P(ident): P<String>,
            RawQuery(q): RawQuery,
        ) -> ApiResult {
            let q = Query::parse(q.as_deref())?;
            if q.has("node") {
                return Err(ApiError::invalid(
                    "Unexpected argument node: the parent is in the path.",
                ));
            }
            list::<$t>(
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
    };
}

reads!(
    VolumeConnector,
    connector_list,
    connector_get,
    node_connectors
);
reads!(VolumeTarget, target_list, target_get, node_targets);

pub async fn connector_patch(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    Base(base): Base,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
    JsonBody(body): JsonBody,
) -> ApiResult {
    let policy = (vm::CONNECTOR_SETTABLE, Policy::VolumeUpdate);
    patch_via(
        &st,
        &authz,
        &req,
        &base,
        &ident,
        q,
        &body,
        policy,
        |node, uuid, patch| UpdateVolumeConnector { node, uuid, patch },
    )
    .await
}

pub async fn target_patch(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    Base(base): Base,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
    JsonBody(body): JsonBody,
) -> ApiResult {
    let policy = (vm::TARGET_SETTABLE, Policy::VolumeUpdate);
    patch_via(
        &st,
        &authz,
        &req,
        &base,
        &ident,
        q,
        &body,
        policy,
        |node, uuid, patch| UpdateVolumeTarget { node, uuid, patch },
    )
    .await
}

pub async fn connector_delete(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
) -> ApiResult {
    let how = (true, Policy::VolumeDelete);
    delete_via::<VolumeConnector, _>(&st, &authz, &req, &ident, q, how, |node, uuid| {
        DestroyVolumeConnector { node, uuid }
    })
    .await
}

pub async fn target_delete(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
) -> ApiResult {
    let how = (true, Policy::VolumeDelete);
    delete_via::<VolumeTarget, _>(&st, &authz, &req, &ident, q, how, |node, uuid| {
        DestroyVolumeTarget { node, uuid }
    })
    .await
}
