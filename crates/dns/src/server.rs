//! The transport: UDP and TCP on each listen address, on our own loops over tokio sockets.
//! Local answers are computed inline by the receiving task (no task per query); only questions
//! for the upstreams get a task of their own, so a slow upstream never stalls other clients.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::Semaphore;

use crate::handler::{Handler, Reply, Transport};

/// An idle TCP connection is closed after this long.
const TCP_IDLE: Duration = Duration::from_secs(10);
/// TCP connections served at once; more wait in the kernel's backlog.
const TCP_CONNECTIONS: usize = 1024;

/// The sockets the DNS answers on.
#[derive(Default)]
pub struct Sockets {
    pub udp: Vec<UdpSocket>,
    pub tcp: Vec<TcpListener>,
}

impl Sockets {
    /// Binds UDP and TCP on every address; the error names the address.
    pub async fn bind(addrs: &[SocketAddr]) -> Result<Sockets, String> {
        let mut sockets = Sockets::default();
        for addr in addrs {
            let udp = UdpSocket::bind(addr)
                .await
                .map_err(|e| format!("--listen {addr} (UDP): {e}"))?;
            // Port 0 means "any": TCP takes the port UDP got, so both are on one address.
            let tcp_addr = udp
                .local_addr()
                .map_err(|e| format!("--listen {addr}: {e}"))?;
            let tcp = TcpListener::bind(tcp_addr)
                .await
                .map_err(|e| format!("--listen {tcp_addr} (TCP): {e}"))?;
            sockets.udp.push(udp);
            sockets.tcp.push(tcp);
        }
        Ok(sockets)
    }

    /// The UDP addresses bound (the TCP ones are the same).
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.udp
            .iter()
            .filter_map(|s| s.local_addr().ok())
            .collect()
    }
}

/// Serves on `sockets` with `handler` until the tasks are aborted.
pub fn spawn(handler: Arc<Handler>, sockets: Sockets) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    // One receiver per core on each UDP socket: answering is CPU work done in the receiver.
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    for socket in sockets.udp {
        let socket = Arc::new(socket);
        for _ in 0..workers {
            tasks.push(tokio::spawn(udp_loop(
                Arc::clone(&handler),
                Arc::clone(&socket),
            )));
        }
    }
    let permits = Arc::new(Semaphore::new(TCP_CONNECTIONS));
    for listener in sockets.tcp {
        tasks.push(tokio::spawn(tcp_accept(
            Arc::clone(&handler),
            listener,
            Arc::clone(&permits),
        )));
    }
    tasks
}

async fn udp_loop(handler: Arc<Handler>, socket: Arc<UdpSocket>) {
    let mut buf = vec![0u8; 65535];
    loop {
        let (n, peer) = match socket.recv_from(&mut buf).await {
            Ok(r) => r,
            Err(e) => {
                // ICMP errors from earlier sends surface here; the socket stays usable.
                tracing::debug!(error = %e, "udp receive");
                continue;
            }
        };
        if peer.port() == 0 {
            continue; // cannot be answered
        }
        match handler.handle(&buf[..n], Transport::Udp) {
            Reply::Now(bytes) => {
                let _ = socket.send_to(&bytes, peer).await;
            }
            Reply::Drop => {}
            Reply::Upstream(pending) => {
                let (handler, socket) = (Arc::clone(&handler), Arc::clone(&socket));
                tokio::spawn(async move {
                    let bytes = handler.finish(pending).await;
                    let _ = socket.send_to(&bytes, peer).await;
                });
            }
        }
    }
}

async fn tcp_accept(handler: Arc<Handler>, listener: TcpListener, permits: Arc<Semaphore>) {
    loop {
        let Ok(permit) = Arc::clone(&permits).acquire_owned().await else {
            return;
        };
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                tracing::debug!(error = %e, "tcp accept");
                continue;
            }
        };
        let handler = Arc::clone(&handler);
        tokio::spawn(async move {
            tcp_connection(&handler, stream).await;
            drop(permit);
        });
    }
}

/// Length-prefixed messages, answered in order, until the client closes or idles.
async fn tcp_connection(handler: &Handler, mut stream: TcpStream) {
    loop {
        let Ok(Ok(len)) = tokio::time::timeout(TCP_IDLE, stream.read_u16()).await else {
            return;
        };
        let mut buf = vec![0u8; usize::from(len)];
        if !matches!(
            tokio::time::timeout(TCP_IDLE, stream.read_exact(&mut buf)).await,
            Ok(Ok(_))
        ) {
            return;
        }
        let bytes = match handler.handle(&buf, Transport::Tcp) {
            Reply::Now(bytes) => bytes,
            Reply::Drop => continue,
            Reply::Upstream(pending) => handler.finish(pending).await,
        };
        let Ok(len) = u16::try_from(bytes.len()) else {
            return;
        };
        let mut framed = Vec::with_capacity(bytes.len() + 2);
        framed.extend_from_slice(&len.to_be_bytes());
        framed.extend_from_slice(&bytes);
        if stream.write_all(&framed).await.is_err() {
            return;
        }
    }
}
