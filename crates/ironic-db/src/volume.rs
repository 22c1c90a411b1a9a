//! Volume connectors and targets. Rows carry their node's id; reads join its uuid.
//! Uniqueness is the database's: a connector's (type, connector id) across the
//! deployment, a target's boot index per node.

use chrono::{DateTime, Utc};
use ironic_model::node::JsonObject;
use ironic_model::volume::{VolumeConnector, VolumeTarget, connector_not_found, target_not_found};
use ironic_model::{ConnectorUuid, Error, NodeId, NodeUuid, TargetUuid};
use sqlx::types::Json;

use crate::nodes::{Arg, bind_all};
use crate::ports::{Key, NicListQuery, page_sql};
use crate::{Db, internal, with_pool};

const CONNECTOR_SELECT: &str = "SELECT p.id, p.uuid, p.node_id, n.uuid AS node_uuid, \
     p.connector_type, p.connector_id, p.extra, p.created_at, p.updated_at \
     FROM volume_connectors p JOIN nodes n ON n.id = p.node_id";

const TARGET_SELECT: &str = "SELECT p.id, p.uuid, p.node_id, n.uuid AS node_uuid, \
     p.volume_type, p.volume_id, p.boot_index, p.properties, p.extra, p.created_at, \
     p.updated_at FROM volume_targets p JOIN nodes n ON n.id = p.node_id";

/// Sort keys of the connector list (API names).
pub const CONNECTOR_SORT_KEYS: &[&str] = &[
    "id",
    "uuid",
    "type",
    "connector_id",
    "node_uuid",
    "created_at",
    "updated_at",
];

/// Sort keys of the target list (not `properties`, `extra`).
pub const TARGET_SORT_KEYS: &[&str] = &[
    "id",
    "uuid",
    "volume_type",
    "volume_id",
    "boot_index",
    "node_uuid",
    "created_at",
    "updated_at",
];

#[derive(sqlx::FromRow)]
struct ConnectorRow {
    id: i64,
    uuid: String,
    node_id: i64,
    node_uuid: String,
    connector_type: String,
    connector_id: String,
    extra: Json<JsonObject>,
    created_at: DateTime<Utc>,
    updated_at: Option<DateTime<Utc>>,
}

impl From<ConnectorRow> for VolumeConnector {
    fn from(r: ConnectorRow) -> Self {
        VolumeConnector {
            id: r.id,
            uuid: ConnectorUuid::from_db(r.uuid),
            node_id: NodeId(r.node_id),
            node_uuid: NodeUuid::from_db(r.node_uuid),
            connector_type: r.connector_type,
            connector_id: r.connector_id,
            extra: r.extra.0,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

#[derive(sqlx::FromRow)]
struct TargetRow {
    id: i64,
    uuid: String,
    node_id: i64,
    node_uuid: String,
    volume_type: String,
    volume_id: String,
    boot_index: i32,
    properties: Json<JsonObject>,
    extra: Json<JsonObject>,
    created_at: DateTime<Utc>,
    updated_at: Option<DateTime<Utc>>,
}

impl From<TargetRow> for VolumeTarget {
    fn from(r: TargetRow) -> Self {
        VolumeTarget {
            id: r.id,
            uuid: TargetUuid::from_db(r.uuid),
            node_id: NodeId(r.node_id),
            node_uuid: NodeUuid::from_db(r.node_uuid),
            volume_type: r.volume_type,
            volume_id: r.volume_id,
            boot_index: i64::from(r.boot_index),
            properties: r.properties.0,
            extra: r.extra.0,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

const CONNECTOR_COLS: &[&str] = &["node_id", "connector_type", "connector_id", "extra"];

fn connector_args(c: &VolumeConnector) -> Vec<Arg> {
    vec![
        Arg::I64(Some(c.node_id.0)),
        Arg::Text(Some(c.connector_type.clone())),
        Arg::Text(Some(c.connector_id.clone())),
        Arg::Json(Json(c.extra.clone())),
    ]
}

const TARGET_COLS: &[&str] = &[
    "node_id",
    "volume_type",
    "volume_id",
    "boot_index",
    "properties",
    "extra",
];

fn target_args(t: &VolumeTarget) -> Vec<Arg> {
    vec![
        Arg::I64(Some(t.node_id.0)),
        Arg::Text(Some(t.volume_type.clone())),
        Arg::Text(Some(t.volume_id.clone())),
        Arg::I64(Some(t.boot_index)),
        Arg::Json(Json(t.properties.clone())),
        Arg::Json(Json(t.extra.clone())),
    ]
}

/// What a unique or foreign key violation means for the client.
fn unique(e: &sqlx::Error) -> Option<String> {
    match e {
        sqlx::Error::Database(db) if db.is_unique_violation() => Some(
            db.constraint()
                .map(str::to_owned)
                .unwrap_or_else(|| db.message().to_owned()),
        ),
        _ => None,
    }
}

fn node_gone(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.is_foreign_key_violation())
}

fn connector_error(e: sqlx::Error, c: &VolumeConnector) -> Error {
    if node_gone(&e) {
        return Error::invalid(format!("Node {} could not be found.", c.node_uuid));
    }
    match unique(&e) {
        Some(what) if what.contains("connector_id") => Error::Conflict(format!(
            "A volume connector with type {} and connector ID {} already exists.",
            c.connector_type, c.connector_id
        )),
        Some(_) => Error::Conflict(format!(
            "A volume connector with UUID {} already exists.",
            c.uuid
        )),
        None => internal("writing a volume connector", e),
    }
}

fn target_error(e: sqlx::Error, t: &VolumeTarget) -> Error {
    if node_gone(&e) {
        return Error::invalid(format!("Node {} could not be found.", t.node_uuid));
    }
    match unique(&e) {
        Some(what) if what.contains("boot_index") => Error::Conflict(format!(
            "A volume target with boot index '{}' for the same node already exists.",
            t.boot_index
        )),
        Some(_) => Error::Conflict(format!(
            "A volume target with UUID {} already exists.",
            t.uuid
        )),
        None => internal("writing a volume target", e),
    }
}

/// The query with the API's sort key turned into the column's.
fn columns(q: &NicListQuery, keys: &[&str]) -> Result<NicListQuery, Error> {
    if !keys.contains(&q.sort_key.as_str()) {
        return Err(Error::invalid(format!(
            "The sort_key value {} is an invalid field for sorting",
            q.sort_key
        )));
    }
    let mut q = q.clone();
    if q.sort_key == "type" {
        q.sort_key = "connector_type".into();
    }
    Ok(q)
}

impl Db {
    pub async fn volume_connector_create(
        &self,
        c: &VolumeConnector,
    ) -> Result<VolumeConnector, Error> {
        let id = self
            .insert(
                "volume_connectors",
                CONNECTOR_COLS,
                connector_args(c),
                &c.uuid,
                c.created_at,
            )
            .await
            .map_err(|e| connector_error(e, c))?;
        self.volume_connector_get(Key::Id(id))
            .await?
            .ok_or_else(|| connector_not_found(&c.uuid))
    }

    pub async fn volume_connector_save(
        &self,
        c: &VolumeConnector,
    ) -> Result<VolumeConnector, Error> {
        let n = self
            .update("volume_connectors", CONNECTOR_COLS, connector_args(c), c.id)
            .await
            .map_err(|e| connector_error(e, c))?;
        if n == 0 {
            return Err(connector_not_found(&c.uuid));
        }
        self.volume_connector_get(Key::Id(c.id))
            .await?
            .ok_or_else(|| connector_not_found(&c.uuid))
    }

    pub async fn volume_connector_get(
        &self,
        key: Key<'_>,
    ) -> Result<Option<VolumeConnector>, Error> {
        let (clause, arg) = key.clause();
        let sql = format!("{CONNECTOR_SELECT} WHERE {clause}");
        let row = with_pool!(self, |p| bind_all!(
            sqlx::query_as::<_, ConnectorRow>(sqlx::AssertSqlSafe(sql.as_str())),
            [arg]
        )
        .fetch_optional(p)
        .await)
        .map_err(|e| internal("reading a volume connector", e))?;
        Ok(row.map(VolumeConnector::from))
    }

    pub async fn volume_connector_list(
        &self,
        q: &NicListQuery,
    ) -> Result<Vec<VolumeConnector>, Error> {
        let q = columns(q, CONNECTOR_SORT_KEYS)?;
        let w = self.nic_where(&q, "volume_connectors");
        let sql = page_sql(CONNECTOR_SELECT, &w, &q, self.backend());
        let rows = with_pool!(self, |p| bind_all!(
            sqlx::query_as::<_, ConnectorRow>(sqlx::AssertSqlSafe(sql.as_str())),
            w.args
        )
        .fetch_all(p)
        .await)
        .map_err(|e| internal("listing volume connectors", e))?;
        Ok(rows.into_iter().map(VolumeConnector::from).collect())
    }

    pub async fn volume_target_create(&self, t: &VolumeTarget) -> Result<VolumeTarget, Error> {
        let id = self
            .insert(
                "volume_targets",
                TARGET_COLS,
                target_args(t),
                &t.uuid,
                t.created_at,
            )
            .await
            .map_err(|e| target_error(e, t))?;
        self.volume_target_get(Key::Id(id))
            .await?
            .ok_or_else(|| target_not_found(&t.uuid))
    }

    pub async fn volume_target_save(&self, t: &VolumeTarget) -> Result<VolumeTarget, Error> {
        let n = self
            .update("volume_targets", TARGET_COLS, target_args(t), t.id)
            .await
            .map_err(|e| target_error(e, t))?;
        if n == 0 {
            return Err(target_not_found(&t.uuid));
        }
        self.volume_target_get(Key::Id(t.id))
            .await?
            .ok_or_else(|| target_not_found(&t.uuid))
    }

    pub async fn volume_target_get(&self, key: Key<'_>) -> Result<Option<VolumeTarget>, Error> {
        let (clause, arg) = key.clause();
        let sql = format!("{TARGET_SELECT} WHERE {clause}");
        let row = with_pool!(self, |p| bind_all!(
            sqlx::query_as::<_, TargetRow>(sqlx::AssertSqlSafe(sql.as_str())),
            [arg]
        )
        .fetch_optional(p)
        .await)
        .map_err(|e| internal("reading a volume target", e))?;
        Ok(row.map(VolumeTarget::from))
    }

    pub async fn volume_target_list(&self, q: &NicListQuery) -> Result<Vec<VolumeTarget>, Error> {
        let q = columns(q, TARGET_SORT_KEYS)?;
        let w = self.nic_where(&q, "volume_targets");
        let sql = page_sql(TARGET_SELECT, &w, &q, self.backend());
        let rows = with_pool!(self, |p| bind_all!(
            sqlx::query_as::<_, TargetRow>(sqlx::AssertSqlSafe(sql.as_str())),
            w.args
        )
        .fetch_all(p)
        .await)
        .map_err(|e| internal("listing volume targets", e))?;
        Ok(rows.into_iter().map(VolumeTarget::from).collect())
    }

    /// Deletes a connector or target (`table`): false if it was gone.
    pub async fn volume_destroy(&self, table: VolumeTable, id: i64) -> Result<bool, Error> {
        let sql = match table {
            VolumeTable::Connectors => "DELETE FROM volume_connectors WHERE id = $1",
            VolumeTable::Targets => "DELETE FROM volume_targets WHERE id = $1",
        };
        let n = with_pool!(self, |p| sqlx::query(sql)
            .bind(id)
            .execute(p)
            .await
            .map(|r| r.rows_affected()))
        .map_err(|e| internal("deleting a volume object", e))?;
        Ok(n == 1)
    }
}

/// Which volume table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VolumeTable {
    Connectors,
    Targets,
}
