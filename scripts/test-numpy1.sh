#!/usr/bin/env bash
# The core tests on NumPy 1.26, the oldest NumPy circuitgrad supports (the main suite runs on the current NumPy 2).
# Sets up .venv-numpy1 with circuitgrad[test], NumPy 1.26.4 and the reference open-hypergraphs 0.1.3 (with its
# own pins, which NumPy 1.26 satisfies), then runs the core tests: the test files that are
# not test_zk*, test_fpga* or test_gpu* (the backends, which the main suite covers), without the slow ones.
# NumPy 1.26 has no wheels for Python 3.13 and newer: there the step is skipped with a note.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! "$PY" -c "import sys; sys.exit(sys.version_info >= (3, 13))"; then
  echo "note: NumPy 1.26 has no wheels for $("$PY" -V); the NumPy 1.26 core tests are skipped"; exit 0
fi
if [ ! -x .venv-numpy1/bin/python ]; then "$PY" -m venv .venv-numpy1 || exit 1; fi
.venv-numpy1/bin/python -m pip install -q --upgrade pip || exit 1
.venv-numpy1/bin/python -m pip install -q -e '.[test]' 'numpy==1.26.4' 'open-hypergraphs==0.1.3' \
  || exit 1
.venv-numpy1/bin/python -c "import numpy, scipy; print('NumPy 1 core tests on NumPy', numpy.__version__, 'SciPy', scipy.__version__)"
.venv-numpy1/bin/python -m pytest -q -rs -m "not slow" -p no:cacheprovider \
  --ignore-glob='tests/test_zk*' --ignore-glob='tests/test_fpga*' --ignore-glob='tests/test_gpu*' "$@"
rc=$?
if [ $rc -eq 5 ]; then echo "no tests collected"; exit 0; fi
exit $rc
