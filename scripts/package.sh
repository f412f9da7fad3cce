#!/usr/bin/env bash
# Builds teesfs's packages for Debian (.deb) and the RHEL family (.rpm):
#   teesfs                         the binary, teesfs-daemon.service, /etc/teesfs/ (conffiles),
#                                  the Slurm scripts, man pages and bash/zsh/fish completions
#   teesfs-spank-slurm<MAJOR.MINOR>  the SPANK plugin, built for that Slurm release and
#                                  depending on it (Slurm refuses a plugin of another release)
#
#   bash scripts/package.sh                     # release build -> target/packages/
#   bash scripts/package.sh --profile dev --no-build --fast --out DIR   # package debug builds
#
# --profile P   cargo profile packaged (release); `dev` takes target/debug
# --no-build    package what is built already (teesfs, without the lab for sites, and the plugin)
# --fast        quick compression (gzip -1 for .deb, none for .rpm): tests
# --out DIR     where the packages go (target/packages); their paths are printed, one a line
#
# The Slurm release is read from $SLURM_INCLUDE_DIR/slurm/slurm_version.h (/usr/include:
# Debian's libslurm-dev, RHEL's slurm-devel), as the plugin's build does. cargo-deb and
# cargo-generate-rpm (scripts/package-tools.sh installs them) package the files listed in
# teesfs/Cargo.toml and spank/Cargo.toml; the plugin's .deb is written here with dpkg-deb,
# because cargo-deb takes its package name and dependencies only from Cargo.toml, and they
# depend on the Slurm release found at build time.
set -euo pipefail
cd "$(dirname "$0")/.."

profile=release
build=1
fast=0
out=target/packages
while [ $# -gt 0 ]; do
    case "$1" in
        --profile) profile=$2; shift 2 ;;
        --no-build) build=0; shift ;;
        --fast) fast=1; shift ;;
        --out) out=$2; shift 2 ;;
        -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
        *) echo "package.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
die() { echo "package.sh: $*" >&2; exit 1; }
for tool in dpkg-deb strip gzip flock python3; do
    command -v "$tool" >/dev/null || die "needs $tool (bash scripts/deps.sh installs it)"
done
bash scripts/package-tools.sh

if [ "$build" = 1 ]; then
    bash scripts/deps.sh
    # Without the lab (feature `lab`): compute nodes get the product only.
    cargo build --locked --profile "$profile" -p teesfs --no-default-features
    cargo build --locked --profile "$profile" -p teesfs-spank
fi
target_dir=$(cargo metadata --format-version 1 --no-deps --locked \
    | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
case "$profile" in dev|test) dir="$target_dir/debug" ;; *) dir="$target_dir/$profile" ;; esac
[ -x "$dir/teesfs" ] || die "$dir/teesfs is missing: build it (cargo build --profile $profile -p teesfs) or drop --no-build"
[ -f "$dir/libteesfs_spank.so" ] || die "$dir/libteesfs_spank.so is missing: build it (cargo build --profile $profile -p teesfs-spank) or drop --no-build"

# Slurm's release, as the plugin was built for it.
header="${SLURM_INCLUDE_DIR:-/usr/include}/slurm/slurm_version.h"
[ -f "$header" ] || die "$header is missing: install Debian's libslurm-dev or RHEL's slurm-devel, or set SLURM_INCLUDE_DIR"
hex=$(sed -n 's/^#define SLURM_VERSION_NUMBER[[:space:]]*0x\([0-9a-fA-F]*\).*/\1/p' "$header")
[ -n "$hex" ] || die "no SLURM_VERSION_NUMBER in $header"
slurm_major=$((16#$hex >> 16 & 0xff))
slurm_minor=$(printf '%02d' $((16#$hex >> 8 & 0xff)))
slurm_micro=$((16#$hex & 0xff))
slurm="$slurm_major.$slurm_minor"
slurm_next="$slurm_major.$(printf '%02d' $((10#$slurm_minor + 1)))"
spank_name="teesfs-spank-slurm$slurm"

# The files are staged where teesfs/Cargo.toml and spank/Cargo.toml list them:
# target/release/package/, `target/release/` being the packagers' name for the target
# directory (the tools are always told --profile release; the binaries come from $dir). One
# packaging at a time per target directory.
mkdir -p "$target_dir/release"
exec 9>"$target_dir/release/.package.lock"
flock 9
stage="$target_dir/release/package"
rm -rf "$stage"
mkdir -p "$stage/man/man1" "$stage/man/man5" "$out"
strip -o "$stage/teesfs" "$dir/teesfs"
strip -o "$stage/teesfs_spank.so" "$dir/libteesfs_spank.so"
"$stage/teesfs" generate-docs --man "$stage/gen" --completions "$stage/completions"
for page in "$stage"/gen/*.1; do
    gzip -9n -c "$page" > "$stage/man/man1/$(basename "$page").gz"
done
for page in packaging/man/*.5; do
    gzip -9n -c "$page" > "$stage/man/man5/$(basename "$page").gz"
done
rm -rf "$stage/gen"

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
deb_compress=(); rpm_compress=zstd; dpkg_compress=-Zxz
if [ "$fast" = 1 ]; then
    # cargo-deb's own gzip is zopfli (~40 s for the binary); the gzip command takes 1 s.
    deb_compress=(--fast -Z gz --compress-system); rpm_compress=none; dpkg_compress=-Znone
fi

# teesfs: cargo-deb and cargo-generate-rpm from teesfs/Cargo.toml.
cargo deb --quiet --no-build --no-strip --locked -p teesfs --profile release \
    "${deb_compress[@]}" -o "$out" >"$stage/deb.log" 2>&1 \
    || die "cargo deb failed: $(cat "$stage/deb.log")"
ls "$out"/teesfs_"$version"-1_*.deb
cargo generate-rpm -p teesfs --profile release --target-dir "$target_dir" \
    --payload-compress "$rpm_compress" -o "$out"
ls "$out"/teesfs-"$version"-1.*.rpm

# The SPANK plugin: the .rpm from spank/Cargo.toml with its name and dependencies set here.
# RHEL-family Slurm (SchedMD's spec, EPEL) ships libslurm and the plugin loaders in `slurm`.
cargo generate-rpm -p spank --profile release --target-dir "$target_dir" \
    --payload-compress "$rpm_compress" -o "$out" \
    -s "name = \"$spank_name\"" \
    -s "summary = \"SPANK plugin of teesfs for Slurm $slurm (built with $slurm.$slurm_micro)\"" \
    -s "requires = { slurm = \">= $slurm, < $slurm_next\", teesfs = \"= $version\" }"
ls "$out/$spank_name-$version"-1.*.rpm

# ... and the .deb. Debian's slurmd and slurm-client both depend on slurm-wlm-basic-plugins of
# their own release, so the plugin depends on that release of it; and on the teesfs it was
# built with, whose `teesfs __task-env` it runs. Provides/Conflicts: one
# plugin at a time at /usr/lib/teesfs/teesfs_spank.so; Replaces/Breaks: the teesfs packages
# before 0.1.0-1 shipped it themselves.
arch=$(dpkg --print-architecture)
debroot="$stage/spank-deb"
install -D -m 0644 "$stage/teesfs_spank.so" "$debroot/usr/lib/teesfs/teesfs_spank.so"
install -D -m 0644 packaging/spank/README.md "$debroot/usr/share/doc/$spank_name/README.md"
install -d "$debroot/DEBIAN"
printf 'teesfs SPANK plugin for Slurm %s\nLicense: %s\n' "$slurm" \
    "$(sed -n 's/^license = "\(.*\)"/\1/p' Cargo.toml | head -n1)" \
    > "$debroot/usr/share/doc/$spank_name/copyright"
cat > "$debroot/DEBIAN/control" <<CONTROL
Package: $spank_name
Version: $version-1
Architecture: $arch
Maintainer: teesfs developers <teesfs@example.invalid>
Installed-Size: $(du -sk --exclude=DEBIAN "$debroot" | cut -f1)
Depends: libc6, slurm-wlm-basic-plugins (>= $slurm), slurm-wlm-basic-plugins (<< $slurm_next~), teesfs (= $version-1)
Provides: teesfs-spank
Conflicts: teesfs-spank
Replaces: teesfs-spank, teesfs (<< 0.1.0-1)
Breaks: teesfs (<< 0.1.0-1)
Section: admin
Priority: optional
Homepage: https://example.invalid/teesfs
Description: SPANK plugin of teesfs for Slurm $slurm (built with $slurm.$slurm_micro)
 Adds --teesfs=SPEC to sbatch, salloc and srun, and starts every task of such a
 job inside its teesfs layer. Slurm loads only plugins built for its own release:
 install the package named after the release the cluster runs, and list the
 plugin as optional in plugstack.conf (see /usr/share/doc/teesfs/slurm.md).
CONTROL
dpkg-deb --root-owner-group "$dpkg_compress" -b "$debroot" "$out/${spank_name}_$version-1_$arch.deb" >/dev/null
ls "$out/${spank_name}_$version-1_$arch.deb"
