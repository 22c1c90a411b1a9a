//! The ramdisk agent's endpoints (1.22): `GET /v1/lookup` finds the agent's node by its
//! MAC addresses (or UUID) and hands it its configuration and, from 1.62, its token;
//! `POST /v1/heartbeat/{node}` tells the node's conductor (`ironic-conductor`
//! `agent.rs`) that the agent is alive. Both are public routes (the agent has no
//! credentials; the token is its proof) unless `[api] enable_ramdisk_endpoints` is
//! false, and a lookup finds only nodes waiting for a ramdisk (`[api] restrict_lookup`).

use axum::extract::{OriginalUri, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use ironic_db::{NodeFilter, NodeListQuery};
use ironic_model::node::parse_fields;
use ironic_model::patch::py_repr;
use ironic_model::states::ProvisionState;
use ironic_model::{Error, Node, agent, secrets};
use ironic_rpc::NodeRef;
use ironic_rpc::calls::{ContinueInspection, GetNodeWithToken, Heartbeat};
use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::body::{LateBody, P};
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
    /// Largest heartbeat body read (`[api] heartbeat_max_body_bytes`).
    pub heartbeat_max_body: usize,
    /// `[agent] require_tls`: a heartbeat's callback URL must be https.
    pub require_tls: bool,
    /// `[deploy] fast_track`: a running ramdisk may look up and heartbeat while its node
    /// rests (`manageable`, `available`, …), so that it can be reused.
    pub fast_track: bool,
    /// `[agent] allow_md5_checksum`: told to the agent (it refuses MD5 without).
    pub allow_md5_checksum: bool,
}

/// `[api] enable_ramdisk_endpoints = false`: refused (403, upstream's message naming the
/// path).
fn enabled(st: &AppState, uri: &OriginalUri) -> Result<(), ApiError> {
    if st.settings.ramdisk.enabled {
        return Ok(());
    }
    Err(Error::Forbidden(format!(
        "Access was denied to the following resource: {}",
        uri.0.path()
    ))
    .into())
}

/// Lookup and heartbeat: [`enabled`], and below 1.22 not found (upstream's handler
/// raises a plain not-found, not the routing one).
fn gate(st: &AppState, req: &Req, uri: &OriginalUri) -> Result<(), ApiError> {
    enabled(st, uri)?;
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
    let (addresses, invalid) = distinct_macs(
        q.get("addresses")
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty()),
    );
    invalid.log("invalid MAC addresses in a lookup, ignored");
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
    let fast_track = agent::fast_track(&node.driver_info, st.settings.ramdisk.fast_track);
    if st.settings.ramdisk.restrict_lookup
        && !agent::lookup_allowed_with(node.provision_state, fast_track)
    {
        tracing::error!(node = %node.uuid, state = %node.provision_state, "lookup of a node in a state that takes no ramdisk");
        return Err(not_found());
    }
    let (node, token) = if req.version.at_least(62) {
        with_token(&st, &req, &node).await?
    } else {
        // Older agents know no token. Upstream would show a stored one to any caller;
        // here it shows masked.
        let token = node
            .driver_internal_info
            .contains_key(agent::TOKEN)
            .then(|| json!(ironic_model::secrets::MASK));
        (node, token.unwrap_or(Value::Null))
    };
    tracing::info!(node = %node.uuid, "ramdisk lookup");
    lookup_answer(StatusCode::OK, &st, &req, &authz, &base, &node, token)
}

/// The node with its agent token, generated by its conductor under its lock (only the
/// first caller sees it; later ones see the mask, answered here without a call to the
/// conductor, as the conductor would answer it).
async fn with_token(st: &AppState, req: &Req, node: &Node) -> Result<(Node, Value), ApiError> {
    if node.driver_internal_info.contains_key(agent::TOKEN) {
        return Ok((node.clone(), json!(secrets::MASK)));
    }
    let node = st
        .conductor
        .call(
            &req.ctx,
            GetNodeWithToken {
                node: NodeRef::from(node),
            },
        )
        .await?;
    let token = node.driver_internal_info.get(agent::TOKEN).cloned();
    Ok((node, token.unwrap_or(Value::Null)))
}

/// A lookup's answer: the node's lookup fields and the agent's configuration.
fn lookup_answer(
    status: StatusCode,
    st: &AppState,
    req: &Req,
    authz: &Authz,
    base: &str,
    node: &Node,
    token: Value,
) -> ApiResult {
    let topology = st.topology.snapshot();
    let ctx = ViewCtx {
        version: req.version,
        base,
        mask: Some(parse_fields(LOOKUP_FIELDS, req.version)?),
        link_arrays: false,
        topology: &topology,
        redaction: authz.redaction(),
    };
    Ok(json_response(
        status,
        &Lookup {
            node: NodeView { node, ctx: &ctx },
            config: agent_config(st, node, token),
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
        "agent_md5_checksum_enable": st.settings.ramdisk.allow_md5_checksum,
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
    scheme(url).is_some_and(|s| s.to_ascii_lowercase().contains("http"))
}

/// A URL's scheme as a URL parser reads it (a letter, then letters, digits, `+-.`).
fn scheme(url: &str) -> Option<&str> {
    let (scheme, _) = url.split_once(':')?;
    let mut chars = scheme.chars();
    (chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
    .then_some(scheme)
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
    body: LateBody,
) -> ApiResult {
    // Refused before a byte of the body is read.
    gate(&st, &req, &uri)?;
    Query::parse(q.as_deref())?.only(&[])?;
    let (body, _large) = body
        .json(&st, st.settings.ramdisk.heartbeat_max_body)
        .await?;
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
    if st.settings.ramdisk.require_tls
        && !callback_url.is_empty()
        && !scheme(&callback_url).is_some_and(|s| s.eq_ignore_ascii_case("https"))
    {
        return Err(ApiError::invalid(
            "The agent must be reached over TLS: its callback_url must be https ([agent] require_tls).",
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
    if let Err(e) = agent::check_verify_ca(&node.driver_internal_info, agent_verify_ca.as_deref()) {
        metrics::counter!("ironic_api_agent_certificate_changes_refused_total").increment(1);
        tracing::error!(node = %node.uuid, "heartbeat with a certificate other than the one pinned for this boot; refused");
        return Err(e.into());
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
    // What the conductor would answer from the same row, answered here: a heartbeat
    // with no valid token, or for a node that takes none, costs no call (the conductor
    // checks again, under the node's lock, before it records anything).
    agent::check_version(agent_version.as_deref(), agent_status.as_deref())?;
    agent::check_token(&node.driver_internal_info, agent_token.as_deref()).inspect_err(|_| {
        tracing::warn!(node = %node.uuid, "heartbeat with an invalid or missing agent token");
    })?;
    let fast_track = agent::fast_track(&node.driver_info, st.settings.ramdisk.fast_track);
    if !agent::heartbeat_allowed_with(node.provision_state, fast_track)
        && node.reservation.is_none()
    {
        tracing::warn!(
            node = %node.uuid,
            state = %node.provision_state,
            "heartbeat in a state that takes none; not recorded"
        );
        return Ok(StatusCode::ACCEPTED.into_response());
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

/// `POST /v1/continue_inspection` (1.84; also at exactly 1.1, upstream's stand-in for
/// ironic-inspector's API): the ramdisk's inventory and plugin data for a node waiting in
/// `inspect wait`. The node is found by uuid, by the MACs of its ports, or by the BMC
/// address its in-band inspection started with, and must agree across them; anything
/// else reads "not found". From 1.84 the answer is a lookup's (the agent's token
/// included); at 1.1, `{"uuid"}`. The data is processed by the node's conductor.
pub async fn continue_inspection(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    Base(base): Base,
    uri: OriginalUri,
    RawQuery(q): RawQuery,
    body: LateBody,
) -> ApiResult {
    // Refused before a byte of the body is read.
    enabled(&st, &uri)?;
    let q = Query::parse(q.as_deref())?;
    q.only(&["node_uuid"])?;
    let new = req.version.at_least(84);
    // At 1.1 for inspector's clients, which know no `node_uuid`.
    let inspector_compat = req.version.minor == 1 && q.get("node_uuid").is_none();
    if !new && !inspector_compat {
        return Err(Error::NotFound("API version 1.84 or newer is required".into()).into());
    }
    authz.check(Policy::IpaContinueInspection)?;
    // Held while the data is: a large body takes one of `[api] large_bodies_at_once`.
    let (body, _large) = body.json(&st, st.settings.inspection_max_body).await?;
    let node_uuid = match q.get("node_uuid") {
        None => None,
        Some(s) => Some(
            ironic_model::ids::canonical_uuid(s)
                .ok_or_else(|| ApiError::invalid(format!("Expected UUID for node_uuid: {s}")))?,
        ),
    };
    let Value::Object(mut data) = body else {
        return Err(schema(format_args!(
            "{} is not of type 'object'",
            py_repr(&body)
        )));
    };
    let inventory = check_inventory(data.remove("inventory"))?;
    let (macs, invalid) = distinct_macs(
        inventory["interfaces"]
            .as_array()
            .into_iter()
            .flatten()
            .take(INSPECTION_INTERFACES_MAX)
            .map(|i| i["mac_address"].as_str().unwrap_or_default()),
    );
    invalid.log("invalid MAC addresses in inspection data, ignored");
    let bmc: Vec<String> = ["bmc_address", "bmc_v6address"]
        .iter()
        .filter_map(|k| inventory.get(*k).and_then(Value::as_str))
        .filter(|a| !a.is_empty())
        .map(str::to_string)
        .collect();
    if macs.is_empty() && bmc.is_empty() && node_uuid.is_none() {
        return Err(ApiError::invalid("No lookup information provided"));
    }
    let node = inspection_lookup(&st, &macs, &bmc, node_uuid.as_deref()).await?;
    let (node, token) = if new {
        // Before the data is handed over: processing holds the node's lock.
        with_token(&st, &req, &node).await?
    } else {
        (node, Value::Null)
    };
    st.conductor
        .call(
            &req.ctx,
            ContinueInspection {
                node: NodeRef::from(&node),
                inventory,
                plugin_data: data,
            },
        )
        .await?;
    tracing::info!(node = %node.uuid, "inspection data handed to the conductor");
    if new {
        lookup_answer(StatusCode::ACCEPTED, &st, &req, &authz, &base, &node, token)
    } else {
        Ok(json_response(
            StatusCode::ACCEPTED,
            &json!({"uuid": node.uuid.as_str()}),
        ))
    }
}

/// The most MAC addresses a lookup searches by: a machine has a handful of NICs, and a
/// caller without credentials must not make the database search by thousands.
const LOOKUP_MACS_MAX: usize = 256;

/// The interfaces of an inspection's inventory whose MACs look its node up (a server
/// has tens; the inventory is stored whole).
const INSPECTION_INTERFACES_MAX: usize = 1024;

/// How many invalid addresses one request named, and the first few: one log line per
/// request however many there are (a body can hold hundreds of thousands).
#[derive(Debug, Default, PartialEq)]
struct Invalid<'a> {
    count: usize,
    first: Vec<&'a str>,
}

impl Invalid<'_> {
    const SHOWN: usize = 5;

    fn log(&self, what: &str) {
        if self.count > 0 {
            tracing::warn!(
                count = self.count,
                first = %secrets::log_safe(&self.first.join(", ")),
                "{what}"
            );
        }
    }
}

/// The valid MAC addresses among `raw`, normalised, each once, in their first order,
/// at most [`LOOKUP_MACS_MAX`] of them (linear: a 1 MiB body holds ~29,000), and the
/// invalid ones.
fn distinct_macs<'a>(raw: impl Iterator<Item = &'a str>) -> (Vec<String>, Invalid<'a>) {
    let mut seen = std::collections::HashSet::new();
    let mut macs = Vec::new();
    let mut invalid = Invalid::default();
    for a in raw {
        match ironic_model::port::normalize_mac(a) {
            Some(m) if macs.len() < LOOKUP_MACS_MAX && seen.insert(m.clone()) => macs.push(m),
            Some(_) => {}
            None => {
                invalid.count += 1;
                if invalid.first.len() < Invalid::SHOWN {
                    invalid.first.push(a);
                }
            }
        }
    }
    (macs, invalid)
}

fn schema(msg: impl std::fmt::Display) -> ApiError {
    ApiError::invalid(format!("Schema error: {msg}"))
}

/// The smallest inventory upstream accepts: an object with a non-empty `interfaces`
/// list of objects that have a string `mac_address`; BMC addresses strings or null.
fn check_inventory(inv: Option<Value>) -> Result<Map<String, Value>, ApiError> {
    let inv = match inv {
        None => return Err(schema("'inventory' is a required property")),
        Some(Value::Object(o)) => o,
        Some(other) => {
            return Err(schema(format_args!(
                "{} is not of type 'object'",
                py_repr(&other)
            )));
        }
    };
    for k in ["bmc_address", "bmc_v6address"] {
        if let Some(v) = inv.get(k)
            && !(v.is_string() || v.is_null())
        {
            return Err(schema(format_args!(
                "{} is not of type 'string', 'null'",
                py_repr(v)
            )));
        }
    }
    let Some(ifaces) = inv.get("interfaces") else {
        return Err(schema("'interfaces' is a required property"));
    };
    let Some(list) = ifaces.as_array() else {
        return Err(schema(format_args!(
            "{} is not of type 'array'",
            py_repr(ifaces)
        )));
    };
    if list.is_empty() {
        return Err(schema("[] should be non-empty"));
    }
    for i in list {
        let Some(o) = i.as_object() else {
            return Err(schema(format_args!(
                "{} is not of type 'object'",
                py_repr(i)
            )));
        };
        match o.get("mac_address") {
            None => return Err(schema("'mac_address' is a required property")),
            Some(Value::String(_)) => {}
            Some(v) => {
                return Err(schema(format_args!(
                    "{} is not of type 'string'",
                    py_repr(v)
                )));
            }
        }
    }
    Ok(inv)
}

/// Upstream's inspection lookup: by uuid, then by the MACs (one node, which must be
/// the uuid's if both are given), in `inspect wait`, then by the BMC addresses its
/// inspection started with (which must agree with what was found). Every failure is
/// the same "not found"; why is logged.
async fn inspection_lookup(
    st: &AppState,
    macs: &[String],
    bmc: &[String],
    node_uuid: Option<&str>,
) -> Result<Node, ApiError> {
    let mut node = match node_uuid {
        Some(u) => Some(st.db.node_by_uuid(u).await?.ok_or_else(not_found)?),
        None => None,
    };
    if !macs.is_empty() {
        match st.db.node_ids_by_port_addresses(macs).await?[..] {
            [] => {}
            [id] => {
                let by_mac = st.db.node_by_id(id).await?.ok_or_else(not_found)?;
                if let Some(n) = &node
                    && n.uuid != by_mac.uuid
                {
                    tracing::error!(node = %n.uuid, other = %by_mac.uuid, ?macs, "inspection lookup: the MACs belong to another node");
                    return Err(not_found());
                }
                node = Some(by_mac);
            }
            _ => {
                tracing::error!(?macs, "inspection lookup: several nodes have these MACs");
                return Err(not_found());
            }
        }
    }
    if let Some(n) = &node
        && n.provision_state != ProvisionState::InspectWait
    {
        tracing::error!(node = %n.uuid, state = %n.provision_state, "inspection data for a node that is not waiting for it");
        return Err(not_found());
    }
    if !bmc.is_empty() {
        let waiting = st
            .db
            .node_list(&NodeListQuery {
                filter: NodeFilter {
                    provision_state: Some(ProvisionState::InspectWait),
                    ..Default::default()
                },
                with_traits: false,
                ..Default::default()
            })
            .await?;
        let mut by_bmc: Vec<Node> = waiting
            .into_iter()
            .filter(|n| {
                n.driver_internal_info
                    .get(agent::LOOKUP_BMC_ADDRESSES)
                    .and_then(Value::as_array)
                    .is_some_and(|a| {
                        a.iter()
                            .any(|x| x.as_str().is_some_and(|x| bmc.iter().any(|b| b == x)))
                    })
            })
            .collect();
        match &node {
            Some(n) if !by_bmc.is_empty() && !by_bmc.iter().any(|b| b.uuid == n.uuid) => {
                tracing::error!(node = %n.uuid, ?bmc, "inspection lookup: the BMC address belongs to other nodes");
                return Err(not_found());
            }
            Some(_) => {}
            None if by_bmc.len() > 1 => {
                tracing::error!(
                    ?bmc,
                    "inspection lookup: several nodes have this BMC address and none the MACs"
                );
                return Err(not_found());
            }
            None => node = by_bmc.pop(),
        }
    }
    node.ok_or_else(|| {
        tracing::error!(?macs, ?bmc, "inspection lookup: no node found");
        not_found()
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn macs_are_normalised_once_each_and_bounded() {
        let (got, bad) = super::distinct_macs(
            [
                "AA:bb:cc:dd:ee:ff",
                "x\ny",
                "aa:bb:cc:dd:ee:ff",
                "11:22:33:44:55:66",
            ]
            .into_iter(),
        );
        assert_eq!(got, ["aa:bb:cc:dd:ee:ff", "11:22:33:44:55:66"]);
        assert_eq!(
            bad,
            super::Invalid {
                count: 1,
                first: vec!["x\ny"]
            }
        );
        // However many are invalid, a few are kept to show.
        let many = vec![""; 100_000];
        let (got, bad) = super::distinct_macs(many.into_iter());
        assert!(got.is_empty());
        assert_eq!(
            (bad.count, bad.first.len()),
            (100_000, super::Invalid::SHOWN)
        );
        // Tens of thousands of distinct addresses: linear, and bounded.
        let many: Vec<String> = (0..30_000u32)
            .map(|i| {
                let b = i.to_be_bytes();
                format!("02:00:{:02x}:{:02x}:{:02x}:{:02x}", b[0], b[1], b[2], b[3])
            })
            .collect();
        let (got, _) = super::distinct_macs(many.iter().map(String::as_str));
        assert_eq!(got.len(), super::LOOKUP_MACS_MAX);
        assert_eq!(got[0], "02:00:00:00:00:00");
    }

    #[test]
    fn callback_urls_must_be_http() {
        assert!(super::scheme_is_http("https://192.0.2.1:9999"));
        assert!(super::scheme_is_http("http://[::1]:9999"));
        assert!(!super::scheme_is_http("file:///path/to/the/wizzard"));
        assert!(!super::scheme_is_http("192.0.2.1:9999"));
        assert!(!super::scheme_is_http("no url"));
    }
}
