#![allow(clippy::unwrap_used)]
//! Provisioning over real HTTP: verbs, the state machine's checks, automated and manual
//! cleaning with fake-hardware's steps, abort. Each test runs on the all-in-one server
//! (SQLite and PostgreSQL) and on the split deployment (RabbitMQ).

mod common;

use std::time::{Duration, Instant};

use common::Server;
use serde_json::{Value, json};

on_every_deployment!(
    verbs_and_automated_cleaning,
    manual_cleaning,
    aborting_a_clean_step,
    unreadable_stored_steps_fail_the_cleaning,
    deploy_rebuild_and_tear_down,
    config_drive_arguments,
    power_and_validate,
    forbidden_verbs_are_refused_in_every_stable_state,
    driver_failures_end_in_the_failed_states,
);

const MAX: &str = "1.51";

async fn node(s: &Server, ident: &str) -> Value {
    let r = s.get(&format!("/v1/nodes/{ident}"), MAX).await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()
}

fn journal(n: &Value) -> Vec<(String, String)> {
    common::fake_journal(n)
}

fn steps(pairs: &[(&str, &str, &str, Value)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(i, st, ev, _)| (format!("{i}.{st}"), ev.to_string()))
        .collect()
}

async fn manageable(s: &Server, name: &str) -> Value {
    s.node(json!({"driver": "fake-hardware", "name": name}))
        .await;
    let r = s.provision(MAX, name, json!({"target": "manage"})).await;
    assert_eq!(r.status, 202, "{}", r.body);
    s.wait_state(MAX, name, "manageable").await
}

async fn verbs_and_automated_cleaning(s: &Server) {
    let n = s
        .node(json!({"driver": "fake-hardware", "name": "v1"}))
        .await;
    assert_eq!(n["provision_state"], "enroll");
    // The state machine refuses a verb that cannot start here, before any RPC; the
    // node is named by its uuid (upstream's, S128).
    let r = s.provision(MAX, "v1", json!({"target": "provide"})).await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.fault(),
        format!(
            "The requested action \"provide\" can not be performed on node \"{}\" while it is in state \"enroll\".",
            n["uuid"].as_str().unwrap()
        )
    );
    let r = s.provision(MAX, "v1", json!({"target": "fly"})).await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.fault(),
        "The requested action \"fly\" could not be understood."
    );
    let r = s
        .put(
            "/v1/nodes/v1/states/provision",
            "1.3",
            Some(&json!({"target": "manage"})),
        )
        .await;
    assert_eq!(r.status, 406, "manage needs 1.4");
    let r = s
        .provision(MAX, "v1", json!({"target": "manage", "bogus": 1}))
        .await;
    assert_eq!(r.status, 400);

    // manage: enroll → verifying → manageable; the fake power state is read.
    let r = s.provision(MAX, "v1", json!({"target": "manage"})).await;
    assert_eq!(r.status, 202, "{}", r.body);
    assert!(
        r.header("location")
            .unwrap()
            .ends_with("/v1/nodes/v1/states")
    );
    assert_eq!(r.body, "");
    let n = s.wait_state(MAX, "v1", "manageable").await;
    assert_eq!(n["target_provision_state"], Value::Null);
    assert_eq!(n["power_state"], "power off");
    assert!(n["provision_updated_at"].is_string());

    // provide: automated cleaning runs the steps with a priority, then available.
    let r = s.provision(MAX, "v1", json!({"target": "provide"})).await;
    assert_eq!(r.status, 202, "{}", r.body);
    let n = s.wait_state(MAX, "v1", "available").await;
    assert_eq!(n["target_provision_state"], Value::Null);
    assert_eq!(n["last_error"], Value::Null);
    assert_eq!(n["clean_step"], json!({}));
    assert_eq!(
        journal(&n),
        [("vendor.log_passthrough".to_string(), "done".to_string())]
    );
    // available → manageable is immediate.
    let r = s.provision(MAX, "v1", json!({"target": "manage"})).await;
    assert_eq!(r.status, 202);
    assert_eq!(node(s, "v1").await["provision_state"], "manageable");

    // With automated_clean off, provide runs no step.
    let r = s
        .patch(
            "/v1/nodes/v1",
            MAX,
            &json!([{"op": "replace", "path": "/automated_clean", "value": false}]),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        s.provision(MAX, "v1", json!({"target": "provide"}))
            .await
            .status,
        202
    );
    let n = s.wait_state(MAX, "v1", "available").await;
    assert_eq!(journal(&n).len(), 1, "no new step ran");

    // A node in maintenance cannot be provided.
    manageable(s, "v2").await;
    let r = s.put("/v1/nodes/v2/maintenance", MAX, None).await;
    assert_eq!(r.status, 202);
    let r = s.provision(MAX, "v2", json!({"target": "provide"})).await;
    assert_eq!(r.status, 400);
    assert!(r.fault().contains("maintenance mode"), "{}", r.fault());
    assert_eq!(node(s, "v2").await["provision_state"], "manageable");

    // inspect (fake: done at once) and adopt (manageable → active without deploying).
    manageable(s, "v3").await;
    assert_eq!(
        s.provision(MAX, "v3", json!({"target": "inspect"}))
            .await
            .status,
        202
    );
    s.wait_state(MAX, "v3", "manageable").await;
    let r = s
        .put(
            "/v1/nodes/v3/states/provision",
            "1.16",
            Some(&json!({"target": "adopt"})),
        )
        .await;
    assert_eq!(r.status, 406, "adopt needs 1.17");
    assert_eq!(
        s.provision(MAX, "v3", json!({"target": "adopt"}))
            .await
            .status,
        202
    );
    let n = s.wait_state(MAX, "v3", "active").await;
    assert_eq!(n["target_provision_state"], Value::Null);
}

async fn manual_cleaning(s: &Server) {
    let n = manageable(s, "m1").await;
    let uuid = n["uuid"].as_str().unwrap().to_string();
    // Request checks.
    let r = s.provision(MAX, "m1", json!({"target": "clean"})).await;
    assert_eq!(r.status, 400);
    assert!(
        r.fault().contains("\"clean_steps\" is required"),
        "{}",
        r.fault()
    );
    let r = s
        .put(
            "/v1/nodes/m1/states/provision",
            "1.14",
            Some(&json!({"target": "clean", "clean_steps": []})),
        )
        .await;
    assert_eq!(r.status, 406, "manual cleaning needs 1.15");
    let r = s
        .provision(
            MAX,
            "m1",
            json!({"target": "clean", "clean_steps": [{"interface": "network", "step": "x"}]}),
        )
        .await;
    assert_eq!(r.status, 400);

    // Valid steps run in the order given.
    let wanted = [
        (
            "bios",
            "apply_configuration",
            "done",
            json!({"settings": [{"name": "a", "value": 1}]}),
        ),
        ("vendor", "log_passthrough", "done", json!({})),
        (
            "firmware",
            "update",
            "done",
            json!({"settings": [{"name": "fw"}]}),
        ),
    ];
    let body: Vec<Value> = wanted
        .iter()
        .map(|(i, st, _, a)| json!({"interface": i, "step": st, "args": a}))
        .collect();
    let r = s
        .provision(MAX, "m1", json!({"target": "clean", "clean_steps": body}))
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let n = s.wait_state(MAX, "m1", "manageable").await;
    assert_eq!(journal(&n), steps(&wanted));
    assert_eq!(n["last_error"], Value::Null);
    assert_eq!(n["target_provision_state"], Value::Null);
    let ran = journal(&n).len();

    // A missing required argument: nothing runs, clean failed with every problem named.
    let r = s
        .provision(
            MAX,
            "m1",
            json!({"target": "clean", "clean_steps": [
                {"interface": "bios", "step": "factory_reset"},
                {"interface": "bios", "step": "apply_configuration", "args": {}}
            ]}),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let n = s.wait_state(MAX, "m1", "clean failed").await;
    assert_eq!(
        n["last_error"],
        format!(
            "Cannot clean node {uuid}: clean step {{'interface': 'bios', 'step': 'apply_configuration', 'args': {{}}}} is missing these required arguments: settings (A list of settings to apply.)"
        )
    );
    assert_eq!(journal(&n).len(), ran, "no step ran");
    assert_eq!(n["maintenance"], false);
    assert_eq!(n["target_provision_state"], "manageable");
    // clean failed has one way out.
    let r = s.provision(MAX, "m1", json!({"target": "provide"})).await;
    assert_eq!(r.status, 400);
    assert_eq!(
        s.provision(MAX, "m1", json!({"target": "manage"}))
            .await
            .status,
        202
    );
    s.wait_state(MAX, "m1", "manageable").await;

    // Step 2 rejects its arguments: step 1 stays done, the node fails into maintenance.
    let r = s
        .provision(
            MAX,
            "m1",
            json!({"target": "clean", "clean_steps": [
                {"interface": "vendor", "step": "log_passthrough"},
                {"interface": "bios", "step": "apply_configuration", "args": {"settings": "nope"}},
                {"interface": "bios", "step": "factory_reset"}
            ]}),
        )
        .await;
    assert_eq!(r.status, 202);
    let n = s.wait_state(MAX, "m1", "clean failed").await;
    let j = journal(&n);
    assert_eq!(
        j[ran..],
        [
            ("vendor.log_passthrough".to_string(), "done".to_string()),
            ("bios.apply_configuration".to_string(), "failed".to_string())
        ]
    );
    let err = n["last_error"].as_str().unwrap();
    assert!(
        err.starts_with(&format!(
            "Node {uuid} failed step bios.apply_configuration: "
        )),
        "{err}"
    );
    assert_eq!(n["maintenance"], true);
    assert_eq!(n["fault"], "clean failure");
    // In maintenance, cleaning is refused until it is turned off.
    s.provision(MAX, "m1", json!({"target": "manage"})).await;
    s.wait_state(MAX, "m1", "manageable").await;
    let again = json!({"target": "clean", "clean_steps": [{"interface": "vendor", "step": "log_passthrough"}]});
    assert_eq!(s.provision(MAX, "m1", again.clone()).await.status, 400);
    assert_eq!(s.delete("/v1/nodes/m1/maintenance", MAX).await.status, 202);
    assert_eq!(s.provision(MAX, "m1", again).await.status, 202);
    s.wait_state(MAX, "m1", "manageable").await;
}

async fn aborting_a_clean_step(s: &Server) {
    manageable(s, "a1").await;
    // An abortable step: the node waits in `clean wait`; abort fails the cleaning.
    let r = s.provision(MAX, "a1",
        json!({"target": "clean", "clean_steps": [{"interface": "deploy", "step": "sleep", "args": {"seconds": 1.5}}]}),
    )
    .await;
    assert_eq!(r.status, 202);
    let first_wait = Instant::now();
    let n = s.wait_state(MAX, "a1", "clean wait").await;
    assert_eq!(n["clean_step"]["step"], "sleep");
    assert_eq!(n["target_provision_state"], "manageable");
    let r = s.provision(MAX, "a1", json!({"target": "abort"})).await;
    assert_eq!(r.status, 202, "{}", r.body);
    let n = node(s, "a1").await;
    assert_eq!(n["provision_state"], "clean failed");
    assert_eq!(
        n["last_error"],
        "By request, the clean operation was aborted during or after the completion of step \"deploy.sleep\""
    );
    assert_eq!(n["maintenance"], false);
    assert_eq!(n["clean_step"], json!({}));

    // The aborted step's timer must not drive a later cleaning that waits at the same
    // step index: start one, let the old timer fire, and the node is still waiting.
    s.provision(MAX, "a1", json!({"target": "manage"})).await;
    s.wait_state(MAX, "a1", "manageable").await;
    let r = s.provision(MAX, "a1",
        json!({"target": "clean", "clean_steps": [{"interface": "deploy", "step": "sleep", "args": {"seconds": 60}}]}),
    )
    .await;
    assert_eq!(r.status, 202);
    s.wait_state(MAX, "a1", "clean wait").await;
    while first_wait.elapsed() < Duration::from_millis(2500) {
        assert_eq!(node(s, "a1").await["provision_state"], "clean wait");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(node(s, "a1").await["provision_state"], "clean wait");
    assert_eq!(
        s.provision(MAX, "a1", json!({"target": "abort"}))
            .await
            .status,
        202
    );
    s.wait_state(MAX, "a1", "clean failed").await;

    // A step that cannot be aborted: refused; the cleaning goes on and finishes.
    s.provision(MAX, "a1", json!({"target": "manage"})).await;
    s.wait_state(MAX, "a1", "manageable").await;
    let r = s.provision(MAX, "a1",
        json!({"target": "clean", "clean_steps": [{"interface": "deploy", "step": "burn_in", "args": {"seconds": 1.5}}]}),
    )
    .await;
    assert_eq!(r.status, 202);
    s.wait_state(MAX, "a1", "clean wait").await;
    let r = s.provision(MAX, "a1", json!({"target": "abort"})).await;
    assert_eq!(r.status, 409, "{}", r.body);
    assert!(r.fault().contains("cannot be aborted"), "{}", r.fault());
    let n = s.wait_state(MAX, "a1", "manageable").await;
    assert_eq!(n["last_error"], Value::Null);
    // Nothing to abort in a stable state.
    assert_eq!(
        s.provision(MAX, "a1", json!({"target": "abort"}))
            .await
            .status,
        400
    );
}

/// A clean step list in `driver_internal_info` that cannot be read back (here: damaged
/// in the database while the node waits on its first step) fails the cleaning with a
/// message naming the bad step; nothing is skipped silently.
async fn unreadable_stored_steps_fail_the_cleaning(s: &Server) {
    manageable(s, "u1").await;
    let r = s
        .provision(
            MAX,
            "u1",
            json!({"target": "clean", "clean_steps": [
                {"interface": "deploy", "step": "sleep", "args": {"seconds": 2}},
                {"interface": "vendor", "step": "log_passthrough"}]}),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    s.wait_state(MAX, "u1", "clean wait").await;
    let db = &s.testdb.as_ref().unwrap().db;
    let uuid = node(s, "u1").await["uuid"].as_str().unwrap().to_string();
    let id = db.node_by_uuid(&uuid).await.unwrap().unwrap().id;
    // Under the node lock, as any writer: the step's timer waits for it.
    let mut n = db.node_reserve(id, "tester").await.unwrap();
    n.driver_internal_info["clean_steps"][1]["interface"] = json!(5);
    n.reservation = None;
    db.node_save(&n, "tester").await.unwrap();
    let n = s.wait_state(MAX, "u1", "clean failed").await;
    assert_eq!(
        n["last_error"],
        format!(
            "Cannot continue cleaning node {uuid}: its stored clean steps cannot be read (step 1: \"interface\" is missing or not a string)."
        )
    );
}

async fn deploy_rebuild_and_tear_down(s: &Server) {
    manageable(s, "d1").await;
    assert_eq!(
        s.provision(MAX, "d1", json!({"target": "provide"}))
            .await
            .status,
        202
    );
    s.wait_state(MAX, "d1", "available").await;
    // A config drive only goes with a deploy.
    let r = s
        .provision(MAX, "d1", json!({"target": "manage", "configdrive": "abc"}))
        .await;
    assert_eq!(r.status, 400);
    let r = s
        .provision(MAX, "d1", json!({"target": "active", "configdrive": 7}))
        .await;
    assert_eq!(r.status, 400);
    let r = s
        .provision(
            MAX,
            "d1",
            json!({"target": "active", "rescue_password": "x"}),
        )
        .await;
    assert_eq!(r.status, 400);

    let r = s
        .provision(MAX, "d1", json!({"target": "active", "configdrive": "abc"}))
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let n = s.wait_state(MAX, "d1", "active").await;
    assert_eq!(n["target_provision_state"], Value::Null);
    assert_eq!(n["deploy_step"], json!({}));
    assert_eq!(n["power_state"], "power on");
    assert_eq!(
        n["instance_info"]["configdrive"], "******",
        "stored, and masked as upstream does"
    );
    assert_eq!(
        journal(&n).last().unwrap(),
        &("deploy.deploy".to_string(), "done".to_string())
    );
    // Deploying twice is refused by the state machine; rebuild is the way.
    assert_eq!(
        s.provision(MAX, "d1", json!({"target": "active"}))
            .await
            .status,
        400
    );
    assert_eq!(
        s.provision(MAX, "d1", json!({"target": "rebuild"}))
            .await
            .status,
        202
    );
    let n = s.wait_state(MAX, "d1", "active").await;
    let deploys = journal(&n)
        .iter()
        .filter(|(st, _)| st == "deploy.deploy")
        .count();
    assert_eq!(deploys, 2);
    assert_eq!(
        n["instance_info"].get("configdrive"),
        None,
        "a rebuild without one drops it"
    );

    // A protected node is neither rebuilt nor torn down.
    let protect = |on: bool| json!([{"op": "replace", "path": "/protected", "value": on}]);
    assert_eq!(
        s.patch("/v1/nodes/d1", MAX, &protect(true)).await.status,
        200
    );
    for verb in ["rebuild", "deleted"] {
        let r = s.provision(MAX, "d1", json!({"target": verb})).await;
        assert_eq!(r.status, 403, "{verb}: {}", r.body);
        assert!(r.fault().contains("is protected"), "{}", r.fault());
    }
    assert_eq!(
        s.patch("/v1/nodes/d1", MAX, &protect(false)).await.status,
        200
    );
    // Rescue is not served yet.
    let r = s.provision(MAX, "d1", json!({"target": "rescue"})).await;
    assert_eq!(r.status, 400);

    // Tear-down: powered off, instance data gone, cleaned, available again.
    let r = s.provision(MAX, "d1", json!({"target": "deleted"})).await;
    assert_eq!(r.status, 202, "{}", r.body);
    let n = s.wait_state(MAX, "d1", "available").await;
    assert_eq!(n["power_state"], "power off");
    assert_eq!(n["instance_info"], json!({}));
    assert_eq!(
        journal(&n).last().unwrap(),
        &("vendor.log_passthrough".to_string(), "done".to_string()),
        "automated cleaning ran after the tear-down"
    );
    // In maintenance, no deploy.
    assert_eq!(
        s.put("/v1/nodes/d1/maintenance", MAX, None).await.status,
        202
    );
    let r = s.provision(MAX, "d1", json!({"target": "active"})).await;
    assert_eq!(r.status, 400);
    assert!(r.fault().contains("maintenance mode"), "{}", r.fault());
}

/// An available node by `name`.
async fn available(s: &Server, name: &str) {
    manageable(s, name).await;
    let r = s.provision(MAX, name, json!({"target": "provide"})).await;
    assert_eq!(r.status, 202, "{}", r.body);
    s.wait_state(MAX, name, "available").await;
}

/// `configdrive` is checked as upstream's API checks it (`check_allow_configdrive`):
/// the JSON object from 1.56, `vendor_data` from 1.59, upstream's schema, only with
/// `active` or `rebuild`; the object is stored as given, for the conductor to build.
async fn config_drive_arguments(s: &Server) {
    available(s, "cd1").await;
    let drive = json!({
        "meta_data": {"hostname": "cd1.example.com"},
        "network_data": {"links": [], "networks": [], "services": []},
        "user_data": {"ignition": {"version": "3.4.0"}},
        "vendor_data": {"v": 1},
    });
    for (v, body, says) in [
        (
            "1.55",
            json!({"target": "active", "configdrive": {"meta_data": {}}}),
            "Providing a JSON object for configdrive is only supported starting with API version 1.56",
        ),
        (
            "1.58",
            json!({"target": "active", "configdrive": drive}),
            "Providing vendor_data in configdrive is only supported starting with API version 1.59",
        ),
        (
            "1.59",
            json!({"target": "active", "configdrive": {"meta_data": {}, "foo": 1}}),
            "Invalid configdrive format: unexpected member 'foo': the object takes only meta_data, network_data, user_data and vendor_data",
        ),
        (
            "1.59",
            json!({"target": "active", "configdrive": {"meta_data": "x"}}),
            "Invalid configdrive format: meta_data must be an object, not a string",
        ),
        (
            "1.59",
            json!({"target": "active", "configdrive": {"user_data": 5}}),
            "Invalid configdrive format: user_data must be an object, a list, a string or null, not a number",
        ),
        (
            "1.59",
            json!({"target": "active", "configdrive": "{\"meta_data\": "}),
            "Invalid configdrive format: it is neither a JSON, nor a URL, nor a base64 string",
        ),
        (
            "1.73",
            json!({"target": "deploy", "configdrive": "abc"}),
            "Adding a config drive is only supported when setting provision state to active, rebuild",
        ),
        (
            "1.34",
            json!({"target": "active", "configdrive": ["aabb"]}),
            "Expected types <class 'NoneType'>, <class 'dict'>, <class 'str'> for configdrive: ['aabb']",
        ),
    ] {
        let r = s.provision(v, "cd1", body.clone()).await;
        assert_eq!(r.status, 400, "{v} {body}: {}", r.body);
        assert_eq!(r.fault(), says, "{v} {body}");
    }
    assert_eq!(node(s, "cd1").await["provision_state"], "available");

    let r = s
        .provision(
            "1.59",
            "cd1",
            json!({"target": "active", "configdrive": drive}),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let n = s.wait_state(MAX, "cd1", "active").await;
    assert_eq!(n["instance_info"]["configdrive"], "******");
    let db = &s.testdb.as_ref().unwrap().db;
    let uuid = n["uuid"].as_str().unwrap();
    let stored = db.node_by_uuid(uuid).await.unwrap().unwrap();
    assert_eq!(
        stored.instance_info.get("configdrive"),
        Some(&drive),
        "the object is kept as given, for the conductor to build"
    );
    // An empty one is none: neither checked nor stored (upstream's falsy values).
    let r = s
        .provision(
            "1.59",
            "cd1",
            json!({"target": "rebuild", "configdrive": ""}),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let n = s.wait_state(MAX, "cd1", "active").await;
    assert_eq!(n["instance_info"].get("configdrive"), None);
}

/// Base64 text over `[deploy] configdrive_max_bytes` once decoded is refused at once; the
/// provision body has a limit of its own (`[api] provision_max_body_bytes`), larger than
/// other bodies'.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_drive_size_limit() {
    let s = common::start_with(common::Backend::Sqlite, |c| {
        c.deploy.configdrive_max_bytes = 1000;
        c.api.max_request_body_bytes = 1000;
        c.api.provision_max_body_bytes = 4000;
    })
    .await;
    available(&s, "cd2").await;
    let r = s
        .provision(
            MAX,
            "cd2",
            json!({"target": "active", "configdrive": "A".repeat(4000)}),
        )
        .await;
    assert_eq!(r.status, 413, "{}", r.body);
    assert_eq!(
        r.fault(),
        "Request body is larger than the limit of 4000 bytes."
    );
    // 1336 base64 digits are 1002 bytes.
    let r = s
        .provision(
            MAX,
            "cd2",
            json!({"target": "active", "configdrive": "A".repeat(1336)}),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(
        r.fault(),
        "The configdrive is 1002 bytes once decoded, over the limit of 1000 bytes ([deploy] configdrive_max_bytes; the agent writes at most 64 MiB): make it smaller"
    );
    // A URL is the agent's to fetch: no size to check here.
    let url = format!("https://example.com/{}", "a".repeat(2000));
    let r = s
        .provision(MAX, "cd2", json!({"target": "active", "configdrive": url}))
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    s.wait_state(MAX, "cd2", "active").await;
    s.stop().await;
}

async fn power_and_validate(s: &Server) {
    s.node(json!({"driver": "fake-hardware", "name": "p1"}))
        .await;
    let power = |body: Value, v: &'static str| {
        let addr = s.addr;
        async move {
            Server::client(addr)
                .put("/v1/nodes/p1/states/power", v, Some(&body))
                .await
        }
    };
    let r = power(json!({"target": "power off"}), MAX).await;
    assert_eq!(r.status, 202, "{}", r.body);
    assert!(
        r.header("location")
            .unwrap()
            .ends_with("/v1/nodes/p1/states")
    );
    let st = s.get("/v1/nodes/p1/states", MAX).await.json();
    assert_eq!(st["power_state"], "power off");
    assert_eq!(st["target_power_state"], Value::Null);
    for (target, after) in [
        ("power on", "power on"),
        ("rebooting", "power on"),
        ("soft power off", "power off"),
    ] {
        let r = power(json!({"target": target, "timeout": 10}), MAX).await;
        assert_eq!(r.status, 202, "{target}: {}", r.body);
        assert_eq!(node(s, "p1").await["power_state"], after, "{target}");
    }
    // Upstream's errors, word for word.
    let r = power(json!({"target": "explode"}), MAX).await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.fault(),
        "The requested action \"explode\" can not be performed on node \"p1\" while it is in state \"power off\"."
    );
    let r = power(json!({"target": "power off", "timeout": 0}), MAX).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.fault(), "timeout has to be positive integer");
    let r = power(json!({}), MAX).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.fault(), "Missing mandatory parameter: target");
    assert_eq!(
        power(json!({"target": "soft power off"}), "1.26")
            .await
            .status,
        406
    );

    // validate: every interface but vendor, core ones first.
    let r = s.get("/v1/nodes/p1/validate", MAX).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "boot",
            "deploy",
            "management",
            "network",
            "power",
            "bios",
            "console",
            "firmware",
            "inspect",
            "raid",
            "rescue",
            "storage"
        ]
    );
    assert!(
        v.as_object()
            .unwrap()
            .values()
            .all(|e| e == &json!({"result": true}))
    );
    let r = s
        .patch(
            "/v1/nodes/p1",
            MAX,
            &json!([{"op": "replace", "path": "/bios_interface", "value": "no-bios"}]),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let v = s.get("/v1/nodes/p1/validate", MAX).await.json();
    assert_eq!(
        v["bios"],
        json!({"result": null, "reason": "not supported"})
    );
    assert_eq!(s.get("/v1/nodes/nope/validate", MAX).await.status, 404);
}

async fn cleaning_steps_listing(backend: common::Backend) {
    let s = common::start_with(backend, |c| {
        c.default.enabled_hardware_types = vec!["fake-hardware".into(), "fake-agent".into()];
    })
    .await;
    s.node(json!({"driver": "fake-hardware", "name": "l1"}))
        .await;
    let r = s.get("/v1/nodes/l1/cleaning/steps", MAX).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let steps = r.json()["steps"].as_array().unwrap().clone();
    assert_eq!(steps.len(), 9);
    assert_eq!(
        steps[0],
        json!({"interface": "vendor", "step": "log_passthrough", "priority": 1, "abortable": false, "args": {}})
    );
    let bios = steps
        .iter()
        .find(|s| s["step"] == "apply_configuration")
        .unwrap();
    assert_eq!(
        bios["args"],
        json!({"settings": {"description": "A list of settings to apply.", "required": true}})
    );
    assert!(
        steps
            .iter()
            .any(|s| s["step"] == "sleep" && s["abortable"] == true)
    );
    let r = s
        .get("/v1/nodes/l1/cleaning/steps?min_priority=1", MAX)
        .await;
    assert_eq!(r.json()["steps"].as_array().unwrap().len(), 1);
    assert_eq!(
        s.get("/v1/nodes/l1/cleaning/steps?min_priority=-1", MAX)
            .await
            .status,
        400
    );
    assert_eq!(
        s.get("/v1/nodes/l1/cleaning/steps?bogus=1", MAX)
            .await
            .status,
        400
    );
    assert_eq!(
        s.get("/v1/nodes/l1/cleaning/steps", "1.14").await.status,
        406
    );

    // A driver that learns its steps from the node's agent: "not yet, retry", then 200.
    s.node(json!({"driver": "fake-agent", "name": "l2"})).await;
    let r = s.get("/v1/nodes/l2/cleaning/steps", MAX).await;
    assert_eq!(r.status, 202, "{}", r.body);
    assert_eq!(r.header("retry-request-after"), Some("2"));
    assert!(
        r.json()["message"]
            .as_str()
            .unwrap()
            .contains("not known yet"),
        "{}",
        r.body
    );
    let start = Instant::now();
    let listed = loop {
        let r = s.get("/v1/nodes/l2/cleaning/steps", MAX).await;
        if r.status == 200 {
            break r.json();
        }
        assert_eq!(r.status, 202);
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the agent never reported"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(listed["steps"].as_array().unwrap().len(), 9);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleaning_steps_sqlite() {
    cleaning_steps_listing(common::Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleaning_steps_postgres() {
    cleaning_steps_listing(common::Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleaning_steps_split() {
    cleaning_steps_listing(common::Backend::Split).await;
}

/// Every verb the state machine forbids in a stable state is refused with 400 and
/// upstream's message, before any work starts (the node does not move).
async fn forbidden_verbs_are_refused_in_every_stable_state(s: &Server) {
    use ironic_model::fsm;
    use ironic_model::states::ProvisionState;
    // One node in each stable state the fake driver reaches.
    s.node(json!({"driver": "fake-hardware", "name": "f-enroll"}))
        .await;
    manageable(s, "f-manageable").await;
    manageable(s, "f-available").await;
    assert_eq!(
        s.provision(MAX, "f-available", json!({"target": "provide"}))
            .await
            .status,
        202
    );
    s.wait_state(MAX, "f-available", "available").await;
    manageable(s, "f-active").await;
    assert_eq!(
        s.provision(MAX, "f-active", json!({"target": "adopt"}))
            .await
            .status,
        202
    );
    s.wait_state(MAX, "f-active", "active").await;
    let mut refused = 0;
    for (name, state) in [
        ("f-enroll", ProvisionState::Enroll),
        ("f-manageable", ProvisionState::Manageable),
        ("f-available", ProvisionState::Available),
        ("f-active", ProvisionState::Active),
    ] {
        for verb in fsm::VERBS.iter().filter(|v| v.min_minor <= 51) {
            if fsm::next(state, verb.event).is_some() {
                continue;
            }
            let mut body = json!({"target": verb.name});
            if verb.name == "clean" {
                body["clean_steps"] = json!([]);
            }
            let r = s.provision(MAX, name, body).await;
            assert_eq!(r.status, 400, "{} from {state}: {}", verb.name, r.body);
            let uuid = node(s, name).await["uuid"].as_str().unwrap().to_string();
            assert_eq!(
                r.fault(),
                format!(
                    "The requested action \"{}\" can not be performed on node \"{uuid}\" while it is in state \"{state}\".",
                    verb.name
                )
            );
            assert_eq!(node(s, name).await["provision_state"], state.as_str());
            refused += 1;
        }
    }
    assert!(refused >= 30, "a broad sample: {refused}");
}

/// Sets `driver_info.fake_fail`: the fake driver's calls that fail.
async fn fail_in(s: &Server, ident: &str, calls: Value) {
    let r = s
        .patch(
            &format!("/v1/nodes/{ident}"),
            MAX,
            &json!([{"op": "add", "path": "/driver_info/fake_fail", "value": calls}]),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
}

/// Each call of the deploy interface that fails takes the node to the failed state of
/// its operation with the driver's reason, unlocked, and the node recovers once the
/// driver works again.
async fn driver_failures_end_in_the_failed_states(s: &Server) {
    // prepare_cleaning fails: clean failed, no step ran, no maintenance (no step was
    // running).
    manageable(s, "f1").await;
    fail_in(s, "f1", json!(["deploy.prepare_cleaning"])).await;
    assert_eq!(
        s.provision(MAX, "f1", json!({"target": "provide"}))
            .await
            .status,
        202
    );
    let n = s.wait_state(MAX, "f1", "clean failed").await;
    assert_eq!(n["target_provision_state"], "available");
    let err = n["last_error"].as_str().unwrap();
    assert!(
        err.starts_with("Failed to prepare node") && err.contains("deploy.prepare_cleaning"),
        "{err}"
    );
    assert!(journal(&n).is_empty(), "no step ran: {n}");
    assert_eq!(n["maintenance"], false);
    assert_eq!(n["reservation"], Value::Null);

    // tear_down_cleaning fails after the steps ran: clean failed, with the reason.
    fail_in(s, "f1", json!(["deploy.tear_down_cleaning"])).await;
    assert_eq!(
        s.provision(MAX, "f1", json!({"target": "manage"}))
            .await
            .status,
        202
    );
    s.wait_state(MAX, "f1", "manageable").await;
    assert_eq!(
        s.provision(MAX, "f1", json!({"target": "provide"}))
            .await
            .status,
        202
    );
    let n = s.wait_state(MAX, "f1", "clean failed").await;
    assert!(
        n["last_error"]
            .as_str()
            .unwrap()
            .starts_with("Failed to tear down from cleaning"),
        "{n}"
    );
    assert_eq!(
        journal(&n),
        [("vendor.log_passthrough".to_string(), "done".to_string())]
    );

    // Validation before manual cleaning or a deploy: 400 at once, the node unchanged.
    fail_in(s, "f1", json!(["power.validate"])).await;
    assert_eq!(
        s.provision(MAX, "f1", json!({"target": "manage"}))
            .await
            .status,
        202
    );
    s.wait_state(MAX, "f1", "manageable").await;
    let r = s.provision(MAX, "f1",
        json!({"target": "clean", "clean_steps": [{"interface": "raid", "step": "delete_configuration"}]}),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.fault().contains("power.validate"), "{}", r.fault());
    assert_eq!(node(s, "f1").await["provision_state"], "manageable");

    // Once the driver works, the node is provided.
    fail_in(s, "f1", json!([])).await;
    assert_eq!(
        s.provision(MAX, "f1", json!({"target": "provide"}))
            .await
            .status,
        202
    );
    s.wait_state(MAX, "f1", "available").await;

    // A failed core deploy step: deploy failed with the step's reason; a deploy that
    // fails to prepare: the same; after the fix, deploying again works.
    fail_in(s, "f1", json!(["deploy.deploy"])).await;
    assert_eq!(
        s.provision(MAX, "f1", json!({"target": "active"}))
            .await
            .status,
        202
    );
    let n = s.wait_state(MAX, "f1", "deploy failed").await;
    assert_eq!(n["target_provision_state"], "active");
    let err = n["last_error"].as_str().unwrap();
    assert!(err.starts_with("Deploy step deploy.deploy failed"), "{err}");
    assert_eq!(n["deploy_step"], json!({}));
    assert_eq!(n["reservation"], Value::Null);
    fail_in(s, "f1", json!(["deploy.prepare"])).await;
    assert_eq!(
        s.provision(MAX, "f1", json!({"target": "active"}))
            .await
            .status,
        202
    );
    let n = s.wait_state(MAX, "f1", "deploy failed").await;
    assert!(
        n["last_error"]
            .as_str()
            .unwrap()
            .starts_with("Failed to prepare to deploy"),
        "{n}"
    );
    fail_in(s, "f1", json!(["power.validate"])).await;
    let r = s.provision(MAX, "f1", json!({"target": "active"})).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.fault().contains("deploy or power info"), "{}", r.fault());
    fail_in(s, "f1", json!([])).await;
    assert_eq!(
        s.provision(MAX, "f1", json!({"target": "active"}))
            .await
            .status,
        202
    );
    let n = s.wait_state(MAX, "f1", "active").await;
    assert_eq!(n["last_error"], Value::Null);
    assert_eq!(n["power_state"], "power on");

    // tear_down fails: error, with the reason; undeploying again from error works and
    // the driver powers the node off.
    fail_in(s, "f1", json!(["deploy.tear_down"])).await;
    assert_eq!(
        s.provision(MAX, "f1", json!({"target": "deleted"}))
            .await
            .status,
        202
    );
    let n = s.wait_state(MAX, "f1", "error").await;
    assert!(
        n["last_error"]
            .as_str()
            .unwrap()
            .starts_with("Failed to tear down node"),
        "{n}"
    );
    assert_eq!(n["reservation"], Value::Null);
    fail_in(s, "f1", json!([])).await;
    assert_eq!(
        s.provision(MAX, "f1", json!({"target": "deleted"}))
            .await
            .status,
        202
    );
    let n = s.wait_state(MAX, "f1", "available").await;
    assert_eq!(n["power_state"], "power off");
    assert_eq!(n["instance_info"], json!({}));
}
