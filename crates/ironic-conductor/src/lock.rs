//! The node lock (the `reservation` column, taken by a conditional UPDATE) as the
//! conductor holds it ([`Locks`]): [`Locks::with_lock`] for work that ends with the call,
//! [`Locks::hold`] and [`Held`] for work handed to the background, each with a
//! [`Patience`]. Every path gives the lock back: explicitly, or, if the holder panicked
//! or was cancelled, from the guard's `Drop` through the conductor's [`Runner`].
//!
//! Invariant: every node write happens while this conductor holds the node's lock.

use ironic_db::Db;
use ironic_model::{AllocationId, Error, Node, NodeId};
use ironic_rpc::{Context, NodeRef};

use crate::work::Runner;

/// Gives the lock back, retrying (with a growing pause, at most 10 s) until the
/// database takes it: a lock must never outlive its work because the database was
/// down at that moment. Ends early only when the conductor stops (the next start
/// releases every lock of this host).
async fn release_until_done(db: Db, node_id: NodeId, host: String, mut stop: Stop) {
    let mut pause = std::time::Duration::from_millis(250);
    let mut attempt = 1u32;
    loop {
        match db.node_release(node_id, &host).await {
            Ok(()) => {
                if attempt > 1 {
                    tracing::info!(%node_id, attempt, "node lock released after the database came back");
                }
                return;
            }
            Err(e) => {
                metrics::counter!("ironic_node_lock_release_failures_total").increment(1);
                tracing::warn!(%node_id, attempt, error = %ironic_model::error::chain(&e), retry_in_ms = pause.as_millis() as u64, "could not release a node lock; retrying");
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = stop.stopped() => {
                tracing::warn!(%node_id, "stopping with a node lock not released; the next start of this conductor releases it");
                return;
            }
        }
        pause = (pause * 2).min(std::time::Duration::from_secs(10));
        attempt = attempt.saturating_add(1);
    }
}

type Stop = crate::work::StopSignal;

/// Stripes of the per-node gate (see [`LockBook`]).
const STRIPES: usize = 64;

/// The node locks this process holds, as it knows them: a node is noted when its lock
/// is taken and forgotten when the work holding it ends (its [`LockGuard`] drops). Taking
/// a lock passes a gate per node (striped) as a reader, so takings never wait for each
/// other; settling a doubtful lock holds it as the writer, so that while it checks and
/// releases, "the database says this host holds it, and nothing here does" is a fact,
/// not a race.
pub struct LockBook {
    held: std::sync::Mutex<std::collections::HashMap<NodeId, usize>>,
    gates: Vec<tokio::sync::RwLock<()>>,
}

impl Default for LockBook {
    fn default() -> Self {
        LockBook {
            held: Default::default(),
            gates: (0..STRIPES).map(|_| tokio::sync::RwLock::new(())).collect(),
        }
    }
}

impl LockBook {
    fn gate(&self, node_id: NodeId) -> &tokio::sync::RwLock<()> {
        &self.gates[(node_id.0.unsigned_abs() % STRIPES as u64) as usize]
    }

    fn note(&self, node_id: NodeId) {
        if let Ok(mut h) = self.held.lock() {
            *h.entry(node_id).or_default() += 1;
        }
    }

    fn forget(&self, node_id: NodeId) {
        if let Ok(mut h) = self.held.lock()
            && let Some(n) = h.get_mut(&node_id)
        {
            *n -= 1;
            if *n == 0 {
                h.remove(&node_id);
            }
        }
    }

    /// Whether work in this process holds the node's lock.
    pub fn holds(&self, node_id: NodeId) -> bool {
        self.held.lock().is_ok_and(|h| h.contains_key(&node_id))
    }
}

/// After taking a lock failed because the connection broke under the statement, the
/// lock may have been taken all the same (the database committed, the answer was lost):
/// then it would stay with this live conductor, holding no work, for good. Once the
/// database answers again, under the node's gate: if the node is locked by this host
/// and no work here holds it, the lock is that orphan, and is released.
async fn settle_doubtful_lock(
    db: Db,
    book: std::sync::Arc<LockBook>,
    node_id: NodeId,
    host: String,
    mut stop: Stop,
) {
    let mut pause = std::time::Duration::from_millis(250);
    loop {
        {
            let _gate = book.gate(node_id).write().await;
            match db.node_by_id(node_id).await {
                Ok(Some(n)) if n.reservation.as_deref() == Some(host.as_str()) => {
                    if book.holds(node_id) {
                        return;
                    }
                    match db.node_release(node_id, &host).await {
                        Ok(()) => {
                            tracing::warn!(%node_id, "released a node lock that a request took while its database connection broke");
                            return;
                        }
                        Err(e) => {
                            tracing::warn!(%node_id, error = %ironic_model::error::chain(&e), "could not check a doubtful node lock yet; retrying");
                        }
                    }
                }
                // Not locked by this host (the lock was never taken), or gone.
                Ok(_) => return,
                Err(e) => {
                    tracing::warn!(%node_id, error = %ironic_model::error::chain(&e), "could not check a doubtful node lock yet; retrying");
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = stop.stopped() => return,
        }
        pause = (pause * 2).min(std::time::Duration::from_secs(10));
    }
}

/// Whether `node` was last written by an earlier attempt of the call `ctx`.
pub(crate) fn applied_before(node: &Node, ctx: &Context) -> bool {
    ctx.attempt > 0
        && !ctx.request_id.is_empty()
        && node.last_request_id.as_deref() == Some(ctx.request_id.as_str())
}

/// Marks `node` as written by the call `ctx` (kept by its next save).
pub(crate) fn stamp(node: &mut Node, ctx: &Context) {
    if !ctx.request_id.is_empty() {
        node.last_request_id = Some(ctx.request_id.clone());
    }
}

/// What a create that a retried call may repeat found.
pub(crate) enum Stored<T> {
    /// Stored now.
    New(T),
    /// Stored by an earlier attempt of the same call (its reply was lost).
    Earlier(T),
}

/// The outcome of a create under a node's lock, `created`, for a call that may be a
/// repeat: on a repeat (`ctx.attempt > 0`) a conflict is the earlier attempt's row when
/// `earlier` reads one that `same` recognises; otherwise the conflict stands.
pub(crate) async fn create_once<T, R>(
    ctx: &Context,
    created: Result<T, Error>,
    earlier: impl FnOnce() -> R,
    same: impl FnOnce(&T) -> bool,
) -> Result<Stored<T>, Error>
where
    R: std::future::Future<Output = Result<Option<T>, Error>>,
{
    match created {
        Err(Error::Conflict(m)) if ctx.attempt > 0 => match earlier().await? {
            Some(t) if same(&t) => Ok(Stored::Earlier(t)),
            _ => Err(Error::Conflict(m)),
        },
        r => r.map(Stored::New),
    }
}

/// Gives a node lock back if the work holding it panicked or was cancelled.
struct LockGuard {
    db: Db,
    work: Runner,
    book: std::sync::Arc<LockBook>,
    node_id: NodeId,
    host: String,
    armed: bool,
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        // The work holding the lock is over, whether or not the release is done.
        self.book.forget(self.node_id);
        if !self.armed {
            return;
        }
        let (db, node_id, host) = (
            self.db.clone(),
            self.node_id,
            std::mem::take(&mut self.host),
        );
        tracing::warn!(
            %node_id,
            "node lock holder stopped early; releasing the lock"
        );
        if tokio::runtime::Handle::try_current().is_ok() {
            let stop = self.work.stop_signal();
            self.work
                .spawn("lock release", release_until_done(db, node_id, host, stop));
        }
    }
}

/// A node whose lock this conductor holds. Dropping it releases the lock (from a task
/// of its own); `save` keeps it, `release` and `save_and_release` give it back.
pub(crate) struct Held {
    pub node: Node,
    guard: LockGuard,
    /// The node as last written, for its history (`history.rs`).
    seen: crate::history::Seen,
    history: bool,
}

impl Held {
    /// Writes the node and keeps the lock.
    pub async fn save(&mut self) -> Result<(), Error> {
        self.save_dropping(None).await
    }

    /// [`Held::save`], deleting the allocation `drop_allocation` in the same
    /// transaction.
    pub async fn save_dropping(
        &mut self,
        drop_allocation: Option<AllocationId>,
    ) -> Result<(), Error> {
        self.node.reservation = Some(self.guard.host.clone());
        // History first: whoever sees the node's new state sees its history too.
        let g = &self.guard;
        crate::history::note(&g.db, self.history, &g.host, &self.seen, &self.node).await;
        let saved = self
            .guard
            .db
            .node_save_dropping(&self.node, &self.guard.host, drop_allocation)
            .await?;
        self.node = Node {
            traits: std::mem::take(&mut self.node.traits),
            ..saved
        };
        self.seen = crate::history::Seen::of(&self.node);
        Ok(())
    }

    /// The node as others see it once the lock is given back.
    pub fn unlocked(&self) -> Node {
        Node {
            reservation: None,
            ..self.node.clone()
        }
    }

    /// Writes the node and gives the lock back in the same statement.
    pub async fn save_and_release(mut self) -> Result<Node, Error> {
        self.node.reservation = None;
        let g = &self.guard;
        crate::history::note(&g.db, self.history, &g.host, &self.seen, &self.node).await;
        let res = self.guard.db.node_save(&self.node, &self.guard.host).await;
        if res.is_ok() {
            self.guard.armed = false;
        }
        res
    }

    /// For a call that writes the node: stamps the node with the call's request id
    /// (saved with its next write), and recognises a repeat of a call whose first
    /// attempt was applied (its conductor died before answering): then the lock is
    /// given back and there is nothing to do (`None`).
    pub async fn for_call(mut self, ctx: &Context) -> Option<Held> {
        if applied_before(&self.node, ctx) {
            tracing::info!(node = %self.node.uuid, request_id = %ctx.request_id, "already applied by an earlier attempt of this call");
            self.release().await;
            return None;
        }
        stamp(&mut self.node, ctx);
        Some(self)
    }

    /// Gives the lock back and returns `e`: the way out of a refused request.
    pub async fn bail<T>(self, e: Error) -> Result<T, Error> {
        self.release().await;
        Err(e)
    }

    /// Gives the lock back without writing. If that fails, the guard tries again from
    /// a task of its own when it is dropped.
    pub async fn release(mut self) {
        match self
            .guard
            .db
            .node_release(self.guard.node_id, &self.guard.host)
            .await
        {
            Ok(()) => self.guard.armed = false,
            Err(e) => tracing::warn!(
                node_id = %self.guard.node_id,
                error = %ironic_model::error::chain(&e),
                "could not release a node lock; trying again until the database takes it"
            ),
        }
    }
}

/// How long to wait for a node lock another operation holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Patience {
    /// One attempt: `Locked` at once. For callers that come back anyway (a ramdisk's
    /// lookups and heartbeats, periodic checks): never a request slot held waiting.
    Now,
    /// `[conductor] lock_attempts` attempts, `lock_retry_interval` apart: a client's call.
    Retry,
    /// Background work that must not give up while a short operation holds the node
    /// (a step's continuation): 300 attempts, `lock_retry_interval` apart.
    Background,
}

/// Attempts of [`Patience::Background`].
const BACKGROUND_ATTEMPTS: u32 = 300;

/// The node lock as this conductor takes it. Two verbs: [`Locks::hold`] hands a
/// [`Held`] node to work that may outlive the call (background work), and
/// [`Locks::with_lock`] runs a closure on the locked node and always gives the lock
/// back. Both check that the locked row is the node the caller named.
#[derive(Clone)]
pub(crate) struct Locks {
    db: Db,
    work: Runner,
    book: std::sync::Arc<LockBook>,
    host: String,
    attempts: u32,
    retry_interval: std::time::Duration,
    history: bool,
}

impl Locks {
    pub(crate) fn new(db: Db, work: Runner, settings: &crate::ConductorSettings) -> Locks {
        Locks {
            db,
            work,
            book: Default::default(),
            host: settings.host.clone(),
            attempts: settings.lock_attempts,
            retry_interval: settings.lock_retry_interval,
            history: settings.node_history,
        }
    }

    /// Takes the lock of the node `target` names, for work that may outlive this call.
    pub(crate) async fn hold(&self, target: &NodeRef, patience: Patience) -> Result<Held, Error> {
        let mut node = self.acquire(target.id, patience).await?;
        let mut guard = self.guard(target.id);
        if node.uuid != target.uuid {
            // The caller's id and uuid disagree (a stale or forged reference): touch
            // nothing.
            guard.armed = false;
            drop(guard);
            self.release(target.id).await;
            return Err(Error::node_not_found(&target.uuid));
        }
        node.reservation = Some(self.host.clone());
        Ok(Held {
            seen: crate::history::Seen::of(&node),
            history: self.history,
            node,
            guard,
        })
    }

    /// Runs `f` on the locked node and always gives the lock back. `f` writes the node
    /// through [`Held::save`] (the one save under a lock: it records the node's history
    /// and keeps the reservation).
    pub(crate) async fn with_lock<T>(
        &self,
        target: &NodeRef,
        patience: Patience,
        f: impl AsyncFnOnce(&mut Held) -> Result<T, Error>,
    ) -> Result<T, Error> {
        let mut held = self.hold(target, patience).await?;
        let res = f(&mut held).await;
        held.release().await;
        res
    }

    fn guard(&self, node_id: NodeId) -> LockGuard {
        LockGuard {
            db: self.db.clone(),
            work: self.work.clone(),
            book: self.book.clone(),
            node_id,
            host: self.host.clone(),
            armed: true,
        }
    }

    /// Takes the lock with `patience`, timed (`ironic_node_lock_wait_seconds`).
    async fn acquire(&self, node_id: NodeId, patience: Patience) -> Result<Node, Error> {
        let started = std::time::Instant::now();
        let attempts = match patience {
            Patience::Now => 1,
            Patience::Retry => self.attempts.max(1),
            Patience::Background => BACKGROUND_ATTEMPTS,
        };
        let r = self.retrying(node_id, attempts).await;
        let outcome = match &r {
            Ok(_) => "acquired",
            Err(Error::Locked(_)) => "busy",
            Err(_) => "error",
        };
        metrics::histogram!("ironic_node_lock_wait_seconds", "outcome" => outcome)
            .record(started.elapsed().as_secs_f64());
        r
    }

    async fn retrying(&self, node_id: NodeId, attempts: u32) -> Result<Node, Error> {
        let mut attempt = 1;
        loop {
            match self.reserve(node_id).await {
                Err(Error::Locked(m)) if attempt < attempts => {
                    tracing::debug!(%node_id, attempt, "node locked, retrying: {m}");
                    attempt += 1;
                    tokio::time::sleep(self.retry_interval).await;
                }
                // The API found the node a moment ago: it was deleted in between. Do
                // not show our internal id.
                Err(Error::NotFound(_)) => {
                    return Err(Error::NotFound(
                        "Node could not be found: it was deleted while this request was in progress.".into(),
                    ));
                }
                other => return other,
            }
        }
    }

    /// One attempt at the node lock, the only way this conductor takes one: noted in
    /// [`LockBook`] when taken; when the connection broke under the statement (the lock
    /// may have been taken regardless), a background task settles it once the database
    /// is back ([`settle_doubtful_lock`]).
    async fn reserve(&self, node_id: NodeId) -> Result<Node, Error> {
        let _gate = self.book.gate(node_id).read().await;
        let r = self.db.node_reserve(node_id, &self.host).await;
        match &r {
            Ok(_) => self.book.note(node_id),
            Err(Error::Unavailable(_)) => {
                let (db, book, host, stop) = (
                    self.db.clone(),
                    self.book.clone(),
                    self.host.clone(),
                    self.work.stop_signal(),
                );
                self.work.spawn(
                    "doubtful lock",
                    settle_doubtful_lock(db, book, node_id, host, stop),
                );
            }
            Err(_) => {}
        }
        r
    }

    /// Gives a lock back now, or, if the database refuses, from a background task that
    /// retries until it succeeds.
    async fn release(&self, node_id: NodeId) {
        if let Err(e) = self.db.node_release(node_id, &self.host).await {
            metrics::counter!("ironic_node_lock_release_failures_total").increment(1);
            tracing::warn!(%node_id, error = %ironic_model::error::chain(&e), "could not release a node lock; retrying in the background");
            let (db, host, stop) = (self.db.clone(), self.host.clone(), self.work.stop_signal());
            self.work
                .spawn("lock release", release_until_done(db, node_id, host, stop));
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use ironic_model::{NodeUuid, Version};

    /// A write under `with_lock` goes through `Held::save`: the node's history records
    /// what it changed, and the lock is given back whatever the closure returns.
    #[tokio::test]
    async fn with_lock_saves_with_history_and_always_releases() {
        let t = ironic_db::testing::TestDb::sqlite().await.unwrap();
        let node = Node::blank(NodeUuid::new_v4(), "fake-hardware".into(), Version::MAX);
        let created = t.db.node_create(&node).await.unwrap();
        let mut settings = crate::ConductorSettings::from_config(&ironic_config::Config::default());
        settings.host = "me".into();
        settings.node_history = true;
        let locks = Locks::new(t.db.clone(), Runner::new(), &settings);
        let target = NodeRef::from(&created);

        let seen = locks
            .with_lock(&target, Patience::Now, async |h| {
                h.node.last_error = Some("the BMC said no".into());
                h.save().await?;
                Ok(h.unlocked())
            })
            .await
            .unwrap();
        assert_eq!(seen.reservation, None);
        let stored = t.db.node_by_id(created.id).await.unwrap().unwrap();
        assert_eq!(stored.last_error.as_deref(), Some("the BMC said no"));
        assert_eq!(stored.reservation, None, "released after the closure");
        let history =
            t.db.history_list(created.id.0, None, false, 10)
                .await
                .unwrap();
        assert_eq!(history.len(), 1, "{history:?}");
        assert_eq!(history[0].severity, "ERROR");
        assert_eq!(history[0].conductor.as_deref(), Some("me"));

        // A refusal gives the lock back too, and writes nothing.
        let r: Result<(), Error> = locks
            .with_lock(&target, Patience::Now, async |h| {
                h.node.last_error = Some("not saved".into());
                Err(Error::invalid("refused"))
            })
            .await;
        assert!(r.is_err());
        let stored = t.db.node_by_id(created.id).await.unwrap().unwrap();
        assert_eq!(stored.reservation, None);
        assert_eq!(stored.last_error.as_deref(), Some("the BMC said no"));

        // A reference whose uuid is not the row's: nothing runs, the lock is released.
        let forged = NodeRef {
            uuid: NodeUuid::new_v4(),
            ..target.clone()
        };
        let r = locks
            .with_lock(&forged, Patience::Now, async |_| Ok(()))
            .await;
        assert!(matches!(r, Err(Error::NotFound(_))), "{r:?}");
        let stored = t.db.node_by_id(created.id).await.unwrap().unwrap();
        assert_eq!(stored.reservation, None);
        t.cleanup().await;
    }

    /// A lock the database took while its answer was lost is released once checked,
    /// but only if nothing in this process holds it; another host's lock is untouched.
    #[tokio::test]
    async fn a_doubtful_lock_is_released_only_when_nothing_here_holds_it() {
        let t = ironic_db::testing::TestDb::sqlite().await.unwrap();
        let node = Node::blank(NodeUuid::new_v4(), "fake-hardware".into(), Version::MAX);
        let id = t.db.node_create(&node).await.unwrap().id;
        let work = Runner::new();
        let book = std::sync::Arc::new(LockBook::default());
        let reservation =
            |db: Db| async move { db.node_by_id(id).await.unwrap().unwrap().reservation };
        let settle = |book: std::sync::Arc<LockBook>| {
            settle_doubtful_lock(t.db.clone(), book, id, "me".into(), work.stop_signal())
        };

        // Taken, its answer lost: nothing here holds it, so it is an orphan.
        t.db.node_reserve(id, "me").await.unwrap();
        settle(book.clone()).await;
        assert_eq!(reservation(t.db.clone()).await, None);

        // Taken and held by work here: kept.
        t.db.node_reserve(id, "me").await.unwrap();
        book.note(id);
        settle(book.clone()).await;
        assert_eq!(reservation(t.db.clone()).await.as_deref(), Some("me"));
        book.forget(id);
        assert!(!book.holds(id));
        t.db.node_release(id, "me").await.unwrap();

        // Another host's lock: not ours to release.
        t.db.node_reserve(id, "other").await.unwrap();
        settle(book.clone()).await;
        assert_eq!(reservation(t.db.clone()).await.as_deref(), Some("other"));
        t.cleanup().await;
    }
}
