//! What a process knows of the conductors: who is alive, who is dead, which hardware
//! types and groups they serve, and the hash rings that name the conductor of each node.
//! Rebuilt from the `conductors` table every `refresh` period (at most one heartbeat
//! interval, so a registration, an unregistration or a death shows within one interval)
//! and at once, rate-limited, when a lookup misses.
//!
//! The verdicts follow [`Liveness`], with one more rule against false deaths: an
//! observer that has just (re)gained the database (its start, or the end of an outage
//! that every heartbeat shared) gives every conductor `grace` to heartbeat again before
//! it declares anyone newly dead; until then it keeps its earlier verdicts.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use crate::{Conductor, Db, Liveness};
use ironic_model::ring::{HashRing, ring_key};

/// One immutable view of the cluster.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// Every registered conductor and whether it is alive (online and not dead).
    pub conductors: Vec<(Conductor, bool)>,
    /// Ids of the conductors judged dead (their locks and allocations are up for
    /// take-over). A stopping conductor is offline, not alive, but not dead either.
    dead: std::collections::BTreeSet<ironic_model::ConductorId>,
    rings: HashMap<String, HashRing>,
}

impl Snapshot {
    /// Judges `conductors`. While `settling` (the observer has just regained the
    /// database), nobody `previous` did not already judge dead is declared dead.
    pub fn build(
        conductors: Vec<Conductor>,
        liveness: &Liveness,
        exponent: u32,
        settling: Option<&Snapshot>,
    ) -> Snapshot {
        let now = chrono::Utc::now();
        let mut dead = std::collections::BTreeSet::new();
        let conductors: Vec<(Conductor, bool)> = conductors
            .into_iter()
            .map(|c| {
                let mut is_dead = c.is_dead(now, liveness);
                if is_dead
                    && let Some(prev) = settling
                    && prev.conductors.iter().any(|(p, _)| p.id == c.id)
                    && !prev.dead.contains(&c.id)
                {
                    is_dead = false;
                }
                if is_dead {
                    dead.insert(c.id);
                }
                let alive = c.online && !is_dead;
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
        Snapshot {
            conductors,
            dead,
            rings,
        }
    }

    /// Whether `c` is judged dead (see [`Liveness`]).
    pub fn is_dead(&self, c: &Conductor) -> bool {
        self.dead.contains(&c.id)
    }

    /// The conductors judged dead.
    pub fn dead(&self) -> impl Iterator<Item = &Conductor> {
        self.conductors
            .iter()
            .map(|(c, _)| c)
            .filter(|c| self.dead.contains(&c.id))
    }

    /// Whether a conductor of that host name is registered and not dead.
    pub fn host_not_dead(&self, host: &str) -> bool {
        self.conductors
            .iter()
            .any(|(c, _)| c.hostname == host && !self.dead.contains(&c.id))
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
    liveness: Liveness,
    exponent: u32,
    current: RwLock<Arc<Snapshot>>,
    last_refresh: std::sync::Mutex<Instant>,
    /// Since when every refresh has succeeded (`None` after a failed one).
    connected_since: std::sync::Mutex<Option<Instant>>,
}

impl Topology {
    pub fn new(db: Db, liveness: Liveness, exponent: u32) -> Topology {
        Topology {
            db,
            liveness,
            exponent,
            current: RwLock::new(Arc::new(Snapshot::default())),
            last_refresh: std::sync::Mutex::new(Instant::now() - Duration::from_secs(3600)),
            connected_since: std::sync::Mutex::new(None),
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
                let settling = {
                    let mut since = self
                        .connected_since
                        .lock()
                        .unwrap_or_else(|p| p.into_inner());
                    since.get_or_insert_with(Instant::now).elapsed() < self.liveness.grace
                };
                let prev = self.snapshot();
                let snap = Arc::new(Snapshot::build(
                    list,
                    &self.liveness,
                    self.exponent,
                    settling.then_some(&*prev),
                ));
                let (mut alive, mut offline, mut dead) = (0.0, 0.0, 0.0);
                for (c, a) in &snap.conductors {
                    if snap.is_dead(c) {
                        dead += 1.0;
                    } else if *a {
                        alive += 1.0;
                    } else {
                        offline += 1.0;
                    }
                }
                metrics::gauge!("ironic_conductors", "state" => "alive").set(alive);
                metrics::gauge!("ironic_conductors", "state" => "offline").set(offline);
                metrics::gauge!("ironic_conductors", "state" => "dead").set(dead);
                for c in snap.dead() {
                    if !prev.is_dead(c) {
                        let rule = if c.silence(chrono::Utc::now()) >= self.liveness.timeout {
                            "silent"
                        } else {
                            "gone"
                        };
                        metrics::counter!("ironic_conductor_deaths_total", "rule" => rule)
                            .increment(1);
                        tracing::warn!(host = %c.hostname, conductor_id = %c.id, present = ?c.present, silent_ms = c.silence(chrono::Utc::now()).as_millis() as u64, "conductor declared dead");
                    }
                }
                match self.current.write() {
                    Ok(mut g) => *g = snap,
                    Err(p) => *p.into_inner() = snap,
                }
                if let Ok(mut t) = self.last_refresh.lock() {
                    *t = Instant::now();
                }
            }
            Err(e) => {
                if let Ok(mut since) = self.connected_since.lock() {
                    *since = None;
                }
                tracing::warn!(error = %e, "could not refresh the conductor list")
            }
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
    /// When a conductor counts as dead.
    pub fn liveness(&self) -> &Liveness {
        &self.liveness
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

    fn is_dead(&self, host: &str) -> bool {
        let snap = self.snapshot();
        snap.conductors
            .iter()
            .any(|(c, _)| c.hostname == host && snap.is_dead(c))
    }

    fn incarnation(&self, host: &str) -> Option<i64> {
        self.snapshot()
            .conductors
            .iter()
            .find(|(c, _)| c.hostname == host)
            .map(|(c, _)| c.incarnation)
    }

    fn refresh_soon(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        Box::pin(Topology::refresh_soon(self))
    }
}
