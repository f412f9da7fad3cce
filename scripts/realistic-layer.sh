#!/usr/bin/env bash
# Builds a realistic scientific Python layer for read-path measurements (issue 28 item 2):
# numpy, scipy, pandas, matplotlib, scikit-learn and sympy from PyPI with their
# dependencies, installed with `pip install --target`, byte-compiled, plus an application
# (`sciapp`) whose start imports the stack and does a little work with each part, as a
# scientific tool does at start. Its imports read a few hundred MB of the layer.
#
# Everything goes under opt/sciapp in the layer (mounted over "/", pip's own `bin/` at the
# layer's root would hide the node's /bin), as in lab/scripts/pypi-layer.sh, which builds
# the smaller stack `teesfs lab launch` uses.
#
# Usage: scripts/realistic-layer.sh OUT_DIR     -> OUT_DIR/layer/opt/sciapp
# Start: PYTHONPATH=OUT_DIR/layer/opt/sciapp python3 -m sciapp
set -euo pipefail
out=${1:?usage: $0 OUT_DIR}
py=${PYTHON:-python3}
dest="$out/layer/opt/sciapp"
if [ -f "$dest/sciapp/__main__.py" ]; then
    echo "realistic layer already built in $out"
    exit 0
fi
rm -rf "$out/layer"
mkdir -p "$dest"
echo "== pip install --target $dest (numpy scipy pandas matplotlib scikit-learn sympy)"
"$py" -m pip install --quiet --disable-pip-version-check --no-compile \
    --target "$dest" numpy scipy pandas matplotlib scikit-learn sympy
mkdir -p "$dest/sciapp"
cat > "$dest/sciapp/__init__.py" <<'PY'
"""A scientific application's start: numpy, scipy, pandas, matplotlib, scikit-learn, sympy."""
PY
cat > "$dest/sciapp/__main__.py" <<'PY'
"""Imports its stack, solves small problems with each part and renders a figure to memory."""
import io
import time

t0 = time.perf_counter()
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import scipy.linalg  # noqa: E402
import scipy.optimize  # noqa: E402
import scipy.sparse  # noqa: E402
import scipy.signal  # noqa: E402
import scipy.stats  # noqa: E402
import sklearn.linear_model  # noqa: E402
import sklearn.ensemble  # noqa: E402
import sympy  # noqa: E402
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

a = scipy.sparse.random(200, 200, density=0.05, random_state=1).toarray() + np.eye(200)
x = scipy.linalg.solve(a, np.ones(200))
r = scipy.optimize.minimize_scalar(lambda v: (v - 2.0) ** 2)
df = pd.DataFrame({"x": x[:20], "i": range(20)}).describe()
m = sklearn.linear_model.LinearRegression().fit(np.arange(20).reshape(-1, 1), x[:20])
s = sympy.integrate(sympy.sin(sympy.Symbol("t")) ** 2)
fig, ax = plt.subplots(figsize=(3, 2))
ax.plot(x[:50])
ax.set_title("sciapp")
buf = io.BytesIO()
fig.savefig(buf, format="png")
print(f"sciapp ok: numpy {np.__version__}, pandas {pd.__version__}, min at {r.x:.2f}, "
      f"png {len(buf.getvalue())} bytes, start {(time.perf_counter() - t0) * 1000:.0f} ms")
PY
"$py" -m compileall -q "$out/layer" >/dev/null || true
echo "layer: $(du -sh "$out/layer" | cut -f1), $(find "$out/layer" -type f | wc -l) files"
