#!/usr/bin/env bash
# Installs the Debian packages teesfs's demo and tests need (idempotent; skips what is
# already there). Run as root on Debian; elsewhere install the same packages yourself.
set -euo pipefail
need=()
command -v fusermount3 >/dev/null 2>&1 || need+=(fuse3)
command -v diff >/dev/null 2>&1 || need+=(diffutils)
command -v python3 >/dev/null 2>&1 || need+=(python3)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v tc >/dev/null 2>&1 || need+=(iproute2)
command -v nsenter >/dev/null 2>&1 || need+=(util-linux)
# Dependency-analysis tests: real programs (/usr/bin/curl, /usr/bin/python3) and gcc.
command -v gcc >/dev/null 2>&1 || need+=(gcc)
# The binary's allocator, jemalloc, is built from C with make.
command -v make >/dev/null 2>&1 || need+=(make)
[ -x /usr/bin/curl ] || need+=(curl)
[ -x /usr/bin/python3 ] || need+=(python3)
# `teesfs report`'s pages are checked in a real browser (teesfs/tests/it/report.rs).
[ -x /usr/bin/chromium ] || need+=(chromium)
# Baselines of `teesfs lab bench` and the lab's Slurm test: BitTorrent and real Slurm.
command -v aria2c >/dev/null 2>&1 || need+=(aria2)
command -v mktorrent >/dev/null 2>&1 || need+=(mktorrent)
[ -x /usr/sbin/munged ] || command -v munged >/dev/null 2>&1 || need+=(munge)
[ -x /usr/sbin/slurmctld ] || command -v slurmctld >/dev/null 2>&1 || need+=(slurmctld)
[ -x /usr/sbin/slurmd ] || command -v slurmd >/dev/null 2>&1 || need+=(slurmd)
command -v sbcast >/dev/null 2>&1 || need+=(slurm-client)
# Container images (issue 34): the image launch's baselines (a registry with skopeo and
# umoci, sbcast of a squashfs, squashfuse over HTTP from nginx with httpdirfs) and the
# test image (scripts/image-build.sh: mmdebstrap, umoci, mksquashfs).
command -v umoci >/dev/null 2>&1 || need+=(umoci)
command -v skopeo >/dev/null 2>&1 || need+=(skopeo)
command -v mksquashfs >/dev/null 2>&1 || need+=(squashfs-tools)
command -v squashfuse >/dev/null 2>&1 || need+=(squashfuse)
command -v docker-registry >/dev/null 2>&1 || need+=(docker-registry)
command -v httpdirfs >/dev/null 2>&1 || need+=(httpdirfs)
[ -x /usr/sbin/nginx ] || need+=(nginx-light)
command -v mmdebstrap >/dev/null 2>&1 || need+=(mmdebstrap)
# POSIX ACLs (the prolog shares a job's files with its owner): libacl's headers to link.
[ -f /usr/include/sys/acl.h ] || need+=(libacl1-dev)
# The package test (teesfs/tests/it/packaging.rs) lists and lints the RPMs.
command -v rpm >/dev/null 2>&1 || need+=(rpm)
command -v rpmlint >/dev/null 2>&1 || need+=(rpmlint)
# cargo-deb works out the .deb's Depends with dpkg-shlibdeps.
command -v dpkg-shlibdeps >/dev/null 2>&1 || need+=(dpkg-dev)
# The SPANK plugin (spank/): Slurm's headers, and libclang for the bindings generated from them.
[ -f /usr/include/slurm/spank.h ] || need+=(libslurm-dev)
ls /usr/lib/llvm-*/lib/libclang.so* /usr/lib/llvm-*/lib/libclang-*.so.1 >/dev/null 2>&1 || need+=(libclang-dev)
# Container images as layers (issue 34): `teesfs publish --image` reads squashfs and SIF
# files through sqfs2tar (squashfs-tools-ng); its tests build images with umoci, convert
# them with skopeo and make squashfs files with mksquashfs (squashfs-tools).
command -v sqfs2tar >/dev/null 2>&1 || need+=(squashfs-tools-ng)
command -v umoci >/dev/null 2>&1 || need+=(umoci)
command -v skopeo >/dev/null 2>&1 || need+=(skopeo)
command -v mksquashfs >/dev/null 2>&1 || need+=(squashfs-tools)
if [ "${TEESFS_NEED_PIP:-0}" = 1 ] && ! python3 -m pip --version >/dev/null 2>&1; then
    need+=(python3-pip)
fi
if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "teesfs: please install: ${need[*]} (apt-get install ${need[*]})" >&2
        exit 1
    fi
    echo "installing ${need[*]} ..."
    # The lab runs its own munged, slurmctld and slurmd inside namespaces with generated
    # configuration; the packages' services must not start on the host while installing.
    policy=/usr/sbin/policy-rc.d
    added_policy=0
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy"
        chmod 755 "$policy"
        added_policy=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
    if [ "$added_policy" = 1 ]; then
        rm -f "$policy"
    fi
fi
if [ ! -e /dev/fuse ] && [ "$(id -u)" -eq 0 ]; then
    modprobe fuse 2>/dev/null || true
fi
