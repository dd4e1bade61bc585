//! The files hnsd makes and removes: everything it makes is private (0600 files, 0700
//! directories), it removes only a stale socket of its own, and a clean stop leaves nothing
//! behind but the store.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use hns::Profile;
use hns::server::Config;

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

fn lock_of(socket: &Path) -> PathBuf {
    let mut p = socket.as_os_str().to_owned();
    p.push(".lock");
    p.into()
}

#[tokio::test]
async fn a_regular_file_at_the_socket_path_is_kept_and_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let socket = dir.path().join("notes.txt");
    std::fs::write(&socket, "not hnsd's").expect("a regular file");
    let config = Config {
        state_dir: dir.path().join("state"),
        socket: socket.clone(),
        profile: Profile::Ws2022,
    };
    let message = match hns::server::open(&config) {
        Ok(_) => panic!("hnsd took over {}", socket.display()),
        Err(e) => e.to_string(),
    };
    assert!(
        message.contains(&socket.display().to_string()) && message.contains("not a socket"),
        "the message names the path and why: {message}"
    );
    assert_eq!(
        std::fs::read_to_string(&socket).expect("the file is still there"),
        "not hnsd's"
    );
    assert!(
        !lock_of(&socket).exists(),
        "the refused hnsd leaves no lock file"
    );
}

#[tokio::test]
async fn the_files_and_directories_hnsd_makes_are_private_and_a_clean_stop_removes_its_own() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (run, state) = (dir.path().join("run/winnet"), dir.path().join("lib/hns"));
    let socket = run.join("hns.sock");
    let config = Config {
        state_dir: state.clone(),
        socket: socket.clone(),
        profile: Profile::Ws2022,
    };
    let running = hns::server::spawn(&config).expect("hnsd starts");
    running.client().get_version().await.expect("hnsd answers");
    for d in [
        &run,
        &dir.path().join("run"),
        &state,
        &dir.path().join("lib"),
    ] {
        assert_eq!(mode(d), 0o700, "{} (made by hnsd)", d.display());
    }
    assert_eq!(mode(&state.join("hns.redb")), 0o600, "the store");
    assert_eq!(mode(&socket), 0o600, "the socket");
    let lock = lock_of(&socket);
    if lock.exists() {
        assert_eq!(mode(&lock), 0o600, "the lock file");
    }
    running.stop().await.expect("hnsd stops");
    assert!(!socket.exists(), "a stopped hnsd removes its socket");
    assert!(
        !lock.exists(),
        "a stopped hnsd removes the lock file it made"
    );
    assert!(state.join("hns.redb").exists(), "the store stays");
}

#[tokio::test]
async fn a_store_an_earlier_hnsd_left_world_readable_is_made_private() {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = Config {
        state_dir: dir.path().join("state"),
        socket: dir.path().join("hns.sock"),
        profile: Profile::Ws2022,
    };
    hns::server::spawn(&config)
        .expect("hnsd starts")
        .stop()
        .await
        .expect("stops");
    let store = config.state_dir.join("hns.redb");
    std::fs::set_permissions(&store, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let running = hns::server::spawn(&config).expect("hnsd starts again");
    assert_eq!(mode(&store), 0o600);
    running.stop().await.expect("stops");
}
