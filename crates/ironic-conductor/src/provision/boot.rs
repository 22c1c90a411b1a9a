//! The conductor's side of the node's boot interface (`ironic_drivers::boot`): it
//! builds the call's context (the node's view, its management interface, the
//! conductor's files, the boot settings, and the node's network-boot MACs when the
//! interface reads them), calls, and applies what the interface changed to the node.
//! Which interface is the node's is the driver's to say ([`Driver::boot_for`]); nothing
//! here knows one interface from another.

use super::*;
use ironic_drivers::boot::{BootContext, Purpose};

/// The boot interface's calls that change the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum BootCall {
    PrepareRamdisk(Purpose),
    CleanUpRamdisk,
    PrepareInstance,
    CleanUpInstance,
}

impl BootCall {
    fn name(self) -> &'static str {
        match self {
            BootCall::PrepareRamdisk(_) => "boot.prepare_ramdisk",
            BootCall::CleanUpRamdisk => "boot.clean_up_ramdisk",
            BootCall::PrepareInstance => "boot.prepare_instance",
            BootCall::CleanUpInstance => "boot.clean_up_instance",
        }
    }
}

impl Provisioner {
    /// Calls the node's boot interface and applies what it changed to the node in
    /// memory (the caller saves it); `Err` is the interface's reason.
    pub(super) async fn boot_call(
        &self,
        node: &mut Node,
        call: BootCall,
    ) -> Result<(), WorkFailed> {
        let driver = self.driver_of(node)?;
        let boot = driver.boot_for(node.interfaces.get("boot"));
        let macs = match boot.boots_from_network() {
            true => self.pxe_macs(node).await?,
            false => Vec::new(),
        };
        let purpose = match call {
            BootCall::PrepareRamdisk(p) => p,
            _ => Purpose::Deploy,
        };
        let ctx = BootContext {
            node: NodeInfo::from(&*node),
            purpose,
            management: driver.management(),
            files: &self.boot_files,
            settings: &self.settings.boot,
            pxe_macs: &macs,
        };
        tracing::debug!(node = %node.uuid, call = call.name(), "boot interface call");
        let changes = match call {
            BootCall::PrepareRamdisk(_) => boot.prepare_ramdisk(&ctx).await,
            BootCall::CleanUpRamdisk => boot.clean_up_ramdisk(&ctx).await,
            BootCall::PrepareInstance => boot.prepare_instance(&ctx).await,
            BootCall::CleanUpInstance => boot.clean_up_instance(&ctx).await,
        }?;
        changes.apply(node);
        Ok(())
    }

    /// Makes the node boot the agent's ramdisk at its next power-on (the caller powers
    /// it on).
    pub(super) async fn prepare_ramdisk(
        &self,
        node: &mut Node,
        purpose: Purpose,
    ) -> Result<(), WorkFailed> {
        self.boot_call(node, BootCall::PrepareRamdisk(purpose))
            .await
    }

    /// Undoes [`Self::prepare_ramdisk`]. A failure is logged: the node's work is over
    /// either way.
    pub(super) async fn clean_up_ramdisk(&self, node: &mut Node) {
        if let Err(e) = self.boot_call(node, BootCall::CleanUpRamdisk).await {
            tracing::warn!(
                node = %node.uuid,
                "could not clean up the ramdisk's boot: {}",
                ironic_model::secrets::log_safe(&e.to_string())
            );
        }
    }

    /// The MACs of the node's ports that boot from the network.
    async fn pxe_macs(&self, node: &Node) -> Result<Vec<String>, WorkFailed> {
        Ok(self
            .node_ports(node)
            .await?
            .into_iter()
            .filter(|p| p.pxe_enabled)
            .map(|p| p.address.to_ascii_lowercase())
            .collect())
    }
}
