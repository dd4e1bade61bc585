//! hnsd as users run it (`winnet hnsd`, a real process): killed with SIGKILL in the middle of
//! parallel endpoint creates, it comes back with every acknowledged create and nothing
//! half-written; and one hnsd per socket, a stale socket replaced.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hcn::{Endpoint, Guid, IpConfig, MacAddress, Network};
use hns_client::Client;
use testkit::hnsd::{HnsdCommand, HnsdProcess, l2bridge};

/// Endpoint creates in the crash test.
const CREATES: usize = 200;
/// Parallel clients, as CNI runs plugins in parallel.
const CLIENTS: usize = 8;
/// hnsd is killed right after this many creates were acknowledged.
const KILL_AFTER: usize = 80;

/// `winnet hnsd` with its store, socket and log where the test puts them; the process is
/// killed (SIGKILL) and reaped when dropped, so a failing test leaves nothing running.
fn winnet_hnsd(state_dir: &Path, socket: &Path, log: &Path) -> HnsdCommand {
    HnsdCommand::new(env!("CARGO_BIN_EXE_winnet"), state_dir)
        .state_dir(state_dir)
        .socket(socket)
        .log(log)
        .log_level("warn")
}

fn pid(hnsd: &HnsdProcess) -> i32 {
    i32::try_from(hnsd.pid()).expect("pid fits in pid_t")
}

/// One planned create: the name and, for half of them, the address the caller asks for.
#[derive(Clone, Debug)]
struct Planned {
    name: String,
    ip: Option<IpAddr>,
}

/// What hnsd acknowledged for a create.
#[derive(Clone, Debug)]
struct Acked {
    id: Guid,
    ip: IpAddr,
    mac: MacAddress,
}

/// Even creates ask for an address in 10.0.200.0/22; odd ones leave it to HNS IPAM, which
/// hands out the low addresses of 10.0.0.0/16, so the two never meet.
fn plan() -> Vec<Planned> {
    (0..CREATES)
        .map(|i| Planned {
            name: format!("crash-ep-{i:03}"),
            ip: (i % 2 == 0).then(|| {
                let n = u8::try_from(i / 2).expect("fewer than 256 explicit addresses");
                IpAddr::V4(Ipv4Addr::new(10, 0, 200, n + 1))
            }),
        })
        .collect()
}

fn network_doc() -> Network {
    serde_json::from_value(l2bridge("crash-l2bridge", "10.0.0.0/16", "10.0.0.1"))
        .expect("network document")
}

fn endpoint_doc(network: Guid, p: &Planned) -> Endpoint {
    Endpoint {
        name: p.name.clone(),
        host_compute_network: network,
        ip_configurations: p
            .ip
            .map(|ip| {
                vec![IpConfig {
                    ip_address: Some(ip),
                    prefix_length: 16,
                }]
            })
            .unwrap_or_default(),
        ..Endpoint::default()
    }
}

/// The single address and the MAC of a stored endpoint; panics naming the endpoint if either is
/// missing, i.e. if the endpoint is not whole.
fn address_of(e: &Endpoint) -> (IpAddr, MacAddress) {
    let ips: Vec<IpAddr> = e.ips().collect();
    assert_eq!(
        ips.len(),
        1,
        "endpoint {} ({}) has addresses {ips:?}",
        e.id,
        e.name
    );
    let mac = e
        .mac_address
        .unwrap_or_else(|| panic!("endpoint {} ({}) has no MAC", e.id, e.name));
    (ips[0], mac)
}

/// Every stored endpoint is whole, on `network`, inside its subnet; no IP, MAC or name twice.
/// Returns the endpoints by name.
async fn check_store(client: &Client, network: Guid) -> HashMap<String, Endpoint> {
    // The raw documents must decode as HNS endpoints, not just as JSON.
    for raw in client
        .list_raw(hns_client::Kind::Endpoint, None)
        .await
        .expect("list endpoints")
    {
        let bytes = serde_json::to_vec(&raw).expect("re-encode");
        hcn::decode::<Endpoint>(&bytes)
            .unwrap_or_else(|e| panic!("stored endpoint does not decode: {e}: {raw}"));
    }
    let all = client.list_endpoints().await.expect("list endpoints");
    let (mut ips, mut macs) = (HashSet::new(), HashSet::new());
    let mut by_name = HashMap::new();
    for e in all {
        assert!(!e.id.is_nil(), "an endpoint without an ID: {e:?}");
        assert_eq!(e.host_compute_network, network, "endpoint {} network", e.id);
        let (ip, mac) = address_of(&e);
        let in_subnet = matches!(ip, IpAddr::V4(v4) if v4.octets()[..2] == [10, 0]);
        assert!(in_subnet, "endpoint {} has {ip}, outside 10.0.0.0/16", e.id);
        assert!(ips.insert(ip), "IP {ip} is stored twice");
        assert!(macs.insert(mac), "MAC {mac} is stored twice");
        let name = e.name.clone();
        assert!(
            by_name.insert(name.clone(), e).is_none(),
            "endpoint {name} is stored twice"
        );
    }
    by_name
}

/// Runs the planned creates `todo` with [`CLIENTS`] clients. Returns the acknowledged ones
/// (by index) and the indices whose outcome is unknown because hnsd died under them. When
/// `kill` is given, that process is SIGKILLed right after the `KILL_AFTER`th acknowledgement.
async fn run_creates(
    socket: &Path,
    network: Guid,
    plan: &[Planned],
    todo: Vec<usize>,
    kill: Option<i32>,
) -> (HashMap<usize, Acked>, Vec<usize>) {
    let todo = Arc::new(todo);
    let next = Arc::new(AtomicUsize::new(0));
    let killed = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(Mutex::new(HashMap::new()));
    let unknown = Arc::new(Mutex::new(Vec::new()));
    let plan = Arc::new(plan.to_vec());
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let (todo, next, killed) = (todo.clone(), next.clone(), killed.clone());
        let (acked, unknown, plan) = (acked.clone(), unknown.clone(), plan.clone());
        let client = Client::new(socket);
        tasks.push(tokio::spawn(async move {
            while !killed.load(Ordering::SeqCst) {
                let Some(&i) = todo.get(next.fetch_add(1, Ordering::SeqCst)) else {
                    break;
                };
                let p = &plan[i];
                match client.create_endpoint(&endpoint_doc(network, p)).await {
                    Ok(e) => {
                        let (ip, mac) = address_of(&e);
                        assert_eq!(e.name, p.name);
                        if let Some(asked) = p.ip {
                            assert_eq!(ip, asked, "{}: not the address asked for", p.name);
                        }
                        let mut acked = acked.lock().expect("acked");
                        acked.insert(i, Acked { id: e.id, ip, mac });
                        if let Some(pid) = kill.filter(|_| acked.len() == KILL_AFTER) {
                            killed.store(true, Ordering::SeqCst);
                            // SAFETY: kill(2) on our own child, which is not yet reaped.
                            let rc = unsafe { libc::kill(pid, libc::SIGKILL) };
                            assert_eq!(rc, 0, "SIGKILL hnsd");
                        }
                    }
                    Err(_) if killed.load(Ordering::SeqCst) => {
                        // In flight when hnsd died: it may or may not have been stored.
                        unknown.lock().expect("unknown").push(i);
                    }
                    Err(e) => panic!("create {} failed while hnsd was up: {e}", p.name),
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("client task");
    }
    let acked = std::mem::take(&mut *acked.lock().expect("acked"));
    let unknown = std::mem::take(&mut *unknown.lock().expect("unknown"));
    (acked, unknown)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_during_parallel_creates_loses_no_acknowledged_endpoint() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (state, socket, log) = (
        dir.path().join("state"),
        dir.path().join("hns.sock"),
        dir.path().join("hnsd.log"),
    );
    let plan = plan();

    let mut hnsd = winnet_hnsd(&state, &socket, &log).start();
    let client = Client::new(&socket);
    let network = client
        .create_network(&network_doc())
        .await
        .expect("create the network")
        .id;

    let (acked, unknown) = run_creates(
        &socket,
        network,
        &plan,
        (0..CREATES).collect(),
        Some(pid(&hnsd)),
    )
    .await;
    let status = hnsd
        .wait_exit(Duration::from_secs(10))
        .expect("hnsd dies after SIGKILL");
    assert_eq!(
        status.signal(),
        Some(libc::SIGKILL),
        "hnsd ended by {status}"
    );
    // Answers already written to the socket when hnsd died still arrive: those are
    // acknowledged creates too.
    assert!(
        (KILL_AFTER..CREATES).contains(&acked.len()),
        "{} creates acknowledged; the kill came after {KILL_AFTER}",
        acked.len()
    );
    assert!(
        socket.exists(),
        "a killed hnsd leaves its socket behind, which the restart must replace"
    );
    drop(hnsd);

    // Restart on the same store and the same (now stale) socket.
    let hnsd = winnet_hnsd(&state, &socket, &log).start();
    let client = Client::new(&socket);
    let stored = check_store(&client, network).await;
    for (i, a) in &acked {
        let p = &plan[*i];
        let e = client
            .get_endpoint_by_id(a.id)
            .await
            .unwrap_or_else(|e| panic!("acknowledged {} ({}) is gone: {e}", p.name, a.id));
        assert_eq!(e.name, p.name);
        assert_eq!(
            address_of(&e),
            (a.ip, a.mac),
            "{} changed its addresses",
            p.name
        );
        assert_eq!(stored.get(&p.name).map(|e| e.id), Some(a.id));
    }
    // Whatever else is stored was in flight at the kill: stored whole or not at all.
    for name in stored.keys() {
        let i = plan
            .iter()
            .position(|p| &p.name == name)
            .expect("a planned name");
        assert!(
            acked.contains_key(&i) || unknown.contains(&i),
            "{name} is stored but was never sent"
        );
    }

    // The creates that were not stored continue and succeed, addresses allocated around the
    // ones that survived.
    let rest: Vec<usize> = (0..CREATES)
        .filter(|i| !stored.contains_key(&plan[*i].name))
        .collect();
    assert!(
        !rest.is_empty(),
        "the kill came part-way, so creates remain"
    );
    eprintln!(
        "killed after {} acknowledged creates; {} in flight, {} of them stored; {} to redo",
        acked.len(),
        unknown.len(),
        stored.len() - acked.len(),
        rest.len()
    );
    let (more, lost) = run_creates(&socket, network, &plan, rest.clone(), None).await;
    assert!(lost.is_empty());
    assert_eq!(more.len(), rest.len(), "every remaining create succeeds");
    let stored = check_store(&client, network).await;
    assert_eq!(stored.len(), CREATES, "one endpoint per planned create");
    for (i, a) in &more {
        let e = &stored[&plan[*i].name];
        assert_eq!((e.id, address_of(e)), (a.id, (a.ip, a.mac)));
    }

    // A graceful stop removes the socket.
    // SAFETY: kill(2) on our own child, which is not yet reaped.
    assert_eq!(unsafe { libc::kill(pid(&hnsd), libc::SIGTERM) }, 0);
    let mut hnsd = hnsd;
    let status = hnsd
        .wait_exit(Duration::from_secs(10))
        .expect("hnsd stops on SIGTERM");
    assert!(
        status.success(),
        "hnsd stopped with {status}:\n{}",
        hnsd.log()
    );
    assert!(!socket.exists(), "a stopped hnsd removes its socket");
}

#[tokio::test]
async fn second_hnsd_on_a_live_socket_refuses_to_start() {
    let dir = tempfile::tempdir().expect("temp dir");
    let socket = dir.path().join("hns.sock");
    let first = winnet_hnsd(
        &dir.path().join("state-1"),
        &socket,
        &dir.path().join("hnsd-1.log"),
    )
    .start();

    let mut second = winnet_hnsd(
        &dir.path().join("state-2"),
        &socket,
        &dir.path().join("hnsd-2.log"),
    )
    .spawn();
    let status = second
        .wait_exit(Duration::from_secs(10))
        .expect("the second hnsd exits instead of serving");
    assert!(!status.success(), "the second hnsd exited with {status}");
    let message = second.log();
    assert!(
        message.contains(&socket.display().to_string()),
        "the message names the socket: {message}"
    );

    // The first one still serves on its socket.
    Client::new(&socket)
        .get_version()
        .await
        .expect("the first hnsd still answers");
    drop(first);
}

#[tokio::test]
async fn second_hnsd_on_a_store_in_use_refuses_to_start() {
    let dir = tempfile::tempdir().expect("temp dir");
    let state = dir.path().join("state");
    let first = winnet_hnsd(
        &state,
        &dir.path().join("a.sock"),
        &dir.path().join("a.log"),
    )
    .start();

    let socket = dir.path().join("b.sock");
    let mut second = winnet_hnsd(&state, &socket, &dir.path().join("b.log")).spawn();
    let status = second
        .wait_exit(Duration::from_secs(10))
        .expect("the second hnsd exits instead of serving");
    assert!(!status.success(), "the second hnsd exited with {status}");
    let message = second.log();
    assert!(
        message.contains(&state.display().to_string()),
        "the message names the state dir: {message}"
    );
    assert!(!socket.exists(), "the refused hnsd leaves no socket behind");
    Client::new(dir.path().join("a.sock"))
        .get_version()
        .await
        .expect("the first hnsd still answers");
    drop(first);
}

#[tokio::test]
async fn stale_socket_is_replaced() {
    let dir = tempfile::tempdir().expect("temp dir");
    let socket = dir.path().join("hns.sock");
    // A socket file nobody listens on, as a killed hnsd leaves.
    drop(std::os::unix::net::UnixListener::bind(&socket).expect("bind"));
    assert!(socket.exists());
    assert!(std::os::unix::net::UnixStream::connect(&socket).is_err());

    let hnsd = winnet_hnsd(
        &dir.path().join("state"),
        &socket,
        &dir.path().join("hnsd.log"),
    )
    .start();
    let client = Client::new(&socket);
    let version = client.get_version().await.expect("hnsd answers");
    assert!(version.major >= 9, "HNS version {version:?}");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&socket).expect("socket").permissions(),
    );
    assert_eq!(mode & 0o777, 0o600, "socket mode");
    drop(hnsd);
}

/// `<socket>.lock` beside `socket`.
fn lock_of(socket: &Path) -> std::path::PathBuf {
    let mut p = socket.as_os_str().to_owned();
    p.push(".lock");
    p.into()
}

/// A client that sent half a request and waits does not hold hnsd up: on SIGTERM hnsd gives
/// open connections a short grace, then closes them, releases its store and exits, removing
/// its socket and the lock file it made.
#[tokio::test]
async fn sigterm_with_a_half_sent_request_stops_after_a_bounded_grace() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().expect("temp dir");
    let (state, socket) = (dir.path().join("state"), dir.path().join("hns.sock"));
    let mut hnsd = winnet_hnsd(&state, &socket, &dir.path().join("hnsd.log")).start();
    let mut half = std::os::unix::net::UnixStream::connect(&socket).expect("connect");
    half.write_all(
        b"POST /networks HTTP/1.1\r\nHost: hns\r\nContent-Length: 400\r\n\r\n{\"Name\":",
    )
    .expect("send half a request");
    // The request has reached hnsd once it is being served: another call still works.
    Client::new(&socket)
        .get_version()
        .await
        .expect("hnsd answers");

    // SAFETY: kill(2) on our own child, which is not yet reaped.
    assert_eq!(unsafe { libc::kill(pid(&hnsd), libc::SIGTERM) }, 0);
    let status = hnsd.wait_exit(Duration::from_secs(30)).unwrap_or_else(|| {
        panic!(
            "hnsd still runs 30 s after SIGTERM, held by a half-sent request:\n{}",
            hnsd.log()
        )
    });
    assert!(
        status.success(),
        "hnsd stopped with {status}:\n{}",
        hnsd.log()
    );
    half.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    // Closed: an end of stream, or a reset when hnsd had not read all that was sent.
    let mut rest = Vec::new();
    match half.read_to_end(&mut rest) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Err(e) => panic!("the half-sent connection is left open: {e}"),
    }
    assert!(!socket.exists(), "a stopped hnsd removes its socket");
    assert!(
        !lock_of(&socket).exists(),
        "a stopped hnsd removes the lock file it made"
    );
    // The store is free: the next hnsd starts on it.
    drop(winnet_hnsd(&state, &socket, &dir.path().join("hnsd.log")).start());
}

/// `flock(1)` run as user nobody, holding a shared lock on `path` until killed; `None` if it
/// could not take the lock (the file cannot be opened or made by nobody).
fn nobody_locks(path: &Path) -> Option<std::process::Child> {
    use std::io::BufRead;
    use std::os::unix::process::CommandExt;
    let mut child = std::process::Command::new("flock")
        .args(["--shared", "--nonblock", "--no-fork"])
        .arg(path)
        .args(["-c", "echo locked; exec sleep 600"])
        .uid(65534)
        .gid(65534)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("run flock(1) as nobody");
    let mut line = String::new();
    let out = child.stdout.take().expect("stdout");
    std::io::BufReader::new(out)
        .read_line(&mut line)
        .expect("read flock's output");
    if line.trim() == "locked" {
        Some(child)
    } else {
        let _ = child.wait();
        None
    }
}

/// hnsd's lock and store are its own: an unprivileged user can neither hold them to keep hnsd
/// from starting, nor read the store; a lock file an earlier hnsd left readable is replaced.
#[tokio::test]
async fn an_unprivileged_user_cannot_keep_hnsd_from_starting() {
    testkit::root::require_root("this test runs flock(1) as user nobody");
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("temp dir");
    // As /run and /var/lib are: root's, readable by all.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let (state, run) = (dir.path().join("state"), dir.path().join("run"));
    std::fs::create_dir(&run).expect("run dir");
    std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let socket = run.join("hns.sock");
    let log = dir.path().join("hnsd.log");
    let lock = lock_of(&socket);

    // A first hnsd runs and stops; nobody can hold neither its lock nor its store, then or after.
    let mut hnsd = winnet_hnsd(&state, &socket, &log).start();
    let mut holders = Vec::new();
    holders.extend(nobody_locks(&lock));
    holders.extend(nobody_locks(&state.join("hns.redb")));
    // SAFETY: kill(2) on our own child, which is not yet reaped.
    assert_eq!(unsafe { libc::kill(pid(&hnsd), libc::SIGTERM) }, 0);
    hnsd.wait_exit(Duration::from_secs(30)).expect("hnsd stops");
    holders.extend(nobody_locks(&lock));
    holders.extend(nobody_locks(&state.join("hns.redb")));
    let restarted = winnet_hnsd(&state, &socket, &log).spawn();
    let started = wait_serving(restarted, &socket);
    let held = holders.len();
    for mut h in holders {
        let _ = h.kill();
        let _ = h.wait();
    }
    let mut restarted = started.unwrap_or_else(|log| {
        panic!("hnsd did not start while nobody held {held} of its files:\n{log}")
    });
    assert_eq!(held, 0, "nobody took a lock of hnsd's");
    restarted.kill();

    // A lock file as an earlier hnsd left it (0644) and held by nobody does not keep hnsd down.
    std::fs::write(&lock, "").expect("an old lock file");
    std::fs::set_permissions(&lock, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let mut old = nobody_locks(&lock).expect("nobody holds the old lock file");
    let started = wait_serving(winnet_hnsd(&state, &socket, &log).spawn(), &socket);
    let _ = old.kill();
    let _ = old.wait();
    drop(started.unwrap_or_else(|log| panic!("hnsd did not start:\n{log}")));
}

/// Waits until `hnsd` serves on `socket`, or gives back its log if it exits first or does not
/// serve within 20 s.
fn wait_serving(mut hnsd: HnsdProcess, socket: &Path) -> Result<HnsdProcess, String> {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        if std::os::unix::net::UnixStream::connect(socket).is_ok() {
            return Ok(hnsd);
        }
        if let Some(status) = hnsd.try_wait() {
            return Err(format!("exited {status}: {}", hnsd.log()));
        }
        if std::time::Instant::now() > deadline {
            return Err(format!("not serving after 20 s: {}", hnsd.log()));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A truncated store: `winnet hnsd` refuses it (an error naming the file and `--repair`, no
/// panic, no socket left), `winnet hnsd --repair` says what it kept and keeps the damaged file,
/// and hnsd then starts.
#[tokio::test]
async fn a_truncated_store_is_refused_and_repair_brings_hnsd_back() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (state, socket, log) = (
        dir.path().join("state"),
        dir.path().join("hns.sock"),
        dir.path().join("hnsd.log"),
    );
    let mut hnsd = winnet_hnsd(&state, &socket, &log).start();
    Client::new(&socket)
        .create_network(&network_doc())
        .await
        .expect("create the network");
    // SAFETY: kill(2) on our own child, which is not yet reaped.
    assert_eq!(unsafe { libc::kill(pid(&hnsd), libc::SIGTERM) }, 0);
    hnsd.wait_exit(Duration::from_secs(30)).expect("hnsd stops");
    let store = state.join("hns.redb");
    let len = std::fs::metadata(&store).expect("the store").len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&store)
        .and_then(|f| f.set_len(len / 2))
        .expect("truncate the store");

    let mut refused = winnet_hnsd(&state, &socket, &log).spawn();
    let status = refused
        .wait_exit(Duration::from_secs(30))
        .expect("hnsd exits instead of serving");
    assert_eq!(
        status.code(),
        Some(1),
        "an error, not a panic:\n{}",
        refused.log()
    );
    let message = refused.log();
    assert!(
        message.contains(&store.display().to_string()) && message.contains("--repair"),
        "names the store and the recovery:\n{message}"
    );
    assert!(!message.contains("panicked at crates"), "{message}");
    assert!(!socket.exists(), "no socket left behind");

    let repair = std::process::Command::new(env!("CARGO_BIN_EXE_winnet"))
        .args(["hnsd", "--repair", "--state-dir"])
        .arg(&state)
        .output()
        .expect("run winnet hnsd --repair");
    let report = String::from_utf8_lossy(&repair.stdout);
    assert!(
        repair.status.success(),
        "{report}{}",
        String::from_utf8_lossy(&repair.stderr)
    );
    assert!(
        report.contains("repaired") && report.contains("hns.redb.damaged"),
        "{report}"
    );
    assert_eq!(
        std::fs::metadata(state.join("hns.redb.damaged"))
            .expect("kept")
            .len(),
        len / 2
    );
    drop(winnet_hnsd(&state, &socket, &log).start());
}
