//! `ironic-load`: drives an Ironic-compatible API with many concurrent keep-alive
//! connections from one thread, through the phases of `../shared/bench/bench.py`
//! (create nodes, make them available, reads, allocations in a burst and in a closed
//! loop, deallocations), and reports for each: operations per second, p50/p99
//! latency, errors, and the CPU of the server's processes (`--pid`) and its own.
//!
//! ```text
//! ironic-load http://127.0.0.1:6385 -n 10000 -c 32 --pid api=1234 --pid db=567 \
//!     --read 'node=/v1/nodes/{uuid}' --read 'list=/v1/nodes?limit=100' --json out.json
//! ```
//! Every loop is bounded (by count or by time). See bench/scale.sh and README
//! "Performance".

mod deploy;
mod http;
mod measure;
mod periodic;

use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use hyper::Method;
use serde_json::{Value, json};

use crate::http::{Answer, Conn, Target, TargetError};
use crate::measure::{Samples, cpu_seconds, own_cpu_seconds, rss_mib};

#[derive(Parser, Debug)]
#[command(
    name = "ironic-load",
    about = "Load generator for Ironic-compatible APIs"
)]
struct Args {
    /// The API's root URL, e.g. http://127.0.0.1:6385.
    url: String,
    /// Nodes to create (phase create) or to find by resource class.
    #[arg(short = 'n', long, default_value_t = 1000)]
    nodes: usize,
    /// Concurrent connections (one request in flight on each).
    #[arg(short = 'c', long, default_value_t = 32)]
    concurrency: usize,
    /// Phases to run, in order: create, provide, read, alloc-burst, alloc-closed, dealloc;
    /// or deploy (nodes of its own, `direct` deploys against simulated agents).
    #[arg(
        long,
        default_value = "create,provide,read,alloc-burst,alloc-closed,dealloc"
    )]
    phases: String,
    /// Resource class of the nodes this run creates and allocates.
    #[arg(long, default_value = "load")]
    resource_class: String,
    /// A GET the read phase drives, as LABEL=/PATH; `{uuid}` is replaced by one of the
    /// nodes' UUIDs, another at each request. Repeatable; default: one node, a page of
    /// 100 nodes.
    #[arg(long = "read")]
    reads: Vec<String>,
    /// Connections of the read phase (default: --concurrency). Fewer than the server
    /// can serve at once shows its latency rather than its queue.
    #[arg(long)]
    read_connections: Option<usize>,
    /// Seconds each read runs.
    #[arg(long, default_value_t = 3.0)]
    read_seconds: f64,
    /// Allocations of the burst (default: the smaller of N and 2000).
    #[arg(long)]
    allocations: Option<usize>,
    /// Seconds of the closed-loop allocation phase (each connection waits for its
    /// allocation to finish before asking for the next).
    #[arg(long, default_value_t = 5.0)]
    closed_seconds: f64,
    /// A server process to watch (CPU and resident memory, with its children), as
    /// LABEL=PID. Repeatable.
    #[arg(long = "pid")]
    pids: Vec<String>,
    /// A server process's root URL whose `/metrics` tells which periodic tasks ran
    /// during each read (reported with it as `periodic`: null when a process did not
    /// answer before or after the read). Repeatable.
    #[arg(long = "metrics")]
    metrics: Vec<String>,
    /// Microversion every request asks for.
    #[arg(long, default_value = "1.65")]
    microversion: String,
    /// Also write the results as JSON here.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// Phase deploy: how long each simulated agent's asynchronous command (writing the
    /// image) takes, in milliseconds.
    #[arg(long, default_value_t = 200)]
    agent_command_ms: u64,
    /// Phase deploy: seconds until every node must be active.
    #[arg(long, default_value_t = 600)]
    deploy_timeout: u64,
}

/// One measured kind of request.
struct Row {
    phase: String,
    label: String,
    seconds: f64,
    samples: Samples,
    /// Server CPU over this row, % of one core, per watched process.
    cpu: Vec<(String, f64)>,
    client_cpu: f64,
    /// Operations completed (may differ from requests: an allocation is several).
    ops: usize,
}

struct Run {
    args: Args,
    target: Target,
    pids: Vec<(String, u32)>,
    /// The processes whose periodic tasks each read records (`--metrics`).
    metrics: Vec<Target>,
    rows: Vec<Value>,
    uuids: Arc<Vec<String>>,
}

/// CPU counters at the start of a measurement.
struct CpuMark {
    at: Instant,
    server: Vec<f64>,
    client: f64,
}

impl Run {
    fn mark(&self) -> CpuMark {
        CpuMark {
            at: Instant::now(),
            server: self.pids.iter().map(|(_, p)| cpu_seconds(*p)).collect(),
            client: own_cpu_seconds(),
        }
    }

    fn since(&self, m: &CpuMark) -> (f64, Vec<(String, f64)>, f64) {
        let secs = m.at.elapsed().as_secs_f64().max(1e-9);
        let cpu = self
            .pids
            .iter()
            .zip(&m.server)
            .map(|((l, p), before)| (l.clone(), (cpu_seconds(*p) - before) / secs * 100.0))
            .collect();
        (secs, cpu, (own_cpu_seconds() - m.client) / secs * 100.0)
    }

    fn report(&mut self, mut row: Row) {
        let p50 = row.samples.quantile_ms(0.5);
        let p99 = row.samples.quantile_ms(0.99);
        let rate = row.ops as f64 / row.seconds;
        let cpu: Vec<String> = row
            .cpu
            .iter()
            .map(|(l, c)| format!("{l} {c:.0}%"))
            .collect();
        println!(
            "{:<13} {:<34} {:>8} ops {:>9.1}/s  p50 {:>7.2} ms  p99 {:>7.2} ms  errors {:<5} cpu: {} | client {:.0}%",
            row.phase,
            row.label,
            row.ops,
            rate,
            p50,
            p99,
            row.samples.errors,
            cpu.join(", "),
            row.client_cpu
        );
        for e in &row.samples.error_samples {
            println!("{:<13}   error: {e}", "");
        }
        self.rows.push(json!({
            "phase": row.phase,
            "label": row.label,
            "ops": row.ops,
            "seconds": row.seconds,
            "ops_per_s": rate,
            "p50_ms": p50,
            "p99_ms": p99,
            "errors": row.samples.errors,
            "error_samples": row.samples.error_samples,
            "cpu_percent": row.cpu.iter().map(|(l, c)| (l.clone(), json!(c))).collect::<serde_json::Map<_, _>>(),
            "client_cpu_percent": row.client_cpu,
        }));
    }

    fn memory(&mut self, phase: &str) {
        // PostgreSQL's backends each count the shared buffers they touched: their sum
        // means nothing, so a process labelled "postgres" is watched for CPU only.
        let rss: Vec<(String, f64)> = self
            .pids
            .iter()
            .filter(|(l, _)| l != "postgres")
            .map(|(l, p)| (l.clone(), rss_mib(*p)))
            .collect();
        let text: Vec<String> = rss.iter().map(|(l, m)| format!("{l} {m:.0} MiB")).collect();
        println!("{:<13} resident memory: {}", phase, text.join(", "));
        self.rows.push(json!({
            "phase": phase,
            "label": "rss",
            "rss_mib": rss.iter().map(|(l, m)| (l.clone(), json!(m))).collect::<serde_json::Map<_, _>>(),
        }));
    }
}

/// Seconds since the Unix epoch (0 on a clock set before it).
fn unix_seconds() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Runs `c` workers, each with its own connection, and gathers what they return.
async fn workers<T, F, Fut>(target: &Target, c: usize, f: F) -> Vec<T>
where
    T: Send + 'static,
    F: Fn(usize, Conn) -> Fut,
    Fut: Future<Output = T> + Send + 'static,
{
    let handles: Vec<_> = (0..c.max(1))
        .map(|w| tokio::spawn(f(w, Conn::new(target))))
        .collect();
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        if let Ok(v) = h.await {
            out.push(v);
        }
    }
    out
}

/// A request retried while the node is locked or no conductor is free (409/503), at most
/// `tries` times, 20 ms apart.
async fn with_retry(
    conn: &mut Conn,
    method: Method,
    path: &str,
    body: Option<&[u8]>,
    tries: usize,
) -> Answer {
    let mut last = conn.call(method.clone(), path, body).await;
    for _ in 1..tries {
        if !matches!(last.status, 409 | 503) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        last = conn.call(method.clone(), path, body).await;
    }
    last
}

/// Why a run, or one node's part of it, failed.
#[derive(Debug, thiserror::Error)]
enum LoadError {
    #[error("{name} {value}: give seconds between 0 and 86400")]
    Seconds { name: &'static str, value: f64 },
    #[error("--pid {0}: give LABEL=PID")]
    PidForm(String),
    #[error("--pid {0}: not a number")]
    PidNumber(String, #[source] std::num::ParseIntError),
    #[error("unknown phase {0}")]
    UnknownPhase(String),
    #[error(transparent)]
    Target(#[from] TargetError),
    /// The results could not be written.
    #[error("{}", .0.display())]
    Write(std::path::PathBuf, #[source] std::io::Error),
    /// A request the server did not carry out: what was asked, the answer
    /// ([`Answer::describe`]).
    #[error("{what}: {answer}")]
    Refused { what: String, answer: String },
    /// A node ended in a failed state (its fields as the server gave them).
    #[error("{uuid}: {node}")]
    NodeFailed { uuid: String, node: Value },
    #[error("{uuid}: not done after {limit:?}")]
    NotDone { uuid: String, limit: Duration },
    #[error("deploy: {active} active and {failed} failed of {total}")]
    Deploys {
        active: usize,
        failed: usize,
        total: usize,
    },
}

impl LoadError {
    fn refused(what: String, answer: &Answer) -> LoadError {
        LoadError::Refused {
            what,
            answer: answer.describe(),
        }
    }
}

/// An error and its causes, joined by ": ".
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        out.push_str(": ");
        out.push_str(&cause.to_string());
        next = cause.source();
    }
    out
}

/// Polls a node until `done` says so (Some(true): reached, Some(false): failed), at most
/// `limit`.
async fn wait_node(
    conn: &mut Conn,
    uuid: &str,
    limit: Duration,
    done: impl Fn(&Value) -> Option<bool>,
) -> Result<(), LoadError> {
    let path = format!("/v1/nodes/{uuid}?fields=provision_state,power_state,last_error");
    let start = Instant::now();
    while start.elapsed() < limit {
        let a = conn.call(Method::GET, &path, None).await;
        if a.ok() {
            let v = a.json();
            match done(&v) {
                Some(true) => return Ok(()),
                Some(false) => {
                    return Err(LoadError::NodeFailed {
                        uuid: uuid.to_string(),
                        node: v,
                    });
                }
                None => {}
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Err(LoadError::NotDone {
        uuid: uuid.to_string(),
        limit,
    })
}

/// Every object of a list (`key` in the answer), page after page (bounded).
async fn list_all(conn: &mut Conn, base: &str, key: &str) -> Result<Vec<Value>, LoadError> {
    let mut out = Vec::new();
    let mut marker: Option<String> = None;
    let sep = if base.contains('?') { '&' } else { '?' };
    for _ in 0..100_000 {
        let path = match &marker {
            None => format!("{base}{sep}limit=1000"),
            Some(m) => format!("{base}{sep}limit=1000&marker={m}"),
        };
        let a = conn.call(Method::GET, &path, None).await;
        if !a.ok() {
            return Err(LoadError::refused(format!("GET {path}"), &a));
        }
        let page = a.json()[key].as_array().cloned().unwrap_or_default();
        let last = page
            .last()
            .and_then(|v| v["uuid"].as_str())
            .map(str::to_string);
        let n = page.len();
        out.extend(page);
        match last {
            Some(l) if n == 1000 => marker = Some(l),
            _ => return Ok(out),
        }
    }
    Ok(out)
}

impl Run {
    async fn create(&mut self) {
        let n = self.args.nodes;
        let rc = self.args.resource_class.clone();
        let next = Arc::new(AtomicUsize::new(0));
        let m = self.mark();
        let results = workers(&self.target, self.args.concurrency, |_, mut conn| {
            let (next, rc) = (next.clone(), rc.clone());
            async move {
                let mut s = Samples::default();
                let mut uuids = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        break;
                    }
                    let body = node_body(&rc, i, n).to_string();
                    let t = Instant::now();
                    let a = conn
                        .call(Method::POST, "/v1/nodes", Some(body.as_bytes()))
                        .await;
                    s.record(t.elapsed(), a.ok(), || a.describe());
                    if let Some(u) = a.json()["uuid"].as_str() {
                        uuids.push(u.to_string());
                    }
                }
                (s, uuids)
            }
        })
        .await;
        let (secs, cpu, client_cpu) = self.since(&m);
        let mut samples = Samples::default();
        let mut uuids = Vec::new();
        for (s, u) in results {
            samples.merge(s);
            uuids.extend(u);
        }
        let ops = uuids.len();
        self.uuids = Arc::new(uuids);
        self.report(Row {
            phase: "create".into(),
            label: "POST /v1/nodes".into(),
            seconds: secs,
            samples,
            cpu,
            client_cpu,
            ops,
        });
    }

    async fn find_nodes(&mut self) -> Result<(), LoadError> {
        let mut conn = Conn::new(&self.target);
        let base = format!(
            "/v1/nodes?resource_class={}&fields=uuid",
            self.args.resource_class
        );
        let nodes = list_all(&mut conn, &base, "nodes").await?;
        let uuids: Vec<String> = nodes
            .iter()
            .filter_map(|n| n["uuid"].as_str().map(str::to_string))
            .collect();
        println!(
            "found {} nodes of resource class {}",
            uuids.len(),
            self.args.resource_class
        );
        self.uuids = Arc::new(uuids);
        Ok(())
    }

    /// manage, provide and (where the power state is unknown) power off every node.
    async fn provide(&mut self) {
        let uuids = self.uuids.clone();
        let n = uuids.len();
        let next = Arc::new(AtomicUsize::new(0));
        let m = self.mark();
        let results = workers(&self.target, self.args.concurrency, |_, mut conn| {
            let (next, uuids) = (next.clone(), uuids.clone());
            async move {
                let mut s = Samples::default();
                let mut done = 0usize;
                let limit = Duration::from_secs(300);
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(u) = uuids.get(i) else { break };
                    let t = Instant::now();
                    let r = make_available(&mut conn, u, (i, n), limit).await;
                    if r.is_ok() {
                        done += 1;
                    }
                    s.record(t.elapsed(), r.is_ok(), || {
                        r.err().map(|e| e.to_string()).unwrap_or_default()
                    });
                }
                (s, done)
            }
        })
        .await;
        let (secs, cpu, client_cpu) = self.since(&m);
        let (samples, ops) = Samples::merged_counted(results);
        self.report(Row {
            phase: "provide".into(),
            label: "manage+provide+power (per node)".into(),
            seconds: secs,
            samples,
            cpu,
            client_cpu,
            ops,
        });
    }

    async fn read(&mut self) {
        let mut reads = self.args.reads.clone();
        if reads.is_empty() {
            reads = vec![
                "node=/v1/nodes/{uuid}".into(),
                "list=/v1/nodes?limit=100".into(),
            ];
        }
        for r in reads {
            // LABEL=PATH, the path starting with '/' (a label may hold '=').
            let (label, path) = match r.find("=/") {
                Some(i) => (r[..i].to_string(), r[i + 1..].to_string()),
                None => (r.clone(), r.clone()),
            };
            let uuids = self.uuids.clone();
            let secs = self.args.read_seconds;
            // The answer's size (the items of a list's page), so that a table of sizes
            // side by side shows which reads answer alike at every size.
            let items = {
                let mut conn = Conn::new(&self.target);
                let p = path.replace("{uuid}", uuids.first().map_or("", String::as_str));
                let a = conn.call(Method::GET, &p, None).await;
                let v = a.json();
                ["nodes", "allocations"]
                    .iter()
                    .find_map(|k| v[*k].as_array().map(Vec::len))
            };
            let tasks = periodic::read(&self.metrics).await;
            let started = unix_seconds();
            let m = self.mark();
            let c = self.args.read_connections.unwrap_or(self.args.concurrency);
            let results = workers(&self.target, c, |w, mut conn| {
                let (uuids, path) = (uuids.clone(), path.clone());
                async move {
                    let mut s = Samples::default();
                    let deadline = Instant::now() + Duration::from_secs_f64(secs);
                    // A cheap generator of node indexes, different on each connection.
                    let mut x: u64 = 0x9E37_79B9_7F4A_7C15 ^ (w as u64 + 1);
                    while Instant::now() < deadline {
                        let p = if path.contains("{uuid}") && !uuids.is_empty() {
                            x ^= x << 13;
                            x ^= x >> 7;
                            x ^= x << 17;
                            path.replace("{uuid}", &uuids[(x % uuids.len() as u64) as usize])
                        } else {
                            path.clone()
                        };
                        let t = Instant::now();
                        let a = conn.call(Method::GET, &p, None).await;
                        s.record(t.elapsed(), a.ok(), || format!("GET {p}: {}", a.describe()));
                    }
                    s
                }
            })
            .await;
            let (secs, cpu, client_cpu) = self.since(&m);
            let ended = unix_seconds();
            let ran = periodic::overlapped(&tasks, &periodic::read(&self.metrics).await);
            let samples = Samples::merged(results);
            let ops = samples.latencies.len();
            self.report(Row {
                phase: "read".into(),
                label,
                seconds: secs,
                samples,
                cpu,
                client_cpu,
                ops,
            });
            let Some(row) = self.rows.last_mut() else {
                continue;
            };
            if let Some(n) = items {
                row["items"] = json!(n);
                println!("{:<13}   answer: {n} items", "");
            }
            // When it ran, to be set beside the database's own work (bench/scale.sh
            // marks the reads a vacuum overlapped), and the server's periodic tasks
            // that ran meanwhile.
            row["started_unix"] = json!(started);
            row["ended_unix"] = json!(ended);
            if !self.metrics.is_empty() {
                match &ran {
                    Some(r) if !r.is_empty() => {
                        println!("{:<13}   periodic tasks meanwhile: {}", "", r.join(", "));
                    }
                    Some(_) => {}
                    None => println!(
                        "{:<13}   periodic tasks meanwhile: unknown (a /metrics did not answer)",
                        ""
                    ),
                }
                row["periodic"] = json!(ran);
            }
        }
    }

    /// Allocations asked for as fast as they are accepted, then waited for.
    async fn alloc_burst(&mut self) {
        let count = self.args.allocations.unwrap_or(self.args.nodes.min(2000));
        let rc = self.args.resource_class.clone();
        let next = Arc::new(AtomicUsize::new(0));
        let m = self.mark();
        let results = workers(&self.target, self.args.concurrency, |_, mut conn| {
            let (next, rc) = (next.clone(), rc.clone());
            async move {
                let mut s = Samples::default();
                let body = json!({"resource_class": rc}).to_string();
                while next.fetch_add(1, Ordering::Relaxed) < count {
                    let t = Instant::now();
                    let a = conn
                        .call(Method::POST, "/v1/allocations", Some(body.as_bytes()))
                        .await;
                    s.record(t.elapsed(), a.ok(), || a.describe());
                }
                s
            }
        })
        .await;
        let posts = Samples::merged(results);
        let accepted = posts.latencies.len() - posts.errors;
        let (secs, cpu, client_cpu) = self.since(&m);
        self.report(Row {
            phase: "alloc-burst".into(),
            label: "POST /v1/allocations".into(),
            seconds: secs,
            samples: posts,
            cpu,
            client_cpu,
            ops: accepted,
        });
        // Until none is `allocating` (bounded).
        let mut conn = Conn::new(&self.target);
        let base =
            format!("/v1/allocations?resource_class={rc}&fields=uuid,state,node_uuid,last_error");
        let mut all = Vec::new();
        let limit = Duration::from_secs(600);
        while m.at.elapsed() < limit {
            match list_all(&mut conn, &base, "allocations").await {
                Ok(a) => {
                    all = a;
                    if all.iter().all(|a| a["state"] != "allocating") {
                        break;
                    }
                }
                Err(e) => println!("alloc-burst   error: {e}"),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let (secs, cpu, client_cpu) = self.since(&m);
        let active: Vec<&Value> = all.iter().filter(|a| a["state"] == "active").collect();
        let nodes: HashSet<&str> = active
            .iter()
            .filter_map(|a| a["node_uuid"].as_str())
            .collect();
        let mut samples = Samples::default();
        for a in &all {
            let ok = a["state"] == "active";
            samples.record(Duration::ZERO, ok, || a.to_string());
        }
        if nodes.len() != active.len() {
            samples.errors += 1;
            samples.error_samples.push(format!(
                "{} active allocations hold only {} nodes: a node allocated twice",
                active.len(),
                nodes.len()
            ));
        }
        samples.latencies.clear();
        self.report(Row {
            phase: "alloc-burst".into(),
            label: "end to end (active)".into(),
            seconds: secs,
            samples,
            cpu,
            client_cpu,
            ops: active.len(),
        });
    }

    /// Each connection asks for an allocation and waits for it before the next, until
    /// the phase's time is up or one of its allocations finds no node left.
    async fn alloc_closed(&mut self) {
        let rc = self.args.resource_class.clone();
        let secs = self.args.closed_seconds;
        let m = self.mark();
        let results = workers(&self.target, self.args.concurrency, |_, mut conn| {
            let rc = rc.clone();
            async move {
                let mut s = Samples::default();
                let body = json!({"resource_class": rc}).to_string();
                let deadline = Instant::now() + Duration::from_secs_f64(secs);
                let mut active = 0usize;
                while Instant::now() < deadline {
                    let t = Instant::now();
                    let a = conn
                        .call(Method::POST, "/v1/allocations", Some(body.as_bytes()))
                        .await;
                    let Some(uuid) = a.json()["uuid"].as_str().map(str::to_string) else {
                        s.record(t.elapsed(), false, || a.describe());
                        continue;
                    };
                    let mut state = a.json()["state"].as_str().unwrap_or("").to_string();
                    let path = format!("/v1/allocations/{uuid}?fields=state,last_error");
                    let mut last = a.json()["last_error"].as_str().unwrap_or("").to_string();
                    for _ in 0..30_000 {
                        if state != "allocating" {
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(1)).await;
                        let a = conn.call(Method::GET, &path, None).await;
                        let v = a.json();
                        state = v["state"].as_str().unwrap_or("allocating").to_string();
                        last = v["last_error"].as_str().unwrap_or("").to_string();
                    }
                    let ok = state == "active";
                    if ok {
                        active += 1;
                    }
                    s.record(t.elapsed(), ok, || format!("{uuid}: {state} {last}"));
                    // The fleet ran out within the phase (a small one does): the next
                    // allocations would fail alike, at once. Any other failure (every
                    // matching node busy) is counted and the loop goes on.
                    if state == "error" && last.to_ascii_lowercase().contains("no available nodes")
                    {
                        break;
                    }
                }
                (s, active)
            }
        })
        .await;
        let (secs, cpu, client_cpu) = self.since(&m);
        let (samples, ops) = Samples::merged_counted(results);
        self.report(Row {
            phase: "alloc-closed".into(),
            label: "POST until active".into(),
            seconds: secs,
            samples,
            cpu,
            client_cpu,
            ops,
        });
    }

    async fn dealloc(&mut self) {
        let mut conn = Conn::new(&self.target);
        let base = format!(
            "/v1/allocations?resource_class={}&fields=uuid",
            self.args.resource_class
        );
        let uuids: Arc<Vec<String>> =
            Arc::new(match list_all(&mut conn, &base, "allocations").await {
                Ok(a) => a
                    .iter()
                    .filter_map(|a| a["uuid"].as_str().map(str::to_string))
                    .collect(),
                Err(e) => {
                    println!("dealloc       error: {e}");
                    return;
                }
            });
        let next = Arc::new(AtomicUsize::new(0));
        let m = self.mark();
        let results = workers(&self.target, self.args.concurrency, |_, mut conn| {
            let (next, uuids) = (next.clone(), uuids.clone());
            async move {
                let mut s = Samples::default();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(u) = uuids.get(i) else { break };
                    let t = Instant::now();
                    let path = format!("/v1/allocations/{u}");
                    let a = with_retry(&mut conn, Method::DELETE, &path, None, 100).await;
                    s.record(t.elapsed(), a.ok(), || a.describe());
                }
                s
            }
        })
        .await;
        let (secs, cpu, client_cpu) = self.since(&m);
        let samples = Samples::merged(results);
        let ops = samples.latencies.len() - samples.errors;
        self.report(Row {
            phase: "dealloc".into(),
            label: "DELETE /v1/allocations/{uuid}".into(),
            seconds: secs,
            samples,
            cpu,
            client_cpu,
            ops,
        });
    }
}

/// How many groups of a fleet of n nodes each attribute splits it into: a hundred nodes
/// to a group at any size, so that a filter for one group (`?owner=project-3`,
/// `?maintenance=true`, `?description_contains=rack 0 `) answers a full page of 100 at
/// 1,000 nodes as at 100,000, and only the table around it grows.
fn groups(n: usize) -> usize {
    (n / 100).max(1)
}

/// The i-th node of n: a fleet as operators have one, owners among projects of a
/// hundred nodes each, every node leased to the next project (so that `?project=` finds
/// both an owner's and a lessee's nodes), one in ten described by its rack (racks of a
/// hundred described nodes; rows are letters, so that a rack's number is a word of its
/// own to the trigram index).
fn node_body(rc: &str, i: usize, n: usize) -> Value {
    let k = groups(n);
    let racks = (k / 10).max(1);
    let mut body = json!({"name": format!("{rc}-{i}"), "driver": "fake-hardware",
        "resource_class": rc, "owner": format!("project-{}", i % k),
        "lessee": format!("project-{}", (i + 1) % k)});
    if i.is_multiple_of(10) {
        let row = char::from(b'a' + (i % 13) as u8);
        body["description"] = json!(format!("rack {} row {row}", (i / 10) % racks));
    }
    body
}

/// Makes the i-th node of n available, as in a fleet: one node in k is retired instead
/// (it stays manageable) and another goes into maintenance once available (neither is
/// allocatable then), k being [`groups`] but at least 10: a hundred of each from 1,000
/// nodes up, a tenth of a smaller fleet each.
async fn make_available(
    conn: &mut Conn,
    uuid: &str,
    (i, n): (usize, usize),
    limit: Duration,
) -> Result<(), LoadError> {
    let k = groups(n).max(10);
    let prov = format!("/v1/nodes/{uuid}/states/provision");
    for (target, want) in [("manage", "manageable"), ("provide", "available")] {
        if target == "provide" && i % k == 2 {
            let body = json!([{"op": "add", "path": "/retired", "value": true}]).to_string();
            let path = format!("/v1/nodes/{uuid}");
            let a = with_retry(conn, Method::PATCH, &path, Some(body.as_bytes()), 500).await;
            return if a.ok() {
                Ok(())
            } else {
                Err(LoadError::refused(format!("retiring {uuid}"), &a))
            };
        }
        let body = json!({"target": target}).to_string();
        let a = with_retry(conn, Method::PUT, &prov, Some(body.as_bytes()), 500).await;
        if !a.ok() {
            return Err(LoadError::refused(format!("{target} {uuid}"), &a));
        }
        wait_node(conn, uuid, limit, |v| {
            let s = v["provision_state"].as_str().unwrap_or("");
            if s == want {
                Some(true)
            } else if s.ends_with("failed") || (s == "enroll" && !v["last_error"].is_null()) {
                Some(false)
            } else {
                None
            }
        })
        .await?;
    }
    let a = conn
        .call(
            Method::GET,
            &format!("/v1/nodes/{uuid}?fields=power_state"),
            None,
        )
        .await;
    if a.json()["power_state"].is_null() {
        let power = format!("/v1/nodes/{uuid}/states/power");
        let body = json!({"target": "power off"}).to_string();
        let a = with_retry(conn, Method::PUT, &power, Some(body.as_bytes()), 500).await;
        if !a.ok() {
            return Err(LoadError::refused(format!("power off {uuid}"), &a));
        }
        wait_node(conn, uuid, limit, |v| {
            (v["power_state"] == "power off").then_some(true)
        })
        .await?;
    }
    if i % k == 1 {
        let body = json!({"reason": "load test"}).to_string();
        let path = format!("/v1/nodes/{uuid}/maintenance");
        let a = with_retry(conn, Method::PUT, &path, Some(body.as_bytes()), 500).await;
        if !a.ok() {
            return Err(LoadError::refused(format!("maintenance {uuid}"), &a));
        }
    }
    Ok(())
}

fn main() {
    let args = Args::parse();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("ironic-load: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = rt.block_on(run(args)) {
        eprintln!("ironic-load: {}", chain(&e));
        std::process::exit(1);
    }
}

async fn run(args: Args) -> Result<(), LoadError> {
    for (name, value) in [
        ("--read-seconds", args.read_seconds),
        ("--closed-seconds", args.closed_seconds),
    ] {
        if !(value.is_finite() && value > 0.0 && value <= 86_400.0) {
            return Err(LoadError::Seconds { name, value });
        }
    }
    let target = Target::parse(&args.url, &args.microversion).await?;
    let mut pids = Vec::new();
    for p in &args.pids {
        let (l, pid) = p
            .split_once('=')
            .ok_or_else(|| LoadError::PidForm(p.clone()))?;
        let pid: u32 = pid
            .parse()
            .map_err(|e| LoadError::PidNumber(p.clone(), e))?;
        pids.push((l.to_string(), pid));
    }
    let mut metrics = Vec::new();
    for url in &args.metrics {
        metrics.push(Target::parse(url, &args.microversion).await?);
    }
    let phases: Vec<String> = args
        .phases
        .split(',')
        .map(|s| s.trim().to_string())
        .collect();
    let mut run = Run {
        args,
        target,
        pids,
        metrics,
        rows: Vec::new(),
        uuids: Arc::new(Vec::new()),
    };
    println!(
        "ironic-load: {} nodes, {} connections, resource class {}",
        run.args.nodes, run.args.concurrency, run.args.resource_class
    );
    run.memory("start");
    for phase in &phases {
        if phase != "create" && phase != "deploy" && run.uuids.is_empty() {
            run.find_nodes().await?;
        }
        match phase.as_str() {
            "create" => run.create().await,
            "provide" => run.provide().await,
            "read" => run.read().await,
            "alloc-burst" => run.alloc_burst().await,
            "alloc-closed" => run.alloc_closed().await,
            "dealloc" => run.dealloc().await,
            "deploy" => run.deploy().await?,
            other => return Err(LoadError::UnknownPhase(other.to_string())),
        }
        run.memory(phase);
    }
    if let Some(path) = &run.args.json {
        let doc = json!({
            "nodes": run.args.nodes,
            "concurrency": run.args.concurrency,
            "rows": run.rows,
        });
        std::fs::write(path, format!("{doc:#}\n"))
            .map_err(|e| LoadError::Write(path.clone(), e))?;
    }
    Ok(())
}
