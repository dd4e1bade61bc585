//! The service core: reads go straight to the in-memory state; writes go through one committer
//! thread that plans, applies and then commits them to the store in batches (group commit), so
//! concurrent clients share an fsync and a call returns only once its write is durable.

use std::sync::mpsc;
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::thread::{self, JoinHandle};

use hcn::error::{HResult, HnsError};
use tokio::sync::oneshot;

use crate::changes::ChangeLog;
use crate::profile::Profile;
use crate::resolve::{PodResolver, ResolveRequest};
use crate::state::{Change, Object, State, WriteOp};
use crate::store::{Store, StoreError};
use crate::trace::{
    Inspector, NO_DATAPLANE, Operator, TraceAnswer, TraceRequest, TraceSource, Tracer,
};

/// Most writes one transaction takes; bounds the latency of the first caller in a batch.
const MAX_BATCH: usize = 512;

type Reply = Result<Option<Object>, HnsError>;

/// Called with the state and the changes of each committed batch, on the committer thread,
/// while writes wait: the data plane compiler subscribes here ([`Service::observe`]).
pub type Observer = Box<dyn FnMut(&State, &[Change]) + Send>;

struct Job {
    op: WriteOp,
    reply: oneshot::Sender<Reply>,
}

/// hnsd's objects: the state in memory, the store on disk, and the committer between them.
pub struct Service {
    state: Arc<RwLock<State>>,
    /// Taken by [`Service::shutdown`]; writes after that fail with "stopping".
    jobs: Mutex<Option<mpsc::Sender<Job>>>,
    committer: Mutex<Option<JoinHandle<()>>>,
    profile: Profile,
    observers: Arc<Mutex<Vec<Observer>>>,
    /// The recent committed changes (`GET /linux/changes`).
    changes: Arc<Mutex<ChangeLog>>,
    /// Set by the data plane; `None` when hnsd serves the objects only.
    tracer: RwLock<Option<Tracer>>,
    /// Set by the data plane: its compiled switch as data.
    inspector: RwLock<Option<Inspector>>,
    /// Set by the data plane: an operator's hand edits of its switch.
    operator: RwLock<Option<Operator>>,
    /// Set by the data plane, which runs the pods' DNS clients.
    resolver: RwLock<Option<PodResolver>>,
}

impl Service {
    /// Loads the state from `store` and starts the committer.
    pub fn start(store: Store, profile: Profile) -> Result<Service, StoreError> {
        let state = Arc::new(RwLock::new(store.load(profile)?));
        let (jobs, rx) = mpsc::channel::<Job>();
        let shared = Arc::clone(&state);
        let observers: Arc<Mutex<Vec<Observer>>> = Arc::default();
        let watching = Arc::clone(&observers);
        let changes: Arc<Mutex<ChangeLog>> = Arc::default();
        let log = Arc::clone(&changes);
        let committer = thread::Builder::new()
            .name("hns-committer".into())
            .spawn(move || commit_loop(&store, &shared, &rx, &watching, &log))
            .map_err(|e| StoreError::Db(format!("cannot start the committer thread: {e}")))?;
        Ok(Service {
            state,
            jobs: Mutex::new(Some(jobs)),
            committer: Mutex::new(Some(committer)),
            profile,
            observers,
            changes,
            tracer: RwLock::new(None),
            inspector: RwLock::new(None),
            operator: RwLock::new(None),
            resolver: RwLock::new(None),
        })
    }

    /// Lets the data plane answer trace requests ([`Service::trace`]).
    pub fn set_tracer(&self, tracer: Tracer) {
        *self.tracer.write().unwrap_or_else(|p| p.into_inner()) = Some(tracer);
    }

    /// What the switch does with the first packet of `req`'s connection. `From` must name
    /// something (else not found) before the data plane is asked; without a data plane the
    /// error is [`NO_DATAPLANE`]. Blocks while the data plane is busy: call it off the async
    /// workers.
    pub fn trace(&self, req: &TraceRequest) -> Result<TraceAnswer, HnsError> {
        self.read(|s| TraceSource::resolve(s, &req.from))?;
        let tracer = self.tracer.read().unwrap_or_else(|p| p.into_inner());
        let Some(tracer) = tracer.as_ref() else {
            return Err(HnsError::new(
                NO_DATAPLANE,
                "hnsd runs without a data plane, so there is no switch to trace: start it with --node-netns NAME (or --dataplane) to carry and trace packets",
            ));
        };
        tracer(req)
    }

    /// Lets the data plane show its compiled switch ([`Service::switch_dump`]).
    pub fn set_inspector(&self, inspector: Inspector) {
        *self.inspector.write().unwrap_or_else(|p| p.into_inner()) = Some(inspector);
    }

    /// The compiled switch: ports, layers, rules with their owners and counters. Without a
    /// data plane the error is [`NO_DATAPLANE`]. Blocks while the data plane is busy.
    pub fn switch_dump(&self) -> Result<hns_client::switch::SwitchDump, HnsError> {
        let inspector = self.inspector.read().unwrap_or_else(|p| p.into_inner());
        let Some(inspector) = inspector.as_ref() else {
            return Err(HnsError::new(
                NO_DATAPLANE,
                "hnsd runs without a data plane, so there is no switch to show: start it with --node-netns NAME (or --dataplane)",
            ));
        };
        inspector()
    }

    /// Lets the data plane take an operator's hand edits ([`Service::edit_rules`]).
    pub fn set_operator(&self, operator: Operator) {
        *self.operator.write().unwrap_or_else(|p| p.into_inner()) = Some(operator);
    }

    /// Lists, removes or adds rules on one port of the live switch, leaving HNS objects as
    /// they are. Without a data plane the error is [`NO_DATAPLANE`]. Blocks while the data
    /// plane is busy.
    pub fn edit_rules(
        &self,
        edit: &hns_client::switch::RuleEdit,
    ) -> Result<hns_client::switch::PortRules, HnsError> {
        let operator = self.operator.read().unwrap_or_else(|p| p.into_inner());
        let Some(operator) = operator.as_ref() else {
            return Err(HnsError::new(
                NO_DATAPLANE,
                "hnsd runs without a data plane, so there is no switch to edit: start it with --node-netns NAME (or --dataplane)",
            ));
        };
        operator(edit)
    }

    /// Lets the data plane answer resolve requests ([`Service::resolve`]).
    pub fn set_resolver(&self, resolver: PodResolver) {
        *self.resolver.write().unwrap_or_else(|p| p.into_inner()) = Some(resolver);
    }

    /// What the DNS client of `req`'s pod does with its name. The endpoint must exist (else
    /// not found); without a data plane the error is [`NO_DATAPLANE`].
    pub async fn resolve(&self, req: &ResolveRequest) -> Result<dnsclient::Walk, HnsError> {
        let id = match self.read(|s| endpoint_in_netns(s, &req.endpoint)) {
            Some(found) => found?,
            None => self.endpoint_of(req)?,
        };
        let resolver = self
            .resolver
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or_else(|| {
                HnsError::new(
                    NO_DATAPLANE,
                    "hnsd runs without a data plane, so no pod has a DNS client: start it with --node-netns NAME (or --dataplane)",
                )
            })?;
        resolver(id, req.name.clone(), req.qtype).await
    }

    /// The endpoint a resolve request names by name, ID or address.
    fn endpoint_of(&self, req: &ResolveRequest) -> Result<hcn::Guid, HnsError> {
        let found = self.read(|s| TraceSource::resolve(s, &req.endpoint));
        // The lookup is the trace's; its errors name the trace's field.
        let found = found.map_err(|mut e| {
            if let Some(rest) = e.detail.strip_prefix("From:") {
                e.detail = format!("Endpoint:{rest}");
            }
            e
        })?;
        Ok(match found {
            TraceSource::Endpoint(id) => id,
            TraceSource::Address(ip) => {
                let found = self.read(|s| {
                    s.endpoints()
                        .find(|e| e.ips().any(|a| a == ip))
                        .map(|e| e.id)
                });
                found.ok_or_else(|| {
                    HnsError::new(
                        HResult::HCN_E_ENDPOINT_NOT_FOUND,
                        format!("Endpoint: no endpoint has the address {ip}; give the pod's endpoint name or ID"),
                    )
                })?
            }
        })
    }

    /// Subscribes `f` to committed changes. It is first called with every object as a `Put`
    /// (the state so far), then with each committed batch, so it never misses one.
    pub fn observe(&self, mut f: Observer) {
        let state = write_lock(&self.state);
        let all: Vec<Change> = crate::state::Kind::ALL
            .into_iter()
            .flat_map(|k| state.list_objects(k))
            .map(Change::Put)
            .collect();
        f(&state, &all);
        lock(&self.observers).push(f);
    }

    /// The objects committed after revision `since` (see [`ChangeLog::since`]).
    pub fn changes(&self, since: Option<u64>) -> hns_client::changes::Changes {
        self.changes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .since(since)
    }

    /// Finishes the writes already queued, closes the store and refuses further writes.
    pub fn shutdown(&self) {
        drop(self.jobs.lock().unwrap_or_else(|p| p.into_inner()).take());
        let committer = self
            .committer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(handle) = committer {
            // The committer only ends when the channel closes; a panic in it has been logged.
            let _ = handle.join();
        }
    }

    pub fn profile(&self) -> Profile {
        self.profile
    }

    /// Runs `f` on the current (committed) state.
    pub fn read<R>(&self, f: impl FnOnce(&State) -> R) -> R {
        f(&read_lock(&self.state))
    }

    /// Makes a write durable and returns the object as it now is.
    pub async fn write(&self, op: WriteOp) -> Reply {
        let (reply, rx) = oneshot::channel();
        let stopped = || HnsError::new(HResult::HCN_E_MANAGER_STOPPED, "hnsd is stopping");
        {
            let jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
            let jobs = jobs.as_ref().ok_or_else(stopped)?;
            jobs.send(Job { op, reply }).map_err(|_| stopped())?;
        }
        rx.await.map_err(|_| stopped())?
    }
}

fn read_lock(state: &RwLock<State>) -> RwLockReadGuard<'_, State> {
    // A panic while holding the lock cannot leave the state half-changed: changes are applied
    // whole or undone below. So a poisoned lock is still consistent.
    state.read().unwrap_or_else(|p| p.into_inner())
}

fn write_lock(state: &RwLock<State>) -> RwLockWriteGuard<'_, State> {
    state.write().unwrap_or_else(|p| p.into_inner())
}

fn lock(o: &Mutex<Vec<Observer>>) -> std::sync::MutexGuard<'_, Vec<Observer>> {
    o.lock().unwrap_or_else(|p| p.into_inner())
}

fn commit_loop(
    store: &Store,
    state: &RwLock<State>,
    rx: &mpsc::Receiver<Job>,
    observers: &Mutex<Vec<Observer>>,
    log: &Mutex<ChangeLog>,
) {
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let mut guard = write_lock(state);
        let (replies, committed) = commit_batch(store, &mut guard, batch);
        if !committed.is_empty() {
            for f in lock(observers).iter_mut() {
                f(&guard, &committed);
            }
            // Before anyone is answered: a writer that asks next finds its own change.
            log.lock()
                .unwrap_or_else(|p| p.into_inner())
                .record(&committed);
        }
        drop(guard);
        for (reply, result) in replies {
            // The caller may have gone away (client disconnected); the write stands.
            let _ = reply.send(result);
        }
    }
}

/// Plans and applies each job in order (so later jobs see earlier ones), then commits all the
/// changes at once. If the commit fails, every change is undone and every job fails. Returns
/// the replies and the changes that were committed.
fn commit_batch(
    store: &Store,
    state: &mut State,
    batch: Vec<Job>,
) -> (Vec<(oneshot::Sender<Reply>, Reply)>, Vec<Change>) {
    let mut replies = Vec::with_capacity(batch.len());
    let mut changes: Vec<Change> = Vec::new();
    let mut undo: Vec<Change> = Vec::new();
    for job in batch {
        match state.plan(job.op) {
            Ok(plan) => {
                for c in &plan.changes {
                    undo.push(undo_of(state, c));
                }
                state.apply(&plan.changes);
                changes.extend(plan.changes);
                replies.push((job.reply, Ok(plan.result)));
            }
            Err(e) => replies.push((job.reply, Err(e))),
        }
    }
    if changes.is_empty() {
        return (replies, changes);
    }
    if let Err(e) = store.commit(&changes) {
        tracing::error!(error = %e, "commit failed; undoing the batch");
        undo.reverse();
        state.apply(&undo);
        let failed = HnsError::new(
            HResult::E_OUTOFMEMORY,
            format!("the write was not stored: {e}"),
        );
        for r in replies.iter_mut() {
            if r.1.is_ok() {
                r.1 = Err(failed.clone());
            }
        }
        return (replies, Vec::new());
    }
    (replies, changes)
}

/// The change that reverses `c` on the current state.
fn undo_of(state: &State, c: &Change) -> Change {
    let (kind, id) = match c {
        Change::Put(obj) => (obj.kind(), obj.id()),
        Change::Delete(kind, id) => (*kind, *id),
    };
    match state.get(kind, id) {
        Some(old) => Change::Put(old),
        None => Change::Delete(kind, id),
    }
}

/// The pod endpoint in the network namespace at `path` when `path` is one (starts with `/`):
/// the endpoint of the HostComputeNamespace whose namespace that is.
fn endpoint_in_netns(state: &State, path: &str) -> Option<Result<hcn::Guid, HnsError>> {
    if !path.starts_with('/') {
        return None;
    }
    let found = state.endpoints().find(|e| {
        state
            .namespace(e.host_compute_namespace)
            .is_some_and(|ns| crate::state::netns_path(ns) == std::path::Path::new(path))
    });
    Some(found.map(|e| e.id).ok_or_else(|| {
        HnsError::new(
            HResult::HCN_E_ENDPOINT_NOT_FOUND,
            format!("Endpoint: no endpoint of this hnsd is in the network namespace {path}"),
        )
    }))
}
