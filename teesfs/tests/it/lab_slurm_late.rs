//! A job's task can start before its node has mounted the job's layer: a node mounts a job
//! in the background and reports its data held independently of the mount, so the prolog's
//! push can end first (most often when the nodes already hold the layer). The SPANK plugin
//! then waits for the mount (bounded by `mount_wait=`), woken by the mount table, and the
//! task runs inside the layer; before it did, the task failed with "not mounted".
//!
//! Real Slurm (slurmctld, slurmd, slurmstepd running the packaged scripts and plugin); the
//! prolog here returns at once and the test runs the packaged prolog's push 3 s after the
//! job started, so every job's first task starts before its mount, deterministically.

use std::time::Duration;

use crate::lab::can_lab;
use crate::lab_slurm::{Site, assert_released, small_lab, write_spec};

#[test]
fn a_task_that_starts_before_its_nodes_mount_waits_for_it_and_runs_inside_the_layer() {
    let _turn = crate::lab::lab_turn();
    if !can_lab() {
        return;
    }
    let lab = small_lab(2);
    let site = Site::new(&lab, true);
    site.push_after_start();
    let slurm = site.start(&lab);
    let tmp = site.tmp.path();
    let hosts = slurm.hosts().to_vec();
    let n = hosts.len().to_string();
    let tag = format!("late{}", std::process::id());
    let layer = tmp.join("layer");
    crate::run::python_app(&layer, &tag);
    let index = lab.publish(&layer).expect("publish");
    write_spec(&lab, tmp, &index, &tag);
    std::fs::write(
        tmp.join("job.sh"),
        format!("#!/bin/sh\nsrun --label python3 /opt/app-{tag}/main.py\n"),
    )
    .expect("job.sh");
    // The second job's nodes already hold the layer: its push ends within milliseconds.
    for round in ["first", "second"] {
        let out = format!("{round}.out");
        let args = ["-N", &n, "--teesfs=manifest.toml", "-o", &out, "job.sh"];
        let job = slurm.submit(tmp, &args, None).expect("sbatch --teesfs");
        site.late_push(&lab, job, Duration::from_secs(3));
        let state = site.ended(&slurm, job, Duration::from_secs(180));
        let text = std::fs::read_to_string(tmp.join(&out)).unwrap_or_default();
        assert_eq!(
            state,
            "COMPLETED",
            "{round} job: {text}\n{}",
            site.logs(&slurm)
        );
        let mut lines: Vec<&str> = text.lines().map(str::trim).collect();
        lines.sort();
        let want: Vec<String> = (0..hosts.len())
            .map(|i| format!("{i}: answer 42"))
            .collect();
        assert_eq!(
            lines, want,
            "{round} job: every task ran the app from the layer"
        );
        // The batch task started before the mount and said how long it waited for it.
        let said = format!("teesfs: job {job}: the task waited ");
        let waited = hosts.iter().any(|h| {
            let log = slurm.dir().join("nodes").join(h).join("slurmd.log");
            std::fs::read_to_string(log).is_ok_and(|l| l.contains(&said))
        });
        assert!(
            waited,
            "{round} job: no task waited for the mount, so this test did not test it\n{}",
            site.logs(&slurm)
        );
        // The epilog released it everywhere once the late push let it go.
        let t0 = std::time::Instant::now();
        while !crate::lab::mounted_on(&lab, &hosts, &job.to_string()).is_empty() {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "{round} job still mounted"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    assert_released(&lab, &hosts);
    drop(slurm);
    lab.down().expect("lab down");
}
