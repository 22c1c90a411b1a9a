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

/// A node's UUID in canonical lower-case hyphenated form.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeUuid(String);

impl NodeUuid {
    pub fn new_v4() -> Self {
        NodeUuid(uuid::Uuid::new_v4().hyphenated().to_string())
    }
    /// Parses any form `uuid` accepts and normalises it; `None` if it is not a UUID.
    pub fn parse(s: &str) -> Option<Self> {
        canonical_uuid(s).map(NodeUuid)
    }
    /// Wraps a value read from our own database (already canonical).
    pub fn from_db(s: String) -> Self {
        NodeUuid(s)
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for NodeUuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
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
