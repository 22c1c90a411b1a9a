//! The conductor's files as the boot interfaces see them
//! ([`ironic_drivers::boot::BootFiles`]): the image cache (`images.rs`) for the
//! references they fetch, `[deploy] http_root` (the image server) and `[pxe]
//! tftp_root` (the operator's TFTP server) for what they publish and write.
//!
//! Invariant: every path stays inside its root (`images::inside`); what is written
//! appears whole (written under a temporary name, then renamed); what goes under the
//! TFTP root is readable by the TFTP server's user.

use std::path::{Path, PathBuf};

use ironic_drivers::boot::{BootFiles, Quiet, Root};
use ironic_drivers::interfaces::{DriverError, DriverFuture};
use ironic_drivers::iso;

use crate::images::{ImageError, Images, inside};

/// The boot interfaces' files (cheap to clone).
#[derive(Clone)]
pub(crate) struct ConductorFiles {
    images: Images,
    http_root: PathBuf,
    tftp_root: PathBuf,
}

impl ConductorFiles {
    pub(crate) fn new(images: Images, http_root: PathBuf, tftp_root: PathBuf) -> ConductorFiles {
        ConductorFiles {
            images,
            http_root,
            tftp_root,
        }
    }

    fn root(&self, root: Root) -> &Path {
        match root {
            Root::Http => &self.http_root,
            Root::Tftp => &self.tftp_root,
        }
    }

    /// `rel` under `root`, or the refusal.
    fn path(&self, root: Root, rel: &str) -> Result<PathBuf, DriverError> {
        inside(self.root(root), rel).ok_or_else(|| {
            DriverError::invalid(format!(
                "{} leaves its folder",
                ironic_model::secrets::log_safe(rel)
            ))
        })
    }
}

fn failed(e: ImageError) -> DriverError {
    DriverError::failed(ironic_model::error::chain(&e))
}

impl BootFiles for ConductorFiles {
    fn fetch<'a>(&'a self, reference: &'a str) -> DriverFuture<'a, PathBuf> {
        Box::pin(async move { self.images.fetch(reference).await.map_err(failed) })
    }

    fn publish<'a>(&'a self, from: &'a Path, root: Root, rel: &'a str) -> DriverFuture<'a, ()> {
        Box::pin(async move {
            let out = self.path(root, rel)?;
            self.images.publish(from, &out).await.map_err(failed)?;
            if root == Root::Tftp {
                readable(self.root(root), &out).await;
            }
            Ok(())
        })
    }

    fn write<'a>(&'a self, root: Root, rel: &'a str, text: &'a str) -> DriverFuture<'a, ()> {
        Box::pin(async move {
            let path = self.path(root, rel)?;
            write(&path, text)
                .await
                .map_err(|e| DriverError::failed(e.to_string()))?;
            if root == Root::Tftp {
                readable(self.root(root), &path).await;
            }
            Ok(())
        })
    }

    fn build_iso<'a>(&'a self, boot: &'a iso::BootIso<'a>, rel: &'a str) -> DriverFuture<'a, ()> {
        Box::pin(async move {
            let out = self.path(Root::Http, rel)?;
            self.images.build_iso(boot, &out).await.map_err(failed)
        })
    }

    fn remove<'a>(&'a self, root: Root, rel: &'a str) -> Quiet<'a> {
        Box::pin(async move {
            let Ok(path) = self.path(root, rel) else {
                tracing::error!(
                    path = %ironic_model::secrets::log_safe(rel),
                    "refused to delete a file outside its folder"
                );
                return;
            };
            // A node's folder, emptied by the removals before it (a folder that is not
            // empty stays).
            if tokio::fs::metadata(&path).await.is_ok_and(|m| m.is_dir()) {
                let _ = tokio::fs::remove_dir(&path).await;
                return;
            }
            match tokio::fs::remove_file(&path).await {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                // (A published name may be a secret, see `VMEDIA_ISO_FILE`: the path is
                // logged at debug only.)
                Err(e) => {
                    tracing::warn!(error = %e.kind(), "could not delete a boot file");
                    tracing::debug!(path = %path.display(), error = %e, "could not delete a boot file");
                }
            }
        })
    }
}

/// Makes a file under `[pxe] tftp_root` readable by the operator's TFTP server, which
/// runs as another user (the service's umask keeps what it writes to itself, see
/// `ironic` `UMASK`): the file and its folders, up to the root. Nothing secret is in
/// them (upstream writes them 0644 too).
async fn readable(root: &Path, path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let mut p = path;
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

/// Writes `text` at `path` (folders made), whole or not at all.
async fn write(path: &Path, text: &str) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        tokio::fs::create_dir_all(dir).await?;
    }
    let partial = path.with_extension(format!("partial-{}", uuid::Uuid::new_v4().simple()));
    tokio::fs::write(&partial, text).await?;
    tokio::fs::rename(&partial, path).await
}
