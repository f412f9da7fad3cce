//! The lab's baselines, real: Slurm (munge, slurmctld on the login node and a slurmd in
//! every node namespace come up; `srun` reaches every node; `sbcast` lands byte-exact in
//! every node's local directory; nothing Slurm started is left afterwards) and BitTorrent
//! (the project's tracker, `mktorrent`, `aria2c` on every node: every node ends with a
//! byte-exact copy and no client is left).

use std::time::Duration;

use lab::{Lab, LabOptions, LabSpec};

use crate::lab::can_lab;
use crate::util::teesfs_bin;

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

fn random_bytes(n: usize) -> Vec<u8> {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

fn spec(groups: usize, group_size: usize) -> LabSpec {
    LabSpec {
        groups,
        group_size,
        ..LabSpec::default()
    }
}

#[test]
fn lab_slurm_srun_and_sbcast_reach_every_node_and_clean_up() {
    let _turn = crate::lab::lab_turn();
    if !can_lab() {
        return;
    }
    let lab = Lab::up(&spec(2, 2), &LabOptions::new(teesfs_bin())).expect("lab up");
    let slurm = lab
        .start_slurm()
        .expect("Slurm in the lab (scripts/deps.sh installs munge, slurmctld, slurmd)");
    let hosts = slurm.hosts().to_vec();
    let compute: Vec<String> = lab.layout().compute().map(|n| n.host.clone()).collect();
    assert_eq!(hosts, compute);
    let t = Duration::from_secs(60);

    // Every node runs a task and answers with its own name.
    let all = hosts.len().to_string();
    let out = slurm
        .run("srun", &["-N", &all, "hostname"], t)
        .expect("srun");
    let mut got: Vec<&str> = out.lines().map(str::trim).collect();
    got.sort_unstable();
    assert_eq!(got, hosts, "srun -N {all} hostname answered {out:?}");

    // sbcast into every node's local directory, byte-exact.
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = tmp.path().join("payload.bin");
    let data = random_bytes((2 << 20) + 12345);
    std::fs::write(&src, &data).expect("write payload");
    let job = slurm.allocate().expect("allocation over all nodes");
    let dest = slurm.sbcast(job, &src, "payload.bin", &[]).expect("sbcast");
    for h in &hosts {
        let got = std::fs::read(slurm.node_local(h).join("payload.bin")).expect("node copy");
        assert!(got == data, "{h}: sbcast copy differs from the source");
    }
    // ... and each node sees its copy at the common path, from inside its namespaces.
    let jobid = format!("--jobid={job}");
    let check = format!(
        "cmp -s '{}' '{}' && hostname",
        dest.display(),
        src.display()
    );
    let out = slurm
        .run("srun", &[&jobid, "-N", &all, "sh", "-c", &check], t)
        .expect("srun cmp");
    let mut got: Vec<&str> = out.lines().map(str::trim).collect();
    got.sort_unstable();
    assert_eq!(got, hosts, "nodes holding the sbcast copy: {out:?}");

    // Down: no process, no file left, even with the allocation still running.
    let pids = slurm.pids();
    assert!(
        pids.len() > hosts.len() + 1,
        "slurmds, slurmctld, munged: {pids:?}"
    );
    let dir = slurm.dir().to_path_buf();
    slurm.down().expect("slurm down");
    let left: Vec<u32> = pids.into_iter().filter(|&p| alive(p)).collect();
    assert!(left.is_empty(), "Slurm processes left: {left:?}");
    assert!(!dir.exists(), "{} left", dir.display());
    lab.down().expect("lab down");
}

#[test]
fn lab_bittorrent_reaches_every_node_byte_exact_and_stops_its_clients() {
    let _turn = crate::lab::lab_turn();
    if !can_lab() {
        return;
    }
    let lab = Lab::up(&spec(2, 3), &LabOptions::new(teesfs_bin())).expect("lab up");
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = tmp.path().join("payload.bin");
    let data = random_bytes((3 << 20) + 4321);
    std::fs::write(&src, &data).expect("write payload");
    let run = lab::torrent::distribute(&lab, &src, Duration::from_secs(120), true)
        .expect("aria2c + mktorrent + the lab tracker (scripts/deps.sh installs them)");
    assert_eq!(run.copies.len(), 6);
    assert!(run.per_node_s.iter().all(|s| s.is_finite()), "{run:?}");
    for c in &run.copies {
        let got = std::fs::read(c).expect("node copy");
        assert!(got == data, "{}: differs from the seed's file", c.display());
    }
    // Every group received the payload over its uplink at least once.
    for (g, u) in run.uplinks.iter().enumerate() {
        assert!(u.rx >= data.len() as u64, "group {g} uplink got {} B", u.rx);
    }
    let aria: Vec<String> = std::process::Command::new("pgrep")
        .args(["-f", &lab.work().display().to_string()])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .map(String::from)
                .collect()
        })
        .unwrap_or_default();
    let daemons: Vec<String> = lab
        .layout()
        .compute()
        .filter_map(|n| lab.daemon_pid(&n.host))
        .map(|p| p.to_string())
        .collect();
    let left: Vec<&String> = aria.iter().filter(|p| !daemons.contains(p)).collect();
    assert!(left.is_empty(), "processes of the run left: {left:?}");
    lab.down().expect("lab down");
}
