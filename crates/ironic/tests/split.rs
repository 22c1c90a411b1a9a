#![allow(clippy::unwrap_used)]
//! End to end, split deployment: real `ironic-api` and `ironic-conductor` processes on
//! PostgreSQL and RabbitMQ (a database and a vhost of their own). Nodes spread over the
//! conductors by the hash ring; a killed conductor's nodes move to the survivors and
//! come back when it returns; a graceful stop hands them over at once; a broker that
//! drops every connection fails the calls in flight (no hang) and the cluster recovers
//! by itself.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::procs::{Cluster, Proc};
use common::{Server, until};
use ironic_db::testing::TestDb;
use serde_json::{Value, json};

const V: &str = "1.51";
const HEARTBEAT_INTERVAL: u64 = 1;
const HEARTBEAT_TIMEOUT: u64 = 6;

fn owners(list: &Value) -> BTreeMap<String, String> {
    list["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["uuid"].as_str().unwrap().to_string(),
                n["conductor"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

async fn node_owners(api: &Server) -> BTreeMap<String, String> {
    let r = api
        .get("/v1/nodes?fields=uuid,conductor&limit=1000", V)
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    owners(&r.json())
}

fn created_by(p: &Proc) -> BTreeSet<String> {
    p.log_text()
        .lines()
        .filter(|l| l.contains("node created"))
        .filter_map(|l| l.split("node=").nth(1))
        .map(|r| r.split_whitespace().next().unwrap_or("").to_string())
        .collect()
}

async fn alive_conductors(api: &Server) -> BTreeSet<String> {
    let r = api.get("/v1/conductors", V).await;
    r.json()["conductors"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|c| c["alive"] == json!(true))
                .map(|c| c["hostname"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// Starts conductors `hosts` and one API process; returns them once the API sees every
/// conductor alive.
async fn start_cluster(cluster: &Cluster, hosts: &[&str]) -> (Vec<Proc>, Proc, Server) {
    start_split(cluster, cluster, hosts).await
}

/// As [`start_cluster`], with the conductors' settings from `conductors` and the API's
/// from `apis` (one database and vhost; say, each its own RabbitMQ user).
async fn start_split(
    conductors: &Cluster,
    apis: &Cluster,
    hosts: &[&str],
) -> (Vec<Proc>, Proc, Server) {
    let cluster = apis;
    let conductors: Vec<Proc> = hosts.iter().map(|h| conductors.conductor(h)).collect();
    for c in &conductors {
        assert!(
            c.wait_log("ironic-conductor serving", Duration::from_secs(30)),
            "{} did not start:\n{}",
            c.name,
            c.log_text()
        );
    }
    let (api_proc, port) = cluster.api();
    let api = Server::client(format!("127.0.0.1:{port}").parse().unwrap());
    until("every conductor alive", Duration::from_secs(15), || async {
        alive_conductors(&api).await.len() == hosts.len()
    })
    .await;
    // The API routes by its own view of the ring, refreshed on a timer: the conductors'
    // rows may say alive before it has taken them in.
    until(
        "every conductor in the API's ring",
        Duration::from_secs(15),
        || async {
            let r = api.get("/v1/drivers", V).await;
            r.json()["drivers"].as_array().is_some_and(|ds| {
                ds.iter().any(|d| {
                    d["name"] == json!("fake-hardware")
                        && d["hosts"].as_array().map_or(0, Vec::len) == hosts.len()
                })
            })
        },
    )
    .await;
    (conductors, api_proc, api)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_conductors_share_nodes_and_take_over_after_a_crash() {
    let t = TestDb::postgres().await.unwrap();
    let hi = HEARTBEAT_INTERVAL.to_string();
    let ht = HEARTBEAT_TIMEOUT.to_string();
    let cluster = Cluster::new(
        &t.url,
        &[
            ("IRONIC_CONDUCTOR__HEARTBEAT_INTERVAL", &hi),
            ("IRONIC_CONDUCTOR__HEARTBEAT_TIMEOUT", &ht),
            ("IRONIC_CONDUCTOR__SHUTDOWN_SETTLE_TIME", "1"),
            // A call that still reaches the dying queue right after the kill is lost
            // with it: its caller waits this long, then retries.
            ("IRONIC_AMQP__CALL_TIMEOUT", "2"),
        ],
    );
    let hosts = ["cond-a", "cond-b", "cond-c"];
    let (mut conductors, api_proc, api) = start_cluster(&cluster, &hosts).await;

    // 300 nodes through the API: each lands on the conductor the ring names, and that
    // conductor is the one that handled the create.
    let mut expected: BTreeMap<String, String> = BTreeMap::new();
    for i in 0..300 {
        let n = api
            .node(json!({"driver": "fake-hardware", "name": format!("n{i}")}))
            .await;
        expected.insert(
            n["uuid"].as_str().unwrap().into(),
            n["conductor"].as_str().unwrap().into(),
        );
    }
    assert_eq!(node_owners(&api).await, expected);
    for (i, h) in hosts.iter().enumerate() {
        let mine: BTreeSet<String> = expected
            .iter()
            .filter(|(_, o)| o == h)
            .map(|(u, _)| u.clone())
            .collect();
        assert!(
            mine.len() >= 40,
            "{h} owns only {} of 300 nodes",
            mine.len()
        );
        assert_eq!(
            created_by(&conductors[i]),
            mine,
            "{h} created exactly its nodes"
        );
    }
    let b_nodes: BTreeSet<String> = expected
        .iter()
        .filter(|(_, o)| *o == "cond-b")
        .map(|(u, _)| u.clone())
        .collect();

    // kill -9 one conductor: within heartbeat_timeout + one heartbeat interval (+ the
    // API's one-second refresh) its nodes map to the survivors and calls succeed.
    // An operation of cond-b in progress: its lock on one of its nodes.
    let locked = b_nodes.iter().nth(1).unwrap().clone();
    let locked_id = t.db.node_by_uuid(&locked).await.unwrap().unwrap().id;
    t.db.node_reserve(locked_id, "cond-b").await.unwrap();
    conductors[1].kill9();
    let killed_at = Instant::now();
    // Before the heartbeat times out, calls for its nodes already succeed: its queue
    // is gone, so the API sends them to the next conductor on the ring.
    let first = b_nodes.iter().next().unwrap().clone();
    let served = until(
        "a call for a dead conductor's node",
        Duration::from_secs(5),
        || async {
            let r = api
                .patch(
                    &format!("/v1/nodes/{first}"),
                    V,
                    &json!([{"op": "add", "path": "/extra/early", "value": 1}]),
                )
                .await;
            r.status == 200
        },
    )
    .await;
    eprintln!(
        "first successful call for a killed conductor's node: {} ms",
        served.as_millis()
    );
    // Served because the API re-routed the call when the owner's queue was gone, not
    // because the ring changed after the heartbeat timeout.
    assert!(
        api_proc.wait_log(
            "owner unreachable; calling the next conductor on the ring",
            Duration::from_secs(10)
        ),
        "re-routed to the next conductor on the ring"
    );
    let took = until(
        "cond-b's nodes move to the survivors",
        Duration::from_secs(HEARTBEAT_TIMEOUT + 10),
        || async {
            let o = node_owners(&api).await;
            b_nodes
                .iter()
                .all(|u| matches!(o[u].as_str(), "cond-a" | "cond-c"))
        },
    )
    .await;
    let took = killed_at.elapsed().max(took);
    eprintln!("take-over after kill -9: {} ms", took.as_millis());

    // The new owner releases the dead conductor's lock on its next heartbeat tick.
    until(
        "the dead conductor's lock is released",
        Duration::from_secs(5),
        || async {
            t.db.node_by_id(locked_id)
                .await
                .unwrap()
                .unwrap()
                .reservation
                .is_none()
        },
    )
    .await;
    let after = node_owners(&api).await;
    for u in expected.keys().filter(|u| !b_nodes.contains(*u)) {
        assert_eq!(after[u], expected[u], "survivors keep their own nodes");
    }
    for (i, u) in b_nodes.iter().take(20).enumerate() {
        let r = api
            .patch(
                &format!("/v1/nodes/{u}"),
                V,
                &json!([{"op": "add", "path": "/extra/moved", "value": i}]),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    for (i, u) in b_nodes.iter().take(20).enumerate() {
        let n = t.db.node_by_uuid(u).await.unwrap().unwrap();
        assert_eq!(n.extra["moved"], json!(i), "the change is in the database");
        assert_eq!(n.reservation, None);
    }

    // It comes back: exactly its share returns to it, and it serves those calls.
    conductors[1] = cluster.conductor("cond-b");
    until("cond-b's nodes return", Duration::from_secs(15), || async {
        node_owners(&api).await == expected
    })
    .await;
    // It shows alive (its heartbeat is touched first thing at start) a moment before it
    // consumes its queue; a call routed meanwhile goes to the next conductor on the
    // ring, as it should. Once it serves, its calls are its own.
    assert!(
        conductors[1].wait_log("ironic-conductor serving", Duration::from_secs(15)),
        "cond-b did not start again:\n{}",
        conductors[1].log_text()
    );
    let u = b_nodes.iter().next().unwrap();
    let r = api
        .patch(
            &format!("/v1/nodes/{u}"),
            V,
            &json!([{"op": "add", "path": "/extra/back", "value": true}]),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        conductors[1].wait_log(&format!("node updated node={u}"), Duration::from_secs(5)),
        "the returning conductor handled the call"
    );

    // A graceful stop hands the nodes over long before a crash would.
    let c_nodes: BTreeSet<String> = expected
        .iter()
        .filter(|(_, o)| *o == "cond-c")
        .map(|(u, _)| u.clone())
        .collect();
    conductors[2].term();
    let stopping_at = Instant::now();
    // Calls for its nodes while it stops (settle, unbind, drain) all succeed.
    let addr = api.addr;
    let probe: Vec<String> = c_nodes.iter().take(5).cloned().collect();
    let during = tokio::spawn(async move {
        let c = Server::client(addr);
        let mut statuses = Vec::new();
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(4) {
            for u in &probe {
                let r = c
                    .patch(
                        &format!("/v1/nodes/{u}"),
                        V,
                        &json!([{"op": "add", "path": "/extra/during_stop", "value": true}]),
                    )
                    .await;
                statuses.push((r.status, r.body));
            }
        }
        statuses
    });
    let took = until(
        "cond-c's nodes move after SIGTERM",
        Duration::from_secs(HEARTBEAT_TIMEOUT + 10),
        || async {
            let o = node_owners(&api).await;
            c_nodes.iter().all(|u| o[u] != "cond-c")
        },
    )
    .await;
    let took = stopping_at.elapsed().max(took);
    eprintln!("hand-over after SIGTERM: {} ms", took.as_millis());
    // Handed over by the graceful stop (unregistered and announced), not found dead.
    assert!(conductors[2].wait_log("conductor unregistered", Duration::from_secs(30)));
    let st = conductors[2]
        .wait_exit(Duration::from_secs(30))
        .expect("cond-c exits after SIGTERM");
    assert!(st.success(), "clean exit: {st:?}");
    assert!(!t.db.conductor_get("cond-c").await.unwrap().online);
    let statuses = during.await.unwrap();
    assert!(statuses.len() >= 5, "calls were made during the stop");
    for (st, body) in &statuses {
        assert_eq!(*st, 200, "a call during a graceful stop failed: {body}");
    }
    t.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_loss_fails_calls_in_flight_and_the_cluster_recovers() {
    let t = TestDb::postgres().await.unwrap();
    let cluster = Cluster::new(
        &t.url,
        &[
            ("IRONIC_CONDUCTOR__HEARTBEAT_INTERVAL", "1"),
            ("IRONIC_CONDUCTOR__HEARTBEAT_TIMEOUT", "10"),
            // A locked node keeps an update retrying for ~6 s: a call in flight.
            ("IRONIC_CONDUCTOR__NODE_LOCKED_RETRY_ATTEMPTS", "60"),
            ("IRONIC_CONDUCTOR__NODE_LOCKED_RETRY_INTERVAL_MS", "100"),
            ("IRONIC_AMQP__CALL_TIMEOUT", "20"),
            ("IRONIC_AMQP__MAX_RECONNECT_BACKOFF", "1"),
            ("RUST_LOG", "info,ironic_conductor=debug"),
        ],
    );
    let (mut procs, mut api_proc, api) = start_cluster(&cluster, &["solo"]).await;
    let mut conductor = procs.remove(0);
    let n = api
        .node(json!({"driver": "fake-hardware", "name": "held"}))
        .await;
    let id = t.db.node_by_name("held").await.unwrap().unwrap().id;
    t.db.node_reserve(id, "someone-else").await.unwrap();

    let mut calls = Vec::new();
    for i in 0..3 {
        let addr = api.addr;
        calls.push(tokio::spawn(async move {
            let c = Server::client(addr);
            let started = Instant::now();
            let r = c
                .patch(
                    "/v1/nodes/held",
                    V,
                    &json!([{"op": "add", "path": "/extra/k", "value": i}]),
                )
                .await;
            (r, started.elapsed())
        }));
    }
    let waiting = || {
        conductor
            .log_text()
            .lines()
            .filter(|l| l.contains("node locked, retrying"))
            .filter_map(|l| l.split("request_id=").nth(1))
            .map(|r| r.split_whitespace().next().unwrap_or("").to_string())
            .collect::<BTreeSet<String>>()
            .len()
    };
    until(
        "the three calls reached the conductor",
        Duration::from_secs(10),
        || async { waiting() >= 3 },
    )
    .await;
    cluster.bus.close_connections().unwrap();
    let cut = Instant::now();
    for c in calls {
        let (r, _) = c.await.unwrap();
        assert_eq!(r.status, 503, "a call in flight fails: {}", r.body);
        assert!(r.fault().contains("lost"), "{}", r.fault());
    }
    let failed_after = cut.elapsed();
    // "lost" above, not the timeout's "No reply": they failed when the connection
    // closed (the time goes to the log).
    eprintln!(
        "calls in flight failed {} ms after the cut",
        failed_after.as_millis()
    );

    // Nobody restarts anything: both processes reconnect and calls succeed again.
    t.db.node_release(id, "someone-else").await.unwrap();
    until(
        "calls succeed after the reconnection",
        Duration::from_secs(30),
        || async {
            let r = api
                .patch(
                    "/v1/nodes/held",
                    V,
                    &json!([{"op": "add", "path": "/extra/after", "value": "yes"}]),
                )
                .await;
            r.status == 200
        },
    )
    .await;
    assert!(
        conductor.running() && api_proc.running(),
        "no process restarted"
    );
    let stored =
        t.db.node_by_uuid(n["uuid"].as_str().unwrap())
            .await
            .unwrap()
            .unwrap();
    assert_eq!(stored.extra["after"], "yes");
    assert!(
        conductor
            .log_text()
            .contains("reconnecting to the message bus")
    );
    t.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_stop_finishes_the_calls_in_hand() {
    let t = TestDb::postgres().await.unwrap();
    let cluster = Cluster::new(
        &t.url,
        &[
            ("IRONIC_CONDUCTOR__HEARTBEAT_INTERVAL", "1"),
            ("IRONIC_CONDUCTOR__HEARTBEAT_TIMEOUT", "10"),
            ("IRONIC_CONDUCTOR__NODE_LOCKED_RETRY_ATTEMPTS", "100"),
            ("IRONIC_CONDUCTOR__NODE_LOCKED_RETRY_INTERVAL_MS", "100"),
            ("RUST_LOG", "info,ironic_conductor=debug"),
        ],
    );
    let (mut procs, _api_proc, api) = start_cluster(&cluster, &["leaving"]).await;
    let mut conductor = procs.remove(0);
    api.node(json!({"driver": "fake-hardware", "name": "slow"}))
        .await;
    let id = t.db.node_by_name("slow").await.unwrap().unwrap().id;
    t.db.node_reserve(id, "someone-else").await.unwrap();
    let addr = api.addr;
    let call = tokio::spawn(async move {
        Server::client(addr)
            .patch(
                "/v1/nodes/slow",
                V,
                &json!([{"op": "add", "path": "/extra/finished", "value": true}]),
            )
            .await
    });
    assert!(conductor.wait_log("node locked, retrying", Duration::from_secs(10)));
    // SIGTERM while the call waits for the lock; the lock frees up a moment later.
    conductor.term();
    assert!(conductor.wait_log("conductor unregistered", Duration::from_secs(10)));
    // Offline but still finishing: its heartbeat keeps moving, so no peer would take it
    // for dead and release the locks of that work.
    let first = t.db.conductor_get("leaving").await.unwrap();
    assert!(!first.online);
    until(
        "the stopping conductor heartbeats",
        Duration::from_secs(5),
        || async {
            let now = t.db.conductor_get("leaving").await.unwrap();
            !now.online && now.updated_at > first.updated_at
        },
    )
    .await;
    t.db.node_release(id, "someone-else").await.unwrap();
    let r = call.await.unwrap();
    assert_eq!(r.status, 200, "the call in hand finished: {}", r.body);
    let st = conductor
        .wait_exit(Duration::from_secs(30))
        .expect("exits after finishing");
    assert!(st.success());
    let n = t.db.node_by_id(id).await.unwrap().unwrap();
    assert_eq!(n.extra["finished"], json!(true));
    assert_eq!(n.reservation, None);
    t.cleanup().await;
}

/// A conductor killed in the middle of a call and restarted at once under the same
/// name, quicker than the death verdict (a supervisor's restart): the API learns from
/// the new run's incarnation that the call died with the old run and sends it again
/// (a node update is safe to repeat) to the new run, instead of waiting for the call
/// timeout; the update is applied once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_survives_a_kill_and_an_immediate_restart() {
    let t = TestDb::postgres().await.unwrap();
    let cluster = Cluster::new(
        &t.url,
        &[
            // A generous grace (3 intervals): the restart is never mistaken for a death,
            // even on a loaded machine, so only the incarnation can tell.
            ("IRONIC_CONDUCTOR__HEARTBEAT_INTERVAL", "3"),
            ("IRONIC_CONDUCTOR__HEARTBEAT_TIMEOUT", "60"),
            ("IRONIC_CONDUCTOR__NODE_LOCKED_RETRY_ATTEMPTS", "1000"),
            ("IRONIC_CONDUCTOR__NODE_LOCKED_RETRY_INTERVAL_MS", "100"),
            // Far longer than the test waits: the answer must come from the restart.
            ("IRONIC_AMQP__CALL_TIMEOUT", "300"),
            ("IRONIC_API__REQUEST_TIMEOUT", "400"),
            ("RUST_LOG", "info,ironic_conductor=debug"),
        ],
    );
    let (mut procs, api_proc, api) = start_cluster(&cluster, &["phoenix"]).await;
    let mut first = procs.remove(0);
    api.node(json!({"driver": "fake-hardware", "name": "held"}))
        .await;
    let id = t.db.node_by_name("held").await.unwrap().unwrap().id;
    let before = t.db.conductor_get("phoenix").await.unwrap().incarnation;
    t.db.node_reserve(id, "someone-else").await.unwrap();
    let addr = api.addr;
    let call = tokio::spawn(async move {
        Server::client(addr)
            .patch(
                "/v1/nodes/held",
                V,
                &json!([{"op": "add", "path": "/extra/count", "value": 1}]),
            )
            .await
    });
    assert!(first.wait_log("node locked, retrying", Duration::from_secs(10)));
    first.kill9();
    let second = cluster.conductor("phoenix");
    assert!(
        second.wait_log("ironic-conductor serving", Duration::from_secs(30)),
        "{}",
        second.log_text()
    );
    assert_eq!(
        t.db.conductor_get("phoenix").await.unwrap().incarnation,
        before + 1
    );
    // The repeat reaches the new run, which waits for the same lock.
    assert!(
        second.wait_log("node locked, retrying", Duration::from_secs(30)),
        "the call was not sent again:\n{}",
        api_proc.log_text()
    );
    t.db.node_release(id, "someone-else").await.unwrap();
    let r = tokio::time::timeout(Duration::from_secs(60), call)
        .await
        .expect("answered long before the call timeout")
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    let n = t.db.node_by_id(id).await.unwrap().unwrap();
    assert_eq!(n.extra["count"], json!(1));
    assert_eq!(n.reservation, None);
    let log = api_proc.log_text();
    assert!(log.contains("sending it again"), "{log}");
    assert!(
        !log.contains("conductor declared dead"),
        "only the incarnation could tell: {log}"
    );
    t.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membership_changes_reach_the_api_at_once() {
    let t = TestDb::postgres().await.unwrap();
    // The API's periodic refresh is the heartbeat interval (10 s here): anything much
    // faster comes from the conductors' announcements on the bus.
    let cluster = Cluster::new(
        &t.url,
        &[
            ("IRONIC_CONDUCTOR__HEARTBEAT_INTERVAL", "10"),
            ("IRONIC_CONDUCTOR__HEARTBEAT_TIMEOUT", "30"),
            ("IRONIC_CONDUCTOR__SHUTDOWN_SETTLE_TIME", "0"),
        ],
    );
    let (_first, api_proc, api) = start_cluster(&cluster, &["first"]).await;
    const REREAD: &str = "conductor list re-read after a membership announcement";
    let rereads = || api_proc.log_text().matches(REREAD).count();
    let before = rereads();
    let mut second = cluster.conductor("second");
    assert!(second.wait_log("ironic-conductor serving", Duration::from_secs(30)));
    // The API re-read the list because of the announcement, not its periodic refresh.
    until(
        "the registration is announced",
        Duration::from_secs(15),
        || async { rereads() > before },
    )
    .await;
    let seen = until(
        "the API sees the new conductor",
        Duration::from_secs(15),
        || async { alive_conductors(&api).await.contains("second") },
    )
    .await;
    eprintln!("registration seen by the API after {} ms", seen.as_millis());

    let before = rereads();
    second.term();
    assert!(second.wait_log("conductor unregistered", Duration::from_secs(15)));
    until(
        "the unregistration is announced",
        Duration::from_secs(15),
        || async { rereads() > before },
    )
    .await;
    let gone = until("the API sees it leave", Duration::from_secs(15), || async {
        !alive_conductors(&api).await.contains("second")
    })
    .await;
    eprintln!(
        "unregistration seen by the API after {} ms",
        gone.as_millis()
    );
    assert!(
        second
            .wait_exit(Duration::from_secs(30))
            .is_some_and(|s| s.success())
    );
    t.cleanup().await;
}

/// The step engine over three conductor processes, for each flow (cleaning, deploying,
/// servicing): a waiting step gives the node lock back (the node is changed while it
/// waits), and when the conductor running the wait is killed, the node's new owner
/// continues it from the stored step: the flow ends as if nothing happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_step_holds_no_lock_and_survives_its_conductor() {
    let t = TestDb::postgres().await.unwrap();
    let cluster = Cluster::new(
        &t.url,
        &[
            ("IRONIC_CONDUCTOR__HEARTBEAT_INTERVAL", "1"),
            ("IRONIC_CONDUCTOR__HEARTBEAT_TIMEOUT", "6"),
            ("IRONIC_CONDUCTOR__CHECK_PROVISION_STATE_INTERVAL", "1"),
            ("IRONIC_AMQP__CALL_TIMEOUT", "5"),
        ],
    );
    let hosts = ["w-1", "w-2", "w-3"];
    let (mut conductors, _api_proc, api) = start_cluster(&cluster, &hosts).await;
    let v = "1.95";
    let sleep = |priority: Option<u32>| {
        let mut s = json!({"interface": "deploy", "step": "sleep", "args": {"seconds": 4}});
        if let Some(p) = priority {
            s["priority"] = json!(p);
        }
        s
    };
    let after = json!({"interface": "power", "step": "power_on"});
    // (flow, the state to start from, the request, its wait state, where it ends)
    let flows = [
        (
            "clean",
            "manageable",
            json!({"target": "clean", "clean_steps": [sleep(None), after]}),
            "clean wait",
            "manageable",
        ),
        (
            "deploy",
            "available",
            json!({"target": "active", "deploy_steps": [sleep(Some(90))]}),
            "wait call-back",
            "active",
        ),
        (
            "service",
            "active",
            json!({"target": "service", "service_steps": [sleep(None), after]}),
            "service wait",
            "active",
        ),
    ];
    for (flow, from, request, waiting, end) in flows {
        let name = format!("w-{flow}");
        let n = api
            .node(json!({"driver": "fake-hardware", "name": name, "automated_clean": false}))
            .await;
        let uuid = n["uuid"].as_str().unwrap().to_string();
        let path = format!("/v1/nodes/{name}/states/provision");
        let put = |body: Value| {
            let (api, path) = (Server::client(api.addr), path.clone());
            async move { api.put(&path, v, Some(&body)).await }
        };
        for (target, reached) in [
            ("manage", "manageable"),
            ("provide", "available"),
            ("active", "active"),
        ] {
            let r = put(json!({"target": target})).await;
            assert_eq!(r.status, 202, "{flow} {target}: {}", r.body);
            api.wait_state(v, &name, reached).await;
            if reached == from {
                break;
            }
        }
        let r = put(request).await;
        assert_eq!(r.status, 202, "{flow}: {}", r.body);
        let n = api.wait_state(v, &name, waiting).await;
        let key = format!("{flow}_step_runner");
        let runner = n["driver_internal_info"][&key]
            .as_str()
            .unwrap()
            .to_string();

        // The wait holds no lock: the node is changed (under its lock) at once.
        let row = t.db.node_by_uuid(&uuid).await.unwrap().unwrap();
        assert_eq!(row.reservation, None, "{flow}: unlocked while it waits");
        let r = api
            .put(
                &format!("/v1/nodes/{name}/traits/CUSTOM_DURING_WAIT"),
                v,
                None,
            )
            .await;
        assert_eq!(r.status, 204, "{flow}: served during the wait: {}", r.body);

        // The conductor running the wait dies: the node's new owner continues it.
        let host = runner.split('/').next().unwrap().to_string();
        let i = hosts.iter().position(|h| *h == host).unwrap();
        conductors[i].kill9();
        let n = api.wait_state(v, &name, end).await;
        assert_eq!(n["last_error"], Value::Null, "{flow}: {n}");
        assert_eq!(n["maintenance"], false, "{flow}");
        let r = api.get(&format!("/v1/nodes/{name}/traits"), v).await;
        assert_eq!(r.json()["traits"], json!(["CUSTOM_DURING_WAIT"]), "{flow}");
        assert!(
            n["driver_internal_info"].get(&key).is_none(),
            "{flow}: the wait is forgotten: {n}"
        );
        let journal = journal_of(&n);
        assert!(
            journal.contains(&("deploy.sleep".to_string(), "done".to_string())),
            "{flow}: the waiting step was continued: {journal:?}"
        );
        let continued_by: Vec<&str> = hosts
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .filter(|(j, _)| {
                conductors[*j]
                    .log_text()
                    .contains("a timed wait is overdue; continuing it here")
            })
            .map(|(_, h)| *h)
            .collect();
        assert!(
            !continued_by.is_empty(),
            "{flow}: a survivor continued the wait"
        );
        // The dead conductor comes back (same name, new process) for the next flow.
        conductors[i] = cluster.conductor(&host);
        until(
            "the API sees the conductor back",
            Duration::from_secs(30),
            || async { alive_conductors(&api).await.contains(host.as_str()) },
        )
        .await;
    }

    // A conductor that comes straight back (same name, new process) continues the
    // wait its earlier run left, without waiting for a peer to declare it dead.
    let name = "w-restart";
    api.node(json!({"driver": "fake-hardware", "name": name}))
        .await;
    let path = format!("/v1/nodes/{name}/states/provision");
    assert_eq!(
        api.put(&path, v, Some(&json!({"target": "manage"})))
            .await
            .status,
        202
    );
    api.wait_state(v, name, "manageable").await;
    let r = api
        .put(
            &path,
            v,
            Some(&json!({"target": "clean", "clean_steps": [sleep(None)]})),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    let n = api.wait_state(v, name, "clean wait").await;
    let runner = n["driver_internal_info"]["clean_step_runner"]
        .as_str()
        .unwrap()
        .to_string();
    let host = runner.split('/').next().unwrap().to_string();
    let j = hosts.iter().position(|h| *h == host).unwrap();
    conductors[j].kill9();
    conductors[j] = cluster.conductor(&host);
    let n = api.wait_state(v, name, "manageable").await;
    assert_eq!(n["last_error"], Value::Null, "{n}");
    assert!(
        conductors[j].wait_log(
            "a timed wait is overdue; continuing it here",
            Duration::from_secs(30)
        ),
        "the restarted conductor continued its earlier run's wait"
    );
    t.cleanup().await;
}

fn journal_of(n: &Value) -> Vec<(String, String)> {
    common::fake_journal(n)
}

/// Manual cleaning end to end over RabbitMQ with three conductor processes: each
/// scenario runs on its own node, so the nodes (and the work) spread over the
/// conductors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manual_cleaning_over_three_conductors() {
    let t = TestDb::postgres().await.unwrap();
    let cluster = Cluster::new(&t.url, &[("IRONIC_CONDUCTOR__HEARTBEAT_INTERVAL", "1")]);
    let hosts = ["m-1", "m-2", "m-3"];
    let (conductors, _api_proc, api) = start_cluster(&cluster, &hosts).await;
    let names = ["ok", "missing", "badarg", "abortable", "stubborn", "more"];
    let mut owners = BTreeSet::new();
    for name in names {
        let n = api
            .node(json!({"driver": "fake-hardware", "name": name}))
            .await;
        owners.insert(n["conductor"].as_str().unwrap().to_string());
        let r = api
            .put(
                &format!("/v1/nodes/{name}/states/provision"),
                V,
                Some(&json!({"target": "manage"})),
            )
            .await;
        assert_eq!(r.status, 202, "{}", r.body);
    }
    assert!(
        owners.len() >= 2,
        "the nodes spread over the conductors: {owners:?}"
    );
    for name in names {
        api.wait_state(V, name, "manageable").await;
    }
    let clean = |name: &'static str, steps: Value| {
        let api = Server::client(api.addr);
        async move {
            api.put(
                &format!("/v1/nodes/{name}/states/provision"),
                V,
                Some(&json!({"target": "clean", "clean_steps": steps})),
            )
            .await
        }
    };
    let done = |s: &str| (s.to_string(), "done".to_string());

    // Valid steps run in the order given.
    let r = clean(
        "ok",
        json!([
            {"interface": "firmware", "step": "update", "args": {"settings": [{"name": "fw"}]}},
            {"interface": "vendor", "step": "log_passthrough"},
            {"interface": "bios", "step": "factory_reset"}
        ]),
    )
    .await;
    assert_eq!(r.status, 202, "{}", r.body);
    // A missing required argument: nothing runs.
    let r = clean(
        "missing",
        json!([
            {"interface": "vendor", "step": "log_passthrough"},
            {"interface": "deploy", "step": "sleep"}
        ]),
    )
    .await;
    assert_eq!(r.status, 202);
    // A bad argument in step 2: step 1 done, then clean failed.
    let r = clean(
        "badarg",
        json!([
            {"interface": "vendor", "step": "log_passthrough"},
            {"interface": "firmware", "step": "update", "args": {"settings": 7}}
        ]),
    )
    .await;
    assert_eq!(r.status, 202);
    // Long steps, one abortable and one not.
    let r = clean(
        "abortable",
        json!([{"interface": "deploy", "step": "sleep", "args": {"seconds": 120}}]),
    )
    .await;
    assert_eq!(r.status, 202);
    let r = clean(
        "stubborn",
        json!([{"interface": "deploy", "step": "burn_in", "args": {"seconds": 2}}]),
    )
    .await;
    assert_eq!(r.status, 202);

    let n = api.wait_state(V, "ok", "manageable").await;
    // `manageable` was also its state before: wait for the journal.
    let start = Instant::now();
    let mut n = n;
    while journal_of(&n).len() < 3 && start.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        n = api.get("/v1/nodes/ok", V).await.json();
    }
    assert_eq!(
        journal_of(&n),
        [
            done("firmware.update"),
            done("vendor.log_passthrough"),
            done("bios.factory_reset")
        ]
    );
    let n = api.wait_state(V, "missing", "clean failed").await;
    assert!(journal_of(&n).is_empty(), "nothing ran: {n}");
    assert!(
        n["last_error"]
            .as_str()
            .unwrap()
            .contains("is missing these required arguments: seconds"),
        "{n}"
    );
    let n = api.wait_state(V, "badarg", "clean failed").await;
    assert_eq!(
        journal_of(&n),
        [
            done("vendor.log_passthrough"),
            ("firmware.update".into(), "failed".into())
        ]
    );
    api.wait_state(V, "abortable", "clean wait").await;
    let r = api
        .put(
            "/v1/nodes/abortable/states/provision",
            V,
            Some(&json!({"target": "abort"})),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.body);
    api.wait_state(V, "abortable", "clean failed").await;
    api.wait_state(V, "stubborn", "clean wait").await;
    let r = api
        .put(
            "/v1/nodes/stubborn/states/provision",
            V,
            Some(&json!({"target": "abort"})),
        )
        .await;
    assert_eq!(r.status, 409, "{}", r.body);
    let n = api.wait_state(V, "stubborn", "manageable").await;
    assert_eq!(journal_of(&n).last(), Some(&done("deploy.burn_in")));
    // Nothing is left locked.
    for name in names {
        let row = t.db.node_by_name(name).await.unwrap().unwrap();
        assert_eq!(row.reservation, None, "{name}");
    }
    drop(conductors);
    t.cleanup().await;
}

/// Allocations held in `allocating` (a test delay) when their conductor is killed are
/// finished by a survivor once its heartbeat times out; a conductor killed and
/// restarted at once resumes its own; nothing is allocated twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allocations_of_a_dead_conductor_are_taken_over() {
    const VA: &str = "1.60";
    let t = TestDb::postgres().await.unwrap();
    let hi = HEARTBEAT_INTERVAL.to_string();
    let ht = HEARTBEAT_TIMEOUT.to_string();
    let cluster = Cluster::new(
        &t.url,
        &[
            ("IRONIC_CONDUCTOR__HEARTBEAT_INTERVAL", &hi),
            ("IRONIC_CONDUCTOR__HEARTBEAT_TIMEOUT", &ht),
            ("IRONIC_CONDUCTOR__CHECK_ALLOCATIONS_INTERVAL", "1"),
            ("IRONIC_CONDUCTOR__ALLOCATION_DELAY_MS", "2500"),
            ("IRONIC_CONDUCTOR__SHUTDOWN_SETTLE_TIME", "1"),
        ],
    );
    let hosts = ["alloc-a", "alloc-b", "alloc-c"];
    let (mut conductors, _api_proc, api) = start_cluster(&cluster, &hosts).await;
    common::available_nodes(&api, "rc-x", 12, 4).await;
    let ids: BTreeMap<ironic_model::ConductorId, String> =
        t.db.conductor_list()
            .await
            .unwrap()
            .into_iter()
            .map(|c| (c.id, c.hostname))
            .collect();
    let affinity_of = |uuid: String| {
        let db = t.db.clone();
        async move {
            let a = db.allocation_by_uuid(&uuid).await.unwrap().unwrap();
            (a.state, a.conductor_affinity)
        }
    };
    let mut uuids = Vec::new();
    for i in 0..9 {
        let r = api
            .post(
                "/v1/allocations",
                VA,
                &json!({"resource_class": "rc-x", "name": format!("ta{i}")}),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.body);
        assert_eq!(r.json()["state"], "allocating");
        uuids.push(r.json()["uuid"].as_str().unwrap().to_string());
    }
    // Who holds what (the shared queue spreads them).
    let mut held: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for u in &uuids {
        let (_, aff) = affinity_of(u.clone()).await;
        held.entry(ids[&aff.unwrap()].clone())
            .or_default()
            .push(u.clone());
    }
    let (victim, theirs) = held.iter().max_by_key(|(_, l)| l.len()).unwrap();
    let victim_idx = hosts.iter().position(|h| h == victim).unwrap();
    let victim_id = *ids.iter().find(|(_, h)| *h == victim).unwrap().0;
    conductors[victim_idx].kill9();
    // A second conductor is killed and restarted at once: it resumes its own.
    let other_idx = (0..3).find(|i| *i != victim_idx && held.contains_key(hosts[*i]));
    if let Some(o) = other_idx {
        conductors[o].kill9();
        conductors[o] = cluster.conductor(hosts[o]);
        assert!(conductors[o].wait_log("ironic-conductor serving", Duration::from_secs(30)));
    }
    common::check_allocations(&api, &uuids, 9).await;
    for u in theirs {
        let (state, aff) = affinity_of(u.clone()).await;
        assert_eq!(state, ironic_model::AllocationState::Active);
        assert_ne!(aff, Some(victim_id), "taken over by a survivor");
    }
    if let Some(o) = other_idx {
        let log = conductors[o].log_text();
        assert!(
            log.contains("resuming allocations of an earlier run"),
            "{log}"
        );
        for u in &held[hosts[o]] {
            let (_, aff) = affinity_of(u.clone()).await;
            assert_eq!(ids[&aff.unwrap()], hosts[o], "resumed by its own conductor");
        }
    }
    t.cleanup().await;
}

/// No double allocation at scale: 500 available nodes, 600 allocation requests from 16
/// clients through one API process over 3 conductor processes: exactly 500 `active` on
/// 500 distinct nodes, 100 `error`, every node naming its allocation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_hundred_allocations_for_five_hundred_nodes() {
    const VA: &str = "1.60";
    let t = TestDb::postgres().await.unwrap();
    let cluster = Cluster::new(&t.url, &[("IRONIC_CONDUCTOR__SHUTDOWN_SETTLE_TIME", "0")]);
    let (_conductors, _api_proc, api) =
        start_cluster(&cluster, &["scale-a", "scale-b", "scale-c"]).await;
    common::available_nodes(&api, "rc-s", 500, 16).await;
    let mut set = tokio::task::JoinSet::new();
    for c in 0..16 {
        let api = Server::client(api.addr);
        set.spawn(async move {
            let mut uuids = Vec::new();
            for _ in (c..600).step_by(16) {
                let r = api
                    .post("/v1/allocations", VA, &json!({"resource_class": "rc-s"}))
                    .await;
                assert_eq!(r.status, 201, "{}", r.body);
                uuids.push(r.json()["uuid"].as_str().unwrap().to_string());
            }
            uuids
        });
    }
    let mut uuids = Vec::new();
    while let Some(r) = set.join_next().await {
        uuids.extend(r.unwrap());
    }
    assert_eq!(uuids.len(), 600);
    common::check_allocations(&api, &uuids, 500).await;
    // The database agrees: 500 nodes carry an allocation, each a different one.
    let q = ironic_db::NodeListQuery {
        limit: 10_000,
        ..Default::default()
    };
    let nodes = t.db.node_list(&q).await.unwrap();
    let allocated: BTreeSet<ironic_model::AllocationId> =
        nodes.iter().filter_map(|n| n.allocation_id).collect();
    assert_eq!(allocated.len(), 500);
    assert_eq!(
        nodes.iter().filter(|n| n.allocation_id.is_some()).count(),
        500
    );
    t.cleanup().await;
}

/// Two deployments (a staging and a production cluster, say) share one RabbitMQ vhost,
/// with the same conductor host names: every allocation POSTed to one deployment's API
/// is created by that deployment's conductors in that deployment's database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_deployments_on_one_vhost_never_cross() {
    const VA: &str = "1.60";
    let (t1, t2) = (
        TestDb::postgres().await.unwrap(),
        TestDb::postgres().await.unwrap(),
    );
    let (id1, id2) = (
        t1.db.cluster_id().await.unwrap(),
        t2.db.cluster_id().await.unwrap(),
    );
    assert_ne!(id1, id2, "each database has its own cluster id");
    let settings = [("IRONIC_CONDUCTOR__SHUTDOWN_SETTLE_TIME", "0")];
    let staging = Cluster::new(&t1.url, &settings);
    let production = staging.sharing_bus(&t2.url, &settings);
    let hosts = ["cond-a", "cond-b"];
    let (_c1, _a1, api1) = start_cluster(&staging, &hosts).await;
    let (_c2, _a2, api2) = start_cluster(&production, &hosts).await;
    common::available_nodes(&api1, "rc-1", 8, 4).await;
    common::available_nodes(&api2, "rc-2", 8, 4).await;
    let (mut u1, mut u2) = (Vec::new(), Vec::new());
    for i in 0..20 {
        for (api, rc, uuids) in [(&api1, "rc-1", &mut u1), (&api2, "rc-2", &mut u2)] {
            let r = api
                .post(
                    "/v1/allocations",
                    VA,
                    &json!({"resource_class": rc, "name": format!("x{i}")}),
                )
                .await;
            assert_eq!(r.status, 201, "{}", r.body);
            uuids.push(r.json()["uuid"].as_str().unwrap().to_string());
        }
    }
    common::check_allocations(&api1, &u1, 8).await;
    common::check_allocations(&api2, &u2, 8).await;
    for (db, mine, theirs) in [(&t1.db, &u1, &u2), (&t2.db, &u2, &u1)] {
        for u in mine {
            assert!(
                db.allocation_by_uuid(u).await.unwrap().is_some(),
                "{u} is in its own database"
            );
        }
        for u in theirs {
            assert!(
                db.allocation_by_uuid(u).await.unwrap().is_none(),
                "{u} is not in the other database"
            );
        }
    }
    t1.cleanup().await;
    t2.cleanup().await;
}

/// `kill -9` of one of three conductors in the middle of an allocation burst from 8
/// clients, with the default heartbeat settings: the dead conductor is found dead from
/// its vanished database session, its nodes and its `allocating` allocations go to the
/// survivors, every POST gets its true outcome (201 with an allocation that exists)
/// within the call timeout, and nothing is allocated twice. The measured times are
/// printed (they go to the notes, not to assertions).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_mid_allocation_burst_with_default_settings() {
    const VA: &str = "1.60";
    let t = TestDb::postgres().await.unwrap();
    let cluster = Cluster::new(
        &t.url,
        &[
            ("IRONIC_CONDUCTOR__SHUTDOWN_SETTLE_TIME", "0"),
            // Allocations stay `allocating` a moment, so the victim holds some.
            ("IRONIC_CONDUCTOR__ALLOCATION_DELAY_MS", "300"),
        ],
    );
    let hosts = ["burst-a", "burst-b", "burst-c"];
    let (mut conductors, api_proc, api) = start_cluster(&cluster, &hosts).await;
    common::available_nodes(&api, "rc-k", 40, 8).await;
    let before = node_owners(&api).await;
    let victim = "burst-b";
    let victim_id = t.db.conductor_get(victim).await.unwrap().id;
    let victim_nodes: BTreeSet<String> = before
        .iter()
        .filter(|(_, o)| *o == victim)
        .map(|(u, _)| u.clone())
        .collect();
    assert!(!victim_nodes.is_empty());

    let sent = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut set = tokio::task::JoinSet::new();
    for c in 0..8 {
        let (api, sent) = (Server::client(api.addr), sent.clone());
        set.spawn(async move {
            let mut out = Vec::new();
            for i in 0..20 {
                let started = Instant::now();
                let r = api
                    .post(
                        "/v1/allocations",
                        VA,
                        &json!({"resource_class": "rc-k", "name": format!("k{c}-{i}")}),
                    )
                    .await;
                sent.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                out.push((r.status, r.body, started.elapsed()));
            }
            out
        });
    }
    until("a third of the burst sent", Duration::from_secs(30), || {
        let sent = sent.clone();
        async move { sent.load(std::sync::atomic::Ordering::SeqCst) >= 40 }
    })
    .await;
    conductors[1].kill9();
    let killed = Instant::now();
    until("the victim found dead", Duration::from_secs(30), || async {
        !alive_conductors(&api).await.contains(victim)
    })
    .await;
    let dead_after = killed.elapsed();
    until(
        "the victim's nodes moved",
        Duration::from_secs(30),
        || async {
            let o = node_owners(&api).await;
            victim_nodes.iter().all(|u| o[u] != victim)
        },
    )
    .await;
    let moved_after = killed.elapsed();
    let mut results = Vec::new();
    while let Some(r) = set.join_next().await {
        results.extend(r.unwrap());
    }
    until(
        "the victim's allocations finished",
        Duration::from_secs(30),
        || async {
            t.db.allocations_allocating(victim_id, true)
                .await
                .unwrap()
                .is_empty()
        },
    )
    .await;
    let finished_after = killed.elapsed();
    let mut uuids = Vec::new();
    let mut slowest = Duration::ZERO;
    for (status, body, took) in &results {
        assert_eq!(*status, 201, "every POST gets its true outcome: {body}");
        assert!(*took < Duration::from_secs(60), "within the call timeout");
        slowest = slowest.max(*took);
        let u = serde_json::from_str::<Value>(body).unwrap()["uuid"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(
            t.db.allocation_by_uuid(&u).await.unwrap().is_some(),
            "a 201 whose allocation exists"
        );
        uuids.push(u);
    }
    common::check_allocations(&api, &uuids, 40).await;
    let survivor_logs = conductors[0].log_text() + &conductors[2].log_text();
    assert!(
        survivor_logs
            .lines()
            .any(|l| l.contains("conductor declared dead")
                && l.contains(victim)
                && l.contains("present=Some(false)")),
        "found dead from its vanished session"
    );
    eprintln!(
        "kill -9 with defaults, from the kill: API saw it dead after {} ms, its nodes moved after {} ms, its allocations finished after {} ms; slowest POST {} ms; lost-call repeats: {}",
        dead_after.as_millis(),
        moved_after.as_millis(),
        finished_after.as_millis(),
        slowest.as_millis(),
        api_proc.log_text().matches("sending it again").count()
    );
    t.cleanup().await;
}

/// The ops address a process logs (`serving /healthz, /readyz and /metrics addr=…`).
fn ops_addr(p: &Proc) -> std::net::SocketAddr {
    p.log_text()
        .lines()
        .find(|l| l.contains("serving /healthz, /readyz and /metrics"))
        .and_then(|l| l.split("addr=").nth(1))
        .and_then(|a| a.split_whitespace().next())
        .unwrap()
        .parse()
        .unwrap()
}

/// The sum of a counter's samples whose labels include `labels` (`k="v"` each).
async fn counter(s: &Server, name: &str, labels: &[&str]) -> f64 {
    let r = s.call("GET", "/metrics", None, None).await;
    assert_eq!(r.status, 200, "{}", r.body);
    r.body
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .filter(|l| labels.iter().all(|want| l.contains(want)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A party that reaches the broker but not the database (here the test, with the
/// broker's credentials and the cluster id, which is no secret) publishes `create_node`
/// calls straight to a real conductor's queues: unsigned, and signed with a key of its
/// own. Their nodes never reach the database, nobody answers them, and the conductor
/// counts them in `ironic_rpc_messages_refused_total`; the same call signed with the
/// deployment's key (which only the database holds) creates its node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_calls_never_reach_the_database() {
    use futures_lite::StreamExt;
    use ironic_model::{Node, NodeUuid, Version};
    use ironic_rpc::amqp::{CLUSTER_HEADER, SigningKey, SigningKeys};
    use ironic_rpc::{Call, calls::CreateNode, convert, pb};
    use lapin::options::BasicPublishOptions;
    use lapin::types::{AMQPValue, FieldTable};
    use prost::Message;

    let t = TestDb::postgres().await.unwrap();
    let cluster = Cluster::new(&t.url, &[("IRONIC_CONDUCTOR__SHUTDOWN_SETTLE_TIME", "0")]);
    let cond = cluster.conductor("sig-a");
    assert!(
        cond.wait_log("ironic-conductor serving", Duration::from_secs(30)),
        "{}",
        cond.log_text()
    );
    let ops = Server::client(ops_addr(&cond));
    let id = t.db.cluster_id().await.unwrap();
    let ours = SigningKeys::new(SigningKey::new(t.db.bus_signing_key().await.unwrap()).unwrap());
    let theirs = SigningKeys::new(SigningKey::new([9u8; 32]).unwrap());

    let ironic_rpc::testing::Party {
        conn,
        channel: ch,
        queue,
        mut inbox,
    } = cluster.bus.party().await.unwrap();
    let (own, shared) = (
        format!("ironic.conductor_manager.{id}.sig-a"),
        format!("ironic.conductor_manager.{id}"),
    );
    // (correlation id, routing key, signed with, the node it would create)
    let calls = [
        ("unsigned-own", &own, None),
        ("unsigned-shared", &shared, None),
        ("wrong-key", &own, Some(&theirs)),
        ("genuine", &own, Some(&ours)),
    ];
    let mut uuids = Vec::new();
    for (corr, rk, key) in calls {
        let node = Node::blank(NodeUuid::new_v4(), "fake-hardware".into(), Version::MAX);
        uuids.push((corr, node.uuid.as_str().to_string()));
        let body = pb::Request {
            method: CreateNode::METHOD.into(),
            request_id: format!("req-{corr}"),
            body: pb::CreateNodeRequest {
                node: Some(convert::node_to_pb(&node)),
            }
            .encode_to_vec(),
            ..Default::default()
        }
        .encode_to_vec();
        let mut h = FieldTable::default();
        h.insert(
            CLUSTER_HEADER.into(),
            AMQPValue::LongString(id.clone().into()),
        );
        let props = lapin::BasicProperties::default()
            .with_correlation_id(corr.into())
            .with_reply_to(queue.as_str().into())
            .with_type(CreateNode::METHOD.into())
            .with_headers(h);
        let props = match key {
            Some(k) => k.sign("ironic", rk, props, &body),
            None => props,
        };
        ch.basic_publish(
            "ironic".into(),
            rk.as_str().into(),
            BasicPublishOptions::default(),
            &body,
            props,
        )
        .await
        .unwrap()
        .await
        .unwrap();
    }
    // The genuine call is answered; whatever else arrives must be about it too.
    let start = Instant::now();
    loop {
        assert!(start.elapsed() < Duration::from_secs(20), "no reply");
        let d = tokio::time::timeout(Duration::from_secs(20), inbox.next())
            .await
            .expect("a reply")
            .unwrap()
            .unwrap();
        let corr = d.properties.correlation_id().as_ref().unwrap().to_string();
        assert_eq!(
            corr, "genuine",
            "only the genuine call is answered or taken"
        );
        if d.properties.kind().is_none() {
            let r = pb::Reply::decode(&d.data[..]).unwrap();
            assert!(matches!(r.result, Some(pb::reply::Result::Ok(_))), "{r:?}");
            break;
        }
    }
    until(
        "the conductor counted the forgeries",
        Duration::from_secs(15),
        || async {
            let m = "ironic_rpc_messages_refused_total";
            counter(&ops, m, &["side=\"server\"", "reason=\"unsigned\""]).await == 2.0
                && counter(&ops, m, &["side=\"server\"", "reason=\"bad_signature\""]).await == 1.0
        },
    )
    .await;
    for (corr, uuid) in &uuids {
        let stored = t.db.node_by_uuid(uuid).await.unwrap();
        assert_eq!(stored.is_some(), *corr == "genuine", "{corr}: {uuid}");
    }
    assert!(
        tokio::time::timeout(Duration::from_millis(500), inbox.next())
            .await
            .is_err(),
        "no answer to a forgery"
    );
    assert!(
        cond.log_text()
            .contains("dropped a message on the bus that is unsigned or wrongly signed"),
        "{}",
        cond.log_text()
    );
    let _ = conn.close(200, "done".into()).await;
    drop(cond);
    t.cleanup().await;
}

/// The RabbitMQ permissions `docs/operations.md` gives ("The broker trust boundary")
/// are enough, and no more than that: an API user that may declare, write and read only
/// the exchange and its own reply queues, and a conductor user that may only use the
/// exchange, its deployment's conductor queues and the default exchange (replies) run
/// the split deployment (nodes created, cleaned, made available, allocated; a conductor
/// stopping is announced at once), while the API user can neither read a conductor's
/// queue nor publish to the default exchange.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn least_privilege_broker_users_run_the_split_deployment() {
    use lapin::options::{BasicConsumeOptions, BasicPublishOptions};
    use lapin::types::FieldTable;

    let t = TestDb::postgres().await.unwrap();
    let id = t.db.cluster_id().await.unwrap();
    let settle = ("IRONIC_CONDUCTOR__SHUTDOWN_SETTLE_TIME", "0");
    let base = Cluster::new(&t.url, &[settle]);
    // As in docs/operations.md, with the exchange `ironic`.
    let api_perm = r"^(ironic|amq\.gen-.*)$";
    let api_url = base
        .bus
        .user("ironic-api", api_perm, api_perm, api_perm)
        .unwrap();
    let queues = format!(r"ironic\.conductor_manager\.{id}(\..*)?");
    let cond_url = base
        .bus
        .user(
            "ironic-conductor",
            &format!("^(ironic|{queues})$"),
            &format!(r"^(ironic|amq\.default|{queues})$"),
            &format!("^(ironic|{queues})$"),
        )
        .unwrap();
    let conductors = base.sharing_bus(&t.url, &[settle, ("IRONIC_AMQP__URL", &cond_url)]);
    let apis = base.sharing_bus(&t.url, &[settle, ("IRONIC_AMQP__URL", &api_url)]);
    let hosts = ["lp-a", "lp-b"];
    let (mut procs, api_proc, api) = start_split(&conductors, &apis, &hosts).await;
    // Create (calls to the ring owners' queues), manage and provide (cleaning).
    common::available_nodes(&api, "rc-lp", 6, 2).await;
    let mut uuids = Vec::new();
    // More than there are nodes: six are allocated, two fail.
    for i in 0..8 {
        let r = api
            .post(
                "/v1/allocations",
                "1.60",
                &json!({"resource_class": "rc-lp", "name": format!("lp-{i}")}),
            )
            .await;
        assert_eq!(r.status, 201, "{}", r.body);
        uuids.push(r.json()["uuid"].as_str().unwrap().to_string());
    }
    common::check_allocations(&api, &uuids, 6).await;
    // A graceful stop is announced (membership key on the exchange) and taken in at once.
    let mut stopping = procs.pop().unwrap();
    stopping.term();
    until(
        "the API sees lp-b gone",
        Duration::from_secs(15),
        || async { !alive_conductors(&api).await.contains("lp-b") },
    )
    .await;
    let r = api
        .post(
            "/v1/nodes",
            V,
            &json!({"driver": "fake-hardware", "name": "after-stop"}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    for p in procs.iter().chain([&api_proc, &stopping]) {
        assert!(
            !p.log_text().contains("ACCESS_REFUSED"),
            "{}: {}",
            p.name,
            p.log_text()
        );
    }

    // No more than that: the API user cannot read a conductor's queue ...
    let conn = lapin::Connection::connect(&api_url, Default::default())
        .await
        .unwrap();
    let ch = conn.create_channel().await.unwrap();
    let shared = format!("ironic.conductor_manager.{id}");
    let e = ch
        .basic_consume(
            shared.as_str().into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap_err();
    assert!(e.to_string().contains("ACCESS_REFUSED"), "{e}");
    // ... nor publish to the default exchange (straight into a reply queue).
    let ch = conn.create_channel().await.unwrap();
    let published = ch
        .basic_publish(
            "".into(),
            "amq.gen-x".into(),
            BasicPublishOptions::default(),
            b"",
            Default::default(),
        )
        .await;
    let refused = match published {
        Err(e) => e.to_string(),
        // The refusal closes the channel; the next operation on it says why.
        Ok(_) => ch
            .basic_qos(1, Default::default())
            .await
            .map_or_else(|e| e.to_string(), |_| "accepted".into()),
    };
    assert!(refused.contains("ACCESS_REFUSED"), "{refused}");
    let _ = conn.close(200, "done".into()).await;
    t.cleanup().await;
}

/// `[amqp] signing_key_file`: API and conductor with the same key file run the
/// deployment; a conductor whose key file is too short, or missing, does not start and
/// says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_file_signs_and_a_bad_one_stops_the_start() {
    let t = TestDb::postgres().await.unwrap();
    let dir = std::env::temp_dir().join(format!("ironic-keys-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let (good, short) = (dir.join("bus.key"), dir.join("short.key"));
    std::fs::write(&good, format!("{}\n", "ab".repeat(32))).unwrap();
    std::fs::write(&short, "0123456789\n").unwrap();
    let settle = ("IRONIC_CONDUCTOR__SHUTDOWN_SETTLE_TIME", "0");
    let good_path = good.display().to_string();
    let cluster = Cluster::new(
        &t.url,
        &[settle, ("IRONIC_AMQP__SIGNING_KEY_FILE", &good_path)],
    );
    let (_conductors, _api_proc, api) = start_cluster(&cluster, &["kf-a"]).await;
    let r = api
        .post(
            "/v1/nodes",
            V,
            &json!({"driver": "fake-hardware", "name": "kf-1"}),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);

    for (key, why) in [
        (short, "at least 32"),
        (dir.join("missing.key"), "cannot read"),
    ] {
        let path = key.display().to_string();
        // Kept until the end: its directory holds the process's log.
        let place =
            cluster.sharing_bus(&t.url, &[settle, ("IRONIC_AMQP__SIGNING_KEY_FILE", &path)]);
        let mut bad = place.conductor("kf-bad");
        let status = bad.wait_exit(Duration::from_secs(30)).expect("it stops");
        assert!(!status.success());
        let log = bad.log_text();
        assert!(
            log.contains("bus signing key") && log.contains(why),
            "{log}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    t.cleanup().await;
}
