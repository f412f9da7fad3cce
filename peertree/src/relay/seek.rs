//! The relay's side of a chunk's search ([`super::sources`]): what it knows of who may hold
//! a chunk, the messages a search sends (`Want` or `Lost` to the parent, `Ask` to another
//! node), the answers it takes (`Lacks`, and another node's `Ask`), the origin reads it
//! hands the caller, and a search's end: every waiter served, or every waiter failed at
//! once ([`Event::Unobtainable`]; children hear `Lacks` and search on themselves).

use std::time::Instant;

use super::demand::Waiter;
use super::sources::{Known, Source, Step};
use super::{ChunkNo, Event, Msg, Phase, Relay, Transmit};
use crate::plan::NodeId;

/// How many holders [`Relay::known`] lists, the likeliest first: enough for a search's
/// [`super::MAX_PEER_ASKS`] asks with some of them silent.
const HOLDERS_LISTED: usize = 4 * super::MAX_PEER_ASKS;

impl Relay {
    /// This node can read an origin store (a shared file system the site names): a chunk
    /// no node gives is read there ([`Relay::poll_origin`], [`Relay::handle_origin`])
    /// before the search for it fails.
    pub fn set_origin(&mut self, origin: bool) {
        self.origin = origin;
    }

    /// The next chunk to read from the origin store. The caller reads it (never on the task
    /// that carries messages), checks it against its id, keeps it, and tells
    /// [`Relay::handle_origin`].
    pub fn poll_origin(&mut self) -> Option<ChunkNo> {
        self.origin_reads.pop_front()
    }

    /// The caller read `chunk` from the origin store: `got` if it was there, matched its
    /// id and was kept (then it counts as arrived: its waiters are served), else the
    /// search goes on without it.
    pub fn handle_origin(&mut self, now: Instant, chunk: ChunkNo, got: bool) {
        if chunk.index() >= self.schedule.len() {
            return;
        }
        if got {
            self.stats.from_origin += 1;
            self.took(now, chunk);
        } else {
            let k = self.known(chunk);
            if let Some(step) = self.sources.lacks(now, chunk, Source::Origin, &k) {
                self.take_step(now, chunk, step, false);
            }
        }
    }

    /// What this node knows now of who may give `chunk`: the parent unless it is the root
    /// of a finished job (the push is over), then the children it was sent to, the nodes
    /// below known to have completed its phase, the siblings, and the ancestors.
    pub(super) fn known(&self, chunk: ChunkNo) -> Known {
        let root = self.ancestors.last().map(|a| a.id);
        let serving = |n: NodeId| !self.finished || Some(n) != root;
        let parent = self.parent().filter(|&p| serving(p));
        let phase = if self.schedule.urgent_chunk(chunk) {
            Some(Phase::Urgent)
        } else if self.schedule.pushed_chunk(chunk) {
            Some(Phase::All)
        } else {
            None
        };
        let sent_to = self
            .children
            .iter()
            .filter(|(_, c)| c.sent.contains(chunk.index()))
            .map(|(&id, _)| id);
        let completed = self
            .done_log
            .iter()
            .filter(|&&(_, p)| phase.is_some_and(|ph| p == ph || p == Phase::All))
            .map(|&(n, _)| n);
        let kin = self.kin.iter().map(|k| k.id);
        let ancestors = self.ancestors.iter().map(|a| a.id).filter(|&a| serving(a));
        // A search asks a few of them at most; a node high in a large tree knows thousands
        // that completed, so the list stops well before.
        let mut holders: Vec<NodeId> = Vec::new();
        for n in sent_to.chain(completed).chain(kin).chain(ancestors) {
            if holders.len() >= HOLDERS_LISTED {
                break;
            }
            if n != self.me && Some(n) != parent && !holders.contains(&n) {
                holders.push(n);
            }
        }
        Known {
            parent,
            parent_unwatched: self.finished,
            holders,
            origin: self.origin,
            parent_coming: self.attaching.is_some() && !self.finished,
        }
    }

    /// `chunk` is needed and not held: its search starts, unless one runs.
    pub(super) fn seek(&mut self, now: Instant, chunk: ChunkNo) {
        if self.root.is_some() {
            return;
        }
        let again = self.sources.gave_up(now, chunk);
        let k = self.known(chunk);
        if let Some(step) = self.sources.seek(now, chunk, &k) {
            self.take_step(now, chunk, step, again);
        }
    }

    /// Carries out a search's step. `again`: the search failed lately and nothing changed.
    pub(super) fn take_step(&mut self, now: Instant, chunk: ChunkNo, step: Step, again: bool) {
        match step {
            Step::Ask(Source::Parent(_)) => self.send_want(chunk),
            Step::Ask(Source::Peer(to)) => self.control.push_back(Transmit::Control {
                to,
                msg: Msg::Ask { chunk },
            }),
            Step::Ask(Source::Origin) => self.origin_reads.push_back(chunk),
            Step::Wait => {}
            Step::GiveUp => self.give_up(now, chunk, again),
        }
    }

    /// No source is left for `chunk`: children waiting hear so (and search on
    /// themselves), readers here fail ([`Event::Unobtainable`]).
    fn give_up(&mut self, _now: Instant, chunk: ChunkNo, again: bool) {
        for w in self.wants.remove(&chunk).unwrap_or_default() {
            if let Waiter::Child(to) = w {
                self.control.push_back(Transmit::Control {
                    to,
                    msg: Msg::Lacks { chunk },
                });
            }
        }
        if !again {
            self.stats.unobtainable += 1;
        }
        self.events.push_back(Event::Unobtainable {
            chunk,
            tried: self.sources.tried(chunk).to_vec(),
            again,
        });
    }

    /// Moves on the searches in `chunks`, whose source was given up on.
    fn move_on(&mut self, now: Instant, chunks: Vec<ChunkNo>) {
        for chunk in chunks {
            let k = self.known(chunk);
            if let Some(step) = self.sources.moved_on(now, chunk, &k) {
                self.take_step(now, chunk, step, false);
            }
        }
    }

    /// `node` did not answer an ask in time, or cannot be reached: every search asking it
    /// moves on, and none asks it again until it is heard from.
    pub(super) fn source_silent(&mut self, now: Instant, node: NodeId) {
        let chunks = self.sources.silent(node);
        self.move_on(now, chunks);
    }

    /// The parent no longer serves (lost, or re-attaching): searches asking it move on.
    pub(super) fn sources_lost_parent(&mut self, now: Instant) {
        let chunks = self.sources.parent_gone();
        self.move_on(now, chunks);
    }

    /// No parent is coming any more (the root never answered): searches that waited for
    /// one move on, and fail if nothing else is left.
    pub(super) fn sources_no_parent_coming(&mut self, now: Instant) {
        let chunks = self.sources.waiting();
        self.move_on(now, chunks);
    }

    /// A new parent adopted this node: every search asks it (it may have what others
    /// lacked), and failed searches are no longer remembered.
    pub(super) fn sources_new_parent(&mut self, now: Instant) {
        self.sources.news();
        for chunk in self.sources.searching() {
            let k = self.known(chunk);
            if let Some(step) = self.sources.new_parent(now, chunk, &k) {
                self.take_step(now, chunk, step, false);
            }
        }
    }

    /// Asks whose deadline passed by `now`: their nodes count as silent, an origin read
    /// that hangs as failed.
    pub(super) fn sources_due(&mut self, now: Instant) {
        for (chunk, source) in self.sources.due(now) {
            match source.node() {
                Some(n) => self.source_silent(now, n),
                None => {
                    let k = self.known(chunk);
                    if let Some(step) = self.sources.lacks(now, chunk, Source::Origin, &k) {
                        self.take_step(now, chunk, step, false);
                    }
                }
            }
        }
    }

    /// Another node of the job asks for `chunk` ([`Msg::Ask`]): sent if held here (on the
    /// priority path), else it hears at once that this node lacks it. Never asked of
    /// anyone else: an `Ask` is answered from what is here.
    pub(super) fn on_ask(&mut self, now: Instant, from: NodeId, chunk: ChunkNo) {
        if chunk.index() >= self.schedule.len() {
            return;
        }
        if !self.has(chunk) {
            self.control.push_back(Transmit::Control {
                to: from,
                msg: Msg::Lacks { chunk },
            });
            return;
        }
        if let Some(c) = self.children.get_mut(&from) {
            c.sent.insert(chunk.index());
            c.bytes += u64::from(self.schedule.sizes[chunk.index()]);
            c.last_sent = now;
        }
        self.stats.demand_served += 1;
        self.control
            .push_back(Transmit::DemandChunk { to: from, chunk });
    }

    /// `from` lacks `chunk` ([`Msg::Lacks`]): the search asking it moves on.
    pub(super) fn on_lacks(&mut self, now: Instant, from: NodeId, chunk: ChunkNo) {
        if chunk.index() >= self.schedule.len() {
            return;
        }
        let k = self.known(chunk);
        let step = self
            .sources
            .lacks(now, chunk, Source::Parent(from), &k)
            .or_else(|| self.sources.lacks(now, chunk, Source::Peer(from), &k));
        if let Some(step) = step {
            self.take_step(now, chunk, step, false);
        }
    }
}
