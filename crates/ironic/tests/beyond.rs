#![allow(clippy::unwrap_used)]
//! The node API above 1.62 (issue 17), microversion by microversion, against
//! upstream's samples (`upstream-samples-2`), on all three deployments.

mod common;

use common::Server;
use serde_json::json;
use std::time::Duration;

/// 1.63: indicators (S273–S278). Upstream does not gate them: the list answers at 1.62.
async fn indicators(s: &Server) {
    let base = s.base();
    s.node(json!({"driver": "fake-hardware", "name": "bm-node"}))
        .await;
    let link = |name: &str| {
        json!([
            {"href": format!("{base}/v1/nodes/bm-node/management/indicators/{name}"), "rel": "self"},
            {"href": format!("{base}/nodes/bm-node/management/indicators/{name}"), "rel": "bookmark"},
        ])
    };
    let expected = json!({"indicators": [
        {"name": "led-0@chassis", "component": "chassis", "readonly": true,
         "states": ["off", "on"], "links": link("led-0@chassis")},
        {"name": "led@system", "component": "system", "readonly": false,
         "states": ["blinking", "off", "on"], "links": link("led@system")},
    ]});
    for v in ["1.63", "1.62"] {
        let r = s.get("/v1/nodes/bm-node/management/indicators", v).await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.json(), expected, "at {v}");
    }
    let r = s
        .get("/v1/nodes/bm-node/management/indicators/led@system", "1.63")
        .await;
    assert_eq!(r.json(), json!({"state": "on"}));
    for (path, fault) in [
        ("led@disk", "Invalid component disk specified."),
        ("nope@system", "Invalid indicator nope specified."),
        ("led", "Malformed indicator name \"led\""),
    ] {
        let r = s
            .get(
                &format!("/v1/nodes/bm-node/management/indicators/{path}"),
                "1.63",
            )
            .await;
        assert_eq!((r.status, r.fault()), (400, fault.to_string()), "{path}");
    }
    // Upstream's fake cannot set them (S276); a state is required first.
    let put = |body: serde_json::Value| async move {
        s.put(
            "/v1/nodes/bm-node/management/indicators/led@system",
            "1.63",
            Some(&body),
        )
        .await
    };
    let r = put(json!({"state": "BLINKING"})).await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            "Driver fake-hardware does not support set_indicator_state (disabled or not implemented)."
                .into()
        )
    );
    let r = put(json!({})).await;
    assert_eq!(
        (r.status, r.fault()),
        (400, "Missing argument: \"state\"".into())
    );
    let r = put(json!({"state": 1})).await;
    assert_eq!(r.status, 400);
    let r = s
        .get("/v1/nodes/nothing/management/indicators", "1.63")
        .await;
    assert_eq!(r.status, 404);
}

/// 1.66: `network_data`, checked as upstream's schema (S209, S216, S225–S227).
async fn network_data(s: &Server) {
    let data = json!({
        "links": [{"id": "port0", "type": "phy", "ethernet_mac_address": "52:54:00:00:30:01"}],
        "networks": [{"id": "net0", "link": "port0", "type": "ipv4", "ip_address": "192.0.2.30",
                      "netmask": "255.255.255.0", "network_id": "net0"}],
        "services": []
    });
    let r = s
        .post(
            "/v1/nodes",
            "1.65",
            &json!({"driver": "fake-hardware", "network_data": {}}),
        )
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (406, "Request not acceptable.".into())
    );
    let r = s
        .post(
            "/v1/nodes",
            "1.66",
            &json!({"driver": "fake-hardware", "network_data": {"links": "eth0"}}),
        )
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            "Schema error for node: 'eth0' is not of type 'array'".into()
        )
    );
    let r = s
        .post(
            "/v1/nodes",
            "1.66",
            &json!({"driver": "fake-hardware", "name": "nd", "network_data": data}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.json()["network_data"], data);
    // Below 1.66 it is not shown, and asking for it is 406.
    let r = s.get("/v1/nodes/nd", "1.65").await;
    assert!(r.json().get("network_data").is_none());
    let r = s.get("/v1/nodes/nd?fields=network_data", "1.65").await;
    assert_eq!(r.status, 406);
    let r = s.get("/v1/nodes/nd?fields=network_data", "1.66").await;
    assert_eq!(r.json()["network_data"], data);
    let patch = |v: &'static str, value: serde_json::Value| async move {
        s.patch(
            "/v1/nodes/nd",
            v,
            &json!([{"op": "replace", "path": "/network_data", "value": value}]),
        )
        .await
    };
    assert_eq!(patch("1.65", json!({})).await.status, 406);
    let r = patch("1.66", json!({"networks": [{"id": 1}]})).await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            "Invalid network_data: 'links' is a required property".into()
        )
    );
    let mut changed = data.clone();
    changed["services"] = json!([{"type": "dns", "address": "192.0.2.53"}]);
    let r = patch("1.66", changed.clone()).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["network_data"], changed);
    assert_eq!(
        s.get("/v1/nodes/nd", "1.66").await.json()["network_data"],
        changed
    );
    // A path inside it, and removing it.
    let r = s
        .patch(
            "/v1/nodes/nd",
            "1.66",
            &json!([{"op": "add", "path": "/network_data/links/0/mtu", "value": 0}]),
        )
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            "Invalid network_data: 0 is less than the minimum of 1".into()
        )
    );
    let r = s
        .patch(
            "/v1/nodes/nd",
            "1.66",
            &json!([{"op": "remove", "path": "/network_data"}]),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["network_data"], json!({}));
}

/// The names of the nodes `GET /v1/nodes?{q}` lists at `v`, sorted.
async fn node_names(s: &Server, q: &str, v: &str) -> Vec<String> {
    let r = s.get(&format!("/v1/nodes?{q}"), v).await;
    assert_eq!(r.status, 200, "{q}: {}", r.body);
    let mut n: Vec<String> = r.json()["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["name"].as_str().unwrap().to_string())
        .collect();
    n.sort();
    n
}

/// An `available` fake-hardware node.
async fn available(s: &Server, name: &str) {
    s.node(json!({"driver": "fake-hardware", "name": name}))
        .await;
    for (target, state) in [("manage", "manageable"), ("provide", "available")] {
        let r = s.provision_to("1.61", name, target).await;
        assert_eq!(r.status, 202, "{target}: {}", r.body);
        s.wait_state("1.61", name, state).await;
    }
}

/// 1.69 `deploy_steps` (S325–S328) and 1.73 `deploy`/`undeploy` (S324, S330, S348).
async fn deploy_steps_and_verbs(s: &Server) {
    available(s, "dep-node").await;
    let bios = json!([{"interface": "bios", "step": "apply_configuration",
                      "args": {"settings": [{"name": "LogicalProc", "value": "Disabled"}]},
                      "priority": 150}]);
    let deploy = |v: &'static str, target: &'static str, steps: serde_json::Value| async move {
        s.provision(
            v,
            "dep-node",
            json!({"target": target, "deploy_steps": steps}),
        )
        .await
    };
    let r = deploy("1.68", "active", bios.clone()).await;
    assert_eq!(
        (r.status, r.fault()),
        (
            406,
            "Request not acceptable. The minimal required API version should be 1.69".into()
        )
    );
    let r = s.provision_to("1.72", "dep-node", "deploy").await;
    assert_eq!(
        (r.status, r.fault()),
        (406, "Request not acceptable.".into())
    );
    let r = s.provision_to("1.72", "dep-node", "undeploy").await;
    assert_eq!(r.status, 406);
    let r = deploy("1.69", "manage", bios.clone()).await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            "\"deploy_steps\" is only valid when setting target provision state to active or rebuild"
                .into()
        )
    );
    let r = deploy(
        "1.69",
        "active",
        json!([{"interface": "deploy", "step": "deploy", "args": {}}]),
    )
    .await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            "Invalid deploy_steps: 'priority' is a required property".into()
        )
    );
    // A step the driver does not offer is refused before anything moves.
    let r = deploy(
        "1.69",
        "active",
        json!([{"interface": "bios", "step": "explode", "args": {}, "priority": 10}]),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(
        r.fault().contains("Validation of deploy steps from \"deploy steps\" argument failed. Errors: node does not support this deploy step: "),
        "{}",
        r.fault()
    );
    let n = s.get("/v1/nodes/dep-node", "1.69").await.json();
    assert_eq!(n["provision_state"], "available");
    // The user's step runs (before the core deploy step: a higher priority), then is
    // forgotten; `deploy` is `active` from 1.73.
    let r = deploy("1.73", "deploy", bios.clone()).await;
    assert_eq!(r.status, 202, "{}", r.body);
    let n = s.wait_state("1.73", "dep-node", "active").await;
    let done: Vec<String> = common::fake_journal(&n)
        .into_iter()
        .filter(|(_, e)| e == "done")
        .map(|(step, _)| step)
        .collect();
    // (The first is automated cleaning's.)
    assert_eq!(
        done,
        [
            "vendor.log_passthrough",
            "bios.apply_configuration",
            "deploy.deploy"
        ],
        "{n}"
    );
    assert!(n["driver_internal_info"].get("user_deploy_steps").is_none());
    // Disabling the core step with priority 0 on a rebuild: nothing runs.
    let r = deploy(
        "1.69",
        "rebuild",
        json!([{"interface": "deploy", "step": "deploy", "args": {}, "priority": 0}]),
    )
    .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let n = s.wait_state("1.73", "dep-node", "active").await;
    assert_eq!(
        common::fake_journal(&n)
            .iter()
            .filter(|(_, e)| e == "done")
            .count(),
        3,
        "{n}"
    );
    let r = s.provision_to("1.73", "dep-node", "undeploy").await;
    assert_eq!(r.status, 202, "{}", r.body);
    s.wait_state("1.73", "dep-node", "available").await;
}

/// 1.74: the BIOS registry fields, `detail` and `fields` on the list (S304–S308).
async fn bios_registry(s: &Server) {
    let base = s.base();
    let n = s
        .node(json!({"driver": "fake-hardware", "name": "bm-node"}))
        .await;
    let uuid = n["uuid"].as_str().unwrap();
    let registry = [
        "attribute_type",
        "allowable_values",
        "lower_bound",
        "max_length",
        "min_length",
        "read_only",
        "reset_required",
        "unique",
        "upper_bound",
    ];
    let keys = |v: &serde_json::Value| {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    let sorted = |extra: &[&str]| {
        let mut k: Vec<String> = ["created_at", "updated_at", "name", "value", "links"]
            .iter()
            .chain(extra)
            .map(|s| s.to_string())
            .collect();
        k.sort();
        k
    };
    // The list: name and value by default at any version; the registry with detail.
    for v in ["1.73", "1.74"] {
        let r = s.get("/v1/nodes/bm-node/bios", v).await;
        let list = r.json()["bios"].as_array().unwrap().clone();
        assert_eq!(keys(&list[0]), sorted(&[]), "{v}");
    }
    let r = s.get("/v1/nodes/bm-node/bios?detail=true", "1.74").await;
    let first = r.json()["bios"][0].clone();
    assert_eq!(keys(&first), sorted(&registry));
    assert_eq!(first["allowable_values"], json!([]));
    assert_eq!(first["read_only"], json!(null));
    assert_eq!(
        first["links"][0]["href"],
        format!("{base}/v1/nodes/bm-node/bios/BootMode")
    );
    let r = s.get("/v1/nodes/bm-node/bios?fields=value", "1.74").await;
    let first = r.json()["bios"][0].clone();
    assert_eq!(keys(&first), ["created_at", "links", "updated_at", "value"]);
    for (q, fault) in [
        (
            "detail=true",
            "Schema error: Additional properties are not allowed ('detail' was unexpected)",
        ),
        (
            "fields=name",
            "Schema error: Additional properties are not allowed ('fields' was unexpected)",
        ),
    ] {
        let r = s.get(&format!("/v1/nodes/bm-node/bios?{q}"), "1.73").await;
        assert_eq!((r.status, r.fault()), (400, fault.to_string()), "{q}");
    }
    let r = s
        .get("/v1/nodes/bm-node/bios?detail=true&fields=name", "1.74")
        .await;
    assert_eq!(r.status, 400);
    let r = s.get("/v1/nodes/bm-node/bios?fields=colour", "1.74").await;
    assert_eq!(r.status, 400);
    // One setting: the registry from 1.74; links under the node's uuid (S307, S308).
    let r = s.get("/v1/nodes/bm-node/bios/LogicalProc", "1.74").await;
    let one = r.json()["LogicalProc"].clone();
    assert_eq!(keys(&one), sorted(&registry));
    assert_eq!(
        one["links"][0]["href"],
        format!("{base}/v1/nodes/{uuid}/bios/LogicalProc")
    );
    let r = s.get("/v1/nodes/bm-node/bios/LogicalProc", "1.73").await;
    assert_eq!(keys(&r.json()["LogicalProc"]), sorted(&[]));
}

/// 1.75 `boot_mode`/`secure_boot` and 1.76 changing them (S217, S258–S266).
async fn boot_mode(s: &Server) {
    s.node(json!({"driver": "fake-hardware", "name": "bm-node"}))
        .await;
    let r = s
        .post(
            "/v1/nodes",
            "1.74",
            &json!({"driver": "fake-hardware", "boot_mode": "uefi"}),
        )
        .await;
    assert_eq!(r.status, 406);
    let r = s
        .post(
            "/v1/nodes",
            "1.75",
            &json!({"driver": "fake-hardware", "name": "uefi-node", "boot_mode": "uefi"}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.json()["boot_mode"], "uefi");
    assert_eq!(r.json()["secure_boot"], json!(null));
    let r = s
        .post(
            "/v1/nodes",
            "1.75",
            &json!({"driver": "fake-hardware", "boot_mode": "efi"}),
        )
        .await;
    assert_eq!(r.status, 400);
    let st = s.get("/v1/nodes/bm-node/states", "1.74").await.json();
    assert!(st.get("boot_mode").is_none() && st.get("secure_boot").is_none());
    let st = s.get("/v1/nodes/bm-node/states", "1.75").await.json();
    assert_eq!(
        (&st["boot_mode"], &st["secure_boot"]),
        (&json!(null), &json!(null))
    );
    let r = s.get("/v1/nodes/bm-node?fields=boot_mode", "1.74").await;
    assert_eq!(r.status, 406);
    let put = |what: &'static str, v: &'static str, target: serde_json::Value| async move {
        s.put(
            &format!("/v1/nodes/bm-node/states/{what}"),
            v,
            Some(&json!({ "target": target })),
        )
        .await
    };
    let r = put("boot_mode", "1.75", json!("uefi")).await;
    assert_eq!(
        (r.status, r.fault()),
        (
            404,
            "This endpoint is supported starting with the API version 1.76".into()
        )
    );
    let r = put("boot_mode", "1.76", json!("efi")).await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            "Invalid boot mode efi requested for node. Allowed boot modes are: bios, uefi".into()
        )
    );
    let r = put("secure_boot", "1.76", json!("maybe")).await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            "Invalid target: Unrecognized value 'maybe', acceptable values are: '0', '1', 'f', 'false', 'n', 'no', 'off', 'on', 't', 'true', 'y', 'yes'".into()
        )
    );
    // The fake firmware refuses secure boot outside UEFI: recorded in last_error.
    let r = put("secure_boot", "1.76", json!(true)).await;
    assert_eq!(r.status, 202, "{}", r.body);
    let n = s.get("/v1/nodes/bm-node", "1.76").await.json();
    assert_eq!(n["secure_boot"], json!(null));
    assert_eq!(
        n["last_error"],
        "Failed to change secure_boot state to 'True': secure boot needs the uefi boot mode"
    );
    let r = put("boot_mode", "1.76", json!("uefi")).await;
    assert_eq!(r.status, 202, "{}", r.body);
    assert!(
        r.header("location")
            .is_some_and(|l| l.ends_with("/v1/nodes/bm-node/states"))
    );
    let r = put("secure_boot", "1.76", json!("on")).await;
    assert_eq!(r.status, 202, "{}", r.body);
    let st = s.get("/v1/nodes/bm-node/states", "1.76").await.json();
    assert_eq!(
        (&st["boot_mode"], &st["secure_boot"], &st["last_error"]),
        (&json!("uefi"), &json!(true), &json!(null))
    );
    // Read-only in PATCH.
    let r = s
        .patch(
            "/v1/nodes/bm-node",
            "1.76",
            &json!([{"op": "replace", "path": "/boot_mode", "value": "bios"}]),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
}

/// 1.77: `fields` on the driver list and a driver (S320–S322).
async fn driver_fields(s: &Server) {
    let base = s.base();
    let links = json!([
        {"href": format!("{base}/v1/drivers/fake-hardware"), "rel": "self"},
        {"href": format!("{base}/drivers/fake-hardware"), "rel": "bookmark"},
    ]);
    let r = s.get("/v1/drivers?fields=name,hosts", "1.77").await;
    assert_eq!(r.status, 200, "{}", r.body);
    let fake = r.json()["drivers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == "fake-hardware")
        .cloned()
        .unwrap();
    assert_eq!(
        fake,
        json!({"name": "fake-hardware", "hosts": ["test-conductor"], "links": links})
    );
    assert_eq!(s.get("/v1/drivers?fields=name", "1.76").await.status, 406);
    assert_eq!(
        s.get("/v1/drivers?fields=name&detail=true", "1.77")
            .await
            .status,
        400
    );
    let r = s
        .get(
            "/v1/drivers/fake-hardware?fields=name,default_boot_interface,enabled_bios_interfaces",
            "1.77",
        )
        .await;
    assert_eq!(
        r.json(),
        json!({"name": "fake-hardware", "links": links, "default_boot_interface": "fake",
               "enabled_bios_interfaces": ["fake", "no-bios"]})
    );
    let r = s
        .get("/v1/drivers/fake-hardware?fields=colour", "1.77")
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (400, "Field(s) \"colour\" are not valid".into())
    );
    // The firmware interface arrives with 1.86.
    let r = s
        .get(
            "/v1/drivers/fake-hardware?fields=default_firmware_interface",
            "1.77",
        )
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(
        s.get("/v1/drivers/fake-hardware?fields=name", "1.76")
            .await
            .status,
        406
    );
}

/// 1.78: history written by the node's conductor on state changes and errors
/// (S293–S300).
async fn history(s: &Server) {
    let base = s.base();
    available(s, "hist").await;
    let r = s
        .patch(
            "/v1/nodes/hist",
            "1.78",
            &json!([{"op": "add", "path": "/driver_info/fake_fail", "value": ["deploy.deploy"]}]),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(s.provision_to("1.78", "hist", "active").await.status, 202);
    let n = s.wait_state("1.78", "hist", "deploy failed").await;
    let uuid = n["uuid"].as_str().unwrap().to_string();
    assert_eq!(s.get("/v1/nodes/hist/history", "1.77").await.status, 404);
    let r = s.get("/v1/nodes/hist/history", "1.78").await;
    assert_eq!(r.status, 200, "{}", r.body);
    let list = r.json()["history"].as_array().unwrap().clone();
    let events: Vec<(&str, &str)> = list
        .iter()
        .map(|e| {
            (
                e["severity"].as_str().unwrap(),
                e["event"].as_str().unwrap(),
            )
        })
        .collect();
    for want in [
        ("INFO", "Provision state changed from enroll to verifying"),
        (
            "INFO",
            "Provision state changed from manageable to cleaning",
        ),
        (
            "INFO",
            "Provision state changed from available to deploying",
        ),
        (
            "INFO",
            "Provision state changed from deploying to deploy failed",
        ),
    ] {
        assert!(events.contains(&want), "{want:?} in {events:?}");
    }
    let last = list.last().unwrap();
    assert_eq!(last["severity"], "ERROR", "{list:?}");
    assert_eq!(last["event"], n["last_error"]);
    let mut keys: Vec<&String> = last.as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(keys, ["created_at", "event", "links", "severity", "uuid"]);
    let id = last["uuid"].as_str().unwrap();
    assert_eq!(
        last["links"],
        json!([{"href": format!("{base}/v1/nodes/{uuid}/history/{id}"), "rel": "self"}])
    );
    // Detail, and one entry: the detailed form.
    let d = s
        .get("/v1/nodes/hist/history?detail=true", "1.78")
        .await
        .json();
    let e = d["history"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(e["event_type"], "deploying");
    assert!(e["conductor"].is_string());
    assert!(e.get("project").is_none() && e.get("state").is_none());
    let one = s.get(&format!("/v1/nodes/hist/history/{id}"), "1.78").await;
    assert_eq!(one.json(), e);
    // Pages: a full page links to the next one.
    let r = s.get("/v1/nodes/hist/history?limit=2", "1.78").await.json();
    assert_eq!(r["history"].as_array().unwrap().len(), 2);
    let next = r["next"].as_str().unwrap();
    let second = r["history"][1]["uuid"].as_str().unwrap();
    assert!(
        next.ends_with(&format!("limit=2&marker={second}")),
        "{next}"
    );
    let path = next.strip_prefix(&base).unwrap();
    let r = s.get(path, "1.78").await.json();
    assert_eq!(r["history"][0]["uuid"], list[2]["uuid"]);
    let r = s
        .get("/v1/nodes/hist/history?sort_dir=desc&limit=1", "1.78")
        .await;
    assert_eq!(r.json()["history"][0]["uuid"], last["uuid"]);
    // Unknown entries, and another node's.
    let r = s
        .get(
            "/v1/nodes/hist/history/11111111-2222-3333-4444-555555555555",
            "1.78",
        )
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (
            404,
            "Node history record 11111111-2222-3333-4444-555555555555 could not be found.".into()
        )
    );
    s.node(json!({"driver": "fake-hardware", "name": "other"}))
        .await;
    let r = s
        .get(&format!("/v1/nodes/other/history/{id}"), "1.78")
        .await;
    assert_eq!(r.status, 404);
    assert_eq!(
        s.get("/v1/nodes/other/history", "1.78").await.json(),
        json!({"history": []})
    );
}

/// 1.79: an allocation prefers the node named like it (S355, S356).
async fn allocation_name_preference(s: &Server) {
    for name in ["pref-a", "pref-b", "pref-c"] {
        available(s, name).await;
        let r = s
            .patch(
                &format!("/v1/nodes/{name}"),
                "1.79",
                &json!([{"op": "add", "path": "/resource_class", "value": "rc-pref"}]),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let mut got = Vec::new();
    for name in [Some("pref-c"), Some("pref-b"), None] {
        let mut body = json!({"resource_class": "rc-pref"});
        if let Some(n) = name {
            body["name"] = json!(n);
        }
        let r = s.post("/v1/allocations", "1.79", &body).await;
        assert_eq!(r.status, 201, "{}", r.body);
        let uuid = r.json()["uuid"].as_str().unwrap().to_string();
        let path = format!("/v1/allocations/{uuid}");
        common::until("the allocation ends", Duration::from_secs(30), || async {
            s.get(&path, "1.79").await.json()["state"] != "allocating"
        })
        .await;
        let a = s.get(&path, "1.79").await.json();
        assert_eq!(a["state"], "active", "{a}");
        let node = a["node_uuid"].as_str().unwrap();
        let n = s.get(&format!("/v1/nodes/{node}"), "1.79").await.json();
        got.push(n["name"].as_str().unwrap().to_string());
    }
    assert_eq!(got, ["pref-c", "pref-b", "pref-a"]);
}

/// 1.81: the inventory an inspection stored, and the ports it created (S388, S392–S394).
async fn inventory(s: &Server) {
    let n = s
        .node(json!({"driver": "fake-hardware", "name": "insp-node"}))
        .await;
    let uuid = n["uuid"].as_str().unwrap();
    let r = s.provision_to("1.81", "insp-node", "manage").await;
    assert_eq!(r.status, 202, "{}", r.body);
    s.wait_state("1.81", "insp-node", "manageable").await;
    let r = s.get("/v1/nodes/insp-node/inventory", "1.81").await;
    assert_eq!(
        (r.status, r.fault()),
        (
            404,
            format!("Node inventory record for node {uuid} could not be found.")
        )
    );
    assert_eq!(
        s.provision_to("1.81", "insp-node", "inspect").await.status,
        202
    );
    let n = s.wait_state("1.81", "insp-node", "manageable").await;
    assert_eq!(n["last_error"], json!(null));
    assert_eq!(
        (
            &n["properties"]["cpus"],
            &n["properties"]["memory_mb"],
            &n["properties"]["local_gb"],
            &n["properties"]["cpu_arch"]
        ),
        (&json!(8), &json!(16384), &json!(99), &json!("x86_64"))
    );
    let r = s.get("/v1/nodes/insp-node/inventory", "1.81").await;
    assert_eq!(r.status, 200, "{}", r.body);
    let doc = r.json();
    let nics = doc["inventory"]["interfaces"].as_array().unwrap().clone();
    assert_eq!(nics.len(), 2);
    let pxe = doc["inventory"]["boot"]["pxe_interface"].as_str().unwrap();
    assert_eq!(nics[0]["mac_address"], pxe);
    assert_eq!(doc["plugin_data"]["boot_interface"], pxe);
    // `[inspector] add_ports = pxe` (the default): a port for the PXE NIC only.
    let ports = s
        .get("/v1/nodes/insp-node/ports?detail=true", "1.81")
        .await
        .json();
    let ports = ports["ports"].as_array().unwrap().clone();
    assert_eq!(ports.len(), 1, "{ports:?}");
    assert_eq!(ports[0]["address"], pxe);
    assert_eq!(ports[0]["pxe_enabled"], true);
    // Inspecting again keeps the port and replaces the inventory.
    assert_eq!(
        s.provision_to("1.81", "insp-node", "inspect").await.status,
        202
    );
    let n = s.wait_state("1.81", "insp-node", "manageable").await;
    assert_eq!(n["last_error"], json!(null));
    let ports = s.get("/v1/nodes/insp-node/ports", "1.81").await.json();
    assert_eq!(ports["ports"].as_array().unwrap().len(), 1);
    // Below 1.81 the route does not exist; an unknown node is 404 too.
    assert_eq!(
        s.get("/v1/nodes/insp-node/inventory", "1.80").await.status,
        404
    );
    let r = s.get("/v1/nodes/no-such-node/inventory", "1.81").await;
    assert_eq!(
        (r.status, r.fault()),
        (404, "Node no-such-node could not be found.".into())
    );
    // A failing inspection ends in `inspect failed` with the reason.
    let r = s
        .patch(
            "/v1/nodes/insp-node",
            "1.81",
            &json!([{"op": "add", "path": "/driver_info/fake_fail", "value": ["inspect.inspect_hardware"]}]),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        s.provision_to("1.81", "insp-node", "inspect").await.status,
        202
    );
    let n = s.wait_state("1.81", "insp-node", "inspect failed").await;
    assert!(
        n["last_error"].as_str().unwrap().starts_with(
            "Failed to inspect hardware. Reason: fake failure of inspect.inspect_hardware"
        ),
        "{n}"
    );
}

/// 1.84: in-band inspection: the `agent` inspect interface waits in `inspect wait` for
/// the ramdisk's data, posted to `/v1/continue_inspection` and found by MAC, BMC address
/// or uuid (S389–S392, S395).
async fn continue_inspection(s: &Server) {
    let n = s
        .node(json!({"driver": "fake-hardware", "name": "insp-agent",
                     "inspect_interface": "agent",
                     "driver_info": {"ipmi_address": "192.0.2.40"}}))
        .await;
    let uuid = n["uuid"].as_str().unwrap().to_string();
    let other = s
        .node(json!({"driver": "fake-hardware", "name": "insp-other"}))
        .await;
    let other = other["uuid"].as_str().unwrap().to_string();
    let r = s
        .post(
            "/v1/ports",
            "1.84",
            &json!({"address": "52:54:00:00:40:01", "node_uuid": uuid}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    s.provision_to("1.84", "insp-agent", "manage").await;
    s.wait_state("1.84", "insp-agent", "manageable").await;
    let data = |macs: &[&str], extra: serde_json::Value| {
        let ifaces: Vec<_> = macs
            .iter()
            .enumerate()
            .map(|(i, m)| json!({"name": format!("eth{i}"), "mac_address": m}))
            .collect();
        let mut d = json!({"inventory": {"interfaces": ifaces,
                                         "cpu": {"architecture": "aarch64", "count": 4},
                                         "bmc_address": null}});
        for (k, v) in extra.as_object().unwrap() {
            d[k] = v.clone();
        }
        d
    };
    let post = |path: &'static str, v: &'static str, body: serde_json::Value| async move {
        s.post(path, v, &body).await
    };
    let mine = data(
        &["52:54:00:00:40:01", "52:54:00:00:40:02"],
        json!({"boot_interface": "01-52-54-00-00-40-02", "logs": "bG9ncw=="}),
    );
    // Not waiting for data: not found; below 1.84 (but above 1.1) the route is hidden.
    let r = post("/v1/continue_inspection", "1.84", mine.clone()).await;
    assert_eq!(
        (r.status, r.fault()),
        (404, "Resource could not be found.".into())
    );
    let r = post("/v1/continue_inspection", "1.83", mine.clone()).await;
    assert_eq!(
        (r.status, r.fault()),
        (404, "API version 1.84 or newer is required".into())
    );
    let r = post(
        "/v1/continue_inspection?node_uuid=1be26c0b-03f2-4d2e-ae87-c02d7f33c123",
        "1.1",
        mine.clone(),
    )
    .await;
    assert_eq!(r.status, 404, "{}", r.body);
    for (body, fault) in [
        (
            json!({}),
            "Schema error: 'inventory' is a required property",
        ),
        (
            json!({"inventory": []}),
            "Schema error: [] is not of type 'object'",
        ),
        (
            json!({"inventory": {"interfaces": []}}),
            "Schema error: [] should be non-empty",
        ),
        (
            json!({"inventory": {"interfaces": [{"name": "eth0"}]}}),
            "Schema error: 'mac_address' is a required property",
        ),
        (
            json!({"inventory": {"interfaces": [{"mac_address": "junk"}]}}),
            "No lookup information provided",
        ),
    ] {
        let r = post("/v1/continue_inspection", "1.84", body).await;
        assert_eq!((r.status, r.fault()), (400, fault.into()));
    }

    // In-band inspection waits for the ramdisk, powered on.
    assert_eq!(
        s.provision_to("1.84", "insp-agent", "inspect").await.status,
        202
    );
    let n = s.wait_state("1.84", "insp-agent", "inspect wait").await;
    assert_eq!(
        (&n["target_provision_state"], &n["power_state"]),
        (&json!("manageable"), &json!("power on"))
    );
    assert_eq!(
        n["driver_internal_info"]["lookup_bmc_addresses"],
        json!(["192.0.2.40"])
    );
    // MACs of this node with the uuid of another: a conflict reads as not found.
    let r = s
        .post(
            &format!("/v1/continue_inspection?node_uuid={other}"),
            "1.84",
            &mine,
        )
        .await;
    assert_eq!(r.status, 404, "{}", r.body);
    // Found by its port's MAC: the answer is a lookup's, with a fresh token.
    let r = post("/v1/continue_inspection", "1.84", mine.clone()).await;
    assert_eq!(r.status, 202, "{}", r.body);
    let answer = r.json();
    assert_eq!(answer["node"]["uuid"], json!(uuid));
    let token = answer["config"]["agent_token"].as_str().unwrap();
    assert!(token.len() > 20 && token != "******", "{answer}");
    let n = s.wait_state("1.84", "insp-agent", "manageable").await;
    assert_eq!(n["last_error"], json!(null));
    assert_eq!(n["properties"]["cpu_arch"], "aarch64");
    // Upstream's default hooks set no more than the architecture.
    assert_eq!(n["properties"]["cpus"], json!(null));
    assert_eq!(n["power_state"], "power off");
    assert_eq!(n["inspection_started_at"], json!(null));
    assert!(n["inspection_finished_at"].is_string(), "{n}");
    for gone in [
        "lookup_bmc_addresses",
        "agent_secret_token",
        "inspect_wait_deadline",
    ] {
        assert_eq!(n["driver_internal_info"][gone], json!(null), "{gone}: {n}");
    }
    let inv = s.get("/v1/nodes/insp-agent/inventory", "1.84").await.json();
    assert_eq!(inv["inventory"], mine["inventory"]);
    assert_eq!(
        inv["plugin_data"],
        json!({"boot_interface": "01-52-54-00-00-40-02"})
    );
    // `add_ports = pxe`: the boot interface's MAC became a PXE port.
    let ports = s
        .get(
            "/v1/nodes/insp-agent/ports?fields=address,pxe_enabled",
            "1.84",
        )
        .await
        .json();
    let mut ports: Vec<(String, bool)> = ports["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["address"].as_str().unwrap().to_string(),
                p["pxe_enabled"].as_bool().unwrap(),
            )
        })
        .collect();
    ports.sort();
    assert_eq!(
        ports,
        [
            ("52:54:00:00:40:01".to_string(), true),
            ("52:54:00:00:40:02".to_string(), true)
        ]
    );
    // Taken: a second post finds the node no longer waiting.
    let r = post("/v1/continue_inspection", "1.84", mine.clone()).await;
    assert_eq!(r.status, 404);

    // Found by the BMC address alone (an unknown NIC), at 1.1: inspector's answer.
    assert_eq!(
        s.provision_to("1.84", "insp-agent", "inspect").await.status,
        202
    );
    s.wait_state("1.84", "insp-agent", "inspect wait").await;
    let mut by_bmc = data(&["52:54:00:00:99:99"], json!({}));
    by_bmc["inventory"]["bmc_address"] = json!("192.0.2.40");
    let r = post("/v1/continue_inspection", "1.1", by_bmc).await;
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(r.json(), json!({"uuid": uuid}));
    s.wait_state("1.84", "insp-agent", "manageable").await;

    // The ramdisk's error fails the inspection; the uuid finds the node.
    assert_eq!(
        s.provision_to("1.84", "insp-agent", "inspect").await.status,
        202
    );
    s.wait_state("1.84", "insp-agent", "inspect wait").await;
    let r = s
        .post(
            &format!("/v1/continue_inspection?node_uuid={uuid}"),
            "1.84",
            &data(&["52:54:00:00:99:98"], json!({"error": "disk on fire"})),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let n = s.wait_state("1.84", "insp-agent", "inspect failed").await;
    assert_eq!(
        n["last_error"],
        "Failed to finish inspection: Ramdisk reported error: disk on fire"
    );

    // Abort ends the wait.
    s.provision_to("1.84", "insp-agent", "inspect").await;
    s.wait_state("1.84", "insp-agent", "inspect wait").await;
    assert_eq!(
        s.provision_to("1.84", "insp-agent", "abort").await.status,
        202
    );
    let n = s.wait_state("1.84", "insp-agent", "inspect failed").await;
    assert_eq!(n["last_error"], "Inspection was aborted by request.");
    assert_eq!(n["power_state"], "power off");
    assert_eq!(
        n["driver_internal_info"]["lookup_bmc_addresses"],
        json!(null)
    );

    // The discovery document names the route from 1.84 (S002's order).
    let v1 = s.get("/v1", "1.84").await.json();
    let keys: Vec<&str> = v1.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys.last(), Some(&"continue_inspection"), "{keys:?}");
    assert!(
        s.get("/v1", "1.83")
            .await
            .json()
            .get("continue_inspection")
            .is_none()
    );
}

/// 1.84: an in-band inspection that hears nothing from the ramdisk fails after
/// `[conductor] inspect_wait_timeout`, powered off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_wait_times_out() {
    let s = common::start_with(common::Backend::Sqlite, |c| {
        c.conductor.inspect_wait_timeout = 1;
    })
    .await;
    s.node(json!({"driver": "fake-hardware", "name": "silent", "inspect_interface": "agent"}))
        .await;
    s.provision_to("1.84", "silent", "manage").await;
    s.wait_state("1.84", "silent", "manageable").await;
    s.provision_to("1.84", "silent", "inspect").await;
    let n = s.wait_state("1.84", "silent", "inspect failed").await;
    assert_eq!(
        n["last_error"],
        "Timeout reached while inspecting the node. Please check if the ramdisk responsible for the inspection is running on the node."
    );
    assert_eq!(n["power_state"], "power off");
    s.stop().await;
}

/// 1.85: `unhold`: the reserved `hold` step holds cleaning and deploying until it; the
/// state is checked before the version (S332, S333); reserved power steps run too.
async fn unhold(s: &Server) {
    let hold_uuid = s
        .node(json!({"driver": "fake-hardware", "name": "hold-node"}))
        .await["uuid"]
        .as_str()
        .unwrap()
        .to_string();
    s.provision_to("1.85", "hold-node", "manage").await;
    s.wait_state("1.85", "hold-node", "manageable").await;
    for v in ["1.84", "1.85"] {
        let r = s.provision_to(v, "hold-node", "unhold").await;
        assert_eq!(
            (r.status, r.fault()),
            (
                400,
                format!(
                    "The requested action \"unhold\" can not be performed on node \"{hold_uuid}\" while it is in state \"manageable\"."
                )
            ),
            "at {v}"
        );
    }
    let steps = json!([
        {"interface": "power", "step": "power_off"},
        {"interface": "deploy", "step": "hold"},
        {"interface": "power", "step": "power_on"},
        {"interface": "deploy", "step": "wait", "args": {"seconds": 1}},
    ]);
    let r = s
        .provision(
            "1.85",
            "hold-node",
            json!({"target": "clean", "clean_steps": steps}),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let n = s.wait_state("1.85", "hold-node", "clean hold").await;
    assert_eq!(
        (&n["power_state"], &n["target_provision_state"]),
        (&json!("power off"), &json!("manageable"))
    );
    assert_eq!(n["clean_step"]["step"], "hold");
    assert_eq!(
        s.provision_to("1.84", "hold-node", "unhold").await.status,
        406
    );
    assert_eq!(
        s.provision_to("1.85", "hold-node", "unhold").await.status,
        202
    );
    let n = s.wait_state("1.85", "hold-node", "manageable").await;
    assert_eq!(
        (&n["power_state"], &n["last_error"]),
        (&json!("power on"), &json!(null))
    );
    assert_eq!(n["clean_step"], json!({}));

    // A deploy holds at its `hold` step, continues on `unhold`; `abort` ends a hold.
    s.provision_to("1.85", "hold-node", "provide").await;
    s.wait_state("1.85", "hold-node", "available").await;
    let hold = json!([{"interface": "deploy", "step": "hold", "priority": 90, "args": {}}]);
    let r = s
        .provision(
            "1.85",
            "hold-node",
            json!({"target": "active", "deploy_steps": hold}),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let n = s.wait_state("1.85", "hold-node", "deploy hold").await;
    assert_eq!(n["target_provision_state"], "active");
    assert_eq!(
        s.provision_to("1.85", "hold-node", "unhold").await.status,
        202
    );
    let n = s.wait_state("1.85", "hold-node", "active").await;
    assert_eq!(n["last_error"], json!(null));
    let r = s
        .provision(
            "1.85",
            "hold-node",
            json!({"target": "rebuild", "deploy_steps": hold}),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    s.wait_state("1.85", "hold-node", "deploy hold").await;
    assert_eq!(
        s.provision_to("1.85", "hold-node", "abort").await.status,
        202
    );
    let n = s.wait_state("1.85", "hold-node", "deploy failed").await;
    assert_eq!(
        n["last_error"],
        "By request, the deploy operation was aborted during or after the completion of step \"deploy.hold\""
    );
}

/// 1.86: firmware components, recorded after an inspection (S301–S303).
async fn firmware(s: &Server) {
    s.node(json!({"driver": "fake-hardware", "name": "fw-node"}))
        .await;
    assert_eq!(
        s.get("/v1/nodes/fw-node/firmware", "1.85").await.status,
        404
    );
    assert_eq!(
        s.get("/v1/nodes/fw-node?fields=firmware_interface", "1.85")
            .await
            .status,
        406
    );
    let r = s
        .get("/v1/nodes/fw-node?fields=firmware_interface", "1.86")
        .await;
    assert_eq!(r.json()["firmware_interface"], "fake");
    let r = s.get("/v1/nodes/fw-node/firmware", "1.86").await;
    assert_eq!((r.status, r.json()), (200, json!({"firmware": []})));
    s.provision_to("1.86", "fw-node", "manage").await;
    s.wait_state("1.86", "fw-node", "manageable").await;
    s.provision_to("1.86", "fw-node", "inspect").await;
    s.wait_state("1.86", "fw-node", "manageable").await;
    let list = s.get("/v1/nodes/fw-node/firmware", "1.86").await.json();
    let list = list["firmware"].as_array().unwrap().clone();
    assert_eq!(list.len(), 2, "{list:?}");
    let keys: Vec<&str> = list[0]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "created_at",
            "updated_at",
            "component",
            "initial_version",
            "current_version",
            "last_version_flashed"
        ]
    );
    assert_eq!(
        (
            &list[0]["component"],
            &list[0]["initial_version"],
            &list[0]["current_version"]
        ),
        (&json!("bios"), &json!("1.0.0"), &json!("1.0.0"))
    );
    assert_eq!(list[1]["component"], "bmc");
    // Inspecting again updates them, keeping when they were first seen.
    s.provision_to("1.86", "fw-node", "inspect").await;
    s.wait_state("1.86", "fw-node", "manageable").await;
    let again = s
        .get("/v1/nodes/fw-node/firmware?fields=component", "1.86")
        .await
        .json();
    assert_eq!(again["firmware"][0]["created_at"], list[0]["created_at"]);
    assert!(again["firmware"][0]["updated_at"].is_string(), "{again}");
    assert_eq!(again["firmware"][0].as_object().unwrap().len(), 3);
    let r = s
        .get(
            "/v1/nodes/fw-node/firmware?fields=vendor,serial_number",
            "1.86",
        )
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            "Fields serial_number, vendor are not allowed in this API version. They require at least API version 1.114.".into()
        )
    );
    let r = s
        .get("/v1/nodes/fw-node/firmware?fields=nope", "1.86")
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (400, "Field nope is not a valid field.".into())
    );
    // No firmware interface, nothing recorded.
    let r = s
        .post(
            "/v1/nodes",
            "1.86",
            &json!({"driver": "fake-hardware", "name": "fw-none", "firmware_interface": "no-firmware"}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    s.provision_to("1.86", "fw-none", "manage").await;
    s.wait_state("1.86", "fw-none", "manageable").await;
    s.provision_to("1.86", "fw-none", "inspect").await;
    s.wait_state("1.86", "fw-none", "manageable").await;
    let r = s.get("/v1/nodes/fw-none/firmware", "1.86").await;
    assert_eq!(r.json(), json!({"firmware": []}));
}

/// 1.87: servicing an active node with `service_steps` (S339–S347, S350).
async fn servicing(s: &Server) {
    let n = s
        .node(json!({"driver": "fake-hardware", "name": "svc-node"}))
        .await;
    let uuid = n["uuid"].as_str().unwrap().to_string();
    let log = json!([{"interface": "vendor", "step": "log_passthrough", "args": {}}]);
    s.provision_to("1.87", "svc-node", "manage").await;
    s.wait_state("1.87", "svc-node", "manageable").await;
    s.provision_to("1.87", "svc-node", "provide").await;
    s.wait_state("1.87", "svc-node", "available").await;
    let r = s
        .provision(
            "1.87",
            "svc-node",
            json!({"target": "service", "service_steps": log}),
        )
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            format!(
                "The requested action \"service\" can not be performed on node \"{}\" while it is in state \"available\".",
                s.get("/v1/nodes/svc-node", "1.87").await.json()["uuid"]
                    .as_str()
                    .unwrap()
            )
        )
    );
    s.provision_to("1.87", "svc-node", "active").await;
    s.wait_state("1.87", "svc-node", "active").await;
    let r = s
        .provision(
            "1.86",
            "svc-node",
            json!({"target": "service", "service_steps": log}),
        )
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (406, "Request not acceptable.".into())
    );
    let r = s
        .provision("1.87", "svc-node", json!({"target": "service"}))
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            "\"service_steps\" is required when setting target provision state to service".into()
        )
    );
    let r = s
        .provision(
            "1.87",
            "svc-node",
            json!({"target": "rebuild", "service_steps": log}),
        )
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            "\"service_steps\" is only valid when setting target provision state to service".into()
        )
    );
    let r = s
        .provision(
            "1.87",
            "svc-node",
            json!({"target": "service", "service_steps": log, "disable_ramdisk": true}),
        )
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (
            406,
            "disable_ramdisk is not acceptable in this API version".into()
        )
    );
    assert_eq!(
        s.get("/v1/nodes/svc-node?fields=service_step", "1.86")
            .await
            .status,
        406
    );

    // The steps run and the node is active again (S342, S343).
    let r = s
        .provision(
            "1.87",
            "svc-node",
            json!({"target": "service", "service_steps": log}),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    s.wait_state("1.87", "svc-node", "active").await;
    let n = s
        .get("/v1/nodes/svc-node?fields=target_provision_state,service_step,last_error,driver_internal_info", "1.87")
        .await
        .json();
    assert!(
        common::fake_journal(&n)
            .contains(&("vendor.log_passthrough".to_string(), "done".to_string())),
        "{n}"
    );
    assert_eq!(
        (
            &n["target_provision_state"],
            &n["service_step"],
            &n["last_error"]
        ),
        (&json!(null), &json!({}), &json!(null))
    );

    // A hold in servicing waits for unhold.
    let hold =
        json!([{"interface": "deploy", "step": "hold"}, {"interface": "power", "step": "reboot"}]);
    let r = s
        .provision(
            "1.87",
            "svc-node",
            json!({"target": "service", "service_steps": hold}),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let n = s.wait_state("1.87", "svc-node", "service hold").await;
    assert_eq!(n["service_step"]["step"], "hold");
    assert_eq!(
        s.provision_to("1.87", "svc-node", "unhold").await.status,
        202
    );
    let n = s.wait_state("1.87", "svc-node", "active").await;
    assert_eq!(n["power_state"], "power on");

    // An unknown step fails the servicing, in maintenance (S346, S347).
    let r = s
        .provision(
            "1.87",
            "svc-node",
            json!({"target": "service", "service_steps": [{"interface": "vendor", "step": "explode"}]}),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let n = s.wait_state("1.87", "svc-node", "service failed").await;
    assert_eq!(
        (&n["target_provision_state"], &n["maintenance"], &n["fault"]),
        (&json!("active"), &json!(true), &json!("service failure"))
    );
    assert_eq!(
        n["last_error"],
        format!(
            "Node {uuid} failed step {{'interface': 'vendor', 'step': 'explode', 'args': {{}}}}: the vendor interface has no step explode"
        )
    );
}

/// The newest microversion the server advertises (its minor number).
async fn max_minor(s: &Server) -> u16 {
    let r = s.get("/v1", "latest").await;
    let v = r
        .header("x-openstack-ironic-api-version")
        .unwrap()
        .to_string();
    v.trim_start_matches("1.").parse().unwrap()
}

/// Port fields above 1.87 (S036–S045, S063, S067): each is 406 in a body and in
/// `fields=` one version below the one that added it, and stored and shown from it.
/// Walks the fields of every version up to the advertised maximum.
async fn port_fields_by_version(s: &Server) {
    let max = max_minor(s).await;
    let n = s
        .node(json!({"driver": "fake-hardware", "name": "pf-node"}))
        .await;
    let node = n["uuid"].as_str().unwrap().to_string();
    let cases: [(&str, u16, serde_json::Value); 5] = [
        ("name", 88, json!("pf-port")),
        ("description", 97, json!("uplink to leaf 3")),
        ("vendor", 100, json!("acme")),
        ("category", 101, json!("storage")),
        ("available_for_dynamic_portgroup", 111, json!(false)),
    ];
    let mut mac = 0x10;
    for (field, since, value) in cases {
        if since > max {
            continue;
        }
        mac += 1;
        let body = json!({"address": format!("52:54:00:aa:00:{mac:02x}"), "node_uuid": node, field: value});
        let below = format!("1.{}", since - 1);
        let at = format!("1.{since}");
        let r = s.post("/v1/ports", &below, &body).await;
        assert_eq!(
            (r.status, r.fault()),
            (406, "Request not acceptable.".into()),
            "{field} at {below}"
        );
        let r = s.post("/v1/ports", &at, &body).await;
        assert_eq!(r.status, 201, "{field} at {at}: {}", r.body);
        assert_eq!(r.json()[field], value, "{field}");
        let uuid = r.json()["uuid"].as_str().unwrap().to_string();
        let r = s
            .get(&format!("/v1/ports/{uuid}?fields={field}"), &below)
            .await;
        assert_eq!(r.status, 406, "fields={field} at {below}");
        let r = s.get(&format!("/v1/ports/{uuid}"), &below).await;
        assert!(r.json().get(field).is_none(), "{field} shown at {below}");
        let r = s
            .get(&format!("/v1/ports/{uuid}?fields={field}"), &at)
            .await;
        assert_eq!(r.json()[field], value, "{field} at {at}");
    }
    if max >= 88 {
        // A port by its name (S064); a second port of that name is refused.
        let r = s.get("/v1/ports/pf-port", "1.88").await;
        assert_eq!((r.status, &r.json()["name"]), (200, &json!("pf-port")));
        let r = s
            .post(
                "/v1/ports",
                "1.88",
                &json!({"address": "52:54:00:aa:01:01", "node_uuid": node, "name": "pf-port"}),
            )
            .await;
        assert_eq!(r.status, 409, "{}", r.body);
        let r = s
            .post(
                "/v1/ports",
                "1.88",
                &json!({"address": "52:54:00:aa:01:02", "node_uuid": node, "name": "not a name"}),
            )
            .await;
        assert_eq!(r.status, 400, "{}", r.body);
    }
    if max >= 94 {
        // The node by name (S037, S040).
        let body = json!({"address": "52:54:00:aa:02:01", "node_ident": "pf-node"});
        assert_eq!(s.post("/v1/ports", "1.93", &body).await.status, 406);
        let r = s.post("/v1/ports", "1.94", &body).await;
        assert_eq!((r.status, &r.json()["node_uuid"]), (201, &json!(node)));
    }
}

/// 1.89 and 1.93: virtual media (S285–S292); fake-hardware keeps what is inserted.
async fn vmedia(s: &Server) {
    let max = max_minor(s).await;
    s.node(json!({"driver": "fake-hardware", "name": "vm-node"}))
        .await;
    let iso = json!({"device_type": "cdrom", "image_url": "http://192.0.2.1/boot.iso",
                     "image_download_source": "http"});
    let r = s.post("/v1/nodes/vm-node/vmedia", "1.88", &iso).await;
    assert_eq!(r.status, 404, "{}", r.body);
    assert_eq!(
        s.delete("/v1/nodes/vm-node/vmedia", "1.88").await.status,
        404
    );
    // Done in the background, as upstream's (the 204 comes once it is checked).
    let media = |want: serde_json::Value| {
        let s = &s;
        async move {
            common::until("the node's virtual media", Duration::from_secs(10), || {
                let want = want.clone();
                async move {
                    let n = s.get("/v1/nodes/vm-node", "1.89").await.json();
                    n["driver_internal_info"]["fake_vmedia"] == want
                }
            })
            .await;
        }
    };
    let r = s.post("/v1/nodes/vm-node/vmedia", "1.89", &iso).await;
    assert_eq!(r.status, 204, "{}", r.body);
    media(json!({"cdrom": "http://192.0.2.1/boot.iso"})).await;
    for (body, fault) in [
        (
            json!({"device_type": "tape", "image_url": "http://192.0.2.1/boot.iso"}),
            "Schema error for vmedia: 'tape' is not one of ['disk', 'cdrom', 'floppy']",
        ),
        (
            json!({"device_type": "cdrom", "image_url": "file:///boot.iso"}),
            "Unsupported or missing URL scheme: file",
        ),
        (
            json!({"device_type": "cdrom"}),
            "Schema error for vmedia: 'image_url' is a required property",
        ),
    ] {
        let r = s.post("/v1/nodes/vm-node/vmedia", "1.89", &body).await;
        assert_eq!((r.status, r.fault()), (400, fault.into()));
    }
    let r = s
        .post(
            "/v1/nodes/vm-node/vmedia",
            "1.89",
            &json!({"device_type": "floppy", "image_url": "nfs://192.0.2.1/export/f.img"}),
        )
        .await;
    assert_eq!(r.status, 204, "{}", r.body);
    let r = s
        .delete("/v1/nodes/vm-node/vmedia?device_types=tape", "1.89")
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            "Invalid device type(s) tape (valid are disk, cdrom, floppy)".into()
        )
    );
    let r = s
        .delete("/v1/nodes/vm-node/vmedia?device_types=cdrom", "1.89")
        .await;
    assert_eq!(r.status, 204, "{}", r.body);
    media(json!({"floppy": "nfs://192.0.2.1/export/f.img"})).await;
    // GET: not below 1.93 (S292's plain not-found).
    let r = s.get("/v1/nodes/vm-node/vmedia", "1.89").await;
    assert_eq!(
        (r.status, r.fault()),
        (404, "The resource could not be found.".into())
    );
    if max >= 93 {
        let r = s.get("/v1/nodes/vm-node/vmedia", "1.93").await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(
            r.json(),
            json!([
                {"media_types": ["USBStick"], "inserted": false, "image": ""},
                {"media_types": ["CD", "DVD"], "inserted": false, "image": ""},
                {"media_types": ["Floppy"], "inserted": true, "image": "nfs://192.0.2.1/export/f.img"},
            ])
        );
    }
    // Everything out.
    assert_eq!(
        s.delete("/v1/nodes/vm-node/vmedia", "1.89").await.status,
        204
    );
    media(json!(null)).await;
    // The management interface is validated first: a failure is the answer (400).
    let r = s
        .post(
            "/v1/nodes",
            "1.89",
            &json!({"driver": "oneview", "name": "vm-ov",
                    "driver_info": {"server_hardware_uri": "/rest/server-hardware/1"}}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let r = s.post("/v1/nodes/vm-ov/vmedia", "1.89", &iso).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.fault().contains("server_hardware_type_uri"), "{}", r.body);
    // A management interface without virtual media: 204 (it validates), then
    // upstream's "does not support" in `last_error` and in the node's history.
    let r = s
        .post(
            "/v1/nodes",
            "1.89",
            &json!({"driver": "ipmi", "name": "vm-ipmi",
                    "driver_info": {"ipmi_address": "192.0.2.9"}}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let uuid = r.json()["uuid"].as_str().unwrap().to_string();
    let r = s.post("/v1/nodes/vm-ipmi/vmedia", "1.89", &iso).await;
    assert_eq!(r.status, 204, "{}", r.body);
    let want = format!(
        "Could not attach device cdrom to node {uuid}: Driver ipmi does not support attach_virtual_media (disabled or not implemented)."
    );
    common::until(
        "the failure in last_error",
        Duration::from_secs(10),
        || async { s.get("/v1/nodes/vm-ipmi", "1.89").await.json()["last_error"] == want.as_str() },
    )
    .await;
    if max >= 78 {
        let h = s.get("/v1/nodes/vm-ipmi/history", "1.78").await.json();
        let events: Vec<&str> = h["history"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["severity"] == "ERROR")
            .map(|e| e["event"].as_str().unwrap())
            .collect();
        assert_eq!(events, [want.as_str()], "{h}");
    }
}

/// 1.90 (and 1.105): the OVN VTEP keys of `local_link_connection`; 1.91: no `.json`
/// suffix stripping (S255–S257).
async fn vtep_and_json_suffix(s: &Server) {
    let max = max_minor(s).await;
    let n = s
        .node(json!({"driver": "fake-hardware", "name": "sfx"}))
        .await;
    let node = n["uuid"].as_str().unwrap().to_string();
    let llc = json!({"port_id": "Ethernet1/9", "vtep-logical-switch": "ls-1",
                     "vtep-physical-switch": "ps-1"});
    let body =
        json!({"address": "52:54:00:bb:00:01", "node_uuid": node, "local_link_connection": llc});
    assert_eq!(s.post("/v1/ports", "1.89", &body).await.status, 406);
    let r = s.post("/v1/ports", "1.90", &body).await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.json()["local_link_connection"], llc);
    let uuid = r.json()["uuid"].as_str().unwrap().to_string();
    // Shown empty where the keys are not allowed.
    let r = s.get(&format!("/v1/ports/{uuid}"), "1.89").await;
    assert_eq!(r.json()["local_link_connection"], json!({}));
    let r = s
        .post(
            "/v1/ports",
            "1.90",
            &json!({"address": "52:54:00:bb:00:02", "node_uuid": node,
                    "local_link_connection": {"port_id": "p", "vtep-logical-switch": "ls"}}),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(
        r.fault()
            .contains("'vtep-physical-switch' is a dependency of 'vtep-logical-switch'"),
        "{}",
        r.fault()
    );
    if max >= 105 {
        let b2 = json!({"address": "52:54:00:bb:00:03", "node_uuid": node, "local_link_connection": llc});
        assert_eq!(s.post("/v1/ports", "1.105", &b2).await.status, 406);
    }
    if max >= 91 {
        let r = s.get("/v1/nodes/sfx.json?fields=name", "1.90").await;
        assert_eq!((r.status, &r.json()["name"]), (200, &json!("sfx")));
        let r = s.get("/v1/nodes/sfx.json?fields=name", "1.91").await;
        assert_eq!(
            (r.status, r.fault()),
            (404, "Node sfx.json could not be found.".into())
        );
        let r = s
            .post(
                "/v1/nodes",
                "1.91",
                &json!({"driver": "fake-hardware", "name": "dot.json"}),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.body);
        let r = s.get("/v1/nodes/dot.json?fields=name", "1.91").await;
        assert_eq!((r.status, &r.json()["name"]), (200, &json!("dot.json")));
    }
}

/// 1.92: runbooks, and running one in manual cleaning or servicing (S402–S454).
async fn runbooks(s: &Server) {
    let max = max_minor(s).await;
    let r = s.get("/v1/runbooks", "1.91").await;
    assert_eq!(r.status, 404, "{}", r.body);
    let bios = json!({"interface": "bios", "step": "apply_configuration",
                      "args": {"settings": [{"name": "LogicalProc", "value": "Disabled"}]},
                      "order": 0});
    let log = json!({"interface": "vendor", "step": "log_passthrough", "args": {}, "order": "1"});
    let body = json!({"name": "CUSTOM_BIOS_TUNE", "steps": [log, bios], "extra": {"team": "ops"}});
    assert_eq!(s.post("/v1/runbooks", "1.91", &body).await.status, 405);
    let r = s.post("/v1/runbooks", "1.92", &body).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let created = r.json();
    let uuid = created["uuid"].as_str().unwrap().to_string();
    let keys: Vec<&str> = created
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "uuid",
            "created_at",
            "updated_at",
            "name",
            "extra",
            "public",
            "owner",
            "disable_ramdisk",
            "links",
            "steps"
        ]
    );
    assert_eq!(created["steps"][0]["order"], 1);
    let err = |b: serde_json::Value| async move { s.post("/v1/runbooks", "1.92", &b).await };
    for (b, status, fault) in [
        (
            json!({"name": "my-runbook", "steps": [bios]}),
            400,
            "Schema error for runbook: 'my-runbook' is not valid under any of the given schemas. Possible root cause: 'my-runbook' does not match '^CUSTOM_[A-Z0-9_]+$'",
        ),
        (
            json!({"name": "CUSTOM_E", "steps": []}),
            400,
            "Schema error for runbook: [] should be non-empty",
        ),
        (
            json!({"name": "CUSTOM_E", "steps": [{"interface": "bios", "step": "x", "args": {}}]}),
            400,
            "Schema error for runbook: 'order' is a required property",
        ),
        (
            json!({"name": "CUSTOM_E", "steps": [{"interface": "network", "step": "x", "args": {}, "order": 0}]}),
            400,
            "Schema error for runbook: 'network' is not one of ['vendor', 'power', 'management', 'firmware', 'deploy', 'bios', 'raid']",
        ),
        (
            json!({"name": "CUSTOM_E", "steps": [bios, bios]}),
            400,
            "Deploy template invalid: Duplicate deploy steps. A template cannot have multiple deploy steps with the same interface and step. Duplicates: interface: bios, step: apply_configuration.",
        ),
        (
            json!({"name": "CUSTOM_BIOS_TUNE", "steps": [bios]}),
            409,
            "A runbook with name CUSTOM_BIOS_TUNE already exists.",
        ),
        (
            json!({"name": "CUSTOM_E", "steps": [bios], "owner": "other"}),
            400,
            "Cannot create a runbook as a project scoped admin with an owner other than your own project.",
        ),
    ] {
        let r = err(b.clone()).await;
        assert_eq!((r.status, r.fault()), (status, fault.to_string()), "{b}");
    }
    for extra in [json!({"traits": ["CUSTOM_A"]}), json!({"description": "d"})] {
        let mut b = json!({"name": "CUSTOM_E", "steps": [bios]});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        assert_eq!(err(b).await.status, 400);
    }
    // Read by name or uuid; lists show uuid and name; steps are no sort key.
    let r = s.get("/v1/runbooks/CUSTOM_BIOS_TUNE", "1.92").await;
    assert_eq!((r.status, &r.json()["uuid"]), (200, &json!(uuid)));
    let r = s.get("/v1/runbooks/no-such-runbook", "1.92").await;
    assert_eq!(
        (r.status, r.fault()),
        (404, "Runbook no-such-runbook could not be found.".into())
    );
    let l = s.get("/v1/runbooks", "1.92").await.json();
    let keys: Vec<&str> = l["runbooks"][0]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, ["uuid", "name", "links"]);
    let r = s.get("/v1/runbooks?sort_key=steps", "1.92").await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            "The sort_key value steps is an invalid field for sorting".into()
        )
    );
    // PATCH.
    let path = format!("/v1/runbooks/{uuid}");
    let path = path.as_str();
    let patch = |ops: serde_json::Value| async move { s.patch(path, "1.92", &ops).await };
    let r = patch(json!([{"op": "add", "path": "/description", "value": "x"}])).await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            "Cannot patch /description. Only the following can be updated: disable_ramdisk, extra, name, owner, public, steps".into()
        )
    );
    let r = patch(json!([{"op": "remove", "path": "/name"}])).await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            "Schema error for patch: 'name' is a required property".into()
        )
    );
    let r = patch(json!([{"op": "replace", "path": "/extra/team", "value": "infra"}])).await;
    assert_eq!(
        (r.status, &r.json()["extra"]),
        (200, &json!({"team": "infra"}))
    );

    // Use: the node must carry the runbook's name as a trait (before 1.112).
    let n = s
        .node(json!({"driver": "fake-hardware", "name": "rb-node"}))
        .await;
    let node = n["uuid"].as_str().unwrap().to_string();
    s.provision_to("1.92", "rb-node", "manage").await;
    s.wait_state("1.92", "rb-node", "manageable").await;
    let clean = json!({"target": "clean", "runbook": "CUSTOM_BIOS_TUNE"});
    assert_eq!(
        s.provision("1.91", "rb-node", clean.clone()).await.status,
        406
    );
    let r = s.provision("1.92", "rb-node", clean.clone()).await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            format!(
                "This runbook has not been approved for use on this node {node}. Please ask an administrator to add it to your node traits."
            )
        )
    );
    let r = s
        .put("/v1/nodes/rb-node/traits/CUSTOM_BIOS_TUNE", "1.92", None)
        .await;
    assert_eq!(r.status, 204, "{}", r.body);
    let r = s
        .provision(
            "1.92",
            "rb-node",
            json!({"target": "clean", "runbook": "CUSTOM_BIOS_TUNE",
                   "clean_steps": [{"interface": "vendor", "step": "log_passthrough"}]}),
        )
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            "Please provide either \"clean_steps\" or a runbook, but not both.".into()
        )
    );
    let r = s
        .provision(
            "1.92",
            "rb-node",
            json!({"target": "clean", "runbook": "no-such-runbook"}),
        )
        .await;
    assert_eq!(r.status, 404, "{}", r.body);
    let r = s.provision("1.92", "rb-node", clean).await;
    assert_eq!(r.status, 202, "{}", r.body);
    let n = s.wait_state("1.92", "rb-node", "manageable").await;
    assert_eq!(n["last_error"], json!(null));
    let done: Vec<String> = common::fake_journal(&n)
        .into_iter()
        .filter(|(_, e)| e == "done")
        .map(|(step, _)| step)
        .collect();
    assert_eq!(done, ["bios.apply_configuration", "vendor.log_passthrough"]);
    // Deleted by uuid.
    assert_eq!(
        s.delete(&format!("/v1/runbooks/{uuid}"), "1.92")
            .await
            .status,
        204
    );
    assert_eq!(
        s.get(&format!("/v1/runbooks/{uuid}"), "1.92").await.status,
        404
    );
    if max >= 112 {
        runbooks_1_112(s, &node).await;
    }
}

/// 1.112: runbook descriptions, logical names and traits; a runbook needs a trait the
/// node has (S403, S432–S445).
async fn runbooks_1_112(s: &Server, node: &str) {
    let step = json!({"interface": "vendor", "step": "log_passthrough", "args": {}, "order": 0});
    let r = s
        .post(
            "/v1/runbooks",
            "1.112",
            &json!({"name": "svc-log", "description": "log it", "steps": [step]}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(
        (&r.json()["description"], &r.json()["traits"]),
        (&json!("log it"), &json!([]))
    );
    assert_eq!(
        s.get("/v1/runbooks/svc-log/traits", "1.111").await.status,
        404
    );
    let r = s.get("/v1/runbooks/svc-log/traits", "1.112").await;
    assert_eq!(r.json(), json!({"traits": []}));
    let r = s
        .provision(
            "1.112",
            "rb-node",
            json!({"target": "clean", "runbook": "svc-log"}),
        )
        .await;
    assert!(r.fault().contains("has no traits configured"), "{}", r.body);
    let r = s
        .put(
            "/v1/runbooks/svc-log/traits/CUSTOM_ELSEWHERE",
            "1.112",
            None,
        )
        .await;
    assert_eq!(r.status, 204);
    let r = s
        .provision(
            "1.112",
            "rb-node",
            json!({"target": "clean", "runbook": "svc-log"}),
        )
        .await;
    assert_eq!(
        r.fault(),
        format!(
            "This runbook has not been approved for use on this node {node}. The node does not have any of the runbook's traits ['CUSTOM_ELSEWHERE']. Please ask an administrator to add a matching trait to your node."
        )
    );
    let r = s
        .put(
            "/v1/runbooks/svc-log/traits",
            "1.112",
            Some(&json!({"traits": ["CUSTOM_BIOS_TUNE", "CUSTOM_OTHER"]})),
        )
        .await;
    assert_eq!(r.status, 204);
    assert_eq!(
        s.delete("/v1/runbooks/svc-log/traits/CUSTOM_NOPE", "1.112")
            .await
            .status,
        204
    );
    let r = s
        .put("/v1/runbooks/svc-log/traits/not-a-trait", "1.112", None)
        .await;
    assert_eq!(r.status, 400);
    let r = s
        .provision(
            "1.112",
            "rb-node",
            json!({"target": "clean", "runbook": "svc-log"}),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    s.wait_state("1.112", "rb-node", "manageable").await;
}

/// 1.95: `disable_power_off`: power off refused, reboots allowed (S213, S311–S315).
async fn disable_power_off(s: &Server) {
    let body = json!({"driver": "fake-hardware", "name": "dpo-node", "disable_power_off": true});
    assert_eq!(s.post("/v1/nodes", "1.94", &body).await.status, 406);
    let r = s.post("/v1/nodes", "1.95", &body).await;
    assert_eq!(
        (r.status, &r.json()["disable_power_off"]),
        (201, &json!(true))
    );
    let power = |target: &'static str| async move {
        s.put(
            "/v1/nodes/dpo-node/states/power",
            "1.95",
            Some(&json!({"target": target})),
        )
        .await
    };
    assert_eq!(power("power on").await.status, 202);
    for t in ["power off", "soft power off"] {
        let r = power(t).await;
        assert_eq!(
            (r.status, r.fault()),
            (409, format!("Failed to set node power state to {t}."))
        );
    }
    assert_eq!(power("rebooting").await.status, 202);
    let n = s.get("/v1/nodes/dpo-node", "1.95").await.json();
    assert_eq!(
        (&n["power_state"], &n["last_error"]),
        (&json!("power on"), &json!(null))
    );
    // A reserved power_off step fails the cleaning.
    s.provision_to("1.95", "dpo-node", "manage").await;
    s.wait_state("1.95", "dpo-node", "manageable").await;
    let r = s
        .provision(
            "1.95",
            "dpo-node",
            json!({"target": "clean", "clean_steps": [{"interface": "power", "step": "power_off"}]}),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let n = s.wait_state("1.95", "dpo-node", "clean failed").await;
    assert!(
        n["last_error"]
            .as_str()
            .unwrap()
            .contains("disable_power_off is set"),
        "{n}"
    );
    assert_eq!(n["power_state"], "power on");
    let patch = json!([{"op": "replace", "path": "/disable_power_off", "value": false}]);
    assert_eq!(
        s.patch("/v1/nodes/dpo-node", "1.94", &patch).await.status,
        406
    );
    let r = s.patch("/v1/nodes/dpo-node", "1.95", &patch).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(power("power off").await.status, 202);
}

/// 1.82: shards: the node field, the node and port filters, `GET /v1/shards`
/// (S003, S234–S241).
async fn shards(s: &Server) {
    let r = s
        .post(
            "/v1/nodes",
            "1.81",
            &json!({"driver": "fake-hardware", "shard": "shard-a"}),
        )
        .await;
    assert_eq!(r.status, 406);
    let mut uuids = Vec::new();
    for (name, shard) in [
        ("s1", Some("shard-a")),
        ("s2", Some("shard-a")),
        ("s3", Some("shard-b")),
        ("s4", None),
    ] {
        let mut body = json!({"driver": "fake-hardware", "name": name});
        if let Some(sh) = shard {
            body["shard"] = json!(sh);
        }
        let r = s.post("/v1/nodes", "1.82", &body).await;
        assert_eq!(r.status, 201, "{}", r.body);
        assert_eq!(r.json()["shard"], json!(shard));
        uuids.push(r.json()["uuid"].as_str().unwrap().to_string());
    }
    let r = s.get("/v1/shards", "1.81").await;
    assert_eq!(
        (r.status, r.fault()),
        (404, "The API version does not allow shards".into())
    );
    let shards = |v: serde_json::Value| v["shards"].clone();
    assert_eq!(
        shards(s.get("/v1/shards", "1.82").await.json()),
        json!([{"name": "None", "count": 1}, {"name": "shard-a", "count": 2},
               {"name": "shard-b", "count": 1}])
    );
    let names = |q: &'static str| node_names(s, q, "1.82");
    assert_eq!(names("shard=shard-a&fields=name,shard").await, ["s1", "s2"]);
    assert_eq!(names("shard=shard-a,shard-b").await, ["s1", "s2", "s3"]);
    assert_eq!(names("sharded=false").await, ["s4"]);
    assert_eq!(names("sharded=true").await, ["s1", "s2", "s3"]);
    let r = s.get("/v1/nodes?shard=shard-a", "1.81").await;
    assert_eq!(
        (r.status, r.fault()),
        (
            406,
            "Request not acceptable. The minimal required API version should be 1.82".into()
        )
    );
    // Ports follow their node's shard.
    let r = s
        .post(
            "/v1/ports",
            "1.82",
            &json!({"node_uuid": uuids[0], "address": "52:54:00:00:82:01"}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let ports = |q: &'static str| async move {
        s.get(&format!("/v1/ports?{q}"), "1.82").await.json()["ports"]
            .as_array()
            .unwrap()
            .len()
    };
    assert_eq!(ports("shard=shard-a").await, 1);
    assert_eq!(ports("shard=shard-b").await, 0);
    assert_eq!(s.get("/v1/ports?shard=shard-a", "1.81").await.status, 406);
    // Leaving a shard.
    let r = s
        .patch(
            "/v1/nodes/s3",
            "1.82",
            &json!([{"op": "remove", "path": "/shard"}]),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["shard"], json!(null));
    assert_eq!(
        shards(s.get("/v1/shards", "1.82").await.json()),
        json!([{"name": "None", "count": 2}, {"name": "shard-a", "count": 2}])
    );
    // Discovery names the resource from 1.82.
    assert!(s.get("/v1", "1.82").await.json().get("shards").is_some());
    assert!(s.get("/v1", "1.81").await.json().get("shards").is_none());
}

/// 1.83: child nodes: `parent_node` (a name resolved), hidden from lists unless asked
/// for, `GET …/children` (S242–S254).
async fn children(s: &Server) {
    let parent = s
        .post(
            "/v1/nodes",
            "1.83",
            &json!({"driver": "fake-hardware", "name": "nf-full"}),
        )
        .await
        .json();
    let puuid = parent["uuid"].as_str().unwrap().to_string();
    let mut kids = Vec::new();
    for name in ["child-1", "child-2"] {
        let r = s
            .post(
                "/v1/nodes",
                "1.83",
                &json!({"driver": "fake-hardware", "name": name, "parent_node": "nf-full"}),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.body);
        assert_eq!(r.json()["parent_node"], puuid);
        kids.push(r.json()["uuid"].as_str().unwrap().to_string());
    }
    let r = s
        .post(
            "/v1/nodes",
            "1.83",
            &json!({"driver": "fake-hardware", "parent_node": "no-such-node"}),
        )
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            "Unable to apply the requested parent_node 'no-such-node'. Requested value was invalid."
                .into()
        )
    );
    let r = s
        .post(
            "/v1/nodes",
            "1.82",
            &json!({"driver": "fake-hardware", "parent_node": "nf-full"}),
        )
        .await;
    assert_eq!(r.status, 406);
    let names = |q: &'static str, v: &'static str| node_names(s, q, v);
    assert_eq!(names("fields=name,parent_node", "1.83").await, ["nf-full"]);
    assert_eq!(
        names("include_children=true", "1.83").await,
        ["child-1", "child-2", "nf-full"]
    );
    assert_eq!(
        names("parent_node=nf-full", "1.83").await,
        ["child-1", "child-2"]
    );
    // Below 1.83 the field does not exist: every node is listed.
    assert_eq!(names("", "1.82").await, ["child-1", "child-2", "nf-full"]);
    let r = s.get("/v1/nodes?include_children=true", "1.82").await;
    assert_eq!(
        (r.status, r.fault()),
        (
            406,
            "Request not acceptable. The minimal required API version should be 1.83".into()
        )
    );
    let r = s.get("/v1/nodes/nf-full/children", "1.83").await;
    assert_eq!(r.status, 200, "{}", r.body);
    let mut got = r.json()["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u.as_str().unwrap().to_string())
        .collect::<Vec<_>>();
    got.sort();
    kids.sort();
    assert_eq!(got, kids);
    assert_eq!(
        r.json()["links"],
        json!({"href": format!("{}/v1/nodes?parent_node={puuid}", s.base()), "rel": "children"})
    );
    assert_eq!(
        s.get("/v1/nodes/nf-full/children", "1.82").await.status,
        404
    );
    assert_eq!(
        s.get("/v1/nodes/no-such-node/children", "1.83")
            .await
            .status,
        404
    );
    // A node is not its own parent; leaving the parent.
    let r = s
        .patch(
            "/v1/nodes/nf-full",
            "1.83",
            &json!([{"op": "add", "path": "/parent_node", "value": "nf-full"}]),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    let r = s
        .patch(
            "/v1/nodes/child-2",
            "1.83",
            &json!([{"op": "remove", "path": "/parent_node"}]),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["parent_node"], json!(null));
    assert_eq!(names("fields=name", "1.83").await, ["child-2", "nf-full"]);
    // Deleting the parent leaves its children (upstream's orphans).
    assert_eq!(s.delete("/v1/nodes/nf-full", "1.83").await.status, 204);
    let r = s
        .get("/v1/nodes/child-1?fields=name,parent_node", "1.83")
        .await;
    assert_eq!(r.json()["parent_node"], puuid);
}

on_every_deployment!(
    versions_97_to_115,
    inspection_rules,
    inspection_rules_run,
    disable_power_off,
    runbooks,
    vtep_and_json_suffix,
    vmedia,
    port_fields_by_version,
    servicing,
    firmware,
    unhold,
    continue_inspection,
    children,
    shards,
    inventory,
    allocation_name_preference,
    history,
    driver_fields,
    indicators,
    network_data,
    deploy_steps_and_verbs,
    bios_registry,
    boot_mode
);

/// 1.96: inspection rules, the API (S357–S387, S399–S401).
async fn inspection_rules(s: &Server) {
    const V: &str = "1.96";
    let base = s.base();
    let s357 = json!({
        "uuid": "12121212-3434-4565-8787-909090909090",
        "description": "tag fake machines", "priority": 50, "phase": "main",
        "conditions": [{"op": "contains", "args": {
            "value": "{inventory[system_vendor][manufacturer]}", "regex": "Fake"}}],
        "actions": [
            {"op": "add-trait", "args": {"name": "CUSTOM_INSPECTED"}},
            {"op": "set-attribute", "args": {"path": "/extra/rack",
                "value": "r-{inventory[system_vendor][serial_number]}"}},
            {"op": "set-capability", "args": {"name": "boot_mode", "value": "uefi"}}
        ]
    });
    let r = s.post("/v1/inspection_rules", "1.95", &s357).await;
    assert_eq!(
        (r.status, r.fault()),
        (
            405,
            "The API version does not allow inspection rules".into()
        )
    );
    assert_eq!(s.get("/v1/inspection_rules", "1.95").await.status, 404);
    assert!(
        s.get("/v1", "1.95")
            .await
            .json()
            .get("inspection_rules")
            .is_none()
    );
    let v1 = s.get("/v1", V).await.json();
    let keys: Vec<&str> = v1.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        &keys[keys.len() - 2..],
        ["inspection_rules", "continue_inspection"]
    );

    let uuid = "12121212-3434-4565-8787-909090909090";
    let r = s.post("/v1/inspection_rules", V, &s357).await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(
        r.header("location").unwrap(),
        format!("{base}/v1/inspection_rules/{uuid}")
    );
    let created = r.json();
    let keys: Vec<&str> = created
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "uuid",
            "created_at",
            "updated_at",
            "description",
            "priority",
            "sensitive",
            "phase",
            "conditions",
            "actions",
            "links"
        ]
    );
    assert_eq!(created["conditions"], s357["conditions"]);
    assert_eq!(created["actions"], s357["actions"]);
    assert_eq!(created["updated_at"], json!(null));
    let r = s.post("/v1/inspection_rules", V, &s357).await;
    assert_eq!(
        (r.status, r.fault()),
        (409, format!("A rule with UUID {uuid} already exists."))
    );
    // Without conditions (upstream answers 500 and stores it), minimal, sensitive.
    let log = json!([{"op": "log", "args": {"msg": "hello"}}]);
    let r = s
        .post(
            "/v1/inspection_rules",
            V,
            &json!({"description": "no conditions", "actions": log}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let b = r.json();
    assert_eq!(
        (
            &b["conditions"],
            &b["priority"],
            &b["sensitive"],
            &b["phase"]
        ),
        (&json!([]), &json!(0), &json!(false), &json!("main"))
    );
    let minimal = s
        .post(
            "/v1/inspection_rules",
            V,
            &json!({"conditions": [], "actions": log, "priority": 10}),
        )
        .await
        .json();
    assert_eq!(minimal["description"], json!(null));
    let secret = json!({
        "description": "sensitive", "sensitive": true,
        "conditions": [{"op": "eq", "args": {"values": ["{node.auto_discovered}", "True"]}}],
        "actions": [{"op": "set-attribute", "args": {"path": "/driver_info/ipmi_password", "value": "s3cret"}}]
    });
    let r = s.post("/v1/inspection_rules", V, &secret).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let sensitive = r.json();
    assert_eq!(
        (&sensitive["conditions"], &sensitive["actions"]),
        (&json!(null), &json!(null))
    );
    let sens_uuid = sensitive["uuid"].as_str().unwrap().to_string();
    let got = s
        .get(&format!("/v1/inspection_rules/{sens_uuid}"), V)
        .await
        .json();
    assert_eq!(
        (&got["conditions"], &got["actions"]),
        (&json!(null), &json!(null))
    );
    // The plugin-data operators carry the plugin data as an argument (upstream's).
    let pd = s
        .post(
            "/v1/inspection_rules",
            V,
            &json!({"actions": [{"op": "set-plugin-data", "args": {"path": "a.b", "value": 1}}]}),
        )
        .await
        .json();
    assert_eq!(
        pd["actions"][0]["args"],
        json!({"path": "a.b", "value": 1, "plugin_data": {}})
    );
    let pd_uuid = pd["uuid"].as_str().unwrap().to_string();

    for (body, fault) in [
        (json!({"conditions": []}), "Schema error: 'actions' is a required property".to_string()),
        (json!({"actions": []}), "Schema error: [] should be non-empty".into()),
        (
            json!({"actions": [{"op": "explode", "args": {}}]}),
            "Schema error: 'explode' is not one of ['fail', 'log', 'set-attribute', 'extend-attribute', 'del-attribute', 'set-capability', 'unset-capability', 'add-trait', 'remove-trait', 'set-plugin-data', 'extend-plugin-data', 'unset-plugin-data', 'set-port-attribute', 'extend-port-attribute', 'del-port-attribute', 'api-call']".into(),
        ),
        (
            json!({"actions": log, "conditions": [{"op": "approx", "args": {}}]}),
            "Schema error: 'approx' is not one of ['eq', 'lt', 'gt', 'is-empty', 'in-net', 'matches', 'contains', 'one-of', 'is-none', 'is-true', 'is-false', '!eq', '!lt', '!gt', '!is-empty', '!in-net', '!matches', '!contains', '!one-of', '!is-none', '!is-true', '!is-false']".into(),
        ),
        (json!({"actions": [{"op": "log"}]}), "Schema error: 'args' is a required property".into()),
        (
            json!({"actions": [{"op": "add-trait", "args": {"value": "CUSTOM_X"}}]}),
            "missing required argument(s): name; unexpected argument(s): value".into(),
        ),
        (
            json!({"actions": log, "conditions": [{"op": "eq", "args": {"value": 1}}]}),
            "missing required argument(s): values; unexpected argument(s): value".into(),
        ),
        (json!({"actions": log, "priority": -1}), "Schema error: -1 is less than the minimum of 0".into()),
        (
            json!({"actions": log, "priority": 10000}),
            "Priority must be between 0 and 9999 for user-defined rules.".into(),
        ),
        (json!({"actions": log, "phase": "early"}), "Invalid phase: early. Valid phases are: main".into()),
        (
            json!({"actions": log, "name": "x"}),
            "Schema error: Additional properties are not allowed ('name' was unexpected)".into(),
        ),
        (
            json!({"priority": 10000, "conditions": [{"op": "eq", "args": {}}],
                   "actions": [{"op": "add-trait", "args": {}}]}),
            "missing required argument(s): values".into(),
        ),
        (
            json!({"phase": "early", "priority": 10000, "actions": log}),
            "Multiple validation errors occurred: Invalid phase: early. Valid phases are: main; Priority must be between 0 and 9999 for user-defined rules.".into(),
        ),
        (json!({"actions": log, "uuid": "nope"}), "Expected UUID for uuid: nope".into()),
    ] {
        let r = s.post("/v1/inspection_rules", V, &body).await;
        assert_eq!((r.status, r.fault()), (400, fault), "{body}");
    }

    // One: by uuid only.
    let r = s
        .get(
            "/v1/inspection_rules/11111111-2222-3333-4444-555555555555",
            V,
        )
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (
            404,
            "Rule 11111111-2222-3333-4444-555555555555 could not be found.".into()
        )
    );
    let r = s.get("/v1/inspection_rules/tag-fake", V).await;
    assert_eq!(
        (r.status, r.fault()),
        (400, "Schema error: 'tag-fake' is not a 'uuid'".into())
    );
    assert_eq!(
        s.get(&format!("/v1/inspection_rules/{uuid}"), "1.95")
            .await
            .status,
        404
    );
    let one = s
        .get(
            &format!("/v1/inspection_rules/{uuid}?fields=priority,uuid"),
            V,
        )
        .await
        .json();
    assert_eq!(
        one,
        json!({"uuid": uuid, "priority": 50, "links": [
            {"href": format!("{base}/v1/inspection_rules/{uuid}"), "rel": "self"},
            {"href": format!("{base}/inspection_rules/{uuid}"), "rel": "bookmark"}]})
    );
    let r = s
        .get(
            &format!("/v1/inspection_rules/{uuid}?fields=uuid,foo,bar"),
            V,
        )
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (400, "Field(s) \"foo, bar\" are not valid".into())
    );

    // Lists: default fields, detail, sorting, paging.
    let l = s.get("/v1/inspection_rules", V).await.json();
    let first = &l["inspection_rules"][0];
    let keys: Vec<&str> = first
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, ["uuid", "description", "priority", "phase", "links"]);
    assert_eq!(l["inspection_rules"].as_array().unwrap().len(), 5);
    let d = s.get("/v1/inspection_rules?detail=true", V).await.json();
    assert_eq!(d["inspection_rules"][0]["actions"], s357["actions"]);
    let prio: Vec<i64> = s
        .get(
            "/v1/inspection_rules?phase=main&sort_key=priority&sort_dir=desc",
            V,
        )
        .await
        .json()["inspection_rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["priority"].as_i64().unwrap())
        .collect();
    assert_eq!(prio, [50, 10, 0, 0, 0]);
    let r = s.get("/v1/inspection_rules?sort_key=actions", V).await;
    assert_eq!(
        (r.status, r.fault()),
        (400, "Schema error: 'actions' should not be valid under {'type': 'string', 'enum': ['actions', 'conditions']}".into())
    );
    let r = s
        .get("/v1/inspection_rules?detail=true&fields=uuid", V)
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            "Can not specify ?detail=True and fields in the same request.".into()
        )
    );
    let r = s.get("/v1/inspection_rules?sort_key=foo", V).await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            "The sort_key value \"foo\" is an invalid field for sorting".into()
        )
    );
    let r = s.get("/v1/inspection_rules?owner=x", V).await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            "Schema error: Additional properties are not allowed ('owner' was unexpected)".into()
        )
    );
    let page = s.get("/v1/inspection_rules?limit=1", V).await.json();
    assert_eq!(page["inspection_rules"][0]["uuid"], json!(uuid));
    let next = page["next"].as_str().unwrap();
    let rest = next.strip_prefix(&base).unwrap();
    let page2 = s.get(rest, V).await.json();
    assert_eq!(page2["inspection_rules"][0]["uuid"], b["uuid"]);

    // PATCH (S383–S387).
    let path = format!("/v1/inspection_rules/{uuid}");
    let r = s
        .patch(
            &path,
            V,
            &json!([{"op": "add", "path": "/description", "value": "tagged"},
                                 {"op": "replace", "path": "/priority", "value": 5}]),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let p = r.json();
    assert_eq!(
        (&p["description"], &p["priority"]),
        (&json!("tagged"), &json!(5))
    );
    assert!(p["updated_at"].is_string(), "{p}");
    let r = s
        .patch(
            &path,
            V,
            &json!([{"op": "replace", "path": "/actions", "value": s357["actions"]}]),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    for (body, fault) in [
        (
            json!([{"op": "replace", "path": "/priority", "value": 10000}]),
            "Priority must be between 0 and 9999 for user-defined rules.",
        ),
        (
            json!([{"op": "replace", "path": "/actions/0/op", "value": "explode"}]),
            "Schema error for patch: 'explode' is not one of ['fail', 'log', 'set-attribute', 'extend-attribute', 'del-attribute', 'set-capability', 'unset-capability', 'add-trait', 'remove-trait', 'set-plugin-data', 'extend-plugin-data', 'unset-plugin-data', 'set-port-attribute', 'extend-port-attribute', 'del-port-attribute', 'api-call']",
        ),
        (
            json!([{"op": "remove", "path": "/actions"}]),
            "Schema error for patch: 'actions' is a required property",
        ),
        (
            json!([{"op": "replace", "path": "/uuid", "value": "12121212-3434-4565-8787-000000000000"}]),
            "Cannot patch /uuid. Only the following can be updated: actions, conditions, description, phase, priority, sensitive",
        ),
        (
            json!([{"op": "add", "path": "/name", "value": "x"}]),
            "Adding a new attribute (/name) to the root of the resource is not allowed",
        ),
    ] {
        let r = s.patch(&path, V, &body).await;
        assert_eq!((r.status, r.fault()), (400, fault.to_string()), "{body}");
    }
    let r = s
        .patch(&path, V, &json!([{"op": "remove", "path": "/conditions"}]))
        .await;
    assert_eq!(r.json()["conditions"], json!([]));
    // Once sensitive, always sensitive.
    let sens_path = format!("/v1/inspection_rules/{sens_uuid}");
    let r = s
        .patch(
            &sens_path,
            V,
            &json!([{"op": "replace", "path": "/sensitive", "value": false}]),
        )
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (400, "Couldn't apply patch '[{'op': 'replace', 'path': '/sensitive', 'value': False}]'. Reason: Inspection rules cannot have the sensitive flag unset.".into())
    );
    // Whatever the spelling: a boolean word, or a true then a false.
    for body in [
        json!([{"op": "replace", "path": "/sensitive", "value": "false"}]),
        json!([{"op": "replace", "path": "/sensitive", "value": true},
               {"op": "replace", "path": "/sensitive", "value": false}]),
    ] {
        let r = s.patch(&sens_path, V, &body).await;
        assert_eq!(r.status, 400, "{body}: {}", r.body);
        assert!(
            r.fault()
                .ends_with("Inspection rules cannot have the sensitive flag unset.")
        );
    }
    let still = s.get(&sens_path, V).await.json();
    assert_eq!(
        (&still["sensitive"], &still["actions"]),
        (&json!(true), &json!(null))
    );
    let r = s
        .patch(
            &format!("/v1/inspection_rules/{pd_uuid}"),
            V,
            &json!([{"op": "replace", "path": "/sensitive", "value": true}]),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        (&r.json()["sensitive"], &r.json()["actions"]),
        (&json!(true), &json!(null))
    );
    let r = s.patch(&path, "1.95", &json!([])).await;
    assert_eq!(r.status, 405);
    let r = s
        .patch("/v1/inspection_rules/tag-fake", V, &json!([]))
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            "Expected UUID for inspection_rule_uuid: tag-fake".into()
        )
    );

    // DELETE (S399–S401).
    let r = s
        .delete(&format!("/v1/inspection_rules/{pd_uuid}"), V)
        .await;
    assert_eq!((r.status, r.body.as_str()), (204, ""));
    let r = s
        .delete(&format!("/v1/inspection_rules/{pd_uuid}"), V)
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (404, format!("Rule {pd_uuid} could not be found."))
    );
    assert_eq!(s.delete("/v1/inspection_rules", V).await.status, 405);
    assert_eq!(s.delete(&path, "1.95").await.status, 405);
}

/// 1.96: rules run on every inspection, after the hooks, in priority order, and change
/// the node (S389–S398).
async fn inspection_rules_run(s: &Server) {
    const V: &str = "1.96";
    let n = s
        .node(json!({"driver": "fake-hardware", "name": "insp-node",
                     "inspect_interface": "agent"}))
        .await;
    let uuid = n["uuid"].as_str().unwrap().to_string();
    s.provision_to(V, "insp-node", "manage").await;
    s.wait_state(V, "insp-node", "manageable").await;
    let rules = [
        json!({"description": "tag fake machines", "priority": 50,
               "conditions": [{"op": "contains", "args": {
                   "value": "{inventory[system_vendor][manufacturer]}", "regex": "Fake"}}],
               "actions": [
                   {"op": "add-trait", "args": {"name": "CUSTOM_INSPECTED"}},
                   {"op": "set-attribute", "args": {"path": "/extra/rack",
                       "value": "r-{inventory[system_vendor][serial_number]}"}},
                   {"op": "set-capability", "args": {"name": "boot_mode", "value": "uefi"}}]}),
        // Skipped: the node was not discovered.
        json!({"sensitive": true,
               "conditions": [{"op": "eq", "args": {"values": ["{node.auto_discovered}", "True"]}}],
               "actions": [{"op": "set-attribute", "args": {"path": "/extra/discovered", "value": true}}]}),
        // Runs last (lowest priority), sees what the first did, and loops.
        json!({"priority": 0,
               "conditions": [{"op": "eq", "args": {"values": ["{node.extra[rack]}", "r-SN-40"]}}],
               "actions": [
                   {"op": "set-attribute", "loop": [{"p": "/extra/bmc", "v": "{inventory[bmc_address]}"}],
                    "args": {"path": "{item[p]}", "value": "{item[v]}"}},
                   {"op": "set-plugin-data", "args": {"path": "rules.seen", "value": "{inventory[cpu][count]}"}},
                   {"op": "set-port-attribute", "args": {"port_id": "52:54:00:00:40:01",
                       "path": "/extra/switch", "value": "sw-{node.name}"}}]}),
    ];
    for r in &rules {
        let r = s.post("/v1/inspection_rules", V, r).await;
        assert_eq!(r.status, 201, "{}", r.body);
    }
    let data = json!({
        "inventory": {
            "interfaces": [{"name": "eth0", "mac_address": "52:54:00:00:40:01",
                            "ipv4_address": "192.0.2.40", "has_carrier": true}],
            "cpu": {"count": 4, "architecture": "x86_64", "model_name": "Fake CPU"},
            "memory": {"physical_mb": 4096, "total": 4294967296u64},
            "disks": [{"name": "/dev/sda", "size": 10737418240u64}],
            "bmc_address": "192.0.2.240",
            "system_vendor": {"manufacturer": "Fake Inc.", "product_name": "Box",
                              "serial_number": "SN-40"}
        },
        "boot_interface": "52:54:00:00:40:01"
    });
    let inspect = || async {
        assert_eq!(s.provision_to(V, "insp-node", "inspect").await.status, 202);
        s.wait_state(V, "insp-node", "inspect wait").await;
        let r = s
            .post(
                &format!("/v1/continue_inspection?node_uuid={uuid}"),
                V,
                &data,
            )
            .await;
        assert_eq!(r.status, 202, "{}", r.body);
    };
    inspect().await;
    let n = s.wait_state(V, "insp-node", "manageable").await;
    assert_eq!(n["last_error"], json!(null));
    assert_eq!(n["extra"], json!({"rack": "r-SN-40", "bmc": "192.0.2.240"}));
    assert_eq!(n["properties"]["capabilities"], "boot_mode:uefi");
    assert_eq!(n["properties"]["cpu_arch"], "x86_64");
    assert_eq!(n["traits"], json!(["CUSTOM_INSPECTED"]));
    let inv = s.get("/v1/nodes/insp-node/inventory", V).await.json();
    assert_eq!(inv["plugin_data"]["rules"], json!({"seen": "4"}));
    let ports = s
        .get("/v1/nodes/insp-node/ports?fields=address,extra", V)
        .await
        .json();
    assert_eq!(
        ports["ports"][0]["extra"],
        json!({"switch": "sw-insp-node"}),
        "{ports}"
    );

    // A rule that fails the inspection (S396–S398); what ran before it stays.
    let r = s
        .post(
            "/v1/inspection_rules",
            V,
            &json!({"priority": 100, "actions": [
                {"op": "set-capability", "args": {"name": "boot_mode", "value": "bios"}},
                {"op": "fail", "args": {"msg": "refusing {node.name}"}}]}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    inspect().await;
    let n = s.wait_state(V, "insp-node", "inspect failed").await;
    let msg =
        "Failed to finish inspection: Failed to inspect hardware. Reason: refusing {node.name}";
    assert_eq!(n["last_error"], msg);
    assert_eq!(n["target_provision_state"], "manageable");
    assert_eq!(
        n["properties"]["capabilities"],
        "boot_mode:uefi,boot_mode:bios"
    );
    let h = s.get("/v1/nodes/insp-node/history", V).await.json();
    let last = h["history"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        (&last["severity"], &last["event"]),
        (&json!("ERROR"), &json!(msg))
    );
}

/// 1.97–1.115, each version's change one version below and at it (S006, S007, S081–S085,
/// S103–S115, S122, S123, S142, S146, S147, S205, S214, S218–S233, S294–S298, S341, S344).
async fn versions_97_to_115(s: &Server) {
    let max = max_minor(s).await;
    assert!(max >= 115, "advertised 1.{max}");
    let n = s
        .node(json!({"driver": "fake-hardware", "name": "v-node"}))
        .await;
    let node = n["uuid"].as_str().unwrap().to_string();

    // 1.98: `~1` escapes are still refused by the node patch schema (S233).
    let r = s
        .patch(
            "/v1/nodes/v-node",
            "1.115",
            &json!([{"op": "add", "path": "/extra/a~1b", "value": 1}]),
        )
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            "Schema error for patch: '/extra/a~1b' does not match '^(/[\\\\w-]+)+$'".into()
        )
    );

    // 1.99: ports by their nodes' conductor groups; not version-checked (S083–S085).
    let r = s
        .post(
            "/v1/ports",
            "1.99",
            &json!({"address": "52:54:00:97:00:01", "node_uuid": node}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    for v in ["1.98", "1.99"] {
        let r = s.get("/v1/ports?conductor_groups=cg-none", v).await;
        assert_eq!(
            (r.status, r.json()["ports"].as_array().unwrap().len()),
            (200, 0),
            "{v}"
        );
        let r = s.get("/v1/ports?conductor_groups=,", v).await;
        assert_eq!(
            r.json()["ports"].as_array().unwrap().len(),
            1,
            "{v}: {}",
            r.body
        );
    }
    let r = s
        .get("/v1/ports?conductor_groups=cg-none&node=v-node", "1.99")
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (400, "Filtering by conductor_groups cannot be combined with node_ident, portgroup_ident, or node address filters.".into())
    );
    // Shard filters: ports from 1.82, port groups from 1.106 (S081, S122, S123).
    let r = s.get("/v1/ports?shard=shard-a", "1.81").await;
    assert_eq!(
        (r.status, r.fault()),
        (
            406,
            "Request not acceptable. The minimal required API version should be 1.82".into()
        )
    );
    let r = s.get("/v1/portgroups?shard=shard-a", "1.105").await;
    assert_eq!(
        (r.status, r.fault()),
        (
            406,
            "Request not acceptable. The minimal required API version should be 1.106".into()
        )
    );
    assert_eq!(
        s.get("/v1/portgroups?shard=shard-a", "1.106").await.status,
        200
    );

    // 1.102, 1.103, 1.111: port group `physical_network`, `category`, `dynamic_portgroup`.
    let pg = json!({"uuid": "96e0f1a2-b3c4-4d5e-8f6a-7b8c9d0e1f2a", "node_uuid": node,
                    "name": "bond0", "address": "52:54:00:00:10:00", "mode": "802.3ad",
                    "properties": {"miimon": "100"}, "standalone_ports_supported": false,
                    "physical_network": "physnet1", "category": "bond", "extra": {"team": "net"}});
    let r = s.post("/v1/portgroups", "1.115", &pg).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let b = r.json();
    let keys: Vec<&str> = b.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "uuid",
            "created_at",
            "updated_at",
            "address",
            "extra",
            "internal_info",
            "mode",
            "name",
            "properties",
            "standalone_ports_supported",
            "node_uuid",
            "physical_network",
            "category",
            "dynamic_portgroup",
            "links",
            "ports"
        ]
    );
    assert_eq!(b["dynamic_portgroup"], json!(false));
    for (field, since) in [
        ("physical_network", 102),
        ("category", 103),
        ("dynamic_portgroup", 111),
    ] {
        let below = format!("1.{}", since - 1);
        let got = s.get("/v1/portgroups/bond0", &below).await.json();
        assert!(got.get(field).is_none(), "{field} at {below}");
        let r = s
            .get(&format!("/v1/portgroups/bond0?fields={field}"), &below)
            .await;
        assert_eq!(r.status, 406, "{field} at {below}");
        let got = s
            .get("/v1/portgroups/bond0", &format!("1.{since}"))
            .await
            .json();
        assert!(got.get(field).is_some(), "{field} at 1.{since}");
    }
    let r = s
        .post(
            "/v1/portgroups",
            "1.115",
            &json!({"node_uuid": node, "dynamic_portgroup": true}),
        )
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (400, "Schema error for portgroup: Additional properties are not allowed ('dynamic_portgroup' was unexpected)".into())
    );
    // A member port takes its group's physical network and cannot change it (S142–S147).
    let r = s
        .post(
            "/v1/ports",
            "1.115",
            &json!({"address": "52:54:00:97:00:02", "node_uuid": node,
                    "portgroup_uuid": "96e0f1a2-b3c4-4d5e-8f6a-7b8c9d0e1f2a",
                    "physical_network": "physnet1", "pxe_enabled": false}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let port = r.json()["uuid"].as_str().unwrap().to_string();
    let r = s
        .patch(
            &format!("/v1/ports/{port}"),
            "1.115",
            &json!([{"op": "replace", "path": "/physical_network", "value": "physnet9"}]),
        )
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            "physical_network cannot be changed while the port belongs to a portgroup.".into()
        )
    );
    let r = s
        .patch(
            "/v1/portgroups/bond0",
            "1.115",
            &json!([{"op": "replace", "path": "/physical_network", "value": "physnet3"}]),
        )
        .await;
    assert_eq!(
        (r.status, &r.json()["physical_network"]),
        (200, &json!("physnet3")),
        "{}",
        r.body
    );
    let ports = s
        .get(
            "/v1/portgroups/bond0/ports?fields=uuid,physical_network",
            "1.115",
        )
        .await
        .json();
    assert_eq!(ports["ports"][0]["physical_network"], "physnet3");

    // 1.104: `instance_name`, its filter, and `instance_info.display_name` (S205–S230).
    let body = json!({"driver": "fake-hardware", "name": "v-inst", "instance_name": "vm-one"});
    let r = s.post("/v1/nodes", "1.103", &body).await;
    assert_eq!(
        (r.status, r.fault()),
        (406, "Request not acceptable.".into())
    );
    let r = s.post("/v1/nodes", "1.104", &body).await;
    assert_eq!(
        (r.status, &r.json()["instance_name"]),
        (201, &json!("vm-one"))
    );
    let r = s.get("/v1/nodes?instance_name=vm-one", "1.103").await;
    assert_eq!(
        (r.status, r.fault()),
        (
            406,
            "instance_name is not acceptable in this API version".into()
        )
    );
    let names = node_names(s, "instance_name=vm-one", "1.104").await;
    assert_eq!(names, ["v-inst"]);
    let r = s
        .patch(
            "/v1/nodes/v-inst",
            "1.103",
            &json!([{"op": "replace", "path": "/instance_name", "value": "vm-two"}]),
        )
        .await;
    assert_eq!(r.status, 406);
    let r = s
        .patch(
            "/v1/nodes/v-inst",
            "1.104",
            &json!([{"op": "replace", "path": "/instance_name", "value": "vm-two"}]),
        )
        .await;
    assert_eq!(
        (r.status, &r.json()["instance_name"]),
        (200, &json!("vm-two"))
    );
    // A set name is kept; an unset one follows `display_name`.
    let r = s
        .patch(
            "/v1/nodes/v-inst",
            "1.104",
            &json!([{"op": "add", "path": "/instance_info/display_name", "value": "vm-three"}]),
        )
        .await;
    assert_eq!(r.json()["instance_name"], "vm-two");
    let r = s
        .patch(
            "/v1/nodes/v-node",
            "1.10",
            &json!([{"op": "add", "path": "/instance_info/display_name", "value": "vm-four"}]),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        s.get("/v1/nodes/v-node", "1.104").await.json()["instance_name"],
        "vm-four"
    );

    // 1.107: both request id headers at every version (S006, S007).
    for v in ["1.106", "1.107"] {
        let r = s.get("/v1/nodes", v).await;
        let a = r.header("x-openstack-request-id").unwrap().to_string();
        assert!(a.starts_with("req-"), "{a}");
        assert_eq!(r.header("openstack-request-id"), Some(a.as_str()));
    }

    // 1.109: `health`, read-only (S218–S220).
    let r = s
        .post(
            "/v1/nodes",
            "1.115",
            &json!({"driver": "fake-hardware", "health": "OK"}),
        )
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (400, "Schema error for node: Additional properties are not allowed ('health' was unexpected)".into())
    );
    assert_eq!(
        s.get("/v1/nodes/v-node?fields=health", "1.108")
            .await
            .status,
        406
    );
    let r = s
        .get("/v1/nodes/v-node?fields=name,health,instance_name", "1.109")
        .await
        .json();
    assert_eq!(r["health"], json!(null));
    assert!(
        s.get("/v1/nodes/v-node", "1.108")
            .await
            .json()
            .get("health")
            .is_none()
    );

    // 1.108: `disable_ramdisk` with `service` (S341, S344).
    available(s, "v-dep").await;
    let dep = s.get("/v1/nodes/v-dep", "1.115").await.json()["uuid"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(s.provision_to("1.115", "v-dep", "active").await.status, 202);
    s.wait_state("1.115", "v-dep", "active").await;
    let service = json!({"target": "service", "disable_ramdisk": true,
                         "service_steps": [{"interface": "vendor", "step": "log_passthrough", "args": {}}]});
    let r = s
        .put("/v1/nodes/v-dep/states/provision", "1.107", Some(&service))
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (
            406,
            "disable_ramdisk is not acceptable in this API version".into()
        )
    );
    let r = s
        .put("/v1/nodes/v-dep/states/provision", "1.108", Some(&service))
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    s.wait_state("1.115", "v-dep", "active").await;
    // 1.110: `abort` of an active node is still refused (S334).
    let r = s.provision_to("1.115", "v-dep", "abort").await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            format!(
                "The requested action \"abort\" can not be performed on node \"{dep}\" while it is in state \"active\"."
            )
        )
    );

    // 1.113, 1.115: history detail fields (S294–S298).
    let fields_at = |v: &'static str| async move {
        let h = s
            .get("/v1/nodes/v-dep/history?detail=true&limit=1", v)
            .await
            .json();
        let e = h["history"][0].as_object().unwrap().clone();
        e.keys().cloned().collect::<Vec<String>>()
    };
    assert!(!fields_at("1.112").await.contains(&"project".to_string()));
    let at113 = fields_at("1.113").await;
    assert!(at113.contains(&"project".to_string()) && !at113.contains(&"state".to_string()));
    let at115 = fields_at("1.115").await;
    for f in [
        "project",
        "state",
        "target_provision_state",
        "duration_seconds",
    ] {
        assert!(at115.contains(&f.to_string()), "{f}: {at115:?}");
    }

    // 1.114: firmware identity fields.
    let r = s
        .get("/v1/nodes/v-dep/firmware?fields=component,vendor", "1.113")
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(
        s.get("/v1/nodes/v-dep/firmware?fields=component,vendor", "1.114")
            .await
            .status,
        200
    );
}
