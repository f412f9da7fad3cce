//! A stream's chunks taken in parallel, their outcomes handed on in the order the stream
//! brought them: [`Reorder`] (pure: numbers handed out in order, outcomes given back in
//! any order, released in order) and [`Ticket`], one message's place in a stream's order,
//! which releases its outcome when given one, or an empty place when dropped unused (a
//! chunk refused or taken inline, a work that panicked), so a later message never waits
//! for a place nobody will fill.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::sync::lock;

/// Places in order, outcomes in any order, outcomes out in order.
#[derive(Debug)]
pub struct Reorder<T> {
    /// The next place handed out.
    next_in: u64,
    /// The first place whose outcome has not been released.
    next_out: u64,
    /// Outcomes given for places after `next_out` (`None`: an empty place).
    waiting: BTreeMap<u64, Option<T>>,
}

impl<T> Default for Reorder<T> {
    fn default() -> Self {
        Self {
            next_in: 0,
            next_out: 0,
            waiting: BTreeMap::new(),
        }
    }
}

impl<T> Reorder<T> {
    /// The next place in order.
    pub fn place(&mut self) -> u64 {
        let p = self.next_in;
        self.next_in += 1;
        p
    }

    /// The outcome of `place` (`None`: the place stays empty). Returns the outcomes that
    /// are now due, in the order of their places: none while an earlier place is open.
    /// A place not handed out, or given twice, is ignored.
    pub fn fill(&mut self, place: u64, outcome: Option<T>) -> Vec<T> {
        if place < self.next_out || place >= self.next_in || self.waiting.contains_key(&place) {
            return Vec::new();
        }
        self.waiting.insert(place, outcome);
        let mut due = Vec::new();
        while let Some(o) = self.waiting.remove(&self.next_out) {
            due.extend(o);
            self.next_out += 1;
        }
        due
    }

    /// Places handed out whose outcomes are not released yet.
    pub fn open(&self) -> u64 {
        self.next_in - self.next_out
    }
}

/// What a place releases: the part of a chunk's arrival that must happen in order.
pub type InOrderWork = Box<dyn FnOnce() + Send>;

/// One stream's order, shared by its reader and the works its messages started.
#[derive(Clone, Default)]
pub struct StreamOrder(Arc<Mutex<Reorder<InOrderWork>>>);

impl StreamOrder {
    /// The next message's place.
    pub fn ticket(&self) -> Ticket {
        let place = lock(&self.0).place();
        Ticket {
            place,
            order: Some(self.0.clone()),
        }
    }
}

/// One message's place in its stream's order.
pub struct Ticket {
    place: u64,
    order: Option<Arc<Mutex<Reorder<InOrderWork>>>>,
}

impl Ticket {
    /// A place in no stream: [`Ticket::release`] runs its work at once.
    pub fn alone() -> Ticket {
        Ticket {
            place: 0,
            order: None,
        }
    }

    /// Runs `work` once every earlier place of the stream is released, on whichever thread
    /// releases the last of them (here, if none is open). Due works run under the stream's
    /// lock, so they run one at a time and in order: keep them short (telling the relay).
    pub fn release(mut self, work: impl FnOnce() + Send + 'static) {
        self.fill(Some(Box::new(work)));
    }

    fn fill(&mut self, work: Option<InOrderWork>) {
        match self.order.take() {
            Some(order) => {
                let mut r = lock(&order);
                for w in r.fill(self.place, work) {
                    w();
                }
            }
            None => {
                if let Some(w) = work {
                    w();
                }
            }
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.fill(None);
    }
}

impl std::fmt::Debug for Ticket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ticket")
            .field("place", &self.place)
            .field("ordered", &self.order.is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_given_out_of_order_are_released_in_order() {
        let mut r = Reorder::default();
        let p: Vec<u64> = (0..4).map(|_| r.place()).collect();
        assert_eq!(r.fill(p[2], Some('c')), Vec::<char>::new());
        assert_eq!(r.fill(p[1], Some('b')), Vec::<char>::new());
        assert_eq!(r.open(), 4);
        assert_eq!(r.fill(p[0], Some('a')), ['a', 'b', 'c']);
        assert_eq!(r.open(), 1);
        assert_eq!(r.fill(p[3], Some('d')), ['d']);
        assert_eq!(r.open(), 0);
    }

    #[test]
    fn an_empty_place_releases_the_ones_after_it() {
        let mut r = Reorder::default();
        let (a, b, c) = (r.place(), r.place(), r.place());
        assert!(r.fill(c, Some(3)).is_empty());
        assert!(r.fill(a, Some(1)) == [1]);
        assert_eq!(r.fill(b, None), [3]);
        assert_eq!(r.open(), 0);
    }

    #[test]
    fn a_place_given_twice_or_never_handed_out_is_ignored() {
        let mut r = Reorder::default();
        let (a, b) = (r.place(), r.place());
        assert!(r.fill(b, Some(2)).is_empty());
        assert!(r.fill(b, Some(20)).is_empty(), "given twice");
        assert!(r.fill(7, Some(7)).is_empty(), "never handed out");
        assert_eq!(r.fill(a, Some(1)), [1, 2]);
        assert!(r.fill(a, Some(10)).is_empty(), "released already");
    }

    /// Tickets dropped unused (a refused chunk, a work that panicked) leave their places
    /// empty: the later ones' works run all the same, in order.
    #[test]
    fn tickets_run_their_works_in_order_and_a_dropped_one_does_not_hold_the_rest() {
        let order = StreamOrder::default();
        let log = Arc::new(Mutex::new(Vec::new()));
        let tickets: Vec<Ticket> = (0..4).map(|_| order.ticket()).collect();
        let mut t = tickets.into_iter();
        let (t0, t1, t2, t3) = (t.next(), t.next(), t.next(), t.next());
        let push = |n: u32| {
            let log = log.clone();
            move || lock(&log).push(n)
        };
        t3.expect("t3").release(push(3));
        t1.expect("t1").release(push(1));
        assert!(lock(&log).is_empty(), "0 is still open");
        drop(t2);
        t0.expect("t0").release(push(0));
        assert_eq!(*lock(&log), [0, 1, 3]);
        Ticket::alone().release(push(9));
        assert_eq!(*lock(&log), [0, 1, 3, 9]);
    }

    /// Works released from many threads at once still run in their places' order.
    #[test]
    fn works_released_from_many_threads_run_in_order() {
        let order = StreamOrder::default();
        let log = Arc::new(Mutex::new(Vec::new()));
        let tickets: Vec<(u32, Ticket)> = (0..64).map(|n| (n, order.ticket())).collect();
        std::thread::scope(|s| {
            for (n, t) in tickets.into_iter().rev() {
                let log = log.clone();
                s.spawn(move || t.release(move || lock(&log).push(n)));
            }
        });
        assert_eq!(*lock(&log), (0..64).collect::<Vec<u32>>());
    }
}
