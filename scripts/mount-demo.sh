#!/usr/bin/env bash
# A small tour without the lab: publish a real software layer (Python's standard library from this
# machine), mount it read-only with FUSE, run Python from the mount, verify, unmount.
# Everything lives in a temporary directory that is removed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cargo build --release --locked -p teesfs
bin="$PWD/target/release/teesfs"
work=$(mktemp -d /tmp/teesfs-demo.XXXXXX)
mnt="$work/mnt"
pid=""
cleanup() {
    [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
    mountpoint -q "$mnt" 2>/dev/null && umount -l "$mnt" || true
    rm -rf "$work"
}
trap cleanup EXIT INT TERM
export TEESFS_CONFIG="$work/config"

layer=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')
[ -d /usr/lib/python3.11 ] && layer=/usr/lib/python3.11
echo "== teesfs keygen"
"$bin" keygen
echo; echo "== teesfs publish $layer"
"$bin" publish "$layer" --store "$work/store"
echo; echo "== republish: nothing new is written"
# --format json is the output meant for scripts (the text may change between releases).
read -r id new < <("$bin" publish "$layer" --store "$work/store" --quiet --format json |
    python3 -c 'import json, sys; d = json.load(sys.stdin); print(d["index"], d["new_chunks"])')
echo "index $id: $new new chunks"
echo; echo "== teesfs verify"
"$bin" verify --store "$work/store" --index "$id"
mkdir -p "$mnt"
echo; echo "== teesfs mount"
"$bin" mount "$mnt" --store "$work/store" --index "$id" --materialize-dir "$work/files" > "$work/mount.log" &
pid=$!
for _ in $(seq 100); do grep -q mounted "$work/mount.log" 2>/dev/null && break; sleep 0.1; done
cat "$work/mount.log"
echo; echo "== the layer, through FUSE"
ls "$mnt" | head -5; echo "... $(find "$mnt" | wc -l) entries"
echo; echo "== Python importing its standard library from the mount"
python3 -S -c "
import sys; sys.path.insert(0, '$mnt')
import json, email.mime.text, importlib.util
print('json from', json.__file__)
print(json.dumps({'teesfs': 'works'}))
"
echo; echo "== byte-exact?"
diff -r --no-dereference "$layer" "$mnt" >/dev/null && echo "diff -r: identical"
kill -TERM "$pid"; wait "$pid" || true; pid=""
echo; echo "demo done; everything is cleaned up."
