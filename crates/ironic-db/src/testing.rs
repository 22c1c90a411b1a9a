//! Fresh databases for tests: a new SQLite file, or a new PostgreSQL database on the
//! server named by `IRONIC_TEST_POSTGRES` (default `postgres://postgres@127.0.0.1:5432/postgres`),
//! so that tests run in parallel without seeing each other.

use ironic_model::Error;
use sqlx::Connection;

use crate::{Db, DbOptions};

/// The admin URL of the PostgreSQL server tests use.
pub fn postgres_admin_url() -> String {
    std::env::var("IRONIC_TEST_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_string())
}

/// A database that exists for one test.
pub struct TestDb {
    pub url: String,
    pub db: Db,
    pg_name: Option<String>,
    dir: Option<std::path::PathBuf>,
}

fn unique() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..16].to_string()
}

impl TestDb {
    /// A migrated SQLite database in a fresh temporary directory.
    pub async fn sqlite() -> Result<TestDb, Error> {
        let dir = std::env::temp_dir().join(format!("ironic-test-{}", unique()));
        let url = format!("sqlite://{}/ironic.sqlite", dir.display());
        let db = Db::connect(&url, &DbOptions::default()).await?;
        db.migrate().await?;
        Ok(TestDb {
            url,
            db,
            pg_name: None,
            dir: Some(dir),
        })
    }

    /// A migrated, empty PostgreSQL database of its own.
    pub async fn postgres() -> Result<TestDb, Error> {
        let admin = postgres_admin_url();
        let name = format!("ironic_test_{}", unique());
        let mut conn = sqlx::PgConnection::connect(&admin)
            .await
            .map_err(|e| Error::internal_from(format!("cannot reach PostgreSQL at {admin}"), e))?;
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut conn)
            .await
            .map_err(|e| Error::internal_from(format!("cannot create database {name}"), e))?;
        let _ = conn.close().await;
        let base = admin.rsplit_once('/').map_or(admin.as_str(), |(b, _)| b);
        let url = format!("{base}/{name}");
        let db = Db::connect(
            &url,
            &DbOptions {
                max_connections: 8,
                create: false,
                ..Default::default()
            },
        )
        .await?;
        db.migrate().await?;
        Ok(TestDb {
            url,
            db,
            pg_name: Some(name),
            dir: None,
        })
    }

    /// Closes the pool and drops the database (best effort).
    pub async fn cleanup(mut self) {
        self.db.close().await;
        if let Some(name) = self.pg_name.take() {
            drop_database(&name).await;
        }
        if let Some(dir) = self.dir.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

async fn drop_database(name: &str) {
    if let Ok(mut conn) = sqlx::PgConnection::connect(&postgres_admin_url()).await {
        let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
        )))
        .execute(&mut conn)
        .await;
        let _ = conn.close().await;
    }
}

/// A test that failed before `cleanup` still leaves nothing behind.
impl Drop for TestDb {
    fn drop(&mut self) {
        if let Some(name) = self.pg_name.take() {
            let _ = std::thread::spawn(move || {
                if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    rt.block_on(drop_database(&name));
                }
            })
            .join();
        }
        if let Some(dir) = self.dir.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// What a test run on both backends receives: the whole [`TestDb`] or only its [`Db`],
/// as the test function's parameter asks.
pub trait BackendArg {
    fn from_test(t: &TestDb) -> &Self;
}

impl BackendArg for TestDb {
    fn from_test(t: &TestDb) -> &Self {
        t
    }
}

impl BackendArg for Db {
    fn from_test(t: &TestDb) -> &Self {
        &t.db
    }
}

/// `on_both_backends!(a, b)` runs the async functions `a(&Db)` (or `a(&TestDb)`) and
/// `b(...)` as tests `sqlite::a`, `postgres::a`, ... each on a fresh database of its own.
#[macro_export]
macro_rules! on_both_backends {
    (@backend $backend:ident, $($name:ident),*) => {
        mod $backend {
            $(#[tokio::test] async fn $name() {
                let t = $crate::testing::TestDb::$backend()
                    .await
                    .expect(concat!(stringify!($backend), " test database"));
                super::$name(<_ as $crate::testing::BackendArg>::from_test(&t)).await;
                t.cleanup().await;
            })*
        }
    };
    ($($name:ident),* $(,)?) => {
        $crate::on_both_backends!(@backend sqlite, $($name),*);
        $crate::on_both_backends!(@backend postgres, $($name),*);
    };
}
