//! The `direct` deploy and in-band cleaning: the ramdisk agent (ironic-python-agent)
//! writes the image and runs the in-band steps; the conductor boots the ramdisk, sends
//! the agent its commands and follows them, and does the out-of-band rest.
//!
//! **The steps** (`ironic_catalog::DIRECT_DEPLOY_STEPS`, upstream's priorities):
//! `deploy.deploy` boots the ramdisk (the node's boot interface prepares it,
//! `ironic_drivers::boot`; then power on) and
//! waits for the agent; `write_image` sends the agent its in-band `write_image` step
//! (the image's URL and checksum, the config drive) and waits for it;
//! `prepare_instance_boot` asks the partition UUIDs (installing a boot loader for UEFI),
//! has the boot interface prepare the instance's boot (the ramdisk's media ejected, its
//! files deleted) and sets the boot device to the disk;
//! `tear_down_agent` asks the agent to power the machine off and forces it after
//! `[agent] post_deploy_get_power_state_retries`; `switch_to_tenant_network` has
//! nothing to do with the `noop` and `flat` networks; `boot_instance` powers on. The
//! agent's own steps (reported by `get_deploy_steps`/`get_clean_steps`, cached in
//! `driver_internal_info`) join the plan when a template or the user names them, and
//! run in the agent; clean steps with a priority run in automated cleaning.
//!
//! **Waiting** goes through the step engine (`engine.rs`): a step that waits for the
//! agent ([`Outcome::Callback`]) leaves the node in `wait call-back` / `clean wait`,
//! unlocked, with `agent_wait` saying what it waits for: `boot` (the ramdisk booting),
//! `command` (the in-band command the agent runs, `agent_command_id`) or `busy` (the
//! agent was busy when the step was sent: it is sent again at the next heartbeat). Two events
//! move it on, both through [`Provisioner::agent_continue`]: a heartbeat of the node's
//! agent (upstream's only one), and, with `[agent] follow_commands`, the end of the
//! command, followed by a long poll of the agent (`?wait=true`) from the process
//! that sent it. The agent is asked without the lock; the lock is taken only to go
//! on, and only if the wait's token is still the node's, so the first event wins
//! and the others do nothing.
//!
//! **Fast-track** (`[deploy] fast_track`, or `driver_info.fast_track`): when the node's
//! agent heartbeated within `[deploy] fast_track_timeout` and the node is on
//! ([`Provisioner::fast_track_now`]), cleaning and `deploy.deploy` do not boot the
//! ramdisk: the wait for its boot is continued at once by asking the running agent its
//! steps (`engine.rs` `wait`); an agent that does not answer is booted after all. A
//! cleaning that ends well leaves the ramdisk running, its token and URL kept, for the
//! deploy that follows (upstream's).
//!
//! **Cleaning** boots the ramdisk in `deploy.prepare_cleaning`, waits in `clean wait`
//! without a step for the agent, then asks its clean steps and makes the list
//! (automated: every step with a priority, `[deploy] erase_devices_priority` and
//! `erase_devices_metadata_priority` applied; manual: the requested steps, checked
//! against what the agent offers now).

use super::boot::BootCall;
use super::step_state::{AgentWait, Wait};
use super::*;
use ironic_drivers::agent_client::{
    AgentClient, AgentError, CommandResult, CommandStatus, Endpoint,
};
use ironic_drivers::boot::Purpose;
use ironic_drivers::interfaces::BootDevice;

/// The versions of the agent's hardware managers, sent back with every step (the
/// agent refuses a step planned against other versions).
pub(super) const HARDWARE_MANAGER_VERSION: &str = "hardware_manager_version";
/// The root partition's UUID (partition images) or the disk's id (whole-disk).
const ROOT_UUID: &str = "root_uuid_or_disk_id";
/// The instance image the conductor published for the agent (relative to
/// `[deploy] http_root`): its random name keeps a private image from whoever reaches
/// the image server, so the key is one every rendering masks as a secret.
const PUBLISHED_IMAGE: &str = "agent_image_secret_path";
/// `tear_down_agent`: the BMC checks left before the machine the agent was told to
/// power off is forced off.
pub(super) const POWER_OFF_CHECKS: &str = "agent_power_off_checks_left";
/// Where earlier versions kept it (still cleaned up).
const PUBLISHED_IMAGE_BEFORE: &str = "agent_published_image";

/// The steps of the `direct` deploy that the conductor runs itself.
const DIRECT_STEPS: &[&str] = &[
    "deploy",
    "write_image",
    "prepare_instance_boot",
    "tear_down_agent",
    "switch_to_tenant_network",
    "boot_instance",
];

/// What the agent reported when a waited-for event came.
pub(super) enum AgentNews {
    /// The ramdisk booted: the steps it offers (`{interface: [step]}`) and its
    /// hardware managers' versions.
    Booted { steps: Value, versions: Value },
    /// The command waited for ended well.
    Succeeded,
    /// It failed: the agent's message.
    Failed(String),
    /// The agent's hardware changed (its managers' versions differ from the plan's):
    /// its steps now; the step is sent again.
    VersionMismatch { steps: Value, versions: Value },
    /// The agent was busy when the step was sent: it is sent again.
    Retry,
    /// Fast-track: the agent thought running does not answer; the ramdisk is booted.
    Unreachable(String),
}

/// The event that continues a fast-track wait for the agent's boot (it is running).
pub(super) const FAST_TRACK: &str = "fast-track";

/// Where the node's agent is and how to trust it (from its last heartbeat).
struct AgentAt {
    url: String,
    token: String,
    pem: Option<String>,
}

impl AgentAt {
    fn of(node: &Node) -> Option<AgentAt> {
        let dii = &node.driver_internal_info;
        let text = |k| dii.get(k).and_then(Value::as_str).map(str::to_string);
        Some(AgentAt {
            url: text(agent::URL)?,
            token: text(agent::TOKEN)?,
            pem: text(agent::VERIFY_CA),
        })
    }

    fn endpoint(&self) -> Endpoint<'_> {
        Endpoint {
            url: &self.url,
            token: &self.token,
            pinned_pem: self.pem.as_deref(),
        }
    }
}

/// The agent client for a conductor's settings.
pub(super) fn client(settings: &crate::ConductorSettings) -> AgentClient {
    let a = &settings.agent;
    let defaults = ironic_drivers::agent_client::Settings::default();
    // `write_image`'s result echoes the step with its arguments: the config drive in
    // base64 twice (`configdrive` and `image_info`; gzip adds a little to an image it
    // cannot shrink); the rest of an answer is far smaller than the margin. Its values
    // are counted before it is parsed (`agent_client.rs`).
    let drive = usize::try_from(settings.deploy.configdrive_max_bytes).unwrap_or(usize::MAX);
    AgentClient::new(ironic_drivers::agent_client::Settings {
        command_timeout: std::time::Duration::from_secs(a.command_timeout.max(1)),
        attempts: a.max_command_attempts.max(1),
        max_answer_bytes: drive
            .saturating_mul(8)
            .saturating_div(3)
            .saturating_add(defaults.max_answer_bytes),
        ..defaults
    })
}

fn agent_failed(what: &str, e: &AgentError) -> WorkFailed {
    WorkFailed::Refused(format!("{what}: {e}"))
}

/// The `driver_internal_info` key of the agent's cached steps of `flow`.
pub(super) fn cache_key(flow: Flow) -> &'static str {
    match flow {
        Flow::Deploy => ironic_catalog::AGENT_CACHED_DEPLOY_STEPS,
        Flow::Clean | Flow::Service => ironic_catalog::AGENT_CACHED_CLEAN_STEPS,
    }
}

impl Provisioner {
    /// Upstream's `is_fast_track`: fast-track is on for the node, its agent (token and
    /// URL known) heartbeated within `[deploy] fast_track_timeout`, and the node is on.
    pub(super) fn fast_track_now(&self, node: &Node) -> bool {
        let d = &self.settings.deploy;
        let dii = &node.driver_internal_info;
        let fresh = chrono::Duration::seconds(d.fast_track_timeout as i64);
        ironic_catalog::agent_based(node)
            && agent::fast_track(&node.driver_info, d.fast_track)
            && dii.contains_key(agent::URL)
            && dii.contains_key(agent::TOKEN)
            && node.power_state.as_deref() == Some("power on")
            && agent::since_heartbeat(dii, now()).is_some_and(|t| t <= fresh)
    }

    /// [`Flow::wipe`], but a running agent that fast-track reuses keeps its token and
    /// URL.
    pub(super) fn wipe_but_running_agent(&self, flow: Flow, node: &mut Node) {
        if self.fast_track_now(node) {
            flow.wipe_keeping_agent(node);
        } else {
            flow.wipe(node);
        }
    }

    /// Whether `step` of `flow` runs in the node's agent: a step the agent reported
    /// that no out-of-band interface offers.
    fn is_inband(node: &Node, flow: Flow, step: &Step) -> bool {
        if !ironic_catalog::agent_based(node) || steps::is_reserved(&step.step) {
            return false;
        }
        let offered = match flow {
            Flow::Deploy => ironic_catalog::offered_deploy_steps(node),
            Flow::Clean | Flow::Service => ironic_catalog::offered_clean_steps(node),
        };
        offered
            .iter()
            .find(|o| o.interface == step.interface && o.step == step.step)
            .is_some_and(|o| o.requires_ramdisk)
    }

    /// Runs `step` if the `direct` deploy or the agent runs it; `None`: the driver's.
    pub(super) async fn agent_step(
        &self,
        node: &mut Node,
        flow: Flow,
        step: &Step,
    ) -> Option<Result<Outcome, WorkFailed>> {
        if !ironic_catalog::agent_based(node) {
            return None;
        }
        if flow == Flow::Deploy
            && step.interface == "deploy"
            && DIRECT_STEPS.contains(&step.step.as_str())
        {
            return Some(self.direct_step(node, step).await);
        }
        if Self::is_inband(node, flow, step) {
            return Some(self.send_step(node, flow, step).await);
        }
        None
    }

    async fn direct_step(&self, node: &mut Node, step: &Step) -> Result<Outcome, WorkFailed> {
        match step.step.as_str() {
            "deploy" => self.boot_agent(node, Purpose::Deploy).await,
            "write_image" => self.write_image(node).await,
            "prepare_instance_boot" => {
                self.prepare_instance_boot(node).await?;
                Ok(Outcome::Done)
            }
            "tear_down_agent" => self.tear_down_agent(node).await,
            // The `noop` and `flat` networks have no tenant network to switch to.
            "switch_to_tenant_network" => Ok(Outcome::Done),
            "boot_instance" => {
                self.power(node, "power on").await?;
                Ok(Outcome::Done)
            }
            other => Err(WorkFailed::Refused(format!(
                "the direct deploy has no step {other}"
            ))),
        }
    }

    /// Sets the node's power through its power interface.
    async fn power(&self, node: &mut Node, action: &str) -> Result<(), WorkFailed> {
        let after = self
            .driver_of(node)?
            .power()
            .set_power_state(NodeInfo::from(&*node), action, None)
            .await?;
        node.power_state = Some(after);
        Ok(())
    }

    /// Boots the agent's ramdisk (its boot interface prepares it, then the node is
    /// powered on, or rebooted if on) and waits for the agent to look up and heartbeat.
    pub(super) async fn boot_agent(
        &self,
        node: &mut Node,
        purpose: Purpose,
    ) -> Result<Outcome, WorkFailed> {
        if self.fast_track_now(node) {
            AgentWait::Boot.set(node);
            tracing::info!(node = %node.uuid, purpose = ?purpose, "fast-track: the agent is running; no reboot");
            return Ok(Outcome::Callback);
        }
        agent::wipe_token_and_url(&mut node.driver_internal_info);
        self.prepare_ramdisk(node, purpose).await?;
        let action = if node.power_state.as_deref() == Some("power on") {
            "rebooting"
        } else {
            "power on"
        };
        self.power(node, action)
            .await
            .map_err(|e| WorkFailed::Refused(format!("Failed to boot the agent's ramdisk: {e}")))?;
        AgentWait::Boot.set(node);
        tracing::info!(node = %node.uuid, purpose = ?purpose, "agent ramdisk booting; waiting for its heartbeat");
        Ok(Outcome::Callback)
    }

    /// The in-band `write_image` step: the agent downloads the image (from its own URL,
    /// or from the conductor's image server), checks it and writes it with the config
    /// drive.
    async fn write_image(&self, node: &mut Node) -> Result<Outcome, WorkFailed> {
        let mut image_info = self.image_info(node).await?;
        // The stored config drive: built now from its JSON form (it may carry
        // secrets: never logged).
        let d = &self.settings.deploy;
        let configdrive = match node.instance_info.get("configdrive") {
            None => None,
            Some(stored) => ironic_drivers::configdrive::for_agent(
                stored,
                node.uuid.as_ref(),
                node.name.as_deref(),
                std::path::Path::new(&d.xorriso),
                d.configdrive_max_bytes,
            )
            .await
            .map_err(|e| WorkFailed::Refused(format!("Cannot make the config drive: {e}")))?,
        };
        if let Some(c) = &configdrive {
            image_info.insert("configdrive".into(), json!(c));
        }
        let mut args = JsonObject::new();
        args.insert("image_info".into(), Value::Object(image_info));
        args.insert("configdrive".into(), json!(configdrive));
        let step = Step {
            interface: "deploy".into(),
            step: "write_image".into(),
            args,
            priority: 80,
            abortable: false,
        };
        self.send_step(node, Flow::Deploy, &step).await
    }

    /// `image_info` as the agent's `write_image` reads it (reference §1.4).
    async fn image_info(&self, node: &mut Node) -> Result<JsonObject, WorkFailed> {
        let text = |n: &Node, k: &str| {
            n.instance_info
                .get(k)
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        let source = text(node, "image_source").ok_or_else(|| {
            WorkFailed::Refused(format!(
                "Node {} has no instance_info.image_source: the image to write",
                node.uuid
            ))
        })?;
        let (url, served) = match text(node, "image_url") {
            Some(u) => (u, None),
            None => self.image_url(node, &source).await?,
        };
        let ii = &node.instance_info;
        let text = |k: &str| ii.get(k).and_then(Value::as_str).map(str::to_string);
        let mut info = JsonObject::new();
        let id = source
            .trim_end_matches('/')
            .rsplit('/')
            .next()
            .unwrap_or(&source)
            .to_string();
        info.insert("id".into(), json!(id));
        info.insert("urls".into(), json!([url]));
        info.insert("node_uuid".into(), json!(node.uuid.to_string()));
        info.insert(
            "stream_raw_images".into(),
            json!(self.settings.agent.stream_raw_images),
        );
        for (from, to) in [
            ("image_disk_format", "disk_format"),
            ("image_container_format", "container_format"),
            ("image_checksum", "checksum"),
            ("image_os_hash_algo", "os_hash_algo"),
            ("image_os_hash_value", "os_hash_value"),
        ] {
            if let Some(v) = text(from) {
                info.insert(to.into(), json!(v));
            }
        }
        // Served by the conductor: checked here, perhaps converted; the agent checks
        // the file it gets.
        if let Some(p) = served {
            info.remove("checksum");
            info.insert("os_hash_algo".into(), json!(p.checksum.algo.name()));
            info.insert("os_hash_value".into(), json!(p.checksum.value));
            info.insert("disk_format".into(), json!(p.disk_format));
        }
        if !info.contains_key("checksum") && !info.contains_key("os_hash_value") {
            return Err(WorkFailed::Refused(format!(
                "Node {} has neither instance_info.image_os_hash_algo and image_os_hash_value nor image_checksum: the agent refuses an image it cannot check",
                node.uuid
            )));
        }
        // Partition images: the agent makes the partitions.
        for k in [
            "kernel",
            "ramdisk",
            "root_gb",
            "root_mb",
            "swap_mb",
            "ephemeral_mb",
            "ephemeral_format",
            "preserve_ephemeral",
            "image_type",
        ] {
            if let Some(v) = ii.get(k) {
                info.insert(k.into(), v.clone());
            }
        }
        if let Some(m) = node_boot_mode(node) {
            info.insert("deploy_boot_mode".into(), json!(m));
        }
        Ok(info)
    }

    /// The URL the agent downloads the image from: an `http(s)://` source as it is
    /// (`image_download_source = http`), else the conductor's copy on its image server
    /// (`instance_image.rs`: verified, perhaps converted to raw), with what the agent
    /// checks it against.
    async fn image_url(
        &self,
        node: &mut Node,
        source: &str,
    ) -> Result<(String, Option<crate::instance_image::Prepared>), WorkFailed> {
        let remote = source.starts_with("http://") || source.starts_with("https://");
        if remote && image_download_source(node, &self.settings.agent) != "local" {
            return Ok((source.to_string(), None));
        }
        let base = self.settings.deploy.agent_http_url().ok_or_else(|| {
            WorkFailed::Refused("No URL for the image server: set [deploy] http_url".into())
        })?;
        let expected = crate::instance_image::Expected::of(&node.instance_info)
            .map_err(|e| WorkFailed::Refused(format!("Cannot check the image: {e}")))?;
        let prepared = self
            .images
            .instance_image(source, &expected, self.settings.agent.allow_md5_checksum)
            .await
            .map_err(|e| WorkFailed::Refused(ironic_model::error::chain(&e)))?;
        let from = prepared.path.clone();
        let rel = format!(
            "agent_images/{}-{}",
            node.uuid,
            uuid::Uuid::new_v4().simple()
        );
        let out = self.settings.deploy.http_root.join(&rel);
        self.images.publish(&from, &out).await.map_err(|e| {
            WorkFailed::Refused(format!("Cannot publish the image for the agent: {e}"))
        })?;
        node.driver_internal_info
            .insert(PUBLISHED_IMAGE.into(), json!(rel));
        Ok((format!("{base}/{rel}"), Some(prepared)))
    }

    /// `prepare_instance_boot`: the partition UUIDs (stored), a boot loader where one
    /// is needed (UEFI: the agent sets the firmware's boot entry), the ramdisk's media
    /// ejected and the disk as the boot device from now on.
    async fn prepare_instance_boot(&self, node: &mut Node) -> Result<(), WorkFailed> {
        let at = AgentAt::of(node).ok_or_else(no_agent)?;
        let uuids = self
            .agent
            .execute(
                &at.endpoint(),
                "standby.get_partition_uuids",
                &json!({}),
                true,
            )
            .await
            .map_err(|e| agent_failed("Cannot read the partition UUIDs", &e))?;
        let parts = uuids.result.clone().unwrap_or(Value::Null);
        let root = parts.get("root uuid").and_then(Value::as_str);
        if let Some(r) = root {
            node.driver_internal_info.insert(ROOT_UUID.into(), json!(r));
        }
        let efi = parts
            .get("efi system partition uuid")
            .and_then(Value::as_str);
        if node_boot_mode(node).as_deref() == Some("uefi")
            && let Some(efi) = efi
        {
            let params = json!({
                "root_uuid": root,
                "efi_system_part_uuid": efi,
                "prep_boot_part_uuid": parts.get("PReP Boot partition uuid"),
                "target_boot_mode": "uefi",
            });
            let r = self
                .agent
                .execute(&at.endpoint(), "image.install_bootloader", &params, true)
                .await
                .map_err(|e| agent_failed("Cannot install the boot loader", &e))?;
            if r.status != CommandStatus::Succeeded {
                return Err(WorkFailed::Refused(format!(
                    "Failed to install a bootloader when deploying node {}: {}",
                    node.uuid,
                    r.error_message()
                        .unwrap_or_else(|| r.status.as_str().into())
                )));
            }
        }
        self.boot_call(node, BootCall::PrepareInstance).await?;
        let changes = self
            .driver_of(node)?
            .management()
            .set_boot_device(
                NodeInfo::from(&*node),
                BootDevice {
                    device: "disk".into(),
                    persistent: true,
                },
            )
            .await?;
        changes.apply(node);
        self.unpublish_instance_image(node).await;
        Ok(())
    }

    /// Deletes the instance image published for the agent, if any.
    pub(super) async fn unpublish_instance_image(&self, node: &mut Node) {
        for key in [PUBLISHED_IMAGE, PUBLISHED_IMAGE_BEFORE] {
            if let Some(rel) = node
                .driver_internal_info
                .remove(key)
                .and_then(|v| v.as_str().map(str::to_string))
            {
                self.images.unpublish(&rel).await;
            }
        }
    }

    /// `tear_down_agent`: logs collected when `[agent] deploy_logs_collect = always`,
    /// then the agent powers the machine off (a clean shut-down of the ramdisk). The
    /// BMC is asked every `[agent] post_deploy_get_power_state_retry_interval` whether
    /// the machine is off, the node unlocked in between (`Outcome::Recheck`: the step
    /// runs again, finding the checks left in [`POWER_OFF_CHECKS`]); after
    /// `post_deploy_get_power_state_retries` checks it is forced off.
    async fn tear_down_agent(&self, node: &mut Node) -> Result<Outcome, WorkFailed> {
        let a = &self.settings.agent;
        let every = std::time::Duration::from_secs(a.post_deploy_get_power_state_retry_interval);
        let left = node
            .driver_internal_info
            .get(POWER_OFF_CHECKS)
            .and_then(Value::as_u64);
        if let Some(left) = left {
            let power = self.driver_of(node)?.power();
            if let Ok(s) = power.get_power_state(NodeInfo::from(&*node)).await
                && s == "power off"
            {
                node.driver_internal_info.remove(POWER_OFF_CHECKS);
                node.power_state = Some(s);
                tracing::info!(node = %node.uuid, "the agent powered the machine off");
                return Ok(Outcome::Done);
            }
            if left > 1 {
                node.driver_internal_info
                    .insert(POWER_OFF_CHECKS.into(), json!(left - 1));
                return Ok(Outcome::Recheck(every));
            }
            node.driver_internal_info.remove(POWER_OFF_CHECKS);
            tracing::info!(node = %node.uuid, "the machine is still on after the agent's power-off; forcing it");
            self.power(node, "power off").await?;
            return Ok(Outcome::Done);
        }
        if self.settings.agent.deploy_logs_collect == "always" {
            self.collect_logs(node, "deploy").await;
        }
        if node.disable_power_off {
            return Ok(Outcome::Done);
        }
        if let Some(at) = AgentAt::of(node) {
            match self
                .agent
                .execute(&at.endpoint(), "standby.power_off", &json!({}), false)
                .await
            {
                Err(e) => {
                    tracing::info!(node = %node.uuid, "the agent did not take the power-off ({e}); forcing it")
                }
                Ok(_) if a.post_deploy_get_power_state_retries == 0 => {}
                Ok(_) => {
                    node.driver_internal_info.insert(
                        POWER_OFF_CHECKS.into(),
                        json!(a.post_deploy_get_power_state_retries),
                    );
                    return Ok(Outcome::Recheck(every));
                }
            }
        }
        self.power(node, "power off").await?;
        Ok(Outcome::Done)
    }

    /// Sends `step` to the agent (`<flow>.execute_<flow>_step`); a command still
    /// running is waited for ([`Outcome::Callback`]).
    async fn send_step(
        &self,
        node: &mut Node,
        flow: Flow,
        step: &Step,
    ) -> Result<Outcome, WorkFailed> {
        let at = AgentAt::of(node).ok_or_else(no_agent)?;
        let ports = self.ports_for_agent(node).await?;
        // The agent's extension of the flow: `deploy`, `clean`, `service`.
        let ext = flow.kind();
        let mut params = json!({
            "step": {
                "interface": step.interface,
                "step": step.step,
                "args": step.args,
                "priority": step.priority,
                "abortable": step.abortable,
            },
            "node": node_for_agent(node),
            "ports": ports,
        });
        params[format!("{ext}_version")] = node
            .driver_internal_info
            .get(HARDWARE_MANAGER_VERSION)
            .cloned()
            .unwrap_or(Value::Null);
        let name = format!("{ext}.execute_{ext}_step");
        let r = match self
            .agent
            .execute(&at.endpoint(), &name, &params, false)
            .await
        {
            Ok(r) => r,
            // Upstream's too: sent again at the next heartbeat.
            Err(AgentError::Busy { .. }) => {
                tracing::info!(node = %node.uuid, step = %step.name(), "the agent is busy; the step is sent again at its next heartbeat");
                AgentWait::Busy.set(node);
                return Ok(Outcome::Callback);
            }
            Err(e) => return Err(agent_failed(&format!("Cannot start {}", step.name()), &e)),
        };
        tracing::info!(node = %node.uuid, step = %step.name(), command = %r.id, status = r.status.as_str(), "in-band step sent to the agent");
        match command_end(&r) {
            Some(Ended::Succeeded) => Ok(Outcome::Done),
            Some(Ended::Failed(why)) => Err(WorkFailed::Refused(why)),
            // Running; or sent with versions the agent no longer has: the continuation
            // asks its steps again and sends the step again.
            None | Some(Ended::HardwareChanged) => {
                AgentWait::Command(Some(r.id.clone())).set(node);
                Ok(Outcome::Callback)
            }
        }
    }

    async fn ports_for_agent(&self, node: &Node) -> Result<Value, WorkFailed> {
        let ports = self.node_ports(node).await?;
        Ok(Value::Array(
            ports
                .iter()
                .map(|p| {
                    json!({
                        "uuid": p.uuid.to_string(),
                        "address": p.address,
                        "pxe_enabled": p.pxe_enabled,
                        "physical_network": p.physical_network,
                        "local_link_connection": p.local_link_connection,
                        "extra": p.extra,
                    })
                })
                .collect(),
        ))
    }

    /// Asks the agent for its steps of `flow` and its hardware managers' versions.
    async fn agent_steps_now(&self, node: &Node, flow: Flow) -> Result<(Value, Value), WorkFailed> {
        let at = AgentAt::of(node).ok_or_else(no_agent)?;
        let ext = match flow {
            Flow::Deploy => "deploy",
            Flow::Clean | Flow::Service => "clean",
        };
        let ports = self.ports_for_agent(node).await?;
        let params = json!({"node": node_for_agent(node), "ports": ports});
        let r = self
            .agent
            .execute(
                &at.endpoint(),
                &format!("{ext}.get_{ext}_steps"),
                &params,
                true,
            )
            .await
            .map_err(|e| agent_failed("Cannot read the agent's steps", &e))?;
        let result = r.result.unwrap_or(Value::Null);
        let steps = result
            .get(format!("{ext}_steps"))
            .cloned()
            .unwrap_or(Value::Null);
        let versions = result
            .get(HARDWARE_MANAGER_VERSION)
            .cloned()
            .unwrap_or(Value::Null);
        Ok((by_interface(&steps, &self.settings.deploy, flow), versions))
    }

    /// A heartbeat of a node's agent was recorded: if the node waits on its agent,
    /// the wait is looked at in the background.
    pub(crate) fn agent_heartbeat(self: &Arc<Self>, nref: NodeRef) {
        let me = self.clone();
        self.work.spawn("agent heartbeat", async move {
            me.agent_continue(nref, "heartbeat").await;
        });
    }

    /// Looks at a node waiting on its agent (see the module's doc): asks the agent,
    /// without the lock, whether what the wait is for happened; if so, goes on
    /// through the step engine. `why` names the event, for the logs.
    pub(crate) async fn agent_continue(self: &Arc<Self>, nref: NodeRef, why: &'static str) {
        let Ok(node) = crate::nodes::read(&self.db, &nref).await else {
            return;
        };
        let Some(flow) = Flow::waiting_in(node.provision_state) else {
            return;
        };
        // A timed wait is its timer's to continue, not the agent's.
        let Some(Wait {
            token,
            resume_at: None,
            agent: Some(waits_for),
            ..
        }) = Wait::of(flow, &node)
        else {
            return;
        };
        if node.maintenance || !ironic_catalog::agent_based(&node) {
            return;
        }
        let news = match waits_for {
            AgentWait::Boot => match self.agent_steps_now(&node, flow).await {
                Ok((steps, versions)) => AgentNews::Booted { steps, versions },
                Err(e) if why == FAST_TRACK => AgentNews::Unreachable(e.to_string()),
                Err(e) => {
                    tracing::info!(node = %node.uuid, event = why, "the agent booted but its steps cannot be read yet: {e}");
                    return;
                }
            },
            AgentWait::Command(id) => {
                let Some(at) = AgentAt::of(&node) else { return };
                let r = match id.as_deref() {
                    Some(id) => self.agent.command(&at.endpoint(), id, false).await,
                    None => self.agent.last_command(&at.endpoint()).await.and_then(|c| {
                        c.ok_or_else(|| AgentError::InvalidUrl {
                            url: at.url.clone(),
                            reason: "the agent ran no command".into(),
                        })
                    }),
                };
                let r = match r {
                    Ok(r) => r,
                    Err(e) => {
                        tracing::info!(node = %node.uuid, event = why, "cannot read the agent's command: {e}");
                        return;
                    }
                };
                match command_end(&r) {
                    None => return,
                    Some(Ended::Succeeded) => AgentNews::Succeeded,
                    Some(Ended::Failed(why)) => AgentNews::Failed(why),
                    Some(Ended::HardwareChanged) => match self.agent_steps_now(&node, flow).await {
                        Ok((steps, versions)) => AgentNews::VersionMismatch { steps, versions },
                        Err(e) => {
                            tracing::info!(node = %node.uuid, "the agent's hardware changed; its steps cannot be read yet: {e}");
                            return;
                        }
                    },
                }
            }
            AgentWait::Busy => AgentNews::Retry,
        };
        tracing::info!(node = %node.uuid, event = why, flow = flow.kind(), "the agent's wait is over");
        self.clone()
            .resume_after_agent(flow, nref, token, news)
            .await;
    }

    /// Follows the in-band command `id` of the wait `token` until it ends (long polls
    /// of the agent), then continues the wait; gives up when the wait ended otherwise.
    pub(super) async fn follow_command(self: Arc<Self>, flow: Flow, nref: NodeRef, token: String) {
        let Ok(node) = crate::nodes::read(&self.db, &nref).await else {
            return;
        };
        let (Some(at), Some(AgentWait::Command(Some(id)))) =
            (AgentAt::of(&node), AgentWait::of(&node))
        else {
            return;
        };
        let limit = flow
            .callback_timeout(&self.settings)
            .max(std::time::Duration::from_secs(60));
        let started = std::time::Instant::now();
        while started.elapsed() < limit {
            match self.agent.command(&at.endpoint(), &id, true).await {
                Ok(r) if r.status != CommandStatus::Running => {
                    self.agent_continue(nref, "command ended").await;
                    return;
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(node = %nref.uuid, "following the agent's command: {e}");
                    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
                }
            }
            // Still the same wait? (A heartbeat may have moved it on, or an abort.)
            let Ok(now) = crate::nodes::read(&self.db, &nref).await else {
                return;
            };
            if !Wait::is(flow, &now, &token) {
                return;
            }
        }
    }

    /// The ramdisk's logs (`log.collect_system_logs`) into `[agent]
    /// deploy_logs_local_path`, as `<node>[_<instance>]_<time>_<label>.tar.gz` (`label`:
    /// the flow, `deploy`, `clean` or `service`). Failures are logged: the logs help,
    /// the flow does not depend on them.
    pub(super) async fn collect_logs(&self, node: &Node, label: &str) {
        let Some(at) = AgentAt::of(node) else {
            return;
        };
        let r = match self
            .agent
            .execute(&at.endpoint(), "log.collect_system_logs", &json!({}), true)
            .await
        {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(node = %node.uuid, "cannot collect the ramdisk's logs: {e}");
                return;
            }
        };
        let Some(b64) = r
            .result
            .as_ref()
            .and_then(|v| v.get("system_logs"))
            .and_then(Value::as_str)
        else {
            tracing::warn!(node = %node.uuid, "the agent sent no logs");
            return;
        };
        let a = &self.settings.agent;
        // Refused before it is decoded: the answer's bound is far larger.
        let decoded = (b64.trim().len() as u64 / 4).saturating_mul(3);
        if decoded > a.deploy_logs_max_bytes {
            tracing::warn!(node = %node.uuid, bytes = decoded, most = a.deploy_logs_max_bytes, "the ramdisk's logs are over [agent] deploy_logs_max_bytes: not kept");
            return;
        }
        use base64::Engine as _;
        let bytes = match base64::engine::general_purpose::STANDARD.decode(b64.trim()) {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(node = %node.uuid, "the agent's logs are not base64: {e}");
                return;
            }
        };
        let dir = &self.settings.agent.deploy_logs_local_path;
        let mut name = node.uuid.to_string();
        if let Some(i) = &node.instance_uuid {
            name.push('_');
            name.push_str(i);
        }
        name.push_str(&format!(
            "_{}_{label}.tar.gz",
            now().format("%Y-%m-%d-%H-%M-%S")
        ));
        let path = dir.join(&name);
        let written = async {
            tokio::fs::create_dir_all(dir).await?;
            // The journal inside may hold the kernel command line: the service's
            // user and group only.
            use tokio::io::AsyncWriteExt;
            let mut f = tokio::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o640)
                .open(&path)
                .await?;
            f.write_all(&bytes).await?;
            f.sync_all().await
        }
        .await;
        let (folder, total, days) = (
            dir.clone(),
            a.deploy_logs_max_total_bytes,
            a.deploy_logs_retention_days,
        );
        if let Ok(gone) =
            tokio::task::spawn_blocking(move || prune_logs(&folder, total, days)).await
            && gone > 0
        {
            tracing::info!(
                archives = gone,
                "old ramdisk log archives removed ([agent] deploy_logs_max_total_bytes, deploy_logs_retention_days)"
            );
        }
        match written {
            Ok(()) => {
                tracing::info!(node = %node.uuid, path = %path.display(), bytes = bytes.len(), "ramdisk logs collected")
            }
            Err(e) => {
                tracing::warn!(node = %node.uuid, path = %path.display(), "cannot write the ramdisk's logs: {e}")
            }
        }
    }

    /// `deploy.prepare` of the `direct` deploy: the node powered off (a deploy
    /// starts from a known state), unless fast-track reuses its running agent.
    pub(super) async fn prepare_direct(&self, node: &mut Node) -> Result<(), WorkFailed> {
        node.instance_info.remove("image_url");
        if !node.disable_power_off && !self.fast_track_now(node) {
            self.power(node, "power off").await?;
        }
        Ok(())
    }

    /// A deploy through the agent ended (done, failed, aborted): the ramdisk's boot
    /// media and files, the published image and the config drive go (the config
    /// drive may hold secrets; it was for this deploy only).
    pub(super) async fn end_agent_deploy(&self, node: &mut Node) {
        if !ironic_catalog::agent_based(node) {
            return;
        }
        self.clean_up_ramdisk(node).await;
        self.unpublish_instance_image(node).await;
        node.instance_info.remove("configdrive");
    }

    /// `deploy.tear_down` of the `direct` deploy: the node powered off, the instance's
    /// boot settings undone.
    pub(super) async fn tear_down_direct(&self, node: &mut Node) -> Result<(), WorkFailed> {
        self.boot_call(node, BootCall::CleanUpInstance).await?;
        self.clean_up_ramdisk(node).await;
        self.unpublish_instance_image(node).await;
        node.driver_internal_info.remove(ROOT_UUID);
        self.power(node, "power off").await
    }

    /// `deploy.prepare_cleaning` of the `direct` deploy: the ramdisk booted; the
    /// cleaning waits for the agent.
    pub(super) async fn prepare_cleaning_direct(&self, node: &mut Node) -> Result<(), WorkFailed> {
        self.boot_agent(node, Purpose::Cleaning).await?;
        Ok(())
    }

    /// `deploy.tear_down_cleaning` of the `direct` deploy: the ramdisk's media ejected,
    /// the node powered off.
    pub(super) async fn tear_down_cleaning_direct(
        &self,
        node: &mut Node,
    ) -> Result<(), WorkFailed> {
        self.clean_up_ramdisk(node).await;
        AgentWait::clear(node);
        if node.disable_power_off {
            return Ok(());
        }
        self.power(node, "power off").await
    }
}

/// Where the agent downloads an `http(s)://` image from: `http` (the source itself) or
/// `local` (the conductor's image server); the node's `instance_info`, then its
/// `driver_info`, then `[agent] image_download_source` (upstream's order).
fn image_download_source<'a>(node: &'a Node, agent: &'a ironic_config::AgentSection) -> &'a str {
    ironic_drivers::boot::node_setting(NodeInfo::from(node), "image_download_source")
        .unwrap_or(&agent.image_download_source)
}

/// Removes the collected log archives of `dir` older than `days` (0: none for age),
/// then the oldest until the folder holds at most `max_total` bytes; how many went.
fn prune_logs(dir: &std::path::Path, max_total: u64, days: u64) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut files: Vec<(std::time::SystemTime, std::path::PathBuf, u64)> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tar.gz"))
        .filter_map(|e| {
            let m = e.metadata().ok()?;
            Some((m.modified().ok()?, e.path(), m.len()))
        })
        .collect();
    files.sort();
    let max_age = std::time::Duration::from_secs(days.saturating_mul(86_400));
    let mut total: u64 = files.iter().map(|f| f.2).sum();
    let mut gone = 0;
    for (t, path, len) in files {
        let old = days > 0 && t.elapsed().is_ok_and(|age| age > max_age);
        if !(old || total > max_total) {
            continue;
        }
        if std::fs::remove_file(&path).is_ok() {
            total -= len;
            gone += 1;
        }
    }
    gone
}

/// What a deploy through the agent needs before it starts (upstream's `validate`):
/// the image and a way to check it, and the ramdisk to boot. `Err`: what is missing.
/// The files it names must be there, inside `[conductor] file_url_allowed_paths`, and
/// the kernel parameters safe for a boot loader's file (`nodes::check_boot_fields`).
/// An MD5 checksum only with `allow_md5` (`[agent] allow_md5_checksum`).
pub(crate) fn check_deploy(
    node: &Node,
    files: &crate::local_files::LocalFiles,
    allow_md5: bool,
) -> Result<(), Error> {
    let ii = &node.instance_info;
    let has = |k: &str| {
        ii.get(k)
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty())
    };
    let mut missing = Vec::new();
    if !has("image_source") {
        missing.push("image_source");
    }
    let checkable =
        has("image_checksum") || (has("image_os_hash_algo") && has("image_os_hash_value"));
    if !checkable {
        missing.push("image_os_hash_algo and image_os_hash_value (or image_checksum)");
    }
    if !missing.is_empty() {
        return Err(Error::invalid(format!(
            "Cannot validate image information for node {} because one or more parameters are missing from its instance_info: {}",
            node.uuid,
            missing.join(", ")
        )));
    }
    for (field, m) in [
        ("instance_info", &node.instance_info),
        ("driver_info", &node.driver_info),
    ] {
        if let Some(v) = m.get("image_download_source")
            && !matches!(v.as_str(), Some("http" | "local"))
        {
            return Err(Error::invalid(format!(
                "Node {} has {field}.image_download_source {v}: use \"http\" (the agent downloads the image from its URL) or \"local\" (from the conductor)",
                node.uuid
            )));
        }
    }
    // What the boot interface needs to boot the ramdisk.
    if let Some(boot) = node
        .interfaces
        .get("boot")
        .and_then(ironic_drivers::boot::named)
    {
        boot.check_ramdisk(NodeInfo::from(node))
            .map_err(|e| Error::invalid(e.to_string()))?;
    }
    if let Ok(crate::instance_image::Expected::Value(c)) =
        crate::instance_image::Expected::of(&node.instance_info)
        && c.algo == crate::instance_image::Algo::Md5
        && !allow_md5
    {
        return Err(Error::invalid(format!(
            "Node {}: {}",
            node.uuid,
            crate::instance_image::MD5_REFUSED
        )));
    }
    crate::nodes::check_boot_fields(files, None, node, true)
}

fn no_agent() -> WorkFailed {
    WorkFailed::Refused("The agent has not checked in yet: no URL to reach it".into())
}

/// How an agent's command ended.
enum Ended {
    Succeeded,
    /// Its error, in the agent's words.
    Failed(String),
    /// The step was sent with hardware-manager versions the agent no longer has
    /// (`CLEAN_VERSION_MISMATCH`): its steps are asked again.
    HardwareChanged,
}

/// How the agent's command ended; `None`: still running.
fn command_end(r: &CommandResult) -> Option<Ended> {
    match &r.status {
        CommandStatus::Running => None,
        CommandStatus::Succeeded => Some(Ended::Succeeded),
        CommandStatus::CleanVersionMismatch => Some(Ended::HardwareChanged),
        _ => Some(Ended::Failed(r.error_message().unwrap_or_else(|| {
            format!("the agent's command {} ended {}", r.name, r.status.as_str())
        }))),
    }
}

/// The boot mode the instance boots in: `instance_info.deploy_boot_mode`, the node's
/// `boot_mode` capability, else what the BMC reported.
fn node_boot_mode(node: &Node) -> Option<String> {
    if let Some(m) = node
        .instance_info
        .get("deploy_boot_mode")
        .and_then(Value::as_str)
    {
        return Some(m.to_string());
    }
    let caps = node
        .properties
        .get("capabilities")
        .and_then(Value::as_str)
        .unwrap_or("");
    if let Some(m) = caps
        .split(',')
        .filter_map(|kv| kv.split_once(':'))
        .find(|(k, _)| k.trim() == "boot_mode")
        .map(|(_, v)| v.trim().to_string())
    {
        return Some(m);
    }
    node.boot_mode.clone()
}

/// The node as the agent's step commands take it: what the agent reads (its
/// properties' root device hints, its instance), without secrets.
fn node_for_agent(node: &Node) -> Value {
    let mut ii = node.instance_info.clone();
    ii.remove("configdrive");
    let mut dii = node.driver_internal_info.clone();
    for k in [agent::TOKEN, agent::VERIFY_CA] {
        dii.remove(k);
    }
    json!({
        "uuid": node.uuid.to_string(),
        "name": node.name,
        "driver": node.driver,
        "properties": node.properties,
        "instance_info": ii,
        "instance_uuid": node.instance_uuid,
        "driver_internal_info": dii,
        "extra": node.extra,
    })
}

/// The agent's steps of `flow` (`{manager: [step]}`) as upstream caches them,
/// `{interface: [step]}`, with `[deploy] erase_devices_priority` and
/// `erase_devices_metadata_priority` applied to the clean steps.
fn by_interface(steps: &Value, deploy: &ironic_config::DeploySection, flow: Flow) -> Value {
    let mut out = serde_json::Map::new();
    let Some(managers) = steps.as_object() else {
        return Value::Object(out);
    };
    for list in managers.values().filter_map(Value::as_array) {
        for s in list {
            let Some(iface) = s.get("interface").and_then(Value::as_str) else {
                continue;
            };
            let mut s = s.clone();
            if flow != Flow::Deploy {
                let over = match s.get("step").and_then(Value::as_str) {
                    Some("erase_devices") => deploy.erase_devices_priority,
                    Some("erase_devices_metadata") => deploy.erase_devices_metadata_priority,
                    _ => None,
                };
                if let Some(p) = over {
                    s["priority"] = json!(p);
                }
            }
            let entry = out
                .entry(iface.to_string())
                .or_insert_with(|| Value::Array(Vec::new()));
            if let Value::Array(a) = entry {
                // The first manager's step of a name wins (the agent lists the most
                // specific first).
                if !a.iter().any(|x| x.get("step") == s.get("step")) {
                    a.push(s);
                }
            }
        }
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_steps_are_cached_by_interface_with_priority_overrides() {
        let reported = json!({
            "GenericHardwareManager": [
                {"interface": "deploy", "step": "erase_devices", "priority": 10},
                {"interface": "deploy", "step": "erase_devices_metadata", "priority": 99},
                {"interface": "raid", "step": "delete_configuration", "priority": 0},
            ],
            "Other": [{"interface": "deploy", "step": "erase_devices", "priority": 50}],
        });
        let deploy = ironic_config::DeploySection {
            erase_devices_priority: Some(0),
            ..Default::default()
        };
        let v = by_interface(&reported, &deploy, Flow::Clean);
        assert_eq!(v["deploy"].as_array().map(Vec::len), Some(2));
        assert_eq!(v["deploy"][0]["priority"], json!(0));
        assert_eq!(v["deploy"][1]["priority"], json!(99));
        assert_eq!(v["raid"][0]["step"], json!("delete_configuration"));
        // Deploy steps keep the agent's priorities.
        let v = by_interface(&reported, &deploy, Flow::Deploy);
        assert_eq!(v["deploy"][0]["priority"], json!(10));
    }

    #[test]
    fn the_boot_mode_comes_from_the_instance_then_the_capabilities() {
        let mut n = Node::blank(
            ironic_model::NodeUuid::new_v4(),
            "fake-hardware".into(),
            ironic_model::Version::MAX,
        );
        n.boot_mode = Some("bios".into());
        assert_eq!(node_boot_mode(&n).as_deref(), Some("bios"));
        n.properties
            .insert("capabilities".into(), json!("a:b, boot_mode:uefi"));
        assert_eq!(node_boot_mode(&n).as_deref(), Some("uefi"));
        n.instance_info
            .insert("deploy_boot_mode".into(), json!("bios"));
        assert_eq!(node_boot_mode(&n).as_deref(), Some("bios"));
    }

    #[test]
    fn the_node_sent_to_the_agent_has_no_secrets() {
        let mut n = Node::blank(
            ironic_model::NodeUuid::new_v4(),
            "fake-hardware".into(),
            ironic_model::Version::MAX,
        );
        n.instance_info.insert("configdrive".into(), json!("H4sI"));
        n.driver_internal_info
            .insert(agent::TOKEN.into(), json!("secret"));
        n.driver_info.insert("redfish_password".into(), json!("pw"));
        let v = node_for_agent(&n).to_string();
        for secret in ["H4sI", "secret", "pw"] {
            assert!(!v.contains(secret), "{v}");
        }
    }
}
