//! A node's network interfaces: ports (one NIC each, by MAC address) and port groups
//! (bonds of ports on the same node). Which fields exist at which microversion, the
//! checks of every settable field (upstream's schema and messages), and the rules that
//! tie a port to its port group. The conductor applies them under the node's lock.

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

use crate::ids::{NodeUuid, PortUuid, PortgroupUuid};
use crate::names::{is_valid_logical_name, py_repr_str};
use crate::node::JsonObject;
use crate::patch::py_repr;
use crate::{Error, NodeId, Version};

/// A port as stored, with its node's and port group's uuids.
#[derive(Debug, Clone, PartialEq)]
pub struct Port {
    pub id: i64,
    pub uuid: PortUuid,
    /// A MAC address, lower case.
    pub address: String,
    pub node_id: NodeId,
    pub node_uuid: NodeUuid,
    pub portgroup_id: Option<i64>,
    pub portgroup_uuid: Option<PortgroupUuid>,
    pub extra: JsonObject,
    /// Written by the conductor only (`tenant_vif_port_id` …).
    pub internal_info: JsonObject,
    pub local_link_connection: JsonObject,
    pub pxe_enabled: bool,
    pub physical_network: Option<String>,
    pub is_smartnic: bool,
    pub name: Option<String>,
    pub description: Option<String>,
    pub vendor: Option<String>,
    pub category: Option<String>,
    pub available_for_dynamic_portgroup: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: Option<DateTime<Utc>>,
}

/// A port group as stored, with its node's uuid.
#[derive(Debug, Clone, PartialEq)]
pub struct Portgroup {
    pub id: i64,
    pub uuid: PortgroupUuid,
    pub name: Option<String>,
    pub address: Option<String>,
    pub node_id: NodeId,
    pub node_uuid: NodeUuid,
    pub extra: JsonObject,
    pub internal_info: JsonObject,
    pub mode: String,
    pub properties: JsonObject,
    pub standalone_ports_supported: bool,
    pub physical_network: Option<String>,
    pub category: Option<String>,
    /// Read-only: created by the conductor for dynamic bonding (never here yet).
    pub dynamic_portgroup: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: Option<DateTime<Utc>>,
}

/// A port's fields in upstream's order, with the microversion that added each.
/// `links` goes between `available_for_dynamic_portgroup` and `portgroup_uuid`.
pub const PORT_FIELDS: &[(&str, u16)] = &[
    ("uuid", 1),
    ("created_at", 1),
    ("updated_at", 1),
    ("address", 1),
    ("extra", 1),
    ("internal_info", 18),
    ("is_smartnic", 53),
    ("local_link_connection", 19),
    ("physical_network", 34),
    ("pxe_enabled", 19),
    ("node_uuid", 1),
    ("name", 88),
    ("description", 97),
    ("vendor", 100),
    ("category", 101),
    ("available_for_dynamic_portgroup", 111),
    ("portgroup_uuid", 24),
];

pub const PORT_DEFAULT_LIST_FIELDS: &[&str] = &["uuid", "address"];

/// A port group's fields in upstream's order (`links` and `ports` follow).
pub const PORTGROUP_FIELDS: &[(&str, u16)] = &[
    ("uuid", 1),
    ("created_at", 1),
    ("updated_at", 1),
    ("address", 1),
    ("extra", 1),
    ("internal_info", 1),
    ("mode", 26),
    ("name", 1),
    ("properties", 26),
    ("standalone_ports_supported", 1),
    ("node_uuid", 1),
    ("physical_network", 102),
    ("category", 103),
    ("dynamic_portgroup", 111),
];

pub const PORTGROUP_DEFAULT_LIST_FIELDS: &[&str] = &["uuid", "address", "name"];

/// Port groups exist from this microversion.
pub const PORTGROUP_MIN: u16 = 23;

/// Keys of `local_link_connection`; `network_type` from 1.64; the OVN VTEP switch
/// keys from 1.90 to 1.104 ([`vtep_allowed`]).
pub const LLC_KEYS: &[&str] = &[
    "switch_id",
    "port_id",
    "switch_info",
    "hostname",
    "network_type",
    VTEP_LOGICAL,
    VTEP_PHYSICAL,
];

pub const VTEP_LOGICAL: &str = "vtep-logical-switch";
pub const VTEP_PHYSICAL: &str = "vtep-physical-switch";

/// Whether the OVN VTEP keys of `local_link_connection` may be set and are shown: 1.90
/// added them, 1.105 removed them again (upstream's `allow_ovn_vtep_version`).
pub fn vtep_allowed(v: Version) -> bool {
    v.at_least(90) && !v.at_least(105)
}

/// A port's `local_link_connection` as version `v` shows it: one with VTEP keys reads
/// as `{}` where they are not allowed (upstream's).
pub fn llc_view(llc: &JsonObject, v: Version) -> JsonObject {
    if !vtep_allowed(v) && (llc.contains_key(VTEP_LOGICAL) || llc.contains_key(VTEP_PHYSICAL)) {
        return JsonObject::new();
    }
    llc.clone()
}

/// The default bonding mode (upstream's `[DEFAULT] default_portgroup_mode`).
pub const DEFAULT_PORTGROUP_MODE: &str = "active-backup";

/// The fields a version shows, in order.
pub fn fields_at(all: &[(&'static str, u16)], v: Version) -> Vec<&'static str> {
    all.iter()
        .filter(|(_, since)| v.at_least(*since))
        .map(|(f, _)| *f)
        .collect()
}

/// The microversion that added `field` (`None`: not a field).
pub fn field_since(all: &[(&'static str, u16)], field: &str) -> Option<u16> {
    all.iter().find(|(f, _)| *f == field).map(|(_, v)| *v)
}

pub fn port_not_found(ident: &str) -> Error {
    Error::NotFound(format!("Port {ident} could not be found."))
}

pub fn portgroup_not_found(ident: &str) -> Error {
    Error::NotFound(format!("Portgroup {ident} could not be found."))
}

/// A MAC address as stored (lower case), or `None` when `s` is not one.
pub fn normalize_mac(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let ok = b.len() == 17
        && b.iter().enumerate().all(|(i, c)| {
            if i % 3 == 2 {
                *c == b':'
            } else {
                c.is_ascii_hexdigit()
            }
        });
    ok.then(|| s.to_ascii_lowercase())
}

/// The 400 of an address that is not a MAC.
pub fn bad_mac(what: &str, s: &str) -> Error {
    Error::invalid(format!("Expected valid MAC address for {what}: {s}"))
}

/// An OpenFlow datapath id: eight colon-separated octets, or `0x` and 16 hex digits.
fn is_datapath_id(s: &str) -> bool {
    if let Some(hex) = s.strip_prefix("0x") {
        return hex.len() == 16 && hex.bytes().all(|c| c.is_ascii_hexdigit());
    }
    let parts: Vec<&str> = s.split(':').collect();
    parts.len() == 8
        && parts
            .iter()
            .all(|p| p.len() == 2 && p.bytes().all(|c| c.is_ascii_hexdigit()))
}

fn schema(what: &str, msg: impl std::fmt::Display) -> Error {
    Error::invalid(format!("Schema error for {what}: {msg}"))
}

fn type_error(what: &str, v: &Value, types: &str) -> Error {
    schema(what, format_args!("{} is not of type {types}", py_repr(v)))
}

/// An optional string of at most `max` characters.
fn opt_string(
    doc: &Map<String, Value>,
    key: &str,
    max: usize,
    what: &str,
) -> Result<Option<String>, Error> {
    match doc.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.chars().count() > max => {
            Err(schema(what, format_args!("{} is too long", py_repr_str(s))))
        }
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(v) => Err(type_error(what, v, "'string', 'null'")),
    }
}

/// A boolean; the words clients send as strings (`"False"` from the CLI's
/// `port set`, as upstream accepts) count too.
fn boolean(doc: &Map<String, Value>, key: &str, default: bool, what: &str) -> Result<bool, Error> {
    match doc.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(v) => v
            .as_str()
            .and_then(crate::node::parse_bool_word)
            .ok_or_else(|| type_error(what, v, "'boolean'")),
    }
}

fn object(doc: &Map<String, Value>, key: &str, what: &str) -> Result<JsonObject, Error> {
    match doc.get(key) {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(o)) => Ok(o.clone()),
        Some(v) => Err(type_error(what, v, "'object', 'null'")),
    }
}

/// A required or optional uuid naming another object (`node_uuid`, `portgroup_uuid`):
/// 400 `Expected UUID for <key>: <x>` otherwise.
pub fn uuid_ref<T>(
    doc: &Map<String, Value>,
    key: &str,
    parse: impl Fn(&str) -> Option<T>,
) -> Result<Option<T>, Error> {
    match doc.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => parse(s)
            .map(Some)
            .ok_or_else(|| Error::invalid(format!("Expected UUID for {key}: {s}"))),
        Some(v) => Err(Error::invalid(format!(
            "Expected UUID for {key}: {}",
            py_repr(v)
        ))),
    }
}

/// `physical_network`: a non-empty string of at most 64 characters, or null.
fn physical_network(doc: &Map<String, Value>, what: &str) -> Result<Option<String>, Error> {
    match opt_string(doc, "physical_network", 64, what)? {
        Some(s) if s.is_empty() => Err(Error::invalid(
            "A non-empty value is required when setting physical_network",
        )),
        other => Ok(other),
    }
}

/// `local_link_connection`: upstream's schema (known keys; `switch_id` and `port_id`
/// together, or `port_id` and `hostname` for a smart NIC, or `network_type`
/// `unmanaged` alone), `switch_id` a MAC or datapath id; `{}` is valid.
pub fn check_local_link_connection(
    llc: &JsonObject,
    is_smartnic: bool,
    version: Version,
) -> Result<(), Error> {
    if llc.is_empty() {
        return Ok(());
    }
    let doc = py_repr(&Value::Object(llc.clone()));
    let not_valid = |cause: String| {
        schema(
            "local_link_connection",
            format_args!(
                "{doc} is not valid under any of the given schemas. Possible root cause: {cause}"
            ),
        )
    };
    if let Some(k) = llc.keys().find(|k| !LLC_KEYS.contains(&k.as_str())) {
        return Err(not_valid(format!(
            "Additional properties are not allowed ('{k}' was unexpected)"
        )));
    }
    if llc.contains_key("network_type") && !version.at_least(64) {
        return Err(Error::not_acceptable());
    }
    if llc.contains_key(VTEP_LOGICAL) && !vtep_allowed(version) {
        return Err(Error::not_acceptable());
    }
    for (a, b) in [(VTEP_LOGICAL, VTEP_PHYSICAL), (VTEP_PHYSICAL, VTEP_LOGICAL)] {
        if llc.contains_key(a) && !llc.contains_key(b) {
            return Err(not_valid(format!("'{b}' is a dependency of '{a}'")));
        }
    }
    for (k, v) in llc {
        if !v.is_string() {
            return Err(not_valid(format!("{} is not of type 'string'", py_repr(v))));
        }
        if k == "network_type" && !matches!(v.as_str(), Some("managed" | "unmanaged")) {
            return Err(not_valid(format!(
                "{} is not one of ['managed', 'unmanaged']",
                py_repr(v)
            )));
        }
    }
    let has = |k: &str| llc.contains_key(k);
    let unmanaged = llc.get("network_type").and_then(Value::as_str) == Some("unmanaged");
    let ovn = has("port_id") && has(VTEP_LOGICAL) && has(VTEP_PHYSICAL);
    let complete = if is_smartnic {
        has("port_id") && has("hostname")
    } else {
        (has("switch_id") && has("port_id")) || unmanaged || ovn
    };
    if !complete {
        let need = if is_smartnic {
            "'hostname' is a required property"
        } else if has("switch_id") {
            "'port_id' is a required property"
        } else {
            "'switch_id' is a required property"
        };
        return Err(not_valid(need.to_string()));
    }
    if let Some(Value::String(id)) = llc.get("switch_id")
        && normalize_mac(id).is_none()
        && !is_datapath_id(id)
    {
        return Err(Error::invalid(format!(
            "Expected a MAC address or OpenFlow datapath ID but received {id}."
        )));
    }
    Ok(())
}

/// A port's settable fields after validation, with its node and port group named by
/// uuid (the conductor resolves them).
#[derive(Debug, Clone, PartialEq)]
pub struct PortSpec {
    pub address: String,
    pub node_uuid: NodeUuid,
    pub portgroup_uuid: Option<PortgroupUuid>,
    pub extra: JsonObject,
    pub local_link_connection: JsonObject,
    pub pxe_enabled: bool,
    pub physical_network: Option<String>,
    pub is_smartnic: bool,
    pub name: Option<String>,
    pub description: Option<String>,
    pub vendor: Option<String>,
    pub category: Option<String>,
    pub available_for_dynamic_portgroup: bool,
}

/// Keys a client may send in a port body (besides `uuid`, `node_uuid`, `node_ident`).
pub const PORT_SETTABLE: &[&str] = &[
    "address",
    "extra",
    "local_link_connection",
    "pxe_enabled",
    "physical_network",
    "is_smartnic",
    "name",
    "description",
    "vendor",
    "category",
    "available_for_dynamic_portgroup",
    "portgroup_uuid",
];

impl PortSpec {
    /// Checks a port document (a create body without `uuid`/`node_ident`, or a port's
    /// [`Port::doc`] after a patch).
    pub fn from_doc(doc: &Map<String, Value>, version: Version) -> Result<PortSpec, Error> {
        const W: &str = "port";
        let address = match doc.get("address") {
            Some(Value::String(a)) => normalize_mac(a).ok_or_else(|| bad_mac("address", a))?,
            None | Some(Value::Null) => {
                return Err(schema(W, "'address' is a required property"));
            }
            Some(v) => return Err(type_error(W, v, "'string'")),
        };
        let node_uuid = match doc.get("node_uuid") {
            Some(Value::String(u)) => NodeUuid::parse(u)
                .ok_or_else(|| schema(W, format_args!("{} is not a 'uuid'", py_repr_str(u))))?,
            None | Some(Value::Null) => {
                return Err(schema(W, "'node_uuid' is a required property"));
            }
            Some(v) => return Err(type_error(W, v, "'string'")),
        };
        let is_smartnic = boolean(doc, "is_smartnic", false, W)?;
        let local_link_connection = object(doc, "local_link_connection", W)?;
        check_local_link_connection(&local_link_connection, is_smartnic, version)?;
        let name = opt_string(doc, "name", 255, W)?;
        if let Some(n) = &name
            && !is_valid_logical_name(n)
        {
            return Err(Error::invalid(format!(
                "Cannot use port name {}: it is not a valid logical name.",
                py_repr_str(n)
            )));
        }
        Ok(PortSpec {
            address,
            node_uuid,
            portgroup_uuid: uuid_ref(doc, "portgroup_uuid", PortgroupUuid::parse)?,
            extra: object(doc, "extra", W)?,
            local_link_connection,
            pxe_enabled: boolean(doc, "pxe_enabled", true, W)?,
            physical_network: physical_network(doc, W)?,
            is_smartnic,
            name,
            description: opt_string(doc, "description", 255, W)?,
            vendor: opt_string(doc, "vendor", 32, W)?,
            category: opt_string(doc, "category", 80, W)?,
            available_for_dynamic_portgroup: boolean(
                doc,
                "available_for_dynamic_portgroup",
                true,
                W,
            )?,
        })
    }
}

impl Port {
    /// The document a PATCH applies to: the settable fields and the node.
    pub fn doc(&self) -> Map<String, Value> {
        let mut m = Map::new();
        let s = |v: &Option<String>| v.clone().map_or(Value::Null, Value::String);
        m.insert("address".into(), Value::String(self.address.clone()));
        m.insert(
            "node_uuid".into(),
            Value::String(self.node_uuid.to_string()),
        );
        m.insert(
            "portgroup_uuid".into(),
            self.portgroup_uuid
                .as_ref()
                .map_or(Value::Null, |u| Value::String(u.to_string())),
        );
        m.insert("extra".into(), Value::Object(self.extra.clone()));
        m.insert(
            "local_link_connection".into(),
            Value::Object(self.local_link_connection.clone()),
        );
        m.insert("pxe_enabled".into(), Value::Bool(self.pxe_enabled));
        m.insert("physical_network".into(), s(&self.physical_network));
        m.insert("is_smartnic".into(), Value::Bool(self.is_smartnic));
        m.insert("name".into(), s(&self.name));
        m.insert("description".into(), s(&self.description));
        m.insert("vendor".into(), s(&self.vendor));
        m.insert("category".into(), s(&self.category));
        m.insert(
            "available_for_dynamic_portgroup".into(),
            Value::Bool(self.available_for_dynamic_portgroup),
        );
        m
    }

    /// Copies a spec's fields (the node and port group ids are the caller's).
    pub fn set(&mut self, s: PortSpec) {
        self.address = s.address;
        self.node_uuid = s.node_uuid;
        self.portgroup_uuid = s.portgroup_uuid;
        self.extra = s.extra;
        self.local_link_connection = s.local_link_connection;
        self.pxe_enabled = s.pxe_enabled;
        self.physical_network = s.physical_network;
        self.is_smartnic = s.is_smartnic;
        self.name = s.name;
        self.description = s.description;
        self.vendor = s.vendor;
        self.category = s.category;
        self.available_for_dynamic_portgroup = s.available_for_dynamic_portgroup;
    }

    /// A new port from a checked spec.
    pub fn new(uuid: PortUuid, spec: PortSpec) -> Port {
        let mut p = Port {
            id: 0,
            uuid,
            address: String::new(),
            node_id: NodeId(0),
            node_uuid: spec.node_uuid.clone(),
            portgroup_id: None,
            portgroup_uuid: None,
            extra: Map::new(),
            internal_info: Map::new(),
            local_link_connection: Map::new(),
            pxe_enabled: true,
            physical_network: None,
            is_smartnic: false,
            name: None,
            description: None,
            vendor: None,
            category: None,
            available_for_dynamic_portgroup: true,
            created_at: crate::node::now(),
            updated_at: None,
        };
        p.set(spec);
        p
    }

    /// The VIF attached to the port, if any (`internal_info.tenant_vif_port_id`, or the
    /// legacy `extra.vif_port_id`).
    pub fn vif(&self) -> Option<&str> {
        vif_of(&self.internal_info, &self.extra)
    }
}

/// The VIF recorded in an object's `internal_info` (or legacy `extra`).
pub fn vif_of<'a>(internal_info: &'a JsonObject, extra: &'a JsonObject) -> Option<&'a str> {
    internal_info
        .get(TENANT_VIF)
        .and_then(Value::as_str)
        .or_else(|| extra.get("vif_port_id").and_then(Value::as_str))
}

/// Where an attached VIF is recorded.
pub const TENANT_VIF: &str = "tenant_vif_port_id";

/// A port group's settable fields after validation.
#[derive(Debug, Clone, PartialEq)]
pub struct PortgroupSpec {
    pub name: Option<String>,
    pub address: Option<String>,
    pub node_uuid: NodeUuid,
    pub extra: JsonObject,
    pub mode: String,
    pub properties: JsonObject,
    pub standalone_ports_supported: bool,
    pub physical_network: Option<String>,
    pub category: Option<String>,
}

pub const PORTGROUP_SETTABLE: &[&str] = &[
    "name",
    "address",
    "extra",
    "mode",
    "properties",
    "standalone_ports_supported",
    "physical_network",
    "category",
];

impl PortgroupSpec {
    /// Checks a port group document; `renaming` names the port group in the invalid-name
    /// message of a PATCH (`None` at creation).
    pub fn from_doc(
        doc: &Map<String, Value>,
        renaming: Option<&str>,
    ) -> Result<PortgroupSpec, Error> {
        const W: &str = "portgroup";
        let node_uuid = match doc.get("node_uuid") {
            Some(Value::String(u)) => NodeUuid::parse(u)
                .ok_or_else(|| schema(W, format_args!("{} is not a 'uuid'", py_repr_str(u))))?,
            None | Some(Value::Null) => {
                return Err(schema(W, "'node_uuid' is a required property"));
            }
            Some(v) => return Err(type_error(W, v, "'string'")),
        };
        let address = match doc.get("address") {
            None | Some(Value::Null) => None,
            Some(Value::String(a)) => Some(normalize_mac(a).ok_or_else(|| bad_mac("address", a))?),
            Some(v) => return Err(type_error(W, v, "'string', 'null'")),
        };
        let name = opt_string(doc, "name", 255, W)?;
        if let Some(n) = &name
            && (!is_valid_logical_name(n) || crate::ids::is_uuid_like(n))
        {
            return Err(Error::invalid(match renaming {
                None => format!("Cannot create portgroup with invalid name '{n}'"),
                Some(pg) => format!("Portgroup {pg}: Cannot change name to invalid name '{n}'"),
            }));
        }
        let mode = match doc.get("mode") {
            None => DEFAULT_PORTGROUP_MODE.to_string(),
            Some(Value::String(m)) if m.chars().count() > 255 => {
                return Err(schema(W, format_args!("{} is too long", py_repr_str(m))));
            }
            Some(Value::String(m)) => m.clone(),
            Some(v) => return Err(type_error(W, v, "'string'")),
        };
        Ok(PortgroupSpec {
            name,
            address,
            node_uuid,
            extra: object(doc, "extra", W)?,
            mode,
            properties: object(doc, "properties", W)?,
            standalone_ports_supported: boolean(doc, "standalone_ports_supported", true, W)?,
            physical_network: physical_network(doc, W)?,
            category: opt_string(doc, "category", 80, W)?,
        })
    }
}

impl Portgroup {
    pub fn doc(&self) -> Map<String, Value> {
        let mut m = Map::new();
        let s = |v: &Option<String>| v.clone().map_or(Value::Null, Value::String);
        m.insert("name".into(), s(&self.name));
        m.insert("address".into(), s(&self.address));
        m.insert(
            "node_uuid".into(),
            Value::String(self.node_uuid.to_string()),
        );
        m.insert("extra".into(), Value::Object(self.extra.clone()));
        m.insert("mode".into(), Value::String(self.mode.clone()));
        m.insert("properties".into(), Value::Object(self.properties.clone()));
        m.insert(
            "standalone_ports_supported".into(),
            Value::Bool(self.standalone_ports_supported),
        );
        m.insert("physical_network".into(), s(&self.physical_network));
        m.insert("category".into(), s(&self.category));
        m
    }

    pub fn set(&mut self, s: PortgroupSpec) {
        self.name = s.name;
        self.address = s.address;
        self.node_uuid = s.node_uuid;
        self.extra = s.extra;
        self.mode = s.mode;
        self.properties = s.properties;
        self.standalone_ports_supported = s.standalone_ports_supported;
        self.physical_network = s.physical_network;
        self.category = s.category;
    }

    pub fn new(uuid: PortgroupUuid, spec: PortgroupSpec) -> Portgroup {
        let mut g = Portgroup {
            id: 0,
            uuid,
            name: None,
            address: None,
            node_id: NodeId(0),
            node_uuid: spec.node_uuid.clone(),
            extra: Map::new(),
            internal_info: Map::new(),
            mode: String::new(),
            properties: Map::new(),
            standalone_ports_supported: true,
            physical_network: None,
            category: None,
            dynamic_portgroup: false,
            created_at: crate::node::now(),
            updated_at: None,
        };
        g.set(spec);
        g
    }

    pub fn vif(&self) -> Option<&str> {
        vif_of(&self.internal_info, &self.extra)
    }
}

/// Whether `port` may be a member of `pg`, given the physical networks of the group's
/// other members (upstream's 409s).
pub fn check_membership(
    port: &Port,
    pg: &Portgroup,
    others: &[Option<String>],
) -> Result<(), Error> {
    if pg.node_id != port.node_id {
        return Err(Error::invalid(
            "Port can not be added to a portgroup belonging to a different node.",
        ));
    }
    if !pg.standalone_ports_supported && port.pxe_enabled {
        return Err(Error::Conflict(format!(
            "Port group {} doesn't support standalone ports. This port cannot be created as a member of that portgroup as the port's 'pxe_enabled' field was set to True.",
            pg.uuid
        )));
    }
    let mut nets: Vec<&Option<String>> = others.iter().collect();
    if pg.physical_network.is_some() {
        nets.push(&pg.physical_network);
    }
    nets.sort();
    nets.dedup();
    if let Some(theirs) = nets.first()
        && **theirs != port.physical_network
    {
        let show = |p: &Option<String>| p.clone().unwrap_or_else(|| "None".into());
        return Err(Error::Conflict(format!(
            "Port with physical network {} cannot become a member of port group {} which has ports in physical network {}.",
            show(&port.physical_network),
            pg.uuid,
            nets.iter().map(|n| show(n)).collect::<Vec<_>>().join(", ")
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn doc(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn macs_are_normalised_and_checked() {
        assert_eq!(
            normalize_mac("52:54:00:AB:cd:01").as_deref(),
            Some("52:54:00:ab:cd:01")
        );
        for bad in [
            "not-a-mac",
            "52:54:00:ab:cd",
            "52-54-00-ab-cd-01",
            "52:54:00:ab:cd:0g",
        ] {
            assert!(normalize_mac(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn local_link_connection_follows_upstreams_schema() {
        let v = Version::new(61);
        let ok = |d: Value, smart| check_local_link_connection(d.as_object().unwrap(), smart, v);
        assert!(ok(json!({}), false).is_ok());
        assert!(
            ok(
                json!({"switch_id": "0a:1b:2c:3d:4e:5f", "port_id": "e1"}),
                false
            )
            .is_ok()
        );
        assert!(
            ok(
                json!({"switch_id": "00:00:0a:1b:2c:3d:4e:5f", "port_id": "e1"}),
                false
            )
            .is_ok()
        );
        assert!(ok(json!({"port_id": "e1", "hostname": "h"}), true).is_ok());
        let e = ok(
            json!({"switch_id": "0a:1b:2c:3d:4e:5f", "port_id": "e1", "colour": "red"}),
            false,
        )
        .unwrap_err();
        assert!(e.message().contains("('colour' was unexpected)"), "{e}");
        let e = ok(json!({"switch_id": "switch-1", "port_id": "e1"}), false).unwrap_err();
        assert_eq!(
            e.message(),
            "Expected a MAC address or OpenFlow datapath ID but received switch-1."
        );
        assert!(ok(json!({"port_id": "e1"}), false).is_err());
        // network_type exists from 1.64.
        assert!(matches!(
            ok(json!({"network_type": "unmanaged"}), false),
            Err(Error::NotAcceptable(_))
        ));
        assert!(
            check_local_link_connection(
                json!({"network_type": "unmanaged"}).as_object().unwrap(),
                false,
                Version::new(64)
            )
            .is_ok()
        );
    }

    #[test]
    fn a_port_document_is_checked_field_by_field() {
        let v = Version::new(61);
        let node = "1be26c0b-03f2-4d2e-ae87-c02d7f33c123";
        let s = PortSpec::from_doc(
            &doc(json!({"address": "52:54:00:00:00:0A", "node_uuid": node})),
            v,
        )
        .unwrap();
        assert_eq!(s.address, "52:54:00:00:00:0a");
        assert!(s.pxe_enabled && s.available_for_dynamic_portgroup);
        let err = |d: Value| PortSpec::from_doc(&doc(d), v).unwrap_err().to_string();
        assert_eq!(
            err(json!({"node_uuid": node})),
            "Schema error for port: 'address' is a required property"
        );
        assert_eq!(
            err(json!({"address": "52:54:00:00:00:01", "node_uuid": node, "physical_network": ""})),
            "A non-empty value is required when setting physical_network"
        );
        assert!(
            err(json!({"address": "52:54:00:00:00:01", "node_uuid": node, "physical_network": "p".repeat(65)}))
                .ends_with("is too long")
        );
        assert_eq!(
            err(
                json!({"address": "52:54:00:00:00:01", "node_uuid": node, "portgroup_uuid": "bond1"})
            ),
            "Expected UUID for portgroup_uuid: bond1"
        );
        assert_eq!(
            err(json!({"address": "52:54:00:00:00:01", "node_uuid": node, "pxe_enabled": "maybe"})),
            "Schema error for port: 'maybe' is not of type 'boolean'"
        );
        let s = PortSpec::from_doc(
            &doc(
                json!({"address": "52:54:00:00:00:01", "node_uuid": node, "pxe_enabled": "False"}),
            ),
            v,
        )
        .unwrap();
        assert!(!s.pxe_enabled);
    }

    fn pg(standalone: bool, physnet: Option<&str>) -> Portgroup {
        let mut g = Portgroup::new(
            PortgroupUuid::parse("96e0f1a2-b3c4-4d5e-8f6a-7b8c9d0e1f2a").unwrap(),
            PortgroupSpec::from_doc(
                &doc(json!({"node_uuid": "1be26c0b-03f2-4d2e-ae87-c02d7f33c123",
                            "standalone_ports_supported": standalone,
                            "physical_network": physnet})),
                None,
            )
            .unwrap(),
        );
        g.node_id = NodeId(1);
        g
    }

    #[test]
    fn membership_rules() {
        let spec = PortSpec::from_doc(
            &doc(json!({"address": "52:54:00:00:00:01",
                        "node_uuid": "1be26c0b-03f2-4d2e-ae87-c02d7f33c123"})),
            Version::new(61),
        )
        .unwrap();
        let mut port = Port::new(PortUuid::new_v4(), spec);
        port.node_id = NodeId(1);
        assert!(check_membership(&port, &pg(true, None), &[]).is_ok());
        // pxe_enabled into a group without standalone ports.
        assert!(matches!(
            check_membership(&port, &pg(false, None), &[]),
            Err(Error::Conflict(_))
        ));
        // Physical networks must agree with the group's and its members'.
        let e = check_membership(&port, &pg(true, Some("physnet1")), &[]).unwrap_err();
        assert_eq!(
            e.message(),
            "Port with physical network None cannot become a member of port group 96e0f1a2-b3c4-4d5e-8f6a-7b8c9d0e1f2a which has ports in physical network physnet1."
        );
        port.physical_network = Some("physnet1".into());
        assert!(check_membership(&port, &pg(true, None), &[Some("physnet1".into())]).is_ok());
        port.node_id = NodeId(2);
        assert!(matches!(
            check_membership(&port, &pg(true, None), &[]),
            Err(Error::Invalid(_))
        ));
    }

    #[test]
    fn portgroup_names_are_logical_names() {
        let node = "1be26c0b-03f2-4d2e-ae87-c02d7f33c123";
        let e =
            PortgroupSpec::from_doc(&doc(json!({"node_uuid": node, "name": "bad name!"})), None)
                .unwrap_err();
        assert_eq!(
            e.message(),
            "Cannot create portgroup with invalid name 'bad name!'"
        );
        let g = PortgroupSpec::from_doc(&doc(json!({"node_uuid": node})), None).unwrap();
        assert_eq!(g.mode, DEFAULT_PORTGROUP_MODE);
        assert!(g.standalone_ports_supported);
    }
}
