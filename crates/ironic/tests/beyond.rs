#![allow(clippy::unwrap_used)]
//! The node API above 1.62 (issue 17), microversion by microversion, against
//! upstream's samples (`upstream-samples-2`), on all three deployments.

mod common;

use common::Server;
use serde_json::json;

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

on_both_backends!(indicators);
