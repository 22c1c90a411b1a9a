//! A node's firmware components (1.86): written when its firmware interface reports
//! them (after an inspection), read by `GET /v1/nodes/{node}/firmware`.

use chrono::{DateTime, Utc};
use ironic_model::Error;
use ironic_model::firmware::{FirmwareComponent, Reported};

use crate::{Db, internal, with_pool};

#[derive(sqlx::FromRow)]
struct Row {
    component: String,
    initial_version: String,
    current_version: Option<String>,
    last_version_flashed: Option<String>,
    vendor: Option<String>,
    model: Option<String>,
    serial_number: Option<String>,
    created_at: DateTime<Utc>,
    updated_at: Option<DateTime<Utc>>,
}

impl Db {
    /// Records what the hardware reports: a new component keeps its version as its
    /// `initial_version`; a known one gets its current version and identity updated.
    pub async fn firmware_cache(&self, node_id: i64, reported: &[Reported]) -> Result<(), Error> {
        let sql = "INSERT INTO firmware_information (node_id, component, initial_version, \
                   current_version, vendor, model, serial_number, created_at) \
                   VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
                   ON CONFLICT (node_id, component) DO UPDATE SET \
                   current_version = excluded.current_version, vendor = excluded.vendor, \
                   model = excluded.model, serial_number = excluded.serial_number, \
                   updated_at = excluded.created_at";
        let now = ironic_model::node::now();
        for r in reported {
            with_pool!(self, |p| sqlx::query(sql)
                .bind(node_id)
                .bind(&r.component)
                .bind(r.current_version.as_deref().unwrap_or(""))
                .bind(&r.current_version)
                .bind(&r.vendor)
                .bind(&r.model)
                .bind(&r.serial_number)
                .bind(now)
                .execute(p)
                .await
                .map(|_| ()))
            .map_err(|e| internal("writing firmware components", e))?;
        }
        Ok(())
    }

    /// The node's components, by name.
    pub async fn firmware_list(&self, node_id: i64) -> Result<Vec<FirmwareComponent>, Error> {
        let sql = "SELECT component, initial_version, current_version, last_version_flashed, \
                   vendor, model, serial_number, created_at, updated_at \
                   FROM firmware_information WHERE node_id = $1 ORDER BY component";
        let rows: Vec<Row> = with_pool!(self, |p| sqlx::query_as(sql)
            .bind(node_id)
            .fetch_all(p)
            .await)
        .map_err(|e| internal("reading firmware components", e))?;
        Ok(rows
            .into_iter()
            .map(|r| FirmwareComponent {
                component: r.component,
                initial_version: r.initial_version,
                current_version: r.current_version,
                last_version_flashed: r.last_version_flashed,
                vendor: r.vendor,
                model: r.model,
                serial_number: r.serial_number,
                created_at: r.created_at,
                updated_at: r.updated_at,
            })
            .collect())
    }
}
