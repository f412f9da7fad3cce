//! A job's FUSE mount at a node, made in the background once the job is launched (the
//! daemon task never waits on it: the mount reports back with [`Input::Mounted`]); on a
//! node whose handshakes take turns on its CPU, after the links to its children are
//! settled, so the mount does not share the CPU with the handshakes the children's
//! `Start`s wait for. Once mounted, the job's arriving chunks also become the mount's
//! passthrough copies ([`crate::fs::ahead`]).

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use peertree::relay::{JobId, Schedule, Start};

use super::launch::Admission;
use super::plan::JobPlan;
use super::state::{Input, Live};
use super::task::Task;
use crate::Error;
use crate::fs::data::Data;
use crate::fs::fuse::PassthroughConfig;
use crate::fs::mount::{MountConfig, Mounted, adopt, mount};
use crate::job::JobCore;
use crate::keeper::Keeper;
use crate::source::ChunkSource;
use keeper::fuse::InitParams;

/// The longest a job's mount waits for the links to the node's children.
const MOUNT_AFTER_LINKS: std::time::Duration = std::time::Duration::from_secs(1);

/// What a mount serves: the index, its id and where its chunks come from.
pub(super) type Layer = (
    Arc<manifest::Index>,
    manifest::IndexId,
    Arc<dyn crate::source::ChunkSource>,
);

/// A live FUSE connection an earlier daemon made, and the kernel's `FUSE_INIT` parameters.
pub(super) type LiveFuse = (OwnedFd, InitParams);

/// How a job's mount is made.
pub(super) enum How {
    /// Mounted anew; with a keeper, the job is kept (its record written, its connection
    /// held) once it is: the host its `Start` came from and the `Start`.
    Fresh(Option<(String, Box<Start>)>),
    /// Served on the connection an earlier daemon made.
    Adopt(LiveFuse),
}

impl How {
    /// `adopt`'s connection, else a new mount, kept if `keeping`.
    pub(super) fn of(adopt: Option<LiveFuse>, keeping: bool, a: &Admission) -> How {
        match adopt {
            Some(l) => How::Adopt(l),
            None => How::Fresh(keeping.then(|| (a.from.clone(), Box::new(a.start.clone())))),
        }
    }
}

impl Task {
    /// Mounts a launched job's layer, if the plan mounts it: chunks from the shared store
    /// (`shared`), else the job's; the files `push` needs to start are copied ahead.
    pub(super) fn mount_job(
        &self,
        (job, serial): (JobId, u64),
        live: &Live,
        (index, id, shared, push): (
            Arc<manifest::Index>,
            manifest::IndexId,
            Option<seeder::DirStore>,
            Arc<Schedule>,
        ),
        plan: JobPlan,
        how: How,
    ) {
        let Some(mountpoint) = plan.mountpoint.clone() else {
            return;
        };
        let source: Arc<dyn crate::source::ChunkSource> = match shared {
            Some(s) => Arc::new(crate::source::StoreSource::new(s, &index)),
            None => Arc::new(crate::source::JobSource::new(
                live.core.clone(),
                self.store.clone(),
            )),
        };
        self.spawn_mount(
            job,
            serial,
            live,
            &mountpoint,
            (index, id, source),
            (plan, push),
            how,
        );
    }

    /// Mounts a job's layer at `mountpoint` in the background; the task hears of it with
    /// [`Input::Mounted`], whatever happens.
    #[allow(clippy::too_many_arguments)] // the job, its mount, and how: all of them needed
    fn spawn_mount(
        &self,
        job: JobId,
        serial: u64,
        live: &Live,
        mountpoint: &Path,
        (index, id, source): Layer,
        (plan, push): (JobPlan, Arc<Schedule>),
        how: How,
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
            ahead: Some(push),
            outlive: self.keeper.is_some(),
            ..MountConfig::default()
        };
        let (peers, me, core) = (self.peers.clone(), self.me.clone(), live.core.clone());
        let keeper = self.keeper.clone().map(|k| (k, self.cfg.state_dir.clone()));
        let mp = mountpoint.to_path_buf();
        let made = async move {
            peers.settled(&plan.mount_after, MOUNT_AFTER_LINKS).await;
            let at = mp.clone();
            let res = tokio::task::spawn_blocking(move || {
                let layer = ((*index).clone(), id, source);
                make_mount(job, layer, &at, &cfg, how, keeper)
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

/// The keeper and the state directory its records are in.
type Keeping = Option<(Arc<Keeper>, PathBuf)>;

/// Mounts the layer at `at` as `how` says (on the blocking pool). A new mount is kept when
/// there is a keeper; a connection that cannot be served is detached and dropped, never
/// left waiting.
fn make_mount(
    job: JobId,
    (index, id, source): (manifest::Index, manifest::IndexId, Arc<dyn ChunkSource>),
    at: &Path,
    cfg: &MountConfig,
    how: How,
    keeper: Keeping,
) -> Result<Mounted, Error> {
    match how {
        How::Adopt((fuse, init)) => {
            let m = adopt((index, id, source), at, cfg, fuse, &init);
            if m.is_err() {
                let _ = nix::mount::umount2(at, nix::mount::MntFlags::MNT_DETACH);
                if let Some((k, dir)) = &keeper {
                    super::kept::forget(dir, k, job);
                }
            }
            m
        }
        How::Fresh(kept) => {
            std::fs::create_dir_all(at).map_err(|source| Error::Mount {
                mountpoint: at.to_path_buf(),
                source,
            })?;
            let m = mount(index, id, source, at, cfg)?;
            if let (Some((k, dir)), Some((from, start))) = (keeper, kept) {
                keep(job, &m, (&k, &dir), from, *start);
            }
            Ok(m)
        }
    }
}

/// Writes the record of a job just mounted and has the keeper hold its connection, so the
/// job outlives this daemon. A failure costs only that: said, and the job runs on.
fn keep(job: JobId, m: &Mounted, (k, dir): (&Keeper, &Path), from: String, start: Start) {
    let Some(init) = m.init_params() else {
        return tracing::warn!(
            "the kernel's FUSE parameters are unknown: the job will not outlive this daemon"
        );
    };
    let record = super::kept::Record {
        job,
        from,
        mountpoint: m.mountpoint().to_path_buf(),
        init,
        start: Some(start),
    };
    let kept = super::kept::write(dir, &record)
        .map_err(|e| e.to_string())
        .and_then(|()| {
            k.hold(&job.to_string(), m.fuse_fd())
                .map_err(|e| e.to_string())
        });
    match kept {
        Ok(()) => tracing::debug!("kept: the job outlives this daemon"),
        Err(e) => {
            tracing::warn!(error = %e, "cannot keep the job: it will not outlive this daemon");
            let _ = std::fs::remove_file(super::kept::path(dir, job));
        }
    }
}

/// From now on the job's chunks are written into its mount's passthrough copies as they
/// arrive; those that arrived while the mount was made are read back from the store for
/// it, on the blocking pool.
fn make_copies_ahead(core: &Arc<JobCore>, data: &Arc<Data>) {
    let weak = Arc::downgrade(data);
    let early = core.on_arrival(Arc::new(move |chunk, arrived| {
        let data = weak.upgrade().filter(|d| d.awaits(chunk))?;
        data.arrived(chunk, arrived.plain()?.bytes())
    }));
    if early.is_empty() {
        return;
    }
    let (data, core) = (data.clone(), core.clone());
    tokio::task::spawn_blocking(move || {
        for (chunk, place) in data.arrived_earlier(&early) {
            core.keep_placed(chunk, &place);
        }
    });
}
