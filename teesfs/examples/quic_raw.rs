//! Raw QUIC throughput between two processes: the baseline for `teesfs push` throughput.
//!
//! Same transport as the daemons (`teesfs_node::net::Transport`: quinn, mutual TLS against a
//! cluster CA, the same flow-control windows and socket buffers), none of the relay: the
//! client sends N bytes as 1 MiB frames on one Bulk stream and waits until the server has
//! read (and with STORE, hashed and stored) every frame and said so on a Control stream.
//!
//! ```text
//! quic_raw keygen DIR                       # cluster CA + certificates for hosts a and b
//! quic_raw server DIR 127.0.0.1:0           # prints `listening on ADDR`, serves one client
//! quic_raw server DIR 127.0.0.1:0 STORE     # the same, and hashes and stores every frame
//! quic_raw client DIR ADDR BYTES            # prints `sent N bytes in S s: X MiB/s`
//! quic_raw ping DIR ADDR COUNT              # prints the median round trip of a small frame
//! quic_raw work STORE BYTES                 # CPU-s to hash and to store BYTES, see below
//! ```
//!
//! `server` and `client` also print `cpu-seconds X`: the process's CPU time (user and
//! system, all threads) from start to exit.
//!
//! `work` does on one thread what every receiving node must do with a chunk besides
//! receiving it, in 1 MiB frames of one buffer: BLAKE3 over each (`hash-seconds`), and each
//! written to a file of its own in STORE (`store-seconds`). It prints the CPU time of each.
//! The buffer stays in cache, so this is a lower bound on what a node spends on that work.
//!
//! `ping` sends a 64-byte frame on a Demand stream and waits for the server's echo on a
//! Demand stream of its own, COUNT times in a row: one application-level round trip on the
//! connection, which is what each hop of a demand request costs on top of the chunk bytes.
//!
//! With STORE, the server does for each frame what a node must do with a chunk however
//! the layer reached it, and nothing else: hash it with BLAKE3 and write it to a file of its
//! own in STORE (a tmpfs directory, as on a diskless node), on the blocking pool, while it
//! reads the next frame (one frame at work, as in the daemon). That is the floor for a
//! verified, stored push over this transport, measured beside the raw stream to tell the
//! store's cost from the relay's.
//!
//! The frames are incompressible (blake3 XOF output), though QUIC does not compress anyway.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Instant;

use teesfs_node::net::{Identity, StreamKind, Transport, make_cluster};

const FRAME: usize = 1 << 20;

fn usage() -> ! {
    eprintln!(
        "usage: quic_raw keygen DIR | quic_raw server DIR LISTEN [STORE] | \
         quic_raw client DIR ADDR BYTES | quic_raw ping DIR ADDR COUNT | \
         quic_raw work STORE BYTES"
    );
    std::process::exit(2)
}

/// CPU seconds (user and system) this process, or with `thread` this thread, has used.
fn cpu_seconds(thread: bool) -> Result<f64, Box<dyn std::error::Error>> {
    use nix::sys::resource::{UsageWho, getrusage};
    let u = getrusage(if thread {
        UsageWho::RUSAGE_THREAD
    } else {
        UsageWho::RUSAGE_SELF
    })?;
    let secs = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 * 1e-6;
    Ok(secs(u.user_time()) + secs(u.system_time()))
}

/// `quic_raw work`: hashes `bytes` in 1 MiB frames, then writes them to files in `store`.
fn work(store: &std::path::Path, bytes: u64) -> Result<(), Box<dyn std::error::Error>> {
    let mut frame = vec![0u8; FRAME];
    blake3::Hasher::new()
        .update(b"quic_raw work")
        .finalize_xof()
        .fill(&mut frame);
    let frames = bytes.div_ceil(FRAME as u64);
    let start = cpu_seconds(true)?;
    for _ in 0..frames {
        std::hint::black_box(blake3::hash(std::hint::black_box(&frame)));
    }
    let hashed = cpu_seconds(true)?;
    for n in 0..frames {
        std::fs::write(store.join(format!("w{n}")), &frame)?;
    }
    let stored = cpu_seconds(true)?;
    println!("hash-seconds {:.4}", hashed - start);
    println!("store-seconds {:.4}", stored - hashed);
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(mode) = args.first() else { usage() };
    let dir = PathBuf::from(args.get(1).unwrap_or_else(|| usage()));
    if mode == "keygen" {
        make_cluster(&dir, &["a".to_owned(), "b".to_owned()])?;
        return Ok(());
    }
    if mode == "work" {
        return work(&dir, parse_bytes(args.get(2).unwrap_or_else(|| usage()))?);
    }
    // The daemon's runtime shape: two workers.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    match mode.as_str() {
        "server" => {
            let listen: SocketAddr = args.get(2).unwrap_or_else(|| usage()).parse()?;
            let store = args.get(3).map(PathBuf::from);
            rt.block_on(server(dir, listen, store))
        }
        "client" => {
            let addr: SocketAddr = args.get(2).unwrap_or_else(|| usage()).parse()?;
            let bytes = parse_bytes(args.get(3).unwrap_or_else(|| usage()))?;
            rt.block_on(client(dir, addr, bytes))
        }
        "ping" => {
            let addr: SocketAddr = args.get(2).unwrap_or_else(|| usage()).parse()?;
            let count: usize = args.get(3).unwrap_or_else(|| usage()).parse()?;
            rt.block_on(ping(dir, addr, count))
        }
        _ => usage(),
    }
}

/// `268435456`, `256MiB`, `1GiB`.
fn parse_bytes(s: &str) -> Result<u64, Box<dyn std::error::Error>> {
    let (num, mult) = if let Some(n) = s.strip_suffix("GiB") {
        (n, 1u64 << 30)
    } else if let Some(n) = s.strip_suffix("MiB") {
        (n, 1 << 20)
    } else if let Some(n) = s.strip_suffix("KiB") {
        (n, 1 << 10)
    } else {
        (s, 1)
    };
    Ok(num.trim().parse::<u64>()? * mult)
}

async fn server(
    dir: PathBuf,
    listen: SocketAddr,
    store: Option<PathBuf>,
) -> Result<(), Box<dyn std::error::Error>> {
    let id = Identity::load(&dir, "b")?;
    let transport = Transport::bind(listen, &id)?;
    println!("listening on {}", transport.local_addr());
    let conn = transport.accept().await.ok_or("endpoint closed")?;
    let (kind, mut rx) = conn.accept_stream().await?;
    if kind == StreamKind::Demand {
        // Echo every frame back on a stream of our own.
        // The client closes the connection when it is done, which ends this loop.
        let mut tx = conn.open(StreamKind::Demand).await?;
        while let Ok(Some(frame)) = rx.recv().await {
            if tx.send(&frame).await.is_err() {
                break;
            }
        }
        return Ok(());
    }
    let mut first = None;
    let mut bytes = 0u64;
    let mut n = 0u64;
    // Hashing and storing a frame overlaps with reading the next one, as in the daemon: at
    // most one frame waits for the one before it.
    let mut pending: Option<tokio::task::JoinHandle<std::io::Result<blake3::Hash>>> = None;
    while let Some(frame) = rx.recv().await? {
        first.get_or_insert_with(Instant::now);
        bytes += frame.len() as u64;
        if let Some(store) = &store {
            if let Some(p) = pending.take() {
                p.await??;
            }
            let path = store.join(format!("f{n}"));
            pending = Some(tokio::task::spawn_blocking(move || {
                let hash = blake3::hash(&frame);
                std::fs::write(&path, &frame).map(|()| hash)
            }));
            n += 1;
        }
    }
    if let Some(p) = pending {
        p.await??;
    }
    let secs = first.map_or(0.0, |t| t.elapsed().as_secs_f64());
    // The client stops its clock on this: QUIC's acknowledgements say only that the bytes
    // arrived, not that they were hashed and stored.
    // Not finished and awaited: the client exits once it has the frame, without
    // acknowledging the stream's end; the pause below lets the frame leave.
    let mut done = conn.open(StreamKind::Control).await?;
    done.send(b"done").await?;
    println!(
        "received {bytes} bytes on a {kind} stream in {secs:.3} s: {:.1} MiB/s",
        bytes as f64 / (1 << 20) as f64 / secs.max(1e-9)
    );
    println!("cpu-seconds {:.4}", cpu_seconds(false)?);
    // Give the client's acknowledgement of the stream end time to leave.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    conn.close();
    Ok(())
}

async fn client(
    dir: PathBuf,
    addr: SocketAddr,
    bytes: u64,
) -> Result<(), Box<dyn std::error::Error>> {
    let id = Identity::load(&dir, "a")?;
    let transport = Transport::bind((std::net::Ipv4Addr::LOCALHOST, 0).into(), &id)?;
    let conn = transport.connect(addr, "b").await?;
    let mut frame = vec![0u8; FRAME];
    blake3::Hasher::new()
        .update(b"quic_raw")
        .finalize_xof()
        .fill(&mut frame);
    let start = Instant::now();
    let mut tx = conn.open(StreamKind::Bulk).await?;
    let mut left = bytes;
    while left > 0 {
        let n = usize::try_from(left.min(FRAME as u64))?;
        tx.send(&frame[..n]).await?;
        left -= n as u64;
    }
    tx.finish().await?;
    let (_kind, mut done) = conn.accept_stream().await?;
    done.recv().await?;
    let secs = start.elapsed().as_secs_f64();
    println!(
        "sent {bytes} bytes in {secs:.3} s: {:.1} MiB/s",
        bytes as f64 / (1 << 20) as f64 / secs
    );
    let path = conn.path();
    eprintln!(
        "path: {} bytes per UDP payload, {} datagrams sent, {} received",
        path.mtu, path.sent, path.received
    );
    println!("cpu-seconds {:.4}", cpu_seconds(false)?);
    conn.close();
    Ok(())
}

async fn ping(
    dir: PathBuf,
    addr: SocketAddr,
    count: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    let id = Identity::load(&dir, "a")?;
    let transport = Transport::bind((std::net::Ipv4Addr::LOCALHOST, 0).into(), &id)?;
    let conn = transport.connect(addr, "b").await?;
    let mut tx = conn.open(StreamKind::Demand).await?;
    let frame = [7u8; 64];
    let mut times = Vec::with_capacity(count);
    let mut rx = None;
    for _ in 0..count.max(1) {
        let t = Instant::now();
        tx.send(&frame).await?;
        if rx.is_none() {
            rx = Some(conn.accept_stream().await?.1);
        }
        let echo = rx.as_mut().expect("set above").recv().await?;
        times.push(t.elapsed().as_secs_f64());
        if echo.as_deref() != Some(&frame[..]) {
            return Err("the echo differs from the frame sent".into());
        }
    }
    // The first round trip includes the server opening its stream.
    let mut steady = times[1.min(times.len() - 1)..].to_vec();
    steady.sort_by(f64::total_cmp);
    println!(
        "round trip of a 64-byte frame over {} pings: median {:.1} us, min {:.1} us",
        steady.len(),
        steady[steady.len() / 2] * 1e6,
        steady[0] * 1e6
    );
    conn.close();
    Ok(())
}
