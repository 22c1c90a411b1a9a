//! Which local files a `file://` image reference may name (`driver_info`
//! `deploy_kernel`, `deploy_ramdisk`, `deploy_iso`; `instance_info` `image_source`).
//! The conductor publishes what such a reference names on its image server, so a
//! reference is a request to serve a local file to the provisioning network: only
//! files inside the folders of `[conductor] file_url_allowed_paths` (none by default)
//! may be named, never anything under `/dev`, `/proc`, `/sys`, `/etc`, `/run` or
//! `/boot`, nor the service's own files (the database, the configuration, keys and
//! certificates, `http_root`, `image_cache`, `tftp_root`, the agents' logs), whatever
//! the folders allow.
//!
//! A reference is checked when a node's field is set (`nodes.rs`: a 400 for the
//! PATCH), when the node is validated, and again right before the file is read
//! (`images.rs` `fetch`), by its canonical path (symlinks resolved), which is then the
//! path read. Before the file system is touched the reference must already lie inside
//! an allowed folder as written, so a refusal says nothing of files elsewhere.
//!
//! Architecture invariant: `Images::fetch` is the only reader of `file://` references,
//! and it reads only what [`LocalFiles::check`] returned.

use std::path::{Component, Path, PathBuf};

/// Refused whatever `file_url_allowed_paths` says (upstream's list).
const SYSTEM_FOLDERS: &[&str] = &["/dev", "/proc", "/sys", "/etc", "/run", "/boot"];

/// Why a `file://` reference is refused.
#[derive(Debug, thiserror::Error)]
pub enum FileRefError {
    #[error("{0:?} is not a file:// reference to an absolute path without . or .. in it")]
    Malformed(String),
    #[error(
        "file:// image references are not allowed by this conductor (its [conductor] file_url_allowed_paths is empty): use an http(s):// URL"
    )]
    Off,
    #[error(
        "{} is outside the folders this conductor may read images from ([conductor] file_url_allowed_paths)",
        .0.display()
    )]
    NotAllowed(PathBuf),
    /// A system folder or the service's own file: the message does not say which.
    #[error("{} cannot be used as an image", .0.display())]
    Refused(PathBuf),
    #[error("{} is not a regular file", .0.display())]
    NotAFile(PathBuf),
    #[error("image {} cannot be read", .0.display())]
    Unreadable(PathBuf, #[source] std::io::Error),
}

impl FileRefError {
    /// The file is missing (and may appear later): the only refusal a field being set
    /// does not get.
    pub fn is_missing(&self) -> bool {
        matches!(self, FileRefError::Unreadable(_, e) if e.kind() == std::io::ErrorKind::NotFound)
    }
}

/// The rule for `file://` references (cheap to clone).
#[derive(Debug, Clone, Default)]
pub struct LocalFiles {
    /// Absolute folders, as configured.
    allowed: Vec<PathBuf>,
    /// The service's own files and folders, absolute, as configured.
    own: Vec<PathBuf>,
}

impl LocalFiles {
    /// Files in `allowed` may be read, except the system folders and `own`.
    /// Relative paths are taken from the current folder (the service's own state is
    /// named relatively in the all-in-one's defaults).
    pub fn new(allowed: &[PathBuf], own: &[PathBuf]) -> LocalFiles {
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
        let abs = |p: &PathBuf| {
            if p.is_absolute() {
                p.clone()
            } else {
                cwd.join(p)
            }
        };
        LocalFiles {
            allowed: allowed.iter().map(abs).collect(),
            own: own.iter().map(abs).collect(),
        }
    }

    /// The rule of a configuration: its allowed folders, and every file and folder of
    /// its own it names.
    pub fn from_config(cfg: &ironic_config::Config) -> LocalFiles {
        let mut own: Vec<PathBuf> = Vec::new();
        if let Some(db) = cfg.sqlite_file() {
            for suffix in ["", "-wal", "-shm", "-journal"] {
                let mut name = db.clone().into_os_string();
                name.push(suffix);
                own.push(name.into());
            }
        }
        own.extend(cfg.source.clone());
        own.extend(
            [
                &cfg.api.tls_cert_file,
                &cfg.api.tls_key_file,
                &cfg.api.http_basic_auth_user_file,
                &cfg.api.http_basic_roles_file,
                &cfg.amqp.tls_cacert_file,
                &cfg.amqp.signing_key_file,
                &cfg.amqp.accept_signing_key_file,
            ]
            .into_iter()
            .flatten()
            .cloned(),
        );
        own.extend(cfg.oneview.tls_cacert_file.as_ref().map(PathBuf::from));
        own.extend([
            cfg.deploy.http_root.clone(),
            cfg.deploy.image_cache.clone(),
            cfg.pxe.tftp_root.clone(),
            cfg.agent.deploy_logs_local_path.clone(),
        ]);
        let files = LocalFiles::new(&cfg.conductor.file_url_allowed_paths, &own);
        files.warn_about_overlaps();
        files
    }

    /// Whether any `file://` reference can be allowed.
    pub fn enabled(&self) -> bool {
        !self.allowed.is_empty()
    }

    /// Logs, at start, an allowed folder that holds the service's own files (they stay
    /// refused, but the operator likely meant a folder of images only).
    fn warn_about_overlaps(&self) {
        for a in &self.allowed {
            for o in self.own.iter().filter(|o| o.starts_with(a)) {
                tracing::warn!(
                    allowed = %a.display(),
                    own = %o.display(),
                    "[conductor] file_url_allowed_paths holds one of the service's own files or folders (it stays refused): allow a folder of images only"
                );
            }
        }
    }

    /// The canonical path of the regular file `reference` (`file:///…`) names, when
    /// the rule allows it: the path to read.
    pub fn check(&self, reference: &str) -> Result<PathBuf, FileRefError> {
        let malformed = || FileRefError::Malformed(reference.to_string());
        let path = Path::new(reference.strip_prefix("file://").ok_or_else(malformed)?);
        if !path.is_absolute()
            || path
                .components()
                .any(|c| matches!(c, Component::CurDir | Component::ParentDir))
        {
            return Err(malformed());
        }
        if !self.enabled() {
            return Err(FileRefError::Off);
        }
        // As written: nothing is looked at outside the allowed folders.
        if !self.allowed.iter().any(|a| path.starts_with(a)) {
            return Err(FileRefError::NotAllowed(path.to_path_buf()));
        }
        self.refuse_own(path, path)?;
        let real = std::fs::canonicalize(path)
            .map_err(|e| FileRefError::Unreadable(path.to_path_buf(), e))?;
        // As it is on disk: a symlink may lead anywhere.
        let allowed = self
            .allowed
            .iter()
            .any(|a| real.starts_with(a) || canonical(a).is_some_and(|a| real.starts_with(a)));
        if !allowed {
            tracing::warn!(reference = %path.display(), real = %real.display(), "a file:// reference leads out of [conductor] file_url_allowed_paths: refused");
            return Err(FileRefError::NotAllowed(path.to_path_buf()));
        }
        self.refuse_own(path, &real)?;
        let meta = std::fs::metadata(&real)
            .map_err(|e| FileRefError::Unreadable(path.to_path_buf(), e))?;
        if !meta.is_file() {
            return Err(FileRefError::NotAFile(path.to_path_buf()));
        }
        Ok(real)
    }

    /// [`Self::check`] for a field being set: a file not there yet is accepted (it is
    /// checked again when the node is validated and when it is read).
    pub fn check_setting(&self, reference: &str) -> Result<(), FileRefError> {
        match self.check(reference) {
            Err(e) if e.is_missing() => Ok(()),
            r => r.map(drop),
        }
    }

    /// Refuses `path` (shown as `shown`) when it is in a system folder or is (in) one
    /// of the service's own files.
    fn refuse_own(&self, shown: &Path, path: &Path) -> Result<(), FileRefError> {
        let system = SYSTEM_FOLDERS.iter().any(|s| path.starts_with(s));
        let own = self
            .own
            .iter()
            .find(|o| path.starts_with(o) || canonical(o).is_some_and(|o| path.starts_with(o)));
        if system || own.is_some() {
            tracing::warn!(
                reference = %shown.display(),
                real = %path.display(),
                reason = if system { "a system folder" } else { "the service's own file" },
                "a file:// reference was refused"
            );
            return Err(FileRefError::Refused(shown.to_path_buf()));
        }
        Ok(())
    }
}

/// `p` with symlinks resolved, when it exists.
fn canonical(p: &Path) -> Option<PathBuf> {
    std::fs::canonicalize(p).ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    struct Dir(PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn dir() -> Dir {
        let d = std::env::temp_dir().join(format!("ironic-files-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(d.join("images")).unwrap();
        Dir(d)
    }

    fn url(p: &Path) -> String {
        format!("file://{}", p.display())
    }

    #[test]
    fn nothing_is_allowed_by_default() {
        let f = LocalFiles::default();
        for r in ["file:///etc/passwd", "file:///srv/images/k"] {
            assert!(matches!(f.check(r), Err(FileRefError::Off)), "{r}");
        }
        assert!(matches!(
            f.check("file://relative/k"),
            Err(FileRefError::Malformed(_))
        ));
    }

    #[test]
    fn only_regular_files_inside_the_allowed_folders() {
        let d = dir();
        let images = d.0.join("images");
        let state = d.0.join("state");
        std::fs::create_dir_all(images.join("sub")).unwrap();
        std::fs::create_dir_all(&state).unwrap();
        std::fs::write(images.join("k"), b"kernel").unwrap();
        std::fs::write(images.join("sub/r"), b"ramdisk").unwrap();
        std::fs::write(state.join("ironic.sqlite"), b"db").unwrap();
        std::fs::write(d.0.join("outside"), b"x").unwrap();
        let db = state.join("ironic.sqlite");
        let f = LocalFiles::new(
            &[images.clone(), d.0.join("dev-link")],
            &[db.clone(), images.join("cache")],
        );
        assert_eq!(
            f.check(&url(&images.join("k"))).unwrap(),
            std::fs::canonicalize(images.join("k")).unwrap()
        );
        assert!(f.check(&url(&images.join("sub/r"))).is_ok());

        let refused = |r: &str| f.check(r).unwrap_err();
        // Outside, as written or once resolved.
        for r in [
            "file:///etc/passwd".to_string(),
            url(&d.0.join("outside")),
            url(&db),
            format!("file://{}/../outside", images.display()),
        ] {
            let e = refused(&r);
            assert!(
                matches!(e, FileRefError::NotAllowed(_) | FileRefError::Malformed(_)),
                "{r}: {e:?}"
            );
        }
        std::os::unix::fs::symlink("/etc/passwd", images.join("passwd")).unwrap();
        std::os::unix::fs::symlink(&db, images.join("db")).unwrap();
        std::os::unix::fs::symlink(&state, images.join("state")).unwrap();
        for r in ["passwd", "db", "state/ironic.sqlite"] {
            let e = refused(&url(&images.join(r)));
            assert!(matches!(e, FileRefError::NotAllowed(_)), "{r}: {e:?}");
        }
        // A folder, a device.
        assert!(matches!(
            refused(&url(&images.join("sub"))),
            FileRefError::NotAFile(_)
        ));
        std::os::unix::fs::symlink("/dev", d.0.join("dev-link")).unwrap();
        for r in ["zero", "null"] {
            let e = refused(&url(&d.0.join("dev-link").join(r)));
            assert!(matches!(e, FileRefError::Refused(_)), "{r}: {e:?}");
        }
        // The service's own files inside an allowed folder stay refused.
        std::fs::create_dir_all(images.join("cache")).unwrap();
        std::fs::write(images.join("cache/entry"), b"x").unwrap();
        assert!(matches!(
            refused(&url(&images.join("cache/entry"))),
            FileRefError::Refused(_)
        ));
        // Missing: refused when read, accepted when set (it may come later).
        let missing = url(&images.join("later"));
        assert!(refused(&missing).is_missing());
        assert!(f.check_setting(&missing).is_ok());
        assert!(f.check_setting("file:///etc/passwd").is_err());
        // A system folder, even when allowed.
        let etc = LocalFiles::new(&[PathBuf::from("/etc")], &[]);
        assert!(matches!(
            etc.check("file:///etc/hostname").unwrap_err(),
            FileRefError::Refused(_)
        ));
    }

    #[test]
    fn the_configuration_names_the_services_own_files() {
        let mut cfg = ironic_config::Config::default();
        cfg.conductor.file_url_allowed_paths = vec![PathBuf::from("/srv/images")];
        cfg.amqp.signing_key_file = Some(PathBuf::from("/srv/images/bus.key"));
        cfg.source = Some(PathBuf::from("/srv/ironic.toml"));
        let f = LocalFiles::from_config(&cfg);
        let cwd = std::env::current_dir().unwrap();
        for own in [
            cwd.join("data/ironic.sqlite"),
            cwd.join("data/ironic.sqlite-wal"),
            cwd.join("data/httpboot"),
            cwd.join("data/image-cache"),
            cwd.join("data/tftpboot"),
            cwd.join("data/deploy-logs"),
            PathBuf::from("/srv/images/bus.key"),
            PathBuf::from("/srv/ironic.toml"),
        ] {
            assert!(f.own.contains(&own), "{}", own.display());
        }
        assert!(matches!(
            f.check("file:///srv/images/bus.key").unwrap_err(),
            FileRefError::Refused(_)
        ));
    }
}
