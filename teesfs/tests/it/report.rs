//! `teesfs report` in a real browser: the page of a 32-node push (the lab's shape, 4 groups
//! of 8, one failed edge) and of a 17,560-node one (the TEES paper's job, 2,195 groups of 8)
//! are written by the binary, then loaded by headless Chromium, which must render them.
//!
//! Chromium comes from scripts/deps.sh; without it the test skips with a reason, except
//! under CI, where it fails.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use teesfs_node::report::{EdgeBytes, Failure, FailureKind, NodeTimes, PushReport, Uplink};

use crate::util::teesfs_bin;

/// A push of `groups` groups of 8 shaped as `topo` plans the lab: the root feeds each
/// proxy, the proxy four members, three of those the other three. In group 1 the edge into
/// its sixth node fails.
fn push_report(groups: usize) -> PushReport {
    let size = 8;
    let host = |g: usize, k: usize| format!("cn{:05}", g * size + k + 1);
    let (mut per_node, mut edges, mut uplinks) = (Vec::new(), Vec::new(), Vec::new());
    for g in 0..groups {
        for k in 0..size {
            let parent = match k {
                0 => "login".to_string(),
                1..=4 => host(g, 0),
                _ => host(g, k - 4),
            };
            let t = 0.3 + 0.002 * g as f64 + 0.04 * k as f64;
            let lost = g == 1 && k == 5;
            per_node.push(NodeTimes {
                host: host(g, k),
                parent: parent.clone(),
                urgent_s: (!lost).then_some(t * 0.4),
                all_s: (!lost).then_some(t),
                group: Some(g),
                app_start_s: None,
            });
            edges.push(EdgeBytes {
                parent,
                child: host(g, k),
                bytes: if lost { 3 << 20 } else { 16 << 20 },
            });
        }
        uplinks.push(Uplink {
            group: g,
            proxy: host(g, 0),
            in_bytes: 16 << 20,
            out_bytes: 0,
        });
    }
    PushReport {
        version: 1,
        job: "00000000000004d2".into(),
        index: "3fa2".repeat(16),
        strategy: "topo".into(),
        root: "login".into(),
        nodes: groups * size,
        urgent_chunks: 3,
        chunks: 16,
        urgent_bytes: 3 << 20,
        total_bytes: 16 << 20,
        streamed_bytes: 16 << 20,
        urgent_complete_s: Some(0.3 + 0.002 * groups as f64),
        all_complete_s: None,
        per_node,
        edges,
        uplinks,
        failures: vec![Failure {
            kind: FailureKind::Failed,
            parent: host(1, 1),
            child: host(1, 5),
            at_s: 0.4,
            reason: None,
            cause: None,
        }],
        learned_files: 0,
        rates: None,
    }
}

/// The browser, or `None` (with the reason printed) outside CI when there is none.
fn chromium() -> Option<PathBuf> {
    let found = ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.is_file());
    if found.is_none() {
        let why = "no /usr/bin/chromium: run scripts/deps.sh (Debian package chromium)";
        assert!(
            std::env::var_os("CI").is_none(),
            "cannot run under CI: {why}"
        );
        eprintln!("SKIP: {why}");
    }
    found
}

/// Runs headless Chromium on `page` with `extra` flags; its standard output.
fn browse(browser: &Path, page: &Path, extra: &[String]) -> String {
    let profile = tempfile::tempdir().expect("profile dir");
    // To a file rather than a pipe: the DOM of a large page fills a pipe nobody reads
    // until Chromium exits, and Chromium would wait on it forever.
    let dom = tempfile::NamedTempFile::new().expect("stdout file");
    let mut child = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--window-size=1400,1000",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(dom.reopen().expect("stdout file"))
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromium");
    let start = Instant::now();
    while child.try_wait().expect("wait for chromium").is_none() {
        if start.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            panic!(
                "chromium did not finish rendering {} in 2 min",
                page.display()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let status = child.wait().expect("chromium status");
    assert!(status.success(), "chromium failed on {}", page.display());
    String::from_utf8_lossy(&std::fs::read(dom.path()).expect("chromium output")).into_owned()
}

/// Width, height and size of a PNG file, from its header.
fn png_size(path: &Path) -> (u32, u32, usize) {
    let bytes = std::fs::read(path).expect("screenshot written");
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    let be = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    (be(16), be(20), bytes.len())
}

/// Writes the report, draws it with `teesfs report` (page and bare SVG), and returns the
/// page.
fn draw(dir: &Path, name: &str, rep: &PushReport) -> PathBuf {
    let json = dir.join(format!("{name}.json"));
    std::fs::write(&json, serde_json::to_vec(rep).expect("json")).expect("write report");
    let page = dir.join(format!("{name}.html"));
    for extra in [&["-o", page.to_str().expect("utf-8")][..], &["--svg"][..]] {
        let out = Command::new(teesfs_bin())
            .arg("report")
            .arg(&json)
            .args(extra)
            .output()
            .expect("run teesfs report");
        assert!(out.status.success(), "teesfs report failed: {out:?}");
    }
    let svg = std::fs::read_to_string(json.with_extension("svg")).expect("--svg beside");
    assert!(svg.starts_with("<svg"), "--svg writes a bare SVG");
    page
}

#[test]
fn push_reports_render_in_a_browser_at_32_and_17560_nodes() {
    let Some(browser) = chromium() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    for (groups, must_show) in [
        (
            4,
            &[
                "cn00014 (failed)",
                "failed (from cn00010)",
                "group 3 (8 nodes)",
                "uplink in 16.0 MiB / out 0 B",
            ][..],
        ),
        (
            2195,
            &["2195 groups", "groups 0-21 (176)", "1 node(s) failed"][..],
        ),
    ] {
        let nodes = groups * 8;
        let page = draw(dir.path(), &format!("push{nodes}"), &push_report(groups));
        let bytes = std::fs::metadata(&page).expect("page").len();
        assert!(bytes < 4 << 20, "{nodes} nodes: the page is {bytes} bytes");

        let dom = browse(&browser, &page, &["--dump-dom".to_string()]);
        assert!(
            dom.contains("<svg"),
            "{nodes} nodes: no SVG in the rendered page: {}",
            &dom[..dom.len().min(500)]
        );
        for s in must_show.iter().copied().chain([
            format!("{nodes} nodes").as_str(),
            "#D01010",
            "whole layer: never",
        ]) {
            assert!(
                dom.contains(s),
                "{nodes} nodes: the rendered page lacks {s:?}"
            );
        }

        let png = dir.path().join(format!("push{nodes}.png"));
        browse(
            &browser,
            &page,
            &[format!("--screenshot={}", png.display())],
        );
        let (w, h, size) = png_size(&png);
        assert_eq!((w, h), (1400, 1000), "{nodes} nodes: screenshot size");
        // A blank 1400x1000 page compresses to a few KB; text, bars and the map do not.
        assert!(
            size > 40_000,
            "{nodes} nodes: the screenshot looks blank ({size} bytes)"
        );
    }
}

/// A report that is not one says which file and what it should be.
#[test]
fn report_names_a_file_that_is_not_a_push_report() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{\"nodes\": 3}").expect("write");
    let out = Command::new(teesfs_bin())
        .arg("report")
        .arg(&bad)
        .output()
        .expect("run teesfs report");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.json") && err.contains("is not a push report"),
        "{err}"
    );
}

/// Issue 29 item 4: root draws a user's report, and the user linked the output path to a
/// root-owned file. The link is refused and the file is unchanged; a hard link at the
/// output path is replaced as a name, its other name keeps its bytes.
#[test]
fn report_does_not_write_through_a_symlink_at_its_output_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("push.json");
    std::fs::write(&json, serde_json::to_vec(&push_report(1)).expect("json")).expect("write");
    let victim = dir.path().join("root-owned");
    std::fs::write(&victim, b"root's own\n").expect("victim");
    std::os::unix::fs::symlink(&victim, dir.path().join("push.html")).expect("ln -s");
    let report = |extra: &[&str]| {
        Command::new(teesfs_bin())
            .arg("report")
            .arg(&json)
            .args(extra)
            .output()
            .expect("run teesfs report")
    };
    let out = report(&[]);
    assert!(!out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("push.html") && err.contains("symbolic link"),
        "{err}"
    );
    assert_eq!(std::fs::read(&victim).expect("read"), b"root's own\n");

    let hard = dir.path().join("hard.svg");
    std::fs::hard_link(&victim, &hard).expect("ln");
    let out = report(&["--svg", "-o", hard.to_str().expect("utf8")]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(std::fs::read(&victim).expect("read"), b"root's own\n");
    assert!(
        std::fs::read_to_string(&hard)
            .expect("svg")
            .starts_with("<svg")
    );
}

/// Runs `teesfs report args`, killing it after `limit` (then the test fails: the defects
/// below hung the command).
fn report_within(args: &[&std::ffi::OsStr], limit: Duration) -> std::process::Output {
    let t0 = Instant::now();
    let mut child = Command::new(teesfs_bin())
        .arg("report")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run teesfs report");
    while child.try_wait().expect("wait").is_none() {
        if t0.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!("teesfs report {args:?} still ran after {limit:?}: {out:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

/// Issue 29: a time of about 1.25e308 made plotters' axis range overflow to infinity and
/// `teesfs report` spin forever. It is refused at once, naming the file and the field.
#[test]
fn report_refuses_a_time_of_1e308_instead_of_spinning() {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("huge-time.json");
    let text = serde_json::to_string(&push_report(1))
        .expect("json")
        .replacen(
            "\"all_complete_s\":",
            "\"all_complete_s\":1.3e308,\"x\":",
            1,
        );
    std::fs::write(&json, text).expect("write");
    let out = report_within(&[json.as_os_str()], Duration::from_secs(20));
    assert!(!out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("huge-time.json") && err.contains("all_complete_s") && err.contains("e308"),
        "{err}"
    );
    assert!(!dir.path().join("huge-time.html").exists());
}

/// Issue 29: a FIFO as the report hung `teesfs report` (it waited for a writer), and a
/// report was read without a size bound. Both are refused at once, naming the file.
#[test]
fn report_refuses_a_fifo_and_an_oversized_file_as_input() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pipe = dir.path().join("pipe.json");
    nix::unistd::mkfifo(&pipe, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
    let out = report_within(&[pipe.as_os_str()], Duration::from_secs(20));
    assert!(!out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("pipe.json") && err.contains("FIFO") && err.contains("not a regular file"),
        "{err}"
    );

    let big = dir.path().join("big.json");
    let f = std::fs::File::create(&big).expect("create");
    // Sparse: the bound is on the length, checked before anything is read.
    f.set_len(teesfs_node::report::Limits::default().max_input + 1)
        .expect("set_len");
    let out = report_within(&[big.as_os_str()], Duration::from_secs(20));
    assert!(!out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("big.json") && err.contains("larger than"),
        "{err}"
    );
}
