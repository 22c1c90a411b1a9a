//! Chassis. A chassis that nodes name cannot be deleted: the check and the delete are
//! one statement.

use chrono::{DateTime, Utc};
use ironic_model::chassis::{self as ch, Chassis, SORT_KEYS};
use ironic_model::node::JsonObject;
use ironic_model::{ChassisUuid, Error};
use sqlx::types::Json;

use crate::{Db, internal, with_pool};

const COLS: &str = "id, uuid, description, extra, created_at, updated_at";

#[derive(sqlx::FromRow)]
struct Row {
    id: i64,
    uuid: String,
    description: Option<String>,
    extra: Json<JsonObject>,
    created_at: DateTime<Utc>,
    updated_at: Option<DateTime<Utc>>,
}

impl From<Row> for Chassis {
    fn from(r: Row) -> Chassis {
        Chassis {
            id: r.id,
            uuid: ChassisUuid::from_db(r.uuid),
            description: r.description,
            extra: r.extra.0,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

impl Db {
    /// Stores a chassis; 409 on a duplicate uuid.
    pub async fn chassis_create(&self, c: &Chassis) -> Result<Chassis, Error> {
        let sql = format!(
            "INSERT INTO chassis (uuid, description, extra, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, NULL) RETURNING {COLS}"
        );
        let row = with_pool!(self, |p| sqlx::query_as::<_, Row>(sqlx::AssertSqlSafe(
            sql.as_str()
        ))
        .bind(c.uuid.as_str())
        .bind(&c.description)
        .bind(Json(&c.extra))
        .bind(c.created_at)
        .fetch_one(p)
        .await);
        match row {
            Ok(r) => Ok(r.into()),
            Err(sqlx::Error::Database(db)) if db.is_unique_violation() => Err(Error::Conflict(
                format!("A chassis with UUID {} already exists.", c.uuid),
            )),
            Err(e) => Err(internal("writing a chassis", e)),
        }
    }

    /// Writes a chassis' description and extra (PATCH).
    pub async fn chassis_update(&self, c: &Chassis) -> Result<Chassis, Error> {
        let sql = format!(
            "UPDATE chassis SET description = $1, extra = $2, updated_at = $3 WHERE id = $4 \
             RETURNING {COLS}"
        );
        let row = with_pool!(self, |p| sqlx::query_as::<_, Row>(sqlx::AssertSqlSafe(
            sql.as_str()
        ))
        .bind(&c.description)
        .bind(Json(&c.extra))
        .bind(ironic_model::node::now())
        .bind(c.id)
        .fetch_optional(p)
        .await)
        .map_err(|e| internal("writing a chassis", e))?;
        row.map(Chassis::from).ok_or_else(|| ch::not_found(&c.uuid))
    }

    /// Deletes a chassis that no node names: 400 while one does (checked in the same
    /// statement, so a node cannot slip in between).
    pub async fn chassis_destroy(&self, c: &Chassis) -> Result<(), Error> {
        let n = with_pool!(self, |p| sqlx::query(
            "DELETE FROM chassis WHERE id = $1 \
             AND NOT EXISTS (SELECT 1 FROM nodes WHERE chassis_uuid = $2)"
        )
        .bind(c.id)
        .bind(c.uuid.as_str())
        .execute(p)
        .await
        .map(|r| r.rows_affected()))
        .map_err(|e| internal("deleting a chassis", e))?;
        if n == 1 {
            return Ok(());
        }
        match self.chassis_by_uuid(&c.uuid).await? {
            // 400, as upstream answers it.
            Some(_) => Err(Error::Invalid(format!(
                "Cannot complete the requested action because chassis {} contains nodes.",
                c.uuid
            ))),
            None => Err(ch::not_found(&c.uuid)),
        }
    }

    pub async fn chassis_by_uuid(&self, uuid: &str) -> Result<Option<Chassis>, Error> {
        let sql = format!("SELECT {COLS} FROM chassis WHERE uuid = $1");
        let row = with_pool!(self, |p| sqlx::query_as::<_, Row>(sqlx::AssertSqlSafe(
            sql.as_str()
        ))
        .bind(uuid)
        .fetch_optional(p)
        .await)
        .map_err(|e| internal("reading a chassis", e))?;
        Ok(row.map(Chassis::from))
    }

    /// A page of chassis sorted by `sort_key` (then id), after `marker`.
    pub async fn chassis_list(
        &self,
        sort_key: &str,
        desc: bool,
        marker: Option<&Chassis>,
        limit: usize,
    ) -> Result<Vec<Chassis>, Error> {
        if !SORT_KEYS.contains(&sort_key) {
            return Err(Error::invalid(format!(
                "The sort_key value {sort_key} is an invalid field for sorting"
            )));
        }
        let (cmp, dir) = if desc { ("<", "DESC") } else { (">", "ASC") };
        // NULLs (description, updated_at) sort as empty text, first, on both backends.
        let key = match sort_key {
            "updated_at" | "description" => format!("COALESCE(CAST({sort_key} AS TEXT), '')"),
            k => k.to_string(),
        };
        let cond = match marker {
            None => String::new(),
            Some(_) => {
                let mk = format!("(SELECT {key} FROM chassis WHERE id = $1)");
                format!("WHERE ({key} {cmp} {mk} OR ({key} = {mk} AND id {cmp} $1))")
            }
        };
        let sql = format!(
            "SELECT {COLS} FROM chassis {cond} ORDER BY {key} {dir}, id {dir} LIMIT {limit}"
        );
        let rows = with_pool!(self, |p| {
            let mut q = sqlx::query_as::<_, Row>(sqlx::AssertSqlSafe(sql.as_str()));
            if let Some(m) = marker {
                q = q.bind(m.id);
            }
            q.fetch_all(p).await
        })
        .map_err(|e| internal("reading chassis", e))?;
        Ok(rows.into_iter().map(Chassis::from).collect())
    }
}
