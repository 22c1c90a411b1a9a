//! A node's history (1.78): errors and provision state changes as the conductor that
//! held the node recorded them.

use chrono::{DateTime, Utc};

use crate::Error;

/// One entry. `severity` is `ERROR` or `INFO`; `event_type` the activity (`cleaning`,
/// `deploying`, `provisioning`, …, `UNKNOWN`).
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryEntry {
    pub id: i64,
    pub uuid: String,
    pub node_id: i64,
    pub conductor: Option<String>,
    pub event_type: String,
    pub severity: String,
    pub event: String,
    pub user: Option<String>,
    pub project: Option<String>,
    /// The node's provision state and target when the entry was written (1.115).
    pub state: Option<String>,
    pub target_provision_state: Option<String>,
    /// Seconds the node had spent in its provision state (1.115).
    pub duration_seconds: Option<i64>,
    pub created_at: DateTime<Utc>,
}

pub fn not_found(uuid: &str) -> Error {
    Error::NotFound(format!("Node history record {uuid} could not be found."))
}
