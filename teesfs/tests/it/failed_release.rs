//! Issue 32, item 4: a failed start leaves no mount. Slurm runs no Epilog for a start that
//! failed in PrologSlurmctld, so the prolog's push (`--drain-list`) releases the job down
//! the tree itself when it fails: every node it reaches drops the job as `teesfs release`
//! would. A push without the flag leaves its job where it got, as before. Real daemons,
//! real QUIC, real FUSE mounts on loopback.

use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use crate::cluster::Cluster;
use crate::util::{can_mount, noise};

/// The jobs node `i`'s daemon holds (releasing ones included).
fn jobs(c: &Cluster, i: usize) -> Vec<String> {
    c.status(i)["jobs"]
        .as_array()
        .expect("jobs")
        .iter()
        .map(|j| {
            j["job"]
                .as_str()
                .map_or_else(|| j["job"].to_string(), str::to_owned)
        })
        .collect()
}

/// FUSE mounts under `dir` (a node's mount root).
fn mounts_under(dir: &Path) -> Vec<String> {
    let root = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let root = root.to_string_lossy().into_owned();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|mp| mp.starts_with(&root))
        .map(str::to_owned)
        .collect()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A chain login -> n01 -> n02 -> n03 -> n04 with n02's daemon dead: a push of job `job`
/// with `extra` flags; its output.
fn push_past_a_dead_node(c: &Cluster, id: &str, job: &str, extra: &[&str]) -> Output {
    let mut args = vec![
        "--strategy",
        "hostlist",
        "--width",
        "1",
        "--deadline",
        "1s",
        "--heartbeat",
        "200ms",
        "--job",
        job,
    ];
    args.extend_from_slice(extra);
    c.push_cmd(id, 4, &args).output().expect("push")
}

/// The prolog's push of a job to four nodes, one of them dead, fails; the three live nodes
/// (one of them re-attached around the dead one) hold neither the job nor a mount soon
/// after the push returns. The same push without `--drain-list` leaves its job mounted
/// there, so it is the release that removed it.
#[test]
fn a_failed_prolog_push_leaves_no_job_and_no_mount_on_the_live_nodes() {
    if !can_mount() {
        return;
    }
    let mut c = Cluster::start(4, |_| vec![]);
    let src = c.ws.path().join("layer");
    std::fs::create_dir_all(&src).expect("mkdir");
    std::fs::write(src.join("data.bin"), noise(3 << 20, 32)).expect("write");
    let id = c.ws.publish_mib_chunks(&src);
    c.kill(1);
    let live = [0usize, 2, 3];

    // Without the flag: the failed push leaves job 101 on the live nodes.
    let out = push_past_a_dead_node(&c, &id, "101", &[]);
    assert!(!out.status.success(), "{}", text(&out));
    for &i in &live {
        assert_eq!(jobs(&c, i), vec!["101".to_string()], "{}", c.nodes[i].host);
    }

    // The prolog's push, in the foreground (`--wait all`) and, as `prefetch` runs it, from
    // a background copy that returns at the urgent set (`--wait urgent`).
    for (job, wait) in [("102", "all"), ("103", "urgent")] {
        let drains = c.ws.path().join(format!("drain-{job}"));
        let drain_list = drains.to_str().expect("utf8");
        let out =
            push_past_a_dead_node(&c, &id, job, &["--wait", wait, "--drain-list", drain_list]);
        let all = text(&out);
        assert!(!out.status.success(), "{all}");
        assert!(all.contains("released"), "{all}");
        let drained = std::fs::read_to_string(&drains).expect("drain list");
        assert!(drained.starts_with("n02\t"), "{drained}");
        let t0 = Instant::now();
        for &i in &live {
            while jobs(&c, i).contains(&job.to_string()) {
                assert!(
                    t0.elapsed() < Duration::from_secs(5),
                    "{} still holds job {job} {:?} after the failed push returned: {all}",
                    c.nodes[i].host,
                    t0.elapsed()
                );
                std::thread::sleep(Duration::from_millis(20));
            }
            assert_eq!(jobs(&c, i), vec!["101".to_string()], "{}", c.nodes[i].host);
            let mounts = mounts_under(&c.nodes[i].dir.join("jobs"));
            assert!(
                mounts.len() == 1 && mounts[0].ends_with("/101"),
                "{}: {mounts:?}",
                c.nodes[i].host
            );
        }
        eprintln!(
            "job {job} (--wait {wait}) gone from the live nodes {:?} after the push returned",
            t0.elapsed()
        );
    }
}
