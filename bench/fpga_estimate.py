"""The FPGA resource estimate of ``cg.cost(step, "fpga")`` against yosys synthesis.

    python bench/fpga_estimate.py            # the bench/fpga.py designs: estimate vs synthesis
    python bench/fpga_estimate.py --fit      # refit the LUT and clock models on the training designs first

The LUT4 model (``backends/fpga/cost.py``) is linear in a design's features; ``--fit``
synthesizes 17 training designs at 1, 2 and 4 MAC lanes and with one read port, for each family, with yosys (no place and
route) and writes the least-squares coefficients to ``backends/fpga/cost_fit.py``. The clock model (a period
linear in ``cost.timing_features``) is fitted the same way to nextpnr's Fmax of the same designs, placed and
routed (``--fit`` takes about 45 minutes in all; ``--jobs 2`` runs the families side by side, and the
measurements are kept in ``out/fpga_fit_cache.json``, so an interrupted fit resumes).
The unrolled ``predict`` (``fpga.unroll``) has its own models (LUTs: adder and subtractor bits of its
netlist; clock: the most operands of one sum, and those bits), fitted to 22 unrolled MLPs with other shapes
and seeds than the bench's four (fan-in 2–9, one and two layers).
The check runs on the designs of ``bench/fpga.py``, which the fit never sees.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

import numpy as np
from scipy.optimize import nnls

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _util import machine, table  # noqa: E402

import circuitgrad as cg  # noqa: E402
from circuitgrad import nn  # noqa: E402
from circuitgrad.backends import fpga  # noqa: E402
from circuitgrad.backends.fpga.synth import DoesNotFit, cell_counts, rtlil_text, synthesize  # noqa: E402
from circuitgrad.backends.fpga import cost as est  # noqa: E402

FX = cg.fixed(16, 8)
TARGETS = {"ecp5": "ecp5-85k", "ice40": "ice40-up5k"}


def _mlp(B, sizes, act=nn.relu, loss=nn.softmax_cross_entropy):
    return cg.compile_model(nn.mlp(B, sizes, activation=act), loss=loss, optimizer=nn.sgd(0.125), dtype=FX)


def _cnn(B):
    m = cg.sequential([nn.conv2d(B, 1, 6, 6, 2, kernel=3, padding=1), nn.relu(B, 2, 6, 6), nn.max_pool2d(B, 2, 6, 6, 2),
                       nn.flatten(B, 2, 3, 3), nn.dense(B, 18, 4)])
    return cg.compile_model(m, loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.125), dtype=FX)


def _attention(kind):
    m = nn.attention(1, 4, 4, heads=1, causal=True, kind=kind)
    return cg.compile_model(m, loss=nn.mse, optimizer=nn.sgd(0.125), dtype=FX)


def training():
    """(name, compiled model, function) of the fit's designs: small MLPs, a CNN, attention heads, and
    designs whose memory takes many block RAMs (the clock model's banks)."""
    return [("mlp 4-3-8-2", _mlp(4, [3, 8, 2]), "predict"), ("mlp 4-3-8-2", _mlp(4, [3, 8, 2]), "step"),
            ("mse 2-5-6", _mlp(2, [5, 6], loss=nn.mse), "step"), ("mse 2-5-6", _mlp(2, [5, 6], loss=nn.mse), "predict"),
            ("mlp 2-6-12-8-3", _mlp(2, [6, 12, 8, 3]), "step"), ("mlp 1-8-32-4", _mlp(1, [8, 32, 4]), "predict"),
            ("sigmoid 4-4-8-3", _mlp(4, [4, 8, 3], act=nn.sigmoid), "step"),
            ("tanh 2-3-4-2", _mlp(2, [3, 4, 2], act=nn.tanh, loss=nn.mse), "step"),
            ("cnn 2", _cnn(2), "predict"), ("cnn 2", _cnn(2), "step"), ("softmax head", _attention("softmax"), "predict"),
            ("spherical head", _attention("spherical"), "predict"), ("spherical head", _attention("spherical"), "step"),
            ("mlp 1-24-48-6", _mlp(1, [24, 48, 6]), "predict"), ("mlp 1-24-48-6", _mlp(1, [24, 48, 6]), "step"),
            ("mse 1-8-24", _mlp(1, [8, 24], loss=nn.mse), "predict"), ("mse 1-12-40", _mlp(1, [12, 40], loss=nn.mse), "step"),
            ("mse 2-64-160", _mlp(2, [64, 160], loss=nn.mse), "step"),       # a memory of many block RAMs
            # one copy of a memory of 14 iCE40 block RAMs, which also fits twice (two read ports), and of 19
            ("mse 1-32-96", _mlp(1, [32, 96], loss=nn.mse), "predict"),
            ("mlp 1-24-64-24-4", _mlp(1, [24, 64, 24, 4]), "predict"),
            ("mse 1-48-96", _mlp(1, [48, 96], loss=nn.mse), "predict"),
            ("mlp 1-32-96-16", _mlp(1, [32, 96, 16]), "predict")]


#: designs of the clock fit only (memories of 14 and 20 iCE40 block RAMs per copy): in the LUT fit they drew the
#: ECP5 coefficients away from the small designs (an iris predict estimated at 0.68 of synthesis)
CLOCK_ONLY = {"mse 1-32-96", "mlp 1-24-64-24-4", "mse 1-48-96", "mlp 1-32-96-16"}

#: unrolled predict designs of the fit: (layer sizes, parameter seed), batch 1, mse, fixed(16, 8)
UNROLLED_TRAINING = [([2, 3], 0), ([3, 6], 1), ([6, 6], 2), ([5, 3], 3), ([2, 4, 2], 4), ([3, 5, 2], 5), ([6, 3], 6),
                     ([4, 6], 7), ([2, 8], 8), ([3, 4, 4], 9), ([7, 4], 10), ([8, 3], 11), ([9, 2], 12), ([5, 6], 13),
                     ([4, 7], 14), ([3, 8, 3], 15), ([4, 6, 3], 16), ([5, 4, 3], 17), ([8, 5], 18), ([7, 6], 19),
                     ([6, 4, 2], 20), ([5, 5], 21)]
#: the unrolled designs of bench/fpga.py
UNROLLED_CHECKS = [([4, 4], 0), ([4, 8], 0), ([8, 4], 0), ([4, 8, 3], 0)]


def unrolled(sizes, seed):
    """An unrolled MLP predict (as bench/fpga.py builds them): its compiled model and parameters."""
    step = cg.compile_model(nn.mlp(1, sizes), loss=nn.mse, optimizer=nn.sgd(0.125), dtype=FX)
    return step, step.init_params(seed=seed)


def _counts(d, target):
    with tempfile.TemporaryDirectory() as out:
        c = cell_counts(d, target, out, log=lambda *a: None)
    return {"lut4": c.get("LUT4", 0) + c.get("SB_LUT4", 0), "dsp": c.get("MULT18X18D", 0) + c.get("SB_MAC16", 0),
            "bram": c.get("DP16KD", 0) + c.get("SB_RAM40_4K", 0)}


def checks():
    """The designs of bench/fpga.py: (name, model, function, target, read ports, lanes)."""
    iris = _mlp(8, [4, 16, 3])
    mlp5 = _mlp(1, [16, 64, 32, 32, 5])
    dense = _mlp(1, [16, 64], loss=nn.mse)
    return [("iris step", iris, "step", "ice40-up5k", 2, m) for m in (1, 2)] + \
           [("iris step", iris, "step", "ecp5-85k", 2, m) for m in (1, 2, 4, 8)] + \
           [("iris predict", iris, "predict", "ice40-up5k", 2, 1), ("mlp5 predict", mlp5, "predict", "ice40-up5k", 1, 1),
            ("mlp5 step", mlp5, "step", "ecp5-85k", 2, 1), ("dense 16→64 predict", dense, "predict", "ice40-up5k", 2, 1)]


def synth(step, function, target, read_ports, macs):
    d = fpga.compile(step, function=function, macs=macs, read_ports=read_ports)
    return d, _counts(d, target)


def _nnls(X, y, names) -> dict:
    X, y = np.array(X), np.array(y, dtype=float)
    used = X.any(axis=0)
    c, _ = nnls(X[:, used], y)                      # every feature adds hardware: no negative coefficient
    return {k: round(float(v), 3) for k, v in zip(np.array(names)[used], c)}


#: the fit's measurements, kept between runs (a fit interrupted or widened resumes): key → {"lut4", "mhz"}
CACHE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "out", "fpga_fit_cache.json")


def _cached(key: str, measure) -> dict:
    """``measure()`` once per key: the results already measured are read from :data:`CACHE`."""
    data = json.load(open(CACHE)) if os.path.exists(CACHE) else {}
    if key not in data:
        value = measure()                      # minutes: the file is read again after it, not before
        data = json.load(open(CACHE)) if os.path.exists(CACHE) else {}
        data[key] = value
        os.makedirs(os.path.dirname(CACHE), exist_ok=True)
        with open(CACHE + f".{os.getpid()}", "w") as fh:
            json.dump(data, fh, indent=0, sort_keys=True)
        os.replace(CACHE + f".{os.getpid()}", CACHE)
    return data[key]


def _fit_family(fam: str) -> tuple[dict, dict, dict, dict]:
    """One family's (LUT, unrolled LUT, period, unrolled period) coefficients."""
    target = TARGETS[fam]
    X, y, timed = [], [], []
    for name, step, fn in training():
        for rp, macs in ((2, 1), (2, 2), (2, 4), (1, 1)):
            try:
                d = fpga.compile(step, function=fn, macs=macs, read_ports=rp)
                got = _cached(f"{target} {name} {fn} macs={macs} ports={rp}",
                              lambda: {**_counts(d, target), "mhz": _fmax(d, target)})
            except DoesNotFit as e:            # iCE40: larger memories at several lanes
                print(f"{target} {name} {fn} macs={macs}: skipped ({e})", flush=True)
                continue
            if name not in CLOCK_ONLY:
                X.append(est.features(d.microcode, target, macs, rp))
                y.append(got["lut4"])
            timed.append((d.microcode, macs, rp, got["mhz"]))
            print(f"{target} {name} {fn} macs={macs} ports={rp}: {got}", flush=True)
    lut = _nnls(X, y, est.FEATURES)
    est.LUT4[fam] = lut                # the clock's kLUT feature reads the LUT model just fitted, not the old one
    T = [est.timing_features(mc, target, macs, rp) for mc, macs, rp, _ in timed]
    p = [1000.0 / mhz for *_, mhz in timed]
    X2, y2, T2, p2 = [], [], [], []
    for sizes, seed in UNROLLED_TRAINING:
        d = fpga.unroll(*unrolled(sizes, seed))
        got = _cached(f"{target} unrolled {'-'.join(map(str, sizes))} seed {seed}",
                      lambda: {**_counts(d, target), "mhz": _fmax(d, target)})
        text = rtlil_text(d, log=lambda *a: None)        # one elaboration for both models' features
        X2.append(est.unrolled_features(d, text))
        y2.append(got["lut4"])
        T2.append(est.unrolled_timing_features(d, text))
        p2.append(1000.0 / got["mhz"])
        print(f"{target} unrolled {'-'.join(map(str, sizes))} seed {seed}: {got}", flush=True)
    return (lut, _nnls(X2, y2, est.UNROLLED_FEATURES), _nnls(T, p, est.TIMING_FEATURES),
            _nnls(T2, p2, est.UNROLLED_TIMING_FEATURES))


def _fmax(d, target) -> float:
    with tempfile.TemporaryDirectory() as out:
        return synthesize(d, target, out, log=lambda *a: None).fmax_mhz


def fit(jobs: int = 1) -> dict:
    from concurrent.futures import ProcessPoolExecutor
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        results = dict(zip(TARGETS, pool.map(_fit_family, TARGETS)))
    coeffs, ucoeffs, period, uperiod = ({fam: r[i] for fam, r in results.items()} for i in range(4))
    path = os.path.join(os.path.dirname(est.__file__), "cost_fit.py")
    with open(path, "w") as fh:
        fh.write(f'''"""LUT4 and clock model coefficients per FPGA family, fitted by ``python bench/fpga_estimate.py --fit``.

Fitted by non-negative least squares. ``LUT4``: yosys synthesis (synth_ecp5 / synth_ice40) of the sequencer,
{len([t for t in training() if t[0] not in CLOCK_ONLY])} training designs at 1, 2 and 4 MAC lanes and with one read port; features as
:data:`circuitgrad.backends.fpga.cost.FEATURES`. ``UNROLLED_LUT4``: the unrolled predict,
{len(UNROLLED_TRAINING)} MLPs; features as :data:`circuitgrad.backends.fpga.cost.UNROLLED_FEATURES`.
``PERIOD_NS``: the clock period (ns) nextpnr reaches on the same sequencer designs at 1 and 2 lanes, placed
and routed; features as :data:`circuitgrad.backends.fpga.cost.TIMING_FEATURES`. ``UNROLLED_PERIOD_NS``: the
same for the unrolled MLPs; features as :data:`circuitgrad.backends.fpga.cost.UNROLLED_TIMING_FEATURES`.
Generated: do not edit by hand.
"""
LUT4 = {json.dumps(coeffs, indent=4)}

UNROLLED_LUT4 = {json.dumps(ucoeffs, indent=4)}

PERIOD_NS = {json.dumps(period, indent=4)}

UNROLLED_PERIOD_NS = {json.dumps(uperiod, indent=4)}
''')
    return {"sequencer": coeffs, "unrolled": ucoeffs, "period": period, "unrolled period": uperiod}


#: designs of the lanes' refit (``--fit-lanes``)
LANE_TRAINING = [("mlp 2-6-12-8-3", "step"), ("mse 1-12-40", "step")]
#: lane counts of the lanes' refit per family
LANE_COUNTS = {"ecp5": (2, 8), "ice40": (2, 4)}


def fit_lanes() -> dict:
    """Refit the LUT model's lane terms (``lanes``, ``crossbar``) alone, on yosys synthesis of
    :data:`LANE_TRAINING` at :data:`LANE_COUNTS` lanes, with every other coefficient kept; rewrite
    ``cost_fit.py``'s ``LUT4``."""
    steps = {(name, fn): step for name, step, fn in training()}
    lanes_at = [est.FEATURES.index("lanes"), est.FEATURES.index("crossbar")]
    for fam, target in TARGETS.items():
        X, y = [], []
        for name, fn in LANE_TRAINING:
            for macs in LANE_COUNTS[fam]:
                d = fpga.compile(steps[(name, fn)], function=fn, macs=macs)
                got = _cached(f"{target} {name} {fn} macs={macs} ports=2 lut", lambda: _counts(d, target))
                x = est.features(d.microcode, target, macs, 2)
                fixed = sum(est.LUT4[fam].get(k, 0.0) * v for i, (k, v) in enumerate(zip(est.FEATURES, x))
                            if i not in lanes_at)
                X.append([x[i] for i in lanes_at])
                y.append(got["lut4"] - fixed)
                print(f"{target} {name} {fn} macs={macs}: {got}", flush=True)
        est.LUT4[fam].update(_nnls(X, y, [est.FEATURES[i] for i in lanes_at]))
    path = os.path.join(os.path.dirname(est.__file__), "cost_fit.py")
    text = open(path).read()
    note = (f"The lane terms of ``LUT4`` (``lanes``, ``crossbar``): ``--fit-lanes``, yosys synthesis of {len(LANE_TRAINING)} "
            f"designs at 2–8 lanes,\nthe other terms kept.\n")
    if note not in text:
        text = text.replace("Generated: do not edit by hand.", note + "Generated: do not edit by hand.")
    start, end = text.index("LUT4 = {"), text.index("\n\nUNROLLED_LUT4 = {")
    with open(path, "w") as fh:
        fh.write(text[:start] + f"LUT4 = {json.dumps(est.LUT4, indent=4)}" + text[end:])
    return est.LUT4


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fit", action="store_true", help="refit the LUT and clock models first (about 30 minutes)")
    ap.add_argument("--jobs", type=int, default=1, help="families fitted side by side (--fit)")
    ap.add_argument("--fit-lanes", action="store_true",
                    help="refit only the LUT model's lane terms, on yosys synthesis of a few designs at 2–8 lanes")
    a = ap.parse_args()
    if a.fit:
        print(json.dumps(fit(a.jobs), indent=1))
    if a.fit_lanes:
        print(json.dumps(fit_lanes(), indent=1))
    rows = []
    for name, step, fn, target, rp, macs in checks():
        try:
            d, got = synth(step, fn, target, rp, macs)
        except DoesNotFit as e:
            rows.append([name, target, macs, rp, f"does not fit: {e}", "", "", ""])
            continue
        e = est.resources(d.microcode, target, macs, rp)
        rows.append([name, target, macs, rp, f"{e['lut4']} / {got['lut4']} = {e['lut4'] / got['lut4']:.2f}",
                     f"{e['dsp']} / {got['dsp']}", f"{e['bram']} / {got['bram']}", d.cycles])
    for sizes, seed in UNROLLED_CHECKS:
        for target in TARGETS.values():
            d = fpga.unroll(*unrolled(sizes, seed))
            got, e = _counts(d, target), est.unrolled_resources(d, target)
            rows.append([f"unrolled {'-'.join(map(str, sizes))} predict", target, "-", "-",
                         f"{e['lut4']} / {got['lut4']} = {e['lut4'] / got['lut4']:.2f}", f"{e['dsp']} / {got['dsp']}",
                         f"{e['bram']} / {got['bram']}", f"latency {d.latency}"])
    print(f"FPGA resources, estimate / yosys synthesis; {machine()}")
    print(table(["design", "target", "macs", "read ports", "LUT4", "DSP", "BRAM", "cycles"], rows))


if __name__ == "__main__":
    main()
