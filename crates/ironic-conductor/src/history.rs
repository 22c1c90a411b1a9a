//! Node history (1.78): what a write of a node held by this conductor changed that an
//! operator should find later: a provision state change (`INFO`) and a new
//! `last_error` (`ERROR`). Written just before the node (so that whoever reads the
//! node's new state finds its history; best effort: a failure to record is logged,
//! never fails the operation), pruned by [`prune`] on a timer.

use chrono::{DateTime, Utc};
use ironic_db::Db;
use ironic_model::history::HistoryEntry;
use ironic_model::states::ProvisionState as P;
use ironic_model::{Node, node::now, secrets};

/// What of a node the history compares between two writes.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    state: P,
    last_error: Option<String>,
    since: Option<DateTime<Utc>>,
}

impl Seen {
    pub(crate) fn of(n: &Node) -> Seen {
        Seen {
            state: n.provision_state,
            last_error: n.last_error.clone(),
            since: n.provision_updated_at,
        }
    }
}

/// The activity an error happened in, as upstream names it.
fn event_type(n: &Node) -> &'static str {
    let in_state = |s: P| n.provision_state == s || n.target_provision_state == Some(s);
    match n.provision_state {
        P::Cleaning | P::CleanWait | P::CleanFailed | P::CleanHold => "cleaning",
        P::Deploying | P::DeployWait | P::DeployFailed | P::DeployHold => "deploying",
        P::Verifying => "verifying",
        P::Inspecting | P::InspectWait | P::InspectFailed => "inspecting",
        _ if in_state(P::Active) => "deploying",
        _ => "provisioning",
    }
}

/// The entries a write from `before` to `after` makes, oldest first.
pub(crate) fn entries(before: &Seen, after: &Node, host: &str) -> Vec<HistoryEntry> {
    let at = now();
    let entry =
        |severity: &str, event_type: &str, event: String, duration: Option<i64>| HistoryEntry {
            id: 0,
            uuid: uuid::Uuid::new_v4().to_string(),
            node_id: after.id.0,
            conductor: Some(host.to_string()),
            event_type: event_type.to_string(),
            severity: severity.to_string(),
            event,
            user: None,
            project: None,
            state: Some(after.provision_state.as_str().to_string()),
            target_provision_state: after.target_provision_state.map(|s| s.as_str().to_string()),
            duration_seconds: duration,
            created_at: at,
        };
    let mut out = Vec::new();
    if after.provision_state != before.state {
        // How long the node spent in the state it left.
        let spent = before.since.map(|t| (at - t).num_seconds().max(0));
        out.push(entry(
            "INFO",
            "provisioning",
            format!(
                "Provision state changed from {} to {}",
                before.state, after.provision_state
            ),
            spent,
        ));
    }
    // The error as it is stored (`secrets::stored_text`: masked, cut to 4 KiB), as the
    // node's own `last_error` is; the same error set again is not a new one.
    if let Some(e) = &after.last_error
        && after.last_error != before.last_error
    {
        let event = secrets::stored_text(e);
        if before.last_error.as_deref() != Some(event.as_str()) {
            let spent = after
                .provision_updated_at
                .map(|t| (at - t).num_seconds().max(0));
            out.push(entry("ERROR", event_type(after), event, spent));
        }
    }
    out
}

/// Records what changed from `before` to `after` (when history is on).
pub(crate) async fn note(db: &Db, enabled: bool, host: &str, before: &Seen, after: &Node) {
    if !enabled {
        return;
    }
    let list = entries(before, after, host);
    if list.is_empty() {
        return;
    }
    if let Err(e) = db.history_record(&list).await {
        tracing::warn!(node = %after.uuid, error = %ironic_model::error::chain(&e), "could not record node history");
    }
}

/// One round of pruning: entries beyond the newest `keep` of each node, older than
/// `min_days`, at most `batch`. Any conductor may run it: the deletes are the same.
pub(crate) async fn prune(db: &Db, keep: u64, min_days: u64, batch: u64) {
    let before = now() - chrono::Duration::days(i64::try_from(min_days).unwrap_or(i64::MAX / 2));
    match db.history_prune(keep, before, batch).await {
        Ok(0) => {}
        Ok(n) => tracing::info!(deleted = n, "node history pruned"),
        Err(e) => {
            tracing::warn!(error = %ironic_model::error::chain(&e), "could not prune node history")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ironic_model::{NodeUuid, Version};

    /// A new error is recorded as it is stored: secrets masked, cut to 4 KiB; the same
    /// error set again over its stored form is not recorded twice.
    #[test]
    fn errors_are_recorded_masked_and_bounded() {
        let mut node = Node::blank(NodeUuid::new_v4(), "fake-hardware".into(), Version::MAX);
        let before = Seen::of(&node);
        let raw = format!(
            "Failed: password=hunter2 {} token=tail",
            "x".repeat(2 * secrets::TEXT_MAX)
        );
        node.last_error = Some(raw.clone());
        let list = entries(&before, &node, "c1");
        let [e] = list.as_slice() else {
            panic!("one entry: {list:?}")
        };
        assert_eq!(e.severity, "ERROR");
        assert!(
            e.event.starts_with("Failed: password=****** xxx"),
            "{}",
            e.event
        );
        assert!(!e.event.contains("hunter2") && !e.event.contains("tail"));
        assert!(e.event.len() < secrets::TEXT_MAX + 64, "{}", e.event.len());

        // Stored (as the database keeps it), then the same error set again.
        node.last_error = Some(secrets::stored_text(&raw));
        let stored = Seen::of(&node);
        node.last_error = Some(raw);
        assert!(entries(&stored, &node, "c1").is_empty());
        node.last_error = Some("another password=x".into());
        let list = entries(&stored, &node, "c1");
        assert_eq!(
            list.iter().map(|e| e.event.as_str()).collect::<Vec<_>>(),
            ["another password=******"]
        );
    }
}
