#!/usr/bin/env bash
# Sets up .venv (if needed) with the test dependencies and runs the whole test suite on the current NumPy, then
# the core tests on NumPy 1.26 (scripts/test-numpy1.sh, in .venv-numpy1; only when no pytest arguments are given).
# PyTorch (CPU build 2.13.0, for the autograd cross-check), MKL (the optional fast GEMM), NVRTC (the device's
# kernel compiler, run here without a device) and
# snarkjs (npm, for the ZK proof tests) are installed when available; without them those tests
# are skipped or use NumPy, not failed.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then "$PY" -m venv .venv || exit 1; fi
.venv/bin/python -m pip install -q --upgrade pip || exit 1
# the suite runs on NumPy 2 (the current release), also in a .venv made when NumPy 1.26 was the newest allowed
.venv/bin/python -m pip install -q -e '.[test]' 'numpy>=2' || exit 1
# open-hypergraphs 0.1.3, the reference that tests/test_open_hypergraph.py checks the core's own open hypergraphs
# against, pins NumPy 1.26: installed without its dependencies, so this environment keeps the current NumPy
.venv/bin/python -m pip install -q --no-deps 'open-hypergraphs==0.1.3' \
  || echo "note: open-hypergraphs not installable here; the reference comparisons will be skipped"
# PyTorch must import, not only be installed: an install cut short (a full disk, a lost connection) or a
# .venv left by an earlier run can hold a torch that fails to load (a missing libtorch_global_deps.so).
# Such a torch is reinstalled once, and uninstalled if it still fails, so its tests are skipped, not errors.
torch_loads() { .venv/bin/python -c "import torch" 2>/dev/null; }
if ! torch_loads; then
  if .venv/bin/python -m pip show -q torch >/dev/null 2>&1; then
    echo "note: the installed PyTorch fails to load; reinstalling it:"
    .venv/bin/python -c "import torch" 2>&1 | tail -1
    .venv/bin/python -m pip install -q --force-reinstall --no-deps torch==2.13.0
  else
    .venv/bin/python -m pip install -q torch==2.13.0
  fi
  if ! torch_loads; then
    .venv/bin/python -m pip uninstall -q -y torch >/dev/null 2>&1
    echo "note: PyTorch not installable here; its cross-check tests will be skipped"
  fi
fi
if ! .venv/bin/python -c "import glob, sys; sys.exit(not glob.glob(sys.prefix + '/lib/libmkl_rt.so*'))"; then
  .venv/bin/python -m pip install -q 'mkl>=2024' || echo "note: MKL not installable here; NumPy's matmul will be used"
fi
# NVRTC, the compiler a device runs, so that tests/test_gpu_nvrtc.py compiles the generated kernels without one
if ! .venv/bin/python -c "import sys; sys.path.insert(0, 'tests'); import _nvrtc; sys.exit(_nvrtc.load()[0] is None)"; then
  .venv/bin/python -m pip install -q 'nvidia-cuda-nvrtc>=13,<14' \
    || echo "note: NVRTC not installable here; the kernels' NVRTC compile tests will be skipped"
fi
# nvdisasm, so that tests/test_bench_gpu_sass.py counts the compiled attention kernels' instructions
if ! .venv/bin/python -c "import sys; sys.path.insert(0, 'bench'); import gpu_sass; sys.exit(gpu_sass.cuda_tool() is None)"; then
  .venv/bin/python -m pip install -q 'nvidia-cuda-nvdisasm>=13,<14' \
    || echo "note: nvdisasm not installable here; the kernels' instruction counts will be skipped"
fi
if command -v node >/dev/null && command -v npm >/dev/null; then
  # snarkjs for the ZK backend's proof tests (installed once into ~/.cache/circuitgrad/npm)
  .venv/bin/python -c "from circuitgrad.backends.zk.systems.snarkjs import snarkjs; print('snarkjs:', snarkjs())" \
    || echo "note: snarkjs not installable here; its tests will be skipped"
else
  echo "note: Node.js/npm not found; the snarkjs proof tests will be skipped"
fi
.venv/bin/python -c "from circuitgrad import blas; print('circuitgrad GEMM:', blas.name())"
# lint (the rules and why some are left out: [tool.ruff] in pyproject.toml)
.venv/bin/python -m ruff check . || { echo "ruff check failed: fix the findings above"; exit 1; }
.venv/bin/python -c "import numpy, scipy; print('NumPy', numpy.__version__, 'SciPy', scipy.__version__)"
.venv/bin/python -m pytest -q -rs "$@"
rc=$?
if [ $rc -eq 5 ]; then echo "no tests collected"; rc=0; fi
if [ $rc -eq 0 ] && [ $# -eq 0 ]; then bash scripts/test-numpy1.sh || rc=$?; fi
exit $rc
