#![allow(clippy::unwrap_used)]
//! The `ipmi` hardware type against a real IPMI peer nobody here wrote: pyghmi's fake
//! BMC (`fakebmc`, user `admin`, password `password`), driven by Debian's `ipmitool`,
//! both installed by `scripts/test.sh` (which exports `IRONIC_TEST_PYTHON`, the
//! virtualenv's Python with pyghmi). The fake BMC listens on loopback only.

mod common;

use common::peers::{FakeBmc, free_udp_port};
use common::{Backend, Server, until};
use serde_json::{Value, json};
use std::time::Duration;

const V: &str = "1.115";

async fn ipmi_node(s: &Server, name: &str, bmc: &FakeBmc, password: &str) -> String {
    let r = s
        .post(
            "/v1/nodes",
            V,
            // The ramdisk deploy: these tests have no agent ramdisk to write an image.
            &json!({"driver": "ipmi", "name": name, "deploy_interface": "ramdisk", "driver_info": {
                "ipmi_address": "127.0.0.1", "ipmi_port": bmc.port.to_string(),
                "ipmi_username": "admin", "ipmi_password": password}}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.json()["driver_info"]["ipmi_password"], "******");
    assert!(!r.body.contains(&format!("\"{password}\"")), "{}", r.body);
    r.json()["uuid"].as_str().unwrap().to_string()
}

async fn node(s: &Server, node: &str) -> Value {
    s.get(&format!("/v1/nodes/{node}"), V).await.json()
}

fn quick(c: &mut ironic_config::Config) {
    // The fake BMC keeps up with any pace; an unreachable one is given up on quickly.
    c.ipmi.min_command_interval = 0.0;
    c.ipmi.command_retry_timeout = 3;
}

async fn lifecycle(backend: Backend) {
    let bmc = FakeBmc::start().await;
    let s = common::start_with(backend, quick).await;

    let d = s.get("/v1/drivers/ipmi", V).await;
    assert_eq!(d.status, 200, "{}", d.body);
    assert_eq!(d.json()["default_power_interface"], "ipmitool");
    // Upstream's defaults: the agent writes images, iPXE boots it.
    assert_eq!(d.json()["default_deploy_interface"], "direct");
    assert_eq!(d.json()["default_boot_interface"], "ipxe");

    // Wrong credentials: a clear error naming the BMC and the fields, not the password.
    let bad = ipmi_node(&s, "ipmi-bad", &bmc, "not-the-password").await;
    let r = s
        .get(&format!("/v1/nodes/{bad}/management/boot_device"), V)
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(
        r.fault().contains("refused the credentials in driver_info")
            && r.fault().contains(&format!("127.0.0.1:{}", bmc.port)),
        "{}",
        r.body
    );
    assert!(!r.body.contains("not-the-password"), "{}", r.body);
    assert_eq!(s.provision_to(V, "ipmi-bad", "manage").await.status, 202);
    let n = s.wait_state(V, "ipmi-bad", "enroll").await;
    let err = n["last_error"].as_str().unwrap_or_default();
    assert!(err.contains("refused the credentials"), "{n}");
    assert!(!err.contains("not-the-password"), "{n}");

    let id = ipmi_node(&s, "ipmi-0", &bmc, "password").await;
    let v = s.get(&format!("/v1/nodes/{id}/validate"), V).await.json();
    assert_eq!(v["power"]["result"], true, "{v}");
    assert_eq!(v["management"]["result"], true, "{v}");
    assert_eq!(s.provision_to(V, "ipmi-0", "manage").await.status, 202);
    let n = s.wait_state(V, "ipmi-0", "manageable").await;
    assert_eq!(n["power_state"], "power off", "{n}");

    // Power: each change reaches the BMC.
    for (target, expect, shown) in [
        ("power on", "power on", "Chassis Power is on"),
        ("rebooting", "power on", "Chassis Power is on"),
        ("power off", "power off", "Chassis Power is off"),
    ] {
        let r = s
            .put(
                &format!("/v1/nodes/{id}/states/power"),
                V,
                Some(&json!({"target": target})),
            )
            .await;
        assert_eq!(r.status, 202, "{target}: {}", r.body);
        until(target, Duration::from_secs(30), || async {
            let n = node(&s, &id).await;
            n["power_state"] == expect && n["target_power_state"].is_null()
        })
        .await;
        assert_eq!(node(&s, &id).await["last_error"], json!(null));
        assert_eq!(bmc.power(), shown, "{target}");
    }

    // Boot device round trips (this BMC applies every override to the next boot only).
    for dev in ["pxe", "disk", "cdrom", "bios"] {
        let r = s
            .put(
                &format!("/v1/nodes/{id}/management/boot_device"),
                V,
                Some(&json!({"boot_device": dev, "persistent": true})),
            )
            .await;
        assert_eq!(r.status, 204, "{dev}: {}", r.body);
        let got = s
            .get(&format!("/v1/nodes/{id}/management/boot_device"), V)
            .await
            .json();
        assert_eq!(got["boot_device"], dev, "{got}");
    }
    assert!(bmc.boot_flags().contains("Force Boot into BIOS Setup"));
    let r = s
        .put(
            &format!("/v1/nodes/{id}/management/boot_device"),
            V,
            Some(&json!({"boot_device": "floppy"})),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    let sup = s
        .get(
            &format!("/v1/nodes/{id}/management/boot_device/supported"),
            V,
        )
        .await
        .json();
    assert_eq!(
        sup["supported_boot_devices"],
        json!(["pxe", "disk", "cdrom", "bios", "safe"])
    );
    // This BMC does not implement the diagnostic interrupt: the refusal is reported.
    let r = s
        .put(
            &format!("/v1/nodes/{id}/management/inject_nmi"),
            V,
            Some(&json!({})),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.fault().contains("power diag"), "{}", r.body);

    // Deploy (ramdisk over the network boot): next boot PXE, the node on; undeploy
    // powers it off.
    assert_eq!(s.provision_to(V, "ipmi-0", "provide").await.status, 202);
    s.wait_state(V, "ipmi-0", "available").await;
    assert_eq!(s.provision_to(V, "ipmi-0", "active").await.status, 202);
    let n = s.wait_state(V, "ipmi-0", "active").await;
    assert_eq!(n["power_state"], "power on", "{n}");
    assert_eq!(bmc.power(), "Chassis Power is on");
    assert!(
        bmc.boot_flags().contains("Force PXE"),
        "{}",
        bmc.boot_flags()
    );
    assert_eq!(s.provision_to(V, "ipmi-0", "deleted").await.status, 202);
    let n = s.wait_state(V, "ipmi-0", "available").await;
    assert_eq!(n["power_state"], "power off", "{n}");
    assert_eq!(bmc.power(), "Chassis Power is off");

    // In-band inspection (`agent`): the node boots from the network once (the operator's
    // DHCP and TFTP serve the ramdisk) and is powered on; the ramdisk's data ends it,
    // and the node is powered off again.
    assert_eq!(s.provision_to(V, "ipmi-0", "manage").await.status, 202);
    s.wait_state(V, "ipmi-0", "manageable").await;
    let r = s
        .patch(
            "/v1/nodes/ipmi-0",
            V,
            &json!([{"op": "replace", "path": "/inspect_interface", "value": "agent"}]),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let mac = "52:54:00:12:34:56";
    let r = s
        .post("/v1/ports", V, &json!({"node_uuid": id, "address": mac}))
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(s.provision_to(V, "ipmi-0", "inspect").await.status, 202);
    s.wait_state(V, "ipmi-0", "inspect wait").await;
    assert_eq!(bmc.power(), "Chassis Power is on");
    assert!(
        bmc.boot_flags().contains("Force PXE"),
        "{}",
        bmc.boot_flags()
    );
    let r = s
        .post(
            "/v1/continue_inspection",
            "1.84",
            &json!({"inventory": {"interfaces": [{"name": "eth0", "mac_address": mac}],
                                  "cpu": {"architecture": "x86_64", "count": 4}}}),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let n = s.wait_state(V, "ipmi-0", "manageable").await;
    assert_eq!(n["properties"]["cpu_arch"], "x86_64", "{n}");
    until("the node powers off", Duration::from_secs(30), || async {
        bmc.power() == "Chassis Power is off"
    })
    .await;

    // A BMC that is not there: retried until command_retry_timeout, then an error
    // naming it.
    let gone = s
        .post(
            "/v1/nodes",
            V,
            &json!({"driver": "ipmi", "name": "ipmi-gone", "driver_info": {
                "ipmi_address": "127.0.0.1", "ipmi_port": free_udp_port(),
                "ipmi_username": "admin", "ipmi_password": "password"}}),
        )
        .await;
    assert_eq!(gone.status, 201, "{}", gone.body);
    let r = s.get("/v1/nodes/ipmi-gone/management/boot_device", V).await;
    assert!(r.status >= 400, "{}", r.body);
    assert!(r.fault().contains("did not answer"), "{}", r.body);

    // Invalid driver_info is refused by validation, naming the field.
    let r = s
        .patch(
            "/v1/nodes/ipmi-gone",
            V,
            &json!([{"op": "add", "path": "/driver_info/ipmi_bridging", "value": "dual"}]),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let v = s.get("/v1/nodes/ipmi-gone/validate", V).await.json();
    assert_eq!(v["power"]["result"], false, "{v}");
    assert!(
        v["power"]["reason"]
            .as_str()
            .unwrap()
            .contains("bridging is not supported"),
        "{v}"
    );
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipmi_lifecycle_all_in_one() {
    lifecycle(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipmi_lifecycle_split() {
    lifecycle(Backend::Split).await;
}

/// The power-state sync through `ipmitool`: a change behind our back is recorded, a
/// BMC that stops answering puts the node into maintenance with `power failure`, and
/// its return takes it out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipmi_power_sync() {
    let mut bmc = FakeBmc::start().await;
    let s = common::start_with(Backend::Sqlite, |c| {
        quick(c);
        c.ipmi.command_retry_timeout = 1;
        c.conductor.sync_power_state_interval = 1;
        c.conductor.power_state_sync_max_retries = 2;
        c.conductor.force_power_state_during_sync = false;
    })
    .await;
    let id = ipmi_node(&s, "ipmi-sync", &bmc, "password").await;
    assert_eq!(s.provision_to(V, "ipmi-sync", "manage").await.status, 202);
    s.wait_state(V, "ipmi-sync", "manageable").await;

    bmc.ipmitool(&["power", "on"]).unwrap();
    until(
        "the sync records power on",
        Duration::from_secs(30),
        || async { node(&s, &id).await["power_state"] == "power on" },
    )
    .await;

    // Virtual media on an `ipmi` node: accepted (its management interface validates),
    // then upstream's "does not support" in `last_error` (a Go client's acceptance test
    // expects the 204).
    let iso = json!({"device_type": "cdrom", "image_url": "http://192.0.2.1/boot.iso"});
    let r = s.post(&format!("/v1/nodes/{id}/vmedia"), V, &iso).await;
    assert_eq!(r.status, 204, "{}", r.body);
    let want = format!(
        "Could not attach device cdrom to node {id}: Driver ipmi does not support attach_virtual_media (disabled or not implemented)."
    );
    until(
        "the failure in last_error",
        Duration::from_secs(10),
        || async { node(&s, &id).await["last_error"] == want.as_str() },
    )
    .await;

    bmc.stop();
    until(
        "maintenance for power failure",
        Duration::from_secs(60),
        || async {
            let n = node(&s, &id).await;
            n["maintenance"] == true && n["fault"] == "power failure"
        },
    )
    .await;
    // In a power failure, refused at once (upstream's 503).
    let r = s.post(&format!("/v1/nodes/{id}/vmedia"), V, &iso).await;
    assert_eq!(
        (r.status, r.fault()),
        (
            503,
            format!("Unable to attach virtual media for node {id} due to power failure state")
        ),
    );
    let n = node(&s, &id).await;
    assert!(
        n["maintenance_reason"]
            .as_str()
            .unwrap()
            .contains("did not answer"),
        "{n}"
    );

    // A restarted fake BMC comes back powered off: recorded as such.
    bmc.restart().await;
    until(
        "out of maintenance once the BMC answers",
        Duration::from_secs(60),
        || async {
            let n = node(&s, &id).await;
            n["maintenance"] == false && n["fault"].is_null() && n["power_state"] == "power off"
        },
    )
    .await;
    s.stop().await;
}
