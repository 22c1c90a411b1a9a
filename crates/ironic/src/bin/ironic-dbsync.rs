//! `ironic-dbsync upgrade`: applies the schema migrations to the configured database
//! (the first run also gives the database the deployment's cluster id, which
//! `ironic-dbsync cluster-id` prints).

use clap::{Parser, Subcommand};
use ironic_config::Config;
use ironic_db::{Db, DbOptions};

#[derive(Parser)]
#[command(
    name = "ironic-dbsync",
    about = "Create or upgrade the Ironic database schema"
)]
struct Cli {
    /// TOML configuration file.
    #[arg(long, env = "IRONIC_CONFIG")]
    config: Option<std::path::PathBuf>,
    /// Database URL: sqlite://PATH or postgres://user@host/db (overrides the file).
    #[arg(long)]
    database: Option<String>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Apply every pending migration (idempotent).
    Upgrade,
    /// Print the newest applied migration.
    Version,
    /// Print the deployment's cluster id (part of its message-bus queue names).
    ClusterId,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let mut cfg = match Config::load(cli.config.as_deref(), std::env::vars()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("ironic-dbsync: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    if let Some(url) = cli.database {
        cfg.database.url = url;
    }
    ironic_config::init_logging(&cfg.log);
    let db = match Db::connect(
        &cfg.database.url,
        &DbOptions {
            max_connections: 1,
            create: true,
            ..Default::default()
        },
    )
    .await
    {
        Ok(db) => db,
        Err(e) => {
            eprintln!("ironic-dbsync: {}", ironic_model::error::chain(&e));
            return std::process::ExitCode::FAILURE;
        }
    };
    let res = match cli.cmd {
        Cmd::Upgrade => db
            .migrate()
            .await
            .map(|()| println!("schema is up to date")),
        Cmd::Version => db.schema_version().await.map(|v| match v {
            Some(v) => println!("{v}"),
            None => println!("no migration applied"),
        }),
        Cmd::ClusterId => db.cluster_id().await.map(|id| println!("{id}")),
    };
    db.close().await;
    match res {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ironic-dbsync: {}", ironic_model::error::chain(&e));
            std::process::ExitCode::FAILURE
        }
    }
}
