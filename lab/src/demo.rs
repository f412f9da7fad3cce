//! The demo as a library: push a layer urgent-first and start an application on every node
//! as soon as its mount appears (reads block on chunks not there yet), then report when
//! the urgent set, the application and the whole layer reached every node.
//!
//! [`python_demo`] is the README's main job: a Python application with real PyPI
//! dependencies (built by `lab/scripts/demo-layer.sh`), its summary and its HTML report.

use std::fmt::Write as _;
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

impl App {
    /// The command that runs this application once with the layer over "/" (as `teesfs
    /// record` sees it, `{mount}` being "/"), its environment given by `env`.
    pub fn command_over_root(&self, host: &str) -> Vec<String> {
        let root = Path::new("/");
        let mut cmd = vec!["/usr/bin/env".to_string()];
        cmd.extend(
            self.env
                .iter()
                .map(|(k, v)| format!("{k}={}", subst(v, root, host))),
        );
        cmd.push(self.program.clone());
        cmd.extend(self.args.iter().map(|a| subst(a, root, host)));
        cmd
    }
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
    /// CPU seconds it used, with the processes it waited for (`sh` and what it ran).
    pub cpu_s: f64,
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

/// How long the nodes may take to show the job's mount once the push has ended.
const MOUNT_GRACE: Duration = Duration::from_secs(10);

/// Pushes `o` (whole layer, urgent set first) and starts `app` on every compute node as
/// soon as its mount of the job shows the `probe` path (relative to the layer root).
pub fn run(lab: &Lab, o: &PushOptions, app: &App, probe: &str) -> Result<DemoRun> {
    let hosts: Vec<String> = lab.layout().compute().map(|n| n.host.clone()).collect();
    let mut pending = Vec::new();
    for h in &hosts {
        let pid = lab.running_daemon_pid(h)?;
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
    let mut push_ended = None;
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
                // A node mounts the job as its push ends, so for a small layer the push
                // can end before every mount shows: give them a while, then stop waiting.
                let ended = *push_ended.get_or_insert_with(Instant::now);
                if ended.elapsed() > MOUNT_GRACE {
                    break;
                }
            }
            for (p, known) in pending.iter_mut().zip(&known) {
                step(lab, p, known, app, probe, t0)?;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        if let Some(stop) = &o.stop {
            stop.store(true, std::sync::atomic::Ordering::SeqCst);
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
                    cpu_s: 0.0,
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
            let through = crate::proc::seen_by(p.pid, &mp).join(probe);
            if !through.exists() {
                return Ok(());
            }
            let child = spawn_app(lab, &p.host, app, &mp)?;
            p.started = Some((t0.elapsed().as_secs_f64(), child));
        }
        Some((started_s, child)) => {
            if crate::proc::has_exited(child) {
                let done_s = t0.elapsed().as_secs_f64();
                let mut out = String::new();
                if let Some(mut so) = child.stdout.take() {
                    use std::io::Read;
                    let _ = so.read_to_string(&mut out);
                }
                let (status, cpu_s) = crate::proc::wait_with_cpu(child)
                    .map(|(s, cpu)| (s.success(), cpu))
                    .unwrap_or((false, 0.0));
                let expect = subst(&app.expect, Path::new(""), &p.host);
                let ok = status && out.contains(&expect);
                p.done = Some(AppRun {
                    host: p.host.clone(),
                    started_s: *started_s,
                    done_s,
                    ok,
                    output: shown_output(lab, &p.host, &out, ok),
                    cpu_s,
                });
            }
        }
    }
    Ok(())
}

/// Where a node's application writes its standard error (read back when it fails).
fn app_stderr(lab: &Lab, host: &str) -> PathBuf {
    lab.work().join(host).join("app.stderr")
}

/// Starts `app` on `host` with `{mount}` at `mount`: standard output piped, standard error
/// to [`app_stderr`].
fn spawn_app(lab: &Lab, host: &str, app: &App, mount: &Path) -> Result<Child> {
    let err_path = app_stderr(lab, host);
    let err = std::fs::File::create(&err_path).map_err(LabError::io(&err_path))?;
    let mut cmd = lab.app_command(host, &app.program)?;
    cmd.args(app.args.iter().map(|a| subst(a, mount, host)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(err);
    for (k, v) in &app.env {
        cmd.env(k, subst(v, mount, host));
    }
    cmd.spawn().map_err(|source| LabError::Spawn {
        program: app.program.clone(),
        source,
    })
}

/// The line a report shows for one run: the first line of its output, or for a failed run
/// the last line of its standard error (where the reason is).
fn shown_output(lab: &Lab, host: &str, stdout: &str, ok: bool) -> String {
    let first = stdout.lines().next().unwrap_or("").to_string();
    if ok {
        return first;
    }
    let err = std::fs::read_to_string(app_stderr(lab, host)).unwrap_or_default();
    match err.lines().rev().find(|l| !l.trim().is_empty()) {
        Some(last) => last.chars().take(300).collect(),
        None => first,
    }
}

/// Runs `app` once more on every node of a finished push `job` (all data local by then),
/// all at once; returns each node's run with times relative to this call. This is the
/// launch cost that remains when the whole layer is copied before starting.
pub fn run_warm(lab: &Lab, job: &str, app: &App) -> Result<Vec<AppRun>> {
    start_everywhere(lab, app, |host| lab.mountpoint(host, job))
}

/// Starts `app` on every compute node at once, with `{mount}` the directory `mount_of`
/// gives for the node, and waits for each; times are relative to this call.
pub fn start_everywhere(
    lab: &Lab,
    app: &App,
    mount_of: impl Fn(&str) -> PathBuf,
) -> Result<Vec<AppRun>> {
    let t0 = Instant::now();
    let mut children = Vec::new();
    for node in lab.layout().compute() {
        let child = spawn_app(lab, &node.host, app, &mount_of(&node.host))?;
        children.push((node.host.clone(), child));
    }
    let mut runs = Vec::new();
    for (host, mut child) in children {
        check_interrupt()?;
        let mut out = Vec::new();
        if let Some(mut so) = child.stdout.take() {
            use std::io::Read;
            so.read_to_end(&mut out)
                .map_err(LabError::io(&app.program))?;
        }
        let text = String::from_utf8_lossy(&out);
        let (status, cpu_s) =
            crate::proc::wait_with_cpu(&mut child).map_err(LabError::io(&app.program))?;
        let expect = subst(&app.expect, Path::new(""), &host);
        let ok = status.success() && text.contains(&expect);
        runs.push(AppRun {
            ok,
            output: shown_output(lab, &host, &text, ok),
            host,
            started_s: 0.0,
            done_s: t0.elapsed().as_secs_f64(),
            cpu_s,
        });
    }
    Ok(runs)
}

/// Builds the demo's layer: a Python application with real PyPI dependencies.
const LAYER_SCRIPT: &str = include_str!("../scripts/demo-layer.sh");

/// The demo's layer, built into a directory.
#[derive(Debug, Clone)]
pub struct PythonLayer {
    /// The layer's root.
    pub layer: PathBuf,
    /// The interpreter's absolute path (the nodes run it from the host's file system).
    pub python: String,
}

/// Builds the demo layer in `dir` with `python` (needs pip and access to PyPI).
pub fn build_python_layer(dir: &Path, python: &str) -> Result<PythonLayer> {
    let status = std::process::Command::new("bash")
        .arg("-c")
        .arg(LAYER_SCRIPT)
        .arg("demo-layer.sh")
        .arg(dir)
        .env("PYTHON", python)
        .status()
        .map_err(|source| LabError::Spawn {
            program: "bash".into(),
            source,
        })?;
    if !status.success() {
        return Err(LabError::Command {
            command: "demo-layer.sh (building the demo layer)".into(),
            stderr: "it failed; it needs pip and access to PyPI".into(),
        });
    }
    let out = std::process::Command::new(python)
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .map_err(|source| LabError::Spawn {
            program: python.into(),
            source,
        })?;
    Ok(PythonLayer {
        layer: dir.join("layer"),
        python: String::from_utf8_lossy(&out.stdout).trim().to_string(),
    })
}

/// The layer paths of an urgent list (one per line, as `teesfs record` writes it; `#`
/// comments and `!absent` lines skipped), relative to the layer's root.
pub fn urgent_paths(list: &str) -> impl Iterator<Item = &str> {
    list.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with('!'))
        .map(|l| l.trim_start_matches('/'))
}

/// An urgent list as globs that each match only their path.
pub fn urgent_globs(list: &str) -> Vec<String> {
    urgent_paths(list).map(glob_escape).collect()
}

/// A shell command started on every node with `TEESFS_MOUNT` set to the node's mount of
/// the layer; it counts as started when it exits 0.
pub fn shell_app(command: &str) -> App {
    App {
        program: "/bin/sh".into(),
        args: vec!["-c".into(), command.into()],
        env: vec![("TEESFS_MOUNT".into(), "{mount}".into())],
        expect: String::new(),
    }
}

/// A path as a glob that matches only itself.
fn glob_escape(p: &str) -> String {
    p.chars()
        .map(|c| match c {
            '*' | '?' | '[' | ']' | '{' | '}' => format!("[{c}]"),
            c => c.to_string(),
        })
        .collect()
}

/// The demo application: imports the layer's modules and prints `app ok on HOST`.
pub fn python_app(python: &str) -> App {
    App {
        program: python.into(),
        args: vec![
            "-c".into(),
            "import sys, runpy; sys.path.insert(0, '{mount}'); sys.argv = ['app', '{host}']; \
             runpy.run_module('app.main', run_name='__main__')"
                .into(),
        ],
        env: vec![
            ("PYTHONDONTWRITEBYTECODE".into(), "1".into()),
            ("PYTHONNOUSERSITE".into(), "1".into()),
        ],
        expect: "app ok on {host}".into(),
    }
}

pub(crate) fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The launch's HTML report: the summary, the picture and a row per node.
pub fn html(title: &str, summary: &str, picture: &str, apps: &[AppRun]) -> String {
    let mut rows = String::new();
    for x in apps {
        let _ = writeln!(
            rows,
            "<tr><td>{}</td><td>{:.2}</td><td>{:.2}</td><td>{}</td><td><code>{}</code></td></tr>",
            esc(&x.host),
            x.started_s,
            x.done_s,
            if x.ok { "ok" } else { "FAILED" },
            esc(&x.output)
        );
    }
    format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>{title}</title>\
         <style>body{{font-family:sans-serif;margin:2em}}td,th{{padding:2px 10px;text-align:left}}</style>\
         </head><body><h1>{title}</h1><pre>{}</pre>{picture}<h2>Application on each node</h2>\
         <table><tr><th>host</th><th>mounted, started (s)</th><th>finished (s)</th><th>status</th>\
         <th>output</th></tr>{rows}</table></body></html>\n",
        esc(summary),
        title = esc(title)
    )
}

/// An urgent-first launch's summary for a person: when the urgent set, the application and
/// the whole layer reached every node, with the uplink bytes and the link bound.
pub fn summary(title: &str, lab: &Lab, layer: &Path, run: &DemoRun) -> String {
    let r = &run.push.report;
    let layout = lab.layout();
    let ok = run.apps.iter().filter(|x| x.ok).count();
    let app_all = run.apps.iter().map(|x| x.done_s).fold(0.0, f64::max);
    let urgent_s = r.urgent_complete_s.unwrap_or(f64::NAN);
    let all_s = r.all_complete_s.unwrap_or(f64::NAN);
    let min_up = r.total_bytes * layout.spec.groups as u64;
    let mib = |b: u64| format!("{:.1} MiB", b as f64 / f64::from(1u32 << 20));
    let mut text = String::new();
    let _ = writeln!(
        text,
        "{title}: {} nodes in {} groups, layer {} ({} stored), urgent set {}",
        r.nodes,
        layout.spec.groups,
        layer.display(),
        mib(r.total_bytes),
        mib(r.urgent_bytes)
    );
    let _ = writeln!(text, "  {}", lab.model_text());
    let _ = writeln!(text, "  urgent set on every node:       {urgent_s:6.2} s");
    let _ = writeln!(
        text,
        "  application started everywhere: {app_all:6.2} s  ({ok}/{} nodes ran it from their mount)",
        run.apps.len()
    );
    let _ = writeln!(text, "  whole layer on every node:      {all_s:6.2} s");
    let _ = writeln!(
        text,
        "  group uplinks carried {} in; minimum {} (each group once): {:.2}x",
        mib(run.push.uplink_in()),
        mib(min_up),
        run.push.uplink_in() as f64 / min_up as f64
    );
    let _ = writeln!(
        text,
        "  link lower bound for the whole layer: {:.2} s; cpu {:.1} s",
        layout.lower_bound_s(r.total_bytes),
        run.push.cpu_s
    );
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_urgent_list_becomes_globs_that_match_only_their_paths() {
        let list = "# recorded by teesfs record\n/app/main.py\n!libmissing.so\n\nlib/a[1]*.py\n";
        assert_eq!(
            urgent_globs(list),
            vec!["app/main.py".to_string(), "lib/a[[]1[]][*].py".to_string()]
        );
    }

    /// The demo records its urgent set by running its application once with the layer
    /// over "/": the same program, arguments and environment, the mount being "/".
    #[test]
    fn the_application_over_root_is_the_nodes_command_with_the_layer_at_root() {
        let app = python_app("/usr/bin/python3");
        let cmd = app.command_over_root("login");
        assert_eq!(
            cmd[..3],
            [
                "/usr/bin/env",
                "PYTHONDONTWRITEBYTECODE=1",
                "PYTHONNOUSERSITE=1"
            ]
        );
        assert_eq!(cmd[3..5], ["/usr/bin/python3", "-c"]);
        assert!(
            cmd[5].contains("sys.path.insert(0, '/')") && cmd[5].contains("['app', 'login']"),
            "{}",
            cmd[5]
        );
        assert!(!cmd.iter().any(|a| a.contains('{')), "{cmd:?}");
    }
}
