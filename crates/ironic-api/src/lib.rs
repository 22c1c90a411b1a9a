//! The REST API: Ironic's JSON shapes, microversion negotiation, JSON Patch, pagination,
//! error bodies and authentication. Reads go straight to the database; every write goes
//! to the conductor through `ironic_rpc::Conductors`.
//!
//! Architecture invariant: handlers validate, read and route; they never run long work
//! inline and never write SQL.

use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{Next, from_fn_with_state};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, delete, get, post, put};
use ironic_db::Db;
use ironic_model::node::NodeDefaults;
use ironic_model::version::{self, Version, VersionError};
use ironic_rpc::{Conductors, Context};
use serde::Serialize;
use tracing::Instrument;

mod allocations;
pub mod auth;
mod body;
mod chassis;
mod conductors;
mod deploy_templates;
mod drivers;
pub mod error;
mod events;
mod firmware;
mod history;
mod inspection_rules;
mod inventory;
mod management;
mod nodes;
pub mod policy;
mod ports;
mod provision;
mod query;
pub mod ramdisk;
mod root;
mod runbooks;
mod shards;
mod vifs;
mod vmedia;
mod volume;
pub use ironic_db::topology;
pub mod view;

use auth::{Auth, Refusal};
use error::{ApiError, NoVersionHeaders};
use policy::{Credentials, Decided};
use topology::Topology;

/// The key a client's address counts against in the API's limits (the ramdisk routes'
/// rate, failed logins): an IPv4 address itself, an IPv6 one by its /64 (one host
/// holds a whole /64, and would otherwise have 2^64 budgets).
pub fn rate_key(ip: std::net::IpAddr) -> std::net::IpAddr {
    match ip {
        std::net::IpAddr::V6(v6) if v6.to_ipv4_mapped().is_none() => {
            let bits = u128::from(v6) & (u128::MAX << 64);
            std::net::IpAddr::V6(bits.into())
        }
        std::net::IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, std::net::IpAddr::V4),
        v4 => v4,
    }
}

/// The client of a request: the connection's `peer`, unless it is one of the
/// `trusted` proxies, in which case the rightmost address of `X-Forwarded-For` that is
/// not a trusted proxy itself (an address a client wrote further left is not trusted).
pub fn client_address(
    peer: std::net::IpAddr,
    forwarded_for: Option<&str>,
    trusted: &[(std::net::IpAddr, u8)],
) -> std::net::IpAddr {
    let is_proxy = |ip: std::net::IpAddr| {
        trusted
            .iter()
            .any(|n| ironic_model::addr::in_network(ip, *n))
    };
    if trusted.is_empty() || !is_proxy(peer) {
        return peer;
    }
    let Some(list) = forwarded_for else {
        return peer;
    };
    for hop in list.rsplit(',') {
        match hop.trim().parse::<std::net::IpAddr>() {
            Ok(ip) if is_proxy(ip) => continue,
            Ok(ip) => return ip,
            // Not an address: nothing left of it can be trusted.
            Err(_) => return peer,
        }
    }
    peer
}

/// Settings of the API process.
#[derive(Debug, Clone)]
pub struct ApiSettings {
    pub public_endpoint: Option<String>,
    /// Base URL used when a request carries no `Host` header.
    pub fallback_base: String,
    /// `http` or `https`: the scheme of links built from the request's `Host`.
    pub scheme: &'static str,
    pub max_limit: u32,
    pub max_body: usize,
    /// Largest provision body (`[api] provision_max_body_bytes`): it carries config drives.
    pub provision_max_body: usize,
    /// Largest inspection data (`[api] inspection_max_body_bytes`).
    pub inspection_max_body: usize,
    /// The largest config drive, decoded (`[deploy] configdrive_max_bytes`).
    pub configdrive_max_bytes: u64,
    /// How long a client has to send a body (`[api] body_read_timeout`).
    pub body_timeout: std::time::Duration,
    /// The most JSON values a body may hold (`[api] max_json_values`), and one larger
    /// than `max_body` (`large_body_json_values`).
    pub max_json_values: usize,
    pub large_body_json_values: usize,
    /// The bodies larger than `max_body` read and held at once (`[api]
    /// large_bodies_at_once`), for the whole process.
    pub large_bodies: Arc<tokio::sync::Semaphore>,
    pub defaults: NodeDefaults,
    pub ramdisk: ramdisk::RamdiskSettings,
}

pub struct Inner {
    pub db: Db,
    pub conductor: Conductors,
    pub topology: Arc<Topology>,
    pub auth: Auth,
    pub settings: ApiSettings,
}

/// Shared state of every handler.
#[derive(Clone)]
pub struct AppState(pub Arc<Inner>);

impl std::ops::Deref for AppState {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}

/// The request id (`req-<uuid>`), also returned in `X-Openstack-Request-Id`.
#[derive(Debug, Clone)]
pub struct RequestId(pub String);

/// The base URL of links for this request, without a trailing slash.
pub struct Base(pub String);

impl FromRequestParts<AppState> for Base {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, st: &AppState) -> Result<Self, Self::Rejection> {
        if let Some(p) = &st.settings.public_endpoint {
            return Ok(Base(p.trim_end_matches('/').to_string()));
        }
        let host = parts
            .headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok());
        Ok(Base(match host {
            Some(h) if !h.is_empty() && h.bytes().all(|b| b.is_ascii_graphic()) => {
                format!("{}://{h}", st.settings.scheme)
            }
            _ => st.settings.fallback_base.clone(),
        }))
    }
}

/// The negotiated microversion and the call context, for handlers.
pub struct Req {
    pub version: Version,
    pub ctx: Context,
}

impl FromRequestParts<AppState> for Req {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        _st: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let version = parts
            .extensions
            .get::<Version>()
            .copied()
            .unwrap_or(Version::MIN);
        let request_id = parts
            .extensions
            .get::<RequestId>()
            .map(|r| r.0.clone())
            .unwrap_or_default();
        Ok(Req {
            version,
            ctx: Context {
                request_id,
                attempt: 0,
            },
        })
    }
}

/// Sets the `Location` header of `resp` to `url` (left out if `url` is not a valid
/// header value, which a URL built from our own base and identifiers never is).
pub(crate) fn set_location(resp: &mut Response, url: &str) {
    if let Ok(loc) = HeaderValue::from_str(url) {
        resp.headers_mut().insert(header::LOCATION, loc);
    }
}

/// The buffer a JSON answer is written into to start with: most answers fit.
pub const RESPONSE_BYTES: usize = 1024;

/// A JSON response with the given status.
pub fn json_response(status: StatusCode, body: &impl Serialize) -> Response {
    json_response_sized(status, body, RESPONSE_BYTES)
}

/// [`json_response`] written into a buffer of `capacity` bytes to start with: a page of
/// detailed nodes (~2.5 KB each) grew a 128-byte one a dozen times, copying it each time.
pub fn json_response_sized(status: StatusCode, body: &impl Serialize, capacity: usize) -> Response {
    let mut bytes = Vec::with_capacity(capacity);
    match serde_json::to_writer(&mut bytes, body) {
        Ok(()) => {
            let mut r = (status, bytes).into_response();
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            r
        }
        Err(e) => ApiError::Domain(ironic_model::Error::internal_from(
            "serialising a response",
            e,
        ))
        .into_response(),
    }
}

const H_MIN: &str = "x-openstack-ironic-api-minimum-version";
const H_MAX: &str = "x-openstack-ironic-api-maximum-version";
const H_VER: &str = "x-openstack-ironic-api-version";

/// The requested version: `OpenStack-API-Version: baremetal X.Y` first, then the legacy
/// header.
fn requested_version(h: &HeaderMap) -> Option<String> {
    for v in h.get_all("openstack-api-version") {
        if let Some(found) = v.to_str().ok().and_then(version::from_openstack_header) {
            return Some(found.to_string());
        }
    }
    h.get(H_VER)
        .map(|v| v.to_str().unwrap_or("\u{0}").to_string())
}

/// Routes that need no credentials: discovery, and the ramdisk agent's lookup,
/// heartbeat and inspection data (the agent has none; its token is checked by the
/// conductor).
fn is_public(path: &str) -> bool {
    if matches!(path, "/" | "/v1" | "/v1/") {
        return true;
    }
    is_ramdisk_route(path)
}

/// The ramdisk agent's routes (lookup, heartbeat, inspection data): public, with a
/// budget of their own (`[api] ramdisk_*`, served apart by the HTTP loop).
pub fn is_ramdisk_route(path: &str) -> bool {
    let p = path.strip_prefix("/v1").unwrap_or(path);
    let p = p.strip_suffix('/').unwrap_or(p);
    p == "/lookup"
        || p == "/continue_inspection"
        || p.strip_prefix("/heartbeat/")
            .is_some_and(|n| !n.is_empty() && !n.contains('/'))
}

/// The edge of every request: request id, span and log line, version negotiation and
/// its headers, authentication.
async fn edge(State(st): State<AppState>, mut req: Request, next: Next) -> Response {
    let started = Instant::now();
    let in_flight = metrics::gauge!("ironic_api_requests_in_flight");
    in_flight.increment(1.0);
    let _done = scopeguard(move || in_flight.decrement(1.0));
    let rid = format!("req-{}", uuid::Uuid::new_v4());
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let span = tracing::info_span!("request", request_id = %rid, %method, %path);
    // A client that traces (W3C `traceparent`) gets our spans inside its trace.
    if let Some(tp) = req
        .headers()
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
    {
        let tracestate = req
            .headers()
            .get("tracestate")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        ironic_rpc::trace::attach(
            &span,
            &ironic_rpc::pb::TraceContext {
                traceparent: tp.to_string(),
                tracestate: tracestate.to_string(),
            },
        );
    }
    let mut resp = async {
        let negotiated = version::negotiate(requested_version(req.headers()).as_deref());
        let mut resp = match negotiated {
            Err(VersionError::Malformed) => ApiError::routing(
                StatusCode::NOT_ACCEPTABLE,
                VersionError::Malformed.message(),
            )
            .into_response(), // The root document answers in the handler-error format, /v1 and below in the
            // routing-error format (as upstream does).
            Err(e) if path == "/" => {
                ApiError::Domain(ironic_model::Error::NotAcceptable(e.message())).into_response()
            }
            Err(e) => ApiError::Routing {
                status: StatusCode::NOT_ACCEPTABLE,
                description: e.message(),
                version_headers: true,
            }
            .into_response(),
            Ok(v) => {
                req.extensions_mut().insert(v);
                req.extensions_mut().insert(RequestId(rid.clone()));
                let peer = req
                    .extensions()
                    .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
                    .map(|c| c.0.ip());
                let creds = match &st.auth {
                    Auth::NoAuth => Ok(Credentials::noauth()),
                    // Discovery needs no credentials (and gets no role).
                    Auth::HttpBasic(_) if is_public(&path) => Ok(Credentials::anonymous()),
                    Auth::HttpBasic(b) => {
                        let hv = req
                            .headers()
                            .get(header::AUTHORIZATION)
                            .and_then(|v| v.to_str().ok());
                        b.authenticate(hv, peer).await.map(Arc::new)
                    }
                };
                let who = creds.as_ref().ok().cloned();
                let mut resp = match creds {
                    Ok(creds) => {
                        tracing::debug!(user = %creds.user, "authenticated");
                        let decided = Arc::new(Decided::default());
                        req.extensions_mut().insert(creds);
                        req.extensions_mut().insert(decided.clone());
                        let resp = next.run(req).await;
                        fail_closed(resp, &path, &decided)
                    }
                    Err(Refusal::Unauthorized(reason)) => {
                        tracing::info!(reason, ?peer, "authentication failed");
                        ApiError::Unauthorized("Authentication required".into()).into_response()
                    }
                    Err(Refusal::TooMany(wait)) => {
                        tracing::info!(?peer, "too many failed logins");
                        ApiError::TooManyLogins(wait).into_response()
                    }
                };
                audit(&method, &resp, who.as_deref(), peer);
                if resp.extensions().get::<NoVersionHeaders>().is_none() {
                    resp.headers_mut().insert(
                        H_VER,
                        HeaderValue::from_str(&v.to_string())
                            .unwrap_or(HeaderValue::from_static("1.1")),
                    );
                }
                resp
            }
        };
        if resp.extensions().get::<NoVersionHeaders>().is_none() {
            let h = resp.headers_mut();
            h.insert(H_MIN, HeaderValue::from_static(MIN_VERSION));
            h.insert(H_MAX, HeaderValue::from_static(MAX_VERSION));
        }
        let status = resp.status().as_u16();
        record(&method, &resp, started.elapsed().as_secs_f64());
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        if status >= 500 {
            tracing::error!(status, ms, "request failed");
        } else {
            tracing::info!(status, ms, "request");
        }
        resp
    }
    .instrument(span)
    .await;
    if let Ok(v) = HeaderValue::from_str(&rid) {
        resp.headers_mut()
            .insert("x-openstack-request-id", v.clone());
        resp.headers_mut().insert("openstack-request-id", v);
    }
    resp
}

/// The audit trail (target `ironic::audit`, INFO): every request that changes something
/// or was refused (401, 403, 429), with who, from where, what and the outcome. Reads
/// that succeed are not audited (the request log has them).
fn audit(
    method: &axum::http::Method,
    resp: &Response,
    who: Option<&Credentials>,
    peer: Option<std::net::IpAddr>,
) {
    let status = resp.status().as_u16();
    let writes = !matches!(
        *method,
        axum::http::Method::GET | axum::http::Method::HEAD | axum::http::Method::OPTIONS
    );
    if !(writes || matches!(status, 401 | 403 | 429)) {
        return;
    }
    let route = resp
        .extensions()
        .get::<RouteTemplate>()
        .map_or("unmatched", |r| r.0.as_str());
    tracing::info!(
        target: "ironic::audit",
        user = who.map_or("-", |c| c.user.as_str()),
        project = who.and_then(|c| c.project.as_deref()).unwrap_or("(system)"),
        client = %peer.map_or_else(|| "-".to_string(), |p| p.to_string()),
        %method,
        route,
        status,
        "audit"
    );
}

/// A matched, non-public route that answered 2xx without any policy decision is a
/// handler that forgot to ask [`policy::Authz`]: the answer is withheld (500), not sent.
fn fail_closed(resp: Response, path: &str, decided: &Decided) -> Response {
    let matched = resp.extensions().get::<RouteTemplate>().cloned();
    match matched {
        Some(route) if !decided.get() && !is_public(path) && resp.status().is_success() => {
            tracing::error!(
                route = %route.0,
                "a handler answered without a policy decision; refused"
            );
            ApiError::Domain(ironic_model::Error::internal(format!(
                "no policy decision for {}",
                route.0
            )))
            .into_response()
        }
        _ => resp,
    }
}

const MIN_VERSION: &str = "1.1";
const MAX_VERSION: &str = "1.115";

async fn not_found() -> ApiError {
    ApiError::routing(StatusCode::NOT_FOUND, "")
}

async fn method_not_allowed() -> ApiError {
    ApiError::routing(StatusCode::METHOD_NOT_ALLOWED, "")
}

/// The path templates of every route below `/v1` (each also served without the
/// prefix and with a trailing slash); for tests that walk every route.
pub fn route_paths() -> Vec<&'static str> {
    routes().into_iter().map(|(p, _)| p).collect()
}

fn routes() -> Vec<(&'static str, MethodRouter<AppState>)> {
    vec![
        ("/nodes", get(nodes::list).post(nodes::create)),
        ("/nodes/detail", get(nodes::detail)),
        (
            "/nodes/{ident}",
            get(nodes::get_one)
                .patch(nodes::patch)
                .delete(nodes::delete),
        ),
        ("/nodes/{ident}/states", get(nodes::states)),
        (
            "/nodes/{ident}/states/provision",
            put(provision::set_provision_state),
        ),
        (
            "/nodes/{ident}/states/power",
            put(provision::set_power_state),
        ),
        ("/nodes/{ident}/validate", get(provision::validate)),
        (
            "/nodes/{ident}/cleaning/steps",
            get(provision::cleaning_steps),
        ),
        (
            "/nodes/{ident}/maintenance",
            put(nodes::maintenance_on).delete(nodes::maintenance_off),
        ),
        (
            "/nodes/{ident}/traits",
            get(nodes::traits_get)
                .put(nodes::traits_put)
                .delete(nodes::traits_delete_all),
        ),
        (
            "/nodes/{ident}/traits/{name}",
            put(nodes::trait_put).delete(nodes::trait_delete),
        ),
        (
            "/nodes/{ident}/allocation",
            get(allocations::node_get).delete(allocations::node_delete),
        ),
        (
            "/allocations",
            get(allocations::list).post(allocations::create),
        ),
        (
            "/allocations/{ident}",
            get(allocations::get_one)
                .patch(allocations::patch)
                .delete(allocations::delete),
        ),
        (
            "/nodes/{ident}/deployment/steps",
            get(deploy_templates::node_deploy_steps),
        ),
        (
            "/deploy_templates",
            get(deploy_templates::list).post(deploy_templates::create),
        ),
        (
            "/deploy_templates/{ident}",
            get(deploy_templates::get_one)
                .patch(deploy_templates::patch)
                .delete(deploy_templates::delete),
        ),
        // The design's spelling, an alias.
        (
            "/deploy-templates",
            get(deploy_templates::list).post(deploy_templates::create),
        ),
        (
            "/deploy-templates/{ident}",
            get(deploy_templates::get_one)
                .patch(deploy_templates::patch)
                .delete(deploy_templates::delete),
        ),
        ("/drivers", get(drivers::list)),
        ("/drivers/{name}", get(drivers::get_one)),
        ("/drivers/{name}/properties", get(drivers::properties)),
        ("/chassis", get(chassis::list).post(chassis::create)),
        ("/chassis/detail", get(chassis::detail)),
        (
            "/chassis/{ident}",
            get(chassis::get_one)
                .patch(chassis::patch)
                .delete(chassis::delete),
        ),
        ("/chassis/{ident}/nodes", get(chassis::nodes)),
        ("/chassis/{ident}/nodes/detail", get(chassis::nodes_detail)),
        ("/ports", get(ports::port_list).post(ports::port_create)),
        ("/ports/detail", get(ports::port_detail)),
        (
            "/ports/{ident}",
            get(ports::port_get)
                .patch(ports::port_patch)
                .delete(ports::port_delete),
        ),
        ("/nodes/{ident}/ports", get(ports::node_ports)),
        ("/nodes/{ident}/ports/detail", get(ports::node_ports_detail)),
        ("/nodes/{ident}/ports/{port}", get(ports::child_port_one)),
        (
            "/portgroups",
            get(ports::portgroup_list).post(ports::portgroup_create),
        ),
        ("/portgroups/detail", get(ports::portgroup_detail)),
        (
            "/portgroups/{ident}",
            get(ports::portgroup_get)
                .patch(ports::portgroup_patch)
                .delete(ports::portgroup_delete),
        ),
        ("/portgroups/{ident}/ports", get(ports::portgroup_ports)),
        (
            "/portgroups/{ident}/ports/detail",
            get(ports::portgroup_ports_detail),
        ),
        (
            "/portgroups/{ident}/ports/{port}",
            get(ports::child_port_one),
        ),
        ("/nodes/{ident}/portgroups", get(ports::node_portgroups)),
        (
            "/nodes/{ident}/portgroups/detail",
            get(ports::node_portgroups_detail),
        ),
        ("/nodes/{ident}/vifs", get(vifs::list).post(vifs::attach)),
        ("/nodes/{ident}/vifs/{vif}", delete(vifs::detach)),
        ("/volume", get(volume::root)),
        (
            "/volume/connectors",
            get(volume::connector_list).post(volume::connector_create),
        ),
        (
            "/volume/connectors/{ident}",
            get(volume::connector_get)
                .patch(volume::connector_patch)
                .delete(volume::connector_delete),
        ),
        (
            "/volume/targets",
            get(volume::target_list).post(volume::target_create),
        ),
        (
            "/volume/targets/{ident}",
            get(volume::target_get)
                .patch(volume::target_patch)
                .delete(volume::target_delete),
        ),
        ("/nodes/{ident}/volume", get(volume::node_root)),
        (
            "/nodes/{ident}/volume/connectors",
            get(volume::node_connectors),
        ),
        ("/nodes/{ident}/volume/targets", get(volume::node_targets)),
        (
            "/nodes/{ident}/states/console",
            get(management::console_get).put(management::console_put),
        ),
        (
            "/nodes/{ident}/management/boot_device",
            get(management::boot_device_get).put(management::boot_device_put),
        ),
        (
            "/nodes/{ident}/management/boot_device/supported",
            get(management::boot_device_supported),
        ),
        (
            "/nodes/{ident}/management/inject_nmi",
            put(management::inject_nmi),
        ),
        ("/nodes/{ident}/history", get(history::list)),
        ("/nodes/{ident}/inventory", get(inventory::get)),
        ("/nodes/{ident}/firmware", get(firmware::list)),
        (
            "/nodes/{ident}/vmedia",
            get(vmedia::get).post(vmedia::attach).delete(vmedia::detach),
        ),
        ("/nodes/{ident}/children", get(nodes::children)),
        ("/shards", get(shards::list)),
        ("/nodes/{ident}/history/{event}", get(history::get_one)),
        (
            "/nodes/{ident}/states/boot_mode",
            put(provision::set_boot_mode),
        ),
        (
            "/nodes/{ident}/states/secure_boot",
            put(provision::set_secure_boot),
        ),
        (
            "/nodes/{ident}/management/indicators",
            get(management::indicators_list),
        ),
        (
            "/nodes/{ident}/management/indicators/{indicator}",
            get(management::indicator_get).put(management::indicator_put),
        ),
        ("/nodes/{ident}/states/raid", put(management::raid_put)),
        ("/nodes/{ident}/bios", get(management::bios_list)),
        ("/nodes/{ident}/bios/{name}", get(management::bios_get)),
        (
            "/nodes/{ident}/vendor_passthru/methods",
            get(management::node_passthru_methods),
        ),
        (
            "/nodes/{ident}/vendor_passthru",
            get(management::node_passthru)
                .post(management::node_passthru)
                .put(management::node_passthru)
                .patch(management::node_passthru)
                .delete(management::node_passthru),
        ),
        (
            "/nodes/{ident}/vendor_passthru/{method}",
            get(management::node_passthru_named)
                .post(management::node_passthru_named)
                .put(management::node_passthru_named)
                .patch(management::node_passthru_named)
                .delete(management::node_passthru_named),
        ),
        (
            "/drivers/{name}/vendor_passthru/{method}",
            get(management::driver_passthru_named)
                .post(management::driver_passthru_named)
                .put(management::driver_passthru_named)
                .patch(management::driver_passthru_named)
                .delete(management::driver_passthru_named),
        ),
        (
            "/drivers/{name}/vendor_passthru/methods",
            get(management::driver_passthru_methods),
        ),
        (
            "/drivers/{name}/vendor_passthru",
            get(management::driver_passthru)
                .post(management::driver_passthru)
                .put(management::driver_passthru)
                .patch(management::driver_passthru)
                .delete(management::driver_passthru),
        ),
        (
            "/drivers/{name}/raid/logical_disk_properties",
            get(management::raid_logical_disk_properties),
        ),
        ("/events", post(events::post)),
        ("/runbooks", get(runbooks::list).post(runbooks::create)),
        (
            "/runbooks/{ident}",
            get(runbooks::get_one)
                .patch(runbooks::patch)
                .delete(runbooks::delete),
        ),
        (
            "/runbooks/{ident}/traits",
            get(runbooks::traits_get).put(runbooks::traits_put),
        ),
        (
            "/runbooks/{ident}/traits/{name}",
            put(runbooks::trait_put).delete(runbooks::trait_delete),
        ),
        (
            "/inspection_rules",
            get(inspection_rules::list).post(inspection_rules::create),
        ),
        (
            "/inspection_rules/{id}",
            get(inspection_rules::get_one)
                .patch(inspection_rules::patch)
                .delete(inspection_rules::delete),
        ),
        ("/lookup", get(ramdisk::lookup)),
        ("/heartbeat/{ident}", post(ramdisk::heartbeat)),
        ("/continue_inspection", post(ramdisk::continue_inspection)),
        ("/conductors", get(conductors::list)),
        ("/conductors/{hostname}", get(conductors::get_one)),
    ]
}

/// Every route of the API, with and without the `/v1` prefix.
pub fn router(state: AppState) -> Router {
    let routes = routes();
    // Clients sometimes add a trailing slash (`GET /v1/nodes/?...`): both forms route.
    let mut v1 = Router::new();
    for (path, mr) in routes {
        v1 = v1.route(path, mr.clone()).route(&format!("{path}/"), mr);
    }
    Router::new()
        .route("/", get(root::root))
        .route("/v1", get(root::v1))
        .route("/v1/", get(root::v1))
        .nest("/v1", v1.clone())
        .merge(v1)
        .route_layer(axum::middleware::from_fn(tag_route))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(from_fn_with_state(state.clone(), edge))
        .with_state(state)
}

/// Runs `f` when dropped (however the request ends, cancellation included).
fn scopeguard(f: impl FnOnce()) -> impl Drop {
    struct Guard<F: FnOnce()>(Option<F>);
    impl<F: FnOnce()> Drop for Guard<F> {
        fn drop(&mut self) {
            if let Some(f) = self.0.take() {
                f()
            }
        }
    }
    Guard(Some(f))
}

/// The route template a request matched (`/v1/nodes/{ident}`), for metrics labels.
#[derive(Clone)]
struct RouteTemplate(String);

/// A matched path as a label: with the `/v1` prefix, without a trailing slash.
pub(crate) fn route_label(matched: &str) -> String {
    let p = matched.trim_end_matches('/');
    if p.is_empty() {
        "/".to_string()
    } else if p.starts_with("/v1") {
        p.to_string()
    } else {
        format!("/v1{p}")
    }
}

/// Copies the matched route template into the response, where [`edge`] records it.
async fn tag_route(req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map(|m| route_label(m.as_str()));
    let mut resp = next.run(req).await;
    if let Some(r) = route {
        resp.extensions_mut().insert(RouteTemplate(r));
    }
    resp
}

/// Records one request in the metrics (`ironic_api_requests_total`,
/// `ironic_api_request_duration_seconds`).
fn record(method: &axum::http::Method, resp: &Response, seconds: f64) {
    let route = resp
        .extensions()
        .get::<RouteTemplate>()
        .map_or("unmatched".to_string(), |r| r.0.clone());
    let method = method.as_str().to_string();
    metrics::counter!(
        "ironic_api_requests_total",
        "route" => route.clone(),
        "method" => method.clone(),
        "status" => resp.status().as_u16().to_string()
    )
    .increment(1);
    metrics::histogram!(
        "ironic_api_request_duration_seconds",
        "route" => route,
        "method" => method
    )
    .record(seconds);
}

#[cfg(test)]
mod tests {
    #[test]
    fn advertised_max_matches_the_model() {
        assert_eq!(super::MAX_VERSION, ironic_model::Version::MAX.to_string());
        assert_eq!(super::MIN_VERSION, ironic_model::Version::MIN.to_string());
    }
}

#[cfg(test)]
mod address_tests {
    use super::{client_address, rate_key};
    use std::net::IpAddr;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("address")
    }

    #[test]
    fn an_ipv6_client_counts_by_its_slash_64() {
        assert_eq!(rate_key(ip("2001:db8:1:2:aaaa::1")), ip("2001:db8:1:2::"));
        assert_eq!(
            rate_key(ip("2001:db8:1:2:ffff::9")),
            rate_key(ip("2001:db8:1:2::7"))
        );
        assert_ne!(
            rate_key(ip("2001:db8:1:3::1")),
            rate_key(ip("2001:db8:1:2::1"))
        );
        assert_eq!(rate_key(ip("192.0.2.1")), ip("192.0.2.1"));
        assert_eq!(rate_key(ip("::ffff:192.0.2.1")), ip("192.0.2.1"));
    }

    #[test]
    fn only_a_trusted_proxy_names_the_client() {
        let trusted = [
            ironic_model::addr::parse_network("10.0.0.0/8").expect("net"),
            ironic_model::addr::parse_network("192.0.2.5").expect("net"),
        ];
        let proxy = ip("10.1.1.1");
        // Not a proxy: its header is ignored.
        assert_eq!(
            client_address(ip("198.51.100.7"), Some("203.0.113.9"), &trusted),
            ip("198.51.100.7")
        );
        // A proxy: the rightmost address that is not a proxy.
        assert_eq!(
            client_address(proxy, Some("203.0.113.9, 192.0.2.5"), &trusted),
            ip("203.0.113.9")
        );
        // What a client wrote further left is not believed.
        assert_eq!(
            client_address(proxy, Some("1.1.1.1, 203.0.113.9"), &trusted),
            ip("203.0.113.9")
        );
        assert_eq!(client_address(proxy, None, &trusted), proxy);
        assert_eq!(client_address(proxy, Some("garbage"), &trusted), proxy);
        assert_eq!(client_address(proxy, Some("x"), &[]), proxy);
    }
}
