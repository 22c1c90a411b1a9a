//! The conductor's shared core (see [`Core`]).

use ironic_db::Db;
use ironic_drivers::{HardwareType, Registry};
use ironic_model::node::INTERFACE_TYPES;
use ironic_model::{ConductorId, Error, Node};
use ironic_rpc::NodeRef;

use crate::{ConductorSettings, work};

/// What every part of a conductor shares: its database, drivers, settings, identity,
/// background-work runner and (in `lock.rs`) the node lock. The parts
/// ([`crate::Conductor`]'s node calls, [`crate::provision::Provisioner`],
/// [`crate::allocations::Allocator`]) each hold it and read it through `Deref`.
pub struct Core {
    pub(crate) db: Db,
    pub(crate) drivers: Registry,
    pub(crate) settings: ConductorSettings,
    /// Names this process run: work a node records as running here (a step's timer)
    /// is orphaned once the process is gone, even if the host comes back.
    pub(crate) boot_id: String,
    /// The owner of every piece of background work.
    pub(crate) work: work::Runner,
    /// This conductor's row id (`conductors.id`), the `conductor_affinity` of the
    /// allocations it works on; known once the service has started.
    pub(crate) conductor_id: std::sync::OnceLock<ironic_model::ConductorId>,
    /// The heartbeat and its database session (this conductor's presence), opened at
    /// the first heartbeat; held until the process ends, even while stopping.
    pub(crate) heartbeat: tokio::sync::Mutex<Option<ironic_db::heartbeat::Heartbeat>>,
    /// The conductors this one has seen declared dead; a new one triggers the
    /// allocation take-over at once.
    pub(crate) known_dead: std::sync::Mutex<std::collections::BTreeSet<ConductorId>>,
    /// Runs the allocation take-over now (set by the service).
    pub(crate) takeover: std::sync::OnceLock<work::Trigger>,
    /// When the last heartbeat was recorded.
    pub(crate) last_beat: std::sync::Mutex<Option<std::time::Instant>>,
    /// The node lock (see [`crate::lock::Locks`]).
    pub(crate) locks: crate::lock::Locks,
}

impl Core {
    pub fn new(db: Db, drivers: Registry, settings: ConductorSettings) -> Core {
        let work = work::Runner::new();
        Core {
            locks: crate::lock::Locks::new(db.clone(), work.clone(), &settings),
            db,
            drivers,
            settings,
            boot_id: uuid::Uuid::new_v4().simple().to_string(),
            work,
            conductor_id: std::sync::OnceLock::new(),
            heartbeat: tokio::sync::Mutex::new(None),
            known_dead: std::sync::Mutex::new(Default::default()),
            takeover: std::sync::OnceLock::new(),
            last_beat: std::sync::Mutex::new(None),
        }
    }

    /// How long ago this conductor last recorded a heartbeat (`None`: not yet).
    pub fn since_last_heartbeat(&self) -> Option<std::time::Duration> {
        self.last_beat
            .lock()
            .ok()
            .and_then(|t| t.map(|t| t.elapsed()))
    }

    pub fn host(&self) -> &str {
        &self.settings.host
    }

    /// The implementation of the node's hardware type (400 `NoValidHost` if this
    /// conductor does not enable it).
    pub(crate) fn driver_for(
        &self,
        n: &Node,
    ) -> Result<&dyn ironic_drivers::interfaces::Driver, Error> {
        self.drivers
            .driver(&n.driver)
            .ok_or_else(|| Error::no_valid_host(&n.driver, &n.conductor_group))
    }

    /// Reads the node a reference names, without locking it (shared reads).
    pub(crate) async fn read(&self, r: &NodeRef) -> Result<Node, Error> {
        self.db
            .node_by_id(r.id)
            .await?
            .filter(|n| n.uuid.as_str() == r.uuid)
            .ok_or_else(|| Error::node_not_found(&r.uuid))
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

    /// Whether a live conductor serves `driver` in `group`.
    pub(crate) async fn served(&self, driver: &str, group: &str) -> Result<bool, Error> {
        let now = ironic_model::node::now();
        Ok(self.db.conductor_list().await?.iter().any(|c| {
            c.is_alive(now, &self.settings.liveness)
                && c.conductor_group.eq_ignore_ascii_case(group)
                && c.drivers.iter().any(|d| d == driver)
        }))
    }

    pub(crate) fn hardware_type(&self, driver: &str, group: &str) -> Result<&HardwareType, Error> {
        self.drivers
            .get(driver)
            .ok_or_else(|| Error::no_valid_host(driver, group))
    }

    /// Fills unset interfaces with the hardware type's defaults and refuses
    /// implementations the hardware type does not enable.
    pub(crate) fn complete_interfaces(&self, node: &mut Node) -> Result<(), Error> {
        let hw = self.hardware_type(&node.driver, &node.conductor_group)?;
        for (i, t) in INTERFACE_TYPES.iter().enumerate() {
            match &node.interfaces.0[i] {
                None => node.interfaces.0[i] = hw.default_interface(t).map(str::to_owned),
                Some(x) if !hw.enabled_interfaces(t).contains(&x.as_str()) => {
                    return Err(Error::invalid(format!(
                        "{t} interface implementation '{x}' is not supported by hardware type {}. Enabled implementations: {}",
                        hw.name,
                        hw.enabled_interfaces(t).join(", ")
                    )));
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// This conductor's `conductors.id`, creating its row on a first start. Called by
    /// the service before it serves.
    pub async fn init_conductor_id(&self) -> Result<ConductorId, Error> {
        if let Some(id) = self.conductor_id.get() {
            return Ok(*id);
        }
        let id = self
            .db
            .conductor_ensure(
                &self.settings.host,
                &self.settings.conductor_group,
                &self.drivers.names(),
            )
            .await?;
        Ok(*self.conductor_id.get_or_init(|| id))
    }

    pub(crate) fn my_id(&self) -> Result<ConductorId, Error> {
        self.conductor_id
            .get()
            .copied()
            .ok_or_else(|| Error::Unavailable("The conductor is starting; retry.".into()))
    }
}
