//! A TCP forwarder a test puts between a client and a server: the client keeps one
//! address while the server behind it is killed, restarted on another port, or not
//! up yet.

use std::sync::{Arc, Mutex};
use tokio::net::{TcpListener, TcpStream};

/// Forwards each connection accepted on its address to the current target.
pub struct Forwarder {
    /// `http://127.0.0.1:PORT`, the address clients are given.
    pub url: String,
    target: Arc<Mutex<String>>,
    task: tokio::task::JoinHandle<()>,
}

/// `host:port` of a URL or of a `host:port`.
fn host_port(to: &str) -> String {
    to.trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned()
}

impl Forwarder {
    /// A forwarder on a free local port, to `to` (a URL or `host:port`).
    pub async fn start(to: &str) -> Forwarder {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a local port");
        Forwarder::on(listener, to)
    }

    /// A forwarder on `listener` (bound before the server exists), to `to`.
    pub fn on(listener: TcpListener, to: &str) -> Forwarder {
        let url = format!("http://{}", listener.local_addr().expect("local address"));
        let target = Arc::new(Mutex::new(host_port(to)));
        let t = target.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let to = t.lock().expect("target lock").clone();
                tokio::spawn(async move {
                    if let Ok(mut out) = TcpStream::connect(to).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
                    }
                });
            }
        });
        Forwarder { url, target, task }
    }

    /// New connections go to `to` from now on (open ones stay where they are).
    pub fn retarget(&self, to: &str) {
        *self.target.lock().expect("target lock") = host_port(to);
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.task.abort();
    }
}
