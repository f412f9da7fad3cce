//! What a launch method's job did on the nodes, summed from every compute node's
//! `teesfs status`: chunks received, demand requests sent and answered, chunks received
//! twice. Read after the method's CPU is measured, so the queries cost it nothing.

use serde::Serialize;

use crate::cluster::Lab;
use crate::error::Result;

/// A job's traffic counters summed over the compute nodes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Traffic {
    /// Chunks the nodes received and verified.
    pub chunks_in: u64,
    /// Demand requests the nodes sent to their parents (reads of chunks not there yet).
    pub wants_sent: u64,
    /// Chunks the nodes sent answering their children's demands.
    pub demand_served: u64,
    /// Chunks the nodes received twice.
    pub duplicates: u64,
    /// Times a node's parent or child stayed silent past its deadline while its transport
    /// still answered (starved, not failed).
    pub starved: u64,
    /// Chunks the nodes read from the origin store because no node gave them.
    pub from_origin: u64,
    /// Nodes whose status had the job.
    pub nodes: usize,
}

impl Traffic {
    /// Adds one node's counters of the job.
    pub fn add(&mut self, c: &teesfs_node::job::JobCounters) {
        self.chunks_in += c.chunks_in;
        self.wants_sent += c.wants_sent;
        self.demand_served += c.demand_served;
        self.duplicates += c.duplicates;
        self.starved += c.starved;
        self.from_origin += c.from_origin;
        self.nodes += 1;
    }
}

/// `job`'s counters summed over the lab's compute nodes (a node without the job adds
/// nothing).
pub fn of_job(lab: &Lab, job: &str) -> Result<Traffic> {
    let mut t = Traffic::default();
    for node in lab.layout().compute() {
        let status = lab.status(&node.host)?;
        for j in status.jobs.iter().filter(|j| j.job == job) {
            t.add(&j.counters);
        }
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_add_up_per_node() {
        let c = teesfs_node::job::JobCounters {
            chunks_in: 10,
            wants_sent: 3,
            demand_served: 2,
            duplicates: 1,
            starved: 1,
            from_origin: 5,
            ..Default::default()
        };
        let mut t = Traffic::default();
        t.add(&c);
        t.add(&c);
        assert_eq!(
            t,
            Traffic {
                chunks_in: 20,
                wants_sent: 6,
                demand_served: 4,
                duplicates: 2,
                starved: 2,
                from_origin: 10,
                nodes: 2
            }
        );
    }
}
