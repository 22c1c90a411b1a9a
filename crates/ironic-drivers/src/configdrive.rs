//! Config drives: the `config-2` ISO 9660 image the agent writes to a partition at the
//! end of the disk, where cloud-init, Ignition or glean in the deployed system read the
//! instance's metadata, network configuration and user data.
//!
//! A client gives a drive in one of two forms (`PUT /v1/nodes/{node}/states/provision`,
//! `configdrive`):
//! - a string: an `http(s)://` URL the agent downloads, or the image itself as base64
//!   of its gzip compression. It goes to the agent as it is; [`check_ready`] refuses
//!   before the deploy what the agent would refuse after writing the image;
//! - (API 1.56) a JSON object `{meta_data, network_data, user_data, vendor_data (1.59)}`,
//!   which [`ConfigDrive::from_json`] reads and [`ConfigDrive::build`] turns into the
//!   string form, as upstream's conductor does (`ironic/conductor/configdrive_utils.py`
//!   `build_configdrive`, which calls openstacksdk's `openstack/baremetal/configdrive.py`
//!   `build`): the same tree, the same `mkisofs` options (here through `xorriso -as
//!   mkisofs`), gzip, base64.
//!
//! The limits are the agent's (ironic-python-agent's `partition_utils.get_configdrive`
//! and `create_config_drive_partition`): inline text must be base64 of gzip data, and the
//! image, once unpacked, at most 64 MiB ([`AGENT_MAX_BYTES`]).
//!
//! A drive can hold secrets (passwords and keys in `meta_data`, whole scripts in
//! `user_data`): nothing here logs its content, and `Debug` shows its shape only.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use base64::Engine;
use serde_json::{Map, Value};

use crate::iso::IsoError;

/// The volume label readers look for (cloud-init's and glean's `config-2`).
pub const LABEL: &str = "config-2";

/// The metadata versions written, each a folder under `openstack/` with the same files
/// (openstacksdk's default).
pub const VERSIONS: [&str; 2] = ["2012-08-10", "latest"];

/// The largest image the agent writes: 64 MiB once unpacked (ironic-python-agent's
/// `MAX_CONFIG_DRIVE_SIZE_MB`); the default of `[deploy] configdrive_max_bytes`.
pub const AGENT_MAX_BYTES: u64 = 64 << 20;

/// The members of the JSON form (upstream's `_CONFIG_DRIVE_SCHEMA` in
/// `ironic/api/controllers/v1/utils.py`).
pub const KEYS: [&str; 4] = ["meta_data", "network_data", "user_data", "vendor_data"];

/// The publisher id openstacksdk gives the image (what upstream's drives carry).
const PUBLISHER: &str = "metalsmith";

/// Base64 as Python's `base64.b64decode` (what the agent runs) reads it: padding
/// required, stray bits after the last character ignored.
const PY_BASE64: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new()
        .with_decode_allow_trailing_bits(true)
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::RequireCanonical),
);

/// A config drive in its JSON form, read by [`ConfigDrive::from_json`].
#[derive(Clone, Default, PartialEq)]
pub struct ConfigDrive {
    /// `meta_data.json`: the instance's uuid, name, hostname, public keys … Always
    /// written (an empty object when the client gave none).
    pub meta_data: Map<String, Value>,
    /// `user_data`, written byte for byte: the client's string, or its object or list
    /// as JSON. `None`: no file (nor for an empty string, as upstream).
    pub user_data: Option<String>,
    /// `network_data.json`; not written when absent or empty.
    pub network_data: Option<Map<String, Value>>,
    /// `vendor_data2.json`; not written when absent or empty.
    pub vendor_data: Option<Map<String, Value>>,
}

/// Only the shape: the content can hold secrets.
impl std::fmt::Debug for ConfigDrive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let keys = |m: &Map<String, Value>| m.keys().cloned().collect::<Vec<_>>();
        f.debug_struct("ConfigDrive")
            .field("meta_data keys", &keys(&self.meta_data))
            .field("user_data bytes", &self.user_data.as_ref().map(String::len))
            .field("network_data keys", &self.network_data.as_ref().map(keys))
            .field("vendor_data keys", &self.vendor_data.as_ref().map(keys))
            .finish()
    }
}

/// Why a config drive was refused or could not be built. None of the messages quotes
/// the drive's content.
#[derive(Debug, thiserror::Error)]
pub enum ConfigDriveError {
    /// The JSON form breaks a rule of upstream's schema.
    #[error("invalid config drive: {0}")]
    Invalid(String),
    #[error(
        "the config drive is neither an http:// or https:// URL nor base64 text ({0}): send a URL, or the image gzipped and base64-encoded"
    )]
    NotBase64(String),
    #[error(
        "the config drive is base64 but not of gzip data: the agent gunzips it, so send the ISO image gzipped, then base64-encoded"
    )]
    NotGzip,
    #[error(
        "the config drive's gzip data cannot be unpacked ({0}): send the ISO image gzipped, then base64-encoded"
    )]
    BadGzip(String),
    #[error(
        "the config drive image is {size} bytes, over the limit of {limit} bytes ([deploy] configdrive_max_bytes; the agent writes at most 64 MiB): make user_data or the metadata smaller"
    )]
    TooLarge { size: u64, limit: u64 },
    /// Unpacking stopped past the limit (so the exact size is unknown).
    #[error(
        "the config drive image is more than {limit} bytes once unpacked ([deploy] configdrive_max_bytes; the agent writes at most 64 MiB): make it smaller"
    )]
    TooLargeUnpacked { limit: u64 },
    #[error(
        "cannot build a config drive: {tool} was not found ({why}); on Debian it comes with the {package} package"
    )]
    MissingTool {
        tool: String,
        package: &'static str,
        why: String,
    },
    #[error("cannot build a config drive: {tool} failed ({status}): {stderr}")]
    ToolFailed {
        tool: String,
        status: String,
        stderr: String,
    },
    #[error(
        "cannot build a config drive: {tool} took more than {:?}",
        crate::iso::TOOL_LIMIT
    )]
    TimedOut { tool: String },
    #[error("cannot build a config drive in {}", .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl From<IsoError> for ConfigDriveError {
    /// What [`crate::iso`]'s tool runner reports, told as a config drive's failure.
    fn from(e: IsoError) -> Self {
        match e {
            IsoError::MissingTool { tool, package, why } => {
                ConfigDriveError::MissingTool { tool, package, why }
            }
            IsoError::ToolFailed {
                tool,
                status,
                stderr,
            } => ConfigDriveError::ToolFailed {
                tool,
                status,
                stderr,
            },
            IsoError::TimedOut { tool } => ConfigDriveError::TimedOut { tool },
            IsoError::Io { path, source } | IsoError::MissingFile { path, source, .. } => {
                ConfigDriveError::Io { path, source }
            }
            IsoError::Params(p) => ConfigDriveError::Invalid(p.to_string()),
            IsoError::KernelParams(p) => ConfigDriveError::Invalid(p.to_string()),
        }
    }
}

use ironic_model::patch::json_type_name as type_name;

impl ConfigDrive {
    /// Reads the JSON form by the rules of upstream's schema: an object whose members
    /// are among [`KEYS`]; `meta_data`, `network_data` and `vendor_data` objects;
    /// `user_data` an object, a list, a string or null. An object or list `user_data`
    /// is written as its JSON text (laid out as Python's `json.dumps` lays it out, as
    /// upstream's `build_configdrive` encodes it); an empty string or null is none.
    pub fn from_json(v: &Value) -> Result<ConfigDrive, ConfigDriveError> {
        let bad = |m: String| Err(ConfigDriveError::Invalid(m));
        let Value::Object(o) = v else {
            return bad(format!(
                "the JSON form of a config drive is an object with {}, not {}",
                KEYS.join(", "),
                type_name(v)
            ));
        };
        let mut drive = ConfigDrive::default();
        for (k, v) in o {
            let object = |v: &Value| match v {
                Value::Object(m) => Ok(m.clone()),
                other => Err(ConfigDriveError::Invalid(format!(
                    "{k} must be a JSON object, not {}",
                    type_name(other)
                ))),
            };
            match k.as_str() {
                "meta_data" => drive.meta_data = object(v)?,
                "network_data" => drive.network_data = Some(object(v)?),
                "vendor_data" => drive.vendor_data = Some(object(v)?),
                "user_data" => {
                    drive.user_data = match v {
                        Value::Null => None,
                        Value::String(s) if s.is_empty() => None,
                        Value::String(s) => Some(s.clone()),
                        Value::Object(_) | Value::Array(_) => Some(py_json(v)),
                        other => {
                            return bad(format!(
                                "user_data must be a JSON object, a list or a string, not {}",
                                type_name(other)
                            ));
                        }
                    }
                }
                _ => {
                    return bad(format!(
                        "unexpected member {k:?}: the JSON form takes only {}",
                        KEYS.join(", ")
                    ));
                }
            }
        }
        Ok(drive)
    }

    /// Upstream's defaults (`build_configdrive`): `meta_data.uuid` is the node's uuid
    /// and `meta_data.name` its name (when it has one), unless the client gave them.
    pub fn with_node_defaults(mut self, node_uuid: &str, node_name: Option<&str>) -> Self {
        if !self.meta_data.contains_key("uuid") {
            self.meta_data.insert("uuid".into(), node_uuid.into());
        }
        if let Some(name) = node_name.filter(|n| !n.is_empty())
            && !self.meta_data.contains_key("name")
        {
            self.meta_data.insert("name".into(), name.into());
        }
        self
    }

    /// The files of the image, path and content: `openstack/<version>/meta_data.json`,
    /// `network_data.json`, `vendor_data2.json` and `user_data` for each of
    /// [`VERSIONS`] (openstacksdk's `populate_directory`).
    pub fn files(&self) -> Vec<(String, Vec<u8>)> {
        let mut out = Vec::new();
        for version in VERSIONS {
            let at = |name: &str| format!("openstack/{version}/{name}");
            out.push((
                at("meta_data.json"),
                py_json(&Value::Object(self.meta_data.clone())).into_bytes(),
            ));
            for (name, part) in [
                ("network_data.json", &self.network_data),
                ("vendor_data2.json", &self.vendor_data),
            ] {
                if let Some(m) = part.as_ref().filter(|m| !m.is_empty()) {
                    out.push((at(name), py_json(&Value::Object(m.clone())).into_bytes()));
                }
            }
            if let Some(u) = &self.user_data {
                out.push((at("user_data"), u.clone().into_bytes()));
            }
        }
        out
    }

    /// The drive as the agent takes it: the files of [`ConfigDrive::files`] in an ISO
    /// 9660 image labelled [`LABEL`] (Rock Ridge and Joliet, built by `xorriso -as
    /// mkisofs` with the options openstacksdk gives `genisoimage`), gzipped, in base64.
    /// An image over `max_bytes` (the size the agent counts: the ISO's; the operator's
    /// `[deploy] configdrive_max_bytes`, by default [`AGENT_MAX_BYTES`]) is refused.
    ///
    /// The tree and the image are written in a folder of their own under the system's
    /// temporary folder (readable by this user only), removed at the end.
    pub async fn build(&self, xorriso: &Path, max_bytes: u64) -> Result<String, ConfigDriveError> {
        let dir = std::env::temp_dir().join(scratch_name());
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| ConfigDriveError::Io { path, source }
        };
        tokio::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .await
            .map_err(io(&dir))?;
        let result = self.build_in(&dir, xorriso, max_bytes).await;
        let _ = tokio::fs::remove_dir_all(&dir).await;
        result
    }

    async fn build_in(
        &self,
        dir: &Path,
        xorriso: &Path,
        max_bytes: u64,
    ) -> Result<String, ConfigDriveError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| ConfigDriveError::Io { path, source }
        };
        let (tree, iso) = (dir.join("tree"), dir.join("config-2.iso"));
        tokio::fs::create_dir(&tree).await.map_err(io(&tree))?;
        for (name, content) in self.files() {
            let path = tree.join(name);
            if let Some(parent) = path.parent() {
                tokio::fs::create_dir_all(parent)
                    .await
                    .map_err(io(parent))?;
            }
            tokio::fs::write(&path, content).await.map_err(io(&path))?;
        }
        let args: Vec<String> = [
            "-as",
            "mkisofs",
            "-o",
            &iso.display().to_string(),
            "-ldots",
            "-allow-lowercase",
            "-allow-multidot",
            "-l",
            "-publisher",
            PUBLISHER,
            "-quiet",
            "-J",
            "-r",
            "-V",
            LABEL,
            &tree.display().to_string(),
        ]
        .map(String::from)
        .to_vec();
        crate::iso::run(xorriso, "xorriso", &args).await?;
        let size = tokio::fs::metadata(&iso).await.map_err(io(&iso))?.len();
        if size > max_bytes {
            return Err(ConfigDriveError::TooLarge {
                size,
                limit: max_bytes,
            });
        }
        let image = tokio::fs::read(&iso).await.map_err(io(&iso))?;
        // Compressing tens of MiB takes a while: off the runtime's threads.
        tokio::task::spawn_blocking(move || pack(&image))
            .await
            .map_err(|e| std::io::Error::other(e.to_string()))
            .and_then(|r| r)
            .map_err(io(&iso))
    }
}

/// gzip (the best compression, as Python's `gzip` module), then base64.
fn pack(image: &[u8]) -> std::io::Result<String> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(image)?;
    let gz = gz.finish()?;
    Ok(base64::engine::general_purpose::STANDARD.encode(gz))
}

/// A name for a build folder no one can guess (so no one can prepare it in a shared
/// temporary folder): the process id, the time and the standard library's random keys.
fn scratch_name() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    format!("ironic-configdrive-{:016x}", h.finish())
}

/// Checks the string form as the agent will read it (ironic-python-agent's
/// `partition_utils.get_configdrive`), so that a drive it would refuse fails the deploy
/// before the disk is written: an `http://` or `https://` URL (any case) is taken as it
/// is (the agent downloads it); anything else must be base64 (white space allowed) of
/// gzip data (the agent gunzips inline text and has no fallback to a plain image),
/// whose unpacked image is at most `max_bytes`. Unpacking stops past the limit, so a
/// small text that unpacks to gigabytes costs no more than the limit.
pub fn check_ready(s: &str, max_bytes: u64) -> Result<(), ConfigDriveError> {
    let starts =
        |p: &str| s.len() >= p.len() && s.as_bytes()[..p.len()].eq_ignore_ascii_case(p.as_bytes());
    if starts("http://") || starts("https://") {
        return Ok(());
    }
    let text: Vec<u8> = s.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    let data = PY_BASE64
        .decode(&text)
        .map_err(|e| ConfigDriveError::NotBase64(e.to_string()))?;
    if !data.starts_with(&[0x1f, 0x8b]) {
        return Err(ConfigDriveError::NotGzip);
    }
    let mut unpacked = flate2::read::MultiGzDecoder::new(data.as_slice()).take(max_bytes + 1);
    let size = std::io::copy(&mut unpacked, &mut std::io::sink())
        .map_err(|e| ConfigDriveError::BadGzip(e.to_string()))?;
    if size > max_bytes {
        return Err(ConfigDriveError::TooLargeUnpacked { limit: max_bytes });
    }
    Ok(())
}

/// What to send the agent for a node's stored `instance_info.configdrive` (upstream's
/// `get_configdrive_image`): none for null or an empty string; a string checked with
/// [`check_ready`] and sent as it is; the JSON form read, given the node's defaults and
/// built. `xorriso` and `max_bytes` as for [`ConfigDrive::build`].
pub async fn for_agent(
    stored: &Value,
    node_uuid: &str,
    node_name: Option<&str>,
    xorriso: &Path,
    max_bytes: u64,
) -> Result<Option<String>, ConfigDriveError> {
    match stored {
        Value::Null => Ok(None),
        Value::String(s) if s.is_empty() => Ok(None),
        Value::String(s) => check_ready(s, max_bytes).map(|()| Some(s.clone())),
        other => {
            let drive = ConfigDrive::from_json(other)?.with_node_defaults(node_uuid, node_name);
            drive.build(xorriso, max_bytes).await.map(Some)
        }
    }
}

/// `v` as Python's `json.dumps` writes it (how upstream writes the drive's files and
/// encodes an object `user_data`): `", "` and `": "` between items, everything but
/// printable ASCII escaped (`\u00e9`). Floats may differ in their exponent's notation.
pub fn py_json(v: &Value) -> String {
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(&mut out, PyFormatter);
    // Writing into memory only fails on a non-string key, which `Value` cannot hold.
    if serde::Serialize::serialize(v, &mut ser).is_err() {
        return v.to_string();
    }
    String::from_utf8(out).unwrap_or_else(|_| v.to_string())
}

struct PyFormatter;

impl serde_json::ser::Formatter for PyFormatter {
    fn begin_array_value<W: ?Sized + Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        if first { Ok(()) } else { w.write_all(b", ") }
    }

    fn begin_object_key<W: ?Sized + Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        if first { Ok(()) } else { w.write_all(b", ") }
    }

    fn begin_object_value<W: ?Sized + Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(b": ")
    }

    fn write_string_fragment<W: ?Sized + Write>(
        &mut self,
        w: &mut W,
        fragment: &str,
    ) -> std::io::Result<()> {
        let mut plain = 0;
        for (i, c) in fragment.char_indices() {
            if c.is_ascii() && c != '\x7f' {
                continue;
            }
            w.write_all(&fragment.as_bytes()[plain..i])?;
            let mut units = [0u16; 2];
            for u in c.encode_utf16(&mut units) {
                write!(w, "\\u{u:04x}")?;
            }
            plain = i + c.len_utf8();
        }
        w.write_all(&fragment.as_bytes()[plain..])
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;
    use std::process::Stdio;

    const UUID: &str = "1be26c0b-03f2-4d2e-ae87-c02d7f33c123";

    fn xorriso() -> &'static Path {
        Path::new("xorriso")
    }

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("configdrive-test-{name}-{}", scratch_name()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// The ISO inside a built drive: base64-decoded and gunzipped, written to `at`.
    fn unpack(drive: &str, at: &Path) {
        let gz = base64::engine::general_purpose::STANDARD
            .decode(drive)
            .unwrap();
        let mut iso = Vec::new();
        flate2::read::GzDecoder::new(gz.as_slice())
            .read_to_end(&mut iso)
            .unwrap();
        std::fs::write(at, iso).unwrap();
    }

    /// The image's volume id, as xorriso reads it back.
    async fn volume_id(iso: &Path) -> String {
        let out = tokio::process::Command::new("xorriso")
            .arg("-indev")
            .arg(iso)
            .arg("-pvd_info")
            .stderr(Stdio::null())
            .output()
            .await
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.lines()
            .find_map(|l| l.strip_prefix("Volume Id    : "))
            .unwrap_or_else(|| panic!("no volume id in {text}"))
            .trim()
            .to_string()
    }

    /// Everything in the image, extracted with its Rock Ridge names into `to`.
    async fn extract_all(iso: &Path, to: &Path) {
        let st = tokio::process::Command::new("xorriso")
            .args(["-osirrox", "on", "-indev"])
            .arg(iso)
            .args(["-extract", "/"])
            .arg(to)
            .stderr(Stdio::null())
            .stdout(Stdio::null())
            .status()
            .await
            .unwrap();
        assert!(st.success());
    }

    fn read_json(p: &Path) -> Value {
        serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
    }

    /// A drive with all four parts holds them under both versions, in an image
    /// labelled `config-2`, with the node's uuid and name in `meta_data.json`.
    #[tokio::test]
    async fn a_drive_with_every_part_reads_back() {
        let d = scratch("all");
        let given = json!({
            "meta_data": {"hostname": "node-1.example.com", "public_keys": {"k": "ssh-ed25519 AAAA"}},
            "network_data": {"links": [{"id": "eth0", "type": "phy", "ethernet_mac_address": "52:54:00:12:34:56"}],
                             "networks": [], "services": []},
            "user_data": "#cloud-config\nhostname: é\n",
            "vendor_data": {"vendor": {"k": 1}},
        });
        let drive = ConfigDrive::from_json(&given)
            .unwrap()
            .with_node_defaults(UUID, Some("node-1"));
        let text = drive.build(xorriso(), AGENT_MAX_BYTES).await.unwrap();
        check_ready(&text, AGENT_MAX_BYTES).unwrap();
        let iso = d.join("cd.iso");
        unpack(&text, &iso);
        assert_eq!(volume_id(&iso).await, "config-2");
        let root = d.join("root");
        extract_all(&iso, &root).await;
        for version in VERSIONS {
            let v = root.join("openstack").join(version);
            let meta = read_json(&v.join("meta_data.json"));
            assert_eq!(meta["uuid"], UUID);
            assert_eq!(meta["name"], "node-1");
            assert_eq!(meta["hostname"], "node-1.example.com");
            assert_eq!(meta["public_keys"]["k"], "ssh-ed25519 AAAA");
            assert_eq!(
                read_json(&v.join("network_data.json")),
                given["network_data"]
            );
            assert_eq!(
                read_json(&v.join("vendor_data2.json")),
                given["vendor_data"]
            );
            assert_eq!(
                std::fs::read(v.join("user_data")).unwrap(),
                "#cloud-config\nhostname: é\n".as_bytes()
            );
            // Laid out as upstream's Python writes it.
            assert!(
                std::fs::read_to_string(v.join("meta_data.json"))
                    .unwrap()
                    .starts_with(r#"{"hostname": "node-1.example.com", "public_keys": {"k": "#),
            );
        }
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// Parts left out, or empty, get no file; `meta_data.json` is always there.
    #[tokio::test]
    async fn absent_or_empty_parts_get_no_file() {
        let d = scratch("empty");
        let drive = ConfigDrive::from_json(&json!({"network_data": {}, "user_data": ""}))
            .unwrap()
            .with_node_defaults(UUID, None);
        let iso = d.join("cd.iso");
        unpack(
            &drive.build(xorriso(), AGENT_MAX_BYTES).await.unwrap(),
            &iso,
        );
        let root = d.join("root");
        extract_all(&iso, &root).await;
        for version in VERSIONS {
            let v = root.join("openstack").join(version);
            let mut names: Vec<_> = std::fs::read_dir(&v)
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            names.sort();
            assert_eq!(names, ["meta_data.json"]);
            assert_eq!(read_json(&v.join("meta_data.json")), json!({"uuid": UUID}));
        }
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// The build folder is gone afterwards, whether the build worked or not.
    #[tokio::test]
    async fn nothing_is_left_in_the_temporary_folder() {
        let before = leftovers();
        let drive = ConfigDrive::default().with_node_defaults(UUID, None);
        drive.build(xorriso(), AGENT_MAX_BYTES).await.unwrap();
        drive.build(xorriso(), 1).await.unwrap_err();
        let _ = drive.build(Path::new("/nonexistent/xorriso"), 1).await;
        let after = leftovers();
        assert!(after.is_subset(&before), "{after:?}");
    }

    fn leftovers() -> std::collections::BTreeSet<String> {
        std::fs::read_dir(std::env::temp_dir())
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.starts_with("ironic-configdrive-"))
            .collect()
    }

    #[test]
    fn the_node_fills_uuid_and_name_only_when_absent() {
        let d = ConfigDrive::from_json(&json!({"meta_data": {"uuid": "mine", "name": "x"}}))
            .unwrap()
            .with_node_defaults(UUID, Some("node-1"));
        assert_eq!(
            Value::Object(d.meta_data),
            json!({"uuid": "mine", "name": "x"})
        );
        let d = ConfigDrive::from_json(&json!({}))
            .unwrap()
            .with_node_defaults(UUID, Some("node-1"));
        assert_eq!(
            Value::Object(d.meta_data),
            json!({"uuid": UUID, "name": "node-1"})
        );
        // A node without a name (or with an empty one) gives none.
        for name in [None, Some("")] {
            let d = ConfigDrive::default().with_node_defaults(UUID, name);
            assert_eq!(Value::Object(d.meta_data), json!({"uuid": UUID}));
        }
        // A null the client gave stays: upstream only fills absent keys.
        let d = ConfigDrive::from_json(&json!({"meta_data": {"uuid": null}}))
            .unwrap()
            .with_node_defaults(UUID, None);
        assert_eq!(d.meta_data["uuid"], Value::Null);
    }

    #[test]
    fn an_object_or_list_user_data_is_written_as_json() {
        let ud = |v: Value| {
            ConfigDrive::from_json(&json!({ "user_data": v }))
                .unwrap()
                .user_data
        };
        assert_eq!(
            ud(json!({"ignition": {"version": "3.4.0"}, "n": [1, 2]})).as_deref(),
            Some(r#"{"ignition": {"version": "3.4.0"}, "n": [1, 2]}"#)
        );
        assert_eq!(ud(json!(["a", "ü"])).as_deref(), Some(r#"["a", "\u00fc"]"#));
        assert_eq!(ud(json!({})).as_deref(), Some("{}"));
        assert_eq!(
            ud(json!("#!/bin/sh\necho ü\n")).as_deref(),
            Some("#!/bin/sh\necho ü\n")
        );
        assert_eq!(ud(json!("")), None);
        assert_eq!(ud(Value::Null), None);
    }

    #[test]
    fn python_layout_escapes_what_python_escapes() {
        assert_eq!(
            py_json(&json!({"a": "x\u{7f}y\n\u{1f600}", "b": [true, null, 1.5]})),
            r#"{"a": "x\u007fy\n\ud83d\ude00", "b": [true, null, 1.5]}"#
        );
    }

    #[test]
    fn the_json_form_follows_upstreams_schema() {
        for (bad, says) in [
            (json!("text"), "is an object"),
            (
                json!({"meta_data": {}, "foo": 1}),
                "unexpected member \"foo\"",
            ),
            (
                json!({"meta_data": "a string"}),
                "meta_data must be a JSON object, not a string",
            ),
            (
                json!({"network_data": 42}),
                "network_data must be a JSON object, not a number",
            ),
            (
                json!({"vendor_data": []}),
                "vendor_data must be a JSON object, not a list",
            ),
            (
                json!({"meta_data": null}),
                "meta_data must be a JSON object, not null",
            ),
            (
                json!({"user_data": 42}),
                "user_data must be a JSON object, a list or a string, not a number",
            ),
        ] {
            let e = ConfigDrive::from_json(&bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
        let all = json!({"meta_data": {}, "network_data": {}, "user_data": {}, "vendor_data": {}});
        ConfigDrive::from_json(&all).unwrap();
    }

    /// The limit counts the image, and the message gives both numbers.
    #[tokio::test]
    async fn a_drive_over_the_limit_is_refused() {
        let drive = ConfigDrive::default().with_node_defaults(UUID, None);
        let e = drive.build(xorriso(), 100_000).await.unwrap_err();
        let ConfigDriveError::TooLarge { size, limit, .. } = e else {
            panic!("{e}");
        };
        assert!(size > 100_000, "{size}");
        assert_eq!(limit, 100_000);
        let m = e.to_string();
        assert!(
            m.contains(&format!("{size} bytes")) && m.contains("limit of 100000 bytes"),
            "{m}"
        );
    }

    #[tokio::test]
    async fn a_missing_xorriso_names_the_package() {
        let e = ConfigDrive::default()
            .build(Path::new("/nonexistent/xorriso"), AGENT_MAX_BYTES)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("/nonexistent/xorriso was not found") && e.contains("xorriso package"),
            "{e}"
        );
    }

    fn gzip_b64(data: &[u8]) -> String {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(data).unwrap();
        base64::engine::general_purpose::STANDARD.encode(gz.finish().unwrap())
    }

    #[test]
    fn ready_strings_are_urls_or_base64_of_gzip_within_the_limit() {
        check_ready("http://example.com/cd", 1).unwrap();
        check_ready("HTTPS://example.com/cd", 1).unwrap();
        let ok = gzip_b64(b"an image");
        check_ready(&ok, 100).unwrap();
        // Line breaks, as `base64` writes them, are fine.
        let wrapped: String = ok
            .as_bytes()
            .chunks(8)
            .map(|c| format!("{}\n", std::str::from_utf8(c).unwrap()))
            .collect();
        check_ready(&wrapped, 100).unwrap();

        let e = |s: &str, max| check_ready(s, max).unwrap_err();
        assert!(matches!(e("abc", 100), ConfigDriveError::NotBase64(_)));
        assert!(matches!(
            e("ftp://example.com/cd", 100),
            ConfigDriveError::NotBase64(_)
        ));
        assert!(matches!(
            e("{\"meta_data\": {}}", 100),
            ConfigDriveError::NotBase64(_)
        ));
        // A plain image in base64: the agent gunzips inline text, with no fallback.
        let plain = base64::engine::general_purpose::STANDARD.encode(b"CD001 an iso");
        assert!(matches!(e(&plain, 100), ConfigDriveError::NotGzip));
        let mut gz = base64::engine::general_purpose::STANDARD
            .decode(gzip_b64(&[0u8; 4096]))
            .unwrap();
        gz.truncate(gz.len() / 2);
        let cut = base64::engine::general_purpose::STANDARD.encode(gz);
        assert!(matches!(e(&cut, 1 << 20), ConfigDriveError::BadGzip(_)));
        // Two MiB of zeros gzip to a few KiB but unpack over a 1 MiB limit.
        let big = gzip_b64(&vec![0u8; 2 << 20]);
        let err = e(&big, 1 << 20);
        assert!(matches!(err, ConfigDriveError::TooLargeUnpacked { limit } if limit == 1 << 20));
        assert!(err.to_string().contains("more than 1048576 bytes"), "{err}");
        check_ready(&big, 2 << 20).unwrap();
    }

    #[tokio::test]
    async fn for_agent_builds_objects_and_passes_strings() {
        let n = |v: Value| async move {
            for_agent(&v, UUID, Some("n"), xorriso(), AGENT_MAX_BYTES).await
        };
        assert_eq!(n(Value::Null).await.unwrap(), None);
        assert_eq!(n(json!("")).await.unwrap(), None);
        let url = "https://example.com/cd";
        assert_eq!(n(json!(url)).await.unwrap().as_deref(), Some(url));
        assert!(n(json!("abc")).await.is_err());
        let built = n(json!({"user_data": "x"})).await.unwrap().unwrap();
        check_ready(&built, AGENT_MAX_BYTES).unwrap();
        assert!(n(json!(7)).await.is_err());
    }

    #[test]
    fn debug_shows_no_content() {
        let d = ConfigDrive::from_json(&json!({
            "meta_data": {"admin_pass": "s3cret"}, "user_data": "password: hunter2"}))
        .unwrap();
        let shown = format!("{d:?}");
        assert!(
            !shown.contains("s3cret") && !shown.contains("hunter2"),
            "{shown}"
        );
        assert!(shown.contains("admin_pass"), "{shown}");
    }
}
