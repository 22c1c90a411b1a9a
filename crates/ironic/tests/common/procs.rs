//! Real service processes for end-to-end tests: `ironic-api` and `ironic-conductor`
//! binaries on a fresh PostgreSQL database and a RabbitMQ vhost of their own, logs in
//! files the test can read.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// One child process and its log file.
pub struct Proc {
    pub name: String,
    pub child: Child,
    pub log: PathBuf,
}

impl Proc {
    pub fn spawn(
        bin: &str,
        name: &str,
        args: &[String],
        env: &[(String, String)],
        dir: &std::path::Path,
    ) -> Proc {
        let log = dir.join(format!("{name}-{}.log", uuid::Uuid::new_v4().simple()));
        let file = std::fs::File::create(&log).expect("log file");
        let child = Command::new(bin)
            .args(args)
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {bin}: {e}"));
        Proc {
            name: name.to_string(),
            child,
            log,
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits (bounded) until the log contains `needle`.
    pub fn wait_log(&self, needle: &str, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if self.log_text().contains(needle) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn term(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
    }

    pub fn wait_exit(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Ok(Some(st)) = self.child.try_wait() {
                return Some(st);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.running() {
            self.kill9();
        }
    }
}

/// The shared environment of a test cluster.
pub struct Cluster {
    pub db_url: String,
    /// The vhost; shared by clusters made with [`Cluster::sharing_bus`].
    pub bus: std::sync::Arc<ironic_rpc::testing::TestBus>,
    pub dir: PathBuf,
    pub env: Vec<(String, String)>,
}

impl Cluster {
    /// `settings` are extra `IRONIC_<SECTION>__<KEY>` values.
    pub fn new(db_url: &str, settings: &[(&str, &str)]) -> Cluster {
        let bus = ironic_rpc::testing::TestBus::new().expect("a RabbitMQ vhost");
        Cluster::on(std::sync::Arc::new(bus), db_url, settings)
    }

    /// Another deployment (its own database) on this cluster's vhost.
    pub fn sharing_bus(&self, db_url: &str, settings: &[(&str, &str)]) -> Cluster {
        Cluster::on(self.bus.clone(), db_url, settings)
    }

    fn on(
        bus: std::sync::Arc<ironic_rpc::testing::TestBus>,
        db_url: &str,
        settings: &[(&str, &str)],
    ) -> Cluster {
        let dir =
            std::env::temp_dir().join(format!("ironic-split-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let mut env: Vec<(String, String)> = vec![
            ("IRONIC_DATABASE__URL".into(), db_url.into()),
            ("IRONIC_AMQP__URL".into(), bus.url.clone()),
            ("IRONIC_LOG__FILTER".into(), "info".into()),
            ("RUST_LOG".into(), "info".into()),
            // Several conductors on one host: each its own ops port.
            ("IRONIC_CONDUCTOR__HTTP_LISTEN".into(), "127.0.0.1:0".into()),
            // The test is every agent at once, from 127.0.0.1: no rate per address.
            ("IRONIC_API__RAMDISK_REQUESTS_PER_SECOND".into(), "0".into()),
            // Tests read the logs they make at debug: every line kept.
            ("IRONIC_LOG__MAX_LINES_PER_SECOND".into(), "0".into()),
        ];
        env.extend(settings.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        Cluster {
            db_url: db_url.into(),
            bus,
            dir,
            env,
        }
    }

    pub fn conductor(&self, host: &str) -> Proc {
        Proc::spawn(
            env!("CARGO_BIN_EXE_ironic-conductor"),
            host,
            &["--host".into(), host.into()],
            &self.env,
            &self.dir,
        )
    }

    /// Starts an API process and returns it with its port once it answers.
    pub fn api(&self) -> (Proc, u16) {
        let port = free_port();
        let p = Proc::spawn(
            env!("CARGO_BIN_EXE_ironic-api"),
            "api",
            &[
                "--listen".into(),
                format!("127.0.0.1:{port}"),
                "--host".into(),
                "api".into(),
            ],
            &self.env,
            &self.dir,
        );
        assert!(
            p.wait_log("ironic-api serving", Duration::from_secs(30)),
            "ironic-api did not start:\n{}",
            p.log_text()
        );
        (p, port)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // Keep the processes' logs of a failed test.
            eprintln!("logs of the failed test: {}", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
