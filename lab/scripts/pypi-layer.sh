#!/usr/bin/env bash
# Builds a realistic Python software layer for `teesfs lab launch` (issue 15's "realistic
# layers"): scipy, pandas and matplotlib with their dependencies from PyPI, installed with
# `pip install --target`, byte-compiled, plus an application (`sciapp`) that imports them
# and draws a figure, as a scientific tool does at start. No urgent list is written:
# `teesfs lab launch` records one with `teesfs record` (or learns it, see --learn).
#
# Everything goes under opt/sciapp in the layer: the layer is mounted over "/", and pip's
# own `bin/` at the layer's root would hide the node's /bin.
#
# Usage: lab/scripts/pypi-layer.sh OUT_DIR      -> OUT_DIR/layer/opt/sciapp
# Then:  sudo teesfs lab launch --layer OUT_DIR/layer \
#          --app 'PYTHONPATH=$TEESFS_MOUNT/opt/sciapp python3 -m sciapp'
set -euo pipefail
out=${1:?usage: $0 OUT_DIR}
py=${PYTHON:-python3}
dest="$out/layer/opt/sciapp"
if [ -f "$dest/sciapp/__main__.py" ]; then
    echo "pypi layer already built in $out"
    exit 0
fi
rm -rf "$out/layer"
mkdir -p "$dest"
echo "== pip install --target $dest (scipy, pandas, matplotlib)"
"$py" -m pip install --quiet --disable-pip-version-check --no-compile \
    --target "$dest" scipy pandas matplotlib
mkdir -p "$dest/sciapp"
cat > "$dest/sciapp/__init__.py" <<'PY'
"""A scientific application's start: numpy, scipy, pandas and matplotlib."""
PY
cat > "$dest/sciapp/__main__.py" <<'PY'
"""Imports its stack, solves a small problem and renders a figure to memory."""
import io
import socket
import time

t0 = time.perf_counter()
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import scipy.linalg  # noqa: E402
import scipy.optimize  # noqa: E402
import scipy.sparse  # noqa: E402
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

a = scipy.sparse.random(200, 200, density=0.05, random_state=1).toarray() + np.eye(200)
x = scipy.linalg.solve(a, np.ones(200))
r = scipy.optimize.minimize_scalar(lambda v: (v - 2.0) ** 2)
df = pd.DataFrame({"x": x[:20], "i": range(20)}).describe()
fig, ax = plt.subplots(figsize=(3, 2))
ax.plot(x[:50])
ax.set_title("sciapp")
buf = io.BytesIO()
fig.savefig(buf, format="png")
print(f"sciapp ok on {socket.gethostname()}: numpy {np.__version__}, pandas {pd.__version__}, "
      f"min at {r.x:.2f}, png {len(buf.getvalue())} bytes, start {(time.perf_counter() - t0) * 1000:.0f} ms")
PY
"$py" -m compileall -q "$out/layer" >/dev/null || true
echo "layer: $(du -sh "$out/layer" | cut -f1), $(find "$out/layer" -type f | wc -l) files"
