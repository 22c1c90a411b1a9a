//! `ironic-oneview migrate-to-dynamic`: moves `oneview` nodes from the deprecated
//! pre-allocation model (the operator applied a profile in OneView) to dynamic
//! allocation (reference §4):
//!
//! - a node with an instance keeps its profile, which becomes Ironic's
//!   (`applied_server_profile_uri`), and gets `dynamic_allocation = true`;
//! - an idle node goes into maintenance (`Migrating to dynamic allocation`), its
//!   server is powered off and its profile removed in OneView, it gets
//!   `dynamic_allocation = true`, and
//!   maintenance ends. A run that stopped half-way is resumed: nodes still in
//!   maintenance with that reason are candidates again.
//!
//! Only nodes in stable states are touched (enroll, manageable, available, active,
//! inspect failed, clean failed, error); each under its node lock, so a conductor never
//! works on a node being migrated. `--dry-run` prints the plan and changes nothing.
//!
//! The lock: the tool is a node writer outside the conductor, so it takes the node lock
//! itself, the same `reservation` column every conductor takes (`Db::node_reserve`, as
//! holder [`HOLDER`]), not through the conductor's `lock.rs`: it has no runner to give
//! a lock back from, and needs none, as it works one node at a time and gives each lock
//! back (`Db::node_release`) on every path before the next node; every write is
//! `Db::node_save` as [`HOLDER`], which writes nothing once the lock is gone. The plan
//! for a node is made from a read before the lock and checked again under it. A run
//! killed mid-node leaves that node locked by [`HOLDER`]: no conductor releases it
//! (it is no conductor's), and the next non-dry run gives it back first
//! (`Db::node_release_all`), so one run at a time.

use std::time::Duration;

use ironic_db::{Db, DbOptions, NodeFilter, NodeListQuery};
use ironic_drivers::interfaces::NodeInfo;
use ironic_drivers::oneview::{self, APPLIED_PROFILE, client::Client};
use ironic_model::Node;
use ironic_model::states::ProvisionState as P;
use serde_json::{Value, json};

pub const MIGRATING: &str = "Migrating to dynamic allocation";
/// The lock holder name the tool uses.
pub const HOLDER: &str = "oneview-migration";

/// Which nodes to consider.
#[derive(Debug, Clone)]
pub enum Selection {
    All,
    Nodes(Vec<String>),
}

/// What happened to one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// With an instance: its profile became Ironic's.
    Adopted(String),
    /// Idle: its profile (if any) was removed.
    Freed(Option<String>),
    Skipped(String),
    Failed(String),
}

fn migratable(state: P) -> bool {
    matches!(
        state,
        P::Enroll
            | P::Manageable
            | P::Available
            | P::Active
            | P::InspectFailed
            | P::CleanFailed
            | P::Error
    )
}

/// Why the migration did not run (a node's own failure is its [`Outcome`]).
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    #[error(transparent)]
    Database(#[from] ironic_model::Error),
    #[error("node {0} not found")]
    NodeNotFound(String),
}

/// Runs the migration; prints one line per node and returns the outcomes.
pub async fn run(
    db: &Db,
    client: &Client,
    selection: &Selection,
    dry_run: bool,
    out: &mut dyn std::io::Write,
) -> Result<Vec<(String, Outcome)>, MigrateError> {
    if !dry_run {
        // Locks an interrupted run left behind (module doc).
        let stale = db.node_release_all(HOLDER).await?;
        if stale > 0 {
            let _ = writeln!(out, "released {stale} node lock(s) an interrupted run left");
        }
    }
    let nodes = candidates(db, selection).await?;
    let mut results = Vec::new();
    for node in nodes {
        let uuid = node.uuid.to_string();
        let outcome = migrate_one(db, client, &node, dry_run).await;
        let line = match &outcome {
            Outcome::Adopted(p) => format!("{uuid}: has an instance; profile {p} becomes Ironic's"),
            Outcome::Freed(Some(p)) => format!("{uuid}: idle; profile {p} removed"),
            Outcome::Freed(None) => format!("{uuid}: idle; no profile to remove"),
            Outcome::Skipped(why) => format!("{uuid}: skipped: {why}"),
            Outcome::Failed(why) => format!("{uuid}: FAILED: {why}"),
        };
        let prefix = if dry_run { "[dry run] " } else { "" };
        let _ = writeln!(out, "{prefix}{line}");
        results.push((uuid, outcome));
    }
    Ok(results)
}

async fn candidates(db: &Db, selection: &Selection) -> Result<Vec<Node>, MigrateError> {
    let mut all = Vec::new();
    match selection {
        Selection::Nodes(idents) => {
            for ident in idents {
                let n = match ironic_model::ids::canonical_uuid(ident) {
                    Some(u) => db.node_by_uuid(&u).await,
                    None => db.node_by_name(ident).await,
                }?
                .ok_or_else(|| MigrateError::NodeNotFound(ident.clone()))?;
                all.push(n);
            }
        }
        Selection::All => {
            let mut marker = None;
            for _ in 0..10_000 {
                let q = NodeListQuery {
                    filter: NodeFilter {
                        driver: Some(oneview::ONEVIEW.name.into()),
                        ..Default::default()
                    },
                    marker: marker.clone(),
                    with_traits: false,
                    ..Default::default()
                };
                let page = db.node_list(&q).await?;
                let full = page.len() == q.limit as usize;
                marker = page.last().map(|n| n.uuid.to_string());
                all.extend(page);
                if !full {
                    break;
                }
            }
        }
    }
    Ok(all)
}

async fn migrate_one(db: &Db, client: &Client, node: &Node, dry_run: bool) -> Outcome {
    if node.driver != oneview::ONEVIEW.name {
        return Outcome::Skipped(format!("driver {} is not oneview", node.driver));
    }
    let resuming = node.maintenance && node.maintenance_reason.as_deref() == Some(MIGRATING);
    let dynamic = match oneview::dynamic_allocation(NodeInfo::from(node)) {
        Ok(d) => d,
        Err(e) => return Outcome::Skipped(e.to_string()),
    };
    if dynamic && !resuming {
        return Outcome::Skipped("already uses dynamic allocation".into());
    }
    if !migratable(node.provision_state) {
        return Outcome::Skipped(format!(
            "in state {}, which a conductor may be working on; retry later",
            node.provision_state
        ));
    }
    let data = match oneview::node_data(NodeInfo::from(node)) {
        Ok(d) => d,
        Err(e) => return Outcome::Skipped(e.to_string()),
    };
    let sh = match client.get(&data.server_hardware_uri).await {
        Ok(sh) => sh,
        Err(e) => return Outcome::Failed(e.to_string()),
    };
    let profile = sh
        .get("serverProfileUri")
        .and_then(Value::as_str)
        .filter(|p| !p.is_empty())
        .map(str::to_owned);
    let with_instance = node.instance_uuid.is_some();
    if dry_run {
        return if with_instance {
            match profile {
                Some(p) => Outcome::Adopted(p),
                None => Outcome::Failed("has an instance but its hardware has no profile".into()),
            }
        } else {
            Outcome::Freed(profile)
        };
    }
    // Under the node lock from here on. The plan above was made from a read before the
    // lock: a node that changed meanwhile (a deploy began, an instance came or went,
    // maintenance or driver_info changed) is given back untouched for a later run.
    let mut n = match db.node_reserve(node.id, HOLDER).await {
        Ok(n) => n,
        Err(e) => return Outcome::Skipped(e.to_string()),
    };
    let planned_for = |x: &Node| {
        (
            x.provision_state,
            x.instance_uuid.is_some(),
            x.maintenance,
            x.maintenance_reason.clone(),
            x.driver_info.clone(),
        )
    };
    if planned_for(&n) != planned_for(node) {
        if let Err(e) = db.node_release(n.id, HOLDER).await {
            return Outcome::Failed(format!("could not release the node lock: {e}"));
        }
        return Outcome::Skipped("changed while it was being looked at; run again".into());
    }
    let result = apply(db, client, &mut n, with_instance, profile).await;
    if let Err(e) = db.node_release(n.id, HOLDER).await {
        return Outcome::Failed(format!("could not release the node lock: {e}"));
    }
    result
}

async fn apply(
    db: &Db,
    client: &Client,
    n: &mut Node,
    with_instance: bool,
    profile: Option<String>,
) -> Outcome {
    n.reservation = Some(HOLDER.into());
    let save = |n: &Node| {
        let n = n.clone();
        async move {
            db.node_save(&n, HOLDER)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        }
    };
    if with_instance {
        let Some(p) = profile else {
            return Outcome::Failed("has an instance but its hardware has no profile".into());
        };
        n.driver_info.insert(APPLIED_PROFILE.into(), json!(p));
        n.driver_info
            .insert("dynamic_allocation".into(), json!(true));
        return match save(n).await {
            Ok(()) => Outcome::Adopted(p),
            Err(e) => Outcome::Failed(e),
        };
    }
    n.maintenance = true;
    n.maintenance_reason = Some(MIGRATING.into());
    if let Err(e) = save(n).await {
        return Outcome::Failed(e);
    }
    if let Some(p) = &profile {
        // The appliance refuses to remove a profile from a powered-on server (upstream's
        // tool did not power off first); the node is idle, so off it goes.
        let data = oneview::node_data(NodeInfo::from(&*n));
        if let Ok(d) = data {
            let off = json!({"powerState": "Off", "powerControl": "PressAndHold"});
            let path = format!("{}/powerState", d.server_hardware_uri);
            if let Err(e) = client.run("PUT", &path, &off).await {
                return Outcome::Failed(format!("powering off before removing profile {p}: {e}"));
            }
            n.power_state = Some("power off".into());
        }
        match client.run("DELETE", p, &json!({})).await {
            Ok(_) => {}
            Err(e) if e.is_not_found() => {}
            // The node stays in maintenance with the migration reason: a later run
            // resumes it.
            Err(e) => return Outcome::Failed(format!("removing profile {p}: {e}")),
        }
    }
    n.driver_info
        .insert("dynamic_allocation".into(), json!(true));
    n.driver_info.remove(APPLIED_PROFILE);
    n.maintenance = false;
    n.maintenance_reason = None;
    match save(n).await {
        Ok(()) => Outcome::Freed(profile),
        Err(e) => Outcome::Failed(e),
    }
}

/// `ironic-oneview`'s command line.
pub async fn main_with(args: Vec<String>) -> std::process::ExitCode {
    use std::process::ExitCode;
    let usage = "usage: ironic-oneview migrate-to-dynamic (--all | --nodes NODE...) [--dry-run] [--config FILE]\n\
                 Moves oneview nodes from pre-allocation to dynamic allocation (docs/oneview.md).\n\
                 Configuration: [database] url and [oneview] from --config / IRONIC_CONFIG and IRONIC_<SECTION>__<KEY>.";
    let mut it = args.into_iter().skip(1);
    if it.next().as_deref() != Some("migrate-to-dynamic") {
        eprintln!("{usage}");
        return ExitCode::from(2);
    }
    let (mut all, mut nodes, mut dry_run, mut config) = (false, Vec::new(), false, None);
    let mut in_nodes = false;
    for a in it {
        match a.as_str() {
            "--all" => all = true,
            "--dry-run" => dry_run = true,
            "--nodes" => in_nodes = true,
            "--config" => config = Some(String::new()),
            "-h" | "--help" => {
                println!("{usage}");
                return ExitCode::SUCCESS;
            }
            _ if config.as_deref() == Some("") => config = Some(a),
            _ if in_nodes && !a.starts_with("--") => nodes.push(a),
            _ => {
                eprintln!("unexpected argument {a:?}\n{usage}");
                return ExitCode::from(2);
            }
        }
    }
    let selection = match (all, nodes.is_empty()) {
        (true, true) => Selection::All,
        (false, false) => Selection::Nodes(nodes),
        _ => {
            eprintln!("give either --all or --nodes NODE...\n{usage}");
            return ExitCode::from(2);
        }
    };
    let path = config
        .filter(|c| !c.is_empty())
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("IRONIC_CONFIG").map(Into::into));
    let cfg = match ironic_config::Config::load(path.as_deref(), std::env::vars()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("ironic-oneview: {e}");
            return ExitCode::from(2);
        }
    };
    let db = match Db::connect(
        &cfg.database.url,
        &DbOptions {
            max_connections: 2,
            create: false,
            ..Default::default()
        },
    )
    .await
    {
        Ok(d) => d,
        Err(e) => {
            eprintln!("ironic-oneview: {}", ironic_model::error::chain(&e));
            return ExitCode::from(1);
        }
    };
    let o = &cfg.oneview;
    let client = match Client::new(oneview::client::Settings {
        manager_url: o.manager_url.clone().unwrap_or_default(),
        username: o.username.clone().unwrap_or_default(),
        password: o.password.clone().unwrap_or_default(),
        task_timeout: Duration::from_secs(o.task_timeout.max(1)),
        poll_interval: Duration::from_millis(200),
        request_timeout: Duration::from_secs(30),
        max_retries: o.max_polling_attempts,
        retry_pause: Duration::from_secs(10),
        allow_insecure: o.allow_insecure_connections,
        ca_file: o.tls_cacert_file.clone(),
    }) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("ironic-oneview: {e}");
            return ExitCode::from(2);
        }
    };
    let mut stdout = std::io::stdout();
    match run(&db, &client, &selection, dry_run, &mut stdout).await {
        Ok(results) => {
            let failed = results
                .iter()
                .filter(|(_, o)| matches!(o, Outcome::Failed(_)))
                .count();
            println!(
                "{} node(s) considered, {} migrated, {} skipped, {failed} failed{}",
                results.len(),
                results
                    .iter()
                    .filter(|(_, o)| matches!(o, Outcome::Adopted(_) | Outcome::Freed(_)))
                    .count(),
                results
                    .iter()
                    .filter(|(_, o)| matches!(o, Outcome::Skipped(_)))
                    .count(),
                if dry_run {
                    " (dry run: nothing changed)"
                } else {
                    ""
                }
            );
            if failed > 0 {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e) => {
            eprintln!("ironic-oneview: {}", ironic_model::error::chain(&e));
            ExitCode::from(1)
        }
    }
}
