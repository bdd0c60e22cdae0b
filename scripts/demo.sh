#!/usr/bin/env bash
# Sets up .venv (if needed) and runs the main demo: iris and digits, float32 and exact fixed point.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then "$PY" -m venv .venv; fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[examples]'
.venv/bin/circuitgrad info
for data in iris digits; do
  for dtype in float32 fixed; do
    echo "== examples/$data.py --dtype $dtype"
    .venv/bin/python "examples/$data.py" --dtype "$dtype"
  done
done
