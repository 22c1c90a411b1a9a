#![allow(clippy::unwrap_used)]
//! `/v1/chassis` against upstream's samples (shapes, field order, errors), node
//! `chassis_uuid` and `/v1/chassis/{uuid}/nodes`, on all three deployments.

mod common;

use common::Server;
use serde_json::{Value, json};

const V: &str = "1.61";

fn keys(v: &Value) -> Vec<&str> {
    v.as_object().unwrap().keys().map(String::as_str).collect()
}

fn links(base: &str, path: &str) -> Value {
    json!([
        {"href": format!("{base}/v1/{path}"), "rel": "self"},
        {"href": format!("{base}/{path}"), "rel": "bookmark"},
    ])
}

async fn chassis_rest(s: &Server) {
    let base = s.base();
    // Create: the full document, in upstream's order, with the nested `nodes` links.
    let r = s
        .post(
            "/v1/chassis",
            V,
            &json!({"description": "rack 1", "extra": {"row": "a"}}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let c1 = r.json();
    let u1 = c1["uuid"].as_str().unwrap().to_string();
    assert_eq!(
        keys(&c1),
        [
            "uuid",
            "created_at",
            "updated_at",
            "description",
            "extra",
            "links",
            "nodes"
        ]
    );
    assert_eq!(
        r.header("location"),
        Some(format!("{base}/v1/chassis/{u1}").as_str())
    );
    assert_eq!(c1["updated_at"], Value::Null);
    assert_eq!(c1["links"], links(&base, &format!("chassis/{u1}")));
    assert_eq!(
        c1["nodes"],
        json!([links(&base, &format!("chassis/{u1}/nodes"))])
    );
    // An explicit uuid; the same again is a conflict.
    let u2 = "c4a55150-1b2c-4d3e-8f4a-5b6c7d8e9f01";
    let r = s.post("/v1/chassis", V, &json!({"uuid": u2})).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let r = s.post("/v1/chassis", V, &json!({"uuid": u2})).await;
    assert_eq!(r.status, 409);
    assert_eq!(
        r.fault(),
        format!("A chassis with UUID {u2} already exists.")
    );
    // At 1.1, with an empty body.
    let r = s.post("/v1/chassis", "1.1", &json!({})).await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.json()["description"], Value::Null);
    assert_eq!(r.json()["extra"], json!({}));
    let u3 = r.json()["uuid"].as_str().unwrap().to_string();
    // Refusals.
    let long = "d".repeat(256);
    let r = s
        .post("/v1/chassis", V, &json!({ "description": long }))
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.fault(),
        format!("Schema error for chassis: '{long}' is too long")
    );
    let r = s.post("/v1/chassis", V, &json!({"name": "x"})).await;
    assert_eq!(r.status, 400);
    assert!(r.fault().contains("'name' was unexpected"), "{}", r.fault());
    let r = s.get("/v1/chassis/rack-1", V).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.fault(), "Expected UUID for chassis_uuid: rack-1");
    let unknown = "11111111-2222-3333-4444-555555555555";
    let r = s.get(&format!("/v1/chassis/{unknown}"), V).await;
    assert_eq!(r.status, 404);
    assert_eq!(r.fault(), format!("Chassis {unknown} could not be found."));

    // Lists: default fields, detail, pagination, sort keys.
    let r = s.get("/v1/chassis", V).await;
    let list = r.json()["chassis"].as_array().unwrap().clone();
    assert_eq!(list.len(), 3);
    assert_eq!(keys(&list[0]), ["uuid", "description", "links"]);
    assert_eq!(list[0]["uuid"], u1.as_str());
    let r = s.get("/v1/chassis/detail", V).await;
    assert_eq!(
        keys(&r.json()["chassis"][0]),
        [
            "uuid",
            "created_at",
            "updated_at",
            "description",
            "extra",
            "links",
            "nodes"
        ]
    );
    let r = s.get("/v1/chassis?limit=1", V).await;
    assert_eq!(
        r.json()["next"],
        format!(
            "{base}/v1/chassis?sort_key=id&sort_dir=asc&fields=uuid,description&limit=1&marker={u1}"
        )
    );
    let mut walked = Vec::new();
    let mut next = Some("/v1/chassis?limit=1".to_string());
    while let Some(path) = next.take() {
        let page = s.get(&path, V).await.json();
        for c in page["chassis"].as_array().unwrap() {
            walked.push(c["uuid"].as_str().unwrap().to_string());
        }
        next = page["next"]
            .as_str()
            .map(|n| n.trim_start_matches(&base).to_string());
        assert!(walked.len() <= 3, "pagination loops");
    }
    assert_eq!(walked, vec![u1.clone(), u2.to_string(), u3.clone()]);
    let r = s.get("/v1/chassis?sort_key=uuid&sort_dir=desc", V).await;
    let first = r.json()["chassis"][0]["uuid"].as_str().unwrap().to_string();
    let mut sorted = [u1.clone(), u2.to_string(), u3.clone()];
    sorted.sort();
    assert_eq!(first, sorted[2]);
    let r = s.get("/v1/chassis?sort_key=extra", V).await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.fault(),
        "The sort_key value extra is an invalid field for sorting"
    );
    let r = s.get(&format!("/v1/chassis/{u1}?fields=extra"), V).await;
    assert_eq!(keys(&r.json()), ["extra", "links"]);

    // PATCH.
    let r = s
        .patch(
            &format!("/v1/chassis/{u1}"),
            V,
            &json!([{"op": "replace", "path": "/description", "value": "rack 1, row a"}]),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["description"], "rack 1, row a");
    assert_ne!(r.json()["updated_at"], Value::Null);
    let r = s
        .patch(
            &format!("/v1/chassis/{u1}"),
            V,
            &json!([{"op": "add", "path": "/extra/power", "value": "pdu-3"}]),
        )
        .await;
    assert_eq!(r.json()["extra"], json!({"row": "a", "power": "pdu-3"}));
    let r = s
        .patch(
            &format!("/v1/chassis/{u1}"),
            V,
            &json!([{"op": "replace", "path": "/uuid", "value": u2}]),
        )
        .await;
    assert_eq!(r.status, 400);

    // Nodes name a chassis that exists.
    let r = s
        .post(
            "/v1/nodes",
            V,
            &json!({"driver": "fake-hardware", "name": "ch-node-1", "chassis_uuid": u1}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.json()["chassis_uuid"], u1.as_str());
    s.post(
        "/v1/nodes",
        V,
        &json!({"driver": "fake-hardware", "name": "ch-node-2", "chassis_uuid": u1}),
    )
    .await;
    s.post(
        "/v1/nodes",
        V,
        &json!({"driver": "fake-hardware", "name": "other-node"}),
    )
    .await;
    let r = s
        .post(
            "/v1/nodes",
            V,
            &json!({"driver": "fake-hardware", "chassis_uuid": unknown}),
        )
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.fault(), format!("Chassis {unknown} could not be found."));
    let r = s
        .patch(
            "/v1/nodes/other-node",
            V,
            &json!([{"op": "add", "path": "/chassis_uuid", "value": unknown}]),
        )
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.fault(), format!("Chassis {unknown} could not be found."));
    let r = s
        .patch(
            "/v1/nodes/other-node",
            V,
            &json!([{"op": "add", "path": "/chassis_uuid", "value": u3}]),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["chassis_uuid"], u3.as_str());

    // The node list's chassis filter and field (upstream answers this `fields` with 500).
    let r = s.get(&format!("/v1/nodes?chassis_uuid={u3}"), V).await;
    assert_eq!(r.json()["nodes"][0]["name"], "other-node");
    let r = s.get("/v1/nodes?fields=name,chassis_uuid", V).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        r.json()["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n["name"] == "ch-node-1" && n["chassis_uuid"] == u1.as_str())
    );

    // The chassis' nodes.
    let r = s.get(&format!("/v1/chassis/{u1}/nodes"), V).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let listed = r.json();
    let names: Vec<&str> = listed["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["ch-node-1", "ch-node-2"]);
    let r = s
        .get(&format!("/v1/chassis/{u1}/nodes/detail?limit=1"), V)
        .await;
    let page = r.json();
    assert_eq!(page["nodes"].as_array().unwrap().len(), 1);
    assert!(page["nodes"][0]["driver_info"].is_object(), "detail");
    let next = page["next"].as_str().unwrap();
    assert!(
        next.starts_with(&format!("{base}/v1/chassis/{u1}/nodes/detail?")),
        "{next}"
    );
    let r = s.get(next.trim_start_matches(&base), V).await;
    assert_eq!(r.json()["nodes"][0]["name"], "ch-node-2");
    let r = s.get(&format!("/v1/chassis/{unknown}/nodes"), V).await;
    assert_eq!(r.status, 404);
    assert_eq!(r.fault(), format!("Chassis {unknown} could not be found."));

    // A chassis with nodes cannot go; once empty it can.
    let r = s.delete(&format!("/v1/chassis/{u3}"), V).await;
    assert_eq!(r.status, 400, "as upstream");
    assert_eq!(
        r.fault(),
        format!("Cannot complete the requested action because chassis {u3} contains nodes.")
    );
    let leave = json!([{"op": "remove", "path": "/chassis_uuid"}]);
    let r = s.patch("/v1/nodes/other-node", "1.24", &leave).await;
    assert_eq!(r.status, 406, "a node leaves its chassis from 1.25");
    let r = s.patch("/v1/nodes/other-node", V, &leave).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["chassis_uuid"], Value::Null);
    let r = s.delete(&format!("/v1/chassis/{u3}"), V).await;
    assert_eq!(r.status, 204, "{}", r.body);
    assert_eq!(s.get(&format!("/v1/chassis/{u3}"), V).await.status, 404);

    // Discovery names the resource.
    let v1 = s.get("/v1", V).await.json();
    assert_eq!(v1["chassis"], links(&base, "chassis/"));
}

on_every_deployment!(chassis_rest);
