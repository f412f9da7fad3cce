//! A failed push's job dropped down the tree: the root sends [`Msg::Release`] to its
//! children, and each node passes it on to its own before it tells its daemon to release the
//! job ([`Event::Released`]). Only a node's current parent is obeyed, so a child or a
//! stranger cannot end a job; nodes the tree cannot reach (a dead node, an orphan that has
//! not re-attached yet) keep the job until a later push of it replaces it or their daemon
//! stops. Nothing here waits for an answer: a node that is gone is gone.

use super::{Event, Msg, NodeId, Relay, Transmit};

impl Relay {
    /// At the root: the push failed before the job could start, so every node it reaches
    /// drops the job. Queues [`Msg::Release`] to each child and stops the push (nothing more
    /// is sent or checked). Nothing happens elsewhere or the second time.
    pub fn release(&mut self) {
        if self.root.is_none() || self.released {
            return;
        }
        self.pass_release();
    }

    /// Whether the job was released down the tree (at the root: [`Relay::release`] was
    /// called; on a node: its parent passed the release on).
    pub fn released(&self) -> bool {
        self.released
    }

    /// A [`Msg::Release`] from `from`: obeyed from the parent alone, once.
    pub(super) fn on_release(&mut self, from: NodeId) {
        if self.root.is_some() || self.released || Some(from) != self.parent {
            return;
        }
        self.pass_release();
        self.events.push_back(Event::Released);
    }

    /// Sends the release to every child, drops them, and ends the job's checks here.
    fn pass_release(&mut self) {
        self.released = true;
        let kids: Vec<NodeId> = self.children.keys().copied().collect();
        for c in kids {
            self.control.push_back(Transmit::Control {
                to: c,
                msg: Msg::Release,
            });
            self.drop_child(c);
        }
        self.attaching = None;
        self.finished = true;
    }
}
