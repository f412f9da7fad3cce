//! Borrowing idle proxies outside a job, as Slurm sees them (`--borrow-idle`): which nodes
//! are idle at push time (`sinfo`), and holding the borrowed ones drained until the push
//! releases them (`scontrol update ... State=DRAIN`, then `State=RESUME`), so that no job
//! starts on a node that is relaying another job's layer.
//!
//! Slurm commands call the controller. A prolog must not (slurmctld waits for its prologs),
//! so inside one this is refused, and the prolog's push borrows nothing.

use std::collections::HashSet;
use std::process::Command;

use anyhow::{Context, bail};

/// The reason a held node carries in Slurm (`scontrol show node`), naming the push.
pub fn reason(job: &str) -> String {
    format!("teesfs push {job}: relaying as a borrowed proxy")
}

/// Runs a Slurm client command; its standard output.
fn slurm(program: &str, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new(program).args(args).output().with_context(|| {
        format!(
            "--borrow-idle runs `{program}` (Debian's slurm-client); install it, or name the \
             idle nodes yourself with --idle"
        )
    })?;
    if !out.status.success() {
        bail!(
            "`{program} {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Refuses to call Slurm from a Slurm prolog or epilog.
fn not_in_a_slurm_script() -> anyhow::Result<()> {
    if let Ok(ctx) = std::env::var("SLURM_SCRIPT_CONTEXT")
        && !ctx.is_empty()
    {
        bail!(
            "--borrow-idle calls Slurm (sinfo, scontrol), which a Slurm script ({ctx}) must not \
             do; leave it out there (the push then borrows no proxy outside the job)"
        );
    }
    Ok(())
}

/// The nodes Slurm reports idle now (`sinfo -h -N -t idle -o %N`).
pub fn idle_nodes() -> anyhow::Result<HashSet<String>> {
    not_in_a_slurm_script()?;
    Ok(slurm("sinfo", &["-h", "-N", "-t", "idle", "-o", "%N"])?
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect())
}

/// Borrowed nodes held drained; dropping it resumes them.
pub struct Hold {
    nodes: Vec<String>,
}

impl Hold {
    /// Drains `nodes` with [`reason`]`(job)`. Returns the hold of those that were still
    /// idle (Slurm's `drained`) and the names of those a job took in between (`draining`,
    /// `mixed`, `allocated`): those are resumed at once and must not be borrowed.
    pub fn take(nodes: &[String], job: &str) -> anyhow::Result<(Hold, Vec<String>)> {
        not_in_a_slurm_script()?;
        if nodes.is_empty() {
            return Ok((Hold { nodes: Vec::new() }, Vec::new()));
        }
        let list = nodes.join(",");
        slurm(
            "scontrol",
            &[
                "update",
                &format!("NodeName={list}"),
                "State=DRAIN",
                &format!("Reason={}", reason(job)),
            ],
        )?;
        let mut held = Hold {
            nodes: nodes.to_vec(),
        };
        let states = slurm("sinfo", &["-h", "-N", "-n", &list, "-o", "%N %T"])?;
        let mut lost = Vec::new();
        for line in states.lines() {
            let mut f = line.split_whitespace();
            if let (Some(node), Some(state)) = (f.next(), f.next())
                && !state.starts_with("drained")
            {
                lost.push(node.to_string());
            }
        }
        if !lost.is_empty() {
            resume(&lost);
            held.nodes.retain(|n| !lost.contains(n));
        }
        Ok((held, lost))
    }

    /// The nodes held.
    pub fn nodes(&self) -> &[String] {
        &self.nodes
    }
}

fn resume(nodes: &[String]) {
    if nodes.is_empty() {
        return;
    }
    let list = nodes.join(",");
    if let Err(e) = slurm(
        "scontrol",
        &["update", &format!("NodeName={list}"), "State=RESUME"],
    ) {
        errln!(
            "teesfs: could not resume the borrowed nodes {list}: {e:#}; resume them with \
             `scontrol update NodeName={list} State=RESUME`"
        );
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        resume(&self.nodes);
    }
}
