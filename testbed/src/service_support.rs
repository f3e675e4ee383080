//! A stand-in for a Kubernetes ClusterIP Service, for tests of several
//! runner replicas: a TCP connection balancer on loopback that, like
//! kube-proxy, forwards each new client connection whole to one ready
//! endpoint and never looks inside it. It takes endpoints in turn (the IPVS
//! mode's `rr` scheduler; kube-proxy's iptables and nftables modes pick at
//! random per connection). Endpoints can be added while it runs, as an
//! EndpointSlice gains a ready pod. Include it with `mod service_support;`.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};

/// One client connection the stand-in Service forwarded.
#[derive(Debug, Clone)]
pub struct Forwarded {
    /// The endpoint's name.
    pub endpoint: String,
}

#[derive(Default)]
struct Endpoints {
    ready: Vec<(String, SocketAddr)>,
    next: usize,
    forwarded: Vec<Forwarded>,
}

/// The stand-in for a ClusterIP Service: forwards each client connection,
/// as a whole, to the next ready endpoint in turn.
pub struct Balancer {
    /// Where clients connect: the Service's address.
    pub address: SocketAddr,
    endpoints: Arc<Mutex<Endpoints>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Balancer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Balancer {
    /// Listens on an ephemeral loopback port.
    pub async fn start() -> Balancer {
        Self::start_on(0).await
    }

    /// Listens on loopback port `port` (0: any).
    pub async fn start_on(port: u16) -> Balancer {
        let listener = TcpListener::bind(("127.0.0.1", port)).await.unwrap();
        let address = listener.local_addr().unwrap();
        let endpoints = Arc::new(Mutex::new(Endpoints::default()));
        let state = endpoints.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                let picked = {
                    let mut e = state.lock().unwrap();
                    if e.ready.is_empty() {
                        None
                    } else {
                        let i = e.next % e.ready.len();
                        e.next = i + 1;
                        let (name, addr) = e.ready[i].clone();
                        e.forwarded.push(Forwarded { endpoint: name });
                        Some(addr)
                    }
                };
                // No endpoint, or it refuses: the client's connection is closed.
                let Some(addr) = picked else { continue };
                tokio::spawn(async move {
                    let mut client = client;
                    if let Ok(mut backend) = TcpStream::connect(addr).await {
                        let _ = client.set_nodelay(true);
                        let _ = backend.set_nodelay(true);
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut backend).await;
                    }
                });
            }
        });
        Balancer {
            address,
            endpoints,
            task,
        }
    }

    /// Adds a ready endpoint named `name` at `address` (`ip:port`).
    pub fn add(&self, name: &str, address: &str) {
        let addr: SocketAddr = address.parse().unwrap();
        self.endpoints
            .lock()
            .unwrap()
            .ready
            .push((name.to_string(), addr));
    }

    /// The connections forwarded so far.
    pub fn forwarded(&self) -> Vec<Forwarded> {
        self.endpoints.lock().unwrap().forwarded.clone()
    }
}
