#!/usr/bin/env bash
# Builds the container image of the image launch benchmark (issue 34): a Debian bookworm
# base from `mmdebstrap` with python3, and a second layer with a scientific Python stack
# from PyPI (numpy, scipy, pandas, matplotlib, scikit-learn, sympy, pyarrow, numba) and an
# application (`sciapp`) whose start imports it. The second layer also deletes the base's
# manuals, so the image carries whiteouts. More than 1 GB unpacked.
#
# Writes, under OUT_DIR:
#   oci/          an OCI image layout, tag `sci` (what `skopeo copy oci:OUT_DIR/oci:sci ...` reads)
#   rootfs/       the image unpacked (`umoci unpack`): the tree every method must deliver
#   image.sqfs    the same tree as a squashfs (what enroot/pyxis and Apptainer ship)
#
# Usage: sudo scripts/image-build.sh OUT_DIR     (root: mmdebstrap and umoci keep owners)
# Start: chroot OUT_DIR/rootfs python3 -m sciapp
# Needs: mmdebstrap umoci squashfs-tools (scripts/deps.sh installs them), Debian's mirror
# and PyPI.
set -euo pipefail
out=${1:?usage: $0 OUT_DIR}
py=${PYTHON:-python3}
if [ -f "$out/image.sqfs" ] && [ -d "$out/oci" ] && [ -f "$out/rootfs/opt/sciapp/sciapp/__main__.py" ]; then
    echo "image already built in $out"
    exit 0
fi
[ "$(id -u)" -eq 0 ] || { echo "image-build.sh: run as root (mmdebstrap and umoci keep owners)" >&2; exit 1; }
for t in mmdebstrap umoci mksquashfs; do
    command -v "$t" >/dev/null || { echo "image-build.sh: $t is missing: bash scripts/deps.sh" >&2; exit 1; }
done
rm -rf "$out/oci" "$out/bundle" "$out/rootfs" "$out/image.sqfs" "$out/base"
mkdir -p "$out"

echo "== mmdebstrap: bookworm minbase with python3"
mmdebstrap --quiet --variant=minbase --include=python3,ca-certificates bookworm "$out/base" \
    http://deb.debian.org/debian

echo "== layer 1: the base"
umoci init --layout "$out/oci"
umoci new --image "$out/oci:base"
umoci unpack --image "$out/oci:base" "$out/bundle"
tar -C "$out/base" -cf - . | tar -C "$out/bundle/rootfs" -xpf -
rm -rf "$out/base"
umoci repack --image "$out/oci:base" "$out/bundle"

echo "== layer 2: the scientific stack and sciapp"
site="$out/bundle/rootfs/usr/local/lib/python3.11/dist-packages"
mkdir -p "$site"
"$py" -m pip install --quiet --disable-pip-version-check --no-compile \
    --only-binary=:all: --python-version 3.11 --implementation cp \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
    --target "$site" numpy scipy pandas matplotlib scikit-learn sympy pyarrow numba
app="$out/bundle/rootfs/opt/sciapp/sciapp"
mkdir -p "$app"
echo '"""A scientific application start inside its image."""' >"$app/__init__.py"
cat >"$app/__main__.py" <<'PY'
"""Imports its stack, solves small problems with each part and renders a figure to memory."""
import io
import time

t0 = time.perf_counter()
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pyarrow  # noqa: E402
import scipy.linalg  # noqa: E402
import scipy.optimize  # noqa: E402
import scipy.sparse  # noqa: E402
import scipy.stats  # noqa: E402
import sklearn.linear_model  # noqa: E402
import sympy  # noqa: E402
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

a = scipy.sparse.random(200, 200, density=0.05, random_state=1).toarray() + np.eye(200)
x = scipy.linalg.solve(a, np.ones(200))
r = scipy.optimize.minimize_scalar(lambda v: (v - 2.0) ** 2)
df = pd.DataFrame({"x": x[:20], "i": range(20)})
t = pyarrow.Table.from_pandas(df)
m = sklearn.linear_model.LinearRegression().fit(np.arange(20).reshape(-1, 1), x[:20])
s = sympy.integrate(sympy.sin(sympy.Symbol("t")) ** 2)
fig, ax = plt.subplots(figsize=(3, 2))
ax.plot(x[:50])
buf = io.BytesIO()
fig.savefig(buf, format="png")
print(f"sciapp ok: numpy {np.__version__}, arrow rows {t.num_rows}, min at {r.x:.2f}, "
      f"png {len(buf.getvalue())} bytes, start {(time.perf_counter() - t0) * 1000:.0f} ms")
PY
# Byte-compile with the image's own interpreter, as an image build does.
chroot "$out/bundle/rootfs" python3 -m compileall -q /opt/sciapp /usr/local/lib/python3.11/dist-packages \
    >/dev/null || true
# Deletions in a layer: whiteouts in the image.
rm -rf "$out/bundle/rootfs/usr/share/man" "$out/bundle/rootfs/usr/share/doc"
umoci repack --image "$out/oci:sci" "$out/bundle"
umoci config --image "$out/oci:sci" \
    --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --config.env PYTHONPATH=/opt/sciapp --config.env PYTHONDONTWRITEBYTECODE=1 \
    --config.entrypoint python3 --config.cmd=-m --config.cmd=sciapp --config.workingdir /opt/sciapp \
    --config.label org.opencontainers.image.title=sciapp
umoci gc --layout "$out/oci"
mv "$out/bundle/rootfs" "$out/rootfs"
rm -rf "$out/bundle"

echo "== squashfs"
mksquashfs "$out/rootfs" "$out/image.sqfs" -quiet -no-progress >/dev/null
echo "image: $(du -sh "$out/rootfs" | cut -f1) unpacked, $(find "$out/rootfs" -type f | wc -l) files," \
    "OCI $(du -sh "$out/oci" | cut -f1), squashfs $(du -sh "$out/image.sqfs" | cut -f1)"
