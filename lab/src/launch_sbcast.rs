//! The `sbcast+untar` method of `lab launch`: Slurm's own broadcast of a tarball of the
//! layer to every node of a real allocation, `tar -x` on every node at once, then the
//! application from the unpacked copy; and how long such a broadcast may take.

use std::time::Instant;

use super::{Launch, Method, Outcome, apps_cpu, last_node, node_starts};
use crate::cluster::Lab;
use crate::demo;
use crate::error::{LabError, Result};

/// How long `sbcast` of `file` to every compute node may take before the lab gives it up:
/// Slurm's default tree (`TreeWidth` 50) sends each block from the login node to up to 50
/// nodes itself, so the bound is every node's copy through the login node's link, three
/// times over, plus ten minutes. (The realistic layer's 548 MB tarball to 32 nodes over the
/// scale model's 161 Mbit/s login link takes some 15 minutes.)
pub(crate) fn sbcast_limit(lab: &Lab, file: &std::path::Path) -> Result<std::time::Duration> {
    let bytes = std::fs::metadata(file).map_err(LabError::io(file))?.len();
    let nodes = lab.layout().compute().count();
    Ok(one_to_all_limit(
        bytes,
        nodes,
        lab.layout().spec.rates.login,
    ))
}

/// Ten minutes plus three times `bytes` to each of `nodes` through a link of `bits_per_s`.
pub(super) fn one_to_all_limit(bytes: u64, nodes: usize, bits_per_s: u64) -> std::time::Duration {
    let one_to_all_s = bytes as f64 * 8.0 * nodes as f64 / bits_per_s.max(1) as f64;
    std::time::Duration::from_secs_f64(600.0 + 3.0 * one_to_all_s)
}

/// `sbcast` of a tarball of the layer over a real Slurm allocation, `tar -x` on every
/// node at once, then the application from the unpacked copy.
pub(super) fn sbcast_untar(lab: &Lab, l: &Launch) -> Result<Outcome> {
    let tar = lab.work().join("launch-layer.tar");
    let status = std::process::Command::new("tar")
        .arg("-cf")
        .arg(&tar)
        .arg("-C")
        .arg(&l.layer)
        .arg(".")
        .status()
        .map_err(|source| LabError::Spawn {
            program: "tar".into(),
            source,
        })?;
    if !status.success() {
        return Err(LabError::Command {
            command: format!("tar -cf {} -C {} .", tar.display(), l.layer.display()),
            stderr: "making the tarball failed".into(),
        });
    }
    // The tarball goes whether the rest works or not (a failed method leaves nothing).
    let sent = sbcast_tar(lab, l, &tar);
    let _ = std::fs::remove_file(&tar);
    sent
}

/// The part of [`sbcast_untar`] after the tarball is made: Slurm up, `sbcast`, `tar -x` on
/// every node, the application. Slurm goes down when it returns, whatever happened.
fn sbcast_tar(lab: &Lab, l: &Launch, tar: &std::path::Path) -> Result<Outcome> {
    let slurm = lab.start_slurm()?;
    let job = slurm.allocate()?;
    let up_before = lab.net().uplinks()?;
    let slurm_cpu = slurm.cpu_seconds();
    let t0 = Instant::now();
    slurm.sbcast_within(job, tar, "layer.tar", &[], sbcast_limit(lab, tar)?)?;
    let copied = t0.elapsed().as_secs_f64();
    let unpack = |h: &str| slurm.node_local(h).join("layer");
    let mut untars = Vec::new();
    for h in slurm.hosts() {
        let dir = unpack(h);
        std::fs::create_dir_all(&dir).map_err(LabError::io(&dir))?;
        let mut cmd = lab.command_on(h, "tar")?;
        cmd.arg("-xf")
            .arg(slurm.node_local(h).join("layer.tar"))
            .arg("-C")
            .arg(&dir);
        let child = cmd.spawn().map_err(|source| LabError::Spawn {
            program: "tar".into(),
            source,
        })?;
        untars.push((h.clone(), child));
    }
    for (h, mut c) in untars {
        let ok = c.wait().map(|s| s.success()).unwrap_or(false);
        if !ok {
            return Err(LabError::Command {
                command: format!("tar -x on {h}"),
                stderr: "unpacking the layer failed".into(),
            });
        }
    }
    let unpacked = t0.elapsed().as_secs_f64();
    let apps = demo::start_everywhere(lab, &l.app, unpack)?;
    let app_s = t0.elapsed().as_secs_f64();
    let up_after = lab.net().uplinks()?;
    let slurm_cpu = slurm.cpu_seconds() - slurm_cpu;
    slurm.cancel(job)?;
    slurm.down()?;
    Ok(Outcome {
        method: Method::Sbcast,
        app_s,
        urgent_s: None,
        all_s: Some(copied),
        ok: apps.iter().filter(|x| x.ok).count(),
        nodes: apps.len(),
        uplink_in_bytes: crate::net::Counters::each_since(&up_after, &up_before)
            .iter()
            .map(|c| c.rx)
            .sum(),
        source_out_bytes: 0,
        mounted_s: None,
        push_wall_s: None,
        cpu_s: slurm_cpu,
        app_cpu_s: apps_cpu(&apps),
        detail: format!(
            "sbcast {copied:.2} s, untar {:.2} s, start {:.2} s",
            unpacked - copied,
            app_s - unpacked
        ),
        last: last_node(&apps),
        throttled_s: None,
        job: None,
        traffic: None,
        rounds: Vec::new(),
        node_starts: node_starts(&apps),
    })
}
