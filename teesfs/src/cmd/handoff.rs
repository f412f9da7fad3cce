//! `teesfs handoff`: the Slurm controller's side of the seeder. The prolog (and the
//! EpilogSlurmctld) hand a job to `teesfs seeder` on a login or data-mover node: the job's
//! nodes, owner and spec (its text as the SPANK plugin captured it at submit) in a munge
//! credential, and relay what the seeder's push prints, exiting with its status. The
//! controller reads no user file, no store and no key.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

use anyhow::Context;
use teesfs_node::handoff::{Kind, MAX_LINE, MAX_SPEC, Reply, Request, SlurmJobId, VERSION};

/// What the controller asks of the seeder.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum What {
    /// Push the job's layer (PrologSlurmctld).
    Prefetch,
    /// Learn the job's urgent set (EpilogSlurmctld).
    Learn,
}

/// Arguments of `teesfs handoff`.
#[derive(Debug, clap::Args)]
#[command(after_long_help = "\
Examples:
  teesfs handoff --configured          # exit 0 (and print it) when a seeder is configured
  # the Slurm prolog (slurmctld) does, with the plugin's $SPANK_TEESFS_SPEC_TEXT:
  teesfs handoff --job \"$SLURM_JOB_ID\" --nodes \"$SLURM_JOB_NODELIST\" \\
      --uid \"$SLURM_JOB_UID\" --spec \"$SPANK_TEESFS_SPEC\"

Runs as the controller's SlurmUser, which the seeder's [seeder] allow must name; munge on
both hosts must share the cluster's key. Exits with the push's own status.")]
pub struct HandoffArgs {
    /// The seeder, `host[:port]` (default: $TEESFS_SEEDER, else the site's [seeder] host;
    /// port 7412).
    #[arg(long, env = "TEESFS_SEEDER", value_name = "HOST[:PORT]")]
    seeder: Option<String>,
    /// Only say whether a seeder is configured: print it and exit 0, else exit 1.
    #[arg(long)]
    configured: bool,
    /// What to ask.
    #[arg(long, value_enum, default_value = "prefetch")]
    kind: What,
    /// The Slurm job id ($SLURM_JOB_ID).
    #[arg(long, value_name = "ID", required_unless_present = "configured")]
    job: Option<u32>,
    /// The job's nodes ($SLURM_JOB_NODELIST).
    #[arg(long, value_name = "EXPR", required_unless_present = "configured")]
    nodes: Option<String>,
    /// The job's owner ($SLURM_JOB_UID).
    #[arg(long, value_name = "UID", required_unless_present = "configured")]
    uid: Option<u32>,
    /// The spec's absolute path as given at submit ($SPANK_TEESFS_SPEC); relative paths
    /// in it start at its directory. Not read here.
    #[arg(long, value_name = "FILE", required_unless_present = "configured")]
    spec: Option<PathBuf>,
    /// The spec's content in hex, as the SPANK plugin captured it at submit. Without it
    /// (a job naming its spec in its comment) the seeder reads the file.
    #[arg(
        long,
        env = "SPANK_TEESFS_SPEC_TEXT",
        hide_env_values = true,
        value_name = "HEX"
    )]
    spec_text: Option<String>,
    /// munged's socket (default: the site's [seeder] munge_socket, else munge's own).
    #[arg(long, value_name = "PATH")]
    munge_socket: Option<PathBuf>,
    /// When the push fails because of some of its nodes, write those to FILE, one a line:
    /// the host, a tab and the reason to drain it with (what `teesfs prefetch
    /// --drain-list` writes on the seeder). The prolog drains them.
    #[arg(long, value_name = "FILE")]
    drain_list: Option<PathBuf>,
}

/// Runs `teesfs handoff`; its exit code is the seeder's push's.
pub fn run(args: HandoffArgs) -> anyhow::Result<ExitCode> {
    let site = teesfs_node::site::load_lenient(&teesfs_node::site::main_path())?.config;
    let seeder = args
        .seeder
        .clone()
        .filter(|s| !s.is_empty())
        .map(|s| {
            let one = manifest::site::SeederSection {
                host: Some(s),
                ..Default::default()
            };
            one.address().unwrap_or_default()
        })
        .or_else(|| site.seeder.address());
    if args.configured {
        return Ok(match seeder {
            Some(s) => {
                outln!("{s}");
                ExitCode::SUCCESS
            }
            None => ExitCode::FAILURE,
        });
    }
    let seeder = seeder.context(
        "no seeder: set [seeder] host in the site's teesfs.toml (or TEESFS_SEEDER in \
         /etc/teesfs/slurm.env), or leave the prolog to push from the controller",
    )?;
    let req = request(&args)?;
    let socket = args.munge_socket.clone().or(site.seeder.munge_socket);
    let credential = munge(&req.encode(), socket.as_deref())?;
    let conn = connect(&seeder)?;
    let mut drains = Vec::new();
    let code = relay(conn, &credential, &seeder, req.job, &mut drains);
    if let Some(path) = &args.drain_list {
        let text: String = drains.iter().map(|(h, r)| format!("{h}\t{r}\n")).collect();
        std::fs::write(path, text)
            .with_context(|| format!("writing the drain list {}", path.display()))?;
    }
    code
}

/// The request the arguments describe, checked.
fn request(args: &HandoffArgs) -> anyhow::Result<Request> {
    let spec_path = args.spec.clone().context("--spec")?;
    let spec_text = match args.spec_text.as_deref().filter(|t| !t.is_empty()) {
        Some(h) => {
            let bytes = hex::decode(h.trim()).context(
                "$SPANK_TEESFS_SPEC_TEXT is not hex: the SPANK plugin sets it; is the plugin of \
                 this teesfs release loaded where the job was submitted?",
            )?;
            if bytes.len() > MAX_SPEC {
                anyhow::bail!(
                    "the job spec {} is {} bytes; a job spec may be at most {MAX_SPEC} bytes",
                    spec_path.display(),
                    bytes.len()
                );
            }
            Some(String::from_utf8(bytes).with_context(|| {
                format!("the job spec {} is not UTF-8 text", spec_path.display())
            })?)
        }
        None => None,
    };
    let req = Request {
        version: VERSION,
        kind: match args.kind {
            What::Prefetch => Kind::Prefetch,
            What::Learn => Kind::Learn,
        },
        job: SlurmJobId(args.job.context("--job")?),
        nodes: args.nodes.clone().context("--nodes")?,
        uid: args.uid.context("--uid")?,
        spec_path,
        spec_text,
    };
    req.check()?;
    Ok(req)
}

/// A munge credential carrying `payload`, made as this process's user.
fn munge(payload: &[u8], socket: Option<&std::path::Path>) -> anyhow::Result<String> {
    let mut cmd = Command::new("munge");
    if let Some(s) = socket {
        cmd.arg(format!("--socket={}", s.display()));
    }
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("running munge (install munge on the controller; Slurm needs it too)")?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(payload).context("writing to munge")?;
    }
    let out = child.wait_with_output().context("running munge")?;
    if !out.status.success() {
        anyhow::bail!(
            "munge could not make a credential: {} (is munged running? [seeder] munge_socket \
             names its socket)",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// A connection to the seeder at `addr` (`host:port`).
fn connect(addr: &str) -> anyhow::Result<TcpStream> {
    let hint = "is `teesfs seeder` (teesfs-seeder.service) running there, and does [seeder] \
                host in teesfs.toml name it?";
    let addrs: Vec<_> = addr
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve the seeder {addr}: {hint}"))?
        .collect();
    let mut last = None;
    for a in &addrs {
        match TcpStream::connect_timeout(a, Duration::from_secs(10)) {
            Ok(c) => return Ok(c),
            Err(e) => last = Some(e),
        }
    }
    match last {
        Some(e) => Err(e).with_context(|| format!("cannot reach the seeder at {addr}: {hint}")),
        None => anyhow::bail!("the seeder {addr} has no address: {hint}"),
    }
}

/// Sends `credential`, prints the seeder's lines and returns the push's status.
fn relay(
    mut conn: TcpStream,
    credential: &str,
    seeder: &str,
    job: SlurmJobId,
    drains: &mut Vec<(String, String)>,
) -> anyhow::Result<ExitCode> {
    conn.write_all(format!("{credential}\n").as_bytes())
        .with_context(|| format!("sending job {job} to the seeder at {seeder}"))?;
    let reader = BufReader::new(conn);
    for line in reader.split(b'\n') {
        let line = line.with_context(|| format!("reading from the seeder at {seeder}"))?;
        if line.len() > MAX_LINE {
            continue;
        }
        match Reply::decode(&String::from_utf8_lossy(&line))? {
            Reply::Line(l) => outln!("{l}"),
            Reply::Drain { host, reason } => {
                outln!("the push failed because of {host}: {reason}");
                drains.push((host, reason));
            }
            Reply::Exit(code) => return Ok(ExitCode::from(u8::try_from(code).unwrap_or(1))),
            Reply::Refused(why) => {
                anyhow::bail!("the seeder at {seeder} refused job {job}: {why}")
            }
        }
    }
    anyhow::bail!(
        "the seeder at {seeder} closed the connection before job {job}'s push ended; see its \
         log (journalctl -u teesfs-seeder)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(text: Option<String>) -> HandoffArgs {
        HandoffArgs {
            seeder: Some("login1".into()),
            configured: false,
            kind: What::Prefetch,
            job: Some(42),
            nodes: Some("cn[1-4]".into()),
            uid: Some(1001),
            spec: Some("/home/alice/manifest.toml".into()),
            spec_text: text,
            munge_socket: None,
            drain_list: None,
        }
    }

    /// The plugin's hex is the spec's text; one over 32 KiB, or not hex, is refused naming
    /// the file or the variable.
    #[test]
    fn the_spec_text_from_the_plugin_is_decoded_and_bounded() {
        let r = request(&args(Some(hex::encode("[layer]\nindex = \"ab\"\n")))).expect("ok");
        assert_eq!(r.spec_text.as_deref(), Some("[layer]\nindex = \"ab\"\n"));
        assert_eq!(r.job, SlurmJobId(42));
        assert!(request(&args(None)).expect("ok").spec_text.is_none());
        let big = hex::encode(vec![b'#'; MAX_SPEC + 1]);
        let e = request(&args(Some(big))).expect_err("too big").to_string();
        assert!(
            e.contains("/home/alice/manifest.toml") && e.contains("32768"),
            "{e}"
        );
        let e = request(&args(Some("zz".into())))
            .expect_err("not hex")
            .to_string();
        assert!(e.contains("SPANK_TEESFS_SPEC_TEXT"), "{e}");
    }
}
