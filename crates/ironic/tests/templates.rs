#![allow(clippy::unwrap_used)]
//! Deploy templates and node retirement over real HTTP, on the all-in-one server
//! (SQLite and PostgreSQL) and on the split deployment (RabbitMQ).

mod common;

use common::Server;
use serde_json::{Value, json};

on_every_deployment!(
    templates_crud_and_validation,
    templates_select_the_deploy_steps,
    retirement_rules,
);

const V: &str = "1.61";

async fn patch(s: &Server, path: &str, ops: Value) -> common::Resp {
    s.patch(path, V, &ops).await
}

fn bios_step() -> Value {
    json!({"interface": "bios", "step": "apply_configuration",
           "args": {"settings": [{"name": "LogicalProc", "value": "Enabled"}]}, "priority": 150})
}

async fn templates_crud_and_validation(s: &Server) {
    // Version gates: 404 for reads, 405 for writes, routing-style bodies.
    let r = s.get("/v1/deploy_templates", "1.54").await;
    assert_eq!(r.status, 404);
    let r = s
        .post(
            "/v1/deploy_templates",
            "1.54",
            &json!({"name": "CUSTOM_OLD", "steps": [bios_step()]}),
        )
        .await;
    assert_eq!(r.status, 405);

    let r = s
        .post(
            "/v1/deploy_templates",
            V,
            &json!({"name": "CUSTOM_HYPERTHREADING_ON", "steps": [bios_step()]}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let ht = r.json();
    let ht_uuid = ht["uuid"].as_str().unwrap().to_string();
    assert!(
        r.header("location")
            .unwrap()
            .ends_with(&format!("/v1/deploy_templates/{ht_uuid}"))
    );
    let keys: Vec<&str> = ht.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "uuid",
            "created_at",
            "updated_at",
            "name",
            "extra",
            "links",
            "steps"
        ]
    );
    assert_eq!(ht["steps"][0]["priority"], 150);

    let full = json!({
        "uuid": "d3b1e7c2-6f0a-4e9d-8c7b-1a2b3c4d5e6f", "name": "CUSTOM_RAID1",
        "extra": {"team": "storage"},
        "steps": [
            {"interface": "raid", "step": "delete_configuration", "args": {}, "priority": "200"},
            {"interface": "deploy", "step": "deploy", "args": {"admin_password": "x"}, "priority": 0},
        ]
    });
    let r = s.post("/v1/deploy_templates", V, &full).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let raid = r.json();
    assert_eq!(
        raid["steps"][0]["priority"], 200,
        "digit strings are stored as integers"
    );
    assert_eq!(
        raid["steps"][1]["args"]["admin_password"], "******",
        "args are masked"
    );

    // Every validation error, upstream's wording.
    let s1 = |extra: Value| {
        let mut st =
            json!({"interface": "bios", "step": "factory_reset", "args": {}, "priority": 10});
        for (k, v) in extra.as_object().unwrap() {
            if v.is_null() {
                st.as_object_mut().unwrap().remove(k);
            } else {
                st[k] = v.clone();
            }
        }
        json!({"name": "CUSTOM_X", "steps": [st]})
    };
    let cases: Vec<(Value, u16, &str)> = vec![
        (
            json!({"name": "not-a-trait", "steps": [bios_step()]}),
            400,
            "Schema error for template: 'not-a-trait' is not valid under any of the given schemas. Possible root cause: 'not-a-trait' does not match '^CUSTOM_[A-Z0-9_]+$'",
        ),
        (
            json!({"name": "CUSTOM_EMPTY", "steps": []}),
            400,
            "Schema error for template: [] should be non-empty",
        ),
        (
            json!({"name": "CUSTOM_NOSTEPS"}),
            400,
            "Schema error for template: 'steps' is a required property",
        ),
        (
            json!({"steps": [bios_step()]}),
            400,
            "Schema error for template: 'name' is a required property",
        ),
        (
            s1(json!({"interface": "foo"})),
            400,
            "Schema error for template: 'foo' is not one of ['vendor', 'power', 'management', 'firmware', 'deploy', 'bios', 'raid']",
        ),
        (
            s1(json!({"priority": -1})),
            400,
            "Schema error for template: -1 is less than the minimum of 0",
        ),
        (
            s1(json!({"priority": "high"})),
            400,
            "Schema error for template: 'high' does not match '^[0-9]+$'",
        ),
        (
            s1(json!({"args": null})),
            400,
            "Schema error for template: 'args' is a required property",
        ),
        (
            s1(json!({"priority": null})),
            400,
            "Schema error for template: 'priority' is a required property",
        ),
        (
            s1(json!({"foo": 1})),
            400,
            "Schema error for template: Additional properties are not allowed ('foo' was unexpected)",
        ),
        (
            json!({"name": "CUSTOM_HYPERTHREADING_ON", "steps": [bios_step()]}),
            409,
            "A deploy template with name CUSTOM_HYPERTHREADING_ON already exists.",
        ),
        (
            json!({"uuid": "d3b1e7c2-6f0a-4e9d-8c7b-1a2b3c4d5e6f", "name": "CUSTOM_OTHER", "steps": [bios_step()]}),
            409,
            "A deploy template with UUID d3b1e7c2-6f0a-4e9d-8c7b-1a2b3c4d5e6f already exists.",
        ),
        (
            json!({"name": "CUSTOM_DUPSTEPS", "steps": [bios_step(), bios_step()]}),
            400,
            "Deploy template invalid: Duplicate deploy steps. A template cannot have multiple deploy steps with the same interface and step. Duplicates: interface: bios, step: apply_configuration.",
        ),
        (
            json!({"name": "CUSTOM_UNKNOWN", "steps": [bios_step()], "foo": 1}),
            400,
            "Schema error for template: Additional properties are not allowed ('foo' was unexpected)",
        ),
    ];
    for (body, code, msg) in cases {
        let r = s.post("/v1/deploy_templates", V, &body).await;
        assert_eq!(r.status, code, "{body}: {}", r.body);
        assert_eq!(r.fault(), msg, "{body}");
    }

    // Reads: by uuid, by name, fields; lists: default fields, detail, fields, pages.
    assert_eq!(
        s.get(&format!("/v1/deploy_templates/{ht_uuid}"), V)
            .await
            .json()["name"],
        "CUSTOM_HYPERTHREADING_ON"
    );
    let r = s
        .get("/v1/deploy_templates/CUSTOM_RAID1?fields=name,steps", V)
        .await;
    let keys: Vec<String> = r.json().as_object().unwrap().keys().cloned().collect();
    assert_eq!(keys, ["name", "links", "steps"]);
    let r = s.get("/v1/deploy_templates/CUSTOM_NOPE", V).await;
    assert_eq!(r.status, 404);
    assert_eq!(r.fault(), "Deploy template CUSTOM_NOPE could not be found.");
    let l = s.get("/v1/deploy_templates", V).await.json();
    let first: Vec<String> = l["deploy_templates"][0]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    assert_eq!(first, ["uuid", "name", "links"]);
    assert_eq!(l["deploy_templates"].as_array().unwrap().len(), 2);
    let d = s.get("/v1/deploy_templates?detail=True", V).await.json();
    assert!(d["deploy_templates"][1]["steps"].is_array());
    let f = s
        .get("/v1/deploy_templates?fields=uuid,extra", V)
        .await
        .json();
    assert_eq!(
        f["deploy_templates"][1]["extra"],
        json!({"team": "storage"})
    );
    assert_eq!(
        s.get("/v1/deploy_templates?detail=True&fields=name", V)
            .await
            .status,
        400
    );
    let p1 = s.get("/v1/deploy_templates?limit=1", V).await.json();
    assert_eq!(p1["deploy_templates"].as_array().unwrap().len(), 1);
    let next = p1["next"].as_str().unwrap();
    let p2 = s.get(&next[next.find("/v1/").unwrap()..], V).await.json();
    assert_eq!(p2["deploy_templates"][0]["name"], "CUSTOM_RAID1");
    let by_name = s
        .get("/v1/deploy_templates?sort_key=name&sort_dir=desc", V)
        .await
        .json();
    assert_eq!(by_name["deploy_templates"][0]["name"], "CUSTOM_RAID1");
    let q1 = s
        .get(
            "/v1/deploy_templates?limit=1&sort_key=name&sort_dir=desc",
            V,
        )
        .await
        .json();
    assert_eq!(q1["deploy_templates"][0]["name"], "CUSTOM_RAID1");
    let next = q1["next"].as_str().unwrap();
    let q2 = s.get(&next[next.find("/v1/").unwrap()..], V).await.json();
    assert_eq!(
        q2["deploy_templates"][0]["name"],
        "CUSTOM_HYPERTHREADING_ON"
    );
    assert_eq!(
        s.get("/v1/deploy_templates?sort_key=steps", V).await.status,
        400
    );
    // The design's spelling is an alias.
    let h = s.get("/v1/deploy-templates", V).await;
    assert_eq!(h.status, 200);
    assert_eq!(h.json()["deploy_templates"].as_array().unwrap().len(), 2);

    // PATCH: name, steps (whole and sub-paths), extra; then every refusal.
    let path = "/v1/deploy_templates/CUSTOM_RAID1";
    let r = patch(
        s,
        path,
        json!([{"op": "replace", "path": "/name", "value": "CUSTOM_RAID1_V2"}]),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let path = "/v1/deploy_templates/CUSTOM_RAID1_V2";
    let r = patch(
        s,
        path,
        json!([{"op": "add", "path": "/steps/-", "value": bios_step()}]),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["steps"].as_array().unwrap().len(), 3);
    let r = patch(
        s,
        path,
        json!([{"op": "replace", "path": "/steps/0/priority", "value": 210}]),
    )
    .await;
    assert_eq!(r.json()["steps"][0]["priority"], 210);
    assert!(r.json()["updated_at"].is_string());
    let r = patch(s, path, json!([{"op": "add", "path": "/extra/owner", "value": "ops"}, {"op": "remove", "path": "/extra/team"}])).await;
    assert_eq!(r.json()["extra"], json!({"owner": "ops"}));
    let refusals: Vec<(Value, u16, &str)> = vec![
        (
            json!([{"op": "replace", "path": "/name", "value": "lower"}]),
            400,
            "Schema error for patch: 'lower' is not valid under any of the given schemas. Possible root cause: 'lower' does not match '^CUSTOM_[A-Z0-9_]+$'",
        ),
        (
            json!([{"op": "replace", "path": "/name", "value": "CUSTOM_HYPERTHREADING_ON"}]),
            409,
            "A deploy template with name CUSTOM_HYPERTHREADING_ON already exists.",
        ),
        (
            json!([{"op": "replace", "path": "/steps", "value": []}]),
            400,
            "Schema error for patch: [] should be non-empty",
        ),
        (
            json!([{"op": "add", "path": "/steps/-", "value": bios_step()}]),
            400,
            "Deploy template invalid: Duplicate deploy steps. A template cannot have multiple deploy steps with the same interface and step. Duplicates: interface: bios, step: apply_configuration.",
        ),
        (
            json!([{"op": "replace", "path": "/uuid", "value": "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee"}]),
            400,
            "Cannot patch /uuid. Only the following can be updated: extra, name, steps, description",
        ),
        (
            json!([{"op": "remove", "path": "/name"}]),
            400,
            "Schema error for patch: 'name' is a required property",
        ),
    ];
    for (ops, code, msg) in refusals {
        let r = patch(s, path, ops.clone()).await;
        assert_eq!(r.status, code, "{ops}: {}", r.body);
        assert_eq!(r.fault(), msg, "{ops}");
    }
    assert_eq!(
        s.get(path, V).await.json()["steps"]
            .as_array()
            .unwrap()
            .len(),
        3,
        "refused patches changed nothing"
    );

    // DELETE by name and by uuid; then 404; the list is empty.
    assert_eq!(
        s.delete("/v1/deploy_templates/CUSTOM_RAID1_V2", V)
            .await
            .status,
        204
    );
    assert_eq!(
        s.delete(&format!("/v1/deploy-templates/{ht_uuid}"), V)
            .await
            .status,
        204
    );
    assert_eq!(
        s.delete(&format!("/v1/deploy_templates/{ht_uuid}"), V)
            .await
            .status,
        404
    );
    assert_eq!(
        s.get("/v1/deploy_templates", V).await.json(),
        json!({"deploy_templates": []})
    );
}

/// An available node with the given traits.
async fn available(s: &Server, name: &str, traits: &[&str]) {
    s.node(json!({"driver": "fake-hardware", "name": name}))
        .await;
    let r = s
        .put(
            &format!("/v1/nodes/{name}/traits"),
            V,
            Some(&json!({"traits": traits})),
        )
        .await;
    assert_eq!(r.status, 204, "{}", r.body);
    assert_eq!(s.provision_to(V, name, "manage").await.status, 202);
    s.wait_state(V, name, "manageable").await;
    assert_eq!(s.provision_to(V, name, "provide").await.status, 202);
    s.wait_state(V, name, "available").await;
}

async fn set_instance_traits(s: &Server, name: &str, traits: &[&str]) {
    let r = patch(
        s,
        &format!("/v1/nodes/{name}"),
        json!([{"op": "add", "path": "/instance_info/traits", "value": traits}]),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
}

/// The deploy steps a deploy ran, with their arguments, in order.
fn deploy_journal(n: &Value, since: usize) -> Vec<(String, Value)> {
    n["driver_internal_info"]["fake_journal"]
        .as_array()
        .unwrap()[since..]
        .iter()
        .filter(|e| e["event"] == "done")
        .map(|e| (e["step"].as_str().unwrap().to_string(), e["args"].clone()))
        .collect()
}

fn journal_len(n: &Value) -> usize {
    n["driver_internal_info"]["fake_journal"]
        .as_array()
        .map_or(0, Vec::len)
}

fn raid(level: &str) -> Value {
    json!({"logical_disks": [{"size_gb": "MAX", "raid_level": level, "is_root_volume": true}]})
}

async fn deploy_and_undeploy(s: &Server, name: &str) -> Vec<(String, Value)> {
    let before = journal_len(&s.get(&format!("/v1/nodes/{name}"), V).await.json());
    let r = s.provision_to(V, name, "active").await;
    assert_eq!(r.status, 202, "{}", r.body);
    let n = s.wait_state(V, name, "active").await;
    let ran = deploy_journal(&n, before);
    assert_eq!(s.provision_to(V, name, "deleted").await.status, 202);
    s.wait_state(V, name, "available").await;
    ran
}

async fn templates_select_the_deploy_steps(s: &Server) {
    let mk = |name: &str, steps: Value| {
        let body = json!({"name": name, "steps": steps});
        async move {
            let r = s.post("/v1/deploy_templates", V, &body).await;
            assert_eq!(r.status, 201, "{}", r.body);
        }
    };
    // The RAID mirror and stripe flavors of the design: same step, other arguments.
    mk("CUSTOM_RAID1", json!([{"interface": "raid", "step": "apply_configuration", "args": {"raid_config": raid("1")}, "priority": 150}])).await;
    mk("CUSTOM_RAID0", json!([{"interface": "raid", "step": "apply_configuration", "args": {"raid_config": raid("0"), "delete_existing": true}, "priority": 150}])).await;
    // A step after the core step, and one that disables the core step.
    mk(
        "CUSTOM_BIOS_LATE",
        json!([{"interface": "bios", "step": "factory_reset", "args": {}, "priority": 50}]),
    )
    .await;
    mk(
        "CUSTOM_NO_DEPLOY",
        json!([{"interface": "deploy", "step": "deploy", "args": {}, "priority": 0}]),
    )
    .await;
    mk(
        "CUSTOM_MISSING",
        json!([{"interface": "raid", "step": "teleport", "args": {}, "priority": 10}]),
    )
    .await;
    mk(
        "CUSTOM_CORE",
        json!([{"interface": "deploy", "step": "deploy", "args": {}, "priority": 120}]),
    )
    .await;

    available(
        s,
        "tn",
        &[
            "CUSTOM_RAID1",
            "CUSTOM_RAID0",
            "CUSTOM_BIOS_LATE",
            "CUSTOM_NO_DEPLOY",
            "CUSTOM_MISSING",
            "CUSTOM_CORE",
        ],
    )
    .await;

    // No instance traits: the driver's default, deploy.deploy alone.
    let ran = deploy_and_undeploy(s, "tn").await;
    assert_eq!(ran, [("deploy.deploy".to_string(), json!({}))]);

    // RAID1: the template step (priority 150) before deploy.deploy (100).
    set_instance_traits(s, "tn", &["CUSTOM_RAID1"]).await;
    let planned = s.get("/v1/nodes/tn/deployment/steps", V).await;
    assert_eq!(planned.status, 200, "{}", planned.body);
    assert_eq!(planned.json()["deploy_templates"], json!(["CUSTOM_RAID1"]));
    assert_eq!(planned.json()["steps"][0]["step"], "apply_configuration");
    let ran = deploy_and_undeploy(s, "tn").await;
    assert_eq!(
        ran,
        [
            (
                "raid.apply_configuration".to_string(),
                json!({"raid_config": raid("1")})
            ),
            ("deploy.deploy".to_string(), json!({})),
        ]
    );
    // RAID0: the same step with the stripe's arguments.
    set_instance_traits(s, "tn", &["CUSTOM_RAID0"]).await;
    let ran = deploy_and_undeploy(s, "tn").await;
    assert_eq!(
        ran[0],
        (
            "raid.apply_configuration".to_string(),
            json!({"raid_config": raid("0"), "delete_existing": true})
        )
    );
    // Both flavors: the step runs twice, once with each template's arguments; a lower
    // priority step runs after the core step.
    set_instance_traits(
        s,
        "tn",
        &["CUSTOM_RAID1", "CUSTOM_RAID0", "CUSTOM_BIOS_LATE"],
    )
    .await;
    let ran: Vec<String> = deploy_and_undeploy(s, "tn")
        .await
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(
        ran,
        [
            "raid.apply_configuration",
            "raid.apply_configuration",
            "deploy.deploy",
            "bios.factory_reset"
        ]
    );
    // The core step may be disabled.
    set_instance_traits(s, "tn", &["CUSTOM_RAID1", "CUSTOM_NO_DEPLOY"]).await;
    let ran: Vec<String> = deploy_and_undeploy(s, "tn")
        .await
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(ran, ["raid.apply_configuration"]);

    // A template naming a step the driver does not have: validation fails, the deploy
    // is refused (400) and the node stays available; the same for overriding the core
    // step and for an instance trait the node lacks.
    let refused: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["CUSTOM_MISSING"],
            "node does not support this deploy step",
        ),
        (
            vec!["CUSTOM_CORE"],
            "is a core step and cannot be overridden by user steps",
        ),
        (
            vec!["CUSTOM_GOLD"],
            "Cannot specify instance traits that are not also set on the node",
        ),
    ];
    for (traits, msg) in refused {
        set_instance_traits(s, "tn", &traits).await;
        let v = s.get("/v1/nodes/tn/validate", V).await.json();
        assert_eq!(v["deploy"]["result"], false, "{v}");
        assert!(v["deploy"]["reason"].as_str().unwrap().contains(msg), "{v}");
        let planned = s.get("/v1/nodes/tn/deployment/steps", V).await;
        assert_eq!(planned.status, 400);
        assert!(planned.fault().contains(msg), "{}", planned.fault());
        let r = s.provision_to(V, "tn", "active").await;
        assert_eq!(r.status, 400, "{}", r.body);
        assert!(
            r.fault()
                .starts_with("Failed to validate deploy or power info for node"),
            "{}",
            r.fault()
        );
        assert!(r.fault().contains(msg), "{}", r.fault());
        assert_eq!(
            s.get("/v1/nodes/tn", V).await.json()["provision_state"],
            "available"
        );
    }
    let v = s.get("/v1/nodes/tn/validate", V).await;
    assert_eq!(v.status, 200);
}

async fn retirement_rules(s: &Server) {
    s.node(json!({"driver": "fake-hardware", "name": "rn"}))
        .await;
    // Too new below 1.61.
    let r = s
        .patch(
            "/v1/nodes/rn",
            "1.60",
            &json!([{"op": "replace", "path": "/retired", "value": true}]),
        )
        .await;
    assert_eq!(r.status, 406);
    // Any state but available: enroll.
    let r = patch(s, "/v1/nodes/rn", json!([{"op": "replace", "path": "/retired", "value": true}, {"op": "replace", "path": "/retired_reason", "value": "end of life"}])).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["retired"], true);
    assert_eq!(r.json()["retired_reason"], "end of life");
    let names = |v: Value| -> Vec<String> {
        v["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["name"].as_str().unwrap().to_string())
            .collect()
    };
    s.node(json!({"driver": "fake-hardware", "name": "other"}))
        .await;
    assert_eq!(
        names(s.get("/v1/nodes?retired=true", V).await.json()),
        ["rn"]
    );
    assert_eq!(
        names(s.get("/v1/nodes?retired=false", V).await.json()),
        ["other"]
    );
    // A reason without retired.
    let r = patch(
        s,
        "/v1/nodes/other",
        json!([{"op": "replace", "path": "/retired_reason", "value": "x"}]),
    )
    .await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.fault(),
        "The retired_reason field can only be set when retired is True"
    );
    // Not while available (upstream: 409 InvalidState).
    assert_eq!(s.provision_to(V, "other", "manage").await.status, 202);
    s.wait_state(V, "other", "manageable").await;
    assert_eq!(s.provision_to(V, "other", "provide").await.status, 202);
    s.wait_state(V, "other", "available").await;
    let r = patch(
        s,
        "/v1/nodes/other",
        json!([{"op": "replace", "path": "/retired", "value": true}]),
    )
    .await;
    assert_eq!(r.status, 409);
    assert!(
        r.fault()
            .contains("can not have 'retired' set in provision state 'available'"),
        "{}",
        r.fault()
    );

    // A retired manageable node cannot be provided (upstream: 400 NodeIsRetired).
    assert_eq!(s.provision_to(V, "rn", "manage").await.status, 202);
    s.wait_state(V, "rn", "manageable").await;
    let r = s.provision_to(V, "rn", "provide").await;
    assert_eq!(r.status, 400);
    assert!(r.fault().contains("because it is retired"), "{}", r.fault());
    // Unretiring (here by removing the flag, as `node unset --retired` does) clears the
    // reason; then provide works. An explicit null is refused.
    let r = patch(
        s,
        "/v1/nodes/rn",
        json!([{"op": "replace", "path": "/retired", "value": null}]),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.body);
    let r = patch(
        s,
        "/v1/nodes/rn",
        json!([{"op": "remove", "path": "/retired"}]),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["retired"], false);
    assert_eq!(r.json()["retired_reason"], Value::Null);
    assert_eq!(s.provision_to(V, "rn", "provide").await.status, 202);
    s.wait_state(V, "rn", "available").await;

    // An active node retired and torn down ends in manageable, with automated cleaning
    // on and off.
    for auto in [true, false] {
        assert_eq!(s.provision_to(V, "rn", "active").await.status, 202);
        s.wait_state(V, "rn", "active").await;
        let r = patch(
            s,
            "/v1/nodes/rn",
            json!([
                {"op": "replace", "path": "/retired", "value": true},
                {"op": "replace", "path": "/automated_clean", "value": auto},
            ]),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(s.provision_to(V, "rn", "deleted").await.status, 202);
        let n = s.wait_state(V, "rn", "manageable").await;
        assert_eq!(n["retired"], true);
        // Manual cleaning of a retired node ends in manageable too.
        let r = s
            .put("/v1/nodes/rn/states/provision", V, Some(&json!({"target": "clean", "clean_steps": [{"interface": "raid", "step": "delete_configuration"}]})))
            .await;
        assert_eq!(r.status, 202, "{}", r.body);
        s.wait_state(V, "rn", "manageable").await;
        let r = patch(
            s,
            "/v1/nodes/rn",
            json!([{"op": "replace", "path": "/retired", "value": false}]),
        )
        .await;
        assert_eq!(r.status, 200);
        assert_eq!(s.provision_to(V, "rn", "provide").await.status, 202);
        s.wait_state(V, "rn", "available").await;
    }
}
