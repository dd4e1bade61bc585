//! Sockets made inside a pod's network namespace. A socket belongs to the namespace of the
//! thread that made it, for its whole life, wherever it is used afterwards; so one thread per
//! pod waits inside the pod's namespace and makes sockets on request, and the tokio tasks of
//! the stub use them from anywhere.

use std::io;
use std::net::SocketAddr;
use std::sync::mpsc;
use std::thread::JoinHandle;

use host::HostError;
use host::link::Netlink;
use host::netns::Netns;
use socket2::{Domain, Protocol, Socket, Type};

/// Where the namespace's thread sends a socket it made.
type Reply = Box<dyn FnOnce(io::Result<Socket>) + Send>;

/// A request to the namespace's thread: a new socket of this shape, bound to `bind` when
/// given.
struct Request {
    domain: Domain,
    ty: Type,
    bind: Option<SocketAddr>,
    reply: Reply,
}

/// The socket maker of one pod's network namespace.
pub struct PodSockets {
    netns: Netns,
    requests: Option<mpsc::Sender<Request>>,
    thread: Option<JoinHandle<()>>,
}

impl PodSockets {
    /// Starts the maker thread inside `netns` and brings `lo` up there (a Windows compartment
    /// always has loopback; the stub listens on it).
    pub fn open(netns: &Netns) -> Result<PodSockets, HostError> {
        let (requests, inbox) = mpsc::channel::<Request>();
        let (ready_tx, ready_rx) = mpsc::channel::<Result<(), HostError>>();
        let ns = netns.clone();
        let thread = std::thread::Builder::new()
            .name("dns-netns".into())
            .spawn(move || {
                let entered = ns.enter().and_then(|()| loopback_up());
                let ok = entered.is_ok();
                let _ = ready_tx.send(entered);
                if ok {
                    serve(inbox);
                }
            })
            .map_err(|e| HostError::io("start the DNS client's namespace thread", e))?;
        let ready = ready_rx.recv().unwrap_or_else(|_| {
            Err(HostError::NotFound(format!(
                "the DNS client's thread for {} ended before it was ready",
                netns.path().display()
            )))
        });
        let sockets = PodSockets {
            netns: netns.clone(),
            requests: Some(requests),
            thread: Some(thread),
        };
        ready.map(|()| sockets)
    }

    /// The namespace the sockets are made in.
    pub fn netns(&self) -> &Netns {
        &self.netns
    }

    /// A new non-blocking, close-on-exec socket in the pod's namespace, bound to `bind` when
    /// given; with SO_REUSEADDR when that names a port (a server's), never for an ephemeral
    /// one (port 0, or none).
    pub async fn socket(
        &self,
        domain: Domain,
        ty: Type,
        bind: Option<SocketAddr>,
    ) -> io::Result<Socket> {
        let (tx, answer) = tokio::sync::oneshot::channel();
        self.ask(domain, ty, bind, Box::new(move |s| drop(tx.send(s))))?;
        answer.await.map_err(|_| gone())?
    }

    /// As [`PodSockets::socket`], blocking the calling thread (briefly) until it is made.
    pub fn socket_blocking(
        &self,
        domain: Domain,
        ty: Type,
        bind: Option<SocketAddr>,
    ) -> io::Result<Socket> {
        let (tx, answer) = mpsc::channel();
        self.ask(domain, ty, bind, Box::new(move |s| drop(tx.send(s))))?;
        answer.recv().map_err(|_| gone())?
    }

    fn ask(
        &self,
        domain: Domain,
        ty: Type,
        bind: Option<SocketAddr>,
        reply: Reply,
    ) -> io::Result<()> {
        let request = Request {
            domain,
            ty,
            bind,
            reply,
        };
        self.requests
            .as_ref()
            .ok_or_else(gone)?
            .send(request)
            .map_err(|_| gone())
    }
}

impl Drop for PodSockets {
    fn drop(&mut self) {
        // Closing the channel ends the thread.
        self.requests.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The namespace thread's loop.
fn serve(inbox: mpsc::Receiver<Request>) {
    while let Ok(r) = inbox.recv() {
        (r.reply)(make(r.domain, r.ty, r.bind));
    }
}

fn gone() -> io::Error {
    io::Error::other("the pod's namespace thread has stopped")
}

fn make(domain: Domain, ty: Type, bind: Option<SocketAddr>) -> io::Result<Socket> {
    let protocol = if ty == Type::STREAM {
        Protocol::TCP
    } else {
        Protocol::UDP
    };
    let s = Socket::new(domain, ty.cloexec(), Some(protocol))?;
    s.set_nonblocking(true)?;
    // A server's port: another server in the pod may bind the wildcard address on it. Never
    // on an ephemeral port: Linux gives a UDP socket with SO_REUSEADDR a port another such
    // socket holds, and the newer socket then gets every datagram to it, so a query whose
    // port was given out again never sees its answer.
    if bind.is_some_and(|a| a.port() != 0) {
        s.set_reuse_address(true)?;
    }
    if let Some(addr) = bind {
        s.bind(&addr.into())?;
    }
    Ok(s)
}

/// Brings `lo` up in the calling thread's namespace.
fn loopback_up() -> Result<(), HostError> {
    let mut nl = Netlink::open()?;
    let lo = nl
        .link("lo")?
        .ok_or_else(|| HostError::NotFound("the pod's namespace has no lo".into()))?;
    nl.set_up(lo.index, true)
}
