"""Streaming attention (:mod:`circuitgrad.backends.gpu.attention`): the compiler finds a step's softmax and
spherical attention cores, replaces each with the four streaming kernels where it qualifies, and the result is the same step: in the
reference interpreter, in NumPy-emulated kernels, and in the generated CUDA C run on the host (both thread
orders); the kernels compile for sm_90, and no ``S×S`` array is left in memory."""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

import _attention
from conftest import ptxas_spills

import circuitgrad as cg
from circuitgrad import nn, ops
from circuitgrad.backends import gpu
from circuitgrad.backends.gpu import attention, attention_source, memory
from circuitgrad.backends.gpu.host import run as hostrun
from circuitgrad.interpret import FLOAT_RULES
from circuitgrad.rewrite import simplify

ok, why = hostrun.available()


def _run(prog, xs):
    """The program in float64, the backend's own instructions by their NumPy ``evaluate``."""
    env = dict(zip(prog.inputs, xs))
    for a in prog.instrs:
        own = getattr(a.op, "evaluate", None)
        args = [env[x] for x in a.args]
        for r, y in zip(a.results, own(*args) if own else FLOAT_RULES[type(a.op)](a.op, *args)):
            env[r] = np.asarray(y)
    return [env[o] for o in prog.outputs]


MODELS = {
    "gpt causal": (lambda: nn.gpt(2, 8, 13, d=24, heads=2, layers=2), nn.softmax_cross_entropy, 13, 2),
    "attention full": (lambda: nn.attention(2, 6, 24, heads=3, causal=False), nn.mse, None, 1),
    "gpt causal spherical": (lambda: nn.gpt(2, 8, 13, d=24, heads=2, layers=2, attention="spherical"),
                             nn.softmax_cross_entropy, 13, 2),
    "attention full spherical": (lambda: nn.attention(2, 6, 24, heads=3, causal=False, kind="spherical"), nn.mse,
                                 None, 1),
}


def _inputs(step, vocab, rng):
    p = step.init_params(seed=0)
    if vocab:
        x, y = rng.integers(0, vocab, size=step.x_type.shape), np.eye(vocab)[rng.integers(0, vocab, size=step.x_type.shape)]
    else:
        x, y = rng.normal(size=step.x_type.shape), rng.normal(size=step.y_type.shape)
    return [p[k] for k in step.param_names] + [x, y]


@pytest.mark.parametrize("name", list(MODELS))
def test_the_fused_gradients_are_the_unfused_ones(name, rng):
    make, loss, vocab, cores = MODELS[name]
    step = cg.compile_model(make(), loss=loss, optimizer=nn.sgd(0.1), dtype=cg.float64)
    prog = step.fn("gradients").program
    fused = attention.fuse(prog)
    kinds = [type(a.op) for a in fused.instrs if isinstance(a.op, attention.OPS)]
    assert kinds == [attention.AttentionForward] * cores + [attention.AttentionGradQ, attention.AttentionGradV,
                                                            attention.AttentionGradK] * cores
    norm = "spherical" if "spherical" in name else "softmax"
    assert {(a.op.norm, a.op.eps) for a in fused.instrs if isinstance(a.op, attention.OPS)} == \
        {(norm, ops.ATTENTION_EPS if norm == "spherical" else 0.0)}
    S = step.x_type.shape[1]
    assert not any(t.ndim == 4 and t.shape[-2:] == (S, S) for a in fused.instrs
                   for t in (fused.types[r] for r in a.results))                # no [B, H, S, S] value is left
    xs = _inputs(step, vocab, rng)
    for got, want in zip(_run(fused, xs), _run(prog, xs)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("make, why_not", [
    (lambda: nn.gpt(2, 8, 13, d=130, heads=1, layers=1), "dh = 130 > 64: a row does not fit the registers"),
    (lambda: nn.gpt(2, 8, 13, d=130, heads=1, layers=1, attention="spherical"), "spherical, dh = 130 > 64"),
])
def test_cores_that_do_not_qualify_keep_their_kernels(make, why_not):
    step = cg.compile_model(make(), loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.1))
    prog = step.fn("step").program
    assert attention.fuse(prog) is prog, why_not


def _normalised(variant: str, eps: float):
    """Scores normalised by hand under the definition's name: per row (spherical attention, with ``eps``), or
    by a sum over the queries (``"colsum"``) or a norm spread along the keys (``"colbcast"``), which are not."""
    from circuitgrad.provenance import scope
    from circuitgrad.tracing import broadcast_to, matmul, mul, reshape, scale, sum_to, transpose

    def f(q, k, v):
        with scope("spherical_attention"):
            s = scale(matmul(q, transpose(k)), 0.5)
            sq = mul(s, s)
            rows = s.shape[:-1] + (1,)
            total = reshape(sum_to(sq, s.shape[:-2] + (1, s.shape[-1])), s.shape[:-1]) if variant == "colsum" \
                else ops.sum(sq, -1)
            r = ops.rsqrt(ops.add_epsilon(total, eps))
            spread = s.shape[:-2] + (1, s.shape[-1]) if variant == "colbcast" else rows
            out = matmul(mul(s, broadcast_to(reshape(r, spread), s.shape)), v)
        return ops.sum(ops.mul(out, v))
    return f


@pytest.mark.parametrize("variant, fused", [("row", True), ("colsum", False), ("colbcast", False)])
def test_only_a_per_row_normalisation_is_spherical_attention(variant, fused, rng):
    """The matcher checks the axis of the sum of squares and of its broadcasts, not only the instructions'
    names; ε is the program's own."""
    T = cg.NdArrayType((2, 3, 8, 4), cg.float64)
    d = cg.trace(_normalised(variant, 1e-3), [T] * 3, name="att")
    for prog in (simplify(cg.schedule(d)), simplify(cg.schedule(cg.rdiff(d)))):
        got = attention.fuse(prog)
        assert (got is not prog) == fused
        if fused:
            assert {a.op.eps for a in got.instrs if isinstance(a.op, attention.OPS)} == {1e-3}
            xs = [rng.normal(size=prog.types[v].shape) for v in prog.inputs]
            for g, w in zip(_run(got, xs), _run(prog, xs)):
                np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("kind", attention.NORMS)
def test_a_core_without_its_forward_output_is_left_alone(kind):
    """The reverse derivative alone (no ``O`` computed) is not the pattern: nothing is replaced."""
    T = cg.NdArrayType((2, 3, 8, 4), cg.float32)
    d = cg.trace(lambda q, k, v: ops.attention(q, k, v, causal=True, kind=kind), [T] * 3, name="att")
    prog = simplify(cg.schedule(cg.rdiff(d)))
    assert attention.fuse(prog) is prog


@pytest.mark.parametrize("kind", attention.NORMS)
def test_the_step_holds_less_memory_and_launches_fewer_kernels(kind):
    make = lambda: nn.gpt(4, 64, 13, d=32, heads=2, layers=2, attention=kind)  # noqa: E731
    step = cg.compile_model(make(), loss=nn.softmax_cross_entropy, optimizer=nn.adamw(1e-3),
                            backend="cupy-emulated", donate=True)
    from circuitgrad.backends.gpu import runtime
    from circuitgrad.backends.gpu.host import emulated_kernel
    f = step.fn("step").compiled
    unfused = runtime.build(step.fn("step").program, step.arg_names["step"], "step", np, emulated_kernel,
                            dict(zip(f.program.outputs, f.program.inputs)), fuse_attention=False)
    assert sum(s.kind == "attention" for s in f.plan.steps) == 6      # dk and dv in one kernel (a quad a row)
    assert f.launches < unfused.launches
    assert memory.peak(f) <= memory.peak(unfused) - 4 * 2 * 64 * 64 * 4         # a layer's S×S scores, at least


@pytest.mark.skipif(not ok, reason=f"host execution mode unavailable: {why}")
@pytest.mark.parametrize("kind", attention.NORMS)
@pytest.mark.parametrize("precision", ["tf32", "bf16"])
def test_dk_and_dv_apart_give_the_kernel_of_both_its_bits(precision, kind, monkeypatch, rng):
    """``fuse(..., together=False)`` gives dk and dv a kernel each where one would take both (the tensor cores
    under tf32 and bf16): a GPT step (its heads' q, k, v strided views of the projections, dk and dv written in
    their readers' order), its CUDA C run on the host, gives the same bits either way: the kernel of both takes
    the same tiles in the same order as each alone."""
    make = lambda: nn.gpt(2, 16, 13, d=32, heads=2, layers=1, attention=kind)  # noqa: E731
    p = cg.compile_model(make(), loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.1)).init_params(seed=0)
    x, y = rng.integers(0, 13, size=(2, 16)), rng.integers(0, 13, size=(2, 16))
    fuse, ops, out = attention.fuse, [], []
    for together in (True, False):
        monkeypatch.setattr(attention, "fuse", lambda prog, mma, t=together: fuse(prog, mma, together=t))
        with hostrun.device() as cp:
            dev = cg.compile_model(make(), loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.1), backend="cupy",
                                   donate=True, precision=precision)
            ops.append([type(a.op).__name__ for a in dev.fn("step").compiled.program.instrs
                        if isinstance(a.op, attention.OPS)])
            out.append({k: v.get() for k, v in dev.step({k: cp.asarray(v) for k, v in p.items()}, x, y).items()})
    assert ops == [["AttentionForward", "AttentionGradQ", "AttentionGradKV"],
                   ["AttentionForward", "AttentionGradQ", "AttentionGradV", "AttentionGradK"]]
    for k in out[0]:
        assert np.array_equal(out[0][k], out[1][k]), k


@pytest.mark.skipif(not ok, reason=f"host execution mode unavailable: {why}")
@pytest.mark.parametrize("kind", attention.NORMS)
@pytest.mark.parametrize("dtype", [cg.float64, cg.float32])
def test_the_generated_kernels_step_as_numpy_does(dtype, kind, rng):
    """The GPT step with streaming attention, its CUDA C compiled for the host and run thread by thread (both
    orders), against the NumPy backend: float64 to 1e-12, float32 within its rounding."""
    make = lambda: nn.gpt(2, 8, 13, d=16, heads=2, layers=2, attention=kind)  # noqa: E731
    ref = cg.compile_model(make(), loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.1), dtype=dtype)
    p = ref.init_params(seed=0)
    x, y = rng.integers(0, 13, size=(2, 8)), rng.integers(0, 13, size=(2, 8))
    want = ref.step(p, x, y)
    tol = 1e-12 if dtype == cg.float64 else 2e-5
    for order in hostrun.ORDERS:
        with hostrun.device(order) as cp:
            dev = cg.compile_model(make(), loss=nn.softmax_cross_entropy, optimizer=nn.sgd(0.1), dtype=dtype,
                                   backend="cupy", donate=True)
            assert sum(s.kind == "attention" for s in dev.fn("step").compiled.plan.steps) == 8
            got = dev.step({k: cp.asarray(v) for k, v in p.items()}, x, y)
            got = {k: v.get() for k, v in got.items()}
        for k in want:
            np.testing.assert_allclose(got[k], want[k], rtol=tol, atol=tol, err_msg=f"{k} {order}")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_the_kernels_compile_for_sm90(tmp_path):
    T = cg.NdArrayType((4, 6, 256, 64), cg.float32)
    strided = {"q": (256 * 384, 64, 384, 1), "k": (256 * 384, 64, 384, 1)}     # a [B, S, H, dh] projection
    code = ""
    for norm in attention.NORMS:
        for causal in (True, False):
            for cls in attention.OPS[:4]:            # a thread per row takes dk and dv apart
                for c in ("float", "double"):
                    op = cls(T, causal, 0.125, norm=norm, eps=1e-6 if norm == "spherical" else 0.0)
                    code += attention_source.source(op, f"k_{norm}_{cls.__name__}_{causal}_{c}", c, strided)[0]
    spills = ptxas_spills(code, tmp_path)
    assert len(spills) == 32, spills
    # a row and its accumulator stay in registers (the dq and dk kernels, with three rows, may spill some)
    two_rows = {n: v for n, v in spills.items() if n.endswith("_float") and ("Forward" in n or "GradV" in n)}
    assert len(two_rows) == 8 and set(two_rows.values()) == {0}, spills


@pytest.mark.parametrize("name", ["gpt causal", "gpt causal spherical"])
def test_a_predict_runs_the_forward_kernel_alone(name, rng):
    """Inference has no reverse derivative: its cores become the forward kernel alone, with the same outputs."""
    make, loss, vocab, cores = MODELS[name]
    step = cg.compile_model(make(), loss=loss, optimizer=nn.sgd(0.1), dtype=cg.float64)
    prog = step.fn("predict").program
    fused = attention.fuse(prog)
    assert [type(a.op) for a in fused.instrs if isinstance(a.op, attention.OPS)] == [attention.AttentionForward] * 2
    xs = _inputs(step, vocab, rng)[:-1]
    np.testing.assert_allclose(_run(fused, xs)[0], _run(prog, xs)[0], rtol=1e-12, atol=1e-14)


@pytest.mark.skipif(not ok, reason=f"host execution mode unavailable: {why}")
@pytest.mark.parametrize("kind", attention.NORMS)
@pytest.mark.parametrize("dtype", [cg.float32, cg.float64])
def test_vector_loads_and_their_fallback_give_the_same_bits(kind, dtype, rng):
    """Streamed rows are read 16 bytes at a time (``float4``, ``double2``) when the operands are 16-byte aligned,
    else one element at a time, in the same order of operations: an operand passed at an 8- or 4-byte offset takes
    the fallback and gives the same bits."""
    T = cg.NdArrayType((1, 2, 12, 8), dtype)
    prog = _attention.step(kind, T)
    xs = [rng.normal(size=T.shape).astype(T.dtype.numpy_dtype()) for _ in range(4)]
    with hostrun.device() as cp:
        f = gpu.compile_function(prog, ["q", "k", "v", "do"], "fb")
        kernels = [k for k in f.kernels.values() if k.ops[0].startswith("Attention")]
        assert len(kernels) == 4 and all("const bool vec = " in k.source for k in kernels)
        aligned = [cp.asarray(x) for x in xs]
        shifted = []
        for x in xs:
            buf = cp.zeros(x.size + 1, dtype=x.dtype)
            buf[1:] = cp.asarray(x.ravel())
            shifted.append(buf[1:].reshape(x.shape))
        assert all(a.data.ptr % 16 == 0 for a in aligned) and all(s.data.ptr % 16 != 0 for s in shifted)
        got = [[o.get() for o in f.run(*args)] for args in (aligned, shifted)]
    for a, b in zip(*got):
        np.testing.assert_array_equal(a, b)
    want = _run(prog, [x.astype(np.float64) for x in xs])
    tol = 1e-12 if dtype == cg.float64 else 2e-5
    for a, w in zip(got[0], want):
        np.testing.assert_allclose(a, w, rtol=tol, atol=tol)


def test_attention_kernels_launch_in_blocks_of_64_threads():
    """A thread holds two or three rows in registers: the attention kernels launch in blocks of
    ``attention_source.BLOCK`` threads, the other kernels in the glue's ``runtime.BLOCK``."""
    import math

    from circuitgrad.backends.gpu import runtime
    step = cg.compile_model(nn.gpt(2, 8, 13, d=24, heads=2, layers=1), loss=nn.softmax_cross_entropy,
                            optimizer=nn.sgd(0.1), backend="cupy-emulated")
    f = step.fn("step").compiled
    launched = {k.name: k for k in f.kernels.values()}
    seen = {"attention": 0, "other": 0}
    for line in f.python.splitlines():
        name = line.strip().split("((")[0]
        if name in launched:
            k = launched[name]
            block = attention_source.BLOCK if k.ops[0].startswith("Attention") else runtime.BLOCK
            assert f"{name}(({math.ceil(k.threads / block)},), ({block},), (" in line, line
            seen["attention" if block == attention_source.BLOCK else "other"] += 1
    assert attention_source.BLOCK == 64 and seen["attention"] == 4 and seen["other"] > 4


@pytest.mark.parametrize("cls, causal, row", [
    (attention.AttentionForward, True, "255LL - t % 256LL"), (attention.AttentionGradQ, True, "255LL - t % 256LL"),
    (attention.AttentionGradV, True, "t % 256LL"), (attention.AttentionGradK, True, "t % 256LL"),
    (attention.AttentionForward, False, "t % 256LL")])
def test_the_longest_causal_rows_come_first(cls, causal, row):
    """A causal query row sees ``row + 1`` keys, a key row ``S − row`` queries: threads take the longest rows
    first (the first blocks start first; short rows fill the tail)."""
    op = cls(cg.NdArrayType((2, 3, 256, 16), cg.float32), causal, 0.25)
    src = attention_source.source(op, "k", "float")[0]
    assert f"const long long bh = t / 256LL, row = {row};" in src
    assert "[t]" not in src                  # L and D are indexed by the row, not by the thread


def _forward_aborts(tmp_path, old: str, new: str, shift_k: bool = False) -> str:
    """A causal forward kernel over ``[1, 1, 8, 8]`` with ``old`` replaced by ``new`` in its source (``shift_k``:
    ``k`` passed 4 bytes past an aligned address), run by the host execution mode in a fresh process, which must
    abort: its standard error."""
    import os
    import sys
    import textwrap
    script = tmp_path / "forward.py"
    script.write_text(textwrap.dedent(f'''
        import numpy as np
        import circuitgrad as cg
        from circuitgrad.backends.gpu import attention, attention_source
        from circuitgrad.backends.gpu.host import run as hostrun
        T = cg.NdArrayType((1, 1, 8, 8), cg.float32)
        src, rows, _ = attention_source.source(attention.AttentionForward(T, True, 0.5), "fw", "float")
        edited = src.replace({old!r}, {new!r})
        assert edited != src
        with hostrun.device() as cp:
            x = cp.asarray(np.ones(T.shape, np.float32))
            k = cp.zeros(T.size + 1, dtype=cp.float32)[1:].reshape(T.shape) if {shift_k!r} else x
            O, L = cp.empty(T.shape, dtype=cp.float32), cp.empty(T.shape[:-1], dtype=cp.float32)
            cp.RawKernel(edited, "fw")((1,), (64,), (x, k, x, O, L))
        print("ran")
    '''))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=dict(os.environ),
                       timeout=600)
    assert r.returncode != 0 and "ran" not in r.stdout, (r.stdout, r.stderr[-2000:])
    return r.stderr


@pytest.mark.skipif(not ok, reason=f"host execution mode unavailable: {why}")
def test_the_host_mode_refuses_a_row_outside_its_operand(tmp_path):
    """A row read past ``S`` would read another array (or fault) on a device, and the guard elements around an
    allocation need not show it: the host execution mode checks each row an attention kernel reads (here the
    forward's loop is made to run one key too far)."""
    err = _forward_aborts(tmp_path, "j < row + 1;", "j < row + 2;")
    assert "circuitgrad hostrun: row 8 of k, which has 8 rows: on a device, an access outside the operand\n" in err, \
        err[-2000:]


@pytest.mark.skipif(not ok, reason=f"host execution mode unavailable: {why}")
def test_the_host_mode_refuses_a_vector_load_a_device_would_fault_on(tmp_path):
    """Were the run-time alignment guard to miss an operand, a device would fault on its 16-byte loads: the host
    execution mode checks each such load's address (here the guard is forced true and ``k`` is shifted by 4 bytes)."""
    err = _forward_aborts(tmp_path, "const bool vec = (", "const bool vec = true || (", shift_k=True)
    assert "circuitgrad hostrun: a 16-byte load of kj from " in err, err[-2000:]
    assert "not 16-byte aligned: on a device, a misaligned address error" in err
