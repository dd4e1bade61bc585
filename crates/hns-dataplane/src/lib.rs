//! The data plane on real devices: the node's switch (compiled from hnsd's objects) moving
//! frames between TAP vNICs and an AF_PACKET uplink.
//!
//! hnsd runs in the node's network namespace (the host). After every committed batch the
//! compiler updates the switch and [`devices`] brings the devices in line: an external network
//! takes the NIC over ([`uplink`]: the host's addresses and routes move to the management vNIC
//! `vEthernet-<nic>`, as Windows does when it creates an external vSwitch), a host-attached
//! endpoint becomes a TAP in the node's namespace, a pod endpoint a TAP in its namespace with
//! its address, gateway, MTU and DNS. A thread per core ([`pump`]) carries the frames; another
//! ([`kernel`]) follows the host's routes and neighbours, which the compiler needs (next hops,
//! provider addresses). TAPs are persistent: a restarted hnsd re-adopts them, and pods keep
//! their interfaces while it is down.

pub mod claims;
pub mod devices;
pub mod dns;
pub mod hnsd;
mod inspector;
pub mod kernel;
pub mod offload;
mod operator;
pub mod pump;
pub mod ring;
mod tracer;
pub mod uplink;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::thread::{self, JoinHandle};

use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags};
use nix::sys::eventfd::{EfdFlags, EventFd};

use hcn::error::HnsError;
use hns::service::Service;
use hns::state::{Change, State};
use hns_compiler::Compiler;

pub use hnsd::{HnsdConfig, HnsdError, run_hnsd};

use devices::Devices;
use kernel::KernelView;
use uplink::Uplink;

/// The epoll token of the wake-up eventfd (device tokens start at 1).
const WAKE: u64 = 0;

/// How the data plane is started.
#[derive(Clone, Debug)]
pub struct Config {
    /// The node's name (traces, port names).
    pub node_name: String,
    /// Where hnsd keeps its state; the record of a taken-over NIC lives here.
    pub state_dir: PathBuf,
    /// The NIC external networks bind to; the one with the default route when `None`.
    pub nic: Option<String>,
    /// The ports the SNAT pools draw from (Windows' dynamic port range).
    pub dynamic_ports: hns_compiler::DynamicPortRange,
    /// Batch the pump's TAP reads and writes with io_uring (plain calls where the kernel
    /// does not allow it).
    pub io_uring: bool,
}

/// Why the data plane could not start.
#[derive(Debug, thiserror::Error)]
pub enum DataplaneError {
    #[error("data plane: {0}")]
    Host(#[from] host::HostError),
    #[error("data plane: {0}")]
    Sys(String),
}

/// The running data plane of one node.
pub struct Dataplane {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

/// What the committer, the pump and the kernel follower share.
pub(crate) struct Shared {
    inner: Mutex<Inner>,
    epoll: Epoll,
    wake: EventFd,
    stop: AtomicBool,
    service: Weak<Service>,
    /// [`Config::io_uring`].
    pub(crate) io_uring: bool,
}

/// Everything behind the data plane's lock.
pub(crate) struct Inner {
    pub(crate) compiler: Option<Compiler>,
    pub(crate) devices: Devices,
    pub(crate) uplink: Uplink,
    pub(crate) kernel: KernelView,
    /// The pods' DNS clients (stubs), started and stopped with their endpoints.
    pub(crate) stubs: dns::Stubs,
    claims: claims::Claims,
    node_name: String,
    dynamic_ports: hns_compiler::DynamicPortRange,
}

impl Dataplane {
    /// Starts the data plane of `service`'s objects in the calling thread's namespace (the
    /// node's). Devices are made before this returns, as are those of every later commit
    /// before its caller is answered.
    pub fn start(service: &Arc<Service>, config: Config) -> Result<Dataplane, DataplaneError> {
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)
            .map_err(|e| DataplaneError::Sys(format!("epoll_create: {e}")))?;
        let wake = EventFd::from_value_and_flags(0, EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)
            .map_err(|e| DataplaneError::Sys(format!("eventfd: {e}")))?;
        epoll
            .add(&wake, EpollEvent::new(EpollFlags::EPOLLIN, WAKE))
            .map_err(|e| DataplaneError::Sys(format!("epoll_ctl: {e}")))?;
        let uplink = Uplink::open(&config.state_dir, config.nic.clone())?;
        let kernel = KernelView::new()?;
        let shared = Arc::new(Shared {
            inner: Mutex::new(Inner {
                compiler: None,
                devices: Devices::default(),
                uplink,
                kernel,
                stubs: dns::Stubs::new(tokio::runtime::Handle::try_current().ok()),
                claims: claims::Claims::default(),
                node_name: config.node_name.clone(),
                dynamic_ports: config.dynamic_ports,
            }),
            epoll,
            wake,
            stop: AtomicBool::new(false),
            service: Arc::downgrade(service),
            io_uring: config.io_uring,
        });
        let observer = Arc::clone(&shared);
        service.observe(Box::new(move |state, changes| {
            observer.on_commit(state, changes);
        }));
        service.set_tracer(tracer::tracer(Arc::downgrade(&shared)));
        service.set_resolver(dns::resolver(Arc::downgrade(&shared)));
        service.set_inspector(inspector::inspector(Arc::downgrade(&shared)));
        service.set_operator(operator::operator(Arc::downgrade(&shared)));
        let mut threads = Vec::new();
        // One clock for every pump thread: flow records compare times taken by any of them.
        let started = std::time::Instant::now();
        for i in 0..pump::threads() {
            let pump = Arc::clone(&shared);
            threads.push(
                thread::Builder::new()
                    .name(format!("hns-pump-{i}"))
                    .spawn(move || pump::run(&pump, started, i == 0))
                    .map_err(|e| {
                        DataplaneError::Sys(format!("cannot start pump thread {i}: {e}"))
                    })?,
            );
        }
        let follower = Arc::clone(&shared);
        threads.push(
            thread::Builder::new()
                .name("hns-kernel".into())
                .spawn(move || kernel::follow(&follower))
                .map_err(|e| {
                    DataplaneError::Sys(format!("cannot start the kernel follower: {e}"))
                })?,
        );
        Ok(Dataplane { shared, threads })
    }

    /// Stops carrying frames. Devices stay (TAPs are persistent): pods keep their interfaces
    /// and a restarted hnsd adopts them.
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        let _ = self.shared.wake.write(1);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Dataplane {
    fn drop(&mut self) {
        self.halt();
    }
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves the switch as the last compile made it.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// The committer's hook: compile the batch, then bring the devices in line.
    fn on_commit(&self, state: &State, changes: &[Change]) {
        let mut inner = self.lock();
        inner.compile(state, changes);
        inner.reconcile(state, &self.epoll);
        devices::remove_namespaces(changes);
    }

    /// Runs `f` on the committed state with the data plane locked (state lock first, as the
    /// committer takes them).
    pub(crate) fn with_state(&self, f: impl FnOnce(&State, &mut Inner, &Epoll)) {
        if let Some(service) = self.service.upgrade() {
            service.read(|state| {
                let mut inner = self.lock();
                f(state, &mut inner, &self.epoll);
            });
        }
    }
}

/// Answers an API question about the live switch (a trace, a dump) with `f` over the state, the
/// node's name and the compiled switch, under the data plane's lock; `NO_DATAPLANE` while the
/// data plane is stopping or before it has compiled the objects.
pub(crate) fn ask_switch<T>(
    shared: &Weak<Shared>,
    f: impl FnOnce(&State, &str, &mut Compiler) -> Result<T, HnsError>,
) -> Result<T, HnsError> {
    let stopping = || HnsError::new(hns::trace::NO_DATAPLANE, "the data plane is stopping");
    let shared = shared
        .upgrade()
        .filter(|s| !s.stopping())
        .ok_or_else(stopping)?;
    let mut answer = Err(stopping());
    shared.with_state(|state, inner, _| {
        let Inner {
            compiler,
            node_name,
            ..
        } = inner;
        answer = match compiler.as_mut() {
            Some(c) => f(state, node_name, c),
            None => Err(HnsError::new(
                hns::trace::NO_DATAPLANE,
                "the data plane has not compiled the objects yet; try again in a moment",
            )),
        };
    });
    answer
}

impl Inner {
    fn compile(&mut self, state: &State, changes: &[Change]) {
        match &mut self.compiler {
            Some(c) => c.apply(state, changes),
            None => {
                let facts = self.uplink.node_facts(
                    &self.node_name,
                    state.profile(),
                    self.kernel.resolver(),
                    self.dynamic_ports,
                );
                tracing::debug!(addresses = ?facts.addresses, routes = ?facts.routes, "node facts");
                self.compiler = Some(Compiler::build(state, facts));
            }
        }
        if let Some(c) = &self.compiler {
            for n in c.notices() {
                tracing::debug!(owner = %n.owner, "compiler: {}", n.message);
            }
        }
    }

    /// Takes the NIC over or gives it back as external networks come and go, then makes,
    /// keeps or removes each device.
    pub(crate) fn reconcile(&mut self, state: &State, epoll: &Epoll) {
        let Some(compiler) = self.compiler.as_ref() else {
            return;
        };
        let external = state
            .networks()
            .any(|n| uplink::is_external(n.network_type));
        if external
            && !self.uplink.taken()
            && let Err(e) = self.uplink.take_over()
        {
            tracing::error!("cannot take the NIC over for the external switch: {e}");
        }
        if !external && self.uplink.taken() {
            self.devices.remove_uplink_devices(epoll);
            if let Err(e) = self.uplink.give_back() {
                tracing::error!("cannot give the NIC its addresses back: {e}");
            }
        }
        devices::ensure_namespaces(state);
        let want = devices::desired(compiler, state, &self.uplink);
        let stubs = dns::Stubs::wanted(&want);
        self.devices.sync(want, epoll);
        self.stubs.sync(stubs);
        if let Some(nic) = self.uplink.nic() {
            let vnic = uplink::management_name(nic);
            self.claims.sync(compiler, &vnic, self.uplink.taken());
        }
    }
}
