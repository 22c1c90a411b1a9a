//! `POST /v1/events` (1.54): notifications from the networking service (a Neutron port
//! bound, unbound or deleted). Upstream checks them against its schema and records
//! them; so do we (a log line per event, target `ironic::events`), nothing else acts
//! on them yet.

use axum::extract::RawQuery;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use ironic_model::ids::canonical_uuid;
use ironic_model::patch::py_repr;
use ironic_model::port::normalize_mac;
use serde_json::{Map, Value};

use crate::Req;
use crate::body::JsonBody;
use crate::error::ApiError;
use crate::policy::{Authz, Policy};
use crate::query::Query;

const EVENT_TYPES: &[&str] = &[
    "network.bind_port",
    "network.unbind_port",
    "network.delete_port",
];

fn schema(msg: impl std::fmt::Display) -> ApiError {
    ApiError::invalid(format!("Schema error: {msg}"))
}

/// One event against upstream's schema.
fn check_event(e: &Value) -> Result<&Map<String, Value>, ApiError> {
    let Some(o) = e.as_object() else {
        return Err(schema(format_args!(
            "{} is not of type 'object'",
            py_repr(e)
        )));
    };
    for required in ["event", "port_id", "mac_address", "status"] {
        if !o.contains_key(required) {
            return Err(schema(format_args!("'{required}' is a required property")));
        }
    }
    for (k, v) in o {
        let text = v.as_str();
        let nullable = v.is_null();
        match k.as_str() {
            "event" if !text.is_some_and(|t| EVENT_TYPES.contains(&t)) => {
                return Err(schema(format_args!(
                    "{} is not one of ['network.bind_port', 'network.unbind_port', 'network.delete_port']",
                    py_repr(v)
                )));
            }
            "port_id" if text.and_then(canonical_uuid).is_none() => {
                return Err(schema(format_args!("{} is not a 'uuid'", py_repr(v))));
            }
            "mac_address" if text.and_then(normalize_mac).is_none() => {
                return Err(schema(format_args!(
                    "{} is not a 'mac-address'",
                    py_repr(v)
                )));
            }
            "status" if text.is_none() => {
                return Err(schema(format_args!(
                    "{} is not of type 'string'",
                    py_repr(v)
                )));
            }
            "device_id" | "binding:host_id"
                if !nullable && text.and_then(canonical_uuid).is_none() =>
            {
                return Err(schema(format_args!("{} is not a 'uuid'", py_repr(v))));
            }
            "binding:vnic_type" if !nullable && text.is_none() => {
                return Err(schema(format_args!(
                    "{} is not of type 'string', 'null'",
                    py_repr(v)
                )));
            }
            "event" | "port_id" | "mac_address" | "status" | "device_id" | "binding:host_id"
            | "binding:vnic_type" => {}
            other => {
                return Err(schema(format_args!(
                    "Additional properties are not allowed ('{other}' was unexpected)"
                )));
            }
        }
    }
    Ok(o)
}

pub async fn post(
    authz: Authz,
    req: Req,
    RawQuery(q): RawQuery,
    JsonBody(body): JsonBody,
) -> Result<Response, ApiError> {
    if !req.version.at_least(54) {
        return Err(ApiError::routing(StatusCode::NOT_FOUND, ""));
    }
    authz.check(Policy::EventsPost)?;
    Query::parse(q.as_deref())?.only(&[])?;
    let Some(o) = body.as_object() else {
        return Err(schema(format_args!(
            "{} is not of type 'object'",
            py_repr(&body)
        )));
    };
    if let Some(k) = o.keys().find(|k| *k != "events") {
        return Err(schema(format_args!(
            "Additional properties are not allowed ('{k}' was unexpected)"
        )));
    }
    let events = match o.get("events") {
        Some(Value::Array(a)) if !a.is_empty() => a,
        Some(Value::Array(_)) => return Err(schema("[] should be non-empty")),
        Some(v) => {
            return Err(schema(format_args!(
                "{} is not of type 'array'",
                py_repr(v)
            )));
        }
        None => return Err(schema("'events' is a required property")),
    };
    let checked = events
        .iter()
        .map(check_event)
        .collect::<Result<Vec<_>, _>>()?;
    for e in checked {
        tracing::info!(
            target: "ironic::events",
            event = e.get("event").and_then(serde_json::Value::as_str).unwrap_or(""),
            port_id = e.get("port_id").and_then(serde_json::Value::as_str).unwrap_or(""),
            status = e.get("status").and_then(serde_json::Value::as_str).unwrap_or(""),
            "network event"
        );
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}
