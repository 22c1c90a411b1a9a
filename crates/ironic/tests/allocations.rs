#![allow(clippy::unwrap_used)]
//! The Allocation API over real HTTP, on the all-in-one server (SQLite and PostgreSQL)
//! and on the split deployment (RabbitMQ): REST cases with upstream's codes and
//! messages, the node side (allocation_uuid, instance_uuid, tear-down, deletion), and no
//! double allocation under concurrency.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::Server;
use serde_json::{Value, json};

on_every_deployment!(rest_cases, node_side_of_allocations, no_double_allocation);

const V: &str = "1.60";

/// An `available` node (automated cleaning off, so it gets there fast).
async fn available(s: &Server, name: &str, rc: &str, traits: &[&str]) -> Value {
    let n = s
        .node(json!({"driver": "fake-hardware", "name": name, "resource_class": rc, "automated_clean": false}))
        .await;
    for t in traits {
        let r = s
            .put(&format!("/v1/nodes/{name}/traits/{t}"), V, None)
            .await;
        assert_eq!(r.status, 204, "{}", r.body);
    }
    for verb in ["manage", "provide"] {
        let r = s
            .put(
                &format!("/v1/nodes/{name}/states/provision"),
                V,
                Some(&json!({"target": verb})),
            )
            .await;
        assert_eq!(r.status, 202, "{}", r.body);
        let want = if verb == "manage" {
            "manageable"
        } else {
            "available"
        };
        wait_for(s, &format!("/v1/nodes/{name}"), "provision_state", want).await;
    }
    n
}

/// Polls (bounded) until `field` of the document at `path` is `want`.
async fn wait_for(s: &Server, path: &str, field: &str, want: &str) -> Value {
    let start = Instant::now();
    loop {
        let r = s.get(path, V).await;
        assert_eq!(r.status, 200, "{path}: {}", r.body);
        let d = r.json();
        if d[field] == want {
            return d;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{path} never had {field} = {want}: {d}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn allocate(s: &Server, body: Value) -> common::Resp {
    s.post("/v1/allocations", V, &body).await
}

async fn rest_cases(s: &Server) {
    available(s, "an-1", "rc-a", &[]).await;
    available(s, "an-2", "rc-t", &["CUSTOM_GOLD"]).await;
    available(s, "an-3", "rc-t", &[]).await;

    // Version gates.
    let r = s
        .post(
            "/v1/allocations",
            "1.51",
            &json!({"resource_class": "rc-a"}),
        )
        .await;
    assert_eq!(r.status, 405);
    assert_eq!(r.fault(), "The API version does not allow allocations");
    let r = s.get("/v1/allocations", "1.51").await;
    assert_eq!(r.status, 404);

    // Minimal: 201 allocating with Location, then active on the node.
    let r = allocate(s, json!({"resource_class": "rc-a"})).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let a = r.json();
    let uuid = a["uuid"].as_str().unwrap().to_string();
    assert!(
        r.header("location")
            .unwrap()
            .ends_with(&format!("/v1/allocations/{uuid}"))
    );
    let keys: Vec<&str> = a.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "uuid",
            "created_at",
            "updated_at",
            "candidate_nodes",
            "extra",
            "last_error",
            "name",
            "owner",
            "resource_class",
            "state",
            "traits",
            "links",
            "node_uuid"
        ]
    );
    let a = wait_for(s, &format!("/v1/allocations/{uuid}"), "state", "active").await;
    let n = s.get("/v1/nodes/an-1", V).await.json();
    assert_eq!(a["node_uuid"], n["uuid"]);
    assert_eq!(n["instance_uuid"], uuid.as_str());
    assert_eq!(n["allocation_uuid"], uuid.as_str());
    assert_eq!(n["instance_info"]["traits"], json!([]));
    assert!(
        s.get("/v1/nodes/an-1", "1.51")
            .await
            .json()
            .get("allocation_uuid")
            .is_none()
    );

    // Traits pick the node that has them; the name is shown; GET by name.
    let r = allocate(
        s,
        json!({"resource_class": "rc-t", "traits": ["CUSTOM_GOLD"], "name": "gold", "extra": {"k": "v"}}),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let g = wait_for(s, "/v1/allocations/gold", "state", "active").await;
    let n2 = s.get("/v1/nodes/an-2", V).await.json();
    assert_eq!(g["node_uuid"], n2["uuid"]);
    assert_eq!(n2["instance_info"]["traits"], json!(["CUSTOM_GOLD"]));
    assert_eq!(g["extra"], json!({"k": "v"}));

    // Failures end in `error` with upstream's reasons.
    let r = allocate(s, json!({"resource_class": "rc-nobody", "name": "nothing"})).await;
    assert_eq!(r.status, 201);
    let e = wait_for(s, "/v1/allocations/nothing", "state", "error").await;
    assert_eq!(
        e["last_error"],
        format!(
            "Failed to process allocation {}: no available nodes match the resource class rc-nobody.",
            e["uuid"].as_str().unwrap()
        )
    );
    let r = allocate(
        s,
        json!({"resource_class": "rc-t", "traits": ["CUSTOM_PLATINUM"], "name": "plat"}),
    )
    .await;
    assert_eq!(r.status, 201);
    let e = wait_for(s, "/v1/allocations/plat", "state", "error").await;
    assert!(
        e["last_error"]
            .as_str()
            .unwrap()
            .ends_with("no suitable nodes have the requested traits CUSTOM_PLATINUM."),
        "{e}"
    );
    // Candidates by name, shown as uuids; none of them free: error.
    let r = allocate(
        s,
        json!({"resource_class": "rc-a", "candidate_nodes": ["an-1"], "name": "cand"}),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let c = wait_for(s, "/v1/allocations/cand", "state", "error").await;
    assert_eq!(c["candidate_nodes"], json!([n["uuid"]]));
    assert!(
        c["last_error"].as_str().unwrap().ends_with(
            "none of the requested nodes are available and match the resource class rc-a."
        ),
        "{c}"
    );

    // Client mistakes.
    let cases: &[(Value, u16, &str)] = &[
        (
            json!({}),
            400,
            "The resource_class field is mandatory when not backfilling",
        ),
        (
            json!({"resource_class": 42}),
            400,
            "Schema error: 42 is not of type 'string', 'null'",
        ),
        (
            json!({"resource_class": "r".repeat(81)}),
            400,
            "is too long",
        ),
        (
            json!({"resource_class": "x", "candidate_nodes": ["no-such-node"]}),
            400,
            "Nodes cannot be found: no-such-node",
        ),
        (
            json!({"resource_class": "x", "name": "gold"}),
            409,
            "An allocation with name gold already exists.",
        ),
        (
            json!({"resource_class": "x", "uuid": uuid}),
            409,
            "already exists.",
        ),
        (
            json!({"resource_class": "x", "traits": ["not-a-trait"]}),
            400,
            "Schema error: 'not-a-trait' is not valid under any of the given schemas.",
        ),
        (
            json!({"resource_class": "x", "name": "bad name!"}),
            400,
            "Cannot create allocation with invalid name 'bad name!'",
        ),
        (
            json!({"resource_class": "x", "foo": 1}),
            400,
            "Schema error: Additional properties are not allowed ('foo' was unexpected)",
        ),
    ];
    for (body, code, msg) in cases {
        let r = allocate(s, body.clone()).await;
        assert_eq!(r.status, *code, "{body}: {}", r.body);
        assert!(r.fault().contains(msg), "{body}: {}", r.fault());
    }
    let r = s
        .post(
            "/v1/allocations",
            "1.59",
            &json!({"resource_class": "x", "owner": "o"}),
        )
        .await;
    assert_eq!(r.status, 406);
    let r = s
        .post("/v1/allocations", "1.57", &json!({"node": "an-1"}))
        .await;
    assert_eq!(r.status, 400);
    let r = s
        .get("/v1/allocations/11111111-2222-3333-4444-555555555555", V)
        .await;
    assert_eq!(r.status, 404);
    assert_eq!(
        r.fault(),
        "Allocation 11111111-2222-3333-4444-555555555555 could not be found."
    );

    // Lists: filters, fields, pagination, sorting.
    let all = s.get("/v1/allocations", V).await.json();
    assert_eq!(all["allocations"].as_array().unwrap().len(), 5);
    let active = s.get("/v1/allocations?state=active", V).await.json();
    assert_eq!(active["allocations"].as_array().unwrap().len(), 2);
    let by_node = s.get("/v1/allocations?node=an-2", V).await.json();
    assert_eq!(by_node["allocations"][0]["name"], "gold");
    assert_eq!(
        s.get("/v1/allocations?node=no-such-node", V).await.status,
        400
    );
    let f = s
        .get("/v1/allocations?fields=uuid,node_uuid", V)
        .await
        .json();
    let keys: BTreeSet<&str> = f["allocations"][0]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, BTreeSet::from(["uuid", "node_uuid", "links"]));
    let mut seen = Vec::new();
    let mut next = Some("/v1/allocations?limit=2&sort_key=name&sort_dir=desc".to_string());
    for _ in 0..10 {
        let Some(path) = next.take() else { break };
        let page = s.get(&path, V).await.json();
        for a in page["allocations"].as_array().unwrap() {
            seen.push(a["uuid"].as_str().unwrap().to_string());
        }
        next = page["next"]
            .as_str()
            .map(|u| u[u.find("/v1/").unwrap()..].to_string());
    }
    assert_eq!(seen.len(), 5, "every allocation once");
    assert_eq!(seen.iter().collect::<BTreeSet<_>>().len(), 5);
    assert_eq!(
        s.get("/v1/allocations?sort_key=traits", V).await.status,
        400
    );

    // PATCH name and extra only.
    let r = s
        .patch(
            &format!("/v1/allocations/{uuid}"),
            V,
            &json!([{"op": "add", "path": "/name", "value": "first"}]),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["name"], "first");
    let r = s
        .patch(
            "/v1/allocations/first",
            V,
            &json!([{"op": "replace", "path": "/node_uuid", "value": "x"}]),
        )
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.fault(),
        "Cannot patch /node_uuid. Only the following can be updated: name, extra"
    );
    let r = s
        .patch(
            "/v1/allocations/first",
            V,
            &json!([{"op": "add", "path": "/name", "value": "gold"}]),
        )
        .await;
    assert_eq!(r.status, 409);
    let r = s
        .patch(
            "/v1/allocations/first",
            "1.56",
            &json!([{"op": "add", "path": "/name", "value": "y"}]),
        )
        .await;
    assert_eq!(r.status, 405);

    // The node's allocation.
    let r = s.get("/v1/nodes/an-1/allocation", V).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["uuid"], uuid.as_str());
    let r = s.get("/v1/nodes/an-3/allocation", V).await;
    assert_eq!(r.status, 404);
    assert_eq!(r.fault(), "Allocation for node an-3 was not found");
    assert_eq!(s.get("/v1/nodes/an-1/allocation", "1.51").await.status, 404);

    // DELETE frees the node; again: 404.
    let r = s.delete(&format!("/v1/allocations/{uuid}"), V).await;
    assert_eq!(r.status, 204, "{}", r.body);
    let n = s.get("/v1/nodes/an-1", V).await.json();
    assert_eq!(n["instance_uuid"], Value::Null);
    assert_eq!(n["allocation_uuid"], Value::Null);
    assert_eq!(
        s.delete(&format!("/v1/allocations/{uuid}"), V).await.status,
        404
    );
    // DELETE of an allocation in error, and through the node.
    assert_eq!(s.delete("/v1/allocations/nothing", V).await.status, 204);
    assert_eq!(s.delete("/v1/nodes/an-2/allocation", V).await.status, 204);
    assert_eq!(s.delete("/v1/nodes/an-2/allocation", V).await.status, 404);
    assert_eq!(
        s.get("/v1/nodes/an-2", V).await.json()["instance_uuid"],
        Value::Null
    );
}

async fn node_side_of_allocations(s: &Server) {
    let node = available(s, "ns-1", "rc-n", &[]).await;
    let r = allocate(s, json!({"resource_class": "rc-n", "name": "a1"})).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let a1 = wait_for(s, "/v1/allocations/a1", "state", "active").await;
    // The list shows it too, with only the fields asked for (upstream answers 500).
    let l = s.get("/v1/nodes?fields=uuid,allocation_uuid", V).await;
    assert_eq!(l.status, 200, "{}", l.body);
    assert_eq!(l.json()["nodes"][0]["allocation_uuid"], a1["uuid"]);
    // allocation_uuid is read-only; the node cannot be deleted while associated.
    let r = s
        .patch(
            "/v1/nodes/ns-1",
            V,
            &json!([{"op": "remove", "path": "/allocation_uuid"}]),
        )
        .await;
    assert_eq!(r.status, 400);
    let r = s.delete("/v1/nodes/ns-1", V).await;
    assert_eq!(r.status, 409);
    assert!(
        r.fault().contains("is associated with instance"),
        "{}",
        r.fault()
    );
    // Replacing the instance: 409; removing it (available): the allocation goes.
    let r = s
        .patch("/v1/nodes/ns-1", V, &json!([{"op": "replace", "path": "/instance_uuid", "value": "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee"}]))
        .await;
    assert_eq!(r.status, 409);
    let r = s
        .patch(
            "/v1/nodes/ns-1",
            V,
            &json!([{"op": "remove", "path": "/instance_uuid"}]),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["allocation_uuid"], Value::Null);
    assert_eq!(s.get("/v1/allocations/a1", V).await.status, 404);

    // Deploy on an allocation; removing the instance of an active node is refused;
    // the allocation cannot be deleted while active; tear-down deletes it.
    let r = allocate(s, json!({"resource_class": "rc-n", "name": "a2"})).await;
    assert_eq!(r.status, 201);
    wait_for(s, "/v1/allocations/a2", "state", "active").await;
    let r = s
        .put(
            "/v1/nodes/ns-1/states/provision",
            V,
            Some(&json!({"target": "active"})),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    wait_for(s, "/v1/nodes/ns-1", "provision_state", "active").await;
    let r = s
        .patch(
            "/v1/nodes/ns-1",
            V,
            &json!([{"op": "remove", "path": "/instance_uuid"}]),
        )
        .await;
    assert_eq!(r.status, 409);
    assert!(
        r.fault()
            .contains("with an allocation can not have instance_uuid removed"),
        "{}",
        r.fault()
    );
    let r = s.delete("/v1/allocations/a2", V).await;
    assert_eq!(r.status, 409);
    assert!(
        r.fault().contains("because the node is active"),
        "{}",
        r.fault()
    );
    let r = s
        .put(
            "/v1/nodes/ns-1/states/provision",
            V,
            Some(&json!({"target": "deleted"})),
        )
        .await;
    assert_eq!(r.status, 202);
    let n = wait_for(s, "/v1/nodes/ns-1", "provision_state", "available").await;
    assert_eq!(n["allocation_uuid"], Value::Null);
    assert_eq!(n["instance_uuid"], Value::Null);
    assert_eq!(s.get("/v1/allocations/a2", V).await.status, 404);

    // Backfill (1.58): an active node gets an allocation at once.
    let r = s
        .put(
            "/v1/nodes/ns-1/states/provision",
            V,
            Some(&json!({"target": "active"})),
        )
        .await;
    assert_eq!(r.status, 202);
    wait_for(s, "/v1/nodes/ns-1", "provision_state", "active").await;
    let r = allocate(s, json!({"node": "ns-1", "name": "bf"})).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let b = r.json();
    assert_eq!(b["state"], "active");
    assert_eq!(b["node_uuid"], node["uuid"]);
    assert_eq!(b["resource_class"], "rc-n");
    // Backfilling a node that is not active fails with the reason.
    available(s, "ns-2", "rc-n", &[]).await;
    let r = allocate(s, json!({"node": "ns-2"})).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(
        r.fault().contains("Node must be in the \"active\" state"),
        "{}",
        r.fault()
    );

    // Deleting a node in maintenance deletes its allocation.
    assert_eq!(
        s.put("/v1/nodes/ns-1/maintenance", V, None).await.status,
        202
    );
    let r = s.delete("/v1/nodes/ns-1", V).await;
    assert_eq!(r.status, 204, "{}", r.body);
    assert_eq!(s.get("/v1/allocations/bf", V).await.status, 404);
}

/// Many clients allocating more than there are nodes: every node goes to exactly one
/// allocation, the rest fail.
async fn no_double_allocation(s: &Server) {
    const NODES: usize = 30;
    const REQUESTS: usize = 40;
    let mut set = tokio::task::JoinSet::new();
    for i in 0..NODES {
        let s = Server::client(s.addr);
        set.spawn(async move { available(&s, &format!("dn-{i}"), "rc-d", &[]).await });
    }
    while set.join_next().await.is_some() {}
    let mut set = tokio::task::JoinSet::new();
    for c in 0..8 {
        let s = Server::client(s.addr);
        set.spawn(async move {
            let mut uuids = Vec::new();
            for i in (c..REQUESTS).step_by(8) {
                let r = allocate(
                    &s,
                    json!({"resource_class": "rc-d", "name": format!("d-{i}")}),
                )
                .await;
                assert_eq!(r.status, 201, "{}", r.body);
                uuids.push(r.json()["uuid"].as_str().unwrap().to_string());
            }
            uuids
        });
    }
    let mut uuids = Vec::new();
    while let Some(r) = set.join_next().await {
        uuids.extend(r.unwrap());
    }
    assert_eq!(uuids.len(), REQUESTS);
    common::check_allocations(s, &uuids, NODES).await;
}
