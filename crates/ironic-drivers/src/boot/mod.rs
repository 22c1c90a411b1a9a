//! The boot interfaces: how a node boots the agent's ramdisk and then its instance.
//! Each implementation is one file, named here once ([`named`], the catalogue of the
//! shared ones); a hardware type's own (`fake`, `oneview`) comes from its [`Driver`].
//!
//! - `redfish-virtual-media` (`virtual_media.rs`): a boot ISO built and inserted
//!   through the BMC's virtual media.
//! - `ipxe` and `pxe` (`network.rs`): the node's network boot configuration written
//!   beside the ramdisk's files.
//!
//! An implementation sees a [`BootContext`]: the node's view, the node's management
//! interface (boot device, virtual media), the conductor's files ([`BootFiles`]: the
//! image cache, the image server's and the TFTP server's folders) and the
//! [`BootSettings`]; no database. What it changes on the node it hands back as
//! [`NodeChanges`].
//!
//! [`Driver`]: crate::interfaces::Driver

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;

use serde_json::Value;

use crate::interfaces::{
    BootDevice, BootInterface, DriverError, DriverFuture, ManagementInterface, NodeChanges,
    NodeInfo,
};
use crate::iso;

mod network;
mod virtual_media;

pub use virtual_media::{VMEDIA_ISO, VMEDIA_ISO_FILE, published_iso};

/// The shared boot interfaces by name: the one place a boot interface's name is
/// matched. `None`: the hardware type's own ([`crate::interfaces::Driver::boot`]).
pub fn named(name: &str) -> Option<&'static dyn BootInterface> {
    match name {
        "redfish-virtual-media" => Some(&virtual_media::VIRTUAL_MEDIA),
        "ipxe" => Some(&network::IPXE),
        "pxe" => Some(&network::PXE),
        _ => None,
    }
}

/// What the ramdisk is booted for: an inspection also tells the agent where to post
/// what it found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    Inspection,
    Deploy,
    Cleaning,
}

/// The conductor's folders a boot interface writes into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Root {
    /// `[deploy] http_root`, served by the image server.
    Http,
    /// `[pxe] tftp_root`, served by the operator's TFTP server (running as another
    /// user: what is written there is made readable by all).
    Tftp,
}

impl Root {
    /// The name a node's record of written files keeps.
    pub fn name(self) -> &'static str {
        match self {
            Root::Http => "http",
            Root::Tftp => "tftp",
        }
    }

    pub fn from_name(name: &str) -> Root {
        match name {
            "tftp" => Root::Tftp,
            _ => Root::Http,
        }
    }
}

/// A future with nothing to report.
pub type Quiet<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// The conductor's image cache and published files, as a boot interface uses them.
/// Paths under a [`Root`] are relative and stay inside it (the implementation
/// refuses any other); what is written appears whole or not at all.
pub trait BootFiles: Send + Sync {
    /// A local copy of an image reference (`file://` as `[conductor]
    /// file_url_allowed_paths` allows it, `http(s)://` downloaded into the cache).
    fn fetch<'a>(&'a self, reference: &'a str) -> DriverFuture<'a, PathBuf>;
    /// Publishes the file `from` at `rel` under `root`.
    fn publish<'a>(&'a self, from: &'a Path, root: Root, rel: &'a str) -> DriverFuture<'a, ()>;
    /// Writes `text` at `rel` under `root`.
    fn write<'a>(&'a self, root: Root, rel: &'a str, text: &'a str) -> DriverFuture<'a, ()>;
    /// Builds a boot ISO at `rel` under [`Root::Http`].
    fn build_iso<'a>(&'a self, iso: &'a iso::BootIso<'a>, rel: &'a str) -> DriverFuture<'a, ()>;
    /// Deletes the file (or the empty folder) `rel` under `root`; one already gone is
    /// fine, a failure is logged (the node's work is over either way).
    fn remove<'a>(&'a self, root: Root, rel: &'a str) -> Quiet<'a>;
}

/// What the boot interfaces read of the conductor's configuration.
#[derive(Debug, Clone, Default)]
pub struct BootSettings {
    /// The API's URL as the agent calls it (`[deploy] external_callback_url`, else
    /// `[api] public_endpoint`).
    pub api_url: Option<String>,
    /// The image server's URL as the nodes reach it (`[deploy] http_url`).
    pub http_url: Option<String>,
    /// The image server's URL as the BMCs reach it (`[deploy] external_http_url`, else
    /// `http_url`).
    pub bmc_http_url: Option<String>,
    /// `[pxe] kernel_append_params`.
    pub pxe_kernel_append_params: String,
    /// `[redfish] kernel_append_params`.
    pub redfish_kernel_append_params: String,
}

/// What a boot interface's call works with.
pub struct BootContext<'a> {
    pub node: NodeInfo<'a>,
    pub purpose: Purpose,
    /// The node's management interface: the boot device, virtual media.
    pub management: &'a dyn ManagementInterface,
    pub files: &'a dyn BootFiles,
    pub settings: &'a BootSettings,
    /// The MACs of the node's ports that boot from the network, in lower case (read
    /// only for an interface that [`BootInterface::boots_from_network`]).
    pub pxe_macs: &'a [String],
}

impl BootContext<'_> {
    /// The node's next boot (only) from `device`; the changes are added to `changes`.
    pub async fn boot_once_from(
        &self,
        device: &str,
        changes: &mut NodeChanges,
    ) -> Result<(), DriverError> {
        let c = self
            .management
            .set_boot_device(
                self.node,
                BootDevice {
                    device: device.into(),
                    persistent: false,
                },
            )
            .await?;
        changes.merge(c);
        Ok(())
    }

    /// The API's URL for the agent, or why there is none.
    fn api_url(&self) -> Result<&str, DriverError> {
        self.settings.api_url.as_deref().ok_or_else(|| {
            DriverError::invalid(
                "No API URL for the agent: set [deploy] external_callback_url or [api] public_endpoint",
            )
        })
    }

    /// The agent's kernel parameters common to every boot: the API's URL, and where
    /// an inspection posts what it found.
    fn agent_params(&self) -> Result<Vec<String>, DriverError> {
        let api = self.api_url()?;
        let mut p = vec![format!("ipa-api-url={api}")];
        if self.purpose == Purpose::Inspection {
            p.push(format!(
                "ipa-inspection-callback-url={api}/v1/continue_inspection"
            ));
        }
        Ok(p)
    }
}

/// A setting a deploy may give in `instance_info` and the node in `driver_info`
/// (upstream's order), as text.
pub fn node_setting<'a>(node: NodeInfo<'a>, key: &str) -> Option<&'a str> {
    [node.instance_info, node.driver_info]
        .into_iter()
        .find_map(|m| m.get(key).and_then(Value::as_str))
}

/// The node's `kernel_append_params` (`instance_info`, else `driver_info`, else
/// `configured`; `%default%` in them is `configured`), trimmed.
fn append_params(node: NodeInfo<'_>, configured: &str) -> String {
    node_setting(node, "kernel_append_params")
        .map(|s| s.replace("%default%", configured))
        .unwrap_or_else(|| configured.to_string())
        .trim()
        .to_string()
}

/// A `driver_info` image reference: a `file://` path or an `http(s)://` URL.
pub fn driver_ref(node: NodeInfo<'_>, key: &str) -> Result<Option<String>, DriverError> {
    match node.driver_info.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(DriverError::invalid(format!(
            "driver_info {key} of node {} must be a string",
            node.uuid
        ))),
    }
}

/// The ramdisk's files `driver_info` must name: `deploy_kernel` and `deploy_ramdisk`,
/// or (`iso_will_do`) a ready `deploy_iso`.
fn needs_ramdisk(node: NodeInfo<'_>, iso_will_do: bool) -> Result<(), DriverError> {
    let has = |key: &str| {
        node.driver_info
            .get(key)
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty())
    };
    if (has("deploy_kernel") && has("deploy_ramdisk")) || (iso_will_do && has("deploy_iso")) {
        return Ok(());
    }
    Err(DriverError::invalid(format!(
        "Node {} needs driver_info deploy_kernel and deploy_ramdisk{} to boot the agent's ramdisk",
        node.uuid,
        if iso_will_do { " (or deploy_iso)" } else { "" }
    )))
}

#[cfg(test)]
pub(crate) mod testing {
    //! A boot context over a temporary folder and the fake management interface.
    use super::*;
    use std::sync::Mutex;

    /// Files in memory: what was written or published where, and what was removed.
    #[derive(Default)]
    pub struct MemoryFiles {
        pub written: Mutex<Vec<(Root, String, String)>>,
        pub removed: Mutex<Vec<(Root, String)>>,
        pub isos: Mutex<Vec<(String, String)>>,
    }

    impl BootFiles for MemoryFiles {
        fn fetch<'a>(&'a self, reference: &'a str) -> DriverFuture<'a, PathBuf> {
            Box::pin(async move {
                match reference.strip_prefix("file://") {
                    Some(p) => Ok(PathBuf::from(p)),
                    None => Ok(PathBuf::from("/cache").join(reference.len().to_string())),
                }
            })
        }
        fn publish<'a>(&'a self, from: &'a Path, root: Root, rel: &'a str) -> DriverFuture<'a, ()> {
            Box::pin(async move {
                let mut w = self.written.lock().unwrap_or_else(|p| p.into_inner());
                w.push((root, rel.to_string(), format!("<{}>", from.display())));
                Ok(())
            })
        }
        fn write<'a>(&'a self, root: Root, rel: &'a str, text: &'a str) -> DriverFuture<'a, ()> {
            Box::pin(async move {
                let mut w = self.written.lock().unwrap_or_else(|p| p.into_inner());
                w.push((root, rel.to_string(), text.to_string()));
                Ok(())
            })
        }
        fn build_iso<'a>(
            &'a self,
            iso: &'a iso::BootIso<'a>,
            rel: &'a str,
        ) -> DriverFuture<'a, ()> {
            Box::pin(async move {
                let mut w = self.isos.lock().unwrap_or_else(|p| p.into_inner());
                w.push((rel.to_string(), iso.kernel_params.to_string()));
                Ok(())
            })
        }
        fn remove<'a>(&'a self, root: Root, rel: &'a str) -> Quiet<'a> {
            Box::pin(async move {
                let mut r = self.removed.lock().unwrap_or_else(|p| p.into_inner());
                r.push((root, rel.to_string()));
            })
        }
    }

    pub fn settings() -> BootSettings {
        BootSettings {
            api_url: Some("http://10.0.2.2:6385".into()),
            http_url: Some("http://10.0.2.2:8080".into()),
            bmc_http_url: Some("http://127.0.0.1:8080".into()),
            pxe_kernel_append_params: "nofb".into(),
            redfish_kernel_append_params: "console=ttyS0".into(),
        }
    }
}
