//! `oneview-simulator --listen 127.0.0.1:8443 --inventory deploy/examples/oneview-inventory.toml`:
//! a OneView appliance on HTTPS, as the real one, for trying and testing the `oneview`
//! driver. Its certificate is given (`--tls-cert`, `--tls-key`) or generated at start
//! and written where clients can trust it (`--tls-cert-out`); plain HTTP only with
//! `--insecure-http`.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use oneview_simulator::{Inventory, Settings, Simulator, TlsError};

#[derive(Parser)]
#[command(
    version,
    about = "An HPE OneView REST appliance simulator (HTTPS; plain HTTP with --insecure-http)"
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
    /// The certificate chain to serve HTTPS with (PEM; with --tls-key). None: a
    /// self-signed one is generated for the listen address, localhost and 127.0.0.1.
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The certificate's private key (PEM).
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Where to write the generated certificate (PEM) for clients to trust
    /// (`[oneview] tls_cacert_file`). Default: oneview-simulator-<port>.pem in the
    /// temporary directory.
    #[arg(long)]
    tls_cert_out: Option<PathBuf>,
    /// Serve plain HTTP instead of HTTPS (real OneView clients refuse it; tests and
    /// benchmarks on loopback only).
    #[arg(long, conflicts_with_all = ["tls_cert", "tls_key", "tls_cert_out"])]
    insecure_http: bool,
}

/// Writes `text` to `path` through a new file renamed over it: a file or link someone
/// else planted at `path` is replaced (or, in a sticky directory such as /tmp, refused),
/// never written through.
fn write_replacing(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension(format!("{}.tmp", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)?;
    f.write_all(text.as_bytes())?;
    drop(f);
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// Why the simulator has no TLS identity.
#[derive(Debug, thiserror::Error)]
enum IdentityError {
    #[error("cannot read {}", .0.display())]
    Read(PathBuf, #[source] std::io::Error),
    #[error("cannot write {}", .0.display())]
    Write(PathBuf, #[source] std::io::Error),
    #[error(transparent)]
    Tls(#[from] TlsError),
}

/// An error and its causes, joined by ": ".
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        out.push_str(": ");
        out.push_str(&cause.to_string());
        next = cause.source();
    }
    out
}

/// The TLS identity: given, or generated and written out. Returns the acceptor and,
/// when generated, where its certificate went.
fn tls(args: &Args) -> Result<(tokio_rustls::TlsAcceptor, Option<PathBuf>), IdentityError> {
    let read =
        |p: &PathBuf| std::fs::read_to_string(p).map_err(|e| IdentityError::Read(p.clone(), e));
    if let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) {
        let acceptor = oneview_simulator::tls_acceptor(&read(cert)?, &read(key)?)?;
        return Ok((acceptor, None));
    }
    let host = args
        .listen
        .rsplit_once(':')
        .map_or(args.listen.as_str(), |(h, _)| h)
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let mut hosts = vec!["localhost".to_string(), "127.0.0.1".to_string()];
    if !hosts.contains(&host) && !host.is_empty() && host != "0.0.0.0" && host != "::" {
        hosts.push(host);
    }
    let (cert, key) = oneview_simulator::self_signed(&hosts)?;
    let port = args.listen.rsplit(':').next().unwrap_or("8443");
    let out = args
        .tls_cert_out
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join(format!("oneview-simulator-{port}.pem")));
    write_replacing(&out, &cert).map_err(|e| IdentityError::Write(out.clone(), e))?;
    Ok((oneview_simulator::tls_acceptor(&cert, &key)?, Some(out)))
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
                eprintln!("oneview-simulator: {}", chain(&e));
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
    // The certificate is written before the port opens: a client that sees the port
    // can trust it at once.
    let identity = if args.insecure_http {
        None
    } else {
        match tls(&args) {
            Ok(t) => Some(t),
            Err(e) => {
                eprintln!("oneview-simulator: {}", chain(&e));
                return std::process::ExitCode::from(2);
            }
        }
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
    let simulator = Simulator::new(&inventory, settings);
    let served = if args.insecure_http {
        println!(
            "oneview-simulator serving on http://{} ({hw} server hardware; plain HTTP)",
            args.listen
        );
        simulator.serve(listener).await
    } else {
        let Some((acceptor, written)) = identity else {
            return std::process::ExitCode::from(2);
        };
        if let Some(path) = written {
            println!(
                "oneview-simulator: generated a self-signed certificate, written to {} \
                 (trust it with [oneview] tls_cacert_file)",
                path.display()
            );
        }
        println!(
            "oneview-simulator serving on https://{} ({hw} server hardware)",
            args.listen
        );
        simulator.serve_tls(listener, acceptor).await
    };
    match served {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("oneview-simulator: {e}");
            std::process::ExitCode::from(1)
        }
    }
}
