//! `oneview-simulator --listen 127.0.0.1:8443 --inventory deploy/examples/oneview-inventory.toml`:
//! a OneView appliance on plain HTTP for trying and testing the `oneview` driver.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use oneview_simulator::{Inventory, Settings, Simulator};

#[derive(Parser)]
#[command(
    version,
    about = "An HPE OneView REST appliance simulator (plain HTTP)"
)]
struct Args {
    /// Address to serve on.
    #[arg(long, default_value = "127.0.0.1:8443")]
    listen: String,
    /// Seed: users, server hardware types, enclosure groups, templates, server
    /// hardware (TOML or JSON). None: an empty appliance.
    #[arg(long)]
    inventory: Option<PathBuf>,
    /// How long each asynchronous task (profile, power) takes, in milliseconds.
    #[arg(long, default_value_t = 200)]
    task_duration_ms: u64,
    /// Allow applying and removing profiles on powered-on servers.
    #[arg(long)]
    allow_powered_on_changes: bool,
    /// Session lifetime without use, in seconds.
    #[arg(long, default_value_t = 86400)]
    session_ttl_secs: u64,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .init();
    let args = Args::parse();
    let inventory = match &args.inventory {
        Some(p) => match Inventory::load(p) {
            Ok(i) => i,
            Err(e) => {
                eprintln!("oneview-simulator: {e}");
                return std::process::ExitCode::from(2);
            }
        },
        None => Inventory::default(),
    };
    let settings = Settings {
        task_duration: Duration::from_millis(args.task_duration_ms),
        require_power_off: !args.allow_powered_on_changes,
        session_ttl: Duration::from_secs(args.session_ttl_secs),
    };
    let listener = match tokio::net::TcpListener::bind(&args.listen).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("oneview-simulator: cannot listen on {}: {e}", args.listen);
            return std::process::ExitCode::from(1);
        }
    };
    let hw = inventory
        .server_hardware
        .iter()
        .map(|h| h.count.unwrap_or(1) as usize)
        .sum::<usize>();
    println!(
        "oneview-simulator serving on http://{} ({hw} server hardware)",
        args.listen
    );
    match Simulator::new(&inventory, settings).serve(listener).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("oneview-simulator: {e}");
            std::process::ExitCode::from(1)
        }
    }
}
