//! `redfish-virtual-media`: the ramdisk boots from a virtual CD. A boot ISO of the
//! node's `deploy_kernel` and `deploy_ramdisk` (`crate::iso`) is built with the kernel
//! parameters the agent needs (the API's URL, a token generated now,
//! `boot_method=vmedia`, the node's `kernel_append_params`), published on the image
//! server, inserted through the BMC's virtual media, and the next boot set to the CD.
//! A ready `deploy_iso` is inserted as it is (from its own URL, or published).
//!
//! The published file's name holds a random id besides the node's UUID: the ISO
//! carries the agent's token, and the image server lists no folder, so only the BMC
//! that was told the URL can fetch it. The name is kept under a key every rendering
//! masks ([`VMEDIA_ISO_FILE`]), never logged, and the BMC's answer to a virtual media
//! query is masked the same way (the conductor's `management.rs`).

use serde_json::{Value, json};

use super::{BootContext, Root, append_params, driver_ref, needs_ramdisk};
use crate::interfaces::{
    BootInterface, DriverError, DriverFuture, Interface, NodeChanges, NodeInfo,
};
use crate::iso;
use ironic_model::agent;

/// `driver_internal_info`: `true` while the ramdisk's virtual CD is to be ejected.
/// (Written by earlier versions: the published ISO's path, still cleaned up.)
pub const VMEDIA_ISO: &str = "vmedia_boot_iso";
/// `driver_internal_info`: the published boot ISO, relative to `http_root` (absent
/// when a ready ISO was inserted from its own URL). Its name's random part is all that
/// keeps the token inside from whoever reaches the image server, so it lives under a
/// key every rendering (API, history, logs) masks as a secret.
pub const VMEDIA_ISO_FILE: &str = "vmedia_boot_iso_secret_path";

/// The interface's name (metrics).
const NAME: &str = "redfish-virtual-media";

pub(super) struct VirtualMedia;

pub(super) static VIRTUAL_MEDIA: VirtualMedia = VirtualMedia;

/// The boot ISO published for the node's ramdisk, relative to `http_root` (it is a
/// secret: see [`VMEDIA_ISO_FILE`]).
pub fn published_iso(dii: &ironic_model::node::JsonObject) -> Option<&str> {
    [VMEDIA_ISO_FILE, VMEDIA_ISO]
        .into_iter()
        .find_map(|k| dii.get(k).and_then(Value::as_str).filter(|s| !s.is_empty()))
}

impl Interface for VirtualMedia {}

impl BootInterface for VirtualMedia {
    fn check_ramdisk(&self, node: NodeInfo<'_>) -> Result<(), DriverError> {
        needs_ramdisk(node, true)
    }

    /// The ISO built (or the ready one published), inserted, the boot device set to CD
    /// once; the token the ISO carries is stored (pregenerated, so that a lookup shows
    /// it masked).
    fn prepare_ramdisk<'a>(&'a self, ctx: &'a BootContext<'a>) -> DriverFuture<'a, NodeChanges> {
        Box::pin(async move {
            let started = std::time::Instant::now();
            let node = ctx.node;
            let mut changes = NodeChanges::none();
            let dii = &mut changes.driver_internal_info;
            let bmc_base = ctx.settings.bmc_http_url.as_deref().ok_or_else(|| {
                DriverError::invalid(
                    "No URL for the image server: set [deploy] http_url or external_http_url (the image server listens on every address)",
                )
            })?;
            let id = uuid::Uuid::new_v4().simple().to_string();
            let rel = format!("redfish/boot-{}-{id}.iso", node.uuid);
            let url = match driver_ref(node, "deploy_iso")? {
                // A ready ISO: nothing can be added to it (upstream's), so the agent gets
                // no token and looks up for one. From its own URL, only the CD to eject
                // at the end.
                Some(r) if r.starts_with("http://") || r.starts_with("https://") => {
                    dii.insert(VMEDIA_ISO.into(), json!(true));
                    r
                }
                Some(reference) => {
                    let from = ctx.files.fetch(&reference).await?;
                    ctx.files.publish(&from, Root::Http, &rel).await?;
                    dii.insert(VMEDIA_ISO.into(), json!(true));
                    dii.insert(VMEDIA_ISO_FILE.into(), json!(rel));
                    format!("{bmc_base}/{rel}")
                }
                None => {
                    let (Some(kernel), Some(ramdisk)) = (
                        driver_ref(node, "deploy_kernel")?,
                        driver_ref(node, "deploy_ramdisk")?,
                    ) else {
                        return Err(DriverError::invalid(format!(
                            "Node {} needs driver_info deploy_kernel and deploy_ramdisk (or deploy_iso) to boot the agent's ramdisk by virtual media",
                            node.uuid
                        )));
                    };
                    let token = agent::new_token();
                    let params = kernel_params(ctx, &token, &id)?;
                    let kernel = ctx.files.fetch(&kernel).await?;
                    let ramdisk = ctx.files.fetch(&ramdisk).await?;
                    let boot = iso::BootIso {
                        kernel: &kernel,
                        ramdisk: &ramdisk,
                        kernel_params: &params,
                        publisher_id: &id,
                    };
                    ctx.files.build_iso(&boot, &rel).await?;
                    dii.insert(agent::TOKEN.into(), json!(token));
                    dii.insert(agent::TOKEN_PREGENERATED.into(), json!(true));
                    dii.insert(VMEDIA_ISO.into(), json!(true));
                    dii.insert(VMEDIA_ISO_FILE.into(), json!(rel));
                    format!("{bmc_base}/{rel}")
                }
            };
            // Whatever an earlier boot left in the drive goes first (upstream's).
            let ejected = ctx
                .management
                .detach_virtual_media(node, Some(&["cdrom".to_string()]))
                .await
                .map_err(|e| {
                    let msg = format!("Failed to eject the virtual media: {e}");
                    e.context(msg)
                })?;
            changes.merge(ejected);
            let inserted = ctx
                .management
                .attach_virtual_media(node, "cdrom", &url)
                .await?;
            changes.merge(inserted);
            ctx.boot_once_from("cdrom", &mut changes).await?;
            metrics::histogram!("ironic_ramdisk_prepare_seconds", "boot" => NAME)
                .record(started.elapsed().as_secs_f64());
            // (The ISO's name is not logged: it is what keeps the token inside
            // unguessable.)
            tracing::info!(
                node = %node.uuid,
                seconds = started.elapsed().as_secs_f64(),
                "ramdisk boot ISO inserted"
            );
            Ok(changes)
        })
    }

    /// The virtual CD ejected and the published ISO deleted. An eject that fails is
    /// logged: the node's work is over either way.
    fn clean_up_ramdisk<'a>(&'a self, ctx: &'a BootContext<'a>) -> DriverFuture<'a, NodeChanges> {
        Box::pin(async move {
            let node = ctx.node;
            let mut changes = NodeChanges::none();
            let dii = node.driver_internal_info;
            let Some(eject) = dii.get(VMEDIA_ISO) else {
                return Ok(changes);
            };
            // The published ISO: under its masked key, or (earlier versions) in the flag.
            let rel = dii
                .get(VMEDIA_ISO_FILE)
                .unwrap_or(eject)
                .as_str()
                .unwrap_or_default();
            for k in [VMEDIA_ISO, VMEDIA_ISO_FILE, agent::TOKEN_PREGENERATED] {
                changes.driver_internal_info.insert(k.into(), Value::Null);
            }
            match ctx
                .management
                .detach_virtual_media(node, Some(&["cdrom".to_string()]))
                .await
            {
                Ok(c) => changes.merge(c),
                Err(e) => tracing::warn!(
                    node = %node.uuid,
                    "could not eject the ramdisk's virtual media: {}",
                    ironic_model::secrets::log_safe(&e.to_string())
                ),
            }
            if !rel.is_empty() {
                ctx.files.remove(Root::Http, rel).await;
            }
            Ok(changes)
        })
    }

    /// The instance boots from its disk: the ramdisk's CD goes.
    fn prepare_instance<'a>(&'a self, ctx: &'a BootContext<'a>) -> DriverFuture<'a, NodeChanges> {
        self.clean_up_ramdisk(ctx)
    }
}

/// The agent's kernel command line: what it needs to call the API, then the node's
/// `kernel_append_params` (`instance_info`, else `driver_info`, else `[redfish]
/// kernel_append_params`; `%default%` in them is the configured value).
fn kernel_params(ctx: &BootContext<'_>, token: &str, id: &str) -> Result<String, DriverError> {
    let mut p = ctx.agent_params()?;
    p.insert(1, format!("ipa-agent-token={token}"));
    p.insert(2, "boot_method=vmedia".to_string());
    p.insert(3, format!("ir_pub_id={id}"));
    let append = append_params(ctx.node, &ctx.settings.redfish_kernel_append_params);
    if !append.is_empty() {
        p.push(append);
    }
    Ok(p.join(" "))
}

#[cfg(test)]
mod tests {
    use super::super::Purpose;
    use super::super::testing::{MemoryFiles, settings};
    use super::*;
    use crate::interfaces::Driver;
    use ironic_model::node::JsonObject;

    fn node<'a>(di: &'a JsonObject, dii: &'a JsonObject, empty: &'a JsonObject) -> NodeInfo<'a> {
        NodeInfo {
            uuid: "1be26c0b-03f2-4d2e-ae87-c02d7f33c123",
            driver_info: di,
            driver_internal_info: dii,
            properties: empty,
            instance_info: empty,
            power_state: None,
            provision_state: "cleaning",
            target_provision_state: None,
            instance_uuid: None,
            boot_mode: None,
            secure_boot: None,
            skip_automated_cleaning: false,
        }
    }

    #[tokio::test]
    async fn the_ramdisk_boots_from_a_built_iso_that_cleaning_up_ejects_and_deletes() {
        let di = json!({"deploy_kernel": "file:///k", "deploy_ramdisk": "file:///r", "kernel_append_params": "%default% quiet"});
        let di = di.as_object().cloned().unwrap_or_default();
        let empty = JsonObject::new();
        let files = MemoryFiles::default();
        let s = settings();
        let ctx = BootContext {
            node: node(&di, &empty, &empty),
            purpose: Purpose::Inspection,
            management: crate::interfaces::FAKE_HARDWARE_DRIVER.management(),
            files: &files,
            settings: &s,
            pxe_macs: &[],
        };
        let c = VIRTUAL_MEDIA.prepare_ramdisk(&ctx).await.unwrap();
        let dii = &c.driver_internal_info;
        let rel = dii[VMEDIA_ISO_FILE].as_str().unwrap().to_string();
        assert!(rel.starts_with("redfish/boot-1be26c0b"), "{rel}");
        let token = dii[agent::TOKEN].as_str().unwrap();
        let isos = files.isos.lock().unwrap().clone();
        assert_eq!(isos.len(), 1);
        let params = &isos[0].1;
        for p in [
            "ipa-api-url=http://10.0.2.2:6385",
            &format!("ipa-agent-token={token}"),
            "boot_method=vmedia",
            "ipa-inspection-callback-url=http://10.0.2.2:6385/v1/continue_inspection",
            "console=ttyS0 quiet",
        ] {
            assert!(params.contains(p), "{p} in {params}");
        }
        // The fake BMC now boots from the CD, once.
        assert_eq!(
            dii[crate::interfaces::FAKE_BOOT_DEVICE]["boot_device"],
            json!("cdrom")
        );
        // Cleaning up: the keys go, the ISO is deleted.
        let mut after = JsonObject::new();
        after.extend(dii.clone());
        let ctx = BootContext {
            node: node(&di, &after, &empty),
            ..ctx
        };
        let c = VIRTUAL_MEDIA.clean_up_ramdisk(&ctx).await.unwrap();
        assert_eq!(c.driver_internal_info[VMEDIA_ISO_FILE], Value::Null);
        assert_eq!(
            files.removed.lock().unwrap().clone(),
            vec![(Root::Http, rel)]
        );
    }

    #[tokio::test]
    async fn a_node_without_a_ramdisk_is_refused_before_anything_is_inserted() {
        let empty = JsonObject::new();
        let n = node(&empty, &empty, &empty);
        let e = VIRTUAL_MEDIA.check_ramdisk(n).unwrap_err();
        assert!(
            e.message
                .contains("deploy_kernel and deploy_ramdisk (or deploy_iso)"),
            "{e}"
        );
        let files = MemoryFiles::default();
        let s = settings();
        let ctx = BootContext {
            node: n,
            purpose: Purpose::Deploy,
            management: crate::interfaces::FAKE_HARDWARE_DRIVER.management(),
            files: &files,
            settings: &s,
            pxe_macs: &[],
        };
        assert!(VIRTUAL_MEDIA.prepare_ramdisk(&ctx).await.is_err());
        assert!(files.isos.lock().unwrap().is_empty());
    }
}
