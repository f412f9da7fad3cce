//! Reads the Slurm version from Debian's libslurm-dev headers (the ones the SPANK bindings
//! are generated from) and declares the plugin with it: Slurm refuses a plugin built for
//! another major release.

use std::path::PathBuf;

fn main() {
    let include = std::env::var_os("SLURM_INCLUDE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/include"));
    let header = include.join("slurm/slurm_version.h");
    println!("cargo:rerun-if-changed={}", header.display());
    println!("cargo:rerun-if-env-changed=SLURM_INCLUDE_DIR");
    let text = std::fs::read_to_string(&header).unwrap_or_else(|e| {
        panic!(
            "reading {}: {e}; install Debian's libslurm-dev (scripts/deps.sh does) or set \
             SLURM_INCLUDE_DIR",
            header.display()
        )
    });
    let version = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("#define SLURM_VERSION_NUMBER"))
        .map(str::trim)
        .filter(|v| v.starts_with("0x") && v[2..].chars().all(|c| c.is_ascii_hexdigit()))
        .unwrap_or_else(|| panic!("no SLURM_VERSION_NUMBER in {}", header.display()));
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR")).join("plugin.rs");
    std::fs::write(
        &out,
        format!("slurm_spank::SPANK_PLUGIN!(b\"teesfs\", {version}, Teesfs);\n"),
    )
    .expect("writing plugin.rs");
}
