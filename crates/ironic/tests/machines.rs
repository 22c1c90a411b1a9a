#![allow(clippy::unwrap_used)]
//! Real machines: a QEMU machine of the test bed (`tests/vm/bed.sh`) behind sushy-tools'
//! Redfish emulator, booted by our conductor into the ironic-python-agent ramdisk built
//! by `tests/vm/build-ramdisk.sh`, through a boot ISO the conductor builds, serves and
//! inserts as virtual media. The agent inspects the machine and posts what it found; with
//! fast-track it then looks its node up and heartbeats over auto-TLS. Then the `direct`
//! deploy: automated cleaning with the agent, the test image of
//! `tests/vm/build-image.sh` written with a config drive (with the `openstack
//! baremetal` CLI on the all-in-one, with metalsmith on the split deployment), the
//! machine booting from its disk, and undeploy.
//!
//! Needs root, and `IRONIC_TEST_BED=1` (`scripts/test.sh` sets it; it also builds the
//! ramdisk once and caches it). Takes a few minutes under software emulation.

mod common;

use common::Backend;
use common::procs::free_port;
use ironic_drivers::agent_client;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const V: &str = "1.115";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs one of `tests/vm/`'s scripts: its standard output; a failure panics with its
/// standard error.
fn script(name: &str, args: &[&str], env: &[(&str, String)]) -> String {
    let out = Command::new("bash")
        .arg(root().join("tests/vm").join(name))
        .args(args)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{name} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The bed, stopped whatever the test's end.
struct Bed;

impl Drop for Bed {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(root().join("tests/vm/bed.sh"))
            .arg("down")
            .status();
    }
}

/// The test is `#[ignore]`d: a plain run reports it skipped. `scripts/test.sh` runs it
/// (`--run-ignored only`) as root with the bed prepared and `IRONIC_TEST_BED=1`; run
/// without them, it fails rather than pass without a machine.
fn bed_ready() {
    assert!(
        std::env::var("IRONIC_TEST_BED").is_ok_and(|v| v == "1"),
        "IRONIC_TEST_BED is not 1: the real-machine test needs root and the bed that scripts/test.sh prepares"
    );
}

/// Enroll, manage, inspect in band with the real agent; the stored inventory is the
/// machine's; with fast-track the agent stays up and heartbeats over auto-TLS; then
/// clean, deploy an image, see it boot, undeploy. The all-in-one (the machine boots by
/// BIOS), then the split deployment (API and conductor over RabbitMQ; the machine boots
/// by UEFI), each on a fresh machine; one test, as the bed is one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a real machine: needs root and the bed (scripts/test.sh runs it as root)"]
async fn the_real_agent_inspects_cleans_and_deploys_a_machine() {
    bed_ready();
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(
            "info,ironic_api=warn,sqlx=warn",
        ))
        .with_test_writer()
        .try_init();
    let ramdisk: Value = serde_json::from_str(&script("build-ramdisk.sh", &[], &[])).unwrap();
    let image: Value = serde_json::from_str(&script("build-image.sh", &[], &[])).unwrap();
    let _ = script("bed.sh", &["down"], &[]);
    let host_libvirt = etc_libvirt();
    let bed = Bed;
    for backend in [Backend::Sqlite, Backend::Split] {
        inspect_on_the_bed(backend, &ramdisk, &image).await;
        let _ = script("bed.sh", &["down"], &[]);
        // The bed is safe on an operator's host: the host's libvirt configuration as
        // it was, and nothing of the bed's left running.
        assert_eq!(etc_libvirt(), host_libvirt, "/etc/libvirt changed");
        let left = std::process::Command::new("pgrep")
            .args([
                "-a",
                "-f",
                "bed-venv/bin|guest=ironic-bed-|bed/run/(libvirtd|virtlogd)[.]pid",
            ])
            .output()
            .unwrap();
        assert!(
            left.stdout.is_empty(),
            "left running: {}",
            String::from_utf8_lossy(&left.stdout)
        );
    }
    drop(bed);
}

/// Every file under the host's /etc/libvirt with its digest, sorted.
fn etc_libvirt() -> String {
    let out = std::process::Command::new("sh")
        .args([
            "-c",
            "find /etc/libvirt -type f -exec sha256sum {} + 2>/dev/null | sort; find /etc/libvirt | sort",
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

async fn inspect_on_the_bed(backend: Backend, ramdisk: &Value, image: &Value) {
    eprintln!("== {backend:?}");
    let (api_port, http_port) = (free_port(), free_port());
    // The machine's network boot fetches `boot.ipxe` from the service's image server.
    let machine: Value = serde_json::from_str(
        script(
            "bed.sh",
            &["up", "1"],
            &[("BED_HTTP_PORT", http_port.to_string())],
        )
        .trim(),
    )
    .unwrap();
    if let Some(p) = machine["serial_log"].as_str() {
        *SERIAL_LOG.lock().unwrap_or_else(|e| e.into_inner()) = Some(PathBuf::from(p));
    }
    let service = script(
        "bed.sh",
        &["service"],
        &[
            ("BED_API_PORT", api_port.to_string()),
            ("BED_HTTP_PORT", http_port.to_string()),
        ],
    );
    let vars: Vec<(String, String)> = service
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let bed_cfg = ironic_config::Config::load(None, vars).unwrap();
    let mut http_root = PathBuf::new();
    let s = common::start_with(backend, |cfg| {
        cfg.api.listen = bed_cfg.api.listen;
        cfg.api.ramdisk_heartbeat_timeout = bed_cfg.api.ramdisk_heartbeat_timeout;
        let (root, cache) = (cfg.deploy.http_root.clone(), cfg.deploy.image_cache.clone());
        cfg.deploy = bed_cfg.deploy.clone();
        (cfg.deploy.http_root, cfg.deploy.image_cache) = (root, cache);
        cfg.deploy.fast_track = true;
        // The bed's allowed folder: the ramdisk's `file://` references are taken.
        cfg.conductor.file_url_allowed_paths = bed_cfg.conductor.file_url_allowed_paths.clone();
        assert!(
            !cfg.conductor.file_url_allowed_paths.is_empty(),
            "bed.sh service names the ramdisks' folder"
        );
        cfg.conductor.inspect_wait_timeout = 900;
        cfg.conductor.deploy_callback_timeout = 900;
        cfg.conductor.clean_callback_timeout = 900;
        cfg.agent.deploy_logs_local_path = cfg.deploy.http_root.join("../deploy-logs");
        // `IRONIC_TEST_BED_PACING=heartbeats` measures upstream's pace for comparison:
        // a flow moves on at heartbeats only, and the agent's power-off is polled
        // 6 times 5 s apart.
        if std::env::var("IRONIC_TEST_BED_PACING").is_ok_and(|p| p == "heartbeats") {
            cfg.agent.follow_commands = false;
            cfg.agent.post_deploy_get_power_state_retries = 6;
            cfg.agent.post_deploy_get_power_state_retry_interval = 5;
        }
        cfg.ipmi.min_command_interval = 1.0;
        cfg.log.filter = "info".into();
        http_root = cfg.deploy.http_root.clone();
    })
    .await;

    let mut driver_info = machine["driver_info"].clone();
    driver_info["deploy_kernel"] = json!(format!("file://{}", ramdisk["kernel"].as_str().unwrap()));
    driver_info["deploy_ramdisk"] =
        json!(format!("file://{}", ramdisk["ramdisk"].as_str().unwrap()));
    let node = s
        .node(json!({
            "name": "bed-1",
            "driver": "redfish",
            "driver_info": driver_info,
            "boot_interface": "redfish-virtual-media",
            "inspect_interface": "agent",
        }))
        .await;
    let uuid = node["uuid"].as_str().unwrap().to_string();
    let mac = machine["mac"].as_str().unwrap();
    let r = s
        .post("/v1/ports", V, &json!({"node_uuid": uuid, "address": mac}))
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(s.provision_to(V, &uuid, "manage").await.status, 202);
    wait_for(&s, &uuid, "manageable", Duration::from_secs(120)).await;

    // The split deployment's machine boots by UEFI (OVMF): the ISO's GRUB side. (The
    // bed's machines start as BIOS ones; the emulator cannot switch one back to BIOS:
    // its loader map has none for it.)
    let mode = if backend == Backend::Split {
        "uefi"
    } else {
        "bios"
    };
    if mode == "uefi" {
        let r = s
            .put(
                &format!("/v1/nodes/{uuid}/states/boot_mode"),
                V,
                Some(&json!({"target": mode})),
            )
            .await;
        assert_eq!(r.status, 202, "{}", r.body);
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while s.get(&format!("/v1/nodes/{uuid}"), V).await.json()["boot_mode"] != mode {
            assert!(std::time::Instant::now() < deadline, "boot mode {mode}");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    let started = std::time::Instant::now();
    assert_eq!(s.provision_to(V, &uuid, "inspect").await.status, 202);
    let n = wait_for(&s, &uuid, "manageable", Duration::from_secs(900)).await;
    eprintln!(
        "{backend:?} ({mode}): inspect -> manageable in {:?}",
        started.elapsed()
    );
    assert_eq!(n["last_error"], Value::Null, "{n}");
    assert!(n["inspection_finished_at"].is_string(), "{n}");

    // What the agent found is the machine.
    let inv = s.get(&format!("/v1/nodes/{uuid}/inventory"), V).await;
    assert_eq!(inv.status, 200, "{}", inv.body);
    let inv = inv.json()["inventory"].clone();
    assert_eq!(inv["cpu"]["count"], 1, "{inv}");
    assert_eq!(inv["cpu"]["architecture"], "x86_64", "{inv}");
    assert_eq!(inv["boot"]["current_boot_mode"], mode, "{inv}");
    let mb = inv["memory"]["physical_mb"].as_u64().unwrap();
    assert!((2400..=2600).contains(&mb), "memory {mb} MiB: {inv}");
    let disks = inv["disks"].as_array().unwrap();
    assert!(
        disks.iter().any(|d| d["size"] == json!(5u64 << 30)),
        "a 5 GiB disk: {inv}"
    );
    assert!(
        inv["interfaces"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["mac_address"] == mac),
        "the NIC {mac}: {inv}"
    );
    let n = s.get(&format!("/v1/nodes/{uuid}"), V).await.json();
    assert_eq!(n["properties"]["cpu_arch"], "x86_64", "{n}");

    // Fast-track: the ramdisk stays up, looks its node up and heartbeats over auto-TLS.
    let agent_port = machine["agent_port"].as_u64().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(300);
    let dii = loop {
        let dii =
            s.get(&format!("/v1/nodes/{uuid}"), V).await.json()["driver_internal_info"].clone();
        if dii["agent_url"].is_string() {
            break dii;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no heartbeat recorded within 300 s: {dii}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    assert_eq!(
        dii["agent_url"],
        json!(format!("https://127.0.0.1:{agent_port}")),
        "{dii}"
    );
    assert_eq!(dii["agent_version"], "13.0.0", "{dii}");
    assert!(dii["agent_last_heartbeat"].is_string(), "{dii}");
    assert!(
        dii["agent_verify_ca"]
            .as_str()
            .is_some_and(|c| c.contains("BEGIN CERTIFICATE")),
        "{dii}"
    );
    // The virtual media was ejected and its ISO deleted when inspection ended.
    assert_eq!(dii["vmedia_boot_iso"], Value::Null, "{dii}");
    let isos: Vec<_> = std::fs::read_dir(http_root.join("redfish"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(isos.is_empty(), "{isos:?}");

    // Our agent client reaches the real agent over its auto-TLS, the certificate the
    // heartbeat brought pinned, with the token the ISO carried.
    let stored = s
        .testdb
        .as_ref()
        .unwrap()
        .db
        .node_by_uuid(&uuid)
        .await
        .unwrap()
        .unwrap();
    let token = stored.driver_internal_info["agent_secret_token"]
        .as_str()
        .unwrap()
        .to_string();
    let client = agent_client::AgentClient::new(agent_client::Settings::default());
    let url = format!("https://127.0.0.1:{agent_port}");
    let pem = dii["agent_verify_ca"].as_str().unwrap();
    let ep = agent_client::Endpoint {
        url: &url,
        token: &token,
        pinned_pem: Some(pem),
    };
    let status = client.status(&ep).await.unwrap();
    assert_eq!(status.version, "13.0.0");
    client.commands(&ep).await.unwrap();
    let wrong = agent_client::Endpoint {
        token: "not-the-token",
        ..ep
    };
    let e = client.commands(&wrong).await.unwrap_err();
    assert!(
        matches!(e, agent_client::AgentError::Http { status: 401, .. }),
        "{e}"
    );

    // A heartbeat with a wrong token is refused.
    let r = s
        .post(
            &format!("/v1/heartbeat/{uuid}"),
            "1.68",
            &json!({"callback_url": format!("https://127.0.0.1:{agent_port}"),
                     "agent_token": "not-the-token", "agent_version": "13.0.0"}),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.body);

    // The serial console shows the agent starting and finding its node.
    let log = std::fs::read_to_string(machine["serial_log"].as_str().unwrap()).unwrap();
    assert!(log.contains("ironic-python-agent"), "{log}");
    assert!(log.to_lowercase().contains("lookup"), "{log}");

    // The `ipmi` type drives the same machine through VirtualBMC: it sees it on (the
    // ramdisk keeps running with fast-track) and powers it off.
    let ipmi = s
        .node(json!({"name": "bed-1-ipmi", "driver": "ipmi",
                     "driver_info": machine["ipmi_driver_info"]}))
        .await;
    let ipmi = ipmi["uuid"].as_str().unwrap().to_string();
    assert_eq!(s.provision_to(V, &ipmi, "manage").await.status, 202);
    let n = wait_for(&s, &ipmi, "manageable", Duration::from_secs(120)).await;
    assert_eq!(n["power_state"], "power on", "{n}");
    let r = s
        .put(
            &format!("/v1/nodes/{ipmi}/states/power"),
            V,
            Some(&json!({"target": "power off"})),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let system = machine["driver_info"]["redfish_system_id"]
        .as_str()
        .unwrap();
    let emulator = machine["driver_info"]["redfish_address"].as_str().unwrap();
    let bmc = common::Server::client(emulator.trim_start_matches("http://").parse().unwrap());
    // The bed's emulator takes its own user and password only.
    let login = {
        use base64::Engine;
        let di = &machine["driver_info"];
        let pair = format!(
            "{}:{}",
            di["redfish_username"].as_str().unwrap(),
            di["redfish_password"].as_str().unwrap()
        );
        [(
            "Authorization",
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(pair)
            ),
        )]
    };
    assert_eq!(bmc.raw("GET", system, &[], None).await.status, 401);
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let n = s.get(&format!("/v1/nodes/{ipmi}"), V).await.json();
        let seen = bmc.raw("GET", system, &login, None).await.json()["PowerState"].clone();
        if n["power_state"] == "power off" && seen == "Off" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not off: {seen} {}",
            n["power_state"]
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // One machine, one node (the other's power sync would fight it). The split
    // deployment's machine (UEFI) goes on as the `redfish` node with virtual media,
    // deployed with metalsmith; the all-in-one's (BIOS) as the `ipmi` node booting the
    // ramdisk over iPXE (the machine's NIC gets `boot.ipxe` from QEMU's DHCP), deployed
    // with the CLI.
    let (client, node) = match backend {
        Backend::Split => {
            let r = s.delete(&format!("/v1/nodes/{ipmi}"), V).await;
            assert_eq!(r.status, 204, "{}", r.body);
            (Client::Metalsmith, uuid)
        }
        _ => {
            let r = s.delete(&format!("/v1/nodes/{uuid}"), V).await;
            assert_eq!(r.status, 204, "{}", r.body);
            let di = &machine["driver_info"];
            let r = s
                .patch(
                    &format!("/v1/nodes/{ipmi}"),
                    V,
                    &json!([
                        {"op": "add", "path": "/driver_info/deploy_kernel", "value": driver_info["deploy_kernel"]},
                        {"op": "add", "path": "/driver_info/deploy_ramdisk", "value": driver_info["deploy_ramdisk"]},
                        {"op": "add", "path": "/driver_info/kernel_append_params", "value": di["kernel_append_params"]},
                    ]),
                )
                .await;
            assert_eq!(r.status, 200, "{}", r.body);
            let n = r.json();
            assert_eq!(n["boot_interface"], "ipxe", "{n}");
            assert_eq!(n["deploy_interface"], "direct", "{n}");
            let r = s
                .post("/v1/ports", V, &json!({"node_uuid": ipmi, "address": mac}))
                .await;
            assert_eq!(r.status, 201, "{}", r.body);
            (Client::Cli, ipmi)
        }
    };
    deploy_on_the_bed(&s, &node, &machine, &http_root, http_port, image, client).await;
    s.stop().await;
}

/// How the deploy is asked for: as an operator does with the `openstack baremetal`
/// CLI, or as a metalsmith user does (allocation, deploy, wait, undeploy).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Client {
    Cli,
    Metalsmith,
}

/// The bed machine's serial console log, named in failure messages (set when the
/// machine comes up).
static SERIAL_LOG: std::sync::Mutex<Option<PathBuf>> = std::sync::Mutex::new(None);

/// The last lines of the machine's serial console (the agent's log), without its
/// routine polling and heartbeat lines: what a failed wait shows of the machine's
/// side.
fn serial_tail() -> String {
    let path = SERIAL_LOG.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let Some(text) = path.and_then(|p| std::fs::read_to_string(p).ok()) else {
        return String::new();
    };
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| {
            !l.contains("GET /v1/commands") && !l.contains("sleeping before next heartbeat")
        })
        .collect();
    let tail = &lines[lines.len().saturating_sub(40)..];
    format!(
        "\n-- the machine's serial console, its last lines:\n{}",
        tail.join("\n")
    )
}

/// The clients' virtualenv (`scripts/test.sh` installs python-openstackclient and
/// metalsmith beside the other peers).
fn venv_bin(name: &str) -> PathBuf {
    let python = std::env::var("IRONIC_TEST_PYTHON")
        .expect("IRONIC_TEST_PYTHON: the Python of scripts/test.sh's virtualenv");
    Path::new(&python).parent().unwrap().join(name)
}

/// `openstack baremetal …` against the server, without authentication; its output.
async fn openstack(s: &common::Server, args: &[&str]) -> String {
    let mut cmd = vec![
        "--os-endpoint".to_string(),
        format!("http://{}", s.addr),
        "--os-auth-type".into(),
        "none".into(),
        "baremetal".into(),
    ];
    cmd.extend(args.iter().map(|a| a.to_string()));
    let out = tokio::task::spawn_blocking(move || {
        Command::new(venv_bin("openstack")).args(&cmd).output()
    })
    .await
    .unwrap()
    .unwrap();
    assert!(
        out.status.success(),
        "openstack baremetal {args:?}: {}{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        serial_tail()
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The `direct` deploy of a real image on the bed's machine, driven by `client`:
/// automated cleaning with the real agent (`provide`), the image written with a JSON
/// config drive, the machine booted from its own disk (its serial console shows the
/// image's marker and the node's uuid read from the config drive), then undeploy and
/// cleaning again.
async fn deploy_on_the_bed(
    s: &common::Server,
    uuid: &str,
    machine: &Value,
    http_root: &Path,
    http_port: u16,
    image: &Value,
    client: Client,
) {
    eprintln!("== deploy with {client:?}");
    let serial = machine["serial_log"].as_str().unwrap();
    // The image on the image server, where the agent downloads it.
    let published = http_root.join("test-images/disk.raw");
    std::fs::create_dir_all(published.parent().unwrap()).unwrap();
    std::fs::copy(image["path"].as_str().unwrap(), &published).unwrap();
    let image_url = format!("http://10.0.2.2:{http_port}/test-images/disk.raw");
    let sha256 = image["sha256"].as_str().unwrap();

    // Cleaning: the ramdisk boots, the agent erases the disk's metadata.
    openstack(s, &["node", "set", uuid, "--resource-class", "bed"]).await;
    let started = std::time::Instant::now();
    openstack(s, &["node", "provide", uuid, "--wait", "900"]).await;
    let n = wait_for(s, uuid, "available", Duration::from_secs(60)).await;
    eprintln!(
        "provide (automated cleaning) -> available in {:?}",
        started.elapsed()
    );
    let dii = &n["driver_internal_info"];
    let cached = dii["agent_cached_clean_steps"]["deploy"]
        .as_array()
        .unwrap();
    assert!(
        cached.iter().any(|s| s["step"] == "erase_devices_metadata"),
        "{dii}"
    );
    // Fast-track: the ramdisk keeps running for the deploy.
    assert_eq!(n["power_state"], "power on", "{n}");
    assert!(dii["agent_url"].is_string(), "{dii}");

    // Deploy.
    let before = std::fs::read_to_string(serial).unwrap_or_default().len();
    let mut started = std::time::Instant::now();
    let mut metalsmith = None;
    match client {
        Client::Cli => {
            wrong_checksum(s, uuid, &image_url, http_root).await;
            started = std::time::Instant::now();
            set_image(s, uuid, &image_url, sha256).await;
            let cd = json!({"meta_data": {"hostname": "bed-1"}, "user_data": "#cloud-config\n"});
            openstack(
                s,
                &[
                    "node",
                    "deploy",
                    uuid,
                    "--config-drive",
                    &cd.to_string(),
                    "--wait",
                    "900",
                ],
            )
            .await;
        }
        Client::Metalsmith => {
            let mut child = Command::new(venv_bin("python"))
                .arg(root().join("tests/vm/metalsmith-deploy.py"))
                .args([
                    "--endpoint",
                    &format!("http://{}", s.addr),
                    "--resource-class",
                    "bed",
                    "--candidate",
                    uuid,
                    "--image",
                    &image_url,
                    "--sha256",
                    sha256,
                    "--hostname",
                    "bed-1",
                    "--timeout",
                    "900",
                    "--undeploy",
                    "--pause-before-undeploy",
                ])
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            let stdout = child.stdout.take().unwrap();
            let (lines, deployed) = tokio::task::spawn_blocking(move || {
                use std::io::BufRead;
                let mut lines = std::io::BufReader::new(stdout).lines();
                let first = lines.next().map(|l| l.unwrap()).unwrap_or_default();
                (lines, first)
            })
            .await
            .unwrap();
            let deployed: Value = serde_json::from_str(&deployed)
                .unwrap_or_else(|_| panic!("metalsmith did not deploy: {deployed:?}"));
            assert_eq!(deployed["event"], "deployed", "{deployed}");
            assert_eq!(deployed["node_uuid"], uuid, "{deployed}");
            metalsmith = Some((child, lines));
        }
    }
    let n = wait_for(s, uuid, "active", Duration::from_secs(60)).await;
    // The CLI's deploy follows a failed one, which forgot the agent: the ramdisk
    // boots. metalsmith's uses the agent that cleaned the node (fast-track).
    let how = match client {
        Client::Cli => "ramdisk booted",
        Client::Metalsmith => "fast-track",
    };
    eprintln!("deploy ({how}) -> active in {:?}", started.elapsed());
    assert_eq!(n["power_state"], "power on", "{n}");
    assert_eq!(n["last_error"], Value::Null, "{n}");
    // The agent read the whole-disk image's disk identifier (with the ramdisk's
    // `hexdump`) and the conductor kept it, as upstream.
    let disk_id = n["driver_internal_info"]["root_uuid_or_disk_id"]
        .as_str()
        .unwrap_or_default();
    assert!(
        disk_id.len() == 10
            && disk_id.starts_with("0x")
            && disk_id[2..].bytes().all(|b| b.is_ascii_hexdigit()),
        "{n}"
    );
    if client == Client::Metalsmith {
        // metalsmith's allocation holds the node, and it sent the checksum its way.
        assert!(n["allocation_uuid"].is_string(), "{n}");
        assert_eq!(n["instance_info"]["image_checksum"], sha256, "{n}");
    }
    let steps: Vec<&str> = n["driver_internal_info"]["deploy_steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step"].as_str().unwrap())
        .collect();
    assert_eq!(
        steps,
        [
            "deploy",
            "write_image",
            "prepare_instance_boot",
            "tear_down_agent",
            "switch_to_tenant_network",
            "boot_instance"
        ]
    );
    let bd = s
        .get(&format!("/v1/nodes/{uuid}/management/boot_device"), V)
        .await
        .json();
    assert_eq!(bd["boot_device"], "disk", "{bd}");
    // The instance boots from its disk: the image's marker, then the uuid the config
    // drive carries.
    let marker = format!(
        "IRONIC-TEST-IMAGE-MARKER {}",
        image["marker"].as_str().unwrap()
    );
    let uuid_line = format!("IRONIC-TEST-IMAGE-UUID {uuid}");
    let deadline = std::time::Instant::now() + Duration::from_secs(300);
    loop {
        let log = std::fs::read_to_string(serial).unwrap_or_default();
        let after = log.get(before..).unwrap_or("");
        if after.contains(&marker) && after.contains(&uuid_line) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the instance did not boot from its disk with its config drive: {}",
            &after[after.len().saturating_sub(4000)..]
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    eprintln!("deploy -> instance booted in {:?}", started.elapsed());
    // No ramdisk media, network boot files nor published images are left.
    for dir in ["redfish", "pxelinux.cfg", uuid, "agent_images"] {
        let left: Vec<_> = std::fs::read_dir(http_root.join(dir))
            .map(|d| d.map(|e| e.unwrap().file_name()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "{dir}: {left:?}");
    }

    // Undeploy: cleaning again, then available.
    let started = std::time::Instant::now();
    match metalsmith {
        None => {
            openstack(s, &["node", "undeploy", uuid, "--wait", "900"]).await;
        }
        Some((mut child, lines)) => {
            use std::io::Write;
            let mut stdin = child.stdin.take().unwrap();
            stdin.write_all(b"\n").unwrap();
            drop(stdin);
            let (status, rest) = tokio::task::spawn_blocking(move || {
                let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
                (child.wait().unwrap(), rest)
            })
            .await
            .unwrap();
            assert!(status.success(), "metalsmith: {status} {rest:?}");
            let undeployed: Value = serde_json::from_str(rest.last().unwrap()).unwrap();
            assert_eq!(undeployed["event"], "undeployed", "{undeployed}");
        }
    }
    let n = wait_for(s, uuid, "available", Duration::from_secs(60)).await;
    eprintln!("undeploy -> available in {:?}", started.elapsed());
    assert_eq!(n["instance_info"], json!({}), "{n}");
    assert_eq!(n["allocation_uuid"], Value::Null, "{n}");
    assert_eq!(n["power_state"], "power on", "{n}");
    assert!(n["driver_internal_info"]["agent_url"].is_string(), "{n}");
}

/// `openstack baremetal node set --instance-info …`: the raw image at `url` and its
/// sha256.
async fn set_image(s: &common::Server, uuid: &str, url: &str, sha256: &str) {
    openstack(
        s,
        &[
            "node",
            "set",
            uuid,
            "--instance-info",
            &format!("image_source={url}"),
            "--instance-info",
            "image_os_hash_algo=sha256",
            "--instance-info",
            &format!("image_os_hash_value={sha256}"),
            "--instance-info",
            "image_disk_format=raw",
        ],
    )
    .await;
}

/// A deploy with a wrong checksum, through the agent that cleaned the node
/// (fast-track): the agent downloads the image and refuses it; the deploy fails naming
/// the checksum, and the ramdisk's logs are collected.
async fn wrong_checksum(s: &common::Server, uuid: &str, image_url: &str, http_root: &Path) {
    let wrong = "0".repeat(64);
    set_image(s, uuid, image_url, &wrong).await;
    let started = std::time::Instant::now();
    let r = s.provision(V, uuid, json!({"target": "active"})).await;
    assert_eq!(r.status, 202, "{}", r.body);
    let deadline = started + Duration::from_secs(300);
    let n = loop {
        let n = s.get(&format!("/v1/nodes/{uuid}"), V).await.json();
        match n["provision_state"].as_str().unwrap_or_default() {
            "deploy failed" => break n,
            "active" => panic!("deployed with a wrong checksum: {n}"),
            _ => {}
        }
        assert!(std::time::Instant::now() < deadline, "not failed: {n}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    eprintln!(
        "deploy with a wrong checksum (fast-track) -> deploy failed in {:?}",
        started.elapsed()
    );
    let e = n["last_error"].as_str().unwrap_or_default();
    assert!(
        e.starts_with(&format!(
            "Deploy step deploy.write_image failed on node {uuid}"
        )) && e.contains("checksum")
            && e.contains(&wrong),
        "{e}"
    );
    let logs: Vec<_> = std::fs::read_dir(http_root.join("../deploy-logs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            name.starts_with(uuid) && name.ends_with("_deploy.tar.gz")
        })
        .collect();
    assert_eq!(logs.len(), 1, "{logs:?}");
    // A gzip archive of the ramdisk's logs.
    let bytes = std::fs::read(&logs[0]).unwrap();
    assert!(
        bytes.len() > 1024 && bytes.starts_with(&[0x1f, 0x8b]),
        "{}",
        bytes.len()
    );
}

/// Waits for `state` (panics on a failure state or after `within`): the node.
async fn wait_for(s: &common::Server, uuid: &str, state: &str, within: Duration) -> Value {
    let deadline = std::time::Instant::now() + within;
    loop {
        let node = s.get(&format!("/v1/nodes/{uuid}"), V).await.json();
        let now = node["provision_state"].as_str().unwrap_or_default();
        assert!(
            !now.ends_with("failed"),
            "node {uuid}: {now}: {}",
            node["last_error"]
        );
        if now == state && node["target_provision_state"].is_null() {
            return node;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "node {uuid} not {state} within {within:?}: {node}{}",
            serial_tail()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
