//! One module per `teesfs` subcommand: argument structs (clap) and a `run` function.
//! Commands parse, call into the library crates, and print; they hold no protocol logic.

pub mod inspect;
pub mod keygen;
pub mod mount;
pub mod plan;
pub mod publish;
pub mod util;
pub mod verify;
