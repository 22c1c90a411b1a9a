#![allow(clippy::unwrap_used)]
//! What operators watch and what the service survives: `/metrics` after real traffic
//! (scraped and parsed), `/healthz` and `/readyz` (503 while the database is
//! unreachable, 200 again after), a database outage while a node lock is held (the
//! lock is released once the database is back, nothing stays stuck, no restart), and
//! the HTTP limits (concurrency limit with 503 + `Retry-After`, header-read and request
//! timeouts).

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::procs::Cluster;
use common::proxy::Proxy;
use common::{Backend, Server, until};
use ironic_db::testing::TestDb;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const V: &str = "1.60";

/// One sample of the Prometheus text format: name, labels, value.
type Sample = (String, BTreeMap<String, String>, f64);

fn parse_metrics(text: &str) -> Vec<Sample> {
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap();
        let value: f64 = value.parse().unwrap_or_else(|_| panic!("a number: {line}"));
        let (name, labels) = match series.split_once('{') {
            Some((n, rest)) => {
                let body = rest.strip_suffix('}').unwrap();
                let mut labels = BTreeMap::new();
                // Values are quoted and ours hold no `",`.
                for pair in body.split("\",") {
                    if pair.is_empty() {
                        continue;
                    }
                    let (k, v) = pair.split_once("=\"").unwrap();
                    labels.insert(k.to_string(), v.trim_end_matches('"').to_string());
                }
                (n.to_string(), labels)
            }
            None => (series.to_string(), BTreeMap::new()),
        };
        out.push((name, labels, value));
    }
    out
}

/// The samples of `name` whose labels include `want`.
fn matching<'a>(
    samples: &'a [Sample],
    name: &'a str,
    want: &'a [(&str, &str)],
) -> impl Iterator<Item = &'a Sample> {
    samples.iter().filter(move |(n, l, _)| {
        n == name
            && want
                .iter()
                .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
    })
}

/// The sum of the samples of `name` whose labels include `want`.
fn total(samples: &[Sample], name: &str, want: &[(&str, &str)]) -> f64 {
    matching(samples, name, want).map(|(_, _, v)| v).sum()
}

/// Whether there is such a sample at all (a gauge at 0 sums to 0 too).
fn has(samples: &[Sample], name: &str, want: &[(&str, &str)]) -> bool {
    matching(samples, name, want).next().is_some()
}

async fn scrape(s: &Server) -> Vec<Sample> {
    let r = s.call("GET", "/metrics", None, None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        r.headers
            .iter()
            .any(|(k, v)| k.eq_ignore_ascii_case("content-type") && v.starts_with("text/plain")),
        "{:?}",
        r.headers
    );
    parse_metrics(&r.body)
}

/// Traffic every family should see: nodes created, changed, made available and
/// allocated.
async fn traffic(s: &Server) {
    common::available_nodes(s, "rc-m", 3, 3).await;
    let r = s
        .patch(
            "/v1/nodes/rc-m-0",
            V,
            &json!([{"op": "add", "path": "/extra/x", "value": 1}]),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = s
        .post("/v1/allocations", V, &json!({"resource_class": "rc-m"}))
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let uuid = r.json()["uuid"].as_str().unwrap().to_string();
    common::check_allocations(s, &[uuid], 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_in_one_metrics_and_health() {
    let s = common::start(Backend::Sqlite).await;
    for path in ["/healthz", "/readyz"] {
        let r = s.call("GET", path, None, None).await;
        assert_eq!(r.status, 200, "{path}: {}", r.body);
    }
    let r = s.call("GET", "/readyz", None, None).await;
    assert!(
        r.body.contains("database: ok") && r.body.contains("schema: ok"),
        "{}",
        r.body
    );
    traffic(&s).await;
    let m = scrape(&s).await;
    assert!(
        total(
            &m,
            "ironic_api_requests_total",
            &[
                ("route", "/v1/nodes"),
                ("method", "POST"),
                ("status", "201")
            ]
        ) >= 3.0
    );
    assert!(
        total(
            &m,
            "ironic_api_requests_total",
            &[
                ("route", "/v1/nodes/{ident}"),
                ("method", "PATCH"),
                ("status", "200")
            ]
        ) >= 1.0
    );
    assert!(
        total(
            &m,
            "ironic_api_request_duration_seconds_count",
            &[("route", "/v1/allocations"), ("method", "POST")]
        ) >= 1.0
    );
    assert!(
        total(
            &m,
            "ironic_api_request_duration_seconds_bucket",
            &[("le", "+Inf")]
        ) >= 1.0
    );
    assert!(
        total(
            &m,
            "ironic_rpc_calls_total",
            &[("method", "create_node"), ("outcome", "ok")]
        ) >= 3.0
    );
    assert!(
        total(
            &m,
            "ironic_rpc_call_duration_seconds_count",
            &[("method", "update_node")]
        ) >= 1.0
    );
    assert!(total(&m, "ironic_allocations_total", &[("outcome", "active")]) >= 1.0);
    assert!(total(&m, "ironic_allocation_duration_seconds_count", &[]) >= 1.0);
    assert!(
        total(
            &m,
            "ironic_node_lock_wait_seconds_count",
            &[("outcome", "acquired")]
        ) >= 1.0
    );
    assert!(total(&m, "ironic_periodic_runs_total", &[("task", "heartbeat")]) >= 1.0);
    // A task that ran has its gauge (its values: `work.rs`' unit test).
    assert!(has(&m, "ironic_periodic_running", &[("task", "heartbeat")]));
    assert!(
        total(
            &m,
            "ironic_periodic_duration_seconds_count",
            &[("task", "heartbeat")]
        ) >= 1.0
    );
    assert!(total(&m, "ironic_conductors", &[("state", "alive")]) >= 1.0);
    // Pool gauges come every 5 s; the nodes this conductor owns every 15 s (the first
    // right at start, before any node existed).
    until("pool and node gauges", Duration::from_secs(30), || async {
        let m = scrape(&s).await;
        total(&m, "ironic_db_pool_connections", &[("state", "max")]) >= 1.0
            && total(
                &m,
                "ironic_conductor_nodes",
                &[("provision_state", "available"), ("maintenance", "false")],
            ) >= 2.0
    })
    .await;
    s.stop().await;
}

/// The split deployment's processes: the API's `/metrics` (calls as the caller sees
/// them) and a conductor's own listener (calls as handled, the bus, its nodes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_metrics_and_health_on_every_process() {
    let t = TestDb::postgres().await.unwrap();
    let cluster = Cluster::new(&t.url, &[("IRONIC_CONDUCTOR__SHUTDOWN_SETTLE_TIME", "0")]);
    let cond = cluster.conductor("ops-a");
    assert!(
        cond.wait_log("ironic-conductor serving", Duration::from_secs(30)),
        "{}",
        cond.log_text()
    );
    let ops: std::net::SocketAddr = cond
        .log_text()
        .lines()
        .find(|l| l.contains("serving /healthz, /readyz and /metrics"))
        .and_then(|l| l.split("addr=").nth(1))
        .and_then(|a| a.split_whitespace().next())
        .unwrap()
        .parse()
        .unwrap();
    let (_api_proc, port) = cluster.api();
    let api = Server::client(format!("127.0.0.1:{port}").parse().unwrap());
    let conductor = Server::client(ops);
    until("the conductor ready", Duration::from_secs(15), || async {
        conductor.call("GET", "/readyz", None, None).await.status == 200
    })
    .await;
    let r = conductor.call("GET", "/readyz", None, None).await;
    assert!(
        r.body.contains("message bus: ok") && r.body.contains("heartbeat: ok"),
        "{}",
        r.body
    );
    let r = api.call("GET", "/readyz", None, None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains("message bus: ok"), "{}", r.body);
    until(
        "the API sees the conductor",
        Duration::from_secs(15),
        || async { api.get("/v1/conductors", V).await.body.contains("ops-a") },
    )
    .await;
    traffic(&api).await;
    let m = scrape(&api).await;
    assert!(
        total(
            &m,
            "ironic_rpc_calls_total",
            &[("method", "create_allocation"), ("outcome", "ok")]
        ) >= 1.0
    );
    assert!(
        total(
            &m,
            "ironic_api_requests_total",
            &[("route", "/v1/allocations")]
        ) >= 1.0
    );
    assert!(total(&m, "ironic_conductors", &[("state", "alive")]) >= 1.0);
    let m = scrape(&conductor).await;
    assert!(
        total(
            &m,
            "ironic_rpc_handled_total",
            &[("method", "create_node"), ("outcome", "ok")]
        ) >= 3.0
    );
    assert!(
        total(
            &m,
            "ironic_rpc_handled_duration_seconds_count",
            &[("method", "update_node")]
        ) >= 1.0
    );
    assert!(total(&m, "ironic_allocations_total", &[("outcome", "active")]) >= 1.0);
    assert!(
        total(
            &m,
            "ironic_periodic_runs_total",
            &[("task", "heartbeat"), ("outcome", "ok")]
        ) >= 1.0
    );
    assert!(
        total(&m, "ironic_api_requests_total", &[]) == 0.0,
        "the conductor serves no API"
    );
    t.cleanup().await;
}

/// PostgreSQL becomes unreachable (a cut between the service and the database) while
/// a deploy step waits (the node unlocked in `deploy wait`) and its time comes: `/readyz`
/// turns 503, the step's continuation cannot take the node lock, and once the database
/// is back the node's owner continues the wait (the step engine's check), the deploy
/// ends, `/readyz` is 200 again, and the same process serves changes: no restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_outage_during_a_step_wait_leaves_nothing_stuck() {
    let t = TestDb::postgres().await.unwrap();
    let proxy = Proxy::start("127.0.0.1:5432".parse().unwrap()).await;
    let url = proxy.url(&t.url);
    let s = common::start_with(Backend::Postgres, |c| {
        c.database.url = url.clone();
        c.database.acquire_timeout = 2;
        c.conductor.check_provision_state_interval = 1;
    })
    .await;
    let r = s
        .post(
            "/v1/deploy_templates",
            V,
            &json!({"name": "CUSTOM_SLOW", "steps": [
                {"interface": "deploy", "step": "sleep", "args": {"seconds": 4}, "priority": 150}]}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let n = s
        .node(json!({"driver": "fake-hardware", "name": "held", "automated_clean": false}))
        .await;
    let uuid = n["uuid"].as_str().unwrap().to_string();
    let r = s
        .raw(
            "PUT",
            "/v1/nodes/held/traits",
            &[("X-OpenStack-Ironic-API-Version", V.to_string())],
            Some(json!({"traits": ["CUSTOM_SLOW"]}).to_string().as_bytes()),
        )
        .await;
    assert_eq!(r.status, 204, "{}", r.body);
    assert_eq!(s.provision_to(V, "held", "manage").await.status, 202);
    s.wait_state(V, "held", "manageable").await;
    assert_eq!(s.provision_to(V, "held", "provide").await.status, 202);
    s.wait_state(V, "held", "available").await;
    let r = s
        .patch(
            "/v1/nodes/held",
            V,
            &json!([{"op": "add", "path": "/instance_info/traits", "value": ["CUSTOM_SLOW"]}]),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = s.provision_to(V, "held", "active").await;
    assert_eq!(r.status, 202, "{}", r.body);
    // The test's own connection goes straight to PostgreSQL, not through the proxy.
    let direct = t.db.clone();
    let node = || {
        let (db, u) = (direct.clone(), uuid.clone());
        async move { db.node_by_uuid(&u).await.unwrap().unwrap() }
    };
    until(
        "the slow deploy step waits, unlocked",
        Duration::from_secs(20),
        || async {
            let n = node().await;
            n.reservation.is_none()
                && n.provision_state.as_str() == "wait call-back"
                && n.deploy_step.get("step") == Some(&json!("sleep"))
        },
    )
    .await;
    let lock_errors = |samples: &[Sample]| {
        total(
            samples,
            "ironic_node_lock_wait_seconds_count",
            &[("outcome", "error")],
        )
    };
    let errors_before = lock_errors(&scrape(&s).await);
    proxy.cut();
    until(
        "/readyz is 503 without the database",
        Duration::from_secs(15),
        || async { s.call("GET", "/readyz", None, None).await.status == 503 },
    )
    .await;
    let r = s.call("GET", "/readyz", None, None).await;
    assert!(r.body.contains("database: "), "{}", r.body);
    // A request that needs the database gets a clear 503, not a 500.
    let r = s.get("/v1/nodes/held", V).await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(r.body.contains("The database is unavailable"), "{}", r.body);
    assert!(!r.body.contains("database: ok"), "{}", r.body);
    // The step's time comes: its continuation cannot take the lock.
    until(
        "the continuation fails to take the lock",
        Duration::from_secs(30),
        || async { lock_errors(&scrape(&s).await) > errors_before },
    )
    .await;
    assert_eq!(node().await.provision_state.as_str(), "wait call-back");
    proxy.restore();
    until(
        "the wait continued and the deploy ended",
        Duration::from_secs(30),
        || async {
            let n = node().await;
            n.reservation.is_none() && n.provision_state.as_str() == "active"
        },
    )
    .await;
    until("/readyz is 200 again", Duration::from_secs(15), || async {
        s.call("GET", "/readyz", None, None).await.status == 200
    })
    .await;
    let r = s
        .patch(
            "/v1/nodes/held",
            V,
            &json!([{"op": "add", "path": "/extra/after", "value": true}]),
        )
        .await;
    assert_eq!(r.status, 200, "the same process serves changes: {}", r.body);
    eprintln!("after the outage: {}", node().await.provision_state);
    s.stop().await;
    t.cleanup().await;
}

/// A request that trickles its body holds its slot: with one slot, the next request
/// gets 503 with `Retry-After` at once; past `request_timeout` the trickler gets 503;
/// a client that does not finish its headers within `header_read_timeout` is cut off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_limits() {
    let s = common::start_with(Backend::Sqlite, |c| {
        c.api.max_concurrent_requests = 1;
        // Long enough that a loaded machine (the whole suite on 2 cores) parses the
        // trickler's headers in time, short enough for the lazy client's bound below.
        c.api.header_read_timeout = 3;
        c.amqp.call_timeout = 1;
        c.api.request_timeout = 6;
    })
    .await;
    let head = format!(
        "POST /v1/nodes HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: 100\r\nX-OpenStack-Ironic-API-Version: {V}\r\n\r\n{{\"driver\":",
        s.addr
    );
    let shed = |r: &common::Resp| {
        r.status == 503
            && r.headers
                .iter()
                .any(|(k, v)| k.eq_ignore_ascii_case("retry-after") && v == "1")
            && r.body.contains("too many requests")
    };
    // While the trickler holds the only slot, another request is shed. A request that
    // reaches the server before the trickler's headers are parsed takes the slot first
    // and the trickler is the one shed: then it is answered at once, and a new one
    // tries again (bounded).
    let mut held = None;
    'tries: for _ in 0..20 {
        let mut slow = tokio::net::TcpStream::connect(s.addr).await.unwrap();
        slow.write_all(head.as_bytes()).await.unwrap();
        for _ in 0..20 {
            if shed(&s.call("GET", "/v1/nodes", Some(V), None).await) {
                held = Some(slow);
                break 'tries;
            }
            let mut b = [0u8; 1];
            if tokio::time::timeout(Duration::from_millis(100), slow.peek(&mut b))
                .await
                .is_ok()
            {
                continue 'tries; // answered or closed: it never held the slot
            }
        }
    }
    let mut slow = held.expect("a request shed while another holds the only slot");
    // The trickler runs out of time.
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), slow.read_to_end(&mut buf))
        .await
        .expect("answered")
        .unwrap();
    let text = String::from_utf8_lossy(&buf);
    assert!(text.starts_with("HTTP/1.1 503"), "{text}");
    assert!(text.contains("took too long"), "{text}");
    // The slot is free again.
    let r = s.get("/v1/nodes", V).await;
    assert_eq!(r.status, 200, "{}", r.body);
    // Headers never finished: the connection is closed (a server without a header
    // timeout would keep it open, and the read below would time out), with no answer
    // or a 4xx one.
    let mut lazy = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    lazy.write_all(b"GET /v1/nodes HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let n = tokio::time::timeout(Duration::from_secs(10), lazy.read_to_end(&mut buf))
        .await
        .expect("closed by the server");
    let text = String::from_utf8_lossy(&buf);
    assert!(
        n.is_err() || text.is_empty() || text.starts_with("HTTP/1.1 4"),
        "{text}"
    );
    s.stop().await;
}

/// A process that cannot serve is never counted as a live conductor. The defect: three
/// conductors started on one host without distinct `[conductor] http_listen` ports; two
/// registered, failed to bind 127.0.0.1:6388 and exited, and the API counted them alive
/// until their heartbeats timed out. Now every listener is bound (and the API's users
/// read) before the conductor registers: a conductor whose ops port is taken, an
/// all-in-one whose API port is taken or whose user file is missing, fail to start and
/// leave no live row in the conductors table; a conductor that can serve registers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_that_cannot_listen_never_counts_as_a_conductor() {
    use ironic::{Role, StartError};
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap();
    let t = TestDb::postgres().await.unwrap();
    let bus = ironic_rpc::testing::TestBus::new().expect("a RabbitMQ vhost");
    let mut cfg = ironic_config::Config::default();
    cfg.database.url = t.url.clone();
    cfg.amqp.url = bus.url.clone();
    cfg.log.filter = "warn".into();
    cfg.conductor.shutdown_settle_time = 0;
    cfg.api.listen = "127.0.0.1:0".parse().unwrap();
    cfg.conductor.http_listen = Some("127.0.0.1:0".parse().unwrap());
    let live = |host: &'static str| {
        let db = t.db.clone();
        async move {
            db.conductor_list()
                .await
                .unwrap()
                .iter()
                .any(|c| c.hostname == host && c.online)
        }
    };

    // A conductor whose ops port is taken.
    let mut c = cfg.clone();
    c.default.host = "ops-port-taken".into();
    c.conductor.http_listen = Some(port);
    match ironic::start_role(c, Role::Conductor).await {
        Err(StartError::Listen { addr, .. }) => assert_eq!(addr, port),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("started on a taken port"),
    }
    assert!(!live("ops-port-taken").await);

    // An all-in-one whose API port is taken.
    let mut c = cfg.clone();
    c.default.host = "api-port-taken".into();
    c.api.listen = port;
    assert!(matches!(
        ironic::start_role(c, Role::AllInOne).await,
        Err(StartError::Listen { .. })
    ));
    assert!(!live("api-port-taken").await);

    // An all-in-one whose user file is missing.
    let mut c = cfg.clone();
    c.default.host = "no-user-file".into();
    c.api.auth_strategy = ironic_config::AuthStrategy::HttpBasic;
    c.api.http_basic_auth_user_file = Some("/nonexistent/htpasswd".into());
    c.api.http_basic_roles_file = Some("/nonexistent/roles".into());
    assert!(matches!(
        ironic::start_role(c, Role::AllInOne).await,
        Err(StartError::AuthFile(_))
    ));
    assert!(!live("no-user-file").await);

    // With its ports free, a conductor registers; stopped, it is gone.
    let mut c = cfg.clone();
    c.default.host = "serving".into();
    let running = ironic::start_role(c, Role::Conductor).await.unwrap();
    assert!(live("serving").await);
    assert!(running.ops_addr.is_some());
    running.shutdown().await;
    assert!(!live("serving").await);
    drop(taken);
    t.cleanup().await;
}
