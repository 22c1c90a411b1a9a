//! The agent's HTTP API (upstream `ironic_python_agent/api/app.py`): the version
//! document, the status, and the token-guarded command routes, each also without the
//! `/v1` prefix and without the trailing slash.
//!
//! Errors have IPA's body `{"faultcode": "Client"|"Server", "faultstring": …}`; the
//! texts that come from werkzeug's exceptions keep its `"<code> <name>: "` prefix.
//!
//! Connections are served one task each on hyper directly rather than through
//! `axum::serve`, so that an unreachable agent can drop a connection without answering
//! ([`super::Faults::unreachable`], `system.lockdown`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use hyper::body::Incoming;
use hyper::service::{Service as _, service_fn};
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};

use super::Inner;
use super::commands::{self, Refusal};

/// The longest a `wait=true` request waits for its command (a hung command waits
/// until the client gives up, this, or the agent stops).
const WAIT_LIMIT: Duration = Duration::from_secs(600);

/// The pause after a failed `accept` (e.g. out of file descriptors), so the loop does
/// not spin.
const ACCEPT_PAUSE: Duration = Duration::from_millis(50);

/// What the per-request gate answers when the agent is unreachable: hyper then closes
/// the connection without writing a response.
#[derive(Debug, thiserror::Error)]
#[error("the simulated agent is unreachable: connection dropped")]
struct Dropped;

/// A request's query parameters.
type Params = Query<HashMap<String, String>>;

/// Accepts connections until the agent stops. The listener is dropped on return, so
/// the port refuses connections from then on.
pub(super) async fn serve(inner: Arc<Inner>, listener: TcpListener) {
    let router = routes(inner.clone());
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = inner.stopped() => return,
        };
        match accepted {
            Ok((stream, _)) if inner.dropping() => drop(stream),
            Ok((stream, _)) => {
                tokio::spawn(connection(inner.clone(), router.clone(), stream));
            }
            Err(_) => tokio::time::sleep(ACCEPT_PAUSE).await,
        }
    }
}

/// Serves one connection until it closes or the agent stops; each request first
/// passes the unreachable gate.
async fn connection(inner: Arc<Inner>, router: Router, stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let app = TowerToHyperService::new(router);
    let gate = inner.clone();
    let svc = service_fn(move |req: hyper::Request<Incoming>| {
        let call = (!gate.dropping()).then(|| app.call(req));
        async move {
            match call {
                Some(call) => call.await.map_err(|never| match never {}),
                None => Err(Dropped),
            }
        }
    });
    let conn =
        hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc);
    tokio::select! {
        _ = conn => {}
        _ = inner.stopped() => {}
    }
}

fn routes(inner: Arc<Inner>) -> Router {
    let mut r = Router::new()
        .route("/", get(root))
        .route("/v1", get(v1))
        .route("/v1/", get(v1));
    for prefix in ["/v1", ""] {
        r = r
            .route(&format!("{prefix}/status"), get(status))
            .route(&format!("{prefix}/commands"), get(list).post(run))
            .route(&format!("{prefix}/commands/"), get(list).post(run))
            .route(&format!("{prefix}/commands/{{id}}"), get(one));
    }
    r.fallback(not_found)
        .method_not_allowed_fallback(not_allowed)
        // A command carries the config drive (up to 64 MiB, in base64); IPA sets no
        // limit of its own, axum's default is 2 MiB.
        .layer(axum::extract::DefaultBodyLimit::max(128 << 20))
        .with_state(inner)
}

/// `GET /`: the version document.
async fn root(State(inner): State<Arc<Inner>>) -> Response {
    let v1 = version(&inner.url);
    reply(
        StatusCode::OK,
        &json!({
            "name": "OpenStack Ironic Python Agent API",
            "description": "A simulated ironic-python-agent (ironic-load's fake agent)",
            "versions": [v1],
            "default_version": v1,
        }),
    )
}

/// `GET /v1/`: links to the resources.
async fn v1(State(inner): State<Arc<Inner>>) -> Response {
    let url = &inner.url;
    let link = |rel: &str, res: &str| {
        let href = match rel {
            "bookmark" => format!("{url}/{res}"),
            _ => format!("{url}/v1/{res}"),
        };
        json!({"href": href, "rel": rel})
    };
    let mut doc = version(url);
    doc["commands"] = json!([link("self", "commands"), link("bookmark", "commands")]);
    doc["status"] = json!([link("self", "status"), link("bookmark", "status")]);
    doc["media_types"] = json!([{
        "base": "application/json",
        "type": "application/vnd.openstack.ironic-python-agent.v1+json",
    }]);
    reply(StatusCode::OK, &doc)
}

/// The description of API version 1.
fn version(url: &str) -> Value {
    json!({
        "id": "v1",
        "links": [
            {"href": format!("{url}/v1/"), "rel": "self"},
            {"href": "https://docs.openstack.org/ironic-python-agent", "rel": "describedby", "type": "text/html"},
        ],
    })
}

/// `GET /v1/status` (no token).
async fn status(State(inner): State<Arc<Inner>>) -> Response {
    reply(
        StatusCode::OK,
        &json!({"started_at": inner.started_at, "version": inner.cfg.version}),
    )
}

/// `GET /v1/commands/`: every result, oldest first.
async fn list(State(inner): State<Arc<Inner>>, Query(q): Params) -> Response {
    if !authorized(&inner, &q) {
        return unauthorized();
    }
    let all: Vec<Value> = inner.state().results.iter().map(|r| r.to_json()).collect();
    reply(StatusCode::OK, &json!({"commands": all}))
}

/// `GET /v1/commands/<id>[?wait=true]`.
async fn one(
    State(inner): State<Arc<Inner>>,
    Path(id): Path<String>,
    Query(q): Params,
) -> Response {
    if !authorized(&inner, &q) {
        return unauthorized();
    }
    answer(&inner, &id, wants_wait(&q)).await
}

/// `POST /v1/commands/[?wait=true]` with `{"name": …, "params": {…}}`.
async fn run(State(inner): State<Arc<Inner>>, Query(q): Params, body: Bytes) -> Response {
    if !authorized(&inner, &q) {
        return unauthorized();
    }
    let (name, params) = match parse_command(&body) {
        Ok(p) => p,
        Err(why) => return fault(StatusCode::BAD_REQUEST, &why.to_string()),
    };
    let id = match commands::execute(&inner, &name, params) {
        Ok(id) => id,
        Err(r) => return refusal(&r),
    };
    answer(&inner, &id, wants_wait(&q)).await
}

/// The result of `id`, once ended if `wait`; 404 if there is no such command.
async fn answer(inner: &Inner, id: &str, wait: bool) -> Response {
    let found = if wait {
        wait_for_end(inner, id).await
    } else {
        result_of(inner, id)
    };
    match found {
        Some(r) => reply(StatusCode::OK, &r),
        None => refusal(&Refusal::not_found("Command Result", id)),
    }
}

/// The body's command name and parameters, or why not (its text is werkzeug's 400).
fn parse_command(body: &[u8]) -> Result<(String, serde_json::Map<String, Value>), BadCommand> {
    let v: Value = serde_json::from_slice(body)?;
    match (v.get("name"), v.get("params")) {
        (Some(Value::String(name)), Some(Value::Object(params))) => {
            Ok((name.clone(), params.clone()))
        }
        _ => Err(BadCommand::Shape),
    }
}

/// A command body IPA refuses.
#[derive(Debug, thiserror::Error)]
enum BadCommand {
    #[error("400 Bad Request: Failed to decode JSON object: {0}")]
    NotJson(#[from] serde_json::Error),
    #[error("400 Bad Request: Missing or invalid name or params")]
    Shape,
}

/// IPA's token check: the `agent_token` query parameter must equal the agent's token;
/// no token given, or none known yet, is refused.
fn authorized(inner: &Inner, q: &HashMap<String, String>) -> bool {
    let given = q.get("agent_token").filter(|t| !t.is_empty());
    match (given, &inner.state().token) {
        (Some(given), Some(known)) => given == known,
        _ => false,
    }
}

/// werkzeug's `Unauthorized('Token invalid.')`, as IPA raises it.
fn unauthorized() -> Response {
    fault(StatusCode::UNAUTHORIZED, "401 Unauthorized: Token invalid.")
}

/// `?wait=true` (any case), as IPA reads it.
fn wants_wait(q: &HashMap<String, String>) -> bool {
    q.get("wait")
        .is_some_and(|w| w.eq_ignore_ascii_case("true"))
}

fn result_of(inner: &Inner, id: &str) -> Option<Value> {
    inner
        .state()
        .results
        .iter()
        .find(|r| r.id == id)
        .map(|r| r.to_json())
}

/// The result of `id` once it is no longer `RUNNING`, or as it is when the wait ends
/// otherwise ([`WAIT_LIMIT`], the agent stopped). `None` if there is no such command.
async fn wait_for_end(inner: &Inner, id: &str) -> Option<Value> {
    // Subscribed before looking, so an end between the look and the wait is seen.
    let mut changes = inner.changed.subscribe();
    let limit = tokio::time::sleep(WAIT_LIMIT);
    tokio::pin!(limit);
    loop {
        {
            let state = inner.state();
            let r = state.results.iter().find(|r| r.id == id)?;
            if !r.is_running() {
                return Some(r.to_json());
            }
        }
        tokio::select! {
            changed = changes.changed() => if changed.is_err() { break },
            _ = &mut limit => break,
            _ = inner.stopped() => break,
        }
    }
    result_of(inner, id)
}

/// Any route not served: werkzeug's 404.
async fn not_found() -> Response {
    fault(
        StatusCode::NOT_FOUND,
        "404 Not Found: The requested URL was not found on the server.",
    )
}

/// A known route with another method: werkzeug's 405.
async fn not_allowed() -> Response {
    fault(
        StatusCode::METHOD_NOT_ALLOWED,
        "405 Method Not Allowed: The method is not allowed for the requested URL.",
    )
}

fn refusal(r: &Refusal) -> Response {
    let status = StatusCode::from_u16(r.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    fault(status, &r.message)
}

/// IPA's error body: `Client` for 4xx, `Server` for 5xx.
fn fault(status: StatusCode, message: &str) -> Response {
    let code = if status.is_server_error() {
        "Server"
    } else {
        "Client"
    };
    reply(status, &json!({"faultcode": code, "faultstring": message}))
}

fn reply(status: StatusCode, body: &Value) -> Response {
    let mut r = (status, body.to_string()).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}
