//! What of the machine under the lab can skew its figures, said when a lab comes up.
//!
//! On a virtual machine whose balloon device reports free pages to the hypervisor
//! (virtio-balloon's free page reporting), memory the guest frees is given back, and the
//! next write to it takes a fault in the host. The lab's node stores are tmpfs: every chunk
//! lands on fresh pages, so those faults are charged to the nodes' CPU quotas, and the
//! more memory earlier labs freed, the slower the next lab runs. Measured on the project's
//! machines (BENCHMARKS.md): a copy-first push rose from 15.0 to 42.8 CPU-s over a session,
//! writing 2 GiB of fresh tmpfs pages ran at 344 MB/s against 3.7 GB/s over the same pages
//! again, and both came back (16.5 CPU-s, 3.3 GB/s) once reporting was off and memory
//! written once.

use std::path::Path;

/// Where the kernel keeps the order of the free blocks it reports.
const ORDER: &str = "/sys/module/page_reporting/parameters/page_reporting_order";

/// The balloon devices' feature bits ("0110...": bit 0 first).
const BALLOONS: &str = "/sys/bus/virtio/drivers/virtio_balloon";

/// `VIRTIO_BALLOON_F_REPORTING`.
const REPORTING_BIT: usize = 5;

/// The largest block order of the kernel's buddy allocator on x86_64 and arm64 with 4 KiB
/// pages (`MAX_PAGE_ORDER`): a reporting order above it is never reached.
const MAX_PAGE_ORDER: u32 = 10;

/// A warning for the lab's reports when this machine hands freed memory back to its
/// hypervisor, with what to do; `None` when it does not (or cannot be told).
pub fn page_reporting() -> Option<String> {
    let order = std::fs::read_to_string(ORDER).ok()?.trim().parse().ok()?;
    let reports = balloon_features(Path::new(BALLOONS))
        .iter()
        .any(|f| f.as_bytes().get(REPORTING_BIT) == Some(&b'1'));
    reporting_warning(reports, order)
}

/// The feature strings of every balloon device bound under `driver`.
fn balloon_features(driver: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(driver) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("features")).ok())
        .collect()
}

/// The warning for a balloon that `reports` free pages at `order`.
fn reporting_warning(reports: bool, order: u32) -> Option<String> {
    (reports && order <= MAX_PAGE_ORDER).then(|| {
        format!(
            "this virtual machine reports free memory to its hypervisor (virtio-balloon free \
             page reporting, order {order}): each fresh page the nodes' tmpfs stores write \
             costs a fault in the host, charged to the nodes' CPU quotas, and figures drift \
             as earlier runs free memory. Before measuring: echo {} > {ORDER}, then write \
             and delete a tmpfs file as large as the free memory (docs/lab.md, \"This \
             machine's memory\")",
            MAX_PAGE_ORDER + 1
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_reporting_balloon_at_a_reachable_order_is_warned_of() {
        let w = reporting_warning(true, 9).expect("reporting 2 MiB blocks");
        assert!(w.contains("order 9") && w.contains("echo 11 >"), "{w}");
        assert_eq!(reporting_warning(true, 11), None, "switched off");
        assert_eq!(reporting_warning(false, 9), None, "no reporting device");
    }

    #[test]
    fn the_reporting_bit_is_read_from_each_balloons_features() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(balloon_features(&dir.path().join("absent")).is_empty());
        let dev = dir.path().join("virtio3");
        std::fs::create_dir(&dev).expect("mkdir");
        std::fs::write(dev.join("features"), "0110010100\n").expect("features");
        let f = balloon_features(dir.path());
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].as_bytes().get(REPORTING_BIT), Some(&b'1'));
    }
}
