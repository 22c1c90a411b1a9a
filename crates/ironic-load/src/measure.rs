//! Latency samples, and the CPU and memory of the server's processes (from /proc).

use std::time::Duration;

/// The latencies and errors of one kind of request.
#[derive(Default)]
pub struct Samples {
    pub latencies: Vec<Duration>,
    pub errors: usize,
    /// The first few errors, for the report.
    pub error_samples: Vec<String>,
}

impl Samples {
    pub fn record(&mut self, took: Duration, ok: bool, what: impl FnOnce() -> String) {
        self.latencies.push(took);
        if !ok {
            self.errors += 1;
            if self.error_samples.len() < 3 {
                self.error_samples.push(what());
            }
        }
    }

    pub fn merge(&mut self, other: Samples) {
        self.latencies.extend(other.latencies);
        self.errors += other.errors;
        for e in other.error_samples {
            if self.error_samples.len() < 3 {
                self.error_samples.push(e);
            }
        }
    }

    /// The samples of every worker together.
    pub fn merged(parts: Vec<Samples>) -> Samples {
        let mut all = Samples::default();
        parts.into_iter().for_each(|s| all.merge(s));
        all
    }

    /// The samples of every worker together, and the sum of the operations they counted.
    pub fn merged_counted(parts: Vec<(Samples, usize)>) -> (Samples, usize) {
        let mut ops = 0;
        let all = Samples::merged(
            parts
                .into_iter()
                .map(|(s, n)| {
                    ops += n;
                    s
                })
                .collect(),
        );
        (all, ops)
    }

    /// The latency below which `q` (0..1) of the samples fall, in milliseconds.
    pub fn quantile_ms(&mut self, q: f64) -> f64 {
        if self.latencies.is_empty() {
            return 0.0;
        }
        self.latencies.sort_unstable();
        let last = self.latencies.len() - 1;
        let i = ((last as f64) * q).round() as usize;
        self.latencies[i.min(last)].as_secs_f64() * 1000.0
    }
}

/// Clock ticks per second of /proc/PID/stat (USER_HZ, 100 on Linux everywhere we run).
const TICKS: f64 = 100.0;

/// A process and its descendants (upstream forks workers; PostgreSQL runs one backend
/// per connection).
fn tree(pid: u32) -> Vec<u32> {
    let mut all = vec![pid];
    let mut parents: Vec<(u32, u32)> = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            if let Some(pp) = stat_fields(p).and_then(|f| f.get(1).and_then(|s| s.parse().ok())) {
                parents.push((p, pp));
            }
        }
    }
    let mut i = 0;
    while i < all.len() {
        let cur = all[i];
        all.extend(parents.iter().filter(|(_, pp)| *pp == cur).map(|(p, _)| *p));
        i += 1;
    }
    all
}

/// Fields of /proc/PID/stat after the command name: [state, ppid, ...].
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &s[s.rfind(')')? + 2..];
    Some(after.split_whitespace().map(str::to_string).collect())
}

/// CPU seconds (user + system) used so far by `pid` and its descendants.
pub fn cpu_seconds(pid: u32) -> f64 {
    tree(pid)
        .into_iter()
        .filter_map(stat_fields)
        .map(|f| {
            // utime and stime are fields 14 and 15 of stat: 11 and 12 after the name.
            let t = |i: usize| f.get(i).and_then(|s| s.parse::<f64>().ok()).unwrap_or(0.0);
            (t(11) + t(12)) / TICKS
        })
        .sum()
}

/// Resident memory of `pid` and its descendants, MiB.
pub fn rss_mib(pid: u32) -> f64 {
    tree(pid)
        .into_iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/status")).ok())
        .filter_map(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        })
        .sum::<f64>()
        / 1024.0
}

/// This process's own CPU seconds (the load generator must not be the bottleneck).
pub fn own_cpu_seconds() -> f64 {
    cpu_seconds(std::process::id())
}
