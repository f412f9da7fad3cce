//! A `Start` passed on before it is admitted. Checking the index (signature, decoding, the
//! schedule) takes a node's CPU for a while, and with a node of a small share of a core it
//! was most of each hop's time (BENCHMARKS.md, "the Start's way down the tree"): every
//! level of the tree waited for the one above to finish its checks. So a node passes its
//! children's `Start`s on ([`peertree::relay::forward_start`]) as soon as its own arrives,
//! and checks its own while they check theirs. Nothing trusts a `Start` for being passed
//! on: each child checks the index against its own keys.
//!
//! Until the job runs here, what its children say about it (their first answers, a refusal)
//! and whether one is unreachable is kept ([`EarlyInbox`]) and given to the job's task
//! before anything else; a node that then refuses the job drops it, and its children find
//! their parent gone as if it had died after passing the `Start` on (they re-attach).

use std::time::Instant;

use peertree::relay::{JobId, Msg, RelayMsg, Start, forward_start};

use super::state::JobState;
use super::task::Task;
use crate::job::JobCore;
use crate::net::StreamKind;

/// At most this many messages are kept for a job under admission; more are dropped (a
/// child's answers are a handful, and its heartbeat comes again).
const KEPT: usize = 1024;

/// What a job's children said while the job was under admission here.
#[derive(Default)]
pub(crate) struct EarlyInbox {
    messages: Vec<(String, RelayMsg)>,
    unreachable: Vec<String>,
}

impl EarlyInbox {
    /// Gives everything kept to the job's task, in the order it came.
    pub(crate) fn replay(self, core: &std::sync::Arc<JobCore>) {
        for host in &self.unreachable {
            core.on_unreachable(host);
        }
        for (from, msg) in self.messages {
            core.on_relay_msg(&from, msg);
        }
    }
}

impl Task {
    /// Passes the `Start`s of this node's planned children on at once, before this node's
    /// own is admitted; `None` when there is nothing to pass on (a leaf, a probe) or the
    /// `Start` is not meant for this node from `from`, which admission then refuses.
    /// The children's links are made afresh first where the job's `Prepare` did not
    /// (what the launch would do), so the `Start`s go on the links the job keeps.
    pub(super) fn pass_on_early(
        &self,
        job: JobId,
        from: &str,
        start: &Start,
        prepared: bool,
    ) -> Option<Instant> {
        let me = start.subtree.first().map(|n| n.host.as_str());
        let parent = start.ancestors.first().map(|n| n.host.as_str());
        if me != Some(self.cfg.host.as_str()) || parent != Some(from) {
            return None;
        }
        let children = match forward_start(start) {
            Ok(c) if !c.is_empty() => c,
            _ => return None,
        };
        if !prepared {
            let below = start.subtree.iter().skip(1).map(|n| n.host.as_str());
            self.fresh_links(below);
        }
        let at = Instant::now();
        for (child, s) in children {
            let frame = crate::peers::frame(job, &Msg::Start(Box::new(s)));
            (self.peers).send(&child.host, &child.addr, StreamKind::Control, frame);
        }
        tracing::debug!(%job, "children's starts passed on before admission");
        Some(at)
    }

    /// A job's message that found no running job: kept while the job is under admission
    /// after passing its `Start` on, given to the job if it runs by now, else dropped.
    pub(super) fn stray(&mut self, job: JobId, from: String, msg: RelayMsg) {
        match self.jobs.get_mut(&job) {
            Some(JobState::Starting(s)) if s.early.is_some() => {
                if s.inbox.messages.len() < KEPT {
                    s.inbox.messages.push((from, msg));
                }
            }
            Some(state) if state.live().is_some() => {
                if let Some(l) = state.live() {
                    l.core.on_relay_msg(&from, msg);
                }
            }
            _ => tracing::debug!(%job, peer = %from, "message for an unknown job"),
        }
    }

    /// `host` is unreachable: told to every running job, and kept for every job under
    /// admission that passed its `Start` on.
    pub(super) fn unreachable(&mut self, host: String) {
        for state in self.jobs.values_mut() {
            if let Some(l) = state.live() {
                l.core.on_unreachable(&host);
            } else if let JobState::Starting(s) = state
                && s.early.is_some()
            {
                s.inbox.unreachable.push(host.clone());
            }
        }
    }
}
