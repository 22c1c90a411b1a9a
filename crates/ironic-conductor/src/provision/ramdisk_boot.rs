//! Booting the agent's ramdisk on a node, as its boot interface says. With
//! `redfish-virtual-media` the conductor builds a boot ISO of the node's `deploy_kernel`
//! and `deploy_ramdisk` (`ironic_drivers::iso`) with the kernel parameters the agent
//! needs (the API's URL, a token generated now, `boot_method=vmedia`, the node's
//! `kernel_append_params`), publishes it under `[deploy] http_root` for the image server
//! (`crate::images`), inserts it through the BMC's virtual media and sets a one-time
//! boot from CD. With `ipxe` and `pxe` the conductor writes the node's network boot
//! configuration (`net_boot.rs`) and the node boots from the network once; the fake
//! boot interfaces do nothing. The caller powers the node on.
//! [`Provisioner::clean_up_ramdisk`] ejects the ISO and deletes what was written.
//!
//! The published file's name holds a random id besides the node's UUID: the ISO
//! carries the agent's token, and the image server lists no folder, so only the BMC that
//! was told the URL can fetch it. The name is kept under a key every rendering masks
//! ([`VMEDIA_ISO_FILE`]), never logged, and the BMC's answer to a virtual media query
//! is masked the same way (`management.rs`).

use super::*;
use ironic_drivers::interfaces::BootDevice;
use ironic_drivers::iso;

/// `driver_internal_info`: `true` while the ramdisk's virtual CD is to be ejected.
/// (Written by earlier versions: the published ISO's path, still cleaned up.)
pub(super) const VMEDIA_ISO: &str = "vmedia_boot_iso";
/// `driver_internal_info`: the published boot ISO, relative to `http_root` (absent
/// when a ready ISO was inserted from its own URL). Its name's random part is all that
/// keeps the token inside from whoever reaches the image server, so it lives under a
/// key every rendering (API, history, logs) masks as a secret.
pub(super) const VMEDIA_ISO_FILE: &str = "vmedia_boot_iso_secret_path";

/// The boot interface that boots the ramdisk from a virtual CD the conductor builds.
const VMEDIA_BOOT: &str = "redfish-virtual-media";

/// What the ramdisk is booted for: an inspection also tells the agent where to post
/// what it found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Purpose {
    Inspection,
    Deploy,
    Cleaning,
}

impl Provisioner {
    /// Makes the node boot the agent's ramdisk at its next power-on (the caller powers
    /// it on). For virtual media: the ISO built, published and inserted, the boot
    /// device set to CD once; the token the ISO carries is stored (pregenerated, so a
    /// lookup shows it masked).
    pub(super) async fn prepare_ramdisk(
        &self,
        node: &mut Node,
        purpose: Purpose,
    ) -> Result<(), WorkFailed> {
        if let Some(how) = net_boot::NetBoot::of(node.interfaces.get("boot")) {
            if driver_ref(node, "deploy_kernel")?.is_none() {
                // Upstream requires it; here a node without one boots whatever the
                // operator's own network boot serves.
                tracing::info!(node = %node.uuid, "no deploy_kernel: booting from the network as the operator's DHCP and TFTP say");
                return self.boot_once_from(node, "pxe").await;
            }
            let api = self.agent_api()?;
            let mut p = vec![format!("ipa-api-url={api}")];
            if purpose == Purpose::Inspection {
                p.push(format!(
                    "ipa-inspection-callback-url={api}/v1/continue_inspection"
                ));
            }
            let append = append_params(node, &self.settings.pxe.kernel_append_params);
            if !append.is_empty() {
                p.push(append);
            }
            return self.prepare_net_boot(node, how, &p.join(" ")).await;
        }
        if node.interfaces.get("boot") != Some(VMEDIA_BOOT) {
            return Ok(());
        }
        let started = std::time::Instant::now();
        let driver = self.driver_of(node)?;
        let bmc_base = self.settings.deploy.bmc_http_url().ok_or_else(|| {
            WorkFailed::Refused(
                "No URL for the image server: set [deploy] http_url or external_http_url (the image server listens on every address)".into(),
            )
        })?;
        let id = uuid::Uuid::new_v4().simple().to_string();
        let rel = format!("redfish/boot-{}-{id}.iso", node.uuid);
        let out = self.settings.deploy.http_root.join(&rel);
        let url = match driver_ref(node, "deploy_iso")? {
            // A ready ISO: nothing can be added to it (upstream's), so the agent gets no
            // token and looks up for one.
            Some(reference) => {
                if reference.starts_with("http://") || reference.starts_with("https://") {
                    // Nothing published: only the CD to eject at the end.
                    node.driver_internal_info
                        .insert(VMEDIA_ISO.into(), json!(true));
                    reference
                } else {
                    let from = self.images.fetch(&reference).await?;
                    self.images.publish(&from, &out).await?;
                    let dii = &mut node.driver_internal_info;
                    dii.insert(VMEDIA_ISO.into(), json!(true));
                    dii.insert(VMEDIA_ISO_FILE.into(), json!(rel));
                    format!("{bmc_base}/{rel}")
                }
            }
            None => {
                let (Some(kernel), Some(ramdisk)) = (
                    driver_ref(node, "deploy_kernel")?,
                    driver_ref(node, "deploy_ramdisk")?,
                ) else {
                    return Err(WorkFailed::Refused(format!(
                        "Node {} needs driver_info deploy_kernel and deploy_ramdisk (or deploy_iso) to boot the agent's ramdisk by virtual media",
                        node.uuid
                    )));
                };
                let api = self.agent_api()?;
                let token = agent::new_token();
                let params = self.kernel_params(node, &api, &token, &id, purpose);
                let kernel = self.images.fetch(&kernel).await?;
                let ramdisk = self.images.fetch(&ramdisk).await?;
                let boot = iso::BootIso {
                    kernel: &kernel,
                    ramdisk: &ramdisk,
                    kernel_params: &params,
                    publisher_id: &id,
                };
                self.images
                    .build_iso(&boot, &out)
                    .await
                    .map_err(|e| WorkFailed::Refused(ironic_model::error::chain(&e)))?;
                let dii = &mut node.driver_internal_info;
                dii.insert(agent::TOKEN.into(), json!(token));
                dii.insert(agent::TOKEN_PREGENERATED.into(), json!(true));
                dii.insert(VMEDIA_ISO.into(), json!(true));
                dii.insert(VMEDIA_ISO_FILE.into(), json!(rel));
                format!("{bmc_base}/{rel}")
            }
        };
        let mgmt = driver.management();
        let info = NodeInfo::from(&*node);
        // Whatever an earlier boot left in the drive goes first (upstream's).
        let changes = mgmt
            .detach_virtual_media(info, Some(&["cdrom".to_string()]))
            .await
            .map_err(|e| {
                let msg = format!("Failed to eject the virtual media: {e}");
                e.context(msg)
            })?;
        changes.apply(node);
        let changes = mgmt
            .attach_virtual_media(NodeInfo::from(&*node), "cdrom", &url)
            .await?;
        changes.apply(node);
        self.boot_once_from(node, "cdrom").await?;
        metrics::histogram!("ironic_ramdisk_prepare_seconds", "boot" => VMEDIA_BOOT)
            .record(started.elapsed().as_secs_f64());
        // (The ISO's name is not logged: it is what keeps the token inside unguessable.)
        tracing::info!(
            node = %node.uuid,
            seconds = started.elapsed().as_secs_f64(),
            "ramdisk boot ISO inserted"
        );
        Ok(())
    }

    /// The API's URL as the agent calls it.
    fn agent_api(&self) -> Result<String, WorkFailed> {
        self.settings.agent_api_url.clone().ok_or_else(|| {
            WorkFailed::Refused(
                "No API URL for the agent: set [deploy] external_callback_url or [api] public_endpoint".into(),
            )
        })
    }

    /// The node's next boot (only) from `device`.
    pub(super) async fn boot_once_from(
        &self,
        node: &mut Node,
        device: &str,
    ) -> Result<(), WorkFailed> {
        let changes = self
            .driver_of(node)?
            .management()
            .set_boot_device(
                NodeInfo::from(&*node),
                BootDevice {
                    device: device.into(),
                    persistent: false,
                },
            )
            .await?;
        changes.apply(node);
        Ok(())
    }

    /// Undoes [`Self::prepare_ramdisk`]: the virtual CD ejected and the published ISO
    /// deleted. Failures are logged: the node's work is over either way.
    pub(super) async fn clean_up_ramdisk(&self, node: &mut Node) {
        self.clean_up_net_boot(node).await;
        let dii = &mut node.driver_internal_info;
        let Some(eject) = dii.remove(VMEDIA_ISO) else {
            return;
        };
        // The published ISO: under its masked key, or (earlier versions) in the flag.
        let rel = dii
            .remove(VMEDIA_ISO_FILE)
            .or(Some(eject))
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        dii.remove(agent::TOKEN_PREGENERATED);
        if let Ok(driver) = self.driver_of(node) {
            match driver
                .management()
                .detach_virtual_media(NodeInfo::from(&*node), Some(&["cdrom".to_string()]))
                .await
            {
                Ok(changes) => changes.apply(node),
                Err(e) => tracing::warn!(
                    node = %node.uuid,
                    "could not eject the ramdisk's virtual media: {}",
                    ironic_model::secrets::log_safe(&e.to_string())
                ),
            }
        }
        if !rel.is_empty() {
            self.images.unpublish(&rel).await;
        }
    }

    /// The agent's kernel command line: what it needs to call the API, then the
    /// node's `kernel_append_params` (`instance_info`, else `driver_info`, else
    /// `[redfish] kernel_append_params`; `%default%` in them is the configured value).
    fn kernel_params(
        &self,
        node: &Node,
        api: &str,
        token: &str,
        id: &str,
        purpose: Purpose,
    ) -> String {
        let mut p = vec![
            format!("ipa-api-url={api}"),
            format!("ipa-agent-token={token}"),
            "boot_method=vmedia".to_string(),
            format!("ir_pub_id={id}"),
        ];
        if purpose == Purpose::Inspection {
            p.push(format!(
                "ipa-inspection-callback-url={api}/v1/continue_inspection"
            ));
        }
        let append = append_params(node, &self.settings.redfish_kernel_append_params);
        if !append.is_empty() {
            p.push(append);
        }
        p.join(" ")
    }
}

/// The boot ISO published for the node's ramdisk, relative to `http_root` (it is a
/// secret: see [`VMEDIA_ISO_FILE`]).
pub(crate) fn published_iso(node: &Node) -> Option<&str> {
    let dii = &node.driver_internal_info;
    [VMEDIA_ISO_FILE, VMEDIA_ISO]
        .into_iter()
        .find_map(|k| dii.get(k).and_then(Value::as_str).filter(|s| !s.is_empty()))
}

/// A setting a deploy may give in `instance_info` and the node in `driver_info`
/// (upstream's order), as text.
pub(super) fn node_setting<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    [&node.instance_info, &node.driver_info]
        .into_iter()
        .find_map(|m| m.get(key).and_then(Value::as_str))
}

/// The node's `kernel_append_params` (`instance_info`, else `driver_info`, else
/// `configured`; `%default%` in them is `configured`), trimmed.
fn append_params(node: &Node, configured: &str) -> String {
    node_setting(node, "kernel_append_params")
        .map(|s| s.replace("%default%", configured))
        .unwrap_or_else(|| configured.to_string())
        .trim()
        .to_string()
}

/// A `driver_info` image reference: a `file://` path or an `http(s)://` URL.
pub(super) fn driver_ref(node: &Node, key: &str) -> Result<Option<String>, WorkFailed> {
    match node.driver_info.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(WorkFailed::Refused(format!(
            "driver_info {key} of node {} must be a string",
            node.uuid
        ))),
    }
}
