//! The ramdisk agent's side of a node: the `driver_internal_info` keys its lookup and
//! heartbeats write, the states in which it may look its node up and heartbeat
//! (upstream's `LOOKUP_ALLOWED_STATES`, `HEARTBEAT_ALLOWED`, `_HEARTBEAT_RECORD_ONLY`),
//! and its token. The API's `ramdisk.rs` and the conductor's `agent.rs` use them.

use serde_json::{Map, Value};

use crate::states::ProvisionState as P;

/// The token the agent proves itself with (a secret: every rendering masks it).
pub const TOKEN: &str = "agent_secret_token";
/// Set when the token was handed to the agent out of band (virtual media).
pub const TOKEN_PREGENERATED: &str = "agent_secret_token_pregenerated";
/// Where the agent listens, from its first recorded heartbeat.
pub const URL: &str = "agent_url";
pub const VERSION: &str = "agent_version";
pub const LAST_HEARTBEAT: &str = "agent_last_heartbeat";
pub const VERIFY_CA: &str = "agent_verify_ca";
pub const STATUS: &str = "agent_status";
pub const STATUS_MESSAGE: &str = "agent_status_message";

/// The BMC addresses an inspection lookup may match (upstream's key; filled when an
/// in-band inspection starts).
pub const LOOKUP_BMC_ADDRESSES: &str = "lookup_bmc_addresses";

/// The statuses an agent may report (1.72; the anaconda deploy's).
pub const VALID_STATUSES: &[&str] = &["start", "end", "error"];

/// The agent version assumed when a heartbeat names none (upstream's: the last agent
/// release before agents sent their version).
pub const ASSUMED_VERSION: &str = "3.0.0";

/// Whether an agent may look its node up in state `s` (`[api] restrict_lookup`).
pub fn lookup_allowed(s: P) -> bool {
    matches!(
        s,
        P::Deploying
            | P::DeployWait
            | P::Cleaning
            | P::CleanWait
            | P::Inspecting
            | P::InspectWait
            | P::Rescuing
            | P::RescueWait
            | P::ServiceWait
    )
}

/// Whether a heartbeat in state `s` is recorded at all (elsewhere it is logged and
/// dropped).
pub fn heartbeat_allowed(s: P) -> bool {
    matches!(
        s,
        P::DeployWait
            | P::CleanWait
            | P::RescueWait
            | P::Deploying
            | P::Cleaning
            | P::Rescuing
            | P::DeployHold
            | P::CleanHold
            | P::Servicing
            | P::ServiceWait
            | P::ServiceHold
    )
}

/// Whether fast-track applies to a node (upstream's): `[deploy] fast_track`, unless its
/// `driver_info.fast_track` says otherwise (a boolean, or its text).
pub fn fast_track(driver_info: &Map<String, Value>, configured: bool) -> bool {
    match driver_info.get("fast_track") {
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) => match s.to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => true,
            "false" | "0" | "no" | "off" => false,
            _ => configured,
        },
        _ => configured,
    }
}

/// How `LAST_HEARTBEAT` is written (UTC, upstream's format).
const HEARTBEAT_FORMAT: &str = "%Y-%m-%dT%H:%M:%S%.6f";

/// `LAST_HEARTBEAT`'s value for a heartbeat at `at`.
pub fn heartbeat_stamp(at: chrono::DateTime<chrono::Utc>) -> String {
    at.format(HEARTBEAT_FORMAT).to_string()
}

/// How long before `now` the agent last heartbeated; `None` if it never did (or the
/// stamp cannot be read).
pub fn since_heartbeat(
    dii: &Map<String, Value>,
    now: chrono::DateTime<chrono::Utc>,
) -> Option<chrono::Duration> {
    let stamp = dii.get(LAST_HEARTBEAT)?.as_str()?;
    let at = chrono::NaiveDateTime::parse_from_str(stamp, HEARTBEAT_FORMAT).ok()?;
    Some(now.naive_utc() - at)
}

/// [`lookup_allowed`], and with fast-track also the resting states a running ramdisk
/// may sit in (upstream's `FASTTRACK_LOOKUP_ALLOWED_STATES`).
pub fn lookup_allowed_with(s: P, fast_track: bool) -> bool {
    lookup_allowed(s)
        || (fast_track
            && matches!(
                s,
                P::Enroll | P::Manageable | P::Available | P::Servicing | P::ServiceHold
            ))
}

/// [`heartbeat_allowed`], and with fast-track also the resting states (recorded only,
/// [`heartbeat_record_only`]).
pub fn heartbeat_allowed_with(s: P, fast_track: bool) -> bool {
    heartbeat_allowed(s) || (fast_track && matches!(s, P::Enroll | P::Manageable | P::Available))
}

/// Whether a heartbeat in state `s` is only recorded (the node is not waiting for the
/// agent, so nothing continues).
pub fn heartbeat_record_only(s: P) -> bool {
    matches!(
        s,
        P::Enroll
            | P::Manageable
            | P::Available
            | P::Cleaning
            | P::Deploying
            | P::Rescuing
            | P::DeployHold
            | P::CleanHold
            | P::Servicing
            | P::ServiceHold
    )
}

/// A new token: 244 random bits, URL-safe: two version 4 UUIDs (each 128 bits, 6 of
/// them fixed), from the operating system's generator.
pub fn new_token() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

/// Whether `given` is the token in `dii`, compared in constant time. No token given, or
/// none stored, is never valid.
pub fn token_valid(dii: &Map<String, Value>, given: Option<&str>) -> bool {
    match (dii.get(TOKEN).and_then(Value::as_str), given) {
        (Some(known), Some(given)) if known.len() == given.len() => {
            known
                .bytes()
                .zip(given.bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0
        }
        _ => false,
    }
}

/// A heartbeat must name the agent's version or, from 1.72, its status (upstream's
/// refusal otherwise). The API and the conductor both ask.
pub fn check_version(version: Option<&str>, status: Option<&str>) -> crate::Result<()> {
    if version.is_none() && status.is_none() {
        return Err(crate::Error::Invalid(
            "Agent did not transmit a version, and a version is required. Please update the agent being used.".into(),
        ));
    }
    Ok(())
}

/// A heartbeat must carry the node's token ([`token_valid`]). The API asks on the row it
/// read, the conductor again under the node's lock.
pub fn check_token(dii: &Map<String, Value>, given: Option<&str>) -> crate::Result<()> {
    if token_valid(dii, given) {
        return Ok(());
    }
    Err(crate::Error::Invalid(
        "Invalid or missing agent token received.".into(),
    ))
}

/// A heartbeat may not change the agent's certificate once one is recorded for this
/// boot (upstream's): with the token alone (sniffed on a network without API TLS) a
/// stranger could otherwise pin its own certificate and receive the agent's commands.
/// A new boot starts without one ([`wipe_token_and_url`]). The API asks on the row it
/// read, the conductor again under the node's lock.
pub fn check_verify_ca(dii: &Map<String, Value>, given: Option<&str>) -> crate::Result<()> {
    match (dii.get(VERIFY_CA).and_then(Value::as_str), given) {
        (Some(pinned), Some(given)) if pinned != given => Err(crate::Error::Invalid(
            "Detected change in ramdisk provided \"agent_verify_ca\"".into(),
        )),
        _ => Ok(()),
    }
}

/// Forgets the agent of a provisioning that ended or starts (upstream's
/// `wipe_token_and_url`): the next ramdisk looks its node up and gets a new token.
pub fn wipe_token_and_url(dii: &mut Map<String, Value>) {
    for k in [TOKEN, TOKEN_PREGENERATED, URL, VERIFY_CA] {
        dii.remove(k);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_pinned_certificate_stays_for_the_boot() {
        let mut dii = Map::new();
        assert!(check_verify_ca(&dii, Some("pem-a")).is_ok());
        dii.insert(VERIFY_CA.into(), json!("pem-a"));
        assert!(check_verify_ca(&dii, Some("pem-a")).is_ok());
        assert!(check_verify_ca(&dii, None).is_ok());
        let e = check_verify_ca(&dii, Some("pem-b")).unwrap_err();
        assert!(e.to_string().contains("agent_verify_ca"), "{e}");
        wipe_token_and_url(&mut dii);
        assert!(check_verify_ca(&dii, Some("pem-b")).is_ok());
    }

    #[test]
    fn tokens_are_long_distinct_and_checked_exactly() {
        let (a, b) = (new_token(), new_token());
        assert_eq!(a.len(), 64);
        assert_ne!(a, b);
        let mut dii = Map::new();
        assert!(!token_valid(&dii, Some(&a)));
        dii.insert(TOKEN.into(), json!(a));
        assert!(token_valid(&dii, Some(&a)));
        assert!(!token_valid(&dii, Some(&b)));
        assert!(!token_valid(&dii, Some(&a[..63])));
        assert!(!token_valid(&dii, None));
        wipe_token_and_url(&mut dii);
        assert!(dii.is_empty());
    }

    #[test]
    fn waiting_states_allow_lookups_stable_ones_do_not() {
        assert!(lookup_allowed(P::CleanWait) && lookup_allowed(P::DeployWait));
        assert!(!lookup_allowed(P::Available) && !lookup_allowed(P::Active));
        assert!(heartbeat_allowed(P::CleanWait) && !heartbeat_record_only(P::CleanWait));
        assert!(heartbeat_allowed(P::Cleaning) && heartbeat_record_only(P::Cleaning));
        assert!(!heartbeat_allowed(P::Active));
    }
}
