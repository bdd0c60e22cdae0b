"""Transformers and convolutions on the FPGA: every primitive of the vocabulary, and its
reverse derivative, runs on the sequencer bit-exact with the fixed-point interpreter; the new units
(signed rounded division, square root, log, exp of either sign, argmax, eq) match the reference
arithmetic on their edge cases and raise the overflow flag outside their domain; three training steps
of a tiny GPT (softmax and spherical attention) and of a small digits CNN, simulated, equal the
interpreter exactly, with the cycle model exact and no read colliding with a write."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import VOCAB, case_id, vocab_inputs

import circuitgrad as cg
from circuitgrad import nn
from circuitgrad.backends import fpga
from circuitgrad.backends.fpga.isa import MicroOp, Microcode, View, contiguous, legalise, permute_view, reshape_view
from circuitgrad.tracing import apply
from circuitgrad.fixedpoint import div_fixed, exp_fixed, log_fixed, quantize, sqrt_fixed

pytest.importorskip("amaranth")
from circuitgrad.backends.fpga.sim import simulate  # noqa: E402
from circuitgrad.schedule import retype

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from digits_cnn import cnn  # noqa: E402

Q = cg.fixed(16, 8)


# ------------------------------------------------------------------ views
def test_reshape_view_moves_no_data_where_strides_allow_and_says_when_they_do_not():
    base = contiguous(5, (2, 3, 4))
    t = View(5, (4, 3, 2), (1, 4, 12))                        # the transpose of base
    for v, shape in [(base, (6, 4)), (base, (2, 12)), (base, (24,)), (base, (1, 2, 1, 12)),
                     (View(5, (2, 3, 4), (12, 0, 1)), (2, 3, 2, 2)), (t, (4, 3, 2, 1))]:
        r = reshape_view(v, shape)
        assert r is not None and np.array_equal(r.addresses(), v.addresses().reshape(shape)), (v, shape)
    assert reshape_view(t, (12, 2)) is None                   # rows of the transpose are not one stride
    assert reshape_view(View(5, (2, 3, 4), (12, 0, 1)), (6, 4)) is None      # a broadcast axis


def test_legalise_splits_to_two_axes_and_keeps_every_element():
    rng = np.random.default_rng(0)
    for _ in range(50):
        shape = tuple(int(n) for n in rng.integers(1, 4, size=int(rng.integers(1, 5))))
        perm = tuple(int(p) for p in rng.permutation(len(shape)))
        a = permute_view(contiguous(0, tuple(shape[p] for p in np.argsort(perm))), perm)    # any axis order
        assert a.shape == shape
        out = contiguous(100, shape)
        parts = legalise(MicroOp("copy", out, a, source="t"))
        assert all(len(p.out.shape) <= 2 and len(p.a.shape) == len(p.out.shape) for p in parts)
        got_out = np.concatenate([p.out.addresses().reshape(-1) for p in parts])
        got_a = np.concatenate([p.a.addresses().reshape(-1) for p in parts])
        assert sorted(got_out.tolist()) == out.addresses().reshape(-1).tolist()
        pairs = dict(zip(out.addresses().reshape(-1).tolist(), a.addresses().reshape(-1).tolist()))
        assert all(pairs[o] == x for o, x in zip(got_out.tolist(), got_a.tolist()))


# ------------------------------------------------------- every primitive
def _programs(op):
    d = cg.trace(lambda *a: apply(op, *a), op.source, name=op.name)
    yield "forward", retype(cg.schedule(d), Q)
    if op.name not in ("OneHot", "ArgMaxMask"):          # integer ids / a step function: no reverse map
        yield "reverse", retype(cg.schedule(cg.rdiff(d)), Q)


@pytest.mark.parametrize("op", VOCAB, ids=case_id)
def test_every_primitive_and_its_reverse_is_bit_exact_on_the_sequencer(op, rng):
    for what, prog in _programs(op):
        xs = vocab_inputs(op, rng)
        if what == "reverse":                               # the operands, then a cotangent per result
            xs += [quantize(rng.uniform(-2, 2, prog.types[v].shape), Q) for v in prog.inputs[len(op.source):]]
        want = cg.run_fixed(prog, xs)
        mc = fpga.compile_program(prog, Q)
        assert all(np.array_equal(g, w) for g, w in zip(fpga.execute(mc, xs)[0], want)), what
        for ports, macs in [(2, 1), (1, 1), (2, 3)]:
            got, n = simulate(mc, xs, read_ports=ports, macs=macs, check_collisions=True)
            assert all(np.array_equal(g, w) for g, w in zip(got, want)), (what, ports, macs)
            assert n == fpga.cycles(mc, ports, macs)


# -------------------------------------------------------------- the units
def _one_op(kind, a, b=None, K=1):
    """A program of one micro-op over ``a`` (and ``b``): elementwise, or reducing rows of ``K``."""
    n = len(a)
    A, B = contiguous(0, (n,)), contiguous(n, (n,))
    if K == 1:
        out = contiguous(2 * n, (n,))
        u = MicroOp(kind, out, A, B if b is not None else None, source=f"{kind}#0")
    else:
        out = contiguous(2 * n, (n // K,))
        u = MicroOp(kind, out, View(0, (n // K,), (K,), 1), None, K, source=f"{kind}#0")
    mc = Microcode(Q, [u], 3 * n, {}, [A, B], [out])
    return mc, [np.asarray(a, dtype=np.int64), np.zeros(n, dtype=np.int64) if b is None else np.asarray(b)]


H = Q.one // 2
UNITS = {   # kind: (a, b, the reference's value), raw fixed(16, 8); edge cases first
    "div": ([H // 2, -(H // 2), 5, -5, 7, -7, 3, -3, Q.hi, Q.lo, Q.lo, 0, 1000],          # halves round up
            [Q.one, Q.one, 10 * Q.one, 10 * Q.one, -14 * Q.one, -14 * Q.one, 2 * Q.one, -2 * Q.one, Q.hi, Q.one,
             Q.lo, -5, 7 * Q.one],
            lambda a, b: div_fixed(a, b, Q)),
    "sqrt": ([0, 1, 2, 3, 4, Q.one, 2 * Q.one, Q.hi, 255, 12345], None, lambda a, b: sqrt_fixed(a, Q)),
    "log": ([1, 2, 3, Q.one - 1, Q.one, Q.one + 1, 1 << 12, Q.hi, 7, 1000], None, lambda a, b: log_fixed(a, Q)),
    "exp": ([0, -1, 1, -Q.one, Q.one, 4 * Q.one, -30 * Q.one, 1200, Q.lo, 1000], [0, 0, 0, 0, 0, 0, 0, 0, 0, -100],
            lambda a, b: exp_fixed(np.asarray(a) - np.asarray(b), Q)),
    "eq": ([0, 1, 2, 3, Q.lo, Q.hi], [0, 2, 2, -3, Q.lo, Q.lo], lambda a, b: np.where(np.equal(a, b), Q.one, 0)),
}


@pytest.mark.parametrize("ports", [2, 1])
@pytest.mark.parametrize("kind", sorted(UNITS))
def test_each_unit_equals_the_reference_arithmetic_on_its_edge_cases(kind, ports):
    a, b, ref = UNITS[kind]
    mc, xs = _one_op(kind, a, b)
    got, n = simulate(mc, xs, read_ports=ports, check_collisions=True)
    assert np.array_equal(got[0], ref(np.asarray(a, dtype=np.int64), None if b is None else np.asarray(b)))
    assert n == fpga.cycles(mc, ports)


def test_argmax_keeps_the_first_maximum():
    a = [3, 1, 3, 2, -5, -5, -6, -9, 0, 7, 7, 7]             # ties in rows 0, 1 and 2
    mc, xs = _one_op("argmax", a, K=4)
    for ports, macs in [(2, 1), (1, 1), (2, 3)]:
        got, n = simulate(mc, xs, read_ports=ports, macs=macs)
        assert got[0].tolist() == [0, 0, 1] and n == fpga.cycles(mc, ports, macs)


@pytest.mark.parametrize("kind, a, b, what", [
    ("div", [5, 7], [3, 0], "a zero divisor"),
    ("sqrt", [5, -1], None, "a negative radicand"),
    ("log", [5, 0], None, "an operand ≤ 0"),
    ("divf", [5, 7], [3, -1], "a negative dividend or a divisor ≤ 0"),
])
def test_an_operand_outside_a_units_domain_raises_the_overflow_flag(kind, a, b, what):
    mc, xs = _one_op(kind, a, b)
    with pytest.raises(cg.FixedPointOverflow) as e:
        simulate(mc, xs)
    assert str(e.value) == f"{kind}#0 overflowed fixed(16,8) or had {what} in the FPGA simulation"
    with pytest.raises(cg.FixedPointOverflow) as e:
        fpga.execute(mc, xs)
    assert str(e.value) == f"{kind}#0 had {what} on the FPGA"


def test_exp_of_a_large_positive_value_overflows_as_in_the_interpreter():
    mc, xs = _one_op("exp", [Q.one, 6 * Q.one], [0, 0])           # e^6 > 127.99
    with pytest.raises(cg.FixedPointOverflow, match=r"^exp#0 overflowed fixed\(16,8\) in the FPGA simulation$"):
        simulate(mc, xs)


# ------------------------------------------------------------- the models
B, S, V = 1, 4, 8


def _gpt(attention):
    step = cg.compile_model(nn.gpt(B, S, V, d=8, heads=2, layers=1, attention=attention),
                            loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.125), dtype=Q)
    rng = np.random.default_rng(1)
    return step, [(rng.integers(0, V, (B, S)), rng.integers(0, V, (B, S))) for _ in range(3)]


def _cnn():
    step = cg.compile_model(cnn(2, channels=2, dtype=Q), loss=nn.softmax_cross_entropy,
                            optimizer=nn.sgd(0.125), dtype=Q)
    rng = np.random.default_rng(2)
    return step, [(rng.uniform(0, 1, step.x_type.shape), rng.integers(0, 10, 2)) for _ in range(3)]


MODELS = {"gpt-softmax": lambda: _gpt("softmax"), "gpt-spherical": lambda: _gpt("spherical"), "cnn": _cnn}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MODELS))
def test_three_training_steps_on_the_simulated_sequencer_equal_the_interpreter(name):
    step, batches = MODELS[name]()
    design = fpga.compile(step, macs=4)
    params = step.init_params(seed=0)
    for k, (x, y) in enumerate(batches):
        hw, n = fpga.simulate(design, params, x, y, check_collisions=k == 0)
        params = step.step(params, x, y)                  # the fixed-point interpreter
        assert sorted(hw) == sorted(params)
        assert all(np.array_equal(hw[p], np.asarray(params[p])) for p in params), f"step {k}"
        assert n == design.cycles
    on_chip, n = fpga.train(design, step.init_params(seed=0), batches)   # parameters stay in block RAM
    assert all(np.array_equal(on_chip[p], np.asarray(params[p])) for p in params)
    assert n == 3 * design.cycles


def test_an_empty_block_moves_nothing():
    """A concatenation with an empty slice: no micro-op of zero elements reaches the sequencer (whose loop
    bounds would wrap) and the cycle model still counts exactly."""
    from circuitgrad import ops
    d = cg.trace(lambda x: ops.concat([ops.slice(x, ((2, 2, 1), (0, 3, 1))), x], axis=0),
                 (cg.NdArrayType((2, 3)),), name="concat-empty")
    prog = retype(cg.schedule(d), Q)
    xs = [quantize(np.arange(6).reshape(2, 3) - 2.5, Q)]
    mc = fpga.compile_program(prog, Q)
    assert all(u.out.size for u in mc.ops)
    got, n = simulate(mc, xs)
    assert np.array_equal(got[0], cg.run_fixed(prog, xs)[0]) and n == fpga.cycles(mc)


def test_indices_that_do_not_fit_a_word_are_refused_at_compile_time():
    from circuitgrad import primitives as P
    dt = cg.fixed(8, 4)
    op = P.OneHot(cg.NdArrayType((2,), cg.index(300)), cg.NdArrayType((2, 300)))
    prog = retype(cg.schedule(cg.trace(lambda i: apply(op, i), op.source, name="onehot")), dt)
    with pytest.raises(NotImplementedError, match=r"^FPGA backend: OneHot#0 compares indices up to 299, more than "
                                                  r"one fixed\(8,4\) word holds \(127\); use a wider fixed-point "
                                                  r"format$"):
        fpga.compile_program(prog, dt)
    op = P.ArgMaxMask(cg.NdArrayType((1, 100)))                 # 99 fits: the index is not range checked
    prog = retype(cg.schedule(cg.trace(lambda x: apply(op, x), op.source, name="argmax")), dt)
    x = np.zeros((1, 100), dtype=np.int64)
    x[0, 97] = 5
    mc = fpga.compile_program(prog, dt)
    assert np.array_equal(fpga.execute(mc, [x])[0][0], cg.run_fixed(prog, [x])[0])
    assert np.array_equal(simulate(mc, [x])[0][0], cg.run_fixed(prog, [x])[0])


def test_a_batch_of_the_wrong_size_is_refused():
    step = cg.compile_model(nn.mlp(2, [3, 2]), loss=nn.mse, optimizer=nn.sgd(0.125), dtype=Q)
    design = fpga.compile(step, function="predict")
    with pytest.raises(ValueError, match=r"predict: input x"):
        fpga.simulate(design, step.init_params(seed=0), np.zeros((3, 3)))


@pytest.mark.parametrize("cls", ["Unfold", "Fold"])
@pytest.mark.parametrize("img, kernel, stride, padding", [((2, 2, 5, 4), (3, 2), (2, 1), (1, 0)),
                                                          ((1, 1, 5, 5), 3, 2, 2)])
def test_strided_and_asymmetric_blocks_on_the_sequencer(cls, img, kernel, stride, padding, rng):
    from circuitgrad import primitives as P
    op = getattr(P, cls)(cg.NdArrayType(img), kernel, stride=stride, padding=padding)
    d = cg.trace(lambda x: apply(op, x), op.source, name=cls)
    for prog in (retype(cg.schedule(d), Q), retype(cg.schedule(cg.rdiff(d)), Q)):
        xs = [quantize(rng.uniform(-1, 1, prog.types[v].shape), Q) for v in prog.inputs]
        mc = fpga.compile_program(prog, Q)
        got, n = simulate(mc, xs, check_collisions=True)
        assert all(np.array_equal(g, w) for g, w in zip(got, cg.run_fixed(prog, xs))) and n == fpga.cycles(mc)
