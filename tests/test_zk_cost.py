"""The ZK cost model: the Ligero calibration says what it does, and bad rates and values are refused."""
from __future__ import annotations

import math
import os
import re
import warnings

import numpy as np
import pytest

import circuitgrad as cg
from circuitgrad import nn
from circuitgrad.backends.zk import cost as cost_zk

#: three circuits that prove in milliseconds, in place of the real calibration set
_TINY = (("products", 1 << 4, False, None), ("products", 1 << 6, True, 0), ("step", 2, (2, 3, 2), None))


# ------------------------------------------------------------------ item 8: the prover calibration
def test_prover_calibration_reports_progress_on_stderr_then_is_cached(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CIRCUITGRAD_CACHE", str(tmp_path))
    monkeypatch.setattr(cost_zk, "_CALIBRATION", _TINY)
    monkeypatch.setattr("circuitgrad.costmodel.calibration._loadavg", lambda: 0.0)   # an idle machine: no load line
    rates = cost_zk.calibrate_prover()
    assert len(rates) == len(cost_zk.PROVER_FEATURES) and all(math.isfinite(r) and r >= 0 for r in rates)
    out, err = capsys.readouterr()
    assert out == ""                                  # stdout stays for the tables
    lines = err.splitlines()
    path = os.path.join(str(tmp_path), "ligero-calibration.json")
    assert lines[0] == ("circuitgrad: calibrating the Ligero prover's time model on this machine, once: proving "
                        "3 small circuits (about 13 s on an idle 2-core machine); the rates are cached in " + path)
    labels = ["2^4 products", "2^6 products with lookups streamed", "MLP 2-3-2 b2 step"]
    assert len(lines) == 4
    for k, (line, label) in enumerate(zip(lines[1:], labels), 1):
        assert re.fullmatch(rf"calibrating the Ligero prover: {k}/3 circuits, last {re.escape(label)} "
                            r"\d+\.\d\d s, \d+\.\d s", line), line
    assert os.path.exists(path)
    # the second time the cached rates are read: no proof, no message
    monkeypatch.setattr(cost_zk, "_fit_prover", lambda: pytest.fail("calibrated again"))
    assert cost_zk.calibrate_prover() == rates
    assert capsys.readouterr() == ("", "")


def test_prover_calibration_times_long_proofs_once_and_short_ones_three_times(monkeypatch):
    calls = []
    assert cost_zk._proof_seconds(lambda: calls.append(1)) >= 0 and len(calls) == 3
    monkeypatch.setattr(cost_zk, "_ONE_PROOF_S", 0.0)   # every proof counts as long
    calls.clear()
    cost_zk._proof_seconds(lambda: calls.append(1))
    assert len(calls) == 1


def test_calibration_set_is_the_documented_one():
    # docs/COST.md and the message describe these sixteen proofs: six of them streamed (keep=0)
    assert [k for k, _, _, _ in cost_zk._CALIBRATION] == ["products"] * 6 + ["contraction"] * 2 + ["step"] * 4 + \
        ["gpt"] * 4
    assert [keep for *_, keep in cost_zk._CALIBRATION].count(0) == 6
    assert all(keep in (None, 0) for *_, keep in cost_zk._CALIBRATION)
    assert cost_zk._ONE_PROOF_S == 1.0


# ------------------------------------------------------------------ item 7: learning rates
def _adam_params(dtype=cg.float32, lr=0.125):
    step = cg.compile_model(nn.mlp(2, [3, 2]), nn.mse, nn.adam(lr, eps=1 / 64), dtype=dtype)
    return step, step.init_params(0)


@pytest.mark.parametrize("lr,error,message", [
    (float("nan"), ValueError, "learning rate lr must be a finite number > 0, got nan"),
    (-1, ValueError, "learning rate lr must be a finite number > 0, got -1.0"),
    (0, ValueError, "learning rate lr must be a finite number > 0, got 0.0"),
    (float("inf"), ValueError, "learning rate lr must be a finite number > 0, got inf"),
    ("0.1", TypeError, "learning rate lr must be a number, got str '0.1'"),
    (True, TypeError, "learning rate lr must be a number, got bool True"),
    (None, TypeError, "learning rate lr must be a number, got NoneType None"),
])
def test_bad_learning_rates_are_refused_alike_everywhere(lr, error, message):
    _, p = _adam_params()
    with pytest.raises(error, match="^" + re.escape("set_learning_rate: " + message) + "$"):
        nn.set_learning_rate(p, lr)
    for name, make in (("sgd", nn.sgd), ("momentum", nn.momentum), ("adam", nn.adam), ("adamw", nn.adamw)):
        with pytest.raises(error, match="^" + re.escape(f"{name}: {message}") + "$"):
            make(lr)


def test_set_learning_rate_after_nan_is_refused_and_params_stay_finite():
    step, p = _adam_params()
    with pytest.raises(ValueError):
        nn.set_learning_rate(p, float("nan"))
    q = step.step(nn.set_learning_rate(p, np.float32(0.01)), np.ones((2, 3)), np.zeros((2, 2)))
    assert all(np.isfinite(v).all() for v in q.values())


def test_set_learning_rate_refuses_a_rate_its_dtype_cannot_hold():
    _, p = _adam_params()
    with pytest.raises(ValueError, match="^" + re.escape(
            "set_learning_rate: learning rate lr 1e-50 becomes 0.0 in float32, the dtype of params['adam/lr']") + "$"):
        nn.set_learning_rate(p, 1e-50)
    with pytest.raises(ValueError, match=re.escape("learning rate lr 1e+300 becomes inf in float32")):
        nn.set_learning_rate(p, 1e300)


def test_set_learning_rate_quantizes_a_fixed_point_rate():
    step, p = _adam_params(cg.fixed(16, 8))
    assert int(p["adam/lr"]) == 32                                   # 0.125 · 2^8
    with pytest.raises(TypeError, match="^" + re.escape(
            "set_learning_rate: params['adam/lr'] is a raw fixed-point integer (int64); pass the model's format "
            "to quantize lr, e.g. dtype=step.dtype, got dtype=None") + "$"):
        nn.set_learning_rate(p, 0.25)                                # was silently raw 0
    q = nn.set_learning_rate(p, 0.25, dtype=step.dtype)
    assert q["adam/lr"].dtype == np.int64 and int(q["adam/lr"]) == 64
    with pytest.raises(ValueError, match="^" + re.escape(
            "set_learning_rate: learning rate lr 0.001 rounds to 0 in fixed(16,8): its smallest step is "
            "2**-8 = 0.00390625; use more fractional bits") + "$"):
        nn.set_learning_rate(p, 0.001, dtype=step.dtype)
    with pytest.raises(ValueError, match="^" + re.escape(
            "set_learning_rate: learning rate lr 1000.0 does not fit in fixed(16,8) (range [-128.0, 127.99609375])")
            + "$"):
        nn.set_learning_rate(p, 1000.0, dtype=step.dtype)


# ------------------------------------------------------------------ item 7: quantize
@pytest.mark.parametrize("x,message", [
    (float("nan"), "input must be finite, got nan (fixed(16,8) represents only finite numbers)"),
    (float("-inf"), "input must be finite, got -inf (fixed(16,8) represents only finite numbers)"),
    ([1.0, float("-inf"), float("nan")], "input must be finite, got 2 NaN or infinite values of 3, the first -inf "
                                         "at index 1 (fixed(16,8) represents only finite numbers)"),
    ([[0.0, 1.0], [float("inf"), 2.0]], "input must be finite, got 1 NaN or infinite value of 4, the first inf at "
                                        "index (1, 0) (fixed(16,8) represents only finite numbers)"),
])
def test_quantize_refuses_nan_and_infinity(x, message):
    with warnings.catch_warnings():
        warnings.simplefilter("error")                 # no RuntimeWarning on the way
        with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
            cg.quantize(x, cg.fixed(16, 8))


def test_quantize_names_the_caller_and_keeps_its_range_check():
    with pytest.raises(ValueError, match=r"^targets must be finite, got nan \("):
        cg.quantize(float("nan"), cg.fixed(16, 8), "targets")
    with pytest.raises(cg.FixedPointOverflow, match=re.escape("input: values in [200, 200] do not fit in fixed(16,8)")):
        cg.quantize(200.0, cg.fixed(16, 8))            # finite but out of range: the documented overflow error
    assert cg.quantize([1.5, -2.0, 0.001953125], cg.fixed(16, 8)).tolist() == [384, -512, 1]
    assert cg.quantize(np.zeros((0, 3)), cg.fixed(16, 8)).shape == (0, 3)


# ------------------------------------------------------------------ committed cells by gadget
def test_committed_cells_by_gadget_of_a_small_lookup_circuit():
    """Four named inputs checked to 12 bits with limbs of 8 (a limb wire and a [0, 2^4) lookup for the top,
    a [0, 2^8) lookup for the rest), then their squares. 8 lookups into 16 + 256 table entries:
    σL = ⌈101 / (51 − log2 280)⌉ = ⌈2.36⌉ = 3, so 4 cells per lookup and per table entry, 3 per constraint,
    1 per wire."""
    from circuitgrad.backends.zk import LIGERO51
    from circuitgrad.backends.zk.circuits import gadgets as G
    from circuitgrad.backends.zk.circuits.r1cs import Builder
    b = Builder(LIGERO51, "lookup", table_bits=8)
    x = b.alloc(4, "x")
    G.fits(b, [(x, 1)], 0, 12, "t")
    G.product(b, [(x, 1)], [(x, 1)], "square")
    r = b.finish(0, 0, 4)
    assert cost_zk.by_gadget(r) == {
        "(lookup tables)": {"constraints": 0, "lookups": 0, "wires": 0, "cells": 4 * (16 + 256)},
        "t.top": {"constraints": 0, "lookups": 4, "wires": 4, "cells": 4 + 4 * 4},
        "t.limbs": {"constraints": 0, "lookups": 4, "wires": 0, "cells": 4 * 4},
        "square": {"constraints": 4, "lookups": 0, "wires": 4, "cells": 4 + 3 * 4},
        "(named)": {"constraints": 0, "lookups": 0, "wires": 4, "cells": 4}}


def test_every_wire_but_the_constant_is_counted_towards_a_gadget():
    step = cg.compile_model(nn.mlp(2, [2, 3, 2]), loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.125),
                            dtype=cg.fixed(16, 8))
    c = cg.cost(step, target="zk", prover_time=False)
    r, kinds = c.detail["circuit"].r1cs, c.detail["by_gadget"]
    assert sum(v["wires"] for v in kinds.values()) == r.n_wires - 1 and "(unattributed)" not in kinds
    assert sum(v["lookups"] for v in kinds.values()) == r.n_lookups
    assert any(n.startswith(f"committed cells {sum(v['cells'] for v in kinds.values()):,} (range-check limbs of 8 "
                            f"bits, tables ") for n in c.notes)


_MEASURE = r"""
import json, sys
sys.path.insert(0, "bench")
import prover as B
from circuitgrad.backends import zk
from circuitgrad.backends.zk import cost
from circuitgrad.backends.zk.systems.ligero import prover
if len(sys.argv) > 2:
    prover.KEEP_BYTES = int(sys.argv[2])
from circuitgrad.backends.zk.circuits import gf
if gf.kernels() == "numba":                          # a tiny proof first: compiled kernels loaded in every variant
    zk.prove(*B._model_circuit("iris-predict"))
c, wit = B._model_circuit(sys.argv[1])
proof = zk.prove(c, wit)
print(json.dumps([proof.timings["memory"], cost.prover_memory(c)]))
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="the prover measures its memory on Linux")
@pytest.mark.parametrize("case, keep", [("gpt-softmax", None), ("digits", None), ("gpt-softmax", 0)])
def test_prover_memory_is_predicted_within_a_quarter(case, keep):
    """In a fresh process (a test process's heap already holds freed memory), after one tiny proof where the
    compiled field kernels run (so that they are loaded in every variant the prover calls): the memory a proof
    adds, as the prover reports it, is the cost model's prediction within 25%, kept and streamed."""
    import json
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    args = [sys.executable, "-c", _MEASURE, case] + ([] if keep is None else [str(keep)])
    # a fresh process's allocator: without what a Dask LocalCluster started by an earlier test leaves in this
    # process's environment for its workers (MALLOC_TRIM_THRESHOLD_, one BLAS thread), which the child inherits
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("MALLOC_") and k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                                        "__DASK_PARENT_PID")}
    out = subprocess.run(args, capture_output=True, text=True, cwd=root, timeout=600, env=env)
    assert out.returncode == 0, out.stderr
    measured, predicted = json.loads(out.stdout.strip().splitlines()[-1])
    assert 0.75 * measured <= predicted <= 1.25 * measured


def test_counted_and_built_circuits_predict_the_same_prover_memory():
    from circuitgrad.backends import zk
    step = cg.compile_model(nn.mlp(4, [4, 8, 3]), loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.125),
                            dtype=cg.fixed(16, 8))
    built = zk.compile(step, field=zk.LIGERO51)
    counted = zk.compile(step, field=zk.LIGERO51, count_only=True)
    a, b = cost_zk.prover_memory(built), cost_zk.prover_memory(counted)
    assert abs(a - b) <= 0.05 * a
    assert cg.cost(step, target="zk", prover_time=False).detail["prover_memory"] == b
