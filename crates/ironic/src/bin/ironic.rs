//! `ironic`: the all-in-one bare metal service (API + conductor, SQLite by default).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use ironic_config::Config;

#[derive(Parser)]
#[command(
    name = "ironic",
    version,
    about = "All-in-one bare metal provisioning service: Ironic-compatible REST API and one conductor",
    after_help = "Configuration layers: defaults < --config FILE < IRONIC_<SECTION>__<KEY> environment variables < flags.\nSee docs/operations.md for every option."
)]
struct Cli {
    /// TOML configuration file.
    #[arg(long, env = "IRONIC_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// Address the REST API listens on [default: 127.0.0.1:6385].
    #[arg(long, value_name = "ADDR:PORT")]
    listen: Option<SocketAddr>,
    /// Database URL: sqlite://PATH (default sqlite://data/ironic.sqlite) or postgres://user@host/db.
    #[arg(long, value_name = "URL")]
    database: Option<String>,
    /// Name of this conductor [default: the host name].
    #[arg(long, value_name = "NAME")]
    host: Option<String>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut cfg = match Config::load(cli.config.as_deref(), std::env::vars()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("ironic: {e}");
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
    if let Err(e) = cfg.validate() {
        eprintln!("ironic: {e}");
        return ExitCode::from(2);
    }
    ironic_config::init_logging(&cfg.log);
    for w in cfg.warnings() {
        tracing::warn!("{w}");
    }
    let running = match ironic::start(cfg).await {
        Ok(r) => r,
        Err(e) => {
            tracing::error!("cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    wait_for_signal().await;
    tracing::info!("shutting down");
    running.shutdown().await;
    tracing::info!("stopped");
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
