//! The `layer` target's check: one image layer (a tar stream, plain, gzip or zstd) applied
//! to a fresh staging directory by `ociimage`, with small limits so one input stays fast.
//! Any input must be refused with an error or applied; a panic is a bug, and so is a write
//! outside the staging directory (its parent holds nothing else, checked after each run).

use std::path::PathBuf;

/// A scratch directory for this process, holding the staging directory of each run.
fn scratch() -> PathBuf {
    std::env::temp_dir().join(format!("teesfs-fuzz-layer-{}", std::process::id()))
}

/// Applies `data` as a layer and cleans up.
pub fn layer(data: &[u8]) {
    let parent = scratch();
    let staging = parent.join("staging");
    let _ = std::fs::remove_dir_all(&parent);
    std::fs::create_dir_all(&staging).expect("scratch directory");
    let limits = ociimage::ReadLimits {
        max_entries: 256,
        max_file_size: 1 << 20,
        max_total_bytes: 4 << 20,
        max_ratio: 64,
        ratio_floor: 1 << 20,
    };
    let _ = ociimage::apply_layer_for_fuzzing(data, &staging, limits);
    let names: Vec<_> = std::fs::read_dir(&parent)
        .expect("scratch directory")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(names, ["staging"], "a layer wrote beside the staging directory");
    std::fs::remove_dir_all(&parent).expect("clean up");
}
