#![allow(clippy::unwrap_used)]
//! The OneView client against the simulator over real HTTP on 127.0.0.1.

use std::time::Duration;

use ironic_drivers::oneview::client::{Client, OvError, Settings};
use oneview_simulator::{Inventory, Simulator};
use serde_json::{Value, json};

async fn simulator(task_ms: u64) -> (String, Simulator) {
    let inv = Inventory::load(std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/examples/oneview-inventory.toml"
    )))
    .unwrap();
    let sim = Simulator::new(
        &inv,
        oneview_simulator::Settings {
            task_duration: Duration::from_millis(task_ms),
            ..Default::default()
        },
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(sim.clone().serve(listener));
    (url, sim)
}

fn settings(url: &str, password: &str) -> Settings {
    Settings {
        manager_url: url.into(),
        username: "administrator".into(),
        password: password.into(),
        task_timeout: Duration::from_secs(5),
        poll_interval: Duration::from_millis(10),
        request_timeout: Duration::from_secs(5),
        max_retries: 2,
        retry_pause: Duration::from_millis(10),
        allow_insecure: false,
        ca_file: None,
    }
}

async fn control(url: &str, path: &str, body: Value) {
    // The control API through a client of its own (no session needed).
    let c = hyper_util_client();
    let req = hyper::Request::post(format!("{url}/control/{path}"))
        .body(http_body_util::Full::new(bytes::Bytes::from(
            body.to_string(),
        )))
        .unwrap();
    let r = c.request(req).await.unwrap();
    assert_eq!(r.status(), 200);
}

fn hyper_util_client() -> hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    http_body_util::Full<bytes::Bytes>,
> {
    hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build_http()
}

#[tokio::test]
async fn session_reuse_relogin_and_tasks() {
    let (url, sim) = simulator(50).await;
    let c = Client::new(settings(&url, "password")).unwrap();
    let sh = c.get("/rest/server-hardware/sh-encl1-1").await.unwrap();
    assert_eq!(sh["powerState"], "Off");
    c.get("/rest/server-hardware/sh-encl1-2").await.unwrap();
    // One login served both calls (the simulator counts authenticated calls).
    assert_eq!(sim.calls(), 2);
    // A power change is a task the client waits for.
    let t = c
        .run(
            "PUT",
            "/rest/server-hardware/sh-encl1-1/powerState",
            &json!({"powerState": "On"}),
        )
        .await
        .unwrap();
    assert_eq!(t["taskState"], "Completed");
    assert_eq!(
        c.get("/rest/server-hardware/sh-encl1-1").await.unwrap()["powerState"],
        "On"
    );
    // The session expires: the client logs in again and the call succeeds.
    control(&url, "expire-sessions", json!({})).await;
    assert!(c.get("/rest/server-hardware/sh-encl1-1").await.is_ok());
    // A failed task is an error with OneView's code and message.
    control(
        &url,
        "fail-next-tasks",
        json!({"errorCode": "PowerFailed", "message": "iLO is busy"}),
    )
    .await;
    let e = c
        .run(
            "PUT",
            "/rest/server-hardware/sh-encl1-1/powerState",
            &json!({"powerState": "Off"}),
        )
        .await
        .unwrap_err();
    assert_eq!(
        e,
        OvError::Task {
            code: "PowerFailed".into(),
            message: "iLO is busy".into()
        }
    );
    assert!(e.to_string().contains("iLO is busy"));
    // A 404 is recognisable; a 5xx keeps its status.
    assert!(
        c.get("/rest/server-profiles/nope")
            .await
            .unwrap_err()
            .is_not_found()
    );
    // Busy (409) is retried up to max_retries (2) times; a third 409 is the answer.
    control(&url, "fail-next-calls", json!({"count": 2, "status": 409})).await;
    assert!(c.get("/rest/server-hardware/sh-encl1-1").await.is_ok());
    control(&url, "fail-next-calls", json!({"count": 3, "status": 409})).await;
    assert!(matches!(
        c.get("/rest/server-hardware/sh-encl1-1").await,
        Err(OvError::Http { status: 409, .. })
    ));
    control(&url, "fail-next-calls", json!({"status": 503})).await;
    assert!(matches!(
        c.get("/rest/server-hardware/sh-encl1-1").await,
        Err(OvError::Http { status: 503, .. })
    ));
}

#[tokio::test]
async fn failures_are_clear() {
    let (url, _sim) = simulator(5000).await;
    // Wrong password.
    let c = Client::new(settings(&url, "nope")).unwrap();
    let e = c.get("/rest/server-hardware/sh-encl1-1").await.unwrap_err();
    assert!(
        matches!(&e, OvError::Http { status: 401, code, .. } if code == "AUTHN_AUTH_FAIL"),
        "{e}"
    );
    // A task that outlasts the wait: a bounded error, not a hang.
    let mut s = settings(&url, "password");
    s.task_timeout = Duration::from_millis(300);
    let c = Client::new(s).unwrap();
    let e = c
        .run(
            "PUT",
            "/rest/server-hardware/sh-encl1-4/powerState",
            &json!({"powerState": "On"}),
        )
        .await
        .unwrap_err();
    assert!(e.to_string().contains("did not end within"), "{e}");
    // Nobody listening.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let c = Client::new(settings(&format!("http://{closed}"), "password")).unwrap();
    let e = c.get("/rest/server-hardware/x").await.unwrap_err();
    assert!(matches!(e, OvError::Unreachable(_)), "{e}");
    assert!(
        e.to_string().starts_with("OneView appliance unreachable"),
        "{e}"
    );
    // A scheme we do not speak; HTTPS is the default.
    assert!(matches!(
        Client::new(settings("ftp://10.0.0.1", "p")),
        Err(OvError::Config(_))
    ));
    assert!(Client::new(settings("10.0.0.1", "p")).is_ok());
}

/// HTTPS against a TLS server with a self-signed certificate (`openssl s_server`, which
/// is no OneView: only the handshake matters here): refused with the built-in roots,
/// accepted with its certificate as the CA file, or with verification off.
/// The simulator speaks HTTPS as the appliance does (a certificate it generates): the
/// client checks it against the web roots (refused), the certificate as CA bundle or no
/// verification (both work end to end: login, a read).
#[tokio::test]
async fn https_certificates_are_checked() {
    let dir = std::env::temp_dir().join(format!("ov-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (cert, key) = oneview_simulator::self_signed(&["127.0.0.1".into()]).unwrap();
    std::fs::write(dir.join("cert.pem"), &cert).unwrap();
    std::fs::write(dir.join("key.pem"), &key).unwrap();
    let inv = Inventory::load(std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/examples/oneview-inventory.toml"
    )))
    .unwrap();
    let sim = Simulator::new(&inv, oneview_simulator::Settings::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://{}", listener.local_addr().unwrap());
    let acceptor = oneview_simulator::tls_acceptor(&cert, &key).unwrap();
    let server = tokio::spawn(sim.serve_tls(listener, acceptor));

    let cert_error = |e: &OvError| e.to_string().to_lowercase().contains("certificate");
    // The built-in web roots do not know a self-signed certificate.
    let e = Client::new(settings(&url, "password"))
        .unwrap()
        .get("/rest/server-hardware/sh-encl1-1")
        .await
        .unwrap_err();
    assert!(
        matches!(e, OvError::Unreachable(_)) && cert_error(&e),
        "{e}"
    );
    // Its certificate as the CA bundle, or no verification: logged in, answered.
    let mut trusted = settings(&url, "password");
    trusted.ca_file = Some(dir.join("cert.pem").display().to_string());
    let mut insecure = settings(&url, "password");
    insecure.allow_insecure = true;
    for s in [trusted, insecure] {
        let sh = Client::new(s)
            .unwrap()
            .get("/rest/server-hardware/sh-encl1-1")
            .await
            .unwrap();
        assert_eq!(sh["powerState"], "Off", "{sh}");
    }
    // Plain HTTP gets no OneView answer from an HTTPS appliance.
    let plain = url.replace("https://", "http://");
    assert!(
        Client::new(settings(&plain, "password"))
            .unwrap()
            .get("/rest/server-hardware/sh-encl1-1")
            .await
            .is_err()
    );
    // A CA file that is not one.
    let mut s = settings(&url, "password");
    s.ca_file = Some(dir.join("key.pem").display().to_string());
    assert!(matches!(Client::new(s), Err(OvError::Config(_))));
    server.abort();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The driver's interfaces directly against the simulator: cleaning allocates a
/// profile (reused on a second preparation), the boot device moves to the front of the
/// profile's boot order, tearing cleaning down removes the profile.
#[tokio::test]
async fn driver_allocation_and_boot_order() {
    use ironic_drivers::interfaces::{BootDevice, Driver, NodeInfo};
    use ironic_drivers::oneview::{APPLIED_PROFILE, OneView, Owner};
    let (url, _sim) = simulator(20).await;
    let ov = OneView::new(settings(&url, "password"));
    let mut node = ironic_model::Node::blank(
        ironic_model::NodeUuid::new_v4(),
        "oneview".into(),
        ironic_model::Version::MAX,
    );
    node.driver_info = json!({"server_hardware_uri": "/rest/server-hardware/sh-encl1-8", "dynamic_allocation": true})
        .as_object()
        .cloned()
        .unwrap();
    node.properties = json!({"capabilities": "server_hardware_type_uri:/rest/server-hardware-types/sht-bl460c-gen9,server_profile_template_uri:/rest/server-profile-templates/spt-ironic"})
        .as_object()
        .cloned()
        .unwrap();
    assert_eq!(
        ov.core.owner(NodeInfo::from(&node)).await.unwrap(),
        Owner::Free
    );
    // No profile yet: the boot device cannot be set.
    let disk = BootDevice {
        device: "disk".into(),
        persistent: true,
    };
    assert!(
        ov.management()
            .set_boot_device(NodeInfo::from(&node), disk.clone())
            .await
            .is_err()
    );
    let changes = ov
        .deploy()
        .prepare_cleaning(NodeInfo::from(&node))
        .await
        .unwrap();
    changes.apply(&mut node);
    let mine = node.driver_info[APPLIED_PROFILE]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        ov.core.owner(NodeInfo::from(&node)).await.unwrap(),
        Owner::Ironic
    );
    // Preparing again reuses the profile.
    let again = ov
        .deploy()
        .prepare_cleaning(NodeInfo::from(&node))
        .await
        .unwrap();
    assert!(again.is_empty(), "{again:?}");
    // The template's order is PXE first; disk moves to the front.
    let pxe = ov
        .management()
        .get_boot_device(NodeInfo::from(&node))
        .await
        .unwrap();
    assert_eq!(pxe.unwrap().device, "pxe");
    ov.management()
        .set_boot_device(NodeInfo::from(&node), disk.clone())
        .await
        .unwrap();
    assert_eq!(
        ov.management()
            .get_boot_device(NodeInfo::from(&node))
            .await
            .unwrap(),
        Some(disk)
    );
    let c = Client::new(settings(&url, "password")).unwrap();
    assert_eq!(
        c.get(&mine).await.unwrap()["boot"]["order"],
        json!(["HardDisk", "PXE"])
    );
    let floppy = BootDevice {
        device: "floppy".into(),
        persistent: true,
    };
    assert!(
        ov.management()
            .set_boot_device(NodeInfo::from(&node), floppy)
            .await
            .is_err()
    );
    // Power through the driver, then tearing cleaning down removes the profile.
    let on = ov
        .power()
        .set_power_state(NodeInfo::from(&node), "rebooting", None)
        .await
        .unwrap();
    assert_eq!(on, "power on");
    let changes = ov
        .deploy()
        .tear_down_cleaning(NodeInfo::from(&node))
        .await
        .unwrap();
    assert_eq!(changes.power_state.as_deref(), Some("power off"));
    changes.apply(&mut node);
    assert!(node.driver_info.get(APPLIED_PROFILE).is_none());
    assert!(c.get(&mine).await.unwrap_err().is_not_found());
    assert_eq!(
        ov.core.owner(NodeInfo::from(&node)).await.unwrap(),
        Owner::Free
    );
}

/// A path from a node's driver_info (anyone who may PATCH a node sets it) or from an
/// answer never sends the request, and with it the appliance's session, anywhere but
/// under /rest/ of the configured appliance: each hostile value is refused before
/// anything is sent, and a listener standing for "another host" sees no connection.
#[tokio::test]
async fn hostile_paths_never_leave_the_appliance() {
    let (url, sim) = simulator(10).await;
    let other = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = other.local_addr().unwrap().port();
    let reached = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = reached.clone();
    tokio::spawn(async move {
        while let Ok((_s, _)) = other.accept().await {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    });
    let c = Client::new(settings(&url, "password")).unwrap();
    for hostile in [
        format!("@127.0.0.1:{port}/rest/server-hardware/x"),
        format!("//127.0.0.1:{port}/rest/server-hardware/x"),
        format!("http://127.0.0.1:{port}/rest/server-hardware/x"),
        format!(":{port}@127.0.0.1/rest/server-hardware/x"),
        "/rest/../control/reset".to_string(),
        "/rest/%2e%2e/control/reset".to_string(),
        "/control/reset".to_string(),
        "/rest/x\r\nHost: evil".to_string(),
    ] {
        match c.get(&hostile).await {
            Err(OvError::Refused(m)) => assert!(m.contains("/rest/"), "{m}"),
            other => panic!("{hostile:?}: expected a refusal, got {other:?}"),
        }
    }
    assert_eq!(reached.load(std::sync::atomic::Ordering::SeqCst), 0);
    assert_eq!(sim.calls(), 0, "nothing reached the appliance either");
    // The same client still works for a real path, and an absolute URL on the
    // appliance itself (as a task's Location may be) is followed.
    c.get("/rest/server-hardware/sh-encl1-1").await.unwrap();
    c.get(&format!("{url}/rest/server-hardware/sh-encl1-1"))
        .await
        .unwrap();
    assert_eq!(sim.calls(), 2);
}
