//! `teesfs plan`: show the distribution tree a job would use.

/// Arguments of `teesfs plan`.
#[derive(Debug, clap::Args)]
pub struct PlanArgs {}

/// Runs `teesfs plan`.
pub fn run(_args: PlanArgs) -> anyhow::Result<()> {
    anyhow::bail!("teesfs plan is not built yet")
}
