//! The fake agent against the production agent client (`ironic_drivers::agent_client`),
//! the code that will talk to it, and against a stand-in Ironic API (a few axum
//! handlers) that answers lookups with a token and records heartbeats.
//!
//! Every wait is bounded: conditions are polled until [`LIMIT`]; the few fixed pauses
//! only show that something does *not* happen.
#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use ironic_drivers::agent_client::{AgentClient, AgentError, CommandStatus, Endpoint, Settings};
use ironic_fake_agent::{AgentConfig, FakeAgent};
use serde_json::{Value, json};

const NODE: &str = "1be26c0b-03f2-4d2e-ae87-c02d7f33c123";
const MACS: [&str; 2] = ["52:54:00:12:34:56", "52:54:00:12:34:57"];
/// As our conductor makes them: 64 characters.
const TOKEN: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
/// The longest any condition is waited for.
const LIMIT: Duration = Duration::from_secs(10);

/// What the stand-in API saw and how it answers.
struct StandIn {
    url: String,
    /// Lookups answered 404 before the node is found, as before it waits for an agent.
    lookup_misses: usize,
    /// The token the lookup hands out (`******` to say it was handed out before).
    token: String,
    lookups: Mutex<Vec<Seen>>,
    heartbeats: Mutex<Vec<Seen>>,
    /// The status heartbeats are answered with.
    heartbeat_status: AtomicU16,
    refused_heartbeats: AtomicUsize,
    /// Connections accepted.
    connections: AtomicUsize,
}

#[derive(Debug, Clone)]
struct Seen {
    query: String,
    version: Option<String>,
    body: Value,
}

impl StandIn {
    async fn start(lookup_misses: usize, token: &str) -> Arc<StandIn> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let api = Arc::new(StandIn {
            url: format!("http://{}", listener.local_addr().unwrap()),
            lookup_misses,
            token: token.to_string(),
            lookups: Mutex::new(Vec::new()),
            heartbeats: Mutex::new(Vec::new()),
            heartbeat_status: AtomicU16::new(202),
            refused_heartbeats: AtomicUsize::new(0),
            connections: AtomicUsize::new(0),
        });
        let app = Router::new()
            .route("/v1/lookup", get(lookup))
            .route("/v1/heartbeat/{uuid}", post(heartbeat))
            .with_state(api.clone());
        tokio::spawn(serve(listener, app, api.clone()));
        api
    }

    fn heartbeats(&self) -> Vec<Seen> {
        self.heartbeats.lock().unwrap().clone()
    }
}

/// `axum::serve` by hand, to count connections.
async fn serve(listener: tokio::net::TcpListener, app: Router, api: Arc<StandIn>) {
    loop {
        let (stream, _) = listener.accept().await.unwrap();
        api.connections.fetch_add(1, Ordering::SeqCst);
        let svc = hyper_util::service::TowerToHyperService::new(app.clone());
        tokio::spawn(
            hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), svc),
        );
    }
}

fn seen(headers: &HeaderMap, query: Option<String>, body: &[u8]) -> Seen {
    Seen {
        query: query.unwrap_or_default(),
        version: headers
            .get("x-openstack-ironic-api-version")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string),
        body: serde_json::from_slice(body).unwrap_or(Value::Null),
    }
}

async fn lookup(
    State(api): State<Arc<StandIn>>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    let n = {
        let mut all = api.lookups.lock().unwrap();
        all.push(seen(&headers, query, b""));
        all.len()
    };
    if n <= api.lookup_misses {
        return (StatusCode::NOT_FOUND, r#"{"error_message": "not yet"}"#).into_response();
    }
    let body = json!({
        "node": {"uuid": NODE, "properties": {}, "instance_info": {}, "driver_internal_info": {}},
        "config": {"heartbeat_timeout": 300, "agent_token": api.token, "agent_token_required": true},
    });
    (StatusCode::OK, body.to_string()).into_response()
}

async fn heartbeat(State(api): State<Arc<StandIn>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    api.heartbeats
        .lock()
        .unwrap()
        .push(seen(&headers, None, &body));
    let status = StatusCode::from_u16(api.heartbeat_status.load(Ordering::SeqCst)).unwrap();
    if status != StatusCode::ACCEPTED {
        api.refused_heartbeats.fetch_add(1, Ordering::SeqCst);
    }
    status
}

/// Polls `cond` every 10 ms until it holds or [`LIMIT`] passes.
async fn until(cond: impl Fn() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + LIMIT;
    while tokio::time::Instant::now() < deadline {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cond()
}

/// `count` once it has not changed for 150 ms (a heartbeat in flight has landed), or
/// as it is after [`LIMIT`] if it keeps changing, which the caller's next assertion
/// then catches.
async fn settled(count: impl Fn() -> usize) -> usize {
    let deadline = tokio::time::Instant::now() + LIMIT;
    let mut last = count();
    while tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(150)).await;
        let now = count();
        if now == last {
            return now;
        }
        last = now;
    }
    last
}

fn client() -> AgentClient {
    AgentClient::new(Settings {
        command_timeout: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(1),
        attempts: 1,
        retry_interval: Duration::from_millis(10),
        ..Settings::default()
    })
}

fn endpoint<'a>(url: &'a str, token: &'a str) -> Endpoint<'a> {
    Endpoint {
        url,
        token,
        pinned_pem: None,
    }
}

/// A fake agent with an hour between periodic heartbeats, so that every heartbeat
/// after the first is one it was made to send; started once it has looked up and sent
/// its first heartbeat.
async fn started_with(api: &StandIn, tweak: impl FnOnce(&mut AgentConfig)) -> FakeAgent {
    let mut cfg = AgentConfig {
        api_url: api.url.clone(),
        macs: MACS.iter().map(|m| m.to_string()).collect(),
        heartbeat_interval: Some(Duration::from_secs(3600)),
        command_duration: Duration::from_millis(50),
        ..AgentConfig::default()
    };
    tweak(&mut cfg);
    let agent = FakeAgent::start(cfg).await.unwrap();
    assert!(
        until(|| agent.heartbeats() >= 1).await,
        "no heartbeat accepted"
    );
    agent
}

async fn started(api: &StandIn) -> FakeAgent {
    started_with(api, |_| {}).await
}

fn node() -> Value {
    json!({"uuid": NODE, "properties": {}, "instance_info": {}})
}

fn write_image_params(deploy_version: Value) -> Value {
    json!({
        "step": {
            "interface": "deploy",
            "step": "write_image",
            "args": {
                "image_info": {
                    "id": "cirros",
                    "urls": ["http://127.0.0.1:8080/cirros.raw"],
                    "disk_format": "raw",
                    "os_hash_algo": "sha256",
                    "os_hash_value": "ab".repeat(32),
                    "stream_raw_images": true,
                    "node_uuid": NODE,
                },
                "configdrive": null,
            },
            "priority": 80,
        },
        "node": node(),
        "ports": [],
        "deploy_version": deploy_version,
    })
}

fn versions() -> Value {
    json!({"generic_hardware_manager": "1.2"})
}

#[tokio::test]
async fn it_looks_itself_up_by_its_macs_and_heartbeats_with_its_token() {
    let api = StandIn::start(2, TOKEN).await;
    let agent = started(&api).await;
    assert_eq!(agent.node_uuid().as_deref(), Some(NODE));
    assert_eq!(agent.token().as_deref(), Some(TOKEN));

    // Two misses (404), then found: the lookup is retried.
    let lookups = api.lookups.lock().unwrap().clone();
    assert_eq!(lookups.len(), 3);
    assert_eq!(
        lookups[0].query,
        "addresses=52%3A54%3A00%3A12%3A34%3A56%2C52%3A54%3A00%3A12%3A34%3A57"
    );
    assert_eq!(lookups[0].version.as_deref(), Some("1.62"));

    let beats = api.heartbeats();
    assert_eq!(beats.len(), 1);
    assert_eq!(beats[0].version.as_deref(), Some("1.68"));
    assert_eq!(
        beats[0].body,
        json!({"callback_url": agent.url(), "agent_token": TOKEN, "agent_version": "13.0.0"})
    );
    agent.stop().await;
}

#[tokio::test]
async fn lookup_and_heartbeats_keep_one_connection_alive() {
    let api = StandIn::start(1, TOKEN).await;
    let agent = started_with(&api, |c| {
        c.heartbeat_interval = Some(Duration::from_millis(10))
    })
    .await;
    assert!(until(|| agent.heartbeats() >= 5).await);
    assert_eq!(api.connections.load(Ordering::SeqCst), 1);
    agent.stop().await;
}

#[tokio::test]
async fn a_masked_token_means_the_one_given_in_advance() {
    let api = StandIn::start(0, "******").await;
    let given = "virtual-media-token-virtual-media-token-0000";
    let agent = started_with(&api, |c| c.token = Some(given.to_string())).await;
    assert_eq!(agent.token().as_deref(), Some(given));
    assert_eq!(api.heartbeats()[0].body["agent_token"], given);
    let c = client();
    let url = agent.url();
    assert!(c.commands(&endpoint(&url, given)).await.unwrap().is_empty());
    agent.stop().await;
}

#[tokio::test]
async fn commands_need_the_token_status_does_not() {
    let api = StandIn::start(0, TOKEN).await;
    let agent = started(&api).await;
    let c = client();
    let url = agent.url();

    let status = c.status(&endpoint(&url, "")).await.unwrap();
    assert_eq!(status.version, "13.0.0");
    assert!(status.started_at > 1.0e9);

    for token in ["wrong", ""] {
        let e = c.commands(&endpoint(&url, token)).await.unwrap_err();
        match e {
            AgentError::Http { status, fault, .. } => {
                assert_eq!(status, 401);
                assert_eq!(fault.code.as_deref(), Some("Client"));
                assert_eq!(fault.message, "401 Unauthorized: Token invalid.");
            }
            other => panic!("expected 401, got {other:?}"),
        }
    }
    let e = c
        .execute(&endpoint(&url, "wrong"), "standby.sync", &json!({}), false)
        .await
        .unwrap_err();
    assert!(matches!(e, AgentError::Http { status: 401, .. }), "{e:?}");
    assert!(
        agent.commands().is_empty(),
        "a refused command is not recorded"
    );
    agent.stop().await;
}

#[tokio::test]
async fn sync_commands_answer_their_result_at_once() {
    let api = StandIn::start(0, TOKEN).await;
    let agent = started(&api).await;
    let c = client();
    let url = agent.url();
    let ep = endpoint(&url, TOKEN);
    let params = json!({"node": node(), "ports": []});

    let r = c
        .execute(&ep, "deploy.get_deploy_steps", &params, false)
        .await
        .unwrap();
    assert_eq!(r.status, CommandStatus::Succeeded);
    assert_eq!(r.name, "get_deploy_steps");
    let result = r.result.unwrap();
    assert_eq!(result["hardware_manager_version"], versions());
    let steps = result["deploy_steps"]["GenericHardwareManager"]
        .as_array()
        .unwrap();
    let write = steps.iter().find(|s| s["step"] == "write_image").unwrap();
    assert_eq!(
        *write,
        json!({"step": "write_image", "priority": 0, "interface": "deploy", "reboot_requested": false})
    );
    let raid = steps
        .iter()
        .find(|s| s["step"] == "apply_configuration")
        .unwrap();
    assert_eq!(raid["interface"], "raid");
    assert_eq!(raid["argsinfo"]["raid_config"]["required"], true);

    let r = c
        .execute(&ep, "clean.get_clean_steps", &params, false)
        .await
        .unwrap();
    let steps = r.result.unwrap()["clean_steps"]["GenericHardwareManager"].clone();
    let metadata = steps
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["step"] == "erase_devices_metadata")
        .unwrap()
        .clone();
    assert_eq!(metadata["priority"], 99);
    assert_eq!(metadata["abortable"], true);

    // Before an image was written: no partition UUIDs.
    let r = c
        .execute(&ep, "standby.get_partition_uuids", &json!({}), false)
        .await
        .unwrap();
    assert_eq!(r.result, Some(json!({})));

    let r = c
        .execute(&ep, "log.collect_system_logs", &json!({}), false)
        .await
        .unwrap();
    let logs = r.result.unwrap()["system_logs"]
        .as_str()
        .unwrap()
        .to_string();
    let (file, journal) = untar_one(&logs);
    assert_eq!(file, "journal.log");
    assert!(journal.contains(NODE), "{journal}");
    assert!(journal.contains("get_deploy_steps"), "{journal}");

    // Every one of them is in the list, oldest first, and was recorded as received.
    let names: Vec<String> = c
        .commands(&ep)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.name)
        .collect();
    assert_eq!(
        names,
        [
            "get_deploy_steps",
            "get_clean_steps",
            "get_partition_uuids",
            "collect_system_logs"
        ]
    );
    assert_eq!(agent.commands()[0]["name"], "deploy.get_deploy_steps");
    assert_eq!(agent.commands()[0]["params"], params);
    agent.stop().await;
}

#[tokio::test]
async fn an_async_step_runs_then_succeeds_and_forces_a_heartbeat() {
    let api = StandIn::start(0, TOKEN).await;
    let agent = started(&api).await;
    let c = client();
    let url = agent.url();
    let ep = endpoint(&url, TOKEN);
    let params = write_image_params(versions());

    let started = c
        .execute(&ep, "deploy.execute_deploy_step", &params, false)
        .await
        .unwrap();
    assert_eq!(started.status, CommandStatus::Running);
    assert_eq!(started.name, "execute_deploy_step");
    assert_eq!(agent.heartbeats(), 1);

    // The end forces a heartbeat (the periodic one is an hour away).
    assert!(
        until(|| agent.heartbeats() >= 2).await,
        "no forced heartbeat"
    );
    let last = c.last_command(&ep).await.unwrap().unwrap();
    assert_eq!(last.id, started.id);
    assert_eq!(last.status, CommandStatus::Succeeded);
    let result = last.result.unwrap();
    assert_eq!(result["deploy_step"], params["step"]);
    let message = result["deploy_result"]["result"].as_str().unwrap();
    assert!(
        message.starts_with("prepare_image: image (cirros) written to device"),
        "{message}"
    );

    // The image left the disk's identifier behind.
    let r = c
        .execute(&ep, "standby.get_partition_uuids", &json!({}), false)
        .await
        .unwrap();
    let root = r.result.unwrap()["root uuid"].as_str().unwrap().to_string();
    assert!(message.ends_with(&format!("root_uuid={root}")), "{message}");

    // What the conductor sent is there to assert on.
    let sent = &agent.commands()[0];
    assert_eq!(sent["name"], "deploy.execute_deploy_step");
    assert_eq!(sent["params"]["step"]["args"]["image_info"]["id"], "cirros");
    agent.stop().await;
}

#[tokio::test]
async fn a_forced_heartbeat_waits_for_the_minimum_interval() {
    let api = StandIn::start(0, TOKEN).await;
    let agent = started_with(&api, |c| {
        c.forced_heartbeat_min_interval = Duration::from_millis(400)
    })
    .await;
    let first = tokio::time::Instant::now();
    let c = client();
    let url = agent.url();
    let r = c
        .execute(&endpoint(&url, TOKEN), "standby.sync", &json!({}), false)
        .await
        .unwrap();
    assert_eq!(r.status, CommandStatus::Succeeded, "sync forces nothing");
    let r = c
        .execute(
            &endpoint(&url, TOKEN),
            "image.install_bootloader",
            &json!({"root_uuid": "0x1"}),
            true,
        )
        .await
        .unwrap();
    assert_eq!(r.status, CommandStatus::Succeeded);
    assert!(until(|| agent.heartbeats() == 2).await);
    // Measured from just after the first heartbeat was counted, hence the margin.
    let gap = first.elapsed();
    assert!(gap >= Duration::from_millis(350), "{gap:?}");
    agent.stop().await;
}

#[tokio::test]
async fn wait_true_answers_once_the_command_ended() {
    let api = StandIn::start(0, TOKEN).await;
    let agent = started(&api).await;
    let c = client();
    let url = agent.url();
    let ep = endpoint(&url, TOKEN);
    let step = json!({
        "step": {"interface": "deploy", "step": "erase_devices_metadata", "args": {}},
        "node": node(), "ports": [], "clean_version": versions(),
    });

    let r = c
        .execute(&ep, "clean.execute_clean_step", &step, true)
        .await
        .unwrap();
    assert_eq!(r.status, CommandStatus::Succeeded);
    assert_eq!(
        r.result.unwrap(),
        json!({"clean_result": null, "clean_step": step["step"]})
    );

    agent.faults().hang(true);
    let running = c
        .execute(&ep, "standby.power_off", &json!({}), false)
        .await
        .unwrap();
    assert_eq!(running.status, CommandStatus::Running);
    let waiter = {
        let (c, url, id) = (c.clone(), url.clone(), running.id.clone());
        tokio::spawn(async move { c.command(&endpoint(&url, TOKEN), &id, true).await })
    };
    // Still running past its duration while hung.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiter.is_finished(), "wait=true answered a hung command");
    let now = c.command(&ep, &running.id, false).await.unwrap();
    assert_eq!(now.status, CommandStatus::Running);

    agent.faults().hang(false);
    let ended = tokio::time::timeout(LIMIT, waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(ended.status, CommandStatus::Succeeded);
    assert_eq!(ended.id, running.id);

    let e = c.command(&ep, "no-such-command", false).await.unwrap_err();
    assert!(matches!(e, AgentError::Http { status: 404, .. }), "{e:?}");
    agent.stop().await;
}

#[tokio::test]
async fn a_busy_agent_refuses_commands_with_409() {
    let api = StandIn::start(0, TOKEN).await;
    let agent = started_with(&api, |c| c.command_duration = Duration::from_secs(30)).await;
    let c = client();
    let url = agent.url();
    let ep = endpoint(&url, TOKEN);

    let running = c
        .execute(
            &ep,
            "image.install_bootloader",
            &json!({"root_uuid": "0x1234abcd"}),
            false,
        )
        .await
        .unwrap();
    assert_eq!(running.status, CommandStatus::Running);
    let e = c
        .execute(&ep, "standby.sync", &json!({}), false)
        .await
        .unwrap_err();
    match e {
        AgentError::Busy { fault, .. } => {
            assert_eq!(
                fault.message,
                "Agent is busy: executing command install_bootloader"
            )
        }
        other => panic!("expected busy, got {other:?}"),
    }
    agent.stop().await;

    // The knob: busy with nothing running.
    let agent = started(&api).await;
    let url = agent.url();
    let ep = endpoint(&url, TOKEN);
    agent.faults().busy(true);
    let e = c
        .execute(&ep, "standby.sync", &json!({}), false)
        .await
        .unwrap_err();
    assert!(matches!(e, AgentError::Busy { .. }), "{e:?}");
    assert!(
        agent.commands().is_empty(),
        "a refused command is not recorded"
    );
    agent.faults().busy(false);
    let r = c
        .execute(&ep, "standby.sync", &json!({}), false)
        .await
        .unwrap();
    assert_eq!(r.status, CommandStatus::Succeeded);
    assert_eq!(agent.commands().len(), 1);
    agent.stop().await;
}

#[tokio::test]
async fn a_failing_step_ends_failed_with_its_message() {
    let api = StandIn::start(0, TOKEN).await;
    let agent = started(&api).await;
    let c = client();
    let url = agent.url();
    let ep = endpoint(&url, TOKEN);
    agent
        .faults()
        .fail_step("deploy.write_image", "no space left on /dev/vda");

    let r = c
        .execute(
            &ep,
            "deploy.execute_deploy_step",
            &write_image_params(versions()),
            true,
        )
        .await
        .unwrap();
    assert_eq!(r.status, CommandStatus::Failed);
    assert_eq!(
        r.error_message().as_deref(),
        Some("no space left on /dev/vda")
    );
    let error = r.error.unwrap();
    assert_eq!(error["type"], "DeploymentError");
    assert_eq!(error["code"], 500);
    assert_eq!(error["details"], "no space left on /dev/vda");
    assert_eq!(r.result, None);

    // Another step is not affected; the failure stays until cleared.
    let metadata = json!({
        "step": {"interface": "deploy", "step": "erase_devices_metadata"},
        "node": node(), "ports": [], "deploy_version": versions(),
    });
    let r = c
        .execute(&ep, "deploy.execute_deploy_step", &metadata, true)
        .await
        .unwrap();
    assert_eq!(r.status, CommandStatus::Succeeded);
    agent.faults().clear_fail_step("deploy.write_image");
    let r = c
        .execute(
            &ep,
            "deploy.execute_deploy_step",
            &write_image_params(versions()),
            true,
        )
        .await
        .unwrap();
    assert_eq!(r.status, CommandStatus::Succeeded);

    // An image_info IPA would refuse fails the step, whatever the knobs.
    let mut bad = write_image_params(versions());
    bad["step"]["args"]["image_info"]
        .as_object_mut()
        .unwrap()
        .remove("urls");
    let r = c
        .execute(&ep, "deploy.execute_deploy_step", &bad, true)
        .await
        .unwrap();
    assert_eq!(r.status, CommandStatus::Failed);
    assert_eq!(r.error.unwrap()["type"], "InvalidCommandParamsError");

    // A step without its name fails as IPA's does, after the POST answered.
    let nameless = json!({"step": {"interface": "deploy"}, "node": node(), "ports": []});
    let r = c
        .execute(&ep, "deploy.execute_deploy_step", &nameless, true)
        .await
        .unwrap();
    assert_eq!(r.status, CommandStatus::Failed);
    assert_eq!(r.error.unwrap()["type"], "CommandExecutionError");

    // An asynchronous command that is not a step fails by its name.
    agent
        .faults()
        .fail_step("image.install_bootloader", "efibootmgr said no");
    let r = c
        .execute(
            &ep,
            "image.install_bootloader",
            &json!({"root_uuid": "0x1", "target_boot_mode": "uefi"}),
            true,
        )
        .await
        .unwrap();
    assert_eq!(r.status, CommandStatus::Failed);
    assert_eq!(r.error_message().as_deref(), Some("efibootmgr said no"));
    agent.stop().await;
}

#[tokio::test]
async fn lockdown_answers_then_nothing_more() {
    let api = StandIn::start(0, TOKEN).await;
    let agent = started_with(&api, |c| {
        c.heartbeat_interval = Some(Duration::from_millis(20))
    })
    .await;
    let c = client();
    let url = agent.url();
    let ep = endpoint(&url, TOKEN);
    let r = c
        .execute(&ep, "system.lockdown", &json!({}), false)
        .await
        .unwrap();
    assert_eq!(r.status, CommandStatus::Succeeded);
    let e = c.status(&ep).await.unwrap_err();
    assert!(matches!(e, AgentError::Unreachable { .. }), "{e:?}");
    let before = settled(|| api.heartbeats().len()).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        api.heartbeats().len(),
        before,
        "a locked-down agent heartbeats"
    );
    agent.stop().await;
}

#[tokio::test]
async fn another_hardware_manager_version_is_a_mismatch() {
    let api = StandIn::start(0, TOKEN).await;
    let agent = started(&api).await;
    let c = client();
    let url = agent.url();
    let ep = endpoint(&url, TOKEN);

    let old = json!({"generic_hardware_manager": "1.1"});
    let r = c
        .execute(
            &ep,
            "deploy.execute_deploy_step",
            &write_image_params(old),
            true,
        )
        .await
        .unwrap();
    assert_eq!(r.status, CommandStatus::CleanVersionMismatch);
    assert_eq!(r.error.unwrap()["type"], "VersionMismatch");

    // The knob: once, then the same versions succeed again.
    agent.faults().mismatch_once(true);
    for expected in [
        CommandStatus::CleanVersionMismatch,
        CommandStatus::Succeeded,
    ] {
        let r = c
            .execute(
                &ep,
                "deploy.execute_deploy_step",
                &write_image_params(versions()),
                true,
            )
            .await
            .unwrap();
        assert_eq!(r.status, expected);
    }
    agent.stop().await;
}

#[tokio::test]
async fn an_unreachable_agent_answers_nothing_and_stops_heartbeating() {
    let api = StandIn::start(0, TOKEN).await;
    let agent = started_with(&api, |c| {
        c.heartbeat_interval = Some(Duration::from_millis(20))
    })
    .await;
    let c = client();
    let url = agent.url();
    let ep = endpoint(&url, TOKEN);

    agent.faults().unreachable(true);
    let e = c.status(&ep).await.unwrap_err();
    assert!(matches!(e, AgentError::Unreachable { .. }), "{e:?}");
    let e = c
        .execute(&ep, "standby.sync", &json!({}), false)
        .await
        .unwrap_err();
    assert!(matches!(e, AgentError::Unreachable { .. }), "{e:?}");
    // A heartbeat in flight when the knob turned may still land; none after it.
    let before = settled(|| api.heartbeats().len()).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        api.heartbeats().len(),
        before,
        "heartbeats while unreachable"
    );

    agent.faults().unreachable(false);
    assert!(until(|| api.heartbeats().len() > before).await);
    assert_eq!(c.status(&ep).await.unwrap().version, "13.0.0");
    agent.stop().await;
}

#[tokio::test]
async fn power_off_ends_the_heartbeats_but_not_the_api() {
    let api = StandIn::start(0, TOKEN).await;
    let agent = started_with(&api, |c| {
        c.heartbeat_interval = Some(Duration::from_millis(20))
    })
    .await;
    let c = client();
    let url = agent.url();
    let ep = endpoint(&url, TOKEN);

    let r = c
        .execute(&ep, "standby.power_off", &json!({}), true)
        .await
        .unwrap();
    assert_eq!(r.status, CommandStatus::Succeeded);
    let before = settled(|| agent.heartbeats()).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(agent.heartbeats(), before, "a powered-off agent heartbeats");
    assert_eq!(c.last_command(&ep).await.unwrap().unwrap().id, r.id);
    agent.stop().await;
}

#[tokio::test]
async fn without_forced_heartbeats_only_heartbeat_now_tells() {
    let api = StandIn::start(0, TOKEN).await;
    let agent = started(&api).await;
    let c = client();
    let url = agent.url();
    let ep = endpoint(&url, TOKEN);
    agent.faults().no_heartbeat_after_commands(true);

    let r = c
        .execute(
            &ep,
            "image.install_bootloader",
            &json!({"root_uuid": "0x1"}),
            true,
        )
        .await
        .unwrap();
    assert_eq!(r.status, CommandStatus::Succeeded);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(agent.heartbeats(), 1, "a heartbeat was forced");

    agent.heartbeat_now();
    assert!(until(|| agent.heartbeats() == 2).await);
    agent.stop().await;
}

#[tokio::test]
async fn a_refused_heartbeat_is_retried_and_not_counted() {
    let api = StandIn::start(0, TOKEN).await;
    let agent = started_with(&api, |c| {
        c.heartbeat_interval = Some(Duration::from_millis(50))
    })
    .await;
    api.heartbeat_status.store(409, Ordering::SeqCst);
    let counted = agent.heartbeats();
    assert!(until(|| api.refused_heartbeats.load(Ordering::SeqCst) >= 2).await);
    // At most the one in flight when the API changed its answer was counted.
    assert!(agent.heartbeats() <= counted + 1);
    api.heartbeat_status.store(202, Ordering::SeqCst);
    assert!(until(|| agent.heartbeats() >= counted + 2).await);
    agent.stop().await;
}

#[tokio::test]
async fn unknown_commands_and_bad_bodies_are_refused_as_ipa_does() {
    let api = StandIn::start(0, TOKEN).await;
    let agent = started(&api).await;
    let c = client();
    let url = agent.url();
    let ep = endpoint(&url, TOKEN);

    let cases = [
        (
            "nope.x",
            json!({}),
            404,
            "Not found: Extension with id nope not found.",
        ),
        (
            "deploy.nope",
            json!({}),
            400,
            "Invalid command: Unknown command: nope",
        ),
        (
            "no_dot",
            json!({}),
            400,
            "Invalid command: Command name must be of the form <extension>.<name>",
        ),
        (
            "standby.sync",
            json!([1]),
            400,
            "400 Bad Request: Missing or invalid name or params",
        ),
    ];
    for (name, params, want_status, want_message) in cases {
        match c.execute(&ep, name, &params, false).await.unwrap_err() {
            AgentError::Http { status, fault, .. } => {
                assert_eq!(
                    (status, fault.message.as_str()),
                    (want_status, want_message)
                );
                assert_eq!(fault.code.as_deref(), Some("Client"));
            }
            other => panic!("{name}: expected {want_status}, got {other:?}"),
        }
    }
    assert!(agent.commands().is_empty());
    agent.stop().await;
}

#[tokio::test]
async fn the_routes_answer_without_v1_and_without_the_slash() {
    let api = StandIn::start(0, TOKEN).await;
    let agent = started(&api).await;
    let url = agent.url();
    for path in [
        "/status".to_string(),
        "/v1/status".to_string(),
        format!("/commands?agent_token={TOKEN}"),
        format!("/commands/?agent_token={TOKEN}"),
        format!("/v1/commands?agent_token={TOKEN}"),
        "/".to_string(),
        "/v1/".to_string(),
    ] {
        let (status, body) = raw_get(&url, &path).await;
        assert_eq!(status, 200, "{path}: {body}");
    }
    let (_, root) = raw_get(&url, "/").await;
    assert_eq!(root["default_version"]["id"], "v1");
    let (status, body) = raw_get(&url, "/v2/nothing").await;
    assert_eq!(status, 404);
    assert_eq!(body["faultcode"], "Client");
    agent.stop().await;
}

#[tokio::test]
async fn stop_closes_the_port_and_ends_the_heartbeats() {
    let api = StandIn::start(0, TOKEN).await;
    let agent = started_with(&api, |c| {
        c.heartbeat_interval = Some(Duration::from_millis(20))
    })
    .await;
    let url = agent.url();
    agent.stop().await;
    let e = client().status(&endpoint(&url, TOKEN)).await.unwrap_err();
    assert!(matches!(e, AgentError::Unreachable { .. }), "{e:?}");
    let before = settled(|| api.heartbeats().len()).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(api.heartbeats().len(), before);
    // Idempotent.
    agent.stop().await;
}

/// The one file of `log.collect_system_logs`'s base64 gzipped tar: its name and text.
fn untar_one(b64: &str) -> (String, String) {
    use base64::Engine;
    use std::io::Read;
    let gz = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .unwrap();
    let mut tar = Vec::new();
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_end(&mut tar)
        .unwrap();
    let name = String::from_utf8(tar[..100].split(|b| *b == 0).next().unwrap().to_vec()).unwrap();
    let size_field = std::str::from_utf8(&tar[124..135]).unwrap();
    let size = usize::from_str_radix(size_field, 8).unwrap();
    let text = String::from_utf8(tar[512..512 + size].to_vec()).unwrap();
    (name, text)
}

/// A GET without the agent client (which always adds `/v1` and the slash): status and
/// JSON body.
async fn raw_get(base: &str, path: &str) -> (u16, Value) {
    use http_body_util::BodyExt;
    let addr = base.strip_prefix("http://").unwrap();
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let req = hyper::Request::get(path)
        .header("host", addr)
        .body(http_body_util::Empty::<Bytes>::new())
        .unwrap();
    let resp = tokio::time::timeout(LIMIT, sender.send_request(req))
        .await
        .unwrap()
        .unwrap();
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

#[tokio::test]
async fn an_open_connection_is_dropped_too_once_unreachable() {
    use http_body_util::BodyExt;
    let api = StandIn::start(0, TOKEN).await;
    let agent = started(&api).await;
    let url = agent.url();
    let addr = url.strip_prefix("http://").unwrap().to_string();
    let stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let get = || {
        hyper::Request::get("/v1/status")
            .header("host", &addr)
            .body(http_body_util::Empty::<Bytes>::new())
            .unwrap()
    };
    let first = sender.send_request(get()).await.unwrap();
    assert_eq!(first.status(), 200);
    first.into_body().collect().await.unwrap();

    agent.faults().unreachable(true);
    sender.ready().await.unwrap();
    let second = tokio::time::timeout(LIMIT, sender.send_request(get()))
        .await
        .unwrap();
    assert!(second.is_err(), "answered while unreachable: {second:?}");
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundreds_of_agents_run_in_one_process() {
    let api = StandIn::start(0, TOKEN).await;
    let mut agents = Vec::new();
    for _ in 0..300 {
        let cfg = AgentConfig {
            api_url: api.url.clone(),
            macs: vec![MACS[0].to_string()],
            heartbeat_interval: Some(Duration::from_millis(200)),
            ..AgentConfig::default()
        };
        agents.push(FakeAgent::start(cfg).await.unwrap());
    }
    assert!(
        until(|| agents.iter().all(|a| a.heartbeats() >= 2)).await,
        "not every agent heartbeats: {} of 300",
        agents.iter().filter(|a| a.heartbeats() >= 2).count()
    );
    let c = client();
    for a in agents.iter().step_by(50) {
        let url = a.url();
        let r = c
            .execute(&endpoint(&url, TOKEN), "standby.sync", &json!({}), false)
            .await
            .unwrap();
        assert_eq!(r.status, CommandStatus::Succeeded);
    }
    for a in &agents {
        a.stop().await;
    }
}
