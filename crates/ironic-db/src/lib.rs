//! The node store: one API over PostgreSQL (split deployment) and SQLite (all-in-one).
//!
//! Every query is written once with `$n` placeholders, which both backends accept, and
//! runs against whichever pool [`Db`] holds (see [`with_pool!`]). One module per resource.
//!
//! Architecture invariant: this crate knows neither HTTP nor AMQP; it returns domain
//! types and domain errors.

use std::str::FromStr;
use std::time::Duration;

use ironic_model::Error;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

pub mod allocations;
pub mod bios;
pub mod chassis;
pub mod conductors;
pub mod deploy_templates;
pub mod firmware;
pub mod heartbeat;
pub mod history;
pub mod inspection_rules;
pub mod inventory;
mod keyset;
pub mod nodes;
pub mod ports;
pub mod runbooks;
#[cfg(feature = "testing")]
pub mod testing;
pub mod topology;
pub mod volume;

pub use conductors::{Conductor, Liveness};
pub use nodes::{NodeFilter, NodeListQuery, NodeState, is_sort_key};

/// Which database a [`Db`] talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Postgres,
    Sqlite,
}

#[derive(Debug, Clone)]
pub(crate) enum Pool {
    Postgres(PgPool),
    Sqlite(SqlitePool),
}

/// A handle on the database; cheap to clone.
#[derive(Debug, Clone)]
pub struct Db {
    pub(crate) pool: Pool,
}

/// Runs `$body` with `$p` bound to the backend's pool. The body is compiled once per
/// backend, so it must only use what both offer.
macro_rules! with_pool {
    ($db:expr, |$p:ident| $body:expr) => {
        match &$db.pool {
            $crate::Pool::Postgres($p) => $body,
            $crate::Pool::Sqlite($p) => $body,
        }
    };
}
pub(crate) use with_pool;

/// Options for [`Db::connect`].
#[derive(Debug, Clone)]
pub struct DbOptions {
    pub max_connections: u32,
    /// Create the SQLite file (and its directory) if missing.
    pub create: bool,
    /// How long a query waits for a free pool connection before failing.
    pub acquire_timeout: Duration,
    /// PostgreSQL: how long one statement may run (`statement_timeout`), so that a
    /// stuck query cannot hold a connection (and what waits on it) for ever.
    pub statement_timeout: Option<Duration>,
}

impl Default for DbOptions {
    fn default() -> Self {
        DbOptions {
            max_connections: 16,
            create: true,
            acquire_timeout: Duration::from_secs(10),
            statement_timeout: Some(Duration::from_secs(30)),
        }
    }
}

/// Logs an infrastructure failure once, with its chain, and hides it from users.
pub(crate) fn internal(context: &str, e: sqlx::Error) -> Error {
    // PostgreSQL refuses NUL in text (22021) and in JSON (22P05): the input's fault.
    if let sqlx::Error::Database(db) = &e
        && matches!(db.code().as_deref(), Some("22021" | "22P05"))
    {
        return Error::invalid("Text must not contain NUL characters.");
    }
    metrics::counter!("ironic_db_errors_total", "context" => context.to_string()).increment(1);
    if unreachable(&e) {
        tracing::warn!(error = %e, "database unavailable while {context}");
        return Error::Unavailable(if never_sent(&e) {
            format!("The database is unavailable ({context}); nothing was changed. Please retry.")
        } else {
            // The connection broke under a statement: a write may have been committed
            // just before, and only reading it back tells.
            format!(
                "The database is unavailable ({context}); if the request changes something, the change may or may not have been saved: read it back before retrying."
            )
        });
    }
    // Kept as the source: whoever handles the error logs the chain, once.
    Error::internal_from(format!("database error while {context}"), e)
}

/// Why a readiness round trip ([`Db::ping`]) failed; its chain
/// (`ironic_model::error::chain`) is what `/readyz` says.
#[derive(Debug, thiserror::Error)]
pub enum PingError {
    #[error("database error")]
    Failed(#[source] sqlx::Error),
    #[error("the database did not answer within {} ms", .0.as_millis())]
    Timeout(Duration),
}

/// A failed start-up connection, with its cause (refused, TLS, authentication, ...): what
/// the operator needs to mend it. Only start-up paths (`Db::connect`) use it.
fn connect_error(what: &str, e: sqlx::Error) -> Error {
    metrics::counter!("ironic_db_errors_total", "context" => "connecting").increment(1);
    if unreachable(&e) {
        Error::Unavailable(format!("cannot connect to {what}: {e}"))
    } else {
        Error::internal_from(format!("cannot connect to {what}"), e)
    }
}

/// An [`unreachable`] error that came before any statement reached the server: no
/// connection could be had (pool exhausted or closed, the server refusing sessions).
fn never_sent(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed => true,
        // Too many connections, cannot connect now, connection refused or rejected.
        sqlx::Error::Database(db) => db
            .code()
            .is_some_and(|c| matches!(c.as_ref(), "53300" | "57P03" | "08001" | "08004")),
        _ => false,
    }
}

/// Whether `e` says the database could not be reached or gave up (rather than refused
/// the query): the caller gets 503, worth a retry, not 500.
fn unreachable(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Protocol(_) => true,
        // Connection exceptions (08), a cancelled statement (57014: statement_timeout),
        // the server shutting down (57P01..57P03), too many connections (53300).
        sqlx::Error::Database(db) => db
            .code()
            .is_some_and(|c| c.starts_with("08") || c.starts_with("57") || c == "53300"),
        _ => false,
    }
}

/// How long a pooled PostgreSQL connection may sit idle before it is checked with a
/// round trip on its next use.
const PING_AFTER_IDLE: Duration = Duration::from_secs(1);

impl Db {
    /// Connects to `sqlite://PATH` (or `sqlite::memory:`) or `postgres://...`.
    pub async fn connect(url: &str, opts: &DbOptions) -> Result<Db, Error> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let mut co = PgConnectOptions::from_str(url)
                .map_err(|e| Error::internal_from("invalid database url", e))?;
            if let Some(t) = opts.statement_timeout.filter(|t| !t.is_zero()) {
                co = co.options([("statement_timeout", t.as_millis().to_string())]);
            }
            let pool = PgPoolOptions::new()
                .max_connections(opts.max_connections.max(1))
                .acquire_timeout(opts.acquire_timeout)
                // A connection is checked with a round trip before use only when it sat
                // idle for over a second (PostgreSQL or the network may have dropped
                // it). Checked before every use (sqlx's default), the check was a second
                // round trip on every request's path: 14% of the API's CPU on a page of
                // allocations (perf at 100,000 nodes, docs/scale.md). sqlx still checks
                // a connection when it goes back to the pool, off the request's path, so
                // one idle for less than a second passed a check that long ago. A
                // connection that breaks within that second fails its next statement
                // with a connection error (once per pooled connection): `unreachable`
                // names it, the API answers 503; a conductor's work fails as on any
                // database error.
                .test_before_acquire(false)
                .before_acquire(|conn, meta| {
                    Box::pin(async move {
                        if meta.idle_for > PING_AFTER_IDLE {
                            sqlx::Connection::ping(conn).await?;
                        }
                        Ok(true)
                    })
                })
                .connect_with(co)
                .await
                .map_err(|e| connect_error("PostgreSQL", e))?;
            Ok(Db {
                pool: Pool::Postgres(pool),
            })
        } else if let Some(rest) = url.strip_prefix("sqlite:") {
            let path = rest.trim_start_matches("//");
            if opts.create
                && path != ":memory:"
                && let Some(dir) = std::path::Path::new(path).parent()
                && !dir.as_os_str().is_empty()
            {
                std::fs::create_dir_all(dir).map_err(|e| {
                    Error::internal_from(format!("cannot create {}", dir.display()), e)
                })?;
            }
            let co = SqliteConnectOptions::new()
                .filename(path)
                .create_if_missing(opts.create)
                .journal_mode(SqliteJournalMode::Wal)
                .synchronous(SqliteSynchronous::Full)
                .foreign_keys(true)
                .busy_timeout(Duration::from_secs(10));
            let pool = SqlitePoolOptions::new()
                .max_connections(opts.max_connections.max(1))
                .acquire_timeout(opts.acquire_timeout)
                .min_connections(1)
                .connect_with(co)
                .await
                .map_err(|e| connect_error("the SQLite database", e))?;
            Ok(Db {
                pool: Pool::Sqlite(pool),
            })
        } else {
            Err(Error::internal(format!(
                "unsupported database url {url:?}: use sqlite://PATH or postgres://..."
            )))
        }
    }

    pub fn backend(&self) -> Backend {
        match self.pool {
            Pool::Postgres(_) => Backend::Postgres,
            Pool::Sqlite(_) => Backend::Sqlite,
        }
    }

    /// Applies every pending migration of this backend (`migrations/<backend>/`).
    pub async fn migrate(&self) -> Result<(), Error> {
        let res = match &self.pool {
            Pool::Postgres(p) => sqlx::migrate!("../../migrations/postgres").run(p).await,
            Pool::Sqlite(p) => sqlx::migrate!("../../migrations/sqlite").run(p).await,
        };
        res.map_err(|e| Error::internal_from("database migration failed", e))
    }

    /// The newest migration this build carries.
    pub fn latest_schema_version(&self) -> i64 {
        let m = match &self.pool {
            Pool::Postgres(_) => sqlx::migrate!("../../migrations/postgres"),
            Pool::Sqlite(_) => sqlx::migrate!("../../migrations/sqlite"),
        };
        m.iter().map(|m| m.version).max().unwrap_or(0)
    }

    /// Refuses to serve on a schema older than this build (split deployment: the
    /// operator runs `ironic-dbsync upgrade` first).
    pub async fn check_schema(&self) -> Result<(), Error> {
        let have = self.schema_version().await.unwrap_or(None).unwrap_or(0);
        let want = self.latest_schema_version();
        if have < want {
            return Err(Error::Unavailable(format!(
                "the database schema is at version {have}, this build needs {want}: run `ironic-dbsync upgrade`"
            )));
        }
        Ok(())
    }

    /// The newest migration applied, if any.
    pub async fn schema_version(&self) -> Result<Option<i64>, Error> {
        let sql = "SELECT MAX(version) FROM _sqlx_migrations WHERE success";
        with_pool!(self, |p| sqlx::query_scalar::<_, Option<i64>>(sql)
            .fetch_one(p)
            .await)
        .map_err(|e| internal("reading the schema version", e))
    }

    /// The deployment's identity, written once by the migrations (`ironic-dbsync
    /// upgrade`). Processes of one deployment share it; the message bus carries it so
    /// that deployments sharing a RabbitMQ vhost never take each other's calls.
    pub async fn cluster_id(&self) -> Result<String, Error> {
        let sql = "SELECT cluster_id FROM cluster";
        with_pool!(self, |p| sqlx::query_scalar::<_, String>(sql)
            .fetch_optional(p)
            .await)
        .map_err(|e| internal("reading the cluster id", e))?
        .ok_or_else(|| {
            Error::Unavailable("the database has no cluster id: run `ironic-dbsync upgrade`".into())
        })
    }

    /// The deployment's secret for signing messages on the bus (`docs/rpc.md`,
    /// "Signatures"), written once by the migrations (0022) as 64 random hex digits.
    /// Used when `[amqp] signing_key_file` is not set: every process of the deployment
    /// shares the database, so it needs no configuration, and a party that reaches only
    /// the broker cannot sign.
    pub async fn bus_signing_key(&self) -> Result<String, Error> {
        let sql = "SELECT bus_signing_key FROM cluster";
        let key = with_pool!(self, |p| sqlx::query_scalar::<_, String>(sql)
            .fetch_optional(p)
            .await)
        .map_err(|e| internal("reading the bus signing key", e))?
        .unwrap_or_default();
        if key.len() < 32 {
            return Err(Error::Unavailable(
                "the database has no bus signing key: run `ironic-dbsync upgrade`".into(),
            ));
        }
        Ok(key)
    }

    /// A round trip to the database (`SELECT 1`), bounded by `within`: what readiness
    /// checks ask.
    pub async fn ping(&self, within: Duration) -> Result<(), PingError> {
        let q = async {
            with_pool!(self, |p| sqlx::query_scalar::<_, i32>("SELECT 1")
                .fetch_one(p)
                .await)
        };
        match tokio::time::timeout(within, q).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(PingError::Failed(e)),
            Err(_) => Err(PingError::Timeout(within)),
        }
    }

    /// Whether this process's database connections are encrypted: `Some(true)` when a
    /// PostgreSQL session uses TLS (`sslmode=require`, `verify-ca`, `verify-full` in the
    /// URL), `None` on SQLite (a local file).
    pub async fn tls_in_use(&self) -> Result<Option<bool>, Error> {
        match &self.pool {
            Pool::Postgres(p) => sqlx::query_scalar::<_, bool>(
                "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            )
            .fetch_one(p)
            .await
            .map(Some)
            .map_err(|e| internal("reading the session's TLS state", e)),
            Pool::Sqlite(_) => Ok(None),
        }
    }

    /// Pool connections: (open, idle, max).
    pub fn pool_stats(&self) -> (u32, usize, u32) {
        with_pool!(self, |p| (
            p.size(),
            p.num_idle(),
            p.options().get_max_connections()
        ))
    }

    pub async fn close(&self) {
        with_pool!(self, |p| p.close().await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The 503 says whether anything may have been saved: nothing when no connection
    /// could be had, "may or may not" when one broke under a statement.
    #[test]
    fn unreachable_database_errors_say_what_may_have_been_saved() {
        let Error::Unavailable(m) = internal("saving a node", sqlx::Error::PoolTimedOut) else {
            panic!("503 expected");
        };
        assert!(
            m.starts_with("The database is unavailable (saving a node)"),
            "{m}"
        );
        assert!(m.contains("nothing was changed"), "{m}");
        let broken = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        let Error::Unavailable(m) = internal("saving a node", sqlx::Error::Io(broken)) else {
            panic!("503 expected");
        };
        assert!(m.contains("may or may not have been saved"), "{m}");
        assert!(!m.contains("nothing was changed"), "{m}");
        // A refused query is not an outage.
        let Error::Internal(_) = internal("saving a node", sqlx::Error::RowNotFound) else {
            panic!("500 expected");
        };
    }
}
