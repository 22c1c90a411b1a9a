//! Deploy templates and their steps. A template and its steps are always written in one
//! transaction; reads load the steps of a whole page in one more query.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use ironic_model::deploy_template::{self as dt, DeployTemplate, TemplateStep};
use ironic_model::node::JsonObject;
use ironic_model::{Error, TemplateId, TemplateUuid};
use sqlx::types::Json;

use crate::{Db, internal, with_pool};

const COLS: &str = "id, uuid, name, extra, created_at, updated_at";

/// Sort keys of `GET /v1/deploy_templates` (not `extra`, `steps`).
pub const SORT_KEYS: &[&str] = &["id", "uuid", "name", "created_at", "updated_at"];

#[derive(sqlx::FromRow)]
struct Row {
    id: i64,
    uuid: String,
    name: String,
    extra: Json<JsonObject>,
    created_at: DateTime<Utc>,
    updated_at: Option<DateTime<Utc>>,
}

impl Row {
    fn into_template(self, steps: Vec<TemplateStep>) -> DeployTemplate {
        DeployTemplate {
            id: TemplateId(self.id),
            uuid: TemplateUuid::from_db(self.uuid),
            name: self.name,
            steps,
            extra: self.extra.0,
            created_at: self.created_at,
            updated_at: self.updated_at,
        }
    }
}

#[derive(sqlx::FromRow)]
struct StepRow {
    deploy_template_id: i64,
    interface: String,
    step: String,
    args: Json<JsonObject>,
    priority: i64,
}

fn write_error(e: sqlx::Error, t: &DeployTemplate) -> Error {
    if let sqlx::Error::Database(db) = &e
        && db.is_unique_violation()
    {
        let what = db
            .constraint()
            .map(str::to_owned)
            .unwrap_or_else(|| db.message().to_owned());
        if what.contains("name") {
            return Error::Conflict(format!(
                "A deploy template with name {} already exists.",
                t.name
            ));
        }
        return Error::Conflict(format!(
            "A deploy template with UUID {} already exists.",
            t.uuid
        ));
    }
    internal("writing a deploy template", e)
}

impl Db {
    /// Stores a template and its steps; 409 on a duplicate name or uuid.
    pub async fn deploy_template_create(
        &self,
        t: &DeployTemplate,
    ) -> Result<DeployTemplate, Error> {
        let res: Result<i64, sqlx::Error> = with_pool!(self, |p| {
            async {
            let mut tx = p.begin().await?;
            let (id,): (i64,) = sqlx::query_as(
                "INSERT INTO deploy_templates (uuid, name, extra, created_at, updated_at) \
                 VALUES ($1, $2, $3, $4, NULL) RETURNING id",
            )
            .bind(t.uuid.as_str())
            .bind(&t.name)
            .bind(Json(&t.extra))
            .bind(t.created_at)
            .fetch_one(&mut *tx)
            .await?;
            for s in &t.steps {
                sqlx::query(
                    "INSERT INTO deploy_template_steps (deploy_template_id, interface, step, args, priority) \
                     VALUES ($1, $2, $3, $4, $5)",
                )
                .bind(id)
                .bind(&s.interface)
                .bind(&s.step)
                .bind(Json(&s.args))
                .bind(i64::from(s.priority))
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
            Ok(id)
        }
        .await
        });
        let id = res.map_err(|e| write_error(e, t))?;
        self.deploy_template_by_id(TemplateId(id))
            .await?
            .ok_or_else(|| dt::not_found(&t.uuid))
    }

    /// Replaces a template's name, extra and steps (PATCH), in one transaction.
    pub async fn deploy_template_update(
        &self,
        t: &DeployTemplate,
    ) -> Result<DeployTemplate, Error> {
        let now = ironic_model::node::now();
        let res: Result<u64, sqlx::Error> = with_pool!(self, |p| {
            async {
            let mut tx = p.begin().await?;
            let n = sqlx::query(
                "UPDATE deploy_templates SET name = $1, extra = $2, updated_at = $3 WHERE id = $4",
            )
            .bind(&t.name)
            .bind(Json(&t.extra))
            .bind(now)
            .bind(t.id.0)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            sqlx::query("DELETE FROM deploy_template_steps WHERE deploy_template_id = $1")
                .bind(t.id.0)
                .execute(&mut *tx)
                .await?;
            for s in &t.steps {
                sqlx::query(
                    "INSERT INTO deploy_template_steps (deploy_template_id, interface, step, args, priority) \
                     VALUES ($1, $2, $3, $4, $5)",
                )
                .bind(t.id.0)
                .bind(&s.interface)
                .bind(&s.step)
                .bind(Json(&s.args))
                .bind(i64::from(s.priority))
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
            Ok(n)
        }
        .await
        });
        if res.map_err(|e| write_error(e, t))? != 1 {
            return Err(dt::not_found(&t.uuid));
        }
        self.deploy_template_by_id(t.id)
            .await?
            .ok_or_else(|| dt::not_found(&t.uuid))
    }

    /// Deletes a template (its steps go with it); 404 if it is gone.
    pub async fn deploy_template_destroy(&self, t: &DeployTemplate) -> Result<(), Error> {
        let res: Result<u64, sqlx::Error> = with_pool!(self, |p| async {
            let mut tx = p.begin().await?;
            sqlx::query("DELETE FROM deploy_template_steps WHERE deploy_template_id = $1")
                .bind(t.id.0)
                .execute(&mut *tx)
                .await?;
            let n = sqlx::query("DELETE FROM deploy_templates WHERE id = $1")
                .bind(t.id.0)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            tx.commit().await?;
            Ok(n)
        }
        .await);
        match res.map_err(|e| internal("deleting a deploy template", e))? {
            1 => Ok(()),
            _ => Err(dt::not_found(&t.uuid)),
        }
    }

    /// Rows matching `cond` (with text arguments), with their steps.
    async fn deploy_templates_where(
        &self,
        cond: &str,
        args: &[String],
    ) -> Result<Vec<DeployTemplate>, Error> {
        let sql = format!("SELECT {COLS} FROM deploy_templates {cond}");
        let rows = with_pool!(self, |p| {
            let mut q = sqlx::query_as::<_, Row>(sqlx::AssertSqlSafe(sql.as_str()));
            for a in args {
                q = q.bind(a);
            }
            q.fetch_all(p).await
        })
        .map_err(|e| internal("reading deploy templates", e))?;
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<String> = rows.iter().map(|r| r.id.to_string()).collect();
        let sql = format!(
            "SELECT deploy_template_id, interface, step, args, priority FROM deploy_template_steps \
             WHERE deploy_template_id IN ({}) ORDER BY deploy_template_id, id",
            ids.join(", ")
        );
        let steps = with_pool!(self, |p| sqlx::query_as::<_, StepRow>(sqlx::AssertSqlSafe(
            sql.as_str()
        ))
        .fetch_all(p)
        .await)
        .map_err(|e| internal("reading deploy template steps", e))?;
        let mut by_template: HashMap<i64, Vec<TemplateStep>> = HashMap::new();
        for s in steps {
            by_template
                .entry(s.deploy_template_id)
                .or_default()
                .push(TemplateStep {
                    interface: s.interface,
                    step: s.step,
                    args: s.args.0,
                    priority: u32::try_from(s.priority).unwrap_or(0),
                });
        }
        Ok(rows
            .into_iter()
            .map(|r| {
                let steps = by_template.remove(&r.id).unwrap_or_default();
                r.into_template(steps)
            })
            .collect())
    }

    async fn deploy_template_one(
        &self,
        cond: &str,
        arg: String,
    ) -> Result<Option<DeployTemplate>, Error> {
        Ok(self
            .deploy_templates_where(cond, &[arg])
            .await?
            .into_iter()
            .next())
    }

    pub async fn deploy_template_by_uuid(
        &self,
        uuid: &str,
    ) -> Result<Option<DeployTemplate>, Error> {
        self.deploy_template_one("WHERE uuid = $1", uuid.to_string())
            .await
    }

    pub async fn deploy_template_by_name(
        &self,
        name: &str,
    ) -> Result<Option<DeployTemplate>, Error> {
        self.deploy_template_one("WHERE name = $1", name.to_string())
            .await
    }

    async fn deploy_template_by_id(&self, id: TemplateId) -> Result<Option<DeployTemplate>, Error> {
        let id = id.0;
        self.deploy_template_one("WHERE id = CAST($1 AS BIGINT)", id.to_string())
            .await
    }

    /// The templates named (a node's instance traits), in name order.
    pub async fn deploy_templates_by_names(
        &self,
        names: &[String],
    ) -> Result<Vec<DeployTemplate>, Error> {
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let ps: Vec<String> = (1..=names.len()).map(|i| format!("${i}")).collect();
        let cond = format!("WHERE name IN ({}) ORDER BY name", ps.join(", "));
        self.deploy_templates_where(&cond, names).await
    }

    /// A page of templates sorted by `sort_key` (then id), after `marker`.
    pub async fn deploy_template_list(
        &self,
        sort_key: &str,
        desc: bool,
        marker: Option<&DeployTemplate>,
        limit: usize,
    ) -> Result<Vec<DeployTemplate>, Error> {
        let (cond, args) = self.deploy_template_list_cond(sort_key, desc, marker, limit)?;
        self.deploy_templates_where(&cond, &args).await
    }

    fn deploy_template_list_cond(
        &self,
        sort_key: &str,
        desc: bool,
        marker: Option<&DeployTemplate>,
        limit: usize,
    ) -> Result<(String, Vec<String>), Error> {
        let page = crate::keyset::page(
            self.backend(),
            "deploy_templates",
            SORT_KEYS,
            sort_key,
            desc,
            marker.map(|m| m.id.0),
            limit,
        )?;
        let (cond, args) = (page.tail(), page.args);
        Ok((cond, args))
    }

    /// PostgreSQL's plan for [`Db::deploy_template_list`]'s read of the templates (see
    /// [`Db::node_list_plan`]).
    pub async fn deploy_template_list_plan(
        &self,
        sort_key: &str,
        desc: bool,
        marker: Option<&DeployTemplate>,
        limit: usize,
    ) -> Result<serde_json::Value, Error> {
        let (cond, args) = self.deploy_template_list_cond(sort_key, desc, marker, limit)?;
        let sql = format!("SELECT id FROM deploy_templates {cond}");
        let args = args
            .into_iter()
            .map(|a| crate::nodes::Arg::Text(Some(a)))
            .collect();
        self.explain(&sql, args).await
    }
}
