//! Runbooks (1.92): one row each, steps and traits as JSON documents. Lists are
//! keyset-paginated (`keyset.rs`), a project's view filtered in SQL.

use chrono::{DateTime, Utc};
use ironic_model::node::JsonObject;
use ironic_model::runbook::{Runbook, RunbookStep};
use ironic_model::{Error, RunbookUuid};
use serde_json::Value;
use sqlx::types::Json;

use crate::{Db, internal, with_pool};

/// Columns a list may sort by.
pub const SORT_KEYS: &[&str] = &[
    "id",
    "uuid",
    "name",
    "created_at",
    "updated_at",
    "owner",
    "public",
    "disable_ramdisk",
];

const COLS: &str = "id, uuid, name, description, steps, traits, disable_ramdisk, public, owner, \
                    extra, created_at, updated_at";

#[derive(sqlx::FromRow)]
struct Row {
    id: i64,
    uuid: String,
    name: String,
    description: Option<String>,
    steps: Json<Vec<Value>>,
    traits: Json<Vec<String>>,
    disable_ramdisk: bool,
    public: bool,
    owner: Option<String>,
    extra: Json<JsonObject>,
    created_at: DateTime<Utc>,
    updated_at: Option<DateTime<Utc>>,
}

impl From<Row> for Runbook {
    fn from(r: Row) -> Runbook {
        let steps = r
            .steps
            .0
            .iter()
            .filter_map(|s| {
                Some(RunbookStep {
                    interface: s.get("interface")?.as_str()?.to_string(),
                    step: s.get("step")?.as_str()?.to_string(),
                    args: s.get("args")?.as_object()?.clone(),
                    order: s.get("order")?.as_u64()?,
                })
            })
            .collect();
        Runbook {
            id: r.id,
            uuid: RunbookUuid::from_db(r.uuid),
            name: r.name,
            description: r.description,
            steps,
            traits: r.traits.0,
            disable_ramdisk: r.disable_ramdisk,
            public: r.public,
            owner: r.owner,
            extra: r.extra.0,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

fn write_error(e: sqlx::Error, r: &Runbook) -> Error {
    if let sqlx::Error::Database(db) = &e
        && db.is_unique_violation()
    {
        let what = db
            .constraint()
            .map(str::to_owned)
            .unwrap_or_else(|| db.message().to_owned());
        return Error::Conflict(if what.contains("name") {
            format!("A runbook with name {} already exists.", r.name)
        } else {
            format!("A runbook with UUID {} already exists.", r.uuid)
        });
    }
    internal("writing a runbook", e)
}

fn steps_doc(r: &Runbook) -> Vec<Value> {
    r.steps.iter().map(RunbookStep::to_json).collect()
}

impl Db {
    /// Stores a new runbook; 409 on a duplicate name or uuid.
    pub async fn runbook_create(&self, r: &Runbook) -> Result<Runbook, Error> {
        let sql = "INSERT INTO runbooks (uuid, name, description, steps, traits, \
                   disable_ramdisk, public, owner, extra, created_at) \
                   VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)";
        with_pool!(self, |p| sqlx::query(sql)
            .bind(r.uuid.as_str())
            .bind(&r.name)
            .bind(&r.description)
            .bind(Json(steps_doc(r)))
            .bind(Json(&r.traits))
            .bind(r.disable_ramdisk)
            .bind(r.public)
            .bind(&r.owner)
            .bind(Json(&r.extra))
            .bind(r.created_at)
            .execute(p)
            .await
            .map(|_| ()))
        .map_err(|e| write_error(e, r))?;
        self.runbook_by_uuid(&r.uuid)
            .await?
            .ok_or_else(|| ironic_model::runbook::not_found(&r.uuid))
    }

    /// Writes every field of an existing runbook (PATCH, traits); `updated_at` set.
    pub async fn runbook_update(&self, r: &Runbook) -> Result<Runbook, Error> {
        let sql = "UPDATE runbooks SET name = $1, description = $2, steps = $3, traits = $4, \
                   disable_ramdisk = $5, public = $6, owner = $7, extra = $8, updated_at = $9 \
                   WHERE id = $10";
        let done = with_pool!(self, |p| sqlx::query(sql)
            .bind(&r.name)
            .bind(&r.description)
            .bind(Json(steps_doc(r)))
            .bind(Json(&r.traits))
            .bind(r.disable_ramdisk)
            .bind(r.public)
            .bind(&r.owner)
            .bind(Json(&r.extra))
            .bind(ironic_model::node::now())
            .bind(r.id)
            .execute(p)
            .await
            .map(|d| d.rows_affected()))
        .map_err(|e| write_error(e, r))?;
        if done == 0 {
            return Err(ironic_model::runbook::not_found(&r.uuid));
        }
        self.runbook_by_uuid(&r.uuid)
            .await?
            .ok_or_else(|| ironic_model::runbook::not_found(&r.uuid))
    }

    pub async fn runbook_destroy(&self, r: &Runbook) -> Result<(), Error> {
        let done = with_pool!(self, |p| sqlx::query("DELETE FROM runbooks WHERE id = $1")
            .bind(r.id)
            .execute(p)
            .await
            .map(|d| d.rows_affected()))
        .map_err(|e| internal("deleting a runbook", e))?;
        if done == 0 {
            return Err(ironic_model::runbook::not_found(&r.uuid));
        }
        Ok(())
    }

    /// `column` is one of this file's constants (uuid, name), never input.
    async fn runbook_where(&self, column: &str, arg: &str) -> Result<Option<Runbook>, Error> {
        let sql = format!("SELECT {COLS} FROM runbooks WHERE {column} = $1");
        let row: Option<Row> =
            with_pool!(self, |p| sqlx::query_as(sqlx::AssertSqlSafe(sql.as_str()))
                .bind(arg)
                .fetch_optional(p)
                .await)
            .map_err(|e| internal("reading a runbook", e))?;
        Ok(row.map(Runbook::from))
    }

    pub async fn runbook_by_uuid(&self, uuid: &str) -> Result<Option<Runbook>, Error> {
        self.runbook_where("uuid", uuid).await
    }

    pub async fn runbook_by_name(&self, name: &str) -> Result<Option<Runbook>, Error> {
        self.runbook_where("name", name).await
    }

    /// A page of runbooks sorted by `sort_key` (then id), after `marker`; with
    /// `visible_to`, only the public ones and that project's.
    pub async fn runbook_list(
        &self,
        sort_key: &str,
        desc: bool,
        marker: Option<&Runbook>,
        limit: usize,
        visible_to: Option<&str>,
    ) -> Result<Vec<Runbook>, Error> {
        let mut page = crate::keyset::page(
            self.backend(),
            "runbooks",
            SORT_KEYS,
            sort_key,
            desc,
            marker.map(|m| m.id),
            limit,
        )?;
        if let Some(project) = visible_to {
            let owner = page.bind(project.to_string());
            page.filter(format!("(public = TRUE OR owner = {owner})"));
        }
        let sql = format!("SELECT {COLS} FROM runbooks {}", page.tail());
        let args = page.args;
        let rows: Vec<Row> = with_pool!(self, |p| {
            let mut q = sqlx::query_as(sqlx::AssertSqlSafe(sql.as_str()));
            for a in &args {
                q = q.bind(a);
            }
            q.fetch_all(p).await
        })
        .map_err(|e| internal("reading runbooks", e))?;
        Ok(rows.into_iter().map(Runbook::from).collect())
    }

    /// Every runbook, oldest first.
    pub async fn runbook_all(&self) -> Result<Vec<Runbook>, Error> {
        let sql = format!("SELECT {COLS} FROM runbooks ORDER BY id");
        let rows: Vec<Row> =
            with_pool!(self, |p| sqlx::query_as(sqlx::AssertSqlSafe(sql.as_str()))
                .fetch_all(p)
                .await)
            .map_err(|e| internal("reading runbooks", e))?;
        Ok(rows.into_iter().map(Runbook::from).collect())
    }
}
