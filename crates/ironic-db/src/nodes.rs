//! Nodes and their traits.
//!
//! Writes go through the node lock: [`Db::node_reserve`] takes it with a conditional
//! UPDATE (the row count says who won), [`Db::node_save`] writes the node only while the
//! caller still holds it, and [`Db::node_release`] gives it back.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use ironic_model::node::{Interfaces, JsonObject};
use ironic_model::states::ProvisionState;
use ironic_model::{
    AllocationId, AllocationUuid, ChassisUuid, ConductorId, Error, Node, NodeId, NodeUuid, secrets,
};
use sqlx::types::Json;

use crate::{Backend, Db, Pool, internal, with_pool};

/// The columns written on insert and save, in bind order.
const WRITE_COLS: &[&str] = &[
    "uuid",
    "name",
    "driver",
    "driver_info",
    "driver_internal_info",
    "properties",
    "instance_info",
    "extra",
    "instance_uuid",
    "chassis_uuid",
    "provision_state",
    "target_provision_state",
    "provision_updated_at",
    "power_state",
    "target_power_state",
    "console_enabled",
    "maintenance",
    "maintenance_reason",
    "fault",
    "last_error",
    "reservation",
    "clean_step",
    "deploy_step",
    "raid_config",
    "target_raid_config",
    "inspection_started_at",
    "inspection_finished_at",
    "resource_class",
    "conductor_group",
    "automated_clean",
    "protected",
    "protected_reason",
    "owner",
    "lessee",
    "description",
    "allocation_id",
    "retired",
    "retired_reason",
    "conductor_affinity",
    "last_request_id",
    "network_data",
    "boot_mode",
    "secure_boot",
    "shard",
    "parent_node",
    "service_step",
    "disable_power_off",
    "instance_name",
    "health",
    "bios_interface",
    "boot_interface",
    "console_interface",
    "deploy_interface",
    "firmware_interface",
    "inspect_interface",
    "management_interface",
    "network_interface",
    "power_interface",
    "raid_interface",
    "rescue_interface",
    "storage_interface",
    "vendor_interface",
    "created_at",
    "updated_at",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ColKind {
    NotNull,
    Text,
    /// TEXT (unbounded): PostgreSQL sorts it by its first 255 characters, what its
    /// index holds (a btree entry may not exceed 2704 bytes).
    LongText,
    Time,
    Bool,
}

/// Columns holding JSON documents: never sortable.
const JSON_COLS: &[&str] = &[
    "driver_info",
    "driver_internal_info",
    "properties",
    "instance_info",
    "extra",
    "clean_step",
    "deploy_step",
    "raid_config",
    "target_raid_config",
    "network_data",
    "service_step",
];

/// Whether a list may be sorted by `key`: `id` or any scalar column clients can see.
pub fn is_sort_key(key: &str) -> bool {
    key == "id"
        || (WRITE_COLS.contains(&key)
            && !JSON_COLS.contains(&key)
            && !matches!(
                key,
                "allocation_id" | "conductor_affinity" | "last_request_id"
            ))
}

/// Characters of a free-text column a PostgreSQL list sorts by (and indexes).
pub(crate) const LONG_KEY: usize = 255;

/// Every key a node list may be sorted by.
pub fn sort_keys() -> impl Iterator<Item = &'static str> {
    std::iter::once("id").chain(WRITE_COLS.iter().copied().filter(|k| is_sort_key(k)))
}

fn col_kind(col: &str) -> ColKind {
    match col {
        "id" | "uuid" | "driver" | "provision_state" | "console_enabled" | "maintenance"
        | "conductor_group" | "protected" | "retired" | "created_at" | "disable_power_off" => {
            ColKind::NotNull
        }
        "provision_updated_at"
        | "inspection_started_at"
        | "inspection_finished_at"
        | "updated_at" => ColKind::Time,
        "automated_clean" | "secure_boot" => ColKind::Bool,
        "maintenance_reason" | "last_error" | "protected_reason" | "description"
        | "retired_reason" => ColKind::LongText,
        _ => ColKind::Text,
    }
}

/// The expression a list sorts by: NULLs sort first ascending on both backends.
pub(crate) fn sort_expr(alias: &str, col: &str, backend: Backend) -> String {
    match (col_kind(col), backend) {
        (ColKind::NotNull, _) => format!("{alias}.{col}"),
        (ColKind::Text, _) | (ColKind::LongText, Backend::Sqlite) => {
            format!("COALESCE({alias}.{col}, '')")
        }
        (ColKind::LongText, Backend::Postgres) => {
            format!("COALESCE(left({alias}.{col}, {LONG_KEY}), '')")
        }
        (ColKind::Time, Backend::Postgres) => {
            format!("COALESCE({alias}.{col}, '-infinity'::timestamptz)")
        }
        (ColKind::Time, Backend::Sqlite) => format!("COALESCE({alias}.{col}, '')"),
        (ColKind::Bool, Backend::Postgres) => format!("COALESCE({alias}.{col}::int, -1)"),
        (ColKind::Bool, Backend::Sqlite) => format!("COALESCE({alias}.{col}, -1)"),
    }
}

#[derive(Default)]
struct NodeRow {
    id: i64,
    uuid: String,
    name: Option<String>,
    driver: String,
    driver_info: Json<JsonObject>,
    driver_internal_info: Json<JsonObject>,
    properties: Json<JsonObject>,
    instance_info: Json<JsonObject>,
    extra: Json<JsonObject>,
    instance_uuid: Option<String>,
    chassis_uuid: Option<String>,
    provision_state: String,
    target_provision_state: Option<String>,
    provision_updated_at: Option<DateTime<Utc>>,
    power_state: Option<String>,
    target_power_state: Option<String>,
    console_enabled: bool,
    maintenance: bool,
    maintenance_reason: Option<String>,
    fault: Option<String>,
    last_error: Option<String>,
    reservation: Option<String>,
    clean_step: Json<JsonObject>,
    deploy_step: Json<JsonObject>,
    raid_config: Json<JsonObject>,
    target_raid_config: Json<JsonObject>,
    inspection_started_at: Option<DateTime<Utc>>,
    inspection_finished_at: Option<DateTime<Utc>>,
    resource_class: Option<String>,
    conductor_group: String,
    automated_clean: Option<bool>,
    protected: bool,
    protected_reason: Option<String>,
    owner: Option<String>,
    lessee: Option<String>,
    description: Option<String>,
    allocation_id: Option<i64>,
    allocation_uuid: Option<String>,
    retired: bool,
    retired_reason: Option<String>,
    conductor_affinity: Option<i64>,
    last_request_id: Option<String>,
    network_data: Json<JsonObject>,
    boot_mode: Option<String>,
    secure_boot: Option<bool>,
    shard: Option<String>,
    parent_node: Option<String>,
    service_step: Json<JsonObject>,
    disable_power_off: bool,
    instance_name: Option<String>,
    health: Option<String>,
    bios_interface: Option<String>,
    boot_interface: Option<String>,
    console_interface: Option<String>,
    deploy_interface: Option<String>,
    firmware_interface: Option<String>,
    inspect_interface: Option<String>,
    management_interface: Option<String>,
    network_interface: Option<String>,
    power_interface: Option<String>,
    raid_interface: Option<String>,
    rescue_interface: Option<String>,
    storage_interface: Option<String>,
    vendor_interface: Option<String>,
    created_at: DateTime<Utc>,
    updated_at: Option<DateTime<Utc>>,
}

/// Reads the columns a statement returned, by position (a light list leaves some out:
/// theirs keep the default). One pass over the row's columns: looking each field up by
/// name, and building a `ColumnNotFound` error for each one left out, cost more than
/// the rest of a 100-node page together (perf, issue 19).
macro_rules! lenient_from_row {
    ($row:ty) => {
        impl<'r> sqlx::FromRow<'r, $row> for NodeRow {
            fn from_row(row: &'r $row) -> Result<Self, sqlx::Error> {
                use sqlx::{Column, Row};
                let mut r = NodeRow::default();
                for (i, c) in row.columns().iter().enumerate() {
                    match c.name() {
                        "id" => r.id = row.try_get(i)?,
                        "uuid" => r.uuid = row.try_get(i)?,
                        "name" => r.name = row.try_get(i)?,
                        "driver" => r.driver = row.try_get(i)?,
                        "driver_info" => r.driver_info = row.try_get(i)?,
                        "driver_internal_info" => r.driver_internal_info = row.try_get(i)?,
                        "properties" => r.properties = row.try_get(i)?,
                        "instance_info" => r.instance_info = row.try_get(i)?,
                        "extra" => r.extra = row.try_get(i)?,
                        "instance_uuid" => r.instance_uuid = row.try_get(i)?,
                        "chassis_uuid" => r.chassis_uuid = row.try_get(i)?,
                        "provision_state" => r.provision_state = row.try_get(i)?,
                        "target_provision_state" => r.target_provision_state = row.try_get(i)?,
                        "provision_updated_at" => r.provision_updated_at = row.try_get(i)?,
                        "power_state" => r.power_state = row.try_get(i)?,
                        "target_power_state" => r.target_power_state = row.try_get(i)?,
                        "console_enabled" => r.console_enabled = row.try_get(i)?,
                        "maintenance" => r.maintenance = row.try_get(i)?,
                        "maintenance_reason" => r.maintenance_reason = row.try_get(i)?,
                        "fault" => r.fault = row.try_get(i)?,
                        "last_error" => r.last_error = row.try_get(i)?,
                        "reservation" => r.reservation = row.try_get(i)?,
                        "clean_step" => r.clean_step = row.try_get(i)?,
                        "deploy_step" => r.deploy_step = row.try_get(i)?,
                        "raid_config" => r.raid_config = row.try_get(i)?,
                        "target_raid_config" => r.target_raid_config = row.try_get(i)?,
                        "inspection_started_at" => r.inspection_started_at = row.try_get(i)?,
                        "inspection_finished_at" => r.inspection_finished_at = row.try_get(i)?,
                        "resource_class" => r.resource_class = row.try_get(i)?,
                        "conductor_group" => r.conductor_group = row.try_get(i)?,
                        "automated_clean" => r.automated_clean = row.try_get(i)?,
                        "protected" => r.protected = row.try_get(i)?,
                        "protected_reason" => r.protected_reason = row.try_get(i)?,
                        "owner" => r.owner = row.try_get(i)?,
                        "lessee" => r.lessee = row.try_get(i)?,
                        "description" => r.description = row.try_get(i)?,
                        "allocation_id" => r.allocation_id = row.try_get(i)?,
                        "allocation_uuid" => r.allocation_uuid = row.try_get(i)?,
                        "retired" => r.retired = row.try_get(i)?,
                        "retired_reason" => r.retired_reason = row.try_get(i)?,
                        "conductor_affinity" => r.conductor_affinity = row.try_get(i)?,
                        "last_request_id" => r.last_request_id = row.try_get(i)?,
                        "network_data" => r.network_data = row.try_get(i)?,
                        "boot_mode" => r.boot_mode = row.try_get(i)?,
                        "secure_boot" => r.secure_boot = row.try_get(i)?,
                        "shard" => r.shard = row.try_get(i)?,
                        "parent_node" => r.parent_node = row.try_get(i)?,
                        "service_step" => r.service_step = row.try_get(i)?,
                        "disable_power_off" => r.disable_power_off = row.try_get(i)?,
                        "instance_name" => r.instance_name = row.try_get(i)?,
                        "health" => r.health = row.try_get(i)?,
                        "bios_interface" => r.bios_interface = row.try_get(i)?,
                        "boot_interface" => r.boot_interface = row.try_get(i)?,
                        "console_interface" => r.console_interface = row.try_get(i)?,
                        "deploy_interface" => r.deploy_interface = row.try_get(i)?,
                        "firmware_interface" => r.firmware_interface = row.try_get(i)?,
                        "inspect_interface" => r.inspect_interface = row.try_get(i)?,
                        "management_interface" => r.management_interface = row.try_get(i)?,
                        "network_interface" => r.network_interface = row.try_get(i)?,
                        "power_interface" => r.power_interface = row.try_get(i)?,
                        "raid_interface" => r.raid_interface = row.try_get(i)?,
                        "rescue_interface" => r.rescue_interface = row.try_get(i)?,
                        "storage_interface" => r.storage_interface = row.try_get(i)?,
                        "vendor_interface" => r.vendor_interface = row.try_get(i)?,
                        "created_at" => r.created_at = row.try_get(i)?,
                        "updated_at" => r.updated_at = row.try_get(i)?,
                        _ => {}
                    }
                }
                Ok(r)
            }
        }
    };
}
lenient_from_row!(sqlx::sqlite::SqliteRow);
lenient_from_row!(sqlx::postgres::PgRow);

fn parse_state(s: &str, uuid: &str) -> Result<ProvisionState, Error> {
    ProvisionState::parse(s).ok_or_else(|| {
        tracing::error!(
            node = uuid,
            state = s,
            "unknown provision state in the database"
        );
        Error::internal(format!("node {uuid} has an unknown provision state {s:?}"))
    })
}

impl NodeRow {
    fn into_node(self) -> Result<Node, Error> {
        let provision_state = parse_state(&self.provision_state, &self.uuid)?;
        let target_provision_state = match &self.target_provision_state {
            Some(s) => Some(parse_state(s, &self.uuid)?),
            None => None,
        };
        Ok(Node {
            id: NodeId(self.id),
            uuid: NodeUuid::from_db(self.uuid),
            name: self.name,
            driver: self.driver,
            driver_info: self.driver_info.0,
            driver_internal_info: self.driver_internal_info.0,
            properties: self.properties.0,
            instance_info: self.instance_info.0,
            extra: self.extra.0,
            instance_uuid: self.instance_uuid,
            chassis_uuid: self.chassis_uuid.map(ChassisUuid::from_db),
            provision_state,
            target_provision_state,
            provision_updated_at: self.provision_updated_at,
            power_state: self.power_state,
            target_power_state: self.target_power_state,
            console_enabled: self.console_enabled,
            maintenance: self.maintenance,
            maintenance_reason: self.maintenance_reason,
            fault: self.fault,
            last_error: self.last_error,
            reservation: self.reservation,
            clean_step: self.clean_step.0,
            deploy_step: self.deploy_step.0,
            raid_config: self.raid_config.0,
            target_raid_config: self.target_raid_config.0,
            inspection_started_at: self.inspection_started_at,
            inspection_finished_at: self.inspection_finished_at,
            resource_class: self.resource_class,
            conductor_group: self.conductor_group,
            automated_clean: self.automated_clean,
            protected: self.protected,
            protected_reason: self.protected_reason,
            owner: self.owner,
            lessee: self.lessee,
            description: self.description,
            allocation_id: self.allocation_id.map(AllocationId),
            allocation_uuid: self.allocation_uuid.map(AllocationUuid::from_db),
            retired: self.retired,
            retired_reason: self.retired_reason,
            conductor_affinity: self.conductor_affinity.map(ConductorId),
            last_request_id: self.last_request_id,
            network_data: self.network_data.0,
            boot_mode: self.boot_mode,
            secure_boot: self.secure_boot,
            shard: self.shard,
            parent_node: self.parent_node.map(NodeUuid::from_db),
            service_step: self.service_step.0,
            disable_power_off: self.disable_power_off,
            instance_name: self.instance_name,
            health: self.health,
            interfaces: Interfaces([
                self.bios_interface,
                self.boot_interface,
                self.console_interface,
                self.deploy_interface,
                self.firmware_interface,
                self.inspect_interface,
                self.management_interface,
                self.network_interface,
                self.power_interface,
                self.raid_interface,
                self.rescue_interface,
                self.storage_interface,
                self.vendor_interface,
            ]),
            traits: Vec::new(),
            created_at: self.created_at,
            updated_at: self.updated_at,
        })
    }
}

/// A value to bind, so that one argument list serves both backends.
pub(crate) enum Arg {
    Text(Option<String>),
    I64(Option<i64>),
    Bool(Option<bool>),
    Time(Option<DateTime<Utc>>),
    Json(Json<JsonObject>),
}

macro_rules! bind_all {
    ($q:expr, $args:expr) => {{
        let mut q = $q;
        for a in $args {
            q = match a {
                Arg::Text(v) => q.bind(v),
                Arg::I64(v) => q.bind(v),
                Arg::Bool(v) => q.bind(v),
                Arg::Time(v) => q.bind(v),
                Arg::Json(v) => q.bind(v),
            };
        }
        q
    }};
}
pub(crate) use bind_all;

fn t(s: &Option<impl AsRef<str>>) -> Arg {
    Arg::Text(s.as_ref().map(|s| s.as_ref().to_string()))
}
fn j(o: &JsonObject) -> Arg {
    Arg::Json(Json(o.clone()))
}

/// The values of [`WRITE_COLS`] for `n`, in order.
fn write_args(n: &Node) -> Vec<Arg> {
    let mut a = vec![
        Arg::Text(Some(n.uuid.as_str().to_string())),
        t(&n.name),
        Arg::Text(Some(n.driver.clone())),
        j(&n.driver_info),
        j(&n.driver_internal_info),
        j(&n.properties),
        j(&n.instance_info),
        j(&n.extra),
        t(&n.instance_uuid),
        t(&n.chassis_uuid),
        Arg::Text(Some(n.provision_state.as_str().to_string())),
        Arg::Text(n.target_provision_state.map(|s| s.as_str().to_string())),
        Arg::Time(n.provision_updated_at),
        t(&n.power_state),
        t(&n.target_power_state),
        Arg::Bool(Some(n.console_enabled)),
        Arg::Bool(Some(n.maintenance)),
        t(&n.maintenance_reason),
        t(&n.fault),
        t(&n.last_error),
        t(&n.reservation),
        j(&n.clean_step),
        j(&n.deploy_step),
        j(&n.raid_config),
        j(&n.target_raid_config),
        Arg::Time(n.inspection_started_at),
        Arg::Time(n.inspection_finished_at),
        t(&n.resource_class),
        Arg::Text(Some(n.conductor_group.clone())),
        Arg::Bool(n.automated_clean),
        Arg::Bool(Some(n.protected)),
        t(&n.protected_reason),
        t(&n.owner),
        t(&n.lessee),
        t(&n.description),
        Arg::I64(n.allocation_id.map(|i| i.0)),
        Arg::Bool(Some(n.retired)),
        t(&n.retired_reason),
        Arg::I64(n.conductor_affinity.map(|i| i.0)),
        t(&n.last_request_id),
        j(&n.network_data),
        t(&n.boot_mode),
        Arg::Bool(n.secure_boot),
        t(&n.shard),
        t(&n.parent_node),
        j(&n.service_step),
        Arg::Bool(Some(n.disable_power_off)),
        t(&n.instance_name),
        t(&n.health),
    ];
    a.extend(n.interfaces.0.iter().map(t));
    a.push(Arg::Time(Some(n.created_at)));
    a.push(Arg::Time(n.updated_at));
    debug_assert_eq!(a.len(), WRITE_COLS.len());
    a
}

/// Inside the transaction `tx` of a write to node `id`'s children: touches the node's
/// row only while `holder` holds its lock, and says whether it did. On PostgreSQL the
/// row then stays locked until the transaction ends, so no other such write interleaves;
/// a write whose lock is gone is rolled back by the caller.
macro_rules! touch_if_held {
    ($tx:ident, $id:expr, $holder:expr, $now:expr) => {
        sqlx::query("UPDATE nodes SET updated_at = $1 WHERE id = $2 AND reservation = $3")
            .bind($now)
            .bind($id)
            .bind($holder)
            .execute(&mut *$tx)
            .await?
            .rows_affected()
            == 1
    };
}

/// A write refused because `holder` does not hold the node's lock (as
/// [`Db::node_save`]'s).
fn lock_gone(node_id: NodeId, holder: &str) -> Error {
    Error::internal(format!(
        "node {} was not written: the lock of {holder} is gone",
        node_id.0
    ))
}

/// Maps a failed insert or update to 409 when a unique constraint was hit.
fn write_error(e: sqlx::Error, node: &Node) -> Error {
    if let sqlx::Error::Database(db) = &e
        && db.is_unique_violation()
    {
        let what = db
            .constraint()
            .map(str::to_owned)
            .unwrap_or_else(|| db.message().to_owned());
        if what.contains("instance_uuid") {
            return Error::Conflict(format!(
                "Instance {} is already associated with a node.",
                node.instance_uuid.as_deref().unwrap_or("")
            ));
        }
        if what.contains("name") {
            return Error::Conflict(format!(
                "A node with name {} already exists.",
                node.name.as_deref().unwrap_or("")
            ));
        }
        if what.contains("uuid") {
            return Error::Conflict(format!("A node with UUID {} already exists.", node.uuid));
        }
    }
    internal("writing a node", e)
}

/// The uuid of the node's allocation, read with the node.
const ALLOCATION_UUID: &str =
    "(SELECT a.uuid FROM allocations a WHERE a.id = n.allocation_id) AS allocation_uuid";

fn all_columns() -> String {
    let mut s = String::from("n.id");
    for c in WRITE_COLS {
        s.push_str(", n.");
        s.push_str(c);
    }
    s.push_str(", ");
    s.push_str(ALLOCATION_UUID);
    s
}

/// Columns for a list: all of them, or only those behind the API fields asked for
/// (`conductor` needs the driver and group; `uuid` and `provision_state` always come).
fn list_columns(fields: Option<&[String]>) -> String {
    let Some(fields) = fields else {
        return all_columns();
    };
    let wanted = |c: &str| {
        matches!(c, "uuid" | "provision_state")
            || fields.iter().any(|f| f == c)
            || (matches!(c, "driver" | "conductor_group")
                && fields.iter().any(|f| f == "conductor"))
    };
    let mut s = String::from("n.id");
    for c in WRITE_COLS.iter().filter(|c| wanted(c)) {
        s.push_str(", n.");
        s.push_str(c);
    }
    if fields.iter().any(|f| f == "allocation_uuid") {
        s.push_str(", ");
        s.push_str(ALLOCATION_UUID);
    }
    s
}

/// A node's routing keys (which conductor owns it) and states, without the rest of its
/// row ([`Db::node_states`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeState {
    pub id: NodeId,
    pub uuid: NodeUuid,
    pub driver: String,
    pub conductor_group: String,
    pub provision_state: String,
    pub maintenance: bool,
    pub power_state: Option<String>,
    pub target_power_state: Option<String>,
    pub fault: Option<String>,
    pub reservation: Option<String>,
}

/// Filters of `GET /v1/nodes` (reference §4.2 "Node list filters"). `None` = no filter.
#[derive(Debug, Clone, Default)]
pub struct NodeFilter {
    pub driver: Option<String>,
    pub provision_state: Option<ProvisionState>,
    pub maintenance: Option<bool>,
    pub retired: Option<bool>,
    pub associated: Option<bool>,
    pub instance_uuid: Option<String>,
    pub chassis_uuid: Option<String>,
    pub resource_class: Option<String>,
    pub conductor_group: Option<String>,
    pub fault: Option<String>,
    pub owner: Option<String>,
    pub lessee: Option<String>,
    /// Owner or lessee.
    pub project: Option<String>,
    pub description_contains: Option<String>,
    /// 1.104.
    pub instance_name: Option<String>,
    /// In one of these shards (1.82).
    pub shards: Option<Vec<String>>,
    /// With a shard, or without one.
    pub sharded: Option<bool>,
    /// Children of this node (its uuid; 1.83).
    pub parent_node: Option<String>,
    /// Only nodes without a parent (lists from 1.83 unless children are asked for).
    pub exclude_children: bool,
}

/// One page of a node list, keyset-paginated.
#[derive(Debug, Clone)]
pub struct NodeListQuery {
    pub filter: NodeFilter,
    /// A column for which [`is_sort_key`] holds; others are refused.
    pub sort_key: String,
    pub sort_desc: bool,
    pub limit: u32,
    /// UUID of the last node of the previous page.
    pub marker: Option<String>,
    /// The API fields the caller will show (`None`: all). Columns behind other fields
    /// are not read, which makes light lists cheap.
    pub fields: Option<Vec<String>>,
    pub with_traits: bool,
}

impl Default for NodeListQuery {
    fn default() -> Self {
        NodeListQuery {
            filter: NodeFilter::default(),
            sort_key: "id".into(),
            sort_desc: false,
            limit: 1000,
            marker: None,
            fields: None,
            with_traits: true,
        }
    }
}

/// Most matches of `?description_contains=` that a page's first statement gathers on
/// PostgreSQL (see [`DescriptionSearch`]).
pub const DESCRIPTION_IDS_MAX: usize = 1000;

/// How a node list's statement searches descriptions (`node_descriptions`, one row per
/// described node, kept by triggers: `migrations/*/0021_node_descriptions.sql`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DescriptionSearch {
    /// PostgreSQL's first try: the ids of at most [`DESCRIPTION_IDS_MAX`] matches,
    /// gathered once through the trigram index, then the page by those ids (the primary
    /// key), and no rows at all when there were more matches. The needle is a parameter
    /// the plan does not depend on, so PostgreSQL may keep one plan for the statement
    /// (a generic plan after five runs on a connection, as it did in docs/scale.md's
    /// eighth run): planned for each needle against the ~60 indexes of `nodes`, the
    /// search spent more time planning than running.
    Bounded,
    /// Every match, as a subquery the page's statement joins, planned for its needle:
    /// SQLite's only search, and PostgreSQL's when the bounded one gave an empty page
    /// (no match there, or too many matches). With many matches the planner walks the
    /// sort key's index and checks each node's description, where gathering them all
    /// first costs what they number (docs/scale.md, eighth run).
    Whole,
}

/// Builds `WHERE` clauses and their arguments with numbered placeholders.
pub(crate) struct Where {
    pub(crate) clauses: Vec<String>,
    pub(crate) args: Vec<Arg>,
}

impl Where {
    pub(crate) fn push(&mut self, clause_with_placeholder: impl FnOnce(usize) -> String, arg: Arg) {
        self.args.push(arg);
        let n = self.args.len();
        self.clauses.push(clause_with_placeholder(n));
    }
    /// `col` equal to `v`, written with the column's sort expression so that one
    /// `(sort expression, id)` index serves both the filter and the sort (see
    /// `migrations/postgres/0017_list_indexes.sql`).
    fn eq_key(&mut self, col: &str, v: &Option<String>, backend: Backend) {
        if let Some(v) = v {
            let key = sort_expr("n", col, backend);
            let not_null = if v.is_empty() && key != format!("n.{col}") {
                format!(" AND n.{col} IS NOT NULL")
            } else {
                String::new()
            };
            self.push(
                |n| format!("{key} = ${n}{not_null}"),
                Arg::Text(Some(v.clone())),
            );
        }
    }
    /// `col` equal to one of `values` (none: nothing matches).
    pub(crate) fn any_of(&mut self, col: &str, values: &[String]) {
        let mut ors = Vec::new();
        for v in values {
            self.args.push(Arg::Text(Some(v.clone())));
            ors.push(format!("{col} = ${}", self.args.len()));
        }
        self.clauses.push(if ors.is_empty() {
            "1 = 0".into()
        } else {
            format!("({})", ors.join(" OR "))
        });
    }
    /// `expr` contains `needle`. On PostgreSQL a `LIKE` pattern (served by a trigram
    /// index, `pg_trgm`); on SQLite `instr`.
    pub(crate) fn contains(&mut self, expr: &str, needle: &str, backend: Backend) {
        self.contains_in(expr, needle, backend, |c| c);
    }
    /// [`Where::contains`], its clause passed through `wrap` (a subquery around it).
    fn contains_in(
        &mut self,
        expr: &str,
        needle: &str,
        backend: Backend,
        wrap: impl FnOnce(String) -> String,
    ) {
        match backend {
            Backend::Postgres => {
                let mut pattern = String::with_capacity(needle.len() + 2);
                pattern.push('%');
                for c in needle.chars() {
                    if matches!(c, '%' | '_' | '\\') {
                        pattern.push('\\');
                    }
                    pattern.push(c);
                }
                pattern.push('%');
                self.push(
                    |n| wrap(format!("{expr} LIKE ${n}")),
                    Arg::Text(Some(pattern)),
                );
            }
            Backend::Sqlite => self.push(
                |n| wrap(format!("instr({expr}, ${n}) > 0")),
                Arg::Text(Some(needle.to_string())),
            ),
        }
    }
    /// A flag, written as a literal: a prepared statement's generic plan cannot know
    /// that `retired = true` matches a few rows where `retired = false` matches most.
    fn eq_bool(&mut self, col: &str, v: Option<bool>) {
        debug_assert_eq!(col_kind(col), ColKind::NotNull);
        if let Some(v) = v {
            self.clauses
                .push(format!("n.{col} = {}", if v { "TRUE" } else { "FALSE" }));
        }
    }
}

impl Db {
    /// Stores a new node; `node.id` is assigned. Duplicate uuid/name → 409.
    pub async fn node_create(&self, node: &Node) -> Result<Node, Error> {
        let placeholders: Vec<String> = (1..=WRITE_COLS.len()).map(|i| format!("${i}")).collect();
        let sql = format!(
            "INSERT INTO nodes ({}) VALUES ({}) RETURNING id",
            WRITE_COLS.join(", "),
            placeholders.join(", ")
        );
        let mut node = node.clone();
        node.last_error = node.last_error.as_deref().map(secrets::stored_text);
        let node = &node;
        let args = write_args(node);
        let id: i64 = with_pool!(self, |p| bind_all!(
            sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(sql.as_str())),
            args
        )
        .fetch_one(p)
        .await)
        .map_err(|e| write_error(e, node))?;
        let mut created = node.clone();
        created.id = NodeId(id);
        Ok(created)
    }

    async fn node_fetch(&self, clause: &str, arg: Arg) -> Result<Option<Node>, Error> {
        let sql = format!("SELECT {} FROM nodes n WHERE {clause}", all_columns());
        let row = with_pool!(self, |p| bind_all!(
            sqlx::query_as::<_, NodeRow>(sqlx::AssertSqlSafe(sql.as_str())),
            [arg]
        )
        .fetch_optional(p)
        .await)
        .map_err(|e| internal("reading a node", e))?;
        match row {
            None => Ok(None),
            Some(r) => {
                let mut node = r.into_node()?;
                node.traits = self.node_traits(node.id).await?;
                Ok(Some(node))
            }
        }
    }

    pub async fn node_by_uuid(&self, uuid: &str) -> Result<Option<Node>, Error> {
        self.node_fetch("n.uuid = $1", Arg::Text(Some(uuid.to_string())))
            .await
    }

    pub async fn node_by_name(&self, name: &str) -> Result<Option<Node>, Error> {
        self.node_fetch("n.name = $1", Arg::Text(Some(name.to_string())))
            .await
    }

    pub async fn node_by_id(&self, id: NodeId) -> Result<Option<Node>, Error> {
        let id = id.0;
        self.node_fetch("n.id = $1", Arg::I64(Some(id))).await
    }

    /// The nodes of these ids that exist, by id, without their traits: a periodic task
    /// reads the whole rows of the nodes it picked from a light listing.
    pub async fn nodes_by_ids(&self, ids: &[NodeId]) -> Result<Vec<Node>, Error> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let cols = all_columns();
        let rows = match &self.pool {
            // One statement text whatever the count: an array parameter.
            Pool::Postgres(p) => {
                let sql = format!("SELECT {cols} FROM nodes n WHERE n.id = ANY($1) ORDER BY n.id");
                let ids: Vec<i64> = ids.iter().map(|i| i.0).collect();
                sqlx::query_as::<_, NodeRow>(sqlx::AssertSqlSafe(sql.as_str()))
                    .bind(ids)
                    .fetch_all(p)
                    .await
            }
            Pool::Sqlite(p) => {
                let list: Vec<String> = ids.iter().map(|i| i.0.to_string()).collect();
                let sql = format!(
                    "SELECT {cols} FROM nodes n WHERE n.id IN ({}) ORDER BY n.id",
                    list.join(",")
                );
                sqlx::query_as::<_, NodeRow>(sqlx::AssertSqlSafe(sql.as_str()))
                    .fetch_all(p)
                    .await
            }
        }
        .map_err(|e| internal("reading nodes", e))?;
        rows.into_iter().map(NodeRow::into_node).collect()
    }

    /// Every shard with its node count (`None` for the nodes without one).
    pub async fn shard_counts(&self) -> Result<Vec<(Option<String>, i64)>, Error> {
        let sql = "SELECT shard, COUNT(*) FROM nodes GROUP BY shard";
        let rows: Vec<(Option<String>, i64)> =
            with_pool!(self, |p| sqlx::query_as(sql).fetch_all(p).await)
                .map_err(|e| internal("counting shards", e))?;
        Ok(rows)
    }

    /// One page of nodes. An unknown marker is 404, as upstream answers.
    pub async fn node_list(&self, q: &NodeListQuery) -> Result<Vec<Node>, Error> {
        let search = self.first_description_search(q);
        let mut rows = self.node_rows(q, search).await?;
        if rows.is_empty() && search == DescriptionSearch::Bounded {
            rows = self.node_rows(q, DescriptionSearch::Whole).await?;
        }
        let mut nodes = rows
            .into_iter()
            .map(NodeRow::into_node)
            .collect::<Result<Vec<_>, _>>()?;
        if q.with_traits && !nodes.is_empty() {
            let ids: Vec<i64> = nodes.iter().map(|n| n.id.0).collect();
            let mut traits = self.node_traits_of(&ids).await?;
            for n in &mut nodes {
                n.traits = traits.remove(&n.id.0).unwrap_or_default();
            }
        }
        Ok(nodes)
    }

    fn first_description_search(&self, q: &NodeListQuery) -> DescriptionSearch {
        if q.filter.description_contains.is_some() && self.backend() == Backend::Postgres {
            DescriptionSearch::Bounded
        } else {
            DescriptionSearch::Whole
        }
    }

    async fn node_rows(
        &self,
        q: &NodeListQuery,
        search: DescriptionSearch,
    ) -> Result<Vec<NodeRow>, Error> {
        let (sql, args) = self.node_list_sql(q, search).await?;
        // PostgreSQL's second try, the whole description search, is planned for its
        // needle each time (an unnamed statement): a plan kept for the next needles
        // would be made for the usual few matches.
        let second_try = search != self.first_description_search(q);
        with_pool!(self, |p| bind_all!(
            sqlx::query_as::<_, NodeRow>(sqlx::AssertSqlSafe(sql.as_str())),
            args
        )
        .persistent(!second_try)
        .fetch_all(p)
        .await)
        .map_err(|e| internal("listing nodes", e))
    }

    /// PostgreSQL's plan for [`Db::node_list`] (`EXPLAIN (FORMAT JSON)`): the test that
    /// every filter and sort key is served from an index reads it. With
    /// `?description_contains=`, the plans of both searches (bounded, then whole).
    pub async fn node_list_plan(&self, q: &NodeListQuery) -> Result<serde_json::Value, Error> {
        let search = self.first_description_search(q);
        let (sql, args) = self.node_list_sql(q, search).await?;
        let page = self.explain(&sql, args).await?;
        if search != DescriptionSearch::Bounded {
            return Ok(page);
        }
        let (sql, args) = self.node_list_sql(q, DescriptionSearch::Whole).await?;
        let whole = self.explain(&sql, args).await?;
        Ok(serde_json::Value::Array(vec![page, whole]))
    }

    /// The plan of [`Db::node_list`]'s first statement as run (`EXPLAIN (ANALYZE, FORMAT
    /// JSON)`), with the rows each step read: the test that a page reads about what it
    /// returns reads it.
    pub async fn node_list_run_plan(&self, q: &NodeListQuery) -> Result<serde_json::Value, Error> {
        let (sql, args) = self
            .node_list_sql(q, self.first_description_search(q))
            .await?;
        self.explain_as(&sql, args, true).await
    }

    async fn node_list_sql(
        &self,
        q: &NodeListQuery,
        search: DescriptionSearch,
    ) -> Result<(String, Vec<Arg>), Error> {
        if !is_sort_key(&q.sort_key) {
            return Err(Error::invalid(format!(
                "The sort_key value {} is an invalid field for sorting",
                q.sort_key
            )));
        }
        let backend = self.backend();
        let f = &q.filter;
        let mut w = Where {
            clauses: Vec::new(),
            args: Vec::new(),
        };
        w.eq_key("driver", &f.driver, backend);
        if let Some(state) = f.provision_state {
            // A literal, as for the flags below (most nodes are in one or two states); a
            // state's name is one of our own words, never the client's text.
            w.clauses
                .push(format!("n.provision_state = '{}'", state.as_str()));
        }
        w.eq_bool("maintenance", f.maintenance);
        w.eq_bool("retired", f.retired);
        w.eq_key("instance_uuid", &f.instance_uuid, backend);
        w.eq_key("chassis_uuid", &f.chassis_uuid, backend);
        w.eq_key("resource_class", &f.resource_class, backend);
        w.eq_key("conductor_group", &f.conductor_group, backend);
        w.eq_key("fault", &f.fault, backend);
        w.eq_key("owner", &f.owner, backend);
        w.eq_key("lessee", &f.lessee, backend);
        w.eq_key("instance_name", &f.instance_name, backend);
        if let Some(shards) = &f.shards {
            w.any_of(&sort_expr("n", "shard", backend), shards);
            w.clauses.push("n.shard IS NOT NULL".into());
        }
        w.eq_key("parent_node", &f.parent_node, backend);
        if f.exclude_children {
            w.clauses.push("n.parent_node IS NULL".into());
        }
        match f.sharded {
            Some(true) => w.clauses.push("n.shard IS NOT NULL".into()),
            Some(false) => w.clauses.push("n.shard IS NULL".into()),
            None => {}
        }
        // Served by the partial indexes of migrations/*/0018_associated_indexes.sql and,
        // on PostgreSQL, postgres/0019_unassociated_index.sql.
        match f.associated {
            Some(true) => w.clauses.push("n.instance_uuid IS NOT NULL".into()),
            // By id on PostgreSQL, unassociated nodes are written as the predicate of
            // their partial index, `num_nulls(instance_uuid) > 0`, which the planner has
            // no statistics for and takes to hold for a third of the table. Written
            // `IS NULL` (true of nearly every node), walking the primary key and
            // filtering cost it the same as that index, and it took the walk: claims
            // gather associated nodes at the lowest ids, which the planner cannot know,
            // and after a burst the walk passed every one of them. Now the walk looks
            // three times dearer for a page, the index leads unless another filter is
            // more selective than a third, and reading and sorting every unassociated
            // node (estimated a third of the table) does not look cheaper than reading
            // a page of them in order. By another key the index cannot give the order:
            // `IS NULL`, estimated right.
            Some(false) if backend == Backend::Postgres && q.sort_key == "id" => {
                w.clauses.push("num_nulls(n.instance_uuid) > 0".into())
            }
            Some(false) => w.clauses.push("n.instance_uuid IS NULL".into()),
            None => {}
        }
        let mut with = String::new();
        if let Some(d) = &f.description_contains {
            if search == DescriptionSearch::Bounded {
                w.contains_in("d.description", d, backend, |c| {
                    with = format!(
                        "WITH described AS MATERIALIZED (SELECT ARRAY(SELECT d.node_id \
                         FROM node_descriptions d WHERE {c} LIMIT {}) AS ids) ",
                        DESCRIPTION_IDS_MAX + 1
                    );
                    format!(
                        "n.id = ANY(CAST((SELECT ids FROM described) AS BIGINT[])) \
                         AND (SELECT cardinality(ids) FROM described) <= {DESCRIPTION_IDS_MAX}"
                    )
                });
            } else {
                w.contains_in("d.description", d, backend, |c| {
                    format!("n.id IN (SELECT d.node_id FROM node_descriptions d WHERE {c})")
                });
            }
        }
        let key = sort_expr("n", &q.sort_key, backend);
        let dir = if q.sort_desc { "DESC" } else { "ASC" };
        if let Some(marker) = &q.marker {
            let marker_id = self.node_id_by_uuid(marker).await?;
            let cmp = if q.sort_desc { "<" } else { ">" };
            if q.sort_key == "id" {
                // By id alone: a range of the last column of any filter's `(key, id)`
                // index (with the key equal), where a row comparison `(id, id) > (..)`
                // is one of no index but the primary key and is filtered row by row.
                w.push(|n| format!("n.id {cmp} ${n}"), Arg::I64(Some(marker_id)));
            } else {
                let mkey = sort_expr("m", &q.sort_key, backend);
                w.push(
                    |n| {
                        format!(
                            "({key}, n.id) {cmp} (SELECT {mkey}, m.id FROM nodes m WHERE m.id = ${n})"
                        )
                    },
                    Arg::I64(Some(marker_id)),
                );
            }
        }
        let order = format!(" ORDER BY {key} {dir}, n.id {dir} LIMIT {}", q.limit.max(1));
        let mut sql = format!("{with}SELECT {} FROM ", list_columns(q.fields.as_deref()));
        if let Some(p) = &f.project {
            // Owner or lessee: a page of the nodes it owns and a page of those it leases
            // and does not own, merged. Sorted by id each branch is an exact range of its
            // `(key, id)` index, read up to the page. Written with `OR`, the planner
            // walked the sort key's index and filtered, reading hundreds of rows per row
            // kept when the project holds few nodes of a big table; a plain UNION ALL
            // read every node of the project.
            w.args.push(Arg::Text(Some(p.clone())));
            let n = w.args.len();
            let (owner, lessee) = (
                sort_expr("n", "owner", backend),
                sort_expr("n", "lessee", backend),
            );
            let rest: String = w.clauses.iter().map(|c| format!(" AND {c}")).collect();
            sql.push_str(&format!(
                "(SELECT * FROM (SELECT * FROM nodes n WHERE {owner} = ${n} AND ${n} <> ''{rest}{order}) o \
                 UNION ALL SELECT * FROM (SELECT * FROM nodes n WHERE {lessee} = ${n} \
                 AND {owner} <> ${n} AND ${n} <> ''{rest}{order}) l) n"
            ));
        } else {
            sql.push_str("nodes n");
            if !w.clauses.is_empty() {
                sql.push_str(" WHERE ");
                sql.push_str(&w.clauses.join(" AND "));
            }
        }
        sql.push_str(&order);
        Ok((sql, w.args))
    }

    /// `EXPLAIN (FORMAT JSON)` of a statement (PostgreSQL only).
    pub(crate) async fn explain(
        &self,
        sql: &str,
        args: Vec<Arg>,
    ) -> Result<serde_json::Value, Error> {
        self.explain_as(sql, args, false).await
    }

    /// `EXPLAIN (FORMAT JSON)` of a statement, or with `analyze` `EXPLAIN (ANALYZE, …)`:
    /// the statement is run and each step says how many rows it read.
    pub(crate) async fn explain_as(
        &self,
        sql: &str,
        args: Vec<Arg>,
        analyze: bool,
    ) -> Result<serde_json::Value, Error> {
        let Pool::Postgres(p) = &self.pool else {
            return Err(Error::invalid("plans are read from PostgreSQL only"));
        };
        let how = if analyze { "ANALYZE, " } else { "" };
        let sql = format!("EXPLAIN ({how}FORMAT JSON) {sql}");
        let plan: Json<serde_json::Value> = bind_all!(
            sqlx::query_scalar::<_, Json<serde_json::Value>>(sqlx::AssertSqlSafe(sql.as_str())),
            args
        )
        .fetch_one(p)
        .await
        .map_err(|e| internal("explaining a query", e))?;
        Ok(plan.0)
    }

    async fn node_id_by_uuid(&self, uuid: &str) -> Result<i64, Error> {
        let sql = "SELECT id FROM nodes WHERE uuid = $1";
        with_pool!(self, |p| sqlx::query_scalar::<_, i64>(sql)
            .bind(uuid)
            .fetch_optional(p)
            .await)
        .map_err(|e| internal("reading a node", e))?
        .ok_or_else(|| Error::node_not_found(uuid))
    }

    /// Takes the node's exclusive lock for `host` and returns the node as locked.
    /// 404 if the node is gone, 409 `NodeLocked` naming the holder if it is taken.
    pub async fn node_reserve(&self, node_id: NodeId, host: &str) -> Result<Node, Error> {
        let node_id = node_id.0;
        let sql = format!(
            "UPDATE nodes SET reservation = $1 WHERE id = $2 AND reservation IS NULL RETURNING {}, \
             (SELECT a.uuid FROM allocations a WHERE a.id = nodes.allocation_id) AS allocation_uuid",
            WRITE_COLS
                .iter()
                .fold(String::from("id"), |s, c| s + ", " + c)
        );
        let row = with_pool!(self, |p| sqlx::query_as::<_, NodeRow>(sqlx::AssertSqlSafe(
            sql.as_str()
        ))
        .bind(host)
        .bind(node_id)
        .fetch_optional(p)
        .await)
        .map_err(|e| internal("locking a node", e))?;
        match row {
            Some(r) => {
                // The lock is taken: if the rest of the read fails, give it back, or it
                // would stay taken until this conductor restarts.
                let read = match r.into_node() {
                    Ok(mut node) => match self.node_traits(node.id).await {
                        Ok(t) => {
                            node.traits = t;
                            Ok(node)
                        }
                        Err(e) => Err(e),
                    },
                    Err(e) => Err(e),
                };
                if read.is_err()
                    && let Err(e) = self.node_release(NodeId(node_id), host).await
                {
                    tracing::error!(node_id, error = %e, "could not give back a lock after a failed read");
                }
                read
            }
            None => match self.node_by_id(NodeId(node_id)).await? {
                None => Err(Error::node_not_found(&node_id.to_string())),
                Some(n) => Err(Error::node_locked(
                    n.uuid.as_str(),
                    n.reservation.as_deref().unwrap_or("unknown"),
                )),
            },
        }
    }

    /// Gives the lock back if `host` still holds it.
    pub async fn node_release(&self, node_id: NodeId, host: &str) -> Result<(), Error> {
        let node_id = node_id.0;
        let sql = "UPDATE nodes SET reservation = NULL WHERE id = $1 AND reservation = $2";
        with_pool!(self, |p| sqlx::query(sql)
            .bind(node_id)
            .bind(host)
            .execute(p)
            .await
            .map(|r| r.rows_affected()))
        .map_err(|e| internal("unlocking a node", e))?;
        Ok(())
    }

    /// A page of [`NodeState`]s, the first `limit` nodes by id after `after`: what the
    /// periodic tasks that look at every node (the node metrics, the power-state sync)
    /// read to tell which nodes are their conductor's and which to look at closer. Paged
    /// so that no statement of a periodic task holds a snapshot open for long: one
    /// statement over 100,000 nodes ran for over 300 ms under load, and while a snapshot
    /// is open the index entries dead since it began cannot be skipped by any other
    /// query. Ten columns into a small struct: read as whole node rows and cut down, a
    /// page of 1,000 was a few megabytes to allocate, fill and move (perf, bench/scale.sh).
    pub async fn node_states(&self, after: NodeId, limit: i64) -> Result<Vec<NodeState>, Error> {
        type Row = (
            i64,
            String,
            String,
            String,
            String,
            bool,
            Option<String>,
            Option<String>,
            Option<String>,
            Option<String>,
        );
        let sql = "SELECT id, uuid, driver, conductor_group, provision_state, maintenance, \
                   power_state, target_power_state, fault, reservation \
                   FROM nodes WHERE id > $1 ORDER BY id LIMIT $2";
        let rows: Vec<Row> = with_pool!(self, |p| sqlx::query_as(sql)
            .bind(after.0)
            .bind(limit)
            .fetch_all(p)
            .await)
        .map_err(|e| internal("reading node states", e))?;
        Ok(rows
            .into_iter()
            .map(|r| NodeState {
                id: NodeId(r.0),
                uuid: NodeUuid::from_db(r.1),
                driver: r.2,
                conductor_group: r.3,
                provision_state: r.4,
                maintenance: r.5,
                power_state: r.6,
                target_power_state: r.7,
                fault: r.8,
                reservation: r.9,
            })
            .collect())
    }

    /// Every locked node: (id, uuid, driver, conductor_group, holder). Locks are few
    /// (one per operation in progress), so one query serves the orphan-lock check
    /// whatever the number of dead conductors.
    pub async fn nodes_locked(
        &self,
    ) -> Result<Vec<(NodeId, String, String, String, String)>, Error> {
        let sql = "SELECT id, uuid, driver, conductor_group, reservation FROM nodes WHERE reservation IS NOT NULL";
        let rows: Vec<(i64, String, String, String, String)> =
            with_pool!(self, |p| sqlx::query_as(sql).fetch_all(p).await)
                .map_err(|e| internal("reading locked nodes", e))?;
        Ok(rows
            .into_iter()
            .map(|(id, u, d, g, h)| (NodeId(id), u, d, g, h))
            .collect())
    }

    /// Releases `holder`'s lock on a node only if `holder`'s heartbeat is still the one
    /// the caller saw (`seen`) when it judged `holder` dead: a conductor that came back
    /// in between keeps its lock. Returns whether the lock was released.
    pub async fn node_release_orphan(
        &self,
        node_id: NodeId,
        holder: &str,
        seen: Option<chrono::DateTime<chrono::Utc>>,
    ) -> Result<bool, Error> {
        let node_id = node_id.0;
        let sql = "UPDATE nodes SET reservation = NULL WHERE id = $1 AND reservation = $2 \
                   AND EXISTS (SELECT 1 FROM conductors WHERE hostname = $2 \
                   AND (updated_at = $3 OR (updated_at IS NULL AND $3 IS NULL)))";
        let n = with_pool!(self, |p| sqlx::query(sql)
            .bind(node_id)
            .bind(holder)
            .bind(seen)
            .execute(p)
            .await
            .map(|r| r.rows_affected()))
        .map_err(|e| internal("releasing an orphan lock", e))?;
        Ok(n == 1)
    }

    /// Unlocked nodes in one of `states`: (id, uuid, driver, conductor_group), in one
    /// query (the `provision_state` index serves it; such nodes are few: work a crash
    /// interrupted, or waiting steps).
    pub async fn nodes_unlocked_in(
        &self,
        states: &[&str],
    ) -> Result<Vec<(NodeId, NodeUuid, String, String)>, Error> {
        if states.is_empty() {
            return Ok(Vec::new());
        }
        let sql = unlocked_in_sql(states.len());
        let rows: Vec<(i64, String, String, String)> = with_pool!(self, |p| {
            let mut q = sqlx::query_as(sqlx::AssertSqlSafe(sql.as_str()));
            for st in states {
                q = q.bind(*st);
            }
            q.fetch_all(p).await
        })
        .map_err(|e| internal("reading nodes by state", e))?;
        Ok(rows
            .into_iter()
            .map(|(id, u, d, g)| (NodeId(id), NodeUuid::from_db(u), d, g))
            .collect())
    }

    /// The plan of [`Db::nodes_unlocked_in`] (PostgreSQL only): the periodic checks of
    /// waiting and stuck nodes must read those nodes only, through the
    /// `provision_state` index.
    pub async fn nodes_unlocked_in_plan(
        &self,
        states: &[&str],
    ) -> Result<serde_json::Value, Error> {
        let args = states
            .iter()
            .map(|s| Arg::Text(Some((*s).to_string())))
            .collect();
        self.explain(&unlocked_in_sql(states.len()), args).await
    }

    /// Releases every lock `host` holds (a conductor starting after a crash).
    pub async fn node_release_all(&self, host: &str) -> Result<u64, Error> {
        let sql = "UPDATE nodes SET reservation = NULL WHERE reservation = $1";
        with_pool!(self, |p| sqlx::query(sql)
            .bind(host)
            .execute(p)
            .await
            .map(|r| r.rows_affected()))
        .map_err(|e| internal("releasing node locks", e))
    }

    /// Writes `node` (every column, `updated_at = now`) while `holder` holds its lock;
    /// the written `reservation` is `node.reservation`, so passing `None` saves and
    /// unlocks in one statement.
    pub async fn node_save(&self, node: &Node, holder: &str) -> Result<Node, Error> {
        self.node_save_dropping(node, holder, None).await
    }

    /// Saves the node and, in the same transaction, deletes the allocation
    /// `drop_allocation` (an instance removed from an allocated node, a tear-down).
    pub async fn node_save_dropping(
        &self,
        node: &Node,
        holder: &str,
        drop_allocation: Option<AllocationId>,
    ) -> Result<Node, Error> {
        let drop_allocation = drop_allocation.map(|a| a.0);
        let mut node = node.clone();
        node.updated_at = Some(ironic_model::node::now());
        let n = WRITE_COLS.len();
        // `last_error` as readers may see it (masked, bounded: `secrets::stored_text`),
        // the one place every writer passes. A value read back and saved again is kept
        // as it is stored (written again, a cut text would be cut anew on every save);
        // a new one is stored masked. What was stored comes back (`RETURNING`).
        let sets: Vec<String> = WRITE_COLS
            .iter()
            .enumerate()
            .map(|(i, c)| match *c {
                "last_error" => format!(
                    "last_error = CASE WHEN last_error = ${} THEN last_error ELSE ${} END",
                    i + 1,
                    n + 3
                ),
                c => format!("{c} = ${}", i + 1),
            })
            .collect();
        let sql = format!(
            "UPDATE nodes SET {} WHERE id = ${} AND reservation = ${} RETURNING last_error",
            sets.join(", "),
            n + 1,
            n + 2
        );
        let mut args = write_args(&node);
        args.push(Arg::I64(Some(node.id.0)));
        args.push(Arg::Text(Some(holder.to_string())));
        args.push(Arg::Text(
            node.last_error.as_deref().map(secrets::stored_text),
        ));
        type Saved = Option<(Option<String>,)>;
        let saved = with_pool!(self, |p| async {
            let update = || {
                bind_all!(
                    sqlx::query_as::<_, (Option<String>,)>(sqlx::AssertSqlSafe(sql.as_str())),
                    args
                )
            };
            if drop_allocation.is_none() {
                // The common case: one statement, no transaction.
                return update().fetch_optional(p).await;
            }
            let mut tx = p.begin().await?;
            let saved = update().fetch_optional(&mut *tx).await?;
            if saved.is_some()
                && let Some(a) = drop_allocation
            {
                sqlx::query("DELETE FROM allocations WHERE id = $1")
                    .bind(a)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            Ok::<Saved, sqlx::Error>(saved)
        }
        .await)
        .map_err(|e| write_error(e, &node))?;
        let Some((last_error,)) = saved else {
            return Err(Error::internal(format!(
                "node {} was not saved: the lock of {holder} is gone",
                node.uuid
            )));
        };
        node.last_error = last_error;
        Ok(node)
    }

    /// Deletes the node (its traits, and its allocations) while `holder` holds its
    /// lock, in one transaction.
    pub async fn node_destroy(&self, node_id: NodeId, holder: &str) -> Result<(), Error> {
        let node_id = node_id.0;
        let res: Result<u64, sqlx::Error> = with_pool!(self, |p| async {
            let mut tx = p.begin().await?;
            let rows = sqlx::query("DELETE FROM nodes WHERE id = $1 AND reservation = $2")
                .bind(node_id)
                .bind(holder)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            if rows != 1 {
                // The lock is gone: its allocations are not ours to delete either.
                tx.rollback().await?;
                return Ok(rows);
            }
            sqlx::query("DELETE FROM allocations WHERE node_id = $1")
                .bind(node_id)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(rows)
        }
        .await);
        let rows = res.map_err(|e| internal("deleting a node", e))?;
        if rows != 1 {
            return Err(Error::internal(format!(
                "node {node_id} was not deleted: the lock of {holder} is gone"
            )));
        }
        Ok(())
    }

    pub async fn node_traits(&self, node_id: NodeId) -> Result<Vec<String>, Error> {
        let node_id = node_id.0;
        let sql = "SELECT trait FROM node_traits WHERE node_id = $1 ORDER BY trait";
        with_pool!(self, |p| sqlx::query_scalar::<_, String>(sql)
            .bind(node_id)
            .fetch_all(p)
            .await)
        .map_err(|e| internal("reading node traits", e))
    }

    async fn node_traits_of(&self, ids: &[i64]) -> Result<HashMap<i64, Vec<String>>, Error> {
        let list: Vec<String> = ids.iter().map(i64::to_string).collect();
        let sql = format!(
            "SELECT node_id, trait FROM node_traits WHERE node_id IN ({}) ORDER BY node_id, trait",
            list.join(",")
        );
        let rows: Vec<(i64, String)> = with_pool!(self, |p| sqlx::query_as::<_, (i64, String)>(
            sqlx::AssertSqlSafe(sql.as_str())
        )
        .fetch_all(p)
        .await)
        .map_err(|e| internal("reading node traits", e))?;
        let mut map: HashMap<i64, Vec<String>> = HashMap::new();
        for (id, t) in rows {
            map.entry(id).or_default().push(t);
        }
        Ok(map)
    }

    /// Adds traits (or replaces all of them) in one transaction while `holder` holds
    /// the node's lock; returns the new set. More than `max` traits in the result is
    /// refused with 400; without the lock nothing is written.
    pub async fn node_add_traits(
        &self,
        node_id: NodeId,
        traits: &[String],
        replace: bool,
        max: usize,
        holder: &str,
    ) -> Result<Vec<String>, Error> {
        let id = node_id.0;
        let now = ironic_model::node::now();
        let res: Result<Result<Vec<String>, Error>, sqlx::Error> = with_pool!(self, |p| {
            async {
            let mut tx = p.begin().await?;
            if !touch_if_held!(tx, id, holder, now) {
                tx.rollback().await?;
                return Ok(Err(lock_gone(node_id, holder)));
            }
            if replace {
                sqlx::query("DELETE FROM node_traits WHERE node_id = $1").bind(id).execute(&mut *tx).await?;
            }
            for tr in traits {
                sqlx::query(
                    "INSERT INTO node_traits (node_id, trait, created_at) VALUES ($1, $2, $3) \
                     ON CONFLICT (node_id, trait) DO NOTHING",
                )
                .bind(id)
                .bind(tr)
                .bind(now)
                .execute(&mut *tx)
                .await?;
            }
            let all: Vec<String> = sqlx::query_scalar("SELECT trait FROM node_traits WHERE node_id = $1 ORDER BY trait")
                .bind(id)
                .fetch_all(&mut *tx)
                .await?;
            if all.len() > max {
                tx.rollback().await?;
                return Ok(Err(Error::invalid(format!(
                    "Could not modify traits as it would exceed the maximum number of traits per node ({} vs. {max})",
                    all.len()
                ))));
            }
            tx.commit().await?;
            Ok(Ok(all))
        }
        .await
        });
        res.map_err(|e| internal("writing node traits", e))?
    }

    /// Removes one trait (`Some`) or all of them (`None`) while `holder` holds the
    /// node's lock; false if the trait was absent. Without the lock nothing is written.
    pub async fn node_remove_traits(
        &self,
        node_id: NodeId,
        one: Option<&str>,
        holder: &str,
    ) -> Result<bool, Error> {
        let id = node_id.0;
        let now = ironic_model::node::now();
        let res: Result<Result<bool, Error>, sqlx::Error> = with_pool!(self, |p| async {
            let mut tx = p.begin().await?;
            if !touch_if_held!(tx, id, holder, now) {
                tx.rollback().await?;
                return Ok(Err(lock_gone(node_id, holder)));
            }
            let n = match one {
                Some(tr) => {
                    sqlx::query("DELETE FROM node_traits WHERE node_id = $1 AND trait = $2")
                        .bind(id)
                        .bind(tr)
                        .execute(&mut *tx)
                        .await?
                        .rows_affected()
                }
                None => {
                    sqlx::query("DELETE FROM node_traits WHERE node_id = $1")
                        .bind(id)
                        .execute(&mut *tx)
                        .await?;
                    1
                }
            };
            tx.commit().await?;
            Ok(Ok(n > 0))
        }
        .await);
        res.map_err(|e| internal("removing node traits", e))?
    }
}

/// [`Db::nodes_unlocked_in`]'s statement for `n` states.
fn unlocked_in_sql(n: usize) -> String {
    let placeholders: Vec<String> = (1..=n).map(|i| format!("${i}")).collect();
    format!(
        "SELECT id, uuid, driver, conductor_group FROM nodes \
         WHERE provision_state IN ({}) AND reservation IS NULL",
        placeholders.join(", ")
    )
}
