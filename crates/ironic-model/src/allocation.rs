//! Allocations (API 1.52+): a request for an `available` node of a resource class, with
//! optional traits and candidate nodes, that a conductor fulfils in the background
//! (reference §4.3, §8).

use chrono::{DateTime, Utc};

use crate::ids::{AllocationId, AllocationUuid, ConductorId, NodeId, NodeUuid};
use crate::node::JsonObject;

/// An allocation's state: `allocating` until a node is reserved (`active`) or none can
/// be (`error`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AllocationState {
    Allocating,
    Active,
    Error,
}

impl AllocationState {
    pub const ALL: &[AllocationState] = &[
        AllocationState::Allocating,
        AllocationState::Active,
        AllocationState::Error,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            AllocationState::Allocating => "allocating",
            AllocationState::Active => "active",
            AllocationState::Error => "error",
        }
    }

    pub fn parse(s: &str) -> Option<AllocationState> {
        AllocationState::ALL
            .iter()
            .copied()
            .find(|a| a.as_str() == s)
    }
}

impl std::fmt::Display for AllocationState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a client asks for when it creates an allocation: the fields a caller chooses.
/// The conductor that takes it sets the rest (id, state, affinity, timestamps).
#[derive(Debug, Clone, PartialEq)]
pub struct NewAllocation {
    pub uuid: AllocationUuid,
    pub name: Option<String>,
    pub resource_class: Option<String>,
    /// Node UUIDs, in the order given.
    pub candidate_nodes: Vec<NodeUuid>,
    pub traits: Vec<String>,
    pub owner: Option<String>,
    pub extra: JsonObject,
}

impl NewAllocation {
    /// The allocation to store: `allocating`, worked on by `conductor`.
    pub fn into_allocation(self, conductor: ConductorId) -> Allocation {
        Allocation {
            name: self.name,
            candidate_nodes: self.candidate_nodes,
            traits: self.traits,
            owner: self.owner,
            extra: self.extra,
            conductor_affinity: Some(conductor),
            ..Allocation::new(self.uuid, self.resource_class)
        }
    }
}

/// Names a stored allocation: its row id, checked against its uuid (a stale or forged
/// reference touches nothing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocationRef {
    pub id: AllocationId,
    pub uuid: AllocationUuid,
}

/// The longest resource class (the nodes' column).
pub const RESOURCE_CLASS_MAX: usize = 80;

#[derive(Debug, Clone, PartialEq)]
pub struct Allocation {
    pub id: AllocationId,
    pub uuid: AllocationUuid,
    pub name: Option<String>,
    /// The node reserved (`active`), or the node being backfilled.
    pub node_id: Option<NodeId>,
    /// Read-only, from the nodes table: the uuid of `node_id`.
    pub node_uuid: Option<NodeUuid>,
    pub resource_class: Option<String>,
    /// Node UUIDs, in the order given.
    pub candidate_nodes: Vec<NodeUuid>,
    pub traits: Vec<String>,
    pub state: AllocationState,
    pub last_error: Option<String>,
    /// The conductor (`conductors.id`) working on it while `allocating`.
    pub conductor_affinity: Option<ConductorId>,
    pub owner: Option<String>,
    pub extra: JsonObject,
    pub created_at: DateTime<Utc>,
    pub updated_at: Option<DateTime<Utc>>,
}

impl Allocation {
    /// A new allocation, not stored yet.
    pub fn new(uuid: AllocationUuid, resource_class: Option<String>) -> Allocation {
        Allocation {
            id: AllocationId::default(),
            uuid,
            name: None,
            node_id: None,
            node_uuid: None,
            resource_class,
            candidate_nodes: Vec::new(),
            traits: Vec::new(),
            state: AllocationState::Allocating,
            last_error: None,
            conductor_affinity: None,
            owner: None,
            extra: JsonObject::new(),
            created_at: crate::node::now(),
            updated_at: None,
        }
    }

    /// A reference to this allocation (what a delete sends).
    pub fn reference(&self) -> AllocationRef {
        AllocationRef {
            id: self.id,
            uuid: self.uuid.clone(),
        }
    }

    /// `last_error` of an allocation that failed for `why`, in upstream's words.
    pub fn failure_message(&self, why: &str) -> String {
        format!("Failed to process allocation {}: {why}.", self.uuid)
    }
}

/// Why no node could be reserved (upstream's `AllocationFailed` reasons).
pub fn no_nodes_reason(rc: &str, with_candidates: bool) -> String {
    if with_candidates {
        format!("none of the requested nodes are available and match the resource class {rc}")
    } else {
        format!("no available nodes match the resource class {rc}")
    }
}

pub fn no_traits_reason(traits: &[String]) -> String {
    format!(
        "no suitable nodes have the requested traits {}",
        traits.join(", ")
    )
}

pub fn all_busy_reason(n: usize) -> String {
    format!("could not reserve any of {n} suitable nodes")
}

pub fn not_found(ident: &str) -> crate::Error {
    crate::Error::NotFound(format!("Allocation {ident} could not be found."))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_round_trip() {
        for s in AllocationState::ALL {
            assert_eq!(AllocationState::parse(s.as_str()), Some(*s));
        }
        assert_eq!(AllocationState::parse("bogus"), None);
    }

    #[test]
    fn messages_follow_upstream() {
        let a = Allocation::new(
            crate::AllocationUuid::parse("5b3f0c2a-8d4e-4f6b-9a1c-2e7d3f4a5b6c").unwrap(),
            Some("rc".into()),
        );
        assert_eq!(
            a.failure_message(&no_nodes_reason("rc-nobody", false)),
            "Failed to process allocation 5b3f0c2a-8d4e-4f6b-9a1c-2e7d3f4a5b6c: no available nodes match the resource class rc-nobody."
        );
        assert_eq!(
            no_traits_reason(&["CUSTOM_A".into(), "CUSTOM_B".into()]),
            "no suitable nodes have the requested traits CUSTOM_A, CUSTOM_B"
        );
    }
}
