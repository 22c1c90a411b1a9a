//! Instance images the conductor serves to the agent itself (`[agent]
//! image_download_source = local`, or a `file://` `image_source`): fetched (a
//! `file://` image read where it lies, an `http(s)://` one downloaded into `[deploy]
//! image_cache`), **verified** against the node's checksum, **converted** from qcow2 to
//! raw when `[deploy] force_raw_images` says so (`qemu-img`, the input format named, an
//! image with a backing or data file refused), then published by the caller on the
//! image server. The agent checks what it downloads against the checksum given here:
//! the node's, or the converted file's own sha256.
//!
//! The cache is bounded (`[deploy] image_cache_max_bytes`): after a download or a
//! conversion the least recently used entries go first. Published files are hard
//! links, so an evicted entry never breaks a deploy in progress. A verified checksum
//! is remembered for the file (path, size, modification time), so that many nodes
//! deploying one image hash it once.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use md5::Md5;
use sha2::{Digest, Sha256, Sha512};

use crate::images::{ImageError, Images};

/// A checksum's algorithm (the ones the agent accepts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algo {
    Md5,
    Sha256,
    Sha512,
}

impl Algo {
    pub fn name(self) -> &'static str {
        match self {
            Algo::Md5 => "md5",
            Algo::Sha256 => "sha256",
            Algo::Sha512 => "sha512",
        }
    }

    fn parse(name: &str) -> Option<Algo> {
        match name.to_ascii_lowercase().as_str() {
            "md5" => Some(Algo::Md5),
            "sha256" => Some(Algo::Sha256),
            "sha512" => Some(Algo::Sha512),
            _ => None,
        }
    }

    /// The algorithm a bare hex value of this length is (as the agent tells them).
    fn of_length(len: usize) -> Option<Algo> {
        match len {
            32 => Some(Algo::Md5),
            64 => Some(Algo::Sha256),
            128 => Some(Algo::Sha512),
            _ => None,
        }
    }
}

/// Why a checksum the node names (or a checksum file holds) cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChecksumError {
    #[error("the checksum {0:?} is not hexadecimal")]
    NotHex(String),
    #[error("unsupported checksum algorithm {0:?}: use md5, sha256 or sha512")]
    Algorithm(String),
    #[error("a checksum of {0} hex digits is none of md5, sha256 or sha512")]
    Length(usize),
    #[error("no checksum: set image_os_hash_algo and image_os_hash_value, or image_checksum")]
    Missing,
    #[error("it names no checksum for {0:?}")]
    NotInFile(String),
}

/// An image's checksum: its algorithm and lower-case hex value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checksum {
    pub algo: Algo,
    pub value: String,
}

impl Checksum {
    /// `value` (hex) with `algo`, or, without one, the algorithm its length says.
    pub fn new(algo: Option<&str>, value: &str) -> Result<Checksum, ChecksumError> {
        let value = value.trim().to_ascii_lowercase();
        if value.is_empty() || !value.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(ChecksumError::NotHex(value));
        }
        let algo = match algo {
            Some(a) => Algo::parse(a).ok_or_else(|| ChecksumError::Algorithm(a.to_string()))?,
            None => Algo::of_length(value.len()).ok_or(ChecksumError::Length(value.len()))?,
        };
        Ok(Checksum { algo, value })
    }
}

/// What the node says the image's checksum is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expected {
    Value(Checksum),
    /// The URL of a checksum file (`sha256sum`'s format, or one bare value).
    Url(String),
}

impl Expected {
    /// From `instance_info`: `image_os_hash_algo` and `image_os_hash_value`, else
    /// `image_checksum` (a value, or a URL).
    pub fn of(ii: &serde_json::Map<String, serde_json::Value>) -> Result<Expected, ChecksumError> {
        let text = |k: &str| {
            ii.get(k)
                .and_then(serde_json::Value::as_str)
                .filter(|s| !s.is_empty())
        };
        if let (Some(a), Some(v)) = (text("image_os_hash_algo"), text("image_os_hash_value")) {
            return Checksum::new(Some(a), v).map(Expected::Value);
        }
        match text("image_checksum") {
            Some(u) if u.starts_with("http://") || u.starts_with("https://") => {
                Ok(Expected::Url(u.to_string()))
            }
            Some(v) => Checksum::new(None, v).map(Expected::Value),
            None => Err(ChecksumError::Missing),
        }
    }
}

/// The image ready to publish, and what the agent checks it against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepared {
    pub path: PathBuf,
    pub checksum: Checksum,
    /// `raw` or `qcow2`, as read from the file.
    pub disk_format: &'static str,
}

/// Checksums already computed, by file version and algorithm.
#[derive(Default)]
pub(crate) struct Verified(Mutex<HashMap<(Version, Algo), String>>);

/// A version of a file: its path, inode and size, and, outside the cache, its
/// modification time. A cache entry is never written once renamed into place (a new
/// one is a new inode), and its modification time marks its last use, so it is left
/// out there.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Version(PathBuf, u64, u64, Option<std::time::SystemTime>);

/// Why an MD5 checksum is refused.
pub const MD5_REFUSED: &str =
    "MD5 checksums are not accepted ([agent] allow_md5_checksum is off): use sha256 or sha512";

/// qcow2's magic number.
const QCOW2_MAGIC: &[u8] = b"QFI\xfb";
/// The most a checksum file may have.
const CHECKSUM_FILE_MAX: u64 = 1 << 20;

impl Images {
    /// The instance image `source` for the agent (see the module's doc).
    /// MD5 is refused unless `allow_md5` (`[agent] allow_md5_checksum`).
    pub async fn instance_image(
        &self,
        source: &str,
        expected: &Expected,
        allow_md5: bool,
    ) -> Result<Prepared, ImageError> {
        let path = self.fetch(source).await?;
        let expected = match expected {
            Expected::Value(c) => c.clone(),
            Expected::Url(u) => self.checksum_from_url(u, source).await?,
        };
        if expected.algo == Algo::Md5 && !allow_md5 {
            return Err(ImageError::ChecksumFile {
                url: ironic_model::secrets::log_safe(source).to_string(),
                why: MD5_REFUSED.into(),
            });
        }
        let got = self.checksum_of(&path, expected.algo).await?;
        if got != expected.value {
            let image = ironic_model::secrets::log_safe(source).to_string();
            // For the operator only: a digest of a file is no business of the node's
            // readers.
            tracing::warn!(image, algo = expected.algo.name(), expected = %expected.value, got, "an image does not match its checksum");
            return Err(ImageError::Checksum {
                image,
                algo: expected.algo.name(),
                expected: expected.value,
            });
        }
        let qcow2 = starts_with(&path, QCOW2_MAGIC).await?;
        let d = self.deploy();
        if !(qcow2 && d.force_raw_images) {
            return Ok(Prepared {
                path,
                checksum: expected,
                disk_format: if qcow2 { "qcow2" } else { "raw" },
            });
        }
        // Keyed by the digest computed here, never by the one claimed: two images
        // that share a weak checksum never share a conversion.
        let source_sha = match expected.algo {
            Algo::Sha256 => expected.value.clone(),
            _ => self.checksum_of(&path, Algo::Sha256).await?,
        };
        let key = format!("{:x}", Sha256::digest(format!("raw:sha256:{source_sha}")));
        let raw = d.image_cache.join(format!("{key}.raw"));
        let making = self.making(&raw).await;
        if tokio::fs::metadata(&raw).await.is_err() {
            self.convert_to_raw(&path, &raw).await?;
            self.trim_cache(&raw).await;
        } else {
            crate::images::mark_used(&raw);
        }
        drop(making);
        let value = self.checksum_of(&raw, Algo::Sha256).await?;
        Ok(Prepared {
            path: raw,
            checksum: Checksum {
                algo: Algo::Sha256,
                value,
            },
            disk_format: "raw",
        })
    }

    /// The checksum of `path` with `algo`, hashed once per version of the file.
    async fn checksum_of(&self, path: &Path, algo: Algo) -> Result<String, ImageError> {
        let unreadable = |e| ImageError::Unreadable(path.to_path_buf(), e);
        let meta = tokio::fs::metadata(path).await.map_err(unreadable)?;
        let modified = match path.starts_with(&self.deploy().image_cache) {
            true => None,
            false => Some(meta.modified().map_err(unreadable)?),
        };
        use std::os::unix::fs::MetadataExt;
        let key = (
            Version(path.to_path_buf(), meta.ino(), meta.len(), modified),
            algo,
        );
        let verified = &self.verified().0;
        if let Some(v) = verified.lock().ok().and_then(|m| m.get(&key).cloned()) {
            return Ok(v);
        }
        let started = std::time::Instant::now();
        let file = path.to_path_buf();
        let value = tokio::task::spawn_blocking(move || hash_file(&file, algo))
            .await
            .map_err(|e| unreadable(std::io::Error::other(e)))?
            .map_err(unreadable)?;
        tracing::info!(path = %path.display(), algo = algo.name(), bytes = meta.len(), seconds = started.elapsed().as_secs_f64(), "image checksum computed");
        if let Ok(mut m) = verified.lock() {
            m.insert(key, value.clone());
        }
        Ok(value)
    }

    /// The checksum the file at `url` gives for `source`: the line naming the image's
    /// file, or the only value in it.
    async fn checksum_from_url(&self, url: &str, source: &str) -> Result<Checksum, ImageError> {
        let d = self.deploy();
        let bad = |why: String| ImageError::ChecksumFile {
            url: ironic_model::secrets::log_safe(url).to_string(),
            why,
        };
        tokio::fs::create_dir_all(&d.image_cache)
            .await
            .map_err(|e| bad(e.to_string()))?;
        let tmp = d
            .image_cache
            .join(format!(".checksum-{}", uuid::Uuid::new_v4().simple()));
        let got = self
            .http()
            .download(
                url,
                &tmp,
                CHECKSUM_FILE_MAX,
                std::time::Duration::from_secs(60),
            )
            .await;
        let text = match got {
            Ok(_) => tokio::fs::read_to_string(&tmp).await,
            Err(e) => return Err(bad(e.to_string())),
        };
        let _ = tokio::fs::remove_file(&tmp).await;
        let text = text.map_err(|e| bad(e.to_string()))?;
        let name = source
            .trim_end_matches('/')
            .rsplit('/')
            .next()
            .unwrap_or("");
        pick_checksum(&text, name).map_err(|e| bad(e.to_string()))
    }

    /// `qemu-img convert` of the qcow2 image `from` into `to` (whole or not at all),
    /// after `qemu-img info` showed it stands alone (no backing or data file: a
    /// crafted image could make the conversion read the conductor's own files).
    async fn convert_to_raw(&self, from: &Path, to: &Path) -> Result<(), ImageError> {
        let d = self.deploy();
        let failed = |why: String| ImageError::Convert {
            image: from.to_path_buf(),
            why,
        };
        let info = qemu_img(d, QEMU_IMG_INFO_CPU_SECONDS)
            .args(["info", "--output=json", "-f", "qcow2"])
            .arg(from)
            .output();
        let info = tokio::time::timeout(QEMU_IMG_INFO_LIMIT, info)
            .await
            .map_err(|_| {
                failed(format!(
                    "qemu-img info took more than {QEMU_IMG_INFO_LIMIT:?}"
                ))
            })?
            .map_err(|e| failed(format!("cannot run {}: {e}", d.qemu_img)))?;
        if !info.status.success() {
            return Err(failed(String::from_utf8_lossy(&info.stderr).trim().into()));
        }
        let info: serde_json::Value = serde_json::from_slice(&info.stdout)
            .map_err(|e| failed(format!("qemu-img info: {e}")))?;
        if info.get("backing-filename").is_some() || info.get("full-backing-filename").is_some() {
            return Err(failed(
                "it has a backing file; only stand-alone images are served".into(),
            ));
        }
        if info
            .pointer("/format-specific/data/data-file")
            .is_some_and(|v| !v.is_null())
        {
            return Err(failed(
                "it has an external data file; only stand-alone images are served".into(),
            ));
        }
        // What the raw image will take, checked before a byte is written: a small
        // compressed qcow2 can expand a thousandfold.
        let size = info
            .get("virtual-size")
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| failed("qemu-img info gives no virtual size".into()))?;
        if d.image_convert_max_bytes > 0 && size > d.image_convert_max_bytes {
            metrics::counter!("ironic_image_cache_refusals_total", "why" => "virtual_size")
                .increment(1);
            return Err(failed(format!(
                "its virtual size ({size} bytes) is over [deploy] image_convert_max_bytes ({})",
                d.image_convert_max_bytes
            )));
        }
        if size > self.room()? {
            return Err(self.no_room(format!(
                "the raw image of {} ({size} bytes)",
                from.display()
            )));
        }
        if let Some(dir) = to.parent() {
            tokio::fs::create_dir_all(dir)
                .await
                .map_err(|e| failed(e.to_string()))?;
        }
        let partial = to.with_extension(format!("partial-{}", uuid::Uuid::new_v4().simple()));
        let started = std::time::Instant::now();
        let out = qemu_img(d, d.image_convert_cpu_seconds)
            .args(["convert", "-f", "qcow2", "-O", "raw"])
            .arg(from)
            .arg(&partial)
            .output()
            .await
            .map_err(|e| failed(format!("cannot run {}: {e}", d.qemu_img)))?;
        if !out.status.success() {
            let _ = tokio::fs::remove_file(&partial).await;
            return Err(failed(String::from_utf8_lossy(&out.stderr).trim().into()));
        }
        tokio::fs::rename(&partial, to)
            .await
            .map_err(|e| failed(e.to_string()))?;
        tracing::info!(image = %from.display(), raw = %to.display(), seconds = started.elapsed().as_secs_f64(), "image converted to raw");
        Ok(())
    }

    /// Deletes the least recently used cache entries (downloads and conversions:
    /// names of 64 hex digits, `.raw` ones) until the cache is within `[deploy]
    /// image_cache_max_bytes`; `keep` stays.
    pub(crate) async fn trim_cache(&self, keep: &Path) {
        let d = self.deploy();
        let (dir, max, keep) = (
            d.image_cache.clone(),
            d.image_cache_max_bytes,
            keep.to_path_buf(),
        );
        let removed = tokio::task::spawn_blocking(move || trim(&dir, max, &keep)).await;
        if let Ok(removed) = removed {
            for (p, bytes) in removed {
                tracing::info!(path = %p.display(), bytes, "image cache entry evicted");
            }
        }
    }
}

/// CPU seconds `qemu-img info` may take (upstream's).
const QEMU_IMG_INFO_CPU_SECONDS: u64 = 30;
/// How long it may take in all.
const QEMU_IMG_INFO_LIMIT: std::time::Duration = std::time::Duration::from_secs(60);

/// `qemu-img` under `prlimit` (util-linux): at most `[deploy] qemu_img_max_memory_bytes`
/// of address space and `cpu_seconds` of CPU time (upstream runs it the same way: a
/// crafted image's header can make it allocate or loop without end). Killed when the
/// caller stops waiting.
fn qemu_img(d: &ironic_config::DeploySection, cpu_seconds: u64) -> tokio::process::Command {
    let mut c = tokio::process::Command::new("prlimit");
    c.arg(format!("--as={}", d.qemu_img_max_memory_bytes))
        .arg(format!("--cpu={}", cpu_seconds.max(1)))
        .arg("--")
        .arg(&d.qemu_img)
        .kill_on_drop(true);
    c
}

/// Whether the file at `path` starts with `magic`.
async fn starts_with(path: &Path, magic: &[u8]) -> Result<bool, ImageError> {
    use tokio::io::AsyncReadExt;
    let unreadable = |e| ImageError::Unreadable(path.to_path_buf(), e);
    let mut f = tokio::fs::File::open(path).await.map_err(unreadable)?;
    let mut head = vec![0u8; magic.len()];
    match f.read_exact(&mut head).await {
        Ok(_) => Ok(head == magic),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(false),
        Err(e) => Err(unreadable(e)),
    }
}

fn hash_file(path: &Path, algo: Algo) -> std::io::Result<String> {
    fn run<D: Digest>(mut f: std::fs::File) -> std::io::Result<String> {
        use std::io::Read;
        let mut h = D::new();
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = f.read(&mut buf)?;
            if n == 0 {
                break;
            }
            h.update(&buf[..n]);
        }
        Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
    }
    let f = std::fs::File::open(path)?;
    match algo {
        Algo::Md5 => run::<Md5>(f),
        Algo::Sha256 => run::<Sha256>(f),
        Algo::Sha512 => run::<Sha512>(f),
    }
}

/// The checksum for the file `name` in a checksum file: `<hex>  <name>` lines
/// (`sha256sum`'s, a `*` before binary names), or a single bare value.
fn pick_checksum(text: &str, name: &str) -> Result<Checksum, ChecksumError> {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    if let [only] = lines.as_slice()
        && !only.contains(char::is_whitespace)
    {
        return Checksum::new(None, only);
    }
    for l in &lines {
        let mut parts = l.split_whitespace();
        let (Some(value), Some(file)) = (parts.next(), parts.next()) else {
            continue;
        };
        let file = file.trim_start_matches('*');
        if file == name || file.rsplit('/').next() == Some(name) {
            return Checksum::new(None, value);
        }
    }
    Err(ChecksumError::NotInFile(name.to_string()))
}

/// Whether a cache file is an entry that may be evicted (downloads: 64 hex digits;
/// conversions: the same with `.raw`).
fn evictable(name: &str) -> bool {
    let stem = name.strip_suffix(".raw").unwrap_or(name);
    stem.len() == 64 && stem.bytes().all(|b| b.is_ascii_hexdigit())
}

fn trim(dir: &Path, max: u64, keep: &Path) -> Vec<(PathBuf, u64)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<(std::time::SystemTime, PathBuf, u64)> = Vec::new();
    // Files being written count towards the bound, but only entries are evicted.
    let mut writing = 0;
    for e in entries.filter_map(Result::ok) {
        let name = e.file_name().to_string_lossy().into_owned();
        let Ok(m) = e.metadata() else { continue };
        if crate::images::partial(&name) {
            writing += m.len();
        } else if evictable(&name)
            && let Ok(t) = m.modified()
        {
            files.push((t, e.path(), m.len()));
        }
    }
    let mut total: u64 = files.iter().map(|f| f.2).sum::<u64>() + writing;
    files.sort();
    let mut removed = Vec::new();
    for (_, path, bytes) in files {
        if total <= max {
            break;
        }
        if path == keep {
            continue;
        }
        if std::fs::remove_file(&path).is_ok() {
            total -= bytes;
            removed.push((path, bytes));
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("ironic-ii-{name}-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// Images of `cache` that may read files in the cache's parent folder.
    fn images(cache: &Path) -> Images {
        Images::new(
            &ironic_config::DeploySection {
                image_cache: cache.to_path_buf(),
                ..Default::default()
            },
            files(cache),
        )
    }

    fn files(cache: &Path) -> crate::local_files::LocalFiles {
        crate::local_files::LocalFiles::new(
            &[cache.parent().unwrap().to_path_buf()],
            &[cache.to_path_buf()],
        )
    }

    fn sha256(bytes: &[u8]) -> String {
        format!("{:x}", Sha256::digest(bytes))
    }

    #[test]
    fn checksums_come_from_the_instance_info() {
        let v = "a".repeat(64);
        let e = Expected::of(
            json!({"image_os_hash_algo": "SHA512", "image_os_hash_value": "AB", "image_checksum": v})
                .as_object()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(
            e,
            Expected::Value(Checksum {
                algo: Algo::Sha512,
                value: "ab".into()
            })
        );
        let e = Expected::of(json!({"image_checksum": v}).as_object().unwrap()).unwrap();
        assert_eq!(
            e,
            Expected::Value(Checksum {
                algo: Algo::Sha256,
                value: v.clone()
            })
        );
        let md5 = "b".repeat(32);
        let e = Expected::of(json!({"image_checksum": md5}).as_object().unwrap()).unwrap();
        assert!(matches!(
            e,
            Expected::Value(Checksum {
                algo: Algo::Md5,
                ..
            })
        ));
        let e = Expected::of(
            json!({"image_checksum": "https://x/SHA256SUMS"})
                .as_object()
                .unwrap(),
        );
        assert_eq!(e.unwrap(), Expected::Url("https://x/SHA256SUMS".into()));
        for bad in [
            json!({}),
            json!({"image_checksum": "abc"}),
            json!({"image_checksum": "zz".repeat(32)}),
            json!({"image_os_hash_algo": "crc32", "image_os_hash_value": "ab"}),
        ] {
            assert!(Expected::of(bad.as_object().unwrap()).is_err(), "{bad}");
        }
    }

    #[test]
    fn checksum_files_name_the_image() {
        let a = "a".repeat(64);
        let b = "b".repeat(64);
        let text = format!("# sums\n{a}  other.img\n{b} *disk.qcow2\n");
        assert_eq!(pick_checksum(&text, "disk.qcow2").unwrap().value, b);
        assert!(pick_checksum(&text, "missing.img").is_err());
        assert_eq!(pick_checksum(&format!("{a}\n"), "any").unwrap().value, a);
        assert_eq!(
            pick_checksum(&format!("{a}  ./dir/disk.raw\n"), "disk.raw")
                .unwrap()
                .value,
            a
        );
    }

    #[tokio::test]
    async fn a_raw_image_is_verified_and_served_as_it_is() {
        let d = dir("raw");
        let img = d.join("disk.raw");
        std::fs::write(&img, b"a raw disk").unwrap();
        let i = images(&d.join("cache"));
        let src = format!("file://{}", img.display());
        let ok = Expected::Value(Checksum::new(Some("sha256"), &sha256(b"a raw disk")).unwrap());
        let p = i.instance_image(&src, &ok, false).await.unwrap();
        assert_eq!((p.path.as_path(), p.disk_format), (img.as_path(), "raw"));
        let md5 = format!("{:x}", Md5::digest(b"a raw disk"));
        let md5 = Expected::Value(Checksum::new(None, &md5).unwrap());
        let e = i.instance_image(&src, &md5, false).await.unwrap_err();
        assert!(e.to_string().contains("allow_md5_checksum"), "{e}");
        let p = i.instance_image(&src, &md5, true).await.unwrap();
        assert_eq!(p.checksum.algo, Algo::Md5);
        let wrong = Expected::Value(Checksum::new(Some("sha256"), &"0".repeat(64)).unwrap());
        let e = i
            .instance_image(&src, &wrong, false)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("failed to verify against its sha256 checksum")
                && e.contains(&"0".repeat(64))
                && !e.contains(&sha256(b"a raw disk")),
            "the file's digest is not shown: {e}"
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    fn qemu_img(args: &[&str]) {
        let out = std::process::Command::new("qemu-img")
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[tokio::test]
    async fn a_qcow2_image_is_converted_to_raw_once() {
        let d = dir("qcow2");
        let raw = d.join("disk.raw");
        let mut bytes = vec![0u8; 1 << 20];
        bytes[..14].copy_from_slice(b"a qcow2's disk");
        std::fs::write(&raw, &bytes).unwrap();
        let q = d.join("disk.qcow2");
        qemu_img(&[
            "convert",
            "-f",
            "raw",
            "-O",
            "qcow2",
            raw.to_str().unwrap(),
            q.to_str().unwrap(),
        ]);
        let qsum = sha256(&std::fs::read(&q).unwrap());
        let i = images(&d.join("cache"));
        let src = format!("file://{}", q.display());
        let want = Expected::Value(Checksum::new(None, &qsum).unwrap());
        // Two deploys at once: one converts, the other waits for it.
        let (p, other) = tokio::join!(
            i.instance_image(&src, &want, false),
            i.instance_image(&src, &want, false)
        );
        let (p, other) = (p.unwrap(), other.unwrap());
        assert_eq!(other, p);
        assert_eq!(p.disk_format, "raw");
        assert!(p.path.starts_with(d.join("cache")), "{p:?}");
        assert_eq!(std::fs::read(&p.path).unwrap(), bytes);
        assert_eq!(p.checksum.value, sha256(&bytes));
        // Again, from the cache (its use marked): one raw file, hashed once.
        let again = i.instance_image(&src, &want, false).await.unwrap();
        assert_eq!(again, p);
        assert_eq!(
            i.verified().0.lock().unwrap().len(),
            2,
            "the qcow2 and the raw"
        );
        // Unless told not to convert.
        let kept = Images::new(
            &ironic_config::DeploySection {
                image_cache: d.join("cache"),
                force_raw_images: false,
                ..Default::default()
            },
            files(&d.join("cache")),
        );
        let p = kept.instance_image(&src, &want, false).await.unwrap();
        assert_eq!((p.path, p.disk_format), (q.clone(), "qcow2"));

        // An image over a backing file is refused.
        let over = d.join("over.qcow2");
        qemu_img(&[
            "create",
            "-f",
            "qcow2",
            "-b",
            raw.to_str().unwrap(),
            "-F",
            "raw",
            over.to_str().unwrap(),
        ]);
        let osum = sha256(&std::fs::read(&over).unwrap());
        let e = i
            .instance_image(
                &format!("file://{}", over.display()),
                &Expected::Value(Checksum::new(None, &osum).unwrap()),
                false,
            )
            .await
            .unwrap_err();
        assert!(e.to_string().contains("cannot convert"), "{e}");
        assert!(
            ironic_model::error::chain(&e).contains("backing file"),
            "{}",
            ironic_model::error::chain(&e)
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    /// A qcow2 whose raw form would not fit is refused before anything is written:
    /// over the free space (a 100 TiB sparse image), or over `image_convert_max_bytes`;
    /// and `qemu-img` runs under the configured limits (an address space too small for
    /// it to start fails the conversion).
    #[tokio::test]
    async fn a_qcow2_that_would_not_fit_is_refused_before_conversion() {
        let d = dir("bomb");
        let cache = d.join("cache");
        let deploy = |f: &dyn Fn(&mut ironic_config::DeploySection)| {
            let mut s = ironic_config::DeploySection {
                image_cache: cache.clone(),
                ..Default::default()
            };
            f(&mut s);
            Images::new(&s, files(&cache))
        };
        let check = |i: &Images, name: &str, size: &str| {
            let q = d.join(name);
            qemu_img(&["create", "-q", "-f", "qcow2", q.to_str().unwrap(), size]);
            let sum = sha256(&std::fs::read(&q).unwrap());
            let i = i.clone();
            async move {
                let e = i
                    .instance_image(
                        &format!("file://{}", q.display()),
                        &Expected::Value(Checksum::new(None, &sum).unwrap()),
                        false,
                    )
                    .await
                    .unwrap_err();
                ironic_model::error::chain(&e)
            }
        };
        let e = check(&deploy(&|_| {}), "huge.qcow2", "100T").await;
        assert!(e.contains("image_cache_reserved_bytes"), "{e}");
        let e = check(
            &deploy(&|s| s.image_convert_max_bytes = 1 << 20),
            "two.qcow2",
            "2M",
        )
        .await;
        assert!(e.contains("image_convert_max_bytes"), "{e}");
        let e = check(
            &deploy(&|s| s.qemu_img_max_memory_bytes = 1 << 20),
            "small.qcow2",
            "1M",
        )
        .await;
        assert!(e.contains("cannot convert"), "{e}");
        // Nothing was written in the cache.
        let left: Vec<_> = std::fs::read_dir(&cache)
            .map(|r| r.filter_map(Result::ok).map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "{left:?}");
        let _ = std::fs::remove_dir_all(&d);
    }

    /// Files being written count towards the cache's bound; those a dead process left
    /// are swept at start, those being written are not.
    #[tokio::test]
    async fn partial_files_count_and_orphans_are_swept() {
        let d = dir("partials");
        let name = |c: char| "0".repeat(63) + &c.to_string();
        std::fs::write(d.join(name('1')), vec![0u8; 100]).unwrap();
        std::fs::write(d.join(format!(".{}.abc", name('2'))), vec![0u8; 150]).unwrap();
        let removed = trim(&d, 200, &d);
        assert_eq!(removed, vec![(d.join(name('1')), 100)]);
        // Sweeping: an old partial goes, a fresh one stays.
        let old = d.join("x.raw.partial-1");
        std::fs::write(&old, b"x").unwrap();
        std::fs::File::options()
            .append(true)
            .open(&old)
            .unwrap()
            .set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(3600))
            .unwrap();
        let i = images(&d);
        i.sweep(None).await;
        assert!(!old.exists());
        assert!(d.join(format!(".{}.abc", name('2'))).exists());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn the_cache_forgets_the_least_recently_used_first() {
        let d = dir("trim");
        let name = |c: char| "0".repeat(63) + &c.to_string();
        let t0 = std::time::SystemTime::now() - std::time::Duration::from_secs(100);
        for (i, c) in ['1', '2', '3'].iter().enumerate() {
            let p = d.join(name(*c));
            std::fs::write(&p, vec![0u8; 100]).unwrap();
            let f = std::fs::File::options().append(true).open(&p).unwrap();
            f.set_modified(t0 + std::time::Duration::from_secs(i as u64 * 10))
                .unwrap();
        }
        std::fs::write(d.join("esp-grub-x86_64.img"), vec![0u8; 1000]).unwrap();
        // The oldest is the one being kept: the next oldest goes instead.
        let removed = trim(&d, 200, &d.join(name('1')));
        assert_eq!(removed, vec![(d.join(name('2')), 100)]);
        assert!(d.join("esp-grub-x86_64.img").exists());
        assert!(trim(&d, 200, &d).is_empty());
        let _ = std::fs::remove_dir_all(&d);
    }
}
