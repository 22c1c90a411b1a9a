#![allow(clippy::unwrap_used)]
//! The REST API over real HTTP against the all-in-one server, on SQLite and PostgreSQL.

mod common;

use common::Server;
use serde_json::{Value, json};

on_every_deployment!(
    node_shapes_match_upstream,
    hostile_input_is_refused_cleanly,
    discovery_documents,
    version_negotiation,
    node_create_by_version,
    node_create_errors,
    node_get_and_fields,
    node_list_walks_pages,
    node_list_filters_sorting_and_errors,
    node_patch_rules,
    node_patch_errors,
    concurrent_patches_lose_nothing,
    node_delete_rules,
    node_traits,
    node_states_and_maintenance,
    drivers_and_conductors,
);

const MAX: &str = "1.115";

fn keys(v: &Value) -> Vec<String> {
    v.as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default()
}

/// Field names and their order, as upstream's samples show them (019 at 1.1, 022 at 1.61
/// without the fields of 1.52..1.61).
async fn node_shapes_match_upstream(s: &Server) {
    let at_1_1 = s
        .post("/v1/nodes", "1.1", &json!({"driver": "fake-hardware"}))
        .await
        .json();
    assert_eq!(
        keys(&at_1_1),
        [
            "uuid",
            "created_at",
            "updated_at",
            "console_enabled",
            "driver",
            "driver_info",
            "extra",
            "instance_info",
            "instance_uuid",
            "last_error",
            "maintenance",
            "maintenance_reason",
            "power_state",
            "properties",
            "provision_state",
            "provision_updated_at",
            "reservation",
            "target_power_state",
            "target_provision_state",
            "links",
            "chassis_uuid",
            "ports",
        ]
    );
    let at_max = s
        .node(json!({"driver": "fake-hardware", "name": "shape"}))
        .await;
    assert_eq!(
        keys(&at_max),
        [
            "uuid",
            "created_at",
            "updated_at",
            "automated_clean",
            "bios_interface",
            "boot_interface",
            "clean_step",
            "conductor_group",
            "console_enabled",
            "console_interface",
            "deploy_interface",
            "deploy_step",
            "description",
            "driver",
            "driver_info",
            "driver_internal_info",
            "extra",
            "fault",
            "inspection_finished_at",
            "inspection_started_at",
            "inspect_interface",
            "instance_info",
            "instance_uuid",
            "last_error",
            "maintenance",
            "maintenance_reason",
            "management_interface",
            "name",
            "network_interface",
            "owner",
            "power_interface",
            "power_state",
            "properties",
            "protected",
            "protected_reason",
            "provision_state",
            "provision_updated_at",
            "raid_config",
            "raid_interface",
            "rescue_interface",
            "reservation",
            "resource_class",
            "storage_interface",
            "target_power_state",
            "target_provision_state",
            "target_raid_config",
            "traits",
            "vendor_interface",
            "links",
            "conductor",
            "chassis_uuid",
            "ports",
            "states",
            "portgroups",
            "volume",
        ]
    );
    let list = s.get("/v1/nodes", "1.1").await.json();
    assert_eq!(
        keys(&list["nodes"][0]),
        [
            "uuid",
            "instance_uuid",
            "maintenance",
            "power_state",
            "provision_state",
            "links"
        ]
    );
}

async fn hostile_input_is_refused_cleanly(s: &Server) {
    s.node(json!({"driver": "fake-hardware", "name": "node_1"}))
        .await;
    // NUL characters cannot be stored by PostgreSQL: 400 on both backends, never 500.
    for path in [
        "/v1/nodes?driver=%00",
        "/v1/nodes?marker=%00",
        "/v1/nodes?description_contains=a%00b",
    ] {
        let r = s.get(path, MAX).await;
        assert_eq!(r.status, 400, "{path}: {}", r.body);
    }
    let r = s
        .post(
            "/v1/nodes",
            MAX,
            &json!({"driver": "fake-hardware", "extra": {"a": "x\u{0}y"}}),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    let r = s
        .patch(
            "/v1/nodes/node_1",
            MAX,
            &json!([{"op": "add", "path": "/description", "value": "\u{0}"}]),
        )
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(s.get("/v1/conductors/a%00b", MAX).await.status, 404);
    assert_eq!(
        s.delete("/v1/nodes/node_1/traits/CUSTOM_%00", MAX)
            .await
            .status,
        404
    );
    let r = s.get("/v1/nodes/%FF%FE", MAX).await;
    assert_eq!(r.status, 400);
    assert!(r.fault().starts_with("Invalid path"), "{}", r.body);
    // Before 1.91 a ".json" suffix is stripped once, not repeatedly; from 1.91 never.
    assert_eq!(s.get("/v1/nodes/node_1.json", "1.90").await.status, 200);
    assert_eq!(
        s.get("/v1/nodes/node_1.json.json", "1.90").await.status,
        404
    );
    assert_eq!(s.get("/v1/nodes/node_1.json", MAX).await.status, 404);
    // Endpoints without arguments refuse unknown ones.
    assert_eq!(s.get("/v1/nodes/node_1/states?x=1", MAX).await.status, 400);
    assert_eq!(
        s.put("/v1/nodes/node_1/maintenance?reason=x", MAX, None)
            .await
            .status,
        400
    );
    // A name valid only from 1.10 is not judged again by an older request's rules.
    let r = s
        .patch(
            "/v1/nodes/node_1",
            "1.9",
            &json!([{"op": "add", "path": "/extra/a", "value": 1}]),
        )
        .await;
    assert_eq!(r.status, 400, "names with '_' are not names before 1.10");
    let uuid = s.get("/v1/nodes/node_1", MAX).await.json()["uuid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let r = s
        .patch(
            &format!("/v1/nodes/{uuid}"),
            "1.9",
            &json!([{"op": "add", "path": "/extra/a", "value": 1}]),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    // Fields upstream accepts at newer versions are 406, not "unknown".
    for f in ["shard", "parent_node", "instance_name", "disable_power_off"] {
        let r = s
            .post(
                "/v1/nodes",
                "1.66",
                &json!({"driver": "fake-hardware", f: "x"}),
            )
            .await;
        assert_eq!(r.status, 406, "{f}");
    }
    // Lengths count characters, not bytes.
    let r = s
        .patch(
            &format!("/v1/nodes/{uuid}"),
            MAX,
            &json!([{"op": "add", "path": "/description", "value": "é".repeat(4000)}]),
        )
        .await;
    assert_eq!(r.status, 200);
    // A trait-list body at a version without traits is 405, whatever the body.
    assert_eq!(
        s.call(
            "PUT",
            "/v1/nodes/node_1/traits/CUSTOM_A",
            Some("1.36"),
            Some("junk")
        )
        .await
        .status,
        405
    );
    assert_eq!(
        s.call("PUT", "/v1/nodes/node_1/traits", Some("1.36"), Some("junk"))
            .await
            .status,
        405
    );
}

async fn discovery_documents(s: &Server) {
    let r = s.call("GET", "/", None, None).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("x-openstack-ironic-api-version"),
        Some("1.1"),
        "no header means the minimum"
    );
    assert_eq!(
        r.header("x-openstack-ironic-api-minimum-version"),
        Some("1.1")
    );
    assert_eq!(
        r.header("x-openstack-ironic-api-maximum-version"),
        Some(MAX)
    );
    assert!(
        r.header("x-openstack-request-id")
            .is_some_and(|v| v.starts_with("req-"))
    );
    let root = r.json();
    assert_eq!(root["name"], "OpenStack Ironic API");
    assert_eq!(root["default_version"]["version"], MAX);
    assert_eq!(
        root["default_version"]["links"][0]["href"],
        format!("{}/v1/", s.base())
    );
    assert_eq!(root["versions"][0], root["default_version"]);

    let old = s.get("/v1", "1.1").await.json();
    assert_eq!(old["id"], "v1");
    assert_eq!(
        old["media_types"]["type"],
        "application/vnd.openstack.ironic.v1+json"
    );
    assert_eq!(old["nodes"][0]["href"], format!("{}/v1/nodes/", s.base()));
    assert_eq!(old["nodes"][1]["rel"], "bookmark");
    assert!(old.get("conductors").is_none(), "conductors appear at 1.49");
    let new = s.get("/v1/", "latest").await.json();
    assert!(new.get("conductors").is_some());
    // Paths without the /v1 prefix are routed to v1.
    assert_eq!(s.get("/nodes", MAX).await.status, 200);
    // A trailing slash routes too (openstackclient sends `GET /v1/nodes/?...`).
    assert_eq!(s.get("/v1/nodes/?limit=1", MAX).await.status, 200);
}

async fn version_negotiation(s: &Server) {
    let minor: u32 = MAX.trim_start_matches("1.").parse().unwrap();
    let above = format!("1.{}", minor + 1);
    let r = s.get("/v1/nodes", &above).await;
    assert_eq!(r.status, 406);
    assert_eq!(
        r.header("x-openstack-ironic-api-maximum-version"),
        Some(MAX)
    );
    assert_eq!(r.header("x-openstack-ironic-api-version"), None);
    assert_eq!(
        r.fault(),
        format!(
            "Version {above} was requested but the minor version is not supported by this service. The supported version range is: [1.1, {MAX}]."
        )
    );
    let r = s.get("/", "9.99").await;
    assert_eq!(r.status, 406);
    assert!(
        r.fault()
            .starts_with("Mutually exclusive versions requested. Version 9.99")
    );
    assert_eq!(
        r.json()["error_message"]
            .as_str()
            .map(|m| m.contains("faultcode")),
        Some(true)
    );
    let r = s.get("/v1/nodes", "2.0").await;
    assert_eq!(r.status, 406);
    assert!(
        r.fault()
            .starts_with("Mutually exclusive versions requested. Version 2.0")
    );
    assert_eq!(s.get("/v1/nodes", "1.0").await.status, 406);
    for bad in ["abc", "1.x", "1", "1.2.3"] {
        let r = s.get("/v1/nodes", bad).await;
        assert_eq!(r.status, 406, "{bad}");
        assert_eq!(
            r.fault(),
            "Invalid value for X-OpenStack-Ironic-API-Version header"
        );
        assert_eq!(
            r.header("x-openstack-ironic-api-minimum-version"),
            None,
            "malformed: no version headers"
        );
    }
    let r = s.get("/v1/nodes", "LATEST").await;
    assert_eq!(r.header("x-openstack-ironic-api-version"), Some(MAX));
    let r = s
        .raw(
            "GET",
            "/v1/nodes",
            &[("OpenStack-API-Version", "baremetal 1.40".into())],
            None,
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-openstack-ironic-api-version"), Some("1.40"));
    let r = s
        .raw(
            "GET",
            "/v1/nodes",
            &[("OpenStack-API-Version", "baremetal 9.99".into())],
            None,
        )
        .await;
    assert_eq!(r.status, 406);
    let r = s.get("/v1/no-such-thing", MAX).await;
    assert_eq!(r.status, 404);
    assert_eq!(
        r.header("x-openstack-ironic-api-version"),
        None,
        "routing errors carry no version headers"
    );
    assert_eq!(
        r.json()["error_message"],
        "{\"code\": 404, \"title\": \"Not Found\", \"description\": \"\", \"faultcode\": \"Client\", \"faultstring\": \"The resource could not be found.\", \"debuginfo\": null}"
    );
    let r = s.call("POST", "/v1/drivers", Some(MAX), Some("{}")).await;
    assert_eq!(r.status, 405);
}

async fn node_create_by_version(s: &Server) {
    let r = s
        .post("/v1/nodes", "1.1", &json!({"driver": "fake-hardware"}))
        .await;
    assert_eq!(r.status, 201);
    let n = r.json();
    assert_eq!(
        n["provision_state"],
        Value::Null,
        "available shows as null below 1.2"
    );
    assert!(n.get("name").is_none(), "no name field below 1.5");
    assert!(n.get("driver_internal_info").is_none());
    assert!(n.get("ports").is_some());
    assert!(n.get("states").is_none(), "states link from 1.14");
    let uuid = n["uuid"].as_str().unwrap_or_default().to_string();
    assert_eq!(
        r.header("location"),
        Some(format!("{}/v1/nodes/{uuid}", s.base()).as_str())
    );
    assert_eq!(
        s.get(&format!("/v1/nodes/{uuid}"), "1.2").await.json()["provision_state"],
        "available"
    );

    let n = s
        .post("/v1/nodes", "1.10", &json!({"driver": "fake-hardware"}))
        .await
        .json();
    assert_eq!(n["provision_state"], "available");
    let n = s
        .post("/v1/nodes", "1.11", &json!({"driver": "fake-hardware"}))
        .await
        .json();
    assert_eq!(n["provision_state"], "enroll");

    let n = s
        .node(json!({"driver": "fake-hardware", "name": "node-151", "resource_class": "rc-a",
                     "description": "sample node", "extra": {"rack": "r1"},
                     "properties": {"cpus": 8, "memory_mb": 16384},
                     "driver_info": {"deploy_kernel": "http://img/k", "ipmi_password": "s3cret"},
                     "owner": "p1", "conductor_group": "", "uuid": "7c1a0f2e-8b43-4c6a-9d1e-2f3a4b5c6d7e"}))
        .await;
    assert_eq!(n["uuid"], "7c1a0f2e-8b43-4c6a-9d1e-2f3a4b5c6d7e");
    assert_eq!(n["boot_interface"], "fake");
    assert_eq!(n["network_interface"], "noop");
    assert_eq!(
        n["driver_info"]["ipmi_password"], "******",
        "secrets are masked"
    );
    assert_eq!(n["conductor"], "test-conductor");
    assert_eq!(n["traits"], json!([]));
    assert_eq!(n["owner"], "p1");
    assert_eq!(n["description"], "sample node");
    assert!(
        n.get("retired").is_none(),
        "retired is 1.61, above the version of this request"
    );
    assert!(
        n["created_at"]
            .as_str()
            .is_some_and(|t| t.ends_with("+00:00"))
    );
    assert_eq!(n["updated_at"], Value::Null);
}

async fn node_create_errors(s: &Server) {
    s.node(json!({"driver": "fake-hardware", "name": "taken", "uuid": "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee"})).await;
    let cases: Vec<(Value, &str, u16, &str)> = vec![
        (
            json!({"driver": "fake-hardware", "foo": 1}),
            MAX,
            400,
            "Schema error for node: Additional properties are not allowed ('foo' was unexpected)",
        ),
        (
            json!({"driver": "fake-hardware", "extra": "not-an-object"}),
            MAX,
            400,
            "Schema error for node: 'not-an-object' is not of type 'object', 'null'",
        ),
        (
            json!({"name": "no-driver"}),
            MAX,
            400,
            "Schema error for node: 'driver' is a required property",
        ),
        (
            json!({}),
            MAX,
            400,
            "Schema error for node: 'driver' is a required property",
        ),
        (
            json!({"driver": "no-such-driver"}),
            MAX,
            400,
            "No valid host was found. Reason: No conductor service registered which supports driver no-such-driver for conductor group \"\". Ensure the driver is valid and enabled.",
        ),
        (
            json!({"driver": "fake-hardware", "conductor_group": "elsewhere"}),
            MAX,
            400,
            "No valid host was found. Reason: No conductor service registered which supports driver fake-hardware for conductor group \"elsewhere\". Ensure the driver is valid and enabled.",
        ),
        (
            json!({"driver": "fake-hardware", "name": "bad name!"}),
            MAX,
            400,
            "Cannot create node with invalid name 'bad name!'",
        ),
        (
            json!({"driver": "fake-hardware", "name": "taken"}),
            MAX,
            409,
            "A node with name taken already exists.",
        ),
        (
            json!({"driver": "fake-hardware", "uuid": "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee"}),
            MAX,
            409,
            "A node with UUID aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee already exists.",
        ),
        (
            json!({"driver": "fake-hardware", "resource_class": "rc-x"}),
            "1.20",
            406,
            "Request not acceptable.",
        ),
        (
            json!({"driver": "fake-hardware", "name": "too-early"}),
            "1.4",
            406,
            "Request not acceptable.",
        ),
        (
            json!({"driver": "fake-hardware", "provision_state": "active"}),
            MAX,
            400,
            "Schema error for node: Additional properties are not allowed ('provision_state' was unexpected)",
        ),
        (
            json!({"driver": "fake-hardware", "boot_interface": "pxe"}),
            MAX,
            400,
            "boot interface implementation 'pxe' is not supported by hardware type fake-hardware. Enabled implementations: fake",
        ),
        (
            json!({"driver": "fake-hardware", "maintenance": 5}),
            MAX,
            400,
            "Schema error for node: 5 is not of type 'string', 'boolean'",
        ),
        (
            json!([1, 2]),
            MAX,
            400,
            "Schema error for node: [1, 2] is not of type 'object'",
        ),
    ];
    for (body, v, status, msg) in cases {
        let r = s.post("/v1/nodes", v, &body).await;
        assert_eq!((r.status, r.fault().as_str()), (status, msg), "body {body}");
    }
    let r = s
        .post(
            "/v1/nodes",
            MAX,
            &json!({"driver": "fake-hardware", "maintenance": "yes-please"}),
        )
        .await;
    assert_eq!(r.status, 400);
    assert!(
        r.fault()
            .starts_with("Invalid maintenance: Unrecognized value 'yes-please'")
    );
    let r = s
        .post(
            "/v1/nodes",
            MAX,
            &json!({"driver": "fake-hardware", "name": "x".repeat(256)}),
        )
        .await;
    assert_eq!(r.status, 400);
    let r = s
        .post(
            "/v1/nodes",
            MAX,
            &json!({"driver": "fake-hardware", "description": "d".repeat(4097)}),
        )
        .await;
    assert_eq!(r.status, 400);
    assert!(r.fault().ends_with("is too long"));
    // Malformed JSON is the client's mistake: 400, where upstream answers 500.
    let r = s
        .call(
            "POST",
            "/v1/nodes",
            Some(MAX),
            Some("{\"driver\": \"fake-hardware\","),
        )
        .await;
    assert_eq!(r.status, 400);
    assert!(r.fault().starts_with("The request body is not valid JSON"));
    let r = s.call("POST", "/v1/nodes", Some(MAX), Some("")).await;
    assert_eq!(r.status, 400);
    // A huge body is refused before it is read whole.
    let huge = format!(
        "{{\"driver\": \"fake-hardware\", \"extra\": {{\"x\": \"{}\"}}}}",
        "a".repeat(2 * 1024 * 1024)
    );
    let r = s.call("POST", "/v1/nodes", Some(MAX), Some(&huge)).await;
    assert_eq!(r.status, 413);
    // Deep nesting is refused, not a crash.
    let deep = format!(
        "{{\"driver\": \"fake-hardware\", \"extra\": {{\"x\": {}{}}}}}",
        "[".repeat(5000),
        "]".repeat(5000)
    );
    assert_eq!(
        s.call("POST", "/v1/nodes", Some(MAX), Some(&deep))
            .await
            .status,
        400
    );
    // Nothing above was stored.
    assert_eq!(
        s.get("/v1/nodes", MAX).await.json()["nodes"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );
}

async fn node_get_and_fields(s: &Server) {
    let n = s
        .node(json!({"driver": "fake-hardware", "name": "node-x"}))
        .await;
    let uuid = n["uuid"].as_str().unwrap_or_default();
    // `node` creates at 1.51: read back at the same version.
    let by_uuid = s.get(&format!("/v1/nodes/{uuid}"), "1.51").await;
    assert_eq!(by_uuid.status, 200);
    assert_eq!(by_uuid.json(), n, "GET shows what POST returned");
    assert_eq!(s.get("/v1/nodes/node-x", MAX).await.json()["uuid"], uuid);
    assert_eq!(
        s.get(&format!("/v1/nodes/{}", uuid.to_uppercase()), MAX)
            .await
            .status,
        200
    );
    let r = s.get("/v1/nodes/node-x", "1.1").await;
    assert_eq!(
        (r.status, r.fault().as_str()),
        (404, "Node node-x could not be found.")
    );
    let r = s
        .get("/v1/nodes/node-x?fields=uuid,name,provision_state", MAX)
        .await
        .json();
    let keys: Vec<&str> = r
        .as_object()
        .map(|o| o.keys().map(String::as_str).collect())
        .unwrap_or_default();
    assert_eq!(keys, ["uuid", "name", "provision_state", "links"]);
    let r = s.get("/v1/nodes/node-x?fields=nope", MAX).await;
    assert_eq!(
        (r.status, r.fault().as_str()),
        (400, "Field nope is not a valid field.")
    );
    assert_eq!(
        s.get("/v1/nodes/node-x?fields=owner", "1.49").await.status,
        406
    );
    assert_eq!(
        s.get("/v1/nodes/node-x?fields=retired", "1.60")
            .await
            .status,
        406
    );
    assert_eq!(
        s.get(&format!("/v1/nodes/{uuid}?fields=uuid"), "1.7")
            .await
            .status,
        406
    );
    let r = s
        .get("/v1/nodes/11111111-2222-3333-4444-555555555555", MAX)
        .await;
    assert_eq!(
        (r.status, r.fault().as_str()),
        (
            404,
            "Node 11111111-2222-3333-4444-555555555555 could not be found."
        )
    );
    let r = s.get("/v1/nodes/no-such-node", MAX).await;
    assert_eq!(
        (r.status, r.fault().as_str()),
        (404, "Node no-such-node could not be found.")
    );
    let r = s.get("/v1/nodes/bad%20name", MAX).await;
    assert_eq!(
        (r.status, r.fault().as_str()),
        (
            400,
            "Expected a logical name or UUID but received bad name."
        )
    );
    assert_eq!(
        s.get("/v1/nodes/node-x.json", "1.90").await.json()["uuid"],
        uuid
    );
    let at136 = s.get("/v1/nodes/node-x", "1.36").await.json();
    assert!(at136.get("traits").is_none() && at136.get("conductor_group").is_none());
    assert!(at136.get("rescue_interface").is_none() && at136.get("storage_interface").is_some());
}

async fn node_list_walks_pages(s: &Server) {
    let mut created = Vec::new();
    for i in 0..300 {
        let body = json!({"driver": "fake-hardware", "name": format!("page-{i:03}"), "resource_class": "walk"});
        let r = s.post("/v1/nodes", MAX, &body).await;
        assert_eq!(r.status, 201);
        created.push(r.json()["uuid"].as_str().unwrap_or_default().to_string());
    }
    for (first, key) in [
        ("/v1/nodes?limit=70", "nodes"),
        (
            "/v1/nodes/detail?limit=45&sort_key=name&sort_dir=desc",
            "nodes",
        ),
        (
            "/v1/nodes?limit=64&fields=uuid,name&resource_class=walk",
            "nodes",
        ),
    ] {
        let mut seen = Vec::new();
        let mut url = Some(format!("{}{first}", s.base()));
        let mut pages = 0;
        while let Some(u) = url.take() {
            pages += 1;
            assert!(pages < 20, "pagination terminates");
            let path = u.strip_prefix(&s.base()).unwrap_or(&u).to_string();
            let r = s.get(&path, MAX).await;
            assert_eq!(r.status, 200, "{path}: {}", r.body);
            let page = r.json();
            for n in page[key].as_array().cloned().unwrap_or_default() {
                seen.push(n["uuid"].as_str().unwrap_or_default().to_string());
            }
            url = page["next"].as_str().map(str::to_owned);
        }
        let mut a = seen.clone();
        a.sort();
        a.dedup();
        assert_eq!(
            a.len(),
            300,
            "{first}: every node exactly once ({} seen)",
            seen.len()
        );
        if first.contains("sort_dir=desc") {
            let mut expected = created.clone();
            expected.reverse();
            assert_eq!(seen, expected, "sorted by name, descending");
        }
    }
    let r = s.get("/v1/nodes?limit=2", MAX).await.json();
    let next = r["next"].as_str().unwrap_or_default();
    assert!(
        next.starts_with(&format!(
            "{}/v1/nodes?sort_key=id&sort_dir=asc&limit=2&marker=",
            s.base()
        )),
        "{next}"
    );
    let r = s.get("/v1/nodes?limit=2", MAX).await.json();
    assert_eq!(
        r["nodes"][0]
            .as_object()
            .map(|o| o.keys().cloned().collect::<Vec<_>>()),
        Some(
            vec![
                "uuid",
                "instance_uuid",
                "maintenance",
                "name",
                "power_state",
                "provision_state",
                "links"
            ]
            .into_iter()
            .map(String::from)
            .collect()
        )
    );
    let detail = s.get("/v1/nodes?detail=true&limit=1", MAX).await.json();
    assert!(
        detail["nodes"][0].get("driver_info").is_some()
            && detail["nodes"][0].get("ports").is_some()
    );
    assert!(
        detail["next"]
            .as_str()
            .is_some_and(|n| n.contains("detail=true"))
    );
}

async fn node_list_filters_sorting_and_errors(s: &Server) {
    s.node(
        json!({"driver": "fake-hardware", "name": "a", "resource_class": "rc-a", "owner": "o1"}),
    )
    .await;
    s.node(json!({"driver": "fake-hardware", "name": "b", "resource_class": "rc-b", "maintenance": true,
                  "conductor_group": "", "description": "GPU box"})).await;
    s.post("/v1/nodes", "1.1", &json!({"driver": "fake-hardware"}))
        .await;
    let names = |r: common::Resp| -> Vec<String> {
        r.json()["nodes"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|n| n["name"].as_str().unwrap_or("-").to_string())
            .collect()
    };
    assert_eq!(
        names(s.get("/v1/nodes?resource_class=rc-a", MAX).await),
        ["a"]
    );
    assert_eq!(names(s.get("/v1/nodes?maintenance=true", MAX).await), ["b"]);
    assert_eq!(
        names(s.get("/v1/nodes?maintenance=false", MAX).await),
        ["a", "-"]
    );
    assert_eq!(
        names(s.get("/v1/nodes?provision_state=available", MAX).await),
        ["-"]
    );
    assert_eq!(
        names(s.get("/v1/nodes?provision_state=enroll", MAX).await),
        ["a", "b"]
    );
    assert_eq!(
        names(s.get("/v1/nodes?driver=fake-hardware&owner=o1", MAX).await),
        ["a"]
    );
    assert_eq!(
        names(s.get("/v1/nodes?conductor_group=", MAX).await),
        ["a", "b", "-"]
    );
    assert_eq!(
        names(s.get("/v1/nodes?description_contains=GPU", MAX).await),
        ["b"]
    );
    assert_eq!(
        names(s.get("/v1/nodes?conductor=test-conductor", MAX).await),
        ["a", "b", "-"]
    );
    assert_eq!(
        names(s.get("/v1/nodes?conductor=other", MAX).await),
        Vec::<String>::new()
    );
    assert_eq!(
        names(s.get("/v1/nodes?retired=false", "1.5").await),
        ["a", "b", "-"],
        "retired has no version check"
    );
    assert_eq!(
        names(s.get("/v1/nodes?associated=false&fault=x", MAX).await),
        Vec::<String>::new()
    );
    assert_eq!(
        names(s.get("/v1/nodes?sort_key=name&sort_dir=desc", MAX).await),
        ["b", "a", "-"]
    );
    let cases: Vec<(&str, &str, u16, &str)> = vec![
        (
            "/v1/nodes?sort_key=driver_info",
            MAX,
            400,
            "The sort_key value driver_info is an invalid field for sorting",
        ),
        (
            "/v1/nodes?sort_dir=sideways",
            MAX,
            400,
            "Invalid sort direction: sideways. Acceptable values are 'asc' or 'desc'",
        ),
        ("/v1/nodes?limit=0", MAX, 400, "Limit must be positive"),
        ("/v1/nodes?limit=-3", MAX, 400, "Limit must be positive"),
        (
            "/v1/nodes?marker=11111111-2222-3333-4444-555555555555",
            MAX,
            404,
            "Node 11111111-2222-3333-4444-555555555555 could not be found.",
        ),
        (
            "/v1/nodes?provision_state=bogus",
            MAX,
            400,
            "Provision state \"bogus\" is not valid",
        ),
        (
            "/v1/nodes/detail?fields=uuid",
            MAX,
            400,
            "Unexpected arguments: fields",
        ),
        (
            "/v1/nodes?detail=true&fields=uuid",
            MAX,
            400,
            "Can not specify ?detail=True and fields in the same request.",
        ),
        (
            "/v1/nodes?frobnicate=1",
            MAX,
            400,
            "Unexpected arguments: frobnicate",
        ),
        (
            "/v1/nodes?provision_state=enroll",
            "1.8",
            406,
            "Request not acceptable.",
        ),
        ("/v1/nodes?owner=x", "1.49", 406, "Request not acceptable."),
        ("/v1/nodes?lessee=x", "1.64", 406, "Request not acceptable."),
        ("/v1/nodes?fault=x", "1.41", 406, "Request not acceptable."),
    ];
    for (path, v, status, msg) in cases {
        let r = s.get(path, v).await;
        assert_eq!(
            (r.status, r.fault().as_str()),
            (status, msg),
            "{path} at {v}"
        );
    }
    let r = s.get("/v1/nodes?maintenance=maybe", MAX).await;
    assert_eq!(r.status, 400);
    assert_eq!(s.get("/v1/nodes?detail=true", "1.42").await.status, 400);
    let r = s.get("/v1/nodes?limit=100000", MAX).await;
    assert_eq!(r.status, 200, "limits above the maximum are capped");
}

async fn node_patch_rules(s: &Server) {
    let n = s
        .node(json!({"driver": "fake-hardware", "name": "p", "extra": {"rack": "r1"}}))
        .await;
    let uuid = n["uuid"].as_str().unwrap_or_default().to_string();
    let p = |ops: Value| async move { s.patch("/v1/nodes/p", MAX, &ops).await };
    let r = p(json!([{"op": "add", "path": "/extra/foo", "value": "bar"}])).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["extra"], json!({"rack": "r1", "foo": "bar"}));
    assert!(r.json()["updated_at"].is_string());
    let r = p(
        json!([{"op": "replace", "path": "/extra/foo", "value": {"deep": [1, 2]}},
                     {"op": "remove", "path": "/extra/rack"},
                     {"op": "add", "path": "/properties/cpus", "value": 4},
                     {"op": "add", "path": "/driver_info/ipmi_address", "value": "10.0.0.1"}]),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let j = r.json();
    assert_eq!(j["extra"], json!({"foo": {"deep": [1, 2]}}));
    assert_eq!(j["properties"], json!({"cpus": 4}));
    assert_eq!(j["driver_info"], json!({"ipmi_address": "10.0.0.1"}));
    let r = p(json!([{"op": "replace", "path": "/extra", "value": {"a": 1}}, {"op": "replace", "path": "/description", "value": "changed"}])).await;
    assert_eq!(r.json()["extra"], json!({"a": 1}));
    assert_eq!(r.json()["description"], "changed");
    let r = s
        .patch(
            &format!("/v1/nodes/{uuid}"),
            MAX,
            &json!([{"op": "remove", "path": "/name"}]),
        )
        .await;
    assert_eq!(r.json()["name"], Value::Null);
    let r = s
        .patch(
            &format!("/v1/nodes/{uuid}"),
            MAX,
            &json!([{"op": "add", "path": "/name", "value": "p"}]),
        )
        .await;
    assert_eq!(r.json()["name"], "p");
    assert_eq!(p(json!([])).await.status, 200);
    // Persisted, not just echoed.
    assert_eq!(
        s.get("/v1/nodes/p", MAX).await.json()["extra"],
        json!({"a": 1})
    );
    // Interfaces: only enabled implementations; removal restores the default.
    let r = p(json!([{"op": "replace", "path": "/storage_interface", "value": "fake"}])).await;
    assert_eq!(r.json()["storage_interface"], "fake");
    let r = p(json!([{"op": "replace", "path": "/bios_interface", "value": "no-bios"}])).await;
    assert_eq!(r.json()["bios_interface"], "no-bios");
    let r = p(json!([{"op": "remove", "path": "/bios_interface"}])).await;
    assert_eq!(r.json()["bios_interface"], "fake");
    assert_eq!(
        p(json!([{"op": "replace", "path": "/bios_interface", "value": "redfish"}]))
            .await
            .status,
        400
    );
    // Owner, resource class, instance uuid.
    let r = p(json!([{"op": "add", "path": "/owner", "value": "proj"}, {"op": "add", "path": "/resource_class", "value": "big"}])).await;
    assert_eq!(
        (
            r.json()["owner"].clone(),
            r.json()["resource_class"].clone()
        ),
        (json!("proj"), json!("big"))
    );
    let inst = "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee";
    assert_eq!(
        p(json!([{"op": "add", "path": "/instance_uuid", "value": inst}]))
            .await
            .status,
        200
    );
    let r = p(json!([{"op": "replace", "path": "/instance_uuid", "value": "11111111-2222-3333-4444-555555555555"}])).await;
    assert_eq!(
        (r.status, r.fault()),
        (
            409,
            format!("Node {uuid} is associated with instance {inst}.")
        )
    );
    assert_eq!(
        p(json!([{"op": "remove", "path": "/instance_uuid"}]))
            .await
            .status,
        200
    );
    // Protected only in active/rescue.
    let r = p(json!([{"op": "replace", "path": "/protected", "value": true}])).await;
    assert_eq!(r.status, 409);
    let r = p(json!([{"op": "replace", "path": "/protected_reason", "value": "x"}])).await;
    assert_eq!(
        (r.status, r.fault().as_str()),
        (
            400,
            "The protected_reason field can only be set when protected is True"
        )
    );
    // Maintenance through PATCH, and clearing it clears the reason.
    assert_eq!(
        s.put(
            "/v1/nodes/p/maintenance",
            MAX,
            Some(&json!({"reason": "disk"}))
        )
        .await
        .status,
        202
    );
    assert_eq!(
        s.get("/v1/nodes/p", MAX).await.json()["maintenance_reason"],
        "disk"
    );
    let r = p(json!([{"op": "replace", "path": "/maintenance", "value": false}])).await;
    assert_eq!(
        (
            r.json()["maintenance"].clone(),
            r.json()["maintenance_reason"].clone()
        ),
        (json!(false), Value::Null)
    );
    // Conductor group must be served.
    let r = p(json!([{"op": "replace", "path": "/conductor_group", "value": "nowhere"}])).await;
    assert_eq!(r.status, 400);
    assert!(r.fault().contains("for conductor group \"nowhere\""));
}

async fn node_patch_errors(s: &Server) {
    s.node(json!({"driver": "fake-hardware", "name": "e", "extra": {"a": 1}}))
        .await;
    s.node(json!({"driver": "fake-hardware", "name": "other"}))
        .await;
    let allowed = "automated_clean, bios_interface, boot_interface, chassis_uuid, conductor_group, console_interface, deploy_interface, description, disable_power_off, driver, driver_info, extra, inspect_interface, instance_info, instance_name, instance_uuid, lessee, maintenance, management_interface, name, network_data, network_interface, owner, power_interface, properties, protected, protected_reason, raid_interface, rescue_interface, resource_class, retired, retired_reason, shard, storage_interface, vendor_interface, parent_node, firmware_interface";
    let cases: Vec<(Value, &str, u16, String)> = vec![
        (json!([{"op": "replace", "path": "/name", "value": "bad name!"}]), MAX, 400, "Node e: Cannot change name to invalid name 'bad name!'".into()),
        (json!([{"op": "replace", "path": "/name", "value": "other"}]), MAX, 409, "A node with name other already exists.".into()),
        (json!([{"op": "replace", "path": "/provision_state", "value": "active"}]), MAX, 400, format!("Cannot patch /provision_state. Only the following can be updated: {allowed}")),
        (json!([{"op": "replace", "path": "/uuid", "value": "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee"}]), MAX, 400, format!("Cannot patch /uuid. Only the following can be updated: {allowed}")),
        (json!([{"op": "add", "path": "/foo", "value": "bar"}]), MAX, 400, format!("Cannot patch /foo. Only the following can be updated: {allowed}")),
        (json!([{"op": "remove", "path": "/extra/missing"}]), MAX, 400, "Couldn't apply patch '{'op': 'remove', 'path': '/extra/missing'}'. Reason: can't remove a non-existent object 'missing'".into()),
        (json!([{"op": "replace", "path": "/extra/missing", "value": 1}]), MAX, 400, "Couldn't apply patch '{'op': 'replace', 'path': '/extra/missing', 'value': 1}'. Reason: can't replace a non-existent object 'missing'".into()),
        (json!([{"op": "replace", "path": "/driver", "value": "no-such-driver"}]), MAX, 400, "No valid host was found. Reason: No conductor service registered which supports driver no-such-driver for conductor group \"\". Ensure the driver is valid and enabled.".into()),
        (json!([{"op": "replace", "path": "/extra", "value": "str"}]), MAX, 400, "Schema error for patch: 'str' is not of type 'object', 'null'".into()),
        (json!({"op": "add", "path": "/extra/foo", "value": "bar"}), MAX, 400, "Schema error for patch: {'op': 'add', 'path': '/extra/foo', 'value': 'bar'} is not of type 'array'".into()),
        (json!([{"op": "move", "from": "/extra/a", "path": "/extra/b"}]), MAX, 400, "Schema error for patch: Additional properties are not allowed ('from' was unexpected)".into()),
        (json!([{"op": "frobnicate", "path": "/extra/a", "value": 1}]), MAX, 400, "Schema error for patch: 'frobnicate' is not one of ['add', 'replace', 'remove']".into()),
        (json!([{"op": "add", "path": "/extra/foo"}]), MAX, 400, "Couldn't apply patch '{'op': 'add', 'path': '/extra/foo'}'. Reason: The operation does not contain a 'value' member".into()),
        (json!([{"op": "add", "value": "bar"}]), MAX, 400, "Schema error for patch: 'path' is a required property".into()),
        (json!([{"path": "/extra/foo", "value": "bar"}]), MAX, 400, "Schema error for patch: 'op' is a required property".into()),
        (json!([{"op": "add", "path": "extra/foo", "value": "bar"}]), MAX, 400, "Schema error for patch: 'extra/foo' does not match '^(/[\\\\w-]+)+$'".into()),
        (json!([{"op": "add", "path": "/owner", "value": "x"}]), "1.49", 406, "Request not acceptable.".into()),
        (json!([{"op": "add", "path": "/retired", "value": true}]), "1.60", 406, "Request not acceptable.".into()),
        (json!([{"op": "add", "path": "/traits", "value": ["CUSTOM_A"]}]), MAX, 400, "Cannot update node traits via node patch. Node traits should be updated via the node traits API.".into()),
        (json!([{"op": "remove", "path": "/driver"}]), MAX, 400, "Schema error for patch: 'driver' is a required property".into()),
    ];
    for (body, v, status, msg) in cases {
        let r = s.patch("/v1/nodes/e", v, &body).await;
        assert_eq!((r.status, r.fault()), (status, msg), "patch {body}");
    }
    let r = s
        .call(
            "PATCH",
            "/v1/nodes/e",
            Some(MAX),
            Some("[{\"op\": \"add\", \"path\": "),
        )
        .await;
    assert_eq!(r.status, 400);
    let r = s
        .patch(
            "/v1/nodes/11111111-2222-3333-4444-555555555555",
            MAX,
            &json!([{"op": "add", "path": "/extra/foo", "value": "bar"}]),
        )
        .await;
    assert_eq!(r.status, 404);
    assert_eq!(
        s.patch("/v1/nodes/e?reset_interfaces=true", MAX, &json!([]))
            .await
            .status,
        400
    );
    assert_eq!(
        s.patch("/v1/nodes/e?reset_interfaces=true", "1.44", &json!([]))
            .await
            .status,
        406
    );
    // Nothing above changed the node.
    let after = s.get("/v1/nodes/e", MAX).await.json();
    assert_eq!(after["extra"], json!({"a": 1}));
    assert_eq!(after["updated_at"], Value::Null);
    assert_eq!(
        after["reservation"],
        Value::Null,
        "failed updates leave no lock behind"
    );
}

async fn concurrent_patches_lose_nothing(s: &Server) {
    s.node(json!({"driver": "fake-hardware", "name": "busy"}))
        .await;
    let mut tasks = Vec::new();
    for i in 0..16 {
        let base = s.addr;
        tasks.push(tokio::spawn(async move {
            let srv = Server {
                running: None,
                addr: base,
                testdb: None,
                conductor: None,
                bus: None,
            };
            let mut last = 0;
            // Bounded retries: a 409 NodeLocked is a legitimate answer under contention.
            for _ in 0..20 {
                let r = srv
                    .patch(
                        "/v1/nodes/busy",
                        MAX,
                        &json!([{"op": "add", "path": format!("/extra/k{i}"), "value": i}]),
                    )
                    .await;
                last = r.status;
                if r.status != 409 {
                    break;
                }
            }
            last
        }));
    }
    for t in tasks {
        assert_eq!(t.await.ok(), Some(200));
    }
    let extra = s.get("/v1/nodes/busy", MAX).await.json()["extra"].clone();
    assert_eq!(
        extra.as_object().map(|o| o.len()),
        Some(16),
        "every concurrent update kept: {extra}"
    );
}

async fn node_delete_rules(s: &Server) {
    let n = s
        .node(json!({"driver": "fake-hardware", "name": "d"}))
        .await;
    assert_eq!(s.delete("/v1/nodes/d", MAX).await.status, 204);
    assert_eq!(
        s.get(
            &format!("/v1/nodes/{}", n["uuid"].as_str().unwrap_or_default()),
            MAX
        )
        .await
        .status,
        404
    );
    let r = s
        .delete("/v1/nodes/11111111-2222-3333-4444-555555555555", MAX)
        .await;
    assert_eq!(r.status, 404);
    let p = s
        .node(json!({"driver": "fake-hardware", "name": "prot", "protected": true}))
        .await;
    let r = s.delete("/v1/nodes/prot", MAX).await;
    assert_eq!(
        (r.status, r.fault()),
        (
            403,
            format!(
                "Node {} is protected and cannot be undeployed, rebuilt or deleted",
                p["uuid"].as_str().unwrap_or_default()
            )
        )
    );
    let a = s.node(json!({"driver": "fake-hardware", "name": "assoc", "instance_uuid": "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee"})).await;
    let r = s.delete("/v1/nodes/assoc", MAX).await;
    assert_eq!(
        (r.status, r.fault()),
        (
            409,
            format!(
                "Node {} is associated with instance aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee.",
                a["uuid"].as_str().unwrap_or_default()
            )
        )
    );
    // In maintenance an associated node may go.
    assert_eq!(
        s.put("/v1/nodes/assoc/maintenance", MAX, None).await.status,
        202
    );
    assert_eq!(s.delete("/v1/nodes/assoc", MAX).await.status, 204);
    // Available nodes may be deleted (allow_deleting_available_nodes).
    s.post("/v1/nodes", "1.1", &json!({"driver": "fake-hardware"}))
        .await;
    let avail = s
        .get("/v1/nodes?provision_state=available", MAX)
        .await
        .json();
    let u = avail["nodes"][0]["uuid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert_eq!(s.delete(&format!("/v1/nodes/{u}"), MAX).await.status, 204);
}

async fn node_traits(s: &Server) {
    let n = s
        .node(json!({"driver": "fake-hardware", "name": "t"}))
        .await;
    let uuid = n["uuid"].as_str().unwrap_or_default();
    assert_eq!(
        s.put(
            "/v1/nodes/t/traits",
            MAX,
            Some(&json!({"traits": ["CUSTOM_B", "CUSTOM_A", "HW_CPU_X86_AVX2"]}))
        )
        .await
        .status,
        204
    );
    assert_eq!(
        s.get("/v1/nodes/t/traits", MAX).await.json(),
        json!({"traits": ["CUSTOM_A", "CUSTOM_B", "HW_CPU_X86_AVX2"]})
    );
    let r = s.put("/v1/nodes/t/traits/CUSTOM_C", MAX, None).await;
    assert_eq!(r.status, 204);
    assert_eq!(
        r.header("location"),
        Some(format!("{}/v1/nodes/t/traits/CUSTOM_C", s.base()).as_str())
    );
    assert_eq!(
        s.put("/v1/nodes/t/traits/CUSTOM_C", MAX, None).await.status,
        204,
        "idempotent"
    );
    assert_eq!(
        s.get("/v1/nodes/t?fields=name,traits", MAX).await.json()["traits"],
        json!(["CUSTOM_A", "CUSTOM_B", "CUSTOM_C", "HW_CPU_X86_AVX2"])
    );
    let detail = s.get("/v1/nodes/detail", MAX).await.json();
    assert_eq!(
        detail["nodes"][0]["traits"].as_array().map(Vec::len),
        Some(4)
    );
    assert_eq!(
        s.delete("/v1/nodes/t/traits/CUSTOM_A", MAX).await.status,
        204
    );
    let r = s.delete("/v1/nodes/t/traits/CUSTOM_NOPE", MAX).await;
    assert_eq!(
        (r.status, r.fault()),
        (
            404,
            format!("Node {uuid} doesn't have a trait 'CUSTOM_NOPE'")
        )
    );
    let r = s.put("/v1/nodes/t/traits/lowercase_trait", MAX, None).await;
    assert_eq!(
        (r.status, r.fault().as_str()),
        (
            400,
            "Schema error for trait: 'lowercase_trait' is not valid under any of the given schemas. Possible root cause: 'lowercase_trait' does not match '^CUSTOM_[A-Z0-9_]+$'"
        )
    );
    let r = s
        .put(
            "/v1/nodes/t/traits",
            MAX,
            Some(&json!({"traits": ["CUSTOM_OK", "not a trait"]})),
        )
        .await;
    assert_eq!(r.status, 400);
    assert!(
        r.fault()
            .starts_with("Schema error for body: 'not a trait' is not valid")
    );
    let long = format!("CUSTOM_{}", "A".repeat(249));
    let r = s
        .put("/v1/nodes/t/traits", MAX, Some(&json!({"traits": [long]})))
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (400, format!("Schema error for body: '{long}' is too long"))
    );
    let r = s
        .put(
            "/v1/nodes/t/traits",
            MAX,
            Some(&json!({"trait": ["CUSTOM_OK"]})),
        )
        .await;
    assert_eq!(
        (r.status, r.fault().as_str()),
        (
            400,
            "Schema error for body: Additional properties are not allowed ('trait' was unexpected)"
        )
    );
    let r = s
        .put(
            "/v1/nodes/t/traits",
            MAX,
            Some(&json!({"traits": "CUSTOM_OK"})),
        )
        .await;
    assert_eq!(
        (r.status, r.fault().as_str()),
        (
            400,
            "Schema error for body: 'CUSTOM_OK' is not of type 'array'"
        )
    );
    let many: Vec<String> = (0..51).map(|i| format!("CUSTOM_T{i:02}")).collect();
    let r = s
        .put("/v1/nodes/t/traits", MAX, Some(&json!({"traits": many})))
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(
        s.get("/v1/nodes/t/traits", MAX).await.json()["traits"],
        json!(["CUSTOM_B", "CUSTOM_C", "HW_CPU_X86_AVX2"]),
        "a refused change leaves the traits as they were"
    );
    assert_eq!(
        s.put(
            "/v1/nodes/t/traits",
            MAX,
            Some(&json!({"traits": ["CUSTOM_DUP", "CUSTOM_DUP"]}))
        )
        .await
        .status,
        204
    );
    assert_eq!(
        s.get("/v1/nodes/t/traits", MAX).await.json()["traits"],
        json!(["CUSTOM_DUP"])
    );
    assert_eq!(s.get("/v1/nodes/t/traits", "1.36").await.status, 406);
    assert_eq!(
        s.put("/v1/nodes/t/traits/CUSTOM_OLD", "1.36", None)
            .await
            .status,
        405
    );
    assert!(
        s.get("/v1/nodes/t", "1.36")
            .await
            .json()
            .get("traits")
            .is_none()
    );
    let r = s
        .call(
            "PUT",
            "/v1/nodes/t/traits/CUSTOM_X",
            Some(MAX),
            Some("{\"a\": 1}"),
        )
        .await;
    assert_eq!(r.status, 400, "a single-trait PUT takes no body");
    assert_eq!(s.delete("/v1/nodes/t/traits", MAX).await.status, 204);
    assert_eq!(
        s.get("/v1/nodes/t/traits", MAX).await.json(),
        json!({"traits": []})
    );
    assert_eq!(
        s.get("/v1/nodes/no-such-node/traits", MAX).await.status,
        404
    );
}

async fn node_states_and_maintenance(s: &Server) {
    s.node(json!({"driver": "fake-hardware", "name": "st"}))
        .await;
    let st = s.get("/v1/nodes/st/states", "1.74").await.json();
    assert_eq!(
        st,
        json!({"console_enabled": false, "last_error": null, "power_state": null, "provision_state": "enroll",
               "target_power_state": null, "target_provision_state": null, "provision_updated_at": null,
               "raid_config": {}, "target_raid_config": {}})
    );
    assert!(
        s.get("/v1/nodes/st/states", "1.11")
            .await
            .json()
            .get("raid_config")
            .is_none()
    );
    assert_eq!(
        s.put(
            "/v1/nodes/st/maintenance",
            MAX,
            Some(&json!({"reason": "sample maintenance"}))
        )
        .await
        .status,
        202
    );
    let n = s.get("/v1/nodes/st", MAX).await.json();
    assert_eq!(
        (n["maintenance"].clone(), n["maintenance_reason"].clone()),
        (json!(true), json!("sample maintenance"))
    );
    assert_eq!(
        s.get("/v1/nodes?maintenance=true", MAX).await.json()["nodes"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );
    assert_eq!(
        s.put("/v1/nodes/st/maintenance", MAX, Some(&json!({"why": 1})))
            .await
            .status,
        400
    );
    assert_eq!(s.delete("/v1/nodes/st/maintenance", MAX).await.status, 202);
    let n = s.get("/v1/nodes/st", MAX).await.json();
    assert_eq!(
        (n["maintenance"].clone(), n["maintenance_reason"].clone()),
        (json!(false), Value::Null)
    );
}

async fn drivers_and_conductors(s: &Server) {
    let old = s.get("/v1/drivers", "1.1").await.json();
    // The hardware types of the default configuration.
    let names: Vec<&str> = old["drivers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["fake-hardware", "ipmi", "oneview", "redfish"]);
    // Each documents the driver_info keys its interfaces read.
    for (driver, key) in [("redfish", "redfish_address"), ("ipmi", "ipmi_address")] {
        let props = s
            .get(&format!("/v1/drivers/{driver}/properties"), MAX)
            .await
            .json();
        assert!(
            props[key].as_str().unwrap().ends_with("Required."),
            "{props}"
        );
        assert!(props.as_object().unwrap().len() > 4, "{props}");
    }
    let ipmi = s.get("/v1/drivers/ipmi", MAX).await.json();
    assert_eq!(ipmi["default_power_interface"], "ipmitool");
    assert_eq!(ipmi["enabled_management_interfaces"], json!(["ipmitool"]));
    assert_eq!(old["drivers"][0]["name"], "fake-hardware");
    assert_eq!(old["drivers"][0]["hosts"], json!(["test-conductor"]));
    assert!(old["drivers"][0].get("type").is_none());
    let new = s.get("/v1/drivers", MAX).await.json();
    assert_eq!(new["drivers"][0]["type"], "dynamic");
    assert_eq!(
        s.get("/v1/drivers?type=classic", MAX).await.json(),
        json!({"drivers": []})
    );
    let one = s.get("/v1/drivers/fake-hardware", MAX).await.json();
    assert_eq!(one["default_network_interface"], "noop");
    assert_eq!(one["enabled_bios_interfaces"], json!(["fake", "no-bios"]));
    let r = s.get("/v1/drivers/no-such-driver", MAX).await;
    assert_eq!(
        (r.status, r.fault().as_str()),
        (
            404,
            "Could not find the following driver(s) or hardware type(s): no-such-driver."
        )
    );
    let c = s.get("/v1/conductors", "1.49").await.json();
    assert_eq!(c["conductors"][0]["hostname"], "test-conductor");
    assert_eq!(c["conductors"][0]["alive"], true);
    assert!(c["conductors"][0].get("drivers").is_none());
    let d = s.get("/v1/conductors?detail=true", MAX).await.json();
    assert_eq!(
        d["conductors"][0]["drivers"],
        json!(["fake-hardware", "redfish", "ipmi", "oneview"])
    );
    let one = s.get("/v1/conductors/test-conductor", MAX).await.json();
    assert_eq!(one["conductor_group"], "");
    let r = s.get("/v1/conductors", "1.48").await;
    assert_eq!(
        (r.status, r.fault().as_str()),
        (404, "The API is not supported for this version")
    );
    assert_eq!(r.header("x-openstack-ironic-api-version"), Some("1.48"));
    assert_eq!(s.get("/v1/conductors/nope", MAX).await.status, 404);
    let page = s
        .get("/v1/conductors?limit=1&sort_key=hostname&detail=true", MAX)
        .await
        .json();
    assert_eq!(
        page["next"],
        format!(
            "{}/v1/conductors?sort_key=hostname&detail=true&limit=1&marker=test-conductor",
            s.base()
        ),
        "next links keep the sort and detail arguments"
    );
    let next = page["next"]
        .as_str()
        .unwrap_or_default()
        .trim_start_matches(&s.base())
        .to_string();
    assert_eq!(s.get(&next, MAX).await.json()["conductors"], json!([]));
    assert_eq!(
        s.get("/v1/drivers/fake-hardware/properties", MAX)
            .await
            .json(),
        json!({"B1": "B1 description. Required.", "B2": "B2 description. Required."})
    );
    assert_eq!(s.get("/v1/drivers/nope/properties", MAX).await.status, 404);
    assert_eq!(
        s.get("/v1/drivers/fake-hardware?x=1", MAX).await.status,
        400
    );
}
