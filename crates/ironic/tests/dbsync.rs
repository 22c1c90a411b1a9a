#![allow(clippy::unwrap_used)]
//! `ironic-dbsync` applies the migrations idempotently (the cluster id is written once)
//! and refuses an unknown database.

use std::process::Command;

#[test]
fn dbsync_upgrade_is_idempotent() {
    let dir = std::env::temp_dir().join(format!("ironic-dbsync-{}", std::process::id()));
    let url = format!("sqlite://{}/x.sqlite", dir.display());
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_ironic-dbsync"))
            .args(["--database", &url])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(run(&["upgrade"]), "schema is up to date");
    let id = run(&["cluster-id"]);
    assert!(uuid::Uuid::parse_str(&id).is_ok(), "a uuid: {id}");
    assert_eq!(run(&["upgrade"]), "schema is up to date");
    let newest = std::fs::read_dir(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../migrations/sqlite"
    ))
    .unwrap()
    .count();
    assert_eq!(run(&["version"]), newest.to_string());
    assert_eq!(run(&["cluster-id"]), id, "the cluster id never changes");
    let bad = Command::new(env!("CARGO_BIN_EXE_ironic-dbsync"))
        .args(["--database", "mysql://nope", "upgrade"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    let _ = std::fs::remove_dir_all(dir);
}
