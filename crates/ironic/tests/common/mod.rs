#![allow(clippy::unwrap_used)]
//! Test harness: an all-in-one server on a free loopback port over a fresh database, and
//! a minimal HTTP/1.1 client so tests see exactly what goes over the wire.

#![allow(dead_code)]

use std::time::Duration;

pub mod peers;
pub mod procs;
pub mod proxy;

use ironic_config::Config;
use ironic_db::testing::TestDb;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Polls `f` every 100 ms until it holds (panics naming `what` after `within`); returns
/// how long that took.
pub async fn until<F, Fut>(what: &str, within: Duration, mut f: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = std::time::Instant::now();
    while start.elapsed() < within {
        if f().await {
            return start.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what}: not within {within:?}");
}

/// A throwaway self-signed certificate for 127.0.0.1, an end-entity one (not a CA),
/// made with `openssl` (which the test script installs): (directory, cert.pem, key.pem).
pub fn throwaway_certificate() -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("ironic-tls-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let out = std::process::Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args([
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ])
        .args(["-addext", "basicConstraints=critical,CA:FALSE"])
        .args(["-keyout", "key.pem", "-out", "cert.pem"])
        .current_dir(&dir)
        .output()
        .expect("openssl is installed");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (dir.clone(), dir.join("cert.pem"), dir.join("key.pem"))
}

pub struct Server {
    pub running: Option<ironic::Running>,
    pub addr: std::net::SocketAddr,
    pub testdb: Option<TestDb>,
    /// The conductor process-in-a-task of the split deployment.
    pub conductor: Option<ironic::Running>,
    pub bus: Option<ironic_rpc::testing::TestBus>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// All-in-one on SQLite (in-process transport).
    Sqlite,
    /// All-in-one on PostgreSQL (in-process transport).
    Postgres,
    /// Split deployment: `ironic-api` and one `ironic-conductor` (as tasks of the test
    /// process) over a RabbitMQ vhost of their own and PostgreSQL.
    Split,
}

pub async fn start(backend: Backend) -> Server {
    start_with(backend, |_| {}).await
}

pub async fn start_with(backend: Backend, tweak: impl FnOnce(&mut Config)) -> Server {
    let testdb = match backend {
        Backend::Sqlite => TestDb::sqlite().await,
        Backend::Postgres | Backend::Split => TestDb::postgres().await,
    }
    .expect("test database");
    let mut cfg = Config::default();
    cfg.api.listen = "127.0.0.1:0".parse().expect("addr");
    cfg.database.url = testdb.url.clone();
    cfg.default.host = "test-conductor".into();
    cfg.log.filter = "warn".into();
    cfg.conductor.shutdown_settle_time = 0;
    // Tests run side by side: the conductor's ops listener on a port of its own.
    cfg.conductor.http_listen = Some("127.0.0.1:0".parse().expect("addr"));
    // The image server's files in a folder of the test's own.
    let images = std::env::temp_dir().join(format!("ironic-images-{}", uuid::Uuid::new_v4()));
    cfg.deploy.http_root = images.join("httpboot");
    cfg.deploy.image_cache = images.join("cache");
    // Every test's client is 127.0.0.1, playing many agents at once: no rate per
    // address (the tests of the limit set one).
    cfg.api.ramdisk_requests_per_second = 0;
    tweak(&mut cfg);
    if backend != Backend::Split {
        let running = ironic::start(cfg).await.expect("server starts");
        return Server {
            addr: running.api_addr(),
            running: Some(running),
            testdb: Some(testdb),
            conductor: None,
            bus: None,
        };
    }
    let bus =
        ironic_rpc::testing::TestBus::new().expect("a RabbitMQ vhost (is rabbitmqctl usable?)");
    cfg.amqp.url = bus.url.clone();
    cfg.amqp.call_timeout = 20;
    let conductor = ironic::start_role(cfg.clone(), ironic::Role::Conductor)
        .await
        .expect("conductor starts");
    let running = ironic::start_role(cfg, ironic::Role::Api)
        .await
        .expect("api starts");
    Server {
        addr: running.api_addr(),
        running: Some(running),
        testdb: Some(testdb),
        conductor: Some(conductor),
        bus: Some(bus),
    }
}

/// A server with `http_basic` and one user, `admin` (password `s3cret`, role `admin`),
/// with `tweak` applied as [`start_with`] does; the folder of its user files is the
/// caller's to remove.
pub async fn start_http_basic(
    backend: Backend,
    tweak: impl FnOnce(&mut Config),
) -> (Server, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("ironic-basic-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("dir");
    let hash = bcrypt::hash("s3cret", 4).expect("bcrypt");
    std::fs::write(dir.join("htpasswd"), format!("admin:{hash}\n")).expect("write");
    std::fs::write(
        dir.join("roles.toml"),
        "[users.admin]\nroles = [\"admin\"]\n",
    )
    .expect("write");
    let d = dir.clone();
    let s = start_with(backend, move |c| {
        c.api.auth_strategy = ironic_config::AuthStrategy::HttpBasic;
        c.api.http_basic_auth_user_file = Some(d.join("htpasswd"));
        c.api.http_basic_roles_file = Some(d.join("roles.toml"));
        tweak(c);
    })
    .await;
    (s, dir)
}

impl Server {
    /// An HTTP client of a server running elsewhere (another process).
    pub fn client(addr: std::net::SocketAddr) -> Server {
        Server {
            running: None,
            addr,
            testdb: None,
            conductor: None,
            bus: None,
        }
    }

    pub fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub async fn stop(mut self) {
        if let Some(r) = self.running.take() {
            r.shutdown().await;
        }
        if let Some(r) = self.conductor.take() {
            r.shutdown().await;
        }
        drop(self.bus.take());
        if let Some(t) = self.testdb.take() {
            t.cleanup().await;
        }
    }

    /// Sends one request; `version` goes into `X-OpenStack-Ironic-API-Version`.
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        version: Option<&str>,
        body: Option<&str>,
    ) -> Resp {
        let mut headers: Vec<(&str, String)> = Vec::new();
        if let Some(v) = version {
            headers.push(("X-OpenStack-Ironic-API-Version", v.to_string()));
        }
        self.raw(method, path, &headers, body.map(str::as_bytes))
            .await
    }

    pub async fn raw(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, String)],
        body: Option<&[u8]>,
    ) -> Resp {
        self.raw_from(None, method, path, headers, body).await
    }

    /// [`Server::raw`] from the client address `from` (another loopback address, say
    /// 127.0.0.2, to be another client).
    pub async fn raw_from(
        &self,
        from: Option<std::net::IpAddr>,
        method: &str,
        path: &str,
        headers: &[(&str, String)],
        body: Option<&[u8]>,
    ) -> Resp {
        let fut = async {
            let mut s = match from {
                None => tokio::net::TcpStream::connect(self.addr)
                    .await
                    .expect("connect"),
                Some(ip) => {
                    let sock = tokio::net::TcpSocket::new_v4().expect("socket");
                    sock.bind(std::net::SocketAddr::new(ip, 0)).expect("bind");
                    sock.connect(self.addr).await.expect("connect")
                }
            };
            let mut req = format!(
                "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n",
                self.addr
            );
            for (k, v) in headers {
                req.push_str(&format!("{k}: {v}\r\n"));
            }
            if let Some(b) = body {
                req.push_str(&format!(
                    "Content-Type: application/json\r\nContent-Length: {}\r\n",
                    b.len()
                ));
            }
            req.push_str("\r\n");
            s.write_all(req.as_bytes()).await.expect("write");
            if let Some(b) = body {
                // A server may answer (413) before reading everything.
                let _ = s.write_all(b).await;
            }
            let mut buf = Vec::new();
            let _ = s.read_to_end(&mut buf).await;
            Resp::parse(&buf)
        };
        tokio::time::timeout(Duration::from_secs(30), fut)
            .await
            .expect("response within 30 s")
    }

    pub async fn get(&self, path: &str, v: &str) -> Resp {
        self.call("GET", path, Some(v), None).await
    }

    pub async fn post(&self, path: &str, v: &str, body: &Value) -> Resp {
        self.call("POST", path, Some(v), Some(&body.to_string()))
            .await
    }

    pub async fn patch(&self, path: &str, v: &str, body: &Value) -> Resp {
        self.call("PATCH", path, Some(v), Some(&body.to_string()))
            .await
    }

    pub async fn put(&self, path: &str, v: &str, body: Option<&Value>) -> Resp {
        let b = body.map(Value::to_string);
        self.call("PUT", path, Some(v), b.as_deref()).await
    }

    pub async fn delete(&self, path: &str, v: &str) -> Resp {
        self.call("DELETE", path, Some(v), None).await
    }

    /// Creates a node at the max version and returns its JSON.
    /// Polls (bounded: 60 s, generous for a loaded machine) until node `ident` reaches
    /// `state`; returns it as read at microversion `v`.
    pub async fn wait_state(&self, v: &str, ident: &str, state: &str) -> Value {
        let start = std::time::Instant::now();
        loop {
            let n = self.get(&format!("/v1/nodes/{ident}"), v).await.json();
            if n["provision_state"] == state {
                return n;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "{ident} never reached {state}: {n}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `PUT /v1/nodes/{ident}/states/provision` with `body`.
    pub async fn provision(&self, v: &str, ident: &str, body: Value) -> Resp {
        self.put(
            &format!("/v1/nodes/{ident}/states/provision"),
            v,
            Some(&body),
        )
        .await
    }

    /// [`Server::provision`] with `{"target": target}`.
    pub async fn provision_to(&self, v: &str, ident: &str, target: &str) -> Resp {
        self.provision(v, ident, serde_json::json!({ "target": target }))
            .await
    }

    pub async fn node(&self, body: Value) -> Value {
        let r = self.post("/v1/nodes", "1.51", &body).await;
        assert_eq!(r.status, 201, "create {body}: {}", r.body);
        r.json()
    }
}

#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Resp {
    fn parse(buf: &[u8]) -> Resp {
        let text = String::from_utf8_lossy(buf).to_string();
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let mut lines = head.lines();
        let status = lines
            .next()
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        Resp {
            status,
            headers,
            body: body.to_string(),
        }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    /// The `faultstring` (or routing `description`) of an Ironic error body.
    pub fn fault(&self) -> String {
        let outer = self.json();
        let inner = outer["error_message"]
            .as_str()
            .unwrap_or_else(|| panic!("no error_message: {}", self.body));
        let v: Value = serde_json::from_str(inner).expect("error_message holds JSON");
        v.get("faultstring")
            .or_else(|| v.get("description"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    }
}

/// Runs each named async test function against each deployment a test can start: the
/// all-in-one server on SQLite, on PostgreSQL, and the split deployment (API and
/// conductors over RabbitMQ). Not `ironic_db::on_both_backends!`, which runs database
/// tests on the two backends.
#[macro_export]
macro_rules! on_every_deployment {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $name() {
                let s = $crate::common::start($crate::common::Backend::Sqlite).await;
                super::$name(&s).await;
                s.stop().await;
            })*
        }
        mod postgres {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $name() {
                let s = $crate::common::start($crate::common::Backend::Postgres).await;
                super::$name(&s).await;
                s.stop().await;
            })*
        }
        mod split {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $name() {
                let s = $crate::common::start($crate::common::Backend::Split).await;
                super::$name(&s).await;
                s.stop().await;
            })*
        }
    };
}

/// The steps fake-hardware ran on a node, oldest first: (interface.step, event).
pub fn fake_journal(n: &Value) -> Vec<(String, String)> {
    n["driver_internal_info"]["fake_journal"]
        .as_array()
        .map(|l| {
            l.iter()
                .map(|e| {
                    (
                        e["step"].as_str().unwrap_or("").to_string(),
                        e["event"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// After concurrent allocation requests (`uuids`) against `nodes` available nodes:
/// waits (bounded) until none is `allocating`, then checks that exactly `nodes` are
/// `active` on distinct nodes, the rest `error`, and that every allocated node names its
/// allocation.
pub async fn check_allocations(s: &Server, uuids: &[String], nodes: usize) {
    let v = "1.60";
    let start = std::time::Instant::now();
    let list = loop {
        let l = s.get("/v1/allocations?limit=100000", v).await;
        assert_eq!(l.status, 200, "{}", l.body);
        let l = l.json()["allocations"].as_array().unwrap().clone();
        if l.iter().all(|a| a["state"] != "allocating") {
            break l;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "allocations still in progress"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    let mine: Vec<&Value> = list
        .iter()
        .filter(|a| uuids.iter().any(|u| a["uuid"] == u.as_str()))
        .collect();
    assert_eq!(mine.len(), uuids.len());
    let active: Vec<&&Value> = mine.iter().filter(|a| a["state"] == "active").collect();
    let errors = mine.iter().filter(|a| a["state"] == "error").count();
    assert_eq!(active.len(), nodes, "one allocation per node");
    assert_eq!(errors, uuids.len() - nodes);
    let distinct: std::collections::BTreeSet<&str> = active
        .iter()
        .map(|a| a["node_uuid"].as_str().unwrap())
        .collect();
    assert_eq!(distinct.len(), nodes, "no node allocated twice");
    for a in &active {
        let n = s
            .get(
                &format!("/v1/nodes/{}", a["node_uuid"].as_str().unwrap()),
                v,
            )
            .await
            .json();
        assert_eq!(n["allocation_uuid"], a["uuid"], "{n}");
        assert_eq!(n["instance_uuid"], a["uuid"], "{n}");
    }
}

/// Brings `n` new fake-hardware nodes of resource class `rc` (named `<rc>-<i>`) to
/// `available` (automated cleaning off) with `clients` concurrent clients; waits
/// (bounded) on the node list, not per node.
pub async fn available_nodes(s: &Server, rc: &str, n: usize, clients: usize) {
    let v = "1.60";
    let run = |verb: Option<&'static str>| {
        let mut set = tokio::task::JoinSet::new();
        for c in 0..clients {
            let api = Server::client(s.addr);
            let rc = rc.to_string();
            set.spawn(async move {
                for i in (c..n).step_by(clients) {
                    let name = format!("{rc}-{i}");
                    let r = match verb {
                        None => {
                            api.post(
                                "/v1/nodes",
                                v,
                                &serde_json::json!({"driver": "fake-hardware", "name": name,
                                    "resource_class": rc, "automated_clean": false}),
                            )
                            .await
                        }
                        Some(verb) => {
                            api.put(
                                &format!("/v1/nodes/{name}/states/provision"),
                                v,
                                Some(&serde_json::json!({"target": verb})),
                            )
                            .await
                        }
                    };
                    assert!(matches!(r.status, 201 | 202), "{name}: {}", r.body);
                }
            });
        }
        set
    };
    let wait = |state: &'static str| async move {
        let start = std::time::Instant::now();
        loop {
            let l = s
                .get(
                    &format!("/v1/nodes?resource_class={rc}&provision_state={state}&fields=uuid&limit=100000"),
                    v,
                )
                .await;
            assert_eq!(l.status, 200, "{}", l.body);
            if l.json()["nodes"].as_array().map_or(0, Vec::len) == n {
                return;
            }
            assert!(
                start.elapsed() < std::time::Duration::from_secs(120),
                "{n} nodes never reached {state}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    };
    for (verb, state) in [
        (None, "enroll"),
        (Some("manage"), "manageable"),
        (Some("provide"), "available"),
    ] {
        let mut set = run(verb);
        while let Some(r) = set.join_next().await {
            r.unwrap();
        }
        wait(state).await;
    }
}
