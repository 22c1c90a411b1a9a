//! Port and port group writes, under the lock of their node: the API checked the
//! request's shape; here the rules that depend on what is stored (the port group's
//! node, standalone ports and physical networks, the node's state, attached VIFs) are
//! checked against the rows as they are while nobody else writes them.

use crate::lock::{Patience, Stored, create_once};
use ironic_db::ports::Key;
use ironic_model::patch;
use ironic_model::port::{
    Port, PortSpec, Portgroup, PortgroupSpec, TENANT_VIF, check_membership, port_not_found,
    portgroup_not_found,
};
use ironic_model::states::ProvisionState;
use ironic_model::{Error, Node, PortUuid, PortgroupUuid};
use ironic_rpc::Context;
use ironic_rpc::calls::{
    CreatePort, CreatePortgroup, DestroyPort, DestroyPortgroup, UpdatePort, UpdatePortgroup,
    VifAttach, VifDetach, VifList, Vifs,
};

/// States in which a port's connectivity (port group, PXE, link, physical network) may
/// change without maintenance mode.
fn connectivity_changeable(node: &Node) -> bool {
    node.maintenance
        || matches!(
            node.provision_state,
            ProvisionState::Enroll
                | ProvisionState::Inspecting
                | ProvisionState::InspectWait
                | ProvisionState::Manageable
        )
}

/// Whether a node's hardware addresses are in use by an instance.
fn in_use(node: &Node) -> bool {
    !node.maintenance
        && (node.provision_state == ProvisionState::Active || node.instance_uuid.is_some())
}

/// Ports, port groups and VIFs: each write under the lock of the node they belong to.
pub(crate) struct Nics {
    db: ironic_db::Db,
    locks: crate::lock::Locks,
}

impl Nics {
    pub(crate) fn new(db: ironic_db::Db, locks: crate::lock::Locks) -> Nics {
        Nics { db, locks }
    }
}

impl Nics {
    /// The port group a port names (same node, existing): 400 otherwise.
    async fn member_of(&self, port: &Port) -> Result<Option<Portgroup>, Error> {
        let Some(uuid) = &port.portgroup_uuid else {
            return Ok(None);
        };
        match self.db.portgroup_get(Key::Uuid(uuid)).await? {
            Some(pg) => Ok(Some(pg)),
            None => Err(Error::invalid(portgroup_not_found(uuid).message())),
        }
    }

    /// Checks `port` joining (or staying in) `pg`, and gives an empty group without a
    /// physical network the port's.
    async fn join(&self, port: &mut Port, pg: &Portgroup) -> Result<(), Error> {
        let others = self
            .db
            .portgroup_member_physnets(pg.id, Some(port.id))
            .await?;
        check_membership(port, pg, &others)?;
        port.portgroup_id = Some(pg.id);
        Ok(())
    }

    /// An empty port group takes the physical network of its first member.
    async fn adopt_physnet(&self, port: &Port, pg: Option<Portgroup>) -> Result<(), Error> {
        if let Some(mut pg) = pg
            && pg.physical_network.is_none()
            && port.physical_network.is_some()
        {
            pg.physical_network = port.physical_network.clone();
            self.db.portgroup_save(&pg).await?;
        }
        Ok(())
    }

    pub(crate) async fn create_port(&self, ctx: &Context, req: CreatePort) -> Result<Port, Error> {
        let CreatePort { node, mut port } = req;
        self.locks.with_lock(&node, Patience::Retry, async move |h| {
            port.node_id = h.node.id;
            port.node_uuid = h.node.uuid.clone();
            let pg = self.member_of(&port).await?;
            port.portgroup_id = None;
            if let Some(pg) = &pg {
                self.join(&mut port, pg).await?;
            }
            let created = self.db.port_create(&port).await;
            let earlier = || self.db.port_get(Key::Uuid(&port.uuid));
            let same = |p: &Port| p.address == port.address && p.node_id == port.node_id;
            let created = match create_once(ctx, created, earlier, same).await? {
                Stored::New(p) => p,
                Stored::Earlier(p) => return Ok(p),
            };
            self.adopt_physnet(&created, pg).await?;
            tracing::info!(port = %created.uuid, node = %created.node_uuid, address = %created.address, "port created");
            Ok(created)
        })
        .await
    }

    pub(crate) async fn update_port(&self, _ctx: &Context, req: UpdatePort) -> Result<Port, Error> {
        let UpdatePort {
            node,
            port_uuid,
            patch: ops,
            version,
        } = req;
        self.locks.with_lock(&node, Patience::Retry, async move |h| {
            let port = self
                .db
                .port_get(Key::Uuid(&port_uuid))
                .await?
                .ok_or_else(|| port_not_found(&port_uuid))?;
            if port.node_id != h.node.id {
                return Err(Error::Conflict(format!(
                    "Port {port_uuid} moved to another node meanwhile; please retry."
                )));
            }
            let mut doc = port.doc();
            for op in &ops {
                patch::apply(&mut doc, op)?;
            }
            let mut new = port.clone();
            new.set(PortSpec::from_doc(&doc, version)?);
            if new.node_uuid != port.node_uuid {
                let target = self
                    .db
                    .node_by_uuid(&new.node_uuid)
                    .await?
                    .ok_or_else(|| {
                        Error::invalid(format!(
                            "Unable to apply the requested node_uuid '{}'. Requested value was invalid.",
                            new.node_uuid
                        ))
                    })?;
                if let Some(vif) = port.vif() {
                    return Err(Error::InvalidState(format!(
                        "Port {port_uuid} cannot move to another node while VIF {vif} is attached to it."
                    )));
                }
                new.node_id = target.id;
            }
            let pg = self.member_of(&new).await?;
            match &pg {
                Some(pg) => {
                    if port.portgroup_id == Some(pg.id)
                        && new.physical_network != port.physical_network
                    {
                        return Err(Error::invalid(
                            "physical_network cannot be changed while the port belongs to a portgroup.",
                        ));
                    }
                    self.join(&mut new, pg).await?;
                }
                None => new.portgroup_id = None,
            }
            if new == port {
                return Ok(port);
            }
            if new.address != port.address && in_use(&h.node) {
                return Err(Error::InvalidState(format!(
                    "Cannot update hardware address for port {port_uuid} as node {} is active or has instance UUID assigned",
                    h.node.uuid
                )));
            }
            let connectivity = new.portgroup_id != port.portgroup_id
                || new.pxe_enabled != port.pxe_enabled
                || new.local_link_connection != port.local_link_connection
                || new.physical_network != port.physical_network;
            if connectivity && !connectivity_changeable(&h.node) {
                return Err(Error::InvalidState(format!(
                    "Port {port_uuid} can not have any connectivity attributes (portgroup_uuid, pxe_enabled, local_link_connection, physical_network) updated unless node {} is in a enroll, inspecting, inspect wait, manageable state or in maintenance mode. The current state is {}.",
                    h.node.uuid,
                    h.node.provision_state.as_str()
                )));
            }
            let saved = self.db.port_save(&new).await?;
            if saved.portgroup_id != port.portgroup_id {
                self.adopt_physnet(&saved, pg).await?;
            }
            tracing::info!(port = %saved.uuid, node = %saved.node_uuid, "port updated");
            Ok(saved)
        })
        .await
    }

    pub(crate) async fn destroy_port(&self, ctx: &Context, req: DestroyPort) -> Result<(), Error> {
        let DestroyPort { node, port_uuid } = req;
        let r = self.locks
            .with_lock(&node, Patience::Retry, async move |h| {
                let port = self
                    .db
                    .port_get(Key::Uuid(&port_uuid))
                    .await?
                    .ok_or_else(|| port_not_found(&port_uuid))?;
                if let Some(vif) = port.vif()
                    && !h.node.maintenance
                {
                    return Err(Error::InvalidState(format!(
                        "Cannot delete the port {port_uuid} as it is bound to VIF {vif} for tenant use."
                    )));
                }
                if !self.db.port_destroy(port.id).await? {
                    return Err(port_not_found(&port_uuid));
                }
                tracing::info!(port = %port_uuid, node = %h.node.uuid, "port deleted");
                Ok(())
            })
            .await;
        match r {
            Err(Error::NotFound(_)) if ctx.attempt > 0 => Ok(()),
            r => r,
        }
    }

    pub(crate) async fn create_portgroup(
        &self,
        ctx: &Context,
        req: CreatePortgroup,
    ) -> Result<Portgroup, Error> {
        let CreatePortgroup {
            node,
            mut portgroup,
        } = req;
        self.locks.with_lock(&node, Patience::Retry, async move |h| {
            portgroup.node_id = h.node.id;
            portgroup.node_uuid = h.node.uuid.clone();
            let created = self.db.portgroup_create(&portgroup).await;
            let earlier = || self.db.portgroup_get(Key::Uuid(&portgroup.uuid));
            let same = |g: &Portgroup| g.node_id == portgroup.node_id;
            let created = match create_once(ctx, created, earlier, same).await? {
                Stored::New(g) => g,
                Stored::Earlier(g) => return Ok(g),
            };
            tracing::info!(portgroup = %created.uuid, node = %created.node_uuid, "port group created");
            Ok(created)
        })
        .await
    }

    pub(crate) async fn update_portgroup(
        &self,
        _ctx: &Context,
        req: UpdatePortgroup,
    ) -> Result<Portgroup, Error> {
        let UpdatePortgroup {
            node,
            portgroup_uuid,
            patch: ops,
        } = req;
        self.locks.with_lock(&node, Patience::Retry, async move |h| {
            let pg = self
                .db
                .portgroup_get(Key::Uuid(&portgroup_uuid))
                .await?
                .ok_or_else(|| portgroup_not_found(&portgroup_uuid))?;
            if pg.node_id != h.node.id {
                return Err(Error::Conflict(format!(
                    "Port group {portgroup_uuid} moved to another node meanwhile; please retry."
                )));
            }
            let mut doc = pg.doc();
            for op in &ops {
                patch::apply(&mut doc, op)?;
            }
            let shown = pg.name.clone().unwrap_or_else(|| pg.uuid.to_string());
            let mut new = pg.clone();
            new.set(PortgroupSpec::from_doc(&doc, Some(&shown))?);
            if new == pg {
                return Ok(pg);
            }
            let members = self
                .db
                .port_list(&ironic_db::ports::NicListQuery {
                    portgroup_id: Some(pg.id),
                    ..ironic_db::ports::NicListQuery::every()
                })
                .await?;
            if new.node_uuid != pg.node_uuid {
                if !members.is_empty() {
                    return Err(Error::invalid(format!(
                        "Port group {portgroup_uuid} has ports: it cannot move to another node."
                    )));
                }
                let target = self.db.node_by_uuid(&new.node_uuid).await?.ok_or_else(|| {
                    Error::invalid(format!(
                        "Unable to apply the requested node_uuid '{}'. Requested value was invalid.",
                        new.node_uuid
                    ))
                })?;
                new.node_id = target.id;
            }
            if !new.standalone_ports_supported
                && pg.standalone_ports_supported
                && let Some(p) = members.iter().find(|p| p.pxe_enabled)
            {
                return Err(Error::Conflict(format!(
                    "Port group {portgroup_uuid} has member port {} with 'pxe_enabled' set to True: it cannot stop supporting standalone ports.",
                    p.uuid
                )));
            }
            if new.address != pg.address && in_use(&h.node) {
                return Err(Error::InvalidState(format!(
                    "Cannot update hardware address for portgroup {portgroup_uuid} as node {} is active or has instance UUID assigned",
                    h.node.uuid
                )));
            }
            let saved = self.db.portgroup_save(&new).await?;
            if saved.physical_network != pg.physical_network && saved.physical_network.is_some() {
                // The members follow the group's physical network.
                self.db
                    .portgroup_set_member_physnet(saved.id, saved.physical_network.as_deref())
                    .await?;
            }
            tracing::info!(portgroup = %saved.uuid, node = %saved.node_uuid, "port group updated");
            Ok(saved)
        })
        .await
    }

    pub(crate) async fn destroy_portgroup(
        &self,
        ctx: &Context,
        req: DestroyPortgroup,
    ) -> Result<(), Error> {
        let DestroyPortgroup {
            node,
            portgroup_uuid,
        } = req;
        let r = self.locks
            .with_lock(&node, Patience::Retry, async move |h| {
                let pg = self
                    .db
                    .portgroup_get(Key::Uuid(&portgroup_uuid))
                    .await?
                    .ok_or_else(|| portgroup_not_found(&portgroup_uuid))?;
                if let Some(vif) = pg.vif()
                    && !h.node.maintenance
                {
                    return Err(Error::InvalidState(format!(
                        "Cannot delete the portgroup {portgroup_uuid} as it is bound to VIF {vif} for tenant use."
                    )));
                }
                self.db.portgroup_destroy(&pg).await?;
                tracing::info!(portgroup = %portgroup_uuid, node = %h.node.uuid, "port group deleted");
                Ok(())
            })
            .await;
        match r {
            Err(Error::NotFound(_)) if ctx.attempt > 0 => Ok(()),
            r => r,
        }
    }
}

/// The network interface implementations this build has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Network {
    /// Records nothing: attach and detach succeed, the list is empty (upstream's).
    Noop,
    /// Records the VIF in the chosen port's or port group's `internal_info` (upstream's
    /// `flat` without Neutron: no port binding, no cleaning network).
    Flat,
}

fn network_of(node: &Node) -> Result<Network, Error> {
    match node.interfaces.get("network").unwrap_or("noop") {
        "noop" => Ok(Network::Noop),
        "flat" => Ok(Network::Flat),
        other => Err(Error::invalid(format!(
            "The network interface {other} of node {} cannot attach VIFs.",
            node.uuid
        ))),
    }
}

/// A port or a port group, for choosing where a VIF goes.
enum Target {
    Port(Port),
    Group(Portgroup),
}

impl Target {
    fn uuid(&self) -> &str {
        match self {
            Target::Port(p) => &p.uuid,
            Target::Group(g) => &g.uuid,
        }
    }
}

fn tenant_vif(info: &ironic_model::node::JsonObject) -> Option<&str> {
    info.get(TENANT_VIF).and_then(serde_json::Value::as_str)
}

/// Where a VIF goes (upstream's `get_free_port_like_object` with no physical network
/// constraint): the port or port group named, else the first free of port groups that
/// have free members, then PXE-enabled ports, then other ports. A VIF already attached
/// anywhere on the node is 409; no free port is 400.
fn choose(
    vif: &str,
    ports: Vec<Port>,
    groups: Vec<Portgroup>,
    port_uuid: Option<&PortUuid>,
    portgroup_uuid: Option<&PortgroupUuid>,
) -> Result<Target, Error> {
    let already = |kind: &str, uuid: &str| {
        Error::Conflict(format!(
            "Unable to attach VIF because VIF {vif} is already attached to Ironic {kind} {uuid}"
        ))
    };
    for p in &ports {
        if tenant_vif(&p.internal_info) == Some(vif) {
            return Err(already("Port", &p.uuid));
        }
    }
    for g in &groups {
        if tenant_vif(&g.internal_info) == Some(vif) {
            return Err(already("Portgroup", &g.uuid));
        }
    }
    // Groups with a member in use are not free; their free members are.
    let busy_groups: Vec<i64> = ports
        .iter()
        .filter(|p| tenant_vif(&p.internal_info).is_some())
        .filter_map(|p| p.portgroup_id)
        .collect();
    let mut free: Vec<(bool, bool, Target)> = Vec::new();
    let mut members: Vec<Port> = Vec::new();
    for p in ports {
        if port_uuid.is_some_and(|u| *u != p.uuid) || tenant_vif(&p.internal_info).is_some() {
            continue;
        }
        if p.portgroup_id.is_none() && portgroup_uuid.is_none() {
            free.push((false, p.pxe_enabled, Target::Port(p)));
        } else {
            members.push(p);
        }
    }
    if port_uuid.is_none() {
        for g in groups {
            if portgroup_uuid.is_some_and(|u| *u != g.uuid)
                || tenant_vif(&g.internal_info).is_some()
            {
                continue;
            }
            let mine: Vec<Port> = members
                .iter()
                .filter(|p| p.portgroup_id == Some(g.id))
                .cloned()
                .collect();
            if busy_groups.contains(&g.id) {
                if portgroup_uuid.is_none() {
                    free.extend(
                        mine.into_iter()
                            .map(|p| (false, p.pxe_enabled, Target::Port(p))),
                    );
                }
            } else if !mine.is_empty() {
                free.push((true, true, Target::Group(g)));
            }
        }
    }
    // Port groups first, then PXE-enabled ports; stable among equals.
    free.sort_by_key(|(group, pxe, _)| (!*group, !*pxe));
    free.into_iter().next().map(|(_, _, t)| t).ok_or_else(|| {
        Error::invalid(format!(
            "Unable to attach VIF {vif}, not enough free physical ports."
        ))
    })
}

impl Nics {
    async fn nics_of(&self, node: &Node) -> Result<(Vec<Port>, Vec<Portgroup>), Error> {
        let q = ironic_db::ports::NicListQuery {
            node_id: Some(node.id),
            ..ironic_db::ports::NicListQuery::every()
        };
        Ok((
            self.db.port_list(&q).await?,
            self.db.portgroup_list(&q).await?,
        ))
    }

    pub(crate) async fn vif_list(&self, _ctx: &Context, req: VifList) -> Result<Vifs, Error> {
        let node = crate::nodes::read(&self.db, &req.node).await?;
        if network_of(&node)? == Network::Noop {
            return Ok(Vifs::default());
        }
        let (ports, groups) = self.nics_of(&node).await?;
        let vifs = ports
            .iter()
            .map(|p| &p.internal_info)
            .chain(groups.iter().map(|g| &g.internal_info))
            .filter_map(|i| tenant_vif(i).map(str::to_string))
            .collect();
        Ok(Vifs(vifs))
    }

    pub(crate) async fn vif_attach(&self, ctx: &Context, req: VifAttach) -> Result<(), Error> {
        let VifAttach {
            node,
            vif_id,
            port_uuid,
            portgroup_uuid,
        } = req;
        let r = self
            .locks
            .with_lock(&node, Patience::Retry, async move |h| {
                if network_of(&h.node)? == Network::Noop {
                    return Ok(());
                }
                let (ports, groups) = self.nics_of(&h.node).await?;
                let target = choose(
                    &vif_id,
                    ports,
                    groups,
                    port_uuid.as_ref(),
                    portgroup_uuid.as_ref(),
                )?;
                let uuid = target.uuid().to_string();
                match target {
                    Target::Port(mut p) => {
                        p.internal_info
                            .insert(TENANT_VIF.into(), vif_id.clone().into());
                        self.db.port_save(&p).await?;
                    }
                    Target::Group(mut g) => {
                        g.internal_info
                            .insert(TENANT_VIF.into(), vif_id.clone().into());
                        self.db.portgroup_save(&g).await?;
                    }
                }
                tracing::info!(node = %h.node.uuid, vif = %vif_id, on = %uuid, "VIF attached");
                Ok(())
            })
            .await;
        match r {
            // A repeat whose first attempt attached it.
            Err(Error::Conflict(m)) if ctx.attempt > 0 && m.contains("is already attached") => {
                Ok(())
            }
            r => r,
        }
    }

    pub(crate) async fn vif_detach(&self, ctx: &Context, req: VifDetach) -> Result<(), Error> {
        let VifDetach { node, vif_id } = req;
        let r = self.locks
            .with_lock(&node, Patience::Retry, async move |h| {
                if network_of(&h.node)? == Network::Noop {
                    return Ok(());
                }
                let (ports, groups) = self.nics_of(&h.node).await?;
                if let Some(mut g) = groups
                    .into_iter()
                    .find(|g| tenant_vif(&g.internal_info) == Some(vif_id.as_str()))
                {
                    g.internal_info.remove(TENANT_VIF);
                    self.db.portgroup_save(&g).await?;
                } else if let Some(mut p) = ports
                    .into_iter()
                    .find(|p| tenant_vif(&p.internal_info) == Some(vif_id.as_str()))
                {
                    p.internal_info.remove(TENANT_VIF);
                    p.extra.remove("vif_port_id");
                    self.db.port_save(&p).await?;
                } else {
                    return Err(Error::invalid(format!(
                        "Unable to detach VIF {vif_id} from node {} because it is not attached to it.",
                        h.node.uuid
                    )));
                }
                tracing::info!(node = %h.node.uuid, vif = %vif_id, "VIF detached");
                Ok(())
            })
            .await;
        match r {
            Err(Error::Invalid(m)) if ctx.attempt > 0 && m.contains("is not attached") => Ok(()),
            r => r,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use ironic_model::NodeId;
    use ironic_model::port::PortgroupSpec;
    use serde_json::json;

    fn port(id: i64, pxe: bool, group: Option<i64>) -> Port {
        let spec = PortSpec::from_doc(
            json!({"address": format!("52:54:00:00:00:{id:02x}"),
                   "node_uuid": "1be26c0b-03f2-4d2e-ae87-c02d7f33c123", "pxe_enabled": pxe})
            .as_object()
            .unwrap(),
            ironic_model::Version::new(61),
        )
        .unwrap();
        let mut p = Port::new(PortUuid::from_db(format!("port-{id}")), spec);
        p.id = id;
        p.node_id = NodeId(1);
        p.portgroup_id = group;
        p
    }

    fn group(id: i64) -> Portgroup {
        let spec = PortgroupSpec::from_doc(
            json!({"node_uuid": "1be26c0b-03f2-4d2e-ae87-c02d7f33c123"})
                .as_object()
                .unwrap(),
            None,
        )
        .unwrap();
        let mut g = Portgroup::new(PortgroupUuid::from_db(format!("group-{id}")), spec);
        g.id = id;
        g
    }

    #[test]
    fn groups_first_then_pxe_ports() {
        let t = choose(
            "v",
            vec![port(1, false, None), port(2, true, None)],
            vec![],
            None,
            None,
        );
        assert_eq!(t.unwrap().uuid(), "port-2");
        let t = choose(
            "v",
            vec![
                port(1, false, None),
                port(2, true, None),
                port(3, false, Some(7)),
            ],
            vec![group(7), group(8)],
            None,
            None,
        );
        // Group 8 has no members: not a candidate.
        assert_eq!(t.unwrap().uuid(), "group-7");
        // The one named, or none.
        let t = choose(
            "v",
            vec![port(1, false, None), port(2, true, None)],
            vec![],
            Some(&PortUuid::from_db("port-1".into())),
            None,
        );
        assert_eq!(t.unwrap().uuid(), "port-1");
        let e = choose("v", vec![], vec![], None, None).err().unwrap();
        assert_eq!(
            e.message(),
            "Unable to attach VIF v, not enough free physical ports."
        );
    }

    #[test]
    fn a_vif_attaches_once_and_busy_ports_are_skipped() {
        let mut used = port(2, true, None);
        used.internal_info.insert(TENANT_VIF.into(), json!("other"));
        let t = choose(
            "v",
            vec![used.clone(), port(1, false, None)],
            vec![],
            None,
            None,
        );
        assert_eq!(t.unwrap().uuid(), "port-1");
        used.internal_info.insert(TENANT_VIF.into(), json!("v"));
        let e = choose("v", vec![used, port(1, false, None)], vec![], None, None)
            .err()
            .unwrap();
        assert!(matches!(e, Error::Conflict(_)), "{e}");
        // A group with a member in use offers its free members instead.
        let mut member = port(3, false, Some(7));
        member
            .internal_info
            .insert(TENANT_VIF.into(), json!("other"));
        let t = choose(
            "v",
            vec![member, port(4, false, Some(7))],
            vec![group(7)],
            None,
            None,
        );
        assert_eq!(t.unwrap().uuid(), "port-4");
    }
}
