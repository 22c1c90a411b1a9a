//! The rest of a node's hardware routes up to 1.61: `states/console`,
//! `management/boot_device[/supported]`, `management/inject_nmi` (1.29), `states/raid`
//! (1.12), `bios[/{name}]` (1.40), vendor passthru for nodes and drivers, and
//! `GET /v1/drivers/{name}/raid/logical_disk_properties` (1.12). Whatever touches
//! hardware goes to the node's conductor; what a hardware type declares (passthru
//! methods, RAID properties, the fake BIOS settings) is read from `ironic-catalog`.

use axum::extract::{RawQuery, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use ironic_catalog::vendor::{
    VendorMethod, bios_settings, driver_vendor_methods, node_vendor_methods,
};
use ironic_model::Error;
use ironic_model::patch::py_repr;
use ironic_rpc::NodeRef;
use ironic_rpc::calls::{
    GetBootDevice, GetConsoleInformation, GetIndicatorState, GetSupportedBootDevices,
    GetSupportedIndicators, InjectNmi, SetBootDevice, SetConsoleMode, SetIndicatorState,
    SetTargetRaidConfig, VendorPassthru,
};
use serde_json::{Map, Value, json};

use crate::body::{JsonBody, P, RawBody, parse_json};
use crate::error::ApiError;
use crate::nodes::{authorized_node, call_on_node};
use crate::policy::{Authz, Policy};
use crate::query::Query;
use crate::view::{Ts, links_value};
use crate::{AppState, Base, Req, json_response};

type ApiResult = Result<Response, ApiError>;

use crate::error::route_since as since;

fn object(body: Value, what: &str) -> Result<Map<String, Value>, ApiError> {
    match body {
        Value::Object(o) => Ok(o),
        other => Err(ApiError::invalid(format!(
            "Schema error for {what}: {} is not of type 'object'",
            py_repr(&other)
        ))),
    }
}

pub async fn console_get(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
) -> ApiResult {
    Query::parse(q.as_deref())?.only(&[])?;
    let node = authorized_node(&st, &authz, &ident, req.version, Policy::NodeGetConsole).await?;
    let info = if node.console_enabled {
        let r = st
            .conductor
            .call(
                &req.ctx,
                GetConsoleInformation {
                    node: NodeRef::from(&node),
                },
            )
            .await?;
        r.0
    } else {
        Value::Null
    };
    Ok(json_response(
        StatusCode::OK,
        &json!({"console_enabled": node.console_enabled, "console_info": info}),
    ))
}

pub async fn console_put(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
    JsonBody(body): JsonBody,
) -> ApiResult {
    Query::parse(q.as_deref())?.only(&[])?;
    let node = authorized_node(
        &st,
        &authz,
        &ident,
        req.version,
        Policy::NodeSetConsoleState,
    )
    .await?;
    let body = object(body, "console")?;
    let enabled = match body.get("enabled") {
        Some(Value::Bool(b)) => *b,
        Some(other) => match other.as_str().and_then(ironic_model::node::parse_bool_word) {
            Some(b) => b,
            None => {
                return Err(ApiError::invalid(format!(
                    "Schema error for console: {} is not of type 'boolean'",
                    py_repr(other)
                )));
            }
        },
        None => {
            return Err(ApiError::invalid(
                "Schema error for console: 'enabled' is a required property",
            ));
        }
    };
    st.conductor
        .call(
            &req.ctx,
            SetConsoleMode {
                node: NodeRef::from(&node),
                enabled,
            },
        )
        .await?;
    Ok(StatusCode::ACCEPTED.into_response())
}

pub async fn boot_device_get(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
) -> ApiResult {
    let p = Policy::NodeGetBootDevice;
    let r = call_on_node(&st, &authz, &req, &ident, q.as_deref(), p, |node| {
        GetBootDevice { node }
    })
    .await?;
    Ok(json_response(StatusCode::OK, &r.0))
}

pub async fn boot_device_supported(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
) -> ApiResult {
    let p = Policy::NodeGetBootDevice;
    let r = call_on_node(&st, &authz, &req, &ident, q.as_deref(), p, |node| {
        GetSupportedBootDevices { node }
    })
    .await?;
    Ok(json_response(
        StatusCode::OK,
        &json!({"supported_boot_devices": r.0}),
    ))
}

pub async fn boot_device_put(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
    JsonBody(body): JsonBody,
) -> ApiResult {
    Query::parse(q.as_deref())?.only(&[])?;
    let node = authorized_node(&st, &authz, &ident, req.version, Policy::NodeSetBootDevice).await?;
    let body = object(body, "boot_device")?;
    let device = match body.get("boot_device") {
        Some(Value::String(d)) => d.clone(),
        Some(other) => {
            return Err(ApiError::invalid(format!(
                "Schema error for boot_device: {} is not of type 'string'",
                py_repr(other)
            )));
        }
        None => {
            return Err(ApiError::invalid(
                "Schema error for boot_device: 'boot_device' is a required property",
            ));
        }
    };
    let persistent = match body.get("persistent") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            return Err(ApiError::invalid(format!(
                "Schema error for boot_device: {} is not of type 'boolean'",
                py_repr(other)
            )));
        }
    };
    if let Some(k) = body
        .keys()
        .find(|k| !matches!(k.as_str(), "boot_device" | "persistent"))
    {
        return Err(ApiError::invalid(format!(
            "Schema error for boot_device: Additional properties are not allowed ('{k}' was unexpected)"
        )));
    }
    st.conductor
        .call(
            &req.ctx,
            SetBootDevice {
                node: NodeRef::from(&node),
                device,
                persistent,
            },
        )
        .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub async fn inject_nmi(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
    RawBody(_body): RawBody,
) -> ApiResult {
    since(req.version, 29)?;
    let p = Policy::NodeInjectNmi;
    call_on_node(&st, &authz, &req, &ident, q.as_deref(), p, |node| {
        InjectNmi { node }
    })
    .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `GET .../management/indicators` (1.63; upstream answers it at any version): each
/// indicator as `<name>@<component>` with links under the node as the client named it.
pub async fn indicators_list(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    Base(base): Base,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
) -> ApiResult {
    let p = Policy::NodeGetIndicatorState;
    let r = call_on_node(&st, &authz, &req, &ident, q.as_deref(), p, |node| {
        GetSupportedIndicators { node }
    })
    .await?;
    let list: Vec<Value> =
        r.0.as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .map(|i| {
                let text = |k: &str| i.get(k).and_then(Value::as_str).unwrap_or_default();
                let unique = format!("{}@{}", text("name"), text("component"));
                let path = format!("nodes/{ident}/management/indicators/{unique}");
                json!({
                    "name": unique,
                    "component": text("component"),
                    "readonly": i.get("readonly").cloned().unwrap_or(Value::Bool(true)),
                    "states": i.get("states").cloned().unwrap_or_else(|| json!([])),
                    "links": links_value(&base, &path),
                })
            })
            .collect();
    Ok(json_response(StatusCode::OK, &json!({"indicators": list})))
}

pub async fn indicator_get(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    P((ident, indicator)): P<(String, String)>,
    RawQuery(q): RawQuery,
) -> ApiResult {
    // The conductor checks the name (`Malformed indicator name …`) and the indicator.
    let p = Policy::NodeGetIndicatorState;
    let r = call_on_node(&st, &authz, &req, &ident, q.as_deref(), p, |node| {
        GetIndicatorState { node, indicator }
    })
    .await?;
    Ok(json_response(StatusCode::OK, &r.0))
}

/// `PUT .../indicators/{name@component}` with `state` in the body (or, as upstream
/// also takes it, the query): 204.
pub async fn indicator_put(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    P((ident, indicator)): P<(String, String)>,
    RawQuery(q): RawQuery,
    RawBody(body): RawBody,
) -> ApiResult {
    let query = Query::parse(q.as_deref())?;
    query.only(&["state"])?;
    let from_query = query.get("state").map(str::to_owned);
    let state = if body.iter().all(u8::is_ascii_whitespace) {
        from_query
    } else {
        let mut o = object(parse_json(&body)?, "indicator")?;
        let state = o.remove("state");
        if let Some(k) = o.keys().next() {
            return Err(ApiError::invalid(format!("Unknown argument: \"{k}\"")));
        }
        match state {
            Some(Value::String(s)) => Some(s),
            Some(other) => {
                return Err(ApiError::invalid(format!(
                    "Argument 'state' is not of type 'string': {}",
                    py_repr(&other)
                )));
            }
            None => from_query,
        }
    };
    let state = state.ok_or_else(|| ApiError::invalid("Missing argument: \"state\""))?;
    let node = authorized_node(
        &st,
        &authz,
        &ident,
        req.version,
        Policy::NodeSetIndicatorState,
    )
    .await?;
    st.conductor
        .call(
            &req.ctx,
            SetIndicatorState {
                node: NodeRef::from(&node),
                indicator,
                state,
            },
        )
        .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub async fn raid_put(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
    JsonBody(body): JsonBody,
) -> ApiResult {
    since(req.version, 12)?;
    Query::parse(q.as_deref())?.only(&[])?;
    let node = authorized_node(&st, &authz, &ident, req.version, Policy::NodeSetRaidState).await?;
    // `{}` clears the target; anything else must follow the schema.
    if body != json!({}) {
        ironic_model::raid::check_target_raid_config(&body)?;
    }
    st.conductor
        .call(
            &req.ctx,
            SetTargetRaidConfig {
                node: NodeRef::from(&node),
                target_raid_config: body,
            },
        )
        .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub async fn raid_logical_disk_properties(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    P(name): P<String>,
    RawQuery(q): RawQuery,
) -> ApiResult {
    since(req.version, 12)?;
    authz.check(Policy::DriverGetRaidLogicalDiskProperties)?;
    Query::parse(q.as_deref())?.only(&[])?;
    let hw = enabled_driver(&st, &name)?;
    match hw.default_interface("raid") {
        Some(r) if !r.starts_with("no-") => Ok(json_response(
            StatusCode::OK,
            &Value::Object(ironic_model::raid::logical_disk_properties()),
        )),
        _ => Err(ApiError::invalid(format!(
            "Driver {name} does not support raid (disabled or not implemented)."
        ))),
    }
}

/// A hardware type some live conductor enables: 404 otherwise.
fn enabled_driver(
    st: &AppState,
    name: &str,
) -> Result<&'static ironic_catalog::HardwareType, ApiError> {
    let known = ironic_catalog::known(name);
    match known {
        Some(hw) if st.topology.snapshot().drivers().contains_key(name) => Ok(hw),
        _ => Err(Error::NotFound(format!(
            "Could not find the following driver(s) or hardware type(s): {name}."
        ))
        .into()),
    }
}

/// The registry fields of a BIOS setting (1.74). The fake BIOS interface has no
/// registry: all of them are empty, as upstream's.
const BIOS_REGISTRY: &[&str] = &[
    "attribute_type",
    "allowable_values",
    "lower_bound",
    "max_length",
    "min_length",
    "read_only",
    "reset_required",
    "unique",
    "upper_bound",
];

/// What `?fields=` may name on the BIOS list (upstream's schema).
const BIOS_FIELDS: &[&str] = &[
    "allowable_values",
    "attribute_type",
    "created_at",
    "lower_bound",
    "links",
    "max_length",
    "min_length",
    "name",
    "node_uuid",
    "read_only",
    "reset_required",
    "unique",
    "updated_at",
    "value",
];

/// One BIOS setting: `created_at` and `updated_at` always, then `fields` (in
/// upstream's order), then the links under `ident`.
fn bios_doc(base: &str, ident: &str, node_uuid: &str, s: &Setting, fields: &[&str]) -> Value {
    let (name, value) = (s.name.as_str(), &s.value);
    let mut m = Map::new();
    m.insert("created_at".into(), s.created.clone());
    m.insert("updated_at".into(), s.updated.clone());
    for f in fields {
        let v = match *f {
            "name" => json!(name),
            "value" => json!(value),
            "node_uuid" => json!(node_uuid),
            "allowable_values" => json!([]),
            "created_at" | "updated_at" | "links" => continue,
            _ => Value::Null,
        };
        m.insert((*f).to_string(), v);
    }
    m.insert(
        "links".into(),
        links_value(base, &format!("nodes/{ident}/bios/{name}")),
    );
    Value::Object(m)
}

/// One BIOS setting as shown.
struct Setting {
    name: String,
    value: Option<String>,
    created: Value,
    updated: Value,
}

/// The node's BIOS settings: the fake interface's fixed ones (as of the node's
/// creation), or what a real interface last read from the hardware (stored by the
/// conductor); none for `no-bios`.
async fn node_bios(st: &AppState, node: &ironic_model::Node) -> Result<Vec<Setting>, ApiError> {
    let iface = node.interfaces.get("bios").unwrap_or("no-bios");
    let fixed = bios_settings(iface);
    if !fixed.is_empty() {
        let created = json!(Ts(&node.created_at));
        return Ok(fixed
            .iter()
            .map(|(n, v)| Setting {
                name: (*n).to_string(),
                value: Some((*v).to_string()),
                created: created.clone(),
                updated: Value::Null,
            })
            .collect());
    }
    if iface == "no-bios" {
        return Ok(Vec::new());
    }
    Ok(st
        .db
        .bios_list(node.id.0)
        .await?
        .into_iter()
        .map(|b| Setting {
            name: b.name,
            value: b.value,
            created: json!(Ts(&b.created_at)),
            updated: b.updated_at.as_ref().map_or(Value::Null, |t| json!(Ts(t))),
        })
        .collect())
}

/// The fields of a BIOS setting shown without `fields`: with the registry's or not.
fn bios_default_fields(registry: bool) -> Vec<&'static str> {
    let mut f = vec!["name", "value"];
    if registry {
        f.extend(BIOS_REGISTRY);
    }
    f
}

pub async fn bios_list(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    Base(base): Base,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
) -> ApiResult {
    since(req.version, 40)?;
    let q = Query::parse(q.as_deref())?;
    if !req.version.at_least(74)
        && let Some(k) = ["detail", "fields"].into_iter().find(|k| q.has(k))
    {
        return Err(ApiError::invalid(format!(
            "Schema error: Additional properties are not allowed ('{k}' was unexpected)"
        )));
    }
    q.only(&["detail", "fields"])?;
    let detail = q.bool("detail")?.unwrap_or(false);
    let fields = match q.get("fields") {
        Some(_) if detail => {
            return Err(ApiError::invalid(
                "Can not specify ?detail=True and fields in the same request.",
            ));
        }
        Some(list) => crate::query::field_list(list, BIOS_FIELDS)?,
        None => bios_default_fields(detail),
    };
    let node = authorized_node(&st, &authz, &ident, req.version, Policy::NodeBiosGet).await?;
    let list: Vec<Value> = node_bios(&st, &node)
        .await?
        .iter()
        .map(|s| bios_doc(&base, &ident, node.uuid.as_str(), s, &fields))
        .collect();
    Ok(json_response(StatusCode::OK, &json!({ "bios": list })))
}

pub async fn bios_get(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    Base(base): Base,
    P((ident, name)): P<(String, String)>,
    RawQuery(q): RawQuery,
) -> ApiResult {
    since(req.version, 40)?;
    Query::parse(q.as_deref())?.only(&[])?;
    let node = authorized_node(&st, &authz, &ident, req.version, Policy::NodeBiosGet).await?;
    let found = node_bios(&st, &node)
        .await?
        .into_iter()
        .find(|s| s.name == name)
        .ok_or_else(|| {
            Error::NotFound(format!(
                "Node {} doesn't have a BIOS setting '{name}'",
                node.uuid
            ))
        })?;
    // The registry fields from 1.74; the links under the node's uuid, as upstream's.
    let fields = bios_default_fields(req.version.at_least(74));
    let uuid = node.uuid.as_str();
    let doc = bios_doc(&base, uuid, uuid, &found, &fields);
    let mut m = Map::new();
    m.insert(name, doc);
    Ok(json_response(StatusCode::OK, &Value::Object(m)))
}

fn methods_doc(methods: &[VendorMethod]) -> Value {
    let mut m = Map::new();
    for v in methods {
        m.insert(
            v.name.into(),
            json!({
                "http_methods": v.http_methods,
                "async": v.is_async,
                "description": v.description,
                "attach": v.attach,
                "require_exclusive_lock": v.require_exclusive_lock,
            }),
        );
    }
    Value::Object(m)
}

pub async fn node_passthru_methods(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
) -> ApiResult {
    Query::parse(q.as_deref())?.only(&[])?;
    let node =
        authorized_node(&st, &authz, &ident, req.version, Policy::NodeVendorPassthru).await?;
    let vendor = node.interfaces.get("vendor").unwrap_or("no-vendor");
    Ok(json_response(
        StatusCode::OK,
        &methods_doc(node_vendor_methods(vendor)),
    ))
}

pub async fn driver_passthru_methods(
    State(st): State<AppState>,
    authz: Authz,
    P(name): P<String>,
    RawQuery(q): RawQuery,
) -> ApiResult {
    authz.check(Policy::DriverVendorPassthru)?;
    Query::parse(q.as_deref())?.only(&[])?;
    let hw = enabled_driver(&st, &name)?;
    Ok(json_response(
        StatusCode::OK,
        &methods_doc(driver_vendor_methods(hw)),
    ))
}

/// The method (in the path, or `?method=`) and the JSON body of a passthru call (any
/// HTTP method).
fn passthru_args(
    in_path: Option<String>,
    q: Option<String>,
    body: &[u8],
) -> Result<(String, Value), ApiError> {
    let q = Query::parse(q.as_deref())?;
    q.only(&["method"])?;
    let method = in_path
        .as_deref()
        .or(q.get("method"))
        .filter(|m| !m.is_empty())
        .ok_or_else(|| ApiError::invalid("Method not specified"))?
        .to_string();
    let info = if body.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        parse_json(body)?
    };
    Ok((method, info))
}

fn passthru_answer(r: Value) -> Response {
    let is_async = r.get("async").and_then(Value::as_bool).unwrap_or(false);
    let ret = r.get("return").cloned().unwrap_or(Value::Null);
    let status = if is_async {
        StatusCode::ACCEPTED
    } else {
        StatusCode::OK
    };
    json_response(status, &ret)
}

pub async fn node_passthru(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    method: Method,
    P(ident): P<String>,
    RawQuery(q): RawQuery,
    RawBody(body): RawBody,
) -> ApiResult {
    node_call(&st, &authz, &req, method, &ident, None, q, &body).await
}

/// `…/vendor_passthru/{method}` (the form the CLI sends).
pub async fn node_passthru_named(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    method: Method,
    P((ident, name)): P<(String, String)>,
    RawQuery(q): RawQuery,
    RawBody(body): RawBody,
) -> ApiResult {
    node_call(&st, &authz, &req, method, &ident, Some(name), q, &body).await
}

#[allow(clippy::too_many_arguments)]
async fn node_call(
    st: &AppState,
    authz: &Authz,
    req: &Req,
    method: Method,
    ident: &str,
    in_path: Option<String>,
    q: Option<String>,
    body: &[u8],
) -> ApiResult {
    let node = authorized_node(st, authz, ident, req.version, Policy::NodeVendorPassthru).await?;
    let (name, info) = passthru_args(in_path, q, body)?;
    let r = st
        .conductor
        .call(
            &req.ctx,
            VendorPassthru {
                driver: node.driver.clone(),
                node: Some(NodeRef::from(&node)),
                method: name,
                http_method: method.as_str().to_string(),
                info,
            },
        )
        .await?;
    Ok(passthru_answer(r.0))
}

pub async fn driver_passthru(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    method: Method,
    P(name): P<String>,
    RawQuery(q): RawQuery,
    RawBody(body): RawBody,
) -> ApiResult {
    driver_call(&st, &authz, &req, method, name, None, q, &body).await
}

/// `…/vendor_passthru/{method}` (the form the CLI sends).
pub async fn driver_passthru_named(
    State(st): State<AppState>,
    authz: Authz,
    req: Req,
    method: Method,
    P((name, m)): P<(String, String)>,
    RawQuery(q): RawQuery,
    RawBody(body): RawBody,
) -> ApiResult {
    driver_call(&st, &authz, &req, method, name, Some(m), q, &body).await
}

#[allow(clippy::too_many_arguments)]
async fn driver_call(
    st: &AppState,
    authz: &Authz,
    req: &Req,
    method: Method,
    name: String,
    in_path: Option<String>,
    q: Option<String>,
    body: &[u8],
) -> ApiResult {
    authz.check(Policy::DriverVendorPassthru)?;
    enabled_driver(st, &name)?;
    let (m, info) = passthru_args(in_path, q, body)?;
    let r = st
        .conductor
        .call(
            &req.ctx,
            VendorPassthru {
                node: None,
                driver: name,
                method: m,
                http_method: method.as_str().to_string(),
                info,
            },
        )
        .await?;
    Ok(passthru_answer(r.0))
}
