//! What a caller knows of the conductors, as a trait: who is alive and which conductor
//! owns a node on the hash ring. The RPC router (`ironic-rpc`) routes with it; the
//! implementation over the `conductors` table lives in `ironic-db` (`Topology`) and is
//! wired in the binaries, so the transport does not depend on the database.

use std::future::Future;
use std::pin::Pin;

pub trait Membership: Send + Sync {
    /// The live conductor that owns the node `uuid` of hardware type `driver` in
    /// conductor group `group`, if any serves them.
    fn owner(&self, group: &str, driver: &str, uuid: &str) -> Option<String>;
    /// The owner on the ring without `exclude` (a conductor whose queue just vanished,
    /// though its heartbeat has not yet timed out).
    fn owner_without(&self, group: &str, driver: &str, uuid: &str, exclude: &str)
    -> Option<String>;
    /// Whether any conductor is alive.
    fn any_alive(&self) -> bool;
    /// Whether the conductor `host` has been declared dead (not merely offline: a
    /// conductor that is stopping gracefully finishes the calls it took).
    fn is_dead(&self, host: &str) -> bool;
    /// The incarnation (how many times it has started) of the latest run of the
    /// conductor `host` seen, if known: a call taken by an earlier run is lost even when
    /// the host restarted too quickly to be declared dead.
    fn incarnation(&self, _host: &str) -> Option<i64> {
        None
    }
    /// Reads the membership again unless that happened a moment ago (after a miss).
    fn refresh_soon(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;
}
