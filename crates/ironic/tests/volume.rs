#![allow(clippy::unwrap_used)]
//! `/v1/volume`: connectors and targets against upstream's samples (shapes, field
//! order, version gates, errors, the powered-off rule), on all three deployments.

mod common;

use std::time::Duration;

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

async fn power(s: &Server, node: &str, target: &str) {
    let r = s
        .put(
            &format!("/v1/nodes/{node}/states/power"),
            V,
            Some(&json!({ "target": target })),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    common::until("power state", Duration::from_secs(10), || async {
        s.get(&format!("/v1/nodes/{node}"), V).await.json()["power_state"] == target
    })
    .await;
}

async fn volume_rest(s: &Server) {
    let base = s.base();
    let n = s
        .node(json!({"driver": "fake-hardware", "name": "vol-node"}))
        .await;
    let node = n["uuid"].as_str().unwrap().to_string();

    // The roots.
    let r = s.get("/v1/volume", V).await;
    assert_eq!(
        r.json(),
        json!({"links": links(&base, "volume/"), "connectors": links(&base, "volume/connectors"),
               "targets": links(&base, "volume/targets")})
    );
    let r = s.get("/v1/volume", "1.31").await;
    assert_eq!(
        (r.status, r.fault()),
        (404, "The API is not supported for this version".into())
    );
    let r = s.get("/v1/nodes/vol-node/volume", V).await.json();
    assert_eq!(r["targets"], links(&base, "nodes/vol-node/volume/targets"));
    assert_eq!(
        s.get("/v1", V).await.json()["volume"],
        links(&base, "volume/")
    );

    // Connectors.
    let r = s
        .post(
            "/v1/volume/connectors",
            V,
            &json!({"node_uuid": node, "type": "iqn",
                    "connector_id": "iqn.2017-07.org.openstack:01:d9a51732c3f", "extra": {"a": 1}}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let c1 = r.json();
    let cu = c1["uuid"].as_str().unwrap().to_string();
    assert_eq!(
        keys(&c1),
        [
            "uuid",
            "created_at",
            "updated_at",
            "connector_id",
            "extra",
            "type",
            "links",
            "node_uuid"
        ]
    );
    assert_eq!(
        r.header("location"),
        Some(format!("{base}/v1/volume/connectors/{cu}").as_str())
    );
    let r = s
        .post(
            "/v1/volume/connectors",
            V,
            &json!({"node_uuid": node, "type": "nvme", "connector_id": "nqn.x",
                    "uuid": "0c0c0c0c-1d1d-4e2e-8f3f-4a4a4a4a4a4a"}),
        )
        .await;
    assert_eq!(r.status, 201, "the API does not check the type: {}", r.body);
    let r = s
        .post(
            "/v1/volume/connectors",
            V,
            &json!({"node_uuid": node, "type": "iqn",
                    "connector_id": "iqn.2017-07.org.openstack:01:d9a51732c3f"}),
        )
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (
            409,
            "A volume connector with type iqn and connector ID iqn.2017-07.org.openstack:01:d9a51732c3f already exists.".into()
        )
    );
    let r = s
        .post(
            "/v1/volume/connectors",
            V,
            &json!({"node_uuid": node, "type": "iqn"}),
        )
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            "Schema error for connector: 'connector_id' is a required property".into()
        )
    );
    let r = s
        .post(
            "/v1/volume/connectors",
            V,
            &json!({"node_uuid": "11111111-2222-3333-4444-555555555555", "type": "iqn", "connector_id": "x"}),
        )
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            "Invalid input for field/attribute node_uuid. Value: '11111111-2222-3333-4444-555555555555'. ".into()
        )
    );
    let r = s
        .post(
            "/v1/volume/connectors",
            "1.31",
            &json!({"node_uuid": node, "type": "iqn", "connector_id": "y"}),
        )
        .await;
    assert_eq!(r.status, 404);
    assert_eq!(
        s.get(&format!("/v1/volume/connectors/{cu}"), V)
            .await
            .json(),
        c1
    );
    let l = s.get("/v1/volume/connectors", V).await.json();
    assert_eq!(
        keys(&l["connectors"][0]),
        ["uuid", "connector_id", "type", "links", "node_uuid"]
    );
    let d = s.get("/v1/volume/connectors?detail=true", V).await.json();
    assert_eq!(d["connectors"][0], c1);
    let f = s
        .get("/v1/volume/connectors?node=vol-node&fields=uuid,type", V)
        .await
        .json();
    assert_eq!(f["connectors"].as_array().unwrap().len(), 2);
    assert_eq!(keys(&f["connectors"][0]), ["uuid", "type", "links"]);
    let under = s
        .get(&format!("/v1/nodes/{node}/volume/connectors"), V)
        .await;
    assert_eq!(under.json()["connectors"].as_array().unwrap().len(), 2);

    // A PATCH needs the node powered off; a delete does not.
    let extra = json!([{"op": "replace", "path": "/extra", "value": {"b": 2}}]);
    let r = s
        .patch(&format!("/v1/volume/connectors/{cu}"), V, &extra)
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            format!(
                "The requested action \"volume connector update\" can not be performed on node \"{node}\" while it is in state \"None\"."
            )
        )
    );
    power(s, &node, "power off").await;
    let r = s
        .patch(&format!("/v1/volume/connectors/{cu}"), V, &extra)
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["extra"], json!({"b": 2}));
    let r = s
        .patch(
            &format!("/v1/volume/connectors/{cu}"),
            V,
            &json!([{"op": "replace", "path": "/uuid", "value": "x"}]),
        )
        .await;
    assert_eq!(r.status, 400);

    // Targets.
    let target = |index: i64, volume: &str| {
        json!({"node_uuid": node, "volume_type": "iscsi", "volume_id": volume,
               "boot_index": index, "properties": {"target_lun": 0}})
    };
    let r = s
        .post("/v1/volume/targets", V, &target(0, "vol-0001"))
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let t1 = r.json();
    let tu = t1["uuid"].as_str().unwrap().to_string();
    assert_eq!(
        keys(&t1),
        [
            "uuid",
            "created_at",
            "updated_at",
            "boot_index",
            "extra",
            "properties",
            "volume_id",
            "volume_type",
            "links",
            "node_uuid"
        ]
    );
    let r = s
        .post("/v1/volume/targets", V, &target(1, "vol-0002"))
        .await;
    assert_eq!(r.status, 201);
    let t2 = r.json()["uuid"].as_str().unwrap().to_string();
    let r = s
        .post("/v1/volume/targets", V, &target(0, "vol-0003"))
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (
            409,
            "A volume target with boot index '0' for the same node already exists.".into()
        )
    );
    let r = s
        .post("/v1/volume/targets", V, &target(2, "vol-0001"))
        .await;
    assert_eq!(r.status, 201, "a repeated volume id is accepted");
    let mut missing = target(3, "v");
    missing.as_object_mut().unwrap().remove("volume_type");
    let r = s.post("/v1/volume/targets", V, &missing).await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            "Schema error for target: 'volume_type' is a required property".into()
        )
    );
    let l = s.get("/v1/volume/targets", V).await.json();
    assert_eq!(
        keys(&l["targets"][0]),
        [
            "uuid",
            "boot_index",
            "volume_id",
            "volume_type",
            "links",
            "node_uuid"
        ]
    );
    let r = s.get("/v1/volume/targets/detail", V).await;
    assert_eq!(
        (r.status, r.fault()),
        (400, "Expected UUID for target_uuid: detail".into())
    );
    let r = s.get("/v1/volume/targets?sort_key=properties", V).await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            "The sort_key value properties is an invalid field for sorting".into()
        )
    );
    let r = s
        .get(
            "/v1/volume/targets?sort_key=boot_index&sort_dir=desc&limit=2",
            V,
        )
        .await
        .json();
    assert_eq!(r["targets"][0]["boot_index"], 2);
    assert!(r["next"].as_str().unwrap().contains("sort_key=boot_index"));
    let r = s
        .get("/v1/nodes/vol-node/volume/targets?detail=true", V)
        .await
        .json();
    assert_eq!(r["targets"].as_array().unwrap().len(), 3);
    let r = s
        .patch(
            &format!("/v1/volume/targets/{t2}"),
            V,
            &json!([{"op": "replace", "path": "/boot_index", "value": 0}]),
        )
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (
            409,
            "A volume target with boot index '0' for the same node already exists.".into()
        )
    );
    let r = s
        .patch(
            &format!("/v1/volume/targets/{tu}"),
            V,
            &json!([{"op": "replace", "path": "/volume_id", "value": "vol-0009"}]),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["volume_id"], "vol-0009");
    power(s, &node, "power on").await;
    let r = s
        .patch(
            &format!("/v1/volume/targets/{tu}"),
            V,
            &json!([{"op": "replace", "path": "/volume_id", "value": "vol-0010"}]),
        )
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            format!(
                "The requested action \"volume target update\" can not be performed on node \"{node}\" while it is in state \"power on\"."
            )
        )
    );
    // Deletes are allowed powered on; a second is 404.
    assert_eq!(
        s.delete(&format!("/v1/volume/connectors/{cu}"), V)
            .await
            .status,
        204
    );
    assert_eq!(
        s.delete(&format!("/v1/volume/connectors/{cu}"), V)
            .await
            .status,
        404
    );
    assert_eq!(
        s.delete(&format!("/v1/volume/targets/{tu}"), V)
            .await
            .status,
        204
    );
    // The rest go with the node.
    let r = s
        .patch(
            "/v1/nodes/vol-node",
            V,
            &json!([{"op": "replace", "path": "/power_state", "value": "power off"}]),
        )
        .await;
    assert_eq!(r.status, 400, "power_state is read-only");
    assert_eq!(s.delete("/v1/nodes/vol-node", V).await.status, 204);
    assert_eq!(
        s.get("/v1/volume/targets", V).await.json(),
        json!({"targets": []})
    );
    assert_eq!(
        s.get("/v1/volume/connectors", V).await.json(),
        json!({"connectors": []})
    );
}

on_every_deployment!(volume_rest);
