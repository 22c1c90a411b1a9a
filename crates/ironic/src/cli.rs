//! The command line shared by `ironic`, `ironic-api` and `ironic-conductor`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use ironic_config::Config;

use crate::Role;

#[derive(Parser)]
#[command(
    version,
    after_help = "Configuration layers: defaults < --config FILE < IRONIC_<SECTION>__<KEY> environment variables < flags.\nSee docs/operations.md for every option."
)]
struct Cli {
    /// TOML configuration file.
    #[arg(long, env = "IRONIC_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// Address the REST API listens on [default: 127.0.0.1:6385] (not used by ironic-conductor).
    #[arg(long, value_name = "ADDR:PORT")]
    listen: Option<SocketAddr>,
    /// Database URL: sqlite://PATH (default sqlite://data/ironic.sqlite) or postgres://user@host/db.
    #[arg(long, value_name = "URL")]
    database: Option<String>,
    /// Name of this conductor [default: the host name].
    #[arg(long, value_name = "NAME")]
    host: Option<String>,
    /// Message bus URL (split deployment) [default: amqp://guest:guest@127.0.0.1:5672/%2f].
    #[arg(long, value_name = "URL")]
    amqp: Option<String>,
}

fn about(role: Role) -> &'static str {
    match role {
        Role::AllInOne => {
            "All-in-one bare metal provisioning service: Ironic-compatible REST API and one conductor, SQLite by default"
        }
        Role::Api => {
            "Bare metal REST API (stateless): reads the database, sends node work to the conductors over AMQP"
        }
        Role::Conductor => {
            "Bare metal conductor: owns its share of the nodes (hash ring) and serves RPC over AMQP"
        }
    }
}

/// Parses the command line, starts the service of `role`, stops it on SIGTERM/SIGINT.
pub async fn run(role: Role) -> ExitCode {
    use clap::{CommandFactory, FromArgMatches};
    let cmd = Cli::command().name(role.name()).about(about(role));
    let cli = match Cli::from_arg_matches(&cmd.get_matches()) {
        Ok(c) => c,
        Err(e) => e.exit(),
    };
    let name = role.name();
    let mut cfg = match Config::load(cli.config.as_deref(), std::env::vars()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{name}: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(l) = cli.listen {
        cfg.api.listen = l;
    }
    if let Some(d) = cli.database {
        cfg.database.url = d;
    }
    if let Some(h) = cli.host {
        cfg.default.host = h;
    }
    if let Some(a) = cli.amqp {
        cfg.amqp.url = a;
    }
    if let Err(e) = cfg.validate() {
        eprintln!("{name}: {e}");
        return ExitCode::from(2);
    }
    let telemetry = crate::telemetry::init(&cfg.log, &cfg.telemetry, name);
    for w in cfg.warnings() {
        tracing::warn!("{w}");
    }
    let running = match crate::start_role(cfg, role).await {
        Ok(r) => r,
        Err(e) => {
            tracing::error!("cannot start: {}", ironic_model::error::chain(&e));
            telemetry.shutdown();
            return ExitCode::FAILURE;
        }
    };
    crate::ops::notify_ready();
    wait_for_signal().await;
    tracing::info!("shutting down");
    running.shutdown().await;
    tracing::info!("stopped");
    telemetry.shutdown();
    ExitCode::SUCCESS
}

async fn wait_for_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!("cannot listen for SIGTERM: {e}");
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
