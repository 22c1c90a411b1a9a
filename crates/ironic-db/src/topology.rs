//! What the API knows of the conductors: who is alive, which hardware types and groups
//! they serve, and the hash rings that name the conductor of each node. Rebuilt from the
//! `conductors` table every `refresh` period (at most one heartbeat interval, so a
//! registration, an unregistration or a death shows within one interval) and at once,
//! rate-limited, when a lookup misses.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use crate::{Conductor, Db};
use ironic_model::ring::{HashRing, ring_key};

/// One immutable view of the cluster.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub conductors: Vec<(Conductor, bool)>,
    rings: HashMap<String, HashRing>,
}

impl Snapshot {
    pub fn build(conductors: Vec<Conductor>, timeout_secs: u64, exponent: u32) -> Snapshot {
        let now = chrono::Utc::now();
        let conductors: Vec<(Conductor, bool)> = conductors
            .into_iter()
            .map(|c| {
                let alive = c.is_alive(now, timeout_secs);
                (c, alive)
            })
            .collect();
        let mut hosts: HashMap<String, Vec<String>> = HashMap::new();
        for (c, alive) in &conductors {
            if !alive {
                continue;
            }
            for d in &c.drivers {
                hosts
                    .entry(ring_key(&c.conductor_group, d))
                    .or_default()
                    .push(c.hostname.clone());
            }
        }
        let rings = hosts
            .into_iter()
            .map(|(k, h)| (k, HashRing::new(h, exponent)))
            .collect();
        Snapshot { conductors, rings }
    }

    /// The conductor that owns the node, if one serves its driver and group.
    pub fn owner(&self, group: &str, driver: &str, uuid: &str) -> Option<&str> {
        self.rings
            .get(&ring_key(group, driver))
            .and_then(|r| r.owner(uuid))
    }

    pub fn serves(&self, group: &str, driver: &str) -> bool {
        self.rings.contains_key(&ring_key(group, driver))
    }

    /// Hardware type → hosts of live conductors enabling it, sorted.
    pub fn drivers(&self) -> BTreeMap<String, Vec<String>> {
        let mut m: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (c, alive) in &self.conductors {
            if *alive {
                for d in &c.drivers {
                    m.entry(d.clone()).or_default().push(c.hostname.clone());
                }
            }
        }
        for hosts in m.values_mut() {
            hosts.sort();
            hosts.dedup();
        }
        m
    }
}

pub struct Topology {
    db: Db,
    timeout_secs: u64,
    exponent: u32,
    current: RwLock<Arc<Snapshot>>,
    last_refresh: std::sync::Mutex<Instant>,
}

impl Topology {
    pub fn new(db: Db, timeout_secs: u64, exponent: u32) -> Topology {
        Topology {
            db,
            timeout_secs,
            exponent,
            current: RwLock::new(Arc::new(Snapshot::default())),
            last_refresh: std::sync::Mutex::new(Instant::now() - Duration::from_secs(3600)),
        }
    }

    pub fn snapshot(&self) -> Arc<Snapshot> {
        match self.current.read() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// Rebuilds the snapshot from the database.
    pub async fn refresh(&self) {
        match self.db.conductor_list().await {
            Ok(list) => {
                let snap = Arc::new(Snapshot::build(list, self.timeout_secs, self.exponent));
                match self.current.write() {
                    Ok(mut g) => *g = snap,
                    Err(p) => *p.into_inner() = snap,
                }
                if let Ok(mut t) = self.last_refresh.lock() {
                    *t = Instant::now();
                }
            }
            Err(e) => tracing::warn!(error = %e, "could not refresh the conductor list"),
        }
    }

    /// Refreshes unless that happened within the last second (used on a lookup miss).
    pub async fn refresh_soon(&self) {
        let stale = self
            .last_refresh
            .lock()
            .map(|t| t.elapsed() >= Duration::from_secs(1))
            .unwrap_or(true);
        if stale {
            self.refresh().await;
        }
    }

    /// Whether a live conductor serves `driver` in `group`, refreshing once on a miss.
    pub async fn serves(&self, group: &str, driver: &str) -> bool {
        if self.snapshot().serves(group, driver) {
            return true;
        }
        self.refresh_soon().await;
        self.snapshot().serves(group, driver)
    }

    /// Refreshes every `period` until the returned task is aborted.
    pub fn spawn_refresher(self: &Arc<Self>, period: Duration) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                me.refresh().await;
            }
        })
    }
}

impl Topology {
    /// Seconds after the last heartbeat when a conductor counts as dead.
    pub fn timeout_secs(&self) -> u64 {
        self.timeout_secs
    }
}

impl ironic_model::cluster::Membership for Topology {
    fn owner(&self, group: &str, driver: &str, uuid: &str) -> Option<String> {
        self.snapshot()
            .owner(group, driver, uuid)
            .map(str::to_owned)
    }

    fn owner_without(
        &self,
        group: &str,
        driver: &str,
        uuid: &str,
        exclude: &str,
    ) -> Option<String> {
        let snap = self.snapshot();
        let hosts: Vec<String> = snap
            .rings
            .get(&ring_key(group, driver))?
            .hosts()
            .iter()
            .filter(|h| *h != exclude)
            .cloned()
            .collect();
        HashRing::new(hosts, self.exponent)
            .owner(uuid)
            .map(str::to_owned)
    }

    fn any_alive(&self) -> bool {
        self.snapshot().conductors.iter().any(|(_, alive)| *alive)
    }

    fn refresh_soon(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        Box::pin(Topology::refresh_soon(self))
    }
}
