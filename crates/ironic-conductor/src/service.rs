//! The conductor as a running service: start-up order, heartbeats, the RPC server of the
//! split deployment, and graceful shutdown.
//!
//! Start: release this host's stale locks → start consuming RPC (split deployment) →
//! register and announce it on the bus (API processes re-read the conductor list at
//! once) → heartbeat. The process binds its listeners before this (`ironic`'s
//! `start_role`), and a start that fails after registering unregisters
//! ([`Service::abandon`]): a conductor that cannot serve is never counted alive.
//! Periodic tasks (heartbeat, allocation take-over, OneView checks) and all background
//! work run through the conductor's [`crate::work::Runner`].
//! Stop: periodic tasks end → unregister and announce it (API processes route elsewhere
//! at once, or within one periodic refresh if the announcement is lost) → keep serving
//! for `shutdown_settle_time` when other conductors are alive → stop consuming and finish
//! the requests in hand (over the bus, or the in-process calls of the all-in-one) and
//! the background work they started (one budget,
//! `graceful_shutdown_timeout`; timers of running clean steps are cancelled: whoever
//! owns those nodes next recovers them), heartbeating meanwhile so that no other
//! conductor releases the locks of that work.

use crate::work::TaskError;
use std::sync::Arc;
use std::time::Duration;

use ironic_config::Config;
use ironic_db::Db;
use ironic_db::topology::Topology;
use ironic_rpc::Conductors;
use ironic_rpc::amqp::{BusSettings, Server, SigningKeys};

use crate::{Conductor, ConductorSettings};

/// Why a conductor could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Drivers(#[from] ironic_drivers::UnknownHardwareTypes),
    /// The database refused a start-up step (lock release, registration …).
    #[error(transparent)]
    Database(#[from] ironic_model::Error),
}

pub struct Service {
    pub conductor: Arc<Conductor>,
    pub topology: Arc<Topology>,
    server: Option<Server>,
    /// The all-in-one's transport to this conductor ([`Service::in_process`]).
    local: Option<Conductors>,
    settle: Duration,
    drain_timeout: Duration,
}

/// How long a conductor that failed to start waits for what it started to stop.
const ABANDON_WAIT: Duration = Duration::from_secs(5);

/// The longest a driver setting may make a call wait, in seconds (a day): larger
/// values are taken as this, not left to overflow a deadline.
const LONGEST_WAIT: u64 = 86_400;

/// `[redfish]` as the driver's settings.
fn redfish_settings(cfg: &Config) -> ironic_drivers::redfish::client::Settings {
    let r = &cfg.redfish;
    ironic_drivers::redfish::client::Settings {
        request_timeout: Duration::from_secs(r.request_timeout.clamp(1, LONGEST_WAIT)),
        attempts: r.connection_attempts.max(1),
        retry_interval: Duration::from_secs(r.connection_retry_interval),
        power_state_change_timeout: Duration::from_secs(
            r.power_state_change_timeout.min(LONGEST_WAIT),
        ),
        power_poll_interval: Duration::from_secs(1),
    }
}

/// `[ipmi]` as the driver's settings.
fn ipmi_settings(cfg: &Config) -> ironic_drivers::ipmi::Settings {
    let i = &cfg.ipmi;
    let interval = if i.min_command_interval.is_finite() {
        i.min_command_interval.clamp(0.0, 60.0)
    } else {
        5.0
    };
    ironic_drivers::ipmi::Settings {
        command_retry_timeout: Duration::from_secs(i.command_retry_timeout.min(LONGEST_WAIT)),
        min_command_interval: Duration::from_secs_f64(interval),
        power_state_change_timeout: Duration::from_secs(
            i.power_state_change_timeout.min(LONGEST_WAIT),
        ),
        ipmitool: i.ipmitool_path.as_ref().map(Into::into),
    }
}

/// The `oneview` hardware type's appliance, from `[oneview]`.
pub fn oneview_settings(cfg: &Config) -> ironic_drivers::oneview::client::Settings {
    let o = &cfg.oneview;
    ironic_drivers::oneview::client::Settings {
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
    }
}

/// `[amqp] tls_cacert_file` cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("cannot read [amqp] tls_cacert_file {}: {source}", path.display())]
pub struct UnreadableCa {
    path: std::path::PathBuf,
    source: std::io::Error,
}

/// Bus settings from the configuration; `who` names the connection in RabbitMQ,
/// `cluster` is the deployment's id (`Db::cluster_id`), `signing` its message keys.
/// Fails on an unreadable `[amqp] tls_cacert_file`.
pub fn bus_settings(
    cfg: &Config,
    who: &str,
    cluster: &str,
    signing: SigningKeys,
) -> Result<BusSettings, UnreadableCa> {
    let tls_ca_pem = match &cfg.amqp.tls_cacert_file {
        Some(path) => Some(
            std::fs::read_to_string(path).map_err(|source| UnreadableCa {
                path: path.into(),
                source,
            })?,
        ),
        None => None,
    };
    Ok(BusSettings {
        url: cfg.amqp.url.clone(),
        exchange: cfg.amqp.exchange.clone(),
        call_timeout: Duration::from_secs(cfg.amqp.call_timeout),
        prefetch: cfg.amqp.prefetch,
        accept_timeout: Duration::from_secs(cfg.amqp.accept_timeout.max(1)),
        max_backoff: Duration::from_secs(cfg.amqp.max_reconnect_backoff.max(1)),
        connection_name: format!("{who}@{}", cfg.default.host),
        cluster: cluster.to_string(),
        tls_ca_pem,
        signing,
    })
}

impl Service {
    /// Starts the conductor; with `bus`, it serves RPC over AMQP (split deployment),
    /// otherwise the caller reaches `conductor` in-process.
    pub async fn start(
        cfg: &Config,
        db: Db,
        bus: Option<BusSettings>,
    ) -> Result<Service, StartError> {
        let drivers = ironic_drivers::Registry::new(&cfg.default.enabled_hardware_types)?
            .with_oneview(oneview_settings(cfg))
            .with_redfish(redfish_settings(cfg))
            .with_ipmi(ipmi_settings(cfg));
        let conductor = Conductor::new(db.clone(), drivers, ConductorSettings::from_config(cfg));
        conductor.release_own_locks().await?;
        // A restart within the heartbeat timeout: show we are alive before taking any
        // request, so no peer takes us for dead and releases locks we are about to take.
        if let Err(e) = db
            .conductor_touch(&cfg.default.host, ironic_model::node::now())
            .await
        {
            tracing::warn!(error = %ironic_model::error::chain(&e), "could not refresh the heartbeat");
        }
        // The row id is the affinity of the allocations this conductor works on: known
        // before the first request.
        conductor.init_conductor_id().await?;
        // Names this run in every call it takes: a caller whose call an earlier run
        // took knows that call is lost once it sees this one.
        let incarnation = db.conductor_new_incarnation(&cfg.default.host).await?;
        let server = bus.map(|b| {
            let wait = b.call_timeout;
            let handlers = ironic_rpc::dispatcher(conductor.clone());
            let host = cfg.default.host.clone();
            (Server::start(b, host, incarnation, handlers), wait)
        });
        if let Some((s, wait)) = &server
            && !s.consuming(*wait).await
        {
            tracing::warn!(
                "the message bus is not reachable yet; registering anyway, RPC will be served once it is"
            );
        }
        if let Err(e) = conductor.register().await {
            if let Some((s, _)) = &server {
                s.shutdown_within(ABANDON_WAIT).await;
            }
            return Err(e.into());
        }
        if let Some((s, _)) = &server {
            s.announce_membership().await;
        }
        let topology = Arc::new(Topology::new(
            db,
            conductor.settings().liveness,
            cfg.default.hash_partition_exponent,
        ));
        topology.refresh().await;
        let work = conductor.work();
        let settings = conductor.settings();
        let task = |kind| ConductorTask {
            kind,
            conductor: conductor.clone(),
            topology: topology.clone(),
        };
        work.periodic(
            "heartbeat",
            settings.heartbeat_interval,
            false,
            task(Periodic::Heartbeat),
        );
        if let Err(e) = conductor.resume_allocations().await {
            tracing::error!(error = %ironic_model::error::chain(&e), "could not resume allocations");
        }
        if let Some(t) = work.periodic(
            "allocation take-over",
            settings.check_allocations_interval,
            false,
            task(Periodic::TakeOver),
        ) {
            // The heartbeat starts it at once when it sees a conductor die.
            conductor.set_takeover(t);
        }
        work.periodic(
            "node metrics",
            crate::registry::NODE_METRICS_INTERVAL,
            false,
            task(Periodic::NodeMetrics(Default::default())),
        );
        work.periodic(
            "node history pruning",
            settings.node_history_cleanup_interval,
            true,
            task(Periodic::HistoryPruning),
        );
        work.periodic(
            "step waits",
            settings.check_provision_state_interval,
            true,
            task(Periodic::StepWaits),
        );
        work.periodic(
            "power-state sync",
            settings.sync_power_state_interval,
            true,
            task(Periodic::PowerSync),
        );
        work.periodic(
            "oneview checks",
            settings.oneview_check_interval,
            true,
            task(Periodic::OneView),
        );
        Ok(Service {
            conductor,
            topology,
            server: server.map(|(s, _)| s),
            local: None,
            settle: Duration::from_secs(cfg.conductor.shutdown_settle_time),
            drain_timeout: Duration::from_secs(cfg.conductor.graceful_shutdown_timeout),
        })
    }

    /// The in-process transport to this conductor (the all-in-one): a graceful stop
    /// of the service waits for its calls in flight as for those of the bus, within
    /// the same budget.
    pub fn in_process(&mut self) -> Conductors {
        let c = Conductors::in_process(self.conductor.clone());
        self.local = Some(c.clone());
        c
    }

    /// Follows whether the RPC server is consuming (`None` in-process: no bus).
    pub fn consuming_watch(&self) -> Option<tokio::sync::watch::Receiver<bool>> {
        self.server.as_ref().map(Server::consuming_watch)
    }

    /// Whether the RPC server is consuming (always true in-process).
    pub async fn consuming(&self, timeout: Duration) -> bool {
        match &self.server {
            Some(s) => s.consuming(timeout).await,
            None => true,
        }
    }

    /// Stops a conductor whose process failed to start after it registered: out of
    /// the conductor list at once (API processes told), its periodic tasks and RPC
    /// consumer stopped. No settling and no drain beyond a moment: it served nothing
    /// yet.
    pub async fn abandon(self) {
        let work = self.conductor.work().clone();
        work.stop_periodic().await;
        self.conductor.unregister().await;
        if let Some(server) = &self.server {
            server.announce_membership().await;
            server.shutdown_within(ABANDON_WAIT).await;
        }
        if let Some(local) = &self.local {
            local.shutdown_within(ABANDON_WAIT).await;
        }
        work.shutdown(ABANDON_WAIT).await;
    }

    /// Graceful stop (see the module documentation).
    pub async fn shutdown(self) {
        let work = self.conductor.work().clone();
        // Periodic tasks end (after their current run) before unregistering, so that
        // no heartbeat registers this conductor again.
        work.stop_periodic().await;
        self.conductor.unregister().await;
        let Some(server) = self.server else {
            // All-in-one: the HTTP server has stopped; finish the calls in hand and the
            // work they started (one budget).
            let deadline = tokio::time::Instant::now() + self.drain_timeout;
            if let Some(local) = &self.local
                && !local.shutdown_within(self.drain_timeout).await
            {
                tracing::warn!(
                    "calls in hand did not finish within graceful_shutdown_timeout; abandoned"
                );
            }
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if !work.shutdown(left).await {
                tracing::warn!(
                    "background work did not finish within graceful_shutdown_timeout; abandoned"
                );
            }
            return;
        };
        server.announce_membership().await;
        let host = self.conductor.host().to_string();
        // Offline for routing, but alive: keep the heartbeat fresh from now until the
        // work in hand is done, so nobody releases its locks. (Not a task of the
        // runner: the runner's periodic tasks have stopped, and this one must outlive
        // the runner's wait.)
        let db = self.conductor.db().clone();
        let interval = self.conductor.settings().heartbeat_interval;
        let me = host.clone();
        let keepalive = tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval);
            loop {
                tick.tick().await;
                if let Err(e) = db.conductor_touch(&me, ironic_model::node::now()).await {
                    tracing::warn!(error = %ironic_model::error::chain(&e), "heartbeat while stopping failed");
                }
            }
        });
        self.topology.refresh().await;
        let others = self
            .topology
            .snapshot()
            .conductors
            .iter()
            .filter(|(c, alive)| *alive && c.hostname != host)
            .count();
        if others > 0 && !self.settle.is_zero() {
            tracing::info!(
                others,
                settle_secs = self.settle.as_secs(),
                "offline; serving a little longer while API processes route to the other conductors"
            );
            tokio::time::sleep(self.settle).await;
        }
        // One budget for the requests in hand and the work they started.
        let deadline = tokio::time::Instant::now() + self.drain_timeout;
        if !server.shutdown_within(self.drain_timeout).await {
            tracing::warn!(
                "requests in hand did not finish within graceful_shutdown_timeout; abandoned"
            );
        }
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if !work.shutdown(left).await {
            tracing::warn!(
                "background work did not finish within graceful_shutdown_timeout; abandoned"
            );
        }
        keepalive.abort();
    }
}

/// The conductor's periodic tasks.
enum Periodic {
    Heartbeat,
    TakeOver,
    /// The label sets of `ironic_conductor_nodes` set before.
    NodeMetrics(std::sync::Mutex<std::collections::BTreeSet<(String, bool, String)>>),
    HistoryPruning,
    StepWaits,
    PowerSync,
    OneView,
}

/// One periodic task of a conductor, over its view of the cluster.
struct ConductorTask {
    kind: Periodic,
    conductor: Arc<Conductor>,
    topology: Arc<Topology>,
}

impl crate::work::BackgroundTask for ConductorTask {
    async fn run(&self) -> Result<(), TaskError> {
        let (c, t) = (&self.conductor, &self.topology);
        match &self.kind {
            Periodic::Heartbeat => c.heartbeat(t).await,
            Periodic::TakeOver => c.take_over(t).await,
            Periodic::NodeMetrics(seen) => c.node_metrics(t, seen).await,
            Periodic::HistoryPruning => {
                c.prune_history().await;
                Ok(())
            }
            Periodic::StepWaits => {
                let done = c
                    .check_waits(t)
                    .await
                    .map_err(|e| TaskError::failed("checking the waiting nodes", e))?;
                if done != Default::default() {
                    tracing::info!(
                        resumed = done.resumed,
                        timed_out = done.timed_out,
                        "step waits checked"
                    );
                }
                Ok(())
            }
            Periodic::PowerSync => c.power_sync(t).await,
            Periodic::OneView => c.oneview_checks(t).await,
        }
    }
}
