#![allow(clippy::unwrap_used)]
//! A bounded fuzz run over every route: random and adversarial paths, query strings,
//! headers and bodies, a fixed number of requests from a fixed seed (set
//! `IRONIC_FUZZ_SEED` and `IRONIC_FUZZ_REQUESTS` to explore further; a failure prints
//! the seed and the request). No answer may be a 5xx other than a documented 503, and
//! every request is answered within the client's 30 s bound. A small generator of our
//! own: the routes have no OpenAPI document for a tool such as schemathesis to read.

mod common;

use std::time::Duration;

use base64::Engine;
use common::Server;
use serde_json::{Value, json};

/// xorshift64*: enough randomness for inputs, and the same run from the same seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// Strings that have broken parsers elsewhere: empty, huge, control characters, secret
/// words with separators, escapes, traversal, numbers out of range, odd Unicode.
const STRINGS: &[&str] = &[
    "",
    " ",
    "a",
    "n1",
    "fake-hardware",
    "manage",
    "provide",
    "active",
    "deleted",
    "power on",
    "CUSTOM_A",
    "x\r\nforged: 1",
    "\u{1b}[31m",
    "password=hunter2 token='x",
    "{\"auth_token\": \"",
    "..",
    "../../etc/passwd",
    "%00",
    "%2e%2e%2f",
    "-1",
    "0",
    "1e309",
    "18446744073709551616",
    "ñ🦀\u{200b}",
    "52:54:00:00:00:01",
    "12121212-3434-4565-8787-909090909090",
    "http://192.0.2.1:9/x?password=y",
    "{name}",
    "\\",
    "'",
    "\"",
];

const KEYS: &[&str] = &[
    "driver",
    "name",
    "uuid",
    "target",
    "op",
    "path",
    "value",
    "address",
    "node_uuid",
    "node_id",
    "resource_class",
    "steps",
    "clean_steps",
    "deploy_steps",
    "interface",
    "step",
    "args",
    "priority",
    "traits",
    "extra",
    "driver_info",
    "properties",
    "inventory",
    "interfaces",
    "mac_address",
    "callback_url",
    "agent_token",
    "agent_version",
    "boot_device",
    "public",
    "owner",
    "candidate_nodes",
    "configdrive",
];

const PARAMS: &[&str] = &[
    "fields",
    "limit",
    "marker",
    "sort_key",
    "sort_dir",
    "detail",
    "driver",
    "provision_state",
    "maintenance",
    "associated",
    "resource_class",
    "description_contains",
    "addresses",
    "node_uuid",
    "node",
    "address",
    "chassis_uuid",
    "instance_uuid",
    "conductor_group",
    "owner",
    "lessee",
    "shard",
    "type",
    "state",
    "x",
];

const VERSIONS: &[&str] = &[
    "latest", "1.1", "1.22", "1.61", "1.84", "1.115", "1.116", "1.999", "2.0", "0.9", "1.", "1",
    "abc", "", "1.61.1", "-1.5",
];

fn string(r: &mut Rng) -> String {
    match r.below(10) {
        0 => "x".repeat(r.below(70_000)),
        1 => "password:".repeat(r.below(8_000)),
        _ => r.pick(STRINGS).to_string(),
    }
}

fn value(r: &mut Rng, depth: u32) -> Value {
    match r.below(if depth > 4 { 5 } else { 8 }) {
        0 => Value::Null,
        1 => json!(r.chance(50)),
        2 => json!(r.next() as i64),
        3 => json!((r.next() % 1000) as f64 / 7.0),
        4 => json!(string(r)),
        5 => Value::Array((0..r.below(4)).map(|_| value(r, depth + 1)).collect()),
        _ => {
            let mut m = serde_json::Map::new();
            for _ in 0..r.below(6) {
                let k = if r.chance(80) {
                    r.pick(KEYS).to_string()
                } else {
                    string(r)
                };
                m.insert(k, value(r, depth + 1));
            }
            Value::Object(m)
        }
    }
}

/// A body: most often JSON shaped like the API's (objects with its keys, JSON Patch
/// documents), sometimes not JSON at all.
fn body(r: &mut Rng) -> Vec<u8> {
    match r.below(12) {
        0 => Vec::new(),
        1 => b"{".to_vec(),
        2 => vec![0xff, 0xfe, b'{', b'}'],
        3 => format!("{}{}", "[".repeat(300), "]".repeat(300)).into_bytes(),
        4 => b"{\"a\": \"\\u0000\"}".to_vec(),
        5 => {
            let ops: Vec<Value> = (0..r.below(4))
                .map(|_| {
                    json!({"op": r.pick(&["add", "replace", "remove", "move", "test"]),
                           "path": format!("/{}/{}", r.pick(KEYS), r.pick(STRINGS)),
                           "value": value(r, 2)})
                })
                .collect();
            serde_json::to_vec(&ops).unwrap()
        }
        _ => serde_json::to_vec(&value(r, 0)).unwrap(),
    }
}

/// A path from the route templates (every route below `/v1`, discovery and the
/// operations endpoints), its placeholders filled with real identifiers or junk.
fn path<'t>(r: &mut Rng, templates: &[&'t str], real: &[String]) -> (&'t str, String) {
    let t: &'t str = match r.below(20) {
        0 => "/",
        1 => "/v1",
        2 => "/healthz",
        3 => "/metrics",
        _ => templates[r.below(templates.len())],
    };
    let mut p = if t.starts_with("/v1")
        || !t.starts_with('/')
        || ["/", "/healthz", "/metrics"].contains(&t)
    {
        t.to_string()
    } else {
        format!("/v1{t}")
    };
    while let Some(start) = p.find('{') {
        let Some(len) = p[start..].find('}') else {
            break;
        };
        let fill = if r.chance(60) {
            r.pick(real).clone()
        } else {
            ironic_model::percent::encode_list(&string(r))
        };
        let fill = &fill[..fill.len().min(200)];
        p.replace_range(start..=start + len, fill);
    }
    if r.chance(40) {
        let q: Vec<String> = (0..1 + r.below(3))
            .map(|_| {
                format!(
                    "{}={}",
                    r.pick(PARAMS),
                    ironic_model::percent::encode_list(
                        &string(r)[..].chars().take(300).collect::<String>()
                    )
                )
            })
            .collect();
        p.push('?');
        p.push_str(&q.join("&"));
    }
    (t, p)
}

/// Sends `count` random requests; returns the ones answered 5xx (but a documented 503).
async fn run(s: &Server, seed: u64, count: usize, real: &[String]) -> Vec<String> {
    let templates = ironic_api::route_paths();
    let mut r = Rng(seed | 1);
    let mut bad = Vec::new();
    let mut seen = std::collections::BTreeMap::<u16, usize>::new();
    let mut served = std::collections::HashMap::<&str, Vec<&str>>::new();
    for i in 0..count {
        let (template, p) = path(&mut r, &templates, real);
        // Mostly a method the route has answered something other than 405 to before.
        let methods = served.entry(template).or_default();
        let method = if !methods.is_empty() && r.chance(75) {
            *r.pick(methods)
        } else {
            *r.pick(&["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"])
        };

        let mut headers: Vec<(&str, String)> = Vec::new();
        if r.chance(85) {
            // Mostly a version the API serves, so that requests reach the handlers.
            let v = if r.chance(80) {
                r.pick(&VERSIONS[..6])
            } else {
                r.pick(VERSIONS)
            };
            headers.push(("X-OpenStack-Ironic-API-Version", v.to_string()));
        }
        if r.chance(10) {
            headers.push((
                "OpenStack-API-Version",
                format!("baremetal {}", r.pick(VERSIONS)),
            ));
        }
        if r.chance(30) {
            let creds = format!(
                "{}:{}",
                r.pick(&["admin", "", "x\r\ny", "nova"]),
                string(&mut r)
            );
            let creds = &creds[..creds.len().min(2000)];
            let v = match r.below(3) {
                0 => format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode(creds)
                ),
                1 => "Basic !!!".to_string(),
                _ => "Bearer x".to_string(),
            };
            headers.push(("Authorization", v));
        }
        let b = matches!(method, "POST" | "PUT" | "PATCH").then(|| body(&mut r));
        let resp = s.raw(method, &p, &headers, b.as_deref()).await;
        *seen.entry(resp.status).or_default() += 1;
        let methods = served.entry(template).or_default();
        if resp.status != 405 && !methods.contains(&method) {
            methods.push(method);
        }
        let documented_503 = resp.status == 503
            && ["busy", "conductor", "took too long", "not carried out"]
                .iter()
                .any(|w| resp.body.contains(w));
        if resp.status == 0 || (resp.status >= 500 && !documented_503) {
            let shown: String = resp.body.chars().take(300).collect();
            bad.push(format!(
                "#{i} {method} {} {headers:?} body {:?} -> {} {shown}",
                &p[..p.len().min(300)],
                b.as_deref()
                    .map(|b| String::from_utf8_lossy(&b[..b.len().min(200)]).into_owned()),
                resp.status
            ));
        }
    }
    // What the run reached, for whoever reads the test's output.
    println!("seed {seed}: {count} requests answered {seen:?}");
    bad
}

/// Real objects for the paths to name, so that the handlers behind the lookups run too.
async fn objects(s: &Server) -> Vec<String> {
    let v = "1.115";
    let n = s
        .node(json!({"driver": "fake-hardware", "name": "n1", "resource_class": "rc"}))
        .await;
    let node = n["uuid"].as_str().unwrap().to_string();
    let port = s
        .post(
            "/v1/ports",
            v,
            &json!({"address": "52:54:00:00:00:01", "node_uuid": node}),
        )
        .await
        .json()["uuid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let chassis = s.post("/v1/chassis", v, &json!({})).await.json()["uuid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let r = s
        .post(
            "/v1/deploy_templates",
            v,
            &json!({"name": "CUSTOM_A", "steps": [
                {"interface": "deploy", "step": "sleep", "args": {"seconds": 0}, "priority": 10}]}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    vec![
        node,
        "n1".into(),
        port,
        chassis,
        "CUSTOM_A".into(),
        "fake-hardware".into(),
    ]
}

fn seed() -> u64 {
    std::env::var("IRONIC_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x0001_e01c_5eed)
}

fn count(default: usize) -> usize {
    std::env::var("IRONIC_FUZZ_REQUESTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_requests_to_every_route_get_no_server_error() {
    let s = common::start(common::Backend::Sqlite).await;
    let real = objects(&s).await;
    let seed = seed();
    let bad = run(&s, seed, count(1500), &real).await;
    assert!(
        bad.is_empty(),
        "seed {seed}: {} server errors:\n{}",
        bad.len(),
        bad.join("\n")
    );
    let r = s.call("GET", "/healthz", None, None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    s.stop().await;
}

/// The same with `http_basic`: junk credentials of every shape, and the public routes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_requests_with_http_basic_get_no_server_error() {
    let (s, dir) = common::start_http_basic(common::Backend::Sqlite, |c| {
        c.api.max_failed_logins = 0;
        c.api.ramdisk_requests_per_second = 0;
    })
    .await;
    let seed = seed().wrapping_add(1);
    let real = vec!["n1".to_string(), "fake-hardware".to_string()];
    let bad = run(&s, seed, count(400), &real).await;
    assert!(
        bad.is_empty(),
        "seed {seed}: {} server errors:\n{}",
        bad.len(),
        bad.join("\n")
    );
    tokio::time::timeout(Duration::from_secs(5), s.stop())
        .await
        .expect("stops");
    let _ = std::fs::remove_dir_all(dir);
}
