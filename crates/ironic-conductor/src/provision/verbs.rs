//! Provisioning verbs: each is checked against the state machine and applied under the
//! node lock; verification, inspection and adoption finish here.

use super::*;

impl Provisioner {
    /// `fsm::process`, with upstream's 400 `InvalidStateRequested` when the event may
    /// not happen in the node's state.
    pub(super) fn transition(
        node: &Node,
        action: &str,
        event: Event,
        background: bool,
        target: Option<P>,
    ) -> Result<fsm::Transition, Error> {
        fsm::process(node.provision_state, event, background, target).map_err(|_| {
            fsm::invalid_state_requested(action, node.uuid.as_str(), node.provision_state)
        })
    }

    /// Where `action` takes the node, and whether background work follows.
    pub(super) fn plan(node: &Node, action: &str) -> Result<(fsm::Transition, bool), Error> {
        let uuid = node.uuid.as_str();
        let event = match action {
            "manage" if node.provision_state == P::Enroll => {
                return Ok((
                    Self::transition(node, action, Event::Manage, true, None)?,
                    true,
                ));
            }
            "provide" => {
                if node.maintenance {
                    return Err(Error::invalid(format!(
                        "The providing operation can't be performed on node {uuid} because it's in maintenance mode."
                    )));
                }
                if node.retired {
                    return Err(Error::invalid(format!(
                        "The providing operation can't be performed on node {uuid} because it is retired."
                    )));
                }
                return Ok((
                    Self::transition(node, action, Event::Provide, true, None)?,
                    true,
                ));
            }
            "inspect" | "adopt" => {
                let e = if action == "inspect" {
                    Event::Inspect
                } else {
                    Event::Adopt
                };
                return Ok((Self::transition(node, action, e, true, None)?, true));
            }
            "manage" => Event::Manage,
            other => {
                return Err(Error::invalid(format!(
                    "The requested action \"{other}\" is not a provisioning action of this conductor."
                )));
            }
        };
        Ok((Self::transition(node, action, event, false, None)?, false))
    }

    /// `do_provisioning_action`.
    pub(crate) async fn provisioning_action(
        self: &Arc<Self>,
        target: &NodeRef,
        action: &str,
        ctx: &ironic_rpc::Context,
    ) -> Result<(), Error> {
        // `None`: a repeat whose first attempt was applied.
        let Some(mut held) = self.lock_for(target, ctx).await? else {
            return Ok(());
        };
        if action == "abort" {
            return self.abort(held).await;
        }
        let uuid = held.node.uuid.to_string();
        let (t, background) = match Self::plan(&held.node, action) {
            Ok(p) => p,
            Err(e) => return held.bail(e).await,
        };
        set_state(&mut held.node, t);
        if background {
            // Starting work clears the last error.
            held.node.last_error = None;
        }
        tracing::info!(node = %uuid, action, state = %held.node.provision_state, "provisioning action accepted");
        match held.node.provision_state {
            P::Verifying | P::Inspecting | P::Adopting => {
                held.save().await?;
                let me = self.clone();
                self.work.spawn(
                    "quick work",
                    async move { me.finish_quick_work(held).await },
                );
            }
            P::Cleaning => {
                held.save().await?;
                let me = self.clone();
                self.work.spawn(
                    "automated cleaning",
                    async move { me.clean(held, None).await },
                );
            }
            _ => {
                held.save_and_release().await?;
            }
        }
        Ok(())
    }

    /// Verification, inspection and adoption: the power state is read through the
    /// driver, then `done` (or `fail` with the driver's reason).
    pub(super) async fn finish_quick_work(self: Arc<Self>, mut held: Held) {
        let read = match self.driver_of(&held.node) {
            Ok(d) => d.power().get_power_state(NodeInfo::from(&held.node)).await,
            Err(e) => Err(e),
        };
        let event = match read {
            Ok(p) => {
                held.node.power_state = Some(p);
                if held.node.provision_state == P::Inspecting {
                    match self.inspect(&mut held.node).await {
                        Ok(()) => Event::Done,
                        Err(why) => {
                            held.node.last_error =
                                Some(format!("Failed to inspect hardware. Reason: {why}"));
                            Event::Fail
                        }
                    }
                } else {
                    Event::Done
                }
            }
            Err(why) => {
                held.node.last_error = Some(format!(
                    "Failed to read the power state of node {}: {why}",
                    held.node.uuid
                ));
                Event::Fail
            }
        };
        let target = held.node.target_provision_state;
        match fsm::process(held.node.provision_state, event, false, target) {
            Ok(t) => set_state(&mut held.node, t),
            Err(e) => tracing::error!(error = %e, "cannot finish"),
        }
        let uuid = held.node.uuid.clone();
        match held.save_and_release().await {
            Ok(n) => tracing::info!(node = %uuid, state = %n.provision_state, "done"),
            Err(e) => tracing::error!(node = %uuid, error = %e, "could not save the node"),
        }
    }

    /// Out-of-band inspection (under the node's lock): the driver's findings become the
    /// node's inventory (1.81), its `properties` (`cpus`, `memory_mb`, `local_gb`,
    /// `cpu_arch`, as upstream's inspection sets them) and, as `[inspector] add_ports`
    /// says, ports for NICs that have none.
    async fn inspect(&self, node: &mut Node) -> Result<(), String> {
        let driver = self.driver_of(node).map_err(|e| e.to_string())?;
        let Some(found) = driver
            .inspect_hardware(NodeInfo::from(&*node))
            .await
            .map_err(|e| e.to_string())?
        else {
            return Ok(());
        };
        let inv = &found.inventory;
        let num = |path: &str| inv_pointer(inv, path).and_then(Value::as_u64);
        if let Some(c) = num("/cpu/count") {
            node.properties.insert("cpus".into(), json!(c));
        }
        if let Some(a) = inv_pointer(inv, "/cpu/architecture").and_then(Value::as_str) {
            node.properties.insert("cpu_arch".into(), json!(a));
        }
        if let Some(m) = num("/memory/physical_mb") {
            node.properties.insert("memory_mb".into(), json!(m));
        }
        // The smallest disk of at least 4 GiB is the root device; one GiB is left for
        // partitioning, as upstream's inspection does.
        let gib = 1u64 << 30;
        let root = inv
            .get("disks")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|d| d.get("size").and_then(Value::as_u64))
            .filter(|s| *s >= 4 * gib)
            .min();
        if let Some(size) = root {
            node.properties
                .insert("local_gb".into(), json!(size / gib - 1));
        }
        self.db
            .inventory_save(node.id.0, &found.inventory, &found.plugin_data)
            .await
            .map_err(|e| e.to_string())?;
        let pxe_mac = inv_pointer(inv, "/boot/pxe_interface").and_then(Value::as_str);
        let macs: Vec<&str> = inv
            .get("interfaces")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|i| i.get("mac_address").and_then(Value::as_str))
            .filter(|m| match self.settings.inspector_add_ports.as_str() {
                "all" => true,
                "pxe" => Some(*m) == pxe_mac,
                _ => false,
            })
            .collect();
        for mac in macs {
            let Some(address) = ironic_model::port::normalize_mac(mac) else {
                tracing::warn!(node = %node.uuid, mac, "inspection found an invalid MAC address");
                continue;
            };
            let mut port = ironic_model::port::Port::new(
                uuid::Uuid::new_v4().to_string(),
                ironic_model::port::PortSpec {
                    address,
                    node_uuid: node.uuid.to_string(),
                    portgroup_uuid: None,
                    extra: JsonObject::new(),
                    local_link_connection: JsonObject::new(),
                    pxe_enabled: Some(mac) == pxe_mac,
                    physical_network: None,
                    is_smartnic: false,
                    name: None,
                    description: None,
                    vendor: None,
                    category: None,
                    available_for_dynamic_portgroup: true,
                },
            );
            port.node_id = node.id;
            match self.db.port_create(&port).await {
                Ok(p) => {
                    tracing::info!(node = %node.uuid, port = %p.uuid, address = %p.address, "port created by inspection")
                }
                // Known already (here or on another node): kept as it is.
                Err(Error::Conflict(m)) => {
                    tracing::info!(node = %node.uuid, mac, "inspection keeps an existing port: {m}")
                }
                Err(e) => return Err(e.to_string()),
            }
        }
        Ok(())
    }
}

fn inv_pointer<'a>(inv: &'a JsonObject, path: &str) -> Option<&'a Value> {
    let (first, rest) = path.trim_start_matches('/').split_once('/')?;
    inv.get(first)?.pointer(&format!("/{rest}"))
}
