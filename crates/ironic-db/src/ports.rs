//! Ports and port groups. Rows carry their node's id; reads join the node's (and port
//! group's) uuid. Uniqueness (uuid, MAC address, name) is the database's: a clash is a
//! 409 naming the value, whoever wins a race. The conductor writes them under the
//! node's lock; the API only reads.

use chrono::{DateTime, Utc};
use ironic_model::node::JsonObject;
use ironic_model::port::{Port, Portgroup, port_not_found, portgroup_not_found};
use ironic_model::{Error, NodeId, NodeUuid, PortUuid, PortgroupUuid};
use sqlx::types::Json;

use crate::nodes::{Arg, Where, bind_all, sort_expr as node_key};
use crate::{Backend, Db, internal, with_pool};

const PORT_SELECT: &str = "SELECT p.id, p.uuid, p.address, p.node_id, n.uuid AS node_uuid, \
     p.portgroup_id, (SELECT g.uuid FROM portgroups g WHERE g.id = p.portgroup_id) \
     AS portgroup_uuid, p.extra, p.internal_info, \
     p.local_link_connection, p.pxe_enabled, p.physical_network, p.is_smartnic, p.name, \
     p.description, p.vendor, p.category, p.available_for_dynamic_portgroup, p.created_at, \
     p.updated_at FROM ports p JOIN nodes n ON n.id = p.node_id";

const PORTGROUP_SELECT: &str = "SELECT p.id, p.uuid, p.name, p.address, p.node_id, \
     n.uuid AS node_uuid, p.extra, p.internal_info, p.mode, p.properties, \
     p.standalone_ports_supported, p.physical_network, p.category, p.dynamic_portgroup, \
     p.created_at, p.updated_at FROM portgroups p JOIN nodes n ON n.id = p.node_id";

/// Sort keys of `GET /v1/ports` (not the JSON fields).
pub const PORT_SORT_KEYS: &[&str] = &[
    "id",
    "uuid",
    "address",
    "node_uuid",
    "portgroup_uuid",
    "pxe_enabled",
    "physical_network",
    "is_smartnic",
    "name",
    "description",
    "vendor",
    "category",
    "available_for_dynamic_portgroup",
    "created_at",
    "updated_at",
];

/// Sort keys of `GET /v1/portgroups` (not the JSON fields).
pub const PORTGROUP_SORT_KEYS: &[&str] = &[
    "id",
    "uuid",
    "name",
    "address",
    "node_uuid",
    "mode",
    "standalone_ports_supported",
    "physical_network",
    "category",
    "dynamic_portgroup",
    "created_at",
    "updated_at",
];

#[derive(sqlx::FromRow)]
struct PortRow {
    id: i64,
    uuid: String,
    address: String,
    node_id: i64,
    node_uuid: String,
    portgroup_id: Option<i64>,
    portgroup_uuid: Option<String>,
    extra: Json<JsonObject>,
    internal_info: Json<JsonObject>,
    local_link_connection: Json<JsonObject>,
    pxe_enabled: bool,
    physical_network: Option<String>,
    is_smartnic: bool,
    name: Option<String>,
    description: Option<String>,
    vendor: Option<String>,
    category: Option<String>,
    available_for_dynamic_portgroup: bool,
    created_at: DateTime<Utc>,
    updated_at: Option<DateTime<Utc>>,
}

impl From<PortRow> for Port {
    fn from(r: PortRow) -> Port {
        Port {
            id: r.id,
            uuid: PortUuid::from_db(r.uuid),
            address: r.address,
            node_id: NodeId(r.node_id),
            node_uuid: NodeUuid::from_db(r.node_uuid),
            portgroup_id: r.portgroup_id,
            portgroup_uuid: r.portgroup_uuid.map(PortgroupUuid::from_db),
            extra: r.extra.0,
            internal_info: r.internal_info.0,
            local_link_connection: r.local_link_connection.0,
            pxe_enabled: r.pxe_enabled,
            physical_network: r.physical_network,
            is_smartnic: r.is_smartnic,
            name: r.name,
            description: r.description,
            vendor: r.vendor,
            category: r.category,
            available_for_dynamic_portgroup: r.available_for_dynamic_portgroup,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

#[derive(sqlx::FromRow)]
struct PortgroupRow {
    id: i64,
    uuid: String,
    name: Option<String>,
    address: Option<String>,
    node_id: i64,
    node_uuid: String,
    extra: Json<JsonObject>,
    internal_info: Json<JsonObject>,
    mode: String,
    properties: Json<JsonObject>,
    standalone_ports_supported: bool,
    physical_network: Option<String>,
    category: Option<String>,
    dynamic_portgroup: bool,
    created_at: DateTime<Utc>,
    updated_at: Option<DateTime<Utc>>,
}

impl From<PortgroupRow> for Portgroup {
    fn from(r: PortgroupRow) -> Portgroup {
        Portgroup {
            id: r.id,
            uuid: PortgroupUuid::from_db(r.uuid),
            name: r.name,
            address: r.address,
            node_id: NodeId(r.node_id),
            node_uuid: NodeUuid::from_db(r.node_uuid),
            extra: r.extra.0,
            internal_info: r.internal_info.0,
            mode: r.mode,
            properties: r.properties.0,
            standalone_ports_supported: r.standalone_ports_supported,
            physical_network: r.physical_network,
            category: r.category,
            dynamic_portgroup: r.dynamic_portgroup,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

/// How a port or port group is looked up.
#[derive(Debug, Clone, Copy)]
pub enum Key<'a> {
    Id(i64),
    Uuid(&'a str),
    Name(&'a str),
}

impl Key<'_> {
    pub(crate) fn clause(&self) -> (&'static str, Arg) {
        match self {
            Key::Id(i) => ("p.id = $1", Arg::I64(Some(*i))),
            Key::Uuid(u) => ("p.uuid = $1", Arg::Text(Some((*u).to_string()))),
            Key::Name(n) => ("p.name = $1", Arg::Text(Some((*n).to_string()))),
        }
    }
}

/// A page of ports or port groups: filters, sort and marker.
#[derive(Debug, Clone, Default)]
pub struct NicListQuery {
    pub node_id: Option<NodeId>,
    /// Ports only: members of this port group.
    pub portgroup_id: Option<i64>,
    pub address: Option<String>,
    /// Only objects of nodes this project owns or leases.
    pub project: Option<String>,
    /// Only objects of nodes in these conductor groups.
    pub conductor_groups: Option<Vec<String>>,
    /// Only objects of nodes in these shards (1.82, port groups 1.106).
    pub shards: Option<Vec<String>>,
    /// Ports only.
    pub description_contains: Option<String>,
    pub sort_key: String,
    pub sort_desc: bool,
    /// The id of the last object of the previous page.
    pub marker: Option<i64>,
    pub limit: usize,
}

impl NicListQuery {
    /// Every object the filters let through, by id (a conductor's reads of one node's
    /// or one port group's objects, which are few).
    pub fn every() -> NicListQuery {
        NicListQuery {
            sort_key: "id".into(),
            limit: i64::MAX as usize,
            ..Default::default()
        }
    }
}

/// The expression a list sorts by (NULLs first ascending); the indexes of
/// `migrations/*/0017_list_indexes.sql` are built on the same expressions.
fn sort_expr(alias: &str, key: &str, backend: Backend) -> String {
    match key {
        "node_uuid" => format!("{alias}.node_id"),
        "portgroup_uuid" => format!("COALESCE({alias}.portgroup_id, -1)"),
        "physical_network" | "name" | "description" | "vendor" | "category" | "address" => {
            format!("COALESCE({alias}.{key}, '')")
        }
        "updated_at" => match backend {
            Backend::Postgres => format!("COALESCE({alias}.updated_at, '-infinity'::timestamptz)"),
            Backend::Sqlite => format!("COALESCE({alias}.updated_at, '')"),
        },
        k => format!("{alias}.{k}"),
    }
}

/// A clash on a unique column, as upstream words it.
fn write_error(
    e: sqlx::Error,
    what: &str,
    uuid: &str,
    address: Option<&str>,
    name: Option<&str>,
) -> Error {
    if let sqlx::Error::Database(db) = &e
        && db.is_unique_violation()
    {
        let c = db
            .constraint()
            .map(str::to_owned)
            .unwrap_or_else(|| db.message().to_owned());
        if c.contains("address") {
            return Error::Conflict(format!(
                "A {what} with MAC address {} already exists.",
                address.unwrap_or_default()
            ));
        }
        if c.contains("name") {
            return Error::Conflict(format!(
                "A {what} with name {} already exists.",
                name.unwrap_or_default()
            ));
        }
        return Error::Conflict(format!("A {what} with UUID {uuid} already exists."));
    }
    internal(&format!("writing a {what}"), e)
}

fn port_args(p: &Port) -> Vec<Arg> {
    let t = |s: &Option<String>| Arg::Text(s.clone());
    let j = |o: &JsonObject| Arg::Json(Json(o.clone()));
    vec![
        Arg::Text(Some(p.address.clone())),
        Arg::I64(Some(p.node_id.0)),
        Arg::I64(p.portgroup_id),
        j(&p.extra),
        j(&p.internal_info),
        j(&p.local_link_connection),
        Arg::Bool(Some(p.pxe_enabled)),
        t(&p.physical_network),
        Arg::Bool(Some(p.is_smartnic)),
        t(&p.name),
        t(&p.description),
        t(&p.vendor),
        t(&p.category),
        Arg::Bool(Some(p.available_for_dynamic_portgroup)),
    ]
}

const PORT_WRITE_COLS: &[&str] = &[
    "address",
    "node_id",
    "portgroup_id",
    "extra",
    "internal_info",
    "local_link_connection",
    "pxe_enabled",
    "physical_network",
    "is_smartnic",
    "name",
    "description",
    "vendor",
    "category",
    "available_for_dynamic_portgroup",
];

fn portgroup_args(g: &Portgroup) -> Vec<Arg> {
    let t = |s: &Option<String>| Arg::Text(s.clone());
    let j = |o: &JsonObject| Arg::Json(Json(o.clone()));
    vec![
        t(&g.name),
        t(&g.address),
        Arg::I64(Some(g.node_id.0)),
        j(&g.extra),
        j(&g.internal_info),
        Arg::Text(Some(g.mode.clone())),
        j(&g.properties),
        Arg::Bool(Some(g.standalone_ports_supported)),
        t(&g.physical_network),
        t(&g.category),
    ]
}

const PORTGROUP_WRITE_COLS: &[&str] = &[
    "name",
    "address",
    "node_id",
    "extra",
    "internal_info",
    "mode",
    "properties",
    "standalone_ports_supported",
    "physical_network",
    "category",
];

impl Db {
    pub(crate) async fn insert(
        &self,
        table: &str,
        cols: &[&str],
        mut args: Vec<Arg>,
        uuid: &str,
        created: DateTime<Utc>,
    ) -> Result<i64, sqlx::Error> {
        let n = cols.len();
        let sql = format!(
            "INSERT INTO {table} ({}, uuid, created_at) VALUES ({}, ${}, ${}) RETURNING id",
            cols.join(", "),
            (1..=n)
                .map(|i| format!("${i}"))
                .collect::<Vec<_>>()
                .join(", "),
            n + 1,
            n + 2
        );
        args.push(Arg::Text(Some(uuid.to_string())));
        args.push(Arg::Time(Some(created)));
        with_pool!(self, |p| bind_all!(
            sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(sql.as_str())),
            args
        )
        .fetch_one(p)
        .await)
    }

    pub(crate) async fn update(
        &self,
        table: &str,
        cols: &[&str],
        mut args: Vec<Arg>,
        id: i64,
    ) -> Result<u64, sqlx::Error> {
        let n = cols.len();
        let sets: Vec<String> = cols
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c} = ${}", i + 1))
            .collect();
        let sql = format!(
            "UPDATE {table} SET {}, updated_at = ${} WHERE id = ${}",
            sets.join(", "),
            n + 1,
            n + 2
        );
        args.push(Arg::Time(Some(ironic_model::node::now())));
        args.push(Arg::I64(Some(id)));
        with_pool!(self, |p| bind_all!(
            sqlx::query(sqlx::AssertSqlSafe(sql.as_str())),
            args
        )
        .execute(p)
        .await
        .map(|r| r.rows_affected()))
    }

    /// Stores a new port (its node and port group ids set); 409 on a clash.
    pub async fn port_create(&self, port: &Port) -> Result<Port, Error> {
        let id = self
            .insert(
                "ports",
                PORT_WRITE_COLS,
                port_args(port),
                &port.uuid,
                port.created_at,
            )
            .await
            .map_err(|e| {
                write_error(
                    e,
                    "port",
                    &port.uuid,
                    Some(&port.address),
                    port.name.as_deref(),
                )
            })?;
        self.port_get(Key::Id(id))
            .await?
            .ok_or_else(|| port_not_found(&port.uuid))
    }

    /// Writes every field of a port but its uuid; 409 on a clash.
    pub async fn port_save(&self, port: &Port) -> Result<Port, Error> {
        let n = self
            .update("ports", PORT_WRITE_COLS, port_args(port), port.id)
            .await
            .map_err(|e| {
                write_error(
                    e,
                    "port",
                    &port.uuid,
                    Some(&port.address),
                    port.name.as_deref(),
                )
            })?;
        if n == 0 {
            return Err(port_not_found(&port.uuid));
        }
        self.port_get(Key::Id(port.id))
            .await?
            .ok_or_else(|| port_not_found(&port.uuid))
    }

    /// The nodes that have a port with one of `addresses` (normalised MACs), at most
    /// two: the ramdisk's lookup needs to know only whether there is exactly one.
    pub async fn node_ids_by_port_addresses(
        &self,
        addresses: &[String],
    ) -> Result<Vec<NodeId>, Error> {
        if addresses.is_empty() {
            return Ok(Vec::new());
        }
        let marks: Vec<String> = (1..=addresses.len()).map(|i| format!("${i}")).collect();
        let sql = format!(
            "SELECT DISTINCT node_id FROM ports WHERE address IN ({}) ORDER BY node_id LIMIT 2",
            marks.join(", ")
        );
        let args = addresses.iter().map(|a| Arg::Text(Some(a.clone())));
        let ids: Vec<i64> = with_pool!(self, |p| bind_all!(
            sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(sql.as_str())),
            args.clone()
        )
        .fetch_all(p)
        .await)
        .map_err(|e| internal("looking nodes up by port address", e))?;
        Ok(ids.into_iter().map(NodeId).collect())
    }

    /// Deletes a port; false if it was gone.
    pub async fn port_destroy(&self, id: i64) -> Result<bool, Error> {
        let n = with_pool!(self, |p| sqlx::query("DELETE FROM ports WHERE id = $1")
            .bind(id)
            .execute(p)
            .await
            .map(|r| r.rows_affected()))
        .map_err(|e| internal("deleting a port", e))?;
        Ok(n == 1)
    }

    pub async fn port_get(&self, key: Key<'_>) -> Result<Option<Port>, Error> {
        let (clause, arg) = key.clause();
        let sql = format!("{PORT_SELECT} WHERE {clause}");
        let row = with_pool!(self, |p| bind_all!(
            sqlx::query_as::<_, PortRow>(sqlx::AssertSqlSafe(sql.as_str())),
            [arg]
        )
        .fetch_optional(p)
        .await)
        .map_err(|e| internal("reading a port", e))?;
        Ok(row.map(Port::from))
    }

    fn port_list_sql(&self, q: &NicListQuery) -> Result<(String, Where), Error> {
        if !PORT_SORT_KEYS.contains(&q.sort_key.as_str()) {
            return Err(Error::invalid(format!(
                "The sort_key value {} is an invalid field for sorting",
                q.sort_key
            )));
        }
        let mut w = self.nic_where(q, "ports");
        if let Some(g) = q.portgroup_id {
            w.push(|n| format!("p.portgroup_id = ${n}"), Arg::I64(Some(g)));
        }
        if let Some(d) = &q.description_contains {
            w.contains("p.description", d, self.backend());
        }
        let sql = page_sql(PORT_SELECT, &w, q, self.backend());
        Ok((sql, w))
    }

    /// PostgreSQL's plan for [`Db::port_list`] (see [`Db::node_list_plan`]).
    pub async fn port_list_plan(&self, q: &NicListQuery) -> Result<serde_json::Value, Error> {
        let (sql, w) = self.port_list_sql(q)?;
        self.explain(&sql, w.args).await
    }

    /// A page of ports.
    pub async fn port_list(&self, q: &NicListQuery) -> Result<Vec<Port>, Error> {
        let (sql, w) = self.port_list_sql(q)?;
        let rows = with_pool!(self, |p| bind_all!(
            sqlx::query_as::<_, PortRow>(sqlx::AssertSqlSafe(sql.as_str())),
            w.args
        )
        .fetch_all(p)
        .await)
        .map_err(|e| internal("listing ports", e))?;
        Ok(rows.into_iter().map(Port::from).collect())
    }

    /// The filters ports and port groups share, and the marker.
    pub(crate) fn nic_where(&self, q: &NicListQuery, table: &str) -> Where {
        let mut w = Where {
            clauses: Vec::new(),
            args: Vec::new(),
        };
        if let Some(n) = q.node_id {
            w.push(|i| format!("p.node_id = ${i}"), Arg::I64(Some(n.0)));
        }
        if let Some(a) = &q.address {
            w.push(|i| format!("p.address = ${i}"), Arg::Text(Some(a.clone())));
        }
        let backend = self.backend();
        if let Some(pr) = &q.project {
            let (owner, lessee) = (
                node_key("n", "owner", backend),
                node_key("n", "lessee", backend),
            );
            w.push(
                |i| format!("({owner} = ${i} OR {lessee} = ${i}) AND ${i} <> ''"),
                Arg::Text(Some(pr.clone())),
            );
        }
        if let Some(groups) = &q.conductor_groups {
            w.any_of("n.conductor_group", groups);
        }
        if let Some(shards) = &q.shards {
            w.any_of(&node_key("n", "shard", backend), shards);
            w.clauses.push("n.shard IS NOT NULL".into());
        }
        if let Some(m) = q.marker {
            let key = sort_expr("p", &q.sort_key, backend);
            let mkey = sort_expr("m", &q.sort_key, backend);
            let cmp = if q.sort_desc { "<" } else { ">" };
            w.push(
                |i| {
                    format!(
                        "({key}, p.id) {cmp} (SELECT {mkey}, m.id FROM {table} m WHERE m.id = ${i})"
                    )
                },
                Arg::I64(Some(m)),
            );
        }
        w
    }

    /// The physical networks of a port group's members other than `except`.
    pub async fn portgroup_member_physnets(
        &self,
        portgroup_id: i64,
        except: Option<i64>,
    ) -> Result<Vec<Option<String>>, Error> {
        with_pool!(self, |p| sqlx::query_scalar::<_, Option<String>>(
            "SELECT DISTINCT physical_network FROM ports WHERE portgroup_id = $1 AND id <> $2"
        )
        .bind(portgroup_id)
        .bind(except.unwrap_or(-1))
        .fetch_all(p)
        .await)
        .map_err(|e| internal("reading a port group's ports", e))
    }

    /// Gives every member of a port group the group's physical network.
    pub async fn portgroup_set_member_physnet(
        &self,
        portgroup_id: i64,
        physnet: Option<&str>,
    ) -> Result<(), Error> {
        with_pool!(self, |p| sqlx::query(
            "UPDATE ports SET physical_network = $1, updated_at = $2 WHERE portgroup_id = $3"
        )
        .bind(physnet)
        .bind(ironic_model::node::now())
        .bind(portgroup_id)
        .execute(p)
        .await
        .map(|_| ()))
        .map_err(|e| internal("writing a port group's ports", e))?;
        Ok(())
    }

    pub async fn portgroup_create(&self, g: &Portgroup) -> Result<Portgroup, Error> {
        let id = self
            .insert(
                "portgroups",
                PORTGROUP_WRITE_COLS,
                portgroup_args(g),
                &g.uuid,
                g.created_at,
            )
            .await
            .map_err(|e| {
                write_error(
                    e,
                    "portgroup",
                    &g.uuid,
                    g.address.as_deref(),
                    g.name.as_deref(),
                )
            })?;
        self.portgroup_get(Key::Id(id))
            .await?
            .ok_or_else(|| portgroup_not_found(&g.uuid))
    }

    pub async fn portgroup_save(&self, g: &Portgroup) -> Result<Portgroup, Error> {
        let n = self
            .update("portgroups", PORTGROUP_WRITE_COLS, portgroup_args(g), g.id)
            .await
            .map_err(|e| {
                write_error(
                    e,
                    "portgroup",
                    &g.uuid,
                    g.address.as_deref(),
                    g.name.as_deref(),
                )
            })?;
        if n == 0 {
            return Err(portgroup_not_found(&g.uuid));
        }
        self.portgroup_get(Key::Id(g.id))
            .await?
            .ok_or_else(|| portgroup_not_found(&g.uuid))
    }

    /// Deletes a port group that has no ports: 400 while it has (checked by the same
    /// statement, so no port joins in between).
    pub async fn portgroup_destroy(&self, g: &Portgroup) -> Result<(), Error> {
        let n = with_pool!(self, |p| sqlx::query(
            "DELETE FROM portgroups WHERE id = $1 \
             AND NOT EXISTS (SELECT 1 FROM ports WHERE portgroup_id = $1)"
        )
        .bind(g.id)
        .execute(p)
        .await
        .map(|r| r.rows_affected()))
        .map_err(|e| internal("deleting a port group", e))?;
        if n == 1 {
            return Ok(());
        }
        match self.portgroup_get(Key::Id(g.id)).await? {
            Some(_) => Err(Error::invalid(format!(
                "Cannot complete the requested action because portgroup {} contains ports.",
                g.uuid
            ))),
            None => Err(portgroup_not_found(&g.uuid)),
        }
    }

    pub async fn portgroup_get(&self, key: Key<'_>) -> Result<Option<Portgroup>, Error> {
        let (clause, arg) = key.clause();
        let sql = format!("{PORTGROUP_SELECT} WHERE {clause}");
        let row = with_pool!(self, |p| bind_all!(
            sqlx::query_as::<_, PortgroupRow>(sqlx::AssertSqlSafe(sql.as_str())),
            [arg]
        )
        .fetch_optional(p)
        .await)
        .map_err(|e| internal("reading a port group", e))?;
        Ok(row.map(Portgroup::from))
    }

    /// PostgreSQL's plan for [`Db::portgroup_list`] (see [`Db::node_list_plan`]).
    pub async fn portgroup_list_plan(&self, q: &NicListQuery) -> Result<serde_json::Value, Error> {
        let (sql, w) = self.portgroup_list_sql(q)?;
        self.explain(&sql, w.args).await
    }

    fn portgroup_list_sql(&self, q: &NicListQuery) -> Result<(String, Where), Error> {
        if !PORTGROUP_SORT_KEYS.contains(&q.sort_key.as_str()) {
            return Err(Error::invalid(format!(
                "The sort_key value {} is an invalid field for sorting",
                q.sort_key
            )));
        }
        let w = self.nic_where(q, "portgroups");
        Ok((page_sql(PORTGROUP_SELECT, &w, q, self.backend()), w))
    }

    /// A page of port groups.
    pub async fn portgroup_list(&self, q: &NicListQuery) -> Result<Vec<Portgroup>, Error> {
        let (sql, w) = self.portgroup_list_sql(q)?;
        let rows = with_pool!(self, |p| bind_all!(
            sqlx::query_as::<_, PortgroupRow>(sqlx::AssertSqlSafe(sql.as_str())),
            w.args
        )
        .fetch_all(p)
        .await)
        .map_err(|e| internal("listing port groups", e))?;
        Ok(rows.into_iter().map(Portgroup::from).collect())
    }
}

pub(crate) fn page_sql(select: &str, w: &Where, q: &NicListQuery, backend: Backend) -> String {
    let key = sort_expr("p", &q.sort_key, backend);
    let dir = if q.sort_desc { "DESC" } else { "ASC" };
    let mut sql = select.to_string();
    if !w.clauses.is_empty() {
        sql.push_str(" WHERE ");
        sql.push_str(&w.clauses.join(" AND "));
    }
    sql.push_str(&format!(
        " ORDER BY {key} {dir}, p.id {dir} LIMIT {}",
        q.limit.max(1)
    ));
    sql
}
