//! Issue 19 item 3: `teesfs daemon --metrics ADDR` serves Prometheus text at GET /metrics.
//! A real daemon, a real push and real reads through its FUSE mount, scraped over TCP.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::cluster::Cluster;
use crate::util::{can_mount, noise};

fn wait_for(what: &str, secs: u64, f: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The metrics address node `i` serves, as its status says.
fn metrics_addr(c: &Cluster, i: usize) -> String {
    let st = c.status(i);
    st["metrics"]
        .as_str()
        .and_then(|m| m.strip_prefix("http://"))
        .and_then(|m| m.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("no metrics address in the status: {st}"))
        .to_string()
}

/// Sends `request` and returns the whole answer.
fn http(addr: &str, request: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).expect("connect to the metrics endpoint");
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    s.write_all(request).expect("send");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("answer");
    out
}

/// The value of the series `series` (name with labels, as printed).
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.trim().parse().expect("a number"))
}

#[test]
fn metrics_count_a_real_push_and_waiting_reads_and_drop_a_released_jobs_series() {
    if !can_mount() {
        return;
    }
    let c = Cluster::start(1, |_| vec!["--metrics".into(), "127.0.0.1:0".into()]);
    let addr = metrics_addr(&c, 0);
    let src = c.ws.path().join("layer");
    std::fs::create_dir_all(src.join("app")).expect("mkdir");
    std::fs::write(src.join("app/run.py"), "print('hello')\n".repeat(300)).expect("write");
    let data = noise(6 << 20, 19);
    std::fs::write(src.join("data.bin"), &data).expect("write");
    let id = c.ws.publish(&src);
    // The urgent set first; the rest streams slowly from a background push, so reading
    // data.bin now waits for chunks that are asked for on demand.
    let out = c
        .push_cmd(
            &id,
            1,
            &[
                "--job-id",
                "4242",
                "--urgent",
                "app/*",
                "--wait",
                "urgent",
                "--rate-limit",
                "256KiB",
            ],
        )
        .output()
        .expect("push");
    assert!(out.status.success(), "push: {out:?}");
    let mp = c.mount_of(0);
    assert_eq!(std::fs::read(mp.join("data.bin")).expect("read"), data);
    wait_for("the whole layer on the node", 60, || {
        c.status(0)["jobs"][0]["all_s"].as_f64().is_some()
    });

    let answer = http(&addr, b"GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n");
    let (head, text) = answer.split_once("\r\n\r\n").expect("an HTTP answer");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let job = "{job=\"4242\"}";
    let got = |name: &str| {
        value(text, &format!("{name}{job}")).unwrap_or_else(|| panic!("no {name} in\n{text}"))
    };
    assert!(got("teesfs_chunks_received_total") > 0.0, "{text}");
    assert!(got("teesfs_demand_requests_total") > 0.0, "{text}");
    assert!(
        got("teesfs_read_wait_seconds_count") > 0.0,
        "reads waited: {text}"
    );
    assert!(got("teesfs_read_wait_seconds_sum") > 0.0, "{text}");
    assert!(got("teesfs_job_urgent_seconds") >= 0.0, "{text}");
    assert!(got("teesfs_job_whole_layer_seconds") >= 0.0, "{text}");
    assert_eq!(got("teesfs_chunks_corrupt_total"), 0.0, "{text}");
    // One job in a fresh store: the job's stored bytes are the store's, as `status` says.
    let st = c.status(0);
    let stored = st["store_bytes"].as_f64().expect("store bytes");
    assert!(stored > 6e6, "{st}");
    assert_eq!(got("teesfs_job_store_bytes"), stored, "{text}");
    assert_eq!(value(text, "teesfs_store_bytes"), Some(stored), "{text}");
    assert_eq!(
        got("teesfs_job_store_chunks"),
        st["jobs"][0]["chunks"].as_f64().expect("chunks"),
        "{text}"
    );
    // Every family is a teesfs_ one with HELP text.
    let families: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .collect();
    assert!(families.len() >= 15, "{families:?}");
    for f in &families {
        assert!(f.starts_with("teesfs_"), "{f}");
        assert!(
            text.lines().any(|l| l.starts_with(&format!("# HELP {f} "))),
            "no HELP for {f}"
        );
    }

    // Bad requests get an answer and leave the endpoint working.
    assert!(http(&addr, b"GET / HTTP/1.0\r\n\r\n").starts_with("HTTP/1.1 404"));
    assert!(http(&addr, b"POST /metrics HTTP/1.0\r\n\r\n").starts_with("HTTP/1.1 405"));
    let mut huge = b"GET /metrics HTTP/1.1\r\nX: ".to_vec();
    huge.extend(std::iter::repeat_n(b'a', 64 << 10));
    let mut s = TcpStream::connect(&addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    // The endpoint stops reading and answers; the rest may meet a closed socket.
    let _ = s.write_all(&huge);
    let mut first = [0u8; 12];
    s.read_exact(&mut first)
        .expect("an answer to an oversized request");
    assert_eq!(&first, b"HTTP/1.1 431");

    // Released: the job's series are gone, the store's remain.
    let job_id = st["jobs"][0]["job"].as_str().expect("job id").to_string();
    let sock = c.nodes[0].control();
    let out = c.ws.teesfs(&[
        "release",
        "--control",
        sock.to_str().expect("utf8"),
        "--job",
        &job_id,
    ]);
    assert!(out.status.success(), "release: {out:?}");
    let answer = http(&addr, b"GET /metrics HTTP/1.0\r\n\r\n");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(!answer.contains("job=\""), "{answer}");
    assert!(answer.contains("\nteesfs_store_bytes "), "{answer}");
}
