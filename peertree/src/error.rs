//! The crate's one error type.
//!
//! Every variant carries enough context for a command line to tell the operator what to fix:
//! hostlist errors carry the byte position in the expression, topology errors the line of
//! `topology.toml`, relay errors what a peer sent wrong. Nothing here formats for a terminal;
//! callers add carets and hints.

/// Everything that can go wrong in `peertree`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A job id given on the command line is none of the forms [`crate::relay::JobId`]
    /// reads.
    #[error(
        "{0:?} is not a job id: give the Slurm job id in decimal (e.g. $SLURM_JOB_ID), 16 hex \
         digits as `teesfs status` shows a push outside Slurm, or hex with 0x"
    )]
    JobId(String),
    /// A Slurm hostlist expression is malformed; `pos` is the byte offset of the problem.
    #[error("bad hostlist `{input}` at position {pos}: {reason}")]
    Hostlist {
        /// The whole expression as given.
        input: String,
        /// Byte offset into `input` where the problem was found.
        pos: usize,
        /// What is wrong there.
        reason: String,
    },
    /// `topology.toml` is not valid TOML or does not match the schema.
    #[error("topology.toml line {line}: {message}")]
    TopologySyntax {
        /// 1-based line of the offending text.
        line: usize,
        /// What the parser objected to.
        message: String,
    },
    /// `topology.toml` parses but describes an impossible topology (a node in two groups, ...).
    #[error("topology.toml line {line}: {message}")]
    Topology {
        /// 1-based line of the offending entry.
        line: usize,
        /// What is inconsistent.
        message: String,
    },
    /// Link rates (`[links]` of `topology.toml`, or `--links`) cannot be read.
    #[error("link rates: {0}")]
    Rates(String),
    /// A topology was built from arguments (not a file) and is inconsistent.
    #[error("topology: {0}")]
    TopologyArgs(String),
    /// A job node does not appear in the topology, so the planner cannot place it.
    #[error("node `{host}` is not in the topology")]
    UnknownNode {
        /// The host name that could not be found.
        host: String,
    },
    /// A planning parameter is out of range (zero width, login node inside the job, ...).
    #[error("invalid plan request: {0}")]
    Request(String),
    /// A strategy name was not recognised.
    #[error(
        "unknown strategy `{0}` (expected one of: topo, topo-paper, random, hostlist, flat, storage, auto)"
    )]
    UnknownStrategy(String),
    /// A topology lists a node twice, in two groups or twice in one.
    #[error("node `{host}` is listed twice in the topology: put each node in exactly one group")]
    DuplicateNode {
        /// The host name listed twice.
        host: String,
    },
    /// A topology group names a proxy that is not one of its members.
    #[error(
        "proxy `{proxy}` is not one of the group's members: name one of them, or leave the proxy out to use the first"
    )]
    ProxyNotMember {
        /// The proxy as given.
        proxy: String,
    },
    /// A topology group has no members.
    #[error("a topology group has no members: list at least one")]
    EmptyGroup,
    /// A topology was built with no groups at all.
    #[error("the topology has no groups: give it at least one node")]
    NoGroups,
    /// An upper level of a topology has units of zero nodes.
    #[error("level `{name}` has size 0: a level needs at least one node per unit")]
    EmptyLevel {
        /// The level's name.
        name: String,
    },
    /// A plan breaks the tree's invariants (a bug in the strategy that built it).
    #[error("invalid plan: {0} (a bug in the strategy that built it; please report it)")]
    InvalidPlan(String),
    /// A push order's length does not match the chunk table.
    #[error(
        "invalid push order: {positions} positions for {chunks} chunks (the order must list every chunk of the index once)"
    )]
    OrderLength {
        /// Positions in the order.
        positions: usize,
        /// Chunks in the table.
        chunks: usize,
    },
    /// A push order claims more urgent chunks than it lists.
    #[error(
        "invalid push order: {urgent} urgent chunks out of {chunks} (the urgent set is a prefix of the order)"
    )]
    OrderUrgent {
        /// Urgent chunks claimed.
        urgent: usize,
        /// Chunks in the order.
        chunks: usize,
    },
    /// A push order names a chunk outside the table, or one chunk twice.
    #[error(
        "invalid push order: chunk {chunk} missing or repeated (the order must list every chunk of the index once)"
    )]
    OrderChunk {
        /// The offending chunk-table position.
        chunk: usize,
    },
    /// A relay cannot start from what it was given (an empty plan, a `Start` or `Prepare`
    /// without its subtree or ancestors, zero timing, a probe that carries chunks).
    #[error(
        "invalid start message: {0} (the sender is broken or runs another teesfs version; update every node to the same one)"
    )]
    InvalidStart(&'static str),
    /// A peer's frame is larger than [`crate::relay::MAX_MESSAGE`].
    #[error(
        "message of {0} bytes exceeds the {max}-byte limit (the peer is broken or runs another teesfs version)",
        max = crate::relay::MAX_MESSAGE
    )]
    WireTooLarge(usize),
    /// A peer's frame does not decode as a relay message.
    #[error(
        "malformed message: {0} (the peer is broken or runs another teesfs version; update every node to the same one)"
    )]
    WireMalformed(String),
    /// A simulation could not be set up (the relay refused the plan, an empty payload).
    #[error("simulation set-up: {0}")]
    SimSetup(String),
    /// A simulation ran out of events before the root saw the job complete.
    #[error("simulation stalled at {at:?}: the root never saw the job complete")]
    SimStalled {
        /// Simulated time of the last event.
        at: std::time::Duration,
    },
    /// A simulation passed its simulated-time limit.
    #[error("simulation passed its {0:?} time limit")]
    SimTimeLimit(std::time::Duration),
}

/// Shorthand for results in this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
