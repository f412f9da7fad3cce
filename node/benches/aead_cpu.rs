//! What QUIC's packet protection costs per GiB with each TLS 1.3 cipher suite the net layer
//! can negotiate, on this CPU: the suite's packet key sealing and opening payloads the size
//! of a 9000-byte datagram's (the lab's MTU) on one thread, as quinn does for every packet
//! (header protection, a few bytes a packet, left out). A measurement for BENCHMARKS.md
//! (issue 33, the cipher suite), printed, never a check. Run with
//! `cargo bench -p teesfs-node --bench aead_cpu` (`GIB=` sets the volume per suite, 1).

use std::time::Duration;

use rustls::Side;
use rustls::crypto::ring::cipher_suite::{
    TLS13_AES_128_GCM_SHA256, TLS13_AES_256_GCM_SHA384, TLS13_CHACHA20_POLY1305_SHA256,
};
use rustls::quic::{Keys, Version};

/// A 9000-byte datagram less its IP, UDP and QUIC short header, and the 16-byte tag.
const PAYLOAD: usize = 9000 - 20 - 8 - 20 - 16;
/// Packets sealed, then opened, between two readings of the clock.
const BATCH: usize = 1024;

/// This thread's CPU time so far (user + system).
fn thread_cpu() -> Duration {
    use nix::sys::resource::{UsageWho, getrusage};
    let u = getrusage(UsageWho::RUSAGE_THREAD).expect("getrusage");
    let us = |t: nix::sys::time::TimeVal| t.tv_sec() as u64 * 1_000_000 + t.tv_usec() as u64;
    Duration::from_micros(us(u.user_time()) + us(u.system_time()))
}

fn main() {
    let gib: f64 = std::env::var("GIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1.0);
    let packets = (gib * f64::from(1u32 << 30) / PAYLOAD as f64).ceil() as u64;
    println!(
        "QUIC packet protection, {packets} packets of {PAYLOAD} bytes ({gib} GiB) per suite, \
         one thread; AES in hardware: {}",
        if teesfs_node::net::hardware_aes() {
            "yes"
        } else {
            "no"
        }
    );
    println!(
        "{:<22} {:>14} {:>14}",
        "suite", "seal CPU-s/GiB", "open CPU-s/GiB"
    );
    for (name, suite) in [
        ("AES-128-GCM", TLS13_AES_128_GCM_SHA256),
        ("AES-256-GCM", TLS13_AES_256_GCM_SHA384),
        ("ChaCha20-Poly1305", TLS13_CHACHA20_POLY1305_SHA256),
    ] {
        let s = suite.tls13().expect("a TLS 1.3 suite");
        let quic = s.quic.expect("a suite QUIC can use");
        let sender = Keys::initial(Version::V1, s, quic, &[7; 8], Side::Client);
        let receiver = Keys::initial(Version::V1, s, quic, &[7; 8], Side::Server);
        let header = [0x41u8; 20];
        // Timed in batches (a packet takes microseconds, the clock counts them).
        let mut bufs = vec![vec![0x5au8; PAYLOAD + 16]; BATCH];
        let (mut seal, mut open) = (Duration::ZERO, Duration::ZERO);
        for first in (0..packets).step_by(BATCH) {
            let pns: Vec<u64> = (first..packets.min(first + BATCH as u64)).collect();
            let t = thread_cpu();
            for (pn, buf) in pns.iter().zip(bufs.iter_mut()) {
                let tag = sender
                    .local
                    .packet
                    .encrypt_in_place(*pn, &header, &mut buf[..PAYLOAD])
                    .expect("seal");
                buf[PAYLOAD..].copy_from_slice(tag.as_ref());
            }
            let t2 = thread_cpu();
            for (pn, buf) in pns.iter().zip(bufs.iter_mut()) {
                let plain = receiver
                    .remote
                    .packet
                    .decrypt_in_place(*pn, &header, &mut buf[..])
                    .expect("open");
                assert_eq!(plain.len(), PAYLOAD);
            }
            open += thread_cpu() - t2;
            seal += t2 - t;
        }
        println!(
            "{name:<22} {:>14.3} {:>14.3}",
            seal.as_secs_f64() / gib,
            open.as_secs_f64() / gib
        );
    }
}
