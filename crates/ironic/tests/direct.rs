#![allow(clippy::unwrap_used)]
//! The `direct` deploy and in-band cleaning against simulated agents (`ironic-load`'s
//! `fake_agent`, which speaks ironic-python-agent's API): the flows, the commands the
//! conductor sends, and the failures that are costly on a real machine (a failed step
//! with the logs collected, a busy agent, a hardware change, an agent that never calls
//! back, a conductor killed while a node waits). The real agent on a real machine is
//! `machines.rs`.

mod common;

use common::{Backend, Server};
use ironic_fake_agent::{AgentConfig, FakeAgent};
use serde_json::{Value, json};
use std::time::Duration;

const V: &str = "1.115";
const SHA: &str = "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03";

fn settings(c: &mut ironic_config::Config, logs: &std::path::Path) {
    // The simulated agent calls back over plain HTTP.
    c.agent.require_tls = false;
    c.agent.post_deploy_get_power_state_retries = 2;
    c.agent.deploy_logs_local_path = logs.to_path_buf();
    c.deploy.erase_devices_priority = Some(0);
}

/// An all-in-one server with [`settings`] and automated cleaning off (`provide` needs
/// no agent), and its logs folder.
async fn server_without_cleaning() -> (Server, std::path::PathBuf) {
    let logs = tempdir();
    let s = common::start_with(Backend::Sqlite, |c| {
        settings(c, &logs);
        c.conductor.automated_clean = false;
    })
    .await;
    (s, logs)
}

/// A `fake-hardware` node deploying through the agent, with a port, `manageable`.
async fn direct_node(s: &Server, name: &str, mac: &str) -> String {
    let n = s
        .node(json!({"driver": "fake-hardware", "name": name,
                     "deploy_interface": "direct", "boot_interface": "fake"}))
        .await;
    let uuid = n["uuid"].as_str().unwrap().to_string();
    let r = s
        .post("/v1/ports", V, &json!({"node_uuid": uuid, "address": mac}))
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(s.provision_to(V, name, "manage").await.status, 202);
    s.wait_state(V, name, "manageable").await;
    uuid
}

/// [`direct_node`], provided and `available` (on a server with automated cleaning off:
/// no agent is needed).
async fn available_node(s: &Server, name: &str, mac: &str) -> String {
    let uuid = direct_node(s, name, mac).await;
    assert_eq!(s.provision_to(V, &uuid, "provide").await.status, 202);
    wait_for(s, &uuid, "available", Duration::from_secs(20)).await;
    uuid
}

/// A simulated agent on the node with `mac` (its machine "booted" the ramdisk).
async fn agent(s: &Server, mac: &str) -> FakeAgent {
    agent_taking(s, mac, AgentConfig::default().command_duration).await
}

/// [`agent`], whose asynchronous commands (writing the image) take `command_duration`.
async fn agent_taking(s: &Server, mac: &str, command_duration: Duration) -> FakeAgent {
    FakeAgent::start(AgentConfig {
        api_url: s.base(),
        macs: vec![mac.to_string()],
        heartbeat_interval: Some(Duration::from_secs(1)),
        command_duration,
        ..AgentConfig::default()
    })
    .await
    .unwrap()
}

fn names(a: &FakeAgent) -> Vec<String> {
    a.commands()
        .iter()
        .map(|c| {
            let step = c["params"]["step"]["step"].as_str().unwrap_or("");
            let name = c["name"].as_str().unwrap_or("");
            if step.is_empty() {
                name.to_string()
            } else {
                format!("{name}:{step}")
            }
        })
        .collect()
}

/// `len` characters of base64's alphabet, pseudo-random (6 bits of 8 each: gzip takes a
/// quarter off at best).
fn noise(len: usize) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ALPHABET[(x >> 58) as usize] as char
        })
        .collect()
}

/// The `write_image` command the agent `a` was sent.
fn write_image_sent(a: &FakeAgent) -> Value {
    a.commands()
        .into_iter()
        .find(|c| c["params"]["step"]["step"] == "write_image")
        .expect("write_image sent")
}

async fn wait_for(s: &Server, uuid: &str, state: &str, within: Duration) -> Value {
    let deadline = std::time::Instant::now() + within;
    loop {
        let n = s.get(&format!("/v1/nodes/{uuid}"), V).await.json();
        // Waits and failures keep their target.
        let settled = state.contains("wait")
            || state.ends_with("failed")
            || n["target_provision_state"].is_null();
        if n["provision_state"] == state && settled {
            return n;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not {state} within {within:?}: {} {}",
            n["provision_state"],
            n["last_error"]
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn set_image(s: &Server, uuid: &str) {
    let r = s
        .patch(
            &format!("/v1/nodes/{uuid}"),
            V,
            &json!([
                {"op": "add", "path": "/instance_info/image_source", "value": "http://images.example/disk.raw"},
                {"op": "add", "path": "/instance_info/image_os_hash_algo", "value": "sha256"},
                {"op": "add", "path": "/instance_info/image_os_hash_value", "value": SHA},
                {"op": "add", "path": "/instance_info/image_disk_format", "value": "raw"},
            ]),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
}

/// `provide` (automated cleaning through the agent), `deploy` with a config drive,
/// `undeploy` (cleaning again): each boot of the ramdisk is a new simulated agent.
async fn lifecycle(backend: Backend) {
    let logs = tempdir();
    let s = common::start_with(backend, |c| settings(c, &logs)).await;
    let mac = "52:54:00:d1:00:01";
    let uuid = direct_node(&s, "direct-1", mac).await;

    // The clean steps are known once an agent reported them.
    let r = s.get(&format!("/v1/nodes/{uuid}/cleaning/steps"), V).await;
    assert_eq!(r.status, 202, "{}", r.body);

    // Automated cleaning: the node waits for its agent, which is asked its steps and
    // runs those with a priority (the full erase is off: priority 0).
    assert_eq!(s.provision_to(V, &uuid, "provide").await.status, 202);
    wait_for(&s, &uuid, "clean wait", Duration::from_secs(20)).await;
    let a = agent(&s, mac).await;
    let n = wait_for(&s, &uuid, "available", Duration::from_secs(30)).await;
    assert_eq!(n["power_state"], "power off", "{n}");
    assert_eq!(
        names(&a),
        [
            "clean.get_clean_steps",
            "clean.execute_clean_step:erase_devices_metadata"
        ]
    );
    a.stop().await;
    let r = s.get(&format!("/v1/nodes/{uuid}/cleaning/steps"), V).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let listed: Vec<(String, u64)> = r.json()["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                format!(
                    "{}.{}",
                    s["interface"].as_str().unwrap(),
                    s["step"].as_str().unwrap()
                ),
                s["priority"].as_u64().unwrap(),
            )
        })
        .collect();
    assert!(
        listed.contains(&("deploy.erase_devices_metadata".into(), 99)),
        "{listed:?}"
    );
    assert!(
        listed.contains(&("deploy.erase_devices".into(), 0)),
        "{listed:?}"
    );

    // Deploy: the ramdisk boots, the agent writes the image with the config drive, whose
    // user data (3 MiB that gzip cannot shrink much) makes a body larger than other
    // routes take (`[api] provision_max_body_bytes`, carried over the bus when split).
    set_image(&s, &uuid).await;
    let user_data = noise(3 << 20);
    let r = s
        .provision(
            V,
            &uuid,
            json!({"target": "active",
                   "configdrive": {"meta_data": {"hostname": "d1"}, "user_data": user_data}}),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let n = wait_for(&s, &uuid, "wait call-back", Duration::from_secs(20)).await;
    assert_eq!(n["deploy_step"]["step"], "deploy", "{n}");
    let a = agent(&s, mac).await;
    // After the agent's power-off the BMC is asked again later, the node unlocked in
    // between (its heartbeats and reads are served): no lock held while waiting.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let n = s.get(&format!("/v1/nodes/{uuid}"), V).await.json();
        if n["deploy_step"]["step"] == "tear_down_agent"
            && n["provision_state"] == "wait call-back"
            && n["reservation"].is_null()
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline && n["provision_state"] != "active",
            "tear_down_agent never waited unlocked: {n}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let n = wait_for(&s, &uuid, "active", Duration::from_secs(30)).await;
    assert_eq!(n["power_state"], "power on", "{n}");
    assert_eq!(n["last_error"], Value::Null);
    // A step that looks again (the BMC polled after the agent's power-off) started
    // once and ended once, however often it ran.
    let journal = n["driver_internal_info"]["fake_journal"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let events: Vec<&str> = journal
        .iter()
        .filter(|e| e["step"] == "deploy.tear_down_agent")
        .filter_map(|e| e["event"].as_str())
        .collect();
    assert_eq!(events, ["started", "done"], "{journal:?}");
    assert_eq!(
        names(&a),
        [
            "deploy.get_deploy_steps",
            "deploy.execute_deploy_step:write_image",
            "standby.get_partition_uuids",
            "standby.power_off"
        ]
    );
    let write = write_image_sent(&a);
    let args = &write["params"]["step"]["args"];
    let info = &args["image_info"];
    assert_eq!(
        info["urls"],
        json!(["http://images.example/disk.raw"]),
        "{info}"
    );
    assert_eq!(info["os_hash_algo"], "sha256");
    assert_eq!(info["os_hash_value"], SHA);
    assert_eq!(info["disk_format"], "raw");
    assert_eq!(info["id"], "disk.raw");
    assert_eq!(info["node_uuid"], uuid.as_str());
    let cd = args["configdrive"].as_str().unwrap();
    assert!(
        cd.starts_with("H4sI"),
        "a gzipped config drive, base64: {}",
        &cd[..cd.len().min(100)]
    );
    assert!(cd.len() > 2 << 20, "the user data is in it: {}", cd.len());
    assert_eq!(info["configdrive"], args["configdrive"]);
    // The node sent has no secrets; the config drive is gone from the node.
    assert!(write["params"]["node"]["driver_internal_info"]["agent_secret_token"].is_null());
    assert!(n["instance_info"].get("configdrive").is_none(), "{n}");
    let bd = s
        .get(&format!("/v1/nodes/{uuid}/management/boot_device"), V)
        .await
        .json();
    assert_eq!(bd, json!({"boot_device": "disk", "persistent": true}));
    a.stop().await;

    // Undeploy: cleaning through a new agent, then available.
    assert_eq!(s.provision_to(V, &uuid, "deleted").await.status, 202);
    wait_for(&s, &uuid, "clean wait", Duration::from_secs(20)).await;
    let a = agent(&s, mac).await;
    let n = wait_for(&s, &uuid, "available", Duration::from_secs(30)).await;
    assert_eq!(n["instance_info"], json!({}), "{n}");
    assert!(names(&a).contains(&"clean.execute_clean_step:erase_devices_metadata".to_string()));
    a.stop().await;
    s.stop().await;
    let _ = std::fs::remove_dir_all(&logs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_lifecycle_all_in_one() {
    lifecycle(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_lifecycle_split() {
    lifecycle(Backend::Split).await;
}

/// Fast-track: the agent that cleaned the node keeps running (the node on, its token
/// and URL kept) and the deploy uses it without a reboot; an agent that stopped
/// answering since is booted again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fast_track_deploys_with_the_agent_that_cleaned() {
    let logs = tempdir();
    let s = common::start_with(Backend::Sqlite, |c| {
        settings(c, &logs);
        c.deploy.fast_track = true;
    })
    .await;
    let mac = "52:54:00:d1:00:08";
    let uuid = direct_node(&s, "fast-1", mac).await;
    assert_eq!(s.provision_to(V, &uuid, "provide").await.status, 202);
    wait_for(&s, &uuid, "clean wait", Duration::from_secs(20)).await;
    let a = agent(&s, mac).await;
    let n = wait_for(&s, &uuid, "available", Duration::from_secs(30)).await;
    assert_eq!(n["power_state"], "power on", "{n}");
    let dii = &n["driver_internal_info"];
    assert!(dii["agent_url"].is_string(), "{dii}");
    assert!(dii["agent_secret_token"].is_string(), "{dii}");

    // The deploy goes on with the running agent: no second boot.
    set_image(&s, &uuid).await;
    assert_eq!(s.provision_to(V, &uuid, "active").await.status, 202);
    let n = wait_for(&s, &uuid, "active", Duration::from_secs(30)).await;
    assert_eq!(n["last_error"], Value::Null, "{n}");
    assert_eq!(
        names(&a),
        [
            "clean.get_clean_steps",
            "clean.execute_clean_step:erase_devices_metadata",
            "deploy.get_deploy_steps",
            "deploy.execute_deploy_step:write_image",
            "standby.get_partition_uuids",
            "standby.power_off"
        ]
    );
    // The instance runs: the agent is forgotten.
    assert!(n["driver_internal_info"]["agent_url"].is_null(), "{n}");
    a.stop().await;

    // Undeploy: the ramdisk boots for cleaning and keeps running after it.
    assert_eq!(s.provision_to(V, &uuid, "deleted").await.status, 202);
    wait_for(&s, &uuid, "clean wait", Duration::from_secs(20)).await;
    let b = agent(&s, mac).await;
    let n = wait_for(&s, &uuid, "available", Duration::from_secs(30)).await;
    assert!(n["driver_internal_info"]["agent_url"].is_string(), "{n}");
    // The ramdisk stops answering (its heartbeat is still recent): the deploy finds
    // out and boots it again.
    b.stop().await;
    set_image(&s, &uuid).await;
    assert_eq!(s.provision_to(V, &uuid, "active").await.status, 202);
    common::until(
        "the ramdisk booted again for the deploy",
        Duration::from_secs(60),
        || {
            let (s, uuid) = (&s, &uuid);
            async move {
                let n = s.get(&format!("/v1/nodes/{uuid}"), V).await.json();
                n["provision_state"] == "wait call-back"
                    && n["deploy_step"]["step"] == "deploy"
                    && n["driver_internal_info"]["agent_url"].is_null()
            }
        },
    )
    .await;
    let c = agent(&s, mac).await;
    let n = wait_for(&s, &uuid, "active", Duration::from_secs(30)).await;
    assert_eq!(n["last_error"], Value::Null, "{n}");
    assert!(names(&c).contains(&"deploy.execute_deploy_step:write_image".to_string()));
    c.stop().await;
    s.stop().await;
    let _ = std::fs::remove_dir_all(&logs);
}

/// A step the agent fails: `deploy failed` with the agent's message, the ramdisk's logs
/// collected. A busy agent gets the step again; a hardware change makes the conductor
/// ask the steps again and send the step again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_failures() {
    let (s, logs) = server_without_cleaning().await;
    let mac = "52:54:00:d1:00:02";
    let uuid = available_node(&s, "direct-2", mac).await;
    set_image(&s, &uuid).await;

    // The image's checksum does not match: the agent fails write_image.
    assert_eq!(s.provision_to(V, &uuid, "active").await.status, 202);
    let a = agent(&s, mac).await;
    a.faults().fail_step(
        "deploy.write_image",
        "Image failed to verify against checksum: expected 5891b5b5, got 00000000",
    );
    let n = wait_for(&s, &uuid, "deploy failed", Duration::from_secs(30)).await;
    let e = n["last_error"].as_str().unwrap();
    assert!(
        e.starts_with(&format!(
            "Deploy step deploy.write_image failed on node {uuid}: "
        )) && e.contains("Image failed to verify against checksum"),
        "{e}"
    );
    let collected: Vec<_> = std::fs::read_dir(&logs)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(
        collected.len() == 1
            && collected[0].starts_with(&uuid)
            && collected[0].ends_with("_deploy.tar.gz"),
        "{collected:?}"
    );
    assert!(names(&a).contains(&"log.collect_system_logs".to_string()));
    a.stop().await;

    // Busy, then a hardware change: both end well.
    assert_eq!(s.provision_to(V, &uuid, "active").await.status, 202);
    let a = agent(&s, mac).await;
    a.faults().busy(true);
    // Heartbeats come, but the busy agent cannot tell its steps: the node waits.
    common::until(
        "heartbeats of the busy agent",
        Duration::from_secs(20),
        || {
            let a = a.clone();
            async move { a.heartbeats() >= 3 }
        },
    )
    .await;
    let n = s.get(&format!("/v1/nodes/{uuid}"), V).await.json();
    assert_eq!(n["provision_state"], "wait call-back", "{n}");
    assert_eq!(n["deploy_step"]["step"], "deploy", "{n}");
    assert!(a.commands().is_empty(), "{:?}", a.commands());
    a.faults().mismatch_once(true);
    a.faults().busy(false);
    let n = wait_for(&s, &uuid, "active", Duration::from_secs(30)).await;
    assert_eq!(n["last_error"], Value::Null);
    let writes = names(&a)
        .iter()
        .filter(|n| n.ends_with(":write_image"))
        .count();
    let asked = names(&a)
        .iter()
        .filter(|n| *n == "deploy.get_deploy_steps")
        .count();
    // The image written twice (the mismatch sends it again); the steps asked at boot
    // and again after the mismatch (by the heartbeat and the command's follower both,
    // as they race; one of them goes on).
    assert!(writes == 2 && asked >= 2, "{:?}", names(&a));
    a.stop().await;
    s.stop().await;
    let _ = std::fs::remove_dir_all(&logs);
}

/// An agent busy when `write_image` is sent (409): the node waits, and the step is
/// sent again at the next heartbeat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_refused_by_a_busy_agent_is_sent_again() {
    let (s, logs) = server_without_cleaning().await;
    let mac = "52:54:00:d1:00:09";
    let uuid = available_node(&s, "direct-9", mac).await;
    set_image(&s, &uuid).await;
    // The agent is up (it looks up until its node waits for it) and will refuse the
    // first step sent.
    let a = agent(&s, mac).await;
    a.faults().busy_once("deploy.execute_deploy_step");
    assert_eq!(s.provision_to(V, &uuid, "active").await.status, 202);
    let n = wait_for(&s, &uuid, "active", Duration::from_secs(30)).await;
    assert_eq!(n["last_error"], Value::Null, "{n}");
    assert!(!a.faults().busy_once_pending("deploy.execute_deploy_step"));
    let writes = names(&a)
        .iter()
        .filter(|n| n.ends_with(":write_image"))
        .count();
    assert_eq!(writes, 1, "{:?}", names(&a));
    a.stop().await;
    s.stop().await;
    let _ = std::fs::remove_dir_all(&logs);
}

/// An agent that never calls back: the deploy fails at the callback timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_never_calls_back_times_out() {
    let logs = tempdir();
    let s = common::start_with(Backend::Sqlite, |c| {
        settings(c, &logs);
        c.conductor.automated_clean = false;
        c.conductor.deploy_callback_timeout = 3;
        c.conductor.check_provision_state_interval = 1;
    })
    .await;
    let uuid = available_node(&s, "direct-3", "52:54:00:d1:00:03").await;
    set_image(&s, &uuid).await;
    assert_eq!(s.provision_to(V, &uuid, "active").await.status, 202);
    let n = wait_for(&s, &uuid, "deploy failed", Duration::from_secs(30)).await;
    assert_eq!(
        n["last_error"],
        format!("Timeout reached while waiting for callback for node {uuid}")
    );
    s.stop().await;
}

/// What a deploy through the agent needs is checked before anything moves (400).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deploy_without_an_image_is_refused() {
    let (s, logs) = server_without_cleaning().await;
    let uuid = available_node(&s, "direct-4", "52:54:00:d1:00:04").await;
    let r = s.provision_to(V, &uuid, "active").await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.fault().contains("image_source"), "{}", r.fault());
    let n = s.get(&format!("/v1/nodes/{uuid}"), V).await.json();
    assert_eq!(n["provision_state"], "available");
    s.stop().await;
    let _ = std::fs::remove_dir_all(&logs);
}

fn tempdir() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("ironic-direct-{}", uuid::Uuid::new_v4().simple()))
}

/// A conductor killed (`kill -9`) while its node waits for the agent to write the
/// image: the survivor takes the node over, the agent's next heartbeat goes to it, and
/// the deploy ends `active` there (real `ironic-api` and `ironic-conductor` processes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deploy_goes_on_after_its_conductor_is_killed() {
    use common::procs::Cluster;
    let t = ironic_db::testing::TestDb::postgres().await.unwrap();
    let cluster = Cluster::new(
        &t.url,
        &[
            ("IRONIC_CONDUCTOR__HEARTBEAT_INTERVAL", "1"),
            ("IRONIC_CONDUCTOR__HEARTBEAT_TIMEOUT", "6"),
            ("IRONIC_CONDUCTOR__SHUTDOWN_SETTLE_TIME", "1"),
            ("IRONIC_CONDUCTOR__AUTOMATED_CLEAN", "false"),
            ("IRONIC_AMQP__CALL_TIMEOUT", "2"),
            ("IRONIC_AGENT__REQUIRE_TLS", "false"),
            ("IRONIC_AGENT__POST_DEPLOY_GET_POWER_STATE_RETRIES", "1"),
        ],
    );
    let mut conductors = vec![cluster.conductor("cond-a"), cluster.conductor("cond-b")];
    for c in &conductors {
        assert!(
            c.wait_log("ironic-conductor serving", Duration::from_secs(30)),
            "{}",
            c.log_text()
        );
    }
    let (_api_proc, port) = cluster.api();
    let s = Server::client(format!("127.0.0.1:{port}").parse().unwrap());
    common::until(
        "both conductors in the ring",
        Duration::from_secs(20),
        || async {
            let r = s.get("/v1/drivers", V).await;
            r.json()["drivers"].as_array().is_some_and(|ds| {
                ds.iter().any(|d| {
                    d["name"] == "fake-hardware" && d["hosts"].as_array().map_or(0, Vec::len) == 2
                })
            })
        },
    )
    .await;

    let mac = "52:54:00:d1:00:05";
    let uuid = available_node(&s, "direct-5", mac).await;
    set_image(&s, &uuid).await;
    assert_eq!(s.provision_to(V, &uuid, "active").await.status, 202);
    // The agent takes its time writing: the conductor is killed meanwhile.
    let a = agent_taking(&s, mac, Duration::from_secs(8)).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let owner = loop {
        let n = s.get(&format!("/v1/nodes/{uuid}"), V).await.json();
        if n["provision_state"] == "wait call-back" && n["deploy_step"]["step"] == "write_image" {
            break n["conductor"].as_str().unwrap().to_string();
        }
        assert!(std::time::Instant::now() < deadline, "{n}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let victim = if owner == "cond-a" { 0 } else { 1 };
    conductors[victim].kill9();
    // The command ends; the agent heartbeats; the survivor goes on.
    let n = wait_for(&s, &uuid, "active", Duration::from_secs(60)).await;
    assert_eq!(n["last_error"], Value::Null);
    assert_ne!(n["conductor"], owner.as_str(), "{n}");
    assert_eq!(
        names(&a)
            .iter()
            .filter(|c| c.ends_with(":write_image"))
            .count(),
        1,
        "written once: {:?}",
        names(&a)
    );
    a.stop().await;
    for c in &mut conductors {
        c.term();
    }
}

/// The agent's own steps join the plans: a deploy template (seed 002) names the
/// agent's `erase_devices_metadata` (priority 0 as reported) to run before the image is
/// written; a manual cleaning names an agent step, checked once the agent reported
/// its steps; a step nothing offers fails the cleaning then, naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn templates_and_manual_cleaning_run_agent_steps() {
    let (s, logs) = server_without_cleaning().await;
    let mac = "52:54:00:d1:00:06";
    let uuid = direct_node(&s, "direct-6", mac).await;

    // Manual cleaning with an agent step and an unknown one: refused once the agent
    // tells what it offers.
    let r = s
        .provision(
            V,
            &uuid,
            json!({"target": "clean", "clean_steps": [
                {"interface": "deploy", "step": "erase_devices_metadata"},
                {"interface": "deploy", "step": "no_such_step"}]}),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    wait_for(&s, &uuid, "clean wait", Duration::from_secs(20)).await;
    let a = agent(&s, mac).await;
    let n = wait_for(&s, &uuid, "clean failed", Duration::from_secs(30)).await;
    let e = n["last_error"].as_str().unwrap();
    assert!(e.contains("no_such_step"), "{e}");
    assert!(!e.contains("erase_devices_metadata"), "{e}");
    assert_eq!(names(&a), ["clean.get_clean_steps"]);
    a.stop().await;
    // Out of `clean failed` (maintenance with the fault): manage again, then a good one.
    let r = s.delete(&format!("/v1/nodes/{uuid}/maintenance"), V).await;
    assert!(r.status == 202 || r.status == 204, "{}", r.body);
    assert_eq!(s.provision_to(V, &uuid, "manage").await.status, 202);
    wait_for(&s, &uuid, "manageable", Duration::from_secs(20)).await;
    let r = s
        .provision(
            V,
            &uuid,
            json!({"target": "clean", "clean_steps": [
                {"interface": "deploy", "step": "erase_devices_metadata"}]}),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    wait_for(&s, &uuid, "clean wait", Duration::from_secs(20)).await;
    let a = agent(&s, mac).await;
    wait_for(&s, &uuid, "manageable", Duration::from_secs(30)).await;
    assert_eq!(
        names(&a),
        [
            "clean.get_clean_steps",
            "clean.execute_clean_step:erase_devices_metadata"
        ]
    );
    a.stop().await;

    // A deploy template with the agent's step at priority 90: between deploy.deploy
    // (100) and write_image (80).
    let r = s
        .post(
            "/v1/deploy_templates",
            V,
            &json!({"name": "CUSTOM_WIPE", "steps": [
                {"interface": "deploy", "step": "erase_devices_metadata", "args": {}, "priority": 90}]}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let r = s
        .put(
            &format!("/v1/nodes/{uuid}/traits"),
            V,
            Some(&json!({"traits": ["CUSTOM_WIPE"]})),
        )
        .await;
    assert_eq!(r.status, 204, "{}", r.body);
    assert_eq!(s.provision_to(V, &uuid, "provide").await.status, 202);
    wait_for(&s, &uuid, "available", Duration::from_secs(20)).await;
    set_image(&s, &uuid).await;
    let r = s
        .patch(
            &format!("/v1/nodes/{uuid}"),
            V,
            &json!([{"op": "add", "path": "/instance_info/traits", "value": ["CUSTOM_WIPE"]}]),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(s.provision_to(V, &uuid, "active").await.status, 202);
    let a = agent(&s, mac).await;
    let n = wait_for(&s, &uuid, "active", Duration::from_secs(30)).await;
    let plan: Vec<String> = n["driver_internal_info"]["deploy_steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        plan[..3],
        ["deploy", "erase_devices_metadata", "write_image"],
        "{plan:?}"
    );
    assert_eq!(
        names(&a)[..3],
        [
            "deploy.get_deploy_steps",
            "deploy.execute_deploy_step:erase_devices_metadata",
            "deploy.execute_deploy_step:write_image"
        ]
    );
    a.stop().await;
    s.stop().await;
    let _ = std::fs::remove_dir_all(&logs);
}

/// A `file://` image: the conductor checks it, converts a qcow2 one to raw, publishes
/// it on its image server for the agent with the checksum of what it serves, and
/// deletes it once the instance boots. A wrong checksum fails the deploy before the
/// agent is sent anything to write, without showing the file's digest. Only files
/// inside `[conductor] file_url_allowed_paths` are taken: the system's, the service's
/// own (its database, its logs), a folder, a symlink out are refused when set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_image_is_served_by_the_conductor() {
    use sha2::Digest;
    let logs = tempdir();
    let images = tempdir();
    let mut http_root = std::path::PathBuf::new();
    let mut database = String::new();
    let s = common::start_with(Backend::Sqlite, |c| {
        settings(c, &logs);
        c.conductor.automated_clean = false;
        c.conductor.file_url_allowed_paths = vec![images.clone()];
        http_root = c.deploy.http_root.clone();
        database = c.sqlite_file().unwrap().display().to_string();
    })
    .await;
    let mac = "52:54:00:d1:00:07";
    let uuid = available_node(&s, "direct-7", mac).await;
    let (disk, qcow2) = qcow2_disk(&images, "local", b"a tiny disk");
    // What a node may not name, refused when set (400) and never read.
    std::fs::create_dir_all(images.join("folder")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", images.join("passwd")).unwrap();
    std::os::unix::fs::symlink(&database, images.join("db")).unwrap();
    std::fs::create_dir_all(&logs).unwrap();
    std::fs::write(logs.join("some.log"), b"x").unwrap();
    for (bad, why) in [
        ("/etc/passwd".to_string(), "file_url_allowed_paths"),
        ("/dev/zero".to_string(), "file_url_allowed_paths"),
        (database.clone(), "file_url_allowed_paths"),
        (
            logs.join("some.log").display().to_string(),
            "file_url_allowed_paths",
        ),
        (
            images.join("passwd").display().to_string(),
            "file_url_allowed_paths",
        ),
        (
            images.join("db").display().to_string(),
            "file_url_allowed_paths",
        ),
        (
            images.join("folder").display().to_string(),
            "not a regular file",
        ),
        (format!("{}/../x", images.display()), "without . or .."),
    ] {
        let r = s
            .patch(
                &format!("/v1/nodes/{uuid}"),
                V,
                &json!([{"op": "add", "path": "/instance_info/image_source", "value": format!("file://{bad}")}]),
            )
            .await;
        assert_eq!(r.status, 400, "{bad}: {}", r.body);
        assert!(r.fault().contains(why), "{bad}: {}", r.fault());
    }
    let n = s.get(&format!("/v1/nodes/{uuid}"), V).await.json();
    assert!(n["instance_info"].get("image_source").is_none(), "{n}");
    let sha = |b: &[u8]| format!("{:x}", sha2::Sha256::digest(b));
    let image = |hash: &str| {
        json!([
            {"op": "add", "path": "/instance_info/image_source", "value": format!("file://{}", qcow2.display())},
            {"op": "add", "path": "/instance_info/image_os_hash_algo", "value": "sha256"},
            {"op": "add", "path": "/instance_info/image_os_hash_value", "value": hash},
            {"op": "add", "path": "/instance_info/image_disk_format", "value": "qcow2"},
        ])
    };
    // Long enough to look at the published image while the agent "writes" it.
    let writing = Duration::from_secs(3);

    // A wrong checksum: the conductor finds out; the agent writes nothing.
    let wrong = "0".repeat(64);
    let r = s
        .patch(&format!("/v1/nodes/{uuid}"), V, &image(&wrong))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(s.provision_to(V, &uuid, "active").await.status, 202);
    let a = agent_taking(&s, mac, writing).await;
    let n = wait_for(&s, &uuid, "deploy failed", Duration::from_secs(30)).await;
    let e = n["last_error"].as_str().unwrap();
    assert!(
        e.starts_with(&format!(
            "Deploy step deploy.write_image failed on node {uuid}: "
        )) && e.contains("failed to verify against its sha256 checksum")
            && e.contains(&wrong)
            && !e.contains(&sha(&std::fs::read(&qcow2).unwrap())),
        "the file's digest is not shown: {e}"
    );
    assert!(
        !names(&a).iter().any(|n| n.contains("write_image")),
        "{:?}",
        names(&a)
    );
    a.stop().await;

    // The right one: the agent gets the raw image and its checksum.
    let r = s
        .patch(
            &format!("/v1/nodes/{uuid}"),
            V,
            &image(&sha(&std::fs::read(&qcow2).unwrap())),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(s.provision_to(V, &uuid, "active").await.status, 202);
    let a = agent_taking(&s, mac, writing).await;
    common::until("write_image sent", Duration::from_secs(20), || {
        let a = a.clone();
        async move {
            a.commands()
                .iter()
                .any(|c| c["params"]["step"]["step"] == "write_image")
        }
    })
    .await;
    let info = &write_image_sent(&a)["params"]["step"]["args"]["image_info"];
    assert_eq!(info["disk_format"], "raw", "{info}");
    assert_eq!(info["os_hash_algo"], "sha256", "{info}");
    assert_eq!(info["os_hash_value"], sha(&disk), "{info}");
    let url = info["urls"][0].as_str().unwrap().to_string();
    assert!(url.contains("/agent_images/"), "{url}");
    // The agent gets it from the image server.
    let rel = url.split_once("/agent_images/").unwrap().1;
    let published = http_root.join("agent_images").join(rel);
    assert!(std::fs::read(&published).unwrap() == disk);
    assert!(get_url(&url).await == disk);
    wait_for(&s, &uuid, "active", Duration::from_secs(30)).await;
    assert!(!published.exists(), "deleted once the instance boots");
    a.stop().await;
    s.stop().await;
    let _ = std::fs::remove_dir_all(&logs);
    let _ = std::fs::remove_dir_all(&images);
}

/// A 1 MiB disk starting with `label`, written in `dir` as `<name>.raw` and converted to
/// `<name>.qcow2`: its bytes and the qcow2's path.
fn qcow2_disk(dir: &std::path::Path, name: &str, label: &[u8]) -> (Vec<u8>, std::path::PathBuf) {
    std::fs::create_dir_all(dir).unwrap();
    let raw = dir.join(format!("{name}.raw"));
    let mut disk = vec![0u8; 1 << 20];
    disk[..label.len()].copy_from_slice(label);
    std::fs::write(&raw, &disk).unwrap();
    let qcow2 = dir.join(format!("{name}.qcow2"));
    let out = std::process::Command::new("qemu-img")
        .args(["convert", "-f", "raw", "-O", "qcow2"])
        .args([&raw, &qcow2])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    (disk, qcow2)
}

/// A GET of `url` (plain HTTP), its body.
async fn get_url(url: &str) -> Vec<u8> {
    let rest = url.strip_prefix("http://").unwrap();
    let (addr, path) = rest.split_once('/').unwrap();
    let c = common::Server::client(addr.parse().unwrap());
    let r = c.raw("GET", &format!("/{path}"), &[], None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body.into_bytes()
}

/// A plain HTTP server of the files in `dir` (404 for others), counting the GETs of
/// each path. It lives as long as the test's runtime.
async fn serve_files(
    dir: std::path::PathBuf,
) -> (
    String,
    std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, usize>>>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", l.local_addr().unwrap());
    let gets = std::sync::Arc::new(std::sync::Mutex::new(std::collections::HashMap::new()));
    let counted = gets.clone();
    tokio::spawn(async move {
        while let Ok((mut c, _)) = l.accept().await {
            let (dir, gets) = (dir.clone(), counted.clone());
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match c.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&head).to_string();
                let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
                *gets.lock().unwrap().entry(path.clone()).or_insert(0) += 1;
                let file = dir.join(path.trim_start_matches('/'));
                let (status, body) = match std::fs::read(&file) {
                    Ok(b) if !path.contains("..") => ("200 OK", b),
                    _ => ("404 Not Found", b"no such file".to_vec()),
                };
                let head = format!(
                    "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = c.write_all(head.as_bytes()).await;
                let _ = c.write_all(&body).await;
            });
        }
    });
    (base, gets)
}

/// An `http` image the conductor downloads (`image_download_source = local`, set on
/// the node) with its checksum in a `sha256sum`-style file at a URL: a file that names
/// no checksum for the image fails the deploy; two nodes deploying an image it names at
/// once get the converted raw image, downloaded and converted once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_image_with_a_checksum_file_is_served_by_the_conductor() {
    use sha2::Digest;
    let (s, logs) = server_without_cleaning().await;
    let macs = ["52:54:00:d1:00:08", "52:54:00:d1:00:09"];
    let a_uuid = available_node(&s, "direct-8", macs[0]).await;
    let b_uuid = available_node(&s, "direct-9", macs[1]).await;
    let files = logs.join("served");
    let (disk, qcow2) = qcow2_disk(&files, "disk", b"a disk over http");
    let sha = |b: &[u8]| format!("{:x}", sha2::Sha256::digest(b));
    let qsum = sha(&std::fs::read(&qcow2).unwrap());
    std::fs::write(
        files.join("SHA256SUMS"),
        format!("{}  other.qcow2\n{qsum} *disk.qcow2\n", "1".repeat(64)),
    )
    .unwrap();
    std::fs::copy(&qcow2, files.join("copy.qcow2")).unwrap();
    let (base, gets) = serve_files(files.clone()).await;
    let image = |uuid: &str, file: &str| {
        let (s, uuid, file, base) = (&s, uuid.to_string(), file.to_string(), base.clone());
        async move {
            let r = s
                .patch(
                    &format!("/v1/nodes/{uuid}"),
                    V,
                    &json!([
                        {"op": "add", "path": "/instance_info/image_source", "value": format!("{base}/{file}")},
                        {"op": "add", "path": "/instance_info/image_checksum", "value": format!("{base}/SHA256SUMS")},
                        {"op": "add", "path": "/instance_info/image_disk_format", "value": "qcow2"},
                        {"op": "add", "path": "/instance_info/image_download_source", "value": "local"},
                    ]),
                )
                .await;
            assert_eq!(r.status, 200, "{}", r.body);
        }
    };

    // A checksum file without the image's name: the deploy fails, saying so.
    image(&a_uuid, "copy.qcow2").await;
    assert_eq!(s.provision_to(V, &a_uuid, "active").await.status, 202);
    let a = agent(&s, macs[0]).await;
    let n = wait_for(&s, &a_uuid, "deploy failed", Duration::from_secs(30)).await;
    let e = n["last_error"].as_str().unwrap();
    assert!(
        e.contains(&format!("cannot read the checksum file {base}/SHA256SUMS"))
            && e.contains("names no checksum for \"copy.qcow2\""),
        "{e}"
    );
    a.stop().await;

    // The right file: both nodes at once.
    image(&a_uuid, "disk.qcow2").await;
    image(&b_uuid, "disk.qcow2").await;
    for uuid in [&a_uuid, &b_uuid] {
        assert_eq!(s.provision_to(V, uuid, "active").await.status, 202);
    }
    let agents = [agent(&s, macs[0]).await, agent(&s, macs[1]).await];
    for uuid in [&a_uuid, &b_uuid] {
        wait_for(&s, uuid, "active", Duration::from_secs(30)).await;
    }
    for a in &agents {
        let info = &write_image_sent(a)["params"]["step"]["args"]["image_info"];
        assert_eq!(info["disk_format"], "raw", "{info}");
        assert_eq!(info["os_hash_value"], sha(&disk), "{info}");
        assert!(
            info["urls"][0].as_str().unwrap().contains("/agent_images/"),
            "{info}"
        );
    }
    assert_eq!(
        gets.lock().unwrap().get("/disk.qcow2"),
        Some(&1),
        "downloaded once: {gets:?}"
    );
    for a in agents {
        a.stop().await;
    }
    s.stop().await;
    let _ = std::fs::remove_dir_all(&logs);
}

/// Kernel parameters that would add boot loader commands (a line break, iPXE's `||`
/// and `&&`, GRUB's `;`) are refused when set, whatever the node boots by: `ipxe`,
/// `pxe` or `redfish-virtual-media`, in `instance_info` as in `driver_info`; ordinary
/// ones (and `%default%`) are taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn boot_loader_syntax_is_refused_for_every_boot_interface() {
    let (s, logs) = server_without_cleaning().await;
    for (driver, boot) in [
        ("ipmi", "ipxe"),
        ("ipmi", "pxe"),
        ("redfish", "redfish-virtual-media"),
    ] {
        let n = s
            .node(json!({"driver": driver, "boot_interface": boot,
                         "driver_info": {"ipmi_address": "192.0.2.9",
                                         "redfish_address": "http://192.0.2.9"}}))
            .await;
        let uuid = n["uuid"].as_str().unwrap();
        for bad in [
            "nofb\nchain http://192.0.2.66/x.ipxe\n#",
            "nofb || chain http://192.0.2.66/x.ipxe",
            "nofb && chain http://192.0.2.66/x.ipxe",
            "nofb ; linux /evil",
        ] {
            for field in ["instance_info", "driver_info"] {
                let r = s
                    .patch(
                        &format!("/v1/nodes/{uuid}"),
                        V,
                        &json!([{"op": "add", "path": format!("/{field}/kernel_append_params"), "value": bad}]),
                    )
                    .await;
                assert_eq!(r.status, 400, "{boot} {field} {bad:?}: {}", r.body);
                assert!(r.fault().contains("kernel parameters"), "{}", r.fault());
            }
        }
        let r = s
            .patch(
                &format!("/v1/nodes/{uuid}"),
                V,
                &json!([{"op": "add", "path": "/instance_info/kernel_append_params",
                         "value": "nofb console=ttyS0,115200n8 %default%"}]),
            )
            .await;
        assert_eq!(r.status, 200, "{boot}: {}", r.body);
    }
    s.stop().await;
    let _ = std::fs::remove_dir_all(&logs);
}
