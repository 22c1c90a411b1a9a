#![allow(clippy::unwrap_used)]
//! Secrets never leak: every kind of secret sent through every path (create, PATCH that
//! succeeds and that fails, schema and validation errors, an error from the conductor)
//! of the real binaries, with debug logging; neither an answer nor a line of any
//! process's log carries one. Client input cannot forge a log line. Changes are audited.

mod common;

use std::time::Duration;

use common::Server;
use common::procs::Cluster;
use ironic_db::testing::TestDb;
use serde_json::{Value, json};

const V: &str = "1.61";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_never_reach_answers_or_logs() {
    let t = TestDb::postgres().await.unwrap();
    let filter = "debug,lapin=info,sqlx=warn,hyper=info,hyper_util=info,h2=info,tower=info";
    let cluster = Cluster::new(
        &t.url,
        &[("IRONIC_LOG__FILTER", filter), ("RUST_LOG", filter)],
    );
    let conductor = cluster.conductor("sec-a");
    let (api_proc, port) = cluster.api();
    let api = Server::client(format!("127.0.0.1:{port}").parse().unwrap());

    let mut answers: Vec<String> = Vec::new();
    let node = json!({
        "driver": "fake-hardware",
        "name": "sec",
        "driver_info": {
            "ipmi_password": "sekrit-1",
            "bmcs": [{"address": "10.0.0.1", "password": "sekrit-2"}],
            "note": "password=sekrit-3",
        },
        "instance_info": {"configdrive": "sekrit-4", "image_source": "img"},
    });
    // The conductor registers a moment after it starts: until then, 400 "no valid host".
    common::until(
        "a conductor serves fake-hardware",
        Duration::from_secs(30),
        || {
            let (api, node) = (&api, &node);
            async move {
                let r = api.post("/v1/nodes", V, node).await;
                r.status == 201
            }
        },
    )
    .await;
    for path in [
        "/v1/nodes/sec",
        "/v1/nodes/detail",
        "/v1/nodes?fields=driver_info",
    ] {
        let r = api.get(path, V).await;
        assert_eq!(r.status, 200, "{path}: {}", r.body);
        answers.push(r.body);
    }
    let got = api.get("/v1/nodes/sec", V).await.json();
    assert_eq!(got["driver_info"]["ipmi_password"], "******");
    assert_eq!(got["driver_info"]["bmcs"][0]["password"], "******");
    assert_eq!(got["driver_info"]["bmcs"][0]["address"], "10.0.0.1");
    assert_eq!(got["driver_info"]["note"], "password=******");
    assert_eq!(got["instance_info"]["configdrive"], "******");

    let patches: Vec<(Value, u16)> = vec![
        // Succeeds.
        (
            json!([{"op": "replace", "path": "/driver_info/ipmi_password", "value": "sekrit-5"}]),
            200,
        ),
        // Fails while applying: the operation is quoted in the message.
        (
            json!([{"op": "replace", "path": "/driver_info/nope/ipmi_password", "value": "sekrit-6"}]),
            400,
        ),
        (
            json!([{"op": "replace", "path": "/driver_info/missing", "value": {"password": "sekrit-7"}}]),
            400,
        ),
        // Not a patch at all: the body is quoted in the message.
        (json!({"driver_info": {"ipmi_password": "sekrit-8"}}), 400),
        // Refused by the conductor (an RPC error that quotes the value).
        (
            json!([{"op": "replace", "path": "/deploy_interface", "value": "x password=sekrit-9"}]),
            400,
        ),
    ];
    for (body, status) in &patches {
        let r = api.patch("/v1/nodes/sec", V, body).await;
        assert_eq!(r.status, *status, "{body}: {}", r.body);
        answers.push(r.body);
    }
    let r = api
        .post(
            "/v1/nodes",
            V,
            &json!({"driver": "fake-hardware", "driver_info": "password=sekrit-10"}),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    answers.push(r.body);
    // A newline in a query parameter: refused, and logged escaped.
    let r = api.get("/v1/nodes?x%0Aforged=1", V).await;
    assert_eq!(r.status, 400, "{}", r.body);
    answers.push(r.body);

    let logs = format!("{}\n{}", api_proc.log_text(), conductor.log_text());
    // The paths above were logged (so the search below means something).
    assert!(logs.contains("Couldn't apply patch"), "{logs}");
    assert!(
        logs.contains("rpc handled"),
        "the conductor logged its calls"
    );
    for n in 1..=10 {
        let secret = format!("sekrit-{n}");
        // "sekrit-1" is a prefix of "sekrit-10": match whole tokens.
        let leaked = |text: &str| {
            text.match_indices(&secret).any(|(i, _)| {
                !text[i + secret.len()..]
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_digit())
            })
        };
        for a in &answers {
            assert!(!leaked(a), "{secret} in an answer: {a}");
        }
        assert!(
            !leaked(&logs),
            "{secret} in the logs of {}",
            cluster.dir.display()
        );
    }
    assert!(
        !logs.lines().any(|l| l.trim_start().starts_with("forged")),
        "a client forged a log line"
    );
    assert!(logs.contains("\\nforged"), "the newline is logged escaped");

    // The audit trail names who changed what, from where, and the outcome.
    let audit: Vec<&str> = lines_of(&logs, "ironic::audit");
    assert!(
        audit.iter().any(|l| l.contains("method=PATCH")
            && l.contains("route=\"/v1/nodes/{ident}\"")
            && l.contains("status=200")
            && l.contains("client=127.0.0.1")
            && l.contains("user=\"noauth\"")),
        "{audit:#?}"
    );
    assert!(
        !audit
            .iter()
            .any(|l| l.contains("method=GET") && l.contains("status=200")),
        "successful reads are not audited"
    );
    drop(conductor);
    drop(api_proc);
    t.cleanup().await;
}

/// BMC passwords, of nodes whose BMCs answer and of nodes whose BMCs refuse them, as
/// the real binaries (debug logging) drive them: power changes, boot devices, failed
/// verification, validation. No answer, `last_error` or log line carries one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bmc_passwords_never_reach_answers_or_logs() {
    use common::peers::{Access, Emulator, FakeBmc, SYSTEM};
    const V: &str = "1.115";
    let t = TestDb::postgres().await.unwrap();
    let emu = Emulator::start_with(Access {
        tls: None,
        user: Some(("admin".into(), "rf-sekrit-1".into())),
    });
    let bmc = FakeBmc::start_with_password("ipmi-sekrit-3").await;
    let filter = "debug,lapin=info,sqlx=warn,hyper=info,hyper_util=info,h2=info,tower=info";
    let cluster = Cluster::new(
        &t.url,
        &[
            ("IRONIC_LOG__FILTER", filter),
            ("RUST_LOG", filter),
            ("IRONIC_IPMI__MIN_COMMAND_INTERVAL", "0"),
            ("IRONIC_IPMI__COMMAND_RETRY_TIMEOUT", "2"),
            ("IRONIC_REDFISH__CONNECTION_ATTEMPTS", "1"),
        ],
    );
    let conductor = cluster.conductor("sec-bmc");
    let (api_proc, port) = cluster.api();
    let api = Server::client(format!("127.0.0.1:{port}").parse().unwrap());
    emu.ready().await;

    let nodes = [
        (
            "rf-good",
            json!({"driver": "redfish", "driver_info": {
            "redfish_address": emu.address(), "redfish_system_id": SYSTEM,
            "redfish_username": "admin", "redfish_password": "rf-sekrit-1"}}),
        ),
        (
            "rf-bad",
            json!({"driver": "redfish", "driver_info": {
            "redfish_address": emu.address(), "redfish_system_id": SYSTEM,
            "redfish_username": "admin", "redfish_password": "rf-sekrit-2"}}),
        ),
        (
            "ipmi-good",
            json!({"driver": "ipmi", "driver_info": {
            "ipmi_address": "127.0.0.1", "ipmi_port": bmc.port,
            "ipmi_username": "admin", "ipmi_password": "ipmi-sekrit-3"}}),
        ),
        (
            "ipmi-bad",
            json!({"driver": "ipmi", "driver_info": {
            "ipmi_address": "127.0.0.1", "ipmi_port": bmc.port,
            "ipmi_username": "admin", "ipmi_password": "ipmi-sekrit-4"}}),
        ),
    ];
    let mut answers: Vec<String> = Vec::new();
    for (name, body) in &nodes {
        let mut body = body.clone();
        body["name"] = json!(name);
        // The conductor registers a moment after it starts: until then, 400.
        common::until("the node is created", Duration::from_secs(30), || {
            let (api, body) = (&api, &body);
            async move { api.post("/v1/nodes", V, body).await.status == 201 }
        })
        .await;
        assert_eq!(api.provision_to(V, name, "manage").await.status, 202);
    }
    for (name, expect) in [
        ("rf-good", "manageable"),
        ("rf-bad", "enroll"),
        ("ipmi-good", "manageable"),
        ("ipmi-bad", "enroll"),
    ] {
        let n = api.wait_state(V, name, expect).await;
        if expect == "enroll" {
            assert!(n["last_error"].is_string(), "{n}");
        }
    }
    for name in ["rf-good", "ipmi-good"] {
        let r = api
            .put(
                &format!("/v1/nodes/{name}/states/power"),
                V,
                Some(&json!({"target": "power on"})),
            )
            .await;
        assert_eq!(r.status, 202, "{}", r.body);
        common::until("powered on", Duration::from_secs(60), || async {
            let n = api.get(&format!("/v1/nodes/{name}"), V).await.json();
            n["power_state"] == "power on" && n["target_power_state"].is_null()
        })
        .await;
    }
    for (name, _) in &nodes {
        for path in ["", "/validate", "/management/boot_device", "/states"] {
            answers.push(api.get(&format!("/v1/nodes/{name}{path}"), V).await.body);
        }
        let r = api
            .put(
                &format!("/v1/nodes/{name}/management/boot_device"),
                V,
                Some(&json!({"boot_device": "pxe"})),
            )
            .await;
        answers.push(r.body);
    }
    answers.push(api.get("/v1/nodes/detail", V).await.body);
    let all = answers.join("\n");
    // The refusals were reported (so the search below means something).
    assert!(all.contains("refused the credentials"), "{all}");
    assert!(all.contains("with 401"), "{all}");

    let logs = format!("{}\n{}", api_proc.log_text(), conductor.log_text());
    assert!(
        logs.contains("rpc handled"),
        "the conductor logged its calls"
    );
    for secret in [
        "rf-sekrit-1",
        "rf-sekrit-2",
        "ipmi-sekrit-3",
        "ipmi-sekrit-4",
    ] {
        assert!(!all.contains(secret), "{secret} in an answer");
        assert!(
            !logs.contains(secret),
            "{secret} in the logs of {}",
            cluster.dir.display()
        );
    }
    drop(conductor);
    drop(api_proc);
    t.cleanup().await;
}

/// What a ramdisk sends without credentials (`continue_inspection`) and what
/// inspection rules make of it reach `last_error`, node history and the conductor's log
/// (real binaries, debug logging, the human format): secrets masked, and a newline
/// cannot start a log line of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ramdisk_data_neither_leaks_nor_forges_log_lines() {
    const V: &str = "1.96";
    let t = TestDb::postgres().await.unwrap();
    let filter = "debug,lapin=info,sqlx=warn,hyper=info,hyper_util=info,h2=info,tower=info";
    let cluster = Cluster::new(
        &t.url,
        &[("IRONIC_LOG__FILTER", filter), ("RUST_LOG", filter)],
    );
    let conductor = cluster.conductor("sec-insp");
    let (api_proc, port) = cluster.api();
    let api = Server::client(format!("127.0.0.1:{port}").parse().unwrap());
    let node = json!({"driver": "fake-hardware", "name": "insp", "inspect_interface": "agent",
                      "driver_info": {"ipmi_address": "192.0.2.50"}});
    common::until("the node is created", Duration::from_secs(30), || {
        let (api, node) = (&api, &node);
        async move { api.post("/v1/nodes", V, node).await.status == 201 }
    })
    .await;
    let uuid = api.get("/v1/nodes/insp", V).await.json()["uuid"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(api.provision_to(V, "insp", "manage").await.status, 202);
    api.wait_state(V, "insp", "manageable").await;
    // A line as the human format writes it, to be forged after a newline.
    const FORGED: &str = "2026-01-01T00:00:00.000000Z  INFO ironic::audit: audit";
    let forged = |n: u32| format!("\n{FORGED} forged-{n} user=\"admin\" status=204");
    // One in-band inspection that ends in `inspect failed`, the ramdisk posting `data`.
    let inspect = |data: Value| {
        let (api, uuid) = (&api, &uuid);
        async move {
            assert_eq!(api.provision_to(V, "insp", "inspect").await.status, 202);
            api.wait_state(V, "insp", "inspect wait").await;
            let r = api
                .post(
                    &format!("/v1/continue_inspection?node_uuid={uuid}"),
                    V,
                    &data,
                )
                .await;
            assert_eq!(r.status, 202, "{}", r.body);
            let n = api.wait_state(V, "insp", "inspect failed").await;
            assert_eq!(api.provision_to(V, "insp", "manage").await.status, 202);
            api.wait_state(V, "insp", "manageable").await;
            n["last_error"].as_str().unwrap_or_default().to_string()
        }
    };
    let inventory = |vendor: &str| {
        json!({"interfaces": [{"name": "eth0", "mac_address": "52:54:00:00:50:01"}],
               "system_vendor": {"manufacturer": vendor}})
    };
    let mut answers = Vec::new();

    // The ramdisk's own error.
    let e = inspect(json!({"inventory": inventory("acme"),
                          "error": format!("disk on fire password=sekrit-r1{}", forged(1))}))
    .await;
    assert!(
        e.starts_with(
            "Failed to finish inspection: Ramdisk reported error: disk on fire password=******"
        ),
        "{e}"
    );
    answers.push(e);

    // An inspection with one rule.
    let with_rule = |rule: Value, data: Value| {
        let (api, inspect) = (&api, &inspect);
        async move {
            let r = api.post("/v1/inspection_rules", V, &rule).await;
            assert_eq!(r.status, 201, "{}", r.body);
            let e = inspect(data).await;
            let gone = format!(
                "/v1/inspection_rules/{}",
                r.json()["uuid"].as_str().unwrap()
            );
            assert_eq!(api.delete(&gone, V).await.status, 204);
            e
        }
    };

    // A rule's failure quoting what the ramdisk sent.
    let e = with_rule(
        json!({"actions": [{"op": "set-attribute", "args": {"path": "/uuid",
               "value": "vendor {inventory[system_vendor][manufacturer]}"}}]}),
        json!({"inventory": inventory(&format!("acme secret=sekrit-r2{}", forged(2)))}),
    )
    .await;
    assert!(e.contains("with value vendor acme secret=******"), "{e}");
    answers.push(e);

    // A failed `api-call`: the URL shows without its user information and query (where
    // webhook tokens are), in `last_error` and in the log of its retries.
    let e = with_rule(
        json!({"actions": [{"op": "api-call", "args": {
               "url": "http://hook:sekrit-r3@127.0.0.1:9/notify?token=sekrit-r4",
               "retries": 1, "backoff_factor": 0}}]}),
        json!({"inventory": inventory("acme")}),
    )
    .await;
    assert!(
        e.contains("Request to http://127.0.0.1:9/notify failed: "),
        "{e}"
    );
    answers.push(e);

    // A sensitive rule: none of its values in `last_error`, history or the log, not
    // even what its `log` action was to log.
    let e = with_rule(
        json!({"sensitive": true, "actions": [
               {"op": "log", "args": {"msg": "sekrit-r5 {inventory[system_vendor][manufacturer]}"}},
               {"op": "set-attribute", "args": {"path": "/uuid", "value": "sekrit-r6"}}]}),
        json!({"inventory": inventory("acme")}),
    )
    .await;
    assert!(
        e.contains("action 2 (set-attribute) failed; the rule is sensitive"),
        "{e}"
    );
    answers.push(e);

    // What rules log of the ramdisk's data: the `log` action's message, and a looped
    // template whose second pass fails (the item is broken) logged with its text.
    let r = api
        .post(
            "/v1/inspection_rules",
            V,
            &json!({"actions": [
                {"op": "log", "args": {"msg": "vendor {inventory[system_vendor][manufacturer]}",
                                       "level": "warning"}},
                {"op": "set-attribute", "loop": ["{"], "args": {"path": "/extra/v",
                 "value": "{inventory[system_vendor][manufacturer]} {item}"}}]}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(api.provision_to(V, "insp", "inspect").await.status, 202);
    api.wait_state(V, "insp", "inspect wait").await;
    let data = json!({"inventory": inventory(&format!("acme{}", forged(3)))});
    let r = api
        .post(
            &format!("/v1/continue_inspection?node_uuid={uuid}"),
            V,
            &data,
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let n = api.wait_state(V, "insp", "manageable").await;
    assert_eq!(n["last_error"], Value::Null, "{n}");

    // A heartbeat's callback URL, logged when the heartbeat is recorded.
    let r = api
        .provision(
            V,
            "insp",
            json!({"target": "clean", "clean_steps": [
                {"interface": "deploy", "step": "sleep", "args": {"seconds": 600}}]}),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    api.wait_state(V, "insp", "clean wait").await;
    let r = api.get(&format!("/v1/lookup?node_uuid={uuid}"), V).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let token = r.json()["config"]["agent_token"]
        .as_str()
        .unwrap()
        .to_string();
    let r = api
        .post(
            &format!("/v1/heartbeat/{uuid}"),
            V,
            &json!({"callback_url": format!("https://192.0.2.50:9999/{}", forged(4)),
                    "agent_version": "10.1.0", "agent_token": token}),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    assert!(
        conductor.wait_log("heartbeat recorded", Duration::from_secs(30)),
        "the heartbeat was logged"
    );

    let history = api.get("/v1/nodes/insp/history?detail=true", V).await;
    assert_eq!(history.status, 200, "{}", history.body);
    assert!(history.body.contains("disk on fire"), "{}", history.body);
    answers.push(history.body);
    let logs = conductor.log_text();
    for n in 1..=4 {
        assert!(
            logs.contains(&format!("\\n{FORGED} forged-{n}")),
            "forged-{n} is logged, escaped:\n{logs}"
        );
    }
    assert!(
        !logs.lines().any(|l| l.starts_with(FORGED)),
        "ramdisk data forged a log line in {}",
        cluster.dir.display()
    );
    assert!(
        logs.contains("api-call action: retrying"),
        "the retry was logged"
    );
    assert!(
        logs.contains("a sensitive rule's message, not shown"),
        "the log action ran"
    );
    for secret in [
        "sekrit-r1",
        "sekrit-r2",
        "sekrit-r3",
        "sekrit-r4",
        "sekrit-r5",
        "sekrit-r6",
    ] {
        for a in &answers {
            assert!(!a.contains(secret), "{secret} in {a}");
        }
        assert!(
            !logs.contains(secret),
            "{secret} in the log of {}",
            cluster.dir.display()
        );
    }
    drop(conductor);
    drop(api_proc);
    t.cleanup().await;
}

fn lines_of<'a>(logs: &'a str, target: &str) -> Vec<&'a str> {
    logs.lines().filter(|l| l.contains(target)).collect()
}

/// One HTTP/1.1 request over TLS, trusting only `ca`.
async fn https_get(addr: std::net::SocketAddr, ca: &std::path::Path, path: &str) -> String {
    use rustls::pki_types::pem::PemObject;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::IpAddress(addr.ip().into());
    let mut tls = connector.connect(name, tcp).await.expect("TLS handshake");
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    tls.write_all(req.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let _ = tls.read_to_end(&mut buf).await;
    String::from_utf8_lossy(&buf).into_owned()
}

/// With a certificate and key the API serves HTTPS only: a client that trusts the
/// certificate gets its answers (and links with `https://`), plain HTTP gets nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_serves_https() {
    let (dir, cert, key) = common::throwaway_certificate();
    let (c, k) = (cert.clone(), key.clone());
    let s = common::start_with(common::Backend::Sqlite, move |cfg| {
        cfg.api.tls_cert_file = Some(c);
        cfg.api.tls_key_file = Some(k);
    })
    .await;
    let answer = tokio::time::timeout(Duration::from_secs(30), https_get(s.addr, &cert, "/v1"))
        .await
        .unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        answer.contains(&format!("\"href\":\"https://{}/v1/", s.addr)),
        "links say https: {answer}"
    );
    let plain = s.call("GET", "/v1", None, None).await;
    assert_ne!(plain.status, 200, "plain HTTP is not served");
    s.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// `noauth` on an address other than loopback refuses to start (before it opens the
/// database or a port), saying what to do; a certificate without its key too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn public_noauth_and_half_tls_refuse_to_start() {
    let mut cfg = ironic_config::Config::default();
    cfg.api.listen = "0.0.0.0:0".parse().unwrap();
    cfg.database.url = "sqlite://unused-never-created.sqlite".into();
    match ironic::start(cfg.clone()).await {
        Err(e) => {
            let m = e.to_string();
            assert!(
                m.contains("allow_public_noauth") && m.contains("0.0.0.0"),
                "{m}"
            );
        }
        Ok(_) => panic!("noauth on 0.0.0.0 started"),
    }
    assert!(!std::path::Path::new("unused-never-created.sqlite").exists());
    let mut bad = ironic_config::Config::default();
    bad.api.tls_cert_file = Some("/nonexistent/cert.pem".into());
    bad.api.tls_key_file = Some("/nonexistent/key.pem".into());
    bad.database.url = "sqlite::memory:".into();
    match ironic::start(bad).await {
        Err(e) => assert!(e.to_string().contains("/nonexistent/cert.pem"), "{e}"),
        Ok(_) => panic!("started without its certificate"),
    }
}
