//! Inspection rules (1.96): one row each, conditions and actions as JSON documents.
//! Rules are few (an operator's catalogue, read whole by every inspection); the API's
//! lists are keyset-paginated (`keyset.rs`).

use chrono::{DateTime, Utc};
use ironic_model::inspection_rule::{self as ir, InspectionRule};
use ironic_model::node::JsonObject;
use ironic_model::{Error, RuleUuid};
use serde_json::Value;
use sqlx::types::Json;

use crate::{Db, internal, with_pool};

/// Columns a list may sort by.
pub const SORT_KEYS: &[&str] = &[
    "id",
    "uuid",
    "priority",
    "description",
    "sensitive",
    "phase",
    "created_at",
    "updated_at",
];

const COLS: &str = "id, uuid, description, priority, sensitive, phase, conditions, actions, created_at, updated_at";

#[derive(sqlx::FromRow)]
struct Row {
    id: i64,
    uuid: String,
    description: Option<String>,
    priority: i32,
    sensitive: bool,
    phase: String,
    conditions: Json<Vec<Value>>,
    actions: Json<Vec<Value>>,
    created_at: DateTime<Utc>,
    updated_at: Option<DateTime<Utc>>,
}

fn objects(items: Vec<Value>) -> Vec<JsonObject> {
    items
        .into_iter()
        .filter_map(|v| match v {
            Value::Object(o) => Some(o),
            _ => None,
        })
        .collect()
}

impl From<Row> for InspectionRule {
    fn from(r: Row) -> InspectionRule {
        InspectionRule {
            id: r.id,
            uuid: RuleUuid::from_db(r.uuid),
            description: r.description,
            priority: i64::from(r.priority),
            sensitive: r.sensitive,
            phase: r.phase,
            conditions: objects(r.conditions.0),
            actions: objects(r.actions.0),
            built_in: false,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

fn write_error(e: sqlx::Error, r: &InspectionRule) -> Error {
    if let sqlx::Error::Database(db) = &e
        && db.is_unique_violation()
    {
        return Error::Conflict(format!("A rule with UUID {} already exists.", r.uuid));
    }
    internal("writing an inspection rule", e)
}

fn docs(items: &[JsonObject]) -> Json<Vec<Value>> {
    Json(items.iter().cloned().map(Value::Object).collect())
}

/// Priorities are bounded by validation (0..9999 through the API); a stored value
/// outside `i32` cannot happen, and is clamped rather than wrapped if it did.
fn priority(r: &InspectionRule) -> i32 {
    i32::try_from(r.priority).unwrap_or(i32::MAX)
}

impl Db {
    /// Stores a new rule; 409 on a duplicate uuid.
    pub async fn inspection_rule_create(
        &self,
        r: &InspectionRule,
    ) -> Result<InspectionRule, Error> {
        let sql = "INSERT INTO inspection_rules (uuid, description, priority, sensitive, \
                   phase, conditions, actions, created_at) \
                   VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";
        with_pool!(self, |p| sqlx::query(sql)
            .bind(r.uuid.as_str())
            .bind(&r.description)
            .bind(priority(r))
            .bind(r.sensitive)
            .bind(&r.phase)
            .bind(docs(&r.conditions))
            .bind(docs(&r.actions))
            .bind(r.created_at)
            .execute(p)
            .await
            .map(|_| ()))
        .map_err(|e| write_error(e, r))?;
        self.inspection_rule_by_uuid(&r.uuid)
            .await?
            .ok_or_else(|| ir::not_found(&r.uuid))
    }

    /// Writes every field of an existing rule (PATCH); `updated_at` set.
    pub async fn inspection_rule_update(
        &self,
        r: &InspectionRule,
    ) -> Result<InspectionRule, Error> {
        let sql = "UPDATE inspection_rules SET description = $1, priority = $2, sensitive = $3, \
                   phase = $4, conditions = $5, actions = $6, updated_at = $7 WHERE id = $8";
        let done = with_pool!(self, |p| sqlx::query(sql)
            .bind(&r.description)
            .bind(priority(r))
            .bind(r.sensitive)
            .bind(&r.phase)
            .bind(docs(&r.conditions))
            .bind(docs(&r.actions))
            .bind(ironic_model::node::now())
            .bind(r.id)
            .execute(p)
            .await
            .map(|d| d.rows_affected()))
        .map_err(|e| write_error(e, r))?;
        if done == 0 {
            return Err(ir::not_found(&r.uuid));
        }
        self.inspection_rule_by_uuid(&r.uuid)
            .await?
            .ok_or_else(|| ir::not_found(&r.uuid))
    }

    pub async fn inspection_rule_destroy(&self, r: &InspectionRule) -> Result<(), Error> {
        let done = with_pool!(self, |p| sqlx::query(
            "DELETE FROM inspection_rules WHERE id = $1"
        )
        .bind(r.id)
        .execute(p)
        .await
        .map(|d| d.rows_affected()))
        .map_err(|e| internal("deleting an inspection rule", e))?;
        if done == 0 {
            return Err(ir::not_found(&r.uuid));
        }
        Ok(())
    }

    pub async fn inspection_rule_by_uuid(
        &self,
        uuid: &str,
    ) -> Result<Option<InspectionRule>, Error> {
        let sql = format!("SELECT {COLS} FROM inspection_rules WHERE uuid = $1");
        let row: Option<Row> =
            with_pool!(self, |p| sqlx::query_as(sqlx::AssertSqlSafe(sql.as_str()))
                .bind(uuid)
                .fetch_optional(p)
                .await)
            .map_err(|e| internal("reading an inspection rule", e))?;
        Ok(row.map(InspectionRule::from))
    }

    /// A page of rules sorted by `sort_key` (then id), after `marker`.
    pub async fn inspection_rule_list(
        &self,
        sort_key: &str,
        desc: bool,
        marker: Option<&InspectionRule>,
        limit: usize,
    ) -> Result<Vec<InspectionRule>, Error> {
        let page = crate::keyset::page(
            self.backend(),
            "inspection_rules",
            SORT_KEYS,
            sort_key,
            desc,
            marker.map(|m| m.id),
            limit,
        )?;
        let sql = format!("SELECT {COLS} FROM inspection_rules {}", page.tail());
        let rows: Vec<Row> = with_pool!(self, |p| {
            let mut q = sqlx::query_as(sqlx::AssertSqlSafe(sql.as_str()));
            for a in &page.args {
                q = q.bind(a);
            }
            q.fetch_all(p).await
        })
        .map_err(|e| internal("reading inspection rules", e))?;
        Ok(rows.into_iter().map(InspectionRule::from).collect())
    }

    /// Every rule, oldest first (the order rules of one priority run in).
    pub async fn inspection_rule_all(&self) -> Result<Vec<InspectionRule>, Error> {
        let sql = format!("SELECT {COLS} FROM inspection_rules ORDER BY id");
        let rows: Vec<Row> =
            with_pool!(self, |p| sqlx::query_as(sqlx::AssertSqlSafe(sql.as_str()))
                .fetch_all(p)
                .await)
            .map_err(|e| internal("reading inspection rules", e))?;
        Ok(rows.into_iter().map(InspectionRule::from).collect())
    }
}
