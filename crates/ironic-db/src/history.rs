//! Node history (1.78): entries appended by the conductor holding the node, read by
//! the API in insertion order (which is `created_at` order: a node's entries are
//! written under its lock), pruned by count per node and by age.

use chrono::{DateTime, Utc};
use ironic_model::Error;
use ironic_model::history::HistoryEntry;

use crate::{Db, internal, with_pool};

const COLS: &str = "id, uuid, node_id, conductor, event_type, severity, event, user_id, \
                    project_id, state, target_provision_state, duration_seconds, created_at";

#[derive(sqlx::FromRow)]
struct Row {
    id: i64,
    uuid: String,
    node_id: i64,
    conductor: Option<String>,
    event_type: Option<String>,
    severity: Option<String>,
    event: Option<String>,
    user_id: Option<String>,
    project_id: Option<String>,
    state: Option<String>,
    target_provision_state: Option<String>,
    duration_seconds: Option<i64>,
    created_at: DateTime<Utc>,
}

impl From<Row> for HistoryEntry {
    fn from(r: Row) -> HistoryEntry {
        HistoryEntry {
            id: r.id,
            uuid: r.uuid,
            node_id: r.node_id,
            conductor: r.conductor,
            event_type: r.event_type.unwrap_or_else(|| "UNKNOWN".into()),
            severity: r.severity.unwrap_or_else(|| "INFO".into()),
            event: r.event.unwrap_or_default(),
            user: r.user_id,
            project: r.project_id,
            state: r.state,
            target_provision_state: r.target_provision_state,
            duration_seconds: r.duration_seconds,
            created_at: r.created_at,
        }
    }
}

impl Db {
    /// Appends entries (one statement each, in order).
    pub async fn history_record(&self, entries: &[HistoryEntry]) -> Result<(), Error> {
        let sql = "INSERT INTO node_history (uuid, node_id, conductor, event_type, severity, \
                   event, user_id, project_id, state, target_provision_state, \
                   duration_seconds, created_at) \
                   VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)";
        for e in entries {
            with_pool!(self, |p| sqlx::query(sql)
                .bind(e.uuid.as_str())
                .bind(e.node_id)
                .bind(&e.conductor)
                .bind(&e.event_type)
                .bind(&e.severity)
                .bind(&e.event)
                .bind(&e.user)
                .bind(&e.project)
                .bind(&e.state)
                .bind(&e.target_provision_state)
                .bind(e.duration_seconds)
                .bind(e.created_at)
                .execute(p)
                .await
                .map(|_| ()))
            .map_err(|e| internal("writing node history", e))?;
        }
        Ok(())
    }

    /// A node's entries after `marker` (an entry's id), oldest first unless `desc`.
    pub async fn history_list(
        &self,
        node_id: i64,
        marker: Option<i64>,
        desc: bool,
        limit: usize,
    ) -> Result<Vec<HistoryEntry>, Error> {
        let (cmp, dir) = if desc { ("<", "DESC") } else { (">", "ASC") };
        let cond = if marker.is_some() {
            format!("AND id {cmp} $2")
        } else {
            String::new()
        };
        let sql = format!(
            "SELECT {COLS} FROM node_history WHERE node_id = $1 {cond} \
             ORDER BY id {dir} LIMIT {limit}"
        );
        let rows = with_pool!(self, |p| {
            let mut q = sqlx::query_as::<_, Row>(sqlx::AssertSqlSafe(sql.as_str())).bind(node_id);
            if let Some(m) = marker {
                q = q.bind(m);
            }
            q.fetch_all(p).await
        })
        .map_err(|e| internal("reading node history", e))?;
        Ok(rows.into_iter().map(HistoryEntry::from).collect())
    }

    /// One entry of a node, by uuid.
    pub async fn history_get(&self, node_id: i64, uuid: &str) -> Result<HistoryEntry, Error> {
        let sql = format!("SELECT {COLS} FROM node_history WHERE node_id = $1 AND uuid = $2");
        let row = with_pool!(self, |p| sqlx::query_as::<_, Row>(sqlx::AssertSqlSafe(
            sql.as_str()
        ))
        .bind(node_id)
        .bind(uuid)
        .fetch_optional(p)
        .await)
        .map_err(|e| internal("reading node history", e))?;
        row.map(HistoryEntry::from)
            .ok_or_else(|| ironic_model::history::not_found(uuid))
    }

    /// Deletes up to `batch` entries beyond the newest `keep` of each node that are
    /// older than `before`; returns how many went.
    pub async fn history_prune(
        &self,
        keep: u64,
        before: DateTime<Utc>,
        batch: u64,
    ) -> Result<u64, Error> {
        let keep = i64::try_from(keep).unwrap_or(i64::MAX);
        let batch = i64::try_from(batch).unwrap_or(i64::MAX);
        let sql = "DELETE FROM node_history WHERE id IN (\
                   SELECT id FROM (SELECT id, created_at, ROW_NUMBER() OVER \
                   (PARTITION BY node_id ORDER BY id DESC) AS rn FROM node_history) ranked \
                   WHERE rn > $1 AND created_at < $2 LIMIT $3)";
        let done = with_pool!(self, |p| sqlx::query(sql)
            .bind(keep)
            .bind(before)
            .bind(batch)
            .execute(p)
            .await
            .map(|r| r.rows_affected()))
        .map_err(|e| internal("pruning node history", e))?;
        Ok(done)
    }
}
