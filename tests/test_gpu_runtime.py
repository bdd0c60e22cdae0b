"""The runtime glue as a device runs it: what a device would hit at step 0, checked without one.

``fake_cupy`` stands in for CuPy with the rules that matter here: its arrays are a NumPy subclass
that counts every read back to the host (``get``, ``bool``, ``int``, ``float``, ``item``), its
``ascontiguousarray`` refuses a NumPy array (as CuPy's does), its ``asarray`` keeps Fortran
order, and every kernel launch (the emulated kernel) first checks that each argument is a device
array (CuPy passes a size-1 NumPy array by value) and C-contiguous (kernels index linearly).
"""
from __future__ import annotations

import re
import sys
import types

import numpy as np
import pytest

import circuitgrad as cg
from circuitgrad import arguments, nn, ops
from circuitgrad.backends import gpu
from circuitgrad.backends.gpu import runtime
from circuitgrad.backends.gpu.host import check as hostcheck
from circuitgrad.backends.gpu.host import emulated_kernel
from circuitgrad.interpret import run as interpret
from circuitgrad.rewrite import simplify


class DeviceArray(np.ndarray):
    """A 'device' array: NumPy arithmetic, but every read back to the host is recorded in ``SYNCS``."""

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ctypes.data, False), "version": 3}

    def get(self):
        SYNCS.append("get")
        return np.array(self)

    def _sync(name):  # noqa: N805
        def read(self, *a):
            SYNCS.append(name)
            return getattr(np.ndarray, name)(self, *a)
        return read

    __bool__, __int__, __float__, __index__ = _sync("__bool__"), _sync("__int__"), _sync("__float__"), _sync("__index__")
    item, tolist = _sync("item"), _sync("tolist")


SYNCS: list[str] = []


def _device(r):
    return r.view(DeviceArray) if isinstance(r, np.ndarray) and not isinstance(r, DeviceArray) else r


def _make_fake():
    m = types.ModuleType("cupy")
    m.ndarray = DeviceArray

    def asarray(a, dtype=None):
        return _device(np.asarray(a, dtype=dtype))           # keeps Fortran order, as CuPy's

    def ascontiguousarray(a, dtype=None):
        if not isinstance(a, DeviceArray):
            raise TypeError(f"Unsupported type {type(a)}")      # CuPy refuses host arrays here
        return _device(np.ascontiguousarray(a, dtype=dtype))

    m.asarray, m.ascontiguousarray = asarray, ascontiguousarray
    m.get_array_module = lambda *a: m if any(isinstance(x, DeviceArray) for x in a) else np
    as_strided = lambda *a, **k: _device(np.lib.stride_tricks.as_strided(*a, subok=True, **k))  # noqa: E731
    m.lib = types.SimpleNamespace(stride_tricks=types.SimpleNamespace(as_strided=as_strided))

    def __getattr__(name):
        f = getattr(np, name)
        return (lambda *a, **k: _device(f(*a, **k))) if callable(f) and not isinstance(f, type) else f
    m.__getattr__ = __getattr__
    return m


def strict_launcher(p, index, kern):
    run = emulated_kernel(p, index, kern)

    def launch(grid, block, args):
        for k, a in enumerate(args):
            assert isinstance(a, DeviceArray), f"{kern.name}: argument {k} is a host {type(a).__name__}"
            assert a.flags.c_contiguous, f"{kern.name}: argument {k} is not C-contiguous"
        run(grid, block, args)
    return launch


@pytest.fixture
def fake_cupy(monkeypatch):
    fake = _make_fake()
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(gpu, "available", lambda: (True, "fake device"))
    monkeypatch.setattr(gpu, "_launchers", lambda cupy: lambda p, ks: {i: strict_launcher(p, i, k)
                                                                         for i, k in ks.items()})
    # a device array for circuitgrad.arguments, though a NumPy subclass (as it is from this change on)
    monkeypatch.setattr(arguments, "_on_device", lambda a: hasattr(a, "__cuda_array_interface__"))
    SYNCS.clear()
    return fake


def _gpt(backend, donate=False):
    return cg.compile_model(nn.gpt(2, 4, 11, d=12, heads=3, layers=1), loss=nn.softmax_cross_entropy,
                            optimizer=nn.adamw(1e-2), backend=backend, donate=donate)


def _mlp(backend, donate=False):
    return cg.compile_model(nn.mlp(8, [4, 6, 3]), loss=nn.softmax_cross_entropy, optimizer=nn.momentum(0.1),
                            dtype=cg.float64, backend=backend, donate=donate)


def _host(params):
    return {k: np.array(v) for k, v in params.items()}


# ------------------------------------------------------------------ item 1
def test_set_learning_rate_keeps_the_rate_on_the_device(fake_cupy, rng):
    step = _gpt("cupy")
    params = step.init_params(0)
    assert all(isinstance(v, DeviceArray) for v in params.values())
    params = nn.set_learning_rate(params, 3e-3)
    lr = params["adam/lr"]
    assert isinstance(lr, DeviceArray) and lr.shape == () and lr.dtype == np.float32
    assert float(np.array(lr)) == pytest.approx(3e-3)
    x, y = rng.integers(0, 11, (2, 4)), rng.integers(0, 11, (2, 4))
    out = step.step(params, fake_cupy.asarray(x), fake_cupy.asarray(y))   # the launcher refuses host arrays
    assert isinstance(out["adam/lr"], DeviceArray) and out["adam/lr"].shape == ()
    ref = _gpt("numpy")
    want = ref.step(nn.set_learning_rate(ref.init_params(0), 3e-3), x, y)
    for k in want:    # Adam moves a parameter with a vanishing gradient (k_b0) by up to ±2·lr on rounding noise
        np.testing.assert_allclose(np.array(out[k]), want[k], rtol=2e-4, atol=2.1 * 3e-3, err_msg=k)


def test_host_parameters_are_copied_to_the_device(fake_cupy, rng):
    step = _gpt("cupy")
    params = _host(step.init_params(0))            # NumPy arrays, the 0-d learning rate included
    x, y = rng.integers(0, 11, (2, 4)), rng.integers(0, 11, (2, 4))
    out = step.step(params, x, y)
    assert all(isinstance(v, DeviceArray) for v in out.values())


# ------------------------------------------------------------------ item 2
@pytest.mark.parametrize("donate", [False, True])
def test_a_column_major_parameter_is_updated_correctly(fake_cupy, donate, rng):
    step, ref = _mlp("cupy", donate), _mlp("numpy")
    host = ref.init_params(1)
    x, y = rng.normal(size=(8, 4)), rng.integers(0, 3, 8)
    params = {k: fake_cupy.asarray(np.array(v, order="F")) for k, v in host.items()}   # e.g. cupy.asarray(W_torch.T)
    assert not params["W0"].flags.c_contiguous
    out = step.step(params, fake_cupy.asarray(x), fake_cupy.asarray(y))
    want = ref.step(host, x, y)
    for k in want:
        np.testing.assert_allclose(np.array(out[k]), want[k], rtol=1e-12, atol=1e-14, err_msg=k)


def test_donation_into_c_contiguous_parameters_stays_in_place(fake_cupy, rng):
    step = _mlp("cupy", donate=True)
    params = {k: fake_cupy.asarray(v) for k, v in _host(_mlp("numpy").init_params(1)).items()}
    out = step.step(params, fake_cupy.asarray(rng.normal(size=(8, 4))), fake_cupy.asarray(rng.integers(0, 3, 8)))
    assert any(out[k] is params[k] or np.shares_memory(out[k], params[k]) for k in params)


def test_no_donation_into_an_input_a_later_launch_reads():
    """A donated input must be dead after the launch that overwrites it: with a later launch reading the donor
    (the plan's order patched: the forward product that reads a weight, run again at the end), the update
    kernel writes a fresh buffer instead."""
    from circuitgrad.backends.gpu.elementwise import donations
    from circuitgrad.backends.gpu.plan import Launch, last_readers
    step = _mlp("cupy-emulated", donate=True)
    prog = step.fn("step").program
    pairs = dict(zip(prog.outputs, prog.inputs))
    data = [v for v, n in zip(prog.inputs, step.arg_names["step"]) if n in ("x", "y")]
    p = gpu.plan(prog, data=data)
    ks = runtime.kernels(p, donate_pairs=pairs)
    found = [(i, out, d, j) for i, k in ks.items() for out, d in k.donated.items()
             for j, s in enumerate(p.steps) if s.kind == "matmul" and d in s.inputs]
    assert found, "the MLP's update kernels donate its weights, which products read"
    i, out, donor, j = found[0]
    assert last_readers(p)[donor] == i
    p.steps.append(p.steps[j])                          # a later launch reads the donor
    assert last_readers(p)[donor] == len(p.steps) - 1
    ks2 = runtime.kernels(p, donate_pairs=pairs)
    assert out not in ks2[i].donated
    assert donations(ks2[i], p.steps[i], pairs, i, last_readers(p)).get(out) is None
    src = runtime.generate(p, ks2, step.arg_names["step"], "step", pairs)
    assert f"v{out} = xp.empty(" in src, src
    # a donor read later through a view (its transpose, say) is alive until that read
    p.steps[-1] = Launch("view", [], [donor], [10 ** 6])
    p.steps.append(Launch("matmul", [], [10 ** 6], []))
    assert last_readers(p)[donor] == len(p.steps) - 1


@pytest.mark.parametrize("backend", ["cupy", "cupy-emulated"])
def test_donate_refuses_one_array_given_for_two_parameters(fake_cupy, backend, rng):
    step = _mlp(backend, donate=True)
    xp = fake_cupy if backend == "cupy" else np
    params = {k: xp.asarray(v) for k, v in _host(_mlp("numpy").init_params(1)).items()}
    params["momentum/W0"] = params["W0"]                 # one array for two donated entries
    x, y = rng.normal(size=(8, 4)), rng.integers(0, 3, 8)
    with pytest.raises(ValueError, match=r"^step: parameters 'W0' and 'momentum/W0' are the same array .*donate=True"):
        step.step(params, xp.asarray(x), xp.asarray(y))
    args = [params[k] for k in step.param_names + step.state_names] + [xp.asarray(x), xp.asarray(y)]
    with pytest.raises(ValueError, match=r"^donate=True: parameters 'W0' and 'momentum_W0' are the same array"):
        step.fn("step").run(*args)                       # the compiled function checks too
    params["momentum/W0"] = params["W0"].copy()
    step.step(params, xp.asarray(x), xp.asarray(y))      # distinct arrays: fine
    _mlp(backend).step({**params, "momentum/b0": params["b0"]}, xp.asarray(x), xp.asarray(y))   # no donation: fine


# ------------------------------------------------------------------ item 3
def test_a_fortran_ordered_folded_constant_is_read_in_c_order(fake_cupy, rng):
    T = cg.NdArrayType((5, 5), cg.float64)
    d = cg.trace(lambda x: x * ops.transpose(ops.causal_mask(ops.constant(T, 1.0) + ops.constant(T, 1.0))),
                 [T], name="masked")
    prog = simplify(cg.schedule(d))
    f = runtime.build(prog, ["x"], "masked", fake_cupy, strict_launcher)
    x = rng.normal(size=(5, 5))
    (got,) = f.run(fake_cupy.asarray(x))                     # the launcher refuses a Fortran-ordered array
    assert all(v.flags.c_contiguous for v in f.plan.values.values())
    np.testing.assert_array_equal(np.array(got), x * np.triu(np.full((5, 5), 2.0)))
    (want,) = interpret(prog, [x])
    np.testing.assert_array_equal(np.array(got), want)


# ------------------------------------------------------------------ item 4
def test_a_step_never_reads_the_device(fake_cupy, rng):
    gpt, mlp = _gpt("cupy"), _mlp("cupy")
    ids, labels = fake_cupy.asarray(rng.integers(0, 11, (2, 4))), fake_cupy.asarray(rng.integers(0, 11, (2, 4)))
    pg, pm = gpt.init_params(0), mlp.init_params(0)
    x, y = fake_cupy.asarray(rng.normal(size=(8, 4))), fake_cupy.asarray(rng.integers(0, 3, 8))
    SYNCS.clear()
    for _ in range(2):
        pg = gpt.step(pg, ids, labels)
        pm = mlp.step(pm, x, y)
        mlp.gradients(pm, x, y)
    assert SYNCS == []
    # the same steps from host ids and labels: checked on the host, one-hot encoded on the device
    pg2 = gpt.step(pg, np.array(ids), np.array(labels))
    assert SYNCS == [] and isinstance(pg2["adam/lr"], DeviceArray)


def test_device_labels_are_one_hot_encoded_on_the_device(fake_cupy, rng):
    mlp, ref = _mlp("cupy"), _mlp("numpy")
    host = ref.init_params(0)
    x, y = rng.normal(size=(8, 4)), rng.integers(0, 3, 8)
    got = mlp.step({k: fake_cupy.asarray(v.copy()) for k, v in host.items()}, fake_cupy.asarray(x), fake_cupy.asarray(y))
    want = ref.step(host, x, y)
    for k in want:
        np.testing.assert_allclose(np.array(got[k]), want[k], rtol=1e-12, err_msg=k)


def test_out_of_range_device_ids_and_labels_are_reported_at_the_next_sync(fake_cupy, rng):
    gpt = _gpt("cupy")
    p = gpt.init_params(0)
    good = fake_cupy.asarray(rng.integers(0, 11, (2, 4)))
    bad = fake_cupy.asarray(np.array([[0, 1, 2, 11], [3, 4, 5, 6]]))
    gpt.step(p, bad, good)                             # no wait for the device: not raised yet
    with pytest.raises(ValueError, match=r"step: input x holds ids in \[0, 11\], outside the vocabulary of 11"):
        gpt.check_inputs()
    gpt.check_inputs()                                 # reported once
    gpt.step(p, good, fake_cupy.asarray(np.array([[0, -1, 2, 3], [3, 4, 5, 6]])))
    with pytest.raises(ValueError, match=r"step: targets y must be class labels in 0\.\.10, got values in \[-1, 6\]"):
        gpt.check_inputs()
    with pytest.raises(ValueError, match="loss: input x holds ids"):
        gpt.loss(p, bad, good)                         # loss synchronises anyway: raised at once
    with pytest.raises(ValueError, match="step: input x holds ids"):
        gpt.step(p, np.array(bad), good)               # host ids: checked on the host, at once


def test_every_failing_device_check_is_reported_not_only_the_first(fake_cupy, rng):
    """Bad ids AND bad labels in one step: one error names both (the second is not silently dropped)."""
    gpt = _gpt("cupy")
    p = gpt.init_params(0)
    bad_ids = fake_cupy.asarray(np.array([[0, 1, 2, 11], [3, 4, 5, 6]]))
    bad_labels = fake_cupy.asarray(np.array([[0, -1, 2, 3], [3, 4, 5, 6]]))
    gpt.step(p, bad_ids, bad_labels)
    with pytest.raises(ValueError) as e:
        gpt.check_inputs()
    msg = str(e.value)
    assert msg.startswith("step: input x holds ids in [0, 11]"), msg
    assert "step: targets y must be class labels in 0..10, got values in [-1, 6]" in msg, msg
    gpt.check_inputs()                                 # both reported, none left pending


def test_out_of_range_labels_are_still_refused_at_once_on_numpy(rng):
    for backend in ("numpy", "cupy-emulated"):
        mlp = _mlp(backend)
        with pytest.raises(ValueError, match=r"step: targets y must be class labels in 0\.\.2"):
            mlp.step(mlp.init_params(0), rng.normal(size=(8, 4)), np.full(8, 3))


# ------------------------------------------------------------------ item 6
def _signature(source: str, name: str) -> list[str]:
    m = re.search(r'extern "C" __global__ void ' + re.escape(name) + r"\(([^)]*)\)", source)
    return [p.strip() for p in m.group(1).split(",")]


def test_no_restrict_on_a_donated_input_or_its_output():
    step = cg.compile_model(nn.gpt(2, 4, 11, d=12, heads=3, layers=1), loss=nn.softmax_cross_entropy,
                            optimizer=nn.adamw(1e-2), backend="cupy-emulated", donate=True)
    glue = step.fn("step").source
    donated = dict(re.findall(r"^    (\w+) = (\w+) +# donated buffer$", glue, re.M))
    assert donated
    checked = 0
    for m in re.finditer(r"^    (cg_\w+)\(\(\d+,\), \(\d+,\), \((.*)\)\)", glue, re.M):
        name, args = m.group(1), [a.strip() for a in m.group(2).split(",") if a.strip()]
        params = _signature(glue, name)
        for out, donor in donated.items():
            if out in args:
                for k in (args.index(out), args.index(donor)):
                    assert "__restrict__" not in params[k], f"{name}: {params[k]} aliases a donated buffer"
                    checked += 1
        # the other pointers keep it, but for a row's sums that a sum kernel writes and its later stages read
        # (passed twice: as an output, and as an input)
        twice = {a for a in args if args.count(a) > 1 and not a.startswith("xp.")}
        assert all("__restrict__" in p for k, p in enumerate(params) if args[k] not in donated
                   and args[k] not in donated.values() and args[k] not in twice)
    assert checked >= 2 * len(donated)


def test_kernels_without_restrict_compile():
    if hostcheck.nvcc() is None:
        pytest.skip("nvcc not installed")
    step = _mlp("cupy-emulated", donate=True)
    prog = step.fn("step").program
    g = runtime.build(prog, step.arg_names["step"], "step", np, emulated_kernel,
                      dict(zip(prog.outputs, prog.inputs)))
    ks = [k for k in g.kernels.values() if k.donated]
    assert ks
    hostcheck.compile_host(ks, "double")


# ------------------------------------------------------------------ item 7
def peak_live_bytes(p) -> int:
    """The most bytes of the step's own buffers alive at once, as the glue allocates and ``del``s them
    (caller arrays and hoisted constants not counted; a view keeps its base alive)."""
    prog, src = p.program, p.src
    last: dict[int, int] = {}
    for k, s in enumerate(p.steps):
        for v in s.inputs:
            last[src(v)] = k
    keep = {src(v) for v in prog.outputs}
    owner: dict[int, int | None] = {}
    size: dict[int, int] = {}
    refs: dict[int, set[int]] = {}
    live: set[int] = set()
    peak = 0
    for k, s in enumerate(p.steps):
        if s.kind == "const":
            continue
        for r in s.outputs:
            if s.kind == "view":
                owner[r] = owner.get(src(s.inputs[0]))
            else:
                owner[r] = r
                size[r] = prog.types[r].size * prog.types[r].dtype.numpy_dtype().itemsize
                live.add(r)
            if owner[r] is not None:
                refs.setdefault(owner[r], set()).add(r)
        peak = max(peak, sum(size[b] for b in live))
        for x in {src(x) for x in s.inputs}:
            if last.get(x) == k and x not in keep and owner.get(x) is not None:
                refs[owner[x]].discard(x)
                if not refs[owner[x]]:
                    live.discard(owner[x])
    return peak


def test_optimizer_work_does_not_keep_weight_sized_buffers_alive(monkeypatch):
    """GPT d=32: [B, H, S, S] = 4·4·16·16 elements, as many as a 32×128 weight. Adam's ``b1·m``, ``b2·v``
    and the weight decay read only parameters and state; fused with forward work of that size they ran
    first, and their weight-sized results lived through the whole step. (Measured on the step with its
    attention unfused, with and without the intermediates that later kernels recompute,
    ``passes.choose_unstored``, which lowers both peaks.)"""
    step = cg.compile_model(nn.gpt(4, 16, 11, d=32, heads=4, layers=2), loss=nn.softmax_cross_entropy,
                            optimizer=nn.adamw(1e-3), backend="cupy-emulated")
    prog = step.fn("step").program                 # the scheduled program (no attention kernels)
    data = [v for v, n in zip(prog.inputs, step.arg_names["step"]) if n in ("x", "y")]
    built = runtime.build(prog, step.arg_names["step"], "step", np, emulated_kernel, fuse_attention=False)
    after = gpu.plan(prog, data=data)
    assert after.launches == built.launches
    with monkeypatch.context() as m:
        # the order costs no launch, but for the groups sums make (choose_summed: none with work between) and
        # epilogues (fuse_epilogues: a step moved up past parameter work only if it frees the bytes it makes)
        m.setattr(sys.modules["circuitgrad.backends.gpu.plan"], "choose_summed", lambda st: None)
        m.setattr(sys.modules["circuitgrad.backends.gpu.plan"], "fuse_epilogues", lambda p, updates=None: p.steps)
        assert gpu.plan(prog, data=data).launches == gpu.plan(prog).launches    # no data named: the schedule's order
    with monkeypatch.context() as m:
        m.setattr(sys.modules["circuitgrad.backends.gpu.plan"], "choose_unstored", lambda st: None)
        stored_before, stored_after = gpu.plan(prog), gpu.plan(prog, data=data)
    assert peak_live_bytes(stored_after) <= 0.8 * peak_live_bytes(stored_before)
    assert peak_live_bytes(after) <= 0.8 * peak_live_bytes(stored_after)
    assert peak_live_bytes(built.plan) == peak_live_bytes(after)
