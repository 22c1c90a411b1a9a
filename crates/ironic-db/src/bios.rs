//! A node's BIOS settings (1.40): written when its bios interface reads them from the
//! hardware (verification, and after a BIOS step), read by `GET /v1/nodes/{node}/bios`.

use chrono::{DateTime, Utc};
use ironic_model::Error;

use crate::{Db, internal, with_pool};

/// One stored setting.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct BiosSetting {
    pub name: String,
    pub value: Option<String>,
    pub created_at: DateTime<Utc>,
    /// When its value last changed.
    pub updated_at: Option<DateTime<Utc>>,
}

impl Db {
    /// Records the settings the hardware reports: new ones are added, changed values
    /// updated (with `updated_at`), settings it no longer reports removed.
    pub async fn bios_cache(
        &self,
        node_id: i64,
        reported: &[(String, Option<String>)],
    ) -> Result<(), Error> {
        let upsert = "INSERT INTO bios_settings (node_id, name, value, created_at) \
                      VALUES ($1, $2, $3, $4) ON CONFLICT (node_id, name) DO UPDATE SET \
                      value = excluded.value, updated_at = excluded.created_at \
                      WHERE bios_settings.value IS DISTINCT FROM excluded.value";
        let now = ironic_model::node::now();
        for (name, value) in reported {
            with_pool!(self, |p| sqlx::query(upsert)
                .bind(node_id)
                .bind(name)
                .bind(value)
                .bind(now)
                .execute(p)
                .await
                .map(|_| ()))
            .map_err(|e| internal("writing BIOS settings", e))?;
        }
        let known: Vec<String> = with_pool!(self, |p| sqlx::query_scalar(
            "SELECT name FROM bios_settings WHERE node_id = $1"
        )
        .bind(node_id)
        .fetch_all(p)
        .await)
        .map_err(|e| internal("reading BIOS settings", e))?;
        for gone in known
            .iter()
            .filter(|k| !reported.iter().any(|(n, _)| n == *k))
        {
            with_pool!(self, |p| sqlx::query(
                "DELETE FROM bios_settings WHERE node_id = $1 AND name = $2"
            )
            .bind(node_id)
            .bind(gone)
            .execute(p)
            .await
            .map(|_| ()))
            .map_err(|e| internal("removing a BIOS setting", e))?;
        }
        Ok(())
    }

    /// The node's settings, by name.
    pub async fn bios_list(&self, node_id: i64) -> Result<Vec<BiosSetting>, Error> {
        let sql = "SELECT name, value, created_at, updated_at FROM bios_settings \
                   WHERE node_id = $1 ORDER BY name";
        with_pool!(self, |p| sqlx::query_as(sql)
            .bind(node_id)
            .fetch_all(p)
            .await)
        .map_err(|e| internal("reading BIOS settings", e))
    }
}
