#!/usr/bin/env bash
# Sets up .venv (if needed) with the test dependencies and runs the whole test suite.
# PyTorch (CPU build 2.13.0, for the autograd cross-check) is installed when available;
# without it those tests are skipped, not failed.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then "$PY" -m venv .venv || exit 1; fi
.venv/bin/python -m pip install -q --upgrade pip || exit 1
.venv/bin/python -m pip install -q -e '.[test]' || exit 1
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  .venv/bin/python -m pip install -q torch==2.13.0 || echo "note: PyTorch not installable here; its cross-check tests will be skipped"
fi
.venv/bin/python -m pytest -q -rs "$@"
rc=$?
if [ $rc -eq 5 ]; then echo "no tests collected"; exit 0; fi
exit $rc
