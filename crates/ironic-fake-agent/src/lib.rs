//! A simulated ironic-python-agent (IPA 13): an in-process fake that serves IPA's HTTP
//! command API and does IPA's lookup and heartbeats against an Ironic-compatible API.
//!
//! It exists for fast tests of the conductor's agent-driven flows (deploy, cleaning)
//! and their failures, and for deploy benchmarks with hundreds of agents in one
//! process. It is never proof of compatibility with the real agent: it reproduces the
//! shapes of IPA's answers and the timing of its loops, not its work (no disk is
//! touched, an image is never downloaded).
//!
//! What it does, as IPA does it:
//! - serves `GET /`, `GET /v1/status` and the token-guarded `/v1/commands/` routes
//!   (also without `/v1` and without the trailing slash): [`server`];
//! - runs IPA's extensions' commands, synchronous ones at once and asynchronous ones for
//!   [`AgentConfig::command_duration`], one at a time: [`commands`];
//! - looks itself up by MAC addresses, then heartbeats periodically, and once more
//!   when an asynchronous command ends: [`ironic`].
//!
//! What goes wrong is chosen through [`Faults`], at any time.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use ironic_fake_agent::{AgentConfig, FakeAgent};
//! let agent = FakeAgent::start(AgentConfig {
//!     api_url: "http://127.0.0.1:6385".into(),
//!     macs: vec!["52:54:00:12:34:56".into()],
//!     ..AgentConfig::default()
//! })
//! .await?;
//! agent.faults().fail_step("deploy.write_image", "disk on fire");
//! // … drive a deploy through the API, then:
//! agent.stop().await;
//! # Ok(()) }
//! ```

mod commands;
mod ironic;
mod logs;
mod server;

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

/// How long [`FakeAgent::stop`] waits for a loop to notice before aborting it. The
/// loops watch the stop signal in every wait, so this is only a safety net.
const STOP_LIMIT: Duration = Duration::from_secs(5);

/// What a fake agent is and how it behaves.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// The Ironic API's base URL, e.g. `http://127.0.0.1:6385` (only `http://`; a path
    /// after the host is kept as a prefix, as IPA's `ipa-api-url` allows).
    pub api_url: String,
    /// The MAC addresses the agent looks itself up by (`?addresses=a,b`): the node's
    /// ports' addresses.
    pub macs: Vec<String>,
    /// Where the command API listens; port 0 picks a free one.
    pub listen: SocketAddr,
    /// The agent's version: `agent_version` in heartbeats, `version` in `/v1/status`.
    pub version: String,
    /// A token known in advance (virtual media passes it on the kernel command line),
    /// used when the lookup answers `******` (the API already handed a token out) or
    /// no usable token.
    pub token: Option<String>,
    /// The time between periodic heartbeats. `None`: as IPA, the lookup's
    /// `config.heartbeat_timeout` × a random factor in 0.3..0.6, drawn anew each time.
    pub heartbeat_interval: Option<Duration>,
    /// How long an asynchronous command stays `RUNNING`.
    pub command_duration: Duration,
    /// The version of the generic hardware manager (`hardware_manager_version`); an
    /// `execute_*_step` whose `deploy_version`/`clean_version` differs ends
    /// `CLEAN_VERSION_MISMATCH`.
    pub hardware_manager_version: String,
    /// The least time between a heartbeat and the one forced by the end of an
    /// asynchronous command: IPA waits until 5 s have passed since the previous one.
    /// Zero (the default) lets tests see the forced heartbeat at once.
    pub forced_heartbeat_min_interval: Duration,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            api_url: "http://127.0.0.1:6385".to_string(),
            macs: Vec::new(),
            listen: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            version: "13.0.0".to_string(),
            token: None,
            heartbeat_interval: None,
            command_duration: Duration::from_millis(200),
            hardware_manager_version: "1.2".to_string(),
            forced_heartbeat_min_interval: Duration::ZERO,
        }
    }
}

/// Failures to simulate. Every knob can be turned at any time, also while a command
/// runs; it applies from the next request or the next end of a command.
pub struct Faults {
    /// Step (`<interface>.<step>`) or asynchronous command (`<extension>.<command>`)
    /// → the message it fails with.
    failing: Mutex<HashMap<String, String>>,
    busy: AtomicBool,
    /// Commands (`<extension>.<command>`) whose next POST answers busy.
    busy_once: Mutex<std::collections::HashSet<String>>,
    unreachable: AtomicBool,
    mismatch_once: AtomicBool,
    hang: watch::Sender<bool>,
    no_heartbeat_after_commands: AtomicBool,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            failing: Mutex::new(HashMap::new()),
            busy: AtomicBool::new(false),
            busy_once: Mutex::new(std::collections::HashSet::new()),
            unreachable: AtomicBool::new(false),
            mismatch_once: AtomicBool::new(false),
            hang: watch::Sender::new(false),
            no_heartbeat_after_commands: AtomicBool::new(false),
        }
    }
}

impl std::fmt::Debug for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Faults")
            .field("failing", &*lock(&self.failing))
            .field("busy", &self.busy.load(Ordering::SeqCst))
            .field("busy_once", &*lock(&self.busy_once))
            .field("unreachable", &self.unreachable.load(Ordering::SeqCst))
            .field("mismatch_once", &self.mismatch_once.load(Ordering::SeqCst))
            .field("hang", &*self.hang.borrow())
            .field(
                "no_heartbeat_after_commands",
                &self.no_heartbeat_after_commands.load(Ordering::SeqCst),
            )
            .finish()
    }
}

impl Faults {
    /// Makes a step end `FAILED` with `message` (`command_error` `{"type":
    /// "DeploymentError"|"CleaningError", "code": 500, "message": message, "details":
    /// message}`), every time it runs until [`Faults::clear_fail_step`]. `step` is
    /// `<interface>.<step>` (`deploy.write_image`, `deploy.erase_devices_metadata`,
    /// `raid.apply_configuration`), or an asynchronous command
    /// (`image.install_bootloader`, `standby.power_off`), which then fails with
    /// `CommandExecutionError`.
    pub fn fail_step(&self, step: &str, message: &str) {
        lock(&self.failing).insert(step.to_string(), message.to_string());
    }

    /// Lets `step` succeed again.
    pub fn clear_fail_step(&self, step: &str) {
        lock(&self.failing).remove(step);
    }

    /// Every command POST answers 409 "Agent is busy", as while a command runs.
    pub fn busy(&self, on: bool) {
        self.busy.store(on, Ordering::SeqCst);
    }

    /// The next POST of `command` (`<extension>.<command>`, e.g.
    /// `deploy.execute_deploy_step`) answers 409 "Agent is busy", once, as when another
    /// command was still running.
    pub fn busy_once(&self, command: &str) {
        lock(&self.busy_once).insert(command.to_string());
    }

    /// Whether a [`Faults::busy_once`] refusal of `command` is still to come.
    pub fn busy_once_pending(&self, command: &str) -> bool {
        lock(&self.busy_once).contains(command)
    }

    /// The server drops every connection without answering, and no heartbeat is sent:
    /// the machine is off the network. Off again, both resume.
    pub fn unreachable(&self, on: bool) {
        self.unreachable.store(on, Ordering::SeqCst);
    }

    /// The next `execute_deploy_step`/`execute_clean_step` ends
    /// `CLEAN_VERSION_MISMATCH` whatever version it was sent, as after an agent
    /// restarted with other hardware managers.
    pub fn mismatch_once(&self, on: bool) {
        self.mismatch_once.store(on, Ordering::SeqCst);
    }

    /// Asynchronous commands stay `RUNNING` (past their duration) until this is off.
    pub fn hang(&self, on: bool) {
        self.hang.send_replace(on);
    }

    /// No heartbeat is forced when an asynchronous command ends: only the periodic
    /// ones (and [`FakeAgent::heartbeat_now`]) tell the conductor.
    pub fn no_heartbeat_after_commands(&self, on: bool) {
        self.no_heartbeat_after_commands.store(on, Ordering::SeqCst);
    }

    /// The message `key` (a step or a command) is set to fail with.
    fn failure_of(&self, key: &str) -> Option<String> {
        lock(&self.failing).get(key).cloned()
    }

    /// Whether a POST of `command` is refused as busy now (a one-time refusal is
    /// used up).
    fn is_busy(&self, command: &str) -> bool {
        self.busy.load(Ordering::SeqCst) || lock(&self.busy_once).remove(command)
    }

    fn is_unreachable(&self) -> bool {
        self.unreachable.load(Ordering::SeqCst)
    }

    /// Whether the next step mismatches; turns the knob off.
    fn take_mismatch(&self) -> bool {
        self.mismatch_once.swap(false, Ordering::SeqCst)
    }

    fn forces_heartbeats(&self) -> bool {
        !self.no_heartbeat_after_commands.load(Ordering::SeqCst)
    }
}

/// A running fake agent. Clones are handles to the same agent; when the last handle
/// is dropped the agent stops as with [`FakeAgent::stop`] (without waiting).
#[derive(Clone)]
pub struct FakeAgent {
    inner: Arc<Inner>,
    _stop_on_drop: Arc<StopOnDrop>,
}

impl std::fmt::Debug for FakeAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeAgent")
            .field("url", &self.inner.url)
            .field("node", &self.node_uuid())
            .finish()
    }
}

impl FakeAgent {
    /// Binds the command API on [`AgentConfig::listen`] and starts the lookup and
    /// heartbeat loop. Fails if the address cannot be bound or the API URL is not a
    /// plain `http://` URL.
    pub async fn start(cfg: AgentConfig) -> std::io::Result<FakeAgent> {
        let api = ironic::Api::parse(&cfg.api_url)?;
        let listener = tokio::net::TcpListener::bind(cfg.listen).await?;
        let url = callback_url(listener.local_addr()?);
        let inner = Arc::new(Inner::new(cfg, url));
        let server = tokio::spawn(server::serve(inner.clone(), listener));
        let beats = tokio::spawn(ironic::run(inner.clone(), api));
        lock(&inner.tasks).extend([server, beats]);
        let stop_on_drop = Arc::new(StopOnDrop(inner.clone()));
        Ok(FakeAgent {
            inner,
            _stop_on_drop: stop_on_drop,
        })
    }

    /// `http://<ip>:<port>`: where the command API listens, and the `callback_url` of
    /// the heartbeats.
    pub fn url(&self) -> String {
        self.inner.url.clone()
    }

    /// The node's UUID, once the lookup found it.
    pub fn node_uuid(&self) -> Option<String> {
        self.inner.state().node_uuid.clone()
    }

    /// The token the command API accepts: the lookup's, else [`AgentConfig::token`].
    pub fn token(&self) -> Option<String> {
        self.inner.state().token.clone()
    }

    /// Every command the agent accepted, oldest first, as `{"name":
    /// "deploy.execute_deploy_step", "params": {…}}`. Commands refused before they ran
    /// (bad token, busy, unknown, malformed) are not in it.
    pub fn commands(&self) -> Vec<Value> {
        self.inner.state().received.clone()
    }

    /// How many heartbeats the API answered 202.
    pub fn heartbeats(&self) -> usize {
        self.inner.heartbeats.load(Ordering::SeqCst)
    }

    /// How many requests the agent sent the API (lookups and heartbeats, answered or
    /// not): its share of a deploy's API calls.
    pub fn api_calls(&self) -> usize {
        self.inner.api_calls.load(Ordering::SeqCst)
    }

    /// The fault knobs.
    pub fn faults(&self) -> &Faults {
        &self.inner.faults
    }

    /// Sends a heartbeat now (once the lookup is done), whatever the interval.
    pub fn heartbeat_now(&self) {
        self.inner.beat_now.store(true, Ordering::SeqCst);
        self.inner.beat_wake.notify_one();
    }

    /// Stops the server (its port is closed, connections are dropped), the heartbeat
    /// loop and every running command. Idempotent.
    pub async fn stop(&self) {
        self.inner.stop.send_replace(true);
        let tasks = std::mem::take(&mut *lock(&self.inner.tasks));
        for task in tasks {
            let abort = task.abort_handle();
            if tokio::time::timeout(STOP_LIMIT, task).await.is_err() {
                abort.abort();
            }
        }
    }
}

/// Signals stop when the last [`FakeAgent`] handle goes, so a test that panics does not
/// leave loops running (the loops hold [`Inner`], not this).
struct StopOnDrop(Arc<Inner>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.stop.send_replace(true);
    }
}

/// What the server, the commands and the heartbeat loop share.
struct Inner {
    cfg: AgentConfig,
    /// The callback URL.
    url: String,
    /// When the agent started, seconds since the epoch.
    started_at: f64,
    faults: Faults,
    state: Mutex<State>,
    /// Bumped whenever a command's state changes: what `wait=true` waits on.
    changed: watch::Sender<u64>,
    /// `true` once stopped.
    stop: watch::Sender<bool>,
    /// Wakes the heartbeat loop; the flags say why.
    beat_wake: Notify,
    /// A heartbeat was asked for ([`FakeAgent::heartbeat_now`]).
    beat_now: AtomicBool,
    /// An asynchronous command ended (IPA's `force_heartbeat`).
    beat_forced: AtomicBool,
    heartbeats: AtomicUsize,
    /// Requests sent to the API (lookups and heartbeats, answered or not).
    api_calls: AtomicUsize,
    /// The server and the heartbeat loop, awaited by [`FakeAgent::stop`].
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

/// What changes as the agent runs.
#[derive(Default)]
struct State {
    node_uuid: Option<String>,
    token: Option<String>,
    /// Whether the lookup allowed MD5 image checksums (`agent_md5_checksum_enable`).
    md5_enabled: bool,
    /// Every command result, oldest first (`GET /v1/commands/`).
    results: Vec<commands::Record>,
    /// Every command accepted, as [`FakeAgent::commands`] gives them.
    received: Vec<Value>,
    /// What `standby.get_partition_uuids` answers: `None` before an image was written.
    partition_uuids: Option<Value>,
    /// Powered off or rebooted into the instance: no more heartbeats.
    gone: bool,
    /// `system.lockdown` ran: the API answers nothing more and no heartbeat is sent.
    locked_down: bool,
}

impl Inner {
    fn new(cfg: AgentConfig, url: String) -> Inner {
        let started_at = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or_default();
        Inner {
            state: Mutex::new(State {
                token: cfg.token.clone(),
                ..State::default()
            }),
            cfg,
            url,
            started_at,
            faults: Faults::default(),
            changed: watch::Sender::new(0),
            stop: watch::Sender::new(false),
            beat_wake: Notify::new(),
            beat_now: AtomicBool::new(false),
            beat_forced: AtomicBool::new(false),
            heartbeats: AtomicUsize::new(0),
            api_calls: AtomicUsize::new(0),
            tasks: Mutex::new(Vec::new()),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Whether requests are dropped unanswered.
    fn dropping(&self) -> bool {
        self.faults.is_unreachable() || self.state().locked_down
    }

    /// Whether the machine would heartbeat now.
    fn may_heartbeat(&self) -> bool {
        let s = self.state();
        !(self.faults.is_unreachable() || s.gone || s.locked_down)
    }

    /// Resolves when the agent is stopped.
    async fn stopped(&self) {
        let mut rx = self.stop.subscribe();
        // An error means the sender is gone, which only happens once nothing runs.
        let _ = rx.wait_for(|s| *s).await;
    }

    /// Tells `wait=true` callers that a command changed.
    fn command_changed(&self) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// IPA's `force_heartbeat`: the heartbeat loop sends one soon.
    fn force_heartbeat(&self) {
        self.beat_forced.store(true, Ordering::SeqCst);
        self.beat_wake.notify_one();
    }

    /// `{"generic_hardware_manager": "<version>"}`: the versions the agent's steps
    /// are of.
    fn hardware_versions(&self) -> Value {
        serde_json::json!({"generic_hardware_manager": self.cfg.hardware_manager_version})
    }
}

/// The URL the agent can be reached at: an unspecified listen address is reached
/// through loopback.
fn callback_url(addr: SocketAddr) -> String {
    let ip = match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    format!("http://{}", SocketAddr::new(ip, addr.port()))
}

/// Locks `m`; a panic elsewhere while it was held leaves the data usable (every
/// update here is a single assignment or push).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A random number in `0.0..1.0`, from a v4 UUID's random bits (no RNG crate needed
/// for jitter).
fn random_unit() -> f64 {
    let bits = (uuid::Uuid::new_v4().as_u128() as u64) & ((1u64 << 53) - 1);
    bits as f64 / (1u64 << 53) as f64
}

/// `base` × a random factor in `lo..hi`.
fn jitter(base: Duration, lo: f64, hi: f64) -> Duration {
    base.mul_f64(lo + (hi - lo) * random_unit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unspecified_listen_address_is_called_back_on_loopback() {
        let v4 = SocketAddr::from((Ipv4Addr::UNSPECIFIED, 9999));
        assert_eq!(callback_url(v4), "http://127.0.0.1:9999");
        let v6 = SocketAddr::from((Ipv6Addr::UNSPECIFIED, 9999));
        assert_eq!(callback_url(v6), "http://[::1]:9999");
        let given = SocketAddr::from(([192, 0, 2, 5], 1234));
        assert_eq!(callback_url(given), "http://192.0.2.5:1234");
    }

    #[test]
    fn jitter_stays_within_its_bounds() {
        for _ in 0..1000 {
            let d = jitter(Duration::from_secs(100), 0.3, 0.6);
            assert!(d >= Duration::from_secs(30) && d <= Duration::from_secs(60));
        }
    }
}
