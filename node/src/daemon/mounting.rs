//! A job's FUSE mount at a node, made in the background once the job is accepted; on a
//! node whose handshakes take turns on its CPU, after the links to its children are
//! settled, so the mount does not share the CPU with the handshakes the children's
//! `Start`s wait for. Once mounted, the job's arriving chunks also become the mount's
//! passthrough copies ([`crate::fs::ahead`]).

use std::sync::Arc;

use super::{Daemon, MOUNT_AFTER_LINKS, NodeJob, lock};
use crate::Error;
use crate::fs::data::Data;
use crate::fs::fuse::PassthroughConfig;
use crate::fs::mount::{MountConfig, mount};

impl Daemon {
    /// Mounts a job's layer in the background; the job holds the mount once it is made.
    pub(super) fn spawn_mount(
        &self,
        nj: Arc<NodeJob>,
        index: manifest::Index,
        (id, source): (manifest::IndexId, Arc<dyn crate::source::ChunkSource>),
        owner: Option<u32>,
        after: Vec<(String, String)>,
    ) {
        let cfg = MountConfig {
            cache_bytes: self.cfg.cache_bytes,
            passthrough: self.copies.clone().map(|copies| PassthroughConfig {
                copies,
                min_size: 64 << 10,
            }),
            root_owner: owner,
            read_timeout: self.cfg.read_timeout,
            recorder: nj.record.clone(),
            read_waits: vec![nj.read_waits.clone(), self.metrics.read_waits()],
            ahead: true,
            ..MountConfig::default()
        };
        let peers = self.peers.clone();
        self.rt.spawn(async move {
            peers.settled(&after, MOUNT_AFTER_LINKS).await;
            let mountpoint = nj.mountpoint.clone();
            let mp = mountpoint.clone();
            let res = tokio::task::spawn_blocking(move || {
                std::fs::create_dir_all(&mp).map_err(|source| Error::Mount {
                    mountpoint: mp.clone(),
                    source,
                })?;
                mount(index, id, source, &mp, &cfg)
            })
            .await;
            match res {
                Ok(Ok(m)) => {
                    tracing::info!(mountpoint = %mountpoint.display(), "layer mounted");
                    make_copies_ahead(&nj, m.data());
                    *lock(&nj.mounted) = Some(m);
                }
                Ok(Err(e)) => tracing::error!(error = %e, "cannot mount the job's layer"),
                Err(e) => tracing::error!(error = %e, "mount task failed"),
            }
        });
    }
}

/// From now on the job's chunks are written into its mount's passthrough copies as they
/// arrive; those that arrived while the mount was made are read back from the store for
/// it, on the blocking pool.
fn make_copies_ahead(nj: &NodeJob, data: &Arc<Data>) {
    let weak = Arc::downgrade(data);
    let early = nj.core.on_arrival(Arc::new(move |chunk, plain| {
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
