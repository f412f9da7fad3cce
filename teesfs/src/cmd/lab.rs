//! `teesfs lab`: placeholder until the lab lands.

/// Arguments of `teesfs lab`.
#[derive(Debug, clap::Args)]
pub struct LabArgs {}

/// Runs `teesfs lab`.
pub fn run(_args: LabArgs) -> anyhow::Result<()> {
    anyhow::bail!("teesfs lab is not built yet")
}
