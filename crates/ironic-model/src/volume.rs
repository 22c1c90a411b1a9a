//! Boot from volume (API 1.32): a node's volume connectors (its initiators: an iSCSI
//! IQN, a Fibre Channel WWPN …) and volume targets (the volumes it boots from or
//! attaches, one per boot index). Fields, the checks of their documents (upstream's
//! schema, with the column widths as limits) and the rule that a node changes them only
//! while powered off.

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

use crate::ids::{ConnectorUuid, NodeUuid, TargetUuid};
use crate::names::py_repr_str;
use crate::node::JsonObject;
use crate::patch::py_repr;
use crate::{Error, Node, NodeId};

/// Volume endpoints exist from this microversion.
pub const VOLUME_MIN: u16 = 32;

#[derive(Debug, Clone, PartialEq)]
pub struct VolumeConnector {
    pub id: i64,
    pub uuid: ConnectorUuid,
    pub node_id: NodeId,
    pub node_uuid: NodeUuid,
    /// `iqn`, `ip`, `mac`, `wwnn`, `wwpn`, `port`, `portgroup` …: not checked by the API
    /// (upstream's).
    pub connector_type: String,
    pub connector_id: String,
    pub extra: JsonObject,
    pub created_at: DateTime<Utc>,
    pub updated_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct VolumeTarget {
    pub id: i64,
    pub uuid: TargetUuid,
    pub node_id: NodeId,
    pub node_uuid: NodeUuid,
    pub volume_type: String,
    pub volume_id: String,
    /// Unique per node: 0 is the boot volume.
    pub boot_index: i64,
    /// Connection details (may hold credentials: shown only to whom
    /// `baremetal:volume:view_target_properties` allows).
    pub properties: JsonObject,
    pub extra: JsonObject,
    pub created_at: DateTime<Utc>,
    pub updated_at: Option<DateTime<Utc>>,
}

/// Fields in upstream's order (`links` goes before `node_uuid`); all from 1.32.
pub const CONNECTOR_FIELDS: &[(&str, u16)] = &[
    ("uuid", 32),
    ("created_at", 32),
    ("updated_at", 32),
    ("connector_id", 32),
    ("extra", 32),
    ("type", 32),
    ("node_uuid", 32),
];
pub const CONNECTOR_DEFAULT_LIST_FIELDS: &[&str] = &["uuid", "connector_id", "type", "node_uuid"];

pub const TARGET_FIELDS: &[(&str, u16)] = &[
    ("uuid", 32),
    ("created_at", 32),
    ("updated_at", 32),
    ("boot_index", 32),
    ("extra", 32),
    ("properties", 32),
    ("volume_id", 32),
    ("volume_type", 32),
    ("node_uuid", 32),
];
pub const TARGET_DEFAULT_LIST_FIELDS: &[&str] = &[
    "uuid",
    "boot_index",
    "volume_id",
    "volume_type",
    "node_uuid",
];

pub fn connector_not_found(ident: &str) -> Error {
    Error::NotFound(format!("Volume connector {ident} could not be found."))
}

pub fn target_not_found(ident: &str) -> Error {
    Error::NotFound(format!("Volume target {ident} could not be found."))
}

/// A PATCH of a connector or target needs the node powered off (400 otherwise, with
/// upstream's wording; `what` is "volume connector update" or "volume target update").
pub fn check_powered_off(node: &Node, what: &str) -> Result<(), Error> {
    match node.power_state.as_deref() {
        Some("power off") => Ok(()),
        other => Err(Error::invalid(format!(
            "The requested action \"{what}\" can not be performed on node \"{}\" while it is in state \"{}\".",
            node.uuid,
            other.unwrap_or("None")
        ))),
    }
}

fn schema(what: &str, msg: impl std::fmt::Display) -> Error {
    Error::invalid(format!("Schema error for {what}: {msg}"))
}

fn string(doc: &Map<String, Value>, key: &str, max: usize, what: &str) -> Result<String, Error> {
    match doc.get(key) {
        Some(Value::String(s)) if s.chars().count() > max => {
            Err(schema(what, format_args!("{} is too long", py_repr_str(s))))
        }
        Some(Value::String(s)) => Ok(s.clone()),
        None => Err(schema(what, format_args!("'{key}' is a required property"))),
        Some(v) => Err(schema(
            what,
            format_args!("{} is not of type 'string'", py_repr(v)),
        )),
    }
}

fn object(doc: &Map<String, Value>, key: &str, what: &str) -> Result<JsonObject, Error> {
    match doc.get(key) {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(o)) => Ok(o.clone()),
        Some(v) => Err(schema(
            what,
            format_args!("{} is not of type 'object', 'null'", py_repr(v)),
        )),
    }
}

fn node_uuid(doc: &Map<String, Value>, what: &str) -> Result<NodeUuid, Error> {
    let s = string(doc, "node_uuid", 36, what)?;
    NodeUuid::parse(&s).ok_or_else(|| {
        Error::invalid(format!(
            "Invalid input for field/attribute node_uuid. Value: {}. ",
            py_repr_str(&s)
        ))
    })
}

/// A connector's settable fields, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct ConnectorSpec {
    pub node_uuid: NodeUuid,
    pub connector_type: String,
    pub connector_id: String,
    pub extra: JsonObject,
}

pub const CONNECTOR_SETTABLE: &[&str] = &["type", "connector_id", "extra"];

impl ConnectorSpec {
    pub fn from_doc(doc: &Map<String, Value>) -> Result<ConnectorSpec, Error> {
        const W: &str = "connector";
        Ok(ConnectorSpec {
            connector_type: string(doc, "type", 32, W)?,
            connector_id: string(doc, "connector_id", 255, W)?,
            node_uuid: node_uuid(doc, W)?,
            extra: object(doc, "extra", W)?,
        })
    }
}

impl VolumeConnector {
    pub fn new(uuid: ConnectorUuid, s: ConnectorSpec) -> VolumeConnector {
        let mut c = VolumeConnector {
            id: 0,
            uuid,
            node_id: NodeId(0),
            node_uuid: s.node_uuid.clone(),
            connector_type: String::new(),
            connector_id: String::new(),
            extra: Map::new(),
            created_at: crate::node::now(),
            updated_at: None,
        };
        c.set(s);
        c
    }

    pub fn set(&mut self, s: ConnectorSpec) {
        self.node_uuid = s.node_uuid;
        self.connector_type = s.connector_type;
        self.connector_id = s.connector_id;
        self.extra = s.extra;
    }

    /// The document a PATCH applies to.
    pub fn doc(&self) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert(
            "node_uuid".into(),
            Value::String(self.node_uuid.to_string()),
        );
        m.insert("type".into(), Value::String(self.connector_type.clone()));
        m.insert(
            "connector_id".into(),
            Value::String(self.connector_id.clone()),
        );
        m.insert("extra".into(), Value::Object(self.extra.clone()));
        m
    }
}

/// A target's settable fields, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct TargetSpec {
    pub node_uuid: NodeUuid,
    pub volume_type: String,
    pub volume_id: String,
    pub boot_index: i64,
    pub properties: JsonObject,
    pub extra: JsonObject,
}

pub const TARGET_SETTABLE: &[&str] = &[
    "volume_type",
    "volume_id",
    "boot_index",
    "properties",
    "extra",
];

impl TargetSpec {
    pub fn from_doc(doc: &Map<String, Value>) -> Result<TargetSpec, Error> {
        const W: &str = "target";
        let boot_index = match doc.get("boot_index") {
            Some(Value::Number(n)) => n
                .as_i64()
                .filter(|i| (0..=i64::from(i32::MAX)).contains(i))
                .ok_or_else(|| schema(W, format_args!("{n} is not a valid boot index")))?,
            None => return Err(schema(W, "'boot_index' is a required property")),
            Some(v) => {
                return Err(schema(
                    W,
                    format_args!("{} is not of type 'integer'", py_repr(v)),
                ));
            }
        };
        Ok(TargetSpec {
            volume_type: string(doc, "volume_type", 64, W)?,
            volume_id: string(doc, "volume_id", 36, W)?,
            boot_index,
            node_uuid: node_uuid(doc, W)?,
            properties: object(doc, "properties", W)?,
            extra: object(doc, "extra", W)?,
        })
    }
}

impl VolumeTarget {
    pub fn new(uuid: TargetUuid, s: TargetSpec) -> VolumeTarget {
        let mut t = VolumeTarget {
            id: 0,
            uuid,
            node_id: NodeId(0),
            node_uuid: s.node_uuid.clone(),
            volume_type: String::new(),
            volume_id: String::new(),
            boot_index: 0,
            properties: Map::new(),
            extra: Map::new(),
            created_at: crate::node::now(),
            updated_at: None,
        };
        t.set(s);
        t
    }

    pub fn set(&mut self, s: TargetSpec) {
        self.node_uuid = s.node_uuid;
        self.volume_type = s.volume_type;
        self.volume_id = s.volume_id;
        self.boot_index = s.boot_index;
        self.properties = s.properties;
        self.extra = s.extra;
    }

    pub fn doc(&self) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert(
            "node_uuid".into(),
            Value::String(self.node_uuid.to_string()),
        );
        m.insert(
            "volume_type".into(),
            Value::String(self.volume_type.clone()),
        );
        m.insert("volume_id".into(), Value::String(self.volume_id.clone()));
        m.insert("boot_index".into(), Value::from(self.boot_index));
        m.insert("properties".into(), Value::Object(self.properties.clone()));
        m.insert("extra".into(), Value::Object(self.extra.clone()));
        m
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    const NODE: &str = "1be26c0b-03f2-4d2e-ae87-c02d7f33c123";

    #[test]
    fn connector_documents() {
        let d = json!({"node_uuid": NODE, "type": "nvme", "connector_id": "x"});
        let s = ConnectorSpec::from_doc(d.as_object().unwrap()).unwrap();
        assert_eq!(s.connector_type, "nvme");
        let d = json!({"node_uuid": NODE, "type": "iqn"});
        assert_eq!(
            ConnectorSpec::from_doc(d.as_object().unwrap())
                .unwrap_err()
                .message(),
            "Schema error for connector: 'connector_id' is a required property"
        );
    }

    #[test]
    fn target_documents() {
        let d = json!({"node_uuid": NODE, "volume_id": "v", "boot_index": 0});
        assert_eq!(
            TargetSpec::from_doc(d.as_object().unwrap())
                .unwrap_err()
                .message(),
            "Schema error for target: 'volume_type' is a required property"
        );
        let d =
            json!({"node_uuid": NODE, "volume_type": "iscsi", "volume_id": "v", "boot_index": -1});
        assert!(TargetSpec::from_doc(d.as_object().unwrap()).is_err());
        let d =
            json!({"node_uuid": NODE, "volume_type": "iscsi", "volume_id": "v", "boot_index": "0"});
        assert!(TargetSpec::from_doc(d.as_object().unwrap()).is_err());
    }
}
