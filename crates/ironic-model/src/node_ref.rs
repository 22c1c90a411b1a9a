//! How a call names a node: its database id, checked against its uuid, and what a
//! caller routes on.

use crate::{Node, NodeId, NodeUuid};

/// A node as the caller routes on it: the hash ring key is (conductor_group, driver),
/// the position on the ring the uuid. The conductor locks the row `id` and checks
/// that its uuid is `uuid` (a stale or forged reference cannot touch another node).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRef {
    pub id: NodeId,
    pub uuid: NodeUuid,
    pub driver: String,
    pub conductor_group: String,
}

impl From<&Node> for NodeRef {
    fn from(n: &Node) -> Self {
        NodeRef {
            id: n.id,
            uuid: n.uuid.clone(),
            driver: n.driver.clone(),
            conductor_group: n.conductor_group.clone(),
        }
    }
}
