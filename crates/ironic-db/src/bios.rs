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
    /// Records the settings the hardware reports, in one transaction: new ones are
    /// added, changed values updated (with `updated_at`), settings it no longer reports
    /// removed. A name longer than the column (255) is left out, and NUL characters,
    /// which PostgreSQL text refuses, are dropped from values: what a BMC reports
    /// cannot fail the whole cache.
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
        let settings: Vec<(&str, Option<String>)> = reported
            .iter()
            .filter(|(name, _)| !name.is_empty() && name.len() <= 255 && !name.contains('\0'))
            .map(|(name, value)| (name.as_str(), value.as_ref().map(|v| v.replace('\0', ""))))
            .collect();
        let res: Result<(), sqlx::Error> = with_pool!(self, |p| {
            async {
                let mut tx = p.begin().await?;
                for (name, value) in &settings {
                    sqlx::query(upsert)
                        .bind(node_id)
                        .bind(*name)
                        .bind(value)
                        .bind(now)
                        .execute(&mut *tx)
                        .await?;
                }
                let known: Vec<String> =
                    sqlx::query_scalar("SELECT name FROM bios_settings WHERE node_id = $1")
                        .bind(node_id)
                        .fetch_all(&mut *tx)
                        .await?;
                for gone in known
                    .iter()
                    .filter(|k| !settings.iter().any(|(n, _)| n == *k))
                {
                    sqlx::query("DELETE FROM bios_settings WHERE node_id = $1 AND name = $2")
                        .bind(node_id)
                        .bind(gone)
                        .execute(&mut *tx)
                        .await?;
                }
                tx.commit().await
            }
            .await
        });
        res.map_err(|e| internal("writing BIOS settings", e))
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
