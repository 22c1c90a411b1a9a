//! The conductor's images: deploy kernels and ramdisks fetched from their references
//! (`file://` read where it lies when `local_files.rs` allows it; `http(s)://`
//! downloaded once into `[deploy]
//! image_cache`, bounded in size and time), boot ISOs built from them
//! (`ironic_drivers::iso`), and the files published under `[deploy] http_root`, which
//! the image server (`ironic` crate, `image_server.rs`) or the operator's web server
//! serves.
//!
//! Invariant: whatever is published or deleted stays inside `http_root` (relative
//! paths only, no `..`), and a published file appears whole (written under a temporary
//! name, then renamed).

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::Duration;

use ironic_drivers::http_get::GetClient;
use ironic_drivers::iso;
use sha2::Digest;
use tokio::sync::OnceCell;

/// How long one download may take.
const DOWNLOAD_LIMIT: Duration = Duration::from_secs(1800);

/// Why an image could not be had.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("unsupported image reference {0:?}: use file:///absolute/path or an http(s):// URL")]
    Reference(String),
    #[error(transparent)]
    File(#[from] crate::local_files::FileRefError),
    #[error("image {} cannot be read", .0.display())]
    Unreadable(PathBuf, #[source] std::io::Error),
    #[error("cannot download {url}")]
    Download {
        url: String,
        #[source]
        source: ironic_drivers::http_get::GetError,
    },
    /// (Named by its folder: a published name may be a secret, see
    /// `ironic_drivers::boot::VMEDIA_ISO_FILE`.)
    #[error("cannot publish an image in {}", .0.parent().unwrap_or(.0).display())]
    Publish(PathBuf, #[source] std::io::Error),
    /// (What the file's digest is goes to the conductor's log only: the message is
    /// shown to the node's readers.)
    #[error("Image {image} failed to verify against its {algo} checksum: expected {expected}")]
    Checksum {
        image: String,
        algo: &'static str,
        expected: String,
    },
    #[error("cannot read the checksum file {url}: {why}")]
    ChecksumFile { url: String, why: String },
    #[error("cannot convert {} to raw: {why}", .image.display())]
    Convert { image: PathBuf, why: String },
    #[error(
        "no room for {what}: it would leave less than [deploy] image_cache_reserved_bytes ({reserved} bytes) free on the file system of {}",
        .cache.display()
    )]
    NoRoom {
        what: String,
        cache: PathBuf,
        reserved: u64,
    },
    #[error(transparent)]
    Iso(#[from] iso::IsoError),
}

impl From<ImageError> for crate::provision::WorkFailed {
    fn from(e: ImageError) -> Self {
        crate::provision::WorkFailed::Refused(ironic_model::error::chain(&e))
    }
}

/// The conductor's images (cheap to clone).
#[derive(Clone)]
pub struct Images {
    inner: Arc<Inner>,
}

struct Inner {
    deploy: ironic_config::DeploySection,
    /// Which `file://` references may be read.
    files: crate::local_files::LocalFiles,
    http: GetClient,
    /// Instance images' checksums already computed (`instance_image.rs`).
    verified: crate::instance_image::Verified,
    /// The EFI system partition image, made (or found missing) once.
    esp: OnceCell<Option<PathBuf>>,
    /// The cache entries being made.
    making: Making,
}

/// One task at a time makes a cache entry (a download, a conversion): the others wait
/// for it and find the entry made, rather than fetching or converting it again.
#[derive(Default)]
struct Making(std::sync::Mutex<HashMap<PathBuf, Weak<tokio::sync::Mutex<()>>>>);

impl Making {
    async fn lock(&self, entry: &Path) -> tokio::sync::OwnedMutexGuard<()> {
        let m = {
            let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
            map.retain(|_, w| w.strong_count() > 0);
            match map.get(entry).and_then(Weak::upgrade) {
                Some(m) => m,
                None => {
                    let m = Arc::new(tokio::sync::Mutex::new(()));
                    map.insert(entry.to_path_buf(), Arc::downgrade(&m));
                    m
                }
            }
        };
        m.lock_owned().await
    }
}

impl Images {
    pub fn new(
        deploy: &ironic_config::DeploySection,
        files: crate::local_files::LocalFiles,
    ) -> Images {
        Images {
            inner: Arc::new(Inner {
                deploy: deploy.clone(),
                files,
                http: GetClient::new(),
                verified: Default::default(),
                esp: OnceCell::new(),
                making: Making::default(),
            }),
        }
    }

    pub(crate) fn deploy(&self) -> &ironic_config::DeploySection {
        &self.inner.deploy
    }

    pub(crate) fn http(&self) -> &GetClient {
        &self.inner.http
    }

    pub(crate) fn verified(&self) -> &crate::instance_image::Verified {
        &self.inner.verified
    }

    /// The right to make the cache entry `entry`, waited for while another task makes
    /// it: check again whether it exists once this returns.
    pub(crate) async fn making(&self, entry: &Path) -> tokio::sync::OwnedMutexGuard<()> {
        self.inner.making.lock(entry).await
    }

    /// The local file of an image reference: a `file://` path as `local_files.rs`
    /// allows it (its canonical path, checked now), an `http(s)://` URL downloaded into
    /// the cache unless it is there already.
    pub async fn fetch(&self, reference: &str) -> Result<PathBuf, ImageError> {
        if reference.starts_with("file://") {
            let (files, r) = (self.inner.files.clone(), reference.to_string());
            return tokio::task::spawn_blocking(move || files.check(&r))
                .await
                .map_err(|e| ImageError::Reference(format!("{reference}: {e}")))?
                .map_err(ImageError::File);
        }
        if !(reference.starts_with("http://") || reference.starts_with("https://")) {
            return Err(ImageError::Reference(reference.into()));
        }
        let d = &self.inner.deploy;
        let name = format!("{:x}", sha2::Sha256::digest(reference.as_bytes()));
        let cached = d.image_cache.join(&name);
        let cached_already = || async {
            let there = tokio::fs::metadata(&cached).await.is_ok();
            if there {
                mark_used(&cached);
            }
            there
        };
        if cached_already().await {
            return Ok(cached);
        }
        let _making = self.making(&cached).await;
        if cached_already().await {
            return Ok(cached);
        }
        let publish = |e| ImageError::Publish(cached.clone(), e);
        tokio::fs::create_dir_all(&d.image_cache)
            .await
            .map_err(publish)?;
        let partial = d
            .image_cache
            .join(format!(".{name}.{}", uuid::Uuid::new_v4().simple()));
        let started = std::time::Instant::now();
        // Never past the free-space floor: the download is cut where it would be.
        let room = self.room()?;
        let bytes = self
            .inner
            .http
            .download(
                reference,
                &partial,
                d.image_download_max_bytes.min(room),
                DOWNLOAD_LIMIT,
            )
            .await
            .map_err(|source| {
                let url = ironic_model::secrets::log_safe(reference).to_string();
                match source {
                    ironic_drivers::http_get::GetError::TooLarge(_)
                        if room < d.image_download_max_bytes =>
                    {
                        self.no_room(format!("the download of {url}"))
                    }
                    source => ImageError::Download { url, source },
                }
            });
        if bytes.is_err() {
            let _ = tokio::fs::remove_file(&partial).await;
        }
        let bytes = bytes?;
        tokio::fs::rename(&partial, &cached)
            .await
            .map_err(publish)?;
        tracing::info!(
            url = %ironic_model::secrets::log_safe(reference),
            bytes,
            seconds = started.elapsed().as_secs_f64(),
            "image downloaded into the cache"
        );
        self.trim_cache(&cached).await;
        Ok(cached)
    }

    /// The bytes downloads and conversions may still write into `image_cache`: its
    /// file system's free space less `[deploy] image_cache_reserved_bytes`.
    pub(crate) fn room(&self) -> Result<u64, ImageError> {
        let d = &self.inner.deploy;
        std::fs::create_dir_all(&d.image_cache)
            .map_err(|e| ImageError::Publish(d.image_cache.join("x"), e))?;
        let free = free_space(&d.image_cache)
            .map_err(|e| ImageError::Unreadable(d.image_cache.clone(), e))?;
        Ok(free.saturating_sub(d.image_cache_reserved_bytes))
    }

    /// The refusal of `what` for want of room above the free-space floor.
    pub(crate) fn no_room(&self, what: String) -> ImageError {
        let d = &self.inner.deploy;
        metrics::counter!("ironic_image_cache_refusals_total", "why" => "free_space").increment(1);
        ImageError::NoRoom {
            what,
            cache: d.image_cache.clone(),
            reserved: d.image_cache_reserved_bytes,
        }
    }

    /// Removes what a process that died left half-written: downloads and conversions
    /// in `image_cache`, publications in `http_root` (names of partial files, not
    /// written for [`PARTIAL_AGE`]: a writer alive writes all the time), and published
    /// ISOs and instance images older than `stale` (their node's wait has timed out, or
    /// never will: no callback timeout, `None`, sweeps none). At start.
    pub async fn sweep(&self, stale: Option<std::time::Duration>) {
        let d = self.inner.deploy.clone();
        let removed = tokio::task::spawn_blocking(move || {
            let mut removed = sweep_partials(&d.image_cache);
            removed.extend(sweep_partials(&d.http_root));
            for dir in ["redfish", "agent_images"] {
                removed.extend(sweep_partials(&d.http_root.join(dir)));
                if let Some(stale) = stale {
                    removed.extend(sweep_older(&d.http_root.join(dir), stale));
                }
            }
            removed
        })
        .await
        .unwrap_or_default();
        if !removed.is_empty() {
            metrics::counter!("ironic_image_files_swept_total").increment(removed.len() as u64);
            tracing::info!(
                files = removed.len(),
                "files left by an earlier process removed from image_cache and http_root"
            );
        }
    }

    /// Builds a boot ISO at `out`, with the UEFI side when an EFI system partition
    /// image is configured or can be made.
    pub async fn build_iso(&self, boot: &iso::BootIso<'_>, out: &Path) -> Result<(), ImageError> {
        let d = &self.inner.deploy;
        let esp = self
            .inner
            .esp
            .get_or_init(|| async {
                if let Some(p) = &d.esp_image {
                    return Some(p.clone());
                }
                let made = d.image_cache.join("esp-grub-x86_64.img");
                match iso::build_esp(&made).await {
                    Ok(()) => Some(made),
                    Err(e) => {
                        tracing::warn!(
                            error = %ironic_model::error::chain(&e),
                            "no EFI system partition image: boot ISOs boot by BIOS only (set [deploy] esp_image)"
                        );
                        None
                    }
                }
            })
            .await
            .clone();
        let tools = iso::Tools {
            xorriso: d.xorriso.clone(),
            isolinux_bin: d.isolinux_bin.clone(),
            ldlinux_c32: d.ldlinux_c32.clone(),
            esp_image: esp,
        };
        let started = std::time::Instant::now();
        iso::build(&tools, boot, out).await?;
        metrics::histogram!("ironic_boot_iso_build_seconds")
            .record(started.elapsed().as_secs_f64());
        Ok(())
    }

    /// Publishes the file `from` at `out` (inside `http_root`): a hard link when it can,
    /// a copy otherwise; whole or not at all.
    pub async fn publish(&self, from: &Path, out: &Path) -> Result<(), ImageError> {
        let fail = |e| ImageError::Publish(out.to_path_buf(), e);
        if let Some(dir) = out.parent() {
            tokio::fs::create_dir_all(dir).await.map_err(fail)?;
        }
        let partial = out.with_extension(format!("partial-{}", uuid::Uuid::new_v4().simple()));
        if tokio::fs::hard_link(from, &partial).await.is_err() {
            tokio::fs::copy(from, &partial).await.map_err(fail)?;
        }
        tokio::fs::rename(&partial, out).await.map_err(fail)
    }

    /// Deletes a published file, given relative to `http_root`; a path that would leave
    /// it is refused (logged), one already gone is fine.
    pub async fn unpublish(&self, rel: &str) {
        // (A published name is a secret of sorts, see `VMEDIA_ISO_FILE`: logged at
        // debug only.)
        let Some(path) = inside(&self.inner.deploy.http_root, rel) else {
            tracing::error!(
                path = %ironic_model::secrets::log_safe(rel),
                "refused to delete a file outside [deploy] http_root"
            );
            return;
        };
        match tokio::fs::remove_file(&path).await {
            Ok(()) => tracing::debug!(path = rel, "published image deleted"),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(error = %e.kind(), "could not delete a published image");
                tracing::debug!(path = rel, error = %e, "could not delete a published image");
            }
        }
    }
}

/// How long a partial file may go unwritten before it counts as left by a dead writer.
const PARTIAL_AGE: Duration = Duration::from_secs(600);

/// Whether `name` is a file being written (downloads: `.<name>.<id>`; conversions and
/// publications: `<name>.partial-<id>`).
pub(crate) fn partial(name: &str) -> bool {
    name.starts_with('.') || name.contains(".partial-")
}

/// The free bytes of the file system holding `path` (for an unprivileged process).
fn free_space(path: &Path) -> std::io::Result<u64> {
    let st = rustix::fs::statvfs(path).map_err(std::io::Error::from)?;
    Ok(st.f_bavail.saturating_mul(st.f_frsize))
}

/// Removes the partial files of `dir` unwritten for [`PARTIAL_AGE`].
fn sweep_partials(dir: &Path) -> Vec<PathBuf> {
    sweep(dir, |name, m| {
        partial(name)
            && m.modified()
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > PARTIAL_AGE)
    })
}

/// Removes the files of `dir` whose inode changed (written, linked) longer than `age`
/// ago.
fn sweep_older(dir: &Path, age: Duration) -> Vec<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs() as i64;
    sweep(dir, |_, m| {
        now.saturating_sub(m.ctime()) > age.as_secs() as i64
    })
}

fn sweep(dir: &Path, gone: impl Fn(&str, &std::fs::Metadata) -> bool) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| {
            e.metadata()
                .is_ok_and(|m| m.is_file() && gone(&e.file_name().to_string_lossy(), &m))
        })
        .map(|e| e.path())
        .filter(|p| std::fs::remove_file(p).is_ok())
        .collect()
}

/// Marks a cache entry used now: the cache evicts the least recently used first, by
/// modification time (access times are not kept on every mount).
pub(crate) fn mark_used(path: &Path) {
    if let Ok(f) = std::fs::File::options().append(true).open(path) {
        let _ = f.set_modified(std::time::SystemTime::now());
    }
}

/// `rel` under `root`, when it is a plain relative path (no `..`, no root, no prefix).
pub fn inside(root: &Path, rel: &str) -> Option<PathBuf> {
    let p = Path::new(rel);
    if rel.is_empty() || !p.components().all(|c| matches!(c, Component::Normal(_))) {
        return None;
    }
    Some(root.join(p))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn published_paths_stay_inside_the_root() {
        let root = Path::new("/srv/httpboot");
        assert_eq!(
            inside(root, "redfish/boot-x.iso"),
            Some(PathBuf::from("/srv/httpboot/redfish/boot-x.iso"))
        );
        for bad in [
            "",
            "../etc/passwd",
            "redfish/../../x",
            "/etc/passwd",
            "./a/../b",
        ] {
            assert_eq!(inside(root, bad), None, "{bad}");
        }
    }

    #[tokio::test]
    async fn references_are_allowed_files_or_web_urls() {
        let allowed = std::env::temp_dir().join(format!("ironic-refs-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&allowed).unwrap();
        std::fs::write(allowed.join("kernel"), b"k").unwrap();
        let files = crate::local_files::LocalFiles::new(std::slice::from_ref(&allowed), &[]);
        let images = Images::new(&ironic_config::DeploySection::default(), files);
        for bad in ["glance-id", "ftp://h/k"] {
            let e = images.fetch(bad).await.unwrap_err();
            assert!(matches!(e, ImageError::Reference(_)), "{bad}: {e}");
        }
        let missing = format!("file://{}/missing", allowed.display());
        let e = images.fetch(&missing).await.unwrap_err();
        assert!(e.to_string().contains("missing"), "{e}");
        for bad in [
            "file://relative/k",
            "file:///etc/passwd",
            "file:///dev/zero",
        ] {
            let e = images.fetch(bad).await.unwrap_err();
            assert!(matches!(e, ImageError::File(_)), "{bad}: {e}");
        }
        let ok = format!("file://{}/kernel", allowed.display());
        assert_eq!(
            images.fetch(&ok).await.unwrap(),
            std::fs::canonicalize(allowed.join("kernel")).unwrap()
        );
        // Nothing allowed, nothing read.
        let none = Images::new(&ironic_config::DeploySection::default(), Default::default());
        assert!(matches!(
            none.fetch(&ok).await.unwrap_err(),
            ImageError::File(crate::local_files::FileRefError::Off)
        ));
        let _ = std::fs::remove_dir_all(&allowed);
    }
}
