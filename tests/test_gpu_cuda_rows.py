"""Row kernels (softmax, causal or not; log-sum-exp; argmax) run one warp per row.

Lane ``l`` owns columns ``l, l + 32, …``; the warp combines its partials with ``__shfl_xor_sync`` (o = 16 … 1).
Checked here without a device: the source shuffles and the glue launches 32 threads a row; nvcc compiles it
for sm_90 (no spills); and the host execution mode (the kernel's ``__host_warp`` emulation, which replays the
butterfly lane for lane) agrees with NumPy, threads forward and reversed, on rows shorter and longer than a
warp, with ties, NaNs and infinities.
"""
from __future__ import annotations

import math
import re

import numpy as np
import pytest
from _ptxas import ptxas_report
from _tolerance import assert_programs_close

import circuitgrad as cg
from circuitgrad import ops
from circuitgrad import primitives as P
from circuitgrad.backends import gpu
from circuitgrad.backends.gpu.host import check as hostcheck
from circuitgrad.backends.gpu.host import run as hostrun
from circuitgrad.backends.gpu.kernel import Kernel
from circuitgrad.backends.gpu.plan import plan as make_plan
from circuitgrad.backends.gpu.runtime import BLOCK, kernels

ok, why = hostrun.available()
pytestmark = pytest.mark.skipif(not ok, reason=f"host execution mode unavailable: {why}")

WIDTHS = [1, 5, 31, 32, 33, 100, 1000]
DT = {"f32": cg.float32, "f64": cg.float64}


def _argmax_mask(a):
    return a.builder.apply(P.ArgMaxMask(a.type), a)[0]


OPS = {
    "softmax": lambda a: ops.softmax(a),
    "causal": lambda a: ops.softmax(a, causal=True),
    "logsumexp": ops.logsumexp,
    "argmax": _argmax_mask,
}


def _prog(op: str, shape: tuple, dtype=cg.float32):
    return cg.schedule(cg.trace(OPS[op], [cg.NdArrayType(shape, dtype)], name=f"row_{op}"))


def _shape(op: str, k: int) -> tuple:
    # 3·7 = 21 rows: 672 threads, 3 blocks of 8 warps, the last with 3 warps past the last row
    return (3, 7, k) if op == "causal" else (21, k)


def _run(prog, xs, order: str):
    with hostrun.device(order) as cp:
        f = gpu.compile_function(prog, [f"a{k}" for k in range(len(prog.inputs))], "f")
        return f, [np.asarray(v.get()) for v in f.run(*[cp.asarray(x) for x in xs])]


def _row_kernels(prog):
    p = make_plan(prog)
    return p, [k for k in kernels(p, prefix="w").values() if k.lanes > 1]


# ------------------------------------------------------------------ the source and the launch
@pytest.mark.parametrize("op", list(OPS))
def test_row_kernels_shuffle_and_launch_a_warp_a_row(op):
    prog = _prog(op, _shape(op, 100))
    p, (k,) = _row_kernels(prog)
    rows = 21
    assert k.n == rows and k.lanes == 32 and k.threads == 32 * rows
    assert "__shfl_xor_sync(0xffffffffu" in k.source
    assert re.search(r"for \(int o = 16; o > 0; o >>= 1\)", k.source)
    assert f"{k.name}__host_warp(" in k.source and "#ifdef CG_HOSTRUN" in k.source
    # coalesced: lane l reads columns l, l + 32, …
    assert "for (int j = lane; j < " in k.source and "j += 32" in k.source
    src = gpu.runtime.generate(p, {i: kk for i, kk in kernels(p, prefix="w").items()}, ["a0"], "f")
    grid = math.ceil(32 * rows / BLOCK)
    assert re.search(rf"\bw_row\d+\(\({grid},\), \({BLOCK},\)", src), src


# ------------------------------------------------------------------ nvcc, device code for sm_90
def test_row_kernels_compile_for_sm90_without_spills():
    srcs = []
    for dt in DT.values():
        for op in OPS:
            for k in (5, 33, 1000):
                prog = _prog(op, _shape(op, k), dt)
                p = make_plan(prog)
                ks = kernels(p, prefix=f"s{len(srcs)}")
                srcs.extend(kk.source for kk in ks.values() if kk.lanes > 1)
    regs, spills = ptxas_report("#include <math.h>\n" + "\n".join(srcs))
    assert len(regs) == len(srcs), regs
    assert spills and all(s == ("0", "0") for s in spills), spills
    assert max(regs) <= 64, regs


# ------------------------------------------------------------------ host execution against NumPy
@pytest.mark.parametrize("dtype", list(DT))
@pytest.mark.parametrize("k", WIDTHS)
@pytest.mark.parametrize("op", list(OPS))
def test_row_kernels_match_numpy_on_the_host(op, k, dtype, rng):
    prog = _prog(op, _shape(op, k), DT[dtype])
    x = (3 * rng.normal(size=_shape(op, k))).astype(DT[dtype].numpy_dtype())
    if op == "argmax":                        # ties, across lanes and within one
        x[:, min(k - 1, 40)] = x[:, k // 3] = x.max() + 1
    want = cg.run(prog, [x])
    got = {}
    for order in hostrun.ORDERS:
        _, got[order] = _run(prog, [x], order)
        if op == "argmax":
            np.testing.assert_array_equal(got[order][0], want[0], err_msg=f"threads {order}")
        else:
            assert_programs_close(got[order], want, prog, [x], err_msg=f"{op} k={k} threads {order}")
    # bitwise equal although "reverse" computes the lanes' partials 31 … 0: no lane's partial reads another's
    # (test_reverse_order_catches_a_lane_that_reads_another_lanes_partial shows that this assertion can fail)
    np.testing.assert_array_equal(got["forward"][0], got["reverse"][0])


def _special(k: int, rng) -> np.ndarray:
    """Rows with ties, NaNs and infinities placed across lanes (columns 0, 3, 33, 64, 70, k − 1, …)."""
    rows = []
    c = lambda j: min(j, k - 1)          # noqa: E731
    base = rng.normal(size=k)
    def row(**at):
        r = base.copy()
        for j, v in at.items():
            r[c(int(j[1:]))] = v
        return r
    rows.append(row(c3=9.0, c35=9.0))                         # tie: lanes 3 and 3 (k ≥ 36)
    rows.append(row(c40=9.0, c8=9.0))                          # tie: lane 8 before lane 8 + 32
    rows.append(row(c64=9.0, c3=9.0, c33=9.0))                 # ties on three lanes
    rows.append(row(c70=np.nan, c5=np.nan, c1=9.0))           # the first NaN wins
    rows.append(row(c33=np.nan))
    rows.append(row(c0=np.nan))
    rows.append(np.full(k, np.nan))
    rows.append(np.full(k, -np.inf))                           # argmax 0; softmax NaN (−inf − −inf)
    rows.append(row(c2=-np.inf, c40=-np.inf))                  # −inf entries: exactly 0 in the softmax
    rows.append(row(c9=np.inf))                                # +inf: NaN softmax, as NumPy's
    rows.append(row(c9=np.inf, c50=np.inf))                    # two +infs: the first
    rows.append(np.zeros(k))                                    # all equal: column 0
    rows.append(np.where(np.arange(k) % 2 == 0, -0.0, 0.0))   # −0 == +0: column 0
    return np.array(rows)


@pytest.mark.parametrize("dtype", list(DT))
@pytest.mark.parametrize("k", WIDTHS)
def test_argmax_takes_numpys_first_maximum_with_ties_nans_and_infinities(k, dtype, rng):
    x = _special(k, rng).astype(DT[dtype].numpy_dtype())
    prog = _prog("argmax", x.shape, DT[dtype])
    want = np.eye(k, dtype=x.dtype)[np.argmax(x, axis=-1)]
    for order in hostrun.ORDERS:
        with np.errstate(invalid="ignore"):
            _, (got,) = _run(prog, [x], order)
        np.testing.assert_array_equal(got, want, err_msg=f"k={k} threads {order}")


@pytest.mark.parametrize("op", ["softmax", "logsumexp"])
@pytest.mark.parametrize("k", WIDTHS)
def test_softmax_and_logsumexp_with_nans_and_infinities(op, k, rng):
    x = _special(k, rng).astype(np.float64)
    prog = _prog(op, x.shape, cg.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        (want,) = cg.run(prog, [x])
    for order in hostrun.ORDERS:
        _, (got,) = _run(prog, [x], order)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=order)
        np.testing.assert_array_equal(np.isinf(got), np.isinf(want), err_msg=order)
        fin = np.isfinite(want)
        # finite rows: sums of at most k terms below 1 (relative to the row's maximum), and exp/log's ulps
        np.testing.assert_allclose(got[fin], want[fin], rtol=4 * (k + 8) * np.finfo(np.float64).eps, atol=0)
        if op == "softmax":
            np.testing.assert_array_equal(got[fin] == 0, want[fin] == 0)     # exp(−inf) is exactly 0


def test_causal_softmax_writes_exact_zeros_above_the_diagonal(rng):
    for k in (5, 33, 100):
        x = rng.normal(size=(2, k, k)).astype(np.float32)
        _, (got,) = _run(_prog("causal", x.shape), [x], "reverse")
        assert np.all(got[:, np.triu_indices(k, 1)[0], np.triu_indices(k, 1)[1]] == 0.0)
        assert np.all(got[:, np.tril_indices(k)[0], np.tril_indices(k)[1]] > 0)


def _row_kernel(op: str, shape: tuple, prefix: str) -> Kernel:
    (k,) = [kk for kk in kernels(make_plan(_prog(op, shape)), prefix=prefix).values() if kk.lanes > 1]
    return k


def test_shuffle_loop_and_host_replay_share_one_combine_function():
    """The device's shuffle loop and the host's replay call the same ``<name>_comb_<tag>``, defined once."""
    for op in OPS:
        k = _row_kernel(op, _shape(op, 70), f"cm_{op}")
        start = k.source.index(f'extern "C" __global__ void {k.name}(')
        device = k.source[start:k.source.index("#ifndef __CUDA_ARCH__")]
        host = k.source[k.source.index(f"inline void {k.name}_body("):]
        tags = ["mb"] if op == "argmax" else ["max", "sum"]
        for tag in tags:
            fn = f"{k.name}_comb_{tag}("
            assert k.source.count(f"void {fn}") == 1, k.source
            assert device.count(fn) == 1 and host.count(fn) == 1, (tag, k.source)
        assert "__shfl_xor_sync" in device and "__shfl_xor_sync" not in host
        assert not re.search(r"\bmax2\(|\+ s\[l \^ o\]|_better\(", device + host.split("#ifdef CG_HOSTRUN")[0]), \
            "the combine is written out only in its function"


def test_reverse_order_catches_a_lane_that_reads_another_lanes_partial(rng):
    """In ``reverse`` the warp emulation computes the lanes' partials 31 … 0. A (deliberately broken) kernel whose
    lane ``l`` adds lane ``l − 1``'s partial then differs between the orders, so the orders' bitwise agreement in
    test_row_kernels_match_numpy_on_the_host means something."""
    shape = (21, 100)
    k = _row_kernel("logsumexp", shape, "lanedep")
    good = f"s[l] = {k.name}_sum(i, l, x, m[l]);"
    assert good in k.source
    broken = k.source.replace(good, f"s[l] = {k.name}_sum(i, l, x, m[l]) + (l > 0 ? s[l - 1] : 0.0f);")
    x = rng.normal(size=shape).astype(np.float32)
    grid = math.ceil(k.threads / BLOCK)
    res = {}
    for src, tag in ((k.source, "good"), (broken, "broken")):
        for order in hostrun.ORDERS:
            with hostrun.device(order) as cp:
                y = cp.empty(k.n, dtype=cp.float32)
                cp.RawKernel(src, k.name)((grid,), (BLOCK,), (cp.asarray(x), y))
                res[tag, order] = y.get()
    np.testing.assert_array_equal(res["good", "forward"], res["good", "reverse"])
    np.testing.assert_allclose(res["good", "forward"], np.log(np.exp(x).sum(-1)), rtol=1e-5)
    assert not np.array_equal(res["broken", "forward"], res["broken", "reverse"])


def test_hostcheck_runs_the_same_warp_emulation(rng):
    """hostcheck's loop over rows calls ``<name>_body(row, …)``: the same lanes and butterfly as the host mode."""
    xs, ks, progs = [], [], []
    for j, op in enumerate(OPS):
        prog = _prog(op, _shape(op, 70), cg.float32)
        p = make_plan(prog)
        (k,) = [kk for kk in kernels(p, prefix=f"hc{j}").values() if kk.lanes > 1]
        ks.append(k)
        progs.append(prog)
        xs.append(rng.normal(size=_shape(op, 70)).astype(np.float32))
    host = hostcheck.compile_host(ks, "float")
    for prog, k, x in zip(progs, ks, xs):
        out = np.full(prog.types[prog.outputs[0]].shape, np.nan, np.float32)
        host(k.name, x, out)
        _, (got,) = _run(prog, [x], "forward")
        np.testing.assert_array_equal(out, got, err_msg=k.name)                # bitwise: one code path


def test_a_shuffling_kernel_without_host_emulation_is_refused():
    code = r"""extern "C" __global__ void red(const float* x, float* y) {
    float v = x[threadIdx.x];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    y[threadIdx.x] = v;
}"""
    with hostrun.device() as cp:
        with pytest.raises(NotImplementedError, match=r"__shfl_xor_sync .*`red__host_warp"):
            cp.RawKernel(code, "red")
