#![allow(clippy::unwrap_used)]
//! The two migration sets describe the same schema (`ironic-dbsync`, which applies
//! them, is tested with the binaries in `crates/ironic/tests/dbsync.rs`).

use std::collections::BTreeMap;

use ironic_db::testing::TestDb;
use sqlx::Connection;

type Schema = BTreeMap<String, Vec<String>>;

async fn sqlite_schema(url: &str) -> Schema {
    let mut c = sqlx::SqliteConnection::connect(url).await.unwrap();
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name NOT LIKE '_sqlx%' ORDER BY name",
    )
    .fetch_all(&mut c)
    .await
    .unwrap();
    let mut s = Schema::new();
    for t in tables {
        let mut cols: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT name FROM pragma_table_info('{t}')"
        )))
        .fetch_all(&mut c)
        .await
        .unwrap();
        cols.sort();
        s.insert(t, cols);
    }
    s
}

async fn postgres_schema(url: &str) -> Schema {
    let mut c = sqlx::PgConnection::connect(url).await.unwrap();
    let rows: Vec<(String, String)> = sqlx::query_as(
        "SELECT table_name::text, column_name::text FROM information_schema.columns \
         WHERE table_schema = 'public' AND table_name NOT LIKE '_sqlx%' ORDER BY 1, 2",
    )
    .fetch_all(&mut c)
    .await
    .unwrap();
    let mut s = Schema::new();
    for (t, col) in rows {
        s.entry(t).or_default().push(col);
    }
    s
}

#[tokio::test]
async fn both_backends_have_the_same_tables_and_columns() {
    let lite = TestDb::sqlite().await.unwrap();
    let pg = TestDb::postgres().await.unwrap();
    let a = sqlite_schema(&lite.url).await;
    let b = postgres_schema(&pg.url).await;
    assert!(
        a.contains_key("nodes") && a.contains_key("node_traits") && a.contains_key("conductors")
    );
    assert!(a["nodes"].iter().any(|c| c == "retired_reason"));
    assert_eq!(
        a, b,
        "migrations/sqlite and migrations/postgres drifted apart"
    );
    lite.cleanup().await;
    pg.cleanup().await;
}

/// Migration 0022 gives every database a bus signing key of its own: 64 hex digits,
/// the same at every read, different from another database's.
#[tokio::test]
async fn each_database_has_its_own_bus_signing_key() {
    let lite = TestDb::sqlite().await.unwrap();
    let pg = TestDb::postgres().await.unwrap();
    let pg2 = TestDb::postgres().await.unwrap();
    let mut keys = Vec::new();
    for t in [&lite, &pg, &pg2] {
        let k = t.db.bus_signing_key().await.unwrap();
        assert_eq!(k.len(), 64, "{k}");
        assert!(
            k.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
        assert_eq!(t.db.bus_signing_key().await.unwrap(), k, "written once");
        keys.push(k);
    }
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), 3, "each database has its own");
    lite.cleanup().await;
    pg.cleanup().await;
    pg2.cleanup().await;
}
