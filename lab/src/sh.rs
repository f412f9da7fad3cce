//! Running the system tools the lab is built with (`ip`, `tc`, `nsenter`) and turning their
//! failures into [`LabError`]s that quote the command and its stderr.

use std::process::{Command, Output, Stdio};

use crate::error::{LabError, Result};

/// Runs `program args...` and returns its stdout; a non-zero exit is an error.
pub fn run(program: &str, args: &[&str]) -> Result<String> {
    let out = output(Command::new(program).args(args), program)?;
    if !out.status.success() {
        return Err(LabError::Command {
            command: format!("{program} {}", args.join(" ")),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs a prepared command and collects its output.
pub fn output(cmd: &mut Command, program: &str) -> Result<Output> {
    cmd.stdin(Stdio::null())
        .output()
        .map_err(|source| LabError::Spawn {
            program: program.to_string(),
            source,
        })
}

/// `ip -n <netns> args...`.
pub fn ip_in(netns: &str, args: &[&str]) -> Result<String> {
    let mut all = vec!["-n", netns];
    all.extend_from_slice(args);
    run("ip", &all)
}

/// `tc -n <netns> args...`.
pub fn tc_in(netns: &str, args: &[&str]) -> Result<String> {
    let mut all = vec!["-n", netns];
    all.extend_from_slice(args);
    run("tc", &all)
}

/// Runs a shell snippet inside a network namespace (for `/proc/sys/net` knobs, which
/// belong to the namespace of whoever opens them).
pub fn sh_in(netns: &str, script: &str) -> Result<String> {
    let net = format!("--net=/run/netns/{netns}");
    run("nsenter", &[&net, "sh", "-c", script])
}

/// A command that runs `program` inside `netns` (network only; the host's mounts).
pub fn command_in(netns: &str, program: &str) -> Command {
    let mut c = crate::cgroup::nsenter(netns);
    c.arg(format!("--net=/run/netns/{netns}")).arg(program);
    c
}
