//! The OneView periodic checks (reference §2.8), once per conductor, on the `oneview`
//! nodes this conductor owns and that use dynamic allocation, every
//! `[oneview] periodic_check_interval`:
//!
//! 1. an `available` node whose hardware a OneView user took: maintenance with the
//!    reason `node in use by OneView`, and `manageable`;
//! 2. such a node (`manageable`, in maintenance with exactly that reason) whose hardware
//!    is no longer used by OneView: maintenance off and `provide`, so it is cleaned
//!    before it serves again (retired nodes stay `manageable`);
//! 3. a `clean failed` node whose cleaning could not allocate the hardware
//!    (`server hardware allocation error`, the race where OneView took it between
//!    scheduling and deploy): maintenance with the reason, and `manageable`; check 2
//!    brings it back once OneView frees it.
//!
//! A node whose check fails (appliance down, a lock) is logged and skipped.

use crate::lock::Patience;
use crate::work::TaskError;
use std::sync::Arc;

use ironic_db::topology::Topology;
use ironic_db::{NodeFilter, NodeListQuery};
use ironic_drivers::interfaces::{DriverError, NodeInfo};
use ironic_drivers::oneview::{self, IN_USE_BY_ONEVIEW, Owner};
use ironic_model::fsm::{self, Event};
use ironic_model::states::ProvisionState as P;
use ironic_model::{Error, Node};
use ironic_rpc::NodeRef;

/// What one round of checks did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Round {
    pub checked: usize,
    pub taken: usize,
    pub freed: usize,
    pub failed_cleanings: usize,
}

/// The OneView periodic checks of the nodes this conductor owns.
pub struct OneViewChecks {
    db: ironic_db::Db,
    drivers: ironic_drivers::Registry,
    settings: Arc<crate::ConductorSettings>,
    locks: crate::lock::Locks,
    provision: Arc<crate::provision::Provisioner>,
}

impl OneViewChecks {
    pub(crate) fn new(
        db: ironic_db::Db,
        drivers: ironic_drivers::Registry,
        settings: Arc<crate::ConductorSettings>,
        locks: crate::lock::Locks,
        provision: Arc<crate::provision::Provisioner>,
    ) -> OneViewChecks {
        OneViewChecks {
            db,
            drivers,
            settings,
            locks,
            provision,
        }
    }

    /// The dynamic-allocation `oneview` nodes in `state` that this conductor owns.
    async fn my_oneview_nodes(&self, topology: &Topology, state: P) -> Result<Vec<Node>, Error> {
        let snap = topology.snapshot();
        let me = self.settings.host.as_str();
        let mut out = Vec::new();
        let mut marker: Option<String> = None;
        // Bounded: at most 1,000 pages of 1,000 nodes.
        for _ in 0..1000 {
            let q = NodeListQuery {
                filter: NodeFilter {
                    driver: Some(oneview::ONEVIEW.name.into()),
                    provision_state: Some(state),
                    ..Default::default()
                },
                marker: marker.clone(),
                with_traits: false,
                ..Default::default()
            };
            let page = self.db.node_list(&q).await?;
            let full = page.len() == q.limit as usize;
            marker = page.last().map(|n| n.uuid.to_string());
            out.extend(page.into_iter().filter(|n| {
                snap.owner(&n.conductor_group, &n.driver, n.uuid.as_str()) == Some(me)
                    && oneview::dynamic_allocation(NodeInfo::from(n)).unwrap_or(false)
            }));
            if !full {
                break;
            }
        }
        Ok(out)
    }

    async fn owner_of(&self, node: &Node) -> Result<Owner, DriverError> {
        let Some(ov) = self
            .drivers
            .oneview()
            .filter(|_| node.driver == oneview::ONEVIEW.name)
        else {
            return Err(DriverError::invalid("not a oneview node"));
        };
        ov.core.owner(NodeInfo::from(node)).await
    }

    /// Under the node lock, if `still` holds: maintenance with OneView's reason and
    /// `manageable`.
    async fn take_out_of_service(
        &self,
        nref: &NodeRef,
        still: impl Fn(&Node) -> bool,
    ) -> Result<bool, Error> {
        let mut held = self.locks.hold(nref, Patience::Retry).await?;
        if !still(&held.node) {
            held.release().await;
            return Ok(false);
        }
        let t = fsm::process(held.node.provision_state, Event::Manage, false, None)?;
        held.node.provision_state = t.state;
        held.node.target_provision_state = t.target;
        held.node.provision_updated_at = Some(ironic_model::node::now());
        held.node.maintenance = true;
        held.node.maintenance_reason = Some(IN_USE_BY_ONEVIEW.into());
        held.save_and_release().await?;
        Ok(true)
    }

    /// One round of the three checks.
    pub async fn oneview_round(self: &Arc<Self>, topology: &Topology) -> Result<Round, Error> {
        let mut round = Round::default();
        // 1. Taken by OneView while available.
        for n in self.my_oneview_nodes(topology, P::Available).await? {
            if n.maintenance {
                continue;
            }
            round.checked += 1;
            match self.owner_of(&n).await {
                Ok(Owner::OneView(p)) => {
                    let nref = NodeRef::from(&n);
                    match self
                        .take_out_of_service(&nref, |x| {
                            x.provision_state == P::Available && !x.maintenance
                        })
                        .await
                    {
                        Ok(true) => {
                            tracing::warn!(node = %n.uuid, profile = %p, "taken by OneView: maintenance, manageable");
                            round.taken += 1;
                        }
                        Ok(false) => {}
                        Err(e) => {
                            tracing::warn!(node = %n.uuid, error = %ironic_model::error::chain(&e), "could not take the node out of service")
                        }
                    }
                }
                Ok(_) => {}
                Err(why) => {
                    tracing::warn!(node = %n.uuid, "OneView check skipped: {}", ironic_model::secrets::log_safe(&why.to_string()))
                }
            }
        }
        // 2. Freed by OneView: back into service through cleaning.
        for n in self.my_oneview_nodes(topology, P::Manageable).await? {
            if !n.maintenance || n.maintenance_reason.as_deref() != Some(IN_USE_BY_ONEVIEW) {
                continue;
            }
            round.checked += 1;
            match self.owner_of(&n).await {
                Ok(Owner::OneView(_)) => {}
                Ok(_) => {
                    let nref = NodeRef::from(&n);
                    if let Err(e) = self.return_to_service(&nref).await {
                        tracing::warn!(node = %n.uuid, error = %ironic_model::error::chain(&e), "could not return the node to service");
                    } else {
                        tracing::info!(node = %n.uuid, "freed by OneView: maintenance off, providing");
                        round.freed += 1;
                    }
                }
                Err(why) => {
                    tracing::warn!(node = %n.uuid, "OneView check skipped: {}", ironic_model::secrets::log_safe(&why.to_string()))
                }
            }
        }
        // 3. Cleaning could not allocate the hardware: out of service until freed.
        for n in self.my_oneview_nodes(topology, P::CleanFailed).await? {
            let allocation_error = n
                .last_error
                .as_deref()
                .is_some_and(|e| e.contains(oneview::ALLOCATION_ERROR));
            if !allocation_error {
                continue;
            }
            round.checked += 1;
            let nref = NodeRef::from(&n);
            match self
                .take_out_of_service(&nref, |x| {
                    x.provision_state == P::CleanFailed
                        && x.last_error
                            .as_deref()
                            .is_some_and(|e| e.contains(oneview::ALLOCATION_ERROR))
                })
                .await
            {
                Ok(true) => {
                    tracing::warn!(node = %n.uuid, "cleaning failed on hardware taken by OneView: maintenance, manageable");
                    round.failed_cleanings += 1;
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(node = %n.uuid, error = %ironic_model::error::chain(&e), "could not take the node out of service")
                }
            }
        }
        Ok(round)
    }

    /// Maintenance off (if it is still OneView's), then `provide` unless retired.
    async fn return_to_service(self: &Arc<Self>, nref: &NodeRef) -> Result<(), Error> {
        let mut held = self.locks.hold(nref, Patience::Retry).await?;
        let ours = held.node.provision_state == P::Manageable
            && held.node.maintenance
            && held.node.maintenance_reason.as_deref() == Some(IN_USE_BY_ONEVIEW);
        if !ours {
            held.release().await;
            return Ok(());
        }
        held.node.maintenance = false;
        held.node.maintenance_reason = None;
        held.node.fault = None;
        let retired = held.node.retired;
        held.save_and_release().await?;
        if retired {
            return Ok(());
        }
        self.provision
            .provisioning_action(nref, "provide", &ironic_rpc::Context::default())
            .await
    }

    /// One round of checks (a periodic task), logged when it checked anything.
    pub async fn oneview_checks(self: &Arc<Self>, topology: &Topology) -> Result<(), TaskError> {
        let start = std::time::Instant::now();
        let r = self
            .oneview_round(topology)
            .await
            .map_err(|e| TaskError::failed("checking the OneView nodes", e))?;
        if r.checked > 0 {
            tracing::info!(
                checked = r.checked,
                taken = r.taken,
                freed = r.freed,
                failed_cleanings = r.failed_cleanings,
                ms = start.elapsed().as_millis() as u64,
                "OneView checks"
            );
        }
        Ok(())
    }
}
