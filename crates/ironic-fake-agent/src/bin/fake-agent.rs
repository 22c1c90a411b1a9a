//! One simulated ramdisk agent (`ironic_fake_agent`) as a process, for scripts
//! that drive the `direct` deploy with the real clients and no machine
//! (`tests/compat/openstackclient.sh`): it looks its node up by MAC, heartbeats, and
//! answers the conductor's commands until it is stopped (SIGTERM, SIGINT). Prints its
//! URL once it listens. A load generator's part, not
//! a test peer: the real agent is `crates/ironic/tests/machines.rs`'s.
//!
//!   fake-agent --api http://127.0.0.1:6385 --mac 52:54:00:aa:bb:01 [--heartbeat-secs 1]

use std::time::Duration;

use clap::Parser;
use ironic_fake_agent::{AgentConfig, FakeAgent};

#[derive(Parser)]
#[command(about = "A simulated ironic-python-agent for one node")]
struct Args {
    /// The Ironic API's base URL (plain http).
    #[arg(long)]
    api: String,
    /// The node's port MAC addresses it looks itself up by.
    #[arg(long = "mac", required = true)]
    macs: Vec<String>,
    /// Seconds between heartbeats (default: as the agent, from the lookup's answer).
    #[arg(long)]
    heartbeat_secs: Option<f64>,
    /// Milliseconds an asynchronous command (e.g. writing the image) runs.
    #[arg(long, default_value_t = 500)]
    command_ms: u64,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let agent = match FakeAgent::start(AgentConfig {
        api_url: args.api,
        macs: args.macs,
        heartbeat_interval: args.heartbeat_secs.map(Duration::from_secs_f64),
        command_duration: Duration::from_millis(args.command_ms),
        ..AgentConfig::default()
    })
    .await
    {
        Ok(a) => a,
        Err(e) => {
            eprintln!("fake-agent: cannot start: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    println!("{}", agent.url());
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminated() => {}
    }
    agent.stop().await;
    std::process::ExitCode::SUCCESS
}

#[cfg(unix)]
async fn terminated() {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut s) => {
            s.recv().await;
        }
        Err(_) => std::future::pending().await,
    }
}
