//! The conductor registry: registration, heartbeats, listing, and the verdict on
//! whether a conductor is alive ([`Liveness`]).

use std::time::Duration;

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
    /// Whether the conductor's process holds its database session (PostgreSQL: the
    /// session of its heartbeat, see [`crate::heartbeat`]); `None` where the backend
    /// cannot tell (SQLite). A session ends the moment its process dies (`kill -9`: the
    /// kernel closes the socket) or, when its host vanishes, once the server's TCP
    /// keepalive gives up on it (about 5 s).
    #[sqlx(default)]
    pub present: Option<bool>,
    /// How many times the conductor has started ([`Db::conductor_new_incarnation`]):
    /// a call taken by an earlier run is lost once a later run shows up, however
    /// quickly the host restarted.
    pub incarnation: i64,
}

/// When a conductor counts as dead. Two rules, either suffices:
///
/// - **gone**: its database session is gone ([`Conductor::present`] is `Some(false)`)
///   and its last heartbeat is older than `grace`: the process died or its host
///   vanished. `grace` lets a live conductor whose session merely broke (a database
///   restart) connect again first.
/// - **silent**: its last heartbeat is older than `timeout`, whatever the session says
///   (a process that is wedged but still connected; SQLite, where sessions are not
///   visible).
///
/// A conductor that is only slow keeps its session, so only the second rule applies to
/// it: it must miss `timeout / interval` heartbeats in a row to be declared dead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Liveness {
    pub timeout: Duration,
    pub grace: Duration,
}

impl Liveness {
    /// From `[conductor] heartbeat_interval` and `heartbeat_timeout` (seconds): `grace`
    /// is three heartbeat intervals, at least 2 s and at most the timeout.
    pub fn new(interval_secs: u64, timeout_secs: u64) -> Liveness {
        let timeout = Duration::from_secs(timeout_secs.max(1));
        let grace = Duration::from_secs(interval_secs.saturating_mul(3).max(2)).min(timeout);
        Liveness { timeout, grace }
    }
}

impl Conductor {
    /// How long ago its last heartbeat was, as `now` sees it.
    pub fn silence(&self, now: DateTime<Utc>) -> Duration {
        let last = self.updated_at.unwrap_or(self.created_at);
        now.signed_duration_since(last)
            .to_std()
            .unwrap_or(Duration::ZERO)
    }

    /// Dead by one of the rules of [`Liveness`], whatever the online flag says: a
    /// stopping conductor is offline but keeps heartbeating while it finishes its work,
    /// and its locks must stay.
    pub fn is_dead(&self, now: DateTime<Utc>, l: &Liveness) -> bool {
        let silence = self.silence(now);
        silence >= l.timeout || (self.present == Some(false) && silence >= l.grace)
    }

    /// Online and not dead.
    pub fn is_alive(&self, now: DateTime<Utc>, l: &Liveness) -> bool {
        self.online && !self.is_dead(now, l)
    }
}

const COLS: &str =
    "id, hostname, conductor_group, drivers, online, created_at, updated_at, incarnation";

/// PostgreSQL: [`COLS`] and whether the conductor's heartbeat session holds its
/// presence lock (a session advisory lock, see [`crate::heartbeat`]).
const PG_COLS: &str = "id, hostname, conductor_group, drivers, online, created_at, updated_at, incarnation, \
    EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted \
        AND l.classid = 7181 AND l.objsubid = 2 AND l.objid = conductors.id::oid \
        AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())) \
    AS present";

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

    /// Starts a new run of the conductor `hostname` (its row must exist, see
    /// [`Db::conductor_ensure`]) and returns its incarnation, which the run names in
    /// every call it takes. Called once per process, before it serves.
    pub async fn conductor_new_incarnation(&self, hostname: &str) -> Result<i64, Error> {
        let sql = "UPDATE conductors SET incarnation = incarnation + 1 WHERE hostname = $1 \
                   RETURNING incarnation";
        with_pool!(self, |p| sqlx::query_scalar::<_, i64>(sql)
            .bind(hostname)
            .fetch_optional(p)
            .await)
        .map_err(|e| internal("registering the conductor", e))?
        .ok_or_else(|| Error::NotFound(format!("Conductor {hostname} could not be found.")))
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
        let cols = match self.backend() {
            crate::Backend::Postgres => PG_COLS,
            crate::Backend::Sqlite => COLS,
        };
        let sql = format!("SELECT {cols} FROM conductors ORDER BY id");
        with_pool!(self, |p| sqlx::query_as::<_, Conductor>(
            sqlx::AssertSqlSafe(sql.as_str())
        )
        .fetch_all(p)
        .await)
        .map_err(|e| internal("listing conductors", e))
    }

    pub async fn conductor_get(&self, hostname: &str) -> Result<Conductor, Error> {
        let cols = match self.backend() {
            crate::Backend::Postgres => PG_COLS,
            crate::Backend::Sqlite => COLS,
        };
        let sql = format!("SELECT {cols} FROM conductors WHERE hostname = $1");
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
