//! The image launch benchmark's baselines (issue 34): how sites start a container image
//! on every node today, each on fresh nodes with the same image, beside teesfs's methods
//! in [`crate::launch`]:
//!
//! - **registry-pull**: a real Distribution registry (`docker-registry`) on the storage
//!   node holds the image; every node pulls it (`skopeo copy docker://… oci:…`) and
//!   unpacks it (`umoci unpack`), then starts the application in the unpacked root;
//! - **sbcast+unsquash**: the enroot/pyxis path: `sbcast` of the image's squashfs to every
//!   node of a real Slurm allocation, `unsquashfs` on every node, then the start;
//! - **squashfuse**: the SIF-on-Lustre path: the squashfs stays on the storage node
//!   (served by nginx over HTTP, which supports range requests as a parallel file system
//!   serves byte ranges); every node mounts it with `httpdirfs` and reads it lazily through
//!   `squashfuse`. Its cost is the storage node's egress, reported beside the time.
//!
//! The application is started everywhere as in the other methods ([`demo::start_everywhere`]),
//! with `TEESFS_MOUNT` the node's root of the image.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use crate::cluster::Lab;
use crate::demo::{self, AppRun};
use crate::error::{LabError, Result};
use crate::launch::table::{by_round, of, paired};
use crate::launch::{Launch, Method, Outcome, Report};
use crate::proc::{self, NodeProc};

/// The image in the forms the baselines use (what `scripts/image-build.sh` writes).
#[derive(Debug, Clone)]
pub struct ImageFiles {
    /// An OCI image layout directory.
    pub oci: PathBuf,
    /// Its tag.
    pub tag: String,
    /// The same image as one squashfs file.
    pub squashfs: PathBuf,
}

impl ImageFiles {
    /// The image as `teesfs publish --image` and `teesfs run --image` name it: `DIR:TAG`.
    pub fn source(&self) -> String {
        format!("{}:{}", self.oci.display(), self.tag)
    }
}

/// A method's own per-node directory, emptied before and after it runs.
fn scratch(lab: &Lab, host: &str, method: &str) -> PathBuf {
    lab.work().join(host).join(format!("image-{method}"))
}

fn remove_scratch(lab: &Lab, method: &str) {
    for node in lab.layout().compute() {
        let dir = scratch(lab, &node.host, method);
        crate::mounts::detach_mounts_under(&dir);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Runs `program` with `args` on every compute node at once (in that node's network and
/// mounts, with its CPU share) and waits for all; fails naming the first node that failed.
fn on_every_node(
    lab: &Lab,
    what: &str,
    program: &str,
    args: impl Fn(&str) -> Vec<String>,
) -> Result<()> {
    let mut children: Vec<(String, Child)> = Vec::new();
    for node in lab.layout().compute() {
        let mut cmd = lab.command_on(&node.host, program)?;
        cmd.args(args(&node.host))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let child = cmd.spawn().map_err(|source| LabError::Spawn {
            program: program.into(),
            source,
        })?;
        children.push((node.host.clone(), child));
    }
    let mut failed = None;
    for (host, child) in children {
        let out = child.wait_with_output().map_err(LabError::io(program))?;
        if !out.status.success() && failed.is_none() {
            failed = Some(LabError::Command {
                command: format!("{what} on {host}"),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
    }
    failed.map_or(Ok(()), Err)
}

/// Runs a command on the host and fails with its stderr.
fn run_here(cmd: &mut Command, what: &str) -> Result<()> {
    let out = cmd.output().map_err(|source| LabError::Spawn {
        program: what.into(),
        source,
    })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(LabError::Command {
            command: what.into(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

/// Bytes the storage node has sent so far.
fn storage_tx(lab: &Lab) -> Result<u64> {
    Ok(lab.net().counters("storage", "eth0")?.tx)
}

/// Bytes the login and storage nodes have sent so far: where every method's data starts.
pub(crate) fn sources_out(lab: &Lab) -> Result<u64> {
    Ok(lab.net().counters("login", "eth0")?.tx + storage_tx(lab)?)
}

/// Bytes that have entered the groups over their uplinks so far.
fn uplinks_in(lab: &Lab) -> Result<u64> {
    Ok(lab.net().uplinks()?.iter().map(|c| c.rx).sum())
}

/// Runs image method `m`.
pub(crate) fn run(lab: &Lab, l: &Launch, m: Method) -> Result<Outcome> {
    let img = l.image.as_ref().ok_or_else(|| {
        LabError::Shape(format!(
            "{} starts a container image: give the launch an image (`teesfs lab launch --image`)",
            m.name()
        ))
    })?;
    let up0 = uplinks_in(lab)?;
    let mut o = match m {
        Method::RegistryPull => registry_pull(lab, l, img)?,
        Method::SbcastUnsquash => sbcast_unsquash(lab, l, img)?,
        Method::Squashfuse => squashfuse(lab, l, img)?,
        other => {
            return Err(LabError::Shape(format!(
                "{} is not an image method",
                other.name()
            )));
        }
    };
    o.uplink_in_bytes = uplinks_in(lab)?.saturating_sub(up0);
    Ok(o)
}

/// The image goals (issue 34), judged on this run for the default (urgent-first), over
/// rounds on the median of each round's own ratio ([`paired`]): empty when no image
/// method ran.
pub fn goals(rep: &Report) -> String {
    use std::fmt::Write as _;
    let find = |m: Method| of(&rep.outcomes, m);
    let Some(def) = find(Method::UrgentFirst) else {
        return String::new();
    };
    if !rep.outcomes.iter().any(|o| o.method.image_only()) {
        return String::new();
    }
    let verdict = |ok: bool| if ok { "met" } else { "NOT met" };
    let x = |r: f64| format!("{r:.2}x");
    // `a`'s start over `b`'s, round by round.
    let ratio = |a: Method, b: Method| {
        paired(rep, move |os: &[Outcome], _: Option<f64>| {
            Some(of(os, a)?.app_s / of(os, b)?.app_s)
        })
    };
    let mut t = String::from("  image goals for the default (urgent-first):\n");
    for (m, goal) in [(Method::RegistryPull, 10.0), (Method::SbcastUnsquash, 3.0)] {
        if let (Some(o), Some((r, each))) = (find(m), ratio(m, Method::UrgentFirst)) {
            let cap = rep
                .local_s
                .map(|l| o.app_s / l)
                .filter(|c| *c < goal)
                .map_or(String::new(), |c| format!(" (cap {c:.2}x)"));
            let _ = writeln!(
                t,
                "    {:<36} {r:5.2}x  {}{cap}{}",
                format!("{goal}x sooner than {}:", m.name()),
                verdict(r >= goal),
                by_round(&each, x)
            );
        }
    }
    if let (Some(o), Some((r, each))) = (
        find(Method::Squashfuse),
        ratio(Method::UrgentFirst, Method::Squashfuse),
    ) {
        let _ = writeln!(
            t,
            "    no later than squashfuse:            {r:5.2}x  {}{}",
            verdict(r <= 1.0),
            by_round(&each, x)
        );
        let e = def.source_out_bytes as f64 / o.source_out_bytes.max(1) as f64;
        let _ = writeln!(
            t,
            "    at most 1/8 of squashfuse's egress:  {e:5.3}x  {} ({} against {})",
            verdict(e <= 0.125),
            mib(def.source_out_bytes),
            mib(o.source_out_bytes)
        );
    }
    t
}

/// The lab's storage node, where the baselines' image lives.
fn storage(lab: &Lab) -> Result<&crate::layout::NodeSpec> {
    lab.layout()
        .node("storage")
        .ok_or_else(|| LabError::Shape("the lab has no storage node".into()))
}

/// A server on the storage node, stopped when dropped; waits until it accepts on `port`.
fn serve_on_storage(
    lab: &Lab,
    name: &str,
    program: &str,
    args: &[String],
    port: u16,
) -> Result<NodeProc> {
    let node = storage(lab)?;
    let log = lab.work().join(format!("{name}.log"));
    let file = std::fs::File::create(&log).map_err(LabError::io(&log))?;
    let err = file.try_clone().map_err(LabError::io(&log))?;
    let child = proc::in_new_mounts(&node.netns, program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(file)
        .stderr(err)
        .spawn()
        .map_err(|source| LabError::Spawn {
            program: program.into(),
            source,
        })?;
    let server = NodeProc::new("storage", log.clone(), child);
    // Ready when it accepts a connection: bash's /dev/tcp, retried for up to 20 s.
    let probe = format!(
        "for i in $(seq 400); do (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && exit 0; \
         sleep 0.05; done; exit 1"
    );
    run_here(
        proc::in_net(&node.netns, "bash").args(["-c", &probe]),
        &format!(
            "{name} on the storage node did not listen on port {port} (log: {})",
            log.display()
        ),
    )?;
    Ok(server)
}

fn outcome(method: Method, apps: &[AppRun], app_s: f64, all_s: f64, detail: String) -> Outcome {
    Outcome {
        method,
        app_s,
        urgent_s: None,
        all_s: Some(all_s),
        ok: apps.iter().filter(|x| x.ok).count(),
        nodes: apps.len(),
        uplink_in_bytes: 0,
        source_out_bytes: 0,
        mounted_s: None,
        push_wall_s: None,
        cpu_s: 0.0,
        app_cpu_s: apps.iter().map(|x| x.cpu_s).sum(),
        detail,
        last: crate::launch::last_node(apps),
        throttled_s: None,
        job: None,
        traffic: None,
        rounds: Vec::new(),
        node_starts: crate::launch::node_starts(apps),
    }
}

/// Every node pulls the image from a registry on the storage node and unpacks it.
pub(crate) fn registry_pull(lab: &Lab, l: &Launch, img: &ImageFiles) -> Result<Outcome> {
    let store = lab.work().join("registry");
    let _ = std::fs::remove_dir_all(&store);
    std::fs::create_dir_all(&store).map_err(LabError::io(&store))?;
    let conf = lab.work().join("registry.yml");
    let text = format!(
        "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\n\
         http:\n  addr: 0.0.0.0:5000\n",
        store.display()
    );
    std::fs::write(&conf, text).map_err(LabError::io(&conf))?;
    let conf_s = conf.display().to_string();
    let registry = serve_on_storage(
        lab,
        "registry",
        "docker-registry",
        &["serve".into(), conf_s],
        5000,
    )?;
    let netns = &storage(lab)?.netns;
    let src = format!("oci:{}:{}", img.oci.display(), img.tag);
    run_here(
        proc::in_net(netns, "skopeo").args([
            "--insecure-policy",
            "copy",
            "--quiet",
            "--dest-tls-verify=false",
            &src,
            "docker://127.0.0.1:5000/image:latest",
        ]),
        "skopeo copy of the image into the lab's registry",
    )?;
    let addr = storage(lab)?.addr();
    let egress0 = storage_tx(lab)?;
    let t0 = Instant::now();
    let dir = |h: &str| scratch(lab, h, "registry");
    for node in lab.layout().compute() {
        std::fs::create_dir_all(dir(&node.host)).map_err(LabError::io(dir(&node.host)))?;
    }
    on_every_node(lab, "skopeo copy (pull)", "skopeo", |h| {
        vec![
            "--insecure-policy".into(),
            "copy".into(),
            "--quiet".into(),
            "--src-tls-verify=false".into(),
            format!("docker://{addr}:5000/image:latest"),
            format!("oci:{}:image", dir(h).join("oci").display()),
        ]
    })?;
    let pulled = t0.elapsed().as_secs_f64();
    on_every_node(lab, "umoci unpack", "umoci", |h| {
        vec![
            "unpack".into(),
            "--image".into(),
            format!("{}:image", dir(h).join("oci").display()),
            dir(h).join("bundle").display().to_string(),
        ]
    })?;
    let unpacked = t0.elapsed().as_secs_f64();
    let apps = demo::start_everywhere(lab, &l.app, |h| dir(h).join("bundle/rootfs"))?;
    let app_s = t0.elapsed().as_secs_f64();
    let egress = storage_tx(lab)? - egress0;
    drop(registry);
    remove_scratch(lab, "registry");
    let _ = std::fs::remove_dir_all(&store);
    Ok(outcome(
        Method::RegistryPull,
        &apps,
        app_s,
        unpacked,
        format!(
            "pull {pulled:.2} s, unpack {:.2} s, start {:.2} s; storage egress {}",
            unpacked - pulled,
            app_s - unpacked,
            mib(egress)
        ),
    ))
}

/// `sbcast` of the squashfs over a real Slurm allocation, `unsquashfs` on every node.
pub(crate) fn sbcast_unsquash(lab: &Lab, l: &Launch, img: &ImageFiles) -> Result<Outcome> {
    let slurm = lab.start_slurm()?;
    let job = slurm.allocate()?;
    let slurm_cpu = slurm.cpu_seconds();
    let t0 = Instant::now();
    let limit = crate::launch::sbcast_limit(lab, &img.squashfs)?;
    slurm.sbcast_within(job, &img.squashfs, "image.sqfs", &[], limit)?;
    let copied = t0.elapsed().as_secs_f64();
    let dir = |h: &str| scratch(lab, h, "unsquash");
    on_every_node(lab, "unsquashfs", "unsquashfs", |h| {
        vec![
            "-quiet".into(),
            "-no-progress".into(),
            "-d".into(),
            dir(h).display().to_string(),
            slurm.node_local(h).join("image.sqfs").display().to_string(),
        ]
    })?;
    let unpacked = t0.elapsed().as_secs_f64();
    let apps = demo::start_everywhere(lab, &l.app, dir)?;
    let app_s = t0.elapsed().as_secs_f64();
    let slurm_cpu = slurm.cpu_seconds() - slurm_cpu;
    slurm.cancel(job)?;
    slurm.down()?;
    remove_scratch(lab, "unsquash");
    let mut o = outcome(
        Method::SbcastUnsquash,
        &apps,
        app_s,
        unpacked,
        format!(
            "sbcast {copied:.2} s, unsquashfs {:.2} s, start {:.2} s",
            unpacked - copied,
            app_s - unpacked
        ),
    );
    o.cpu_s = slurm_cpu;
    Ok(o)
}

/// The squashfs stays on the storage node; every node reads it lazily through
/// `httpdirfs` (HTTP range requests to nginx) and `squashfuse`.
pub(crate) fn squashfuse(lab: &Lab, l: &Launch, img: &ImageFiles) -> Result<Outcome> {
    let root = img
        .squashfs
        .parent()
        .ok_or_else(|| LabError::Shape("the squashfs has no directory".into()))?;
    let name = img
        .squashfs
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| LabError::Shape("the squashfs's name is not UTF-8".into()))?
        .to_string();
    let conf = nginx_conf(lab, root)?;
    let nginx = serve_on_storage(
        lab,
        "nginx",
        "nginx",
        &[
            "-c".into(),
            conf.display().to_string(),
            "-g".into(),
            "daemon off;".into(),
        ],
        8080,
    )?;
    let addr = storage(lab)?.addr();
    let dir = |h: &str| scratch(lab, h, "squashfuse");
    for node in lab.layout().compute() {
        for sub in ["http", "root"] {
            let d = dir(&node.host).join(sub);
            std::fs::create_dir_all(&d).map_err(LabError::io(&d))?;
        }
    }
    let egress0 = storage_tx(lab)?;
    let t0 = Instant::now();
    on_every_node(lab, "httpdirfs", "httpdirfs", |h| {
        // httpdirfs 1.2.5's own range check fails against nginx, which serves ranges
        // (httpdirfs issue 188): skip it.
        vec![
            "--no-range-check".into(),
            "--single-file-mode".into(),
            format!("http://{addr}:8080/{name}"),
            dir(h).join("http").display().to_string(),
        ]
    })?;
    on_every_node(lab, "squashfuse", "squashfuse", |h| {
        vec![
            dir(h).join("http").join(&name).display().to_string(),
            dir(h).join("root").display().to_string(),
        ]
    })?;
    let mounted = t0.elapsed().as_secs_f64();
    let apps = demo::start_everywhere(lab, &l.app, |h| dir(h).join("root"))?;
    let app_s = t0.elapsed().as_secs_f64();
    let egress = storage_tx(lab)? - egress0;
    // The FUSE mounts live in the nodes' mount namespaces: unmount them there.
    let _ = on_every_node(lab, "fusermount", "sh", |h| {
        vec![
            "-c".into(),
            format!(
                "fusermount3 -u -z {0}/root; fusermount3 -u -z {0}/http",
                dir(h).display()
            ),
        ]
    });
    drop(nginx);
    remove_scratch(lab, "squashfuse");
    Ok(outcome(
        Method::Squashfuse,
        &apps,
        app_s,
        mounted,
        format!(
            "mounts {mounted:.2} s, start {:.2} s; storage egress {}",
            app_s - mounted,
            mib(egress)
        ),
    ))
}

fn nginx_conf(lab: &Lab, root: &Path) -> Result<PathBuf> {
    let dir = lab.work().join("nginx");
    std::fs::create_dir_all(&dir).map_err(LabError::io(&dir))?;
    let conf = dir.join("nginx.conf");
    let d = dir.display();
    let text = format!(
        "worker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
         events {{ worker_connections 1024; }}\n\
         http {{\n  access_log off;\n  sendfile on;\n  client_body_temp_path {d}/body;\n\
         proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n\
         scgi_temp_path {d}/scgi;\n  server {{\n    listen 8080;\n    root {};\n  }}\n}}\n",
        root.display()
    );
    std::fs::write(&conf, text).map_err(LabError::io(&conf))?;
    Ok(conf)
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1u32 << 20))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(method: Method, app_s: f64, out: u64) -> Outcome {
        Outcome {
            method,
            app_s,
            urgent_s: None,
            all_s: None,
            ok: 4,
            nodes: 4,
            uplink_in_bytes: 0,
            source_out_bytes: out,
            mounted_s: None,
            push_wall_s: None,
            cpu_s: 0.0,
            app_cpu_s: 0.0,
            detail: String::new(),
            last: None,
            throttled_s: None,
            job: None,
            traffic: None,
            rounds: Vec::new(),
            node_starts: Vec::new(),
        }
    }

    #[test]
    fn the_image_goals_judge_the_default_against_each_way_sites_start_images() {
        let mib = 1u64 << 20;
        let rep = Report::of(
            vec![
                outcome(Method::UrgentFirst, 6.0, 100 * mib),
                outcome(Method::RegistryPull, 90.0, 4000 * mib),
                outcome(Method::SbcastUnsquash, 15.0, 0),
                outcome(Method::Squashfuse, 5.0, 1000 * mib),
            ],
            Some(5.0),
        );
        let g = goals(&rep);
        assert!(
            g.contains("10x sooner than registry-pull:       15.00x  met"),
            "{g}"
        );
        // 15 / 6 = 2.5x, under 3x; the local start would cap it at 15 / 5 = 3.0x, which
        // does not bound the goal, so no cap is printed.
        assert!(g.contains("sbcast+unsquash:       2.50x  NOT met\n"), "{g}");
        assert!(
            g.contains("no later than squashfuse:             1.20x  NOT met"),
            "{g}"
        );
        assert!(
            g.contains("0.100x  met (100.0 MiB against 1000.0 MiB)"),
            "{g}"
        );
        // No image method ran: nothing to judge.
        let layer_only = Report::of(vec![outcome(Method::UrgentFirst, 6.0, 0)], None);
        assert_eq!(goals(&layer_only), "");
    }
}
