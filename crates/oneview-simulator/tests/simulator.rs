#![allow(clippy::unwrap_used)]
//! The simulator over real HTTP on 127.0.0.1: sessions and headers, the profile and
//! power task lifecycle with the appliance's rules, and the control API.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use oneview_simulator::{Inventory, Settings, Simulator};
use serde_json::{Value, json};

struct Resp {
    status: u16,
    location: Option<String>,
    body: Value,
}

struct Ov {
    base: String,
    client: Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>,
    token: Option<String>,
}

impl Ov {
    async fn start(settings: Settings) -> Ov {
        let inv = Inventory::load(std::path::Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../deploy/examples/oneview-inventory.toml"
        )))
        .unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(Simulator::new(&inv, settings).serve(listener));
        Ov {
            base: format!("http://{addr}"),
            client: Client::builder(TokioExecutor::new()).build_http(),
            token: None,
        }
    }

    async fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
        version: Option<&str>,
    ) -> Resp {
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header("content-type", "application/json");
        if let Some(v) = version {
            // Gen A's spelling; the simulator must not care about case.
            req = req.header("X-Api-Version", v);
        }
        if let Some(t) = &self.token {
            req = req.header("Auth", t);
        }
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let r = self
            .client
            .request(req.body(Full::new(Bytes::from(body))).unwrap())
            .await
            .unwrap();
        let status = r.status().as_u16();
        let location = r
            .headers()
            .get("location")
            .map(|v| v.to_str().unwrap().to_string());
        let bytes = r.into_body().collect().await.unwrap().to_bytes();
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap()
        };
        Resp {
            status,
            location,
            body,
        }
    }

    async fn rest(&self, method: &str, path: &str, body: Option<Value>) -> Resp {
        self.call(method, path, body, Some("300")).await
    }

    async fn login(&mut self) {
        let r = self
            .call(
                "POST",
                "/rest/login-sessions",
                Some(json!({"userName": "administrator", "password": "password"})),
                None,
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
        self.token = Some(r.body["sessionID"].as_str().unwrap().to_string());
    }

    /// Polls a task (bounded) until it is terminal.
    async fn wait(&self, task_uri: &str) -> Value {
        let start = Instant::now();
        loop {
            let t = self.rest("GET", task_uri, None).await;
            assert_eq!(t.status, 200, "{}", t.body);
            let state = t.body["taskState"].as_str().unwrap().to_string();
            if matches!(
                state.as_str(),
                "Completed" | "Error" | "Warning" | "Terminated" | "Killed"
            ) {
                assert_eq!(t.body["percentComplete"], 100);
                assert_eq!(t.body["computedPercentComplete"], 100);
                return t.body;
            }
            assert!(t.body["percentComplete"].as_u64().unwrap() < 100);
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "task never ended"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn control(&self, path: &str, body: Value) -> Resp {
        self.call("POST", &format!("/control/{path}"), Some(body), None)
            .await
    }
}

fn quick() -> Settings {
    Settings {
        task_duration: Duration::from_millis(100),
        ..Settings::default()
    }
}

#[tokio::test]
async fn sessions_and_headers() {
    let mut ov = Ov::start(quick()).await;
    let v = ov.call("GET", "/rest/version", None, None).await;
    assert_eq!(v.status, 200);
    assert_eq!(v.body["currentVersion"], 600);
    let bad = ov
        .call(
            "POST",
            "/rest/login-sessions",
            Some(json!({"userName": "administrator", "password": "nope"})),
            None,
        )
        .await;
    assert_eq!(bad.status, 401);
    assert_eq!(bad.body["errorCode"], "AUTHN_AUTH_FAIL");
    assert!(
        bad.body["recommendedActions"].is_array(),
        "OneView's error shape"
    );
    let r = ov
        .rest("GET", "/rest/server-hardware/sh-encl1-1", None)
        .await;
    assert_eq!(r.status, 401, "no session");
    ov.login().await;
    let r = ov
        .call("GET", "/rest/server-hardware/sh-encl1-1", None, None)
        .await;
    assert_eq!(r.status, 412, "no version header");
    let r = ov
        .call("GET", "/rest/server-hardware/sh-encl1-1", None, Some("100"))
        .await;
    assert_eq!(r.status, 412, "version too old");
    let r = ov
        .call("GET", "/rest/server-hardware/sh-encl1-1", None, Some("200"))
        .await;
    assert_eq!(r.status, 200, "Gen A's version");
    assert_eq!(r.body["serverProfileUri"], Value::Null, "null, not absent");
    assert_eq!(r.body["powerState"], "Off");
    let list = ov
        .rest("GET", "/rest/server-hardware?start=0&count=3", None)
        .await;
    assert_eq!(list.body["total"], 8, "count = 8 in the inventory");
    assert_eq!(list.body["members"].as_array().unwrap().len(), 3);
    assert!(list.body["nextPageUri"].is_string());
    // An expired session is 401; logging in again works.
    assert_eq!(
        ov.control("expire-sessions", json!({})).await.body["expired"],
        1
    );
    assert_eq!(
        ov.rest("GET", "/rest/server-hardware/sh-encl1-1", None)
            .await
            .status,
        401
    );
    ov.login().await;
    assert_eq!(
        ov.rest("GET", "/rest/server-hardware/sh-encl1-1", None)
            .await
            .status,
        200
    );
    assert_eq!(
        ov.rest("GET", "/rest/server-hardware/nope", None)
            .await
            .status,
        404
    );
    // Logout ends the session.
    assert_eq!(
        ov.rest("DELETE", "/rest/login-sessions", Some(json!({})))
            .await
            .status,
        204
    );
    assert_eq!(
        ov.rest("GET", "/rest/server-hardware/sh-encl1-1", None)
            .await
            .status,
        401
    );
}

#[tokio::test]
async fn profile_and_power_lifecycle() {
    let mut ov = Ov::start(quick()).await;
    ov.login().await;
    let sh = "/rest/server-hardware/sh-encl1-2";
    // A profile from the template's new-profile, as the driver builds it.
    let mut p = ov
        .rest(
            "GET",
            "/rest/server-profile-templates/spt-ironic/new-profile",
            None,
        )
        .await
        .body;
    assert_eq!(
        p["serverProfileTemplateUri"],
        "/rest/server-profile-templates/spt-ironic"
    );
    assert!(p.get("uri").is_none(), "unsaved");
    p["name"] = json!("Ironic Cleaning [node-1]");
    p["serverHardwareUri"] = json!(sh);
    p["serverProfileTemplateUri"] = json!("");
    let r = ov
        .rest("POST", "/rest/server-profiles?force=", Some(p.clone()))
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let task = r.location.clone().unwrap();
    assert_eq!(r.body["uri"], task.as_str());
    assert_eq!(r.body["type"], "TaskResourceV2");
    assert_eq!(r.body["category"], "tasks");
    // Taken at once for any reader.
    let h = ov.rest("GET", sh, None).await.body;
    assert_eq!(h["state"], "ApplyingProfile");
    let sp = h["serverProfileUri"].as_str().unwrap().to_string();
    assert_eq!(r.body["associatedResource"]["resourceUri"], sp.as_str());
    // Power is refused while the profile is applied.
    let busy = ov
        .rest(
            "PUT",
            &format!("{sh}/powerState"),
            Some(json!({"powerState": "On"})),
        )
        .await;
    assert_eq!(busy.status, 409);
    let t = ov.wait(&task).await;
    assert_eq!(t["taskState"], "Completed");
    let h = ov.rest("GET", sh, None).await.body;
    assert_eq!(h["state"], "ProfileApplied");
    assert_eq!(ov.rest("GET", &sp, None).await.body["state"], "Normal");

    // One profile per server hardware: the second assignment's task fails.
    let mut p2 = p.clone();
    p2["name"] = json!("another");
    let r = ov.rest("POST", "/rest/server-profiles", Some(p2)).await;
    assert_eq!(r.status, 202);
    let t = ov.wait(r.location.as_deref().unwrap()).await;
    assert_eq!(t["taskState"], "Error");
    assert_eq!(
        t["taskErrors"][0]["errorCode"],
        "ProfileAlreadyExistsInServer"
    );
    assert_eq!(
        ov.rest("GET", sh, None).await.body["serverProfileUri"],
        sp.as_str()
    );

    // Boot order through the profile.
    let mut full = ov.rest("GET", &sp, None).await.body;
    full["boot"]["order"] = json!(["HardDisk", "PXE"]);
    let r = ov.rest("PUT", &format!("{sp}?force="), Some(full)).await;
    assert_eq!(r.status, 202);
    ov.wait(r.location.as_deref().unwrap()).await;
    assert_eq!(
        ov.rest("GET", &sp, None).await.body["boot"]["order"],
        json!(["HardDisk", "PXE"])
    );

    // Power on (powerControl may be absent), then removing the profile is refused
    // while powered on; off, then delete: a task named Delete, profile gone.
    let r = ov
        .rest(
            "PUT",
            &format!("{sh}/powerState"),
            Some(json!({"powerState": "On"})),
        )
        .await;
    assert_eq!(r.status, 202);
    assert_eq!(
        ov.rest("GET", sh, None).await.body["powerState"],
        "PoweringOn"
    );
    ov.wait(r.location.as_deref().unwrap()).await;
    assert_eq!(ov.rest("GET", sh, None).await.body["powerState"], "On");
    let r = ov.rest("DELETE", &sp, Some(json!({}))).await;
    assert_eq!(r.status, 409);
    let r = ov
        .rest(
            "PUT",
            &format!("{sh}/powerState"),
            Some(json!({"powerState": "Off", "powerControl": "PressAndHold"})),
        )
        .await;
    ov.wait(r.location.as_deref().unwrap()).await;
    let r = ov.rest("DELETE", &sp, Some(json!({}))).await;
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(r.body["name"], "Delete");
    assert_eq!(
        ov.rest("GET", sh, None).await.body["state"],
        "RemovingProfile"
    );
    ov.wait(r.location.as_deref().unwrap()).await;
    let h = ov.rest("GET", sh, None).await.body;
    assert_eq!(h["state"], "NoProfileApplied");
    assert_eq!(h["serverProfileUri"], Value::Null);
    assert_eq!(ov.rest("GET", &sp, None).await.status, 404);

    // Consistency checks are synchronous 400s.
    let mut wrong = p.clone();
    wrong["serverHardwareUri"] = json!("/rest/server-hardware/nope");
    assert_eq!(
        ov.rest("POST", "/rest/server-profiles", Some(wrong))
            .await
            .status,
        400
    );
    let mut wrong = p.clone();
    wrong["serverHardwareTypeUri"] = json!("/rest/server-hardware-types/other");
    assert_eq!(
        ov.rest("POST", "/rest/server-profiles", Some(wrong))
            .await
            .status,
        400
    );
    let mut wrong = p;
    wrong["enclosureGroupUri"] = json!("/rest/enclosure-groups/other");
    let r = ov.rest("POST", "/rest/server-profiles", Some(wrong)).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.body["errorCode"], "ENCLOSURE_GROUP_MISMATCH");
}

#[tokio::test]
async fn a_oneview_user_and_injected_failures() {
    let mut ov = Ov::start(quick()).await;
    ov.login().await;
    let sh = "/rest/server-hardware/sh-encl1-3";
    // A OneView user takes the server: it has a profile that is not ours.
    let r = ov
        .control("server-hardware/sh-encl1-3/take", json!({"name": "web-7"}))
        .await;
    assert_eq!(r.status, 200);
    let theirs = r.body["serverProfileUri"].as_str().unwrap().to_string();
    assert_eq!(
        ov.rest("GET", sh, None).await.body["serverProfileUri"],
        theirs.as_str()
    );
    assert_eq!(ov.rest("GET", &theirs, None).await.body["name"], "web-7");
    // ...and frees it.
    assert_eq!(
        ov.control("server-hardware/sh-encl1-3/free", json!({}))
            .await
            .status,
        200
    );
    assert_eq!(
        ov.rest("GET", sh, None).await.body["serverProfileUri"],
        Value::Null
    );
    assert_eq!(ov.rest("GET", &theirs, None).await.status, 404);

    // The next task fails with the given error.
    ov.control(
        "fail-next-tasks",
        json!({"count": 1, "errorCode": "PowerFailed", "message": "iLO is busy"}),
    )
    .await;
    let r = ov
        .rest(
            "PUT",
            &format!("{sh}/powerState"),
            Some(json!({"powerState": "On"})),
        )
        .await;
    let t = ov.wait(r.location.as_deref().unwrap()).await;
    assert_eq!(t["taskState"], "Error");
    assert_eq!(t["taskErrors"][0]["message"], "iLO is busy");
    assert_eq!(
        ov.rest("GET", sh, None).await.body["powerState"],
        "Off",
        "unchanged"
    );
    // The next calls fail with a status.
    ov.control("fail-next-calls", json!({"count": 2, "status": 503}))
        .await;
    assert_eq!(ov.rest("GET", sh, None).await.status, 503);
    assert_eq!(ov.rest("GET", sh, None).await.status, 503);
    assert_eq!(ov.rest("GET", sh, None).await.status, 200);
    // Slower tasks: still running after the old duration.
    ov.control("task-duration", json!({"ms": 2000})).await;
    let r = ov
        .rest(
            "PUT",
            &format!("{sh}/powerState"),
            Some(json!({"powerState": "On"})),
        )
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let t = ov
        .rest("GET", r.location.as_deref().unwrap(), None)
        .await
        .body;
    assert_eq!(t["taskState"], "Running");
    assert!(t["percentComplete"].as_u64().unwrap() < 100);
    // The state can be inspected.
    let state = ov.call("GET", "/control/state", None, None).await.body;
    assert_eq!(state["serverHardware"].as_array().unwrap().len(), 8);
}

#[test]
fn inventories_are_checked() {
    let dir = std::env::temp_dir().join(format!("ov-inv-{}", uuid_like()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "[[server_hardware]]\nid = \"x\"\n").unwrap();
    let e = Inventory::load(&bad).unwrap_err();
    let cause = std::error::Error::source(&e).map(ToString::to_string);
    assert!(cause.unwrap_or_default().contains("missing field"), "{e:?}");
    let json = dir.join("inv.json");
    std::fs::write(&json, r#"{"users": [{"userName": "u", "password": "p"}]}"#).unwrap();
    assert_eq!(Inventory::load(&json).unwrap().users.len(), 1);
    std::fs::remove_dir_all(&dir).unwrap();
}

fn uuid_like() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// The binary serves HTTPS by default, with a certificate it generates and writes out
/// for clients to trust; plain HTTP only with `--insecure-http`.
#[test]
fn the_binary_serves_https_with_a_generated_certificate() {
    let dir = std::env::temp_dir().join(format!("ov-sim-bin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let free = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    };
    let start = |args: &[String]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_oneview-simulator"))
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    let wait_port = |port: u16| {
        let t = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(t.elapsed() < Duration::from_secs(20), "not listening");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let port = free();
    let pem = dir.join("sim.pem");
    let mut https = start(&[
        "--listen".into(),
        format!("127.0.0.1:{port}"),
        "--tls-cert-out".into(),
        pem.display().to_string(),
    ]);
    wait_port(port);
    // curl, an independent client, trusting only the written certificate.
    let curl = |url: String, ca: Option<&std::path::Path>| {
        let mut c = std::process::Command::new("curl");
        c.args(["-sS", "--max-time", "10", "--tlsv1.2"]);
        if let Some(ca) = ca {
            c.arg("--cacert").arg(ca);
        }
        c.arg(url).output().expect("curl is installed")
    };
    let out = curl(format!("https://127.0.0.1:{port}/rest/version"), Some(&pem));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["currentVersion"].is_number(), "{v}");
    // Without trusting it: refused. Plain HTTP: no answer.
    assert!(
        !curl(format!("https://127.0.0.1:{port}/rest/version"), None)
            .status
            .success()
    );
    assert!(
        !curl(format!("http://127.0.0.1:{port}/rest/version"), None)
            .status
            .success()
    );
    https.kill().unwrap();
    let _ = https.wait();

    let port = free();
    let mut plain = start(&[
        "--listen".into(),
        format!("127.0.0.1:{port}"),
        "--insecure-http".into(),
    ]);
    wait_port(port);
    let out = curl(format!("http://127.0.0.1:{port}/rest/version"), None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    plain.kill().unwrap();
    let _ = plain.wait();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// HPE's own OneView client library (`hpeOneView` from PyPI, installed by
/// `scripts/test.sh`, whose virtualenv's Python is `IRONIC_TEST_PYTHON`), a peer nobody
/// here wrote, talks to the simulator over HTTPS trusting the generated certificate:
/// login, listing, a power task it waits for, templates.
#[test]
fn hpe_oneview_library_talks_to_the_simulator_over_https() {
    let python = std::env::var("IRONIC_TEST_PYTHON").expect(
        "IRONIC_TEST_PYTHON: the Python of scripts/test.sh's virtualenv, with hpeOneView (run the tests with scripts/test.sh)",
    );
    let dir = std::env::temp_dir().join(format!("ov-sim-hpe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let pem = dir.join("sim.pem");
    let mut sim = std::process::Command::new(env!("CARGO_BIN_EXE_oneview-simulator"))
        .args(["--listen", &format!("127.0.0.1:{port}"), "--tls-cert-out"])
        .arg(&pem)
        .args(["--task-duration-ms", "50", "--inventory"])
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../deploy/examples/oneview-inventory.toml"
        ))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(t.elapsed() < Duration::from_secs(20), "not listening");
        std::thread::sleep(Duration::from_millis(20));
    }
    let script = r#"
import sys
from hpeOneView.oneview_client import OneViewClient
port, ca = sys.argv[1], sys.argv[2]
c = OneViewClient({"ip": "127.0.0.1:" + port, "ssl_certificate": ca,
                   "credentials": {"userName": "administrator", "password": "password"}})
hw = c.server_hardware.get_all()
print("hardware", len(hw), hw[0]["uri"], hw[0]["powerState"])
one = c.server_hardware.get_by_uri(hw[0]["uri"])
one.update_power_state({"powerState": "On", "powerControl": "MomentaryPress"})
print("power", c.server_hardware.get_by_uri(hw[0]["uri"]).data["powerState"])
print("templates", " ".join(t["uri"] for t in c.server_profile_templates.get_all()))
"#;
    std::fs::write(dir.join("client.py"), script).unwrap();
    let out = std::process::Command::new(python)
        .arg(dir.join("client.py"))
        .arg(port.to_string())
        .arg(&pem)
        .output()
        .unwrap();
    let _ = sim.kill();
    let _ = sim.wait();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines,
        [
            "hardware 8 /rest/server-hardware/sh-encl1-1 Off",
            "power On",
            "templates /rest/server-profile-templates/spt-ironic",
        ],
        "{stdout}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
