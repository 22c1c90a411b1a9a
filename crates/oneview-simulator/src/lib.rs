//! A simulator of an HPE OneView appliance, on the wire: the REST subset Ironic's
//! OneView driver and its tools use (`../shared/reference/oneview.md` §1), with the
//! appliance's rules (one profile per server hardware, profile/hardware-type and
//! enclosure-group consistency, power preconditions, sessions), asynchronous tasks that
//! take a configurable time, and a control API (`/control/...`, not part of OneView)
//! through which tests play a OneView user: take or free a server, make the next tasks
//! or calls fail, slow tasks down, expire sessions, inspect the state.
//!
//! State lives in memory behind one mutex; tasks finish lazily: every request first
//! completes the tasks whose time is up, so the outcome depends only on time, not on
//! who polls.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Map, Value, json};

/// API versions the appliance accepts (`GET /rest/version`).
pub const MIN_API_VERSION: u64 = 120;
pub const MAX_API_VERSION: u64 = 600;

/// How the simulator behaves.
#[derive(Debug, Clone)]
pub struct Settings {
    /// How long an asynchronous task runs.
    pub task_duration: Duration,
    /// Refuse to apply or remove a profile while the server is powered on (the real
    /// appliance's rule); off lets a test skip powering off.
    pub require_power_off: bool,
    /// How long a session lives without use.
    pub session_ttl: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            task_duration: Duration::from_millis(200),
            require_power_off: true,
            session_ttl: Duration::from_secs(24 * 3600),
        }
    }
}

/// The seed of a simulator (TOML or JSON).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Inventory {
    /// Accounts; none: `administrator` / `password`, like a fresh appliance's demo
    /// account.
    #[serde(default)]
    pub users: Vec<User>,
    #[serde(default)]
    pub server_hardware_types: Vec<Named>,
    #[serde(default)]
    pub enclosure_groups: Vec<Named>,
    #[serde(default)]
    pub server_profile_templates: Vec<TemplateSeed>,
    #[serde(default)]
    pub server_hardware: Vec<HardwareSeed>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct User {
    pub user_name: String,
    pub password: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Named {
    pub id: String,
    pub name: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TemplateSeed {
    pub id: String,
    pub name: String,
    pub server_hardware_type: String,
    pub enclosure_group: String,
    #[serde(default = "physical")]
    pub mac_type: String,
    #[serde(default = "yes")]
    pub manage_boot: bool,
    #[serde(default = "boot_order")]
    pub boot_order: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HardwareSeed {
    /// With `count`, the ids are `<id>-<n>` (n from 1) and names `<name> <n>`.
    pub id: String,
    pub name: String,
    pub server_hardware_type: String,
    pub enclosure_group: String,
    #[serde(default)]
    pub count: Option<u32>,
    #[serde(default = "off")]
    pub power_state: String,
    #[serde(default = "two")]
    pub processor_count: u32,
    #[serde(default = "eight")]
    pub processor_core_count: u32,
    #[serde(default = "memory")]
    pub memory_mb: u32,
}

fn physical() -> String {
    "Physical".into()
}
fn yes() -> bool {
    true
}
fn boot_order() -> Vec<String> {
    vec!["PXE".into(), "HardDisk".into()]
}
fn off() -> String {
    "Off".into()
}
fn two() -> u32 {
    2
}
fn eight() -> u32 {
    8
}
fn memory() -> u32 {
    65536
}

/// Why an inventory file gave no inventory.
#[derive(Debug, thiserror::Error)]
pub enum InventoryError {
    #[error("cannot read {}", path.display())]
    Read {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}", path.display())]
    Json {
        path: std::path::PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("{}", path.display())]
    Toml {
        path: std::path::PathBuf,
        #[source]
        source: toml::de::Error,
    },
}

impl Inventory {
    /// Reads `.toml` or `.json`.
    pub fn load(path: &std::path::Path) -> Result<Inventory, InventoryError> {
        let text = std::fs::read_to_string(path).map_err(|source| InventoryError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        if path.extension().is_some_and(|e| e == "json") {
            serde_json::from_str(&text).map_err(|source| InventoryError::Json {
                path: path.to_path_buf(),
                source,
            })
        } else {
            toml::from_str(&text).map_err(|source| InventoryError::Toml {
                path: path.to_path_buf(),
                source,
            })
        }
    }
}

/// What a task does when it ends.
#[derive(Debug, Clone)]
enum Effect {
    Apply {
        sh: String,
        sp: String,
    },
    Remove {
        sh: String,
        sp: String,
    },
    Power {
        sh: String,
        from: String,
        to: String,
    },
    Update {
        sp: String,
        body: Value,
    },
}

#[derive(Debug)]
struct Task {
    body: Value,
    started: Instant,
    duration: Duration,
    effect: Option<Effect>,
    fail: Option<(String, String)>,
    done: bool,
}

#[derive(Debug, Default)]
struct Store {
    users: Vec<(String, String)>,
    sessions: HashMap<String, Instant>,
    hardware: BTreeMap<String, Value>,
    profiles: BTreeMap<String, Value>,
    templates: BTreeMap<String, Value>,
    types: BTreeMap<String, Value>,
    groups: BTreeMap<String, Value>,
    tasks: BTreeMap<String, Task>,
    /// Errors the next tasks end with.
    fail_next_tasks: Vec<(String, String)>,
    /// Statuses the next `/rest` calls answer with (after authentication).
    fail_next_calls: Vec<u16>,
    task_duration: Duration,
    etag: u64,
    calls: u64,
}

/// A running simulator's state; cheap to clone.
#[derive(Clone)]
pub struct Simulator {
    store: Arc<Mutex<Store>>,
    settings: Arc<Settings>,
}

fn now_text() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// OneView's ErrorMessage body.
fn error(status: StatusCode, code: &str, message: &str) -> Response {
    let body = json!({
        "errorCode": code, "message": message, "details": "",
        "recommendedActions": [], "nestedErrors": [], "errorSource": null, "data": {},
    });
    (status, axum::Json(body)).into_response()
}

fn ok(body: Value) -> Response {
    (StatusCode::OK, axum::Json(body)).into_response()
}

fn not_found(path: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        "RESOURCE_NOT_FOUND",
        &format!("The requested resource {path} could not be found."),
    )
}

impl Store {
    fn next_etag(&mut self) -> String {
        self.etag += 1;
        format!(
            "\"{}/{}\"",
            chrono::Utc::now().timestamp_millis(),
            self.etag
        )
    }

    /// Completes the tasks whose time is up.
    fn advance(&mut self) {
        let now = Instant::now();
        let due: Vec<String> = self
            .tasks
            .iter()
            .filter(|(_, t)| !t.done && now.duration_since(t.started) >= t.duration)
            .map(|(id, _)| id.clone())
            .collect();
        for id in due {
            self.finish(&id);
        }
    }

    fn finish(&mut self, id: &str) {
        let Some(task) = self.tasks.get_mut(id) else {
            return;
        };
        task.done = true;
        let effect = task.effect.take();
        let fail = task.fail.take();
        let state = if fail.is_some() { "Error" } else { "Completed" };
        task.body["taskState"] = json!(state);
        task.body["percentComplete"] = json!(100);
        task.body["computedPercentComplete"] = json!(100);
        task.body["modified"] = json!(now_text());
        if let Some((code, msg)) = &fail {
            task.body["taskErrors"] = json!([{
                "errorCode": code, "message": msg, "details": "", "recommendedActions": [],
                "nestedErrors": [], "errorSource": null, "data": {},
            }]);
            task.body["taskStatus"] = json!(msg);
        }
        let Some(effect) = effect else {
            return;
        };
        let failed = fail.is_some();
        let etag = self.next_etag();
        match effect {
            Effect::Apply { sh, sp } => {
                if failed {
                    self.profiles.remove(&sp);
                    if let Some(h) = self.hardware.get_mut(&sh) {
                        h["state"] = json!("NoProfileApplied");
                        h["serverProfileUri"] = Value::Null;
                    }
                } else {
                    if let Some(p) = self.profiles.get_mut(&sp) {
                        p["state"] = json!("Normal");
                        p["status"] = json!("OK");
                        p["inProgress"] = json!(false);
                        p["eTag"] = json!(etag);
                    }
                    if let Some(h) = self.hardware.get_mut(&sh) {
                        h["state"] = json!("ProfileApplied");
                    }
                }
            }
            Effect::Remove { sh, sp } => {
                if let Some(h) = self.hardware.get_mut(&sh) {
                    if failed {
                        h["state"] = json!("ProfileApplied");
                    } else {
                        h["state"] = json!("NoProfileApplied");
                        h["serverProfileUri"] = Value::Null;
                    }
                }
                if !failed {
                    self.profiles.remove(&sp);
                }
            }
            Effect::Power { sh, from, to } => {
                if let Some(h) = self.hardware.get_mut(&sh) {
                    h["powerState"] = json!(if failed { from } else { to });
                    h["eTag"] = json!(etag);
                }
            }
            Effect::Update { sp, body } => {
                if !failed && let Some(p) = self.profiles.get_mut(&sp) {
                    *p = body;
                    p["eTag"] = json!(etag);
                    p["inProgress"] = json!(false);
                }
            }
        }
    }

    /// Starts a task; returns its 202 response (task body and `Location`).
    fn start_task(
        &mut self,
        name: &str,
        resource: (&str, &str, &str),
        effect: Option<Effect>,
    ) -> Response {
        let id = uuid::Uuid::new_v4().to_string();
        let uri = format!("/rest/tasks/{id}");
        let fail = if self.fail_next_tasks.is_empty() {
            None
        } else {
            Some(self.fail_next_tasks.remove(0))
        };
        let t = now_text();
        let body = json!({
            "type": "TaskResourceV2", "category": "tasks", "uri": uri, "name": name,
            "taskState": "Running", "taskStatus": format!("{name} {}", resource.1),
            "stateReason": null, "percentComplete": 0, "computedPercentComplete": 0,
            "taskErrors": [], "progressUpdates": [], "taskOutput": [],
            "associatedResource": {"resourceUri": resource.0, "resourceName": resource.1,
                                   "resourceCategory": resource.2, "associationType": "MANAGED_BY"},
            "taskType": "User", "userInitiated": true, "hidden": false, "owner": "Administrator",
            "created": t, "modified": t,
        });
        self.tasks.insert(
            id.clone(),
            Task {
                body: body.clone(),
                started: Instant::now(),
                duration: self.task_duration,
                effect,
                fail,
                done: false,
            },
        );
        if self.task_duration.is_zero() {
            self.finish(&id);
        }
        let body = self.tasks.get(&id).map(|t| t.body.clone()).unwrap_or(body);
        let mut r = (StatusCode::ACCEPTED, axum::Json(body)).into_response();
        if let Ok(v) = HeaderValue::from_str(&uri) {
            r.headers_mut().insert(header::LOCATION, v);
        }
        r
    }
}

fn hardware_doc(seed: &HardwareSeed, id: &str, name: &str) -> Value {
    let t = now_text();
    let mac = |slot: u32| {
        let h = id
            .bytes()
            .fold(0u32, |a, b| a.wrapping_mul(31).wrapping_add(u32::from(b)));
        format!(
            "00:50:56:{:02x}:{:02x}:{:02x}",
            (h >> 16) & 0xff,
            (h >> 8) & 0xff,
            (h.wrapping_add(slot)) & 0xff
        )
    };
    json!({
        "type": "server-hardware-5", "category": "server-hardware",
        "uri": format!("/rest/server-hardware/{id}"), "uuid": id, "name": name,
        "powerState": seed.power_state, "powerLock": false, "serverProfileUri": null,
        "state": "NoProfileApplied", "stateReason": "NotApplicable", "status": "OK",
        "serverHardwareTypeUri": format!("/rest/server-hardware-types/{}", seed.server_hardware_type),
        "serverGroupUri": format!("/rest/enclosure-groups/{}", seed.enclosure_group),
        "processorCount": seed.processor_count, "processorCoreCount": seed.processor_core_count,
        "processorSpeedMhz": 2600, "processorType": "Intel(R) Xeon(R) CPU", "memoryMb": seed.memory_mb,
        "mpModel": "iLO4", "mpFirmwareVersion": "2.55", "model": "ProLiant BL460c Gen9",
        "shortModel": "BL460c Gen9", "serialNumber": format!("SN{}", id.to_uppercase()),
        "formFactor": "HalfHeight",
        "portMap": {"deviceSlots": [{"deviceName": "FlexFabric", "slotNumber": 1, "physicalPorts": [
            {"type": "Ethernet", "portNumber": 1, "mac": mac(1), "virtualPorts": []},
            {"type": "Ethernet", "portNumber": 2, "mac": mac(2), "virtualPorts": []}]}]},
        "eTag": "\"1/1\"", "created": t, "modified": t,
    })
}

impl Simulator {
    pub fn new(inventory: &Inventory, settings: Settings) -> Simulator {
        let mut s = Store {
            task_duration: settings.task_duration,
            ..Store::default()
        };
        s.users = if inventory.users.is_empty() {
            vec![("administrator".into(), "password".into())]
        } else {
            inventory
                .users
                .iter()
                .map(|u| (u.user_name.clone(), u.password.clone()))
                .collect()
        };
        let t = now_text();
        for x in &inventory.server_hardware_types {
            s.types.insert(
                x.id.clone(),
                json!({"type": "server-hardware-type-4", "category": "server-hardware-types",
                       "uri": format!("/rest/server-hardware-types/{}", x.id), "name": x.name,
                       "model": x.name, "formFactor": "HalfHeight",
                       "bootModes": ["BIOS", "UEFI"], "bootCapabilities": ["CD", "Floppy", "USB", "HardDisk", "PXE"],
                       "capabilities": ["ManageBootOrder", "VirtualMAC"], "created": t, "modified": t}),
            );
        }
        for x in &inventory.enclosure_groups {
            s.groups.insert(
                x.id.clone(),
                json!({"type": "EnclosureGroupV200", "category": "enclosure-groups",
                       "uri": format!("/rest/enclosure-groups/{}", x.id), "uuid": x.id, "name": x.name,
                       "status": "OK", "created": t, "modified": t}),
            );
        }
        for x in &inventory.server_profile_templates {
            s.templates.insert(
                x.id.clone(),
                json!({"type": "ServerProfileTemplateV2", "category": "server-profile-templates",
                       "uri": format!("/rest/server-profile-templates/{}", x.id), "name": x.name,
                       "description": "", "serverProfileDescription": "",
                       "serverHardwareTypeUri": format!("/rest/server-hardware-types/{}", x.server_hardware_type),
                       "enclosureGroupUri": format!("/rest/enclosure-groups/{}", x.enclosure_group),
                       "macType": x.mac_type, "wwnType": "Virtual", "serialNumberType": "Virtual",
                       "boot": {"manageBoot": x.manage_boot, "order": x.boot_order},
                       "bootMode": {"manageMode": true, "mode": "BIOS", "pxeBootPolicy": "Auto"},
                       "connections": [], "status": "OK", "state": "Normal",
                       "eTag": "\"1/1\"", "created": t, "modified": t}),
            );
        }
        for seed in &inventory.server_hardware {
            match seed.count {
                None => {
                    s.hardware
                        .insert(seed.id.clone(), hardware_doc(seed, &seed.id, &seed.name));
                }
                Some(n) => {
                    for i in 1..=n {
                        let id = format!("{}-{i}", seed.id);
                        s.hardware.insert(
                            id.clone(),
                            hardware_doc(seed, &id, &format!("{} {i}", seed.name)),
                        );
                    }
                }
            }
        }
        Simulator {
            store: Arc::new(Mutex::new(s)),
            settings: Arc::new(settings),
        }
    }

    pub fn router(&self) -> Router {
        Router::new().fallback(handle).with_state(self.clone())
    }

    /// Serves plain HTTP on `listener` until the future is dropped (tests, and the
    /// binary's `--insecure-http`).
    pub async fn serve(self, listener: tokio::net::TcpListener) -> std::io::Result<()> {
        axum::serve(listener, self.router()).await
    }

    /// Serves HTTPS on `listener`, as the appliance does, until the future is dropped:
    /// every connection is a TLS one (handshake within 10 s), HTTP/1.1 inside.
    pub async fn serve_tls(
        self,
        listener: tokio::net::TcpListener,
        tls: tokio_rustls::TlsAcceptor,
    ) -> std::io::Result<()> {
        let router = self.router();
        loop {
            let stream = match listener.accept().await {
                Ok((s, _)) => s,
                Err(e) => {
                    // Out of file descriptors, say: pause rather than spin.
                    eprintln!("oneview-simulator: cannot accept a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let (router, tls) = (router.clone(), tls.clone());
            tokio::spawn(async move {
                let Ok(Ok(stream)) =
                    tokio::time::timeout(Duration::from_secs(10), tls.accept(stream)).await
                else {
                    return;
                };
                let svc = hyper_util::service::TowerToHyperService::new(router);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                    .await;
            });
        }
    }

    fn store(&self) -> std::sync::MutexGuard<'_, Store> {
        // A panic while holding the lock leaves consistent-enough state for a simulator.
        self.store.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many `/rest` calls were answered (for tests and benchmarks).
    pub fn calls(&self) -> u64 {
        self.store().calls
    }
}

/// The JSON body of a request (empty: `{}`); `Err` is the 400 to answer.
fn parse(body: &Bytes) -> Result<Value, Box<Response>> {
    if body.is_empty() {
        return Ok(Value::Object(Map::new()));
    }
    serde_json::from_slice(body).map_err(|e| {
        Box::new(error(
            StatusCode::BAD_REQUEST,
            "INVALID_JSON",
            &format!("The request body is not valid JSON: {e}"),
        ))
    })
}

fn query(uri: &Uri, name: &str) -> Option<String> {
    uri.query()?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (k == name).then(|| v.to_string())
    })
}

fn collection(kind: &str, category: &str, uri: &Uri, members: Vec<Value>) -> Response {
    let start: usize = query(uri, "start")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let count: usize = query(uri, "count")
        .and_then(|v| v.parse::<i64>().ok())
        .map_or(usize::MAX, |c| if c < 0 { usize::MAX } else { c as usize });
    let total = members.len();
    let page: Vec<Value> = members.into_iter().skip(start).take(count).collect();
    let next = (start + page.len() < total).then(|| {
        format!(
            "{}?start={}&count={}",
            uri.path(),
            start + page.len(),
            count.min(total)
        )
    });
    ok(json!({
        "type": kind, "category": category, "uri": uri.to_string(), "start": start,
        "count": page.len(), "total": total, "prevPageUri": null, "nextPageUri": next,
        "members": page,
    }))
}

async fn handle(
    State(sim): State<Simulator>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().trim_end_matches('/').to_string();
    let parts: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    if parts.first() == Some(&"control") {
        return control(&sim, &method, &parts[1..], &body);
    }
    if parts.first() != Some(&"rest") {
        return not_found(&path);
    }
    let rest = &parts[1..];
    let mut s = sim.store();
    s.advance();
    // Unauthenticated: the version, logging in.
    match (&method, rest) {
        (&Method::GET, ["version"]) => {
            return ok(
                json!({"currentVersion": MAX_API_VERSION, "minimumVersion": MIN_API_VERSION}),
            );
        }
        (&Method::POST, ["login-sessions"]) => {
            let b = match parse(&body) {
                Ok(b) => b,
                Err(r) => return *r,
            };
            let user = b.get("userName").and_then(Value::as_str).unwrap_or("");
            let pass = b.get("password").and_then(Value::as_str).unwrap_or("");
            if !s.users.iter().any(|(u, p)| u == user && p == pass) {
                return error(
                    StatusCode::UNAUTHORIZED,
                    "AUTHN_AUTH_FAIL",
                    "Invalid user name or password.",
                );
            }
            let id = uuid::Uuid::new_v4().simple().to_string();
            s.sessions.insert(id.clone(), Instant::now());
            return ok(json!({"sessionID": id, "partnerData": {}}));
        }
        _ => {}
    }
    // The API version (any header case), then the session.
    let version = headers
        .get("x-api-version")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    match version {
        Some(v) if (MIN_API_VERSION..=MAX_API_VERSION).contains(&v) => {}
        _ => {
            return error(
                StatusCode::PRECONDITION_FAILED,
                "UNSUPPORTED_VERSION",
                &format!(
                    "The X-API-Version header is missing or not between {MIN_API_VERSION} and {MAX_API_VERSION}."
                ),
            );
        }
    }
    let token = headers
        .get("auth")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let ttl = sim.settings.session_ttl;
    let live = s.sessions.get(&token).is_some_and(|t| t.elapsed() < ttl);
    if !live {
        s.sessions.remove(&token);
        return error(
            StatusCode::UNAUTHORIZED,
            "AUTHORIZATION",
            "The session is not valid or has expired; log in again.",
        );
    }
    s.sessions.insert(token.clone(), Instant::now());
    s.calls += 1;
    if !s.fail_next_calls.is_empty() {
        let code = s.fail_next_calls.remove(0);
        let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        return error(
            status,
            "INJECTED_FAILURE",
            "A failure injected through the control API.",
        );
    }
    drop(s);
    rest_call(&sim, &method, rest, &uri, &body, &token)
}

fn rest_call(
    sim: &Simulator,
    method: &Method,
    rest: &[&str],
    uri: &Uri,
    body: &Bytes,
    token: &str,
) -> Response {
    let require_off = sim.settings.require_power_off;
    let mut s = sim.store();
    let path = uri.path();
    match (method, rest) {
        (&Method::DELETE, ["login-sessions"]) => {
            s.sessions.remove(token);
            StatusCode::NO_CONTENT.into_response()
        }
        (&Method::GET, ["server-hardware"]) => {
            let m = s.hardware.values().cloned().collect();
            collection("server-hardware-list-3", "server-hardware", uri, m)
        }
        (&Method::GET, ["server-hardware", id]) => match s.hardware.get(*id) {
            Some(h) => ok(h.clone()),
            None => not_found(path),
        },
        (&Method::PUT, ["server-hardware", id, "powerState"]) => {
            let b = match parse(body) {
                Ok(b) => b,
                Err(r) => return *r,
            };
            let Some(h) = s.hardware.get(*id).cloned() else {
                return not_found(path);
            };
            let target = b.get("powerState").and_then(Value::as_str).unwrap_or("");
            let control = b
                .get("powerControl")
                .and_then(Value::as_str)
                .unwrap_or("MomentaryPress");
            if !matches!(target, "On" | "Off")
                || !matches!(
                    control,
                    "MomentaryPress" | "PressAndHold" | "ColdBoot" | "Reset"
                )
            {
                return error(
                    StatusCode::BAD_REQUEST,
                    "INVALID_POWER_STATE",
                    &format!(
                        "Invalid power request: powerState {target:?}, powerControl {control:?}."
                    ),
                );
            }
            if matches!(
                h["state"].as_str(),
                Some("ApplyingProfile" | "RemovingProfile")
            ) {
                return error(
                    StatusCode::CONFLICT,
                    "SERVER_HARDWARE_BUSY",
                    "The server hardware is in a transitory state; retry once the profile operation ends.",
                );
            }
            if h["powerLock"] == true {
                return error(
                    StatusCode::CONFLICT,
                    "POWER_LOCKED",
                    "The server hardware power is locked.",
                );
            }
            let from = h["powerState"].as_str().unwrap_or("Off").to_string();
            let reset = matches!(control, "ColdBoot" | "Reset");
            let to = if reset { "On" } else { target }.to_string();
            let name = format!(
                "Power {}",
                if reset {
                    "reset"
                } else if to == "On" {
                    "on"
                } else {
                    "off"
                }
            );
            let sh_name = h["name"].as_str().unwrap_or("").to_string();
            let transitional = if reset {
                "Resetting"
            } else if from == to {
                from.as_str()
            } else if to == "On" {
                "PoweringOn"
            } else {
                "PoweringOff"
            }
            .to_string();
            if let Some(x) = s.hardware.get_mut(*id) {
                x["powerState"] = json!(transitional);
            }
            let uri_sh = format!("/rest/server-hardware/{id}");
            s.start_task(
                &name,
                (&uri_sh, &sh_name, "server-hardware"),
                Some(Effect::Power {
                    sh: (*id).to_string(),
                    from,
                    to,
                }),
            )
        }
        (&Method::GET, ["server-hardware-types", id]) => match s.types.get(*id) {
            Some(x) => ok(x.clone()),
            None => not_found(path),
        },
        (&Method::GET, ["server-hardware-types"]) => {
            let m = s.types.values().cloned().collect();
            collection(
                "server-hardware-type-list-4",
                "server-hardware-types",
                uri,
                m,
            )
        }
        (&Method::GET, ["enclosure-groups", id]) => match s.groups.get(*id) {
            Some(x) => ok(x.clone()),
            None => not_found(path),
        },
        (&Method::GET, ["server-profile-templates"]) => {
            let m = s.templates.values().cloned().collect();
            collection(
                "ServerProfileTemplateListV2",
                "server-profile-templates",
                uri,
                m,
            )
        }
        (&Method::GET, ["server-profile-templates", id]) => match s.templates.get(*id) {
            Some(x) => ok(x.clone()),
            None => not_found(path),
        },
        (&Method::GET, ["server-profile-templates", id, "new-profile"]) => {
            let Some(t) = s.templates.get(*id) else {
                return not_found(path);
            };
            ok(json!({
                "type": "ServerProfileV6", "category": "server-profiles", "name": "",
                "serverHardwareUri": null,
                "serverHardwareTypeUri": t["serverHardwareTypeUri"],
                "enclosureGroupUri": t["enclosureGroupUri"],
                "serverProfileTemplateUri": t["uri"],
                "templateCompliance": "Unknown",
                "macType": t["macType"], "wwnType": t["wwnType"], "serialNumberType": t["serialNumberType"],
                "boot": t["boot"], "bootMode": t["bootMode"], "connections": t["connections"],
            }))
        }
        (&Method::GET, ["server-profiles"]) => {
            let m = s.profiles.values().cloned().collect();
            collection("ServerProfileListV6", "server-profiles", uri, m)
        }
        (&Method::GET, ["server-profiles", id]) => match s.profiles.get(*id) {
            Some(x) => ok(x.clone()),
            None => not_found(path),
        },
        (&Method::POST, ["server-profiles"]) => {
            let b = match parse(body) {
                Ok(b) => b,
                Err(r) => return *r,
            };
            create_profile(&mut s, b, require_off)
        }
        (&Method::PUT, ["server-profiles", id]) => {
            let b = match parse(body) {
                Ok(b) => b,
                Err(r) => return *r,
            };
            let Some(old) = s.profiles.get(*id).cloned() else {
                return not_found(path);
            };
            if old["inProgress"] == true {
                return error(
                    StatusCode::CONFLICT,
                    "PROFILE_BUSY",
                    "The server profile is being changed; retry later.",
                );
            }
            if b.get("serverHardwareUri") != old.get("serverHardwareUri") {
                return error(
                    StatusCode::BAD_REQUEST,
                    "INVALID_ASSIGNMENT",
                    "Moving a profile to other server hardware is not supported by this simulator.",
                );
            }
            let mut new = old.clone();
            if let (Value::Object(n), Value::Object(b)) = (&mut new, b) {
                for (k, v) in b {
                    if !matches!(k.as_str(), "uri" | "uuid" | "category" | "created") {
                        n.insert(k, v);
                    }
                }
            }
            if let Some(p) = s.profiles.get_mut(*id) {
                p["inProgress"] = json!(true);
            }
            let name = old["name"].as_str().unwrap_or("").to_string();
            let sp_uri = format!("/rest/server-profiles/{id}");
            s.start_task(
                "Update",
                (&sp_uri, &name, "server-profiles"),
                Some(Effect::Update {
                    sp: (*id).to_string(),
                    body: new,
                }),
            )
        }
        (&Method::DELETE, ["server-profiles", id]) => {
            let Some(p) = s.profiles.get(*id).cloned() else {
                return not_found(path);
            };
            let sh = p["serverHardwareUri"]
                .as_str()
                .and_then(|u| u.rsplit('/').next())
                .unwrap_or("")
                .to_string();
            if let Some(h) = s.hardware.get(&sh) {
                if require_off && h["powerState"] != "Off" {
                    return error(
                        StatusCode::CONFLICT,
                        "SERVER_HARDWARE_POWERED_ON",
                        "Some server profile attributes cannot be changed while the server hardware is powered on.",
                    );
                }
                if matches!(
                    h["state"].as_str(),
                    Some("ApplyingProfile" | "RemovingProfile")
                ) {
                    return error(
                        StatusCode::CONFLICT,
                        "SERVER_HARDWARE_BUSY",
                        "The server hardware is in a transitory state.",
                    );
                }
            }
            if let Some(h) = s.hardware.get_mut(&sh) {
                h["state"] = json!("RemovingProfile");
            }
            let name = p["name"].as_str().unwrap_or("").to_string();
            let sp_uri = format!("/rest/server-profiles/{id}");
            s.start_task(
                "Delete",
                (&sp_uri, &name, "server-profiles"),
                Some(Effect::Remove {
                    sh,
                    sp: (*id).to_string(),
                }),
            )
        }
        (&Method::GET, ["tasks", id]) => match s.tasks.get(*id) {
            Some(t) => {
                let mut b = t.body.clone();
                if !t.done && !t.duration.is_zero() {
                    let pct = (t.started.elapsed().as_millis() * 100
                        / t.duration.as_millis().max(1))
                    .min(99);
                    b["percentComplete"] = json!(pct);
                    b["computedPercentComplete"] = json!(pct);
                }
                ok(b)
            }
            None => not_found(path),
        },
        _ => error(
            StatusCode::NOT_FOUND,
            "RESOURCE_NOT_FOUND",
            &format!("{method} {path} is not served by this simulator."),
        ),
    }
}

/// `POST /rest/server-profiles`: checks the body at once (400 for a missing or unknown
/// URI, a type or group that does not match the hardware); the assignment is a task.
fn create_profile(s: &mut Store, b: Value, require_off: bool) -> Response {
    let id_of = |v: &Value, key: &str| -> Option<String> {
        v.get(key)
            .and_then(Value::as_str)
            .filter(|u| !u.is_empty())
            .and_then(|u| u.rsplit('/').next())
            .map(str::to_owned)
    };
    let bad = |msg: String| error(StatusCode::BAD_REQUEST, "INVALID_RESOURCE_URI", &msg);
    let name = b
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if name.is_empty() {
        return error(
            StatusCode::BAD_REQUEST,
            "INVALID_NAME",
            "A server profile needs a name.",
        );
    }
    let Some(sh) = id_of(&b, "serverHardwareUri") else {
        return bad("serverHardwareUri is required by this simulator.".into());
    };
    let Some(h) = s.hardware.get(&sh).cloned() else {
        return bad(format!("The server hardware {sh} does not exist."));
    };
    if let Some(t) = id_of(&b, "serverHardwareTypeUri") {
        if !s.types.contains_key(&t) {
            return bad(format!("The server hardware type {t} does not exist."));
        }
        if h["serverHardwareTypeUri"]
            .as_str()
            .and_then(|u| u.rsplit('/').next())
            != Some(t.as_str())
        {
            return error(
                StatusCode::BAD_REQUEST,
                "SERVER_HARDWARE_TYPE_MISMATCH",
                "The profile's server hardware type does not match the server hardware's.",
            );
        }
    }
    if let Some(g) = id_of(&b, "enclosureGroupUri")
        && h["serverGroupUri"]
            .as_str()
            .and_then(|u| u.rsplit('/').next())
            != Some(g.as_str())
    {
        return error(
            StatusCode::BAD_REQUEST,
            "ENCLOSURE_GROUP_MISMATCH",
            "The profile's enclosure group does not match the server hardware's.",
        );
    }
    if h["serverProfileUri"]
        .as_str()
        .is_some_and(|u| !u.is_empty())
    {
        // The real appliance accepts the request and fails the task.
        s.fail_next_tasks.insert(
            0,
            (
                "ProfileAlreadyExistsInServer".into(),
                format!(
                    "The server hardware {} already has a server profile.",
                    h["name"].as_str().unwrap_or("")
                ),
            ),
        );
        let sh_uri = format!("/rest/server-hardware/{sh}");
        return s.start_task("Create", (&sh_uri, &name, "server-hardware"), None);
    }
    if require_off && h["powerState"] != "Off" {
        return error(
            StatusCode::CONFLICT,
            "SERVER_HARDWARE_POWERED_ON",
            "Some server profile attributes cannot be changed while the server hardware is powered on.",
        );
    }
    let id = uuid::Uuid::new_v4().to_string();
    let uri = format!("/rest/server-profiles/{id}");
    let etag = s.next_etag();
    let t = now_text();
    let mut p = match b {
        Value::Object(o) => o,
        _ => Map::new(),
    };
    p.insert("type".into(), json!("ServerProfileV6"));
    p.insert("category".into(), json!("server-profiles"));
    p.insert("uri".into(), json!(uri));
    p.insert("uuid".into(), json!(id));
    p.insert(
        "serverHardwareTypeUri".into(),
        h["serverHardwareTypeUri"].clone(),
    );
    p.insert("enclosureGroupUri".into(), h["serverGroupUri"].clone());
    p.insert("state".into(), json!("Creating"));
    p.insert("status".into(), json!("Unknown"));
    p.insert("inProgress".into(), json!(true));
    p.insert("eTag".into(), json!(etag));
    p.insert("created".into(), json!(t));
    p.insert("modified".into(), json!(t));
    p.entry("boot")
        .or_insert(json!({"manageBoot": true, "order": ["PXE", "HardDisk"]}));
    s.profiles.insert(id.clone(), Value::Object(p));
    if let Some(x) = s.hardware.get_mut(&sh) {
        x["state"] = json!("ApplyingProfile");
        x["serverProfileUri"] = json!(uri);
    }
    s.start_task(
        "Create",
        (&uri, &name, "server-profiles"),
        Some(Effect::Apply { sh, sp: id }),
    )
}

/// The control API: a OneView user and the test harness.
fn control(sim: &Simulator, method: &Method, parts: &[&str], body: &Bytes) -> Response {
    let b = match parse(body) {
        Ok(b) => b,
        Err(r) => return *r,
    };
    let mut s = sim.store();
    s.advance();
    match (method, parts) {
        (&Method::GET, ["state"]) => ok(json!({
            "serverHardware": s.hardware.values().cloned().collect::<Vec<_>>(),
            "serverProfiles": s.profiles.values().cloned().collect::<Vec<_>>(),
            "tasks": s.tasks.values().map(|t| t.body.clone()).collect::<Vec<_>>(),
            "sessions": s.sessions.len(),
            "calls": s.calls,
        })),
        // A OneView user applies a profile of theirs, at once.
        (&Method::POST, ["server-hardware", id, "take"]) => {
            let Some(h) = s.hardware.get(*id).cloned() else {
                return not_found(id);
            };
            if h["serverProfileUri"]
                .as_str()
                .is_some_and(|u| !u.is_empty())
            {
                return error(
                    StatusCode::CONFLICT,
                    "ProfileAlreadyExistsInServer",
                    "The server hardware already has a profile.",
                );
            }
            let pid = uuid::Uuid::new_v4().to_string();
            let uri = format!("/rest/server-profiles/{pid}");
            let name = b
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("OneView user profile")
                .to_string();
            let etag = s.next_etag();
            s.profiles.insert(
                pid.clone(),
                json!({"type": "ServerProfileV6", "category": "server-profiles", "uri": uri, "uuid": pid,
                       "name": name, "serverHardwareUri": h["uri"],
                       "serverHardwareTypeUri": h["serverHardwareTypeUri"], "enclosureGroupUri": h["serverGroupUri"],
                       "serverProfileTemplateUri": "", "boot": {"manageBoot": true, "order": ["HardDisk"]},
                       "state": "Normal", "status": "OK", "inProgress": false, "eTag": etag}),
            );
            if let Some(x) = s.hardware.get_mut(*id) {
                x["serverProfileUri"] = json!(uri);
                x["state"] = json!("ProfileApplied");
            }
            ok(json!({"serverProfileUri": uri}))
        }
        // A OneView user removes whatever profile the server has, at once.
        (&Method::POST, ["server-hardware", id, "free"]) => {
            let Some(h) = s.hardware.get(*id).cloned() else {
                return not_found(id);
            };
            if let Some(sp) = h["serverProfileUri"]
                .as_str()
                .and_then(|u| u.rsplit('/').next())
            {
                s.profiles.remove(sp);
            }
            if let Some(x) = s.hardware.get_mut(*id) {
                x["serverProfileUri"] = Value::Null;
                x["state"] = json!("NoProfileApplied");
            }
            ok(json!({}))
        }
        (&Method::POST, ["server-hardware", id, "power"]) => {
            let to = b.get("powerState").and_then(Value::as_str).unwrap_or("");
            if !matches!(to, "On" | "Off") {
                return error(
                    StatusCode::BAD_REQUEST,
                    "INVALID_POWER_STATE",
                    "powerState must be On or Off.",
                );
            }
            match s.hardware.get_mut(*id) {
                Some(x) => {
                    x["powerState"] = json!(to);
                    ok(json!({}))
                }
                None => not_found(id),
            }
        }
        (&Method::POST, ["fail-next-tasks"]) => {
            let n = b.get("count").and_then(Value::as_u64).unwrap_or(1);
            let code = b
                .get("errorCode")
                .and_then(Value::as_str)
                .unwrap_or("INJECTED_TASK_FAILURE")
                .to_string();
            let msg = b
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("A task failure injected through the control API.")
                .to_string();
            for _ in 0..n.min(10_000) {
                s.fail_next_tasks.push((code.clone(), msg.clone()));
            }
            ok(json!({"pending": s.fail_next_tasks.len()}))
        }
        (&Method::POST, ["fail-next-calls"]) => {
            let n = b.get("count").and_then(Value::as_u64).unwrap_or(1);
            let status = b.get("status").and_then(Value::as_u64).unwrap_or(503);
            let Ok(status) = u16::try_from(status) else {
                return error(
                    StatusCode::BAD_REQUEST,
                    "INVALID",
                    "status must be an HTTP status.",
                );
            };
            for _ in 0..n.min(10_000) {
                s.fail_next_calls.push(status);
            }
            ok(json!({"pending": s.fail_next_calls.len()}))
        }
        (&Method::POST, ["task-duration"]) => match b.get("ms").and_then(Value::as_u64) {
            Some(ms) => {
                s.task_duration = Duration::from_millis(ms);
                ok(json!({"ms": ms}))
            }
            None => error(
                StatusCode::BAD_REQUEST,
                "INVALID",
                "ms must be a number of milliseconds.",
            ),
        },
        (&Method::POST, ["expire-sessions"]) => {
            let n = s.sessions.len();
            s.sessions.clear();
            ok(json!({"expired": n}))
        }
        _ => not_found(&format!("/control/{}", parts.join("/"))),
    }
}

/// Why no TLS identity could be made or used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read the certificate chain")]
    CertificateChain(#[source] rustls::pki_types::pem::Error),
    #[error("the certificate file holds no certificate")]
    NoCertificate,
    #[error("cannot read the private key")]
    PrivateKey(#[source] rustls::pki_types::pem::Error),
    /// The crypto provider refused the protocol versions (not expected with ring).
    #[error("no TLS protocol version")]
    Protocols(#[source] rustls::Error),
    #[error("the certificate and key do not make a TLS identity")]
    Identity(#[source] rustls::Error),
    #[error("cannot generate a certificate")]
    Generate(#[source] rcgen::Error),
}

/// A TLS server configuration (TLS 1.2 and 1.3, HTTP/1.1) from a PEM certificate chain
/// and private key.
pub fn tls_acceptor(cert_pem: &str, key_pem: &str) -> Result<tokio_rustls::TlsAcceptor, TlsError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(TlsError::CertificateChain)?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate);
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(TlsError::PrivateKey)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Protocols)?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(TlsError::Identity)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// A self-signed certificate for `hosts` (names or IP addresses), an end-entity one
/// (not a CA, as TLS clients require of a server certificate): `(cert PEM, key PEM)`.
/// Clients trust it by its PEM (`[oneview] tls_cacert_file`).
pub fn self_signed(hosts: &[String]) -> Result<(String, String), TlsError> {
    let cert = rcgen::generate_simple_self_signed(hosts.to_vec()).map_err(TlsError::Generate)?;
    Ok((cert.cert.pem(), cert.signing_key.serialize_pem()))
}
