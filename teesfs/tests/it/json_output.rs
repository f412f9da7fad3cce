//! `--format json` of every command that has it (issue 19 item 2): each document parses into
//! the library type the command writes it from, carries `"version": 1`, and says what the
//! command did (not just that it printed something).

use std::process::Output;

use teesfs_node::control::{JobStatus, STATUS_VERSION, Status};
use teesfs_node::output::{IndexDoc, IndexList, PublishDoc, VERSION, VerifyDoc};
use teesfs_node::report::PushReport;

use crate::cluster::Cluster;
use crate::util::{Workspace, can_mount, make_tree};

fn ok(out: &Output, what: &str) -> Vec<u8> {
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout.clone()
}

fn parse<T: serde::de::DeserializeOwned>(bytes: &[u8], what: &str) -> T {
    serde_json::from_slice(bytes).unwrap_or_else(|e| {
        panic!(
            "{what} is not its document: {e}\n{}",
            String::from_utf8_lossy(bytes)
        )
    })
}

/// `inspect --index` of the first index (by 8 hex characters of its id): its entries
/// with their kinds, sizes, urgent positions and link targets.
fn assert_inspect_index(ws: &Workspace, store: &str, pubkey: &str, first: &PublishDoc) {
    let one: IndexDoc = parse(
        &ok(
            &ws.teesfs(&[
                "inspect",
                "--store",
                store,
                "--index",
                &first.index[..8],
                "--trust",
                pubkey,
                "--format",
                "json",
            ]),
            "inspect --index",
        ),
        "inspect --index",
    );
    assert_eq!((one.version, &one.id), (VERSION, &first.index));
    assert_eq!(one.file_bytes, first.file_bytes);
    let small = one
        .entries
        .iter()
        .find(|e| e.path == "a/small.txt")
        .expect("a/small.txt listed");
    // make_tree hard-links it, so either entry may be the link.
    assert!(
        matches!(small.kind.as_str(), "file" | "hardlink"),
        "{small:?}"
    );
    assert_eq!(small.size, 13);
    assert!(
        one.entries
            .iter()
            .any(|e| e.kind == "dir" && e.path == "a/b/c")
    );
    assert_eq!(small.urgent, Some(1));
    let link = one
        .entries
        .iter()
        .find(|e| e.path == "rel-link")
        .expect("rel-link listed");
    assert_eq!(link.target.as_deref(), Some("a/small.txt"));
}

/// Overwrites one chunk file of the store with garbage.
fn damage_a_chunk(store: &std::path::Path) {
    let shard = std::fs::read_dir(store.join("chunks"))
        .expect("chunks")
        .flatten()
        .next()
        .expect("a shard");
    let chunk = std::fs::read_dir(shard.path())
        .expect("shard")
        .flatten()
        .next()
        .expect("a chunk");
    std::fs::write(chunk.path(), b"not a chunk").expect("damage it");
}

#[test]
fn publish_inspect_and_verify_print_typed_versioned_json() {
    let ws = Workspace::new();
    let src = ws.path().join("layer");
    make_tree(&src, 5, 0);
    let urgent = ws.path().join("urgent.list");
    std::fs::write(&urgent, "a/small.txt\n").expect("urgent list");
    let store = ws.store();
    let store = store.to_str().expect("utf8");
    let (key, pubkey) = (ws.key(), ws.pubkey());
    let (key, pubkey) = (key.to_str().expect("utf8"), pubkey.to_str().expect("utf8"));
    let publish_out = |extra: &[&str]| {
        let mut args = vec![
            "publish",
            src.to_str().expect("utf8"),
            "--store",
            store,
            "--key",
            key,
            "--quiet",
            "--format",
            "json",
            "--urgent-list",
            urgent.to_str().expect("utf8"),
        ];
        args.extend(extra);
        ws.teesfs(&args)
    };
    let publish =
        |extra: &[&str]| parse::<PublishDoc>(&ok(&publish_out(extra), "publish"), "publish");
    let first = publish(&[]);
    assert_eq!(first.version, VERSION);
    // About 9 MiB of content: `--chunk-size auto` (the default) cuts it into 256 KiB
    // chunks, 1/64 of the layer as a power of two within 256 KiB..=1 MiB.
    assert!((8 << 20..16 << 20).contains(&first.file_bytes), "{first:?}");
    assert_eq!(first.chunk_size, 256 << 10, "{first:?}");
    assert!(first.files >= 10, "{first:?}");
    assert!(first.new_chunks > 0 && first.new_chunks == first.unique_chunks);
    assert_eq!(first.urgent_entries, 1);
    assert!(first.expires.is_none());
    // The same layer again: same index, nothing new written.
    let again = publish(&[]);
    assert_eq!(again.index, first.index);
    assert_eq!(again.new_chunks, 0, "{again:?}");

    let list: IndexList = parse(
        &ok(
            &ws.teesfs(&["inspect", "--store", store, "--format", "json"]),
            "inspect",
        ),
        "inspect",
    );
    assert_eq!(list.version, VERSION);
    assert_eq!(list.indexes.len(), 1);
    assert_eq!(list.indexes[0].id, first.index);
    assert_eq!(list.indexes[0].bytes, first.index_bytes);

    assert_inspect_index(&ws, store, pubkey, &first);

    let verify = |what: &str| {
        ws.teesfs(&[
            "verify", "--store", store, "--trust", pubkey, "--format", "json", "--quiet",
        ])
        .tap(what)
    };
    let (status, good) = verify("verify");
    assert!(status);
    let good: VerifyDoc = parse(&good, "verify");
    assert!(
        good.ok && good.indexes.len() == 1 && good.indexes[0].ok,
        "{good:?}"
    );
    assert_eq!(good.indexes[0].chunks, first.unique_chunks);

    // A damaged chunk: the document says which, and the exit status is still a failure.
    damage_a_chunk(&ws.store());
    let (status, bad) = verify("verify damaged");
    assert!(!status, "a damaged store verified");
    let bad: VerifyDoc = parse(&bad, "verify damaged");
    assert!(!bad.ok && !bad.indexes[0].ok, "{bad:?}");
    assert_eq!(bad.indexes[0].bad_chunks.len(), 1, "{bad:?}");
    // A fixed chunk size is kept, and is another index of the same files.
    let mib = publish(&["--chunk-size", "1MiB"]);
    assert_eq!(mib.chunk_size, 1 << 20, "{mib:?}");
    assert!(mib.chunks < first.chunks, "{mib:?} against {first:?}");
    assert_ne!(mib.index, first.index);
    // A size that is not a power of two is refused, naming the flag and what it takes.
    let bad = publish_out(&["--chunk-size", "3MiB"]);
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("--chunk-size") && err.contains("power of two") && err.contains("auto"),
        "{err}"
    );
}

/// The exit status and stdout of a command, for commands expected to fail too.
trait Tap {
    fn tap(self, what: &str) -> (bool, Vec<u8>);
}

impl Tap for Output {
    fn tap(self, what: &str) -> (bool, Vec<u8>) {
        assert!(!self.stdout.is_empty(), "{what} printed nothing: {self:?}");
        (self.status.success(), self.stdout)
    }
}

#[test]
fn push_and_status_print_typed_versioned_json() {
    if !can_mount() {
        return;
    }
    let c = Cluster::start(2, |_| vec![]);
    let src = c.ws.path().join("layer");
    make_tree(&src, 5, 0);
    let id = c.ws.publish(&src);
    let out = c
        .push_cmd(
            &id,
            2,
            &["--job", "77", "--wait", "all", "--format", "json"],
        )
        .output()
        .expect("push");
    let rep: PushReport = parse(&ok(&out, "push"), "push --format json");
    assert_eq!(rep.version, 1);
    assert_eq!(rep.job, "77", "Slurm job 77, in decimal (issue 30 item 9)");
    assert_eq!(rep.index, id);
    assert_eq!(rep.nodes, 2);
    assert!(rep.failures.is_empty(), "{:?}", rep.failures);
    assert!(rep.all_complete_s.is_some());

    let sock = c.nodes[0].control();
    let sock = sock.to_str().expect("utf8");
    let status = |args: &[&str]| {
        let mut all = vec!["status", "--control", sock];
        all.extend(args);
        ok(&c.ws.teesfs(&all), "status")
    };
    let st: Status = parse(&status(&["--all", "--format", "json"]), "status");
    assert_eq!(st.version, STATUS_VERSION);
    assert_eq!(st.host, c.nodes[0].host);
    assert_eq!(st.jobs.len(), 1);
    assert_eq!(st.jobs[0].job, rep.job);
    assert_eq!(st.jobs[0].have, st.jobs[0].chunks);
    // The push carried the login node's clock: on one machine, the skew is the transit.
    let skew = st
        .clock_skew_ms
        .expect("the daemon measured the clock skew");
    assert!(skew.abs() < 5_000, "clock skew {skew} ms on one machine");
    // The old flag is the same document.
    let old: Status = parse(&status(&["--all", "--json"]), "status --json");
    assert_eq!(old.jobs.len(), 1);
    let one: JobStatus = parse(
        &status(&["--job", "77", "--format", "json"]),
        "status --job",
    );
    assert_eq!((one.version, &one.job), (STATUS_VERSION, &rep.job));
    assert_eq!(one.index, id);
}
