//! A RabbitMQ virtual host of its own for each test, so tests run in parallel on one
//! broker without seeing each other's queues. Needs `rabbitmqctl` (the broker's admin
//! tool, run as root or the rabbitmq user) and the broker named by `IRONIC_TEST_AMQP`
//! (default `amqp://guest:guest@127.0.0.1:5672`, without a vhost).

use std::process::Command;

/// Why a test's vhost, user or connection could not be made.
#[derive(Debug, thiserror::Error)]
pub enum TestBusError {
    #[error("cannot run rabbitmqctl")]
    Spawn(#[source] std::io::Error),
    /// `rabbitmqctl` failed: its arguments and what it said.
    #[error("rabbitmqctl {args}: {stderr}")]
    Rabbitmqctl { args: String, stderr: String },
    #[error("not an AMQP URL: {0}")]
    NotAmqpUrl(String),
    /// A step of [`TestBus::party`] (connect, channel, queue, consume).
    #[error("{step}")]
    Party {
        step: &'static str,
        #[source]
        source: lapin::Error,
    },
}

pub fn amqp_base_url() -> String {
    std::env::var("IRONIC_TEST_AMQP")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672".to_string())
        .trim_end_matches('/')
        .to_string()
}

fn rabbitmqctl(args: &[&str]) -> Result<(), TestBusError> {
    let out = Command::new("rabbitmqctl")
        .args(args)
        .output()
        .map_err(TestBusError::Spawn)?;
    if out.status.success() {
        Ok(())
    } else {
        Err(TestBusError::Rabbitmqctl {
            args: args.join(" "),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }
}

/// A test's own connection to a vhost ([`TestBus::party`]).
pub struct Party {
    pub conn: lapin::Connection,
    pub channel: lapin::Channel,
    /// Its private queue's name (a `reply_to` for what it publishes).
    pub queue: String,
    /// What arrives on that queue.
    pub inbox: lapin::Consumer,
}

/// A fresh vhost; deleted on drop, with the users made for it.
pub struct TestBus {
    pub vhost: String,
    /// The URL of the vhost.
    pub url: String,
    users: std::sync::Mutex<Vec<String>>,
}

impl TestBus {
    pub fn new() -> Result<TestBus, TestBusError> {
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
            users: std::sync::Mutex::new(Vec::new()),
        })
    }

    /// A RabbitMQ user of its own (a random name starting with `prefix`) with these
    /// permissions on this vhost only (`configure`, `write`, `read`: regular
    /// expressions, as `rabbitmqctl set_permissions` takes them); returns the URL of the
    /// vhost as that user. The user is deleted with the vhost.
    pub fn user(
        &self,
        prefix: &str,
        configure: &str,
        write: &str,
        read: &str,
    ) -> Result<String, TestBusError> {
        let suffix = &uuid::Uuid::new_v4().simple().to_string()[..12];
        let (name, password) = (format!("{prefix}-{suffix}"), format!("pw-{suffix}"));
        rabbitmqctl(&["add_user", &name, &password])?;
        self.users
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(name.clone());
        rabbitmqctl(&[
            "set_permissions",
            "-p",
            &self.vhost,
            &name,
            configure,
            write,
            read,
        ])?;
        let base = amqp_base_url();
        let (scheme, rest) = base
            .split_once("://")
            .ok_or_else(|| TestBusError::NotAmqpUrl(base.clone()))?;
        let host = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
        Ok(format!(
            "{scheme}://{name}:{password}@{host}/{}",
            self.vhost
        ))
    }

    /// A connection of the test's own on this vhost, as another party on the bus would
    /// have: a channel, and a private queue it reads without acknowledging (where
    /// replies to its forged messages would arrive).
    pub async fn party(&self) -> Result<Party, TestBusError> {
        use lapin::options::{BasicConsumeOptions, QueueDeclareOptions};
        use lapin::types::FieldTable;
        let e = |step: &'static str, source: lapin::Error| TestBusError::Party { step, source };
        let conn = lapin::Connection::connect(&self.url, lapin::ConnectionProperties::default())
            .await
            .map_err(|err| e("connect", err))?;
        let channel = conn
            .create_channel()
            .await
            .map_err(|err| e("channel", err))?;
        let q = channel
            .queue_declare(
                "".into(),
                QueueDeclareOptions {
                    exclusive: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await
            .map_err(|err| e("queue", err))?;
        let queue = q.name().to_string();
        let inbox = channel
            .basic_consume(
                queue.as_str().into(),
                "".into(),
                BasicConsumeOptions {
                    no_ack: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await
            .map_err(|err| e("consume", err))?;
        Ok(Party {
            conn,
            channel,
            queue,
            inbox,
        })
    }

    /// Closes every client connection of this vhost, as a broker restart would.
    pub fn close_connections(&self) -> Result<(), TestBusError> {
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
        let users = std::mem::take(self.users.get_mut().unwrap_or_else(|p| p.into_inner()));
        for u in users {
            let _ = rabbitmqctl(&["delete_user", &u]);
        }
    }
}
