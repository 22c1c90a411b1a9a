//! The node calls of the contract (create, update, maintenance, delete, traits, the
//! interface validation), and how every room finds a node and its driver.

use std::sync::Arc;

use ironic_db::Db;
use ironic_drivers::interfaces::{Driver, NodeInfo};
use ironic_drivers::{HardwareType, Registry};
use ironic_model::node::{INTERFACE_TYPES, Source, check_destroy, check_update};
use ironic_model::patch::{self, Op};
use ironic_model::states::ProvisionState;
use ironic_model::{Error, Node};
use ironic_rpc::calls::{
    AddNodeTraits, CreateNode, DestroyNode, Ping, RemoveNodeTraits, SetMaintenance, UpdateNode,
    ValidateDriverInterfaces,
};
use ironic_rpc::{Context, InterfaceCheck, NodeRef};

use crate::lock::{self, Locks, Patience};
use crate::{ConductorSettings, MAX_TRAITS_PER_NODE};

/// The `driver_info` fields that name the agent's ramdisk images.
pub(crate) const RAMDISK_REFS: &[&str] = &["deploy_kernel", "deploy_ramdisk", "deploy_iso"];

/// The fields of a node that name local files (`file://` references, as
/// `local_files.rs` allows them) or reach a boot loader's file (`kernel_append_params`,
/// `ironic_model::boot_params`), checked as they are set: only those whose value
/// changes from `old` (all of them for a new node), so a field set before a rule
/// tightened does not block other changes; a deploy and a boot check them all again.
/// `strict`: a file that is not there is refused too (validation, not a change).
pub(crate) fn check_boot_fields(
    files: &crate::local_files::LocalFiles,
    old: Option<&Node>,
    new: &Node,
    strict: bool,
) -> Result<(), Error> {
    let fields = RAMDISK_REFS
        .iter()
        .map(|k| {
            (
                "driver_info",
                &new.driver_info,
                old.map(|o| &o.driver_info),
                *k,
            )
        })
        .chain([
            (
                "instance_info",
                &new.instance_info,
                old.map(|o| &o.instance_info),
                "image_source",
            ),
            (
                "instance_info",
                &new.instance_info,
                old.map(|o| &o.instance_info),
                "kernel_append_params",
            ),
            (
                "driver_info",
                &new.driver_info,
                old.map(|o| &o.driver_info),
                "kernel_append_params",
            ),
        ]);
    for (field, now, before, key) in fields {
        let Some(v) = now.get(key) else { continue };
        if before.and_then(|b| b.get(key)) == Some(v) {
            continue;
        }
        let bad =
            |why: String| Error::invalid(format!("{field} {key} of node {}: {why}", new.uuid));
        if key == "kernel_append_params" {
            let text = v.as_str().ok_or_else(|| bad("must be a string".into()))?;
            ironic_model::boot_params::check(text).map_err(|e| bad(e.to_string()))?;
        } else if let Some(r) = v.as_str().filter(|r| r.starts_with("file://")) {
            let checked = match strict {
                true => files.check(r).map(drop),
                false => files.check_setting(r),
            };
            checked.map_err(|e| bad(e.to_string()))?;
        }
    }
    Ok(())
}

/// Reads the node a reference names, without locking it (shared reads).
pub(crate) async fn read(db: &Db, r: &NodeRef) -> Result<Node, Error> {
    db.node_by_id(r.id)
        .await?
        .filter(|n| n.uuid == r.uuid)
        .ok_or_else(|| Error::node_not_found(&r.uuid))
}

/// The implementation of the node's hardware type (400 `NoValidHost` if this
/// conductor does not enable it).
pub(crate) fn driver<'a>(drivers: &'a Registry, n: &Node) -> Result<&'a dyn Driver, Error> {
    drivers
        .driver(&n.driver)
        .ok_or_else(|| Error::no_valid_host(&n.driver, &n.conductor_group))
}

pub(crate) fn hardware_type<'a>(
    drivers: &'a Registry,
    driver: &str,
    group: &str,
) -> Result<&'a HardwareType, Error> {
    drivers
        .get(driver)
        .ok_or_else(|| Error::no_valid_host(driver, group))
}

/// Fills unset interfaces with the hardware type's defaults and refuses
/// implementations the hardware type does not enable.
pub(crate) fn complete_interfaces(drivers: &Registry, node: &mut Node) -> Result<(), Error> {
    let hw = hardware_type(drivers, &node.driver, &node.conductor_group)?;
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

/// The node calls: each change under the node lock, with the update rules of
/// `ironic_model::node`.
pub(crate) struct Nodes {
    db: Db,
    drivers: Registry,
    settings: Arc<ConductorSettings>,
    locks: Locks,
}

impl Nodes {
    pub(crate) fn new(
        db: Db,
        drivers: Registry,
        settings: Arc<ConductorSettings>,
        locks: Locks,
    ) -> Nodes {
        Nodes {
            db,
            drivers,
            settings,
            locks,
        }
    }

    /// Whether a live conductor serves `driver` in `group`.
    async fn served(&self, driver: &str, group: &str) -> Result<bool, Error> {
        let now = ironic_model::node::now();
        Ok(self.db.conductor_list().await?.iter().any(|c| {
            c.is_alive(now, &self.settings.liveness)
                && c.conductor_group.eq_ignore_ascii_case(group)
                && c.drivers.iter().any(|d| d == driver)
        }))
    }

    pub(crate) async fn ping(&self, _ctx: &Context, _req: Ping) -> Result<(), Error> {
        Ok(())
    }

    async fn do_update(&self, h: &mut crate::lock::Held, req: UpdateNode) -> Result<Node, Error> {
        let node = h.node.clone();
        let only_removes_instance = node.maintenance
            && req.patch.len() == 1
            && req.patch[0].op == Op::Remove
            && req.patch[0].path == "/instance_uuid";
        if node.target_provision_state.is_some()
            && !node.provision_state.update_allowed()
            && !only_removes_instance
        {
            return Err(Error::InvalidState(format!(
                "Node {} can not be updated while a state transition is in progress.",
                req.ident
            )));
        }
        if node.provision_state == ProvisionState::Inspecting && req.version.at_least(39) {
            return Err(Error::InvalidState(format!(
                "Node {} can not be updated while a state transition is in progress.",
                req.ident
            )));
        }
        let mut doc = node.patch_doc(req.version);
        for op in &req.patch {
            patch::apply(&mut doc, op)?;
        }
        let mut new = node.clone();
        new.apply_doc(&doc, req.version, Source::Patch { ident: &req.ident })?;
        let driver_changed = new.driver != node.driver;
        match req.reset_interfaces {
            Some(true) if !driver_changed => {
                return Err(Error::invalid(
                    "The reset_interfaces parameter can only be used when changing the node's driver.",
                ));
            }
            Some(false) => {}
            _ if driver_changed => {
                // Interfaces not named in this patch go back to the new type's defaults.
                for (i, t) in INTERFACE_TYPES.iter().enumerate() {
                    let path = format!("/{t}_interface");
                    if !req.patch.iter().any(|op| op.path == path) {
                        new.interfaces.0[i] = None;
                    }
                }
            }
            _ => {}
        }
        complete_interfaces(&self.drivers, &mut new)?;
        if (new.driver != node.driver || new.conductor_group != node.conductor_group)
            && !self.served(&new.driver, &new.conductor_group).await?
        {
            // Checked again under the lock: the API's check saw the node before it.
            return Err(Error::no_valid_host(&new.driver, &new.conductor_group));
        }
        check_update(&node, &mut new)?;
        check_boot_fields(&self.settings.local_files, Some(&node), &new, false)?;
        if new == node {
            return Ok(Node {
                reservation: None,
                ..node
            });
        }
        // Removing the instance of an allocated node deletes the allocation with it.
        let dropped = node.allocation_id.filter(|_| new.allocation_id.is_none());
        if dropped.is_some() {
            new.allocation_uuid = None;
        }
        h.node = new;
        h.save_dropping(dropped).await?;
        tracing::info!(node = %h.node.uuid, allocation_deleted = dropped.is_some(), "node updated");
        Ok(h.unlocked())
    }

    pub(crate) async fn create_node(&self, ctx: &Context, req: CreateNode) -> Result<Node, Error> {
        let mut node = req.node;
        complete_interfaces(&self.drivers, &mut node)?;
        check_boot_fields(&self.settings.local_files, None, &node, false)?;
        let created = match self.db.node_create(&node).await {
            // A repeat after the conductor of the first attempt died: if that attempt
            // stored the node, this is it.
            Err(Error::Conflict(m)) if ctx.attempt > 0 => {
                return match self.db.node_by_uuid(node.uuid.as_str()).await? {
                    Some(n) if n.driver == node.driver && n.name == node.name => {
                        tracing::info!(node = %n.uuid, "node already created by an earlier attempt of this call");
                        Ok(n)
                    }
                    _ => Err(Error::Conflict(m)),
                };
            }
            r => r?,
        };
        tracing::info!(node = %created.uuid, request_id = %ctx.request_id, "node created");
        Ok(created)
    }
    pub(crate) async fn update_node(&self, ctx: &Context, req: UpdateNode) -> Result<Node, Error> {
        self.locks.with_lock(&req.node.clone(), Patience::Retry, async move |h| {
            // A repeat whose first attempt was applied: the node as it is.
            if lock::applied_before(&h.node, ctx) {
                tracing::info!(node = %h.node.uuid, request_id = %ctx.request_id, "update already applied by an earlier attempt of this call");
                return Ok(h.unlocked());
            }
            lock::stamp(&mut h.node, ctx);
            self.do_update(h, req).await
        })
        .await
    }
    pub(crate) async fn set_maintenance(
        &self,
        _ctx: &Context,
        req: SetMaintenance,
    ) -> Result<Node, Error> {
        let SetMaintenance { node, on, reason } = req;
        self.locks
            .with_lock(&node, Patience::Retry, async move |h| {
                h.node.maintenance = on;
                h.node.maintenance_reason = if on { reason } else { None };
                if !on {
                    h.node.fault = None;
                }
                h.save().await?;
                tracing::info!(node = %h.node.uuid, maintenance = on, "maintenance changed");
                Ok(h.unlocked())
            })
            .await
    }
    pub(crate) async fn destroy_node(&self, ctx: &Context, req: DestroyNode) -> Result<(), Error> {
        let r = self
            .locks
            .with_lock(&req.node, Patience::Retry, async move |h| {
                check_destroy(&h.node, self.settings.allow_deleting_available_nodes)?;
                self.db.node_destroy(h.node.id, &self.settings.host).await?;
                tracing::info!(node = %h.node.uuid, "node deleted");
                Ok(())
            })
            .await;
        match r {
            // A repeat: the first attempt deleted it.
            Err(Error::NotFound(_)) if ctx.attempt > 0 => Ok(()),
            r => r,
        }
    }
    pub(crate) async fn add_node_traits(
        &self,
        _ctx: &Context,
        req: AddNodeTraits,
    ) -> Result<Vec<String>, Error> {
        let AddNodeTraits {
            node,
            traits,
            replace,
        } = req;
        self.locks.with_lock(&node, Patience::Retry, async move |h| {
            let mut after: Vec<&String> = traits.iter().collect();
            if !replace {
                after.extend(h.node.traits.iter());
            }
            after.sort();
            after.dedup();
            if after.len() > MAX_TRAITS_PER_NODE {
                return Err(Error::invalid(format!(
                    "Could not modify traits for node {} as it would exceed the maximum number of traits per node ({} vs. {MAX_TRAITS_PER_NODE})",
                    h.node.uuid,
                    after.len()
                )));
            }
            self.db.node_add_traits(h.node.id, &traits, replace, MAX_TRAITS_PER_NODE, &self.settings.host).await
        })
        .await
    }
    pub(crate) async fn remove_node_traits(
        &self,
        ctx: &Context,
        req: RemoveNodeTraits,
    ) -> Result<(), Error> {
        let RemoveNodeTraits { node, one } = req;
        let r = self
            .locks
            .with_lock(&node, Patience::Retry, async move |h| {
                let found = self
                    .db
                    .node_remove_traits(h.node.id, one.as_deref(), &self.settings.host)
                    .await?;
                if !found {
                    return Err(Error::NotFound(format!(
                        "Node {} doesn't have a trait '{}'",
                        h.node.uuid,
                        one.unwrap_or_default()
                    )));
                }
                Ok(())
            })
            .await;
        match r {
            // A repeat: the first attempt removed it.
            Err(Error::NotFound(_)) if ctx.attempt > 0 => Ok(()),
            r => r,
        }
    }
    pub(crate) async fn validate_driver_interfaces(
        &self,
        _ctx: &Context,
        req: ValidateDriverInterfaces,
    ) -> Result<Vec<InterfaceCheck>, Error> {
        let n = read(&self.db, &req.node).await?;
        let hw = hardware_type(&self.drivers, &n.driver, &n.conductor_group)?;
        let driver = driver(&self.drivers, &n)?;
        let info = NodeInfo::from(&n);
        // The deploy interface is valid only if the deploy steps are.
        let plan = crate::provision::deploy_plan(&self.db, &n).await;
        let mut checks = Vec::new();
        for t in INTERFACE_TYPES.iter().filter(|t| **t != "vendor") {
            let imp = n.interfaces.get(t).or_else(|| hw.default_interface(t));
            let (result, reason) = match imp {
                Some(i) if !i.starts_with("no-") => {
                    let checked = match (driver.validate_interface(info, t).await, &plan, *t) {
                        (Err(why), _, _) => Err(why.to_string()),
                        (Ok(()), Err(why), "deploy") => Err(why.to_string()),
                        // Through the agent: the image and the ramdisk to boot.
                        (Ok(()), Ok(_), "deploy") if ironic_catalog::agent_based(&n) => {
                            crate::provision::check_direct_deploy(
                                &n,
                                &self.settings.local_files,
                                self.settings.agent.allow_md5_checksum,
                            )
                            .map_err(|e| e.to_string())
                        }
                        // What the boot reads and writes: the ramdisk's files and the
                        // kernel parameters.
                        (Ok(()), _, "boot") => {
                            check_boot_fields(&self.settings.local_files, None, &n, true)
                                .map_err(|e| e.to_string())
                        }
                        _ => Ok(()),
                    };
                    match checked {
                        Ok(()) => (Some(true), None),
                        Err(why) => (Some(false), Some(why)),
                    }
                }
                _ => (None, Some("not supported".to_string())),
            };
            checks.push(InterfaceCheck {
                interface: t.to_string(),
                result,
                reason,
            });
        }
        Ok(checks)
    }
}
