//! Network boot of the agent's ramdisk: the `ipxe` and `pxe` boot interfaces. The
//! conductor writes the node's boot configuration and puts the ramdisk's kernel and
//! initramfs beside it; the machine boots from the network once. DHCP (and, for `pxe`,
//! TFTP) stay the operator's, as upstream: their DHCP points machines at
//! `<http_url>/boot.ipxe` (iPXE) or `pxelinux.0` (PXE).
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

use super::*;

/// `driver_internal_info`: the files written for the node's network boot, to delete
/// when the ramdisk's work ends: `[{"root": "http"|"tftp", "path": <relative>}]`.
pub(super) const NET_BOOT_FILES: &str = "net_boot_files";

/// How often, and how far apart, iPXE tries to download the ramdisk.
const IPXE_ATTEMPTS: u32 = 10;

/// The network boot flavours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum NetBoot {
    Ipxe,
    Pxe,
}

impl NetBoot {
    pub(super) fn of(boot_interface: Option<&str>) -> Option<NetBoot> {
        match boot_interface {
            Some("ipxe") => Some(NetBoot::Ipxe),
            Some("pxe") => Some(NetBoot::Pxe),
            _ => None,
        }
    }
}

impl Provisioner {
    /// Writes the node's boot configuration and ramdisk files for `how`, and sets a
    /// one-time network boot. `params` are the agent's kernel parameters.
    pub(super) async fn prepare_net_boot(
        &self,
        node: &mut Node,
        how: NetBoot,
        params: &str,
    ) -> Result<(), WorkFailed> {
        self.clean_up_net_boot(node).await;
        // The one allow-list for what reaches a boot loader's file (no line breaks, no
        // iPXE `||`/`&&`): the node's fields were checked when set; this is the line.
        ironic_model::boot_params::check(params).map_err(|e| {
            WorkFailed::Refused(format!(
                "Cannot boot node {} from the network: {e}",
                node.uuid
            ))
        })?;
        let (Some(kernel), Some(ramdisk)) = (
            ramdisk_boot::driver_ref(node, "deploy_kernel")?,
            ramdisk_boot::driver_ref(node, "deploy_ramdisk")?,
        ) else {
            return Err(WorkFailed::Refused(format!(
                "Node {} needs driver_info deploy_kernel and deploy_ramdisk to boot the agent's ramdisk from the network",
                node.uuid
            )));
        };
        let macs = self.pxe_macs(node).await?;
        if macs.is_empty() {
            return Err(WorkFailed::Refused(format!(
                "Node {} has no port to boot from the network: create one with the MAC of its boot NIC",
                node.uuid
            )));
        }
        let uuid = node.uuid.to_string();
        let kernel = self.images.fetch(&kernel).await?;
        let ramdisk = self.images.fetch(&ramdisk).await?;
        let (root, root_name) = match how {
            NetBoot::Ipxe => (self.settings.deploy.http_root.clone(), "http"),
            NetBoot::Pxe => (self.settings.pxe.tftp_root.clone(), "tftp"),
        };
        let mut written: Vec<Value> = Vec::new();
        let mut put = |rel: String| {
            written.push(json!({"root": root_name, "path": rel}));
        };
        let failed = |e: std::io::Error, what: &str| {
            WorkFailed::Refused(format!("Cannot write the network boot's {what}: {e}"))
        };
        for (from, name) in [(&kernel, "deploy_kernel"), (&ramdisk, "deploy_ramdisk")] {
            let rel = format!("{uuid}/{name}");
            self.images
                .publish(from, &root.join(&rel))
                .await
                .map_err(|e| WorkFailed::Refused(e.to_string()))?;
            if how == NetBoot::Pxe {
                readable(&root, &rel).await;
            }
            put(rel);
        }
        match how {
            NetBoot::Ipxe => {
                let base = self.settings.deploy.agent_http_url().ok_or_else(|| {
                    WorkFailed::Refused("No URL for the image server: set [deploy] http_url".into())
                })?;
                let rel = format!("{uuid}/config");
                write(&root, &rel, &ipxe_node_script(&base, &uuid, params))
                    .await
                    .map_err(|e| failed(e, "iPXE script"))?;
                put(rel);
                for mac in &macs {
                    let rel = format!("pxelinux.cfg/{}", mac.replace(':', "-"));
                    let text = format!("#!ipxe\nchain --autofree {base}/{uuid}/config\n");
                    write(&root, &rel, &text)
                        .await
                        .map_err(|e| failed(e, "iPXE script"))?;
                    put(rel);
                }
                // Shared by every node; written (again) whenever a node boots.
                write(&root, "boot.ipxe", &ipxe_boot_script(&base))
                    .await
                    .map_err(|e| failed(e, "boot.ipxe"))?;
            }
            NetBoot::Pxe => {
                for mac in &macs {
                    let rel = format!("pxelinux.cfg/01-{}", mac.replace(':', "-"));
                    write(&root, &rel, &pxelinux_config(&uuid, params))
                        .await
                        .map_err(|e| failed(e, "PXELINUX configuration"))?;
                    readable(&root, &rel).await;
                    put(rel);
                }
            }
        }
        node.driver_internal_info
            .insert(NET_BOOT_FILES.into(), Value::Array(written));
        self.boot_once_from(node, "pxe").await?;
        tracing::info!(node = %node.uuid, boot = ?how, nics = macs.len(), "network boot of the ramdisk prepared");
        Ok(())
    }

    /// Deletes what [`Self::prepare_net_boot`] wrote. Failures are logged.
    pub(super) async fn clean_up_net_boot(&self, node: &mut Node) {
        let Some(Value::Array(files)) = node.driver_internal_info.remove(NET_BOOT_FILES) else {
            return;
        };
        for f in files {
            let root = match f.get("root").and_then(Value::as_str) {
                Some("tftp") => &self.settings.pxe.tftp_root,
                _ => &self.settings.deploy.http_root,
            };
            let Some(path) = f
                .get("path")
                .and_then(Value::as_str)
                .and_then(|rel| crate::images::inside(root, rel))
            else {
                continue;
            };
            match tokio::fs::remove_file(&path).await {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(node = %node.uuid, path = %path.display(), "could not delete a network boot file: {e}")
                }
            }
        }
        let _ =
            tokio::fs::remove_dir(self.settings.deploy.http_root.join(node.uuid.to_string())).await;
        let _ =
            tokio::fs::remove_dir(self.settings.pxe.tftp_root.join(node.uuid.to_string())).await;
    }

    /// The MACs of the node's ports that boot from the network.
    async fn pxe_macs(&self, node: &Node) -> Result<Vec<String>, WorkFailed> {
        let ports = self
            .db
            .port_list(&ironic_db::ports::NicListQuery {
                node_id: Some(node.id),
                ..ironic_db::ports::NicListQuery::every()
            })
            .await?;
        Ok(ports
            .into_iter()
            .filter(|p| p.pxe_enabled)
            .map(|p| p.address.to_ascii_lowercase())
            .collect())
    }
}

/// Makes a file under `[pxe] tftp_root` readable by the operator's TFTP server, which
/// runs as another user (the service's umask keeps what it writes to itself, see
/// `ironic` `UMASK`): the file and its folders, up to the root. Nothing secret is in
/// them (upstream writes them 0644 too).
async fn readable(root: &std::path::Path, rel: &str) {
    use std::os::unix::fs::PermissionsExt;
    let Some(path) = crate::images::inside(root, rel) else {
        return;
    };
    let mut p = path.as_path();
    let mut mode = 0o644;
    loop {
        if let Err(e) = tokio::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).await {
            tracing::warn!(path = %p.display(), "cannot make a network boot file readable: {e}");
        }
        mode = 0o755;
        match p.parent() {
            Some(up) if p != root && up.starts_with(root) => p = up,
            _ => break,
        }
    }
}

/// Writes `text` at `rel` under `root` (folders made), whole or not at all.
async fn write(root: &std::path::Path, rel: &str, text: &str) -> std::io::Result<()> {
    let path = crate::images::inside(root, rel)
        .ok_or_else(|| std::io::Error::other(format!("{rel} leaves its folder")))?;
    if let Some(dir) = path.parent() {
        tokio::fs::create_dir_all(dir).await?;
    }
    let partial = path.with_extension(format!("partial-{}", uuid::Uuid::new_v4().simple()));
    tokio::fs::write(&partial, text).await?;
    tokio::fs::rename(&partial, &path).await
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
    use super::*;

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
