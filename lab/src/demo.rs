//! The demo as a library: push a layer urgent-first and start an application on every node
//! as soon as its mount appears (reads block on chunks not there yet), then report when
//! the urgent set, the application and the whole layer reached every node.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::check_interrupt;
use crate::cluster::{Lab, PushOptions, PushRun};
use crate::error::{LabError, Result};

/// What to start on each node: `program args...`, where `{mount}` in an argument or an
/// environment value is replaced by the node's mountpoint and `{host}` by its name.
#[derive(Debug, Clone)]
pub struct App {
    /// Program (on the host's file system, seen from the node).
    pub program: String,
    /// Arguments.
    pub args: Vec<String>,
    /// Environment.
    pub env: Vec<(String, String)>,
    /// A node's run counts only if its stdout contains this (after substitution).
    pub expect: String,
}

/// One node's application run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct AppRun {
    /// Host.
    pub host: String,
    /// Seconds from the push's start until the mount appeared and the app was started.
    pub started_s: f64,
    /// Seconds from the push's start until the app finished.
    pub done_s: f64,
    /// Whether it exited 0 with the expected output.
    pub ok: bool,
    /// Its stdout (first line).
    pub output: String,
}

/// The demo's outcome.
#[derive(Debug, Clone)]
pub struct DemoRun {
    /// The push (waited for the whole layer).
    pub push: PushRun,
    /// One entry per node.
    pub apps: Vec<AppRun>,
}

fn subst(s: &str, mount: &Path, host: &str) -> String {
    s.replace("{mount}", &mount.display().to_string())
        .replace("{host}", host)
}

struct Pending {
    host: String,
    pid: u32,
    started: Option<(f64, Child)>,
    done: Option<AppRun>,
}

/// Pushes `o` (whole layer, urgent set first) and starts `app` on every compute node as
/// soon as its mount of the job shows the `probe` path (relative to the layer root).
pub fn run(lab: &Lab, o: &PushOptions, app: &App, probe: &str) -> Result<DemoRun> {
    let hosts: Vec<String> = lab.layout().compute().map(|n| n.host.clone()).collect();
    let mut pending = Vec::new();
    for h in &hosts {
        let pid = lab.daemon_pid(h).ok_or_else(|| LabError::Daemon {
            host: h.clone(),
            reason: "not running".into(),
            log: lab.work().join(h).join("daemon.log"),
        })?;
        let jobs = lab.work().join(h).join("jobs");
        let _ = std::fs::create_dir_all(&jobs);
        pending.push(Pending {
            host: h.clone(),
            pid,
            started: None,
            done: None,
        });
    }
    let known: Vec<Vec<PathBuf>> = hosts
        .iter()
        .map(|h| list(&lab.work().join(h).join("jobs")))
        .collect();
    let mut o = o.clone();
    o.wait_all = true;
    let t0 = Instant::now();
    std::thread::scope(|scope| {
        let pusher = scope.spawn(|| lab.push(&o));
        let deadline = t0 + o.timeout;
        while pending.iter().any(|p| p.done.is_none()) {
            check_interrupt()?;
            if Instant::now() > deadline {
                return Err(LabError::Timeout(
                    "starting the application everywhere".into(),
                ));
            }
            if pusher.is_finished() && pending.iter().any(|p| p.started.is_none()) {
                // The push ended without every node mounting: stop waiting.
                break;
            }
            for (p, known) in pending.iter_mut().zip(&known) {
                step(lab, p, known, app, probe, t0)?;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let push = pusher
            .join()
            .map_err(|_| LabError::Shape("the push thread panicked".into()))??;
        let apps = pending
            .into_iter()
            .map(|p| {
                p.done.unwrap_or(AppRun {
                    host: p.host,
                    started_s: f64::NAN,
                    done_s: f64::NAN,
                    ok: false,
                    output: "never started: the job was not mounted".into(),
                })
            })
            .collect();
        Ok(DemoRun { push, apps })
    })
}

fn list(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_default()
}

fn step(
    lab: &Lab,
    p: &mut Pending,
    known: &[PathBuf],
    app: &App,
    probe: &str,
    t0: Instant,
) -> Result<()> {
    if p.done.is_some() {
        return Ok(());
    }
    match &mut p.started {
        None => {
            let jobs = lab.work().join(&p.host).join("jobs");
            let Some(mp) = list(&jobs).into_iter().find(|d| !known.contains(d)) else {
                return Ok(());
            };
            // Seen through the daemon's mount namespace: true once the FUSE mount is up.
            let through =
                PathBuf::from(format!("/proc/{}/root{}", p.pid, mp.display())).join(probe);
            if !through.exists() {
                return Ok(());
            }
            let mut cmd = lab.command_on(&p.host, &app.program)?;
            cmd.args(app.args.iter().map(|a| subst(a, &mp, &p.host)))
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::null());
            for (k, v) in &app.env {
                cmd.env(k, subst(v, &mp, &p.host));
            }
            let child = cmd.spawn().map_err(|source| LabError::Spawn {
                program: app.program.clone(),
                source,
            })?;
            p.started = Some((t0.elapsed().as_secs_f64(), child));
        }
        Some((started_s, child)) => {
            if let Ok(Some(_)) = child.try_wait() {
                let done_s = t0.elapsed().as_secs_f64();
                let mut out = String::new();
                if let Some(mut so) = child.stdout.take() {
                    use std::io::Read;
                    let _ = so.read_to_string(&mut out);
                }
                let status = child.wait().map(|s| s.success()).unwrap_or(false);
                let expect = subst(&app.expect, Path::new(""), &p.host);
                p.done = Some(AppRun {
                    host: p.host.clone(),
                    started_s: *started_s,
                    done_s,
                    ok: status && out.contains(&expect),
                    output: out.lines().next().unwrap_or("").to_string(),
                });
            }
        }
    }
    Ok(())
}

/// Runs `app` once more on every node of a finished push `job` (all data local by then),
/// all at once; returns each node's run with times relative to this call. This is the
/// launch cost that remains when the whole layer is copied before starting.
pub fn run_warm(lab: &Lab, job: &str, app: &App) -> Result<Vec<AppRun>> {
    let t0 = Instant::now();
    let mut children = Vec::new();
    for node in lab.layout().compute() {
        let mp = lab.mountpoint(&node.host, job);
        let mut cmd = lab.command_on(&node.host, &app.program)?;
        cmd.args(app.args.iter().map(|a| subst(a, &mp, &node.host)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        for (k, v) in &app.env {
            cmd.env(k, subst(v, &mp, &node.host));
        }
        let child = cmd.spawn().map_err(|source| LabError::Spawn {
            program: app.program.clone(),
            source,
        })?;
        children.push((node.host.clone(), child));
    }
    let mut runs = Vec::new();
    for (host, child) in children {
        check_interrupt()?;
        let out = child
            .wait_with_output()
            .map_err(LabError::io(&app.program))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let expect = subst(&app.expect, Path::new(""), &host);
        runs.push(AppRun {
            ok: out.status.success() && text.contains(&expect),
            output: text.lines().next().unwrap_or("").to_string(),
            host,
            started_s: 0.0,
            done_s: t0.elapsed().as_secs_f64(),
        });
    }
    Ok(runs)
}
