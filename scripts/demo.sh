#!/usr/bin/env bash
# Sets up .venv (if needed) and runs the main demo: iris, digits (an MLP) and the digits CNN, float32 and
# exact fixed point, then proves two iris training steps in zero knowledge and verifies the proofs, with public
# parameters and as a private run (commitments and a committed dataset).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then "$PY" -m venv .venv; fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[examples]'
.venv/bin/circuitgrad info
for data in iris digits digits_cnn; do
  for dtype in float32 fixed; do
    echo "== examples/$data.py --dtype $dtype"
    .venv/bin/python "examples/$data.py" --dtype "$dtype"
  done
done
echo "== zero-knowledge proofs of two iris training steps (native Ligero prover: no setup, no Node.js)"
.venv/bin/circuitgrad zk prove examples/iris.py --system ligero --steps 2 --out out/demo-proofs
.venv/bin/circuitgrad zk verify examples/iris.py out/demo-proofs --system ligero --init-seed 0
echo "== a private run: weights behind commitments, batches proved to be rows of the committed training set"
.venv/bin/circuitgrad zk prove examples/iris.py --steps 2 --private --workers 1 --out out/demo-run | tee out/demo-run.log
C0=$(sed -n 's/^starting commitment c0 //p' out/demo-run.log)
.venv/bin/circuitgrad zk verify examples/iris.py out/demo-run --private --c0 "$C0" --steps 2
