"""The cost model's predictions against measurements, in one run.

    python bench/cost.py [--repeats 7] [--skip-zk]

CPU: ``cg.cost(step, "cpu").seconds`` against the median time of the compiled NumPy step, for the
bench models (MLP 784-256-256-10 b128, the digits CNN b128, the GPT d128 S64 B16 of bench/gpt_cpu.py) and
the examples' own steps at their defaults (iris, digits, digits_cnn: small steps, where each line's calls
dominate).
ZK: the Ligero time ``cg.cost(step, "zk").seconds`` predicts against the prover's median time, for the
cases of ``bench/prover.py`` (fixed(16,8), the 51-bit field; synthetic product circuits too). Ratios are predicted / measured. Both calibrations
are measured again at the start of the run (``--keep-calibration`` uses the cached ones), so that
prediction and measurement see the same machine load.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import machine, median_time, table  # noqa: E402

import circuitgrad as cg  # noqa: E402
from circuitgrad import nn  # noqa: E402


def cpu_cases():
    rng = np.random.default_rng(0)
    B = 128
    yield ("MLP 784-256-256-10 b128", nn.mlp(B, [784, 256, 256, 10]), nn.sgd(0.1),
           rng.normal(size=(B, 784)), rng.integers(0, 10, B))
    cnn = cg.sequential([nn.conv2d(B, 1, 8, 8, 16, kernel=3, padding=1), nn.relu(B, 16, 8, 8),
                         nn.max_pool2d(B, 16, 8, 8, 2), nn.flatten(B, 16, 4, 4), nn.dense(B, 256, 10)])
    yield "digits CNN b128", cnn, nn.adam(1e-3), rng.normal(size=(B, 1, 8, 8)), rng.integers(0, 10, B)
    Bg, S, V = 16, 64, 96
    yield ("GPT d128 h4 L2 S64 B16", nn.gpt(Bg, S, V, d=128, heads=4, layers=2), nn.adamw(3e-3),
           rng.integers(0, V, (Bg, S)), rng.integers(0, V, (Bg, S)))


def example_cases():
    """The examples' training steps at their defaults: (name, compiled step, x, y)."""
    import importlib
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
    for name in ("iris", "digits", "digits_cnn"):
        spec = importlib.import_module(name).model()
        x, y = next(iter(spec.data(0)))
        yield f"examples/{name}.py", spec.compile(), x, y


#: the cases of bench/prover.py whose proofs take seconds (syn1e6 takes about 35 s: add it with --zk-cases)
ZK_CASES = ["iris-predict", "iris8", "iris32", "digits", "cnn8", "gpt-softmax", "gpt-spherical", "syn8k", "syn1e5"]


def zk_circuit(case: str):
    """The circuit and witness of a bench/prover.py case."""
    import prover
    if case.startswith("syn"):
        return prover.synthetic({"syn8k": 8000, "syn1e5": 10 ** 5, "syn1e6": 10 ** 6}[case])
    return prover._model_circuit(case)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--skip-zk", action="store_true")
    ap.add_argument("--skip-cpu", action="store_true")
    ap.add_argument("--zk-cases", nargs="*", default=ZK_CASES, help="bench/prover.py cases to predict and prove")
    ap.add_argument("--keep-calibration", action="store_true",
                    help="use the cached calibrations (default: measure them again, in this run)")
    a = ap.parse_args()
    from circuitgrad.backends.zk import cost as zk_cost
    from circuitgrad.costmodel import cpu
    if not a.keep_calibration:
        if not a.skip_cpu:
            cpu.calibrate(refresh=True)
        if not a.skip_zk:
            zk_cost.calibrate_prover(refresh=True)
    rows = []
    load = os.getloadavg()[0]
    steps = [] if a.skip_cpu else [(name, cg.compile_model(model, loss=nn.softmax_cross_entropy, optimizer=opt), x, y)
                                   for name, model, opt, x, y in cpu_cases()] + list(example_cases())
    for name, step, x, y in steps:
        params = step.init_params(seed=0)
        measured = median_time(lambda: step.step(params, x, y), a.repeats, inner=max(1, int(2e-3 / max(
            cg.cost(step, "cpu").seconds, 1e-6))))
        c = cg.cost(step, "cpu")
        rows.append(["cpu", name, f"{c.flops / 1e6:.1f}M", f"{c.bytes / 1e6:.1f}M", f"{c.seconds * 1e3:.2f} ms",
                     f"{measured * 1e3:.2f} ms", f"{c.seconds / measured:.2f}"])
    if not a.skip_zk:
        from circuitgrad.backends.zk.systems import ligero
        for case in a.zk_cases:
            circuit, wit = zk_circuit(case)
            predicted = zk_cost.prover_seconds(circuit)                   # what cg.cost(step, "zk") reports
            measured = median_time(lambda: ligero.prove(circuit, wit, check=False), a.repeats)
            r = circuit.r1cs
            rows.append(["zk", case, f"{r.n_constraints:,} + {r.n_lookups:,} lookups", "", f"{predicted:.3f} s",
                         f"{measured:.3f} s", f"{predicted / measured:.2f}"])
    print(f"cost model vs measurement; {machine()}; medians of {a.repeats}; 1-minute load {load:.1f} at the start")
    print(table(["target", "case", "FLOPs / size", "bytes", "predicted", "measured", "ratio"], rows))


if __name__ == "__main__":
    main()
