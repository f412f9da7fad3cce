//! One module per `teesfs` subcommand: argument structs (clap) and a `run` function.
//! Commands parse, call into the library crates, and print; they hold no protocol logic.

pub mod borrow;
pub mod config;
pub mod daemon;
pub mod doctor;
pub mod gc;
pub mod handoff;
pub mod health;
mod health_rates;
pub mod inspect;
pub mod jobspec;
pub mod keep_fds;
pub mod keygen;
#[cfg(feature = "lab")]
pub mod lab;
pub mod learn;
pub mod mount;
pub mod outfile;
pub mod plan;
pub mod prefetch;
pub mod publish;
pub mod push;
pub mod rates;
pub mod record;
pub mod report;
pub mod rotate;
pub mod run;
pub mod run_image;
pub mod seeder;
#[cfg(feature = "lab")]
pub mod sim;
pub mod site;
pub mod status;
pub mod task_env;
pub mod util;
pub mod verify;
