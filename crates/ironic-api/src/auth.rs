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

/// Bcrypt hashes of a random password, by cost, checked against for unknown users
/// (each made once, on first use).
static DUMMY_HASHES: Mutex<Vec<(u32, String)>> = Mutex::new(Vec::new());

/// A hash for unknown users at `cost`: the cost of the file's own entries, so that an
/// unknown user takes as long as a known one with a wrong password (`htpasswd -B` uses
/// cost 5; a fixed cost of 10 made unknown names 32 times slower, which told them apart).
fn dummy_hash(cost: u32) -> String {
    let mut cache = DUMMY_HASHES.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, h)) = cache.iter().find(|(c, _)| *c == cost) {
        return h.clone();
    }
    let h = bcrypt::hash(uuid::Uuid::new_v4().to_string(), cost).unwrap_or_default();
    cache.push((cost, h.clone()));
    h
}

/// The cost of a bcrypt hash (`$2y$05$...` → 5); bcrypt's default when unreadable.
fn cost_of(hash: &str) -> u32 {
    hash.split('$')
        .nth(2)
        .and_then(|c| c.parse().ok())
        .filter(|c| (4..=31).contains(c))
        .unwrap_or(bcrypt::DEFAULT_COST)
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
    /// The highest cost among the entries: what an unknown user's check costs.
    dummy_cost: u32,
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
        let dummy_cost = users
            .values()
            .map(|h| cost_of(h))
            .max()
            .unwrap_or(bcrypt::DEFAULT_COST);
        *l = Loaded {
            mtime,
            users,
            verified: HashSet::new(),
            dummy_cost,
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
        let (hash, dummy_cost) = {
            let l = self.loaded.lock().map_err(|_| "htpasswd state poisoned")?;
            if l.verified.contains(&key) {
                return Ok(user.to_string());
            }
            (l.users.get(user).cloned(), l.dummy_cost)
        };
        // An unknown user costs a bcrypt check too, so timing does not tell users apart.
        let known = hash.is_some();
        let pw = password.to_string();
        let ok = tokio::task::spawn_blocking(move || {
            let hash = hash.unwrap_or_else(|| dummy_hash(dummy_cost));
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

#[cfg(test)]
mod tests {
    use super::*;

    /// An unknown user's check costs what a known user's does: the dummy hash has the
    /// cost of the file's entries.
    #[test]
    fn the_dummy_hash_costs_what_the_entries_cost() {
        assert_eq!(cost_of("$2y$05$abcdefghijklmnopqrstuu"), 5);
        assert_eq!(cost_of("$2b$12$abcdefghijklmnopqrstuu"), 12);
        assert_eq!(cost_of("garbage"), bcrypt::DEFAULT_COST);
        for cost in [4, 5] {
            let h = dummy_hash(cost);
            assert_eq!(cost_of(&h), cost, "{h}");
            assert_eq!(dummy_hash(cost), h, "made once per cost");
        }
        let dir = std::env::temp_dir().join(format!("htpasswd-{}", uuid::Uuid::new_v4()));
        std::fs::write(
            &dir,
            format!("a:{}\n", bcrypt::hash("pw", 5).unwrap_or_default()),
        )
        .unwrap_or_default();
        let h = Htpasswd::open(&dir).expect("readable");
        assert_eq!(h.loaded.lock().map(|l| l.dummy_cost).ok(), Some(5));
        let _ = std::fs::remove_file(&dir);
    }
}
