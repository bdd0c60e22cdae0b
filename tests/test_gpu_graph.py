"""TF32 products, steps replayed as CUDA graphs, and a function's NVRTC modules, without a device: the host
execution mode (:mod:`circuitgrad.backends.gpu.host.run`) records a capture and replays it as a device does, the
cuBLAS operand layouts are checked against a column-major reading of the same memory, and the module's source
is compiled by nvcc for sm_90."""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

import circuitgrad as cg
from circuitgrad import nn
from circuitgrad.backends.gpu import blas, module
from circuitgrad.backends.gpu.host import capture as hostcapture
from circuitgrad.backends.gpu.host import run as hostrun

ok, why = hostrun.available()
needs_host = pytest.mark.skipif(not ok, reason=f"host execution mode unavailable: {why}")


def _gpt():
    return nn.gpt(4, 8, 13, d=24, heads=3, layers=1)


def _compile(**kw):
    return cg.compile_model(_gpt(), loss=nn.softmax_cross_entropy, optimizer=nn.momentum(0.05), backend="cupy",
                            donate=True, **kw)


def _batches(n, rng):
    return [(rng.integers(0, 13, size=(4, 8)), rng.integers(0, 13, size=(4, 8))) for _ in range(n)]


# ------------------------------------------------------------------ graphs
@needs_host
def test_a_graph_step_replays_exactly_the_eager_steps(rng):
    """Four steps on four batches: the graph (captured at step 2, replayed at 2–4) gives the eager steps' bits; the
    parameters keep their buffers from the capture on; the graph records one piece of work per launch."""
    p = cg.compile_model(_gpt(), loss=nn.softmax_cross_entropy, optimizer=nn.momentum(0.05)).init_params(seed=0)
    with hostrun.device() as cp:
        eager, graphed = _compile(), _compile(graph=True)
        qa = {k: cp.asarray(v) for k, v in p.items()}
        qb = {k: cp.asarray(v) for k, v in p.items()}
        ptrs = []
        for x, y in _batches(4, rng):
            qa, qb = eager.step(qa, x, y), graphed.step(qb, x, y)
            for k in qa:
                np.testing.assert_array_equal(qb[k].get(), qa[k].get(), err_msg=k)
            ptrs.append({k: v.data.ptr for k, v in qb.items()})
        g = graphed.fn("step").compiled.graphed
        assert g.captured and len(g.graph.work) == graphed.launches_per_step
        assert ptrs[1] == ptrs[2] == ptrs[3] != ptrs[0]


@needs_host
def test_a_replay_reads_what_its_buffers_hold_at_launch():
    """What a capture records runs at launch on the same buffers: a later write to an input shows; the capture
    itself runs nothing."""
    with hostrun.device() as cp:
        a = cp.asarray(np.arange(4, dtype=np.float32))
        s = cp.cuda.Stream(non_blocking=True)
        with s:
            s.begin_capture()
            b = (a * 2).sum(keepdims=True)
            graph = s.end_capture()
        a[...] = cp.asarray(np.ones(4, dtype=np.float32))
        graph.launch()
        assert b.get().tolist() == [8.0]
        a[...] = cp.asarray(np.full(4, 3, dtype=np.float32))
        graph.launch()
        assert b.get().tolist() == [24.0]


@needs_host
@pytest.mark.parametrize("what, call", [
    ("a read of device memory by the host (get)", lambda cp, a: a.get()),
    ("a host-to-device copy", lambda cp, a: cp.asarray(np.ones(2, dtype=np.float32))),
    ("Stream.synchronize", lambda cp, a: cp.cuda.get_current_stream().synchronize()),
])
def test_a_capture_refuses_what_a_device_refuses(what, call):
    with hostrun.device() as cp:
        a = cp.asarray(np.zeros(2, dtype=np.float32))
        s = cp.cuda.Stream(non_blocking=True)
        with s:
            s.begin_capture()
            try:
                with pytest.raises(RuntimeError) as e:
                    call(cp, a)
            finally:
                s.end_capture()
    assert str(e.value) == (f"the current stream is capturing, so {what} is not permitted (cudaErrorStreamCapture"
                            f"Unsupported): nothing may wait for or read the device during a capture")


@needs_host
def test_a_graph_step_refuses_another_shape(rng):
    with hostrun.device() as cp:
        step = _compile(graph=True)
        q = {k: cp.asarray(v) for k, v in step.init_params(seed=0).items()}
        x, y = _batches(1, rng)[0]
        q = step.step(q, x, y)
        q = step.step(q, x, y)
        f = step.fn("step").compiled
        args = step.arguments("step", q, x, y)
        args[-2] = cp.asarray(np.zeros((4, 9), dtype=args[-2].dtype))
        with pytest.raises(ValueError) as e:
            f.graphed(*args)
    assert str(e.value) == ("graph step: argument x has shape (4, 9) int64, but the graph was captured "
                            "for (4, 8) int64")


@pytest.mark.parametrize("kw, backend, msg", [
    ({"graph": True}, "cupy-emulated", "compile_model: graph=True needs backend='cupy', not 'cupy-emulated'"),
    ({"graph": True, "donate": False}, "cupy",
     "compile_model: graph=True replays the step into the same buffers: pass donate=True too"),
    ({"precision": "tf32"}, "numpy", "compile_model: precision='tf32' is for the GPU (backend='cupy' or "
                                     "'cupy-emulated'); the numpy backend multiplies in the model's dtype"),
    ({"precision": "fp16"}, "cupy-emulated", "compile_model: precision must be one of 'fp32', 'tf32', 'bf16', "
                                             "got 'fp16'"),
    ({"precision": "bf16", "dtype": cg.float64}, "cupy-emulated",
     "compile_model: precision='bf16' rounds float32 products; the model computes in float64"),
])
def test_graph_and_tf32_are_refused_where_they_do_not_apply(kw, backend, msg):
    kw = {"donate": True, **kw}
    if backend == "cupy" and not ok:
        pytest.skip(why)
    ctx = hostrun.device() if backend == "cupy" else _null()
    with ctx, pytest.raises(ValueError) as e:
        cg.compile_model(_gpt(), loss=nn.softmax_cross_entropy, optimizer=nn.momentum(0.05), backend=backend, **kw)
    assert str(e.value) == msg


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


# ------------------------------------------------------------------ TF32
def test_round_bf16_keeps_seven_mantissa_bits_rounding_half_to_even():
    x = np.array([1 + 2 ** -7, 1 + 2 ** -8, 1 + 3 * 2 ** -8, 1 + 2 ** -9, -(1 + 3 * 2 ** -8), 3.0], np.float32)
    want = np.array([1 + 2 ** -7, 1.0, 1 + 2 ** -6, 1.0, -(1 + 2 ** -6), 3.0], np.float32)
    np.testing.assert_array_equal(blas.round_bf16(np, x), want)
    ml = pytest.importorskip("ml_dtypes")
    r = np.random.default_rng(0).normal(size=1000).astype(np.float32)
    np.testing.assert_array_equal(blas.round_bf16(np, r), r.astype(ml.bfloat16).astype(np.float32))


def test_round_tf32_keeps_ten_mantissa_bits_rounding_half_away():
    x = np.array([1 + 2 ** -10, 1 + 2 ** -11, 1 + 3 * 2 ** -11, 1 + 2 ** -12, -(1 + 2 ** -11), 3.0], np.float32)
    want = np.array([1 + 2 ** -10, 1 + 2 ** -10, 1 + 2 ** -9, 1.0, -(1 + 2 ** -10), 3.0], np.float32)
    np.testing.assert_array_equal(blas.round_tf32(np, x), want)


def test_tf32_products_are_the_products_of_rounded_operands(rng):
    """The emulated TF32 step: products of TF32-rounded operands, accumulated in float32 (so it differs from the
    float32 step by about TF32's rounding, 2^-11 relative, not float32's)."""
    a, b = rng.normal(size=(2, 16, 32)).astype(np.float32), rng.normal(size=(2, 32, 8)).astype(np.float32)
    got = blas.matmul(np, "tf32")(a, b)
    want = np.matmul(blas.round_tf32(np, a).astype(np.float64), blas.round_tf32(np, b).astype(np.float64))
    bound = 32 * 2 ** -23 * np.matmul(np.abs(a).astype(np.float64), np.abs(b))
    assert np.all(np.abs(got - want) <= bound)
    assert np.abs(got - np.matmul(a.astype(np.float64), b)).max() > 10 * bound.max()


@needs_host
@pytest.mark.parametrize("precision, dropped", [("tf32", 13), ("bf16", 16)])
def test_a_tensor_core_step_reads_only_rounded_operands(precision, dropped, rng, monkeypatch):
    """Every float32 product of a step compiled with ``precision=`` reads operands already rounded to the tensor
    cores' mantissa (the low ``dropped`` bits zero), in as many products as the float32 step issues; the step
    differs from the float32 one by the rounding.

    The step is not compared bit for bit with the NumPy-emulated one: their elementwise kernels may differ in the
    last float32 bit, and an operand one bit apart can round to the neighbouring TF32 or bfloat16 value."""
    x, y = _batches(1, rng)[0]
    fp = cg.compile_model(_gpt(), loss=nn.softmax_cross_entropy, optimizer=nn.momentum(0.05))
    p = fp.init_params(seed=0)
    plain, products, reference = fp.step(p, x, y), [], []
    with hostrun.device() as cp:
        matmul = cp.matmul
        for seen, kw in ((reference, {}), (products, {"precision": precision})):
            monkeypatch.setattr(cp, "matmul", _recording(matmul, seen), raising=False)
            got = _compile(**kw).step({k: cp.asarray(v) for k, v in p.items()}, x, y)
            got = {k: v.get() for k, v in got.items()}
    floats = [a for a in products if a.dtype == np.float32]
    assert len(floats) == len(reference) >= 2 * 8          # a GPT layer's forward alone has 8 products
    low = np.uint32((1 << dropped) - 1)
    assert all(not np.any(a.view(np.uint32) & low) for a in floats)
    assert any(np.any(a.view(np.uint32) & low) for a in reference)
    assert max(np.abs(plain[k] - got[k]).max() for k in got) > 1e-4


def _recording(matmul, seen: list):
    """``matmul`` that keeps a host copy of both operands of every call in ``seen``."""
    def mm(a, b, *args, **kw):
        seen.extend(np.array(v.get() if hasattr(v, "get") else v) for v in (a, b))
        return matmul(a, b, *args, **kw)
    return mm


# ------------------------------------------------------------------ cuBLAS operand layouts
def _column_major_gemm(A, la, B, lb, shape):
    """What cuBLAS computes for row-major ``C = A @ B`` (called as ``C^T = B^T A^T``): each operand read from its
    flat memory as a column-major matrix with the given ``(op, ld, batch stride)``."""
    *batch, m, k = shape[0]
    n = shape[1][-1]
    count = int(np.prod(batch)) if batch else 1

    def mat(flat, lay, rows, cols, b):           # the (rows × cols) column-major operand after op
        op, ld, stride = lay
        r, c = (rows, cols) if op == blas.OP_N else (cols, rows)
        M = np.array([[flat[b * stride + i + j * ld] for j in range(c)] for i in range(r)])
        return M if op == blas.OP_N else M.T
    out = []
    for b in range(count):
        Bt = mat(B, lb, n, k, b)                 # B^T: n × k
        At = mat(A, la, k, m, b)                 # A^T: k × m
        out.append((Bt @ At).T)                  # (C^T)^T
    return np.array(out).reshape(*batch, m, n)


def _layouts(rng):
    a = rng.normal(size=(3, 4, 5))
    yield "row-major", a, rng.normal(size=(3, 5, 2))
    yield "transposed", np.swapaxes(rng.normal(size=(3, 5, 4)), 1, 2), np.swapaxes(rng.normal(size=(3, 2, 5)), 1, 2)
    yield "2-d transposed", rng.normal(size=(5, 4)).T, rng.normal(size=(5, 2))
    yield "two batch axes", rng.normal(size=(2, 3, 4, 5)), np.swapaxes(rng.normal(size=(2, 3, 2, 5)), 2, 3)
    yield "broadcast batch", np.broadcast_to(rng.normal(size=(1, 4, 5)), (3, 4, 5)), rng.normal(size=(3, 5, 2))
    yield "one row", rng.normal(size=(3, 1, 5)), rng.normal(size=(3, 5, 1))


@pytest.mark.parametrize("i", range(6))
def test_operand_layouts_read_the_same_memory_as_matmul(i, rng):
    name, a, b = list(_layouts(rng))[i]
    la, lb = blas.operand(a.shape, a.strides, 8), blas.operand(b.shape, b.strides, 8)
    assert la is not None and lb is not None, name
    flat = lambda x: np.lib.stride_tricks.as_strided(x, (x.size * 4,), (8,))  # noqa: E731  base memory from x
    A = np.asarray(flat(a)) if not a.flags.c_contiguous else a.reshape(-1)
    B = np.asarray(flat(b)) if not b.flags.c_contiguous else b.reshape(-1)
    np.testing.assert_allclose(_column_major_gemm(A, la, B, lb, (a.shape, b.shape)), np.matmul(a, b), rtol=1e-12,
                               err_msg=name)


@pytest.mark.parametrize("shape, strides", [((4, 5), (8, 40 * 8)), ((3, 4, 5), (20 * 8, 8, 4 * 8 + 8)),
                                            ((2, 3, 4, 5), (20 * 8, 40 * 8, 5 * 8, 8))])
def test_other_layouts_are_copied_first(shape, strides):
    assert blas.operand(shape, strides, 8) is None


# ------------------------------------------------------------------ one module a function
def test_kernels_equal_but_for_their_names_are_one_kernel_of_the_module():
    with hostrun.device() if ok else _null():
        step = cg.compile_model(nn.gpt(4, 8, 13, d=24, heads=3, layers=3), loss=nn.softmax_cross_entropy,
                                optimizer=nn.momentum(0.05), backend="cupy-emulated", donate=True)
    ks = step.fn("step").compiled.kernels
    code, names = module.source(ks)
    assert set(names) == set(ks)
    distinct = {module.canonical(module.renamed(k, "K")) for k in ks.values()}
    assert len(set(names.values())) == len(distinct) < len(ks)
    assert code.count("__global__") == len(distinct)
    for i, k in ks.items():               # each kernel's own text, renamed: its arguments and body are kept
        assert module.canonical(module.renamed(k, names[i])) in code
    layer = [i for i, k in ks.items() if "Add" in k.ops]   # one kernel in each of the three layers, at least
    assert len({names[i] for i in layer}) < len(layer)


def test_local_names_are_numbered_in_order_of_appearance():
    code = "const float r12_3 = in0[i]; const float v40 = r12_3 * w7; out0[i] = v40 + r12_3; // v40"
    assert module.canonical(code) == ("const float cg_t0 = in0[i]; const float cg_t1 = cg_t0 * cg_t2; "
                                      "out0[i] = cg_t1 + cg_t0; // cg_t1")


def _kernels():
    return cg.compile_model(nn.gpt(4, 8, 13, d=32, heads=2, layers=2), loss=nn.softmax_cross_entropy,
                            optimizer=nn.adamw(0.01), backend="cupy-emulated", donate=True).fn("step").compiled.kernels


@pytest.mark.parametrize("parts", [1, 2, 3, 8, 1000])
def test_the_kernels_split_into_modules_of_about_equal_source(parts):
    """``split``: every distinct kernel in exactly one module (at most ``parts``, one at least), every step's
    kernel where it says, the modules' sizes within the largest kernel of each other, the same split each time,
    and one module is :func:`module.source`'s."""
    ks = _kernels()
    code, names = module.source(ks)
    codes, where = module.split(ks, parts)
    distinct = set(names.values())
    assert len(codes) == min(parts, len(distinct)) and set(where) == set(ks)
    for i, (m, n) in where.items():
        assert n == names[i] and f"void {n}(" in codes[m]
    assert sorted(n for c in codes for n in distinct if f"void {n}(" in c) == sorted(distinct)   # once each
    assert sum(c.count("__global__") for c in codes) == len(distinct)
    largest = max(len(module.canonical(module.renamed(k, names[i]))) for i, k in ks.items())
    assert max(map(len, codes)) - min(map(len, codes)) <= largest + len(distinct)    # and a newline a kernel
    assert module.split(ks, parts) == (codes, where)
    if parts == 1:
        assert codes == [code]


class _FakeCupy:
    """RawModules that record the thread and device each compiles on, meeting at a barrier (so that they pass only
    if they compile side by side); ``broken``: the name of a kernel whose module fails to compile."""

    def __init__(self, n: int, broken: str | None = None):
        import threading
        self.local, self.barrier, self.seen, self.broken = threading.local(), threading.Barrier(n, timeout=30), [], broken
        self.lock, self.got = threading.Lock(), []
        outer = self

        class Device:
            def __init__(self, id=None):
                self.id = getattr(outer.local, "device", 0) if id is None else id

            def __enter__(self):
                self.old, outer.local.device = getattr(outer.local, "device", 0), self.id

            def __exit__(self, *exc):
                outer.local.device = self.old

        class RawModule:
            def __init__(self, code):
                self.code, self.compiled = code, 0

            def compile(self):
                outer.barrier.wait()
                with outer.lock:
                    outer.seen.append((threading.get_ident(), getattr(outer.local, "device", 0)))
                if outer.broken and f"void {outer.broken}(" in self.code:
                    raise RuntimeError(f"{outer.broken}: error")
                self.compiled += 1

            def get_function(self, name):
                assert self.compiled == 1 and f"void {name}(" in self.code
                return lambda grid, block, args, **kw: outer.got.append(name)
        self.cuda = type("cuda", (), {"Device": Device})
        self.RawModule = RawModule


def test_modules_compile_side_by_side_on_the_callers_device_at_the_first_launch():
    """``launchers``: nothing compiles before a launch; the first launch compiles every module once, each on its
    own thread (they meet at a barrier) and on the caller's device; each kernel comes from its module."""
    import threading
    ks = _kernels()
    fake = _FakeCupy(3)
    with fake.cuda.Device(2):
        made = module.launchers(fake, 3)(None, ks)
        assert fake.seen == []
        first = next(iter(made))
        made[first]((1,), (32,), ())
        assert len(fake.seen) == 3 and {d for _, d in fake.seen} == {2}
        assert len({t for t, _ in fake.seen}) == 3 and threading.get_ident() not in {t for t, _ in fake.seen}
        for f in made.values():
            f((1,), (32,), ())
    _, where = module.split(ks, 3)
    assert len(fake.seen) == 3 and fake.got == [where[first][1]] + [where[i][1] for i in made]


def test_a_module_that_fails_to_compile_fails_the_first_launch():
    ks = _kernels()
    codes, where = module.split(ks, 2)
    fake = _FakeCupy(2, broken=next(iter(where.values()))[1])
    made = module.launchers(fake, 2)(None, ks)
    with pytest.raises(RuntimeError, match=": error"):
        next(iter(made.values()))((1,), (32,), ())


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_the_modules_compile_for_sm90(tmp_path):
    """A GPT step's kernels as one module and as two (the backend's split on two cores), each with nvcc."""
    step = cg.compile_model(nn.gpt(4, 8, 13, d=32, heads=2, layers=2), loss=nn.softmax_cross_entropy,
                            optimizer=nn.adamw(0.01), backend="cupy-emulated", donate=True)
    ks = step.fn("step").compiled.kernels
    code, names = module.source(ks)
    codes, where = module.split(ks, 2)
    for j, c in enumerate([code] + codes):
        src = tmp_path / f"module{j}.cu"
        src.write_text(c)
        r = subprocess.run(["nvcc", "-arch=sm_90", "-cubin", "-o", str(tmp_path / f"m{j}.cubin"), str(src)],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr[-3000:]
    elf = [(tmp_path / f"m{j}.cubin").read_bytes() for j in range(3)]   # the kernels' names: the ELF's symbols
    for i, (m, n) in where.items():
        assert n.encode() + b"\0" in elf[0] and n.encode() + b"\0" in elf[1 + m]
    assert hostcapture.capturing() is None
