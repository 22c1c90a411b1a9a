//! Configuration shared by every binary: built-in defaults < one TOML file (`--config`)
//! < `IRONIC_<SECTION>__<KEY>` environment variables < command-line flags. Every option,
//! its default and its meaning are listed in `docs/operations.md`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read configuration file {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[derive(Default)]
pub struct Config {
    pub default: DefaultSection,
    pub api: ApiSection,
    pub database: DatabaseSection,
    pub conductor: ConductorSection,
    pub amqp: AmqpSection,
    pub log: LogSection,
    pub telemetry: TelemetrySection,
    pub oneview: OneViewSection,
    pub redfish: RedfishSection,
    pub ipmi: IpmiSection,
    pub inspector: InspectorSection,
    pub inspection_rules: InspectionRulesSection,
    pub agent: AgentSection,
    pub deploy: DeploySection,
    pub pxe: PxeSection,
    /// The file the configuration was read from (set by [`Config::load`]): the
    /// conductor never reads it as an image.
    #[serde(skip)]
    pub source: Option<PathBuf>,
}

/// Network boot of the ramdisk (upstream's `[pxe]`): the `pxe` boot interface writes
/// PXELINUX configurations and copies the kernel and ramdisk under `tftp_root`, which
/// the operator's TFTP server serves; `ipxe` writes iPXE scripts under `[deploy]
/// http_root`, which the image server serves. DHCP stays the operator's.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PxeSection {
    /// The folder the operator's TFTP server serves.
    pub tftp_root: PathBuf,
    /// Kernel parameters of the network-booted ramdisk, after those the agent needs.
    pub kernel_append_params: String,
}

impl Default for PxeSection {
    fn default() -> Self {
        PxeSection {
            tftp_root: PathBuf::from("data/tftpboot"),
            kernel_append_params: "nofb vga=normal".into(),
        }
    }
}

/// How the ramdisk reaches a machine (upstream's `[deploy]` and the ISO tools of its
/// `[DEFAULT]`): the image server's folder and addresses, the API address the agent
/// calls, fast-track, and the tools a boot ISO is built with.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DeploySection {
    /// The folder the image server publishes (boot ISOs under `redfish/`).
    pub http_root: PathBuf,
    /// Where the conductor serves `http_root` itself (read-only); empty when another
    /// web server does. Default: a free port on loopback.
    #[serde(deserialize_with = "optional_addr")]
    pub http_listen: Option<SocketAddr>,
    /// The base URL of `http_root` as the agent sees it. Default: `http://<http_listen>`.
    pub http_url: Option<String>,
    /// The base URL of `http_root` as a BMC sees it (virtual media), when it differs
    /// from `http_url` (upstream's).
    pub external_http_url: Option<String>,
    /// The API's URL as the agent calls it (`ipa-api-url`). Default: `[api]
    /// public_endpoint`, else the all-in-one's own API address.
    pub external_callback_url: Option<String>,
    /// Upstream's fast-track (also per node: `driver_info.fast_track`): a successful
    /// inspection leaves the ramdisk running, and it may look up and heartbeat while its
    /// node rests, so that the next operation can reuse it: cleaning and the `direct`
    /// deploy skip the ramdisk's boot when its agent heartbeated within
    /// `fast_track_timeout`, and a successful cleaning leaves it running.
    pub fast_track: bool,
    /// Seconds since the agent's last heartbeat within which fast-track trusts it to
    /// be running (upstream's, default and most 300: more than the agent's heartbeat
    /// interval, which is 30-60% of `[api] ramdisk_heartbeat_timeout`).
    pub fast_track_timeout: u64,
    /// Downloaded deploy kernels and ramdisks (`http(s)://` references) are kept here.
    pub image_cache: PathBuf,
    /// The most bytes one downloaded kernel, ramdisk or instance image may have.
    pub image_download_max_bytes: u64,
    /// The most bytes `image_cache` holds of downloaded and converted images; the
    /// least recently used go first (upstream's `[pxe] image_cache_size`, 20 GiB).
    pub image_cache_max_bytes: u64,
    /// Instance images the conductor serves to the agent (`[agent]
    /// image_download_source = local`, or a `file://` source) are converted from
    /// qcow2 to raw first (upstream's `[DEFAULT] force_raw_images`).
    pub force_raw_images: bool,
    /// `qemu-img`, which checks and converts qcow2 images (under `prlimit`: an address
    /// space of `qemu_img_max_memory_bytes`, CPU time of 30 s to read an image's header
    /// and `image_convert_cpu_seconds` to convert it).
    pub qemu_img: String,
    /// The address space `qemu-img` may use (upstream's 1 GiB).
    pub qemu_img_max_memory_bytes: u64,
    /// The CPU seconds one conversion may take.
    pub image_convert_cpu_seconds: u64,
    /// The largest virtual size of an image the conductor converts to raw; 0: no limit
    /// but the free space (an image is converted only if its virtual size fits in the
    /// free space of `image_cache`'s filesystem, less `image_cache_reserved_bytes`).
    pub image_convert_max_bytes: u64,
    /// Free space never taken by downloads and conversions on `image_cache`'s file
    /// system (which, by default, holds the SQLite database too): one that would
    /// leave less is refused before it starts.
    pub image_cache_reserved_bytes: u64,
    /// `xorriso`, which builds boot ISOs.
    pub xorriso: String,
    /// syslinux's BIOS boot loader for ISOs (Debian's `isolinux` package).
    pub isolinux_bin: PathBuf,
    /// Its library (Debian's `syslinux-common`).
    pub ldlinux_c32: PathBuf,
    /// The most connections the image server serves at once (requests and open
    /// connections alike: a slow reader holds its connection as long as it reads);
    /// more are closed at once.
    pub http_max_connections: usize,
    /// Seconds one connection to the image server may stay open (an ISO or an image
    /// read by a slow client): closed past it.
    pub http_connection_lifetime: u64,
    /// An EFI system partition image for the UEFI side of boot ISOs (upstream's
    /// `[DEFAULT] esp_image`). Default: one the conductor makes once under `image_cache`
    /// from Debian's `grub-efi-amd64-bin`; without either, ISOs boot by BIOS only.
    pub esp_image: Option<PathBuf>,
    /// The priority of the agent's `erase_devices` clean step (a full erase of every
    /// disk: hours on real disks); `None` keeps the agent's (10), 0 leaves it out of
    /// automated cleaning (upstream's option; devstack sets 0).
    pub erase_devices_priority: Option<u32>,
    /// The priority of the agent's `erase_devices_metadata` clean step (partition
    /// tables and signatures); `None` keeps the agent's (99).
    pub erase_devices_metadata_priority: Option<u32>,
    /// The largest config drive image, in bytes once unpacked: the agent writes at most
    /// 64 MiB (ironic-python-agent's `MAX_CONFIG_DRIVE_SIZE_MB`). The API refuses a
    /// base64 `configdrive` whose decoded size is over it; the conductor refuses a drive
    /// it builds, or one given inline that unpacks, over it. Upstream has no such option
    /// (only `[api] max_json_body_size_provision` on the whole body).
    pub configdrive_max_bytes: u64,
}

impl Default for DeploySection {
    fn default() -> Self {
        DeploySection {
            http_root: PathBuf::from("data/httpboot"),
            // A free loopback port: conductors side by side on one host never collide,
            // and the URLs follow from the port bound. Real BMCs need an address they
            // can reach: set it (docs/deploy.md).
            http_listen: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
            http_url: None,
            external_http_url: None,
            external_callback_url: None,
            fast_track: false,
            fast_track_timeout: 300,
            image_cache: PathBuf::from("data/image-cache"),
            image_download_max_bytes: 4 << 30,
            image_cache_max_bytes: 20 << 30,
            force_raw_images: true,
            qemu_img: "qemu-img".into(),
            qemu_img_max_memory_bytes: 1 << 30,
            image_convert_cpu_seconds: 3600,
            image_convert_max_bytes: 0,
            image_cache_reserved_bytes: 2 << 30,
            xorriso: "xorriso".into(),
            isolinux_bin: PathBuf::from("/usr/lib/ISOLINUX/isolinux.bin"),
            ldlinux_c32: PathBuf::from("/usr/lib/syslinux/modules/bios/ldlinux.c32"),
            http_max_connections: 64,
            http_connection_lifetime: 3600,
            esp_image: None,
            erase_devices_priority: None,
            erase_devices_metadata_priority: None,
            configdrive_max_bytes: 64 << 20,
        }
    }
}

impl DeploySection {
    /// The base URL of `http_root` for the agent: `http_url`, else the image server's
    /// own address (none when it listens on every address: no one address to give).
    pub fn agent_http_url(&self) -> Option<String> {
        if let Some(u) = &self.http_url {
            return Some(u.trim_end_matches('/').to_string());
        }
        let a = self.http_listen?;
        (!a.ip().is_unspecified()).then(|| format!("http://{a}"))
    }

    /// The base URL of `http_root` for a BMC: `external_http_url`, else the agent's.
    pub fn bmc_http_url(&self) -> Option<String> {
        match &self.external_http_url {
            Some(u) => Some(u.trim_end_matches('/').to_string()),
            None => self.agent_http_url(),
        }
    }
}

/// The ramdisk agent (ironic-python-agent) and how the service trusts it.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentSection {
    /// A heartbeat's `callback_url` must be `https://` (the agent's automatic TLS; its
    /// certificate comes in `agent_verify_ca`): an `http://` one is refused (400), so
    /// the conductor never sends the agent's commands in clear text. Upstream's option
    /// defaults to false; here the safe side is the default.
    pub require_tls: bool,
    /// Seconds one call to the agent may take.
    pub command_timeout: u64,
    /// Attempts of a call that cannot reach the agent.
    pub max_command_attempts: u32,
    /// Follow a command the agent runs (`GET /v1/commands/<id>?wait=true`) and go on
    /// the moment it ends; without, a deploy or cleaning moves on at the agent's next
    /// heartbeat only (upstream's way, seconds to minutes later). Heartbeats move it
    /// on either way.
    pub follow_commands: bool,
    /// When the ramdisk's logs are collected (`log.collect_system_logs`) into
    /// `deploy_logs_local_path`: `on_failure`, `always` or `never`.
    pub deploy_logs_collect: String,
    /// Where collected ramdisk logs go, one `<node>[_<instance>]_<time>.tar.gz` each.
    pub deploy_logs_local_path: PathBuf,
    /// Where the agent downloads the instance image from: `http` (the image's own
    /// `http(s)://` URL) or `local` (the conductor downloads it once, checks it and
    /// serves it from the image server). `file://` images are always served locally.
    pub image_download_source: String,
    /// A raw image is written to the disk as it downloads (no copy in the ramdisk's
    /// memory).
    pub stream_raw_images: bool,
    /// After asking the agent to power the machine off, how many times the power
    /// state is read before it is forced off, and how many seconds apart (upstream
    /// reads 6 times 5 s apart; reading every second ends the step as soon as the
    /// machine is off).
    pub post_deploy_get_power_state_retries: u32,
    pub post_deploy_get_power_state_retry_interval: u64,
    /// Accept MD5 image checksums (upstream's option, off by default as upstream's:
    /// colliding MD5 pairs are practical). Off: a node's MD5 `image_checksum` fails
    /// validation and the deploy, and the agent is told to refuse MD5 too.
    pub allow_md5_checksum: bool,
    /// The most bytes of one collected ramdisk log archive; a larger one is not kept.
    pub deploy_logs_max_bytes: u64,
    /// The most bytes `deploy_logs_local_path` holds: the oldest archives go first.
    pub deploy_logs_max_total_bytes: u64,
    /// Days an archive is kept; 0 keeps them until the total bound removes them.
    pub deploy_logs_retention_days: u64,
}

impl Default for AgentSection {
    fn default() -> Self {
        AgentSection {
            require_tls: true,
            command_timeout: 60,
            max_command_attempts: 3,
            follow_commands: true,
            deploy_logs_collect: "on_failure".into(),
            deploy_logs_local_path: PathBuf::from("data/deploy-logs"),
            image_download_source: "http".into(),
            stream_raw_images: true,
            post_deploy_get_power_state_retries: 30,
            post_deploy_get_power_state_retry_interval: 1,
            allow_md5_checksum: false,
            deploy_logs_max_bytes: 64 << 20,
            deploy_logs_max_total_bytes: 1 << 30,
            deploy_logs_retention_days: 30,
        }
    }
}

/// What an inspection does with what it found (upstream's `[inspector]`).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct InspectorSection {
    /// Which NICs of the inventory become ports (those already known are kept):
    /// `all`, `pxe` (the one the node booted from) or `disabled`.
    pub add_ports: String,
}

impl Default for InspectorSection {
    fn default() -> Self {
        InspectorSection {
            add_ports: "pxe".into(),
        }
    }
}

/// How the `redfish` hardware type talks to BMCs (upstream's `[redfish]`).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RedfishSection {
    /// Attempts of a call that cannot connect or is answered 5xx.
    pub connection_attempts: u32,
    /// Seconds between those attempts.
    pub connection_retry_interval: u64,
    /// Seconds a power change may take to show on the BMC.
    pub power_state_change_timeout: u64,
    /// Seconds one HTTP request may take.
    pub request_timeout: u64,
    /// Kernel parameters of the virtual-media ramdisk when neither `instance_info` nor
    /// `driver_info` names `kernel_append_params` (upstream's default).
    pub kernel_append_params: String,
}

impl Default for RedfishSection {
    fn default() -> Self {
        RedfishSection {
            connection_attempts: 5,
            connection_retry_interval: 4,
            power_state_change_timeout: 60,
            request_timeout: 30,
            kernel_append_params: "nofb vga=normal".into(),
        }
    }
}

/// How the `ipmi` hardware type drives `ipmitool` (upstream's `[ipmi]`).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IpmiSection {
    /// Seconds a call is tried again while the BMC cannot be reached.
    pub command_retry_timeout: u64,
    /// The least seconds between two calls to one BMC (many BMCs drop sessions when
    /// called faster).
    pub min_command_interval: f64,
    /// Seconds a power change may take to show on the BMC.
    pub power_state_change_timeout: u64,
    /// The `ipmitool` binary; unset: the first on `PATH`.
    pub ipmitool_path: Option<String>,
}

impl Default for IpmiSection {
    fn default() -> Self {
        IpmiSection {
            command_retry_timeout: 60,
            min_command_interval: 5.0,
            power_state_change_timeout: 60,
            ipmitool_path: None,
        }
    }
}

/// How inspection rules run (upstream's `[inspection_rules]`).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct InspectionRulesSection {
    /// A YAML file of rules every inspection runs besides the API's (re-read by each
    /// inspection; an unreadable or invalid file fails the inspection).
    pub built_in_rules: Option<String>,
    /// Whether rules see passwords in the inventory and plugin data (`password`,
    /// `auth_token`, `bmc_password` at any depth) as `***`: `always`, `never`, or
    /// `sensitive` (only rules marked sensitive see them).
    pub mask_secrets: String,
}

impl Default for InspectionRulesSection {
    fn default() -> Self {
        InspectionRulesSection {
            built_in_rules: None,
            mask_secrets: "always".into(),
        }
    }
}

/// The HPE OneView appliance of the `oneview` hardware type (`docs/oneview.md`).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OneViewSection {
    /// `https://host[:port]` (HTTPS is the default scheme) or an explicit
    /// `http://host[:port]` (e.g. the simulator).
    pub manager_url: Option<String>,
    pub username: Option<String>,
    pub password: Option<String>,
    /// Skip TLS certificate verification.
    pub allow_insecure_connections: bool,
    /// CA bundle to verify the appliance's certificate with.
    pub tls_cacert_file: Option<String>,
    /// Retries of a request the appliance answers 408 or 409.
    pub max_polling_attempts: u32,
    /// Seconds a OneView task may run before the driver gives up waiting.
    pub task_timeout: u64,
    /// Seconds between the periodic ownership checks; 0 disables them.
    pub periodic_check_interval: u64,
    pub enable_periodic_tasks: bool,
}

impl Default for OneViewSection {
    fn default() -> Self {
        OneViewSection {
            manager_url: None,
            username: None,
            password: None,
            allow_insecure_connections: false,
            tls_cacert_file: None,
            max_polling_attempts: 12,
            task_timeout: 600,
            periodic_check_interval: 300,
            enable_periodic_tasks: true,
        }
    }
}

/// The message bus of the split deployment (`ironic-api`, `ironic-conductor`). `Debug`
/// shows the URL without its password.
#[derive(Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AmqpSection {
    /// `amqp://user:password@host:port/vhost`, vhost URL-encoded (`%2f` is `/`).
    pub url: String,
    /// Durable direct exchange the RPC requests go through.
    pub exchange: String,
    /// Seconds a caller waits for a conductor's reply.
    pub call_timeout: u64,
    /// Requests a conductor runs at once; more wait in the broker.
    pub prefetch: u16,
    /// Seconds a request may wait for a conductor to take it: past that it is dropped
    /// unrun and the caller sends it again (at most twice) or answers 503 "not carried
    /// out", instead of waiting `call_timeout` for a request the bus lost. At most
    /// what is left of `call_timeout` applies.
    pub accept_timeout: u64,
    /// Largest wait, in seconds, between reconnection attempts.
    pub max_reconnect_backoff: u64,
    /// With `amqps://`: a PEM bundle of the certificate authorities to trust besides
    /// the built-in web roots (a private CA).
    pub tls_cacert_file: Option<PathBuf>,
    /// A file holding the secret (at least 32 bytes, trailing whitespace left out) that
    /// signs and verifies every message on the bus. Unset: the deployment's key in the
    /// database (`cluster.bus_signing_key`), which every process of it reads at start.
    pub signing_key_file: Option<PathBuf>,
    /// A second key, accepted on receipt but never used to sign: set during a key
    /// rotation (`docs/operations.md`, "The bus signing key").
    pub accept_signing_key_file: Option<PathBuf>,
}

impl std::fmt::Debug for AmqpSection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AmqpSection")
            .field("url", &redact_url(&self.url))
            .field("exchange", &self.exchange)
            .field("call_timeout", &self.call_timeout)
            .field("prefetch", &self.prefetch)
            .field("accept_timeout", &self.accept_timeout)
            .field("max_reconnect_backoff", &self.max_reconnect_backoff)
            .field("tls_cacert_file", &self.tls_cacert_file)
            .field("signing_key_file", &self.signing_key_file)
            .field("accept_signing_key_file", &self.accept_signing_key_file)
            .finish()
    }
}

/// OpenTelemetry traces.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetrySection {
    /// OTLP/gRPC endpoint such as `http://127.0.0.1:4317`; traces are off when unset.
    pub otlp_endpoint: Option<String>,
    /// `service.name` of the spans; the binary's name when unset.
    pub service_name: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DefaultSection {
    /// Name of this conductor in the ring, the registry and node locks.
    pub host: String,
    /// Hardware types this conductor enables.
    pub enabled_hardware_types: Vec<String>,
    pub default_conductor_group: String,
    pub default_resource_class: Option<String>,
    pub hash_partition_exponent: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuthStrategy {
    Noauth,
    HttpBasic,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ApiSection {
    pub listen: SocketAddr,
    /// Base URL of links in responses; the request's Host when unset.
    pub public_endpoint: Option<String>,
    /// Default and maximum page size.
    pub max_limit: u32,
    pub auth_strategy: AuthStrategy,
    /// Apache-style htpasswd file (bcrypt entries) for `http_basic`.
    pub http_basic_auth_user_file: Option<PathBuf>,
    /// Each `http_basic` user's project and roles (TOML; `docs/security.md`). Required
    /// with `http_basic`: without it nobody would have a role.
    pub http_basic_roles_file: Option<PathBuf>,
    /// Failed logins per (user name, client address) pair within `failed_login_window`
    /// seconds before that pair's further attempts get 429; 0: no limit at all. Never
    /// per user name alone, so nobody can lock another client out of an account.
    pub max_failed_logins: u32,
    /// Failed logins from one client address (any user names) within the window
    /// before every attempt from it gets 429; 0: no limit per address.
    pub max_failed_logins_per_address: u32,
    pub failed_login_window: u64,
    /// PEM certificate chain and private key: the API serves HTTPS (both or neither).
    pub tls_cert_file: Option<PathBuf>,
    pub tls_key_file: Option<PathBuf>,
    /// `noauth` on an address other than loopback gives anyone who reaches it full
    /// control: the API refuses to start so unless this says it is meant.
    pub allow_public_noauth: bool,
    /// Largest request body accepted; larger ones get 413. The provision and
    /// inspection routes have limits of their own.
    pub max_request_body_bytes: usize,
    /// Largest body of `PUT /v1/nodes/{node}/states/provision`, which carries config
    /// drives (upstream's `[api] max_json_body_size_provision`, 64 MiB); 413 past it.
    pub provision_max_body_bytes: usize,
    /// Largest body of `POST /v1/continue_inspection`, whose inventory may carry the
    /// ramdisk's logs (upstream's `[api] max_json_body_size_inspection`, 16 MiB).
    pub inspection_max_body_bytes: usize,
    /// The most JSON values (numbers, strings, arrays, objects, each element counted) a
    /// body of at most `max_request_body_bytes` may hold: parsing costs up to 160 bytes
    /// a value (`ironic_model::json_size`), so this bounds a small body's parse to ~3 MiB.
    pub max_json_values: usize,
    /// Addresses or networks (`192.0.2.10`, `10.0.0.0/8`, `fd00::/8`) of proxies in
    /// front of the API: a request from one of them counts as coming from the address
    /// its `X-Forwarded-For` names (the rightmost one that is not itself a trusted
    /// proxy), for the ramdisk routes' rate, failed logins and the audit trail. Empty:
    /// the connection's address, whatever the headers say.
    pub trusted_proxies: Vec<String>,
    /// The same for a body larger than `max_request_body_bytes` (a config drive, an
    /// inspection's data): ~32 MiB at most.
    pub large_body_json_values: usize,
    /// Bodies larger than `max_request_body_bytes` read and held at once, by the whole
    /// process; the next waits (within `body_read_timeout`, then 503). Each costs up to
    /// twice its size plus `large_body_json_values` × 160 bytes (docs/security.md).
    pub large_bodies_at_once: usize,
    /// Seconds a client has to send its request headers; the connection is closed after.
    pub header_read_timeout: u64,
    /// Seconds a request may take (reading its body included): 503 after. Must exceed
    /// `[amqp] call_timeout`.
    pub request_timeout: u64,
    /// Requests served at once; past it, 503 with `Retry-After` at once. The ramdisk
    /// routes have a budget of their own (`ramdisk_max_concurrent_requests`), not a
    /// share of this one.
    pub max_concurrent_requests: usize,
    /// Seconds a client has to send a request's whole body once its headers are in:
    /// 408 after (a client sending one byte at a time holds no slot for long).
    pub body_read_timeout: u64,
    /// Requests to the ramdisk routes (`/v1/lookup`, `/v1/heartbeat/{node}`,
    /// `/v1/continue_inspection`: public, no credentials) served at once; past it, 503
    /// with `Retry-After` at once. Apart from `max_concurrent_requests`, so a flood of
    /// them never makes an authenticated call fail.
    pub ramdisk_max_concurrent_requests: usize,
    /// Requests per second each client address may make to the ramdisk routes (a
    /// machine's agent makes one every few seconds); past it, 429 with `Retry-After`.
    /// 0 turns the limit off.
    pub ramdisk_requests_per_second: u32,
    /// How many ramdisk requests one address may make at once above that rate.
    pub ramdisk_burst: u32,
    /// Largest heartbeat body accepted (an agent's is a few hundred bytes); 413 past it.
    pub heartbeat_max_body_bytes: usize,
    /// Serve the ramdisk agent's `/v1/lookup`, `/v1/heartbeat` and
    /// `/v1/continue_inspection` (public routes, no credentials); false answers them 403
    /// before reading a body.
    pub enable_ramdisk_endpoints: bool,
    /// Only nodes in a state that waits for a ramdisk can be looked up.
    pub restrict_lookup: bool,
    /// Seconds between the agent's heartbeats, told to it by the lookup.
    pub ramdisk_heartbeat_timeout: u64,
}

/// Whether an AMQP URL is plain `amqp://` to a host other than loopback.
fn plaintext_remote(url: &str) -> bool {
    let Some(rest) = url.strip_prefix("amqp://") else {
        return false;
    };
    let authority = rest.split('/').next().unwrap_or_default();
    let host_port = authority.rsplit('@').next().unwrap_or_default();
    let host = match host_port.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => host_port.split(':').next().unwrap_or_default(),
    };
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    !loopback
}

/// `Debug` shows the URL without its password ([`redact_url`]).
#[derive(Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DatabaseSection {
    /// `sqlite://PATH` (all-in-one) or `postgres://user@host/db` (split deployment).
    pub url: String,
    pub max_connections: u32,
    /// Seconds to wait for a free pool connection before failing (503).
    pub acquire_timeout: u64,
    /// PostgreSQL: milliseconds any one statement may run (`statement_timeout`); 0 is
    /// no limit.
    pub statement_timeout_ms: u64,
}

impl std::fmt::Debug for DatabaseSection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DatabaseSection")
            .field("url", &redact_url(&self.url))
            .field("max_connections", &self.max_connections)
            .field("acquire_timeout", &self.acquire_timeout)
            .field("statement_timeout_ms", &self.statement_timeout_ms)
            .finish()
    }
}

pub use ironic_model::secrets::redact_url;

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConductorSection {
    /// Seconds between heartbeats (each on the conductor's own database session).
    pub heartbeat_interval: u64,
    /// Seconds without a heartbeat after which a conductor is dead even though its
    /// database session is still open; one whose session is gone is dead after three
    /// intervals (`ironic_db::Liveness`).
    pub heartbeat_timeout: u64,
    pub allow_deleting_available_nodes: bool,
    /// Clean nodes on `provide` and after tear-down (a node's own `automated_clean`
    /// wins when set).
    pub automated_clean: bool,
    pub node_locked_retry_attempts: u32,
    pub node_locked_retry_interval_ms: u64,
    /// Seconds a stopping conductor keeps serving after going offline, so that API
    /// processes stop routing to it first; skipped when it is the only conductor.
    pub shutdown_settle_time: u64,
    /// Seconds a stopping conductor waits for requests in hand to finish.
    pub graceful_shutdown_timeout: u64,
    /// Seconds between checks for `allocating` allocations of dead conductors, which
    /// this conductor then takes over; 0 disables the check.
    pub check_allocations_interval: u64,
    /// For tests of take-over: milliseconds an allocation waits before reserving its
    /// node. Leave at 0.
    pub allocation_delay_ms: u64,
    /// Record node history (1.78): provision state changes and errors.
    pub node_history: bool,
    /// Entries kept per node (older ones are pruned, but not those younger than
    /// `node_history_minimum_days`).
    pub node_history_max_entries: u64,
    /// Seconds between prunings of node history; 0 disables them.
    pub node_history_cleanup_interval: u64,
    /// Most entries one pruning deletes.
    pub node_history_cleanup_batch_count: u64,
    /// Days of history kept whatever the count.
    pub node_history_minimum_days: u64,
    /// Seconds an in-band inspection (`agent` inspect interface) waits in `inspect
    /// wait` for the ramdisk's data before it fails; 0 waits for ever.
    pub inspect_wait_timeout: u64,
    /// The longest pause a reserved `wait` step takes, in seconds (upstream's).
    pub max_conductor_wait_step_seconds: u64,
    /// Seconds a deploy step may wait in `deploy wait` for an event (an agent
    /// heartbeat) before the deploy fails; 0 waits for ever.
    pub deploy_callback_timeout: u64,
    /// The same for a clean step in `clean wait`.
    pub clean_callback_timeout: u64,
    /// The same for a service step in `service wait`.
    pub service_callback_timeout: u64,
    /// Seconds between checks of the waiting nodes this conductor owns: timed waits a
    /// gone process did not continue, waits past their callback timeout.
    pub check_provision_state_interval: u64,
    /// Seconds between power-state syncs of the nodes this conductor owns; 0 disables.
    pub sync_power_state_interval: u64,
    /// BMCs a sync reads at the same time.
    pub sync_power_state_workers: usize,
    /// A sync sets the hardware back to the recorded power state (true) or records
    /// what the hardware reports (false).
    pub force_power_state_during_sync: bool,
    /// Failed syncs in a row before a node goes into maintenance (`power failure`).
    pub power_state_sync_max_retries: u32,
    /// `ironic-conductor` only: where it serves `/healthz`, `/readyz` and `/metrics`;
    /// empty turns the listener off. (The all-in-one serves them on the API port.)
    #[serde(deserialize_with = "optional_addr")]
    pub http_listen: Option<SocketAddr>,
    /// The folders a `file://` image reference (`driver_info` `deploy_kernel`,
    /// `deploy_ramdisk`, `deploy_iso`; `instance_info` `image_source`) may name a file
    /// in; empty (the default) refuses every `file://` reference. `/dev`, `/proc`,
    /// `/sys`, `/etc`, `/run`, `/boot` and the service's own files (database, this
    /// configuration, keys, `http_root`, `image_cache`, `tftp_root`, the agents' logs)
    /// are refused whatever this allows (`ironic-conductor` `local_files.rs`).
    pub file_url_allowed_paths: Vec<PathBuf>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    Human,
    Json,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogSection {
    pub format: LogFormat,
    /// A `tracing` filter such as `info` or `info,ironic_db=debug`; `RUST_LOG` wins.
    pub filter: String,
    /// Log lines a process writes per second at most, with ten seconds' worth as a
    /// burst ([`LineBudget`]); lines past it are dropped and counted, never those of the
    /// audit trail. The default keeps a process within journald's default rate limit
    /// (10,000 lines in 30 s), which would otherwise drop audit lines with the rest.
    /// 0: no budget.
    pub max_lines_per_second: u32,
}

/// An address, or the empty string for none.
fn optional_addr<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<SocketAddr>, D::Error> {
    let s = String::deserialize(d)?;
    if s.trim().is_empty() {
        return Ok(None);
    }
    s.trim()
        .parse()
        .map(Some)
        .map_err(|e| serde::de::Error::custom(format!("invalid address {s:?}: {e}")))
}

fn default_host() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|s| s.trim().to_string())
                .filter(|h| !h.is_empty())
        })
        .unwrap_or_else(|| "localhost".to_string())
}

impl Default for DefaultSection {
    fn default() -> Self {
        DefaultSection {
            host: default_host(),
            enabled_hardware_types: vec![
                "fake-hardware".into(),
                "redfish".into(),
                "ipmi".into(),
                "oneview".into(),
            ],
            default_conductor_group: String::new(),
            default_resource_class: None,
            hash_partition_exponent: 5,
        }
    }
}

impl Default for ApiSection {
    fn default() -> Self {
        ApiSection {
            listen: SocketAddr::from(([127, 0, 0, 1], 6385)),
            public_endpoint: None,
            max_limit: 1000,
            auth_strategy: AuthStrategy::Noauth,
            http_basic_auth_user_file: None,
            http_basic_roles_file: None,
            max_failed_logins: 10,
            max_failed_logins_per_address: 50,
            failed_login_window: 300,
            tls_cert_file: None,
            tls_key_file: None,
            allow_public_noauth: false,
            max_request_body_bytes: 1024 * 1024,
            provision_max_body_bytes: 64 << 20,
            inspection_max_body_bytes: 16 << 20,
            max_json_values: 20_000,
            trusted_proxies: Vec::new(),
            large_body_json_values: 200_000,
            large_bodies_at_once: 4,
            header_read_timeout: 10,
            request_timeout: 90,
            max_concurrent_requests: 512,
            body_read_timeout: 10,
            ramdisk_max_concurrent_requests: 64,
            ramdisk_requests_per_second: 10,
            ramdisk_burst: 20,
            heartbeat_max_body_bytes: 64 * 1024,
            enable_ramdisk_endpoints: true,
            restrict_lookup: true,
            ramdisk_heartbeat_timeout: 300,
        }
    }
}

impl Default for DatabaseSection {
    fn default() -> Self {
        DatabaseSection {
            url: "sqlite://data/ironic.sqlite".into(),
            max_connections: 16,
            acquire_timeout: 10,
            statement_timeout_ms: 30_000,
        }
    }
}

impl Default for ConductorSection {
    fn default() -> Self {
        ConductorSection {
            heartbeat_interval: 1,
            heartbeat_timeout: 8,
            allow_deleting_available_nodes: true,
            automated_clean: true,
            node_locked_retry_attempts: 3,
            node_locked_retry_interval_ms: 1000,
            shutdown_settle_time: 10,
            graceful_shutdown_timeout: 60,
            check_allocations_interval: 60,
            allocation_delay_ms: 0,
            node_history: true,
            node_history_max_entries: 300,
            node_history_cleanup_interval: 86400,
            node_history_cleanup_batch_count: 1000,
            node_history_minimum_days: 0,
            inspect_wait_timeout: 1800,
            max_conductor_wait_step_seconds: 30,
            deploy_callback_timeout: 1800,
            clean_callback_timeout: 1800,
            service_callback_timeout: 1800,
            check_provision_state_interval: 60,
            sync_power_state_interval: 60,
            sync_power_state_workers: 8,
            force_power_state_during_sync: true,
            power_state_sync_max_retries: 3,
            http_listen: Some(SocketAddr::from(([127, 0, 0, 1], 6388))),
            file_url_allowed_paths: Vec::new(),
        }
    }
}

impl Default for AmqpSection {
    fn default() -> Self {
        AmqpSection {
            url: "amqp://guest:guest@127.0.0.1:5672/%2f".into(),
            exchange: "ironic".into(),
            call_timeout: 60,
            prefetch: 64,
            accept_timeout: 10,
            max_reconnect_backoff: 10,
            tls_cacert_file: None,
            signing_key_file: None,
            accept_signing_key_file: None,
        }
    }
}

impl Default for LogSection {
    fn default() -> Self {
        LogSection {
            format: LogFormat::Human,
            filter: "info".into(),
            max_lines_per_second: 200,
        }
    }
}

const ENV_PREFIX: &str = "IRONIC_";

/// Parses an environment value as a TOML value (`10`, `true`, `["a", "b"]`), falling back
/// to a plain string (`0.0.0.0:6385`).
fn env_value(raw: &str) -> toml::Value {
    toml::from_str::<toml::Table>(&format!("v = {raw}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(raw.to_string()))
}

impl Config {
    /// Loads the layers. `env` is the process environment (a parameter so tests can
    /// pass their own).
    pub fn load(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        let mut table = match file {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.to_path_buf(),
                    source,
                })?;
                toml::from_str::<toml::Table>(&text)
                    .map_err(|e| ConfigError::Invalid(format!("{}: {e}", path.display())))?
            }
            None => toml::Table::new(),
        };
        for (key, raw) in env {
            let Some(rest) = key.strip_prefix(ENV_PREFIX) else {
                continue;
            };
            let Some((section, option)) = rest.split_once("__") else {
                continue;
            };
            let section = section.to_ascii_lowercase();
            let option = option.to_ascii_lowercase();
            let entry = table
                .entry(section.clone())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            match entry {
                toml::Value::Table(t) => {
                    t.insert(option, env_value(&raw));
                }
                _ => return Err(ConfigError::Invalid(format!("[{section}] is not a table"))),
            }
        }
        let mut cfg: Config = toml::Value::Table(table)
            .try_into()
            .map_err(|e: toml::de::Error| ConfigError::Invalid(e.to_string()))?;
        cfg.source = file.map(Path::to_path_buf);
        cfg.validate()?;
        Ok(cfg)
    }

    /// Cross-field checks; errors stop the start.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !matches!(
            self.inspector.add_ports.as_str(),
            "all" | "pxe" | "disabled"
        ) {
            return Err(ConfigError::Invalid(format!(
                "[inspector] add_ports must be all, pxe or disabled, not {:?}",
                self.inspector.add_ports
            )));
        }
        if !matches!(
            self.inspection_rules.mask_secrets.as_str(),
            "always" | "never" | "sensitive"
        ) {
            return Err(ConfigError::Invalid(format!(
                "[inspection_rules] mask_secrets must be always, never or sensitive, not {:?}",
                self.inspection_rules.mask_secrets
            )));
        }
        let bad = |m: &str| Err(ConfigError::Invalid(m.to_string()));
        if self.default.host.is_empty() {
            return bad("[default] host must not be empty");
        }
        if self.api.max_limit == 0 {
            return bad("[api] max_limit must be positive");
        }
        if self.api.auth_strategy == AuthStrategy::HttpBasic
            && self.api.http_basic_auth_user_file.is_none()
        {
            return bad("[api] auth_strategy = \"http_basic\" needs http_basic_auth_user_file");
        }
        if self.api.auth_strategy == AuthStrategy::HttpBasic
            && self.api.http_basic_roles_file.is_none()
        {
            return bad(
                "[api] auth_strategy = \"http_basic\" needs http_basic_roles_file (each user's project and roles; see docs/security.md)",
            );
        }
        if self.conductor.heartbeat_interval == 0
            || self.conductor.heartbeat_timeout <= self.conductor.heartbeat_interval
        {
            return bad(
                "[conductor] heartbeat_timeout must be larger than heartbeat_interval (> 0)",
            );
        }
        if self.amqp.call_timeout == 0 || self.amqp.prefetch == 0 {
            return bad("[amqp] call_timeout and prefetch must be positive");
        }
        if self.amqp.accept_timeout == 0 {
            return bad("[amqp] accept_timeout must be positive");
        }
        if self.api.header_read_timeout == 0
            || self.api.max_concurrent_requests == 0
            || self.api.body_read_timeout == 0
            || self.api.ramdisk_max_concurrent_requests == 0
            || self.api.heartbeat_max_body_bytes == 0
            || self.api.provision_max_body_bytes == 0
            || self.api.inspection_max_body_bytes == 0
        {
            return bad(
                "[api] header_read_timeout, body_read_timeout, max_concurrent_requests, ramdisk_max_concurrent_requests, heartbeat_max_body_bytes, provision_max_body_bytes and inspection_max_body_bytes must be positive",
            );
        }
        if self.api.ramdisk_requests_per_second > 0 && self.api.ramdisk_burst == 0 {
            return bad(
                "[api] ramdisk_burst must be positive while ramdisk_requests_per_second is",
            );
        }
        if self.api.request_timeout <= self.amqp.call_timeout {
            return bad(
                "[api] request_timeout must be larger than [amqp] call_timeout (a request waits that long for a conductor)",
            );
        }
        for (name, url) in [
            ("http_url", &self.deploy.http_url),
            ("external_http_url", &self.deploy.external_http_url),
            ("external_callback_url", &self.deploy.external_callback_url),
        ] {
            if let Some(u) = url
                && !(u.starts_with("http://") || u.starts_with("https://"))
            {
                return Err(ConfigError::Invalid(format!(
                    "[deploy] {name} must start with http:// or https://, not {u:?}"
                )));
            }
        }
        if self.deploy.http_max_connections == 0 {
            return bad("[deploy] http_max_connections must be positive");
        }
        if !(1..=300).contains(&self.deploy.fast_track_timeout) {
            return bad("[deploy] fast_track_timeout must be between 1 and 300 seconds");
        }
        if self.deploy.configdrive_max_bytes == 0 {
            return bad("[deploy] configdrive_max_bytes must be positive");
        }
        if self.database.acquire_timeout == 0 {
            return bad("[database] acquire_timeout must be positive");
        }
        if !(self.amqp.url.starts_with("amqp://") || self.amqp.url.starts_with("amqps://")) {
            return bad("[amqp] url must start with amqp:// or amqps://");
        }
        if self.api.tls_cert_file.is_some() != self.api.tls_key_file.is_some() {
            return bad("[api] tls_cert_file and tls_key_file go together (both or neither)");
        }
        if self.amqp.exchange.is_empty() {
            return bad("[amqp] exchange must not be empty");
        }
        if self.default.hash_partition_exponent > 16 {
            return bad("[default] hash_partition_exponent must be at most 16");
        }
        if !(self.database.url.starts_with("sqlite:")
            || self.database.url.starts_with("postgres://")
            || self.database.url.starts_with("postgresql://"))
        {
            return bad("[database] url must start with sqlite: or postgres://");
        }
        if let Some(p) = self
            .api
            .trusted_proxies
            .iter()
            .find(|p| parse_network(p).is_none())
        {
            return Err(ConfigError::Invalid(format!(
                "[api] trusted_proxies: {p:?} is not an address or a network (192.0.2.1, 10.0.0.0/8, fd00::/8)"
            )));
        }
        if let Some(p) = self
            .conductor
            .file_url_allowed_paths
            .iter()
            .find(|p| !p.is_absolute() || p.parent().is_none())
        {
            return Err(ConfigError::Invalid(format!(
                "[conductor] file_url_allowed_paths: {} must be an absolute folder other than /",
                p.display()
            )));
        }
        Ok(())
    }

    /// The SQLite database file of `[database] url`, when it is one.
    pub fn sqlite_file(&self) -> Option<PathBuf> {
        let rest = self.database.url.strip_prefix("sqlite:")?;
        let rest = rest.strip_prefix("//").unwrap_or(rest);
        let path = rest.split('?').next().unwrap_or(rest);
        (!path.is_empty() && path != ":memory:").then(|| PathBuf::from(path))
    }

    /// Risky but legal combinations, to log at start.
    pub fn warnings(&self) -> Vec<String> {
        let mut w = Vec::new();
        if self.public_noauth() && self.api.allow_public_noauth {
            w.push(format!(
                "auth_strategy is noauth and the API listens on {} (allowed by [api] allow_public_noauth): anyone who can reach it has full control",
                self.api.listen
            ));
        }
        if self.api.auth_strategy == AuthStrategy::HttpBasic && self.api.tls_cert_file.is_none() {
            w.push(
                "http_basic without TLS: passwords cross the network in clear text unless a TLS proxy is in front ([api] tls_cert_file)".into(),
            );
        }
        if plaintext_remote(&self.amqp.url) {
            w.push(format!(
                "[amqp] url {} is plain amqp:// to another host: RPC payloads (BMC passwords among them) cross the network in clear text; use amqps:// (docs/operations.md)",
                redact_url(&self.amqp.url)
            ));
        }
        w
    }

    /// `noauth` on an address other than loopback.
    pub fn public_noauth(&self) -> bool {
        self.api.auth_strategy == AuthStrategy::Noauth && !self.api.listen.ip().is_loopback()
    }
}

/// Starts `tracing` output as configured; `RUST_LOG` overrides the filter.
/// Where log lines go: standard error, one event per line whatever the event holds
/// ([`OneLine`]).
pub fn log_writer() -> OneLine<fn() -> std::io::Stderr> {
    OneLine(std::io::stderr)
}

pub use ironic_model::addr::{in_network, parse_network};

/// The targets a [`LineBudget`] never drops: the audit trail, and its own report of
/// what it dropped.
pub const UNBUDGETED_TARGETS: &[&str] = &["ironic::audit", "ironic::log_budget"];

/// Log lines dropped by every [`LineBudget`] of the process so far.
static DROPPED_LOG_LINES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Log lines dropped so far ([`LineBudget`]); the service reports them (target
/// `ironic::log_budget`) and counts them in `ironic_log_lines_dropped_total`.
pub fn dropped_log_lines() -> u64 {
    DROPPED_LOG_LINES.load(std::sync::atomic::Ordering::Relaxed)
}

/// A per-layer filter that lets at most `per_second` events through (a token bucket
/// holding ten seconds' worth), so that one flood of requests (each logging a line)
/// cannot fill the disk or trip journald's rate limit, which drops a unit's lines
/// without regard to what they are. Events of [`UNBUDGETED_TARGETS`] always pass and
/// take no token; spans are not events and always pass.
pub struct LineBudget {
    per_second: f64,
    bucket: std::sync::Mutex<(f64, std::time::Instant)>,
}

impl LineBudget {
    pub fn new(per_second: u32) -> LineBudget {
        let per_second = f64::from(per_second);
        LineBudget {
            per_second,
            bucket: std::sync::Mutex::new((per_second * 10.0, std::time::Instant::now())),
        }
    }

    /// Whether one more line fits now.
    fn take(&self) -> bool {
        if self.per_second <= 0.0 {
            return true;
        }
        let mut b = self.bucket.lock().unwrap_or_else(|p| p.into_inner());
        let now = std::time::Instant::now();
        let refill = now.duration_since(b.1).as_secs_f64() * self.per_second;
        b.0 = (b.0 + refill).min(self.per_second * 10.0);
        b.1 = now;
        if b.0 >= 1.0 {
            b.0 -= 1.0;
            return true;
        }
        DROPPED_LOG_LINES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        false
    }
}

impl<S> tracing_subscriber::layer::Filter<S> for LineBudget {
    fn enabled(
        &self,
        meta: &tracing::Metadata<'_>,
        _: &tracing_subscriber::layer::Context<'_, S>,
    ) -> bool {
        !meta.is_event() || UNBUDGETED_TARGETS.contains(&meta.target()) || self.take()
    }

    fn callsite_enabled(
        &self,
        _: &'static tracing::Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        // Asked for every event: the answer changes with time.
        tracing::subscriber::Interest::sometimes()
    }
}

/// A log writer that keeps every event on one line: a carriage return or line feed
/// inside an event (a client's text in a field, a driver's multi-line error) is written
/// as `\r` or `\n`, so nothing a client sends can start a line of its own (a forged
/// `ironic::audit` line, say), whichever field carries it and however it was
/// formatted. The formatter hands over each event whole, ending in one line feed.
#[derive(Clone, Copy)]
pub struct OneLine<M>(pub M);

impl<'a, M: tracing_subscriber::fmt::MakeWriter<'a>> tracing_subscriber::fmt::MakeWriter<'a>
    for OneLine<M>
{
    type Writer = OneLine<M::Writer>;

    fn make_writer(&'a self) -> Self::Writer {
        OneLine(self.0.make_writer())
    }
}

impl<W: std::io::Write> std::io::Write for OneLine<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let body = buf.strip_suffix(b"\n").unwrap_or(buf);
        if !body.iter().any(|&b| b == b'\n' || b == b'\r') {
            self.0.write_all(buf)?;
            return Ok(buf.len());
        }
        let mut out = Vec::with_capacity(buf.len() + 16);
        for &b in body {
            match b {
                b'\n' => out.extend_from_slice(b"\\n"),
                b'\r' => out.extend_from_slice(b"\\r"),
                b => out.push(b),
            }
        }
        if body.len() < buf.len() {
            out.push(b'\n');
        }
        self.0.write_all(&out)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

pub fn init_logging(log: &LogSection) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&log.filter))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(log_writer());
    let res = match log.format {
        LogFormat::Human => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
    if res.is_err() {
        // Already initialised (tests start several servers in one process).
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// A log written to memory.
    #[derive(Clone, Default)]
    struct Shared(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
    impl std::io::Write for Shared {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Shared {
        type Writer = Shared;
        fn make_writer(&'a self) -> Shared {
            self.clone()
        }
    }

    /// A flood of lines is cut to the budget; the audit trail's lines all pass.
    #[test]
    fn the_line_budget_never_drops_the_audit_trail() {
        use tracing_subscriber::Layer;
        use tracing_subscriber::layer::SubscriberExt;
        let out = Shared::default();
        let layer = tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_writer(out.clone())
            .with_filter(LineBudget::new(2));
        let sub = tracing_subscriber::registry().with(layer);
        let dropped = dropped_log_lines();
        tracing::subscriber::with_default(sub, || {
            for i in 0..1000 {
                tracing::warn!(i, "invalid MAC address");
                if i % 100 == 0 {
                    tracing::info!(target: "ironic::audit", i, "audit");
                }
            }
        });
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        let count = |w: &str| text.lines().filter(|l| l.contains(w)).count();
        // Ten seconds' worth (20), perhaps one more refilled meanwhile.
        assert!((20..=21).contains(&count("invalid MAC")), "{text}");
        assert_eq!(count("ironic::audit"), 10, "{text}");
        assert!(dropped_log_lines() - dropped >= 979);
    }

    /// A line feed or carriage return in any field or message cannot start a log line.
    #[test]
    fn every_event_is_one_line() {
        let out = Shared::default();
        let sub = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(OneLine(out.clone()))
            .finish();
        tracing::subscriber::with_default(sub, || {
            let forged = "x\r\n2026-01-01T00:00:00Z  INFO ironic::audit: forged";
            tracing::info!(addresses = %forged, "lookup");
            tracing::warn!("ramdisk said: {forged}");
            tracing::info!("plain");
        });
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(lines.iter().all(|l| !l.contains("\r")), "{text}");
        assert!(lines[0].contains("x\\r\\n2026"), "{text}");
        assert!(lines[2].ends_with("plain"), "{text}");
    }

    #[test]
    fn trusted_proxies_are_networks() {
        let mut c = Config::default();
        c.api.trusted_proxies = vec!["10.0.0.0/8".into()];
        assert!(c.validate().is_ok());
        c.api.trusted_proxies = vec!["10.0.0.0/8".into(), "nope".into()];
        assert!(c.validate().is_err());
    }

    #[test]
    fn plain_amqp_to_another_host_is_warned_about() {
        assert!(!plaintext_remote("amqp://guest:guest@127.0.0.1:5672/x"));
        assert!(!plaintext_remote("amqp://localhost/%2f"));
        assert!(!plaintext_remote("amqp://u:p@[::1]:5672/x"));
        assert!(!plaintext_remote("amqps://u:p@mq.example.net/x"));
        assert!(plaintext_remote("amqp://u:p@mq.example.net:5672/x"));
        assert!(plaintext_remote("amqp://192.0.2.1/x"));
        let mut c = Config::load(None, env(&[])).unwrap();
        c.amqp.url = "amqp://u:hunter2@192.0.2.1/x".into();
        let w = c.warnings();
        assert!(w.iter().any(|w| w.contains("amqps://")), "{w:?}");
        assert!(!w.iter().any(|w| w.contains("hunter2")), "{w:?}");
    }

    #[test]
    fn urls_are_shown_without_passwords() {
        assert_eq!(
            redact_url("postgres://u:secret@h/db"),
            "postgres://u:***@h/db"
        );
        assert_eq!(redact_url("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(
            redact_url("sqlite://data/x.sqlite"),
            "sqlite://data/x.sqlite"
        );
        let mut c = Config::load(None, env(&[])).unwrap();
        c.database.url = "postgres://ironic:hunter2@db/ironic".into();
        c.amqp.url = "amqps://ironic:hunter2@mq/ironic".into();
        let shown = format!("{c:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
    }

    #[test]
    fn defaults_need_no_file() {
        let c = Config::load(None, env(&[])).unwrap();
        assert_eq!(c.api.listen.to_string(), "127.0.0.1:6385");
        assert_eq!(c.api.max_limit, 1000);
        assert_eq!(c.conductor.heartbeat_timeout, 8);
        assert_eq!(
            c.conductor.http_listen.unwrap().to_string(),
            "127.0.0.1:6388"
        );
        assert!(c.warnings().is_empty());
    }

    #[test]
    fn operational_limits() {
        let off = Config::load(None, env(&[("IRONIC_CONDUCTOR__HTTP_LISTEN", "")])).unwrap();
        assert_eq!(off.conductor.http_listen, None);
        let any = Config::load(
            None,
            env(&[("IRONIC_CONDUCTOR__HTTP_LISTEN", "127.0.0.1:0")]),
        )
        .unwrap();
        assert_eq!(any.conductor.http_listen.unwrap().port(), 0);
        assert!(Config::load(None, env(&[("IRONIC_CONDUCTOR__HTTP_LISTEN", "nowhere")])).is_err());
        let mut c = Config::load(None, env(&[])).unwrap();
        c.api.request_timeout = c.amqp.call_timeout;
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("request_timeout"), "{e}");
    }

    #[test]
    fn file_then_env() {
        let dir = std::env::temp_dir().join(format!("ironic-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ironic.toml");
        std::fs::write(
            &path,
            "[api]\nmax_limit = 50\nlisten = \"127.0.0.1:7000\"\n",
        )
        .unwrap();
        let c = Config::load(
            Some(&path),
            env(&[
                ("IRONIC_API__LISTEN", "0.0.0.0:7001"),
                ("IRONIC_CONDUCTOR__HEARTBEAT_INTERVAL", "5"),
                ("OTHER", "x"),
            ]),
        )
        .unwrap();
        assert_eq!(c.api.max_limit, 50);
        assert_eq!(c.api.listen.to_string(), "0.0.0.0:7001");
        assert_eq!(c.conductor.heartbeat_interval, 5);
        // noauth on 0.0.0.0: the API refuses to start, unless allowed (then a warning).
        assert!(c.public_noauth());
        assert!(c.warnings().is_empty());
        let mut allowed = c.clone();
        allowed.api.allow_public_noauth = true;
        assert_eq!(allowed.warnings().len(), 1);
    }

    #[test]
    fn the_example_configuration_loads() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/ironic.toml");
        let c = Config::load(Some(&path), env(&[])).unwrap();
        assert_eq!(c.database.url, "sqlite:///var/lib/ironic/ironic.sqlite");
        assert_eq!(c.api.max_limit, ApiSection::default().max_limit);
    }

    #[test]
    fn the_split_example_configuration_loads() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/ironic-split.toml");
        let c = Config::load(Some(&path), env(&[])).unwrap();
        assert!(c.database.url.starts_with("postgres://"));
        assert!(c.database.url.contains("sslmode=verify-full"));
        assert!(c.amqp.url.starts_with("amqps://ironic-conductor:"));
        assert!(
            c.amqp.signing_key_file.is_none(),
            "the database's key by default"
        );
        assert_eq!(c.api.auth_strategy, AuthStrategy::HttpBasic);
        assert!(c.telemetry.otlp_endpoint.is_none());
    }

    #[test]
    fn bad_values_are_refused() {
        assert!(Config::load(None, env(&[("IRONIC_AMQP__URL", "amqps://h/")])).is_ok());
        assert!(Config::load(None, env(&[("IRONIC_API__TLS_CERT_FILE", "/c.pem")])).is_err());
        assert!(Config::load(None, env(&[("IRONIC_AMQP__URL", "http://h/")])).is_err());
        assert!(Config::load(None, env(&[("IRONIC_AMQP__PREFETCH", "0")])).is_err());
        assert!(Config::load(None, env(&[("IRONIC_API__MAX_LIMIT", "0")])).is_err());
        assert!(Config::load(None, env(&[("IRONIC_API__NOPE", "1")])).is_err());
        assert!(Config::load(None, env(&[("IRONIC_API__AUTH_STRATEGY", "http_basic")])).is_err());
        assert!(Config::load(None, env(&[("IRONIC_DATABASE__URL", "mysql://x")])).is_err());
        assert!(Config::load(None, env(&[("IRONIC_AMQP__ACCEPT_TIMEOUT", "0")])).is_err());
        assert!(Config::load(None, env(&[("IRONIC_DEPLOY__CONFIGDRIVE_MAX_BYTES", "0")])).is_err());
        let keyed = Config::load(
            None,
            env(&[
                ("IRONIC_AMQP__SIGNING_KEY_FILE", "/etc/ironic/bus.key"),
                (
                    "IRONIC_AMQP__ACCEPT_SIGNING_KEY_FILE",
                    "/etc/ironic/next.key",
                ),
            ]),
        )
        .unwrap();
        assert_eq!(
            keyed.amqp.signing_key_file.as_deref(),
            Some(Path::new("/etc/ironic/bus.key"))
        );
        assert_eq!(
            keyed.amqp.accept_signing_key_file.as_deref(),
            Some(Path::new("/etc/ironic/next.key"))
        );
        assert!(Config::default().amqp.signing_key_file.is_none());
        // http_basic without a roles file: nobody would have a role.
        let no_roles = Config::load(
            None,
            env(&[
                ("IRONIC_API__AUTH_STRATEGY", "http_basic"),
                (
                    "IRONIC_API__HTTP_BASIC_AUTH_USER_FILE",
                    "/etc/ironic/htpasswd",
                ),
            ]),
        );
        assert!(
            matches!(no_roles, Err(ConfigError::Invalid(m)) if m.contains("http_basic_roles_file"))
        );
    }
}
