"""``epilogue.fuse_epilogues``: a row's sums and the elementwise step that reads them in one kernel. Which steps
fuse (a layer norm's forward and backward) and which do not (a donated update, column sums, rows of several warps,
a read of another row's sum); that the fused kernel computes the same bits as two launches, on the emulated backend
and in the host mode; that bfloat16 storage still narrows an epilogue's outputs."""
from __future__ import annotations

import re

import numpy as np
import pytest

import circuitgrad as cg
from circuitgrad import nn, ops
from circuitgrad.backends import gpu
from circuitgrad.backends.gpu import epilogue, memory
from circuitgrad.backends.gpu.host import run as hostrun
from circuitgrad.backends.gpu.layout import gather_index
from circuitgrad.backends.gpu.plan import plan as make_plan
from circuitgrad.backends.gpu.reduction import epilogue_inputs, kernel_arrays

from _plans import program, sum_to, without_epilogues

ok, why = hostrun.available()
needs_nvcc = pytest.mark.skipif(not ok, reason=f"host execution mode unavailable: {why}")

X = cg.NdArrayType((64, 48), cg.float32)


def _prog(fn, types=(X,)):
    return program(fn, types)


def _launched(p):
    return [s for s in p.steps if s.kind not in ("view", "const")]


@pytest.fixture
def unfused():
    """Plans made without the pass: each sum and the step reading it, two launches."""
    with pytest.MonkeyPatch.context() as m:
        without_epilogues(m)
        yield


def _layer_norm_grad(x, dy):
    """A layer norm's backward pass as the derivative writes it: two row sums of products, then ``dx``."""
    xc = x - ops.broadcast_to(sum_to(x, (64, 1)) * (1 / 48), (64, 48))
    r = ops.rsqrt(sum_to(xc * xc, (64, 1)) * (1 / 48) + 1e-5)
    xh = xc * ops.broadcast_to(r, (64, 48))
    a, b = sum_to(dy, (64, 1)), sum_to(dy * xh, (64, 1))
    return (dy - ops.broadcast_to(a * (1 / 48), (64, 48)) - xh * ops.broadcast_to(b * (1 / 48), (64, 48))) \
        * ops.broadcast_to(r, (64, 48))


def test_a_layer_norm_is_one_launch():
    """The mean's sum, then ``Σ (x − mean)²`` making its terms, then the normalisation: one kernel reading x."""
    p = make_plan(_prog(ops.layer_norm))
    (step,) = _launched(p)
    assert [m.kind for m in step.chain] == ["reduce", "reduce", "fused"]
    assert set(step.outputs) >= set(p.program.outputs)                        # y is the kernel's output
    assert step.inputs == [p.program.inputs[0]]                                # x: the sums are the kernel's own


@pytest.mark.parametrize("case", ["forward", "backward"])
def test_the_chained_kernel_orders_its_stages(case):
    """Lane 0 writes a stage's sums; after ``__syncwarp`` every lane reads them, through pointers that are not
    ``__restrict__`` anywhere (the kernel's, the stage's partials', its term functions' parameters): a
    ``__restrict__`` const pointer may be read through the read-only data cache, which the kernel's own stores do
    not update. Arrays only read keep ``__restrict__``."""
    fn, types = {"forward": (ops.layer_norm, (X,)), "backward": (_layer_norm_grad, (X, X))}[case]
    f = gpu.compile_function(_prog(fn, types), [f"a{k}" for k in range(len(types))], "f", emulate=True)
    ((i, k),) = f.kernels.items()
    step = f.plan.steps[i]
    parts = kernel_arrays(step, f.plan)
    stages = len(parts) - 1
    assert k.source.count("__syncwarp();") == stages - 1
    sigs = re.findall(rf"{k.name}\w*\(long long \w+, [^)]*\)", k.source) + re.findall(
        rf"void {k.name}\([^)]*\)", k.source)
    shared = 0
    for st in range(1, stages):
        for j, v in enumerate(parts[st]):
            written = v in step.outputs
            shared += written
            for pre, fns in ((f"b{st}_", rf"{k.name}_{st}_part\(|void {k.name}\(|{k.name}_body\("),
                             ("", rf"{k.name}_{st}_term\d*\(")):
                params = [p for sig in sigs if re.match(fns, sig.split(" ", 1)[-1]) or re.search(fns, sig)
                          for p in re.findall(rf"const \w+\*(?: __restrict__)? {pre}in{j}\b", sig)]
                assert params, (st, j, pre)
                assert all(("__restrict__" in p) != written for p in params), (st, j, params)
    assert shared >= stages - 1


def test_without_the_pass_it_is_three(unfused):
    assert [s.kind for s in _launched(make_plan(_prog(ops.layer_norm)))] == ["reduce", "reduce", "fused"]


def test_a_layer_norms_backward_is_one_launch():
    p = make_plan(_prog(_layer_norm_grad, (X, X)))
    (step,) = _launched(p)                          # Σx and Σdy, Σ (x − mean)², Σ dy·x̂, then dx: one kernel
    assert [(m.kind, len(m.instrs)) for m in step.chain] == [("reduce", 2), ("reduce", 1), ("reduce", 1),
                                                             ("fused", 4)]
    assert p.program.outputs[0] in step.chain[-1].outputs


def _columns(x):
    s = sum_to(x, (48,))                                                     # a column sum: G > 1
    return x * ops.broadcast_to(s, (64, 48))


LONG = cg.NdArrayType((5, 3000), cg.float32)


def _long_rows(x):
    s = sum_to(x, (5, 1))                                                    # 3000 terms a row: W > 1
    return x * ops.broadcast_to(s, (5, 3000))


def _other_row(x, z):
    s = sum_to(x, (64, 1))                                                   # z's element (i, j) reads s[j]
    return z * ops.broadcast_to(ops.reshape(s, (1, 64)), (48, 64))


REFUSED = {
    "column sums": (_columns, (X,)),
    "rows of several warps": (_long_rows, (LONG,)),
    "another row's sum": (_other_row, (X, cg.NdArrayType((48, 64), cg.float32))),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_refused(case):
    fn, types = REFUSED[case]
    p = make_plan(_prog(fn, types))
    assert [s.kind for s in _launched(p)] == ["reduce", "fused"]
    assert not any(s.then for s in p.steps)


def test_a_fused_step_writing_a_donated_update_is_not_an_epilogue():
    """``w − Σ_row(w)·w`` into ``w``'s memory: an in-place update is written only by a fused kernel."""
    def f(w):
        return (w - w * ops.broadcast_to(sum_to(w, (64, 1)), (64, 48)),)
    prog = _prog(f)
    (sums,) = _launched(make_plan(prog))                                       # not donated: an epilogue
    assert sums.then is not None
    p = make_plan(prog, updates={prog.inputs[0]: prog.outputs[0]})
    sums, step = _launched(p)
    assert not epilogue.fits(p, sums, step, {prog.outputs[0]}) and sums.then is None and step.kind == "fused"


def _two_sums(second):
    """``s = Σ_row x``, then a second sum of terms made from ``s``: ``second(x, s)`` gives the terms and shape."""
    def f(x):
        s = sum_to(x, (64, 1))
        terms, shape = second(x, s)
        return sum_to(terms, shape), s
    return f


CHAINED = {
    "own row": (lambda x, s: (x * ops.broadcast_to(s, (64, 48)), (64, 1)), True),
    "column sum": (lambda x, s: (x * ops.broadcast_to(s, (64, 48)), (48,)), False),
    "read transposed": (lambda x, s: (x * ops.transpose(ops.broadcast_to(ops.reshape(s, (1, 64)), (48, 64))),
                                      (64, 1)), True),                    # (i, j) reads s[i]: its own row
    "another row": (lambda x, s: (x * ops.reshape(ops.broadcast_to(ops.reshape(s, (1, 64)), (48, 64)), (64, 48)),
                                  (64, 1)), False),                       # element e reads s[e % 64]
    "rows read transposed": (lambda x, s: (ops.transpose(ops.reshape(x, (48, 64)) * ops.broadcast_to(
        ops.reshape(s, (1, 64)), (48, 64))), (64, 1)), False),
}


@pytest.mark.parametrize("case", list(CHAINED))
def test_which_sums_run_after_sums(case):
    second, chained = CHAINED[case]
    p = make_plan(_prog(_two_sums(second)))
    assert any(len(s.chain) > 1 for s in p.steps) == chained
    assert len(_launched(p)) == (1 if chained else 2 + (case == "rows read transposed"))   # its terms stored


def test_at_most_STAGES_sums_a_kernel(monkeypatch):
    monkeypatch.setattr(epilogue, "STAGES", 2)
    p = make_plan(_prog(_layer_norm_grad, (X, X)))
    assert [[m.kind for m in s.chain] for s in _launched(p)] == [["reduce", "reduce"], ["reduce", "fused"]]


M = cg.NdArrayType((48, 48), cg.float32)


def _product_between(reads_it: bool, made: bool = True):
    """A row sum of ``h`` (made by a kernel, or the argument ``x``), a product the schedule puts next, then the
    step reading the sum and ``h`` (and the product, or not)."""
    def f(x, z):
        h = ops.tanh(x) if made else x
        s = sum_to(h, (64, 1))
        w = z @ ops.constant(M, 0.5)
        y = ((h + w) if reads_it else h) * ops.broadcast_to(s, (64, 48))
        return (y,) if reads_it else (y, w)
    return f


def test_the_reader_moves_up_to_the_sums_past_steps_it_does_not_read(monkeypatch):
    p = make_plan(_prog(_product_between(False), (X, X)))
    assert [(s.kind, s.then is not None) for s in _launched(p)] == [("fused", False), ("reduce", True),
                                                                    ("matmul", False)]
    monkeypatch.setattr(epilogue, "AHEAD", 1)                                 # the next step only: the product
    p = make_plan(_prog(_product_between(False), (X, X)))
    assert [s.kind for s in _launched(p)] == ["fused", "reduce", "matmul", "fused"]


def test_bytes_alive_at_each_step():
    """``_product_between`` reading only ``x``: the sums (64 floats), the product's constant (48 × 48) and
    result (64 × 48), then the reader's result beside the sums and the product's (the constant freed)."""
    p = make_plan(_prog(_product_between(False, made=False), (X, X)))
    assert [s.kind for s in p.steps] == ["reduce", "const", "matmul", "fused"]
    n = 4
    assert list(epilogue._alive(p, p.steps)) == [64 * n, 64 * n + 48 * 48 * n, (64 + 48 * 48 + 64 * 48) * n,
                                                 (64 + 2 * 64 * 48) * n]


def test_the_reader_stays_where_moving_up_would_raise_the_peak():
    """Reading only the argument ``x`` (never freed), its result would be alive while the product runs beside
    its constant: more bytes than any step holds."""
    prog = _prog(_product_between(False, made=False), (X, X))
    assert [s.kind for s in _launched(make_plan(prog))] == ["reduce", "matmul", "fused"]
    (f0, _), (f1, _) = (_emulated(prog, [np.ones(X.shape, np.float32)] * 2, s) for s in (False, True))
    assert memory.peak(f1) == memory.peak(f0)


WIDE = cg.NdArrayType((48, 960), cg.float32)


def _peak_earlier(x, z):
    """As ``_product_between``, but the reader frees nothing (``h`` is an output) and the peak is earlier (a
    ``64 × 960`` array): moved up past the product, its result raises no step above that peak."""
    c = ops.tanh(z @ ops.constant(WIDE, 0.5)) @ ops.constant(cg.NdArrayType((960, 1), cg.float32), 0.5)
    h = x + ops.broadcast_to(c, (64, 48))
    s = sum_to(h, (64, 1))
    w = h @ ops.constant(M, 0.5)
    return h * ops.broadcast_to(s, (64, 48)), w, h


def test_the_reader_moves_up_where_the_peak_is_elsewhere(rng):
    prog = _prog(_peak_earlier, (X, X))
    assert [(s.kind, s.then is not None) for s in _launched(make_plan(prog))][-2:] == [("reduce", True),
                                                                                      ("matmul", False)]
    xs = [rng.normal(size=X.shape).astype(np.float32) for _ in range(2)]
    (f0, off), (f1, on) = (_emulated(prog, xs, s) for s in (False, True))
    assert f1.plan.launches == f0.plan.launches - 1
    assert memory.peak(f1) == memory.peak(f0)
    assert all(np.array_equal(a, b) for a, b in zip(off, on))


def test_a_sum_only_its_epilogue_reads_is_freed_after_the_kernel(rng):
    """The sums stay in registers for the epilogue; the array they are also written to is dropped at once."""
    f, _ = _emulated(_prog(ops.layer_norm), [rng.normal(size=X.shape).astype(np.float32)], True)
    (k,) = [i for i, s in enumerate(f.plan.steps) if s.then is not None]
    var = f.plan.steps[k].outputs[0]
    assert re.search(rf"\n    del [^\n]*\bv{var}\b", f.python)


def test_the_reader_stays_after_a_step_making_what_it_reads():
    p = make_plan(_prog(_product_between(True), (X, X)))
    assert [s.kind for s in _launched(p)] == ["fused", "reduce", "matmul", "fused"]
    assert not any(s.then for s in p.steps)


def _regrouped(x):
    """Row sums of ``[32, 96]`` read by a ``[64, 48]`` step through a reshape: element ``i`` reads row ``i // 96``,
    its own row of the sums (the epilogue runs over the linear index)."""
    s = sum_to(ops.reshape(x, (32, 96)), (32, 1))
    return ops.reshape(ops.reshape(x, (32, 96)) * ops.broadcast_to(s, (32, 96)), (64, 48)) + x


def _transposed_read(x):
    """The same sums' broadcast read through a transpose: element ``(i, j)`` of ``[48, 64]`` reads row ``j``."""
    s = sum_to(x, (64, 1))
    return ops.transpose(x) * ops.transpose(ops.broadcast_to(s, (64, 48)))


def test_a_read_through_a_reshape_of_its_own_row_fuses():
    p = make_plan(_prog(_regrouped))
    assert [(s.kind, s.then is not None) for s in _launched(p)] == [("reduce", True)]


def test_a_read_through_a_transpose_is_refused():
    p = make_plan(_prog(_transposed_read))
    assert [s.kind for s in _launched(p)] == ["reduce", "fused"]


STAGES = [  # (shape, strides, elements read, the divisor expected): a stage's offsets, i // d or not
    ((64, 48), (1, 0), 3072, 48), ((64, 48), (48, 1), 3072, 1), ((4, 16, 48), (16, 1, 0), 3072, 48),
    ((4, 16, 2, 24), (16, 1, 0, 0), 3072, 48), ((64, 1, 48), (1, 7, 0), 3072, 48), ((64, 48), (1, 0), 1000, 48),
    ((64, 48), (0, 0), 3072, 3072),
    ((64, 48), (0, 1), 3072, None), ((64, 48), (2, 0), 3072, None), ((48, 64), (1, 48), 3072, None),
    ((64, 48), (1, 0), 4000, None), ((8, 8, 48), (1, 8, 0), 3072, None), ((64, 48), (1, 1), 3072, None),
]


@pytest.mark.parametrize("shape, strides, n, want", STAGES)
def test_a_stages_divisor_is_its_gathered_offsets(shape, strides, n, want):
    """``_stage_divides`` against the offsets the kernels compute (``layout.gather_index``): where it finds a
    divisor ``d``, the offsets are ``i // d``; strided, transposed and wrapping stages have none."""
    got = epilogue._stage_divides(shape, strides, n)
    assert got == want
    offsets = gather_index(n, ((shape, strides),))
    if got is not None:
        assert np.array_equal(offsets, np.arange(n) // got)
    else:
        assert not any(np.array_equal(offsets, np.arange(n) // d) for d in (1, 48, 64, 3072))


def _emulated(prog, xs, fused: bool):
    with pytest.MonkeyPatch.context() as m:
        if not fused:
            without_epilogues(m)
        f = gpu.compile_function(prog, [f"a{k}" for k in range(len(xs))], "f", emulate=True)
    return f, f.run(*xs)


CASES = {"forward": (ops.layer_norm, (X,)), "backward": (_layer_norm_grad, (X, X)),
         "moved up": (_product_between(False), (X, X)), "regrouped": (_regrouped, (X,)),
         "sums after sums": (_two_sums(CHAINED["own row"][0]), (X,))}


@pytest.mark.parametrize("case", list(CASES))
def test_the_emulated_epilogue_is_the_same_bits(case, rng):
    """The plan's order and arrays (the emulator runs each step's instructions in NumPy; the generated kernel is
    checked in the host mode, below)."""
    fn, types = CASES[case]
    xs = [rng.normal(size=t.shape).astype(np.float32) for t in types]
    (f0, off), (f1, on) = (_emulated(_prog(fn, types), xs, s) for s in (False, True))
    assert f1.plan.launches < f0.plan.launches
    assert len(off) == len(on) and all(np.array_equal(a, b) for a, b in zip(off, on))


@needs_nvcc
@pytest.mark.parametrize("order", hostrun.ORDERS)
@pytest.mark.parametrize("case", list(CASES))
def test_the_generated_epilogue_is_the_same_bits_on_the_host(case, order, rng):
    """The kernels nvcc compiles for the host: the sums and what reads them, in one kernel or in two."""
    fn, types = CASES[case]
    xs = [rng.normal(size=t.shape).astype(np.float32) for t in types]
    got = []
    for fused in (False, True):
        with pytest.MonkeyPatch.context() as m, hostrun.device(order) as cp:
            if not fused:
                without_epilogues(m)
            f = gpu.compile_function(_prog(fn, types), [f"a{k}" for k in range(len(xs))], "f")
            got.append([y.get() for y in f.run(*(cp.asarray(x) for x in xs))])
            if fused:
                (k,) = [f.kernels[i] for i, s in enumerate(f.plan.steps) if s.then is not None][-1:]
                assert "_epi(grp, L, tot," in k.source or "__syncwarp();" in k.source
    assert len(got[0]) == len(got[1]) and all(np.array_equal(a, b) for a, b in zip(*got))
    if case == "forward":                                     # and y is a layer norm, to float32's accuracy
        x = xs[0].astype(np.float64)
        xc = x - x.mean(1, keepdims=True)
        want = xc / np.sqrt((xc * xc).mean(1, keepdims=True) + 1e-5)
        np.testing.assert_allclose(got[1][0], want, rtol=0, atol=64 * 48 * np.finfo(np.float32).eps)


def _gpt_step(seed, fused: bool, precision="fp32"):
    with pytest.MonkeyPatch.context() as m:
        if not fused:
            without_epilogues(m)
        step = cg.compile_model(nn.gpt(8, 64, 96, d=64, heads=2, layers=2), loss=nn.softmax_cross_entropy,
                                optimizer=nn.adamw(0.01), backend="cupy-emulated", donate=True, precision=precision)
    params = step.init_params(seed=0)
    rng = np.random.default_rng(seed)
    x, y = (rng.integers(0, 96, size=step.x_type.shape) for _ in range(2))
    return step.fn("step").compiled, step.step({k: v.copy() for k, v in params.items()}, x, y)


def test_a_gpt_step_launches_less_with_the_same_bits(rng):
    """Each layer norm's normalisation runs in its sum's kernel, forward and backward."""
    seed = int(rng.integers(1 << 30))
    (f0, off), (f1, on) = (_gpt_step(seed, s) for s in (False, True))
    layer_norms = 2 * 2 + 1
    assert f1.plan.launches <= f0.plan.launches - layer_norms
    # the kernel's arrays are all live while it runs: the peak may grow by the arrays only its sums read (the
    # unfused glue frees them before it makes the epilogue's outputs), never by more
    only = sum(f1.plan.program.types[v].size * 4 for s in f1.plan.steps if s.then is not None
               for v in {v for part in kernel_arrays(s, f1.plan)[:-1] for v in part}
               if v not in epilogue_inputs(s) and v not in s.outputs)
    assert memory.peak(f1) <= memory.peak(f0) + only
    assert off.keys() == on.keys() and all(np.array_equal(off[k], on[k]) for k in off)


def _host_gpt_step(fused: bool, order: str, precision: str):
    """An AdamW step of a two-layer GPT whose plan takes every kind of move this pass makes (a later sum of terms
    the sums' reader makes, a reader moved past the parameter updates), its CUDA C compiled for the host."""
    with pytest.MonkeyPatch.context() as m:
        if not fused:
            without_epilogues(m)
        with hostrun.device(order) as cp:
            step = cg.compile_model(nn.gpt(4, 16, 13, d=32, heads=2, layers=2), loss=nn.softmax_cross_entropy,
                                    optimizer=nn.adamw(0.01), backend="cupy", donate=True, precision=precision)
            rng = np.random.default_rng(5)
            x, y = (rng.integers(0, 13, size=step.x_type.shape) for _ in range(2))
            out = step.step({k: cp.asarray(v) for k, v in step.init_params(seed=0).items()}, x, y)
            return step.launches_per_step, {k: v.get() for k, v in out.items()}


@needs_nvcc
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_gpt_step_on_the_host_is_the_same_bits(precision):
    for order in hostrun.ORDERS:
        (n0, off), (n1, on) = (_host_gpt_step(s, order, precision) for s in (False, True))
        assert n1 <= n0 - 20
        assert off.keys() == on.keys() and all(np.array_equal(off[k], on[k]) for k in off), order


def test_bfloat16_storage_narrows_an_epilogues_outputs():
    """Under ``precision="bf16"`` a layer norm's output only products read is stored as bfloat16 by the sum
    kernel that makes it: as many values narrowed as without the pass."""
    (f0, _), (f1, _) = (_gpt_step(0, s, "bf16") for s in (False, True))
    made = {v: s for s in f1.plan.steps if s.kind == "reduce" and s.then is not None for v in s.then.outputs}
    assert set(made) & f1.plan.narrow
    assert len(f1.plan.narrow) == len(f0.plan.narrow)
    k = next(f1.kernels[i] for i, s in enumerate(f1.plan.steps)
             if s.kind == "reduce" and set(s.outputs) & f1.plan.narrow and s.then)
    assert f"unsigned short {k.name}_bf16(float x)" in k.source
    assert "dtype=xp.uint16" in f1.python
