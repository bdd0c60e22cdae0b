"""``passes.choose_summed``: a group that only sums read is not launched, each sum makes its terms; ``group_sums``:
sums of one geometry share a kernel (small programs whose answer is known, then GPT steps: the same bits on the
emulated backend, fewer launches)."""
from __future__ import annotations

import sys

import numpy as np
import pytest

import circuitgrad as cg
from circuitgrad import nn, ops
from circuitgrad.backends import gpu
from circuitgrad.backends.gpu import memory
from circuitgrad.backends.gpu.host import run as hostrun
from circuitgrad.backends.gpu.plan import plan as make_plan

from _plans import program, sum_to, without_epilogues
from _tolerance import assert_sums_close

ok, why = hostrun.available()
needs_nvcc = pytest.mark.skipif(not ok, reason=f"host execution mode unavailable: {why}")

X = cg.NdArrayType((64, 48), cg.float32)
M = cg.NdArrayType((48, 48), cg.float32)


def _prog(fn, types=(X,)):
    return program(fn, types)


def _squares(x):
    """A row's sum of squares about its mean: ``d = x − mean``, ``Σ d²``, as a layer norm computes it."""
    mean = sum_to(x, (64, 1)) * (1 / 48)
    d = x - ops.broadcast_to(mean, (64, 48))
    return sum_to(d * d, (64, 1))


@pytest.fixture(autouse=True)
def _alone():
    """The passes under test alone: no epilogues (:mod:`~.epilogue` takes the sums' readers and later sums into
    their kernels; tests/test_gpu_epilogue.py tests them together)."""
    with pytest.MonkeyPatch.context() as m:
        without_epilogues(m)
        yield


@pytest.fixture
def without_pass():
    """Plans made with ``choose_summed`` off: every group launched, its results stored and read back."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(sys.modules["circuitgrad.backends.gpu.plan"], "choose_summed", lambda st: None)
        without_epilogues(m)
        yield


def _kinds(p):
    return [s.kind for s in p.steps if s.kind not in ("view", "const")]


def test_a_group_only_a_sum_reads_is_made_in_the_sum():
    p = make_plan(_prog(_squares))
    assert _kinds(p) == ["reduce", "reduce"]                    # the mean's sum, then Σ d² making its terms
    first, second = (s for s in p.steps if s.kind == "reduce")
    assert not first.remat
    assert sorted(type(a.op).__name__ for a in second.remat) == ["Add", "Mul", "Neg", "Scale"]
    assert set(second.inputs) == {p.program.inputs[0], first.outputs[0]}      # x and the row sum: never d·d


def test_without_the_pass_the_group_is_launched(without_pass):
    p = make_plan(_prog(_squares))
    assert _kinds(p) == ["reduce", "fused", "reduce"]
    assert not any(s.remat for s in p.steps if s.kind == "reduce")


def _also_read(x):
    """``d·d`` read by a sum and by an elementwise kernel: stored, and summed from memory."""
    mean = sum_to(x, (64, 1)) * (1 / 48)
    d = x - ops.broadcast_to(mean, (64, 48))
    sq = d * d
    return sum_to(sq, (64, 1)), ops.tanh(sq) @ ops.constant(M, 1.0)


def _transposed(x):
    """``d·d`` summed through a transpose: a term's index is not its element's."""
    d = x * x
    return sum_to(ops.transpose(d), (48, 1))


def _output(x):
    d = x * 3.0
    return sum_to(d, (64, 1)), d


WIDE = cg.NdArrayType((48, 96), cg.float32)


def _held(x):
    """``u·v`` of two products that die there, summed after other work (``tanh`` of a product twice as wide, so
    not in ``u·v``'s group): the sum would hold ``u`` and ``v`` through it, twice the bytes of the ``u·v`` it
    replaces."""
    u, v = x @ ops.constant(M, 0.5), x @ ops.constant(M, 0.25)
    w = ops.tanh(x @ ops.constant(WIDE, 2.0)) @ ops.constant(cg.NdArrayType((96, 48), cg.float32), 2.0)
    return sum_to(u * v, (64, 1)) + sum_to(w, (64, 1))


KEPT = {"read by a kernel too": _also_read, "read through a layout": _transposed, "an output": _output,
        "inputs held longer": _held}


@pytest.mark.parametrize("case", list(KEPT))
def test_groups_kept(case):
    """A result another kernel reads, one a sum reads through a layout, an output, and one whose inputs would be
    held for the sum in more bytes than it has stay in memory."""
    p = make_plan(_prog(KEPT[case]))
    assert not any(s.remat for s in p.steps if s.kind == "reduce")
    assert any(s.kind == "fused" or s.then is not None for s in p.steps)     # a kernel of its own, or an epilogue


B = cg.NdArrayType((1, 48), cg.float32)


def _update_before_the_sum(w, x):
    """A bias-like ``w``: its update ``w + Σ x`` (donated into ``w``) runs first, ``Σ w·(x M)`` after the product."""
    upd = w + sum_to(x, (1, 48))
    m = x @ ops.constant(M, 0.5)
    return upd, sum_to(ops.broadcast_to(w, (64, 48)) * m, (64, 1))


@pytest.mark.parametrize("extra", [0, 1])
def test_a_group_of_more_than_PARTIAL_instructions_is_kept(extra):
    from circuitgrad.backends.gpu.passes import PARTIAL

    def f(x):
        for _ in range(PARTIAL + extra):
            x = ops.tanh(x)
        return sum_to(x, (64, 1))
    p = make_plan(_prog(f))
    assert [len(s.remat) for s in _reduce_steps(p)] == [0 if extra else PARTIAL]


@pytest.mark.parametrize("pointers", [2, 3])
def test_a_sum_takes_at_most_POINTERS_arguments(pointers, monkeypatch):
    """``Σ (x − mean)²`` takes x, the row sums and its output: three pointers."""
    from circuitgrad.backends.gpu import passes
    monkeypatch.setattr(passes, "POINTERS", pointers)
    assert [bool(s.remat) for s in _reduce_steps(make_plan(_prog(_squares)))] == [False, pointers >= 3]


def test_held_inputs_keep_a_group_only_where_work_runs_before_the_sum(monkeypatch):
    """``_held``'s group is kept for its held inputs alone: with the bytes compared the other way, it is summed."""
    from circuitgrad.backends.gpu import passes
    prog = _prog(_held)
    assert not any(s.remat for s in _reduce_steps(make_plan(prog)))
    monkeypatch.setattr(passes, "_work_between", lambda st, g, sums: False)
    assert any(s.remat for s in _reduce_steps(make_plan(prog)))


def _held_anyway(x):
    """``_held``, but ``u·v`` is read again after the sums, by the kernel that makes it again (its group's result
    is recomputed there, :func:`~.passes.choose_unstored`): ``u`` and ``v`` stay in memory until then anyway, so
    holding them for the sum costs nothing, as in a layer norm's backward."""
    u, v = x @ ops.constant(M, 0.5), x @ ops.constant(M, 0.25)
    t = u * v
    w = ops.tanh(x @ ops.constant(WIDE, 2.0)) @ ops.constant(cg.NdArrayType((96, 48), cg.float32), 2.0)
    r = sum_to(-t, (64, 1)) + sum_to(w, (64, 1))
    return t * ops.broadcast_to(r, (64, 48))


def test_inputs_read_later_anyway_are_not_held():
    """The held inputs are those no kernel reads at the sum or later, counting the kernels that make their
    reader's results again: ``_held_anyway``'s ``−u·v`` is made in its sum (``_held``'s is not)."""
    p = make_plan(_prog(_held_anyway))
    assert [sorted(type(a.op).__name__ for a in s.remat) for s in _reduce_steps(p)] == [["Mul", "Neg"]]
    assert not any(type(a.op).__name__ == "Neg" for s in p.steps if s.kind == "fused" for a in s.instrs)
    (last,) = [s for s in p.steps if s.kind == "fused" and s.remat]
    assert [type(a.op).__name__ for a in last.remat] == ["Mul", "Add"]        # u·v made again, and r


def _inner_reads_w(w, x):
    """``g = e·m`` recomputes the small group ``e = exp(w)`` (2 × 48, read through a broadcast): g's sum would
    read ``w`` itself, which its update (donated) overwrites before the sum runs."""
    upd = w + sum_to(x, (1, 48))
    m = x @ ops.constant(M, 0.5)
    e = ops.exp(ops.broadcast_to(w, (2, 48)))
    wide = ops.reshape(ops.broadcast_to(ops.reshape(e, (2, 1, 48)), (2, 32, 48)), (64, 48))
    return upd, sum_to(wide * m, (64, 1))


def test_the_inputs_of_the_groups_a_group_recomputes_are_checked_too():
    prog = _prog(_inner_reads_w, (B, X))
    w, upd = prog.inputs[0], prog.outputs[0]
    assert any(s.remat for s in _reduce_steps(make_plan(prog, data=[prog.inputs[1]])))
    assert not any(s.remat for s in _reduce_steps(make_plan(prog, data=[prog.inputs[1]], updates={w: upd})))


def test_a_donated_input_updated_before_the_sum_is_not_read_there():
    prog = _prog(_update_before_the_sum, (B, X))
    w, upd = prog.inputs[0], prog.outputs[0]
    taken = make_plan(prog, data=[prog.inputs[1]])
    assert [len(s.remat) > 0 for s in taken.steps if s.kind == "reduce"] == [False, True]   # the sum makes w·m
    kept = make_plan(prog, data=[prog.inputs[1]], updates={w: upd})
    assert not any(s.remat for s in kept.steps if s.kind == "reduce")         # w is overwritten before the sum
    (product,) = [s for s in kept.steps if s.kind == "fused" and any(type(a.op).__name__ == "Mul" for a in s.instrs)]
    assert w in product.inputs


def _run_emulated(prog, xs, summed: bool):
    with pytest.MonkeyPatch.context() as m:
        without_epilogues(m)
        if not summed:
            m.setattr(sys.modules["circuitgrad.backends.gpu.plan"], "choose_summed", lambda st: None)
        f = gpu.compile_function(prog, [f"a{k}" for k in range(len(xs))], "f", emulate=True)
    return f, f.run(*xs)


@pytest.mark.parametrize("fn", [_squares, _also_read, _output, _held_anyway],
                         ids=["squares", "also read", "output", "held anyway"])
def test_the_emulated_sums_are_the_same_bits(fn, rng):
    """The terms made in the sum are the values the group stored: the same sums, bit for bit."""
    x = rng.normal(size=X.shape).astype(np.float32)
    prog = _prog(fn)
    (f_off, off), (f_on, on) = (_run_emulated(prog, [x], s) for s in (False, True))
    assert len(off) == len(on) and all(np.array_equal(a, b) for a, b in zip(off, on))
    assert (f_on.plan.launches < f_off.plan.launches) == (fn in (_squares, _held_anyway))
    assert memory.peak(f_on) <= memory.peak(f_off)


@needs_nvcc
@pytest.mark.parametrize("order", hostrun.ORDERS)
def test_terms_made_in_the_sum_on_the_host(order, rng):
    """The generated kernel, compiled by nvcc for the host: ``Σ (x − mean)²`` against NumPy in float64."""
    x = rng.normal(size=X.shape).astype(np.float32)
    with hostrun.device(order) as cp:
        f = gpu.compile_function(_prog(_squares), ["a"], "f")
        (got,) = f.run(cp.asarray(x))
        got = got.get()
    (k,) = [f.kernels[i] for i, s in enumerate(f.plan.steps) if s.kind == "reduce" and s.remat]
    assert "_term(" in k.source and len(k.inputs) == 2
    x64 = x.astype(np.float64)
    mean = x.sum(1, keepdims=True, dtype=np.float32).astype(np.float64) / 48
    d2 = (x64 - mean) ** 2
    assert_sums_close(got, d2.sum(1, keepdims=True), 48, d2.sum(1, keepdims=True))


def _gpt_step(rng, summed: bool):
    make = lambda: nn.gpt(8, 64, 96, d=64, heads=2, layers=2)        # noqa: E731
    with pytest.MonkeyPatch.context() as m:
        if not summed:
            for name in ("choose_summed", "group_sums"):
                m.setattr(sys.modules["circuitgrad.backends.gpu.plan"], name, lambda st: None)
        step = cg.compile_model(make(), loss=nn.softmax_cross_entropy, optimizer=nn.adamw(0.01),
                                backend="cupy-emulated", donate=True)
    params = step.init_params(seed=0)
    x, y = (rng.integers(0, 96, size=step.x_type.shape) for _ in range(2))
    out = step.step({k: v.copy() for k, v in params.items()}, x, y)
    return step.fn("step").compiled, out


def test_a_gpt_step_launches_less_with_the_same_bits(rng):
    """Every layer norm's ``(x − mean)²`` and the backward's sums of products are made in their sums, and sums of
    one geometry share a kernel: fewer launches, a peak no higher, the same parameters bit for bit."""
    seed = int(rng.integers(1 << 30))
    (f_off, off), (f_on, on) = (_gpt_step(np.random.default_rng(seed), s) for s in (False, True))
    layer_norms = 2 * 2 + 1
    assert f_on.plan.launches <= f_off.plan.launches - layer_norms
    assert memory.peak(f_on) <= memory.peak(f_off)
    assert off.keys() == on.keys() and all(np.array_equal(off[k], on[k]) for k in off)


# ------------------------------------------------------------------ sums side by side (passes.group_sums)
def _reduce_steps(p):
    return [s for s in p.steps if s.kind == "reduce"]


TALL = cg.NdArrayType((600, 19), cg.float32)      # column sums of 8 warps a group
LONG = cg.NdArrayType((5, 3000), cg.float32)      # row sums of several warps a row
SIDE = {
    "columns": (TALL, (19,)),
    "rows": (LONG, (5, 1)),
    "small": (X, (48,)),
}


def _three(shape):
    """Three sums of one geometry: two operands as they are, one made (``a·b``)."""
    return lambda a, b: (sum_to(a, shape), sum_to(b, shape), sum_to(a * b, shape))


@pytest.mark.parametrize("case", list(SIDE))
def test_sums_of_one_geometry_share_a_kernel(case):
    t, out = SIDE[case]
    p = make_plan(_prog(_three(out), (t, t)))
    (step,) = _reduce_steps(p)
    assert len(step.instrs) == 3 and len(step.outputs) == 3 and len(step.remat) == 1
    assert set(step.inputs) == set(p.program.inputs)                      # a and b, each read once


def test_a_sum_reading_an_earlier_one_does_not_join_it():
    """``Σ x·s`` reads ``s = Σ x`` (the same geometry): it runs after that kernel, in one of its own."""
    def f(x):
        s = sum_to(x, (64, 1))
        return sum_to(x * ops.broadcast_to(s, (64, 48)), (64, 1))
    assert [len(s.instrs) for s in _reduce_steps(make_plan(_prog(f)))] == [1, 1]


def test_sums_of_other_geometries_or_through_a_layout_do_not_join():
    """``Σ a`` and ``Σ b`` over other axes; ``Σ cᵀ``, of ``Σ a``'s types, reads ``c`` through a transpose."""
    def f(a, b, c):
        return sum_to(a, (64, 1)), sum_to(b, (48,)), sum_to(ops.transpose(c), (64, 1))
    p = make_plan(_prog(f, (X, X, cg.NdArrayType((48, 64), cg.float32))))
    assert [len(s.instrs) for s in _reduce_steps(p)] == [1, 1, 1]


def test_at_most_SUMS_sums_a_kernel():
    from circuitgrad.backends.gpu.passes import SUMS
    n = SUMS + 2
    p = make_plan(_prog(lambda *xs: tuple(sum_to(x, (48,)) for x in xs), (X,) * n))
    assert [len(s.instrs) for s in _reduce_steps(p)] == [SUMS, 2]


@pytest.mark.parametrize("case", list(SIDE))
def test_sums_side_by_side_are_each_sum_alone_bit_for_bit(case, rng):
    """On the emulated backend, and for sums of operands as they are (additions alone, in the same order) in
    the host mode too, where the two operands are also summed apart, in kernels of their own."""
    t, out = SIDE[case]
    a, b = (rng.normal(size=t.shape).astype(np.float32) for _ in range(2))
    prog = _prog(_three(out), (t, t))
    (_, alone), (_, side) = (_run_emulated(prog, [a, b], s) for s in (False, True))
    assert all(np.array_equal(u, v) for u, v in zip(alone, side))
    if not ok:
        pytest.skip(f"host execution mode unavailable: {why}")
    with hostrun.device("reverse") as cp:
        f = gpu.compile_function(_prog(lambda a, b: _three(out)(a, b)[:2], (t, t)), ["a", "b"], "f")
        assert [len(s.instrs) for s in _reduce_steps(f.plan)] == [2]
        together = [y.get() for y in f.run(cp.asarray(a), cp.asarray(b))]
        apart = [gpu.compile_function(_prog(lambda a: sum_to(a, out), (t,)), ["a"], "g").run(cp.asarray(v))[0].get()
                 for v in (a, b)]
    assert all(np.array_equal(u, v) for u, v in zip(together, apart))
    for got, v in zip(together, (a, b)):
        lead = v.ndim - len(out)
        axes = tuple(range(lead)) + tuple(lead + i for i, d in enumerate(out) if d == 1)
        want = v.astype(np.float64).sum(axis=axes, keepdims=True).reshape(out)
        mag = np.abs(v.astype(np.float64)).sum(axis=axes, keepdims=True).reshape(out)
        assert_sums_close(got, want, v.size // int(np.prod(out)), mag)


def test_cupys_own_sum_is_refused_where_a_sum_makes_its_terms():
    """The glue's fallback to CuPy's ``.sum`` (``bench/gpu_sums.py`` builds a step so) takes one stored operand."""
    from circuitgrad.backends.gpu import runtime
    p = make_plan(_prog(_squares))
    ks = {i: k for i, k in runtime.kernels(p).items() if p.steps[i].kind != "reduce"}
    with pytest.raises(ValueError, match="^a sum that makes its terms, shares a kernel or has an epilogue needs its generated kernel$"):
        runtime.generate(p, ks, ["x"], "f")
