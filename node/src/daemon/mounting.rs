//! A job's FUSE mount at a node, made in the background once the job is launched (the
//! daemon task never waits on it: the mount reports back with [`Input::Mounted`]); on a
//! node whose handshakes take turns on its CPU, after the links to its children are
//! settled, so the mount does not share the CPU with the handshakes the children's
//! `Start`s wait for. Once mounted, the job's arriving chunks also become the mount's
//! passthrough copies ([`crate::fs::ahead`]).

use std::path::Path;
use std::sync::Arc;

use peertree::relay::JobId;

use super::plan::JobPlan;
use super::state::{Input, Live};
use super::task::Task;
use crate::Error;
use crate::fs::data::Data;
use crate::fs::fuse::PassthroughConfig;
use crate::fs::mount::{MountConfig, mount};
use crate::job::JobCore;

/// The longest a job's mount waits for the links to the node's children.
const MOUNT_AFTER_LINKS: std::time::Duration = std::time::Duration::from_secs(1);

/// What a mount serves: the index, its id and where its chunks come from.
pub(super) type Layer = (
    Arc<manifest::Index>,
    manifest::IndexId,
    Arc<dyn crate::source::ChunkSource>,
);

impl Task {
    /// Mounts a job's layer at `mountpoint` in the background; the task hears of it with
    /// [`Input::Mounted`], whatever happens.
    pub(super) fn spawn_mount(
        &self,
        job: JobId,
        serial: u64,
        live: &Live,
        mountpoint: &Path,
        (index, id, source): Layer,
        plan: JobPlan,
    ) {
        let cfg = MountConfig {
            cache_bytes: self.cfg.cache_bytes,
            passthrough: self.copies.clone().map(|copies| PassthroughConfig {
                copies,
                min_size: 64 << 10,
            }),
            root_owner: live.owner,
            read_timeout: self.cfg.read_timeout,
            recorder: live.record.clone(),
            read_waits: vec![live.read_waits.clone(), self.metrics.read_waits()],
            ahead: true,
            ..MountConfig::default()
        };
        let (peers, me, core) = (self.peers.clone(), self.me.clone(), live.core.clone());
        let mp = mountpoint.to_path_buf();
        let made = async move {
            peers.settled(&plan.mount_after, MOUNT_AFTER_LINKS).await;
            let at = mp.clone();
            let res = tokio::task::spawn_blocking(move || {
                std::fs::create_dir_all(&at).map_err(|source| Error::Mount {
                    mountpoint: at.clone(),
                    source,
                })?;
                mount((*index).clone(), id, source, &at, &cfg)
            })
            .await;
            let mounted = match res {
                Ok(Ok(m)) => {
                    tracing::info!(mountpoint = %mp.display(), "layer mounted");
                    make_copies_ahead(&core, m.data());
                    Some(m)
                }
                Ok(Err(e)) => {
                    tracing::error!(error = %e, "cannot mount the job's layer");
                    None
                }
                Err(e) => {
                    tracing::error!(error = %e, "mount task failed");
                    None
                }
            };
            let _ = me.send(Input::Mounted {
                job,
                serial,
                mounted,
            });
        };
        tokio::spawn(tracing::Instrument::instrument(
            made,
            tracing::info_span!("job", %job),
        ));
    }
}

/// From now on the job's chunks are written into its mount's passthrough copies as they
/// arrive; those that arrived while the mount was made are read back from the store for
/// it, on the blocking pool.
fn make_copies_ahead(core: &JobCore, data: &Arc<Data>) {
    let weak = Arc::downgrade(data);
    let early = core.on_arrival(Arc::new(move |chunk, plain| {
        if let Some(data) = weak.upgrade() {
            data.arrived(chunk, plain.bytes());
        }
    }));
    if early.is_empty() {
        return;
    }
    let data = data.clone();
    tokio::task::spawn_blocking(move || data.arrived_earlier(&early));
}
