//! `teesfs sim`: placeholder until the simulator lands.

/// Arguments of `teesfs sim`.
#[derive(Debug, clap::Args)]
pub struct SimArgs {}

/// Runs `teesfs sim`.
pub fn run(_args: SimArgs) -> anyhow::Result<()> {
    anyhow::bail!("teesfs sim is not built yet")
}
