//! `PUT /v1/nodes/{node}/states/provision`: a provisioning verb. The verb and the
//! node's state are checked against the state machine here (400/406 before any RPC);
//! the conductor that owns the node applies it under the lock and answers once it is
//! accepted. 202 with a `Location` header to the node's states.
//!
//! Served verbs: `manage`, `provide`, `clean` (manual cleaning, `clean_steps`),
//! `abort`, `inspect` and `adopt` (fake-hardware), `active`/`deploy`, `rebuild`,
//! `deleted`/`undeploy`, `unhold` (1.85), `service` (1.87, `service_steps`). Rescue
//! answers 400 (`docs/api.md`).

use axum::extract::{RawQuery, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::IntoResponse;
use ironic_catalog::steps::Requested;
use ironic_model::deploy_template::{TemplateStep, validate_step};
use ironic_model::fsm::{self, Event};
use ironic_model::node::INTERFACE_TYPES;
use ironic_model::patch::py_repr;
use ironic_model::{Error, Version};
use ironic_rpc::NodeRef;
use ironic_rpc::calls::{
    ChangeNodeBootMode, ChangeNodePowerState, ChangeNodeSecureBoot, DoNodeClean, DoNodeDeploy,
    DoNodeService, DoNodeTearDown, DoProvisioningAction, GetCleanSteps, ValidateDriverInterfaces,
};
use serde_json::Value;

use crate::body::{JsonBody, LateBody, P};
use crate::error::ApiError;
use crate::nodes::{authorized_node, no_args};
use crate::policy::{Authz, Policy};
use crate::{AppState, Base, Req};

type ApiResult = Result<axum::response::Response, ApiError>;

/// 202, no body, `Location` to the node's states (where the client follows the work).
fn accepted(base: &str, ident: &str) -> axum::response::Response {
    let mut resp = StatusCode::ACCEPTED.into_response();
    crate::set_location(
        &mut resp,
        &format!(
            "{base}/v1/nodes/{}/states",
            ironic_model::percent::encode_list(ident)
        ),
    );
    resp
}

/// Body members and the microversion that introduced each.
const MEMBERS: &[(&str, u16)] = &[
    ("target", 1),
    ("configdrive", 1),
    ("clean_steps", 15),
    ("rescue_password", 38),
    // Checked below: an empty list is accepted at any version, as upstream.
    ("deploy_steps", 1),
    // Checked below, by verb (1.70 with clean, 1.108 with service).
    ("disable_ramdisk", 1),
    // Checked below: with the verb, whose version is checked after the node's state.
    ("service_steps", 1),
    ("runbook", 92),
];

/// Interfaces that offer clean steps.
const STEP_INTERFACES: &[&str] = &[
    "power",
    "management",
    "deploy",
    "bios",
    "raid",
    "firmware",
    "vendor",
];

/// `clean_steps` or `service_steps` (named `what`): a list of `{interface, step, args}`.
fn requested_steps(what: &str, v: &Value) -> Result<Vec<Requested>, ApiError> {
    let bad = |m: String| ApiError::invalid(format!("Invalid {what}: {m}"));
    let Value::Array(list) = v else {
        return Err(bad("a list of steps is expected".into()));
    };
    list.iter()
        .enumerate()
        .map(|(i, s)| {
            let Value::Object(o) = s else {
                return Err(bad(format!("step {i} is not an object")));
            };
            if let Some(k) = o
                .keys()
                .find(|k| !["interface", "step", "args"].contains(&k.as_str()))
            {
                return Err(bad(format!("step {i} has an unknown member \"{k}\"")));
            }
            let interface = o.get("interface").and_then(Value::as_str).unwrap_or("");
            if !STEP_INTERFACES.contains(&interface) {
                debug_assert!(STEP_INTERFACES.iter().all(|t| INTERFACE_TYPES.contains(t)));
                return Err(bad(format!(
                    "step {i}: interface must be one of {}",
                    STEP_INTERFACES.join(", ")
                )));
            }
            let step = o.get("step").and_then(Value::as_str).unwrap_or("");
            if step.is_empty() {
                return Err(bad(format!("step {i}: step must be a non-empty string")));
            }
            let args = match o.get("args") {
                None => serde_json::Map::new(),
                Some(Value::Object(a)) => a.clone(),
                Some(_) => return Err(bad(format!("step {i}: args must be an object"))),
            };
            Ok(Requested {
                interface: interface.into(),
                step: step.into(),
                args,
            })
        })
        .collect()
}

/// The `deploy_steps` argument (1.69): only when deploying or rebuilding (also with
/// the `deploy` verb of 1.73, which upstream refuses by an oversight), each step as a
/// deploy template's.
fn user_deploy_steps(
    v: Option<&Value>,
    event: Event,
    version: Version,
) -> Result<Vec<TemplateStep>, ApiError> {
    let list = match v {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(l)) if l.is_empty() => return Ok(Vec::new()),
        Some(Value::Array(l)) => l,
        Some(other) => {
            return Err(ApiError::invalid(format!(
                "Invalid deploy_steps: {} is not of type 'array'",
                py_repr(other)
            )));
        }
    };
    if !version.at_least(69) {
        return Err(Error::not_acceptable_below(69).into());
    }
    if !matches!(event, Event::Deploy | Event::Rebuild) {
        return Err(ApiError::invalid(
            "\"deploy_steps\" is only valid when setting target provision state to active or rebuild",
        ));
    }
    list.iter()
        .map(|s| {
            validate_step(s).map_err(|e| ApiError::invalid(format!("Invalid deploy_steps: {e}")))
        })
        .collect()
}

/// The body as a JSON object whose members are all in `members` (name, first
/// microversion): 400 for a non-object or an unknown member, 406 for a newer one.
fn body_object(
    body: Value,
    members: &[(&str, u16)],
    v: Version,
) -> Result<serde_json::Map<String, Value>, ApiError> {
    let Value::Object(obj) = body else {
        return Err(ApiError::invalid("The request body must be a JSON object."));
    };
    check_members(&obj, members, v)?;
    Ok(obj)
}

fn check_members(
    obj: &serde_json::Map<String, Value>,
    members: &[(&str, u16)],
    v: Version,
) -> Result<(), ApiError> {
    for k in obj.keys() {
        match members.iter().find(|(m, _)| m == k) {
            None => return Err(ApiError::invalid(format!("Unexpected arguments: {k}"))),
            Some((_, min)) if !v.at_least(*min) => return Err(Error::not_acceptable().into()),
            Some(_) => {}
        }
    }
    Ok(())
}

/// Whether a `configdrive` is none at all: null, `""` or `{}` (Python's falsy values,
/// which upstream neither checks nor stores).
fn empty(c: &Value) -> bool {
    match c {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

use ironic_model::patch::json_type_name as type_name;

/// `configdrive` as upstream's `check_allow_configdrive`
/// (`ironic/api/controllers/v1/utils.py`) checks it, in its order, once the node's state
/// allows the verb (`target`): only with `active` (and `rebuild` from 1.35; not with
/// `deploy`, as upstream); the JSON object (from 1.56) by upstream's schema
/// (`_CONFIG_DRIVE_SCHEMA`: members `meta_data`, `network_data`, `vendor_data` (from
/// 1.59), objects, and `user_data`, an object, a list, a string or null); a string is a
/// URL (anything with `://`, as upstream) or base64 text (upstream's alphabet, white
/// space allowed). Upstream's messages, but for a schema violation: upstream quotes the
/// whole drive (secrets included) in a jsonschema dump, this names the member at fault.
///
/// Beyond upstream: base64 text whose decoded size is over `max_bytes` (`[deploy]
/// configdrive_max_bytes`, 64 MiB: the agent writes no larger image, and gzip data is
/// no larger than the image it unpacks to, but for a few bytes of header) is refused
/// here rather than by the agent once the OS image is on the disk. Upstream limits only
/// the whole body (`[api] max_json_body_size_provision`).
fn check_configdrive(target: &str, c: &Value, v: Version, max_bytes: u64) -> Result<(), ApiError> {
    if empty(c) {
        return Ok(());
    }
    let targets: &[&str] = if v.at_least(35) {
        &["active", "rebuild"]
    } else {
        &["active"]
    };
    if !targets.contains(&target) {
        return Err(ApiError::invalid(format!(
            "Adding a config drive is only supported when setting provision state to {}",
            targets.join(", ")
        )));
    }
    let format = |m: String| ApiError::invalid(format!("Invalid configdrive format: {m}"));
    match c {
        Value::Object(o) => {
            for (k, val) in o {
                let (ok, want) = match k.as_str() {
                    "meta_data" | "network_data" | "vendor_data" => (val.is_object(), "an object"),
                    "user_data" => (
                        !(val.is_boolean() || val.is_number()),
                        "an object, a list, a string or null",
                    ),
                    _ => {
                        return Err(format(format!(
                            "unexpected member '{k}': the object takes only meta_data, network_data, user_data and vendor_data"
                        )));
                    }
                };
                if !ok {
                    return Err(format(format!(
                        "{k} must be {want}, not {}",
                        type_name(val)
                    )));
                }
            }
            if !v.at_least(56) {
                return Err(ApiError::invalid(
                    "Providing a JSON object for configdrive is only supported starting with API version 1.56",
                ));
            }
            if o.contains_key("vendor_data") && !v.at_least(59) {
                return Err(ApiError::invalid(
                    "Providing vendor_data in configdrive is only supported starting with API version 1.59",
                ));
            }
        }
        Value::String(s) => {
            if s.contains("://") {
                return Ok(());
            }
            if !s
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+/=\n\r\t ".contains(c))
            {
                return Err(format(
                    "it is neither a JSON, nor a URL, nor a base64 string".into(),
                ));
            }
            let digits = s
                .bytes()
                .filter(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/'))
                .count() as u64;
            let decoded = digits * 3 / 4;
            if decoded > max_bytes {
                return Err(ApiError::invalid(format!(
                    "The configdrive is {decoded} bytes once decoded, over the limit of {max_bytes} bytes ([deploy] configdrive_max_bytes; the agent writes at most 64 MiB): make it smaller"
                )));
            }
        }
        // Refused earlier (the argument's types).
        _ => {}
    }
    Ok(())
}

pub async fn set_provision_state(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    Base(base): Base,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
    body: LateBody,
) -> ApiResult {
    no_args(&q)?;
    let v = req.version;
    // Config drives make this body larger than others may be (as upstream's). The
    // policy needs only the node: for a body over `[api] max_request_body_bytes` it is
    // decided before the rest is read, so that a caller without the right cannot make
    // the API receive and parse up to `provision_max_body_bytes` (a small body is read
    // first: its errors come in upstream's order). Held while the handler runs (a large
    // body takes one of `[api] large_bodies_at_once`).
    let authorize = || authorized_node(&st, &authz, &ident, v, Policy::NodeSetProvisionState);
    let (body, _large, early) = body
        .json_guarded(&st, st.settings.provision_max_body, || async {
            authorize().await
        })
        .await?;
    let obj = body_object(body, MEMBERS, v)?;
    let Some(target) = obj.get("target").and_then(Value::as_str) else {
        return Err(ApiError::invalid(
            "'target' is a required property and must be a string.",
        ));
    };
    // `unhold` and `service` are checked against the node's state before their
    // microversion (upstream's order: S332).
    let (verb, too_new) = match fsm::verb(target, v) {
        Err(Error::NotAcceptable(_)) if matches!(target, "unhold" | "service") => {
            (fsm::verb(target, Version::MAX)?, true)
        }
        other => (other?, false),
    };
    let runbook = match obj.get("runbook") {
        None | Some(Value::Null) => None,
        Some(Value::String(r)) => Some(r.clone()),
        Some(other) => {
            return Err(ApiError::invalid(format!(
                "Invalid runbook: {} is not of type 'string'",
                py_repr(other)
            )));
        }
    };
    let mut steps = match (verb.event, obj.get("clean_steps")) {
        (Event::Clean, Some(s)) => Some(requested_steps("clean_steps", s)?),
        (Event::Clean, None) if runbook.is_some() => None,
        (Event::Clean, None) => {
            return Err(ApiError::invalid(
                "\"clean_steps\" is required when setting target provision state to clean",
            ));
        }
        (_, Some(_)) => {
            return Err(ApiError::invalid(
                "\"clean_steps\" is only valid when setting target provision state to clean",
            ));
        }
        (_, None) => None,
    };
    // Upstream's argument types (`args.types(type(None), dict, str)`), checked before
    // anything else.
    if let Some(c) = obj
        .get("configdrive")
        .filter(|c| !(c.is_null() || c.is_string() || c.is_object()))
    {
        return Err(ApiError::invalid(format!(
            "Expected types <class 'NoneType'>, <class 'dict'>, <class 'str'> for configdrive: {}",
            py_repr(c)
        )));
    }
    if obj.get("rescue_password").is_some() && verb.event != Event::Rescue {
        return Err(ApiError::invalid(
            "\"rescue_password\" is only valid when setting target provision state to rescue",
        ));
    }
    let deploy_steps = user_deploy_steps(obj.get("deploy_steps"), verb.event, v)?;
    let mut disable_ramdisk = match obj.get("disable_ramdisk") {
        None | Some(Value::Null) => None,
        Some(Value::Bool(b)) => Some(*b),
        Some(_) => return Err(ApiError::invalid("disable_ramdisk must be a boolean")),
    };
    let mut service_steps = match obj.get("service_steps") {
        None | Some(Value::Null) => None,
        Some(Value::Array(l)) if l.is_empty() => None,
        Some(s) if verb.event == Event::Service => Some(requested_steps("service_steps", s)?),
        Some(_) => {
            return Err(ApiError::invalid(
                "\"service_steps\" is only valid when setting target provision state to service",
            ));
        }
    };
    let node = match early {
        Some(node) => node,
        None => authorize().await?,
    };
    if steps.is_some() {
        authz.on_node(&node, Policy::NodeSetProvisionStateCleanSteps)?;
    }
    if service_steps.is_some() {
        authz.on_node(&node, Policy::NodeSetProvisionStateServiceSteps)?;
    }
    let state = node.provision_state;
    if fsm::next(state, verb.event).is_none() {
        return Err(fsm::invalid_state_requested(target, node.uuid.as_str(), state).into());
    }
    if let Some(c) = obj.get("configdrive") {
        check_configdrive(target, c, v, st.settings.configdrive_max_bytes)?;
    }
    if too_new {
        return Err(Error::not_acceptable().into());
    }
    if let Some(name) = &runbook {
        let (s, d) = runbook_steps(
            &st,
            &authz,
            &node,
            name,
            verb.event,
            &steps,
            &service_steps,
            v,
        )
        .await?;
        match verb.event {
            Event::Clean => steps = Some(s),
            _ => service_steps = Some(s),
        }
        // The runbook's own setting wins (upstream's); a false one asks for nothing
        // newer than the verb.
        disable_ramdisk = d.then_some(true);
    }
    if disable_ramdisk.is_some() {
        let since = match verb.event {
            Event::Clean => 70,
            Event::Service => 108,
            _ => {
                return Err(ApiError::invalid(
                    "disable_ramdisk is supported only with manual cleaning or servicing",
                ));
            }
        };
        if !v.at_least(since) {
            return Err(Error::NotAcceptable(
                "disable_ramdisk is not acceptable in this API version".into(),
            )
            .into());
        }
    }
    if verb.event == Event::Abort && !v.at_least(fsm::abort_min_minor(state)) {
        return Err(Error::not_acceptable().into());
    }
    let node = NodeRef::from(&node);
    let ctx = &req.ctx;
    match verb.event {
        Event::Clean => {
            let steps = steps.unwrap_or_default();
            let clean = DoNodeClean {
                node,
                steps,
                disable_ramdisk,
            };
            st.conductor.call(ctx, clean).await?
        }
        Event::Deploy | Event::Rebuild => {
            let deploy = DoNodeDeploy {
                node,
                rebuild: verb.event == Event::Rebuild,
                // An empty one is none (upstream stores only a non-empty one).
                configdrive: obj.get("configdrive").filter(|c| !empty(c)).cloned(),
                deploy_steps,
            };
            st.conductor.call(ctx, deploy).await?
        }
        Event::Service => {
            let Some(steps) = service_steps else {
                return Err(ApiError::invalid(
                    "\"service_steps\" is required when setting target provision state to service",
                ));
            };
            let service = DoNodeService {
                node,
                steps,
                disable_ramdisk,
            };
            st.conductor.call(ctx, service).await?
        }
        Event::Delete => st.conductor.call(ctx, DoNodeTearDown { node }).await?,
        Event::Manage
        | Event::Provide
        | Event::Abort
        | Event::Inspect
        | Event::Adopt
        | Event::Unhold => {
            let action = verb.event.as_str().to_string();
            st.conductor
                .call(ctx, DoProvisioningAction { node, action })
                .await?
        }
        _ => {
            return Err(ApiError::invalid(format!(
                "The requested action \"{target}\" is not supported by this service yet."
            )));
        }
    }
    Ok(accepted(&base, &ident))
}

/// The steps of `runbook` (1.92) for a `clean` or `service` of `node`: the caller may
/// use it (`baremetal:runbook:use`; 404 when it may not see it) and the node's traits
/// approve it (from 1.112 a trait the runbook has; before, its name); no explicit
/// steps beside it. Returns the steps in their order and its `disable_ramdisk`.
#[allow(clippy::too_many_arguments)]
async fn runbook_steps(
    st: &AppState,
    authz: &Authz,
    node: &ironic_model::Node,
    name: &str,
    event: Event,
    clean_steps: &Option<Vec<Requested>>,
    service_steps: &Option<Vec<Requested>>,
    v: Version,
) -> Result<(Vec<Requested>, bool), ApiError> {
    if !matches!(event, Event::Clean | Event::Service) {
        return Err(ApiError::invalid(
            "\"runbooks\" is only valid when setting target provision state to any of ['clean', 'service']",
        ));
    }
    let rb = crate::runbooks::authorized(st, authz, name, Policy::RunbookUse).await?;
    let node_traits = st.db.node_traits(node.id).await?;
    if v.at_least(112) {
        if rb.traits.is_empty() {
            return Err(ApiError::invalid(format!(
                "Runbook {} has no traits configured. Please ask an administrator to add traits to the runbook.",
                rb.uuid
            )));
        }
        if !rb.traits.iter().any(|t| node_traits.contains(t)) {
            let mut sorted = rb.traits.clone();
            sorted.sort();
            return Err(ApiError::invalid(format!(
                "This runbook has not been approved for use on this node {}. The node does not have any of the runbook's traits {}. Please ask an administrator to add a matching trait to your node.",
                node.uuid,
                py_repr(&serde_json::json!(sorted))
            )));
        }
    } else if !node_traits.contains(&rb.name) {
        return Err(ApiError::invalid(format!(
            "This runbook has not been approved for use on this node {}. Please ask an administrator to add it to your node traits.",
            node.uuid
        )));
    }
    let (given, what) = match event {
        Event::Clean => (clean_steps, "clean_steps"),
        _ => (service_steps, "service_steps"),
    };
    if given.is_some() {
        return Err(ApiError::invalid(format!(
            "Please provide either \"{what}\" or a runbook, but not both."
        )));
    }
    let steps = rb
        .ordered_steps()
        .into_iter()
        .map(|s| Requested {
            interface: s.interface,
            step: s.step,
            args: s.args,
        })
        .collect();
    tracing::info!(node = %node.uuid, runbook = %rb.name, "steps from a runbook");
    Ok((steps, rb.disable_ramdisk))
}

/// `PUT /v1/nodes/{node}/states/boot_mode` (1.76): `{"target": "bios"|"uefi"}`, and
/// `PUT …/states/secure_boot`: `{"target": <bool>}`. 202 with a `Location` header; the
/// node's conductor changes it under the lock (a refusal of the hardware lands in
/// `last_error`, as upstream's). Refused while the node is in a transient state.
pub async fn set_boot_mode(
    st: State<AppState>,
    authz: Authz,
    req: Req,
    base: Base,
    ident: P<String>,
    q: RawQuery,
    body: JsonBody,
) -> ApiResult {
    boot_mode_put(st, authz, req, base, ident, q, body, false).await
}

pub async fn set_secure_boot(
    st: State<AppState>,
    authz: Authz,
    req: Req,
    base: Base,
    ident: P<String>,
    q: RawQuery,
    body: JsonBody,
) -> ApiResult {
    boot_mode_put(st, authz, req, base, ident, q, body, true).await
}

#[allow(clippy::too_many_arguments)]
async fn boot_mode_put(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    Base(base): Base,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
    JsonBody(body): JsonBody,
    secure_boot: bool,
) -> ApiResult {
    no_args(&q)?;
    let v = req.version;
    let policy = if secure_boot {
        Policy::NodeSetSecureBoot
    } else {
        Policy::NodeSetBootMode
    };
    let node = authorized_node(&st, &authz, &ident, v, policy).await?;
    if !v.at_least(76) {
        return Err(Error::NotFound(
            "This endpoint is supported starting with the API version 1.76".into(),
        )
        .into());
    }
    let obj = body_object(body, &[("target", 1)], v)?;
    let target = obj.get("target").unwrap_or(&Value::Null);
    if !node.provision_state.is_stable() {
        return Err(Error::Conflict(format!(
            "Node is in {} state. Since node is transitioning, the boot mode will not be set as this may interfere with ongoing changes and result in erroneous modification. Try again later.",
            node.provision_state
        ))
        .into());
    }
    let node_ref = NodeRef::from(&node);
    if secure_boot {
        let on = match target {
            Value::Bool(b) => *b,
            Value::String(s) => ironic_model::node::parse_bool_word(s)
                .ok_or_else(|| ironic_model::node::bool_word_error("target", s))?,
            other => {
                return Err(ApiError::invalid(format!(
                    "Invalid secure_boot {} requested for node. Allowed secure_boot states are: True, False",
                    py_repr(other)
                )));
            }
        };
        let change = ChangeNodeSecureBoot {
            node: node_ref,
            target: on,
        };
        st.conductor.call(&req.ctx, change).await?;
    } else {
        let mode = match target.as_str() {
            Some(m @ ("bios" | "uefi")) => m.to_string(),
            _ => {
                let shown = target
                    .as_str()
                    .map_or_else(|| py_repr(target), str::to_owned);
                return Err(ApiError::invalid(format!(
                    "Invalid boot mode {shown} requested for node. Allowed boot modes are: bios, uefi"
                )));
            }
        };
        let change = ChangeNodeBootMode {
            node: node_ref,
            target: mode,
        };
        st.conductor.call(&req.ctx, change).await?;
    }
    Ok(accepted(&base, &ident))
}

/// Power targets and the microversion that introduced each.
const POWER_TARGETS: &[(&str, u16)] = &[
    ("power on", 1),
    ("power off", 1),
    ("rebooting", 1),
    ("soft power off", 27),
    ("soft rebooting", 27),
];

/// `PUT /v1/nodes/{node}/states/power`: `{"target": <power state>, "timeout": <int>}`
/// (soft variants and `timeout` from 1.27). 202 with a `Location` header.
pub async fn set_power_state(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    Base(base): Base,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
    JsonBody(body): JsonBody,
) -> ApiResult {
    no_args(&q)?;
    let v = req.version;
    // `timeout`'s microversion is checked below: a null one is accepted at any.
    let obj = body_object(body, &[("target", 1), ("timeout", 1)], v)?;
    let Some(target) = obj.get("target").and_then(Value::as_str) else {
        return Err(ApiError::invalid("Missing mandatory parameter: target"));
    };
    let timeout = match obj.get("timeout") {
        None | Some(Value::Null) => None,
        Some(_) if !v.at_least(27) => return Err(Error::not_acceptable().into()),
        Some(t) => match t.as_u64().and_then(|t| u32::try_from(t).ok()) {
            Some(t) if t >= 1 => Some(t),
            _ => return Err(ApiError::invalid("timeout has to be positive integer")),
        },
    };
    let node = authorized_node(&st, &authz, &ident, v, Policy::NodeSetPowerState).await?;
    match POWER_TARGETS.iter().find(|(t, _)| *t == target) {
        None => {
            return Err(ApiError::invalid(format!(
                "The requested action \"{target}\" can not be performed on node \"{ident}\" while it is in state \"{}\".",
                node.power_state.as_deref().unwrap_or("None")
            )));
        }
        Some((_, min)) if !v.at_least(*min) => return Err(Error::not_acceptable().into()),
        Some(_) => {}
    }
    // 1.95: a node that must stay on (upstream's 409, S311); reboots are allowed.
    if node.disable_power_off && matches!(target, "power off" | "soft power off") {
        return Err(power_off_refused(target).into());
    }
    let change = ChangeNodePowerState {
        node: NodeRef::from(&node),
        new_state: target.to_string(),
        timeout_secs: timeout,
    };
    st.conductor.call(&req.ctx, change).await?;
    Ok(accepted(&base, &ident))
}

fn power_off_refused(target: &str) -> Error {
    Error::Conflict(format!("Failed to set node power state to {target}."))
}

/// `GET /v1/nodes/{node}/validate`: each interface's validation, core interfaces
/// first as upstream shows them.
pub async fn validate(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
) -> ApiResult {
    no_args(&q)?;
    let node = authorized_node(&st, &authz, &ident, req.version, Policy::NodeValidate).await?;
    let mut list = st
        .conductor
        .call(
            &req.ctx,
            ValidateDriverInterfaces {
                node: NodeRef::from(&node),
            },
        )
        .await?;
    const CORE: &[&str] = &["boot", "deploy", "management", "network", "power"];
    let rank = |name: &str| CORE.iter().position(|c| *c == name).unwrap_or(CORE.len());
    list.sort_by(|a, b| {
        (rank(&a.interface), &a.interface).cmp(&(rank(&b.interface), &b.interface))
    });
    let mut doc = serde_json::Map::new();
    for c in list {
        let mut entry = serde_json::Map::new();
        entry.insert("result".into(), c.result.map_or(Value::Null, Value::Bool));
        if let Some(r) = c.reason {
            entry.insert("reason".into(), Value::String(r));
        }
        doc.insert(c.interface, Value::Object(entry));
    }
    Ok(crate::json_response(StatusCode::OK, &Value::Object(doc)))
}

/// How long a client should wait before asking again for steps not known yet.
const RETRY_AFTER_SECS: u32 = 2;

/// `GET /v1/nodes/{node}/cleaning/steps?min_priority=N` (an extension upstream
/// proposed but never served; from 1.15, the manual-cleaning microversion): every
/// clean step the node's driver offers with a priority of at least N, highest first.
/// When the driver cannot list them yet: 202, `Retry-Request-After` and a message.
pub async fn cleaning_steps(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
) -> ApiResult {
    let v = req.version;
    if !v.at_least(15) {
        return Err(Error::not_acceptable().into());
    }
    let q = crate::query::Query::parse(q.as_deref())?;
    q.only(&["min_priority"])?;
    let min_priority = match q.get("min_priority") {
        None => 0,
        Some(p) => p.parse::<u32>().map_err(|_| {
            ApiError::invalid(format!(
                "min_priority must be a non-negative integer, not {p:?}"
            ))
        })?,
    };
    let node = authorized_node(&st, &authz, &ident, v, Policy::NodeGet).await?;
    match st
        .conductor
        .call(
            &req.ctx,
            GetCleanSteps {
                node: NodeRef::from(&node),
                min_priority,
            },
        )
        .await?
    {
        Some(steps) => {
            let steps: Vec<Value> = steps
                .into_iter()
                .map(|s| {
                    serde_json::json!({
                        "interface": s.interface,
                        "step": s.step,
                        "priority": s.priority,
                        "abortable": s.abortable,
                        "args": if s.argsinfo.is_null() { serde_json::json!({}) } else { s.argsinfo },
                    })
                })
                .collect();
            Ok(crate::json_response(
                StatusCode::OK,
                &serde_json::json!({ "steps": steps }),
            ))
        }
        None => {
            let mut resp = crate::json_response(
                StatusCode::ACCEPTED,
                &serde_json::json!({
                    "message": format!(
                        "The clean steps of node {} are not known yet: its driver is asking the node for them. Retry in {RETRY_AFTER_SECS} seconds.",
                        node.uuid
                    )
                }),
            );
            resp.headers_mut()
                .insert("Retry-Request-After", HeaderValue::from(RETRY_AFTER_SECS));
            Ok(resp)
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    const MIB64: u64 = 64 << 20;

    fn check(target: &str, c: Value, minor: u16) -> Result<(), String> {
        check_configdrive(target, &c, Version { minor }, MIB64).map_err(|e| match e {
            ApiError::Domain(Error::Invalid(m)) => m,
            other => panic!("not a 400: {other:?}"),
        })
    }

    /// Upstream's `test_check_allow_configdrive*` cases (`ironic/tests/unit/api/
    /// controllers/v1/test_utils.py`), with upstream's messages.
    #[test]
    fn configdrive_targets_and_versions_as_upstream() {
        check("active", json!("abcd"), 35).unwrap();
        check("rebuild", json!("abcd"), 35).unwrap();
        check("active", json!("abcd"), 34).unwrap();
        assert_eq!(
            check("deleted", json!("abcd"), 35).unwrap_err(),
            "Adding a config drive is only supported when setting provision state to active, rebuild"
        );
        assert_eq!(
            check("rebuild", json!("abcd"), 34).unwrap_err(),
            "Adding a config drive is only supported when setting provision state to active"
        );
        // The `deploy` verb (1.73) takes none upstream either.
        assert!(check("deploy", json!("abcd"), 73).is_err());
        assert_eq!(
            check("active", json!({"meta_data": {}}), 55).unwrap_err(),
            "Providing a JSON object for configdrive is only supported starting with API version 1.56"
        );
        check("active", json!({"meta_data": {}}), 56).unwrap();
        check("active", json!({"user_data": "foo"}), 59).unwrap();
        check("active", json!({"user_data": ["foo"]}), 59).unwrap();
        check("active", json!({"user_data": null}), 59).unwrap();
        let all = json!({"meta_data": {}, "network_data": {}, "user_data": {}, "vendor_data": {}});
        check("active", all.clone(), 59).unwrap();
        assert_eq!(
            check("active", all, 58).unwrap_err(),
            "Providing vendor_data in configdrive is only supported starting with API version 1.59"
        );
        // Nothing at all is never refused, whatever the verb or version.
        for none in [Value::Null, json!(""), json!({})] {
            check("manage", none, 1).unwrap();
        }
    }

    #[test]
    fn configdrive_object_by_upstreams_schema() {
        assert_eq!(
            check("rebuild", json!({"foo": "bar"}), 59).unwrap_err(),
            "Invalid configdrive format: unexpected member 'foo': the object takes only meta_data, network_data, user_data and vendor_data"
        );
        for key in ["meta_data", "network_data", "vendor_data"] {
            for bad in [json!("a string"), json!(42), json!([]), Value::Null] {
                let e = check("rebuild", json!({ key: bad }), 59).unwrap_err();
                assert!(
                    e.starts_with(&format!(
                        "Invalid configdrive format: {key} must be an object, not "
                    )),
                    "{e}"
                );
            }
        }
        for bad in [json!(42), json!(true)] {
            let e = check("rebuild", json!({ "user_data": bad }), 59).unwrap_err();
            assert!(
                e.contains("user_data must be an object, a list, a string or null"),
                "{e}"
            );
        }
        // The schema comes before the version, as upstream.
        assert!(
            check("active", json!({"foo": 1}), 50)
                .unwrap_err()
                .starts_with("Invalid configdrive format")
        );
    }

    #[test]
    fn configdrive_strings_are_urls_or_base64_within_the_limit() {
        check("active", json!("http://example.com/cd"), 51).unwrap();
        check("active", json!("swift://anything goes: {}"), 51).unwrap();
        check("active", json!("H4sIAAAA\nAAAA+/==\r\n\t "), 51).unwrap();
        assert_eq!(
            check("active", json!("{\"meta_data\": "), 60).unwrap_err(),
            "Invalid configdrive format: it is neither a JSON, nor a URL, nor a base64 string"
        );
        // 8 base64 digits are 6 bytes: the limit counts decoded bytes.
        let c = json!("AAAA\nAAAA==");
        check_configdrive("active", &c, Version { minor: 51 }, 6).unwrap();
        let e = check_configdrive("active", &c, Version { minor: 51 }, 5).unwrap_err();
        let ApiError::Domain(Error::Invalid(m)) = e else {
            panic!("{e:?}");
        };
        assert!(
            m.contains("is 6 bytes once decoded, over the limit of 5 bytes")
                && m.contains("[deploy] configdrive_max_bytes"),
            "{m}"
        );
    }
}
