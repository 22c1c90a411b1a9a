//! Inspection: out of band (the driver reads the hardware while the node is locked) or
//! in band through the ramdisk (`agent` inspect interface): the node is powered on to
//! boot the ramdisk and waits in `inspect wait` until the ramdisk posts what it found to
//! `POST /v1/continue_inspection` (1.84, `continue_inspection` here), or until
//! `[conductor] inspect_wait_timeout` fails it (`recovery.rs`). Both end in
//! [`Provisioner::apply_inspection`]: the inventory stored (1.81), properties and ports
//! from it, as upstream's inspection hooks do.

use super::*;
use crate::inspection_rules;
use ironic_rules as rules;

/// `driver_internal_info`: when an `inspect wait` times out (Unix ms).
pub(super) const INSPECT_WAIT_DEADLINE: &str = "inspect_wait_deadline";

/// The message of an inspection that timed out (upstream's).
pub(super) const INSPECT_TIMEOUT: &str = "Timeout reached while inspecting the node. Please check if the ramdisk responsible for the inspection is running on the node.";

/// Which properties an inspection sets from the inventory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hooks {
    /// Out of band: `cpus`, `memory_mb`, `local_gb` and `cpu_arch`.
    OutOfBand,
    /// The ramdisk's data through upstream's default hooks (`ramdisk-error`,
    /// `validate-interfaces`, `ports`, `architecture`): `cpu_arch` only.
    Agent,
}

impl Provisioner {
    /// The inspection of a node in `inspecting` (under its lock): `Done` when it
    /// finished, `Wait` when the ramdisk was booted and the node waits for its data;
    /// `Err` is the reason it failed.
    pub(super) async fn inspect(&self, node: &mut Node) -> Result<Event, WorkFailed> {
        node.inspection_started_at = Some(now());
        node.inspection_finished_at = None;
        if node.interfaces.get("inspect") == Some("agent") {
            if let Err(e) = self.boot_inspection_ramdisk(node).await {
                // Nothing stays inserted or published for a boot that did not happen.
                self.clean_up_ramdisk(node).await;
                return Err(e);
            }
            return Ok(Event::Wait);
        }
        let driver = self.driver_of(node)?;
        let found = driver.inspect_hardware(NodeInfo::from(&*node)).await?;
        if let Some(found) = found {
            self.apply_inspection(node, &found.inventory, &found.plugin_data, Hooks::OutOfBand)
                .await?;
        }
        self.cache_firmware(node).await;
        finished(node);
        Ok(Event::Done)
    }

    /// In-band inspection starts: the BMC addresses are kept for the lookup, the
    /// ramdisk gets a token when it looks the node up, and the node is powered on
    /// (rebooted if it was on) to boot it.
    async fn boot_inspection_ramdisk(&self, node: &mut Node) -> Result<(), WorkFailed> {
        let bmc = bmc_addresses(&node.driver_info);
        node.driver_internal_info
            .insert(agent::LOOKUP_BMC_ADDRESSES.into(), json!(bmc));
        agent::wipe_token_and_url(&mut node.driver_internal_info);
        self.prepare_ramdisk(node, ironic_drivers::boot::Purpose::Inspection)
            .await?;
        let driver = self.driver_of(node)?;
        let action = if node.power_state.as_deref() == Some("power on") {
            "rebooting"
        } else {
            "power on"
        };
        let after = driver
            .power()
            .set_power_state(NodeInfo::from(&*node), action, None)
            .await
            .map_err(|e| {
                WorkFailed::Refused(format!("Failed to boot the inspection ramdisk: {e}"))
            })?;
        node.power_state = Some(after);
        let timeout = self.settings.inspect_wait_timeout;
        if !timeout.is_zero() {
            let deadline = now() + chrono::Duration::from_std(timeout).unwrap_or_default();
            node.driver_internal_info.insert(
                INSPECT_WAIT_DEADLINE.into(),
                json!(deadline.timestamp_millis()),
            );
        }
        tracing::info!(node = %node.uuid, "inspection ramdisk booting; waiting for its data");
        Ok(())
    }

    /// `continue_inspection`: the ramdisk's data for a node in `inspect wait`. Another
    /// state is "not found" (upstream's, so that a caller without credentials learns
    /// nothing); the data is processed in the background, the lock held.
    pub(crate) async fn continue_inband_inspection(
        self: &Arc<Self>,
        target: &NodeRef,
        inventory: JsonObject,
        plugin_data: JsonObject,
    ) -> Result<(), Error> {
        let mut held = self.locks.hold(target, Patience::Retry).await?;
        if held.node.provision_state != P::InspectWait {
            tracing::error!(
                node = %held.node.uuid,
                state = %held.node.provision_state,
                "inspection data for a node that is not waiting for it; refused"
            );
            return held
                .bail(Error::NotFound("Resource could not be found.".into()))
                .await;
        }
        let t = fsm::process(
            P::InspectWait,
            Event::Resume,
            true,
            held.node.target_provision_state,
        )?;
        set_state(&mut held.node, t);
        held.node.driver_internal_info.remove(INSPECT_WAIT_DEADLINE);
        held.node.driver_internal_info.insert(
            agent::LAST_HEARTBEAT.into(),
            json!(agent::heartbeat_stamp(now())),
        );
        held.save().await?;
        tracing::info!(node = %held.node.uuid, "inspection data received");
        let me = self.clone();
        self.work.spawn("inspection processing", async move {
            me.process_inspection(held, inventory, plugin_data).await
        });
        Ok(())
    }

    async fn process_inspection(
        self: Arc<Self>,
        mut held: Held,
        inventory: JsonObject,
        mut plugin_data: JsonObject,
    ) {
        let outcome = match plugin_data.get("error") {
            Some(e) if !e.is_null() => Err(WorkFailed::Refused(format!(
                "Ramdisk reported error: {}",
                e.as_str().map_or_else(|| e.to_string(), str::to_string)
            ))),
            _ => {
                // Logs are large and kept elsewhere upstream; not stored.
                plugin_data.remove("logs");
                self.apply_inspection(&mut held.node, &inventory, &plugin_data, Hooks::Agent)
                    .await
            }
        };
        if outcome.is_ok() {
            // While the node is still powered on: some hardware reports its NICs' firmware
            // only then (upstream's order).
            self.cache_firmware(&held.node).await;
        }
        self.end_inband_inspection(&mut held.node, outcome.is_ok())
            .await;
        let event = match outcome {
            Ok(()) => {
                finished(&mut held.node);
                Event::Done
            }
            Err(why) => {
                let msg = format!("Failed to finish inspection: {why}");
                tracing::warn!(node = %held.node.uuid, "{}", ironic_model::secrets::log_safe(&msg));
                held.node.last_error = Some(msg);
                Event::Fail
            }
        };
        let target = held.node.target_provision_state;
        match fsm::process(held.node.provision_state, event, false, target) {
            Ok(t) => set_state(&mut held.node, t),
            Err(e) => {
                tracing::error!(error = %ironic_model::error::chain(&e), "cannot finish the inspection")
            }
        }
        let uuid = held.node.uuid.clone();
        match held.save_and_release().await {
            Ok(n) => {
                tracing::info!(node = %uuid, state = %n.provision_state, "inspection finished")
            }
            Err(e) => {
                tracing::error!(node = %uuid, error = %ironic_model::error::chain(&e), "could not save the node")
            }
        }
    }

    /// Records the firmware components the node's firmware interface reports (1.86). A
    /// failure is logged only: the inspection itself succeeded (upstream's).
    async fn cache_firmware(&self, node: &Node) {
        if matches!(node.interfaces.get("firmware"), None | Some("no-firmware")) {
            return;
        }
        let Ok(driver) = self.driver_of(node) else {
            return;
        };
        match driver.firmware_components(NodeInfo::from(node)).await {
            Ok(Some(found)) => {
                if let Err(e) = self.db.firmware_cache(node.id.0, &found).await {
                    tracing::warn!(node = %node.uuid, error = %ironic_model::error::chain(&e), "could not store the firmware components");
                }
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(node = %node.uuid, "could not read the firmware components: {}", ironic_model::secrets::log_safe(&e.to_string()))
            }
        }
    }

    /// What an in-band inspection leaves behind, whatever its end: the lookup data, the
    /// ramdisk's virtual media; the agent's token and URL, and the node is powered off
    /// (upstream's `[inspector] power_off`, default true), unless fast-track keeps the
    /// ramdisk running for the next step (upstream's) or `disable_power_off` (1.95)
    /// says the node stays on. A failure to power off is logged only.
    pub(super) async fn end_inband_inspection(&self, node: &mut Node, succeeded: bool) {
        for k in [agent::LOOKUP_BMC_ADDRESSES, INSPECT_WAIT_DEADLINE] {
            node.driver_internal_info.remove(k);
        }
        self.clean_up_ramdisk(node).await;
        if succeeded && agent::fast_track(&node.driver_info, self.settings.deploy.fast_track) {
            tracing::info!(node = %node.uuid, "fast-track: the ramdisk keeps running");
            return;
        }
        agent::wipe_token_and_url(&mut node.driver_internal_info);
        if node.disable_power_off {
            return;
        }
        let Ok(driver) = self.driver_of(node) else {
            return;
        };
        match driver
            .power()
            .set_power_state(NodeInfo::from(&*node), "power off", None)
            .await
        {
            Ok(after) => node.power_state = Some(after),
            Err(e) => {
                tracing::warn!(node = %node.uuid, "could not power off after inspection: {}", ironic_model::secrets::log_safe(&e.to_string()))
            }
        }
    }

    /// What an inspection found applied to the node (under its lock): the inventory
    /// stored (1.81), properties set as `hooks` says, and, as `[inspector] add_ports`
    /// says, ports for NICs that have none.
    async fn apply_inspection(
        &self,
        node: &mut Node,
        inv: &JsonObject,
        plugin_data: &JsonObject,
        hooks: Hooks,
    ) -> Result<(), WorkFailed> {
        let interfaces: Vec<&JsonObject> = inv
            .get("interfaces")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_object)
            .collect();
        let valid_macs = interfaces
            .iter()
            .filter_map(|i| i.get("mac_address").and_then(Value::as_str))
            .filter(|m| ironic_model::port::normalize_mac(m).is_some())
            .count();
        if hooks == Hooks::Agent && valid_macs == 0 {
            return Err(WorkFailed::Refused(format!(
                "No suitable interfaces found in {}",
                Value::Array(
                    interfaces
                        .iter()
                        .map(|i| Value::Object((*i).clone()))
                        .collect()
                )
            )));
        }
        if let Some(a) = inv_pointer(inv, "/cpu/architecture").and_then(Value::as_str) {
            node.properties.insert("cpu_arch".into(), json!(a));
        }
        if hooks == Hooks::OutOfBand {
            let num = |path: &str| inv_pointer(inv, path).and_then(Value::as_u64);
            if let Some(c) = num("/cpu/count") {
                node.properties.insert("cpus".into(), json!(c));
            }
            if let Some(m) = num("/memory/physical_mb") {
                node.properties.insert("memory_mb".into(), json!(m));
            }
            // The smallest disk of at least 4 GiB is the root device; one GiB is left
            // for partitioning, as upstream's inspection does.
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
        }
        let pxe_mac = pxe_mac(inv, plugin_data);
        let found: Vec<String> = interfaces
            .iter()
            .filter_map(|i| i.get("mac_address").and_then(Value::as_str))
            .filter_map(|m| match ironic_model::port::normalize_mac(m) {
                Some(n) => Some(n),
                None => {
                    tracing::warn!(node = %node.uuid, mac = m, "inspection found an invalid MAC address");
                    None
                }
            })
            .collect();
        let macs = ports_to_add(
            &self.settings.inspector_add_ports,
            hooks,
            found,
            pxe_mac.as_deref(),
        );
        for address in macs {
            let pxe_enabled = Some(&address) == pxe_mac.as_ref();
            let mut port = ironic_model::port::Port::new(
                ironic_model::PortUuid::new_v4(),
                ironic_model::port::PortSpec {
                    address,
                    node_uuid: node.uuid.clone(),
                    portgroup_uuid: None,
                    extra: JsonObject::new(),
                    local_link_connection: JsonObject::new(),
                    pxe_enabled,
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
                    tracing::info!(node = %node.uuid, address = %port.address, "inspection keeps an existing port: {m}")
                }
                Err(e) => return Err(e.into()),
            }
        }
        // Rules see what the hooks made (properties, ports) and may change the plugin
        // data that is stored; when one fails, this run's data is not stored.
        let mut plugin_data = plugin_data.clone();
        self.run_inspection_rules(node, inv, &mut plugin_data)
            .await?;
        Ok(self.db.inventory_save(node.id.0, inv, &plugin_data).await?)
    }

    /// The inspection rules (1.96), the API's and the built-in file's, on what an
    /// inspection found (`rules/`). Ports the actions changed are saved whatever the
    /// outcome, as the node is: what a rule did before a failure stays done (upstream's).
    async fn run_inspection_rules(
        &self,
        node: &mut Node,
        inventory: &JsonObject,
        plugin_data: &mut JsonObject,
    ) -> Result<(), WorkFailed> {
        let mut all = self.db.inspection_rule_all().await?;
        if let Some(path) = &self.settings.built_in_rules {
            all.extend(
                inspection_rules::built_in(path).map_err(|e| WorkFailed::Refused(e.to_string()))?,
            );
        }
        if all.is_empty() {
            return Ok(());
        }
        let mut ports = self
            .db
            .port_list(&ironic_db::ports::NicListQuery {
                node_id: Some(node.id),
                ..ironic_db::ports::NicListQuery::every()
            })
            .await?;
        let mask = rules::MaskSecrets::from_setting(&self.settings.mask_secrets);
        let http = inspection_rules::http();
        let uuid = node.uuid.to_string();
        let (node_id, traits_before) = (node.id, node.traits.clone());
        let mut subject = rules::Subject {
            node,
            inventory,
            plugin_data,
            ports: &mut ports,
            changed_ports: std::collections::BTreeSet::new(),
        };
        let outcome = rules::apply_rules(&all, &mut subject, mask, http)
            .await
            .map_err(|e| WorkFailed::Refused(e.last_error));
        let changed = std::mem::take(&mut subject.changed_ports);
        // Traits live in their own table; the node's save does not write them.
        let traits = subject.node.traits.clone();
        if traits != traits_before
            && let Err(e) = self
                .db
                .node_add_traits(
                    node_id,
                    &traits,
                    true,
                    crate::MAX_TRAITS_PER_NODE,
                    &self.settings.host,
                )
                .await
        {
            tracing::error!(node = %uuid, error = %ironic_model::error::chain(&e), "could not save the traits inspection rules set");
        }
        for i in changed {
            if let Some(p) = ports.get(i)
                && let Err(e) = self.db.port_save(p).await
            {
                tracing::error!(node = %uuid, port = %p.uuid, error = %ironic_model::error::chain(&e), "could not save a port an inspection rule changed");
            }
        }
        match &outcome {
            Ok(()) => tracing::info!(node = %uuid, rules = all.len(), "inspection rules applied"),
            Err(e) => {
                tracing::warn!(node = %uuid, "inspection rules failed: {}", ironic_model::secrets::log_safe(&e.to_string()))
            }
        }
        outcome
    }
}

/// The MACs an inspection makes ports of, as `[inspector] add_ports` says (upstream's
/// `validate-interfaces` and `ports` hooks): `all` every one; `disabled` none; `pxe`
/// the one the node booted from, or, out of band, where the BMC names no boot NIC,
/// every one (upstream's Redfish inspection runs the same hooks, and they keep every
/// interface when no PXE MAC is known). In band, a ramdisk that names no boot interface
/// gets no port under `pxe`: what it posts is not authenticated, so it does not choose
/// which ports a node gets.
fn ports_to_add(
    add_ports: &str,
    hooks: Hooks,
    found: Vec<String>,
    pxe: Option<&str>,
) -> Vec<String> {
    match (add_ports, pxe) {
        ("all", _) => found,
        ("pxe", Some(pxe)) => found.into_iter().filter(|m| m == pxe).collect(),
        ("pxe", None) if hooks == Hooks::OutOfBand => found,
        _ => Vec::new(),
    }
}

/// A successful inspection's timestamps (upstream's: the start cleared).
fn finished(node: &mut Node) {
    node.inspection_started_at = None;
    node.inspection_finished_at = Some(now());
}

/// The MAC the node booted from: the ramdisk's `boot_interface` (a PXE file name such
/// as `01-52-54-00-12-34-56`, or a MAC), else the inventory's `boot.pxe_interface`;
/// normalised.
fn pxe_mac(inv: &JsonObject, plugin_data: &JsonObject) -> Option<String> {
    let raw = plugin_data
        .get("boot_interface")
        .and_then(Value::as_str)
        .or_else(|| inv_pointer(inv, "/boot/pxe_interface").and_then(Value::as_str))?;
    let raw = raw.strip_prefix("01-").unwrap_or(raw).replace('-', ":");
    ironic_model::port::normalize_mac(&raw)
}

/// The hosts of the node's `*_address` driver fields (URLs reduced to their host,
/// brackets of IPv6 literals removed, loopback addresses left out): what an inspection
/// lookup may match with the BMC address the ramdisk reports. Names are kept as given
/// (no resolution under the node lock).
pub fn bmc_addresses(driver_info: &JsonObject) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (k, v) in driver_info {
        let (true, Some(v)) = (k.ends_with("_address"), v.as_str()) else {
            continue;
        };
        let host = match v.split_once("//") {
            Some((_, rest)) => {
                let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
                let authority = authority.rsplit('@').next().unwrap_or("");
                if let Some(b) = authority.strip_prefix('[') {
                    b.split(']').next().unwrap_or("").to_string()
                } else {
                    authority.split(':').next().unwrap_or("").to_string()
                }
            }
            None => v.trim_start_matches('[').trim_end_matches(']').to_string(),
        };
        let loopback = host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
            || host.eq_ignore_ascii_case("localhost");
        if !host.is_empty() && !loopback && !out.contains(&host) {
            out.push(host);
        }
    }
    out
}

fn inv_pointer<'a>(inv: &'a JsonObject, path: &str) -> Option<&'a Value> {
    let (first, rest) = path.trim_start_matches('/').split_once('/')?;
    inv.get(first)?.pointer(&format!("/{rest}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(v: Value) -> JsonObject {
        match v {
            Value::Object(o) => o,
            _ => JsonObject::new(),
        }
    }

    #[test]
    fn bmc_addresses_are_hosts_without_loopback() {
        let di = obj(json!({
            "redfish_address": "https://192.0.2.10:8000/redfish/v1",
            "ipmi_address": "192.0.2.11",
            "other_address": "http://[2001:db8::1]:623",
            "local_address": "127.0.0.1",
            "user_address": "http://admin@bmc.example.com/x",
            "ipmi_username": "192.0.2.99",
            "number_address": 5,
        }));
        let mut got = bmc_addresses(&di);
        got.sort();
        assert_eq!(
            got,
            ["192.0.2.10", "192.0.2.11", "2001:db8::1", "bmc.example.com"]
        );
    }

    /// `[inspector] add_ports` out of band and in band: under the default (`pxe`), an
    /// out-of-band inspection whose BMC names no boot NIC makes a port of every NIC.
    #[test]
    fn which_nics_become_ports() {
        let found = || vec!["52:54:00:00:00:01".to_string(), "52:54:00:00:00:02".into()];
        let pxe = Some("52:54:00:00:00:02");
        for (add_ports, hooks, pxe, expected) in [
            ("pxe", Hooks::OutOfBand, None, found()),
            (
                "pxe",
                Hooks::OutOfBand,
                pxe,
                vec!["52:54:00:00:00:02".to_string()],
            ),
            (
                "pxe",
                Hooks::Agent,
                pxe,
                vec!["52:54:00:00:00:02".to_string()],
            ),
            ("pxe", Hooks::Agent, None, vec![]),
            ("all", Hooks::OutOfBand, None, found()),
            ("all", Hooks::Agent, pxe, found()),
            ("disabled", Hooks::OutOfBand, None, vec![]),
            ("disabled", Hooks::Agent, pxe, vec![]),
        ] {
            assert_eq!(
                ports_to_add(add_ports, hooks, found(), pxe),
                expected,
                "{add_ports} {hooks:?} {pxe:?}"
            );
        }
    }

    #[test]
    fn the_pxe_mac_comes_from_the_boot_interface_first() {
        let inv = obj(json!({"boot": {"pxe_interface": "52:54:00:00:00:02"}}));
        let pd = obj(json!({"boot_interface": "01-52-54-00-00-00-01"}));
        assert_eq!(pxe_mac(&inv, &pd).as_deref(), Some("52:54:00:00:00:01"));
        assert_eq!(
            pxe_mac(&inv, &JsonObject::new()).as_deref(),
            Some("52:54:00:00:00:02")
        );
        assert_eq!(pxe_mac(&JsonObject::new(), &JsonObject::new()), None);
    }
}
