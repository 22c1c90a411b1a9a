//! The ramdisk agent's endpoints (1.22): `GET /v1/lookup` finds the agent's node by its
//! MAC addresses (or UUID) and hands it its configuration and, from 1.62, its token;
//! `POST /v1/heartbeat/{node}` tells the node's conductor (`ironic-conductor`
//! `agent.rs`) that the agent is alive. Both are public routes (the agent has no
//! credentials; the token is its proof) unless `[api] enable_ramdisk_endpoints` is
//! false, and a lookup finds only nodes waiting for a ramdisk (`[api] restrict_lookup`).

use axum::extract::{OriginalUri, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use ironic_model::node::parse_fields;
use ironic_model::patch::py_repr;
use ironic_model::{Error, Node, agent};
use ironic_rpc::NodeRef;
use ironic_rpc::calls::{GetNodeWithToken, Heartbeat};
use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::body::{JsonBody, P};
use crate::error::ApiError;
use crate::nodes::load_node;
use crate::policy::{Authz, Policy};
use crate::query::Query;
use crate::view::{NodeView, ViewCtx};
use crate::{AppState, Base, Req, json_response};

type ApiResult = Result<Response, ApiError>;

/// What `[api]` says about the ramdisk endpoints.
#[derive(Debug, Clone)]
pub struct RamdiskSettings {
    pub enabled: bool,
    pub restrict_lookup: bool,
    pub heartbeat_timeout: u64,
}

/// Turned off, refused (403, upstream's message naming the path); below 1.22, not found
/// (upstream's handler raises a plain not-found, not the routing one).
fn gate(st: &AppState, req: &Req, uri: &OriginalUri) -> Result<(), ApiError> {
    if !st.settings.ramdisk.enabled {
        return Err(Error::Forbidden(format!(
            "Access was denied to the following resource: {}",
            uri.0.path()
        ))
        .into());
    }
    if !req.version.at_least(22) {
        return Err(not_found());
    }
    Ok(())
}

/// The one answer for "no such node" and "not in a state to be looked up", so that a
/// caller without credentials learns nothing from the difference.
fn not_found() -> ApiError {
    Error::NotFound("Resource could not be found.".into()).into()
}

/// The fields of the node a lookup returns (and `links`).
const LOOKUP_FIELDS: &str = "uuid,properties,instance_info,driver_internal_info";

pub async fn lookup(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    Base(base): Base,
    uri: OriginalUri,
    RawQuery(q): RawQuery,
) -> ApiResult {
    gate(&st, &req, &uri)?;
    authz.check(Policy::IpaLookup)?;
    let q = Query::parse(q.as_deref())?;
    q.only(&["addresses", "node_uuid"])?;
    let node_uuid = match q.get("node_uuid") {
        None => None,
        Some(s) => Some(
            ironic_model::ids::canonical_uuid(s)
                .ok_or_else(|| ApiError::invalid(format!("Expected UUID for node_uuid: {s}")))?,
        ),
    };
    let mut addresses = Vec::new();
    let mut ignored = Vec::new();
    for a in q.get("addresses").unwrap_or_default().split(',') {
        let a = a.trim();
        if a.is_empty() {
            continue;
        }
        match ironic_model::port::normalize_mac(a) {
            Some(mac) if !addresses.contains(&mac) => addresses.push(mac),
            Some(_) => {}
            None => ignored.push(a),
        }
    }
    if !ignored.is_empty() {
        tracing::warn!(
            addresses = %ironic_model::secrets::mask_text(&ignored.join(", ")),
            "invalid MAC addresses in a lookup, ignored"
        );
    }
    if addresses.is_empty() && node_uuid.is_none() {
        return Err(ApiError::invalid(
            "At least one of 'addresses' and 'node_uuid' parameters is required",
        ));
    }
    let found = match &node_uuid {
        Some(u) => st.db.node_by_uuid(u).await?,
        None => match st.db.node_ids_by_port_addresses(&addresses).await?[..] {
            [id] => st.db.node_by_id(id).await?,
            [] => None,
            _ => {
                tracing::error!(?addresses, "lookup: several nodes have these addresses");
                None
            }
        },
    };
    let Some(node) = found else {
        tracing::error!(?addresses, ?node_uuid, "lookup: no node found");
        return Err(not_found());
    };
    if st.settings.ramdisk.restrict_lookup && !agent::lookup_allowed(node.provision_state) {
        tracing::error!(node = %node.uuid, state = %node.provision_state, "lookup of a node in a state that takes no ramdisk");
        return Err(not_found());
    }
    let (node, token) = if req.version.at_least(62) {
        let node = st
            .conductor
            .call(
                &req.ctx,
                GetNodeWithToken {
                    node: NodeRef::from(&node),
                },
            )
            .await?;
        let token = node.driver_internal_info.get(agent::TOKEN).cloned();
        (node, token.unwrap_or(Value::Null))
    } else {
        // Older agents know no token. Upstream would show a stored one to any caller;
        // here it shows masked.
        let token = node
            .driver_internal_info
            .contains_key(agent::TOKEN)
            .then(|| json!(ironic_model::secrets::MASK));
        (node, token.unwrap_or(Value::Null))
    };
    let topology = st.topology.snapshot();
    let ctx = ViewCtx {
        version: req.version,
        base: &base,
        mask: Some(parse_fields(LOOKUP_FIELDS, req.version)?),
        link_arrays: false,
        topology: &topology,
        redaction: authz.redaction(),
    };
    tracing::info!(node = %node.uuid, "ramdisk lookup");
    Ok(json_response(
        StatusCode::OK,
        &Lookup {
            node: NodeView {
                node: &node,
                ctx: &ctx,
            },
            config: agent_config(&st, &node, token),
        },
    ))
}

#[derive(Serialize)]
struct Lookup<'a> {
    node: NodeView<'a>,
    config: Value,
}

/// The agent's configuration (upstream's keys; what this service has no setting for
/// carries upstream's default).
fn agent_config(st: &AppState, node: &Node, token: Value) -> Value {
    // An out-of-band management interface knows the BMC's address already.
    let skip_bmc_detect = node
        .interfaces
        .get("management")
        .is_some_and(|m| m == "redfish" || m == "idrac-redfish");
    json!({
        "metrics": {
            "backend": "noop",
            "prepend_host": false,
            "prepend_uuid": false,
            "prepend_host_reverse": true,
            "global_prefix": null,
        },
        "metrics_statsd": {"statsd_host": "localhost", "statsd_port": 8125},
        "heartbeat_timeout": st.settings.ramdisk.heartbeat_timeout,
        "agent_containers": {
            "allow_arbitrary_containers": false,
            "allowed_containers": [],
            "container_steps_file": "/etc/ironic-python-agent.d/mysteps.yaml",
            "runner": "podman",
            "pull_options": [],
            "run_options": ["--rm", "--network=host"],
        },
        "agent_token": token,
        "agent_token_required": true,
        "agent_md5_checksum_enable": true,
        "disable_deep_image_inspection": false,
        "permitted_image_formats": ["raw", "gpt", "qcow2", "iso"],
        "agent_skip_bmc_detect": skip_bmc_detect,
        "enable_bios_bootloader_install": false,
        "tls_min_version": "1.3",
        "tls_cipher_suites": null,
    })
}

/// Whether a URL's scheme (as a URL parser reads it) names http: `http`, `https`.
fn scheme_is_http(url: &str) -> bool {
    let Some((scheme, _)) = url.split_once(':') else {
        return false;
    };
    let mut chars = scheme.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        && scheme.to_ascii_lowercase().contains("http")
}

/// An optional string of the heartbeat body.
fn string_arg(body: &Map<String, Value>, key: &str) -> Result<Option<String>, ApiError> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(ApiError::invalid(format!(
            "Expected string for {key}: {}",
            py_repr(other)
        ))),
    }
}

pub async fn heartbeat(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    uri: OriginalUri,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
    JsonBody(body): JsonBody,
) -> ApiResult {
    gate(&st, &req, &uri)?;
    Query::parse(q.as_deref())?.only(&[])?;
    let Value::Object(body) = body else {
        return Err(ApiError::invalid(format!(
            "Expected an object for the heartbeat: {}",
            py_repr(&body)
        )));
    };
    // Unknown fields are ignored, as upstream's argument binding drops them.
    let callback_url = string_arg(&body, "callback_url")?
        .ok_or_else(|| ApiError::invalid("Missing argument: \"callback_url\""))?;
    let agent_version = string_arg(&body, "agent_version")?;
    let agent_token = string_arg(&body, "agent_token")?;
    let agent_verify_ca = string_arg(&body, "agent_verify_ca")?;
    let agent_status = string_arg(&body, "agent_status")?;
    let agent_status_message = string_arg(&body, "agent_status_message")?;
    if agent_version.is_some() && !req.version.at_least(36) {
        return Err(ApiError::invalid("Field \"agent_version\" not recognised"));
    }
    if (agent_status.is_some() || agent_status_message.is_some()) && !req.version.at_least(72) {
        return Err(ApiError::invalid(
            "Fields \"agent_status\" and \"agent_status_message\" not recognised.",
        ));
    }
    authz.check(Policy::IpaHeartbeat)?;
    if agent_verify_ca.is_some() && !req.version.at_least(68) {
        return Err(ApiError::invalid(
            "Field \"agent_verify_ca\" not recognised in this version",
        ));
    }
    let node = load_node(&st, &ident, req.version).await?;
    // An http(s) URL, or empty from a one-way agent (anaconda).
    if !scheme_is_http(&callback_url) && !callback_url.is_empty() {
        return Err(ApiError::invalid(
            "An issue with the supplied \"callback_url\" has been detected.",
        ));
    }
    if let Some(known) = node
        .driver_internal_info
        .get(agent::URL)
        .and_then(Value::as_str)
        && known != callback_url
    {
        tracing::error!(node = %node.uuid, "heartbeat with a callback URL other than the recorded one; refused");
        return Err(ApiError::invalid(
            "Detected change in ramdisk provided \"callback_url\"",
        ));
    }
    if agent_token.is_none() {
        tracing::error!(node = %node.uuid, "heartbeat without an agent token");
        return Err(ApiError::invalid(
            "Agent token is required for heartbeat processing.",
        ));
    }
    if let Some(s) = &agent_status
        && !agent::VALID_STATUSES.contains(&s.as_str())
    {
        return Err(ApiError::invalid(format!(
            "Agent status is invalid. Valid states are {}.",
            agent::VALID_STATUSES.join(",")
        )));
    }
    st.conductor
        .call(
            &req.ctx,
            Heartbeat {
                node: NodeRef::from(&node),
                callback_url,
                agent_version,
                agent_token,
                agent_verify_ca,
                agent_status,
                agent_status_message,
            },
        )
        .await?;
    Ok(StatusCode::ACCEPTED.into_response())
}

#[cfg(test)]
mod tests {
    #[test]
    fn callback_urls_must_be_http() {
        assert!(super::scheme_is_http("https://192.0.2.1:9999"));
        assert!(super::scheme_is_http("http://[::1]:9999"));
        assert!(!super::scheme_is_http("file:///path/to/the/wizzard"));
        assert!(!super::scheme_is_http("192.0.2.1:9999"));
        assert!(!super::scheme_is_http("no url"));
    }
}
