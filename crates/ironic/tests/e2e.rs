#![allow(clippy::unwrap_used)]
//! End to end: the real `ironic` binary as a child process. Data survives a hard kill;
//! a graceful stop unregisters the conductor and releases nothing it should keep.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(16385)
}

fn spawn(port: u16, db_url: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_ironic"))
        .args([
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--database",
            db_url,
            "--host",
            "e2e-conductor",
        ])
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ironic")
}

/// One HTTP/1.1 exchange; `None` if nothing listens yet.
fn http(port: u16, method: &str, path: &str, body: Option<&str>) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    let b = body.unwrap_or("");
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\nX-OpenStack-Ironic-API-Version: 1.51\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{b}",
        b.len()
    );
    s.write_all(req.as_bytes()).ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let status = out.split_whitespace().nth(1)?.parse().ok()?;
    let body = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((status, body))
}

fn wait_ready(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if http(port, "GET", "/", None).is_some_and(|(s, _)| s == 200) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("ironic did not answer on port {port} within 30 s");
}

fn wait_exit(child: &mut Child, within: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if let Ok(Some(st)) = child.try_wait() {
            return Some(st);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

#[test]
fn data_survives_a_kill_and_a_graceful_stop_unregisters() {
    let dir =
        std::env::temp_dir().join(format!("ironic-e2e-{}-{}", std::process::id(), free_port()));
    let db_url = format!("sqlite://{}/ironic.sqlite", dir.display());
    let port = free_port();
    let mut child = spawn(port, &db_url);
    wait_ready(port);
    let (st, body) = http(
        port,
        "POST",
        "/v1/nodes",
        Some(r#"{"driver": "fake-hardware", "name": "survivor"}"#),
    )
    .expect("create");
    assert_eq!(st, 201, "{body}");
    let (st, _) = http(
        port,
        "PATCH",
        "/v1/nodes/survivor",
        Some(r#"[{"op": "add", "path": "/extra/k", "value": "v"}]"#),
    )
    .expect("patch");
    assert_eq!(st, 200);
    child.kill().expect("kill -9");
    let _ = child.wait();

    // Restart on the same file: the node and its change are there.
    let port = free_port();
    let mut child = spawn(port, &db_url);
    wait_ready(port);
    let (st, body) = http(port, "GET", "/v1/nodes/survivor", None).expect("get");
    assert_eq!(st, 200);
    let node: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(node["extra"]["k"], "v");
    assert_eq!(node["reservation"], serde_json::Value::Null);
    let (_, body) = http(port, "GET", "/v1/conductors/e2e-conductor", None).expect("conductor");
    assert!(body.contains("\"alive\":true"), "{body}");

    // SIGTERM: the process stops by itself and marks the conductor offline.
    let pid = child.id().to_string();
    let _ = Command::new("kill").args(["-TERM", &pid]).status();
    let status =
        wait_exit(&mut child, Duration::from_secs(20)).expect("stops within 20 s after SIGTERM");
    assert!(status.success(), "clean exit: {status:?}");
    let mut log = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut log);
    }
    assert!(
        log.contains("conductor unregistered"),
        "log shows the unregistration:\n{log}"
    );
    // The database agrees: the conductor is offline and the node is unlocked.
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (online, reservation) = rt.block_on(async {
        let db = ironic_db::Db::connect(&db_url, &ironic_db::DbOptions::default())
            .await
            .expect("open db");
        let c = db
            .conductor_get("e2e-conductor")
            .await
            .expect("conductor row");
        let n = db
            .node_by_name("survivor")
            .await
            .expect("read")
            .expect("node row");
        db.close().await;
        (c.online, n.reservation)
    });
    assert!(!online, "a graceful stop marks the conductor offline");
    assert_eq!(reservation, None);
    let _ = std::fs::remove_dir_all(dir);
}
