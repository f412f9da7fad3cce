//! What one connection's set-up costs: QUIC with the mutual-TLS handshake and the hello,
//! each side on its own thread and runtime, over loopback. A measurement for BENCHMARKS.md
//! ("Fixed costs") and the simulator's `setup_cpu`, printed, never a check. Run with
//! `cargo bench -p teesfs-node --bench handshake_cpu` (`N=` sets the connections, 200).

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use teesfs_node::net::{Identity, Transport, make_cluster};

/// This thread's CPU time so far (user + system).
fn thread_cpu() -> Duration {
    use nix::sys::resource::{UsageWho, getrusage};
    let u = getrusage(UsageWho::RUSAGE_THREAD).expect("getrusage");
    let us = |t: nix::sys::time::TimeVal| t.tv_sec() as u64 * 1_000_000 + t.tv_usec() as u64;
    Duration::from_micros(us(u.user_time()) + us(u.system_time()))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

fn main() {
    let n: u32 = std::env::var("N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let dir = tempfile::tempdir().expect("tempdir");
    make_cluster(dir.path(), &["a".to_owned(), "b".to_owned()]).expect("make_cluster");
    let a = Identity::load(dir.path(), "a").expect("load a");
    let b = Identity::load(dir.path(), "b").expect("load b");
    let localhost: SocketAddr = (Ipv4Addr::LOCALHOST, 0).into();
    let (tx, rx) = std::sync::mpsc::channel();
    let server = std::thread::spawn(move || {
        runtime().block_on(async {
            let tb = Transport::bind(localhost, &b).expect("bind b");
            tx.send(tb.local_addr()).expect("send addr");
            let mut kept = Vec::new();
            let t = thread_cpu();
            for _ in 0..n {
                kept.push(tb.accept().await.expect("accept"));
            }
            thread_cpu() - t
        })
    });
    let addr = rx.recv().expect("addr");
    let (client, wall) = runtime().block_on(async {
        let ta = Transport::bind(localhost, &a).expect("bind a");
        let mut kept = Vec::new();
        let (t, w) = (thread_cpu(), Instant::now());
        for _ in 0..n {
            kept.push(ta.connect(addr, "b").await.expect("connect"));
        }
        (thread_cpu() - t, w.elapsed())
    });
    let server = server.join().expect("server thread");
    let per = |d: Duration| d.as_secs_f64() * 1e6 / f64::from(n);
    println!(
        "{n} connections; per connection: client {:.0} us CPU, server {:.0} us CPU, wall {:.0} us",
        per(client),
        per(server),
        per(wall)
    );
}
