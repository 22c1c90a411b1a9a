//! RPC benchmark: one caller (as an `ironic-api` process would be) against running
//! `ironic-conductor` processes, through RabbitMQ. `bench/rpc.sh` starts the conductors
//! and runs this; see its header for the figures it prints.
//!
//! `ping` measures the bare round trip (publish with confirm, conductor, reply);
//! `update` measures `update_node` as the API uses it: ring routing, the node lock, a
//! read-modify-write of the node row, the reply.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ironic_db::topology::Topology;
use ironic_db::{Db, DbOptions};
use ironic_model::node::{NodeDefaults, from_create_body};
use ironic_model::{Version, patch};
use ironic_rpc::amqp::{BusSettings, Client, RemoteConductors, SigningKey, SigningKeys, Target};
use ironic_rpc::calls::{CreateNode, UpdateNode};
use ironic_rpc::{Context, NodeRef};

fn arg(name: &str, default: &str) -> String {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(|| default.to_string())
}

fn report(what: &str, mut lat: Vec<Duration>, wall: Duration, errors: usize) {
    lat.sort();
    let pct = |p: f64| {
        lat.get(((lat.len() as f64 * p) as usize).min(lat.len().saturating_sub(1)))
            .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
    };
    println!(
        "{what}: {} calls in {:.2} s = {:.0}/s, p50 {:.2} ms, p99 {:.2} ms, errors {errors}",
        lat.len(),
        wall.as_secs_f64(),
        lat.len() as f64 / wall.as_secs_f64(),
        pct(0.50),
        pct(0.99)
    );
}

type Worker = tokio::task::JoinHandle<(Vec<Duration>, usize)>;

/// Whatever stops the benchmark (printed by `main`'s caller).
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Latencies and error counts of all workers.
async fn gather(tasks: Vec<Worker>) -> Result<(Vec<Duration>, usize), tokio::task::JoinError> {
    let (mut lat, mut errors) = (Vec::new(), 0);
    for t in tasks {
        let (l, e) = t.await?;
        lat.extend(l);
        errors += e;
    }
    Ok((lat, errors))
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let amqp = arg("--amqp", "amqp://guest:guest@127.0.0.1:5672/%2f");
    let db_url = arg("--database", "postgres://postgres@127.0.0.1/ironic");
    let hosts: Vec<String> = arg("--hosts", "c1,c2,c3")
        .split(',')
        .map(str::to_string)
        .collect();
    let calls: usize = arg("--calls", "20000").parse().map_err(|_| "--calls")?;
    let conc: usize = arg("--concurrency", "32")
        .parse()
        .map_err(|_| "--concurrency")?;
    let method = arg("--method", "ping");

    let db = Db::connect(
        &db_url,
        &DbOptions {
            max_connections: 4,
            create: false,
            ..Default::default()
        },
    )
    .await?;
    let cluster = db.cluster_id().await?;
    // The key the conductors sign with: `--signing-key-file` as their `[amqp]
    // signing_key_file`, else the deployment's key in the database.
    let key = match arg("--signing-key-file", "").as_str() {
        "" => SigningKey::new(db.bus_signing_key().await?)?,
        path => SigningKey::from_file(std::path::Path::new(path))?,
    };
    let signing = SigningKeys::new(key);
    let client = Client::start(BusSettings {
        url: amqp,
        exchange: "ironic".into(),
        call_timeout: Duration::from_secs(30),
        prefetch: 64,
        accept_timeout: Duration::from_secs(10),
        tls_ca_pem: None,
        max_backoff: Duration::from_secs(1),
        connection_name: "rpc-bench".into(),
        cluster,
        signing,
    });
    if !client.connected(Duration::from_secs(10)).await {
        return Err("cannot reach the message bus".into());
    }
    let ctx = Context {
        request_id: "req-bench".into(),
        attempt: 0,
    };
    let per = calls / conc;
    match method.as_str() {
        "ping" => {
            let start = Instant::now();
            let mut tasks = Vec::new();
            for w in 0..conc {
                let (client, hosts, ctx) = (client.clone(), hosts.clone(), ctx.clone());
                tasks.push(tokio::spawn(async move {
                    let mut lat = Vec::with_capacity(per);
                    let mut errors = 0;
                    for i in 0..per {
                        let t = Target::Host(hosts[(w + i) % hosts.len()].clone());
                        let s = Instant::now();
                        match client.ping(&t, &ctx).await {
                            Ok(()) => lat.push(s.elapsed()),
                            Err(_) => errors += 1,
                        }
                    }
                    (lat, errors)
                }));
            }
            let (lat, errors) = gather(tasks).await?;
            report(
                &format!("ping x{conc} over {} conductors", hosts.len()),
                lat,
                start.elapsed(),
                errors,
            );
        }
        "update" => {
            let topology = Arc::new(Topology::new(db.clone(), ironic_db::Liveness::new(1, 8), 5));
            topology.refresh().await;
            let api = Arc::new(RemoteConductors::new(client.clone(), topology));
            let mut nodes = Vec::new();
            for i in 0..conc * 4 {
                let body = serde_json::json!({"driver": "fake-hardware", "name": format!("bench-{}-{i}", std::process::id())});
                let n = from_create_body(&body, Version::MAX, &NodeDefaults::default())?;
                let n = api.call(&ctx, CreateNode { node: n }).await?;
                nodes.push(NodeRef::from(&n));
            }
            let nodes = Arc::new(nodes);
            let start = Instant::now();
            let mut tasks = Vec::new();
            for w in 0..conc {
                let (api, nodes, ctx) = (api.clone(), nodes.clone(), ctx.clone());
                tasks.push(tokio::spawn(async move {
                    let mut lat = Vec::with_capacity(per);
                    let mut errors = 0;
                    for i in 0..per {
                        // Each worker has its own nodes: no lock contention.
                        let node = nodes[w + conc * (i % 4)].clone();
                        let ops = patch::parse(&serde_json::json!([
                            {"op": "add", "path": "/extra/bench", "value": i}
                        ]));
                        let Ok(ops) = ops else {
                            errors += 1;
                            continue;
                        };
                        let s = Instant::now();
                        let r = api
                            .call(
                                &ctx,
                                UpdateNode {
                                    ident: node.uuid.to_string(),
                                    node,
                                    patch: ops,
                                    version: Version::MAX,
                                    reset_interfaces: None,
                                },
                            )
                            .await;
                        match r {
                            Ok(_) => lat.push(s.elapsed()),
                            Err(_) => errors += 1,
                        }
                    }
                    (lat, errors)
                }));
            }
            let (lat, errors) = gather(tasks).await?;
            report(
                &format!("update_node x{conc} over {} conductors", hosts.len()),
                lat,
                start.elapsed(),
                errors,
            );
        }
        other => return Err(format!("unknown --method {other} (ping|update)").into()),
    }
    client.shutdown().await;
    Ok(())
}
