//! A job Slurm requeued after a failed start learns why, in its own stderr.
//!
//! When the controller's prolog could not push a job's layer because of some of its nodes,
//! it drained them and wrote what happened into the job's `AdminComment` (`teesfs: a start of
//! this job failed on n05 (...); Slurm drained n05 and requeued the job`), and Slurm requeued
//! the job. When the job's batch script starts, its task reads that comment with `scontrol
//! show job` (before it enters its layer, as root) and prints it into the job's stderr,
//! where the user looks (Slurm 22.05 gives the batch step no restart count, so every start
//! asks once). Only a comment teesfs wrote is printed; nothing here can fail a task.

use std::process::{Command, Stdio};

/// The step id Slurm gives a batch script (`SLURM_BATCH_SCRIPT` in slurm.h).
pub const BATCH_STEP: u32 = 0xffff_fffb;

/// The job's `AdminComment` as `scontrol show job` prints it, if teesfs wrote it.
pub fn teesfs_comment(show_job: &str) -> Option<String> {
    show_job.lines().find_map(|l| {
        let at = l.find("AdminComment=")?;
        let value = l[at + "AdminComment=".len()..].trim_end();
        value.starts_with("teesfs:").then(|| value.to_string())
    })
}

/// Asks Slurm for job `job`'s teesfs comment (`slurm_conf`: the job's `$SLURM_CONF`, when
/// it has one); `None` when there is none or Slurm cannot be asked.
pub fn failed_start_note(job: u32, slurm_conf: Option<String>) -> Option<String> {
    let mut cmd = Command::new("scontrol");
    cmd.args(["show", "job", &job.to_string()])
        .stdin(Stdio::null())
        .stderr(Stdio::null());
    if let Some(conf) = slurm_conf.filter(|c| !c.is_empty()) {
        cmd.env("SLURM_CONF", conf);
    }
    let out = cmd.output().ok()?;
    teesfs_comment(&String::from_utf8_lossy(&out.stdout))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The comment teesfs wrote is found on its line of `scontrol show job`; any other is
    /// not the plugin's to print.
    #[test]
    fn only_a_comment_teesfs_wrote_is_taken() {
        let show = "JobId=7 JobName=job.sh\n   Comment=mine \n   AdminComment=teesfs: a start of \
                    this job failed on n05 (login -> n05: no daemon (connection refused)); Slurm \
                    drained n05 and requeued the job \n   OverSubscribe=OK\n";
        assert_eq!(
            teesfs_comment(show).as_deref(),
            Some(
                "teesfs: a start of this job failed on n05 (login -> n05: no daemon (connection \
                 refused)); Slurm drained n05 and requeued the job"
            )
        );
        assert_eq!(teesfs_comment("   AdminComment=site note\n"), None);
        assert_eq!(teesfs_comment("JobId=7\n"), None);
    }
}
