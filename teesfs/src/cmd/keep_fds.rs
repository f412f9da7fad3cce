//! `teesfs keep-fds` (hidden): the keeper of a daemon's FUSE connections, started by
//! `teesfs daemon --keep-jobs`; the work is [`teesfs_node::keeper::serve`].

use std::path::PathBuf;

/// Arguments of `teesfs keep-fds`.
#[derive(Debug, clap::Args)]
pub struct KeepFdsArgs {
    /// The daemon's state directory (the keeper listens at <DIR>/keeper.sock).
    #[arg(long, value_name = "DIR")]
    state_dir: PathBuf,
}

/// Runs the keeper until it holds nothing and no daemon is connected.
pub fn run(args: KeepFdsArgs) -> anyhow::Result<()> {
    teesfs_node::keeper::serve(&args.state_dir)?;
    Ok(())
}
