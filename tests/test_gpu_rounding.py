"""``rounding.round_operands``: under ``precision="bf16"`` each array a product multiplies is rounded once, by an
instruction of the program (one per array, its views made again on the rounded copy), which the kernel making
the array runs and stores as bfloat16. Small programs whose answer is known, the same bits with and without the
pass (emulated, and the CUDA C on the host), the C rounding against NumPy's, and GPT steps: no product casts an
operand, fewer arrays moved, no higher peak."""
from __future__ import annotations

import dataclasses
import re
import subprocess
import sys

import numpy as np
import pytest

import circuitgrad as cg
from circuitgrad import nn, ops
from circuitgrad import primitives as P
from circuitgrad.backends import gpu
from circuitgrad.backends.gpu import attention, blas, memory
from circuitgrad.backends.gpu.host import run as hostrun
from circuitgrad.backends.gpu.host.emulate import emulated_kernel
from circuitgrad.backends.gpu.rounding import PRODUCTS, RoundBF16, into_attention, round_operands
from circuitgrad.backends.gpu.runtime import build

from _plans import program

ok, why = hostrun.available()
needs_nvcc = pytest.mark.skipif(not ok, reason=f"host execution mode unavailable: {why}")

X = cg.NdArrayType((64, 48), cg.float32)
W = cg.NdArrayType((48, 32), cg.float32)
Y = cg.NdArrayType((64, 32), cg.float32)


def _forward_backward(x, w, dy):
    """``w`` read by two products (``x @ w`` and ``dy @ wᵀ``), ``t = tanh(x)`` by a product and returned."""
    t = ops.tanh(x)
    return t @ w, dy @ ops.transpose(w), t


def _rounds(prog):
    return [a for a in prog.instrs if isinstance(a.op, RoundBF16)]


def test_each_array_is_rounded_once_and_read_through_its_views():
    prog = program(_forward_backward, (X, W, Y))
    out = round_operands(prog)
    x, w, dy = prog.inputs
    rounds = _rounds(out)
    assert sorted(a.args[0] for a in rounds if a.args[0] in prog.inputs) == [w, dy]       # each argument once
    t = next(a.results[0] for a in prog.instrs if isinstance(a.op, P.Tanh))
    assert [a.args[0] for a in rounds if a.args[0] not in prog.inputs] == [t]
    made = {a.results[0]: a for a in out.instrs}
    for a in out.instrs:
        if isinstance(a.op, PRODUCTS):
            for v in a.args:                     # every operand: a rounded array, or a view of one
                while not isinstance(made[v].op, RoundBF16):
                    assert made[v].op.kind == "view"
                    v = made[v].args[0]
    (tr,) = [a for a in out.instrs if isinstance(a.op, P.Transpose)]
    assert isinstance(made[tr.args[0]].op, RoundBF16) and made[tr.args[0]].args == (w,)


def test_programs_without_float32_products_are_kept():
    prog = program(lambda x: ops.tanh(x) * 2.0, (X,))
    assert round_operands(prog) is prog
    f64 = cg.NdArrayType((4, 4), cg.float64)
    prog = program(lambda a, b: a @ b, (f64, f64))
    assert round_operands(prog) is prog


def _build(prog, rounded: bool, store: bool = True):
    """``prog`` under ``"bf16"`` on ``cupy-emulated``, with the pass or without (``store``: values only products
    read stored as bfloat16)."""
    with pytest.MonkeyPatch.context() as m:
        if not rounded:
            m.setattr(sys.modules["circuitgrad.backends.gpu.runtime"], "round_operands", lambda p: p)
        return build(prog, [f"a{k}" for k in range(len(prog.inputs))], "f", np, emulated_kernel, precision="bf16",
                     store_bf16=store)


def _casts(f):
    """The operands a product still casts: float32 arrays, not stored as bfloat16, that cuBLAS multiplies."""
    p = f.plan
    return [v for s in p.steps if s.kind == "matmul" for v in s.instrs[0].args
            if p.read(p.src(v))[0] not in p.narrow]


def test_the_kernel_making_an_array_stores_its_rounded_copy():
    """``t = tanh(x)`` is read by a product and returned: its kernel writes ``t`` (float32) and the copy the
    product reads (bfloat16); ``w`` and ``dy`` are rounded by a kernel of their own, each once."""
    f = _build(program(_forward_backward, (X, W, Y)), True)
    p = f.plan
    (tanh,) = [s for s in p.steps if any(isinstance(a.op, P.Tanh) for a in s.instrs)]
    assert any(isinstance(a.op, RoundBF16) for a in tanh.instrs)
    assert len([v for v in tanh.outputs if v in p.narrow]) == 1 and len(tanh.outputs) == 2
    assert _casts(f) == []
    own = [s for s in p.steps if s.kind == "fused" and all(isinstance(a.op, RoundBF16) for a in s.instrs)]
    assert sorted(len(s.instrs) for s in own) == [1, 1]           # w and dy: different sizes, a kernel each
    before = _build(program(_forward_backward, (X, W, Y)), False)
    assert len(_casts(before)) == 4                               # t, w twice, dy


@pytest.mark.parametrize("store", [True, False])
def test_the_same_bits_emulated(store, rng):
    prog = program(_forward_backward, (X, W, Y))
    xs = [rng.normal(size=prog.types[v].shape).astype(np.float32) for v in prog.inputs]
    got = _build(prog, True, store=store).run(*xs)
    want = _build(prog, False, store=store).run(*xs)
    assert all(np.array_equal(a, b) for a, b in zip(got, want))


@needs_nvcc
def test_the_same_bits_on_the_host(rng):
    """The CUDA C with the pass (rounded copies stored as bfloat16) and without (each product casting its
    operands), compiled for the host."""
    prog = program(_forward_backward, (X, W, Y))
    xs = [rng.normal(size=prog.types[v].shape).astype(np.float32) for v in prog.inputs]
    for order in hostrun.ORDERS:
        runs = []
        for rounded in (True, False):
            with pytest.MonkeyPatch.context() as m, hostrun.device(order) as cp:
                if not rounded:
                    m.setattr(sys.modules["circuitgrad.backends.gpu.runtime"], "round_operands", lambda p: p)
                f = gpu.compile_function(prog, ["a0", "a1", "a2"], "f", precision="bf16")
                assert any(isinstance(a.op, RoundBF16) for a in f.program.instrs) == rounded
                runs.append([o.get() for o in f.run(*[cp.asarray(x) for x in xs])])
        assert all(np.array_equal(a, b) for a, b in zip(*runs)), order


@needs_nvcc
def test_the_c_rounding_is_numpys():
    """``cg_round_bf16`` (a rounded copy stored as float32: ``"fp32"`` stores nothing narrow) against
    ``blas.round_bf16``, read back exactly through a product with the identity: halfway cases both ways, the
    largest float below the rounding to infinity, subnormals and random values."""
    bits = np.array([0x3F808000, 0x3F818000, 0x3F80FFFF, 0x3F807FFF, 0x7F7F7FFF, 0x00000001, 0x807FFFFF,
                     0x00008000, 0x3F800000], np.uint32)
    rng = np.random.default_rng(3)
    x = np.concatenate([bits.view(np.float32), rng.normal(size=64 * 32 - len(bits)).astype(np.float32)])
    x = x.reshape(64, 32)
    prog = round_operands(program(lambda a, b: a @ b, (cg.NdArrayType((64, 32), cg.float32),
                                                        cg.NdArrayType((32, 32), cg.float32))))
    with hostrun.device() as cp:
        f = gpu.compile_function(prog, ["a", "b"], "f", precision="fp32")
        assert not f.plan.narrow and any("cg_round_bf16(" in k.source for k in f.kernels.values())
        (got,) = f.run(cp.asarray(x), cp.asarray(np.eye(32, dtype=np.float32)))
        got = got.get()
    assert np.array_equal(got.view(np.uint32), blas.round_bf16(np, x).view(np.uint32))
    assert not np.array_equal(got, x)


def _gpt(rounded: bool, precision: str = "bf16", copies: bool = True):
    """A two-layer GPT's step under ``precision`` (emulated) and its parameters after one step; ``rounded``: with
    :func:`round_operands`, ``copies``: with :func:`into_attention`."""
    with pytest.MonkeyPatch.context() as m:
        if not rounded:
            m.setattr(sys.modules["circuitgrad.backends.gpu.runtime"], "round_operands", lambda p: p)
        if not copies:
            m.setattr(sys.modules["circuitgrad.backends.gpu.runtime"], "into_attention", lambda p: None)
        step = cg.compile_model(nn.gpt(8, 64, 96, d=64, heads=2, layers=2), loss=nn.softmax_cross_entropy,
                                optimizer=nn.adamw(0.01), backend="cupy-emulated", donate=True, precision=precision)
    params = step.init_params(seed=0)
    rng = np.random.default_rng(7)
    x, y = (rng.integers(0, 96, size=step.x_type.shape) for _ in range(2))
    return step.fn("step").compiled, step.step({k: v.copy() for k, v in params.items()}, x, y)


def test_a_gpt_step_casts_nothing_with_the_same_bits():
    """Every product reads its operands stored as bfloat16; each weight and gradient is rounded once, not once a
    product; the same parameters bit for bit. The peak may grow by the rounded copies alone (a weight's, made
    for the forward product, is alive until the backward's, as PyTorch's autocast keeps its cast)."""
    (f0, off), (f1, on) = _gpt(False), _gpt(True)
    assert _casts(f1) == [] and len(_casts(f0)) > len({f0.plan.read(f0.plan.src(v))[0] for v in _casts(f0)})
    rounds = [a for s in f1.plan.steps for a in s.instrs if isinstance(a.op, RoundBF16)]
    assert len(rounds) == len({a.args[0] for a in rounds})
    inputs = set(f1.plan.program.inputs)
    weights = [s for s in f1.plan.steps if s.kind == "fused" and all(isinstance(a.op, RoundBF16) and a.args[0] in inputs
                                                                     for a in s.instrs)]
    sizes = {f1.plan.program.types[a.args[0]].size for s in weights for a in s.instrs}
    assert len(weights) == len(sizes) and sum(len(s.instrs) for s in weights) >= 2 * 6   # a kernel a size
    assert off.keys() == on.keys() and all(np.array_equal(off[k], on[k]) for k in off)
    copies = sum(f1.plan.program.types[a.results[0]].size * 2 for a in rounds)
    assert memory.peak(f1) <= memory.peak(f0) + copies


def test_other_precisions_are_unchanged():
    f, _ = _gpt(True, "fp32")
    assert not any(isinstance(a.op, RoundBF16) for a in f.program.instrs)


def test_a_constant_operand_is_rounded_at_compile_time(rng):
    """Folded with the constant (no kernel); uploaded as float32, so its product still casts it."""
    prog = program(lambda x: ops.tanh(x) @ ops.constant(W, 0.3), (X,))
    f = _build(prog, True)
    assert not [s for s in f.plan.steps if all(isinstance(a.op, RoundBF16) for a in s.instrs) and s.kind == "fused"]
    (c,) = [a.results[0] for a in f.program.instrs if isinstance(a.op, RoundBF16) and a.args[0] in f.plan.values]
    assert np.array_equal(f.plan.values[c], blas.round_bf16(np, np.full(W.shape, 0.3, np.float32)))
    assert [f.plan.read(f.plan.src(v))[0] for v in _casts(f)] == [c]
    x = rng.normal(size=X.shape).astype(np.float32)
    assert np.array_equal(f.run(x)[0], _build(prog, False).run(x)[0])


def _host_steps(rounded: bool, graph: bool, order: str, narrow: bool = True, d: int = 32, seq: int = 16,
                kernels: list | None = None):
    """Three AdamW steps of a two-layer GPT (width ``d``, two heads, ``seq`` tokens) under ``"bf16"``, its CUDA C
    compiled for the host; ``narrow=False``: nothing stored as bfloat16 (:mod:`~.storage`); ``kernels``: gets
    the step's kernels."""
    with pytest.MonkeyPatch.context() as m:
        if not rounded:
            m.setattr(sys.modules["circuitgrad.backends.gpu.runtime"], "round_operands", lambda p: p)
        if not narrow:
            m.setattr(sys.modules["circuitgrad.backends.gpu.storage"], "bf16_operands", lambda p: frozenset())
        with hostrun.device(order) as cp:
            step = cg.compile_model(nn.gpt(4, seq, 13, d=d, heads=2, layers=2), loss=nn.softmax_cross_entropy,
                                    optimizer=nn.adamw(0.01), backend="cupy", donate=True, precision="bf16",
                                    graph=graph)
            if kernels is not None:
                kernels.extend(step.fn("step").compiled.kernels.values())
            p = {k: cp.asarray(v) for k, v in step.init_params(seed=0).items()}
            rng = np.random.default_rng(5)
            for _ in range(3):
                x, y = (rng.integers(0, 13, size=step.x_type.shape) for _ in range(2))
                p = step.step(p, x, y)
            return {k: v.get() for k, v in p.items()}


@needs_nvcc
@pytest.mark.parametrize("order", hostrun.ORDERS)
def test_gpt_steps_on_the_host_are_the_same_bits(order):
    """With and without the pass, and replayed as a CUDA graph (its second and third steps); with it, the attention
    kernels store the copies of their results (:func:`into_attention`)."""
    off = _host_steps(False, False, order)
    for graph in (False, True):
        on = _host_steps(True, graph, order)
        assert off.keys() == on.keys() and all(np.array_equal(off[k], on[k]) for k in off), graph


@needs_nvcc
def test_gpt_steps_with_heads_of_32_on_the_host_are_the_same_bits():
    """dh = 32: the bf16 kernels read eight columns of a row (two products' operands), and each dq kernel stores
    dO's copy from those registers, reading dO through its strided view of the projection's gradient."""
    kernels: list = []
    off = _host_steps(False, False, hostrun.ORDERS[0], d=64, seq=32)
    on = _host_steps(True, False, hostrun.ORDERS[0], d=64, seq=32, kernels=kernels)
    dq = [k for k in kernels if k.ops[0] == "AttentionGradQ"]
    assert len(dq) == 2 and all(k.ops == ["AttentionGradQ", "RoundBF16"] and "cg_st4p(&OUT_" in k.source for k in dq)
    assert off.keys() == on.keys() and all(np.array_equal(off[k], on[k]) for k in off)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_the_glue_deletes_only_what_it_made(precision):
    """Every name a GPT step's glue deletes was assigned before, and every view it builds is read after: a sum that
    joined an earlier kernel reads its operand's reshape through the base, so the reshape is not built (its
    ``del`` named a variable never assigned before the glue skipped such views). Every array it allocates is
    deleted or returned: the base of a view it does not build is freed where that view was (it was kept to the
    end: a bf16 step's dq and dk)."""
    f, _ = _gpt(True, precision)
    lines = f.python.splitlines()
    returned = set(re.findall(r"\w+", lines[-1].split("return", 1)[1]))
    for k, line in enumerate(lines):
        if "= xp.empty(" in line or "= _matmul(" in line:
            name = line.strip().split(" = ", 1)[0]
            assert name in returned or any(later.strip().startswith("del ") and re.search(rf"\b{name}\b", later)
                                           for later in lines[k + 1:]), line
    made = set(f.python.split("(", 1)[1].split(")", 1)[0].replace(" ", "").split(","))       # the arguments
    for k, line in enumerate(lines):
        body = line.strip()
        if body.startswith("del "):
            gone = [n.strip() for n in body[4:].split(",")]
            assert set(gone) <= made, (k, line)
            made -= set(gone)
        elif " = " in body and not body.startswith(("def ", "C")):
            name = body.split(" = ", 1)[0]
            made.add(name)
            if "# view" in body:
                assert any(re.search(rf"\b{name}\b", later) for later in lines[k + 1:]), line


def _rounds_only(s) -> bool:
    return s.kind == "fused" and all(isinstance(a.op, RoundBF16) for a in s.instrs)


def _attention_results(plan) -> dict[int, int]:
    """Each result of an attention launch, and each input it reads whole (``Attention.copied``): the launch's
    index."""
    made = {plan.src(x): k for k, s in enumerate(plan.steps) if s.kind == "attention"
            for x, n in zip(s.instrs[0].args, s.instrs[0].op.ins.split()) if n in s.instrs[0].op.copied}
    made.update((plan.src(v), k) for k, s in enumerate(plan.steps) if s.kind == "attention" for v in s.instrs[0].results)
    return made


def test_attention_kernels_store_the_copies_of_their_results():
    """The launches that only rounded attention results (or dO, which the dq kernel reads whole and the dk and dv
    kernel multiplies) are gone: each attention kernel writes the copies (bfloat16 bits, as it writes the results),
    the same bits; the peak grows by dq's and dO's copies at most (made before dk and dv's kernel, not after it)."""
    (f0, off), (f1, on) = _gpt(True, copies=False), _gpt(True)
    made0, made1 = _attention_results(f0.plan), _attention_results(f1.plan)
    gone = [s for s in f0.plan.steps if _rounds_only(s) and all(f0.plan.src(a.args[0]) in made0 for a in s.instrs)]
    assert len(gone) == 6 and f1.launches == f0.launches - len(gone)     # of two layers: O's, dO's, dq, dk, dv's
    assert not [s for s in f1.plan.steps if _rounds_only(s) and any(f1.plan.src(a.args[0]) in made1 for a in s.instrs)]
    copied = {a.args[0]: a.results[0] for s in f1.plan.steps if s.kind == "attention" for a in s.then.instrs}
    assert {f0.plan.src(a.args[0]) for s in gone for a in s.instrs} == set(copied)
    for k, s in enumerate(f1.plan.steps):
        if s.kind == "attention":
            op, kern = s.instrs[0].op, f1.kernels[k]
            results = list(s.instrs[0].results)
            name = {copied[v]: n for n, v in zip(op.outs.split(), results) if v in copied}
            name.update((copied[x], n) for n, x in zip(op.ins.split(), s.instrs[0].args) if x in copied)
            assert name and s.outputs[:len(results)] == results and set(s.outputs[len(results):]) == set(name)
            assert set(name) <= f1.plan.narrow and "(unsigned short)(cg_bits(cg_bf16r(acc" in kern.source
            assert ("dO" in name.values()) == isinstance(op, attention.AttentionGradQ)
            # the kernel's parameters: its results, then the copies in the order of the launch's outputs
            sig = re.search(r'extern "C" __global__ void \w+\(([^)]*)\)', kern.source).group(1)
            params = re.findall(r"\b(\w+)_(?:out|rnd)\b", sig)
            assert params == op.outs.split() + [name[v] for v in s.outputs[len(results):]]
            assert all(f"unsigned short* __restrict__ {n}_rnd" in kern.source for n in name.values())
    assert off.keys() == on.keys() and all(np.array_equal(off[k], on[k]) for k in off)
    dq = max(f1.plan.program.types[v].size for v in copied)
    assert memory.peak(f1) <= memory.peak(f0) + 2 * 2 * dq


def test_a_rounding_after_other_work_stays_a_launch():
    """Only a rounding right after the attention kernels making its arrays (views between them aside) joins them:
    one after other work (a copy made again for the backward, :mod:`~.recompute`) would keep its copy alive
    longer."""
    f0, _ = _gpt(True, copies=False)
    made = _attention_results(f0.plan)
    steps = list(f0.plan.steps)
    first = next(k for k, s in enumerate(steps) if _rounds_only(s) and all(f0.plan.src(a.args[0]) in made
                                                                          for a in s.instrs))
    other = next(s for s in steps if s.kind == "fused" and not _rounds_only(s))
    view = next(s for s in steps if s.kind == "view")
    for between, joins in ((other, False), (view, True)):
        plan = dataclasses.replace(f0.plan, steps=steps[:first] + [between] + steps[first:])
        into_attention(plan)
        assert (steps[first] in plan.steps) is not joins
        assert (plan.steps[first - 1].then is not None) is joins
        assert len(plan.steps) == len(steps) + 1 - (len([s for s in steps if _rounds_only(s) and all(
            f0.plan.src(a.args[0]) in made for a in s.instrs)]) - (0 if joins else 1))


@needs_nvcc
def test_copies_stored_as_float32_on_the_host():
    """Where a copy is not stored as bfloat16 (here nothing is), the attention kernel writes the rounded float:
    the same bits (products round their float32 operands again: that the copy itself is rounded,
    :func:`test_an_attention_kernels_copies_are_its_results_rounded`)."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(sys.modules["circuitgrad.backends.gpu.storage"], "bf16_operands", lambda p: frozenset())
        f, _ = _gpt(True)
    assert "float* __restrict__ O_rnd" in f.cuda_source and "= cg_bf16r(acc" in f.cuda_source
    off = _host_steps(False, False, hostrun.ORDERS[0])
    on = _host_steps(True, False, hostrun.ORDERS[0], narrow=False)
    assert off.keys() == on.keys() and all(np.array_equal(off[k], on[k]) for k in off)


@needs_nvcc
@pytest.mark.parametrize("store", ["unsigned short", "float"])
@pytest.mark.parametrize("dh", [16, 64])
def test_an_attention_kernels_copies_are_its_results_rounded(store, dh, rng):
    """Each tensor-core kernel's copies, run on the host: its results rounded to bfloat16 (nearest even), as
    bfloat16 bits or as floats, with the results themselves unchanged (dk and dv's copies in the other order);
    the dq kernel's copy of its input dO likewise (a lane's four or eight columns of a row, dh 16 and 64; causal
    or not; the copy 16-byte aligned, or one element off, where each value is stored alone)."""
    with hostrun.device() as cp:
        copies_against_plain(cp, store, dh, rng)


def copies_against_plain(cp, store: str, dh: int, rng) -> None:
    """:func:`test_an_attention_kernels_copies_are_its_results_rounded` in ``cp``'s memory (the host mode's, or a
    device's: ``tests/test_gpu_device.py``)."""
    from circuitgrad.backends.gpu import attention, attention_mma, storage
    from test_gpu_storage import _operands, _run_kernel
    T = cg.NdArrayType((1, 2, 32, dh), cg.float32)
    x = _operands(T, rng)
    x["dO"] = rng.normal(size=T.shape).astype(np.float32)      # a float32 gradient, which its copy rounds
    dtype = np.uint16 if store == "unsigned short" else np.float32
    for cls, rounded, causal, shift in ((attention.AttentionForward, ["O"], True, 0),
                                        (attention.AttentionGradQ, ["dq", "dO"], True, 0),
                                        (attention.AttentionGradQ, ["dO"], False, 0),
                                        (attention.AttentionGradQ, ["dO"], True, 1),
                                        (attention.AttentionGradKV, ["dv", "dk"], True, 0)):
        op = cls(T, causal, 0.25, mma="bf16")
        names, outs = op.ins.split(), op.outs.split()
        plain, warps, _ = attention_mma.source(op, "k")
        src, _, params = attention_mma.source(op, "k", rounded={n: store for n in rounded})
        assert params == names + outs + [f"{n}_rnd" for n in rounded]
        args = [cp.asarray(x[n]) for n in names]
        want = _run_kernel(cp, op, plain, "k", warps, args)
        results = [cp.empty(T.shape[:-1] if n in "LD" else T.shape, dtype=np.float32) for n in outs]
        copies = [cp.zeros(T.size + shift, dtype=dtype)[shift:].reshape(T.shape) for _ in rounded]
        assert all((c.data.ptr % 16 != 0) == bool(shift) for c in copies)
        cp.RawKernel(src, "k")((-(-warps * 32 // 128),), (128,), (*args, *results, *copies))
        got, copies = [r.get() for r in results], [c.get() for c in copies]
        assert all(np.array_equal(g, w) for g, w in zip(got, want)), cls.__name__
        for n, c in zip(rounded, copies):
            y = want[outs.index(n)] if n in outs else x[n]
            expect = storage.to_bf16_bits(y) if store == "unsigned short" else blas.round_bf16(np, y)
            assert np.array_equal(c, expect) and not np.array_equal(blas.round_bf16(np, y), y), (cls.__name__, n)


_MISALIGNED_STORE = """
import sys
import numpy as np
import circuitgrad as cg
from circuitgrad.backends.gpu import attention, attention_mma
from circuitgrad.backends.gpu.host import run as hostrun
store = sys.argv[1]
T = cg.NdArrayType((1, 1, 16, 16), cg.float32)
op = attention.AttentionGradQ(T, True, 0.25, mma="bf16")
src, warps, _ = attention_mma.source(op, "f", rounded={"dO": store})
assert src.count("const bool vst = ((") == 1
src = src.replace("const bool vst = ((", "const bool vst = true || ((")      # the alignment check left out
dtype = np.uint16 if store == "unsigned short" else np.float32
with hostrun.device() as cp:
    x = [cp.ones(T.shape[:-1] if n == "L" else T.shape, dtype=np.float32) for n in op.ins.split()]
    outs = [cp.empty(T.shape[:-1] if n == "D" else T.shape, dtype=np.float32) for n in op.outs.split()]
    copy = cp.zeros(T.size + 1, dtype=dtype)[1:].reshape(T.shape)
    cp.RawKernel(src, "f")((1,), (128,), (*x, *outs, copy))
print("ran")
"""


@needs_nvcc
@pytest.mark.parametrize("store, bytes_", [("unsigned short", 8), ("float", 16)])
def test_the_host_mode_refuses_a_misaligned_store_of_a_copy(store, bytes_, tmp_path):
    """The dq kernel stores four values of dO's copy at once only where the run-time check finds the copy
    aligned: a kernel that skipped the check would fault on a device, and the host mode aborts (in a fresh
    process)."""
    r = subprocess.run([sys.executable, "-c", _MISALIGNED_STORE, store], capture_output=True, text=True,
                       timeout=600, cwd=tmp_path)
    assert r.returncode != 0 and "ran" not in r.stdout
    article = "an" if bytes_ == 8 else "a"
    assert f"circuitgrad hostrun: {article} {bytes_}-byte store to p at 0x" in r.stderr, r.stderr[-2000:]
    assert f", not {bytes_}-byte aligned: on a device, a misaligned address error\n" in r.stderr
