//! Real Slurm in the lab: munge, slurmctld on the login node and a slurmd in every node
//! namespace come up; `srun` reaches every node; `sbcast` lands byte-exact in every node's
//! local directory; and nothing Slurm started is left afterwards.

use std::path::Path;
use std::time::Duration;

use lab::{Lab, LabOptions, LabSpec, Rates};

use crate::util::teesfs_bin;

fn can_lab() -> bool {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("SKIP: the lab needs root (network namespaces, tc, FUSE); CI runs as root");
        return false;
    }
    if !Path::new("/dev/fuse").exists() {
        eprintln!("SKIP: this kernel has no /dev/fuse");
        return false;
    }
    true
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

#[test]
fn lab_slurm_srun_and_sbcast_reach_every_node_and_clean_up() {
    if !can_lab() {
        return;
    }
    let spec = LabSpec {
        groups: 2,
        group_size: 2,
        rates: Rates::default(),
    };
    let lab = Lab::up(&spec, &LabOptions::new(teesfs_bin())).expect("lab up");
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
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let data: Vec<u8> = (0..(2 << 20) + 12345)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
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
