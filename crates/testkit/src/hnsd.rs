//! hnsd for tests and benches: serving from the test's own process on a scratch directory
//! ([`Hnsd`]), or as users run it, a `winnet hnsd` process ([`HnsdCommand`], [`HnsdProcess`]);
//! and the HNS documents tests start from.

use std::fs::File;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hns::Profile;
use hns::server::{Config, Running};
use hns_client::{Client, Method};
use serde_json::{Value, json};
use tokio::sync::oneshot;

/// How long hnsd may take to start serving.
const START: Duration = Duration::from_secs(20);

/// An hnsd serving from this process, its store and socket in a scratch directory; stopped
/// when dropped, its files removed with the directory.
pub struct Hnsd {
    dir: tempfile::TempDir,
    serving: Serving,
}

enum Serving {
    /// A task on the test's runtime.
    Task(Option<Running>),
    /// A runtime of its own on a thread of its own, as the `winnet hnsd` process has its own
    /// worker threads: for benches that time clients against it.
    Thread {
        stop: Option<oneshot::Sender<()>>,
        thread: Option<JoinHandle<()>>,
    },
}

fn config(dir: &Path, profile: Profile) -> Config {
    Config {
        state_dir: dir.join("state"),
        socket: dir.join("hns.sock"),
        profile,
    }
}

impl Hnsd {
    /// hnsd under `profile` on a new scratch directory, serving objects only (no data plane),
    /// as a task of the calling runtime; returns once it accepts calls.
    pub async fn start(profile: Profile) -> Hnsd {
        Hnsd::start_in(scratch(), profile).await
    }

    /// As [`Hnsd::start`], on the store in `dir` (one an earlier hnsd left, see [`Hnsd::stop`]).
    pub async fn start_in(dir: tempfile::TempDir, profile: Profile) -> Hnsd {
        let running = hns::server::spawn(&config(dir.path(), profile))
            .unwrap_or_else(|e| panic!("start hnsd in {}: {e}", dir.path().display()));
        Hnsd {
            dir,
            serving: Serving::Task(Some(running)),
        }
    }

    /// hnsd under `profile` on a runtime of its own (no runtime needed to call this); returns
    /// once it accepts connections.
    pub fn start_on_own_runtime(profile: Profile) -> Hnsd {
        let dir = scratch();
        let config = config(dir.path(), profile);
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Runtime::new().expect("hnsd's runtime");
            rt.block_on(hns::server::run(&config, async {
                let _ = stopped.await;
            }))
            .expect("hnsd serves");
        });
        let hnsd = Hnsd {
            dir,
            serving: Serving::Thread {
                stop: Some(stop),
                thread: Some(thread),
            },
        };
        let socket = hnsd.socket();
        crate::wait::until("hnsd to accept connections", START, || {
            UnixStream::connect(&socket)
        });
        hnsd
    }

    /// The directory of its store and socket.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Its socket.
    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("hns.sock")
    }

    /// A client of it.
    pub fn client(&self) -> Client {
        Client::new(self.socket())
    }

    /// Stops it (the store closed cleanly) and gives back its directory, to start another hnsd
    /// on the same store.
    pub async fn stop(mut self) -> tempfile::TempDir {
        match &mut self.serving {
            Serving::Task(running) => {
                if let Some(r) = running.take() {
                    r.stop().await.expect("hnsd stops cleanly");
                }
            }
            Serving::Thread { stop, thread } => {
                if let Some(s) = stop.take() {
                    let _ = s.send(());
                }
                if let Some(t) = thread.take() {
                    tokio::task::spawn_blocking(move || t.join())
                        .await
                        .expect("join hnsd's thread")
                        .expect("hnsd stops cleanly");
                }
            }
        }
        std::mem::replace(&mut self.dir, scratch())
    }
}

impl Drop for Hnsd {
    fn drop(&mut self) {
        // A task's `Running` stops it when dropped; a thread is told and joined.
        if let Serving::Thread { stop, thread } = &mut self.serving {
            if let Some(s) = stop.take() {
                let _ = s.send(());
            }
            if let Some(t) = thread.take() {
                let _ = t.join();
            }
        }
    }
}

fn scratch() -> tempfile::TempDir {
    tempfile::tempdir().expect("a scratch directory for hnsd")
}

/// How to start `winnet hnsd` for a test: the binary, where its store, socket and log go, and
/// its options.
#[derive(Clone, Debug)]
pub struct HnsdCommand {
    winnet: PathBuf,
    state_dir: PathBuf,
    socket: PathBuf,
    log: PathBuf,
    profile: String,
    node: Option<String>,
    args: Vec<String>,
    netns: Option<String>,
    log_level: String,
    die_with_parent: bool,
}

impl HnsdCommand {
    /// The `winnet hnsd` of binary `winnet` with its store (`state`), socket (`hns.sock`) and
    /// log (`hnsd.log`, appended to) in `dir`, under the default profile, serving objects only; its
    /// log level is `$WINNET_TEST_LOG`, else `warn`.
    pub fn new(winnet: impl Into<PathBuf>, dir: &Path) -> HnsdCommand {
        HnsdCommand {
            winnet: winnet.into(),
            state_dir: dir.join("state"),
            socket: dir.join("hns.sock"),
            log: dir.join("hnsd.log"),
            profile: Profile::default().to_string(),
            node: None,
            args: Vec::new(),
            netns: None,
            log_level: std::env::var("WINNET_TEST_LOG").unwrap_or_else(|_| "warn".into()),
            die_with_parent: false,
        }
    }

    /// Keeps the store in `dir`.
    pub fn state_dir(mut self, dir: impl Into<PathBuf>) -> HnsdCommand {
        self.state_dir = dir.into();
        self
    }

    /// Serves on `socket`.
    pub fn socket(mut self, socket: impl Into<PathBuf>) -> HnsdCommand {
        self.socket = socket.into();
        self
    }

    /// Writes its output to `log` (appended).
    pub fn log(mut self, log: impl Into<PathBuf>) -> HnsdCommand {
        self.log = log.into();
        self
    }

    /// Runs under Windows build `profile` (`ws2019`, `ws2022`, ..., `unrestricted`).
    pub fn profile(mut self, profile: &str) -> HnsdCommand {
        self.profile = profile.into();
        self
    }

    /// Serves node namespace `node` with a data plane on its NIC `nic`
    /// (`--node-netns NODE --nic NIC`).
    pub fn node(mut self, node: &str, nic: &str) -> HnsdCommand {
        self.node = Some(node.into());
        self.args.extend(["--node-netns".into(), node.into()]);
        self.args.extend(["--nic".into(), nic.into()]);
        self
    }

    /// More arguments, e.g. `--dataplane`.
    pub fn args(mut self, args: &[&str]) -> HnsdCommand {
        self.args.extend(args.iter().map(|a| a.to_string()));
        self
    }

    /// Runs it inside namespace `ns` (`ip netns exec NS winnet hnsd ...`).
    pub fn in_netns(mut self, ns: &str) -> HnsdCommand {
        self.netns = Some(ns.into());
        self
    }

    /// Its `RUST_LOG`.
    pub fn log_level(mut self, level: &str) -> HnsdCommand {
        self.log_level = level.into();
        self
    }

    /// Has the kernel stop it (SIGTERM) when the test process dies without cleaning up, so an
    /// interrupted bench leaves no hnsd holding devices.
    pub fn die_with_parent(mut self) -> HnsdCommand {
        self.die_with_parent = true;
        self
    }

    /// Starts it and waits until it accepts connections (see [`HnsdProcess::wait_ready`]).
    pub fn start(&self) -> HnsdProcess {
        let mut p = self.spawn();
        p.wait_ready();
        p
    }

    /// Starts it without waiting.
    pub fn spawn(&self) -> HnsdProcess {
        HnsdProcess {
            child: self.launch(),
            command: self.clone(),
        }
    }

    fn launch(&self) -> Child {
        let log = File::options()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap_or_else(|e| panic!("open hnsd's log {}: {e}", self.log.display()));
        let log2 = log
            .try_clone()
            .unwrap_or_else(|e| panic!("hnsd's log: {e}"));
        let mut cmd = match &self.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(&self.winnet);
                c
            }
            None => Command::new(&self.winnet),
        };
        cmd.arg("hnsd")
            .arg("--state-dir")
            .arg(&self.state_dir)
            .arg("--socket")
            .arg(&self.socket)
            .args(["--profile", &self.profile])
            .args(&self.args)
            .env("RUST_LOG", &self.log_level)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2);
        if self.die_with_parent {
            // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
            unsafe {
                cmd.pre_exec(|| {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                    Ok(())
                });
            }
        }
        cmd.spawn().unwrap_or_else(|e| panic!("start {cmd:?}: {e}"))
    }
}

/// A `winnet hnsd` process; killed (SIGKILL) and reaped when dropped, so a failing test
/// leaves nothing running.
pub struct HnsdProcess {
    child: Child,
    command: HnsdCommand,
}

impl HnsdProcess {
    /// Its socket.
    pub fn socket(&self) -> &Path {
        &self.command.socket
    }

    /// The node namespace it serves, if any.
    pub fn node(&self) -> Option<&str> {
        self.command.node.as_deref()
    }

    /// A client of it.
    pub fn client(&self) -> Client {
        Client::new(&self.command.socket)
    }

    /// Its process ID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What it logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.command.log).unwrap_or_default()
    }

    /// Waits until it accepts connections on its socket; fails the test, with its log, if it
    /// exits first or takes longer than 20 s.
    pub fn wait_ready(&mut self) {
        let deadline = Instant::now() + START;
        while UnixStream::connect(&self.command.socket).is_err() {
            if let Some(status) = self.try_wait() {
                panic!("hnsd exited ({status}) before serving:\n{}", self.log());
            }
            assert!(
                Instant::now() < deadline,
                "hnsd did not accept connections on {} within {START:?}:\n{}",
                self.command.socket.display(),
                self.log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Its exit status, if it has exited.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().expect("wait for hnsd")
    }

    /// Waits up to `timeout` for it to exit.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.try_wait() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Kills it with SIGKILL (no clean-up of its own, as a crash) and reaps it. Its socket
    /// stays behind; the next hnsd replaces it.
    pub fn kill(&mut self) {
        // Already exited is fine; either way it is reaped.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Kills it and starts it again on the same store and socket; waits until it serves.
    pub fn restart(&mut self) {
        self.kill();
        self.child = self.command.launch();
        self.wait_ready();
    }
}

impl Drop for HnsdProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// An L2Bridge network document: one subnet `prefix` with its default route via `gateway`.
pub fn l2bridge(name: &str, prefix: &str, gateway: &str) -> Value {
    json!({
        "Name": name, "Type": "L2Bridge",
        "Ipams": [{"Type": "Static", "Subnets": [{"IpAddressPrefix": prefix,
            "Routes": [{"NextHop": gateway, "DestinationPrefix": "0.0.0.0/0"}]}]}],
        "SchemaVersion": {"Major": 2, "Minor": 0}
    })
}

/// Creates the network `doc` describes (a document as clients post it), as HNS returns it.
pub async fn create_network(client: &Client, doc: &Value) -> hcn::Network {
    let body = client
        .call(
            Method::POST,
            "/networks",
            Some(doc.to_string().into_bytes()),
        )
        .await
        .unwrap_or_else(|e| panic!("create network {doc}: {e}"));
    serde_json::from_value(body).unwrap_or_else(|e| panic!("the created network: {e}"))
}
