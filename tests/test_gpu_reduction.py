"""Sum kernels (``SumTo``, :mod:`circuitgrad.backends.gpu.reduction`): a warp or a few per group of G outputs.

Checked without a device: the glue launches a generated kernel for every ``reduce`` step (no CuPy ``.sum``); nvcc
compiles every such kernel for sm_90 without spills; and the host execution mode (real CUDA C compiled for the
CPU, threads forward and reversed, the shuffles and the sum over warps replayed by the kernel's ``__host_warp``)
agrees with float64 NumPy within the error bound of a sum, for column sums, row sums, several summed axes,
inputs read through a transpose, permutation, broadcast or reshape, and sizes that are not multiples of G or 32.
"""
from __future__ import annotations

import re

import numpy as np
import pytest
from _ptxas import ptxas_report
from _tolerance import assert_sums_close

import circuitgrad as cg
from circuitgrad import nn
from circuitgrad import primitives as P
from circuitgrad.backends import gpu
from circuitgrad.backends.gpu import cuda, reduction
from circuitgrad.backends.gpu.host import run as hostrun
from circuitgrad.backends.gpu.kernel import Kernel
from circuitgrad.backends.gpu.warp import WARP
from circuitgrad.backends.gpu.plan import plan as make_plan
from circuitgrad.backends.gpu.runtime import BLOCK

ok, why = hostrun.available()
needs_nvcc = pytest.mark.skipif(not ok, reason=f"host execution mode unavailable: {why}")
DT = {"f32": cg.float32, "f64": cg.float64}


def _sum_to(a, shape):
    return a.builder.apply(P.SumTo(a.type, a.type.with_shape(shape)), a)[0]


def _view(a, op):
    return a.builder.apply(op, a)[0]


# name -> (input shape, the view of 2·a summed (from its type; None: 2·a itself), result shape)
CASES = {
    "columns":        ((70, 37), None, (37,)),
    "columns-tall":   ((600, 19), None, (19,)),                # several warps per group
    "columns-few":    ((5, 40), None, (40,)),                  # 5 rows: fewer than a warp load's 4
    "rows":           ((37, 70), None, (37, 1)),
    "rows-long":      ((5, 3000), None, (5, 1)),               # several warps per row
    "rows-short":     ((40, 3), None, (40, 1)),
    "two-axes":       ((3, 5, 7), None, (5, 1)),               # a leading axis dropped and one kept as 1
    "middle":         ((3, 5, 7), None, (1, 5, 1)),
    "merged":         ((4, 6, 5), None, (6, 5)),               # 30 outputs: not a multiple of G = 8
    "all":            ((5000,), None, ()),
    "all-short":      ((9, 1), None, (1,)),
    "transpose":      ((50, 37), lambda t: P.Transpose(t), (37, 1)),
    "permute":        ((4, 6, 5), lambda t: P.Permute(t, (1, 0, 2)), (5,)),
    "broadcast":      ((1, 7), lambda t: P.Broadcast(t, t.with_shape((9, 7))), (1, 7)),
    "reshape":        ((120,), lambda t: P.Reshape(t, (6, 20)), (20,)),
}


def _prog(case: str, dtype=cg.float32, view_of_input: bool = False):
    shape, view, out = CASES[case]

    def f(a):
        x = a if view_of_input else a * 2.0              # exact: the reference sums 2·a
        if view is not None:
            x = _view(x, view(x.type))
        return _sum_to(x, out)
    return cg.schedule(cg.trace(f, [cg.NdArrayType(shape, dtype)], name=f"sum_{case}"))


def _want(case: str, a: np.ndarray, scale: float = 2.0) -> tuple[np.ndarray, np.ndarray, int]:
    """The float64 sums, the sums of the terms' absolute values, and the number of terms per output."""
    shape, view, out = CASES[case]
    x = scale * a.astype(np.float64)
    if view is not None:
        op = view(cg.NdArrayType(shape, cg.float64))
        x = {P.Transpose: lambda: x.T, P.Permute: lambda: np.transpose(x, getattr(op, "axes", None)),
             P.Broadcast: lambda: np.broadcast_to(x, op.T.shape),
             P.Reshape: lambda: x.reshape(getattr(op, "shape", None))}[type(op)]()
    lead = x.ndim - len(out)
    axes = tuple(range(lead)) + tuple(lead + i for i, d in enumerate(out) if d == 1 and x.shape[lead + i] != 1)
    n = int(np.prod([x.shape[d] for d in axes], dtype=np.int64))
    return (x.sum(axis=axes, keepdims=True).reshape(out), np.abs(x).sum(axis=axes, keepdims=True).reshape(out),
            max(n, 1))


def _reduce_kernel(f: gpu.GpuFunction) -> Kernel:
    (k,) = [f.kernels[i] for i, s in enumerate(f.plan.steps) if s.kind == "reduce"]
    return k


# ------------------------------------------------------------------ geometry and glue (no compiler needed)
@pytest.mark.parametrize("case, g, warps", [("columns", 8, 1), ("columns-tall", 8, 8), ("columns-few", 8, 1),
                                            ("rows", 1, 1), ("rows-long", 1, 4), ("two-axes", 1, 1),
                                            ("merged", 8, 1), ("all", 1, 8), ("transpose", 8, 1),
                                            ("permute", 4, 1), ("broadcast", 4, 1)])
def test_the_geometry_follows_the_memory_layout(case, g, warps):
    """Column sums (contiguous outputs) take 8 outputs a group (fewer when the kept axis is shorter), row sums
    (a contiguous reduction) one; the warps per group grow with the terms per output."""
    p = make_plan(_prog(case))
    (step,) = [s for s in p.steps if s.kind == "reduce"]
    r = reduction.geometry(step, p)
    assert (r.g, r.warps) == (g, warps)
    assert r.m == int(np.prod(CASES[case][2], dtype=np.int64))
    assert BLOCK % (WARP * reduction.MAX_WARPS) == 0      # a group never straddles a block


def test_axes_that_are_one_run_in_memory_merge():
    p = make_plan(_prog("two-axes"))
    (step,) = [s for s in p.steps if s.kind == "reduce"]
    r = reduction.geometry(step, p)
    assert (r.kept, r.reduced) == (((5, 7),), ((3, 35), (7, 1)))
    p = make_plan(_prog("columns-tall"))
    (step,) = [s for s in p.steps if s.kind == "reduce"]
    assert reduction.geometry(step, p).reduced == ((600, 19),)


def test_a_g_that_does_not_divide_a_warp_is_refused():
    p = make_plan(_prog("columns"))
    (step,) = [s for s in p.steps if s.kind == "reduce"]
    with pytest.raises(ValueError, match=r"reduction: G = 3 must divide 32 and W = 1 divide 8"):
        reduction.geometry(step, p, g=3, warps=1)


@pytest.mark.parametrize("case", list(CASES))
def test_every_reduce_step_launches_a_generated_kernel(case):
    f = gpu.compile_function(_prog(case), ["a"], "f", emulate=True)
    k = _reduce_kernel(f)
    assert ".sum(" not in f.python
    grid = -(-k.threads // BLOCK)
    assert f"    {k.name}(({grid},), ({BLOCK},), (" in f.python, f.python
    assert "__shfl_xor_sync" in k.source and f"{k.name}__host_warp" in k.source
    step = next(s for s in f.plan.steps if s.kind == "reduce")
    assert k.lanes == 32 * reduction.geometry(step, f.plan).warps


@pytest.mark.parametrize("dtype", list(DT))
@pytest.mark.parametrize("case", list(CASES))
def test_the_emulated_backend_sums_as_numpy(case, dtype, rng):
    shape = CASES[case][0]
    a = rng.normal(size=shape).astype(DT[dtype].numpy_dtype())
    f = gpu.compile_function(_prog(case, DT[dtype]), ["a"], "f", emulate=True)
    (got,) = f.run(a)
    want, mag, n = _want(case, a)
    assert_sums_close(got, want, n, mag, err_msg=case)


# ------------------------------------------------------------------ nvcc, device code for sm_90
@needs_nvcc
def test_sum_kernels_compile_for_sm90_without_spills():
    srcs = []
    for dt in DT.values():
        for case in CASES:
            p = make_plan(_prog(case, dt))
            (i, step) = next((i, s) for i, s in enumerate(p.steps) if s.kind == "reduce")
            for g, w in ((None, None), (8, 8), (4, 2), (1, 8)):
                if g is not None and g > 1 and case != "columns-tall":
                    continue
                r = reduction.reduce_source(step, p, f"s{len(srcs)}", cuda.ctype(p.program.types[step.outputs[0]]),
                                            g, w)
                srcs.append(r.source)
    regs, spills = ptxas_report("\n".join(srcs))
    assert len(regs) == len(srcs), regs
    assert spills and all(s == ("0", "0") for s in spills), spills
    assert max(regs) <= 64, regs


# ------------------------------------------------------------------ host execution against NumPy
def _host_run(prog, a: np.ndarray, order: str):
    with hostrun.device(order) as cp:
        f = gpu.compile_function(prog, ["a"], "f")
        (y,) = f.run(cp.asarray(a))
        return f, y.get()


@needs_nvcc
@pytest.mark.parametrize("order", hostrun.ORDERS)
@pytest.mark.parametrize("dtype", list(DT))
@pytest.mark.parametrize("case", list(CASES))
def test_sum_kernels_match_numpy_on_the_host(case, dtype, order, rng):
    shape = CASES[case][0]
    a = rng.normal(size=shape).astype(DT[dtype].numpy_dtype())
    f, got = _host_run(_prog(case, DT[dtype]), a, order)
    assert ".sum(" not in f.python
    want, mag, n = _want(case, a)
    assert_sums_close(got, want, n, mag, err_msg=f"{case} {order}")


@needs_nvcc
@pytest.mark.parametrize("case", ["transpose", "permute", "reshape"])
def test_a_view_of_an_input_is_read_through_its_layout(case, rng):
    """The view's base is the caller's array (alive for the whole call): the kernel takes it itself."""
    shape = CASES[case][0]
    a = rng.normal(size=shape).astype(np.float32)
    f, got = _host_run(_prog(case, view_of_input=True), a, "reverse")
    assert "as_strided" not in f.python
    want, mag, n = _want(case, a, scale=1.0)
    assert_sums_close(got, want, n, mag, err_msg=case)


@needs_nvcc
@pytest.mark.parametrize("g, warps", [(8, 1), (8, 8), (4, 2), (2, 4), (1, 1), (1, 8)])
@pytest.mark.parametrize("order", hostrun.ORDERS)
def test_every_group_shape_sums_the_same_terms(g, warps, order, rng):
    """Any G dividing 32 and W dividing 8 is a correct kernel (the geometry only picks the fastest): the same
    column sum through each, and the same result bit for bit in both thread orders."""
    prog = _prog("columns-tall", view_of_input=True)          # the kernel reads its input: x is a
    p = make_plan(prog)
    (i, step) = next((i, s) for i, s in enumerate(p.steps) if s.kind == "reduce")
    r = reduction.reduce_source(step, p, "colsum", "float", g, warps)
    a = rng.normal(size=(600, 19)).astype(np.float32)
    with hostrun.device(order) as cp:
        x, y = cp.asarray(a), cp.empty(19, dtype=cp.float32)
        grid = -(-r.groups * r.lanes // BLOCK)
        cp.RawKernel(r.source, "colsum")((grid,), (BLOCK,), (x, y))
        got = y.get()
    want = a.astype(np.float64).sum(0)
    assert_sums_close(got, want, 600, np.abs(a).astype(np.float64).sum(0), err_msg=f"G={g} W={warps}")
    with hostrun.device("forward" if order == "reverse" else "reverse") as cp:
        x, y = cp.asarray(a), cp.empty(19, dtype=cp.float32)
        cp.RawKernel(r.source, "colsum")((grid,), (BLOCK,), (x, y))
        np.testing.assert_array_equal(y.get(), got)


# ------------------------------------------------------------------ a GPT step
@needs_nvcc
def test_a_gpt_step_sums_in_generated_kernels(rng):
    """The whole step under the host execution mode: no CuPy ``.sum``; one launch per plan step as before
    (a kernel call or a cuBLAS product in the glue for each); the parameters match the NumPy backend's (float64,
    the tolerance of the other float64 GPT cross-checks, tests/test_gpu_hostrun.py)."""
    make = lambda: nn.gpt(4, 8, 13, d=24, heads=3, layers=2)      # noqa: E731
    opt = nn.momentum(0.05)
    ref = cg.compile_model(make(), loss=nn.softmax_cross_entropy, optimizer=opt, dtype=cg.float64)
    x, y = rng.integers(0, 13, size=ref.x_type.shape), rng.integers(0, 13, size=ref.x_type.shape)
    p = ref.init_params()
    want = ref.step({k: v.copy() for k, v in p.items()}, x, y)
    with hostrun.device("reverse") as cp:
        dev = cg.compile_model(make(), loss=nn.softmax_cross_entropy, optimizer=opt, dtype=cg.float64,
                               backend="cupy", donate=True)
        got = dev.step({k: cp.asarray(v.copy()) for k, v in p.items()}, cp.asarray(x), cp.asarray(y))
        got = {k: v.get() for k, v in got.items()}
    f = dev.fn("step").compiled
    src = dev.fn("step").source
    assert ".sum(" not in src
    reduces = [i for i, s in enumerate(f.plan.steps) if s.kind == "reduce"]
    sums = sum(len(m.instrs) for i in reduces for m in f.plan.steps[i].chain if m.kind == "reduce")
    assert sums >= 40 and all(i in f.kernels for i in reduces)
    assert src.count("# SumTo") == len(reduces)
    calls = len(re.findall(r"^    cg_\w+\(\(\d+,\), \(\d+,\), ", f.python, re.M)) + f.python.count("# cuBLAS")
    assert calls == f.launches == f.plan.launches
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-9, atol=1e-9, err_msg=k)
