//! A RabbitMQ virtual host of its own for each test, so tests run in parallel on one
//! broker without seeing each other's queues. Needs `rabbitmqctl` (the broker's admin
//! tool, run as root or the rabbitmq user) and the broker named by `IRONIC_TEST_AMQP`
//! (default `amqp://guest:guest@127.0.0.1:5672`, without a vhost).

use std::process::Command;

pub fn amqp_base_url() -> String {
    std::env::var("IRONIC_TEST_AMQP")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672".to_string())
        .trim_end_matches('/')
        .to_string()
}

fn rabbitmqctl(args: &[&str]) -> Result<(), String> {
    let out = Command::new("rabbitmqctl")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run rabbitmqctl: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "rabbitmqctl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// A fresh vhost; deleted on drop.
pub struct TestBus {
    pub vhost: String,
    /// The URL of the vhost.
    pub url: String,
}

impl TestBus {
    pub fn new() -> Result<TestBus, String> {
        let vhost = format!(
            "ironic-test-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..12]
        );
        rabbitmqctl(&["add_vhost", &vhost])?;
        let user = amqp_base_url()
            .split_once("://")
            .and_then(|(_, r)| r.split_once(':'))
            .map_or("guest".to_string(), |(u, _)| u.to_string());
        rabbitmqctl(&["set_permissions", "-p", &vhost, &user, ".*", ".*", ".*"])?;
        Ok(TestBus {
            url: format!("{}/{vhost}", amqp_base_url()),
            vhost,
        })
    }

    /// Closes every client connection of this vhost, as a broker restart would.
    pub fn close_connections(&self) -> Result<(), String> {
        rabbitmqctl(&[
            "close_all_connections",
            "--vhost",
            &self.vhost,
            "closed by a test",
        ])
    }
}

impl Drop for TestBus {
    fn drop(&mut self) {
        let _ = rabbitmqctl(&["delete_vhost", &self.vhost]);
    }
}
