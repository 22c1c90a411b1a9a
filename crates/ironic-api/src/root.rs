//! Discovery documents: `GET /` and `GET /v1` (reference §2.3).

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use crate::{Base, Req, json_response};
use ironic_model::Version;

fn version_object(base: &str) -> Value {
    json!({
        "id": "v1",
        "links": [{"href": format!("{base}/v1/"), "rel": "self"}],
        "status": "CURRENT",
        "min_version": Version::MIN.to_string(),
        "version": Version::MAX.to_string(),
    })
}

fn pair(base: &str, name: &str) -> Value {
    json!([
        {"href": format!("{base}/v1/{name}/"), "rel": "self"},
        {"href": format!("{base}/{name}/"), "rel": "bookmark"},
    ])
}

pub async fn root(Base(base): Base) -> Response {
    let v = version_object(&base);
    json_response(
        StatusCode::OK,
        &json!({
            "name": "OpenStack Ironic API",
            "description": "Ironic is an OpenStack project which enables the provision and management of baremetal machines.",
            "default_version": v,
            "versions": [v],
        }),
    )
}

/// Lists only the resources we serve at the request's version.
pub async fn v1(req: Req, Base(base): Base) -> Response {
    let mut doc = serde_json::Map::new();
    doc.insert("id".into(), json!("v1"));
    doc.insert(
        "links".into(),
        json!([
            {"href": format!("{base}/v1/"), "rel": "self"},
            {"href": "https://docs.openstack.org//ironic/latest/contributor//webapi.html",
             "rel": "describedby", "type": "text/html"},
        ]),
    );
    doc.insert(
        "media_types".into(),
        json!({"base": "application/json", "type": "application/vnd.openstack.ironic.v1+json"}),
    );
    doc.insert("chassis".into(), pair(&base, "chassis"));
    doc.insert("nodes".into(), pair(&base, "nodes"));
    doc.insert("ports".into(), pair(&base, "ports"));
    doc.insert("drivers".into(), pair(&base, "drivers"));
    doc.insert("version".into(), version_object(&base));
    // Upstream's order (S002), not the versions'.
    if req.version.at_least(23) {
        doc.insert("portgroups".into(), pair(&base, "portgroups"));
    }
    if req.version.at_least(32) {
        doc.insert("volume".into(), pair(&base, "volume"));
    }
    if req.version.at_least(22) {
        doc.insert("lookup".into(), pair(&base, "lookup"));
        doc.insert("heartbeat".into(), pair(&base, "heartbeat"));
    }
    if req.version.at_least(49) {
        doc.insert("conductors".into(), pair(&base, "conductors"));
    }
    if req.version.at_least(52) {
        doc.insert("allocations".into(), pair(&base, "allocations"));
    }
    if req.version.at_least(54) {
        doc.insert("events".into(), pair(&base, "events"));
    }
    if req.version.at_least(55) {
        doc.insert("deploy_templates".into(), pair(&base, "deploy_templates"));
    }
    if req.version.at_least(82) {
        doc.insert("shards".into(), pair(&base, "shards"));
    }
    if req.version.at_least(92) {
        doc.insert("runbooks".into(), pair(&base, "runbooks"));
    }
    if req.version.at_least(96) {
        doc.insert("inspection_rules".into(), pair(&base, "inspection_rules"));
    }
    if req.version.at_least(84) {
        doc.insert(
            "continue_inspection".into(),
            pair(&base, "continue_inspection"),
        );
    }
    json_response(StatusCode::OK, &Value::Object(doc))
}
