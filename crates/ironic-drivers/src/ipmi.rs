//! The `ipmi` hardware type (`docs/drivers.md`): a node's BMC speaks IPMI over LAN at
//! `driver_info.ipmi_address`, driven through Debian's `ipmitool` (one process per
//! call). Power (waited for until the BMC shows the new state), boot device (once or
//! persistent), the boot mode the BMC reports, NMI, and a `ramdisk` deploy booted from
//! the network the operator provides (`pxe` boot sets the next boot to PXE).
//!
//! One `ipmitool` at a time per BMC, at least `[ipmi] min_command_interval` apart (BMCs
//! drop sessions when hammered), and a call that cannot reach the BMC is tried again
//! until `[ipmi] command_retry_timeout` (upstream's behaviour). Wrong credentials are
//! not retried: they are a validation error naming the BMC.
//!
//! The password goes to `ipmitool` in its environment (`-E`, `IPMI_PASSWORD`), which
//! only the service's user can read, never on its command line, where any local user
//! could read it.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use crate::HardwareType;
use crate::interfaces::{
    BiosInterface, BootDevice, BootInterface, DeployInterface, Driver, DriverError, DriverFuture,
    Interface, ManagementInterface, NodeChanges, NodeInfo, Outcome, PowerInterface, RaidInterface,
    driver_info_text,
};

pub use ironic_catalog::IPMI;

/// How the driver paces and bounds its calls (`[ipmi]`).
#[derive(Debug, Clone)]
pub struct Settings {
    /// How long a call is tried again while the BMC cannot be reached
    /// (`[ipmi] command_retry_timeout`).
    pub command_retry_timeout: Duration,
    /// The least time between two calls to one BMC (`[ipmi] min_command_interval`).
    pub min_command_interval: Duration,
    /// How long a power change may take to show (`[ipmi] power_state_change_timeout`).
    pub power_state_change_timeout: Duration,
    /// The `ipmitool` to run; `None`: the first on `PATH`.
    pub ipmitool: Option<PathBuf>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            command_retry_timeout: Duration::from_secs(60),
            min_command_interval: Duration::from_secs(5),
            power_state_change_timeout: Duration::from_secs(60),
            ipmitool: None,
        }
    }
}

/// One `ipmitool` process's limit (it is told to give up after one second per try,
/// so this only catches a hung process).
const ATTEMPT_LIMIT: Duration = Duration::from_secs(30);

/// The least pause before trying an unreachable or busy BMC again.
const RETRY_PAUSE: Duration = Duration::from_secs(1);

/// The longest power wait a caller may ask for (`timeout` of the power API).
const POWER_WAIT_LIMIT: u64 = 3600;

/// What a node's `driver_info` says about its BMC (`Debug` shows the password masked).
#[derive(Clone, PartialEq, Eq)]
pub struct IpmiInfo {
    pub address: String,
    pub port: u16,
    pub username: Option<String>,
    password: Option<String>,
    /// `lanplus` (IPMI 2.0, the default) or `lan` (1.5).
    interface: &'static str,
    priv_level: &'static str,
    cipher_suite: Option<u8>,
}

impl std::fmt::Debug for IpmiInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IpmiInfo")
            .field("address", &self.address)
            .field("port", &self.port)
            .field("username", &self.username)
            .field(
                "password",
                &self.password.as_ref().map(|_| ironic_model::secrets::MASK),
            )
            .field("interface", &self.interface)
            .field("priv_level", &self.priv_level)
            .field("cipher_suite", &self.cipher_suite)
            .finish()
    }
}

impl IpmiInfo {
    /// `address:port` as errors show it.
    fn bmc(&self) -> String {
        if self.address.contains(':') {
            format!("[{}]:{}", self.address, self.port)
        } else {
            format!("{}:{}", self.address, self.port)
        }
    }
}

/// A number given as a JSON number or a string of digits (the CLI sends strings).
fn number(di: &serde_json::Map<String, Value>, key: &str) -> Result<Option<u64>, DriverError> {
    let bad = || DriverError::invalid(format!("Invalid driver_info: {key} must be a number"));
    match di.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n.as_u64().map(Some).ok_or_else(bad),
        Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
        Some(Value::String(s)) => s.trim().parse().map(Some).map_err(|_| bad()),
        Some(_) => Err(bad()),
    }
}

/// A host name or IP address, nothing an `ipmitool` option parser could mistake for
/// an option or that could name more than one host.
fn valid_host(h: &str) -> bool {
    if h.parse::<std::net::IpAddr>().is_ok() {
        return true;
    }
    !h.is_empty()
        && h.len() <= 253
        && !h.starts_with(['-', '.'])
        && h.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
}

/// Reads and checks a node's `driver_info` (the messages name the field).
pub fn parse_info(node: NodeInfo<'_>) -> Result<IpmiInfo, DriverError> {
    let di = node.driver_info;
    let Some(address) = driver_info_text(di, "ipmi_address")? else {
        return Err(DriverError::invalid(
            "Missing the following IPMI credentials in node's driver_info: ipmi_address",
        ));
    };
    let address = address.trim();
    let address = address
        .strip_prefix('[')
        .and_then(|a| a.strip_suffix(']'))
        .unwrap_or(address);
    if !valid_host(address) {
        return Err(DriverError::invalid(format!(
            "Invalid ipmi_address {address:?}: a host name or an IP address"
        )));
    }
    let port = match number(di, "ipmi_port")? {
        None => 623,
        Some(p @ 1..=65535) => p as u16,
        Some(p) => {
            return Err(DriverError::invalid(format!(
                "Invalid ipmi_port {p}: 1 to 65535"
            )));
        }
    };
    match driver_info_text(di, "ipmi_bridging")? {
        None | Some("no") => {}
        Some(other) => {
            return Err(DriverError::invalid(format!(
                "Invalid ipmi_bridging {other:?}: bridging is not supported, only \"no\""
            )));
        }
    }
    let interface = match driver_info_text(di, "ipmi_protocol_version")? {
        None | Some("2.0") => "lanplus",
        Some("1.5") => "lan",
        Some(other) => {
            return Err(DriverError::invalid(format!(
                "Invalid ipmi_protocol_version {other:?}: 1.5 or 2.0"
            )));
        }
    };
    let priv_level = match driver_info_text(di, "ipmi_priv_level")? {
        None | Some("ADMINISTRATOR") => "ADMINISTRATOR",
        Some("OPERATOR") => "OPERATOR",
        Some("USER") => "USER",
        Some("CALLBACK") => "CALLBACK",
        Some(other) => {
            return Err(DriverError::invalid(format!(
                "Invalid ipmi_priv_level {other:?}: ADMINISTRATOR, OPERATOR, USER or CALLBACK"
            )));
        }
    };
    let cipher_suite = match number(di, "ipmi_cipher_suite")? {
        None => None,
        Some(c @ 0..=17) => Some(c as u8),
        Some(c) => {
            return Err(DriverError::invalid(format!(
                "Invalid ipmi_cipher_suite {c}: 0 to 17"
            )));
        }
    };
    Ok(IpmiInfo {
        address: address.to_string(),
        port,
        username: driver_info_text(di, "ipmi_username")?.map(str::to_owned),
        password: match di.get("ipmi_password") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => {
                return Err(DriverError::invalid(
                    "Invalid driver_info: ipmi_password must be a string",
                ));
            }
        },
        interface,
        priv_level,
        cipher_suite,
    })
}

/// The first `ipmitool` on `paths` (a `PATH` value).
fn locate(paths: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    std::env::split_paths(paths?)
        .map(|d| d.join("ipmitool"))
        .find(|p| p.is_file())
}

fn missing_tool(why: &str) -> DriverError {
    DriverError::invalid(format!(
        "ipmitool is not installed on this conductor ({why}): the ipmi hardware type needs \
         Debian's ipmitool package (apt-get install ipmitool)"
    ))
}

/// How one `ipmitool` run ended, when it did not succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Failure {
    /// The BMC refused the credentials: trying again cannot help.
    Auth(String),
    /// The BMC could not be reached or was busy: worth another try.
    Transient(String),
    /// The BMC answered and refused the command.
    Command(String),
}

/// What `ipmitool`'s (verbose) error output says about a failed run.
fn classify(stderr: &str) -> Failure {
    let lower = stderr.to_ascii_lowercase();
    let reason = reason(stderr);
    const AUTH: &[&str] = &[
        "rakp 2 hmac is invalid",
        "unauthorized name",
        "invalid user name",
        "rakp 2 message indicates an error",
        "invalid session privilege level",
        "activate session error",
    ];
    const TRANSIENT: &[&str] = &[
        "unable to establish",
        "get auth capabilities error",
        "no response",
        "insufficient resources",
        "timeout",
        "node busy",
        "out of space",
        "initialization in progress",
        "unable to connect",
        // The answer did not come within ipmitool's timeout (`-N`): the command may have
        // been carried out, and repeating a power or boot command is harmless. VirtualBMC
        // answers a power-off only once libvirt has stopped the machine.
        "request match not found",
        // ipmitool's words for a power command that got no answer at all (a refusal
        // reads "Set Chassis Power Control to … failed: <reason>").
        "unable to set chassis power control",
    ];
    if AUTH.iter().any(|a| lower.contains(a)) {
        Failure::Auth(reason)
    } else if TRANSIENT.iter().any(|t| lower.contains(t)) {
        Failure::Transient(reason)
    } else {
        Failure::Command(reason)
    }
}

/// The meaningful lines of `ipmitool`'s error output, without its chatter.
fn reason(stderr: &str) -> String {
    let lines: Vec<&str> = stderr
        .lines()
        .map(|l| l.trim_start_matches('>').trim())
        .filter(|l| {
            !l.is_empty()
                && !l.starts_with("Loading IANA")
                && !l.starts_with("Using best available cipher")
                && !l.starts_with("Running Get")
        })
        .collect();
    let mut seen: Vec<&str> = Vec::new();
    for l in lines {
        if !seen.contains(&l) {
            seen.push(l);
        }
    }
    let text = seen.join("; ");
    if text.is_empty() {
        "no error output".into()
    } else if text.len() > 400 {
        format!("{}…", &text[..text.floor_char_boundary(400)])
    } else {
        text
    }
}

/// The driver of one process's [`crate::Registry`]: its `[ipmi]` settings and, per
/// BMC, a lock that serialises calls and remembers when the last one ended.
pub struct Ipmi {
    iface: Iface,
}

/// One BMC's turn: held for the whole of a call; when its last `ipmitool` ended.
type BmcTurn = Arc<tokio::sync::Mutex<Option<Instant>>>;

struct Core {
    settings: Settings,
    bmcs: Mutex<HashMap<(String, u16), BmcTurn>>,
    /// Set on the first successful look-up of `ipmitool`.
    tool: Mutex<Option<PathBuf>>,
}

struct Iface(Arc<Core>);

impl Ipmi {
    pub fn new(settings: Settings) -> Ipmi {
        Ipmi {
            iface: Iface(Arc::new(Core {
                settings,
                bmcs: Mutex::new(HashMap::new()),
                tool: Mutex::new(None),
            })),
        }
    }
}

impl Core {
    /// `ipmitool`, or the validation error an operator can act on.
    fn ipmitool(&self) -> Result<PathBuf, DriverError> {
        if let Some(p) = &self.settings.ipmitool {
            return if p.is_file() {
                Ok(p.clone())
            } else {
                Err(missing_tool(&format!("{} does not exist", p.display())))
            };
        }
        let mut cached = self.tool.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = cached.as_ref() {
            return Ok(p.clone());
        }
        match locate(std::env::var_os("PATH").as_deref()) {
            Some(p) => {
                *cached = Some(p.clone());
                Ok(p)
            }
            None => Err(missing_tool("it is not on PATH")),
        }
    }

    fn bmc_lock(&self, info: &IpmiInfo) -> BmcTurn {
        let mut bmcs = self.bmcs.lock().unwrap_or_else(|p| p.into_inner());
        bmcs.entry((info.address.clone(), info.port))
            .or_default()
            .clone()
    }

    /// One `ipmitool` run.
    async fn once(&self, info: &IpmiInfo, args: &[&str]) -> Result<String, Failure> {
        let tool = self
            .ipmitool()
            .map_err(|e| Failure::Command(e.message.clone()))?;
        let mut cmd = tokio::process::Command::new(tool);
        cmd.args(["-I", info.interface, "-H", &info.address])
            .args(["-p", &info.port.to_string(), "-L", info.priv_level])
            .args(["-R", "1", "-N", "1", "-v"]);
        if let Some(c) = info.cipher_suite {
            cmd.args(["-C", &c.to_string()]);
        }
        if let Some(u) = &info.username {
            cmd.args(["-U", u]);
        }
        match info.password.as_deref() {
            // From the environment (`-E`): a process's environment is readable by its
            // own user only, its command line by everyone.
            Some(p) if !p.is_empty() => {
                cmd.arg("-E").env("IPMI_PASSWORD", p);
            }
            _ => {
                cmd.args(["-P", ""]);
            }
        }
        cmd.args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        let out = match tokio::time::timeout(ATTEMPT_LIMIT, cmd.output()).await {
            Err(_) => {
                return Err(Failure::Transient(format!(
                    "ipmitool took more than {ATTEMPT_LIMIT:?}"
                )));
            }
            Ok(Err(e)) => return Err(Failure::Command(format!("cannot run ipmitool: {e}"))),
            Ok(Ok(out)) => out,
        };
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(classify(&String::from_utf8_lossy(&out.stderr)))
        }
    }

    /// `ipmitool <args>` on the node's BMC: serialised per BMC, paced by
    /// `min_command_interval`, tried again while the BMC cannot be reached until
    /// `command_retry_timeout`. The errors name the BMC and the call, never the password.
    async fn run(&self, info: &IpmiInfo, args: &[&str]) -> Result<String, DriverError> {
        // Before queueing behind other calls: a missing tool is a clear error at once.
        self.ipmitool()?;
        let call = args.join(" ");
        let lock = self.bmc_lock(info);
        let started = Instant::now();
        let deadline = started + self.settings.command_retry_timeout;
        // Behind calls to a BMC that does not answer, each retried for the whole
        // timeout: give up rather than queue for ever.
        let Ok(mut last) = tokio::time::timeout_at(deadline, lock.lock()).await else {
            return Err(DriverError::failed(format!(
                "IPMI BMC {} is busy: other calls held it for {:?}; `{call}` not sent",
                info.bmc(),
                self.settings.command_retry_timeout
            )));
        };
        let mut attempts = 0u32;
        let mut pause = self.settings.min_command_interval;
        loop {
            if let Some(t) = *last {
                tokio::time::sleep_until(t + pause).await;
            }
            attempts += 1;
            let result = self.once(info, args).await;
            *last = Some(Instant::now());
            let failure = match result {
                Ok(out) => {
                    metrics::counter!("ironic_ipmi_commands_total", "outcome" => "ok").increment(1);
                    return Ok(out);
                }
                Err(f) => f,
            };
            let outcome = match &failure {
                Failure::Auth(_) => "auth",
                Failure::Transient(_) => "unreachable",
                Failure::Command(_) => "refused",
            };
            metrics::counter!("ironic_ipmi_commands_total", "outcome" => outcome).increment(1);
            match failure {
                Failure::Auth(r) => {
                    return Err(DriverError::invalid(format!(
                        "IPMI BMC {} refused the credentials in driver_info (ipmi_username, \
                         ipmi_password) for `{call}`: {r}",
                        info.bmc()
                    )));
                }
                Failure::Command(r) => {
                    return Err(DriverError::failed(format!(
                        "IPMI BMC {} failed `{call}`: {r}",
                        info.bmc()
                    )));
                }
                Failure::Transient(r) => {
                    // A BMC that fails fast (busy, out of sessions) is not hammered.
                    pause = pause.max(RETRY_PAUSE);
                    let next = Instant::now() + pause;
                    if next >= deadline {
                        return Err(DriverError::failed(format!(
                            "IPMI BMC {} did not answer `{call}` ({attempts} attempts in {:.0?}): {r}",
                            info.bmc(),
                            started.elapsed()
                        )));
                    }
                    tracing::debug!(bmc = %info.bmc(), call, reason = r, "IPMI call failed, trying again");
                }
            }
        }
    }

    async fn power_state(&self, info: &IpmiInfo) -> Result<&'static str, DriverError> {
        let out = self.run(info, &["power", "status"]).await?;
        parse_power(&out).ok_or_else(|| {
            DriverError::failed(format!(
                "IPMI BMC {} reports an unknown power state: {}",
                info.bmc(),
                out.trim()
            ))
        })
    }

    /// Waits until the BMC shows `target` (`power on` / `power off`).
    async fn wait_for(
        &self,
        node: NodeInfo<'_>,
        info: &IpmiInfo,
        target: &str,
        wait: Duration,
    ) -> Result<(), DriverError> {
        let deadline = Instant::now() + wait;
        // Bounded by the deadline; the BMC paces the reads (min_command_interval).
        loop {
            let now = self.power_state(info).await?;
            if now == target {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(DriverError::failed(format!(
                    "Node {} did not reach {target} within {wait:?}: the BMC at {} still reports {now}",
                    node.uuid,
                    info.bmc()
                )));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    async fn set_power(
        &self,
        node: NodeInfo<'_>,
        target: &str,
        timeout: Option<u32>,
    ) -> Result<String, DriverError> {
        let info = parse_info(node)?;
        let wait = timeout
            .map(|t| Duration::from_secs(u64::from(t).min(POWER_WAIT_LIMIT)))
            .unwrap_or(self.settings.power_state_change_timeout);
        let current = self.power_state(&info).await?;
        let fail = |e: DriverError| {
            let msg = format!(
                "Failed to set the power state of node {} to {target}: {e}",
                node.uuid
            );
            e.context(msg)
        };
        match target {
            "power on" | "power off" | "soft power off" => {
                let expect = if target == "power on" {
                    "power on"
                } else {
                    "power off"
                };
                if current == expect {
                    return Ok(expect.to_string());
                }
                let cmd = match target {
                    "power on" => "on",
                    "power off" => "off",
                    _ => "soft",
                };
                self.run(&info, &["power", cmd]).await.map_err(fail)?;
                self.wait_for(node, &info, expect, wait).await?;
                Ok(expect.to_string())
            }
            // A reboot is off then on, so that the boot device set for the next boot
            // is read (upstream's order); a node that is off is just powered on.
            "rebooting" | "soft rebooting" => {
                if current == "power on" {
                    let cmd = if target == "rebooting" { "off" } else { "soft" };
                    self.run(&info, &["power", cmd]).await.map_err(fail)?;
                    self.wait_for(node, &info, "power off", wait).await?;
                }
                self.run(&info, &["power", "on"]).await.map_err(fail)?;
                self.wait_for(node, &info, "power on", wait).await?;
                Ok("power on".to_string())
            }
            other => Err(DriverError::invalid(format!(
                "The ipmitool power interface cannot set {other:?}"
            ))),
        }
    }

    async fn boot_param(&self, node: NodeInfo<'_>) -> Result<BootParam, DriverError> {
        let info = parse_info(node)?;
        let out = self
            .run(&info, &["chassis", "bootparam", "get", "5"])
            .await?;
        Ok(parse_boot_param(&out))
    }

    async fn set_boot(&self, node: NodeInfo<'_>, device: &BootDevice) -> Result<(), DriverError> {
        let info = parse_info(node)?;
        let Some((_, arg)) = BOOT_DEVICES.iter().find(|(d, _)| *d == device.device) else {
            return Err(DriverError::invalid(format!(
                "Invalid boot device {} for the ipmitool management interface",
                device.device
            )));
        };
        let mut options = Vec::new();
        if device.persistent {
            options.push("persistent");
        }
        if node.boot_mode == Some("uefi") {
            options.push("efiboot");
        }
        let opts = format!("options={}", options.join(","));
        let mut args = vec!["chassis", "bootdev", arg];
        if !options.is_empty() {
            args.push(&opts);
        }
        self.run(&info, &args).await.map(|_| ())
    }
}

/// Ironic's boot devices and `ipmitool chassis bootdev`'s names for them.
const BOOT_DEVICES: &[(&str, &str)] = &[
    ("pxe", "pxe"),
    ("disk", "disk"),
    ("cdrom", "cdrom"),
    ("bios", "bios"),
    ("safe", "safe"),
];

/// `ipmitool power status` as Ironic's power state.
fn parse_power(out: &str) -> Option<&'static str> {
    let line = out
        .lines()
        .find(|l| l.contains("Chassis Power is"))?
        .to_ascii_lowercase();
    if line.trim_end().ends_with(" on") {
        Some("power on")
    } else if line.trim_end().ends_with(" off") {
        Some("power off")
    } else {
        None
    }
}

/// What `ipmitool chassis bootparam get 5` (the boot flags) says.
#[derive(Debug, Clone, PartialEq, Eq)]
struct BootParam {
    device: Option<&'static str>,
    persistent: bool,
    uefi: bool,
}

fn parse_boot_param(out: &str) -> BootParam {
    let selector = out
        .lines()
        .find_map(|l| {
            l.split_once("Boot Device Selector :")
                .map(|(_, s)| s.trim())
        })
        .unwrap_or("");
    let device = if selector.contains("Safe-Mode") {
        Some("safe")
    } else if selector.contains("PXE") {
        Some("pxe")
    } else if selector.contains("Hard-Drive") {
        Some("disk")
    } else if selector.contains("CD/DVD") {
        Some("cdrom")
    } else if selector.contains("BIOS Setup") {
        Some("bios")
    } else {
        None
    };
    BootParam {
        device,
        persistent: out.contains("Options apply to all future boots"),
        uefi: out.contains("BIOS EFI boot"),
    }
}

impl Interface for Iface {
    fn validate<'a>(&'a self, node: NodeInfo<'a>) -> DriverFuture<'a, ()> {
        Box::pin(async move {
            parse_info(node)?;
            self.0.ipmitool().map(|_| ())
        })
    }

    /// `deploy.deploy` of the `ramdisk` deploy interface: the node is restarted on the
    /// network boot that `prepare` asked for.
    fn execute_step<'a>(
        &'a self,
        node: NodeInfo<'a>,
        step: &'a crate::steps::Step,
    ) -> DriverFuture<'a, Outcome> {
        Box::pin(async move {
            match (step.interface.as_str(), step.step.as_str()) {
                ("deploy", "deploy") => {
                    self.0.set_power(node, "rebooting", None).await?;
                    Ok(Outcome::Done)
                }
                _ => Err(DriverError::invalid(format!(
                    "the ipmi driver has no step {}",
                    step.name()
                ))),
            }
        })
    }
}

impl PowerInterface for Iface {
    fn get_power_state<'a>(&'a self, node: NodeInfo<'a>) -> DriverFuture<'a, String> {
        Box::pin(async move {
            let info = parse_info(node)?;
            self.0.power_state(&info).await.map(str::to_owned)
        })
    }

    fn set_power_state<'a>(
        &'a self,
        node: NodeInfo<'a>,
        target: &'a str,
        timeout_secs: Option<u32>,
    ) -> DriverFuture<'a, String> {
        Box::pin(self.0.set_power(node, target, timeout_secs))
    }
}

impl ManagementInterface for Iface {
    fn supported_boot_devices(&self, _node: NodeInfo<'_>) -> Vec<&'static str> {
        BOOT_DEVICES.iter().map(|(d, _)| *d).collect()
    }

    fn get_boot_device<'a>(&'a self, node: NodeInfo<'a>) -> DriverFuture<'a, Option<BootDevice>> {
        Box::pin(async move {
            let p = self.0.boot_param(node).await?;
            Ok(p.device.map(|d| BootDevice {
                device: d.to_string(),
                persistent: p.persistent,
            }))
        })
    }

    fn set_boot_device<'a>(
        &'a self,
        node: NodeInfo<'a>,
        device: BootDevice,
    ) -> DriverFuture<'a, NodeChanges> {
        Box::pin(async move {
            self.0.set_boot(node, &device).await?;
            Ok(NodeChanges::none())
        })
    }

    /// What the BMC's boot flags say; changing it is not offered (the boot mode of a
    /// boot device follows the node's recorded `boot_mode`).
    fn get_boot_mode<'a>(&'a self, node: NodeInfo<'a>) -> DriverFuture<'a, Option<String>> {
        Box::pin(async move {
            let p = self.0.boot_param(node).await?;
            Ok(Some(if p.uefi { "uefi" } else { "bios" }.to_string()))
        })
    }

    fn can_inject_nmi(&self) -> bool {
        true
    }

    fn inject_nmi<'a>(&'a self, node: NodeInfo<'a>) -> DriverFuture<'a, ()> {
        Box::pin(async move {
            let info = parse_info(node)?;
            self.0.run(&info, &["power", "diag"]).await.map(|_| ())
        })
    }
}

/// `ramdisk` deploy with `pxe` boot: the next boot is set to the network (whose DHCP
/// and TFTP or HTTP boot the operator runs), `deploy.deploy` restarts the node, and
/// tear-down powers it off.
impl DeployInterface for Iface {
    fn prepare<'a>(&'a self, node: NodeInfo<'a>) -> DriverFuture<'a, NodeChanges> {
        Box::pin(async move {
            self.0
                .set_boot(
                    node,
                    &BootDevice {
                        device: "pxe".into(),
                        persistent: false,
                    },
                )
                .await?;
            Ok(NodeChanges::none())
        })
    }
    fn tear_down<'a>(&'a self, node: NodeInfo<'a>) -> DriverFuture<'a, NodeChanges> {
        Box::pin(async move {
            let state = self.0.set_power(node, "power off", None).await?;
            Ok(NodeChanges {
                power_state: Some(state),
                ..NodeChanges::none()
            })
        })
    }
}

impl BootInterface for Iface {}

impl RaidInterface for Iface {}
impl BiosInterface for Iface {}

impl Driver for Ipmi {
    fn hardware_type(&self) -> &'static HardwareType {
        &IPMI
    }
    fn power(&self) -> &dyn PowerInterface {
        &self.iface
    }
    fn management(&self) -> &dyn ManagementInterface {
        &self.iface
    }
    fn deploy(&self) -> &dyn DeployInterface {
        &self.iface
    }
    fn boot(&self) -> &dyn BootInterface {
        &self.iface
    }
    fn raid(&self) -> &dyn RaidInterface {
        &self.iface
    }
    fn bios(&self) -> &dyn BiosInterface {
        &self.iface
    }
    /// The `noop` network and storage interfaces have nothing to do here.
    fn other(&self, interface_type: &str) -> Option<&dyn Interface> {
        match interface_type {
            "network" | "storage" | "inspect" => Some(&self.iface),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ironic_model::node::JsonObject;

    fn info(di: Value) -> Result<IpmiInfo, DriverError> {
        let Value::Object(di) = di else {
            return Err(DriverError::invalid("not an object"));
        };
        let empty = JsonObject::new();
        parse_info(NodeInfo {
            uuid: "u",
            driver_info: &di,
            driver_internal_info: &empty,
            properties: &empty,
            instance_info: &empty,
            power_state: None,
            provision_state: "enroll",
            target_provision_state: None,
            instance_uuid: None,
            boot_mode: None,
            secure_boot: None,
            skip_automated_cleaning: false,
        })
    }

    fn err(di: Value) -> String {
        info(di).map(|_| ()).unwrap_err().message
    }

    /// `Debug` never shows the BMC password (a latent leak should anything log it).
    #[test]
    fn debug_masks_the_password() {
        let info = IpmiInfo {
            address: "192.0.2.1".into(),
            port: 623,
            username: Some("admin".into()),
            password: Some("hunter2".into()),
            interface: "lanplus",
            priv_level: "ADMINISTRATOR",
            cipher_suite: None,
        };
        let shown = format!("{info:?}");
        assert!(
            !shown.contains("hunter2") && shown.contains("******"),
            "{shown}"
        );
    }

    #[test]
    fn driver_info_is_checked_with_clear_messages() {
        let i = info(
            serde_json::json!({"ipmi_address": "10.0.0.5", "ipmi_port": "6230",
            "ipmi_username": "admin", "ipmi_password": "pw"}),
        )
        .unwrap();
        assert_eq!((i.address.as_str(), i.port), ("10.0.0.5", 6230));
        assert_eq!(i.interface, "lanplus");
        assert_eq!(i.bmc(), "10.0.0.5:6230");
        let i = info(serde_json::json!({"ipmi_address": "[fd00::5]"})).unwrap();
        assert_eq!((i.bmc().as_str(), i.port), ("[fd00::5]:623", 623));
        assert!(err(serde_json::json!({})).contains("ipmi_address"));
        for bad in ["-oProxyCommand=x", "a b", "host;rm", ".x"] {
            assert!(
                err(serde_json::json!({"ipmi_address": bad})).contains("Invalid ipmi_address"),
                "{bad}"
            );
        }
        assert!(
            err(serde_json::json!({"ipmi_address": "h", "ipmi_port": 70000}))
                .contains("1 to 65535")
        );
        assert!(
            err(serde_json::json!({"ipmi_address": "h", "ipmi_port": "x"})).contains("ipmi_port")
        );
        assert!(
            err(serde_json::json!({"ipmi_address": "h", "ipmi_bridging": "single"}))
                .contains("bridging is not supported")
        );
        assert!(
            err(serde_json::json!({"ipmi_address": "h", "ipmi_priv_level": "ROOT"}))
                .contains("ipmi_priv_level")
        );
        let i = info(
            serde_json::json!({"ipmi_address": "h", "ipmi_protocol_version": "1.5",
            "ipmi_bridging": "no", "ipmi_cipher_suite": 3}),
        )
        .unwrap();
        assert_eq!((i.interface, i.cipher_suite), ("lan", Some(3)));
    }

    #[test]
    fn ipmitool_output_is_read_as_upstream() {
        assert_eq!(parse_power("Chassis Power is on\n"), Some("power on"));
        assert_eq!(parse_power("Chassis Power is off"), Some("power off"));
        assert_eq!(parse_power("garbage"), None);
        let once_pxe = "Boot parameter version: 1\nBoot parameter 5 is valid/unlocked\n\
            Boot parameter data: 8004000000\n Boot Flags :\n   - Boot Flag Valid\n\
            \x20  - Options apply to only next boot\n   - BIOS PC Compatible (legacy) boot \n\
            \x20  - Boot Device Selector : Force PXE\n";
        assert_eq!(
            parse_boot_param(once_pxe),
            BootParam {
                device: Some("pxe"),
                persistent: false,
                uefi: false
            }
        );
        let disk = "   - Options apply to all future boots\n   - BIOS EFI boot \n\
            \x20  - Boot Device Selector : Force Boot from default Hard-Drive\n";
        assert_eq!(
            parse_boot_param(disk),
            BootParam {
                device: Some("disk"),
                persistent: true,
                uefi: true
            }
        );
        assert_eq!(
            parse_boot_param("   - Boot Device Selector : No override\n").device,
            None
        );
    }

    #[test]
    fn failures_are_told_apart() {
        let auth = "Loading IANA PEN Registry...\nUsing best available cipher suite 3\n\n\
            > RAKP 2 HMAC is invalid\nError: Unable to establish IPMI v2 / RMCP+ session\n";
        assert!(
            matches!(classify(auth), Failure::Auth(r) if r.contains("RAKP 2 HMAC") && !r.contains("IANA"))
        );
        let gone = "Loading IANA PEN Registry...\nGet Auth Capabilities error\n\
            Error issuing Get Channel Authentication Capabilities request\n\
            Error: Unable to establish IPMI v2 / RMCP+ session\n";
        assert!(matches!(classify(gone), Failure::Transient(_)));
        // VirtualBMC stopping a QEMU machine for longer than ipmitool waits.
        let late = "Discovered IPMB address 0x0
Unable to set Chassis Power Control to Down/Off
            IPMI Request Match NOT FOUND
";
        assert!(matches!(classify(late), Failure::Transient(_)));
        let unanswered = "Discovered IPMB address 0x0\nUnable to set Chassis Power Control to Down/Off\n\
            Close Session command failed\n";
        assert!(matches!(classify(unanswered), Failure::Transient(_)));
        let refused = "Set Chassis Power Control to Diag failed: Invalid data field in request\n";
        assert!(matches!(classify(refused), Failure::Command(r) if r.contains("Diag")));
        assert_eq!(reason("> a\n> a\nb\n"), "a; b");
    }

    #[test]
    fn a_missing_ipmitool_is_a_clear_validation_error() {
        assert_eq!(
            locate(Some(std::ffi::OsStr::new("/nonexistent:/also-not"))),
            None
        );
        let core = Core {
            settings: Settings {
                ipmitool: Some("/nonexistent/ipmitool".into()),
                ..Settings::default()
            },
            bmcs: Mutex::new(HashMap::new()),
            tool: Mutex::new(None),
        };
        let e = core.ipmitool().unwrap_err();
        assert_eq!(e.kind, crate::interfaces::DriverErrorKind::Invalid);
        assert!(
            e.message.contains("/nonexistent/ipmitool does not exist"),
            "{}",
            e.message
        );
        assert!(
            e.message.contains("apt-get install ipmitool"),
            "{}",
            e.message
        );
    }

    /// A stand-in for `ipmitool` that logs each run's start and end (with the password
    /// file's content) and answers from a script of outcomes, to observe the pacing,
    /// serialisation and retries of `run` (the real one is driven in
    /// `crates/ironic/tests/ipmi.rs`).
    fn scripted_tool(dir: &std::path::Path, outcomes: &[&str]) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let mut script = String::from("#!/bin/sh\nd=$(dirname \"$0\")\n");
        script.push_str(
            "n=$(cat \"$d/count\" 2>/dev/null || echo 0); echo $((n+1)) > \"$d/count\"\n",
        );
        script.push_str("echo \"args $*\" >> \"$d/args\"\n");
        script.push_str(
            "pw=''; for a in \"$@\"; do [ \"$a\" = -E ] && pw=\"$IPMI_PASSWORD\"; done\n",
        );
        script.push_str(
            "echo \"start $n $pw $(date +%s%N)\" >> \"$d/log\"; sleep 0.05; echo \"end $n $(date +%s%N)\" >> \"$d/log\"\n",
        );
        script.push_str("case $n in\n");
        for (i, o) in outcomes.iter().enumerate() {
            let body = match *o {
                "ok" => "echo 'Chassis Power is on'; exit 0",
                "gone" => "echo 'Get Auth Capabilities error' >&2; exit 1",
                "auth" => "echo '> RAKP 2 HMAC is invalid' >&2; exit 1",
                _ => "echo 'Invalid data field in request' >&2; exit 1",
            };
            script.push_str(&format!("  {i}) {body};;\n"));
        }
        script.push_str("  *) echo 'Chassis Power is on';;\nesac\n");
        let path = dir.join("ipmitool");
        std::fs::write(&path, script).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    fn scripted_core(dir: &std::path::Path, outcomes: &[&str], interval_ms: u64) -> Arc<Core> {
        Arc::new(Core {
            settings: Settings {
                ipmitool: Some(scripted_tool(dir, outcomes)),
                min_command_interval: Duration::from_millis(interval_ms),
                command_retry_timeout: Duration::from_secs(5),
                ..Settings::default()
            },
            bmcs: Mutex::new(HashMap::new()),
            tool: Mutex::new(None),
        })
    }

    fn temp_dir() -> PathBuf {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let d = std::env::temp_dir().join(format!(
            "ironic-ipmi-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn bmc_info() -> IpmiInfo {
        info(serde_json::json!({"ipmi_address": "127.0.0.1", "ipmi_password": "pw-1"})).unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn calls_to_one_bmc_never_overlap_and_are_paced() {
        let dir = temp_dir();
        let core = scripted_core(&dir, &[], 100);
        let info = bmc_info();
        let calls: Vec<_> = (0..4)
            .map(|_| {
                let (core, info) = (core.clone(), info.clone());
                tokio::spawn(async move { core.run(&info, &["power", "status"]).await })
            })
            .collect();
        for c in calls {
            assert_eq!(c.await.unwrap().unwrap().trim(), "Chassis Power is on");
        }
        let log = std::fs::read_to_string(dir.join("log")).unwrap();
        let lines: Vec<Vec<&str>> = log.lines().map(|l| l.split(' ').collect()).collect();
        assert_eq!(lines.len(), 8, "{log}");
        let mut previous_end: Option<u128> = None;
        for pair in lines.chunks(2) {
            // Each run ends before the next starts, at least the interval later, and
            // got the password from its environment.
            let (start, end) = (&pair[0], &pair[1]);
            assert_eq!(
                (start[0], start[2], end[0]),
                ("start", "pw-1", "end"),
                "{log}"
            );
            assert_eq!(start[1], end[1], "{log}");
            let (t0, t1): (u128, u128) = (start[3].parse().unwrap(), end[2].parse().unwrap());
            if let Some(e) = previous_end {
                assert!(
                    t0 >= e + 100_000_000,
                    "a run began {} ns after the last ended:\n{log}",
                    t0 - e.min(t0)
                );
            }
            previous_end = Some(t1);
        }
        // Never on the command line, where any local user could read it.
        let args = std::fs::read_to_string(dir.join("args")).unwrap();
        assert!(
            args.contains("-E ") && args.contains("power status"),
            "{args}"
        );
        assert!(!args.contains("pw-1"), "{args}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn an_unreachable_bmc_is_tried_again_but_wrong_credentials_are_not() {
        let dir = temp_dir();
        let core = scripted_core(&dir, &["gone", "gone", "ok"], 0);
        let out = core.run(&bmc_info(), &["power", "status"]).await.unwrap();
        assert_eq!(out.trim(), "Chassis Power is on");
        assert_eq!(
            std::fs::read_to_string(dir.join("count")).unwrap().trim(),
            "3"
        );
        std::fs::remove_dir_all(&dir).unwrap();

        let dir = temp_dir();
        let core = scripted_core(&dir, &["auth", "ok"], 0);
        let e = core
            .run(&bmc_info(), &["power", "status"])
            .await
            .unwrap_err();
        assert_eq!(e.kind, crate::interfaces::DriverErrorKind::Invalid);
        assert!(
            e.message.contains("refused the credentials"),
            "{}",
            e.message
        );
        assert!(!e.message.contains("pw-1"), "{}", e.message);
        assert_eq!(
            std::fs::read_to_string(dir.join("count")).unwrap().trim(),
            "1"
        );
        std::fs::remove_dir_all(&dir).unwrap();

        let dir = temp_dir();
        let core = Arc::new(Core {
            settings: Settings {
                command_retry_timeout: Duration::from_millis(300),
                ..scripted_core(&dir, &["gone"; 50], 50).settings.clone()
            },
            bmcs: Mutex::new(HashMap::new()),
            tool: Mutex::new(None),
        });
        let e = core.run(&bmc_info(), &["power", "on"]).await.unwrap_err();
        assert_eq!(e.kind, crate::interfaces::DriverErrorKind::Failed);
        assert!(
            e.message
                .contains("IPMI BMC 127.0.0.1:623 did not answer `power on`"),
            "{}",
            e.message
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
