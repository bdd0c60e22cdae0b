"""Peer benchmark: how long catgrad 0.2.2 takes to compile an MLP training step.

Model: L x ``layers.dense(batch, width, width)`` (matmul + bias + sigmoid),
batch 32 / width 64 by default, MSE loss, SGD (lr 0.01) -- as in catgrad's
``examples/iris.py`` ("hidden" model) with ``compile_model(model, sgd, mse)``.

Per repeat, with a fresh model each time:
  build_s   -- building the model morphism (composing L dense layers).
  compile_s -- model morphism -> callable step class: factor_parameters, the
               training diagram (sgd @ id) >> model >> mse, its reverse
               derivative (Bidirectional functor + adapt), Forget, then
               catgrad's codegen to a Python AST + compile()/exec().  This is
               exactly the "step" path of ``catgrad.compile.compile_model``.
  compile_model_s (only with --with-compile-model) -- the whole
               ``compile_model`` helper used by the examples, which also
               builds/compiles predict, rev and rev_p besides step.
After timing, the compiled step is run once on random data ("ran": true).

Setup (from the repository root):
  python3 -m venv .venv-catgrad
  .venv-catgrad/bin/pip install catgrad==0.2.2   # pulls numpy 1.26, open-hypergraphs
  .venv-catgrad/bin/python bench/peers/catgrad_compile.py --layers 16 64 --repeats 5
catgrad imports its (unused here) Torch backend at import time; if torch is not
installed, the stub in bench/peers/torch_stub is put on sys.path instead.
Prints one JSON line on stdout; progress goes to stderr.
"""
import argparse
import gc
import importlib.metadata
import json
import os
import sys
import time

try:
    import torch  # noqa: F401  (only so catgrad's import of it succeeds)
    TORCH_STUB = False
except ImportError:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_stub"))
    TORCH_STUB = True

import numpy as np
from catgrad import NdArrayType, Dtype, layers, compile_model
from catgrad.compile import B, F, identity, discard
from catgrad.special.parameter import factor_parameters
from catgrad.target.python import to_python_class
from catgrad.target.python.array_backend import Numpy

VERSION = importlib.metadata.version("catgrad")  # expected: 0.2.2
LR = 0.01


def build_model(n_layers, width, batch):
    BATCH = NdArrayType((batch,), Dtype.float32)
    HIDDEN = NdArrayType((width,), Dtype.float32)
    model = layers.dense(BATCH, HIDDEN, HIDDEN, activation=layers.sigmoid)
    for _ in range(n_layers - 1):
        model = model >> layers.dense(BATCH, HIDDEN, HIDDEN, activation=layers.sigmoid)
    return model


def compile_step(model):
    """The "step" part of catgrad.compile.compile_model, verbatim in substance."""
    params, parametrised = factor_parameters(model)
    P, X, Y = params.target, model.source, model.target
    g = (layers.sgd(LR)(P) @ identity(X)) >> parametrised >> layers.mse(Y)
    Rg = B.adapt(B(g), g.source, g.target)
    step_circuit = F(Rg >> (discard(Y) @ identity(P) @ discard(X)))
    Compiled = to_python_class({"step": step_circuit})
    return Compiled, P


def timed(fn, *args):
    gc.collect()
    t0 = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - t0


def run_once(Compiled, P, width, batch):
    """Run the compiled step once on random data; check it returns new params."""
    rng = np.random.default_rng(0)
    p = [rng.normal(0, 0.1, T.shape).astype(np.float32) for T in P]
    x = rng.random((batch, width), dtype=np.float32)
    y = rng.random((batch, width), dtype=np.float32)
    new_p = Compiled(Numpy).step(*p, x, y)
    assert len(new_p) == len(p)
    assert all(a.shape == b.shape and np.all(np.isfinite(a)) for a, b in zip(new_p, p))
    assert any(not np.array_equal(a, b) for a, b in zip(new_p, p)), "step changed nothing"
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, nargs="+", default=[16, 64])
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--with-compile-model", action="store_true",
                    help="also time catgrad's compile_model helper (step+predict+rev+rev_p)")
    args = ap.parse_args()
    if TORCH_STUB:
        print("catgrad: torch not importable, using bench/peers/torch_stub", file=sys.stderr)

    results = []
    for n in args.layers:
        entry = {"layers": n, "build_s": [], "compile_s": []}
        if args.with_compile_model:
            entry["compile_model_s"] = []
        for r in range(args.repeats):
            model, b = timed(build_model, n, args.width, args.batch)
            (Compiled, P), c = timed(compile_step, model)
            entry["build_s"].append(b)
            entry["compile_s"].append(c)
            msg = f"catgrad L={n} rep={r}: build {b:.3f}s compile {c:.3f}s"
            if args.with_compile_model:
                _, cm = timed(compile_model, model, layers.sgd(LR), layers.mse)
                entry["compile_model_s"].append(cm)
                msg += f" compile_model {cm:.3f}s"
            print(msg, file=sys.stderr, flush=True)
        entry["ran"] = run_once(Compiled, P, args.width, args.batch)
        results.append(entry)

    print(json.dumps({"peer": "catgrad", "version": VERSION, "torch_stub": TORCH_STUB,
                      "width": args.width, "batch": args.batch, "results": results}))


if __name__ == "__main__":
    main()
