//! The commands of IPA's extensions that the conductor uses, as IPA 13 answers them
//! (upstream `ironic_python_agent/extensions/{base,deploy,clean,standby,image,log,
//! system}.py`, `hardware.py`).
//!
//! One command runs at a time: a POST while the last command is `RUNNING` is refused
//! as busy. A synchronous command's result is final in the POST's answer; an
//! asynchronous one answers `RUNNING`, runs for [`super::AgentConfig::command_duration`]
//! (longer while [`super::Faults::hang`] is on) and then ends, which forces a
//! heartbeat (except after `power_off`/`run_image`: the machine is gone).
//!
//! Nothing is really done: an image "written" only leaves partition UUIDs behind for
//! `standby.get_partition_uuids`.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::{Inner, State, logs};

/// The name IPA gives the generic hardware manager's steps (its class name).
const MANAGER: &str = "GenericHardwareManager";

/// The type of the error IPA wraps any other exception of a command in.
const EXECUTION_ERROR: &str = "CommandExecutionError";

/// The disk the simulated image lands on.
const ROOT_DEVICE: &str = "/dev/vda";

/// A command's state (`command_status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Status {
    Running,
    Succeeded,
    Failed,
    /// The hardware managers' versions differ from those the conductor planned with.
    VersionMismatch,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Status::Running => "RUNNING",
            Status::Succeeded => "SUCCEEDED",
            Status::Failed => "FAILED",
            Status::VersionMismatch => "CLEAN_VERSION_MISMATCH",
        }
    }
}

/// One command's result as the agent keeps it (IPA's `BaseCommandResult`).
#[derive(Debug, Clone)]
pub(super) struct Record {
    pub(super) id: String,
    /// The part of the name after the extension (`execute_deploy_step`).
    command_name: String,
    status: Status,
    /// `command_error`: null or `{"type", "code", "message", "details"}`.
    error: Value,
    /// `command_result`: null or the command's object.
    result: Value,
}

impl Record {
    fn running(id: String, command_name: &str) -> Record {
        Record {
            id,
            command_name: command_name.to_string(),
            status: Status::Running,
            error: Value::Null,
            result: Value::Null,
        }
    }

    fn ended(id: String, command_name: &str, end: End) -> Record {
        let mut r = Record::running(id, command_name);
        r.end(end);
        r
    }

    fn end(&mut self, end: End) {
        (self.status, self.result, self.error) = match end {
            End::Done(result) => (Status::Succeeded, result, Value::Null),
            End::Failed(e) => (Status::Failed, Value::Null, e.to_json()),
            End::Mismatch(e) => (Status::VersionMismatch, Value::Null, e.to_json()),
        };
    }

    pub(super) fn is_running(&self) -> bool {
        self.status == Status::Running
    }

    /// The JSON IPA serialises a result as.
    pub(super) fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "command_name": self.command_name,
            "command_status": self.status.as_str(),
            "command_error": self.error,
            "command_result": self.result,
        })
    }
}

/// A command refused before it ran: the HTTP status and IPA's `faultstring`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Refusal {
    pub(super) status: u16,
    pub(super) message: String,
}

impl Refusal {
    /// IPA's `InvalidCommandError` (400).
    fn invalid_command(details: &str) -> Refusal {
        Refusal {
            status: 400,
            message: format!("Invalid command: {details}"),
        }
    }

    /// IPA's `InvalidCommandParamsError` (400).
    fn invalid_params(details: &str) -> Refusal {
        Refusal {
            status: 400,
            message: format!("Invalid command parameters: {details}"),
        }
    }

    /// IPA's `AgentIsBusy` (409); `command` is the one still running.
    fn busy(command: &str) -> Refusal {
        Refusal {
            status: 409,
            message: format!("Agent is busy: executing command {command}"),
        }
    }

    /// IPA's `RequestedObjectNotFoundError` (404).
    pub(super) fn not_found(what: &str, id: &str) -> Refusal {
        Refusal {
            status: 404,
            message: format!("Not found: {what} with id {id} not found."),
        }
    }
}

/// The error a command ends with (an IPA `RESTError`, serialised).
#[derive(Debug, Clone)]
struct CommandError {
    /// The error's class name in IPA.
    kind: &'static str,
    code: u16,
    message: String,
    details: String,
}

impl CommandError {
    /// IPA's `CommandExecutionError`: what any other exception in a command becomes.
    fn execution(details: String) -> CommandError {
        CommandError {
            kind: EXECUTION_ERROR,
            code: 500,
            message: "Command execution failed".to_string(),
            details,
        }
    }

    /// A failure [`super::Faults::fail_step`] asked for: the message as both the
    /// message and the details, so it reaches `last_error` whichever one the conductor
    /// reads.
    fn injected(kind: &'static str, message: &str) -> CommandError {
        CommandError {
            kind,
            code: 500,
            message: message.to_string(),
            details: message.to_string(),
        }
    }

    fn to_json(&self) -> Value {
        json!({
            "type": self.kind,
            "code": self.code,
            "message": self.message,
            "details": self.details,
        })
    }
}

/// How a command ended.
#[derive(Debug, Clone)]
enum End {
    Done(Value),
    Failed(CommandError),
    Mismatch(CommandError),
}

/// A command the fake knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Command {
    Sync(SyncCommand),
    Async(AsyncCommand),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SyncCommand {
    DeploySteps,
    CleanSteps,
    PartitionUuids,
    FlushBuffers,
    CollectLogs,
    Lockdown,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AsyncCommand {
    DeployStep,
    CleanStep,
    PrepareImage,
    PowerOff,
    RunImage,
    InstallBootloader,
}

impl AsyncCommand {
    /// Whether the machine is gone (off, or booted into the instance) once it ends.
    fn leaves(self) -> bool {
        matches!(self, AsyncCommand::PowerOff | AsyncCommand::RunImage)
    }
}

/// The command `<ext>.<cmd>` names: 404 for an unknown extension, 400 for an unknown
/// command of a known one (IPA's order and statuses).
fn command(ext: &str, cmd: &str) -> Result<Command, Refusal> {
    use AsyncCommand as A;
    use Command::{Async, Sync};
    use SyncCommand as S;
    let known = match (ext, cmd) {
        ("deploy", "get_deploy_steps") => Some(Sync(S::DeploySteps)),
        ("deploy", "execute_deploy_step") => Some(Async(A::DeployStep)),
        ("clean", "get_clean_steps") => Some(Sync(S::CleanSteps)),
        ("clean", "execute_clean_step") => Some(Async(A::CleanStep)),
        ("standby", "get_partition_uuids") => Some(Sync(S::PartitionUuids)),
        ("standby", "sync") => Some(Sync(S::FlushBuffers)),
        ("standby", "prepare_image") => Some(Async(A::PrepareImage)),
        ("standby", "power_off") => Some(Async(A::PowerOff)),
        ("standby", "run_image") => Some(Async(A::RunImage)),
        ("log", "collect_system_logs") => Some(Sync(S::CollectLogs)),
        ("image", "install_bootloader") => Some(Async(A::InstallBootloader)),
        ("system", "lockdown") => Some(Sync(S::Lockdown)),
        _ => None,
    };
    match known {
        Some(c) => Ok(c),
        None if matches!(
            ext,
            "deploy" | "clean" | "standby" | "log" | "image" | "system"
        ) =>
        {
            Err(Refusal::invalid_command(&format!("Unknown command: {cmd}")))
        }
        None => Err(Refusal::not_found("Extension", ext)),
    }
}

/// Runs `name` (`<extension>.<command>`) with `params`, as IPA's `execute_command`:
/// the id of its result, or why it was refused. An asynchronous command goes on in a
/// task after this returns.
pub(super) fn execute(
    inner: &Arc<Inner>,
    name: &str,
    params: Map<String, Value>,
) -> Result<String, Refusal> {
    let Some((ext, cmd)) = name.split_once('.') else {
        return Err(Refusal::invalid_command(
            "Command name must be of the form <extension>.<name>",
        ));
    };
    let mut state = inner.state();
    let running = state.results.last().filter(|r| r.is_running());
    if let Some(r) = running {
        return Err(Refusal::busy(&r.command_name));
    }
    if inner.faults.is_busy(name) {
        return Err(Refusal::busy(cmd));
    }
    let command = command(ext, cmd)?;
    if command == Command::Async(AsyncCommand::PrepareImage) {
        // IPA validates before it starts the command's thread.
        validate_image_info(params.get("image_info"), state.md5_enabled)
            .map_err(|e| Refusal::invalid_params(&e.to_string()))?;
    }
    let id = uuid::Uuid::new_v4().to_string();
    state
        .received
        .push(json!({"name": name, "params": Value::Object(params.clone())}));
    match command {
        Command::Sync(c) => {
            let end = run_sync(inner, &mut state, c, &params);
            state.results.push(Record::ended(id.clone(), cmd, end));
            if c == SyncCommand::Lockdown {
                state.locked_down = true;
            }
        }
        Command::Async(c) => {
            state.results.push(Record::running(id.clone(), cmd));
            tokio::spawn(run_async(inner.clone(), id.clone(), c, params));
        }
    }
    drop(state);
    inner.command_changed();
    Ok(id)
}

/// A synchronous command's outcome.
fn run_sync(inner: &Inner, state: &mut State, c: SyncCommand, params: &Map<String, Value>) -> End {
    match c {
        SyncCommand::DeploySteps => steps_answer(inner, params, "deploy_steps", deploy_steps()),
        SyncCommand::CleanSteps => steps_answer(inner, params, "clean_steps", clean_steps()),
        SyncCommand::PartitionUuids => {
            End::Done(state.partition_uuids.clone().unwrap_or_else(|| json!({})))
        }
        SyncCommand::FlushBuffers | SyncCommand::Lockdown => End::Done(Value::Null),
        SyncCommand::CollectLogs => match logs::system_logs(&journal(inner, state)) {
            Ok(logs) => End::Done(json!({"system_logs": logs})),
            Err(e) => End::Failed(CommandError::execution(format!(
                "could not pack the logs: {e}"
            ))),
        },
    }
}

/// `get_deploy_steps`/`get_clean_steps`: the steps under the manager's name, and the
/// versions the conductor must send back with each step.
fn steps_answer(inner: &Inner, params: &Map<String, Value>, key: &str, steps: Value) -> End {
    if let Err(e) = require(params, &["node", "ports"]) {
        return End::Failed(e);
    }
    End::Done(json!({
        key: {MANAGER: steps},
        "hardware_manager_version": inner.hardware_versions(),
    }))
}

/// A Python call without a required argument fails with a `TypeError`, which IPA turns
/// into a failed command.
fn require(params: &Map<String, Value>, names: &[&str]) -> Result<(), CommandError> {
    match names.iter().find(|n| !params.contains_key(**n)) {
        Some(missing) => Err(CommandError::execution(format!(
            "missing required argument '{missing}'"
        ))),
        None => Ok(()),
    }
}

/// The body of an asynchronous command: checks, the simulated work, the outcome, and
/// what its end sets off.
async fn run_async(inner: Arc<Inner>, id: String, c: AsyncCommand, params: Map<String, Value>) {
    let early = precheck(&inner, c, &params);
    if early.is_none() && !work(&inner).await {
        return;
    }
    let left = {
        let mut state = inner.state();
        let end = match early {
            Some(end) => end,
            None => finish(&inner, &mut state, c, &params),
        };
        let left = c.leaves() && matches!(end, End::Done(_));
        if let Some(r) = state.results.iter_mut().find(|r| r.id == id) {
            r.end(end);
        }
        state.gone |= left;
        left
    };
    inner.command_changed();
    if !left && inner.faults.forces_heartbeats() {
        inner.force_heartbeat();
    }
}

/// What IPA checks first when a step command starts: the hardware managers' versions,
/// then the arguments. `None`: go on.
fn precheck(inner: &Inner, c: AsyncCommand, params: &Map<String, Value>) -> Option<End> {
    let (kind, version_key) = match c {
        AsyncCommand::DeployStep => ("deploy", "deploy_version"),
        AsyncCommand::CleanStep => ("clean", "clean_version"),
        _ => return None,
    };
    let current = inner.hardware_versions();
    let sent = params.get(version_key).filter(|v| !v.is_null());
    let differs = sent.is_some_and(|v| *v != current);
    // Consumed by this step whether or not the versions differ.
    let forced = inner.faults.take_mismatch();
    if differs || forced {
        let sent = sent.map_or_else(|| "the same".to_string(), Value::to_string);
        return Some(End::Mismatch(CommandError {
            kind: "VersionMismatch",
            code: 409,
            message: "The hardware managers' versions changed: restart the process with the agent's steps".to_string(),
            details: format!("agent versions: {current}, versions sent: {sent}"),
        }));
    }
    if let Err(e) = require(params, &["step", "node", "ports"]) {
        return Some(End::Failed(e));
    }
    let named = params
        .get("step")
        .and_then(|s| s.get("step"))
        .is_some_and(Value::is_string);
    if !named {
        return Some(End::Failed(CommandError::execution(format!(
            "malformed {kind} step, no \"step\" key: {}",
            params.get("step").unwrap_or(&Value::Null)
        ))));
    }
    None
}

/// Waits [`super::AgentConfig::command_duration`], then while
/// [`super::Faults::hang`] is on. `false` if the agent stopped meanwhile.
async fn work(inner: &Inner) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(inner.cfg.command_duration) => {}
        _ = inner.stopped() => return false,
    }
    let mut hang = inner.faults.hang.subscribe();
    tokio::select! {
        _ = hang.wait_for(|h| !*h) => true,
        _ = inner.stopped() => false,
    }
}

/// How an asynchronous command that ran ends.
fn finish(inner: &Inner, state: &mut State, c: AsyncCommand, params: &Map<String, Value>) -> End {
    let failure = |key: &str| inner.faults.failure_of(key);
    match c {
        AsyncCommand::DeployStep => step_end(inner, state, params, "deploy"),
        AsyncCommand::CleanStep => step_end(inner, state, params, "clean"),
        AsyncCommand::PrepareImage => match failure("standby.prepare_image") {
            Some(msg) => End::Failed(CommandError::injected(EXECUTION_ERROR, &msg)),
            None => End::Done(json!({"result": write_image(state, params.get("image_info"))})),
        },
        AsyncCommand::PowerOff => plain_end(failure("standby.power_off")),
        AsyncCommand::RunImage => plain_end(failure("standby.run_image")),
        AsyncCommand::InstallBootloader => plain_end(failure("image.install_bootloader")),
    }
}

/// A command without a result: done, or failed as asked.
fn plain_end(failure: Option<String>) -> End {
    match failure {
        Some(msg) => End::Failed(CommandError::injected(EXECUTION_ERROR, &msg)),
        None => End::Done(Value::Null),
    }
}

/// How a deploy or clean step ends (`kind` is `deploy` or `clean`): failed as asked,
/// unknown to the hardware manager, or done with `{"<kind>_result": …,
/// "<kind>_step": <the step as sent>}`.
fn step_end(inner: &Inner, state: &mut State, params: &Map<String, Value>, kind: &str) -> End {
    let step = params.get("step").cloned().unwrap_or(Value::Null);
    let text = |k: &str| step.get(k).and_then(Value::as_str).unwrap_or_default();
    let (interface, name) = (text("interface"), text("step"));
    let error_kind = if kind == "deploy" {
        "DeploymentError"
    } else {
        "CleaningError"
    };
    if let Some(msg) = inner.faults.failure_of(&format!("{interface}.{name}")) {
        return End::Failed(CommandError::injected(error_kind, &msg));
    }
    if !manager_has(name) {
        // IPA dispatches by method name, whatever the interface.
        return End::Failed(CommandError {
            kind: "HardwareManagerMethodNotFound",
            code: 500,
            message: "No hardware manager handles this step".to_string(),
            details: format!("no hardware manager has a method {name}"),
        });
    }
    let result = if name == "write_image" {
        // The step's arguments come in `args` (merged over the call's own).
        let args = step.get("args");
        let image_info = args
            .and_then(|a| a.get("image_info"))
            .or_else(|| params.get("image_info"));
        if let Err(e) = validate_image_info(image_info, state.md5_enabled) {
            return End::Failed(CommandError {
                kind: "InvalidCommandParamsError",
                code: 400,
                message: "Invalid command parameters".to_string(),
                details: e.to_string(),
            });
        }
        // `write_image` runs `standby.prepare_image` and returns its result.
        json!({"result": write_image(state, image_info)})
    } else {
        Value::Null
    };
    End::Done(json!({
        format!("{kind}_result"): result,
        format!("{kind}_step"): step,
    }))
}

/// "Writes" the image: records the partition UUIDs IPA would have found and returns
/// `prepare_image`'s message, whose `root_uuid=` older conductors parse.
fn write_image(state: &mut State, image_info: Option<&Value>) -> String {
    let info = image_info.cloned().unwrap_or(Value::Null);
    let text = |k: &str| info.get(k).and_then(Value::as_str).unwrap_or_default();
    let uefi = text("deploy_boot_mode") == "uefi";
    let (uuids, root, efi) = if text("image_type") == "partition" {
        // A partition image: IPA partitions the disk and reports filesystem UUIDs.
        let root = uuid::Uuid::new_v4().to_string();
        let efi = uefi.then(|| uuid::Uuid::new_v4().to_string());
        let mut partitions = json!({"root": format!("{ROOT_DEVICE}1")});
        if efi.is_some() {
            partitions["efi system partition"] = json!(format!("{ROOT_DEVICE}2"));
        }
        let uuids = json!({
            "partitions": partitions,
            "root uuid": root,
            "efi system partition uuid": efi,
        });
        (uuids, root, efi)
    } else {
        // A whole-disk image: the disk's MBR identifier.
        let id = uuid::Uuid::new_v4().as_u128() as u32;
        let root = format!("0x{id:08x}");
        (json!({"root uuid": root}), root, None)
    };
    state.partition_uuids = Some(uuids);
    let mut msg = format!(
        "prepare_image: image ({}) written to device {ROOT_DEVICE} root_uuid={root}",
        text("id")
    );
    if let (true, Some(efi)) = (uefi, efi) {
        msg.push_str(&format!(" efi_system_partition_uuid={efi}"));
    }
    msg
}

/// IPA's checks of `image_info` (`standby._validate_image_info`): an `id`, a non-empty
/// list of `urls`, and something to verify the image by: a `checksum` (an MD5 one only
/// if the lookup allowed MD5) or the `os_hash_algo`/`os_hash_value` pair.
fn validate_image_info(
    image_info: Option<&Value>,
    md5_enabled: bool,
) -> Result<(), ImageInfoError> {
    let empty = Map::new();
    let info = image_info.and_then(Value::as_object).unwrap_or(&empty);
    for field in ["id", "urls"] {
        if !info.contains_key(field) {
            return Err(ImageInfoError::Missing(field));
        }
    }
    if info["urls"].as_array().is_none_or(Vec::is_empty) {
        return Err(ImageInfoError::NoUrls);
    }
    let mut verifiable = false;
    if let Some(checksum) = info.get("checksum").filter(|c| !c.is_null()) {
        let Some(checksum) = checksum.as_str().filter(|c| !c.is_empty()) else {
            return Err(ImageInfoError::NotText("checksum"));
        };
        let url = ["http://", "https://", "file://"]
            .iter()
            .any(|p| checksum.starts_with(p));
        verifiable = url || checksum.len() > 32 || md5_enabled;
    }
    let truthy = |k: &str| {
        info.get(k)
            .is_some_and(|v| !(v.is_null() || v.as_str() == Some("")))
    };
    if truthy("os_hash_algo") || truthy("os_hash_value") {
        for k in ["os_hash_algo", "os_hash_value"] {
            if info
                .get(k)
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                return Err(ImageInfoError::NotText(k));
            }
        }
        verifiable = true;
    }
    if !verifiable {
        return Err(ImageInfoError::Unverifiable);
    }
    Ok(())
}

/// What IPA refuses in an `image_info` (its words are the agent's).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ImageInfoError {
    #[error("image_info has no '{0}'")]
    Missing(&'static str),
    #[error("image_info's 'urls' must be a list of at least one URL")]
    NoUrls,
    #[error("image_info's '{0}' must be a non-empty string")]
    NotText(&'static str),
    #[error(
        "image_info has nothing to verify the image by: give 'checksum' (not MD5 unless the lookup enabled it) or 'os_hash_algo' with 'os_hash_value'"
    )]
    Unverifiable,
}

/// What the simulated journal holds: the agent's start, its node and its commands.
fn journal(inner: &Inner, state: &State) -> String {
    let mut out = format!(
        "{:.3} ironic-python-agent[1]: simulated agent {} started, API on {}\n",
        inner.started_at, inner.cfg.version, inner.url
    );
    if let Some(uuid) = &state.node_uuid {
        out.push_str(&format!(
            "{:.3} ironic-python-agent[1]: looked up as node {uuid}\n",
            inner.started_at
        ));
    }
    for r in &state.results {
        out.push_str(&format!(
            "{:.3} ironic-python-agent[1]: command {} ({}) {}\n",
            inner.started_at,
            r.command_name,
            r.id,
            r.status.as_str()
        ));
    }
    out
}

/// Whether the generic hardware manager has a method `name` (IPA runs a step by its
/// name alone).
fn manager_has(name: &str) -> bool {
    let named = |steps: Value| {
        steps.as_array().is_some_and(|a| {
            a.iter()
                .any(|s| s.get("step").and_then(Value::as_str) == Some(name))
        })
    };
    named(deploy_steps()) || named(clean_steps())
}

/// A step of the generic hardware manager. Clean steps say whether they can be
/// aborted; deploy steps do not (as IPA declares them).
fn step(interface: &str, name: &str, priority: u32, abortable: Option<bool>) -> Value {
    let mut s = json!({
        "step": name,
        "priority": priority,
        "interface": interface,
        "reboot_requested": false,
    });
    if let Some(a) = abortable {
        s["abortable"] = json!(a);
    }
    s
}

/// `step` with its arguments' descriptions (`argsinfo`).
fn with_args(mut s: Value, argsinfo: Value) -> Value {
    s["argsinfo"] = argsinfo;
    s
}

/// `argsinfo` of `raid.apply_configuration`.
fn raid_args() -> Value {
    json!({
        "raid_config": {"description": "The RAID configuration to apply.", "required": true},
        "delete_existing": {
            "description": "Whether to delete the existing RAID configuration first (default true).",
            "required": false,
        },
    })
}

/// `argsinfo` of `deploy.clean_uefi_nvram`.
fn nvram_args() -> Value {
    json!({
        "match_patterns": {
            "description": "A JSON list of regular expressions; UEFI NVRAM entries matching one are deleted.",
            "required": false,
        },
    })
}

/// `argsinfo` of `deploy.inject_files`.
fn inject_args() -> Value {
    json!({
        "files": {
            "description": "The files to inject: a list of objects with 'path', 'partition', 'content' (base64), 'mode' and 'dirmode'.",
            "required": false,
        },
        "verify_ca": {
            "description": "Whether to verify TLS certificates when fetching content.",
            "required": false,
        },
    })
}

/// The generic hardware manager's clean steps (IPA 13 `get_clean_steps`): metadata
/// erasure at 99 and the full erasure at 10 run by default, the rest on request.
pub(super) fn clean_steps() -> Value {
    let clean = |i: &str, n: &str, p: u32| step(i, n, p, Some(true));
    json!([
        clean("deploy", "erase_devices", 10),
        clean("deploy", "erase_devices_metadata", 99),
        clean("deploy", "erase_devices_express", 0),
        clean("deploy", "erase_pstore", 0),
        with_args(clean("deploy", "clean_uefi_nvram", 0), nvram_args()),
        clean("raid", "delete_configuration", 0),
        clean("raid", "create_configuration", 0),
        clean("deploy", "burnin_cpu", 0),
        clean("deploy", "burnin_gpu", 0),
        clean("deploy", "burnin_disk", 0),
        clean("deploy", "burnin_memory", 0),
        clean("deploy", "burnin_network", 0),
    ])
}

/// The generic hardware manager's deploy steps (IPA 13 `get_deploy_steps`): all at
/// priority 0, run only when the conductor or a deploy template asks
/// (`inject_files` at IPA's default `inject_files_priority`, 0).
pub(super) fn deploy_steps() -> Value {
    let deploy = |i: &str, n: &str| step(i, n, 0, None);
    json!([
        deploy("deploy", "erase_devices_metadata"),
        with_args(deploy("raid", "apply_configuration"), raid_args()),
        with_args(deploy("deploy", "clean_uefi_nvram"), nvram_args()),
        deploy("deploy", "write_image"),
        with_args(deploy("deploy", "inject_files"), inject_args()),
        deploy("deploy", "execute_bootc_install"),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_extensions_are_404_and_unknown_commands_400() {
        assert_eq!(command("nope", "x").map_err(|r| r.status), Err(404));
        assert_eq!(command("deploy", "nope").map_err(|r| r.status), Err(400));
        assert_eq!(
            command("standby", "power_off"),
            Ok(Command::Async(AsyncCommand::PowerOff))
        );
    }

    #[test]
    fn the_generic_manager_declares_ipas_priorities() {
        let priority = |steps: Value, name: &str| {
            steps
                .as_array()
                .and_then(|a| a.iter().find(|s| s["step"] == name))
                .map(|s| s["priority"].clone())
        };
        assert_eq!(
            priority(clean_steps(), "erase_devices_metadata"),
            Some(json!(99))
        );
        assert_eq!(priority(clean_steps(), "erase_devices"), Some(json!(10)));
        assert_eq!(priority(clean_steps(), "erase_pstore"), Some(json!(0)));
        assert_eq!(priority(deploy_steps(), "write_image"), Some(json!(0)));
        assert!(manager_has("delete_configuration"));
        assert!(!manager_has("make_coffee"));
        // Deploy steps carry no `abortable`, clean steps do.
        assert!(deploy_steps()[0].get("abortable").is_none());
        assert_eq!(clean_steps()[0]["abortable"], json!(true));
    }

    #[test]
    fn image_info_needs_an_id_urls_and_a_usable_checksum() {
        let ok = json!({"id": "i", "urls": ["http://x/i"], "os_hash_algo": "sha256", "os_hash_value": "ab"});
        assert_eq!(validate_image_info(Some(&ok), false), Ok(()));
        let md5 = json!({"id": "i", "urls": ["http://x/i"], "checksum": "d41d8cd98f00b204e9800998ecf8427e"});
        assert!(validate_image_info(Some(&md5), false).is_err());
        assert_eq!(validate_image_info(Some(&md5), true), Ok(()));
        let sha = json!({"id": "i", "urls": ["http://x/i"], "checksum": "a".repeat(64)});
        assert_eq!(validate_image_info(Some(&sha), false), Ok(()));
        let no_urls = json!({"id": "i", "urls": [], "checksum": "a".repeat(64)});
        assert!(validate_image_info(Some(&no_urls), false).is_err());
        let half_pair = json!({"id": "i", "urls": ["u"], "os_hash_algo": "sha256"});
        assert!(validate_image_info(Some(&half_pair), false).is_err());
        assert!(validate_image_info(None, true).is_err());
    }

    #[test]
    fn a_whole_disk_image_leaves_the_disk_identifier_a_partition_image_uuids() {
        let mut state = State::default();
        let msg = write_image(&mut state, Some(&json!({"id": "img"})));
        let uuids = state.partition_uuids.clone().unwrap();
        let root = uuids["root uuid"].as_str().unwrap().to_string();
        assert!(root.starts_with("0x") && root.len() == 10, "{root}");
        assert!(msg.ends_with(&format!("root_uuid={root}")), "{msg}");
        assert_eq!(uuids.as_object().unwrap().len(), 1);

        let info = json!({"id": "img", "image_type": "partition", "deploy_boot_mode": "uefi"});
        let msg = write_image(&mut state, Some(&info));
        let uuids = state.partition_uuids.clone().unwrap();
        assert!(uuids["efi system partition uuid"].is_string());
        assert_eq!(uuids["partitions"]["root"], "/dev/vda1");
        assert!(msg.contains("efi_system_partition_uuid="), "{msg}");
    }
}
