#![allow(clippy::unwrap_used)]
//! What a stranger who reaches the API without credentials can send to the ramdisk's
//! public routes (`/v1/lookup`, `/v1/heartbeat/{node}`, `/v1/continue_inspection`), and
//! what it must not achieve: stall the API (a megabyte built to be hard to mask), forge
//! a log line (CR/LF in every field the routes log), or make an authenticated call fail
//! (bodies sent a byte at a time, floods). `docs/security.md` "The ramdisk routes".

mod common;

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use base64::Engine;
use common::Server;
use common::procs::Cluster;
use ironic_db::testing::TestDb;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A JSON string of `password:` repeated, just under the 1 MiB body limit: masking it
/// took minutes when every secret word scanned its value to the end again.
fn hostile_body() -> Vec<u8> {
    serde_json::to_vec(&"password:".repeat(116_000)).unwrap()
}

/// Text built to look like the start of a log line (an audit line at that).
const FORGED: &str = "2026-01-01T00:00:00.000000Z  INFO ironic::audit: forged";

/// The real binaries (split deployment): hostile bodies on both body-taking public
/// routes leave `/healthz` answering and are answered 4xx with a cut message; CR/LF sent
/// through every public route reaches the logs escaped, never as a line of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_ramdisk_requests_neither_stall_the_api_nor_forge_log_lines() {
    let t = TestDb::postgres().await.unwrap();
    let filter = "debug,lapin=info,sqlx=warn,hyper=info,hyper_util=info,h2=info,tower=info";
    let cluster = Cluster::new(
        &t.url,
        &[("IRONIC_LOG__FILTER", filter), ("RUST_LOG", filter)],
    );
    let conductor = cluster.conductor("hostile-a");
    let (api_proc, port) = cluster.api();
    let api = Server::client(format!("127.0.0.1:{port}").parse().unwrap());
    const V: &str = "1.84";

    // A node waiting for the ramdisk's inspection data, found by its port's MAC.
    let node = json!({"driver": "fake-hardware", "name": "insp", "inspect_interface": "agent",
                      "driver_info": {"ipmi_address": "192.0.2.40"}});
    common::until(
        "a conductor serves fake-hardware",
        Duration::from_secs(30),
        || {
            let (api, node) = (&api, &node);
            async move { api.post("/v1/nodes", V, node).await.status == 201 }
        },
    )
    .await;
    let uuid = api.get("/v1/nodes/insp", V).await.json()["uuid"]
        .as_str()
        .unwrap()
        .to_string();
    let r = api
        .post(
            "/v1/ports",
            V,
            &json!({"address": "52:54:00:00:40:01", "node_uuid": uuid}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    api.provision_to(V, "insp", "manage").await;
    api.wait_state(V, "insp", "manageable").await;
    assert_eq!(api.provision_to(V, "insp", "inspect").await.status, 202);
    api.wait_state(V, "insp", "inspect wait").await;

    // H1: two hostile bodies on each route at once (as many as the machine has cores,
    // twice over); the API keeps answering meanwhile.
    let body = hostile_body();
    assert!(body.len() < 1024 * 1024);
    let hostile: Vec<_> = [
        ("/v1/continue_inspection", None),
        ("/v1/continue_inspection", None),
        ("/v1/heartbeat/x", Some("1.22")),
        ("/v1/heartbeat/x", Some("1.22")),
    ]
    .into_iter()
    .map(|(path, v)| {
        let (addr, body) = (api.addr, body.clone());
        tokio::spawn(async move {
            let mut h = Vec::new();
            if let Some(v) = v {
                h.push(("X-OpenStack-Ironic-API-Version", v.to_string()));
            }
            Server::client(addr)
                .raw("POST", path, &h, Some(&body))
                .await
        })
    })
    .collect();
    let healthz = api.call("GET", "/healthz", None, None).await;
    assert_eq!(healthz.status, 200, "{}", healthz.body);
    let mut answers = Vec::new();
    for h in hostile {
        answers.push(h.await.unwrap());
    }
    // continue_inspection reads it (the body limit) and quotes it, masked and cut;
    // a heartbeat is never that large.
    for r in &answers[..2] {
        assert_eq!(r.status, 400, "{}", &r.body[..r.body.len().min(300)]);
        let fault = r.fault();
        assert!(
            fault.starts_with("Schema error: 'password:******"),
            "{fault}"
        );
        assert!(fault.len() < 4200, "the echo is cut: {} bytes", fault.len());
    }
    for r in &answers[2..] {
        assert_eq!(r.status, 413, "{}", r.body);
    }

    // M2: CR/LF through every public route, in every field they log.
    let forged = |what: &str| format!("zz\r\n{FORGED} {what}");
    let r = api
        .get(
            &format!(
                "/v1/lookup?addresses={}",
                forged("lookup")
                    .replace("\r", "%0D")
                    .replace("\n", "%0A")
                    .replace(" ", "%20")
            ),
            "1.22",
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    let r = api
        .post(
            &format!("/v1/heartbeat/{uuid}"),
            "1.72",
            &json!({"callback_url": "http://192.0.2.1:9999", "agent_token": forged("token"),
                    "agent_version": forged("version"),
                    "agent_status_message": forged("status")}),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    let r = api
        .post(
            "/v1/continue_inspection",
            V,
            &json!({"inventory": {"interfaces": [{"mac_address": "52:54:00:00:40:01"},
                                                 {"mac_address": forged("mac")}],
                                  "bmc_address": forged("bmc")},
                    "error": forged("ramdisk-error")}),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    // The ramdisk's error fails the inspection: it reaches last_error and the logs.
    let n = api.wait_state(V, "insp", "inspect failed").await;
    assert!(
        n["last_error"].as_str().unwrap().contains("ramdisk-error"),
        "{n}"
    );

    let logs = format!("{}\n{}", api_proc.log_text(), conductor.log_text());
    for what in ["lookup", "mac", "ramdisk-error"] {
        assert!(
            logs.contains(&format!("zz\\r\\n{FORGED} {what}")),
            "the {what} was logged, escaped"
        );
    }
    let forged_lines: Vec<&str> = logs
        .lines()
        .filter(|l| l.trim_start().starts_with("2026-01-01T00:00:00.000000Z"))
        .collect();
    assert!(
        forged_lines.is_empty(),
        "a client forged log lines: {forged_lines:#?}"
    );
    drop(conductor);
    drop(api_proc);
    t.cleanup().await;
}

fn basic(user: &str, pw: &str) -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pw}"))
    )
}

/// Sends a request's headers from `from`, announcing a body of `len` bytes, and then
/// only `sent` of them; returns the answer's status (0: the connection closed without
/// one).
async fn slow_body(addr: SocketAddr, from: IpAddr, path: &str, version: &str, len: usize) -> u16 {
    slow_body_as(addr, from, ("POST", path), version, len, None).await
}

/// [`slow_body`] with a method and, perhaps, an `Authorization` header.
async fn slow_body_as(
    addr: SocketAddr,
    from: IpAddr,
    (method, path): (&str, &str),
    version: &str,
    len: usize,
    auth: Option<&str>,
) -> u16 {
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.bind(SocketAddr::new(from, 0)).unwrap();
    let mut s = sock.connect(addr).await.unwrap();
    let auth = auth
        .map(|a| format!("Authorization: {a}\r\n"))
        .unwrap_or_default();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}X-OpenStack-Ironic-API-Version: {version}\r\nContent-Type: application/json\r\nContent-Length: {len}\r\n\r\n{{"
    );
    s.write_all(head.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(30), async {
        let mut chunk = [0u8; 4096];
        loop {
            match s.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
            if buf.windows(4).any(|w| w == b"\r\n\r\n") {
                break;
            }
        }
    })
    .await;
    assert!(read.is_ok(), "no answer within 30 s");
    String::from_utf8_lossy(&buf)
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Clients that hold every ramdisk slot with bodies sent a byte at a time, and a flood
/// of lookups from one address, make no authenticated call fail: the ramdisk routes have
/// slots of their own, a rate per address and a body-read timeout. The route and the
/// version are refused before the body is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_bodies_and_floods_make_no_authenticated_call_fail() {
    let (s, dir) = common::start_http_basic(common::Backend::Sqlite, |c| {
        c.api.max_concurrent_requests = 16;
        c.api.ramdisk_max_concurrent_requests = 4;
        c.api.ramdisk_requests_per_second = 5;
        c.api.ramdisk_burst = 5;
        c.api.body_read_timeout = 5;
    })
    .await;
    let admin = vec![
        ("X-OpenStack-Ironic-API-Version", "1.61".to_string()),
        ("Authorization", basic("admin", "s3cret")),
    ];
    let r = s
        .raw(
            "POST",
            "/v1/nodes",
            &admin,
            Some(br#"{"driver": "fake-hardware", "name": "n1"}"#),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);

    // Twenty slow bodies from twenty addresses (each under its rate): more than every
    // slot of the API, ramdisk and others together.
    let slow: Vec<_> = (0..20u8)
        .map(|i| {
            let (addr, from) = (s.addr, IpAddr::from([127, 0, 1, i + 1]));
            tokio::spawn(
                async move { slow_body(addr, from, "/v1/heartbeat/x", "1.22", 1000).await },
            )
        })
        .collect();
    // Those past the slots are turned away at once; four hold the ramdisk slots.
    common::until(
        "16 slow bodies turned away",
        Duration::from_secs(20),
        || {
            let n = slow.iter().filter(|h| h.is_finished()).count();
            async move { n >= 16 }
        },
    )
    .await;
    // A flood of lookups from one address.
    let flood: Vec<_> = (0..60)
        .map(|_| {
            let addr = s.addr;
            tokio::spawn(async move {
                let h = vec![("X-OpenStack-Ironic-API-Version", "1.22".to_string())];
                Server::client(addr)
                    .raw("GET", "/v1/lookup?addresses=52:54:00:00:00:01", &h, None)
                    .await
                    .status
            })
        })
        .collect();
    // Meanwhile, authenticated calls: a list and a provision call.
    let r = s.raw("GET", "/v1/nodes", &admin, None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = s
        .raw(
            "PUT",
            "/v1/nodes/n1/states/provision",
            &admin,
            Some(br#"{"target": "manage"}"#),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);

    let mut statuses = Vec::new();
    for h in slow {
        statuses.push(h.await.unwrap());
    }
    statuses.sort_unstable();
    let held = statuses.iter().filter(|&&c| c == 408).count();
    let shed = statuses.iter().filter(|&&c| c == 503).count();
    assert_eq!(
        (held, shed),
        (4, 16),
        "four bodies held the four ramdisk slots until the body-read timeout, the rest were turned away at once: {statuses:?}"
    );
    let mut flooded = Vec::new();
    for h in flood {
        flooded.push(h.await.unwrap());
    }
    let limited = flooded.iter().filter(|&&c| c == 429).count();
    assert!(
        limited >= 40,
        "one address past its rate is refused: {flooded:?}"
    );
    // The version is refused before the body is read (else this would wait for it).
    let from = IpAddr::from([127, 0, 2, 1]);
    assert_eq!(
        slow_body(s.addr, from, "/v1/heartbeat/x", "1.21", 1000).await,
        404
    );
    // The slots are free again, and the provision call was carried out.
    let h = vec![("X-OpenStack-Ironic-API-Version", "1.22".to_string())];
    let r = s
        .raw_from(
            Some(IpAddr::from([127, 0, 3, 1])),
            "POST",
            "/v1/heartbeat/x",
            &h,
            Some(b"{}"),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    common::until("n1 is manageable", Duration::from_secs(30), || async {
        let r = s.raw("GET", "/v1/nodes/n1", &admin, None).await;
        r.json()["provision_state"] == "manageable"
    })
    .await;
    s.stop().await;

    // A disabled route is refused before its body is read too.
    let s = common::start_with(common::Backend::Sqlite, |c| {
        c.api.enable_ramdisk_endpoints = false;
        c.api.body_read_timeout = 30;
    })
    .await;
    let from = IpAddr::from([127, 0, 2, 2]);
    assert_eq!(
        slow_body(s.addr, from, "/v1/continue_inspection", "1.84", 1000).await,
        403
    );
    s.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// The provision route decides its policy before it reads a byte of the body: a caller
/// without the right gets 403 at once for a 60 MiB body it never sends (were the body
/// read first, the answer would be the read timeout's 408).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provision_body_is_not_read_for_a_caller_without_the_right() {
    let (s, dir) = common::start_http_basic(common::Backend::Sqlite, |c| {
        c.api.body_read_timeout = 30;
        let users = c.api.http_basic_auth_user_file.clone().unwrap();
        let roles = c.api.http_basic_roles_file.clone().unwrap();
        let hash = bcrypt::hash("r3ader", 4).unwrap();
        let mut text = std::fs::read_to_string(&users).unwrap();
        text.push_str(&format!("reader:{hash}\n"));
        std::fs::write(&users, text).unwrap();
        let mut text = std::fs::read_to_string(&roles).unwrap();
        text.push_str("[users.reader]\nroles = [\"reader\"]\n");
        std::fs::write(&roles, text).unwrap();
    })
    .await;
    let admin = [
        ("Authorization", basic("admin", "s3cret")),
        ("X-OpenStack-Ironic-API-Version", "1.81".to_string()),
    ];
    let r = s
        .raw(
            "POST",
            "/v1/nodes",
            &admin,
            Some(br#"{"driver": "fake-hardware", "name": "n1"}"#),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let from = IpAddr::from([127, 0, 4, 1]);
    let status = slow_body_as(
        s.addr,
        from,
        ("PUT", "/v1/nodes/n1/states/provision"),
        "1.81",
        60 << 20,
        Some(&basic("reader", "r3ader")),
    )
    .await;
    assert_eq!(status, 403, "refused before the body is read");
    s.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// The VmHWM (peak resident memory) of a process, in bytes.
fn peak_memory(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kib * 1024
}

/// The real API process: bodies built to cost far more parsed than sent (16 MiB of
/// `{"mac_address":""}` interfaces, a `Value` each) are refused before they are parsed,
/// eight at once, and the process's peak memory stays within the documented bound
/// (docs/security.md "Bodies"); inspection data with many invalid MACs, within the
/// bound, writes one log line, not one a MAC.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_built_to_expand_are_refused_unparsed_and_invalid_macs_log_once() {
    let t = TestDb::postgres().await.unwrap();
    let cluster = Cluster::new(&t.url, &[("IRONIC_API__BODY_READ_TIMEOUT", "60")]);
    let (api_proc, port) = cluster.api();
    let api = Server::client(format!("127.0.0.1:{port}").parse().unwrap());
    let before = peak_memory(api_proc.child.id());

    let interfaces = |n: usize| {
        let mut b = String::from(r#"{"inventory":{"interfaces":["#);
        for i in 0..n {
            if i > 0 {
                b.push(',');
            }
            b.push_str(r#"{"mac_address":""}"#);
        }
        b.push_str("]}}");
        b.into_bytes()
    };
    let flood = std::sync::Arc::new(interfaces(880_000));
    assert!(flood.len() <= 16 << 20 && flood.len() > 15 << 20);
    let v = [("X-OpenStack-Ironic-API-Version", "1.84".to_string())];
    let sent: Vec<_> = (0..8)
        .map(|_| {
            let (flood, v) = (flood.clone(), v.clone());
            tokio::spawn(async move {
                Server::client(format!("127.0.0.1:{port}").parse().unwrap())
                    .raw("POST", "/v1/continue_inspection", &v, Some(&flood))
                    .await
            })
        })
        .collect();
    for r in sent {
        let r = r.await.unwrap();
        assert!(
            matches!(r.status, 413 | 503),
            "{} {}",
            r.status,
            &r.body[..r.body.len().min(300)]
        );
    }
    let grown = peak_memory(api_proc.child.id()).saturating_sub(before);
    // 4 large bodies at once ([api] large_bodies_at_once), each its bytes and a
    // buffer's doubling: ~128 MiB; parsed, these would have cost gigabytes.
    assert!(
        grown < 256 << 20,
        "the API's peak memory grew by {} MiB",
        grown >> 20
    );

    // 60,000 invalid MACs (within the values a large body may hold): one log line.
    let r = api
        .raw(
            "POST",
            "/v1/continue_inspection",
            &v,
            Some(&interfaces(60_000)),
        )
        .await;
    assert_eq!(r.status, 400, "{}", &r.body[..r.body.len().min(300)]);
    assert_eq!(r.fault(), "No lookup information provided");
    let logs = api_proc.log_text();
    let lines = logs
        .lines()
        .filter(|l| l.contains("invalid MAC addresses in inspection data"))
        .count();
    assert_eq!(lines, 1, "{}", &logs[logs.len().saturating_sub(2000)..]);
    drop(api_proc);
    t.cleanup().await;
}
