//! Where a chunk this node needs comes from when it does not hold it: its parent, then the
//! other nodes of the job that may hold it (those known to have completed its phase, the
//! children it was sent to, the siblings, the ancestors), then the origin store (a shared
//! file system the node can read, when the site names one), one after another, each
//! asked once per search. Only when no source is left does the search fail, and then it
//! fails at once for every waiter.
//!
//! Pure: [`Sources`] decides, the relay sends what it decided and reports back (the
//! chunk, a "lacks" answer, an unreachable peer, the time). It never waits for something
//! the relay does not watch: an ask that nothing else watches (a peer, the origin, the
//! parent of a finished job, whose heartbeats stopped) has a deadline of its own, and a
//! source that let one pass or could not be reached is skipped by every search until it is
//! heard from again, so no read waits for a dead node after another read did. While the
//! node re-attaches during a push, a new parent is coming: a search that found nothing
//! else waits for it rather than fail.
//!
//! A search that failed leaves a negative entry: for a while (one ask's deadline), a new
//! search for the chunk skips the sources that said no and only looks at the origin again
//! (a file open: cheap); after that, or as soon as a source may have come back (a new
//! parent, a node that completed, a silent node heard again: [`Sources::news`]), it asks
//! everyone again.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::ChunkNo;
use crate::plan::NodeId;

/// At most this many other nodes are asked for one chunk in one search: enough for the
/// parent's siblings and a completed child or two, few enough that a search never walks a
/// thousand-node job.
pub const MAX_PEER_ASKS: usize = 8;

/// A place a chunk can come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Source {
    /// The parent in the tree (asked with `Want`, or `Lost` if it sent the chunk once).
    Parent(NodeId),
    /// Another node of the job that may hold the chunk (asked with `Ask`).
    Peer(NodeId),
    /// The origin store, which the caller reads ([`super::Relay::poll_origin`]).
    Origin,
}

impl Source {
    /// The node this source is, if it is one.
    pub fn node(self) -> Option<NodeId> {
        match self {
            Source::Parent(n) | Source::Peer(n) => Some(n),
            Source::Origin => None,
        }
    }
}

/// What the relay knows now of who may give a chunk: the input of every choice.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Known {
    /// The parent, when attached to one that serves chunks (none while re-attaching, nor
    /// when the parent is the root of a finished job, which no longer serves).
    pub parent: Option<NodeId>,
    /// An ask to the parent needs a deadline of its own: the job is finished, so nothing
    /// watches the parent's heartbeats any more.
    pub parent_unwatched: bool,
    /// Other nodes that may hold the chunk, the likeliest first.
    pub holders: Vec<NodeId>,
    /// This node can read an origin store.
    pub origin: bool,
    /// This node is re-attaching during a push: a parent is coming, which may have it.
    pub parent_coming: bool,
}

/// The next thing to do for a chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Ask this source.
    Ask(Source),
    /// Nothing to ask now: wait for the parent that is coming ([`Known::parent_coming`]).
    Wait,
    /// No source is left: every waiter fails now.
    GiveUp,
}

/// One search for one chunk.
#[derive(Debug, Clone, Default)]
struct Search {
    /// The source asked now, and until when its answer is awaited (`None`: something
    /// else watches it, the parent's heartbeats).
    at: Option<(Source, Option<Instant>)>,
    /// Every source asked in this search, and those that said they lack it.
    asked: Vec<Source>,
    lacked: Vec<Source>,
}

/// A failed search, remembered.
#[derive(Debug, Clone)]
struct Failed {
    /// When it failed, and the [`Sources::news`] count then.
    at: Instant,
    epoch: u64,
    /// The sources asked, and those that said they lack it.
    asked: Vec<Source>,
    lacked: Vec<Source>,
}

/// The searches of one node for the chunks it needs and does not hold.
#[derive(Debug, Clone)]
pub struct Sources {
    searches: BTreeMap<ChunkNo, Search>,
    failed: BTreeMap<ChunkNo, Failed>,
    /// Nodes that let an ask's deadline pass or could not be reached.
    silent: BTreeSet<NodeId>,
    /// How long an unwatched ask is awaited, and a failed search remembered.
    wait: Duration,
    /// Counts the things that may bring a source back.
    epoch: u64,
}

impl Sources {
    /// Searches whose unwatched asks wait `wait` each (the job's liveness deadline).
    pub fn new(wait: Duration) -> Self {
        Self {
            searches: BTreeMap::new(),
            failed: BTreeMap::new(),
            silent: BTreeSet::new(),
            wait,
            epoch: 0,
        }
    }

    /// `chunk` is needed: the first step of a new search, or `None` while one runs.
    pub fn seek(&mut self, now: Instant, chunk: ChunkNo, known: &Known) -> Option<Step> {
        if self.searches.contains_key(&chunk) {
            return None;
        }
        let mut search = Search::default();
        if let Some(f) = self.failed.get(&chunk)
            && f.epoch == self.epoch
            && now < f.at + self.wait
        {
            // Lately nobody had it: only the origin, which may be readable again, is
            // looked at again (a file open).
            search.lacked = f
                .lacked
                .iter()
                .copied()
                .filter(|s| s.node().is_some())
                .collect();
            search.asked = search.lacked.clone();
        }
        self.searches.insert(chunk, search);
        Some(self.next(now, chunk, known))
    }

    /// `source` will not give `chunk` (it said so, or the origin could not be read): the
    /// next step if the search was asking it, else `None`.
    pub fn lacks(
        &mut self,
        now: Instant,
        chunk: ChunkNo,
        source: Source,
        known: &Known,
    ) -> Option<Step> {
        let s = self.searches.get_mut(&chunk)?;
        if s.at.map(|(at, _)| at) != Some(source) {
            return None;
        }
        s.lacked.push(source);
        Some(self.next(now, chunk, known))
    }

    /// `node` did not answer in time or cannot be reached: skipped from now on until heard
    /// from. The chunks whose searches were asking it, to be moved on with
    /// [`Sources::moved_on`].
    pub fn silent(&mut self, node: NodeId) -> Vec<ChunkNo> {
        self.silent.insert(node);
        self.asking(|s| s.node() == Some(node))
    }

    /// The parent stopped serving (lost, re-attaching, left, finished as the root): the
    /// chunks whose searches were asking it, to be moved on with [`Sources::moved_on`].
    pub fn parent_gone(&mut self) -> Vec<ChunkNo> {
        self.asking(|s| matches!(s, Source::Parent(_)))
    }

    /// The next step of a search whose source was given up on ([`Sources::silent`],
    /// [`Sources::parent_gone`], or its deadline).
    pub fn moved_on(&mut self, now: Instant, chunk: ChunkNo, known: &Known) -> Option<Step> {
        let s = self.searches.get_mut(&chunk)?;
        s.at = None;
        Some(self.next(now, chunk, known))
    }

    /// The chunks searched for now.
    pub fn searching(&self) -> Vec<ChunkNo> {
        self.searches.keys().copied().collect()
    }

    /// A new parent adopted this node: a search that is not asking it asks it next (it
    /// may have what the old one lacked). The step, if the search was not asking it.
    pub fn new_parent(&mut self, now: Instant, chunk: ChunkNo, known: &Known) -> Option<Step> {
        let parent = known.parent?;
        let s = self.searches.get_mut(&chunk)?;
        if s.at.is_some_and(|(at, _)| at == Source::Parent(parent)) {
            return None;
        }
        // Asked before as another node, it is asked again as the parent.
        let other = |a: &Source| a.node() != Some(parent);
        s.asked.retain(other);
        s.lacked.retain(other);
        s.at = None;
        Some(self.next(now, chunk, known))
    }

    /// The chunk is here: its search and negative entry end.
    pub fn arrived(&mut self, chunk: ChunkNo) {
        self.searches.remove(&chunk);
        self.failed.remove(&chunk);
    }

    /// `node` was heard from: it is no longer skipped.
    pub fn heard(&mut self, node: NodeId) {
        if self.silent.remove(&node) {
            self.epoch += 1;
        }
    }

    /// Something happened that may bring a source back (a new parent, a node that
    /// completed a phase): failed searches are no longer remembered.
    pub fn news(&mut self) {
        self.epoch += 1;
    }

    /// The chunks whose searches wait for a parent that is coming, to be moved on with
    /// [`Sources::moved_on`] when none comes.
    pub fn waiting(&self) -> Vec<ChunkNo> {
        self.searches
            .iter()
            .filter(|(_, s)| s.at.is_none())
            .map(|(&c, _)| c)
            .collect()
    }

    /// The sources the last search for `chunk` asked, if it failed.
    pub fn tried(&self, chunk: ChunkNo) -> &[Source] {
        self.failed.get(&chunk).map_or(&[], |f| &f.asked)
    }

    /// Whether a search for `chunk` failed lately and nothing changed since.
    pub fn gave_up(&self, now: Instant, chunk: ChunkNo) -> bool {
        self.failed
            .get(&chunk)
            .is_some_and(|f| f.epoch == self.epoch && now < f.at + self.wait)
    }

    /// The searches whose ask's deadline passed by `now`, with the source they asked.
    pub fn due(&self, now: Instant) -> Vec<(ChunkNo, Source)> {
        self.searches
            .iter()
            .filter_map(|(&c, s)| match s.at {
                Some((src, Some(until))) if until <= now => Some((c, src)),
                _ => None,
            })
            .collect()
    }

    /// When the next ask's deadline passes.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.searches
            .values()
            .filter_map(|s| s.at.and_then(|(_, until)| until))
            .min()
    }

    /// The sources asked so far in the search for `chunk`, in order.
    pub fn asked(&self, chunk: ChunkNo) -> &[Source] {
        self.searches.get(&chunk).map_or(&[], |s| &s.asked)
    }

    /// The chunks whose searches ask a source `which` picks.
    fn asking(&self, which: impl Fn(Source) -> bool) -> Vec<ChunkNo> {
        self.searches
            .iter()
            .filter(|(_, s)| s.at.is_some_and(|(at, _)| which(at)))
            .map(|(&c, _)| c)
            .collect()
    }

    /// The next source not asked yet in the search for `chunk`, or the end of it.
    fn next(&mut self, now: Instant, chunk: ChunkNo, known: &Known) -> Step {
        let wait = self.wait;
        let silent = &self.silent;
        let s = self.searches.get_mut(&chunk).expect("a search runs");
        let fresh = |src: Source| {
            !s.asked.contains(&src)
                && src.node().is_none_or(|n| {
                    !silent.contains(&n)
                        && !s.asked.contains(&Source::Parent(n))
                        && !s.asked.contains(&Source::Peer(n))
                })
        };
        let peers_asked = s
            .asked
            .iter()
            .filter(|a| matches!(a, Source::Peer(_)))
            .count();
        let parent = known.parent.map(Source::Parent).filter(|&p| fresh(p));
        let choice = parent
            .map(|p| (p, known.parent_unwatched.then_some(now + wait)))
            .or_else(|| {
                let peer = known
                    .holders
                    .iter()
                    .map(|&h| Source::Peer(h))
                    .find(|&p| fresh(p))?;
                (peers_asked < MAX_PEER_ASKS).then_some((peer, Some(now + wait)))
            })
            .or_else(|| {
                (known.origin && fresh(Source::Origin))
                    .then_some((Source::Origin, Some(now + wait)))
            });
        match choice {
            Some((src, until)) => {
                s.asked.push(src);
                s.at = Some((src, until));
                Step::Ask(src)
            }
            None if known.parent_coming => {
                s.at = None;
                Step::Wait
            }
            None => {
                let s = self.searches.remove(&chunk).expect("a search runs");
                self.failed.insert(
                    chunk,
                    Failed {
                        at: now,
                        epoch: self.epoch,
                        asked: s.asked,
                        lacked: s.lacked,
                    },
                );
                Step::GiveUp
            }
        }
    }
}

#[cfg(test)]
#[path = "sources_tests.rs"]
mod tests;
