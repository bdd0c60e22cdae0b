"""FPGA designs: resources, Fmax, cycles and calls per second, synthesized with YoWASP.

    python bench/fpga.py [--only iris-step] [--seeds 3] [--pnr-timeout MINUTES]

For each configuration, the table reports logic cells (nextpnr's count), LUT4s (yosys'), FFs, DSPs,
block RAMs and Fmax from yosys and nextpnr (the median over nextpnr seeds 1..``--seeds``: one placement's
Fmax moves by 10–20% with the seed), beside the Fmax that ``cg.cost`` predicts (its clock model
never saw these designs). It also reports cycles per call
from the exact cycle model (checked against simulation in
``tests/test_fpga.py``) and calls per second at Fmax, and whether one simulated call of the design (per
design, whatever the target) equals the interpreter bit for bit and takes the model's cycles. The model files' rows build what
``circuitgrad fpga synth`` builds: ``examples/iris.py`` (momentum SGD) on both families and a tiny
GPT step of ``examples/tinygpt.py`` on the ECP5 with 2 lanes, and the 784-32-10 MLP of ``examples/digits784.py``
on the ECP5 with 8 lanes (with its test accuracy in float32 and in the design's fixed(16, 8)). The reference rows
come from the issue and hls4ml/FINN figures for comparison; they are not our measurements. The iris training
step is swept over ``macs`` in {1, 2, 4, 8} on both devices. On the UP5K, lanes beyond 2 exceed the DSP blocks
(each lane builds the exp unit's three), and the table says so.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import machine, table  # noqa: E402

import circuitgrad as cg  # noqa: E402
from circuitgrad import nn  # noqa: E402
from circuitgrad.backends import fpga  # noqa: E402
from circuitgrad.backends.fpga import cost  # noqa: E402
from circuitgrad.backends.fpga.synth import DoesNotFit, synthesize  # noqa: E402
from circuitgrad import modelfile  # noqa: E402
from circuitgrad.modelfile import load  # noqa: E402

CONFIGS = [  # name, batch, sizes, function, target, read ports, sweep macs?
    ("iris-step", 8, [4, 16, 3], "step", "ice40-up5k", 2, True),
    ("iris-step", 8, [4, 16, 3], "step", "ecp5-85k", 2, True),
    ("iris-predict", 8, [4, 16, 3], "predict", "ice40-up5k", 2, False),
    ("mlp5-predict", 1, [16, 64, 32, 32, 5], "predict", "ice40-up5k", 1, False),
    ("mlp5-step", 1, [16, 64, 32, 32, 5], "step", "ecp5-85k", 2, False),
    ("dense16x64-predict", 1, [16, 64], "predict", "ice40-up5k", 2, False),   # the reference's design
]
#: the model files' designs (what ``circuitgrad fpga synth`` builds): name, file, options, target, macs
MODELFILES = [
    ("iris-example", "examples/iris.py", {}, "ice40-up5k", 1),
    ("iris-example", "examples/iris.py", {}, "ecp5-85k", 1),
    ("gpt-step", "examples/tinygpt.py", dict(batch=1, seq=8, d=16, heads=2, layers=1, attention="softmax"),
     "ecp5-85k", 2),
    ("gpt-step", "examples/tinygpt.py", dict(batch=1, seq=8, d=16, heads=2, layers=1, attention="softmax"),
     "ice40-up5k", 1),
    ("cnn-step", "examples/digits_cnn.py", dict(batch=4), "ice40-up5k", 1),
    ("mnist-class-step", "examples/digits784.py", {}, "ecp5-85k", 8),
]
#: a new user's MLP: layer norm and GELU after each hidden layer, momentum SGD: name, batch, sizes, target
NORMED = [("mlp-ln-gelu-step", 8, [64, 32, 32, 10], "ice40-up5k")]
UNROLLED = [  # name, sizes, target: tiny layers, fully unrolled with the weights as constants (fpga.unroll)
    ("unrolled-dense", [4, 4], "ice40-up5k"),
    ("unrolled-dense", [4, 8], "ice40-up5k"),
    ("unrolled-dense", [8, 4], "ice40-up5k"),
    ("unrolled-mlp", [4, 8, 3], "ice40-up5k"),
]
REFERENCE = [
    ["reference: single-MAC dense 16→64 (issue)", "ice40-up5k", "-", "~98", "-", "1", "2", "~65", "-", "-"],
    ["reference: unrolled constant multiply", "-", "-", "~75 each", "-", "-", "-", "-", "-", "-"],
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--macs", type=int, nargs="*", default=[1, 2, 4, 8], help="lane counts for the sweeps")
    ap.add_argument("--no-sim", action="store_true", help="skip the simulation check of each design")
    ap.add_argument("--seeds", type=int, default=3,
                    help="place and route each design with nextpnr seeds 1..N; Fmax is the median (default 3)")
    ap.add_argument("--pnr-timeout", type=float, default=None, metavar="MINUTES",
                    help="stop a place-and-route run still routing after MINUTES: the median is over the others")
    a = ap.parse_args()
    limit = None if a.pnr_timeout is None else 60 * a.pnr_timeout
    rows, lut4, steps = [], {}, {}

    simulated = {}

    def exact(d, step, batch) -> str:
        """Simulate the design once (per design, whatever the target): bit-exact with the interpreter, and
        its cycles the model's?"""
        key = (id(step), d.function, d.macs, d.read_ports)
        if key not in simulated and not a.no_sim:
            p = step.init_params(seed=0)
            x, y = batch
            got, n = fpga.simulate(d, p, x, y if d.function == "step" else None)
            want = step.step(p, x, y) if d.function == "step" else {
                "predict": step.fn("predict").run(*[p[k] for k in step.param_names], step.cast(x, "x"))[0]}
            ok = all(np.array_equal(got[k], want[k]) for k in want) and n == d.cycles
            simulated[key] = "yes" if ok else f"NO ({n} cycles, model {d.cycles})"
        return simulated.get(key, "not run")

    def build(label, target, make, step, batch, sweep_key=None):
        try:
            d = make()
            sim = exact(d, step, batch)
            with tempfile.TemporaryDirectory() as tmp:
                r = synthesize(d, target, tmp, log=lambda s: print("  " + s, file=sys.stderr), seeds=a.seeds, pnr_timeout=limit)
            predicted = cost.fmax(d.microcode, target, d.macs, d.read_ports)
            rams = f"{r.brams} + {r.sprams}" if r.sprams else r.brams
            unrouted = [str(k + 1) for k, f in enumerate(r.fmax_runs) if f is None]
            fmax = f"{r.fmax_mhz:.1f}" + (f" (seed {', '.join(unrouted)} unrouted in {a.pnr_timeout:g} min)"
                                          if unrouted else "")
            rows.append([label, target, r.logic_cells, r.lut4, r.ffs, r.dsps, rams, fmax,
                         f"{predicted:.1f} ({predicted / r.fmax_mhz:.2f})", r.cycles_per_call,
                         f"{r.calls_per_second:.0f}", sim])
            if sweep_key:
                lut4[sweep_key] = r.lut4
        except (NotImplementedError, DoesNotFit) as e:
            rows.append([label, target, f"not built: {e}"] + [""] * 9)
        except RuntimeError as e:                      # a tool failed: report it, keep going
            rows.append([label, target, f"tool failed: {str(e).splitlines()[0]}"] + [""] * 9)

    for name, B, sizes, fn, target, ports, sweep in CONFIGS:
        if a.only and name not in a.only:
            continue
        step = steps.setdefault((B, tuple(sizes)), cg.compile_model(
            nn.mlp(B, sizes), loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.125), dtype=cg.fixed(16, 8)))
        rng = np.random.default_rng(0)
        batch = (rng.normal(size=(B, sizes[0])), rng.integers(0, sizes[-1], size=B))
        for macs in (a.macs if sweep else [1]):
            build(f"{name} {'-'.join(map(str, sizes))} b{B} macs={macs} ports={ports}", target,
                  lambda: fpga.compile(step, function=fn, macs=macs, read_ports=ports), step, batch,
                  (name, target, macs) if sweep else None)
    for name, path, options, target, macs in MODELFILES:
        if a.only and name not in a.only:
            continue
        fixed = cg.fixed(16, 8)
        spec = load(path, dict(options, dtype=fixed) if "gpt" in name else options)
        step = steps.setdefault(path, spec.compile(fixed))
        batch = modelfile.check_batch(step, next(modelfile.batches(spec, 0, path)), 0, path)
        build(f"{name} ({path}{''.join(f' {k}={v}' for k, v in options.items())}) macs={macs}", target,
              lambda: cost.planned(step, target, macs=macs), step, batch)
    for name, B, sizes, target in NORMED:
        if a.only and name not in a.only:
            continue
        fixed = cg.fixed(16, 8)
        layers = [nn.dense(B, sizes[0], sizes[1], dtype=fixed)]
        for n, m in zip(sizes[1:-1], sizes[2:]):
            layers += [nn.layer_norm(B, n, dtype=fixed), nn.gelu(B, n, dtype=fixed), nn.dense(B, n, m, dtype=fixed)]
        model = layers[0]
        for layer in layers[1:]:
            model = model >> layer
        step = cg.compile_model(model, loss=nn.softmax_cross_entropy, optimizer=nn.momentum(0.05, 0.9), dtype=fixed)
        rng = np.random.default_rng(0)
        batch = (rng.normal(size=(B, sizes[0])), rng.integers(0, sizes[-1], size=B))
        build(f"{name} {'-'.join(map(str, sizes))} b{B} momentum", target, lambda: cost.planned(step, target), step, batch)
    print(f"FPGA designs (fixed(16,8), YoWASP yosys + nextpnr, Fmax the median of nextpnr seeds 1..{a.seeds}); "
          f"{machine()}")
    print(table(["design", "target", "logic cells", "LUT4s", "FFs", "DSPs", "BRAMs + SPRAMs", "Fmax MHz",
                 "predicted MHz (ratio)", "cycles/call", "calls/s", "bit-exact, cycles exact"],
                rows + [r[:8] + ["-"] + r[8:] + ["-"] for r in REFERENCE]))
    if not a.only or "mnist-class-step" in a.only:
        accuracy()
    urows, ulut = [], {}
    for name, sizes, target in UNROLLED:
        if a.only and name not in a.only:
            continue
        label = f"{name} {'-'.join(map(str, sizes))} b1"
        step = cg.compile_model(nn.mlp(1, sizes), loss=nn.mse, optimizer=nn.sgd(0.125), dtype=cg.fixed(16, 8))
        p = step.init_params(seed=0)
        mults = sum(int(np.count_nonzero(np.asarray(p[k]))) for k in step.param_names if np.asarray(p[k]).ndim == 2)
        try:
            d = fpga.unroll(step, p)
            with tempfile.TemporaryDirectory() as tmp:
                r = synthesize(d, target, tmp, log=lambda s: print("  " + s, file=sys.stderr), seeds=a.seeds, pnr_timeout=limit)
            predicted = cost.unrolled_fmax(d, target)
            urows.append([label, target, r.lut4, r.ffs, r.dsps, mults, f"{r.lut4 / mults:.0f}", f"{r.fmax_mhz:.1f}",
                          f"{predicted:.1f} ({predicted / r.fmax_mhz:.2f})", d.latency, f"{r.fmax_mhz * 1e6:.3g}"])
            ulut[tuple(sizes)] = (r.lut4, mults)
        except (NotImplementedError, DoesNotFit, RuntimeError) as e:
            urows.append([label, target, f"not built: {str(e).splitlines()[0]}"] + [""] * 8)
    if urows:
        print("\nUnrolled predict (weights built in as constants; whole design, pins and range checks included)")
        print(table(["design", "target", "LUT4s", "FFs", "DSPs", "weight multiplies", "LUT4 per multiply",
                     "Fmax MHz", "predicted MHz (ratio)", "latency (cycles)", "batches/s"],
                    urows + [["reference: unrolled constant multiply (issue)", "-", "-", "-", "-", "-", "~75",
                              "-", "-", "-", "-"]]))
        if (4, 4) in ulut and (8, 4) in ulut:          # same outputs, twice the inputs: the multiplies alone
            (l4, m4), (l8, m8) = ulut[(4, 4)], ulut[(8, 4)]
            print(f"marginal cost of a weight multiply (8-4 minus 4-4, same outputs): {(l8 - l4) / (m8 - m4):.1f} LUT4")
    # the per-MAC overhead: LUT4s each lane beyond the first adds, against the reference's ~98 LUT4
    lanes = [[f"{name} {target}", macs, f"{(n - lut4[(name, target, 1)]) / (macs - 1):.0f}"]
             for (name, target, macs), n in lut4.items() if macs > 1 and (name, target, 1) in lut4]
    if lanes:
        print("\nLUT4s per extra MAC lane (reference: ~98 LUT4 for a whole single-MAC dense layer)")
        print(table(["design", "macs", "LUT4 per extra lane"], lanes))


def accuracy(epochs: int = 10) -> None:
    """The 784-32-10 MLP of ``examples/digits784.py`` trained in float32 and in the FPGA's fixed(16, 8) (the
    NumPy interpreter, which the design equals bit for bit), from the same initial parameters and batches."""
    spec = load("examples/digits784.py", {})
    from circuitgrad import datasets
    data = datasets.load("digits28")
    rows = []
    for dtype in (cg.float32, cg.fixed(16, 8)):
        step = spec.compile(dtype)
        p = step.init_params(seed=0)
        rng = np.random.default_rng(0)
        for _ in range(epochs):
            for x, y in datasets.batches(data.x_train, data.y_train, 8, rng):
                p = step.step(p, x, y)
        acc = float((np.asarray(step.predict(p, data.x_test)).argmax(1) == data.y_test).mean())
        rows.append([str(dtype), f"{acc:.4f}"])
    print(f"\n784-32-10 MLP on digits28 (the digits upsampled to 28 × 28), SGD batch 8, {epochs} epochs, "
          f"{len(data.x_train)} train / {len(data.x_test)} test rows")
    print(table(["dtype", "test accuracy"], rows))


if __name__ == "__main__":
    main()
