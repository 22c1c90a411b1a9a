//! Authentication: `noauth` (standalone Ironic's default, for loopback) or `http_basic`
//! against an Apache-style htpasswd file with bcrypt entries. The file is re-read when
//! its modification time changes; verified credentials are remembered (as a SHA-256 of
//! user and password) until then, so bcrypt's cost is paid once per client.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use base64::Engine;
use sha2::{Digest, Sha256};

/// A bcrypt hash checked against for unknown users (made once, on first use).
static DUMMY_HASH: std::sync::OnceLock<String> = std::sync::OnceLock::new();

fn dummy_hash() -> String {
    DUMMY_HASH
        .get_or_init(|| bcrypt::hash(uuid::Uuid::new_v4().to_string(), 10).unwrap_or_default())
        .clone()
}

pub enum Auth {
    NoAuth,
    HttpBasic(Htpasswd),
}

#[derive(Default)]
struct Loaded {
    mtime: Option<SystemTime>,
    users: HashMap<String, String>,
    verified: HashSet<[u8; 32]>,
}

pub struct Htpasswd {
    path: PathBuf,
    loaded: Mutex<Loaded>,
}

impl Htpasswd {
    /// Reads the file once to fail early on a missing file.
    pub fn open(path: &Path) -> Result<Htpasswd, String> {
        let h = Htpasswd {
            path: path.to_path_buf(),
            loaded: Mutex::new(Loaded::default()),
        };
        h.reload_if_changed()?;
        Ok(h)
    }

    fn reload_if_changed(&self) -> Result<(), String> {
        let meta = std::fs::metadata(&self.path)
            .map_err(|e| format!("cannot read {}: {e}", self.path.display()))?;
        let mtime = meta.modified().ok();
        let mut l = self
            .loaded
            .lock()
            .map_err(|_| "htpasswd state poisoned".to_string())?;
        if l.mtime.is_some() && l.mtime == mtime {
            return Ok(());
        }
        let text = std::fs::read_to_string(&self.path)
            .map_err(|e| format!("cannot read {}: {e}", self.path.display()))?;
        let mut users = HashMap::new();
        for line in text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
        {
            if let Some((u, h)) = line.split_once(':') {
                if h.starts_with("$2") {
                    users.insert(u.to_string(), h.to_string());
                } else {
                    tracing::warn!(user = u, "htpasswd entry is not bcrypt; ignored");
                }
            }
        }
        tracing::info!(path = %self.path.display(), users = users.len(), "loaded htpasswd file");
        *l = Loaded {
            mtime,
            users,
            verified: HashSet::new(),
        };
        Ok(())
    }

    /// Checks an `Authorization` header value. Err carries the reason for the log.
    pub async fn check(&self, header: Option<&str>) -> Result<String, String> {
        let value = header.ok_or("no credentials")?;
        let b64 = value
            .strip_prefix("Basic ")
            .ok_or("not Basic credentials")?;
        let raw = base64::engine::general_purpose::STANDARD
            .decode(b64.trim())
            .map_err(|_| "malformed Basic credentials")?;
        let raw = String::from_utf8(raw).map_err(|_| "malformed Basic credentials")?;
        let (user, password) = raw.split_once(':').ok_or("malformed Basic credentials")?;
        self.reload_if_changed()?;
        let key: [u8; 32] = Sha256::digest(raw.as_bytes()).into();
        let hash = {
            let l = self.loaded.lock().map_err(|_| "htpasswd state poisoned")?;
            if l.verified.contains(&key) {
                return Ok(user.to_string());
            }
            l.users.get(user).cloned()
        };
        // An unknown user costs a bcrypt check too, so timing does not tell users apart.
        let known = hash.is_some();
        let pw = password.to_string();
        let ok = tokio::task::spawn_blocking(move || {
            let hash = hash.unwrap_or_else(dummy_hash);
            bcrypt::verify(pw, &hash).unwrap_or(false)
        })
        .await
        .unwrap_or(false);
        if !known {
            return Err("unknown user".into());
        }
        if !ok {
            return Err("wrong password".into());
        }
        if let Ok(mut l) = self.loaded.lock() {
            l.verified.insert(key);
        }
        Ok(user.to_string())
    }
}
