//! A conductor's heartbeat, and on PostgreSQL its **presence**: the heartbeat runs on a
//! database session of its own that also holds a session advisory lock (class
//! [`PRESENCE_CLASS`], key = the conductor's row id). The lock lives exactly as long as
//! the session, so every other process sees at once, in `pg_locks`, that a conductor's
//! process is gone ([`crate::Conductor::present`]) instead of waiting for its heartbeat to
//! time out. The session asks the server for short TCP keepalives, so a vanished host
//! ends it within seconds too.
//!
//! Its own session also keeps the heartbeat independent of the shared pool: a conductor
//! whose pool is exhausted by work still heartbeats. Every step is bounded by a timeout;
//! a session that fails is dropped and opened again at the next beat.

use std::time::Duration;

use ironic_model::{ConductorId, Error};
use sqlx::{Connection, PgConnection};

use crate::{Db, Pool, internal};

/// The first key of the presence lock (`pg_advisory_lock(7181, <conductor id>)`).
pub const PRESENCE_CLASS: i32 = 7181;

/// Server-side TCP keepalive of the heartbeat session: probes after 2 s of silence, one
/// per second, 3 unanswered end it (a vanished host loses its presence in about 5 s).
const KEEPALIVE: &str = "SET tcp_keepalives_idle = 2; SET tcp_keepalives_interval = 1; \
                         SET tcp_keepalives_count = 3; SET tcp_user_timeout = 5000";

/// One conductor's heartbeat (see the module documentation).
pub struct Heartbeat {
    db: Db,
    host: String,
    id: ConductorId,
    /// Bound of each database step.
    step_timeout: Duration,
    session: Option<PgConnection>,
    /// Whether `session` holds the presence lock.
    present: bool,
}

impl Db {
    /// The heartbeat of conductor `host` (row `id`); each database step is bounded by
    /// `step_timeout`.
    pub fn heartbeat(&self, host: &str, id: ConductorId, step_timeout: Duration) -> Heartbeat {
        Heartbeat {
            db: self.clone(),
            host: host.to_string(),
            id,
            step_timeout,
            session: None,
            present: false,
        }
    }
}

impl Heartbeat {
    /// Records a heartbeat (and marks the conductor online). Returns false if the
    /// conductor's row is gone.
    pub async fn beat(&mut self) -> Result<bool, Error> {
        let Pool::Postgres(pool) = &self.db.pool else {
            return self.db.conductor_heartbeat(&self.host).await;
        };
        if self.session.is_none() {
            let opts = pool.connect_options();
            let mut c = self
                .bounded(
                    "opening the heartbeat session",
                    PgConnection::connect_with(&opts),
                )
                .await?;
            self.bounded(
                "configuring the heartbeat session",
                sqlx::raw_sql(KEEPALIVE).execute(&mut c),
            )
            .await?;
            self.session = Some(c);
            self.present = false;
        }
        let res = self.beat_on_session().await;
        if res.is_err() {
            // Closed by dropping; the next beat opens a new one.
            self.session = None;
            self.present = false;
        }
        res
    }

    async fn beat_on_session(&mut self) -> Result<bool, Error> {
        let (step, host) = (self.step_timeout, self.host.clone());
        let key = i32::try_from(self.id.0)
            .map_err(|e| Error::internal_from("conductor id out of range", e))?;
        let Some(c) = self.session.as_mut() else {
            return Err(Error::Unavailable("no heartbeat session".into()));
        };
        if !self.present {
            let got: bool = bounded(
                step,
                "taking the presence lock",
                sqlx::query_scalar("SELECT pg_try_advisory_lock($1, $2)")
                    .bind(PRESENCE_CLASS)
                    .bind(key)
                    .fetch_one(&mut *c),
            )
            .await?;
            if got {
                self.present = true;
            } else {
                // An earlier session of this conductor that the server has not closed
                // yet (its host vanished and came back): shows presence meanwhile.
                tracing::debug!(host, "presence lock still held by an earlier session");
            }
        }
        let sql = "UPDATE conductors SET updated_at = $1, online = TRUE WHERE hostname = $2";
        let n = bounded(
            step,
            "recording a heartbeat",
            sqlx::query(sql)
                .bind(ironic_model::node::now())
                .bind(&host)
                .execute(&mut *c),
        )
        .await?
        .rows_affected();
        Ok(n == 1)
    }

    /// Ends the session (its presence with it).
    pub async fn close(&mut self) {
        if let Some(c) = self.session.take() {
            let _ = tokio::time::timeout(self.step_timeout, c.close()).await;
        }
        self.present = false;
    }

    async fn bounded<T>(
        &self,
        what: &str,
        f: impl Future<Output = Result<T, sqlx::Error>>,
    ) -> Result<T, Error> {
        bounded(self.step_timeout, what, f).await
    }
}

async fn bounded<T>(
    limit: Duration,
    what: &str,
    f: impl Future<Output = Result<T, sqlx::Error>>,
) -> Result<T, Error> {
    match tokio::time::timeout(limit, f).await {
        Ok(r) => r.map_err(|e| internal(what, e)),
        Err(_) => Err(Error::Unavailable(format!(
            "the database did not answer within {} ms while {what}",
            limit.as_millis()
        ))),
    }
}
