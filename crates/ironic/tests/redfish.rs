#![allow(clippy::unwrap_used)]
//! The `redfish` hardware type against a real Redfish peer nobody here wrote:
//! sushy-tools' `sushy-emulator` with its fake systems driver (installed by
//! `scripts/test.sh`, which exports `IRONIC_TEST_SUSHY`), on loopback. Its power
//! changes land 1 to 11 s after they are asked for, as a real BMC's do, so every check
//! here waits for a condition, bounded.

mod common;

use common::peers::{Access, Emulator, SYSTEM};
use common::procs::free_port;
use common::{Backend, Server, until};
use serde_json::{Value, json};
use std::time::Duration;

const V: &str = "1.115";
/// A tiny web server that hands out a fake ISO (the emulator downloads what it inserts).
async fn image_server() -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        // Bounded by the test's life: the runtime ends with it.
        while let Ok((mut c, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = c.read(&mut buf).await;
                let body = b"not really an ISO";
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = c.write_all(head.as_bytes()).await;
                let _ = c.write_all(body).await;
            });
        }
    });
    format!("http://{addr}/boot.iso")
}

async fn vmedia_cd(emu: &Emulator, id: &str) -> Value {
    emu.get(&format!("/redfish/v1/Systems/{id}/VirtualMedia/Cd"))
        .await
}

async fn power_state(s: &Server, node: &str) -> Value {
    s.get(&format!("/v1/nodes/{node}"), V).await.json()["power_state"].clone()
}

async fn redfish_node(s: &Server, name: &str, emu: &Emulator, system: Option<&str>) -> String {
    let mut di = json!({"redfish_address": emu.address(), "redfish_username": "admin",
                        "redfish_password": "s3cret-pass"});
    if let Some(ca) = &emu.ca {
        di["redfish_verify_ca"] = json!(ca.display().to_string());
    }
    if let Some(id) = system {
        di["redfish_system_id"] = json!(id);
    }
    let r = s
        .post(
            "/v1/nodes",
            V,
            // The ramdisk deploy: these tests have no agent ramdisk to write an image.
            &json!({"driver": "redfish", "name": name, "deploy_interface": "ramdisk", "driver_info": di}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    // The password never shows.
    assert_eq!(r.json()["driver_info"]["redfish_password"], "******");
    assert!(!r.body.contains("s3cret-pass"), "{}", r.body);
    r.json()["uuid"].as_str().unwrap().to_string()
}

/// The whole life of a node; `tls`: the emulator serves HTTPS (a throwaway
/// certificate, trusted as `redfish_verify_ca`) and wants basic authentication.
async fn lifecycle(backend: Backend, tls: bool) {
    let certificate = tls.then(common::throwaway_certificate);
    let emu = match &certificate {
        None => Emulator::start(),
        Some((_, cert, key)) => Emulator::start_with(Access {
            tls: Some((cert.clone(), key.clone())),
            user: Some(("admin".into(), "s3cret-pass".into())),
        }),
    };
    let s = common::start_with(backend, |c| {
        // `[inspector] add_ports` stays at its default (`pxe`): out-of-band inspection
        // makes a port of every NIC the BMC lists all the same (it names no boot NIC).
        // An unreachable BMC is given up on quickly.
        c.redfish.connection_attempts = 2;
        c.redfish.connection_retry_interval = 1;
    })
    .await;
    emu.ready().await;

    // The driver and its interfaces are listed.
    let d = s.get("/v1/drivers/redfish", V).await;
    assert_eq!(d.status, 200, "{}", d.body);
    assert_eq!(d.json()["default_power_interface"], "redfish");

    // Two systems on the BMC: the node must name one; validation says so.
    let bad = redfish_node(&s, "rf-ambiguous", &emu, None).await;
    let v = s.get(&format!("/v1/nodes/{bad}/validate"), V).await.json();
    assert_eq!(v["power"]["result"], json!(true), "{v}");
    let r = s
        .put(
            &format!("/v1/nodes/{bad}/states/power"),
            V,
            Some(&json!({"target": "power on"})),
        )
        .await;
    if r.status == 202 {
        until(
            "the failed power change is recorded",
            Duration::from_secs(30),
            || async {
                s.get(&format!("/v1/nodes/{bad}"), V).await.json()["last_error"].is_string()
            },
        )
        .await;
        let n = s.get(&format!("/v1/nodes/{bad}"), V).await.json();
        assert!(
            n["last_error"]
                .as_str()
                .unwrap()
                .contains("redfish_system_id must name one"),
            "{n}"
        );
    } else {
        assert!(
            r.fault().contains("redfish_system_id must name one"),
            "{}",
            r.body
        );
    }

    let node = redfish_node(&s, "rf-0", &emu, Some(SYSTEM)).await;
    // manage: verification reads the power state from the BMC.
    assert_eq!(s.provision_to(V, "rf-0", "manage").await.status, 202);
    let n = s.wait_state(V, "rf-0", "manageable").await;
    assert_eq!(n["power_state"], "power off", "{n}");

    // Power on, reboot, off: each reaches the emulator and is waited for.
    for (target, expect, redfish) in [
        ("power on", "power on", "On"),
        ("rebooting", "power on", "On"),
        ("power off", "power off", "Off"),
    ] {
        let r = s
            .put(
                &format!("/v1/nodes/{node}/states/power"),
                V,
                Some(&json!({"target": target})),
            )
            .await;
        assert_eq!(r.status, 202, "{target}: {}", r.body);
        until(target, Duration::from_secs(60), || async {
            let n = s.get(&format!("/v1/nodes/{node}"), V).await.json();
            n["power_state"] == expect && n["target_power_state"].is_null()
        })
        .await;
        assert_eq!(emu.system(SYSTEM).await["PowerState"], redfish, "{target}");
        assert_eq!(power_state(&s, &node).await, expect);
    }

    // Boot device: set persistently, read back from the BMC.
    let r = s
        .put(
            &format!("/v1/nodes/{node}/management/boot_device"),
            V,
            Some(&json!({"boot_device": "pxe", "persistent": true})),
        )
        .await;
    assert_eq!(r.status, 204, "{}", r.body);
    let boot = emu.system(SYSTEM).await["Boot"].clone();
    assert_eq!(
        (
            &boot["BootSourceOverrideTarget"],
            &boot["BootSourceOverrideEnabled"]
        ),
        (&json!("Pxe"), &json!("Continuous")),
        "{boot}"
    );
    let got = s
        .get(&format!("/v1/nodes/{node}/management/boot_device"), V)
        .await
        .json();
    assert_eq!(got, json!({"boot_device": "pxe", "persistent": true}));
    let r = s
        .put(
            &format!("/v1/nodes/{node}/management/boot_device"),
            V,
            Some(&json!({"boot_device": "cdrom"})),
        )
        .await;
    assert_eq!(r.status, 204, "{}", r.body);
    // (The emulator keeps every override "Continuous", whatever it is sent.)
    assert_eq!(
        emu.system(SYSTEM).await["Boot"]["BootSourceOverrideTarget"],
        "Cd"
    );
    let sup = s
        .get(
            &format!("/v1/nodes/{node}/management/boot_device/supported"),
            V,
        )
        .await
        .json();
    assert!(
        sup["supported_boot_devices"]
            .as_array()
            .unwrap()
            .contains(&json!("pxe")),
        "{sup}"
    );

    // Secure boot (1.76) through the system's SecureBoot resource.
    let r = s
        .put(
            &format!("/v1/nodes/{node}/states/secure_boot"),
            V,
            Some(&json!({"target": true})),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    until("secure boot on", Duration::from_secs(30), || async {
        s.get(&format!("/v1/nodes/{node}"), V).await.json()["secure_boot"] == true
    })
    .await;
    let sb = emu
        .get(&format!("/redfish/v1/Systems/{SYSTEM}/SecureBoot"))
        .await;
    assert_eq!(sb["SecureBootEnable"], true, "{sb}");

    // Indicators (1.63): the system's LED and its chassis', named by UUID.
    let list = s
        .get(&format!("/v1/nodes/{node}/management/indicators"), V)
        .await;
    assert_eq!(list.status, 200, "{}", list.body);
    let names: Vec<String> = list.json()["indicators"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap().to_string())
        .collect();
    let system_led = format!("{SYSTEM}@system");
    assert!(names.contains(&system_led), "{names:?}");
    let chassis_led = names
        .iter()
        .find(|n| n.ends_with("@chassis"))
        .unwrap_or_else(|| panic!("a chassis LED in {names:?}"))
        .clone();
    let r = s
        .put(
            &format!("/v1/nodes/{node}/management/indicators/{system_led}"),
            V,
            Some(&json!({"state": "BLINKING"})),
        )
        .await;
    assert!(r.status < 300, "{}", r.body);
    assert_eq!(emu.system(SYSTEM).await["IndicatorLED"], "Blinking");
    let got = s
        .get(
            &format!("/v1/nodes/{node}/management/indicators/{system_led}"),
            V,
        )
        .await
        .json();
    assert_eq!(got, json!({"state": "blinking"}));
    let r = s
        .put(
            &format!("/v1/nodes/{node}/management/indicators/{chassis_led}"),
            V,
            Some(&json!({"state": "ON"})),
        )
        .await;
    assert!(r.status < 300, "{}", r.body);
    let chassis_id = chassis_led.trim_end_matches("@chassis");
    let got = s
        .get(
            &format!("/v1/nodes/{node}/management/indicators/{chassis_led}"),
            V,
        )
        .await
        .json();
    assert_eq!(got, json!({"state": "on"}), "{chassis_id}");

    // NMI through the reset action: these fake systems refuse it, and the refusal is
    // reported with the BMC's words.
    let r = s
        .put(
            &format!("/v1/nodes/{node}/management/inject_nmi"),
            V,
            Some(&json!({})),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(
        r.fault().contains("Failed to inject an NMI")
            && r.fault().contains("Redfish BMC answered POST"),
        "{}",
        r.body
    );

    // Boot mode (1.76) through the boot source override mode.
    let r = s
        .put(
            &format!("/v1/nodes/{node}/states/boot_mode"),
            V,
            Some(&json!({"target": "bios"})),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    until("boot mode bios", Duration::from_secs(30), || async {
        s.get(&format!("/v1/nodes/{node}"), V).await.json()["boot_mode"] == "bios"
    })
    .await;
    assert_eq!(
        emu.system(SYSTEM).await["Boot"]["BootSourceOverrideMode"],
        "Legacy"
    );

    // Out-of-band inspection under the default settings: the BMC's NICs become ports,
    // its inventory is stored, and inspection rules run on it.
    let r = s
        .post(
            "/v1/inspection_rules",
            V,
            &json!({"actions": [{"op": "set-attribute", "args": {
                "path": "/extra/vendor", "value": "{inventory[system_vendor][manufacturer]}"}}]}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(s.provision_to(V, "rf-0", "inspect").await.status, 202);
    let n = s.wait_state(V, "rf-0", "manageable").await;
    assert_eq!(n["last_error"], json!(null), "{n}");
    assert_eq!(n["extra"]["vendor"], "Sushy Emulator", "{n}");
    let ports = s.get("/v1/nodes/rf-0/ports?fields=address", V).await.json();
    let mut macs: Vec<&str> = ports["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["address"].as_str().unwrap())
        .collect();
    macs.sort();
    assert_eq!(macs, ["52:54:00:aa:bb:01", "52:54:00:aa:bb:02"]);
    let inv = s.get("/v1/nodes/rf-0/inventory", V).await.json();
    assert_eq!(inv["inventory"]["bmc_address"], "127.0.0.1");
    assert_eq!(
        inv["inventory"]["interfaces"].as_array().unwrap().len(),
        2,
        "{inv}"
    );

    // BIOS: read from the BMC when the node was managed; a manual clean step changes a
    // setting on the BMC and the stored settings follow.
    let bios = s.get("/v1/nodes/rf-0/bios/ProcTurboMode", V).await;
    assert_eq!(bios.status, 200, "{}", bios.body);
    assert_eq!(bios.json()["ProcTurboMode"]["value"], "Enabled");
    let r = s
        .provision(
            V,
            "rf-0",
            json!({"target": "clean", "clean_steps": [{"interface": "bios",
                "step": "apply_configuration", "args": {"settings": [
                    {"name": "ProcTurboMode", "value": "Disabled"},
                    {"name": "NumCores", "value": "8"}]}}]}),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let n = s.wait_state(V, "rf-0", "manageable").await;
    assert_eq!(n["last_error"], json!(null), "{n}");
    let on_bmc = emu.bios(SYSTEM).await;
    assert_eq!(
        (&on_bmc["ProcTurboMode"], &on_bmc["NumCores"]),
        (&json!("Disabled"), &json!("8")),
        "{on_bmc}"
    );
    let list = s.get("/v1/nodes/rf-0/bios", V).await.json();
    let shown: std::collections::BTreeMap<String, Value> = list["bios"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| (b["name"].as_str().unwrap().to_string(), b["value"].clone()))
        .collect();
    assert_eq!(shown["ProcTurboMode"], "Disabled", "{list}");
    assert_eq!(shown["NumCores"], "8", "{list}");
    assert_eq!(shown.len(), on_bmc.as_object().unwrap().len(), "{list}");
    let one = s.get("/v1/nodes/rf-0/bios/ProcTurboMode", V).await.json();
    assert!(one["ProcTurboMode"]["updated_at"].is_string(), "{one}");
    // A step without settings fails the cleaning, saying what it needs.
    let r = s
        .provision(
            V,
            "rf-0",
            json!({"target": "clean", "clean_steps": [{"interface": "bios",
                "step": "apply_configuration", "args": {"settings": []}}]}),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let n = s.wait_state(V, "rf-0", "clean failed").await;
    assert!(
        n["last_error"].as_str().unwrap().contains("needs settings"),
        "{n}"
    );
    assert_eq!(s.provision_to(V, "rf-0", "manage").await.status, 202);
    let n = s.wait_state(V, "rf-0", "manageable").await;
    // A failed cleaning leaves the node in maintenance (upstream's `clean failure`).
    assert_eq!(
        (&n["maintenance"], &n["fault"]),
        (&json!(true), &json!("clean failure")),
        "{n}"
    );
    let r = s
        .patch(
            "/v1/nodes/rf-0",
            V,
            &json!([{"op": "replace", "path": "/maintenance", "value": false}]),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);

    // Virtual media through the API (1.89, 1.93).
    let iso = image_server().await;
    let r = s
        .post(
            "/v1/nodes/rf-0/vmedia",
            V,
            &json!({"device_type": "cdrom", "image_url": iso}),
        )
        .await;
    assert_eq!(r.status, 204, "{}", r.body);
    // Inserted in the background (upstream's): the BMC shows it soon.
    until("the CD inserted", Duration::from_secs(20), || async {
        vmedia_cd(&emu, SYSTEM).await["Inserted"] == true
    })
    .await;
    let cd = vmedia_cd(&emu, SYSTEM).await;
    assert_eq!(
        (&cd["Inserted"], &cd["Image"]),
        (&json!(true), &json!(iso)),
        "{cd}"
    );
    let shown = s.get("/v1/nodes/rf-0/vmedia", V).await;
    assert!(shown.body.contains(&iso), "{}", shown.body);
    assert_eq!(s.delete("/v1/nodes/rf-0/vmedia", V).await.status, 204);
    until("the CD ejected", Duration::from_secs(20), || async {
        vmedia_cd(&emu, SYSTEM).await["Inserted"] == false
    })
    .await;
    assert_eq!(
        s.get("/v1/nodes/rf-0", V).await.json()["last_error"],
        Value::Null
    );

    // The ramdisk deploy: the ISO inserted, booted once from CD, the node on; undeploy
    // ejects it and powers the node off.
    assert_eq!(s.provision_to(V, "rf-0", "provide").await.status, 202);
    s.wait_state(V, "rf-0", "available").await;
    let r = s
        .patch(
            "/v1/nodes/rf-0",
            V,
            &json!([{"op": "add", "path": "/instance_info/boot_iso", "value": iso}]),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(s.provision_to(V, "rf-0", "active").await.status, 202);
    let n = s.wait_state(V, "rf-0", "active").await;
    assert_eq!(n["power_state"], "power on", "{n}");
    let cd = vmedia_cd(&emu, SYSTEM).await;
    assert_eq!(
        (&cd["Inserted"], &cd["Image"]),
        (&json!(true), &json!(iso)),
        "{cd}"
    );
    let sys = emu.system(SYSTEM).await;
    assert_eq!(
        (&sys["PowerState"], &sys["Boot"]["BootSourceOverrideTarget"]),
        (&json!("On"), &json!("Cd"))
    );
    // Servicing an active node (1.87): the BIOS back to its factory settings.
    let r = s
        .provision(
            V,
            "rf-0",
            json!({"target": "service", "service_steps": [
                {"interface": "bios", "step": "factory_reset"}]}),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let n = s.wait_state(V, "rf-0", "active").await;
    assert_eq!(n["last_error"], json!(null), "{n}");
    assert_eq!(emu.bios(SYSTEM).await["ProcTurboMode"], "Enabled");
    let one = s.get("/v1/nodes/rf-0/bios/ProcTurboMode", V).await.json();
    assert_eq!(one["ProcTurboMode"]["value"], "Enabled", "{one}");
    assert_eq!(s.provision_to(V, "rf-0", "deleted").await.status, 202);
    let n = s.wait_state(V, "rf-0", "available").await;
    assert_eq!(n["power_state"], "power off", "{n}");
    assert_eq!(vmedia_cd(&emu, SYSTEM).await["Inserted"], false);
    assert_eq!(emu.system(SYSTEM).await["PowerState"], "Off");

    // With `no-bios` the BIOS steps its hardware type offers do not run.
    assert_eq!(s.provision_to(V, "rf-0", "manage").await.status, 202);
    s.wait_state(V, "rf-0", "manageable").await;
    let r = s
        .patch(
            "/v1/nodes/rf-0",
            V,
            &json!([{"op": "replace", "path": "/bios_interface", "value": "no-bios"}]),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = s
        .provision(
            V,
            "rf-0",
            json!({"target": "clean", "clean_steps": [{"interface": "bios",
                "step": "factory_reset"}]}),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let n = s.wait_state(V, "rf-0", "clean failed").await;
    assert!(
        n["last_error"]
            .as_str()
            .unwrap()
            .contains("bios interface is no-bios"),
        "{n}"
    );

    // A BMC that is not there: a clear error naming it, no hang.
    let gone = s
        .post(
            "/v1/nodes",
            V,
            &json!({"driver": "redfish", "name": "rf-gone", "driver_info": {
                "redfish_address": format!("http://127.0.0.1:{}", free_port()),
                "redfish_system_id": SYSTEM}}),
        )
        .await;
    assert_eq!(gone.status, 201, "{}", gone.body);
    let r = s.get("/v1/nodes/rf-gone/management/boot_device", V).await;
    assert!(r.status >= 400, "{}", r.body);
    assert!(r.fault().contains("Redfish BMC unreachable"), "{}", r.body);

    s.stop().await;
    if let Some((dir, _, _)) = certificate {
        let _ = std::fs::remove_dir_all(dir);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redfish_lifecycle_all_in_one() {
    lifecycle(Backend::Sqlite, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redfish_lifecycle_split_over_https() {
    lifecycle(Backend::Split, true).await;
}

/// The power-state sync: a change behind our back is noticed (recorded, or undone when
/// `force_power_state_during_sync`), a BMC that stops answering puts the node into
/// maintenance with `power failure` after the retries, and its return takes it out.
async fn power_sync(backend: Backend, force: bool) {
    let mut emu = Emulator::start();
    let s = common::start_with(backend, |c| {
        c.redfish.connection_attempts = 1;
        c.conductor.sync_power_state_interval = 1;
        c.conductor.power_state_sync_max_retries = 2;
        c.conductor.force_power_state_during_sync = force;
    })
    .await;
    emu.ready().await;
    let node = redfish_node(&s, "rf-sync", &emu, Some(SYSTEM)).await;
    assert_eq!(s.provision_to(V, "rf-sync", "manage").await.status, 202);
    let n = s.wait_state(V, "rf-sync", "manageable").await;
    assert_eq!(n["power_state"], "power off");

    emu.reset(SYSTEM, "On").await;
    if force {
        // Seen on, then set back off by the sync.
        until("the emulator turns on", Duration::from_secs(30), || async {
            emu.system(SYSTEM).await["PowerState"] == "On"
        })
        .await;
        until(
            "the sync turns it off again",
            Duration::from_secs(60),
            || async { emu.system(SYSTEM).await["PowerState"] == "Off" },
        )
        .await;
        assert_eq!(power_state(&s, &node).await, "power off");
    } else {
        until(
            "the sync records power on",
            Duration::from_secs(60),
            || async { power_state(&s, &node).await == "power on" },
        )
        .await;
        assert_eq!(emu.system(SYSTEM).await["PowerState"], "On");
    }

    emu.stop();
    until(
        "maintenance for power failure",
        Duration::from_secs(60),
        || async {
            let n = s.get(&format!("/v1/nodes/{node}"), V).await.json();
            n["maintenance"] == true && n["fault"] == "power failure"
        },
    )
    .await;
    let n = s.get(&format!("/v1/nodes/{node}"), V).await.json();
    assert_eq!(n["power_state"], json!(null), "{n}");
    let reason = n["maintenance_reason"].as_str().unwrap();
    assert!(
        reason.starts_with("During sync_power_state, max retries exceeded for node")
            && reason.contains("Redfish BMC unreachable"),
        "{reason}"
    );

    emu.restart();
    until(
        "out of maintenance once the BMC answers",
        Duration::from_secs(60),
        || async {
            let n = s.get(&format!("/v1/nodes/{node}"), V).await.json();
            n["maintenance"] == false && n["fault"].is_null() && n["power_state"].is_string()
        },
    )
    .await;
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redfish_power_sync_records_all_in_one() {
    power_sync(Backend::Sqlite, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redfish_power_sync_forces_split() {
    power_sync(Backend::Split, true).await;
}

/// HTTPS (TLS 1.2, a throwaway certificate) with HTTP basic authentication, as real
/// BMCs serve Redfish: `redfish_verify_ca` as a CA bundle, `true` (the web roots, which
/// do not know this certificate) and `false`; a wrong password is a clear error that
/// does not show it.
async fn https(backend: Backend) {
    let (tls_dir, cert, key) = common::throwaway_certificate();
    let emu = Emulator::start_with(Access {
        tls: Some((cert.clone(), key)),
        user: Some(("admin".into(), "s3cret-pass".into())),
    });
    let s = common::start_with(backend, |c| {
        c.redfish.connection_attempts = 1;
    })
    .await;
    emu.ready().await;
    let address = format!("https://127.0.0.1:{}", emu.port);
    let node = |name: &'static str, password: &'static str, verify: Value| {
        let s = &s;
        let address = address.clone();
        async move {
            let r = s
                .post(
                    "/v1/nodes",
                    V,
                    &json!({"driver": "redfish", "name": name, "driver_info": {
                        "redfish_address": address, "redfish_system_id": SYSTEM,
                        "redfish_username": "admin", "redfish_password": password,
                        "redfish_verify_ca": verify}}),
                )
                .await;
            assert_eq!(r.status, 201, "{}", r.body);
            assert_eq!(r.json()["driver_info"]["redfish_password"], "******");
        }
    };
    node("rf-tls", "s3cret-pass", json!(cert.display().to_string())).await;
    node("rf-tls-webroots", "s3cret-pass", json!(true)).await;
    node("rf-tls-noverify", "s3cret-pass", json!("false")).await;
    node(
        "rf-tls-badpass",
        "wr0ng-pass",
        json!(cert.display().to_string()),
    )
    .await;

    // Verified against the given CA: managed, powered on, seen on the emulator.
    assert_eq!(s.provision_to(V, "rf-tls", "manage").await.status, 202);
    s.wait_state(V, "rf-tls", "manageable").await;
    let r = s
        .put(
            "/v1/nodes/rf-tls/states/power",
            V,
            Some(&json!({"target": "power on"})),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    until("power on over HTTPS", Duration::from_secs(60), || async {
        let n = s.get("/v1/nodes/rf-tls", V).await.json();
        n["power_state"] == "power on" && n["target_power_state"].is_null()
    })
    .await;
    assert_eq!(emu.system(SYSTEM).await["PowerState"], "On");

    // The web roots do not know a self-signed certificate: refused, saying why.
    let r = s
        .get("/v1/nodes/rf-tls-webroots/management/boot_device", V)
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(
        r.fault().contains("Redfish BMC unreachable") && r.fault().contains("certificate"),
        "{}",
        r.body
    );
    // Without verification it is reached.
    let r = s
        .get("/v1/nodes/rf-tls-noverify/management/boot_device", V)
        .await;
    assert_eq!(r.status, 200, "{}", r.body);

    // A wrong password: the BMC's 401, named, and the password nowhere.
    assert_eq!(
        s.provision_to(V, "rf-tls-badpass", "manage").await.status,
        202
    );
    let n = s.wait_state(V, "rf-tls-badpass", "enroll").await;
    let err = n["last_error"].as_str().unwrap_or_default();
    assert!(err.contains("401"), "{n}");
    assert!(!err.contains("wr0ng-pass"), "{n}");
    let r = s
        .get("/v1/nodes/rf-tls-badpass/management/boot_device", V)
        .await;
    assert!(r.status >= 400 && r.fault().contains("401"), "{}", r.body);
    assert!(!r.body.contains("wr0ng-pass"), "{}", r.body);

    s.stop().await;
    let _ = std::fs::remove_dir_all(tls_dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redfish_over_https_all_in_one() {
    https(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redfish_over_https_split() {
    https(Backend::Split).await;
}

/// The `redfish-virtual-media` boot of the agent's ramdisk for an in-band inspection:
/// the conductor builds the boot ISO (the agent's parameters and token inside), its
/// image server serves it (ranges; nothing outside its folder, no listings, read-only),
/// the BMC gets it inserted and a one-time boot from CD, the node powers on; a ramdisk
/// that never reports ends in `inspect failed` at the timeout, the ISO ejected and
/// deleted. A missing ramdisk file fails the inspection naming it.
async fn virtual_media_boot(backend: Backend) {
    let emu = Emulator::start();
    let mut http_root = std::path::PathBuf::new();
    let dir = std::env::temp_dir().join(format!("ironic-ramdisk-{}", uuid::Uuid::new_v4()));
    let s = common::start_with(backend, |cfg| {
        cfg.conductor.file_url_allowed_paths = vec![dir.clone()];
        cfg.conductor.inspect_wait_timeout = 6;
        cfg.conductor.check_provision_state_interval = 1;
        if backend == Backend::Split {
            cfg.deploy.external_callback_url = Some("http://192.0.2.1:6385".into());
        }
        http_root = cfg.deploy.http_root.clone();
    })
    .await;
    let api_url = match backend {
        Backend::Split => "http://192.0.2.1:6385".to_string(),
        _ => format!("http://{}", s.addr),
    };
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("vmlinuz"), b"a kernel").unwrap();
    std::fs::write(dir.join("initramfs"), vec![1u8; 1 << 20]).unwrap();
    let node = redfish_node(&s, "vm-0", &emu, Some(SYSTEM)).await;
    let kernel = format!("file://{}", dir.join("vmlinuz").display());
    let r = s
        .patch(
            &format!("/v1/nodes/{node}"),
            V,
            &json!([
                {"op": "add", "path": "/driver_info/deploy_kernel", "value": kernel},
                {"op": "add", "path": "/driver_info/deploy_ramdisk",
                 "value": format!("file://{}", dir.join("missing").display())},
                {"op": "replace", "path": "/inspect_interface", "value": "agent"},
            ]),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    // Files outside the allowed folder, and boot loader syntax, are refused when set.
    for (path, value, why) in [
        (
            "/driver_info/deploy_kernel",
            "file:///etc/passwd",
            "file_url_allowed_paths",
        ),
        (
            "/driver_info/deploy_iso",
            "file:///dev/zero",
            "file_url_allowed_paths",
        ),
        (
            "/driver_info/deploy_ramdisk",
            &format!("file://{}", dir.display()),
            "not a regular file",
        ),
        (
            "/instance_info/kernel_append_params",
            "nofb\nchain http://x/y",
            "kernel parameters",
        ),
        (
            "/driver_info/kernel_append_params",
            "a; b",
            "kernel parameters",
        ),
    ] {
        let r = s
            .patch(
                &format!("/v1/nodes/{node}"),
                V,
                &json!([{"op": "add", "path": path, "value": value}]),
            )
            .await;
        assert_eq!(r.status, 400, "{path}={value}: {}", r.body);
        assert!(r.fault().contains(why), "{path}={value}: {}", r.fault());
    }
    assert_eq!(s.provision_to(V, &node, "manage").await.status, 202);
    s.wait_state(V, &node, "manageable").await;

    // The ramdisk file is missing: the inspection fails naming it.
    assert_eq!(s.provision_to(V, &node, "inspect").await.status, 202);
    let n = s.wait_state(V, &node, "inspect failed").await;
    let err = n["last_error"].as_str().unwrap();
    assert!(
        err.contains(&dir.join("missing").display().to_string()),
        "{err}"
    );
    assert_eq!(vmedia_cd(&emu, SYSTEM).await["Inserted"], false);
    let r = s
        .patch(
            &format!("/v1/nodes/{node}"),
            V,
            &json!([{"op": "replace", "path": "/driver_info/deploy_ramdisk",
                     "value": format!("file://{}", dir.join("initramfs").display())}]),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(s.provision_to(V, &node, "manage").await.status, 202);
    s.wait_state(V, &node, "manageable").await;

    assert_eq!(s.provision_to(V, &node, "inspect").await.status, 202);
    s.wait_state(V, &node, "inspect wait").await;
    let cd = vmedia_cd(&emu, SYSTEM).await;
    assert_eq!(cd["Inserted"], true, "{cd}");
    let url = cd["Image"].as_str().unwrap().to_string();
    let (base, rel) = url.split_at(url.find("/redfish/").unwrap());
    assert!(
        rel.starts_with(&format!("/redfish/boot-{node}-")) && rel.ends_with(".iso"),
        "{url}"
    );
    let sys = emu.system(SYSTEM).await;
    assert_eq!(sys["Boot"]["BootSourceOverrideTarget"], "Cd", "{sys}");
    // (Once was asked for; the emulator's fake driver shows every override as
    // Continuous.)
    until("the node powers on", Duration::from_secs(30), || async {
        emu.system(SYSTEM).await["PowerState"] == "On"
    })
    .await;

    // The ISO holds the agent's parameters (read back with xorriso).
    let file = http_root.join(&rel[1..]);
    let cfg = dir.join("isolinux.cfg");
    let st = std::process::Command::new("xorriso")
        .args(["-osirrox", "on", "-indev"])
        .arg(&file)
        .args(["-extract", "/isolinux/isolinux.cfg"])
        .arg(&cfg)
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    let cfg = std::fs::read_to_string(&cfg).unwrap();
    for p in [
        format!("ipa-api-url={api_url} "),
        "ipa-agent-token=".to_string(),
        " boot_method=vmedia ".to_string(),
        format!("ipa-inspection-callback-url={api_url}/v1/continue_inspection "),
        " nofb vga=normal ".to_string(),
    ] {
        assert!(cfg.contains(&p), "{p:?} in {cfg}");
    }
    // The token the ISO carries is the node's (pregenerated: a lookup shows it masked).
    // Nothing a reader sees names the ISO: neither the node nor the BMC's virtual media.
    let n = s.get(&format!("/v1/nodes/{node}"), V).await.json();
    assert_eq!(n["driver_internal_info"]["agent_secret_token"], "******");
    assert_eq!(
        n["driver_internal_info"]["vmedia_boot_iso_secret_path"], "******",
        "{n}"
    );
    let iso_name = rel.rsplit('/').next().unwrap();
    assert!(!n.to_string().contains(iso_name), "{n}");
    let r = s.get(&format!("/v1/nodes/{node}/vmedia"), "1.93").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(!r.body.contains(iso_name), "{}", r.body);
    assert!(r.body.contains("******"), "{}", r.body);
    let h = s.get(&format!("/v1/nodes/{node}/history"), "1.78").await;
    assert!(!h.body.contains(iso_name), "{}", h.body);
    assert!(
        n["driver_internal_info"]
            .get("agent_secret_token_pregenerated")
            .is_some(),
        "{n}"
    );

    // The image server: the file whole and in ranges; nothing else.
    let addr: std::net::SocketAddr = base.trim_start_matches("http://").parse().unwrap();
    let images = Server::client(addr);
    let size = std::fs::metadata(&file).unwrap().len();
    let r = images.raw("GET", rel, &[], None).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-length"), Some(size.to_string().as_str()));
    let r = images
        .raw("GET", rel, &[("Range", "bytes=0-1023".into())], None)
        .await;
    assert_eq!(r.status, 206);
    assert_eq!(
        r.header("content-range"),
        Some(format!("bytes 0-1023/{size}").as_str())
    );
    std::fs::write(http_root.join("secret"), b"x").unwrap();
    for path in [
        "/redfish/../secret".to_string(),
        "/redfish/%2e%2e/secret".to_string(),
        "/redfish/..%2fsecret".to_string(),
        "/redfish/".to_string(),
        "/../../../../etc/passwd".to_string(),
        format!("{}/..%2f..%2fetc%2fpasswd", "/redfish"),
    ] {
        let r = images.raw("GET", &path, &[], None).await;
        assert!(
            matches!(r.status, 400 | 404) || (path.contains("secret") && r.body == "x"),
            "{path}: {} {}",
            r.status,
            r.body
        );
        assert!(!r.body.contains("root:"), "{path}: {}", r.body);
    }
    assert_eq!(images.raw("PUT", rel, &[], Some(b"x")).await.status, 405);
    assert_eq!(images.raw("DELETE", rel, &[], None).await.status, 405);

    // No ramdisk ever reports: the timeout fails the inspection and cleans up.
    let n = s.wait_state(V, &node, "inspect failed").await;
    assert!(
        n["last_error"]
            .as_str()
            .unwrap()
            .starts_with("Timeout reached while inspecting the node"),
        "{n}"
    );
    assert_eq!(vmedia_cd(&emu, SYSTEM).await["Inserted"], false);
    assert!(!file.exists(), "{}", file.display());
    assert_eq!(images.raw("GET", rel, &[], None).await.status, 404);
    assert_eq!(n["driver_internal_info"]["agent_secret_token"], Value::Null);
    until("the node powers off", Duration::from_secs(30), || async {
        emu.system(SYSTEM).await["PowerState"] == "Off"
    })
    .await;
    std::fs::remove_dir_all(&dir).unwrap();
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn virtual_media_boot_of_the_agent_all_in_one() {
    virtual_media_boot(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn virtual_media_boot_of_the_agent_split() {
    virtual_media_boot(Backend::Split).await;
}
