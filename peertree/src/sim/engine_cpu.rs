//! What a simulated host's CPU does besides chunks: a connection's set-up, its share of a
//! core, and the `Prepare`s that wait for a link, so a host's handshakes take turns as
//! they do on a lab node. Pure arithmetic on the simulator's state; no clock.

use super::{Ev, Out, Sim, ns};
use crate::plan::{NodeId, Role};
use crate::relay::{Msg, Prepare};

impl Sim<'_> {
    /// The first message between two hosts sets the connection up: the dialling host's
    /// share of the handshake's CPU, then the other's, each queued on its CPU, then the
    /// round trips ([`super::Network::setup`]).
    pub(super) fn connect(&mut self, a: NodeId, b: NodeId) -> u64 {
        let key = (a.min(b), a.max(b));
        if let Some(&ready) = self.conn_ready.get(&key) {
            return ready.saturating_sub(self.now);
        }
        let cpu = ns(self.cfg.network.setup_cpu);
        let client = self.run_cpu(a, self.now, cpu);
        let server = self.run_cpu(b, client, cpu);
        let ready = server + ns(self.cfg.network.setup);
        self.conn_ready.insert(key, ready);
        ready.saturating_sub(self.now)
    }

    /// A `Prepare` from `from` to `to`, whose parent in the plan is `parent`: where
    /// handshakes cost CPU (a host's take turns on its one CPU here), a grandchild's goes
    /// once the connection to its parent is up, as the daemon sends it on a host with fewer
    /// cores than handshakes to make, so `from` does its children's handshakes first.
    pub(super) fn send_prepare(&mut self, from: NodeId, to: NodeId, parent: NodeId, p: Prepare) {
        let what = Out::Control(Msg::Prepare(p));
        if parent == from || self.cfg.network.setup_cpu.is_zero() {
            return self.depart_after_setup(from, to, what);
        }
        let wait = self.connect(from, parent);
        self.push(self.now + wait, Ev::Send { from, to, what });
    }

    /// Runs `cpu` ns of one core's work on `host` from `at`: after the work queued there
    /// before, on the first shared core to free up when cores are shared, else stretched by
    /// the host's share of a core. Returns when it is done.
    pub(super) fn run_cpu(&mut self, host: NodeId, at: u64, cpu: u64) -> u64 {
        if cpu == 0 {
            return at;
        }
        let mut start = at.max(self.cpu_busy[host.index()]);
        // With shared cores, the first one to free up (lowest index on ties).
        let core = (0..self.cores.len()).min_by_key(|&c| self.cores[c]);
        if let Some(c) = core {
            start = start.max(self.cores[c]);
        }
        let share = if core.is_some() {
            1.0
        } else {
            self.share(host)
        };
        let done = start + (cpu as f64 / share).round() as u64;
        self.cpu_busy[host.index()] = done;
        if let Some(c) = core {
            self.cores[c] = done;
        }
        done
    }

    /// Cores of `host` ([`super::Network::node_cpu`], `login_cpu`).
    fn share(&self, host: NodeId) -> f64 {
        let n = &self.cfg.network;
        let share = match self.plan.roles[host.index()] {
            Role::Login | Role::Storage => n.login_cpu,
            Role::Job | Role::Borrowed => n.node_cpu,
        };
        if share > 0.0 && share.is_finite() {
            share
        } else {
            1.0
        }
    }
}
