//! Connections per second to one address: `connrate IP:PORT [SECONDS] [PARALLEL]`. Each
//! connection is opened, sends a one-line HTTP request, reads the answer to its end and closes.
//! `connrate serve PORT` is the server: it answers every connection with a short HTTP reply.
//! Used by `bench/dataplane.sh` (inside a pod's namespace) to measure a ClusterIP against a
//! pod address in the same run.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("serve") {
        let port: u16 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(8080);
        serve(port);
        return;
    }
    let Some(to) = args.get(1).and_then(|a| a.parse::<SocketAddr>().ok()) else {
        eprintln!("usage: connrate IP:PORT [SECONDS] [PARALLEL]");
        std::process::exit(2);
    };
    let secs: u64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(5);
    let parallel: usize = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(4);
    let done = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let workers: Vec<_> = (0..parallel)
        .map(|_| {
            let (done, failed, stop) = (done.clone(), failed.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while !stop.load(Ordering::Relaxed) {
                    let ok = TcpStream::connect_timeout(&to, Duration::from_secs(2))
                        .and_then(|mut s| {
                            s.set_read_timeout(Some(Duration::from_secs(2)))?;
                            s.write_all(b"GET / HTTP/1.0\r\n\r\n")?;
                            while s.read(&mut buf)? > 0 {}
                            Ok(())
                        })
                        .is_ok();
                    if ok { &done } else { &failed }.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(secs));
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        let _ = w.join();
    }
    let elapsed = start.elapsed().as_secs_f64();
    let n = done.load(Ordering::Relaxed);
    println!(
        "{:.0} connections/s ({n} in {elapsed:.1} s, {} failed)",
        n as f64 / elapsed,
        failed.load(Ordering::Relaxed)
    );
}

fn serve(port: u16) {
    let listener = match std::net::TcpListener::bind(("0.0.0.0", port)) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("connrate serve: cannot listen on {port}: {e}");
            std::process::exit(1);
        }
    };
    for s in listener.incoming().flatten() {
        std::thread::spawn(move || {
            let mut s = s;
            let mut buf = [0u8; 1024];
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            let _ = s.read(&mut buf);
            let _ = s.write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok");
        });
    }
}
