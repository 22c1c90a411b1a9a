//! The allocation process (`create_allocation`, `destroy_allocation`) and the take-over
//! of allocations whose conductor died.
//!
//! `create_allocation` stores the allocation as `allocating` with this conductor's id as
//! `conductor_affinity` and answers; a task of its own then reserves a node
//! ([`ironic_db::Db::allocation_claim`]: one transaction that picks a free matching
//! node, associates it and activates the allocation, conditional on the affinity). A
//! conductor resumes its own `allocating` allocations when it starts, and every
//! `check_allocations_interval` takes over those of dead conductors with a
//! compare-and-set on the affinity: exactly one taker wins, and a slow former owner's
//! writes find the affinity changed and roll back.

use crate::lock::Patience;
use crate::work::TaskError;
use ironic_rpc::Context;
use ironic_rpc::calls::{CreateAllocation, DestroyAllocation};
use std::sync::Arc;

use ironic_db::allocations::{Backfill, Claim, Deletion, NodeGuard, Shortage};
use ironic_db::topology::Topology;
use ironic_model::allocation::{
    self as alloc, Allocation, AllocationRef, AllocationState, NewAllocation,
};
use ironic_model::states::ProvisionState as P;
use ironic_model::{AllocationId, Error};
use ironic_rpc::NodeRef;

/// Allocations: creating them, reserving nodes in the background, backfilling,
/// deleting, resuming this conductor's own and taking over dead conductors'.
pub struct Allocator {
    db: ironic_db::Db,
    settings: Arc<crate::ConductorSettings>,
    locks: crate::lock::Locks,
    work: crate::work::Runner,
    /// This conductor's identity (its `conductor_affinity`).
    presence: Arc<crate::registry::Presence>,
}

impl Allocator {
    pub(crate) fn new(
        db: ironic_db::Db,
        settings: Arc<crate::ConductorSettings>,
        locks: crate::lock::Locks,
        work: crate::work::Runner,
        presence: Arc<crate::registry::Presence>,
    ) -> Allocator {
        Allocator {
            db,
            settings,
            locks,
            work,
            presence,
        }
    }

    pub(crate) async fn create_allocation(
        self: &Arc<Self>,
        ctx: &Context,
        req: CreateAllocation,
    ) -> Result<Allocation, Error> {
        let repeat = (ctx.attempt > 0).then(|| req.allocation.clone());
        match self.new_allocation(req.allocation, req.backfill).await {
            // A repeat after the conductor of the first attempt died: if that attempt
            // stored the allocation, this is it.
            Err(Error::Conflict(m)) => match repeat {
                Some(new) => self
                    .stored_by_earlier_attempt(&new)
                    .await?
                    .ok_or(Error::Conflict(m)),
                None => Err(Error::Conflict(m)),
            },
            r => r,
        }
    }
    pub(crate) async fn destroy_allocation(
        self: &Arc<Self>,
        ctx: &Context,
        req: DestroyAllocation,
    ) -> Result<(), Error> {
        match self.delete_allocation(&req.allocation).await {
            // A repeat: the first attempt deleted it.
            Err(Error::NotFound(_)) if ctx.attempt > 0 => {
                tracing::info!(allocation = %req.allocation.uuid, "allocation already deleted by an earlier attempt");
                Ok(())
            }
            r => r,
        }
    }

    /// `create_allocation`.
    pub(crate) async fn new_allocation(
        self: &Arc<Self>,
        new: NewAllocation,
        backfill: Option<NodeRef>,
    ) -> Result<Allocation, Error> {
        let me = self.presence.init_conductor_id().await?;
        let a = new.into_allocation(me);
        if backfill.is_none() && a.resource_class.is_none() {
            return Err(Error::invalid(
                "The resource_class field is mandatory when not backfilling",
            ));
        }
        let stored = self.db.allocation_create(&a).await?;
        tracing::info!(allocation = %stored.uuid, resource_class = ?stored.resource_class, backfill = backfill.is_some(), "allocation accepted");
        match backfill {
            Some(n) => self.backfill(stored, n).await,
            None => {
                let me = self.clone();
                let (id, fresh) = (stored.id, stored.clone());
                self.work.spawn(
                    "allocation",
                    async move { me.allocate(id, Some(fresh)).await },
                );
                Ok(stored)
            }
        }
    }

    /// The allocation `new` describes, if an earlier attempt of the same call stored
    /// it (same uuid and the same fields): what a repeated `create_allocation` answers.
    pub(crate) async fn stored_by_earlier_attempt(
        &self,
        new: &NewAllocation,
    ) -> Result<Option<Allocation>, Error> {
        let Some(a) = self.db.allocation_by_uuid(&new.uuid).await? else {
            return Ok(None);
        };
        let same = a.name == new.name
            && a.resource_class == new.resource_class
            && a.candidate_nodes == new.candidate_nodes
            && a.traits == new.traits
            && a.owner == new.owner
            && a.extra == new.extra;
        if same {
            tracing::info!(allocation = %a.uuid, "allocation already stored by an earlier attempt of this call");
        }
        Ok(same.then_some(a))
    }

    /// Reserves a node for the allocation `id`, if it is still ours and `allocating`.
    /// `fresh`: the allocation as just stored, which spares reading it back (the claim
    /// itself is conditional on the state and the affinity, so a deletion or a take-over
    /// meanwhile is still seen).
    async fn allocate(self: Arc<Self>, id: AllocationId, fresh: Option<Allocation>) {
        if let Err(e) = self.try_allocate(id, fresh).await {
            tracing::error!(allocation_id = %id, error = %ironic_model::error::chain(&e), "allocation failed unexpectedly");
            if let Ok(me) = self.presence.my_id() {
                let msg = format!("Unexpected exception during allocation: {e}");
                let _ = self.db.allocation_fail(id, me, &msg).await;
            }
        }
    }

    async fn try_allocate(&self, id: AllocationId, fresh: Option<Allocation>) -> Result<(), Error> {
        let me = self.presence.my_id()?;
        let mut fresh = fresh;
        if !self.settings.allocation_delay.is_zero() {
            tokio::time::sleep(self.settings.allocation_delay).await;
            fresh = None;
        }
        let a = match fresh {
            Some(a) => a,
            None => match self.db.allocation_by_id(id).await? {
                Some(a) => a,
                None => return Ok(()),
            },
        };
        if a.state != AllocationState::Allocating || a.conductor_affinity != Some(me) {
            return Ok(());
        }
        let uuid = a.uuid.clone();
        let attempts = self.settings.lock_attempts.max(1);
        for attempt in 1..=attempts {
            // A node named like the allocation is preferred (upstream 1.79).
            let mut claim = Claim::NoneFree;
            if let Some(name) = a.name.as_deref() {
                claim = self.db.allocation_claim(&a, me, Some(name)).await?;
            }
            if claim == Claim::NoneFree {
                claim = self.db.allocation_claim(&a, me, None).await?;
            }
            match claim {
                Claim::Reserved(_, node) => {
                    tracing::info!(allocation = %uuid, node, "allocation active");
                    finished("active", &a);
                    return Ok(());
                }
                Claim::Lost => {
                    tracing::info!(allocation = %uuid, "allocation deleted or taken over meanwhile");
                    return Ok(());
                }
                Claim::NoneFree => {}
            }
            let rc = a.resource_class.as_deref().unwrap_or("");
            let why = match self.db.allocation_shortage(&a).await? {
                Shortage::NoNodes => alloc::no_nodes_reason(rc, !a.candidate_nodes.is_empty()),
                Shortage::NoTraits => alloc::no_traits_reason(&a.traits),
                Shortage::Busy(n) if attempt == attempts => alloc::all_busy_reason(n),
                Shortage::Busy(n) => {
                    tracing::debug!(allocation = %uuid, busy = n, attempt, "matching nodes are busy; retrying");
                    tokio::time::sleep(self.settings.lock_retry_interval).await;
                    continue;
                }
            };
            let msg = a.failure_message(&why);
            if self.db.allocation_fail(a.id, me, &msg).await? {
                tracing::warn!(allocation = %uuid, "{}", ironic_model::secrets::log_safe(&msg));
                finished("error", &a);
            }
            return Ok(());
        }
        Ok(())
    }

    /// Backfill: records an allocation for an `active` node, under its lock.
    async fn backfill(&self, a: Allocation, nref: NodeRef) -> Result<Allocation, Error> {
        let me = self.presence.my_id()?;
        let held = match self.locks.hold(&nref, Patience::Retry).await {
            Ok(h) => h,
            Err(e) => {
                self.db.allocation_fail(a.id, me, e.message()).await?;
                return Err(e);
            }
        };
        let n = &held.node;
        let mut errors = Vec::new();
        if n.provision_state != P::Active {
            errors.push(format!(
                "Node must be in the \"active\" state, but the current state is \"{}\"",
                n.provision_state
            ));
        }
        if let Some(rc) = &a.resource_class
            && n.resource_class.as_deref() != Some(rc.as_str())
        {
            errors.push(format!(
                "Resource class {} does not match the requested resource class {rc}",
                n.resource_class.as_deref().unwrap_or("None")
            ));
        }
        if !a.traits.iter().all(|t| n.traits.contains(t)) {
            errors.push(format!(
                "List of traits {} does not match the requested traits {}",
                n.traits.join(", "),
                a.traits.join(", ")
            ));
        }
        if !a.candidate_nodes.is_empty() && !a.candidate_nodes.iter().any(|c| c == n.uuid.as_str())
        {
            errors.push(format!(
                "Candidate nodes must be empty or contain the target node, but got {}",
                a.candidate_nodes.join(", ")
            ));
        }
        let result = if errors.is_empty() {
            match self
                .db
                .allocation_backfill(&a, n.id, &self.settings.host, me)
                .await
            {
                Ok(Backfill::Done) => Ok(()),
                Ok(Backfill::NodeTaken) | Err(Error::Conflict(_)) => Err(Error::Conflict(format!(
                    "Node {} is associated with instance {}.",
                    n.uuid,
                    n.instance_uuid.as_deref().unwrap_or("")
                ))),
                Ok(Backfill::Lost) => Err(Error::Conflict(format!(
                    "Allocation {} was deleted or taken over by another conductor during the backfill.",
                    a.uuid
                ))),
                Err(e) => Err(e),
            }
        } else {
            Err(Error::invalid(format!(
                "Cannot backfill an allocation for node {}: {}",
                n.uuid,
                errors.join("; ")
            )))
        };
        held.release().await;
        if let Err(e) = result {
            // Conditional on the affinity: an allocation deleted or taken over
            // meanwhile is not ours to fail.
            self.db.allocation_fail(a.id, me, e.message()).await?;
            return Err(e);
        }
        tracing::info!(allocation = %a.uuid, node = %nref.uuid, "allocation backfilled");
        self.db
            .allocation_by_id(a.id)
            .await?
            .ok_or_else(|| alloc::not_found(&a.uuid))
    }

    /// `destroy_allocation`: under the node's lock when it has one. A claim that
    /// commits after the allocation was read is seen by the deletion
    /// ([`Deletion::NodeHeld`]), which is then made again under that node's lock.
    pub(crate) async fn delete_allocation(&self, r: &AllocationRef) -> Result<(), Error> {
        let a = self
            .db
            .allocation_by_id(r.id)
            .await?
            .filter(|x| x.uuid == r.uuid)
            .ok_or_else(|| alloc::not_found(&r.uuid))?;
        let mut node_id = a.node_id;
        // Twice at most: an allocation gets a node once.
        for _ in 0..2 {
            let outcome = match node_id {
                None => self.db.allocation_destroy(&a, NodeGuard::None).await?,
                // First as the claim writes (one guarded statement, no lock round trip);
                // a locked node, or one whose state refuses, under its lock (which waits
                // for it, or says why).
                Some(_) => match self.db.allocation_destroy(&a, NodeGuard::Unlocked).await? {
                    Deletion::NodeHeld(held) => match self.db.node_by_id(held).await? {
                        Some(node) => self.delete_under_lock(&a, &node).await?,
                        None => self.db.allocation_destroy(&a, NodeGuard::None).await?,
                    },
                    deleted => deleted,
                },
            };
            match outcome {
                Deletion::Deleted => {
                    match node_id {
                        Some(node_id) => {
                            tracing::info!(allocation = %a.uuid, %node_id, "allocation deleted")
                        }
                        None => tracing::info!(allocation = %a.uuid, "allocation deleted"),
                    }
                    return Ok(());
                }
                Deletion::NodeHeld(id) => {
                    tracing::debug!(allocation = %a.uuid, node_id = %id, "the allocation got a node meanwhile; deleting it under that node's lock");
                    node_id = Some(id);
                }
            }
        }
        Err(Error::Conflict(format!(
            "Allocation {} changed while it was being deleted; please retry.",
            a.uuid
        )))
    }

    /// The deletion of `a` under the lock of its node, if the node allows it.
    async fn delete_under_lock(
        &self,
        a: &Allocation,
        node: &ironic_model::Node,
    ) -> Result<Deletion, Error> {
        let held = self
            .locks
            .hold(&NodeRef::from(node), Patience::Retry)
            .await?;
        let n = &held.node;
        if !n.maintenance {
            let why = if n.target_provision_state.is_some() && !n.provision_state.update_allowed() {
                Some(format!(
                    "the node is in state {} where updates are not allowed",
                    n.provision_state
                ))
            } else if n.provision_state == P::Active {
                Some("the node is active".to_string())
            } else {
                None
            };
            if let Some(why) = why {
                let msg = format!(
                    "Cannot remove allocation {} for node {}, because {why} (and maintenance mode is off)",
                    a.uuid, n.uuid
                );
                return held.bail(Error::InvalidState(msg)).await;
            }
        }
        let res = self
            .db
            .allocation_destroy(a, NodeGuard::Holder(&self.settings.host))
            .await;
        held.release().await;
        res
    }

    /// At start-up: continues this conductor's own `allocating` allocations (a crash
    /// or a stop interrupted them).
    pub async fn resume_allocations(self: &Arc<Self>) -> Result<usize, Error> {
        let me = self.presence.init_conductor_id().await?;
        let mine = self.db.allocations_allocating(me, true).await?;
        for (id, _) in &mine {
            let c = self.clone();
            let id = *id;
            self.work.spawn(
                "resumed allocation",
                async move { c.allocate(id, None).await },
            );
        }
        if !mine.is_empty() {
            tracing::info!(count = mine.len(), "resuming allocations of an earlier run");
        }
        Ok(mine.len())
    }

    /// Takes over the `allocating` allocations of dead (or unknown) conductors; returns
    /// how many this conductor won.
    pub async fn take_over_allocations(
        self: &Arc<Self>,
        topology: &Topology,
    ) -> Result<usize, Error> {
        let me = self.presence.init_conductor_id().await?;
        let orphans = self.db.allocations_allocating(me, false).await?;
        if orphans.is_empty() {
            return Ok(0);
        }
        let snap = topology.snapshot();
        let mut won = 0;
        for (id, affinity) in orphans {
            let owner_alive = affinity.is_some_and(|c| {
                snap.conductors
                    .iter()
                    .any(|(x, _)| x.id == c && !snap.is_dead(x))
            });
            if owner_alive {
                continue;
            }
            if self.db.allocation_take_over(id, affinity, me).await? {
                tracing::warn!(allocation_id = %id, from = ?affinity, "took over an allocation of a dead conductor");
                won += 1;
                // In the background, side by side (upstream finishes them one at a
                // time inside its periodic task): a dead conductor's allocations are
                // all finished within one allocation's time.
                let me = self.clone();
                self.work.spawn("taken-over allocation", async move {
                    me.allocate(id, None).await
                });
            }
        }
        Ok(won)
    }

    /// One round of the periodic take-over of dead conductors' allocations.
    pub async fn take_over(self: &Arc<Self>, topology: &Topology) -> Result<(), TaskError> {
        let n = self
            .take_over_allocations(topology)
            .await
            .map_err(|e| TaskError::failed("checking for orphaned allocations", e))?;
        if n > 0 {
            tracing::warn!(allocations = n, "took over allocations of dead conductors");
        }
        Ok(())
    }
}

/// Counts an allocation this conductor finished, and the time since its creation.
fn finished(outcome: &'static str, a: &Allocation) {
    metrics::counter!("ironic_allocations_total", "outcome" => outcome).increment(1);
    let took = chrono::Utc::now()
        .signed_duration_since(a.created_at)
        .to_std()
        .unwrap_or_default();
    metrics::histogram!("ironic_allocation_duration_seconds", "outcome" => outcome)
        .record(took.as_secs_f64());
}
