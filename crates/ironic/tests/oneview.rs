#![allow(clippy::unwrap_used)]
//! The `oneview` hardware type against the OneView simulator over real HTTP, on the
//! all-in-one server (SQLite, PostgreSQL) and the split deployment: the profile is
//! applied only while Ironic uses the hardware and removed after cleaning.

mod common;

use std::time::{Duration, Instant};

use common::{Backend, Server};
use oneview_simulator::{Inventory, Simulator};
use serde_json::{Value, json};

const V: &str = "1.61";
const SH: &str = "/rest/server-hardware/sh-encl1-1";

async fn simulator() -> (String, Simulator) {
    let inv = Inventory::load(std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/examples/oneview-inventory.toml"
    )))
    .unwrap();
    let sim = Simulator::new(
        &inv,
        oneview_simulator::Settings {
            task_duration: Duration::from_millis(30),
            ..Default::default()
        },
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(sim.clone().serve(listener));
    (url, sim)
}

async fn server(backend: Backend, url: Option<String>) -> Server {
    server_with(backend, url, 300).await
}

async fn server_with(backend: Backend, url: Option<String>, check_secs: u64) -> Server {
    common::start_with(backend, |cfg| {
        cfg.oneview.periodic_check_interval = check_secs;
        cfg.default.enabled_hardware_types = vec!["fake-hardware".into(), "oneview".into()];
        cfg.oneview.manager_url = url;
        cfg.oneview.username = Some("administrator".into());
        cfg.oneview.password = Some("password".into());
    })
    .await
}

async fn create(s: &Server) {
    let r = s
        .post(
            "/v1/nodes",
            V,
            &json!({"driver": "oneview", "name": "ov-1", "resource_class": "rc-ov",
                "driver_info": {"server_hardware_uri": SH, "dynamic_allocation": true},
                "properties": {"capabilities": "server_hardware_type_uri:/rest/server-hardware-types/sht-bl460c-gen9,server_profile_template_uri:/rest/server-profile-templates/spt-ironic"}}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
}

async fn hardware(sim_url: &str) -> Value {
    // The simulator's own view, through its control API.
    let state = raw_get(sim_url, "/control/state").await;
    state["serverHardware"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["uri"] == SH)
        .cloned()
        .unwrap()
}

async fn raw_get(url: &str, path: &str) -> Value {
    let addr: std::net::SocketAddr = url.trim_start_matches("http://").parse().unwrap();
    let c = Server::client(addr);
    let r = c.call("GET", path, None, None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()
}

async fn validate(s: &Server) -> Value {
    s.get("/v1/nodes/ov-1/validate", V).await.json()
}

async fn lifecycle(backend: Backend) {
    let (url, _sim) = simulator().await;
    let s = server(backend, Some(url.clone())).await;
    create(&s).await;
    // Free hardware: power and deploy validate; management needs Ironic's profile.
    let v = validate(&s).await;
    assert_eq!(v["power"]["result"], true, "{v}");
    assert_eq!(v["deploy"]["result"], true, "{v}");
    assert_eq!(v["management"]["result"], false, "{v}");
    assert_eq!(s.provision_to(V, "ov-1", "manage").await.status, 202);
    let n = s.wait_state(V, "ov-1", "manageable").await;
    assert_eq!(n["power_state"], "power off");
    // Cleaning applies a profile of ours and removes it at the end.
    assert_eq!(s.provision_to(V, "ov-1", "provide").await.status, 202);
    let n = s.wait_state(V, "ov-1", "available").await;
    assert_eq!(n["last_error"], Value::Null, "{n}");
    assert!(
        n["driver_info"].get("applied_server_profile_uri").is_none(),
        "{n}"
    );
    assert_eq!(hardware(&url).await["serverProfileUri"], Value::Null);
    let tasks = raw_get(&url, "/control/state").await["tasks"].clone();
    let names: Vec<&str> = tasks
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"Create") && names.contains(&"Delete"),
        "{names:?}"
    );
    // Deploying applies a profile that stays while the node is active.
    assert_eq!(s.provision_to(V, "ov-1", "active").await.status, 202);
    let n = s.wait_state(V, "ov-1", "active").await;
    let mine = n["driver_info"]["applied_server_profile_uri"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(hardware(&url).await["serverProfileUri"], mine.as_str());
    let v = validate(&s).await;
    assert_eq!(v["management"]["result"], true, "{v}");
    // Power goes through the appliance.
    let r = s
        .put(
            "/v1/nodes/ov-1/states/power",
            V,
            Some(&json!({"target": "power on"})),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(hardware(&url).await["powerState"], "On");
    assert_eq!(
        s.get("/v1/nodes/ov-1", V).await.json()["power_state"],
        "power on"
    );
    // Undeploy: cleaning reuses the profile, then removes it.
    assert_eq!(s.provision_to(V, "ov-1", "deleted").await.status, 202);
    let n = s.wait_state(V, "ov-1", "available").await;
    assert_eq!(n["last_error"], Value::Null, "{n}");
    assert!(
        n["driver_info"].get("applied_server_profile_uri").is_none(),
        "{n}"
    );
    let h = hardware(&url).await;
    assert_eq!(h["serverProfileUri"], Value::Null);
    assert_eq!(h["powerState"], "Off");
    // Taken by a OneView user: power validation fails and a deploy is refused.
    let addr: std::net::SocketAddr = url.trim_start_matches("http://").parse().unwrap();
    let r = Server::client(addr)
        .call(
            "POST",
            "/control/server-hardware/sh-encl1-1/take",
            None,
            Some("{}"),
        )
        .await;
    assert_eq!(r.status, 200);
    let v = validate(&s).await;
    assert_eq!(v["power"]["result"], false, "{v}");
    assert!(
        v["power"]["reason"]
            .as_str()
            .unwrap()
            .contains("in use by OneView"),
        "{v}"
    );
    let r = s
        .put(
            "/v1/nodes/ov-1/states/provision",
            V,
            Some(&json!({"target": "active"})),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(
        s.get("/v1/nodes/ov-1", V).await.json()["provision_state"],
        "available"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_sqlite() {
    lifecycle(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_postgres() {
    lifecycle(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_split() {
    lifecycle(Backend::Split).await;
}

/// Without an appliance configured, a `oneview` node fails validation and says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unconfigured_appliance_is_a_clear_validation_error() {
    let s = server(Backend::Sqlite, None).await;
    create(&s).await;
    let v = validate(&s).await;
    assert_eq!(v["power"]["result"], false, "{v}");
    assert!(
        v["power"]["reason"]
            .as_str()
            .unwrap()
            .contains("[oneview] manager_url is not set"),
        "{v}"
    );
    s.stop().await;
}

async fn control(url: &str, path: &str) {
    let addr: std::net::SocketAddr = url.trim_start_matches("http://").parse().unwrap();
    let r = Server::client(addr)
        .call("POST", &format!("/control/{path}"), None, Some("{}"))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
}

/// Polls (bounded) until the node satisfies `ok`.
async fn wait_until(s: &Server, what: &str, ok: impl Fn(&Value) -> bool) -> Value {
    let start = Instant::now();
    loop {
        let n = s.get("/v1/nodes/ov-1", V).await.json();
        if ok(&n) {
            return n;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "never {what}: {n}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The three periodic checks on their races: taken while available, freed, and taken
/// between scheduling and cleaning (clean failed).
async fn periodic_checks(backend: Backend) {
    let (url, _sim) = simulator().await;
    let s = server_with(backend, Some(url.clone()), 1).await;
    create(&s).await;
    assert_eq!(s.provision_to(V, "ov-1", "manage").await.status, 202);
    s.wait_state(V, "ov-1", "manageable").await;
    assert_eq!(s.provision_to(V, "ov-1", "provide").await.status, 202);
    s.wait_state(V, "ov-1", "available").await;

    // 1. A OneView user takes the available node.
    control(&url, "server-hardware/sh-encl1-1/take").await;
    let n = wait_until(&s, "taken out of service", |n| {
        n["provision_state"] == "manageable"
    })
    .await;
    assert_eq!(n["maintenance"], true);
    assert_eq!(n["maintenance_reason"], "node in use by OneView");
    // 2. ...and frees it: maintenance off, cleaned, available, no profile left.
    control(&url, "server-hardware/sh-encl1-1/free").await;
    let n = wait_until(&s, "back in service", |n| {
        n["provision_state"] == "available" && n["maintenance"] == false
    })
    .await;
    assert_eq!(n["last_error"], Value::Null, "{n}");
    assert_eq!(hardware(&url).await["serverProfileUri"], Value::Null);

    // 3. Taken while Ironic moves it into service: cleaning cannot allocate the
    // hardware (clean failed), the check takes it out of service, and it comes back
    // once freed.
    assert_eq!(s.provision_to(V, "ov-1", "manage").await.status, 202);
    s.wait_state(V, "ov-1", "manageable").await;
    control(&url, "server-hardware/sh-encl1-1/take").await;
    assert_eq!(s.provision_to(V, "ov-1", "provide").await.status, 202);
    let n = wait_until(&s, "out of service after a failed cleaning", |n| {
        n["provision_state"] == "manageable" && n["maintenance"] == true
    })
    .await;
    assert_eq!(n["maintenance_reason"], "node in use by OneView");
    assert!(
        n["last_error"]
            .as_str()
            .unwrap()
            .contains("server hardware allocation error"),
        "{n}"
    );
    control(&url, "server-hardware/sh-encl1-1/free").await;
    wait_until(&s, "back in service", |n| {
        n["provision_state"] == "available" && n["maintenance"] == false
    })
    .await;
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn periodic_checks_sqlite() {
    periodic_checks(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn periodic_checks_split() {
    periodic_checks(Backend::Split).await;
}

/// Appliance failures end in failed states with a clear `last_error`, the node
/// unlocked and nothing left transient.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appliance_failures_are_clear() {
    let (url, _sim) = simulator().await;
    let s = server(Backend::Sqlite, Some(url.clone())).await;
    create(&s).await;
    assert_eq!(s.provision_to(V, "ov-1", "manage").await.status, 202);
    s.wait_state(V, "ov-1", "manageable").await;
    // The profile task fails: cleaning cannot start (clean failed), the reason shown.
    let addr: std::net::SocketAddr = url.trim_start_matches("http://").parse().unwrap();
    let r = Server::client(addr)
        .call(
            "POST",
            "/control/fail-next-tasks",
            None,
            Some(
                r#"{"errorCode": "EnclosureBayUnavailableForProfile", "message": "bay 1 is busy"}"#,
            ),
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(s.provision_to(V, "ov-1", "provide").await.status, 202);
    let n = s.wait_state(V, "ov-1", "clean failed").await;
    let e = n["last_error"].as_str().unwrap();
    assert!(
        e.contains("server hardware allocation error") && e.contains("bay 1 is busy"),
        "{e}"
    );
    assert_eq!(n["reservation"], Value::Null);
    assert_eq!(
        hardware(&url).await["serverProfileUri"],
        Value::Null,
        "the failed profile is gone"
    );
    // An expired session is renewed without anyone noticing.
    control(&url, "expire-sessions").await;
    assert_eq!(s.provision_to(V, "ov-1", "manage").await.status, 202);
    s.wait_state(V, "ov-1", "manageable").await;
    assert_eq!(s.provision_to(V, "ov-1", "provide").await.status, 202);
    s.wait_state(V, "ov-1", "available").await;
    // The appliance answers errors: the deploy fails with its answer.
    let r = Server::client(addr)
        .call(
            "POST",
            "/control/fail-next-calls",
            None,
            Some(r#"{"count": 3, "status": 503}"#),
        )
        .await;
    assert_eq!(r.status, 200);
    let r = s
        .put(
            "/v1/nodes/ov-1/states/provision",
            V,
            Some(&json!({"target": "active"})),
        )
        .await;
    assert_eq!(
        r.status, 400,
        "validation sees the appliance fail: {}",
        r.body
    );
    assert!(r.fault().contains("OneView answered 503"), "{}", r.fault());
    assert_eq!(
        s.get("/v1/nodes/ov-1", V).await.json()["reservation"],
        Value::Null
    );
    s.stop().await;

    // Nobody at the configured address: verification fails, the node stays in enroll.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let s = server(Backend::Sqlite, Some(format!("http://{closed}"))).await;
    create(&s).await;
    assert_eq!(s.provision_to(V, "ov-1", "manage").await.status, 202);
    let n = wait_until(&s, "verification failed", |n| {
        n["provision_state"] == "enroll" && !n["last_error"].is_null()
    })
    .await;
    assert!(
        n["last_error"]
            .as_str()
            .unwrap()
            .contains("OneView appliance unreachable"),
        "{n}"
    );
    assert_eq!(n["reservation"], Value::Null);
    let v = validate(&s).await;
    assert!(
        v["power"]["reason"]
            .as_str()
            .unwrap()
            .contains("unreachable"),
        "{v}"
    );
    s.stop().await;
}

async fn create_pre_allocated(s: &Server, name: &str, sh: &str) {
    let r = s
        .post(
            "/v1/nodes",
            V,
            &json!({"driver": "oneview", "name": name, "resource_class": "rc-ov",
                "driver_info": {"server_hardware_uri": format!("/rest/server-hardware/{sh}"), "dynamic_allocation": "False"},
                "properties": {"capabilities": "server_hardware_type_uri:/rest/server-hardware-types/sht-bl460c-gen9,server_profile_template_uri:/rest/server-profile-templates/spt-ironic"}}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
}

async fn to_state(s: &Server, name: &str, target: &str, state: &str) {
    let r = s
        .put(
            &format!("/v1/nodes/{name}/states/provision"),
            V,
            Some(&json!({"target": target})),
        )
        .await;
    assert_eq!(r.status, 202, "{target}: {}", r.body);
    let start = Instant::now();
    while s.get(&format!("/v1/nodes/{name}"), V).await.json()["provision_state"] != state {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{name} never reached {state}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn migrate(db: &str, url: &str, args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ironic-oneview"))
        .arg("migrate-to-dynamic")
        .args(args)
        .env("IRONIC_DATABASE__URL", db)
        .env("IRONIC_ONEVIEW__MANAGER_URL", url)
        .env("IRONIC_ONEVIEW__USERNAME", "administrator")
        .env("IRONIC_ONEVIEW__PASSWORD", "password")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Pre-allocation nodes (the deprecated model) work without Ironic touching profiles,
/// and `ironic-oneview migrate-to-dynamic` moves a mixed set of nodes, first as a dry
/// run that changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pre_allocation_and_migration() {
    let (url, _sim) = simulator().await;
    let s = server(Backend::Postgres, Some(url.clone())).await;
    let db = s.testdb.as_ref().unwrap().url.clone();
    // The operator applied profiles in OneView at enrolment (the control API plays it).
    control(&url, "server-hardware/sh-encl1-5/take").await;
    control(&url, "server-hardware/sh-encl1-6/take").await;
    let profile_of = |sh: &'static str| {
        let url = url.clone();
        async move {
            let state = raw_get(&url, "/control/state").await;
            state["serverHardware"]
                .as_array()
                .unwrap()
                .iter()
                .find(|h| h["uuid"] == sh)
                .unwrap()["serverProfileUri"]
                .clone()
        }
    };
    let p5 = profile_of("sh-encl1-5").await;
    let p6 = profile_of("sh-encl1-6").await;
    create_pre_allocated(&s, "pa-active", "sh-encl1-5").await;
    create_pre_allocated(&s, "pa-idle", "sh-encl1-6").await;
    create_pre_allocated(&s, "pa-enroll", "sh-encl1-7").await;
    create(&s).await; // ov-1: already dynamic
    // Pre-allocation: power works on hardware with the operator's profile, and
    // deploying and cleaning leave the profiles alone.
    for name in ["pa-active", "pa-idle"] {
        to_state(&s, name, "manage", "manageable").await;
        to_state(&s, name, "provide", "available").await;
    }
    let r = s
        .patch(
            "/v1/nodes/pa-active",
            V,
            &json!([{"op": "add", "path": "/instance_uuid", "value": "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee"}]),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    to_state(&s, "pa-active", "active", "active").await;
    assert_eq!(profile_of("sh-encl1-5").await, p5);
    assert_eq!(profile_of("sh-encl1-6").await, p6);

    // Dry run: the plan, nothing changed.
    let (ok, text) = migrate(&db, &url, &["--all", "--dry-run"]);
    assert!(ok, "{text}");
    assert!(
        text.contains("[dry run]") && text.contains("nothing changed"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "profile {} becomes Ironic's",
            p5.as_str().unwrap()
        )),
        "{text}"
    );
    assert_eq!(profile_of("sh-encl1-6").await, p6);
    let n = s.get("/v1/nodes/pa-idle", V).await.json();
    assert_eq!(n["driver_info"]["dynamic_allocation"], "False");

    // The real run; the idle node's server is on (an operator booted it), which the
    // appliance would not let a profile be removed from.
    let addr: std::net::SocketAddr = url.trim_start_matches("http://").parse().unwrap();
    let r = Server::client(addr)
        .call(
            "POST",
            "/control/server-hardware/sh-encl1-6/power",
            None,
            Some(r#"{"powerState": "On"}"#),
        )
        .await;
    assert_eq!(r.status, 200);
    let (ok, text) = migrate(&db, &url, &["--all"]);
    assert!(ok, "{text}");
    assert!(
        text.contains("4 node(s) considered, 3 migrated, 1 skipped, 0 failed"),
        "{text}"
    );
    let a = s.get("/v1/nodes/pa-active", V).await.json();
    assert_eq!(a["driver_info"]["dynamic_allocation"], true);
    assert_eq!(a["driver_info"]["applied_server_profile_uri"], p5);
    assert_eq!(
        profile_of("sh-encl1-5").await,
        p5,
        "the instance keeps its profile"
    );
    let i = s.get("/v1/nodes/pa-idle", V).await.json();
    assert_eq!(i["driver_info"]["dynamic_allocation"], true);
    assert_eq!(i["maintenance"], false);
    assert_eq!(i["provision_state"], "available");
    assert_eq!(
        profile_of("sh-encl1-6").await,
        Value::Null,
        "the idle node's profile is gone"
    );
    let e = s.get("/v1/nodes/pa-enroll", V).await.json();
    assert_eq!(e["driver_info"]["dynamic_allocation"], true);
    assert_eq!(e["reservation"], Value::Null);
    // Migrated nodes are plain dynamic nodes now: the active one is Ironic's.
    let v = s.get("/v1/nodes/pa-active/validate", V).await.json();
    assert_eq!(v["management"]["result"], true, "{v}");
    // Again: nothing left to do.
    let (ok, text) = migrate(&db, &url, &["--nodes", "pa-idle"]);
    assert!(
        ok && text.contains("already uses dynamic allocation"),
        "{text}"
    );
    s.stop().await;
}
