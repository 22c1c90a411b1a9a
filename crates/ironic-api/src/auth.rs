//! Authentication: `noauth` (standalone Ironic's default, for loopback) or `http_basic`
//! against an Apache-style htpasswd file with bcrypt entries. The file is re-read when
//! its modification time changes; verified credentials are remembered (as a SHA-256 of
//! user and password) until then, so bcrypt's cost is paid once per client.
//!
//! With `http_basic`, each user's project and roles come from a roles file
//! ([`RolesFile`], re-read on change too), which makes the [`Credentials`] that
//! [`crate::policy`] decides on. Failed logins are counted per (user name, client
//! address) pair and per client address ([`LoginLimiter`]): past either limit that
//! client gets 429 until the window ends, without a password check. Never per user name
//! alone: then anyone could lock `nova` or `admin` out for everyone with ten requests.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use crate::policy::{Credentials, Roles, UnknownRole};

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
    HttpBasic(Box<Basic>),
}

/// `http_basic`: who may log in, their projects and roles, and the failed-login limit.
pub struct Basic {
    pub users: Htpasswd,
    pub roles: RolesFile,
    pub limiter: LoginLimiter,
}

/// Why a request was not authenticated.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// 401, with the reason for the log.
    Unauthorized(String),
    /// 429: too many failed logins for this user or address; retry after this long.
    TooMany(Duration),
}

impl Basic {
    /// Authenticates an `Authorization` header value from `peer`.
    pub async fn authenticate(
        &self,
        header: Option<&str>,
        peer: Option<IpAddr>,
    ) -> Result<Credentials, Refusal> {
        let raw = header.ok_or("no credentials").and_then(basic_pair);
        let claimed = raw
            .as_ref()
            .ok()
            .and_then(|r| r.split_once(':'))
            .map(|(u, _)| u);
        if let Some(wait) = self.limiter.blocked(claimed, peer) {
            return Err(Refusal::TooMany(wait));
        }
        let raw = raw
            .as_deref()
            .map_err(|why| Refusal::Unauthorized((*why).into()))?;
        match self.users.check(raw).await {
            Ok(user) => Ok(self.roles.credentials(&user)),
            // Only a wrong password or an unknown user counts against the limit; a
            // malformed header costs no bcrypt check.
            Err(Failed::Credentials(why)) => {
                self.limiter.failed(claimed, peer);
                Err(Refusal::Unauthorized(why.into()))
            }
            Err(Failed::Unreadable(why)) => {
                Err(Refusal::Unauthorized(ironic_model::error::chain(&why)))
            }
        }
    }
}

/// `user:password` from a Basic `Authorization` value.
fn basic_pair(value: &str) -> Result<String, &'static str> {
    let b64 = value
        .strip_prefix("Basic ")
        .ok_or("not Basic credentials")?;
    let raw = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .map_err(|_| "malformed Basic credentials")?;
    let raw = String::from_utf8(raw).map_err(|_| "malformed Basic credentials")?;
    if raw.contains(':') {
        Ok(raw)
    } else {
        Err("malformed Basic credentials")
    }
}

/// Why [`Htpasswd::check`] refused.
pub enum Failed {
    /// An unknown user or a wrong password (counted against the failed-login limit).
    Credentials(&'static str),
    /// The file could not be read.
    Unreadable(AuthFileError),
}

/// Why the htpasswd or the roles file gave no users: at start, the reason the service
/// does not start; later, what the log says (the last good contents still apply).
#[derive(Debug, thiserror::Error)]
pub enum AuthFileError {
    #[error("cannot read {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("roles file {}", path.display())]
    Roles {
        path: PathBuf,
        #[source]
        source: RolesError,
    },
    /// A thread panicked holding the file's state (`"htpasswd"` or `"roles"`).
    #[error("{0} state poisoned")]
    Poisoned(&'static str),
}

/// What is wrong in the roles file's text.
#[derive(Debug, thiserror::Error)]
pub enum RolesError {
    #[error(transparent)]
    Syntax(#[from] toml::de::Error),
    #[error("user {user:?}")]
    Role {
        user: String,
        #[source]
        source: UnknownRole,
    },
    #[error("user {0:?}: project must not be empty")]
    EmptyProject(String),
}

/// One user's project and roles, as written in the roles file.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RoleEntry {
    /// The project the user acts in; absent: system scope.
    project: Option<String>,
    roles: Vec<String>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RolesDoc {
    #[serde(default)]
    users: HashMap<String, RoleEntry>,
}

/// The users' projects and roles (TOML):
///
/// ```toml
/// [users.admin]
/// roles = ["admin"]                 # no project: system scope
/// [users.alice]
/// project = "5f1d0e4c..."           # the project in nodes' owner/lessee
/// roles = ["member"]
/// ```
///
/// A user without an entry authenticates but has no role, so every policy denies it.
/// Re-read when the file changes; a file that no longer parses keeps the last good
/// contents (and says so in the log).
pub struct RolesFile {
    path: PathBuf,
    loaded: Mutex<(Option<SystemTime>, HashMap<String, Credentials>)>,
}

impl RolesFile {
    /// Reads the file, failing on a missing or malformed one.
    pub fn open(path: &Path) -> Result<RolesFile, AuthFileError> {
        let f = RolesFile {
            path: path.to_path_buf(),
            loaded: Mutex::new((None, HashMap::new())),
        };
        f.reload_if_changed()?;
        Ok(f)
    }

    fn parse(text: &str) -> Result<HashMap<String, Credentials>, RolesError> {
        let doc: RolesDoc = toml::from_str(text)?;
        let mut users = HashMap::new();
        for (user, e) in doc.users {
            let roles = match Roles::parse(e.roles.iter().map(String::as_str)) {
                Ok(r) => r,
                Err(source) => return Err(RolesError::Role { user, source }),
            };
            if e.project.as_deref().is_some_and(|p| p.trim().is_empty()) {
                return Err(RolesError::EmptyProject(user));
            }
            users.insert(
                user.clone(),
                Credentials {
                    user,
                    project: e.project,
                    roles,
                },
            );
        }
        Ok(users)
    }

    fn reload_if_changed(&self) -> Result<(), AuthFileError> {
        let unreadable = |source| AuthFileError::Read {
            path: self.path.clone(),
            source,
        };
        let mtime = std::fs::metadata(&self.path)
            .and_then(|m| m.modified())
            .map_err(unreadable)?;
        let mut l = self
            .loaded
            .lock()
            .map_err(|_| AuthFileError::Poisoned("roles"))?;
        if l.0 == Some(mtime) {
            return Ok(());
        }
        let text = std::fs::read_to_string(&self.path).map_err(unreadable)?;
        let users = Self::parse(&text).map_err(|source| AuthFileError::Roles {
            path: self.path.clone(),
            source,
        })?;
        tracing::info!(path = %self.path.display(), users = users.len(), "loaded roles file");
        *l = (Some(mtime), users);
        Ok(())
    }

    /// The credentials of an authenticated `user`.
    pub fn credentials(&self, user: &str) -> Credentials {
        if let Err(e) = self.reload_if_changed() {
            tracing::warn!(
                error = %ironic_model::error::chain(&e),
                "roles file not re-read; the last good contents apply"
            );
        }
        let found = self.loaded.lock().ok().and_then(|l| l.1.get(user).cloned());
        found.unwrap_or_else(|| {
            tracing::warn!(
                user,
                "authenticated user has no entry in the roles file: no role"
            );
            Credentials {
                user: user.to_string(),
                project: None,
                roles: Roles::default(),
            }
        })
    }
}

/// Failed logins in fixed windows, per (user name, client address) pair and per client
/// address: at `max` failures of a pair, or `max_per_address` of an address, within
/// `window`, further attempts of that pair (or from that address) are refused (429)
/// until the window ends. The same user from another address is not refused.
pub struct LoginLimiter {
    max: u32,
    max_per_address: u32,
    window: Duration,
    seen: Mutex<HashMap<Key, (Instant, u32)>>,
}

#[derive(Hash, PartialEq, Eq, Clone)]
enum Key {
    Pair(String, Option<IpAddr>),
    Addr(IpAddr),
}

/// Entries kept before expired ones are swept (bounds the memory an attacker can use).
const SWEEP_AT: usize = 4096;

impl LoginLimiter {
    /// `max` 0 turns the limits off; `max_per_address` 0 turns the address's off.
    pub fn new(max: u32, max_per_address: u32, window: Duration) -> LoginLimiter {
        LoginLimiter {
            max,
            max_per_address,
            window,
            seen: Mutex::new(HashMap::new()),
        }
    }

    /// The keys a login counts against, each with its limit.
    fn keys(&self, user: Option<&str>, peer: Option<IpAddr>) -> impl Iterator<Item = (Key, u32)> {
        // An IPv6 client by its /64 (`rate_key`).
        let peer = peer.map(crate::rate_key);
        let pair = user.map(|u| (Key::Pair(u.to_string(), peer), self.max));
        let addr = peer
            .filter(|_| self.max_per_address > 0)
            .map(|a| (Key::Addr(a), self.max_per_address));
        pair.into_iter().chain(addr)
    }

    /// How long this user from this address must wait, if the pair or the address is
    /// over its limit.
    pub fn blocked(&self, user: Option<&str>, peer: Option<IpAddr>) -> Option<Duration> {
        if self.max == 0 {
            return None;
        }
        let seen = self.seen.lock().ok()?;
        let now = Instant::now();
        self.keys(user, peer)
            .filter_map(|(k, max)| seen.get(&k).map(|e| (e, max)))
            .filter(|((start, n), max)| *n >= *max && now.duration_since(*start) < self.window)
            .map(|((start, _), _)| self.window.saturating_sub(now.duration_since(*start)))
            .max()
    }

    /// Counts a failed login.
    pub fn failed(&self, user: Option<&str>, peer: Option<IpAddr>) {
        if self.max == 0 {
            return;
        }
        let Ok(mut seen) = self.seen.lock() else {
            return;
        };
        let now = Instant::now();
        if seen.len() >= SWEEP_AT {
            let window = self.window;
            seen.retain(|_, (start, _)| now.duration_since(*start) < window);
        }
        for (k, max) in self.keys(user, peer) {
            let e = seen.entry(k).or_insert((now, 0));
            if now.duration_since(e.0) >= self.window {
                *e = (now, 0);
            }
            e.1 += 1;
            if e.1 == max {
                metrics::counter!("ironic_api_login_lockouts_total").increment(1);
                tracing::warn!(
                    target: "ironic::audit",
                    user = %ironic_model::secrets::log_safe(user.unwrap_or("")),
                    peer = ?peer,
                    "too many failed logins; refused until the window ends"
                );
            }
        }
    }
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
    pub fn open(path: &Path) -> Result<Htpasswd, AuthFileError> {
        let h = Htpasswd {
            path: path.to_path_buf(),
            loaded: Mutex::new(Loaded::default()),
        };
        h.reload_if_changed()?;
        Ok(h)
    }

    fn reload_if_changed(&self) -> Result<(), AuthFileError> {
        let unreadable = |source| AuthFileError::Read {
            path: self.path.clone(),
            source,
        };
        let meta = std::fs::metadata(&self.path).map_err(unreadable)?;
        let mtime = meta.modified().ok();
        let mut l = self
            .loaded
            .lock()
            .map_err(|_| AuthFileError::Poisoned("htpasswd"))?;
        if l.mtime.is_some() && l.mtime == mtime {
            return Ok(());
        }
        let text = std::fs::read_to_string(&self.path).map_err(unreadable)?;
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

    /// Checks `user:password` (a decoded Basic credential).
    pub async fn check(&self, raw: &str) -> Result<String, Failed> {
        let Some((user, password)) = raw.split_once(':') else {
            return Err(Failed::Credentials("malformed Basic credentials"));
        };
        self.reload_if_changed().map_err(Failed::Unreadable)?;
        let key: [u8; 32] = Sha256::digest(raw.as_bytes()).into();
        let (hash, dummy_cost) = {
            let l = self
                .loaded
                .lock()
                .map_err(|_| Failed::Unreadable(AuthFileError::Poisoned("htpasswd")))?;
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
            return Err(Failed::Credentials("unknown user"));
        }
        if !ok {
            return Err(Failed::Credentials("wrong password"));
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

    #[test]
    fn roles_file_gives_projects_and_roles() {
        let users = RolesFile::parse(
            "[users.admin]\nroles = [\"admin\"]\n[users.alice]\nproject = \"p1\"\nroles = [\"member\"]\n",
        )
        .expect("parses");
        assert_eq!(users["admin"].project, None);
        assert_eq!(
            users["admin"].roles,
            Roles::parse(["admin"]).expect("known")
        );
        assert_eq!(users["alice"].project.as_deref(), Some("p1"));
        for bad in [
            "[users.x]\nroles = [\"root\"]\n",
            "[users.x]\nproject = \"\"\nroles = []\n",
            "[users.x]\nrole = [\"admin\"]\n",
            "users = 1",
        ] {
            assert!(RolesFile::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn failed_logins_are_limited_per_user_and_address_pair_and_per_address() {
        let l = LoginLimiter::new(3, 5, Duration::from_secs(60));
        let a: IpAddr = "192.0.2.1".parse().expect("ip");
        let b: IpAddr = "192.0.2.2".parse().expect("ip");
        for _ in 0..2 {
            l.failed(Some("alice"), Some(a));
        }
        assert_eq!(l.blocked(Some("alice"), Some(a)), None);
        l.failed(Some("alice"), Some(a));
        assert!(
            l.blocked(Some("alice"), Some(a)).is_some(),
            "the pair is limited"
        );
        assert_eq!(
            l.blocked(Some("alice"), Some(b)),
            None,
            "the same user from elsewhere is not"
        );
        assert_eq!(l.blocked(Some("bob"), Some(a)), None, "nor the address yet");
        l.failed(Some("bob"), Some(a));
        l.failed(Some("carol"), Some(a));
        assert!(
            l.blocked(Some("dave"), Some(a)).is_some(),
            "five failures from one address limit the address"
        );
        assert_eq!(l.blocked(Some("alice"), Some(b)), None);
        let off = LoginLimiter::new(0, 0, Duration::from_secs(60));
        for _ in 0..10 {
            off.failed(Some("alice"), Some(a));
        }
        assert_eq!(off.blocked(Some("alice"), Some(a)), None);
        let short = LoginLimiter::new(1, 0, Duration::ZERO);
        short.failed(Some("alice"), None);
        assert_eq!(short.blocked(Some("alice"), None), None, "the window ended");
    }

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
