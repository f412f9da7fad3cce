//! The `Prepare` wave at a node: a job's connections to this node's children (and its
//! grandchildren's to theirs) are opened while the job's `Start` is still on its way. Only
//! connections and small messages come of it; the job itself starts with a verified
//! `Start`.

use peertree::relay::{JobId, Msg, Prepare};

use super::task::Task;
use crate::net::StreamKind;
use crate::peers::Peers;

impl Task {
    /// A `Prepare` for a job this node has not joined yet: pass one on to each planned
    /// child now, which opens the connections to them while the `Start` (with its index)
    /// is still arriving. Only connections and small messages come of it: the job itself
    /// starts with a verified `Start`, as ever.
    pub(super) fn prepare(&mut self, from_host: &str, job: JobId, prepare: Prepare) {
        if self.jobs.contains_key(&job) {
            return;
        }
        if prepare.subtree.first().map(|n| n.host.as_str()) != Some(self.cfg.host.as_str()) {
            tracing::warn!(%job, parent = %from_host, "ignoring a prepare meant for another node");
            return;
        }
        if !self.note_prepared(job) {
            return;
        }
        let forward = match peertree::relay::forward_prepare(&prepare) {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(%job, parent = %from_host, "ignoring a prepare: {e}");
                return;
            }
        };
        tracing::debug!(%job, parent = %from_host, children = forward.len(), "prepare");
        self.fresh_links(forward.iter().map(|(child, _)| child.host.as_str()));
        let me = prepare
            .subtree
            .first()
            .map(|n| n.id)
            .filter(|_| Peers::handshakes_take_turns(forward.len()));
        for (to, p) in forward {
            let frame = crate::peers::frame(job, &Msg::Prepare(p));
            // A grandchild's waits for the link to its parent, as at the root.
            let parent = me
                .filter(|&me| to.parent != me)
                .and_then(|_| prepare.subtree.iter().find(|n| n.id == to.parent));
            match parent {
                Some(pa) => {
                    self.peers
                        .send_after((&pa.host, &pa.addr), &to.host, &to.addr, frame);
                }
                None => self
                    .peers
                    .send(&to.host, &to.addr, StreamKind::Control, frame),
            }
        }
    }
}
