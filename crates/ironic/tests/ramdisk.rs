#![allow(clippy::unwrap_used)]
//! The ramdisk agent's lookup and heartbeat (1.22, the token of 1.62) against a node
//! waiting in `clean wait`, on all three deployments, and the `[api]` switches.

mod common;

use common::Server;
use serde_json::{Value, json};

const V: &str = "1.62";
const MAC: &str = "52:54:00:12:34:56";

/// A node with a port, waiting in `clean wait` (a long abortable clean step).
async fn waiting_node(s: &Server, name: &str, mac: &str) -> String {
    let n = s
        .node(json!({"driver": "fake-hardware", "name": name}))
        .await;
    let uuid = n["uuid"].as_str().unwrap().to_string();
    let r = s
        .post("/v1/ports", V, &json!({"node_uuid": uuid, "address": mac}))
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(s.provision_to(V, name, "manage").await.status, 202);
    s.wait_state(V, name, "manageable").await;
    let r = s
        .provision(
            V,
            name,
            json!({"target": "clean", "clean_steps": [
                {"interface": "deploy", "step": "sleep", "args": {"seconds": 600}}]}),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    s.wait_state(V, name, "clean wait").await;
    uuid
}

fn dii(n: &Value) -> &serde_json::Map<String, Value> {
    n["driver_internal_info"].as_object().unwrap()
}

async fn lookup_and_heartbeat(s: &Server) {
    // Input checks, and a node in a state that takes no ramdisk.
    let enrolled = s
        .node(json!({"driver": "fake-hardware", "name": "enrolled"}))
        .await;
    let r = s
        .post(
            "/v1/ports",
            V,
            &json!({"node_uuid": enrolled["uuid"], "address": "52:54:00:00:00:99"}),
        )
        .await;
    assert_eq!(r.status, 201);
    let r = s.get("/v1/lookup?addresses=52:54:00:00:00:99", V).await;
    assert_eq!(
        (r.status, r.fault()),
        (404, "Resource could not be found.".into())
    );
    let r = s.get("/v1/lookup", V).await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            "At least one of 'addresses' and 'node_uuid' parameters is required".into()
        )
    );
    let r = s.get("/v1/lookup?addresses=meow1", V).await;
    assert_eq!(r.status, 400, "no valid address: {}", r.body);
    let r = s.get("/v1/lookup?node_uuid=meow1", V).await;
    assert_eq!(
        (r.status, r.fault()),
        (400, "Expected UUID for node_uuid: meow1".into())
    );
    assert_eq!(s.get("/v1/lookup?color=red", V).await.status, 400);
    assert_eq!(
        s.get(&format!("/v1/lookup?addresses={MAC}"), "1.21")
            .await
            .status,
        404
    );
    let root = s.get("/v1", V).await.json();
    assert!(root["lookup"].is_array() && root["heartbeat"].is_array());
    assert!(s.get("/v1", "1.21").await.json().get("lookup").is_none());

    let uuid = waiting_node(s, "agent-node", MAC).await;

    // Found by a MAC (given in upper case, among an invalid one): the node's four
    // fields, the agent's configuration and a fresh token.
    let r = s
        .get(
            &format!(
                "/v1/lookup?addresses=not-a-mac,{}",
                MAC.to_ascii_uppercase()
            ),
            V,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let doc = r.json();
    let mut keys: Vec<&str> = doc["node"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "driver_internal_info",
            "instance_info",
            "links",
            "properties",
            "uuid"
        ]
    );
    assert_eq!(doc["node"]["uuid"], uuid);
    let config = &doc["config"];
    assert_eq!(config["heartbeat_timeout"], 300);
    assert_eq!(config["agent_token_required"], true);
    assert_eq!(config["agent_skip_bmc_detect"], false);
    let token = config["agent_token"].as_str().unwrap().to_string();
    assert_eq!(token.len(), 64, "{token}");
    // The token shows only there: masked in the node of the answer and in every read.
    assert_eq!(
        doc["node"]["driver_internal_info"]["agent_secret_token"],
        "******"
    );
    let n = s.get("/v1/nodes/agent-node", V).await.json();
    assert_eq!(dii(&n)["agent_secret_token"], "******");
    assert!(!s.get("/v1/nodes/agent-node", V).await.body.contains(&token));

    // Only one lookup gets it: later ones (by uuid, or an older agent) see the mask.
    let r = s.get(&format!("/v1/lookup?node_uuid={uuid}"), V).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["config"]["agent_token"], "******");
    let r = s.get(&format!("/v1/lookup?addresses={MAC}"), "1.61").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["config"]["agent_token"], "******");

    // Heartbeats: checked in the API, then against the token by the conductor.
    let hb = |body: Value, v: &'static str| {
        let uuid = uuid.clone();
        async move { s.post(&format!("/v1/heartbeat/{uuid}"), v, &body).await }
    };
    let url = "https://192.0.2.10:9999";
    let r = hb(json!({"callback_url": url, "agent_version": "10.1.0"}), V).await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            "Agent token is required for heartbeat processing.".into()
        )
    );
    let r = hb(
        json!({"callback_url": url, "agent_version": "10.1.0", "agent_token": "x"}),
        V,
    )
    .await;
    assert_eq!(
        (r.status, r.fault()),
        (400, "Invalid or missing agent token received.".into())
    );
    let r = hb(json!({"callback_url": url, "agent_token": token}), V).await;
    assert_eq!(r.status, 400, "no version: {}", r.body);
    assert!(r.fault().starts_with("Agent did not transmit a version"));
    let r = hb(
        json!({"callback_url": url, "agent_version": "10.1.0", "agent_token": token}),
        "1.35",
    )
    .await;
    assert_eq!(
        (r.status, r.fault()),
        (400, "Field \"agent_version\" not recognised".into())
    );
    let r = hb(
        json!({"callback_url": url, "agent_token": token, "agent_status": "start"}),
        V,
    )
    .await;
    assert_eq!(r.status, 400, "agent_status is 1.72: {}", r.body);
    let r = hb(
        json!({"callback_url": "file:///etc/passwd", "agent_version": "10.1.0", "agent_token": token}),
        V,
    )
    .await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            "An issue with the supplied \"callback_url\" has been detected.".into()
        )
    );
    // [agent] require_tls (the default): the agent is reached over https only.
    let r = hb(
        json!({"callback_url": "http://192.0.2.10:9999", "agent_version": "10.1.0", "agent_token": token}),
        V,
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.fault().contains("require_tls"), "{}", r.fault());
    let r = hb(json!({"agent_version": "10.1.0", "agent_token": token}), V).await;
    assert_eq!(r.status, 400, "{}", r.body);
    let r = s
        .post(
            "/v1/heartbeat/no-such-node",
            V,
            &json!({"callback_url": url, "agent_token": token}),
        )
        .await;
    assert_eq!(r.status, 404);
    assert_eq!(
        hb(json!({"callback_url": url, "agent_token": token}), "1.21")
            .await
            .status,
        404
    );
    // Nothing of that was recorded.
    let n = s.get("/v1/nodes/agent-node", V).await.json();
    assert!(!dii(&n).contains_key("agent_url"), "{n}");

    // A good one (by name, as agents may): 202 with no body, recorded on the node.
    let r = s
        .post(
            "/v1/heartbeat/agent-node",
            V,
            &json!({"callback_url": url, "agent_version": "10.1.0", "agent_token": token}),
        )
        .await;
    assert_eq!((r.status, r.body.as_str()), (202, ""));
    let n = s.get("/v1/nodes/agent-node", V).await.json();
    assert_eq!(dii(&n)["agent_url"], url);
    assert_eq!(dii(&n)["agent_version"], "10.1.0");
    let first = dii(&n)["agent_last_heartbeat"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(n["provision_state"], "clean wait");
    // The next one, moments later with nothing new, is taken but not written again;
    // one that says something new is (and moves the time on). Another URL than the
    // recorded one is refused.
    let r = hb(
        json!({"callback_url": url, "agent_version": "10.1.0", "agent_token": token}),
        V,
    )
    .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let n = s.get("/v1/nodes/agent-node", V).await.json();
    assert_eq!(dii(&n)["agent_last_heartbeat"], first.as_str());
    let r = hb(
        json!({"callback_url": url, "agent_version": "10.2.0", "agent_token": token}),
        V,
    )
    .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let n = s.get("/v1/nodes/agent-node", V).await.json();
    assert_eq!(dii(&n)["agent_version"], "10.2.0");
    assert!(dii(&n)["agent_last_heartbeat"].as_str().unwrap() > first.as_str());
    // The agent's certificate (1.68) is pinned by the heartbeat that first brings one;
    // another one later is refused, and the pin stays (upstream's).
    let pem = |c: &str| format!("-----BEGIN CERTIFICATE-----\n{c}\n-----END CERTIFICATE-----\n");
    let r = hb(
        json!({"callback_url": url, "agent_version": "10.2.0", "agent_token": token,
               "agent_verify_ca": pem("A")}),
        "1.68",
    )
    .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let r = hb(
        json!({"callback_url": url, "agent_version": "10.2.0", "agent_token": token,
               "agent_verify_ca": pem("B")}),
        "1.68",
    )
    .await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            "Detected change in ramdisk provided \"agent_verify_ca\"".into()
        )
    );
    let n = s.get("/v1/nodes/agent-node", V).await.json();
    assert_eq!(dii(&n)["agent_verify_ca"], pem("A").as_str());
    let r = hb(
        json!({"callback_url": "https://192.0.2.11:9999", "agent_version": "10.1.0", "agent_token": token}),
        V,
    )
    .await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            "Detected change in ramdisk provided \"callback_url\"".into()
        )
    );

    // The cleaning ends (aborted): the agent's token and URL go with it.
    assert_eq!(
        s.provision(V, "agent-node", json!({"target": "abort"}))
            .await
            .status,
        202
    );
    let n = s.wait_state(V, "agent-node", "clean failed").await;
    for k in ["agent_secret_token", "agent_url", "agent_verify_ca"] {
        assert!(!dii(&n).contains_key(k), "{k} left: {n}");
    }
    let r = hb(
        json!({"callback_url": url, "agent_version": "10.1.0", "agent_token": token}),
        V,
    )
    .await;
    assert_eq!(
        (r.status, r.fault()),
        (400, "Invalid or missing agent token received.".into())
    );
}

on_every_deployment!(lookup_and_heartbeat);

/// `[api] enable_ramdisk_endpoints = false` refuses both routes; `restrict_lookup =
/// false` finds a node in any state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_switches() {
    let s = common::start_with(common::Backend::Sqlite, |c| {
        c.api.enable_ramdisk_endpoints = false;
    })
    .await;
    let r = s.get(&format!("/v1/lookup?addresses={MAC}"), V).await;
    assert_eq!(
        (r.status, r.fault()),
        (
            403,
            "Access was denied to the following resource: /v1/lookup".into()
        )
    );
    let r = s
        .post(
            "/v1/heartbeat/x",
            V,
            &json!({"callback_url": "https://192.0.2.1", "agent_token": "t"}),
        )
        .await;
    assert_eq!(r.status, 403);
    s.stop().await;

    let s = common::start_with(common::Backend::Sqlite, |c| {
        c.api.restrict_lookup = false;
        c.api.ramdisk_heartbeat_timeout = 42;
    })
    .await;
    let n = s
        .node(json!({"driver": "fake-hardware", "name": "free"}))
        .await;
    let r = s
        .post(
            "/v1/ports",
            V,
            &json!({"node_uuid": n["uuid"], "address": MAC}),
        )
        .await;
    assert_eq!(r.status, 201);
    let r = s.get(&format!("/v1/lookup?addresses={MAC}"), V).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["node"]["uuid"], n["uuid"]);
    assert_eq!(r.json()["config"]["heartbeat_timeout"], 42);
    s.stop().await;
}
