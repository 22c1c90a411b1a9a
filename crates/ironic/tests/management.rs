#![allow(clippy::unwrap_used)]
//! The rest of a node's hardware routes up to 1.61 (console, boot device, NMI, RAID,
//! BIOS, vendor passthru, RAID logical disk properties) against upstream's samples,
//! and the unknown-route body, on all three deployments.

mod common;

use common::Server;
use serde_json::{Value, json};

const V: &str = "1.61";

async fn management(s: &Server) {
    let base = s.base();
    s.node(json!({"driver": "fake-hardware", "name": "bm-node"}))
        .await;

    // Console: off, then on (202), then the fake console's (empty) information.
    let r = s.get("/v1/nodes/bm-node/states/console", V).await;
    assert_eq!(
        r.json(),
        json!({"console_enabled": false, "console_info": null})
    );
    let r = s
        .put(
            "/v1/nodes/bm-node/states/console",
            V,
            Some(&json!({"enabled": true})),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let r = s.get("/v1/nodes/bm-node/states/console", V).await;
    assert_eq!(
        r.json(),
        json!({"console_enabled": true, "console_info": {}})
    );
    assert_eq!(
        s.get("/v1/nodes/bm-node/states", V).await.json()["console_enabled"],
        true
    );
    let r = s
        .put("/v1/nodes/bm-node/states/console", V, Some(&json!({})))
        .await;
    assert_eq!(r.status, 400);

    // Boot device.
    let r = s
        .get("/v1/nodes/bm-node/management/boot_device/supported", V)
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        r.json()["supported_boot_devices"]
            .as_array()
            .unwrap()
            .contains(&json!("pxe"))
    );
    let r = s
        .put(
            "/v1/nodes/bm-node/management/boot_device",
            V,
            Some(&json!({"boot_device": "pxe", "persistent": true})),
        )
        .await;
    assert_eq!(r.status, 204, "{}", r.body);
    let r = s.get("/v1/nodes/bm-node/management/boot_device", V).await;
    assert_eq!(r.json(), json!({"boot_device": "pxe", "persistent": true}));
    let r = s
        .put(
            "/v1/nodes/bm-node/management/boot_device",
            V,
            Some(&json!({"boot_device": "floppy"})),
        )
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (400, "Invalid boot device floppy specified.".into())
    );

    // NMI: the fake management cannot; the route is 1.29.
    let r = s
        .put(
            "/v1/nodes/bm-node/management/inject_nmi",
            V,
            Some(&json!({})),
        )
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            "Driver fake-hardware does not support inject_nmi (disabled or not implemented)."
                .into()
        )
    );
    let r = s
        .put(
            "/v1/nodes/bm-node/management/inject_nmi",
            "1.28",
            Some(&json!({})),
        )
        .await;
    assert_eq!(r.status, 404);

    // RAID: the target is checked and stored.
    let cfg =
        json!({"logical_disks": [{"size_gb": 100, "raid_level": "1", "is_root_volume": true}]});
    let r = s.put("/v1/nodes/bm-node/states/raid", V, Some(&cfg)).await;
    assert_eq!(r.status, 204, "{}", r.body);
    let st = s.get("/v1/nodes/bm-node/states", V).await.json();
    assert_eq!(st["target_raid_config"], cfg);
    let r = s
        .put(
            "/v1/nodes/bm-node/states/raid",
            V,
            Some(&json!({"logical_disks": [{"size_gb": 100, "raid_level": "7"}]})),
        )
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            "RAID config validation error: '7' is not one of ['JBOD', '0', '1', '2', '5', '6', '1+0', '5+0', '6+0']".into()
        )
    );
    let r = s
        .get("/v1/drivers/fake-hardware/raid/logical_disk_properties", V)
        .await;
    assert_eq!(r.status, 200);
    assert!(
        r.json()["raid_level"]
            .as_str()
            .unwrap()
            .contains("Required")
    );
    assert_eq!(
        s.get("/v1/drivers/no-such/raid/logical_disk_properties", V)
            .await
            .status,
        404
    );

    // BIOS: the fake interface's settings.
    let r = s.get("/v1/nodes/bm-node/bios", V).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let list = r.json()["bios"].as_array().unwrap().clone();
    assert_eq!(list[0]["name"], "BootMode");
    assert_eq!(
        list[0]["links"][0]["href"],
        format!("{base}/v1/nodes/bm-node/bios/BootMode")
    );
    let r = s.get("/v1/nodes/bm-node/bios/LogicalProc", V).await.json();
    assert_eq!(r["LogicalProc"]["value"], "Enabled");
    assert_eq!(s.get("/v1/nodes/bm-node/bios/Nope", V).await.status, 404);
    assert_eq!(s.get("/v1/nodes/bm-node/bios", "1.39").await.status, 404);

    // Vendor passthru: the fake interface's one method, for the node and the driver.
    let m = s
        .get("/v1/nodes/bm-node/vendor_passthru/methods", V)
        .await
        .json();
    assert_eq!(m["echo"]["http_methods"], json!(["POST", "GET"]));
    let r = s
        .post(
            "/v1/nodes/bm-node/vendor_passthru?method=echo",
            V,
            &json!({"x": 1}),
        )
        .await;
    assert_eq!((r.status, r.json()), (200, json!({"x": 1})));
    // The method in the path (the CLI's form).
    let r = s
        .post(
            "/v1/nodes/bm-node/vendor_passthru/echo",
            V,
            &json!({"y": 2}),
        )
        .await;
    assert_eq!((r.status, r.json()), (200, json!({"y": 2})));
    let r = s
        .post(
            "/v1/nodes/bm-node/vendor_passthru?method=nope",
            V,
            &json!({}),
        )
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (400, "No handler for method nope".into())
    );
    let r = s
        .post("/v1/nodes/bm-node/vendor_passthru", V, &json!({}))
        .await;
    assert_eq!((r.status, r.fault()), (400, "Method not specified".into()));
    let m = s
        .get("/v1/drivers/fake-hardware/vendor_passthru/methods", V)
        .await
        .json();
    assert!(m.get("echo").is_some());
    let r = s
        .get("/v1/drivers/fake-hardware/vendor_passthru?method=echo", V)
        .await;
    assert_eq!((r.status, r.json()), (200, json!({})));

    // Network events (1.54): checked and recorded.
    let event = json!({"event": "network.bind_port", "port_id": "bf1b1e3a-7c6d-4e5f-9a8b-0c1d2e3f4a5b",
                       "mac_address": "52:54:00:00:20:01", "status": "ACTIVE",
                       "device_id": "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee",
                       "binding:host_id": "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee",
                       "binding:vnic_type": "baremetal"});
    let r = s
        .post("/v1/events", V, &json!({ "events": [event.clone()] }))
        .await;
    assert_eq!(r.status, 204, "{}", r.body);
    let mut bad = event.clone();
    bad["event"] = json!("network.explode");
    let r = s.post("/v1/events", V, &json!({ "events": [bad] })).await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            "Schema error: 'network.explode' is not one of ['network.bind_port', 'network.unbind_port', 'network.delete_port']".into()
        )
    );
    let mut bad = event.clone();
    bad.as_object_mut().unwrap().remove("status");
    let r = s.post("/v1/events", V, &json!({ "events": [bad] })).await;
    assert_eq!(
        (r.status, r.fault()),
        (400, "Schema error: 'status' is a required property".into())
    );
    assert_eq!(
        s.post("/v1/events", "1.53", &json!({ "events": [event] }))
            .await
            .status,
        404
    );

    // An unknown route: upstream's routing body, with a faultstring clients print.
    let r = s.get("/v1/no-such-thing", V).await;
    assert_eq!(r.status, 404);
    assert_eq!(r.fault(), "The resource could not be found.");
    let inner: Value = serde_json::from_str(r.json()["error_message"].as_str().unwrap()).unwrap();
    assert_eq!(inner["code"], 404);
    assert_eq!(inner["title"], "Not Found");
}

on_every_deployment!(management);
