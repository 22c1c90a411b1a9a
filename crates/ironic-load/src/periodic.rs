//! Which of the server's periodic tasks ran during a measurement, read from the
//! processes' `/metrics` before and after it (`ironic_periodic_running`, 1 while a task
//! runs, and `ironic_periodic_runs_total`, its finished runs). A read that shared the
//! machine with a pass over every node (the power-state sync) measures both; the
//! benchmark's table says so rather than leaving the reader to guess.

use std::collections::{BTreeMap, BTreeSet};

use hyper::Method;

use crate::http::{Conn, Target};

/// One process's periodic tasks: per task, whether it runs now, and the runs it has
/// finished (summed over outcomes).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Tasks(BTreeMap<String, (bool, f64)>);

/// The tasks of each process in `targets`, in order; `None` for one that did not answer.
pub async fn read(targets: &[Target]) -> Vec<Option<Tasks>> {
    let mut all = Vec::with_capacity(targets.len());
    for target in targets {
        let a = Conn::new(target).call(Method::GET, "/metrics", None).await;
        all.push(a.ok().then(|| {
            let mut t = Tasks::default();
            t.add(&String::from_utf8_lossy(&a.body));
            t
        }));
    }
    all
}

/// The tasks that ran on any process between two [`read`]s of the same targets, or
/// `None` if a process did not answer before or after (a task of its could have run
/// unseen, and its runs cannot be compared).
pub fn overlapped(before: &[Option<Tasks>], after: &[Option<Tasks>]) -> Option<Vec<String>> {
    let mut ran = BTreeSet::new();
    for (b, a) in before.iter().zip(after) {
        ran.extend(b.as_ref()?.overlapped(a.as_ref()?));
    }
    Some(ran.into_iter().collect())
}

impl Tasks {
    /// Adds one process's metrics (Prometheus text format).
    fn add(&mut self, text: &str) {
        for line in text.lines() {
            let Some((name, rest)) = line.split_once('{') else {
                continue;
            };
            let running = match name {
                "ironic_periodic_running" => true,
                "ironic_periodic_runs_total" => false,
                _ => continue,
            };
            let Some((labels, value)) = rest.rsplit_once('}') else {
                continue;
            };
            let (Some(task), Ok(v)) = (label(labels, "task"), value.trim().parse::<f64>()) else {
                continue;
            };
            let e = self.0.entry(task).or_default();
            if running {
                e.0 |= v > 0.0;
            } else {
                e.1 += v;
            }
        }
    }

    /// The tasks that ran at some time between `self` (read before) and `after`: running
    /// at either end, or with a run finished in between.
    fn overlapped(&self, after: &Tasks) -> Vec<String> {
        let names: BTreeSet<&String> = self.0.keys().chain(after.0.keys()).collect();
        names
            .into_iter()
            .filter(|n| {
                let b = self.0.get(*n).copied().unwrap_or_default();
                let a = after.0.get(*n).copied().unwrap_or_default();
                b.0 || a.0 || a.1 > b.1
            })
            .cloned()
            .collect()
    }
}

/// The value of `key` in a Prometheus label set (`a="x",task="power-state sync"`), its
/// escapes (`\"`, `\\`, `\n`) undone.
fn label(labels: &str, key: &str) -> Option<String> {
    let mut rest = labels;
    loop {
        let (k, after) = rest.split_once("=\"")?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next()? {
                (i, '"') => break i,
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                (_, c) => value.push(c),
            }
        };
        if k.trim_start_matches(',').trim() == key {
            return Some(value);
        }
        rest = &after[end + 1..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEFORE: &str = r#"# HELP ironic_periodic_running runs of a periodic task in progress, by task
# TYPE ironic_periodic_running gauge
ironic_periodic_running{task="heartbeat"} 0
ironic_periodic_running{task="power-state sync"} 0
ironic_periodic_runs_total{task="heartbeat",outcome="ok"} 4
ironic_periodic_runs_total{task="node metrics",outcome="ok"} 1
ironic_periodic_runs_total{task="node metrics",outcome="error"} 1
ironic_periodic_duration_seconds_count{task="node metrics"} 2
"#;

    #[test]
    fn labels_are_read_with_their_escapes() {
        assert_eq!(
            label(r#"outcome="ok",task="power-state sync""#, "task").as_deref(),
            Some("power-state sync")
        );
        assert_eq!(
            label(r#"a="x\",task=\"y",task="z\\""#, "task").as_deref(),
            Some("z\\")
        );
        assert_eq!(label(r#"a="x""#, "task"), None);
        assert_eq!(label(r#"task="unterminated"#, "task"), None);
    }

    #[test]
    fn a_task_overlaps_when_it_runs_at_either_end_or_finished_between() {
        let mut before = Tasks::default();
        before.add(BEFORE);
        assert_eq!(before.0["node metrics"], (false, 2.0));
        assert_eq!(before.0["heartbeat"], (false, 4.0));
        // Nothing changed: nothing overlapped.
        assert!(before.overlapped(&before).is_empty());
        // The sync started (running at the end), node metrics finished a run, and a
        // second process reports the heartbeat running.
        let mut after = Tasks::default();
        after.add(
            &BEFORE
                .replace(
                    r#"{task="power-state sync"} 0"#,
                    r#"{task="power-state sync"} 1"#,
                )
                .replace(r#"outcome="ok"} 1"#, r#"outcome="ok"} 2"#),
        );
        after.add(r#"ironic_periodic_running{task="heartbeat"} 1"#);
        assert_eq!(
            before.overlapped(&after),
            ["heartbeat", "node metrics", "power-state sync"]
        );
        // Running before and finished since: it overlapped too.
        assert_eq!(after.overlapped(&before), ["heartbeat", "power-state sync"]);
    }

    #[test]
    fn processes_are_compared_one_by_one_and_a_silent_one_says_unknown() {
        let quiet = |runs: u32| {
            let mut t = Tasks::default();
            t.add(&format!(
                "ironic_periodic_running{{task=\"power-state sync\"}} 0\n\
                 ironic_periodic_runs_total{{task=\"power-state sync\",outcome=\"ok\"}} {runs}\n"
            ));
            t
        };
        // Two conductors, each with one finished round: the same before and after.
        let before = [Some(quiet(1)), Some(quiet(2))];
        assert_eq!(overlapped(&before, &before), Some(vec![]));
        // Runs are compared per process: the second one's round ended in between.
        let after = [Some(quiet(1)), Some(quiet(3))];
        assert_eq!(
            overlapped(&before, &after),
            Some(vec!["power-state sync".to_string()])
        );
        // A process that did not answer before (or after): unknown, not "everything its
        // counters ever counted" nor "nothing".
        assert_eq!(overlapped(&[None, Some(quiet(2))], &before), None);
        assert_eq!(overlapped(&before, &[Some(quiet(1)), None]), None);
    }
}
