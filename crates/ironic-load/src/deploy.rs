//! The `deploy` phase: N simultaneous `direct` deploys, each node's ramdisk played by a
//! simulated agent ([`ironic_fake_agent`]) that looks its node up, heartbeats and
//! runs the conductor's commands. Setup (not measured): N `fake-hardware` nodes with
//! `deploy_interface = direct`, an image in `instance_info` and a port each, made
//! `available` (the server must not clean automatically: `[conductor]
//! automated_clean = false`). Measured: every node `deploy`ed at once, an agent
//! started for each as its machine would boot, until all are `active`: deploys per
//! minute, the watched processes' CPU per deploy, and the API calls per deploy (the
//! deploy request and the agents' lookups and heartbeats; the progress polling of this
//! tool is counted apart).

use super::*;
use ironic_fake_agent::{AgentConfig, FakeAgent};

/// The image every node "writes" (the simulated agent checks only the fields).
const IMAGE: &str = "http://images.example/load.raw";
const SHA256: &str = "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03";

/// The i-th node's MAC: locally administered, unique up to 2^24 nodes.
fn mac(i: usize) -> String {
    format!(
        "52:54:01:{:02x}:{:02x}:{:02x}",
        (i >> 16) & 0xff,
        (i >> 8) & 0xff,
        i & 0xff
    )
}

impl Run {
    pub(crate) async fn deploy(&mut self) -> Result<(), LoadError> {
        let n = self.args.nodes;
        let rc = format!("{}-deploy", self.args.resource_class);
        // Setup: nodes, ports, available.
        let started = Instant::now();
        let next = Arc::new(AtomicUsize::new(0));
        let made = workers(&self.target, self.args.concurrency, |_, mut conn| {
            let (next, rc) = (next.clone(), rc.clone());
            async move {
                let mut out: Vec<Result<(usize, String), LoadError>> = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        break;
                    }
                    out.push(setup_node(&mut conn, &rc, i).await.map(|u| (i, u)));
                }
                out
            }
        })
        .await;
        let mut nodes = Vec::with_capacity(n);
        for r in made.into_iter().flatten() {
            nodes.push(r?);
        }
        nodes.sort();
        println!(
            "deploy: {} nodes available in {:.1} s (setup, not measured)",
            nodes.len(),
            started.elapsed().as_secs_f64()
        );

        // Measured: deploy them all; each node's agent "boots" once its deploy is taken.
        let m = self.mark();
        let api_url = self.args.url.trim_end_matches('/').to_string();
        let nodes = Arc::new(nodes);
        let next = Arc::new(AtomicUsize::new(0));
        let command_ms = self.args.agent_command_ms;
        let results = workers(&self.target, self.args.concurrency, |_, mut conn| {
            let (next, nodes, api_url) = (next.clone(), nodes.clone(), api_url.clone());
            async move {
                let mut s = Samples::default();
                let mut agents = Vec::new();
                loop {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    let Some((i, uuid)) = nodes.get(k) else { break };
                    let body = json!({"target": "active"}).to_string();
                    let t = Instant::now();
                    let a = with_retry(
                        &mut conn,
                        Method::PUT,
                        &format!("/v1/nodes/{uuid}/states/provision"),
                        Some(body.as_bytes()),
                        500,
                    )
                    .await;
                    s.record(t.elapsed(), a.ok(), || a.describe());
                    let agent = FakeAgent::start(AgentConfig {
                        api_url: api_url.clone(),
                        macs: vec![mac(*i)],
                        command_duration: Duration::from_millis(command_ms),
                        ..AgentConfig::default()
                    })
                    .await;
                    match agent {
                        Ok(a) => agents.push(a),
                        Err(e) => eprintln!("deploy: cannot start an agent: {e}"),
                    }
                }
                (s, agents)
            }
        })
        .await;
        let mut samples = Samples::default();
        let mut agents = Vec::new();
        for (s, a) in results {
            samples.merge(s);
            agents.extend(a);
        }
        // Until every node is active (or failed), polling the list.
        let mut conn = Conn::new(&self.target);
        let base = format!("/v1/nodes?resource_class={rc}&fields=uuid,provision_state");
        let deadline = Instant::now() + Duration::from_secs(self.args.deploy_timeout);
        let mut polls = 0usize;
        let (active, failed) = loop {
            let list = list_all(&mut conn, &base, "nodes").await?;
            polls += list.len().div_ceil(1000).max(1);
            let state = |s: &str| list.iter().filter(|v| v["provision_state"] == s).count();
            let (active, failed) = (state("active"), state("deploy failed"));
            if active + failed >= nodes.len() || Instant::now() > deadline {
                break (active, failed);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let (secs, cpu, client_cpu) = self.since(&m);
        let agent_calls: usize = agents.iter().map(FakeAgent::api_calls).sum();
        for a in &agents {
            a.stop().await;
        }
        let done = active.max(1) as f64;
        println!(
            "deploy: {active} active, {failed} failed of {} in {secs:.1} s: {:.0} deploys/min",
            nodes.len(),
            active as f64 / secs * 60.0
        );
        for (label, pct) in &cpu {
            println!(
                "deploy: {label} CPU {:.1} ms per deploy",
                pct / 100.0 * secs * 1000.0 / done
            );
        }
        println!(
            "deploy: API calls per deploy: {:.1} ({} deploy requests, {agent_calls} agent lookups and heartbeats; {polls} progress polls of this tool not counted)",
            (samples.latencies.len() + agent_calls) as f64 / done,
            samples.latencies.len()
        );
        self.report(Row {
            phase: "deploy".into(),
            label: "deploy until active (per node)".into(),
            seconds: secs,
            samples,
            cpu,
            client_cpu,
            ops: active,
        });
        if failed > 0 || active < nodes.len() {
            return Err(LoadError::Deploys {
                active,
                failed,
                total: nodes.len(),
            });
        }
        Ok(())
    }
}

/// One node for the deploy phase: created, a port, `manage` and `provide` (no
/// automated cleaning on the server), `available`; its uuid.
async fn setup_node(conn: &mut Conn, rc: &str, i: usize) -> Result<String, LoadError> {
    let body = json!({
        "driver": "fake-hardware",
        "deploy_interface": "direct",
        "boot_interface": "fake",
        "resource_class": rc,
        "name": format!("{rc}-{i}"),
        "instance_info": {
            "image_source": IMAGE,
            "image_os_hash_algo": "sha256",
            "image_os_hash_value": SHA256,
            "image_disk_format": "raw",
        },
    })
    .to_string();
    let a = with_retry(conn, Method::POST, "/v1/nodes", Some(body.as_bytes()), 500).await;
    let Some(uuid) = a.json()["uuid"].as_str().map(str::to_string) else {
        return Err(LoadError::refused(format!("creating node {i}"), &a));
    };
    let body = json!({"node_uuid": uuid, "address": mac(i)}).to_string();
    let a = with_retry(conn, Method::POST, "/v1/ports", Some(body.as_bytes()), 500).await;
    if !a.ok() {
        return Err(LoadError::refused(format!("port of {uuid}"), &a));
    }
    let prov = format!("/v1/nodes/{uuid}/states/provision");
    for (target, want) in [("manage", "manageable"), ("provide", "available")] {
        let body = json!({"target": target}).to_string();
        let a = with_retry(conn, Method::PUT, &prov, Some(body.as_bytes()), 500).await;
        if !a.ok() {
            return Err(LoadError::refused(format!("{target} {uuid}"), &a));
        }
        wait_node(conn, &uuid, Duration::from_secs(300), |v| {
            let s = v["provision_state"].as_str().unwrap_or("");
            if s == want {
                Some(true)
            } else if s.ends_with("failed") {
                Some(false)
            } else {
                None
            }
        })
        .await?;
    }
    Ok(uuid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_are_unique_and_well_formed() {
        let all: HashSet<String> = (0..70_000).map(mac).collect();
        assert_eq!(all.len(), 70_000);
        assert_eq!(mac(0x01_02_03), "52:54:01:01:02:03");
    }
}
