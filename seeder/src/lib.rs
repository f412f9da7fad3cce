//! Login-node side of teesfs.
//!
//! - [`store`]: the content-addressed store a layer is published into (chunks and signed
//!   indexes as files in a directory; on a cluster this is where the tree's root reads from,
//!   and in shared-storage mode what nodes read directly); [`layout`]: the one place that
//!   builds and parses the paths of its objects.
//! - [`publish`](mod@publish): turning a directory into chunks plus a signed index.
//! - [`tags`]: names for indexes, and resolving `--index` (a tag or an id prefix).
//! - [`gc`]: removing old indexes and the chunks no kept index needs, safely beside a
//!   publish ([`lock`]: the store's advisory lock; `dirs`: the store's directories, opened
//!   without following links).
//! - [`verify`](mod@verify): checking indexes and every chunk they reference, as a typed
//!   report for `teesfs verify` to print.
//!
//! - [`mark`]: a chunk file's mark that it was written or checked whole, so the push root
//!   hashes each chunk once rather than at every push.
//! - [`files`]: bounded reads of files named by users or found in stores.
//! - [`deps`]: dependency analysis, the files a command needs to start (its urgent set).
//! - [`learned`]: the urgent set a layer's jobs taught (their nodes' records merged), kept
//!   beside the index as the next push's order hint; the urgent list format.
//! - [`rates`]: the file of the link rates the pushes measured, kept for the next plan.
//!
//! Nothing here talks to the network.

pub mod deps;
mod dirs;
mod error;
pub mod files;
pub mod gc;
mod holders;
pub mod layout;
pub mod learned;
pub mod lock;
pub mod mark;
pub mod publish;
pub mod rates;
pub mod shared;
pub mod store;
pub mod tags;
pub mod verify;

pub use error::Error;
pub use publish::{Published, publish, publish_adjusted, publish_tagged, publish_with_urgent};
pub use store::{ChunkStore, DirStore, StoredChunk};
pub use tags::TagName;
pub use verify::verify;
