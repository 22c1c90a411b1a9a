#![allow(clippy::unwrap_used)]
//! `/v1/ports` and `/v1/portgroups` against upstream's samples (shapes, field order,
//! version gates, errors), the rules tying ports to port groups, node deletion, and
//! concurrent creation with clashing addresses, on all three deployments.

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

fn uuid_of(v: &Value) -> String {
    v["uuid"].as_str().unwrap().to_string()
}

async fn port_rest(s: &Server) {
    let base = s.base();
    let a = s
        .node(json!({"driver": "fake-hardware", "name": "port-node-a"}))
        .await;
    let b = s
        .node(json!({"driver": "fake-hardware", "name": "port-node-b"}))
        .await;
    let (na, nb) = (uuid_of(&a), uuid_of(&b));

    // Create at 1.1: the fields of 1.1 only (S035).
    let r = s
        .post(
            "/v1/ports",
            "1.1",
            &json!({"address": "52:54:00:00:00:01", "node_uuid": na}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let p1 = r.json();
    let u1 = uuid_of(&p1);
    assert_eq!(
        keys(&p1),
        [
            "uuid",
            "created_at",
            "updated_at",
            "address",
            "extra",
            "node_uuid",
            "links"
        ]
    );
    assert_eq!(
        r.header("location"),
        Some(format!("{base}/v1/ports/{u1}").as_str())
    );
    assert_eq!(p1["links"], links(&base, &format!("ports/{u1}")));
    // Every field of 1.61, in upstream's order; the MAC is stored in lower case.
    let u2 = "9047f1ed-0a1b-4c2d-9e3f-4a5b6c7d8e9f";
    let r = s
        .post(
            "/v1/ports",
            V,
            &json!({"uuid": u2, "address": "52:54:00:00:00:0A", "node_uuid": na,
                    "physical_network": "physnet1", "pxe_enabled": false, "extra": {"slot": 2},
                    "local_link_connection": {"switch_id": "0a:1b:2c:3d:4e:5f",
                                              "port_id": "Ethernet1/2", "switch_info": "switch-1"}}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let p2 = r.json();
    assert_eq!(
        keys(&p2),
        [
            "uuid",
            "created_at",
            "updated_at",
            "address",
            "extra",
            "internal_info",
            "is_smartnic",
            "local_link_connection",
            "physical_network",
            "pxe_enabled",
            "node_uuid",
            "links",
            "portgroup_uuid"
        ]
    );
    assert_eq!(p2["address"], "52:54:00:00:00:0a");
    assert_eq!(p2["pxe_enabled"], false);
    assert_eq!(p2["internal_info"], json!({}));
    assert_eq!(p2["portgroup_uuid"], Value::Null);
    // A smart NIC names its host instead of a switch (S038); without a link it is
    // accepted too (S048).
    let r = s
        .post(
            "/v1/ports",
            V,
            &json!({"address": "52:54:00:00:00:03", "node_uuid": nb, "is_smartnic": true,
                    "local_link_connection": {"port_id": "rep0-0", "hostname": "host-b"}}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.json()["is_smartnic"], true);
    let r = s
        .post(
            "/v1/ports",
            V,
            &json!({"address": "52:54:00:00:00:04", "node_uuid": nb, "is_smartnic": true}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);

    // Refusals, with upstream's messages.
    let bad = |body: Value| async move { s.post("/v1/ports", V, &body).await };
    let r = bad(json!({"address": "not-a-mac", "node_uuid": na})).await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            "Expected valid MAC address for address: not-a-mac".into()
        )
    );
    let r = bad(json!({"address": "52:54:00:00:00:01", "node_uuid": nb})).await;
    assert_eq!(
        (r.status, r.fault()),
        (
            409,
            "A port with MAC address 52:54:00:00:00:01 already exists.".into()
        )
    );
    let r = bad(json!({"uuid": u2, "address": "52:54:00:00:00:09", "node_uuid": na})).await;
    assert_eq!(
        (r.status, r.fault()),
        (409, format!("A port with UUID {u2} already exists."))
    );
    let r = bad(json!({"node_uuid": na})).await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            "Schema error for port: 'address' is a required property".into()
        )
    );
    let r = bad(json!({"address": "52:54:00:00:00:10"})).await;
    assert_eq!(r.status, 400, "no node");
    let r = bad(json!({"address": "52:54:00:00:00:10", "node_uuid": "11111111-2222-3333-4444-555555555555"})).await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            "Node 11111111-2222-3333-4444-555555555555 could not be found.".into()
        )
    );
    let r =
        bad(json!({"address": "52:54:00:00:00:10", "node_uuid": na, "physical_network": ""})).await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            "A non-empty value is required when setting physical_network".into()
        )
    );
    let r = bad(json!({"address": "52:54:00:00:00:10", "node_uuid": na, "physical_network": "p".repeat(65)})).await;
    assert_eq!(r.status, 400);
    assert!(
        r.fault().starts_with("Schema error for port: 'ppp"),
        "{}",
        r.fault()
    );
    let r = bad(json!({"address": "52:54:00:00:00:10", "node_uuid": na,
                       "local_link_connection": {"switch_id": "0a:1b:2c:3d:4e:5f", "port_id": "e1", "colour": "red"}})).await;
    assert_eq!(r.status, 400);
    assert!(
        r.fault()
            .ends_with("Additional properties are not allowed ('colour' was unexpected)"),
        "{}",
        r.fault()
    );
    let r = bad(json!({"address": "52:54:00:00:00:10", "node_uuid": na,
                       "local_link_connection": {"switch_id": "switch-1", "port_id": "e1"}}))
    .await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            "Expected a MAC address or OpenFlow datapath ID but received switch-1.".into()
        )
    );
    let r =
        bad(json!({"address": "52:54:00:00:00:10", "node_uuid": na, "internal_info": {}})).await;
    assert_eq!(r.status, 400, "internal_info is read-only");
    // Fields newer than the request: 406 (name 1.88, node_ident 1.94, network_type 1.64).
    for body in [
        json!({"address": "52:54:00:00:00:10", "node_uuid": na, "name": "p"}),
        json!({"address": "52:54:00:00:00:10", "node_ident": "port-node-a"}),
        json!({"address": "52:54:00:00:00:10", "node_uuid": na,
               "local_link_connection": {"network_type": "unmanaged"}}),
    ] {
        assert_eq!(bad(body).await.status, 406);
    }
    let r = s
        .post(
            "/v1/ports",
            "1.52",
            &json!({"address": "52:54:00:00:00:10", "node_uuid": na, "is_smartnic": true}),
        )
        .await;
    assert_eq!(r.status, 406, "is_smartnic is 1.53");

    // Read one: by uuid, with fields, at older versions; 404.
    let r = s.get(&format!("/v1/ports/{u2}"), V).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json(), p2);
    let r = s.get(&format!("/v1/ports/{u2}"), "1.18").await;
    assert_eq!(keys(&r.json()).last(), Some(&"links"));
    assert!(r.json().get("internal_info").is_some() && r.json().get("pxe_enabled").is_none());
    let r = s
        .get(&format!("/v1/ports/{u2}?fields=uuid,physical_network"), V)
        .await;
    assert_eq!(keys(&r.json()), ["uuid", "physical_network", "links"]);
    assert_eq!(
        s.get(&format!("/v1/ports/{u2}?fields=vendor"), V)
            .await
            .status,
        406
    );
    assert_eq!(
        s.get(&format!("/v1/ports/{u2}?fields=colour"), V)
            .await
            .status,
        400
    );
    let r = s
        .get("/v1/ports/11111111-2222-3333-4444-555555555555", V)
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (
            404,
            "Port 11111111-2222-3333-4444-555555555555 could not be found.".into()
        )
    );

    // Lists: default fields, detail, pages, sort, filters.
    let r = s.get("/v1/ports", V).await.json();
    assert_eq!(r["ports"].as_array().unwrap().len(), 4);
    assert_eq!(keys(&r["ports"][0]), ["uuid", "address", "links"]);
    let d = s.get("/v1/ports/detail?limit=2", V).await.json();
    assert_eq!(d["ports"][1], p2);
    assert_eq!(
        d["next"],
        format!("{base}/v1/ports/detail?sort_key=id&sort_dir=asc&limit=2&marker={u2}")
    );
    let page = s.get("/v1/ports?limit=2", V).await.json();
    let next = page["next"].as_str().unwrap();
    assert_eq!(
        next,
        format!("{base}/v1/ports?sort_key=id&sort_dir=asc&fields=uuid,address&limit=2&marker={u2}")
    );
    let rest = s.get(next.strip_prefix(&base).unwrap(), V).await.json();
    assert_eq!(rest["ports"].as_array().unwrap().len(), 2);
    // A full page always links the next one, which is empty here.
    let end = rest["next"]
        .as_str()
        .unwrap()
        .strip_prefix(&base)
        .unwrap()
        .to_string();
    let end = s.get(&end, V).await.json();
    assert_eq!(end["ports"], json!([]));
    assert!(end.get("next").is_none());
    let desc = s
        .get("/v1/ports?sort_key=address&sort_dir=desc", V)
        .await
        .json();
    let addrs: Vec<&str> = desc["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["address"].as_str().unwrap())
        .collect();
    assert_eq!(
        addrs,
        [
            "52:54:00:00:00:0a",
            "52:54:00:00:00:04",
            "52:54:00:00:00:03",
            "52:54:00:00:00:01"
        ]
    );
    let r = s.get("/v1/ports?sort_key=local_link_connection", V).await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            "The sort_key value local_link_connection is an invalid field for sorting".into()
        )
    );
    let by_node = s.get("/v1/ports?node=port-node-b", V).await.json();
    assert_eq!(by_node["ports"].as_array().unwrap().len(), 2);
    let by_uuid = s.get(&format!("/v1/ports?node_uuid={na}"), V).await.json();
    assert_eq!(by_uuid["ports"].as_array().unwrap().len(), 2);
    let r = s.get("/v1/ports?node=no-such-node", V).await;
    assert_eq!(
        (r.status, r.fault()),
        (404, "Node no-such-node could not be found.".into())
    );
    let by_addr = s.get("/v1/ports?address=52:54:00:00:00:0A", V).await.json();
    assert_eq!(by_addr["ports"][0]["uuid"], u2);
    assert_eq!(s.get("/v1/ports?address=not-a-mac", V).await.status, 400);
    let r = s.get("/v1/ports?detail=true&fields=uuid", V).await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            "Can not specify ?detail=True and fields in the same request.".into()
        )
    );
    assert_eq!(s.get("/v1/ports?shard=a", V).await.status, 406);
    assert_eq!(s.get("/v1/ports?detail=true", "1.42").await.status, 406);

    // Under a node, by uuid or name (upstream answers 404 for a name; clients pass
    // names).
    let under = s.get(&format!("/v1/nodes/{na}/ports"), V).await.json();
    assert_eq!(under["ports"].as_array().unwrap().len(), 2);
    let under = s.get("/v1/nodes/port-node-b/ports/detail", V).await.json();
    assert_eq!(under["ports"][0]["node_uuid"], nb);
    assert_eq!(s.get("/v1/nodes/no-such-node/ports", V).await.status, 404);
    let r = s.get(&format!("/v1/nodes/{na}/ports/{u1}"), V).await;
    assert_eq!(
        (r.status, r.fault()),
        (400, "Malformed request URI.".into())
    );

    // PATCH.
    let r = s
        .patch(
            &format!("/v1/ports/{u1}"),
            V,
            &json!([
        {"op": "replace", "path": "/address", "value": "52:54:00:00:00:05"},
        {"op": "add", "path": "/extra/rack", "value": "r1"}]),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["address"], "52:54:00:00:00:05");
    assert_eq!(r.json()["extra"], json!({"rack": "r1"}));
    assert!(r.json()["updated_at"].is_string());
    let r = s
        .patch(
            &format!("/v1/ports/{u1}"),
            V,
            &json!([{"op": "replace", "path": "/address", "value": "52:54:00:00:00:0a"}]),
        )
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (
            409,
            "A port with MAC address 52:54:00:00:00:0a already exists.".into()
        )
    );
    let r = s
        .patch(
            &format!("/v1/ports/{u1}"),
            V,
            &json!([{"op": "replace", "path": "/physical_network", "value": ""}]),
        )
        .await;
    assert_eq!(r.status, 400);
    let r = s.patch(&format!("/v1/ports/{u1}"), V, &json!([{"op": "replace", "path": "/node_uuid", "value": "11111111-2222-3333-4444-555555555555"}])).await;
    assert_eq!((r.status, r.fault()), (400, "Unable to apply the requested node_uuid '11111111-2222-3333-4444-555555555555'. Requested value was invalid.".into()));
    let r = s.patch(&format!("/v1/ports/{u1}"), V, &json!([{"op": "add", "path": "/local_link_connection/network_type", "value": "unmanaged"}])).await;
    assert_eq!(r.status, 406);
    let r = s
        .patch(
            &format!("/v1/ports/{u1}"),
            V,
            &json!([{"op": "replace", "path": "/internal_info", "value": {}}]),
        )
        .await;
    assert_eq!(r.status, 400);
    let r = s
        .patch(
            "/v1/ports/11111111-2222-3333-4444-555555555555",
            V,
            &json!([{"op": "add", "path": "/extra/a", "value": 1}]),
        )
        .await;
    assert_eq!(r.status, 404);
    // Moving a port to another node (upstream answers 500).
    let r = s
        .patch(
            &format!("/v1/ports/{u1}"),
            V,
            &json!([{"op": "replace", "path": "/node_uuid", "value": nb}]),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["node_uuid"], nb);
    assert_eq!(
        s.get("/v1/ports?node=port-node-b", V).await.json()["ports"]
            .as_array()
            .unwrap()
            .len(),
        3
    );

    // DELETE by uuid only.
    let r = s.delete("/v1/ports/port-a2", V).await;
    assert_eq!(
        (r.status, r.fault()),
        (400, "Expected UUID for port_uuid: port-a2".into())
    );
    assert_eq!(s.delete(&format!("/v1/ports/{u1}"), V).await.status, 204);
    assert_eq!(s.delete(&format!("/v1/ports/{u1}"), V).await.status, 404);

    // Discovery.
    let v1 = s.get("/v1", V).await.json();
    assert_eq!(v1["ports"], links(&base, "ports/"));
    assert_eq!(v1["portgroups"], links(&base, "portgroups/"));
    assert!(
        s.get("/v1", "1.22")
            .await
            .json()
            .get("portgroups")
            .is_none()
    );

    // A node's ports and port groups go with it.
    let g = s
        .post(
            "/v1/portgroups",
            V,
            &json!({"node_uuid": nb, "name": "gone"}),
        )
        .await;
    assert_eq!(g.status, 201, "{}", g.body);
    assert_eq!(s.delete("/v1/nodes/port-node-b", V).await.status, 204);
    assert_eq!(s.get("/v1/portgroups/gone", V).await.status, 404);
    let all = s.get("/v1/ports", V).await.json();
    assert_eq!(all["ports"].as_array().unwrap().len(), 1, "{all}");
}

async fn portgroup_rest(s: &Server) {
    let base = s.base();
    let a = s
        .node(json!({"driver": "fake-hardware", "name": "pg-node-a"}))
        .await;
    let b = s
        .node(json!({"driver": "fake-hardware", "name": "pg-node-b"}))
        .await;
    let (na, nb) = (uuid_of(&a), uuid_of(&b));

    // 1.23: node only; below it the API does not exist.
    let r = s
        .post("/v1/portgroups", "1.23", &json!({"node_uuid": na}))
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let g1 = r.json();
    assert_eq!(
        keys(&g1),
        [
            "uuid",
            "created_at",
            "updated_at",
            "address",
            "extra",
            "internal_info",
            "name",
            "standalone_ports_supported",
            "node_uuid",
            "links"
        ]
    );
    let r = s
        .post("/v1/portgroups", "1.22", &json!({"node_uuid": na}))
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (404, "The API is not supported for this version".into())
    );
    let r = s
        .post(
            "/v1/portgroups",
            "1.25",
            &json!({"node_uuid": na, "mode": "802.3ad"}),
        )
        .await;
    assert_eq!(r.status, 406);
    // Every field of 1.61.
    let gu = "96e0f1a2-b3c4-4d5e-8f6a-7b8c9d0e1f2a";
    let r = s
        .post(
            "/v1/portgroups",
            V,
            &json!({"uuid": gu, "node_uuid": na, "name": "bond0", "address": "52:54:00:00:10:00",
                    "mode": "802.3ad", "properties": {"miimon": "100"},
                    "standalone_ports_supported": false, "extra": {"team": "net"}}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let g2 = r.json();
    assert_eq!(
        keys(&g2),
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
            "links",
            "ports"
        ]
    );
    assert_eq!(g2["mode"], "802.3ad");
    assert_eq!(g2["ports"], links(&base, &format!("portgroups/{gu}/ports")));
    assert_eq!(g1.get("mode"), None);
    let r = s
        .get(&format!("/v1/portgroups/{}", uuid_of(&g1)), V)
        .await
        .json();
    assert_eq!(r["mode"], "active-backup");
    // Refusals.
    let r = s
        .post(
            "/v1/portgroups",
            V,
            &json!({"node_uuid": na, "name": "bad name!"}),
        )
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            "Cannot create portgroup with invalid name 'bad name!'".into()
        )
    );
    let r = s
        .post(
            "/v1/portgroups",
            V,
            &json!({"node_uuid": nb, "name": "bond0"}),
        )
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (409, "A portgroup with name bond0 already exists.".into())
    );
    let r = s
        .post(
            "/v1/portgroups",
            V,
            &json!({"node_uuid": nb, "address": "52:54:00:00:10:00"}),
        )
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (
            409,
            "A portgroup with MAC address 52:54:00:00:10:00 already exists.".into()
        )
    );
    let r = s
        .post(
            "/v1/portgroups",
            V,
            &json!({"node_uuid": "11111111-2222-3333-4444-555555555555"}),
        )
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            "Node 11111111-2222-3333-4444-555555555555 could not be found.".into()
        )
    );
    let r = s
        .post(
            "/v1/portgroups",
            V,
            &json!({"node_uuid": na, "dynamic_portgroup": true}),
        )
        .await;
    assert_eq!((r.status, r.fault()), (400, "Schema error for portgroup: Additional properties are not allowed ('dynamic_portgroup' was unexpected)".into()));
    // Read: by name, fields, 404, 1.22.
    let r = s.get("/v1/portgroups/bond0", V).await;
    assert_eq!(r.json(), g2);
    let r = s.get("/v1/portgroups/bond0?fields=uuid,mode", V).await;
    assert_eq!(keys(&r.json()), ["uuid", "mode", "links"]);
    let r = s.get("/v1/portgroups/no-such-pg", V).await;
    assert_eq!(
        (r.status, r.fault()),
        (404, "Portgroup no-such-pg could not be found.".into())
    );
    assert_eq!(s.get("/v1/portgroups/bond0", "1.22").await.status, 404);
    // Lists.
    let l = s.get("/v1/portgroups", V).await.json();
    assert_eq!(
        keys(&l["portgroups"][1]),
        ["uuid", "address", "name", "links"]
    );
    let d = s.get("/v1/portgroups/detail", V).await.json();
    assert_eq!(d["portgroups"][1], g2);
    let byn = s.get("/v1/portgroups?node=pg-node-a", V).await.json();
    assert_eq!(byn["portgroups"].as_array().unwrap().len(), 2);
    let r = s
        .get(
            &format!("/v1/portgroups?node={na}&address=52:54:00:00:10:00"),
            V,
        )
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            "Filtering by node, address, or shard simultaneously is not supported.".into()
        )
    );
    let under = s.get("/v1/nodes/pg-node-a/portgroups", V).await.json();
    assert_eq!(under["portgroups"].as_array().unwrap().len(), 2);
    let r = s.get(&format!("/v1/nodes/{na}/portgroups"), "1.23").await;
    assert_eq!(r.status, 404);

    // Members: the group's physical network, standalone ports, same node.
    let r = s
        .patch(
            "/v1/portgroups/bond0",
            V,
            &json!([{"op": "add", "path": "/extra/x", "value": 1}]),
        )
        .await;
    assert_eq!(r.status, 200);
    let r = s
        .post(
            "/v1/ports",
            V,
            &json!({"address": "52:54:00:00:20:01", "node_uuid": na,
                                      "portgroup_uuid": gu, "pxe_enabled": false,
                                      "physical_network": "physnet1"}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let m1 = uuid_of(&r.json());
    assert_eq!(r.json()["portgroup_uuid"], gu);
    let r = s
        .post(
            "/v1/ports",
            V,
            &json!({"address": "52:54:00:00:20:02", "node_uuid": na,
                                      "portgroup_uuid": gu, "pxe_enabled": false}),
        )
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (
            409,
            format!(
                "Port with physical network None cannot become a member of port group {gu} which has ports in physical network physnet1."
            )
        )
    );
    let r = s
        .post(
            "/v1/ports",
            V,
            &json!({"address": "52:54:00:00:20:02", "node_uuid": na,
                                      "portgroup_uuid": gu, "physical_network": "physnet1"}),
        )
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (
            409,
            format!(
                "Port group {gu} doesn't support standalone ports. This port cannot be created as a member of that portgroup as the port's 'pxe_enabled' field was set to True."
            )
        )
    );
    let r = s
        .post(
            "/v1/ports",
            V,
            &json!({"address": "52:54:00:00:20:02", "node_uuid": nb, "portgroup_uuid": gu}),
        )
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            "Port can not be added to a portgroup belonging to a different node.".into()
        )
    );
    let r = s
        .post(
            "/v1/ports",
            V,
            &json!({"address": "52:54:00:00:20:02", "node_uuid": na, "portgroup_uuid": "bond0"}),
        )
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (400, "Expected UUID for portgroup_uuid: bond0".into())
    );
    let r = s
        .post(
            "/v1/ports",
            V,
            &json!({"address": "52:54:00:00:20:02", "node_uuid": na,
                                      "portgroup_uuid": "11111111-2222-3333-4444-555555555555"}),
        )
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            "Portgroup 11111111-2222-3333-4444-555555555555 could not be found.".into()
        )
    );
    // The group's members, by uuid or name, and the port filter.
    let mem = s.get(&format!("/v1/portgroups/{gu}/ports"), V).await.json();
    assert_eq!(mem["ports"].as_array().unwrap().len(), 1);
    let mem = s.get("/v1/portgroups/bond0/ports/detail", V).await.json();
    assert_eq!(mem["ports"][0]["uuid"], m1.as_str());
    assert_eq!(
        s.get("/v1/ports?portgroup=bond0", V).await.json()["ports"][0]["uuid"],
        m1.as_str()
    );
    let r = s
        .get(&format!("/v1/ports?portgroup=bond0&node={na}"), V)
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (403, "Operation not permitted.".into())
    );
    assert_eq!(
        s.get(&format!("/v1/portgroups/{gu}/ports"), "1.23")
            .await
            .status,
        404
    );
    // A member's physical network is the group's.
    let r = s
        .patch(
            &format!("/v1/ports/{m1}"),
            V,
            &json!([{"op": "replace", "path": "/physical_network", "value": "physnet2"}]),
        )
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            "physical_network cannot be changed while the port belongs to a portgroup.".into()
        )
    );
    // Leaving and joining.
    let r = s
        .patch(
            &format!("/v1/ports/{m1}"),
            V,
            &json!([{"op": "remove", "path": "/portgroup_uuid"}]),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["portgroup_uuid"], Value::Null);
    let r = s
        .patch(
            &format!("/v1/ports/{m1}"),
            V,
            &json!([{"op": "add", "path": "/portgroup_uuid", "value": gu}]),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["portgroup_uuid"], gu);
    // The group's PATCH: mode and name; mode cannot go; a bad name is refused.
    let r = s.patch("/v1/portgroups/bond0", V, &json!([{"op": "replace", "path": "/mode", "value": "balance-rr"},
                                                      {"op": "replace", "path": "/name", "value": "bond0-renamed"}])).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        (r.json()["mode"].clone(), r.json()["name"].clone()),
        (json!("balance-rr"), json!("bond0-renamed"))
    );
    let r = s
        .patch(
            "/v1/portgroups/bond0-renamed",
            V,
            &json!([{"op": "remove", "path": "/mode"}]),
        )
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            "'mode' is a mandatory attribute and can not be removed".into()
        )
    );
    let r = s
        .patch(
            "/v1/portgroups/bond0-renamed",
            V,
            &json!([{"op": "replace", "path": "/name", "value": "bad name!"}]),
        )
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            "Portgroup bond0-renamed: Cannot change name to invalid name 'bad name!'".into()
        )
    );
    // Deleting: not while it has ports; by name once empty.
    let r = s.delete(&format!("/v1/portgroups/{gu}"), V).await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            format!("Cannot complete the requested action because portgroup {gu} contains ports.")
        )
    );
    assert_eq!(s.delete(&format!("/v1/ports/{m1}"), V).await.status, 204);
    assert_eq!(
        s.delete("/v1/portgroups/bond0-renamed", V).await.status,
        204
    );
    assert_eq!(
        s.delete("/v1/portgroups/bond0-renamed", V).await.status,
        404
    );
}

/// 16 clients create ports with 4 addresses: exactly one wins each address, the
/// others get 409, and the table holds one port per address.
async fn clashing_addresses(s: &Server) {
    let n = s
        .node(json!({"driver": "fake-hardware", "name": "race"}))
        .await;
    let node = uuid_of(&n);
    let mut tasks = Vec::new();
    for i in 0..16 {
        let addr = s.addr;
        let node = node.clone();
        tasks.push(tokio::spawn(async move {
            let srv = Server {
                running: None,
                addr,
                testdb: None,
                conductor: None,
                bus: None,
            };
            let body = json!({"address": format!("52:54:00:00:30:0{}", i % 4), "node_uuid": node});
            // Bounded retries: the node lock is contended, and a 409 NodeLocked is a
            // legitimate answer; only the address clash is the outcome under test.
            let mut last = 0;
            for _ in 0..20 {
                let r = srv.post("/v1/ports", V, &body).await;
                last = r.status;
                if !(r.status == 409 && r.fault().contains("is locked")) {
                    break;
                }
            }
            last
        }));
    }
    let mut codes = Vec::new();
    for t in tasks {
        codes.push(t.await.unwrap());
    }
    codes.sort_unstable();
    assert_eq!(codes.iter().filter(|c| **c == 201).count(), 4, "{codes:?}");
    assert!(codes.iter().all(|c| *c == 201 || *c == 409), "{codes:?}");
    let l = s
        .get("/v1/ports?node=race&sort_key=address", V)
        .await
        .json();
    let addrs: Vec<&str> = l["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["address"].as_str().unwrap())
        .collect();
    assert_eq!(
        addrs,
        [
            "52:54:00:00:30:00",
            "52:54:00:00:30:01",
            "52:54:00:00:30:02",
            "52:54:00:00:30:03"
        ]
    );
}

/// VIFs: `noop` records nothing; `flat` records each VIF on a free port or port group,
/// port groups first, then PXE-enabled ports.
async fn vifs(s: &Server) {
    s.node(json!({"driver": "fake-hardware", "name": "vif-noop"}))
        .await;
    let r = s.get("/v1/nodes/vif-noop/vifs", V).await;
    assert_eq!((r.status, r.json()), (200, json!({"vifs": []})));
    let vif = "bf1b1e3a-7c6d-4e5f-9a8b-0c1d2e3f4a5b";
    assert_eq!(
        s.post("/v1/nodes/vif-noop/vifs", V, &json!({"id": vif}))
            .await
            .status,
        204
    );
    assert_eq!(
        s.get("/v1/nodes/vif-noop/vifs", V).await.json(),
        json!({"vifs": []})
    );
    assert_eq!(
        s.delete(&format!("/v1/nodes/vif-noop/vifs/{vif}"), V)
            .await
            .status,
        204
    );
    let r = s
        .post("/v1/nodes/vif-noop/vifs", V, &json!({"port_uuid": "x"}))
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            "Schema error for vif: 'id' is a required property".into()
        )
    );
    assert_eq!(s.get("/v1/nodes/vif-noop/vifs", "1.27").await.status, 404);
    assert_eq!(s.get("/v1/nodes/no-such-node/vifs", V).await.status, 404);

    let n = s
        .node(json!({"driver": "fake-hardware", "name": "vif-flat", "network_interface": "flat"}))
        .await;
    let node = uuid_of(&n);
    assert_eq!(n["network_interface"], "flat");
    let port =
        |addr: &str, pxe: bool| json!({"address": addr, "node_uuid": node, "pxe_enabled": pxe});
    let r = s
        .post("/v1/ports", V, &port("52:54:00:00:40:01", false))
        .await;
    let plain = uuid_of(&r.json());
    let r = s
        .post("/v1/ports", V, &port("52:54:00:00:40:02", true))
        .await;
    let pxe = uuid_of(&r.json());
    let r = s
        .post(
            "/v1/portgroups",
            V,
            &json!({"node_uuid": node, "name": "vif-bond"}),
        )
        .await;
    let group = uuid_of(&r.json());
    let mut member = port("52:54:00:00:40:03", false);
    member["portgroup_uuid"] = json!(group);
    assert_eq!(s.post("/v1/ports", V, &member).await.status, 201);
    // The group first, then the PXE-enabled port, then the one named.
    assert_eq!(
        s.post("/v1/nodes/vif-flat/vifs", V, &json!({"id": "vif-1"}))
            .await
            .status,
        204
    );
    let g = s.get(&format!("/v1/portgroups/{group}"), V).await.json();
    assert_eq!(g["internal_info"], json!({"tenant_vif_port_id": "vif-1"}));
    assert_eq!(
        s.post("/v1/nodes/vif-flat/vifs", V, &json!({"id": "vif-2"}))
            .await
            .status,
        204
    );
    let p = s.get(&format!("/v1/ports/{pxe}"), V).await.json();
    assert_eq!(p["internal_info"]["tenant_vif_port_id"], "vif-2");
    let r = s
        .post("/v1/nodes/vif-flat/vifs", V, &json!({"id": "vif-1"}))
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (
            409,
            format!(
                "Unable to attach VIF because VIF vif-1 is already attached to Ironic Portgroup {group}"
            )
        )
    );
    let r = s
        .post(
            "/v1/nodes/vif-flat/vifs",
            V,
            &json!({"id": "vif-3", "port_uuid": plain}),
        )
        .await;
    assert_eq!(r.status, 204, "{}", r.body);
    let r = s
        .post("/v1/nodes/vif-flat/vifs", V, &json!({"id": "vif-4"}))
        .await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            "Unable to attach VIF vif-4, not enough free physical ports.".into()
        )
    );
    let mut listed: Vec<String> = s.get("/v1/nodes/vif-flat/vifs", V).await.json()["vifs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["id"].as_str().unwrap().to_string())
        .collect();
    listed.sort();
    assert_eq!(listed, ["vif-1", "vif-2", "vif-3"]);
    // A port bound to a VIF stays until the VIF goes (or in maintenance).
    let r = s.delete(&format!("/v1/ports/{pxe}"), V).await;
    assert_eq!(r.status, 409, "{}", r.body);
    let r = s.delete("/v1/nodes/vif-flat/vifs/vif-9", V).await;
    assert_eq!(
        (r.status, r.fault()),
        (
            400,
            format!(
                "Unable to detach VIF vif-9 from node {node} because it is not attached to it."
            )
        )
    );
    assert_eq!(
        s.delete("/v1/nodes/vif-flat/vifs/vif-2", V).await.status,
        204
    );
    assert_eq!(
        s.get(&format!("/v1/ports/{pxe}"), V).await.json()["internal_info"],
        json!({})
    );
    assert_eq!(s.delete(&format!("/v1/ports/{pxe}"), V).await.status, 204);
    // Both a port and a group: refused from 1.67 only (above our maximum, so accepted,
    // the port winning as upstream).
    let r = s
        .post(
            "/v1/nodes/vif-flat/vifs",
            V,
            &json!({"id": "vif-5", "port_uuid": plain, "portgroup_uuid": group}),
        )
        .await;
    assert_eq!(r.status, 400, "the named port is taken: {}", r.body);
}

/// Two VIFs race for a node's one free port: one wins, the other is told there is no
/// free port, and the port carries exactly one VIF.
async fn vif_race(s: &Server) {
    let n = s
        .node(json!({"driver": "fake-hardware", "name": "vif-race", "network_interface": "flat"}))
        .await;
    let node = uuid_of(&n);
    let r = s
        .post(
            "/v1/ports",
            V,
            &json!({"address": "52:54:00:00:50:01", "node_uuid": node}),
        )
        .await;
    let port = uuid_of(&r.json());
    let mut tasks = Vec::new();
    for i in 0..2 {
        let addr = s.addr;
        tasks.push(tokio::spawn(async move {
            let srv = Server {
                running: None,
                addr,
                testdb: None,
                conductor: None,
                bus: None,
            };
            let mut last = (0, String::new());
            for _ in 0..20 {
                let r = srv
                    .post(
                        "/v1/nodes/vif-race/vifs",
                        V,
                        &json!({"id": format!("race-{i}")}),
                    )
                    .await;
                let fault = if r.status >= 400 {
                    r.fault()
                } else {
                    String::new()
                };
                last = (r.status, fault);
                if !(last.0 == 409 && last.1.contains("is locked")) {
                    break;
                }
            }
            last
        }));
    }
    let mut codes = Vec::new();
    for t in tasks {
        codes.push(t.await.unwrap());
    }
    codes.sort();
    assert_eq!(codes[0].0, 204, "{codes:?}");
    assert_eq!(codes[1].0, 400, "{codes:?}");
    assert!(
        codes[1].1.contains("not enough free physical ports"),
        "{codes:?}"
    );
    let p = s.get(&format!("/v1/ports/{port}"), V).await.json();
    let vif = p["internal_info"]["tenant_vif_port_id"].as_str().unwrap();
    assert!(vif.starts_with("race-"));
    let listed = s.get("/v1/nodes/vif-race/vifs", V).await.json();
    assert_eq!(listed, json!({"vifs": [{"id": vif}]}));
}

on_every_deployment!(
    port_rest,
    portgroup_rest,
    clashing_addresses,
    vifs,
    vif_race
);
