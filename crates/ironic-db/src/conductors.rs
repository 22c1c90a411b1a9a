//! The conductor registry: registration, heartbeats, listing.

use chrono::{DateTime, Utc};
use ironic_model::{ConductorId, Error};
use sqlx::types::Json;

use crate::{Db, internal, with_pool};

/// A registered conductor.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct Conductor {
    #[sqlx(try_from = "i64")]
    pub id: ConductorId,
    pub hostname: String,
    pub conductor_group: String,
    #[sqlx(json)]
    pub drivers: Vec<String>,
    pub online: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: Option<DateTime<Utc>>,
}

impl Conductor {
    /// Heartbeat older than `timeout_secs`, whatever the online flag says: a stopping
    /// conductor is offline but keeps heartbeating while it finishes its work, and its
    /// locks must stay.
    pub fn is_dead(&self, now: DateTime<Utc>, timeout_secs: u64) -> bool {
        let last = self.updated_at.unwrap_or(self.created_at);
        now.signed_duration_since(last).num_seconds() >= timeout_secs as i64
    }

    /// Online and heartbeating within `timeout_secs`.
    pub fn is_alive(&self, now: DateTime<Utc>, timeout_secs: u64) -> bool {
        let last = self.updated_at.unwrap_or(self.created_at);
        self.online && now.signed_duration_since(last).num_seconds() < timeout_secs as i64
    }
}

const COLS: &str = "id, hostname, conductor_group, drivers, online, created_at, updated_at";

impl Db {
    /// Registers (or re-registers after a restart) a conductor as online.
    pub async fn conductor_register(
        &self,
        hostname: &str,
        group: &str,
        drivers: &[String],
    ) -> Result<Conductor, Error> {
        let now = ironic_model::node::now();
        let sql = format!(
            "INSERT INTO conductors (hostname, conductor_group, drivers, online, created_at, updated_at) \
             VALUES ($1, $2, $3, TRUE, $4, $4) \
             ON CONFLICT (hostname) DO UPDATE SET conductor_group = $2, drivers = $3, online = TRUE, updated_at = $4 \
             RETURNING {COLS}"
        );
        with_pool!(self, |p| sqlx::query_as::<_, Conductor>(
            sqlx::AssertSqlSafe(sql.as_str())
        )
        .bind(hostname)
        .bind(group)
        .bind(Json(drivers))
        .bind(now)
        .fetch_one(p)
        .await)
        .map_err(|e| internal("registering the conductor", e))
    }

    /// The row id of a conductor, creating its row (offline, so that nobody routes to
    /// it yet) on its very first start.
    pub async fn conductor_ensure(
        &self,
        hostname: &str,
        group: &str,
        drivers: &[String],
    ) -> Result<ConductorId, Error> {
        let now = ironic_model::node::now();
        let insert = "INSERT INTO conductors (hostname, conductor_group, drivers, online, created_at, updated_at) \
                      VALUES ($1, $2, $3, FALSE, $4, $4) ON CONFLICT (hostname) DO NOTHING";
        with_pool!(self, |p| sqlx::query(insert)
            .bind(hostname)
            .bind(group)
            .bind(Json(drivers))
            .bind(now)
            .execute(p)
            .await
            .map(|_| ()))
        .map_err(|e| internal("registering the conductor", e))?;
        Ok(self.conductor_get(hostname).await?.id)
    }

    /// Records a heartbeat; false if the conductor row is gone.
    pub async fn conductor_heartbeat(&self, hostname: &str) -> Result<bool, Error> {
        let sql = "UPDATE conductors SET updated_at = $1, online = TRUE WHERE hostname = $2";
        let now = ironic_model::node::now();
        let res = with_pool!(self, |p| sqlx::query(sql)
            .bind(now)
            .bind(hostname)
            .execute(p)
            .await
            .map(|r| r.rows_affected()))
        .map_err(|e| internal("recording a heartbeat", e))?;
        Ok(res == 1)
    }

    /// Sets `updated_at` (the heartbeat time) without touching `online`: a stopping
    /// conductor, already offline for routing, shows it is still alive while it
    /// finishes work under its locks (`at` = now). Tests pass a past instant to make a
    /// conductor dead without waiting.
    pub async fn conductor_touch(&self, hostname: &str, at: DateTime<Utc>) -> Result<(), Error> {
        let sql = "UPDATE conductors SET updated_at = $1 WHERE hostname = $2";
        with_pool!(self, |p| sqlx::query(sql)
            .bind(at)
            .bind(hostname)
            .execute(p)
            .await
            .map(|r| r.rows_affected()))
        .map_err(|e| internal("recording a heartbeat", e))?;
        Ok(())
    }

    /// Marks a conductor offline (graceful stop).
    pub async fn conductor_unregister(&self, hostname: &str) -> Result<(), Error> {
        let sql = "UPDATE conductors SET online = FALSE WHERE hostname = $1";
        with_pool!(self, |p| sqlx::query(sql)
            .bind(hostname)
            .execute(p)
            .await
            .map(|r| r.rows_affected()))
        .map_err(|e| internal("unregistering the conductor", e))?;
        Ok(())
    }

    pub async fn conductor_list(&self) -> Result<Vec<Conductor>, Error> {
        let sql = format!("SELECT {COLS} FROM conductors ORDER BY id");
        with_pool!(self, |p| sqlx::query_as::<_, Conductor>(
            sqlx::AssertSqlSafe(sql.as_str())
        )
        .fetch_all(p)
        .await)
        .map_err(|e| internal("listing conductors", e))
    }

    pub async fn conductor_get(&self, hostname: &str) -> Result<Conductor, Error> {
        let sql = format!("SELECT {COLS} FROM conductors WHERE hostname = $1");
        with_pool!(self, |p| sqlx::query_as::<_, Conductor>(
            sqlx::AssertSqlSafe(sql.as_str())
        )
        .bind(hostname)
        .fetch_optional(p)
        .await)
        .map_err(|e| internal("reading a conductor", e))?
        .ok_or_else(|| Error::NotFound(format!("Conductor {hostname} could not be found.")))
    }
}
