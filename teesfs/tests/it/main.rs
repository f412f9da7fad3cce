//! teesfs integration tests: one binary, real FUSE mounts, real processes.
//!
//! Tests that need root and /dev/fuse skip with a printed reason outside CI and fail under CI
//! (the `CI` environment variable), which runs as root.
//! Every mount is made in a fresh temporary directory and torn down by a Drop guard, also
//! when the test panics.

mod bad_input;
mod best_effort_output;
mod cluster;
mod copies_ahead;
mod corruption;
mod crl_tree;
mod daemon_bounds;
mod daemon_restart;
mod daemon_service;
mod deps;
mod distribution;
mod doctor;
mod failed_release;
mod gc;
mod health;
mod help;
mod house_rules;
mod image_publish;
mod inspect_image;
mod json_output;
mod lab;
mod lab_baselines;
mod lab_faults;
mod lab_launch;
mod lab_load;
mod lab_model;
mod lab_rates;
mod lab_seeder;
mod lab_slurm;
mod lab_slurm_image;
mod lab_slurm_late;
mod lab_slurm_requeue;
mod lab_soak;
mod lab_yield;
mod learned;
mod local_state;
mod metrics;
mod packaging;
mod push_faults;
mod record_image;
mod record_job;
mod report;
mod roundtrip;
mod run;
mod run_image;
mod security;
mod shared_store;
mod site_config;
mod store_integrity;
mod store_lock;
mod util;
