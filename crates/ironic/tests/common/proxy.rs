//! A TCP proxy on loopback that a test can cut: between the service and PostgreSQL, it
//! plays a database outage or a network cut without touching the server everyone
//! else's tests use.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct Proxy {
    pub port: u16,
    /// Bumped by every cut: connections opened before it end.
    cuts: watch::Sender<u64>,
    down: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Forwards `127.0.0.1:<port>` to `upstream`.
    pub async fn start(upstream: std::net::SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let (cuts, _) = watch::channel(0u64);
        let down = Arc::new(AtomicBool::new(false));
        let (c2, d2) = (cuts.clone(), down.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                if d2.load(Ordering::SeqCst) {
                    // Refused: closed at once.
                    drop(client);
                    continue;
                }
                let mut cut = c2.subscribe();
                cut.mark_unchanged();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let (mut cr, mut cw) = client.into_split();
                    let (mut sr, mut sw) = server.into_split();
                    tokio::select! {
                        _ = tokio::io::copy(&mut cr, &mut sw) => {}
                        _ = tokio::io::copy(&mut sr, &mut cw) => {}
                        _ = cut.changed() => {}
                    }
                });
            }
        });
        Proxy {
            port,
            cuts,
            down,
            task,
        }
    }

    /// The database becomes unreachable: open connections are closed, new ones refused.
    pub fn cut(&self) {
        self.down.store(true, Ordering::SeqCst);
        self.cuts.send_modify(|n| *n += 1);
    }

    /// The database is reachable again.
    pub fn restore(&self) {
        self.down.store(false, Ordering::SeqCst);
    }

    /// `url` (a PostgreSQL URL on 127.0.0.1:5432) through this proxy.
    pub fn url(&self, url: &str) -> String {
        url.replace("127.0.0.1:5432", &format!("127.0.0.1:{}", self.port))
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}
