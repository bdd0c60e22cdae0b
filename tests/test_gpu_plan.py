"""GPU backend without a GPU: the fusion plan and the generated glue, run on the CPU with
emulated kernels, compute what the NumPy backend computes; launch counts stay small."""
from __future__ import annotations

import numpy as np
import pytest
from _tolerance import assert_programs_close
from conftest import train_mlp

import circuitgrad as cg
from circuitgrad import nn
from circuitgrad.backends import gpu

MODELS = [
    ("relu-mlp", lambda B: nn.mlp(B, [6, 16, 4]), nn.softmax_cross_entropy, nn.sgd(0.1)),
    ("sigmoid-momentum", lambda B: nn.mlp(B, [5, 8, 8, 3], activation=nn.sigmoid), nn.mse, nn.momentum(0.1)),
    ("tanh-softmax", lambda B: nn.mlp(B, [4, 7, 3], activation=nn.tanh) >> nn.softmax(B, 3, dtype=cg.float32),
     nn.mse, nn.sgd(0.05)),
]


@pytest.mark.parametrize("name,make,loss,opt", MODELS, ids=[m[0] for m in MODELS])
@pytest.mark.parametrize("key", ["predict", "loss", "gradients", "step"])
def test_emulated_gpu_equals_numpy_backend(name, make, loss, opt, key, rng):
    B = 6
    ref = cg.compile_model(make(B), loss=loss, optimizer=opt, dtype=cg.float64)
    emu = cg.compile_model(make(B), loss=loss, optimizer=opt, dtype=cg.float64, backend="cupy-emulated")
    p = ref.init_params(seed=1)
    k = ref.y_type.shape[1]
    x, y = rng.normal(size=(B, ref.x_type.shape[1])), np.eye(k)[rng.integers(0, k, size=B)]
    args = [p[n] for n in ref.param_names]
    if key == "step":
        args += [p[n] for n in ref.state_names]
    args += [x] + ([y] if key != "predict" else [])
    want = ref.fn(key).run(*args)
    got = emu.fn(key).run(*args)
    assert_programs_close(got, want, ref.fn(key).program, args)     # MKL (GEMM, GEMV) vs NumPy, fused or not


def test_training_through_the_gpu_code_path_matches_numpy():
    finals, accs = zip(*(train_mlp("iris", 8, [4, 16, 3], 60, backend) for backend in ("numpy", "cupy-emulated")))
    assert accs[0] == accs[1] >= 0.95
    for k in finals[0]:
        np.testing.assert_allclose(finals[1][k], finals[0][k], rtol=1e-4, atol=1e-5)


def test_launches_per_step_of_the_benchmark_mlp():
    step = cg.compile_model(nn.mlp(128, [784, 256, 256, 10]), loss=nn.softmax_cross_entropy,
                            optimizer=nn.sgd(0.01), backend="cupy-emulated")
    f = step.fn("step")
    kinds = [s.kind for s in gpu.plan(f.program).steps if s.launches]
    assert kinds.count("matmul") == 8                  # 3 forward, 5 backward (dx of the input is dead)
    assert kinds.count("reduce") == 3                  # bias gradients
    assert kinds.count("copy") == 0                    # transposed operands go to cuBLAS as they are
    assert step.launches_per_step == len(kinds) <= 23  # the two 256-element bias updates share a kernel
    assert "cuBLAS" in step.source and 'extern "C" __global__' in step.source


def test_donated_step_updates_parameters_in_place(rng):
    B = 4
    ref = cg.compile_model(nn.mlp(B, [3, 5, 2]), loss=nn.mse, optimizer=nn.sgd(0.1), dtype=cg.float64)
    emu = cg.compile_model(nn.mlp(B, [3, 5, 2]), loss=nn.mse, optimizer=nn.sgd(0.1), dtype=cg.float64,
                           backend="cupy-emulated", donate=True)
    p = ref.init_params(seed=0)
    x, y = rng.normal(size=(B, 3)), rng.normal(size=(B, 2))
    want = ref.step(p, x, y)
    mine = {k: v.copy() for k, v in p.items()}
    got = emu.step(mine, x, y)
    prog = ref.fn("step").program
    assert_programs_close([got[k] for k in want], [want[k] for k in want], prog, [p[k] for k in p] + [x, y])
    for k in want:
        assert np.shares_memory(got[k], mine[k])       # written into the donated buffer
    assert "# donated buffer" in emu.source


def test_cupy_backend_without_a_gpu_is_a_clear_error():
    ok, why = gpu.available()
    if ok:
        pytest.skip("a GPU is available")
    with pytest.raises(RuntimeError) as e:
        cg.compile_model(nn.mlp(2, [2, 2]), loss=nn.mse, optimizer=nn.sgd(0.1), backend="cupy")
    assert str(e.value) == (f"compile_model: backend='cupy' needs CuPy and a CUDA GPU: {why}; "
                            f"use backend='numpy' (or 'auto')")
    auto = cg.compile_model(nn.mlp(2, [2, 2]), loss=nn.mse, optimizer=nn.sgd(0.1), backend="auto")
    assert auto.backend == "numpy"


def test_fixed_point_is_refused_on_the_gpu():
    with pytest.raises(ValueError, match=r"^compile_model: the cupy-emulated backend computes in float32/float64"):
        cg.compile_model(nn.mlp(2, [2, 2]), loss=nn.mse, optimizer=nn.sgd(0.1), dtype=cg.fixed(16, 8),
                         backend="cupy-emulated")


def test_views_are_read_in_place_by_kernels(rng):
    T = cg.NdArrayType((3, 4), cg.float64)
    d = cg.trace(lambda a, b: a.T * b + 1.0, [T, cg.NdArrayType((4, 3), cg.float64)], name="t")
    prog = cg.schedule(d)
    f = gpu.compile_function(prog, ["a", "b"], "t", emulate=True)
    assert ".T" not in f.python and "v2" not in f.python      # no transposed array is built, nor copied
    assert "in0[(i % 3LL) * 4LL + ((i / 3LL) % 4LL)]" in f.cuda_source     # a[c, r] for element (r, c)
    a, b = rng.normal(size=(3, 4)), rng.normal(size=(4, 3))
    (got,) = f.run(a, b)
    np.testing.assert_allclose(got, a.T * b + 1.0, rtol=1e-14)
    assert f.launches == 1                                    # transpose, mul and add: one kernel
    assert "C3" not in f.python                               # the constant 1.0 is a literal, not an array


def test_sink_parameter_work_without_data_inputs_marks_nothing():
    """A program with no ``x``/``y`` input: no instruction is parameter work (nothing to tell it from the rest)."""
    from circuitgrad.backends.gpu.plan import _sink_parameter_work
    cm = cg.compile_model(nn.mlp(4, [3, 5, 2]), loss=nn.mse, optimizer=nn.momentum(0.1), dtype=cg.float32)
    prog = cm.fn("step").program
    moved, free = _sink_parameter_work(prog, set())
    assert free == set() and moved is prog
    data = {v for v, n in zip(prog.inputs, cm.arg_names["step"]) if n in ("x", "y")}
    assert _sink_parameter_work(prog, data)[1]           # with its data inputs, the optimizer work is found
    gpu.plan(prog, data=())                              # plans without data inputs
