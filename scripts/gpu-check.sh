#!/usr/bin/env bash
# One-call device check of the CuPy backend (docs/GPU.md, "Device check"): NVRTC compile of every tinygpt
# kernel, tests/test_gpu_device.py, three tinygpt AdamW steps against NumPy, ms per step against PyTorch
# eager, a JSON report. Within 5 minutes on an H100 (GPU_CHECK_BUDGET seconds in all, default 290).
#
#     scripts/gpu-check.sh [REPORT]            # REPORT: default gpu-check.json
#
# Setup on a bare machine: uses .venv when its Python runs (else creates it, --system-site-packages, so a
# CuPy or PyTorch installed with the system Python counts), then installs what is missing with pip
# ('.[cuda13]' or '.[cuda12]', by the driver's CUDA version, and pytest; '.[torch]' only with GPU_CHECK_INSTALL_TORCH=1: CUDA PyTorch is gigabytes). Offline,
# pip fails fast and the package is registered without dependencies; the report names what is missing.
# The checks themselves are scripts/gpu_check.py. Exit status: 0 pass (or incomplete), 1 a failure or no device.
# GPU_CHECK_BENCH=1 runs bench/gpu_step.py after them (REPORT-step.json), then bench/gpu_attention.py
# (REPORT-attention.json), in what is left of GPU_CHECK_TOTAL seconds for the whole command (default 570;
# GPU_BENCH_BUDGET sets the step benchmark's own). gpu_step.py measures the GPTs first; rows past
# its budget are skipped (then: bench/gpu_step.py --models mlp,cnn,mlp4096 on its own).
set -uo pipefail
REPORT=${1:-gpu-check.json}
case "$REPORT" in /*) ;; *) REPORT="$PWD/$REPORT" ;; esac      # relative to where it is called from
cd "$(dirname "$0")/.." || exit 1
BUDGET=${GPU_CHECK_BUDGET:-290}
VENV=${GPU_CHECK_VENV:-.venv}
PY=${PYTHON:-python3}
START=$SECONDS
left() { echo $((BUDGET - (SECONDS - START))); }
note() { echo "gpu-check: setup: $*" >&2; }

if ! "$VENV/bin/python" -c "import sys" 2>/dev/null; then
  [ -e "$VENV" ] && VENV=.venv-gpu-check && note "the existing .venv does not run here; using $VENV"
  if ! "$VENV/bin/python" -c "import sys" 2>/dev/null; then
    "$PY" -m venv --system-site-packages "$VENV" || { note "cannot create $VENV with $PY"; exit 1; }
    # --system-site-packages reaches the base installation only: where $PY is itself a virtual environment
    # (a GPU image's /opt/torch/.venv, holding CuPy and PyTorch), its site-packages are added by a .pth file
    "$PY" -c "import site, sys; sys.prefix != sys.base_prefix and print('\n'.join(site.getsitepackages()))" \
      > "$("$VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/gpu_check_parent.pth"
  fi
fi
VPY=$VENV/bin/python
PIP=("$VPY" -m pip install -q --disable-pip-version-check --retries 0 --timeout 15)
# the CuPy wheel that matches the driver: [cuda13] or [cuda12], by the "CUDA Version" nvidia-smi prints
CUDA_MAJOR=$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9][0-9]*\).*/\1/p' | head -1)
case "${CUDA_MAJOR:-}" in 12) EXTRA=cuda12 ;; *) EXTRA=cuda13 ;; esac
if ! "$VPY" -c "import circuitgrad.backends.gpu, numpy, cupy, pytest" 2>/dev/null; then
  note "installing -e '.[$EXTRA]' and pytest (at most 100 s; driver CUDA ${CUDA_MAJOR:-unknown})"
  if ! timeout 100 "${PIP[@]}" -e ".[$EXTRA]" pytest; then
    note "pip could not install '.[$EXTRA]' (offline?): registering circuitgrad without dependencies"
    "$VPY" -c "import circuitgrad.backends.gpu" 2>/dev/null \
      || timeout 60 "${PIP[@]}" --no-deps --no-build-isolation -e . || note "circuitgrad is not installable here"
  fi
fi
if ! "$VPY" -c "import circuitgrad.backends" 2>/dev/null; then
  # no editable install (no setuptools >= 77 offline): map the three source roots as setup.py does
  SITE=$("$VPY" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  note "importing circuitgrad from the source tree (a finder in $SITE)"
  cat > "$SITE/circuitgrad_gpu_check_finder.py" <<EOF
import importlib.util, os, sys
ROOTS = {"circuitgrad": "circuitgrad", "circuitgrad.backends": "backends", "circuitgrad.examples": "examples"}
class SourceFinder:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name in ROOTS:
            d = os.path.join("$PWD", ROOTS[name])
            return importlib.util.spec_from_file_location(name, os.path.join(d, "__init__.py"),
                                                          submodule_search_locations=[d])
sys.meta_path.insert(0, SourceFinder)
EOF
  echo "import circuitgrad_gpu_check_finder" > "$SITE/circuitgrad_gpu_check_finder.pth"
fi
if [ "${GPU_CHECK_INSTALL_TORCH:-0}" = 1 ] && ! "$VPY" -c "import torch" 2>/dev/null; then
  note "installing '.[torch]' (at most 120 s)"
  timeout 120 "${PIP[@]}" -e '.[torch]' || note "PyTorch not installable: the timing has no PyTorch row"
fi
REST=$(left)
if [ "$REST" -lt 30 ]; then note "setup took $((SECONDS - START)) s of $BUDGET: $REST s is too little to check"; fi
if [ "${GPU_CHECK_BENCH:-0}" = 1 ]; then
  # then the step and attention benchmarks (every precision, graphs, PyTorch's modes), their JSON beside the report
  timeout $((REST + 15)) "$VPY" scripts/gpu_check.py --report "$REPORT" --budget "$((REST > 30 ? REST : 30))"
  RC=$?
  # the benchmarks share what is left of GPU_CHECK_TOTAL seconds for the whole command (default 570: a device
  # session's call may run 600): attention a third of it (30 to 120 s), the step benchmark the rest (at least 60 s)
  LEFT=$((${GPU_CHECK_TOTAL:-570} - (SECONDS - START)))
  ATT=$((LEFT / 3 > 120 ? 120 : LEFT / 3 < 30 ? 30 : LEFT / 3))
  BENCH=${GPU_BENCH_BUDGET:-$((LEFT - ATT - 30 > 60 ? LEFT - ATT - 30 : 60))}
  echo "gpu-check: benchmarks: step ${BENCH} s, attention ${ATT} s" >&2
  timeout $((BENCH + 30)) "$VPY" bench/gpu_step.py --budget "$BENCH" --json "${REPORT%.json}-step.json"
  timeout "$ATT" "$VPY" bench/gpu_attention.py --json "${REPORT%.json}-attention.json"
  exit $RC
fi
exec timeout $((REST + 15)) "$VPY" scripts/gpu_check.py --report "$REPORT" --budget "$((REST > 30 ? REST : 30))"
