#![allow(clippy::unwrap_used)]
//! Projects and roles (upstream's secure RBAC defaults) through the real API with
//! `http_basic`: a policy matrix of personas against nodes, provisioning and allocations
//! on SQLite and on the split deployment, and a walk over every route that fails if one
//! answers without a policy decision.

mod common;

use std::time::Duration;

use base64::Engine;
use common::{Backend, Resp, Server};
use ironic_config::AuthStrategy;
use serde_json::{Value, json};

const V: &str = "1.61";
const PW: &str = "pw";

/// The personas: user name → roles file entry.
const USERS: &[(&str, Option<&str>, &str)] = &[
    ("admin", None, "admin"),
    ("sysreader", None, "reader"),
    ("own-admin", Some("own"), "admin"),
    ("own-member", Some("own"), "member"),
    ("own-reader", Some("own"), "reader"),
    ("les-member", Some("les"), "member"),
    ("other", Some("other"), "admin"),
];

/// A server with `http_basic`, every persona in the htpasswd file and the roles file,
/// and `norole` in the htpasswd file only.
async fn start(backend: Backend) -> (Server, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("ironic-policy-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let hash = bcrypt::hash(PW, 4).unwrap();
    let mut htpasswd = format!("norole:{hash}\n");
    let mut roles = String::new();
    for (user, project, role) in USERS {
        htpasswd.push_str(&format!("{user}:{hash}\n"));
        roles.push_str(&format!("[users.{user:?}]\nroles = [{role:?}]\n"));
        if let Some(p) = project {
            roles.push_str(&format!("project = {p:?}\n"));
        }
    }
    std::fs::write(dir.join("htpasswd"), htpasswd).unwrap();
    std::fs::write(dir.join("roles.toml"), roles).unwrap();
    let d = dir.clone();
    let s = common::start_with(backend, move |c| {
        c.api.auth_strategy = AuthStrategy::HttpBasic;
        c.api.http_basic_auth_user_file = Some(d.join("htpasswd"));
        c.api.http_basic_roles_file = Some(d.join("roles.toml"));
        // Every persona shares the test's address: no lock-out here.
        c.api.max_failed_logins = 0;
    })
    .await;
    (s, dir)
}

async fn call(s: &Server, user: &str, method: &str, path: &str, body: Option<&Value>) -> Resp {
    call_at(s, user, V, method, path, body).await
}

async fn call_at(
    s: &Server,
    user: &str,
    version: &str,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> Resp {
    let auth = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{PW}"))
    );
    let headers = vec![
        ("X-OpenStack-Ironic-API-Version", version.to_string()),
        ("Authorization", auth),
    ];
    let body = body.map(|b| b.to_string());
    s.raw(method, path, &headers, body.as_deref().map(str::as_bytes))
        .await
}

/// Asserts the status, and for 403 that the message names `policy`.
fn expect(r: &Resp, status: u16, policy: Option<&str>, what: &str) {
    assert_eq!(r.status, status, "{what}: {}", r.body);
    if let Some(p) = policy {
        assert_eq!(
            r.fault(),
            format!("Access was denied to the following resource: {p}"),
            "{what}"
        );
    }
}

fn uuids(r: &Resp, key: &str) -> Vec<String> {
    r.json()[key]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["uuid"].as_str().unwrap().to_string())
        .collect()
}

async fn wait_state(s: &Server, node: &str, state: &str) {
    common::until(
        &format!("{node} reaches {state}"),
        Duration::from_secs(60),
        || async {
            let r = call(s, "admin", "GET", &format!("/v1/nodes/{node}"), None).await;
            r.json()["provision_state"] == state
        },
    )
    .await;
}

/// Gives the node a lessee (a 1.65 field, not writable through the API yet).
async fn lease(s: &Server, uuid: &str, project: &str) {
    let db = &s.testdb.as_ref().unwrap().db;
    let id = db.node_by_uuid(uuid).await.unwrap().unwrap().id;
    let mut n = db.node_reserve(id, "tester").await.unwrap();
    n.lessee = Some(project.to_string());
    n.reservation = None;
    db.node_save(&n, "tester").await.unwrap();
}

async fn matrix(s: &Server) {
    // n1 is owned by "own" and leased to "les"; n2 belongs to no project.
    let r = call(
        s,
        "admin",
        "POST",
        "/v1/nodes",
        Some(
            &json!({"driver": "fake-hardware", "name": "n1", "owner": "own",
            "resource_class": "rc-own", "driver_info": {"deploy_kernel": "k"}}),
        ),
    )
    .await;
    expect(&r, 201, None, "admin creates n1");
    let n1 = r.json()["uuid"].as_str().unwrap().to_string();
    lease(s, &n1, "les").await;
    let r = call(
        s,
        "admin",
        "POST",
        "/v1/nodes",
        Some(&json!({"driver": "fake-hardware", "name": "n2"})),
    )
    .await;
    expect(&r, 201, None, "admin creates n2");

    // Lists: a project sees what it owns or leases; another project's filter is 403.
    let r = call(s, "admin", "GET", "/v1/nodes", None).await;
    assert_eq!(uuids(&r, "nodes").len(), 2);
    for user in ["own-member", "own-reader", "les-member"] {
        let r = call(s, user, "GET", "/v1/nodes", None).await;
        assert_eq!(uuids(&r, "nodes"), vec![n1.clone()], "{user}");
    }
    let r = call(s, "other", "GET", "/v1/nodes/detail", None).await;
    assert!(uuids(&r, "nodes").is_empty());
    // An owner filter narrows the project's list further; it never widens it.
    let r = call(s, "les-member", "GET", "/v1/nodes?owner=own", None).await;
    assert_eq!(uuids(&r, "nodes"), vec![n1.clone()]);
    let r = call(s, "own-member", "GET", "/v1/nodes?owner=other", None).await;
    assert!(uuids(&r, "nodes").is_empty());
    let r = call(s, "norole", "GET", "/v1/nodes", None).await;
    expect(&r, 403, Some("baremetal:node:list_all"), "no role");

    // Reads: the owner sees driver_info, the lessee its redaction; others get 404.
    let r = call(s, "own-reader", "GET", "/v1/nodes/n1", None).await;
    expect(&r, 200, None, "owner reads");
    assert_eq!(r.json()["driver_info"]["deploy_kernel"], "k");
    let r = call(s, "les-member", "GET", "/v1/nodes/n1", None).await;
    expect(&r, 200, None, "lessee reads");
    assert_eq!(
        r.json()["driver_info"],
        json!({"content": "** Redacted - requires baremetal:node:get:driver_info permission. **"})
    );
    assert_eq!(
        r.json()["reservation"],
        "** Redacted - requires baremetal:node:get:reservation permission. **"
    );
    let r = call(s, "les-member", "GET", "/v1/nodes?fields=driver_info", None).await;
    assert_eq!(
        r.json()["nodes"][0],
        json!({"uuid": n1, "driver_info": {"content": "** Redacted - requires baremetal:node:get:driver_info permission. **"},
            "links": r.json()["nodes"][0]["links"]}),
        "fields do not lift the redaction, nor show owner/lessee"
    );
    let r = call(s, "sysreader", "GET", "/v1/nodes/n1", None).await;
    assert_eq!(r.json()["driver_info"]["deploy_kernel"], "k");
    for (user, node) in [("other", "n1"), ("own-member", "n2"), ("norole", "n1")] {
        let r = call(s, user, "GET", &format!("/v1/nodes/{node}"), None).await;
        expect(&r, 404, None, &format!("{user} reads {node}"));
        assert_eq!(r.fault(), format!("Node {node} could not be found."));
    }

    // Updates, by field.
    let extra = json!([{"op": "add", "path": "/extra/x", "value": 1}]);
    let r = call(s, "own-reader", "PATCH", "/v1/nodes/n1", Some(&extra)).await;
    expect(&r, 403, Some("baremetal:node:update_extra"), "reader");
    let r = call(s, "les-member", "PATCH", "/v1/nodes/n1", Some(&extra)).await;
    expect(&r, 200, None, "lessee member sets extra");
    let r = call(s, "other", "PATCH", "/v1/nodes/n1", Some(&extra)).await;
    expect(&r, 404, None, "another project");
    let di = json!([{"op": "replace", "path": "/driver_info/deploy_kernel", "value": "k2"}]);
    let r = call(s, "les-member", "PATCH", "/v1/nodes/n1", Some(&di)).await;
    expect(&r, 403, Some("baremetal:node:update:driver_info"), "lessee");
    let r = call(s, "own-member", "PATCH", "/v1/nodes/n1", Some(&di)).await;
    expect(&r, 200, None, "owner member sets driver_info");
    let owner = json!([{"op": "replace", "path": "/owner", "value": "other"}]);
    let r = call(s, "own-admin", "PATCH", "/v1/nodes/n1", Some(&owner)).await;
    expect(&r, 403, Some("baremetal:node:update:owner"), "owner admin");
    let both = json!([{"op": "add", "path": "/extra/y", "value": 1},
        {"op": "replace", "path": "/driver", "value": "fake-hardware"}]);
    let r = call(s, "own-member", "PATCH", "/v1/nodes/n1", Some(&both)).await;
    expect(
        &r,
        403,
        Some("baremetal:node:update:driver_interfaces"),
        "every operation's policy is checked",
    );

    // Provisioning: owner members and lessee managers; power: any member.
    let manage = json!({"target": "manage"});
    let r = call(
        s,
        "les-member",
        "PUT",
        "/v1/nodes/n1/states/provision",
        Some(&manage),
    )
    .await;
    expect(
        &r,
        403,
        Some("baremetal:node:set_provision_state"),
        "lessee member",
    );
    let r = call(
        s,
        "own-member",
        "PUT",
        "/v1/nodes/n1/states/provision",
        Some(&manage),
    )
    .await;
    expect(&r, 202, None, "owner member manages");
    wait_state(s, "n1", "manageable").await;
    let power = json!({"target": "power on"});
    let r = call(
        s,
        "own-reader",
        "PUT",
        "/v1/nodes/n1/states/power",
        Some(&power),
    )
    .await;
    expect(&r, 403, Some("baremetal:node:set_power_state"), "reader");
    let r = call(
        s,
        "les-member",
        "PUT",
        "/v1/nodes/n1/states/power",
        Some(&power),
    )
    .await;
    expect(&r, 202, None, "lessee member powers on");
    let provide = json!({"target": "provide"});
    let r = call(
        s,
        "own-member",
        "PUT",
        "/v1/nodes/n1/states/provision",
        Some(&provide),
    )
    .await;
    expect(&r, 202, None, "owner member provides");
    wait_state(s, "n1", "available").await;

    // Allocations belong to their owner.
    let alloc = json!({"resource_class": "rc-own"});
    let r = call(s, "own-reader", "POST", "/v1/allocations", Some(&alloc)).await;
    expect(&r, 403, Some("baremetal:allocation:create"), "reader");
    let r = call(
        s,
        "own-member",
        "POST",
        "/v1/allocations",
        Some(&json!({"resource_class": "rc-own", "owner": "other"})),
    )
    .await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(
        r.fault().contains("baremetal:allocation:create_restricted"),
        "{}",
        r.fault()
    );
    let r = call(
        s,
        "own-member",
        "POST",
        "/v1/allocations",
        Some(&json!({"resource_class": "rc-own", "candidate_nodes": ["n2"]})),
    )
    .await;
    expect(&r, 400, None, "a node the project may not see");
    assert_eq!(r.fault(), "Nodes cannot be found: n2");
    let r = call(s, "own-member", "POST", "/v1/allocations", Some(&alloc)).await;
    expect(&r, 201, None, "owner member allocates");
    assert_eq!(r.json()["owner"], "own", "the caller's project owns it");
    let a = r.json()["uuid"].as_str().unwrap().to_string();
    common::until("the allocation is active", Duration::from_secs(60), || {
        let a = a.clone();
        async move {
            let r = call(
                s,
                "own-reader",
                "GET",
                &format!("/v1/allocations/{a}"),
                None,
            )
            .await;
            r.json()["state"] == "active"
        }
    })
    .await;
    let r = call(
        s,
        "own-reader",
        "GET",
        &format!("/v1/allocations/{a}"),
        None,
    )
    .await;
    assert_eq!(r.json()["node_uuid"], n1.as_str());
    let r = call(s, "other", "GET", &format!("/v1/allocations/{a}"), None).await;
    expect(&r, 404, None, "another project's allocation");
    let r = call(s, "other", "GET", "/v1/allocations", None).await;
    assert!(uuids(&r, "allocations").is_empty());
    let r = call(s, "admin", "GET", "/v1/allocations", None).await;
    assert_eq!(uuids(&r, "allocations"), vec![a.clone()]);
    let r = call(s, "own-member", "GET", "/v1/allocations?owner=other", None).await;
    expect(
        &r,
        403,
        Some("baremetal:allocation:list_all"),
        "owner filter",
    );
    // The lessee sees the node, not the owner's allocation on it.
    let r = call(s, "les-member", "GET", "/v1/nodes/n1/allocation", None).await;
    expect(&r, 403, Some("baremetal:allocation:get"), "lessee");
    let r = call(
        s,
        "own-reader",
        "DELETE",
        &format!("/v1/allocations/{a}"),
        None,
    )
    .await;
    expect(&r, 403, Some("baremetal:allocation:delete"), "reader");
    let r = call(s, "other", "DELETE", &format!("/v1/allocations/{a}"), None).await;
    expect(&r, 404, None, "another project");
    let r = call(
        s,
        "own-member",
        "DELETE",
        &format!("/v1/allocations/{a}"),
        None,
    )
    .await;
    expect(&r, 204, None, "owner member deallocates");

    // What only the system sees.
    for path in ["/v1/deploy_templates", "/v1/drivers", "/v1/conductors"] {
        let r = call(s, "own-admin", "GET", path, None).await;
        assert_eq!(r.status, 403, "{path}: {}", r.body);
        let r = call(s, "sysreader", "GET", path, None).await;
        assert_eq!(r.status, 200, "{path}: {}", r.body);
    }
    let r = call(
        s,
        "sysreader",
        "POST",
        "/v1/deploy_templates",
        Some(&json!({"name": "CUSTOM_X", "steps": []})),
    )
    .await;
    expect(&r, 403, Some("baremetal:deploy_template:create"), "reader");

    // Enrolment: a project admin's node is its project's; deleting needs an admin.
    let r = call(
        s,
        "own-member",
        "POST",
        "/v1/nodes",
        Some(&json!({"driver": "fake-hardware"})),
    )
    .await;
    expect(&r, 403, Some("baremetal:node:create"), "member");
    let r = call(
        s,
        "own-admin",
        "POST",
        "/v1/nodes",
        Some(&json!({"driver": "fake-hardware", "owner": "other"})),
    )
    .await;
    expect(&r, 400, None, "another owner");
    let r = call(
        s,
        "own-admin",
        "POST",
        "/v1/nodes",
        Some(&json!({"driver": "fake-hardware", "name": "n3"})),
    )
    .await;
    expect(&r, 201, None, "project admin enrols");
    assert_eq!(r.json()["owner"], "own");
    let r = call(s, "own-member", "DELETE", "/v1/nodes/n3", None).await;
    expect(&r, 403, Some("baremetal:node:delete"), "member");
    let r = call(s, "other", "DELETE", "/v1/nodes/n3", None).await;
    expect(&r, 404, None, "another project");
    let r = call(s, "own-admin", "DELETE", "/v1/nodes/n3", None).await;
    expect(&r, 204, None, "owner admin deletes its node");

    // Only the system publishes a runbook (every project would see it).
    let runbook = |name: &str, public: bool| {
        json!({
            "name": name,
            "steps": [{"interface": "bios", "step": "apply_configuration", "args": {}, "order": 1}],
            "public": public,
        })
    };
    let r = call_at(
        s,
        "own-admin",
        "1.92",
        "POST",
        "/v1/runbooks",
        Some(&runbook("CUSTOM_PUB", true)),
    )
    .await;
    expect(&r, 400, None, "a project publishes a runbook");
    assert_eq!(
        r.fault(),
        "Cannot create a public runbook as a project scoped admin."
    );
    let r = call_at(s, "other", "1.92", "GET", "/v1/runbooks", None).await;
    expect(&r, 200, None, "another project lists runbooks");
    assert_eq!(r.json()["runbooks"], json!([]), "nothing was published");
    let r = call_at(
        s,
        "own-admin",
        "1.92",
        "POST",
        "/v1/runbooks",
        Some(&runbook("CUSTOM_OWN", false)),
    )
    .await;
    expect(&r, 201, None, "a project's own runbook");
    assert_eq!(r.json()["owner"], "own");
    let r = call_at(
        s,
        "admin",
        "1.92",
        "POST",
        "/v1/runbooks",
        Some(&runbook("CUSTOM_SYS", true)),
    )
    .await;
    expect(&r, 201, None, "the system publishes a runbook");
    assert_eq!(r.json()["public"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_matrix_sqlite() {
    let (s, dir) = start(Backend::Sqlite).await;
    matrix(&s).await;
    s.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_matrix_split() {
    let (s, dir) = start(Backend::Split).await;
    matrix(&s).await;
    s.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// Every route and method, as a user without any role, on real objects: each answers
/// 403 or 404 (or 405 for a method the route lacks), never a success, and each one that
/// is served made a policy decision, counted in `/metrics` by route and method. A new
/// route whose handler does not ask the policy fails here (and at the edge, which
/// withholds a success no decision allowed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_has_a_policy_decision() {
    let (s, dir) = start(Backend::Sqlite).await;
    let r = call(
        &s,
        "admin",
        "POST",
        "/v1/nodes",
        Some(&json!({"driver": "fake-hardware", "name": "n1", "resource_class": "rc"})),
    )
    .await;
    let node = r.json()["uuid"].as_str().unwrap().to_string();
    for target in ["manage", "provide"] {
        let r = call(
            &s,
            "admin",
            "PUT",
            "/v1/nodes/n1/states/provision",
            Some(&json!({ "target": target })),
        )
        .await;
        assert_eq!(r.status, 202, "{}", r.body);
        wait_state(
            &s,
            "n1",
            if target == "manage" {
                "manageable"
            } else {
                "available"
            },
        )
        .await;
    }
    let r = call(
        &s,
        "admin",
        "POST",
        "/v1/allocations",
        Some(&json!({"resource_class": "rc"})),
    )
    .await;
    let alloc = r.json()["uuid"].as_str().unwrap().to_string();
    let r = call(
        &s,
        "admin",
        "POST",
        "/v1/deploy_templates",
        Some(&json!({"name": "CUSTOM_T", "steps": [
            {"interface": "deploy", "step": "sleep", "args": {"seconds": 0}, "priority": 10}]})),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let patch = json!([{"op": "add", "path": "/extra/x", "value": 1}]);
    let mut served = Vec::new();
    for template in ironic_api::route_paths() {
        let path = if template.starts_with("/allocations/") {
            template.replace("{ident}", &alloc)
        } else if template.starts_with("/deploy") {
            template.replace("{ident}", "CUSTOM_T")
        } else {
            template
                .replace("{ident}", &node)
                .replace(
                    "{name}",
                    if template.starts_with("/drivers") {
                        "fake-hardware"
                    } else {
                        "CUSTOM_A"
                    },
                )
                .replace("{hostname}", "test-conductor")
                .replace("{id}", "12121212-3434-4565-8787-909090909090")
        };
        for method in ["GET", "POST", "PUT", "PATCH", "DELETE"] {
            let body = match method {
                "PATCH" => Some(patch.clone()),
                "POST" if template == "/nodes" => Some(json!({"driver": "fake-hardware"})),
                "POST" if template == "/allocations" => Some(json!({"resource_class": "rc"})),
                "POST" if template.ends_with("/vmedia") => {
                    Some(json!({"device_type": "cdrom", "image_url": "http://192.0.2.1/boot.iso"}))
                }
                "POST" if template == "/inspection_rules" => {
                    Some(json!({"actions": [{"op": "log", "args": {"msg": "x"}}]}))
                }
                "POST" => Some(json!({"name": "CUSTOM_U", "steps": []})),
                "PUT" if template.ends_with("/provision") => Some(json!({"target": "manage"})),
                "PUT" if template.ends_with("/power") => Some(json!({"target": "power on"})),
                "PUT" if template.ends_with("/traits") => Some(json!({"traits": ["CUSTOM_B"]})),
                "PUT" if template.ends_with("/{indicator}") => Some(json!({"state": "on"})),
                "PUT" if template.ends_with("/boot_mode") => Some(json!({"target": "uefi"})),
                "PUT" if template.ends_with("/secure_boot") => Some(json!({"target": true})),
                "PUT"
                    if template.ends_with("/console")
                        || template.ends_with("/boot_device")
                        || template.ends_with("/raid") =>
                {
                    Some(json!({}))
                }
                _ => None,
            };
            // The newest version: every route exists there.
            let path = format!("/v1{path}");
            let r = call_at(&s, "norole", "latest", method, &path, body.as_ref()).await;
            if r.status == 405 {
                continue;
            }
            if template == "/lookup"
                || template == "/continue_inspection"
                || template.starts_with("/heartbeat/")
            {
                // The ramdisk agent's public routes: no role needed; these requests
                // lack what the agent sends.
                assert_eq!(r.status, 400, "{method} {template}: {}", r.body);
                continue;
            }
            assert!(
                r.status == 403 || r.status == 404,
                "{method} {template}: {} {}",
                r.status,
                r.body
            );
            served.push((template, method));
        }
    }
    assert!(served.len() > 30, "only {} routes served", served.len());
    let metrics = s.call("GET", "/metrics", None, None).await.body;
    for (template, method) in served {
        let needle = format!("method=\"{method}\"");
        let route = format!("route=\"/v1{template}\"");
        assert!(
            metrics
                .lines()
                .any(|l| l.starts_with("ironic_api_policy_decisions_total{")
                    && l.contains(&needle)
                    && l.contains(&route)),
            "{method} {template} made no policy decision"
        );
    }
    s.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}
