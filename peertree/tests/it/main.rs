//! peertree's integration tests, one binary: hostlists, topology files, every strategy's
//! invariants, and the topology-aware tree's regressions and guarantees.

mod common;
mod hostlist;
mod orphans;
mod strategies;
mod topo;
mod topology;
