#!/usr/bin/env bash
# Builds the `teesfs lab demo` application layer: a small Python application (`app`) with
# real dependencies from PyPI (rich, requests and their dependencies, which it imports at
# start) plus numpy (in the layer, not needed to start), installed with `pip install
# --target`, byte-compiled, and the list of files the application reads at start-up
# written beside the layer (for the scripts; `teesfs lab demo` records its urgent set
# with `teesfs record`).
#
# Usage: lab/scripts/demo-layer.sh OUT_DIR      -> OUT_DIR/layer, OUT_DIR/urgent.txt
set -euo pipefail
out=${1:?usage: $0 OUT_DIR}
py=${PYTHON:-python3}
if [ -f "$out/urgent.txt" ] && [ -d "$out/layer/app" ]; then
    echo "demo layer already built in $out"
    exit 0
fi
rm -rf "$out/layer" "$out/urgent.txt"
mkdir -p "$out/layer"
echo "== pip install --target $out/layer (rich, requests, numpy)"
"$py" -m pip install --quiet --disable-pip-version-check --no-compile \
    --target "$out/layer" rich requests numpy
mkdir -p "$out/layer/app"
cat > "$out/layer/app/__init__.py" <<'PY'
"""The lab demo application: imports real libraries from the layer and reports."""
PY
cat > "$out/layer/app/main.py" <<'PY'
"""Starts like a real tool would: imports its dependencies, renders a line with rich."""
import sys
import time

t0 = time.perf_counter()
import requests  # noqa: E402
import rich  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402


def main(host: str) -> None:
    table = Table(title=None)
    table.add_column("host")
    table.add_column("requests")
    table.add_row(host, requests.__version__)
    console = Console(file=sys.stderr, width=60, color_system=None)
    console.print(table)
    print(f"app ok on {host}: requests {requests.__version__}, imports "
          f"{(time.perf_counter() - t0) * 1000:.0f} ms")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "?")
PY
"$py" -m compileall -q "$out/layer" >/dev/null || true
echo "== recording the files the application reads at start"
"$py" - "$out/layer" > "$out/urgent.txt" <<'PY'
import os, subprocess, sys
layer = os.path.realpath(sys.argv[1])
# What Python reads of each module: its byte code where it is cached, else its file (a
# source without byte code, an extension module). A source beside its byte code is only
# looked at, not read.
probe = (
    "import os, sys, runpy; sys.path.insert(0, %r); sys.argv=['app','probe']; "
    "runpy.run_module('app.main', run_name='__main__'); "
    "read = lambda m: (getattr(m,'__cached__',None) if os.path.isfile(getattr(m,'__cached__',None) or '') "
    "else getattr(m,'__file__',None)); "
    "print('\\n'.join(f for f in map(read, list(sys.modules.values())) if f), file=sys.stderr)"
) % layer
r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
seen = set()
for line in r.stderr.splitlines():
    p = os.path.realpath(line.strip())
    if p.startswith(layer + "/") and os.path.isfile(p):
        rel = p[len(layer) + 1:]
        if rel not in seen:
            seen.add(rel)
            print(rel)
PY
echo "layer: $(du -sh "$out/layer" | cut -f1), $(find "$out/layer" -type f | wc -l) files; urgent set: $(wc -l < "$out/urgent.txt") files"
