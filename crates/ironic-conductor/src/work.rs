//! Background work with an owner. Everything a conductor runs after an RPC has
//! answered (cleaning, deploying, tear-down, allocations, lock releases) and every
//! periodic task (heartbeat, allocation take-over, OneView checks) runs through one
//! [`Runner`]: a graceful stop asks the periodic tasks to end, cancels what is only
//! waiting (the timer of a running clean step), and waits for work in progress, bounded
//! by `graceful_shutdown_timeout`.
//!
//! Architecture invariant: no engine work runs in an untracked `tokio::spawn`.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use tokio::sync::{Notify, watch};
use tokio_util::task::TaskTracker;

/// A periodic task: the one contract every background task of the conductor keeps
/// (heartbeat, allocation take-over, node metrics, history pruning, step waits,
/// power-state sync, OneView checks; `service.rs` `ConductorTask`). A run either
/// succeeds or says what failed, with the cause.
pub trait BackgroundTask: Send + Sync + 'static {
    fn run(&self) -> impl Future<Output = Result<(), TaskError>> + Send;
}

/// Why a periodic task's run failed: what it was doing, and the domain error it met
/// (its cause, logged with it); or several such failures of one run.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    #[error("{doing}")]
    Failed {
        doing: &'static str,
        #[source]
        source: ironic_model::Error,
    },
    #[error("{} failures", .0.len())]
    Several(Vec<TaskError>),
}

impl TaskError {
    pub fn failed(doing: &'static str, source: ironic_model::Error) -> TaskError {
        TaskError::Failed { doing, source }
    }

    /// The run's failures as one `Ok` or one error: none, one, or [`TaskError::Several`].
    pub fn all(mut failed: Vec<TaskError>) -> Result<(), TaskError> {
        match failed.len() {
            0 => Ok(()),
            1 => Err(failed.remove(0)),
            _ => Err(TaskError::Several(failed)),
        }
    }

    /// Every failure with its causes, for the log and the task's status:
    /// `doing: cause; doing: cause`.
    pub fn report(&self) -> String {
        match self {
            TaskError::Failed { doing, source } => format!("{doing}: {source}"),
            TaskError::Several(all) => all
                .iter()
                .map(TaskError::report)
                .collect::<Vec<_>>()
                .join("; "),
        }
    }
}

/// What is known of one periodic task.
#[derive(Debug, Clone, PartialEq)]
pub struct PeriodicStatus {
    pub name: &'static str,
    pub interval: Duration,
    pub runs: u64,
    pub last_start: Option<DateTime<Utc>>,
    pub last_duration: Option<Duration>,
    /// The error of the last run, if it failed.
    pub last_error: Option<String>,
}

struct Periodic {
    status: Mutex<PeriodicStatus>,
    trigger: Notify,
}

/// `ironic_periodic_running`: one more while a task's body runs, one less when it
/// ends, however it ends (a panic unwinds through the drop). Operators see what a
/// conductor is busy with; bench/scale.sh marks the reads a power-state sync round
/// overlapped. Counted up and down, not set, so that two conductors in one process
/// (tests) do not hide each other's runs.
struct Running(metrics::Gauge);

impl Running {
    fn start(g: metrics::Gauge) -> Running {
        g.increment(1.0);
        Running(g)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.decrement(1.0);
    }
}

/// Resolves when the conductor starts stopping.
pub struct StopSignal(watch::Receiver<bool>);

impl StopSignal {
    pub async fn stopped(&mut self) {
        stopped(&mut self.0).await
    }

    /// Whether the stop has begun (without waiting).
    pub fn is_stopped(&self) -> bool {
        *self.0.borrow()
    }
}

/// The owner of a conductor's background work. Cheap to clone.
#[derive(Clone)]
pub struct Runner {
    inner: Arc<Inner>,
}

struct Inner {
    /// Work and timers.
    tracker: TaskTracker,
    /// The periodic loops.
    loops: TaskTracker,
    stop: watch::Sender<bool>,
    periodic: Mutex<Vec<Arc<Periodic>>>,
}

impl Default for Runner {
    fn default() -> Self {
        Runner::new()
    }
}

impl Runner {
    pub fn new() -> Runner {
        Runner {
            inner: Arc::new(Inner {
                tracker: TaskTracker::new(),
                loops: TaskTracker::new(),
                stop: watch::channel(false).0,
                periodic: Mutex::new(Vec::new()),
            }),
        }
    }

    /// Resolves when a graceful stop begins.
    pub fn stop_signal(&self) -> StopSignal {
        StopSignal(self.inner.stop.subscribe())
    }

    /// Runs `work` in the background; a graceful stop waits for it.
    pub fn spawn(&self, what: &'static str, work: impl Future<Output = ()> + Send + 'static) {
        tracing::trace!(what, "background work started");
        self.inner.tracker.spawn(work);
    }

    /// Runs `work` after `delay`, unless the conductor stops first: then it does not
    /// run at all (what it would have continued is recovered by whoever owns the node
    /// next, as after a crash).
    pub fn after(
        &self,
        what: &'static str,
        delay: Duration,
        work: impl Future<Output = ()> + Send + 'static,
    ) {
        let mut stop = self.inner.stop.subscribe();
        self.inner.tracker.spawn(async move {
            tokio::select! {
                _ = tokio::time::sleep(delay) => work.await,
                _ = stopped(&mut stop) => {
                    tracing::debug!(what, "stopping: a timer was cancelled");
                }
            }
        });
    }

    /// Runs `body(state.clone())` every `interval` (the first run at once, or after one
    /// interval with `delay_first`), one run at a time, until the conductor stops. A
    /// zero interval disables the task. Returns a handle to trigger a run on demand.
    pub fn periodic<T: BackgroundTask>(
        &self,
        name: &'static str,
        interval: Duration,
        delay_first: bool,
        task: T,
    ) -> Option<Trigger> {
        if interval.is_zero() {
            tracing::info!(task = name, "periodic task disabled");
            return None;
        }
        let p = Arc::new(Periodic {
            status: Mutex::new(PeriodicStatus {
                name,
                interval,
                runs: 0,
                last_start: None,
                last_duration: None,
                last_error: None,
            }),
            trigger: Notify::new(),
        });
        if let Ok(mut all) = self.inner.periodic.lock() {
            all.push(p.clone());
        }
        let mut stop = self.inner.stop.subscribe();
        let me = p.clone();
        self.inner.loops.spawn(async move {
            let mut tick = tokio::time::interval(interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            if delay_first {
                tick.tick().await;
            }
            loop {
                tokio::select! {
                    biased;
                    _ = stopped(&mut stop) => break,
                    _ = tick.tick() => {}
                    _ = me.trigger.notified() => {}
                }
                let (started, at) = (Instant::now(), Utc::now());
                let gauge = metrics::gauge!("ironic_periodic_running", "task" => name);
                let running = Running::start(gauge);
                let res = task.run().await.map_err(|e| e.report());
                let took = started.elapsed();
                match &res {
                    Ok(()) => tracing::debug!(task = name, ms = took.as_millis() as u64, "periodic task ran"),
                    Err(e) => tracing::warn!(task = name, ms = took.as_millis() as u64, error = %ironic_model::secrets::log_safe(e), "periodic task failed"),
                }
                let outcome = if res.is_ok() { "ok" } else { "error" };
                metrics::counter!("ironic_periodic_runs_total", "task" => name, "outcome" => outcome)
                    .increment(1);
                metrics::histogram!("ironic_periodic_duration_seconds", "task" => name)
                    .record(took.as_secs_f64());
                // After the run is counted: a scrape in between sees it running or
                // counted, never neither.
                drop(running);
                if let Ok(mut s) = me.status.lock() {
                    s.runs += 1;
                    s.last_start = Some(at);
                    s.last_duration = Some(took);
                    s.last_error = res.err();
                }
            }
        });
        Some(Trigger(p))
    }

    /// The status of every periodic task.
    pub fn periodic_status(&self) -> Vec<PeriodicStatus> {
        self.inner
            .periodic
            .lock()
            .map(|all| {
                all.iter()
                    .filter_map(|p| p.status.lock().ok().map(|s| s.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Background work not finished yet (periodic loops not included).
    pub fn in_progress(&self) -> usize {
        self.inner.tracker.len()
    }

    /// First step of a graceful stop: periodic tasks end (after their current run,
    /// which this waits for) and timers are cancelled. Work in progress goes on, and
    /// work spawned from now on (requests still being drained) is still tracked.
    pub async fn stop_periodic(&self) {
        let _ = self.inner.stop.send(true);
        self.inner.loops.close();
        self.inner.loops.wait().await;
    }

    /// Graceful stop: [`Runner::stop_periodic`], then waits for work in progress.
    /// Returns false if it did not finish within `within` (what is left is abandoned
    /// with the process; whoever owns its nodes next recovers them, as after a crash).
    pub async fn shutdown(&self, within: Duration) -> bool {
        self.stop_periodic().await;
        self.inner.tracker.close();
        let left = self.inner.tracker.len();
        if left > 0 {
            tracing::info!(tasks = left, "waiting for background work to finish");
        }
        tokio::time::timeout(within, self.inner.tracker.wait())
            .await
            .is_ok()
    }
}

/// Resolves once a stop is asked for (holding no borrow of the value).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// Runs a periodic task now (after its current run, if one is going on).
#[derive(Clone)]
pub struct Trigger(Arc<Periodic>);

impl Trigger {
    pub fn run_now(&self) {
        self.0.trigger.notify_one();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    async fn until(what: &str, f: impl Fn() -> bool) {
        for _ in 0..1000 {
            if f() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("{what}: not within 10 s");
    }

    #[tokio::test]
    async fn shutdown_waits_for_work_and_cancels_timers() {
        let r = Runner::new();
        let done = Arc::new(AtomicUsize::new(0));
        let d = done.clone();
        r.spawn("work", async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            d.fetch_add(1, Ordering::SeqCst);
        });
        let d = done.clone();
        r.after("timer", Duration::from_secs(3600), async move {
            d.fetch_add(100, Ordering::SeqCst);
        });
        assert!(r.shutdown(Duration::from_secs(30)).await);
        assert_eq!(
            done.load(Ordering::SeqCst),
            1,
            "work ran, the timer did not"
        );
        assert_eq!(r.in_progress(), 0);
    }

    #[test]
    fn the_running_gauge_falls_back_however_the_run_ends() {
        let value = Arc::new(std::sync::atomic::AtomicU64::new(0f64.to_bits()));
        let read = || f64::from_bits(value.load(Ordering::SeqCst));
        let g = metrics::Gauge::from_arc(value.clone());
        let a = Running::start(g.clone());
        let b = Running::start(g.clone());
        assert_eq!(read(), 2.0, "two runs at once");
        drop(a);
        assert_eq!(read(), 1.0);
        drop(b);
        assert_eq!(read(), 0.0);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _running = Running::start(g);
            panic!("a task body panics");
        }));
        assert!(r.is_err());
        assert_eq!(read(), 0.0, "unwound");
    }

    #[tokio::test]
    async fn shutdown_is_bounded() {
        let r = Runner::new();
        r.spawn("stuck", std::future::pending());
        assert!(!r.shutdown(Duration::from_millis(50)).await);
    }

    /// Counts its runs; the first one fails.
    struct Count(Arc<AtomicUsize>);

    impl BackgroundTask for Count {
        async fn run(&self) -> Result<(), TaskError> {
            if self.0.fetch_add(1, Ordering::SeqCst) == 0 {
                Err(TaskError::failed(
                    "first run",
                    ironic_model::Error::Unavailable("it fails".into()),
                ))
            } else {
                Ok(())
            }
        }
    }

    #[tokio::test]
    async fn periodic_tasks_record_runs_and_can_be_triggered() {
        let r = Runner::new();
        let runs = Arc::new(AtomicUsize::new(0));
        let t = r
            .periodic(
                "count",
                Duration::from_secs(3600),
                true,
                Count(runs.clone()),
            )
            .unwrap();
        let off = r.periodic("off", Duration::ZERO, false, Count(Default::default()));
        assert!(off.is_none());
        t.run_now();
        until("first run", || runs.load(Ordering::SeqCst) == 1).await;
        until("status", || r.periodic_status()[0].runs == 1).await;
        let s = &r.periodic_status()[0];
        assert_eq!(s.name, "count");
        assert_eq!(s.last_error.as_deref(), Some("first run: it fails"));
        t.run_now();
        until("second run", || r.periodic_status()[0].runs == 2).await;
        assert_eq!(r.periodic_status()[0].last_error, None);
        assert!(r.shutdown(Duration::from_secs(30)).await);
    }
}
