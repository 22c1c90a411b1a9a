//! `ipxe` and `pxe`: the ramdisk boots from the network. The node's boot
//! configuration is written beside the ramdisk's kernel and initramfs, and the machine
//! boots from the network once. DHCP (and, for `pxe`, TFTP) stay the operator's, as
//! upstream: their DHCP points machines at `<http_url>/boot.ipxe` (iPXE) or
//! `pxelinux.0` (PXE).
//!
//! - `ipxe`, under `[deploy] http_root` (served by the image server): `boot.ipxe`, one
//!   script for every machine, which chains `pxelinux.cfg/<mac>` for each of the
//!   machine's NICs (`aa-bb-cc-dd-ee-ff`); that file chains the node's
//!   `<node>/config`, which loads `<node>/deploy_kernel` and `<node>/deploy_ramdisk`
//!   over HTTP with the agent's kernel parameters.
//! - `pxe`, under `[pxe] tftp_root`: `pxelinux.cfg/01-<mac>` (PXELINUX's name for a
//!   NIC) with the node's kernel and initramfs in `<node>/`.
//!
//! Nothing secret is in these files (anyone on the provisioning network can read
//! them): the agent gets its token from its lookup. The kernel parameters written into
//! them pass `ironic_model::boot_params::check` first.

use serde_json::{Value, json};

use super::{BootContext, Root, append_params, driver_ref, needs_ramdisk};
use crate::interfaces::{
    BootInterface, DriverError, DriverFuture, Interface, NodeChanges, NodeInfo,
};

/// `driver_internal_info`: the files written for the node's network boot, to delete
/// when the ramdisk's work ends: `[{"root": "http"|"tftp", "path": <relative>}]`.
pub const NET_BOOT_FILES: &str = "net_boot_files";

/// How often iPXE tries to download the ramdisk.
const IPXE_ATTEMPTS: u32 = 10;

/// A network boot flavour: `ipxe` or `pxe`.
pub(super) struct NetBoot {
    root: Root,
}

pub(super) static IPXE: NetBoot = NetBoot { root: Root::Http };
pub(super) static PXE: NetBoot = NetBoot { root: Root::Tftp };

impl Interface for NetBoot {}

impl BootInterface for NetBoot {
    fn boots_from_network(&self) -> bool {
        true
    }

    fn check_ramdisk(&self, node: NodeInfo<'_>) -> Result<(), DriverError> {
        needs_ramdisk(node, false)
    }

    /// Writes the node's boot configuration and ramdisk files, and sets a one-time
    /// network boot. A node without a `deploy_kernel` boots whatever the operator's
    /// own network boot serves (upstream requires one).
    fn prepare_ramdisk<'a>(&'a self, ctx: &'a BootContext<'a>) -> DriverFuture<'a, NodeChanges> {
        Box::pin(async move {
            let node = ctx.node;
            let mut changes = self.remove_files(ctx).await;
            if driver_ref(node, "deploy_kernel")?.is_none() {
                tracing::info!(node = %node.uuid, "no deploy_kernel: booting from the network as the operator's DHCP and TFTP say");
                ctx.boot_once_from("pxe", &mut changes).await?;
                return Ok(changes);
            }
            let mut p = ctx.agent_params()?;
            let append = append_params(node, &ctx.settings.pxe_kernel_append_params);
            if !append.is_empty() {
                p.push(append);
            }
            let params = p.join(" ");
            // The one allow-list for what reaches a boot loader's file (no line breaks,
            // no iPXE `||`/`&&`): the node's fields were checked when set; this is the
            // line.
            ironic_model::boot_params::check(&params).map_err(|e| {
                DriverError::invalid(format!(
                    "Cannot boot node {} from the network: {e}",
                    node.uuid
                ))
            })?;
            let (Some(kernel), Some(ramdisk)) = (
                driver_ref(node, "deploy_kernel")?,
                driver_ref(node, "deploy_ramdisk")?,
            ) else {
                return Err(DriverError::invalid(format!(
                    "Node {} needs driver_info deploy_kernel and deploy_ramdisk to boot the agent's ramdisk from the network",
                    node.uuid
                )));
            };
            if ctx.pxe_macs.is_empty() {
                return Err(DriverError::invalid(format!(
                    "Node {} has no port to boot from the network: create one with the MAC of its boot NIC",
                    node.uuid
                )));
            }
            let uuid = node.uuid;
            let kernel = ctx.files.fetch(&kernel).await?;
            let ramdisk = ctx.files.fetch(&ramdisk).await?;
            let root = self.root;
            let mut written: Vec<Value> = Vec::new();
            let mut put = |rel: String| {
                written.push(json!({"root": root.name(), "path": rel}));
            };
            let failed = |e: DriverError, what: &str| {
                let msg = format!("Cannot write the network boot's {what}: {e}");
                e.context(msg)
            };
            for (from, name) in [(&kernel, "deploy_kernel"), (&ramdisk, "deploy_ramdisk")] {
                let rel = format!("{uuid}/{name}");
                ctx.files.publish(from, root, &rel).await?;
                put(rel);
            }
            match root {
                Root::Http => {
                    let base = ctx.settings.http_url.as_deref().ok_or_else(|| {
                        DriverError::invalid("No URL for the image server: set [deploy] http_url")
                    })?;
                    let rel = format!("{uuid}/config");
                    ctx.files
                        .write(root, &rel, &ipxe_node_script(base, uuid, &params))
                        .await
                        .map_err(|e| failed(e, "iPXE script"))?;
                    put(rel);
                    for mac in ctx.pxe_macs {
                        let rel = format!("pxelinux.cfg/{}", mac.replace(':', "-"));
                        let text = format!("#!ipxe\nchain --autofree {base}/{uuid}/config\n");
                        ctx.files
                            .write(root, &rel, &text)
                            .await
                            .map_err(|e| failed(e, "iPXE script"))?;
                        put(rel);
                    }
                    // Shared by every node; written (again) whenever a node boots.
                    ctx.files
                        .write(root, "boot.ipxe", &ipxe_boot_script(base))
                        .await
                        .map_err(|e| failed(e, "boot.ipxe"))?;
                }
                Root::Tftp => {
                    for mac in ctx.pxe_macs {
                        let rel = format!("pxelinux.cfg/01-{}", mac.replace(':', "-"));
                        ctx.files
                            .write(root, &rel, &pxelinux_config(uuid, &params))
                            .await
                            .map_err(|e| failed(e, "PXELINUX configuration"))?;
                        put(rel);
                    }
                }
            }
            changes
                .driver_internal_info
                .insert(NET_BOOT_FILES.into(), Value::Array(written));
            ctx.boot_once_from("pxe", &mut changes).await?;
            tracing::info!(node = %node.uuid, boot = root.name(), nics = ctx.pxe_macs.len(), "network boot of the ramdisk prepared");
            Ok(changes)
        })
    }

    /// Deletes what [`NetBoot::prepare_ramdisk`] wrote.
    fn clean_up_ramdisk<'a>(&'a self, ctx: &'a BootContext<'a>) -> DriverFuture<'a, NodeChanges> {
        Box::pin(async move { Ok(self.remove_files(ctx).await) })
    }

    /// The instance boots from its disk: the ramdisk's files go.
    fn prepare_instance<'a>(&'a self, ctx: &'a BootContext<'a>) -> DriverFuture<'a, NodeChanges> {
        self.clean_up_ramdisk(ctx)
    }
}

impl NetBoot {
    /// Deletes the files the node's record names (whichever flavour wrote them), then
    /// the node's folders; the record goes.
    async fn remove_files(&self, ctx: &BootContext<'_>) -> NodeChanges {
        let mut changes = NodeChanges::none();
        let Some(Value::Array(files)) = ctx.node.driver_internal_info.get(NET_BOOT_FILES) else {
            return changes;
        };
        for f in files {
            let root = Root::from_name(f.get("root").and_then(Value::as_str).unwrap_or(""));
            if let Some(rel) = f.get("path").and_then(Value::as_str) {
                ctx.files.remove(root, rel).await;
            }
        }
        for root in [Root::Http, Root::Tftp] {
            ctx.files.remove(root, ctx.node.uuid).await;
        }
        changes
            .driver_internal_info
            .insert(NET_BOOT_FILES.into(), Value::Null);
        changes
    }
}

/// The script every machine's iPXE is pointed at: tries the configuration of each
/// of its NICs in turn.
fn ipxe_boot_script(base: &str) -> String {
    format!(
        "#!ipxe\n\
         # Written by the conductor: chains the configuration of the first NIC that has one.\n\
         set i:int32 0\n\
         :nic\n\
         isset ${{net${{i}}/mac}} || goto none\n\
         chain --autofree {base}/pxelinux.cfg/${{net${{i}}/mac:hexhyp}} || inc i\n\
         goto nic\n\
         :none\n\
         echo No boot configuration for this machine's NICs at {base}\n\
         exit 1\n"
    )
}

/// A node's iPXE script: the ramdisk's kernel and initramfs over HTTP, retried.
fn ipxe_node_script(base: &str, uuid: &str, params: &str) -> String {
    format!(
        "#!ipxe\n\
         # Written by the conductor: node {uuid} boots the agent's ramdisk.\n\
         set tries:int32 0\n\
         :load\n\
         imgfree\n\
         kernel --timeout 60000 {base}/{uuid}/deploy_kernel {params} BOOTIF=${{mac}} initrd=deploy_ramdisk || goto again\n\
         initrd --name deploy_ramdisk --timeout 60000 {base}/{uuid}/deploy_ramdisk || goto again\n\
         boot\n\
         :again\n\
         inc tries\n\
         iseq ${{tries}} {IPXE_ATTEMPTS} && goto fail ||\n\
         sleep 5\n\
         goto load\n\
         :fail\n\
         echo Cannot load the ramdisk of node {uuid} from {base}\n\
         exit 1\n"
    )
}

/// A node's PXELINUX configuration (paths relative to the TFTP root).
fn pxelinux_config(uuid: &str, params: &str) -> String {
    format!(
        "# Written by the conductor: node {uuid} boots the agent's ramdisk.\n\
         default deploy\n\
         label deploy\n\
         kernel {uuid}/deploy_kernel\n\
         append initrd={uuid}/deploy_ramdisk {params}\n\
         ipappend 3\n"
    )
}

#[cfg(test)]
mod tests {
    use super::super::Purpose;
    use super::super::testing::{MemoryFiles, settings};
    use super::*;
    use crate::interfaces::Driver;
    use ironic_model::node::JsonObject;

    #[tokio::test]
    async fn ipxe_writes_a_script_per_nic_and_cleaning_up_removes_what_it_wrote() {
        let di = json!({"deploy_kernel": "file:///k", "deploy_ramdisk": "http://h/r"});
        let di = di.as_object().cloned().unwrap_or_default();
        let empty = JsonObject::new();
        let info = |dii| NodeInfo {
            uuid: "u-1",
            driver_info: &di,
            driver_internal_info: dii,
            properties: &empty,
            instance_info: &empty,
            power_state: None,
            provision_state: "deploying",
            target_provision_state: None,
            instance_uuid: None,
            boot_mode: None,
            secure_boot: None,
            skip_automated_cleaning: false,
        };
        let files = MemoryFiles::default();
        let s = settings();
        let macs = ["52:54:00:aa:bb:cc".to_string()];
        let ctx = BootContext {
            node: info(&empty),
            purpose: Purpose::Deploy,
            management: crate::interfaces::FAKE_HARDWARE_DRIVER.management(),
            files: &files,
            settings: &s,
            pxe_macs: &macs,
        };
        let c = IPXE.prepare_ramdisk(&ctx).await.unwrap();
        let written = files.written.lock().unwrap().clone();
        let names: Vec<&str> = written.iter().map(|w| w.1.as_str()).collect();
        assert_eq!(
            names,
            [
                "u-1/deploy_kernel",
                "u-1/deploy_ramdisk",
                "u-1/config",
                "pxelinux.cfg/52-54-00-aa-bb-cc",
                "boot.ipxe"
            ]
        );
        assert!(written.iter().all(|w| w.0 == Root::Http));
        assert!(
            written[2]
                .2
                .contains("ipa-api-url=http://10.0.2.2:6385 nofb"),
            "{}",
            written[2].2
        );
        assert_eq!(
            c.driver_internal_info[crate::interfaces::FAKE_BOOT_DEVICE]["boot_device"],
            json!("pxe")
        );
        // Cleaning up deletes the node's files (not the shared boot.ipxe).
        let dii = c.driver_internal_info.clone();
        let ctx = BootContext {
            node: info(&dii),
            ..ctx
        };
        let c = IPXE.clean_up_ramdisk(&ctx).await.unwrap();
        assert_eq!(c.driver_internal_info[NET_BOOT_FILES], Value::Null);
        let removed = files.removed.lock().unwrap().clone();
        assert_eq!(removed.len(), 4 + 2, "{removed:?}");
        assert!(!removed.iter().any(|r| r.1 == "boot.ipxe"));
        // No port: refused with what to do.
        let ctx = BootContext {
            node: info(&empty),
            pxe_macs: &[],
            ..ctx
        };
        let e = PXE.prepare_ramdisk(&ctx).await.unwrap_err();
        assert!(e.message.contains("has no port"), "{e}");
    }

    #[test]
    fn the_ipxe_scripts_chain_per_nic_then_load_over_http() {
        let boot = ipxe_boot_script("http://10.0.2.2:8080");
        assert!(boot.starts_with("#!ipxe\n"), "{boot}");
        assert!(
            boot.contains(
                "chain --autofree http://10.0.2.2:8080/pxelinux.cfg/${net${i}/mac:hexhyp} || inc i"
            ),
            "{boot}"
        );
        assert!(boot.contains("isset ${net${i}/mac} || goto none"), "{boot}");
        let node = ipxe_node_script("http://h:1", "u-1", "ipa-api-url=http://a:6385 nofb");
        assert!(node.starts_with("#!ipxe\n"), "{node}");
        assert!(
            node.contains(
                "kernel --timeout 60000 http://h:1/u-1/deploy_kernel ipa-api-url=http://a:6385 nofb BOOTIF=${mac} initrd=deploy_ramdisk || goto again"
            ),
            "{node}"
        );
        assert!(
            node.contains(
                "initrd --name deploy_ramdisk --timeout 60000 http://h:1/u-1/deploy_ramdisk || goto again"
            ),
            "{node}"
        );
        assert!(
            node.contains(&format!("iseq ${{tries}} {IPXE_ATTEMPTS}")),
            "{node}"
        );
        // Every line is a command iPXE knows, a label or a comment.
        for l in node.lines().chain(boot.lines()) {
            let first = l.split_whitespace().next().unwrap_or("");
            assert!(
                l.starts_with('#')
                    || l.starts_with(':')
                    || [
                        "set", "imgfree", "kernel", "initrd", "boot", "inc", "iseq", "sleep",
                        "goto", "echo", "exit", "isset", "chain"
                    ]
                    .contains(&first),
                "{l}"
            );
        }
    }

    #[test]
    fn the_pxelinux_configuration_names_the_nodes_files() {
        let c = pxelinux_config("u-1", "ipa-api-url=http://a:6385");
        assert!(c.contains("kernel u-1/deploy_kernel\n"), "{c}");
        assert!(
            c.contains("append initrd=u-1/deploy_ramdisk ipa-api-url=http://a:6385\n"),
            "{c}"
        );
        assert!(c.contains("ipappend 3"), "{c}");
    }
}
