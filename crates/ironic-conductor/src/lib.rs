//! The conductor: owns node writes. Every change to a node happens here, under the
//! node's exclusive lock (the `reservation` column), with the update rules of
//! `ironic_model::node`. The registry keeps this conductor visible to the API processes.
//!
//! Architecture invariant: the conductor serves no HTTP; it is reached through
//! `ironic_rpc::Handlers` (the conductor calls of `ironic_rpc::calls`).

use std::sync::Arc;
use std::time::Duration;

use ironic_config::Config;
use ironic_db::Db;
use ironic_db::topology::Topology;
use ironic_drivers::Registry;
use ironic_model::Error;
use work::TaskError;

mod agent;
mod allocations;
mod boot_files;
mod every_node;
mod history;
mod images;
mod inspection_rules;
mod instance_image;
pub mod local_files;
mod lock;
mod management;
mod nics;
mod nodes;
pub mod oneview;
pub mod power_sync;
mod provision;
pub use provision::WaitsChecked;
pub mod registry;
pub mod service;
mod volume;
pub mod work;

/// Most traits a node may carry (upstream `MAX_TRAITS_PER_NODE`).
pub const MAX_TRAITS_PER_NODE: usize = ironic_model::names::MAX_TRAITS_PER_NODE;

/// Settings the conductor needs from the configuration.
#[derive(Debug, Clone)]
pub struct ConductorSettings {
    pub host: String,
    pub conductor_group: String,
    pub allow_deleting_available_nodes: bool,
    pub automated_clean: bool,
    pub lock_attempts: u32,
    pub lock_retry_interval: Duration,
    pub heartbeat_interval: Duration,
    /// When a conductor counts as dead (from `heartbeat_interval` and
    /// `heartbeat_timeout`).
    pub liveness: ironic_db::Liveness,
    /// 0: no take-over of dead conductors' allocations.
    pub check_allocations_interval: Duration,
    pub allocation_delay: Duration,
    /// The OneView periodic checks; zero disables them.
    pub oneview_check_interval: Duration,
    /// Node history (`history.rs`): recorded or not, and its pruning.
    pub node_history: bool,
    pub node_history_max_entries: u64,
    pub node_history_cleanup_interval: Duration,
    pub node_history_cleanup_batch_count: u64,
    pub node_history_minimum_days: u64,
    /// `[inspector] add_ports`: `all`, `pxe` or `disabled`.
    pub inspector_add_ports: String,
    /// `[conductor] inspect_wait_timeout`: how long an in-band inspection waits for
    /// the ramdisk's data; zero waits for ever.
    pub inspect_wait_timeout: Duration,
    /// `[conductor] max_conductor_wait_step_seconds`: the longest reserved `wait` step.
    pub max_conductor_wait_step_seconds: u64,
    /// `[conductor] deploy_callback_timeout`, `clean_callback_timeout`,
    /// `service_callback_timeout`: how long a step's wait for an event may see none;
    /// zero waits for ever.
    pub deploy_callback_timeout: Duration,
    pub clean_callback_timeout: Duration,
    pub service_callback_timeout: Duration,
    /// `[conductor] check_provision_state_interval`: the check of the waiting nodes
    /// (`provision::Provisioner::check_waits`); zero disables it.
    pub check_provision_state_interval: Duration,
    /// `[conductor] sync_power_state_interval`; zero disables the sync.
    pub sync_power_state_interval: Duration,
    /// `[conductor] sync_power_state_workers`: BMCs read at the same time.
    pub sync_power_state_workers: usize,
    /// `[conductor] force_power_state_during_sync`: set the hardware back (true) or
    /// record what it reports (false).
    pub force_power_state_during_sync: bool,
    /// `[conductor] power_state_sync_max_retries`: failed rounds before maintenance.
    pub power_state_sync_max_retries: u32,
    /// `[inspection_rules] built_in_rules`: a YAML file of rules besides the API's.
    pub built_in_rules: Option<std::path::PathBuf>,
    /// `[inspection_rules] mask_secrets`: `always`, `never` or `sensitive`.
    pub mask_secrets: String,
    /// `[deploy]`: the image server, the API's address for the agent, fast-track and
    /// the ISO tools (`provision/boot.rs`).
    pub deploy: ironic_config::DeploySection,
    /// `[agent]`: how the conductor talks to the ramdisk agents.
    pub agent: ironic_config::AgentSection,
    /// `[pxe]`: network boot of the ramdisk.
    pub pxe: ironic_config::PxeSection,
    /// What the boot interfaces read (`ironic_drivers::boot`): the API's URL as the
    /// agent calls it (`[deploy] external_callback_url`, else `[api] public_endpoint`;
    /// the all-in-one fills the first in with its own address), the image server's
    /// URLs, the kernel parameters to append.
    pub boot: ironic_drivers::boot::BootSettings,
    /// `[conductor] file_url_allowed_paths` and the service's own files: which
    /// `file://` image references may be read (`local_files.rs`).
    pub local_files: local_files::LocalFiles,
}

impl ConductorSettings {
    pub fn from_config(cfg: &Config) -> Self {
        ConductorSettings {
            host: cfg.default.host.clone(),
            conductor_group: cfg.default.default_conductor_group.clone(),
            allow_deleting_available_nodes: cfg.conductor.allow_deleting_available_nodes,
            automated_clean: cfg.conductor.automated_clean,
            lock_attempts: cfg.conductor.node_locked_retry_attempts.max(1),
            lock_retry_interval: Duration::from_millis(cfg.conductor.node_locked_retry_interval_ms),
            heartbeat_interval: Duration::from_secs(cfg.conductor.heartbeat_interval),
            liveness: ironic_db::Liveness::new(
                cfg.conductor.heartbeat_interval,
                cfg.conductor.heartbeat_timeout,
            ),
            check_allocations_interval: Duration::from_secs(
                cfg.conductor.check_allocations_interval,
            ),
            allocation_delay: Duration::from_millis(cfg.conductor.allocation_delay_ms),
            oneview_check_interval: if cfg.oneview.enable_periodic_tasks
                && cfg
                    .default
                    .enabled_hardware_types
                    .iter()
                    .any(|h| h == "oneview")
            {
                Duration::from_secs(cfg.oneview.periodic_check_interval)
            } else {
                Duration::ZERO
            },
            node_history: cfg.conductor.node_history,
            node_history_max_entries: cfg.conductor.node_history_max_entries,
            node_history_cleanup_interval: Duration::from_secs(
                cfg.conductor.node_history_cleanup_interval,
            ),
            node_history_cleanup_batch_count: cfg.conductor.node_history_cleanup_batch_count,
            node_history_minimum_days: cfg.conductor.node_history_minimum_days,
            inspector_add_ports: cfg.inspector.add_ports.clone(),
            deploy: cfg.deploy.clone(),
            agent: cfg.agent.clone(),
            pxe: cfg.pxe.clone(),
            boot: ironic_drivers::boot::BootSettings {
                api_url: cfg
                    .deploy
                    .external_callback_url
                    .clone()
                    .or_else(|| cfg.api.public_endpoint.clone())
                    .map(|u| u.trim_end_matches('/').to_string()),
                http_url: cfg.deploy.agent_http_url(),
                bmc_http_url: cfg.deploy.bmc_http_url(),
                pxe_kernel_append_params: cfg.pxe.kernel_append_params.clone(),
                redfish_kernel_append_params: cfg.redfish.kernel_append_params.clone(),
            },
            local_files: local_files::LocalFiles::from_config(cfg),
            inspect_wait_timeout: Duration::from_secs(cfg.conductor.inspect_wait_timeout),
            max_conductor_wait_step_seconds: cfg.conductor.max_conductor_wait_step_seconds,
            deploy_callback_timeout: Duration::from_secs(cfg.conductor.deploy_callback_timeout),
            clean_callback_timeout: Duration::from_secs(cfg.conductor.clean_callback_timeout),
            service_callback_timeout: Duration::from_secs(cfg.conductor.service_callback_timeout),
            check_provision_state_interval: Duration::from_secs(
                cfg.conductor.check_provision_state_interval,
            ),
            sync_power_state_interval: Duration::from_secs(cfg.conductor.sync_power_state_interval),
            sync_power_state_workers: cfg.conductor.sync_power_state_workers,
            force_power_state_during_sync: cfg.conductor.force_power_state_during_sync,
            power_state_sync_max_retries: cfg.conductor.power_state_sync_max_retries.max(1),
            built_in_rules: cfg
                .inspection_rules
                .built_in_rules
                .as_ref()
                .map(std::path::PathBuf::from),
            mask_secrets: cfg.inspection_rules.mask_secrets.clone(),
        }
    }
}

/// One conductor: rooms that each own their dependencies and serve part of the
/// contract (`Handlers`, routed at the end of this file), and the background tasks
/// the service starts.
pub struct Conductor {
    db: Db,
    settings: Arc<ConductorSettings>,
    work: work::Runner,
    nodes: nodes::Nodes,
    provision: Arc<provision::Provisioner>,
    allocations: Arc<allocations::Allocator>,
    nics: nics::Nics,
    volumes: volume::Volumes,
    management: management::Management,
    agent: agent::Agent,
    presence: Arc<registry::Presence>,
    power_sync: Arc<power_sync::PowerSync>,
    oneview: Arc<oneview::OneViewChecks>,
}

impl Conductor {
    pub fn new(db: Db, drivers: Registry, settings: ConductorSettings) -> Arc<Self> {
        let settings = Arc::new(settings);
        let work = work::Runner::new();
        let locks = lock::Locks::new(db.clone(), work.clone(), &settings);
        let presence = Arc::new(registry::Presence::new(
            db.clone(),
            drivers.names(),
            settings.clone(),
            work.clone(),
        ));
        let provision = Arc::new(provision::Provisioner::new(
            db.clone(),
            drivers.clone(),
            settings.clone(),
            locks.clone(),
            work.clone(),
        ));
        let std = || (db.clone(), drivers.clone(), settings.clone(), locks.clone());
        Arc::new(Conductor {
            nodes: {
                let (d, r, s, l) = std();
                nodes::Nodes::new(d, r, s, l)
            },
            nics: nics::Nics::new(db.clone(), locks.clone()),
            management: {
                let (d, r, _, l) = std();
                management::Management::new(d, r, l, work.clone())
            },
            volumes: volume::Volumes::new(db.clone(), locks.clone()),
            agent: agent::Agent::new(
                db.clone(),
                settings.clone(),
                locks.clone(),
                provision.clone(),
            ),
            allocations: Arc::new(allocations::Allocator::new(
                db.clone(),
                settings.clone(),
                locks.clone(),
                work.clone(),
                presence.clone(),
            )),
            power_sync: Arc::new(power_sync::PowerSync::new(
                db.clone(),
                drivers.clone(),
                settings.clone(),
                locks.clone(),
                work.clone(),
            )),
            oneview: Arc::new(oneview::OneViewChecks::new(
                db.clone(),
                drivers.clone(),
                settings.clone(),
                locks,
                provision.clone(),
            )),
            provision,
            presence,
            db,
            settings,
            work,
        })
    }

    pub fn db(&self) -> &Db {
        &self.db
    }

    /// The owner of this conductor's background work.
    pub fn work(&self) -> &work::Runner {
        &self.work
    }

    pub fn settings(&self) -> &ConductorSettings {
        &self.settings
    }

    pub fn host(&self) -> &str {
        &self.settings.host
    }

    /// How long ago this conductor last recorded a heartbeat (`None`: not yet).
    pub fn since_last_heartbeat(&self) -> Option<Duration> {
        self.presence.since_last_heartbeat()
    }

    /// This conductor's `conductors.id`, creating its row on a first start.
    pub async fn init_conductor_id(&self) -> Result<ironic_model::ConductorId, Error> {
        self.presence.init_conductor_id().await
    }

    /// At process start: releases node locks an earlier run of this conductor left
    /// behind (a crash), then registers as online.
    pub async fn start(&self) -> Result<(), Error> {
        self.provision.sweep_images().await;
        self.presence.start().await
    }

    /// Releases the locks an earlier run of this host left behind. Call before serving.
    pub async fn release_own_locks(&self) -> Result<(), Error> {
        self.presence.release_own_locks().await
    }

    /// Registers (again) as online.
    pub async fn register(&self) -> Result<(), Error> {
        self.presence.register().await
    }

    /// Removes this conductor from the registry (graceful stop).
    pub async fn unregister(&self) {
        self.presence.unregister().await
    }

    /// Releases the locks held by dead conductors on the nodes this conductor owns
    /// (see [`registry::Presence::release_orphan_locks`]).
    pub async fn release_orphan_locks(&self, topology: &Topology) -> Result<usize, Error> {
        self.presence.release_orphan_locks(topology).await
    }

    /// One heartbeat round (a periodic task, every `heartbeat_interval`): heartbeat,
    /// refresh the view of the cluster, release orphan locks, fail work a crash
    /// interrupted on the nodes this conductor owns.
    pub async fn heartbeat(&self, topology: &Topology) -> Result<(), TaskError> {
        let mut failed = self.presence.heartbeat(topology).await;
        match self.provision.fail_orphaned_work(topology).await {
            Ok(0) => {}
            Ok(n) => {
                tracing::warn!(host = %self.settings.host, nodes = n, "failed work a crash interrupted")
            }
            Err(e) => failed.push(TaskError::failed("checking for interrupted work", e)),
        }
        TaskError::all(failed)
    }

    /// Sets `ironic_conductor_nodes` (see [`registry::Presence::node_metrics`]).
    pub async fn node_metrics(
        &self,
        topology: &Topology,
        seen: &std::sync::Mutex<std::collections::BTreeSet<(String, bool, String)>>,
    ) -> Result<(), TaskError> {
        self.presence.node_metrics(topology, seen).await
    }

    /// Runs the allocation take-over at once (the heartbeat's trigger when a
    /// conductor dies).
    pub(crate) fn set_takeover(&self, t: work::Trigger) {
        let _ = self.presence.takeover.set(t);
    }

    /// One power-state sync round (see [`power_sync::PowerSync::power_sync_round`]).
    pub async fn power_sync_round(&self, topology: &Topology) -> Result<power_sync::Round, Error> {
        self.power_sync.power_sync_round(topology).await
    }

    /// The power-state sync as a periodic task.
    pub async fn power_sync(&self, topology: &Topology) -> Result<(), TaskError> {
        self.power_sync.power_sync(topology).await
    }

    /// One round of OneView checks (see [`oneview::OneViewChecks::oneview_round`]).
    pub async fn oneview_round(&self, topology: &Topology) -> Result<oneview::Round, Error> {
        self.oneview.oneview_round(topology).await
    }

    /// The OneView checks as a periodic task.
    pub async fn oneview_checks(&self, topology: &Topology) -> Result<(), TaskError> {
        self.oneview.oneview_checks(topology).await
    }

    /// Fails what a crash left behind on the nodes this conductor owns (see
    /// [`provision::Provisioner::fail_orphaned_work`]).
    pub async fn fail_orphaned_work(&self, topology: &Topology) -> Result<usize, Error> {
        self.provision.fail_orphaned_work(topology).await
    }

    /// Continues overdue timed waits and fails waits past their callback timeout on
    /// the nodes this conductor owns (see [`provision::Provisioner::check_waits`]).
    pub async fn check_waits(&self, topology: &Topology) -> Result<WaitsChecked, Error> {
        self.provision.check_waits(topology).await
    }

    /// At start-up: continues this conductor's own `allocating` allocations.
    pub async fn resume_allocations(&self) -> Result<usize, Error> {
        self.allocations.resume_allocations().await
    }

    /// One round of node history pruning (`[conductor] node_history_*`).
    pub async fn prune_history(&self) {
        let s = &self.settings;
        history::prune(
            &self.db,
            s.node_history_max_entries,
            s.node_history_minimum_days,
            s.node_history_cleanup_batch_count,
        )
        .await;
    }

    /// One round of the take-over of dead conductors' allocations.
    pub async fn take_over(&self, topology: &Topology) -> Result<(), TaskError> {
        self.allocations.take_over(topology).await
    }
}

// The contract's calls, each routed to the room that serves it: generated from the
// proto's `(call).room` (`ironic_rpc::route_calls!`, crates/ironic-rpc/build.rs).
ironic_rpc::route_calls!(Conductor);
