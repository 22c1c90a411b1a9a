//! Typed identifiers, so that a node uuid and any other string, or a node's row id and
//! an allocation's, do not mix.

use std::fmt;

/// A database row id of one kind of row. The value is public (the database layer binds
/// and reads it); the type keeps ids of different rows apart.
macro_rules! row_id {
    ($($(#[$doc:meta])* $name:ident;)*) => {$(
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
        pub struct $name(pub i64);

        impl From<i64> for $name {
            fn from(v: i64) -> Self {
                $name(v)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }
    )*};
}

row_id! {
    /// `nodes.id`.
    NodeId;
    /// `allocations.id`.
    AllocationId;
    /// `conductors.id`: also the `conductor_affinity` of the allocations a conductor
    /// works on.
    ConductorId;
    /// `deploy_templates.id`.
    TemplateId;
}

/// One type per resource uuid, so that a port's uuid cannot be passed where a node's is
/// expected. Each holds the canonical lower-case hyphenated form; values come in only at
/// the edges: `parse` for what a client or a message sent, `from_db` for what our own
/// database (or a message from our own process) holds, `new_v4` for a new resource.
macro_rules! uuid_id {
    ($($(#[$doc:meta])* $name:ident;)*) => {$(
        $(#[$doc])*
        #[derive(
            Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
        )]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            pub fn new_v4() -> Self {
                $name(uuid::Uuid::new_v4().hyphenated().to_string())
            }
            /// Parses any form `uuid` accepts and normalises it; `None` if it is not a
            /// UUID.
            pub fn parse(s: &str) -> Option<Self> {
                canonical_uuid(s).map($name)
            }
            /// Wraps a value read from our own database (already canonical).
            pub fn from_db(s: String) -> Self {
                $name(s)
            }
            pub fn as_str(&self) -> &str {
                &self.0
            }
            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl ResourceUuid for $name {
            fn parse(s: &str) -> Option<Self> {
                $name::parse(s)
            }
            fn new_v4() -> Self {
                $name::new_v4()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        /// Read as a `&str` anywhere (the type keeps only what goes in apart).
        impl std::ops::Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl std::borrow::Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl From<$name> for String {
            fn from(v: $name) -> String {
                v.0
            }
        }
    )*};
}

/// What code generic over the kind of resource needs of its uuid type.
pub trait ResourceUuid: Sized {
    fn parse(s: &str) -> Option<Self>;
    fn new_v4() -> Self;
}

uuid_id! {
    /// A node's uuid.
    NodeUuid;
    /// An allocation's uuid.
    AllocationUuid;
    /// A port's uuid.
    PortUuid;
    /// A port group's uuid.
    PortgroupUuid;
    /// A chassis' uuid.
    ChassisUuid;
    /// A deploy template's uuid.
    TemplateUuid;
    /// A runbook's uuid.
    RunbookUuid;
    /// An inspection rule's uuid. Built-in rules (from the conductor's configuration) may
    /// carry any identifier; `from_db` wraps those as they are.
    RuleUuid;
    /// A volume connector's uuid.
    ConnectorUuid;
    /// A volume target's uuid.
    TargetUuid;
}

/// Canonical lower-case hyphenated form of a UUID-like string, as Ironic's `is_uuid_like`
/// understands it (hyphens optional, any case).
pub fn canonical_uuid(s: &str) -> Option<String> {
    if s.len() != 36 && s.len() != 32 {
        return None;
    }
    uuid::Uuid::try_parse(s)
        .ok()
        .map(|u| u.hyphenated().to_string())
}

pub fn is_uuid_like(s: &str) -> bool {
    canonical_uuid(s).is_some()
}

/// How a client named a node: by UUID or by logical name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeIdent {
    Uuid(NodeUuid),
    Name(String),
}

impl fmt::Display for NodeIdent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeIdent::Uuid(u) => u.fmt(f),
            NodeIdent::Name(n) => f.write_str(n),
        }
    }
}
